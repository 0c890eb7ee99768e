"""The Transformer's layers, one module per section of the paper:

- ``attention``: scaled dot-product attention (Eq. 1) and multi-head attention (3.2.2)
- ``masks``: padding and look-ahead masks (3.2.3)
- ``feed_forward``: position-wise feed-forward network (Eq. 2, 3.3)
- ``embedding``: shared embeddings and pre-softmax projection (3.4), positional encodings (3.5)
- ``encoder`` / ``decoder``: the stacks (3.1), sharing ``sublayers``
"""

from keras_transformer.layers.attention import MultiHeadAttention, scaled_dot_product_attention
from keras_transformer.layers.decoder import Decoder, DecoderLayer
from keras_transformer.layers.embedding import (LearnedPositionalEmbedding, SharedEmbedding,
                                                positional_encoding)
from keras_transformer.layers.encoder import Encoder, EncoderLayer
from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.masks import (cache_step_mask, decoder_self_attention_mask,
                                            look_ahead_mask, padding_mask)

__all__ = [
    "Decoder", "DecoderLayer", "Encoder", "EncoderLayer", "LearnedPositionalEmbedding",
    "MultiHeadAttention", "PositionwiseFeedForward", "SharedEmbedding", "cache_step_mask",
    "decoder_self_attention_mask", "look_ahead_mask", "padding_mask", "positional_encoding",
    "scaled_dot_product_attention",
]
