"""The notebooks as stored: valid, an id on every cell; without outputs, except the architecture
notebook, whose stored outputs match a fresh run and whose Figures 1 and 2 are the docs' pictures,
attached; one first cell (the install) in all; nothing that needs the clone's layout; a stop in one
line where matplotlib is missing.
Running them (smoke mode, from the installed wheel, outside the clone) is tests/test_wheel.py."""

import base64
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import warnings

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
                       "setup.cfg", "runs/", "docs/images"):
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


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_every_cell_has_its_own_id_and_the_notebook_is_valid(path):
    """nbformat 4.5 requires a cell id: without one nbformat warns that it "will become a hard error",
    and each reader (Jupyter, Colab) makes up its own."""
    import nbformat

    ids = [cell.get("id") for cell in load(path)["cells"]]
    assert all(ids), f"{os.path.basename(path)}: cells {[i for i, x in enumerate(ids) if not x]} have no id"
    assert len(set(ids)) == len(ids), f"{os.path.basename(path)}: cell ids used twice"
    with open(path) as f:
        text = f.read()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nbformat's MissingIDFieldWarning and the like
        nbformat.validate(nbformat.reads(text, as_version=nbformat.NO_CONVERT))


def attachments(path):
    """{name: (its cell's source, the attached base64 PNG)} of a notebook's attached pictures."""
    return {name: ("".join(cell["source"]), data["image/png"]) for cell in load(path)["cells"]
            for name, data in cell.get("attachments", {}).items()}


def test_architecture_figures_travel_with_the_notebook_and_are_the_docs_pictures():
    """Figures 1 and 2 are attachments of markdown cells, so they show from the wheel and on Colab, where
    there is no docs/images, and after a re-run; the same bytes as the docs' pictures."""
    from docs.tools import figures

    attached = attachments(ARCHITECTURE)
    for figure in figures.ATTACHED_FIGURES:
        name = figures.FIGURES[figure][0]
        assert name in attached, f"architecture.ipynb has no attachment {name}"
        source, data = attached[name]
        assert f"(attachment:{name})" in source, source
        with open(os.path.join(ROOT, "docs", "images", name), "rb") as f:
            assert data == base64.b64encode(f.read()).decode("ascii"), (
                f"architecture.ipynb's {name} is not docs/images/{name}: "
                f"python -m docs.tools.figures --figures={','.join(figures.ATTACHED_FIGURES)}")


def test_drawing_figures_1_and_2_into_the_docs_refreshes_the_notebook_only(tmp_path, monkeypatch):
    from docs.tools import figures

    notebook, docs, elsewhere = tmp_path / "architecture.ipynb", tmp_path / "images", tmp_path / "other"
    shutil.copy(ARCHITECTURE, notebook)
    monkeypatch.setattr(figures, "DOCS_IMAGES", str(docs))
    monkeypatch.setattr(figures, "ATTACHED_IN", str(notebook))
    options = {"output_dir": str(elsewhere), "dpi": 30}  # not the resolution of the docs' pictures
    assert figures.make_figures(list(figures.ATTACHED_FIGURES), options, say=lambda line: None) == []
    assert notebook.read_bytes() == open(ARCHITECTURE, "rb").read()  # drawn elsewhere: left alone
    lines = []
    assert figures.make_figures(list(figures.ATTACHED_FIGURES), dict(options, output_dir=str(docs)),
                                say=lines.append) == []
    attached = attachments(str(notebook))
    for figure in figures.ATTACHED_FIGURES:
        name = figures.FIGURES[figure][0]
        assert attached[name][1] == base64.b64encode((docs / name).read_bytes()).decode("ascii")
        assert attached[name][1] != attachments(ARCHITECTURE)[name][1]
    assert all(str(notebook) in line for line in lines), lines
    before, after = load(ARCHITECTURE), load(str(notebook))
    for cell in before["cells"] + after["cells"]:
        cell.pop("attachments", None)
    assert after == before


# A Python without matplotlib, as the wheel alone installs: the cells of a notebook run in order until
# one raises.
WITHOUT_MATPLOTLIB = """
import json, sys
sys.modules["matplotlib"] = None  # importlib finds no matplotlib, and importing it fails
namespace = {"__name__": "__main__"}
for index, source in json.load(sys.stdin):
    try:
        exec(compile(source, f"cell {index}", "exec"), namespace)
    except BaseException as error:
        print(json.dumps({"cell": index, "raised": type(error).__name__, "message": str(error)}))
        break
else:
    print(json.dumps({"cell": index, "raised": None, "message": ""}))
"""


@pytest.mark.parametrize("path", [path for path in NOTEBOOKS if "matplotlib" in "".join(
    "".join(cell["source"]) for cell in load(path)["cells"])], ids=os.path.basename)
def test_a_drawing_notebook_without_matplotlib_stops_first_with_one_line(path, tmp_path):
    """Right after the parameters, before anything slow (the quickstart's corpus download), not with a
    ModuleNotFoundError in the first cell that draws."""
    cells = load(path)["cells"]
    parameters = next(index for index, cell in enumerate(cells)
                      if "parameters" in cell["metadata"].get("tags", []))
    first = next(index for index, cell in enumerate(cells)
                 if index > parameters and cell["cell_type"] == "code")
    code = [(index, "".join(cells[index]["source"])) for index in range(1, first + 1)
            if cells[index]["cell_type"] == "code"]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([sys.executable, "-c", WITHOUT_MATPLOTLIB], input=json.dumps(code), cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    stopped = json.loads(done.stdout.strip().splitlines()[-1])
    assert (stopped["cell"], stopped["raised"]) == (first, "Stop"), \
        f"{os.path.basename(path)} without matplotlib, cells 1 to {first}: {stopped}"
    assert stopped["message"].startswith("matplotlib is missing") and "\n" not in stopped["message"]
    assert "pip install matplotlib" in stopped["message"]


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
