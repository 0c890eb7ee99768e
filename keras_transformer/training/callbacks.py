"""What a user sees during training: a progress line and TensorBoard scalars.

Callbacks get ``on_begin(step)`` before the first step (which builds and compiles),
``on_log(step, logs)`` after that first step and every ``log_every_steps`` with the interval's
averages (``loss``, ``accuracy``, ``learning_rate``, ``grad_norm``, ``step_seconds``,
``target_tokens_per_second``, ``tokens_per_second``, ``padding_fraction``, ``elapsed_seconds``,
``remaining_seconds``), ``on_dev(step, logs)`` after each evaluation on the dev set (``loss``,
``nll``, ``perplexity``, ``accuracy``; see ``TrainStep.evaluate``), and ``on_end(summary)`` with
the JSON summary (``ProgressLine`` then says why training stopped). ``callback.trainer`` is the running ``Trainer`` (its ``model``, ``strategy``...).
Callbacks run in list order and share the ``logs`` dict: a dev-BLEU callback placed before
``TensorBoard`` can add ``logs["bleu"]`` (and ``logs["chrf"]``) in ``on_dev`` and they are written
with the dev loss. The library writes nothing itself: ``ProgressLine`` hands its lines to a
``write`` function the program chooses.
"""

import datetime
import importlib.util
import math
import shlex
from typing import Callable, Optional

import tensorflow as tf
from tensorflow.core.framework import summary_pb2

# What tf.summary.scalar and tf.summary.text write, without importing the tensorboard package
# (not a dependency of TensorFlow 2.21): tensors tagged for TensorBoard's plugins.
def _metadata(plugin):
    return summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name=plugin)).SerializeToString()


_SCALAR_METADATA, _TEXT_METADATA = _metadata("scalars"), _metadata("text")


def write_scalar(name: str, value: float, step: int) -> None:
    tf.summary.write(name, tf.constant(value, tf.float32), step=step, metadata=_SCALAR_METADATA)


def write_text(name: str, markdown: str, step: int) -> None:
    tf.summary.write(name, tf.constant(markdown, tf.string), step=step, metadata=_TEXT_METADATA)


def timestamped(line: str) -> str:
    """``line`` after the local wall-clock time, e.g. ``2026-11-25 13:15:24 step 100/1000 | ...``,
    to match a log with TensorBoard's wall times or a crash."""
    return f"{datetime.datetime.now():%Y-%m-%d %H:%M:%S} {line}"


class Callback:
    trainer = None  # set by Trainer.fit
    # Whether it reads the dev BLEU (logs["bleu"]): train_run then refuses a run without one.
    requires_dev_bleu = False

    def on_begin(self, step: int) -> None:
        pass

    def on_log(self, step: int, logs: dict) -> None:
        pass

    def on_dev(self, step: int, logs: dict) -> None:
        pass

    def on_end(self, summary: dict) -> None:
        """The run's summary; alone (no ``on_begin``) when ``summary["ended_before"]``: the run
        had already ended in this folder and nothing was trained."""


def _duration(seconds: Optional[float]) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "?"
    return str(datetime.timedelta(seconds=int(round(seconds))))


class ProgressLine(Callback):
    """Timestamped lines (see ``timestamped``), one per log interval::

        2026-11-25 13:15:24 step 1200/100000 | loss 4.8120 | acc 0.312 | lr 6.10e-04 | gnorm 0.84 |
          0.52 s/step | 2,012 tgt tok/s | 4,180 src+tgt tok/s | pad 7.9% | 0:10:02 elapsed, 13:21:07 left

    (one line). ``loss`` is the label-smoothed training loss per real target token, ``gnorm`` the
    global norm of the applied gradient, ``tgt tok/s`` real target tokens per second (fairseq's
    ``wps``) and ``src+tgt`` source and target together; both exclude padding, whose share of the
    batches is ``pad``. After each dev evaluation::

        2026-11-25 13:20:01 step 1200 | dev loss 4.1023 | dev nll 3.5012 | dev ppl 33.15 | dev acc 0.402 | dev BLEU 9.81 | chrF2 38.27

    where ``nll`` is the unsmoothed negative log-likelihood per target subword and ``ppl`` its
    exp, the per-subword perplexity of the paper's Table 3; BLEU (sacreBLEU) and chrF2 are those of
    a dev-BLEU callback, when one runs before this one.
    """

    def __init__(self, write: Callable[[str], None], total_steps: Optional[int] = None):
        self.write = write
        self.total_steps = total_steps
        self._first = None

    def on_begin(self, step):
        self._first = step + 1
        compiled = self.trainer is not None and self.trainer.config.jit_compile
        xla = "; XLA compiles each new batch shape" if compiled else ""
        self.write(timestamped(f"step {step + 1}: building the model's step function (the first "
                               f"step takes longer{xla})"))

    def on_log(self, step, logs):
        total = f"/{self.total_steps}" if self.total_steps else ""
        first = " (includes building and compiling)" if step == self._first else ""
        self.write(timestamped(
            f"step {step}{total} | loss {logs['loss']:.4f} | acc {logs['accuracy']:.3f} | "
            f"lr {logs['learning_rate']:.2e} | gnorm {logs['grad_norm']:.3g} | "
            f"{logs['step_seconds']:.3g} s/step{first} | "
            f"{logs['target_tokens_per_second']:,.0f} tgt tok/s | "
            f"{logs['tokens_per_second']:,.0f} src+tgt tok/s | "
            f"pad {100 * logs['padding_fraction']:.1f}% | {_duration(logs['elapsed_seconds'])} "
            f"elapsed, {_duration(logs.get('remaining_seconds'))} left"))

    def on_dev(self, step, logs):
        bleu = f" | dev BLEU {logs['bleu']:.2f}" if "bleu" in logs else ""
        chrf = f" | chrF2 {logs['chrf']:.2f}" if "chrf" in logs else ""
        exported = f" | best so far, exported to {logs['exported']}" if "exported" in logs else ""
        self.write(timestamped(
            f"step {step} | dev loss {logs['loss']:.4f} | dev nll {logs['nll']:.4f} | "
            f"dev ppl {logs['perplexity']:.2f} | dev acc {logs['accuracy']:.3f}"
            + bleu + chrf + exported))

    def on_end(self, summary):
        reason = summary.get("stop_reason")
        if reason == "early_stopping" and summary.get("early_stopping"):
            from keras_transformer.training.early_stopping import EarlyStopping

            state = summary["early_stopping"]
            stopper = EarlyStopping(state["patience"], state["metric"], state["min_delta"], state)
            reason = f"{reason}: {stopper.describe()}"
        if summary.get("ended_before"):
            self.write(timestamped(
                f"step {summary['steps']}: nothing to train, this run had already stopped here "
                f"({reason}); its checkpoints and summary are as they were"))
        else:
            self.write(timestamped(f"step {summary['steps']}: training stopped ({reason})"))


def tensorboard_command(logdir: str) -> str:
    """The command that shows ``logdir``'s records, and how to install TensorBoard where it is
    missing: TensorFlow no longer brings it along, and ``pip install tensorboard`` is right in a
    clone, from a wheel and in Colab alike."""
    command = f"tensorboard --logdir={shlex.quote(logdir)}"
    if importlib.util.find_spec("tensorboard") is None:
        command += " (not installed here: pip install tensorboard)"
    return command


class TensorBoard(Callback):
    """Scalars under ``logdir/train`` and ``logdir/dev``, and the dev samples as text
    (``tensorboard --logdir=MODEL_DIR``; ``pip install tensorboard``)."""

    TRAIN_SCALARS = ("loss", "accuracy", "learning_rate", "grad_norm", "step_seconds",
                     "target_tokens_per_second", "tokens_per_second", "padding_fraction")

    def __init__(self, logdir: str):
        self.logdir = logdir
        self._writers = {}

    def _writer(self, name):
        """Made at its first record: a run with nothing to train writes no (empty) event file."""
        if name not in self._writers:
            self._writers[name] = tf.summary.create_file_writer(f"{self.logdir}/{name}")
        return self._writers[name]

    def on_log(self, step, logs):
        writer = self._writer("train")
        with writer.as_default(step=step):
            for name in self.TRAIN_SCALARS:
                write_scalar(name, logs[name], step)
        writer.flush()

    def on_dev(self, step, logs):
        writer = self._writer("dev")
        with writer.as_default(step=step):
            for name, value in logs.items():
                if isinstance(value, (int, float)) and name != "step":
                    write_scalar(name, value, step)
            if logs.get("samples"):
                write_text("translations", _samples_markdown(logs["samples"]), step)
        writer.flush()

    def on_end(self, summary):
        for writer in self._writers.values():
            writer.close()


def _samples_markdown(samples) -> str:
    """(source, reference, translation) triples as a Markdown table (TensorBoard's text plugin)."""
    def cell(text):
        return text.replace("|", "\\|").replace("\n", " ")

    rows = [f"| {cell(s)} | {cell(r)} | {cell(t)} |" for s, r, t in samples]
    return "\n".join(["| source | reference | translation |", "|---|---|---|", *rows])
