"""The offline corpora's Debian packages, fetched without root.

``apt-get download`` fetches a package file from the machine's configured archive (Debian, Ubuntu,
Colab's Ubuntu) as any user, and ``dpkg -x`` unpacks it into a folder: what ``apt-get install`` would
put under ``/``, under that folder instead. The corpora need no installing, and installing the
LibreOffice help would pull in LibreOffice itself.
"""

import os
import shutil
import subprocess
from typing import Callable, Sequence

from keras_transformer import writing


def installed_or_fetched(packages: Sequence[str], path: str, present: Callable[[str], bool],
                        folder: str) -> str:
    """Where a corpus is: ``path``, where ``apt-get install`` of ``packages`` puts it, if
    ``present`` there; else the same path under ``folder``, into which the packages are fetched and
    unpacked first (``unpack_packages``) if it is not present there either."""
    unpacked = os.path.join(folder, path.lstrip("/"))
    for candidate in (path, unpacked):
        if present(candidate):
            return candidate
    unpack_packages(packages, folder)
    if not present(unpacked):
        raise ValueError(f"{' and '.join(packages)}, unpacked into {folder}, hold no {unpacked}")
    return unpacked


def unpack_packages(packages: Sequence[str], folder: str) -> str:
    """Fetches the Debian ``packages`` and unpacks them into ``folder``, which appears complete or
    not at all (it must not exist; an empty one is replaced). Returns ``folder``.

    As root, a failed download is tried once more after ``apt-get update`` (a fresh image, Colab's
    too, has no package lists). Every failure is a ValueError naming the packages and what to do,
    and leaves nothing behind."""
    what = " and ".join(packages)
    for tool in ("apt-get", "dpkg"):
        if shutil.which(tool) is None:
            raise ValueError(f"cannot fetch {what}: there is no {tool} here (not a Debian or Ubuntu "
                             f"machine); unpack the packages into {folder} by hand")
    if os.path.isdir(folder) and not os.listdir(folder):
        os.rmdir(folder)
    writing.remove_leftovers(os.path.dirname(os.path.abspath(folder)))
    with writing.staged_folders([folder]) as (output,):
        downloads = os.path.join(os.path.dirname(output), "downloads")
        os.makedirs(downloads)
        _download(packages, downloads)
        os.makedirs(output)
        for name in sorted(os.listdir(downloads)):
            _run(["dpkg", "-x", os.path.join(downloads, name), output], f"dpkg could not unpack {name}")
    return folder


def _download(packages, folder):
    command = ["apt-get", "download", *packages]
    result = _call(command, folder)
    root = os.geteuid() == 0
    if result.returncode and root:
        _call(["apt-get", "update"], folder)
        result = _call(command, folder)
    if result.returncode:
        raise ValueError(f"apt-get could not download {' and '.join(packages)}: "
                         f"{_last_line(result)}" + ("" if root else (
                             "; on a machine without package lists run `sudo apt-get update` "
                             "first")))


def _run(command, failure):
    result = _call(command, None)
    if result.returncode:
        raise ValueError(f"{failure}: {_last_line(result)}")


def _call(command, folder):
    return subprocess.run(command, cwd=folder, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, errors="replace")


def _last_line(result):
    lines = (result.stderr or result.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit status {result.returncode}"
