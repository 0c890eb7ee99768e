"""The encoder stack (section 3.1): N identical layers of self-attention and feed-forward."""

import keras

from keras_transformer.layers.sublayers import TransformerLayer, TransformerStack


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderLayer(TransformerLayer):
    """Multi-head self-attention, then the position-wise feed-forward network, each inside a
    residual sub-layer connection (section 3.1, Figure 1 left).

    Args: those of ``TransformerLayer``: d_model, num_heads, d_ff, d_k, d_v, dropout_rate,
      attention_dropout, relu_dropout, norm_first, layer_norm_epsilon, and Layer arguments.
    """

    sublayer_names = ("self_attention", "feed_forward")

    def __init__(self, d_model, num_heads, d_ff, **kwargs):
        super().__init__(d_model, num_heads, d_ff, **kwargs)
        self.self_attention = self._attention("self_attention")
        self.self_attention_norm = self._norm("self_attention_norm")
        self.self_attention_dropout = self._dropout()
        self.feed_forward = self._feed_forward("feed_forward")
        self.feed_forward_norm = self._norm("feed_forward_norm")
        self.feed_forward_dropout = self._dropout()

    def build(self, input_shape):
        self._build_sublayers(input_shape)

    def call(self, x, padding_mask=None, training=None, return_attention_weights=False,
             mask=None):
        """x [batch, length, d_model]; padding_mask bool [batch, 1, 1, length] (see ``masks``), or
        any shape ``MultiHeadAttention`` takes. With ``return_attention_weights``: (x, weights
        [batch, heads, length, length]).

        ``mask`` is x's Keras mask [batch, length], which Keras passes in (e.g. from
        ``Embedding(mask_zero=True)``): a ``padding_mask`` left out is that key padding mask, as
        keras-hub's ``TransformerEncoder`` reads it; the output carries it on."""
        if padding_mask is None:
            padding_mask = mask
        result = self._connect("self_attention", x, lambda h: self.self_attention(
            h, attention_mask=padding_mask, training=training,
            return_attention_weights=return_attention_weights), training)
        x, weights = result if return_attention_weights else (result, None)
        x = self._connect("feed_forward", x, lambda h: self.feed_forward(h, training=training), training)
        return (x, weights) if return_attention_weights else x


@keras.saving.register_keras_serializable(package="keras_transformer")
class Encoder(TransformerStack):
    """The encoder: N ``EncoderLayer``s.

    Args:
      num_layers: N (6 in the paper).
      layer_config: the keyword arguments of each layer (``TransformerLayer``'s).
      **kwargs: ``keras.layers.Layer`` arguments (``name``, ``dtype``).
    """

    layer_class = EncoderLayer

    def call(self, x, padding_mask=None, training=None, return_attention_weights=False,
             mask=None):
        """As ``EncoderLayer.call`` (x's Keras mask ``mask`` is the ``padding_mask`` left out);
        with ``return_attention_weights``: (x, [weights of each layer])."""
        weights = []
        for layer in self.layers:
            x = layer(x, padding_mask=padding_mask, training=training,
                      return_attention_weights=return_attention_weights, mask=mask)
            if return_attention_weights:
                x, layer_weights = x
                weights.append(layer_weights)
        x = self._final(x)
        return (x, weights) if return_attention_weights else x
