"""Checkpoints every N steps and every M minutes (section 6.1: "written at 10-minute intervals"),
resume, and the checkpoint averaging of section 6.1 (last 5 for base, last 20 for big):
``average_checkpoints`` into a model, ``average_run`` for a run folder (which checkpoints, where
the average goes), as the trainer, ``trainers.average_checkpoints`` and the quickstart call it.

Writing is crash-safe by construction of ``tf.train.CheckpointManager``: the variables are written
to temporary files that are renamed into place, and only then is the ``checkpoint`` index file
replaced atomically. A process killed at any moment therefore leaves the previous complete
checkpoint as the latest one.
"""

import os
import shutil
import tempfile
import time
from typing import Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from keras_transformer import runs, signals, writing
from keras_transformer.weights import build_model, model_checkpoint, restore_model


class Checkpointer:
    """When to save, and saving/restoring a ``model_checkpoint(model, optimizer=..., ...)``.

    On a multi-worker job every worker must take part in a save (the variables may need
    collective ops to be read); only the chief writes to ``directory``. The other workers write
    to a temporary folder of their own machine, deleted at once: nothing of theirs reaches
    ``directory``.
    """

    def __init__(self, checkpoint: tf.train.Checkpoint, directory: str, *,
                 every_steps: Optional[int] = None, every_minutes: Optional[float] = 10.0,
                 max_to_keep: int = 20, chief: bool = True, worker_id: int = 0):
        if every_steps is not None and every_steps <= 0:
            raise ValueError(f"checkpoint every_steps must be positive, got {every_steps}.")
        if every_minutes is not None and every_minutes <= 0:
            raise ValueError(f"checkpoint every_minutes must be positive, got {every_minutes}.")
        self.checkpoint = checkpoint
        self.directory = directory
        self.every_steps = every_steps
        self.every_minutes = every_minutes
        self.chief = chief
        self.worker_id = worker_id
        self.manager = (tf.train.CheckpointManager(checkpoint, directory, max_to_keep=max_to_keep)
                        if chief else None)
        self._last_save_time = time.monotonic()

    @property
    def latest(self) -> Optional[str]:
        """Path prefix of the last complete checkpoint in ``directory`` (None if there is none)."""
        return tf.train.latest_checkpoint(self.directory)

    def restore_latest(self, checkpoint: Optional[tf.train.Checkpoint] = None) -> Optional[str]:
        """Restores model, optimizer (its step, hence the learning rate, and Adam's moments);
        through ``checkpoint``, a view of some of the same objects, if given."""
        path = self.latest
        if path is not None:
            (checkpoint or self.checkpoint).restore(path).assert_existing_objects_matched()
        self._last_save_time = time.monotonic()
        return path

    def due(self, step: int) -> bool:
        """Whether ``step`` is a multiple of ``every_steps`` or the time interval has elapsed."""
        if self.every_steps and step % self.every_steps == 0:
            return True
        return bool(self.every_minutes) and (
            time.monotonic() - self._last_save_time >= 60.0 * self.every_minutes)

    def save(self, step: int) -> Optional[str]:
        """Writes a checkpoint numbered ``step``; returns its path on the chief. A write failure
        (a full disk) removes the half-written files and raises ``writing.WriteError``; the
        previous checkpoint stays the latest."""
        if not self.chief:
            scratch = tempfile.mkdtemp(prefix=f"keras_transformer_worker{self.worker_id}_")
            try:
                tf.train.CheckpointManager(self.checkpoint, scratch, max_to_keep=1).save(
                    checkpoint_number=step)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            self._last_save_time = time.monotonic()
            return None
        try:
            path = self.manager.save(checkpoint_number=step)
        except (OSError, tf.errors.OpError) as error:
            writing.remove_leftovers(self.directory, checkpoints=True)
            raise writing.WriteError(
                f"{writing.describe(error, os.path.join(self.directory, f'ckpt-{step}'))} "
                f"(the latest complete checkpoint is still {self.latest or 'none'})") from None
        self._last_save_time = time.monotonic()
        return path


def checkpoint_paths(directory: str) -> list:
    """All checkpoints the manager of ``directory`` keeps, oldest first."""
    state = tf.train.get_checkpoint_state(directory)
    if state is None:
        return []
    # get_checkpoint_state has already joined relative entries onto ``directory``.
    return list(state.all_model_checkpoint_paths)


# A run's training time up to a checkpoint, in seconds, is the checkpoint's variable of this name
# (what ``TrainingConfig.train_minutes`` bounds).
TRAINING_SECONDS = "training_seconds"


def holds_training_seconds(path: str) -> bool:
    """Whether the checkpoint ``path`` records its run's training time (those of earlier
    versions do not)."""
    return any(name.startswith(TRAINING_SECONDS + "/") for name, _ in tf.train.list_variables(path))


def training_seconds(model_dir: str) -> float:
    """The training time of the run in ``model_dir`` up to its latest checkpoint (0 without one,
    or for a checkpoint that does not record it)."""
    latest = tf.train.latest_checkpoint(model_dir)
    if latest is None or not holds_training_seconds(latest):
        return 0.0
    return float(tf.train.load_checkpoint(latest).get_tensor(
        TRAINING_SECONDS + "/.ATTRIBUTES/VARIABLE_VALUE"))


def checkpoint_step(path: str) -> int:
    """The update count a training checkpoint ``path`` (a prefix) was saved at: the step it
    stores (``Trainer``'s counter), whatever the file is called."""
    return int(tf.train.load_variable(path, "step/.ATTRIBUTES/VARIABLE_VALUE"))


def non_finite_variables(variables) -> list:
    """Names of the floating-point ``variables`` holding a NaN or an infinity."""
    return [v.path if hasattr(v, "path") else v.name for v in variables
            if np.issubdtype(np.dtype(v.dtype), np.floating)
            and not np.isfinite(np.asarray(v.numpy())).all()]


def average_checkpoints(model, paths: Sequence[str]) -> None:
    """Sets ``model``'s variables to the element-wise mean over the checkpoints ``paths``.

    Floating-point variables are averaged (in float64, then cast back); integer state (e.g.
    random seeds) is taken from the last checkpoint. The model must be built. A checkpoint holding
    a NaN or an infinity is refused (ValueError naming it): it would poison the average.
    """
    paths = list(paths)
    if not paths:
        raise ValueError("average_checkpoints needs at least one checkpoint path.")
    variables = model.variables
    totals = None
    for path in paths:
        signals.check()  # a signal stops the averaging between checkpoints
        restore_model(model, path)
        bad = non_finite_variables(variables)
        if bad:
            raise ValueError(f"checkpoint {path} holds NaN or infinite values ({len(bad)} of "
                             f"{len(variables)} variables, e.g. {bad[0]}); average only finite "
                             "checkpoints (pick them with --checkpoints).")
        values = [np.asarray(v.numpy(), np.float64) for v in variables]
        totals = values if totals is None else [t + v for t, v in zip(totals, values)]
    for variable, total in zip(variables, totals):
        if np.issubdtype(np.dtype(variable.dtype), np.floating):
            variable.assign((total / len(paths)).astype(variable.dtype))


def write_model_checkpoint(model, prefix: str, record: Optional[Tuple[str, str]] = None) -> str:
    """Writes ``model``'s variables alone to the checkpoint ``prefix``, whole or not at all.

    The files are written to a temporary folder beside it, then moved in with signals deferred:
    the old ``.index`` goes first and the new one comes last, so at every moment ``prefix`` is the
    old checkpoint, no loadable checkpoint, or the new one. Loads with ``restore_model``.

    ``record``: ``(path, text)`` of a file in the same folder that describes the checkpoint (the
    best dev BLEU's ``best.json``); it is staged with the checkpoint and moved in right after it,
    in the same signal-deferred region, so a SIGTERM never leaves one without the other.
    """
    directory = os.path.dirname(os.path.abspath(prefix))
    with writing.temporary_folder(directory, prefix) as staging:
        written = model_checkpoint(model).write(os.path.join(staging, "ckpt"))
        if record is not None:
            staged_record = os.path.join(staging, "record")
            with tf.io.gfile.GFile(staged_record, "w") as stream:
                stream.write(record[1])
        with signals.deferred():
            if tf.io.gfile.exists(prefix + ".index"):
                tf.io.gfile.remove(prefix + ".index")
            for name in sorted(tf.io.gfile.glob(written + "*"), key=lambda n: n.endswith(".index")):
                tf.io.gfile.rename(name, prefix + name[len(written):], overwrite=True)
            if record is not None:
                tf.io.gfile.rename(staged_record, record[0], overwrite=True)
    return prefix


def write_averaged_checkpoint(model, paths: Sequence[str], output_prefix: str) -> str:
    """Averages ``paths`` into ``model`` and writes the model alone to ``output_prefix`` (see
    ``write_model_checkpoint``); it loads like any checkpoint of a training run."""
    average_checkpoints(model, paths)
    return write_model_checkpoint(model, output_prefix)


def last_checkpoints(model_dir: str, count: int) -> list:
    """The ``count`` newest checkpoints of ``model_dir`` (fewer if it holds fewer), oldest first:
    the ones section 6.1 averages."""
    return checkpoint_paths(model_dir)[-count:] if count > 0 else []


def average_run(model_dir: str, last: int = 5, checkpoints: Optional[Sequence[str]] = None,
                output: Optional[str] = None, model=None) -> str:
    """Averages checkpoints of the training run in ``model_dir`` (section 6.1) and writes the
    average, model weights only, to ``output`` (default ``model_dir/averaged/ckpt``, the
    checkpoint named averaged in evaluate, translate and export); returns its prefix.

    ``checkpoints``: the prefixes to average (a ``.index`` suffix is dropped); default the
    ``last`` newest of ``model_dir`` (``last_checkpoints``), all there are when it holds fewer.
    ``model``: a built model of the run to average into (the trainer's own); default one built
    from the run's config.json."""
    if checkpoints:
        paths = [path.removesuffix(".index") for path in checkpoints]
    else:
        paths = last_checkpoints(model_dir, last)
        if not paths:
            raise ValueError(f"No checkpoints in {model_dir!r}.")
    if model is None:
        model = build_model(runs.model_config(runs.read_config(model_dir)))
    return write_averaged_checkpoint(model, paths,
                                     output or os.path.join(model_dir, runs.AVERAGED_PREFIX))
