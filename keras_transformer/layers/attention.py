"""Scaled dot-product attention (Eq. 1) and multi-head attention (section 3.2.2)."""

import math

import keras
import tensorflow as tf
from keras import ops

from keras_transformer.layers.dropout import Dropout

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
    # tf.nn.softmax, not keras.ops.softmax: the first step of cached decoding attends over one
    # key, and Keras warns about every softmax over an axis of size 1 (correct here: weight 1).
    weights = ops.cast(tf.nn.softmax(scores, axis=-1), value.dtype)
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
        encoder-decoder attention over keys/values projected once per sentence. The query may hold
        a multiple of the cache's rows (the beams of a beam search, those of one sentence adjacent):
        each group of rows attends to its sentence's keys, which are thus never copied per beam.
      - ``layer(query, attention_mask=..., cache=cache, cache_index=i)``: incremental
        self-attention of one step. With ``initial_cache(batch, max_length)`` (fixed-size buffers)
        the step's key/value are written at position ``i`` with a select (one shape for every
        step, as XLA needs); with ``initial_cache(batch)`` (``grow_cache=True``) they are appended,
        so each step touches only the steps so far (the fastest without XLA). The updated cache is
        returned.
    With a cache the call returns ``(outputs, cache)``; ``return_attention_weights=True`` appends the
    weights [batch, heads, query_length, key_length]. In the cached modes the query may also be
    [batch, d_model] (one step per row, the output likewise): plain matrix products, fewer ops
    per decoding step.
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
        self.weights_dropout = Dropout(attention_dropout, dtype=self.dtype_policy)

    def build(self, query_shape, key_value_shape=None):
        key_value_shape = query_shape if key_value_shape is None else key_value_shape
        self.query_projection.build(query_shape)
        self.key_projection.build(key_value_shape)
        self.value_projection.build(key_value_shape)
        self.output_projection.build(tuple(query_shape[:-1]) + (self.num_heads * self.d_v,))
        self.built = True

    def _split_heads(self, x, depth):
        """[batch, length, heads * depth] -> [batch, heads, length, depth]; [batch, heads * depth]
        (one step) -> [batch, heads, 1, depth], a reshape only."""
        if len(x.shape) == 2:
            return ops.reshape(x, (-1, self.num_heads, 1, depth))
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        return ops.transpose(ops.reshape(x, (batch, length, self.num_heads, depth)), (0, 2, 1, 3))

    def _merge_heads(self, x, query_rank):
        """The inverse of ``_split_heads`` for the values: [batch, heads, length, d_v] -> [batch,
        length, heads * d_v], or [batch, heads * d_v] for a 2-D query."""
        if query_rank == 2:
            return ops.reshape(x, (-1, self.num_heads * self.d_v))
        batch, length = ops.shape(x)[0], ops.shape(x)[2]
        return ops.reshape(ops.transpose(x, (0, 2, 1, 3)), (batch, length, self.num_heads * self.d_v))

    def _project_key_value(self, key_value):
        return {
            "key": self._split_heads(self.key_projection(key_value), self.d_k),
            "value": self._split_heads(self.value_projection(key_value), self.d_v),
        }

    def compute_cache(self, memory):
        """Keys and values of the encoder output, computed once per sentence for decoding."""
        return self._project_key_value(memory)

    def initial_cache(self, batch_size, max_length=None):
        """Key/value cache [batch, heads, length, d_k|d_v] for incremental self-attention: zero
        buffers of ``max_length`` steps, or (``max_length=None``) empty ones to grow."""
        dtype = self.compute_dtype
        length = 0 if max_length is None else max_length
        return {
            "key": ops.zeros((batch_size, self.num_heads, length, self.d_k), dtype=dtype),
            "value": ops.zeros((batch_size, self.num_heads, length, self.d_v), dtype=dtype),
        }

    def call(self, query, key_value=None, attention_mask=None, cache=None, cache_index=None, training=None,
             return_attention_weights=False, grow_cache=False):
        if cache is not None and cache_index is None and len(query.shape) == 2:
            return self._attend_to_memory_cache(query, cache, attention_mask, training,
                                                return_attention_weights)
        q = self._split_heads(self.query_projection(query), self.d_k)
        groups = None
        if cache is None:
            kv = self._project_key_value(query if key_value is None else key_value)
        elif cache_index is None:
            # Rows per sentence: 1, or the beam size when the query holds every beam. The query gets
            # a group axis and the keys/values a size-1 one, which the matrix products broadcast:
            # no copies of a sentence's keys per beam, and no transposes.
            groups = ops.shape(q)[0] // ops.shape(cache["key"])[0]
            q = ops.reshape(q, (-1, groups, self.num_heads, ops.shape(q)[2], self.d_k))
            kv = {name: ops.expand_dims(value, 1) for name, value in cache.items()}
            if attention_mask is not None:
                attention_mask = ops.expand_dims(attention_mask, 1)
        else:
            step = self._project_key_value(query)
            if grow_cache:
                kv = {name: ops.concatenate([cache[name], ops.cast(step[name], cache[name].dtype)], axis=2)
                      for name in ("key", "value")}
            else:
                # A select rather than a dynamic-update-slice: the latter is an XLA op, and an
                # exported model must run on servers without XLA.
                max_length = ops.shape(cache["key"])[2]
                written = ops.reshape(ops.equal(ops.arange(max_length), cache_index), (1, 1, max_length, 1))
                kv = {name: ops.where(written, ops.cast(step[name], cache[name].dtype), cache[name])
                      for name in ("key", "value")}
        outputs, weights = scaled_dot_product_attention(
            q, kv["key"], kv["value"], attention_mask,
            weights_dropout=lambda w: self.weights_dropout(w, training=training),
        )
        if groups is not None:  # [sentences, groups, heads, length, depth] -> rows
            outputs = ops.reshape(outputs, (-1, self.num_heads, ops.shape(outputs)[3], self.d_v))
            weights = ops.reshape(weights, (-1, self.num_heads, ops.shape(weights)[3],
                                            ops.shape(weights)[4]))
        result = (self.output_projection(self._merge_heads(outputs, len(query.shape))),)
        if cache is not None:
            result += (kv,)
        if return_attention_weights:
            result += (weights,)
        return result[0] if len(result) == 1 else result

    def _attend_to_memory_cache(self, query, cache, attention_mask, training, return_attention_weights):
        """One decoding step over keys/values computed once per sentence: query [rows, d_model],
        the rows of one sentence (its beams) adjacent; ``attention_mask`` [sentences, 1, 1,
        memory_length]. A sentence's rows become the query rows of one [groups, d_k] x [d_k,
        memory_length] product per head: fewer and larger matrix products than one row each
        against broadcast keys."""
        sentences = ops.shape(cache["key"])[0]
        q = ops.reshape(self.query_projection(query), (sentences, -1, self.num_heads, self.d_k))
        q = ops.transpose(q, (0, 2, 1, 3))  # [sentences, heads, groups, d_k]
        outputs, weights = scaled_dot_product_attention(
            q, cache["key"], cache["value"], attention_mask,
            weights_dropout=lambda w: self.weights_dropout(w, training=training))
        outputs = ops.reshape(ops.transpose(outputs, (0, 2, 1, 3)), (-1, self.num_heads * self.d_v))
        result = (self.output_projection(outputs), cache)
        if return_attention_weights:  # [sentences, heads, groups, length] -> [rows, heads, 1, length]
            weights = ops.transpose(weights, (0, 2, 1, 3))
            result += (ops.reshape(weights, (-1, self.num_heads, 1, ops.shape(weights)[3])),)
        return result

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "d_model": self.d_model,
            "d_k": self.d_k,
            "d_v": self.d_v,
            "attention_dropout": self.attention_dropout,
        }

