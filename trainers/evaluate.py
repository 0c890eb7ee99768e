"""BLEU of a trained model on a test set, measured two ways and labelled, and chrF beside it
(``keras_transformer.evaluation``).

    python -m trainers.evaluate                                   # the main job's model
    python -m trainers.evaluate --model_dir=runs/quickstart --checkpoint=averaged
    python -m trainers.evaluate --saved_model=saved_models/quickstart --output=test.hyp.de
    python -m trainers.evaluate --model_dir=runs/base --dataset=wmt14_en_de --data_dir=data
    python -m trainers.evaluate --saved_model=saved_models/x --dataset=files --test_data=test.en,test.de

Prints

    data: libreoffice_help_en_de test split (from the export)
    sacreBLEU = 12.34 (nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0)
    tokenized BLEU (Moses + compound split, the paper's) = 13.45 (...)
    chrF2 = 45.67 (nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0)

and with --floors the floors on the same sentences and a verdict (on sacreBLEU):

    model               sacreBLEU  12.34   tokenized BLEU  13.45   chrF2  45.67
    translation memory  sacreBLEU  11.37   tokenized BLEU  11.66   chrF2  40.12
    copy the source     sacreBLEU   7.39   tokenized BLEU   7.35   chrF2  30.45
    verdict: 0.97 sacreBLEU above the translation memory: the model translates beyond ...

sacreBLEU is the comparable number; the tokenized compound-split BLEU is how the paper's Table 2
numbers (27.3 / 28.4 EN-DE) were computed, and is usually higher: never compare one with the other.
chrF2 (character n-grams) is the second opinion, steadier than BLEU on short sentences.

With neither --model_dir nor --saved_model the main job's model is scored, as translate chooses
it: its run (runs/quickstart, once ``python -m trainers.quickstart`` has trained it), else the
model that comes with the project (saved_models/README.md states what it scores).

The test set is the corpus the model was trained on: a run records it in its config.json and an
export in its assets/config.json, so ``--model_dir=runs/x`` or ``--saved_model=saved_models/x``
alone scores that corpus' test split. Its paths are recorded as the training command was given
them: relative ones are read from the folder evaluate runs in, and a run's not found there from
the folder its training ran in (its config.json records it); so run evaluate on an export where
training ran (or pass the data flags). Any data flag given (``trainers/data_flags.py``:
--dataset, --test_data, ...) chooses the corpus instead, of the recorded dataset where --dataset
is not given (``--model_dir=runs/x --test_data=other.tsv`` on a run trained on own files scores
other.tsv); a run or export that records no corpus (an export written before exports recorded it)
gets the data flags' defaults. The first line says which corpus and why. The translation memory
of --floors looks up the pairs the model was trained on: the recorded training pairs, unless
--train_data names them (needed, and asked for before any decoding, for own files with no record
of them); a line says which.
Beam settings apply with --model_dir (section 6.1 defaults: beam 4, alpha 0.6). A SavedModel is
scored with the search it was exported with, by its own graph; a beam flag given with it rebuilds
its model here and searches its weights with the settings it was exported with, each flag given
replacing its own (``run_flags.load_exported_translator``). Several comma-separated runs in
--model_dir are an ensemble, decoded together (memory and time grow linearly with the runs; the
corpus is the first run's); so are several comma-separated SavedModels, rebuilt here.
"""

from absl import flags

from . import checks, console, data_flags, decoding_flags, run_flags, thread_flags
from .console import stderr_progress

FLAGS = flags.FLAGS
for _name in data_flags.CORPUS_FLAGS + ("vocab_path",):  # not the training-batch flags
    flags.declare_key_flag(_name)
flags.adopt_module_key_flags(thread_flags)
flags.adopt_module_key_flags(decoding_flags)
flags.adopt_module_key_flags(run_flags)
flags.DEFINE_flag(run_flags.ModelsFlag(
    "saved_model", "Exported SavedModel: a version folder or the model's base folder (its highest "
    f"version); {run_flags.SEVERAL}: an ensemble (as for --model_dir)."))
flags.DEFINE_enum("split", "test", ["train", "dev", "test"], "Which split to translate and score.")
flags.DEFINE_integer("limit", None, "Only the first N pairs of the split (quick looks).",
                     lower_bound=1)
flags.DEFINE_alias("eval_limit", "limit")  # the quickstart's name for it
flags.DEFINE_string("output", None, "Write the translations here, one line per test sentence.")
flags.DEFINE_integer("batch_size", 64, "Sentences per batch (sorted by length).", lower_bound=1)
flags.mark_flags_as_mutual_exclusive(["model_dir", "saved_model"])
flags.DEFINE_bool("floors", False,
                  "Also score the two floors on the same sentences, copying the source and a "
                  "translation memory (the German of the TF-IDF-nearest English sentence of the "
                  "model's training pairs: those its run or export records, or --train_data), and "
                  "say in one line whether the model beats the memory.")
flags.DEFINE_string("lang", None, "Target language code: sacreBLEU's tokenizer for it (zh, "
                    "ja-mecab, ko-mecab for zh, ja, ko; else 13a) and the Moses rules of the "
                    "tokenized BLEU. Default: fr for wmt14_en_fr, de for the other corpora; with "
                    "--dataset=files not known: Chinese and Japanese references are recognised "
                    "by their script, and Moses' German rules (the paper's) are used.")

# Where the corpus scored can come from besides the data flags: a record of it.
RECORDS = ("the run", "the export")


def read_record():
    """``(config, origin)``: the corpus the run (--model_dir: the first run's config.json) or the
    export (--saved_model: its assets/config.json) records, and which of ``RECORDS`` it is; config
    None where it records none, or where the run cannot be read (``check_runs`` says why)."""
    if FLAGS.model_dir:
        from keras_transformer import runs

        try:
            return runs.data_config(runs.read_config(run_flags.model_dirs()[0])), "the run"
        except (OSError, ValueError):
            return None, "the run"
    from keras_transformer.export.common import recorded_data_config

    return recorded_data_config(run_flags.saved_models(FLAGS.saved_model)[0]), "the export"


def test_data_config(given_data, record):
    """``(config, origin)``: ``given_data``, the data flags' config (``check_flags``'), if any data
    flag is given (origin "the data flags", saying so where its dataset is the record's); else the
    corpus that the run (--model_dir: its config.json) or the export (--saved_model: its
    assets/config.json) records, ``record`` (``read_record``; origin one of ``RECORDS``); else, for
    a run or export that records none, the data flags' defaults (origin says so)."""
    recorded, origin = record
    if given_data is not None:
        if not FLAGS["dataset"].present and recorded is not None:
            return given_data, f"the data flags, with the dataset {origin} records"
        return given_data, "the data flags"
    if recorded is not None:
        return recorded, origin
    return data_flags.data_config(writes=False), (
        f"the data flags' defaults: {origin} does not record its corpus; pass --dataset to choose")


# The data flags that say where a corpus is found (rather than which corpus or split).
LOCATION_FLAGS = ("data_dir", "ding_file", "libreoffice_help_dir")


def memory_data_config(config, origin, given_data, record):
    """``(config, origin)`` whose train split the translation memory of --floors looks up: the
    pairs the model was trained on. The corpus scored (``config``) where no data flag is given (the
    record's, or the defaults'); with data flags, --train_data where given, else the record's
    training pairs: data flags without --train_data choose what is scored, not what the model
    learned from (``--test_data=x`` alone scores x against the run's own training pairs), unless
    they say where the record's corpus is found here (--data_dir, --ding_file,
    --libreoffice_help_dir with its dataset). A UsageError, before any work, where no training
    pairs are known: own files without --train_data and no record naming them."""
    from absl import app

    from keras_transformer.data.config import FILES_DATASET

    recorded, record_origin = record
    relocated = (recorded is not None and recorded.dataset == config.dataset != FILES_DATASET
                 and any(FLAGS[name].present for name in LOCATION_FLAGS))
    if (given_data is not None and recorded is not None and not FLAGS["train_data"].present
            and not relocated):
        config, origin = recorded, record_origin
    if config.dataset == FILES_DATASET and not config.train_data:
        # Here the record names no training pairs (or there is no record): --train_data would
        # have been used, and a record naming them too.
        raise app.UsageError(
            "--floors: the translation memory floor looks up training pairs: pass --train_data "
            "(the pairs the model was trained on, PATH.tsv or SRC_PATH,TGT_PATH); "
            f"{record_origin} records none")
    return config, origin


def describe_data(config, split, origin):
    """One line naming the corpus and split scored, e.g. ``data: libreoffice_help_en_de test
    split (from the export)``."""
    spec = getattr(config, f"{split}_data")
    if split in config.holds_out():
        spec = f"held out of {config.train_data}"
    return f"data: {config.dataset} {split} split{f' {spec}' if spec else ''} (from {origin})"


def describe_memory(config, origin):
    """One line naming the pairs the translation memory looks up, e.g. ``floors: the translation
    memory looks up the files train split train.tsv (from the run)``; once the pairs are read."""
    from keras_transformer import data

    spec = f" {config.train_data}" if config.train_data else ""
    held = data.held_out_splits(config)
    if held:
        spec += f" less the {' and '.join(held)} pairs held out of it"
    return (f"floors: the translation memory looks up the {config.dataset} train split{spec} "
            f"(from {origin})")


def read_pairs(config, split, limit, origin):
    from keras_transformer import data

    try:
        sources, references = data.read_pairs(config, split, limit)
    except (ValueError, data.DataNotFoundError) as error:
        where = {"the run": "this folder, else from the folder training ran in",
                 "the export": "the folder evaluate runs in: run it where training ran"}
        hint = (f" ({origin} records this corpus with the paths its training command was given, "
                f"relative ones read from {where[origin]}; or name the data with the data "
                "flags)") if origin in RECORDS else ""
        raise ValueError(f"no {split} data: {error}{hint}") from None
    if not sources:
        raise ValueError(f"the {split} split of {config.dataset} is empty.")
    return sources, references


def load_translate_fn():
    from keras_transformer import inference

    if run_flags.rebuilds_saved_model():
        translator, loaded = run_flags.load_exported_translator(FLAGS.saved_model)
    elif FLAGS.saved_model:
        fn, source = inference.load_exported_translate_fn(FLAGS.saved_model)
        return fn, run_flags.describe_export(source)
    else:
        translator, loaded = run_flags.load_translator(decoding_flags.decoding_config(),
                                                       FLAGS.vocab_path)
    return translator.text_function(), loaded


def check_flags():
    """The run folder (and its checkpoint) or the SavedModel, the output and the files the data
    flags name: before any work. The run folders last: finding a run's latest checkpoint starts
    TensorFlow, and a mistyped path is answered at once. Returns ``(given_data, record)``: the data
    flags' DataConfig if any data flag is given, else None; and what the run or export records
    (``read_record``). Without --dataset the data flags name files of the recorded corpus
    (``--test_data=x`` alone on a run trained on own files: x is its test split), not of the
    flag's default corpus."""
    from absl import app

    if FLAGS.model_dir is None and FLAGS.saved_model is None:
        run_flags.choose_default_model()
    if FLAGS.saved_model:
        run_flags.check_saved_models(FLAGS.saved_model)
    if FLAGS.vocab_path is not None:
        checks.input_file("vocab_path", FLAGS.vocab_path)
    if FLAGS.output:
        checks.output_file("output", FLAGS.output)
    given = any(FLAGS[name].present for name in data_flags.CORPUS_FLAGS)
    record = read_record()
    given_data = None
    if given:
        recorded, origin = record
        overrides = ({"dataset": recorded.dataset}
                     if recorded is not None and not FLAGS["dataset"].present else {})
        try:
            given_data = data_flags.data_config(writes=False, **overrides)
        except app.UsageError as error:
            if not overrides or "dataset=" not in str(error):
                raise
            raise app.UsageError(f"{error} (dataset={recorded.dataset!r}: the one {origin} "
                                 "records, as --dataset is not given)") from None
        if recorded is not None and recorded.hold_out_pairs:
            from keras_transformer import data

            # the training command's own flags: its held-out splits, as the run sized them
            given_data = data.sized_as(given_data, recorded)
    if not FLAGS.saved_model:
        run_flags.check_runs()
    return given_data, record


def write_lines(path, lines):
    from keras_transformer import writing

    writing.write_file(path, "".join(line.replace("\n", " ") + "\n" for line in lines))


def main(argv):
    given_data, record = check_flags()
    thread_flags.apply()
    config, origin = test_data_config(given_data, record)
    if FLAGS.floors:  # which training pairs, and that there are some: before any decoding
        memory_config, memory_origin = memory_data_config(config, origin, given_data, record)
    print(describe_data(config, FLAGS.split, origin), flush=True)
    sources, references = read_pairs(config, FLAGS.split, FLAGS.limit, origin)
    if FLAGS.floors:
        train_sources, train_targets = read_pairs(memory_config, "train", None, memory_origin)
        print(describe_memory(memory_config, memory_origin), flush=True)
    translate_fn, source = load_translate_fn()

    from keras_transformer import evaluation

    progress = stderr_progress(len(sources))
    lang = FLAGS.lang or config.target_language
    result, hypotheses = evaluation.translate_and_evaluate(
        translate_fn, sources, references, lang, FLAGS.batch_size, progress)
    if FLAGS.output:
        write_lines(FLAGS.output, hypotheses)
    print(f"evaluate: {source} on {config.dataset} {FLAGS.split} ({result.sentences} sentences)")
    for line in result.lines():
        print(line)
    if FLAGS.floors:
        floors = evaluation.floors(sources, references, list(zip(train_sources, train_targets)),
                                   lang)
        for line in evaluation.floor_lines(result, floors) + [evaluation.verdict(result, floors)]:
            print(line)


if __name__ == "__main__":
    console.run(main)
