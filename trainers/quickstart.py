"""The README's main command (for now): build a model of a preset, run it once, print its summary and
parameter count next to the paper's Table 3 figure.

    python -m trainers.quickstart --preset=base --vocab_size=37000
"""

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_enum("preset", "small", ["tiny", "small", "base", "big"], "Model preset (Table 3 + CPU sizes).")
flags.DEFINE_integer("vocab_size", 37000, "Shared source/target vocabulary size (the paper: ~37,000 BPE).")

PAPER_MILLIONS = {"base": 65, "big": 213}


def main(argv):
    del argv
    import numpy as np

    import keras_transformer as kt

    config = kt.TransformerConfig.from_preset(FLAGS.preset, vocab_size=FLAGS.vocab_size)
    model = kt.Transformer(config)
    rng = np.random.default_rng(0)
    source = rng.integers(4, config.vocab_size, size=(2, 12))
    target = rng.integers(4, config.vocab_size, size=(2, 9))
    logits = model((source, target), training=False)
    model.summary()
    paper = PAPER_MILLIONS.get(FLAGS.preset)
    print(f"preset={FLAGS.preset} {config}")
    print(f"logits for a batch of 2 sources x 2 targets: shape {tuple(logits.shape)}")
    print(f"parameters: {model.count_params():,}"
          + (f" (the paper's Table 3: {paper}M)" if paper else ""))


if __name__ == "__main__":
    app.run(main)
