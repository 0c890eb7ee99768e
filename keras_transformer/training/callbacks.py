"""What a user sees during training: a progress line and TensorBoard scalars.

Callbacks get ``on_log(step, logs)`` every ``log_every_steps`` with the interval's averages
(``loss``, ``accuracy``, ``learning_rate``, ``tokens_per_second``, ``padding_fraction``,
``elapsed_seconds``, ``remaining_seconds``), ``on_dev(step, logs)`` after each evaluation on the
dev set, and ``on_end(summary)`` with the JSON summary. ``callback.trainer`` is the running
``Trainer`` (its ``model``, ``strategy``...). Callbacks run in list order and share the ``logs``
dict: a dev-BLEU callback placed before ``TensorBoard`` can add ``logs["bleu"]`` in ``on_dev``
and it is written with the dev loss. The library writes nothing itself:
``ProgressLine`` hands its lines to a ``write`` function the program chooses.
"""

import datetime
import math
from typing import Callable, Optional

import tensorflow as tf
from tensorflow.core.framework import summary_pb2

# What tf.summary.scalar writes, without importing the tensorboard package (not a dependency
# of TensorFlow 2.21): a float32 scalar tagged for TensorBoard's "scalars" plugin.
_SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")).SerializeToString()


def write_scalar(name: str, value: float, step: int) -> None:
    tf.summary.write(name, tf.constant(value, tf.float32), step=step, metadata=_SCALAR_METADATA)


class Callback:
    trainer = None  # set by Trainer.fit

    def on_log(self, step: int, logs: dict) -> None:
        pass

    def on_dev(self, step: int, logs: dict) -> None:
        pass

    def on_end(self, summary: dict) -> None:
        pass


def _duration(seconds: Optional[float]) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "?"
    return str(datetime.timedelta(seconds=int(round(seconds))))


class ProgressLine(Callback):
    """One line per log interval, e.g. ``step 1200/100000 | loss 4.812 | acc 0.312 |
    lr 6.1e-04 | 1,234 tok/s | pad 7.9% | 0:10:02 elapsed, 13:21:07 left`` (one line).
    """

    def __init__(self, write: Callable[[str], None], total_steps: Optional[int] = None):
        self.write = write
        self.total_steps = total_steps

    def on_log(self, step, logs):
        total = f"/{self.total_steps}" if self.total_steps else ""
        self.write(
            f"step {step}{total} | loss {logs['loss']:.4f} | acc {logs['accuracy']:.3f} | "
            f"lr {logs['learning_rate']:.2e} | {logs['tokens_per_second']:,.0f} tok/s | "
            f"pad {100 * logs['padding_fraction']:.1f}% | {_duration(logs['elapsed_seconds'])} "
            f"elapsed, {_duration(logs.get('remaining_seconds'))} left")

    def on_dev(self, step, logs):
        bleu = f" | dev BLEU {logs['bleu']:.2f}" if "bleu" in logs else ""
        self.write(f"step {step} | dev loss {logs['loss']:.4f} | dev acc {logs['accuracy']:.3f}"
                   + bleu)


class TensorBoard(Callback):
    """Scalars under ``logdir/train`` and ``logdir/dev`` (``tensorboard --logdir=MODEL_DIR``)."""

    TRAIN_SCALARS = ("loss", "accuracy", "learning_rate", "tokens_per_second", "padding_fraction")

    def __init__(self, logdir: str):
        self._train = tf.summary.create_file_writer(f"{logdir}/train")
        self._dev = tf.summary.create_file_writer(f"{logdir}/dev")

    def on_log(self, step, logs):
        with self._train.as_default(step=step):
            for name in self.TRAIN_SCALARS:
                write_scalar(name, logs[name], step)
        self._train.flush()

    def on_dev(self, step, logs):
        with self._dev.as_default(step=step):
            for name, value in logs.items():
                if isinstance(value, (int, float)) and name != "step":
                    write_scalar(name, value, step)
        self._dev.flush()

    def on_end(self, summary):
        self._train.close()
        self._dev.close()
