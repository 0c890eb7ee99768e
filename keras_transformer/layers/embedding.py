"""Embeddings and softmax (section 3.4) and positional encodings (section 3.5)."""

import math

import keras
import numpy as np
from keras import ops


def positional_encoding(length, d_model, start=0):
    """Sinusoidal positional encodings of positions start..start+length-1, float32 [length, d_model].

    PE(pos, 2i) = sin(pos / 10000^(2i / d_model)) and PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model)):
    even channels carry sines and odd channels cosines, interleaved exactly as section 3.5 writes them
    (tensor2tensor and many later codes concatenate all sines before all cosines instead).
    ``length`` and ``start`` may be tensors, so one function serves training and step-wise decoding.
    """
    channels = np.arange(d_model)
    # Channel 2i and 2i+1 share the frequency 1 / 10000^(2i / d_model).
    inverse_frequency = np.power(10000.0, -(2 * (channels // 2)) / d_model).astype("float32")
    positions = ops.cast(ops.arange(length) + start, "float32")
    angles = ops.expand_dims(positions, 1) * ops.expand_dims(ops.convert_to_tensor(inverse_frequency), 0)
    return ops.where(ops.convert_to_tensor(channels % 2 == 0), ops.sin(angles), ops.cos(angles))


@keras.saving.register_keras_serializable(package="keras_transformer")
class LearnedPositionalEmbedding(keras.layers.Layer):
    """Learned position embeddings [max_length, d_model], the alternative of Table 3 row (E).

    Args:
      max_length: the number of positions (a longer input is an error, not extrapolated).
      d_model: the embedding size.
      **kwargs: ``keras.layers.Layer`` arguments (``name``, ``dtype``).
    """

    def __init__(self, max_length, d_model, **kwargs):
        super().__init__(**kwargs)
        self.max_length = max_length
        self.d_model = d_model

    def build(self, input_shape=None):
        self.position_embeddings = self.add_weight(
            name="position_embeddings", shape=(self.max_length, self.d_model),
            initializer=keras.initializers.RandomNormal(stddev=self.d_model**-0.5),
        )
        self.built = True

    def call(self, inputs, start=0):
        """Embeddings of positions start..start+length-1, [length, d_model], for ``inputs`` of shape
        [batch, length, ...] (like keras-hub's PositionEmbedding)."""
        length = ops.shape(inputs)[1]
        return ops.cast(ops.slice(self.position_embeddings, (start, 0), (length, self.d_model)),
                        self.compute_dtype)

    def get_config(self):
        return {**super().get_config(), "max_length": self.max_length, "d_model": self.d_model}


@keras.saving.register_keras_serializable(package="keras_transformer")
class SharedEmbedding(keras.layers.Layer):
    """One [vocab_size, d_model] matrix used both ways (section 3.4).

    ``layer(ids)`` looks tokens up and multiplies by sqrt(d_model); ``layer.project(hidden)`` is the
    pre-softmax linear transformation with the same (transposed) matrix, returning float32 logits.
    The weights are initialised with stddev d_model^-0.5 so that the scaled embeddings have unit
    variance, the scale of the positional encodings they are added to.

    Args:
      vocab_size: the number of token ids.
      d_model: the embedding size.
      **kwargs: ``keras.layers.Layer`` arguments (``name``, ``dtype``).
    """

    def __init__(self, vocab_size, d_model, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.d_model = d_model

    def build(self, input_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.vocab_size, self.d_model),
            initializer=keras.initializers.RandomNormal(stddev=self.d_model**-0.5),
        )
        self.built = True

    def call(self, ids):
        embedded = ops.cast(ops.take(self.embeddings, ids, axis=0), self.compute_dtype)
        return embedded * ops.cast(math.sqrt(self.d_model), self.compute_dtype)

    def project(self, hidden):
        logits = ops.matmul(hidden, ops.transpose(ops.cast(self.embeddings, hidden.dtype)))
        return ops.cast(logits, "float32")

    def get_config(self):
        return {**super().get_config(), "vocab_size": self.vocab_size, "d_model": self.d_model}
