"""trainers.translate and trainers.export as a user runs them: on a training run's model_dir written by
the trainer itself, checkpoint mode, export, SavedModel mode and the in-memory Translator agree, input
order and empty lines survive batching, and bad input gets a one-line error, not a traceback."""

import json
import os
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.inference import DecodingConfig, Translator
from keras_transformer.tokenizer import SubwordTokenizer
from keras_transformer.training import Trainer, TrainingConfig

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
    assert "6/6" in stderr  # the progress bar (on stderr: stdout may carry translations)
    assert "Traceback" not in stderr


def test_export_then_saved_model_mode_gives_identical_output(setup, checkpoint_output):
    export_dir = str(setup["base"] / "saved_models")
    code, stdout, stderr = run("export", f"--model_dir={setup['model_dir']}", f"--export_dir={export_dir}",
                               "--name=tiny", "--beam_size=2", "--extra_length=6")
    assert code == 0, stderr
    printed = stdout.decode()
    assert os.path.join(export_dir, "tiny", "1") in printed.splitlines()
    assert os.path.join(export_dir, "tiny_ids", "1") in printed.splitlines()
    assert (f"tensorflow_model_server --rest_api_port=8501 --model_name=tiny "
            f"--model_base_path={os.path.join(export_dir, 'tiny')}") in printed
    assert "curl -s -X POST http://localhost:8501/v1/models/tiny:predict" in printed

    # The base folder: its highest version is used; the lines come from stdin this time.
    os.rename(os.path.join(export_dir, "tiny", "1"), os.path.join(export_dir, "tiny", "7"))
    shutil.copytree(os.path.join(export_dir, "tiny_ids", "1"), os.path.join(export_dir, "tiny", "3"))
    code, stdout, stderr = run("translate", f"--saved_model={os.path.join(export_dir, 'tiny')}",
                               "--batch_size=2", "--show_scores", stdin=b"\n".join(LINES) + b"\n")
    assert code == 0, stderr
    assert os.path.join(export_dir, "tiny", "7") in stderr
    assert stdout == checkpoint_output[0]

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
    with pytest.raises(ValueError, match="ckpt-9' not found"):
        load_translator(str(moved), str(moved / "ckpt-9"))
