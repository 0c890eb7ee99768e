"""Export for serving: a SavedModel that TF Serving loads.

Layout (what ``tensorflow_model_server --model_base_path`` expects): ``<base>/<version>/`` with
``saved_model.pb``, ``variables/`` and ``assets/`` (the subword vocabulary ``vocab.model`` and
``config.json``: the model config, the search settings and the corpus it was trained on). A version
folder appears complete or not at all: it is written under a temporary name and renamed, so a server
watching ``<base>`` never loads half an export; the text and the ids export of one version appear
together or not at all, and never from NaN weights.

Signatures (none needs XLA; TF Serving's CPU XLA is off by default):

- ``serving_default``: ``inputs`` tf.string [batch] -> ``translations`` tf.string, ``scores`` float32,
  ``truncated`` bool (tokenisation inside the graph: a server needs the tf-text ops).
- ``translate_ids``: ``source_ids`` int32 [batch, length] (each row subwords then EOS) -> ``ids``
  int32 [batch, beam, max_len], ``scores`` and ``lengths`` [batch, beam]: core TensorFlow ops only.
  Whatever follows a row's first EOS is padding, whichever ids it holds: TF Serving's batcher
  (``pad_variable_length_inputs``) pads with a request's first id, not PAD. A row without EOS is
  its non-PAD ids.
- ``translate_nbest`` (text export only): ``inputs`` tf.string [batch] -> the whole n-best list,
  ``translations`` tf.string and ``scores`` float32 [batch, beam] best first, ``truncated`` bool
  [batch] (``Translator.translate_text_nbest``).
- ``score`` (text export only): ``sources`` and ``targets`` tf.string [batch] -> the targets'
  ``log_prob`` float32, ``tokens`` int32, ``nll_per_token`` float32 and ``truncated`` bool, each
  [batch], by forced decoding (``Translator.score_text``).
- ``align`` (text export only): ``sources`` and ``targets`` tf.string [batch] -> the targets' word
  alignment to their sources by forced decoding (``Translator.align_text``, the last decoder
  layer): ``alignments`` tf.string [batch], ``SOURCE-TARGET`` pairs of 0-based word indices;
  ``source_words`` int32 [batch, target words], each target word's source word or -1;
  ``attention`` float32 [batch, target subwords, source subwords], each with EOS.
- ``score_ids``: ``source_ids`` and ``target_ids`` int32 [batch, length] (each row subwords then EOS)
  -> ``log_prob``, ``tokens``, ``nll_per_token`` [batch]: core TensorFlow ops only; what follows a
  row's first EOS is padding, as for ``translate_ids``.

A server loads every op of a SavedModel, used or not, so a server without the tf-text ops cannot load
the first one at all. ``export_for_serving`` therefore writes two: ``<name>`` with all six signatures
and ``<name>_ids`` with only ``translate_ids`` (also its ``serving_default``) and ``score_ids``, free of
custom ops.

How it is written: each signature is traced once, to a concrete function, and saved as it is with
``tf.saved_model.save``; the saved root keeps the variables those functions read (TensorFlow's own,
under the Keras ones), the tokenizer's resource and the assets. A root holding the Keras model instead
reloads with ``tf.saved_model.load`` but not in the session-based loader TF Serving uses ("Could not
find variable ..."). ``keras.export.ExportArchive`` keeps the same variables, but traces every
signature twice: once to list them, and again inside ``tf.saved_model.save``, which retraces every
``tf.function`` it saves (a function's traces are keyed on the save context), never a concrete one.
"""

import os

import tensorflow as tf

from keras_transformer.export.common import (check_finite, export_settings, staged_export,
                                             version_holding, version_paths, write_run_files)
from keras_transformer.inference import (ALIGN_SIGNATURE, IDS_SIGNATURE, NBEST_SIGNATURE,
                                         SCORE_IDS_SIGNATURE, SCORE_SIGNATURE, TEXT_SIGNATURE)


def export_for_serving(translator, export_dir, name, version=None):
    """Writes ``export_dir/<name>/<version>`` (the text, n-best, score and ids signatures) and
    ``export_dir/<name>_ids/<version>`` (the ids signatures only) with one version number, by default the next free
    one; returns both paths. The two appear together or not at all."""
    targets = version_paths(export_dir, name, ("", "_ids"), version)
    check_finite(translator.model)
    traced = _traced_signatures(translator, text_signature=True)
    ids_only = {name: traced[name] for name in (IDS_SIGNATURE, SCORE_IDS_SIGNATURE)}
    with staged_export(targets) as staged:
        for (output, sources), signatures in zip(staged, (traced, ids_only)):
            _write_saved_model(translator, signatures, output, sources)
    return tuple(targets)


def exports_holding(export_dir, name, checkpoint):
    """The two version paths ``export_for_serving`` wrote of ``checkpoint``'s weights, if the
    latest versions under ``export_dir/<name>`` and ``export_dir/<name>_ids`` hold them (see
    ``version_holding``); else None. The same command run again needs no new version."""
    held = version_holding(os.path.join(export_dir, name), checkpoint)
    if held is None:
        return None
    ids = os.path.join(export_dir, f"{name}_ids", os.path.basename(held))
    return (held, ids) if os.path.isfile(os.path.join(ids, "saved_model.pb")) else None


def export_saved_model(translator, model_base_path, version=None, text_signature=True):
    """Writes ``translator`` (an ``inference.Translator``) to ``model_base_path/<version>`` and returns
    that path. ``version`` defaults to the next free number. Without ``text_signature`` only the
    core-ops signatures are written, ``translate_ids`` (also serving as ``serving_default``) and
    ``score_ids``."""
    (target,) = version_paths(*os.path.split(os.path.normpath(model_base_path)), ("",), version)
    check_finite(translator.model)
    with staged_export([target]) as ((output, sources),):
        _write_saved_model(translator, _traced_signatures(translator, text_signature), output,
                           sources)
    return target


def _traced_signatures(translator, text_signature):
    """{signature name: concrete function}: the translator's own ``tf.function`` s, each traced at
    most once per translator (so the text and the ids export share their ids signatures, and
    ``ExportBest``'s repeated exports of one run trace nothing again). ``tf.saved_model.save``
    writes a concrete function as it is, and it reads the variables when it runs, whenever it was
    traced."""
    functions = {}
    if text_signature:
        functions = {TEXT_SIGNATURE: translator.text_function(),
                     NBEST_SIGNATURE: translator.nbest_function(),
                     SCORE_SIGNATURE: translator.score_function(),
                     ALIGN_SIGNATURE: translator.align_function()}
    functions[IDS_SIGNATURE] = translator.ids_function()
    functions[SCORE_IDS_SIGNATURE] = translator.score_ids_function()
    return {name: function.get_concrete_function() for name, function in functions.items()}


def _write_saved_model(translator, traced, output, sources):
    vocabulary_path, config_path = write_run_files(sources, translator.tokenizer,
                                                   export_settings(translator))
    root = tf.Module()
    # The attribute keras.export.ExportArchive keeps them under (trainers.shipped reads it).
    root._all_variables = _variables_read_by(traced.values())
    if TEXT_SIGNATURE in traced:
        root.tokenizer = translator.tokenizer  # its SentencePiece model, a resource of the graph
    root.assets = {"vocabulary": tf.saved_model.Asset(vocabulary_path),
                   "config": tf.saved_model.Asset(config_path)}
    for name, function in traced.items():
        setattr(root, name, function)
    # TF Serving answers a request without a signature name with serving_default.
    signatures = {"serving_default": traced[next(iter(traced))], **traced}
    # The signatures search and score: nothing differentiates them, so the layers' custom
    # gradients (the training step's) are not traced into the export.
    tf.saved_model.save(root, output, signatures=signatures,
                        options=tf.saved_model.SaveOptions(experimental_custom_gradients=False))


def _variables_read_by(functions):
    """The variables the concrete ``functions`` capture, each once, in their order."""
    variables = {}
    for function in functions:
        for variable in function.variables:
            variables.setdefault(id(variable), variable)
    return list(variables.values())
