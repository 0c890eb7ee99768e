"""The sampling flags of trainers.translate: random samples instead of the beam's best
(``inference.SamplingConfig``, ``decoding.sample_search``). Sampling is on when any of them is given.

    from trainers import sampling_flags      # defines the flags on import
    flags.adopt_module_key_flags(sampling_flags)
    config = sampling_flags.sampling_config()  # None: no sampling flag given, beam search
"""

from absl import flags

ON = "Any sampling flag turns sampling on (random samples instead of the beam's best)."
flags.DEFINE_integer("sampling_topk", 0, "Sampling: draw from the K most probable next tokens only "
                     f"(0: from all). {ON}", lower_bound=0)
flags.DEFINE_float("sampling_topp", 1.0, "Sampling: draw from the smallest set of most probable next "
                   "tokens whose probability reaches P, in (0, 1] (nucleus sampling; 1: from all; "
                   f"applied after --sampling_topk). {ON}")
flags.DEFINE_float("sampling_temperature", 1.0, "Sampling: divide the logits by T > 0 (below 1: "
                   f"closer to the most probable tokens, above 1: more varied). {ON}")
flags.DEFINE_integer("seed", 0, "Sampling: the seed of the draws; the same seed, input and "
                     f"--batch_size give the same samples. {ON}")
flags.register_validator("sampling_topp", lambda p: 0 < p <= 1,
                         "must be in (0, 1]: the probability mass the nucleus keeps")
flags.register_validator("sampling_temperature", lambda t: t > 0, "must be > 0")

NAMES = ("sampling_topk", "sampling_topp", "sampling_temperature", "seed")


def given():
    """The sampling flags given on the command line."""
    return [f"--{name}" for name in NAMES if flags.FLAGS[name].present]


def sampling_config():
    """The flags as an ``inference.SamplingConfig``, or None when none is given (beam search)."""
    if not given():
        return None
    from keras_transformer.inference import SamplingConfig

    values = [flags.FLAGS[name].value for name in NAMES]
    return SamplingConfig(top_k=values[0], top_p=values[1], temperature=values[2], seed=values[3])


def describe(config) -> str:
    """A ``SamplingConfig`` in words, e.g. ``sampling (top-k 0, top-p 0.9, temperature 1, seed 0)``."""
    return (f"sampling (top-k {config.top_k}, top-p {config.top_p:g}, temperature "
            f"{config.temperature:g}, seed {config.seed})")
