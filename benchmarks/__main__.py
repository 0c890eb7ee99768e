"""Every benchmark in one command, one JSON file and one Markdown report with the targets.

    python -m benchmarks                                   # ~1 hour on 2 cores; writes benchmarks/results/
    python -m benchmarks --model_dir=runs/quickstart       # decoding on a trained model (CTranslate2 too)
    python -m benchmarks --smoke --output_dir=/tmp/bench   # seconds per part: every code path once
    python -m benchmarks --parts=                          # the report again from the JSON files

Runs, each in a fresh process (so each measures its own memory and thread pools):

* ``benchmarks.training_throughput``: the float32 and bfloat16 matmul peaks, then training
  tokens/s and model FLOP/s of ``small`` and ``base`` in float32 / bfloat16, XLA off / on, on
  real token-budget batches;
* ``benchmarks.decoding``: greedy and beam 4 on real test sentences (cache on/off, XLA on/off,
  batch sizes), decode time vs output length, and CTranslate2 float32 on the same weights;
* ``benchmarks.input_pipeline``: tokenization + bucketing speed.

and writes OUTPUT_DIR/PART.json for each, OUTPUT_DIR/report.json (all of them plus the targets)
and OUTPUT_DIR/report.md. With --parts, the parts not run are taken from OUTPUT_DIR's earlier
JSON files, each section stating when it was measured. If OUTPUT_DIR/profile.json exists
(``python -m benchmarks.profile_step --output=OUTPUT_DIR/profile.md``), each missed training goal
of the targets table names the largest items of that profile. The README quotes the committed
benchmarks/results/report.md.
"""

import os
import subprocess
import sys

from absl import app, flags

from benchmarks import common
from benchmarks.targets import (comparison_markdown, decoding_targets, repeat_target,
                               training_targets)

flags.DEFINE_string("output_dir", None, "Where the JSON files and report.md go (default "
                    "benchmarks/results, or runs/benchmarks/smoke with --smoke).")
flags.DEFINE_string("model_dir", None, "A training run whose (averaged) weights the decoding "
                    "benchmark uses; default a randomly initialised small model.")
flags.DEFINE_string("checkpoint", "averaged", "With --model_dir: which checkpoint.")
flags.DEFINE_list("parts", ["training_throughput", "decoding", "input_pipeline"],
                  "Which benchmarks to run (the others' earlier results in --output_dir are "
                  "reported again); empty (--parts=): none, the report is written again.")
flags.DEFINE_bool("smoke", False, "Each part in its seconds-long smoke mode.")
flags.DEFINE_string("data_dir", None, "Data directory of the Ding corpus (default: each part's).")

FLAGS = flags.FLAGS
PARTS = ("training_throughput", "decoding", "input_pipeline")
TITLES = {"training_throughput": "Training throughput", "decoding": "Decoding",
          "input_pipeline": "Input pipeline"}

def run_part(part, output):
    command = [sys.executable, "-m", f"benchmarks.{part}", f"--output={output}"]
    if FLAGS.smoke:
        command.append("--smoke")
    if FLAGS.data_dir:
        command.append(f"--data_dir={FLAGS.data_dir}")
    if part == "decoding" and FLAGS.model_dir:
        command += [f"--model_dir={FLAGS.model_dir}", f"--checkpoint={FLAGS.checkpoint}"]
    print(f"\n=== {part}: {' '.join(command[1:])} ===", flush=True)
    code = subprocess.call(command)
    if code != 0:
        sys.exit(f"benchmarks: part '{part}' failed (exit status {code}); its output is above. "
                 f"Run `{' '.join(command[1:])}` alone to repeat it.")
    return read_part(output)


def read_part(path):
    import json

    with open(path) as stream:
        return json.load(stream)


def report(results, output_dir):
    machine = next(iter(results.values()))["machine"]
    lines = [f"# Benchmark report ({'smoke run, numbers meaningless' if FLAGS.smoke else 'latest'})",
             "", f"Machine: {machine['cpu']}, {machine['cpus']} CPUs; TensorFlow "
             f"{machine['tensorflow']}; {machine['date']}; load average at the start "
             f"{machine['load_average'][0]}. Command: `python -m benchmarks"
             + (f" --model_dir={FLAGS.model_dir}" if FLAGS.model_dir else "") + "`.", ""]
    targets = []
    if "training_throughput" in results:
        lines += [common.peak_line(results["training_throughput"]), ""]
        # benchmarks.profile_step's breakdown, if one was written here: why a goal is missed.
        profile_path = os.path.join(output_dir, "profile.json")
        profile = read_part(profile_path) if os.path.exists(profile_path) else None
        targets += training_targets(results["training_throughput"], profile)
    # A second training run compared with the first (training_throughput --compare): whether
    # the ratios repeat within noise.
    repeat_path = os.path.join(output_dir, "training_throughput_repeat.json")
    repeat = read_part(repeat_path) if os.path.exists(repeat_path) else None
    if repeat and repeat.get("comparison"):
        targets.append(repeat_target(repeat))
    if "decoding" in results:
        targets += decoding_targets(results["decoding"])
    if targets:
        lines += ["## Targets", "", common.markdown(targets, ["target", "measured", "goal", "met",
                                                             "note"]), ""]
    for part, result in results.items():
        measured = result["machine"]
        end = measured.get("load_average_at_end")
        lines += [f"## {TITLES[part]}", "", f"Measured {measured['date']}, load average "
                  f"{measured['load_average'][0]} at the start"
                  + (f", {end[0]} at the end" if end else "") + ".", ""]
        if part == "training_throughput":
            data = result["data"]
            lines += [f"{data['batches']} real batches of {data['dataset']} train, "
                      f"{data['token_budget']:,} tokens per side budget, vocabulary "
                      f"{data['vocab_size']:,}; FLOPs count real tokens only; median [min, max] "
                      f"of {result['runs']} passes.", ""]
        if part == "decoding":
            lines += [f"{result['model']}; median [min, max] of {result['runs']} runs.", ""]
        tables = result["markdown"]
        lines += ["\n\n".join(tables.values()) if isinstance(tables, dict) else tables, ""]
        if part == "training_throughput" and repeat and repeat.get("comparison"):
            lines += ["### The same rows measured again", "",
                      f"Measured {repeat['machine']['date']}, load average "
                      f"{repeat['machine']['load_average'][0]} at the start: `python -m "
                      "benchmarks.training_throughput --xla=off --main_job=false --before= "
                      f"--batches={repeat['data']['batches']} --runs={repeat['runs']} "
                      f"--compare={repeat['comparison']['earlier']}`.", "",
                      comparison_markdown(repeat["comparison"]), ""]
    text = "\n".join(lines)
    from keras_transformer import writing

    writing.write_file(os.path.join(output_dir, "report.md"), text)
    common.write_json(os.path.join(output_dir, "report.json"),
                      {"smoke": FLAGS.smoke, "targets": targets, **results})
    return text


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    unknown = set(FLAGS.parts) - set(PARTS)
    if unknown:
        raise app.UsageError(f"--parts={','.join(FLAGS.parts)}: choose from {', '.join(PARTS)}.")
    output_dir = FLAGS.output_dir or (os.path.join("runs", "benchmarks", "smoke") if FLAGS.smoke
                                      else os.path.join("benchmarks", "results"))
    os.makedirs(output_dir, exist_ok=True)
    results = {}
    for part in PARTS:
        path = os.path.join(output_dir, f"{part}.json")
        if part in FLAGS.parts:
            results[part] = run_part(part, path)
        elif os.path.exists(path):
            print(f"\n=== {part}: not run; reporting the earlier results in {path} ===")
            results[part] = read_part(path)
    if not results:
        raise app.UsageError(f"nothing to report: no benchmark results in {output_dir}.")
    print("\n" + report(results, output_dir))
    print(f"\nwrote {output_dir}/report.md and report.json")


if __name__ == "__main__":
    from trainers.console import parse_flags  # --help: status 0; a bad flag: one line

    app.run(main, flags_parser=parse_flags)
