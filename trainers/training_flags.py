"""The training flags of the training commands (trainers.wmt, trainers.quickstart) and what they
become: one TrainingConfig, the strategy (seeded), and the library's training run.

    from trainers import training_flags       # defines the flags on import
    flags.adopt_module_key_flags(training_flags)
    training_flags.check(model_dir, data)      # in main(), before any slow work
    config = training_flags.training_config(model_dir)
    strategy = training_flags.make_strategy()  # before TensorFlow runs anything
    summary = training_flags.train(data_config, config, strategy)
"""

import os
from typing import Optional

from absl import app, flags

from keras_transformer.training.strategy import PRECISIONS, STRATEGIES
from . import console, model_flags, shipped

FLAGS = flags.FLAGS
# --init_from's name of the model that comes with the project, wherever this copy keeps it (a
# clone's saved_models/, the wheel's package data).
SHIPPED_SOURCE = "shipped"


class InitFromParser(flags.ArgumentParser):
    """--init_from's value as given, but ``shipped``, which becomes the shipped model's folder."""

    def parse(self, argument):
        if argument != SHIPPED_SOURCE:
            return argument
        path = shipped.shipped_model_dir()
        if path is None:
            raise ValueError("this copy of the project has no shipped model "
                             f"(saved_models/{shipped.SHIPPED_NAME}); name a run or a SavedModel.")
        return path

    def flag_type(self):
        return "string"


flags.DEFINE_enum("strategy", "auto", STRATEGIES,
                  "tf.distribute strategy. auto: mirrored over all GPUs when there are several "
                  "(or over --num_cpu_devices logical CPUs), else default (one device). "
                  "multi_worker_mirrored reads TF_CONFIG. The start line says what was chosen.")
flags.DEFINE_integer("num_cpu_devices", 0,
                     "Split the CPU into this many logical devices (e.g. 2 with "
                     "--strategy=mirrored to run data-parallel without GPUs). 0: don't.")
flags.DEFINE_bool("xla", False, "Compile each replica's forward+backward pass with XLA.")
flags.DEFINE_enum("mixed_precision", "float32", PRECISIONS,
                  "Compute dtype; variables stay float32, evaluation and export run in float32. "
                  "float16 uses dynamic loss scaling. On CPUs float16 is slow (no float16 matmul "
                  "units); bfloat16 is fast only on CPUs with AVX512-BF16/AMX. auto: bfloat16 on "
                  "such a CPU when there is no GPU, else float32.")
flags.DEFINE_string("model_dir", None, "Checkpoints, TensorBoard logs, config.json and "
                    "summary.json; existing checkpoints are resumed. Unset: runs/<preset>.")
flags.DEFINE_integer("train_steps", 100_000, "Optimizer updates in total (paper: 100k base, "
                     "300k big). 0: no step limit (then set --train_minutes).")
flags.DEFINE_float("train_minutes", None,
                   "Wall-clock minutes of training for the run in all, as --train_steps counts all "
                   "of its updates (as fairseq's stop-time-hours): resumed after a preemption or a "
                   "SIGTERM it trains what is left; run again once they are used up, it trains "
                   "nothing (raise it to train more). 0: no time limit (then set --train_steps).")
flags.DEFINE_integer("warmup_steps", 4000, "warmup_steps of Eq. (3).")
flags.DEFINE_float("learning_rate_scale", 1.0, "Multiplies the learning rate of Eq. (3).")
flags.DEFINE_integer("accumulation_steps", 1, "Micro-batches per replica summed into one update.")
flags.DEFINE_integer("checkpoint_every_steps", None, "Also checkpoint every N steps.")
flags.DEFINE_float("checkpoint_every_minutes", 10.0, "Checkpoint every M minutes (paper: 10). 0: "
                   "not by the clock (--checkpoint_every_steps then, if given; and at the end).")
flags.DEFINE_integer("keep_checkpoints", 20, "Checkpoints kept in --model_dir (never fewer than "
                     "--average_last).")
flags.DEFINE_integer("average_last", None, "Average the last N checkpoints at the end; 0: don't. "
                     "Unset: 20 for big, else 5, as section 6.1.")
flags.DEFINE_integer("log_every_steps", 100, "Progress line and TensorBoard interval.")
flags.DEFINE_integer("dev_every_steps", 1000, "Dev-set loss interval. 0: only at the end.")
flags.DEFINE_integer("dev_bleu_sentences", 200,
                     "Dev-set BLEU (sacreBLEU, beam 4, alpha 0.6) on this many dev sentences at each "
                     "dev evaluation, shown and written to TensorBoard. 0: none.")
flags.DEFINE_bool("keep_best_bleu", False,
                  "Also keep the weights of the best dev BLEU in MODEL_DIR/best/ckpt.")
flags.DEFINE(
    InitFromParser(), "init_from", None,
    "Fine-tune: start this new run from the model weights of another run, RUN_DIR (its averaged, "
    "else ema, else best, else latest checkpoint), a checkpoint prefix (e.g. runs/x/ckpt-1000), "
    "a SavedModel this project exported (e.g. saved_models/x) or shipped: the model that comes "
    "with the project (saved_models/README.md; ./shipped for a folder of that name). Only the "
    "weights: a fresh optimizer, step 0, the schedule of --warmup_steps and "
    "--learning_rate_scale. It trains with the source's vocabulary (a warning names its "
    "unknown-piece rate on this training text), and the model flags must give the source's "
    "architecture (dropouts and label smoothing may differ). Recorded in MODEL_DIR/config.json; "
    "a run with checkpoints of its own resumes from them. Unset: random initialisation.",
    serializer=flags.ArgumentSerializer())
flags.DEFINE_integer(
    "early_stopping_patience", 0,
    "Stop after this many dev evaluations (every --dev_every_steps) in a row without an "
    "improvement of --early_stopping_metric; the log and MODEL_DIR/summary.json say so "
    "(stop_reason early_stopping). Works beside --train_steps and --train_minutes, whichever "
    "comes first. 0: off.")
flags.DEFINE_enum("early_stopping_metric", "loss", ["loss", "bleu"],
                  "What early stopping watches: the dev loss (lower is better) or the dev BLEU "
                  "(higher is better; needs --dev_bleu_sentences > 0).")
flags.DEFINE_float("early_stopping_min_delta", 0.0,
                   "An evaluation improves only if it beats the best so far by more than this "
                   "(in loss or BLEU points).")
flags.DEFINE_float(
    "ema_decay", None,
    "Keep an exponential moving average of the weights with this decay (as fairseq's ema-decay; "
    "e.g. 0.999 averages over roughly the last 1/(1-0.999) = 1000 updates). It is saved in every "
    "checkpoint, the dev set is evaluated with it, and the end of training writes it to "
    "MODEL_DIR/ema/ckpt, the checkpoint named ema in evaluate, translate and export. Unset: none.")
flags.DEFINE_bool(
    "export_best", False,
    "Whenever the dev BLEU is the best so far, export that model for serving to "
    "MODEL_DIR/best_export/<step> (and best_export_ids), deleting the previous best: one "
    "complete export at any moment. Needs --dev_bleu_sentences > 0.")
flags.DEFINE_enum("resume_data", "skip", ["skip", "restart"],
                  "On resume, skip the batches already trained on (exact) or restart the input "
                  "pipeline (fast for long runs).")
flags.DEFINE_bool("deterministic", False, "Deterministic ops and seeds (slower).")
flags.DEFINE_integer("seed", 1, "Seed of weight initialisation and dropout.", lower_bound=0)
flags.DEFINE_string("export_dir", None, "At the end, export the averaged (else latest) "
                    "checkpoint as SavedModels under EXPORT_DIR/<name of model_dir>/<version> "
                    "(as python -m trainers.export does).")

for _name in ("warmup_steps", "accumulation_steps", "keep_checkpoints", "log_every_steps"):
    flags.register_validator(_name, lambda v: v > 0, f"--{_name} must be positive.")
for _name in ("num_cpu_devices", "train_steps", "dev_every_steps", "dev_bleu_sentences",
              "early_stopping_patience"):
    flags.register_validator(_name, lambda v: v >= 0, f"--{_name} must be >= 0.")
for _name in ("checkpoint_every_steps", "average_last"):
    flags.register_validator(_name, lambda v: v is None or v >= 0, f"--{_name} must be >= 0.")
for _name in ("train_minutes", "checkpoint_every_minutes"):  # 0: no limit, as the steps' 0
    flags.register_validator(_name, lambda v: v is None or v >= 0, f"--{_name} must be >= 0.")
flags.register_validator("learning_rate_scale", lambda v: v > 0,
                         "--learning_rate_scale must be positive.")
flags.register_validator("ema_decay", lambda v: v is None or 0.0 < v < 1.0,
                         "--ema_decay must be in (0, 1), e.g. 0.999.")
flags.register_validator("early_stopping_min_delta", lambda v: 0.0 <= v < float("inf"),
                         "--early_stopping_min_delta must be a number >= 0.")


def average_last() -> int:
    """--average_last, or section 6.1's count for the preset when it is unset."""
    if FLAGS.average_last is not None:
        return FLAGS.average_last
    return 20 if FLAGS.preset == "big" else 5


def training_config(model_dir: str, keep_only_the_averaged: bool = False):
    """The training flags as a TrainingConfig for ``model_dir``: at least the checkpoints it
    averages are kept; with ``keep_only_the_averaged`` (and no --keep_checkpoints given) only
    those, at least one. Bad values raise app.UsageError naming the flag."""
    from keras_transformer.training import TrainingConfig, resolve_precision

    averaged = average_last()
    keep = FLAGS.keep_checkpoints
    if keep_only_the_averaged and not FLAGS["keep_checkpoints"].present:
        keep = max(averaged, 1)
    try:
        return TrainingConfig(
            model_dir=model_dir, train_steps=FLAGS.train_steps or None,
            train_minutes=FLAGS.train_minutes or None, warmup_steps=FLAGS.warmup_steps,
            learning_rate_scale=FLAGS.learning_rate_scale,
            accumulation_steps=FLAGS.accumulation_steps, jit_compile=FLAGS.xla,
            mixed_precision=resolve_precision(FLAGS.mixed_precision),
            checkpoint_every_steps=FLAGS.checkpoint_every_steps or None,
            checkpoint_every_minutes=FLAGS.checkpoint_every_minutes or None,
            keep_checkpoints=max(keep, averaged),
            average_last=averaged, log_every_steps=FLAGS.log_every_steps,
            dev_every_steps=FLAGS.dev_every_steps or None, resume_data=FLAGS.resume_data,
            init_from=FLAGS.init_from or None,
            early_stopping_patience=FLAGS.early_stopping_patience or None,
            early_stopping_metric=FLAGS.early_stopping_metric,
            early_stopping_min_delta=FLAGS.early_stopping_min_delta,
            ema_decay=FLAGS.ema_decay)
    except ValueError as error:
        raise app.UsageError(str(error)) from None


def check(model_dir: Optional[str], data):
    """The model flags fit together, training has an end, a run resumed from checkpoints of its own
    in ``model_dir`` (None: the run starts over) goes on with the data (a DataConfig) it trained
    on, --init_from names a run whose model the flags give (unless the run resumes), and early
    stopping and --export_best have the evaluations they watch: one line each, before any slow
    work."""
    from keras_transformer import runs

    model_flags.check()
    if model_dir is not None:
        try:
            runs.check_data(model_dir, data)
        except ValueError as error:
            raise app.UsageError(f"--{error}") from None
    if not FLAGS.train_steps and not FLAGS.train_minutes:
        raise app.UsageError("--train_steps=0 needs --train_minutes > 0, or training never ends.")
    if FLAGS.export_best and not FLAGS.dev_bleu_sentences:
        raise app.UsageError("--export_best exports on the best dev BLEU: it needs "
                             "--dev_bleu_sentences > 0.")
    if FLAGS.early_stopping_patience and not FLAGS.dev_every_steps:
        raise app.UsageError(f"--early_stopping_patience={FLAGS.early_stopping_patience} needs "
                             "--dev_every_steps > 0: the dev evaluations it counts.")
    if (FLAGS.early_stopping_patience and FLAGS.early_stopping_metric == "bleu"
            and not FLAGS.dev_bleu_sentences):
        raise app.UsageError("--early_stopping_metric=bleu needs dev BLEU: "
                             "--dev_bleu_sentences > 0.")
    if not FLAGS.init_from:
        return
    import tensorflow as tf

    from keras_transformer.training import init_from

    if model_dir is not None and tf.io.gfile.isdir(model_dir) and \
            tf.train.latest_checkpoint(model_dir):
        try:
            init_from.check_resumed(model_dir, FLAGS.init_from)
        except ValueError as error:
            raise app.UsageError(f"--{error}") from None
        return
    try:
        source = init_from.resolve(FLAGS.init_from)
        init_from.check_model(source, model_flags.model_config(source.model_config.vocab_size))
    except ValueError as error:
        raise app.UsageError(f"--{error}") from None
    if data.vocab_size not in (None, source.model_config.vocab_size):
        raise app.UsageError(
            f"--vocab_size={data.vocab_size}: a fine-tuned run keeps the vocabulary of the model "
            f"it starts from ({source.model_config.vocab_size} pieces, {source.vocab_path}); "
            "leave --vocab_size out.")


def joining_log():
    """Says that this worker waits for the others to start, for as long as one is missing (that
    wait is no silent hang), and returns the ``log`` that says which are still missing."""
    import json

    try:
        config = json.loads(os.environ.get("TF_CONFIG") or "")
        workers, index = len(config["cluster"]["worker"]), int(config["task"]["index"])
    except (ValueError, KeyError, TypeError):
        return None  # the strategy says what is wrong with TF_CONFIG

    def log(line):
        print(f"{console.program_name()}: worker {index} of {workers} (TF_CONFIG): {line}",
              flush=True)

    log("waiting until every worker has started (a missing one holds all; Ctrl-C or SIGTERM "
        "ends the wait)")
    return log


def make_strategy():
    """The tf.distribute strategy of the flags; call before TensorFlow runs anything (logical
    devices are fixed at start-up), then seed."""
    from keras_transformer.training import make_strategy as make

    log = joining_log() if FLAGS.strategy == "multi_worker_mirrored" else None
    try:
        strategy = make(FLAGS.strategy, FLAGS.num_cpu_devices, log=log)
    except ValueError as error:
        raise app.UsageError(f"--strategy={FLAGS.strategy}: {error}") from None
    import tensorflow as tf

    seed()
    if FLAGS.deterministic:
        tf.config.experimental.enable_op_determinism()
    return strategy


def seed():
    """Seeds Python, NumPy, TensorFlow and Keras with --seed (again: what ran since, e.g. a timing
    of the model, does not change the run's weights and dropout)."""
    import keras

    keras.utils.set_random_seed(FLAGS.seed)


def train(data_config, config, strategy, log=print) -> dict:
    """``training.run.train_run`` of ``data_config`` and ``config`` (a ``training_config``) with
    the flags' model, dev BLEU and export-on-best settings: the one call both programs make."""
    from keras_transformer.training.run import train_run

    callbacks = []
    if FLAGS.export_best:
        from keras_transformer.export import ExportBest

        callbacks.append(ExportBest())  # the search of the dev BLEU it was chosen by
    return train_run(data_config, config, FLAGS.preset, model_flags.overrides(), strategy,
                     dev_bleu_sentences=FLAGS.dev_bleu_sentences,
                     keep_best_bleu=FLAGS.keep_best_bleu, log=log, callbacks=callbacks)
