"""Synthetic copy / reverse tasks: a seconds-long check that a model and recipe can learn, and
fixed-shape batches for the training tests. Not a substitute for real data.

Batch ``i`` of input pipeline ``p`` depends only on ``(seed, i, p)`` (stateless random ops), so a
run that is restarted and skips the batches it already consumed sees exactly the same data.
"""

import tensorflow as tf

FIRST_WORD_ID = 4  # after pad=0, unk=1, BOS=2, EOS=3
BOS_ID, EOS_ID = 2, 3
TASKS = ("copy", "reverse")


def toy_batch(index, *, task: str, vocab_size: int, batch_size: int, min_length: int,
              max_length: int, seed: int = 0):
    """One batch ``((source, target_in), target_out)``; source = words + [EOS], padded to
    ``max_length + 1``; target = the words copied or reversed, as in the model's data contract."""
    if task not in TASKS:
        raise ValueError(f"Unknown toy task {task!r}; choose one of {TASKS}.")
    if not FIRST_WORD_ID < vocab_size:
        raise ValueError(f"vocab_size must exceed {FIRST_WORD_ID}, got {vocab_size}.")
    if not 1 <= min_length <= max_length:
        raise ValueError(f"Need 1 <= min_length <= max_length, got {min_length}, {max_length}.")
    index = tf.cast(index, tf.int32)
    seeds = tf.stack([tf.constant(seed, tf.int32), index])
    words = tf.random.stateless_uniform([batch_size, max_length], seed=seeds,
                                        minval=FIRST_WORD_ID, maxval=vocab_size, dtype=tf.int32)
    lengths = tf.random.stateless_uniform([batch_size], seed=seeds + [0, 1 << 30],
                                          minval=min_length, maxval=max_length + 1,
                                          dtype=tf.int32)
    positions = tf.range(max_length)[tf.newaxis, :]
    valid = positions < lengths[:, tf.newaxis]
    words = tf.where(valid, words, 0)
    if task == "reverse":
        words = tf.reverse_sequence(words, lengths, seq_axis=1, batch_axis=0)
    source_words = words if task == "copy" else tf.reverse_sequence(words, lengths, 1, 0)
    eos = tf.one_hot(lengths, max_length + 1, on_value=EOS_ID, off_value=0, dtype=tf.int32)
    pad_column = tf.zeros([batch_size, 1], tf.int32)
    source = tf.concat([source_words, pad_column], 1) + eos
    target_out = tf.concat([words, pad_column], 1) + eos
    target_in = tf.concat([tf.fill([batch_size, 1], BOS_ID), words], 1)
    return (source, target_in), target_out


def toy_dataset_fn(*, task: str = "reverse", vocab_size: int = 16, global_batch_size: int = 32,
                   min_length: int = 2, max_length: int = 8, seed: int = 0):
    """A ``dataset_fn(input_context)`` for ``strategy.distribute_datasets_from_function``: an
    endless stream of per-replica batches (the global batch split evenly over replicas)."""

    def dataset_fn(context: tf.distribute.InputContext = None):
        context = context or tf.distribute.InputContext()
        batch_size = context.get_per_replica_batch_size(global_batch_size)
        pipelines, pipeline = context.num_input_pipelines, context.input_pipeline_id
        # Per-replica batch k of pipeline p is stream index k * pipelines + p: disjoint streams.
        return tf.data.Dataset.range(1 << 62).map(lambda k: toy_batch(
            k * pipelines + pipeline, task=task, vocab_size=vocab_size, batch_size=batch_size,
            min_length=min_length, max_length=max_length, seed=seed))

    return dataset_fn


def one_batch_fn(index: int = 0, *, repeat: bool = True, vocab_size: int = 16):
    """A ``dataset_fn`` of one small reverse-task batch (number ``index``), endless (a training
    set) or once (a dev set)."""

    def dataset_fn(context=None):
        dataset = tf.data.Dataset.from_tensors(toy_batch(
            index, task="reverse", vocab_size=vocab_size, batch_size=8, min_length=2,
            max_length=6))
        return dataset.repeat() if repeat else dataset

    return dataset_fn


WORDS = ["the", "house", "is", "small", "big", "a", "cat", "dog", "sees", "red", "old", "tree"]
GERMAN = ["das", "Haus", "ist", "klein", "groß", "eine", "Katze", "Hund", "sieht", "rot", "alt",
          "Baum"]


def write_word_for_word_corpus(folder, splits=(("train", 300), ("dev", 16))):
    """``folder/train.tsv`` and ``folder/dev.tsv``: English word strings and their German word for
    word, a corpus the commands' own data path (--dataset=files) learns a vocabulary from."""
    import numpy as np

    rng = np.random.default_rng(0)
    for split, count in splits:
        with open(f"{folder}/{split}.tsv", "w") as stream:
            for _ in range(count):
                ids = rng.integers(0, len(WORDS), size=rng.integers(2, 7))
                stream.write(" ".join(WORDS[i] for i in ids) + "\t"
                             + " ".join(GERMAN[i] for i in ids) + "\n")
