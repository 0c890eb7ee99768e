"""Layer normalisation with its gradient written out as one formula."""

import keras
import tensorflow as tf
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class LayerNormalization(keras.layers.LayerNormalization):
    """``keras.layers.LayerNormalization`` over the last axis (the same variables, ``gamma`` and
    ``beta``, computed in float32 as Keras does) whose backward pass is the closed form below
    instead of the derivative of each forward op: about half the passes over the activations."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        if self.axis not in (-1, [-1]) or self.rms_scaling or not (self.center and self.scale):
            raise ValueError("LayerNormalization: only the last axis, with gamma and beta.")

    def call(self, inputs):
        return ops.cast(layer_norm(inputs, self.gamma, self.beta, self.epsilon),
                        self.compute_dtype)


def layer_norm(x, gamma, beta, epsilon):
    """(x - mean) / sqrt(variance + epsilon) * gamma + beta over the last axis, in float32, the
    result in ``x``'s dtype. The gradient: with n the normalised x and g = dy * gamma,
    dx = (g - mean(g) - n * mean(g * n)) / sqrt(variance + epsilon), dgamma = sum(dy * n),
    dbeta = sum(dy) over every axis but the last."""

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

    return forward(x, tf.cast(gamma, tf.float32), tf.cast(beta, tf.float32))
