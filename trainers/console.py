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


SETUP_COMMAND = "bash trainers/setup.sh"


def run(main):
    """``absl.app.run(main)``; a Python package missing from this interpreter ends the program
    with one line naming the setup command instead of a traceback."""
    from absl import app

    program = sys.argv[0].rsplit("/", 1)[-1].removesuffix(".py")

    def guarded(argv):
        try:
            return main(argv)
        except ModuleNotFoundError as error:
            sys.exit(f"{program}: error: the Python package {error.name!r} is missing from "
                     f"{sys.executable}; install the project's stack with `{SETUP_COMMAND}` "
                     "(add ` test` for the test extras) and run the command with .venv/bin/python.")

    app.run(guarded)
