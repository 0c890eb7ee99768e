"""The search flags of every command that decodes (evaluate, translate, export, quickstart): one
definition of section 6.1's beam settings.

    from trainers import decoding_flags      # defines the flags on import
    flags.adopt_module_key_flags(decoding_flags)
    config = decoding_flags.decoding_config()
"""

from absl import flags

flags.DEFINE_integer("beam_size", 4, "Beam size (section 6.1: 4).", lower_bound=1)
flags.DEFINE_float("alpha", 0.6, "Length penalty alpha (section 6.1: 0.6): a hypothesis Y scores "
                   "log P(Y) / ((5 + |Y|) / 6) ** alpha, GNMT's penalty (Wu et al. 2016), not the "
                   "|Y| ** alpha of fairseq and CTranslate2.", lower_bound=0.0)
flags.DEFINE_integer("extra_length", 50, "Outputs up to input length + this (section 6.1: 50).",
                     lower_bound=1)

NAMES = ("beam_size", "alpha", "extra_length")


def decoding_config(base=None):
    """The flags as an ``inference.DecodingConfig``; with a ``base`` config (an export's own
    settings), that config with only the flags given replacing its values."""
    import dataclasses

    from keras_transformer.inference import DecodingConfig

    if base is None:
        return DecodingConfig(**{name: flags.FLAGS[name].value for name in NAMES})
    return dataclasses.replace(base, **{name: flags.FLAGS[name].value for name in NAMES
                                        if flags.FLAGS[name].present})


def describe(config) -> str:
    """A ``DecodingConfig`` in words, e.g. ``beam 4, alpha 0.6, extra length 50``."""
    return f"beam {config.beam_size}, alpha {config.alpha:g}, extra length {config.extra_length}"


def given():
    """The search flags given on the command line (with a SavedModel: its weights are searched in
    the program, ``run_flags.load_exported_translator``, not by its own graph)."""
    return [f"--{name}" for name in NAMES if flags.FLAGS[name].present]
