"""Model configuration: a typed, frozen dataclass with the presets of Table 3.

Field names follow the columns of Table 3 (N -> ``num_layers``, h -> ``num_heads``,
P_drop -> ``dropout_rate``, eps_ls -> ``label_smoothing``). The vocabulary size is never a
preset value: it comes from the tokenizer at run time.
"""

import dataclasses
import math
import numbers
from typing import Optional

import numpy as np

POSITIONAL_KINDS = ("sinusoidal", "learned")

# Table 3 of the paper ("base" and "big"), plus two sizes for machines without accelerators.
PRESETS = {
    "base": dict(num_layers=6, d_model=512, d_ff=2048, num_heads=8, dropout_rate=0.1),
    "big": dict(num_layers=6, d_model=1024, d_ff=4096, num_heads=16, dropout_rate=0.3),
    # 3+3 layers at d_model 256: what 2 CPU cores train to a useful BLEU in minutes.
    "small": dict(num_layers=3, d_model=256, d_ff=1024, num_heads=4, dropout_rate=0.1),
    # The main job's size: in 20 minutes on 2 CPU cores training is bound by compute, and this
    # narrower model makes more updates than "small" (chosen from single runs of earlier probes,
    # not a sweep: see "The recipe and why" in docs/results.md).
    "mini": dict(num_layers=3, d_model=128, d_ff=512, num_heads=4, dropout_rate=0.1),
    # For tests: big enough to have every structure (2 layers, several heads), fast to build.
    "tiny": dict(num_layers=2, d_model=32, d_ff=64, num_heads=4, dropout_rate=0.0, max_length=64),
}


# What a field's value must be: (test, the end of the sentence "<field> ..." when it fails). The
# checks of one field alone, so that a program can name the one setting that is wrong.
# The kinds of value every config's checks accept (this one's, DataConfig's, TrainingConfig's,
# the decoding's), NumPy's scalars among them: a setting read from an array is no error.
def is_integer(value) -> bool:
    """An int or a NumPy integer, not a bool (True is an int to Python)."""
    return not isinstance(value, bool) and isinstance(value, numbers.Integral)


def is_number(value) -> bool:
    """A finite int or float (or NumPy's), not a bool."""
    return not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value)


def is_boolean(value) -> bool:
    """True or False (or NumPy's), not a string such as "False", which Python reads as true."""
    return isinstance(value, (bool, np.bool_))


def as_python_scalars(config) -> None:
    """Replaces a frozen dataclass's NumPy scalars by Python's: config.json and ``get_config()``
    record them, and JSON knows no NumPy type."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if isinstance(value, np.generic):
            object.__setattr__(config, field.name, value.item())


POSITIVE_INTEGER = (lambda value: is_integer(value) and value > 0, "must be a positive integer")
INDEX = (lambda value: is_integer(value) and value >= 0, "must be an integer >= 0")
PROBABILITY = (lambda value: is_number(value) and 0.0 <= value < 1.0, "must be in [0, 1)")
POSITIVE_NUMBER = (lambda value: is_number(value) and value > 0, "must be a positive number")
BOOLEAN = (is_boolean, "must be True or False")
POSITIONAL = (lambda value: value in POSITIONAL_KINDS, f"must be one of {POSITIONAL_KINDS}")


def _field(default, help_text: str, rule=None):
    """A field with its help text (what a command-line flag of the same name shows) and its rule
    (``POSITIVE_INTEGER``, ...; None: any value)."""
    return dataclasses.field(default=default, metadata={"help": help_text, "rule": rule})


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Hyper-parameters of one Transformer (section 3, Table 3).

    ``d_k`` and ``d_v`` default to ``d_model / num_heads`` (section 3.2.2); set them to express
    Table 3 rows (A) and (B). ``target_vocab_size=None`` means one joint source/target
    vocabulary (as the paper's shared BPE); with ``share_embeddings`` one matrix then serves as
    source embedding, target embedding and pre-softmax projection (section 3.4).

    Each field's ``metadata`` holds its help text and its rule (see ``field_problem``); the
    training programs derive their model flags from them (``trainers/model_flags.py``).
    """

    vocab_size: int = dataclasses.field(metadata={
        "help": "Subword vocabulary size (source and target when joint): the tokenizer's.",
        "rule": POSITIVE_INTEGER})
    num_layers: int = _field(6, "N: layers in the encoder and in the decoder.", POSITIVE_INTEGER)
    d_model: int = _field(512, "d_model.", POSITIVE_INTEGER)
    d_ff: int = _field(2048, "d_ff, inner size of the feed-forward networks.", POSITIVE_INTEGER)
    num_heads: int = _field(8, "h, attention heads (fewer heads help small data (Araabi & Monz "
                            "2020)).", POSITIVE_INTEGER)
    d_k: Optional[int] = _field(None, "d_k (default d_model / h).", POSITIVE_INTEGER)
    d_v: Optional[int] = _field(None, "d_v (default d_model / h).", POSITIVE_INTEGER)
    dropout_rate: float = _field(0.1, "P_drop (base 0.1, big 0.3).", PROBABILITY)
    attention_dropout: float = _field(0.0, "Dropout on attention weights (paper: 0; Araabi & "
                                      "Monz 2020 use it for low-resource NMT).", PROBABILITY)
    relu_dropout: float = _field(0.0, "Dropout after the feed-forward ReLU (paper: 0; Araabi & "
                                 "Monz 2020 use it for low-resource NMT).", PROBABILITY)
    label_smoothing: float = _field(0.1, "eps_ls (paper: 0.1; Araabi & Monz 2020 use 0.4-0.6 at "
                                    "5k-80k sentences).", PROBABILITY)
    # Low-resource regularisers, all off in the paper's recipe (see Transformer and Decoder).
    source_word_dropout: float = _field(
        0.0, "Low-resource: zero whole source-token embeddings with this probability in training "
        "(Sennrich & Zhang 2019: +2.8 BLEU at 100k words). Default 0.", PROBABILITY)
    target_word_dropout: float = _field(
        0.0, "Low-resource: the same on the decoder's input tokens (Sennrich & Zhang 2019, with "
        "source word dropout: +2.8 BLEU at 100k words). Default 0.", PROBABILITY)
    decoder_layerdrop: float = _field(
        0.0, "Low-resource: skip each decoder layer with this probability in training, never at "
        "inference (LayerDrop, Fan et al. 2020; +1.6 BLEU in Araabi & Monz 2020). Default 0.",
        PROBABILITY)
    max_length: int = _field(256, "Longest sequence in tokens (the learned positions' count).",
                             POSITIVE_INTEGER)
    norm_first: bool = _field(False, "Pre-LN instead of the paper's post-LN.", BOOLEAN)
    positional: str = _field("sinusoidal", "Table 3 row (E).", POSITIONAL)
    share_embeddings: bool = _field(True, "Tie embeddings and pre-softmax weights (3.4).", BOOLEAN)
    target_vocab_size: Optional[int] = _field(
        None, "The target side's own vocabulary size (None: one joint vocabulary).",
        POSITIVE_INTEGER)
    layer_norm_epsilon: float = _field(1e-6, "Epsilon of every layer normalisation.",
                                       POSITIVE_NUMBER)
    pad_id: int = _field(0, "The padding token's id, in every vocabulary.", INDEX)

    @classmethod
    def field_problem(cls, name: str, value) -> Optional[str]:
        """What is wrong with ``value`` for field ``name`` on its own, e.g. ``must be a positive
        integer`` (None: nothing; None is fine where it is the field's default). The checks
        between fields (d_model and num_heads, pad_id and the vocabulary) need the whole config."""
        field = cls.__dataclass_fields__[name]
        rule = field.metadata.get("rule")
        if rule is None or (value is None and field.default is None):
            return None
        test, problem = rule
        return None if test(value) else problem

    def __post_init__(self):
        # Each field alone first, so that the checks between fields compare numbers.
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            problem = self.field_problem(field.name, value)
            if problem is not None:
                raise ValueError(f"TransformerConfig.{field.name} {problem}, got {value!r}.")
        as_python_scalars(self)
        if self.d_k is None or self.d_v is None:
            if self.d_model % self.num_heads:
                raise ValueError(
                    f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}; "
                    "choose another num_heads or set d_k and d_v explicitly (Table 3 rows A/B)."
                )
            default = self.d_model // self.num_heads
            object.__setattr__(self, "d_k", self.d_k if self.d_k is not None else default)
            object.__setattr__(self, "d_v", self.d_v if self.d_v is not None else default)
        if not 0 <= self.pad_id < min(self.vocab_size, self.target_vocab_size or self.vocab_size):
            raise ValueError(f"TransformerConfig.pad_id={self.pad_id} is outside the vocabulary.")

    @property
    def joint_vocabulary(self) -> bool:
        return self.target_vocab_size is None

    @property
    def output_vocab_size(self) -> int:
        return self.vocab_size if self.target_vocab_size is None else self.target_vocab_size

    @classmethod
    def from_preset(cls, name: str, vocab_size: int, **overrides) -> "TransformerConfig":
        """``TransformerConfig.from_preset("base", vocab_size=37000, d_k=16)`` (Table 3 row B)."""
        if name not in PRESETS:
            raise ValueError(f"Unknown preset {name!r}; choose one of {sorted(PRESETS)}.")
        return cls.from_dict({**PRESETS[name], **overrides, "vocab_size": vocab_size})

    @classmethod
    def from_dict(cls, values: dict) -> "TransformerConfig":
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"Unknown TransformerConfig field(s) {unknown}; known fields: {sorted(known)}."
            )
        return cls(**values)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
