"""What every benchmark shares: the machine's description, its matmul peak, peak memory,
median/min/max, Markdown tables and atomic JSON output."""

import json
import os
import platform
import statistics
import time


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as stream:
            for line in stream:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict:
    """Where and when the numbers were taken (they mean little without it)."""
    import tensorflow as tf

    return {"date": time.strftime("%Y-%m-%d %H:%M %Z"), "cpu": cpu_model(),
            "cpus": os.cpu_count(), "tensorflow": tf.__version__,
            "load_average": [round(x, 2) for x in os.getloadavg()]}


class MatmulPeak:
    """The machine's matmul peak, sampled at several moments of a run (before, between and after
    the measurements it is the denominator of): a single measurement taken while another process
    held a core understates the peak, and every ratio divided by it then overstates the model's
    share. The peak is the best sample; the spread of the samples says how steady the machine was.

    Each sample of a dtype is the best FLOP/s of ``repeats`` n x n by n x n ``tf.matmul`` after
    one warm-up (2 n^3 FLOPs each).
    """

    def __init__(self, n: int, dtypes=("float32", "bfloat16"), repeats: int = 5):
        import tensorflow as tf

        self.n, self.dtypes, self.repeats = n, tuple(dtypes), repeats
        self.samples = []  # [{"when": str, dtype: FLOP/s, ...}]
        self._inputs = {dtype: (tf.cast(tf.random.normal([n, n]), dtype),
                                tf.cast(tf.random.normal([n, n]), dtype)) for dtype in self.dtypes}
        self._matmul = tf.function(
            lambda x, y: tf.reduce_sum(tf.cast(tf.matmul(x, y), tf.float32)))

    def sample(self, when: str) -> dict:
        """Measures every dtype once now; ``when`` says where in the run (for the JSON)."""
        sample = {"when": when}
        for dtype, (a, b) in self._inputs.items():
            sample[dtype] = 2.0 * self.n ** 3 / self._best_seconds(self._matmul, a, b)
        self.samples.append(sample)
        return sample

    def xla_sample(self) -> dict:
        """The same matmuls compiled by XLA (``jit_compile=True``): how fast XLA's own CPU matmul
        is beside TensorFlow's (oneDNN) kernels, which the XLA training rows run without."""
        import tensorflow as tf

        matmul = tf.function(lambda x, y: tf.reduce_sum(tf.cast(tf.matmul(x, y), tf.float32)),
                             jit_compile=True)
        return {dtype: 2.0 * self.n ** 3 / self._best_seconds(matmul, a, b)
                for dtype, (a, b) in self._inputs.items()}

    def _best_seconds(self, matmul, a, b):
        matmul(a, b).numpy()
        best = float("inf")
        for _ in range(self.repeats):
            start = time.perf_counter()
            matmul(a, b).numpy()
            best = min(best, time.perf_counter() - start)
        return best

    def best(self, dtype: str) -> float:
        return max(sample[dtype] for sample in self.samples)

    def peaks(self) -> dict:
        return {dtype: self.best(dtype) for dtype in self.dtypes}

    def spread(self) -> dict:
        """Per dtype: median, min and max FLOP/s over the samples, and how many there were."""
        return {dtype: {**median_min_max([s[dtype] for s in self.samples]),
                        "samples": len(self.samples)} for dtype in self.dtypes}


PEAK_ERROR = "(above the peak of its precision: the peak was measured too low)"


def peak_error(row) -> bool:
    """A row faster than the matmul peak of its own precision cannot be: the peak is wrong."""
    key = "fraction_of_fp32_peak" if row["precision"] == "float32" else "fraction_of_bf16_peak"
    return row[key] > 1.0


def matmul_timing_disturbed(row) -> bool:
    """A row whose matmuls, timed alone, took longer than its whole step: part of a step cannot,
    so the machine was busy during that timing and it says nothing."""
    return row.get("matmul_share_of_step", 0.0) > 1.0


def peak_line(result) -> str:
    """The report's sentence on the peaks: the best sample and the spread of all of them."""
    peaks, spread = result["matmul_peak_flops"], result["matmul_peak_spread"]
    count = next(iter(spread.values()))["samples"]
    return (f"Matmul peak measured in the same run ({result['matmul_size']}^3, the best of "
            f"{count} samples taken before, between and after the configurations; every "
            "ratio divides by it): " + "; ".join(
                f"{dtype} {peaks[dtype] / 1e9:,.1f} GFLOP/s (samples: median "
                f"{s['median'] / 1e9:,.1f}, min {s['min'] / 1e9:,.1f}, max {s['max'] / 1e9:,.1f})"
                for dtype, s in spread.items()) + ".")


TRAINER_SEED = 1  # trainers/training_flags.py's --seed when not given (not imported: defines flags)
# The main job's model and batches (trainers/quickstart.py QUICKSTART_DEFAULTS; a test keeps the
# two equal): its training speed is measured beside the presets'.
MAIN_JOB = dict(preset="mini", dataset="libreoffice_help_en_de", vocab_size=8000,
                token_budget=2048, max_length=64, norm_first=True, dropout_rate=0.1,
                mixed_precision="auto")
# The main job's width by the precision it trains in: trainers.quickstart.KIND_RECIPES (which
# defines flags, so is not imported here; a test holds the two equal).
MAIN_JOB_WIDTHS = {"bfloat16": dict(d_model=192, d_ff=768), "float32": {}}


def main_job_options(precision):
    """The main job's model options over its preset, trained in ``precision``."""
    return dict(norm_first=MAIN_JOB["norm_first"], dropout_rate=MAIN_JOB["dropout_rate"],
                **MAIN_JOB_WIDTHS[precision])


def main_job_label(precision):  # "mini", or "mini d_model 192, d_ff 768"
    widths = ", ".join(f"{key} {value}" for key, value in MAIN_JOB_WIDTHS[precision].items())
    return f"{MAIN_JOB['preset']} {widths}".strip()


def train_step(preset, precision, vocab_size, xla=False, overrides=None):
    """(config, model, the trainer's TrainStep on it with the paper's optimizer) of a fresh model
    of ``preset``, seeded so that every configuration starts from the same weights."""
    import keras

    import keras_transformer as kt
    from keras_transformer.training import speed

    keras.utils.set_random_seed(0)
    config = kt.TransformerConfig.from_preset(preset, vocab_size=vocab_size, max_length=256,
                                              **(overrides or {}))
    return (config, *speed.fresh_train_step(config, precision, xla))


def parameter_counts(model):
    """(encoder weights, decoder weights, pre-softmax projection weights)."""
    import numpy as np

    def count(layer):
        return int(sum(np.prod(v.shape) for v in layer.trainable_variables))

    config = model.config
    return count(model.encoder), count(model.decoder), config.output_vocab_size * config.d_model


def layer_matmul_shapes(config, source_rows, target_rows):
    """(rows, inputs, outputs) of every weight matrix product of one training step's forward
    pass: per encoder layer Q, K, V, output and the two FFN matrices over the source rows; per
    decoder layer the same for self- and cross-attention (cross K and V over the source rows)
    and FFN over the target rows; the pre-softmax projection. Rows are padded tokens (the work
    the kernels do)."""
    d, heads = config.d_model, config.num_heads
    qk, v = heads * config.d_k, heads * config.d_v
    attention = lambda rows, kv_rows: [(rows, d, qk), (kv_rows, d, qk), (kv_rows, d, v), (rows, v, d)]
    ffn = lambda rows: [(rows, d, config.d_ff), (rows, config.d_ff, d)]
    encoder = attention(source_rows, source_rows) + ffn(source_rows)
    decoder = (attention(target_rows, target_rows) + attention(target_rows, source_rows)
               + ffn(target_rows))
    return (encoder * config.num_layers + decoder * config.num_layers
            + [(target_rows, d, config.output_vocab_size)])


def matmul_seconds(shapes, dtype, repeats=5):
    """The best time over ``repeats`` of the products ``shapes`` need in a training step, alone:
    each forward product and its two backward ones (input gradient, weight gradient), with
    TensorFlow's kernels (oneDNN) on random operands. With the step's time it splits the step
    into its matmuls and everything else (element-wise work, the loss, the optimizer)."""
    import tensorflow as tf

    operands = [(tf.cast(tf.random.normal([n, i]), dtype), tf.cast(tf.random.normal([i, o]), dtype),
                 tf.cast(tf.random.normal([n, o]), dtype)) for n, i, o in shapes]

    @tf.function
    def products():
        total = tf.constant(0.0)
        for x, w, dy in operands:
            for product in (tf.matmul(x, w), tf.matmul(dy, w, transpose_b=True),
                            tf.matmul(x, dy, transpose_a=True)):
                total += tf.cast(product[0, 0], tf.float32)  # keeps each product alive
        return total

    products().numpy()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        products().numpy()
        best = min(best, time.perf_counter() - start)
    return best


def real_batches(config, count):
    """(tokenizer, ``count`` training batches as the trainer sees them, spread over its first pass
    (at most its first 50 * count; 0: all of it), their padding and that of all read): a pass
    starts with its most padded buckets, so its first batches would understate FLOP/s."""
    import tensorflow as tf

    from keras_transformer import data

    # A run's batches depend on the global seed the trainer sets first, which earlier rows here
    # changed.
    tf.random.set_seed(TRAINER_SEED)
    tokenizer, _ = data.load_or_learn_tokenizer(config)
    # One pass, read in part (so its tokenized pairs are not cached for passes never read).
    dataset = data.make_dataset(config, tokenizer, "train", training=True, read_in_part=True)
    window = list(dataset.take(50 * count) if count else dataset)
    if not window:
        data.check_not_empty(config, tokenizer, "train")  # raises, naming the corpus and why
    count = count or len(window)
    # The middle batch of each of ``count`` equal stretches of the window.
    batches = [window[int((i + 0.5) * len(window) / count)] for i in range(count)]
    sample, read = _padding(batches), _padding(window)
    return tokenizer, batches, {"bucket_multiple": config.bucket_multiple, **sample,
                     "measured": count, "batches_read": len(window),
                     "padding_fraction_of_batches_read": read["padding_fraction"],
                     "shapes": len({tuple(b[0][0].shape) for b in batches})}


def _padding(batches) -> dict:
    import numpy as np

    real = sum(int(np.count_nonzero(s) + np.count_nonzero(t)) for (s, _), t in batches)
    padded = sum(int(np.size(s) + np.size(t)) for (s, _), t in batches)
    return {"real_tokens": real, "padded_tokens": padded, "padding_fraction": 1 - real / padded}


class PeakMemory:
    """Peak resident memory of this process while the ``with`` block runs: ``bytes`` (the whole
    process, TensorFlow's runtime included) and ``added_bytes`` (above the resident memory at the
    start of the block: what the measured configuration itself needed).

    Linux resets the high-water mark (VmHWM) when "5" is written to /proc/self/clear_refs, so
    one process can measure several configurations one after another. Elsewhere the value is
    the process' peak so far.
    """

    def __enter__(self):
        import gc

        gc.collect()  # the previous configuration's model and functions, if unreferenced
        try:
            with open("/proc/self/clear_refs", "w") as stream:
                stream.write("5")
        except OSError:
            pass  # no reset: the peak since the process started
        self.start_bytes = _status_bytes("VmRSS:")
        self.bytes = self.added_bytes = 0
        return self

    def __exit__(self, *exc):
        self.bytes = _status_bytes("VmHWM:")
        self.added_bytes = max(self.bytes - self.start_bytes, 0)
        return False


def _status_bytes(field: str) -> int:
    """A memory field of /proc/self/status; without /proc, the peak from getrusage."""
    try:
        with open("/proc/self/status") as stream:
            for line in stream:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def median_min_max(values) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def spread(values, digits: int = 3) -> str:
    """``median [min, max]`` for a table cell."""
    return (f"{statistics.median(values):.{digits}f} "
            f"[{min(values):.{digits}f}, {max(values):.{digits}f}]")


def markdown(rows, columns=None) -> str:
    columns = columns or list(rows[0])  # default: the first row's keys
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(row.get(c, "")) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def shown_path(path: str) -> str:
    """A path as results record it: relative to the working directory (the project, where the
    commands run), so no machine's absolute paths reach the committed results."""
    return os.path.relpath(path)


def write_json(path: str, value) -> None:
    from keras_transformer import writing

    writing.write_file(path, json.dumps(value, indent=1))


def read_json(path: str, *missing):
    """The JSON file at ``path``; ``missing[0]`` if given and there is none."""
    if missing and not os.path.isfile(path):
        return missing[0]
    with open(path, encoding="utf-8") as stream:
        try:
            return json.load(stream)
        except ValueError as error:
            raise ValueError(f"{path}: not a JSON file of this project ({error})") from None
