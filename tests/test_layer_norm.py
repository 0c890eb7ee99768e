"""Our LayerNormalization (closed-form gradient; in training on CPU our kernel) against
keras.layers.LayerNormalization and against float64."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.layers import cpu_kernels
from keras_transformer.layers.layer_norm import LayerNormalization

RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True, params=["cpu_kernel", "tensorflow_ops"])
def layer_norm_ops(request, monkeypatch):
    """Every test twice: in training with our CPU kernel (cpu_kernels.cc) and with TensorFlow's
    ops, which the layer uses at inference, under XLA and where the kernel is not built."""
    if request.param == "cpu_kernel":
        request.getfixturevalue("cpu_kernels_built")
    else:
        monkeypatch.setattr(cpu_kernels, "ops", lambda: None)
    return request.param


def outputs_and_gradients(layer, x, upstream=None):
    """The layer's output and the gradients of sum(y * upstream) (default: a gradient that differs
    by position) with respect to x, gamma and beta, all in float32."""
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.cast(layer(x, training=True), tf.float32)
        loss = tf.reduce_sum(y * (tf.sin(3.0 * y) if upstream is None else upstream))
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


def float64_reference(x, gamma, beta, upstream, epsilon):
    """The normalisation written out in float64, differentiated by TensorFlow's autodiff."""
    x, gamma, beta = (tf.constant(v, tf.float64) for v in (x, gamma, beta))
    with tf.GradientTape() as tape:
        tape.watch([x, gamma, beta])
        mean = tf.reduce_mean(x, -1, keepdims=True)
        variance = tf.reduce_mean((x - mean) ** 2, -1, keepdims=True)
        y = (x - mean) / tf.sqrt(variance + epsilon) * gamma + beta
        loss = tf.reduce_sum(y * tf.constant(upstream, tf.float64))
    return [np.asarray(t) for t in [y, *tape.gradient(loss, [x, gamma, beta])]]


# Rows over several of the gradient kernel's blocks of 32 and not a multiple of it; widths
# off the vector lengths; no rows at all.
@pytest.mark.parametrize("shape", [(70, 37), (2, 33, 192), (4, 1, 8), (0, 8)])
@pytest.mark.parametrize("dtype", ["float32", "mixed_bfloat16"])
def test_layer_norm_against_float64(shape, dtype):
    x = RNG.normal(loc=-1.0, scale=2.0, size=shape).astype("float32")
    gamma, beta = (RNG.normal(size=shape[-1:]).astype("float32") for _ in range(2))
    upstream = RNG.normal(size=shape).astype("float32")
    layer = LayerNormalization(epsilon=1e-3, dtype=dtype)
    layer.build(shape)
    layer.set_weights([gamma, beta])
    # The inputs as the layer sees them: x and the incoming gradient in its compute dtype.
    x, upstream = (tf.cast(tf.cast(v, layer.compute_dtype), tf.float32).numpy()
                   for v in (x, upstream))
    want = float64_reference(x, gamma, beta, upstream, 1e-3)
    got = outputs_and_gradients(layer, tf.cast(x, layer.compute_dtype), upstream)
    # bfloat16 rounds the output and dx once each (8 bits); dgamma and dbeta stay in float32.
    tolerances = [1e-6] * 4 if dtype == "float32" else [2 ** -8, 2 ** -8, 1e-6, 1e-6]
    for name, a, b, tolerance in zip(["y", "dx", "dgamma", "dbeta"], got, want, tolerances):
        assert a.shape == b.shape, name
        # dgamma and dbeta sum over the rows: their rounding grows with the rows' count's root.
        rows = int(np.prod(shape[:-1]))
        scale = max(1.0, np.max(np.abs(b), initial=0)) * (
            1 if name in ("y", "dx") else np.sqrt(max(1, rows)))
        np.testing.assert_allclose(a, b, atol=4 * tolerance * scale, err_msg=name)


def graph_ops(function, *args):
    return {op.type for op in function.get_concrete_function(*args).graph.get_operations()}


def test_training_runs_the_kernel_and_inference_and_xla_tensorflow_ops(layer_norm_ops):
    layer = LayerNormalization(epsilon=1e-6)
    x = tf.random.normal([4, 6, 16])
    layer.build(x.shape)

    def trained(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=True)
        return tape.gradient(y, [x, *layer.trainable_variables])

    kernel_ops = {"KerasTransformerLayerNorm", "KerasTransformerLayerNormGrad"}
    train = tf.function(trained, autograph=False)
    compiled = tf.function(trained, autograph=False, jit_compile=True)
    infer = tf.function(lambda x: layer(x, training=False), autograph=False)
    assert (kernel_ops <= graph_ops(train, x)) == (layer_norm_ops == "cpu_kernel")
    assert not kernel_ops & graph_ops(compiled, x)
    assert not kernel_ops & graph_ops(infer, x)
    for a, b in zip(train(x), compiled(x)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5)


def test_only_the_last_axis():
    with pytest.raises(ValueError, match="last axis"):
        LayerNormalization(axis=1)
