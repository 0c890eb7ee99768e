"""Translator: cached vs uncached search, XLA vs not, and bad input answered without harming the rest."""

import random
import re
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer import decoding, inference
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


SIGNATURE_FUNCTIONS = ["translate_text", "translate_text_nbest", "score_text", "translate_ids",
                       "score_ids"]


def count_traces(monkeypatch, ignored=None):
    """{signature's Python function: how many times a Translator other than ``ignored`` traced
    it} (a call inside another one's trace, as translate_text's of translate_ids, is not a trace;
    a tf.function's trace inside another's, in a graph of its own, is): the counts
    ``tests/test_export.py`` and ``tests/test_export_best.py`` hold exports to, and
    ``tests/test_dev_bleu.py`` the dev evaluations."""
    traces, graphs = {name: 0 for name in SIGNATURE_FUNCTIONS}, []

    def counted(name, method):
        def trace(self, *args, **kwargs):
            graph = tf.compat.v1.get_default_graph()
            traces[name] += graph not in graphs and self is not ignored
            graphs.append(graph)
            try:
                return method(self, *args, **kwargs)
            finally:
                graphs.pop()
        return trace

    for name in SIGNATURE_FUNCTIONS:
        monkeypatch.setattr(Translator, name, counted(name, getattr(Translator, name)))
    return traces


@pytest.fixture(scope="module")
def translator():
    return small_translator()


def test_cached_search_equals_rerunning_the_whole_prefix(translator):
    source_ids, _, _ = translator.source_ids(tf.constant(SENTENCES))
    cached = translator.translate_ids(source_ids)
    model, length = translator.model, translator.max_decode_length
    assert translator.decoding.beam_size == 3 and translator.decoding.extra_length == 6

    never = np.zeros(model.config.vocab_size, "float32")
    never[[0, 2]] = -1e9  # pad and start are never predicted

    def uncached_step(ids, i, cache):
        # the whole prefix through the teacher-forced model; the causal mask hides columns > i
        return model((cache["source"], ids[:, :length]))[:, i] + never, cache

    start = tf.fill([len(SENTENCES)], 2)
    source_lengths = tf.reduce_sum(tf.cast(source_ids != 0, tf.int32), 1)
    # The search assembled by hand, independently of Translator.search, as the reference.
    uncached = decoding.beam_search(uncached_step, start, {"source": source_ids}, beam_size=3, alpha=0.6,
                                    max_decode_length=length, eos_id=3, max_lengths=source_lengths + 6)
    np.testing.assert_array_equal(cached["ids"], uncached.ids)
    np.testing.assert_allclose(cached["scores"], uncached.scores, rtol=1e-4)
    # The door's own slow reference (benchmarks.decoding measures the cache against it).
    door_uncached = translator.search(source_ids, incremental=False)
    np.testing.assert_array_equal(door_uncached.ids, uncached.ids)
    np.testing.assert_allclose(door_uncached.scores, uncached.scores, rtol=1e-4)


def test_greedy_banned_ids_and_given_limits_through_the_door(translator):
    source_ids, _, _ = translator.source_ids(tf.constant(SENTENCES))
    batch = len(SENTENCES)
    greedy = translator.search(source_ids, greedy=True)
    beam_of_one = Translator(translator.model, translator.tokenizer,
                             DecodingConfig(beam_size=1, alpha=0.0, extra_length=6)).search(source_ids)
    # Beam size 1 with alpha 0 is greedy (decoding's contract), so the door's two searches agree.
    np.testing.assert_array_equal(greedy.ids, beam_of_one.ids[:, 0])
    # Every output exactly 5 tokens: end of sentence banned, a limit of 5 for each sentence.
    forced = translator.search(source_ids, greedy=True, max_lengths=tf.fill([batch], 5),
                               max_decode_length=5, banned_ids=[translator.tokenizer.end_id])
    assert forced.ids.shape == (batch, 5)
    np.testing.assert_array_equal(forced.lengths, [5] * batch)
    assert not np.isin(forced.ids.numpy(), [0, 2, translator.tokenizer.end_id]).any()
    compiled = tf.function(lambda ids: translator.search(ids, greedy=True).ids, jit_compile=True)
    np.testing.assert_array_equal(compiled(source_ids), greedy.ids)


def test_the_banned_ids_reach_the_projection_as_its_bias(translator):
    """The ids never produced are a bias on the output projection's product inside the search's
    loop, a BiasAdd of the MatMul itself: the pattern grappler's remapper fuses into one kernel. An
    add, or any op between the two, would cost a pass over [rows, vocabulary] at every step."""
    search = tf.function(lambda ids: translator.search(ids).ids,
                         input_signature=[tf.TensorSpec([None, None], tf.int32)])
    library = search.get_concrete_function().graph.as_graph_def().library
    bodies = [f for f in library.function if "while_body" in f.signature.name]
    assert bodies
    for body in bodies:
        ops = {node.name: node.op for node in body.node_def}
        biased = [node for node in body.node_def if "output_projection" in node.name
                  and node.op in ("BiasAdd", "AddV2", "Add")]
        assert [node.op for node in biased] == ["BiasAdd"]
        assert ops[biased[0].input[0].split(":")[0]] == "MatMul"


def test_traced_search_with_a_static_batch_of_one(translator):
    source_ids, _, _ = translator.source_ids(tf.constant(SENTENCES[:1]))
    traced = tf.function(translator.translate_ids)(source_ids)  # batch size 1 known when tracing
    np.testing.assert_array_equal(traced["ids"], translator.translate_ids(source_ids)["ids"])


def test_the_translators_functions_are_traced_without_autograph(translator, autograph_conversions):
    """What programs and exports trace (text, n-best, score), as Keras's ExportArchive traces
    its endpoints: autograph's rewrite of the whole search would only slow each start."""
    texts = tf.constant(SENTENCES[:2])
    translations = translator.text_function()(texts)["translations"]
    nbest = translator.nbest_function()(texts)["translations"]
    translator.score_function()(texts, translations)
    np.testing.assert_array_equal(nbest[:, 0], translations)
    assert autograph_conversions == []
    tf.function(translator.translate_text)(texts)  # the recorder sees autograph at work
    assert autograph_conversions[0] == "keras_transformer.inference.Translator.translate_text"


def test_the_text_nbest_and_score_functions_call_the_ids_ones_not_a_copy_of_them():
    """translate_nbest's search is the ids signature's function and score's forward pass is
    score_ids's, called, not traced again inside them: each is traced once, and an export holds
    (and loads) each once. Their results are those of the ids functions themselves."""
    translator = small_translator(beam_size=2)
    texts, targets = tf.constant(SENTENCES[:2]), tf.constant(["das Haus", ""])

    def called(function):
        graph = function.get_concrete_function().graph
        return {op.get_attr("f").name for op in graph.get_operations()
                if op.type in ("PartitionedCall", "StatefulPartitionedCall")}

    ids_name = translator.ids_function().get_concrete_function().name.decode()
    score_ids_name = translator.score_ids_function().get_concrete_function().name.decode()
    assert ids_name in called(translator.nbest_function())
    assert score_ids_name in called(translator.score_function())
    assert ids_name not in called(translator.text_function())  # its own search: best only

    source_ids, _, _ = translator.source_ids(texts)
    target_ids, _, _ = translator.source_ids(targets)
    nbest = translator.ids_function()(source_ids)
    np.testing.assert_array_equal(translator.nbest_function()(texts)["scores"], nbest["scores"])
    scores = translator.score_function()(texts, targets)
    direct = translator.score_ids(source_ids, target_ids)
    np.testing.assert_allclose(scores["log_prob"], direct["log_prob"], rtol=1e-6)
    np.testing.assert_array_equal(scores["tokens"], direct["tokens"])


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


def test_one_string_where_a_batch_is_expected_is_refused_not_read_per_character(translator):
    # A str is a sequence of characters: read as a batch, each character would be a sentence.
    score = translator.score_function()
    for call, message in (
            (lambda: translator.translate_text("Yes."), r"texts: a batch of strings, shape \[batch\], "
                                                       r"got shape \(\)"),
            (lambda: translator.translate_text([["Yes.", "No."]]), r"got shape \(1, 2\)"),
            (lambda: translator.score_text("Yes.", ["Ja."]), r"got shape \(\)"),
            (lambda: translate_in_batches(translator.text_function(), "Yes."),
             r"sentences: a list of strings, not one string"),
            (lambda: inference.score_in_batches(score, "Yes", "Ja."),  # equally long: no count
             r"sources: a list of strings, not one string"),
            (lambda: inference.align_in_batches(translator.align_function(), ["Yes."], "Ja."),
             r"targets: a list of strings, not one string")):
        with pytest.raises(ValueError, match=message):
            call()
    with pytest.raises(ValueError, match="texts: an iterable of sentences, not one string"):
        SubwordTokenizer.learn("Yes. No.", 264)
    # a batch of one is answered as before
    assert translate_in_batches(translator.text_function(), ["Yes."])[0]["translation"] == \
        np.asarray(translator.translate_text(tf.constant(["Yes."]))["translations"])[0].decode()


def test_settings_of_the_wrong_kind_are_named_not_failed_on_deep_inside(translator):
    for call, error, message in (
            (lambda: Translator(translator.model, translator.tokenizer.path), TypeError,
             r"tokenizer: a SubwordTokenizer \(SubwordTokenizer.load\(path\)\)"),
            (lambda: Translator(translator.model, translator.tokenizer, {"beam_size": 4}),
             TypeError, "decoding_config: a DecodingConfig"),
            (lambda: translator.translate_text(tf.constant(["Yes."]), sampling=True), TypeError,
             "sampling: a SamplingConfig"),
            (lambda: translator.search(translator.source_ids(tf.constant(["Yes."]))[0],
                                       banned_ids=[320]), ValueError,
             r"banned_ids: ids of the target vocabulary, 0 to 319, got \[320\]")):
        with pytest.raises(error, match=message):
            call()


def test_mismatched_tokenizer_is_refused(translator):
    model = kt.Transformer(kt.TransformerConfig.from_preset("tiny", vocab_size=400))
    with pytest.raises(ValueError, match="the tokenizer has 320 ids but the model's vocabulary has 400"):
        Translator(model, translator.tokenizer)


def test_the_decoding_pages_example_runs_as_written(monkeypatch):
    """docs/decoding.md's example of the door, executed as written on the shipped model."""
    import os
    import re

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "docs", "decoding.md"), encoding="utf-8") as stream:
        page = stream.read()
    example = next(block for block in re.findall(r"```python\n(.*?)```", page, re.S)
                   if "translator.search(" in block)
    monkeypatch.chdir(root)
    names = {}
    exec(example, names)  # noqa: S102 (the page's own code)
    assert names["nbest"].ids.shape[:2] == (1, 4) and names["nbest"].scores.shape == (1, 4)
    assert names["best"].ids.shape[0] == 1 and len(names["best"].scores.shape) == 1
    np.testing.assert_array_equal(names["exactly_5"].lengths, [5])
    best = names["tokenizer"].detokenize(names["nbest"].ids[:, 0])
    assert np.asarray(best)[0].decode() == "Öffnet den Dialog Anpassen."  # as the README says


def numpy_log_prob(model, source, target_out):
    """The reference score of one pair, alone (no padding): the model's teacher-forced logits, a
    log-softmax in NumPy gathered at the target ids and summed."""
    target_in = [2] + list(target_out[:-1])
    logits = np.asarray(model((np.array([source]), np.array([target_in])), training=False), "float64")[0]
    log_softmax = logits - logits.max(-1, keepdims=True)
    log_softmax -= np.log(np.exp(log_softmax).sum(-1, keepdims=True))
    return log_softmax[np.arange(len(target_out)), target_out].sum()


def test_score_is_the_teacher_forced_log_probability_summed_in_numpy(translator):
    tokenizer, limit = translator.tokenizer, translator.max_source_length
    long_target = "Das ist Satz 7, " * 20
    pairs = [(SENTENCES[0], "Das ist Satz 5."), (SENTENCES[1], ""), ("", "Das ist Satz 12."),
             (SENTENCES[2], long_target), ("the cat " * 40, "Die Katze.")]
    score = translator.score_function()
    out = {k: np.asarray(v) for k, v in score(tf.constant([s for s, _ in pairs]),
                                                tf.constant([t for _, t in pairs])).items()}
    for row, (source, target) in enumerate(pairs):
        source_ids = list(np.asarray(tokenizer.tokenize(tf.constant([source]))[0]))[:limit - 1] + [3]
        pieces = list(np.asarray(tokenizer.tokenize(tf.constant([target]))[0]))
        # A target beyond max_length: its first max_length - 1 subwords, without the EOS it lacks.
        target_ids = pieces + [3] if len(pieces) < limit else pieces[:limit - 1]
        expected = numpy_log_prob(translator.model, source_ids, target_ids)
        assert out["log_prob"][row] == pytest.approx(expected, abs=1e-4), (source, target)
        assert out["tokens"][row] == len(target_ids)
        assert out["nll_per_token"][row] == pytest.approx(-expected / len(target_ids), abs=1e-4)
        assert out["truncated"][row] == (row >= 3)
    assert out["log_prob"].max() < 0


def test_pairs_scored_in_batches_come_back_in_input_order(translator):
    sources = SENTENCES + ["Yes.", ""]
    targets = ["Das ist Satz 1.", "", "Das ist Satz 22 und Satz 3.", "Ja.", "Nein."]
    score = translator.score_function()
    alone = [float(score(tf.constant([s]), tf.constant([t]))["log_prob"][0])
             for s, t in zip(sources, targets)]
    results = inference.score_in_batches(score, sources, targets, batch_size=2)
    assert [r["log_prob"] for r in results] == pytest.approx(alone, abs=1e-4)
    with pytest.raises(ValueError, match="5 sources but 4 targets"):
        inference.score_in_batches(score, sources, targets[:4])


def alignment(attention, source, source_spans, target, target_spans):
    """``word_alignment`` and ``pharaoh`` of one pair (NumPy rows; texts as str) -> its pairs."""
    from keras_transformer.inference import pharaoh, word_alignment

    words = word_alignment(tf.constant([attention], tf.float32), tf.constant([source]),
                           tf.constant([source_spans], tf.int64), tf.constant([target]),
                           tf.constant([target_spans], tf.int64))
    pairs = [(int(s), t) for t, s in enumerate(words[0].numpy()) if s >= 0]
    assert pharaoh(words).numpy()[0].decode() == " ".join(f"{s}-{t}" for s, t in pairs)
    return pairs


def reference_alignment(attention, source, source_spans, target, target_spans):
    """The rule of ``word_alignment`` in plain Python: words are ``str.split()``'s (their byte
    spans by ``re``'s ``\\S+``), a subword is the word holding its last byte (or the next word's),
    a target word takes the source word whose subwords its subwords attend to most in sum."""
    def words_of(text, spans):
        ends = np.cumsum([0] + [len(c.encode()) for c in text])
        word_ends = [ends[m.end()] for m in re.finditer(r"\S+", text)]
        return [next((w for w, end in enumerate(word_ends) if max(e - 1, s) < end), -1)
                if s >= 0 else -1 for s, e in spans]

    source_words, target_words = words_of(source, source_spans), words_of(target, target_spans)
    if max(source_words, default=-1) < 0:
        return []
    pairs = []
    for word in sorted(set(target_words) - {-1}):
        totals = [sum(attention[t][s] for t, tw in enumerate(target_words) if tw == word
                      for s, sw in enumerate(source_words) if sw == source_word)
                  for source_word in range(len(source.split()))]
        pairs.append((totals.index(max(totals)), word))
    return pairs


def test_a_target_word_is_aligned_to_the_source_word_its_subwords_attend_to_most():
    """``word_alignment``: a source word's attention is its subwords' sum, a target word's the
    mean of its subwords'; EOS and padding are no words (their attention is left out); words are
    the text's whitespace-separated ones, found by the subwords' byte spans."""
    # "Hello world." as SentencePiece cuts it: ▁Hel lo ▁world . (▁world from the space on), EOS,
    # padding; "Hallo Welt": ▁Hallo ▁We lt, EOS, padding.
    source, source_spans = "Hello world.", [[0, 3], [3, 5], [5, 11], [11, 12], [-1, -1], [-1, -1]]
    target, target_spans = "Hallo Welt", [[0, 5], [5, 8], [8, 10], [-1, -1], [-1, -1]]
    attention = np.full([5, 6], 0.9)  # EOS and padding: left out, however large
    attention[:3, :4] = [[0.3, 0.3, 0.35, 0.05],  # one subword's maximum is in "world",
                         [0.3, 0.3, 0.4, 0.0],  # the sums are "Hello"'s
                         [0.0, 0.0, 0.5, 0.5]]  # "Welt": "Hello" for "We" alone, "world" on average
    assert alignment(attention, source, source_spans, target, target_spans) == [(0, 0), (1, 1)]
    assert alignment(attention, source, source_spans, "", [[-1, -1]] * 5) == []
    # A word the vocabulary has no subword for (U+FFFD, dropped) is skipped, not renumbered: the
    # indices stay those of str.split(); a subword of the space before a word (▁ alone, an empty
    # span) belongs to that word.
    target = "Hallo \ufffd Welt"  # ▁H all o ▁W elt; ▁W spans " \ufffd W"
    target_spans = [[0, 1], [1, 4], [4, 5], [5, 11], [11, 14], [-1, -1]]
    source = "\u00e4rger x"  # ▁ \u00e4r ger ▁x
    source_spans = [[0, 0], [0, 3], [3, 6], [6, 8], [-1, -1]]
    attention = np.tile([0.0, 0.0, 0.0, 1.0, 0.0], (6, 1))  # every target subword on ▁x
    assert alignment(attention, source, source_spans, target, target_spans) == [(1, 0), (1, 2)]
    attention = np.tile([1.0, 0.0, 0.0, 0.0, 0.0], (6, 1))  # on the ▁ of "\u00e4rger"
    assert alignment(attention, source, source_spans, target, target_spans) == [(0, 0), (0, 2)]


def test_alignment_words_are_str_splits_words_whatever_the_whitespace():
    """The graph's words against Python's: every character ``str.isspace`` takes for whitespace
    splits words, and pairs of random texts (any whitespace, multibyte characters, subwords cut
    anywhere, even inside a character, empty texts) align as ``reference_alignment`` says."""
    from keras_transformer.inference import WHITESPACE, word_alignment

    assert list(WHITESPACE) == [c for c in range(sys.maxunicode + 1) if chr(c).isspace()]
    rng = random.Random(0)
    characters = list("abXä€漢\ufffd") * 4 + [chr(c) for c in WHITESPACE]

    def pair_side(batch):
        texts = ["".join(rng.choice(characters) for _ in range(rng.randint(0, 12)))
                 for _ in range(batch)]
        spans = []
        for text in texts:
            size, cuts = len(text.encode()), [0]
            while cuts[-1] < size and len(cuts) < 9:
                cuts.append(min(size, cuts[-1] + rng.choice([0, 1, 2, 3])))
            spans.append(list(zip(cuts[:-1], cuts[1:])))
        width = max(map(len, spans)) + 2  # EOS and padding after each
        return texts, np.array([row + [(-1, -1)] * (width - len(row)) for row in spans])

    for _ in range(60):
        batch = rng.randint(1, 4)
        (sources, source_spans), (targets, target_spans) = pair_side(batch), pair_side(batch)
        attention = np.array(rng.choices([0.0, 0.5, 1.0, rng.random()],  # ties too
                                         k=batch * target_spans.shape[1] * source_spans.shape[1]),
                             np.float32).reshape(batch, target_spans.shape[1], -1)
        words = word_alignment(attention, tf.constant(sources), source_spans, tf.constant(targets),
                               target_spans).numpy()
        for row in range(batch):
            assert [(s, t) for t, s in enumerate(words[row]) if s >= 0] == reference_alignment(
                attention[row], sources[row], source_spans[row], targets[row], target_spans[row])


def test_nbest_lines_are_read_as_translate_writes_them():
    assert inference.parse_nbest_line(b"12\t-1.5000\tDas\tist gut.") == (12, -1.5, b"Das\tist gut.")
    assert inference.parse_nbest_line(b"0\t-inf\t") == (0, float("-inf"), b"")
    for line, problem in [(b"0\t-1.0", "1 tab"), (b"x\t-1.0\tDas", "INDEX 'x' is not a line number"),
                          (b"0\tbad\tDas", "SCORE 'bad' is not a number")]:
        with pytest.raises(ValueError, match=problem):
            inference.parse_nbest_line(line)
