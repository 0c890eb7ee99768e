"""Every notebook runs top to bottom in smoke mode (papermill injects SMOKE=True), each cell tagged
"plot" yields an image, and notebooks are stored without outputs."""

import glob
import json
import os

import pytest

NOTEBOOKS = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "..", "notebooks", "*.ipynb")))


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
def test_runs_in_smoke_mode_and_plots(path, tmp_path):
    import papermill

    executed = papermill.execute_notebook(
        path, str(tmp_path / "executed.ipynb"), parameters={"SMOKE": True, "WORK_DIR": str(tmp_path)},
        kernel_name="python3", cwd=os.path.dirname(path), progress_bar=False)
    plots = [cell for cell in executed.cells if "plot" in cell.metadata.get("tags", [])]
    for cell in plots:
        assert any("image/png" in output.get("data", {}) for output in cell.outputs), \
            f"a plot cell of {os.path.basename(path)} produced no image:\n{cell.source[:200]}"
