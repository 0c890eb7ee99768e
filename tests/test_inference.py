"""Translator: cached vs uncached search, XLA vs not, and bad input answered without harming the rest."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer import decoding
from keras_transformer.inference import DecodingConfig, Translator, translate_in_batches
from keras_transformer.tokenizer import SubwordTokenizer

SENTENCES = ["The cat sits on the mat.", "A dog runs.", "Where is the train station?"]


def small_translator(beam_size=3, max_length=24):
    """An untrained tiny model: its outputs are arbitrary but deterministic, which is all these
    comparisons need."""
    keras.utils.set_random_seed(3)
    text = [f"{s} {i}" for i in range(40) for s in SENTENCES] + [f"Das ist Satz {i}." for i in range(80)]
    tokenizer = SubwordTokenizer.learn(text, vocab_size=320)
    config = kt.TransformerConfig.from_preset("tiny", vocab_size=tokenizer.vocab_size, max_length=max_length)
    model = kt.Transformer(config)
    model((np.ones((1, 2), "int32"), np.ones((1, 2), "int32")))
    return Translator(model, tokenizer, DecodingConfig(beam_size=beam_size, extra_length=6))


@pytest.fixture(scope="module")
def translator():
    return small_translator()


def test_cached_search_equals_rerunning_the_whole_prefix(translator):
    source_ids, _, _ = translator.source_ids(tf.constant(SENTENCES))
    cached = translator.translate_ids(source_ids)
    model, length = translator.model, translator.max_decode_length

    never = np.zeros(model.config.vocab_size, "float32")
    never[[0, 2]] = -1e9  # pad and start are never predicted

    def uncached_step(ids, i, cache):
        # the whole prefix through the teacher-forced model; the causal mask hides columns > i
        return model((cache["source"], ids[:, :length]))[:, i] + never, cache

    start = tf.fill([len(SENTENCES)], 2)
    source_lengths = tf.reduce_sum(tf.cast(source_ids != 0, tf.int32), 1)
    uncached = decoding.beam_search(uncached_step, start, {"source": source_ids}, beam_size=3, alpha=0.6,
                                    max_decode_length=length, eos_id=3, max_lengths=source_lengths + 6)
    np.testing.assert_array_equal(cached["ids"], uncached.ids)
    np.testing.assert_allclose(cached["scores"], uncached.scores, rtol=1e-4)


def test_traced_search_with_a_static_batch_of_one(translator):
    source_ids, _, _ = translator.source_ids(tf.constant(SENTENCES[:1]))
    traced = tf.function(translator.translate_ids)(source_ids)  # batch size 1 known when tracing
    np.testing.assert_array_equal(traced["ids"], translator.translate_ids(source_ids)["ids"])


def test_xla_compiled_search_equals_plain(translator):
    source_ids, _, _ = translator.source_ids(tf.constant(SENTENCES))
    plain = translator.translate_ids(source_ids)
    compiled = tf.function(translator.translate_ids, jit_compile=True)(source_ids)
    np.testing.assert_array_equal(plain["ids"], compiled["ids"])
    np.testing.assert_allclose(plain["scores"], compiled["scores"], rtol=1e-4)


def test_bad_inputs_are_answered_and_do_not_change_normal_sentences(translator):
    long_input = "the cat sits on the mat " * 20
    batch = [SENTENCES[0], "", "   \t ", b"caf\xc3 \xff\xfe broken", "\u4e2d\u6587 \U0001F600 unseen",
             long_input, SENTENCES[1]]
    out = {k: np.asarray(v) for k, v in translator.translate_text(tf.constant(batch)).items()}
    alone = {k: np.asarray(v) for k, v in translator.translate_text(tf.constant(SENTENCES[:2])).items()}
    assert out["translations"][0] == alone["translations"][0]
    assert out["translations"][6] == alone["translations"][1]
    np.testing.assert_allclose(out["scores"][[0, 6]], alone["scores"], rtol=1e-4)
    assert out["translations"][1] == b"" and out["translations"][2] == b"" and out["scores"][1] == 0
    assert list(out["truncated"]) == [False, False, False, False, False, True, False]
    assert np.all(np.isfinite(out["scores"]))
    best_ids = np.asarray(translator.translate_ids(translator.source_ids(tf.constant(batch))[0])["ids"])[:, 0]
    assert not np.any(best_ids[:, 0] == 0) and not np.any(best_ids == 2)  # no pad/start predicted
    for text in out["translations"]:
        text.decode("utf-8")  # always valid UTF-8


def test_truncated_input_is_cut_to_max_length(translator):
    ids, truncated, _ = translator.source_ids(tf.constant(["the cat " * 40]))
    assert ids.shape[1] == translator.max_source_length and bool(truncated[0])
    assert int(ids[0, -1]) == translator.tokenizer.end_id


def test_batches_sorted_by_length_come_back_in_input_order(translator):
    sentences = SENTENCES + ["Yes.", "The train is late again today, and nobody knows why."]
    translate = tf.function(translator.translate_text, input_signature=[tf.TensorSpec([None], tf.string)])
    expected = [np.asarray(translate(tf.constant([s]))["translations"])[0].decode() for s in sentences]
    seen = []
    results = translate_in_batches(translate, sentences, batch_size=2, progress=seen.append)
    assert [r["translation"] for r in results] == expected
    assert sum(seen) == len(sentences)


def test_mismatched_tokenizer_is_refused(translator):
    model = kt.Transformer(kt.TransformerConfig.from_preset("tiny", vocab_size=400))
    with pytest.raises(ValueError, match="the tokenizer has 320 ids but the model's vocabulary has 400"):
        Translator(model, translator.tokenizer)
