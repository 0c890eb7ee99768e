"""What a user installs: every `pip install` line the project shows installs this project from a
path or by its own distribution name, or a named third-party package; the links and images of the
README and docs/ resolve; the README stays one screen; setup.sh's Debian installs survive a fresh
image's missing package lists; and every install requirement, in its range
and as pinned, has a wheel for each Python that `python_requires` admits on Linux x86-64, and
TensorFlow none for the first one it excludes (asked of PyPI when the network is there, skipped
otherwise)."""

import configparser
import glob
import json
import os
import re
import subprocess
import urllib.error
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Packages the project's lines may name besides itself: optional tools, installed by their names.
THIRD_PARTY = {"ctranslate2", "sentencepiece", "tensorboard", "pip", "build", "sacrebleu",
               "matplotlib"}


def shown_text():
    """(where, text) of everything a user reads: README, docs, notebooks, programs, messages."""
    paths = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "trainers", "setup.sh")]
    paths += glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)
    for folder in ("keras_transformer", "trainers", "benchmarks", os.path.join("docs", "tools")):
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


def distribution_name():
    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"))
    return config["metadata"]["name"]


def test_every_pip_install_line_installs_this_project_from_a_path():
    own = distribution_name()
    seen = 0
    for where, text in shown_text():
        for line, argument in install_arguments(text):
            seen += 1
            is_path = argument.startswith((".", "/", "~")) or "{" in argument
            name = re.split(r"[\[=<>]", argument)[0].lower()
            # From a path or by its own distribution name (PyPI's keras-transformer is another
            # project), never from a git address (this project has no public one yet).
            assert is_path or name in THIRD_PARTY or name == own, \
                f"{where}: {line!r} installs {argument!r}"
            assert "git+" not in argument, f"{where}: {line!r}"
    assert seen >= 5


def shell_function(name):
    """The text of shell function ``name`` of trainers/setup.sh."""
    with open(os.path.join(ROOT, "trainers", "setup.sh"), encoding="utf-8") as stream:
        text = stream.read()
    return re.search(rf"^{name}\(\) {{\n.*?^}}\n", text, re.M | re.S).group(0)


@pytest.mark.parametrize("update_works", [True, False])
def test_setup_installs_debian_packages_again_after_apt_get_update(tmp_path, update_works):
    # A fresh image has no package lists: `apt-get install` fails until `apt-get update` has run.
    # A fake apt-get (as root: a fake `id`) records its calls.
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "id").write_text("#!/bin/sh\necho 0\n")
    (fake / "apt-get").write_text(f"""#!/bin/sh
echo "$*" >> {tmp_path}/calls
case "$1" in
  update) {'touch ' + str(tmp_path / 'lists') if update_works else 'exit 100'} ;;
  install) [ -f {tmp_path}/lists ] || exit 100 ;;
esac
""")
    for tool in fake.iterdir():
        tool.chmod(0o755)
    script = shell_function("as_root") + shell_function("apt_install") + "apt_install g++\n"
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                            env={**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"})
    calls = [line.split()[0] for line in (tmp_path / "calls").read_text().splitlines()]
    if update_works:
        assert result.returncode == 0, result.stderr
        assert calls == ["install", "update", "install"]
    else:
        assert result.returncode != 0 and calls == ["install", "update"]
    # Every Debian install of setup.sh goes through that function (the corpus and g++ alike).
    with open(os.path.join(ROOT, "trainers", "setup.sh"), encoding="utf-8") as stream:
        text = stream.read()
    assert text.count("apt-get install") == shell_function("apt_install").count("apt-get install")
    assert text.count("apt_install ") == 2  # the corpus and g++


def local_links(path):
    """The links and image paths of a Markdown file that point into the repository."""
    with open(path, encoding="utf-8") as stream:
        text = stream.read()
    targets = re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r'<img[^>]+src="([^"]+)"', text)
    return [t.split("#")[0] for t in targets if not re.match(r"[a-z]+://", t) and t.split("#")[0]]


@pytest.mark.parametrize("page", ["README.md"] + sorted(
    os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))))
def test_links_and_images_resolve(page):
    links = local_links(os.path.join(ROOT, page))
    folder = os.path.dirname(os.path.join(ROOT, page))
    missing = [t for t in links if not os.path.exists(os.path.join(folder, t))]
    assert not missing, f"{page}: {missing}"


def test_readme_is_one_screen_with_pictures_and_links_every_docs_page():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as stream:
        readme = stream.read()
    assert len(readme) <= 12000, f"README.md has {len(readme)} characters; move depth to docs/"
    images = [t for t in local_links(os.path.join(ROOT, "README.md")) if t.endswith((".png", ".svg"))]
    assert len(set(images)) >= 3, images
    pages = {os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))}
    assert pages and pages <= set(local_links(os.path.join(ROOT, "README.md"))), \
        f"docs pages the README does not link: {pages - set(local_links(os.path.join(ROOT, 'README.md')))}"


def requirements():
    """(install requirements, pinned requirements, python_requires) of setup.cfg."""
    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"))

    def lines(value):
        return [line.split("#")[0].strip() for line in value.strip().splitlines()
                if line.split("#")[0].strip()]

    return (lines(config["options"]["install_requires"]),
            lines(config["options.extras_require"]["pinned"]),
            config["options"]["python_requires"].strip())


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


def admitted_pythons(python_requires):
    """The Python 3 minor versions from 3.8 to 3.15 that ``python_requires`` admits."""
    from packaging.specifiers import SpecifierSet

    spec = SpecifierSet(python_requires)
    return [f"3.{minor}" for minor in range(8, 16) if spec.contains(f"3.{minor}.0")]


def candidate_versions(files, specifier):
    """The releases pip could pick for ``specifier`` (not pre-releases)."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    spec = SpecifierSet(specifier)
    return [v for v in files if not Version(v).is_prerelease and spec.contains(v)]


def test_python_requires_and_the_pinned_stack_agree():
    reqs, pinned, python_requires = requirements()
    pythons = admitted_pythons(python_requires)
    assert pythons[0] == "3.10" and "3.13" in pythons, python_requires
    names = {re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower(): r for r in reqs}
    for pin in pinned:
        from packaging.requirements import Requirement

        pin = Requirement(pin)
        assert pin.name.lower() in names, f"pinned {pin.name} is not an install requirement"
        version = str(pin.specifier).lstrip("=")
        assert Requirement(names[pin.name.lower()]).specifier.contains(version), \
            f"pinned {pin} is outside the range {names[pin.name.lower()]}"


def test_every_requirement_has_a_wheel_for_every_admitted_python_on_linux():
    from packaging.requirements import Requirement

    reqs, pinned, python_requires = requirements()
    pythons = admitted_pythons(python_requires)
    for requirement in reqs + pinned:
        requirement = Requirement(requirement)
        try:
            files = index_files(requirement.name)
        except urllib.error.HTTPError:
            raise
        except (urllib.error.URLError, OSError, TimeoutError) as error:
            pytest.skip(f"PyPI is not reachable from here ({error})")
        candidates = candidate_versions(files, str(requirement.specifier))
        assert candidates, f"{requirement}: no such release on PyPI"
        for python in pythons:
            # pip takes the newest release in the range that has a wheel for the Python at hand
            assert any(has_wheel(files.get(v, []), python) for v in candidates), (
                f"{requirement}: no wheel for Python {python} on Linux x86-64")
    # The upper bound is true too: the first Python excluded has no TensorFlow in range.
    excluded = f"3.{int(pythons[-1].split('.')[1]) + 1}"
    tensorflow = next(Requirement(r) for r in reqs if r.startswith("tensorflow>"))
    files = index_files("tensorflow")
    assert not any(has_wheel(files.get(v, []), excluded)
                   for v in candidate_versions(files, str(tensorflow.specifier))), \
        f"TensorFlow in {tensorflow.specifier} has a wheel for Python {excluded}: widen python_requires"
