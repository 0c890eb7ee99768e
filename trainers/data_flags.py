"""Data flags shared by every trainer command; `data_config()` turns them into a DataConfig.

    from trainers import data_flags          # defines the flags on import
    config = data_flags.data_config()         # in main(): validated, frozen
"""

import functools
import os

from absl import app, flags

from keras_transformer.data.config import DATASETS, DataConfig
from keras_transformer.data.files import parse_spec

flags.DEFINE_enum(
    "dataset", "ding_de_en", list(DATASETS),
    "wmt14_en_de / wmt14_en_fr: the paper's data through tensorflow-datasets (needs a prior "
    "download); libreoffice_help_en_de: the LibreOffice help paragraphs in English and German "
    "(offline, Debian packages libreoffice-help-en-us and -de, split by page); ding_de_en: the "
    "Ding dictionary's example sentences (offline, Debian trans-de-en; idioms, the harder "
    "test); files: your own --train_data/--dev_data/--test_data (dev and test held out of "
    "--train_data where not given: --hold_out).",
)
for _split in ("train", "dev", "test"):
    flags.DEFINE_string(
        f"{_split}_data", None,
        f"With --dataset=files: the {_split} pairs, PATH.tsv (source<TAB>target per line) or "
        "SRC_PATH,TGT_PATH (two line-aligned files); plain or gzip-compressed.",
    )
flags.DEFINE_bool(
    "hold_out", True,
    "With --dataset=files: hold the dev and test pairs not given (--dev_data, --test_data) out of "
    "--train_data, by a hash of each source sentence (every copy of a sentence in one split): "
    "about 500 dev and 1,000 test pairs, at most 5% each of a smaller file, none of one under "
    "100 pairs. --nohold_out trains on every pair (no dev loss; a test split only from "
    "--test_data).",
)
flags.DEFINE_string("data_dir", "data", "TFDS data directory; also holds the vocabulary files.")
flags.DEFINE_string(
    "ding_file", None,
    "The Ding dictionary file (default /usr/share/trans/de-en from `apt-get install "
    "trans-de-en`, else data/trans-de-en/usr/share/trans/de-en as unpacked without root by "
    "trainers/setup.sh or the quickstart and prepare_data programs).",
)
flags.DEFINE_string(
    "libreoffice_help_dir", None,
    "The LibreOffice help folder holding en-US/ and de/ (default /usr/share/libreoffice/help "
    "from `apt-get install libreoffice-help-en-us libreoffice-help-de`, else "
    "data/libreoffice-help/usr/share/libreoffice/help as unpacked without root by "
    "trainers/setup.sh or the quickstart and prepare_data programs).",
)
flags.DEFINE_integer(
    "vocab_size", None,
    "Shared subword vocabulary size, a multiple of 8. Unset: 37000 for WMT14 (the paper's), "
    "8000 for the other corpora.",
)
flags.DEFINE_string(
    "vocab_path", None,
    "SentencePiece model file (default DATA_DIR/vocab/<dataset>-<vocab_size>.model; learned "
    "there by prepare_data if missing).",
)
flags.DEFINE_integer(
    "max_length", 256, "Longest example in subword tokens (with the end token); longer are dropped."
)
flags.DEFINE_integer(
    "token_budget", 25000,
    "Tokens per batch and side, padding included, summed over replicas (the paper: ~25000).",
)

flags.DEFINE_integer(
    "bucket_multiple", None,
    "Round length-bucket boundaries to this multiple: 8 = few shapes for XLA, 1 = "
    "tensor2tensor's exact x1.1 grid (less padding, about twice the shapes). Unset: 8 where the "
    "batches feed an XLA-compiled training step (each shape is compiled), else 1 (without XLA "
    "extra shapes cost nothing).",
)

flags.DEFINE_float(
    "subword_sampling", 0.0,
    "Training batches only: BPE-dropout probability (Provilkov et al. 2020, up to +2.3 BLEU; "
    "the BPE form of Kudo 2018's subword regularization): each merge is skipped with this "
    "probability, so words get varied segmentations. Dev, test and export stay deterministic.",
)

FLAGS = flags.FLAGS
# The flags naming a corpus: what a command that only reads a test set needs (the rest shape
# training batches). Such a command lists them in its --help with
# ``for name in CORPUS_FLAGS: flags.declare_key_flag(name)``.
CORPUS_FLAGS = ("dataset", "data_dir", "ding_file", "libreoffice_help_dir", "train_data",
                "dev_data", "test_data", "hold_out")


def bucket_multiple_for(xla: bool) -> int:
    """The bucket grid when --bucket_multiple is not given: few shapes only matter under XLA, and
    the coarser grid pads short sentences much more (docs/data.md, "Batches")."""
    return 8 if xla else 1


def data_config(xla: bool = False, writes: bool = True, **overrides) -> DataConfig:
    """The parsed data flags as a DataConfig, with the files and folders they name checked (see
    ``trainers.checks``): bad values raise app.UsageError naming the flag, a bad line of a data
    file a ValueError naming file:line. ``xla``: whether the batches feed an XLA-compiled step (the
    default bucket grid); ``writes``: whether the command writes under --data_dir (prepared
    corpora, vocabularies)."""
    values = dict(
        dataset=FLAGS.dataset,
        data_dir=FLAGS.data_dir,
        ding_file=FLAGS.ding_file,
        libreoffice_help_dir=FLAGS.libreoffice_help_dir,
        train_data=FLAGS.train_data,
        dev_data=FLAGS.dev_data,
        test_data=FLAGS.test_data,
        vocab_size=FLAGS.vocab_size,
        vocab_path=FLAGS.vocab_path,
        max_length=FLAGS.max_length,
        token_budget=FLAGS.token_budget,
        subword_sampling=FLAGS.subword_sampling,
        hold_out=FLAGS.hold_out,
        bucket_multiple=(bucket_multiple_for(xla) if FLAGS.bucket_multiple is None
                         else FLAGS.bucket_multiple),
    )
    values.update(overrides)
    try:
        specs = {name: parse_spec(values[name], name)
                 for name in ("train_data", "dev_data", "test_data") if values[name]}
        config = DataConfig(**values)
    except ValueError as e:
        # Every message starts with the field name, which is also the flag name.
        raise app.UsageError(f"--{e}") from None
    check_paths(config, specs, writes)
    return config


def fetch_corpus(config: DataConfig, say=None) -> None:
    """Fetches the offline corpus of ``config`` where there is none (``data.fetch_offline``; its
    flag unset, nothing installed or unpacked), saying so first (``say``, default print): it
    takes a while."""
    from keras_transformer import data

    say = say or functools.partial(print, flush=True)
    fetch = data.offline_corpus_to_fetch(config)
    if fetch:
        packages, folder = fetch
        say(f"fetching {' and '.join(packages)} (apt-get download, no root needed) into {folder}")
        say(f"corpus: {data.fetch_offline(config)}")


def check_paths(config: DataConfig, specs: dict, writes: bool) -> None:
    """The corpus files exist and are well formed (one streaming pass, file:line on the first bad
    line) and the folders to write can be written: before any slow work."""
    from keras_transformer.data import ding, files, libreoffice_help

    from . import checks

    for name, spec in specs.items():
        given = getattr(config, name)
        if not spec.is_tsv and os.path.isfile(given) and not (
                os.path.exists(spec.source) and os.path.exists(spec.target)):
            raise app.UsageError(f"--{name}={given}: a comma separates a source file from a "
                                 "target file; this is one file whose name has a comma: "
                                 "rename it")
        for path in (spec.source,) if spec.is_tsv else (spec.source, spec.target):
            checks.input_file(name, path)
        files.check(spec)
    # The offline corpora come from Debian packages that prepare_data --download fetches.
    remedy = "; or leave the flag out for its default: `{}` fetches it there"
    if config.ding_file:
        checks.input_file("ding_file", config.ding_file, remedy.format(ding.FETCH_COMMAND))
    if config.libreoffice_help_dir:
        checks.input_dir("libreoffice_help_dir", config.libreoffice_help_dir,
                         remedy.format(libreoffice_help.FETCH_COMMAND))
    if config.vocab_path and os.path.exists(config.vocab_path):
        checks.input_file("vocab_path", config.vocab_path)
    if writes:
        checks.output_dir("data_dir", config.data_dir)
        if config.vocab_path and not os.path.exists(config.vocab_path):
            checks.output_file("vocab_path", config.vocab_path)
