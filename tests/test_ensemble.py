"""Ensembles (inference.ensemble_inputs, Translator with several models): beam and greedy search
over two different table models equal an exhaustive search and numpy's greedy over their averaged
log-probabilities; an ensemble of a model with itself is that model; members that do not share the
tokenizer's vocabulary are refused."""

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import decoding
from keras_transformer.inference import DecodingConfig, Translator, ensemble_inputs
from test_decoding import (EOS, EXACT_BEAM, LENGTH, LIMITS, LONG, LONG_LIMITS, PAD, START,
                           TableModel, check_well_formed, hypotheses)


class AveragedTables(TableModel):
    """The numpy twin of an ensemble of table models: log-softmax of the mean of the members'
    log-probabilities, from the token sequence alone (scores and exhaustive search inherited)."""

    def __init__(self, members):
        self.members = members
        self.batch = members[0].batch

    def np_log_probs(self, example, prefix):
        mean = np.mean([m.np_log_probs(example, prefix) for m in self.members], axis=0)
        return mean - np.logaddexp.reduce(mean)


def ensemble_search(members, length, **search):
    cache, shared, step_fn = ensemble_inputs(
        [(m.initial_cache(length), None, m.step_fn) for m in members])
    assert shared is None and sorted(cache) == ["member_0", "member_1"]
    start = tf.fill([members[0].batch], START)
    if "beam_size" in search:
        return decoding.beam_search(step_fn, start, cache, max_decode_length=length, eos_id=EOS,
                                    pad_id=PAD, **search)
    return decoding.greedy_search(step_fn, start, cache, length, EOS, pad_id=PAD, **search)


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_two_models_beam_search_equals_exhaustive_search_of_the_average(alpha):
    members = [TableModel(batch=len(LIMITS), seed=1234), TableModel(batch=len(LIMITS), seed=99)]
    twin = AveragedTables(members)
    result = ensemble_search(members, LENGTH, beam_size=EXACT_BEAM, alpha=alpha,
                             max_lengths=LIMITS)
    check_well_formed(twin, result, LIMITS, alpha)
    for b, limit in enumerate(LIMITS):
        reference = twin.np_exhaustive(b, limit, alpha)
        assert reference[0][0] - reference[1][0] > 1e-4  # a unique optimum
        expected = np.full(EXACT_BEAM, -np.inf)
        top = [score for score, _ in reference[:EXACT_BEAM]]
        expected[:len(top)] = top
        np.testing.assert_allclose(result.scores.numpy()[b], expected, rtol=1e-5, atol=1e-5)
        assert hypotheses(result.ids.numpy()[b, :1], result.lengths.numpy()[b, :1])[0] == \
            reference[0][1]


def test_two_models_greedy_search_equals_numpy_greedy_of_the_average():
    members = [TableModel(batch=len(LONG_LIMITS), seed=11, eos_bias=1.0),
               TableModel(batch=len(LONG_LIMITS), seed=12, eos_bias=1.0)]
    twin = AveragedTables(members)
    result = ensemble_search(members, LONG, alpha=0.6, max_lengths=LONG_LIMITS)
    for b, (seq, limit) in enumerate(zip(hypotheses(result.ids.numpy(), result.lengths.numpy()),
                                         LONG_LIMITS)):
        want, score = twin.np_greedy(b, limit, 0.6)
        assert seq == want
        np.testing.assert_allclose(result.scores.numpy()[b], score, rtol=1e-5, atol=1e-5)
    found = hypotheses(result.ids.numpy(), result.lengths.numpy())
    differs = [any(m.np_greedy(b, limit, 0.6)[0] != found[b] for m in members)
               for b, limit in enumerate(LONG_LIMITS)]
    assert any(differs)  # somewhere the ensemble leaves a member's greedy path


@pytest.fixture(scope="module")
def translator():
    from test_inference import small_translator

    return small_translator(beam_size=3)


def test_an_ensemble_of_a_model_with_itself_is_that_model(translator):
    from test_inference import SENTENCES

    twice = Translator([translator.model, translator.model], translator.tokenizer,
                       translator.decoding)
    source_ids, _, _ = translator.source_ids(tf.constant(SENTENCES))
    for options in (dict(), dict(greedy=True, incremental=False)):
        alone, pair = translator.search(source_ids, **options), twice.search(source_ids, **options)
        np.testing.assert_array_equal(pair.ids, alone.ids)
        np.testing.assert_array_equal(pair.lengths, alone.lengths)
        np.testing.assert_allclose(pair.scores, alone.scores, rtol=1e-5, atol=1e-5)


def test_members_must_share_the_tokenizers_vocabulary(translator):
    import keras_transformer as kt

    config = kt.TransformerConfig.from_preset("tiny", vocab_size=translator.tokenizer.vocab_size + 8)
    other = kt.Transformer(config)
    with pytest.raises(ValueError, match=f"ensemble member 1's vocabulary has "
                                         f"{translator.tokenizer.vocab_size + 8}"):
        Translator([translator.model, other], translator.tokenizer, DecodingConfig())
    with pytest.raises(ValueError, match="at least one model"):
        Translator([], translator.tokenizer)
