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

