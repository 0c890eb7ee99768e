"""From a DataConfig to text pairs, the shared vocabulary and token-budget batches.

One entry point per need: :func:`load_text_pairs` (any dataset, any split, as
``(source, target)`` string pairs), :func:`load_or_learn_tokenizer` (the shared subword
vocabulary of the training text, learned once and reused), :func:`make_dataset` and
:func:`make_distributed_dataset_fn` (batches as section 5.1).
"""

import dataclasses
import hashlib
import json
import os
import random
from typing import Callable, Iterator, Optional, Tuple

import tensorflow as tf

from keras_transformer.data import batching, ding, files, libreoffice_help, wmt
from keras_transformer.data.config import (DING_DATASET, FILES_DATASET, OFFLINE_DATASETS,
                                           DataConfig)
from keras_transformer import writing
from keras_transformer.tokenizer import SubwordTokenizer

SPLITS = ("train", "dev", "test")
# Training examples shuffled within a window of this many before bucketing (one device's pipeline
# and each replica's alike); held-out splits are read in order.
TRAINING_SHUFFLE_BUFFER = 20000
_SPEC_FLAGS = {"train": "train_data", "dev": "dev_data", "test": "test_data"}


def _sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _offline_corpus(config: DataConfig):
    """(module, source path, DataConfig field naming it) of an offline corpus."""
    if config.dataset == DING_DATASET:
        return ding, ding.resolve_ding_file(config.ding_file), "ding_file"
    return (libreoffice_help, libreoffice_help.resolve_help_dir(config.libreoffice_help_dir),
            "libreoffice_help_dir")


def offline_corpus_to_fetch(config: DataConfig) -> Optional[Tuple[Tuple[str, ...], str]]:
    """``(Debian packages, folder)`` when ``config``'s offline corpus must be fetched before it can
    be read: its flag is unset, and it is neither where ``apt-get install`` puts it nor unpacked
    in the project. None otherwise (own files, WMT, a corpus found, or one whose flag names a
    folder: a wrong path is the user's to fix)."""
    if config.dataset not in OFFLINE_DATASETS:
        return None
    module, source, field = _offline_corpus(config)
    if getattr(config, field) or module.found(source):
        return None
    return module.PACKAGES, module.PROJECT_PACKAGE_DIR


def fetch_offline(config: DataConfig) -> str:
    """Fetches ``config``'s offline corpus into the project unless it is found already (see
    ``offline_corpus_to_fetch``); returns where the corpus is. A ValueError saying why where it
    cannot be fetched."""
    module, _, field = _offline_corpus(config)
    return getattr(config, field) or module.fetch()


def _source_fingerprint(path: str) -> str:
    return libreoffice_help.fingerprint(path) if os.path.isdir(path) else _sha256_file(path)


def prepare_offline(config: DataConfig):
    """Builds (once) the TFDS dataset of an offline corpus (``ding_de_en``,
    ``libreoffice_help_en_de``) under ``config.data_dir``; returns the builder.

    The source's SHA-256 is recorded next to the prepared data so a different dictionary
    file or LibreOffice version is never silently served from an old preparation. Preparing
    leaves Python's random numbers as it found them, so a seeded run that prepared its corpus
    starts from the same weights as the same run on a corpus prepared before.
    """
    module, source, field = _offline_corpus(config)
    builder = module.builder_class()(**{module.SOURCE_KWARG: source}, data_dir=config.data_dir)
    marker = os.path.join(builder.data_dir, "source.sha256")
    if builder.is_prepared():
        if os.path.exists(source) and os.path.isfile(marker):
            with open(marker) as f:
                recorded = f.read().strip()
            if recorded != _source_fingerprint(source):
                raise ValueError(
                    f"{field}={source!r} differs from the {module.SOURCE_NOUN} the prepared "
                    f"corpus in {builder.data_dir} was extracted from; delete that directory to "
                    "re-extract, or use another data_dir."
                )
        return builder
    module.check_source(source)  # fails early with a clear message (missing, bad text)
    # TFDS names its temporary folder with Python's random numbers, from which Keras draws
    # the default seeds of the weights and of dropout.
    state = random.getstate()
    try:
        builder.download_and_prepare()
    finally:
        random.setstate(state)
    writing.write_file(marker, _source_fingerprint(source))
    return builder


def load_text_pairs(config: DataConfig, split: str, limit: Optional[int] = None) -> tf.data.Dataset:
    """``(source, target)`` ``tf.string`` pairs of ``split`` in {"train", "dev", "test"} (its
    first ``limit`` pairs if given)."""
    if split not in SPLITS:
        raise ValueError(f"split={split!r}: choose one of {', '.join(SPLITS)}")
    if config.dataset in wmt.WMT14:
        pairs = wmt.load(config.dataset, split, config.data_dir)
        return pairs.take(limit) if limit else pairs
    if config.dataset in OFFLINE_DATASETS:
        builder = prepare_offline(config)
        # A prefix as TFDS's own split slice: .take() on the dataset TFDS caches in memory would
        # leave the cache half-read (and TensorFlow warns about it).
        name = wmt.tfds_split(split)
        if limit and limit < builder.info.splits[name].num_examples:  # TFDS refuses longer slices
            name += f"[:{limit}]"
        examples = builder.as_dataset(split=name, shuffle_files=False)
        return examples.map(lambda ex: (ex["en"], ex["de"]), num_parallel_calls=tf.data.AUTOTUNE)
    assert config.dataset == FILES_DATASET
    held_out = held_out_splits(config)
    spec = getattr(config, _SPEC_FLAGS[split])
    if split in held_out or (split == "train" and held_out):
        training_file = files.parse_spec(config.train_data, "train_data")
        total = files.check(training_file)
        pairs = files.hold_out(files.load(training_file), hold_out_pairs(config), split, held_out)
        if split != "train" and not any(True for _ in pairs.take(1)):
            raise ValueError(
                f"train_data={config.train_data!r}: no {split} pairs held out of it: its {total} "
                "pairs have too few different source sentences to fall into the held-out share; "
                f"pass {_SPEC_FLAGS[split]}=PATH, or hold_out=False to train on every pair."
            )
    elif spec:
        pairs = files.load(files.parse_spec(spec, _SPEC_FLAGS[split]))
    else:
        why = ""
        if split in config.holds_out():
            why = (f" (train_data has {files.check(files.parse_spec(config.train_data))} pairs, "
                   f"too few to hold a {split} split out of: at least "
                   f"{files.HELD_OUT_MIN_PAIRS})")
        raise ValueError(
            f"{_SPEC_FLAGS[split]} is not set: dataset='files' needs it for the {split} split "
            f"(PATH.tsv or SRC_PATH,TGT_PATH){why}."
        )
    return pairs.take(limit) if limit else pairs


def held_out_splits(config: DataConfig) -> Tuple[str, ...]:
    """The splits held out of ``config``'s training file (``data/files.py``, "Held-out splits"):
    those of ``config.holds_out()``, when the file has enough pairs to hold them out of
    (``hold_out_pairs``, else its count now)."""
    splits = config.holds_out()
    if splits and hold_out_pairs(config) < files.HELD_OUT_MIN_PAIRS:
        return ()
    return splits


def hold_out_pairs(config: DataConfig) -> int:
    """The count of pairs ``config``'s held-out shares are sized by: ``config.hold_out_pairs``,
    else the count of its training file now (which this validates)."""
    count = files.check(files.parse_spec(config.train_data, "train_data"))
    return config.hold_out_pairs or count


def sized_as(config: DataConfig, recorded: Optional[DataConfig] = None) -> DataConfig:
    """``config`` with the count its held-out shares are sized by (``hold_out_pairs``) set: the
    count ``recorded`` (a run's record) sized them by where it names the same corpus, so that
    pairs added to or removed from the training file since cannot move a pair the run trained
    on into its dev or test split; else its own, or the file's count now. Configs without
    held-out splits are returned as they are."""
    if not config.holds_out():
        return config
    if recorded is not None and recorded.hold_out_pairs and recorded.corpus() == config.corpus():
        return dataclasses.replace(config, hold_out_pairs=recorded.hold_out_pairs)
    return dataclasses.replace(config, hold_out_pairs=hold_out_pairs(config))


def splits_note(config: DataConfig) -> str:
    """How ``config``'s dev and test splits relate to its training pairs, for the programs' output
    ("" if there is nothing to say): what is held out of the training file, e.g. "dev and test held
    out of train.tsv by a hash of each source sentence", a dev or test file that is the training
    file itself, whose scores are then of pairs the model trains on, and a file whose first line
    looks like a header of column names (``files.header_line``)."""
    notes = []
    held_out = held_out_splits(config)
    if held_out:
        notes.append(f"{' and '.join(held_out)} held out of {config.train_data} by a hash of each "
                     "source sentence")
    if config.dataset == FILES_DATASET and config.train_data:
        trained = os.path.realpath(config.train_data.split(",")[0])
        notes += [f"{split}_data is the training file: its scores are of pairs the model trains "
                  "on" for split, spec in (("dev", config.dev_data), ("test", config.test_data))
                  if spec and os.path.realpath(spec.split(",")[0]) == trained]
    for flag in _SPEC_FLAGS.values():
        spec = getattr(config, flag) if config.dataset == FILES_DATASET else None
        header = spec and files.header_line(files.parse_spec(spec, flag))
        if header:
            notes.append(f"the first line of {spec} ({header}) looks like column names and is "
                         "read as a sentence pair: delete it if it is a header")
    return "; ".join(notes)


def _describe_split(config: DataConfig, split: str) -> str:
    """Where ``split``'s pairs come from, for messages: its file spec, the training file it is
    held out of, or the dataset's split."""
    if split in config.holds_out():
        return f"the {split} pairs held out of {config.train_data}"
    return getattr(config, _SPEC_FLAGS[split]) or f"{config.dataset} {split} split"


def read_pairs(config: DataConfig, split: str, limit: Optional[int] = None) -> Tuple[list, list]:
    """(sources, references) of ``split`` (its first ``limit`` pairs) as Python strings."""
    sources, references = [], []
    for source, target in decoded_pairs(load_text_pairs(config, split, limit)):
        sources.append(source)
        references.append(target)
    return sources, references


def training_texts(config: DataConfig) -> Iterator[str]:
    """Both sides of every training pair: the text the shared vocabulary is learned from."""
    for source, target in decoded_pairs(load_text_pairs(config, "train")):
        yield source
        yield target


def decoded_pairs(pairs: tf.data.Dataset, block: int = 4096) -> Iterator[Tuple[str, str]]:
    """The ``(source, target)`` Python strings of a dataset of string pairs, in its order.

    Read ``block`` pairs per call into tf.data: handing Python one element per call costs more
    than the reading itself, which on a corpus of millions of pairs is minutes.
    """
    for sources, targets in pairs.batch(block).as_numpy_iterator():
        for source, target in zip(sources, targets):
            yield source.decode("utf-8"), target.decode("utf-8")


def data_fingerprint(config: DataConfig) -> str:
    """Identifies the training text cheaply (for reusing a vocabulary learned from it)."""
    if config.dataset == FILES_DATASET:
        spec = files.parse_spec(config.train_data, "train_data")
        paths = [spec.source] + ([] if spec.is_tsv else [spec.target])
        return "files:" + ",".join(_sha256_file(p) for p in paths)
    if config.dataset in OFFLINE_DATASETS:
        builder = prepare_offline(config)
    else:
        load_text_pairs(config, "train")  # the clear "not prepared" error, if so
        builder = wmt.builder(config.dataset, config.data_dir)
    splits = builder.info.splits
    # No split metadata: data served by tfds.testing.mock_data (tests, notebook smoke runs).
    size = splits["train"].num_examples if "train" in splits else "unknown"
    return f"tfds:{builder.info.full_name}:train={size}"


def load_or_learn_tokenizer(
    config: DataConfig, overwrite: bool = False
) -> Tuple[SubwordTokenizer, bool]:
    """The vocabulary at ``config.effective_vocab_path``; learned first if absent.

    Returns (tokenizer, learned_now). A vocabulary learned by this function records the
    data fingerprint, size and seed in ``<path>.json``. One under its default path whose training
    text changed since (a file of one's own fixed and run again) is learned again: runs and exports
    keep copies of theirs. One named by ``vocab_path`` is the user's to replace: reusing it for
    other text, size or seed is an error naming what differs, unless ``overwrite``. A vocabulary
    file without that record (one you brought) is used as it is.
    """
    path = config.effective_vocab_path
    record_path = path + ".json"
    wanted = {
        "data": data_fingerprint(config),
        "vocab_size": config.effective_vocab_size,
        "seed": config.seed,
    }
    if os.path.isfile(path) and not overwrite:
        recorded = wanted
        if os.path.isfile(record_path):
            with open(record_path) as f:
                recorded = json.load(f)
        if recorded == wanted:
            return SubwordTokenizer.load(path), False
        if config.vocab_path:
            differs = [what for key, what in (
                ("data", "other training text (its files changed since, or other files)"),
                ("vocab_size", f"{recorded.get('vocab_size')} pieces, not {wanted['vocab_size']}"),
                ("seed", f"seed {recorded.get('seed')}, not {wanted['seed']}"))
                if recorded.get(key) != wanted[key]]
            raise ValueError(
                f"vocab_path={path!r} was learned from {', '.join(differs)}; pass another "
                "vocab_path, or relearn it (prepare_data --overwrite_vocab)."
            )
    tokenizer = SubwordTokenizer.learn(
        training_texts(config), config.effective_vocab_size, path, seed=config.seed
    )
    writing.write_file(record_path, json.dumps(wanted, indent=1))
    return tokenizer, True


def bucket_spec(config: DataConfig, num_replicas: int = 1) -> batching.BucketSpec:
    """Buckets for one replica's share of the global token budget."""
    return batching.BucketSpec.make(
        config.max_length, config.token_budget // num_replicas, config.bucket_multiple
    )


def check_not_empty(
    config: DataConfig, tokenizer: SubwordTokenizer, split: str, probe: int = 10000
) -> None:
    """Raises if the first ``probe`` pairs of ``split`` (all, if fewer) are all longer than
    ``max_length``: a repeated empty dataset would otherwise wait forever for a batch."""
    pairs = load_text_pairs(config, split, probe)
    stats = batching.length_statistics(batching.encode_pairs(pairs, tokenizer), config.max_length)
    if stats.examples == stats.too_long:
        source = _describe_split(config, split)
        what = "has no sentence pairs" if not stats.examples else (
            f"is empty after filtering: its first {stats.examples} pairs are all longer than "
            f"max_length={config.max_length} tokens; raise max_length")
        raise ValueError(f"{source} {what}.")


def training_tokenizer(config: DataConfig, tokenizer: SubwordTokenizer) -> SubwordTokenizer:
    """The tokenizer of the training batches: subword sampling when configured. Dev, test and
    the export always tokenize deterministically."""
    return tokenizer.with_sampling(config.subword_sampling) if config.subword_sampling else tokenizer


def make_dataset(
    config: DataConfig,
    tokenizer: SubwordTokenizer,
    split: str,
    *,
    training: bool = False,
    repeat: bool = False,
    read_in_part: bool = False,
) -> tf.data.Dataset:
    """Batches of ``split`` for one device; ``training`` shuffles (seeded by ``config.seed``)
    and samples subwords (``config.subword_sampling``). ``read_in_part``: the caller takes only
    the first batches, so the tokenized pairs are not cached (see ``caches_tokens``)."""
    if repeat:
        check_not_empty(config, tokenizer, split)
    return batching.make_batches(
        load_text_pairs(config, split),
        training_tokenizer(config, tokenizer) if training else tokenizer,
        bucket_spec(config),
        shuffle_buffer=TRAINING_SHUFFLE_BUFFER if training else 0,
        seed=config.seed,
        repeat=repeat,
        cache_tokens=caches_tokens(config, training) and not read_in_part,
    )


def caches_tokens(config: DataConfig, training: bool) -> bool:
    """Whether the batches of a split keep its tokenized pairs in memory
    (``batching.make_batches``): the training pairs, which every pass reads again, unless subword
    sampling tokenizes them anew each time. (Held-out splits are read once per evaluation, often
    in part; a partly read cache is thrown away, with a warning.)"""
    return training and not config.subword_sampling


def make_distributed_dataset_fn(
    config: DataConfig,
    tokenizer: SubwordTokenizer,
    split: str = "train",
    *,
    training: bool = True,
    repeat: bool = False,
) -> Callable[[tf.distribute.InputContext], tf.data.Dataset]:
    """``dataset_fn`` for ``strategy.distribute_datasets_from_function`` (budget split)."""
    if repeat:
        check_not_empty(config, tokenizer, split)
    return batching.distributed_dataset_fn(
        lambda: load_text_pairs(config, split),
        training_tokenizer(config, tokenizer) if training else tokenizer,
        config.max_length,
        config.token_budget,
        bucket_multiple=config.bucket_multiple,
        shuffle_buffer=TRAINING_SHUFFLE_BUFFER if training else 0,
        seed=config.seed,
        repeat=repeat,
        cache_tokens=caches_tokens(config, training),
    )
