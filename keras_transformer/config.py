"""Model configuration: a typed, frozen dataclass with the presets of Table 3.

Field names follow the columns of Table 3 (N -> ``num_layers``, h -> ``num_heads``,
P_drop -> ``dropout_rate``, eps_ls -> ``label_smoothing``). The vocabulary size is never a
preset value: it comes from the tokenizer at run time.
"""

import dataclasses
from typing import Optional

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


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Hyper-parameters of one Transformer (section 3, Table 3).

    ``d_k`` and ``d_v`` default to ``d_model / num_heads`` (section 3.2.2); set them to express
    Table 3 rows (A) and (B). ``target_vocab_size=None`` means one joint source/target
    vocabulary (as the paper's shared BPE); with ``share_embeddings`` one matrix then serves as
    source embedding, target embedding and pre-softmax projection (section 3.4).
    """

    vocab_size: int
    num_layers: int = 6
    d_model: int = 512
    d_ff: int = 2048
    num_heads: int = 8
    d_k: Optional[int] = None
    d_v: Optional[int] = None
    dropout_rate: float = 0.1
    attention_dropout: float = 0.0
    relu_dropout: float = 0.0
    label_smoothing: float = 0.1
    # Low-resource regularisers, all off in the paper's recipe (see Transformer and Decoder).
    source_word_dropout: float = 0.0
    target_word_dropout: float = 0.0
    decoder_layerdrop: float = 0.0
    max_length: int = 256
    norm_first: bool = False
    positional: str = "sinusoidal"
    share_embeddings: bool = True
    target_vocab_size: Optional[int] = None
    layer_norm_epsilon: float = 1e-6
    pad_id: int = 0

    def __post_init__(self):
        if self.d_k is None or self.d_v is None:
            if self.num_heads > 0 and self.d_model % self.num_heads:
                raise ValueError(
                    f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}; "
                    "choose another num_heads or set d_k and d_v explicitly (Table 3 rows A/B)."
                )
            default = self.d_model // self.num_heads if self.num_heads > 0 else 0
            object.__setattr__(self, "d_k", self.d_k if self.d_k is not None else default)
            object.__setattr__(self, "d_v", self.d_v if self.d_v is not None else default)
        positive = ["vocab_size", "num_layers", "d_model", "d_ff", "num_heads", "d_k", "d_v",
                    "max_length"]
        if self.target_vocab_size is not None:
            positive.append("target_vocab_size")
        for name in positive:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"TransformerConfig.{name} must be a positive integer, got {value!r}.")
        for name in ["dropout_rate", "attention_dropout", "relu_dropout", "label_smoothing",
                     "source_word_dropout", "target_word_dropout", "decoder_layerdrop"]:
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise ValueError(f"TransformerConfig.{name} must be in [0, 1), got {value!r}.")
        if self.positional not in POSITIONAL_KINDS:
            raise ValueError(
                f"TransformerConfig.positional must be one of {POSITIONAL_KINDS}, got {self.positional!r}."
            )
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
