"""How long one update of a model takes on this machine, measured before training.

A recipe sized to a time budget needs the number of updates the budget will buy, which only
this machine can tell: a fresh copy of the model takes a few updates on real training batches,
untimed until each of their shapes is compiled, then timed. The copy (weights, optimizer) is
thrown away; the training run builds its own.
"""

import statistics
import time
from typing import Optional

# Updates timed after the untimed ones: enough that one slow batch does not decide (their median
# is reported).
TIMED = 9
# Untimed updates first: the step's tf.function traces each new batch shape until it relaxes
# them into one graph (``reduce_retracing``), and a trace is no update's cost.
UNTIMED = 3


def fresh_train_step(model_config, mixed_precision: str = "float32", jit_compile: bool = False):
    """(model, the trainer's ``TrainStep`` on it with the paper's optimizer) of a fresh model of
    ``model_config`` in ``mixed_precision``, the forward and backward pass compiled with XLA if
    ``jit_compile``: what a training run updates, without its data, checkpoints or logs."""
    from keras_transformer.training.schedule import paper_optimizer
    from keras_transformer.training.step import TrainStep
    from keras_transformer.weights import build_model

    model = build_model(model_config, mixed_precision)
    optimizer = paper_optimizer(model_config.d_model)
    optimizer.build(model.trainable_variables)
    step = TrainStep(model, optimizer, label_smoothing=model_config.label_smoothing,
                     pad_id=model_config.pad_id, jit_compile=jit_compile)
    return model, step


def timed_pass(step, batches):
    """(seconds per update, the updates' sums) of one pass of ``step`` over ``batches``, one update
    per batch, waiting for the last."""
    started = time.perf_counter()
    sums = [step.step_on_batches((batch,)) for batch in batches]
    float(sums[-1]["loss_sum"])
    return (time.perf_counter() - started) / len(batches), sums


def update_seconds(step, batches):
    """The seconds of each update of ``step``, one per batch of ``batches``, each waited for."""
    seconds = []
    for batch in batches:
        started = time.perf_counter()
        float(step.step_on_batches((batch,))["loss_sum"])
        seconds.append(time.perf_counter() - started)
    return seconds


def seconds_per_update(model_config, batches, mixed_precision: str = "float32",
                       jit_compile: bool = False) -> float:
    """Seconds per update of a fresh model of ``model_config`` (``fresh_train_step``), one update
    per batch of ``batches`` (a list of at least ``UNTIMED + 1`` training batches, as
    ``data.make_dataset`` yields them): the median over the batches after the first ``UNTIMED``.
    The median, because the untimed batches may all have had one shape: the first of another
    shape is then traced again (the relaxed graph), seconds that are no update's cost."""
    batches = list(batches)
    if len(batches) <= UNTIMED:
        raise ValueError(f"seconds_per_update needs more than {UNTIMED} batches, got "
                         f"{len(batches)}.")
    _, step = fresh_train_step(model_config, mixed_precision, jit_compile)
    timed_pass(step, batches[:UNTIMED])
    return statistics.median(update_seconds(step, batches[UNTIMED:]))


def seconds_per_update_of_run(data_config, preset: str, model_overrides: Optional[dict] = None,
                              mixed_precision: str = "float32", jit_compile: bool = False,
                              updates: int = TIMED, init_from: Optional[str] = None) -> float:
    """``seconds_per_update`` of the model ``training.run.train_run`` would build from the same
    arguments, on its first training batches, with the vocabulary a new run trains with
    (``run.run_vocabulary``: learned if missing; a fine-tuned run's, ``init_from``, its
    source's)."""
    from keras_transformer import data
    from keras_transformer.training.run import run_model_config, run_vocabulary

    tokenizer, data_config, _, _ = run_vocabulary(data_config, None, init_from)
    model_config = run_model_config(preset, model_overrides, tokenizer.vocab_size, data_config)
    dataset = data.make_dataset(data_config, tokenizer, "train", training=True, repeat=True,
                                read_in_part=True)
    return seconds_per_update(model_config, dataset.take(UNTIMED + updates), mixed_precision,
                              jit_compile)
