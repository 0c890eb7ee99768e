"""The residual sub-layer connection (sections 3.1 and 5.4) against its two formulas in NumPy:
post-LN LayerNorm(x + Sublayer(x)), the paper's, and pre-LN x + Sublayer(LayerNorm(x)); and the
stack's final LayerNorm, present with pre-LN only."""

import keras
import numpy as np
import pytest

from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.encoder import Encoder, EncoderLayer
from keras_transformer.layers.sublayers import sublayer_connection

RNG = np.random.default_rng(3)


def layer_norm(x, eps=1e-6):
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_sublayer_connection_follows_its_formula(norm_first):
    x = RNG.normal(size=(2, 3, 8)).astype("float32")
    matrix = RNG.normal(size=(8, 8)).astype("float32")
    norm = keras.layers.LayerNormalization(epsilon=1e-6)
    seen = []

    def sublayer(h):  # a linear map; also returns an extra (as a cached attention returns its cache)
        seen.append(np.asarray(h))
        return h @ matrix, "extra"

    y, extra = sublayer_connection(x, sublayer, norm, Dropout(0.0), norm_first)
    want = x + layer_norm(x) @ matrix if norm_first else layer_norm(x + x @ matrix)
    np.testing.assert_allclose(np.asarray(y), want, atol=1e-4)
    np.testing.assert_allclose(seen[0], layer_norm(x) if norm_first else x, atol=1e-4)
    assert extra == "extra"


def test_residual_dropout_applies_to_the_sublayer_output_only_in_training():
    x = np.ones((4, 5, 8), "float32")
    norm = keras.layers.LayerNormalization(epsilon=1e-6)
    out = sublayer_connection(x, lambda h: h, norm, Dropout(0.5, seed=1), True, training=True)
    # x + Dropout(LayerNorm(x)) with LayerNorm(ones) = 0: the residual passes x untouched.
    np.testing.assert_allclose(np.asarray(out), x, atol=1e-6)
    out = sublayer_connection(x, lambda h: 2 * h, keras.layers.Identity(), Dropout(0.5, seed=1),
                              True, training=True)
    values = np.unique(np.round(np.asarray(out), 4))
    assert set(values) == {1.0, 5.0}  # 1 + 0 (dropped) or 1 + 2 / (1 - 0.5) (kept, rescaled)
    inference = sublayer_connection(x, lambda h: 2 * h, keras.layers.Identity(), Dropout(0.5), True)
    np.testing.assert_allclose(np.asarray(inference), 3 * x)


@pytest.mark.parametrize("norm_first", [False, True])
def test_the_stack_ends_with_a_layer_norm_only_with_pre_ln(norm_first):
    config = dict(d_model=8, num_heads=2, d_ff=16, d_k=None, d_v=None, dropout_rate=0.0,
                  attention_dropout=0.0, relu_dropout=0.0, norm_first=norm_first,
                  layer_norm_epsilon=1e-6)
    stack = Encoder(num_layers=2, layer_config=config)
    stack.build((None, None, 8))
    assert (stack.final_norm is not None) == norm_first
    assert [layer.name for layer in stack.layers] == ["layer_0", "layer_1"]


def test_layer_config_left_out_keys_take_the_layers_defaults():
    """The stack's config is then the full one its layers use, and round-trips."""
    stack = Encoder(num_layers=2, layer_config=dict(d_model=8, num_heads=2, d_ff=16))
    layer_config = {k: v for k, v in EncoderLayer(8, 2, 16).get_config().items()
                    if k in stack.layer_config}
    assert stack.layer_config == layer_config and len(layer_config) == 10
    assert stack.final_norm is None  # norm_first's default: the paper's post-LN
    assert Encoder.from_config(stack.get_config()).get_config() == stack.get_config()


@pytest.mark.parametrize("layer_config,message", [
    (dict(d_model=8, num_heads=2, d_ff=16, norm_frist=True), r"unknown keys \['norm_frist'\]"),
    (dict(d_model=8, num_heads=2), r"layer_config has no \['d_ff'\]"),
])
def test_layer_config_names_a_wrong_or_missing_key(layer_config, message):
    with pytest.raises(ValueError, match=message):
        Encoder(num_layers=2, layer_config=layer_config)
