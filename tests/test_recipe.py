"""benchmarks.recipe, the sweep of the main job's recipe: a row trains the quickstart on its flags for
its kind's number of updates, scores dev (never test), and merges into recipe.json and recipe.md; a
row whose step cost differs from mini's is refused without its own update count."""

import json
import os
import subprocess
import sys

from toy import write_word_for_word_corpus

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sweep(tmp_path, *args):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    command = [sys.executable, "-m", "benchmarks.recipe", f"--output_dir={tmp_path / 'results'}",
               f"--runs_dir={tmp_path / 'runs'}", *args]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def test_a_row_trains_its_flags_for_the_given_updates_scores_dev_and_merges(tmp_path):
    write_word_for_word_corpus(tmp_path, (("train", 300), ("dev", 12), ("test", 5)))
    extra = (f"--dataset=files --train_data={tmp_path}/train.tsv --dev_data={tmp_path}/dev.tsv "
             f"--test_data={tmp_path}/test.tsv --data_dir={tmp_path}/data --vocab_size=320 "
             "--preset=tiny --num_heads=2 --max_length=16 --token_budget=128 --beam_size=2 "
             "--dev_every_steps=0")
    # An earlier sweep's records: one the row replaces (same row, seed, kind, flags), one it keeps.
    stale = {"row": "label_smoothing_0.2", "seed": 1, "kind": "avx2", "extra_flags": extra,
             "dev_sacrebleu": -1.0}
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
    for flag in ("--label_smoothing=0.2", "--mixed_precision=float32", "--seed=1",
                 "--checkpoint_every_steps=1"):
        assert flag in report["command"], report["command"]
    table = (tmp_path / "results" / "recipe.md").read_text()
    assert "| label_smoothing_0.2 |" in table and "| mini |" in table
    # best median dev score first
    first, second = ("| label_smoothing_0.2 |", "| mini |")[::1 if record["dev_sacrebleu"] >= 1.5
                                                             else -1]
    assert table.index(first) < table.index(second)


def test_a_row_that_changes_the_step_cost_needs_its_own_updates(tmp_path):
    result = sweep(tmp_path, "--kind=bf16", "--rows=mini,d_model_192")
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if "d_model_192" in line]
    assert len(lines) == 1 and "--row_updates=d_model_192=N" in lines[0], result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "results").exists()
