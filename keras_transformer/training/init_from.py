"""Fine-tuning: a new run whose model starts from the weights of another run (fairseq's
``--restore-file --reset-optimizer --reset-lr-scheduler``, OpenNMT-tf's ``--checkpoint_path``).

``TrainingConfig(init_from=SOURCE)``: a run folder (its default checkpoint: averaged, else ema,
else best, else latest, see ``runs.default_checkpoint``), a checkpoint prefix, or a SavedModel of
the project's export (a version folder, or the model's folder: its highest version), such as the
shipped model, which comes without its run. Only the model's weights are loaded; the optimizer, the
step and the schedule start fresh. The new run uses the source's vocabulary (its embedding rows
belong to it) and must have the same architecture; the regularisers (dropouts, label smoothing)
may differ. Its ``config.json`` records the source (``"init_from"``), and a resumed run continues
from its own checkpoints, not the source's.
"""

import dataclasses
import os
import re
from typing import Iterable, Optional

from keras_transformer import runs
from keras_transformer.weights import build_model, restore_model

# TransformerConfig fields that do not shape the weights or their meaning: free to differ when
# fine-tuning. max_length shapes them only for learned positions (see differences).
FREE_FIELDS = ("dropout_rate", "attention_dropout", "relu_dropout", "label_smoothing",
               "source_word_dropout", "target_word_dropout", "decoder_layerdrop", "max_length")
# Above this share of byte-fallback/unknown pieces the source vocabulary covers the new training
# text badly: a vocabulary learned on a text leaves (character_coverage 0.9999) next to none.
UNKNOWN_PIECE_WARNING = 0.01
_BYTE_PIECE = re.compile(r"^<0x[0-9A-Fa-f]{2}>$")
SAVED_MODEL = "saved_model"  # InitSource.name of an exported SavedModel


@dataclasses.dataclass(frozen=True)
class InitSource:
    """Where a fine-tuned run's weights come from."""

    given: str           # what the user passed
    run_dir: Optional[str]  # the source run's folder; None for a SavedModel
    checkpoint: str      # the checkpoint prefix restored, or the SavedModel's version folder
    name: Optional[str]  # averaged/ema/best/latest when chosen by default, saved_model for an
    #                      export, None for a named prefix
    model_config: object  # the source's TransformerConfig
    vocab_path: str      # the source's vocabulary (or why it was not found)
    config_path: str     # the file that describes the source's model

    @property
    def is_export(self) -> bool:
        return self.name == SAVED_MODEL

    def record(self) -> dict:
        """What the new run's config.json keeps under ``"init_from"``."""
        return {"given": self.given, "run_dir": self.run_dir, "checkpoint": self.checkpoint,
                "checkpoint_name": self.name}


# The paths of that record, as its run's training command found them.
RECORDED_PATHS = ("run_dir", "checkpoint")


def carried_record(previous_run: dict):
    """The ``"init_from"`` record of ``previous_run`` (a run's config.json) for the config.json of
    its resume, with its paths as found from this program's folder (``runs.recorded_path``): the
    resume records its own working folder, from which the first one's relative paths would not
    be found."""
    record = previous_run[runs.INIT_FROM_KEY]
    if not isinstance(record, dict):
        return record
    return {**record, **{key: runs.recorded_path(previous_run, record[key])
                         for key in RECORDED_PATHS if key in record}}


def check_resumed(model_dir: str, given: Optional[str]) -> None:
    """A run resumed with ``given`` as its init_from is the run that started from it: it resumes
    from its own checkpoints, and another source (or one for a run that started from scratch)
    would be ignored: a ValueError instead. Nothing for a new run or no ``given``."""
    import tensorflow as tf

    if not given or not tf.train.latest_checkpoint(model_dir):
        return
    try:
        run = runs.read_config(model_dir)
    except (OSError, ValueError):
        return  # no readable record: the trainer's own checks speak
    recorded = run.get(runs.INIT_FROM_KEY) or {}
    if recorded.get("given") == given:
        return
    try:  # the same source named otherwise (from another folder, its base folder)?
        same = os.path.realpath(resolve(given).checkpoint) == \
            os.path.realpath(runs.recorded_path(run, str(recorded.get("checkpoint"))))
    except ValueError:
        same = False
    if not same:
        started = (f"started from {recorded['given']}" if recorded.get("given")
                   else "started from scratch")
        raise ValueError(f"init_from={given}: the run in {model_dir} {started} and resumes from "
                         "its own checkpoints; a run from this model needs another --model_dir.")


def _error(given, message):
    return ValueError(f"init_from={given}: {message}")


def resolve(given: str) -> InitSource:
    """The source of ``init_from``; a ValueError starting ``init_from=...:`` if there is none."""
    import tensorflow as tf

    if not given:
        raise _error(given, "empty; name a run folder, a checkpoint prefix or a SavedModel.")
    name = None
    if tf.io.gfile.isdir(given):
        run_dir = given
        if not tf.io.gfile.exists(os.path.join(given, runs.CONFIG_FILE)):
            return _export_source(given)
        try:
            run = runs.read_config(run_dir)
            name, checkpoint = runs.default_checkpoint(run_dir)
        except ValueError as error:
            raise _error(given, str(error)) from None
    else:
        checkpoint = given[:-len(".index")] if given.endswith(".index") else given
        if not tf.io.gfile.exists(checkpoint + ".index"):
            raise _error(given, f"no such run folder, checkpoint or SavedModel (no folder {given}, "
                                f"no {checkpoint}.index).")
        # A training checkpoint lies in its run folder, an averaged or best one a level below.
        folder = os.path.dirname(checkpoint) or "."
        candidates = [folder, os.path.dirname(folder) or "."]
        run_dir = next((d for d in candidates
                        if tf.io.gfile.exists(os.path.join(d, runs.CONFIG_FILE))), None)
        if run_dir is None:
            raise _error(given, f"no {runs.CONFIG_FILE} of a training run beside the checkpoint "
                                f"(looked in {', '.join(dict.fromkeys(candidates))}).")
        run = runs.read_config(run_dir)
    try:
        model_config = runs.model_config(run)
    except ValueError as error:
        raise _error(given, str(error)) from None
    try:
        vocab_path = runs.vocabulary_path(run_dir, run)
    except ValueError as error:  # needed only by a run that reads text (see tokenizer_for)
        vocab_path = str(error)
    return InitSource(given, run_dir, checkpoint, name, model_config, vocab_path,
                      f"{run_dir}/{runs.CONFIG_FILE}")


def _export_source(given: str) -> InitSource:
    """The source of a folder without a run's config.json: a SavedModel (a version folder or a
    model's folder of versions), else a ValueError saying it is neither."""
    from keras_transformer.inference import (CONFIG_ASSET, VOCABULARY_ASSET,
                                             exported_model_config)
    from keras_transformer.weights import exported_version_path

    try:
        version = exported_version_path(given)
    except ValueError:
        raise _error(given, f"no {runs.CONFIG_FILE}: not the model_dir of a training run, nor "
                            "a SavedModel (no saved_model.pb, no version folder with one).") from None
    try:
        model_config = exported_model_config(version)
    except ValueError as error:
        raise _error(given, str(error)) from None
    return InitSource(given, None, version, SAVED_MODEL, model_config,
                      os.path.join(version, "assets", VOCABULARY_ASSET),
                      os.path.join(version, "assets", CONFIG_ASSET))


def differences(source_config, config) -> list:
    """``["d_model 128, this run 256", ...]``: the fields where ``config`` cannot take the
    weights of ``source_config``."""
    source, current = source_config.to_dict(), config.to_dict()
    free = set(FREE_FIELDS)
    if "learned" in (source.get("positional"), current.get("positional")):
        free.discard("max_length")  # the position table has max_length rows
    return [f"{name} {source.get(name)}, this run {current[name]}"
            for name in current if name not in free and source.get(name) != current[name]]


def check_model(source: InitSource, config) -> None:
    """A ValueError naming every architecture difference between ``config`` and the source's."""
    changed = differences(source.model_config, config)
    if changed:
        raise _error(source.given, f"its model ({source.config_path}) differs from this run's: "
                                   f"{'; '.join(changed)}; pass the source's model flags "
                                   "(--preset, --d_model, --num_layers, ...).")


def restore(model, source: InitSource) -> None:
    """Loads the source's model weights into ``model`` (a checkpoint's optimizer state, step and
    schedule are not read).

    Through a model of the source's own config: a checkpoint holds the model's variables as one
    list in the model's order, and a dropout that is zero in one run and not in the other adds
    or removes random-generator states in that list. Those states are not weights; the weights
    (the floating-point variables) are the same list in both, and are copied in order."""
    import tensorflow as tf

    from keras_transformer.inference import restore_from_export

    source_model = build_model(source.model_config)
    try:
        if source.is_export:
            restore_from_export(source_model, source.checkpoint)
        else:
            restore_model(source_model, source.checkpoint, config_path=source.config_path)
    except ValueError as error:
        raise _error(source.given, str(error)) from None
    weights = [v for v in source_model.variables if tf.as_dtype(v.dtype).is_floating]
    targets = [v for v in model.variables if tf.as_dtype(v.dtype).is_floating]
    shapes = [tuple(v.shape) for v in weights]
    if shapes != [tuple(v.shape) for v in targets]:
        raise _error(source.given, f"its {len(weights)} weight tensors do not match this run's "
                                   f"{len(targets)} (another architecture).")
    for target, weight in zip(targets, weights):
        target.assign(weight)


def tokenizer_for(source: InitSource, vocab_path: Optional[str] = None):
    """The source's vocabulary; ``vocab_path`` (an explicit --vocab_path) must be the same file
    content, since the model's embedding rows belong to the source's pieces."""
    from keras_transformer.tokenizer import SubwordTokenizer

    if not os.path.isfile(source.vocab_path):
        raise _error(source.given, source.vocab_path)
    tokenizer = SubwordTokenizer.load(source.vocab_path)
    if vocab_path:
        same = os.path.isfile(vocab_path)
        if same:
            with open(vocab_path, "rb") as stream:
                same = stream.read() == tokenizer.model_proto
        if not same:
            raise ValueError(f"vocab_path={vocab_path}: not the vocabulary of the init_from run "
                             f"({source.vocab_path}), whose pieces the model's embedding rows "
                             "belong to; leave --vocab_path out to use that one.")
    return tokenizer


def unknown_piece_rate(tokenizer, texts: Iterable[str]) -> float:
    """The share of the subword pieces of ``texts`` that are byte-fallback pieces (a character
    the vocabulary lacks, spelled a UTF-8 byte at a time) or ``<unk>``: how badly a vocabulary
    learned on other text covers these."""
    import numpy as np
    import tensorflow as tf

    texts = [t for t in texts if t]
    if not texts:
        return 0.0
    ids = tokenizer.tokenize(tf.constant(texts)).flat_values.numpy()
    if not ids.size:
        return 0.0
    pieces = tokenizer.id_to_piece(tf.range(tokenizer.vocab_size)).numpy()
    unknown = np.array([_BYTE_PIECE.match(p.decode("utf-8", "replace")) is not None
                        for p in pieces])
    unknown[tokenizer.unk_id] = True
    return float(unknown[ids].mean())
