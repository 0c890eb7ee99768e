"""Translation with a trained model: strings in, strings out, all in TensorFlow ops (section 6.1).

``Translator`` joins the three pieces that know nothing of each other: the tokenizer, the model
(``encode`` / ``init_cache`` / ``decode_step``; or several, an ensemble) and the search
(``decoding.beam_search`` / ``greedy_search`` / ``sample_search``, which see the model only through
one step function, made here by ``search_inputs``). ``Translator.search`` is the one door to the search: it makes the decoding
decisions (which tokens are never produced, how long each output may be, whether the cache grows
or is a fixed buffer because XLA compiles the search), and nothing else assembles a search. Its
functions are what the SavedModel exports:

- ``translate_text(texts)``: ``tf.string [batch]`` -> ``{"translations", "scores", "truncated"}``;
- ``translate_ids(source_ids)``: int32 ``[batch, length]`` -> the n-best ``{"ids", "scores", "lengths"}``,
  core TensorFlow ops only (for servers built without the tf-text ops);
- ``translate_text_nbest(texts)``: ``tf.string [batch]`` -> the whole n-best list as text,
  ``{"translations", "scores"}`` each ``[batch, beam]`` and ``"truncated"`` ``[batch]``;
- ``score_text(sources, targets)``: two ``tf.string [batch]`` -> the targets' log-probabilities by
  forced decoding, ``{"log_prob", "tokens", "nll_per_token", "truncated"}``; ``score_ids`` the same
  from ids, core TensorFlow ops only;
- ``align_text(sources, translations)``: two ``tf.string [batch]`` -> their word alignment,
  ``{"alignments", "source_words", "attention"}``, from a decoder layer's attention (the last by
  default) by forced decoding (``cross_attention``, ``word_alignment``, ``pharaoh``).

Each as a ``tf.function`` over its input signature (``text_function()``, ``ids_function()``,
``nbest_function()``, ``score_function()``, ``score_ids_function()``, ``align_function()``) is made
once per translator and traced at its first call; it reads the model's variables when it runs, so it
follows the weights.

Inputs are answered, never crashed on: invalid UTF-8 is replaced by U+FFFD before tokenisation,
characters never seen in training are spelled as bytes by the tokenizer, an empty or whitespace-only
input gets an empty translation with score 0, and a sentence longer than the model's ``max_length``
subwords is cut to that length (its EOS included) and marked ``truncated`` in the output: the model
never saw longer sources in training, so translating the rest would be a guess.
"""

import dataclasses
import functools
import json
import os
from typing import Callable, List, Sequence

import numpy as np
import tensorflow as tf

from keras_transformer import decoding
from keras_transformer.config import as_python_scalars, is_integer, is_number
from keras_transformer.tokenizer import dense_ids
from keras_transformer.weights import exported_version_path

# Sentences (or pairs) per search of the *_in_batches functions and the programs' --batch_size.
# They are sorted by length, so a larger batch adds little padding while each decoder step's fixed
# cost of many small ops is shared by more rows (docs/performance.md, "Batch size"); the memory a
# search keeps grows with it (the cache: batch x beam x layers x length), which bounds it for big
# models on a GPU.
BATCH_SIZE = 64


@dataclasses.dataclass(frozen=True)
class DecodingConfig:
    """Search settings. The paper (section 6.1): beam 4, alpha 0.6, output up to input length + 50;
    its parsing experiment: beam 21, alpha 0.3, input length + 300."""

    beam_size: int = 4
    alpha: float = 0.6
    extra_length: int = 50

    def __post_init__(self):
        as_python_scalars(self)
        if not is_integer(self.beam_size) or self.beam_size < 1:
            raise ValueError(f"beam_size must be a positive integer, got {self.beam_size!r}.")
        if not is_integer(self.extra_length) or self.extra_length < 1:
            raise ValueError(f"extra_length must be a positive integer, got {self.extra_length!r}.")
        if not (is_number(self.alpha) and self.alpha >= 0):
            raise ValueError(f"alpha must be a finite number >= 0, got {self.alpha!r}.")


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    """Random sampling instead of beam search (``decoding.sample_search``): each next token drawn
    from the model's distribution divided by ``temperature``, cut to the ``top_k`` most probable
    tokens (0: no cut) and then to the nucleus of probability ``top_p`` (1: no cut). ``seed``:
    the same seed and input give the same translations."""

    top_k: int = 0
    top_p: float = 1.0
    temperature: float = 1.0
    seed: int = 0

    def __post_init__(self):
        if not is_integer(self.top_k) or self.top_k < 0:
            raise ValueError(f"top_k must be an integer >= 0 (0: every token), got {self.top_k!r}.")
        if not (is_number(self.top_p) and 0 < self.top_p <= 1):
            raise ValueError(f"top_p must be a number in (0, 1] (1: no nucleus cut), got "
                             f"{self.top_p!r}.")
        if not (is_number(self.temperature) and self.temperature > 0):
            raise ValueError(f"temperature must be a finite number > 0, got {self.temperature!r}.")
        if not is_integer(self.seed):
            raise ValueError(f"seed must be an integer, got {self.seed!r}.")


# The input of every text translation function: a batch of sentences, as TF Serving sends them.
TEXT_INPUT_SPEC = tf.TensorSpec([None], tf.string, name="inputs")
# The names an exported SavedModel serves the Translator's functions under (export.saved_model
# writes them, the loaders below read them): translate_text, translate_ids, translate_text_nbest.
TEXT_SIGNATURE, IDS_SIGNATURE, NBEST_SIGNATURE = "serving_default", "translate_ids", "translate_nbest"
# The input of translate_ids: a batch of rows of subword ids, each then EOS.
IDS_INPUT_SPEC = tf.TensorSpec([None, None], tf.int32, name="source_ids")
# The scoring functions, score_text and score_ids: their inputs as TF Serving sends them, their names.
SCORE_INPUT_SPECS = [tf.TensorSpec([None], tf.string, name="sources"),
                     tf.TensorSpec([None], tf.string, name="targets")]
SCORE_IDS_INPUT_SPECS = [IDS_INPUT_SPEC,
                         tf.TensorSpec([None, None], tf.int32, name="target_ids")]
SCORE_SIGNATURE, SCORE_IDS_SIGNATURE = "score", "score_ids"
# align_text's (of the last decoder layer), on the inputs of score_text.
ALIGN_SIGNATURE = "align"


class Translator(tf.Module):
    """A model, its tokenizer and search settings; see the module docstring.

    Args:
      model: a ``Transformer``, or a list of them: an ensemble, decoded together (each step
        averages the members' log-probabilities; ``ensemble_inputs``). Memory and time grow
        linearly with the members. ``model`` is then the first member (its config stands for all).
      tokenizer: the ``SubwordTokenizer`` the model was trained with (the same vocabulary size);
        an ensemble's members must all have been trained with it.
      decoding_config: the search's ``DecodingConfig`` (the paper's beam 4, alpha 0.6, +50).
      name: the ``tf.Module`` name.
    """

    def __init__(self, model, tokenizer, decoding_config=DecodingConfig(), name=None):
        super().__init__(name=name)
        members = list(model) if isinstance(model, (list, tuple)) else [model]
        if not members:
            raise ValueError("an ensemble needs at least one model.")
        if not hasattr(tokenizer, "vocab_size"):  # e.g. its path
            raise TypeError(f"tokenizer: a SubwordTokenizer (SubwordTokenizer.load(path)), got "
                            f"{tokenizer!r}.")
        if not isinstance(decoding_config, DecodingConfig):
            raise TypeError(f"decoding_config: a DecodingConfig (e.g. DecodingConfig(beam_size=4)), "
                            f"got {decoding_config!r}.")
        for index, member in enumerate(members):
            whose = "the model's" if len(members) == 1 else f"ensemble member {index}'s"
            if tokenizer.vocab_size != member.config.output_vocab_size:
                raise ValueError(f"the tokenizer has {tokenizer.vocab_size} ids but {whose} "
                                 f"vocabulary has {member.config.output_vocab_size}: they were not "
                                 "trained together.")
        self.members = members
        self.model = members[0]
        self.tokenizer = tokenizer
        self.decoding = decoding_config
        # The members' positions: none has seen sources longer than its own max_length.
        self.max_source_length = min(member.config.max_length for member in members)
        # The output ids: one static buffer for every batch (XLA-friendly, and one output shape);
        # each sentence stops at its own source length + extra_length.
        self.max_decode_length = self.max_source_length + decoding_config.extra_length
        self._functions = {}  # _function's, by key

    def source_ids(self, texts):
        """tf.string [batch] -> (int32 [batch, length] subwords + EOS padded with 0, truncated bool
        [batch], empty bool [batch])."""
        return self._ids(self.tokenizer.tokenize(cleaned_texts(texts)))

    def _ids(self, pieces):
        """``source_ids``' triple of tokenized texts (ragged subword ids)."""
        limit = self.max_source_length - 1  # room for EOS
        truncated = pieces.row_lengths() > limit
        pieces = pieces[:, :limit]
        ids, _ = dense_ids(pieces, end=True)
        return ids, truncated, pieces.row_lengths() == 0

    def search(self, source_ids, n_best=None, *, greedy=False, max_lengths=None,
               max_decode_length=None, banned_ids=(), incremental=True,
               sampling=None) -> decoding.DecodeResult:
        """The one door to the search: int32 source ids [batch, length] (each row subwords, EOS,
        padding; ``padded_after_end`` for rows padded otherwise) -> ``decoding.DecodeResult``. Every
        translation, export, benchmark and example searches through here, so the decisions below
        are made once:

        - the start id and the ids never produced: padding and the start symbol (never targets, so
          the model was not trained to rule them out), and ``banned_ids`` besides;
        - the length limits: each sentence its source length + ``extra_length`` (or its entry of
          ``max_lengths``, int32 [batch]), in an ids buffer of ``max_decode_length`` tokens (default
          the model's ``max_length`` + ``extra_length``: one output shape for every batch);
        - whether XLA compiles the search: then the self-attention cache is a fixed buffer and no
          sentence leaves the batch early, else the cache grows and finished sentences leave;
        - for an ensemble, how its members are combined (``ensemble_inputs``).

        Beam search with the ``DecodingConfig``'s beam and alpha (``n_best=1``: only the best is
        needed, it may stop sooner), or ``greedy``, or random sampling with a ``SamplingConfig``
        (``sampling``; greedy's output shapes, scored with the model's own log-probabilities and
        the alpha). ``incremental=False`` re-runs the decoder over the whole prefix at each step
        instead of reading the key/value cache: the slow reference the cache is measured and
        tested against.
        """
        if greedy and sampling is not None:
            raise ValueError("search: greedy and sampling exclude each other; pass one.")
        if sampling is not None and not isinstance(sampling, SamplingConfig):
            raise TypeError(f"sampling: a SamplingConfig (e.g. SamplingConfig(top_k=10)), got "
                            f"{sampling!r}.")
        vocabulary = self.model.config.output_vocab_size
        if any(not 0 <= i < vocabulary for i in banned_ids):
            raise ValueError(f"banned_ids: ids of the target vocabulary, 0 to {vocabulary - 1}, "
                             f"got {list(banned_ids)}.")
        pad_id, end_id = self.tokenizer.pad_id, self.tokenizer.end_id
        buffer = max_decode_length or self.max_decode_length
        if max_lengths is None:
            source_lengths = tf.reduce_sum(tf.cast(source_ids != pad_id, tf.int32), axis=1)
            max_lengths = source_lengths + self.decoding.extra_length
        banned = tf.scatter_nd([[i] for i in (pad_id, self.tokenizer.start_id, *banned_ids)],
                               tf.fill([2 + len(banned_ids)], -1e9),
                               [vocabulary])
        xla = decoding.compiling_with_xla()
        fixed_length = None
        if incremental and xla:
            # Under XLA, which needs one shape for every step, the cache is a fixed buffer of this
            # batch's longest possible output.
            fixed_length = max_decode_length or (
                tf.minimum(tf.shape(source_ids)[1], self.max_source_length)
                + self.decoding.extra_length)
            max_lengths = tf.minimum(max_lengths, fixed_length)
        members = []
        for model in self.members:
            memory, memory_mask = model.encode(source_ids)
            members.append(search_inputs(model, memory, memory_mask, fixed_length, logits_bias=banned)
                           if incremental else
                           prefix_inputs(model, memory, memory_mask, buffer if xla else None, banned))
        cache, shared, symbols_to_logits_fn = (members[0] if len(members) == 1
                                               else ensemble_inputs(members))
        start = tf.fill([tf.shape(source_ids)[0]], tf.constant(self.tokenizer.start_id, tf.int32))
        options = dict(max_lengths=max_lengths, pad_id=pad_id, shared_cache=shared,
                       drop_finished=not xla)
        if sampling is not None:
            return decoding.sample_search(symbols_to_logits_fn, start, cache, buffer, end_id,
                                          seed=sampling.seed, top_k=sampling.top_k,
                                          top_p=sampling.top_p, temperature=sampling.temperature,
                                          alpha=self.decoding.alpha, **options)
        if greedy:
            return decoding.greedy_search(symbols_to_logits_fn, start, cache, buffer, end_id,
                                          alpha=self.decoding.alpha, **options)
        return decoding.beam_search(symbols_to_logits_fn, start, cache,
                                    beam_size=self.decoding.beam_size, alpha=self.decoding.alpha,
                                    max_decode_length=buffer, eos_id=end_id, n_best=n_best,
                                    **options)

    def translate_ids(self, source_ids, n_best=None):
        """int32 [batch, length], each row subwords then EOS (as ``source_ids`` makes them) ->
        n-best ``{"ids": [batch, beam, L], "scores": [batch, beam], "lengths": [batch, beam]}``
        sorted best first. Whatever follows a row's first EOS is padding, whichever ids it holds;
        a row without EOS is its non-PAD ids. ``n_best=1``: only the best is needed (the search
        stops sooner; the other entries may be incomplete)."""
        # TF Serving's batcher pads a request's ids with the request's own first id, not PAD, so
        # only the EOS tells where a sentence ends.
        source_ids = padded_after_end(tf.cast(source_ids, tf.int32), self.tokenizer.end_id,
                                      self.model.config.pad_id)
        result = self.search(source_ids, n_best=n_best)
        return {"ids": result.ids, "scores": result.scores, "lengths": result.lengths}

    def translate_text(self, texts, sampling=None):
        """tf.string [batch] -> ``{"translations": tf.string, "scores": float32, "truncated": bool}``,
        each [batch]; the score is the best hypothesis' log P / length penalty. With a
        ``SamplingConfig`` each translation is a sample instead (``search``), scored the same way."""
        source_ids, truncated, empty = self.source_ids(texts)
        if sampling is None:
            best = self.translate_ids(source_ids, n_best=1)
            ids, scores = best["ids"][:, 0], best["scores"][:, 0]
        else:
            sampled = self.search(source_ids, sampling=sampling)
            ids, scores = sampled.ids, sampled.scores
        translations = self.tokenizer.detokenize(ids)
        return {"translations": tf.where(empty, tf.constant("", tf.string), translations),
                "scores": tf.where(empty, 0.0, scores),
                "truncated": truncated}

    def _function(self, key, python_function, input_signature):
        """``python_function`` as a ``tf.function`` of ``input_signature``, one per ``key`` and
        translator: traced at its first call, and read the model's variables at every call, so a
        translator keeps translating with the weights of the moment (a dev evaluation's, an
        export's) without tracing again."""
        if key not in self._functions:
            self._functions[key] = tf.function(python_function, input_signature=input_signature,
                                               autograph=False)
        return self._functions[key]

    def text_function(self, sampling=None):
        """``translate_text`` as a ``tf.function`` over any batch of strings (the signature the
        SavedModel serves), traced once per translator (and ``sampling``)."""
        return self._function(("text", sampling),
                              functools.partial(self.translate_text, sampling=sampling),
                              [TEXT_INPUT_SPEC])

    def ids_function(self):
        """``translate_ids`` (the whole n-best list) as a ``tf.function`` over any batch of
        source ids, traced once per translator."""
        return self._function("ids", self.translate_ids, [IDS_INPUT_SPEC])

    def translate_text_nbest(self, texts):
        """tf.string [batch] -> ``{"translations": tf.string [batch, beam], "scores": float32
        [batch, beam], "truncated": bool [batch]}``: ``translate_ids``' whole n-best list,
        detokenized, best first. A slot the search left empty has score ``-inf`` and an empty
        text; an empty input has one hypothesis, the empty text with score 0, and ``-inf`` after
        it (as ``translate_text`` answers it)."""
        source_ids, truncated, empty = self.source_ids(texts)
        # Through the ids signature's tf.function: traced once for both, and an export holds
        # (and loads) one n-best search. (Text functions tokenize, so XLA never compiles them.)
        nbest = self.ids_function()(source_ids)
        ids = nbest["ids"]
        # The beam axis is static, so the SavedModel signature shows [-1, beam].
        beam = self.decoding.beam_size
        translations = tf.reshape(self.tokenizer.detokenize(tf.reshape(ids, [-1, tf.shape(ids)[2]])),
                                  [-1, beam])
        empty_scores = tf.where(tf.range(beam) == 0, 0.0, float("-inf"))
        return {"translations": tf.where(empty[:, None], tf.constant("", tf.string), translations),
                "scores": tf.where(empty[:, None], empty_scores[None, :], nbest["scores"]),
                "truncated": truncated}

    def nbest_function(self):
        """``translate_text_nbest`` as a ``tf.function`` over any batch of strings, traced once
        per translator."""
        return self._function("nbest", self.translate_text_nbest, [TEXT_INPUT_SPEC])

    def score_ids(self, source_ids, target_ids):
        """Forced decoding (teacher forcing): int32 ``source_ids`` and ``target_ids`` [batch, length],
        each row subwords then EOS (as ``source_ids`` makes them) -> ``{"log_prob": float32,
        "tokens": int32, "nll_per_token": float32}``, each [batch]: the sum of log P(y_t | y_<t, x)
        under the model's softmax over the target's tokens (its subwords and EOS), their count, and
        -log_prob / tokens. As for ``translate_ids``, whatever follows a row's first EOS is padding,
        whichever ids it holds; a row without EOS is its non-PAD ids (a target row without EOS: the
        log-probability of that prefix). Core TensorFlow ops only."""
        pad_id, end_id = self.model.config.pad_id, self.tokenizer.end_id
        source_ids = padded_after_end(tf.cast(source_ids, tf.int32), end_id, pad_id)
        target_ids = padded_after_end(tf.cast(target_ids, tf.int32), end_id, pad_id)
        start = tf.fill([tf.shape(target_ids)[0], 1], tf.constant(self.tokenizer.start_id, tf.int32))
        logits = self.model((source_ids, tf.concat([start, target_ids[:, :-1]], axis=1)),
                            training=False)
        # The log-softmax at the target id, without a [batch, length, vocabulary] table of them.
        token_log_probs = -tf.nn.sparse_softmax_cross_entropy_with_logits(target_ids, logits)
        real = target_ids != pad_id
        log_prob = tf.reduce_sum(tf.where(real, token_log_probs, 0.0), axis=1)
        tokens = tf.reduce_sum(tf.cast(real, tf.int32), axis=1)
        return {"log_prob": log_prob, "tokens": tokens,
                "nll_per_token": tf.math.divide_no_nan(-log_prob, tf.cast(tokens, tf.float32))}

    def score_text(self, sources, targets):
        """Sentence pairs, ``tf.string`` [batch] each -> ``score_ids``' dict and ``"truncated"``
        bool [batch]. Both sides are tokenized as ``translate_text`` tokenizes its input (invalid
        UTF-8 replaced, spaces stripped); an empty target is its EOS alone. A source longer than
        ``max_length`` subwords is cut as for translating; a longer target is scored on its first
        ``max_length - 1`` subwords without EOS (the log-probability of that prefix: the model has
        no positions for the rest, and the EOS it lacks is not scored). A cut on either side marks
        the pair ``truncated``."""
        source_ids, source_cut, _ = self.source_ids(sources)
        target_ids, target_cut, _ = self.source_ids(targets)
        target_ids = tf.where(target_cut[:, None] & (target_ids == self.tokenizer.end_id),
                              tf.constant(self.model.config.pad_id, tf.int32), target_ids)
        # Through the score_ids signature's tf.function, as translate_text_nbest searches.
        scores = self.score_ids_function()(source_ids, target_ids)
        return {**scores, "truncated": source_cut | target_cut}

    def score_function(self):
        """``score_text`` as a ``tf.function`` over any batch of pairs (the ``score`` signature),
        traced once per translator."""
        return self._function("score", self.score_text, SCORE_INPUT_SPECS)

    def score_ids_function(self):
        """``score_ids`` as a ``tf.function`` over any batch of source and target ids, traced once
        per translator."""
        return self._function("score_ids", self.score_ids, SCORE_IDS_INPUT_SPECS)

    def align_text(self, sources, targets, layer=-1):
        """Sentence pairs, ``tf.string`` [batch] each (a source and its translation) -> their word
        alignment by forced decoding: ``"alignments"``, tf.string [batch], ``pharaoh``'s pairs;
        ``"source_words"``, int32 [batch, target words], ``word_alignment``'s source word of each
        target word (-1: none); ``"attention"``, float32 [batch, T, S], the ``cross_attention`` of
        the model's decoder layer ``layer`` (-1: the last) it is read from, over the subwords and EOS
        of each side. Both texts are read as ``score_text`` reads them (invalid UTF-8 replaced,
        spaces stripped), and their words are those of the texts given. With an ensemble, the first
        member's attention."""
        def tokenized(texts):
            """(ids as ``source_ids`` makes them, each subword's byte span) of cleaned texts."""
            pieces, starts, ends = self.tokenizer.tokenize_with_offsets(texts)
            ids, _, _ = self._ids(pieces)
            limit = self.max_source_length - 1  # as _ids cuts
            spans = tf.stack([tf.cast(starts[:, :limit], tf.int64).to_tensor(-1),
                              tf.cast(ends[:, :limit], tf.int64).to_tensor(-1)], axis=-1)
            # as wide as the ids: their EOS column (and any padding) -1
            return ids, tf.pad(spans, [[0, 0], [0, tf.shape(ids)[1] - tf.shape(spans)[1]], [0, 0]],
                               constant_values=-1)

        sources, targets = cleaned_texts(sources), cleaned_texts(targets)
        (source_ids, source_spans), (target_ids, target_spans) = tokenized(sources), tokenized(targets)
        attention = cross_attention(self.model, source_ids, target_ids, self.tokenizer.start_id,
                                    layer)
        source_words = word_alignment(attention, sources, source_spans, targets, target_spans)
        return {"alignments": pharaoh(source_words), "source_words": source_words,
                "attention": attention}

    def align_function(self, layer=-1):
        """``align_text`` as a ``tf.function`` over any batch of pairs, traced once per
        translator (and ``layer``)."""
        layers = self.model.config.num_layers
        if not -layers <= layer < layers:
            raise ValueError(f"alignment_layer={layer}: the model has {layers} decoder layers (0 "
                             f"to {layers - 1}, or counted from the last, -1 to {-layers}).")
        return self._function(("align", layer), functools.partial(self.align_text, layer=layer),
                              SCORE_INPUT_SPECS)


def cleaned_texts(texts):
    """tf.string [batch] as the model reads them: invalid UTF-8 replaced by U+FFFD, spaces
    stripped. A ValueError if ``texts`` is not one batch of strings (one string is ``[text]``)."""
    texts = tf.convert_to_tensor(texts, tf.string)
    if texts.shape.rank not in (None, 1):  # static: free, and the signatures' specs know it
        raise ValueError(f"texts: a batch of strings, shape [batch], got shape {texts.shape} "
                         "(one sentence is [text]).")
    texts = tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8",
                                         errors="replace", replacement_char=0xFFFD)
    return tf.strings.strip(texts)


def cross_attention(model, source_ids, target_ids, start_id, layer=-1):
    """int32 ``source_ids`` [batch, S] and ``target_ids`` [batch, T] (each row subwords then EOS,
    padded) -> float32 [batch, T, S]: row ``t`` is the encoder-decoder attention of decoder layer
    ``layer`` (default the last, as fairseq's and OpenNMT-tf's alignments), averaged over its
    heads, at the step that predicted target token ``t`` (its input being the tokens before it,
    after ``start_id``): how much each source position weighed in choosing that token. Rows and
    columns of padding are 0."""
    start = tf.fill([tf.shape(target_ids)[0], 1], tf.constant(start_id, tf.int32))
    target_input = tf.concat([start, target_ids[:, :-1]], axis=1)
    weights = model.attention_weights(source_ids, target_input)["decoder_cross"][layer]
    attention = tf.reduce_mean(tf.cast(weights, tf.float32), axis=1)
    real = tf.cast(target_ids != model.config.pad_id, tf.float32)[:, :, None]
    return attention * real * tf.cast(source_ids != model.config.pad_id, tf.float32)[:, None, :]


# What ``str.split()`` takes for whitespace (``str.isspace``): the words of an alignment are its
# words, in the graph as in Python.
WHITESPACE = (0x9, 0xA, 0xB, 0xC, 0xD, 0x1C, 0x1D, 0x1E, 0x1F, 0x20, 0x85, 0xA0, 0x1680,
              *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F, 0x3000)


def word_alignment(attention, sources, source_spans, targets, target_spans):
    """``Translator.align_text``'s attention, texts and subword byte spans (-1 for EOS and padding)
    -> int32 [batch, target words]: for each whitespace-separated word of a target (``str.split()``'s
    words, 0-based), the source word with the most attention, its subwords' attention summed over
    the source word's subwords (and averaged over its own: the same choice); -1 past a row's words,
    and for a word no subword covers (a character the vocabulary drops), which is never aligned,
    as is no target word of a pair whose source has no covered word. TensorFlow ops, for the
    SavedModel's ``align`` signature as for ``trainers.translate``."""
    source_words = _subword_words(sources, source_spans)
    target_words = _subword_words(targets, target_spans)

    def one_hot(words):  # [batch, subwords, words]; no word (-1): a row of zeros
        return tf.one_hot(words, tf.maximum(tf.reduce_max(words) + 1, 1), dtype=tf.float64)

    target_pieces = one_hot(target_words)
    # [batch, target word, source word]; float64, so that ties are ties whatever the sum's order
    by_words = tf.einsum("btv,bts,bsw->bvw", target_pieces, tf.cast(attention, tf.float64),
                         one_hot(source_words))
    columns = tf.shape(by_words)[2]
    best = tf.reduce_min(tf.where(by_words == tf.reduce_max(by_words, axis=2, keepdims=True),
                                  tf.range(columns), columns), axis=2)  # the first of equals
    aligned = ((tf.reduce_max(target_pieces, axis=1) > 0)
               & (tf.reduce_max(source_words, axis=1) >= 0)[:, None])
    return tf.where(aligned, best, -1)


def _subword_words(texts, spans):
    """tf.string [batch] and their subwords' byte spans int64 [batch, subwords, 2] ([start, end),
    -1 for none) -> int32 [batch, subwords]: the index of the word (of ``str.split()``'s) that holds
    each subword's last byte (a subword of the space before a word: that word), -1 for none."""
    characters, starts = tf.strings.unicode_decode_with_offsets(texts, "UTF-8")
    codes, rows = characters.flat_values, characters.value_rowids()  # all rows' characters
    space = tf.reduce_any(codes[:, None] == tf.constant(WHITESPACE, tf.int32), axis=1)
    utf8_bytes = 1 + sum(tf.cast(codes >= first, tf.int64) for first in (0x80, 0x800, 0x10000))
    # a word ends at a character followed by a space, by another row or by nothing
    followed = tf.concat([space[1:] | (rows[1:] != rows[:-1]), [True]], axis=0)
    word_ends = tf.ragged.boolean_mask(characters.with_flat_values(starts.flat_values + utf8_bytes),
                                       characters.with_flat_values(~space & followed))
    padded_ends = tf.concat([word_ends.to_tensor(tf.int64.max), tf.fill([tf.shape(texts)[0], 1],
                                                                         tf.int64.max)], axis=1)
    last = tf.maximum(spans[..., 1] - 1, spans[..., 0])
    words = tf.searchsorted(padded_ends, last, side="right", out_type=tf.int32)
    known = (spans[..., 0] >= 0) & (words < tf.cast(word_ends.row_lengths(), tf.int32)[:, None])
    return tf.where(known, words, -1)


def pharaoh(source_words):
    """``word_alignment``'s int32 [batch, target words] -> tf.string [batch]: each row's pairs
    ``SOURCE-TARGET`` of 0-based word indices, by target word, separated by spaces (the format
    fast_align and fairseq's ``--print-alignment`` write)."""
    targets = tf.broadcast_to(tf.range(tf.shape(source_words)[1]), tf.shape(source_words))
    pairs = tf.strings.as_string(source_words) + "-" + tf.strings.as_string(targets)
    return tf.strings.reduce_join(tf.ragged.boolean_mask(pairs, source_words >= 0), axis=1,
                                  separator=" ")


def padded_after_end(ids, end_id, pad_id):
    """int32 [batch, length] -> the same ids with every one after a row's first ``end_id`` set to
    ``pad_id``; a row without ``end_id`` is unchanged."""
    after_end = tf.cumsum(tf.cast(ids == end_id, tf.int32), axis=1, exclusive=True) > 0
    return tf.where(after_end, tf.constant(pad_id, ids.dtype), ids)


def search_inputs(model, memory, memory_mask, max_decode_length=None, logits_bias=None):
    """``(initial_cache, shared_cache, symbols_to_logits_fn)`` for ``decoding.beam_search`` /
    ``greedy_search`` (pass ``shared_cache=shared_cache``): the one adapter between the model and
    the search.

    The caches are ``model.init_cache``'s as they are: the search tiles and reorders the
    self-attention keys/values per hypothesis (growing, or fixed buffers of ``max_decode_length``
    steps as XLA needs) and gives the step the encoder's keys/values once per sentence, never
    copied per beam. ``logits_bias`` [target_vocab], if given, is added to the logits (e.g. -1e9
    at ids never to produce).
    """
    cache, memory_cache = model.init_cache(memory, memory_mask, max_decode_length)
    weights = model.step_weights()  # here, before the search's loop: once, not per step

    def symbols_to_logits_fn(ids, i, cache, memory_cache):
        logits, cache = model.decode_step(ids[:, i], i, cache, memory_cache,
                                          grow_cache=max_decode_length is None, weights=weights)
        if logits_bias is not None:
            # A BiasAdd, not an add: grappler fuses it into a float32 projection's matrix product
            # (one pass over the [rows, vocabulary] logits fewer per step, the same sums).
            with tf.name_scope("output_projection"):
                logits = tf.nn.bias_add(logits, logits_bias)
        return logits, cache

    return cache, memory_cache, symbols_to_logits_fn


def prefix_inputs(model, memory, memory_mask, fixed_length=None, logits_bias=None):
    """``search_inputs``' triple without a key/value cache (the shared cache is None): each step
    re-runs the decoder over the whole prefix, the slow reference of ``Translator.search(...,
    incremental=False)``. ``fixed_length``: the prefix's one shape under XLA (the causal mask
    hides the columns after step ``i``)."""

    def symbols_to_logits_fn(ids, i, cache):
        prefix = ids[:, :i + 1] if fixed_length is None else ids[:, :fixed_length]
        logits = model.decode(prefix, cache["memory"], cache["memory_mask"])[:, i]
        return (logits if logits_bias is None else logits + logits_bias), cache

    return {"memory": memory, "memory_mask": memory_mask}, None, symbols_to_logits_fn


def ensemble_inputs(members):
    """One ``(initial_cache, shared_cache, symbols_to_logits_fn)`` of several models' (each made
    by ``search_inputs`` or ``prefix_inputs``), decoded together: the caches are plain dicts
    ``{"member_0": ..., "member_1": ...}`` of the members' own, and each step returns the mean of
    the members' log-softmax, as Marian averages an ensemble. The search's own log-softmax then
    renormalises it, so a hypothesis' score is ``log P(Y) / lp(Y)`` with ``P(y_t | ...)`` the
    members' geometric mean probability of ``y_t``, divided by its sum over the vocabulary.
    Every member runs its full step: memory and time grow linearly with the members."""
    names = [f"member_{n}" for n in range(len(members))]
    shares = members[0][1] is not None
    cache = {name: member[0] for name, member in zip(names, members)}
    shared = {name: member[1] for name, member in zip(names, members)} if shares else None

    def symbols_to_logits_fn(ids, i, cache, *shared):
        log_probs, new_cache = [], {}
        for name, (_, _, step) in zip(names, members):
            logits, new_cache[name] = step(ids, i, cache[name],
                                           *[part[name] for part in shared])
            log_probs.append(tf.nn.log_softmax(tf.cast(logits, tf.float32)))
        return tf.add_n(log_probs) / len(members), new_cache

    return cache, shared, symbols_to_logits_fn


def ensemble(translators, names, kind="models"):
    """One ``Translator`` decoding the models of ``translators`` together (``ensemble_inputs``),
    with the first one's tokenizer and search settings. They must share one vocabulary, the same
    subword pieces under the same ids: anything else is a ValueError naming the two ``kind``
    (e.g. "runs") of ``names`` (one name per translator) that differ."""
    first = translators[0].tokenizer
    for name, member in zip(names[1:], translators[1:]):
        difference = vocabulary_difference(first, member.tokenizer)
        if difference:
            raise ValueError(f"the {kind} {names[0]} and {name} do not share a vocabulary "
                             f"({difference}): an ensemble's {kind} must be trained with the "
                             "same one.")
    return Translator([member.model for member in translators], first, translators[0].decoding)


def vocabulary_difference(one, other):
    """How two ``SubwordTokenizer``s' vocabularies differ, in words; None if they do not."""
    if one.vocab_size != other.vocab_size:
        return f"{one.vocab_size} and {other.vocab_size} subwords"
    ids = tf.range(one.vocab_size)
    pieces, other_pieces = one.id_to_piece(ids).numpy(), other.id_to_piece(ids).numpy()
    differ = np.flatnonzero(pieces != other_pieces)
    if not differ.size:
        return None
    first = differ[0]
    return (f"{differ.size} of their {one.vocab_size} subwords differ, the first at id {first}: "
            f"{pieces[first].decode()!r} and {other_pieces[first].decode()!r}")


def translate_in_batches(translate_fn: Callable, sentences: Sequence[str],
                         batch_size: int = BATCH_SIZE,
                         progress: Callable[[int], None] = None) -> List[dict]:
    """Translates ``sentences`` in batches of similar length (little padding) and returns one dict
    per sentence, in input order: ``{"translation": str, "score": float, "truncated": bool}``.

    ``translate_fn`` maps a tf.string [batch] to the dict of ``Translator.translate_text`` (or the
    same signature of an exported SavedModel). ``progress(n)`` is called after each batch.
    """
    results = [None] * len(sentences)
    for indices, outputs in _length_sorted_batches(translate_fn, [sentences], batch_size, progress):
        for row, index in enumerate(indices):
            results[index] = {"translation": outputs["translations"][row].decode("utf-8", "replace"),
                              "score": float(outputs["scores"][row]),
                              "truncated": bool(outputs["truncated"][row])}
    return results


def translate_nbest_in_batches(nbest_fn: Callable, sentences: Sequence[str],
                               batch_size: int = BATCH_SIZE,
                               progress: Callable[[int], None] = None) -> List[dict]:
    """``translate_in_batches`` for n-best lists: ``nbest_fn`` maps a tf.string [batch] to the dict
    of ``Translator.translate_text_nbest`` (or the ``translate_nbest`` signature of an exported
    SavedModel). One dict per sentence, in input order: ``{"translations": [str] * beam, "scores":
    [float] * beam, "truncated": bool}``, best first."""
    results = [None] * len(sentences)
    for indices, outputs in _length_sorted_batches(nbest_fn, [sentences], batch_size, progress):
        for row, index in enumerate(indices):
            results[index] = {"translations": [t.decode("utf-8", "replace")
                                               for t in outputs["translations"][row]],
                              "scores": [float(s) for s in outputs["scores"][row]],
                              "truncated": bool(outputs["truncated"][row])}
    return results


def score_in_batches(score_fn: Callable, sources: Sequence[str], targets: Sequence[str],
                     batch_size: int = BATCH_SIZE,
                     progress: Callable[[int], None] = None) -> List[dict]:
    """``translate_in_batches`` for sentence pairs: ``score_fn`` maps two tf.string [batch]
    (sources, targets) to the dict of ``Translator.score_text`` (or the ``score`` signature of an
    exported SavedModel). One dict per pair, in input order: ``{"log_prob": float, "tokens": int,
    "nll_per_token": float, "truncated": bool}``."""
    results = [None] * len(sources)
    for indices, outputs in _length_sorted_batches(score_fn, [sources, targets], batch_size, progress):
        for row, index in enumerate(indices):
            results[index] = {"log_prob": float(outputs["log_prob"][row]),
                              "tokens": int(outputs["tokens"][row]),
                              "nll_per_token": float(outputs["nll_per_token"][row]),
                              "truncated": bool(outputs["truncated"][row])}
    return results


def align_in_batches(align_fn: Callable, sources: Sequence[str], targets: Sequence[str],
                     batch_size: int = BATCH_SIZE,
                     progress: Callable[[int], None] = None) -> List[str]:
    """``translate_in_batches`` for word alignments: ``align_fn`` maps two tf.string [batch]
    (sources, their translations) to the dict of ``Translator.align_text`` (or the ``align``
    signature of an exported SavedModel). Each pair's alignment, ``SOURCE-TARGET`` pairs of word
    indices separated by spaces, in input order."""
    results = [None] * len(sources)
    for indices, outputs in _length_sorted_batches(align_fn, [sources, targets], batch_size, progress):
        for row, index in enumerate(indices):
            results[index] = outputs["alignments"][row].decode("utf-8")
    return results


def _length_sorted_batches(fn, columns, batch_size, progress):
    """``(indices, outputs as NumPy)`` per batch of rows of similar length (little padding):
    ``fn`` takes one tf.string [batch] per column of ``columns`` (equally long lists of strings:
    the sentences, or the sources and the targets), and a row's length is that of its strings
    together."""
    names = ["sentences"] if len(columns) == 1 else ["sources", "targets"]
    for name, column in zip(names, columns):
        if isinstance(column, (str, bytes)):  # would be read as one sentence per character
            raise ValueError(f"{name}: a list of strings, not one string (one sentence: [sentence]).")
    if len(columns) == 2 and len(columns[0]) != len(columns[1]):
        raise ValueError(f"{len(columns[0])} sources but {len(columns[1])} targets: they must "
                         "pair up.")
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}.")
    order = sorted(range(len(columns[0])), key=lambda i: sum(len(column[i]) for column in columns))
    for start in range(0, len(order), batch_size):
        indices = order[start:start + batch_size]
        batches = [tf.constant([column[i] for i in indices], tf.string) for column in columns]
        yield indices, {k: np.asarray(v) for k, v in fn(*batches).items()}
        if progress is not None:
            progress(len(indices))


def parse_nbest_line(line: bytes):
    """A line of ``trainers.translate --n_best`` (``INDEX<TAB>SCORE<TAB>TRANSLATION``, bytes
    without the line break; the translation may itself hold tabs) -> ``(index, score,
    translation)``; a ValueError saying what is wrong with it otherwise."""
    fields = line.split(b"\t", 2)
    if len(fields) != 3:
        raise ValueError(f"{len(fields) - 1} tab(s); an n-best line is INDEX<TAB>SCORE<TAB>TRANSLATION "
                         "(as python -m trainers.translate --n_best writes it)")
    try:
        index = int(fields[0])
    except ValueError:
        index = -1
    if index < 0:
        raise ValueError(f"INDEX {fields[0].decode('utf-8', 'replace')!r} is not a line number "
                         "(0, 1, ...)")
    try:
        score = float(fields[1])
    except ValueError:
        raise ValueError(f"SCORE {fields[1].decode('utf-8', 'replace')!r} is not a number") from None
    return index, score, fields[2]


def load_exported_translate_fn(path: str):
    """The text signature of an exported SavedModel (``export.export_for_serving``) as a
    ``translate_fn`` for ``translate_in_batches`` / ``evaluation.translate_and_evaluate``.
    ``path``: a version folder, or the model's base folder (its highest numeric version).
    Returns ``(translate_fn, version_path)``; a missing or unusable export is a ValueError naming
    the path."""
    (translate_fn,), path = load_exported_fns(path, TEXT_SIGNATURE)
    return translate_fn, path


def load_exported_nbest_fn(path: str):
    """The ``translate_nbest`` signature of an exported SavedModel as an ``nbest_fn`` for
    ``translate_nbest_in_batches``; ``path`` as for ``load_exported_translate_fn``. Returns
    ``(nbest_fn, version_path, beam_size)``; an export without the signature (the ids-only one, or
    one written before n-best lists were exported) is a ValueError naming the path."""
    loaded, path = _load_exported(path)
    signature = _signature(loaded, path, NBEST_SIGNATURE)
    return _signature_fn(signature), path, signature.structured_outputs["scores"].shape[1]


def load_exported_score_fn(path: str):
    """The ``score`` signature of an exported SavedModel as a ``score_fn`` for
    ``score_in_batches``; ``path`` as for ``load_exported_translate_fn``. Returns ``(score_fn,
    version_path)``; an export without the signature (the ids-only one, or one written before
    scoring was exported) is a ValueError naming the path."""
    (score_fn,), path = load_exported_fns(path, SCORE_SIGNATURE)
    return score_fn, path


def load_exported_align_fn(path: str):
    """``load_exported_score_fn`` for the ``align`` signature: ``(align_fn for align_in_batches,
    version_path)``."""
    (align_fn,), path = load_exported_fns(path, ALIGN_SIGNATURE)
    return align_fn, path


class MissingSignature(ValueError):
    """An export older than the signature ``name``: the message names the export and what it was
    exported before."""

    def __init__(self, path, name):
        super().__init__(f"{path} has no {name} signature: it was exported before "
                         f"{_SIGNATURES_ADDED[name]}.")
        self.name = name


# What an export older than a signature of the text export was exported before.
_SIGNATURES_ADDED = {
    NBEST_SIGNATURE: "n-best lists were; export the run again for them",
    SCORE_SIGNATURE: "scoring was; export the run again to score with it",
    ALIGN_SIGNATURE: "alignments were; export the run again to align with it"}


def load_exported_fns(path: str, *names):
    """The text export's signatures ``names`` (``serving_default``, ``translate_nbest``,
    ``score``, ``align``) from one load of it (each load reads the whole graph), as the functions
    their ``*_in_batches`` take: ``([fn, ...], version path)``. The ids-only export is a ValueError
    naming the path, one without a signature a ``MissingSignature``."""
    loaded, path = _load_exported(path)
    return [_signature_fn(_signature(loaded, path, name)) for name in names], path


def _signature_fn(signature):
    """An export's signature called as its ``*_in_batches`` calls it: on a batch of sentences, or
    on sources and targets (signatures take keywords only)."""
    if "inputs" in signature.structured_input_signature[1]:
        return lambda batch: signature(inputs=batch)
    return lambda sources, targets: signature(sources=sources, targets=targets)


def _signature(loaded, path, name):
    """The signature ``name`` of the text export ``loaded`` from ``path``."""
    if "inputs" not in loaded.signatures[TEXT_SIGNATURE].structured_input_signature[1]:
        raise ValueError(f"{path} has no text signature: it is the ids-only export; use the "
                         "export without the _ids suffix.")
    if name not in loaded.signatures:
        raise MissingSignature(path, name)
    return loaded.signatures[name]


# An export's assets (``export.common.write_run_files`` writes them; whoever reads an export finds
# them here).
VOCABULARY_ASSET = "vocab.model"
CONFIG_ASSET = "config.json"


def recorded_settings(path):
    """The ``export_settings`` the SavedModel at ``path`` (a version folder, or a base folder: its
    highest version) carries in ``assets/config.json``, or None where there is no readable one
    (not an export of this project)."""
    try:
        with open(os.path.join(exported_version_path(path), "assets", CONFIG_ASSET)) as stream:
            settings = json.load(stream)
    except (OSError, ValueError):
        return None
    return settings if isinstance(settings, dict) else None


def exported_model_config(path):
    """The ``TransformerConfig`` of the SavedModel at ``path`` (as for ``recorded_settings``); a
    ValueError naming the export if it records none."""
    from keras_transformer.config import TransformerConfig

    version = exported_version_path(path)
    model = (recorded_settings(version) or {}).get("model")
    if not isinstance(model, dict):
        raise ValueError(f"{version}/assets/{CONFIG_ASSET}: no model configuration (not a "
                         "SavedModel of this project's export)")
    try:
        return TransformerConfig.from_dict(model)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{version}/assets/{CONFIG_ASSET}: {error}") from None


def restore_from_export(model, path: str) -> None:
    """Loads the weights of the SavedModel at ``path`` into ``model``, a built ``Transformer`` of
    its ``exported_model_config``. The export keeps the model's TensorFlow variables, each named by
    its path inside the model (a Keras 3 variable's name), so they are matched by that path, not
    by order; the dropout layers' random-generator states are not weights and no export keeps them.
    A missing weight is a ValueError naming the export."""
    def inside_model(name):  # without the model's own name, which Keras numbers per process
        return name.removesuffix(":0").split("/", 1)[-1]

    loaded, path = _load_exported(path)
    # The attribute export.saved_model keeps them under (keras.export.ExportArchive's).
    saved = {inside_model(v.name): v for v in getattr(loaded, "_all_variables", [])}
    for variable in model.weights:
        value = saved.get(inside_model(variable.path))
        if value is None or value.shape != variable.shape:
            raise ValueError(f"{path}: no variable {inside_model(variable.path)} of shape "
                             f"{list(variable.shape)} (the model its {CONFIG_ASSET} describes)")
        variable.assign(value)


def exported_decoding_config(path):
    """The ``DecodingConfig`` the SavedModel at ``path`` was exported with (as for
    ``recorded_settings``), or None where it records none."""
    try:
        return DecodingConfig(**(recorded_settings(path) or {})["decoding"])
    except (KeyError, TypeError, ValueError):
        return None


def load_exported_translator(path: str, decoding_config=None):
    """A ``Translator`` of the SavedModel at ``path`` rebuilt as a Keras model
    (``load_exported_model``): the export's weights and vocabulary, searched in this process with
    ``decoding_config`` (default: the settings it was exported with), where the export's own
    graph has its search fixed. For what that graph does not serve: sampling, another beam or
    length penalty, longer n-best lists."""
    path = exported_version_path(path)
    model, tokenizer = load_exported_model(path)
    return Translator(model, tokenizer,
                      decoding_config or exported_decoding_config(path) or DecodingConfig())


def load_exported_model(path: str):
    """(Keras ``Transformer``, ``SubwordTokenizer``) of a SavedModel written by the project's
    export (``path``: the base folder or one version), for what the serving signatures do not
    show, such as the attention maps, or to train it further."""
    from keras_transformer.tokenizer import SubwordTokenizer
    from keras_transformer.weights import build_model

    path = exported_version_path(path)
    model = build_model(exported_model_config(path))
    restore_from_export(model, path)
    return model, SubwordTokenizer.load(os.path.join(path, "assets", VOCABULARY_ASSET))


def _load_exported(path):
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops of the text signatures)

    path = exported_version_path(path)
    try:
        loaded = tf.saved_model.load(path)
        loaded.signatures[TEXT_SIGNATURE]  # a SavedModel not written by the export: KeyError
    except (OSError, ValueError, KeyError, tf.errors.OpError) as error:
        raise ValueError(f"cannot load the SavedModel {path}: "
                         f"{str(error).splitlines()[0][:300] if str(error) else type(error).__name__}"
                         ) from None
    return loaded, path
