"""Learning curves of training runs: train and dev loss, and dev BLEU against the translation
memory, over wall-clock minutes, from the runs' TensorBoard event files.

    python -m benchmarks.learning_curve --model_dirs=runs/quickstart,runs/long \
        --output=docs/images/learning_curve.png

Dev BLEU is the trainer's (``--dev_bleu_sentences`` first dev sentences, beam 4, alpha 0.6). The
floors are computed on those same dev sentences (copy the source; the German of the nearest English
training sentence by TF-IDF cosine), so the plot shows where a run crosses the translation memory.
Writes the picture and, next to it, a JSON file with the plotted points.
"""

import glob
import json
import os

from absl import app, flags

flags.DEFINE_list("model_dirs", [os.path.join("runs", "quickstart")], "Training runs to plot.")
flags.DEFINE_list("labels", None, "A legend label per run (default: the folder names).")
flags.DEFINE_string("output", os.path.join("docs", "images", "learning_curve.png"),
                    "The picture (PNG or SVG).")

FLAGS = flags.FLAGS


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


def run_curves(model_dir):
    """The run's train/dev scalars on one clock (minutes since its first train point), and the
    floors on its dev-BLEU sentences."""
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
    return {"train_loss": minutes(train["loss"]), "dev_loss": minutes(dev.get("loss", [])),
            "dev_bleu": minutes(dev.get("bleu", [])),
            "floors": {name: score["sacrebleu"] for name, score in floors.to_dict().items()},
            "dev_sentences": len(dev_sources)}


def plot(curves, labels, output):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (loss_axes, bleu_axes) = plt.subplots(1, 2, figsize=(10, 3.6))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, (label, curve) in enumerate(zip(labels, curves)):
        colour = colours[index % len(colours)]
        for key, style, what in (("train_loss", "-", "train"), ("dev_loss", "--", "dev")):
            if curve[key]:
                loss_axes.plot([m for m, _, _ in curve[key]], [v for _, _, v in curve[key]],
                               style, color=colour, label=f"{label}: {what}")
        if curve["dev_bleu"]:
            bleu_axes.plot([m for m, _, _ in curve["dev_bleu"]],
                           [v for _, _, v in curve["dev_bleu"]], "o-", color=colour, label=label)
    # The floors depend only on the dev sentences: the first run's stand for all on one corpus.
    floors = curves[0]["floors"]
    for name, style in (("translation_memory", ":"), ("copy", "-.")):
        bleu_axes.axhline(floors[name], linestyle=style, color="grey",
                          label=f"{name.replace('_', ' ')} ({floors[name]:.1f})")
    loss_axes.set(xlabel="minutes of training", ylabel="label-smoothed loss per target subword",
                  title="Loss")
    bleu_axes.set(xlabel="minutes of training", ylabel="sacreBLEU",
                  title=f"Dev BLEU ({curves[0]['dev_sentences']} sentences, beam 4)")
    for axes in (loss_axes, bleu_axes):
        axes.grid(alpha=0.3)
        axes.legend(fontsize=7)
    figure.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    figure.savefig(output, dpi=110)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    labels = FLAGS.labels or [os.path.basename(os.path.normpath(d)) for d in FLAGS.model_dirs]
    if len(labels) != len(FLAGS.model_dirs):
        raise app.UsageError("--labels needs one label per --model_dirs entry.")
    curves = [run_curves(d) for d in FLAGS.model_dirs]
    plot(curves, labels, FLAGS.output)
    with open(os.path.splitext(FLAGS.output)[0] + ".json", "w") as stream:
        json.dump(dict(zip(labels, curves)), stream, indent=1)
    print(f"learning_curve: wrote {FLAGS.output}")


if __name__ == "__main__":
    app.run(main)
