"""Checks of the paths the flags name, run before anything slow (vocabulary learning, model
building, data fingerprinting): each failure is one ``app.UsageError`` naming the flag and the
path, so a typo costs a second, not an hour.

Output folders are probed by writing (and removing) a file, not by ``os.access``, which says yes to
root on read-only file systems; nothing is created that a failed check would leave behind.
"""

import os
import tempfile

from absl import app

from keras_transformer import writing


def _fail(flag, path, problem):
    raise app.UsageError(f"--{flag}={path}: {problem}")


def holds_saved_model(path):
    """Whether ``path`` is a SavedModel's version folder, or a model's folder of numbered ones
    (what ``tensorflow_model_server --model_base_path`` reads)."""
    from keras_transformer.weights import exported_version_path

    try:
        exported_version_path(path)
    except (ValueError, OSError):
        return False
    return True


def input_file(flag, path, remedy=""):
    """``path`` exists, is a file and can be read (``remedy``: what to do if it does not exist)."""
    if writing.remote(path):
        return  # gs:// and the like: TensorFlow's file systems check it when it is read
    if not os.path.exists(path):
        _fail(flag, path, "no such file" + remedy)
    if os.path.isdir(path):
        _fail(flag, path, "is a folder, not a file")
    try:
        with open(path, "rb") as stream:
            stream.read(1)
    except OSError as error:
        _fail(flag, path, f"cannot be read ({error.strerror})")


def input_dir(flag, path, remedy=""):
    """``path`` is an existing folder (``remedy``: what to do if it does not exist)."""
    if not os.path.exists(path):
        _fail(flag, path, "no such folder" + remedy)
    if not os.path.isdir(path):
        _fail(flag, path, "is a file, not a folder")


def output_dir(flag, path):
    """``path`` is a folder, or can become one, that this process can write into."""
    if not path:
        _fail(flag, path, "must name a folder")
    if not writing.remote(path):
        _writable(flag, path, os.path.abspath(path))


def output_file(flag, path):
    """``path`` (a file, or a checkpoint prefix) is not a folder, and its folder can be written."""
    if writing.remote(path):
        return
    if os.path.isdir(path):
        _fail(flag, path, "is a folder, not a file")
    _writable(flag, path, os.path.dirname(os.path.abspath(path)))


def _writable(flag, shown, folder):
    existing = folder
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        if existing == os.path.abspath(shown):
            _fail(flag, shown, "is a file, not a folder")
        _fail(flag, shown, f"lies below {existing}, which is a file")
    try:
        handle, probe = tempfile.mkstemp(dir=existing, prefix=writing.TEMPORARY_PREFIX
                                         + f"{os.getpid()}-probe")
        os.close(handle)
        os.remove(probe)
    except OSError as error:
        where = "" if existing == os.path.abspath(shown) else f" (in {existing})"
        _fail(flag, shown, f"cannot be written{where}: {error.strerror}")


def run_dir(flag, path, checkpoint=None):
    """``path`` is the model_dir of a training run: its ``config.json`` parses, and ``checkpoint``
    (the --checkpoint value: None/latest, averaged, ema, best, a folder or a prefix) resolves."""
    input_dir(flag, path)
    from keras_transformer import runs

    if not os.path.isfile(os.path.join(path, runs.CONFIG_FILE)):
        problem = f"not the model_dir of a training run (no {runs.CONFIG_FILE} in it)"
        if holds_saved_model(path):
            from absl import flags

            problem += ("; it is a SavedModel, an export"
                        + (": pass it as --saved_model" if "saved_model" in flags.FLAGS else ""))
        _fail(flag, path, problem)
    try:
        runs.model_config(runs.read_config(path))
    except (OSError, ValueError, TypeError) as error:
        _fail(flag, path, f"its {runs.CONFIG_FILE} cannot be read: {str(error).splitlines()[0]}")
    try:
        runs.resolve_checkpoint(path, checkpoint)
    except ValueError as error:
        flag_of_problem = "checkpoint" if checkpoint not in (None, "", "latest") else flag
        raise app.UsageError(f"--{flag_of_problem}: {error}") from None


def saved_model(flag, path):
    """``path`` is a SavedModel version folder, or a base folder with numeric versions."""
    input_dir(flag, path)
    if not holds_saved_model(path):
        _fail(flag, path, "holds no saved_model.pb and no numeric version folder with one")
