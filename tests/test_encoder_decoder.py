"""EncoderLayer/DecoderLayer against keras_hub.layers.TransformerEncoder/TransformerDecoder with the
same weights (both post-LN, the paper's arrangement, and pre-LN), and the masks they take from
Keras against the explicit masks of ``masks``."""

import keras
import numpy as np
import pytest

# The test extra installs it where it can (keras-hub 0.32 needs Python >= 3.11).
keras_hub = pytest.importorskip("keras_hub", reason="keras-hub (keras-nlp) needs Python >= 3.11")

from keras_transformer.layers import (Decoder, DecoderLayer, Encoder, EncoderLayer, padding_mask)
from keras_transformer.layers.masks import decoder_self_attention_mask, look_ahead_mask
from test_attention import copy_into_keras_attention

RNG = np.random.default_rng(1)
D_MODEL, HEADS, D_FF, EPS = 32, 4, 64, 1e-6


def copy_feed_forward_and_norms(ours, theirs, names):
    theirs._feedforward_intermediate_dense.set_weights(ours.feed_forward.inner.get_weights())
    theirs._feedforward_output_dense.set_weights(ours.feed_forward.outer.get_weights())
    for our_name, their_name in names:
        getattr(theirs, their_name).set_weights(getattr(ours, our_name).get_weights())


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_equals_keras_hub(norm_first):
    ours = EncoderLayer(D_MODEL, HEADS, D_FF, norm_first=norm_first, layer_norm_epsilon=EPS)
    x = RNG.normal(size=(2, 6, D_MODEL)).astype("float32")
    ids = np.array([[5, 6, 7, 8, 9, 3], [5, 6, 3, 0, 0, 0]])
    ours_out = np.asarray(ours(x, padding_mask=padding_mask(ids)))
    theirs = keras_hub_encoder_like(ours, norm_first)
    theirs_out = np.asarray(theirs(x, padding_mask=ids != 0))
    np.testing.assert_allclose(ours_out, theirs_out, atol=1e-4)


def keras_hub_encoder_like(ours, norm_first=False):
    theirs = keras_hub.layers.TransformerEncoder(D_FF, HEADS, layer_norm_epsilon=EPS,
                                                 normalize_first=norm_first)
    theirs.build((None, None, D_MODEL))
    copy_into_keras_attention(ours.self_attention, theirs._self_attention_layer)
    copy_feed_forward_and_norms(ours, theirs, [("self_attention_norm", "_self_attention_layer_norm"),
                                               ("feed_forward_norm", "_feedforward_layer_norm")])
    return theirs


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_equals_keras_hub(norm_first):
    ours = DecoderLayer(D_MODEL, HEADS, D_FF, norm_first=norm_first, layer_norm_epsilon=EPS)
    theirs = keras_hub.layers.TransformerDecoder(D_FF, HEADS, layer_norm_epsilon=EPS,
                                                 normalize_first=norm_first)
    x = RNG.normal(size=(2, 5, D_MODEL)).astype("float32")
    memory = RNG.normal(size=(2, 6, D_MODEL)).astype("float32")
    target_ids = np.array([[2, 5, 6, 7, 8], [2, 5, 6, 0, 0]])
    source_ids = np.array([[5, 6, 7, 8, 9, 3], [5, 6, 3, 0, 0, 0]])
    ours_out = np.asarray(ours(x, memory, decoder_self_attention_mask(target_ids),
                               padding_mask(source_ids)))
    theirs.build(x.shape, memory.shape)
    copy_into_keras_attention(ours.self_attention, theirs._self_attention_layer)
    copy_into_keras_attention(ours.cross_attention, theirs._cross_attention_layer)
    copy_feed_forward_and_norms(ours, theirs, [("self_attention_norm", "_self_attention_layer_norm"),
                                               ("cross_attention_norm", "_cross_attention_layer_norm"),
                                               ("feed_forward_norm", "_feedforward_layer_norm")])
    theirs_out = np.asarray(theirs(x, memory, decoder_padding_mask=target_ids != 0,
                                   encoder_padding_mask=source_ids != 0))
    real = target_ids != 0
    np.testing.assert_allclose(ours_out[real], theirs_out[real], atol=1e-4)


def test_layers_and_stacks_round_trip_their_config():
    kwargs = dict(d_model=16, num_heads=2, d_ff=32, d_k=4, d_v=12, dropout_rate=0.2,
                  attention_dropout=0.1, relu_dropout=0.05, norm_first=True, layer_norm_epsilon=1e-5)
    for cls in (EncoderLayer, DecoderLayer):
        config = cls(**kwargs).get_config()
        assert {k: config[k] for k in kwargs} == kwargs
        assert cls.from_config(config).get_config() == config
    for cls in (Encoder, Decoder):
        stack = cls(num_layers=3, layer_config=kwargs)
        clone = cls.from_config(stack.get_config())
        assert len(clone.layers) == 3 and clone.final_norm is not None
        assert clone.get_config() == stack.get_config()


def test_decoder_layerdrop_round_trips_its_config():
    kwargs = dict(d_model=16, num_heads=2, d_ff=32, dropout_rate=0.1, norm_first=False,
                  layer_norm_epsilon=1e-6)
    stack = Decoder(num_layers=2, layer_config=kwargs, layerdrop=0.3, seed=7)
    config = stack.get_config()
    assert (config["layerdrop"], config["seed"]) == (0.3, 7)
    clone = Decoder.from_config(config)
    assert (clone.layerdrop, clone.seed) == (0.3, 7) and clone.get_config() == config
    # and through Keras' own (de)serialisation, as a .keras file stores it
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(stack))
    assert isinstance(restored, Decoder) and restored.get_config() == config
    assert Decoder(num_layers=1, layer_config=kwargs).get_config()["layerdrop"] == 0.0


def keras_hub_decoder_like(ours):
    theirs = keras_hub.layers.TransformerDecoder(D_FF, HEADS, layer_norm_epsilon=EPS)
    theirs.build((None, None, D_MODEL), (None, None, D_MODEL))
    copy_into_keras_attention(ours.self_attention, theirs._self_attention_layer)
    copy_into_keras_attention(ours.cross_attention, theirs._cross_attention_layer)
    copy_feed_forward_and_norms(ours, theirs, [("self_attention_norm", "_self_attention_layer_norm"),
                                               ("cross_attention_norm", "_cross_attention_layer_norm"),
                                               ("feed_forward_norm", "_feedforward_layer_norm")])
    return theirs


def test_a_decoder_without_a_self_attention_mask_is_causal_as_keras_hubs():
    """Section 3.2.3: left to its defaults, a decoder must not see later positions, as keras-hub's
    TransformerDecoder (use_causal_mask=True by default)."""
    ours = DecoderLayer(D_MODEL, HEADS, D_FF, layer_norm_epsilon=EPS)
    x = RNG.normal(size=(2, 5, D_MODEL)).astype("float32")
    memory = RNG.normal(size=(2, 6, D_MODEL)).astype("float32")
    ours_out = np.asarray(ours(x, memory))
    np.testing.assert_allclose(ours_out, ours(x, memory, self_attention_mask=look_ahead_mask(5)),
                               atol=1e-6)
    theirs = keras_hub_decoder_like(ours)
    np.testing.assert_allclose(ours_out, theirs(x, memory), atol=1e-4)
    # the data are such that seeing the future would show
    unmasked = ours(x, memory, self_attention_mask=np.ones((2, 5), bool))
    assert not np.allclose(ours_out[:, :-1], np.asarray(unmasked)[:, :-1], atol=1e-3)
    stack = Decoder(2, dict(d_model=D_MODEL, num_heads=HEADS, d_ff=D_FF, dropout_rate=0.0))
    np.testing.assert_allclose(stack(x, memory),
                               stack(x, memory, self_attention_mask=look_ahead_mask(5)), atol=1e-6)


def test_a_keras_masked_target_masks_its_padding_and_the_future_as_keras_hub_does():
    """x's Keras mask, [batch, T], is keras-hub's decoder padding mask: with the look-ahead mask,
    decoder_self_attention_mask of the target ids. Compared at every position, padding too."""
    ours = DecoderLayer(D_MODEL, HEADS, D_FF, layer_norm_epsilon=EPS)
    embedding = keras.layers.Embedding(12, D_MODEL, mask_zero=True)
    target_ids = np.array([[2, 5, 6, 7], [2, 5, 0, 0]])
    x = embedding(target_ids)
    memory = RNG.normal(size=(2, 6, D_MODEL)).astype("float32")
    ours_out = ours(x, memory)
    np.testing.assert_array_equal(ours_out._keras_mask, target_ids != 0)
    explicit = np.asarray(ours(embedding.call(target_ids), memory,
                               self_attention_mask=decoder_self_attention_mask(target_ids)))
    np.testing.assert_allclose(ours_out, explicit, atol=1e-6)
    np.testing.assert_allclose(ours_out, keras_hub_decoder_like(ours)(x, memory), atol=1e-4)
    causal_only = ours(embedding.call(target_ids), memory, self_attention_mask=look_ahead_mask(4))
    assert not np.allclose(explicit[1, 2:], np.asarray(causal_only)[1, 2:], atol=1e-3)


def test_a_keras_masked_input_masks_its_padding_in_the_encoder_as_keras_hub_does():
    ours = EncoderLayer(D_MODEL, HEADS, D_FF, layer_norm_epsilon=EPS)
    embedding = keras.layers.Embedding(12, D_MODEL, mask_zero=True)
    ids = np.array([[5, 6, 7, 8, 9, 3], [5, 6, 3, 0, 0, 0]])
    ours_out = ours(embedding(ids))
    np.testing.assert_array_equal(ours_out._keras_mask, ids != 0)
    explicit = np.asarray(ours(embedding.call(ids), padding_mask=padding_mask(ids)))
    np.testing.assert_allclose(ours_out, explicit, atol=1e-6)
    # keras.layers.MultiHeadAttention masks the queries at padding too (their rows become
    # uniform): those outputs are padding's, unused, and differ.
    real = ids != 0
    theirs_out = np.asarray(keras_hub_encoder_like(ours)(embedding(ids)))
    np.testing.assert_allclose(np.asarray(ours_out)[real], theirs_out[real], atol=1e-4)
    unmasked = np.asarray(ours(embedding.call(ids)))
    assert not np.allclose(explicit[1, :3], unmasked[1, :3], atol=1e-3)


def test_a_functional_encoder_takes_its_padding_mask_from_keras():
    stack = Encoder(2, dict(d_model=D_MODEL, num_heads=HEADS, d_ff=D_FF, dropout_rate=0.0))
    embedding = keras.layers.Embedding(12, D_MODEL, mask_zero=True)
    ids_in = keras.Input((None,), dtype="int32")
    functional = keras.Model(ids_in, stack(embedding(ids_in)))
    ids = np.array([[5, 6, 7, 8, 9, 3], [5, 6, 3, 0, 0, 0]])
    explicit = np.asarray(stack(embedding.call(ids), padding_mask=padding_mask(ids)))
    np.testing.assert_allclose(functional(ids), explicit, atol=1e-6)
    unmasked = np.asarray(stack(embedding.call(ids)))
    assert not np.allclose(explicit[1, :3], unmasked[1, :3], atol=1e-3)


@pytest.mark.parametrize("norm_first", [False, True])
def test_a_functional_encoder_decoder_takes_both_masks_from_keras(norm_first):
    """Embedding(mask_zero) -> Encoder -> Decoder, padding on both sides: the encoder's output
    carries the source's Keras mask on to the decoder's memory_mask, the target's makes the
    decoder's padding, with the look-ahead mask."""
    config = dict(d_model=D_MODEL, num_heads=HEADS, d_ff=D_FF, dropout_rate=0.0,
                  norm_first=norm_first)
    encoder, decoder = Encoder(2, config), Decoder(2, config)
    source_embedding = keras.layers.Embedding(12, D_MODEL, mask_zero=True)
    target_embedding = keras.layers.Embedding(12, D_MODEL, mask_zero=True)
    source_in = keras.Input((None,), dtype="int32")
    target_in = keras.Input((None,), dtype="int32")
    functional = keras.Model([source_in, target_in], decoder(
        target_embedding(target_in), encoder(source_embedding(source_in))))
    source_ids = np.array([[5, 6, 7, 8, 9, 3], [5, 6, 3, 0, 0, 0], [5, 3, 0, 0, 0, 0]])
    target_ids = np.array([[2, 5, 6, 7], [2, 5, 0, 0], [2, 9, 8, 0]])
    memory = encoder(source_embedding.call(source_ids), padding_mask=padding_mask(source_ids))
    explicit = np.asarray(decoder(
        target_embedding.call(target_ids), memory,
        self_attention_mask=decoder_self_attention_mask(target_ids),
        memory_mask=padding_mask(source_ids)))
    np.testing.assert_allclose(functional([source_ids, target_ids]), explicit, atol=1e-5)


def test_a_keras_masked_memory_masks_its_padding_as_keras_hub_does():
    """Keras fills memory_mask with the memory's Keras mask, [batch, S]: a key padding mask,
    as keras-hub reads its encoder_sequence's. Batch == target length, where that mask
    broadcast as it is would fit the scores along the wrong axis."""
    ours = DecoderLayer(D_MODEL, HEADS, D_FF, layer_norm_epsilon=EPS)
    embedding = keras.layers.Embedding(12, D_MODEL, mask_zero=True)
    source_ids = np.array([[5, 6, 7, 8], [5, 6, 0, 0], [5, 0, 0, 0]])
    memory = embedding(source_ids)
    x = RNG.normal(size=(3, 3, D_MODEL)).astype("float32")
    causal = look_ahead_mask(3)
    ours_out = np.asarray(ours(x, memory, self_attention_mask=causal))
    theirs = keras_hub_decoder_like(ours)
    np.testing.assert_allclose(ours_out, theirs(x, memory), atol=1e-4)
    explicit = ours(x, embedding.call(source_ids), self_attention_mask=causal,
                    memory_mask=padding_mask(source_ids))
    np.testing.assert_allclose(ours_out, explicit, atol=1e-6)


@pytest.mark.parametrize("layer_class", ["DecoderLayer", "Decoder"])
def test_masks_given_by_position_are_those_given_by_keyword(layer_class):
    """Keras fills a memory_mask left None by keyword; one given by position, None included,
    must not collide with it, and a given one must still win over the memory's Keras mask."""
    layer = (DecoderLayer(D_MODEL, HEADS, D_FF, dropout_rate=0.0) if layer_class == "DecoderLayer"
             else Decoder(2, dict(d_model=D_MODEL, num_heads=HEADS, d_ff=D_FF, dropout_rate=0.0)))
    embedding = keras.layers.Embedding(12, D_MODEL, mask_zero=True)
    source_ids = np.array([[5, 6, 7, 8], [5, 6, 0, 0]])
    memory = embedding(source_ids)
    x = RNG.normal(size=(2, 3, D_MODEL)).astype("float32")
    causal = look_ahead_mask(3)
    by_keyword = np.asarray(layer(x, memory, self_attention_mask=causal))
    np.testing.assert_allclose(layer(x, memory, causal, None), by_keyword, atol=1e-6)
    np.testing.assert_allclose(layer(x, memory, None, None, False), by_keyword, atol=1e-6)
    no_padding = np.ones((2, 1, 1, 4), bool)
    np.testing.assert_allclose(layer(x, memory, causal, no_padding),
                               layer(x, memory, self_attention_mask=causal, memory_mask=no_padding),
                               atol=1e-6)
    assert not np.allclose(layer(x, memory, causal, no_padding), by_keyword, atol=1e-3)
    with pytest.raises(TypeError, match="at most 7 positional arguments"):
        layer(x, memory, causal, None, False, False, None, "one too many")
    with pytest.raises(TypeError, match="multiple values"):
        layer(x, memory, causal, memory_mask=None, self_attention_mask=causal)


def test_a_functional_decoder_takes_the_memory_mask_from_keras():
    stack = Decoder(2, dict(d_model=D_MODEL, num_heads=HEADS, d_ff=D_FF, dropout_rate=0.0))
    embedding = keras.layers.Embedding(12, D_MODEL, mask_zero=True)
    x_in = keras.Input((None, D_MODEL))
    ids_in = keras.Input((None,), dtype="int32")
    functional = keras.Model([x_in, ids_in], stack(x_in, embedding(ids_in)))
    source_ids = np.array([[5, 6, 7, 8], [5, 6, 0, 0]])
    x = RNG.normal(size=(2, 3, D_MODEL)).astype("float32")
    np.testing.assert_allclose(
        functional([x, source_ids]),
        stack(x, embedding.call(source_ids), memory_mask=padding_mask(source_ids)), atol=1e-6)
