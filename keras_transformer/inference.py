"""Translation with a trained model: strings in, strings out, all in TensorFlow ops (section 6.1).

``Translator`` joins the three pieces that know nothing of each other: the tokenizer, the model
(``encode`` / ``init_cache`` / ``decode_step``) and the search (``decoding.beam_search``, which sees the
model only through one step function). Its two functions are what the SavedModel exports:

- ``translate_text(texts)``: ``tf.string [batch]`` -> ``{"translations", "scores", "truncated"}``;
- ``translate_ids(source_ids)``: int32 ``[batch, length]`` -> the n-best ``{"ids", "scores", "lengths"}``,
  core TensorFlow ops only (for servers built without the tf-text ops).

Inputs are answered, never crashed on: invalid UTF-8 is replaced by U+FFFD before tokenisation,
characters never seen in training are spelled as bytes by the tokenizer, an empty or whitespace-only
input gets an empty translation with score 0, and a sentence longer than the model's ``max_length``
subwords is cut to that length (its EOS included) and marked ``truncated`` in the output: the model
never saw longer sources in training, so translating the rest would be a guess.
"""

import dataclasses
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
        # One static output buffer for every batch (XLA-friendly); each sentence stops at its own
        # source length + extra_length.
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

    def translate_ids(self, source_ids):
        """int32 [batch, length] (subwords + EOS, 0-padded) -> n-best ``{"ids": [batch, beam, L],
        "scores": [batch, beam], "lengths": [batch, beam]}`` sorted best first."""
        source_ids = tf.cast(source_ids, tf.int32)
        memory, memory_mask = self.model.encode(source_ids)
        cache = self.model.init_cache(memory, memory_mask, self.max_decode_length)
        source_lengths = tf.reduce_sum(tf.cast(source_ids != self.model.config.pad_id, tf.int32), axis=1)
        start = tf.fill([tf.shape(source_ids)[0]], tf.constant(self.tokenizer.start_id, tf.int32))

        # Padding and the start symbol are never a next token; the model was not trained to rule
        # them out (they are never targets), so the search must.
        never = tf.scatter_nd([[self.tokenizer.pad_id], [self.tokenizer.start_id]], [-1e9, -1e9],
                              [self.model.config.output_vocab_size])

        def symbols_to_logits_fn(ids, i, cache):
            logits, cache = self.model.decode_step(ids[:, i], i, cache)
            return logits + never, cache

        result = decoding.beam_search(
            symbols_to_logits_fn, start, cache, beam_size=self.decoding.beam_size,
            alpha=self.decoding.alpha, max_decode_length=self.max_decode_length,
            eos_id=self.tokenizer.end_id, max_lengths=source_lengths + self.decoding.extra_length,
            pad_id=self.tokenizer.pad_id)
        return {"ids": result.ids, "scores": result.scores, "lengths": result.lengths}

    def translate_text(self, texts):
        """tf.string [batch] -> ``{"translations": tf.string, "scores": float32, "truncated": bool}``,
        each [batch]; the score is the best hypothesis' log P / length penalty."""
        source_ids, truncated, empty = self.source_ids(texts)
        best = self.translate_ids(source_ids)
        translations = self.tokenizer.detokenize(best["ids"][:, 0])
        return {"translations": tf.where(empty, tf.constant("", tf.string), translations),
                "scores": tf.where(empty, 0.0, best["scores"][:, 0]),
                "truncated": truncated}


def translate_in_batches(translate_fn: Callable, sentences: Sequence[str], batch_size: int = 32,
                         progress: Callable[[int], None] = None) -> List[dict]:
    """Translates ``sentences`` in batches of similar length (little padding) and returns one dict
    per sentence, in input order: ``{"translation": str, "score": float, "truncated": bool}``.

    ``translate_fn`` maps a tf.string [batch] to the dict of ``Translator.translate_text`` (or the
    same signature of an exported SavedModel). ``progress(n)`` is called after each batch.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}.")
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    results = [None] * len(sentences)
    for start in range(0, len(order), batch_size):
        indices = order[start:start + batch_size]
        batch = tf.constant([sentences[i] for i in indices], tf.string)
        outputs = {k: np.asarray(v) for k, v in translate_fn(batch).items()}
        for row, index in enumerate(indices):
            results[index] = {"translation": outputs["translations"][row].decode("utf-8", "replace"),
                              "score": float(outputs["scores"][row]),
                              "truncated": bool(outputs["truncated"][row])}
        if progress is not None:
            progress(len(indices))
    return results
