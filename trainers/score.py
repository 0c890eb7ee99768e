"""Scores given translations by forced decoding, and rescores n-best lists, with trained models.

    python -m trainers.score --model_dir=runs/small --input=pairs.tsv            # source<TAB>target
    python -m trainers.score --saved_model=saved_models/small < pairs.tsv > scores.tsv
    python -m trainers.translate --model_dir=runs/small --input=test.en --n_best=4 > nbest.tsv
    python -m trainers.score --model_dir=runs/small,runs/other --nbest=nbest.tsv --sources=test.en

Each pair is scored as the model saw its training pairs (teacher forcing): ``LOG_PROB`` is the
sum of log P(y_t | y_<t, x) over the target's subwords and its EOS, ``TOKENS`` their count and
``NLL_PER_TOKEN`` = -LOG_PROB / TOKENS (``inference.Translator.score_text``; an export's ``score``
signature). Both sides are tokenized as ``trainers.translate`` tokenizes its input.

Pairs (--input, else stdin; '-' is stdin): one ``source<TAB>target`` per line, exactly one tab; a
line without one ends the program with one line naming FILE:LINE (status 2); empty lines at the
input's end, which many editors leave, are no pairs and are left out. One output line per pair
line, in input order, ``LOG_PROB<TAB>TOKENS<TAB>NLL_PER_TOKEN`` per model (three columns for
each, in the order the models are named): ``paste pairs.tsv scores.tsv`` sets them side by side.
With --alignments each of these lines ends in a tab and the target's word alignment to its source,
``SOURCE-TARGET`` pairs of 0-based word indices, by the first model (its last decoder layer's
attention; a run's ``Translator.align_text``, an export's ``align`` signature): what
``trainers.translate --alignments`` prints for its own translations, here for given ones (fairseq's
``--score-reference --print-alignment``).

n-best lists (--nbest FILE or '-', with --sources the sentences translated): the lines of
``trainers.translate --n_best``, ``INDEX<TAB>SCORE<TAB>TRANSLATION``, written again with each
model's LOG_PROB of (source line INDEX of --sources, TRANSLATION) between SCORE and TRANSLATION:
``INDEX<TAB>SCORE<TAB>LOG_PROB_1[<TAB>LOG_PROB_2 ...]<TAB>TRANSLATION``. A line with score -inf (a
slot the search left empty) is no hypothesis: its columns are -inf.

Models: --model_dir (a training run, with --checkpoint's checkpoint, by default averaged, else ema,
else best, else latest) or --saved_model (an export with the ``score`` signature); several of either
comma-separated (``--model_dir=runs/a,runs/b``) or the flag repeated (``--model_dir=runs/a
--model_dir=runs/b``), one score column each in the order named, as translate and evaluate take an
ensemble (``run_flags.ModelsFlag``). stderr names each one. Input is read as bytes, in chunks of a
few batches, each batched by length and written to stdout as soon as it is scored (--output FILE:
written whole at the end). A side longer than the model's ``max_length`` is cut (the target: scored
on its first max_length - 1 subwords without EOS) and its line number goes to stderr.
"""

import itertools
import math
import sys

from absl import app, flags

from . import checks, console, run_flags, thread_flags

flags.adopt_module_key_flags(thread_flags)
flags.adopt_module_key_flags(run_flags)
flags.FLAGS["model_dir"].help = ("A training run's model_dir (config.json + checkpoints); "
                                 f"{run_flags.SEVERAL}: one score column per run.")
flags.DEFINE_flag(run_flags.ModelsFlag(
    "saved_model", "Exported SavedModel with the score signature: a version folder or the "
    f"model's base folder (its highest version); {run_flags.SEVERAL}: one score column per "
    "model."))
flags.mark_flags_as_mutual_exclusive(["model_dir", "saved_model"])
flags.DEFINE_string("input", None, "TSV of source<TAB>target pairs to score, one per line "
                    "(default and '-': stdin).")
flags.DEFINE_string("nbest", None, "n-best list to rescore, as trainers.translate writes n-best lists "
                    "('-': stdin); needs --sources.")
flags.DEFINE_string("sources", None, "With --nbest: the sentences that were translated, one per line "
                    "(translate's --input); an n-best line's INDEX is a 0-based line of it.")
flags.mark_flags_as_mutual_exclusive(["input", "nbest"])
flags.DEFINE_string("output", None, "Output file, written whole at the end (default: stdout, "
                    "written as each chunk of input is scored).")
flags.DEFINE_integer("batch_size", 64, "Pairs per batch (sorted by length).", lower_bound=1)
flags.DEFINE_bool("alignments", False,
                  "With pairs (not --nbest): end each line in a TAB and the target's word alignment "
                  "to its source by the first model (SOURCE-TARGET word indices, as trainers.translate "
                  "--alignments prints them; the last decoder layer's attention).")

FLAGS = flags.FLAGS
# Lines read before scoring, in batches: enough to sort into batches of similar length, few enough
# that the first scores come soon.
CHUNK_BATCHES = 4
STDIN = "-"


def check_flags():
    """The models, the input and the output: before any work."""
    if not FLAGS.model_dir and not FLAGS.saved_model:
        raise app.UsageError("name the model(s) to score with: --model_dir or --saved_model.")
    if FLAGS.saved_model:
        run_flags.check_saved_models(FLAGS.saved_model)
    if (FLAGS.nbest is None) != (FLAGS.sources is None):
        raise app.UsageError("--nbest and --sources go together: the n-best list and the sentences "
                             "it translates.")
    if FLAGS.alignments and FLAGS.nbest is not None:
        raise app.UsageError("--alignments: with pairs only (--input or stdin), not --nbest.")
    if FLAGS.nbest == STDIN and FLAGS.sources == STDIN:
        raise app.UsageError("--nbest and --sources cannot both be stdin ('-').")
    for name in ("input", "nbest", "sources"):
        if FLAGS[name].value not in (None, STDIN):
            checks.input_file(name, FLAGS[name].value)
    if FLAGS.output is not None:
        checks.output_file("output", FLAGS.output)
    if not FLAGS.saved_model:  # last: finding a run's latest checkpoint starts TensorFlow
        run_flags.check_runs()


def load_score_fns():
    """``([(score_fn, description)], align_fn)``: one score function per model in column order
    (``inference.score_in_batches``' ``score_fn``), and with --alignments the first model's
    ``align_fn`` (``inference.align_in_batches``'), else None."""
    from keras_transformer import inference

    models, align_fn = [], None  # the first model aligns
    for path in run_flags.model_dirs() if FLAGS.model_dir else []:
        translator, loaded = run_flags.load_run_translator(path)
        if FLAGS.alignments and not models:
            align_fn = translator.align_function()
        models.append((translator.score_function(), loaded))
    for path in run_flags.saved_models(FLAGS.saved_model) if FLAGS.saved_model else []:
        names = [inference.SCORE_SIGNATURE]
        if FLAGS.alignments and not models:  # from the same load of the export
            names.append(inference.ALIGN_SIGNATURE)
        (score_fn, *align), version = inference.load_exported_fns(path, *names)
        align_fn = align[0] if align else align_fn
        models.append((score_fn, f"{version} (SavedModel)"))
    return models, align_fn


def chunks(path):
    """``(number of the first line, lines)`` of the file ``path`` (``-``: stdin) a few batches at a
    time, as bytes without their line breaks (and without a UTF-8 byte order mark)."""
    from keras_transformer.data.files import BOM

    stream = sys.stdin.buffer if path == STDIN else open(path, "rb")
    try:
        number = 1
        while True:
            lines = [line.rstrip(b"\n").rstrip(b"\r")
                     for line in itertools.islice(stream, CHUNK_BATCHES * FLAGS.batch_size)]
            if not lines:
                return
            if number == 1:
                lines[0] = lines[0].removeprefix(BOM.encode())
            yield number, lines
            number += len(lines)
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()


def shown(path):
    return "stdin" if path == STDIN else path


def score_pairs(models, pairs):
    """``(per pair: one result per model, or None for an entry of pairs that is None)``."""
    from keras_transformer import inference

    todo = [i for i, pair in enumerate(pairs) if pair is not None]
    columns = [inference.score_in_batches(fn, [pairs[i][0] for i in todo],
                                          [pairs[i][1] for i in todo], FLAGS.batch_size)
               for fn, _ in models] if todo else []
    results = [None] * len(pairs)
    for row, i in enumerate(todo):
        results[i] = [column[row] for column in columns]
    return results


def score_tsv(models, path, output, align_fn=None):
    """Scores the pairs of ``path`` (with ``align_fn``, aligns them too); the number of lines and
    those cut to a maximum length."""
    from keras_transformer import inference
    from keras_transformer.data.files import split_tsv_line

    count, truncated = 0, []
    blank = None  # the first of the empty lines read last: left out if only empty lines follow
    for first, lines in chunks(path):
        if blank is not None and any(line.strip() for line in lines):
            lines, first, blank = [b""] * (first - blank) + lines, blank, None
        # Empty lines at the input's end (many editors leave them) are no pairs, as in data files.
        end = len(lines)
        while end and not lines[end - 1].strip():
            end -= 1
        if end < len(lines):
            blank = blank if blank is not None else first + end
            lines = lines[:end]
        try:
            pairs = [split_tsv_line(line, f"{shown(path)}:{first + i}") for i, line in enumerate(lines)]
        except ValueError as error:
            raise app.UsageError(str(error)) from None
        results = score_pairs(models, pairs)
        scored = ["\t".join(f"{r['log_prob']:.4f}\t{r['tokens']}\t{r['nll_per_token']:.4f}"
                            for r in row) for row in results]
        if align_fn is not None and pairs:
            alignments = inference.align_in_batches(align_fn, [s for s, _ in pairs],
                                                    [t for _, t in pairs], FLAGS.batch_size)
            scored = [f"{row}\t{alignment}" for row, alignment in zip(scored, alignments)]
        output.write([row.encode() for row in scored])
        truncated += [first + i for i, row in enumerate(results) if any(r["truncated"] for r in row)]
        count += len(lines)
    return count, truncated


def read_sources(path):
    """The lines of ``path`` (``-``: stdin) as bytes, split as ``trainers.translate`` reads them."""
    if path == STDIN:
        data = sys.stdin.buffer.read()
    else:
        with open(path, "rb") as stream:
            data = stream.read()
    lines = data.split(b"\n")
    if lines[-1] == b"":  # the last line's break, or an empty file
        lines.pop()
    return [line.rstrip(b"\r") for line in lines]


def nbest_columns(results, models):
    """The LOG_PROB columns of an n-best line: one per model, -inf for no hypothesis."""
    if results is None:
        return [b"-inf"] * models
    return [f"{result['log_prob']:.4f}".encode() for result in results]


def rescore_nbest(models, path, output):
    """Adds each model's LOG_PROB to the n-best lines of ``path``; the number of lines and those
    whose pair was cut to a maximum length."""
    from keras_transformer.inference import parse_nbest_line

    sources = read_sources(FLAGS.sources)
    count, truncated = 0, []
    for first, lines in chunks(path):
        entries = []
        for number, line in enumerate(lines, start=first):
            try:
                index, score, text = parse_nbest_line(line)
            except ValueError as error:
                raise app.UsageError(f"{shown(path)}:{number}: {error}") from None
            if index >= len(sources):
                raise app.UsageError(f"{shown(path)}:{number}: INDEX {index}, but --sources="
                                     f"{shown(FLAGS.sources)} has {len(sources)} line(s); give the "
                                     "file that was translated.")
            entries.append((line[:len(line) - len(text)], text,
                            None if score == -math.inf else (sources[index], text)))
        results = score_pairs(models, [pair for _, _, pair in entries])
        output.write([head + b"\t".join(nbest_columns(row, len(models))) + b"\t" + text
                      for (head, text, _), row in zip(entries, results)])
        truncated += [first + i for i, row in enumerate(results)
                      if row and any(r["truncated"] for r in row)]
        count += len(lines)
    return count, truncated


def main(argv):
    check_flags()
    thread_flags.apply()
    models, align_fn = load_score_fns()
    for column, (_, description) in enumerate(models, start=1):
        print(f"score: model {column}: {description}", file=sys.stderr, flush=True)
    output = console.Output(FLAGS.output)
    if FLAGS.nbest is not None:
        count, truncated = rescore_nbest(models, FLAGS.nbest, output)
    else:
        count, truncated = score_tsv(models, FLAGS.input or STDIN, output, align_fn)
    output.close()
    if truncated:
        print(f"score: {len(truncated)} line(s) with a side longer than a model's maximum length "
              f"were cut to it before scoring: line(s) {console.listed(truncated)}.", file=sys.stderr)
    print(f"score: {count} line(s) scored with {len(models)} model(s)"
          + (f" into {FLAGS.output}" if FLAGS.output else "") + ".", file=sys.stderr)


if __name__ == "__main__":
    console.run(main)
