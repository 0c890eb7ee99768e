"""``--intra_op_threads``: TensorFlow's intra-op thread pool, for the commands that decode.

A decoding step of a small model is some 150 small ops (matrices of a few to 64 rows by 256).
Splitting each of them over a pool of threads can cost more in hand-offs than it gains, so one
intra-op thread may decode small models faster (``python -m benchmarks.decoding`` measures it on
your machine). Larger models and training want the default (one thread per core). TF Serving's
equivalent is ``--tensorflow_intra_op_parallelism``.
"""

from absl import flags

flags.DEFINE_integer("intra_op_threads", 0,
                     "TensorFlow intra-op threads (0: TensorFlow's default, one per core). 1 can "
                     "decode small models faster: their ops are too small to share.",
                     lower_bound=0)


def apply():
    """Sets the pool size from the flag; call before TensorFlow runs its first op."""
    if flags.FLAGS.intra_op_threads:
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(flags.FLAGS.intra_op_threads)


def used():
    """The intra-op threads TensorFlow uses (its default is one per core)."""
    import os

    return flags.FLAGS.intra_op_threads or os.cpu_count()
