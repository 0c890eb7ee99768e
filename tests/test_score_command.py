"""trainers.score as a user runs it: pairs scored in input order as the in-memory Translator scores
each alone; n-best lists as trainers.translate writes them
rescored by two models, each column the score of its pair; a TSV line without a tab, a bad n-best
line and an export older than the score signature are one line each, not a traceback."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.runs import load_translator
from keras_transformer.weights import exported_version_path
from keras_transformer.tokenizer import SubwordTokenizer
from keras_transformer.training import Trainer, TrainingConfig
from test_translate_command import SENTENCES, assert_clean_error, run

# Pairs of very different lengths (so sorting by length reorders them), an empty target, invalid
# UTF-8 and a target beyond the model's maximum length.
PAIRS = [(b"Where is the train station?", b"Wo ist der Bahnhof?"), (b"A dog runs.", b""),
         (b"The cat sits on the mat.", b"Das ist Satz 5. " * 12), (b"caf\xc3 \xff broken", b"Das ist Satz 3."),
         (b"Das ist Satz 5.", b"Das ist Satz 5.")]
TRUNCATED_LINE = 3  # 1-based
SOURCES = [b"A dog runs.", b"", b"Where is the train station?", b"The cat sits on the mat."]


def make_run(base, name, seed, vocabulary):
    """A model_dir as the trainer writes it: config.json, one checkpoint, the vocabulary's path."""
    keras.utils.set_random_seed(seed)
    config = kt.TransformerConfig.from_preset("tiny", vocab_size=vocabulary.vocab_size, max_length=24)
    trainer = Trainer(config, TrainingConfig(model_dir=str(base / name), train_steps=1),
                      run_info={"vocab_path": vocabulary.path})
    trainer._write_run_config()
    trainer.checkpointer.save(1)
    return str(base / name)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """Two runs of different weights, the pairs file, the sources file and the n-best list
    trainers.translate writes for it."""
    base = tmp_path_factory.mktemp("score")
    text = [f"{s} {i}" for i in range(40) for s in SENTENCES] + [f"Das ist Satz {i}." for i in range(80)]
    vocabulary = SubwordTokenizer.learn(text, vocab_size=320, out_path=str(base / "vocab" / "tiny.model"))
    runs = [make_run(base, "a", 3, vocabulary), make_run(base, "b", 4, vocabulary)]
    pairs = base / "pairs.tsv"
    # Ending in empty lines as editors leave them, more than one chunk of the command's input at
    # --batch_size=2: no pairs, left out.
    pairs.write_bytes(b"".join(s + b"\t" + t + b"\n" for s, t in PAIRS) + b"\n\r\n \n\n\n\t\n")
    sources = base / "sources.txt"
    sources.write_bytes(b"\n".join(SOURCES) + b"\n")
    code, nbest, stderr = run("translate", f"--model_dir={runs[0]}", f"--input={sources}", "--n_best=2",
                              "--beam_size=2", "--extra_length=4")
    assert code == 0, stderr
    (base / "nbest.tsv").write_bytes(nbest)
    return dict(base=base, runs=runs, pairs=str(pairs), sources=str(sources),
                nbest=str(base / "nbest.tsv"))


def scored_alone(model_dir, pairs):
    """Each pair scored alone by the run's in-memory Translator: ``[(log_prob, tokens, nll)]``."""
    score = load_translator(model_dir).score_function()
    results = []
    for source, target in pairs:
        out = score(tf.constant([source]), tf.constant([target]))
        results.append((float(out["log_prob"][0]), int(out["tokens"][0]), float(out["nll_per_token"][0])))
    return results


def columns(stdout):
    return [[float(field) for field in line.split("\t")] for line in stdout.decode().splitlines()]


def test_pairs_are_scored_in_input_order_as_each_alone(setup):
    expected = scored_alone(setup["runs"][0], PAIRS)
    output = str(setup["base"] / "scores.tsv")
    code, stdout, stderr = run("score", f"--model_dir={setup['runs'][0]}", f"--input={setup['pairs']}",
                               f"--output={output}", "--batch_size=2")
    assert code == 0 and stdout == b"", stderr
    with open(output, "rb") as stream:
        rows = columns(stream.read())
    assert len(rows) == len(PAIRS)
    for row, (log_prob, tokens, nll) in zip(rows, expected):
        assert row == pytest.approx([log_prob, tokens, nll], abs=2e-4)
    assert rows[1][1] == 1  # the empty target: its EOS
    assert f"line(s) {TRUNCATED_LINE}." in stderr and "Traceback" not in stderr
    assert f"score: model 1: {os.path.join(setup['runs'][0], 'ckpt-1')} (latest;" in stderr


@pytest.mark.slow
def test_alignments_of_given_pairs_are_the_first_models_each_alone(setup):
    """--alignments: each pair's line ends in its alignment by the first model (the run's
    Translator, each pair alone), the scores as without it; an export's from its align signature."""
    from trainers import shipped

    a, b = setup["runs"]
    code, stdout, stderr = run("score", f"--model_dir={a},{b}", f"--input={setup['pairs']}",
                               "--batch_size=2", "--alignments")
    assert code == 0, stderr
    rows = [line.split("\t") for line in stdout.decode().splitlines()]
    align = load_translator(a).align_function()
    alone = [align(tf.constant([s]), tf.constant([t]))["alignments"][0].numpy().decode()
             for s, t in PAIRS]
    assert [row[-1] for row in rows] == alone
    assert "" in alone and any(alone)  # the empty target aligns nothing
    want = [list(x) + list(y) for x, y in zip(scored_alone(a, PAIRS), scored_alone(b, PAIRS))]
    for row, expected in zip(rows, want):
        assert [float(field) for field in row[:-1]] == pytest.approx(expected, abs=2e-4)
    assert_clean_error(run("score", f"--model_dir={a}", f"--nbest={setup['nbest']}",
                           f"--sources={setup['sources']}", "--alignments"),
                       "--alignments: with pairs only (--input or stdin), not --nbest.")

    shipped_dir = shipped.shipped_model_dir()
    if shipped_dir is None:
        pytest.skip("no shipped model in this copy of the project")
    pair = ("Click OK to close the dialog.", "Klicken Sie auf OK, um den Dialog zu schlie\u00dfen.")
    code, stdout, stderr = run("score", f"--saved_model={shipped_dir}", "--alignments",
                               stdin="\t".join(pair).encode() + b"\n")
    assert code == 0, stderr
    signature = tf.saved_model.load(exported_version_path(shipped_dir)).signatures["align"]
    expected = signature(sources=tf.constant([pair[0]]), targets=tf.constant([pair[1]]))
    assert stdout.decode().split("\t")[-1] == expected["alignments"][0].numpy().decode() + "\n"


def test_a_line_without_a_tab_is_one_line_naming_file_and_line(setup):
    bad = setup["base"] / "bad.tsv"
    bad.write_bytes(b"A dog runs.\tEin Hund.\nno tab here\nYes.\tJa.\n")
    code, stdout, stderr = run("score", f"--model_dir={setup['runs'][0]}", f"--input={bad}")
    assert code == 2 and stdout == b""
    assert [line for line in stderr.splitlines() if line.startswith("score: error")] == [
        f"score: error: {bad}:2: no tab; each line must be source<TAB>target with exactly one tab"]
    # Empty lines with a pair after them are no file's end: the first of them is named, though
    # the pair comes in a later chunk of the input (--batch_size=1: four lines a chunk).
    bad.write_bytes(b"A dog runs.\tEin Hund.\n" + b"\n" * 5 + b"Yes.\tJa.\n")
    code, stdout, stderr = run("score", f"--model_dir={setup['runs'][0]}", f"--input={bad}",
                               "--batch_size=1")
    assert code == 2
    assert [line for line in stderr.splitlines() if line.startswith("score: error")] == [
        f"score: error: {bad}:2: no tab; each line must be source<TAB>target with exactly one tab"]


def test_nbest_rescoring_adds_each_models_score_of_the_pair(setup):
    code, stdout, stderr = run("score", f"--model_dir={','.join(setup['runs'])}",
                               f"--nbest={setup['nbest']}", f"--sources={setup['sources']}")
    assert code == 0, stderr
    with open(setup["nbest"], "rb") as stream:
        nbest = stream.read().decode().splitlines()
    rescored = stdout.decode().splitlines()
    assert len(rescored) == len(nbest) == 2 * len(SOURCES)
    hypotheses = []
    for original, line in zip(nbest, rescored):
        index, score, text = original.split("\t", 2)
        fields = line.split("\t", 4)
        assert fields[:2] == [index, score] and fields[4] == text  # the line as translate wrote it
        if score == "-inf":  # an empty slot: no hypothesis
            assert fields[2:4] == ["-inf", "-inf"]
        else:
            hypotheses.append(((SOURCES[int(index)], text.encode()), [float(f) for f in fields[2:4]]))
    assert len(hypotheses) == 2 * len(SOURCES) - 1  # the empty input's second slot is empty
    for column, model_dir in enumerate(setup["runs"]):
        alone = scored_alone(model_dir, [pair for pair, _ in hypotheses])
        assert [got[column] for _, got in hypotheses] == pytest.approx([a[0] for a in alone], abs=2e-4)
    assert not np.allclose([got[0] for _, got in hypotheses], [got[1] for _, got in hypotheses])

    code, _, stderr = run("score", f"--model_dir={setup['runs'][0]}", "--nbest=-",
                          f"--sources={setup['sources']}", stdin=b"0\t-1.0\tgut\n9\t-1.0\tgut\n")
    assert code == 2 and ("score: error: stdin:2: INDEX 9, but --sources="
                          f"{setup['sources']} has 4 line(s)") in stderr


def test_an_export_older_than_the_score_signature_is_one_line(tmp_path):
    from test_export import write_old_export

    write_old_export(str(tmp_path / "1"))
    code, stdout, stderr = run("score", f"--saved_model={tmp_path}", stdin=b"Hello.\tHallo.\n")
    assert code == 1 and stdout == b"" and "Traceback" not in stderr
    assert [line for line in stderr.splitlines() if line.startswith("score:")] == [
        f"score: error: {tmp_path}/1 has no score signature: it was exported before scoring was; "
        "export the run again to score with it."], stderr


def test_several_models_named_either_way_score_alike(setup):
    """Comma-separated (`--model_dir=A,B`, `--saved_model=A,B`) or the flag repeated: the same
    models, one column each in the order named (a comma-separated --saved_model was one folder
    named "A,B", and no such folder)."""
    from trainers import shipped

    a, b = setup["runs"]
    pairs = [f"--input={setup['pairs']}", "--batch_size=2"]
    code, comma, stderr = run("score", f"--model_dir={a},{b}", *pairs)
    assert code == 0, stderr
    code, repeated, stderr = run("score", f"--model_dir={a}", f"--model_dir={b}", *pairs)
    assert code == 0, stderr
    assert f"score: model 2: {os.path.join(b, 'ckpt-1')} (latest;" in stderr
    assert columns(repeated) == columns(comma)
    want = [list(x) + list(y) for x, y in zip(scored_alone(a, PAIRS), scored_alone(b, PAIRS))]
    assert len(columns(repeated)) == len(PAIRS)
    for row, expected in zip(columns(repeated), want):
        assert row == pytest.approx(expected, abs=2e-4)

    shipped_dir = shipped.shipped_model_dir()
    if shipped_dir is None:
        pytest.skip("no shipped model in this copy of the project")
    line = b"Opens the Customize dialog.\t\xc3\x96ffnet den Dialog Anpassen.\n"
    code, comma, stderr = run("score", f"--saved_model={shipped_dir},{shipped_dir}", stdin=line)
    assert code == 0, stderr
    assert "score: 1 line(s) scored with 2 model(s)." in stderr
    code, repeated, stderr = run("score", f"--saved_model={shipped_dir}", f"--saved_model={shipped_dir}",
                                 stdin=line)
    assert code == 0, stderr
    assert columns(repeated) == columns(comma) and len(columns(comma)[0]) == 6
