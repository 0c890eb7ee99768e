"""Two versions of the decoding code, A/B in one process: an earlier ``decoding.py`` (or whole
``keras_transformer`` package) against today's.

    git worktree add /tmp/before <commit>
    python -m benchmarks.search_ab --before=/tmp/before/keras_transformer/decoding.py --before_name=<commit>
    python -m benchmarks.search_ab --before=/tmp/before/keras_transformer --before_name=<commit>

With a ``decoding.py`` both searches get the same model (a randomly initialised preset), the same
step function and caches (``inference.search_inputs``, as the Translator builds them); with a
package folder the earlier search runs the earlier model code and step function, with the same
weights. Both get the same batches of random source ids; each configuration is traced and compiled
for both first, then the two are timed alternately (ABBA...) so that drifts of the machine's speed
fall on both. Outputs of a search-only change must be identical (else the run stops); a model
change may round differently, so there the count of identical outputs is reported. Speed depends on the weights only through output lengths, which are the same for both.
Prints one line per configuration and writes JSON (--output): median seconds of each and their
ratio. Not a test: numbers depend on the machine and its load.
"""

import os
import statistics
import time

from absl import app, flags

from benchmarks import common
from benchmarks.earlier_version import load_before, model_of
from trainers import console, decoding_flags

# --alpha and --extra_length as every command has them; the beam sizes come from --configs.
flags.adopt_module_key_flags(decoding_flags)

flags.DEFINE_string("before", None, "The earlier decoding.py, or keras_transformer folder (e.g. "
                    "from a git worktree).")
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
flags.DEFINE_integer("inter_op_threads", 1, "TensorFlow inter-op threads (0: its default, one per "
                     "core; with one intra-op thread two inter-op threads still use two cores).",
                     lower_bound=0)
flags.DEFINE_string("output", os.path.join("runs", "benchmarks", "search_ab.json"), "JSON results.")
FLAGS = flags.FLAGS


def make_search(decoding, model, search, xla, package=None):
    """A tf.function: source ids -> (best ids, decoder steps), the Translator's way (with
    ``package``'s step function: an earlier version's, or today's if None)."""
    import tensorflow as tf

    if package is None:
        from keras_transformer.inference import search_inputs
    else:
        search_inputs = package.inference.search_inputs
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
    if FLAGS.inter_op_threads:
        tf.config.threading.set_inter_op_parallelism_threads(FLAGS.inter_op_threads)
    import keras_transformer as kt
    from keras_transformer import decoding

    before, package = load_before(FLAGS.before)
    keras.utils.set_random_seed(1)
    model = kt.Transformer(kt.TransformerConfig.from_preset(FLAGS.preset, vocab_size=8000,
                                                           max_length=FLAGS.source_length + 1))
    before_model = model_of(package, model)
    rng = np.random.default_rng(0)
    results = {}
    for config in FLAGS.configs:
        search, batch, mode = config.split(":")
        source = tf.constant(random_sources(int(batch), 8000, rng))
        versions = {"before": make_search(before, before_model, search, mode == "xla", package),
                    "after": make_search(decoding, model, search, mode == "xla")}
        outputs = {name: fn(source) for name, fn in versions.items()}  # trace, compile
        same = np.all(outputs["before"][0].numpy() == outputs["after"][0].numpy(), axis=1)
        identical = f"{int(same.sum())}/{same.size}"
        if package is None and not same.all():
            raise app.UsageError(f"{config}: the two versions translate differently.")
        times = {"before": [], "after": []}
        cpu = {"before": [], "after": []}
        for round_ in range(FLAGS.rounds):
            for name in ("before", "after") if round_ % 2 == 0 else ("after", "before"):
                started, started_cpu = time.perf_counter(), time.process_time()
                versions[name](source)[0].numpy()
                times[name].append(time.perf_counter() - started)
                cpu[name].append(time.process_time() - started_cpu)
        median = {name: statistics.median(values) for name, values in times.items()}
        median_cpu = {name: statistics.median(values) for name, values in cpu.items()}
        # CPU seconds of this process: what the code costs, less disturbed than the wall clock
        # by other processes on a shared machine (with one thread, as by default, the two agree
        # on an idle one).
        results[config] = {"median_seconds": median, "runs": times,
                           "median_cpu_seconds": median_cpu, "cpu_runs": cpu,
                           "speed_after_over_before": median["before"] / median["after"],
                           "cpu_speed_after_over_before": median_cpu["before"] / median_cpu["after"],
                           "steps": int(outputs["after"][1]), "identical": identical}
        print(f"{config}: before {median['before']:.3f} s, after {median['after']:.3f} s, "
              f"speed after/before {median['before'] / median['after']:.3f}; CPU s before "
              f"{median_cpu['before']:.3f}, after {median_cpu['after']:.3f}, speed "
              f"{median_cpu['before'] / median_cpu['after']:.3f} ({int(outputs['after'][1])} "
              f"steps, identical outputs {identical})", flush=True)
    common.write_json(FLAGS.output, {
        "before": FLAGS.before_name or common.shown_path(FLAGS.before), "preset": FLAGS.preset,
        "cpus": os.cpu_count(), "intra_op_threads": FLAGS.intra_op_threads,
        "inter_op_threads": FLAGS.inter_op_threads, "load_average_end": os.getloadavg(),
        "results": results})


if __name__ == "__main__":
    console.run(main)
