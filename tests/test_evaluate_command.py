"""Evaluation of a model that copies its input: the library path (translate -> score, with batching
that reorders sentences by length) and ``python -m trainers.evaluate`` on an exported "model", both
against a from-scratch corpus BLEU (Papineni et al. 2002) of the fixture and sacreBLEU's own
corpus_chrf. And which test set the
command scores when no data flag is given: the corpus the export or run records."""

import json
import dataclasses
import hashlib
import os
import re
import shutil
import subprocess
import sys

import pytest
import sacrebleu
import tensorflow as tf

from keras_transformer import evaluation
from terminal import TerminalStderr
from test_evaluation import reference_bleu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (source, reference). The copy model outputs the source, so lines 1-2 are perfect translations,
# the others (mostly) wrong. No punctuation and no apostrophes: 13a and Moses tokenization are then
# plain whitespace splitting, except that the paper's compound split turns "world-champion" into
# "world ##AT##-##AT## champion" (13a keeps it one token). Lengths differ, so batching reorders.
FIXTURE = [
    ("the cat sits on the mat today", "the cat sits on the mat today"),
    ("good morning my dear friend", "guten Morgen mein lieber Freund"),
    ("a world-champion runs very fast every day", "a world-champion runs very fast every day"),
    ("we buy bread", "wir kaufen Brot und Milch"),
    ("this house is big and old and mine", "this house ist gross und alt"),
]


def split_compounds(text):
    return re.sub(r"(\S)-(\S)", r"\1 ##AT##-##AT## \2", text)


SOURCES = [s for s, _ in FIXTURE]
REFERENCES = [r for _, r in FIXTURE]
EXPECTED_SACREBLEU = reference_bleu(SOURCES, REFERENCES)
EXPECTED_TOKENIZED = reference_bleu([split_compounds(s) for s in SOURCES],
                                    [split_compounds(r) for r in REFERENCES])
EXPECTED_CHRF = sacrebleu.corpus_chrf(SOURCES, [REFERENCES]).score
CHRF_SIGNATURE = r"nrefs:1\|case:mixed\|eff:yes\|nc:6\|nw:0\|space:no\|version:[\d.]+"


def copy_translate(batch):
    """A translate_fn (Translator.translate_text's contract) that copies its input."""
    batch = tf.convert_to_tensor(batch)
    n = tf.shape(batch)[0]
    return {"translations": batch, "scores": tf.zeros([n]), "truncated": tf.zeros([n], tf.bool)}


def test_fixture_is_informative():
    # both numbers strictly between 0 and 100, and different: a swap of the two would be caught
    assert 0 < EXPECTED_SACREBLEU < 100 and 0 < EXPECTED_TOKENIZED < 100 and 0 < EXPECTED_CHRF < 100
    assert abs(EXPECTED_SACREBLEU - EXPECTED_TOKENIZED) > 0.5
    assert min(abs(EXPECTED_CHRF - EXPECTED_SACREBLEU), abs(EXPECTED_CHRF - EXPECTED_TOKENIZED)) > 0.5


@pytest.mark.parametrize("batch_size", [1, 2, 64])
def test_copy_model_gets_the_expected_bleu(batch_size):
    result, hypotheses = evaluation.translate_and_evaluate(copy_translate, SOURCES, REFERENCES,
                                                           batch_size=batch_size)
    assert hypotheses == SOURCES  # input order survives the length-sorted batches
    assert result.sacrebleu.score == pytest.approx(EXPECTED_SACREBLEU, abs=1e-6)
    assert result.tokenized.score == pytest.approx(EXPECTED_TOKENIZED, abs=1e-6)
    assert result.chrf.score == pytest.approx(EXPECTED_CHRF, abs=1e-6)
    assert result.sentences == len(FIXTURE)
    sacre_line, tokenized_line, chrf_line = result.lines()
    assert sacre_line.startswith("sacreBLEU = ") and "tok:13a" in sacre_line
    assert tokenized_line.startswith("tokenized BLEU") and "tok:moses-de+compound-split" in tokenized_line
    assert re.fullmatch(rf"chrF2 = [\d.]+ \({CHRF_SIGNATURE}\)", chrf_line), chrf_line


def test_perfect_translations_score_100_both_ways():
    result = evaluation.evaluate_translations(REFERENCES, REFERENCES)
    assert result.sacrebleu.score == pytest.approx(100.0)
    assert result.tokenized.score == pytest.approx(100.0)
    assert result.chrf.score == pytest.approx(100.0)


def test_mismatched_lengths_are_an_error():
    with pytest.raises(ValueError, match="one hypothesis per reference"):
        evaluation.evaluate_translations(["a"], ["a", "b"])
    with pytest.raises(ValueError, match="2 sources but 1 references"):
        evaluation.translate_and_evaluate(copy_translate, ["a", "b"], ["a"])


class CopyModel(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def serve(self, inputs):
        return copy_translate(inputs)


def run(*args, cwd=ROOT, module="trainers.evaluate"):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ROOT}
    result = subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env,
                            capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    return result.returncode, result.stdout, result.stderr


@pytest.fixture(scope="module")
def exported_copy_model(tmp_path_factory):
    base = tmp_path_factory.mktemp("evaluate")
    model = CopyModel()
    path = base / "copy" / "1"
    tf.saved_model.save(model, str(path), signatures={"serving_default": model.serve})
    test_file = base / "test.tsv"
    test_file.write_text("".join(f"{s}\t{r}\n" for s, r in FIXTURE), encoding="utf-8")
    return base, test_file


def test_evaluate_command_on_an_exported_copy_model(exported_copy_model):
    base, test_file = exported_copy_model
    output = base / "hyp.txt"
    # the base folder: the command picks its highest version
    code, stdout, stderr = run(f"--saved_model={base / 'copy'}", "--dataset=files",
                               f"--test_data={test_file}", f"--output={output}", "--batch_size=2")
    assert code == 0, stderr
    sacre = re.search(r"^sacreBLEU = ([\d.]+) \((nrefs:1\|case:mixed\|eff:no\|tok:13a\|smooth:exp\|"
                      r"version:[\d.]+)\)$", stdout, re.M)
    tokenized = re.search(r"^tokenized BLEU \(Moses \+ compound split, the paper's\) = ([\d.]+)",
                          stdout, re.M)
    chrf = re.search(rf"^chrF2 = ([\d.]+) \({CHRF_SIGNATURE}\)$", stdout, re.M)
    assert sacre and tokenized and chrf, stdout
    assert float(sacre.group(1)) == pytest.approx(EXPECTED_SACREBLEU, abs=0.005)
    assert float(tokenized.group(1)) == pytest.approx(EXPECTED_TOKENIZED, abs=0.005)
    assert float(chrf.group(1)) == pytest.approx(EXPECTED_CHRF, abs=0.005)
    assert output.read_text(encoding="utf-8").splitlines() == SOURCES
    # stderr a log: no progress bar (its redrawing would be escape codes on one line)
    done = f"{len(FIXTURE)}/{len(FIXTURE)}"
    assert done not in stderr and "\x1b[" not in stderr and done not in stdout, (stdout, stderr)


@pytest.fixture(scope="module")
def copy_model_with_floors_on_a_terminal(exported_copy_model):
    """The copy model evaluated with --floors (the test pairs as its training pairs), stderr a
    terminal (a pseudo-terminal's far end) and stdout a pipe: ``(returncode, stdout, what the
    terminal showed)``. One run serves the two tests below: the bar is drawn on stderr while
    translating, the floors are printed on stdout after it; neither looks at the other's stream."""
    base, test_file = exported_copy_model
    terminal = TerminalStderr()
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ROOT}
    process = subprocess.Popen(
        [sys.executable, "-m", "trainers.evaluate", f"--saved_model={base / 'copy'}",
         "--dataset=files", f"--train_data={test_file}", f"--test_data={test_file}", "--floors",
         "--batch_size=2"],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=terminal.far_end)
    terminal.start()
    try:
        stdout = process.communicate(timeout=300)[0].decode()
    finally:
        if process.poll() is None:
            process.kill()
    return process.returncode, stdout, terminal.text()


def test_the_progress_bar_is_drawn_on_a_terminal_beside_the_scores(
        copy_model_with_floors_on_a_terminal):
    """stderr a terminal, stdout a pipe: the bar, finished, on the terminal; the scores alone on
    stdout."""
    code, stdout, shown = copy_model_with_floors_on_a_terminal
    assert code == 0, shown[-3000:]
    done = f"{len(FIXTURE)}/{len(FIXTURE)}"
    assert done in shown and done not in stdout
    assert re.search(r"^sacreBLEU = ", stdout, re.M), stdout


def test_evaluate_floors_beside_the_model(copy_model_with_floors_on_a_terminal):
    # The copy model scores exactly the copy floor; with the test pairs as training data the
    # translation memory finds every sentence (100) and the verdict says the model is below it.
    code, stdout, stderr = copy_model_with_floors_on_a_terminal
    assert code == 0, stderr[-3000:]
    rows = {m.group(1): (float(m.group(2)), float(m.group(3))) for m in re.finditer(
        r"^(model|translation memory|copy the source) +sacreBLEU +([\d.]+) .* chrF2 +([\d.]+)$",
        stdout, re.M)}
    assert rows["model"] == rows["copy the source"] == (
        pytest.approx(EXPECTED_SACREBLEU, abs=0.005), pytest.approx(EXPECTED_CHRF, abs=0.005))
    assert rows["translation memory"] == (pytest.approx(100.0), pytest.approx(100.0))
    assert re.search(r"^verdict: .*below the translation memory", stdout, re.M)


def test_floors_without_training_pairs_is_one_line_before_any_decoding(exported_copy_model,
                                                                       tmp_path):
    # Own test data, no --train_data, and an export that records no corpus: the translation memory
    # has nothing to look up. Said at once, not after decoding the test set.
    base, test_file = exported_copy_model
    output = tmp_path / "hyp.txt"
    code, stdout, stderr = run(f"--saved_model={base / 'copy'}", "--dataset=files",
                               f"--test_data={test_file}", "--floors", f"--output={output}")
    assert code == 2 and "Traceback" not in stderr, stderr[-3000:]
    assert stdout == ""  # no data line, no scores: nothing read or decoded
    assert not output.exists()
    assert stderr.strip().splitlines()[-1] == (
        "evaluate: error: --floors: the translation memory floor looks up training pairs: pass "
        "--train_data (the pairs the model was trained on, PATH.tsv or SRC_PATH,TGT_PATH); the "
        "export records none")


# --- which test set: the one the model was trained on, unless a data flag says otherwise ----------

# Two sentence patterns a tiny model learns in a few hundred updates, so that its translations of
# the test sentences (numbers it never saw) score neither 0 nor 100.
TRAIN_PAIRS = [(f"the number {i} is small", f"die Zahl {i} ist klein") for i in range(40)] + [
    (f"a red house number {i}", f"ein rotes Haus Nummer {i}") for i in range(40)]
TEST_PAIRS = [(f"the number {i} is small", f"die Zahl {i} ist klein") for i in range(40, 44)] + [
    (f"a red house number {i}", f"ein rotes Haus Nummer {i}") for i in range(40, 43)]
OTHER_PAIRS = [(f"a red house number {i}", f"ein rotes Haus Nummer {i}") for i in range(50, 53)]


def write_pairs(path, pairs):
    path.write_text("".join(f"{s}\t{r}\n" for s, r in pairs), encoding="utf-8")


FILES_RUN = ("--dataset=files", "--train_data=train.tsv", "--test_data=test.tsv", "--preset=tiny",
             "--vocab_size=320", "--max_length=24", "--token_budget=256", "--warmup_steps=40",
             "--learning_rate_scale=0.3", "--log_every_steps=100", "--dev_every_steps=0",
             "--dev_bleu_sentences=0", "--average_last=1", "--model_dir=runs/files",
             "--export_dir=saved_models")


@pytest.fixture(scope="module")
def trained_on_files(tmp_path_factory):
    """``trainers.wmt --dataset=files`` with paths relative to the folder it runs in, exporting at
    the end, as a user does; evaluate then runs in the same folder."""
    base = tmp_path_factory.mktemp("files_run")
    write_pairs(base / "train.tsv", TRAIN_PAIRS)
    write_pairs(base / "test.tsv", TEST_PAIRS)
    write_pairs(base / "other.tsv", OTHER_PAIRS)
    code, stdout, stderr = run(*FILES_RUN, "--train_steps=200", cwd=base, module="trainers.wmt")
    assert code == 0, stderr[-3000:]
    (base / "wmt.out").write_text(stdout, encoding="utf-8")
    return base


@pytest.mark.slow
def test_the_same_command_again_exports_no_second_version_of_the_same_weights(trained_on_files,
                                                                               tmp_path):
    base = tmp_path / "copy"
    shutil.copytree(trained_on_files, base)  # the times of the files too: which was written last
    code, stdout, stderr = run(*FILES_RUN, "--train_steps=200", cwd=base, module="trainers.wmt")
    assert code == 0, stderr[-3000:]
    assert (f"wmt: {os.path.join('saved_models/files', '1')}, "
            f"{os.path.join('saved_models/files_ids', '1')} hold the weights of "
            f"{os.path.join('runs/files', 'averaged', 'ckpt')} already; nothing exported") in stdout
    assert sorted(os.listdir(base / "saved_models" / "files")) == ["1"]
    assert sorted(os.listdir(base / "saved_models" / "files_ids")) == ["1"]
    # (A run trained further is exported again: test_export.py, version_holding.)


@pytest.mark.slow
def test_wmt_ends_with_the_summarys_figures_and_no_dev_loss_without_dev_data(trained_on_files):
    base = trained_on_files
    with open(base / "runs" / "files" / "summary.json") as stream:
        summary = json.load(stream)
    assert summary["final_dev_loss"] is None and summary["final_train_loss"] > 0
    last = (base / "wmt.out").read_text(encoding="utf-8").strip().splitlines()
    ending = next(line for line in reversed(last) if line.startswith("wmt: train_steps after"))
    assert ending == (f"wmt: train_steps after 200 steps; {summary['tokens_per_second']:,.0f} "
                      f"tokens/s; final train loss {summary['final_train_loss']:.4f}; summary in "
                      f"{os.path.join('runs/files', 'summary.json')}")


def test_the_training_commands_data_flags_keep_the_runs_held_out_split(tmp_path):
    """--model_dir with the data flags of the training command: its held-out splits sized as the
    run sized them (the count of pairs it recorded), though pairs were removed from the file
    since; other data flags take the file as it is."""
    from keras_transformer import data, runs
    from keras_transformer.config import TransformerConfig

    rows = [(f"the number {i} is small", f"die Zahl {i} ist klein") for i in range(3000)]
    write_pairs(tmp_path / "train.tsv", rows)
    started = data.sized_as(data.DataConfig(dataset="files", train_data=str(tmp_path / "train.tsv"),
                                            data_dir=str(tmp_path / "data")))
    run_dir = str(tmp_path / "run")
    runs.write_json(os.path.join(run_dir, runs.CONFIG_FILE),
                    {"model": TransformerConfig.from_preset("tiny", vocab_size=320).to_dict(),
                     "data": dataclasses.asdict(started)})
    tf.train.CheckpointManager(tf.train.Checkpoint(step=tf.Variable(1)), run_dir, 1).save()
    write_pairs(tmp_path / "train.tsv", rows[:1000])
    # In a process of its own: the program's flags are not the other programs' of this worker.
    code = f"""
from absl import flags
from keras_transformer import data
from trainers import evaluate
for other in ([], ["--dev_data={tmp_path / 'train.tsv'}"]):
    flags.FLAGS.unparse_flags()
    flags.FLAGS(["evaluate", "--model_dir={run_dir}", "--dataset=files",
                 "--train_data={tmp_path / 'train.tsv'}", "--data_dir={tmp_path / 'data'}", *other])
    given_data, _ = evaluate.check_flags()
    print(given_data.hold_out_pairs or data.hold_out_pairs(given_data))
"""
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == [str(len(rows)), "1000"]


def scored(stdout, base, output):
    """(the 'data:' line, the number of sentences, the printed sacreBLEU, the hypotheses)."""
    data_line = re.search(r"^data: .*$", stdout, re.M)
    count = re.search(r"^evaluate: .* on \S+ test \((\d+) sentences\)$", stdout, re.M)
    sacre = re.search(r"^sacreBLEU = ([\d.]+) ", stdout, re.M)
    assert data_line and count and sacre, stdout
    hypotheses = (base / output).read_text(encoding="utf-8").splitlines()
    return data_line.group(0), int(count.group(1)), float(sacre.group(1)), hypotheses


@pytest.mark.slow
def test_an_export_alone_is_scored_on_the_test_split_it_was_trained_with(trained_on_files):
    base = trained_on_files
    with open(base / "saved_models" / "files" / "1" / "assets" / "config.json") as stream:
        recorded = json.load(stream)
    with open(base / "runs" / "files" / "config.json") as stream:
        run_record = json.load(stream)
    assert recorded["data"] == run_record["data"]  # the run's own record, paths as given
    # and the bytes of its files, by which the same files moved are known (tests/test_runs.py)
    assert run_record["data_digests"] == {
        name: [hashlib.sha256((base / run_record["data"][name]).read_bytes()).hexdigest()]
        for name in ("train_data", "test_data")}
    # and the count of training pairs its held-out shares are sized by, kept on a resume
    assert recorded["data"]["hold_out_pairs"] == len(TRAIN_PAIRS)
    # The weights: the run's averaged checkpoint, which trainers.wmt --export_dir exports.
    assert recorded["checkpoint"] == os.path.join("runs/files", "averaged", "ckpt")
    code, stdout, stderr = run("--saved_model=saved_models/files", "--output=hyp.txt", cwd=base)
    assert code == 0, stderr[-3000:]
    assert (f"evaluate: {os.path.join('saved_models/files', '1')} (SavedModel, from "
            f"{os.path.join('runs/files', 'averaged', 'ckpt')}) on files test ") in stdout
    data_line, count, bleu, hypotheses = scored(stdout, base, "hyp.txt")
    assert data_line == "data: files test split test.tsv (from the export)"
    assert count == len(hypotheses) == len(TEST_PAIRS)
    expected = sacrebleu.corpus_bleu(hypotheses, [[r for _, r in TEST_PAIRS]]).score
    assert 0 < expected < 100  # the model learned something, yet not everything
    assert bleu == pytest.approx(expected, abs=0.005)
    chrf = re.search(r"^chrF2 = ([\d.]+) ", stdout, re.M)
    assert chrf, stdout
    assert float(chrf.group(1)) == pytest.approx(
        sacrebleu.corpus_chrf(hypotheses, [[r for _, r in TEST_PAIRS]]).score, abs=0.005)


def test_a_data_flag_wins_over_the_exports_record(trained_on_files):
    base = trained_on_files
    code, stdout, stderr = run("--saved_model=saved_models/files", "--dataset=files",
                               "--test_data=other.tsv", "--output=other.hyp", cwd=base)
    assert code == 0, stderr[-3000:]
    data_line, count, bleu, hypotheses = scored(stdout, base, "other.hyp")
    assert data_line == "data: files test split other.tsv (from the data flags)"
    assert count == len(hypotheses) == len(OTHER_PAIRS)
    expected = sacrebleu.corpus_bleu(hypotheses, [[r for _, r in OTHER_PAIRS]]).score
    assert bleu == pytest.approx(expected, abs=0.005)


def test_a_run_alone_is_scored_on_the_test_split_it_was_trained_with(trained_on_files):
    """...also from another folder: the run's relative paths are read from the folder its
    training ran in. And its export, rebuilt with another search (evaluate's search flag, or
    exported again with it), translates as the run with that search."""
    base = trained_on_files
    code, stdout, stderr = run(f"--model_dir={base.name}/runs/files", "--beam_size=1",
                               f"--output={base.name}/run.hyp", cwd=base.parent)
    assert code == 0, stderr[-3000:]
    data_line, count, bleu, hypotheses = scored(stdout, base, "run.hyp")
    assert data_line == f"data: files test split {base / 'test.tsv'} (from the run)"
    assert count == len(hypotheses) == len(TEST_PAIRS)
    origin = f"from {os.path.join('runs/files', 'averaged', 'ckpt')}"

    # Its export (of the same averaged weights) with a search flag: not its own beam-4 graph but
    # its weights searched here.
    code, stdout, stderr = run("--saved_model=saved_models/files", "--beam_size=1",
                               "--output=export.hyp", cwd=base)
    assert code == 0, stderr[-3000:]
    assert (f"evaluate: {os.path.join('saved_models/files', '1')} (SavedModel, {origin}), rebuilt "
            "here from its weights: beam 1, alpha 0.6, extra length 50 on files test ") in stdout
    data_line, *rest = scored(stdout, base, "export.hyp")
    assert data_line == "data: files test split test.tsv (from the export)"
    assert rest == [count, bleu, hypotheses]

    # The export exported again at beam 1: its record is the first's but for the beam, and its own
    # graph translates as the run.
    code, stdout, stderr = run("--saved_model=saved_models/files", "--beam_size=1",
                               "--export_dir=again", cwd=base, module="trainers.export")
    assert code == 0, stderr[-3000:]
    assert os.path.join("again", "files", "1") in stdout.splitlines()  # the model folder's name
    with open(base / "saved_models" / "files" / "1" / "assets" / "config.json") as stream:
        first = json.load(stream)
    with open(base / "again" / "files" / "1" / "assets" / "config.json") as stream:
        assert json.load(stream) == {**first, "decoding": {**first["decoding"], "beam_size": 1}}
    code, stdout, stderr = run("--saved_model=again/files", "--output=again.hyp", cwd=base)
    assert code == 0, stderr[-3000:]
    assert f"evaluate: {os.path.join('again/files', '1')} (SavedModel, {origin}) on files test " in stdout
    data_line, *rest = scored(stdout, base, "again.hyp")
    assert data_line == "data: files test split test.tsv (from the export)"
    assert rest == [count, bleu, hypotheses]


def test_an_export_without_a_record_says_so_and_uses_the_flags_defaults(exported_copy_model,
                                                                          tmp_path):
    # Written by tf.saved_model.save, like an export from before exports recorded their corpus.
    # Whether the default corpus is installed here or not, the first line says what is scored.
    base, _ = exported_copy_model
    _, stdout, stderr = run(f"--saved_model={base / 'copy'}", "--limit=2", cwd=tmp_path)
    assert re.fullmatch(r"data: \w+ test split \(from the data flags' defaults: the export does "
                        r"not record its corpus; pass --dataset to choose\)",
                        stdout.splitlines()[0]), (stdout, stderr[-2000:])


@pytest.mark.parametrize("model, dataset", [
    ("--model_dir=runs/files", ()),
    ("--model_dir=runs/files", ("--dataset=files",)),
    ("--saved_model=saved_models/files", ()),
])
def test_other_test_data_alone_is_scored_and_floored_with_the_models_training_pairs(
        trained_on_files, model, dataset):
    """``--test_data=x`` without --dataset on a model trained on own files: x, the test split of its
    recorded dataset (not of the flag's default corpus). With --floors the translation memory looks
    up the pairs the model was trained on, the recorded train.tsv, as no --train_data is given."""
    base = trained_on_files
    record = "the run" if model.startswith("--model_dir") else "the export"
    output = f"floors{len(dataset)}{record[4:]}.hyp"
    code, stdout, stderr = run(model, *dataset, "--test_data=other.tsv", "--floors",
                               "--beam_size=1", f"--output={output}", cwd=base)
    assert code == 0, stderr[-3000:]
    data_line, count, bleu, hypotheses = scored(stdout, base, output)
    origin = "the data flags" if dataset else f"the data flags, with the dataset {record} records"
    assert data_line == f"data: files test split other.tsv (from {origin})"
    assert count == len(hypotheses) == len(OTHER_PAIRS)
    assert bleu == pytest.approx(
        sacrebleu.corpus_bleu(hypotheses, [[r for _, r in OTHER_PAIRS]]).score, abs=0.005)
    assert (f"floors: the translation memory looks up the files train split train.tsv (from "
            f"{record})") in stdout.splitlines()
    memory = re.search(r"^translation memory +sacreBLEU +([\d.]+) .* chrF2 +([\d.]+)$", stdout,
                       re.M)
    assert memory, stdout
    expected = evaluation.floors([s for s, _ in OTHER_PAIRS], [r for _, r in OTHER_PAIRS],
                                 TRAIN_PAIRS).translation_memory
    assert float(memory.group(1)) == pytest.approx(expected.sacrebleu.score, abs=0.005)
    assert float(memory.group(2)) == pytest.approx(expected.chrf.score, abs=0.005)
    assert re.search(r"^verdict: ", stdout, re.M), stdout
