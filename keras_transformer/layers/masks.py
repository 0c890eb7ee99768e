"""Attention masks (section 3.2.3).

Convention, the same as ``keras.layers.MultiHeadAttention``: a boolean mask that is True where a query
position may attend to a key position. Masks carry a heads axis so they broadcast against attention
scores of shape ``[batch, heads, query_length, key_length]``.
"""


from keras import ops


def padding_mask(ids, pad_id=0):
    """``ids`` [batch, length] -> bool [batch, 1, 1, length]: True at real (non-padding) tokens."""
    return key_padding_mask(ops.not_equal(ids, pad_id))


def key_padding_mask(real):
    """A Keras mask ``real`` [batch, length] (True at real tokens, as ``Embedding(mask_zero=True)``
    sets it) -> bool [batch, 1, 1, length], the shape of ``padding_mask``."""
    return ops.expand_dims(ops.expand_dims(real, 1), 1)


def look_ahead_mask(length):
    """bool [1, 1, length, length]: query i may attend to keys 0..i ("masking out ... illegal
    connections" to preserve the auto-regressive property, section 3.2.3)."""
    positions = ops.arange(length)
    causal = ops.greater_equal(ops.expand_dims(positions, 1), ops.expand_dims(positions, 0))
    return ops.reshape(causal, (1, 1, length, length))


def decoder_self_attention_mask(target_ids, pad_id=0):
    """Look-ahead and padding combined: bool [batch, 1, target_length, target_length]."""
    return causal_mask(ops.shape(target_ids)[1], ops.not_equal(target_ids, pad_id))


def causal_mask(length, real=None):
    """``look_ahead_mask(length)``, and with a Keras mask ``real`` [batch, length] (True at real
    tokens) its padding too: bool [batch or 1, 1, length, length]. What a decoder called without
    a self-attention mask uses, from its input's Keras mask."""
    mask = look_ahead_mask(length)
    return mask if real is None else ops.logical_and(mask, key_padding_mask(real))


def cache_step_mask(index, max_length):
    """For incremental decoding with a fixed-size cache: bool [1, 1, 1, max_length], True at cache
    positions 0..index (the ones written so far); later slots hold zeros and must not be attended."""
    return ops.reshape(ops.less_equal(ops.arange(max_length), index), (1, 1, 1, max_length))

