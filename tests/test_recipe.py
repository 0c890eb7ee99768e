"""benchmarks.recipe, the sweep of the main job's recipe: a row trains the quickstart on its flags for
its kind's number of updates, scores dev (never test), and merges into recipe.json and recipe.md; a
row whose step cost differs from mini's gets mini's updates scaled by the step times measured here."""

import json
import os
import re
import subprocess
import sys

import pytest

from toy import write_word_for_word_corpus

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def toy_extra_flags(tmp_path):
    """The quickstart's flags for a seconds-long run on a word-for-word corpus in ``tmp_path``."""
    write_word_for_word_corpus(tmp_path, (("train", 300), ("dev", 12), ("test", 5)))
    return (f"--dataset=files --train_data={tmp_path}/train.tsv --dev_data={tmp_path}/dev.tsv "
            f"--test_data={tmp_path}/test.tsv --data_dir={tmp_path}/data --vocab_size=320 "
            "--preset=tiny --num_heads=2 --max_length=16 --token_budget=128 --beam_size=2 "
            "--dev_every_steps=3")


def sweep(tmp_path, *args):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    command = [sys.executable, "-m", "benchmarks.recipe", f"--output_dir={tmp_path / 'results'}",
               f"--runs_dir={tmp_path / 'runs'}", *args]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_a_row_trains_its_flags_for_the_given_updates_scores_dev_and_merges(tmp_path):
    extra = toy_extra_flags(tmp_path)
    # An earlier sweep's records: one the row replaces (same row, seed, kind, flags), one it keeps.
    stale = {"row": "label_smoothing_0.2", "seed": 1, "kind": "avx2",
             "baseline": "--warmup_steps=200 --vocab_size=2000", "extra_flags": extra, "dev_sacrebleu": -1.0}
    kept = {**stale, "row": "mini", "flags": "", "asks": "the quickstart defaults", "seed": 2,
            "kind_label": "AVX2 only", "emulated": True, "updates": 6, "dev_sacrebleu": 1.5,
            "final_dev_loss": 3.0, "floors": {"copy": {"sacrebleu": 0.5},
                                              "translation_memory": {"sacrebleu": 0.7}},
            "machine": {"cpu": "elsewhere"}}
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "recipe.json").write_text(json.dumps({"rows": [stale, kept]}))
    result = sweep(tmp_path, f"--extra_flags={extra}", "--kind=avx2", "--keep_runs",
                   "--rows=label_smoothing_0.2", "--row_updates=label_smoothing_0.2=6")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    with open(tmp_path / "results" / "recipe.json") as stream:
        records = json.load(stream)["rows"]
    assert [(r["row"], r["seed"]) for r in records] == [("mini", 2), ("label_smoothing_0.2", 1)]
    record = records[1]
    with open(tmp_path / "runs" / "label_smoothing_0.2-avx2-seed1" / "report.json") as stream:
        report = json.load(stream)
    # the row trained what it says in the kind's precision and scored dev: the record is its report's
    assert report["eval_split"] == "dev" and report["test_sentences"] == 12
    assert record["updates"] == report["steps"] == 6
    assert record["dev_sacrebleu"] == report["sacrebleu"] != -1.0
    assert record["emulated"] and record["kind"] == "avx2"
    # its learning curve: the dev evaluations (every 3 updates) as train.log shows them
    log = (tmp_path / "runs" / "label_smoothing_0.2-avx2-seed1" / "train.log").read_text()
    assert [point[0] for point in record["dev_curve"]] == [3, 6]
    assert f"step 6 | dev loss {record['dev_curve'][1][1]:.4f}" in log
    for flag in ("--label_smoothing=0.2", "--mixed_precision=float32", "--seed=1",
                 "--checkpoint_every_steps=1"):
        assert flag in report["command"], report["command"]
    # on the sweep's baseline (recipe.BASELINE: the warm-up and vocabulary the defaults had when it
    # began)
    assert record["baseline"] == stale["baseline"] and "--warmup_steps=200" in report["command"]
    table = (tmp_path / "results" / "recipe.md").read_text()
    assert "| label_smoothing_0.2 |" in table and "| mini |" in table
    # the heading says where the updates came from: this row's were given, mini's were not
    assert re.search(r"mini's [\d,]+, scaled by the timed step costs", table), table
    assert "some rows' updates given with --row_updates" in table
    # best median dev score first
    first, second = ("| label_smoothing_0.2 |", "| mini |")[::1 if record["dev_sacrebleu"] >= 1.5
                                                             else -1]
    assert table.index(first) < table.index(second)


@pytest.mark.slow
def test_a_row_that_changes_the_step_cost_gets_mini_updates_scaled_by_the_timed_costs(tmp_path):
    """The kind's mini updates, times mini's seconds per update over the row's (its own model on its
    own batches, timed here): a 6+6-layer model of the tiny preset's width (2+2) makes fewer.
    One batch each (--cost_batches=1): each new batch shape is traced again before the timing,
    seconds of tracing per model that the ratio does not need."""
    code = f"""
import json, sys
from absl import flags
from benchmarks import recipe
flags.FLAGS(["recipe", "--kind=avx2", "--cost_batches=1", "--output_dir={tmp_path}",
             "--extra_flags={toy_extra_flags(tmp_path)}", "--row_updates=layers_4=77"])
print(json.dumps([recipe.KINDS["avx2"]["updates"],
                  recipe.budgets(["mini", "layers_6", "label_smoothing_0.2", "layers_4"])]))
"""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    mini, budgets = json.loads(result.stdout.splitlines()[-1])
    assert budgets["mini"][1] == budgets["label_smoothing_0.2"][1] == mini
    assert budgets["layers_4"][1] == 77 and "given" in budgets["layers_4"][2]
    limits, updates, source = budgets["layers_6"]
    seconds = [float(s) for s in re.findall(r"([\d.]+) s", source)]
    # The source shows each time rounded to 0.001 s: the ratio is known to within that rounding.
    ratio = seconds[0] / seconds[1]
    rounding = ratio * (0.0005 / seconds[0] + 0.0005 / seconds[1])
    assert abs(updates - mini * ratio) <= mini * rounding + 1, source
    assert seconds[1] > 1.5 * seconds[0], source  # three times the layers
    assert f"--train_steps={updates}" in limits and "--mixed_precision=float32" in limits
    assert f"--checkpoint_every_steps={updates // 40}" in limits


def test_a_rows_flags_are_read_as_the_trainer_reads_them():
    code = """
import json
from absl import flags
from benchmarks import recipe
flags.FLAGS(["recipe", "--kind=bf16"])
print(json.dumps(recipe.flag_values(
    "--d_model=192 --nonorm_first --dropout_rate=0.2 --warmup_steps=9 --vocab_size=4000 "
    "--preset=small --beam_size=2", ["d_model", "norm_first", "dropout_rate", "warmup_steps",
                                     "vocab_size", "preset", "num_layers", "kind"])))
"""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    # typed, a negated boolean, the preset; flags not asked for (--beam_size), not given
    # (--num_layers) or this program's own, given on its command line (--kind), are left out
    assert json.loads(result.stdout.splitlines()[-1]) == {
        "d_model": 192, "norm_first": False, "dropout_rate": 0.2, "warmup_steps": 9,
        "vocab_size": 4000, "preset": "small"}


def test_step_costs_timed_alone_are_recorded_and_used_by_later_sweeps_of_the_same_settings(
        tmp_path):
    """--costs_only's timing (faked here: its arithmetic is the point) lands in step_costs.json; a
    later sweep in that precision with the same --extra_flags scales mini's updates by it without
    timing again; another precision or other extra flags time afresh."""
    code = f"""
import json
from absl import flags
from benchmarks import recipe
flags.FLAGS(["recipe", "--kind=bf16", "--output_dir={tmp_path}", "--extra_flags=--seed=3"])
recipe.step_costs = lambda names, precision: {{"mini": 0.2, "layers_6": 0.5, "vocab_8000": 0.25}}
recipe.record_costs(["layers_6", "vocab_8000"], "bfloat16")
def timing(names, precision):
    raise AssertionError(f"timed again: {{names}} in {{precision}}")
recipe.step_costs = timing
found = recipe.budgets(["layers_6", "vocab_8000", "mini", "warmup_1000+layers_6",
                        "warmup_1000+dropout_0"])
flags.FLAGS.extra_flags = ""
try:
    recipe.budgets(["layers_6"])
    afresh = False
except AssertionError:
    afresh = True
print(json.dumps([found, afresh, recipe.KINDS["bf16"]["updates"]]))
"""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    found, afresh, mini = json.loads(result.stdout.splitlines()[-1])
    assert found["layers_6"][1] == round(mini * 0.2 / 0.5)
    assert found["vocab_8000"][1] == round(mini * 0.2 / 0.25) and found["mini"][1] == mini
    assert "step_costs.json" in found["layers_6"][2] and "0.500 s" in found["layers_6"][2]
    # a combination costs what its cost-changing part costs: the same timing, nothing timed again
    assert found["warmup_1000+layers_6"][1] == found["layers_6"][1]
    assert found["warmup_1000+dropout_0"][1] == mini
    assert afresh
    with open(tmp_path / "step_costs.json") as stream:
        (timing,) = json.load(stream)["timings"]
    assert timing["precision"] == "bfloat16" and timing["extra_flags"] == "--seed=3"
    assert "date" in timing["machine"]
    # a wall-clock sweep has no precision to time in: one line naming the flags
    result = sweep(tmp_path, "--kind=here", "--costs_only")
    assert result.returncode == 2 and "--costs_only" in result.stderr.strip().splitlines()[-1]
    assert "Traceback" not in result.stderr
    # a combination of a row that does not exist: one line naming the flag
    result = sweep(tmp_path, "--kind=bf16", "--rows=warmup_1000+warmup_7")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "--rows" in result.stderr.strip().splitlines()[-1]
    # a damaged record: one line naming it, nothing timed or trained
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "step_costs.json").write_text('{"timings": [')
    result = sweep(tmp_path, "--kind=bf16", "--rows=layers_4")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(
        f"recipe: error: {tmp_path / 'results' / 'step_costs.json'}: not a JSON file")


@pytest.mark.slow
def test_selection_rows_choose_among_mini_kept_checkpoints_and_score_them_as_the_quickstart(
        tmp_path, monkeypatch):
    """A selection row trains nothing: mini trains first (keeping its checkpoints), the row
    averages every Nth of them and scores dev; the average is the mean of those checkpoints, and
    mini's own choice scored this way is mini's record. A later sweep reuses the kept run."""
    import numpy as np
    import tensorflow as tf

    extra = toy_extra_flags(tmp_path)
    for name in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):  # deterministic training
        monkeypatch.setenv(name, "1")
    env = dict(os.environ)
    result = sweep(tmp_path, f"--extra_flags={extra}", "--kind=avx2", "--rows=interval_x2",
                   "--row_updates=mini=40")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    records = {r["row"]: r for r in json.loads(
        (tmp_path / "results" / "recipe.json").read_text())["rows"]}
    assert set(records) == {"mini", "interval_x2"}
    mini, selected = records["mini"], records["interval_x2"]
    assert mini["updates"] == selected["updates"] == 40
    run_dir = tmp_path / "runs" / "mini-avx2-seed1"
    command = json.loads((run_dir / "report.json").read_text())["command"]
    assert any(part.startswith("--keep_checkpoints=") for part in command)
    # every 2nd of the newest checkpoints, 5 of them: steps 40, 38, ..., 32 (one per step here)
    chosen = re.findall(r"ckpt-\d+", selected["updates_from"])
    assert chosen == [f"ckpt-{n}" for n in (32, 34, 36, 38, 40)], selected["updates_from"]
    average = str(run_dir / "selections" / "interval_x2" / "ckpt")
    reader = tf.train.load_checkpoint(average)
    readers = [tf.train.load_checkpoint(str(run_dir / name)) for name in chosen]
    names = [name for name, dtype in reader.get_variable_to_dtype_map().items()
             if "/.ATTRIBUTES/" in name and dtype.is_floating]  # the weights, not counters
    assert len(names) > 10
    for name in names:
        np.testing.assert_allclose(
            reader.get_tensor(name), np.mean([r.get_tensor(name) for r in readers], axis=0),
            rtol=1e-5, atol=1e-6)
    # A later sweep reuses the kept run: nothing trains. Its rows: mini's own weights chosen as a
    # selection (the last 5, every one: a row added to recipe.SELECTIONS here, the sweep's main
    # then run as `python -m benchmarks.recipe` runs it), which score what mini's record says (the
    # selections are scored as the quickstart scores), and another selection.
    argv = ["recipe", f"--output_dir={tmp_path / 'results'}", f"--runs_dir={tmp_path / 'runs'}",
            f"--extra_flags={extra}", "--kind=avx2", "--rows=as_mini,last_checkpoint",
            "--row_updates=mini=40"]
    code = f"""
import sys
from benchmarks import recipe
from trainers import console
recipe.SELECTIONS["as_mini"] = (1, 5, "", "")
sys.argv = {argv!r}
console.run(recipe.main)
"""
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "trainers.quickstart" not in result.stdout
    records = {r["row"]: r for r in json.loads(
        (tmp_path / "results" / "recipe.json").read_text())["rows"]}
    assert records["mini"] == mini and re.findall(
        r"ckpt-\d+", records["last_checkpoint"]["updates_from"]) == ["ckpt-40"]
    assert re.findall(r"ckpt-\d+", records["as_mini"]["updates_from"]) == [
        f"ckpt-{n}" for n in range(36, 41)]
    assert records["as_mini"]["dev_sacrebleu"] == mini["dev_sacrebleu"]


def test_on_the_bf16_kind_every_row_changes_mini_not_the_kind_recipe():
    """The quickstart widens mini on a bfloat16 CPU (its KIND_RECIPES); a sweep row, trained in
    bfloat16, must still be its own change to mini, so the row's arguments keep mini's width there.
    In a process of its own: benchmarks.recipe's flags would clash with other programs' here."""
    code = """
import json
from absl import flags
from absl.testing import flagsaver
from benchmarks import recipe
from keras_transformer.training import strategy
from trainers import quickstart
strategy.bfloat16_cpu = lambda: True  # a bf16 machine, faked
FLAGS, widths = flags.FLAGS, {}
for name in ("heads_8", "warmup_1000", "d_model_256"):
    with flagsaver.flagsaver():
        FLAGS(["recipe"])
        arguments = recipe.row_arguments(name, 1, ["--train_steps=10", "--mixed_precision=bfloat16"])
        FLAGS(["quickstart", *arguments])
        quickstart.choose_recipe()
        widths[name] = [FLAGS.preset, FLAGS.d_model, FLAGS.d_ff]
print(json.dumps(widths))
"""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.splitlines()[-1]) == {
        "heads_8": ["mini", None, None], "warmup_1000": ["mini", None, None],
        "d_model_256": ["mini", 256, 1024]}


def test_the_table_names_the_precision_rows_trained_in_and_a_wall_clock_row_its_cpu():
    """A kind's updates trained in another precision (the bf16 kind on an AVX2 CPU, where bfloat16
    is slow: --extra_flags=--mixed_precision=float32) get a table of their own whose heading says
    float32, not the kind's bfloat16; rows of 20 minutes here (--kind=here) are headed by their CPU;
    rows of one table trained on several machines are named with theirs."""
    code = """
from absl import flags
from benchmarks import recipe
flags.FLAGS(["recipe"])
row = {"row": "max_length_48", "flags": "--max_length=48", "asks": "max length", "seed": 1,
       "kind": "bf16", "kind_label": "AVX-512 + AVX512-BF16", "emulated": True,
       "updates_from": "given (--row_updates)", "baseline": recipe.BASELINE, "extra_flags": "",
       "updates": 7, "dev_sacrebleu": 1.0, "final_dev_loss": 3.0, "machine": {"cpu": "Xeon"},
       "floors": {"copy": {"sacrebleu": 0.5}, "translation_memory": {"sacrebleu": 0.7}}}
print(recipe.table([row, {**row, "extra_flags": "--mixed_precision=float32", "machine": {"cpu": "EPYC"}},
                    {**row, "kind": "here", "kind_label": "EPYC", "emulated": False,
                     "machine": {"cpu": "EPYC"}},
                    {**row, "seed": 2}, {**row, "row": "mini", "flags": ""},
                    {**row, "row": "max_length_96", "flags": "--max_length=96",
                     "machine": {"cpu": "EPYC"}}]))
"""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    headings = [line for line in result.stdout.splitlines() if line.startswith("## ")]
    assert len(headings) == 3, result.stdout
    bf16, = [h for h in headings if "machine: Xeon" in h]
    float32, = [h for h in headings if "--mixed_precision=float32`" in h]
    here, = [h for h in headings if h.startswith("## EPYC")]
    assert "emulated by updates in bfloat16: the updates given with --row_updates" in bf16
    assert "emulated by updates in float32: the updates given with --row_updates" in float32
    assert "machine: EPYC" in float32
    # an emulated kind's rows trained on two machines: the one most rows trained on, then the other
    assert "; machine: Xeon; max_length_96 on EPYC)" in bf16
    assert "(20 minutes of wall clock; machine: EPYC)" in here
