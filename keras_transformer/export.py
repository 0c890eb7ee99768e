"""Export for serving: a SavedModel that TF Serving loads, written with ``keras.export.ExportArchive``.

Layout (what ``tensorflow_model_server --model_base_path`` expects): ``<base>/<version>/`` with
``saved_model.pb``, ``variables/`` and ``assets/`` (the subword vocabulary ``vocab.model`` and the
model's ``config.json``). A version folder appears complete or not at all: it is written under a
temporary name and renamed, so a server watching ``<base>`` never loads half an export; the text and
the ids export of one version appear together or not at all, and never from NaN weights.

Signatures (none needs XLA; TF Serving's CPU XLA is off by default):

- ``serving_default``: ``inputs`` tf.string [batch] -> ``translations`` tf.string, ``scores`` float32,
  ``truncated`` bool (tokenisation inside the graph: a server needs the tf-text ops).
- ``translate_ids``: ``source_ids`` int32 [batch, length] (subwords + EOS, 0-padded) -> ``ids`` int32
  [batch, beam, max_len], ``scores`` and ``lengths`` [batch, beam]: core TensorFlow ops only.

A server loads every op of a SavedModel, used or not, so a server without the tf-text ops cannot load
the first one at all. ``export_for_serving`` therefore writes two: ``<name>`` with both signatures and
``<name>_ids`` with only ``translate_ids`` (also its ``serving_default``), free of custom ops.

Why ExportArchive rather than ``tf.saved_model.save`` of a ``tf.Module`` holding the model: the latter
reloads with ``tf.saved_model.load`` but not in the session-based loader TF Serving uses ("Could not find
variable ..."); the archive tracks the raw variables.
"""

import contextlib
import json
import os
import re

import keras
import tensorflow as tf

from keras_transformer import writing
from keras_transformer.export_ctranslate2 import export_ctranslate2
from keras_transformer.inference import TEXT_INPUT_SPEC

TEXT_SIGNATURE = "serving_default"
IDS_SIGNATURE = "translate_ids"
VOCABULARY_ASSET = "vocab.model"
CONFIG_ASSET = "config.json"


@contextlib.contextmanager
def staged_export(targets, what="the export"):
    """Writes export folders so that they appear complete, together, or not at all.

    Yields one ``(output, sources)`` per target: ``output`` a not-yet-existing folder to write the
    export into, ``sources`` an existing scratch folder for the files it copies in (vocabulary,
    configuration). On success the outputs are renamed to ``targets`` together; on any failure or
    signal nothing appears and the scratch is deleted (also what a killed export left, at the next
    export into the same folders). Errors are ValueErrors naming the folder."""
    for target in targets:
        writing.remove_leftovers(os.path.dirname(os.path.abspath(target)))
    try:
        with writing.staged_folders(targets) as outputs:
            pairs = []
            for output in outputs:
                sources = os.path.join(os.path.dirname(output), "sources")
                os.makedirs(sources)
                pairs.append((output, sources))
            yield pairs
    except writing.WriteError as error:
        raise ValueError(f"writing {what} failed: {error}") from None


def check_finite(model):
    """Refuses (ValueError) to export weights holding a NaN or an infinity."""
    from keras_transformer.training.checkpoints import non_finite_variables

    bad = non_finite_variables(model.variables)
    if bad:
        raise ValueError(f"the weights hold NaN or infinite values ({len(bad)} of "
                         f"{len(model.variables)} variables, e.g. {bad[0]}); export a finite "
                         "checkpoint instead.")


def write_run_files(sources, tokenizer, settings, config_name=CONFIG_ASSET):
    """The vocabulary and the configuration that travel with an export; returns their paths."""
    vocabulary_path = os.path.join(sources, VOCABULARY_ASSET)
    with open(vocabulary_path, "wb") as f:
        f.write(tokenizer.model_proto)
    config_path = os.path.join(sources, config_name)
    with open(config_path, "w") as f:
        json.dump(settings, f, indent=2)
    return vocabulary_path, config_path


def decoding_settings(translator):
    return {"beam_size": translator.decoding.beam_size, "alpha": translator.decoding.alpha,
            "extra_length": translator.decoding.extra_length}


def next_version(model_base_path):
    """1 + the largest numeric version folder under ``model_base_path`` (1 if there is none)."""
    if not os.path.isdir(model_base_path):
        return 1
    versions = [int(name) for name in os.listdir(model_base_path) if re.fullmatch(r"\d+", name)]
    return max(versions, default=0) + 1


def export_for_serving(translator, export_dir, name, version=None):
    """Writes ``export_dir/<name>/<version>`` (both signatures) and ``export_dir/<name>_ids/<version>``
    (ids only) with one version number, by default the next free one; returns both paths. The two
    appear together or not at all."""
    bases = [os.path.join(export_dir, name), os.path.join(export_dir, f"{name}_ids")]
    version = max(next_version(base) for base in bases) if version is None else int(version)
    targets = [os.path.join(base, str(version)) for base in bases]
    check_finite(translator.model)
    with staged_export(targets) as staged:
        for (output, sources), text_signature in zip(staged, (True, False)):
            _write_saved_model(translator, output, sources, text_signature)
    return tuple(targets)


def export_saved_model(translator, model_base_path, version=None, text_signature=True):
    """Writes ``translator`` (an ``inference.Translator``) to ``model_base_path/<version>`` and returns
    that path. ``version`` defaults to the next free number. Without ``text_signature`` only the
    core-ops ``translate_ids`` signature is written (and also serves as ``serving_default``)."""
    version = next_version(model_base_path) if version is None else int(version)
    target = os.path.join(model_base_path, str(version))
    check_finite(translator.model)
    with staged_export([target]) as ((output, sources),):
        _write_saved_model(translator, output, sources, text_signature)
    return target


def _write_saved_model(translator, output, sources, text_signature):
    vocabulary_path, config_path = write_run_files(
        sources, translator.tokenizer,
        {"model": translator.model.config.to_dict(), "decoding": decoding_settings(translator)})
    archive = keras.export.ExportArchive()
    # ExportArchive keeps only variables and resources; an Asset must hang off the saved root
    # to be copied into assets/ (reloaded: ``loaded.assets["vocabulary"].asset_path``).
    archive._tf_trackable.assets = {"vocabulary": tf.saved_model.Asset(vocabulary_path),
                                    "config": tf.saved_model.Asset(config_path)}
    if text_signature:
        archive.track(translator.tokenizer)
        archive.add_endpoint(TEXT_SIGNATURE, translator.translate_text,
                             input_signature=[TEXT_INPUT_SPEC])
    archive.add_endpoint(IDS_SIGNATURE, translator.translate_ids,
                         input_signature=[tf.TensorSpec([None, None], tf.int32, name="source_ids")])
    archive.write_out(output, verbose=False)


# The formats ``python -m trainers.export --format=...`` knows (OpenNMT-tf keeps a registry likewise).
# "ctranslate2" (optional extra): a CTranslate2 model folder <name>_ctranslate2/<version>.
EXPORTERS = {"saved_model": export_for_serving, "ctranslate2": export_ctranslate2}
