"""trainers/console.py: what every command shows besides its results."""

import json
import os
import subprocess
import sys


def test_a_missing_package_ends_in_one_line_naming_how_to_install_it(tmp_path):
    # sklearn blocked as if never installed: the floors need it, so evaluate --floors would fail
    # deep inside; console.run turns that into one line: in a clone naming its setup command,
    # installed from the wheel (no setup.sh there) the wheel.
    code = """
import sys
sys.modules["sklearn"] = None  # `import sklearn` now raises ModuleNotFoundError
sys.argv = ["evaluate"]
from {package} import console

def main(argv):
    import sklearn  # noqa: F401

console.run(main)
"""
    for package, remedy in (("trainers", "install the project's stack with `bash trainers/setup.sh`"),
                            ("keras_transformer_trainers",
                             "install the project's wheel into this Python again (`"
                             f"{sys.executable} -m pip install keras_transformer_paper-*.whl`)")):
        result = subprocess.run([sys.executable, "-c", code.format(package=package)],
                                capture_output=True, text=True, timeout=120,
                                cwd=os.getcwd() if package == "trainers" else tmp_path)
        assert result.returncode == 1
        lines = result.stderr.strip().splitlines()
        assert "Traceback" not in result.stderr
        assert lines[-1].startswith("evaluate: error: the Python package 'sklearn' is missing")
        assert remedy in lines[-1], lines[-1]


def test_a_library_message_names_the_programs_as_they_were_installed(tmp_path):
    # The library names the programs as a clone runs them; installed (a wheel, Colab) they are
    # keras_transformer_trainers, and the one error line must name a command that exists there.
    code = """
import sys
sys.argv = ["score"]
from {package} import console
from keras_transformer.inference import parse_nbest_line

def main(argv):
    parse_nbest_line(b"no tabs")

console.run(main)
"""
    for package in ("trainers", "keras_transformer_trainers"):
        result = subprocess.run([sys.executable, "-c", code.format(package=package)],
                                capture_output=True, text=True, timeout=120,
                                cwd=os.getcwd() if package == "trainers" else tmp_path)
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.strip().splitlines()[-1] == (
            "score: error: 0 tab(s); an n-best line is INDEX<TAB>SCORE<TAB>TRANSLATION (as "
            f"python -m {package}.translate --n_best writes it)"), result.stderr


def test_a_library_message_names_the_fields_as_the_program_s_flags(tmp_path):
    # The library (used from Python too) names its config fields; a program's user passes flags.
    # Only this program's flags are renamed: not a path's part, not a quoted value, not a flag
    # already named, not a word that is no flag here.
    from keras_transformer import data

    few = tmp_path / "few.tsv"
    few.write_text("".join(f"Sentence {i}.\tSatz {i}.\n" for i in range(4)) * 30, encoding="utf-8")
    code = """
import os
from trainers import console, data_flags
from keras_transformer.data import pipeline

def main(argv):
    if os.environ.get("MADE_UP"):
        raise ValueError(os.environ["MADE_UP"])
    for split in ("dev", "test"):  # which split gets no pair depends on the hash
        pipeline.load_text_pairs(data_flags.data_config(writes=False), split)

console.run(main)
"""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    config = data.DataConfig(dataset="files", train_data=str(few))
    split = next(split for split in ("dev", "test") if _no_pairs_error(config, split))
    made_up = "data_dir='a/train_data=b' (--model_dir=x) has d_model=2, split=dev"
    for argv, env, line in (
            (["--dataset=files", f"--train_data={few}"], {},
             f"--train_data='{few}': no {split} pairs held out of it: its 120 pairs have too few "
             f"different source sentences to fall into the held-out share; pass --{split}_data=PATH, "
             "or --hold_out=False to train on every pair."),
            ([], {"MADE_UP": made_up}, "--" + made_up)):  # d_model is no data flag
        result = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True,
                                text=True, timeout=300, cwd=tmp_path,
                                env={**os.environ, "PYTHONPATH": root, **env})
        assert result.returncode == 1, result.stderr[-2000:]
        assert result.stderr.strip().splitlines()[-1] == f"-c: error: {line}", result.stderr


def _no_pairs_error(config, split):
    from keras_transformer import data

    try:
        data.load_text_pairs(config, split)
    except ValueError:
        return True
    return False


def test_a_tilde_starting_a_path_flag_is_the_home_folder(tmp_path):
    """The shell expands `--model_dir ~/x` but not `--model_dir=~/x`: the programs do, in every
    comma-separated part of a path flag, and nowhere else (a sentence to translate keeps it)."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (home / "train.tsv").write_text("one\teins\n", encoding="utf-8")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = """
import json, sys
from absl import flags
from trainers import console
flags.DEFINE_string("model_dir", None, "")
flags.DEFINE_string("train_data", None, "")
flags.DEFINE_multi_string("text", None, "")

def main(argv):
    print(json.dumps({name: flags.FLAGS[name].value for name in ("model_dir", "train_data", "text")}))

console.run(main)
"""
    result = subprocess.run(
        [sys.executable, "-c", code, "--model_dir=~/runs/x", "--train_data=~/a.en,~/a.de",
         "--text=~/not a path"], capture_output=True, text=True, timeout=120, cwd=work,
        env={**os.environ, "HOME": str(home), "PYTHONPATH": root})
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout) == {
        "model_dir": f"{home}/runs/x", "train_data": f"{home}/a.en,{home}/a.de",
        "text": ["~/not a path"]}
    # a real command names the folder it looked in
    result = subprocess.run(
        [sys.executable, "-m", "trainers.translate", "--input=~/missing.txt"],
        capture_output=True, text=True, timeout=300, cwd=work,
        env={**os.environ, "HOME": str(home), "PYTHONPATH": root})
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"translate: error: --input={home}/missing.txt: no such file")


def test_help_names_the_programs_as_they_were_installed(tmp_path):
    # absl's --help shows the program's docstring, whose examples name the clone's programs.
    result = subprocess.run([sys.executable, "-m", "keras_transformer_trainers.quickstart", "--help"],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "python -m keras_transformer_trainers.quickstart --train_minutes=5" in result.stdout
    assert "python -m trainers." not in result.stdout
