"""Exports a training run for serving (``keras_transformer.export``).

    python -m trainers.export --model_dir=runs/small --export_dir=saved_models --name=small
    python -m trainers.export --model_dir=runs/base --checkpoint=averaged --beam_size=4 --alpha=0.6
    python -m trainers.export --saved_model=saved_models/quickstart --format=ctranslate2

--format=saved_model writes two SavedModels with one version number (default: the next free one):
EXPORT_DIR/NAME/VERSION with the text signature ``serving_default`` (strings in, strings out; the
server needs the tf-text ops), ``translate_nbest`` (the beam's whole n-best list as text),
``score`` (the log-probability of given translations), and ``translate_ids`` and ``score_ids``
(token ids, core ops only), and EXPORT_DIR/NAME_ids/VERSION with only the two ids signatures, for
servers without the tf-text ops. The beam settings are baked into the graphs. The checkpoint is the
run's averaged one by default (else its moving average, else its best, else its latest); stderr
names it. Prints the paths, a ``tensorflow_model_server`` command line and a ``curl`` request for
them.

--format=ctranslate2 (needs the optional extra: pip install -e '.[ctranslate2]') writes
EXPORT_DIR/NAME_ctranslate2/VERSION, a CTranslate2 model folder (C++ CPU/GPU inference engine) with
the SentencePiece model ``vocab.model`` beside it (--quantization=int8 etc. for smaller weights), and
prints the Python lines that translate with it.

--saved_model exports an export again, where there is no run: the shipped model, or one from
someone else, to CTranslate2, or as a SavedModel with other search settings. Its model is rebuilt
from its assets and weights (``run_flags.load_exported_translator``), with the search settings it
was exported with, each search flag given replacing its own; the new export records the same
origin (corpus, checkpoint). The default --name is the SavedModel's model folder's: a SavedModel
export lands as its next version.
"""

import json
import os
import shlex
import sys
import urllib.parse

from absl import app, flags

from . import checks, console, decoding_flags, run_flags

flags.adopt_module_key_flags(decoding_flags)
flags.adopt_module_key_flags(run_flags)
flags.DEFINE_flag(run_flags.ModelsFlag(
    "saved_model", "Instead of --model_dir: an exported SavedModel to export again (a version "
    "folder or the model's base folder, its highest version)."))
flags.DEFINE_string("vocab_path", None, "The SentencePiece vocabulary, if not the one the run recorded.")
flags.DEFINE_string("export_dir", "saved_models", "Where the exported models go.")
flags.DEFINE_string("name", None, "Model name (folder under --export_dir; TF Serving's model name). "
                    "Default: the name of --model_dir, or of --saved_model's model folder.")
flags.DEFINE_integer("version", None, "Version folder number (default: the next free one).",
                     lower_bound=1)
flags.DEFINE_enum("format", "saved_model", ["saved_model", "ctranslate2"],
                  "Export format (keras_transformer.export.EXPORTERS).")
flags.DEFINE_integer("rest_api_port", 8501, "Port used in the printed serving commands.",
                     lower_bound=1, upper_bound=65535)
flags.DEFINE_string("quantization", None, "--format=ctranslate2 only: CTranslate2 weight type (int8, "
                    "int8_float32, int16, float16, bfloat16, ...); default float32 as trained.")
flags.mark_flags_as_mutual_exclusive(["model_dir", "saved_model"])

FLAGS = flags.FLAGS


def check_flags():
    """Fails early (before loading anything) on a bad run folder or checkpoint, SavedModel, name,
    an unwritable --export_dir or an existing version; the run folder last (finding its latest
    checkpoint starts TensorFlow), so a mistyped path is answered at once. Returns the name."""
    if FLAGS.model_dir is None and FLAGS.saved_model is None:
        raise app.UsageError("name the model to export: --model_dir (a training run) or "
                             "--saved_model (an export).")
    name = FLAGS.name or default_name()
    if not name or os.sep in name or name in (".", ".."):
        raise app.UsageError(f"--name={name!r} must be a plain folder name.")
    if FLAGS.saved_model is not None:
        if len(run_flags.saved_models(FLAGS.saved_model)) > 1:
            raise app.UsageError(f"--saved_model={FLAGS.saved_model}: an ensemble cannot be "
                                 "exported; export one model (translate and evaluate decode "
                                 "ensembles).")
        run_flags.check_saved_models(FLAGS.saved_model)
    elif len(run_flags.model_dirs()) > 1:
        raise app.UsageError(f"--model_dir={FLAGS.model_dir}: an ensemble cannot be exported; "
                             "export one run (translate and evaluate decode ensembles).")
    if FLAGS.vocab_path is not None:
        checks.input_file("vocab_path", FLAGS.vocab_path)
    checks.output_dir("export_dir", FLAGS.export_dir)
    if FLAGS.version is not None:
        folders = [f"{name}_ctranslate2"] if FLAGS.format == "ctranslate2" else [name, f"{name}_ids"]
        for folder in folders:
            target = os.path.join(FLAGS.export_dir, folder, str(FLAGS.version))
            if os.path.exists(target):
                raise app.UsageError(f"--version={FLAGS.version}: {target} exists already; pass "
                                     "another --version, or none for the next free one.")
    if FLAGS.model_dir is not None:
        checks.run_dir("model_dir", FLAGS.model_dir, FLAGS.checkpoint)
    return name


def default_name():
    """--model_dir's folder name, or the name of --saved_model's model folder (a version folder's
    parent)."""
    path = os.path.normpath(os.path.abspath(FLAGS.model_dir or FLAGS.saved_model))
    if FLAGS.saved_model is not None and os.path.basename(path).isdigit() and \
            os.path.isfile(os.path.join(path, "saved_model.pb")):
        path = os.path.dirname(path)
    return os.path.basename(path)


def serving_help(paths, name, sample_ids):
    """The tensorflow_model_server command line and curl requests for the written models."""
    port = FLAGS.rest_api_port
    lines = []
    for path in paths:
        base = os.path.abspath(os.path.dirname(path))
        model = os.path.basename(base)
        ids_only = model.endswith("_ids") and model != name
        body = ({"signature_name": "translate_ids", "instances": sample_ids} if ids_only else
                {"signature_name": "serving_default", "instances": ["Good morning.", "Thank you!"]})
        kind = ("token ids in and out (core TensorFlow ops only)" if ids_only else
                "text in and out (the server needs the tf-text ops)")
        lines += [
            f"# {model}: {kind}",
            f"tensorflow_model_server --rest_api_port={port} --model_name={shlex.quote(model)} "
            f"--model_base_path={shlex.quote(base)}",
            f"curl -s -X POST http://localhost:{port}/v1/models/{urllib.parse.quote(model)}:predict "
            f"-d {shlex.quote(json.dumps(body))}",
        ]
    return "\n".join(lines)


def ctranslate2_help(path, decoding):
    """Python lines translating with the CTranslate2 export. CTranslate2's length penalty divides by
    length ** alpha, not GNMT's ((5 + length) / 6) ** alpha, so scores differ a little from ours."""
    path = os.path.abspath(path)
    return "\n".join([
        "import ctranslate2, sentencepiece",
        f"sp = sentencepiece.SentencePieceProcessor(model_file={os.path.join(path, 'vocab.model')!r})",
        f"translator = ctranslate2.Translator({path!r}, device='cpu')",
        "pieces = sp.encode(['Good morning.', 'Thank you!'], out_type=str)",
        f"results = translator.translate_batch(pieces, beam_size={decoding.beam_size}, "
        f"length_penalty={decoding.alpha}, suppress_sequences=[['<pad>'], ['<s>']],",
        f"                                     max_decoding_length=max(map(len, pieces)) + "
        f"{decoding.extra_length + 1})",
        "print([sp.decode(r.hypotheses[0]) for r in results])",
    ])


def main(argv):
    name = check_flags()

    from keras_transformer import export

    if FLAGS.saved_model is not None:
        translator, loaded = run_flags.load_exported_translator(FLAGS.saved_model)
    else:
        translator, loaded = run_flags.load_translator(decoding_flags.decoding_config(),
                                                       FLAGS.vocab_path)
    print(f"export: {loaded}", file=sys.stderr, flush=True)
    options = {"quantization": FLAGS.quantization} if FLAGS.format == "ctranslate2" else {}
    written = export.EXPORTERS[FLAGS.format](translator, FLAGS.export_dir, name,
                                             version=FLAGS.version, **options)
    paths = [written] if isinstance(written, str) else list(written)
    for path in paths:
        print(path)
    if FLAGS.format == "ctranslate2":
        print("\nTranslate with it (pip install ctranslate2 sentencepiece):\n"
              + ctranslate2_help(paths[0], translator.decoding))
    if FLAGS.format == "saved_model":
        sample_ids, _, _ = translator.source_ids(["Good morning."])
        print("\nServe it (TF Serving, REST on port "
              f"{FLAGS.rest_api_port}) and ask for translations:\n"
              + serving_help(paths, name, sample_ids.numpy().tolist()))


if __name__ == "__main__":
    console.run(main)
