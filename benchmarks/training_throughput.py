"""Training throughput on real batches: tokens/s of one update (forward, backward, Adam) per
preset, precision and XLA setting, and the model FLOP/s as a fraction of this machine's matmul
peak measured in the same run.

    python -m benchmarks.training_throughput                          # small and base, 8 rows
    python -m benchmarks.training_throughput --presets=small --precisions=float32 --xla=off
    python -m benchmarks.training_throughput --main_job=false       # the presets only
    python -m benchmarks.training_throughput --smoke --output=/tmp/smoke.json   # seconds
    python -m benchmarks.training_throughput --xla=off --main_job=false --compare=PATH
                                          # the same ratios as an earlier run's JSON (PATH)?

Batches are --batches token-budget batches of the training split (the offline Ding corpus by
default; any dataset through the data flags) as the trainer feeds them (the exact bucket grid
without XLA, multiples of 8 with it, unless --bucket_multiple), spread over its first pass, or
the whole pass (--batches=0: training's own shapes and padding); real tokens per step and the
padding fraction are reported. Every configuration first runs once over all of them (tracing;
XLA compiles one program per padded shape), then --runs timed passes; a row gives the median,
min and max over the passes of the time per step.

--main_job adds rows for the main job (python -m trainers.quickstart): preset mini with its
options, corpus and batch size, in float32 and in the precision the main job picks on this
machine (bfloat16 where the CPU has bf16 units; --main_job_precisions), each at the width the
quickstart's recipe for that precision trains (benchmarks.common.MAIN_JOB_WIDTHS), over its whole
first pass (--main_job_batches: at its small step a sample of 8 moves the row by points), its
weight products also timed alone shape by shape (a second table: how near the peak they run).

Model FLOPs follow the usual 6-FLOPs-per-weight-per-token count (2 forward, 4 backward), over
REAL tokens only (padding is work the model wastes): source tokens through the encoder weights,
target tokens through the decoder weights and the tied pre-softmax projection (embedding
look-ups are not matmuls; attention's QK^T and AV are not counted). The matmul peaks (float32
and bfloat16) are sampled before the first configuration, after each one and after the last;
every ratio divides by the best sample, and the samples' spread is reported. "% of fp32 peak"
divides by the float32 peak for every row; bfloat16 rows also show the fraction of the bfloat16
peak. A row above the peak of its own precision is flagged: the peak was measured too low (a
busy machine), so no ratio of that run can be trusted. Peak memory is the resident-set
high-water mark while the configuration ran, for the whole process and above what it held
before. Prints a Markdown table and writes JSON (--output).

--compare reads an earlier run's JSON (of the parent commit, say: docs/development.md) and sets
each row beside the same configuration there: the change of its share of the peak of its own
precision, and whether that change is within noise (``targets.repeat_comparison``). The exit
status is 1 if a row differs by more.
"""

import collections
import math
import os
import statistics
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

from benchmarks import batch_flags, common, targets  # noqa: E402
from trainers import console, data_flags  # noqa: E402

FLAGS = flags.FLAGS
flags.adopt_module_key_flags(data_flags)
flags.adopt_module_key_flags(batch_flags)
flags.DEFINE_enum("xla", "both", ["off", "on", "both"], "Measure without and/or with XLA.")
flags.DEFINE_integer("runs", 3, "Timed passes over the batches (median, min, max).", lower_bound=1)
flags.DEFINE_bool("main_job", True, "Also measure the main job's model and batches "
                  "(python -m trainers.quickstart: preset mini, its corpus and precision).")
flags.DEFINE_list("main_job_precisions", ["float32", "auto"],
                  "The main job's precisions, a row each: float32 (what the main job runs on an "
                  "AVX2-only machine), bfloat16, auto (the machine's choice, as the main job's; "
                  "a precision already listed is measured once).")
flags.DEFINE_integer("main_job_batches", 0, "The main job's batches, spread over its first pass as "
                     "--batches; 0: every batch of the pass.", lower_bound=0)
flags.register_validator("main_job_precisions",
                         lambda values: set(values) <= {"float32", "bfloat16", "auto"},
                         "must name float32, bfloat16 or auto only")
flags.DEFINE_integer("matmul_size", 4096, "n of the n x n x n matmuls measuring the peaks.")
flags.DEFINE_string("output", os.path.join("runs", "benchmarks", "training_throughput.json"),
                    "JSON output.")
flags.DEFINE_string("compare", None, "An earlier JSON of this benchmark: each row beside the same "
                    "configuration there, same within noise or not (exit status 1 if not).")
flags.DEFINE_bool("smoke", False, "Seconds-long run of every code path (tiny preset, one small "
                  "batch, one pass, small matmuls); overrides the sizes above.")

COLUMNS = ["preset", "precision", "XLA", "real tokens/step (src+tgt)", "padding",
           "step s (median [min, max])", "tokens/s", "model GFLOP/s",
           "matmuls alone: share of the step", "% of fp32 peak",
           "% of bf16 peak", "peak memory MB (process / added)", "first pass s"]


def measure(preset, precision, xla, vocab_size, batches, runs, overrides=None, by_shape=False):
    """One configuration's row: a first pass over ``batches`` (tracing), then ``runs`` timed
    passes of one update per batch (``by_shape``: see ``matmuls_alone``)."""
    from keras_transformer.training import speed

    with common.PeakMemory() as memory:
        config, model, step = common.train_step(preset, precision, vocab_size, xla, overrides)
        first_pass = speed.timed_pass(step, batches)[0] * len(batches)
        passes = []
        for _ in range(runs):
            seconds, sums = speed.timed_pass(step, batches)
            passes.append(seconds)
    source = sum(float(s["source_tokens"]) for s in sums) / len(batches)
    target = sum(float(s["target_tokens"]) for s in sums) / len(batches)
    encoder, decoder, softmax = common.parameter_counts(model)
    flops = 6.0 * (encoder * source + (decoder + softmax) * target)
    seconds = statistics.median(passes)
    row = {"preset": preset, "precision": precision, "xla": xla,
           "parameters": int(model.count_params()),
           "source_tokens_per_step": source, "target_tokens_per_step": target,
           "step_seconds": common.median_min_max(passes),
           "tokens_per_second": (source + target) / seconds,
           "model_flops_per_step": flops, "model_flops_per_second": flops / seconds,
           "peak_memory_bytes": memory.bytes, "added_memory_bytes": memory.added_bytes,
           "first_pass_seconds": first_pass}
    row["matmul_seconds_alone"], products = matmuls_alone(config, precision, batches, by_shape)
    row["matmul_share_of_step"] = row["matmul_seconds_alone"] / seconds
    if by_shape:
        row["products_by_shape"] = products
    return row


def matmuls_alone(config, precision, batches, by_shape=False):
    """(seconds, by shape) of the step's weight products alone (mean padded rows of the batches):
    the step's time outside them is what the element-wise work, the loss and the optimizer cost.
    ``by_shape``: also ``[{"shape", "per_step", "seconds"}]``, all of a step's products of a shape
    timed in one call as the total is (else None): a small model's shapes are not 4096^3's."""
    import tensorflow as tf

    source_rows = round(statistics.mean(int(tf.size(b[0][0])) for b in batches))
    target_rows = round(statistics.mean(int(tf.size(b[1])) for b in batches))
    dtype = tf.bfloat16 if precision == "bfloat16" else tf.float32
    shapes = common.layer_matmul_shapes(config, source_rows, target_rows)
    products = [dict(shape=shape, per_step=n, seconds=common.matmul_seconds([shape] * n, dtype))
                for shape, n in collections.Counter(shapes).items()] if by_shape else None
    return common.matmul_seconds(shapes, dtype), products


def shapes_table(rows, peaks):
    """The main job's weight products shape by shape (6 FLOPs per weight and row)."""
    def flops(p):
        return 6.0 * p["per_step"] * math.prod(p["shape"]) / p["seconds"]

    return common.markdown([{
        "model": row["model"], "precision": row["precision"],
        "rows x inputs x outputs": " x ".join(f"{n:,}" for n in p["shape"]),
        "per step": p["per_step"], "ms alone (all per step)": f"{1e3 * p['seconds']:.2f}",
        "GFLOP/s": f"{flops(p) / 1e9:,.1f}",
        "share of its precision's peak": f"{100 * flops(p) / peaks[row['precision']]:.0f}%",
    } for row in rows for p in row.get("products_by_shape", ())])


def table_row(row, peaks):
    fp32 = row["model_flops_per_second"] / peaks["float32"]
    bf16 = row["model_flops_per_second"] / peaks["bfloat16"]
    error = f" {common.PEAK_ERROR}" if common.peak_error(row) else ""
    return {
        "preset": (f"{row.get('model', row['preset'])} (main job: {row['dataset']}, "
                   f"{row['token_budget']:,} tokens/side, {row['batches']['measured']} batches)"
                   if row.get("main_job") else row["preset"]),
        "precision": row["precision"],
        "XLA": "on" if row["xla"] else "off",
        "real tokens/step (src+tgt)":
            f"{row['source_tokens_per_step'] + row['target_tokens_per_step']:,.0f}",
        "padding": f"{100 * row['batches']['padding_fraction']:.1f}% "
                   f"(grid {row['batches']['bucket_multiple']})",
        "step s (median [min, max])": common.spread(
            [row["step_seconds"][k] for k in ("median", "min", "max")]),
        "tokens/s": f"{row['tokens_per_second']:,.0f}",
        "model GFLOP/s": f"{row['model_flops_per_second'] / 1e9:,.1f}",
        "matmuls alone: share of the step": (
            f"{100 * row['matmul_share_of_step']:.0f}%"
            + (" (disturbed)" if common.matmul_timing_disturbed(row) else "")
            if "matmul_share_of_step" in row else ""),
        "% of fp32 peak": f"{100 * fp32:.0f}%" + (error if row["precision"] == "float32" else ""),
        "% of bf16 peak": f"{100 * bf16:.0f}%{error}" if row["precision"] == "bfloat16" else "",
        "peak memory MB (process / added)":
            f"{row['peak_memory_bytes'] / 2**20:,.0f} / {row['added_memory_bytes'] / 2**20:,.0f}",
        "first pass s": f"{row['first_pass_seconds']:.1f}",
    }


def main_job_rows(smoke_overrides, count, runs, peak):
    """The main job's training speed: its preset, model options, corpus and batches, a row per
    precision of --main_job_precisions (the smoke run keeps its own small corpus)."""
    from keras_transformer.training import resolve_precision

    job = common.MAIN_JOB
    corpus = smoke_overrides or {key: job[key] for key in ("dataset", "vocab_size",
                                                            "token_budget", "max_length")}
    config = data_flags.data_config(xla=False, **corpus)
    tokenizer, batches, padding = common.real_batches(config, count)
    rows = []
    for precision in dict.fromkeys(map(resolve_precision, FLAGS.main_job_precisions)):
        row = measure(job["preset"], precision, False, tokenizer.vocab_size, batches, runs,
                      overrides=common.main_job_options(precision), by_shape=True)
        row.update(batches=padding, main_job=True, dataset=config.dataset,
                   token_budget=config.token_budget, model=common.main_job_label(precision))
        rows.append(row)
        print_row(row)
        report_peak(peak.sample(f"after the main job, {precision}"))
    return rows


def print_row(row):
    print(f"  {row['preset']} {row['precision']} xla={row['xla']}: "
          f"{row['tokens_per_second']:,.0f} tokens/s, "
          f"{row['model_flops_per_second'] / 1e9:,.1f} GFLOP/s", flush=True)


def report_peak(sample):
    print(f"matmul peak sample ({sample['when']}): " + ", ".join(
        f"{dtype} {value / 1e9:,.1f} GFLOP/s" for dtype, value in sample.items() if dtype != "when"),
        flush=True)


def measure_rows(presets, precisions, runs, count, peak, overrides):
    """Every preset's row, the matmul peak sampled after each; (rows, data description)."""
    configs = {xla: data_flags.data_config(xla=xla, **overrides) for xla in (False, True)}
    # One set per distinct configuration (both XLA settings share one if --bucket_multiple is given).
    by_config = {config: common.real_batches(config, count) for config in set(configs.values())}
    tokenizer = by_config[configs[False]][0]
    batches = {xla: by_config[config][1:] for xla, config in configs.items()}
    rows = []
    for preset in presets:
        for precision in precisions:
            for xla in {"off": [False], "on": [True], "both": [False, True]}[FLAGS.xla]:
                row = measure(preset, precision, xla, tokenizer.vocab_size, batches[xla][0], runs)
                row["batches"] = batches[xla][1]
                rows.append(row)
                print_row(row)
                report_peak(peak.sample(f"after {preset} {precision} xla={'on' if xla else 'off'}"))
    config = configs[False]
    described = {"dataset": config.dataset, "token_budget": config.token_budget,
                 "vocab_size": tokenizer.vocab_size, "batches": count,
                 "without_xla": batches[False][1], "with_xla": batches[True][1]}
    return rows, described


def divide_by_the_peak(rows, peak):
    """Every row's share of the best peak sample of the whole run; (peaks, their spread)."""
    # The samples above include the one after the last configuration ("after").
    peak.samples[-1]["when"] = "after"
    peaks = peak.peaks()
    for row in rows:
        row["fraction_of_fp32_peak"] = row["model_flops_per_second"] / peaks["float32"]
        row["fraction_of_bf16_peak"] = row["model_flops_per_second"] / peaks["bfloat16"]
        row["peak_error"] = common.peak_error(row)
    spread = peak.spread()
    print(f"\nmatmul peak ({peak.n}^3), best of {len(peak.samples)} samples: " + "; ".join(
        f"{dtype} {peaks[dtype] / 1e9:,.1f} GFLOP/s (samples median {s['median'] / 1e9:,.1f}, "
        f"min {s['min'] / 1e9:,.1f})" for dtype, s in spread.items()), flush=True)
    for row in rows:
        if row["peak_error"]:
            print(f"WARNING: {row['preset']} {row['precision']} {common.PEAK_ERROR}", flush=True)
    return peaks, spread


def compare(result, path):
    """Each row beside the same configuration of the earlier JSON at ``path``; False if one
    differs beyond its noise."""
    earlier = common.read_json(path)
    result["comparison"] = {"earlier": common.shown_path(path),
                            "earlier_date": earlier["machine"]["date"],
                            "rows": targets.repeat_comparison(earlier, result["rows"])}
    print(f"\nBeside {path} ({earlier['machine']['date']}):\n\n"
          + targets.comparison_markdown(result["comparison"]))
    return all(c["same"] for c in result["comparison"]["rows"])


def main(argv):
    del argv  # console.run has refused stray arguments
    if FLAGS.compare and not os.path.isfile(FLAGS.compare):
        raise app.UsageError(f"--compare={FLAGS.compare}: no such file (an earlier JSON of this "
                             "benchmark).")
    presets, precisions, runs, count, size, main_job_count = (
        FLAGS.presets, FLAGS.precisions, FLAGS.runs, FLAGS.batches, FLAGS.matmul_size,
        FLAGS.main_job_batches)
    overrides = {}
    if FLAGS.smoke:
        presets, runs, count, size, main_job_count = ["tiny"], 1, 1, 256, 1
        overrides = dict(token_budget=256, vocab_size=512)
    machine = common.machine()  # the load average at the start
    peak = common.MatmulPeak(size)
    report_peak(peak.sample("before"))
    rows, described = (measure_rows(presets, precisions, runs, count, peak, overrides) if presets
                       else ([], None))  # no presets: their corpus is neither prepared nor read
    if FLAGS.main_job:
        rows += main_job_rows(overrides, main_job_count, runs, peak)
    xla_matmul = None
    if any(row["xla"] for row in rows):  # why XLA's step is slower: its matmul beside oneDNN's
        xla_matmul = peak.xla_sample()
        print("matmul compiled by XLA: " + ", ".join(
            f"{dtype} {value / 1e9:,.1f} GFLOP/s" for dtype, value in xla_matmul.items()), flush=True)
    peaks, spread = divide_by_the_peak(rows, peak)
    table = common.markdown([table_row(r, peaks) for r in rows], COLUMNS)
    if described:
        print(f"\n{f'{count} batches' if count else 'every batch of the first pass'} of "
              f"{described['dataset']} train, {described['token_budget']} tokens/side budget")
    if any("products_by_shape" in row for row in rows):
        table += f"\n\n{shapes_table(rows, peaks)}"
    print(f"\n{table}")
    machine["load_average_at_end"] = common.machine()["load_average"]
    result = {"machine": machine, "matmul_size": size,
              "matmul_peak_flops": peaks, "matmul_peak_spread": spread,
              "matmul_peak_samples": peak.samples, "data": described,
              "runs": runs, "rows": rows, "markdown": table}
    if xla_matmul:
        result["xla_matmul_flops"] = xla_matmul
    same = compare(result, FLAGS.compare) if FLAGS.compare else True
    common.write_json(FLAGS.output, result)
    print(f"\nwrote {FLAGS.output}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    console.run(main)
