"""A training run's folder (``model_dir``) as one concept: what it holds and how to read it.

    model_dir/
      config.json          {"model": TransformerConfig, "training": TrainingConfig, "data": DataConfig,
                            "working_dir": the folder training ran in, "data_digests": the
                            SHA-256 of each data file, "vocab_path": ...,
                            "init_from": {...} (a fine-tuned run's source), ...}:
                            written when training starts
      summary.json         what the last training run did (steps, stop reason, losses, checkpoints)
      vocab.model          the run's own copy of its subword vocabulary
      checkpoint, ckpt-N.* tf.train.CheckpointManager's checkpoints (model, optimizer, step)
      averaged/ckpt.*      the average of the last checkpoints (section 6.1), model weights only
      ema/ckpt.*           the exponential moving average of the weights at the latest checkpoint
                           (--ema_decay), model weights only
      best/ckpt.*, best/best.json   the weights of the best dev BLEU (--keep_best_bleu)
      best_export/<step>/, best_export_ids/<step>/   the SavedModels of the best dev BLEU
                           (--export_best; one version each, the best so far)
      train.log, report.json, test.hyp   the quickstart's log, report and translations

Everything that reads or writes these names asks this module: the trainer, the averaging, the
evaluation, the translator, the exports and the programs. Building a model, what a checkpoint of
it holds and restoring it are ``keras_transformer.weights``'s; this module finds which checkpoint
(by name or path) and hands it there.
"""

import dataclasses
import functools
import hashlib
import json
import math
import os
import re
from typing import Optional, Sequence, Tuple

from keras_transformer import weights, writing

CONFIG_FILE = "config.json"
SUMMARY_FILE = "summary.json"
TRAIN_LOG = "train.log"
REPORT_FILE = "report.json"
HYPOTHESES_FILE = "{split}.hyp"
# config.json's record of where a fine-tuned run's weights came from (training/init_from.py):
# {"given", "run_dir", "checkpoint", "checkpoint_name", "unknown_piece_rate"}.
INIT_FROM_KEY = "init_from"
# config.json's record of the folder the training command ran in. The data record keeps the paths
# as the command was given them, and so does a fine-tuned run's record of its source; a program
# running in another folder reads a relative one that is not found from there in this one
# (``recorded_path``), so that a project copied or moved whole, runs and data together, reads its
# own copies.
WORKING_DIR_KEY = "working_dir"
# config.json's record of the bytes of a run's own data files: {field: [the SHA-256 of each file
# of its spec, None for one not on a local file system]} for each ``DATA_SPEC_FIELDS`` field set.
# Files moved on their own (to a node's local disk, another folder) are the same data to a resume.
DATA_DIGESTS_KEY = "data_digests"
# The DataConfig fields that name files or folders; the first three are specs (``SRC,TGT``).
DATA_SPEC_FIELDS = ("train_data", "dev_data", "test_data")
DATA_PATH_FIELDS = DATA_SPEC_FIELDS + ("data_dir", "ding_file", "libreoffice_help_dir",
                                       "vocab_path")
# A copy of the vocabulary inside the run folder, looked for first (a run that carries its own
# vocabulary cannot lose it when data/ is cleaned or moved).
VOCABULARY_FILE = "vocab.model"
# Checkpoint names besides a path: the average of the last checkpoints (section 6.1), the
# moving average of the weights and the best-dev-BLEU weights.
LATEST, AVERAGED, EMA, BEST = "latest", "averaged", "ema", "best"
# What evaluate, translate and export use by default: the first of these a run has (section 6.1
# decodes with averaged weights). An averaged or EMA checkpoint older than the latest one (the run
# trained on after writing it) is passed over; a best one is older by nature.
DEFAULT_ORDER = (AVERAGED, EMA, BEST, LATEST)
AVERAGED_PREFIX = os.path.join(AVERAGED, "ckpt")
EMA_PREFIX = os.path.join(EMA, "ckpt")
BEST_PREFIX = os.path.join(BEST, "ckpt")
BEST_RECORD = os.path.join(BEST, "best.json")
# --export_best's SavedModels: MODEL_DIR/best_export/<step> and MODEL_DIR/best_export_ids/<step>.
BEST_EXPORT = "best_export"


def _finite_json(value):
    """``value`` with NaN and infinities as None: JSON has no NaN, and a reader must not choke."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_json(v) for v in value]
    return value


def write_json(path: str, value: dict) -> dict:
    """Writes ``value`` as strict JSON (NaN/Inf as null), atomically; returns what was written."""
    value = _finite_json(value)
    writing.write_file(path, json.dumps(value, indent=2, sort_keys=True, allow_nan=False) + "\n")
    return value


def _gfile(path: str):
    """``tf.io.gfile`` for a gs://-style path, which only TensorFlow's file systems read; None for
    a local path, which the os module reads without starting TensorFlow, so that a program checking
    its flags answers a bad one at once."""
    if not writing.remote(path):
        return None
    import tensorflow as tf

    return tf.io.gfile


def _exists(path: str) -> bool:
    gfile = _gfile(path)
    return gfile.exists(path) if gfile else os.path.exists(path)


def _isdir(path: str) -> bool:
    gfile = _gfile(path)
    return gfile.isdir(path) if gfile else os.path.isdir(path)


def read_summary(model_dir: str) -> dict:
    """The ``summary.json`` the last training run in ``model_dir`` wrote at its end; {} if there
    is none (a new run, or one killed before its end) or it is not a JSON object."""
    path = os.path.join(model_dir, SUMMARY_FILE)
    if not _exists(path):
        return {}
    gfile = _gfile(path)
    try:
        with gfile.GFile(path) if gfile else open(path, encoding="utf-8") as stream:
            summary = json.load(stream)
    except ValueError:  # edited by hand into something else: as if there were none
        return {}
    return summary if isinstance(summary, dict) else {}


def read_config(model_dir: str) -> dict:
    """The ``config.json`` of the run in ``model_dir`` (ValueError naming the file if missing)."""
    path = os.path.join(model_dir, CONFIG_FILE)
    if not _exists(path):
        raise ValueError(f"{path} not found: {model_dir!r} is not the model_dir of a training run.")
    gfile = _gfile(path)
    with gfile.GFile(path) if gfile else open(path, encoding="utf-8") as stream:
        return json.load(stream)


def model_config(run: dict):
    """The ``TransformerConfig`` a run's config.json records."""
    from keras_transformer.config import TransformerConfig

    if not isinstance(run, dict) or not isinstance(run.get("model"), dict):
        raise ValueError(f"the run's {CONFIG_FILE} has no 'model' section.")
    return TransformerConfig.from_dict(run["model"])


def data_config(run: dict):
    """The ``DataConfig`` a run was trained on, or None if its config.json records none (or one of
    another version of this project). Its paths as this program finds them (``recorded_path``;
    an export's record names no working folder: its paths are read from this program's)."""
    from keras_transformer.data.config import DataConfig

    recorded = run.get("data")
    if not isinstance(recorded, dict):
        return None
    # Runs recorded before held-out splits trained on every pair of their training file.
    recorded = {"hold_out": False, **recorded}
    try:
        config = DataConfig(**recorded)
        return dataclasses.replace(config, **{
            name: ",".join(recorded_path(run, path) for path in value.split(","))
            if name in DATA_SPEC_FIELDS else recorded_path(run, value)
            for name in DATA_PATH_FIELDS if (value := getattr(config, name))})
    except (TypeError, ValueError):
        return None


def recorded_path(run: dict, path):
    """A path that the run's config.json (``run``) records as its training command was given it,
    as this program finds it: a relative one not found from this program's folder but found from
    the folder training ran in (``WORKING_DIR_KEY``) is made absolute from there; any other as
    recorded. A checkpoint prefix is found by its index file."""
    folder = run.get(WORKING_DIR_KEY)

    def found(where):
        return os.path.exists(where) or os.path.exists(where + ".index")

    if (not isinstance(path, str) or not path or not isinstance(folder, str)
            or not os.path.isabs(folder) or os.path.isabs(path) or writing.remote(path)
            or found(path)):
        return path
    there = os.path.normpath(os.path.join(folder, path))
    return there if found(there) else path


def resumed_data(model_dir: Optional[str]):
    """The DataConfig recorded by the run that ``model_dir`` resumes, or None: no run there (a new
    one, or ``model_dir`` None), no checkpoint yet, or a config.json that records no data (or one
    this version does not read)."""
    resumed = _resumed(model_dir)
    return resumed and resumed[1]


def _resumed(model_dir: Optional[str]):
    """``(config.json, its DataConfig)`` of the run that ``model_dir`` resumes, or None (as for
    ``resumed_data``): the record is read once for what is checked and carried on a resume."""
    if model_dir is None:
        return None
    try:
        run = read_config(model_dir)
        recorded = data_config(run)
    except (OSError, ValueError):
        return None
    import tensorflow as tf  # only now: a run with a record resumes, and TensorFlow reads its index

    if recorded is None or not tf.train.latest_checkpoint(model_dir):
        return None
    return run, recorded


def check_data(model_dir: str, asked) -> None:
    """A run resumes on the sentence pairs it trained on: ``asked`` (a DataConfig) must name them
    as its record does (``DataConfig.corpus``), or name files of the bytes it recorded
    (``DATA_DIGESTS_KEY``: the same files moved). The record names one corpus, whose test split
    evaluate and the floors read; other pairs are a new run's (``init_from`` starts it from this
    one's weights). A ValueError names what differs; a new run, or one whose config.json records
    no data, passes."""
    resumed = _resumed(model_dir)
    if resumed is None:
        return
    run, recorded = resumed
    trained, given = recorded.corpus(), asked.corpus()
    changed = [name for name in trained if given[name] != trained[name]]
    if changed and not {"dataset", "hold_out"} & set(changed):  # files named otherwise
        digests = run.get(DATA_DIGESTS_KEY) or {}
        changed = [name for name in changed
                   if not _same_bytes(digests.get(name), getattr(asked, name))]
    if changed:
        # the hold-out is named when it alone differs: other files make it differ too
        shown = [name for name in changed if name != "hold_out"] or changed
        raise ValueError(
            f"model_dir={model_dir} holds a run trained on other data ("
            + ", ".join(f"{name}={getattr(recorded, name)!r}, not {getattr(asked, name)!r}"
                        for name in shown)
            + "); resume it with the data it trained on, or train on this data in another "
            f"model_dir (init_from={model_dir} starts from its weights).")


def data_digests(asked, model_dir: Optional[str] = None) -> dict:
    """The ``DATA_DIGESTS_KEY`` record of the files ``asked`` (a DataConfig) names; where the run
    that ``model_dir`` resumes recorded the same files, its digests are carried (a resume does not
    read them again)."""
    run, recorded = _resumed(model_dir) or ({}, None)
    trained = recorded.corpus() if recorded is not None else {}
    carried = run.get(DATA_DIGESTS_KEY) or {}
    given = asked.corpus()
    return {name: (carried[name] if name in carried and trained[name] == given[name]
                   else _spec_digests(getattr(asked, name)))
            for name in DATA_SPEC_FIELDS if getattr(asked, name)}


def _same_bytes(recorded: Optional[list], spec: Optional[str]) -> bool:
    """Whether the files of ``spec`` hold the bytes of ``recorded`` (a ``DATA_DIGESTS_KEY``
    entry), each file recorded."""
    return bool(recorded and spec) and None not in recorded and _spec_digests(spec) == recorded


def _spec_digests(spec: str) -> list:
    """The SHA-256 of each file of ``spec`` (``SRC,TGT`` or one TSV); None for a file that is
    not on a local file system (or not there)."""
    def digest(path):
        if writing.remote(path) or not os.path.isfile(path):
            return None
        stat = os.stat(path)
        return _file_digest(os.path.abspath(path), stat.st_size, stat.st_mtime_ns)

    return [digest(path) for path in spec.split(",")]


@functools.lru_cache(maxsize=64)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    """The SHA-256 of the file ``path`` as it is at ``size`` and ``mtime_ns``: a command that
    checks a resume's files and then records them reads each once."""
    sha256 = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            sha256.update(chunk)
    return sha256.hexdigest()


def data_to_resume(model_dir: Optional[str], asked):
    """``asked`` (a DataConfig, after ``check_data``) with its held-out splits sized by the count
    the run in ``model_dir`` recorded when it started (``data.sized_as``); for a new run
    (``model_dir`` None, or without checkpoints) or one recorded before runs kept the count, by
    its training file now, the count the run then records."""
    from keras_transformer import data

    return data.sized_as(asked, resumed_data(model_dir) if asked.holds_out() else None)


def resolve_checkpoint(model_dir: str, checkpoint: Optional[str] = None) -> str:
    """The checkpoint prefix to restore. ``None``: the first of ``DEFAULT_ORDER`` the run has
    (see ``default_checkpoint``); ``"latest"``: the latest of ``model_dir``; ``"averaged"``:
    ``model_dir/averaged/ckpt`` (section 6.1's averaged weights); ``"ema"``:
    ``model_dir/ema/ckpt`` (the moving average of the weights); ``"best"``:
    ``model_dir/best/ckpt``; a directory: its checkpoint (see ``_checkpoint_in``); otherwise a
    checkpoint prefix (``.../ckpt-1000``, with or without ``.index``). A relative path is looked
    for from the working directory, then inside ``model_dir`` (``ckpt-1000``, ``best/ckpt``,
    ``averaged``): the first place holding a checkpoint is used. Only a latest checkpoint is found
    by TensorFlow (its index file names it); the others are looked up without starting it."""
    if checkpoint in (None, ""):
        return default_checkpoint(model_dir)[1]
    if checkpoint == LATEST:
        import tensorflow as tf

        path = tf.train.latest_checkpoint(model_dir)
        if path is None:
            raise ValueError(f"no checkpoint in {model_dir} (no 'checkpoint' index file naming one): "
                             "train first, or pass checkpoint=PATH.")
        return path
    named = {AVERAGED: (AVERAGED_PREFIX, "train with average_last > 0 or run "
                                         "trainers.average_checkpoints"),
             EMA: (EMA_PREFIX, "train with --ema_decay"),
             BEST: (BEST_PREFIX, "train with --keep_best_bleu")}
    if checkpoint in named:
        prefix, how = named[checkpoint]
        path = os.path.join(model_dir, prefix)
        if not _exists(path + ".index"):
            raise ValueError(f"no {checkpoint} checkpoint in {model_dir} ({path}.index not found): "
                             f"{how}.")
        return path
    if checkpoint.endswith(".index"):
        checkpoint = checkpoint[:-len(".index")]
    candidates = [checkpoint]
    if model_dir and not (os.path.isabs(checkpoint) or writing.remote(checkpoint)):
        inside = os.path.join(model_dir, checkpoint)
        if os.path.normpath(inside) != os.path.normpath(checkpoint):
            candidates.append(inside)
    problem = None  # an existing folder without a checkpoint, said if no other place has one
    for path in candidates:
        if _exists(path + ".index"):
            return path
        if _isdir(path):
            try:
                return _checkpoint_in(path, checkpoint if path == checkpoint else path)
            except ValueError as error:
                problem = problem or error
    if problem is not None:
        raise problem
    looked = ", no ".join(f"{path}.index" for path in candidates)
    names = "" if os.sep in checkpoint or writing.remote(checkpoint) else (
        f"; a name is one of {', '.join((LATEST, AVERAGED, EMA, BEST))}")
    raise ValueError(f"checkpoint {checkpoint!r} not found (no {looked}{names}).")


def _checkpoint_in(folder: str, shown: str) -> str:
    """The checkpoint prefix a folder (``shown`` as named) holds: the latest its ``checkpoint``
    index file names (a run folder, tf.train.CheckpointManager's), else its only prefix (the
    ``ckpt`` of averaged/, ema/ or best/, written without an index file), else the highest
    numbered of its ``NAME-N`` prefixes (a copy of a run's checkpoints without their index file).
    Several other prefixes are a ValueError naming them, as is a folder without any."""
    gfile = _gfile(folder)
    if (gfile.exists if gfile else os.path.exists)(os.path.join(folder, "checkpoint")):
        import tensorflow as tf

        path = tf.train.latest_checkpoint(folder)
        if path is not None:
            return path
    names = gfile.listdir(folder) if gfile else os.listdir(folder)
    prefixes = sorted(name.rstrip("/")[:-len(".index")] for name in names
                      if name.rstrip("/").endswith(".index"))
    if not prefixes:
        raise ValueError(f"checkpoint={shown!r} is a directory without a checkpoint in it.")
    if len(prefixes) == 1:
        return os.path.join(folder, prefixes[0])
    numbered = [re.fullmatch(r"(.+)-(\d+)", prefix) for prefix in prefixes]
    if all(numbered) and len({match.group(1) for match in numbered}) == 1:
        return os.path.join(folder, max(numbered, key=lambda match: int(match.group(2))).group(0))
    raise ValueError(f"checkpoint={shown!r} is a directory with several checkpoints and no "
                     f"'checkpoint' index file naming one ({', '.join(prefixes)}): pass one of "
                     "them.")


def default_checkpoint(model_dir: str) -> Tuple[str, str]:
    """``(name, prefix)`` of the checkpoint used when none is named: the first of
    ``DEFAULT_ORDER`` that ``model_dir`` holds (an averaged or EMA one only if it is not older
    than the latest checkpoint). A ValueError if the run has no checkpoint at all."""
    import tensorflow as tf

    latest = tf.train.latest_checkpoint(model_dir)
    for name, prefix in ((AVERAGED, AVERAGED_PREFIX), (EMA, EMA_PREFIX)):
        path = os.path.join(model_dir, prefix)
        if os.path.isfile(path + ".index") and (
                latest is None
                or os.path.getmtime(path + ".index") >= os.path.getmtime(latest + ".index")):
            return name, path
    best = os.path.join(model_dir, BEST_PREFIX)
    if os.path.isfile(best + ".index"):
        return BEST, best
    if latest is None:
        raise ValueError(f"no checkpoint in {model_dir} (no 'checkpoint' index file naming one, no "
                         f"{AVERAGED_PREFIX}, {EMA_PREFIX} or {BEST_PREFIX}): train first, or pass "
                         "checkpoint=PATH.")
    return LATEST, latest


def vocabulary_path(model_dir: str, run: dict, vocab_path: Optional[str] = None) -> str:
    """``vocab_path`` if given, else ``model_dir/vocab.model``, else the run's recorded
    ``vocab_path`` (``recorded_path``), else its data config's default vocabulary path; the first
    that exists."""
    if vocab_path:
        if not os.path.isfile(vocab_path):
            raise ValueError(f"vocabulary file {vocab_path} not found.")
        return vocab_path
    candidates = [os.path.join(model_dir, VOCABULARY_FILE)]
    if run.get("vocab_path"):
        candidates.append(recorded_path(run, run["vocab_path"]))
    recorded_data = data_config(run)
    if recorded_data is not None:
        candidates.append(recorded_data.effective_vocab_path)
    for path in candidates:
        if os.path.isfile(path):
            return path
    raise ValueError(f"the vocabulary of the run in {model_dir} was not found (tried "
                     f"{', '.join(dict.fromkeys(candidates))}); pass vocab_path (--vocab_path).")


def load_translator(model_dir: str, checkpoint: Optional[str] = None, decoding_config=None,
                    vocab_path: Optional[str] = None):
    """A ``Translator`` for the training run in ``model_dir``: the model of its ``config.json``
    with the weights of ``checkpoint`` (see ``resolve_checkpoint``; by default the first of
    ``DEFAULT_ORDER`` the run has) and the run's subword vocabulary (see ``vocabulary_path``). Its
    ``checkpoint`` attribute names the prefix restored, its ``data_config`` the run's corpus (see
    ``data_config``), which its exports record. Inference runs in float32 whatever the
    training precision (the variables are float32 either way). Every missing file is a ValueError
    naming it, and so is a checkpoint that does not fit the model."""
    from keras_transformer.inference import DecodingConfig, Translator
    from keras_transformer.tokenizer import SubwordTokenizer

    if not os.path.isdir(model_dir):
        raise ValueError(f"model_dir {model_dir} does not exist.")
    run = read_config(model_dir)
    config = model_config(run)
    path = resolve_checkpoint(model_dir, checkpoint)
    tokenizer = SubwordTokenizer.load(vocabulary_path(model_dir, run, vocab_path))
    if vocab_path and tokenizer.vocab_size != config.output_vocab_size:
        raise ValueError(f"vocab_path={vocab_path} has {tokenizer.vocab_size} pieces, the run in "
                         f"{model_dir} {config.output_vocab_size}: not the vocabulary it trained "
                         "with; leave vocab_path out for the run's own.")
    model = weights.build_model(config)
    weights.restore_model(model, path, config_path=f"{model_dir}/{CONFIG_FILE}")
    translator = Translator(model, tokenizer, decoding_config or DecodingConfig())
    translator.checkpoint = path
    translator.data_config = data_config(run)
    return translator


def load_ensemble(model_dirs: Sequence[str], checkpoints: Optional[Sequence[Optional[str]]] = None,
                  decoding_config=None, vocab_path: Optional[str] = None):
    """A ``Translator`` decoding the training runs in ``model_dirs`` together (an ensemble:
    ``inference.ensemble``), each run with its ``checkpoints`` entry (``load_translator``'s;
    default None each). The runs must share one vocabulary, the same subword pieces under the
    same ids: anything else is a ValueError naming the two runs. Its ``checkpoint`` attribute
    lists the prefixes restored, its ``data_config`` is the first run's."""
    from keras_transformer.inference import ensemble

    if isinstance(model_dirs, str):  # would be one run per character
        raise ValueError(f"model_dirs={model_dirs!r}: a list of run folders, not one string "
                         "(one run: load_translator).")
    checkpoints = list(checkpoints) if checkpoints is not None else [None] * len(model_dirs)
    members = [load_translator(model_dir, checkpoint, decoding_config, vocab_path)
               for model_dir, checkpoint in zip(model_dirs, checkpoints)]
    translator = ensemble(members, model_dirs, "runs")
    translator.checkpoint = [member.checkpoint for member in members]
    translator.data_config = members[0].data_config
    return translator
