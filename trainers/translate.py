"""Translates sentences with a trained model: from a training run's checkpoint or an exported SavedModel.

    python -m trainers.translate --text="Opens the Customize dialog."   # the main job's model
    python -m trainers.translate --model_dir=runs/small          # interactive: type, Enter, read
    python -m trainers.translate --model_dir=runs/small --input=test.en --output=test.de
    python -m trainers.translate --model_dir=runs/small --checkpoint=best --text="Good morning."
    python -m trainers.translate --saved_model=saved_models/small < test.en > test.de
    python -m trainers.translate --saved_model=saved_models/small/3 --text="Hello." --n_best=4
    python -m trainers.translate --model_dir=runs/small --sampling_topp=0.9 --seed=1 --input=test.en
    python -m trainers.translate --model_dir=runs/a,runs/b --input=test.en   # an ensemble
    python -m trainers.translate --sampling_topp=0.9 --text="Hello."  # any search, a SavedModel too

With neither --model_dir nor --saved_model the main job's model translates: its run
(runs/quickstart, once ``python -m trainers.quickstart`` has trained it), else the model that comes
with the project (``trainers/shipped.py``, saved_models/README.md), so that there is something to
translate with before any training. stderr names the one used.

The sentences come from --text, else --input, else stdin. With stdin a terminal the program is
interactive: a prompt on stderr, each line translated as soon as it is entered, until Ctrl-D or
Ctrl-C. From a pipe or a file, lines are translated as they arrive, in chunks of a few batches
(fewer lines when the input pauses); each chunk is batched by length
(``inference.translate_in_batches``) and written to stdout in input order as soon as it is done.
--output FILE is written whole at the end instead. A progress counter goes to stderr when stderr is
a terminal and stdout is not.

One output line per input line; an empty or whitespace-only line gives an empty line. Input is read
as bytes: invalid UTF-8 is replaced by U+FFFD, not fatal. An input longer than the model's
``max_length`` subwords is cut to it and translated anyway; its line number goes to stderr.
With --show_scores each line is ``SCORE<TAB>TRANSLATION`` (score = log P / length penalty).
With --alignments each line ends in a tab and the translation's word alignment to its input,
``SOURCE-TARGET`` pairs of 0-based word indices (``inference.word_alignment``; docs/decoding.md).
With --n_best=K > 1 each input gets K lines ``INDEX<TAB>SCORE<TAB>TRANSLATION``, best first, INDEX
being the 0-based input line number; an empty input line gets the empty translation with score 0,
then K - 1 lines with score -inf and no text (as does a slot the search could not fill). With
--alignments too, each of them ends in a tab and that hypothesis's alignment (fairseq's n-best
lists with --print-alignment carry one per hypothesis).

Any sampling flag (--sampling_topk, --sampling_topp, --sampling_temperature, --seed) translates
each input into one random sample instead of the beam's best (``inference.SamplingConfig``),
scored as the beam's (log P under the model, not the sampling distribution / length penalty); not
with --n_best. Several runs in --model_dir, comma-separated (``--model_dir=runs/a,runs/b``) or the
flag repeated (``--model_dir=runs/a --model_dir=runs/b``), are an ensemble, decoded together (the
members' log-probabilities averaged at every step): memory and time grow linearly with the runs.
Several SavedModels in --saved_model, named either way, are an ensemble the same way (rebuilt here).

Before translating, stderr names the checkpoint (and why it is the one) or the SavedModel, and the
search settings. A SavedModel translates with its own graph, the search it was exported with (its
assets/config.json), as a server runs it. Given any search flag (--beam_size, --alpha,
--extra_length) or sampling flag, its model is rebuilt here instead and its weights searched by
this program, with the settings it was exported with, each flag given replacing its own
(``run_flags.load_exported_translator``): so the shipped model samples, or gives n-best lists
longer than its beam, without its training run. With --alignments it aligns by its own graph
too (its ``align`` signature, the last layer's); with --alignment_layer, or if it was exported
before that signature, its model is rebuilt here for them.
"""

import os
import select
import signal
import sys

from absl import app, flags

from . import checks, console, decoding_flags, run_flags, sampling_flags, thread_flags
from .console import stderr_progress

flags.adopt_module_key_flags(thread_flags)
flags.adopt_module_key_flags(decoding_flags)
flags.adopt_module_key_flags(run_flags)
flags.adopt_module_key_flags(sampling_flags)
flags.DEFINE_flag(run_flags.ModelsFlag(
    "saved_model", "Exported SavedModel: a version folder (with saved_model.pb) or the model's "
    "base folder (its highest numeric version is used). Translated by its own graph, with the "
    "search it was exported with; any search or sampling flag searches its weights here instead, "
    f"as do {run_flags.SEVERAL} (an ensemble, as for --model_dir)."))
flags.DEFINE_string("vocab_path", None,
                    "With --model_dir: the SentencePiece vocabulary, if not the one the run recorded.")
flags.mark_flags_as_mutual_exclusive(["model_dir", "saved_model"])
flags.DEFINE_string("input", None, "File of sentences, one per line ('-' or none: --text, else "
                    "stdin; a terminal on stdin makes the program interactive).")
flags.DEFINE_multi_string("text", None, "A sentence to translate (repeatable).")
flags.DEFINE_string("output", None, "Output file, written whole at the end (default: stdout, "
                    "written as each chunk of input is translated).")
flags.DEFINE_integer("batch_size", 64, "Sentences per batch (sorted by length).", lower_bound=1)
flags.mark_flags_as_mutual_exclusive(["input", "text"])
flags.DEFINE_bool("show_scores", False, "Write SCORE<TAB>TRANSLATION lines (--n_best > 1 always "
                  "writes the scores).")
flags.DEFINE_bool("alignments", False,
                  "Append to each translation a TAB and its word alignment to the input: "
                  "SOURCE-TARGET pairs of 0-based indices of whitespace-separated words (Pharaoh "
                  "format, as fast_align and fairseq write it), each translated word with the "
                  "source word its subwords attended to most in a decoder layer "
                  "(--alignment_layer; heads averaged, as fairseq and OpenNMT-tf align); with "
                  "--n_best, each hypothesis's. A SavedModel aligns with its own align signature "
                  "(the last layer's); for another layer its model is rebuilt here.")
flags.DEFINE_integer("alignment_layer", -1,
                     "With --alignments: the decoder layer whose encoder-decoder attention aligns, "
                     "0 the first, negative from the last: -1 the last (fairseq's and OpenNMT-tf's "
                     "default), -2 the one before (Garg et al. 2019 align best with the "
                     "penultimate of 6 layers).")
flags.DEFINE_integer("n_best", 1,
                     "Write the K best hypotheses of the beam per input, best first, as "
                     "INDEX<TAB>SCORE<TAB>TRANSLATION lines (INDEX: the 0-based input line); at most "
                     "the beam size; not with sampling. 1: one translation per line.",
                     lower_bound=1)

FLAGS = flags.FLAGS
# Lines read before translating, in batches: enough to sort into batches of similar length, few
# enough that the first translations come soon.
CHUNK_BATCHES = 4
PROMPT = "> "


def input_file():
    """--input's file, or None for stdin (no --input, or ``-`` as trainers.score takes it)."""
    return None if FLAGS.input in (None, "-") else FLAGS.input


def interactive():
    """Typed sentences: stdin is a terminal and no other input is named."""
    return (input_file() is None and not FLAGS.text and sys.stdin is not None
            and sys.stdin.isatty())


def check_flags():
    """The run folder (and its checkpoint) or the SavedModel, the input and the output: before
    any work. The run folders last: finding a run's latest checkpoint starts TensorFlow, and a
    mistyped path is answered at once."""
    if FLAGS.model_dir is None and FLAGS.saved_model is None:
        run_flags.choose_default_model()
    sampling = sampling_flags.given()
    if sampling and FLAGS.n_best > 1:
        raise app.UsageError(f"--n_best={FLAGS.n_best} with {', '.join(sampling)}: sampling draws "
                             "one translation per input, not an n-best list; drop one of them.")
    if FLAGS["alignment_layer"].present and not FLAGS.alignments:
        raise app.UsageError("--alignment_layer: only with --alignments.")
    if FLAGS.saved_model is not None:
        run_flags.check_saved_models(FLAGS.saved_model)
    elif FLAGS.vocab_path is not None:
        checks.input_file("vocab_path", FLAGS.vocab_path)
    if FLAGS.n_best > FLAGS.beam_size and (FLAGS.saved_model is None or FLAGS["beam_size"].present):
        raise app.UsageError(f"--n_best={FLAGS.n_best} exceeds --beam_size={FLAGS.beam_size}: "
                             "the search keeps only beam_size hypotheses; raise --beam_size or "
                             "lower --n_best.")
    if input_file() is not None:
        checks.input_file("input", input_file())
    if FLAGS.output is not None:
        checks.output_file("output", FLAGS.output)
    if FLAGS.saved_model is None:
        run_flags.check_runs()


def check_exported_beam(beam_size, source):
    """--n_best within the beam the SavedModel ``source`` was exported with."""
    if beam_size is not None and FLAGS.n_best > beam_size:
        raise app.UsageError(f"--n_best={FLAGS.n_best} exceeds the beam size {beam_size} {source} "
                             f"was exported with: pass --beam_size={FLAGS.n_best} to search its "
                             "weights here with that beam, or lower --n_best.")


def load_translate_fn():
    """``(translate, source, description)``: ``translate(sentences, progress)`` gives one result
    per sentence (``inference.translate_in_batches``'s, or with --n_best > 1
    ``translate_nbest_in_batches``'s), with --alignments each with its alignment (``aligned``);
    the model's folder; the model, checkpoint and search settings, for stderr."""
    from keras_transformer import inference, weights

    nbest = FLAGS.n_best > 1
    batches = inference.translate_nbest_in_batches if nbest else inference.translate_in_batches
    # A SavedModel is rebuilt also for sampling and for another layer's alignments (the
    # attention), which no signature of its graph serves.
    if FLAGS.saved_model is not None and not run_flags.rebuilds_saved_model(
            sampling_flags.given(), FLAGS.alignment_layer != -1):
        try:
            return exported_translate_fn(nbest, batches)
        except inference.MissingSignature as error:
            if error.name != inference.ALIGN_SIGNATURE:
                raise ValueError(f"--n_best={FLAGS.n_best}: {error}") from None
            # An export older than its align signature: aligned by the model rebuilt here.
    if FLAGS.saved_model is not None:
        translator, description = run_flags.load_exported_translator(FLAGS.saved_model)
        paths = run_flags.saved_models(FLAGS.saved_model)
        source = (weights.exported_version_path(paths[0]) if len(paths) == 1
                  else FLAGS.saved_model)
        check_exported_beam(translator.decoding.beam_size, source)
    else:
        translator, description = run_flags.load_translator(decoding_flags.decoding_config(),
                                                            FLAGS.vocab_path)
        source = FLAGS.model_dir
    sampling = sampling_flags.sampling_config()
    if sampling is not None:
        description += f", {sampling_flags.describe(sampling)}"
    fn = translator.nbest_function() if nbest else translator.text_function(sampling)
    if FLAGS.alignments:
        try:
            align_fn = translator.align_function(FLAGS.alignment_layer)
        except ValueError as error:
            raise app.UsageError(f"--{error}") from None
        return aligned(fn, batches, align_fn), source, description
    return in_batches(fn, batches), source, description


def exported_translate_fn(nbest, batches):
    """``load_translate_fn``'s result from the export's own graph, as a server runs it: its text
    or n-best signature, with --alignments its align signature (the last layer's), from one load
    of it."""
    from keras_transformer import inference, weights

    names = [inference.NBEST_SIGNATURE if nbest else inference.TEXT_SIGNATURE]
    if FLAGS.alignments:
        names.append(inference.ALIGN_SIGNATURE)
    source = weights.exported_version_path(FLAGS.saved_model)
    decoding = inference.exported_decoding_config(source)
    if nbest and decoding is not None:  # the beam its graph was traced with, as recorded
        check_exported_beam(decoding.beam_size, source)  # before the graph's load
    (fn, *align_fn), source = inference.load_exported_fns(source, *names)
    settings = decoding_flags.describe(decoding) if decoding else "search settings as exported"
    description = f"{run_flags.describe_export(source)}, {settings}"
    translate = aligned(fn, batches, *align_fn) if align_fn else in_batches(fn, batches)
    return translate, source, description


def in_batches(fn, batches):
    """``load_translate_fn``'s ``translate``: ``fn`` (a text or n-best function) by ``batches``."""
    return lambda sentences, progress=None: batches(fn, sentences, FLAGS.batch_size, progress)


def aligned(translate_fn, batches, align_fn):
    """``load_translate_fn``'s ``translate`` for --alignments: each result with its
    ``"alignments"``, the word alignment of each translation printed (the one, or the --n_best
    list's), found by forced decoding of the translation (``inference.align_in_batches``)."""
    from keras_transformer import inference

    def translate(sentences, progress=None):
        results = batches(translate_fn, sentences, FLAGS.batch_size, progress)
        hypotheses = [result["translations"][:FLAGS.n_best] if FLAGS.n_best > 1
                      else [result["translation"]] for result in results]
        links = iter(inference.align_in_batches(
            align_fn, [s for s, texts in zip(sentences, hypotheses) for _ in texts],
            [text for texts in hypotheses for text in texts], FLAGS.batch_size))
        return [{**result, "alignments": [next(links) for _ in texts]}
                for result, texts in zip(results, hypotheses)]

    return translate


class LineReader:
    """The lines of a file descriptor as they arrive, as bytes (no decoding here: invalid UTF-8 is
    the graph's business). ``read(limit)`` waits for one line at most: a slow writer (a person at
    a terminal, a program emitting a line now and then) gets each line translated at once, a fast
    one fills whole chunks."""

    def __init__(self, fd):
        self.fd = fd
        self.lines = []  # complete lines read, in order
        self.partial = b""
        self.ended = False

    def read(self, limit):
        lines = []
        while len(lines) < limit:
            if self.lines:
                take = self.lines[:limit - len(lines)]
                del self.lines[:len(take)]
                lines += take
            elif self.ended:
                break
            elif lines and not self._ready():
                break
            else:
                self._fill()
        return [line.rstrip(b"\r") for line in lines]

    def _ready(self):
        return bool(select.select([self.fd], [], [], 0)[0])

    def _fill(self):
        data = os.read(self.fd, 1 << 16)
        if not data:
            self.ended = True
            if self.partial:  # a last line without its newline
                self.lines.append(self.partial)
                self.partial = b""
            return
        parts = (self.partial + data).split(b"\n")
        self.partial = parts.pop()
        self.lines += parts


def clean(text):
    return text.replace("\r", " ").replace("\n", " ")  # one line per translation, whatever it spells


def format_result(index, result):
    """The output line(s) of input line ``index`` (0-based) for its result."""
    alignments = result.get("alignments", [None] * FLAGS.n_best)  # None: not asked for
    if FLAGS.n_best > 1:
        return [f"{index}\t{score:.4f}\t{with_alignment(text, alignment)}"
                for text, score, alignment in
                zip(result["translations"][:FLAGS.n_best], result["scores"][:FLAGS.n_best],
                    alignments)]
    text = with_alignment(result["translation"], alignments[0])
    return [f"{result['score']:.4f}\t{text}" if FLAGS.show_scores else text]


def with_alignment(text, alignment):
    """The translation as printed, with --alignments its ``alignment`` after a tab."""
    text = clean(text)
    if not FLAGS.alignments:
        return text
    # the alignment is the last field: no tab of the translation's before it
    return text.replace("\t", " ") + "\t" + alignment


def blank_result(index):
    """What the model answers for an empty line (``Translator.translate_text`` and
    ``translate_text_nbest``), without running it."""
    if FLAGS.n_best > 1:
        return format_result(index, {"translations": [""] * FLAGS.n_best,
                                     "scores": [0.0] + [float("-inf")] * (FLAGS.n_best - 1),
                                     "alignments": [""] * FLAGS.n_best})
    return format_result(index, {"translation": "", "score": 0.0, "alignments": [""]})


def translate_chunk(translate, lines, first, progress):
    """``(output lines, 1-based numbers of the inputs cut to the maximum length)`` for ``lines``,
    input lines ``first``, ``first + 1``, ..."""
    todo = [i for i, line in enumerate(lines) if line.strip()]
    results = dict(zip(todo, translate([lines[i] for i in todo], progress) if todo else []))
    output = []
    for i in range(len(lines)):
        output += format_result(first + i, results[i]) if i in results else blank_result(first + i)
    return output, [first + i + 1 for i in todo if results[i]["truncated"]]


def make_progress():
    """``(progress callback, whether its line must be ended)``: a counter on stderr only for a
    person watching a terminal whose stdout is elsewhere (on the same terminal the translations
    are the progress; in a log, redrawn bars are noise)."""
    if not sys.stderr.isatty() or (FLAGS.output is None and sys.stdout.isatty()):
        return None, False
    if FLAGS.text:
        total = sum(1 for text in FLAGS.text if text.strip())
    elif input_file() is not None:
        with open(input_file(), "rb") as stream:
            total = sum(1 for line in stream if line.strip())
    else:
        total = None  # a pipe: counted as it comes
    return (stderr_progress(total) if total != 0 else None), total is None


def run_interactive(translate, output):
    """Prompt, read, translate, print, until end of input or Ctrl-C; the number of lines read."""
    from keras_transformer import signals

    print("translate: type a sentence and Enter; Ctrl-D or Ctrl-C ends.", file=sys.stderr)
    reader = LineReader(sys.stdin.fileno())
    count = 0
    try:
        while True:
            sys.stderr.write(PROMPT)
            sys.stderr.flush()
            lines = reader.read(FLAGS.batch_size)  # several if pasted at once
            if not lines:
                break
            text, truncated = translate_chunk(translate, lines, count, None)
            output.write(text)
            for number in truncated:
                print(f"translate: line {number} is longer than the model's maximum length: it was "
                      "cut to it before translating.", file=sys.stderr)
            count += len(lines)
    except signals.Interrupted as interrupted:
        if interrupted.signum != signal.SIGINT:
            raise  # SIGTERM: the programs' usual stop
    sys.stderr.write("\n")
    return count, []


def run_stream(translate, output):
    """Translates --text, --input or piped stdin chunk by chunk; the number of lines and those
    cut to the maximum length."""
    progress, end_line = make_progress()
    truncated = []
    if FLAGS.text:
        lines = [t.encode("utf-8", "surrogateescape") for t in FLAGS.text]
        text, truncated = translate_chunk(translate, lines, 0, progress)
        output.write(text)
        count = len(lines)
    else:
        stream = open(input_file(), "rb") if input_file() is not None else None
        try:
            reader = LineReader(stream.fileno() if stream else sys.stdin.fileno())
            count = 0
            while True:
                lines = reader.read(CHUNK_BATCHES * FLAGS.batch_size)
                if not lines:
                    break
                text, cut = translate_chunk(translate, lines, count, progress)
                output.write(text)
                truncated += cut
                count += len(lines)
        finally:
            if stream is not None:
                stream.close()
    if progress is not None and end_line:
        sys.stderr.write("\n")
    return count, truncated


def main(argv):
    check_flags()
    thread_flags.apply()
    translate, source, description = load_translate_fn()
    print(f"translate: {description}", file=sys.stderr, flush=True)
    output = console.Output(FLAGS.output)
    count, truncated = (run_interactive if interactive() else run_stream)(translate, output)
    output.close()
    if truncated:
        print(f"translate: {len(truncated)} input line(s) longer than the model's maximum length were "
              f"cut to it before translating: line(s) {console.listed(truncated)}.", file=sys.stderr)
    print(f"translate: {count} line(s) translated with {source}"
          + (f" into {FLAGS.output}" if FLAGS.output else "") + ".", file=sys.stderr)


if __name__ == "__main__":
    console.run(main)
