"""What the commands show on the terminal besides their results."""

import contextlib
import errno
import math
import os
import re
import signal
import sys


def stderr_progress(total: int):
    """A ``progress(n)`` callback drawing a Keras progress bar of ``total`` sentences on stderr,
    so that stdout can carry the results (translations, scores) alone; None when stderr is not a
    terminal: in a log, the bar's redrawing is escape codes and carriage returns on one line."""
    if not sys.stderr.isatty():
        return None
    import keras

    bar = keras.utils.Progbar(total, unit_name="sentence")

    def progress(n):
        with contextlib.redirect_stdout(sys.stderr):
            bar.add(n)

    return progress


def listed(numbers, most: int = 20) -> str:
    """``1, 4, 9`` or, beyond ``most`` numbers, ``1, 4, ... 77 and 12 more``: line numbers for a
    line of stderr that stays one line."""
    more = f" and {len(numbers) - most} more" if len(numbers) > most else ""
    return ", ".join(map(str, numbers[:most])) + more


class Output:
    """A program's result lines: stdout, written and flushed as each part is ready; or the file
    ``path``, written whole at the end (no half-written file is ever left)."""

    def __init__(self, path=None):
        self.path = path
        self.collected = [] if path is not None else None

    def write(self, lines):
        """Writes ``lines`` (each str or UTF-8 bytes, without line breaks)."""
        data = b"".join((line.encode("utf-8") if isinstance(line, str) else line) + b"\n"
                        for line in lines)
        if self.collected is not None:
            self.collected.append(data)
            return
        try:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        except BrokenPipeError:
            # The reader (e.g. `head`) took all it wanted: stop quietly, as other filters do; stdout
            # goes to /dev/null so that the interpreter's last flush cannot fail again.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise SystemExit(128 + signal.SIGPIPE) from None

    def close(self):
        if self.collected is not None:
            from keras_transformer import writing

            writing.write_file(self.path, b"".join(self.collected))


SETUP_COMMAND = "bash trainers/setup.sh"
# The project's wheel, as `python -m build` names it (setup.cfg's name).
DISTRIBUTION_FILES = "keras_transformer_paper-*.whl"


def _main_module_name():
    """``trainers.wmt`` for ``python -m trainers.wmt``, ``benchmarks`` for ``python -m benchmarks``;
    None for a script path or ``python -c``."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec.name.removesuffix(".__main__") if spec is not None else None


def program_name() -> str:
    module = _main_module_name()
    if module is not None:
        return module.rsplit(".", 1)[-1]
    return sys.argv[0].rsplit("/", 1)[-1].removesuffix(".py")


# The name these programs were imported as: ``trainers`` in a clone; installed (a wheel, Colab,
# outside the clone) ``keras_transformer_trainers``, and there is no ``trainers`` to run (setup.cfg).
PACKAGE = __package__


def program_command(name: str) -> str:
    """``python -m trainers.NAME`` under the name these programs run as here (``PACKAGE``)."""
    return f"python -m {PACKAGE}.{name}"


def help_command() -> str:
    """The command that shows this program's own flags, e.g. ``python -m trainers.wmt --help``."""
    module = _main_module_name()
    return f"python -m {module} --help" if module else f"python {sys.argv[0]} --help"


def _remove_autograph_files():
    """What the interpreter's exit would have removed: autograph writes each function it converts
    to a file in the temporary folder (loaded as module ``__autograph_generated_file...``) and
    deletes the files from ``atexit`` hooks, which ``os._exit`` skips."""
    for name, module in list(sys.modules.items()):
        if name.startswith("__autograph_generated_file"):
            with contextlib.suppress(OSError, TypeError):
                os.remove(module.__file__)


def installed_names(text: str) -> str:
    """``text`` with the programs named as they run here: the library's messages name them as a
    clone runs them (``python -m trainers.NAME``; the library cannot import the programs), which
    installed are :func:`program_command`'s."""
    return text.replace("python -m trainers.", f"python -m {PACKAGE}.")


def flag_names(text: str) -> str:
    """``text`` with the library's config fields named as this program's flags: the library
    (used from Python too) names ``train_data='x'`` and ``hold_out=False``, which a program's
    user passes as ``--train_data='x'`` and ``--hold_out=False``. Only the fields that are
    flags of this program are renamed."""
    from absl import flags

    names = sorted((name for name in flags.FLAGS if len(name) > 1), key=len, reverse=True)
    if not names:
        return text
    # Not inside a word, a flag already named (--x=), a path or a quoted value.
    return re.sub(r"(?<![\w\-./'\"])(" + "|".join(map(re.escape, names)) + ")=", r"--\1=", text)


def for_programs(text: str) -> str:
    """A library message as a program's user reads it: programs and flags named as they run here."""
    return flag_names(installed_names(text))


def error_exit(message, status: int = 1):
    """Ends the program with one line ``PROGRAM: error: MESSAGE`` on stderr."""
    text = for_programs(" ".join(str(message).split("\n")))
    print(f"{program_name()}: error: {text}", file=sys.stderr, flush=True)
    sys.exit(status)


def usage_error(message):
    """A bad flag value or argument: one line pointing to the program's own ``--help``, status 2."""
    error_exit(f"{message} (see {help_command()})", status=2)


# The last sentence of a help text saying what a flag without a default stands for (e.g. the
# vocabulary size of each corpus). A program that gives the flag a default drops it.
UNSET_NOTE = " Unset: "


def set_program_default(name, value, note=""):
    """This program's own default for a shared flag. absl shows it as ``(default: ...)``; the
    help's "Unset: ..." sentence, which would contradict it, is dropped, and ``note`` (what the
    flag means in this program alone) is added."""
    from absl import flags

    flags.FLAGS.set_default(name, value)
    flag = flags.FLAGS[name]
    flag.help = " ".join(filter(None, [flag.help.split(UNSET_NOTE)[0], note]))


# The flags that name files or folders (one, or several comma-separated): a "~" starting one is
# the home folder, as the shell expands it in `--model_dir ~/x` but not in `--model_dir=~/x`
# (which made a folder named "~" in the working folder).
PATH_FLAGS = frozenset((
    "model_dir", "model_dirs", "saved_model", "data_dir", "export_dir", "output", "output_dir",
    "input", "train_data", "dev_data", "test_data", "vocab_path", "init_from", "checkpoint",
    "checkpoints", "ding_file", "libreoffice_help_dir", "nbest", "sources"))


def _home(value: str) -> str:
    return ",".join(os.path.expanduser(part) for part in value.split(","))


def parse_flags(argv):
    """absl's parsing (``app.run(main, flags_parser=parse_flags)``) with the project's ends:

    - ``--help`` (``-?``, ``--helpshort``, ``--helpfull``, ``--helpxml``) prints the help and exits
      with status 0 (absl's own exit status is 1);
    - a bad flag value (not a number, out of range, not an enum value, a failed validator or a
      missing required flag), an unknown flag or a stray positional argument: one line pointing
      to the program's ``--help``, status 2, without absl's help dump;
    - ``~`` at the start of a path flag (``PATH_FLAGS``) is the home folder."""
    from absl import flags

    try:
        rest = flags.FLAGS(argv)
    except flags.Error as error:
        usage_error(error)
    except SystemExit as done:
        # absl's help flags end parsing with sys.exit(1) once the help is printed; nothing else
        # in parsing exits. The help was asked for: a success.
        if done.code == 1:
            sys.stdout.flush()
            sys.exit(0)
        raise
    for name in flags.FLAGS:
        value = flags.FLAGS[name].value
        if isinstance(value, float) and not math.isfinite(value):
            usage_error(f"flag --{name}={value}: must be a finite number")
        if name in PATH_FLAGS and value:
            flags.FLAGS[name].value = ([_home(v) for v in value] if isinstance(value, list)
                                       else _home(value))
    if len(rest) > 1:
        usage_error(f"unexpected argument(s) {' '.join(rest[1:])!r}: every option is a --flag")
    return rest


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def _verbosity_given(argv) -> bool:
    return any(arg.split("=", 1)[0] in ("--verbosity", "-v", "--v") for arg in argv[1:])


def quiet_libraries():
    """TensorFlow's, TFDS's and tf.distribute's INFO lines (files opened, devices used, datasets
    cached) off, at their source: TensorFlow's C++ log level before it is imported, absl's and
    TensorFlow's Python loggers at WARNING. Warnings and errors still show; ``--verbosity=0``
    brings the INFO lines back. Call before TensorFlow is imported (the programs import it
    lazily, in ``main``)."""
    import logging as python_logging

    from absl import logging

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    logging.set_verbosity(logging.WARNING)
    python_logging.getLogger("tensorflow").setLevel(python_logging.WARNING)


def run(main):
    """``absl.app.run(main)`` with the project's conventions for what ends a program:

    - a bad flag or a stray argument: one line, status 2 (``app.UsageError`` from ``main`` too);
    - SIGTERM / SIGINT at any stage (``keras_transformer.signals``): one line, status 143 / 130;
    - a ValueError (bad input, the library's errors name the flag, file:line or path) and an
      OS or TensorFlow file-system error: one line, status 1;
    - a Python package missing from this interpreter: one line naming the setup command;

    and without ``--verbosity``, no INFO lines from the libraries (``quiet_libraries``).
    """
    from absl import app

    quiet = not _verbosity_given(sys.argv)

    def missing(error):
        remedy = (f"install the project's stack with `{SETUP_COMMAND}` (add ` test` for the test "
                  "extras) and run the command with .venv/bin/python" if PACKAGE == "trainers" else
                  # installed from the wheel: no setup.sh here, and pip knows its requirements
                  f"install the project's wheel into this Python again (`{sys.executable} -m pip "
                  f"install {DISTRIBUTION_FILES}`)")
        error_exit(f"the Python package {error.name!r} is missing from {sys.executable}; {remedy}.")

    def guarded(argv):
        try:
            from keras_transformer import signals, writing
        except ModuleNotFoundError as error:
            missing(error)
        signals.install()
        if quiet:
            quiet_libraries()  # after absl applied its own flag defaults
        try:
            return main(argv)
        except ModuleNotFoundError as error:
            missing(error)
        except app.UsageError as error:
            error_exit(error, status=2)
        except signals.Interrupted as interrupted:
            print(f"{program_name()}: error: {interrupted}; what was complete is kept, nothing "
                  "half-written is left", file=sys.stderr, flush=True)
            sys.stdout.flush()
            # Every file is closed by now; skipping the interpreter's clean-up of TensorFlow
            # (seconds on a busy machine) is what makes the exit prompt.
            _remove_autograph_files()
            os._exit(interrupted.exit_status)
        except (ValueError, OSError) as error:
            if isinstance(error, OSError) and error.filename:
                # A full disk or a read-only file system: say what to free or change.
                if error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
                    error_exit(writing.describe(error, error.filename))
                error_exit(f"{error.filename}: {error.strerror}")
            error_exit(_first_line(error))
        except Exception as error:  # noqa: BLE001
            import tensorflow as tf

            if isinstance(error, (tf.errors.ResourceExhaustedError, tf.errors.NotFoundError,
                                  tf.errors.PermissionDeniedError, tf.errors.DataLossError)):
                error_exit(f"{type(error).__name__}: {_first_line(error)}")
            raise

    program = sys.modules.get("__main__")
    if program is not None and program.__doc__:  # absl's --help shows it: its example commands
        program.__doc__ = installed_names(program.__doc__)
    app.run(guarded, flags_parser=parse_flags)
