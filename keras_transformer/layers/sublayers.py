"""What the encoder and decoder stacks share (section 3.1): the residual sub-layer connection,
the per-layer hyper-parameters, and a stack of N identical layers."""

import inspect

import keras

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.layer_norm import LayerNormalization


def sublayer_connection(x, sublayer, layer_norm, dropout, norm_first, training=None):
    """Residual connection around one sub-layer with dropout and layer normalisation.

    Post-LN, the paper's (sections 3.1 and 5.4): LayerNorm(x + Dropout(Sublayer(x))).
    Pre-LN (``norm_first``), what most later code uses: x + Dropout(Sublayer(LayerNorm(x))); the
    stack then needs a final LayerNorm. ``sublayer`` may return a tuple whose first item is the
    output; the rest (an updated cache) is returned after the new x.
    """
    result = sublayer(layer_norm(x) if norm_first else x)
    output, extras = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    y = x + dropout(output, training=training)
    if not norm_first:
        y = layer_norm(y)
    return (y,) + extras if extras else y


class TransformerLayer(keras.layers.Layer):
    """What encoder and decoder layers share: hyper-parameters, config, and the parts of a residual
    sub-layer connection. A subclass names its sub-layers in ``sublayer_names`` and creates, for
    each name, the sub-layer, ``<name>_norm`` and ``<name>_dropout`` with the factories below.

    Args:
      d_model: the model's width (512 base).
      num_heads: h, attention heads (8 base).
      d_ff: the feed-forward network's inner size (2048 base).
      d_k, d_v: each head's key and value sizes (default d_model / h).
      dropout_rate: P_drop, residual dropout (section 5.4).
      attention_dropout, relu_dropout: dropout on attention weights and after the ReLU (0 in the
        paper's models).
      norm_first: pre-LN instead of the paper's post-LN.
      layer_norm_epsilon: the LayerNormalization epsilon.
      **kwargs: ``keras.layers.Layer`` arguments (``name``, ``dtype``).
    """

    sublayer_names = ()

    def __init__(self, d_model, num_heads, d_ff, d_k=None, d_v=None, dropout_rate=0.1,
                 attention_dropout=0.0, relu_dropout=0.0, norm_first=False, layer_norm_epsilon=1e-6,
                 **kwargs):
        super().__init__(**kwargs)
        self._layer_config = dict(d_model=d_model, num_heads=num_heads, d_ff=d_ff, d_k=d_k, d_v=d_v,
                                  dropout_rate=dropout_rate, attention_dropout=attention_dropout,
                                  relu_dropout=relu_dropout, norm_first=norm_first,
                                  layer_norm_epsilon=layer_norm_epsilon)
        self.norm_first = norm_first
        # The output is x's positions: x's Keras mask (its padding) holds for it as well, and
        # carried on, the encoder's reaches the decoder's memory_mask in a functional model.
        self.supports_masking = True

    def _attention(self, name):
        c = self._layer_config
        return MultiHeadAttention(num_heads=c["num_heads"], d_model=c["d_model"], d_k=c["d_k"],
                                  d_v=c["d_v"], attention_dropout=c["attention_dropout"], name=name,
                                  dtype=self.dtype_policy)

    def _feed_forward(self, name):
        c = self._layer_config
        return PositionwiseFeedForward(c["d_model"], c["d_ff"], c["relu_dropout"], name=name,
                                       dtype=self.dtype_policy)

    def _norm(self, name):
        return LayerNormalization(epsilon=self._layer_config["layer_norm_epsilon"], name=name,
                                  dtype=self.dtype_policy)

    def _dropout(self):
        """Residual dropout (section 5.4), on each sub-layer's output before the residual sum."""
        return Dropout(self._layer_config["dropout_rate"], dtype=self.dtype_policy)

    def _build_sublayers(self, x_shape, memory_shape=None):
        for name in self.sublayer_names:
            if name == "cross_attention":
                getattr(self, name).build(x_shape, memory_shape)
            else:
                getattr(self, name).build(x_shape)
            getattr(self, f"{name}_norm").build(x_shape)
        self.built = True

    def _connect(self, name, x, sublayer, training):
        return sublayer_connection(x, sublayer, getattr(self, f"{name}_norm"),
                                   getattr(self, f"{name}_dropout"), self.norm_first, training)

    def get_config(self):
        return {**super().get_config(), **self._layer_config}


class TransformerStack(keras.layers.Layer):
    """N identical layers (N = 6 in the paper); with pre-LN, a final LayerNorm after the last.

    Args:
      num_layers: N (6 in the paper).
      layer_config: the keyword arguments of each layer, ``TransformerLayer``'s: d_model,
        num_heads and d_ff, and any of the others (those left out take their defaults).
      **kwargs: ``keras.layers.Layer`` arguments (``name``, ``dtype``).
    """

    layer_class = None

    def __init__(self, num_layers, layer_config, **kwargs):
        super().__init__(**kwargs)
        self.num_layers = num_layers
        self.layer_config = _full_layer_config(layer_config)
        self.layers = [self.layer_class(**self.layer_config, name=f"layer_{i}", dtype=self.dtype_policy)
                       for i in range(num_layers)]
        self.final_norm = (LayerNormalization(
            epsilon=self.layer_config["layer_norm_epsilon"], name="final_norm", dtype=self.dtype_policy)
            if self.layer_config["norm_first"] else None)
        self.supports_masking = True  # as TransformerLayer

    def build(self, x_shape):
        self._build_layers(x_shape)

    def _build_layers(self, x_shape, *other_shapes):
        for layer in self.layers:
            layer.build(x_shape, *other_shapes)
        if self.final_norm is not None:
            self.final_norm.build(x_shape)
        self.built = True

    def _final(self, x):
        return x if self.final_norm is None else self.final_norm(x)

    def get_config(self):
        return {**super().get_config(), "num_layers": self.num_layers, "layer_config": self.layer_config}


def _full_layer_config(layer_config):
    """``layer_config`` with ``TransformerLayer``'s defaults for the keys it leaves out, the
    stack's own config (its final LayerNorm reads two of them)."""
    parameters = [p for p in inspect.signature(TransformerLayer.__init__).parameters.values()
                  if p.kind is p.POSITIONAL_OR_KEYWORD and p.name != "self"]
    names = [p.name for p in parameters]
    required = [p.name for p in parameters if p.default is p.empty]
    unknown = [key for key in layer_config if key not in names]
    missing = [name for name in required if name not in layer_config]
    if unknown or missing:
        problems = ([f"unknown keys {unknown}"] if unknown else []) + (
            [f"no {missing}"] if missing else [])
        raise ValueError(f"layer_config has {' and '.join(problems)}; its keys are "
                         f"TransformerLayer's arguments {names}, of which {required} are required.")
    return {p.name: layer_config.get(p.name, p.default) for p in parameters}
