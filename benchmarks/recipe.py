"""The main job's recipe, measured: one training run per setting at the same budget, scored on dev.

    python -m benchmarks.recipe                                   # every row, 20 min each
    python -m benchmarks.recipe --rows=mini,before --seeds=1,2    # some rows, two seeds
    python -m benchmarks.recipe --train_minutes=8 --mixed_precision=float32   # AVX2 emulation

Each row is ``python -m trainers.quickstart --eval_split=dev`` with the row's flags on top of the
quickstart's defaults, in a fresh process, one after another (never two at once: they would share
the cores). A row's result is its dev sacreBLEU (beam 4, alpha 0.6, through the averaged weights)
beside the two floors on the same dev sentences (copy the source; a TF-IDF translation memory),
with the updates it made and its tokens/s: at a fixed budget, throughput decides how many updates
fit. The test split is never looked at here. The quickstart's defaults did not come from this
table: they rest on single runs of earlier probes (docs/results.md), and its rows have not all
been run.

Writes OUTPUT_DIR/recipe.json (merged with the rows of earlier runs, one entry per row, seed,
budget and precision) and OUTPUT_DIR/recipe.md. The run folders are deleted after scoring
unless --keep_runs.
"""

import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time

from absl import app, flags

from benchmarks import common

# name -> (flags on top of the quickstart defaults, why the row is there)
ROWS = {
    "before": ("--preset=small --dropout_rate=0.3",
               "the quickstart recipe before this table (preset small, dropout 0.3)"),
    "mini": ("", "the quickstart defaults (preset mini: 3+3 layers, d_model 128, d_ff 512)"),
    "dropout_0.0": ("--dropout_rate=0.0", "P_drop"),
    "dropout_0.2": ("--dropout_rate=0.2", "P_drop"),
    "label_smoothing_0.4": ("--label_smoothing=0.4",
                            "Araabi & Monz 2020: 0.4-0.6 at 5k-80k sentences"),
    "word_dropout_0.1": ("--source_word_dropout=0.1 --target_word_dropout=0.1",
                         "Sennrich & Zhang 2019: +2.8 BLEU at 100k words"),
    "subword_sampling_0.1": ("--subword_sampling=0.1",
                             "BPE-dropout (Provilkov et al. 2020, up to +2.3), Kudo 2018"),
    "layerdrop_0.2": ("--decoder_layerdrop=0.2",
                      "Fan et al. 2019; +1.6 BLEU in Araabi & Monz 2020"),
    "attention_relu_dropout_0.1": ("--attention_dropout=0.1 --relu_dropout=0.1",
                                   "Araabi & Monz 2020"),
    "heads_2": ("--num_heads=2", "h"),
    "heads_8": ("--num_heads=8", "h"),
    "vocab_1000": ("--vocab_size=1000", "Sennrich & Zhang 2019: smaller vocabularies at 100k words"),
    "vocab_4000": ("--vocab_size=4000", "vocabulary size"),
    "vocab_8000": ("--vocab_size=8000", "vocabulary size"),
    "d_model_96": ("--d_model=96 --d_ff=384", "narrower: more updates"),
    "d_model_192": ("--d_model=192 --d_ff=768", "wider: fewer updates"),
    "layers_2": ("--num_layers=2", "shallower"),
    "layers_4": ("--num_layers=4", "deeper"),
    "token_budget_1024": ("--token_budget=1024", "twice the updates, half the tokens each"),
    "token_budget_4096": ("--token_budget=4096", "half the updates, twice the tokens each"),
    "last_checkpoint": ("--average_last=0", "checkpoint selection: the last, not an average"),
    "average_last_10": ("--average_last=10 --keep_checkpoints=10",
                        "checkpoint selection: a longer average (section 6.1 averages 5)"),
}

flags.DEFINE_list("rows", list(ROWS), f"Rows to run, of: {', '.join(ROWS)}.")
flags.DEFINE_list("seeds", ["1"], "Seeds of each row (weight initialisation, dropout, data order).")
flags.DEFINE_float("train_minutes", 20.0, "Training budget of every row.", lower_bound=0.01)
flags.DEFINE_enum("mixed_precision", "auto", ["auto", "float32", "bfloat16"],
                  "Training precision of every row. float32 with --train_minutes=8 on a CPU with "
                  "AVX512-BF16 emulates the 20 minutes of a CPU with AVX2 only.")
flags.DEFINE_string("output_dir", os.path.join("benchmarks", "results"),
                    "Where recipe.json and recipe.md go.")
flags.DEFINE_string("runs_dir", os.path.join("runs", "recipe"), "Where the row runs train.")
flags.DEFINE_string("extra_flags", "", "Flags of trainers.quickstart added to every row, as one "
                    "string (e.g. '--libreoffice_help_dir=DIR').")
flags.DEFINE_bool("keep_runs", False, "Keep the rows' run folders (checkpoints) after scoring.")
flags.register_validator("rows", lambda rows: all(r in ROWS for r in rows),
                         f"--rows: each must be one of {', '.join(ROWS)}.")

FLAGS = flags.FLAGS
COLUMNS = ["row", "flags", "seed", "updates", "tokens/s", "dev sacreBLEU", "copy", "memory",
           "why"]


def run_row(name, seed):
    """Trains and scores one row; returns its record (None if the run failed)."""
    run_dir = os.path.join(FLAGS.runs_dir, f"{name}-seed{seed}")
    command = [sys.executable, "-m", "trainers.quickstart", "--eval_split=dev", "--overwrite",
               f"--model_dir={run_dir}", f"--export_dir={os.path.join(run_dir, 'export')}",
               f"--seed={seed}", f"--train_minutes={FLAGS.train_minutes}",
               f"--mixed_precision={FLAGS.mixed_precision}", "--samples=1",
               *shlex.split(FLAGS.extra_flags), *shlex.split(ROWS[name][0])]
    print(f"\n=== {name} (seed {seed}): {' '.join(command[1:])}", flush=True)
    started = time.monotonic()
    completed = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, errors="replace")
    log = completed.stdout
    if completed.returncode != 0:
        print(log[-3000:], flush=True)
        print(f"recipe: row {name} failed (exit status {completed.returncode})", flush=True)
        return None
    import json

    from keras_transformer import runs

    with open(os.path.join(run_dir, runs.REPORT_FILE)) as stream:
        report = json.load(stream)
    if not FLAGS.keep_runs:
        shutil.rmtree(run_dir, ignore_errors=True)
    record = {"row": name, "flags": ROWS[name][0], "why": ROWS[name][1], "seed": int(seed),
              "train_minutes": FLAGS.train_minutes, "precision": FLAGS.mixed_precision,
              "extra_flags": FLAGS.extra_flags,
              "steps": report["steps"], "tokens_per_second": report["tokens_per_second"],
              "final_dev_loss": report["final_dev_loss"],
              "dev_sacrebleu": report["sacrebleu"], "dev_tokenized_bleu": report["tokenized_bleu"],
              "floors": report["floors"], "dev_sentences": report["test_sentences"],
              "wall_minutes": (time.monotonic() - started) / 60,
              "machine": common.machine()}
    print(f"recipe: {name} seed {seed}: {record['steps']:,} updates, dev sacreBLEU "
          f"{record['dev_sacrebleu']:.2f} (copy {record['floors']['copy']['sacrebleu']:.2f}, "
          f"memory {record['floors']['translation_memory']['sacrebleu']:.2f})", flush=True)
    return record


def key(record):
    return (record["row"], record["seed"], record["train_minutes"], record["precision"],
            record.get("extra_flags", ""))


def table(records):
    """A table per budget and precision, a line per row (best median first), one score per seed."""
    groups = {}
    for record in records:
        budget = (record["train_minutes"], record["precision"], record["machine"]["cpu"])
        groups.setdefault(budget, {}).setdefault(record["row"], []).append(record)
    lines = []
    for (minutes, precision, cpu), rows in sorted(groups.items()):
        lines += ["", f"### {minutes:g} minutes, precision {precision}, {cpu}", ""]
        cells = []
        for name, group in sorted(rows.items(), key=lambda item: -statistics.median(
                r["dev_sacrebleu"] for r in item[1])):
            floors = group[0]["floors"]
            cells.append({
                "row": name, "flags": f"`{group[0]['flags']}`" if group[0]["flags"] else "",
                "seed": ",".join(str(r["seed"]) for r in group),
                "updates": " / ".join(f"{r['steps']:,}" for r in group),
                "tokens/s": " / ".join(f"{r['tokens_per_second']:,.0f}" for r in group),
                "dev sacreBLEU": " / ".join(f"{r['dev_sacrebleu']:.2f}" for r in group),
                "copy": f"{floors['copy']['sacrebleu']:.2f}",
                "memory": f"{floors['translation_memory']['sacrebleu']:.2f}",
                "why": group[0]["why"]})
        lines.append(common.markdown(cells, COLUMNS))
    return "\n".join(lines)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    import json

    path = os.path.join(FLAGS.output_dir, "recipe.json")
    records = []
    if os.path.isfile(path):
        with open(path) as stream:
            records = json.load(stream)["rows"]
    for name in FLAGS.rows:
        for seed in FLAGS.seeds:
            record = run_row(name, seed)
            if record is None:
                continue
            records = [r for r in records if key(r) != key(record)] + [record]
            os.makedirs(FLAGS.output_dir, exist_ok=True)
            common.write_json(path, {"rows": records})
            markdown = ("# The main job's recipe on the dev set (`python -m benchmarks.recipe`)\n"
                        "\nEach row: dev sacreBLEU per seed, beside copying the source and a "
                        "TF-IDF translation memory on the same dev sentences.\n" + table(records)
                        + "\n")
            from keras_transformer import writing

            writing.write_file(os.path.join(FLAGS.output_dir, "recipe.md"), markdown)
    print(f"recipe: wrote {path} and recipe.md", flush=True)


if __name__ == "__main__":
    from trainers.console import parse_flags  # --help: status 0; a bad flag: one line

    app.run(main, flags_parser=parse_flags)
