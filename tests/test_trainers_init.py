"""trainers/__init__.py: every program runs TensorFlow on its oneDNN kernels, which compute the
same model as its default kernels."""

import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Run as a program runs: the package first, then TensorFlow.
ONEDNN_ENABLED = """
import trainers.wmt  # noqa: F401
from tensorflow.python.util import _pywrap_util_port
print(_pywrap_util_port.IsMklEnabled())
"""

# A mini model without dropout, its logits and its training step's loss and gradients on one
# random batch, written to the .npz file named by argv[1].
LOGITS_AND_GRADIENTS = """
import sys

import keras
import numpy as np
import tensorflow as tf

import trainers  # noqa: F401
import keras_transformer as kt
from keras_transformer.training import TrainStep

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
source = tf.constant(rng.integers(3, 500, (8, 13)), tf.int32)
target = tf.constant(rng.integers(3, 500, (8, 11)), tf.int32)
target_in = tf.concat([tf.fill([8, 1], 2), target[:, :-1]], 1)
model = kt.Transformer(kt.TransformerConfig.from_preset("mini", vocab_size=500, dropout_rate=0.0))
logits = model((source, target_in))
step = TrainStep(model, keras.optimizers.SGD(0.1), label_smoothing=0.1)
grads, stats = step._forward_backward(source, target_in, target)
np.savez(sys.argv[1], logits=logits.numpy(), loss_sum=float(stats[0]),
         **{variable.path: tf.convert_to_tensor(grad).numpy()
            for variable, grad in zip(model.trainable_variables, grads)})
"""


def run(code, *args, onednn=None):
    env = {name: value for name, value in os.environ.items() if name != "TF_ENABLE_ONEDNN_OPTS"}
    env.update(PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    if onednn is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = onednn
    result = subprocess.run([sys.executable, "-c", code, *map(str, args)], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""


# TensorFlow imported first, as a test or a notebook may: the package leaves the variable alone,
# so that child processes compute with their parent's kernels.
IMPORTED_LATE = """
import os
import tensorflow  # noqa: F401
import trainers  # noqa: F401
print(os.environ.get("TF_ENABLE_ONEDNN_OPTS", "unset"))
"""


def test_programs_run_on_onednn_unless_the_environment_turns_it_off():
    # TensorFlow's own default is off on CPUs without AVX512-VNNI, AVX512-BF16 or AMX (an
    # AVX2-only CPU); the package turns it on there and changes nothing where it is on already.
    assert run(ONEDNN_ENABLED) == "True"
    assert run(ONEDNN_ENABLED, onednn="0") == "False"
    assert run(IMPORTED_LATE) == "unset"


def test_onednn_and_the_default_kernels_compute_the_same_model(tmp_path):
    run(LOGITS_AND_GRADIENTS, tmp_path / "onednn.npz")
    run(LOGITS_AND_GRADIENTS, tmp_path / "default.npz", onednn="0")
    onednn, default = np.load(tmp_path / "onednn.npz"), np.load(tmp_path / "default.npz")
    assert sorted(onednn.files) == sorted(default.files) and len(onednn.files) > 30
    assert abs(onednn["logits"]).max() > 1  # a real model's logits, not zeros
    np.testing.assert_allclose(onednn["loss_sum"], default["loss_sum"], rtol=1e-5)
    for name in onednn.files:
        np.testing.assert_allclose(onednn[name], default[name], rtol=1e-4, atol=1e-5,
                                   err_msg=name)
