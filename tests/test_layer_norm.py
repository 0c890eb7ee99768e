"""Our LayerNormalization (closed-form gradient) against keras.layers.LayerNormalization."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.layers.layer_norm import LayerNormalization

RNG = np.random.default_rng(0)


def outputs_and_gradients(layer, x):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.cast(layer(x), tf.float32)
        loss = tf.reduce_sum(y * tf.sin(3.0 * y))  # a gradient that differs by position
    return [np.asarray(tf.cast(t, tf.float32))
            for t in [y, *tape.gradient(loss, [x, *layer.trainable_variables])]]


@pytest.mark.parametrize("shape", [(3, 5, 16), (6, 16)])
@pytest.mark.parametrize("dtype", ["float32", "mixed_bfloat16"])
def test_layer_norm_and_its_gradients_equal_keras(shape, dtype):
    x = tf.constant(RNG.normal(loc=2.0, scale=3.0, size=shape).astype("float32"))
    ours = LayerNormalization(epsilon=1e-6, dtype=dtype)
    theirs = keras.layers.LayerNormalization(epsilon=1e-6, dtype=dtype)
    ours.build(x.shape)
    theirs.build(x.shape)
    weights = [RNG.normal(size=(shape[-1],)).astype("float32") for _ in range(2)]
    ours.set_weights(weights)
    theirs.set_weights(weights)
    assert [v.path.split("/")[-1] for v in ours.weights] == ["gamma", "beta"]
    x = tf.cast(x, ours.compute_dtype)
    tolerance = 1e-5 if dtype == "float32" else 2e-2
    for a, b in zip(outputs_and_gradients(ours, x), outputs_and_gradients(theirs, x)):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, atol=tolerance * max(1.0, np.abs(b).max()))
    assert ours(x).dtype == theirs(x).dtype


def test_only_the_last_axis():
    with pytest.raises(ValueError, match="last axis"):
        LayerNormalization(axis=1)
