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
    Only the activations None, "linear" and "relu" are accepted. When training, the gradient is
    written out (``affine``).
    """

    def __init__(self, units, activation=None, **kwargs):
        super().__init__(units, activation=activation, **kwargs)
        if activation not in (None, "linear", "relu"):
            raise ValueError(f"Dense: activation {activation!r} is none of None, 'linear', 'relu'.")
        self._relu = activation == "relu"

    def call(self, inputs, training=None):
        return affine(inputs, self.kernel, self.bias if self.use_bias else None, self._relu,
                      self.compute_dtype, training=training)


def affine(inputs, kernel, bias=None, relu=False, dtype=None, training=False):
    """``inputs @ kernel + bias`` (then ReLU) over the last axis of ``inputs``, computed on
    [rows, features] with ``tf.nn.bias_add`` so that the three fuse into one kernel; the result has
    the shape of ``inputs`` with its last axis of ``kernel``'s width.

    ``training``: with the gradient written out (``_product_with_gradient``), whose bias gradient
    sums bfloat16 in float32."""
    dtype = dtype or inputs.dtype
    kernel = tf.convert_to_tensor(ops.cast(kernel, dtype))
    # The kernel's static width, not the input's: an input's last axis may be unknown in a graph.
    rows = inputs if len(inputs.shape) == 2 else tf.reshape(inputs, (-1, kernel.shape[0]))
    rows = tf.convert_to_tensor(ops.cast(rows, dtype))
    bias = None if bias is None else tf.convert_to_tensor(ops.cast(bias, dtype))
    outputs = (_product_with_gradient if training else _product)(rows, kernel, bias, relu)
    if len(inputs.shape) == 2:
        return outputs
    width = kernel.shape[-1]
    outputs = tf.reshape(outputs, tf.concat([tf.shape(inputs)[:-1], [width]], 0))
    outputs.set_shape(inputs.shape[:-1] + (width,))
    return outputs


def _product(rows, kernel, bias, relu):
    outputs = tf.matmul(rows, kernel)
    if bias is not None:
        outputs = tf.nn.bias_add(outputs, bias)
    return tf.nn.relu(outputs) if relu else outputs


def _product_with_gradient(rows, kernel, bias, relu):
    """``_product`` whose gradient is TensorFlow's own (two products, and ReLU's) except for the
    bias: TensorFlow's ``BiasAddGrad`` on CPU accumulates a bfloat16 gradient in bfloat16, which
    loses most of a sum over thousands of rows, and is slower than a reduction, which accumulates
    it in float32."""

    @tf.custom_gradient
    def product(rows, kernel, *bias):
        outputs = _product(rows, kernel, bias[0] if bias else None, relu)

        def gradient(upstream):
            if relu:
                upstream = tf.raw_ops.ReluGrad(gradients=upstream, features=outputs)
            grads = [tf.matmul(upstream, kernel, transpose_b=True),
                     tf.matmul(rows, upstream, transpose_a=True)]
            # Named for the profile (benchmarks.profile_step), which finds no scope around it.
            return grads + [tf.reduce_sum(upstream, 0, name="bias_gradient")] * len(bias)

        return outputs, gradient

    return product(rows, kernel, *([] if bias is None else [bias]))
