"""The model flags of the training commands, derived from ``TransformerConfig`` (as fairseq derives
its options from its dataclasses): --preset, and one flag per field a user sets, with the field's
name, type, help text and rule (``keras_transformer/config.py``).

    from trainers import model_flags          # defines the flags on import
    flags.adopt_module_key_flags(model_flags)
    config = model_flags.model_config(vocab_size)   # in main(): validated, frozen

A flag left unset (None) takes the preset's value. A value that breaks its field's rule is refused
while the flags are parsed (``flag --d_model=-8: must be a positive integer``); values that do not
fit together (d_model and num_heads) by ``model_config``, naming the flags.
"""

import dataclasses
import typing

from absl import app, flags

from keras_transformer.config import POSITIONAL_KINDS, PRESETS, TransformerConfig
from . import data_flags  # noqa: F401  (--max_length, which sets the field max_length)

# The fields the program sets, not the user: the vocabulary sizes are the tokenizer's, max_length
# follows the data flag --max_length, the rest are fixed.
SET_BY_THE_PROGRAM = ("vocab_size", "target_vocab_size", "max_length", "layer_norm_epsilon",
                      "pad_id")

# The choices of a text field (an enum flag).
CHOICES = {"positional": list(POSITIONAL_KINDS)}

flags.DEFINE_enum("preset", "base", sorted(PRESETS),
                  "Model size: base/big are Table 3's; small (3+3 layers, d_model 256) and mini "
                  "(3+3, d_model 128, the main job's) are for CPUs, tiny for tests.")


def _flag_type(field) -> type:
    """``int`` for ``Optional[int]``: a flag's None means unset anyway."""
    kind = typing.get_type_hints(TransformerConfig)[field.name]
    arguments = [a for a in typing.get_args(kind) if a is not type(None)]
    return arguments[0] if typing.get_origin(kind) is typing.Union else kind


def _define(field):
    name, text = field.name, field.metadata["help"]
    kind = _flag_type(field)
    if kind is bool:
        flags.DEFINE_bool(name, None, text)
    elif kind is int:
        flags.DEFINE_integer(name, None, text)
    elif kind is float:
        flags.DEFINE_float(name, None, text)
    elif name in CHOICES:
        flags.DEFINE_enum(name, None, CHOICES[name], text)
    else:
        flags.DEFINE_string(name, None, text)

    def check(value):
        problem = None if value is None else TransformerConfig.field_problem(name, value)
        if problem is not None:
            raise flags.ValidationError(problem)
        return True

    flags.register_validator(name, check)


FIELDS = tuple(field for field in dataclasses.fields(TransformerConfig)
               if field.name not in SET_BY_THE_PROGRAM)
for _field in FIELDS:
    _define(_field)
# The flags that set TransformerConfig fields over the preset's (the same names).
NAMES = tuple(field.name for field in FIELDS)

FLAGS = flags.FLAGS


def overrides() -> dict:
    """The TransformerConfig fields the flags set over the preset's."""
    values = {name: FLAGS[name].value for name in NAMES if FLAGS[name].value is not None}
    # Sequences are at most --max_length subwords plus EOS/BOS.
    values["max_length"] = FLAGS.max_length + 1
    return values


def model_config(vocab_size: int) -> TransformerConfig:
    """The flags' TransformerConfig for a vocabulary of ``vocab_size``; values that do not fit
    together raise app.UsageError naming the preset and the flags given."""
    given = overrides()
    try:
        return TransformerConfig.from_preset(FLAGS.preset, vocab_size=vocab_size, **given)
    except ValueError as error:
        named = "".join(f" --{name}={given[name]}" for name in NAMES if name in given)
        raise app.UsageError(f"flags --preset={FLAGS.preset}{named}: {error}") from None


# Any vocabulary size fits every model flag: the check before the vocabulary is known uses this.
_CHECK_VOCAB_SIZE = 8000


def check():
    """The model flags fit together (before the slow work; the vocabulary is known only later)."""
    model_config(_CHECK_VOCAB_SIZE)
