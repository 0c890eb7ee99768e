"""Trains a Transformer with the paper's recipe (sections 5.1-5.4, 6.1).

    python -m trainers.wmt --dataset=wmt14_en_de                        # all GPUs of this machine
    python -m trainers.wmt --flagfile=trainers/cpu.flags --model_dir=runs/cpu    # 2 CPU cores, 20 minutes
    python -m trainers.wmt --dataset=wmt14_en_de --preset=big --xla --mixed_precision=bfloat16
    TF_CONFIG='{...}' python -m trainers.wmt --dataset=wmt14_en_de --strategy=multi_worker_mirrored

--dataset is required (it has no default). The other defaults are the paper's recipe for GPUs;
trainers/cpu.flags holds the main job's CPU recipe (docs/training.md) (the first lines of
``python -m trainers.quickstart`` print it as a trainers.wmt command). --strategy=auto (the
default) mirrors over all GPUs when there are several.

Adam(0.9, 0.98, 1e-9) on the learning rate of Eq. (3), label smoothing 0.1, dropout per preset,
token-budget batches (--token_budget per side summed over replicas; --accumulation_steps to
reach the paper's ~25k+25k tokens per update on fewer devices). Checkpoints go to --model_dir
every --checkpoint_every_minutes (the paper: 10) and/or --checkpoint_every_steps; running the
same command again resumes. SIGTERM (Ctrl-C: SIGINT) saves a checkpoint and exits with status 143
(130) at any stage (on a multi-worker job, a signal to any worker stops every worker at the same
step: docs/training.md, "Several machines"); a NaN/Inf loss or update stops with status 1 and
keeps the last finite checkpoint as the latest. At the end the last --average_last checkpoints are averaged into MODEL_DIR/averaged/ckpt and a summary is written
to MODEL_DIR/summary.json. TensorBoard: ``tensorboard --logdir=MODEL_DIR``.
"""

import os
import shlex
import sys

from absl import app, flags

from keras_transformer.data.config import WMT14_DATASETS
from . import checks, console, data_flags, model_flags, training_flags

FLAGS = flags.FLAGS
# The flags are the shared modules' (trainers.quickstart has the same); --help lists them all.
for _module in (model_flags, training_flags, data_flags):
    flags.adopt_module_key_flags(_module)
# No default corpus here (see require_dataset), and --help shows none.
FLAGS.set_default("dataset", None)


def export_hook(model_dir: str, averaged: bool, export_dir: str) -> list:
    """EXPORT HOOK (the export issue's code): the run's averaged (else latest) checkpoint as
    SavedModels for TF Serving, exactly as ``python -m trainers.export`` writes them; nothing
    (an empty list) where the run's latest export holds that checkpoint's weights already (the
    same command run again on a run that had ended)."""
    from keras_transformer import export, runs
    from keras_transformer.export.saved_model import exports_holding

    checkpoint = runs.resolve_checkpoint(model_dir, runs.AVERAGED if averaged else None)
    name = os.path.basename(os.path.normpath(os.path.abspath(model_dir)))
    held = exports_holding(export_dir, name, checkpoint)
    if held is not None:
        print(f"wmt: {', '.join(held)} hold the weights of {checkpoint} already; nothing exported",
              flush=True)
        return []
    translator = runs.load_translator(model_dir, checkpoint)
    return list(export.export_for_serving(translator, export_dir, name))


# The paper's setup (base, 100k steps) needs the paper's data; the offline corpora are small.
OFFLINE_HINT = ("for a first model on a CPU in 20 minutes, "
                f"{console.program_command('quickstart')} (or its recipe here: see docs/training.md)")


def require_dataset():
    """No silent default corpus: the paper's recipe on a 14k-sentence dictionary would train for
    days and overfit. One line asks for --dataset, before anything else is checked."""
    if FLAGS.dataset is None:
        raise app.UsageError(
            "which data? --dataset=wmt14_en_de (the paper's; TFDS must have downloaded it), "
            "libreoffice_help_en_de or ding_de_en (offline), or files with --train_data; "
            + OFFLINE_HINT + ".")


def check_dataset_choice():
    """Base for 100k steps on an offline corpus is said out loud."""
    offline = FLAGS.dataset not in WMT14_DATASETS
    if offline and FLAGS.preset in ("base", "big") and not FLAGS["train_steps"].present and (
            not FLAGS.train_minutes):
        print(f"wmt: note: --preset={FLAGS.preset} for {FLAGS.train_steps:,} steps is the paper's "
              f"WMT setup; on {FLAGS.dataset} it would take days and overfit; " + OFFLINE_HINT
              + ".", file=sys.stderr, flush=True)


def main(argv):
    require_dataset()
    model_dir = FLAGS.model_dir or os.path.join("runs", FLAGS.preset)
    # Everything that can be checked is checked before the slow work, not after hours of it.
    checks.output_dir("model_dir", model_dir)
    if FLAGS.export_dir is not None:
        checks.output_dir("export_dir", FLAGS.export_dir)
    data = data_flags.data_config(xla=FLAGS.xla)
    training_flags.check(model_dir, data)
    config = training_flags.training_config(model_dir)
    check_dataset_choice()
    strategy = training_flags.make_strategy()

    from keras_transformer import runs, signals
    from keras_transformer.training import NonFiniteError, WorkerLostError, is_chief

    try:
        summary = training_flags.train(data, config, strategy,
                                       log=lambda line: print(line, flush=True))
    except NonFiniteError as error:
        console.error_exit(error)
    except WorkerLostError as error:
        console.error_exit(error, status=error.exit_status)
    losses = "; ".join(f"{name} {summary[key]:.4f}" for name, key in (
        ("final train loss", "final_train_loss"), ("dev loss", "final_dev_loss"))
        if summary[key] is not None)
    # Only the chief writes the run's files.
    where = (f"summary in {os.path.join(model_dir, runs.SUMMARY_FILE)}" if is_chief(strategy)
             else "the chief writes the summary")
    print(f"wmt: {summary['stop_reason']} after {summary['steps']} steps; "
          f"{summary['tokens_per_second']:,.0f} tokens/s; {losses + '; ' if losses else ''}"
          f"{where}", flush=True)
    signals.check()  # stopped by a signal: no new stage
    if FLAGS.export_dir and is_chief(strategy):
        try:
            paths = export_hook(model_dir, bool(summary["averaged_checkpoint"]), FLAGS.export_dir)
        except ValueError as error:
            console.error_exit(f"export failed (the checkpoints in {model_dir} are fine; retry "
                               f"with {console.program_command('export')} --model_dir={shlex.quote(model_dir)}): "
                               f"{error}")
        if paths:
            print(f"wmt: exported to {', '.join(paths)}", flush=True)


if __name__ == "__main__":
    console.run(main)
