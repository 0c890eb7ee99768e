"""The exponential moving average of the weights (--ema_decay, training/ema.py): the optimizer's
average is the NumPy EMA of the weights the updates produced, the dev set is evaluated with it, it
is written as MODEL_DIR/ema/ckpt, and a SIGTERM and resume give the uninterrupted run's average."""

import os
import signal
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer import runs
from keras_transformer.training import Callback, Trainer, TrainingConfig
from keras_transformer.training.ema import moving_average_weights, moving_averages
from keras_transformer.weights import restore_model
from toy import one_batch_fn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# No dropout: a resumed run then makes exactly the updates of an uninterrupted one.
TINY = kt.TransformerConfig.from_preset("tiny", vocab_size=16, dropout_rate=0.0)


batches = one_batch_fn(0)
dev_batches = one_batch_fn(1, repeat=False)


def config(model_dir, **overrides):
    values = dict(model_dir=str(model_dir), train_steps=5, warmup_steps=2, log_every_steps=1,
                  checkpoint_every_minutes=None, ema_decay=0.8)
    values.update(overrides)
    return TrainingConfig(**values)


def weights(variables):
    return [np.array(v.numpy(), np.float64) for v in variables]


class Watcher(Callback):
    """The weights after every update, and what the model holds while the dev set is evaluated
    (with the optimizer's averages of that moment beside it)."""

    def __init__(self, action=None):
        self.after_step, self.at_dev, self.action = [], [], action

    def on_log(self, step, logs):
        self.after_step.append(weights(self.trainer.model.trainable_variables))
        if self.action:
            self.action(step)

    def on_dev(self, step, logs):
        self.at_dev.append((weights(self.trainer.model.trainable_variables),
                            weights(moving_averages(self.trainer.optimizer))))


def numpy_ema(sequence, decay):
    """The first update's weights, then average = decay * average + (1 - decay) * weights."""
    average = sequence[0]
    for step_weights in sequence[1:]:
        average = [decay * a + (1.0 - decay) * w for a, w in zip(average, step_weights)]
    return average


def assert_close(actual, expected, atol=1e-6):
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=atol)


def test_the_average_is_the_numpy_ema_of_the_weights_over_five_steps(tmp_path):
    keras.utils.set_random_seed(1)
    watcher = Watcher()
    trainer = Trainer(TINY, config(tmp_path))
    summary = trainer.fit(batches, dev_batches, callbacks=[watcher])
    assert len(watcher.after_step) == 5
    expected = numpy_ema(watcher.after_step, 0.8)
    assert_close(weights(moving_averages(trainer.optimizer)), expected)
    # The average is not trivially the last weights: the updates moved them.
    assert max(np.abs(e - w).max() for e, w in zip(expected, watcher.after_step[-1])) > 1e-4

    # The dev set saw the average, and training goes on with the model's own weights.
    (dev_weights, averages_then), = watcher.at_dev
    assert_close(dev_weights, averages_then)
    assert_close(weights(trainer.model.trainable_variables), watcher.after_step[-1], atol=0)

    # MODEL_DIR/ema/ckpt holds the average (the model's other variables as they are), and is
    # what --checkpoint=ema and the default choice load.
    assert summary["ema_checkpoint"] == os.path.join(str(tmp_path), runs.EMA_PREFIX)
    assert runs.resolve_checkpoint(str(tmp_path), runs.EMA) == summary["ema_checkpoint"]
    assert runs.default_checkpoint(str(tmp_path)) == (runs.EMA, summary["ema_checkpoint"])
    restored = kt.Transformer(TINY)
    restored((tf.ones([1, 2], tf.int32),) * 2)
    restore_model(restored, summary["ema_checkpoint"])
    assert_close(weights(restored.trainable_variables), expected)


def test_sigterm_and_resume_keep_the_uninterrupted_average(tmp_path):
    keras.utils.set_random_seed(1)
    straight = Trainer(TINY, config(tmp_path / "straight", train_steps=6))
    straight.fit(batches)

    def preempt(step):
        if step == 2:
            os.kill(os.getpid(), signal.SIGTERM)

    keras.utils.set_random_seed(1)
    first = Trainer(TINY, config(tmp_path / "resumed", train_steps=6))
    summary = first.fit(batches, callbacks=[Watcher(preempt)])
    assert summary["stop_reason"] == "sigterm" and summary["steps"] == 3
    assert summary["ema_checkpoint"] is None  # the final stages are skipped on a signal
    keras.utils.set_random_seed(2)  # the restore, not the seed, must give the state back
    second = Trainer(TINY, config(tmp_path / "resumed", train_steps=6))
    resumed = second.fit(batches)
    assert resumed["start_step"] == 3 and resumed["steps"] == 6

    assert_close(weights(moving_averages(second.optimizer)),
                 weights(moving_averages(straight.optimizer)))
    assert_close(weights(second.model.trainable_variables),
                 weights(straight.model.trainable_variables))


def test_the_weights_come_back_after_an_error_inside_the_block(tmp_path):
    trainer = Trainer(TINY, config(tmp_path, train_steps=2))
    trainer.fit(batches)
    own = weights(trainer.model.trainable_variables)
    with pytest.raises(RuntimeError, match="inside"):
        with moving_average_weights(trainer.model, trainer.optimizer):
            assert_close(weights(trainer.model.trainable_variables),
                         weights(moving_averages(trainer.optimizer)))
            raise RuntimeError("inside")
    assert_close(weights(trainer.model.trainable_variables), own, atol=0)


@pytest.mark.parametrize("decay", [0.0, 1.0, 1.5, -0.1, True, "0.9"])
def test_a_decay_outside_0_1_is_a_clear_error(tmp_path, decay):
    with pytest.raises(ValueError, match=r"ema_decay must be a number in \(0, 1\)"):
        config(tmp_path, ema_decay=decay)


def test_wmt_refuses_a_decay_outside_0_1_in_one_line():
    result = subprocess.run(
        [sys.executable, "-m", "trainers.wmt", "--dataset=ding_de_en", "--ema_decay=1"],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True,
        timeout=120)
    assert result.returncode != 0
    assert "--ema_decay must be in (0, 1), e.g. 0.999" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("first,then", [(None, 0.9), (0.9, None)])
def test_switching_the_average_on_or_off_on_resume_is_a_clear_error(tmp_path, first, then):
    # The averages are optimizer variables: a restore across the switch would mix them up.
    Trainer(TINY, config(tmp_path, train_steps=2, ema_decay=first)).fit(batches)
    with pytest.raises(ValueError) as error:
        Trainer(TINY, config(tmp_path, train_steps=4, ema_decay=then)).fit(batches)
    assert str(error.value) == f"{tmp_path} holds checkpoints of a run " + (
        "with a moving average of the weights (ema_decay=0.9); resume it with --ema_decay=0.9"
        if first else "without a moving average of the weights; resume it without --ema_decay"
    ) + ", or use another model_dir."
    # Another decay is fine: the same variables.
    if first is not None:
        resumed = Trainer(TINY, config(tmp_path, train_steps=4, ema_decay=0.5)).fit(batches)
        assert resumed["steps"] == 4


def test_without_an_ema_there_is_no_ema_checkpoint(tmp_path):
    summary = Trainer(TINY, config(tmp_path, train_steps=2, ema_decay=None)).fit(batches)
    assert summary["ema_checkpoint"] is None
    assert not (tmp_path / "ema").exists()
    with pytest.raises(ValueError, match="no ema checkpoint .*train with --ema_decay"):
        runs.resolve_checkpoint(str(tmp_path), runs.EMA)
