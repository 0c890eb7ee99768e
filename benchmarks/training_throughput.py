"""Training throughput: source+target tokens/s of one training step (forward, backward, Adam)
for presets with and without XLA, and the achieved model FLOP/s as a fraction of this
machine's float32 matmul peak measured in the same run.

    python -m benchmarks.training_throughput                       # small and base, XLA off/on
    python -m benchmarks.training_throughput --presets=small --steps=3 --warmup_steps=1
    python -m benchmarks.training_throughput --smoke --output=/tmp/smoke.json   # seconds

Model FLOPs follow the usual 6-FLOPs-per-weight-per-token count (2 forward, 4 backward): source
tokens through the encoder weights, target tokens through the decoder weights and the tied
pre-softmax projection (embedding look-ups are not matmuls; attention's QK^T and AV are not
counted). Batches are synthetic, without padding, so every position is a real token. Prints a
Markdown table and writes JSON (--output).
"""

import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_list("presets", ["small", "base"], "Presets to measure.")
flags.DEFINE_enum("xla", "both", ["off", "on", "both"], "Measure without and/or with XLA.")
flags.DEFINE_integer("vocab_size", 8000, "Vocabulary size (the offline corpus' default).")
flags.DEFINE_integer("batch_size", 64, "Sentences per step.")
flags.DEFINE_integer("length", 32, "Tokens per sentence on each side.")
flags.DEFINE_integer("warmup_steps", 2, "Untimed steps first (tracing, XLA compilation).")
flags.DEFINE_integer("steps", 5, "Timed steps; the median step time is reported.")
flags.DEFINE_integer("matmul_size", 4096, "n of the n x n x n float32 matmul measuring the peak.")
flags.DEFINE_string("output", "runs/benchmarks/training_throughput.json", "JSON output.")
flags.DEFINE_bool("smoke", False, "Seconds-long check that the script runs (tiny preset, one "
                  "step, small matmul); overrides the sizes above.")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as stream:
            for line in stream:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def matmul_peak(n: int, repeats: int = 5) -> float:
    """Best float32 FLOP/s of an n x n by n x n tf.matmul (2 n^3 FLOPs)."""
    import tensorflow as tf

    a = tf.random.normal([n, n])
    b = tf.random.normal([n, n])
    matmul = tf.function(lambda x, y: tf.reduce_sum(tf.matmul(x, y)))
    matmul(a, b).numpy()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a, b).numpy()
        best = min(best, time.perf_counter() - start)
    return 2.0 * n ** 3 / best


def parameter_counts(model):
    """(encoder weights, decoder weights, pre-softmax projection weights)."""
    import numpy as np

    def count(layer):
        return int(sum(np.prod(v.shape) for v in layer.trainable_variables))

    config = model.config
    return count(model.encoder), count(model.decoder), config.output_vocab_size * config.d_model


def measure(preset: str, xla: bool) -> dict:
    import keras
    import numpy as np
    import tensorflow as tf

    import keras_transformer as kt
    from keras_transformer.training import TrainStep, build_model, paper_optimizer

    keras.utils.set_random_seed(0)
    config = kt.TransformerConfig.from_preset(preset, vocab_size=FLAGS.vocab_size)
    model = build_model(config)
    optimizer = paper_optimizer(config.d_model)
    optimizer.build(model.trainable_variables)
    step = TrainStep(model, optimizer, label_smoothing=config.label_smoothing, jit_compile=xla)
    rng = np.random.default_rng(0)
    shape = (FLAGS.batch_size, FLAGS.length)
    source = tf.constant(rng.integers(4, FLAGS.vocab_size, size=shape), tf.int32)
    target = tf.constant(rng.integers(4, FLAGS.vocab_size, size=shape), tf.int32)
    target_in = tf.concat([tf.fill([shape[0], 1], 2), target[:, :-1]], 1)
    batch = ((source, target_in), target)
    for _ in range(FLAGS.warmup_steps):
        float(step.step_on_batches((batch,))["loss_sum"])
    times = []
    for _ in range(FLAGS.steps):
        start = time.perf_counter()
        stats = step.step_on_batches((batch,))
        float(stats["loss_sum"])
        times.append(time.perf_counter() - start)
    seconds = float(np.median(times))
    source_tokens = float(stats["source_tokens"])
    target_tokens = float(stats["target_tokens"])
    encoder, decoder, softmax = parameter_counts(model)
    flops = 6.0 * (encoder * source_tokens + (decoder + softmax) * target_tokens)
    return {"preset": preset, "xla": xla, "parameters": int(model.count_params()),
            "source_tokens_per_step": source_tokens, "target_tokens_per_step": target_tokens,
            "step_seconds_median": seconds, "step_seconds_min": min(times),
            "step_seconds_max": max(times),
            "tokens_per_second": (source_tokens + target_tokens) / seconds,
            "model_flops_per_step": flops, "model_flops_per_second": flops / seconds}


def main(argv):
    del argv
    import tensorflow as tf

    if FLAGS.smoke:
        FLAGS.presets, FLAGS.xla, FLAGS.batch_size, FLAGS.length = ["tiny"], "both", 8, 8
        FLAGS.vocab_size, FLAGS.steps, FLAGS.warmup_steps, FLAGS.matmul_size = 64, 1, 1, 256
    peak = matmul_peak(FLAGS.matmul_size)
    rows = []
    for preset in FLAGS.presets:
        for xla in {"off": [False], "on": [True], "both": [False, True]}[FLAGS.xla]:
            row = measure(preset, xla)
            row["fraction_of_matmul_peak"] = row["model_flops_per_second"] / peak
            rows.append(row)
            print(f"{preset} xla={xla}: {row['tokens_per_second']:,.0f} tokens/s", flush=True)
    print()
    print(f"fp32 matmul peak ({FLAGS.matmul_size}^3): {peak / 1e9:,.1f} GFLOP/s")
    print("| preset | XLA | parameters | tokens/step (src+tgt) | step s (median) | tokens/s "
          "| model GFLOP/s | % of matmul peak |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['preset']} | {'on' if r['xla'] else 'off'} | {r['parameters']:,} | "
              f"{r['source_tokens_per_step'] + r['target_tokens_per_step']:,.0f} | "
              f"{r['step_seconds_median']:.3f} | {r['tokens_per_second']:,.0f} | "
              f"{r['model_flops_per_second'] / 1e9:,.1f} | "
              f"{100 * r['fraction_of_matmul_peak']:.0f}% |")
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": cpu_model(),
        "cpu_count": os.cpu_count(), "tensorflow": tf.__version__,
        "matmul_peak_flops": peak, "settings": {
            "batch_size": FLAGS.batch_size, "length": FLAGS.length, "vocab_size":
            FLAGS.vocab_size, "steps": FLAGS.steps, "warmup_steps": FLAGS.warmup_steps},
        "rows": rows}
    directory = os.path.dirname(FLAGS.output)
    if directory:
        os.makedirs(directory, exist_ok=True)
    with open(FLAGS.output + ".partial", "w") as stream:
        json.dump(result, stream, indent=2)
    os.replace(FLAGS.output + ".partial", FLAGS.output)
    print(f"\nwrote {FLAGS.output}")


if __name__ == "__main__":
    app.run(main)
