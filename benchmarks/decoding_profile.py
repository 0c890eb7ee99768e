"""Where beam-search decoding time goes, next to CTranslate2 on the same weights and threads.

    python -m benchmarks.decoding_profile --model_dir=runs/qs8
    python -m benchmarks.decoding_profile --intra_op_threads=2 --inter_op_threads=1
    python -m benchmarks.decoding_profile --preset=small         # random weights

For each batch size (--batch_sizes, default 16 and 64) on the same test sentences, batched as the
CTranslate2 comparison of ``benchmarks.decoding`` batches them (sorted by length, one length limit
per batch, length penalty off, pad and start never produced):

1. our search (``benchmarks.decoding.make_ours_for_comparison``: the Translator's cache and step
   function) and CTranslate2 float32 are timed alternately, CTranslate2 with as many intra-op
   threads as TensorFlow uses in all (intra-op x inter-op: a TensorFlow graph runs independent ops
   on its inter-op threads, so one intra-op thread can still keep two cores busy);
2. one more pass of ours runs under the TensorFlow profiler; the kernel times of its ops are summed
   by what they do (the name scopes of ``decoding`` and of the model's layers), beside the time the
   graph executor spends between kernels (dispatch per op) and the wall-clock time outside the
   executor (the Python call into the ``tf.function``).

The profiler adds its own overhead per op, so the shares matter more than the absolute numbers.
Prints Markdown and writes JSON (--output). Not a test: numbers depend on the machine and its load.
"""

import collections
import glob
import os
import re
import statistics
import tempfile
import time

from absl import app, flags, logging

from benchmarks import common
from benchmarks import decoding as decoding_benchmark  # its model/data flags, batching, our search
from trainers import thread_flags

FLAGS = flags.FLAGS
# benchmarks.decoding's flags serve here too: --model_dir, --preset, --inter_op_threads, --runs...
FLAGS.set_default("batch_sizes", ["16", "64"])
FLAGS.set_default("runs", 5)
flags.DEFINE_integer("sentences", 128, "Test sentences.", lower_bound=1)
flags.DEFINE_integer("ctranslate2_threads", 0, "CTranslate2 intra_threads (0: as many threads as "
                     "TensorFlow's intra-op x inter-op).", lower_bound=0)
flags.DEFINE_bool("trace", True, "Also run one pass under the TensorFlow profiler.")
flags.DEFINE_bool("onednn", True, "TensorFlow's oneDNN kernels (TF_ENABLE_ONEDNN_OPTS); must be "
                  "decided before TensorFlow is imported, so only this flag sets it.")
flags.DEFINE_string("profile_output", os.path.join("runs", "benchmarks", "decoding_profile.json"),
                    "JSON results.")

# Op kernels grouped by what they do: (part, test on "scope/name", op type), first match wins.
_CONTROL_FLOW = {"Enter", "Exit", "Merge", "Switch", "NextIteration", "LoopCond", "Identity",
                 "_SwitchN", "StatelessIf", "If", "NoOp"}
_MATMULS = re.compile(r"MatMul")
PARTS = [
    ("encoder (once per batch)", lambda n, t: n.startswith("encoder")),
    ("while-loop control flow", lambda n, t: t in _CONTROL_FLOW),
    ("output projection (tied embedding), [rows, d_model] x [d_model, vocab]",
     lambda n, t: "output_projection" in n),
    ("decoder: self-attention cache growth (concat)",
     lambda n, t: "self_attention" in n and t == "ConcatV2"),
    ("decoder: Q/K/V/output projections and feed-forward (matmuls)",
     lambda n, t: "decoder" in n and _MATMULS.search(t) and
     re.search(r"/(query|key|value|output|inner|outer|feed_forward)", n) is not None
     and "FoldTranspose" not in n and not re.search(r"attention_1/MatMul", n)),
    ("decoder: attention scores, softmax and weighted values",
     lambda n, t: "decoder" in n and "attention" in n and "_norm" not in n),
    ("decoder: layer norms", lambda n, t: "decoder" in n and "norm" in n),
    ("decoder: embedding, residual sums, other", lambda n, t: "model_step" in n),
    ("log-softmax over the vocabulary", lambda n, t: "log_softmax" in n),
    ("top-k over beam x vocabulary", lambda n, t: "top_k" in n),
    ("cache reorder (gather per step)", lambda n, t: "reorder_cache" in n),
    ("hypothesis bookkeeping (sequences, alive, finished, done)",
     lambda n, t: re.search(r"/(sequences|alive|finished|done)/", n) is not None),
    ("finished examples leave the batch", lambda n, t: re.search(r"/(take|drop_finished)/", n)
     is not None),
    ("search: other (loop counter, conditions)", lambda n, t: n.startswith("while")),
    ("outside the loop (setup, results)", lambda n, t: True),
]


def op_stats(trace_dir):
    """Sums of the profiled kernels per part, the executor's time around them, and counts."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    path = sorted(glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True))[-1]
    space = xplane_pb2.XSpace()
    with open(path, "rb") as stream:
        space.ParseFromString(stream.read())
    parts = collections.Counter()
    counts = collections.Counter()
    types = collections.defaultdict(collections.Counter)
    process = kernels = 0
    threads = set()
    for plane in space.planes:
        names = plane.event_metadata
        for line in plane.lines:
            for event in line.events:
                name = names[event.metadata_id].name
                if name == "ExecutorState::Process":
                    process += event.duration_ps
                    threads.add(line.name)
                    continue
                if ":" not in name or not line.name.startswith("tf_"):
                    continue
                op_name, _, op_type = name.rpartition(":")
                if not op_type or " " in op_type:
                    continue
                kernels += event.duration_ps
                part = next(label for label, test in PARTS if test(op_name, op_type))
                parts[part] += event.duration_ps
                counts[part] += 1
                types[part][op_type] += event.duration_ps
    to_s = 1e-12
    return {"parts": {p: parts[p] * to_s for p in parts}, "ops": dict(counts),
            "top op types": {p: ", ".join(f"{t} {100 * v / parts[p]:.0f}%"
                                          for t, v in types[p].most_common(3)) for p in parts},
            "kernels": kernels * to_s, "executor": process * to_s, "threads": len(threads)}


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    if not FLAGS.onednn:
        os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
    logging.set_verbosity(logging.WARNING)
    import tensorflow as tf

    thread_flags.apply()
    if FLAGS.inter_op_threads:
        tf.config.threading.set_inter_op_parallelism_threads(FLAGS.inter_op_threads)
    import ctranslate2

    from keras_transformer.export.ctranslate2 import tokenizer_pieces, write_ctranslate2
    from keras_transformer.tokenizer import END_ID, PAD_ID, START_ID

    intra = thread_flags.used()
    inter = FLAGS.inter_op_threads or os.cpu_count()
    ct2_threads = FLAGS.ctranslate2_threads or min(intra * inter, os.cpu_count())
    model, tokenizer, sentences, described = decoding_benchmark.load_model_and_sentences()
    sentences = sentences[:FLAGS.sentences]
    extra, beam = FLAGS.extra_length, FLAGS.beam_size
    load = os.getloadavg()
    setting = (f"TensorFlow {intra} intra-op x {inter} inter-op threads, oneDNN "
               f"{'on' if FLAGS.onednn else 'off'}; CTranslate2 float32 {ct2_threads} threads")
    print(f"decoding profile: {described}; {setting}; beam {beam}; load {load[0]:.2f}", flush=True)
    pieces = tokenizer_pieces(tokenizer)
    ours = decoding_benchmark.make_ours_for_comparison(model, beam, extra)
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        engine = ctranslate2.Translator(
            write_ctranslate2(model, tokenizer, os.path.join(directory, "model"), extra_length=extra),
            device="cpu", compute_type="float32", intra_threads=ct2_threads, inter_threads=1)
        for batch_size in (int(b) for b in FLAGS.batch_sizes):
            batches = decoding_benchmark.batches_of(tokenizer, sentences, batch_size, bucket=1)
            tokens = [[[pieces[t] for t in row if t not in (PAD_ID, END_ID)] for row in b]
                      for b in batches]

            def run_ours():
                return [[[t for t in row if t not in (PAD_ID, END_ID)]
                         for row in ours(tf.constant(b)).numpy()] for b in batches]

            def run_theirs():
                return [[list(r.hypotheses[0]) for r in engine.translate_batch(
                    tok, beam_size=beam, length_penalty=0.0,
                    max_decoding_length=min(int(b.shape[1]), model.config.max_length) + extra,
                    suppress_sequences=[[pieces[PAD_ID]], [pieces[START_ID]]])]
                    for tok, b in zip(tokens, batches)]

            functions = {"ours": run_ours, "ctranslate2": run_theirs}
            outputs = {name: function() for name, function in functions.items()}  # warm up
            identical = sum([pieces[t] for t in a] == b for a, b in zip(
                [r for batch in outputs["ours"] for r in batch],
                [r for batch in outputs["ctranslate2"] for r in batch]))
            seconds = {name: [] for name in functions}
            for _ in range(FLAGS.runs):  # alternating: load changes hit both
                for name, function in functions.items():
                    started = time.perf_counter()
                    function()
                    seconds[name].append(time.perf_counter() - started)
            median = {name: statistics.median(values) for name, values in seconds.items()}
            row = {"batch": batch_size, "sentences": len(sentences),
                   "ours s": common.spread(seconds["ours"]),
                   "CTranslate2 s": common.spread(seconds["ctranslate2"]),
                   "ours / CTranslate2": round(median["ctranslate2"] / median["ours"], 3),
                   "identical": f"{identical}/{len(sentences)}", "seconds": seconds}
            if FLAGS.trace:
                trace_dir = os.path.join(directory, f"trace{batch_size}")
                tf.profiler.experimental.start(trace_dir)
                started = time.perf_counter()
                run_ours()
                wall = time.perf_counter() - started
                tf.profiler.experimental.stop()
                row["profile"] = dict(op_stats(trace_dir), wall=wall)
            rows.append(row)
            print(f"  batch {batch_size}: ours {median['ours']:.3f} s, CTranslate2 "
                  f"{median['ctranslate2']:.3f} s, ratio {row['ours / CTranslate2']}, identical "
                  f"{row['identical']}", flush=True)
    load_end = os.getloadavg()
    text = [f"{described}; {setting}; beam {beam}; load average {load[0]:.2f} at start, "
            f"{load_end[0]:.2f} at the end.", "",
            common.markdown(rows, ["batch", "sentences", "ours s", "CTranslate2 s",
                                   "ours / CTranslate2", "identical"])]
    for row in rows if FLAGS.trace else []:
        profile = row["profile"]
        table = [{"part": part, "ms": round(1000 * seconds, 1), "ops": profile["ops"][part],
                  "share of kernel time": f"{100 * seconds / profile['kernels']:.1f}%",
                  "top op types": profile["top op types"][part]}
                 for part, seconds in sorted(profile["parts"].items(), key=lambda x: -x[1])]
        text += ["", f"Batch {row['batch']}, one profiled pass: wall {profile['wall']:.3f} s; "
                 f"kernels {profile['kernels']:.3f} s, executor (kernels + dispatch between them) "
                 f"{profile['executor']:.3f} s summed over {profile['threads']} threads; outside "
                 "the executor (Python, function call) the rest of the wall time.", "",
                 common.markdown(table, ["part", "ms", "ops", "share of kernel time",
                                               "top op types"])]
    print("\n" + "\n".join(text))
    common.write_json(FLAGS.profile_output, {
        "model": described, "setting": setting, "beam": beam, "load_average_start": load,
        "load_average_end": load_end, "machine": common.machine(), "rows": rows,
        "markdown": "\n".join(text)})
    print(f"\nwrote {FLAGS.profile_output}")


if __name__ == "__main__":
    from trainers.console import parse_flags  # --help: status 0; a bad flag: one line

    app.run(main, flags_parser=parse_flags)
