"""Translates sentences with a trained model: from a training run's checkpoint or an exported SavedModel.

    python -m trainers.translate --model_dir=runs/small --input=test.en --output=test.de
    python -m trainers.translate --model_dir=runs/small --checkpoint=averaged --text="Good morning."
    python -m trainers.translate --saved_model=saved_models/small < test.en > test.de
    python -m trainers.translate --saved_model=saved_models/small/3 --text="Hello." --show_scores

One output line per input line, in input order (sentences are batched by length, see
``inference.translate_in_batches``); an empty or whitespace-only line gives an empty line. Input is
read as bytes: invalid UTF-8 is replaced by U+FFFD, not fatal. An input longer than the model's
``max_length`` subwords is cut to it and translated anyway; its line number goes to stderr.
With --show_scores each line is ``SCORE<TAB>TRANSLATION`` (score = log P / length penalty).

Beam size, alpha and the extra output length apply in checkpoint mode (--model_dir); an exported
SavedModel has the settings it was exported with baked into its graph (see its assets/config.json).
"""

import sys

from absl import app, flags

from trainers import checks, console, decoding_flags, thread_flags
from trainers.console import stderr_progress

flags.adopt_module_key_flags(thread_flags)
flags.adopt_module_key_flags(decoding_flags)
flags.DEFINE_string("saved_model", None,
                    "Exported SavedModel: a version folder (with saved_model.pb) or the model's base "
                    "folder (its highest numeric version is used). Beam settings are baked in.")
flags.DEFINE_string("model_dir", None, "A training run's model_dir (config.json + checkpoints).")
flags.DEFINE_string("checkpoint", None,
                    "With --model_dir: 'averaged' (MODEL_DIR/averaged/ckpt), a checkpoint prefix "
                    "(e.g. runs/small/ckpt-1000) or a folder; default the latest checkpoint.")
flags.DEFINE_string("vocab_path", None,
                    "With --model_dir: the SentencePiece vocabulary, if not the one the run recorded.")
flags.mark_flags_as_mutual_exclusive(["model_dir", "saved_model"], required=True)
flags.DEFINE_string("input", None, "File of sentences, one per line (default: --text, else stdin).")
flags.DEFINE_multi_string("text", None, "A sentence to translate (repeatable).")
flags.DEFINE_string("output", None, "Output file (default stdout); written whole at the end.")
flags.DEFINE_integer("batch_size", 32, "Sentences per batch (sorted by length).", lower_bound=1)
flags.mark_flags_as_mutual_exclusive(["input", "text"])
flags.DEFINE_bool("show_scores", False, "Write SCORE<TAB>TRANSLATION lines.")

FLAGS = flags.FLAGS
MAX_TRUNCATION_NOTES = 20


def read_lines():
    """Input lines as bytes (no decoding here: invalid UTF-8 is the graph's business)."""
    if FLAGS.text:
        return [t.encode("utf-8", "surrogateescape") for t in FLAGS.text]
    if FLAGS.input is not None:
        with open(FLAGS.input, "rb") as stream:
            data = stream.read()
    else:
        data = sys.stdin.buffer.read()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":  # the newline ending the last line
        lines.pop()
    return [line.rstrip(b"\r") for line in lines]


def check_flags():
    """The run folder (and its checkpoint) or the SavedModel, the input and the output: before
    any work."""
    if FLAGS.saved_model is not None:
        given = [f"--{name}" for name in ("checkpoint", "vocab_path")
                 if FLAGS[name].present] + decoding_flags.given()
        if given:
            raise app.UsageError(f"{', '.join(given)} only apply with --model_dir; a SavedModel has "
                                 "its search settings baked in (re-export to change them).")
        checks.saved_model("saved_model", FLAGS.saved_model)
    else:
        checks.run_dir("model_dir", FLAGS.model_dir, FLAGS.checkpoint)
        if FLAGS.vocab_path is not None:
            checks.input_file("vocab_path", FLAGS.vocab_path)
    if FLAGS.input is not None:
        checks.input_file("input", FLAGS.input)
    if FLAGS.output is not None:
        checks.output_file("output", FLAGS.output)


def load_translate_fn():
    """tf.string [batch] -> {"translations", "scores", "truncated"}, traced once."""
    from keras_transformer import inference

    if FLAGS.saved_model is not None:
        return inference.load_exported_translate_fn(FLAGS.saved_model)

    config = decoding_flags.decoding_config()
    from keras_transformer import runs

    translator = runs.load_translator(FLAGS.model_dir, FLAGS.checkpoint, config,
                                           FLAGS.vocab_path)
    return translator.text_function(), FLAGS.model_dir


def write_output(lines):
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    if FLAGS.output is None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    from keras_transformer import writing

    writing.write_file(FLAGS.output, data)


def main(argv):
    check_flags()
    thread_flags.apply()
    lines = read_lines()
    translate_fn, source = load_translate_fn()

    from keras_transformer.inference import translate_in_batches

    # Empty and whitespace-only lines are answered here: no need to run the model on them.
    todo = [i for i, line in enumerate(lines) if line.strip()]
    progress = stderr_progress(len(todo)) if FLAGS.input is not None and todo else None
    results = translate_in_batches(translate_fn, [lines[i] for i in todo], FLAGS.batch_size,
                                   progress)
    output = [""] * len(lines)
    truncated = []
    for index, result in zip(todo, results):
        # One line per input line, even if the model spells a newline byte.
        text = result["translation"].replace("\r", " ").replace("\n", " ")
        output[index] = f"{result['score']:.4f}\t{text}" if FLAGS.show_scores else text
        if result["truncated"]:
            truncated.append(index + 1)
    if FLAGS.show_scores:
        output = [line or "0.0000\t" for line in output]
    write_output(output)
    if truncated:
        shown = ", ".join(map(str, truncated[:MAX_TRUNCATION_NOTES]))
        more = f" and {len(truncated) - MAX_TRUNCATION_NOTES} more" if len(
            truncated) > MAX_TRUNCATION_NOTES else ""
        print(f"translate: {len(truncated)} input line(s) longer than the model's maximum length were "
              f"cut to it before translating: line(s) {shown}{more}.", file=sys.stderr)
    print(f"translate: {len(lines)} line(s) translated with {source}"
          + (f" into {FLAGS.output}" if FLAGS.output else "") + ".", file=sys.stderr)


if __name__ == "__main__":
    console.run(main)
