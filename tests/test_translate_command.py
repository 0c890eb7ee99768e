"""trainers.translate and trainers.export as a user runs them: on a training run's model_dir written by
the trainer itself, checkpoint mode, export, SavedModel mode and the in-memory Translator agree, input
order and empty lines survive batching, n-best lists are the search's own, typed and piped lines are
answered before the input ends, and bad input gets a one-line error, not a traceback."""

import contextlib
import functools
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.inference import DecodingConfig, Translator
from keras_transformer.tokenizer import SubwordTokenizer
from keras_transformer.training import Trainer, TrainingConfig
from terminal import TerminalStderr

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SENTENCES = ["The cat sits on the mat.", "A dog runs.", "Where is the train station?"]
# Lines of very different lengths (so sorting by length reorders them), empty and blank lines,
# invalid UTF-8 and one line beyond the model's maximum length.
LINES = [b"Where is the train station?", b"", b"A dog runs.", b"   ", b"the cat sits " * 12,
         b"caf\xc3 \xff\xfe broken", b"Das ist Satz 5.", b"The cat sits on the mat."]
TRUNCATED_LINE = 5  # 1-based number of the long line
BEAM = dict(beam_size=2, extra_length=6)


def run(module, *args, stdin=None):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run([sys.executable, "-m", f"trainers.{module}", *args], cwd=ROOT, env=env,
                            input=stdin, capture_output=True, timeout=300)
    return result.returncode, result.stdout, result.stderr.decode("utf-8", "replace")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A model_dir as the trainer writes it (config.json, a checkpoint, the recorded vocabulary),
    and what the in-memory Translator of its model says about LINES."""
    base = tmp_path_factory.mktemp("translate")
    keras.utils.set_random_seed(3)
    text = [f"{s} {i}" for i in range(40) for s in SENTENCES] + [f"Das ist Satz {i}." for i in range(80)]
    tokenizer = SubwordTokenizer.learn(text, vocab_size=320, out_path=str(base / "vocab" / "tiny.model"))
    config = kt.TransformerConfig.from_preset("tiny", vocab_size=tokenizer.vocab_size, max_length=24)
    model_dir = str(base / "run")
    trainer = Trainer(config, TrainingConfig(model_dir=model_dir, train_steps=1),
                      run_info={"vocab_path": tokenizer.path})
    trainer._write_run_config()
    trainer.checkpointer.save(1)

    translator = Translator(trainer.model, tokenizer, DecodingConfig(**BEAM))
    translate = tf.function(translator.translate_text, input_signature=[tf.TensorSpec([None], tf.string)])
    non_empty = [line for line in LINES if line.strip()]
    out = {k: np.asarray(v) for k, v in translate(tf.constant(non_empty)).items()}
    expected = dict(zip(non_empty, zip((t.decode() for t in out["translations"]), out["scores"])))
    # Distinct translations, or a mix-up of the input order could go unnoticed.
    assert len({text for text, _ in expected.values()}) == len(non_empty)
    input_path = base / "input.txt"
    input_path.write_bytes(b"\n".join(LINES) + b"\n")
    return dict(base=base, model_dir=model_dir, input=str(input_path), expected=expected)


def parse(stdout_bytes):
    """--show_scores lines -> [(score, translation)]."""
    rows = []
    for line in stdout_bytes.decode("utf-8").split("\n")[:-1]:
        score, text = line.split("\t", 1)
        rows.append((float(score), text))
    return rows


@pytest.fixture(scope="module")
def checkpoint_output(setup):
    output = str(setup["base"] / "out.txt")
    # One intra-op thread (set before TensorFlow starts, or it refuses): the same translations.
    code, _, stderr = run("translate", f"--model_dir={setup['model_dir']}", f"--input={setup['input']}",
                          f"--output={output}", "--batch_size=2", "--show_scores",
                          "--beam_size=2", "--extra_length=6", "--intra_op_threads=1")
    assert code == 0, stderr
    with open(output, "rb") as f:
        return f.read(), stderr


def test_checkpoint_mode_matches_in_memory_translator_in_input_order(setup, checkpoint_output):
    stdout, stderr = checkpoint_output
    rows = parse(stdout)
    assert len(rows) == len(LINES)
    for line, (score, text) in zip(LINES, rows):
        if not line.strip():
            assert (score, text) == (0.0, "")  # empty line in, empty line out
        else:
            want_text, want_score = setup["expected"][line]
            assert text == want_text.replace("\n", " ")
            assert score == pytest.approx(float(want_score), abs=2e-4)
    assert f"line(s) {TRUNCATED_LINE}." in stderr  # the long line is flagged by number
    assert "6/6" not in stderr  # no progress bar when stderr is a log, not a terminal
    assert "Traceback" not in stderr


@pytest.fixture(scope="module")
def exported(setup):
    """trainers.export of the run (beam 2, extra length 6) as tiny and tiny_ids under
    ``export_dir``: ``(export_dir, stdout, stderr)``. Exporting traces every signature, so the
    tests that need a SavedModel of this project's export share this one."""
    export_dir = str(setup["base"] / "saved_models")
    code, stdout, stderr = run("export", f"--model_dir={setup['model_dir']}", f"--export_dir={export_dir}",
                               "--name=tiny", "--beam_size=2", "--extra_length=6")
    assert code == 0, stderr
    return export_dir, stdout, stderr


@pytest.mark.slow
def test_export_then_saved_model_mode_gives_identical_output(setup, checkpoint_output, exported):
    from keras_transformer import inference

    export_dir, stdout, stderr = exported
    # The checkpoint it used, and why (the run has no averaged or best one), and the search.
    assert (f"export: {os.path.join(setup['model_dir'], 'ckpt-1')} (latest; the default: averaged, "
            "else ema, else best, else latest), beam 2, alpha 0.6, extra length 6") in stderr
    printed = stdout.decode()
    assert os.path.join(export_dir, "tiny", "1") in printed.splitlines()
    assert os.path.join(export_dir, "tiny_ids", "1") in printed.splitlines()
    assert (f"tensorflow_model_server --rest_api_port=8501 --model_name=tiny "
            f"--model_base_path={os.path.join(export_dir, 'tiny')}") in printed
    assert "curl -s -X POST http://localhost:8501/v1/models/tiny:predict" in printed

    # The base folder: its highest version is used; the lines come from stdin this time, named
    # as trainers.score names it.
    os.rename(os.path.join(export_dir, "tiny", "1"), os.path.join(export_dir, "tiny", "7"))
    shutil.copytree(os.path.join(export_dir, "tiny_ids", "1"), os.path.join(export_dir, "tiny", "3"))
    code, stdout, stderr = run("translate", f"--saved_model={os.path.join(export_dir, 'tiny')}",
                               "--batch_size=2", "--show_scores", "--input=-",
                               stdin=b"\n".join(LINES) + b"\n")
    assert code == 0, stderr
    assert os.path.join(export_dir, "tiny", "7") in stderr
    assert stdout == checkpoint_output[0]

    # The n-best lists through the export's translate_nbest signature: those of the search; each
    # hypothesis's word alignment through its align signature (the last layer's), not a rebuild.
    code, stdout, stderr = run("translate", f"--saved_model={os.path.join(export_dir, 'tiny')}",
                               "--n_best=2", "--alignments", f"--input={setup['input']}")
    assert code == 0, stderr
    # The export says which weights it holds: the checkpoint trainers.export loaded.
    assert (f"{os.path.join(export_dir, 'tiny', '7')} (SavedModel, from "
            f"{os.path.join(setup['model_dir'], 'ckpt-1')}), beam 2, alpha 0.6, extra length 6") in stderr
    assert "rebuilt" not in stderr
    rows = [line.split("\t") for line in stdout.decode("utf-8").split("\n")[:-1]]
    nbest = search_nbest(setup["model_dir"], **BEAM)
    assert_nbest_lists(parse_nbest("".join(f"{i}\t{s}\t{t}\n" for i, s, t, _ in rows).encode()),
                       nbest, 2)
    hypotheses = [(line, text) for line in LINES if line.strip() for text in nbest[line][0][:2]]
    translator = run_translator(setup["model_dir"], **BEAM)
    assert [alignment for index, _, _, alignment in rows if LINES[int(index)].strip()] == \
        inference.align_in_batches(translator.align_function(), *zip(*hypotheses))
    # Longer than its beam: one line naming the flag that searches its weights here instead...
    version = os.path.join(export_dir, "tiny", "7")
    assert_clean_error(run("translate", f"--saved_model={os.path.join(export_dir, 'tiny')}",
                           "--n_best=3", "--text=Hello."),
                       f"--n_best=3 exceeds the beam size 2 {version} was exported with: pass "
                       "--beam_size=3 to search its weights here with that beam")
    # ... which gives the run's own lists at that beam, the export's other settings kept; here
    # searched as an ensemble of the export with itself, which is the export.
    tiny = os.path.join(export_dir, "tiny")
    code, stdout, stderr = run("translate", f"--saved_model={tiny},{tiny}", "--n_best=3",
                               "--beam_size=3", f"--input={setup['input']}")
    assert code == 0, stderr
    member = f"{version} (SavedModel, from {os.path.join(setup['model_dir'], 'ckpt-1')})"
    assert (f"translate: an ensemble of 2 SavedModels: {member}, {member}, rebuilt here from their "
            "weights: beam 3, alpha 0.6, extra length 6") in stderr
    assert_nbest_lists(parse_nbest(stdout), search_nbest(setup["model_dir"], beam_size=3,
                                                         extra_length=6), 3)

    # An existing version is refused before anything is loaded.
    assert_clean_error(run("export", f"--model_dir={setup['model_dir']}", f"--export_dir={export_dir}",
                           "--name=tiny", "--version=1"), "tiny_ids/1 exists already")


def assert_clean_error(result, message):
    code, _, stderr = result
    assert code == 2, stderr  # a usage error, found before anything was loaded
    assert message in stderr and "Traceback" not in stderr, stderr


def test_load_translator_finds_the_vocabulary_and_checkpoint_or_names_what_is_missing(setup, tmp_path):
    from keras_transformer.runs import load_translator

    moved = tmp_path / "moved_run"
    shutil.copytree(setup["model_dir"], moved)
    with open(moved / "config.json") as f:
        run_config = json.load(f)
    run_config["vocab_path"] = str(tmp_path / "gone.model")  # the data folder was cleaned
    with open(moved / "config.json", "w") as f:
        json.dump(run_config, f)
    with pytest.raises(ValueError, match=f"vocabulary of the run in {moved} was not found .*gone.model"):
        load_translator(str(moved))
    # A vocabulary kept in the run directory is found first.
    shutil.copy(os.path.join(setup["base"], "vocab", "tiny.model"), moved / "vocab.model")
    checkpoint = str(moved / "ckpt-1.index")  # a prefix given with its .index suffix also works
    translator = load_translator(str(moved), checkpoint, DecodingConfig(**BEAM))
    line = LINES[0]
    out = translator.translate_text(tf.constant([line]))
    assert out["translations"].numpy()[0].decode() == setup["expected"][line][0]
    # A notebook seeds after loading: the Translator's tokenizer survives (tensorflow/text#570).
    keras.utils.set_random_seed(1)
    out = translator.translate_text(tf.constant([line]))
    assert out["translations"].numpy()[0].decode() == setup["expected"][line][0]
    with pytest.raises(ValueError, match="ckpt-9' not found"):
        load_translator(str(moved), str(moved / "ckpt-9"))
    # A vocabulary given that the run did not train with is named as the given one.
    other = SubwordTokenizer.learn([f"{s} {i}" for i in range(40) for s in SENTENCES],
                                   vocab_size=296, out_path=str(tmp_path / "other.model"))
    with pytest.raises(ValueError) as error:
        load_translator(str(moved), vocab_path=other.path)
    assert str(error.value) == (f"vocab_path={other.path} has 296 pieces, the run in {moved} 320: "
                                "not the vocabulary it trained with; leave vocab_path out for the "
                                "run's own.")


@functools.cache
def run_translator(model_dir, checkpoint=None, **decoding):
    """``runs.load_translator`` of the run with this search, loaded once per model, checkpoint and
    search in this process (a Translator holds no state between calls)."""
    from keras_transformer.runs import load_translator

    return load_translator(model_dir, checkpoint, DecodingConfig(**decoding))


@functools.cache
def search_nbest(model_dir, checkpoint=None, **decoding):
    """The search's own n-best lists for the LINES with text, for the weights of ``checkpoint``:
    ``Translator.translate_ids`` detokenized, ``{line: ([text] * beam, [score] * beam)}``. Computed
    once per model, checkpoint and search in this process (the tests only read it)."""
    translator = run_translator(model_dir, checkpoint, **decoding)
    lines = [line for line in LINES if line.strip()]
    source_ids, _, _ = translator.source_ids(tf.constant(lines))
    out = tf.function(translator.translate_ids)(source_ids)
    ids = np.asarray(out["ids"])
    texts = np.asarray(translator.tokenizer.detokenize(ids.reshape(-1, ids.shape[2])))
    texts = texts.reshape(ids.shape[:2])
    return {line: ([t.decode() for t in row], scores.tolist())
            for line, row, scores in zip(lines, texts, np.asarray(out["scores"]))}


def parse_nbest(stdout_bytes):
    """INDEX<TAB>SCORE<TAB>TEXT lines -> {index: [(score, text)]}, in the order printed."""
    rows = {}
    for line in stdout_bytes.decode("utf-8").split("\n")[:-1]:
        index, score, text = line.split("\t", 2)
        rows.setdefault(int(index), []).append((float(score), text))
    return rows


def assert_nbest_lists(rows, expected, n_best):
    assert list(rows) == list(range(len(LINES)))  # every input, in input order
    for index, line in enumerate(LINES):
        scores = [score for score, _ in rows[index]]
        texts = [text for _, text in rows[index]]
        if not line.strip():
            assert rows[index] == [(0.0, "")] + [(float("-inf"), "")] * (n_best - 1)
            continue
        want_texts, want_scores = expected[line]
        assert texts == [t.replace("\n", " ") for t in want_texts[:n_best]]
        assert scores == pytest.approx(want_scores[:n_best], abs=2e-4)
        assert len(set(texts)) == n_best  # distinct hypotheses
        assert scores == sorted(scores, reverse=True)  # best first


@pytest.fixture(scope="module")
def old_export(tmp_path_factory):
    """A SavedModel as exported before the n-best signature; it "translates" each sentence into
    itself at once, which is all the tests of input and output below need."""
    from test_export import write_old_export

    path = str(tmp_path_factory.mktemp("old_export"))
    write_old_export(os.path.join(path, "1"))
    return path


def test_n_best_with_an_export_older_than_the_n_best_signature_is_one_line(old_export):
    code, stdout, stderr = run("translate", f"--saved_model={old_export}", "--n_best=2", "--text=Hello.")
    assert code == 1 and stdout == b"" and "Traceback" not in stderr
    # (TensorFlow's own start-up lines aside)
    assert [line for line in stderr.splitlines() if line.startswith("translate:")] == [
        f"translate: error: --n_best=2: {os.path.join(old_export, '1')} has no translate_nbest "
        "signature: it was exported before n-best lists were; export the run again for them."], stderr


def test_a_reader_that_stops_early_ends_translate_quietly(old_export):
    process = translate_process(f"--saved_model={old_export}", stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # as `... | head -0` does
    _, stderr = process.communicate(b"Hello.\n" * 3, timeout=120)
    assert process.returncode == 128 + signal.SIGPIPE  # what `yes | head` gives `yes`
    assert "Traceback" not in stderr.decode() and "Broken pipe" not in stderr.decode(), stderr


def read_until(stream, done, timeout=240):
    """What the pipe ``stream`` delivers until ``done(data)``; fails after ``timeout`` seconds."""
    data, deadline = b"", time.monotonic() + timeout
    while not done(data):
        left = deadline - time.monotonic()
        assert left > 0, f"nothing more after {timeout} s; so far {data!r}"
        if select.select([stream], [], [], left)[0]:
            chunk = os.read(stream.fileno(), 1 << 16)
            assert chunk, f"end of output; so far {data!r}"
            data += chunk
    return data


def translate_process(*args, **streams):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.Popen([sys.executable, "-m", "trainers.translate", *args], cwd=ROOT, env=env,
                            **streams)


@contextlib.contextmanager
def interactive_translate(*args):
    """translate with stdin a terminal (a pseudo-terminal's far end) and nothing else named: the
    interactive mode. Yields the process and the terminal's near end, to type into."""
    terminal, far_end = os.openpty()
    process = translate_process(*args, stdin=far_end, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    os.close(far_end)
    try:
        yield process, terminal
    finally:
        if process.poll() is None:
            process.kill()
        os.close(terminal)


@pytest.fixture(scope="module")
def averaged_run(setup, tmp_path_factory):
    """A copy of the run with an averaged checkpoint newer than its latest; returns (model_dir,
    averaged prefix). The average of one checkpoint: ckpt-1's weights. (Only read by the tests.)"""
    from keras_transformer import runs, weights
    from keras_transformer.training import write_averaged_checkpoint

    model_dir = str(tmp_path_factory.mktemp("averaged") / "run")
    shutil.copytree(setup["model_dir"], model_dir)  # keeps ckpt-1's time: the average is newer
    model = weights.build_model(runs.model_config(runs.read_config(model_dir)))
    averaged = write_averaged_checkpoint(model, [os.path.join(model_dir, "ckpt-1")],
                                         os.path.join(model_dir, runs.AVERAGED_PREFIX))
    return model_dir, averaged


def test_evaluate_uses_the_averaged_checkpoint_and_says_so(averaged_run, tmp_path):
    model_dir, averaged = averaged_run
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("A dog runs.\tEin Hund rennt.\nDas ist Satz 5.\tDas ist Satz 5.\n")
    code, stdout, stderr = run("evaluate", f"--model_dir={model_dir}", "--dataset=files",
                               f"--train_data={pairs}", f"--test_data={pairs}", "--beam_size=2",
                               "--extra_length=6")
    assert code == 0, stderr
    assert (f"evaluate: {averaged} (averaged; the default: averaged, else ema, else best, else latest), "
            "beam 2, alpha 0.6, extra length 6 on files test (2 sentences)") in stdout.decode()


def test_interactive_mode_answers_each_line_at_once_with_a_fresh_averaged_checkpoint(setup,
                                                                                    averaged_run):
    model_dir, averaged = averaged_run
    with interactive_translate(f"--model_dir={model_dir}", "--beam_size=2",
                               "--extra_length=6") as (process, terminal):
        stderr = read_until(process.stderr, lambda data: data.endswith(b"> ")).decode()
        assert (f"translate: {averaged} (averaged; the default: averaged, else ema, else best, else latest), "
                "beam 2, alpha 0.6, extra length 6") in stderr
        line = b"A dog runs."
        os.write(terminal, line + b"\n")
        answer = read_until(process.stdout, lambda data: data.endswith(b"\n"))
        assert answer.decode() == setup["expected"][line][0] + "\n"  # the average of one: ckpt-1
        assert process.poll() is None  # answered while the input is still open
        os.write(terminal, b"\x04")  # Ctrl-D at the start of a line: end of input
        assert process.wait(timeout=120) == 0
        stderr += process.stderr.read().decode()
        assert "translate: 1 line(s) translated" in stderr and "Traceback" not in stderr, stderr


def test_ctrl_c_ends_the_interactive_mode_cleanly(old_export):
    with interactive_translate(f"--saved_model={old_export}") as (process, terminal):
        read_until(process.stderr, lambda data: data.endswith(b"> "))
        os.write(terminal, b"Hello.\n")
        assert read_until(process.stdout, lambda data: data.endswith(b"\n")) == b"Hello.\n"
        read_until(process.stderr, lambda data: data.endswith(b"> "))  # waiting for the next line
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=120) == 0
        stderr = process.stderr.read().decode()
        assert "translate: 1 line(s) translated" in stderr and "Traceback" not in stderr, stderr


def test_piped_n_best_lists_are_the_searchs_own_and_come_before_the_input_ends(setup):
    """--n_best=3 on a pipe kept open: the first lines' lists are printed before more input comes,
    and every list is the search's own (texts, scores, order) for the same checkpoint."""
    # stderr a terminal (a pseudo-terminal's far end) and stdout a pipe: the progress counter.
    terminal = TerminalStderr()
    process = translate_process(f"--model_dir={setup['model_dir']}", "--n_best=3", "--beam_size=3",
                                "--extra_length=6", "--batch_size=1", stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=terminal.far_end)
    terminal.start()
    try:
        first, rest = LINES[:3], LINES[3:]
        process.stdin.write(b"\n".join(first) + b"\n")
        process.stdin.flush()
        stdout = read_until(process.stdout, lambda data: data.count(b"\n") == 3 * len(first))
        assert process.poll() is None  # answered while the input is still open
        # The rest at once: more than a chunk (CHUNK_BATCHES lines with --batch_size=1).
        process.stdin.write(b"\n".join(rest) + b"\n")
        process.stdin.close()
        stdout += process.stdout.read()
        assert process.wait(timeout=120) == 0
    finally:
        if process.poll() is None:
            process.kill()
    stderr = terminal.text()
    assert_nbest_lists(parse_nbest(stdout), search_nbest(setup["model_dir"], beam_size=3,
                                                         extra_length=6), 3)
    # Which checkpoint (the run has no averaged or best one) and the search settings.
    assert (f"translate: {os.path.join(setup['model_dir'], 'ckpt-1')} (latest; the default: averaged, "
            "else ema, else best, else latest), beam 3, alpha 0.6, extra length 6") in stderr
    assert re.search(r"\d+/Unknown", stderr), stderr  # the counter (a pipe's length is unknown)
    assert f"line(s) {TRUNCATED_LINE}." in stderr and "Traceback" not in stderr, stderr
    # More hypotheses than the beam holds: refused before anything is loaded.
    assert_clean_error(run("translate", f"--model_dir={setup['model_dir']}", "--text=Hello.",
                           "--n_best=3", "--beam_size=2"), "--n_best=3 exceeds --beam_size=2")


def test_alignments_are_the_in_memory_translators_word_pairs_of_each_translation(setup,
                                                                                  checkpoint_output):
    from keras_transformer import inference

    # the first of the tiny model's two decoder layers, counted from the last
    code, stdout, stderr = run("translate", f"--model_dir={setup['model_dir']}", "--alignments",
                               f"--input={setup['input']}", "--show_scores", "--batch_size=2",
                               "--beam_size=2", "--extra_length=6", "--alignment_layer=-2")
    assert code == 0, stderr
    rows = [line.split("\t") for line in stdout.decode("utf-8").split("\n")[:-1]]
    want = parse(checkpoint_output[0])  # the same translations and scores as without alignments
    assert [text for _, text, _ in rows] == [text for _, text in want]
    assert [float(score) for score, _, _ in rows] == pytest.approx([s for s, _ in want], abs=2e-4)
    translator = run_translator(setup["model_dir"], **BEAM)
    lines = [line for line in LINES if line.strip()]
    translations = [text for line, (_, text) in zip(LINES, want) if line.strip()]
    # (this untrained model's translations are too short for the layers' word pairs to differ;
    # their attention does, and the error below shows the flag's value reaching the layer choice)
    assert not np.allclose(*(translator.align_function(layer)(lines, translations)["attention"]
                             for layer in (0, -1)))
    expected = iter(inference.align_in_batches(translator.align_function(0), lines, translations))
    for line, (_, text, alignment) in zip(LINES, rows):
        if not line.strip():
            assert (text, alignment) == ("", "")
            continue
        assert alignment == next(expected)
        pairs = [tuple(map(int, link.split("-"))) for link in alignment.split()]
        # at most one pair per whitespace word of the translation, in order, each to a source
        # word (a word of characters the vocabulary drops, as this untrained model's U+FFFD, has
        # none)
        targets = [target for _, target in pairs]
        assert targets == sorted(set(targets)) and all(t < len(text.split()) for t in targets)
        assert all(0 <= source < len(line.split()) for source, _ in pairs)
        assert pairs or "\ufffd" in text
    # With --n_best, the search's lists, each hypothesis with its own alignment.
    code, stdout, stderr = run("translate", f"--model_dir={setup['model_dir']}", "--alignments",
                               f"--input={setup['input']}", "--n_best=2", "--batch_size=2",
                               "--beam_size=2", "--extra_length=6", "--alignment_layer=-2")
    assert code == 0, stderr
    rows = [line.split("\t") for line in stdout.decode("utf-8").split("\n")[:-1]]
    assert {len(row) for row in rows} == {4}
    nbest = search_nbest(setup["model_dir"], **BEAM)
    assert_nbest_lists(parse_nbest("".join(f"{i}\t{s}\t{t}\n" for i, s, t, _ in rows).encode()),
                       nbest, 2)
    hypotheses = [(line, text) for line in lines for text in nbest[line][0][:2]]
    expected = iter(inference.align_in_batches(translator.align_function(0),
                                               *zip(*hypotheses)))
    for index, _, _, alignment in rows:
        assert alignment == (next(expected) if LINES[int(index)].strip() else "")
    assert next(expected, None) is None
    assert_clean_error(run("translate", f"--model_dir={setup['model_dir']}",
                           "--alignment_layer=0", "--text=Hello."),
                       "--alignment_layer: only with --alignments")
    code, _, stderr = run("translate", f"--model_dir={setup['model_dir']}", "--alignments",
                          "--alignment_layer=2", "--text=Hello.")
    assert code == 2 and stderr.strip().splitlines()[-1] == (
        "translate: error: --alignment_layer=2: the model has 2 decoder layers (0 to 1, or "
        "counted from the last, -1 to -2).")


def test_an_export_older_than_its_align_signature_aligns_by_its_model_rebuilt_here(
        setup, checkpoint_output, exported, tmp_path):
    """(An export's own align signature is tested with its n-best lists above.)"""
    from keras_transformer import inference
    from keras_transformer.weights import exported_version_path

    export_dir, _, _ = exported
    export = exported_version_path(os.path.join(export_dir, "tiny"))
    older = str(tmp_path / "older" / "1")
    loaded = tf.saved_model.load(export)
    tf.saved_model.save(loaded, older, signatures={name: function for name, function
                                                   in loaded.signatures.items()
                                                   if name != inference.ALIGN_SIGNATURE})
    shutil.copytree(os.path.join(export, "assets"), os.path.join(older, "assets"),
                    dirs_exist_ok=True)
    code, stdout, stderr = run("translate", f"--saved_model={older}", "--alignments",
                               f"--input={setup['input']}", "--show_scores", "--batch_size=2")
    assert code == 0, stderr
    assert "rebuilt here from its weights: beam 2, alpha 0.6, extra length 6" in stderr
    rows = [line.split("\t") for line in stdout.decode("utf-8").split("\n")[:-1]]
    want = parse(checkpoint_output[0])
    assert [text for _, text, _ in rows] == [text for _, text in want]
    lines = [line for line in LINES if line.strip()]
    translations = [text for line, (_, text) in zip(LINES, want) if line.strip()]
    translator = run_translator(setup["model_dir"], **BEAM)
    assert [alignment for line, (_, _, alignment) in zip(LINES, rows) if line.strip()] == \
        inference.align_in_batches(translator.align_function(), lines, translations)


# --- sampling and ensembles (issue 34) -------------------------------------------------------------


def test_sampling_flags_are_checked_in_one_line_each(setup, old_export):
    """Refused before anything is loaded: a nucleus outside (0, 1], an n-best list of samples,
    an ensemble export; sampling an export whose assets do not describe its model."""
    model_dir = f"--model_dir={setup['model_dir']}"
    for args, line in [
        (["--sampling_topp=1.5"], "translate: error: flag --sampling_topp=1.5: must be in (0, 1]"),
        (["--sampling_topp=0"], "translate: error: flag --sampling_topp=0.0: must be in (0, 1]"),
        (["--n_best=2", "--sampling_topk=5"],
         "translate: error: --n_best=2 with --sampling_topk: sampling draws one translation"),
    ]:
        code, stdout, stderr = run("translate", model_dir, "--text=Hello.", *args)
        assert code == 2 and stdout == b"" and "Traceback" not in stderr, stderr
        errors = [text for text in stderr.splitlines() if text.startswith("translate:")]
        assert len(errors) == 1 and errors[0].startswith(line), stderr
    # Sampling rebuilds an export's model from what its assets record: one line where they do not.
    code, stdout, stderr = run("translate", f"--saved_model={old_export}", "--seed=3", "--text=Hello.")
    assert code == 1 and stdout == b"" and "Traceback" not in stderr, stderr
    assert [line for line in stderr.splitlines() if line.startswith("translate:")] == [
        f"translate: error: {os.path.join(old_export, '1')}/assets/config.json: no model "
        "configuration (not a SavedModel of this project's export)"], stderr
    assert_clean_error(run("export", f"--model_dir={setup['model_dir']},{setup['model_dir']}",
                           f"--export_dir={setup['base'] / 'never'}"),
                       "an ensemble cannot be exported")


def test_sampling_at_top_k_one_is_the_greedy_search(setup):
    translator = run_translator(setup["model_dir"], **BEAM)
    lines = [line for line in LINES if line.strip()]
    source_ids, _, _ = translator.source_ids(tf.constant(lines))
    greedy = translator.search(source_ids, greedy=True)
    texts = translator.tokenizer.detokenize(greedy.ids).numpy()
    code, stdout, stderr = run("translate", f"--model_dir={setup['model_dir']}", "--sampling_topk=1",
                               "--seed=9", f"--input={setup['input']}", "--show_scores", "--alpha=0.6",
                               "--extra_length=6")
    assert code == 0, stderr
    assert "sampling (top-k 1, top-p 1, temperature 1, seed 9)" in stderr
    rows = [row for line, row in zip(LINES, parse(stdout)) if line.strip()]
    assert [text for _, text in rows] == [t.decode().replace("\n", " ") for t in texts]
    assert [score for score, _ in rows] == pytest.approx(greedy.scores.numpy().tolist(), abs=2e-4)


@pytest.mark.slow
def test_an_ensemble_of_a_run_with_itself_translates_and_evaluates_as_the_run(setup, checkpoint_output):
    twice = f"{setup['model_dir']},{setup['model_dir']}"
    output = str(setup["base"] / "ensemble.txt")
    code, _, stderr = run("translate", f"--model_dir={twice}", f"--input={setup['input']}",
                          f"--output={output}", "--batch_size=2", "--show_scores", "--beam_size=2",
                          "--extra_length=6")
    assert code == 0, stderr
    checkpoint = os.path.join(setup["model_dir"], "ckpt-1")
    assert f"translate: an ensemble of 2 runs: {checkpoint} (latest; " in stderr
    with open(output, "rb") as stream:
        rows, want = parse(stream.read()), parse(checkpoint_output[0])
    assert [text for _, text in rows] == [text for _, text in want]
    assert [score for score, _ in rows] == pytest.approx([score for score, _ in want], abs=2e-4)

    pairs = setup["base"] / "pairs.tsv"
    pairs.write_text("A dog runs.\tEin Hund rennt.\nDas ist Satz 5.\tDas ist Satz 5.\n")
    code, stdout, stderr = run("evaluate", f"--model_dir={twice}", "--dataset=files",
                               f"--train_data={pairs}", f"--test_data={pairs}", "--beam_size=2",
                               "--extra_length=6")
    assert code == 0, stderr
    assert f"evaluate: an ensemble of 2 runs: {checkpoint} (latest; " in stdout.decode()


def test_an_ensemble_of_runs_with_different_vocabularies_is_one_line(setup, tmp_path):
    """Another vocabulary size (the command), or the same size with other pieces (the library)."""
    from keras_transformer.runs import load_ensemble

    runs_made = {}
    for name, size, text in [("smaller", 304, SENTENCES), ("reworded", 320, ["Ein ganz anderer Text."])]:
        tokenizer = SubwordTokenizer.learn(
            [f"{s} {i}" for i in range(40) for s in text] + [f"Das ist Satz {i}." for i in range(80)],
            vocab_size=size, out_path=str(tmp_path / f"{name}.model"))
        assert tokenizer.vocab_size == size
        config = kt.TransformerConfig.from_preset("tiny", vocab_size=size, max_length=24)
        trainer = Trainer(config, TrainingConfig(model_dir=str(tmp_path / name), train_steps=1),
                          run_info={"vocab_path": tokenizer.path})
        trainer._write_run_config()
        trainer.checkpointer.save(1)
        runs_made[name] = str(tmp_path / name)
    code, stdout, stderr = run("translate", f"--model_dir={setup['model_dir']},{runs_made['smaller']}",
                               "--text=Hello.")
    assert code == 1 and stdout == b"" and "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("translate:")]
    assert errors == [f"translate: error: the runs {setup['model_dir']} and {runs_made['smaller']} "
                      "do not share a vocabulary (320 and 304 subwords): an ensemble's runs must be "
                      "trained with the same one."], stderr
    with pytest.raises(ValueError, match=f"the runs {setup['model_dir']} and "
                                         f"{runs_made['reworded']} do not share a vocabulary "
                                         r"\(\d+ of their 320 subwords differ, the first at id"):
        load_ensemble([setup["model_dir"], runs_made["reworded"]])


# --- several models named either way: comma-separated or the flag repeated ---------------------------

def test_a_repeated_saved_model_is_the_comma_separated_ensemble(exported):
    """`--saved_model=A --saved_model=B` is `--saved_model=A,B` (absl's string flag kept only the
    last, silently: one model, no ensemble); export, which takes one model, refuses both forms in
    one line rather than keep the last. A is the module's export of the tiny run (its base folder:
    the highest version, the text export however the test above renamed it)."""
    tiny = os.path.join(exported[0], "tiny")
    outputs = []
    for args in ([f"--saved_model={tiny},{tiny}"],
                 [f"--saved_model={tiny}", f"--saved_model={tiny}"]):
        code, stdout, stderr = run("translate", *args, "--text=Hello.", "--text=Good morning.",
                                   "--show_scores", "--beam_size=2", "--extra_length=6")
        assert code == 0, stderr
        assert "translate: an ensemble of 2 SavedModels: " in stderr, stderr
        outputs.append(parse(stdout))
    assert len(outputs[1]) == 2
    assert [text for _, text in outputs[1]] == [text for _, text in outputs[0]]
    assert [score for score, _ in outputs[1]] == pytest.approx([s for s, _ in outputs[0]], abs=1e-4)
    assert_clean_error(run("export", f"--saved_model={tiny}", f"--saved_model={tiny}",
                           "--export_dir=never"),
                       "an ensemble cannot be exported")


def test_a_repeated_model_dir_is_the_comma_separated_ensemble_each_with_the_checkpoint(setup):
    """`--model_dir=A --model_dir=A --checkpoint=ckpt-1`: the ensemble `--model_dir=A,A` names,
    --checkpoint taken by each run; export refuses it as it refuses the comma-separated one."""
    checkpoint = os.path.join(setup["model_dir"], "ckpt-1")
    outputs = []
    for args in ([f"--model_dir={setup['model_dir']},{setup['model_dir']}"],
                 [f"--model_dir={setup['model_dir']}", f"--model_dir={setup['model_dir']}"]):
        code, stdout, stderr = run("translate", *args, "--checkpoint=ckpt-1", "--text=A dog runs.",
                                   "--text=Das ist Satz 5.", "--show_scores", "--beam_size=2",
                                   "--extra_length=6")
        assert code == 0, stderr
        assert (f"translate: an ensemble of 2 runs: {checkpoint} (--checkpoint=ckpt-1), "
                f"{checkpoint} (--checkpoint=ckpt-1), beam 2") in stderr, stderr
        outputs.append(parse(stdout))
    assert outputs[1] == outputs[0] and len(outputs[0]) == 2
    assert_clean_error(run("export", f"--model_dir={setup['model_dir']}",
                           f"--model_dir={setup['model_dir']}", f"--export_dir={setup['base'] / 'never'}"),
                       "an ensemble cannot be exported")
