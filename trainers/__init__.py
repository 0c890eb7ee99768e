"""The programs: ``python -m trainers.NAME`` (quickstart, wmt, evaluate, translate, ...).

Importing this package, which every program and benchmark does before TensorFlow, turns on
TensorFlow's oneDNN kernels where TensorFlow leaves them off: by default it uses them only on
CPUs with AVX512-VNNI, AVX512-BF16 or AMX, so an AVX2-only CPU trains the main job on its Eigen
kernels, whose matmuls and softmax are slower there (docs/performance.md, "The AVX2 kind").
oneDNN computes the same model (tests/test_trainers_init.py compares the logits and the
gradients both ways). ``TF_ENABLE_ONEDNN_OPTS=0`` in the environment still turns them off.
"""

import os
import sys

# Only where it takes effect: in a process that imported TensorFlow already, the variable would
# change its child processes' kernels but not its own.
if "tensorflow" not in sys.modules:
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
