"""Dropout with 16-bit draws against the definition of (inverted) dropout and Keras' layer."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.layers.dropout import Dropout, _draws_at_least


def _binomial_bound(n, p, sigmas=5.0):
    return sigmas * np.sqrt(n * p * (1 - p))


@pytest.mark.parametrize("rate", [0.1, 0.3])
@pytest.mark.parametrize("shape", [(64, 33, 129), (1, 1, 7), (4096,)])
def test_drops_the_rate_and_scales_kept_units_by_the_exact_keep_probability(rate, shape):
    layer = Dropout(rate, seed=3)
    x = tf.random.uniform(shape, 1.0, 2.0, seed=1)
    y = layer(x, training=True).numpy()
    x = x.numpy()
    dropped = y == 0
    n = x.size
    assert abs(dropped.sum() - rate * n) <= _binomial_bound(n, rate) + 1
    threshold = round(rate * 65536)
    # Kept units: input / P(keep), with P(keep) the exact probability of a 16-bit draw.
    np.testing.assert_allclose(y[~dropped], x[~dropped] * 65536 / (65536 - threshold), rtol=1e-6)


def test_expectation_and_mask_statistics_match_keras_dropout():
    rate, n = 0.1, 1 << 20
    x = tf.ones([n])
    ours = Dropout(rate, seed=5)(x, training=True).numpy()
    theirs = keras.layers.Dropout(rate, seed=5)(x, training=True).numpy()
    # Both are unbiased: the mean of the output is the input's (1.0) within sampling error.
    for y in (ours, theirs):
        assert abs(y.mean() - 1.0) < 5 * np.sqrt(rate / (1 - rate) / n)
    # Neighbouring units come from the two halves of one 32-bit word: they must be independent.
    kept = (ours != 0).astype(np.float64)
    correlation = np.corrcoef(kept[0::2], kept[1::2])[0, 1]
    assert abs(correlation) < 5 / np.sqrt(n / 2)


def test_new_mask_every_call_and_identity_outside_training():
    layer = Dropout(0.5, seed=7)
    x = tf.ones([256, 64])
    first, second = layer(x, training=True), layer(x, training=True)
    assert not np.array_equal(first.numpy() == 0, second.numpy() == 0)
    np.testing.assert_array_equal(layer(x, training=False).numpy(), x.numpy())
    np.testing.assert_array_equal(Dropout(0.0)(x, training=True).numpy(), x.numpy())


def test_gradient_is_the_mask():
    layer = Dropout(0.2, seed=11)
    x = tf.random.normal([32, 48])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
    gradient = tape.gradient(y, x).numpy()
    ratio = np.where(x.numpy() != 0, y.numpy() / x.numpy(), 0.0)
    np.testing.assert_allclose(gradient, ratio, rtol=1e-5, atol=1e-7)


def test_bfloat16_policy_keeps_the_dtype_and_draws_per_unit():
    layer = Dropout(0.1, seed=2, dtype="mixed_bfloat16")
    y = layer(tf.ones([8, 16, 32], tf.bfloat16), training=True)
    assert y.dtype == tf.bfloat16
    # Odd sizes: the last 32-bit word is cut in half, every unit still gets a draw.
    keep = _draws_at_least(tf.constant([3, 5]), 0, tf.constant([1, 2], tf.int64))
    assert keep.shape == (3, 5) and bool(tf.reduce_all(keep))


def test_word_dropout_with_a_noise_shape_drops_whole_positions():
    layer = Dropout(0.5, noise_shape=(None, None, 1), seed=4)
    y = layer(tf.ones([4, 50, 8]), training=True).numpy()
    per_position = (y == 0).all(-1) | (y != 0).all(-1)
    assert per_position.all() and 0 < (y == 0).all(-1).sum() < 200


def test_config_round_trip():
    layer = Dropout(0.25, seed=9, name="residual_dropout")
    clone = keras.layers.deserialize(keras.layers.serialize(layer))
    assert type(clone) is Dropout and clone.rate == 0.25 and clone.seed == 9
