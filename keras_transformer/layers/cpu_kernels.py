"""Our CPU kernels (``cpu_kernels.cc``): built on first use, loaded, or ``None``.

Steps of training that TensorFlow's CPU ops make in several passes over memory, each in one:
dropout (TensorFlow has no fused dropout on CPU: its ops draw the random words into a tensor, then
compare, select and multiply; ours draws the same words, so a run's numbers are the same either
way, tests/test_dropout.py), LayerNorm's forward and backward passes (each row read once per
pass, within float rounding of TensorFlow's ops, tests/test_layer_norm.py) and the training loss's
softmax over the vocabulary (the softmax, its row statistics and the labels' entries of its
gradient from one read of the logits, within float rounding of TensorFlow's ops,
tests/test_loss.py). They are TensorFlow custom ops, compiled here
with the C++ compiler against the installed TensorFlow's headers, into a cache folder kept per
TensorFlow version and source; where they cannot be built (no compiler, another platform) the
layers and the loss keep TensorFlow's ops and say so once. They run in training only, so exports
and TF Serving never meet them.

``KERAS_TRANSFORMER_CPU_KERNELS=0`` keeps TensorFlow's ops; ``KERAS_TRANSFORMER_CACHE`` moves the
cache folder (default ``$XDG_CACHE_HOME/keras_transformer``, else ``~/.cache/keras_transformer``).
A build no process has loaded for ``UNUSED_DAYS`` goes when another is built (an earlier source's
or TensorFlow version's).
"""

import functools
import hashlib
import os
import shlex
import subprocess
import sys
import tempfile
import time

import tensorflow as tf
from absl import logging
from tensorflow.python.ops import control_flow_util

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cpu_kernels.cc")
SWITCH = "KERAS_TRANSFORMER_CPU_KERNELS"
# Every load marks its build as used (its file's time); a new build removes the others unused this
# long, and what a build killed a day ago or more left (its temporary file).
UNUSED_DAYS, PARTIAL_DAYS = 30, 1


def cache_folder():
    if os.environ.get("KERAS_TRANSFORMER_CACHE"):
        return os.environ["KERAS_TRANSFORMER_CACHE"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "keras_transformer")


# -fopenmp-simd: the loops' OpenMP SIMD reductions, no OpenMP runtime. -fno-trapping-math: the
# kernels never read the floating-point exception flags, and under GCC's default a loop with a
# select whose arms hold float arithmetic (the softmax's exponentials: a clamp, then the
# polynomial) vectorizes only where the vector unit has masks, AVX-512's, so the AVX2 and
# baseline versions computed one exponential at a time. It changes no result.
OPTIONS = ("-shared", "-fPIC", "-O3", "-fopenmp-simd", "-fno-trapping-math",
           "-Wno-deprecated-declarations")


def compile_command(output):
    compiler = shlex.split(os.environ.get("CXX") or "c++")
    return [*compiler, *OPTIONS, *tf.sysconfig.get_compile_flags(), SOURCE, "-o", output,
            *tf.sysconfig.get_link_flags()]


def library_path():
    """Where the build for this TensorFlow version, source, compiler and options lives (shared by
    the environments that have that version)."""
    with open(SOURCE, "rb") as stream:
        source = stream.read()
    build = repr((tf.__version__, sys.platform, os.environ.get("CXX"), OPTIONS)).encode()
    key = hashlib.sha256(source + build)
    return os.path.join(cache_folder(), f"cpu_kernels-{key.hexdigest()[:16]}.so")


def switched_off():
    """Whether the environment turns the kernels off (``SWITCH`` set to 0)."""
    return os.environ.get(SWITCH, "1") == "0"


@functools.lru_cache(maxsize=None)
def ops():
    """The loaded ops module, or ``None`` (switched off, a GPU visible, or no build possible)."""
    if switched_off():
        return None
    if tf.config.list_physical_devices("GPU"):  # a CPU kernel would pull the model's tensors back
        return None
    try:
        path = library_path()
        if os.path.exists(path):
            _mark_used(path)
        else:
            _build(path)
        module = tf.load_op_library(path)
    except (OSError, subprocess.SubprocessError, tf.errors.OpError) as error:
        reason = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
        logging.warning("our CPU kernels (dropout, LayerNorm, the loss's softmax) could not "
                        "be built or loaded (%s); using TensorFlow's ops, which give the same "
                        "numbers more slowly. %s=0 keeps them without trying.", reason, SWITCH)
        return None
    global _loaded
    _loaded = module
    _register_gradient()
    return module


_loaded = None  # the ops module last loaded, for the gradient


def ops_for(tensor):
    """``ops()`` for an op on ``tensor``, or ``None`` where the kernels do not apply: a dtype
    other than float32 and bfloat16, or a graph that XLA compiles (it knows no custom op and
    compiles TensorFlow's)."""
    if tensor.dtype not in (tf.float32, tf.bfloat16):
        return None
    if control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()):
        return None
    return ops()


def _build(path):
    """Compiles into a temporary file beside ``path`` and renames it, so that processes building
    at once (the workers of a job) never load a half-written library."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    handle, partial = tempfile.mkstemp(suffix=".so.partial", dir=os.path.dirname(path))
    os.close(handle)
    try:
        result = subprocess.run(compile_command(partial), capture_output=True, text=True,
                                timeout=600)
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or [""])[-1]
            raise OSError(f"the compiler exited with {result.returncode}"
                          + (f": {last}" if last else ""))
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    _remove_unused(os.path.dirname(path))


def _remove_unused(folder):
    """Removes the builds in ``folder`` that no process has loaded for ``UNUSED_DAYS`` and the
    temporary files of builds killed ``PARTIAL_DAYS`` ago or more."""
    now = time.time()
    for name in os.listdir(folder):
        if name.endswith(".so.partial"):
            days = PARTIAL_DAYS
        elif name.startswith("cpu_kernels-") and name.endswith(".so"):
            days = UNUSED_DAYS
        else:
            continue
        try:
            if now - os.path.getmtime(os.path.join(folder, name)) > days * 86400:
                os.remove(os.path.join(folder, name))
        except OSError:  # removed by another process first, or not ours to remove
            pass


def _mark_used(path):
    try:
        os.utime(path)
    except OSError:  # a cache folder this user may read but not write
        pass


@functools.lru_cache(maxsize=None)  # once per process, however often ops() is asked again
def _register_gradient():
    @tf.RegisterGradient("KerasTransformerDropoutKeep")
    def _gradient(op, dy, _):
        # Kept units pass the incoming gradient on times the scale: the forward's own decisions.
        dx = _loaded.keras_transformer_apply_keep(dy, op.outputs[1], scale=op.get_attr("scale"))
        return dx, None, None
