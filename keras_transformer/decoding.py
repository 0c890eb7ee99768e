"""Beam search, greedy decoding (section 6.1) and sampling in TensorFlow ops that know nothing of the
model.

The paper decodes with beam size 4, length penalty alpha = 0.6 and a maximum output length of
input length + 50, "but terminate early when possible" (section 6.1). The search talks to the model
through one narrow function, the ``symbols_to_logits_fn`` of TF Model Garden's beam search::

    logits, new_cache = symbols_to_logits_fn(ids, i, cache)

* ``ids``: int32 ``[rows, max_decode_length + 1]``. Column 0 holds the start id, columns ``1..i``
  the tokens decoded so far, later columns hold ``pad_id``. ``rows`` is ``batch * beam_size``
  for beam search (beams of one example are adjacent rows) and ``batch`` for greedy search and
  sampling.
* ``i``: scalar int32 step. The logits are for the token at position ``i + 1``; an incremental
  decoder only needs ``ids[:, i]`` (``inference.search_inputs`` calls ``model.decode_step(ids[:, i],
  i, cache, shared_cache, grow_cache=...)``).
* ``cache``: a nested structure (dicts, lists, tuples) of tensors, every leaf with leading
  dimension ``rows``. A leaf may change its other dimensions from step to step (a key/value cache
  that grows by one position per step); under XLA every shape must stay fixed (fixed-size
  buffers). The search tiles the caller's cache from ``batch`` to ``batch * beam_size`` rows and
  reorders it with a gather along axis 0 after every step, so the step function never sees beam
  bookkeeping.
* ``shared_cache`` (optional argument of every search): a nested structure of tensors with leading
  dimension ``batch``, what every beam of an example shares (e.g. the encoder output's keys and
  values). If given, the step function is called as ``symbols_to_logits_fn(ids, i, cache,
  shared_cache)``, with one row of it per example whose beams are in ``ids`` (those adjacent rows);
  it is never tiled or reordered, so never copied per beam.
* ``drop_finished`` (every search): an example that is done (its n-best list can no longer change)
  leaves the batch, so later steps only compute the examples still searching, as CTranslate2 and
  fairseq do: ``ids``, ``cache`` and ``shared_cache`` then hold their rows only. Their shapes change,
  which XLA cannot compile, so the default is on except while compiling with XLA (then every
  example is computed until all are done, as with ``drop_finished=False``). The results are the
  same either way.

Every search runs one ``tf.while_loop``. Its loop variables keep static shapes except the cache
(which may grow) and, while finished examples leave, the row counts; under XLA nothing changes
shape, so the searches run eagerly, inside ``tf.function`` and under
``tf.function(jit_compile=True)``.

Conventions shared by every search:

* Scores are ``log P(Y) / lp(Y)`` with the GNMT length penalty ``lp(Y) = ((5 + |Y|) / 6) ** alpha``
  (Wu et al. 2016, cited in section 6.1). ``|Y|`` counts the generated tokens including the EOS
  token and excluding the start token.
* Every example has a length limit: ``max_decode_length`` or, if given, its own entry of
  ``max_lengths`` (clipped to ``[1, max_decode_length]``), so a batch of short and long
  sentences shares one static buffer. A hypothesis that reaches its limit without producing EOS is
  finished there: it is returned without an EOS token, with ``|Y|`` = the limit, and competes
  with EOS-terminated hypotheses on equal terms. The search space is thus: all sequences that end
  with their first EOS within the limit, plus all EOS-free sequences of exactly the limit.
* Output ids exclude the start id, include EOS and are padded with ``pad_id`` after it.
"""

from typing import NamedTuple

import tensorflow as tf

_NEG_INF = float("-inf")


class DecodeResult(NamedTuple):
    """What a search returns.

    Beam search: ``ids`` int32 ``[batch, beam_size, max_decode_length]``, ``scores`` float32
    ``[batch, beam_size]`` and ``lengths`` int32 ``[batch, beam_size]``, the n-best list sorted best
    first. Slots left empty (only when fewer than ``beam_size`` complete hypotheses exist, e.g. a
    tiny vocabulary with a limit of 1) have score ``-inf``, length 0 and only ``pad_id`` tokens.
    Greedy search: the same without the beam axis. ``steps`` is the scalar int32 number of decoder
    steps that ran (less than ``max_decode_length`` when the search stopped early).
    """

    ids: tf.Tensor
    scores: tf.Tensor
    lengths: tf.Tensor
    steps: tf.Tensor


def length_penalty(length, alpha):
    """GNMT length penalty ``((5 + |Y|) / 6) ** alpha`` (section 6.1) as float32."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, tf.cast(alpha, tf.float32))


def beam_search(
    symbols_to_logits_fn,
    initial_ids,
    initial_cache,
    beam_size,
    alpha,
    max_decode_length,
    eos_id,
    *,
    max_lengths=None,
    pad_id=0,
    early_stop=True,
    n_best=None,
    shared_cache=None,
    drop_finished=None,
):
    """Batched beam search with the GNMT length penalty, returning the n-best list (section 6.1).

    Args:
      symbols_to_logits_fn: the step function described in the module docstring.
      initial_ids: int32 ``[batch]`` start ids (column 0 of the ids buffer).
      initial_cache: nested structure of tensors with leading dimension ``batch``.
      beam_size: Python int >= 1.
      alpha: length-penalty exponent (Python float or scalar tensor; the paper uses 0.6).
      max_decode_length: static Python int >= 1, the size of the output buffer. The paper's
        "input length + 50" is the caller's business (pass it per example as ``max_lengths``).
      eos_id: end-of-sequence id.
      max_lengths: optional int ``[batch]`` per-example limits, clipped to [1, max_decode_length].
      pad_id: written after EOS and into unused columns.
      early_stop: stop an example once no alive hypothesis can still enter its n-best list.
      n_best: how many of the best finished hypotheses must be final before an example stops
        (default ``beam_size``). A translator that keeps only the best passes 1: the same best
        hypothesis, in fewer steps (the rest of the list may then be incomplete).
      shared_cache: see the module docstring.
      drop_finished: see the module docstring (default: True unless compiling with XLA).

    Returns:
      A ``DecodeResult`` with the n-best list sorted best first.

    Per step, each example keeps ``beam_size`` *alive* hypotheses (not finished) and an n-best list
    of *finished* ones, kept apart as in tensor2tensor. Of the ``2 * beam_size`` best one-token
    extensions (enough to leave ``beam_size`` that do not end; ``_grow_alive_seq``), the best
    ``beam_size`` that do not end stay alive (``_get_new_alive_state``); one that ends (EOS or the
    length limit) enters the finished list if it ranks within the best ``beam_size`` extensions
    (``_get_new_finished_state``: the rule of fairseq and Hugging Face, which makes beam size 1
    follow the greedy path). When an example is done: ``_beam_is_done``.
    """
    k = _check_static_int("beam_size", beam_size, minimum=1)
    length = _check_static_int("max_decode_length", max_decode_length, minimum=1)
    initial_ids, batch, limits = _prepare(initial_ids, initial_cache, max_lengths, length, shared_cache)
    alpha = tf.cast(alpha, tf.float32)
    if alpha.shape.rank != 0:
        raise ValueError(f"beam_search: alpha must be a scalar, got shape {alpha.shape}.")
    n_best = _check_static_int("n_best", k if n_best is None else n_best, minimum=1)
    if n_best > k:
        raise ValueError(f"beam_search: n_best={n_best} exceeds beam_size={k}.")
    beam = _Beam(size=k, alpha=alpha, eos_id=eos_id, n_best=n_best, early_stop=early_stop)
    seq = _start_buffer(initial_ids, length, pad_id)
    state = dict(
        alive_seq=tf.tile(seq[:, None, :], [1, k, 1]),
        # All beams start equal; only the first may expand, or the n-best would hold k copies.
        alive_log_probs=tf.tile(tf.constant([[0.0] + [_NEG_INF] * (k - 1)], tf.float32), [batch, 1]),
        finished_seq=tf.fill([batch, k, length + 1], tf.constant(pad_id, tf.int32)),
        finished_scores=tf.fill([batch, k], _NEG_INF),
        finished_flags=tf.zeros([batch, k], tf.bool),
        finished_lengths=tf.zeros([batch, k], tf.int32),
        done=tf.zeros([batch], tf.bool),
    )

    def advance(i, old, cache, shared, limits):
        candidates, new_cache = _grow_alive_seq(symbols_to_logits_fn, i, old, cache, shared,
                                                limits, beam)
        with tf.name_scope("alive"):
            alive, rows = _get_new_alive_state(candidates, beam)
        with tf.name_scope("finished"):
            new = dict(alive, **_get_new_finished_state(old, candidates, i + 1, beam))
        with tf.name_scope("done"):
            new["done"] = _beam_is_done(i + 1, new, limits, beam)
        return new, new_cache, rows

    # One row per hypothesis, the beams of an example adjacent.
    cache = tf.nest.map_structure(lambda t: _repeat_rows(t, k), initial_cache)
    state = _search_loop(advance, state, cache, shared_cache, limits, length, drop_finished)
    flags = state["finished_flags"]
    return DecodeResult(
        ids=tf.where(flags[:, :, None], state["finished_seq"][:, :, 1:], pad_id),
        scores=tf.where(flags, state["finished_scores"], _NEG_INF),
        lengths=tf.where(flags, state["finished_lengths"], 0),
        steps=state["i"],
    )


class _Beam(NamedTuple):
    """The settings of one beam search, for its steps below."""

    size: int
    alpha: tf.Tensor
    eos_id: int
    n_best: int
    early_stop: bool


def _grow_alive_seq(symbols_to_logits_fn, i, old, cache, shared, limits, beam):
    """The ``2 * beam_size`` best one-token extensions of each example's alive hypotheses (enough
    to leave ``beam_size`` that do not end), as a dict of ``[examples, 2 * beam_size]`` tensors:
    ``seq`` (with the new token in column ``i + 1``), ``log_probs``, ``beam`` (which alive
    hypothesis each extends), ``token``, ``ends`` (EOS or the example's length limit) and
    ``valid`` (extends a hypothesis that is alive: not ``-inf``); and the step function's cache."""
    k = beam.size
    examples = tf.shape(old["alive_log_probs"])[0]
    rows = tf.reshape(old["alive_seq"], [examples * k, -1])
    log_probs, new_cache = _step(symbols_to_logits_fn, rows, i, cache, shared, "beam_search")
    vocab = _vocab_size(log_probs)
    # Name scopes here and below label the search's parts in profiles (TensorBoard's trace viewer).
    with tf.name_scope("top_k"):
        top_log_probs, top_index = _top_extensions(old["alive_log_probs"], log_probs, 2 * k, vocab)
        top_beam = top_index // vocab
        top_token = top_index % vocab
    with tf.name_scope("sequences"):
        seq = _write_column(tf.gather(old["alive_seq"], top_beam, batch_dims=1), i + 1, top_token)
    return dict(
        seq=seq,
        log_probs=top_log_probs,
        beam=top_beam,
        token=top_token,
        ends=tf.equal(top_token, beam.eos_id) | (i + 1 >= limits)[:, None],
        valid=top_log_probs > _NEG_INF,
    ), new_cache


def _top_extensions(alive_log_probs, log_probs, count, vocab):
    """``tf.math.top_k`` of ``alive_log_probs[:, :, None] + log_probs`` (as ``[examples, beam,
    vocab]``) flattened per example, ``count`` best: the same values and indices, ties to the lowest
    index included, but in two small top-k's instead of one over beam x vocabulary (TensorFlow's
    top-k kernel costs far more per element than a maximum does).

    The vocabulary is cut into chunks; an example's ``count`` best extensions lie in its ``count``
    chunks with the highest maxima: each of those chunks holds an extension at least as good as the
    ``count``-th best chunk maximum, so no extension in another chunk can rank above all of them
    (on ties the lower chunk wins the first top-k and the lower index the global one, and chunks
    keep index order). Adding the alive log-probability after taking a chunk's maximum gives the
    same maximum (rounding is monotonic), so the sum is only formed for the chosen chunks."""
    beam = alive_log_probs.shape[1]
    chunk = _chunk_size(vocab, beam, count)
    examples = tf.shape(alive_log_probs)[0]
    if chunk is None:
        candidates = alive_log_probs[:, :, None] + tf.reshape(log_probs, [examples, beam, vocab])
        return tf.math.top_k(tf.reshape(candidates, [examples, -1]), k=count)
    chunks = vocab // chunk
    maxima = tf.reduce_max(tf.reshape(log_probs, [examples, beam, chunks, chunk]), axis=3)
    _, best_chunks = tf.math.top_k(tf.reshape(alive_log_probs[:, :, None] + maxima,
                                              [examples, beam * chunks]), k=count)
    best_chunks = tf.sort(best_chunks, axis=1)  # index order, for the ties of the top-k below
    values = (tf.gather(tf.reshape(log_probs, [examples, beam * chunks, chunk]), best_chunks,
                        batch_dims=1)
              + tf.gather(alive_log_probs, best_chunks // chunks, batch_dims=1)[:, :, None])
    top, position = tf.math.top_k(tf.reshape(values, [examples, count * chunk]), k=count)
    index = tf.gather(best_chunks, position // chunk, batch_dims=1) * chunk + position % chunk
    return top, index


def _chunk_size(vocab, beam, count):
    """The chunk size for ``_top_extensions``: a divisor of the vocabulary size near the one that
    makes both top-k's smallest (``beam * vocab / chunk + count * chunk`` elements), or None (one
    top-k) for a vocabulary of unknown or small size or without a divisor near it."""
    if not isinstance(vocab, int) or beam is None or vocab < 16 * count:
        return None
    best = (beam * vocab / count) ** 0.5
    divisors = [d for d in range(max(2, int(best / 2)), int(2 * best) + 1) if vocab % d == 0]
    if not divisors or vocab // min(divisors, key=lambda d: abs(d - best)) * beam < count:
        return None
    return min(divisors, key=lambda d: abs(d - best))


def _get_new_alive_state(candidates, beam):
    """The best ``beam_size`` extensions that do not end: ``({"alive_seq", "alive_log_probs"},
    cache rows [examples, beam_size])``, the rows of the step's cache they continue from."""
    alive_log_probs, position = tf.math.top_k(
        tf.where(candidates["ends"], _NEG_INF, candidates["log_probs"]), k=beam.size)
    alive_beam = tf.gather(candidates["beam"], position, batch_dims=1)
    rows = alive_beam + tf.range(tf.shape(alive_beam)[0])[:, None] * beam.size
    return dict(alive_seq=tf.gather(candidates["seq"], position, batch_dims=1),
                alive_log_probs=alive_log_probs), rows


def _get_new_finished_state(old, candidates, new_length, beam):
    """The n-best list after this step: ending extensions ranked within the best ``beam_size``
    join it, scored ``log P / lp``; the list stays sorted best first, and on a tie the hypothesis
    that finished earlier stays ahead (the old list comes first)."""
    k = beam.size
    finishing = candidates["ends"] & candidates["valid"] & (tf.range(2 * k) < k)[None, :]
    new_scores = tf.where(finishing, candidates["log_probs"] / length_penalty(new_length, beam.alpha),
                          _NEG_INF)
    scores, position = tf.math.top_k(tf.concat([old["finished_scores"], new_scores], axis=1), k=k)

    def merge(before, new):
        return tf.gather(tf.concat([before, new], axis=1), position, batch_dims=1)

    return dict(
        finished_seq=merge(old["finished_seq"], candidates["seq"]),
        finished_scores=scores,
        finished_flags=merge(old["finished_flags"], finishing),
        finished_lengths=merge(old["finished_lengths"],
                               tf.fill(tf.shape(candidates["token"]), new_length)),
    )


def _beam_is_done(steps, new, limits, beam):
    """bool [examples]: no alive hypothesis is left or, with early stopping, none can still enter
    the n-best list. Log-probabilities only decrease and, for ``alpha >= 0``, ``lp`` is largest at
    the length limit, so no descendant of an alive hypothesis can score above ``best alive
    log-prob / max(lp(next length), lp(limit))`` (the max also covers ``alpha < 0``). Ties keep
    the earlier hypothesis, so early stopping never changes the returned n-best list."""
    best_alive = tf.reduce_max(new["alive_log_probs"], axis=1)
    no_alive = tf.math.is_inf(best_alive)  # all -inf: every hypothesis has finished
    if not beam.early_stop:
        return no_alive
    max_lp = tf.maximum(length_penalty(steps + 1, beam.alpha), length_penalty(limits, beam.alpha))
    # The finished list is sorted best first: its n_best-th entry is the one to beat.
    nth_finished = new["finished_scores"][:, beam.n_best - 1]
    settled = tf.reduce_all(new["finished_flags"][:, :beam.n_best], axis=1)
    return no_alive | (settled & (best_alive / max_lp <= nth_finished))


def greedy_search(
    symbols_to_logits_fn,
    initial_ids,
    initial_cache,
    max_decode_length,
    eos_id,
    *,
    max_lengths=None,
    pad_id=0,
    alpha=0.0,
    shared_cache=None,
    drop_finished=None,
):
    """Greedy decoding: the most probable next token at every step, same step-function contract.

    Returns a ``DecodeResult`` with ``ids`` ``[batch, max_decode_length]``, ``scores`` ``[batch]``
    (``log P(Y) / lp(Y)``; with the default ``alpha = 0`` the plain log-probability) and
    ``lengths`` ``[batch]``. Stops once every example has finished. ``shared_cache`` and
    ``drop_finished``: see the module docstring; without dropping, finished rows keep being fed
    to the step function with ``pad_id`` as their token.
    """

    def most_probable(log_probs, i, examples, batch):
        # top_k rather than argmax: the same tie-breaking (lowest id) as beam search.
        return tf.math.top_k(log_probs, k=1)[1][:, 0]

    return _token_by_token_search(
        symbols_to_logits_fn, most_probable, "greedy_search", initial_ids, initial_cache,
        max_decode_length, eos_id, max_lengths=max_lengths, pad_id=pad_id, alpha=alpha,
        shared_cache=shared_cache, drop_finished=drop_finished)


def sample_search(
    symbols_to_logits_fn,
    initial_ids,
    initial_cache,
    max_decode_length,
    eos_id,
    *,
    seed,
    top_k=0,
    top_p=1.0,
    temperature=1.0,
    max_lengths=None,
    pad_id=0,
    alpha=0.0,
    shared_cache=None,
    drop_finished=None,
):
    """Random sampling: at every step a token drawn from the model's next-token distribution,
    reshaped by ``temperature``, ``top_k`` and ``top_p``; greedy's contract otherwise (one
    hypothesis per example, the same lengths, limits, EOS, padding and ``drop_finished``).

    The distribution drawn from, in this order (as in Hugging Face's and fairseq's sampling):
    the log-probabilities divided by ``temperature`` (> 0; below 1 sharpens, above 1 flattens);
    with ``top_k`` > 0 only the ``top_k`` most probable tokens (ties: the lowest ids, as greedy);
    with ``top_p`` < 1 only the smallest set of the most probable of those whose probability,
    renormalised, reaches ``top_p`` (the most probable token always stays); renormalised. So
    ``top_k=1`` is greedy search.

    ``seed``: a Python int or int32 scalar tensor. The draws are stateless (Gumbel-max over
    ``tf.random.stateless_uniform`` bits with the seed and the step folded in, one row of noise
    per example of the batch), so the same seed and input give the same output eagerly, in
    ``tf.function`` and under XLA, with or without finished examples leaving the batch; an example's
    draws depend on its row in the batch.

    ``scores``: ``log P(Y) / lp(Y)`` as greedy's, where ``P`` is the model's own distribution
    (before temperature, top-k and top-p): how probable the model finds the sampled output, not how
    probable the sampling was to draw it.
    """
    top_k = _check_static_int("top_k", top_k, minimum=0)
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
        raise ValueError(f"sample_search: top_p must be a number in (0, 1], got {top_p!r}.")
    if (isinstance(temperature, bool) or not isinstance(temperature, (int, float))
            or not 0 < temperature < float("inf")):
        raise ValueError(f"sample_search: temperature must be a finite number > 0, got "
                         f"{temperature!r}.")
    seed = tf.cast(seed, tf.int32)
    if seed.shape.rank != 0:
        raise ValueError(f"sample_search: seed must be a scalar, got shape {seed.shape}.")

    def draw(log_probs, i, examples, batch):
        logits = log_probs if temperature == 1 else log_probs / temperature
        candidates = None  # the token ids of the kept columns, when not the whole vocabulary
        if top_k or top_p < 1:
            vocab = tf.shape(logits)[1]
            logits, candidates = tf.math.top_k(
                logits, k=tf.minimum(top_k, vocab) if top_k else vocab)  # best first
            if top_p < 1:
                before = tf.cumsum(tf.nn.softmax(logits), axis=1, exclusive=True)
                logits = tf.where(before < top_p, logits, _NEG_INF)
        noise = tf.gather(_gumbel_noise([batch, tf.shape(logits)[1]], tf.stack([seed, i])),
                          examples)
        position = tf.argmax(logits + noise, axis=1, output_type=tf.int32)
        return position if candidates is None else tf.gather(candidates, position, batch_dims=1)

    return _token_by_token_search(
        symbols_to_logits_fn, draw, "sample_search", initial_ids, initial_cache,
        max_decode_length, eos_id, max_lengths=max_lengths, pad_id=pad_id, alpha=alpha,
        shared_cache=shared_cache, drop_finished=drop_finished)


def _gumbel_noise(shape, seed):
    """Standard Gumbel noise: ``argmax(logits + noise)`` is a draw from ``softmax(logits)``.

    Built from random bits, not ``stateless_uniform``'s floats: XLA draws the same bits but turns
    them into different floats, and the samples must not depend on the compiler."""
    bits = tf.random.stateless_uniform(shape, seed=seed, minval=None, maxval=None,
                                       dtype=tf.int32, alg="philox")
    # 23 bits, offset by half a step: exact in float32 and strictly inside (0, 1).
    mantissa = tf.bitwise.right_shift(tf.bitcast(bits, tf.uint32), tf.constant(9, tf.uint32))
    uniform = (tf.cast(mantissa, tf.float32) + 0.5) * (2.0 ** -23)
    return -tf.math.log(-tf.math.log(uniform))


def _token_by_token_search(symbols_to_logits_fn, choose, caller, initial_ids, initial_cache,
                           max_decode_length, eos_id, *, max_lengths, pad_id, alpha, shared_cache,
                           drop_finished):
    """The loop of the searches that keep one hypothesis per example (greedy, sampling): each
    step appends ``choose(log_probs [rows, vocab], i, examples [rows], batch)``'s token (int32
    [rows]) to each example still running; ``examples`` are the rows' positions in the whole
    batch of ``batch`` examples (rows leave it when examples finish). The score sums the log-probs
    of the chosen tokens."""
    length = _check_static_int("max_decode_length", max_decode_length, minimum=1)
    initial_ids, batch, limits = _prepare(initial_ids, initial_cache, max_lengths, length, shared_cache)
    state = dict(
        seq=_start_buffer(initial_ids, length, pad_id),
        log_probs=tf.zeros([batch], tf.float32),
        done=tf.zeros([batch], tf.bool),
        lengths=tf.zeros([batch], tf.int32),
        example=tf.range(batch),
    )

    def advance(i, old, cache, shared, limits):
        log_probs, new_cache = _step(symbols_to_logits_fn, old["seq"], i, cache, shared, caller)
        chosen = choose(log_probs, i, old["example"], batch)
        done = old["done"]
        token = tf.where(done, pad_id, chosen)
        ends = ~done & (tf.equal(token, eos_id) | (i + 1 >= limits))
        token_log_prob = tf.gather(log_probs, chosen, batch_dims=1)
        new = dict(
            seq=_write_column(old["seq"], i + 1, token),
            log_probs=tf.where(done, old["log_probs"], old["log_probs"] + token_log_prob),
            done=done | ends,
            lengths=tf.where(ends, i + 1, old["lengths"]),
            example=old["example"],
        )
        return new, new_cache, None  # one row per example: the cache keeps its order

    state = _search_loop(advance, state, initial_cache, shared_cache, limits, length, drop_finished)
    return DecodeResult(
        ids=state["seq"][:, 1:],
        scores=state["log_probs"] / length_penalty(state["lengths"], alpha),
        lengths=state["lengths"],
        steps=state["i"],
    )


def compiling_with_xla():
    """True while tracing a function that XLA compiles (``tf.function(jit_compile=True)``): the
    caller must then give the search a cache of fixed shapes."""
    # TensorFlow has no public test for this; Keras 2 and TF's own layers use the same one.
    from tensorflow.python.ops import control_flow_util

    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


# --- shared pieces -------------------------------------------------------------------------------


def _search_loop(advance, per_example, cache, shared_cache, limits, length, drop_finished):
    """The loop every search shares: at most ``length`` steps, until every example is done.

    ``per_example`` is the search's state, a dict of tensors with the batch as leading dimension
    (``"done"``, bool, among them). Each step calls ``advance(i, old, cache, shared_cache,
    limits) -> (new, new_cache, rows)`` with the state, the limits and the shared cache of the
    examples still searching, and the cache rows of their hypotheses; ``rows`` [examples, ...]
    names the rows of ``new_cache`` each example's hypotheses continue from (None: every row
    continues in place). With ``drop_finished``, examples that are done leave the batch: their
    state is written back into the whole batch's, their cache rows are dropped. Returns the final
    state, with ``"i"`` the number of steps run."""
    drop = _resolve_drop_finished(drop_finished)
    state = dict(per_example, i=tf.constant(0, tf.int32), cache=cache,
                 shared=shared_cache if shared_cache is not None else {})
    if drop:
        state["active"] = tf.range(tf.shape(per_example["done"])[0])  # in batch order

    def cond(s):
        return (s["i"] < length) & ~tf.reduce_all(s["done"])

    def body(s):
        active = s.get("active")
        with tf.name_scope("take"):
            old = {name: _take(s[name], active) for name in per_example}
        new, new_cache, rows = advance(s["i"], old, s["cache"],
                                       s["shared"] if shared_cache is not None else None,
                                       _take(limits, active))
        result = dict(i=s["i"] + 1, shared=s["shared"])
        if active is None:
            result.update(new)
        else:
            with tf.name_scope("drop_finished"):
                keep = _still_searching(new["done"])
                result.update({name: _put(s[name], value, active) for name, value in new.items()},
                              active=tf.gather(active, keep),
                              shared=_keep_rows(s["shared"], keep, tf.shape(new["done"])[0]))
                rows = keep if rows is None else tf.gather(rows, keep)
        with tf.name_scope("reorder_cache"):
            result["cache"] = new_cache if rows is None else tf.nest.map_structure(
                lambda t: tf.gather(t, tf.reshape(rows, [-1])), new_cache)
        return result

    return _while(cond, body, state, length, relaxed=_relaxed_shapes(drop))


def _while(cond, body, state, length, relaxed):
    """``tf.while_loop`` over one dict of loop variables, at most ``length`` iterations.

    Each new loop variable gets its old static shape back: ops such as ``tf.gather`` with
    ``batch_dims`` lose a known batch size (e.g. 1 in a traced function), which ``tf.while_loop``
    would reject as a shape change. ``relaxed`` maps the keys whose leaves may change shape to the
    function giving a leaf's shape invariant."""
    invariants = {key: tf.nest.map_structure(relaxed.get(key, _static), value)
                  for key, value in state.items()}

    def shape_stable_body(s):
        new = body(s)
        return [{key: tf.nest.map_structure(_set_shape, new[key], invariants[key]) for key in new}]

    return tf.while_loop(
        cond, shape_stable_body, [state], shape_invariants=[invariants], maximum_iterations=length,
    )[0]


def _static(tensor):
    return tensor.shape


def _growable(tensor):
    """Rows fixed, the other dimensions free: a cache that grows along some axis."""
    return tf.TensorShape([tensor.shape[0]] + [None] * (tensor.shape.rank - 1))


def _rank_only(tensor):
    return tf.TensorShape([None] * tensor.shape.rank)


def _relaxed_shapes(drop):
    """The loop variables whose shapes may change: the cache (it may grow), and with dropped
    examples the row counts of the cache, the shared cache and the active examples."""
    if not drop:
        return {"cache": _growable}
    return {"cache": _rank_only, "shared": _rank_only, "active": _rank_only}


def _resolve_drop_finished(drop_finished):
    xla = compiling_with_xla()
    if drop_finished is None:
        return not xla
    if drop_finished and xla:
        raise ValueError("decoding: drop_finished=True changes shapes, which XLA cannot compile; "
                         "leave it None (the default) or False under jit_compile.")
    return bool(drop_finished)


def _take(tensor, active):
    """The rows of the examples still searching (all rows when none are dropped)."""
    return tensor if active is None else tf.gather(tensor, active)


def _put(full, rows, active):
    """Writes the rows of the examples still searching back into the whole batch's tensor."""
    return tf.tensor_scatter_nd_update(full, active[:, None], rows)


def _still_searching(done):
    """Positions (int32 [n]) of the examples not done, in order."""
    return tf.cast(tf.where(~done)[:, 0], tf.int32)


def _keep_rows(structure, keep, count):
    """The rows ``keep`` of every leaf; the leaves themselves (no copy) while all ``count`` rows
    stay."""
    if not tf.nest.flatten(structure):
        return structure
    return tf.cond(tf.size(keep) < count,
                   lambda: tf.nest.map_structure(lambda t: tf.gather(t, keep), structure),
                   lambda: tf.nest.map_structure(tf.identity, structure))


def _check_static_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(
            f"decoding: {name} must be a Python int >= {minimum} (it fixes static shapes), "
            f"got {value!r}."
        )
    return value


def _prepare(initial_ids, initial_cache, max_lengths, length, shared_cache=None):
    """Checks the inputs; returns int32 start ids, the (dynamic) batch size, per-example limits."""
    initial_ids = tf.convert_to_tensor(initial_ids)
    if initial_ids.shape.rank != 1 or not initial_ids.dtype.is_integer:
        raise ValueError(
            "decoding: initial_ids must be an integer vector [batch] of start ids, got "
            f"{initial_ids.dtype.name} with shape {initial_ids.shape}."
        )
    initial_ids = tf.cast(initial_ids, tf.int32)
    static_batch = initial_ids.shape[0]
    leaves = list(_leaves_with_paths(initial_cache))
    if shared_cache is not None:
        leaves += _leaves_with_paths(shared_cache, "shared_cache")
    for path, leaf in leaves:
        if not hasattr(leaf, "shape") or leaf.shape.rank in (None, 0):
            raise ValueError(
                f"decoding: cache entry {path} must be a tensor with a leading batch dimension, "
                f"got {leaf!r:.80}."
            )
        if static_batch is not None and leaf.shape[0] not in (None, static_batch):
            raise ValueError(
                f"decoding: cache entry {path} has leading dimension {leaf.shape[0]} but the "
                f"batch (initial_ids) has {static_batch} examples."
            )
    batch = tf.shape(initial_ids)[0]
    if max_lengths is None:
        limits = tf.fill([batch], length)
    else:
        limits = tf.convert_to_tensor(max_lengths)
        if limits.shape.rank != 1 or not limits.dtype.is_integer:
            raise ValueError(
                "decoding: max_lengths must be an integer vector [batch], got "
                f"{limits.dtype.name} with shape {limits.shape}."
            )
        if static_batch is not None and limits.shape[0] not in (None, static_batch):
            raise ValueError(
                f"decoding: max_lengths has {limits.shape[0]} entries but the batch has "
                f"{static_batch} examples."
            )
        limits = tf.clip_by_value(tf.cast(limits, tf.int32), 1, length)
    return initial_ids, batch, limits


def _leaves_with_paths(structure, path="cache"):
    if isinstance(structure, dict):
        for key in sorted(structure):
            yield from _leaves_with_paths(structure[key], f"{path}[{key!r}]")
    elif isinstance(structure, (list, tuple)):
        for index, item in enumerate(structure):
            yield from _leaves_with_paths(item, f"{path}[{index}]")
    else:
        yield path, structure


def _start_buffer(initial_ids, length, pad_id):
    """The ids buffer ``[batch, length + 1]``: start ids in column 0, ``pad_id`` elsewhere."""
    batch = tf.shape(initial_ids)[0]
    pads = tf.fill([batch, length], tf.constant(pad_id, tf.int32))
    return tf.concat([initial_ids[:, None], pads], axis=1)


def _write_column(seq, column, tokens):
    """``seq[..., column] = tokens`` with a static-shape select (no scatter, XLA friendly)."""
    at_column = tf.equal(tf.range(tf.shape(seq)[-1]), column)
    return tf.where(at_column, tokens[..., None], seq)


def _repeat_rows(tensor, times):
    """[batch, ...] -> [batch * times, ...], each row repeated ``times`` times in a row."""
    tensor = tf.convert_to_tensor(tensor)
    tiled = tf.repeat(tensor[:, None], times, axis=1)
    merged = tf.concat([[-1], tf.shape(tensor)[1:]], axis=0)
    result = tf.reshape(tiled, merged)
    if tensor.shape[0] is not None:
        result.set_shape([tensor.shape[0] * times] + tensor.shape[1:].as_list())
    return result


def _set_shape(new, shape):
    """Keeps loop variables shape-stable even if the step function loses static shape info."""
    if not new.shape.is_compatible_with(shape):
        raise ValueError(
            f"decoding: the step function changed a cache tensor's shape from {shape} to "
            f"{new.shape}; cache tensors must keep their rank and leading (rows) dimension."
        )
    if new.shape.rank is not None and new.shape.as_list() == shape.as_list():
        return new
    new = tf.identity(new)  # set_shape on a copy: ``new`` may be a tensor the caller holds
    new.set_shape(shape)
    return new


def _step(symbols_to_logits_fn, ids, i, cache, shared_cache, caller):
    with tf.name_scope("model_step"):
        if shared_cache is None:
            logits, new_cache = symbols_to_logits_fn(ids, i, cache)
        else:
            logits, new_cache = symbols_to_logits_fn(ids, i, cache, shared_cache)
    try:
        tf.nest.assert_same_structure(cache, new_cache)
    except (ValueError, TypeError) as error:
        raise ValueError(
            f"{caller}: symbols_to_logits_fn must return (logits, cache) with the cache in the "
            f"structure it was given: {error}"
        ) from None
    logits = tf.convert_to_tensor(logits)
    if logits.shape.rank != 2:
        raise ValueError(
            f"{caller}: symbols_to_logits_fn must return logits [rows, vocab], got shape "
            f"{logits.shape}."
        )
    # Sum log-probabilities in float32 even if the model computes in float16/bfloat16.
    with tf.name_scope("log_softmax"):
        return tf.nn.log_softmax(tf.cast(logits, tf.float32)), new_cache


def _vocab_size(log_probs):
    vocab = log_probs.shape[-1]
    if vocab is None:
        return tf.shape(log_probs)[-1]
    if vocab < 2:
        raise ValueError(f"beam_search: the vocabulary needs at least 2 tokens, got {vocab}.")
    return vocab
