"""The main job's recipe, measured on dev: one training run per setting, at one CPU kind's budget.

    python -m benchmarks.recipe --kind=avx2 --rows=mini,dropout_0.2 --seeds=1,2
    python -m benchmarks.recipe --kind=bf16 --rows=d_model_192 --row_updates=d_model_192=4100
    python -m benchmarks.recipe --kind=bf16 --rows=d_model_192,layers_4 --costs_only
    python -m benchmarks.recipe --kind=avx2 --rows=average_last_10,interval_x2 --seeds=1,2
    python -m benchmarks.recipe --kind=avx2 --rows=warmup_1000+token_budget_1024 --seeds=1,2

A row is ``python -m trainers.quickstart --eval_split=dev`` with the row's flags on top of the
sweep's baseline (``BASELINE``: the quickstart's defaults when the sweep began), in a fresh
process, one after another (two at once would share the cores). It trains for the updates the
kind makes in 20 minutes (``KINDS``), in the kind's precision: a step limit, so a busy machine or
another CPU kind trains the same updates (the AVX2 kind is emulated on an AVX-512 machine this
way, the bf16 kind on an AVX2 one; where bfloat16 is slow, as on an AVX2 CPU,
``--extra_flags=--mixed_precision=float32`` trains the bf16 kind's updates in float32, and the
table says so). Checkpoints are saved every 1/40 of the updates (the quickstart's 30 s of 20
minutes), by steps for the same reason. A row that changes the cost of a step (model size, batch, vocabulary, length) makes a different
number of updates in 20 minutes: mini's updates on the kind times mini's seconds per update over
the row's, both timed here in the kind's precision on their own real batches of the corpus, in
turns (``step_costs``), and recorded in OUTPUT_DIR/step_costs.json; or given with --row_updates,
e.g. the updates of the row's own 20 minutes on that kind (``--kind=here``: wall clock on this
machine, its updates recorded). Two rows training side by side would disturb each other's timing,
so ``--costs_only`` times the rows alone, once, into OUTPUT_DIR/step_costs.json, which later sweeps
with the same precision and --extra_flags use.

Rows joined by + combine their flags (the winners of single rows, put together); such a row costs
what its cost-changing parts cost together, so one recorded timing serves every combination with
the same parts.

A selection row (``SELECTIONS``: a longer average, the last checkpoint, checkpoints further apart)
trains nothing: it averages other checkpoints of mini's run of the same seed, kind and
--extra_flags, kept for it in RUNS_DIR (mini keeps enough checkpoints), and scores them on dev
as the quickstart scores its average; mini is trained first when its run is not there. So such a
row differs from mini in the choice of weights only.

The score is dev sacreBLEU (beam 4, alpha 0.6, the weights the quickstart picks on dev) beside the
floors on the same sentences (copy the source; a TF-IDF translation memory). Test is never looked
at. Records merge into OUTPUT_DIR/recipe.json (one per row, seed and kind) and OUTPUT_DIR/recipe.md.
"""

import copy
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time

from absl import flags

from benchmarks import common
# the rows' model, corpus and search flags parse here
from trainers import data_flags, decoding_flags, model_flags, training_flags  # noqa: F401

# The main job's updates in 20 minutes with the quickstart's defaults, per CPU kind, and the
# precision --mixed_precision=auto picks there (docs/results.md, "The main job").
KINDS = {"bf16": dict(updates=6725, precision="bfloat16", label="AVX-512 + AVX512-BF16"),
         "avx2": dict(updates=3429, precision="float32", label="AVX2 only")}
# Every row is measured against one mini: the quickstart's defaults when the sweep began (main
# b709fd1). Its winners, the warm-up of 1,000 and then the vocabulary of 4,000, then 8,000, have
# since become defaults; rows keep the old values, so that they still compare to the same mini, and
# warmup_1000+vocab_8000+ROW measures a row on today's defaults (with d_model_192 on the bf16
# kind). Records carry the baseline they trained on.
BASELINE = "--warmup_steps=200 --vocab_size=2000"
# name -> (flags on top of BASELINE, what the row asks, whether it changes a step's cost)
ROWS = {
    "mini": ("", "the baseline: the quickstart's defaults of b709fd1", False),
    "d_model_192": ("--d_model=192 --d_ff=768", "wider", True),
    "d_model_256": ("--d_model=256 --d_ff=1024", "wider", True),
    "layers_4": ("--num_layers=4", "deeper (4+4)", True),
    "layers_6": ("--num_layers=6", "deeper (6+6)", True),
    "heads_2": ("--num_heads=2", "h", True),
    "heads_8": ("--num_heads=8", "h", True),
    "dropout_0.2": ("--dropout_rate=0.2", "P_drop", False),
    "dropout_0": ("--dropout_rate=0", "P_drop (none: 0.2 underfits more)", False),
    "label_smoothing_0": ("--label_smoothing=0", "epsilon_ls (none: 0.2 did worse)", False),
    "label_smoothing_0.2": ("--label_smoothing=0.2", "epsilon_ls", False),
    "label_smoothing_0.3": ("--label_smoothing=0.3", "epsilon_ls (Araabi & Monz 2020)", False),
    "word_dropout_0.1": ("--source_word_dropout=0.1 --target_word_dropout=0.1",
                         "Sennrich & Zhang 2019", False),
    "subword_sampling_0.1": ("--subword_sampling=0.1", "BPE-dropout (Provilkov et al. 2020)", False),
    "subword_sampling_0.3": ("--subword_sampling=0.3", "BPE-dropout (Provilkov et al. 2020)", False),
    "subword_sampling_0.5": ("--subword_sampling=0.5", "BPE-dropout (Provilkov et al. 2020)", False),
    "layerdrop_0.1": ("--decoder_layerdrop=0.1", "decoder LayerDrop (Fan et al. 2020)", True),
    "layerdrop_0.2": ("--decoder_layerdrop=0.2", "decoder LayerDrop (Fan et al. 2020)", True),
    "token_budget_1024": ("--token_budget=1024", "more updates, fewer tokens each", True),
    "token_budget_4096": ("--token_budget=4096", "fewer updates, more tokens each", True),
    "warmup_100": ("--warmup_steps=100", "warm-up", False),
    "warmup_500": ("--warmup_steps=500", "warm-up", False),
    "warmup_1000": ("--warmup_steps=1000", "warm-up", False),
    "warmup_2000": ("--warmup_steps=2000", "warm-up (beyond 1,000, the best of the first rows)", False),
    "lr_scale_0.5": ("--learning_rate_scale=0.5", "Eq. (3) scaled", False),
    "lr_scale_2": ("--learning_rate_scale=2", "Eq. (3) scaled", False),
    "vocab_1000": ("--vocab_size=1000", "vocabulary", True),
    "vocab_4000": ("--vocab_size=4000", "vocabulary", True),
    "vocab_8000": ("--vocab_size=8000", "vocabulary", True),
    "vocab_16000": ("--vocab_size=16000", "vocabulary (beyond 8,000, the largest of the first rows)", True),
    "max_length_48": ("--max_length=48", "max length", True),
    "max_length_96": ("--max_length=96", "max length", True),
}
# Rows that choose other weights of mini's own run instead of training: name -> (every how many of
# its checkpoints, newest first, how many, the flags a trained row would give, what it asks). The
# training is mini's, so the comparison is paired: only the choice of weights differs.
SELECTIONS = {
    "average_last_10": (1, 10, "--average_last=10", "selection: a longer average"),
    "last_checkpoint": (1, 1, "--average_last=1", "selection: the last checkpoint"),
    "interval_x2": (2, 5, "(every 2nd of mini's checkpoints)",
                    "selection: 5 checkpoints, twice the interval apart"),
    "interval_x4": (4, 5, "(every 4th of mini's checkpoints)",
                    "selection: 5 checkpoints, 4x the interval apart"),
}
# mini keeps enough of its checkpoints for every selection (the trainer keeps the newest)
KEEP_FOR_SELECTIONS = max(every * (count - 1) + 1 for every, count, _, _ in SELECTIONS.values())
MINUTES = 20.0


def parts(name):
    """The ROWS a row combines: ``warmup_1000+token_budget_1024`` is both rows' flags at once."""
    return name.split("+")


def is_row(name):
    return all(part in ROWS for part in parts(name))


def row_flags(name):
    return " ".join(ROWS[part][0] for part in parts(name) if ROWS[part][0])


def cost_row(name):
    """The row whose step cost ``name`` has: its parts that change the cost (None: mini's cost).
    A combination costs what its cost-changing parts cost together, so the timing of e.g.
    token_budget_1024 serves warmup_1000+token_budget_1024 too."""
    return "+".join(part for part in parts(name) if ROWS[part][2]) or None

flags.DEFINE_enum("kind", "avx2", [*KINDS, "here"], "Whose 20 minutes: the updates and precision "
                  "of a CPU kind (KINDS), or `here`: 20 minutes of wall clock on this machine.")
flags.DEFINE_list("rows", ["mini"], f"Rows to run, of: {', '.join([*ROWS, *SELECTIONS])}; "
                  "or rows of ROWS joined by + (their flags together).")
flags.DEFINE_list("seeds", ["1"], "Seeds of each row (weights, dropout, data order).")
flags.DEFINE_list("row_updates", [], "ROW=N: the updates the kind makes with ROW in 20 minutes "
                  "(default: mini's, scaled by the step costs in step_costs.json, timed first if "
                  "missing).")
flags.DEFINE_integer("cost_batches", 8, "Real batches each row's step is timed on.", lower_bound=1)
flags.DEFINE_bool("costs_only", False, "Only time the step costs of --rows that change them "
                  "(and mini's), in the kind's precision, and record them in "
                  "OUTPUT_DIR/step_costs.json, where later sweeps find them: timed alone once, "
                  "rows can then train side by side.")
flags.DEFINE_string("output_dir", os.path.join("benchmarks", "results"),
                    "Where recipe.json and recipe.md go.")
flags.DEFINE_string("runs_dir", os.path.join("runs", "recipe"), "Where the rows train.")
flags.DEFINE_string("extra_flags", "", "trainers.quickstart flags added to every row, one string.")
flags.DEFINE_bool("keep_runs", False, "Keep the rows' run folders after scoring.")
flags.register_validator("rows", lambda rows: all(is_row(r) or r in SELECTIONS for r in rows),
                         f"--rows: each must be one of {', '.join([*ROWS, *SELECTIONS])}, or "
                         "rows of the first kind joined by +.")
flags.register_validator(
    "row_updates", lambda items: all(
        is_row(row) and n.isdigit() and int(n) > 0
        for row, _, n in (item.partition("=") for item in items)),
    "--row_updates: each must be ROW=N, a row of --rows' list and a positive number of updates.")
flags.register_multi_flags_validator(
    ["costs_only", "kind"], lambda values: not values["costs_only"] or values["kind"] in KINDS,
    "--costs_only times a CPU kind's precision: give --kind=" + " or --kind=".join(KINDS) + ".")
FLAGS = flags.FLAGS
COLUMNS = ["row", "flags", "updates", "dev sacreBLEU (per seed)", "dev loss", "copy", "memory",
           "what it asks"]


def flag_values(text, fields):
    """The flags of ``text`` that name one of ``fields`` as {name: value}, parsed by the trainer's
    own flag definitions (typed and checked as it takes them); other flags are left out."""
    parsed = copy.deepcopy(FLAGS)
    parsed.unparse_flags()  # the defaults again: only what ``text`` gives counts as present
    parsed(["recipe", *shlex.split(text)], known_only=True)
    return {name: parsed[name].value for name in fields
            if name in parsed and parsed[name].present}


def step_costs(names, precision):
    """Seconds per update of each row's model on its own real batches of the main job's corpus
    (its vocabulary, token budget and length limit), timed here in ``precision``: a first pass
    traces, then three passes in turns over the rows, so a drift of the machine's load falls on
    all of them alike; the fastest pass (a slower one had other processes on its cores)."""
    import dataclasses

    import keras_transformer as kt
    from keras_transformer import data
    from keras_transformer.training import speed

    corpus_fields = {field.name for field in dataclasses.fields(data.DataConfig)}
    # the vocabulary's size and the length limit are the corpus' (the model's follow from it)
    model_fields = ({field.name for field in dataclasses.fields(kt.TransformerConfig)}
                    - corpus_fields)
    fields = corpus_fields | model_fields | {"preset"}
    steps = {}
    for name in names:
        values = {**common.MAIN_JOB, **flag_values(BASELINE, fields),
                  **flag_values(FLAGS.extra_flags, fields), **flag_values(row_flags(name), fields)}
        corpus = {k: v for k, v in values.items() if k in corpus_fields}
        model = {k: v for k, v in values.items() if k in model_fields}
        config = data_flags.data_config(xla=False, **corpus)
        tokenizer, batches, _ = common.real_batches(config, FLAGS.cost_batches)
        _, _, step = common.train_step(values["preset"], precision, tokenizer.vocab_size,
                                       overrides=model)
        steps[name] = step, batches
        for batch in batches:
            float(step.step_on_batches((batch,))["loss_sum"])
    passes = {name: [] for name in names}
    for _ in range(3):
        for name, (step, batches) in steps.items():
            passes[name].append(speed.timed_pass(step, batches)[0])
    return {name: min(times) for name, times in passes.items()}


def costs_path():
    return os.path.join(FLAGS.output_dir, "step_costs.json")


def recorded_costs(precision):
    """{row: (mini's and the row's seconds per update, the machine record of when and where)} of
    step_costs.json, timed in ``precision`` with today's --extra_flags and --cost_batches (the
    latest timing of each row)."""
    timings = common.read_json(costs_path(), {"timings": []})["timings"]
    return {row: ((timing["seconds_per_update"]["mini"], seconds), timing["machine"])
            for timing in timings
            if (timing["precision"], timing["extra_flags"], timing["cost_batches"])
            == (precision, FLAGS.extra_flags, FLAGS.cost_batches)
            for row, seconds in timing["seconds_per_update"].items() if row != "mini"}


def record_costs(names, precision):
    """Times the rows of ``names`` beside mini in ``precision`` and appends the timing to
    step_costs.json."""
    timings = common.read_json(costs_path(), {"timings": []})["timings"]
    timings.append({"precision": precision, "extra_flags": FLAGS.extra_flags,
                    "cost_batches": FLAGS.cost_batches,
                    "seconds_per_update": step_costs(["mini", *names], precision),
                    "machine": common.machine()})
    common.write_json(costs_path(), {"timings": timings})


def budgets(names):
    """{row: (its quickstart flags for the budget of --kind, its updates, where they come from)};
    updates None: 20 minutes of this machine's wall clock. Rows that change the step cost and have
    no recorded timing are timed first (``record_costs``)."""
    if FLAGS.kind == "here":
        return {name: ([f"--train_minutes={MINUTES:g}"], None, "20 minutes here") for name in names}
    kind = KINDS[FLAGS.kind]
    given = {row: int(n) for row, n in (item.split("=", 1) for item in FLAGS.row_updates)}
    recorded = recorded_costs(kind["precision"])
    untimed = sorted({cost_row(name) for name in names
                      if name not in given and cost_row(name) not in recorded.keys() | {None}})
    if untimed:
        record_costs(untimed, kind["precision"])
        recorded = recorded_costs(kind["precision"])
    result = {}
    for name in names:
        if name in given:
            updates, source = given[name], "given (--row_updates)"
        elif cost_row(name):
            (mini, seconds), where = recorded[cost_row(name)]
            updates = round(kind["updates"] * mini / seconds)
            source = (f"the kind's mini updates x {mini:.3f} s / {seconds:.3f} s per update "
                      f"(mini / {cost_row(name)}, timed in {kind['precision']} on "
                      f"{where['date']}, {os.path.basename(costs_path())})")
        else:
            updates, source = kind["updates"], "the kind's mini updates (the same step cost)"
        result[name] = ([f"--train_steps={updates}", "--train_minutes=0",
                         f"--mixed_precision={kind['precision']}",
                         f"--checkpoint_every_steps={max(1, updates // 40)}",
                         "--checkpoint_every_minutes=0"], updates, source)
    return result


def run_dir_of(name, seed):
    return os.path.join(FLAGS.runs_dir, f"{name}-{FLAGS.kind}-seed{seed}")


def row_arguments(name, seed, limits):
    """The quickstart's arguments for row ``name``: the preset given, so that every row changes
    mini on either kind, not the kind's recipe (trainers.quickstart.KIND_RECIPES)."""
    run_dir = run_dir_of(name, seed)
    kept = [f"--keep_checkpoints={KEEP_FOR_SELECTIONS}"] if name == "mini" else []
    return ["--eval_split=dev", "--overwrite", f"--model_dir={run_dir}",
            f"--export_dir={os.path.join(run_dir, 'export')}", f"--seed={seed}", "--samples=1",
            *limits, *kept, "--preset=mini", *shlex.split(BASELINE),
            *shlex.split(FLAGS.extra_flags), *shlex.split(row_flags(name))]


def run_row(name, seed, limits, updates, source, keep=False):
    """Trains and scores one row on dev; returns its record. Its run folder is deleted afterwards
    unless --keep_runs or ``keep``; mini's keeps the checkpoints the selections choose from."""
    run_dir = run_dir_of(name, seed)
    command = [sys.executable, "-m", "trainers.quickstart", *row_arguments(name, seed, limits)]
    print(f"recipe: {name}, seed {seed}: {shlex.join(command[1:])}", flush=True)
    started = time.monotonic()
    completed = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, errors="replace")
    if completed.returncode != 0:
        print(completed.stdout[-3000:], flush=True)
        raise ValueError(f"row {name} (seed {seed}) failed with status {completed.returncode} "
                         "(its output's end is above); rows before it are recorded")
    from keras_transformer import runs

    report = common.read_json(os.path.join(run_dir, runs.REPORT_FILE))
    if updates is not None and report["steps"] != updates:
        raise ValueError(f"row {name} made {report['steps']} updates, not {updates}")
    with open(os.path.join(run_dir, "train.log"), encoding="utf-8") as stream:
        # the dev evaluations' progress lines (training/callbacks.py): the row's learning curve
        curve = [[int(step), float(loss), float(bleu)] for step, loss, bleu in re.findall(
            r"step (\d+) \| dev loss ([\d.]+) .*\| dev BLEU ([\d.]+)", stream.read())]
    if not (FLAGS.keep_runs or keep):
        shutil.rmtree(run_dir, ignore_errors=True)
    kind = KINDS.get(FLAGS.kind, dict(label=common.cpu_model()))["label"]
    return {"row": name, "flags": row_flags(name),
            "asks": " + ".join(ROWS[part][1] for part in parts(name)), "seed": int(seed),
            "kind": FLAGS.kind, "kind_label": kind, "emulated": FLAGS.kind != "here",
            "updates_from": source,
            "baseline": BASELINE, "extra_flags": FLAGS.extra_flags, "updates": report["steps"],
            "train_minutes": report["train_minutes"], "dev_sacrebleu": report["sacrebleu"],
            "dev_chrf": report["chrf"], "final_dev_loss": report["final_dev_loss"],
            "dev_curve": curve,
            "weights": report["weights"], "floors": report["floors"],
            "dev_sentences": report["test_sentences"],
            "wall_minutes": (time.monotonic() - started) / 60, "machine": common.machine()}


def kept_mini(seed, records):
    """mini's record of ``seed`` (this kind and --extra_flags) if its run folder is still there
    with the checkpoints the selections need, else None."""
    from keras_transformer.training import checkpoints

    record = next((r for r in records if key(r) == ("mini", int(seed), FLAGS.kind, BASELINE,
                                                    FLAGS.extra_flags)), None)
    run_dir = run_dir_of("mini", seed)
    if record is None or not os.path.isdir(run_dir):
        return None
    return record if len(checkpoints.checkpoint_paths(run_dir)) >= KEEP_FOR_SELECTIONS else None


def select_row(name, mini):
    """Scores on dev the weights selection ``name`` chooses among the checkpoints of mini's kept
    run (record ``mini``), averaged as the trainer averages (section 6.1), decoded as the
    quickstart decoded mini (beam 4, alpha 0.6, or the search flags of --extra_flags); returns
    its record, the rest of it mini's."""
    from keras_transformer import data, evaluation, runs
    from keras_transformer.inference import DecodingConfig
    from keras_transformer.training import average_run, checkpoints

    every, count, equivalent, asks = SELECTIONS[name]
    run_dir = run_dir_of("mini", mini["seed"])
    chosen = checkpoints.checkpoint_paths(run_dir)[::-1][::every][:count][::-1]
    print(f"recipe: {name}, seed {mini['seed']}: averaging "
          f"{', '.join(os.path.basename(path) for path in chosen)} of {run_dir}", flush=True)
    started = time.monotonic()
    prefix = average_run(run_dir, checkpoints=chosen,
                         output=os.path.join(run_dir, "selections", name, "ckpt"))
    search = DecodingConfig(**flag_values(FLAGS.extra_flags, decoding_flags.NAMES))
    translator = runs.load_translator(run_dir, prefix, search)
    sources, references = data.read_pairs(translator.data_config, "dev")
    result, _ = evaluation.translate_and_evaluate(
        translator.text_function(), sources, references, translator.data_config.target_language,
        batch_size=64)
    return {**mini, "row": name, "flags": equivalent, "asks": asks,
            "updates_from": f"mini's run: {len(chosen)} of its checkpoints "
                            f"({', '.join(os.path.basename(path) for path in chosen)})",
            "dev_sacrebleu": result.sacrebleu.score, "dev_chrf": result.chrf.score,
            "weights": f"average of {len(chosen)} checkpoints, every {every} of mini's",
            "wall_minutes": (time.monotonic() - started) / 60, "machine": common.machine()}


def key(record):
    return record["row"], record["seed"], record["kind"], record["baseline"], record["extra_flags"]


def machines(rows):
    """"machine: CPU" of a table's rows ({row: records}); an emulated kind's rows may have trained
    on several machines (a step limit trains the same updates anywhere): the CPU most rows trained on,
    then each other one with its rows."""
    cpus = {}
    for name, group in rows.items():
        for record in group:
            cpus.setdefault(record["machine"]["cpu"], set()).add(name)
    most, *others = sorted(cpus, key=lambda cpu: -len(cpus[cpu]))
    return "; ".join([f"machine: {most}"] + [
        f"{', '.join(sorted(cpus[cpu]))} on {cpu}" for cpu in others])


def table(records):
    """One table per kind (and baseline and extra flags; `here` per CPU), best median dev score
    first."""
    groups = {}
    for record in records:
        cpu = "" if record["emulated"] else record["machine"]["cpu"]
        groups.setdefault((record["kind"], record["baseline"], record["extra_flags"], cpu),
                          {}).setdefault(record["row"], []).append(record)
    lines = ["# The main job's recipe on dev (`python -m benchmarks.recipe`)", "",
             "Dev sacreBLEU per seed, beside copying the source and a translation memory on the "
             "same dev sentences. Test is never scored here."]
    for (kind, baseline, extra, _), rows in sorted(groups.items()):
        first = next(iter(rows.values()))[0]
        how = "20 minutes of wall clock"
        if first["emulated"]:
            given = {r.get("updates_from", "").startswith("given") for g in rows.values() for r in g}
            # --extra_flags may train a kind's updates in another precision than the kind's own
            precision = flag_values(extra, ["mixed_precision"]).get("mixed_precision",
                                                                       KINDS[kind]["precision"])
            how = f"emulated by updates in {precision}: " + (
                "the updates given with --row_updates" if given == {True} else
                f"mini's {KINDS[kind]['updates']:,}, scaled by the timed step costs for rows that "
                "change them" + ("; some rows' updates given with --row_updates" if True in given
                                 else ""))
        lines += ["", f"## {first['kind_label']} ({how}; {machines(rows)}), "
                  f"rows on the quickstart's defaults with `{' '.join(filter(None, (baseline, extra)))}`",
                  ""]
        ordered = sorted(rows.items(), key=lambda item: -statistics.median(
            r["dev_sacrebleu"] for r in item[1]))
        cells = [{"row": name, "flags": f"`{group[0]['flags']}`" if group[0]["flags"] else "",
                  "updates": " / ".join(f"{r['updates']:,}" for r in group),
                  "dev sacreBLEU (per seed)": " / ".join(
                      f"{r['dev_sacrebleu']:.2f} (seed {r['seed']})" for r in group),
                  "dev loss": " / ".join(f"{r['final_dev_loss']:.3f}" for r in group),
                  "copy": f"{group[0]['floors']['copy']['sacrebleu']:.2f}",
                  "memory": f"{group[0]['floors']['translation_memory']['sacrebleu']:.2f}",
                  "what it asks": group[0]["asks"]} for name, group in ordered]
        lines.append(common.markdown(cells, COLUMNS))
    return "\n".join(lines) + "\n"


def main(argv):
    from keras_transformer import writing

    if FLAGS.costs_only:
        record_costs(sorted({cost_row(name) for name in FLAGS.rows if is_row(name)} - {None}),
                     KINDS[FLAGS.kind]["precision"])
    path = os.path.join(FLAGS.output_dir, "recipe.json")
    records = common.read_json(path, {"rows": []})["rows"]
    selections = [name for name in FLAGS.rows if name in SELECTIONS]
    trained = [name for name in FLAGS.rows if is_row(name)]
    # a seed whose mini run is not kept trains mini (first) for the selections to choose from
    retrain = {seed for seed in FLAGS.seeds if selections and not kept_mini(seed, records)}
    if retrain and "mini" not in trained:
        trained.insert(0, "mini")
    planned = budgets(trained)  # every row's budget is known before the first trains
    for name, (_, updates, source) in planned.items():
        print(f"recipe: {name}: {f'{updates:,} updates' if updates else '20 minutes'} ({source})",
              flush=True)
    if FLAGS.costs_only:
        print(f"recipe: wrote {common.shown_path(costs_path())}")
        return
    for name in trained + selections:
        for seed in FLAGS.seeds:
            if name in SELECTIONS:
                record = select_row(name, kept_mini(seed, records))
            elif name == "mini" and seed not in retrain and "mini" not in FLAGS.rows:
                continue  # kept from an earlier sweep
            else:
                keep = name == "mini" and bool(selections)  # for the selections after it
                record = run_row(name, seed, *planned[name], keep=keep)
            records = [r for r in records if key(r) != key(record)] + [record]
            common.write_json(path, {"rows": records})
            writing.write_file(os.path.join(FLAGS.output_dir, "recipe.md"), table(records))
            print(f"recipe: {name}, seed {seed}: {record['updates']:,} updates, dev sacreBLEU "
                  f"{record['dev_sacrebleu']:.2f} (copy {record['floors']['copy']['sacrebleu']:.2f}"
                  f", memory {record['floors']['translation_memory']['sacrebleu']:.2f}); wrote "
                  f"{common.shown_path(path)}", flush=True)


if __name__ == "__main__":
    from trainers import console

    console.run(main)
