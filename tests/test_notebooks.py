"""Every notebook runs top to bottom in smoke mode (papermill injects SMOKE=True), each cell tagged
"plot" yields an image, notebooks are stored without outputs, and a run writes nothing into the
repository that git would pick up: a relative WORK_DIR lands under the project's git-ignored runs/
whatever folder the notebook starts in."""

import glob
import json
import os
import shutil
import subprocess
import uuid

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))


def git(*args):
    """The output of a git command in the repository, or None outside a git checkout."""
    try:
        result = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    except OSError:
        return None
    return result.stdout if result.returncode == 0 else None


def untracked_or_changed(folder):
    """`git status` lines of ``folder``: what git would show as new or changed there."""
    return set(git("status", "--porcelain", "--untracked-files=all", "--", folder).splitlines())


def parameters_cell(path):
    with open(path) as f:
        notebook = json.load(f)
    return next("".join(cell["source"]) for cell in notebook["cells"]
                if "parameters" in cell["metadata"].get("tags", []))


def test_there_are_notebooks():
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_stored_without_outputs(path):
    with open(path) as f:
        notebook = json.load(f)
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            assert not cell.get("outputs") and cell.get("execution_count") is None, \
                f"{os.path.basename(path)} is stored with outputs: clear them before committing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_default_work_dir_is_under_the_ignored_runs_folder(path):
    source = parameters_cell(path)
    if "WORK_DIR" not in source:
        return
    work_dir = next(line.split("=", 1)[1].split("#")[0].strip().strip("\"'")
                    for line in source.splitlines() if line.startswith("WORK_DIR"))
    assert not os.path.isabs(work_dir) and work_dir.startswith("runs/"), work_dir
    if git("rev-parse", "--git-dir") is not None:
        assert git("check-ignore", "-q", "--no-index", work_dir) is not None, \
            f"{work_dir} (the default WORK_DIR of {os.path.basename(path)}) is not git-ignored"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_runs_in_smoke_mode_and_plots(path, tmp_path):
    import papermill

    name = os.path.splitext(os.path.basename(path))[0]
    # Relative, as the notebooks' own defaults are, and started from notebooks/ as Jupyter does: the
    # notebook must resolve it against the project's folder, into runs/ (git-ignored).
    scratch = os.path.join("runs", "notebooks", f"test-{uuid.uuid4().hex[:8]}")
    work_dir = os.path.join(scratch, name)
    in_git = git("rev-parse", "--git-dir") is not None
    before = untracked_or_changed("notebooks") if in_git else set()
    try:
        executed = papermill.execute_notebook(
            path, str(tmp_path / "executed.ipynb"), parameters={"SMOKE": True, "WORK_DIR": work_dir},
            kernel_name="python3", cwd=os.path.dirname(path), progress_bar=False)
        plots = [cell for cell in executed.cells if "plot" in cell.metadata.get("tags", [])]
        for cell in plots:
            assert any("image/png" in output.get("data", {}) for output in cell.outputs), \
                f"a plot cell of {name} produced no image:\n{cell.source[:200]}"
        assert not os.path.exists(os.path.join(os.path.dirname(path), work_dir)), \
            f"{name} wrote its WORK_DIR relative to notebooks/, not to the project's folder"
        if "WORK_DIR" in parameters_cell(path):
            assert os.path.isdir(os.path.join(ROOT, work_dir)), \
                f"{name} wrote nothing to WORK_DIR={work_dir} resolved against the project's folder"
        if in_git:
            assert untracked_or_changed("notebooks") == before, \
                f"{name} left files under notebooks/ that git would pick up"
            assert git("check-ignore", "-q", "--no-index", work_dir) is not None, \
                f"{work_dir} is not git-ignored"
    finally:
        shutil.rmtree(os.path.join(ROOT, scratch), ignore_errors=True)
        shutil.rmtree(os.path.join(os.path.dirname(path), scratch), ignore_errors=True)
