"""Learning curves of training runs: train and dev loss, and dev BLEU against the translation
memory, over wall-clock minutes (or updates), from the runs' TensorBoard event files.

    python -m docs.tools.learning_curve --model_dirs=runs/quickstart,runs/long \
        --output=docs/images/learning_curve.png
    python -m docs.tools.learning_curve --model_dirs=runs/long --x_axis=updates

Updates are the axis for runs trained to a step limit on a shared machine, whose minutes say more
about the machine's load than about the run.

Dev BLEU is the trainer's (``--dev_bleu_sentences`` first dev sentences, beam 4, alpha 0.6). The
floors are computed on those same dev sentences (copy the source; the German of the nearest English
training sentence by TF-IDF cosine), so the plot shows where a run crosses the translation memory.
Writes the picture and, next to it, a JSON file with the plotted points. ``python -m
docs.tools.figures`` draws the same picture (with the others), and re-plots that JSON file when
the run folders are not on the machine.

This module is the one home of reading and drawing learning curves: ``docs.tools.figures`` calls
``load_curves`` and ``plot``.
"""

import glob
import json
import os
import time

from absl import app, flags

FLAGS = flags.FLAGS
# what a curve can be drawn against: the index in its (minutes, step, value) points, the axis label
X_AXES = {"minutes": (0, "minutes of training (wall clock)"), "updates": (1, "updates (steps)")}


def define_flags():
    """This program's own flags (not defined on import: ``docs.tools.figures`` imports this module
    and has flags of the same names)."""
    flags.DEFINE_list("model_dirs", [os.path.join("runs", "quickstart")], "Training runs to plot.")
    flags.DEFINE_list("labels", None, "A legend label per run (default: the folder names).")
    flags.DEFINE_string("output", os.path.join("docs", "images", "learning_curve.png"),
                        "The picture (PNG or SVG).")
    flags.DEFINE_enum("x_axis", "minutes", list(X_AXES), "What the curves are drawn against.")
    flags.DEFINE_string("runs_machine", None, "Where the runs were trained, named on the picture "
                        "(run folders do not record it; default: this machine's CPU).")


def scalars(event_dir):
    """{tag: [(wall_time, step, value)]} of the scalar summaries in ``event_dir`` (text summaries,
    such as the dev translations, are left out)."""
    import tensorflow as tf

    series = {}
    for path in sorted(glob.glob(os.path.join(event_dir, "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.HasField("tensor"):
                    array = tf.make_ndarray(value.tensor)
                    if array.dtype.kind not in "fiu":
                        continue
                    number = float(array)
                else:
                    number = value.simple_value
                series.setdefault(value.tag, []).append((event.wall_time, event.step, number))
    return {tag: sorted(points) for tag, points in series.items()}


def this_machine():
    """This machine's CPU and core count, e.g. ``AMD EPYC, 2 CPUs``."""
    from benchmarks import common

    return f"{common.cpu_model()}, {os.cpu_count()} CPUs"


def run_curves(model_dir, machine=None):
    """The run's train/dev scalars on one clock (minutes since its first train point), the floors
    on its dev-BLEU sentences, and where it ran: ``machine`` (default: this machine's CPU, as a run
    folder does not record its machine), its precision and the date of its first train point."""
    from keras_transformer import data, evaluation
    from keras_transformer.data import DataConfig
    from keras_transformer import runs

    train, dev = scalars(os.path.join(model_dir, "train")), scalars(os.path.join(model_dir, "dev"))
    if "loss" not in train:
        raise ValueError(f"{model_dir}: no TensorBoard train scalars (is it a training run?)")
    start = train["loss"][0][0]

    def minutes(points):
        return [((t - start) / 60, step, v) for t, step, v in points]

    run = runs.read_config(model_dir)
    config = DataConfig(**{k: v for k, v in run["data"].items()
                           if k in DataConfig.__dataclass_fields__})
    sentences = run.get("dev_bleu_sentences", 200)
    dev_sources, dev_references = data.read_pairs(config, "dev", sentences)
    floors = evaluation.floors(dev_sources, dev_references, list(zip(*data.read_pairs(config, "train"))))
    precision = run.get("training", {}).get("mixed_precision")
    machine = ", ".join(filter(None, [machine or this_machine(), precision,
                                      time.strftime("%Y-%m-%d", time.gmtime(start))]))
    return {"train_loss": minutes(train["loss"]), "dev_loss": minutes(dev.get("loss", [])),
            "dev_bleu": minutes(dev.get("bleu", [])),
            "floors": {name: score["sacrebleu"] for name, score in floors.to_dict().items()},
            "dev_sentences": len(dev_sources), "machine": machine}


def load_curves(model_dirs, labels=None, json_path=None, machine=None):
    """``(curves {label: run_curves}, from_runs, source)``: read from the run folders when every
    one of ``model_dirs`` is there (``from_runs``), otherwise from ``json_path`` (the points
    written when the picture was last drawn from the runs). ``source`` says which, in words. A
    ValueError when neither is there."""
    labels = labels or [os.path.basename(os.path.normpath(d)) for d in model_dirs]
    if len(labels) != len(model_dirs):
        raise ValueError(f"{len(labels)} labels for {len(model_dirs)} run folders: give one label "
                         "per run (--labels).")
    missing = [d for d in model_dirs if not os.path.isdir(d)]
    if not missing:
        curves = {label: run_curves(d, machine) for label, d in zip(labels, model_dirs)}
        return curves, True, f"read from the run folders {', '.join(model_dirs)}"
    if json_path and os.path.isfile(json_path):
        with open(json_path) as stream:
            curves = json.load(stream)
        return curves, False, (f"re-plotted from {json_path} ({', '.join(missing)} not on this "
                               f"machine; runs: {', '.join(curves)})")
    raise ValueError(f"no run folder {', '.join(missing)}"
                     + (f" and no {json_path} to re-plot" if json_path else ""))


def write_curves(path, curves):
    with open(path, "w") as stream:
        json.dump(curves, stream, indent=1)


def save_figure(figure, output, dpi=100):
    """Writes a matplotlib ``figure`` to ``output`` and closes it. A PNG is stored with a palette
    of 256 colours (a third of the bytes of full colour, the same to the eye), so that committed
    pictures stay small; other formats (SVG, PDF) as matplotlib writes them."""
    import io

    import matplotlib.pyplot as plt

    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    if not output.lower().endswith(".png"):
        figure.savefig(output, dpi=dpi)
    else:
        from PIL import Image  # matplotlib depends on Pillow

        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=dpi)
        image = Image.open(buffer).convert("RGB").quantize(
            colors=256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
        image.save(output, optimize=True)
    plt.close(figure)


def plot(curves, labels, x_axis="minutes"):
    """Loss (train and dev) and dev BLEU beside the floors, against minutes of training or updates
    (``x_axis``, of X_AXES), one colour per run: the matplotlib figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x, x_label = X_AXES[x_axis]
    figure, (loss_axes, bleu_axes) = plt.subplots(1, 2, figsize=(10, 3.9))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, (label, curve) in enumerate(zip(labels, curves)):
        colour = colours[index % len(colours)]
        for key, style, what in (("train_loss", "-", "train"), ("dev_loss", "--", "dev")):
            if curve[key]:
                loss_axes.plot([p[x] for p in curve[key]], [v for _, _, v in curve[key]],
                               style, color=colour, label=f"{label}: {what}")
        if curve["dev_bleu"]:
            bleu_axes.plot([p[x] for p in curve["dev_bleu"]],
                           [v for _, _, v in curve["dev_bleu"]], "o-", color=colour, label=label)
    # The floors depend only on the dev sentences: the first run's stand for all on one corpus.
    floors = curves[0]["floors"]
    for name, style in (("translation_memory", ":"), ("copy", "-.")):
        bleu_axes.axhline(floors[name], linestyle=style, color="grey",
                          label=f"{name.replace('_', ' ')} floor ({floors[name]:.1f})")
    loss_axes.set(xlabel=x_label, ylabel="label-smoothed loss per target subword", title="Loss")
    bleu_axes.set(xlabel=x_label, ylabel="sacreBLEU",
                  title=f"Dev BLEU ({curves[0]['dev_sentences']} sentences, beam 4)")
    for axes in (loss_axes, bleu_axes):
        axes.grid(alpha=0.3)
        axes.legend(fontsize=7)
    machines = list(dict.fromkeys(curve.get("machine") or "machine not recorded" for curve in curves))
    figure.text(0.5, 0.01, "Trained on " + "; ".join(machines), ha="center", fontsize=8,
                color="dimgrey")
    figure.tight_layout(rect=(0, 0.04, 1, 1))
    return figure


def main(argv):
    del argv  # console.run has refused stray arguments
    try:
        curves, _, _ = load_curves(FLAGS.model_dirs, FLAGS.labels, machine=FLAGS.runs_machine)
    except ValueError as error:
        raise app.UsageError(str(error)) from None
    save_figure(plot(list(curves.values()), list(curves), FLAGS.x_axis), FLAGS.output)
    write_curves(os.path.splitext(FLAGS.output)[0] + ".json", curves)
    print(f"learning_curve: wrote {FLAGS.output}")


if __name__ == "__main__":
    define_flags()
    from trainers import console

    console.run(main)
