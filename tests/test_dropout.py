"""Dropout with 16-bit draws against the definition of (inverted) dropout and Keras' layer; its
one-pass kernel against the TensorFlow ops it replaces."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.layers import cpu_kernels
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


# The one-pass kernel (cpu_kernels.cc) against TensorFlow's ops, which the layer uses where the
# kernel cannot be built and under XLA.

def same_bits(a, b):
    """Equal bit for bit, a NaN standing for any NaN (its sign bit carries nothing)."""
    a, b = np.asarray(a), np.asarray(b)
    bits = {4: np.uint32, 2: np.uint16}[a.dtype.itemsize]
    nan = np.isnan(a.astype(np.float32)) & np.isnan(b.astype(np.float32))
    return bool(((a.view(bits) == b.view(bits)) | nan).all())


def output_and_gradient(rate, seed, x, dy, traced):
    layer = Dropout(rate, seed=seed, dtype="mixed_bfloat16" if x.dtype == tf.bfloat16 else None)

    def run(x, dy):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=True)
        return y, tape.gradient(y, x, output_gradients=dy)

    y, dx = (tf.function(run, autograph=False) if traced else run)(x, dy)
    return y.numpy(), dx.numpy()


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
@pytest.mark.parametrize("shape, rate", [((2048, 128), 0.1), ((3, 2049, 5), 0.5), ((129,), 0.3),
                                         ((1,), 0.1), ((0, 4), 0.1)])
@pytest.mark.parametrize("traced", [False, True])
def test_the_kernel_gives_the_tensorflow_ops_outputs_and_gradients_bit_for_bit(
        dtype, shape, rate, traced, monkeypatch, cpu_kernels_built):
    values = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    if values.size > 8:  # a NaN and infinities, kept or dropped, stay what the ops make of them
        values.flat[[0, 1, 2, 5]] = [np.nan, np.inf, -np.inf, -0.0]
    x = tf.cast(values, dtype)
    dy = tf.cast(np.random.default_rng(1).normal(size=shape), dtype)
    seed = 2**40 + 17  # beyond int32: the seed reaches both paths reduced alike
    with_kernel = output_and_gradient(rate, seed, x, dy, traced)
    monkeypatch.setattr(cpu_kernels, "ops", lambda: None)
    with_ops = output_and_gradient(rate, seed, x, dy, traced)
    assert same_bits(with_kernel[0], with_ops[0]) and same_bits(with_kernel[1], with_ops[1])
    if values.size > 1000:  # not vacuous: both drop about the rate's share of the units
        assert abs((with_kernel[0] == 0).mean() - rate) < 0.02


def graph_ops(function, *args):
    return {op.type for op in function.get_concrete_function(*args).graph.get_operations()}


def test_a_training_step_uses_the_kernel_and_xla_the_tensorflow_ops(cpu_kernels_built):
    layer = Dropout(0.1, seed=3)
    x = tf.ones([64, 32])
    train = tf.function(lambda x: layer(x, training=True), autograph=False)
    compiled = tf.function(lambda x: layer(x, training=True), autograph=False, jit_compile=True)
    infer = tf.function(lambda x: layer(x, training=False), autograph=False)
    assert "KerasTransformerDropoutKeep" in graph_ops(train, x)
    assert "KerasTransformerDropoutKeep" not in graph_ops(compiled, x)
    assert not {op for op in graph_ops(infer, x) if op.startswith("KerasTransformer")}
    assert 0 < int(tf.reduce_sum(tf.cast(compiled(x) == 0, tf.int32))) < 64 * 32 * 0.2


def test_without_a_compiler_the_layer_keeps_tensorflow_ops_and_says_so_once(
        tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("KERAS_TRANSFORMER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CXX", "false")  # a compiler that fails
    monkeypatch.delenv(cpu_kernels.SWITCH, raising=False)  # tried, not switched off
    cpu_kernels.ops.cache_clear()
    try:
        with caplog.at_level("WARNING"):
            assert cpu_kernels.ops() is None and cpu_kernels.ops() is None
            y = Dropout(0.5, seed=1)(tf.ones([100]), training=True)
    finally:
        monkeypatch.undo()
        cpu_kernels.ops.cache_clear()
    warnings = [r.getMessage() for r in caplog.records if "CPU kernels" in r.getMessage()]
    assert len(warnings) == 1 and "the compiler exited with 1" in warnings[0], warnings
    assert os.listdir(tmp_path / "cache") == []  # no half-written library left
    assert 20 < int(tf.reduce_sum(tf.cast(y == 0, tf.int32))) < 80


def test_the_switch_keeps_tensorflow_ops_without_building(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_TRANSFORMER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(cpu_kernels.SWITCH, "0")
    cpu_kernels.ops.cache_clear()
    try:
        assert cpu_kernels.ops() is None
    finally:
        monkeypatch.undo()
        cpu_kernels.ops.cache_clear()
    assert not (tmp_path / "cache").exists()


def test_asked_again_after_a_reset_the_kernel_loads_and_its_gradient_stays_registered(
        cpu_kernels_built):
    cpu_kernels.ops.cache_clear()  # as the tests above do: TensorFlow allows one registration
    layer = Dropout(0.5, seed=6)
    x = tf.random.normal([300])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), np.where(y.numpy() != 0, 2.0, 0.0))
