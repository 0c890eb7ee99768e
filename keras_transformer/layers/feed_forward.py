"""Position-wise feed-forward network, Eq. (2)."""

import keras

from keras_transformer.layers.dense import Dense
from keras_transformer.layers.dropout import Dropout


@keras.saving.register_keras_serializable(package="keras_transformer")
class PositionwiseFeedForward(keras.layers.Layer):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, applied to each position separately (section 3.3).

    ``relu_dropout`` (dropout on the d_ff-wide hidden activations) is not in the paper; it is off
    by default and offered because tensor2tensor and later recipes use it.

    Args:
      d_model: the size of the input and output.
      d_ff: the inner layer's size (2048 in the base model).
      relu_dropout: dropout after the ReLU (the paper's models: 0).
      **kwargs: ``keras.layers.Layer`` arguments (``name``, ``dtype``).
    """

    def __init__(self, d_model, d_ff, relu_dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.d_model = d_model
        self.d_ff = d_ff
        self.relu_dropout = relu_dropout
        self.inner = Dense(d_ff, activation="relu", name="inner", dtype=self.dtype_policy)
        self.hidden_dropout = Dropout(relu_dropout, dtype=self.dtype_policy)
        self.outer = Dense(d_model, name="outer", dtype=self.dtype_policy)

    def build(self, input_shape):
        self.inner.build(input_shape)
        self.outer.build(tuple(input_shape[:-1]) + (self.d_ff,))
        self.built = True

    def call(self, x, training=None):
        return self.outer(self.hidden_dropout(self.inner(x), training=training))

    def get_config(self):
        return {**super().get_config(), "d_model": self.d_model, "d_ff": self.d_ff,
                "relu_dropout": self.relu_dropout}
