"""BLEU of a trained model on a test set, measured two ways and labelled (``keras_transformer.evaluation``).

    python -m trainers.evaluate --model_dir=runs/quickstart --checkpoint=averaged
    python -m trainers.evaluate --saved_model=saved_models/quickstart --output=test.hyp.de
    python -m trainers.evaluate --model_dir=runs/base --dataset=wmt14_en_de --data_dir=data
    python -m trainers.evaluate --saved_model=saved_models/x --dataset=files --test_data=test.en,test.de

Prints

    sacreBLEU = 12.34 (nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0)
    tokenized BLEU (Moses + compound split, the paper's) = 13.45 (...)

and with --floors the floors on the same sentences and a verdict:

    model               sacreBLEU  12.34   tokenized BLEU  13.45
    translation memory  sacreBLEU  11.37   tokenized BLEU  11.66
    copy the source     sacreBLEU   7.39   tokenized BLEU   7.35
    verdict: 0.97 sacreBLEU above the translation memory: the model translates beyond ...

sacreBLEU is the comparable number; the tokenized compound-split BLEU is how the paper's Table 2
numbers (27.3 / 28.4 EN-DE) were computed, and is usually higher: never compare one with the other.

The test set comes from the data flags (``trainers/data_flags.py``). With --model_dir and no data
flag given, the corpus the run was trained on (its config.json) is used, so
``--model_dir=runs/x`` alone evaluates on that corpus' test split. Beam settings apply with
--model_dir (section 6.1 defaults: beam 4, alpha 0.6); a SavedModel has its own baked in.
"""

from absl import app, flags

from trainers import checks, console, data_flags, decoding_flags, run_flags, thread_flags
from trainers.console import stderr_progress

FLAGS = flags.FLAGS
for _name in data_flags.CORPUS_FLAGS + ("vocab_path",):  # not the training-batch flags
    flags.declare_key_flag(_name)
flags.adopt_module_key_flags(thread_flags)
flags.adopt_module_key_flags(decoding_flags)
flags.adopt_module_key_flags(run_flags)
flags.DEFINE_string("saved_model", None,
                    "Exported SavedModel: a version folder or the model's base folder (its highest "
                    "version).")
flags.DEFINE_enum("split", "test", ["train", "dev", "test"], "Which split to translate and score.")
flags.DEFINE_integer("limit", None, "Only the first N pairs of the split (quick looks).",
                     lower_bound=1)
flags.DEFINE_string("output", None, "Write the translations here, one line per test sentence.")
flags.DEFINE_integer("batch_size", 32, "Sentences per batch.", lower_bound=1)
flags.mark_flags_as_mutual_exclusive(["model_dir", "saved_model"], required=True)
flags.DEFINE_bool("floors", False,
                  "Also score the two floors on the same sentences, copying the source and a "
                  "translation memory (the German of the TF-IDF-nearest English training "
                  "sentence), and say in one line whether the model beats the memory.")
flags.DEFINE_string("lang", None, "Target language for the Moses tokenizer of the tokenized BLEU "
                    "(default: fr for wmt14_en_fr, else de).")

def test_data_config():
    """The data flags, or (with --model_dir and none of them given) the run's own corpus."""
    if FLAGS.model_dir and not any(FLAGS[name].present for name in data_flags.CORPUS_FLAGS):
        from keras_transformer import runs

        recorded = runs.data_config(runs.read_config(FLAGS.model_dir))
        if recorded is not None:  # else a run of another version: the flags decide
            return recorded
    return data_flags.data_config(writes=False)


def read_pairs(config, split, limit):
    from keras_transformer import data

    try:
        sources, references = data.read_pairs(config, split, limit)
    except (ValueError, data.DataNotFoundError) as error:
        raise ValueError(f"no {split} data: {error}") from None
    if not sources:
        raise ValueError(f"the {split} split of {config.dataset} is empty.")
    return sources, references


def load_translate_fn():
    from keras_transformer import inference

    if FLAGS.saved_model:
        return inference.load_exported_translate_fn(FLAGS.saved_model)
    translator, loaded = run_flags.load_translator(decoding_flags.decoding_config(),
                                                   FLAGS.vocab_path)
    return translator.text_function(), loaded


def check_flags():
    """The run folder (and its checkpoint) or the SavedModel, and the output: before any work."""
    if FLAGS.saved_model:
        given = ["--checkpoint"] * FLAGS["checkpoint"].present + decoding_flags.given()
        if given:
            raise app.UsageError(f"{', '.join(given)} only apply with --model_dir; a SavedModel has "
                                 "its search settings baked in.")
        checks.saved_model("saved_model", FLAGS.saved_model)
    else:
        checks.run_dir("model_dir", FLAGS.model_dir, FLAGS.checkpoint)
    if FLAGS.vocab_path is not None:
        checks.input_file("vocab_path", FLAGS.vocab_path)
    if FLAGS.output:
        checks.output_file("output", FLAGS.output)


def write_lines(path, lines):
    from keras_transformer import writing

    writing.write_file(path, "".join(line.replace("\n", " ") + "\n" for line in lines))


def main(argv):
    check_flags()
    thread_flags.apply()
    config = test_data_config()
    sources, references = read_pairs(config, FLAGS.split, FLAGS.limit)
    translate_fn, source = load_translate_fn()

    from keras_transformer import evaluation

    progress = stderr_progress(len(sources))
    lang = FLAGS.lang or ("fr" if config.dataset == "wmt14_en_fr" else "de")
    result, hypotheses = evaluation.translate_and_evaluate(
        translate_fn, sources, references, lang, FLAGS.batch_size, progress)
    if FLAGS.output:
        write_lines(FLAGS.output, hypotheses)
    print(f"evaluate: {source} on {config.dataset} {FLAGS.split} ({result.sentences} sentences)")
    for line in result.lines():
        print(line)
    if FLAGS.floors:
        train_sources, train_targets = read_pairs(config, "train", None)
        floors = evaluation.floors(sources, references, list(zip(train_sources, train_targets)),
                                   lang)
        for line in evaluation.floor_lines(result, floors) + [evaluation.verdict(result, floors)]:
            print(line)


if __name__ == "__main__":
    console.run(main)
