"""DataConfig: which corpus, where its files live, the vocabulary and the batching (section 5.1).

Field names equal the trainer flags of ``trainers/data_flags.py``; every validation error
starts with ``field=value`` so the flag to fix is obvious.
"""

import dataclasses
import hashlib
import os
import typing
from typing import Optional

from keras_transformer.config import as_python_scalars, is_boolean, is_integer, is_number

# The paper's WMT 2014 pairs (English is the source): our name -> (its TFDS name, the target
# language). data/wmt.py reads them through TFDS.
WMT14 = {
    "wmt14_en_de": ("wmt14_translate/de-en", "de"),
    "wmt14_en_fr": ("wmt14_translate/fr-en", "fr"),
}
WMT14_DATASETS = tuple(WMT14)
DING_DATASET = "ding_de_en"
LIBREOFFICE_DATASET = "libreoffice_help_en_de"
OFFLINE_DATASETS = (LIBREOFFICE_DATASET, DING_DATASET)
FILES_DATASET = "files"
DATASETS = WMT14_DATASETS + OFFLINE_DATASETS + (FILES_DATASET,)

# The paper's ~37,000 shared BPE tokens for WMT (section 5.1); 37,000 = 8 * 4,625.
# 8,000 for the offline corpora and your own files (small vocabularies suit small data better,
# Sennrich & Zhang 2019; the main job chooses its size by measurement).
DEFAULT_VOCAB_SIZES = dict.fromkeys(WMT14_DATASETS, 37000)
DEFAULT_VOCAB_SIZE = 8000


# What a field of each type must hold (an Optional[...] field: that, or None where None is the
# default).
_KINDS = {str: (lambda value: isinstance(value, str), "a string"), int: (is_integer, "an integer"),
          float: (is_number, "a finite number"), bool: (is_boolean, "True or False")}


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Everything the input pipeline needs; validated on construction.

    ``dataset``: one of :data:`DATASETS`. ``train_data``/``dev_data``/``test_data``: file specs
    (``PATH.tsv`` or ``SRC_PATH,TGT_PATH``) for ``dataset="files"``. ``vocab_size=None``
    means the dataset's default; ``vocab_path=None`` a path under ``data_dir/vocab``.
    ``token_budget``: tokens per batch and side (source and target each), summed over all
    replicas, as the paper's "approximately 25000 source tokens and 25000 target tokens".
    ``bucket_multiple``: bucket boundaries are rounded to this grid (8: ~20 shapes for XLA;
    1: tensor2tensor's exact x1.1 grid, ~40 shapes, less padding on short sentences).
    ``subword_sampling``: BPE-dropout probability for the training batches only (0: off).
    ``hold_out``: own files only: a dev or test split without a file of its own is held out of
    ``train_data`` (``data/files.py``, "Held-out splits"); False trains on every pair of it.
    ``hold_out_pairs``: the count of ``train_data``'s pairs the held-out shares are sized by
    (None: its count now). Not a flag: a run records the count it started with and keeps it
    (``data.sized_as``), so that lines later added to or removed from the file cannot move
    a pair it trained on into its dev or test split.
    """

    dataset: str = DING_DATASET
    data_dir: str = "data"
    ding_file: Optional[str] = None
    libreoffice_help_dir: Optional[str] = None
    train_data: Optional[str] = None
    dev_data: Optional[str] = None
    test_data: Optional[str] = None
    vocab_size: Optional[int] = None
    vocab_path: Optional[str] = None
    max_length: int = 256
    token_budget: int = 25000
    bucket_multiple: int = 8
    subword_sampling: float = 0.0
    hold_out: bool = True
    hold_out_pairs: Optional[int] = None
    seed: int = 1

    def __post_init__(self):
        # The kinds first, so that the checks below compare numbers (a message starts with its
        # field: the programs name it as their flag).
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is None and field.default is None:
                continue
            if isinstance(value, os.PathLike):  # a pathlib.Path: recorded as the path it names
                value = os.fspath(value)
                object.__setattr__(self, field.name, value)
            test, what = _KINDS[next(kind for kind in typing.get_args(field.type) or [field.type]
                                     if kind is not type(None))]
            if not test(value):
                raise ValueError(f"{field.name}={value!r}: must be {what}.")
        as_python_scalars(self)
        if self.dataset not in DATASETS:
            raise ValueError(
                f"dataset={self.dataset!r}: unknown; choose one of {', '.join(DATASETS)}."
            )
        specs = {"train_data": self.train_data, "dev_data": self.dev_data,
                 "test_data": self.test_data}
        given = [name for name, value in specs.items() if value]
        if self.dataset == FILES_DATASET and not given:
            raise ValueError(
                "dataset='files' needs your parallel files: set train_data (and dev_data, "
                "test_data), each PATH.tsv or SRC_PATH,TGT_PATH."
            )
        if self.dataset != FILES_DATASET and given:
            raise ValueError(
                f"{given[0]}={specs[given[0]]!r} is only read with dataset='files' "
                f"(dataset={self.dataset!r}); pass dataset='files' to use your own files."
            )
        if self.vocab_size is not None and (self.vocab_size < 264 or self.vocab_size % 8):
            raise ValueError(
                f"vocab_size={self.vocab_size}: must be a multiple of 8 and at least 264 "
                "(4 reserved ids, 256 byte pieces, some subwords)."
            )
        if self.max_length < 8:
            raise ValueError(f"max_length={self.max_length}: must be at least 8 tokens.")
        if self.token_budget < self.max_length:
            raise ValueError(
                f"token_budget={self.token_budget}: smaller than max_length="
                f"{self.max_length}, so a longest example would not fit in a batch."
            )
        if not 1 <= self.bucket_multiple <= 64:
            raise ValueError(f"bucket_multiple={self.bucket_multiple}: must be in 1..64.")
        if not 0.0 <= self.subword_sampling < 1.0:
            raise ValueError(f"subword_sampling={self.subword_sampling}: must be in [0, 1).")
        if not self.data_dir:
            raise ValueError("data_dir='': must name a directory.")
        if self.hold_out_pairs is not None and self.hold_out_pairs < 1:
            raise ValueError(f"hold_out_pairs={self.hold_out_pairs}: must be positive.")

    @property
    def effective_vocab_size(self) -> int:
        if self.vocab_size is not None:
            return self.vocab_size
        return DEFAULT_VOCAB_SIZES.get(self.dataset, DEFAULT_VOCAB_SIZE)

    def holds_out(self) -> tuple:
        """The splits (of "dev", "test") that may be held out of ``train_data``: own files
        with ``hold_out`` and a training file, whose dev or test has no file of its own. Whether
        they are depends on the file's size too (``data.held_out_splits``)."""
        if self.dataset != FILES_DATASET or not self.hold_out or not self.train_data:
            return ()
        return tuple(split for split, spec in (("dev", self.dev_data), ("test", self.test_data))
                     if not spec)

    def corpus(self) -> dict:
        """What names the sentence pairs, by field: the dataset, its own files (absolute paths)
        and the hold-out; not where prepared files and vocabularies are kept, nor how the pairs
        are cut into subwords or batched. A run resumes on an equal one (``runs.check_data``)."""
        def absolute(spec):
            return spec and ",".join(os.path.abspath(path) for path in spec.split(","))

        return {"dataset": self.dataset, "train_data": absolute(self.train_data),
                "dev_data": absolute(self.dev_data), "test_data": absolute(self.test_data),
                "hold_out": bool(self.holds_out())}

    @property
    def target_language(self) -> Optional[str]:
        """The language code of the target side, for sacreBLEU's tokenizer and the Moses rules of
        the paper's BLEU: "fr" for WMT14 En-Fr, None for your own files (not known: the evaluation
        reads the script of their references), else "de"."""
        if self.dataset == FILES_DATASET:
            return None
        return WMT14[self.dataset][1] if self.dataset in WMT14 else "de"

    @property
    def effective_vocab_path(self) -> str:
        """``vocab_path`` or ``data_dir/vocab/<dataset>-<size>.model`` (files: + a spec hash)."""
        if self.vocab_path:
            return self.vocab_path
        name = self.dataset
        if self.dataset == FILES_DATASET:
            spec = os.path.abspath(self.train_data or self.dev_data or self.test_data or "")
            if self.holds_out():  # its training text is what the held-out splits leave
                spec += " holding out " + ",".join(self.holds_out())
            name += "-" + hashlib.sha256(spec.encode("utf-8")).hexdigest()[:8]
        return os.path.join(self.data_dir, "vocab", f"{name}-{self.effective_vocab_size}.model")
