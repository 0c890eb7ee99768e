"""What every export format shares: staging (a version folder appears whole or not at all; the
exports of one call appear together), version numbers, the run files that travel with an export
(vocabulary, configuration: the model, the decoding settings and the corpus it was trained on), and
the refusal of non-finite weights."""

import contextlib
import dataclasses
import json
import numbers
import os
import re

from keras_transformer import writing
from keras_transformer.inference import CONFIG_ASSET, VOCABULARY_ASSET, recorded_settings
from keras_transformer.weights import exported_version_path


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


def export_settings(translator):
    """The configuration an export of ``translator`` carries: its model config, its search
    settings and, under ``"data"``, the corpus it was trained on in the form of the run's own
    config.json (``runs.data_config`` reads either), so that the export can be scored on that
    corpus' test split. Paths are recorded as the training command was given them (or as read from
    its folder, by a program running elsewhere: ``runs.data_config``): relative ones resolve from
    the folder a program reading the export runs in. ``"data"`` is None for a Translator not
    loaded from a run folder (only ``runs.load_translator`` knows the run's corpus), unless it is
    given one.
    ``"checkpoint"``: the checkpoint the weights were restored from, as it was given (a
    translator loaded from a run folder, or from an export that records it). ``"selected"``: why
    these weights, where the translator says (``--export_best``: the step and its dev BLEU)."""
    data = getattr(translator, "data_config", None)
    settings = {"model": translator.model.config.to_dict(),
                "decoding": decoding_settings(translator),
                "data": None if data is None else dataclasses.asdict(data)}
    checkpoint = getattr(translator, "checkpoint", None)
    if isinstance(checkpoint, str):
        settings["checkpoint"] = checkpoint
    if getattr(translator, "selected", None) is not None:
        settings["selected"] = translator.selected
    return settings


def recorded_weights(path):
    """Where the weights of the SavedModel at ``path`` came from, as it records them: ``from
    runs/x/averaged/ckpt``, ``step 8000, dev BLEU 21.3`` (a best export's), both, or None (an
    export written before exports recorded it, or of a Translator built in memory)."""
    settings = recorded_settings(path) or {}
    selected = settings.get("selected") or {}
    parts = []
    if isinstance(settings.get("checkpoint"), str):
        parts.append(f"from {settings['checkpoint']}")
    if "step" in selected and "dev_bleu" in selected:
        parts.append(f"step {selected['step']}, dev BLEU {selected['dev_bleu']:.2f}")
    return "; ".join(parts) or None


def version_holding(model_base_path, checkpoint):
    """The highest version under ``model_base_path`` if it was exported from ``checkpoint`` (a
    prefix) after that checkpoint was last written, so that it holds its weights; else None. A run
    exported again without training in between needs no new version."""
    try:
        path = exported_version_path(model_base_path)
    except ValueError:
        return None
    recorded = (recorded_settings(path) or {}).get("checkpoint")
    if not isinstance(recorded, str):
        return None
    try:
        same = os.path.samefile(recorded + ".index", checkpoint + ".index")
        later = (os.path.getmtime(os.path.join(path, "saved_model.pb"))
                 >= os.path.getmtime(checkpoint + ".index"))
    except OSError:  # the recorded checkpoint is gone, or relative to another folder
        return None
    return path if same and later else None


def recorded_data_config(path):
    """The ``DataConfig`` the SavedModel at ``path`` records, or None: an export written before
    exports recorded their corpus, of a Translator built in memory, or not written by this
    project."""
    from keras_transformer import runs

    settings = recorded_settings(path)
    return runs.data_config(settings) if settings is not None else None


def next_version(model_base_path):
    """1 + the largest numeric version folder under ``model_base_path`` (1 if there is none)."""
    if not os.path.isdir(model_base_path):
        return 1
    versions = [int(name) for name in os.listdir(model_base_path) if re.fullmatch(r"\d+", name)]
    return max(versions, default=0) + 1


def version_paths(export_dir, name, suffixes, version=None):
    """``export_dir/<name><suffix>/<version>`` for each of ``suffixes``, one version number for
    all: ``version`` or, by default, the next free one under every folder. A ValueError for a
    ``name`` that is not one folder name or a ``version`` that is not a whole number >= 0, the
    only version folders TF Serving (and its watcher of new versions) loads."""
    if not isinstance(name, str) or not name.strip() or os.sep in name or name in (".", ".."):
        raise ValueError(f"name={name!r}: the model's folder name under export_dir, e.g. "
                         "'translator'.")
    bases = [os.path.join(export_dir, name + suffix) for suffix in suffixes]
    if version is None:
        version = max(next_version(base) for base in bases)
    elif isinstance(version, str) and version.isdigit():
        version = int(version)
    if isinstance(version, bool) or not isinstance(version, numbers.Integral) or version < 0:
        raise ValueError(f"version={version!r}: a whole number >= 0 (a version folder's name).")
    return [os.path.join(base, str(int(version))) for base in bases]
