"""Decoding throughput: beam 4 and greedy, with and without the key/value cache, with and without XLA.

    python -m benchmarks.decoding                                  # random `small` model, Ding test set
    python -m benchmarks.decoding --model_dir=runs/small --checkpoint=averaged
    python -m benchmarks.decoding --smoke                          # seconds: tiny model, few sentences

Measures sentences/s and output tokens/s of the search of section 6.1 on real test sentences (the
offline Ding corpus by default; with --model_dir the run's own data and vocabulary), batched as
``trainers.translate`` batches them (sorted by length), per batch size. Each batch is padded to a
multiple of 8 tokens and decoded into a buffer of that length + --extra_length, so XLA compiles few
shapes; the first pass over the batches (tracing, compiling) is reported separately and not timed.

Every search goes through ``inference.Translator.search``, the door the translator and the exports
use, which decides the cache:

* cached (``incremental=True``): one ``model.decode_step`` per output position; the self-attention
  keys/values grow by one step per step, the encoder's keys/values are kept once per sentence, and
  a sentence whose result is final leaves the batch. XLA needs fixed shapes, so under XLA the cache
  is buffers of the batch's output buffer length and every sentence stays until all are done;
* uncached (``incremental=False``): every step re-runs the teacher-forced decoder over the prefix
  decoded so far, as a naive implementation would (under XLA over the whole buffer, the causal mask
  hiding the future; tests/test_inference.py::test_cached_search_equals_rerunning_the_whole_prefix).

The length sweep forces every output to exactly N tokens (EOS banned, limit N) and reports the time
per sentence and per decoder step: constant per step with the cache, growing with N without it.

The CTranslate2 part (``--parts=ctranslate2``; ``pip install ctranslate2``) exports the same
weights (``keras_transformer.export.ctranslate2``) and decodes the same test sentences, batched the
same way (--ctranslate2_batch_sizes), with our search and with CTranslate2 float32 on the same
number of threads: TensorFlow's intra-op x inter-op threads (--intra_op_threads,
--inter_op_threads, one each by default; a graph runs independent ops on its inter-op threads, so
one intra-op thread may keep two cores busy), CTranslate2's intra_threads (--threads). Greedy and
beam 4, no length penalty (the two engines' differ), one length limit per batch (the longest
source, at most the model's max_length, + extra_length), no minimum length, pad and start
excluded on both sides. It reports both speeds, their ratio (of median wall-clock times, of the
fastest runs, of median CPU seconds: the least disturbed by other processes) and the fraction of
identical translations (token ids), meaningful for a trained model only (--model_dir: random
weights run to the limit, where near-ties decide). A change is compared with the code before it
by running this benchmark in a worktree of the parent commit too (docs/development.md).

Without --model_dir the weights are random: speed depends on them only through the output lengths
(a random model rarely emits EOS: every output runs to input length + extra_length), which the
length sweep covers. Prints a Markdown table and writes JSON (--output); timings are the median of
--runs runs with min and max. Not a test: numbers depend on the machine and its load.
"""

import os
import statistics
import time

from absl import app, flags

from benchmarks import common
from trainers import console, decoding_flags, thread_flags

flags.adopt_module_key_flags(thread_flags)
# --alpha and --extra_length as every command has them; the beam sizes come from --searches.
flags.adopt_module_key_flags(decoding_flags)
# One intra-op thread: the fastest for decoding the small model on this CPU (see trainers/thread_flags.py).
flags.FLAGS.set_default("intra_op_threads", 1)

flags.DEFINE_string("model_dir", None, "A training run (default: a randomly initialised model).")
flags.DEFINE_string("checkpoint", None, "With --model_dir: 'averaged', a prefix or a folder.")
flags.DEFINE_string("preset", "small", "Model preset without --model_dir.")
flags.DEFINE_string("data_dir", None, "Where the Ding corpus and vocabulary are prepared (default "
                    "data/ if it exists, else runs/benchmarks/data).")
flags.DEFINE_list("batch_sizes", ["1", "16", "64"], "Batch sizes.")
flags.DEFINE_list("searches", ["beam4", "greedy"], "beamK (beam size K) and/or greedy.")
flags.DEFINE_list("uncached_batch_sizes", ["1", "16"],
                  "Batch sizes also run without the cache (it is slow: O(length^2) per sentence).")
flags.DEFINE_integer("min_sentences", 8, "Sentences per timed run at least (batch size 1 runs "
                     "this many batches; larger batch sizes one batch).", lower_bound=1)
flags.DEFINE_integer("runs", 3, "Timed runs per configuration (median, min, max).", lower_bound=1)
flags.DEFINE_list("lengths", ["8", "16", "32", "64", "128"], "Output lengths of the length sweep.")
flags.DEFINE_integer("sweep_batch_size", 16, "Batch size of the length sweep.")
flags.DEFINE_integer("uncached_max_length", 64, "Longest output length of the sweep also run "
                     "without the cache (128 steps uncached take minutes on 2 cores).")
flags.DEFINE_string("output", os.path.join("runs", "benchmarks", "decoding.json"), "JSON results.")
flags.DEFINE_bool("smoke", False, "Seconds-long run of every code path: tiny model, 2 sentences.")
PARTS = ("throughput", "sweep", "ctranslate2")
flags.DEFINE_list("parts", list(PARTS), f"Which measurements: any of {', '.join(PARTS)}.")
flags.DEFINE_integer("ctranslate2_sentences", 128, "Test sentences of the CTranslate2 comparison.",
                     lower_bound=1)
flags.DEFINE_list("ctranslate2_batch_sizes", ["16", "64"], "Batch sizes of the CTranslate2 "
                  "comparison.")
flags.DEFINE_integer("threads", 0, "CTranslate2 intra_threads (0: as many as TensorFlow's "
                     "intra-op x inter-op threads).", lower_bound=0)
flags.DEFINE_integer("inter_op_threads", 1, "TensorFlow inter-op threads (0: its default, one per "
                     "core).", lower_bound=0)

FLAGS = flags.FLAGS
BUCKET = 8  # batches are padded to a multiple of this many tokens (few XLA shapes)
SMOKE_TEXT = ["The cat sits on the mat.", "A dog runs.", "Where is the train station?",
              "Das ist ein Satz."]


def load_model_and_sentences():
    """(model, tokenizer, source sentences, description)."""
    import keras

    import keras_transformer as kt
    from keras_transformer import data
    from keras_transformer.tokenizer import SubwordTokenizer

    keras.utils.set_random_seed(1)
    if FLAGS.smoke:
        text = [f"{s} {i}" for i in range(30) for s in SMOKE_TEXT]
        tokenizer = SubwordTokenizer.learn(text, vocab_size=320)
        config = kt.TransformerConfig.from_preset("tiny", vocab_size=tokenizer.vocab_size, max_length=32)
        return kt.Transformer(config), tokenizer, SMOKE_TEXT, "random tiny model (smoke run)"
    if FLAGS.model_dir:
        from keras_transformer import runs

        translator = runs.load_translator(FLAGS.model_dir, FLAGS.checkpoint)
        data_config = runs.data_config(runs.read_config(FLAGS.model_dir))
        model, tokenizer = translator.model, translator.tokenizer
        described = (f"trained model {common.shown_path(FLAGS.model_dir)} "
                     f"({FLAGS.checkpoint or 'latest checkpoint'})")
    else:
        data_dir = FLAGS.data_dir or ("data" if os.path.isdir("data") else
                                      os.path.join("runs", "benchmarks", "data"))
        data_config = data.DataConfig(dataset="ding_de_en", data_dir=data_dir)
        tokenizer, _ = data.load_or_learn_tokenizer(data_config)
        config = kt.TransformerConfig.from_preset(FLAGS.preset, vocab_size=tokenizer.vocab_size,
                                                  max_length=257)
        model = kt.Transformer(config)
        described = (f"randomly initialised {FLAGS.preset} model (speed depends on the weights only "
                     "through the output lengths, see the length sweep)")
    if data_config is None:
        raise app.UsageError(f"{FLAGS.model_dir}/config.json records no data config: no test set.")
    sentences, _ = data.read_pairs(data_config, "test")
    return model, tokenizer, sentences, described + f"; {data_config.dataset} test sentences"


def make_search(model, tokenizer, search, cached, xla, extra_length, alpha, forced_length=None):
    """A tf.function: source_ids [batch, length] -> (best ids, best lengths, decoder steps), the
    search ``Translator.search`` runs (see the module docstring for ``cached`` and ``xla``).

    The output buffer holds ``length + extra_length`` tokens, or ``forced_length`` with EOS banned
    so every output has exactly that many tokens."""
    import tensorflow as tf

    from keras_transformer.inference import DecodingConfig, Translator
    from keras_transformer.tokenizer import END_ID

    greedy = search == "greedy"
    translator = Translator(model, tokenizer, DecodingConfig(
        beam_size=1 if greedy else int(search[len("beam"):]), alpha=alpha,
        extra_length=extra_length))

    def run(source_ids):
        if forced_length:
            limits = dict(max_lengths=tf.fill([tf.shape(source_ids)[0]], forced_length),
                          max_decode_length=forced_length, banned_ids=[END_ID])
        else:  # the batch's own buffer, not the model's longest: the shapes XLA compiles
            limits = dict(max_decode_length=source_ids.shape[1] + extra_length)
        result = translator.search(source_ids, n_best=1, greedy=greedy, incremental=cached,
                                   **limits)  # n_best=1 as translate_text
        if greedy:
            return result.ids, result.lengths, result.steps
        return result.ids[:, 0], result.lengths[:, 0], result.steps

    return tf.function(run, jit_compile=xla, autograph=False)  # as the package's own


def batches_of(tokenizer, sentences, batch_size, bucket=BUCKET):
    """Sorted by length, padded to a multiple of ``bucket``; like trainers.translate batches them."""
    import numpy as np

    ids = [list(row) + [tokenizer.end_id] for row in tokenizer.tokenize(sentences).to_list()]
    ids.sort(key=len)
    result = []
    for start in range(0, len(ids), batch_size):
        rows = ids[start:start + batch_size]
        width = -(-max(map(len, rows)) // bucket) * bucket
        result.append(np.array([r + [0] * (width - len(r)) for r in rows], np.int32))
    return result


def time_batches(function, batches, runs):
    """First pass (tracing/compiling) and ``runs`` timed passes over ``batches``."""
    import tensorflow as tf

    # Traced with an unknown batch size, as a server sees it (decoding's loop variables are built
    # for that: a static batch size is lost after one step and tf.while_loop refuses the change).
    concrete = {}

    def function_for(batch):
        width = batch.shape[1]
        if width not in concrete:
            concrete[width] = function.get_concrete_function(tf.TensorSpec([None, width], tf.int32))
        return concrete[width]

    with common.PeakMemory() as memory:
        started = time.perf_counter()
        outputs = [function_for(b)(tf.constant(b)) for b in batches]
        warmup = time.perf_counter() - started
        tokens = sum(int(o[1].numpy().sum()) for o in outputs)
        steps = sum(int(o[2]) for o in outputs)
        seconds = []
        for _ in range(runs):
            started = time.perf_counter()
            for b in batches:
                function_for(b)(tf.constant(b))[1].numpy()  # wait for the result
            seconds.append(time.perf_counter() - started)
    return {"warmup": warmup, "seconds": seconds, "tokens": tokens, "steps": steps,
            "memory": memory}


def _timed_row(fields, count, timing):
    seconds = timing["seconds"]
    median = statistics.median(seconds)
    memory = timing["memory"]
    return {**fields, "sentences": count, "sentences/s": round(count / median, 2),
            "tokens/s": round(timing["tokens"] / median, 1),
            "seconds (median [min, max])": common.spread(seconds),
            "first pass s": round(timing["warmup"], 2),
            "peak memory MB (process / added)":
                f"{memory.bytes / 2**20:,.0f} / {memory.added_bytes / 2**20:,.0f}",
            "peak_memory_bytes": memory.bytes, "added_memory_bytes": memory.added_bytes,
            "output tokens": timing["tokens"], "decoder steps": timing["steps"],
            "seconds": common.median_min_max(seconds)}


def make_ours_for_comparison(model, tokenizer, beam_size, extra_length):
    """Our search as the Translator runs it, alpha 0 and one length limit for the whole batch
    (CTranslate2's max_decoding_length)."""
    import tensorflow as tf

    from keras_transformer.inference import DecodingConfig, Translator

    translator = Translator(model, tokenizer, DecodingConfig(beam_size=beam_size, alpha=0.0,
                                                             extra_length=extra_length))
    max_length = model.config.max_length

    def run(source_ids):
        limit = tf.minimum(tf.shape(source_ids)[1], max_length) + extra_length
        result = translator.search(source_ids, n_best=1, greedy=beam_size == 1,
                                   max_lengths=tf.fill([tf.shape(source_ids)[0]], limit))
        return result.ids if beam_size == 1 else result.ids[:, 0]

    return tf.function(run, input_signature=[tf.TensorSpec([None, None], tf.int32)], autograph=False)


def tensorflow_threads():
    """The threads TensorFlow decodes with: intra-op x inter-op."""
    return thread_flags.used() * (FLAGS.inter_op_threads or os.cpu_count())


def ctranslate2_rows(model, tokenizer, sentences, batch_sizes, extra_length, runs):
    """Our search and CTranslate2 float32 on the same weights, batches and number
    of threads (see the docstring)."""
    import tempfile

    try:
        import ctranslate2
    except ImportError:
        print("  ctranslate2 is not installed (pip install ctranslate2): comparison skipped.")
        return []
    from keras_transformer.export.ctranslate2 import tokenizer_pieces, write_ctranslate2

    pieces = tokenizer_pieces(tokenizer)
    threads = FLAGS.threads or tensorflow_threads()
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        path = write_ctranslate2(model, tokenizer, os.path.join(directory, "model"),
                                 extra_length=extra_length)
        engine = ctranslate2.Translator(path, device="cpu", compute_type="float32",
                                        intra_threads=threads, inter_threads=1)
        for search in FLAGS.searches:
            beam = 1 if search == "greedy" else int(search[len("beam"):])
            ours = make_ours_for_comparison(model, tokenizer, beam, extra_length)
            for batch_size in batch_sizes:
                rows += _compare_with_ctranslate2(
                    ours, engine, search, beam, batch_size, threads, pieces, tokenizer,
                    sentences, extra_length, runs, model.config.max_length)
    return rows


def _compare_with_ctranslate2(ours, engine, search, beam, batch_size, threads, pieces, tokenizer,
                              sentences, extra_length, runs, max_length):
    import tensorflow as tf

    from keras_transformer.tokenizer import END_ID, PAD_ID, START_ID

    batches = batches_of(tokenizer, sentences, batch_size, bucket=1)  # no padding beyond the longest
    tokens = [[[pieces[t] for t in row if t not in (PAD_ID, END_ID)] for row in b] for b in batches]

    def run_ours():
        return [[[pieces[t] for t in row if t not in (PAD_ID, END_ID)]
                 for row in ours(tf.constant(b)).numpy()] for b in batches]

    def run_theirs():
        # Our limit (make_ours_for_comparison, as the Translator's): sources longer than the
        # model's max_length count as that long. min_decoding_length=0: ours may end at step 1.
        return [[list(r.hypotheses[0]) for r in
                 engine.translate_batch(tok, beam_size=beam, length_penalty=0.0,
                                        min_decoding_length=0,
                                        max_decoding_length=min(int(b.shape[1]), max_length)
                                        + extra_length,
                                        suppress_sequences=[[pieces[PAD_ID]], [pieces[START_ID]]])]
                for tok, b in zip(tokens, batches)]

    timings, memory, outputs = _alternate({"ours": run_ours, "ctranslate2": run_theirs}, runs)
    texts = {name: [row for batch in output for row in batch] for name, output in outputs.items()}
    count = len(sentences)
    median = {name: statistics.median(t["wall"]) for name, t in timings.items()}
    cpu = {name: statistics.median(t["cpu"]) for name, t in timings.items()}
    # Each engine's fastest run: less sensitive to other jobs on a shared machine (OpenMP
    # threads, as CTranslate2's, suffer most from a busy CPU).
    best = {name: min(t["wall"]) for name, t in timings.items()}
    rows = []
    for name, timing in timings.items():
        identical = sum(a == b for a, b in zip(texts[name], texts["ctranslate2"]))
        seconds = timing["wall"]
        rows.append({
            "search": search, "engine": name, "batch": batch_size, "sentences": count,
            "sentences/s": round(count / median[name], 2),
            "ours / CTranslate2": round(median["ctranslate2"] / median[name], 3),
            "ours / CTranslate2 (fastest runs)": round(best["ctranslate2"] / best[name], 3),
            "ours / CTranslate2 (CPU seconds)": round(cpu["ctranslate2"] / cpu[name], 3),
            "identical": f"{identical}/{count} ({100 * identical / count:.1f}%)",
            "seconds (median [min, max])": common.spread(seconds),
            "CPU seconds (median)": round(cpu[name], 3),
            "first pass s": round(timing["warmup"], 2),
            "threads": (threads if name == "ctranslate2" else
                        f"{thread_flags.used()} x {FLAGS.inter_op_threads or os.cpu_count()}"),
            "peak memory MB (process / added, first pass)":
                f"{memory[name].bytes / 2**20:,.0f} / {memory[name].added_bytes / 2**20:,.0f}",
            "seconds": common.median_min_max(seconds),
            "cpu_seconds": common.median_min_max(timing["cpu"])})
        print(f"  {search} batch {batch_size} {name}: {rows[-1]['sentences/s']} sentences/s, "
              f"/ CTranslate2 {rows[-1]['ours / CTranslate2']} "
              f"(CPU {rows[-1]['ours / CTranslate2 (CPU seconds)']}), identical {identical}/{count}",
              flush=True)
    return rows


def _alternate(functions, runs):
    """A first pass of each function (tracing; its outputs are returned), then ``runs`` rounds
    in which they take turns, so that changes of the machine's load hit every engine: (timings,
    peak memory of the first pass, outputs) per name."""
    timings, memory, outputs = {}, {}, {}
    for name, function in functions.items():
        with common.PeakMemory() as memory[name]:
            started = time.perf_counter()
            outputs[name] = function()
        timings[name] = {"warmup": time.perf_counter() - started, "wall": [], "cpu": []}
    for _ in range(runs):
        for name, function in functions.items():
            started, started_cpu = time.perf_counter(), time.process_time()
            function()
            timings[name]["wall"].append(time.perf_counter() - started)
            timings[name]["cpu"].append(time.process_time() - started_cpu)
    return timings, memory, outputs


def throughput_rows(model, tokenizer, sentences, sizes, runs, extra_length):
    """Every search at every batch size, cached and (at --uncached_batch_sizes) not, with XLA
    off and on."""
    batch_sizes, uncached_sizes, min_sentences = sizes
    rows = []
    for search in FLAGS.searches:
        for batch_size in batch_sizes:
            count = min(len(sentences), max(batch_size, min_sentences))
            batches = batches_of(tokenizer, sentences[:count], batch_size)
            for cached in (True, False) if batch_size in uncached_sizes else (True,):
                for xla in (False, True):
                    function = make_search(model, tokenizer, search, cached, xla, extra_length,
                                           FLAGS.alpha)
                    row = _timed_row(
                        {"search": search, "batch": batch_size, "cache": "yes" if cached else "no",
                         "xla": "yes" if xla else "no",
                         "buffer": ("grows" if cached and not xla else
                                    f"input+{extra_length} (padded to {BUCKET})")},
                        count, time_batches(function, batches, runs))
                    rows.append(row)
                    print(f"  {search} batch={batch_size} cache={row['cache']} xla={row['xla']}: "
                          f"{row['sentences/s']} sentences/s, {row['tokens/s']} tokens/s", flush=True)
    return rows


def sweep_rows(model, tokenizer, batch, lengths, runs, extra_length):
    """The first of --searches on ``batch`` with every output forced to each of ``lengths``."""
    search, rows = FLAGS.searches[0], []
    for length in lengths:
        for cached in (True, False):
            if not cached and length > (lengths[0] if FLAGS.smoke else FLAGS.uncached_max_length):
                continue
            function = make_search(model, tokenizer, search, cached, False, extra_length,
                                   FLAGS.alpha, forced_length=length)
            timing = time_batches(function, [batch], runs)
            median = statistics.median(timing["seconds"])
            memory = timing["memory"]
            rows.append({"search": search, "batch": int(batch.shape[0]),
                         "output length": length, "cache": "yes" if cached else "no",
                         "ms/sentence": round(1000 * median / batch.shape[0], 2),
                         "ms/step": round(1000 * median / max(timing["steps"], 1), 3),
                         "seconds (median [min, max])": common.spread(timing["seconds"]),
                         "peak memory MB (process / added)":
                             f"{memory.bytes / 2**20:,.0f} / {memory.added_bytes / 2**20:,.0f}",
                         "seconds": common.median_min_max(timing["seconds"]),
                         "decoder steps": timing["steps"]})
            print(f"  length {length} cache={rows[-1]['cache']}: {rows[-1]['ms/step']} ms/step",
                  flush=True)
    return rows


def tables(rows, compared, sweep):
    """The Markdown tables of the measurements made, by name."""
    found = {}
    if rows:
        found["throughput"] = common.markdown(rows, [
            "search", "batch", "cache", "xla", "buffer", "sentences", "sentences/s", "tokens/s",
            "seconds (median [min, max])", "first pass s", "peak memory MB (process / added)"])
    if compared:
        found["ctranslate2"] = (
            "Ours vs CTranslate2 float32 on the same weights and number of threads (alpha / "
            "length_penalty 0, one length limit per batch; threads: TensorFlow intra-op x "
            "inter-op, CTranslate2 intra):\n\n" + common.markdown(compared, [
                "search", "engine", "batch", "sentences", "sentences/s", "ours / CTranslate2",
                "ours / CTranslate2 (fastest runs)", "ours / CTranslate2 (CPU seconds)",
                "identical", "seconds (median [min, max])", "CPU seconds (median)", "threads",
                "peak memory MB (process / added, first pass)"]))
    if sweep:
        found["length_sweep"] = (
            f"Decode time vs output length ({sweep[0]['search']}, batch {sweep[0]['batch']}, no "
            "XLA, EOS banned so every output has exactly that length):\n\n" + common.markdown(sweep, [
                "output length", "cache", "ms/sentence", "ms/step", "seconds (median [min, max])",
                "peak memory MB (process / added)"]))
    return found


def main(argv):
    del argv  # console.run has refused stray arguments
    for search in FLAGS.searches:
        if search != "greedy" and not (search.startswith("beam") and search[4:].isdigit()):
            raise app.UsageError(f"--searches: {search!r} is neither greedy nor beamK.")
    parts = set(FLAGS.parts)
    if not parts or parts - set(PARTS):
        raise app.UsageError(f"--parts={','.join(FLAGS.parts)}: choose from {', '.join(PARTS)}.")
    thread_flags.apply()
    import tensorflow as tf

    if FLAGS.inter_op_threads:
        tf.config.threading.set_inter_op_parallelism_threads(FLAGS.inter_op_threads)
    if FLAGS.smoke:  # every code path once, nothing timed seriously
        sizes, lengths, runs, extra_length = ([2], [2], 2), [2, 4], 1, 4
        compared_sizes, compared_count, sweep_batch = [2], 2, 2
    else:
        sizes = ([int(b) for b in FLAGS.batch_sizes], [int(b) for b in FLAGS.uncached_batch_sizes],
                 FLAGS.min_sentences)
        lengths, runs, extra_length = [int(n) for n in FLAGS.lengths], FLAGS.runs, FLAGS.extra_length
        compared_sizes = [int(b) for b in FLAGS.ctranslate2_batch_sizes]
        compared_count, sweep_batch = FLAGS.ctranslate2_sentences, FLAGS.sweep_batch_size
    model, tokenizer, sentences, described = load_model_and_sentences()
    described += (f"; TensorFlow intra-op x inter-op threads: {thread_flags.used()} x "
                  f"{FLAGS.inter_op_threads or os.cpu_count()} (--intra_op_threads, --inter_op_threads)")
    machine = common.machine()  # the load average at the start
    print(f"decoding benchmark: {described}; {machine['cpus']} CPUs, load average "
          f"{machine['load_average']} at start; TF {tf.__version__}", flush=True)
    rows = (throughput_rows(model, tokenizer, sentences, sizes, runs, extra_length)
            if "throughput" in parts else [])
    compared = (ctranslate2_rows(model, tokenizer, sentences[:compared_count], compared_sizes,
                                 extra_length, runs) if "ctranslate2" in parts else [])
    batch = batches_of(tokenizer, sentences[:sweep_batch], sweep_batch)[0]
    sweep = (sweep_rows(model, tokenizer, batch, lengths, runs, extra_length)
             if "sweep" in parts else [])
    machine["load_average_at_end"] = common.machine()["load_average"]
    print(f"\n{described}. Load average at the end: {machine['load_average_at_end'][0]}.\n")
    found = tables(rows, compared, sweep)
    print("\n\n".join(found.values()))
    common.write_json(FLAGS.output, {
        "model": described, "machine": machine, "runs": runs, "extra_length": extra_length,
        "alpha": FLAGS.alpha, "throughput": rows, "length_sweep": sweep, "ctranslate2": compared,
        "markdown": found})
    print(f"\nwrote {FLAGS.output}")


if __name__ == "__main__":
    console.run(main)
