"""The Transformer (section 3, Figure 1) as a ``keras.Model``."""

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from keras_transformer.config import TransformerConfig
from keras_transformer.layers import masks
from keras_transformer.layers.attention import score_bias
from keras_transformer.layers.decoder import Decoder
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.embedding import (LearnedPositionalEmbedding, SharedEmbedding,
                                                positional_encoding)
from keras_transformer.layers.encoder import Encoder


@keras.saving.register_keras_serializable(package="keras_transformer")
class Transformer(keras.Model):
    """Encoder-decoder Transformer.

    ``model((source_ids, target_input_ids), training=...)`` -> float32 logits
    [batch, target_length, target_vocab]; ids are int [batch, length] with ``config.pad_id`` (0) as
    padding. For decoding: ``encode`` once, ``init_cache``, then ``decode_step`` per output position.

    Args:
      config: a ``TransformerConfig`` (or its ``to_dict()``): every size and rate of the model.
      **kwargs: ``keras.Model`` arguments (``name``, ``dtype``, e.g. "mixed_bfloat16").
    """

    def __init__(self, config, **kwargs):
        super().__init__(**kwargs)
        if isinstance(config, dict):
            config = TransformerConfig.from_dict(config)
        if not isinstance(config, TransformerConfig):
            # A preset has no vocabulary size (it comes from the tokenizer), so a name alone
            # cannot make a model.
            preset = (f" For a preset: Transformer(TransformerConfig.from_preset({config!r}, "
                      "vocab_size=...))." if isinstance(config, str) else "")
            raise TypeError("config must be a TransformerConfig or its to_dict(); got "
                            f"{type(config).__name__} {config!r}.{preset}")
        self.config = config
        policy = self.dtype_policy
        d_model = config.d_model
        # Section 3.4: one matrix for both embeddings and the pre-softmax projection.
        self.target_embedding = SharedEmbedding(config.output_vocab_size, d_model,
                                                name="target_embedding", dtype=policy)
        if config.joint_vocabulary and config.share_embeddings:
            self.source_embedding = self.target_embedding
        else:
            self.source_embedding = SharedEmbedding(config.vocab_size, d_model, name="source_embedding",
                                                    dtype=policy)
        self.softmax_embedding = (self.target_embedding if config.share_embeddings else
                                  SharedEmbedding(config.output_vocab_size, d_model,
                                                  name="softmax_embedding", dtype=policy))
        # Table 3 row (E): learned positional embeddings; None with the paper's sinusoids.
        self.source_positions = self.target_positions = None
        if config.positional == "learned":
            self.source_positions = LearnedPositionalEmbedding(config.max_length, d_model,
                                                               name="source_positions", dtype=policy)
            self.target_positions = LearnedPositionalEmbedding(config.max_length, d_model,
                                                               name="target_positions", dtype=policy)
        # Section 5.4: dropout on the sums of embeddings and positional encodings.
        self.embedding_dropout = Dropout(config.dropout_rate, name="embedding_dropout", dtype=policy)
        # Word dropout (Sennrich & Zhang 2019): whole token embeddings zeroed, all d_model features
        # of a position together (one noise value per position), before the positional encodings
        # are added, so a dropped word keeps its position. Kept ones are scaled by 1 / (1 - p) as
        # in ordinary dropout. Training only.
        self.source_word_dropout = Dropout(
            config.source_word_dropout, noise_shape=(None, None, 1), name="source_word_dropout", dtype=policy)
        self.target_word_dropout = Dropout(
            config.target_word_dropout, noise_shape=(None, None, 1), name="target_word_dropout", dtype=policy)
        stack = dict(num_layers=config.num_layers, layer_config=_layer_config(config), dtype=policy)
        self.encoder = Encoder(name="encoder", **stack)
        self.decoder = Decoder(name="decoder", layerdrop=config.decoder_layerdrop, **stack)
        # Every shape is known from the config, so build now: encode/decode_step may then be called
        # (e.g. after restoring a checkpoint) before any forward pass.
        self.build(((None, None), (None, None)))

    def build(self, input_shape):
        if self.built:  # built in __init__; shapes do not matter beyond the config
            return
        source_shape, target_shape = (tuple(shape) for shape in input_shape)
        for embedding in {id(e): e for e in (self.source_embedding, self.target_embedding,
                                             self.softmax_embedding)}.values():
            embedding.build()
        if self.source_positions is not None:
            self.source_positions.build()
            self.target_positions.build()
        d_model = self.config.d_model
        self.encoder.build(source_shape + (d_model,))
        self.decoder.build(target_shape + (d_model,), source_shape + (d_model,))
        self.built = True

    # -- input checks: a clear error here instead of a gather failure deep inside TensorFlow --

    def _checked_ids(self, ids, vocab_size, name):
        ids = ops.convert_to_tensor(ids)
        if not ids.dtype.is_integer:
            raise ValueError(f"{name} must hold integer token ids; got dtype {ids.dtype.name}.")
        if ids.shape.rank != 2:
            raise ValueError(f"{name} must have shape [batch, length]; got shape {ids.shape}.")
        if self.config.positional == "learned" and (ids.shape[1] or 0) > self.config.max_length:
            raise ValueError(f"{name} has length {ids.shape[1]} > max_length={self.config.max_length} "
                             "of the learned positional embeddings.")
        ids = ops.cast(ids, "int32")
        if isinstance(ids, tf.Tensor) and tf.executing_eagerly():
            values = ids.numpy()
            bad = np.argwhere((values < 0) | (values >= vocab_size))
            if len(bad):
                row, column = bad[0]
                raise ValueError(f"{name} holds id {values[row, column]} at [{row}, {column}], outside "
                                 f"the vocabulary [0, {vocab_size}).")
            return ids
        with tf.control_dependencies([
            tf.debugging.assert_non_negative(ids, message=f"{name} holds negative token ids"),
            tf.debugging.assert_less(ids, vocab_size,
                                     message=f"{name} holds ids >= vocabulary size {vocab_size}"),
        ]):
            return tf.identity(ids)

    def _checked_batch(self, target_input_ids, memory):
        """``target_input_ids`` after checking it has one row per row of ``memory`` (of
        ``source_ids``): attention would broadcast a single row over the other's batch."""
        target_batch, source_batch = target_input_ids.shape[0], memory.shape[0]
        message = "target_input_ids and source_ids must have the same batch size"
        if target_batch is not None and source_batch is not None:
            if target_batch != source_batch:
                raise ValueError(f"{message}; got {target_batch} target rows for {source_batch} "
                                 "source rows.")
            return target_input_ids
        with tf.control_dependencies([tf.debugging.assert_equal(
                tf.shape(target_input_ids)[0], tf.shape(memory)[0], message=message)]):
            return tf.identity(target_input_ids)

    # -- the forward pass --

    def _embed(self, ids, embedding, positions, start=0, training=None, word_dropout=None):
        """Token embeddings x sqrt(d_model) (section 3.4) plus positional encodings (section 3.5)."""
        length = ops.shape(ids)[1]
        if positions is not None:
            position_table = positions(ids, start=start)
        else:
            position_table = positional_encoding(length, self.config.d_model, start)
        tokens = embedding(ids)
        if word_dropout is not None:
            tokens = word_dropout(tokens, training=training)
        x = tokens + ops.cast(position_table, self.compute_dtype)
        return self.embedding_dropout(x, training=training)

    def encode(self, source_ids, training=False):
        """source_ids [batch, source_length] -> (memory [batch, source_length, d_model],
        memory_mask bool [batch, 1, 1, source_length])."""
        source_ids = self._checked_ids(source_ids, self.config.vocab_size, "source_ids")
        memory_mask = masks.padding_mask(source_ids, self.config.pad_id)
        x = self._embed(source_ids, self.source_embedding, self.source_positions,
                        training=training, word_dropout=self.source_word_dropout)
        return self.encoder(x, padding_mask=memory_mask, training=training), memory_mask

    def decode(self, target_input_ids, memory, memory_mask, training=False):
        """Teacher-forced decoding: float32 logits [batch, target_length, target_vocab]."""
        return self.softmax_embedding.project(
            self.decoder_states(target_input_ids, memory, memory_mask, training=training))

    def decoder_states(self, target_input_ids, memory, memory_mask, training=False):
        """Teacher-forced decoding up to the pre-softmax projection: the decoder stack's output
        [batch, target_length, d_model], which ``decode`` projects (the training step projects
        it inside its loss: ``training.loss.projected_loss_and_accuracy``)."""
        target_input_ids = self._checked_batch(self._checked_ids(
            target_input_ids, self.config.output_vocab_size, "target_input_ids"), memory)
        x = self._embed(target_input_ids, self.target_embedding, self.target_positions,
                        training=training, word_dropout=self.target_word_dropout)
        self_mask = masks.decoder_self_attention_mask(target_input_ids, self.config.pad_id)
        return self.decoder(x, memory, self_attention_mask=self_mask, memory_mask=memory_mask,
                            training=training)

    def call(self, inputs, training=None):
        source_ids, target_input_ids = inputs
        memory, memory_mask = self.encode(source_ids, training=training)
        return self.decode(target_input_ids, memory, memory_mask, training=training)

    def attention_weights(self, source_ids, target_input_ids):
        """The attention maps of one teacher-forced pass (for plots like the paper's Figures 3-5):
        ``{"encoder_self": [per layer: [batch, heads, S, S]], "decoder_self": [... [batch, heads, T, T]],
        "decoder_cross": [... [batch, heads, T, S]]}``."""
        source_ids = self._checked_ids(source_ids, self.config.vocab_size, "source_ids")
        target_input_ids = self._checked_batch(self._checked_ids(
            target_input_ids, self.config.output_vocab_size, "target_input_ids"), source_ids)
        memory_mask = masks.padding_mask(source_ids, self.config.pad_id)
        x = self._embed(source_ids, self.source_embedding, self.source_positions)
        memory, encoder_weights = self.encoder(x, padding_mask=memory_mask, return_attention_weights=True)
        y = self._embed(target_input_ids, self.target_embedding, self.target_positions)
        self_mask = masks.decoder_self_attention_mask(target_input_ids, self.config.pad_id)
        _, decoder_weights = self.decoder(y, memory, self_attention_mask=self_mask,
                                          memory_mask=memory_mask, return_attention_weights=True)
        return {"encoder_self": encoder_weights,
                "decoder_self": [w["self"] for w in decoder_weights],
                "decoder_cross": [w["cross"] for w in decoder_weights]}

    # -- step-by-step decoding (section 6.1's beam search calls this through one step function) --

    def init_cache(self, memory, memory_mask, max_decode_length=None):
        """``(cache, memory_cache)``, the two plain nested dicts of tensors ``decode_step`` reads,
        in the layout ``decoding.beam_search`` takes them (``initial_cache``, ``shared_cache``):

        - ``cache``, one row per hypothesis: each decoder layer's self-attention keys and values,
          ``{"layer_i": {"key", "value"}}``, empty and growing by one position per ``decode_step``
          (``max_decode_length=None``; each step then touches only the steps so far: the fastest
          without XLA), or zero buffers of ``max_decode_length`` steps written in place (one shape
          for every step, as XLA needs; then call ``decode_step(..., grow_cache=False)``).
        - ``memory_cache``, one row per sentence: ``{"mask": the memory mask as float32 to add to
          the scores (``attention.score_bias``), "layer_i": {"key", "value"}}``, the encoder
          output projected once, the mask converted once. Every hypothesis of a sentence shares
          it: ``decode_step`` accepts several adjacent rows of ids per memory row, so a beam
          search never copies or reorders it.
        """
        batch = ops.shape(memory)[0]
        return (self.decoder.initial_cache(batch, max_decode_length),
                {"mask": score_bias(memory_mask), **self.decoder.memory_cache(memory)})

    def step_weights(self):
        """What every ``decode_step`` of a search reads, derived from the weights once per search
        instead of once per step (pass it as ``decode_step(..., weights=)``): the pre-softmax
        projection as a [d_model, target_vocab] matrix, whose product with [rows, d_model] is
        faster than one with the [target_vocab, d_model] embedding transposed on the fly."""
        embeddings = self.softmax_embedding.embeddings
        return {"output_kernel": ops.transpose(ops.cast(embeddings, self.compute_dtype))}

    def decode_step(self, ids, index, cache, memory_cache, *, grow_cache, weights=None):
        """ids int [rows]: the tokens at position ``index`` (scalar); ``cache`` and
        ``memory_cache`` from ``init_cache`` (rows a multiple of the memory's rows, the
        hypotheses of one sentence adjacent); ``grow_cache``: whether ``cache`` grows (True,
        ``init_cache`` without ``max_decode_length``) or is fixed buffers (False); ``weights``:
        ``step_weights()`` (optional, the same logits faster). Returns float32 logits [rows,
        target_vocab] for position index + 1, and the updated ``cache``."""
        # A cache of the other kind would be read wrongly without an error; say so where it shows.
        length = cache["layer_0"]["key"].shape[2]
        if grow_cache and isinstance(index, int) and length is not None and length != index:
            raise ValueError(f"decode_step: the cache holds {length} positions at step {index}: "
                             "fixed buffers (init_cache with max_decode_length) need grow_cache=False.")
        if not grow_cache and length == 0:
            raise ValueError("decode_step: an empty cache (init_cache without max_decode_length) "
                             "grows: pass grow_cache=True.")
        # One [rows, d_model] row per hypothesis: plain matrix products, fewer ops per step than
        # the [rows, 1, d_model] of teacher forcing.
        x = self._embed(ops.expand_dims(ops.cast(ids, "int32"), 1), self.target_embedding,
                        self.target_positions, start=index)
        x = ops.reshape(x, (-1, self.config.d_model))
        mask = (None if grow_cache else
                masks.cache_step_mask(index, ops.shape(cache["layer_0"]["key"])[2]))
        x, cache = self.decoder.step(x, cache, index, memory_cache, memory_cache["mask"], mask,
                                     grow_cache=grow_cache)
        with tf.name_scope("output_projection"):  # a label for profiles
            if weights is None:
                logits = self.softmax_embedding.project(x)
            else:
                logits = ops.cast(ops.matmul(x, weights["output_kernel"]), "float32")
        return logits, cache

    def get_config(self):
        return {"config": self.config.to_dict(), "name": self.name, "trainable": self.trainable,
                "dtype": keras.saving.serialize_keras_object(self.dtype_policy)}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        model_config = TransformerConfig.from_dict(config.pop("config"))
        if "dtype" in config and isinstance(config["dtype"], dict):
            config["dtype"] = keras.saving.deserialize_keras_object(config["dtype"])
        return cls(model_config, **config)


def _layer_config(config):
    """The per-layer arguments of ``EncoderLayer``/``DecoderLayer`` from a ``TransformerConfig``."""
    return dict(d_model=config.d_model, num_heads=config.num_heads, d_ff=config.d_ff,
                d_k=config.d_k, d_v=config.d_v, dropout_rate=config.dropout_rate,
                attention_dropout=config.attention_dropout, relu_dropout=config.relu_dropout,
                norm_first=config.norm_first, layer_norm_epsilon=config.layer_norm_epsilon)
