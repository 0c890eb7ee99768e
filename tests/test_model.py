"""The whole Transformer: parameter counts, causality, padding invariance, cached decoding,
serialisation and input errors."""

import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import Transformer, TransformerConfig

VOCAB = 40


def tiny(**overrides):
    return Transformer(TransformerConfig.from_preset("tiny", vocab_size=VOCAB, **overrides))


@pytest.fixture(scope="module")
def model():
    return tiny()


SOURCE = np.array([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0]])
TARGET = np.array([[2, 11, 12, 13, 14], [2, 15, 16, 0, 0]])


def expected_parameters(c, vocab):
    """Count from the shapes the paper gives (sections 3.2.2-3.4), with biases and LayerNorm."""
    d, h = c.d_model, c.num_heads
    attention = 2 * (d * h * c.d_k + h * c.d_k) + (d * h * c.d_v + h * c.d_v) + (h * c.d_v * d + d)
    feed_forward = d * c.d_ff + c.d_ff + c.d_ff * d + d
    layer_norm = 2 * d
    encoder = c.num_layers * (attention + feed_forward + 2 * layer_norm)
    decoder = c.num_layers * (2 * attention + feed_forward + 3 * layer_norm)
    final_norms = 2 * layer_norm if c.norm_first else 0
    return vocab * d + encoder + decoder + final_norms


@pytest.mark.parametrize("preset,paper_millions", [("base", 65), ("big", 213)])
def test_parameter_count_matches_formula_and_paper(preset, paper_millions):
    config = TransformerConfig.from_preset(preset, vocab_size=37000)
    m = Transformer(config)
    m.build(((None, None), (None, None)))
    count = m.count_params()
    assert count == expected_parameters(config, 37000)
    assert abs(count / 1e6 - paper_millions) / paper_millions < 0.04  # README explains the gap
    del m
    keras.backend.clear_session()


def test_unshared_and_pre_ln_parameter_counts():
    c = TransformerConfig.from_preset("tiny", vocab_size=VOCAB, share_embeddings=False, norm_first=True)
    m = Transformer(c)
    m.build(((None, None), (None, None)))
    # three matrices instead of one: source embedding, target embedding, softmax
    assert m.count_params() == expected_parameters(c, VOCAB) + 2 * VOCAB * c.d_model


def test_logits_shape_and_dtype(model):
    logits = model((SOURCE, TARGET), training=False)
    assert logits.shape == (2, 5, VOCAB) and logits.dtype == tf.float32


def test_decoder_is_causal(model):
    base = np.asarray(model((SOURCE, TARGET)))
    changed = TARGET.copy()
    changed[0, 3] = 20
    out = np.asarray(model((SOURCE, changed)))
    np.testing.assert_allclose(out[0, :3], base[0, :3], atol=1e-5)
    assert np.abs(out[0, 3:] - base[0, 3:]).max() > 1e-3


def test_padding_does_not_change_real_positions(model):
    base = np.asarray(model((SOURCE, TARGET)))
    padded = np.asarray(model((np.pad(SOURCE, ((0, 0), (0, 4))), np.pad(TARGET, ((0, 0), (0, 3))))))
    real = TARGET != 0
    np.testing.assert_allclose(padded[:, :5][real], base[real], atol=1e-5)


# The low-resource regularisers at high rates: inference must not see any of them.
REGULARISERS = dict(source_word_dropout=0.5, target_word_dropout=0.5, decoder_layerdrop=0.5)


@pytest.mark.parametrize("max_decode_length", [8, None], ids=["fixed", "growing"])
@pytest.mark.parametrize("overrides", [{}, dict(norm_first=True, positional="learned"),
                                       dict(target_vocab_size=24), REGULARISERS])
def test_cached_decoding_reproduces_teacher_forcing(overrides, max_decode_length):
    m = tiny(**overrides)
    target = np.minimum(TARGET, m.config.output_vocab_size - 1)
    full = np.asarray(m((SOURCE, target)))
    memory, memory_mask = m.encode(SOURCE)
    cache, memory_cache = m.init_cache(memory, memory_mask, max_decode_length=max_decode_length)
    grow = max_decode_length is None
    for i in range(target.shape[1]):
        logits, cache = m.decode_step(target[:, i], i, cache, memory_cache, grow_cache=grow)
        real = target[:, i] != 0
        np.testing.assert_allclose(np.asarray(logits)[real], full[real, i], atol=1e-4)
        assert cache["layer_0"]["key"].shape[2] == (max_decode_length or i + 1)


@pytest.mark.parametrize("max_decode_length", [6, None], ids=["fixed", "growing"])
def test_decode_step_shares_each_sentences_memory_among_its_beams(model, max_decode_length):
    """Three hypotheses per sentence over one memory row equal three copies of the memory."""
    beams = 3
    memory, memory_mask = model.encode(SOURCE)
    cache, memory_cache = model.init_cache(memory, memory_mask, max_decode_length)
    shared = copied = tf.nest.map_structure(lambda t: tf.repeat(t, beams, axis=0), cache)
    copied_memory = tf.nest.map_structure(lambda t: tf.repeat(t, beams, axis=0), memory_cache)
    ids = np.array([[2, 11, 12], [2, 13, 14], [2, 11, 15], [2, 15, 16], [2, 17, 16], [2, 18, 19]])
    for i in range(ids.shape[1]):
        grow = max_decode_length is None
        shared_logits, shared = model.decode_step(ids[:, i], i, shared, memory_cache, grow_cache=grow)
        copied_logits, copied = model.decode_step(ids[:, i], i, copied, copied_memory, grow_cache=grow)
        np.testing.assert_allclose(shared_logits, copied_logits, atol=1e-5)
    assert memory_cache["layer_0"]["key"].shape[0] == len(SOURCE)
    tf.nest.map_structure(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5), shared, copied)


def test_decoding_works_on_a_model_never_called():
    m = tiny()  # e.g. just restored from a checkpoint
    memory, memory_mask = m.encode(SOURCE)
    logits, _ = m.decode_step(TARGET[:, 0], 0, *m.init_cache(memory, memory_mask, 4), grow_cache=False)
    np.testing.assert_allclose(logits, np.asarray(m((SOURCE, TARGET)))[:, 0], atol=1e-5)


def test_decode_step_refuses_a_cache_of_the_other_kind(model):
    memory, memory_mask = model.encode(SOURCE)
    fixed = model.init_cache(memory, memory_mask, 6)
    with pytest.raises(ValueError, match="need grow_cache=False"):
        model.decode_step(TARGET[:, 1], 1, *fixed, grow_cache=True)
    with pytest.raises(ValueError, match="pass grow_cache=True"):
        model.decode_step(TARGET[:, 0], 0, *model.init_cache(memory, memory_mask), grow_cache=False)


def test_decode_step_compiles_with_xla(model):
    memory, memory_mask = model.encode(SOURCE)
    cache, memory_cache = model.init_cache(memory, memory_mask, max_decode_length=6)
    step = tf.function(lambda *args: model.decode_step(*args, grow_cache=False), jit_compile=True)
    eager_logits, _ = model.decode_step(TARGET[:, 0], 0, cache, memory_cache, grow_cache=False)
    xla_logits, new_cache = step(tf.constant(TARGET[:, 0]), tf.constant(0), cache, memory_cache)
    np.testing.assert_allclose(xla_logits, eager_logits, atol=1e-5)
    assert tf.nest.map_structure(lambda t: t.shape, new_cache) == tf.nest.map_structure(
        lambda t: t.shape, cache)


def test_dropout_is_active_only_in_training():
    m = tiny(dropout_rate=0.3)
    a = np.asarray(m((SOURCE, TARGET), training=False))
    np.testing.assert_array_equal(a, np.asarray(m((SOURCE, TARGET), training=False)))
    assert np.abs(np.asarray(m((SOURCE, TARGET), training=True)) - a).max() > 1e-3


@pytest.mark.parametrize("overrides", [{}, dict(positional="learned", target_vocab_size=24,
                                                share_embeddings=False, norm_first=True),
                                       REGULARISERS])
def test_keras_format_round_trip(tmp_path, overrides):
    m = tiny(**overrides)
    target = np.minimum(TARGET, m.config.output_vocab_size - 1)
    expected = np.asarray(m((SOURCE, target)))
    m.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    assert loaded.config == m.config
    np.testing.assert_array_equal(np.asarray(loaded((SOURCE, target))), expected)


def test_regularisers_vary_training_and_leave_inference_deterministic():
    m = tiny(**REGULARISERS)
    a = np.asarray(m((SOURCE, TARGET), training=False))
    np.testing.assert_array_equal(a, np.asarray(m((SOURCE, TARGET), training=False)))
    # tiny has P_drop 0: any change in training comes from the word dropout and LayerDrop.
    assert np.abs(np.asarray(m((SOURCE, TARGET), training=True)) - a).max() > 1e-3
    # Step-by-step decoding (what beam search runs) twice: the same logits, those of training=False.
    steps = []
    for _ in range(2):
        memory, memory_mask = m.encode(SOURCE)
        cache, memory_cache = m.init_cache(memory, memory_mask, max_decode_length=TARGET.shape[1])
        logits = []
        for i in range(TARGET.shape[1]):
            step_logits, cache = m.decode_step(TARGET[:, i], i, cache, memory_cache, grow_cache=False)
            logits.append(np.asarray(step_logits))
        steps.append(np.stack(logits, axis=1))
    np.testing.assert_array_equal(steps[0], steps[1])
    real = TARGET != 0
    np.testing.assert_allclose(steps[0][real], a[real], atol=1e-4)


@pytest.mark.parametrize("field", ["source_word_dropout", "target_word_dropout",
                                   "decoder_layerdrop"])
def test_each_regulariser_acts_in_training_only(field):
    """Each knob alone is wired in: it changes training outputs and leaves inference alone."""
    m = tiny(**{field: 0.5})
    a = np.asarray(m((SOURCE, TARGET), training=False))
    np.testing.assert_array_equal(a, np.asarray(m((SOURCE, TARGET))))  # training=None: inference
    # A call may by chance drop nothing (LayerDrop keeps both layers with probability 1/4):
    # ten calls all alike has probability below 1e-6.
    changed = [np.abs(np.asarray(m((SOURCE, TARGET), training=True)) - a).max() > 1e-3
               for _ in range(10)]
    assert any(changed)
    # ... on its own side: only source word dropout reaches the encoder's output.
    memory = np.asarray(m.encode(SOURCE)[0])
    encoder_changed = [np.abs(np.asarray(m.encode(SOURCE, training=True)[0]) - memory).max() > 1e-3
                       for _ in range(10)]
    assert any(encoder_changed) == (field == "source_word_dropout")


@pytest.mark.parametrize("side", ["source", "target"])
def test_word_dropout_zeroes_whole_words_at_the_requested_rate(side):
    rate = 0.3
    m = tiny(**{f"{side}_word_dropout": rate})
    ids = np.random.default_rng(0).integers(4, VOCAB, size=(64, 50))
    embedding = m.source_embedding if side == "source" else m.target_embedding
    dropout = getattr(m, f"{side}_word_dropout")
    tokens = np.asarray(embedding(ids))
    plain = np.asarray(m._embed(ids, embedding, None, training=False, word_dropout=dropout))
    noisy = np.asarray(m._embed(ids, embedding, None, training=True, word_dropout=dropout))
    kept_tokens = noisy - (plain - tokens)  # the positional encodings taken out again
    dropped = np.all(np.abs(kept_tokens) < 1e-5, axis=-1)
    kept = np.all(np.abs(kept_tokens - tokens / (1 - rate)) < 1e-4, axis=-1)
    assert np.all(dropped ^ kept)  # a word goes whole or stays whole, rescaled by 1 / (1 - p)
    n = dropped.size
    assert abs(dropped.mean() - rate) < 4 * np.sqrt(rate * (1 - rate) / n)


def test_decoder_layerdrop_skips_layers_at_the_requested_rate():
    # One post-LN decoder layer and no dropout: a skipped layer returns its input exactly.
    m = tiny(num_layers=1, decoder_layerdrop=0.5)
    x = np.random.default_rng(1).normal(size=(2, 5, 32)).astype("float32")
    memory, memory_mask = m.encode(SOURCE)
    from keras_transformer.layers import masks

    self_mask = masks.decoder_self_attention_mask(TARGET, 0)
    applied = np.asarray(m.decoder(x, memory, self_mask, memory_mask, training=False))
    trials, skipped = 200, 0
    for _ in range(trials):
        out = np.asarray(m.decoder(x, memory, self_mask, memory_mask, training=True))
        if np.array_equal(out, x):
            skipped += 1
        else:
            np.testing.assert_allclose(out, applied, atol=1e-5)
    assert abs(skipped - trials * 0.5) < 4 * np.sqrt(trials * 0.25)


def _layer_subset_outputs(decoder, x, memory, self_mask, memory_mask):
    """The decoder's output for every subset of its layers applied (the others skipped)."""
    outputs = {}
    for kept in itertools.product([False, True], repeat=len(decoder.layers)):
        y = x
        for layer, keep in zip(decoder.layers, kept):
            if keep:
                y = layer(y, memory, self_mask, memory_mask, training=False)
        outputs[kept] = np.asarray(y)
    return outputs


def test_decoder_layerdrop_draws_each_layer_independently_under_xla():
    """Three layers, p = 0.3 (asymmetric, so "keep" and "skip" cannot be swapped unnoticed), the
    training pass compiled with XLA (as --xla trains): each layer is skipped in about 30% of the
    calls, independently of the others (all 8 patterns occur, two layers are skipped together in
    about p^2 of the calls)."""
    from keras_transformer.layers import masks

    p, trials = 0.3, 400
    m = tiny(num_layers=3, decoder_layerdrop=p)  # post-LN, P_drop 0: nothing else is random
    x = np.random.default_rng(2).normal(size=(2, 5, 32)).astype("float32")
    memory, memory_mask = m.encode(SOURCE)
    self_mask = masks.decoder_self_attention_mask(TARGET, 0)
    outputs = _layer_subset_outputs(m.decoder, x, memory, self_mask, memory_mask)
    distances = [np.abs(a - b).max() for a, b in itertools.combinations(outputs.values(), 2)]
    assert min(distances) > 1e-2  # every pattern is recognisable from the output

    step = tf.function(lambda: m.decoder(x, memory, self_mask, memory_mask, training=True),
                       jit_compile=True)
    patterns = []
    for _ in range(trials):
        out = np.asarray(step())
        matches = [kept for kept, y in outputs.items() if np.abs(out - y).max() < 1e-4]
        assert len(matches) == 1, "a training output that is no subset of the layers"
        patterns.append(matches[0])
    skipped = ~np.array(patterns)  # [trials, layers]
    tolerance = 4 * np.sqrt(p * (1 - p) / trials)
    assert np.all(np.abs(skipped.mean(0) - p) < tolerance), skipped.mean(0)
    assert len(set(patterns)) == 8
    both = (skipped[:, 0] & skipped[:, 1]).mean()
    assert abs(both - p * p) < 4 * np.sqrt(p * p * (1 - p * p) / trials)


def test_decoder_layerdrop_keeps_the_attention_weights_path_and_the_cache_path():
    from keras_transformer.layers import masks

    m = tiny(decoder_layerdrop=0.5)
    memory, memory_mask = m.encode(SOURCE)
    x = np.asarray(m._embed(TARGET, m.target_embedding, None))
    self_mask = masks.decoder_self_attention_mask(TARGET, 0)
    call = tf.function(lambda: m.decoder(x, memory, self_mask, memory_mask, training=True,
                                         return_attention_weights=True))
    y, weights = call()
    assert y.shape == x.shape and len(weights) == m.config.num_layers
    assert all(w["self"].shape == (2, 4, 5, 5) and w["cross"].shape == (2, 4, 5, 5) for w in weights)
    # The cached path never drops a layer, even when told training=True.
    caches = dict(cache=m.decoder.initial_cache(2, 5), memory_cache=m.decoder.memory_cache(memory))
    step_mask = masks.cache_step_mask(0, 5)
    first, _ = m.decoder.step(x[:, 0], caches["cache"], 0, caches["memory_cache"], memory_mask,
                              step_mask, grow_cache=False, training=False)
    for _ in range(8):
        again, _ = m.decoder.step(x[:, 0], caches["cache"], 0, caches["memory_cache"], memory_mask,
                                  step_mask, grow_cache=False, training=True)
        np.testing.assert_array_equal(np.asarray(again), np.asarray(first))


@pytest.mark.parametrize("field", ["source_word_dropout", "target_word_dropout",
                                   "decoder_layerdrop"])
@pytest.mark.parametrize("value", [1.0, -0.1])
def test_regulariser_rates_are_validated(field, value):
    with pytest.raises(ValueError, match=rf"TransformerConfig.{field} must be in \[0, 1\)"):
        TransformerConfig.from_preset("tiny", vocab_size=VOCAB, **{field: value})


@pytest.mark.parametrize("source,message", [
    (np.array([5, 6, 3]), r"source_ids must have shape \[batch, length\]"),
    (np.array([[5.0, 6.0]]), "source_ids must hold integer token ids"),
    (np.array([[5, VOCAB + 2]]), rf"source_ids holds id {VOCAB + 2} at \[0, 1\], outside the vocabulary"),
    (np.array([[-1, 5]]), r"source_ids holds id -1 at \[0, 0\]"),
])
def test_bad_ids_get_a_clear_error(model, source, message):
    with pytest.raises(ValueError, match=message):
        model((source, TARGET[:1, :2]))


def test_out_of_vocabulary_ids_inside_tf_function_name_the_input(model):
    call = tf.function(lambda s, t: model((s, t)))
    with pytest.raises(tf.errors.InvalidArgumentError, match="target_input_ids holds ids >= vocabulary size"):
        call(tf.constant(SOURCE), tf.constant(np.where(TARGET > 0, VOCAB + 1, 0)))


def test_attention_weights_for_plots(model):
    maps = model.attention_weights(SOURCE, TARGET)
    heads, layers = model.config.num_heads, model.config.num_layers
    assert [w.shape for w in maps["encoder_self"]] == [(2, heads, 5, 5)] * layers
    assert [w.shape for w in maps["decoder_cross"]] == [(2, heads, 5, 5)] * layers
    for name in ("encoder_self", "decoder_self", "decoder_cross"):
        for w in maps[name]:
            np.testing.assert_allclose(np.asarray(w).sum(-1), 1.0, atol=1e-5)
    for w in maps["encoder_self"] + maps["decoder_cross"]:
        assert np.all(np.asarray(w)[1, :, :, 3:] == 0)  # padded source keys of the second sentence
    for w in maps["decoder_self"]:
        assert np.all(np.triu(np.asarray(w)[0, 0], k=1) == 0)  # no attention to later positions


def test_source_and_target_batches_must_match(model):
    """Attention would broadcast a single target row over the source batch (or the reverse)."""
    source, target = SOURCE, TARGET[:1]
    message = "same batch size; got 1 target rows for 2 source rows"
    with pytest.raises(ValueError, match=message):
        model((source, target))
    with pytest.raises(ValueError, match=message):
        model.attention_weights(source, target)
    unknown_batch = tf.TensorSpec([None, None], tf.int32)
    call = tf.function(lambda s, t: model((s, t)), input_signature=[unknown_batch] * 2)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="target_input_ids and source_ids must have the same batch size"):
        call(tf.constant(source, tf.int32), tf.constant(target, tf.int32))


def test_a_preset_name_is_refused_with_the_way_to_make_one():
    with pytest.raises(TypeError, match=r"got str 'base'\. For a preset: Transformer\("
                                        r"TransformerConfig\.from_preset\('base', vocab_size="):
        Transformer("base")
