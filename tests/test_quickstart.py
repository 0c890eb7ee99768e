"""trainers.quickstart as a user runs it: a seconds-long run of the whole pipeline (tiny preset, a few
steps, a small corpus of own files) ends with a report holding BLEU both ways and chrF, an export
that exists and translations made by that export; a failing stage (no corpus, an export folder that cannot be
written, a full disk during the export) ends with one message naming the stage and what to do."""

import dataclasses
import json
import os
import random
import re
import shlex
import shutil
import subprocess
import sys

import numpy as np
import pytest

from keras_transformer.data import libreoffice_help as lh
from test_debian import needs_dpkg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WORDS = {"the": "die", "cat": "Katze", "dog": "Hund", "sees": "sieht", "eats": "frisst",
         "bird": "Vogel", "fish": "Fisch", "big": "grosse", "small": "kleine", "red": "rote"}
TEST_SIZE = 6


def corpus(tmp_path):
    """Word-for-word toy pairs: train, dev and test TSV files (own-files dataset)."""
    rng = random.Random(0)
    words = sorted(WORDS)

    def pairs(n):
        out = []
        for _ in range(n):
            sentence = [rng.choice(words) for _ in range(rng.randint(3, 7))]
            out.append((" ".join(sentence) + ".", " ".join(WORDS[w] for w in sentence) + "."))
        return out

    paths = {}
    for split, n in (("train", 300), ("dev", 8), ("test", TEST_SIZE)):
        path = tmp_path / f"{split}.tsv"
        path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs(n)), encoding="utf-8")
        paths[split] = str(path)
    return paths


def run(*args, module="trainers.quickstart", cwd=ROOT):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    command = [sys.executable, "-m", module, *args]
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    return result.returncode, result.stdout, result.stderr


def small_run_flags(tmp_path, files):
    return [f"--work_dir={tmp_path / 'run'}", f"--export_dir={tmp_path / 'saved'}",
            "--dataset=files", f"--train_data={files['train']}", f"--dev_data={files['dev']}",
            f"--test_data={files['test']}", f"--data_dir={tmp_path / 'data'}", "--vocab_size=320",
            "--preset=tiny", "--train_steps=4", "--checkpoint_every_steps=1", "--average_last=2",
            "--log_every_steps=1", "--max_length=24", "--token_budget=256", "--beam_size=2",
            "--samples=3", "--mixed_precision=float32", "--num_heads=2"]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("quickstart")
    code, stdout, stderr = run(*small_run_flags(tmp_path, corpus(tmp_path)))
    assert code == 0, stdout[-3000:] + stderr[-3000:]
    return tmp_path, stdout


@pytest.mark.slow
def test_every_stage_runs_and_is_announced(smoke):
    _, stdout = smoke
    # the start line names the recipe (--mixed_precision=float32 given: the float32 kind's) and
    # that the preset given is kept
    assert stdout.startswith("recipe: the float32 kind's recipe: preset tiny as the flags say "
                             "(--mixed_precision=float32)"), stdout[:500]
    for number, stage in enumerate(("data", "train", "average", "evaluate", "export", "translate"), 1):
        assert f"=== [{number}/6] {stage}:" in stdout
    # the trainer's progress line, timestamped
    assert re.search(r"^  \d{4}-\d\d-\d\d \d\d:\d\d:\d\d step 4/4 \| loss [\d.]+", stdout, re.M)
    # and the dev evaluation's, with dev BLEU and chrF beside it
    assert re.search(r"^  \S+ \S+ step 4 \| dev loss .* \| dev BLEU [\d.]+ \| chrF2 [\d.]+$", stdout,
                     re.M), stdout[-3000:]


def test_report_has_bleu_both_ways_an_export_and_translations(smoke):
    tmp_path, stdout = smoke
    report = stdout[stdout.index("quickstart report"):]
    assert re.search(r"^  sacreBLEU = [\d.]+ \(nrefs:1\|case:mixed\|eff:no\|tok:13a\|", report, re.M)
    assert re.search(r"^  tokenized BLEU \(Moses \+ compound split, the paper's\) = [\d.]+", report,
                     re.M)
    chrf = re.search(r"^  chrF2 = ([\d.]+) \((nrefs:1\|case:mixed\|eff:yes\|nc:6\|nw:0\|space:no\|"
                     r"version:[\d.]+)\)$", report, re.M)
    assert chrf, report
    export_path = re.search(r"^export\s+(\S+)$", report, re.M).group(1)
    assert os.path.isfile(os.path.join(export_path, "saved_model.pb"))
    assert os.path.dirname(export_path) == str(tmp_path / "saved" / "run")
    # own files: their languages are not known, so the samples say source and output
    assert len(re.findall(r"^  SRC ", report, re.M)) == len(re.findall(r"^  OUT ", report, re.M)) == 3
    assert not re.search(r"^  (EN|DE) ", report, re.M)
    first = re.search(r"^  SRC (.*)$", report, re.M).group(1)
    assert f"--text={shlex.quote(first)}" in report  # the "next" line: a sentence of the corpus

    record = json.loads((tmp_path / "run" / "report.json").read_text())
    assert record["steps"] == 4
    assert record["test_sentences"] == TEST_SIZE
    assert len(record["averaged_checkpoints"]) == 2
    # the exported model translates exactly as the in-memory model did during the evaluation
    assert len(record["samples"]) == 3
    assert all(sample["same_as_in_memory"] for sample in record["samples"])
    hypotheses = (tmp_path / "run" / "test.hyp").read_text(encoding="utf-8").splitlines()
    assert len(hypotheses) == TEST_SIZE
    assert [s["translation"] for s in record["samples"]] == hypotheses[:3]
    # chrF of the test translations, computed independently here, in the report and its record
    import sacrebleu

    references = [reference for _, reference in read_tsv(tmp_path / "test.tsv")]
    expected = sacrebleu.corpus_chrf(hypotheses, [references]).score
    assert record["chrf"] == pytest.approx(expected)
    assert float(chrf.group(1)) == pytest.approx(expected, abs=0.005)
    assert record["chrf_signature"] == chrf.group(2)


def read_tsv(path):
    return [line.split("\t") for line in open(path, encoding="utf-8").read().splitlines()]


def test_it_keeps_only_the_checkpoints_it_averages_and_the_best(smoke):
    tmp_path, _ = smoke
    run_dir = tmp_path / "run"
    kept = sorted(name for name in os.listdir(run_dir) if re.fullmatch(r"ckpt-\d+\.index", name))
    assert kept == ["ckpt-3.index", "ckpt-4.index"]  # 4 saved, --average_last=2
    assert (run_dir / "best" / "ckpt.index").is_file() and (run_dir / "averaged" / "ckpt.index").is_file()


def test_a_second_run_after_success_trains_nothing_and_reprints_the_report(smoke):
    tmp_path, stdout = smoke
    run_dir = tmp_path / "run"
    before = {name: os.path.getmtime(run_dir / name) for name in os.listdir(run_dir)}
    code, again, stderr = run(*small_run_flags(tmp_path, {split: str(tmp_path / f"{split}.tsv")
                                                          for split in ("train", "dev", "test")}))
    assert code == 0, again[-3000:] + stderr[-3000:]
    assert "=== [2/6] train" not in again and "finished run" in again
    report = stdout[stdout.index("=" * 78):].strip()
    assert report in again  # the same report, word for word
    assert {name: os.path.getmtime(run_dir / name) for name in os.listdir(run_dir)} == before
    for line in ("files ", "disk: ", "tensorboard --logdir=", "--train_more",
                 "python -m trainers.wmt --dataset=wmt14_en_de --preset=base"):
        assert line in report, line


def copy_of_the_smoke_run(source, tmp_path):
    """The smoke run copied to ``tmp_path/run`` (the other tests read it as it is); the flags of
    its command, writing there and exporting to ``tmp_path/saved``."""
    shutil.copytree(source / "run", tmp_path / "run")
    files = {split: str(source / f"{split}.tsv") for split in ("train", "dev", "test")}
    flags = [flag for flag in small_run_flags(source, files)
             if not flag.startswith(("--work_dir=", "--export_dir="))]
    return flags + [f"--work_dir={tmp_path / 'run'}", f"--export_dir={tmp_path / 'saved'}"]


@pytest.mark.slow
def test_train_more_goes_on_as_the_report_says_and_refuses_a_total_already_made(smoke, tmp_path):
    source, stdout = smoke
    flags = copy_of_the_smoke_run(source, tmp_path)
    # --train_steps counts all of a run's updates: the report's next line doubles it.
    assert "--train_steps=8 --train_more   # 4 more updates (at most" in stdout
    before = {name: os.path.getmtime(tmp_path / "run" / name) for name in os.listdir(tmp_path / "run")}
    # Refused outside the clone: there the programs are the installed keras_transformer_trainers
    # (setup.cfg, the same code), and the commands it shows must name them.
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    installed = "keras_transformer_trainers.quickstart"
    # the run has made its 4: nothing to train
    code, out, err = run(*flags, "--train_more", module=installed, cwd=outside)
    assert code == 2, out[-2000:] + err[-2000:]
    assert "has made 4 updates" in err and "--train_steps=8 --train_more" in err
    assert "=== [" not in out and not (tmp_path / "saved").exists()
    assert {name: os.path.getmtime(tmp_path / "run" / name)
            for name in os.listdir(tmp_path / "run")} == before
    # The command it names, run as it says.
    command = re.search(rf"python -m {installed} (.*--train_steps=8 --train_more)$", err, re.M)
    assert command, err[-2000:]
    code, out, err = run(*shlex.split(command.group(1)), module=installed, cwd=outside)
    assert code == 0, out[-3000:] + err[-3000:]
    assert "=== [2/6] train" in out and "step 8/8" in out
    with open(tmp_path / "run" / "report.json") as stream:
        assert json.load(stream)["steps"] == 8
    translate = re.search(r"^next +python -m (keras_transformer_trainers\.translate) (.*)$", out, re.M)
    assert translate, out[-3000:]
    code, out, err = run(*shlex.split(translate.group(2)), module=translate.group(1), cwd=outside)
    assert code == 0 and len(out.splitlines()) == 1, out[-2000:] + err[-2000:]


@pytest.mark.slow
def test_after_a_later_stage_failed_the_same_command_goes_on_without_training(smoke, tmp_path):
    """A run whose export failed (no report written): the same command does not train again (on a
    time budget it would have trained --train_minutes more), and goes on to a report."""
    source, _ = smoke
    flags = copy_of_the_smoke_run(source, tmp_path)
    (tmp_path / "run" / "report.json").unlink()
    # As a run on a time budget writes it (the smoke run is short, so it has a step budget).
    summary_path = tmp_path / "run" / "summary.json"
    summary = json.loads(summary_path.read_text())
    summary_path.write_text(json.dumps(dict(summary, stop_reason="train_minutes")))
    checkpoints = sorted(name for name in os.listdir(tmp_path / "run") if name.startswith("ckpt-"))
    # More checkpoints to average than the run saved: the stage says how many it averages.
    code, out, err = run(*flags, "--average_last=3")
    assert code == 0, out[-3000:] + err[-3000:]
    assert ("the training of this run had ended (train_minutes after 4 updates); going on with "
            "its weights") in out and "step 5" not in out and "warm-up:" not in out
    assert "=== [3/6] average: the last 2 checkpoints (section 6.1), all the run saved (" in out
    assert "averaged 2 checkpoint(s) (ckpt-3, ckpt-4)" in out
    assert sorted(name for name in os.listdir(tmp_path / "run")
                  if name.startswith("ckpt-")) == checkpoints
    with open(tmp_path / "run" / "report.json") as stream:
        record = json.load(stream)
    assert record["steps"] == 4 and record["final_train_loss"] == summary["final_train_loss"]
    assert (tmp_path / "saved" / "run" / "1" / "saved_model.pb").is_file()


def test_only_a_training_that_had_ended_is_not_trained_again(tmp_path):
    import tensorflow as tf
    from absl import flags
    from absl.testing import flagsaver

    from keras_transformer import runs
    from trainers import quickstart

    run_dir = tmp_path / "run"
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(step=tf.Variable(1)), str(run_dir), 2)
    latest = manager.save(checkpoint_number=4)

    def trained(reason, *argv, checkpoint=latest):
        runs.write_json(str(run_dir / runs.SUMMARY_FILE),
                        {"stop_reason": reason, "steps": 4, "latest_checkpoint": checkpoint})
        with flagsaver.flagsaver():
            flags.FLAGS(["quickstart", f"--model_dir={run_dir}", *argv])
            return quickstart.trained_summary() is not None

    assert trained("train_minutes") and trained("early_stopping") and trained("train_steps")
    assert trained("train_steps", "--train_steps=4") and not trained("train_steps", "--train_steps=5")
    assert not trained("sigterm") and not trained("sigint")  # interrupted: training resumes
    assert not trained("train_minutes", "--train_more") and not trained("train_minutes", "--overwrite")
    assert not trained("train_minutes", checkpoint=str(run_dir / "ckpt-3"))  # a newer checkpoint
    (run_dir / runs.SUMMARY_FILE).write_text("{")
    with flagsaver.flagsaver():
        flags.FLAGS(["quickstart", f"--model_dir={run_dir}"])
        assert quickstart.trained_summary() is None


def test_a_command_it_shows_replaces_the_flags_given_in_either_form(monkeypatch):
    from trainers import quickstart

    monkeypatch.setattr(sys, "argv", ["quickstart.py", "--train_steps", "4", "--preset=tiny",
                                      "--train_more", "--model_dir=runs/a b"])
    assert quickstart.this_command("--train_steps=8", "--train_more") == (
        "python -m trainers.quickstart --preset=tiny '--model_dir=runs/a b' --train_steps=8 "
        "--train_more")


def test_the_train_more_hint_names_the_minutes_only_where_they_limit(monkeypatch):
    from absl import flags
    from absl.testing import flagsaver

    from trainers import quickstart

    monkeypatch.setattr(sys, "argv", ["quickstart.py", "--train_steps=4", "--model_dir=runs/a"])
    hints = {}
    for minutes in ("20", "0"):
        with flagsaver.flagsaver():
            flags.FLAGS(["quickstart", "--train_steps=4", "--model_dir=runs/a",
                         f"--train_minutes={minutes}"])
            hints[minutes] = quickstart.train_more(4)
    command = "python -m trainers.quickstart --model_dir=runs/a --train_steps=8 --train_more"
    assert hints == {"20": (command, "4 more updates (at most 20 minutes)"),
                     "0": (command, "4 more updates")}


def test_a_budget_it_shows_is_in_minutes_or_one_minute():
    from trainers import quickstart

    assert [quickstart.minutes(1), quickstart.minutes(1.5, "more "), quickstart.minutes(20)] == [
        "1 minute", "1.5 more minutes", "20 minutes"]


def test_tensorboard_shows_dev_translations_as_text(smoke):
    import tensorflow as tf

    tmp_path, _ = smoke
    dev = tmp_path / "run" / "dev"
    texts = [tf.make_ndarray(value.tensor).item().decode()
             for name in os.listdir(dev)
             for event in tf.compat.v1.train.summary_iterator(str(dev / name))
             for value in event.summary.value if value.tag == "translations"]
    assert texts, "no dev translations in TensorBoard"
    scalars = {value.tag for name in os.listdir(dev)
               for event in tf.compat.v1.train.summary_iterator(str(dev / name))
               for value in event.summary.value}
    assert {"bleu", "chrf"} <= scalars, scalars
    sources = [source for source, _ in read_tsv(tmp_path / "dev.tsv")]
    assert texts[-1].startswith("| source | reference | translation |")
    assert sources[0] in texts[-1]


def test_trainer_flags_reach_the_trainer(smoke):
    # --num_heads is a flag of trainers.wmt, not of the quickstart: it must arrive all the same.
    tmp_path, _ = smoke
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["model"]["num_heads"] == 2 and config["model"]["d_model"] == 32  # tiny
    assert config["training"]["mixed_precision"] == "float32"


def test_report_puts_the_floors_and_a_verdict_beside_the_model(smoke):
    import sacrebleu

    tmp_path, stdout = smoke
    report = stdout[stdout.index("quickstart report"):]
    record = json.loads((tmp_path / "run" / "report.json").read_text())
    sources, references = zip(*read_tsv(tmp_path / "test.tsv"))
    # copy: the English source as the translation, scored independently here
    copy = sacrebleu.corpus_bleu(list(sources), [list(references)]).score
    assert record["floors"]["copy"]["sacrebleu"] == pytest.approx(copy)
    assert re.search(r"^\s+copy the source\s.*" + re.escape(f"{copy:.2f}"), report, re.M)
    copy_chrf = sacrebleu.corpus_chrf(list(sources), [list(references)]).score
    assert record["floors"]["copy"]["chrf"] == pytest.approx(copy_chrf)
    assert re.search(r"^\s+copy the source\s.*chrF2 +" + re.escape(f"{copy_chrf:.2f}") + "$",
                     report, re.M)
    memory = record["floors"]["translation_memory"]["sacrebleu"]
    assert re.search(r"^\s+translation memory\s.*" + re.escape(f"{memory:.2f}"), report, re.M)
    memory_chrf = record["floors"]["translation_memory"]["chrf"]
    assert re.search(r"^\s+translation memory\s.*chrF2 +" + re.escape(f"{memory_chrf:.2f}") + "$",
                     report, re.M)
    # A 4-step model cannot beat a memory of word-for-word pairs: the verdict must say so.
    assert record["sacrebleu"] < memory
    assert "below the translation memory" in record["verdict"]
    assert record["verdict"] in report
    # and counts the test sources that are training sources too, as the files hold them
    trained = {source for source, _ in read_tsv(tmp_path / "train.tsv")}
    assert record["test_sources_in_training"] == sum(source in trained for source in sources)


@pytest.mark.parametrize("dataset,named,not_named", [
    ("files", "--train_data, --dev_data, --test_data", "--libreoffice_help_dir"),
    ("libreoffice_help_en_de", "--libreoffice_help_dir", "your files"),
])
def test_a_data_stage_failure_says_what_to_do_with_the_corpus_it_read(dataset, named, not_named):
    from absl import flags
    from absl.testing import flagsaver

    from trainers import quickstart

    with flagsaver.flagsaver():
        flags.FLAGS(["quickstart", f"--dataset={dataset}"])
        with pytest.raises(SystemExit) as exit_:
            quickstart.fail("data", "a.tsv:3: no tab")
    text = str(exit_.value.code)
    assert "stage 1/6 'data' failed: a.tsv:3: no tab" in text
    assert named in text.split("What to do:")[1] and not_named not in text


@pytest.mark.parametrize("bf16_cpu", [True, False])
def test_each_cpu_kind_gets_its_recipe_and_the_start_line_names_it(monkeypatch, tmp_path, bf16_cpu):
    """A machine of each kind, faked (the CPU's bfloat16 matrix units, no GPU here): auto precision
    picks the kind's recipe from KIND_RECIPES; given flags win over it. (In a folder of its own:
    the default --model_dir may hold the user's own main job, which resumes with its model.)"""
    from absl import flags
    from absl.testing import flagsaver

    from keras_transformer.training import strategy
    from trainers import quickstart

    monkeypatch.setattr(strategy, "bfloat16_cpu", lambda: bf16_cpu)
    precision = "bfloat16" if bf16_cpu else "float32"
    name, changes = quickstart.KIND_RECIPES[precision]
    if bf16_cpu:
        assert changes == {"d_model": 192, "d_ff": 768}
    expected = {"d_model": None, "d_ff": None, **changes}
    FLAGS = flags.FLAGS
    with flagsaver.flagsaver():
        FLAGS(["quickstart", f"--model_dir={tmp_path / 'run'}"])
        line = quickstart.choose_recipe()
        assert {flag: FLAGS[flag].value for flag in expected} == expected
        assert line.startswith(f"recipe: {name}: preset mini"), line
        assert ("AVX512-BF16 or AMX: --mixed_precision=auto trains in bfloat16" if bf16_cpu else
                "trains in float32 here (no AVX512-BF16 or AMX on this CPU)") in line, line
    # a width or a preset on the command line is kept, and the line says so
    with flagsaver.flagsaver():
        FLAGS(["quickstart", f"--model_dir={tmp_path / 'run'}", "--d_model=256"])
        line = quickstart.choose_recipe()
        assert FLAGS.d_model == 256 and FLAGS.d_ff is None
        assert ("but --d_model is given" in line) == bf16_cpu, line
    # float32 asked for on either kind: the float32 kind's recipe
    with flagsaver.flagsaver():
        FLAGS(["quickstart", f"--model_dir={tmp_path / 'run'}",
               "--mixed_precision=float32"])
        line = quickstart.choose_recipe()
        assert FLAGS.d_model is None and line.startswith("recipe: the float32 kind's recipe")


@pytest.mark.parametrize("bf16_cpu", [True, False])
def test_a_run_folder_resumes_with_its_own_model(monkeypatch, tmp_path, bf16_cpu):
    """A run trained on one CPU kind and resumed on the other with the same command keeps the width
    it was trained with (its checkpoints restore only into it), and a run of an earlier default
    vocabulary keeps its vocabulary; --overwrite starts the kind's own recipe."""
    import tensorflow as tf
    from absl import flags
    from absl.testing import flagsaver

    from keras_transformer import runs
    from keras_transformer.config import TransformerConfig
    from keras_transformer.training import strategy
    from trainers import quickstart

    monkeypatch.setattr(strategy, "bfloat16_cpu", lambda: bf16_cpu)
    own = {"d_model": None, "d_ff": None,
           **quickstart.KIND_RECIPES["bfloat16" if bf16_cpu else "float32"][1]}
    other = quickstart.KIND_RECIPES["float32" if bf16_cpu else "bfloat16"][1]
    vocab_size = quickstart.QUICKSTART_DEFAULTS["vocab_size"]
    trained = TransformerConfig.from_preset("mini", vocab_size=vocab_size, **other)
    assert (trained.d_model, trained.d_ff) != (own["d_model"] or 128, own["d_ff"] or 512)
    run_dir = tmp_path / "run"
    FLAGS = flags.FLAGS
    with flagsaver.flagsaver():
        FLAGS(["quickstart", f"--model_dir={run_dir}"])
        quickstart.choose_recipe()  # no run yet: the kind's own recipe
        assert {flag: FLAGS[flag].value for flag in own} == own
    runs.write_json(str(run_dir / runs.CONFIG_FILE), {"model": trained.to_dict()})
    tf.train.CheckpointManager(tf.train.Checkpoint(step=tf.Variable(1)), str(run_dir), 1).save()
    with flagsaver.flagsaver():
        FLAGS(["quickstart", f"--model_dir={run_dir}"])
        line = quickstart.choose_recipe()
        assert (FLAGS.d_model, FLAGS.d_ff) == (trained.d_model, trained.d_ff), line
        assert line.startswith(f"recipe: the run in {run_dir} resumes with the model it was trained "
                               f"with, --d_ff={trained.d_ff} --d_model={trained.d_model} "
                               f"--vocab_size={vocab_size}"), line
    with flagsaver.flagsaver():
        FLAGS(["quickstart", f"--model_dir={run_dir}", "--overwrite"])
        line = quickstart.choose_recipe()
        assert {flag: FLAGS[flag].value for flag in own} == own and "resumes" not in line, line
    # a run of this kind's own width resumes as a new run starts, under the kind's recipe line
    mine = {flag: value for flag, value in own.items() if value is not None}
    runs.write_json(str(run_dir / runs.CONFIG_FILE), {"model": TransformerConfig.from_preset(
        "mini", vocab_size=vocab_size, **mine).to_dict()})
    with flagsaver.flagsaver():
        FLAGS(["quickstart", f"--model_dir={run_dir}"])
        line = quickstart.choose_recipe()
        assert {flag: FLAGS[flag].value for flag in own} == own and "resumes" not in line, line
    # this kind's width on another vocabulary (an earlier default): it keeps its vocabulary, unless
    # --vocab_size is given (then the trainer's own check compares the two)
    runs.write_json(str(run_dir / runs.CONFIG_FILE), {"model": TransformerConfig.from_preset(
        "mini", vocab_size=vocab_size // 2, **mine).to_dict()})
    with flagsaver.flagsaver():
        FLAGS(["quickstart", f"--model_dir={run_dir}"])
        line = quickstart.choose_recipe()
        assert FLAGS.vocab_size == vocab_size // 2 and f"--vocab_size={vocab_size // 2}" in line, line
        assert "resumes with the model it was trained with" in line, line
    with flagsaver.flagsaver():
        FLAGS(["quickstart", f"--model_dir={run_dir}", f"--vocab_size={vocab_size}"])
        line = quickstart.choose_recipe()
        assert FLAGS.vocab_size == vocab_size and "resumes" not in line, line


def test_the_data_stage_gets_the_vocabulary_size_of_the_run_it_resumes(monkeypatch, tmp_path):
    """The data flags are read (and the corpus checked) before the recipe, which may keep a
    resumed run's vocabulary size: the data stage gets that size, not the flag's default."""
    import tensorflow as tf
    from absl import flags
    from absl.testing import flagsaver

    from keras_transformer import runs
    from keras_transformer.config import TransformerConfig
    from trainers import quickstart

    files = corpus(tmp_path)
    earlier = quickstart.QUICKSTART_DEFAULTS["vocab_size"] // 2
    run_dir = tmp_path / "run"
    runs.write_json(str(run_dir / runs.CONFIG_FILE), {"model": TransformerConfig.from_preset(
        "mini", vocab_size=earlier).to_dict()})
    tf.train.CheckpointManager(tf.train.Checkpoint(step=tf.Variable(1)), str(run_dir), 1).save()

    class Reached(Exception):
        pass

    def stage_data(config):
        raise Reached(config)

    monkeypatch.setattr(quickstart, "stage_data", stage_data)
    with flagsaver.flagsaver():
        flags.FLAGS(["quickstart", f"--model_dir={run_dir}", f"--export_dir={tmp_path / 'saved'}",
                     "--dataset=files", f"--train_data={files['train']}",
                     f"--dev_data={files['dev']}", f"--test_data={files['test']}",
                     f"--data_dir={tmp_path / 'data'}"])
        with pytest.raises(Reached) as reached:
            quickstart.main(["quickstart"])
    assert reached.value.args[0].vocab_size == earlier


def test_the_data_stage_keeps_a_resumed_runs_held_out_splits(tmp_path):
    """The data stage, whose config every later stage reads (training, dev choice, test BLEU,
    floors), sizes a resumed run's held-out splits by the count the run recorded, not by its
    training file now (which lost pairs since)."""
    import tensorflow as tf
    from absl import flags
    from absl.testing import flagsaver

    from keras_transformer import data, runs
    from trainers import quickstart

    path, run_dir = tmp_path / "train.tsv", tmp_path / "run"
    rows = [f"the number {i} is small\tdie Zahl {i} ist klein\n" for i in range(3000)]
    path.write_text("".join(rows), encoding="utf-8")
    config = data.DataConfig(dataset="files", train_data=str(path), data_dir=str(tmp_path / "data"),
                             vocab_size=320, max_length=24, token_budget=256)
    runs.write_json(str(run_dir / runs.CONFIG_FILE), {"data": dataclasses.asdict(
        data.sized_as(config))})
    tf.train.CheckpointManager(tf.train.Checkpoint(step=tf.Variable(1)), str(run_dir), 1).save()
    path.write_text("".join(rows[:1000]), encoding="utf-8")
    with flagsaver.flagsaver():
        flags.FLAGS(["quickstart", f"--model_dir={run_dir}", "--dataset=files",
                     f"--train_data={path}", f"--data_dir={tmp_path / 'data'}"])
        staged, counts = quickstart.stage_data(config)
    assert staged.hold_out_pairs == len(rows) and sum(counts.values()) == 1000


@pytest.mark.parametrize("bf16_cpu", [True, False])
def test_a_fine_tuned_run_has_its_source_model_and_is_timed_with_it(monkeypatch, tmp_path,
                                                                    bf16_cpu):
    """A new run fine-tuned (--init_from) from a run the other CPU kind trained, on another
    vocabulary size, takes the source's width and vocabulary size (its weights restore only into
    them), the start line says so, and the timing that sizes its warm-up is told the source. A
    source that is not there leaves the kind's own recipe: the trainer's check names it."""
    import tensorflow as tf
    from absl import flags
    from absl.testing import flagsaver

    from keras_transformer import runs
    from keras_transformer.config import TransformerConfig
    from keras_transformer.training import speed, strategy
    from trainers import quickstart

    monkeypatch.setattr(strategy, "bfloat16_cpu", lambda: bf16_cpu)
    own = {"d_model": None, "d_ff": None,
           **quickstart.KIND_RECIPES["bfloat16" if bf16_cpu else "float32"][1]}
    other = quickstart.KIND_RECIPES["float32" if bf16_cpu else "bfloat16"][1]
    vocab_size = quickstart.QUICKSTART_DEFAULTS["vocab_size"] // 2
    trained = TransformerConfig.from_preset("mini", vocab_size=vocab_size, **other)
    source = tmp_path / "source"
    runs.write_json(str(source / runs.CONFIG_FILE), {"model": trained.to_dict()})
    tf.train.CheckpointManager(tf.train.Checkpoint(step=tf.Variable(1)), str(source), 1).save()
    timed = []
    monkeypatch.setattr(speed, "seconds_per_update_of_run",
                        lambda *args, **kwargs: timed.append((args, kwargs)) or 0.5)
    FLAGS = flags.FLAGS
    with flagsaver.flagsaver():
        FLAGS(["quickstart", f"--model_dir={tmp_path / 'tuned'}", f"--init_from={source}",
               "--train_minutes=20"])
        line = quickstart.choose_recipe()
        assert (FLAGS.d_model, FLAGS.d_ff, FLAGS.vocab_size) == (
            trained.d_model, trained.d_ff, vocab_size), line
        assert line.startswith(
            f"recipe: a fine-tuned run has the model it starts from (--init_from), --d_ff={trained.d_ff} "
            f"--d_model={trained.d_model} --vocab_size={vocab_size}; "), line
        quickstart.choose_warmup("the data config")
        (_, _, overrides, *_), kwargs = timed[0]
        assert kwargs["init_from"] == str(source)
        assert (overrides["d_model"], overrides["d_ff"]) == (trained.d_model, trained.d_ff)
    with flagsaver.flagsaver():
        FLAGS(["quickstart", f"--model_dir={tmp_path / 'tuned'}",
               f"--init_from={tmp_path / 'missing'}"])
        line = quickstart.choose_recipe()
        assert {flag: FLAGS[flag].value for flag in own} == own and "fine-tuned" not in line, line


@pytest.mark.parametrize("bf16_cpu, seconds, accumulation",
                         [(True, 0.17, 1), (False, 0.7, 1), (True, 0.17, 4)])
def test_the_warmup_is_sized_to_the_updates_the_machine_makes(monkeypatch, tmp_path, bf16_cpu,
                                                              seconds, accumulation):
    """A machine of each kind, faked (its bfloat16 matrix units and its seconds per update): a new
    run on a time budget times its own model in its kind's precision and width, and the
    warm-up follows the updates the budget buys (an update of --accumulation_steps=4 trains 4
    timed batches); the line says which and why. The timing leaves the random state as it
    found it."""
    import random

    import tensorflow as tf
    from absl import flags
    from absl.testing import flagsaver

    from keras_transformer.training import speed, strategy
    from trainers import quickstart, training_flags

    monkeypatch.setattr(strategy, "bfloat16_cpu", lambda: bf16_cpu)
    timed = []

    def seconds_per_update_of_run(data_config, preset, overrides, precision, jit_compile,
                                  init_from):
        timed.append((data_config, preset, overrides, precision, jit_compile, init_from))
        tf.random.uniform([3]), random.random()  # as building and training a model does
        return seconds

    monkeypatch.setattr(speed, "seconds_per_update_of_run", seconds_per_update_of_run)
    FLAGS = flags.FLAGS
    with flagsaver.flagsaver():
        FLAGS(["quickstart", f"--model_dir={tmp_path / 'run'}", "--train_minutes=20",
               f"--accumulation_steps={accumulation}"])
        quickstart.choose_recipe()
        training_flags.seed()
        first_draw = tf.random.uniform([3]).numpy(), random.random()
        training_flags.seed()
        line = quickstart.choose_warmup("the data config")
        assert np.array_equal(tf.random.uniform([3]).numpy(), first_draw[0])
        assert random.random() == first_draw[1]
        updates = int(20 * 60 / (seconds * accumulation))
        warmup = 500 if updates < 2400 else 1000
        # the kinds' speeds, faked, fall either side; 4 batches an update, below
        assert (updates < 2400) == (not bf16_cpu or accumulation == 4)
        assert FLAGS.warmup_steps == warmup, line
        per_update = (f"{seconds * accumulation:.3g} s per update"
                      + (" of 4 batches" if accumulation == 4 else ""))
        assert line.startswith(f"warm-up: {warmup:,} updates, for a run of about {updates:,} "
                               f"updates (--train_minutes=20 at {per_update}, as timed "
                               "here)"), line
        data_config, preset, overrides, precision, jit_compile, init_from = timed[0]
        assert (data_config, preset, jit_compile, init_from) == (
            "the data config", "mini", False, None)
        assert precision == ("bfloat16" if bf16_cpu else "float32")
        assert {k: overrides.get(k) for k in ("d_model", "d_ff")} == (
            {"d_model": 192, "d_ff": 768} if bf16_cpu else {"d_model": None, "d_ff": None})


@pytest.fixture(scope="module")
def timed_run(tmp_path_factory):
    """The small run on a time budget (--train_steps=0: the timing sizes its warm-up) with a moving
    average and --export_best: one run of the whole pipeline for the tests of both."""
    tmp_path = tmp_path_factory.mktemp("timed")
    flags_ = [flag for flag in small_run_flags(tmp_path, corpus(tmp_path))
              if not flag.startswith("--train_steps")]
    code, stdout, stderr = run(*flags_, "--train_steps=0", "--train_minutes=0.05",
                               "--ema_decay=0.5", "--export_best")
    assert code == 0, stdout[-3000:] + stderr[-3000:]
    return tmp_path, stdout


@pytest.mark.slow
def test_a_run_on_a_time_budget_times_itself_and_trains_with_the_warmup_it_announces(timed_run):
    """The timing for real, in the command: its line gives the seconds per update and the updates
    they make of the minutes, and the trainer's config records the warm-up the line names."""
    tmp_path, stdout = timed_run
    assert "timing 12 updates of the model to size the recipe to --train_minutes=0.05" in stdout
    found = re.search(r"^warm-up: (\d+) updates, for a run of about ([\d,]+) updates "
                      r"\(--train_minutes=0.05 at ([\d.]+) s per update, as timed here\)", stdout,
                      re.M)
    assert found, stdout[:3000]
    warmup, updates, seconds = int(found[1]), int(found[2].replace(",", "")), float(found[3])
    # (the seconds shown to 3 significant digits)
    assert 0 < seconds < 3 and abs(updates - 3 / seconds) <= 1 + 0.01 * updates
    assert warmup == (500 if updates < 2400 else 1000)
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["training"]["warmup_steps"] == warmup
    assert f"--warmup_steps={warmup}" in stdout  # the same training alone


def test_the_warmup_without_timing(monkeypatch, tmp_path):
    """Updates given by --train_steps decide without a timing, on either side of the boundary; a
    given --warmup_steps is kept; a resumed run keeps the warm-up it was trained with (its
    schedule goes on), until --overwrite starts a new one."""
    import tensorflow as tf
    from absl import flags
    from absl.testing import flagsaver

    from keras_transformer import runs
    from keras_transformer.training import speed
    from trainers import quickstart

    def seconds_per_update_of_run(*args, **kwargs):
        timed.append(args)
        return 0.1

    timed = []
    monkeypatch.setattr(speed, "seconds_per_update_of_run", seconds_per_update_of_run)
    run_dir = tmp_path / "run"
    FLAGS = flags.FLAGS
    for steps, warmup in ((1874, 500), (2399, 500), (2400, 1000), (2437, 1000)):
        with flagsaver.flagsaver():
            FLAGS(["quickstart", f"--model_dir={run_dir}", f"--train_steps={steps}"])
            line = quickstart.choose_warmup(None)
            assert FLAGS.warmup_steps == warmup and f"(--train_steps={steps})" in line, line
    with flagsaver.flagsaver():
        FLAGS(["quickstart", f"--model_dir={run_dir}", "--warmup_steps=300"])
        assert quickstart.choose_warmup(None) == "warm-up: 300 updates, as --warmup_steps says"
        assert FLAGS.warmup_steps == 300
    with flagsaver.flagsaver():  # a timing on one device would not tell two replicas' updates
        FLAGS(["quickstart", f"--model_dir={run_dir}"])
        FLAGS.warmup_steps = 1  # not the default: the default is set, not kept
        line = quickstart.choose_warmup(None, replicas=2)
        assert FLAGS.warmup_steps == 1000 and "over 2 replicas are not timed" in line, line
    assert not timed
    runs.write_json(str(run_dir / runs.CONFIG_FILE), {"training": {"warmup_steps": 777}})
    tf.train.CheckpointManager(tf.train.Checkpoint(step=tf.Variable(1)), str(run_dir), 1).save()
    with flagsaver.flagsaver():
        FLAGS(["quickstart", f"--model_dir={run_dir}"])
        line = quickstart.choose_warmup(None)
        assert FLAGS.warmup_steps == 777 and "the run in" in line and not timed, line
    with flagsaver.flagsaver():
        FLAGS(["quickstart", f"--model_dir={run_dir}", "--overwrite"])
        quickstart.choose_warmup(None)
        assert FLAGS.warmup_steps == 1000 and len(timed) == 1


def test_the_train_stage_gives_the_warmup_its_replicas(monkeypatch, tmp_path, capsys):
    """stage_train hands choose_warmup the strategy's replicas: a run on a time budget over two
    replicas keeps the default warm-up and is not timed, and trains with that warm-up (the
    training itself replaced: its config and strategy are recorded)."""
    from types import SimpleNamespace

    from absl import flags
    from absl.testing import flagsaver

    from keras_transformer.training import speed
    from trainers import quickstart, training_flags

    timed, trained = [], []
    monkeypatch.setattr(speed, "seconds_per_update_of_run",
                        lambda *args, **kwargs: timed.append(args))
    monkeypatch.setattr(training_flags, "train", lambda data_config, training_config, strategy,
                        log: trained.append((training_config, strategy)) or {"steps": 0})
    FLAGS = flags.FLAGS
    two_replicas = SimpleNamespace(num_replicas_in_sync=2)
    with flagsaver.flagsaver():
        FLAGS(["quickstart", f"--model_dir={tmp_path / 'run'}", "--train_minutes=20"])
        FLAGS.warmup_steps = 1  # not the default: the default is set, not kept
        config = training_flags.training_config(str(tmp_path / "run"))
        assert quickstart.stage_train(None, config, two_replicas) == {"steps": 0}
    stdout = capsys.readouterr().out
    assert "warm-up: 1,000 updates, the default: the updates of a run over 2 replicas" in stdout
    assert not timed and len(trained) == 1, stdout
    assert trained[0][0].warmup_steps == 1000 and trained[0][1] is two_replicas


def test_train_more_on_a_time_budget_adds_its_minutes_to_those_the_run_trained(
        monkeypatch, tmp_path, capsys):
    """The trainer's --train_minutes counts a run's training time in all: --train_more asks for
    the time its checkpoint records plus --train_minutes, and the command it shows says so (a
    command a shell reads as shown: the folder's space quoted)."""
    import tensorflow as tf
    from absl import flags
    from absl.testing import flagsaver

    from trainers import quickstart, training_flags

    run_dir = str(tmp_path / "my run")
    seconds = tf.Variable(150.0, dtype=tf.float64)  # the latest checkpoint: 2.5 minutes trained
    tf.train.CheckpointManager(tf.train.Checkpoint(training_seconds=seconds),
                               run_dir, 1).save(checkpoint_number=9)
    trained = []
    monkeypatch.setattr(training_flags, "train", lambda data_config, training_config, strategy,
                        log: trained.append(training_config) or {"steps": 9})
    with flagsaver.flagsaver():
        flags.FLAGS(["quickstart", f"--model_dir={run_dir}", "--train_minutes=5",
                     "--train_more", "--warmup_steps=1000"])  # given: nothing timed
        config = training_flags.training_config(run_dir)
        quickstart.stage_train(None, config, tf.distribute.get_strategy())
    assert [c.train_minutes for c in trained] == [7.5]
    shown = re.search(r"^the same training alone: (.*)$", capsys.readouterr().out, re.M)
    command = shlex.split(shown.group(1))
    assert command.count("--train_minutes=7.5") == 1 and "--train_minutes=5" not in command
    assert f"--model_dir={run_dir}" in command


@pytest.mark.slow
def test_learning_curve_of_the_run(smoke):
    tmp_path, _ = smoke
    output = tmp_path / "curve.png"
    code, stdout, stderr = run(f"--model_dirs={tmp_path / 'run'}", f"--output={output}",
                               module="docs.tools.learning_curve")
    assert code == 0, stderr[-3000:]
    assert output.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    curve = json.loads((tmp_path / "curve.json").read_text())["run"]
    assert [step for _, step, _ in curve["train_loss"]] == [1, 2, 3, 4]  # --log_every_steps=1
    assert curve["dev_bleu"] and curve["dev_loss"]
    # the floors on the dev-BLEU sentences (all 8 dev pairs here), computed independently
    import sacrebleu

    sources, references = zip(*read_tsv(tmp_path / "dev.tsv"))
    assert curve["dev_sentences"] == len(sources)
    assert curve["floors"]["copy"] == pytest.approx(
        sacrebleu.corpus_bleu(list(sources), [list(references)]).score)
    # drawn against updates instead of minutes: the points' steps are the x values
    from docs.tools import learning_curve

    figure = learning_curve.plot([curve], ["run"], x_axis="updates")
    loss_axes, bleu_axes = figure.axes
    assert list(loss_axes.lines[0].get_xdata()) == [1, 2, 3, 4]
    assert list(bleu_axes.lines[0].get_xdata()) == [step for _, step, _ in curve["dev_bleu"]]
    assert loss_axes.get_xlabel() == learning_curve.X_AXES["updates"][1]


def test_missing_corpus_fails_before_the_first_stage(tmp_path):
    missing = tmp_path / "no" / "de-en"
    code, stdout, stderr = run(f"--work_dir={tmp_path / 'run'}", f"--export_dir={tmp_path / 'saved'}",
                               f"--data_dir={tmp_path / 'data'}", "--dataset=ding_de_en",
                               f"--ding_file={missing}")
    assert code != 0
    # Found before any stage starts, in one line naming the flag and how to fetch the corpus.
    assert stderr.strip().splitlines()[-1].startswith(f"quickstart: error: --ding_file={missing}")
    assert "python -m trainers.prepare_data --dataset=ding_de_en --download` fetches it" in stderr
    assert "Traceback" not in stderr
    assert "[1/6] data" not in stdout


def test_missing_help_pages_name_the_command_that_fetches_them(tmp_path):
    # A --libreoffice_help_dir that does not exist: one message, naming how to fetch the corpus.
    missing = tmp_path / "no-help"
    code, stdout, stderr = run(f"--model_dir={tmp_path / 'run'}", f"--export_dir={tmp_path / 'saved'}",
                               f"--data_dir={tmp_path / 'data'}", f"--libreoffice_help_dir={missing}")
    assert code != 0 and "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith(
        f"quickstart: error: --libreoffice_help_dir={missing}")
    assert ("python -m trainers.prepare_data --dataset=libreoffice_help_en_de --download` fetches "
            "it") in stderr
    assert "[1/6] data" not in stdout


@needs_dpkg
@pytest.mark.skipif(lh.holds_pages(lh.DEFAULT_HELP_DIR),
                    reason="apt-get install has put LibreOffice help pages on this machine")
def test_the_data_stage_fetches_the_main_corpus_where_there_is_none(tmp_path, monkeypatch, capsys):
    """Outside a clone (a wheel's user) no setup.sh has run: the data stage fetches the pages into
    data/ of the folder the command runs in (here a stand-in apt-get's packages) and goes on."""
    from absl import flags
    from absl.testing import flagsaver

    from test_debian import fake_apt_get
    from test_libreoffice_help import help_packages
    from trainers import data_flags, quickstart

    pages = {f"text/v/p{i}.html": (f'<p id="a">Open the dialog number {i} here.</p>',
                                   f'<p id="a">Öffnen Sie hier den Dialog {i}.</p>')
             for i in range(60)}
    fake_apt_get(tmp_path, help_packages(pages), monkeypatch)
    monkeypatch.chdir(tmp_path)
    with flagsaver.flagsaver():
        flags.FLAGS(["quickstart", "--vocab_size=320"])
        _, counts = quickstart.stage_data(dataclasses.replace(data_flags.data_config(),
                                                              vocab_size=320))
    out = capsys.readouterr().out
    assert (f"fetching {' and '.join(lh.PACKAGES)} (apt-get download, no root needed) into "
            f"{lh.PROJECT_PACKAGE_DIR}\ncorpus: {lh.PROJECT_HELP_DIR}\n") in out
    splits = lh.load_splits(lh.PROJECT_HELP_DIR)
    assert counts == {split: len(splits[name]) for split, name in
                      (("train", "train"), ("dev", "validation"), ("test", "test"))}
    assert "60 pages in both languages" in out


def test_the_export_stage_run_again_writes_no_second_version_of_the_same_weights(tmp_path,
                                                                                monkeypatch, capsys):
    """Run again after the translate stage failed, the export stage finds its versions of these
    weights (exports record their checkpoint) and goes on with them."""
    import types

    from absl import flags
    from absl.testing import flagsaver

    from keras_transformer.export import CONFIG_ASSET
    from trainers import quickstart

    monkeypatch.chdir(tmp_path)
    checkpoint = os.path.join("run", "averaged", "ckpt")
    os.makedirs(os.path.dirname(checkpoint))
    open(checkpoint + ".index", "wb").close()
    for base in ("run", "run_ids"):  # as export_for_serving wrote them after the averaging
        folder = tmp_path / "saved" / base / "1"
        (folder / "assets").mkdir(parents=True)
        (folder / "assets" / CONFIG_ASSET).write_text(json.dumps({"checkpoint": checkpoint}))
        (folder / "saved_model.pb").write_bytes(b"")
    with flagsaver.flagsaver():
        flags.FLAGS(["quickstart", "--model_dir=run", "--export_dir=saved"])
        paths = quickstart.stage_export(types.SimpleNamespace(checkpoint=checkpoint))
    held = [os.path.join("saved", "run", "1"), os.path.join("saved", "run_ids", "1")]
    assert paths == held
    assert (f"{held[0]}, {held[1]} hold the weights of {checkpoint} already; nothing exported"
            in capsys.readouterr().out)


def test_unwritable_export_dir_fails_before_training(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    code, stdout, stderr = run(f"--work_dir={tmp_path / 'run'}", f"--export_dir={blocker / 'saved'}")
    assert code != 0
    assert stderr.strip().splitlines()[-1] == (
        f"quickstart: error: --export_dir={blocker / 'saved'}: lies below {blocker}, which is a file")
    assert "Traceback" not in stderr
    assert "[1/6] data" not in stdout and not (tmp_path / "run").exists()


def test_full_disk_during_the_export_names_the_stage(tmp_path, monkeypatch):
    # The export stage itself, with the writer failing as on a full disk: the stage ends the
    # program with its one message (a SystemExit carrying it), not with the OSError's traceback.
    import errno
    import types

    from absl import flags
    from absl.testing import flagsaver

    from keras_transformer import export
    from trainers import quickstart

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(export, "export_for_serving", no_space)
    with flagsaver.flagsaver():
        flags.FLAGS(["quickstart", f"--work_dir={tmp_path / 'run'}",
                     f"--export_dir={tmp_path / 'saved'}"])
        with pytest.raises(SystemExit) as exit_:
            quickstart.stage_export(
                translator=types.SimpleNamespace(checkpoint=str(tmp_path / "run" / "ckpt-1")))
    message = exit_.value.code
    assert isinstance(message, str)  # printed on stderr, exit status 1
    assert "stage 5/6 'export' failed" in message and "No space left on device" in message
    assert "What to do:" in message and "trainers.export" in message


@pytest.mark.slow
def test_with_a_moving_average_the_better_on_dev_is_evaluated_and_the_best_exported(timed_run):
    tmp_path, stdout = timed_run
    # A run on a time budget makes at least 2 updates (the first ends before the time is looked
    # at; the update that finds the time up is made, carrying the vote to stop), and
    # --checkpoint_every_steps=1 saves each: --average_last=2 finds 2 whatever the machine's speed.
    assert "=== [3/6] average: the last 2 checkpoints (section 6.1) and the moving average " \
           "(decay 0.5)" in stdout
    found = re.search(r"^dev BLEU \(8 sentences\): averaged ([\d.]+), moving average ([\d.]+): "
                      r"using the (averaged checkpoints|moving average)$", stdout, re.M)
    assert found, stdout[-3000:]
    averaged, ema = float(found.group(1)), float(found.group(2))
    chosen = "moving average" if ema > averaged else "averaged checkpoints"
    assert found.group(3) == chosen
    record = json.loads((tmp_path / "run" / "report.json").read_text())
    assert record["weights"].endswith(f"chosen by {found.group(0).split(': using')[0]}")
    assert record["weights"].startswith("moving average of the weights (decay 0.5)"
                                        if chosen == "moving average" else "average of the last 2")
    run_dir = tmp_path / "run"
    assert (run_dir / "ema" / "ckpt.index").is_file()
    # --export_best reaches the trainer: one export of the best dev BLEU in the run folder
    assert len([n for n in os.listdir(run_dir / "best_export") if n.isdigit()]) == 1


def test_the_samples_are_labelled_with_the_corpus_languages():
    from keras_transformer.data import DataConfig
    from trainers import quickstart

    assert quickstart.sample_labels(DataConfig(dataset="libreoffice_help_en_de")) == ("EN", "DE")
    assert quickstart.sample_labels(DataConfig(dataset="wmt14_en_fr")) == ("EN", "FR")
    assert quickstart.sample_labels(DataConfig(dataset="files", train_data="a.tsv")) == ("SRC", "OUT")
