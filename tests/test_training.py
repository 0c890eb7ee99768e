"""Training (sections 5.2-5.4, 6.1): one step under every strategy, accumulation, checkpoints,
averaging, preemption, NaN handling, mixed precision and XLA, and learning a toy task.

Things that need a fresh TensorFlow or several processes run tests/training_subprocess.py.
"""

import dataclasses
import importlib.util
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.training import (Callback, NonFiniteError, ProgressLine, TensorBoard,
                                        Trainer, TrainingConfig, TrainStep, checkpoint_paths,
                                        checkpoint_step, tensorboard_command)
from keras_transformer.weights import restore_model
from toy import toy_batch, toy_dataset_fn, write_word_for_word_corpus

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CHILD = os.path.join(HERE, "training_subprocess.py")
TINY = kt.TransformerConfig.from_preset("tiny", vocab_size=16)


def child_env(**extra):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT, **extra)
    env.pop("TF_CONFIG", None)
    env.update(extra)
    return env


def start_child(*args, **env):
    return subprocess.Popen([sys.executable, CHILD, *map(str, args)], env=child_env(**env),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(process, timeout=240):
    output, _ = process.communicate(timeout=timeout)
    assert process.returncode == 0, output[-3000:]


def read_json(path):
    with open(path) as stream:
        return json.load(stream)


class Recorder(Callback):
    def __init__(self, action=None):
        self.losses, self.steps, self.dev, self.action = [], [], [], action

    def on_log(self, step, logs):
        self.losses.append(logs["loss"])
        self.steps.append(step)
        if self.action:
            self.action(step)

    def on_dev(self, step, logs):
        self.dev.append(logs)


def fixed_batch_fn(context=None):
    """The same batch again and again: the loss must go down."""
    return tf.data.Dataset.from_tensors(toy_batch(0, task="reverse", vocab_size=16, batch_size=16,
                                                  min_length=2, max_length=6)).repeat()


def config(model_dir, **overrides):
    values = dict(model_dir=str(model_dir), train_steps=6, warmup_steps=4, log_every_steps=1,
                  checkpoint_every_minutes=None)
    values.update(overrides)
    return TrainingConfig(**values)


# --- one step on several devices / several micro-batches ---------------------------------------

@pytest.mark.slow
def test_mirrored_two_devices_equals_one_device(tmp_path):
    """MirroredStrategy over 2 logical CPUs vs one device on the same global batch, whose halves
    hold very different numbers of real tokens (a per-replica mean would differ)."""
    out = tmp_path / "mirrored.json"
    finish(start_child("mirrored", out), timeout=600)  # ~60 s of CPU: 240 s of wall can be too few
    result = read_json(out)
    assert result["replicas"] == 2
    one, two = result["sgd_losses"]
    np.testing.assert_allclose(one, two, rtol=1e-5)
    assert result["sgd_weight_change"] > 1e-2  # the update is not trivially small...
    assert result["sgd_weight_diff"] < 1e-5  # ...and the same on 1 and 2 devices
    # XLA-compiled per-replica forward+backward under MirroredStrategy: same losses.
    np.testing.assert_allclose(result["jit_mirrored_losses"], one, rtol=1e-4)
    # model.fit with the compiled LabelSmoothedCrossEntropy: the same update as the custom loop,
    # on one device and on two.
    assert result["fit_vs_custom_loop_diff"] < 1e-5
    assert result["fit_mirrored_vs_one_diff"] < 1e-5
    # The reported gradient norm is tf.linalg.global_norm of the gradient of the global batch's
    # mean loss, on one device and on two; the paper's Adam on two devices applies exactly that
    # gradient (its first moment after one step is (1 - beta_1) times it), not twice it.
    reference = result["reference_gradient_norm"]
    assert reference > 1e-3
    np.testing.assert_allclose(result["sgd_grad_norms"], [reference] * 2, rtol=1e-4)
    np.testing.assert_allclose(result["paper_grad_norms_two"], [reference] * 2, rtol=1e-4)


def test_the_step_dev_evaluation_and_finite_check_are_traced_without_autograph(
        tmp_path, autograph_conversions):
    """The trainer's functions are traced as written: autograph's rewrite of every function they
    call would make each program's start slower than the trace itself."""
    from keras_transformer.layers.masks import padding_mask

    tf.function(padding_mask)(tf.constant([[5, 0]]))  # the recorder sees autograph at work...
    assert autograph_conversions[0] == "keras_transformer.layers.masks.padding_mask"
    autograph_conversions.clear()
    keras.utils.set_random_seed(0)
    dev = fixed_batch_fn().take(1)
    trainer = Trainer(TINY, config(tmp_path, train_steps=2, checkpoint_every_steps=1))
    summary = trainer.fit(fixed_batch_fn, lambda context=None: dev)
    assert summary["steps"] == 2 and math.isfinite(summary["final_dev_loss"])
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-2")  # the finite check ran
    assert autograph_conversions == []  # ...and none of it here


def test_the_multi_device_input_of_a_run_is_built_without_autotune(tmp_path, monkeypatch):
    """Under a mirrored strategy the training and dev iterators are multi-device iterators; the
    input pipelines they read and the per-replica datasets of both (built inside fit) run without
    tf.data's autotune, whose thread would otherwise delay the end of the run
    (strategy.multi_device_input_without_autotune)."""
    from tensorflow.python.data.ops import multi_device_iterator_ops

    built, construct = [], multi_device_iterator_ops.OwnedMultiDeviceIterator.__init__

    def recording(self, dataset=None, *args, **kwargs):
        construct(self, dataset, *args, **kwargs)
        if dataset is not None:  # built from a dataset, not rebuilt from its parts in a trace
            built.append((dataset.options().autotune.enabled,
                          [device._dataset.options().autotune.enabled
                           for device in self._device_iterators]))

    monkeypatch.setattr(multi_device_iterator_ops.OwnedMultiDeviceIterator, "__init__", recording)
    dev = fixed_batch_fn().take(1)
    trainer = Trainer(TINY, config(tmp_path, train_steps=2, dev_every_steps=1),
                      tf.distribute.MirroredStrategy(["/cpu:0"]))
    summary = trainer.fit(fixed_batch_fn, lambda context=None: dev)
    assert summary["steps"] == 2 and math.isfinite(summary["final_dev_loss"])
    assert len(built) >= 3  # the training iterator and one per dev evaluation
    assert all(autotune == (False, [False]) for autotune in built), built  # (host, replicas)


def _build(optimizer):
    keras.utils.set_random_seed(5)
    model = kt.Transformer(TINY)
    model((tf.ones([1, 2], tf.int32),) * 2)
    optimizer.build(model.trainable_variables)
    return model


def test_accumulating_two_batches_equals_one_double_batch():
    (source, _), target = toy_batch(0, task="copy", vocab_size=16, batch_size=8, min_length=1,
                                    max_length=6)
    # Uneven halves: the first one's targets are mostly padding, so a mean per micro-batch
    # would weight its tokens about 3x more than the second half's.
    target = target.numpy()
    target[:4, 1:] = 0
    target[4:, :] = np.where(target[4:] == 0, 5, target[4:])
    target_in = np.concatenate([np.full((8, 1), 2, np.int32), target[:, :-1]], 1)
    batch = ((source, tf.constant(target_in)), tf.constant(target))
    halves = tuple(((source[i:i + 4], batch[0][1][i:i + 4]), batch[1][i:i + 4]) for i in (0, 4))

    optimizer_big, optimizer_acc = keras.optimizers.SGD(0.5), keras.optimizers.SGD(0.5)
    big, acc = _build(optimizer_big), _build(optimizer_acc)
    big_step = TrainStep(big, optimizer_big, accumulation_steps=1)
    acc_step = TrainStep(acc, optimizer_acc, accumulation_steps=2)
    for _ in range(2):
        big_stats = big_step.step_on_batches((batch,))
        acc_stats = acc_step.step_on_batches(halves)
    assert float(big_stats["target_tokens"]) == float(acc_stats["target_tokens"]) == 4 + 4 * 7
    assert float(big_stats["loss_sum"]) == pytest.approx(float(acc_stats["loss_sum"]), rel=1e-5)
    assert int(optimizer_acc.iterations) == 2  # one update per accumulated step
    for a, b in zip(big.trainable_variables, acc.trainable_variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=2e-6)
    initial = _build(keras.optimizers.SGD(0.5))
    moved = max(np.abs(a.numpy() - b.numpy()).max()
                for a, b in zip(big.trainable_variables, initial.trainable_variables))
    assert moved > 1e-2


@pytest.mark.parametrize("share_embeddings", [True, False])
def test_step_gradients_are_those_of_the_models_own_logits(share_embeddings):
    """The step projects the decoder's output inside its loss (training.loss.
    projected_loss_and_accuracy); its gradients of the mean loss must be those of the model's own
    logits (``model((source, target_in))``) under label_smoothed_cross_entropy, differentiated op
    by op, for every variable: the pre-softmax weights whether tied to the embeddings or not."""
    from keras_transformer.training.loss import label_smoothed_cross_entropy

    (source, _), target = toy_batch(1, task="reverse", vocab_size=16, batch_size=4, min_length=1,
                                    max_length=6)
    target_in = tf.concat([tf.fill([4, 1], 2), target[:, :-1]], 1)
    keras.utils.set_random_seed(5)
    model = kt.Transformer(dataclasses.replace(TINY, share_embeddings=share_embeddings,
                                               dropout_rate=0.0))
    model((source, target_in))
    step = TrainStep(model, keras.optimizers.SGD(0.1), label_smoothing=0.1)
    grads, stats = step._forward_backward(source, target_in, target)
    with tf.GradientTape() as tape:
        loss_sum, tokens = label_smoothed_cross_entropy(target, model((source, target_in)), 0.1)
        mean = loss_sum / tokens
    want = tape.gradient(mean, model.trainable_variables)
    assert float(stats[0]) == pytest.approx(float(loss_sum), rel=1e-6)
    assert float(stats[1]) == float(tokens)
    for variable, got, expected in zip(model.trainable_variables, grads, want):
        np.testing.assert_allclose(got.numpy(), tf.convert_to_tensor(expected).numpy(),
                                   rtol=1e-4, atol=1e-5, err_msg=variable.path)


# --- learning, progress, summaries -------------------------------------------------------------

def test_tiny_preset_learns_to_reverse_sequences(tmp_path):
    keras.utils.set_random_seed(0)
    dataset = dict(task="reverse", vocab_size=16, global_batch_size=64, max_length=6)
    recorder = Recorder()
    trainer = Trainer(TINY, config(tmp_path, train_steps=500, warmup_steps=100,
                                   log_every_steps=50))
    summary = trainer.fit(toy_dataset_fn(**dataset),
                          lambda ctx: toy_dataset_fn(seed=99, **dataset)(ctx).take(4),
                          callbacks=[recorder, TensorBoard(str(tmp_path))])
    # Token accuracy on unseen sequences (~98% after 500 steps for seeds 0-2; chance is 1/12).
    assert summary["final_dev_accuracy"] >= 0.95, summary
    assert recorder.losses[-1] < recorder.losses[0] / 2
    assert summary["steps"] == 500 and summary["stop_reason"] == "train_steps"
    # Its encoder-decoder attention (what trainers.translate --alignments reads) aligns each
    # output token with the source token it reverses, and nothing with padding.
    from keras_transformer.inference import cross_attention
    from toy import BOS_ID

    (source, _), target = next(iter(toy_dataset_fn(seed=7, **dataset)(tf.distribute.InputContext())))
    attention = cross_attention(trainer.model, source, target, BOS_ID).numpy()
    lengths = (source.numpy() != 0).sum(axis=1) - 1  # the words before EOS
    hits = [attention[row, t, :n + 1].argmax() == n - 1 - t
            for row, n in enumerate(lengths) for t in range(n)]
    assert np.mean(hits) >= 0.9, np.mean(hits)
    for row, n in enumerate(lengths):
        assert not attention[row, n + 1:].any() and not attention[row, :, n + 1:].any()
    written = read_json(tmp_path / "summary.json")
    assert written["final_dev_accuracy"] == summary["final_dev_accuracy"]
    assert summary["source_tokens"] > 0 and summary["tokens_per_second"] > 0
    # TensorBoard scalars, readable without the tensorboard package.
    tags = set()
    for name in os.listdir(tmp_path / "train"):
        for event in tf.compat.v1.train.summary_iterator(str(tmp_path / "train" / name)):
            tags.update(value.tag for value in event.summary.value)
    assert {"loss", "learning_rate", "grad_norm", "step_seconds", "target_tokens_per_second",
            "tokens_per_second", "padding_fraction"} <= tags
    dev_tags = set()
    for name in os.listdir(tmp_path / "dev"):
        for event in tf.compat.v1.train.summary_iterator(str(tmp_path / "dev" / name)):
            dev_tags.update(value.tag for value in event.summary.value)
    assert {"loss", "nll", "perplexity", "accuracy"} <= dev_tags


def test_the_tensorboard_line_says_how_to_install_it_only_where_it_is_missing(monkeypatch):
    """The install hint is the package's own name, right from a wheel or in Colab (the clone's
    ``pip install -e '.[tensorboard]'`` is not), and absent where TensorBoard is installed."""
    find_spec = importlib.util.find_spec
    for installed in (False, True):
        monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: (
            (find_spec("json") if installed else None) if name == "tensorboard"
            else find_spec(name, *rest)))
        line = tensorboard_command("runs/quickstart")
        assert line.startswith("tensorboard --logdir=runs/quickstart")
        assert ("(not installed here: pip install tensorboard)" in line) != installed, line
        assert "-e" not in line
    # a folder with a space is one argument of the command pasted into a shell
    assert shlex.split(tensorboard_command("runs/my run"))[:2] == ["tensorboard", "--logdir=runs/my run"]


@pytest.mark.parametrize("jit_compile,precision", [
    (True, "float32"), (False, "bfloat16"), (True, "bfloat16"), (False, "float16")])
def test_xla_and_mixed_precision_train(tmp_path, jit_compile, precision):
    recorder = Recorder()
    trainer = Trainer(TINY, config(tmp_path, jit_compile=jit_compile, mixed_precision=precision,
                                   train_steps=8))
    trainer.fit(fixed_batch_fn, callbacks=[recorder])
    assert all(np.isfinite(recorder.losses)), recorder.losses
    assert recorder.losses[-1] < recorder.losses[0] - 0.2, recorder.losses
    expected = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}[precision]
    assert trainer.model.compute_dtype == expected
    assert isinstance(trainer.optimizer, keras.optimizers.LossScaleOptimizer) == (
        precision == "float16")


# One progress line: a timestamp, then "name value" fields separated by " | ".
PROGRESS = re.compile(
    r"^(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) step (?P<step>\d+)/(?P<total>\d+) \| "
    r"loss (?P<loss>[\d.]+) \| acc (?P<acc>[\d.]+) \| lr (?P<lr>[\d.e+-]+) \| gnorm (?P<gnorm>[\d.e+-]+) \| "
    r"(?P<step_seconds>[\d.]+) s/step(?P<first> \(includes building and compiling\))? \| "
    r"(?P<target_rate>[\d,]+) tgt tok/s \| (?P<rate>[\d,]+) src\+tgt tok/s \| pad (?P<pad>[\d.]+)% \| "
    r"(?P<elapsed>[\d:]+) elapsed, (?P<left>[\d:?]+) left$")
DEV = re.compile(r"^\S+ \S+ step (?P<step>\d+) \| dev loss (?P<loss>[\d.]+) \| dev nll (?P<nll>[\d.]+) \| "
                 r"dev ppl (?P<ppl>[\d.]+) \| dev acc (?P<acc>[\d.]+)"
                 r"( \| dev BLEU (?P<bleu>[\d.]+))?( \| chrF2 (?P<chrf>[\d.]+))?$")


def test_the_time_left_is_paced_by_the_updates_after_the_first_which_also_compiled():
    from keras_transformer.training.trainer import remaining_seconds

    # The first update took 10 s (building and compiling the step), each later one 1 s: 11 updates
    # into a run of 100, 89 at 1 s are left, where the average over all 11 would say 162 s.
    assert remaining_seconds(100, 11, 0, 20.0, 10.0, None) == pytest.approx(89.0)
    assert remaining_seconds(100, 61, 50, 20.0, 10.0, None) == pytest.approx(39.0)  # resumed at 50
    assert remaining_seconds(100, 1, 0, 10.0, 10.0, None) is None  # the first update alone: no pace yet
    assert remaining_seconds(100, 1, 0, 10.0, 10.0, 50.0) == pytest.approx(40.0)
    # The sooner of the step limit and the time budget; neither: unknown.
    assert remaining_seconds(100, 11, 0, 20.0, 10.0, 50.0) == pytest.approx(30.0)
    assert remaining_seconds(None, 11, 0, 20.0, 10.0, 50.0) == pytest.approx(30.0)
    assert remaining_seconds(None, 11, 0, 20.0, 10.0, None) is None


def test_a_progress_line_parses_into_its_fields():
    lines = []
    progress = ProgressLine(lines.append, total_steps=100)
    progress.trainer = SimpleNamespace(config=config("run"))  # the run's config: XLA off
    progress.on_begin(0)
    logs = dict(loss=4.5, accuracy=0.25, learning_rate=7e-4, grad_norm=0.8312,
                step_seconds=0.52, target_tokens_per_second=6000.4, tokens_per_second=12345.6,
                padding_fraction=0.08, elapsed_seconds=3600.0, remaining_seconds=5400.0)
    progress.on_log(1, logs)
    progress.on_log(40, logs)
    progress.on_dev(40, dict(loss=4.1, nll=3.5, perplexity=math.exp(3.5), accuracy=0.4, bleu=9.81,
                                     chrf=38.27))
    assert "building" in lines[0] and "step 1" in lines[0]
    assert "XLA" not in lines[0]  # without XLA a new batch shape is not compiled again
    compiled = []
    xla = ProgressLine(compiled.append)
    xla.trainer = SimpleNamespace(config=config("run", jit_compile=True))
    xla.on_begin(0)
    assert "XLA compiles each new batch shape" in compiled[0]
    first, later = PROGRESS.match(lines[1]), PROGRESS.match(lines[2])
    assert first and later, lines
    assert first["first"] and not later["first"]  # only the first step includes compiling
    fields = later.groupdict()
    assert abs(time.time() - time.mktime(time.strptime(fields["time"], "%Y-%m-%d %H:%M:%S"))) < 60
    assert (int(fields["step"]), int(fields["total"])) == (40, 100)
    assert (float(fields["loss"]), float(fields["acc"]), float(fields["lr"])) == (4.5, 0.25, 7e-4)
    assert float(fields["gnorm"]) == pytest.approx(0.8312, rel=1e-3)
    assert float(fields["step_seconds"]) == 0.52 and float(fields["pad"]) == 8.0
    assert int(fields["target_rate"].replace(",", "")) == 6000
    assert int(fields["rate"].replace(",", "")) == 12346
    assert (fields["elapsed"], fields["left"]) == ("1:00:00", "1:30:00")
    dev = DEV.match(lines[3])
    assert dev, lines[3]
    assert float(dev["ppl"]) == pytest.approx(math.exp(float(dev["nll"])), rel=1e-3)
    assert float(dev["bleu"]) == 9.81 and float(dev["loss"]) == 4.1
    assert float(dev["chrf"]) == 38.27


def test_dev_perplexity_is_exp_of_the_unsmoothed_nll_per_target_subword():
    """TrainStep.evaluate against a hand computation from the model's logits: the mean of
    -log softmax(logits)[label] over real target tokens, and its exp (Table 3's PPL)."""
    keras.utils.set_random_seed(3)
    model = kt.Transformer(TINY)
    optimizer = keras.optimizers.SGD(0.1)
    optimizer.build(model.trainable_variables)
    step = TrainStep(model, optimizer, label_smoothing=0.1)
    batches = [toy_batch(seed, task="copy", vocab_size=16, batch_size=4, min_length=1,
                         max_length=6) for seed in (0, 1)]
    logs = step.evaluate(batches)
    negative_log_likelihoods = []
    for (source, target_in), target_out in batches:
        logits = np.asarray(model((source, target_in), training=False), np.float64)
        log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        labels = np.asarray(target_out)
        picked = np.take_along_axis(log_probs, labels[..., None], -1)[..., 0]
        negative_log_likelihoods += list(-picked[labels != 0])
    nll = float(np.mean(negative_log_likelihoods))
    assert logs["target_tokens"] == len(negative_log_likelihoods)
    assert logs["nll"] == pytest.approx(nll, rel=1e-5)
    assert logs["perplexity"] == pytest.approx(math.exp(nll), rel=1e-5)
    assert abs(logs["loss"] - logs["nll"]) > 1e-4  # the label-smoothed loss is another number


# --- checkpoints ---------------------------------------------------------------------------------

def test_average_of_three_checkpoints_is_the_elementwise_mean(tmp_path):
    trainer = Trainer(TINY, config(tmp_path, train_steps=3, checkpoint_every_steps=1,
                                   average_last=3, keep_checkpoints=3))
    summary = trainer.fit(fixed_batch_fn)
    paths = checkpoint_paths(str(tmp_path))
    assert [os.path.basename(p) for p in paths] == ["ckpt-1", "ckpt-2", "ckpt-3"]

    def weights_of(path):
        model = _build(keras.optimizers.SGD())
        restore_model(model, path)
        return [v.numpy() for v in model.trainable_variables]

    each = [weights_of(p) for p in paths]
    averaged = weights_of(summary["averaged_checkpoint"])
    changed = 0
    for index, value in enumerate(averaged):
        values = [w[index] for w in each]
        np.testing.assert_allclose(value, np.mean(values, axis=0), rtol=1e-6, atol=1e-7)
        changed += not np.allclose(values[0], values[-1])
    assert changed > len(averaged) // 2  # the checkpoints differ: the mean is not trivial
    # The averaging command gives the same average (run as a user runs it: its flags would clash
    # with the trainer's, which other tests define in this process).
    output = str(tmp_path / "cmd" / "avg")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    subprocess.run([sys.executable, "-m", "trainers.average_checkpoints", f"--model_dir={tmp_path}",
                    "--last=3", f"--output={output}"], check=True, cwd=root, capture_output=True)
    for a, b in zip(weights_of(output), averaged):
        np.testing.assert_array_equal(a, b)


def test_sigterm_saves_and_resume_continues(tmp_path):
    def preempt(step):
        if step == 3:
            os.kill(os.getpid(), signal.SIGTERM)

    first = Trainer(TINY, config(tmp_path, train_steps=50))
    summary = first.fit(fixed_batch_fn, callbacks=[Recorder(preempt)])
    assert summary["stop_reason"] == "sigterm"
    assert summary["steps"] == 4  # the step in flight finishes, then a checkpoint is written
    assert os.path.basename(summary["latest_checkpoint"]) == "ckpt-4"
    learning_rate = first.learning_rate()
    moments = [v.numpy() for v in first.optimizer.variables]

    second = Trainer(TINY, config(tmp_path, train_steps=6))
    assert second.restore().endswith("ckpt-4")
    assert second.step == 4 and int(second.optimizer.iterations) == 4
    assert second.learning_rate() == pytest.approx(learning_rate)
    for a, b in zip(moments, second.optimizer.variables):
        np.testing.assert_array_equal(a, b.numpy())
    resumed = second.fit(fixed_batch_fn)
    assert resumed["start_step"] == 4 and resumed["steps"] == 6


def test_a_run_that_had_ended_is_left_as_it_was_and_one_a_signal_ended_is_finished(tmp_path):
    """Run again, a finished run trains nothing and keeps its record: its summary was the one
    with the training's figures (loss, tokens/s, wall time), not an empty run's. A run a signal
    stopped at its last step had skipped its last stages; run again, it does them."""
    summary = Trainer(TINY, config(tmp_path / "ended", average_last=2)).fit(fixed_batch_fn)
    files = {path: path.read_bytes() for path in (tmp_path / "ended").rglob("*") if path.is_file()}
    recorder, lines = Recorder(), []
    again = Trainer(TINY, config(tmp_path / "ended", average_last=2, train_steps=5)).fit(
        fixed_batch_fn, callbacks=[recorder, ProgressLine(lines.append),
                                   TensorBoard(str(tmp_path / "ended"))])
    assert again == dict(summary, ended_before=True) and again["final_train_loss"] > 0
    assert recorder.steps == [] and len(lines) == 1 and lines[0].endswith(
        "step 6: nothing to train, this run had already stopped here (train_steps); its "
        "checkpoints and summary are as they were"), lines
    assert {path: path.read_bytes() for path in (tmp_path / "ended").rglob("*")
            if path.is_file()} == files  # config.json too: it does not record train_steps=5

    def preempt(step):
        if step == 5:
            os.kill(os.getpid(), signal.SIGTERM)

    stopped = Trainer(TINY, config(tmp_path / "signal", average_last=2)).fit(
        fixed_batch_fn, callbacks=[Recorder(preempt)])
    assert (stopped["steps"], stopped["stop_reason"], stopped["averaged_checkpoint"]) == (
        6, "sigterm", None)
    finished = Trainer(TINY, config(tmp_path / "signal", average_last=2)).fit(fixed_batch_fn)
    assert "ended_before" not in finished and finished["steps_this_run"] == 0
    assert (finished["stop_reason"], os.path.basename(finished["averaged_checkpoint"] or "")) == (
        "train_steps", "ckpt")


class FakeClock:
    """The trainer's clock (``time.monotonic``), advanced by hand: ten seconds a step."""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self):
        return self.now

    def tick(self, step):
        self.now += 10.0


def test_train_minutes_bound_the_runs_training_time_in_all_across_resumptions(tmp_path,
                                                                               monkeypatch):
    """A run stopped by a signal and resumed ends at the step a run never stopped ends at, on the
    same clock: resumed, it trains only the minutes left (its checkpoints record the time trained
    up to them). Run again once they are used up it trains nothing and keeps its record; more
    minutes train on."""
    from keras_transformer.training import checkpoints, trainer as trainer_module

    clock = FakeClock()
    monkeypatch.setattr(trainer_module, "time", clock)
    timed = dict(train_steps=None, train_minutes=1.0, checkpoint_every_steps=1)
    whole = Trainer(TINY, config(tmp_path / "whole", **timed)).fit(
        fixed_batch_fn, callbacks=[Recorder(clock.tick)])
    assert whole["stop_reason"] == "train_minutes" and 4 < whole["steps"] < 10
    assert whole["training_seconds"] == 10.0 * whole["steps"]

    def preempt(step):
        clock.tick(step)
        if step == 3:
            os.kill(os.getpid(), signal.SIGTERM)

    stopped = Trainer(TINY, config(tmp_path / "run", **timed)).fit(
        fixed_batch_fn, callbacks=[Recorder(preempt)])
    assert (stopped["stop_reason"], stopped["steps"]) == ("sigterm", 4)
    assert checkpoints.training_seconds(str(tmp_path / "run")) == 40.0
    clock.now += 3600.0  # the time between the preemption and the restart counts for nothing
    resumed = Trainer(TINY, config(tmp_path / "run", **timed)).fit(
        fixed_batch_fn, callbacks=[Recorder(clock.tick)])
    assert (resumed["stop_reason"], resumed["start_step"], resumed["steps"]) == (
        "train_minutes", 4, whole["steps"])
    assert resumed["training_seconds"] == whole["training_seconds"]

    recorder = Recorder(clock.tick)
    again = Trainer(TINY, config(tmp_path / "run", **timed)).fit(fixed_batch_fn,
                                                                 callbacks=[recorder])
    assert again == dict(resumed, ended_before=True) and recorder.steps == []
    more = Trainer(TINY, config(tmp_path / "run", **dict(timed, train_minutes=1.5))).fit(
        fixed_batch_fn, callbacks=[Recorder(clock.tick)])
    assert more["start_step"] == whole["steps"] and more["steps"] > whole["steps"]
    assert more["training_seconds"] == 10.0 * more["steps"]


def test_a_checkpoint_that_records_no_training_time_resumes_from_none(tmp_path):
    """Checkpoints of earlier versions hold no training time: the run resumes from them, its
    time counted from zero, and its next checkpoints record it."""
    from keras_transformer.training import checkpoints
    from keras_transformer.weights import model_checkpoint

    first = Trainer(TINY, config(tmp_path / "new", train_steps=2))
    first.fit(fixed_batch_fn)
    earlier = model_checkpoint(first.model, optimizer=first.optimizer, step=first.step_counter)
    tf.train.CheckpointManager(earlier, str(tmp_path / "old"), 1).save(checkpoint_number=2)
    assert not checkpoints.holds_training_seconds(tf.train.latest_checkpoint(str(tmp_path / "old")))
    assert checkpoints.holds_training_seconds(tf.train.latest_checkpoint(str(tmp_path / "new")))
    (tmp_path / "old" / "config.json").write_bytes((tmp_path / "new" / "config.json").read_bytes())

    resumed = Trainer(TINY, config(tmp_path / "old", train_steps=3))
    assert resumed.restore().endswith("ckpt-2") and float(resumed.training_seconds.numpy()) == 0
    for a, b in zip(first.model.variables, resumed.model.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    summary = resumed.fit(fixed_batch_fn)
    assert (summary["start_step"], summary["steps"]) == (2, 3)
    assert 0 < checkpoints.training_seconds(str(tmp_path / "old")) == summary["training_seconds"]


def all_finite(checkpoint_prefix):
    reader = tf.train.load_checkpoint(checkpoint_prefix)
    floats = [reader.get_tensor(key) for key in reader.get_variable_to_shape_map()]
    floats = [value for value in floats if np.issubdtype(np.asarray(value).dtype, np.floating)]
    assert floats
    return all(np.isfinite(value).all() for value in floats)


def test_a_non_finite_update_never_reaches_a_checkpoint(tmp_path):
    # The reproduction: a good run, then one update with an absurd learning rate. The
    # step's loss is finite (computed before the update); the update makes the weights NaN.
    Trainer(TINY, config(tmp_path, train_steps=40, checkpoint_every_steps=20)).fit(fixed_batch_fn)
    trainer = Trainer(TINY, config(tmp_path, train_steps=41, checkpoint_every_steps=20,
                                   learning_rate_scale=1e40, average_last=1, keep_checkpoints=2))
    losses = Recorder()
    with pytest.raises(NonFiniteError, match=r"step 41 .*latest checkpoint \S*ckpt-40 is the last "
                                              r"finite one"):
        trainer.fit(fixed_batch_fn, callbacks=[losses])
    assert not trainer.weights_are_finite()  # the update did poison the weights in memory
    assert [os.path.basename(p) for p in checkpoint_paths(str(tmp_path))] == ["ckpt-20", "ckpt-40"]
    assert [checkpoint_step(p) for p in checkpoint_paths(str(tmp_path))] == [20, 40]  # as stored
    assert os.path.basename(tf.train.latest_checkpoint(str(tmp_path))) == "ckpt-40"
    assert all_finite(str(tmp_path / "ckpt-40"))
    assert not (tmp_path / "averaged").exists()
    with open(tmp_path / "summary.json") as stream:  # strict JSON: a bare NaN fails to parse
        summary = json.load(stream, parse_constant=lambda name: pytest.fail(f"bare {name}"))
    assert summary["stop_reason"] == "non_finite" and summary["steps"] == 41
    assert summary["latest_checkpoint"].endswith("ckpt-40")


def test_a_non_finite_loss_stops_before_saving(tmp_path):
    # Huge but finite first update, then a NaN loss: the loss check stops at once.
    trainer = Trainer(TINY, config(tmp_path, train_steps=8, checkpoint_every_steps=1,
                                   learning_rate_scale=1e30))
    with pytest.raises(NonFiniteError, match=r"became nan at step \d"):
        trainer.fit(fixed_batch_fn)
    paths = checkpoint_paths(str(tmp_path))
    assert paths and all(all_finite(p) for p in paths)


def test_float16_loss_scaling_skips_overflowing_steps_without_failing(tmp_path):
    # Loss scaling starts at 2**15 and halves on every overflowing step, which it skips: a
    # scale of 1e30 on top overflows float16 gradients at once, yet training must go on.
    trainer = Trainer(TINY, config(tmp_path, train_steps=6, mixed_precision="float16",
                                   checkpoint_every_steps=3))
    trainer.optimizer.dynamic_scale.assign(1e30)
    summary = trainer.fit(fixed_batch_fn)
    assert summary["stop_reason"] == "train_steps" and summary["steps"] == 6
    assert int(trainer.optimizer.iterations) < 6  # some steps were skipped
    assert trainer.weights_are_finite()


def test_averaging_refuses_a_non_finite_checkpoint(tmp_path):
    trainer = Trainer(TINY, config(tmp_path, train_steps=2, checkpoint_every_steps=1))
    trainer.fit(fixed_batch_fn)
    poisoned = trainer.model.trainable_variables[0]
    poisoned.assign(tf.fill(poisoned.shape, np.nan))
    trainer.checkpointer.save(3)
    from keras_transformer.training import average_checkpoints

    with pytest.raises(ValueError, match=r"ckpt-3 holds NaN or infinite values \(1 of"):
        average_checkpoints(_build(keras.optimizers.SGD()), checkpoint_paths(str(tmp_path)))


@pytest.mark.slow
def test_resume_after_sigkill_ends_at_the_uninterrupted_weights(tmp_path, system_temporary):
    killed_dir, reference_dir = tmp_path / "killed", tmp_path / "reference"
    # Killed, it cannot remove its temporary files (autograph's code): a folder of the test's own.
    victim = start_child("train", tmp_path / "victim.json", killed_dir, 1000,
                         "--checkpoint_every_steps=5", "--sleep=0.05",
                         TMPDIR=str(system_temporary))
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and victim.poll() is None:
        paths = checkpoint_paths(str(killed_dir)) if (killed_dir / "checkpoint").exists() else []
        if paths and int(paths[-1].rsplit("-", 1)[1]) >= 10:
            break
        time.sleep(0.05)
    victim.send_signal(signal.SIGKILL)
    victim.communicate()
    latest = tf.train.latest_checkpoint(str(killed_dir))
    saved_step = int(latest.rsplit("-", 1)[1])
    assert 10 <= saved_step < 30
    # The resumed run (in a fresh process), then in that same process the reference: a run
    # never interrupted, from scratch, seeded again as at a process's start.
    finish(start_child("train", tmp_path / "resumed.json", killed_dir, 30,
                       "--checkpoint_every_steps=5", f"--reference={reference_dir}"))
    resumed, uninterrupted = read_json(tmp_path / "resumed.json"), read_json(
        tmp_path / "resumed.json.reference.json")
    assert resumed["start_step"] == saved_step and resumed["steps"] == 30
    assert resumed["resumed_from"] == latest
    with np.load(resumed["weights_file"]) as a, np.load(uninterrupted["weights_file"]) as b:
        for name in a.files:
            np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-6)


# --- configuration errors and the command ------------------------------------------------------

@pytest.mark.parametrize("overrides,message", [
    (dict(accumulation_steps=0), "accumulation_steps"),
    (dict(train_steps=None, train_minutes=None), "train_steps or train_minutes"),
    (dict(mixed_precision="float8"), "mixed_precision"),
    (dict(average_last=30, keep_checkpoints=5), "average_last"),
    (dict(checkpoint_every_minutes=-1.0), "checkpoint_every_minutes"),
])
def test_bad_training_config_is_a_clear_error(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        config(tmp_path, **overrides)


def test_wmt_rejects_bad_flags_at_start():
    result = subprocess.run(
        [sys.executable, "-m", "trainers.wmt", "--accumulation_steps=0"], cwd=ROOT,
        env=child_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "--accumulation_steps must be positive" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_wmt_command_trains_mirrored_on_own_files(tmp_path):
    """The user's command end to end on tiny TSV files: vocabulary, 2 mirrored logical CPUs,
    progress lines, checkpoints, averaging, summary."""
    write_word_for_word_corpus(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "trainers.wmt", "--preset=tiny", "--dataset=files",
         f"--train_data={tmp_path / 'train.tsv'}", f"--dev_data={tmp_path / 'dev.tsv'}",
         f"--data_dir={tmp_path / 'data'}", "--vocab_size=296", "--max_length=16",
         "--token_budget=256", "--num_cpu_devices=2", "--train_steps=6",
         "--log_every_steps=3", "--checkpoint_every_steps=2", "--average_last=2",
         "--dev_every_steps=0", "--ema_decay=0.5", "--export_best",
         f"--model_dir={tmp_path / 'run'}"],
        cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "step 3/6 | loss" in result.stdout and "tgt tok/s" in result.stdout
    assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d step 1: building", result.stdout, re.M)
    # --strategy=auto (the default): mirrored, as the two logical devices are visible
    assert "strategy=mirrored over 2 replica(s)" in result.stdout
    # Quiet at the source: no INFO lines of TFDS, tf.distribute or absl (I<month><day> ...) at
    # default verbosity. (TensorFlow's C++ start-up lines, I0000 ..., come before any setting.)
    output = result.stdout + result.stderr
    assert not re.search(r"^I(?!0000)\d{4} |INFO:|Load dataset info|Using MirroredStrategy|"
                         r"Sharding callback", output, re.M), output[-3000:]
    assert "| dev BLEU " in result.stdout  # DevBleu ran under the mirrored strategy
    summary = read_json(tmp_path / "run" / "summary.json")
    assert summary["steps"] == 6 and summary["num_replicas"] == 2
    assert np.isfinite(summary["final_dev_loss"])
    assert summary["averaged_checkpoint"].endswith(os.path.join("averaged", "ckpt"))
    assert [os.path.basename(p) for p in checkpoint_paths(str(tmp_path / "run"))][-3:] == [
        "ckpt-2", "ckpt-4", "ckpt-6"]
    run = read_json(tmp_path / "run" / "config.json")
    assert run["model"]["num_layers"] == 2 and run["training"]["train_steps"] == 6
    assert (tmp_path / "run" / "vocab.model").exists()
    # The moving average under the mirrored strategy: written, and not the last weights.
    assert summary["ema_checkpoint"].endswith(os.path.join("ema", "ckpt"))
    ema, last = (tf.train.load_checkpoint(str(tmp_path / "run" / name))
                 for name in (os.path.join("ema", "ckpt"), "ckpt-6"))
    key = next(k for k in ema.get_variable_to_shape_map() if k.startswith("model_variables/"))
    assert np.abs(ema.get_tensor(key) - last.get_tensor(key)).max() > 0
    # --export_best: the end's dev BLEU is the only one, so its export is the best.
    assert "best so far, exported to" in result.stdout
    assert sorted(os.listdir(tmp_path / "run" / "best_export")) == ["6"]
    assert sorted(os.listdir(tmp_path / "run" / "best_export_ids")) == ["6"]


@pytest.fixture(scope="module")
def one_step_run(tmp_path_factory):
    """A run of TINY trained one step: the tests that resume it work on a copy of their own."""
    folder = tmp_path_factory.mktemp("one_step_run")
    Trainer(TINY, config(folder, train_steps=1)).fit(fixed_batch_fn)
    return folder


def test_resuming_with_another_model_is_a_clear_error(tmp_path, one_step_run):
    shutil.copytree(one_step_run, tmp_path, dirs_exist_ok=True)
    other = kt.TransformerConfig.from_preset("tiny", vocab_size=16, d_ff=48)
    with pytest.raises(ValueError, match="another model .*d_ff"):
        Trainer(other, config(tmp_path, train_steps=2)).fit(fixed_batch_fn)


def test_resuming_a_run_written_before_new_model_fields_existed(tmp_path, one_step_run):
    """A config.json without fields added later (they default) is the same model: it resumes."""
    shutil.copytree(one_step_run, tmp_path, dirs_exist_ok=True)
    path = tmp_path / "config.json"
    run = read_json(path)
    for field in ("source_word_dropout", "target_word_dropout", "decoder_layerdrop"):
        del run["model"][field]
    path.write_text(json.dumps(run))
    summary = Trainer(TINY, config(tmp_path, train_steps=2)).fit(fixed_batch_fn)
    assert summary["steps"] == 2
    # ... but a later field set to something else is still another model.
    other = kt.TransformerConfig.from_preset("tiny", vocab_size=16, decoder_layerdrop=0.2)
    with pytest.raises(ValueError, match="another model .*decoder_layerdrop"):
        Trainer(other, config(tmp_path, train_steps=3)).fit(fixed_batch_fn)


def test_checkpoint_paths_of_a_relative_model_dir_exist(tmp_path, monkeypatch):
    import tensorflow as tf

    monkeypatch.chdir(tmp_path)
    variable = tf.Variable(1.0)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=variable), os.path.join("runs", "x"),
                                         max_to_keep=3)
    manager.save()
    manager.save()
    paths = checkpoint_paths(os.path.join("runs", "x"))
    assert [os.path.basename(p) for p in paths] == ["ckpt-1", "ckpt-2"]
    assert all(os.path.exists(p + ".index") for p in paths)


def test_the_model_settings_are_checked_before_the_vocabulary_is_learned(tmp_path):
    from keras_transformer import data
    from keras_transformer.training import TrainingConfig
    from keras_transformer.training.run import train_run

    (tmp_path / "train.tsv").write_text("a house\tein Haus\n" * 200, encoding="utf-8")
    data_config = data.DataConfig(dataset="files", train_data=str(tmp_path / "train.tsv"),
                                  data_dir=str(tmp_path / "data"), vocab_size=296, max_length=16)
    training = TrainingConfig(model_dir=str(tmp_path / "run"), train_steps=1)
    for preset, overrides, message in (
            ("tiny", dict(max_length=16), r"max_length=16: the data's longest examples need 17 "
                                          r"positions, the model has 16; pass "
                                          r"model_overrides=\{'max_length': 17\}"),
            ("tiny", dict(vocab_size=296), "model_overrides sets vocab_size: the vocabulary is "
                                           "the tokenizer's"),
            ("huge", None, "Unknown preset 'huge'"),
            ("tiny", dict(d_model=30), "d_model=30 is not divisible by num_heads=4")):
        with pytest.raises(ValueError, match=message):
            train_run(data_config, training, preset=preset, model_overrides=overrides,
                      dev_bleu_sentences=0, log=lambda line: None)
    for wrong, message in ((dict(data_config=dataclasses.asdict(data_config)), "data_config: a DataConfig"),
                           (dict(strategy="mirrored"), "strategy: a Strategy")):
        with pytest.raises(TypeError, match=message):
            train_run(**{"data_config": data_config, "training_config": training, **wrong})
    assert sorted(os.listdir(tmp_path)) == ["train.tsv"]  # no vocabulary, no run folder
