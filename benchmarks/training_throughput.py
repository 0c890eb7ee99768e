"""Training throughput on real batches: tokens/s of one update (forward, backward, Adam) per
preset, precision and XLA setting, and the model FLOP/s as a fraction of this machine's matmul
peak measured in the same run.

    python -m benchmarks.training_throughput                          # small and base, 8 rows
    python -m benchmarks.training_throughput --presets=small --precisions=float32 --xla=off
    python -m benchmarks.training_throughput --smoke --output=/tmp/smoke.json   # seconds

Batches are --batches token-budget batches of the training split (the offline Ding corpus by
default; any dataset through the data flags), exactly as the trainer feeds them (the exact bucket
grid without XLA, the grid of multiples of 8 with it, unless --bucket_multiple): real tokens per
step and the padding fraction are reported. Every configuration first runs once over all of them
(tracing; XLA compiles one program per padded shape), then --runs timed passes; a row gives the
median, min and max over the passes of the time per step.

Model FLOPs follow the usual 6-FLOPs-per-weight-per-token count (2 forward, 4 backward), over
REAL tokens only (padding is work the model wastes): source tokens through the encoder weights,
target tokens through the decoder weights and the tied pre-softmax projection (embedding
look-ups are not matmuls; attention's QK^T and AV are not counted). "% of fp32 peak" divides by
the float32 matmul peak for every row, as the targets of the README do; bfloat16 rows also show
the fraction of the bfloat16 peak. Peak memory is the resident-set high-water mark while the
configuration ran, for the whole process and above what it held before. Prints a Markdown table and writes JSON (--output).
"""

import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags, logging  # noqa: E402

from benchmarks import common  # noqa: E402
from trainers import data_flags  # noqa: E402

FLAGS = flags.FLAGS
flags.adopt_module_key_flags(data_flags)
FLAGS.set_default("token_budget", 4096)
FLAGS.set_default("max_length", 64)
flags.DEFINE_list("presets", ["small", "base"], "Presets to measure.")
flags.DEFINE_list("precisions", ["float32", "bfloat16"], "Compute precisions (float32, bfloat16).")
flags.DEFINE_enum("xla", "both", ["off", "on", "both"], "Measure without and/or with XLA.")
flags.DEFINE_integer("batches", 8, "Distinct real batches per pass.", lower_bound=1)
flags.DEFINE_integer("runs", 3, "Timed passes over the batches (median, min, max).", lower_bound=1)
flags.DEFINE_integer("matmul_size", 4096, "n of the n x n x n matmuls measuring the peaks.")
flags.DEFINE_string("output", os.path.join("runs", "benchmarks", "training_throughput.json"),
                    "JSON output.")
flags.DEFINE_bool("smoke", False, "Seconds-long run of every code path (tiny preset, one small "
                  "batch, one pass, small matmuls); overrides the sizes above.")

COLUMNS = ["preset", "precision", "XLA", "real tokens/step (src+tgt)", "padding",
           "step s (median [min, max])", "tokens/s", "model GFLOP/s", "% of fp32 peak",
           "% of bf16 peak", "peak memory MB (process / added)", "first pass s"]


def parameter_counts(model):
    """(encoder weights, decoder weights, pre-softmax projection weights)."""
    import numpy as np

    def count(layer):
        return int(sum(np.prod(v.shape) for v in layer.trainable_variables))

    config = model.config
    return count(model.encoder), count(model.decoder), config.output_vocab_size * config.d_model


def real_batches(config, tokenizer, count):
    """``count`` training batches as the trainer sees them, and their padding statistics."""
    import numpy as np

    from keras_transformer import data

    dataset = data.make_dataset(config, tokenizer, "train", training=True, repeat=True)
    batches = list(dataset.take(count))
    real = padded = 0
    for (source, _), target in batches:
        real += int(np.count_nonzero(source.numpy()) + np.count_nonzero(target.numpy()))
        padded += int(np.size(source.numpy()) + np.size(target.numpy()))
    return batches, {"bucket_multiple": config.bucket_multiple, "real_tokens": real,
                     "padded_tokens": padded, "padding_fraction": 1 - real / padded,
                     "shapes": len({tuple(b[0][0].shape) for b in batches})}


def measure(preset, precision, xla, vocab_size, batches, runs):
    import keras

    import keras_transformer as kt
    from keras_transformer.training import TrainStep, build_model, paper_optimizer

    keras.utils.set_random_seed(0)
    config = kt.TransformerConfig.from_preset(preset, vocab_size=vocab_size, max_length=256)
    with common.PeakMemory() as memory:
        model = build_model(config, precision)
        optimizer = paper_optimizer(config.d_model)
        optimizer.build(model.trainable_variables)
        step = TrainStep(model, optimizer, label_smoothing=config.label_smoothing, jit_compile=xla)
        started = time.perf_counter()
        for batch in batches:
            float(step.step_on_batches((batch,))["loss_sum"])
        first_pass = time.perf_counter() - started
        passes, totals = [], None
        for _ in range(runs):
            started = time.perf_counter()
            sums = [step.step_on_batches((batch,)) for batch in batches]
            float(sums[-1]["loss_sum"])  # waits for the last update
            passes.append((time.perf_counter() - started) / len(batches))
            totals = sums
    source = sum(float(s["source_tokens"]) for s in totals) / len(batches)
    target = sum(float(s["target_tokens"]) for s in totals) / len(batches)
    encoder, decoder, softmax = parameter_counts(model)
    flops = 6.0 * (encoder * source + (decoder + softmax) * target)
    seconds = statistics.median(passes)
    return {"preset": preset, "precision": precision, "xla": xla,
            "parameters": int(model.count_params()),
            "source_tokens_per_step": source, "target_tokens_per_step": target,
            "step_seconds": common.median_min_max(passes),
            "tokens_per_second": (source + target) / seconds,
            "model_flops_per_step": flops, "model_flops_per_second": flops / seconds,
            "peak_memory_bytes": memory.bytes, "added_memory_bytes": memory.added_bytes,
            "first_pass_seconds": first_pass}


def table_row(row, peaks):
    fp32 = row["model_flops_per_second"] / peaks["float32"]
    bf16 = row["model_flops_per_second"] / peaks["bfloat16"]
    return {
        "preset": row["preset"], "precision": row["precision"],
        "XLA": "on" if row["xla"] else "off",
        "real tokens/step (src+tgt)":
            f"{row['source_tokens_per_step'] + row['target_tokens_per_step']:,.0f}",
        "padding": f"{100 * row['batches']['padding_fraction']:.1f}% "
                   f"(grid {row['batches']['bucket_multiple']})",
        "step s (median [min, max])": common.spread(
            [row["step_seconds"][k] for k in ("median", "min", "max")]),
        "tokens/s": f"{row['tokens_per_second']:,.0f}",
        "model GFLOP/s": f"{row['model_flops_per_second'] / 1e9:,.1f}",
        "% of fp32 peak": f"{100 * fp32:.0f}%",
        "% of bf16 peak": f"{100 * bf16:.0f}%" if row["precision"] == "bfloat16" else "",
        "peak memory MB (process / added)":
            f"{row['peak_memory_bytes'] / 2**20:,.0f} / {row['added_memory_bytes'] / 2**20:,.0f}",
        "first pass s": f"{row['first_pass_seconds']:.1f}",
    }


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    logging.set_verbosity(logging.WARNING)
    presets, precisions, runs, count, size = (FLAGS.presets, FLAGS.precisions, FLAGS.runs,
                                              FLAGS.batches, FLAGS.matmul_size)
    overrides = {}
    if FLAGS.smoke:
        presets, runs, count, size = ["tiny"], 1, 1, 256
        overrides = dict(token_budget=256, vocab_size=512)
    for precision in precisions:
        if precision not in ("float32", "bfloat16"):
            raise app.UsageError(f"--precisions: {precision!r} is neither float32 nor bfloat16.")
    configs = {xla: data_flags.data_config(xla=xla, **overrides) for xla in (False, True)}
    peaks = {dtype: common.matmul_peak(size, dtype) for dtype in ("float32", "bfloat16")}
    print(f"matmul peak ({size}^3): float32 {peaks['float32'] / 1e9:,.1f} GFLOP/s, bfloat16 "
          f"{peaks['bfloat16'] / 1e9:,.1f} GFLOP/s", flush=True)
    from keras_transformer import data

    tokenizer, _ = data.load_or_learn_tokenizer(configs[False])
    # One set per distinct configuration (both XLA settings share one if --bucket_multiple is given).
    by_config = {config: real_batches(config, tokenizer, count) for config in set(configs.values())}
    batches = {xla: by_config[config] for xla, config in configs.items()}
    rows = []
    for preset in presets:
        for precision in precisions:
            for xla in {"off": [False], "on": [True], "both": [False, True]}[FLAGS.xla]:
                row = measure(preset, precision, xla, tokenizer.vocab_size, batches[xla][0], runs)
                row["batches"] = batches[xla][1]
                row["fraction_of_fp32_peak"] = row["model_flops_per_second"] / peaks["float32"]
                row["fraction_of_bf16_peak"] = row["model_flops_per_second"] / peaks["bfloat16"]
                rows.append(row)
                print(f"  {preset} {precision} xla={xla}: {row['tokens_per_second']:,.0f} "
                      f"tokens/s, {100 * row['fraction_of_fp32_peak']:.0f}% of fp32 peak",
                      flush=True)
    config = configs[False]
    table = common.markdown([table_row(r, peaks) for r in rows], COLUMNS)
    print(f"\n{count} batches of {config.dataset} train, {config.token_budget} tokens/side "
          f"budget\n\n{table}")
    result = {"machine": common.machine(), "matmul_size": size,
              "matmul_peak_flops": peaks,
              "data": {"dataset": config.dataset, "token_budget": config.token_budget,
                       "vocab_size": tokenizer.vocab_size, "batches": count,
                       "without_xla": batches[False][1], "with_xla": batches[True][1]},
              "runs": runs, "rows": rows, "markdown": table}
    common.write_json(FLAGS.output, result)
    print(f"\nwrote {FLAGS.output}")


if __name__ == "__main__":
    app.run(main)
