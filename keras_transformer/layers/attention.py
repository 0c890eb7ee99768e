"""Scaled dot-product attention (Eq. 1) and multi-head attention (section 3.2.2)."""

import math
import numbers

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from keras_transformer.layers.dense import Dense, affine
from keras_transformer.layers.dropout import Dropout

# Added to masked scores instead of -inf (section 3.2.3) so that a row with every key masked (an
# empty source sentence) gives (nearly) uniform weights rather than NaN.
_MASKED_SCORE = -1e9


def scaled_dot_product_attention(query, key, value, mask=None, weights_dropout=None,
                                 query_scaled=False):
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V, Eq. (1).

    Args:
      query: [..., query_length, d_k]. key: [..., key_length, d_k]. value: [..., key_length, d_v].
      mask: optional, broadcastable to [..., query_length, key_length]: bool or integer (True or
        nonzero = may attend), or float added to the scores (``score_bias``: 0 where allowed,
        very negative elsewhere; not Keras's float 1/0).
      weights_dropout: optional callable applied to the attention weights before they weight the
        values (attention dropout; the paper's base model does not use it).
      query_scaled: ``query`` is already divided by sqrt(d_k) (``MultiHeadAttention`` folds the
        division into its query projection, a [d_model, h * d_k] matrix instead of the scores).

    Returns:
      (outputs [..., query_length, d_v], weights [..., query_length, key_length]); each row of
      ``weights`` sums to 1 and is 0 at masked keys.
    """
    if not query_scaled:
        query = query / ops.cast(math.sqrt(query.shape[-1]), query.dtype)
    scores = tf.matmul(query, key, transpose_b=True)
    # Softmax in float32: under mixed precision the exponentials of bf16/fp16 scores lose too much.
    scores = ops.cast(scores, "float32")
    if mask is not None:
        # An addition rather than a select: no second pass in the backward pass.
        mask = tf.convert_to_tensor(mask)
        scores = scores + (ops.cast(mask, "float32") if mask.dtype.is_floating else score_bias(mask))
    # tf.nn.softmax, not keras.ops.softmax: the first step of cached decoding attends over one
    # key, and Keras warns about every softmax over an axis of size 1 (correct here: weight 1).
    weights = ops.cast(tf.nn.softmax(scores, axis=-1), value.dtype)
    if weights_dropout is not None:
        weights = weights_dropout(weights)
    return ops.matmul(weights, value), weights


def score_bias(mask):
    """A bool attention mask (True = may attend; an integer one: nonzero = may attend) as float32
    to add to the scores: 0 where allowed, ``_MASKED_SCORE`` elsewhere. Computed on the mask's
    own shape (one row per sentence, not per head). A row whose keys are all masked gets scores
    of about ``_MASKED_SCORE`` everywhere: nearly uniform weights, no NaN."""
    return tf.where(tf.cast(mask, tf.bool), 0.0, _MASKED_SCORE)


def _per_head(mask):
    """An attention mask in any of ``MultiHeadAttention``'s shapes as one that broadcasts against
    the scores [batch, heads, query_length, key_length]: a heads axis is inserted in Keras's
    [batch, query_length, key_length], and in a key padding mask [batch, key_length] (the Keras
    mask of the keys' sequence, as ``Embedding(mask_zero=True)`` makes) a query axis too.
    Broadcast as they are, both would meet the wrong axes of the scores."""
    mask = tf.convert_to_tensor(mask)
    rank = mask.shape.rank
    if rank == 2:
        return mask[:, None, None, :]
    if rank == 3:
        return mask[:, None]
    if rank is not None and rank > 4:
        raise ValueError(
            "attention_mask must have shape [batch, 1 or heads, query_length, key_length], "
            "[batch, query_length, key_length] (as keras.layers.MultiHeadAttention's) or "
            f"[batch, key_length] (key padding); got shape {mask.shape}.")
    return mask


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    The h per-head projections W_i^Q (d_model x d_k) are stored side by side as one
    [d_model, h * d_k] matrix (likewise W^K, W^V), which is the same linear map and one matmul.

    One method per way of attending, each with one return:

    - ``layer(query, key_value, attention_mask)`` (``call``): attention of ``query`` over
      ``key_value`` (self-attention when it is None), as in training.
    - ``self_attention_step(query, cache, index, grow_cache=...)``: one step of incremental
      self-attention in decoding, over the keys/values of the steps so far.
    - ``memory_attention(query, memory_cache, attention_mask)``: one decoding step's attention
      over the encoder output's keys/values, projected once per sentence (``compute_cache``).

    Args:
      num_heads: h, the number of heads.
      d_model: the model's width, the size of the inputs and of the output.
      d_k: the size of each head's queries and keys (default ``d_model / num_heads``).
      d_v: the size of each head's values (default ``d_model / num_heads``).
      attention_dropout: dropout rate on the attention weights (the paper's models: 0).
      **kwargs: ``keras.layers.Layer`` arguments (``name``, ``dtype``).
    """

    def __init__(self, num_heads, d_model, d_k=None, d_v=None, attention_dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True  # the query's Keras mask is the output's, as in Keras's layer
        # Else a zero or negative size fails only at call time, deep inside (a division by zero).
        sizes = {"num_heads": num_heads, "d_model": d_model,
                 **{name: size for name, size in (("d_k", d_k), ("d_v", d_v)) if size is not None}}
        for name, size in sizes.items():
            if not (isinstance(size, numbers.Integral) and size > 0):
                raise ValueError(f"{name} must be a positive integer; got {size!r}.")
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
        self.query_projection = Dense(num_heads * self.d_k, name="query", dtype=self.dtype_policy)
        self.key_projection = Dense(num_heads * self.d_k, name="key", dtype=self.dtype_policy)
        self.value_projection = Dense(num_heads * self.d_v, name="value", dtype=self.dtype_policy)
        self.output_projection = Dense(d_model, name="output", dtype=self.dtype_policy)
        self.weights_dropout = Dropout(attention_dropout, dtype=self.dtype_policy)

    def build(self, query_shape, key_value_shape=None):
        key_value_shape = query_shape if key_value_shape is None else key_value_shape
        self.query_projection.build(query_shape)
        self.key_projection.build(key_value_shape)
        self.value_projection.build(key_value_shape)
        self.output_projection.build(tuple(query_shape[:-1]) + (self.num_heads * self.d_v,))
        self.built = True

    def _split_heads(self, x, depth):
        """[batch, length, heads * depth] -> [batch, heads, length, depth]; [rows, heads * depth]
        (one decoding step) -> [rows, heads, 1, depth], a reshape only."""
        if len(x.shape) == 2:
            return ops.reshape(x, (-1, self.num_heads, 1, depth))
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        return ops.transpose(ops.reshape(x, (batch, length, self.num_heads, depth)), (0, 2, 1, 3))

    def _weights_of(self, projection):
        """(kernel, bias) of a projection in the compute dtype; the query's divided by
        sqrt(d_k), the scale of Eq. (1), so the scores need no division."""
        kernel = ops.cast(projection.kernel, self.compute_dtype)
        bias = ops.cast(projection.bias, self.compute_dtype)
        if projection is self.query_projection:
            scale = ops.cast(1.0 / math.sqrt(self.d_k), self.compute_dtype)
            kernel, bias = kernel * scale, bias * scale
        return kernel, bias

    def _query(self, x, training=False):
        """The scaled queries of ``x`` (``_weights_of``), [batch, length | rows, h * d_k]."""
        return affine(x, *self._weights_of(self.query_projection), dtype=self.compute_dtype,
                      training=training)

    def _project(self, x, projections, training=False):
        """The ``projections`` (Dense layers) of ``x`` [batch, length, d_model] as one matmul
        with their kernels side by side, each split into heads: [batch, heads, length, depth]
        per projection. The variables stay the separate layers' own (their checkpoints)."""
        weights = [self._weights_of(p) for p in projections]
        kernel = ops.concatenate([kernel for kernel, _ in weights], 1)
        bias = ops.concatenate([bias for _, bias in weights], 0)
        fused = affine(x, kernel, bias, dtype=self.compute_dtype, training=training)
        depths = [p.units // self.num_heads for p in projections]
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        if len(set(depths)) == 1:  # one transpose for all: [n, batch, heads, length, depth]
            fused = ops.reshape(fused, (batch, length, len(projections), self.num_heads, depths[0]))
            fused = ops.transpose(fused, (2, 0, 3, 1, 4))
            return ops.unstack(fused, num=len(projections), axis=0)  # its gradient: one stack
        parts = ops.split(fused, list(np.cumsum([p.units for p in projections])[:-1]), axis=-1)
        return [self._split_heads(part, depth) for part, depth in zip(parts, depths)]

    def _project_key_value(self, key_value):
        key, value = self._project(key_value, (self.key_projection, self.value_projection))
        return {"key": key, "value": value}

    def _attend(self, q, key, value, attention_mask, training, query_scaled=True):
        return scaled_dot_product_attention(
            q, key, value, None if attention_mask is None else _per_head(attention_mask),
            weights_dropout=lambda w: self.weights_dropout(w, training=training),
            query_scaled=query_scaled)

    def call(self, query, key_value=None, attention_mask=None, training=None,
             return_attention_weights=False):
        """query [batch, query_length, d_model], key_value [batch, key_length, d_model] (None:
        ``query``, self-attention) -> outputs [batch, query_length, d_model]; with
        ``return_attention_weights`` also the weights [batch, heads, query_length, key_length]
        (as Keras's ``return_attention_scores``).

        attention_mask (optional): bool, True where a query may attend to a key (an integer
        mask: nonzero), of shape [batch, 1 or heads, query_length, key_length] (any axis may be
        1), Keras's [batch, query_length, key_length], or a key padding mask [batch,
        key_length]. A float mask is not Keras's 1/0 but a bias added to the scores: 0 where
        allowed, very negative (e.g. -1e9) where masked (``score_bias``)."""
        if key_value is None:  # Q, K and V of one input: one matmul
            q, key, value = self._project(query, (self.query_projection, self.key_projection,
                                                  self.value_projection), training)
        else:
            q = self._split_heads(self._query(query, training), self.d_k)
            key, value = self._project(key_value, (self.key_projection, self.value_projection),
                                       training)
        outputs, weights = self._attend(q, key, value, attention_mask, training)
        batch, length = ops.shape(outputs)[0], ops.shape(outputs)[2]
        outputs = ops.reshape(ops.transpose(outputs, (0, 2, 1, 3)),
                              (batch, length, self.num_heads * self.d_v))
        outputs = self.output_projection(outputs)
        return (outputs, weights) if return_attention_weights else outputs

    def compute_cache(self, memory):
        """Keys and values of the encoder output [batch, length, d_model], computed once per
        sentence for ``memory_attention``: ``{"key": [batch, heads, length, d_k], "value": ...}``."""
        return self._project_key_value(memory)

    def initial_cache(self, batch_size, max_length=None):
        """Key/value cache [batch, heads, length, d_k|d_v] for ``self_attention_step``: zero
        buffers of ``max_length`` steps, or (``max_length=None``) empty ones to grow."""
        dtype = self.compute_dtype
        length = 0 if max_length is None else max_length
        return {
            "key": ops.zeros((batch_size, self.num_heads, length, self.d_k), dtype=dtype),
            "value": ops.zeros((batch_size, self.num_heads, length, self.d_v), dtype=dtype),
        }

    def self_attention_step(self, query, cache, index, attention_mask=None, *, grow_cache,
                            training=None):
        """One step of incremental self-attention: query [rows, d_model] at position ``index``,
        ``cache`` from ``initial_cache`` -> ``(outputs [rows, d_model], updated cache)``.

        ``grow_cache=True`` (an empty ``initial_cache(rows)``): the step's key/value are appended,
        so each step reads only the steps so far (the fastest without XLA); no mask is needed.
        ``grow_cache=False`` (``initial_cache(rows, max_length)``): they are written at
        ``index`` of the fixed buffers, one shape for every step as XLA needs;
        ``attention_mask`` (``masks.cache_step_mask``) hides the slots after ``index``.
        """
        # One decoding step: the plain projection (no per-step rescaling of the weights).
        q = self._split_heads(self.query_projection(query), self.d_k)
        step = {"key": self._split_heads(self.key_projection(query), self.d_k),
                "value": self._split_heads(self.value_projection(query), self.d_v)}
        if grow_cache:
            kv = {name: ops.concatenate([cache[name], ops.cast(step[name], cache[name].dtype)], axis=2)
                  for name in ("key", "value")}
        else:
            # A select rather than a dynamic-update-slice: the latter is an XLA op, and an
            # exported model must run on servers without XLA.
            max_length = ops.shape(cache["key"])[2]
            written = ops.reshape(ops.equal(ops.arange(max_length), index), (1, 1, max_length, 1))
            kv = {name: ops.where(written, ops.cast(step[name], cache[name].dtype), cache[name])
                  for name in ("key", "value")}
        outputs, _ = self._attend(q, kv["key"], kv["value"], attention_mask, training,
                                  query_scaled=False)
        outputs = ops.reshape(outputs, (-1, self.num_heads * self.d_v))
        return self.output_projection(outputs), kv

    def memory_attention(self, query, memory_cache, attention_mask, training=None):
        """One decoding step over the encoder output's keys/values (``compute_cache``): query
        [rows, d_model], where a sentence's rows (its beams in a beam search) are adjacent and
        ``memory_cache`` holds one row per sentence; ``attention_mask`` [sentences, 1, 1,
        memory_length]. Returns outputs [rows, d_model].

        A sentence's rows become the query rows of one [beams, d_k] x [d_k, memory_length]
        product per head, so its keys are never copied per beam."""
        sentences = ops.shape(memory_cache["key"])[0]
        q = ops.reshape(self.query_projection(query), (sentences, -1, self.num_heads, self.d_k))
        q = ops.transpose(q, (0, 2, 1, 3))  # [sentences, heads, beams, d_k]
        outputs, _ = self._attend(q, memory_cache["key"], memory_cache["value"], attention_mask,
                                  training, query_scaled=False)
        outputs = ops.reshape(ops.transpose(outputs, (0, 2, 1, 3)), (-1, self.num_heads * self.d_v))
        return self.output_projection(outputs)

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "d_model": self.d_model,
            "d_k": self.d_k,
            "d_v": self.d_v,
            "attention_dropout": self.attention_dropout,
        }

