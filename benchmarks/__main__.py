"""Every benchmark in one command, one JSON file and one Markdown report with the targets.

    python -m benchmarks                                   # every part; writes benchmarks/results/
    python -m benchmarks --model_dir=runs/quickstart       # decoding on a trained model (CTranslate2 too)
    python -m benchmarks --smoke --output_dir=/tmp/bench   # seconds per part: every code path once
    python -m benchmarks --parts=                          # the report again from the JSON files

Runs, each in a fresh process (so each measures its own memory and thread pools):

* ``benchmarks.training_throughput``: the float32 and bfloat16 matmul peaks, then training
  tokens/s and model FLOP/s of ``small`` and ``base`` in float32 / bfloat16, XLA off / on, on
  real token-budget batches, and of the main job's model;
* ``benchmarks.profile_step --main_job``: where the main job's training step goes (TensorFlow's
  profiler), so that its missed goals in the targets table name the largest items beside matmuls;
* ``benchmarks.decoding``: greedy and beam 4 on real test sentences (cache on/off, XLA on/off,
  batch sizes), decode time vs output length, and CTranslate2 float32 on the same weights;
* ``benchmarks.input_pipeline``: tokenization + bucketing speed.

The sweep of the main job's recipe on dev (``benchmarks.recipe``) is not a part: a row is a
20-minute training run.

It writes each part's JSON (and profile.md) to OUTPUT_DIR, OUTPUT_DIR/report.json (all of them
plus the targets) and OUTPUT_DIR/report.md. With --parts, the parts not run are taken from
OUTPUT_DIR's earlier JSON files, each section stating when it was measured. docs/performance.md
quotes the committed benchmarks/results/.
"""

import os
import subprocess
import sys

from absl import app, flags

from benchmarks import common
from benchmarks.targets import decoding_targets, training_targets
from trainers import console

# part: (the report's title, the file it writes in --output_dir; its JSON is beside it).
PARTS = {"training_throughput": ("Training throughput", "training_throughput.json"),
         "profile_step": ("Where a training step's time goes", "profile.md"),
         "decoding": ("Decoding", "decoding.json"),
         "input_pipeline": ("Input pipeline", "input_pipeline.json")}

flags.DEFINE_string("output_dir", None, "Where the JSON files and report.md go (default "
                    "benchmarks/results, or runs/benchmarks/smoke with --smoke).")
flags.DEFINE_string("model_dir", None, "A training run whose (averaged) weights the decoding "
                    "benchmark uses; default a randomly initialised small model.")
flags.DEFINE_string("checkpoint", "averaged", "With --model_dir: which checkpoint.")
flags.DEFINE_list("parts", list(PARTS), "Which benchmarks to run (the others' earlier results in "
                  "--output_dir are reported again); empty (--parts=): none, the report is "
                  "written again.")
flags.DEFINE_bool("smoke", False, "Each part in its seconds-long smoke mode.")
flags.DEFINE_string("data_dir", None, "Data directory of the Ding corpus (default: each part's).")

FLAGS = flags.FLAGS


def json_path(output_dir, part):
    return os.path.splitext(os.path.join(output_dir, PARTS[part][1]))[0] + ".json"


def run_part(part, output_dir):
    command = [sys.executable, "-m", f"benchmarks.{part}",
               f"--output={os.path.join(output_dir, PARTS[part][1])}"]
    if FLAGS.smoke:
        command.append("--smoke")
    if FLAGS.data_dir:
        command.append(f"--data_dir={FLAGS.data_dir}")
    if part == "profile_step" and not FLAGS.smoke:  # the step users train on these machines
        command.append("--main_job")
    if part == "decoding" and FLAGS.model_dir:
        command += [f"--model_dir={FLAGS.model_dir}", f"--checkpoint={FLAGS.checkpoint}"]
    print(f"\n=== {part}: {' '.join(command[1:])} ===", flush=True)
    code = subprocess.call(command)
    if code != 0:
        console.error_exit(f"part '{part}' failed (exit status {code}); its output is above. "
                           f"Run `{' '.join(command[1:])}` alone to repeat it.")
    return common.read_json(json_path(output_dir, part))


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
        targets += training_targets(results["training_throughput"], results.get("profile_step"))
    if "decoding" in results:
        targets += decoding_targets(results["decoding"])
    if targets:
        lines += ["## Targets", "", common.markdown(targets, ["target", "measured", "goal", "met",
                                                             "note"]), ""]
    for part, result in results.items():
        measured = result["machine"]
        end = measured.get("load_average_at_end")
        lines += [f"## {PARTS[part][0]}", "", f"Measured {measured['date']}, load average "
                  f"{measured['load_average'][0]} at the start"
                  + (f", {end[0]} at the end" if end else "") + ".", ""]
        if part == "training_throughput" and result["data"]:  # None: the main job's rows alone
            data = result["data"]
            lines += [f"{data['batches'] or 'All the'} real batches of {data['dataset']} train, "
                      f"{data['token_budget']:,} tokens per side budget, vocabulary "
                      f"{data['vocab_size']:,}; FLOPs count real tokens only; median [min, max] "
                      f"of {result['runs']} passes.", ""]
        if part == "decoding":
            lines += [f"{result['model']}; median [min, max] of {result['runs']} runs.", ""]
        tables = result["markdown"]
        lines += ["\n\n".join(tables.values()) if isinstance(tables, dict) else tables, ""]
    text = "\n".join(lines)
    from keras_transformer import writing

    writing.write_file(os.path.join(output_dir, "report.md"), text)
    common.write_json(os.path.join(output_dir, "report.json"),
                      {"smoke": FLAGS.smoke, "targets": targets, **results})
    return text


def main(argv):
    del argv  # console.run has refused stray arguments
    unknown = set(FLAGS.parts) - set(PARTS)
    if unknown:
        raise app.UsageError(f"--parts={','.join(FLAGS.parts)}: choose from {', '.join(PARTS)}.")
    output_dir = FLAGS.output_dir or (os.path.join("runs", "benchmarks", "smoke") if FLAGS.smoke
                                      else os.path.join("benchmarks", "results"))
    os.makedirs(output_dir, exist_ok=True)
    results = {}
    for part in PARTS:
        path = json_path(output_dir, part)
        if part in FLAGS.parts:
            results[part] = run_part(part, output_dir)
        elif os.path.exists(path):
            print(f"\n=== {part}: not run; reporting the earlier results in {path} ===")
            results[part] = common.read_json(path)
    if not results:
        raise app.UsageError(f"nothing to report: no benchmark results in {output_dir}.")
    print("\n" + report(results, output_dir))
    print(f"\nwrote {output_dir}/report.md and report.json")


if __name__ == "__main__":
    console.run(main)
