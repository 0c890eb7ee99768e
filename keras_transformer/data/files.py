"""Your own parallel data: a TSV file (``source<TAB>target``) or two line-aligned text files, each
plain or gzip-compressed (as OPUS and WMT ship corpora: told by its first bytes, not its name).

A spec is ``PATH.tsv`` or ``SRC_PATH,TGT_PATH`` (the value of ``--train_data``, ``--dev_data``,
``--test_data``). Files are checked once in a streaming pass (memory independent of the
corpus size) and every problem is reported with file and line: missing file, invalid UTF-8,
empty line (but for those at a file's end, which many editors leave), TSV line without exactly one
tab, different line counts, empty corpus. The ``tf.data`` pipeline then reads the files' sentence
lines with ``TextLineDataset``.

Held-out splits: a dev or test split not given as files of its own is held out of the training
file (``DataConfig.hold_out``), as the offline corpora's are: the pairs whose source sentence
hashes into the split's slice of the hash space, so that every copy of a source sentence lands in
one split. A slice holds about ``HELD_OUT_PAIRS`` of the file's pairs (at most
``HELD_OUT_MAX_SHARE`` of a small file) and shrinks as the file grows: the test pairs of a grown
file are test pairs of the old one or new pairs, never pairs a model of the old file trained on.
"""

import contextlib
import dataclasses
import gzip
import os
import re
import zlib
from typing import TYPE_CHECKING, Dict, Iterator, Optional, Sequence, Tuple

if TYPE_CHECKING:
    import tensorflow as tf

# The expected size of each held-out split, as the offline corpora's (docs/data.md), and the
# largest share of a small file's pairs each takes; a file of fewer pairs than
# HELD_OUT_MIN_PAIRS holds none out (a few pairs would measure nothing).
HELD_OUT_PAIRS = {"test": 1000, "dev": 500}
HELD_OUT_MAX_SHARE = 0.05
HELD_OUT_MIN_PAIRS = 100
HASH_BUCKETS = 1 << 32

BOM = "\ufeff"  # some editors start UTF-8 files with it; it is not part of the first sentence
GZIP_MAGIC = b"\x1f\x8b"


def is_gzip(path: str) -> bool:
    """Whether the file at ``path`` is gzip-compressed (its first two bytes)."""
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


# What else a corpus file with NUL bytes often is, by its first bytes, and what to do.
BINARY_KINDS = (
    (b"\xff\xfe", "UTF-16 text (Windows' \"Unicode\"): save it as UTF-8, e.g. "
                  "`iconv -f UTF-16 -t UTF-8 FILE > FILE.utf8`"),
    (b"\xfe\xff", "UTF-16 text: save it as UTF-8, e.g. `iconv -f UTF-16 -t UTF-8 FILE > FILE.utf8`"),
    (b"PK\x03\x04", "a zip archive: unpack it (`unzip FILE`) and name the text file inside"),
    (b"BZh", "bzip2-compressed: of compressed files only gzip is read (`bunzip2 FILE`, or "
             "`bzcat FILE | gzip > FILE.gz`)"),
    (b"\xfd7zXZ\x00", "xz-compressed: of compressed files only gzip is read (`unxz FILE`)"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed: of compressed files only gzip is read (`unzstd FILE`)"),
)


def _binary_kind(path: str) -> str:
    """What a file with NUL bytes is and what to do, or that it is no text."""
    with open(path, "rb") as f:
        start = f.read(8)
    return next((kind for magic, kind in BINARY_KINDS if start.startswith(magic)),
                "this is a binary file, not text")


@dataclasses.dataclass(frozen=True)
class FileSpec:
    """One parallel corpus: a TSV file (``target is None``) or source and target files."""

    source: str
    target: Optional[str] = None

    @property
    def is_tsv(self) -> bool:
        return self.target is None


def parse_spec(spec: str, name: str = "train_data") -> FileSpec:
    """``"PATH.tsv"`` -> TSV spec; ``"SRC,TGT"`` -> two-file spec. ``name`` is for errors."""
    parts = [p.strip() for p in (spec or "").split(",")]
    if not spec or any(not p for p in parts) or len(parts) > 2:
        raise ValueError(
            f"{name}={spec!r}: expected PATH.tsv (source<TAB>target per line) or "
            "SRC_PATH,TGT_PATH (two line-aligned files)."
        )
    return FileSpec(parts[0]) if len(parts) == 1 else FileSpec(parts[0], parts[1])


def _lines(path: str) -> Iterator[Tuple[int, str]]:
    """(line number, text without the line break), checking UTF-8 and emptiness: an empty line
    is an error unless only empty lines follow it (those are skipped)."""
    if not os.path.isfile(path):
        raise ValueError(f"{path}: file not found")
    blank = None  # the first empty line since the last sentence
    number = 0
    with _gzip_errors(path, lambda: number), \
            (gzip.open if is_gzip(path) else open)(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            if b"\0" in raw:
                raise ValueError(f"{path}:{number}: a NUL byte: {_binary_kind(path)}")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{path}:{number}: invalid UTF-8 at byte {e.start}") from None
            text = text.rstrip("\n").rstrip("\r")
            if number == 1:
                text = text.removeprefix(BOM)
            if not text.strip():
                blank = blank or number
                continue
            if blank is not None:
                raise ValueError(f"{path}:{blank}: empty line (every line must hold a sentence; "
                                 "only the file's last lines may be empty)")
            yield number, text


@contextlib.contextmanager
def _gzip_errors(path, lines_read):
    """A damaged gzip file as one ValueError naming it and the lines read before the damage."""
    try:
        yield
    except (EOFError, gzip.BadGzipFile, zlib.error) as error:
        raise ValueError(f"{path}: damaged gzip data after line {lines_read()} ({error}); "
                         "download or compress it again") from None


def split_tsv_line(line, where: str):
    """A TSV line (str, or bytes as read) -> ``[source, target]``; a ValueError starting with
    ``where`` (``file:line``) unless it holds exactly one tab."""
    fields = line.split(b"\t" if isinstance(line, bytes) else "\t")
    if len(fields) != 2:
        what = "no tab" if len(fields) == 1 else f"{len(fields) - 1} tabs"
        # Files of more columns are common (an attribution after the pair in manythings.org's
        # Anki files, URLs and scores around it in crawled corpora): which two hold the pair is
        # the user's to say, the tool that keeps them is standard.
        more = "" if len(fields) == 1 else (" (to keep two columns, e.g. the first two: "
                                            "`cut -f1,2`; of a gzip file after `zcat`)")
        raise ValueError(
            f"{where}: {what}; each line must be source<TAB>target with exactly one tab{more}"
        )
    return fields


# What a TSV's first line holds when it names its columns, as spreadsheets and pandas
# (``to_csv(sep="\t")``) write them: words like these, or language codes (``en``, ``de-AT``).
HEADER_NAMES = frozenset({"source", "target", "src", "tgt", "input", "output", "text",
                          "translation", "sentence", "original", "reference", "english", "german",
                          "french", "spanish", "italian", "chinese", "japanese", "russian"})
LANGUAGE_CODE = re.compile(r"[a-z]{2}([-_][a-z]{2,4})?")


def header_line(spec: FileSpec) -> Optional[str]:
    """The first line of the TSV file of ``spec`` (``"source<TAB>target"``) if it looks like the
    names of its columns: two different fields, each one of ``HEADER_NAMES`` or a language code.
    Read as a sentence pair it trains, or is scored, as one; None otherwise (and for two files, or
    a file that cannot be read: ``check`` says why)."""
    if not spec.is_tsv:
        return None
    try:
        first = next(_lines(spec.source), None)
    except ValueError:
        return None
    fields = [field.strip().lower() for field in first[1].split("\t")] if first else []
    if (len(fields) == 2 and fields[0] != fields[1]
            and all(f in HEADER_NAMES or LANGUAGE_CODE.fullmatch(f) for f in fields)):
        return first[1].strip().replace("\t", "<TAB>")
    return None


def _check_tsv(path: str) -> int:
    count = 0
    for number, text in _lines(path):
        fields = split_tsv_line(text, f"{path}:{number}")
        for side, field in zip(("source", "target"), fields):
            if not field.strip():
                raise ValueError(f"{path}:{number}: empty {side} sentence")
        count = number
    return count


def _check_pair(source: str, target: str) -> int:
    source_lines, target_lines = _lines(source), _lines(target)
    count = 0
    while True:
        a, b = next(source_lines, None), next(target_lines, None)
        if a is None and b is None:
            return count
        if a is None or b is None:
            short, long_ = (source, target) if a is None else (target, source)
            raise ValueError(
                f"{short} has {count} lines but {long_} has more (its line {count + 1} has no "
                f"counterpart); the two files must be line-aligned."
            )
        count += 1


def _lines_of(path: str) -> "tf.data.Dataset":
    """The lines of ``path`` without a leading byte order mark (and, by ``TextLineDataset``, without
    the line breaks; "\\r" of CRLF files goes with the strip of each field)."""
    import tensorflow as tf

    return tf.data.TextLineDataset(path, compression_type="GZIP" if is_gzip(path) else "").map(
        lambda line: tf.strings.regex_replace(line, "^" + BOM, ""))


_CHECKED: Dict[tuple, int] = {}


def check(spec: FileSpec) -> int:
    """Validates the files of ``spec``; returns the number of sentence pairs (cached by mtime)."""
    paths = (spec.source,) if spec.is_tsv else (spec.source, spec.target)
    try:
        key = tuple((p, os.stat(p).st_size, os.stat(p).st_mtime_ns) for p in paths)
    except OSError:
        key = None
    if key in _CHECKED:
        return _CHECKED[key]
    count = _check_tsv(spec.source) if spec.is_tsv else _check_pair(spec.source, spec.target)
    if count == 0:
        raise ValueError(f"{', '.join(paths)}: empty corpus (no sentence pairs)")
    if key is not None:
        _CHECKED[key] = count
    return count


def load(spec: FileSpec) -> "tf.data.Dataset":
    """A dataset of (source, target) ``tf.string`` scalars, after :func:`check`."""
    import tensorflow as tf  # not at the top: checking files needs no TensorFlow

    pairs = check(spec)  # the sentence lines come first: the empty ones at the end are left out
    if spec.is_tsv:
        def split(line):
            fields = tf.strings.split(line, "\t", maxsplit=1)
            return tf.strings.strip(fields[0]), tf.strings.strip(fields[1])

        return _lines_of(spec.source).take(pairs).map(split)
    return tf.data.Dataset.zip(
        _lines_of(spec.source).take(pairs).map(tf.strings.strip),
        _lines_of(spec.target).take(pairs).map(tf.strings.strip),
    )


def held_out_buckets(pairs: int) -> Dict[str, Tuple[int, int]]:
    """The ``[first, end)`` hash buckets of each held-out split of a training file of ``pairs``
    pairs: test's from 0, dev's after it. Both shrink as ``pairs`` grows."""
    ranges, start = {}, 0
    for split in ("test", "dev"):
        end = start + round(min(HELD_OUT_PAIRS[split] / pairs, HELD_OUT_MAX_SHARE) * HASH_BUCKETS)
        ranges[split], start = (start, end), end
    return ranges


def hold_out(pairs: "tf.data.Dataset", total: int, split: str,
             held_out: Sequence[str]) -> "tf.data.Dataset":
    """``split``'s pairs of a training file's ``pairs`` (``total`` of them) whose ``held_out``
    splits are held out of it: a held-out split's own pairs, or for "train" those of none."""
    import tensorflow as tf

    ranges = held_out_buckets(total)
    inside = [ranges[split]] if split != "train" else [ranges[other] for other in held_out]

    def select(sources, targets):  # a block at a time: one element at a time costs more
        buckets = tf.strings.to_hash_bucket_fast(sources, HASH_BUCKETS)
        hit = tf.reduce_any(tf.stack([(buckets >= first) & (buckets < end)
                                      for first, end in inside]), axis=0)
        keep = hit if split != "train" else tf.logical_not(hit)
        return tf.boolean_mask(sources, keep), tf.boolean_mask(targets, keep)

    return pairs.batch(4096).map(select).unbatch()
