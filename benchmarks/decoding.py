"""Decoding throughput: beam 4 and greedy, with and without the key/value cache, with and without XLA.

    python -m benchmarks.decoding                                  # random `small` model, Ding test set
    python -m benchmarks.decoding --model_dir=runs/small --checkpoint=averaged
    python -m benchmarks.decoding --smoke                          # seconds: tiny model, few sentences

Measures sentences/s and output tokens/s of the search of section 6.1 on real test sentences (the
offline Ding corpus by default; with --model_dir the run's own data and vocabulary), batched as
``trainers.translate`` batches them (sorted by length), per batch size. Each batch is padded to a
multiple of 8 tokens and decoded into a buffer of that length + --extra_length, so XLA compiles few
shapes; the first pass over the batches (tracing, compiling) is reported separately and not timed.

* cached: one ``model.decode_step`` per output position (what ``inference.Translator`` runs);
* uncached: every step re-runs the teacher-forced decoder over the prefix decoded so far, as a
  naive implementation would (without XLA over ``ids[:, :i + 1]``; XLA needs static shapes, so
  there it runs over the whole buffer, the causal mask hiding the future; see
  tests/test_inference.py::test_cached_search_equals_rerunning_the_whole_prefix).

The length sweep forces every output to exactly N tokens (EOS masked, limit N) and reports the time
per sentence and per decoder step: constant per step with the cache, growing with N without it.

The cached search without XLA is the Translator's (``inference.search_inputs``): the self-attention
keys/values grow by one step per step, the encoder's keys/values are kept once per sentence, and a
sentence whose result is final leaves the batch; XLA needs fixed shapes, so with XLA the cache is
buffers of the batch's output buffer length and every sentence stays until all are done.

Translator rows time ``inference.Translator.translate_ids`` itself (what the SavedModel runs) next
to the search it had before (fixed buffers of padded source width + extra_length, encoder keys and
values copied and reordered per beam, no sentence leaving the batch), in one run.

The CTranslate2 part (``--parts=ctranslate2``; needs ``pip install ctranslate2``) exports the same
weights with ``keras_transformer.export.ctranslate2`` and decodes the same test sentences, batched
the same way (per --ctranslate2_batch_sizes), with our search and with CTranslate2 float32 on the
same CPU with the same number of threads: TensorFlow's intra-op x inter-op threads
(--intra_op_threads, --inter_op_threads: one each by default, as every part of this benchmark; a
TensorFlow graph runs independent ops on its inter-op threads, so one intra-op thread alone may
keep two cores busy), CTranslate2's intra_threads (--threads). Greedy and beam 4, length penalty
off (alpha 0 / length_penalty=0: the two length penalties differ), one length limit per batch
(CTranslate2's max_decoding_length = longest source, at most the model's max_length, +
extra_length, ours the same); pad and start are excluded on both sides. It reports both speeds, their ratio (of median wall-clock times, of the
fastest runs, and of median CPU seconds, the least disturbed by other processes on a shared
machine) and the fraction of identical translations (token ids). With random weights outputs run
to the limit and near-ties decide long random sequences, so the identical fraction is only
meaningful for a trained model (--model_dir). ``--before`` adds an earlier version of our code (a
``keras_transformer`` folder, e.g. of a git worktree, with the same weights), timed in the same
alternation: the before -> after column of a change.

Without --model_dir the weights are random: speed depends on the weights only through the output
lengths (a random model rarely emits EOS, so every output runs to input length + extra_length), and
the length sweep covers that. Prints a Markdown table and writes JSON (--output); timings are the
median of --runs runs with min and max. Not a test: numbers depend on the machine and its load.
"""

import os
import statistics
import time

from absl import app, flags, logging

from benchmarks import common
from trainers import decoding_flags, thread_flags

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
PARTS = ("throughput", "translator", "sweep", "ctranslate2")
flags.DEFINE_list("parts", list(PARTS), f"Which measurements: any of {', '.join(PARTS)}.")
flags.DEFINE_integer("ctranslate2_sentences", 128, "Test sentences of the CTranslate2 comparison.",
                     lower_bound=1)
flags.DEFINE_list("ctranslate2_batch_sizes", ["16", "64"], "Batch sizes of the CTranslate2 "
                  "comparison.")
flags.DEFINE_integer("threads", 0, "CTranslate2 intra_threads (0: as many as TensorFlow's "
                     "intra-op x inter-op threads).", lower_bound=0)
flags.DEFINE_integer("inter_op_threads", 1, "TensorFlow inter-op threads (0: its default, one per "
                     "core).", lower_bound=0)
flags.DEFINE_string("before", None, "CTranslate2 part: an earlier keras_transformer folder (or "
                    "decoding.py) to time beside today's code (see benchmarks.search_ab).")
flags.DEFINE_string("before_name", None, "What --before is (e.g. its commit), for the tables.")

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

    # Seed first: tf.random.set_seed (inside) after a SubwordTokenizer exists deletes its
    # SentencePiece resource ("Resource ... SentencepieceOp ... does not exist").
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
    pairs = data.load_text_pairs(data_config, "test").as_numpy_iterator()
    sentences = [source.decode("utf-8") for source, _ in pairs]
    return model, tokenizer, sentences, described + f"; {data_config.dataset} test sentences"


def make_search(model, search, cached, xla, extra_length, alpha, forced_length=None,
                per_beam_buffers=False):
    """A tf.function: source_ids [batch, length] -> (best ids, best lengths, decoder steps).

    The output buffer holds ``length + extra_length`` tokens, or ``forced_length`` with EOS masked
    so every output has exactly that many tokens. The cache is the Translator's
    (``inference.search_inputs``: growing self-attention keys/values, encoder keys/values once per
    sentence, finished sentences leaving the batch); with XLA, fixed-size buffers of the output
    buffer's length and no sentence leaving. ``per_beam_buffers``: the search before those changes,
    fixed-size buffers with the encoder's keys/values copied and reordered per beam (the whole
    ``model.init_cache`` given to the search), every sentence computed until all are done."""
    import tensorflow as tf

    from keras_transformer import decoding
    from keras_transformer.inference import search_inputs
    from keras_transformer.tokenizer import END_ID, PAD_ID, START_ID

    vocab = model.config.output_vocab_size
    never = [PAD_ID, START_ID] + ([END_ID] if forced_length else [])
    mask = tf.scatter_nd([[i] for i in never], [-1e9] * len(never), [vocab])

    def run(source_ids):
        batch, length = tf.shape(source_ids)[0], source_ids.shape[1]
        buffer = forced_length or length + extra_length
        if forced_length:
            limits = tf.fill([batch], forced_length)
        else:
            limits = tf.reduce_sum(tf.cast(source_ids != PAD_ID, tf.int32), 1) + extra_length
        memory, memory_mask = model.encode(source_ids)
        options = {}
        if per_beam_buffers:
            cache = dict(zip(("self", "memory"), model.init_cache(memory, memory_mask, buffer)))
            options["drop_finished"] = False

            def step(ids, i, cache):
                logits, self_cache = model.decode_step(ids[:, i], i, cache["self"], cache["memory"])
                return logits + mask, {"self": self_cache, "memory": cache["memory"]}
        elif cached:
            cache, options["shared_cache"], step = search_inputs(
                model, memory, memory_mask, buffer if xla else None, logits_bias=mask)
        else:
            cache = {"memory": memory, "memory_mask": memory_mask}

            def step(ids, i, cache):
                prefix = ids[:, :buffer] if xla else ids[:, :i + 1]
                logits = model.decode(prefix, cache["memory"], cache["memory_mask"])
                return logits[:, i] + mask, cache

        start = tf.fill([batch], START_ID)
        if search == "greedy":
            result = decoding.greedy_search(step, start, cache, buffer, END_ID, max_lengths=limits,
                                            **options)
            return result.ids, result.lengths, result.steps
        beam = int(search[len("beam"):])
        result = decoding.beam_search(step, start, cache, beam, alpha, buffer, END_ID,
                                      max_lengths=limits, n_best=1, **options)  # as translate_text
        return result.ids[:, 0], result.lengths[:, 0], result.steps

    return tf.function(run, jit_compile=xla)


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


def translator_rows(model, tokenizer, sentences, batch_sizes, min_sentences, extra_length, runs):
    """Translator.translate_ids (growing cache, encoder keys/values per sentence) against the cache
    it had before (fixed input + extra_length buffers, encoder keys/values per beam), beam of
    --searches[0] (or 4), on the same batches."""
    import tensorflow as tf

    from keras_transformer.inference import DecodingConfig, Translator

    search = FLAGS.searches[0]
    beam = int(search[len("beam"):]) if search.startswith("beam") else 4
    translator = Translator(model, tokenizer, DecodingConfig(beam_size=beam, alpha=FLAGS.alpha,
                                                             extra_length=extra_length))

    def translate(source_ids):
        out = translator.translate_ids(source_ids, n_best=1)  # as translate_text
        return out["ids"][:, 0], out["lengths"][:, 0], tf.reduce_max(out["lengths"])

    rows = []
    for batch_size in batch_sizes:
        count = min(len(sentences), max(batch_size, min_sentences))
        batches = batches_of(tokenizer, sentences[:count], batch_size)
        for label, function in [
                (f"fixed input+{extra_length}, encoder keys/values per beam, no sentence leaves (before)",
                 make_search(model, f"beam{beam}", True, False, extra_length, FLAGS.alpha,
                             per_beam_buffers=True)),
                ("Translator.translate_ids (grows, encoder keys/values per sentence, done sentences leave)",
                 tf.function(translate))]:
            rows.append(_timed_row({"search": f"beam{beam}", "batch": batch_size, "cache": "yes",
                                    "xla": "no", "buffer": label}, count,
                                   time_batches(function, batches, runs)))
            print(f"  beam{beam} batch={batch_size} {label}: {rows[-1]['sentences/s']} sentences/s",
                  flush=True)
    return rows


def make_ours_for_comparison(model, beam_size, extra_length, decoding=None, package=None):
    """Our search as the Translator runs it (its cache, pad/start masked), alpha 0 and
    one length limit for the whole batch (CTranslate2's max_decoding_length). ``decoding`` and
    ``package``: an earlier version's search module and package (``earlier_version.load_before``)."""
    import tensorflow as tf

    if decoding is None:
        from keras_transformer import decoding
    if package is None:
        from keras_transformer.inference import search_inputs
    else:
        search_inputs = package.inference.search_inputs
    from keras_transformer.tokenizer import END_ID, PAD_ID, START_ID

    never = tf.scatter_nd([[PAD_ID], [START_ID]], [-1e9, -1e9], [model.config.output_vocab_size])
    buffer = model.config.max_length + extra_length

    def run(source_ids):
        batch = tf.shape(source_ids)[0]
        limit = tf.minimum(tf.shape(source_ids)[1], model.config.max_length) + extra_length
        memory, memory_mask = model.encode(source_ids)
        cache, shared, step = search_inputs(model, memory, memory_mask, logits_bias=never)
        start, limits = tf.fill([batch], START_ID), tf.fill([batch], limit)
        if beam_size == 1:
            result = decoding.greedy_search(step, start, cache, buffer, END_ID, max_lengths=limits,
                                            shared_cache=shared)
            return result.ids
        return decoding.beam_search(step, start, cache, beam_size, 0.0, buffer, END_ID,
                                    max_lengths=limits, n_best=1, shared_cache=shared).ids[:, 0]

    return tf.function(run, input_signature=[tf.TensorSpec([None, None], tf.int32)])


def tensorflow_threads():
    """The threads TensorFlow decodes with: intra-op x inter-op."""
    return thread_flags.used() * (FLAGS.inter_op_threads or os.cpu_count())


def ctranslate2_rows(model, tokenizer, sentences, batch_sizes, extra_length, runs):
    """Our search (and --before's) and CTranslate2 float32 on the same weights, batches and number
    of threads (see the docstring)."""
    import tempfile

    try:
        import ctranslate2
    except ImportError:
        print("  ctranslate2 is not installed (pip install ctranslate2): comparison skipped.")
        return []
    from keras_transformer.export.ctranslate2 import tokenizer_pieces, write_ctranslate2

    before = None
    if FLAGS.before:
        from benchmarks import earlier_version

        before_decoding, package = earlier_version.load_before(FLAGS.before)
        before = (before_decoding, package, earlier_version.model_of(package, model),
                  f"ours before ({FLAGS.before_name or common.shown_path(FLAGS.before)})")
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
            ours = {"ours": make_ours_for_comparison(model, beam, extra_length)}
            if before is not None:
                ours[before[3]] = make_ours_for_comparison(before[2], beam, extra_length,
                                                           before[0], before[1])
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

    def ours_runner(function):
        return lambda: [[[t for t in row if t not in (PAD_ID, END_ID)]
                         for row in function(tf.constant(b)).numpy()] for b in batches]

    def run_theirs():
        # Our limit (make_ours_for_comparison, as the Translator's): sources longer than the
        # model's max_length count as that long.
        return [[list(r.hypotheses[0]) for r in
                 engine.translate_batch(tok, beam_size=beam, length_penalty=0.0,
                                        max_decoding_length=min(int(b.shape[1]), max_length)
                                        + extra_length,
                                        suppress_sequences=[[pieces[PAD_ID]], [pieces[START_ID]]])]
                for tok, b in zip(tokens, batches)]

    functions = {name: ours_runner(function) for name, function in ours.items()}
    functions["ctranslate2"] = run_theirs
    timings, memory, outputs = {}, {}, {}
    for name, function in functions.items():
        with common.PeakMemory() as memory[name]:
            started = time.perf_counter()
            outputs[name] = function()  # first pass: tracing, and the outputs compared below
        timings[name] = {"warmup": time.perf_counter() - started, "wall": [], "cpu": []}
    for _ in range(runs):  # alternating, so that changes of the machine's load hit every engine
        for name, function in functions.items():
            started, started_cpu = time.perf_counter(), time.process_time()
            function()
            timings[name]["wall"].append(time.perf_counter() - started)
            timings[name]["cpu"].append(time.process_time() - started_cpu)
    their_text = [row for batch in outputs["ctranslate2"] for row in batch]
    count = len(sentences)
    median = {name: statistics.median(t["wall"]) for name, t in timings.items()}
    cpu = {name: statistics.median(t["cpu"]) for name, t in timings.items()}
    # Each engine's fastest run: less sensitive to other jobs on a shared machine (OpenMP
    # threads, as CTranslate2's, suffer most from a busy CPU).
    best = {name: min(t["wall"]) for name, t in timings.items()}
    rows = []
    for name, timing in timings.items():
        text = their_text if name == "ctranslate2" else [
            [pieces[t] for t in row] for batch in outputs[name] for row in batch]
        identical = sum(a == b for a, b in zip(text, their_text))
        seconds = timing["wall"]
        row = {"search": search, "engine": name, "batch": batch_size, "sentences": count,
               "sentences/s": round(count / median[name], 2),
               "ours / CTranslate2": round(median["ctranslate2"] / median[name], 3),
               "ours / CTranslate2 (fastest runs)": round(best["ctranslate2"] / best[name], 3),
               "ours / CTranslate2 (CPU seconds)": round(cpu["ctranslate2"] / cpu[name], 3),
               "after / before": "",
               "identical": f"{identical}/{count} ({100 * identical / count:.1f}%)",
               "seconds (median [min, max])": common.spread(seconds),
               "CPU seconds (median)": round(cpu[name], 3),
               "first pass s": round(timing["warmup"], 2),
               "threads": (threads if name == "ctranslate2" else
                           f"{thread_flags.used()} x {FLAGS.inter_op_threads or os.cpu_count()}"),
               "peak memory MB (process / added, first pass)":
                   f"{memory[name].bytes / 2**20:,.0f} / {memory[name].added_bytes / 2**20:,.0f}",
               "seconds": common.median_min_max(seconds), "cpu_seconds": common.median_min_max(timing["cpu"])}
        if name == "ours" and len(ours) > 1:
            earlier = next(n for n in ours if n != "ours")
            row["after / before"] = (f"{median[earlier] / median[name]:.2f}x wall, "
                                     f"{cpu[earlier] / cpu[name]:.2f}x CPU")
        rows.append(row)
        print(f"  {search} batch {batch_size} {name}: {row['sentences/s']} sentences/s, "
              f"/ CTranslate2 {row['ours / CTranslate2']} (CPU {row['ours / CTranslate2 (CPU seconds)']}), "
              f"identical {identical}/{count}", flush=True)
    return rows


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    logging.set_verbosity(logging.WARNING)
    thread_flags.apply()
    if FLAGS.inter_op_threads:
        import tensorflow as tf

        tf.config.threading.set_inter_op_parallelism_threads(FLAGS.inter_op_threads)
    extra_length = FLAGS.extra_length
    if FLAGS.smoke:  # every code path once, nothing timed seriously
        batch_sizes, uncached_sizes, lengths, runs, min_sentences = [2], [2], [2, 4], 1, 2
        extra_length = 4
    else:
        batch_sizes = [int(b) for b in FLAGS.batch_sizes]
        uncached_sizes = [int(b) for b in FLAGS.uncached_batch_sizes]
        lengths, runs = [int(n) for n in FLAGS.lengths], FLAGS.runs
        min_sentences = FLAGS.min_sentences
    for search in FLAGS.searches:
        if search != "greedy" and not (search.startswith("beam") and search[4:].isdigit()):
            raise app.UsageError(f"--searches: {search!r} is neither greedy nor beamK.")
    parts = set(FLAGS.parts)
    if not parts or parts - set(PARTS):
        raise app.UsageError(f"--parts={','.join(FLAGS.parts)}: choose from {', '.join(PARTS)}.")
    import tensorflow as tf

    model, tokenizer, sentences, described = load_model_and_sentences()
    described += (f"; TensorFlow intra-op x inter-op threads: {thread_flags.used()} x "
                  f"{FLAGS.inter_op_threads or os.cpu_count()} (--intra_op_threads, --inter_op_threads)")
    load = os.getloadavg()
    print(f"decoding benchmark: {described}; {os.cpu_count()} CPUs, load average "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at start; TF {tf.__version__}", flush=True)

    rows = []
    for search in FLAGS.searches if "throughput" in parts else []:
        for batch_size in batch_sizes:
            count = min(len(sentences), max(batch_size, min_sentences))
            batches = batches_of(tokenizer, sentences[:count], batch_size)
            for cached in (True, False):
                if not cached and batch_size not in uncached_sizes:
                    continue
                for xla in (False, True):
                    function = make_search(model, search, cached, xla, extra_length, FLAGS.alpha)
                    row = _timed_row(
                        {"search": search, "batch": batch_size, "cache": "yes" if cached else "no",
                         "xla": "yes" if xla else "no",
                         "buffer": ("grows" if cached and not xla else
                                    f"input+{extra_length} (padded to {BUCKET})")},
                        count, time_batches(function, batches, runs))
                    rows.append(row)
                    print(f"  {search} batch={batch_size} cache={row['cache']} xla={row['xla']}: "
                          f"{row['sentences/s']} sentences/s, {row['tokens/s']} tokens/s", flush=True)

    if "translator" in parts:
        rows += translator_rows(model, tokenizer, sentences, batch_sizes, min_sentences, extra_length, runs)

    compared = []
    if "ctranslate2" in parts:
        count = 2 if FLAGS.smoke else min(len(sentences), FLAGS.ctranslate2_sentences)
        compared = ctranslate2_rows(model, tokenizer, sentences[:count],
                                    [2] if FLAGS.smoke else [int(b) for b in FLAGS.ctranslate2_batch_sizes],
                                    extra_length, runs)

    sweep = []
    sweep_batch = 2 if FLAGS.smoke else FLAGS.sweep_batch_size
    batch = batches_of(tokenizer, sentences[:sweep_batch], sweep_batch)[:1]
    for length in lengths if "sweep" in parts else []:
        for cached in (True, False):
            if not cached and length > FLAGS.uncached_max_length and not FLAGS.smoke:
                continue
            function = make_search(model, FLAGS.searches[0], cached, False, extra_length,
                                   FLAGS.alpha, forced_length=length)
            timing = time_batches(function, batch, runs)
            median = statistics.median(timing["seconds"])
            sweep.append({"search": FLAGS.searches[0], "batch": int(batch[0].shape[0]),
                          "output length": length, "cache": "yes" if cached else "no",
                          "ms/sentence": round(1000 * median / batch[0].shape[0], 2),
                          "ms/step": round(1000 * median / max(timing["steps"], 1), 3),
                          "seconds (median [min, max])": common.spread(timing["seconds"]),
                          "peak memory MB (process / added)":
                              f"{timing['memory'].bytes / 2**20:,.0f} / "
                              f"{timing['memory'].added_bytes / 2**20:,.0f}",
                          "seconds": common.median_min_max(timing["seconds"]),
                          "decoder steps": timing["steps"]})
            print(f"  length {length} cache={sweep[-1]['cache']}: {sweep[-1]['ms/step']} ms/step",
                  flush=True)

    load_end = os.getloadavg()
    print(f"\n{described}. Load average at the end: {load_end[0]:.2f}.\n")
    tables = {}
    if rows:
        tables["throughput"] = common.markdown(rows, [
            "search", "batch", "cache", "xla", "buffer", "sentences", "sentences/s", "tokens/s",
            "seconds (median [min, max])", "first pass s", "peak memory MB (process / added)"])
    if compared:
        tables["ctranslate2"] = (
            "Ours vs CTranslate2 float32 on the same weights and number of threads (alpha / "
            "length_penalty 0, one length limit per batch; threads: TensorFlow intra-op x "
            "inter-op, CTranslate2 intra):\n\n" + common.markdown(compared, [
                "search", "engine", "batch", "sentences", "sentences/s", "ours / CTranslate2",
                "ours / CTranslate2 (fastest runs)", "ours / CTranslate2 (CPU seconds)",
                "after / before", "identical", "seconds (median [min, max])",
                "CPU seconds (median)", "threads",
                "peak memory MB (process / added, first pass)"]))
    if sweep:
        tables["length_sweep"] = (
            f"Decode time vs output length ({FLAGS.searches[0]}, batch {sweep_batch}, no XLA, "
            "EOS masked so every output has exactly that length):\n\n" + common.markdown(sweep, [
                "output length", "cache", "ms/sentence", "ms/step", "seconds (median [min, max])",
                "peak memory MB (process / added)"]))
    print("\n\n".join(tables.values()))

    result = {"model": described, "cpus": os.cpu_count(), "load_average_start": load,
              "load_average_end": load_end, "tensorflow": tf.__version__, "runs": runs,
              "extra_length": extra_length, "alpha": FLAGS.alpha, "throughput": rows,
              "length_sweep": sweep, "ctranslate2": compared, "machine": common.machine(),
              "markdown": tables}
    common.write_json(FLAGS.output, result)
    print(f"\nwrote {FLAGS.output}")


if __name__ == "__main__":
    from trainers.console import parse_flags  # --help: status 0; a bad flag: one line

    app.run(main, flags_parser=parse_flags)
