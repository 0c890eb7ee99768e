"""--export_best (export/best.py): on a scripted dev-BLEU sequence exactly one complete export is
left, the best one, with that evaluation's weights; a resumed run beats the best it exported
before; a SIGKILL in the middle of an export leaves the previous best intact."""

import json
import os
import signal
import subprocess
import sys
import types

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import runs
from keras_transformer.export import ExportBest
from keras_transformer.export.common import recorded_settings, recorded_weights
from keras_transformer.inference import load_exported_translate_fn
from test_inference import SENTENCES, SIGNATURE_FUNCTIONS, count_traces, small_translator

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run_folder(translator, model_dir):
    """What a training run leaves for ExportBest: its vocabulary and config.json."""
    os.makedirs(model_dir, exist_ok=True)
    with open(os.path.join(model_dir, runs.VOCABULARY_FILE), "wb") as stream:
        stream.write(translator.tokenizer.model_proto)
    runs.write_json(os.path.join(model_dir, runs.CONFIG_FILE),
                    {"model": translator.model.config.to_dict()})
    return types.SimpleNamespace(model=translator.model, chief=True,
                                 config=types.SimpleNamespace(model_dir=model_dir))


def started(trainer, step=0):
    callback = ExportBest(trainer_decoding())
    callback.trainer = trainer
    callback.on_begin(step)
    return callback


def trainer_decoding():
    from keras_transformer.inference import DecodingConfig

    return DecodingConfig(beam_size=2, extra_length=6)


def versions(model_dir):
    """The version folders (what TF Serving would load) of the two exports."""
    return {base: sorted(name for name in os.listdir(os.path.join(model_dir, base))
                         if name.isdigit())
            for base in (runs.BEST_EXPORT, f"{runs.BEST_EXPORT}_ids")}


def leftovers(model_dir):
    return [name for base in (model_dir, os.path.join(model_dir, runs.BEST_EXPORT),
                              os.path.join(model_dir, f"{runs.BEST_EXPORT}_ids"))
            for name in os.listdir(base) if name.startswith(".tmp-")]


def translations(translate_fn):
    out = translate_fn(tf.constant(SENTENCES))["translations"].numpy()
    return [t.decode() for t in out]


def perturb(model, seed):
    embedding = model.target_embedding.embeddings
    embedding.assign(embedding.numpy()
                     + np.random.default_rng(seed).normal(size=embedding.shape) * 0.5)


@pytest.fixture(scope="module")
def translator():
    return small_translator(beam_size=2)


@pytest.mark.slow
def test_exactly_one_export_is_left_the_best_with_its_weights(translator, tmp_path, monkeypatch):
    """A run traces the signatures at its first export only: the later exports write the same
    traced functions, which read the weights of their own step."""
    model_dir = str(tmp_path / "run")
    trainer = run_folder(translator, model_dir)
    traces = count_traces(monkeypatch, ignored=translator)
    callback = started(trainer)
    script = {2: 1.0, 4: 3.0, 6: 2.0, 8: 5.0, 10: 4.0}
    best_translations = None
    for step, bleu in script.items():
        perturb(translator.model, step)
        logs = {"bleu": bleu}
        callback.on_dev(step, logs)
        assert ("exported" in logs) == (step in (2, 4, 8))
        if step == 8:
            best_translations = translations(translator.text_function())
    assert versions(model_dir) == {runs.BEST_EXPORT: ["8"], f"{runs.BEST_EXPORT}_ids": ["8"]}
    assert not leftovers(model_dir)
    assert traces == {name: 1 for name in SIGNATURE_FUNCTIONS}  # three exports, one trace each
    # The export translates as the model did at step 8, not with the later weights.
    translate_fn, path = load_exported_translate_fn(os.path.join(model_dir, runs.BEST_EXPORT))
    assert path.endswith(os.path.join(runs.BEST_EXPORT, "8"))
    assert translations(translate_fn) == best_translations
    assert translations(translator.text_function()) != best_translations
    assert recorded_settings(path)["selected"] == {"step": 8, "dev_bleu": 5.0}
    assert recorded_weights(path) == "step 8, dev BLEU 5.00"  # the trainer's own model: no checkpoint

    # A resumed run knows the best it exported: a lower score exports nothing, a higher one
    # replaces it.
    again = started(trainer, step=10)
    assert again.best == 5.0
    logs = {"bleu": 4.5}
    again.on_dev(12, logs)
    assert "exported" not in logs and versions(model_dir)[runs.BEST_EXPORT] == ["8"]
    again.on_dev(14, {"bleu": float("nan")})  # a failed dev BLEU is no improvement
    again.on_dev(16, {"bleu": 6.0})
    assert versions(model_dir) == {runs.BEST_EXPORT: ["16"], f"{runs.BEST_EXPORT}_ids": ["16"]}
    assert traces == {name: 2 for name in SIGNATURE_FUNCTIONS}  # the resumed run's own


def test_without_dev_bleu_it_is_a_clear_error(translator, tmp_path):
    callback = started(run_folder(translator, str(tmp_path)))
    with pytest.raises(ValueError, match="export_best needs the dev BLEU"):
        callback.on_dev(2, {"loss": 1.0})


CHILD = """
import os, signal, sys
sys.path.insert(0, {here!r})
import test_export_best as t
from keras_transformer.export import saved_model

translator = t.small_translator(beam_size=2)
callback = t.started(t.run_folder(translator, {model_dir!r}))
callback.on_dev(2, {{"bleu": 1.0}})
write = saved_model._write_saved_model

def killed(translator, traced, output, sources):
    write(translator, traced, output, sources)  # the first of the pair is complete
    if saved_model.TEXT_SIGNATURE not in traced:
        os.kill(os.getpid(), signal.SIGKILL)

saved_model._write_saved_model = killed
t.perturb(translator.model, 4)
callback.on_dev(4, {{"bleu": 2.0}})
"""


@pytest.mark.slow
def test_a_sigkill_during_an_export_leaves_the_previous_best_intact(translator, tmp_path,
                                                                   system_temporary):
    model_dir = str(tmp_path / "run")
    # Killed, the child cannot remove its temporary files (autograph's code): a folder of the
    # test's own takes them.
    child = subprocess.run([sys.executable, "-c", CHILD.format(here=HERE, model_dir=model_dir)],
                           cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT,
                                              TMPDIR=str(system_temporary)),
                           capture_output=True, text=True, timeout=300)
    assert child.returncode == -signal.SIGKILL, child.stderr[-3000:]
    # The step-2 export is whole and the only version; step 4's is a temporary leftover.
    assert versions(model_dir) == {runs.BEST_EXPORT: ["2"], f"{runs.BEST_EXPORT}_ids": ["2"]}
    assert leftovers(model_dir)
    translate_fn, path = load_exported_translate_fn(os.path.join(model_dir, runs.BEST_EXPORT))
    assert path.endswith(os.path.join(runs.BEST_EXPORT, "2"))
    assert len(translations(translate_fn)) == len(SENTENCES)
    with open(os.path.join(path, "assets", "config.json")) as stream:
        assert json.load(stream)["selected"]["step"] == 2

    # The next run's next best export clears what the killed one left.
    callback = started(run_folder(translator, model_dir), step=4)
    assert callback.best == 1.0
    callback.on_dev(6, {"bleu": 3.0})
    assert versions(model_dir) == {runs.BEST_EXPORT: ["6"], f"{runs.BEST_EXPORT}_ids": ["6"]}
    assert not leftovers(model_dir)


def test_a_failed_export_is_reported_and_training_goes_on(translator, tmp_path, monkeypatch,
                                                          caplog):
    from keras_transformer.export import best

    def full_disk(*args, **kwargs):
        raise ValueError("writing the export failed: No space left on device\n(second line)")

    callback = started(run_folder(translator, str(tmp_path)))
    monkeypatch.setattr(best, "export_for_serving", full_disk)
    logs = {"bleu": 3.0}
    with caplog.at_level("WARNING"):
        callback.on_dev(2, logs)
    assert "exported" not in logs and callback.best is None  # the next improvement tries again
    assert ("export of the best dev BLEU failed at step 2 (training goes on; the previous export "
            "is kept): writing the export failed: No space left on device") in caplog.text
    assert "second line" not in caplog.text


def test_wmt_refuses_export_best_without_dev_bleu_in_one_line(tmp_path):
    (tmp_path / "train.tsv").write_text("Good morning.\tGuten Morgen.\n", encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "trainers.wmt", "--dataset=files",
         f"--train_data={tmp_path / 'train.tsv'}", f"--model_dir={tmp_path / 'run'}",
         "--export_best", "--dev_bleu_sentences=0"],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True,
        timeout=120)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == (
        "wmt: error: --export_best exports on the best dev BLEU: it needs --dev_bleu_sentences > 0.")
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists() or not os.listdir(tmp_path / "run")
