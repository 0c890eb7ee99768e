"""The model's Dense: keras.layers.Dense's results and gradients, as one fused matmul kernel."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.layers.dense import Dense

RNG = np.random.default_rng(0)


def keras_twin(ours, x):
    """keras.layers.Dense with our layer's weights: the reference."""
    theirs = keras.layers.Dense(ours.units, activation=ours.activation, dtype=ours.dtype_policy)
    theirs.build(x.shape)
    theirs.set_weights(ours.get_weights())
    return theirs


def outputs_and_gradients(layer, x, training=False):
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=training)
        loss = tf.reduce_sum(tf.cast(y, tf.float32) * tf.cast(tf.sin(y), tf.float32))
    return [np.asarray(tf.cast(t, tf.float32))
            for t in [y, *tape.gradient(loss, [x, *layer.trainable_variables])]]


@pytest.mark.parametrize("shape", [(3, 5, 8), (7, 8)])
@pytest.mark.parametrize("activation", [None, "relu"])
@pytest.mark.parametrize("dtype", ["float32", "mixed_bfloat16"])
@pytest.mark.parametrize("training", [False, True])  # True: the gradient written out
def test_dense_equals_keras_dense_with_gradients(shape, activation, dtype, training):
    ours = Dense(16, activation=activation, dtype=dtype)
    x = RNG.normal(size=shape).astype("float32")
    ours.build(x.shape)
    theirs = keras_twin(ours, x)
    assert [v.path.split("/")[-1] for v in ours.weights] == ["kernel", "bias"]
    tolerance = 1e-5 if dtype == "float32" else 2e-2
    for a, b in zip(outputs_and_gradients(ours, x, training), outputs_and_gradients(theirs, x)):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, atol=tolerance * max(1.0, np.abs(b).max()))
    assert ours(x).shape == shape[:-1] + (16,)


def test_an_input_of_unknown_last_axis_in_a_graph():
    """As the uncached search's memory reaches attention: [None, None, None] at tracing."""
    ours = Dense(16, activation="relu")
    ours.build((None, 8))
    x = RNG.normal(size=(2, 3, 8)).astype("float32")
    traced = tf.function(ours, input_signature=[tf.TensorSpec((None, None, None), tf.float32)])
    np.testing.assert_allclose(traced(x), ours(x), atol=1e-6)
    assert traced.get_concrete_function().structured_outputs.shape.as_list() == [None, None, 16]


def test_other_activations_are_refused():
    with pytest.raises(ValueError, match="activation"):
        Dense(4, activation="gelu")


def optimized_op_types(function, *inputs):
    """The op types of ``function``'s graph after TensorFlow's graph optimizer (grappler), as a
    training step's graph runs."""
    from tensorflow.core.protobuf import config_pb2, meta_graph_pb2
    from tensorflow.python.grappler import tf_optimizer

    concrete = tf.function(function).get_concrete_function(*inputs)
    graph_def = concrete.graph.as_graph_def()
    for node in graph_def.node:  # placed as the runtime places them (the remapper checks)
        node.device = "/device:CPU:0"
    meta_graph = tf.compat.v1.train.export_meta_graph(graph_def=graph_def, graph=concrete.graph)
    fetch = meta_graph_pb2.CollectionDef()
    fetch.node_list.value.extend(t.name.split(":")[0] for t in concrete.outputs)
    meta_graph.collection_def["train_op"].CopyFrom(fetch)
    optimized = tf_optimizer.OptimizeGraph(config_pb2.ConfigProto(), meta_graph)
    types = [node.op for node in optimized.node]
    for function_def in optimized.library.function:
        types += [node.op for node in function_def.node_def]
    return types


@pytest.mark.parametrize("activation", [None, "relu"])
@pytest.mark.parametrize("training", [False, True])
def test_bias_and_relu_fuse_into_the_matmul(activation, training):
    """The reason for the layer: grappler's remapper turns MatMul, BiasAdd (and Relu) into one
    fused kernel, also inside the training path's custom gradient; keras.layers.Dense on
    [batch, length, features] keeps them apart."""
    ours = Dense(16, activation=activation)
    x = tf.TensorSpec((4, 5, 8), tf.float32)
    ours.build(x.shape)
    types = optimized_op_types(lambda v: ours(v, training=training), x)
    fused = [t for t in types if "FusedMatMul" in t]
    assert len(fused) == 1, types
    assert not {"BiasAdd", "Relu", "AddV2", "Add"} & set(types), types
    theirs = keras.layers.Dense(16, activation=activation)
    theirs.build(x.shape)
    assert not [t for t in optimized_op_types(lambda v: theirs(v), x) if "FusedMatMul" in t]


@pytest.mark.parametrize("activation", [None, "relu"])
def test_a_bfloat16_bias_gradient_is_summed_in_float32(activation):
    """Training in bfloat16, the bias gradient sums thousands of rows: against the float64 sum of
    the same bfloat16 upstream gradient, only the final rounding to bfloat16 may differ
    (TensorFlow's BiasAddGrad, summing in bfloat16, loses a large part of it here)."""
    rows, units = 4096, 32
    ours = Dense(units, activation=activation, dtype="mixed_bfloat16")
    ours.build((None, 8))
    # Positive inputs and kernel: every ReLU passes, so the sum is of the upstream alone.
    ours.set_weights([np.abs(RNG.normal(size=(8, units))).astype("float32"),
                      np.ones(units, "float32")])
    x = tf.constant(np.abs(RNG.normal(size=(rows, 8))).astype("float32"))
    upstream = tf.cast(tf.constant(RNG.normal(1.0, 3.0, size=(rows, units)), tf.float32),
                       tf.bfloat16)
    with tf.GradientTape() as tape:
        y = ours(x, training=True)
    bias_grad = tape.gradient(y, ours.bias, output_gradients=upstream)
    want = np.sum(np.asarray(tf.cast(upstream, tf.float64)), 0)
    np.testing.assert_allclose(np.asarray(bias_grad, np.float64), want, rtol=2.0 ** -8)
