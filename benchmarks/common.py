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


def matmul_peak(n: int, dtype: str = "float32", repeats: int = 5) -> float:
    """Best FLOP/s of an n x n by n x n ``tf.matmul`` in ``dtype`` (2 n^3 FLOPs)."""
    import tensorflow as tf

    a = tf.cast(tf.random.normal([n, n]), dtype)
    b = tf.cast(tf.random.normal([n, n]), dtype)
    matmul = tf.function(lambda x, y: tf.reduce_sum(tf.cast(tf.matmul(x, y), tf.float32)))
    matmul(a, b).numpy()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a, b).numpy()
        best = min(best, time.perf_counter() - start)
    return 2.0 * n ** 3 / best


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


def markdown(rows, columns) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(row.get(c, "")) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def write_json(path: str, value) -> None:
    from keras_transformer import writing

    writing.write_file(path, json.dumps(value, indent=1))
