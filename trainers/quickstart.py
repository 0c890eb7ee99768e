"""The README's main command: the whole system on a real corpus, within minutes on a CPU.

    python -m trainers.quickstart                        # ~20 min of training on 2 CPU cores
    python -m trainers.quickstart --train_minutes=5      # a quicker, weaker model
    python -m trainers.quickstart --overwrite            # start over instead of resuming

Six stages, each announced as it starts:

1. data: prepares the offline English->German corpus (Debian package trans-de-en, see
   ``trainers/setup.sh``) and its shared subword vocabulary (``keras_transformer.data``);
2. train: ``python -m trainers.wmt`` on the ``small`` preset for --train_minutes, with a schedule
   sized for that budget (its progress lines are shown as they come);
3. average: the last --average_last checkpoints, averaged by the trainer (section 6.1);
4. evaluate: beam search (beam 4, alpha 0.6) on the held-out test split, scored with sacreBLEU
   (with its signature) and with the paper's tokenized compound-split BLEU, each labelled;
5. export: SavedModels for TF Serving under --export_dir (``keras_transformer.export``);
6. translate: a few test sentences through the EXPORTED model, as a server would;

then a short report (also in WORK_DIR/report.json). A failing stage ends the program with one
message naming the stage and what to do, and the work done so far is kept: running the same
command again resumes training from the last checkpoint (and trains --train_minutes more).

Why the schedule differs from the paper's (warm-up 4,000 steps, ~25,000 tokens per batch): in
20 minutes on 2 CPU cores the small model makes only hundreds of updates, and a 4,000-step
warm-up would still be warming up at the end. Smaller batches give more updates, a short warm-up
reaches the peak learning rate early, and a small vocabulary suits a corpus of ~14k sentence pairs.
The paper's recipe is ``python -m trainers.wmt`` with its defaults (see the README).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from absl import app, flags

from trainers import data_flags

FLAGS = flags.FLAGS
flags.adopt_module_key_flags(data_flags)

# The data flags' defaults are the paper's; these suit ~20 minutes of CPU training on the offline
# corpus (tuned by measuring test BLEU after a fixed budget, see the README).
QUICKSTART_DATA_DEFAULTS = dict(vocab_size=2000, token_budget=2048, max_length=64)
for _name, _value in QUICKSTART_DATA_DEFAULTS.items():
    FLAGS.set_default(_name, _value)

flags.DEFINE_string("work_dir", os.path.join("runs", "quickstart"),
                    "Training run folder (checkpoints, logs, test translations, report.json).")
flags.DEFINE_string("export_dir", "saved_models", "Where the SavedModels go (TF Serving layout).")
flags.DEFINE_float("train_minutes", 20.0, "Wall-clock training budget in minutes.", lower_bound=0.01)
flags.DEFINE_integer("train_steps", 0, "Also stop after this many updates (0: budget only).",
                     lower_bound=0)
flags.DEFINE_enum("preset", "small", ["tiny", "small", "base", "big"], "Model size (Table 3 + CPU).")
flags.DEFINE_integer("warmup_steps", 200, "warmup_steps of Eq. (3) (the paper: 4000, for 100k steps).",
                     lower_bound=1)
flags.DEFINE_float("learning_rate_scale", 1.0, "Multiplies the learning rate of Eq. (3).",
                   lower_bound=1e-6)
flags.DEFINE_float("dropout_rate", 0.3, "P_drop (the small preset's is 0.1; ~14k sentence pairs "
                   "overfit with it: train loss 3.7 vs dev loss 4.7 after 20 minutes).",
                   lower_bound=0.0, upper_bound=0.95)
flags.DEFINE_bool("norm_first", True, "Pre-LN (LayerNorm before each sub-layer) instead of the "
                  "paper's post-LN: it leaves the initial plateau within minutes at a high learning "
                  "rate, where post-LN stalls (measured: loss 4.9 vs 6.3 after 6.5 minutes).")
flags.DEFINE_float("checkpoint_every_minutes", 0.5, "Checkpoint interval (the paper: 10 minutes).",
                   lower_bound=0.01)
flags.DEFINE_integer("checkpoint_every_steps", None, "Also checkpoint every N steps.", lower_bound=1)
flags.DEFINE_integer("average_last", 5, "Average this many last checkpoints (section 6.1: 5). "
                     "0: evaluate the last checkpoint as it is.", lower_bound=0)
flags.DEFINE_integer("log_every_steps", 50, "Training progress line interval.", lower_bound=1)
flags.DEFINE_integer("dev_every_steps", 1000, "Dev loss and dev BLEU interval (0: only at the end).",
                     lower_bound=0)
flags.DEFINE_bool("xla", False, "Compile the training step with XLA.")
flags.DEFINE_enum("mixed_precision", "auto", ["auto", "float32", "bfloat16"],
                  "Training compute dtype. auto: bfloat16 on CPUs with bfloat16 matrix units "
                  "(AVX512-BF16 or AMX; about 2x faster), else float32. Evaluation and export always "
                  "run in float32.")
flags.DEFINE_integer("beam_size", 4, "Beam size (section 6.1: 4).", lower_bound=1)
flags.DEFINE_float("alpha", 0.6, "Length penalty alpha (section 6.1: 0.6).")
flags.DEFINE_integer("eval_limit", None, "Evaluate on the first N test pairs only (default all).",
                     lower_bound=1)
flags.DEFINE_integer("samples", 5, "Test sentences translated through the exported model.",
                     lower_bound=1)
flags.DEFINE_bool("overwrite", False, "Delete WORK_DIR first instead of resuming from it.")
flags.DEFINE_integer("seed", 1, "Seed of weight initialisation and dropout.")

STAGES = ("data", "train", "average", "evaluate", "export", "translate")
REMEDIES = {
    "data": "install the offline corpus with `bash trainers/setup.sh` (or `sudo apt-get install "
            "trans-de-en`), or point --ding_file at the Ding dictionary file, or use "
            "--dataset=files with --train_data/--dev_data/--test_data.",
    "train": "read the trainer's message above; fix the flag it names and run the same command "
             "again (training resumes from the last checkpoint in --work_dir).",
    "average": "run `python -m trainers.average_checkpoints --model_dir=WORK_DIR --last=N` by hand, "
               "or pass --average_last=0 to evaluate the last checkpoint.",
    "evaluate": "check the test data (see the data stage) and the checkpoints in --work_dir; "
                "`python -m trainers.evaluate --model_dir=WORK_DIR` repeats this stage alone.",
    "export": "free disk space or pass a writable --export_dir; the trained model in --work_dir is "
              "kept: `python -m trainers.export --model_dir=WORK_DIR --checkpoint=averaged` repeats "
              "this stage alone.",
    "translate": "the export is written but does not load or run; "
                 "`python -m trainers.translate --saved_model=EXPORT --text=...` shows the error "
                 "in full.",
}


# Log lines of TensorFlow's C++ core and absl INFO lines (TFDS opening files), not for the screen.
NOISE = re.compile(r"^([IWE]\d{4} |WARNING: All log messages before absl)")


def say(text=""):
    print(text, flush=True)


def header(stage, detail):
    number = STAGES.index(stage) + 1
    say(f"\n=== [{number}/{len(STAGES)}] {stage}: {detail} "
        f"(load average {os.getloadavg()[0]:.1f}) ===")


def fail(stage, message):
    number = STAGES.index(stage) + 1
    remedy = REMEDIES[stage].replace("WORK_DIR", FLAGS.work_dir)
    sys.exit(f"\nquickstart: stage {number}/{len(STAGES)} '{stage}' failed: {message}\n"
             f"What to do: {remedy}")


def check_writable(stage, flag, path):
    """Fails at start, not after 20 minutes of training, if ``path`` cannot be written."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as error:
        fail(stage, f"cannot create --{flag}={path}: {error.strerror or error}")
    if not os.path.isdir(path) or not os.access(path, os.W_OK | os.X_OK):
        fail(stage, f"--{flag}={path} is not a writable folder.")


def atomic_write_text(path, text):
    handle, temporary = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".tmp-")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


# --- 1. data -------------------------------------------------------------------------------------

def stage_data():
    header("data", "corpus and shared subword vocabulary")
    from keras_transformer import data

    config = data_flags.data_config(xla=FLAGS.xla)
    try:
        tokenizer, learned = data.load_or_learn_tokenizer(config)
        counts = {}
        for split in data.SPLITS:
            try:
                counts[split] = int(data.load_text_pairs(config, split).reduce(0, lambda n, _: n + 1))
            except ValueError as error:
                if split == "dev" and "is not set" in str(error):
                    continue  # own files without a dev set: no dev loss, nothing else is missing
                raise
    except (ValueError, OSError, data.DataNotFoundError) as error:
        fail("data", str(error))
    if not counts.get("test"):
        fail("data", f"the test split of {config.dataset} is empty.")
    say(f"dataset {config.dataset}: " + ", ".join(f"{n:,} {s}" for s, n in counts.items())
        + " sentence pairs")
    say(f"vocabulary: {tokenizer.vocab_size:,} shared subwords "
        f"({'learned now' if learned else 'reused'}) at {tokenizer.path}")
    return config, counts


# --- 2. train ------------------------------------------------------------------------------------

def bfloat16_cpu() -> bool:
    """True on a CPU with bfloat16 matrix instructions (Linux /proc/cpuinfo flags)."""
    try:
        with open("/proc/cpuinfo") as stream:
            words = set(stream.read().split())
    except OSError:
        return False
    return bool(words & {"avx512_bf16", "amx_bf16"})


def training_precision() -> str:
    if FLAGS.mixed_precision != "auto":
        return FLAGS.mixed_precision
    return "bfloat16" if bfloat16_cpu() else "float32"


def training_command(config):
    """``python -m trainers.wmt`` with the quickstart's settings (no training logic here)."""
    # An absolute model_dir: the trainer's checkpoint_paths() joins model_dir to paths that
    # tf.train.get_checkpoint_state already prefixed with it, which breaks relative dirs.
    command = [sys.executable, "-m", "trainers.wmt",
               f"--preset={FLAGS.preset}", f"--model_dir={os.path.abspath(FLAGS.work_dir)}",
               f"--mixed_precision={training_precision()}",
               f"--train_minutes={FLAGS.train_minutes}", f"--train_steps={FLAGS.train_steps}",
               f"--warmup_steps={FLAGS.warmup_steps}",
               f"--learning_rate_scale={FLAGS.learning_rate_scale}",
               f"--checkpoint_every_minutes={FLAGS.checkpoint_every_minutes}",
               f"--average_last={FLAGS.average_last}", f"--log_every_steps={FLAGS.log_every_steps}",
               f"--dev_every_steps={FLAGS.dev_every_steps}", f"--seed={FLAGS.seed}",
               f"--{'' if FLAGS.xla else 'no'}xla",
               f"--dataset={config.dataset}", f"--data_dir={config.data_dir}",
               f"--vocab_size={config.effective_vocab_size}",
               f"--vocab_path={config.effective_vocab_path}",
               f"--max_length={config.max_length}", f"--token_budget={config.token_budget}",
               f"--bucket_multiple={config.bucket_multiple}"]
    for name in ("ding_file", "train_data", "dev_data", "test_data"):
        if getattr(config, name):
            command.append(f"--{name}={getattr(config, name)}")
    command.append(f"--{'' if FLAGS.norm_first else 'no'}norm_first")
    if FLAGS.dropout_rate is not None:
        command.append(f"--dropout_rate={FLAGS.dropout_rate}")
    if FLAGS.checkpoint_every_steps:
        command.append(f"--checkpoint_every_steps={FLAGS.checkpoint_every_steps}")
    return command


def stage_train(config):
    header("train", f"preset {FLAGS.preset}, {FLAGS.train_minutes:g} minutes"
           + (f" or {FLAGS.train_steps} steps" if FLAGS.train_steps else ""))
    if FLAGS.overwrite and os.path.isdir(FLAGS.work_dir):
        shutil.rmtree(FLAGS.work_dir)
        say(f"--overwrite: deleted {FLAGS.work_dir}")
    check_writable("train", "work_dir", FLAGS.work_dir)
    command = training_command(config)
    say("$ " + " ".join(command[1:]))
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
    summary_path = os.path.join(FLAGS.work_dir, "summary.json")
    if os.path.exists(summary_path):
        os.remove(summary_path)  # so a stale summary is never reported as this run's
    tail = []
    log_path = os.path.join(FLAGS.work_dir, "train.log")
    try:
        with open(log_path, "a", encoding="utf-8") as log, subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=environment,
                text=True, errors="replace", bufsize=1) as process:
            for line in process.stdout:
                log.write(line)
                line = line.rstrip("\n")
                if not NOISE.match(line):  # kept in train.log only
                    say("  " + line)
                    tail = (tail + [line])[-5:]
            code = process.wait()
    except OSError as error:
        fail("train", f"cannot run the trainer: {error}")
    except KeyboardInterrupt:
        fail("train", f"interrupted; the checkpoints in {FLAGS.work_dir} are kept")
    if code != 0:
        last = next((line for line in reversed(tail) if line.strip()), f"exit status {code}")
        fail("train", f"the trainer stopped with exit status {code}: {last.strip()} "
             f"(full log: {log_path})")
    try:
        with open(summary_path) as stream:
            return json.load(stream)
    except (OSError, ValueError) as error:
        fail("train", f"the trainer wrote no readable {summary_path}: {error}")


# --- 3. average -----------------------------------------------------------------------------------

def stage_average(summary):
    header("average", f"the last {FLAGS.average_last} checkpoints (section 6.1)")
    from keras_transformer import inference
    from keras_transformer.training import checkpoint_paths

    if not FLAGS.average_last:
        say(f"--average_last=0: using the last checkpoint {summary['latest_checkpoint']}")
        return None, [summary["latest_checkpoint"]]
    # absolute: see training_command
    paths = checkpoint_paths(os.path.abspath(FLAGS.work_dir))[-FLAGS.average_last:]
    if not summary.get("averaged_checkpoint"):
        try:
            from trainers.average_checkpoints import average

            average(os.path.abspath(FLAGS.work_dir), len(paths))
        except ValueError as error:
            fail("average", str(error))
    names = ", ".join(os.path.basename(p) for p in paths)
    say(f"averaged {len(paths)} checkpoint(s) ({names}) into "
        f"{os.path.join(FLAGS.work_dir, 'averaged', 'ckpt')}")
    return inference.AVERAGED, paths


# --- 4. evaluate ----------------------------------------------------------------------------------

def stage_evaluate(config, checkpoint):
    from keras_transformer import data, evaluation, inference

    try:
        pairs = data.load_text_pairs(config, "test")
        if FLAGS.eval_limit:
            pairs = pairs.take(FLAGS.eval_limit)
        sources, references = [], []
        for source, target in pairs.as_numpy_iterator():
            sources.append(source.decode("utf-8"))
            references.append(target.decode("utf-8"))
    except (ValueError, OSError) as error:
        fail("evaluate", f"cannot read the test split: {error}")
    header("evaluate", f"beam {FLAGS.beam_size}, alpha {FLAGS.alpha} on {len(sources):,} held-out "
           "test sentences")
    import tensorflow as tf

    try:
        translator = inference.load_translator(
            FLAGS.work_dir, checkpoint,
            inference.DecodingConfig(beam_size=FLAGS.beam_size, alpha=FLAGS.alpha))
    except ValueError as error:
        fail("evaluate", str(error))
    translate = translator.text_function()
    started, done = time.monotonic(), [0]
    step = max(len(sources) // 10, 1)

    def progress(n):
        before, done[0] = done[0], done[0] + n
        if done[0] // step > before // step or done[0] == len(sources):
            say(f"  translated {done[0]:,}/{len(sources):,} sentences "
                f"({time.monotonic() - started:.0f} s)")

    lang = "fr" if config.dataset == "wmt14_en_fr" else "de"
    try:
        result, hypotheses = evaluation.translate_and_evaluate(
            translate, sources, references, lang, batch_size=64, progress=progress)
        atomic_write_text(os.path.join(FLAGS.work_dir, "test.hyp"),
                          "".join(h.replace("\n", " ") + "\n" for h in hypotheses))
    except (ValueError, OSError, tf.errors.OpError) as error:
        fail("evaluate", str(error).splitlines()[0] if str(error) else type(error).__name__)
    for line in result.lines():
        say(line)
    return translator, result, sources, references, hypotheses, time.monotonic() - started


# --- 5. export ------------------------------------------------------------------------------------

def stage_export(translator):
    name = os.path.basename(os.path.normpath(os.path.abspath(FLAGS.work_dir)))
    header("export", f"SavedModels for TF Serving under {FLAGS.export_dir}/{name}")
    import tensorflow as tf

    from keras_transformer import export

    check_writable("export", "export_dir", FLAGS.export_dir)
    try:
        paths = list(export.export_for_serving(translator, FLAGS.export_dir, name))
    except (OSError, ValueError, tf.errors.OpError) as error:
        message = getattr(error, "strerror", None) or str(error).splitlines()[0]
        fail("export", f"could not write the SavedModel under {FLAGS.export_dir}: {message}")
    for path in paths:
        say(f"wrote {path}")
    return paths


# --- 6. translate ---------------------------------------------------------------------------------

def stage_translate(path, sources, references, hypotheses):
    header("translate", f"{min(FLAGS.samples, len(sources))} test sentences through the exported "
           f"model {path}")
    from keras_transformer import inference
    from keras_transformer.inference import translate_in_batches

    chosen = list(range(min(FLAGS.samples, len(sources))))
    try:
        translate_fn, path = inference.load_exported_translate_fn(path)
        outputs = translate_in_batches(translate_fn, [sources[i] for i in chosen])
    except Exception as error:  # noqa: BLE001  (any failure of the export is this stage's)
        fail("translate", str(error).splitlines()[0] if str(error) else type(error).__name__)
    samples = [{"source": sources[i], "reference": references[i],
                "translation": out["translation"], "score": out["score"],
                "same_as_in_memory": out["translation"] == hypotheses[i]}
               for i, out in zip(chosen, outputs)]
    for sample in samples:
        say(f"  EN   {sample['source']}\n  DE   {sample['translation']}\n"
            f"  ref  {sample['reference']}")
    return samples


# --- report ---------------------------------------------------------------------------------------

def report(counts, summary, averaged, result, eval_seconds, paths, samples, wall):
    lines = [
        "",
        "=" * 78,
        "quickstart report",
        "=" * 78,
        f"corpus      {FLAGS.dataset}: {counts.get('train', 0):,} train / {counts.get('test', 0):,} "
        "test sentence pairs",
        f"training    preset {FLAGS.preset}, {summary['steps']:,} steps in "
        f"{summary['wall_seconds'] / 60:.1f} min, {summary['tokens_per_second']:,.0f} tokens/s "
        f"(source+target), final train loss {summary.get('final_train_loss') or float('nan'):.3f}"
        + (f", dev loss {summary['final_dev_loss']:.3f}" if summary.get("final_dev_loss") else ""),
        "weights     " + (f"average of the last {len(averaged)} checkpoints"
                           if FLAGS.average_last else "last checkpoint"),
        f"test BLEU   (beam {FLAGS.beam_size}, alpha {FLAGS.alpha}, {result.sentences:,} sentences, "
        f"{eval_seconds:.0f} s)",
        f"  {result.sacrebleu}",
        f"  {result.tokenized}",
        f"export      {paths[0]}",
        f"            {paths[1]} (token ids only, core TensorFlow ops)",
        "samples     (through the exported model)",
    ]
    for sample in samples:
        lines += [f"  EN  {sample['source']}", f"  DE  {sample['translation']}"]
    lines += [
        f"total       {wall / 60:.1f} min wall clock, load average {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} CPU(s)",
        f"next        python -m trainers.translate --saved_model={paths[0]} --text=\"Good morning.\"",
        "=" * 78,
    ]
    say("\n".join(lines))
    record = {"steps": summary["steps"], "train_minutes": summary["wall_seconds"] / 60,
              "tokens_per_second": summary["tokens_per_second"],
              "final_train_loss": summary.get("final_train_loss"),
              "final_dev_loss": summary.get("final_dev_loss"),
              "sacrebleu": result.sacrebleu.score, "sacrebleu_signature": result.sacrebleu.signature,
              "tokenized_bleu": result.tokenized.score, "test_sentences": result.sentences,
              "averaged_checkpoints": averaged, "export": paths, "samples": samples,
              "wall_minutes": wall / 60, "load_average": os.getloadavg(),
              "cpus": os.cpu_count()}
    atomic_write_text(os.path.join(FLAGS.work_dir, "report.json"), json.dumps(record, indent=1))


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    started = time.monotonic()
    # Both outputs are checked first: a full disk should not be found after the training.
    check_writable("export", "export_dir", FLAGS.export_dir)
    check_writable("train", "work_dir", FLAGS.work_dir)
    from absl import logging

    logging.set_verbosity(logging.WARNING)  # TFDS logs every file it opens at INFO

    config, counts = stage_data()
    summary = stage_train(config)
    checkpoint, averaged = stage_average(summary)
    translator, result, sources, references, hypotheses, eval_seconds = stage_evaluate(
        config, checkpoint)
    paths = stage_export(translator)
    samples = stage_translate(paths[0], sources, references, hypotheses)
    report(counts, summary, averaged, result, eval_seconds, paths, samples,
           time.monotonic() - started)


if __name__ == "__main__":
    app.run(main)
