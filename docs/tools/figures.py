r"""Every picture under docs/images/, drawn again from the run folders and the benchmark JSON, so
that none goes stale:

    python -m docs.tools.figures                                    # all of them
    python -m docs.tools.figures --model_dirs=runs/quickstart,runs/long \
        --labels="20 min (main command),60 min (long command)"
    python -m docs.tools.figures --figures=decode_time,training_throughput

Pictures (in --output_dir, default docs/images):

* ``learning_curve.png``: train and dev loss, and dev BLEU beside the floors, against minutes of
  training, of the runs of --model_dirs (``docs.tools.learning_curve`` reads them). When a run
  folder is not on this machine, the points of ``learning_curve.json`` (written the last time the
  runs were read) are plotted again; the output line says which.
* ``long_recipe.png``: the same for the long command's run (--long_model_dir), against updates:
  it may have trained to a step limit on a busy machine, whose minutes would mislead
  (``long_recipe.json`` keeps its points, as above).
* ``figure1_annotated.png`` and ``figure2_annotated.png``: the paper's Figures 1 and 2 with
  this project's module, class and function names on each box (``draw_figure1``,
  ``draw_figure2``). Drawn into docs/images, they are also put into
  ``notebooks/architecture.ipynb``, whose markdown cells carry them as attachments.
* ``schedule.png``: Eq. (3) for the paper's base model beside the main job's
  settings (``trainers/quickstart.py`` QUICKSTART_DEFAULTS), computed by the library's own
  ``TransformerSchedule``.
* ``attention_heads.png`` and ``attention_lines.png``: the encoder self-attention of the last
  layer of a trained run (--attention_model_dir, default the first of --model_dirs that exists)
  on the sentence of the paper's Figure 3: a heatmap per head, and the paper's line view. The
  weights are kept in ``attention.json`` and plotted again from there when no run is here.
* ``decode_time.png``: decode time against output length, with and without the key/value cache,
  from RESULTS_DIR/decoding.json (``benchmarks.decoding``).
* ``training_throughput.png``: training model FLOP/s as a percentage of the matmul peak of the same
  precision, per preset, precision and XLA setting, from RESULTS_DIR/training_throughput.json
  (``benchmarks.training_throughput``).

One line per picture says what was written and from what. A picture whose data is missing (a
benchmark JSON without the section it needs, say) is left as it was, with one line saying why; the
command then ends with exit status 1 after drawing the others. The functions that draw are plain
(``draw_figure1(ax)``, ``draw_figure2(fig)``, ``encoder_self_attention(translator, sentence)``, ...)
so a notebook can import them. Needs matplotlib (``pip install -e '.[notebooks]'``).
"""

import base64
import json
import os
import sys
import textwrap

from absl import app, flags

FIGURE3_SENTENCE = ("It is in this spirit that a majority of American governments have passed new "
                    "laws since 2009 making the registration or voting process more difficult.")
# The paper's base model and warm-up (Table 3, section 5.3).
PAPER_SCHEDULE = {"label": "paper, base model", "d_model": 512, "warmup_steps": 4000, "scale": 1.0,
                  "train_steps": 100_000}
# name: the files it writes (the first is the picture announced).
FIGURES = {
    "learning_curve": ("learning_curve.png", "learning_curve.json"),
    "long_recipe": ("long_recipe.png", "long_recipe.json"),
    "figure1": ("figure1_annotated.png",),
    "figure2": ("figure2_annotated.png",),
    "schedule": ("schedule.png",),
    "attention": ("attention_heads.png", "attention_lines.png", "attention.json"),
    "decode_time": ("decode_time.png",),
    "training_throughput": ("training_throughput.png",),
}

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS_IMAGES = os.path.join(ROOT, "docs", "images")
# The notebook carries these pictures itself, as attachments of its markdown cells: from the wheel and
# on Colab there is no docs/images to show them from.
ATTACHED_IN = os.path.join(ROOT, "notebooks", "architecture.ipynb")
ATTACHED_FIGURES = ("figure1", "figure2")

flags.DEFINE_list("model_dirs", [os.path.join("runs", "quickstart"), os.path.join("runs", "long")],
                  "The main job's run folders (the 20-minute and the long run) for the learning "
                  "curves; if one is missing, OUTPUT_DIR/learning_curve.json is plotted again.")
flags.DEFINE_list("labels", None, "A legend label per --model_dirs entry (default: the folder "
                  "names).")
flags.DEFINE_string("long_model_dir", os.path.join("runs", "long"),
                    "The long command's run folder, whose learning curve is drawn against updates "
                    "(it may have trained to a step limit on a busy machine); if it is missing, "
                    "OUTPUT_DIR/long_recipe.json is plotted again.")
flags.DEFINE_string("long_label", "long command", "The long run's legend label.")
flags.DEFINE_string("runs_machine", None, "Where the runs of --model_dirs were trained, named on the "
                    "learning curves (run folders do not record it; default: this machine's CPU).")
flags.DEFINE_string("results_dir", os.path.join("benchmarks", "results"),
                    "Where the benchmarks' JSON files are (decoding.json, training_throughput.json).")
flags.DEFINE_string("output_dir", os.path.join("docs", "images"), "Where the pictures go.")
flags.DEFINE_string("attention_model_dir", None, "The trained run whose attention is drawn "
                    "(default: the first of --model_dirs that exists; none: OUTPUT_DIR/"
                    "attention.json is plotted again).")
flags.DEFINE_string("attention_checkpoint", None, "Its checkpoint: averaged, best, latest or a path "
                    "(default: averaged, else ema, else best, else latest).")
flags.DEFINE_string("sentence", FIGURE3_SENTENCE, "The sentence whose attention is drawn (default: "
                    "the paper's Figure 3 sentence).")
flags.DEFINE_string("word", "making", "The word whose attention the line view isolates (Figure 3).")
flags.DEFINE_integer("layer", None, "The encoder layer drawn, 1 to N (default: the last).",
                     lower_bound=1)
flags.DEFINE_list("figures", list(FIGURES), "Which pictures to draw.")
flags.DEFINE_integer("dpi", 100, "Resolution of the PNG files.", lower_bound=30)

FLAGS = flags.FLAGS

CODE_COLOUR = "#1f3f8f"  # our names on the diagrams


class Skipped(Exception):
    """A picture that cannot be drawn from what is here; the message says why, in one line."""


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(figure, path, dpi):
    from docs.tools.learning_curve import save_figure

    save_figure(figure, path, dpi)


def _machine_text(machine):
    """``AMD EPYC, 2 CPUs, TensorFlow 2.21.0, 2026-11-22 05:37 UTC`` from a benchmark's "machine"."""
    if not isinstance(machine, dict):
        return "machine not recorded"
    parts = [machine.get("cpu"), f"{machine['cpus']} CPUs" if machine.get("cpus") else None,
             f"TensorFlow {machine['tensorflow']}" if machine.get("tensorflow") else None,
             machine.get("date")]
    return ", ".join(str(p) for p in parts if p) or "machine not recorded"


# --- 1. learning curves ----------------------------------------------------------------------------

def curves_figure(options, name, model_dirs, labels, x_axis, machine=None):
    """The learning curves of ``model_dirs`` against ``x_axis`` as picture ``name``, their points
    kept beside it (and plotted again from there when a run folder is not here)."""
    from docs.tools import learning_curve

    png, points = (os.path.join(options["output_dir"], file) for file in FIGURES[name])
    try:
        curves, from_runs, source = learning_curve.load_curves(model_dirs, labels, points, machine)
    except ValueError as error:
        raise Skipped(str(error)) from None
    _save(learning_curve.plot(list(curves.values()), list(curves), x_axis), png, options["dpi"])
    if from_runs:
        learning_curve.write_curves(points, curves)
        return [png, points], source
    return [png], source


def learning_curve_figure(options):
    return curves_figure(options, "learning_curve", options["model_dirs"], options.get("labels"),
                         "minutes", options.get("runs_machine"))


def long_recipe_figure(options):
    return curves_figure(options, "long_recipe", [options["long_model_dir"]],
                         [options["long_label"]], "updates")


# --- 2. the paper's Figures 1 and 2, with our names --------------------------------------------------

BOX_COLOURS = {"embedding": "#f6cfcb", "attention": "#fbdcb0", "norm": "#f3f0a8", "ffn": "#c3e3f3",
               "linear": "#d9d0ef", "softmax": "#c8e8c3", "block": "#efefef", "plain": "#ffffff"}


def _box(ax, cx, cy, width, height, title, code=None, kind="plain", stacked=0, fontsize=8.5):
    """A rounded box centred at (cx, cy) with the paper's name and, below it, ours."""
    from matplotlib.patches import FancyBboxPatch

    for depth in range(stacked, -1, -1):  # copies behind it, e.g. the h heads
        shift = 0.13 * depth
        ax.add_patch(FancyBboxPatch((cx - width / 2 + shift, cy - height / 2 + shift), width, height,
                                    boxstyle="round,pad=0,rounding_size=0.12", linewidth=0.9,
                                    facecolor=BOX_COLOURS[kind], edgecolor="black", zorder=2))
    if code:
        ax.text(cx, cy + height * 0.17, title, ha="center", va="center", fontsize=fontsize, zorder=3)
        ax.text(cx, cy - height * 0.22, code, ha="center", va="center", fontsize=fontsize - 2,
                family="monospace", color=CODE_COLOUR, zorder=3)
    else:
        ax.text(cx, cy, title, ha="center", va="center", fontsize=fontsize, zorder=3)


def _arrow(ax, *points, head=True):
    """A polyline through ``points`` with an arrow head at the last one."""
    xs, ys = zip(*points)
    if len(points) > 2:
        ax.plot(xs[:-1], ys[:-1], color="black", linewidth=1, zorder=1, solid_capstyle="butt")
    ax.annotate("", xy=points[-1], xytext=points[-2], zorder=1,
                arrowprops=dict(arrowstyle="-|>" if head else "-", color="black", linewidth=1,
                                shrinkA=0, shrinkB=0, mutation_scale=9))


def _plus(ax, cx, cy, radius=0.24):
    from matplotlib.patches import Circle

    ax.add_patch(Circle((cx, cy), radius, facecolor="white", edgecolor="black", linewidth=1, zorder=2))
    ax.plot([cx - radius * 0.6, cx + radius * 0.6], [cy, cy], color="black", linewidth=1, zorder=3)
    ax.plot([cx, cx], [cy - radius * 0.6, cy + radius * 0.6], color="black", linewidth=1, zorder=3)


def _sine_icon(ax, cx, cy, radius=0.3):
    import numpy as np
    from matplotlib.patches import Circle

    ax.add_patch(Circle((cx, cy), radius, facecolor="white", edgecolor="black", linewidth=1, zorder=2))
    t = np.linspace(-0.75, 0.75, 40)
    ax.plot(cx + t * radius, cy + 0.45 * radius * np.sin(t * 2 * np.pi / 0.75), color="black",
            linewidth=0.9, zorder=3)


def _stack(ax, cx, bottom, names, gaps, width, height):
    """Boxes (title, code, kind) from ``bottom`` up, ``gaps[i]`` below box i; their centres."""
    centres, y = [], bottom
    for (title, code, kind), gap in zip(names, gaps):
        y += gap
        centres.append(y + height / 2)
        _box(ax, cx, y + height / 2, width, height, title, code, kind)
        y += height
    return centres


def _residual(ax, start, residual_x, box_y, box_edge):
    """The residual connection: from ``start`` on the main line round to an Add & Norm box."""
    _arrow(ax, start, (residual_x, start[1]), (residual_x, box_y), (box_edge, box_y))


FIGURE1_FILES = (
    ("model.py", "Transformer"),
    ("layers/embedding.py", "SharedEmbedding, positional_encoding"),
    ("layers/attention.py", "MultiHeadAttention"),
    ("layers/masks.py", "look_ahead_mask, padding_mask"),
    ("layers/sublayers.py", "sublayer_connection"),
    ("layers/feed_forward.py", "PositionwiseFeedForward"),
    ("layers/encoder.py", "EncoderLayer, Encoder"),
    ("layers/decoder.py", "DecoderLayer, Decoder"),
)


def draw_figure1(ax):
    """The paper's Figure 1 (the Transformer) on ``ax``, each box also named as in this code."""
    ax.set_xlim(0, 14.6)
    ax.set_ylim(-1.0, 19.4)
    ax.set_aspect("equal")
    ax.axis("off")
    width, height, gap = 3.5, 0.95, 0.35
    enc, dec = 4.4, 10.3
    _figure1_embeddings(ax, enc, dec, width, height)
    encoder, decoder, tops = _figure1_layers(ax, enc, dec, width, height, gap)
    _figure1_top(ax, enc, dec, encoder, decoder, tops, width, height)
    _figure1_notes(ax)


def _figure1_embeddings(ax, enc, dec, width, height):
    """Inputs, embeddings, positional encodings."""
    for cx, words, title, side in ((enc, "Inputs\n(source_ids)", "Input Embedding", -1),
                                   (dec, "Outputs (shifted right)\n(target_input_ids)",
                                    "Output Embedding", 1)):
        ax.text(cx, -0.35, words, ha="center", va="center", fontsize=8)
        _arrow(ax, (cx, 0.2), (cx, 0.9))
        _box(ax, cx, 1.4, width, height, title, "SharedEmbedding · √d_model", "embedding")
        _arrow(ax, (cx, 1.4 + height / 2), (cx, 2.85))
        _plus(ax, cx, 3.1)
        icon = cx + side * 1.1
        _sine_icon(ax, icon, 3.1)
        _arrow(ax, (icon - side * 0.3, 3.1), (cx + side * 0.24, 3.1))
        align = "left" if side > 0 else "right"
        ax.text(icon + side * 0.45, 3.1, "Positional\nEncoding", ha=align, va="bottom", fontsize=8)
        ax.text(icon + side * 0.45, 3.05, "positional_encoding()", ha=align, va="top", fontsize=6.5,
                family="monospace", color=CODE_COLOUR)


def _figure1_layers(ax, enc, dec, width, height, gap):
    """The layers: sub-layers in a grey block, N times; (encoder centres, decoder centres, the
    top of each block)."""
    from matplotlib.patches import FancyBboxPatch

    bottom = 3.8
    encoder = _stack(ax, enc, bottom, [
        ("Multi-Head Attention", "MultiHeadAttention", "attention"),
        ("Add & Norm", "sublayer_connection", "norm"),
        ("Feed Forward", "PositionwiseFeedForward", "ffn"),
        ("Add & Norm", "sublayer_connection", "norm")], [0.6, gap, gap, gap], width, height)
    decoder = _stack(ax, dec, bottom, [
        ("Masked Multi-Head Attention", "MultiHeadAttention+look_ahead_mask", "attention"),
        ("Add & Norm", "sublayer_connection", "norm"),
        ("Multi-Head Attention", "MultiHeadAttention (cross)", "attention"),
        ("Add & Norm", "sublayer_connection", "norm"),
        ("Feed Forward", "PositionwiseFeedForward", "ffn"),
        ("Add & Norm", "sublayer_connection", "norm")], [0.6, gap, 0.75, gap, gap, gap],
        width, height)
    tops = {}
    for cx, centres, side, name in ((enc, encoder, -1, "EncoderLayer"),
                                    (dec, decoder, 1, "DecoderLayer")):
        top = tops[name] = centres[-1] + height / 2 + 0.3
        ax.add_patch(FancyBboxPatch((cx - 2.25, bottom), 4.5, top - bottom,
                                    boxstyle="round,pad=0,rounding_size=0.25", linewidth=1.1,
                                    facecolor=BOX_COLOURS["block"], edgecolor="black", zorder=0))
        align = "right" if side < 0 else "left"
        ax.text(cx + side * 2.4, (bottom + top) / 2, "N×", fontsize=13, va="center", ha=align)
        ax.text(cx + side * 2.4, (bottom + top) / 2 - 0.55, f"{name}\n× num_layers\nin {name[:-5]}",
                fontsize=6.5, va="top", ha=align, family="monospace", color=CODE_COLOUR)
        residual_x = cx + side * 2.05
        edge = cx + side * width / 2
        # Into the layer: Q, K and V of self-attention, and the first residual.
        split = bottom + 0.3
        _arrow(ax, (cx, 3.34), (cx, split), head=False)
        for dx in (-0.9, 0, 0.9):
            _arrow(ax, (cx, split), (cx + dx, split), (cx + dx, centres[0] - height / 2))
        _residual(ax, (cx, split), residual_x, centres[1], edge)
        for lower, upper in zip(centres[1:], centres[2:]):
            if name == "DecoderLayer" and upper == centres[2]:
                continue  # drawn below: the cross-attention's inputs
            _arrow(ax, (cx, lower + height / 2), (cx, upper - height / 2))
        _arrow(ax, (cx, centres[0] + height / 2), (cx, centres[1] - height / 2))
        for norm in range(3, len(centres), 2):  # the later residuals, from the previous Add & Norm
            _residual(ax, (cx + side * (0.9 if name == "DecoderLayer" and norm == 3 else 0),
                           centres[norm - 2] + height / 2 + 0.12), residual_x, centres[norm], edge)
    return encoder, decoder, tops


def _figure1_top(ax, enc, dec, encoder, decoder, tops, width, height):
    """The decoder's second attention (queries from below, keys and values from the encoder),
    then Linear and Softmax."""
    cross = decoder[2] - height / 2
    _arrow(ax, (dec + 0.9, decoder[1] + height / 2), (dec + 0.9, cross))
    memory_y, route_x = cross - 0.38, 7.35
    high = tops["EncoderLayer"] + 0.5
    _arrow(ax, (enc, encoder[-1] + height / 2), (enc, high), (route_x, high), (route_x, memory_y),
           (dec, memory_y), (dec, cross))
    _arrow(ax, (dec - 0.9, memory_y), (dec - 0.9, cross))
    ax.text(enc + 0.15, high + 0.08, "memory (the output of encode())", fontsize=6.5,
            family="monospace", color=CODE_COLOUR, ha="left", va="bottom")
    # Linear, softmax.
    top = tops["DecoderLayer"]
    _arrow(ax, (dec, decoder[-1] + height / 2), (dec, top + 0.5))
    linear = top + 0.5 + height / 2
    _box(ax, dec, linear, width, height, "Linear", "SharedEmbedding.project", "linear")
    softmax = linear + height + 0.45
    _arrow(ax, (dec, linear + height / 2), (dec, softmax - height / 2))
    _box(ax, dec, softmax, width, height, "Softmax", "in the loss / beam search", "softmax")
    _arrow(ax, (dec, softmax + height / 2), (dec, softmax + height / 2 + 0.45))
    ax.text(dec, softmax + height / 2 + 0.55, "Output Probabilities", ha="center", va="bottom",
            fontsize=8.5)


def _figure1_notes(ax):
    """Title, where each name lives, and what differs from the drawing."""
    ax.text(0.1, 19.3, "The Transformer (the paper's Figure 1)\nwith this project's names",
            fontsize=11, weight="bold", va="top")
    lines = ["keras_transformer.model.Transformer:", "  encode(): the left half",
             "  decode(): the right half (teacher forcing)",
             "  decode_step(): one output position,", "    with a key/value cache", "",
             "keras_transformer/"]
    lines += [f"  {path:<22} {names}" for path, names in FIGURE1_FILES]
    ax.text(0.1, 17.9, "\n".join(lines), fontsize=6.5, va="top", family="monospace",
            color=CODE_COLOUR, linespacing=1.35)
    ax.text(0.1, 12.5, "One matrix embeds both languages and is the\nLinear (share_embeddings, "
            "section 3.4).\nAdd & Norm = LayerNorm(x + Sublayer(x)) as drawn;\nnorm_first=True "
            "(pre-LN, the main job) computes\nx + Sublayer(LayerNorm(x)) and a final LayerNorm\n"
            "closes each stack.", fontsize=6.5, va="top", color="dimgrey", linespacing=1.35)


def draw_figure2(fig):
    """The paper's Figure 2 on ``fig``: scaled dot-product attention (left) and multi-head
    attention (right), each box also named as in ``keras_transformer/layers/attention.py``."""
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.1]})
    width, height = 3.1, 0.85
    for ax, title, code in (
            (left, "Scaled Dot-Product Attention",
             "Eq. (1): softmax(Q K^T / sqrt(d_k)) V\n"
             "scaled_dot_product_attention(\n    query, key, value, mask)"),
            (right, "Multi-Head Attention",
             "MultiHead(Q, K, V) = Concat(head_1..head_h) W^O\n"
             "MultiHeadAttention(num_heads=h, d_model)")):
        ax.set_xlim(0, 7.8)
        ax.set_ylim(-0.4, 11.3)
        ax.set_aspect("equal")
        ax.axis("off")
        ax.text(3.9, 11.2, title, ha="center", va="top", fontsize=10.5, weight="bold")
        ax.text(3.9, 10.6, code, ha="center", va="top", fontsize=7, family="monospace",
                color=CODE_COLOUR, linespacing=1.3)
    # Left: MatMul, Scale, Mask (opt.), SoftMax, MatMul; Q and K below, V on the right.
    x = 3.2
    steps = [("MatMul", "ops.matmul(query, key^T)", "linear"), ("Scale", "/ sqrt(d_k)", "norm"),
             ("Mask (opt.)", "where(mask, scores, -1e9)", "embedding"),
             ("SoftMax", "ops.softmax, in float32", "softmax"),
             ("MatMul", "ops.matmul(weights, value)", "linear")]
    ys = [1.9 + 1.35 * i for i in range(len(steps))]
    for (name, code, kind), y in zip(steps, ys):
        _box(left, x, y, width, height, name, code, kind)
    for lower, upper in zip(ys, ys[1:]):
        _arrow(left, (x, lower + height / 2), (x, upper - height / 2))
    for label, dx in (("Q", -0.7), ("K", 0.7)):
        left.text(x + dx, 0.1, label, ha="center", va="center", fontsize=9)
        _arrow(left, (x + dx, 0.35), (x + dx, ys[0] - height / 2))
    left.text(6.4, 0.1, "V", ha="center", va="center", fontsize=9)
    _arrow(left, (6.4, 0.35), (6.4, ys[-1]), (x + width / 2, ys[-1]))
    _arrow(left, (x, ys[-1] + height / 2), (x, ys[-1] + height / 2 + 0.5))
    left.text(x, ys[-1] + height / 2 + 0.6, "returns (outputs, weights)", ha="center",
              va="bottom", fontsize=6.5, family="monospace", color=CODE_COLOUR)
    # Right: three Linear projections (h of each), attention h times, Concat, Linear.
    inputs = (("V", 1.3, "value_projection"), ("K", 3.7, "key_projection"),
              ("Q", 6.1, "query_projection"))
    attention_y, concat_y, output_y = 4.4, 6.3, 7.75
    for label, cx, code in inputs:
        right.text(cx, 0.1, label, ha="center", va="center", fontsize=9)
        _arrow(right, (cx, 0.35), (cx, 1.9 - height / 2))
        _box(right, cx, 1.9, 2.1, height, "Linear", code, "linear", stacked=2, fontsize=8)
        _arrow(right, (cx + 0.26, 2.16 + height / 2), (cx + 0.26, attention_y - 0.5))
    right.text(1.68, 3.0, "_split_heads:\n[batch, h,\n length, d_k]", fontsize=6,
               family="monospace", color=CODE_COLOUR, va="center")
    _box(right, 3.7, attention_y, 5.6, 1.0, "Scaled Dot-Product Attention",
         "scaled_dot_product_attention, h heads at once", "attention", stacked=2)
    right.text(6.95, attention_y + 0.7, "h", fontsize=10, style="italic")
    right.text(7.3, 2.35 + height / 2, "h", fontsize=10, style="italic")
    _arrow(right, (3.96, attention_y + 0.76), (3.96, concat_y - height / 2))
    _box(right, 3.96, concat_y, 2.6, height, "Concat", "_merge_heads", "norm")
    _arrow(right, (3.96, concat_y + height / 2), (3.96, output_y - height / 2))
    _box(right, 3.96, output_y, 2.6, height, "Linear", "output_projection (W^O)", "linear")
    _arrow(right, (3.96, output_y + height / 2), (3.96, output_y + height / 2 + 0.5))
    fig.text(0.5, 0.015, "Both in keras_transformer/layers/attention.py. Masks (layers/masks.py): "
             "True = may attend; masked scores are set to -1e9, not -inf, so that a fully masked "
             "row stays finite.", ha="center", fontsize=6.5, color="dimgrey")


def refresh_attachments(path, notebook):
    """Puts the bytes of picture ``path`` into ``notebook``'s attachments of the same name; returns
    whether the notebook changed."""
    name = os.path.basename(path)
    with open(path, "rb") as stream:
        data = base64.b64encode(stream.read()).decode("ascii")
    with open(notebook, encoding="utf-8") as stream:
        content = json.load(stream)
    cells = [cell for cell in content["cells"] if name in cell.get("attachments", {})]
    if all(cell["attachments"][name] == {"image/png": data} for cell in cells):
        return False
    for cell in cells:
        cell["attachments"][name] = {"image/png": data}
    with open(notebook, "w", encoding="utf-8") as stream:  # as nbformat writes it: a one-line diff
        stream.write(json.dumps(content, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    return True


def _attached(path):
    """[ATTACHED_IN] when ``path``, a picture of the docs, was put into it; a picture drawn
    elsewhere (a trial --output_dir, a test) leaves the notebook as it is."""
    if os.path.realpath(os.path.dirname(path)) != os.path.realpath(DOCS_IMAGES):
        return []
    return [ATTACHED_IN] if refresh_attachments(path, ATTACHED_IN) else []


def figure1_figure(options):
    plt = _pyplot()
    figure, ax = plt.subplots(figsize=(8.2, 11.5))
    draw_figure1(ax)
    figure.subplots_adjust(left=0.01, right=0.99, bottom=0.01, top=0.99)
    path = os.path.join(options["output_dir"], FIGURES["figure1"][0])
    _save(figure, path, options["dpi"])
    return [path] + _attached(path), "drawn from the code's names"


def figure2_figure(options):
    plt = _pyplot()
    figure = plt.figure(figsize=(9.5, 6.4))
    draw_figure2(figure)
    figure.subplots_adjust(left=0.01, right=0.99, bottom=0.05, top=0.99, wspace=0.05)
    path = os.path.join(options["output_dir"], FIGURES["figure2"][0])
    _save(figure, path, options["dpi"])
    return [path] + _attached(path), "drawn from the code's names"


# --- 3. the learning-rate schedule of Eq. (3) ------------------------------------------------------

def main_job_schedule():
    """The main job's Eq. (3) settings: its preset's d_model, its warm-up and the learning-rate
    multiplier, from ``trainers.quickstart.QUICKSTART_DEFAULTS`` over the trainer's defaults."""
    from keras_transformer.config import PRESETS
    from trainers import quickstart  # defines the trainer's flags with the main job's defaults

    settings = quickstart.QUICKSTART_DEFAULTS
    preset = settings["preset"]
    d_model = settings.get("d_model") or FLAGS["d_model"].default or PRESETS[preset]["d_model"]
    return {"label": f"main job (trainers.quickstart, preset {preset})", "d_model": d_model,
            "warmup_steps": settings.get("warmup_steps", FLAGS["warmup_steps"].default),
            "scale": settings.get("learning_rate_scale", FLAGS["learning_rate_scale"].default)}


def schedule_values(settings, step_nums):
    """The learning rate at the paper's ``step_num`` (1 = the first update) by the library's own
    ``TransformerSchedule`` (which Keras calls with the number of updates applied, step_num - 1)."""
    import numpy as np

    from keras_transformer.training.schedule import TransformerSchedule

    schedule = TransformerSchedule(settings["d_model"], settings["warmup_steps"], settings["scale"])
    return np.asarray(schedule(np.asarray(step_nums, "float32") - 1.0))


def _run_ends(output_dir):
    """{label: last update} of the runs in OUTPUT_DIR/learning_curve.json (none if absent)."""
    try:
        with open(os.path.join(output_dir, FIGURES["learning_curve"][1])) as stream:
            return {label: curve["train_loss"][-1][1] for label, curve in json.load(stream).items()}
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return {}


def schedule_figure(options):
    import numpy as np

    plt = _pyplot()
    schedules = [main_job_schedule(), PAPER_SCHEDULE]
    ends = _run_ends(options["output_dir"])
    figure, (linear, logarithmic) = plt.subplots(1, 2, figsize=(10, 3.9))
    colours = ("tab:blue", "tab:orange")
    short = np.arange(1, max([10_000] + [-(-(e + 1) // 2000) * 2000 for e in ends.values()]) + 1)
    long = np.unique(np.logspace(0, 5, 400).astype(int))
    offsets = (dict(xytext=(7, -3), va="top"), dict(xytext=(4, -14), ha="left", va="top"))
    for settings, colour, offset in zip(schedules, colours, offsets):
        label = (f"{settings['label']}: d_model {settings['d_model']}, warm-up "
                 f"{settings['warmup_steps']:,}" + (f", × {settings['scale']:g}"
                                                   if settings["scale"] != 1 else ""))
        linear.plot(short, schedule_values(settings, short), color=colour, label=label)
        logarithmic.plot(long, schedule_values(settings, long), color=colour, label=label)
        peak = settings["warmup_steps"]
        value = float(schedule_values(settings, [peak])[0])
        for ax in (linear, logarithmic):
            ax.plot([peak], [value], "o", color=colour, markersize=4)
        logarithmic.annotate(f"peak {value:.2e}\nat step {peak:,}", (peak, value), fontsize=7,
                             textcoords="offset points", color=colour, **offset)
    for index, (label, end) in enumerate(ends.items()):
        for ax in (linear, logarithmic):
            ax.axvline(end, color="grey", linestyle=(0, (2, 2 + 2 * index)), linewidth=0.9,
                       label=f"end of the {label} run ({end:,} updates)" if ax is linear else None)
    logarithmic.axvline(PAPER_SCHEDULE["train_steps"], color="tab:orange", linestyle=":",
                        linewidth=0.9)
    logarithmic.text(PAPER_SCHEDULE["train_steps"] * 0.92, 2e-5, "paper's base:\n100k steps",
                     fontsize=7, ha="right", color="tab:orange")
    linear.set(xlabel="step_num (updates)", ylabel="learning rate", title=f"First {short[-1]:,} updates")
    logarithmic.set(xscale="log", yscale="log", xlabel="step_num (updates, log scale)",
                    ylabel="learning rate (log scale)", title="1 to 100,000 updates")
    linear.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
    linear.legend(fontsize=7)
    for ax in (linear, logarithmic):
        ax.grid(alpha=0.3)
    figure.suptitle(r"Eq. (3): $lrate = scale \cdot d_{model}^{-0.5} \cdot \min(step\_num^{-0.5},"
                    r"\ step\_num \cdot warmup\_steps^{-1.5})$" "\ncomputed by the library's "
                    "keras_transformer.training.TransformerSchedule (scale = --learning_rate_scale)",
                    fontsize=9)
    figure.tight_layout()
    path = os.path.join(options["output_dir"], FIGURES["schedule"][0])
    _save(figure, path, options["dpi"])
    return [path], "computed by TransformerSchedule with QUICKSTART_DEFAULTS and the paper's settings"


# --- 4. attention on the paper's Figure 3 sentence ---------------------------------------------------

def encoder_self_attention(translator, sentence, layer=None):
    """The encoder self-attention of ``layer`` (1-based; default the last) on ``sentence``, as the
    translator's model computes it at inference: ``{"pieces": [S subwords, EOS last], "weights":
    numpy [heads, S, S] (row: attending piece, each row sums to 1), "layer", "num_layers"}``."""
    import numpy as np

    model, tokenizer = translator.model, translator.tokenizer
    num_layers = model.config.num_layers
    layer = num_layers if layer is None else layer
    if not 1 <= layer <= num_layers:
        raise ValueError(f"layer {layer}: the encoder has layers 1 to {num_layers}.")
    source_ids, _, _ = translator.source_ids([sentence])
    # Transformer.attention_weights runs one teacher-forced pass; the encoder's maps do not depend
    # on the target, so a two-token target (start, end) stands in.
    target = [[tokenizer.start_id, tokenizer.end_id]]
    weights = model.attention_weights(source_ids, target)["encoder_self"][layer - 1]
    pieces = [p.decode("utf-8") for p in tokenizer.id_to_piece(source_ids[0]).numpy()]
    return {"pieces": pieces, "weights": np.asarray(weights)[0], "layer": layer,
            "num_layers": num_layers}


def word_groups(pieces):
    """Indices of the subword pieces of each word: a word starts at a piece with SentencePiece's
    "▁" (a space before it), and the end-of-sentence piece is a word of its own."""
    groups = []
    for index, piece in enumerate(pieces):
        if not groups or piece.startswith("\u2581") or piece == "</s>" or pieces[index - 1] == "</s>":
            groups.append([])
        groups[-1].append(index)
    return groups


def word_attention(weights, pieces):
    """``(words, weights [heads, W, W])``: attention from a word is the mean of its pieces' rows,
    attention to a word the sum of its pieces' columns, so each row still sums to 1."""
    import numpy as np

    groups = word_groups(pieces)
    weights = np.asarray(weights, "float64")
    rows = np.stack([weights[:, group, :].mean(axis=1) for group in groups], axis=1)
    merged = np.stack([rows[:, :, group].sum(axis=2) for group in groups], axis=2)
    words = ["<EOS>" if pieces[g[0]] == "</s>" else "".join(pieces[i] for i in g).lstrip("\u2581")
             for g in groups]
    return words, merged


def _attention_record(options):
    """The attention data: from the trained run if one is here (also written to attention.json),
    else from attention.json. ``(record, source, wrote_json)``; the record's "weights" are per
    word ([heads, words, words], see ``word_attention``)."""
    points = os.path.join(options["output_dir"], FIGURES["attention"][2])
    model_dir = options.get("attention_model_dir") or next(
        (d for d in options["model_dirs"] if os.path.isdir(d)), None)
    if model_dir and os.path.isdir(model_dir):
        import time

        from keras_transformer import runs

        try:
            translator = runs.load_translator(model_dir, options.get("attention_checkpoint"))
            found = encoder_self_attention(translator, options["sentence"], options.get("layer"))
        except ValueError as error:
            raise Skipped(f"{model_dir}: {error}") from None
        run = runs.read_config(model_dir)
        words, weights = word_attention(found["weights"], found["pieces"])
        record = {"run": os.path.normpath(model_dir), "preset": run.get("preset"),
                  "checkpoint": os.path.relpath(translator.checkpoint, model_dir),
                  "sentence": options["sentence"], "layer": found["layer"],
                  "num_layers": found["num_layers"], "pieces": found["pieces"], "words": words,
                  "date": time.strftime("%Y-%m-%d"),
                  "weights": [[[round(float(w), 4) for w in row] for row in head]
                              for head in weights]}
        os.makedirs(options["output_dir"], exist_ok=True)
        with open(points, "w") as stream:
            json.dump(record, stream, separators=(",", ":"))
        return record, f"computed by the model of {model_dir} ({record['checkpoint']})", True
    if model_dir:
        raise Skipped(f"no run folder {model_dir}")
    if os.path.isfile(points):
        with open(points) as stream:
            record = json.load(stream)
        return record, (f"re-plotted from {points} (no run of --model_dirs on this machine; "
                        f"weights of {record.get('run')})"), False
    raise Skipped(f"no run folder of --model_dirs ({', '.join(options['model_dirs'])}) and no "
                  f"{points}: pass --attention_model_dir=RUN")


def _attention_title(record, *more):
    title = (f"Encoder self-attention, layer {record['layer']} of {record['num_layers']}, of the "
             f"trained run {os.path.basename(record['run'])} (preset {record.get('preset')}, "
             f"{record.get('checkpoint')} weights, computed {record.get('date')}) on the sentence "
             "of the paper's Figure 3. " + " ".join(more))
    return "\n".join(textwrap.wrap(title, 150))


def plot_attention_heatmaps(figure, words, weights, highlight=None):
    """A heatmap per head on ``figure``, each with its own colour scale and colorbar; the row of
    word ``highlight`` (an index) framed in red."""
    import math

    from matplotlib.patches import Rectangle

    heads = len(weights)
    columns = min(heads, 2)
    axes = figure.subplots(math.ceil(heads / columns), columns, squeeze=False).ravel()
    for head, ax in enumerate(axes):
        if head >= heads:
            ax.axis("off")
            continue
        image = ax.imshow(weights[head], cmap="viridis", vmin=0, vmax=float(weights[head].max()),
                          interpolation="nearest")
        colorbar = figure.colorbar(image, ax=ax, fraction=0.046, pad=0.02)
        colorbar.ax.tick_params(labelsize=6)
        colorbar.set_label("attention weight (this head's scale)", fontsize=6)
        ax.set_xticks(range(len(words)), words, rotation=90, fontsize=6)
        ax.set_yticks(range(len(words)), words, fontsize=6)
        ax.set_title(f"head {head + 1}", fontsize=9)
        ax.set_xlabel("attended word (key)", fontsize=7)
        ax.set_ylabel("attending word (query)", fontsize=7)
        if highlight is not None:
            ax.add_patch(Rectangle((-0.5, highlight - 0.5), len(words), 1, fill=False,
                                   edgecolor="red", linewidth=0.8))


def plot_attention_lines(ax, words, weights, query, heads=None, colours=None):
    """The paper's line view on ``ax``: the words in two columns and, from word ``query`` (an
    index, left) to every word (right), a line per head in the head's colour whose opacity is the
    weight. Several heads' lines are drawn side by side, slightly apart."""
    import numpy as np

    heads = list(range(len(weights))) if heads is None else list(heads)
    colours = colours or _head_colours(len(weights))
    count = len(words)
    y = -np.arange(count)
    for rank, head in enumerate(heads):
        offset = 0.14 * (rank - (len(heads) - 1) / 2)
        for j in range(count):
            weight = float(weights[head][query][j])
            if weight > 0.005:
                ax.plot([0.1, 0.9], [y[query] + offset, y[j] + offset], color=colours[head],
                        alpha=min(weight, 1.0), linewidth=2.2, solid_capstyle="butt")
    for i, word in enumerate(words):
        ax.text(0.07, y[i], word, ha="right", va="center", fontsize=7,
                weight="bold" if i == query else "normal")
        ax.text(0.93, y[i], word, ha="left", va="center", fontsize=7)
    ax.set_xlim(-0.6, 1.6)
    ax.set_ylim(-count + 0.3, 0.8)
    ax.axis("off")


def _head_colours(heads):
    plt = _pyplot()
    return [plt.get_cmap("tab10")(h % 10) for h in range(heads)]


def attention_figure(options):
    import numpy as np

    plt = _pyplot()
    record, source, wrote_json = _attention_record(options)
    words, weights = record["words"], np.asarray(record["weights"])
    word = options.get("word") or "making"
    matches = [i for i, w in enumerate(words) if w.strip(".,;:!?").lower() == word.lower()]
    if not matches:
        raise Skipped(f"the word {word!r} is not in the sentence ({' '.join(words)})")
    query = matches[0]
    heads = len(weights)
    merged = (f"The model's {len(record['pieces'])} subword pieces are shown as {len(words)} words: "
              "attention from a word is the mean of its pieces' rows, to a word the sum of its "
              "pieces' columns.")
    heat = plt.figure(figsize=(10.5, 10.8 if heads > 2 else 5.8))
    plot_attention_heatmaps(heat, words, weights, highlight=query)
    heat.suptitle(_attention_title(record, "A colour scale per head; the row of "
                                   f"'{words[query]}' framed in red.", merged), fontsize=8)
    heat.tight_layout(rect=(0, 0, 1, 0.955))
    paths = [os.path.join(options["output_dir"], name) for name in FIGURES["attention"]]
    _save(heat, paths[0], options["dpi"])

    colours = _head_colours(heads)
    lines = plt.figure(figsize=(2.3 * (heads + 1), 0.2 * len(words) + 1.9))
    axes = lines.subplots(1, heads + 1)
    plot_attention_lines(axes[0], words, weights, query, colours=colours)
    axes[0].set_title(f"'{words[query]}', all heads", fontsize=9)
    for head in range(heads):
        plot_attention_lines(axes[head + 1], words, weights, query, heads=[head], colours=colours)
        axes[head + 1].set_title(f"'{words[query]}', head {head + 1}", fontsize=9,
                                 color=colours[head])
    from matplotlib.lines import Line2D

    lines.legend([Line2D([], [], color=c, linewidth=2) for c in colours],
                 [f"head {h + 1}" for h in range(heads)], loc="lower center", ncol=heads,
                 fontsize=7, frameon=False)
    lines.suptitle(_attention_title(
        record, f"As the paper's Figure 3: the attention of '{words[query]}' (left column) to every "
        "word (right column); line opacity = attention weight (below 0.005 left out).", merged),
        fontsize=8)
    lines.tight_layout(rect=(0, 0.03, 1, 0.9))
    _save(lines, paths[1], options["dpi"])
    return paths if wrote_json else paths[:2], source


# --- 5. and 6. from the benchmark JSON -----------------------------------------------------------

def _benchmark(results_dir, name, section):
    """The JSON of ``benchmarks.NAME`` in ``results_dir`` and its non-empty list ``section``, or
    Skipped saying what is missing."""
    path = os.path.join(results_dir, f"{name}.json")
    again = f"python -m benchmarks.{name} --output={path} writes it"
    if not os.path.isfile(path):
        raise Skipped(f"{path} not found ({again})")
    try:
        with open(path) as stream:
            result = json.load(stream)
    except ValueError as error:
        raise Skipped(f"{path} is not valid JSON ({error})") from None
    rows = result.get(section) if isinstance(result, dict) else None
    if not isinstance(rows, list) or not rows:
        raise Skipped(f"{path} has no '{section}' section with rows ({again})")
    return path, result, rows


def _fields(rows, names, path, section):
    """Each row's ``names`` (a dotted name reads a nested field), or Skipped naming the first
    missing one."""
    values = []
    for row in rows:
        picked = []
        for name in names:
            value = row
            for part in name.split("."):
                value = value.get(part) if isinstance(value, dict) else None
            if value is None:
                raise Skipped(f"{path}: a '{section}' row has no '{name}' (the benchmark's JSON "
                              "changed?)")
            picked.append(value)
        values.append(picked)
    return values


def decode_time_figure(options):
    plt = _pyplot()
    path, result, rows = _benchmark(options["results_dir"], "decoding", "length_sweep")
    fields = _fields(rows, ["output length", "cache", "batch", "seconds.median", "seconds.min",
                            "seconds.max"], path, "length_sweep")
    series = {}
    for row, (length, cache, batch, median, low, high) in zip(rows, fields):
        cached = str(cache).lower() in ("yes", "true", "1")
        key = (row.get("search", "search"), int(batch), cached)
        steps = row.get("decoder steps") or length
        series.setdefault(key, []).append((int(length), 1000 * median / batch, 1000 * low / batch,
                                           1000 * high / batch, 1000 * median / steps))
    figure, (per_sentence, per_step) = plt.subplots(1, 2, figsize=(10, 3.9))
    for (search, batch, cached), points in sorted(series.items(), key=lambda item: not item[0][2]):
        points.sort()
        lengths, median, low, high, step = (list(column) for column in zip(*points))
        label = f"{'cached' if cached else 'uncached'} ({search}, batch {batch})"
        style = dict(marker="o", linestyle="-" if cached else "--",
                     color="tab:blue" if cached else "tab:red", label=label)
        per_sentence.errorbar(lengths, median, yerr=[[m - lo for m, lo in zip(median, low)],
                                                     [hi - m for m, hi in zip(median, high)]],
                              capsize=2, **style)
        per_step.plot(lengths, step, **style)
    for ax in (per_sentence, per_step):
        ax.set_xscale("log", base=2)
        lengths = sorted({p[0] for points in series.values() for p in points})
        ax.set_xticks(lengths, [str(n) for n in lengths])
        ax.set_xlabel("output length (decoder steps, EOS masked)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        ax.set_ylim(bottom=0)
    per_sentence.set(ylabel="ms per sentence (median; bars: min-max)",
                     title="Decode time per sentence")
    per_step.set(ylabel="ms per decoder step (the whole batch)", title="Time per decoder step")
    # The model line names a run folder and thread settings: wrapped, so that the figure's width
    # never cuts it.
    subtitle = textwrap.fill(f"{result.get('model', 'model not recorded')}; "
                             f"{_machine_text(result.get('machine'))}; median of "
                             f"{result.get('runs', '?')} runs; no XLA", width=150)
    figure.suptitle("Decode time against output length, with and without the key/value cache "
                    f"(python -m benchmarks.decoding)\n{subtitle}", fontsize=8)
    figure.tight_layout()
    output = os.path.join(options["output_dir"], FIGURES["decode_time"][0])
    _save(figure, output, options["dpi"])
    return [output], f"from {path} ('length_sweep', measured {result.get('machine', {}).get('date')})"


def throughput_fractions(result, rows, path):
    """``[(preset, precision, xla, percent of the matmul peak of that precision, tokens/s)]``."""
    peaks = result.get("matmul_peak_flops")
    if not isinstance(peaks, dict) or not peaks:
        raise Skipped(f"{path} has no 'matmul_peak_flops' (the benchmark's JSON changed?)")
    fields = _fields(rows, ["preset", "precision", "model_flops_per_second"], path, "rows")
    out = []
    for row, (preset, precision, flops) in zip(rows, fields):
        if not peaks.get(precision):
            raise Skipped(f"{path}: no matmul peak for precision {precision!r} in "
                          "'matmul_peak_flops'")
        out.append((preset, precision, bool(row.get("xla", False)), 100 * flops / peaks[precision],
                    row.get("tokens_per_second")))
    return out


def _batches_text(data, rows):
    """What each preset's batches were: the shared batches of ``data``, or a row's own dataset and
    token budget (the main job's row trains on its own corpus)."""
    shared = [r["preset"] for r in rows if not r.get("dataset")]
    own = {}
    for row in rows:
        if row.get("dataset"):
            own.setdefault((row["dataset"], row.get("token_budget", 0)), []).append(row["preset"])
    parts = []
    if shared and data:
        parts.append(f"{', '.join(dict.fromkeys(shared))}: {data.get('dataset')} batches, "
                     f"{data.get('token_budget', 0):,} tokens per side")
    for (dataset, budget), presets in own.items():
        parts.append(f"{', '.join(dict.fromkeys(presets))}: {dataset} batches, {budget:,} "
                     "tokens per side")
    return parts or ["batches not recorded"]


def training_throughput_figure(options):
    plt = _pyplot()
    path, result, rows = _benchmark(options["results_dir"], "training_throughput", "rows")
    bars = throughput_fractions(result, rows, path)
    presets = list(dict.fromkeys(b[0] for b in bars))
    kinds = list(dict.fromkeys((b[1], b[2]) for b in bars))
    width = 0.8 / len(kinds)
    colours = {"float32": "tab:blue", "bfloat16": "tab:green", "float16": "tab:purple"}
    figure, ax = plt.subplots(figsize=(8.5, 4.2))
    for index, (precision, xla) in enumerate(kinds):
        for preset, bar_precision, bar_xla, percent, tokens in bars:
            if (bar_precision, bar_xla) != (precision, xla):
                continue
            x = presets.index(preset) - 0.4 + width * (index + 0.5)
            ax.bar(x, percent, width * 0.92, color=colours.get(precision, "tab:grey"),
                   hatch="//" if xla else None, edgecolor="white" if xla else None,
                   label=f"{precision}, XLA {'on' if xla else 'off'}")
            ax.text(x, percent + 1, f"{percent:.0f}%" + (f"\n{tokens:,.0f}\ntok/s" if tokens else ""),
                    ha="center", va="bottom", fontsize=6.5)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), fontsize=7, loc="upper left")
    ax.set_xticks(range(len(presets)), [f"preset {p}" for p in presets])
    ax.set_ylabel("model FLOP/s, % of the matmul peak\nof the same precision")
    ax.set_ylim(0, max(100, max(b[3] for b in bars) * 1.25))
    ax.axhline(100, color="grey", linewidth=0.8, linestyle=":")
    ax.grid(axis="y", alpha=0.3)
    peaks = result["matmul_peak_flops"]
    data = result.get("data") or {}
    figure.suptitle("Training throughput as a share of the matmul peak "
                    "(python -m benchmarks.training_throughput)", fontsize=10)
    ax.set_title(
        f"{_machine_text(result.get('machine'))}; matmul peak ({result.get('matmul_size', '?')}^3): "
        + ", ".join(f"{p} {v / 1e9:,.0f} GFLOP/s" for p, v in peaks.items())
        + "\n" + "; ".join(_batches_text(data, rows))
        + "\nmodel FLOPs count real tokens only; tok/s: source + target tokens",
        fontsize=7.5)
    figure.tight_layout()
    output = os.path.join(options["output_dir"], FIGURES["training_throughput"][0])
    _save(figure, output, options["dpi"])
    return [output], f"from {path} (measured {result.get('machine', {}).get('date')})"


DRAWERS = {"learning_curve": learning_curve_figure, "long_recipe": long_recipe_figure,
           "figure1": figure1_figure,
           "figure2": figure2_figure, "schedule": schedule_figure, "attention": attention_figure,
           "decode_time": decode_time_figure, "training_throughput": training_throughput_figure}


def make_figures(names, options, say=print):
    """Draws the pictures ``names`` (keys of FIGURES, in FIGURES' order) with ``options`` (the
    flags' values by name), one line each; returns the names left as they were."""
    skipped = []
    for name in [n for n in FIGURES if n in names]:
        try:
            paths, source = DRAWERS[name](options)
        except Skipped as reason:
            skipped.append(name)
            kept = ", ".join(os.path.join(options["output_dir"], f) for f in FIGURES[name])
            say(f"figures: {name}: NOT drawn: {reason}; {kept} left as it was")
            continue
        sizes = ", ".join(f"{p} ({os.path.getsize(p) / 1024:.0f} KB)" for p in paths)
        say(f"figures: {name}: wrote {sizes}; {source}")
    return skipped


def main(argv):
    del argv  # console.run has refused stray arguments
    unknown = [name for name in FLAGS.figures if name not in FIGURES]
    if unknown or not FLAGS.figures:
        raise app.UsageError(f"--figures={','.join(FLAGS.figures)}: choose from "
                             f"{', '.join(FIGURES)}.")
    if FLAGS.labels and len(FLAGS.labels) != len(FLAGS.model_dirs):
        raise app.UsageError("--labels needs one label per --model_dirs entry.")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        sys.exit("figures: matplotlib is not installed: pip install -e '.[notebooks]'")
    options = {name: FLAGS[name].value for name in (
        "model_dirs", "labels", "long_model_dir", "long_label", "runs_machine", "results_dir",
        "output_dir", "attention_model_dir",
        "attention_checkpoint", "sentence", "word", "layer", "dpi")}
    skipped = make_figures(FLAGS.figures, options)
    if skipped:
        sys.exit(f"figures: {len(skipped)} of {len(FLAGS.figures)} pictures not drawn "
                 f"({', '.join(skipped)}): see above.")


if __name__ == "__main__":
    from trainers import console

    console.run(main)
