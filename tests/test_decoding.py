"""Beam and greedy search (section 6.1) against independent numpy references.

The "model" is a fixed random table of logits, conditioned on the example, the step, the previous
token (read from the ids buffer) and two pieces of state carried in the cache: a running sum of
the tokens (a [rows] leaf) and the token before the previous one (read from a [rows, L + 1]
history buffer, like a key/value cache). A search that tiles or reorders the cache wrongly
therefore scores hypotheses differently from the numpy reference, which recomputes everything
from the token sequence alone.
"""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import decoding

VOCAB = 5
PAD, START, EOS = 0, 2, 3
MOD = 3  # the running-sum state takes MOD values
MAX_STEPS = 12  # the table covers this many steps; later steps reuse the last one


def make_table(batch, seed, eos_bias=0.0):
    rng = np.random.default_rng(seed)
    main = rng.normal(0.0, 1.5, size=(batch, MAX_STEPS, VOCAB, MOD, VOCAB))
    main[..., EOS] += eos_bias
    second = rng.normal(0.0, 1.0, size=(VOCAB, VOCAB))  # logit shift from the token two back
    return main.astype(np.float32), second.astype(np.float32)


class TableModel:
    """The step function (TensorFlow) and its numpy twin working from a plain token sequence."""

    def __init__(self, batch, seed, eos_bias=0.0):
        self.main, self.second = make_table(batch, seed, eos_bias)
        self.batch = batch

    def initial_cache(self, length):
        return {
            "example": tf.range(self.batch, dtype=tf.int32),
            "state": {
                "sum": tf.zeros([self.batch], tf.int32),
                "history": tf.fill([self.batch, length + 1], START),
            },
        }

    def step_fn(self, ids, i, cache):
        prev = ids[:, i]
        two_back = cache["state"]["history"][:, tf.maximum(i - 1, 0)]
        step = tf.minimum(i, MAX_STEPS - 1)
        index = tf.stack(
            [cache["example"], tf.fill(tf.shape(prev), step), prev, cache["state"]["sum"]], axis=1
        )
        logits = tf.gather_nd(self.main, index) + tf.gather(self.second, two_back)
        history = cache["state"]["history"]
        at_i = tf.equal(tf.range(tf.shape(history)[1]), i)
        new_cache = {
            "example": cache["example"],
            "state": {
                "sum": (cache["state"]["sum"] + prev) % MOD,
                "history": tf.where(at_i, prev[:, None], history),
            },
        }
        return logits, new_cache

    def np_log_probs(self, example, prefix):
        """log P(next token | START + prefix) as float64 [VOCAB], from the sequence alone."""
        tokens = [START] + list(prefix)
        i = len(prefix)
        state = sum(tokens[:-1]) % MOD
        two_back = tokens[i - 1] if i > 0 else START
        logits = self.main[example, min(i, MAX_STEPS - 1), tokens[-1], state].astype(np.float64)
        logits = logits + self.second[two_back]
        return logits - np.logaddexp.reduce(logits)

    def np_score(self, example, sequence, alpha):
        log_prob = sum(
            self.np_log_probs(example, sequence[:t])[token] for t, token in enumerate(sequence)
        )
        return log_prob / ((5.0 + len(sequence)) / 6.0) ** alpha

    def np_all_hypotheses(self, limit):
        """The search space: sequences ending at their first EOS within the limit, plus EOS-free
        sequences of exactly the limit (finished there)."""
        words = [t for t in range(VOCAB) if t != EOS]
        for n in range(1, limit + 1):
            for prefix in itertools.product(words, repeat=n - 1):
                yield prefix + (EOS,)
        yield from itertools.product(words, repeat=limit)

    def np_exhaustive(self, example, limit, alpha):
        """All hypotheses with scores, best first."""
        scored = [(self.np_score(example, h, alpha), h) for h in self.np_all_hypotheses(limit)]
        return sorted(scored, key=lambda item: -item[0])

    def np_greedy(self, example, limit, alpha):
        sequence = []
        while len(sequence) < limit and (not sequence or sequence[-1] != EOS):
            sequence.append(int(np.argmax(self.np_log_probs(example, sequence))))
        return tuple(sequence), self.np_score(example, sequence, alpha)


def run_beam(model, length, beam_size, alpha, max_lengths=None, **kwargs):
    return decoding.beam_search(
        model.step_fn, tf.fill([model.batch], START), model.initial_cache(length), beam_size,
        alpha, length, EOS, max_lengths=max_lengths, pad_id=PAD, **kwargs,
    )


def run_greedy(model, length, alpha, max_lengths=None, **kwargs):
    return decoding.greedy_search(
        model.step_fn, tf.fill([model.batch], START), model.initial_cache(length), length, EOS,
        max_lengths=max_lengths, pad_id=PAD, alpha=alpha, **kwargs,
    )


def hypotheses(ids, lengths):
    """Token tuples of the entries of a [..., L] ids array, checking the padding after them."""
    out = []
    for row, n in zip(ids.reshape(-1, ids.shape[-1]), lengths.reshape(-1)):
        assert np.all(row[n:] == PAD), f"ids not padded after length {n}: {row}"
        out.append(tuple(int(t) for t in row[:n]))
    return out


def check_well_formed(model, result, limits, alpha):
    """Every returned hypothesis is a member of the search space with its true score, each n-best
    list is sorted best first and has no duplicates."""
    ids, scores, lengths = (result.ids.numpy(), result.scores.numpy(), result.lengths.numpy())
    for b, limit in enumerate(limits):
        assert np.all(scores[b][:-1] >= scores[b][1:]), f"n-best not sorted: {scores[b]}"
        valid = np.isfinite(scores[b])
        seqs = hypotheses(ids[b][valid], lengths[b][valid])
        assert len(set(seqs)) == len(seqs), f"duplicate hypotheses: {seqs}"
        for seq, score in zip(seqs, scores[b][valid]):
            assert 1 <= len(seq) <= limit
            assert EOS not in seq[:-1]
            assert seq[-1] == EOS or len(seq) == limit, seq
            np.testing.assert_allclose(score, model.np_score(b, seq, alpha), rtol=1e-5, atol=1e-5)
        assert np.all(lengths[b][~valid] == 0) and np.all(ids[b][~valid] == PAD)


# --- (1) exhaustive search ---------------------------------------------------------------------

LENGTH = 4
LIMITS = [4, 2, 3]  # per-example limits; the first uses the whole buffer
# With this many beams every extension of every alive hypothesis ranks within the beam at every
# step, so the search must be exact: its n-best list IS the exhaustive top list.
EXACT_BEAM = VOCAB * (VOCAB - 1) ** (LENGTH - 1)


@pytest.fixture(scope="module")
def model():
    return TableModel(batch=len(LIMITS), seed=1234)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
@pytest.mark.parametrize("beam_size", [EXACT_BEAM, EXACT_BEAM + 21])
def test_beam_search_equals_exhaustive_search(model, alpha, beam_size):
    result = run_beam(model, LENGTH, beam_size, alpha, max_lengths=LIMITS)
    assert result.ids.shape == (len(LIMITS), beam_size, LENGTH)
    check_well_formed(model, result, LIMITS, alpha)
    for b, limit in enumerate(LIMITS):
        reference = model.np_exhaustive(b, limit, alpha)
        # The optimum must be unique beyond float32 noise for the comparison to mean anything.
        assert reference[0][0] - reference[1][0] > 1e-4
        best = hypotheses(result.ids.numpy()[b, :1], result.lengths.numpy()[b, :1])[0]
        assert best == reference[0][1]
        expected = np.full(beam_size, -np.inf)
        top = [score for score, _ in reference[:beam_size]]
        expected[: len(top)] = top
        np.testing.assert_allclose(result.scores.numpy()[b], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_small_beams_return_true_scores_and_never_beat_the_optimum(model, alpha):
    for beam_size in (1, 2, 4):
        result = run_beam(model, LENGTH, beam_size, alpha, max_lengths=LIMITS)
        check_well_formed(model, result, LIMITS, alpha)
        for b, limit in enumerate(LIMITS):
            optimum = model.np_exhaustive(b, limit, alpha)[0][0]
            assert result.scores.numpy()[b, 0] <= optimum + 1e-5


# --- (2) beam size 1 and greedy ----------------------------------------------------------------

LONG = 12
LONG_LIMITS = [12, 3, 7, 1, 12, 12, 9, 5]


@pytest.fixture(scope="module")
def long_model():
    # EOS often second best: an EOS extension must not finish unless it ranks within the beam,
    # or beam size 1 would leave the greedy path.
    return TableModel(batch=len(LONG_LIMITS), seed=11, eos_bias=1.0)


def test_greedy_matches_numpy_greedy(long_model):
    for alpha in (0.0, 0.6):
        result = run_greedy(long_model, LONG, alpha, max_lengths=LONG_LIMITS)
        seqs = hypotheses(result.ids.numpy(), result.lengths.numpy())
        for b, limit in enumerate(LONG_LIMITS):
            seq, score = long_model.np_greedy(b, limit, alpha)
            assert seqs[b] == seq
            np.testing.assert_allclose(result.scores.numpy()[b], score, rtol=1e-5, atol=1e-5)


def test_beam_size_one_equals_greedy(long_model):
    # Exact for alpha = 0: an ending extension only finishes when it is the single best one, and
    # then the runner-up alive hypothesis cannot beat it, so the search stops on the greedy path.
    beam = run_beam(long_model, LONG, 1, 0.0, max_lengths=LONG_LIMITS)
    greedy = run_greedy(long_model, LONG, 0.0, max_lengths=LONG_LIMITS)
    np.testing.assert_array_equal(beam.ids.numpy()[:, 0], greedy.ids.numpy())
    np.testing.assert_array_equal(beam.lengths.numpy()[:, 0], greedy.lengths.numpy())
    np.testing.assert_array_equal(beam.scores.numpy()[:, 0], greedy.scores.numpy())
    assert int(beam.steps) == int(greedy.steps)
    # With alpha > 0 beam size 1 keeps looking after the greedy hypothesis finished (a longer one
    # may score better once normalised), so it can only do better than greedy.
    beam = run_beam(long_model, LONG, 1, 0.6, max_lengths=LONG_LIMITS)
    greedy = run_greedy(long_model, LONG, 0.6, max_lengths=LONG_LIMITS)
    assert np.all(beam.scores.numpy()[:, 0] >= greedy.scores.numpy() - 1e-6)


# --- (3) XLA and tf.function -------------------------------------------------------------------


def test_xla_and_graph_give_the_eager_outputs(long_model):
    start = tf.fill([long_model.batch], START)
    cache = long_model.initial_cache(LONG)
    limits = tf.constant(LONG_LIMITS)

    def beam(ids, cache, limits):
        return decoding.beam_search(
            long_model.step_fn, ids, cache, 4, 0.6, LONG, EOS, max_lengths=limits
        )

    def greedy(ids, cache, limits):
        return decoding.greedy_search(long_model.step_fn, ids, cache, LONG, EOS, max_lengths=limits)

    # Serving-style signature: the batch size is unknown when tracing.
    signature = [
        tf.TensorSpec([None], tf.int32),
        tf.nest.map_structure(lambda t: tf.TensorSpec([None] + t.shape[1:], t.dtype), cache),
        tf.TensorSpec([None], tf.int32),
    ]
    for search in (beam, greedy):
        eager = search(start, cache, limits)
        graph = tf.function(search, input_signature=signature)(start, cache, limits)
        xla = tf.function(search, jit_compile=True)(start, cache, limits)
        for other in (graph, xla):
            np.testing.assert_array_equal(other.ids.numpy(), eager.ids.numpy())
            np.testing.assert_array_equal(other.lengths.numpy(), eager.lengths.numpy())
            np.testing.assert_allclose(other.scores.numpy(), eager.scores.numpy(), rtol=1e-5)
            assert int(other.steps) == int(eager.steps)


# --- (4) per-example length limits -------------------------------------------------------------


def test_hypotheses_without_eos_finish_at_their_own_limit():
    model = TableModel(batch=4, seed=7, eos_bias=-30.0)  # EOS practically never chosen
    limits = [5, 1, 3, 9]  # 9 is beyond the buffer: clipped to it
    result = run_beam(model, 6, 3, 0.6, max_lengths=limits)
    clipped = [5, 1, 3, 6]
    check_well_formed(model, result, clipped, 0.6)
    lengths = result.lengths.numpy()
    assert np.all(lengths == np.array(clipped)[:, None])
    assert not np.any(result.ids.numpy() == EOS)
    greedy = run_greedy(model, 6, 0.0, max_lengths=limits)
    np.testing.assert_array_equal(greedy.lengths.numpy(), clipped)
    # The loop ends once every example reached its own limit.
    assert int(result.steps) == int(greedy.steps) == 6
    short = run_beam(model, 6, 3, 0.6, max_lengths=[2, 1, 3, 2], early_stop=False)
    assert int(short.steps) == 3


# --- (5) early stopping ------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0, -0.5])
def test_early_stop_changes_nothing(long_model, alpha):
    for beam_size in (2, 4):
        early = run_beam(long_model, LONG, beam_size, alpha)
        full = run_beam(long_model, LONG, beam_size, alpha, early_stop=False)
        assert int(full.steps) == LONG
        for got, want in zip(early[:3], full[:3]):
            np.testing.assert_array_equal(got.numpy(), want.numpy())
        if alpha <= 0.6:  # larger alphas favour long outputs, which keeps beams alive
            assert int(early.steps) < LONG


@pytest.mark.parametrize("search", ["beam", "greedy"])
def test_finished_examples_leave_the_batch_without_changing_results(long_model, search, monkeypatch):
    """Eagerly the loop runs in Python, so the rows each step computes can be counted."""
    rows = []
    step_fn = long_model.step_fn

    def counting_step_fn(ids, i, cache):
        rows.append(int(tf.shape(ids)[0]))
        return step_fn(ids, i, cache)

    monkeypatch.setattr(long_model, "step_fn", counting_step_fn)
    beam_size = 3 if search == "beam" else 1

    def run(drop):
        rows.clear()
        if search == "beam":
            result = run_beam(long_model, LONG, beam_size, 0.6, max_lengths=LONG_LIMITS,
                              drop_finished=drop)
        else:
            result = run_greedy(long_model, LONG, 0.6, max_lengths=LONG_LIMITS, drop_finished=drop)
        return result, list(rows)

    (kept, kept_rows), (dropped, dropped_rows) = run(False), run(True)
    for got, want in zip(dropped, kept):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    batch_rows = len(LONG_LIMITS) * beam_size
    assert set(kept_rows) == {batch_rows}
    assert dropped_rows[0] == batch_rows and dropped_rows == sorted(dropped_rows, reverse=True)
    # The example with limit 1 is done after one step, so the second step already computes fewer.
    assert dropped_rows[1] < batch_rows and len(dropped_rows) == len(kept_rows)


def test_dropping_finished_examples_is_refused_under_xla(long_model):
    search = tf.function(lambda: run_greedy(long_model, LONG, 0.0, drop_finished=True),
                         jit_compile=True)
    with pytest.raises(ValueError, match="drop_finished=True changes shapes"):
        search()


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
@pytest.mark.parametrize("n_best", [1, 2])
def test_n_best_keeps_the_exhaustive_top_n_and_stops_no_later(model, alpha, n_best):
    beam_size = EXACT_BEAM
    full = run_beam(model, LENGTH, beam_size, alpha, max_lengths=LIMITS)
    short = run_beam(model, LENGTH, beam_size, alpha, max_lengths=LIMITS, n_best=n_best)
    assert int(short.steps) <= int(full.steps)
    for b, limit in enumerate(LIMITS):
        reference = model.np_exhaustive(b, limit, alpha)[:n_best]
        got = hypotheses(short.ids.numpy()[b, :n_best], short.lengths.numpy()[b, :n_best])
        assert got == [h for _, h in reference]
        np.testing.assert_allclose(short.scores.numpy()[b, :n_best], [s for s, _ in reference],
                                   rtol=1e-5, atol=1e-5)


def test_n_best_one_stops_sooner_with_the_same_best(long_model):
    for alpha in (0.0, 0.6):
        full = run_beam(long_model, LONG, 4, alpha)
        best_only = run_beam(long_model, LONG, 4, alpha, n_best=1)
        np.testing.assert_array_equal(best_only.ids.numpy()[:, 0], full.ids.numpy()[:, 0])
        np.testing.assert_array_equal(best_only.scores.numpy()[:, 0], full.scores.numpy()[:, 0])
        # Here the full n-best needs 7 (alpha 0) and 9 (alpha 0.6) steps, the best alone 4 and 8.
        assert int(best_only.steps) < int(full.steps)
    with pytest.raises(ValueError, match="n_best=5 exceeds beam_size=4"):
        run_beam(long_model, LONG, 4, 0.0, n_best=5)


def crafted_table(rules, length):
    """Log-probability table [length, VOCAB, VOCAB] from {(step, previous token): {token: p}};
    unlisted contexts end (EOS), unlisted tokens get a tiny probability."""
    table = np.zeros((length, VOCAB, VOCAB), np.float32)
    for i in range(length):
        for prev in range(VOCAB):
            p = np.full(VOCAB, 1e-4)
            for token, prob in rules.get((i, prev), {EOS: 1.0}).items():
                p[token] = prob
            table[i, prev] = np.log(p / p.sum())
    return table


W, C = 4, 1
# alpha = 2, beam 1: after step 0 the finished [EOS] (log-prob -1.0) beats the alive [W]
# (-1.5) even normalised by lp(2), but [W, W, EOS] wins once normalised by lp(3): only the bound
# with lp at the limit keeps searching.
LONG_WINS = dict(
    alpha=2.0, beam_size=1, best=[(W, W, EOS)],
    rules={(0, START): {EOS: 0.37, W: 0.22, 0: 0.14, 1: 0.13, 2: 0.14},
           (1, W): {W: 1.0}, (2, W): {EOS: 1.0}},
)
# alpha = -1, beam 2: lp shrinks with length, so the bound must use lp at the NEXT length; with
# lp at the limit the search would stop with [C, EOS] as second best instead of [W, W, EOS].
SHORT_WINS = dict(
    alpha=-1.0, beam_size=2, best=[(EOS,), (W, W, EOS)],
    rules={(0, START): {EOS: 0.4, W: 0.35, C: 0.2, 0: 0.025, 2: 0.025},
           (1, C): {EOS: 1.0}, (1, W): {W: 1.0}, (2, W): {EOS: 1.0}},
)


@pytest.mark.parametrize("case", [LONG_WINS, SHORT_WINS], ids=["alpha=2", "alpha=-1"])
def test_early_stop_bound_is_safe_for_either_sign_of_alpha(case):
    length = 12
    table = crafted_table(case["rules"], length)

    def step_fn(ids, i, cache):
        return tf.gather(table[tf.minimum(i, length - 1)], ids[:, i]), cache

    def run(**kwargs):
        return decoding.beam_search(
            step_fn, [START], {"unused": tf.zeros([1, 1])}, case["beam_size"], case["alpha"],
            length, EOS, **kwargs,
        )

    early, full = run(), run(early_stop=False)
    assert hypotheses(early.ids.numpy()[0], early.lengths.numpy()[0]) == case["best"]
    for seq, score in zip(case["best"], early.scores.numpy()[0]):
        log_prob = sum(table[t, ([START] + list(seq))[t], token] for t, token in enumerate(seq))
        penalty = ((5 + len(seq)) / 6) ** case["alpha"]
        np.testing.assert_allclose(score, log_prob / penalty, rtol=1e-5)
    for got, want in zip(early[:3], full[:3]):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    # Stops right after [W, W, EOS] finished: nothing alive can reach the n-best list any more.
    assert int(early.steps) == 3


# --- bad arguments -----------------------------------------------------------------------------


def test_bad_arguments_are_clear_value_errors(model):
    start = tf.fill([3], START)
    cache = model.initial_cache(LENGTH)
    with pytest.raises(ValueError, match="beam_size"):
        decoding.beam_search(model.step_fn, start, cache, 0, 0.6, LENGTH, EOS)
    with pytest.raises(ValueError, match="max_decode_length"):
        decoding.greedy_search(model.step_fn, start, cache, tf.constant(4), EOS)
    with pytest.raises(ValueError, match="initial_ids"):
        decoding.greedy_search(model.step_fn, start[:, None], cache, LENGTH, EOS)
    with pytest.raises(ValueError, match=r"cache\['example'\].*leading dimension 2"):
        bad = dict(cache, example=tf.range(2))
        decoding.beam_search(model.step_fn, start, bad, 2, 0.6, LENGTH, EOS)
    with pytest.raises(ValueError, match="max_lengths has 2 entries"):
        decoding.beam_search(model.step_fn, start, cache, 2, 0.6, LENGTH, EOS, max_lengths=[1, 2])
    with pytest.raises(ValueError, match="structure"):
        decoding.greedy_search(
            lambda ids, i, c: (model.step_fn(ids, i, c)[0], {}), start, cache, LENGTH, EOS
        )


# --- the real model: the search over the key/value cache equals the search without it -----------


# 400: a vocabulary the beam search's top-k cuts into chunks (decoding._chunk_size).
@pytest.mark.parametrize("vocab", [24, 400])
def test_real_model_cached_search_equals_uncached_and_xla(vocab):
    from keras_transformer import Transformer, TransformerConfig
    from keras_transformer.inference import search_inputs

    length, beam_size = 7, 3
    assert (decoding._chunk_size(vocab, beam_size, 2 * beam_size) is None) == (vocab == 24)
    model = Transformer(TransformerConfig.from_preset("tiny", vocab_size=vocab))
    source = tf.constant([[5, 6, 7, 8, 9, 3], [10, 11, 3, 0, 0, 0], [12, 3, 0, 0, 0, 0]])
    model((source, tf.fill([3, 2], START)))  # builds the weights
    limits = tf.minimum(tf.reduce_sum(tf.cast(source != PAD, tf.int32), axis=1) + 2, length)
    memory, memory_mask = model.encode(source)
    # An untrained model may well emit pad or start tokens; a translator forbids them.
    forbidden = tf.constant(np.isin(np.arange(vocab), [PAD, START]) * -1e9, tf.float32)

    def cached(ids, i, cache):  # the encoder's keys/values too tiled and reordered per beam
        logits, self_cache = model.decode_step(ids[:, i], i, cache["self"], cache["memory"],
                                               grow_cache=False)
        return logits + forbidden, {"self": self_cache, "memory": cache["memory"]}

    def uncached(ids, i, cache):  # re-runs the decoder over the whole prefix at every step
        logits = model.decode(ids[:, : i + 1], cache["memory"], cache["memory_mask"])[:, -1]
        return logits + forbidden, cache

    start = tf.fill([3], START)
    cache = dict(zip(("self", "memory"), model.init_cache(memory, memory_mask, length)))
    plain = {"memory": memory, "memory_mask": memory_mask}

    def beam(step_fn, cache, start, limits, **options):
        return decoding.beam_search(
            step_fn, start, cache, beam_size, 0.6, length, EOS, max_lengths=limits, **options
        )

    def greedy(step_fn, cache, start, limits, **options):
        return decoding.greedy_search(step_fn, start, cache, length, EOS, max_lengths=limits,
                                      **options)

    # The Translator's: a growing self-attention cache, the encoder's keys/values per sentence.
    # Finished examples leave the batch (drop_finished, the default without XLA) or not.
    growing, memory_rows, growing_step = search_inputs(model, memory, memory_mask,
                                                       logits_bias=forbidden)
    fixed, _, fixed_step = search_inputs(model, memory, memory_mask, length, logits_bias=forbidden)

    def shared(search, step_fn, **options):
        return lambda cache, start, limits: search(
            step_fn, cache, start, limits, shared_cache=memory_rows, **options)

    for search in (beam, greedy):
        want = search(uncached, plain, start, limits, drop_finished=False)
        runs = [search(uncached, plain, start, limits), search(cached, cache, start, limits),
                shared(search, growing_step)(growing, start, limits),
                shared(search, growing_step, drop_finished=False)(growing, start, limits),
                tf.function(shared(search, growing_step))(growing, start, limits)]
        if search is beam:
            xla = tf.function(lambda *args: search(cached, *args), jit_compile=True)
            runs.append(xla(cache, start, limits))
            runs.append(tf.function(shared(search, fixed_step), jit_compile=True)(fixed, start, limits))
        for got in runs:
            np.testing.assert_array_equal(got.ids.numpy(), want.ids.numpy())
            np.testing.assert_array_equal(got.lengths.numpy(), want.lengths.numpy())
            np.testing.assert_allclose(got.scores.numpy(), want.scores.numpy(), atol=1e-4)
        per_example = limits.numpy().reshape([-1] + [1] * (want.lengths.ndim - 1))
        assert np.all(want.lengths.numpy() <= per_example)


# --- the top-k over beam x vocabulary in two small top-k's ----------------------------------------


@pytest.mark.parametrize("vocab,beam_size", [(400, 4), (2000, 4), (1024, 1), (8000, 2)])
@pytest.mark.parametrize("values", ["few distinct (ties)", "continuous"])
def test_two_stage_top_k_equals_one_top_k_ties_included(vocab, beam_size, values):
    rng = np.random.default_rng(vocab + beam_size)
    examples, count = 5, 2 * beam_size
    assert decoding._chunk_size(vocab, beam_size, count) is not None  # the two-stage path runs
    if values == "continuous":
        log_probs = rng.normal(-8.0, 3.0, size=(examples * beam_size, vocab))
        alive = rng.normal(-2.0, 1.0, size=(examples, beam_size))
    else:  # ties within and across chunks and beams: the lowest index must win, as in top_k
        log_probs = -rng.integers(0, 3, size=(examples * beam_size, vocab)).astype(float)
        alive = -rng.integers(0, 2, size=(examples, beam_size)).astype(float)
    log_probs[rng.random(log_probs.shape) < 0.2] = -np.inf  # tokens ruled out
    log_probs[:beam_size, : vocab - 3] = -np.inf  # an example with three tokens left per beam
    alive[1, 1:] = -np.inf  # the first step: one live beam
    alive[2, :] = -np.inf  # nothing alive: every candidate ties at -inf
    log_probs, alive = log_probs.astype(np.float32), alive.astype(np.float32)
    flat = (alive[:, :, None] + log_probs.reshape(examples, beam_size, vocab)).reshape(examples, -1)
    want_values, want_index = tf.math.top_k(flat, k=count)
    got_values, got_index = decoding._top_extensions(tf.constant(alive), tf.constant(log_probs),
                                                     count, vocab)
    np.testing.assert_array_equal(got_index.numpy(), want_index.numpy())
    np.testing.assert_array_equal(got_values.numpy(), want_values.numpy())


def test_chunk_size_divides_the_vocabulary_or_declines():
    assert decoding._chunk_size(2000, 4, 8) in (20, 25, 40)
    assert 2000 % decoding._chunk_size(2000, 4, 8) == 0
    assert decoding._chunk_size(97, 4, 8) is None  # prime: no chunks
    assert decoding._chunk_size(24, 3, 6) is None  # small: one top-k is as fast
