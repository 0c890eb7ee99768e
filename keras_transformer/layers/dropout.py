"""Dropout (section 5.4) that draws 16 random bits per unit instead of 32."""

import keras
import tensorflow as tf

from keras_transformer.layers import cpu_kernels

_LEVELS = 1 << 16


@keras.saving.register_keras_serializable(package="keras_transformer")
class Dropout(keras.layers.Dropout):
    """``keras.layers.Dropout`` with one 32-bit random draw deciding two units.

    On CPU, dropout's time goes to the counter-based (Philox) generator behind TensorFlow's
    stateless random ops, not to the masking; its cost is proportional to the random bits
    drawn, and a float32 uniform per unit spends 32 bits on a yes/no decision. Here each unit
    compares a 16-bit draw with ``round(rate * 2**16)``: the drop probability is that threshold
    over ``2**16`` (within ``2**-17`` of ``rate``), and kept units are scaled by the inverse of
    that exact keep probability, so ``E[output] = input`` as in Keras. The seed comes from the
    layer's ``SeedGenerator`` as in Keras, so checkpoints and configs are those of
    ``keras.layers.Dropout``. With a ``noise_shape`` (word dropout) Keras' path is used.

    On CPU the same draws and products come from one kernel of ours (``cpu_kernels``) where it
    can be built, except under XLA, which compiles TensorFlow's ops and knows no custom op.
    """

    def call(self, inputs, training=False):
        if not training or self.rate <= 0 or self.rate >= 1 or self.noise_shape is not None:
            return super().call(inputs, training=training)
        threshold = min(round(self.rate * _LEVELS), _LEVELS - 1)
        scale = _LEVELS / (_LEVELS - threshold)
        seed = _int32_seed(self.seed_generator.next())
        kernel = cpu_kernels.ops_for(inputs)
        if kernel is not None:
            key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(seed=seed)
            return kernel.keras_transformer_dropout_keep(inputs, key, counter,
                                                         threshold=threshold, scale=scale)[0]
        keep = _draws_at_least(tf.shape(inputs), threshold, seed)
        mask = tf.where(keep, tf.constant(scale, inputs.dtype), tf.constant(0, inputs.dtype))
        return inputs * mask


def _int32_seed(seed):
    # Stateless ops want an int32 seed under XLA; Keras keeps its seed state in int64.
    return tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)


def _draws_at_least(shape, threshold, seed):
    """A boolean tensor of ``shape``: independent uniform 16-bit draws ``>= threshold``."""
    size = tf.reduce_prod(shape)
    words = tf.random.stateless_uniform([(size + 1) // 2], seed, minval=None, maxval=None,
                                        dtype=tf.uint32)
    draws = tf.reshape(tf.bitcast(words, tf.uint16), [-1])[:size]
    return tf.reshape(draws >= threshold, shape)
