"""Averages the last N checkpoints of a training run (section 6.1: the base models average
the last 5 checkpoints, written at 10-minute intervals; the big models the last 20).

    python -m trainers.average_checkpoints --model_dir=runs/base --last=5
    python -m trainers.average_checkpoints --model_dir=runs/base \
        --checkpoints=runs/base/ckpt-90000,runs/base/ckpt-95000

Writes MODEL_DIR/averaged/ckpt (or --output): the model variables only, loadable with
``keras_transformer.weights.restore_model(model, path)``, and as ``--checkpoint=averaged`` by the
programs that read a run (the run's model: --model_dir is always needed). The averaging is the library's
``keras_transformer.training.checkpoints.average_run``, as the trainer's at the end of training.
"""

import os

from absl import app, flags

from . import checks, console

FLAGS = flags.FLAGS
flags.DEFINE_string("model_dir", None, "The --model_dir of a training run (holds config.json).")
flags.DEFINE_integer("last", 5, "Average this many of the latest checkpoints (5 base, 20 big).")
flags.DEFINE_list("checkpoints", None, "Explicit checkpoint prefixes instead of --last.")
flags.DEFINE_string("output", None, "Output prefix (default MODEL_DIR/averaged/ckpt).")
flags.mark_flag_as_required("model_dir")
flags.register_validator("last", lambda v: v > 0, "--last must be positive.")


def check_flags():
    """The checkpoints and the output first, the run folder last (finding its latest checkpoint
    starts TensorFlow), so a mistyped path is answered at once."""
    for prefix in FLAGS.checkpoints or ():
        if not os.path.isfile(prefix.removesuffix(".index") + ".index"):
            raise app.UsageError(f"--checkpoints: {prefix} is not a checkpoint (no "
                                 f"{prefix.removesuffix('.index')}.index)")
    if FLAGS.output:
        checks.output_file("output", FLAGS.output)
    checks.run_dir("model_dir", FLAGS.model_dir)
    if not FLAGS.output:  # the default lies in the run folder, checked by now
        from keras_transformer import runs

        checks.output_file("output", os.path.join(FLAGS.model_dir, runs.AVERAGED_PREFIX))
    if not FLAGS.checkpoints:
        from keras_transformer.training import last_checkpoints

        # The trainer averages what there is; a user who asked for N checkpoints gets N or a
        # line saying what there is.
        paths = last_checkpoints(FLAGS.model_dir, FLAGS.last)
        if paths and len(paths) < FLAGS.last:
            raise app.UsageError(
                f"--last={FLAGS.last} but {FLAGS.model_dir!r} holds only {len(paths)} checkpoints "
                f"({', '.join(os.path.basename(p) for p in paths)}).")


def main(argv):
    check_flags()
    from keras_transformer.training import average_run

    path = average_run(FLAGS.model_dir, FLAGS.last, FLAGS.checkpoints, FLAGS.output)
    print(f"average_checkpoints: wrote {path}")


if __name__ == "__main__":
    console.run(main)
