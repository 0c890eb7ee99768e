"""Fetching the offline corpora's Debian packages without root: real package files (built with
dpkg-deb) unpacked by the real dpkg, served by a stand-in apt-get that records what it was asked."""

import os
import shutil
import subprocess

import pytest

from keras_transformer.data import debian

# For every test that builds packages with build_package or serves them with fake_apt_get.
needs_dpkg = pytest.mark.skipif(shutil.which("dpkg-deb") is None or shutil.which("dpkg") is None,
                                reason="needs dpkg (Debian or Ubuntu)")
pytestmark = needs_dpkg

FAKE_APT_GET = """#!/bin/sh
# apt-get download PKG...: copies PKG.deb from $FAKE_APT_DEBS into the current folder (after an
# `apt-get update` if $FAKE_APT_NEEDS_UPDATE is set), as the real one downloads it.
echo "$*" >> "$FAKE_APT_DEBS/calls"
case "$1" in
  update) touch "$FAKE_APT_DEBS/updated"; exit 0;;
  download) shift
    for package in "$@"; do
      if [ ! -f "$FAKE_APT_DEBS/$package.deb" ] || { [ -n "$FAKE_APT_NEEDS_UPDATE" ] && [ ! -f "$FAKE_APT_DEBS/updated" ]; }; then
        echo "E: Unable to locate package $package" >&2; exit 100
      fi
      cp "$FAKE_APT_DEBS/$package.deb" "./${package}_1.0_all.deb"
    done;;
esac
"""


def build_package(folder, name, files):
    """``folder/name.deb``, a Debian package holding ``files`` ({path under /: text})."""
    root = folder / f"{name}-root"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: 1.0\nArchitecture: all\nMaintainer: test <test@example.org>\n"
        f"Description: {name} for a test\n")
    for path, text in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(root), str(folder / f"{name}.deb")],
                   check=True, capture_output=True)
    shutil.rmtree(root)


def fake_apt_get(tmp_path, packages, monkeypatch):
    """Puts an apt-get that serves ``packages`` ({name: {path: text}}) first on PATH; returns the
    file its calls are recorded in."""
    debs, bin_dir = tmp_path / "archive", tmp_path / "bin"
    debs.mkdir()
    bin_dir.mkdir()
    for name, files in packages.items():
        build_package(debs, name, files)
    (bin_dir / "apt-get").write_text(FAKE_APT_GET)
    (bin_dir / "apt-get").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_APT_DEBS", str(debs))
    return debs / "calls"


PACKAGES = {"corpus-en": {"/usr/share/corpus/en/a.txt": "One.\n"},
            "corpus-de": {"/usr/share/corpus/de/a.txt": "Eins.\n"}}


def test_packages_are_unpacked_into_a_folder_that_appears_whole(tmp_path, monkeypatch):
    calls = fake_apt_get(tmp_path, PACKAGES, monkeypatch)
    folder = tmp_path / "data" / "corpus"
    assert debian.unpack_packages(["corpus-en", "corpus-de"], str(folder)) == str(folder)
    assert (folder / "usr/share/corpus/en/a.txt").read_text() == "One.\n"
    assert (folder / "usr/share/corpus/de/a.txt").read_text() == "Eins.\n"
    assert calls.read_text() == "download corpus-en corpus-de\n"
    # Nothing else is left: no package file, no staging folder.
    assert os.listdir(tmp_path / "data") == ["corpus"] and os.listdir(folder) == ["usr"]


@pytest.mark.parametrize("root", [True, False])
def test_a_failed_download_leaves_nothing_and_says_what_to_do(tmp_path, monkeypatch, root):
    calls = fake_apt_get(tmp_path, PACKAGES, monkeypatch)
    monkeypatch.setattr(os, "geteuid", lambda: 0 if root else 1000)
    (tmp_path / "data").mkdir()
    with pytest.raises(ValueError) as error:
        debian.unpack_packages(["corpus-en", "no-such-corpus"], str(tmp_path / "data" / "corpus"))
    message = str(error.value)
    assert message.startswith("apt-get could not download corpus-en and no-such-corpus: "
                              "E: Unable to locate package no-such-corpus")
    assert ("sudo apt-get update" in message) is not root
    # As root, the package lists are refreshed once and the download tried again.
    assert calls.read_text() == ("download corpus-en no-such-corpus\nupdate\n"
                                 "download corpus-en no-such-corpus\n" if root
                                 else "download corpus-en no-such-corpus\n")
    assert os.listdir(tmp_path / "data") == []


def test_as_root_a_machine_without_package_lists_is_updated_first(tmp_path, monkeypatch):
    calls = fake_apt_get(tmp_path, PACKAGES, monkeypatch)
    monkeypatch.setenv("FAKE_APT_NEEDS_UPDATE", "1")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    folder = tmp_path / "corpus"
    folder.mkdir()  # an empty folder (an earlier attempt's) is replaced
    debian.unpack_packages(["corpus-de"], str(folder))
    assert (folder / "usr/share/corpus/de/a.txt").is_file()
    assert calls.read_text() == "download corpus-de\nupdate\ndownload corpus-de\n"


def test_without_apt_get_the_message_says_so(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dpkg").symlink_to(shutil.which("dpkg"))
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(ValueError, match=r"^cannot fetch corpus-de: there is no apt-get here \(not a "
                                         r"Debian or Ubuntu machine\); unpack the packages into "):
        debian.unpack_packages(["corpus-de"], str(tmp_path / "corpus"))
    assert not (tmp_path / "corpus").exists()


def test_a_corpus_is_taken_where_it_is_and_fetched_only_where_it_is_not(tmp_path, monkeypatch):
    calls = fake_apt_get(tmp_path, PACKAGES, monkeypatch)
    installed = "/usr/share/corpus/de"  # where apt-get install would put it: not on this machine
    assert not os.path.exists(installed)
    system = set()  # what "apt-get install" put in place, for `present`

    def present(path):
        return path in system or (path != installed and os.path.isdir(path))

    folder = tmp_path / "data" / "corpus-de"
    unpacked = str(folder / "usr/share/corpus/de")
    assert debian.installed_or_fetched(["corpus-de"], installed, present, str(folder)) == unpacked
    assert calls.read_text() == "download corpus-de\n"
    # Found where it was unpacked, and where it is installed: nothing is downloaded again.
    assert debian.installed_or_fetched(["corpus-de"], installed, present, str(folder)) == unpacked
    system.add(installed)
    assert debian.installed_or_fetched(["corpus-de"], installed, present, str(folder)) == installed
    assert calls.read_text() == "download corpus-de\n"
    # A package that does not hold the corpus where it should is a clear error.
    system.clear()
    shutil.rmtree(folder)
    with pytest.raises(ValueError, match=r"^corpus-en, unpacked into .*corpus-de, hold no "):
        debian.installed_or_fetched(["corpus-en"], installed, present, str(folder))
