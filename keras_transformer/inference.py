"""Translation with a trained model: strings in, strings out, all in TensorFlow ops (section 6.1).

``Translator`` joins the three pieces that know nothing of each other: the tokenizer, the model
(``encode`` / ``init_cache`` / ``decode_step``) and the search (``decoding.beam_search``, which sees the
model only through one step function, made here by ``search_inputs``). It makes the decoding
decisions: which tokens are never produced, how long each output may be, and whether the cache
grows (the fastest) or is a fixed buffer (when XLA compiles the search). Its functions are what
the SavedModel exports:

- ``translate_text(texts)``: ``tf.string [batch]`` -> ``{"translations", "scores", "truncated"}``;
- ``translate_ids(source_ids)``: int32 ``[batch, length]`` -> the n-best ``{"ids", "scores", "lengths"}``,
  core TensorFlow ops only (for servers built without the tf-text ops);
- ``translate_text_nbest(texts)``: ``tf.string [batch]`` -> the whole n-best list as text,
  ``{"translations", "scores"}`` each ``[batch, beam]`` and ``"truncated"`` ``[batch]``.

Inputs are answered, never crashed on: invalid UTF-8 is replaced by U+FFFD before tokenisation,
characters never seen in training are spelled as bytes by the tokenizer, an empty or whitespace-only
input gets an empty translation with score 0, and a sentence longer than the model's ``max_length``
subwords is cut to that length (its EOS included) and marked ``truncated`` in the output: the model
never saw longer sources in training, so translating the rest would be a guess.
"""

import dataclasses
import os
from typing import Callable, List, Sequence

import numpy as np
import tensorflow as tf

from keras_transformer import decoding


@dataclasses.dataclass(frozen=True)
class DecodingConfig:
    """Search settings. The paper (section 6.1): beam 4, alpha 0.6, output up to input length + 50;
    its parsing experiment: beam 21, alpha 0.3, input length + 300."""

    beam_size: int = 4
    alpha: float = 0.6
    extra_length: int = 50

    def __post_init__(self):
        if not isinstance(self.beam_size, int) or self.beam_size < 1:
            raise ValueError(f"beam_size must be a positive integer, got {self.beam_size!r}.")
        if not isinstance(self.extra_length, int) or self.extra_length < 1:
            raise ValueError(f"extra_length must be a positive integer, got {self.extra_length!r}.")
        if not (isinstance(self.alpha, (int, float)) and 0 <= self.alpha < float("inf")):
            raise ValueError(f"alpha must be a finite number >= 0, got {self.alpha!r}.")


# The input of every text translation function: a batch of sentences, as TF Serving sends them.
TEXT_INPUT_SPEC = tf.TensorSpec([None], tf.string, name="inputs")
# The names an exported SavedModel serves the Translator's functions under (export.saved_model
# writes them, the loaders below read them): translate_text, translate_ids, translate_text_nbest.
TEXT_SIGNATURE, IDS_SIGNATURE, NBEST_SIGNATURE = "serving_default", "translate_ids", "translate_nbest"


class Translator(tf.Module):
    """A model, its tokenizer and search settings; see the module docstring."""

    def __init__(self, model, tokenizer, decoding_config=DecodingConfig(), name=None):
        super().__init__(name=name)
        if tokenizer.vocab_size != model.config.output_vocab_size:
            raise ValueError(f"the tokenizer has {tokenizer.vocab_size} ids but the model's vocabulary "
                             f"has {model.config.output_vocab_size}: they were not trained together.")
        self.model = model
        self.tokenizer = tokenizer
        self.decoding = decoding_config
        self.max_source_length = model.config.max_length
        # The output ids: one static buffer for every batch (XLA-friendly, and one output shape);
        # each sentence stops at its own source length + extra_length.
        self.max_decode_length = self.max_source_length + decoding_config.extra_length

    def source_ids(self, texts):
        """tf.string [batch] -> (int32 [batch, length] subwords + EOS padded with 0, truncated bool
        [batch], empty bool [batch])."""
        texts = tf.strings.unicode_transcode(tf.convert_to_tensor(texts, tf.string), "UTF-8", "UTF-8",
                                             errors="replace", replacement_char=0xFFFD)
        pieces = self.tokenizer.tokenize(tf.strings.strip(texts))
        limit = self.max_source_length - 1  # room for EOS
        truncated = pieces.row_lengths() > limit
        pieces = pieces[:, :limit]
        end = tf.fill([pieces.nrows(), 1], tf.constant(self.tokenizer.end_id, tf.int32))
        ids = tf.concat([tf.cast(pieces, tf.int32), end], axis=1).to_tensor(self.tokenizer.pad_id)
        return ids, truncated, pieces.row_lengths() == 0

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
        memory, memory_mask = self.model.encode(source_ids)
        source_lengths = tf.reduce_sum(tf.cast(source_ids != self.model.config.pad_id, tf.int32), axis=1)
        start = tf.fill([tf.shape(source_ids)[0]], tf.constant(self.tokenizer.start_id, tf.int32))
        # Padding and the start symbol are never a next token; the model was not trained to rule
        # them out (they are never targets), so the search must.
        never = tf.scatter_nd([[self.tokenizer.pad_id], [self.tokenizer.start_id]], [-1e9, -1e9],
                              [self.model.config.output_vocab_size])
        # A growing self-attention cache (each step reads only the steps so far) and the encoder's
        # keys/values kept once per sentence, not copied per beam. Under XLA, which needs one shape
        # for every step: fixed buffers for this batch's longest possible output. Each sentence
        # stops at its own source length + extra_length.
        extra = self.decoding.extra_length
        limits, fixed_length = source_lengths + extra, None
        if decoding.compiling_with_xla():
            fixed_length = tf.minimum(tf.shape(source_ids)[1], self.max_source_length) + extra
            limits = tf.minimum(limits, fixed_length)
        cache, shared, symbols_to_logits_fn = search_inputs(self.model, memory, memory_mask,
                                                            fixed_length, logits_bias=never)
        # Sentences whose best translation is final leave the batch (not under XLA).
        result = decoding.beam_search(
            symbols_to_logits_fn, start, cache, beam_size=self.decoding.beam_size,
            alpha=self.decoding.alpha, max_decode_length=self.max_decode_length,
            eos_id=self.tokenizer.end_id, max_lengths=limits,
            pad_id=self.tokenizer.pad_id, n_best=n_best, shared_cache=shared)
        return {"ids": result.ids, "scores": result.scores, "lengths": result.lengths}

    def translate_text(self, texts):
        """tf.string [batch] -> ``{"translations": tf.string, "scores": float32, "truncated": bool}``,
        each [batch]; the score is the best hypothesis' log P / length penalty."""
        source_ids, truncated, empty = self.source_ids(texts)
        best = self.translate_ids(source_ids, n_best=1)
        translations = self.tokenizer.detokenize(best["ids"][:, 0])
        return {"translations": tf.where(empty, tf.constant("", tf.string), translations),
                "scores": tf.where(empty, 0.0, best["scores"][:, 0]),
                "truncated": truncated}

    def text_function(self):
        """``translate_text`` as a ``tf.function`` over any batch of strings (the signature the
        SavedModel serves), traced once; it reads the model's variables on every call."""
        return tf.function(self.translate_text, input_signature=[TEXT_INPUT_SPEC])

    def translate_text_nbest(self, texts):
        """tf.string [batch] -> ``{"translations": tf.string [batch, beam], "scores": float32
        [batch, beam], "truncated": bool [batch]}``: ``translate_ids``' whole n-best list,
        detokenized, best first. A slot the search left empty has score ``-inf`` and an empty
        text; an empty input has one hypothesis, the empty text with score 0, and ``-inf`` after
        it (as ``translate_text`` answers it)."""
        source_ids, truncated, empty = self.source_ids(texts)
        nbest = self.translate_ids(source_ids)
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
        """``translate_text_nbest`` as a ``tf.function`` over any batch of strings, traced once."""
        return tf.function(self.translate_text_nbest, input_signature=[TEXT_INPUT_SPEC])


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
        logits, cache = model.decode_step(ids[:, i], i, cache, memory_cache, weights)
        if logits_bias is not None:
            # Grappler fuses the add into the projection's matrix product: profiles show the
            # product under this name.
            with tf.name_scope("output_projection"):
                logits += logits_bias
        return logits, cache

    return cache, memory_cache, symbols_to_logits_fn


def translate_in_batches(translate_fn: Callable, sentences: Sequence[str], batch_size: int = 32,
                         progress: Callable[[int], None] = None) -> List[dict]:
    """Translates ``sentences`` in batches of similar length (little padding) and returns one dict
    per sentence, in input order: ``{"translation": str, "score": float, "truncated": bool}``.

    ``translate_fn`` maps a tf.string [batch] to the dict of ``Translator.translate_text`` (or the
    same signature of an exported SavedModel). ``progress(n)`` is called after each batch.
    """
    results = [None] * len(sentences)
    for indices, outputs in _length_sorted_batches(translate_fn, sentences, batch_size, progress):
        for row, index in enumerate(indices):
            results[index] = {"translation": outputs["translations"][row].decode("utf-8", "replace"),
                              "score": float(outputs["scores"][row]),
                              "truncated": bool(outputs["truncated"][row])}
    return results


def translate_nbest_in_batches(nbest_fn: Callable, sentences: Sequence[str], batch_size: int = 32,
                               progress: Callable[[int], None] = None) -> List[dict]:
    """``translate_in_batches`` for n-best lists: ``nbest_fn`` maps a tf.string [batch] to the dict
    of ``Translator.translate_text_nbest`` (or the ``translate_nbest`` signature of an exported
    SavedModel). One dict per sentence, in input order: ``{"translations": [str] * beam, "scores":
    [float] * beam, "truncated": bool}``, best first."""
    results = [None] * len(sentences)
    for indices, outputs in _length_sorted_batches(nbest_fn, sentences, batch_size, progress):
        for row, index in enumerate(indices):
            results[index] = {"translations": [t.decode("utf-8", "replace")
                                               for t in outputs["translations"][row]],
                              "scores": [float(s) for s in outputs["scores"][row]],
                              "truncated": bool(outputs["truncated"][row])}
    return results


def _length_sorted_batches(translate_fn, sentences, batch_size, progress):
    """``(indices, outputs as NumPy)`` per batch of sentences of similar length (little padding)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}.")
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    for start in range(0, len(order), batch_size):
        indices = order[start:start + batch_size]
        batch = tf.constant([sentences[i] for i in indices], tf.string)
        yield indices, {k: np.asarray(v) for k, v in translate_fn(batch).items()}
        if progress is not None:
            progress(len(indices))


def load_exported_translate_fn(path: str):
    """The text signature of an exported SavedModel (``export.export_for_serving``) as a
    ``translate_fn`` for ``translate_in_batches`` / ``evaluation.translate_and_evaluate``. ``path``: a version folder, or the model's
    base folder (its highest numeric version). Returns ``(translate_fn, version_path)``; a missing
    or unusable export is a ValueError naming the path."""
    loaded, path = _load_exported(path)
    signature = loaded.signatures[TEXT_SIGNATURE]
    if "inputs" not in signature.structured_input_signature[1]:
        raise ValueError(f"{path} has no text signature: it is the ids-only export; use the "
                         "export without the _ids suffix.")
    return (lambda batch: signature(inputs=batch)), path


def load_exported_nbest_fn(path: str):
    """The ``translate_nbest`` signature of an exported SavedModel as an ``nbest_fn`` for
    ``translate_nbest_in_batches``; ``path`` as for ``load_exported_translate_fn``. Returns
    ``(nbest_fn, version_path, beam_size)``; an export without the signature (the ids-only one, or
    one written before n-best lists were exported) is a ValueError naming the path."""
    loaded, path = _load_exported(path)
    if NBEST_SIGNATURE not in loaded.signatures:
        if "inputs" not in loaded.signatures[TEXT_SIGNATURE].structured_input_signature[1]:
            raise ValueError(f"{path} has no text signature: it is the ids-only export; use the "
                             "export without the _ids suffix.")
        raise ValueError(f"{path} has no {NBEST_SIGNATURE} signature: it was exported before "
                         "n-best lists were; export the run again for them.")
    signature = loaded.signatures[NBEST_SIGNATURE]
    beam_size = signature.structured_outputs["scores"].shape[1]
    return (lambda batch: signature(inputs=batch)), path, beam_size


def exported_version_path(path: str) -> str:
    """``path`` if it holds a ``saved_model.pb``, else its highest numeric version folder that
    does; a ValueError naming the path if there is none."""
    if os.path.isfile(os.path.join(path, "saved_model.pb")):
        return path
    if not os.path.isdir(path):
        raise ValueError(f"SavedModel {path} does not exist.")
    versions = [int(n) for n in os.listdir(path)
                if n.isdigit() and os.path.isfile(os.path.join(path, n, "saved_model.pb"))]
    if not versions:
        raise ValueError(f"{path} holds no saved_model.pb and no numeric version folder with one.")
    return os.path.join(path, str(max(versions)))


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
