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


# As a program imports them: the package while runpy's argv[0] is still "-m" (python -m
# trainers.NAME), then TensorFlow (and with it Keras); then our own users of scikit-learn and
# matplotlib. Prints what Keras saw and what the process holds, one line of JSON.
KERAS_OPTIONAL = """
import json, sys
program = sys.argv[1] == "program"
if program:
    sys.argv[0] = "-m"
import trainers  # noqa: F401
import tensorflow  # noqa: F401
from keras.src.wrappers import fixes
seen = dict(keras_sklearn=fixes.sklearn is not None,
            loaded=sorted({"sklearn", "matplotlib"} & set(sys.modules)))
from keras_transformer.evaluation import TranslationMemory
import matplotlib.pyplot  # noqa: F401 (what the figures and the notebooks import)
memory = TranslationMemory([("the red house", "das rote Haus"), ("a green tree", "ein gruener Baum")])
seen.update(memory=memory.lookup(["a green house tree"]),
            ours=sorted({"sklearn", "matplotlib.pyplot"} & set(sys.modules)))
print(json.dumps(seen))
"""


def test_keras_imports_no_sklearn_or_matplotlib_in_a_program_and_ours_still_do():
    import json

    program = json.loads(run(KERAS_OPTIONAL, "program"))
    assert program["keras_sklearn"] is False and program["loaded"] == [], program
    # Hidden from Keras only: the translation memory's TF-IDF and pyplot import in full.
    assert program["memory"] == ["ein gruener Baum"]
    assert program["ours"] == ["matplotlib.pyplot", "sklearn"]
    # Imported by a notebook or a test (not as a program), Keras stays as installed.
    imported = json.loads(run(KERAS_OPTIONAL, "imported"))
    assert imported["keras_sklearn"] is True and imported["loaded"] == ["matplotlib", "sklearn"]
    assert imported["memory"] == ["ein gruener Baum"]
