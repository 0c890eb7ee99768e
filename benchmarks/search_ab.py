"""Two versions of the search code, A/B in one process: an earlier ``decoding.py`` against today's.

    git worktree add /tmp/before <commit>
    python -m benchmarks.search_ab --before=/tmp/before/keras_transformer/decoding.py --before_name=<commit>

Both searches get the same model (a randomly initialised preset), the same step function and
caches (``inference.search_inputs``, as the Translator builds them) and the same batches of random
source ids; each configuration is traced and compiled for both first, its outputs must be
identical, then the two are timed alternately (ABBA...) so that drifts of the machine's speed fall
on both. Speed depends on the weights only through output lengths, which are the same for both.
Prints one line per configuration and writes JSON (--output): median seconds of each and their
ratio. Not a test: numbers depend on the machine and its load.
"""

import importlib.util
import json
import os
import statistics
import time

from absl import app, flags

from trainers import console, decoding_flags

# --alpha and --extra_length as every command has them; the beam sizes come from --configs.
flags.adopt_module_key_flags(decoding_flags)

flags.DEFINE_string("before", None, "The earlier decoding.py (e.g. from a git worktree).")
flags.mark_flag_as_required("before")
flags.DEFINE_string("before_name", None, "What --before is (e.g. its commit), recorded in the JSON "
                    "instead of its path.")
flags.DEFINE_string("preset", "small", "Model preset (random weights).")
flags.DEFINE_list("configs", ["beam4:16:off", "beam4:64:off", "beam4:16:xla"],
                  "SEARCH:BATCH:off|xla, SEARCH = beamK or greedy.")
flags.DEFINE_integer("source_length", 24, "Padded source length (sentences of 8 to this many "
                     "tokens).", lower_bound=9)
flags.DEFINE_integer("rounds", 7, "Timed runs of each version per configuration.", lower_bound=1)
flags.DEFINE_integer("intra_op_threads", 1, "TensorFlow intra-op threads (0: its default).",
                     lower_bound=0)
flags.DEFINE_string("output", os.path.join("runs", "benchmarks", "search_ab.json"), "JSON results.")
FLAGS = flags.FLAGS


def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_search(decoding, model, search, xla):
    """A tf.function: source ids -> (best ids, decoder steps), the Translator's way."""
    import tensorflow as tf

    from keras_transformer.inference import search_inputs
    from keras_transformer.tokenizer import END_ID, PAD_ID, START_ID

    never = tf.scatter_nd([[PAD_ID], [START_ID]], [-1e9, -1e9], [model.config.output_vocab_size])

    def run(source):
        memory, mask = model.encode(source)
        limits = tf.reduce_sum(tf.cast(source != PAD_ID, tf.int32), 1) + FLAGS.extra_length
        buffer = source.shape[1] + FLAGS.extra_length
        cache, shared, step = search_inputs(model, memory, mask, buffer if xla else None,
                                            logits_bias=never)
        start = tf.fill([tf.shape(source)[0]], START_ID)
        if search == "greedy":
            result = decoding.greedy_search(step, start, cache, buffer, END_ID, max_lengths=limits,
                                            shared_cache=shared)
            return result.ids, result.steps
        beam_size = int(search[len("beam"):])
        result = decoding.beam_search(step, start, cache, beam_size, FLAGS.alpha, buffer, END_ID,
                                      max_lengths=limits, n_best=1, shared_cache=shared)
        return result.ids[:, 0], result.steps

    return tf.function(run, jit_compile=xla)


def random_sources(batch, vocab, rng):
    import numpy as np

    from keras_transformer.tokenizer import END_ID

    source = np.zeros((batch, FLAGS.source_length), np.int32)
    for row, length in enumerate(rng.integers(8, FLAGS.source_length, size=batch)):
        source[row, :length - 1] = rng.integers(4, vocab, size=length - 1)
        source[row, length - 1] = END_ID
    return source


def main(argv):
    import keras
    import numpy as np
    import tensorflow as tf

    if FLAGS.intra_op_threads:
        tf.config.threading.set_intra_op_parallelism_threads(FLAGS.intra_op_threads)
    import keras_transformer as kt
    from keras_transformer import decoding

    before = load_module(FLAGS.before, "decoding_before")
    keras.utils.set_random_seed(1)
    model = kt.Transformer(kt.TransformerConfig.from_preset(FLAGS.preset, vocab_size=8000,
                                                           max_length=FLAGS.source_length + 1))
    rng = np.random.default_rng(0)
    results = {}
    for config in FLAGS.configs:
        search, batch, mode = config.split(":")
        source = tf.constant(random_sources(int(batch), 8000, rng))
        versions = {"before": make_search(before, model, search, mode == "xla"),
                    "after": make_search(decoding, model, search, mode == "xla")}
        outputs = {name: fn(source) for name, fn in versions.items()}  # trace, compile
        if not np.array_equal(outputs["before"][0].numpy(), outputs["after"][0].numpy()):
            raise app.UsageError(f"{config}: the two versions translate differently.")
        times = {"before": [], "after": []}
        for round_ in range(FLAGS.rounds):
            for name in ("before", "after") if round_ % 2 == 0 else ("after", "before"):
                started = time.perf_counter()
                versions[name](source)[0].numpy()
                times[name].append(time.perf_counter() - started)
        median = {name: statistics.median(values) for name, values in times.items()}
        results[config] = {"median_seconds": median, "runs": times,
                           "speed_after_over_before": median["before"] / median["after"],
                           "steps": int(outputs["after"][1])}
        print(f"{config}: before {median['before']:.3f} s, after {median['after']:.3f} s, "
              f"speed after/before {median['before'] / median['after']:.3f} "
              f"({int(outputs['after'][1])} steps, identical outputs)", flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(FLAGS.output)), exist_ok=True)
    with open(FLAGS.output, "w") as stream:
        json.dump({"before": FLAGS.before_name or FLAGS.before, "preset": FLAGS.preset,
                   "cpus": os.cpu_count(),
                   "results": results}, stream, indent=1)


if __name__ == "__main__":
    console.run(main)
