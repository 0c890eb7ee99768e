"""The flags naming a trained run and its checkpoint, for the commands that load one (evaluate,
translate, export): one definition, one default, and one line saying what was loaded.

    from trainers import run_flags           # defines --model_dir and --checkpoint on import
    flags.adopt_module_key_flags(run_flags)
    translator, loaded = run_flags.load_translator(decoding_config, vocab_path)
"""

from absl import flags

flags.DEFINE_string("model_dir", None, "A training run's model_dir (config.json + checkpoints).")
flags.DEFINE_string(
    "checkpoint", None,
    "With --model_dir: averaged (MODEL_DIR/averaged/ckpt), ema (MODEL_DIR/ema/ckpt, the moving "
    "average of the weights kept in training), best (MODEL_DIR/best/ckpt), latest, a checkpoint prefix (e.g. "
    "runs/small/ckpt-1000) or a folder. Default: averaged, else ema, else best, else latest (an "
    "averaged or ema checkpoint older than the latest one is passed over). The program says which "
    "one it used.")

FLAGS = flags.FLAGS


def load_translator(decoding_config, vocab_path=None):
    """``(translator, loaded)``: the run's ``Translator`` with the checkpoint of the flags, and a
    line saying which checkpoint (and why that one) and which search settings, e.g.
    ``runs/x/averaged/ckpt (averaged; the default: averaged, else ema, else best, else latest), beam 4,
    alpha 0.6, extra length 50``."""
    from keras_transformer import runs

    from . import decoding_flags

    checkpoint, why = FLAGS.checkpoint, f"--checkpoint={FLAGS.checkpoint}"
    if not checkpoint:  # chosen once, here, so that the line names the one loaded
        name, checkpoint = runs.default_checkpoint(FLAGS.model_dir)
        why = f"{name}; the default: " + ", else ".join(runs.DEFAULT_ORDER)
    translator = runs.load_translator(FLAGS.model_dir, checkpoint, decoding_config, vocab_path)
    return translator, (f"{translator.checkpoint} ({why}), "
                        f"{decoding_flags.describe(translator.decoding)}")
