"""Token-budget batches grouped by length, as in section 5.1 of the paper.

"Sentence pairs were batched together by approximate sequence length. Each training batch
contained a set of sentence pairs containing approximately 25000 source tokens and 25000
target tokens." We follow tensor2tensor's bucketing: bucket boundaries grow by ~x1.1 from 8
up to ``max_length``; a bucket of boundary L gets batches of ``token_budget // L`` examples
and every batch is padded to exactly L on both sides, so the batch holds at most
``token_budget`` tokens per side (padding included) and XLA sees a small fixed set of shapes.
By default boundaries are put on a grid of multiples of 8 (``multiple=8``): this merges the
small buckets below ~100 tokens, where x1.1 adds one bucket per token, so max_length 256
gives 21 shapes instead of tensor2tensor's 42, at the price of up to 7 padding tokens per
sentence there, a large share of short sentences (docs/data.md measures it; ``multiple=1`` is
tensor2tensor's exact grid). Batch sizes are rounded down to multiples of
8. Examples longer than ``max_length`` on either side are dropped (and counted by
:func:`length_statistics`).

Examples are ``((source_ids, target_input_ids), target_output_ids)``, int32, padded with 0:
source = subwords + [EOS], target input = [BOS] + subwords, target output = subwords + [EOS].
"""

import dataclasses
import math
from typing import Callable, Optional, Set, Tuple

import numpy as np
import tensorflow as tf

from keras_transformer.tokenizer import PAD_ID, dense_ids


def bucket_boundaries(
    max_length: int, min_length: int = 8, growth: float = 1.1, multiple: int = 8
) -> Tuple[int, ...]:
    """Upper lengths of the buckets: min_length, ~x growth each, rounded up to ``multiple``,
    the last one exactly ``max_length``."""
    if max_length < min_length:
        raise ValueError(f"max_length={max_length}: must be at least {min_length}.")
    boundaries = []
    x = min_length
    while x < max_length:
        boundaries.append(x)
        # tensor2tensor's rule max(x + 1, int(x * 1.1)), on a grid of `multiple`.
        x = max(x + multiple, int(math.ceil(int(x * growth) / multiple)) * multiple)
    boundaries.append(max_length)
    return tuple(boundaries)


@dataclasses.dataclass(frozen=True)
class BucketSpec:
    """Bucket boundaries and per-bucket batch sizes for one token budget (per replica)."""

    boundaries: Tuple[int, ...]
    batch_sizes: Tuple[int, ...]
    token_budget: int

    @property
    def max_length(self) -> int:
        return self.boundaries[-1]

    @classmethod
    def make(cls, max_length: int, token_budget: int, multiple: int = 8) -> "BucketSpec":
        """Boundaries on a grid of ``multiple`` (see :func:`bucket_boundaries`); batch size
        per bucket = token_budget // boundary, rounded down to a multiple of 8 when that
        leaves at least 8 examples."""
        if token_budget < max_length:
            raise ValueError(
                f"token_budget={token_budget} (per replica) is smaller than max_length="
                f"{max_length}: one longest example would not fit; raise the budget or "
                "lower max_length."
            )
        boundaries = bucket_boundaries(max_length, multiple=multiple)
        sizes = []
        for boundary in boundaries:
            size = token_budget // boundary
            if size >= 8:
                size -= size % 8
            sizes.append(size)
        return cls(boundaries, tuple(sizes), token_budget)


def encode_pairs(pairs: tf.data.Dataset, tokenizer, chunk: int = 1024) -> tf.data.Dataset:
    """(source text, target text) -> ((source_ids, target_input_ids), target_output_ids).

    Tokenizes ``chunk`` sentences per op call (much faster than one at a time).
    """

    def encode(source_text, target_text):
        target = tokenizer.tokenize(target_text)
        # Dense + lengths: unbatched ragged rows are not accepted by padded_batch.
        source, source_length = dense_ids(tokenizer.tokenize(source_text), end=True)
        target_input, _ = dense_ids(target, start=True)
        target_output, target_length = dense_ids(target, end=True)
        return source, source_length, target_input, target_output, target_length

    def trim(source, source_length, target_input, target_output, target_length):
        return (
            (source[:source_length], target_input[:target_length]),
            target_output[:target_length],
        )

    return (
        pairs.batch(chunk)
        .map(encode, num_parallel_calls=tf.data.AUTOTUNE)
        .unbatch()
        .map(trim, num_parallel_calls=tf.data.AUTOTUNE)
    )


def example_length(inputs, target_output) -> tf.Tensor:
    """The bucketing key: the longer side (both sides are padded to the same boundary)."""
    source, _ = inputs
    return tf.maximum(tf.shape(source)[0], tf.shape(target_output)[0])


def bucket_batch(
    examples: tf.data.Dataset, spec: BucketSpec, drop_remainder: bool = False
) -> tf.data.Dataset:
    """Drops examples longer than ``spec.max_length``; groups the rest into padded batches.

    Each batch has ``spec.batch_sizes[k]`` examples (fewer only for a bucket's last batch
    when ``drop_remainder`` is False) padded to ``spec.boundaries[k]``.
    """
    boundaries = tf.constant(spec.boundaries, tf.int64)
    batch_sizes = tf.constant(spec.batch_sizes, tf.int64)
    max_length = spec.max_length

    def bucket_id(inputs, target_output):
        length = tf.cast(example_length(inputs, target_output), tf.int64)
        return tf.reduce_sum(tf.cast(boundaries < length, tf.int64))

    def batch_bucket(key, window):
        length = boundaries[key]
        return window.padded_batch(
            batch_sizes[key],
            padded_shapes=(([length], [length]), [length]),
            padding_values=((PAD_ID, PAD_ID), PAD_ID),
            drop_remainder=drop_remainder,
        )

    return examples.filter(
        lambda inputs, output: example_length(inputs, output) <= max_length
    ).group_by_window(
        key_func=bucket_id,
        reduce_func=batch_bucket,
        window_size_func=lambda key: batch_sizes[key],
    )


def make_batches(
    pairs: tf.data.Dataset,
    tokenizer,
    spec: BucketSpec,
    *,
    shuffle_buffer: int = 0,
    seed: Optional[int] = None,
    drop_remainder: bool = False,
    repeat: bool = False,
    cache_tokens: bool = False,
) -> tf.data.Dataset:
    """Text pairs -> shuffled (optionally), tokenized, bucketed, prefetched batches.

    ``cache_tokens``: tokenize each pair once and keep its ids in memory (tf.data's ``cache``),
    so later passes only shuffle and bucket, as fairseq's binarized data and tensor2tensor's
    encoded TFRecords do. The batches stay the same (a shuffle's order does not depend on what
    its elements hold). Not for a tokenizer that samples: subword sampling draws new pieces on
    every pass."""
    examples = encode_pairs(pairs, tokenizer).cache() if cache_tokens else pairs
    if shuffle_buffer:
        examples = examples.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        examples = examples.repeat()
    if not cache_tokens:
        examples = encode_pairs(examples, tokenizer)
    batches = bucket_batch(examples, spec, drop_remainder)
    if shuffle_buffer:
        # Buckets fill at different rates; mixing batches avoids long runs of one length.
        batches = batches.shuffle(64, seed=seed, reshuffle_each_iteration=True)
    return batches.prefetch(tf.data.AUTOTUNE)


def distributed_dataset_fn(
    make_pairs: Callable[[], tf.data.Dataset],
    tokenizer,
    max_length: int,
    global_token_budget: int,
    bucket_multiple: int = 8,
    **batch_kwargs,
) -> Callable[[tf.distribute.InputContext], tf.data.Dataset]:
    """A ``dataset_fn`` for ``strategy.distribute_datasets_from_function``.

    The global token budget is split evenly across replicas (every replica's batch holds
    ``global_token_budget // num_replicas`` tokens per side, so a step holds the paper's
    budget in total); each input pipeline (worker) reads a disjoint shard of the pairs,
    so one pass covers every example exactly once.
    """

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        spec = BucketSpec.make(
            max_length, global_token_budget // context.num_replicas_in_sync, bucket_multiple
        )
        pairs = make_pairs()
        if context.num_input_pipelines > 1:
            pairs = pairs.shard(context.num_input_pipelines, context.input_pipeline_id)
        return make_batches(pairs, tokenizer, spec, **batch_kwargs)

    return dataset_fn


@dataclasses.dataclass(frozen=True)
class BatchStats:
    """What one pass over batched data holds (padding counts pad tokens of both sides)."""

    batches: int
    examples: int
    source_tokens: int
    target_tokens: int
    padded_source_tokens: int
    padded_target_tokens: int
    max_batch_tokens: int
    shapes: Tuple[Tuple[int, int], ...]

    @property
    def padding_fraction(self) -> float:
        padded = self.padded_source_tokens + self.padded_target_tokens
        return 1.0 - (self.source_tokens + self.target_tokens) / padded if padded else 0.0


def batch_statistics(batches: tf.data.Dataset) -> BatchStats:
    """Counts batches, examples, real and padded tokens, and distinct (batch, length) shapes."""
    n_batches = n_examples = src = tgt = src_padded = tgt_padded = biggest = 0
    shapes: Set[Tuple[int, int]] = set()
    for (source, _), target in batches.as_numpy_iterator():
        n_batches += 1
        n_examples += source.shape[0]
        src += int(np.count_nonzero(source))
        tgt += int(np.count_nonzero(target))
        src_padded += source.size
        tgt_padded += target.size
        biggest = max(biggest, source.size, target.size)
        shapes.add(source.shape)
    return BatchStats(
        n_batches, n_examples, src, tgt, src_padded, tgt_padded, biggest,
        tuple(sorted(shapes)),
    )


@dataclasses.dataclass(frozen=True)
class LengthStats:
    """Token counts per sentence (with EOS) of one split, and how many exceed max_length."""

    examples: int
    source_mean: float
    source_p95: float
    target_mean: float
    target_p95: float
    too_long: int


def length_statistics(examples: tf.data.Dataset, max_length: int) -> LengthStats:
    """Per-sentence token statistics of encoded examples; ``too_long`` = dropped by batching."""
    lengths = examples.map(
        lambda inputs, output: (tf.shape(inputs[0])[0], tf.shape(output)[0]),
        num_parallel_calls=tf.data.AUTOTUNE,
    ).batch(4096)
    source, target = [], []
    for s, t in lengths.as_numpy_iterator():
        source.append(s)
        target.append(t)
    if not source:
        return LengthStats(0, 0.0, 0.0, 0.0, 0.0, 0)
    source, target = np.concatenate(source), np.concatenate(target)
    return LengthStats(
        examples=int(source.size),
        source_mean=float(source.mean()),
        source_p95=float(np.percentile(source, 95)),
        target_mean=float(target.mean()),
        target_p95=float(np.percentile(target, 95)),
        too_long=int(np.count_nonzero(np.maximum(source, target) > max_length)),
    )
