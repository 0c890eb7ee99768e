"""Writing files and folders so that they appear whole or not at all.

Everything the project writes for later use (vocabularies, ``config.json``/``summary.json``,
reports, averaged and best checkpoints, exports) goes through here:

- :func:`write_file` writes beside the target under a ``.tmp-<pid>-`` name and renames it into
  place;
- :func:`staged_folders` builds new folders under such names and renames them into place together;
- :func:`remove_leftovers` deletes what a killed process left behind (its ``.tmp-<pid>-``
  entries, and TensorFlow's ``*_temp`` checkpoint folders), so a new start finds a clean folder;
- a failed write raises :class:`WriteError` (a ValueError) naming the path and what to do, after
  removing its own temporary files.

Renames that must happen together run with signals deferred (``keras_transformer.signals``): a
SIGTERM in between waits until the last one is done.
"""

import contextlib
import errno
import os
import re
import secrets
import shutil
import sys
import tempfile
from typing import Iterator, List, Sequence, Union

from keras_transformer import signals

TEMPORARY_PREFIX = ".tmp-"
_OWNED = re.compile(re.escape(TEMPORARY_PREFIX) + r"(\d+)-")
# TensorFlow's checkpoint writer stages each checkpoint in "<prefix>_temp/" before renaming.
_CHECKPOINT_TEMPORARY = re.compile(r".+_temp(_[0-9a-f]{32})?$")


class WriteError(ValueError):
    """A file or folder could not be written; the message names the path and what to do."""


def describe(error: BaseException, path: str) -> str:
    """One line for an OS error while writing ``path``: what failed and what to free or change."""
    code = getattr(error, "errno", None)
    reason = (getattr(error, "strerror", None)
              or (str(error).strip().splitlines() or [type(error).__name__])[0])
    if code == errno.ENOSPC or "No space left" in str(error):
        return f"cannot write {path}: no space left on the device; free space there or choose another folder"
    if code == errno.EDQUOT:
        return f"cannot write {path}: disk quota exceeded; free space there or choose another folder"
    if code in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"cannot write {path}: {reason}; choose a folder you can write to"
    return f"cannot write {path}: {reason}"


def _is_write_failure(error: BaseException) -> bool:
    if isinstance(error, OSError):
        return True
    # TensorFlow's file system reports I/O failures as OpErrors; where it is not loaded, none was
    # raised (and loading it here would cost seconds).
    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(error, tf.errors.OpError)


def remote(path) -> bool:
    """A gs://-style path, which only TensorFlow's file systems (``tf.io.gfile``) read and write;
    a local one the os module handles without starting TensorFlow."""
    return "://" in str(path)


def _temporary_name() -> str:
    return f"{TEMPORARY_PREFIX}{os.getpid()}-"


def write_file(path: str, data: Union[bytes, str]) -> str:
    """Writes ``data`` (text is UTF-8) to ``path`` atomically; returns ``path``. A ``gs://``-style
    path goes through ``tf.io.gfile``, whose object stores write whole objects anyway."""
    if remote(path):
        import tensorflow as tf

        with tf.io.gfile.GFile(path, "wb") as stream:
            stream.write(data.encode("utf-8") if isinstance(data, str) else data)
        return path
    directory = os.path.dirname(os.path.abspath(path))
    if isinstance(data, str):
        data = data.encode("utf-8")
    temporary = None
    try:
        os.makedirs(directory, exist_ok=True)
        # not mkstemp, whose file is private (0600): the written file gets the mode open() gives
        # (the umask's), so a shared data_dir's vocabulary or a run's records stay readable
        name = f"{_temporary_name()}{secrets.token_hex(8)}-{os.path.basename(path)}"
        handle = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        temporary = os.path.join(directory, name)
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.replace(temporary, path)
        temporary = None
    except OSError as error:
        raise WriteError(describe(error, path)) from None
    finally:
        if temporary is not None and os.path.exists(temporary):
            os.remove(temporary)
    return path


@contextlib.contextmanager
def temporary_folder(directory: str, what: str) -> Iterator[str]:
    """Yields a new folder in ``directory`` (created if needed) that is deleted when the block
    ends, however it ends. Write failures in the block become :class:`WriteError` naming
    ``what`` (the path being written)."""
    folder = None
    try:
        os.makedirs(directory, exist_ok=True)
        folder = tempfile.mkdtemp(prefix=_temporary_name(), dir=directory)
        yield folder
    except Exception as error:  # noqa: BLE001  (TensorFlow's writers raise OpErrors)
        if isinstance(error, WriteError) or not _is_write_failure(error):
            raise
        raise WriteError(describe(error, what)) from None
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def staged_folders(targets: Sequence[str]) -> Iterator[List[str]]:
    """Yields one new, not yet existing folder path per target to write into; when the block ends
    without an error they are renamed to ``targets`` (which must not exist) together. On any
    error or signal nothing is renamed and the staged folders are deleted. Write failures become
    :class:`WriteError`."""
    targets = [os.path.abspath(t) for t in targets]
    for target in targets:
        if os.path.exists(target):
            raise WriteError(f"{target} exists already; choose another name or version, or remove it")
    with contextlib.ExitStack() as stack:
        stagings = [stack.enter_context(temporary_folder(os.path.dirname(target), target))
                    for target in targets]
        outputs = [os.path.join(staging, "output") for staging in stagings]
        yield outputs
        with signals.deferred():
            renamed = []
            try:
                for output, target in zip(outputs, targets):
                    os.replace(output, target)
                    renamed.append(target)
            except OSError:
                for target in renamed:  # together or not at all
                    shutil.rmtree(target, ignore_errors=True)
                raise


def remove_folder(path: str) -> None:
    """Deletes the folder ``path`` so that it vanishes whole: it is first renamed to a temporary
    name (one step, under deferred signals), so a kill while deleting leaves a leftover that
    ``remove_leftovers`` clears, never a half-deleted folder under its own name."""
    doomed = os.path.join(os.path.dirname(os.path.abspath(path)),
                          f"{_temporary_name()}{os.path.basename(path)}")
    with signals.deferred():
        os.replace(path, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_leftovers(directory: str, checkpoints: bool = False) -> List[str]:
    """Deletes the temporary entries of ``directory`` whose writer is no longer running (and
    with ``checkpoints`` TensorFlow's ``*_temp`` checkpoint folders, which only the run folder's
    own trainer writes); returns what was removed."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    removed = []
    for name in names:
        owned = _OWNED.match(name)
        stale = (owned and not _alive(int(owned.group(1)))) or (
            checkpoints and _CHECKPOINT_TEMPORARY.fullmatch(name))
        if not stale:
            continue
        path = os.path.join(directory, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.remove(path)
        removed.append(path)
    return removed
