"""keras-transformer: the Transformer of "Attention Is All You Need" as Keras 3 layers."""

from keras_transformer.config import PRESETS, TransformerConfig
from keras_transformer.model import Transformer

__all__ = ["PRESETS", "Transformer", "TransformerConfig"]
__version__ = "0.1.0"
