"""Random sampling (decoding.sample_search, through Translator.search) against independent
references: the distribution of first tokens against numpy's softmax with temperature, top-k and
top-p by a chi-square test; top-k 1 against greedy search; scores against the numpy twin of the
table model of test_decoding; the same draws for the same seed eagerly, in tf.function and under
XLA, with and without finished examples leaving the batch."""

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import decoding
from keras_transformer.inference import SamplingConfig
from test_decoding import EOS, LONG, LONG_LIMITS, PAD, START, TableModel, hypotheses

# First tokens drawn from a fixed next-token distribution: 20,000 rows, one step each.
DRAWS = 20_000
LOGITS = np.array([2.0, 1.2, 0.7, -0.1, 0.4, -0.8, 1.6, 0.0], np.float32)
# The chi-square distribution's 0.999 quantile for 1..7 degrees of freedom (standard tables):
# a statistic above it has p < 0.001.
CRITICAL = {1: 10.828, 2: 13.816, 3: 16.266, 4: 18.467, 5: 20.515, 6: 22.458, 7: 24.322}


def expected_distribution(temperature, top_k, top_p):
    """The distribution a sample must follow, in float64 from the definitions: softmax of the
    logits / temperature; the top_k most probable (0: all); of those renormalised, the smallest
    most-probable set reaching top_p; renormalised."""
    logits = LOGITS.astype(np.float64) / temperature
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    order = np.argsort(-probs, kind="stable")
    keep = order[:top_k] if top_k else order
    kept = probs[keep] / probs[keep].sum()
    needed = int(np.searchsorted(np.cumsum(kept), top_p - 1e-12)) + 1  # first prefix reaching p
    keep = keep[:needed]
    result = np.zeros_like(probs)
    result[keep] = probs[keep] / probs[keep].sum()
    return result


def first_tokens(seed, **options):
    def step_fn(ids, i, cache):
        return tf.tile(tf.constant(LOGITS)[None], [tf.shape(ids)[0], 1]), cache

    result = decoding.sample_search(step_fn, tf.fill([DRAWS], START), {"unused": tf.zeros([DRAWS])},
                                    1, EOS, seed=seed, **options)
    return result.ids.numpy()[:, 0]


@pytest.mark.parametrize("temperature,top_k,top_p", [
    (1.0, 0, 1.0), (0.6, 0, 1.0), (1.7, 0, 1.0), (1.0, 3, 1.0), (1.3, 5, 1.0), (1.0, 0, 0.75),
    (0.8, 0, 0.5), (1.5, 6, 0.8)])
def test_first_tokens_follow_the_tempered_truncated_softmax(temperature, top_k, top_p):
    want = expected_distribution(temperature, top_k, top_p)
    assert 2 <= np.count_nonzero(want)  # a test of the shape, not of a certain token
    tokens = first_tokens(11, temperature=temperature, top_k=top_k, top_p=top_p)
    counts = np.bincount(tokens, minlength=len(LOGITS))
    assert counts[want == 0].sum() == 0, (counts, want)  # cut tokens never drawn
    kept = want > 0
    expected = DRAWS * want[kept]
    statistic = float(((counts[kept] - expected) ** 2 / expected).sum())
    assert statistic < CRITICAL[int(kept.sum()) - 1], (counts, expected)


def test_the_chi_square_test_tells_one_distribution_from_another():
    """The test above can fail: samples at temperature 1 do not pass for temperature 1.3."""
    want = expected_distribution(1.3, 0, 1.0)
    counts = np.bincount(first_tokens(11), minlength=len(LOGITS))
    statistic = float(((counts - DRAWS * want) ** 2 / (DRAWS * want)).sum())
    assert statistic > CRITICAL[len(LOGITS) - 1]


@pytest.fixture(scope="module")
def long_model():
    # EOS rarely chosen: long outputs, so that draws have many steps to differ in.
    return TableModel(batch=len(LONG_LIMITS), seed=11, eos_bias=-1.0)


def run_sample(model, seed, **options):
    return decoding.sample_search(model.step_fn, tf.fill([model.batch], START),
                                  model.initial_cache(LONG), LONG, EOS,
                                  max_lengths=LONG_LIMITS, pad_id=PAD, seed=seed, **options)


def test_top_k_one_and_a_tiny_nucleus_are_greedy_search(long_model):
    greedy = decoding.greedy_search(long_model.step_fn, tf.fill([long_model.batch], START),
                                    long_model.initial_cache(LONG), LONG, EOS,
                                    max_lengths=LONG_LIMITS, pad_id=PAD, alpha=0.6)
    for seed, options in [(0, dict(top_k=1)), (5, dict(top_k=1, temperature=3.0)),
                          (7, dict(top_p=1e-6))]:
        sampled = run_sample(long_model, seed, alpha=0.6, **options)
        np.testing.assert_array_equal(sampled.ids.numpy(), greedy.ids.numpy())
        np.testing.assert_array_equal(sampled.lengths.numpy(), greedy.lengths.numpy())
        np.testing.assert_array_equal(sampled.scores.numpy(), greedy.scores.numpy())


def test_scores_are_the_models_own_log_probabilities(long_model):
    """Whatever the temperature and cuts, a sample's score is log P(Y) / lp(Y) under the model."""
    result = run_sample(long_model, 3, temperature=1.8, top_k=3, alpha=0.6)
    for b, seq in enumerate(hypotheses(result.ids.numpy(), result.lengths.numpy())):
        assert 1 <= len(seq) <= LONG_LIMITS[b] and EOS not in seq[:-1]
        assert seq[-1] == EOS or len(seq) == LONG_LIMITS[b]
        np.testing.assert_allclose(result.scores.numpy()[b], long_model.np_score(b, seq, 0.6),
                                   rtol=1e-5, atol=1e-5)


def test_the_same_seed_gives_the_same_samples_everywhere(long_model):
    start = tf.fill([long_model.batch], START)
    cache = long_model.initial_cache(LONG)

    def sample(seed, drop_finished=None):
        return decoding.sample_search(long_model.step_fn, start, cache, LONG, EOS, seed=seed,
                                      max_lengths=LONG_LIMITS, top_p=0.95, temperature=1.2,
                                      drop_finished=drop_finished)

    eager = sample(tf.constant(4))
    kept = sample(tf.constant(4), drop_finished=False)
    graph = tf.function(sample)(tf.constant(4))
    xla = tf.function(sample, jit_compile=True)(tf.constant(4))
    for other in (sample(tf.constant(4)), kept, graph, xla):
        np.testing.assert_array_equal(other.ids.numpy(), eager.ids.numpy())
        np.testing.assert_array_equal(other.lengths.numpy(), eager.lengths.numpy())
        np.testing.assert_allclose(other.scores.numpy(), eager.scores.numpy(), rtol=1e-5)
    different = [sample(tf.constant(seed)).ids.numpy() for seed in (5, 6)]
    assert not np.array_equal(different[0], eager.ids.numpy())
    assert not np.array_equal(different[1], different[0])
    # Not just a few tokens: most examples get another output.
    assert (different[0] != eager.ids.numpy()).any(axis=1).mean() > 0.5


def test_bad_sampling_settings_are_one_clear_error_each(long_model):
    for options, message in [(dict(top_k=-1), "top_k"), (dict(top_p=0.0), "top_p"),
                             (dict(top_p=1.5), "top_p"), (dict(temperature=0.0), "temperature")]:
        with pytest.raises(ValueError, match=message):
            run_sample(long_model, 0, **options)
    for options, message in [(dict(top_k=-2), r"top_k must be an integer >= 0"),
                             (dict(top_p=0), r"top_p must be a number in \(0, 1\]"),
                             (dict(top_p=1.01), r"top_p must be a number in \(0, 1\]"),
                             (dict(temperature=-1.0), "temperature must be a finite number > 0"),
                             (dict(seed=1.5), "seed must be an integer")]:
        with pytest.raises(ValueError, match=message):
            SamplingConfig(**options)


# --- through the door ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def translator():
    from test_inference import small_translator

    return small_translator(beam_size=2)


def test_the_translators_sampling_is_its_greedy_at_top_k_one_and_seeded(translator):
    from test_inference import SENTENCES

    source_ids, _, _ = translator.source_ids(tf.constant(SENTENCES))
    greedy = translator.search(source_ids, greedy=True)
    top_one = translator.search(source_ids, sampling=SamplingConfig(top_k=1, seed=3))
    np.testing.assert_array_equal(top_one.ids, greedy.ids)
    np.testing.assert_allclose(top_one.scores, greedy.scores, rtol=1e-5)
    config = SamplingConfig(temperature=1.5, top_p=0.9, seed=2)
    sampled = translator.search(source_ids, sampling=config)
    np.testing.assert_array_equal(translator.search(source_ids, sampling=config).ids, sampled.ids)
    assert not np.array_equal(sampled.ids, greedy.ids)  # an untrained model's flat distribution
    texts = translator.text_function(config)(tf.constant(SENTENCES))
    assert [t.decode() for t in texts["translations"].numpy()] == [
        t.decode() for t in translator.tokenizer.detokenize(sampled.ids).numpy()]
    np.testing.assert_allclose(texts["scores"], sampled.scores, rtol=1e-5)
    with pytest.raises(ValueError, match="greedy and sampling exclude each other"):
        translator.search(source_ids, greedy=True, sampling=config)
