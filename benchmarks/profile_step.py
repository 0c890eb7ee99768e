"""Where the time of one training update goes: the TensorFlow profiler's trace of TrainStep on
real batches, every op put in a category (matmuls, loss over the vocabulary, dropout, LayerNorm,
...), plus what the trace does not show (the host sync per step, the input pipeline).

    python -m benchmarks.profile_step                              # small and base, fp32 and bf16
    python -m benchmarks.profile_step --presets=small --precisions=float32 --top_ops=20
    python -m benchmarks.profile_step --smoke --output=/tmp/profile.md   # seconds
    python -m benchmarks.profile_step --main_job --precisions=float32,bfloat16   # the main job's step

For each configuration: one untraced pass over --batches real token-budget batches (tracing),
then --profiled_passes passes under ``tf.profiler.experimental``. The trace (an XSpace protobuf,
read with the protobuf classes TensorFlow ships) holds one event per executed op on each of
TensorFlow's inter-op threads. Ops may run concurrently, so summing their durations would count
the same wall-clock time twice; instead each instant of the profiled wall time is split equally
among the ops running at that instant, and instants where no op runs are "no op running" (Python,
function dispatch, waiting for the result). Each category's share is of that wall time.

Outside the trace, in the same process: reading the step's statistics on the host after every step
(as the trainer does) against once per pass, alternately; and the input pipeline's CPU time per
batch in a first and a second pass, which on a machine with few cores the training step loses.

Writes Markdown (--output; a hand-written reading below its notes marker is kept) and the numbers
as JSON next to it (.json). Not a test: shares depend on the machine and its load.
"""

import bisect
import collections
import glob
import os
import re
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import flags  # noqa: E402

from benchmarks import batch_flags, common  # noqa: E402
from trainers import console, data_flags  # noqa: E402

FLAGS = flags.FLAGS
flags.adopt_module_key_flags(data_flags)
flags.adopt_module_key_flags(batch_flags)
FLAGS.set_default("batches", 4)
flags.DEFINE_integer("profiled_passes", 1, "Passes over the batches under the profiler.",
                     lower_bound=1)
flags.DEFINE_integer("sync_rounds", 3, "Alternating rounds of the host-sync A/B.", lower_bound=1)
flags.DEFINE_integer("top_ops", 12, "Most expensive single ops listed per configuration.")
flags.DEFINE_string("logdir", None, "Where the traces stay (default: a temporary folder, removed).")
flags.DEFINE_string("output", os.path.join("runs", "benchmarks", "profile.md"), "Markdown output "
                    "(the JSON goes next to it).")
flags.DEFINE_bool("main_job", False, "Profile the main job's step instead of --presets: its preset, "
                  "model options, corpus and batch size (benchmarks.common.MAIN_JOB).")
flags.DEFINE_bool("smoke", False, "Seconds-long run of every code path (tiny preset, float32, one "
                  "small batch; the input pipeline's passes over the dev split).")

MATMUL_TYPES = {"MatMul", "_MklMatMul", "_FusedMatMul", "_MklFusedMatMul", "_MklNativeFusedMatMul",
                "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "_MklBatchMatMul",
                "_MklBatchMatMulV2", "_MklBatchMatMulV3", "Einsum", "_MklEinsum"}
IDLE = "no op running (Python, dispatch, waiting)"
# In the order they are tested: the first that matches an op names its category.
CATEGORIES = [
    "matmul: tied output projection (fwd + bwd)",
    "matmul: layer projections and FFN (fwd + bwd)",
    "matmul: attention QK^T and AV (batched)",
    "loss over the vocabulary (softmax-CE, one-hot, arg-max)",
    "dropout (random masks, mask multiply)",
    "LayerNorm (fwd + bwd)",
    "embedding gather and its gradient",
    "attention softmax, mask, scale",
    "transposes (head split/merge)",
    "bias add and ReLU (fwd + bwd)",
    "casts (mixed precision)",
    "optimizer (Adam, gradient norm)",
    "gradient sums and scaling",
    "other ops",
    IDLE,
]


def category(op_type: str, name: str) -> str:
    """The category of one executed op, from its type and its (name-scoped) node name."""
    lower = name.lower()
    if op_type in MATMUL_TYPES:
        # The pre-softmax projection: the model's own matmul, outside encoder/decoder scopes, or
        # the training loss's (training.loss.projected_loss_and_accuracy).
        if "output_projection" in lower or re.search(r"transformer(_\d+)*/tensordot", lower):
            return CATEGORIES[0]
        return CATEGORIES[2] if "batchmatmul" in op_type.lower() else CATEGORIES[1]
    if ("label_smoothed_loss" in lower or "softmax_cross_entropy" in lower or "one_hot" in lower
            or op_type in ("ArgMax", "OneHot", "KerasTransformerSoftmaxRows")
            or "SoftmaxCrossEntropy" in op_type):
        return CATEGORIES[3]
    # Our kernels by type: a custom gradient's ops run outside the layer's name scope.
    if "dropout" in lower or op_type in ("KerasTransformerDropoutKeep",
                                         "KerasTransformerApplyKeep"):
        return CATEGORIES[4]
    if ("_norm" in lower or "moments" in lower or "batchnorm" in lower
            or op_type.startswith("KerasTransformerLayerNorm")):
        return CATEGORIES[5]
    if "embedding" in lower or op_type in ("GatherV2", "ResourceGather", "UnsortedSegmentSum"):
        return CATEGORIES[6]
    if "Transpose" in op_type:
        return CATEGORIES[8]
    if "attention" in lower and ("Softmax" in op_type or op_type in (
            "SelectV2", "Select", "Sub", "Mul", "RealDiv", "Sum", "Neg", "Exp", "Max")):
        return CATEGORIES[7]
    if "attention" in lower and op_type in ("Pack", "Unpack"):  # Q, K and V apart or together
        return CATEGORIES[8]
    if (op_type in ("Relu", "ReluGrad", "BiasAdd", "BiasAddGrad", "_MklRelu", "_MklReluGrad")
            or "bias_gradient" in lower):  # layers.dense's
        return CATEGORIES[9]
    if op_type == "Cast":
        return CATEGORIES[10]
    if ("adam" in lower or "global_norm" in lower or "optimizer" in lower
            or op_type.startswith(("Assign", "ResourceApply"))):
        return CATEGORIES[11]
    if op_type in ("AddN", "Mul", "RealDiv") and re.match(r"^statefulpartitionedcall/(addn|mul)",
                                                          lower):
        return CATEGORIES[12]
    return CATEGORIES[13]


def read_trace(logdir):
    """[(start_ps, end_ps, op_type, op_name)] of every executed op in the newest trace, times in
    picoseconds of the wall clock (time.time_ns() * 1000)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    paths = sorted(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True),
                   key=os.path.getmtime)
    space = xplane_pb2.XSpace()
    with open(paths[-1], "rb") as stream:
        space.ParseFromString(stream.read())
    events = []
    origin_ps = 0  # the trace's times count from the profiler's start
    for plane in space.planes:
        for stat in plane.stats:
            if plane.stat_metadata[stat.metadata_id].name == "profile_start_time":
                origin_ps = (stat.uint64_value or stat.int64_value) * 1000
    for plane in space.planes:
        if plane.name != "/host:CPU":
            continue
        for line in plane.lines:
            # Inter-op threads run the ops; intra-op (Eigen) threads only help inside one.
            if not line.name.startswith("tf_Compute"):
                continue
            for event in line.events:
                meta = plane.event_metadata[event.metadata_id]
                # Op events are named "node_name:OpType"; executor and thread-pool events
                # around and inside them are not ops.
                if not meta.display_name or not meta.name.endswith(":" + meta.display_name):
                    continue
                start = origin_ps + line.timestamp_ns * 1000 + event.offset_ps
                events.append((start, start + event.duration_ps, meta.display_name,
                               meta.name[:-len(meta.display_name) - 1]))
    return events


def attribute(events, start_ps, end_ps):
    """Wall time in seconds per category, per op (type, name), and the mean concurrency: every
    instant of [start_ps, end_ps) is shared equally among the ops running then."""
    cuts = sorted({start_ps, end_ps, *(t for e in events for t in e[:2]
                                       if start_ps <= t <= end_ps)})
    delta = [0] * (len(cuts) + 1)
    for begin, end, _, _ in events:
        i, j = bisect.bisect_left(cuts, max(begin, start_ps)), bisect.bisect_left(cuts, min(end, end_ps))
        if j > i:
            delta[i] += 1
            delta[j] -= 1
    active, running = [], 0  # ops running in [cuts[k], cuts[k+1])
    for change in delta[:-1]:
        running += change
        active.append(running)
    share_prefix = [0.0]  # prefix sums of (interval length / ops running) over the intervals
    idle = 0.0
    for k in range(len(cuts) - 1):
        length = (cuts[k + 1] - cuts[k]) * 1e-12
        share_prefix.append(share_prefix[-1] + (length / active[k] if active[k] else 0.0))
        if not active[k]:
            idle += length
    by_category = collections.Counter({IDLE: idle})
    by_op = collections.Counter()
    busy_sum = 0.0
    for begin, end, op_type, name in events:
        i, j = bisect.bisect_left(cuts, max(begin, start_ps)), bisect.bisect_left(cuts, min(end, end_ps))
        if j <= i:
            continue
        seconds = share_prefix[j] - share_prefix[i]
        by_category[category(op_type, name)] += seconds
        by_op[(op_type, re.sub(r"^StatefulPartitionedCall/", "", name))] += seconds
        busy_sum += (min(end, end_ps) - max(begin, start_ps)) * 1e-12
    wall = (end_ps - start_ps) * 1e-12
    return by_category, by_op, busy_sum / max(wall - idle, 1e-12)


def profile(step, batches, passes, logdir):
    """Profiles ``passes`` passes over ``batches``; returns (wall seconds per step, categories,
    ops) with times per step."""
    import tensorflow as tf

    for batch in batches:  # tracing, outside the profile
        float(step.step_on_batches((batch,))["loss_sum"])
    tf.profiler.experimental.start(logdir)
    began = time.perf_counter()
    start_ns = time.time_ns()
    for _ in range(passes):
        for batch in batches:
            float(step.step_on_batches((batch,))["loss_sum"])
    end_ns = time.time_ns()
    wall = time.perf_counter() - began
    tf.profiler.experimental.stop()
    events = read_trace(logdir)
    # The window is what the loop above spent (the trace also holds the profiler's own start).
    by_category, by_op, concurrency = attribute(events, start_ns * 1000, end_ns * 1000)
    steps = passes * len(batches)
    return (wall / steps, {k: v / steps for k, v in by_category.items()},
            collections.Counter({k: v / steps for k, v in by_op.items()}), concurrency)


def host_sync_ab(step, batches, rounds):
    """Seconds per step reading the statistics after every step (the trainer's loop) and once
    per pass, alternately: (per-step sync, one sync per pass)."""
    every, once = [], []
    for _ in range(rounds):
        for mode in ("every", "once"):
            started = time.perf_counter()
            results = []
            for batch in batches:
                result = step.step_on_batches((batch,))
                if mode == "every":
                    {k: v.numpy() for k, v in result.items()}
                else:
                    results.append(result)
            if results:
                {k: v.numpy() for k, v in results[-1].items()}
            (every if mode == "every" else once).append(
                (time.perf_counter() - started) / len(batches))
    return statistics.median(every), statistics.median(once)


def pipeline_seconds(config, tokenizer, split="train"):
    """The input pipeline's CPU (all threads) and wall seconds per batch of ``split`` when alone,
    over two passes: where the trainer keeps the tokenized pairs, only the first tokenizes."""
    from keras_transformer import data

    dataset, passes = data.make_dataset(config, tokenizer, split, training=True), {}
    for name in ("first_pass", "second_pass"):
        cpu, wall = time.process_time(), time.perf_counter()
        batches = sum(1 for _ in dataset)
        passes[name] = {"cpu_seconds_per_batch": (time.process_time() - cpu) / batches,
                        "wall_seconds_per_batch": (time.perf_counter() - wall) / batches}
    return {"batches_per_pass": batches, **passes}


def measure(preset, precision, vocab_size, batches, logdir, overrides=None):
    _, _, step = common.train_step(preset, precision, vocab_size, overrides=overrides)
    wall, by_category, by_op, concurrency = profile(step, batches, FLAGS.profiled_passes, logdir)
    every, once = host_sync_ab(step, batches, FLAGS.sync_rounds)
    return {"preset": preset, "precision": precision, "step_seconds_profiled": wall,
            "categories": dict(by_category), "concurrency": concurrency,
            "top_ops": [{"type": t, "name": n, "seconds": s}
                        for (t, n), s in by_op.most_common(FLAGS.top_ops)],
            "sync_every_step_seconds": every, "sync_once_per_pass_seconds": once}


def percent(part, whole):
    return f"{100 * part / whole:.1f}%" if whole else ""


TITLE = "# Where a training step's time goes"


def markdown(result):
    """The profile's page below its title (``python -m benchmarks`` puts it in its report)."""
    rows = result["rows"]
    machine = result["machine"]
    names = [f"{r.get('model', r['preset'])} {r['precision']}" for r in rows]
    lines = [
        f"Machine: {machine['cpu']}, {machine['cpus']} CPUs; TensorFlow {machine['tensorflow']}; "
        f"{machine['date']}; load average at the start {machine['load_average'][0]}. Command: "
        f"`python -m benchmarks.profile_step{' --main_job' if result.get('main_job') else ''}` "
        f"({result['batches']} real batches of "
        f"{result['data']['dataset']} train, {result['data']['token_budget']:,} tokens per side, "
        f"vocabulary {result['data']['vocab_size']:,}; "
        + ("the main job's model options: " + "; ".join(
            f"{row['model']} {row['precision']}: {row['model_options']}" for row in rows) + "; "
           if result.get("main_job") else "")
        + "TrainStep without XLA; "
        f"{result['profiled_passes']} profiled pass(es)).",
        "",
        "Share of the profiled wall time per category (each instant split among the ops running "
        "then; see the module docstring of benchmarks/profile_step.py):",
        "",
    ]
    table = []
    for name in CATEGORIES:
        table.append({"category": name, **{
            label: percent(r["categories"].get(name, 0.0), r["step_seconds_profiled"])
            for label, r in zip(names, rows)}})
    table.append({"category": "**step wall time, s (profiled)**", **{
        label: f"{r['step_seconds_profiled']:.3f}" for label, r in zip(names, rows)}})
    table.append({"category": "mean ops running at once (when any runs)", **{
        label: f"{r['concurrency']:.2f}" for label, r in zip(names, rows)}})
    table.append({"category": "host sync after every step (vs once per pass), per step", **{
        label: f"{1e3 * (r['sync_every_step_seconds'] - r['sync_once_per_pass_seconds']):+.1f} "
               f"ms ({percent(r['sync_every_step_seconds'] - r['sync_once_per_pass_seconds'], r['sync_once_per_pass_seconds'])})"
        for label, r in zip(names, rows)}})
    lines += [common.markdown(table, ["category"] + names), ""]
    pipeline = result["input_pipeline"]
    first, later = pipeline["first_pass"], pipeline["second_pass"]
    lines += [f"Input pipeline (not in the trace: the trainer's prefetching tf.data pipeline runs beside "
              f"the step), per batch of a pass of {pipeline['batches_per_pass']:,}: "
              f"{later['cpu_seconds_per_batch'] * 1e3:.1f} ms of CPU time in a second pass "
              f"({later['wall_seconds_per_batch'] * 1e3:.1f} ms wall when alone), "
              f"{first['cpu_seconds_per_batch'] * 1e3:.1f} ms in the first (which alone tokenizes where "
              "the trainer keeps the tokenized pairs); per preset, a second pass's: " + ", ".join(
                  f"{label} {percent(later['cpu_seconds_per_batch'], r['step_seconds_profiled'] * machine['cpus'])} of the step's CPU time"
                  for label, r in zip(names, rows)) + ".", ""]
    for label, row in zip(names, rows):
        lines += [f"Most expensive ops, {label} (ms per step):", "",
                  common.markdown([{"op": o["type"], "name": o["name"][:110],
                                    "ms": f"{1e3 * o['seconds']:.1f}"} for o in row["top_ops"]],
                                  ["op", "name", "ms"]), ""]
    return "\n".join(lines)


NOTES = "<!-- notes: kept when benchmarks.profile_step rewrites this file -->"


def kept_notes(path) -> str:
    """The hand-written reading of an earlier profile below the NOTES marker, kept as it was."""
    try:
        with open(path) as stream:
            earlier = stream.read()
    except OSError:
        return ""
    return "\n\n" + earlier[earlier.index(NOTES):] if NOTES in earlier else ""


def main(argv):
    del argv  # console.run has refused stray arguments
    presets, precisions, count, overrides = FLAGS.presets, FLAGS.precisions, FLAGS.batches, {}
    main_job = False
    if FLAGS.main_job:
        job = common.MAIN_JOB
        presets = [job["preset"]]
        overrides = {key: job[key] for key in ("dataset", "vocab_size", "token_budget", "max_length")}
        main_job = True
    if FLAGS.smoke:  # bfloat16 takes the same code path
        presets, precisions, count = ["tiny"], ["float32"], 1
        overrides = dict(token_budget=256, vocab_size=512)
    config = data_flags.data_config(xla=False, **overrides)
    tokenizer, batches, padding = common.real_batches(config, count)
    pipeline, rows = pipeline_seconds(config, tokenizer, "dev" if FLAGS.smoke else "train"), []
    with tempfile.TemporaryDirectory(prefix="profile_step_") as scratch:
        logdir = FLAGS.logdir or scratch  # the traces stay only where --logdir says
        for preset in presets:
            for precision in precisions:
                options = common.main_job_options(precision) if main_job else None
                row = measure(preset, precision, tokenizer.vocab_size, batches,
                              os.path.join(logdir, f"{preset}_{precision}"), options)
                if main_job:
                    row.update(model=common.main_job_label(precision), model_options=options)
                rows.append(row)
                top = sorted(row["categories"].items(), key=lambda kv: -kv[1])[:4]
                seconds, label = row["step_seconds_profiled"], row.get("model", preset)
                print(f"  {label} {precision}: {seconds:.3f} s/step; " + ", ".join(
                    f"{name} {percent(s, seconds)}" for name, s in top), flush=True)
    result = {"machine": common.machine(), "batches": count, "main_job": main_job,
              "profiled_passes": FLAGS.profiled_passes,
              "data": {"dataset": config.dataset, "token_budget": config.token_budget,
                       "vocab_size": tokenizer.vocab_size, **padding},
              "input_pipeline": pipeline, "rows": rows}
    result["markdown"] = markdown(result)
    text = f"{TITLE}\n\n{result['markdown']}"
    from keras_transformer import writing

    writing.write_file(FLAGS.output, text + kept_notes(FLAGS.output))
    common.write_json(os.path.splitext(FLAGS.output)[0] + ".json", result)
    print("\n" + text + f"\n\nwrote {FLAGS.output}")


if __name__ == "__main__":
    console.run(main)
