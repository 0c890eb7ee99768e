"""The model's linear maps: ``keras.layers.Dense`` computed as one 2-D matrix product."""

import keras
import tensorflow as tf
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class Dense(keras.layers.Dense):
    """``keras.layers.Dense`` (the same variables, ``kernel`` and ``bias``) whose product runs on
    the inputs folded to [rows, features].

    Keras multiplies [batch, length, features] by the kernel through ``tensordot``, then adds the
    bias and applies the activation as separate broadcasting ops. Here it is ``MatMul`` ->
    ``BiasAdd`` (-> ``Relu``) on a 2-D tensor, the pattern TensorFlow's graph optimizer (the
    remapper) replaces by one fused matmul kernel (oneDNN's on CPU), whose output is written once.
    Only the activations None, "linear" and "relu" are accepted.
    """

    def __init__(self, units, activation=None, **kwargs):
        super().__init__(units, activation=activation, **kwargs)
        if activation not in (None, "linear", "relu"):
            raise ValueError(f"Dense: activation {activation!r} is none of None, 'linear', 'relu'.")
        self._relu = activation == "relu"

    def call(self, inputs, training=None):
        return affine(inputs, self.kernel, self.bias if self.use_bias else None, self._relu,
                      self.compute_dtype)


def affine(inputs, kernel, bias=None, relu=False, dtype=None):
    """``inputs @ kernel + bias`` (then ReLU) over the last axis of ``inputs``, computed on
    [rows, features] with ``tf.nn.bias_add`` so that the three fuse into one kernel; the result has
    the shape of ``inputs`` with its last axis of ``kernel``'s width."""
    dtype = dtype or inputs.dtype
    kernel = ops.cast(kernel, dtype)
    # The kernel's static width, not the input's: an input's last axis may be unknown in a graph.
    rows = inputs if len(inputs.shape) == 2 else tf.reshape(inputs, (-1, kernel.shape[0]))
    outputs = tf.matmul(ops.cast(rows, dtype), kernel)
    if bias is not None:
        outputs = tf.nn.bias_add(outputs, ops.cast(bias, dtype))
    if relu:
        outputs = tf.nn.relu(outputs)
    if len(inputs.shape) == 2:
        return outputs
    width = kernel.shape[-1]
    outputs = tf.reshape(outputs, tf.concat([tf.shape(inputs)[:-1], [width]], 0))
    outputs.set_shape(inputs.shape[:-1] + (width,))
    return outputs
