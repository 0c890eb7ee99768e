"""Export for serving: a SavedModel that TF Serving loads, written with ``keras.export.ExportArchive``.

Layout (what ``tensorflow_model_server --model_base_path`` expects): ``<base>/<version>/`` with
``saved_model.pb``, ``variables/`` and ``assets/`` (the subword vocabulary ``vocab.model`` and the
model's ``config.json``). A version folder appears complete or not at all: it is written under a
temporary name and renamed, so a server watching ``<base>`` never loads half an export.

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
import shutil
import tempfile

import keras
import tensorflow as tf

from keras_transformer.export_ctranslate2 import export_ctranslate2
from keras_transformer.inference import TEXT_INPUT_SPEC

TEXT_SIGNATURE = "serving_default"
IDS_SIGNATURE = "translate_ids"
VOCABULARY_ASSET = "vocab.model"
CONFIG_ASSET = "config.json"


@contextlib.contextmanager
def staged_export(target, what="the export"):
    """Writes an export folder so that it appears complete or not at all.

    Yields ``(output, sources)``: ``output`` is a not-yet-existing folder to write the export into,
    ``sources`` an existing scratch folder for files it copies in (vocabulary, configuration). Both
    live in a temporary folder beside ``target``; on success ``output`` is renamed to ``target``.
    Errors are ValueErrors naming the folder."""
    if os.path.exists(target):
        raise ValueError(f"{target} exists already; choose another version or remove it.")
    parent = os.path.dirname(os.path.abspath(target))
    try:
        os.makedirs(parent, exist_ok=True)
        staging = tempfile.mkdtemp(prefix=".tmp-", dir=parent)
    except OSError as error:
        raise ValueError(f"cannot write {what} under {parent}: {error}") from None
    try:
        sources = os.path.join(staging, "sources")
        os.makedirs(sources)
        output = os.path.join(staging, "output")
        yield output, sources
        os.replace(output, target)
    except OSError as error:
        raise ValueError(f"writing {what} to {target} failed: {error}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


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
    (ids only) with one version number, by default the next free one; returns both paths."""
    bases = [os.path.join(export_dir, name), os.path.join(export_dir, f"{name}_ids")]
    version = max(next_version(base) for base in bases) if version is None else version
    return (export_saved_model(translator, bases[0], version),
            export_saved_model(translator, bases[1], version, text_signature=False))


def export_saved_model(translator, model_base_path, version=None, text_signature=True):
    """Writes ``translator`` (an ``inference.Translator``) to ``model_base_path/<version>`` and returns
    that path. ``version`` defaults to the next free number. Without ``text_signature`` only the
    core-ops ``translate_ids`` signature is written (and also serves as ``serving_default``)."""
    version = next_version(model_base_path) if version is None else int(version)
    target = os.path.join(model_base_path, str(version))
    with staged_export(target) as (output, sources):
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
    return target


# The formats ``python -m trainers.export --format=...`` knows (OpenNMT-tf keeps a registry likewise).
# "ctranslate2" (optional extra): a CTranslate2 model folder <name>_ctranslate2/<version>.
EXPORTERS = {"saved_model": export_for_serving, "ctranslate2": export_ctranslate2}
