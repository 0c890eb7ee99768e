"""Layer normalisation with its gradient written out as one formula."""

import keras
import tensorflow as tf
from keras import ops

from keras_transformer.layers import cpu_kernels


@keras.saving.register_keras_serializable(package="keras_transformer")
class LayerNormalization(keras.layers.LayerNormalization):
    """``keras.layers.LayerNormalization`` over the last axis (the same variables, ``gamma`` and
    ``beta``, computed in float32 as Keras does) whose backward pass is the closed form below
    instead of the derivative of each forward op: about half the passes over the activations.

    In training on CPU both passes come from one kernel of ours each (``cpu_kernels``) where it
    can be built, except under XLA; inference (exports, decoding) keeps TensorFlow's ops."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        if self.axis not in (-1, [-1]) or self.rms_scaling or not (self.center and self.scale):
            raise ValueError("LayerNormalization: only the last axis, with gamma and beta.")

    def call(self, inputs, training=False):
        kernels = cpu_kernels.ops_for(inputs) if training else None
        return ops.cast(layer_norm(inputs, self.gamma, self.beta, self.epsilon, kernels),
                        self.compute_dtype)


def layer_norm(x, gamma, beta, epsilon, kernels=None):
    """(x - mean) / sqrt(variance + epsilon) * gamma + beta over the last axis, in float32, the
    result in ``x``'s dtype. The gradient: with n the normalised x and g = dy * gamma,
    dx = (g - mean(g) - n * mean(g * n)) / sqrt(variance + epsilon), dgamma = sum(dy * n),
    dbeta = sum(dy) over every axis but the last. ``kernels``: our CPU kernels' ops module, which
    computes both in one pass over the rows each; ``None``, TensorFlow's ops."""
    forward = _with_tensorflow_ops(epsilon) if kernels is None else _with_kernels(epsilon, kernels)
    return forward(x, tf.cast(gamma, tf.float32), tf.cast(beta, tf.float32))


def _with_tensorflow_ops(epsilon):
    @tf.custom_gradient
    def forward(x, gamma, beta):
        x32 = tf.cast(x, tf.float32)
        centered = x32 - tf.reduce_mean(x32, -1, keepdims=True)
        inverse = tf.math.rsqrt(tf.reduce_mean(tf.square(centered), -1, keepdims=True) + epsilon)
        normalized = centered * inverse

        def gradient(dy):
            dy = tf.cast(dy, tf.float32)
            g = dy * gamma
            dx = inverse * (g - tf.reduce_mean(g, -1, keepdims=True)
                            - normalized * tf.reduce_mean(g * normalized, -1, keepdims=True))
            def summed_over_rows(t):
                return tf.reduce_sum(tf.reshape(t, (-1, t.shape[-1])), 0)

            return tf.cast(dx, x.dtype), summed_over_rows(dy * normalized), summed_over_rows(dy)

        return tf.cast(normalized * gamma + beta, x.dtype), gradient

    return forward


def _with_kernels(epsilon, kernels):
    @tf.custom_gradient
    def forward(x, gamma, beta):
        shape = tf.shape(x)
        rows = tf.reshape(x, (-1, x.shape[-1]))
        y, mean, inverse = kernels.keras_transformer_layer_norm(rows, gamma, beta, epsilon=epsilon)

        def gradient(dy):
            dx, dgamma, dbeta = kernels.keras_transformer_layer_norm_grad(
                tf.reshape(tf.cast(dy, x.dtype), (-1, x.shape[-1])), rows, gamma, mean, inverse)
            return tf.reshape(dx, shape), dgamma, dbeta

        return tf.reshape(y, shape), gradient

    return forward
