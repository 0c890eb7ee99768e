"""Early stopping (--early_stopping_patience, fairseq's --patience): the counting rule on scripted
metric sequences, and the trainer stopping on it, saying so, and keeping the count over a resume."""

import math

import pytest

import keras_transformer as kt
from keras_transformer.training import Callback, ProgressLine, Trainer, TrainingConfig
from keras_transformer.training.early_stopping import EarlyStopping
from toy import one_batch_fn

TINY = kt.TransformerConfig.from_preset("tiny", vocab_size=16)
NAN = float("nan")


def stops(stopper, values):
    """The update() answers over ``values`` (steps 1, 2, ...)."""
    return [stopper.update(value, step) for step, value in enumerate(values, 1)]


@pytest.mark.parametrize("metric,values,min_delta,first_stop", [
    # loss: lower is better; 3 evaluations after the best (2.0) none beats it
    ("loss", [3.0, 2.0, 2.5, 2.1, 2.0, 1.0], 0.0, 5),
    # an improvement resets the count: 2.5, then 1.5 improves, then three without
    ("loss", [3.0, 2.5, 2.6, 1.5, 1.6, 1.7, 1.5], 0.0, 7),
    # bleu: higher is better
    ("bleu", [5.0, 7.0, 6.0, 7.0, 6.9, 10.0], 0.0, 5),
    # min_delta: 7.2 and 7.3 beat 7.0 by no more than 0.5, 7.6 would but comes too late
    ("bleu", [5.0, 7.0, 7.2, 7.3, 7.4, 7.6], 0.5, 5),
    # a failed dev BLEU (NaN) is an evaluation without improvement; the first finite value is
    # the first best
    ("bleu", [NAN, 1.0, NAN, NAN, NAN], 0.0, 5),
])
def test_stops_after_exactly_patience_evaluations_without_improvement(metric, values, min_delta,
                                                                      first_stop):
    stopper = EarlyStopping(patience=3, metric=metric, min_delta=min_delta)
    answers = stops(stopper, values[:first_stop])
    assert answers == [False] * (first_stop - 1) + [True], (values, answers)
    assert stopper.bad_evaluations == 3
    finite = [v for v in values[:first_stop] if not math.isnan(v)]
    best = min(finite) if metric == "loss" else max(finite)
    # with min_delta the best is the last value that improved, not the extreme
    if min_delta == 0:
        assert stopper.best == best
    assert "did not improve" in stopper.describe() and "patience 3" in stopper.describe()


def test_the_state_carries_the_count_over_a_resume():
    first = EarlyStopping(3, "loss")
    assert stops(first, [2.0, 2.1, 2.2]) == [False, False, False]
    second = EarlyStopping(3, "loss", state=first.state())
    assert second.update(2.05, 4) is True  # the third without improvement, counted across
    assert second.best == 2.0 and second.best_step == 1
    # A state of another metric means nothing for this one.
    assert EarlyStopping(3, "bleu", state=first.state()).bad_evaluations == 0


@pytest.mark.parametrize("kwargs,message", [
    (dict(patience=0), "early_stopping_patience"),
    (dict(patience=2, metric="accuracy"), "early_stopping_metric"),
    (dict(patience=2, min_delta=-1.0), "early_stopping_min_delta"),
    (dict(patience=2, min_delta=NAN), "early_stopping_min_delta"),
])
def test_bad_settings_are_clear_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EarlyStopping(**kwargs)


def test_training_config_needs_dev_evaluations_for_early_stopping(tmp_path):
    with pytest.raises(ValueError, match="early_stopping_patience=2 needs dev_every_steps"):
        TrainingConfig(model_dir=str(tmp_path), train_steps=5, early_stopping_patience=2)


# --- the trainer -------------------------------------------------------------------------------

batches = one_batch_fn(0)
dev_batches = one_batch_fn(1, repeat=False)


class ScriptedDevLoss(Callback):
    """Replaces each dev evaluation's loss with the next value of a script (callbacks run before
    the trainer reads the logs), so the trainer stops on a known sequence."""

    def __init__(self, values):
        self.values, self.steps = list(values), []

    def on_dev(self, step, logs):
        logs["loss"] = self.values[len(self.steps)]
        self.steps.append(step)


class Logged(Callback):
    """The steps of the progress lines and their losses."""

    def __init__(self):
        self.steps, self.losses = [], []

    def on_log(self, step, logs):
        self.steps.append(step)
        self.losses.append(logs["loss"])


def early_config(model_dir, **overrides):
    values = dict(model_dir=str(model_dir), train_steps=40, warmup_steps=4, log_every_steps=100,
                  checkpoint_every_minutes=None, dev_every_steps=2, early_stopping_patience=3)
    values.update(overrides)
    return TrainingConfig(**values)


def test_the_trainer_stops_early_says_why_and_resumes_the_count(tmp_path):
    lines, logged = [], Logged()
    script = ScriptedDevLoss([3.0, 2.0, 2.5, 2.1, 2.2] + [1.0] * 20)
    summary = Trainer(TINY, early_config(tmp_path)).fit(
        batches, dev_batches, callbacks=[script, logged, ProgressLine(lines.append, 40)])
    # evaluations at steps 2, 4, ..., the best (2.0) at step 4, then 6, 8, 10 without improvement
    assert script.steps == [2, 4, 6, 8, 10]
    assert summary["stop_reason"] == "early_stopping" and summary["steps"] == 10
    assert summary["early_stopping"]["best"] == 2.0
    assert summary["early_stopping"]["best_step"] == 4
    assert summary["early_stopping"]["evaluations_without_improvement"] == 3
    assert summary["latest_checkpoint"].endswith("ckpt-10")  # the stop is saved
    # the steps since the first line (log_every_steps=100) are shown, and are the final loss
    assert logged.steps == [1, 10] and summary["final_train_loss"] == logged.losses[-1]
    assert lines[-1].endswith("step 10: training stopped (early_stopping: dev loss did not "
                              "improve by more than 0 for 3 evaluation(s) (patience 3); best 2 "
                              "at step 4)"), lines[-1]

    # The same command again: it had stopped, so it trains and evaluates nothing, and says so.
    recorded = (tmp_path / "summary.json").read_bytes()
    unused, lines = ScriptedDevLoss([2.9] * 5), []
    again = Trainer(TINY, early_config(tmp_path)).fit(
        batches, dev_batches, callbacks=[unused, ProgressLine(lines.append, 40)])
    assert again == dict(summary, ended_before=True) and unused.steps == []
    assert (tmp_path / "summary.json").read_bytes() == recorded
    assert len(lines) == 1 and lines[0].endswith(
        "step 10: nothing to train, this run had already stopped here (early_stopping: dev loss "
        "did not improve by more than 0 for 3 evaluation(s) (patience 3); best 2 at step 4); its "
        "checkpoints and summary are as they were"), lines

    # More patience: the count goes on from 3 (not from 0), so one more bad evaluation stops it.
    more, logged = ScriptedDevLoss([2.9] * 5), Logged()
    resumed = Trainer(TINY, early_config(tmp_path, early_stopping_patience=4)).fit(
        batches, dev_batches, callbacks=[more, logged])
    assert resumed["start_step"] == 10 and resumed["steps"] == 12 and logged.steps == [11, 12]
    assert resumed["stop_reason"] == "early_stopping"
    assert resumed["early_stopping"]["evaluations_without_improvement"] == 4


def test_the_step_limit_comes_first_when_it_is_nearer(tmp_path):
    summary = Trainer(TINY, early_config(tmp_path, train_steps=6)).fit(
        batches, dev_batches, callbacks=[ScriptedDevLoss([3.0, 3.5, 3.6, 3.7])])
    assert summary["stop_reason"] == "train_steps" and summary["steps"] == 6
    assert summary["early_stopping"]["evaluations_without_improvement"] == 2


def test_the_evaluation_at_the_end_off_the_grid_counts_too(tmp_path):
    # dev_every_steps=2: evaluations at 2, 4 and 6, and the run's end at 7 is evaluated as well
    better, worse = tmp_path / "better", tmp_path / "worse"
    script = ScriptedDevLoss([3.0, 3.5, 3.6, 1.0])
    summary = Trainer(TINY, early_config(better, train_steps=7)).fit(
        batches, dev_batches, callbacks=[script])
    assert script.steps == [2, 4, 6, 7] and summary["stop_reason"] == "train_steps"
    assert summary["early_stopping"] == dict(summary["early_stopping"], best=1.0, best_step=7,
                                             evaluations_without_improvement=0)

    script = ScriptedDevLoss([3.0, 3.5, 3.6, 3.7])
    summary = Trainer(TINY, early_config(worse, train_steps=7)).fit(
        batches, dev_batches, callbacks=[script])
    assert summary["stop_reason"] == "train_steps"  # what ended it; the patience ran out with it
    assert summary["early_stopping"]["evaluations_without_improvement"] == 3
    # A raised step limit trains nothing more, and says that the patience is what ends it.
    lines, unused = [], ScriptedDevLoss([0.5] * 5)
    again = Trainer(TINY, early_config(worse, train_steps=20)).fit(
        batches, dev_batches, callbacks=[unused, ProgressLine(lines.append, 20)])
    assert unused.steps == [] and again["steps"] == 7 and again["ended_before"]
    assert again["stop_reason"] == "early_stopping"
    assert lines[-1].endswith(
        "step 7: nothing to train, this run had already stopped here (early_stopping: dev loss "
        "did not improve by more than 0 for 3 evaluation(s) (patience 3); best 3 at step 2); its "
        "checkpoints and summary are as they were"), lines


def test_early_stopping_without_a_dev_set_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="needs a dev set"):
        Trainer(TINY, early_config(tmp_path)).fit(batches)
