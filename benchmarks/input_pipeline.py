"""Input-pipeline throughput: is tokenization + length bucketing ever what limits training?

    python -m benchmarks.input_pipeline                       # offline Ding corpus, train split
    python -m benchmarks.input_pipeline --token_budget=4096 --output=runs/bench/input.json
    python -m benchmarks.input_pipeline --smoke --output=/tmp/input.json     # seconds

Measures examples/s and tokens/s (real subword tokens of both sides; padded tokens in
brackets) for one epoch of token-budget batches (text cached in memory, so this is
tokenization + bucketing + padding, not disk), for the two bucket grids (multiples of 8, the
trainer's with --xla, and tensor2tensor's exact x1.1 grid, the trainer's without XLA), and for
the batches the trainer reads (``data.make_dataset``: tokenized once and cached, shuffled,
repeated), after a first pass has filled their cache, with tf.data's autotune on and off
(multi-device runs read it off). Prints a table and writes JSON. Not a test: timings depend on
the machine and its load.
"""

import os
import time

from absl import flags

from benchmarks import common
from trainers import console, data_flags

flags.DEFINE_string("output", os.path.join("runs", "benchmarks", "input_pipeline.json"),
                    "Where to write the JSON results.")
flags.DEFINE_integer("train_batches", 200, "Batches timed in the shuffled, repeated run.")
flags.DEFINE_integer("epochs", 2, "Timed epochs per bucket grid (after one warm-up epoch).")
flags.DEFINE_bool("smoke", False, "Seconds-long run of every code path (one epoch of the dev "
                  "split, 5 training batches, a 512-subword vocabulary, 1,024-token batches).")

FLAGS = flags.FLAGS


def _count(batches, limit=None, examples_limit=None):
    """Iterates (up to ``limit`` batches or ``examples_limit`` examples); returns (seconds,
    batches, examples, real tokens, padded tokens, shapes)."""
    n = examples = real = padded = 0
    shapes, start = set(), time.perf_counter()
    for (source, _), target in batches:
        n += 1
        examples += int(source.shape[0])
        # Real tokens are the non-pad ids; counting on the host is part of what we time.
        real += int((source.numpy() != 0).sum() + (target.numpy() != 0).sum())
        padded += int(source.shape[0] * source.shape[1] + target.shape[0] * target.shape[1])
        shapes.add(tuple(source.shape))
        if (limit and n >= limit) or (examples_limit and examples >= examples_limit):
            break
    return time.perf_counter() - start, n, examples, real, padded, len(shapes)


def _row(name, seconds, n, examples, real, padded, shapes):
    return {
        "run": name, "seconds": round(seconds, 3), "batches": n, "examples": examples,
        "examples_per_s": round(examples / seconds, 1), "tokens_per_s": round(real / seconds, 1),
        "padded_tokens_per_s": round(padded / seconds, 1),
        "padding_fraction": round(1 - real / padded, 4) if padded else 0.0,
        "distinct_shapes": shapes,
    }


def main(argv):
    del argv  # console.run has refused stray arguments
    config = data_flags.data_config(**(dict(vocab_size=512, token_budget=1024) if FLAGS.smoke else {}))
    split, epochs, train_batches = ("dev", 1, 5) if FLAGS.smoke else ("train", FLAGS.epochs,
                                                                       FLAGS.train_batches)
    import tensorflow as tf

    from keras_transformer import data
    from keras_transformer.data import batching

    tokenizer, _ = data.load_or_learn_tokenizer(config)
    pairs = data.load_text_pairs(config, split).cache()
    rows = []
    for multiple in sorted({config.bucket_multiple, 8, 1}, reverse=True):
        spec = batching.BucketSpec.make(config.max_length, config.token_budget, multiple)
        batches = batching.make_batches(pairs, tokenizer, spec)
        _count(batches)  # warm-up: fills the text cache, traces the functions
        totals = [0.0, 0, 0, 0, 0, 0]
        for _ in range(epochs):
            result = _count(batches)
            totals = [a + b for a, b in zip(totals, result[:5])] + [result[5]]
        name = (f"epoch, grid x{multiple} ({len(spec.boundaries)} buckets): "
                + ("with --xla" if multiple == 8 else "without XLA (tensor2tensor's grid)"))
        rows.append(_row(name, *totals))
    training = data.make_dataset(config, tokenizer, split, training=True, repeat=True)
    untuned = tf.data.Options()
    untuned.autotune.enabled = False  # strategy.multi_device_input_without_autotune
    for name, batches in ((f"training (the trainer's batches), {train_batches} batches", training),
                          ("the same, autotune off (as mirrored and multi-worker runs read it)",
                           training.with_options(untuned))):
        _count(batches, examples_limit=rows[-1]["examples"] // epochs)  # one pass: fills the cache
        rows.append(_row(name, *_count(batches, limit=train_batches)))

    print(f"input pipeline: {config.dataset} {split}, vocabulary {tokenizer.vocab_size}, "
          f"token budget {config.token_budget}/side, max_length {config.max_length}, "
          f"{os.cpu_count()} CPUs")
    table = common.markdown(
        [{**r, "tokens/s (padded)": f"{r['tokens_per_s']:,.0f} ({r['padded_tokens_per_s']:,.0f})",
          "examples/s": f"{r['examples_per_s']:,.0f}",
          "padding": f"{100 * r['padding_fraction']:.1f}%"} for r in rows],
        ["run", "batches", "examples/s", "tokens/s (padded)", "padding", "distinct_shapes"])
    print(table)
    result = {
        "machine": common.machine(), "dataset": config.dataset, "split": split,
        "vocab_size": tokenizer.vocab_size, "token_budget": config.token_budget,
        "max_length": config.max_length, "runs": rows, "markdown": table,
    }
    common.write_json(FLAGS.output, result)
    print(f"wrote {FLAGS.output}")


if __name__ == "__main__":
    console.run(main)
