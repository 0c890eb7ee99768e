"""Dev BLEU during training: the numbers in the logs are sacreBLEU and chrF of the model's own
translations (and TensorBoard records both), and keep_best keeps the weights of the best
evaluation."""

import json
import os
import types

import numpy as np
import pytest
import sacrebleu
import tensorflow as tf

from keras_transformer.evaluation import sacrebleu_score
from keras_transformer.training.callbacks import TensorBoard
from keras_transformer.training.dev_bleu import BEST_PREFIX, DevBleu
from keras_transformer.weights import restore_model
from test_inference import SENTENCES, count_traces, small_translator


@pytest.fixture(scope="module")
def translator():
    return small_translator(beam_size=2)


def fake_trainer(translator, model_dir):
    """What DevBleu uses of a Trainer: its model, model_dir and whether it is the chief."""
    return types.SimpleNamespace(model=translator.model, chief=True,
                                 config=types.SimpleNamespace(model_dir=model_dir))


def test_logs_the_sacrebleu_of_the_current_weights_and_keeps_the_best(translator, tmp_path,
                                                                      monkeypatch):
    def hypotheses():
        out = translator.translate_text(tf.constant(SENTENCES))["translations"].numpy()
        return [t.decode() for t in out]

    references = hypotheses()  # the current weights translate the dev subset perfectly
    assert all(references)
    callback = DevBleu(translator.tokenizer, SENTENCES, references, translator.decoding, keep_best=True)
    callback.trainer = fake_trainer(translator, str(tmp_path))
    traces = count_traces(monkeypatch, ignored=translator)
    board = TensorBoard(str(tmp_path / "board"))  # after DevBleu, as train_run places it
    logs = {}
    callback.on_dev(10, logs)
    board.on_dev(10, logs)
    assert logs["bleu"] == pytest.approx(100.0) and logs["chrf"] == pytest.approx(100.0)
    best_weights = [w.numpy().copy() for w in translator.model.variables]

    embedding = translator.model.target_embedding.embeddings
    embedding.assign(embedding.numpy() + np.random.default_rng(0).normal(size=embedding.shape) * 0.5)
    logs = {}
    callback.on_dev(20, logs)  # the traced translate function sees the new weights
    board.on_dev(20, logs)
    board.on_end({})
    assert traces["translate_text"] == 1  # one translation function for every evaluation
    assert logs["bleu"] == pytest.approx(sacrebleu_score(hypotheses(), references).score)
    assert logs["bleu"] < 100.0
    expected_chrf = sacrebleu.corpus_chrf(hypotheses(), [references]).score
    assert logs["chrf"] == pytest.approx(expected_chrf) and expected_chrf < 100.0
    assert dev_scalars(tmp_path / "board" / "dev", "chrf") == pytest.approx(
        {10: 100.0, 20: expected_chrf})
    assert dev_scalars(tmp_path / "board" / "dev", "bleu") == pytest.approx(
        {10: 100.0, 20: logs["bleu"]})
    with open(tmp_path / "best" / "best.json") as f:
        assert json.load(f)["step"] == 10  # a worse evaluation does not replace the best
    restored = small_translator(beam_size=2).model
    restore_model(restored, os.path.join(str(tmp_path), BEST_PREFIX))
    for variable, expected in zip(restored.variables, best_weights):
        np.testing.assert_array_equal(variable.numpy(), expected)


def dev_scalars(folder, tag):
    """{step: value} of one TensorBoard scalar, read without the tensorboard package."""
    return {event.step: float(tf.make_ndarray(value.tensor))
            for name in os.listdir(folder)
            for event in tf.compat.v1.train.summary_iterator(str(folder / name))
            for value in event.summary.value if value.tag == tag}


def test_mismatched_subset_is_refused(translator):
    with pytest.raises(ValueError, match="as many references as sources"):
        DevBleu(translator.tokenizer, SENTENCES, SENTENCES[:1])


def test_a_failing_evaluation_is_reported_and_training_goes_on(translator, tmp_path, caplog):
    callback = DevBleu(translator.tokenizer, SENTENCES, SENTENCES, translator.decoding)
    callback.trainer = fake_trainer(translator, str(tmp_path))

    def broken(texts):
        raise ValueError("Tensor conversion requested dtype string for Tensor with dtype int32\n"
                         "  (second line of the message)")

    callback._translate_fn = lambda: broken
    logs = {}
    with caplog.at_level("WARNING"):
        callback.on_dev(1000, logs)
    assert np.isnan(logs["bleu"]) and np.isnan(logs["chrf"])
    assert "dev BLEU failed at step 1000 (training goes on): ValueError: Tensor conversion" in (
        caplog.text)
    assert "second line" not in caplog.text


def test_a_sigterm_while_the_best_is_written_leaves_the_weights_and_their_record_together(
        tmp_path, monkeypatch):
    """best/ckpt and best/best.json are moved in by one signal-deferred region: a SIGTERM that
    arrives as the checkpoint lands still finds best.json naming that checkpoint's step."""
    import signal

    from keras_transformer import signals

    # Its own translator: building one seeds TensorFlow, and tf.random.set_seed deletes the
    # SentencePiece resources of tokenizers built before (the module's, after the first test).
    translator = small_translator(beam_size=2)
    references = [t.decode() for t in
                  translator.translate_text(tf.constant(SENTENCES))["translations"].numpy()]
    callback = DevBleu(translator.tokenizer, SENTENCES, references, translator.decoding, keep_best=True)
    callback.trainer = fake_trainer(translator, str(tmp_path))
    rename = tf.io.gfile.rename

    def rename_then_sigterm(source, target, overwrite=False):
        rename(source, target, overwrite=overwrite)
        if target.endswith(".index"):
            os.kill(os.getpid(), signal.SIGTERM)

    # As a program would (signals.install), undone afterwards: handlers, and the flag that tells
    # later library calls (Trainer.fit) that a program has installed them.
    previous = {signum: signal.getsignal(signum) for signum in signals.HANDLED}
    monkeypatch.setattr(signals, "_installed", signals._installed)
    signals.install()
    try:
        monkeypatch.setattr(tf.io.gfile, "rename", rename_then_sigterm)
        with pytest.raises(signals.Interrupted):
            callback.on_dev(10, {})
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        signals.reset()
    with open(tmp_path / "best" / "best.json") as f:
        assert json.load(f)["step"] == 10
    restored = small_translator(beam_size=2).model
    restore_model(restored, os.path.join(str(tmp_path), BEST_PREFIX))
    for variable, expected in zip(restored.variables, translator.model.variables):
        np.testing.assert_array_equal(variable.numpy(), expected.numpy())
    assert sorted(os.listdir(tmp_path / "best")) == ["best.json", "ckpt.data-00000-of-00001",
                                                     "ckpt.index"]


def test_a_resumed_run_keeps_the_best_of_its_earlier_runs(tmp_path):
    translator = small_translator(beam_size=2)  # its own: see the test above
    references = ["Eine ganz andere Übersetzung."] * len(SENTENCES)
    callback = DevBleu(translator.tokenizer, SENTENCES, references, translator.decoding, keep_best=True)
    callback.trainer = fake_trainer(translator, str(tmp_path))
    callback.on_begin(0)
    callback.on_dev(10, {})
    first = json.loads((tmp_path / "best" / "best.json").read_text())
    assert first["step"] == 10
    # The earlier run's best was higher than what the resumed run reaches: it stays.
    (tmp_path / "best" / "best.json").write_text(json.dumps({**first, "bleu": first["bleu"] + 50}))
    resumed = DevBleu(translator.tokenizer, SENTENCES, references, translator.decoding, keep_best=True)
    resumed.trainer = fake_trainer(translator, str(tmp_path))
    resumed.on_begin(10)
    assert resumed.best == first["bleu"] + 50
    resumed.on_dev(20, {})
    assert json.loads((tmp_path / "best" / "best.json").read_text())["step"] == 10
