"""The training loop of sections 5.2-5.4 and 6.1: a custom loop with ``strategy.run``.

``Trainer(model_config, TrainingConfig(...), strategy).fit(train_dataset_fn, dev_dataset_fn)``
builds the model and the paper's optimizer inside ``strategy.scope()``, resumes from the latest
checkpoint in ``model_dir`` (a new run: from another run's weights with ``init_from``), trains
until ``train_steps`` or ``train_minutes`` or SIGTERM (or early stopping on the dev set),
checkpoints every N steps and M minutes, evaluates on the dev set (with the moving average of
the weights if it keeps one, ``ema_decay``), optionally averages the last checkpoints, and returns
(and writes) a JSON summary.

Dataset functions take a ``tf.distribute.InputContext`` and return the per-replica
``tf.data.Dataset`` of ``((source_ids, target_input_ids), target_output_ids)`` batches (the data
pipeline's contract); the trainer repeats the training set forever.
"""

import contextlib
import dataclasses
import math
import os
import re
import signal
import time
import zlib
from typing import Callable, Optional, Sequence

import tensorflow as tf

from keras_transformer import runs, signals, writing
from keras_transformer.config import (TransformerConfig, as_python_scalars, is_boolean,
                                      is_integer, is_number)
from keras_transformer.training.callbacks import Callback
from keras_transformer.training.checkpoints import (TRAINING_SECONDS, Checkpointer, average_run,
                                                    holds_training_seconds,
                                                    write_model_checkpoint)
from keras_transformer.training.early_stopping import METRICS, EarlyStopping
from keras_transformer.training.ema import moving_average_weights
from keras_transformer.training.init_from import carried_record as carried_init_from
from keras_transformer.training.init_from import check_model
from keras_transformer.training.init_from import resolve as resolve_init_source
from keras_transformer.training.init_from import restore as restore_init_source
from keras_transformer.training.schedule import paper_optimizer
from keras_transformer.training.step import TrainStep
from keras_transformer.training.strategy import (is_chief, multi_device_input_without_autotune,
                                                  worker_count)
from keras_transformer.weights import PRECISION_POLICIES, build_model, model_checkpoint

RESUME_DATA = ("skip", "restart")
# What every worker votes on in every step (the step sums the votes over all replicas, so the
# workers of a multi-worker job stop and save at the same step): a signal it received, its own
# clock running out of train_minutes, its checkpoint interval having elapsed.
VOTES = ("sigterm", "sigint", "train_minutes", "save")


class NonFiniteError(RuntimeError):
    """The loss or the weights became NaN or infinite; nothing after the last finite checkpoint
    was saved, averaged or exported."""


def _lost(error) -> str:
    """What TensorFlow's error says of the lost worker: the tasks its coordination service found
    unhealthy and why, e.g. ``/job:worker/replica:0/task:1: stopped sending heartbeats``; else the
    error's kind (its first line, "Graph execution error:", says nothing)."""
    unhealthy = re.search(r"tasks are unhealthy \(([^)]*)\):\s*((?:/job:\S+\s*)+)", str(error))
    if unhealthy is None:
        return type(error).__name__
    return f"{', '.join(dict.fromkeys(unhealthy.group(2).split()))}: {unhealthy.group(1)}"


class WorkerLostError(RuntimeError):
    """Another worker of a multi-worker job is gone (killed, out of memory, its machine lost) and
    took a collective with it. The job's last checkpoint is whole: the same command on every
    worker resumes from it. ``exit_status`` 138 is what Kubeflow's training operator (the
    ExitCode restart policy) reserves for a retryable error the program reports itself."""

    exit_status = 138


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
    """How to train (the model's shape is ``TransformerConfig``).

    ``train_steps`` counts optimizer updates (each of ``accumulation_steps`` micro-batches per
    replica); ``train_minutes`` bounds the run's wall-clock training time in all, counted across
    resumptions as its updates are (fairseq's ``--stop-time-hours``; None: no bound). Either bound
    stops training, and a run resumed past one trains nothing; at least one is required.
    ``resume_data="skip"`` replays the input pipeline past the batches consumed before a restart
    (exact, but costs reading them again); ``"restart"`` starts the pipeline afresh (cheap, some
    batches are seen twice).

    ``init_from``: a run folder, checkpoint prefix or SavedModel whose model weights a new run
    starts from (fine-tuning, see ``training/init_from.py``); a run with checkpoints of its own
    resumes from them instead. ``early_stopping_patience``: stop after this many dev evaluations
    (every ``dev_every_steps``) without an improvement of the dev ``early_stopping_metric``
    ("loss" or "bleu", the latter needs a dev-BLEU callback) by more than
    ``early_stopping_min_delta`` (None: never). ``ema_decay``: keep an exponential moving average
    of the weights with this decay in (0, 1) (``training/ema.py``): the dev set is evaluated with
    it, and the end of training writes it to ``model_dir/ema/ckpt`` (None: no average).
    """

    model_dir: str
    train_steps: Optional[int] = 100_000
    train_minutes: Optional[float] = None
    warmup_steps: int = 4000
    learning_rate_scale: float = 1.0
    accumulation_steps: int = 1
    jit_compile: bool = False
    mixed_precision: str = "float32"
    checkpoint_every_steps: Optional[int] = None
    checkpoint_every_minutes: Optional[float] = 10.0
    keep_checkpoints: int = 20
    average_last: int = 0
    log_every_steps: int = 100
    dev_every_steps: Optional[int] = None
    resume_data: str = "skip"
    init_from: Optional[str] = None
    early_stopping_patience: Optional[int] = None
    early_stopping_metric: str = "loss"
    early_stopping_min_delta: float = 0.0
    ema_decay: Optional[float] = None

    def __post_init__(self):
        def positive(name, integer=True, optional=False):
            value = getattr(self, name)
            if value is None and optional:
                return
            if not (is_integer(value) if integer else is_number(value)) or not value > 0:
                raise ValueError(f"TrainingConfig.{name} must be a positive "
                                 f"{'integer' if integer else 'number'}, got {value!r}.")

        if not self.model_dir:
            raise ValueError("TrainingConfig.model_dir must be a directory path.")
        as_python_scalars(self)
        positive("train_steps", optional=True)
        positive("train_minutes", integer=False, optional=True)
        if self.train_steps is None and self.train_minutes is None:
            raise ValueError("Set train_steps or train_minutes (or both) so training ends.")
        for name in ("warmup_steps", "accumulation_steps", "keep_checkpoints", "log_every_steps"):
            positive(name)
        positive("learning_rate_scale", integer=False)
        positive("checkpoint_every_steps", optional=True)
        positive("checkpoint_every_minutes", integer=False, optional=True)
        positive("dev_every_steps", optional=True)
        if not is_boolean(self.jit_compile):
            raise ValueError(f"TrainingConfig.jit_compile must be True or False, got "
                             f"{self.jit_compile!r}.")
        if self.mixed_precision not in PRECISION_POLICIES:
            raise ValueError(f"mixed_precision must be one of {sorted(PRECISION_POLICIES)}, "
                             f"got {self.mixed_precision!r}.")
        if self.resume_data not in RESUME_DATA:
            raise ValueError(f"resume_data must be one of {RESUME_DATA}, got {self.resume_data!r}.")
        if self.early_stopping_patience is not None:
            # The same checks as the stopper's own, before anything is built.
            EarlyStopping(self.early_stopping_patience, self.early_stopping_metric,
                          self.early_stopping_min_delta)
            if not self.dev_every_steps:
                raise ValueError(f"early_stopping_patience={self.early_stopping_patience} needs "
                                 "dev_every_steps: the dev evaluations it counts.")
        elif self.early_stopping_metric not in METRICS:
            raise ValueError(f"early_stopping_metric must be one of {sorted(METRICS)}, got "
                             f"{self.early_stopping_metric!r}.")
        if self.ema_decay is not None and not (is_number(self.ema_decay)
                                               and 0.0 < self.ema_decay < 1.0):
            raise ValueError(f"ema_decay must be a number in (0, 1), e.g. 0.999, got "
                             f"{self.ema_decay!r}.")
        if self.init_from is not None and not self.init_from:
            raise ValueError("init_from='': name a run folder, a checkpoint prefix or a "
                             "SavedModel, or None.")
        if not 0 <= self.average_last <= self.keep_checkpoints:
            raise ValueError(f"average_last={self.average_last} must be between 0 and "
                             f"keep_checkpoints={self.keep_checkpoints} (older checkpoints are "
                             "deleted before they could be averaged).")


class Trainer:
    """The model, its optimizer, one ``TrainStep`` and the checkpoints of one ``model_dir``.

    ``model_fn`` (optional) returns a built model to use instead of ``build_model``; it is called
    inside ``strategy.scope()``. ``run_info`` (e.g. the data config and vocabulary path) is
    recorded in ``model_dir/config.json`` next to the model and training configs.
    """

    def __init__(self, model_config: TransformerConfig, config: TrainingConfig,
                 strategy: Optional[tf.distribute.Strategy] = None,
                 model_fn: Optional[Callable[[], "tf.keras.Model"]] = None,
                 run_info: Optional[dict] = None):
        self.run_info = dict(run_info or {})
        self.model_config = model_config
        self.config = config
        self.strategy = strategy or tf.distribute.get_strategy()
        self.chief = is_chief(self.strategy)
        self.workers = worker_count(self.strategy)
        # Fine-tuning's source, checked before anything is built; not needed (nor read) once the
        # run has checkpoints of its own.
        self.init_source = None
        if config.init_from and not tf.train.latest_checkpoint(config.model_dir):
            self.init_source = resolve_init_source(config.init_from)
            check_model(self.init_source, model_config)
        self.early_stopping = None
        with self.strategy.scope():
            self.model = model_fn() if model_fn else build_model(model_config,
                                                                 config.mixed_precision)
            self.optimizer = paper_optimizer(
                model_config.d_model, config.warmup_steps, config.learning_rate_scale,
                loss_scaling=config.mixed_precision == "float16", ema_decay=config.ema_decay)
            # Built here, not lazily in the first step: a Keras 3 optimizer whose slots are
            # created inside the step's tf.function fails ("You must feed a value for placeholder").
            self.optimizer.build(self.model.trainable_variables)
        self.train_step = TrainStep(
            self.model, self.optimizer, self.strategy,
            label_smoothing=model_config.label_smoothing, pad_id=model_config.pad_id,
            accumulation_steps=config.accumulation_steps, jit_compile=config.jit_compile)
        # Our own counter: with float16 loss scaling, skipped updates do not advance the
        # optimizer's iterations, but they did consume data.
        self.step_counter = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        # The run's training time up to each checkpoint, so that train_minutes bounds a run
        # resumed after a preemption as it bounds one that never stopped.
        self.training_seconds = tf.Variable(0.0, dtype=tf.float64, trainable=False,
                                            name="training_seconds")
        self.checkpoint = model_checkpoint(self.model, optimizer=self.optimizer,
                                           step=self.step_counter,
                                           **{TRAINING_SECONDS: self.training_seconds})
        resolver = getattr(self.strategy, "cluster_resolver", None)
        self.checkpointer = Checkpointer(
            self.checkpoint, config.model_dir, every_steps=config.checkpoint_every_steps,
            every_minutes=config.checkpoint_every_minutes, max_to_keep=config.keep_checkpoints,
            chief=self.chief, worker_id=getattr(resolver, "task_id", 0) or 0)
        self._finite_fn = None

    @property
    def step(self) -> int:
        return int(self.step_counter.numpy())

    def learning_rate(self) -> float:
        """The learning rate of the next update (Eq. 3)."""
        return float(self.optimizer.learning_rate)  # the schedule at the optimizer's iterations

    def restore(self) -> Optional[str]:
        """Restores the latest checkpoint of ``model_dir`` if there is one; returns its path.
        One written before runs counted their training time restores without it (none before)."""
        latest = self.checkpointer.latest
        if latest is not None and not holds_training_seconds(latest):
            return self.checkpointer.restore_latest(model_checkpoint(
                self.model, optimizer=self.optimizer, step=self.step_counter))
        return self.checkpointer.restore_latest()

    def _write_run_config(self, run_config: Optional[dict] = None):
        if self.chief:
            tf.io.gfile.makedirs(self.config.model_dir)
            runs.write_json(os.path.join(self.config.model_dir, runs.CONFIG_FILE),
                            run_config or self._checked_run_config())

    def _checked_run_config(self) -> dict:
        """What ``config.json`` will record of this run, after checking that the checkpoints in
        ``model_dir`` (if any) are of this model and can be resumed by it."""
        path = os.path.join(self.config.model_dir, runs.CONFIG_FILE)
        info = dict(self.run_info)
        if self.init_source is not None:
            info[runs.INIT_FROM_KEY] = {**self.init_source.record(),
                                        **info.get(runs.INIT_FROM_KEY, {})}
        if tf.io.gfile.exists(path) and tf.train.latest_checkpoint(self.config.model_dir):
            previous_run = runs.read_config(self.config.model_dir)
            if runs.INIT_FROM_KEY in previous_run:  # where its first weights came from, for good
                info[runs.INIT_FROM_KEY] = carried_init_from(previous_run)
            previous_ema = (previous_run.get("training") or {}).get("ema_decay")
            if (previous_ema is None) != (self.config.ema_decay is None):
                # The averages are optimizer variables: with or without them, the optimizer's
                # variables are numbered differently and a restore would mix them up.
                raise ValueError(
                    f"{self.config.model_dir} holds checkpoints of a run "
                    + ("without a moving average of the weights" if previous_ema is None
                       else f"with a moving average of the weights (ema_decay={previous_ema})")
                    + "; resume it "
                    + ("without --ema_decay" if previous_ema is None
                       else f"with --ema_decay={previous_ema}")
                    + ", or use another model_dir.")
            previous = previous_run.get("model")
            # Through from_dict, so fields added since that run was written take their defaults.
            previous = TransformerConfig.from_dict(previous).to_dict() if previous else {}
            current = self.model_config.to_dict()
            if previous != current:
                changed = sorted(k for k in current if previous.get(k) != current[k])
                raise ValueError(
                    f"{self.config.model_dir} holds checkpoints of another model (differs in "
                    f"{', '.join(changed)}); use another model_dir or the same model settings.")
        return {"model": self.model_config.to_dict(), "training": dataclasses.asdict(self.config),
                **info}

    def weights_are_finite(self) -> bool:
        """Whether every floating-point variable a checkpoint would hold (the model's and the
        optimizer's) is finite: checked before every save, since the loss of a step is computed
        with the weights from before its update."""
        if self._finite_fn is None:
            variables = [v for v in self.checkpoint_variables() if tf.as_dtype(v.dtype).is_floating]
            self._finite_fn = tf.function(lambda: tf.reduce_all(
                [tf.reduce_all(tf.math.is_finite(v)) for v in variables]), autograph=False)
        return bool(self._finite_fn())

    def checkpoint_variables(self) -> list:
        return list(self.model.variables) + list(self.optimizer.variables)

    def fit(self, train_dataset_fn: Callable, dev_dataset_fn: Optional[Callable] = None,
            callbacks: Sequence[Callback] = ()) -> dict:
        """Trains; returns the summary (also written to ``model_dir/summary.json`` by the chief).

        ``stop_reason`` is "train_steps", "train_minutes", "early_stopping" (then
        ``summary["early_stopping"]`` holds the metric, its best value and step, and the count
        of evaluations without improvement) or a signal's. SIGTERM/SIGINT
        (``keras_transformer.signals``) end training after the current step with a checkpoint,
        skip what would follow (dev evaluation, averaging) and set ``stop_reason`` to
        "sigterm"/"sigint". On a multi-worker job every worker stops at the same step for the
        same reason: a signal to any worker (each then behaves as if it had received it), or any
        worker's clock. Raises ``NonFiniteError`` if the loss or the weights become NaN/Inf:
        nothing after the last finite checkpoint is saved, and it stays the latest. A run that
        had already ended in ``model_dir`` (its train_steps, or early stopping) trains nothing:
        the recorded summary comes back with ``ended_before`` set, and no file changes.
        """
        config = self.config
        for callback in callbacks:
            callback.trainer = self
        run_config = self._checked_run_config()
        if self.chief:  # what a killed run left half-written
            writing.remove_leftovers(config.model_dir, checkpoints=True)
            for folder in (runs.AVERAGED, runs.EMA, runs.BEST):
                writing.remove_leftovers(os.path.join(config.model_dir, folder))
        restored = self.restore()
        if restored is None and self.init_source is not None:
            restore_init_source(self.model, self.init_source)
        if self.workers > 1:
            with self._peers_watched():
                self._check_workers_agree(restored)
        self.early_stopping = self._early_stopping(restored, dev_dataset_fn)
        ended = self._ended_before(restored)
        if ended is not None:
            for callback in callbacks:
                callback.on_end(ended)
            return ended
        self._write_run_config(run_config)
        start_step = self.step
        skip_steps = start_step if config.resume_data == "skip" else 0

        def repeated(context):
            dataset = train_dataset_fn(context).repeat()
            # One input pipeline feeds all replicas of its worker, k micro-batches each per step.
            replicas = context.num_replicas_in_sync // context.num_input_pipelines
            skip = skip_steps * config.accumulation_steps * replicas
            return dataset.skip(skip) if skip else dataset

        with multi_device_input_without_autotune():  # a mirrored run's end without a wait
            iterator = iter(self.strategy.distribute_datasets_from_function(repeated))
            dev_data = (self.strategy.distribute_datasets_from_function(dev_dataset_fn)
                        if dev_dataset_fn else None)
            with signals.polled(), self._peers_watched():
                return self._loop(iterator, dev_data, callbacks, start_step, restored)

    @contextlib.contextmanager
    def _peers_watched(self):
        """A collective that a lost worker broke (on a multi-worker job) becomes WorkerLostError."""
        try:
            yield
        except (tf.errors.UnavailableError, tf.errors.AbortedError) as error:
            if self.workers == 1:
                raise
            raise WorkerLostError(
                f"another worker of the job is gone, after step {self.step} ({_lost(error)}); "
                f"the last checkpoint, {self.checkpointer.latest or 'none yet'}, is whole: "
                "start every worker again with the same command to resume from it") from None

    def _check_workers_agree(self, restored):
        """Every worker must start from the chief's step and weights (each restores on its own:
        from the chief's files, which on several machines need a shared file system). Two
        collectives; a disagreement is the same ValueError on every worker, not a hang."""
        fingerprint = 0
        for variable in self.checkpoint_variables():
            fingerprint = zlib.crc32(variable.numpy().tobytes(), fingerprint)
        mine = [float(self.step), float(fingerprint)]
        chiefs, _ = self.train_step.share(mine)
        _, disagreeing = self.train_step.share([float(list(chiefs) != mine)])
        if disagreeing[0] > 0:
            raise ValueError(
                f"the workers do not start from the same step and weights (the chief's step: "
                f"{int(chiefs[0])}): every worker must read the chief's model_dir (this "
                f"worker's: {self.config.model_dir}) and init_from; on several machines, from a "
                "shared file system (NFS, GCS, S3) at the same path on every worker.")

    def _early_stopping(self, restored, dev_dataset_fn) -> Optional[EarlyStopping]:
        config = self.config
        if not config.early_stopping_patience:
            return None
        if dev_dataset_fn is None:
            raise ValueError(f"early_stopping_patience={config.early_stopping_patience} needs a "
                             "dev set to evaluate on; there is none.")
        # The count goes on where this folder's last run left it.
        state = runs.read_summary(config.model_dir).get("early_stopping") if restored else None
        return EarlyStopping(config.early_stopping_patience, config.early_stopping_metric,
                             config.early_stopping_min_delta, state)

    def _ended_before(self, restored) -> Optional[dict]:
        """The recorded summary, with ``ended_before`` set, when the restored run had already
        ended here (its train_steps reached, or early stopping) and its last stages (dev
        evaluation, averages) were done: run again, it trains nothing and keeps the record
        rather than replacing the run's figures with those of an empty run. None otherwise; a
        run a signal stopped at that step is finished now."""
        config = self.config
        reached = config.train_steps is not None and self.step >= config.train_steps
        out_of_time = self._seconds_left() == 0
        stopped = self.early_stopping is not None and self.early_stopping.should_stop
        if not restored or not (reached or out_of_time or stopped):
            return None
        # Every worker reads the chief's summary (the folder is shared): all decide alike.
        recorded = runs.read_summary(config.model_dir)
        if (recorded.get("steps") != self.step or recorded.get("stop_reason") not in (
                "train_steps", "train_minutes", "early_stopping")):
            return None
        if stopped and not (reached or out_of_time):
            # A raised limit: what ends the run now is the patience its last evaluation used up.
            return dict(recorded, ended_before=True, stop_reason="early_stopping")
        return dict(recorded, ended_before=True)

    def _seconds_left(self) -> Optional[float]:
        """The training time ``train_minutes`` leaves the run after its restored checkpoint
        (None: no time bound)."""
        if not self.config.train_minutes:
            return None
        return max(60.0 * self.config.train_minutes - float(self.training_seconds.numpy()), 0.0)

    def _stops_early(self, logs, step) -> bool:
        """Feeds one dev evaluation to the early stopping; whether training should stop."""
        metric = self.config.early_stopping_metric
        if metric not in logs:
            raise ValueError(f"early_stopping_metric={metric!r}: the dev evaluation has no "
                             f"{metric!r} (dev BLEU needs the DevBleu callback, e.g. "
                             "dev_bleu_sentences > 0).")
        return self.early_stopping.update(logs[metric], step)

    def _check_finite(self, step, run):
        """Stops (NonFiniteError) if the weights are not finite; each step is checked once."""
        if run.get("finite_step") == step:
            return
        if not self.weights_are_finite():
            self._stop_non_finite(step, run, f"the update of step {step} made weights NaN or "
                                             "infinite")
        run["finite_step"] = step

    def _stop_non_finite(self, step, run, what):
        self._write_summary(run, step, "non_finite")
        raise NonFiniteError(
            f"{what} (learning rate {self.learning_rate():.3g}); nothing of it was saved, and the "
            f"latest checkpoint {self.checkpointer.latest or '(none: nothing was saved yet)'} is "
            "the last finite one. Lower --learning_rate_scale, raise --warmup_steps, or use "
            "float32/bfloat16 instead of float16.")

    def _save(self, step, run):
        self._check_finite(step, run)
        self.training_seconds.assign(run["seconds_before"] + time.monotonic() - run["started"])
        self.checkpointer.save(step)
        run["saved_step"] = step

    def _evaluate_unless_stopped(self, dev_data, step, callbacks):
        """Dev evaluation that a signal ends at once; returns its logs, or None if stopped. On a
        multi-worker job it is a collective that the workers must leave together: there a signal
        waits for its end (and stops training at the next step's vote)."""
        if self.workers > 1:
            return self._evaluate(dev_data, step, callbacks)
        try:
            with signals.raising():
                return self._evaluate(dev_data, step, callbacks)
        except signals.Interrupted:
            return None

    def _loop(self, iterator, dev_data, callbacks, start_step, restored):
        config = self.config
        started = time.monotonic()
        budget = self._seconds_left()
        interval = _Interval(time.monotonic())
        run = dict(started=started, start_step=start_step, restored=restored, last={},
                   seconds_before=float(self.training_seconds.numpy()),
                   dev_logs={}, saved_step=start_step if restored else None,
                   source_tokens=0.0, target_tokens=0.0)
        stop_reason = "train_minutes" if budget == 0 else None  # resumed with no time left
        step = start_step
        skips_are_normal = config.mixed_precision == "float16"  # dynamic loss scaling
        for callback in callbacks:
            callback.on_begin(start_step)

        def log_interval(step):
            """The steps since the last progress line, to the callbacks and the summary."""
            nonlocal interval
            self._check_finite(step, run)
            last = interval.logs(time.monotonic())
            last["learning_rate"] = self.learning_rate()
            elapsed = time.monotonic() - started
            last["elapsed_seconds"] = elapsed
            last["remaining_seconds"] = remaining_seconds(
                config.train_steps, step, start_step, elapsed, run["first_update_seconds"],
                budget)
            for callback in callbacks:
                callback.on_log(step, last)
            run["last"] = last
            interval = _Interval(time.monotonic())

        while stop_reason is None:
            if config.train_steps is not None and step >= config.train_steps:
                stop_reason = "train_steps"
                break
            if self.early_stopping is not None and self.early_stopping.should_stop:
                stop_reason = "early_stopping"  # resumed, stopped early before its last stages
                break
            out_of_time = budget is not None and time.monotonic() - started >= budget
            received = signals.received()
            mine = {"sigterm": received == signal.SIGTERM, "sigint": received == signal.SIGINT,
                    "train_minutes": out_of_time, "save": self.checkpointer.due(step + 1)}
            stats = {k: v.numpy() for k, v in self.train_step.step(
                iterator, [float(mine[name]) for name in VOTES]).items()}
            step += 1
            self.step_counter.assign(step)
            if step == start_step + 1:
                run["first_update_seconds"] = time.monotonic() - started
            loss = float(stats["loss_sum"]) / max(float(stats["target_tokens"]), 1.0)
            if not math.isfinite(loss) and not skips_are_normal:
                self._stop_non_finite(step, run, f"the training loss became {loss} at step {step}")
            interval.add(stats)
            run["source_tokens"] += float(stats["source_tokens"])
            run["target_tokens"] += float(stats["target_tokens"])
            votes = {name: bool(total > 0) for name, total in zip(VOTES, stats["votes"])}
            if votes["sigterm"] or votes["sigint"]:  # this worker's or a peer's: all stop as one
                signals.received_by_peer(signal.SIGTERM if votes["sigterm"] else signal.SIGINT)
            stop = votes["sigterm"] or votes["sigint"] or votes["train_minutes"]
            save_due = votes["save"]
            is_last = stop or step == config.train_steps
            # The first step is shown too: it says how long building and compiling took.
            if step % config.log_every_steps == 0 or is_last or step == start_step + 1:
                log_interval(step)
            if dev_data is not None and config.dev_every_steps and (
                    step % config.dev_every_steps == 0) and not stop:
                self._check_finite(step, run)
                logs = self._evaluate_unless_stopped(dev_data, step, callbacks)
                run["dev_logs"] = logs if logs is not None else run["dev_logs"]
                interval.started = time.monotonic()
                if (logs is not None and self.early_stopping is not None
                        and self._stops_early(logs, step)):
                    # Every worker saw the same all-reduced dev loss (and the same dev BLEU):
                    # they all stop at this step, whose steps since the last line are shown.
                    stop_reason = "early_stopping"
                    if interval.steps:
                        log_interval(step)
                    break
            if stop:  # agreed by all replicas and workers through the step's votes
                stop_reason = (signals.reason(signals.received()) if signals.received()
                               else "train_minutes")
                break
            if save_due:
                self._save(step, run)
        if run["saved_step"] != step:
            self._save(step, run)
        run["wall"] = time.monotonic() - started
        averaged = None
        if not signals.received():
            # The last stages end at once on a signal; the checkpoint above is what counts.
            try:
                if dev_data is not None and run["dev_logs"].get("step") != step:
                    logs = self._evaluate_unless_stopped(dev_data, step, callbacks)
                    run["dev_logs"] = logs or run["dev_logs"]
                    # It counts for early stopping as every evaluation does (as in fairseq and
                    # OpenNMT-tf), so the best it records is the best of them all, as best/ckpt is.
                    if logs and self.early_stopping is not None:
                        self._stops_early(logs, step)
                with signals.raising():
                    if config.ema_decay and self.chief:
                        run["ema"] = self.write_moving_average()
                    if config.average_last and self.chief:
                        averaged = self.average_last(config.average_last)
            except signals.Interrupted:
                averaged = None
        if signals.received():
            stop_reason = signals.reason(signals.received())
        summary = self._write_summary(run, step, stop_reason, averaged)
        for callback in callbacks:
            callback.on_end(summary)
        return summary

    def _write_summary(self, run, step, stop_reason, averaged=None) -> dict:
        wall = run.get("wall", time.monotonic() - run["started"])
        last, dev_logs = run["last"], run["dev_logs"]
        summary = {
            "start_step": run["start_step"], "steps": step,
            "steps_this_run": step - run["start_step"], "stop_reason": stop_reason,
            "wall_seconds": wall,
            "source_tokens": run["source_tokens"], "target_tokens": run["target_tokens"],
            "tokens_per_second": (run["source_tokens"] + run["target_tokens"]) / max(wall, 1e-9),
            "final_train_loss": last.get("loss"), "final_train_accuracy": last.get("accuracy"),
            "final_learning_rate": self.learning_rate(),
            "final_dev_loss": dev_logs.get("loss"), "final_dev_accuracy": dev_logs.get("accuracy"),
            "final_dev_perplexity": dev_logs.get("perplexity"),
            "resumed_from": run["restored"], "latest_checkpoint": self.checkpointer.latest,
            "averaged_checkpoint": averaged, "ema_checkpoint": run.get("ema"),
            "num_replicas": self.strategy.num_replicas_in_sync,
            "early_stopping": self.early_stopping.state() if self.early_stopping else None,
            "training_seconds": float(self.training_seconds.numpy()),  # in all, to the last save
        }
        if self.chief:
            return runs.write_json(os.path.join(self.config.model_dir, runs.SUMMARY_FILE), summary)
        return summary

    def _evaluate(self, dev_data, step, callbacks):
        # With an EMA, what is evaluated (and what a dev-BLEU callback keeps as the best) is the
        # average: the weights that would be exported.
        with moving_average_weights(self.model, self.optimizer):
            logs = self.train_step.evaluate(dev_data)
            logs["step"] = step
            for callback in callbacks:
                callback.on_dev(step, logs)
        if self.workers > 1:
            # The dev BLEU is the chief's alone: the other workers take it from the chief, so
            # that early stopping decides the same everywhere.
            (has_bleu, bleu, chrf), _ = self.train_step.share(
                [float("bleu" in logs), logs.get("bleu", 0.0), logs.get("chrf", 0.0)])
            if has_bleu:
                logs["bleu"], logs["chrf"] = float(bleu), float(chrf)
        return logs

    def write_moving_average(self) -> str:
        """Writes the moving average of the weights (``ema_decay``) as ``model_dir/ema/ckpt``,
        model weights only, like an averaged checkpoint; returns its prefix."""
        with moving_average_weights(self.model, self.optimizer):
            return write_model_checkpoint(self.model,
                                          os.path.join(self.config.model_dir, runs.EMA_PREFIX))

    def average_last(self, count: int) -> str:
        """Averages the last ``count`` checkpoints of ``model_dir`` into ``model_dir/averaged/ckpt``
        (section 6.1). The in-memory model then holds the averaged weights."""
        return average_run(self.config.model_dir, count, model=self.model)


class _Interval:
    """Sums of one logging interval."""

    def __init__(self, started):
        self.started = started
        self.sums = {}
        self.steps = 0
        self.norms = []

    def add(self, stats):
        self.steps += 1
        for name, value in stats.items():
            if name == "grad_norm":
                # float16 loss scaling skips overflowing steps: their norm is not a gradient's.
                if math.isfinite(float(value)):
                    self.norms.append(float(value))
            elif name != "votes":
                self.sums[name] = self.sums.get(name, 0.0) + float(value)

    def logs(self, now):
        s = self.sums
        seconds = max(now - self.started, 1e-9)
        tokens = s["target_tokens"]
        real = s["source_tokens"] + tokens
        positions = s["source_positions"] + s["target_positions"]
        return {
            "loss": s["loss_sum"] / max(tokens, 1.0),
            "accuracy": s["correct"] / max(tokens, 1.0),
            "grad_norm": sum(self.norms) / len(self.norms) if self.norms else math.nan,
            "step_seconds": seconds / max(self.steps, 1),
            # Real (non-padding) target tokens, what fairseq's "wps" counts; and source + target.
            "target_tokens_per_second": tokens / seconds,
            "tokens_per_second": real / seconds,
            "padding_fraction": 1.0 - real / max(positions, 1.0),
            "steps_in_interval": self.steps,
        }


def remaining_seconds(train_steps, step, start_step, elapsed, first_update_seconds, budget):
    """The seconds a run at ``step`` has left, ``elapsed`` seconds after it resumed at
    ``start_step``: the sooner of ``train_steps`` (a total, or None) at the pace of the updates after
    the first, which also built and compiled the step (so none yet after it alone), and of its time
    ``budget`` (or None); None if neither is known."""
    candidates = []
    if train_steps is not None and step - start_step > 1:
        pace = (elapsed - first_update_seconds) / (step - start_step - 1)
        candidates.append((train_steps - step) * pace)
    if budget is not None:
        candidates.append(max(budget - elapsed, 0.0))
    return min(candidates) if candidates else None
