"""The release artifact, outside the clone: the wheel holds every module of the tree (the programs
under their installed name, keras_transformer_trainers) and the shipped model when the tree has one;
a fresh virtual environment with only that wheel installed (the dependencies made visible from the
project's environment, the project itself not) runs every notebook in smoke mode from an empty folder,
writing under the notebooks' working folder and nothing into the clone; and a notebook's first cell,
on a stand-in Colab, asks for the wheel and installs it (elsewhere, says in one line what to do)."""

import glob
import json
import os
import site
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = os.path.join(ROOT, "notebooks")
# quickstart first: export_serving then exports the run it trained in the same working folder.
ORDER = ["quickstart", "export_serving", "architecture", "wmt14_gpu"]
WORK_DIR = "keras-transformer-work"  # the notebooks' default
KERNEL = "keras-transformer-wheel"
HELP_DIR = os.path.join("usr", "share", "libreoffice", "help")


def git_files(*paths):
    """The tree's files git knows (tracked, or new and not ignored) under ``paths``."""
    result = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "--",
                             *paths], cwd=ROOT, capture_output=True, text=True)
    if result.returncode:
        pytest.skip("not a git checkout: the wheel is built from the files git knows")
    return [path for path in result.stdout.splitlines() if os.path.isfile(os.path.join(ROOT, path))]


def shipped_files():
    return [path for path in git_files("saved_models") if path.startswith("saved_models/quickstart/")]


def python(venv):
    return os.path.join(venv, "bin", "python")


def run(command, **kwargs):
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{' '.join(map(str, command))}:\n{result.stderr[-3000:]}"
    return result.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The wheel, built from a copy of the files git knows (a stale build/ folder or a run's
    export in the working tree cannot slip in), with the build backend this environment has."""
    source = tmp_path_factory.mktemp("source")
    for path in git_files("keras_transformer", "trainers", "saved_models", "setup.cfg",
                          "pyproject.toml", "README.md"):
        os.makedirs(os.path.dirname(source / path), exist_ok=True)
        with open(os.path.join(ROOT, path), "rb") as a, open(source / path, "wb") as b:
            b.write(a.read())
    dist = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(dist), str(source)])
    (built,) = glob.glob(str(dist / "*.whl"))
    return built


def dependencies_dir(tmp_path_factory):
    """This environment's site-packages without the project (its editable install): a folder of
    links to every other entry, which a .pth file puts on a fresh environment's path."""
    folder = tmp_path_factory.mktemp("dependencies")
    (packages,) = [p for p in site.getsitepackages() if p.endswith("site-packages")]
    for name in os.listdir(packages):
        own = name.startswith(("keras_transformer", "__editable__", "trainers")) or name.endswith(".pth")
        if not own:
            os.symlink(os.path.join(packages, name), folder / name)
    return folder


def fresh_venv(path, dependencies):
    run([sys.executable, "-m", "venv", str(path)])
    (packages,) = glob.glob(str(path / "lib" / "python3*" / "site-packages"))
    with open(os.path.join(packages, "project-dependencies.pth"), "w") as stream:
        stream.write(f"{dependencies}\n")
    return str(path)


@pytest.fixture(scope="module")
def dependencies(tmp_path_factory):
    return dependencies_dir(tmp_path_factory)


def names_in(wheel_path):
    with zipfile.ZipFile(wheel_path) as archive:
        return set(archive.namelist())


def test_the_wheel_holds_every_module_and_the_shipped_model(wheel):
    names = names_in(wheel)
    # the modules, and our CPU kernels' source, which the package compiles on first use
    expected = {path for path in git_files("keras_transformer") if path.endswith((".py", ".cc"))}
    expected |= {"keras_transformer_trainers/" + os.path.basename(path)
                 for path in git_files("trainers") if path.endswith(".py")}
    expected |= {"keras_transformer_trainers/" + path for path in shipped_files()}
    assert expected <= names, sorted(expected - names)
    code = {name for name in names if not name.startswith("keras_transformer_paper-")}
    assert code == expected | {"keras_transformer_trainers/saved_models/README.md",
                               "keras_transformer_trainers/cpu.flags"}, \
        sorted(code - expected)
    assert not any(name.startswith("trainers/") for name in names)  # no generic top-level name


@pytest.fixture(scope="module")
def help_pages():
    """The LibreOffice help pages the notebooks' corpus cell would fetch: the installed Debian
    copy, or the clone's unpacked one (linked into the working folder, read only)."""
    if os.path.isdir(os.path.join("/", HELP_DIR, "de", "text")):
        return None
    unpacked = os.path.join(ROOT, "data", "libreoffice-help", HELP_DIR)
    if not os.path.isdir(os.path.join(unpacked, "de", "text")):
        pytest.skip("the LibreOffice help pages are not unpacked here: run bash trainers/setup.sh")
    return unpacked


def clone_paths_named(name):
    found = set()
    for folder, folders, _ in os.walk(ROOT):
        folders[:] = [f for f in folders if f not in (".git", ".venv")]
        found.update(os.path.join(folder, f) for f in folders if f == name)
    return found


@pytest.mark.slow
def test_every_notebook_runs_from_the_wheel_outside_the_clone(wheel, dependencies, help_pages,
                                                             tmp_path):
    venv = fresh_venv(tmp_path / "venv", dependencies)
    run([python(venv), "-m", "pip", "install", "-q", "--no-deps", wheel])
    # ipykernel stages the kernel spec in a temporary folder and leaves that folder behind, empty.
    staging = tmp_path / "kernel_staging"
    staging.mkdir()
    run([python(venv), "-m", "ipykernel", "install", "--prefix", venv, "--name", KERNEL],
        env=dict(os.environ, TMPDIR=str(staging)))
    workspace, executed = tmp_path / "empty", tmp_path / "executed"
    workspace.mkdir(), executed.mkdir()
    if help_pages:
        os.makedirs(os.path.dirname(workspace / WORK_DIR / "data" / "libreoffice-help" / HELP_DIR))
        os.symlink(help_pages, workspace / WORK_DIR / "data" / "libreoffice-help" / HELP_DIR)
    before = clone_paths_named(WORK_DIR)
    # Only what a user's machine would have: no PYTHONPATH, the venv's jupyter data first.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "JUPYTER_PATH")}
    env.update(JUPYTER_PATH=os.path.join(venv, "share", "jupyter"), TF_CPP_MIN_LOG_LEVEL="2")
    failures, notebooks = [], {}
    for name in ORDER:
        output = executed / f"{name}.ipynb"
        result = subprocess.run(
            [python(venv), "-m", "papermill", os.path.join(NOTEBOOKS, f"{name}.ipynb"), str(output),
             "-k", KERNEL, "-p", "SMOKE", "True", "--cwd", str(workspace), "--no-progress-bar"],
            cwd=workspace, env=env, capture_output=True, text=True, timeout=1800)
        if result.returncode:
            failures.append(f"{name}: {result.stderr[-2500:]}")
            continue
        with open(output) as stream:
            notebooks[name] = json.load(stream)
    assert not failures, "\n\n".join(failures)

    shipped = bool(shipped_files())
    for name, notebook in notebooks.items():
        first = "".join("".join(o.get("text", "")) for o in notebook["cells"][1]["outputs"])
        assert f"keras_transformer from {venv}" in first, f"{name} imported the package from: {first}"
        for cell in notebook["cells"]:
            tags = cell["metadata"].get("tags", [])
            images = any("image/png" in o.get("data", {}) for o in cell.get("outputs", []))
            if "plot" in tags or ("shipped_plot" in tags and shipped):
                assert images, f"a plot cell of {name} produced no image:\n{''.join(cell['source'])[:200]}"
            # the notebooks' own tokenization too is dense_ids's, which oneDNN takes without a line
            logged = "".join("".join(o.get("text", "")) for o in cell.get("outputs", []))
            assert "DT_INT64" not in logged, f"{name}: {''.join(cell['source'])[:200]}\n{logged}"
    # the quickstart notebook sizes its warm-up as the main job does: a few updates timed first
    printed = "".join("".join(output.get("text", "")) for cell in notebooks["quickstart"]["cells"]
                      for output in cell.get("outputs", []))
    assert "warm-up: 10 updates, for a run of about " in printed, printed[-3000:]
    assert "updates (5 minutes at " in printed and "s per update, as timed here)" in printed
    work = workspace / WORK_DIR
    for produced in ("quickstart/run/config.json", "quickstart/saved_models",
                     "export_serving/saved_models/translator", "export_serving/saved_models/translator_ids",
                     "wmt14/tiny/summary.json", "data/vocab"):
        assert os.path.exists(work / produced), f"{produced} missing under the working folder"
    assert os.listdir(workspace) == [WORK_DIR], os.listdir(workspace)  # nothing beside it
    assert clone_paths_named(WORK_DIR) == before, "a notebook wrote a working folder into the clone"


FAKE_COLAB = '''
def upload():
    """Colab's files.upload(): {file name: bytes} of what the user picked (here the wheel, under
    the name Colab gives a second upload of the same file)."""
    import os
    path = os.environ["FAKE_UPLOAD"]
    with open(path, "rb") as stream:
        data = stream.read()
    return {os.path.basename(path).replace(".whl", " (1).whl"): data, "notes.txt": b""}
'''


def first_cell():
    with open(os.path.join(NOTEBOOKS, "architecture.ipynb")) as stream:
        return "".join(json.load(stream)["cells"][1]["source"])


def test_first_cell_installs_the_uploaded_wheel_on_colab_and_says_what_to_do_elsewhere(
        wheel, dependencies, tmp_path, system_temporary):
    venv = fresh_venv(tmp_path / "venv", dependencies)
    workspace = tmp_path / "empty"
    workspace.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(TF_CPP_MIN_LOG_LEVEL="2")
    importable = [python(venv), "-c", "import keras_transformer, keras_transformer_trainers.wmt; "
                  "print(keras_transformer.__file__)"]
    assert subprocess.run(importable, cwd=workspace, env=env, capture_output=True).returncode != 0

    elsewhere = subprocess.run([python(venv), "-c", first_cell()], cwd=workspace, env=env,
                               capture_output=True, text=True, timeout=300)
    assert elsewhere.returncode != 0
    assert "is not installed for this Python" in elsewhere.stderr.strip().splitlines()[-1]

    fake = tmp_path / "fake"
    os.makedirs(fake / "google" / "colab")
    (fake / "google" / "colab" / "__init__.py").write_text("")
    (fake / "google" / "colab" / "files.py").write_text(FAKE_COLAB)
    # The uploaded wheel's copy goes to the temporary folder, and must go from it.
    colab = dict(env, PYTHONPATH=str(fake), FAKE_UPLOAD=wheel, TMPDIR=str(system_temporary))
    installed = subprocess.run([python(venv), "-c", first_cell()], cwd=workspace, env=colab,
                               capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stderr[-3000:]
    assert "Pick the wheel" in installed.stdout
    assert os.listdir(system_temporary) == []
    # A fresh process, as the notebook's next cells after a restart: the package is installed.
    where = run(importable, cwd=workspace, env=env).strip()
    assert where.startswith(venv), where
