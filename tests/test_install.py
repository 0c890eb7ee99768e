"""What a user installs: every `pip install` line the project shows installs this project from a
path (its PyPI name belongs to another project) or a named third-party package; the README's links
and images resolve; and every install requirement has a wheel for Python 3.10 and 3.13 on Linux
x86-64 (asked of PyPI when the network is there, skipped otherwise)."""

import configparser
import glob
import json
import os
import re
import urllib.error
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Packages the project's lines may name besides itself: optional tools, installed by their names.
THIRD_PARTY = {"ctranslate2", "sentencepiece", "tensorboard", "pip"}


def shown_text():
    """(where, text) of everything a user reads: README, docs, notebooks, programs, messages."""
    paths = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "trainers", "setup.sh")]
    paths += glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)
    for folder in ("keras_transformer", "trainers", "benchmarks"):
        paths += glob.glob(os.path.join(ROOT, folder, "**", "*.py"), recursive=True)
    for path in paths:
        with open(path, encoding="utf-8") as stream:
            yield os.path.relpath(path, ROOT), stream.read()
    for path in glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")):
        with open(path, encoding="utf-8") as stream:
            cells = json.load(stream)["cells"]
        yield os.path.relpath(path, ROOT), "\n".join("".join(cell["source"]) for cell in cells)


def install_arguments(text):
    """The requirement arguments of each `pip install ...` in ``text``: the words after it on its
    line that are not options, up to the first that is not part of the command."""
    for match in re.finditer(r"pip install ([^\n]*)", text):
        for word in match.group(1).split():
            if word[0] in ">|&#$(" or word in ("in", "or", "then", "first", "for"):
                break  # a shell operator, a comment or prose: the command has ended
            token = re.match(r"[\w.\-\[\]=<>/~{}+]+", word.lstrip("'\"`"))
            if not token:
                break
            rest = word.lstrip("'\"`")[token.end():]
            token = token.group(0)
            if len(token) > 1:
                token = token.rstrip(".")  # the end of a sentence
            if not token.startswith("-"):
                yield match.group(0), token
            if re.search(r"[`;)]|\.$", rest):
                break  # a closing backtick or bracket, or the end of a sentence


def test_every_pip_install_line_installs_this_project_from_a_path():
    seen = 0
    for where, text in shown_text():
        for line, argument in install_arguments(text):
            seen += 1
            is_path = argument.startswith((".", "/", "~")) or "{" in argument
            name = re.split(r"[\[=<>]", argument)[0].lower()
            # Not by name (PyPI's keras-transformer is another project), nor from a git address
            # (this project has no public one yet).
            assert is_path or name in THIRD_PARTY, f"{where}: {line!r} installs {argument!r}"
            assert "git+" not in argument, f"{where}: {line!r}"
    assert seen >= 5


def test_readme_links_and_images_resolve():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as stream:
        readme = stream.read()
    targets = re.findall(r"\]\(([^)\s]+)\)", readme) + re.findall(r'<img[^>]+src="([^"]+)"', readme)
    local = [t.split("#")[0] for t in targets if not re.match(r"[a-z]+://", t) and t.split("#")[0]]
    assert local
    missing = [t for t in local if not os.path.exists(os.path.join(ROOT, t))]
    assert not missing, missing


def requirements():
    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"))
    lines = config["options"]["install_requires"].strip().splitlines()
    return [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()], \
        config["options"]["python_requires"].strip()


def index_files(name):
    """{version: [(file name, requires-python)]} of a package, from PyPI's JSON simple index
    (PEP 691, what pip reads)."""
    request = urllib.request.Request(f"https://pypi.org/simple/{name}/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=20) as response:
        index = json.load(response)
    prefix = re.sub(r"[-_.]+", "_", name).lower() + "-"
    files = {}
    for version in index["versions"]:
        start = f"{prefix}{version}-"
        files[version] = [(f["filename"], f.get("requires-python") or "") for f in index["files"]
                          if f["filename"].lower().startswith(start)]
    return files


def has_wheel(files, python):
    """A wheel pip would take on CPython ``python`` (e.g. "3.10") on Linux x86-64."""
    from packaging.specifiers import SpecifierSet

    tag = "cp" + python.replace(".", "")
    return any(f.endswith(".whl") and SpecifierSet(requires).contains(python + ".0") and (
        "py3-none-any" in f or (f"-{tag}-" in f or "abi3" in f) and "manylinux" in f
        and "x86_64" in f) for f, requires in files)


def test_every_requirement_has_a_wheel_for_python_3_10_and_3_13_on_linux():
    from packaging.version import Version

    reqs, python_requires = requirements()
    assert python_requires == ">=3.10"
    for requirement in reqs:
        name, operator, version = re.match(r"([A-Za-z0-9_.-]+)\s*(==|>=)?\s*(\S*)",
                                           requirement).groups()
        try:
            files = index_files(name)
        except urllib.error.HTTPError:
            raise
        except (urllib.error.URLError, OSError, TimeoutError) as error:
            pytest.skip(f"PyPI is not reachable from here ({error})")
        if operator == "==":
            candidates = [version]
        else:  # pip takes the newest release that has a wheel for the Python at hand
            candidates = [v for v in files if not Version(v).is_prerelease
                          and (not version or Version(v) >= Version(version))]
        assert candidates, f"{requirement}: no such release on PyPI"
        for python in ("3.10", "3.13"):
            assert any(has_wheel(files.get(v, []), python) for v in candidates), (
                f"{requirement}: no wheel for Python {python} on Linux x86-64")
