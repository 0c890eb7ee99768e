"""The README's main command: the whole system on a real corpus, within minutes on a CPU.

    python -m trainers.quickstart                        # ~20 min of training on 2 CPU cores
    python -m trainers.quickstart --train_minutes=5      # a quicker, weaker model
    python -m trainers.quickstart --overwrite            # start over instead of resuming

Six stages, each announced as it starts:

1. data: prepares the offline English->German corpus (the LibreOffice help pages, Debian packages
   libreoffice-help-en-us and libreoffice-help-de, fetched with ``apt-get download`` into data/
   where neither ``trainers/setup.sh`` nor ``apt-get install`` has put them) and its shared
   subword vocabulary (``keras_transformer.data``);
2. train: the training run of ``python -m trainers.wmt`` (``keras_transformer.training.run``, in
   this process) on the ``mini`` preset for --train_minutes, with a recipe sized for that budget:
   a few updates are timed first, and the warm-up follows the updates the budget will buy;
3. average: the last --average_last checkpoints, averaged by the trainer (section 6.1); with
   --ema_decay also the moving average of the weights, and of the two the one with the higher
   BLEU on the whole dev split is used;
4. evaluate: beam search (beam 4, alpha 0.6) on the held-out test split, scored with sacreBLEU
   (with its signature), with the paper's tokenized compound-split BLEU and with sacreBLEU's chrF2
   (with its signature), each labelled, beside two floors on the same sentences: copying the
   source, and a translation memory (the German of the nearest English training sentence); a
   model below the memory has not learned to translate;
5. export: SavedModels for TF Serving under --export_dir (``keras_transformer.export``);
6. translate: a few test sentences through the EXPORTED model, as a server would;

then a short report (also in MODEL_DIR/report.json). A failing stage ends the program with one
message naming the stage and what to do, and the work done so far is kept: running the same
command again goes on from there. A training that was interrupted resumes from its last checkpoint
(and trains --train_minutes more); one that had ended is not trained again. Once
a run has finished, the same command prints its report again without training; --train_more
trains it --train_minutes further (up to --train_steps, which counts all of a run's updates: the
report's "next" line raises it), --overwrite starts over.

Every flag of ``python -m trainers.wmt`` works here too (``--preset``, ``--dropout_rate``,
``--dataset``, ...); only the defaults differ, see QUICKSTART_DEFAULTS. The paper's recipe is
``python -m trainers.wmt`` with its own defaults (see the README).
"""

import dataclasses
import json
import os
import shlex
import shutil
import sys
import time

from absl import app, flags

from . import (checks, console, data_flags, decoding_flags, model_flags, shipped,
               training_flags)

FLAGS = flags.FLAGS
# The trainer's flags (model, recipe, data) are this program's too, with the defaults below: the
# training stage is the trainer's training run, built from the same flag modules.
TRAINER_MODULES = (model_flags, training_flags, data_flags)
for _module in TRAINER_MODULES + (decoding_flags,):
    flags.adopt_module_key_flags(_module)

# The trainer's defaults are the paper's (base, 100k steps, ~25k-token batches). These are for 20
# minutes on 2 CPU cores (docs/results.md, "The main job"). The warm-up of 1,000 and then a
# vocabulary of 4,000, then 8,000 subwords won the dev sweep of benchmarks.recipe, two seeds each
# (benchmarks/results/recipe.md), and so did a wider model on the bf16 kind (KIND_RECIPES below);
# the rest rests on single runs of earlier probes, which no row has beaten on two seeds so far: a narrow
# model (preset mini) makes more updates in the budget; in those probes post-LN stalled for minutes
# on its initial plateau. Only the checkpoints it averages are kept (unless --keep_checkpoints is
# given), and the best dev-BLEU one.
QUICKSTART_DEFAULTS = dict(
    dataset="libreoffice_help_en_de", vocab_size=8000, token_budget=2048, max_length=64,
    preset="mini", dropout_rate=0.1, norm_first=True,
    model_dir=shipped.MAIN_JOB_RUN, export_dir="saved_models",
    train_minutes=20.0, train_steps=0, warmup_steps=1000, mixed_precision="auto",
    checkpoint_every_minutes=0.5, average_last=5, log_every_steps=50, dev_every_steps=500,
    keep_best_bleu=True,
)
# The recipe per CPU kind, by the precision --mixed_precision=auto trains in there. With bfloat16
# matrix units (AVX512-BF16 or AMX) a wider mini costs somewhat more per step than mini and learns
# more in the 20 minutes; in float32 (an AVX2-only CPU) its step costs about twice mini's (the rows
# warmup_1000+d_model_192 and d_model_192 of benchmarks/results/recipe.md, and their step costs).
# Applied when neither --preset nor the width is given: precision -> (its name, the flags it sets).
KIND_RECIPES = {"bfloat16": ("the bf16 kind's recipe", dict(d_model=192, d_ff=768)),
                "float32": ("the float32 kind's recipe", {})}
# The warm-up by the updates the run will make: below SHORT_WARMUP_BELOW updates, SHORT_WARMUP
# instead of the default's. At a slow CPU's budget the shorter warm-up won on dev (two seeds,
# benchmarks/results/recipe_avx2_zen1/README.md); at the sweep's larger budgets of both kinds
# the default's led it (rows warmup_500 and warmup_1000 of benchmarks/results/recipe.md). The
# boundary lies between those budgets, below the AVX2 kind's updates in the sweep, so that its
# rows keep the warm-up they were measured with; where exactly the two cross was not measured.
# A budget in minutes is estimated from timed updates alone, more than the run makes beside its
# dev evaluations and checkpoints; the boundary sits above the estimate at that slow CPU's
# budget (the same README). At a 2-minute run's updates it also beat both a quarter of the run and
# the default's 1,000 on dev (benchmarks/results/warmup_short_runs.md).
SHORT_WARMUP, SHORT_WARMUP_BELOW = 500, 2400
for _name, _value in QUICKSTART_DEFAULTS.items():
    console.set_program_default(_name, _value)
console.set_program_default("keep_checkpoints", QUICKSTART_DEFAULTS["average_last"],
                            "Not given: as many as --average_last (at least 1).")
console.set_program_default(
    "warmup_steps", QUICKSTART_DEFAULTS["warmup_steps"],
    f"Not given: {SHORT_WARMUP} for a new run of fewer than {SHORT_WARMUP_BELOW:,} updates "
    "(--train_steps, or estimated from a few updates timed at the start on one device; a run "
    "over several replicas is not timed); a resumed run keeps its own.")
flags.DEFINE_alias("work_dir", "model_dir")  # the name of earlier versions

flags.DEFINE_enum("eval_split", "test", ["dev", "test"],
                  "Which held-out split the evaluate stage scores (dev: for choosing settings; "
                  "test: for reporting them).")
flags.DEFINE_integer("eval_limit", None, "Evaluate on the first N pairs only (default all).",
                     lower_bound=1)
flags.DEFINE_integer("samples", 5, "Sentences translated through the exported model.",
                     lower_bound=1)
flags.DEFINE_bool("overwrite", False, "Delete MODEL_DIR first instead of resuming from it.")
flags.DEFINE_bool("train_more", False, "A finished run (its report written): train it "
                  "--train_minutes more and evaluate again, instead of showing its report.")

STAGES = ("data", "train", "average", "evaluate", "export", "translate")
REMEDIES = {
    "data": "fix what the message names and run the same command again; or point "
            "--libreoffice_help_dir (or --ding_file with --dataset=ding_de_en) at the corpus, or "
            "use --dataset=files with --train_data/--dev_data/--test_data.",
    # The data stage's, when the corpus is the user's own files.
    "data files": "fix what the message names (your files, or the flags naming them: "
                  "--train_data, --dev_data, --test_data, each PATH.tsv or SRC_PATH,TGT_PATH) "
                  "and run the same command again.",
    "train": "fix what the message names and run the same command again (training resumes "
             "from the last checkpoint in --model_dir).",
    "average": f"run `{console.program_command('average_checkpoints')} --model_dir=MODEL_DIR "
               "--last=N` by hand, or pass --average_last=0 to evaluate the last checkpoint.",
    "evaluate": "check the test data (see the data stage) and the checkpoints in --model_dir, "
                "and run the same command again (it does not train again); "
                f"`{console.program_command('evaluate')} --model_dir=MODEL_DIR` repeats this stage "
                "alone.",
    "export": "free disk space or pass a writable --export_dir, and run the same command again "
              "(the trained model in --model_dir is kept and not trained again); "
              f"`{console.program_command('export')} --model_dir=MODEL_DIR "
              "--checkpoint=averaged` repeats this stage alone.",
    "translate": "the export is written but does not load or run; "
                 f"`{console.program_command('translate')} --saved_model=EXPORT --text=...` shows "
                 "the error in full.",
}


def say(text=""):
    print(text, flush=True)


def choose_recipe():
    """Sets the flags of the recipe for this machine's kind (KIND_RECIPES, by the precision
    --mixed_precision resolves to here) that the command line leaves open; returns the start line
    that names the recipe and why."""
    from keras_transformer.config import PRESETS
    from keras_transformer.training import bfloat16_cpu, resolve_precision

    precision = resolve_precision(FLAGS.mixed_precision)
    name, changes = KIND_RECIPES[precision]
    recipe_flags = ("preset", *sorted({flag for _, kind in KIND_RECIPES.values() for flag in kind}))
    given = [flag for flag in recipe_flags if FLAGS[flag].present]
    if FLAGS.mixed_precision != "auto":
        why = f"--mixed_precision={precision}"
    elif precision == "bfloat16":
        why = "this CPU has AVX512-BF16 or AMX: --mixed_precision=auto trains in bfloat16"
    else:
        why = ("--mixed_precision=auto trains in float32 here ("
               + ("a GPU" if bfloat16_cpu() else "no AVX512-BF16 or AMX on this CPU") + ")")
    if given:
        would = f" would set {flag_text(changes)}, but --{given[0]} is given:" if changes else ":"
        return f"recipe: {name}{would} preset {FLAGS.preset} as the flags say ({why})"
    # What a new run trains; a run folder resumes with the model it has, whichever kind's recipe
    # (or an earlier default vocabulary) chose it: a Colab runtime on a drive, a copied folder. A
    # fine-tuned run (--init_from) has its source's model, which another kind may have trained.
    new_run = {flag: changes.get(flag, PRESETS[FLAGS.preset][flag]) for flag in recipe_flags[1:]}
    if not FLAGS["vocab_size"].present:
        new_run["vocab_size"] = FLAGS.vocab_size
    resumed = resumed_model()
    source = None if resumed else init_from_model()
    kept = (resumed or source) and {flag: getattr(resumed or source, flag) for flag in new_run}
    if kept and kept != new_run:
        for flag, value in kept.items():
            setattr(FLAGS, flag, value)
        if source:
            return (f"recipe: a fine-tuned run has the model it starts from (--init_from), "
                    f"{flag_text(kept)}; {name} (because {why}) is for runs from scratch")
        return (f"recipe: the run in {FLAGS.model_dir} resumes with the model it was trained with, "
                f"{flag_text(kept)}; {name} (because {why}) is for new runs (--overwrite)")
    for flag, value in changes.items():
        setattr(FLAGS, flag, value)
    return (f"recipe: {name}: preset {FLAGS.preset}"
            + (f" with {flag_text(changes)}" if changes else "") + f", because {why}"
            + "; benchmarks/results/recipe.md has the rows behind it")


def choose_warmup(data_config, replicas=1):
    """Sets --warmup_steps for the updates this run will make, unless given or the run resumes
    (then its own); returns the line that says which and why. A new run on a time budget (no
    --train_steps) times a few updates of its model first (``training.speed``), on one device:
    a run over several ``replicas`` keeps the default, as their updates' cost is not timed."""
    from keras_transformer.training import resolve_precision, speed

    if FLAGS["warmup_steps"].present:
        return f"warm-up: {FLAGS.warmup_steps:,} updates, as --warmup_steps says"
    run = resumed_run()
    training = run.get("training") if isinstance(run, dict) else None
    resumed = training.get("warmup_steps") if isinstance(training, dict) else None
    if isinstance(resumed, int) and resumed > 0:
        FLAGS.warmup_steps = resumed
        return (f"warm-up: {FLAGS.warmup_steps:,} updates, the one the run in {FLAGS.model_dir} "
                "was trained with")
    default = QUICKSTART_DEFAULTS["warmup_steps"]
    if FLAGS.train_steps:
        updates, why = FLAGS.train_steps, f"--train_steps={FLAGS.train_steps}"
    elif replicas > 1:
        FLAGS.warmup_steps = default
        return (f"warm-up: {default:,} updates, the default: the updates of a run over {replicas} "
                "replicas are not timed (the timing trains on one device)")
    else:
        say(f"timing {speed.UNTIMED + speed.TIMED} updates of the model to size the recipe to "
            f"--train_minutes={FLAGS.train_minutes:g} ...")
        seconds = speed.seconds_per_update_of_run(
            data_config, FLAGS.preset, model_flags.overrides(),
            resolve_precision(FLAGS.mixed_precision), FLAGS.xla, init_from=FLAGS.init_from)
        training_flags.seed()  # the run starts from the weights it would have without the timing
        # an update of the run sums --accumulation_steps batches, one after another
        seconds *= FLAGS.accumulation_steps
        updates = int(FLAGS.train_minutes * 60 / seconds)
        why = (f"--train_minutes={FLAGS.train_minutes:g} at {seconds:.3g} s per update"
               + (f" of {FLAGS.accumulation_steps} batches" if FLAGS.accumulation_steps > 1 else "")
               + ", as timed here")
    FLAGS.warmup_steps = warmup_for(updates)
    return (f"warm-up: {FLAGS.warmup_steps:,} updates, for a run of about {updates:,} updates "
            f"({why}); {SHORT_WARMUP:,} below {SHORT_WARMUP_BELOW:,} updates, "
            f"{default:,} from there on "
            "(benchmarks/results/recipe_avx2_zen1/README.md)")


def warmup_for(updates):
    """The warm-up of a new run of about ``updates`` updates: SHORT_WARMUP below
    SHORT_WARMUP_BELOW, else the default's (notebooks/quickstart.ipynb sizes its run by it too)."""
    return SHORT_WARMUP if updates < SHORT_WARMUP_BELOW else QUICKSTART_DEFAULTS["warmup_steps"]


def resumed_run():
    """The config.json (a dict) of the run this command resumes (--model_dir holds it and a
    checkpoint, and --overwrite is not given), or None."""
    import tensorflow as tf

    from keras_transformer import runs

    if FLAGS.overwrite or not tf.train.latest_checkpoint(FLAGS.model_dir):
        return None
    try:
        return runs.read_config(FLAGS.model_dir)
    except ValueError:
        return None  # not a run of ours: the trainer's own checks name what is wrong


def resumed_model():
    """The TransformerConfig of the run this command resumes, or None."""
    from keras_transformer import runs

    run = resumed_run()
    try:
        return run and runs.model_config(run)
    except (ValueError, TypeError):
        return None


def init_from_model():
    """The TransformerConfig of the --init_from model a new run is fine-tuned from, or None (not
    given; or not found: training_flags.check then says why, in one line)."""
    if not FLAGS.init_from:
        return None
    from keras_transformer.training import init_from

    try:
        return init_from.resolve(FLAGS.init_from).model_config
    except ValueError:
        return None


def flag_text(values):
    return " ".join(f"--{flag}={value}" for flag, value in values.items())


def header(stage, detail):
    number = STAGES.index(stage) + 1
    say(f"\n=== [{number}/{len(STAGES)}] {stage}: {detail} "
        f"(load average {os.getloadavg()[0]:.1f}) ===")


def fail(stage, message):
    number = STAGES.index(stage) + 1
    from keras_transformer.data.config import FILES_DATASET

    own_files = stage == "data" and FLAGS.dataset == FILES_DATASET
    remedy = REMEDIES["data files" if own_files else stage].replace(
        "MODEL_DIR", shlex.quote(FLAGS.model_dir))
    sys.exit(f"\nquickstart: stage {number}/{len(STAGES)} '{stage}' failed: "
             f"{console.for_programs(str(message))}\n"
             f"What to do: {remedy}")


def write_file(stage, path, text):
    from keras_transformer import writing

    try:
        writing.write_file(path, text)
    except writing.WriteError as error:
        fail(stage, str(error))


# --- 1. data -------------------------------------------------------------------------------------

def stage_data(config):
    header("data", "corpus and shared subword vocabulary")
    from keras_transformer import data, runs
    from keras_transformer.training import run

    # The vocabulary training will use: a fine-tuned run's is its source's, not one of this corpus.
    model_dir = None if FLAGS.overwrite else FLAGS.model_dir  # --overwrite: no copy to resume with
    try:
        data_flags.fetch_corpus(config, say)  # one command from nothing, outside a clone too
        config = runs.data_to_resume(model_dir, config)
        tokenizer, _, _, origin = run.run_vocabulary(config, model_dir, FLAGS.init_from)
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
    if config.dataset == data.LIBREOFFICE_DATASET:
        from keras_transformer.data import libreoffice_help

        say(libreoffice_help.alignment_summary(config.libreoffice_help_dir))
    note = data.splits_note(config)
    say(f"dataset {config.dataset}: " + ", ".join(f"{n:,} {s}" for s, n in counts.items())
        + " sentence pairs" + (f"; {note}" if note else ""))
    origin = {"init_from": "the --init_from model's",
              "own copy": "the run's own copy, which it resumes with"}.get(origin, origin)
    say(f"vocabulary: {tokenizer.vocab_size:,} shared subwords ({origin}) at {tokenizer.path}")
    return config, counts


# --- 2. train ------------------------------------------------------------------------------------

def training_command(training_config):
    """The ``python -m trainers.wmt`` command line that trains the same run (shown, and kept in
    the report, so the training can be repeated or continued alone)."""
    command = ["python", "-m", f"{console.PACKAGE}.wmt", f"--model_dir={FLAGS.model_dir}",
               # what this run keeps (only the checkpoints it averages, unless given)
               f"--keep_checkpoints={training_config.keep_checkpoints}"]
    for module in TRAINER_MODULES:
        for flag in FLAGS.get_flags_for_module(module.__name__):
            # export_dir: the export is this program's own stage 5.
            if (flag.name not in ("model_dir", "export_dir", "keep_checkpoints")
                    and flag.value is not None
                    and (flag.present or flag.name in QUICKSTART_DEFAULTS
                         or not flag.using_default_value)):
                command.append(flag.serialize())
    if training_config.train_minutes:  # the run's minutes in all (--train_more adds to them)
        command = [part for part in command if not part.startswith("--train_minutes=")]
        command.append(f"--train_minutes={training_config.train_minutes:g}")
    return command


def trained_summary():
    """The summary of this run's training when the train stage had ended (a later stage then
    failed or was stopped): the same command goes on from the stage after it rather than training
    --train_minutes more. None: the run is new, --train_more / --overwrite ask for training, the
    training was interrupted (a signal, a crash: its checkpoint is newer than the summary), or
    --train_steps asks for more updates than it made."""
    import tensorflow as tf

    from keras_transformer import runs

    if FLAGS.train_more or FLAGS.overwrite:
        return None
    summary = runs.read_summary(FLAGS.model_dir)
    latest = tf.train.latest_checkpoint(FLAGS.model_dir)
    if (not latest
            or summary.get("stop_reason") not in ("train_minutes", "train_steps", "early_stopping")
            or os.path.basename(summary.get("latest_checkpoint") or "") != os.path.basename(latest)
            or (FLAGS.train_steps and summary.get("steps", 0) < FLAGS.train_steps)):
        return None
    return summary


def stage_train(data_config, training_config, strategy):
    limits = ([minutes(FLAGS.train_minutes)] if FLAGS.train_minutes else []) + (
        [f"{FLAGS.train_steps} steps"] if FLAGS.train_steps else [])
    header("train", f"preset {FLAGS.preset}, {' or '.join(limits)}")
    summary = trained_summary()
    if summary is not None:
        command, more = train_more(summary["steps"])
        say(f"the training of this run had ended ({summary['stop_reason']} after "
            f"{summary['steps']:,} updates); going on with its weights. For {more}: {command}")
        return summary
    from keras_transformer import runs, signals
    from keras_transformer.training import NonFiniteError

    if FLAGS.overwrite and os.path.isdir(FLAGS.model_dir):
        shutil.rmtree(FLAGS.model_dir)
        say(f"--overwrite: deleted {FLAGS.model_dir}")
    try:
        say(choose_warmup(data_config, strategy.num_replicas_in_sync))
    except (ValueError, OSError) as error:
        fail("train", str(error))
    training_config = dataclasses.replace(training_config, warmup_steps=FLAGS.warmup_steps)
    if FLAGS.train_more and training_config.train_minutes:
        # --train_minutes more: the trainer's bound counts the run's training time in all
        from keras_transformer.training import training_seconds

        training_config = dataclasses.replace(training_config, train_minutes=round(
            training_seconds(FLAGS.model_dir) / 60 + FLAGS.train_minutes, 2))
    say("the same training alone: " + shlex.join(training_command(training_config)))
    os.makedirs(FLAGS.model_dir, exist_ok=True)
    log_path = os.path.join(FLAGS.model_dir, runs.TRAIN_LOG)
    with open(log_path, "a", encoding="utf-8") as log:
        def show(line):
            log.write(line + "\n")
            log.flush()
            say("  " + line)

        try:
            summary = training_flags.train(data_config, training_config, strategy, log=show)
        except (NonFiniteError, ValueError) as error:
            fail("train", str(error))
    signals.check()  # stopped by a signal: the checkpoint is saved, no new stage
    return summary


# --- 3. average -----------------------------------------------------------------------------------

def stage_average(config, summary):
    """``(checkpoint name, averaged checkpoint paths, weights line)``: the weights to evaluate
    and export."""
    from keras_transformer import data, runs
    from keras_transformer.training import average_run, last_checkpoints

    # absolute: see training_command
    model_dir = os.path.abspath(FLAGS.model_dir)
    paths = last_checkpoints(model_dir, FLAGS.average_last)
    averaged = []
    if FLAGS.average_last:
        last = f"{len(paths)} checkpoints" if len(paths) > 1 else "checkpoint"
        averaged.append(f"the last {last} (section 6.1)"
                        + (", all the run saved" if len(paths) < FLAGS.average_last else ""))
    if FLAGS.ema_decay:
        averaged.append(f"the moving average (decay {FLAGS.ema_decay:g})")
    header("average", " and ".join(averaged) or "none (--average_last=0)")
    if not FLAGS.average_last:
        if FLAGS.ema_decay:
            say(f"--average_last=0: using the moving average {summary['ema_checkpoint']}")
            return runs.EMA, [], f"moving average of the weights (decay {FLAGS.ema_decay:g})"
        say(f"--average_last=0: using the last checkpoint {summary['latest_checkpoint']}")
        return runs.LATEST, [summary["latest_checkpoint"]], "last checkpoint"
    if not summary.get("averaged_checkpoint"):  # the trainer averages unless a signal stopped it
        try:
            average_run(model_dir, FLAGS.average_last)
        except ValueError as error:
            fail("average", str(error))
    names = ", ".join(os.path.basename(p) for p in paths)
    say(f"averaged {len(paths)} checkpoint(s) ({names}) into "
        f"{os.path.join(FLAGS.model_dir, 'averaged', 'ckpt')}")
    weights = f"average of the last {last}"
    if not FLAGS.ema_decay:
        return runs.AVERAGED, paths, weights
    try:
        sources, references = data.read_pairs(config, "dev")
    except ValueError:
        say("no dev split to choose by: using the averaged checkpoints")
        return runs.AVERAGED, paths, weights
    scores = {name: dev_bleu(config, name, sources, references)
              for name in (runs.AVERAGED, runs.EMA)}
    chosen = max(scores, key=lambda name: (scores[name], name == runs.AVERAGED))
    line = (f"dev BLEU ({len(sources):,} sentences): averaged {scores[runs.AVERAGED]:.2f}, "
            f"moving average {scores[runs.EMA]:.2f}")
    say(f"{line}: using the {'averaged checkpoints' if chosen == runs.AVERAGED else 'moving average'}")
    if chosen == runs.EMA:
        weights = f"moving average of the weights (decay {FLAGS.ema_decay:g})"
    return chosen, paths, f"{weights}, chosen by {line}"


def dev_bleu(config, checkpoint, sources, references):
    """The sacreBLEU of ``checkpoint`` on the dev pairs: the whole split, as the first
    --dev_bleu_sentences of it (what training shows) can rank two close models either way."""
    from keras_transformer import evaluation, runs

    try:
        translator = runs.load_translator(FLAGS.model_dir, checkpoint)
    except ValueError as error:
        fail("average", str(error))
    result, _ = evaluation.translate_and_evaluate(translator.text_function(), sources, references,
                                                  config.target_language)
    return result.sacrebleu.score


# --- 4. evaluate ----------------------------------------------------------------------------------

def stage_evaluate(config, checkpoint):
    from keras_transformer import data, evaluation, runs

    split = FLAGS.eval_split
    try:
        sources, references = data.read_pairs(config, split, FLAGS.eval_limit)
    except (ValueError, OSError) as error:
        fail("evaluate", f"cannot read the {split} split: {error}")
    header("evaluate", f"beam {FLAGS.beam_size}, alpha {FLAGS.alpha} on {len(sources):,} held-out "
           f"{split} sentences")
    import tensorflow as tf

    try:
        translator = runs.load_translator(
            FLAGS.model_dir, checkpoint,
            decoding_flags.decoding_config())
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

    lang = config.target_language
    try:
        result, hypotheses = evaluation.translate_and_evaluate(
            translate, sources, references, lang, progress=progress)
        write_file("evaluate", os.path.join(FLAGS.model_dir, runs.HYPOTHESES_FILE.format(split=split)),
                   "".join(h.replace("\n", " ") + "\n" for h in hypotheses))
    except (ValueError, OSError, tf.errors.OpError) as error:
        fail("evaluate", str(error).splitlines()[0] if str(error) else type(error).__name__)
    seconds = time.monotonic() - started
    try:
        train_sources, train_targets = data.read_pairs(config, "train")
        floors = evaluation.floors(sources, references, list(zip(train_sources, train_targets)),
                                   lang)
    except (ValueError, OSError) as error:
        fail("evaluate", f"cannot compute the floors from the training split: {error}")
    for line in result.lines() + evaluation.floor_lines(result, floors):
        say(line)
    return translator, result, floors, sources, references, hypotheses, seconds


# --- 5. export ------------------------------------------------------------------------------------

def stage_export(translator):
    name = os.path.basename(os.path.normpath(os.path.abspath(FLAGS.model_dir)))
    header("export", f"SavedModels for TF Serving under {FLAGS.export_dir}/{name}")
    import tensorflow as tf

    from keras_transformer import export
    from keras_transformer.export.saved_model import exports_holding

    held = exports_holding(FLAGS.export_dir, name, translator.checkpoint)
    if held is not None:  # run again after a later stage failed
        say(f"{', '.join(held)} hold the weights of {translator.checkpoint} already; nothing "
            "exported")
        return list(held)
    try:
        paths = list(export.export_for_serving(translator, FLAGS.export_dir, name))
    except (OSError, ValueError, tf.errors.OpError) as error:
        message = getattr(error, "strerror", None) or str(error).splitlines()[0]
        fail("export", f"could not write the SavedModel under {FLAGS.export_dir}: {message}")
    for path in paths:
        say(f"wrote {path}")
    return paths


# --- 6. translate ---------------------------------------------------------------------------------

def sample_labels(config):
    """The labels of a sample's source and translation: the corpus' languages (``EN``, ``DE``),
    or ``SRC`` and ``OUT`` for one's own files, whose languages the flags do not say."""
    if config.target_language is None:
        return "SRC", "OUT"
    return "EN", config.target_language.upper()  # the English side is the source of every corpus


def stage_translate(path, sources, references, hypotheses, labels):
    header("translate", f"{min(FLAGS.samples, len(sources))} {FLAGS.eval_split} sentences through the exported "
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
    source, target = (f"{label:<4}" for label in labels)
    for sample in samples:
        say(f"  {source} {sample['source']}\n  {target} {sample['translation']}\n"
            f"  ref  {sample['reference']}")
    return samples


# --- report ---------------------------------------------------------------------------------------

def report(training_config, counts, summary, weights, averaged, result, floors, eval_seconds,
           paths, samples, labels, wall):
    from keras_transformer import evaluation, runs
    from keras_transformer.training import tensorboard_command

    split = FLAGS.eval_split
    lines = [
        "",
        "=" * 78,
        "quickstart report",
        "=" * 78,
        f"corpus      {FLAGS.dataset}: {counts.get('train', 0):,} train / {counts.get(split, 0):,} "
        f"{split} sentence pairs",
        f"training    preset {FLAGS.preset}, {summary['steps']:,} steps in "
        f"{summary['wall_seconds'] / 60:.1f} min, {summary['tokens_per_second']:,.0f} tokens/s "
        f"(source+target), final train loss {summary.get('final_train_loss') or float('nan'):.3f}"
        + (f", dev loss {summary['final_dev_loss']:.3f}" if summary.get("final_dev_loss") else ""),
        f"weights     {weights}",
        f"{split} BLEU{' ' * (7 - len(split))}(beam {FLAGS.beam_size}, alpha {FLAGS.alpha}, "
        f"{result.sentences:,} sentences, {eval_seconds:.0f} s)",
        *("  " + line for line in result.lines()),
        *("  " + line for line in evaluation.floor_lines(result, floors)),
        "  " + evaluation.verdict(result, floors),
        f"export      {paths[0]}",
        f"            {paths[1]} (token ids only, core TensorFlow ops)",
        "samples     (through the exported model)",
    ]
    source, target = (f"{label:<3}" for label in labels)
    for sample in samples:
        lines += [f"  {source} {sample['source']}", f"  {target} {sample['translation']}"]
    model_dir = FLAGS.model_dir
    lines += [
        f"total       {wall / 60:.1f} min wall clock, load average {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} CPU(s)",
        f"files       {os.path.join(model_dir, runs.REPORT_FILE)} (this report), "
        f"{os.path.join(model_dir, runs.TRAIN_LOG)} (the training log)",
        f"            disk: {_size(model_dir)} in {model_dir}, {_size(os.path.dirname(paths[0]))} in "
        f"{os.path.dirname(paths[0])}",
        f"TensorBoard {tensorboard_command(model_dir)}",
        f"next        {console.program_command('translate')} --saved_model={shlex.quote(paths[0])} "
        f"--text={shlex.quote('Good morning.' if labels[0] == 'EN' else samples[0]['source'])}",
        "            {}   # {} on this run".format(*train_more(summary["steps"])),
        f"paper       {console.program_command('wmt')} --dataset=wmt14_en_de --preset=base   "
        "# the paper's base model and recipe, on GPUs",
        "=" * 78,
    ]
    text = "\n".join(lines)
    say(text)
    record = {"dataset": FLAGS.dataset, "preset": FLAGS.preset, "eval_split": split,
              "steps": summary["steps"], "train_minutes": summary["wall_seconds"] / 60,
              "tokens_per_second": summary["tokens_per_second"],
              "final_train_loss": summary.get("final_train_loss"),
              "final_dev_loss": summary.get("final_dev_loss"),
              "sacrebleu": result.sacrebleu.score, "sacrebleu_signature": result.sacrebleu.signature,
              "tokenized_bleu": result.tokenized.score,
              "chrf": result.chrf.score, "chrf_signature": result.chrf.signature,
              "test_sentences": result.sentences,
              "floors": floors.to_dict(), "test_sources_in_training": floors.sources_in_training,
              "verdict": evaluation.verdict(result, floors),
              "weights": weights, "averaged_checkpoints": averaged, "export": paths, "samples": samples,
              "wall_minutes": wall / 60, "load_average": os.getloadavg(),
              "cpus": os.cpu_count(), "command": training_command(training_config),
              "latest_checkpoint": os.path.basename(summary["latest_checkpoint"] or ""),
              "text": text}
    write_file("translate", os.path.join(FLAGS.model_dir, runs.REPORT_FILE),
               json.dumps(record, indent=1))


def this_command(*extra) -> str:
    """The command line that ran this program (pasteable), with ``extra`` flags (``--name`` or
    ``--name=value``) in place of those given (``--name=value`` or ``--name value``)."""
    valued = {flag.split("=")[0]: "=" in flag for flag in extra}
    given, args = [], iter(sys.argv[1:])
    for arg in args:
        name = arg.split("=")[0]
        if name not in valued:
            given.append(arg)
        elif valued[name] and "=" not in arg:
            next(args, None)  # its value, the next argument
    return " ".join([console.program_command("quickstart"), *map(shlex.quote, given), *extra])


def minutes(count, more=""):
    """``1 minute``, ``1.5 more minutes``."""
    return f"{count:g} {more}minute{'' if count == 1 else 's'}"


def train_more(steps):
    """(the command that trains this run of ``steps`` updates further, what it adds): with
    --train_steps, which counts all of a run's updates (as trainers.wmt's), as many again."""
    if not FLAGS.train_steps:
        return this_command("--train_more"), minutes(FLAGS.train_minutes, "more ")
    return (this_command(f"--train_steps={steps + FLAGS.train_steps}", "--train_more"),
            f"{FLAGS.train_steps:,} more updates"
            + (f" (at most {minutes(FLAGS.train_minutes)})" if FLAGS.train_minutes else ""))


def check_train_more():
    """--train_more with a --train_steps that the run has already made would only evaluate and
    export the same weights again: refused in one line, before anything runs."""
    import tensorflow as tf

    from keras_transformer.training import checkpoint_step

    latest = tf.train.latest_checkpoint(FLAGS.model_dir)
    steps = checkpoint_step(latest) if latest else 0
    if FLAGS.train_steps and steps >= FLAGS.train_steps:
        command, more = train_more(steps)
        raise app.UsageError(
            f"--train_more: the run in {FLAGS.model_dir} has made {steps:,} updates, and "
            f"--train_steps={FLAGS.train_steps} counts all of a run's updates; for {more}: "
            f"{command}")


def _size(path) -> str:
    """The disk space of a folder, e.g. ``23.4 MB``."""
    total = 0
    for folder, _, names in os.walk(path):
        for name in names:
            try:
                total += os.path.getsize(os.path.join(folder, name))
            except OSError:
                pass
    return f"{total / 1e6:,.1f} MB"


def finished_report():
    """The report of a run that finished (its report written after its latest checkpoint), or
    None: then the run is new, was interrupted, or --train_more / --overwrite ask for training."""
    from keras_transformer import runs

    path = os.path.join(FLAGS.model_dir, runs.REPORT_FILE)
    if FLAGS.train_more or FLAGS.overwrite or not os.path.isfile(path):
        return None
    import tensorflow as tf

    try:
        with open(path, encoding="utf-8") as stream:
            record = json.load(stream)
    except (OSError, ValueError):
        return None  # unreadable: run the stages again, which rewrite it
    latest = tf.train.latest_checkpoint(FLAGS.model_dir)
    if not record.get("text") or not latest or os.path.basename(latest) != record.get(
            "latest_checkpoint"):
        return None
    return record["text"]


def main(argv):
    started = time.monotonic()
    # Every path is checked first: a typo or a read-only disk is found now, not after training.
    checks.output_dir("model_dir", FLAGS.model_dir)
    checks.output_dir("export_dir", FLAGS.export_dir)
    config = data_flags.data_config(xla=FLAGS.xla)  # the corpus checked before TensorFlow starts
    recipe = choose_recipe()  # asks TensorFlow for the precision; may keep a run's vocabulary size
    config = dataclasses.replace(config, vocab_size=FLAGS.vocab_size)
    training_flags.check(None if FLAGS.overwrite else FLAGS.model_dir, config)
    training_config = training_flags.training_config(os.path.abspath(FLAGS.model_dir),
                                                     keep_only_the_averaged=True)
    strategy = training_flags.make_strategy()  # before TensorFlow runs anything; seeds too
    text = finished_report()
    if text is not None:
        say(f"{FLAGS.model_dir} holds a finished run; its report (its \"next\" line trains it "
            "further, --overwrite starts over):")
        say(text)
        return
    if FLAGS.train_more and not FLAGS.overwrite:  # --overwrite starts the run over
        check_train_more()
    say(recipe)
    config, counts = stage_data(config)
    summary = stage_train(config, training_config, strategy)
    checkpoint, averaged, weights = stage_average(config, summary)
    translator, result, floors, sources, references, hypotheses, eval_seconds = stage_evaluate(
        config, checkpoint)
    paths = stage_export(translator)
    labels = sample_labels(config)
    samples = stage_translate(paths[0], sources, references, hypotheses, labels)
    report(training_config, counts, summary, weights, averaged, result, floors, eval_seconds,
           paths, samples, labels, time.monotonic() - started)


if __name__ == "__main__":
    console.run(main)
