"""keras-transformer: the Transformer of "Attention Is All You Need" as Keras 3 layers."""

import importlib

# Imported on first use (PEP 562), so that a program which only parses its flags or checks its
# paths answers at once instead of after TensorFlow's start-up.
_EXPORTS = {"PRESETS": "keras_transformer.config", "TransformerConfig": "keras_transformer.config",
            "Transformer": "keras_transformer.model"}

__all__ = ["PRESETS", "Transformer", "TransformerConfig"]
__version__ = "0.1.0"


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'keras_transformer' has no attribute {name!r}")
