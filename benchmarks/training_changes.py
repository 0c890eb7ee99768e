"""The earlier code paths of the training-speed changes, so that a benchmark can time the step
before and after each change alternately in one process (the machine's drifts then fall on both).

Each change names what it replaced and a context manager under which ``TrainStep`` traces the
earlier path: the patch must be active whenever the "before" step is called (a new batch shape
traces it again).
"""

import contextlib


def _loss_and_accuracy_before(labels, logits, label_smoothing=0.1, pad_id=0):
    """The loss before the change: a generic cross-entropy against the materialised smoothed
    distribution, and a separate arg-max over the vocabulary for the accuracy."""
    import tensorflow as tf

    logits = tf.cast(logits, tf.float32)
    num_classes = logits.shape[-1]
    smoothed = tf.one_hot(tf.cast(labels, tf.int32), num_classes,
                          on_value=1.0 - label_smoothing + label_smoothing / num_classes,
                          off_value=label_smoothing / num_classes)
    per_token = tf.nn.softmax_cross_entropy_with_logits(labels=smoothed, logits=logits)
    mask = tf.cast(tf.not_equal(labels, pad_id), tf.float32)
    predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
    correct = tf.logical_and(tf.equal(predictions, tf.cast(labels, tf.int32)),
                             tf.not_equal(labels, pad_id))
    return (tf.reduce_sum(per_token * mask), tf.reduce_sum(mask),
            tf.reduce_sum(tf.cast(correct, tf.float32)))


@contextlib.contextmanager
def _patched(module, name, value):
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, saved)


def _loss_before():
    from keras_transformer.training import step

    return _patched(step, "loss_and_accuracy", _loss_and_accuracy_before)


def _dropout_before():
    """Keras' dropout: one float32 uniform draw per unit."""
    import keras

    from keras_transformer.layers import dropout

    return _patched(dropout.Dropout, "call", keras.layers.Dropout.call)


# name -> (what the change did, the context manager restoring the earlier path)
CHANGES = {
    "loss": ("label-smoothed loss from logsumexp with a written-out gradient, accuracy from its "
             "row maximum (was: softmax cross-entropy against a one-hot smoothed target, plus an "
             "arg-max)", _loss_before),
    "dropout": ("dropout masks from 16-bit random draws, two per 32-bit word (was: Keras' "
                "float32 uniform per unit)", _dropout_before),
}


@contextlib.contextmanager
def reverted(names):
    """Every change in ``names`` back to its earlier code path."""
    with contextlib.ExitStack() as stack:
        for name in names:
            stack.enter_context(CHANGES[name][1]())
        yield
