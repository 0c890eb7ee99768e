"""An exponential moving average (EMA) of the weights, kept beside the model during training
(fairseq's ``--ema-decay``, OpenNMT-tf's ``moving_average_decay``): the cheap cousin of averaging
the last checkpoints (section 6.1), updated at every step instead of read back from disk.

``TrainingConfig(ema_decay=D)`` asks the optimizer for it (``schedule.paper_optimizer``, Keras's
``use_ema``), so the averages are optimizer variables: mirrored like Adam's moments, saved in
every checkpoint and restored on resume. With an EMA the trainer evaluates the dev set with the
averaged weights (``moving_average_weights``) and, at the end, writes them as
``model_dir/ema/ckpt`` (model weights only, ``--checkpoint=ema``).
"""

import contextlib

import tensorflow as tf


def moving_averages(optimizer) -> list:
    """The optimizer's averages, one per trainable variable in its order (empty: no EMA)."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)  # LossScaleOptimizer
    if not getattr(inner, "use_ema", False):
        return []
    return list(inner._model_variables_moving_average)  # Keras keeps no public name for them


@contextlib.contextmanager
def moving_average_weights(model, optimizer):
    """Within the block the model's trainable variables hold the optimizer's averages; after it
    (also after an exception or a signal) their own values again. Nothing happens without an
    EMA. Call it outside ``strategy.run`` (cross-replica context: every replica's copy is set)."""
    averages = moving_averages(optimizer)
    if not averages:
        yield
        return
    variables = list(model.trainable_variables)
    if len(variables) != len(averages):
        raise ValueError(f"the optimizer averages {len(averages)} variables, the model has "
                         f"{len(variables)} trainable ones: not the optimizer of this model.")
    own = [tf.identity(v.value) for v in variables]
    try:
        for variable, average in zip(variables, averages):
            variable.assign(average.value)
        yield
    finally:
        for variable, value in zip(variables, own):
            variable.assign(value)
