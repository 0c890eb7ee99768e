"""Every program's ``--help`` as a user sees it: status 0, no TensorFlow start-up, and no help text
naming a default other than the one absl prints beside it; a bad flag is one line pointing to that
``--help``. Also: the docs' CPU flag file is the main job's recipe, and no tracked file repeats a
claim known to be false."""

import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"}


def programs():
    """Every ``python -m`` program of trainers/, benchmarks/ and docs/tools/: the modules run as
    __main__."""
    found = []
    for package in ("trainers", "benchmarks", "docs.tools"):
        folder = os.path.join(ROOT, *package.split("."))
        for name in sorted(os.listdir(folder)):
            if not name.endswith(".py"):
                continue
            with open(os.path.join(folder, name), encoding="utf-8") as stream:
                if 'if __name__ == "__main__":' not in stream.read():
                    continue
            module = name[:-len(".py")]
            found.append(package if module == "__main__" else f"{package}.{module}")
    return found


PROGRAMS = programs()

# Runs a program as `python -m` does and says on stderr, last, whether TensorFlow was imported.
RUN_AND_REPORT = """
import runpy, sys
name = sys.argv[1]
sys.argv = [name, *sys.argv[2:]]
try:
    runpy.run_module(name, run_name="__main__", alter_sys=True)
finally:
    imported = "tensorflow" in sys.modules
    sys.stderr.write("\\nTENSORFLOW IMPORTED\\n" if imported else "\\nno tensorflow\\n")
"""


@pytest.fixture(scope="module")
def helps(tmp_path_factory):
    """{program: (status, stdout, stderr)} of ``--help``, all started at once (each takes well
    under a second without TensorFlow), from a folder outside the project."""
    cwd = tmp_path_factory.mktemp("help")
    started = {name: subprocess.Popen([sys.executable, "-c", RUN_AND_REPORT, name, "--help"],
                                      cwd=cwd, env=ENV, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
               for name in PROGRAMS}
    results = {}
    for name, process in started.items():
        out, err = process.communicate(timeout=120)
        results[name] = (process.returncode, out, err)
    return results


# absl's description of a flag's type, the line after its help (and its default).
TYPE_LINE = re.compile(r"\n    \((?:an? |integer |number )[^()\n]*(?:\[[^\]]*\])?[^()\n]*\)(?=\n|$)"
                       r"|;\n    repeat this option")


def parse_help(text):
    """``(usage, {flag: (help text, default as printed or None, enum choices)})`` of absl's
    ``--help`` output."""
    usage, _, listing = text.partition("\nflags:\n")
    entries = re.split(r"\n(?=  --)", listing)
    parsed = {}
    for entry in entries:
        match = re.match(r"  --(?:\[no\])?([\w.-]+): (.*)", entry, re.S)
        if not match:
            continue
        name, body = match.groups()
        body = body.split("\n\n")[0]  # the last entry runs into absl's closing line
        default = None
        marker = body.find("\n    (default: '")
        if marker >= 0:
            help_text, rest = body[:marker], body[marker + len("\n    (default: '"):]
            default = re.split(r"'\)(?:\n|$)", rest)[0].replace("\n    ", "")
        else:
            help_text = TYPE_LINE.split(body)[0]
        choices = []
        enum = re.match(r"<([^>]*)>: ", help_text.replace("\n    ", " "))
        if enum:
            choices = enum.group(1).split("|")
        parsed[name] = (" ".join(help_text.split()), default, choices)
    return usage, parsed


# What a help text says the flag stands for when not given: "default: 20", "(default 8)",
# "Unset: 37000", "5 by default".
STATED = [re.compile(r"\b(?:default|unset)\b\s*(?::|is|=)?\s*(?P<value>[^\s,;()]+)", re.I),
          re.compile(r"(?P<value>[^\s,;()]+)\s+by default\b", re.I)]


def number(text):
    try:
        return float(text)
    except ValueError:
        return None


def contradictions(name, help_text, default, choices):
    """The statements of ``help_text`` about the flag's default that disagree with ``default``,
    the one absl prints (None: it prints none, and the help text is the only word on it)."""
    if default is None:
        return []
    found = []
    if re.search(r"\bunset:", help_text, re.I):
        found.append(f"--{name}: says what 'Unset' means beside (default: '{default}')")
    for pattern in STATED:
        for match in pattern.finditer(help_text):
            value = match.group("value").rstrip(".").strip("'\"`")
            stated, shown = number(value), number(default)
            if stated is not None:
                agrees = shown is not None and stated == shown
            elif "/" in value or value in choices or value.lower() in ("true", "false"):
                agrees = value == default
            else:
                continue  # words ("the paper's sentence", "each part's"): not a value
            if not agrees:
                found.append(f"--{name}: help says {match.group(0)!r}, absl shows "
                             f"(default: '{default}')")
    return found


@pytest.mark.parametrize("program", PROGRAMS)
def test_help_exits_0_without_tensorflow_and_lists_flags(helps, program):
    status, out, err = helps[program]
    assert status == 0, err[-3000:]
    assert err.strip().endswith("no tensorflow"), f"--help imported TensorFlow: {err[-2000:]}"
    _, flags = parse_help(out)
    assert flags, out[-2000:]


@pytest.mark.parametrize("program", PROGRAMS)
def test_no_help_text_names_another_default_than_the_one_shown(helps, program):
    usage, flags = parse_help(helps[program][1])
    problems = []
    for name, (text, default, choices) in flags.items():
        problems += contradictions(name, text, default, choices)
    # The usage text: "--strategy=auto (the default)", "--dataset is required".
    for name, value in re.findall(r"--(\w+)=(\S+) \(the default\)", usage):
        if name in flags and flags[name][1] != value:
            problems.append(f"usage says --{name}={value} is the default, absl shows "
                            f"{flags[name][1]!r}")
    for name in re.findall(r"--(\w+) is required", usage):
        if name in flags and flags[name][1] is not None:
            problems.append(f"usage says --{name} is required, absl shows (default: "
                            f"'{flags[name][1]}')")
    assert not problems, "\n".join(problems)


def test_the_programs_batch_as_the_library_does(helps):
    """A command and the library's functions translate, score and align the same sentences in
    batches of one size (``inference.BATCH_SIZE``), so neither is the slower way."""
    from keras_transformer.inference import BATCH_SIZE

    batches = {program: parse_help(helps[program][1])[1]["batch_size"][1]
               for program in PROGRAMS if "--batch_size:" in helps[program][1]}
    assert batches == {program: str(BATCH_SIZE) for program in
                       ("trainers.evaluate", "trainers.score", "trainers.translate")}


def test_each_lists_what_it_is_about_and_not_what_does_nothing_there(helps):
    listed = {name: set(parse_help(helps[name][1])[1]) for name in PROGRAMS}
    for name in ("wmt", "quickstart", "evaluate", "translate", "export", "average_checkpoints"):
        assert "model_dir" in listed[f"trainers.{name}"], name
    # prepare_data makes no training batches: BPE-dropout would do nothing there.
    assert {"dataset", "token_budget"} <= listed["trainers.prepare_data"]
    assert "subword_sampling" not in listed["trainers.prepare_data"]
    # evaluate reads a test set: the corpus flags, not the batch shape.
    assert "dataset" in listed["trainers.evaluate"]
    assert "token_budget" not in listed["trainers.evaluate"]
    assert "((5 + |Y|) / 6) ** alpha" in " ".join(helps["trainers.evaluate"][1].split())


ABSL_FLAGS = {"flagfile", "undefok", "helpfull", "help", "helpshort", "helpxml", "verbosity",
              "only_check_args"}


@pytest.mark.parametrize("program", PROGRAMS)
def test_flag_help_names_only_flags_of_the_program(helps, program):
    _, flags = parse_help(helps[program][1])
    # A flag in quotes is an example value (flags passed on to another program).
    named = {name for text, _, _ in flags.values() for name in re.findall(r"(?<!')--(\w+)", text)}
    # absl's negative of a boolean flag, --noNAME, is one of its names too
    known = set(flags) | {"no" + name for name, (_, default, _) in flags.items()
                          if default in ("true", "false")}
    assert not named - known - ABSL_FLAGS, f"{program}: not its flags: {named - known}"


def test_the_checker_catches_a_default_named_beside_another():
    # The contradictions this test exists for, as absl printed them: each is found.
    assert contradictions("vocab_size", "Shared subword vocabulary size, a multiple of 8. Unset: "
                          "37000 for WMT14 (the paper's), 8000 for the other corpora.", "2000", [])
    assert contradictions("average_last", "Average the last N checkpoints at the end (default: "
                          "20 for big, else 5, as section 6.1). 0: don't.", "5", [])
    assert contradictions("model_dir", "Checkpoints (default runs/<preset>).", "runs/quickstart",
                          [])
    # and what agrees, or describes instead of naming a value, is not.
    assert not contradictions("d", "Dropout. Default 0.", "0.0", [])
    assert not contradictions("t", "Threads (0: TensorFlow's default, one per core).", "1", [])
    assert not contradictions("s", "The sentence (default: the paper's sentence).", "It is", [])
    usage, flags = parse_help("doc\n\nflags:\n\n/x.py:\n  --dataset: <a|b>: Which.\n"
                              "    (default: 'a')\n  --n: N (default: 3).\n    (default: '3')\n"
                              "    (an integer)\n\nTry --helpfull to get a list of all flags.\n")
    assert flags == {"dataset": ("<a|b>: Which.", "a", ["a", "b"]), "n": ("N (default: 3).", "3",
                                                                          [])}


def integer_flag(help_output):
    """A flag of the program whose value must be an integer, from absl's type line."""
    match = re.search(r"\n  --([\w.]+):(?:(?!\n  --).)*?\n    \((?:an? (?:positive |non-negative )?"
                      r"integer|integer )", help_output, re.S)
    return match.group(1) if match else None


@pytest.mark.parametrize("program", PROGRAMS)
def test_a_bad_flag_is_one_line_pointing_to_the_programs_help(helps, program, tmp_path):
    short = program.rsplit(".", 1)[-1]
    cases = [["--no_such_flag_here=1"]]
    name = integer_flag(helps[program][1])
    if name:
        cases.append([f"--{name}=not_a_number"])
    for args in cases:
        result = subprocess.run([sys.executable, "-m", program, *args], cwd=tmp_path, env=ENV,
                                capture_output=True, text=True, timeout=120)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.returncode == 2, result.stderr[-2000:]
        assert len(lines) == 1, result.stderr[-2000:]
        assert lines[0].startswith(f"{short}: error: "), lines[0]
        assert lines[0].endswith(f"(see python -m {program} --help)"), lines[0]
        assert args[0].split("=")[0].lstrip("-") in lines[0], lines[0]


@pytest.mark.parametrize("program, flag, value, allowed", [
    ("benchmarks.training_throughput", "precisions", "auto", "float32 or bfloat16"),
    ("benchmarks.profile_step", "precisions", "auto", "float32 or bfloat16"),
    ("benchmarks.training_throughput", "main_job_precisions", "fp16", "float32, bfloat16 or auto")])
def test_a_precision_the_step_benchmarks_do_not_know_is_a_bad_flag(program, flag, value, allowed,
                                                                   tmp_path):
    # --precisions comes from benchmarks.batch_flags; profile_step once met "auto" with a
    # KeyError deep in its main job's widths, after half a minute of setting up.
    result = subprocess.run([sys.executable, "-m", program, f"--{flag}=float32,{value}"],
                            cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-2000:]
    assert f"--{flag}" in lines[0] and allowed in lines[0], lines[0]


# The defaults a training program trains with, from its own flags and main() up to the point where
# TensorFlow would start (make_strategy): the TrainingConfig its main() built, beside the flags of
# the same names.
EFFECTIVE = """
import dataclasses, importlib, json, sys
from absl import flags
name = sys.argv[1]
program = importlib.import_module("trainers." + name)
from trainers import training_flags
FLAGS = flags.FLAGS
FLAGS([name, *sys.argv[2:]])
built = []
build = training_flags.training_config
training_flags.training_config = lambda *a, **k: built.append(build(*a, **k)) or built[-1]

def stop():
    config = dataclasses.asdict(built[-1])
    shown = {flag.name: flag.default for flag in FLAGS.get_key_flags_for_module(program)}
    print(json.dumps({"config": config, "shown": shown, "built": len(built)}, default=str))
    sys.exit(0)

training_flags.make_strategy = stop
program.main([name])
"""


@pytest.mark.parametrize("program,args", [("quickstart", []), ("wmt", ["--dataset=ding_de_en"])])
def test_the_default_shown_is_the_one_trained_with(program, args, tmp_path):
    result = subprocess.run([sys.executable, "-c", EFFECTIVE, program, *args], cwd=tmp_path,
                            env=ENV, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(result.stdout.strip().splitlines()[-1])
    config, shown = record["config"], record["shown"]
    assert record["built"] == 1, "the training config is built once"
    compared = [name for name, value in shown.items() if name in config
                and isinstance(value, (int, float)) and not isinstance(value, bool)]
    assert {"keep_checkpoints", "warmup_steps", "checkpoint_every_minutes"} <= set(compared)
    for name in compared:
        # 0 stands for "none" where the training config takes None (no step limit, no interval).
        effective = config[name] if config[name] is not None else 0
        assert effective == shown[name], (
            f"{program} --help shows --{name} (default: {shown[name]!r}) but trains with "
            f"{config[name]!r}")


def fenced_block_after(path, marker):
    """The first fenced code block after the line holding ``marker`` in docs file ``path``."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as stream:
        text = stream.read()
    after = text[text.index(marker):]
    match = re.search(r"```[a-z]*\n(.*?)```", after, re.S)
    return match.group(1)


def test_the_fairseq_and_opennmt_table_names_only_flags_we_have(helps):
    with open(os.path.join(ROOT, "docs", "training.md"), encoding="utf-8") as stream:
        text = stream.read()
    table = text[text.index("## From fairseq or OpenNMT-tf"):].split("\n\n")[2]
    ours = [row.split(" | ")[2] for row in table.splitlines()[2:]]
    named = {name for cell in ours for name in re.findall(r"--(\w+)", cell)}
    assert len(named) > 15, table
    have = {name for program in PROGRAMS if program.startswith("trainers.")
            for name in parse_help(helps[program][1])[1]}
    assert not named - have, f"not flags of ours: {named - have}"


FLAG_VALUES = """
import json, sys
from absl import flags
from trainers import wmt  # noqa: F401  (its flags, with its own defaults)
flags.FLAGS(["wmt", "--flagfile=" + sys.argv[1]])
values = {name: flags.FLAGS[name].value for name in flags.FLAGS}
from trainers.quickstart import QUICKSTART_DEFAULTS
print(json.dumps({"values": values, "quickstart": QUICKSTART_DEFAULTS}, default=str))
"""


def test_the_docs_cpu_flag_file_is_the_main_jobs_recipe(tmp_path):
    # trainers/cpu.flags, the flag file for trainers.wmt on a CPU shown in docs/training.md: every value the main job sets, the
    # same as QUICKSTART_DEFAULTS (the folders aside), so the docs cannot drift from the code.
    flag_file = os.path.join(ROOT, "trainers", "cpu.flags")
    with open(flag_file, encoding="utf-8") as stream:
        assert fenced_block_after("docs/training.md", "`trainers/cpu.flags`") == stream.read()
    result = subprocess.run([sys.executable, "-c", FLAG_VALUES, str(flag_file)], cwd=tmp_path,
                            env=ENV, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(result.stdout.strip().splitlines()[-1])
    values = record["values"]
    for name, value in record["quickstart"].items():
        if name in ("model_dir", "export_dir"):
            continue
        assert values[name] == value, (f"cpu.flags: --{name}={values[name]!r}, the main job: "
                                       f"{value!r}")


# Claims once made in this repository that were not true: a recipe sweep that was never run, a
# README table that does not exist, a --helpfull that lists every flag of a program, a default
# corpus of trainers.wmt.
FALSE_CLAIMS = ["chosen on the dev set by", "chosen on the dev set with",
                "chosen by `python -m benchmarks.recipe`", "defaults are chosen from this table",
                "main-job recipe table", "--helpfull lists", "the default of `trainers.wmt`",
                "each off by default"]


def tracked_text_files():
    try:
        names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                               check=True, timeout=60).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: no list of tracked files")
    for name in filter(None, names):
        path = os.path.join(ROOT, name)
        if os.path.isfile(path) and os.path.abspath(path) != os.path.abspath(__file__):
            try:
                with open(path, encoding="utf-8") as stream:
                    yield name, stream.read()
            except UnicodeDecodeError:
                continue  # pictures, binary data


def test_no_tracked_file_repeats_a_known_false_claim():
    found = [f"{name}: {claim!r}" for name, text in tracked_text_files()
             for claim in FALSE_CLAIMS if claim.lower() in text.lower()]
    assert not found, "\n".join(found)
