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
(130) at any stage; a NaN/Inf loss or update stops with status 1 and keeps the last finite
checkpoint as the latest. At the end the last
--average_last checkpoints are averaged into MODEL_DIR/averaged/ckpt and a summary is written
to MODEL_DIR/summary.json. TensorBoard: ``tensorboard --logdir=MODEL_DIR``.
"""

import os
import sys

from absl import app, flags

from keras_transformer.config import PRESETS
from keras_transformer.data.config import WMT14_DATASETS
from keras_transformer.training.strategy import PRECISIONS, STRATEGIES
from . import checks, console, data_flags

FLAGS = flags.FLAGS
flags.adopt_module_key_flags(data_flags)  # --help lists the data flags too
# No default corpus here (see require_dataset), and --help shows none.
FLAGS.set_default("dataset", None)

flags.DEFINE_enum("preset", "base", sorted(PRESETS),
                  "Model size: base/big are Table 3's; small (3+3 layers, d_model 256) and mini "
                  "(3+3, d_model 128, the main job's) are for CPUs, tiny for tests.")
# Table 3 overrides (None: the preset's value).
flags.DEFINE_integer("num_layers", None, "N: layers in the encoder and in the decoder.")
flags.DEFINE_integer("d_model", None, "d_model.")
flags.DEFINE_integer("d_ff", None, "d_ff, inner size of the feed-forward networks.")
flags.DEFINE_integer("num_heads", None, "h, attention heads (fewer heads help small data "
                     "(Araabi & Monz 2020)).")
flags.DEFINE_integer("d_k", None, "d_k (default d_model / h).")
flags.DEFINE_integer("d_v", None, "d_v (default d_model / h).")
flags.DEFINE_float("dropout_rate", None, "P_drop (base 0.1, big 0.3).")
flags.DEFINE_float("attention_dropout", None, "Dropout on attention weights (paper: 0; Araabi & "
                   "Monz 2020 use it for low-resource NMT).")
flags.DEFINE_float("relu_dropout", None, "Dropout after the feed-forward ReLU (paper: 0; Araabi & "
                   "Monz 2020 use it for low-resource NMT).")
flags.DEFINE_float("label_smoothing", None, "eps_ls (paper: 0.1; Araabi & Monz 2020 use 0.4-0.6 at "
                   "5k-80k sentences).")
flags.DEFINE_float("source_word_dropout", None, "Low-resource: zero whole source-token embeddings "
                   "with this probability in training (Sennrich & Zhang 2019: +2.8 BLEU at 100k "
                   "words). Default 0.")
flags.DEFINE_float("target_word_dropout", None, "Low-resource: the same on the decoder's input "
                   "tokens (Sennrich & Zhang 2019, with source word dropout: +2.8 BLEU at 100k "
                   "words). Default 0.")
flags.DEFINE_float("decoder_layerdrop", None, "Low-resource: skip each decoder layer with this "
                   "probability in training, never at inference (LayerDrop, Fan et al. 2020; +1.6 "
                   "BLEU in Araabi & Monz 2020). Default 0.")
flags.DEFINE_enum("positional", None, ["sinusoidal", "learned"], "Table 3 row (E).")
flags.DEFINE_bool("norm_first", None, "Pre-LN instead of the paper's post-LN.")
flags.DEFINE_bool("share_embeddings", None, "Tie embeddings and pre-softmax weights (3.4).")

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
flags.DEFINE_float("train_minutes", None, "Wall-clock budget of this run in minutes.")
flags.DEFINE_integer("warmup_steps", 4000, "warmup_steps of Eq. (3).")
flags.DEFINE_float("learning_rate_scale", 1.0, "Multiplies the learning rate of Eq. (3).")
flags.DEFINE_integer("accumulation_steps", 1, "Micro-batches per replica summed into one update.")
flags.DEFINE_integer("checkpoint_every_steps", None, "Also checkpoint every N steps.")
flags.DEFINE_float("checkpoint_every_minutes", 10.0, "Checkpoint every M minutes (paper: 10).")
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
flags.DEFINE_string(
    "init_from", None,
    "Fine-tune: start this new run from the model weights of another run, RUN_DIR (its averaged, "
    "else ema, else best, else latest checkpoint) or a checkpoint prefix (e.g. runs/x/ckpt-1000). Only the "
    "weights: a fresh optimizer, step 0, the schedule of --warmup_steps and "
    "--learning_rate_scale. It trains with the source run's vocabulary (a warning names its "
    "unknown-piece rate on this training text), and the model flags must give the source's "
    "architecture (dropouts and label smoothing may differ). Recorded in MODEL_DIR/config.json; "
    "a run with checkpoints of its own resumes from them. Unset: random initialisation.")
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

for _name in ("num_layers", "d_model", "d_ff", "num_heads", "d_k", "d_v"):
    flags.register_validator(_name, lambda v: v is None or v > 0, f"--{_name} must be positive.")
for _name in ("dropout_rate", "attention_dropout", "relu_dropout", "label_smoothing",
              "source_word_dropout", "target_word_dropout", "decoder_layerdrop"):
    flags.register_validator(_name, lambda v: v is None or 0.0 <= v < 1.0,
                             f"--{_name} must be in [0, 1).")
for _name in ("warmup_steps", "accumulation_steps", "keep_checkpoints", "log_every_steps"):
    flags.register_validator(_name, lambda v: v > 0, f"--{_name} must be positive.")
for _name in ("num_cpu_devices", "train_steps", "dev_every_steps", "dev_bleu_sentences",
              "early_stopping_patience"):
    flags.register_validator(_name, lambda v: v >= 0, f"--{_name} must be >= 0.")
for _name in ("checkpoint_every_steps", "average_last"):
    flags.register_validator(_name, lambda v: v is None or v >= 0, f"--{_name} must be >= 0.")
for _name in ("train_minutes", "checkpoint_every_minutes"):
    flags.register_validator(_name, lambda v: v is None or v > 0, f"--{_name} must be positive.")
flags.register_validator("learning_rate_scale", lambda v: v > 0,
                         "--learning_rate_scale must be positive.")
flags.register_validator("ema_decay", lambda v: v is None or 0.0 < v < 1.0,
                         "--ema_decay must be in (0, 1), e.g. 0.999.")
flags.register_validator("early_stopping_min_delta", lambda v: 0.0 <= v < float("inf"),
                         "--early_stopping_min_delta must be a number >= 0.")

# Flags that override the preset's TransformerConfig fields (same names).
MODEL_FLAGS = ("num_layers", "d_model", "d_ff", "num_heads", "d_k", "d_v", "dropout_rate",
               "attention_dropout", "relu_dropout", "label_smoothing", "positional", "norm_first",
               "share_embeddings", "source_word_dropout", "target_word_dropout",
               "decoder_layerdrop")


def training_config(model_dir: str):
    from keras_transformer.training import TrainingConfig, resolve_precision

    average_last = FLAGS.average_last
    if average_last is None:
        average_last = 20 if FLAGS.preset == "big" else 5
    try:
        return TrainingConfig(
            model_dir=model_dir, train_steps=FLAGS.train_steps or None,
            train_minutes=FLAGS.train_minutes, warmup_steps=FLAGS.warmup_steps,
            learning_rate_scale=FLAGS.learning_rate_scale,
            accumulation_steps=FLAGS.accumulation_steps, jit_compile=FLAGS.xla,
            mixed_precision=resolve_precision(FLAGS.mixed_precision),
            checkpoint_every_steps=FLAGS.checkpoint_every_steps or None,
            checkpoint_every_minutes=FLAGS.checkpoint_every_minutes,
            keep_checkpoints=max(FLAGS.keep_checkpoints, average_last),
            average_last=average_last, log_every_steps=FLAGS.log_every_steps,
            dev_every_steps=FLAGS.dev_every_steps or None, resume_data=FLAGS.resume_data,
            init_from=FLAGS.init_from or None,
            early_stopping_patience=FLAGS.early_stopping_patience or None,
            early_stopping_metric=FLAGS.early_stopping_metric,
            early_stopping_min_delta=FLAGS.early_stopping_min_delta,
            ema_decay=FLAGS.ema_decay)
    except ValueError as error:
        if FLAGS.train_steps == 0 and FLAGS.train_minutes is None:
            raise app.UsageError("--train_steps=0 needs --train_minutes, or training never "
                                 "ends.") from None
        raise app.UsageError(str(error)) from None


def model_overrides() -> dict:
    """The TransformerConfig fields the flags set over the preset's."""
    overrides = {name: FLAGS[name].value for name in MODEL_FLAGS if FLAGS[name].value is not None}
    # Sequences are at most --max_length subwords plus EOS/BOS.
    overrides["max_length"] = FLAGS.max_length + 1
    return overrides


def check_model_flags():
    """The model flags agree with each other (the vocabulary size is known only later)."""
    import keras_transformer as kt

    try:
        kt.TransformerConfig.from_preset(FLAGS.preset, vocab_size=8000, **model_overrides())
    except ValueError as error:
        raise app.UsageError(
            f"--preset={FLAGS.preset} with overrides {model_overrides()}: {error}") from None


def check_training_flags(model_dir: str):
    """--init_from names a run whose model the flags give (unless ``model_dir`` resumes from
    checkpoints of its own), and early stopping and --export_best have the evaluations they
    watch: one line each, before any slow work."""
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

    if tf.io.gfile.isdir(model_dir) and tf.train.latest_checkpoint(model_dir):
        return
    import keras_transformer as kt
    from keras_transformer.training import init_from

    try:
        source = init_from.resolve(FLAGS.init_from)
        init_from.check_model(source, kt.TransformerConfig.from_preset(
            FLAGS.preset, vocab_size=source.model_config.vocab_size, **model_overrides()))
    except ValueError as error:
        raise app.UsageError(f"--{error}") from None


def make_strategy():
    """The tf.distribute strategy of the flags; call before TensorFlow runs anything (logical
    devices are fixed at start-up), then seed."""
    from keras_transformer.training import make_strategy as make

    try:
        strategy = make(FLAGS.strategy, FLAGS.num_cpu_devices)
    except ValueError as error:
        raise app.UsageError(f"--strategy={FLAGS.strategy}: {error}") from None
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(FLAGS.seed)
    if FLAGS.deterministic:
        tf.config.experimental.enable_op_determinism()
    return strategy


def train(data, config, strategy, log=print) -> dict:
    """``training.run.train_run`` with the flags' model, dev BLEU and export-on-best settings."""
    from keras_transformer.training.run import train_run

    callbacks = []
    if FLAGS.export_best:
        from keras_transformer.export import ExportBest

        callbacks.append(ExportBest())  # the search of the dev BLEU it was chosen by
    return train_run(data, config, FLAGS.preset, model_overrides(), strategy,
                     dev_bleu_sentences=FLAGS.dev_bleu_sentences,
                     keep_best_bleu=FLAGS.keep_best_bleu, log=log, callbacks=callbacks)


def export_hook(model_dir: str, averaged: bool, export_dir: str) -> list:
    """EXPORT HOOK (the export issue's code): the run's averaged (else latest) checkpoint as
    SavedModels for TF Serving, exactly as ``python -m trainers.export`` writes them."""
    from keras_transformer import export, runs

    translator = runs.load_translator(model_dir, runs.AVERAGED if averaged else None)
    name = os.path.basename(os.path.normpath(os.path.abspath(model_dir)))
    return list(export.export_for_serving(translator, export_dir, name))


# The paper's setup (base, 100k steps) needs the paper's data; the offline corpora are small.
OFFLINE_HINT = ("for a first model on a CPU in 20 minutes, python -m trainers.quickstart (or its "
                "recipe here: see docs/training.md)")


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
            FLAGS.train_minutes is None):
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
    check_model_flags()
    check_training_flags(model_dir)
    config = training_config(model_dir)
    check_dataset_choice()
    strategy = make_strategy()

    from keras_transformer import runs, signals
    from keras_transformer.training import NonFiniteError, is_chief

    try:
        summary = train(data, config, strategy, log=lambda line: print(line, flush=True))
    except NonFiniteError as error:
        console.error_exit(error)
    print(f"wmt: {summary['stop_reason']} after {summary['steps']} steps; "
          f"{summary['tokens_per_second']:,.0f} tokens/s; final train loss "
          f"{summary['final_train_loss']}; dev loss {summary['final_dev_loss']}; "
          f"summary in {os.path.join(model_dir, runs.SUMMARY_FILE)}", flush=True)
    signals.check()  # stopped by a signal: no new stage
    if FLAGS.export_dir and is_chief(strategy):
        try:
            paths = export_hook(model_dir, bool(summary["averaged_checkpoint"]), FLAGS.export_dir)
        except ValueError as error:
            console.error_exit(f"export failed (the checkpoints in {model_dir} are fine; retry "
                               f"with python -m trainers.export --model_dir={model_dir}): {error}")
        print(f"wmt: exported to {', '.join(paths)}", flush=True)


if __name__ == "__main__":
    console.run(main)
