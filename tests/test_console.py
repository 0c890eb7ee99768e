"""trainers/console.py: what every command shows besides its results."""

import subprocess
import sys


def test_a_missing_package_ends_in_one_line_naming_the_setup_command(tmp_path):
    # sklearn blocked as if never installed: the floors need it, so evaluate --floors would fail
    # deep inside; console.run turns that into one line.
    code = """
import sys
sys.modules["sklearn"] = None  # `import sklearn` now raises ModuleNotFoundError
sys.argv = ["evaluate"]
from trainers import console

def main(argv):
    import sklearn  # noqa: F401

console.run(main)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr
    assert lines[-1].startswith("evaluate: error: the Python package 'sklearn' is missing")
    assert "bash trainers/setup.sh" in lines[-1]


PROGRAMS = ("wmt", "quickstart", "prepare_data", "evaluate", "translate", "export",
            "average_checkpoints")


def test_help_of_every_program_answers_without_importing_tensorflow():
    # Each program's --help in its own interpreter (absl exits after printing it), which then
    # reports whether TensorFlow was imported: --help must not wait for TensorFlow's start-up.
    code = """
import contextlib, io, runpy, sys
name = sys.argv[1]
sys.argv = [name, "--help"]
out = io.StringIO()
try:
    with contextlib.redirect_stdout(out):
        runpy.run_module("trainers." + name, run_name="__main__")
except SystemExit:
    pass
print(out.getvalue())
print("TENSORFLOW IMPORTED" if "tensorflow" in sys.modules else "no tensorflow")
"""
    helps = {}
    for name in PROGRAMS:
        result = subprocess.run([sys.executable, "-c", code, name], capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 0, result.stderr[-3000:]
        assert result.stdout.strip().endswith("no tensorflow"), name
        helps[name] = result.stdout
        assert "--model_dir" in helps[name] or name == "prepare_data", name
    # Each lists what it is about, and not what does nothing there.
    assert "--dataset" in helps["prepare_data"] and "--token_budget" in helps["prepare_data"]
    assert "--dataset" in helps["evaluate"] and "--token_budget" not in helps["evaluate"]
    assert "((5 + |Y|) / 6) ** alpha" in " ".join(helps["evaluate"].split())
