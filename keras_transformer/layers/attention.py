"""Scaled dot-product attention (Eq. 1) and multi-head attention (section 3.2.2)."""

import math

import keras
from keras import ops

# Masked scores are set to this instead of -inf (section 3.2.3) so that a row with every key masked
# (an empty source sentence) gives uniform weights rather than NaN.
_MASKED_SCORE = -1e9


def scaled_dot_product_attention(query, key, value, mask=None, weights_dropout=None):
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V, Eq. (1).

    Args:
      query: [..., query_length, d_k]. key: [..., key_length, d_k]. value: [..., key_length, d_v].
      mask: optional bool, broadcastable to [..., query_length, key_length]; True = may attend.
      weights_dropout: optional callable applied to the attention weights before they weight the
        values (attention dropout; the paper's base model does not use it).

    Returns:
      (outputs [..., query_length, d_v], weights [..., query_length, key_length]); each row of
      ``weights`` sums to 1 and is 0 at masked keys.
    """
    d_k = query.shape[-1]
    scores = ops.matmul(query, ops.swapaxes(key, -1, -2)) / ops.cast(math.sqrt(d_k), query.dtype)
    # Softmax in float32: under mixed precision the exponentials of bf16/fp16 scores lose too much.
    scores = ops.cast(scores, "float32")
    if mask is not None:
        scores = ops.where(mask, scores, _MASKED_SCORE)
    weights = ops.cast(ops.softmax(scores, axis=-1), value.dtype)
    if weights_dropout is not None:
        weights = weights_dropout(weights)
    return ops.matmul(weights, value), weights


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    The h per-head projections W_i^Q (d_model x d_k) are stored side by side as one
    [d_model, h * d_k] matrix (likewise W^K, W^V), which is the same linear map and one matmul.

    Call modes:
      - ``layer(query, key_value, attention_mask)``: attention of ``query`` over ``key_value`` (self-attention
        when ``key_value`` is None).
      - ``layer(query, attention_mask=..., cache=cache)`` with a cache from ``compute_cache(memory)``:
        encoder-decoder attention over keys/values projected once per sentence.
      - ``layer(query, attention_mask=..., cache=cache, cache_index=i)`` with ``initial_cache(...)``: incremental
        self-attention; the new key/value of the single query step is written into a fixed-size
        buffer at position ``i`` (no growing concat, so XLA sees one shape) and the updated cache is
        returned.
    With a cache the call returns ``(outputs, cache)``; ``return_attention_weights=True`` appends the
    weights [batch, heads, query_length, key_length].
    """

    def __init__(self, num_heads, d_model, d_k=None, d_v=None, attention_dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        if d_k is None or d_v is None:
            if d_model % num_heads:
                raise ValueError(
                    f"d_model={d_model} is not divisible by num_heads={num_heads}; "
                    "set d_k and d_v explicitly."
                )
        self.num_heads = num_heads
        self.d_model = d_model
        self.d_k = d_k or d_model // num_heads
        self.d_v = d_v or d_model // num_heads
        self.attention_dropout = attention_dropout
        self.query_projection = keras.layers.Dense(num_heads * self.d_k, name="query", dtype=self.dtype_policy)
        self.key_projection = keras.layers.Dense(num_heads * self.d_k, name="key", dtype=self.dtype_policy)
        self.value_projection = keras.layers.Dense(num_heads * self.d_v, name="value", dtype=self.dtype_policy)
        self.output_projection = keras.layers.Dense(d_model, name="output", dtype=self.dtype_policy)
        self.weights_dropout = keras.layers.Dropout(attention_dropout, dtype=self.dtype_policy)

    def build(self, query_shape, key_value_shape=None):
        key_value_shape = query_shape if key_value_shape is None else key_value_shape
        self.query_projection.build(query_shape)
        self.key_projection.build(key_value_shape)
        self.value_projection.build(key_value_shape)
        self.output_projection.build(tuple(query_shape[:-1]) + (self.num_heads * self.d_v,))
        self.built = True

    def _split_heads(self, x, depth):
        """[batch, length, heads * depth] -> [batch, heads, length, depth]."""
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        return ops.transpose(ops.reshape(x, (batch, length, self.num_heads, depth)), (0, 2, 1, 3))

    def _project_key_value(self, key_value):
        return {
            "key": self._split_heads(self.key_projection(key_value), self.d_k),
            "value": self._split_heads(self.value_projection(key_value), self.d_v),
        }

    def compute_cache(self, memory):
        """Keys and values of the encoder output, computed once per sentence for decoding."""
        return self._project_key_value(memory)

    def initial_cache(self, batch_size, max_length):
        """Zero key/value buffers [batch, heads, max_length, d_k|d_v] for incremental self-attention."""
        dtype = self.compute_dtype
        return {
            "key": ops.zeros((batch_size, self.num_heads, max_length, self.d_k), dtype=dtype),
            "value": ops.zeros((batch_size, self.num_heads, max_length, self.d_v), dtype=dtype),
        }

    def call(self, query, key_value=None, attention_mask=None, cache=None, cache_index=None, training=None,
             return_attention_weights=False):
        q = self._split_heads(self.query_projection(query), self.d_k)
        if cache is None:
            kv = self._project_key_value(query if key_value is None else key_value)
        elif cache_index is None:
            kv = cache
        else:
            step = self._project_key_value(query)
            # A select rather than a dynamic-update-slice: the latter is an XLA op, and an exported
            # model must run on servers without XLA.
            max_length = ops.shape(cache["key"])[2]
            written = ops.reshape(ops.equal(ops.arange(max_length), cache_index), (1, 1, max_length, 1))
            kv = {name: ops.where(written, ops.cast(step[name], cache[name].dtype), cache[name])
                  for name in ("key", "value")}
        outputs, weights = scaled_dot_product_attention(
            q, kv["key"], kv["value"], attention_mask,
            weights_dropout=lambda w: self.weights_dropout(w, training=training),
        )
        batch, length = ops.shape(outputs)[0], ops.shape(outputs)[2]
        concatenated = ops.reshape(ops.transpose(outputs, (0, 2, 1, 3)),
                                   (batch, length, self.num_heads * self.d_v))
        result = (self.output_projection(concatenated),)
        if cache is not None:
            result += (kv,)
        if return_attention_weights:
            result += (weights,)
        return result[0] if len(result) == 1 else result

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "d_model": self.d_model,
            "d_k": self.d_k,
            "d_v": self.d_v,
            "attention_dropout": self.attention_dropout,
        }
