"""A pseudo-terminal to give a child process as its stderr: what a person at a terminal sees."""

import os
import threading


class TerminalStderr:
    """Pass ``far_end`` to the child as its stderr, call ``start()`` once the child has it, and
    ``text()`` after the child has ended."""

    def __init__(self):
        self.near_end, self.far_end = os.openpty()
        self.chunks = []
        self.reader = threading.Thread(target=self._drain, daemon=True)

    def start(self):
        os.close(self.far_end)
        self.reader.start()

    def _drain(self):  # a terminal's buffer is small: read it as it comes
        try:
            while chunk := os.read(self.near_end, 1 << 16):
                self.chunks.append(chunk)
        except OSError:  # EIO: the program has ended
            pass

    def text(self):
        self.reader.join(timeout=10)
        os.close(self.near_end)
        return b"".join(self.chunks).decode("utf-8", "replace")
