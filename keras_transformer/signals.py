"""SIGTERM and SIGINT: stop promptly at any stage, never half-way through a write.

A preempted job gets SIGTERM, a user presses Ctrl-C (SIGINT). Once :func:`install` has run (the
programs call it first), either signal raises :class:`Interrupted` at the next Python line, so a
stage in progress (dev BLEU, evaluation, export) ends at once and its ``finally`` blocks clean
up. Two regions change that:

- :func:`polled` (the training loop): the signal is only recorded; the loop finishes its step,
  saves a checkpoint and stops, reading :func:`received`;
- :func:`deferred` (renames that must happen together): the signal is raised when the region ends.

:func:`raising` restores the raise-at-once behaviour inside a polled region (an evaluation during
training). A received signal stays received: :func:`check` raises it again before a new stage.

On a multi-worker job the workers stop as one: the training loop votes on a received signal in
every step, and a worker whose peer received one records it with :func:`received_by_peer`, so
every worker skips the same stages and exits with the same status.
"""

import contextlib
import signal
import threading
from typing import Iterator, Optional

HANDLED = (signal.SIGTERM, signal.SIGINT)
_RAISE, _POLL, _DEFER = "raise", "poll", "defer"

_modes = [_RAISE]
_received: Optional[int] = None
_from_peer = False
_installed = False


class Interrupted(BaseException):
    """A SIGTERM or SIGINT arrived. Like KeyboardInterrupt it is not an ``Exception``, so
    ``except Exception`` blocks let it through; ``exit_status`` is 128 + the signal number."""

    def __init__(self, signum: int, from_peer: bool = False):
        super().__init__(signum)
        self.signum = signum
        self.name = signal.Signals(signum).name
        self.exit_status = 128 + signum
        self.from_peer = from_peer

    def __str__(self):
        return f"stopped by {self.name}" + (" (sent to another worker of the job)"
                                            if self.from_peer else "")


def _handler(signum, frame):
    global _received
    if _received is not None:
        # Already stopping (a Ctrl-C reaches a whole process group, then its parent forwards
        # it): a second signal must not interrupt the clean-up of the first.
        return
    _received = signum
    if _modes[-1] == _RAISE:
        raise Interrupted(signum)


def install() -> bool:
    """Routes SIGTERM and SIGINT here (main thread only; elsewhere Python cannot); returns whether
    it did."""
    global _installed
    if threading.current_thread() is not threading.main_thread():
        return False
    for signum in HANDLED:
        signal.signal(signum, _handler)
    _installed = True
    return True


def reclaim() -> None:
    """Routes SIGTERM and SIGINT here again if :func:`install` did before. TensorFlow's
    coordination service (started by ``MultiWorkerMirroredStrategy``) installs a C-level SIGTERM
    handler of its own for its preemption notifier, silently replacing Python's: without this, a
    worker would never see SIGTERM."""
    if _installed and threading.current_thread() is threading.main_thread():
        for signum in HANDLED:
            signal.signal(signum, _handler)


def received_by_peer(signum: int) -> None:
    """Another worker of this job received ``signum`` (the training loop learns it from the
    step's votes): from now on this process behaves as if it had received it too."""
    global _received, _from_peer
    if _received is None:
        _received, _from_peer = signum, True


def received() -> Optional[int]:
    """The first signal received since the start (or :func:`reset`), else None."""
    return _received


def reason(signum: int) -> str:
    """"sigterm" / "sigint": how a summary names a stop by ``signum``."""
    return signal.Signals(signum).name.lower()


def reset() -> None:
    """Forgets a received signal (for tests and notebooks that go on after one)."""
    global _received, _from_peer
    _received, _from_peer = None, False


def check() -> None:
    """Raises :class:`Interrupted` if a signal was received: call before starting a new stage."""
    if _received is not None:
        raise Interrupted(_received, _from_peer)


@contextlib.contextmanager
def _mode(mode: str):
    _modes.append(mode)
    try:
        yield
    finally:
        _modes.pop()


@contextlib.contextmanager
def polled() -> Iterator[None]:
    """Inside, signals are only recorded (see :func:`received`). Installs the handlers for the
    region if no program did, and puts the previous ones back after it."""
    previous = None
    if not _installed and threading.current_thread() is threading.main_thread():
        previous = {signum: signal.getsignal(signum) for signum in HANDLED}
        for signum in HANDLED:
            signal.signal(signum, _handler)
    reclaim()
    try:
        with _mode(_POLL):
            yield
    finally:
        if previous is not None:  # a library caller: it learns of the signal from its result
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            reset()


@contextlib.contextmanager
def raising() -> Iterator[None]:
    """Inside, a signal raises :class:`Interrupted` at once (also one received before)."""
    with _mode(_RAISE):
        check()
        yield


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Inside, a signal waits; it is raised when the region ends (if the region around it
    raises signals at once)."""
    with _mode(_DEFER):
        yield
    if _received is not None and _modes[-1] == _RAISE and _installed:
        raise Interrupted(_received, _from_peer)
