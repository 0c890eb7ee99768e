"""The programs: ``python -m trainers.NAME`` (quickstart, wmt, evaluate, translate, ...).

Importing this package, which every program and benchmark does before TensorFlow, turns on
TensorFlow's oneDNN kernels where TensorFlow leaves them off: by default it uses them only on
CPUs with AVX512-VNNI, AVX512-BF16 or AMX, so an AVX2-only CPU trains the main job on its Eigen
kernels, whose matmuls and softmax are slower there (docs/performance.md, "The AVX2 kind").
oneDNN computes the same model (tests/test_trainers_init.py compares the logits and the
gradients both ways). ``TF_ENABLE_ONEDNN_OPTS=0`` in the environment still turns them off.

Run as a program (``python -m trainers.NAME``), it also keeps Keras from importing scikit-learn
and matplotlib for itself (``KerasOptionalImports``).
"""

import importlib.abc
import os
import sys

# Only where it takes effect: in a process that imported TensorFlow already, the variable would
# change its child processes' kernels but not its own.
if "tensorflow" not in sys.modules:
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")


class KerasOptionalImports(importlib.abc.MetaPathFinder):
    """To Keras's own modules, scikit-learn and matplotlib look absent; to every other module
    they import as usual.

    Keras imports both at its own import whenever they are installed (for its scikit-learn
    wrappers and its image-gallery plots, which no program here uses), and TensorFlow imports
    Keras, so every program would pay for them before its first line of work (what that costs:
    docs/development.md, "Tests"). Keras falls back as on a machine without them. Our own uses
    (the translation memory's TF-IDF, the figures) are not Keras's modules and import them in
    full.
    """

    HIDDEN = ("sklearn", "matplotlib")

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.HIDDEN and _importer().startswith("keras."):
            raise ModuleNotFoundError(f"No module named {name!r} (hidden from Keras by trainers)",
                                      name=name)
        return None  # the next finder's decision


def _importer():
    """The name of the module whose ``import`` statement is being run: the first frame, from
    the import machinery's outwards, that is not the import machinery's."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__", "").startswith(
            ("importlib", "_frozen_importlib")):
        frame = frame.f_back
    return "" if frame is None else frame.f_globals.get("__name__", "")


# Only in a program's own process (``python -m`` imports this package with argv[0] still "-m"),
# before TensorFlow: a notebook or a test that imports the package keeps Keras as installed.
if sys.argv[:1] == ["-m"] and "tensorflow" not in sys.modules:
    sys.meta_path.insert(0, KerasOptionalImports())
