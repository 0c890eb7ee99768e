"""The notebooks as stored: without outputs, except the architecture notebook, whose stored outputs
match a fresh run; one first cell (the install) in all; nothing that needs the clone's layout.
Running them (smoke mode, from the installed wheel, outside the clone) is tests/test_wheel.py."""

import glob
import json
import os
import re
import subprocess

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


def parameters_cell(path):
    with open(path) as f:
        notebook = json.load(f)
    return next("".join(cell["source"]) for cell in notebook["cells"]
                if "parameters" in cell["metadata"].get("tags", []))


def test_there_are_notebooks():
    assert NOTEBOOKS


# Stored with its outputs, so that GitHub shows its figures; test_architecture_outputs_are_current keeps
# them from going stale. `python tests/test_notebooks.py` stores them again.
STORED_WITH_OUTPUTS = {"architecture.ipynb"}
ARCHITECTURE = os.path.join(ROOT, "notebooks", "architecture.ipynb")


def load(path):
    with open(path) as f:
        return json.load(f)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_stored_without_outputs(path):
    if os.path.basename(path) in STORED_WITH_OUTPUTS:
        return
    for cell in load(path)["cells"]:
        if cell["cell_type"] == "code":
            assert not cell.get("outputs") and cell.get("execution_count") is None, \
                f"{os.path.basename(path)} is stored with outputs: clear them before committing"


def test_first_cell_is_the_same_in_every_notebook():
    """Cell 1 installs the package, so it cannot live in the package: one copy, kept identical."""
    first = {os.path.basename(path): "".join(load(path)["cells"][1]["source"]) for path in NOTEBOOKS}
    assert len(set(first.values())) == 1, sorted(first)
    assert "keras_transformer_trainers" in next(iter(first.values()))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_nothing_depends_on_the_clone(path):
    """The notebooks run from the installed package: no program by its clone name, no folder of
    the clone, and a default WORK_DIR that is relative (beside the notebook) and git-ignored."""
    code = "\n".join(line.split("#")[0] for cell in load(path)["cells"] if cell["cell_type"] == "code"
                     for line in "".join(cell["source"]).splitlines())
    for clone_only in ("from trainers", "import trainers", "-m trainers.", "/content/keras-transformer/",
                       "setup.cfg", "runs/"):
        assert clone_only not in code, f"{os.path.basename(path)}: {clone_only!r}"
    source = parameters_cell(path)
    if "WORK_DIR" not in source:
        return
    work_dir = next(line.split("=", 1)[1].split("#")[0].strip().strip("\"'")
                    for line in source.splitlines() if line.startswith("WORK_DIR"))
    assert not os.path.isabs(work_dir), work_dir
    if git("rev-parse", "--git-dir") is not None:
        for where in (work_dir, os.path.join("notebooks", work_dir)):
            assert git("check-ignore", "-q", "--no-index", os.path.join(where, "run")) is not None, \
                f"{where} (the default WORK_DIR of {os.path.basename(path)}) is not git-ignored"


def text_outputs(notebook):
    """Per code cell, what it printed and returned, as text, with its floats' digits beyond the
    fourth decimal dropped (they differ between CPUs): what goes stale when the code or
    the library changes. Pictures are compared by their presence only."""
    def shown(output):
        if output["output_type"] == "stream":
            return output["name"] + ":" + ("".join(output["text"]) if output["name"] == "stdout" else "")
        data = output.get("data", {})
        if "image/png" in data:
            return "<image>"
        return "".join(data.get("text/plain", "")) if output["output_type"] != "error" else "<error>"

    def rounded(text):  # 0.99999994 and 1., 4.8e-07 and 0. print alike
        return re.sub(r"-?\d+\.\d*(?:e[-+]?\d+)?|-?\d+e[-+]?\d+",
                      lambda m: f"{round(float(m.group(0)), 4) + 0.0:.4g}", text)

    def joined(outputs):  # a kernel splits one cell's stdout into chunks as its timing has it
        texts = []
        for text in (shown(output) for output in outputs):
            if text == "stderr:":
                continue
            if texts and text.startswith("stdout:") and texts[-1].startswith("stdout:"):
                texts[-1] += text[len("stdout:"):]
            else:
                texts.append(text)
        return texts

    # Not cell 1's: it names the machine's folders (where the package was found).
    return [[rounded(text) for text in joined(cell.get("outputs", []))]
            for cell in notebook.cells[2:] if cell.cell_type == "code"]


def execute_architecture():
    """The architecture notebook executed as a reader runs it: in notebooks/, the clone's kernel."""
    import nbclient
    import nbformat

    notebook = nbformat.read(ARCHITECTURE, as_version=4)
    nbclient.NotebookClient(notebook, kernel_name="python3", timeout=900,
                            resources={"metadata": {"path": os.path.dirname(ARCHITECTURE)}}).execute()
    return notebook


def test_architecture_outputs_are_current():
    import nbformat

    stored = nbformat.read(ARCHITECTURE, as_version=4)
    assert any(cell.get("outputs") for cell in stored.cells if cell.cell_type == "code"), \
        "architecture.ipynb is stored without its outputs: python tests/test_notebooks.py"
    fresh = text_outputs(execute_architecture())
    for index, (was, now) in enumerate(zip(text_outputs(stored), fresh)):
        assert was == now, (f"architecture.ipynb's stored outputs are stale from code cell {index} on "
                            f"(store them again: python tests/test_notebooks.py):\n{was}\n!=\n{now}")
    assert len(text_outputs(stored)) == len(fresh)


if __name__ == "__main__":
    import nbformat

    executed = execute_architecture()
    for index, cell in enumerate(executed.cells):
        cell.metadata.pop("execution", None)  # nbclient's timings would change the file at every run
        if cell.cell_type == "code":  # no machine's paths, no log lines of TensorFlow's
            cell.outputs = [] if index == 1 else [o for o in cell.outputs if o.get("name") != "stderr"]
            if index == 1:
                cell.execution_count = None
    nbformat.write(executed, ARCHITECTURE)
    print("stored", ARCHITECTURE)
