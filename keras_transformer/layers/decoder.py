"""The decoder stack (section 3.1): N identical layers of masked self-attention, encoder-decoder
attention and feed-forward, with a key/value cache for step-by-step decoding."""

import functools
import inspect

import keras
from keras import ops

from keras_transformer.layers import masks
from keras_transformer.layers.sublayers import TransformerLayer, TransformerStack


class _MasksByKeyword:
    """Keras's ``Layer.__call__`` fills a ``memory_mask`` left None with the memory's Keras mask
    and passes it by keyword, so a None given by position would arrive twice ("got multiple values
    for argument 'memory_mask'"). Whatever follows x and memory is therefore passed on by keyword."""

    def __call__(self, x, memory, *args, **kwargs):
        names = _arguments_after_memory(type(self))
        if len(args) > len(names):
            raise TypeError(f"{type(self).__name__} takes at most {len(names) + 2} positional "
                            f"arguments ({len(args) + 2} given)")
        return super().__call__(x, memory, **dict(zip(names, args)), **kwargs)


@functools.cache
def _arguments_after_memory(layer_class):
    return tuple(inspect.signature(layer_class.call).parameters)[3:]  # after self, x, memory


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderLayer(_MasksByKeyword, TransformerLayer):
    """Masked multi-head self-attention, multi-head attention over the encoder output, then the
    position-wise feed-forward network, each inside a residual sub-layer connection (section 3.1,
    Figure 1 right).

    Args: those of ``TransformerLayer``: d_model, num_heads, d_ff, d_k, d_v, dropout_rate,
      attention_dropout, relu_dropout, norm_first, layer_norm_epsilon, and Layer arguments.
    """

    sublayer_names = ("self_attention", "cross_attention", "feed_forward")

    def __init__(self, d_model, num_heads, d_ff, **kwargs):
        super().__init__(d_model, num_heads, d_ff, **kwargs)
        self.self_attention = self._attention("self_attention")
        self.self_attention_norm = self._norm("self_attention_norm")
        self.self_attention_dropout = self._dropout()
        self.cross_attention = self._attention("cross_attention")
        self.cross_attention_norm = self._norm("cross_attention_norm")
        self.cross_attention_dropout = self._dropout()
        self.feed_forward = self._feed_forward("feed_forward")
        self.feed_forward_norm = self._norm("feed_forward_norm")
        self.feed_forward_dropout = self._dropout()

    def build(self, x_shape, memory_shape=None):
        self._build_sublayers(x_shape, memory_shape or x_shape)

    def call(self, x, memory, self_attention_mask=None, memory_mask=None, training=None,
             return_attention_weights=False, x_mask=None):
        """Teacher forcing: x [batch, target_length, d_model], memory [batch, source_length, d_model],
        self_attention_mask [batch, 1, target_length, target_length] (look-ahead and padding),
        memory_mask [batch, 1, 1, source_length] -> x; with ``return_attention_weights`` (x,
        {"self": [batch, heads, T, T], "cross": [batch, heads, T, S]}). The masks may have any
        shape ``MultiHeadAttention`` takes.

        A ``self_attention_mask`` left out is the look-ahead mask of section 3.2.3 (causal, as
        keras-hub's ``TransformerDecoder`` by default), with x's padding where x has a Keras mask
        (``masks.causal_mask``). As in ``keras.layers.MultiHeadAttention`` (``query_mask``,
        ``value_mask``), Keras fills ``x_mask`` and a ``memory_mask`` left out with the Keras masks
        of x and ``memory`` [batch, length], e.g. those of ``Embedding(mask_zero=True)``; the
        output carries x's on. The masks may be given by position or by keyword."""
        if self_attention_mask is None:
            self_attention_mask = masks.causal_mask(ops.shape(x)[1], x_mask)
        weights = {}
        for name, key_value, mask in (("self_attention", None, self_attention_mask),
                                      ("cross_attention", memory, memory_mask)):
            result = self._connect(name, x, lambda h: getattr(self, name)(
                h, key_value, attention_mask=mask, training=training,
                return_attention_weights=return_attention_weights), training)
            x, weights[name.split("_")[0]] = result if return_attention_weights else (result, None)
        x = self._connect("feed_forward", x, lambda h: self.feed_forward(h, training=training),
                          training)
        return (x, weights) if return_attention_weights else x

    def step(self, x, cache, index, memory_cache, memory_mask, self_attention_mask=None, *,
             grow_cache, training=None):
        """One decoding step: x [rows, d_model] at position ``index``; ``cache``: the
        self-attention keys/values (``self_attention.initial_cache``), one row per row of x;
        ``memory_cache``: the encoder output's keys/values (``cross_attention.compute_cache``),
        one row per sentence for its adjacent rows of x; ``self_attention_mask`` and
        ``grow_cache``: see ``MultiHeadAttention.self_attention_step``. Returns (x, the updated
        ``cache``)."""
        x, cache = self._connect("self_attention", x, lambda h: self.self_attention.self_attention_step(
            h, cache, index, self_attention_mask, grow_cache=grow_cache, training=training), training)
        x = self._connect("cross_attention", x, lambda h: self.cross_attention.memory_attention(
            h, memory_cache, memory_mask, training=training), training)
        x = self._connect("feed_forward", x, lambda h: self.feed_forward(h, training=training), training)
        return x, cache


@keras.saving.register_keras_serializable(package="keras_transformer")
class Decoder(_MasksByKeyword, TransformerStack):
    """The decoder: N ``DecoderLayer``s, with a per-layer cache for incremental decoding.

    Args:
      num_layers: N (6 in the paper).
      layer_config: the keyword arguments of each layer (``TransformerLayer``'s).
      layerdrop: the probability of skipping each layer in training (LayerDrop, Fan et al. 2020).
      seed: the seed of LayerDrop's draws.
      **kwargs: ``keras.layers.Layer`` arguments (``name``, ``dtype``).
    """

    layer_class = DecoderLayer

    def __init__(self, num_layers, layer_config, layerdrop=0.0, seed=None, **kwargs):
        super().__init__(num_layers, layer_config, **kwargs)
        # LayerDrop (Fan, Grave & Joulin 2020): in training, each layer is skipped (its input
        # passed on) with this probability, one draw per layer and batch; never at inference.
        self.layerdrop = float(layerdrop)
        self.seed = seed
        self._layerdrop_seed = keras.random.SeedGenerator(seed) if self.layerdrop else None

    def build(self, x_shape, memory_shape=None):
        self._build_layers(x_shape, memory_shape)

    def _layer_drop(self, x, layer_output, training):
        if not (training and self.layerdrop):
            return layer_output
        keep = keras.random.uniform((), seed=self._layerdrop_seed) >= self.layerdrop
        return keras.ops.where(keep, layer_output, x)

    def initial_cache(self, batch_size, max_length=None):
        """The self-attention keys/values of every layer, ``{"layer_i": {"key", "value"}}``, one
        row per hypothesis: zero buffers of ``max_length`` steps, or empty ones to grow (None)."""
        return {f"layer_{i}": layer.self_attention.initial_cache(batch_size, max_length)
                for i, layer in enumerate(self.layers)}

    def memory_cache(self, memory):
        """The encoder output's keys/values of every layer, ``{"layer_i": {"key", "value"}}``,
        projected once per sentence."""
        return {f"layer_{i}": layer.cross_attention.compute_cache(memory)
                for i, layer in enumerate(self.layers)}

    def call(self, x, memory, self_attention_mask=None, memory_mask=None, training=None,
             return_attention_weights=False, x_mask=None):
        """Teacher forcing (see ``DecoderLayer.call``, whose defaults the masks left out take): x,
        or (x, [weights of each layer]) with ``return_attention_weights``."""
        weights = []
        for layer in self.layers:
            output = layer(x, memory, self_attention_mask=self_attention_mask,
                           memory_mask=memory_mask, training=training,
                           return_attention_weights=return_attention_weights, x_mask=x_mask)
            if return_attention_weights:
                output, layer_weights = output
                weights.append(layer_weights)
            x = self._layer_drop(x, output, training)
        x = self._final(x)
        return (x, weights) if return_attention_weights else x

    def step(self, x, cache, index, memory_cache, memory_mask, self_attention_mask=None, *,
             grow_cache, training=None):
        """One decoding step through every layer (see ``DecoderLayer.step``; the caches here are
        those of ``initial_cache`` and ``memory_cache``) -> (x, the updated cache). No layer is
        ever dropped here: LayerDrop is for training."""
        new_cache = {}
        for i, layer in enumerate(self.layers):
            name = f"layer_{i}"
            x, new_cache[name] = layer.step(x, cache[name], index, memory_cache[name], memory_mask,
                                            self_attention_mask, grow_cache=grow_cache,
                                            training=training)
        return self._final(x), new_cache

    def get_config(self):
        return {**super().get_config(), "layerdrop": self.layerdrop, "seed": self.seed}
