"""What the commands show on the terminal besides their results."""

import contextlib
import sys


def stderr_progress(total: int):
    """A ``progress(n)`` callback drawing a Keras progress bar of ``total`` sentences on stderr,
    so that stdout can carry the results (translations, scores) alone."""
    import keras

    bar = keras.utils.Progbar(total, unit_name="sentence")

    def progress(n):
        with contextlib.redirect_stdout(sys.stderr):
            bar.add(n)

    return progress
