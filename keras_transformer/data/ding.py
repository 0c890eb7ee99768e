"""An offline English->German corpus: the example sentences of the Ding dictionary.

The Debian/Ubuntu package ``trans-de-en`` (TU Chemnitz "Ding" dictionary, Frank Richter,
GPL-2.0-or-later) installs one text file, ``/usr/share/trans/de-en``, with one entry per line::

    German alt | German alt | ... :: English alt | English alt | ...

The i-th ``|`` alternative of one side translates the i-th of the other; inside an alternative,
``;`` separates synonyms. Besides single words, many alternatives are whole example sentences
written by lexicographers. :func:`extract_pairs` keeps exactly those: aligned alternatives
where both sides are one sentence (capital start, final ``.``/``!``/``?``, a minimum number of
words) after removing annotations (``{f}``, ``[ugs.]``, ``<alt. spelling>``), and without
synonym lists, optional parts ``(...)``, ``/`` alternatives or ``…`` ellipses.
Entries whose two sides have different numbers of alternatives cannot be aligned and are
skipped whole.

The split into train / validation / test is a pure function of the English sentence's
SHA-256, so it is stable across runs, machines and dictionary versions (a new entry never
moves an old pair to another split), and every duplicate of a source sentence lands in the
same split (no test sentence is seen in training).

:class:`DingDeEn` wraps all this as a TFDS dataset builder, so
``tfds.load("ding_de_en", builder_kwargs={"ding_file": ...})`` serves this corpus exactly
like ``wmt14_translate/de-en`` (features ``en`` and ``de``; splits train/validation/test).
"""

import dataclasses
import functools
import os
import re
from typing import Dict, List, Optional, Sequence, Tuple

from keras_transformer.data.offline_builder import hash_split, make_builder_class

# Where `apt-get install trans-de-en` puts the dictionary (a Debian path, not a machine's).
DEFAULT_DING_FILE = "/usr/share/trans/de-en"
PACKAGE = "trans-de-en"
# Where `fetch` unpacks the package without root, relative to the project, and the file in it.
PROJECT_PACKAGE_DIR = os.path.join("data", PACKAGE)
PROJECT_DING_FILE = os.path.join(PROJECT_PACKAGE_DIR, DEFAULT_DING_FILE.lstrip("/"))
# The program that fetches it (the library's messages name it; the programs rewrite the name as
# installed).
FETCH_COMMAND = "python -m trainers.prepare_data --dataset=ding_de_en --download"

# Fractions of the hash space for the held-out splits: ~500 validation and ~1,000 test pairs
# out of the ~15,200 clean pairs of the 2023 dictionary (13,658 / 514 / 1,049).
VALIDATION_FRACTION = 0.033
TEST_FRACTION = 0.065

_ANNOTATION = re.compile(r"\{[^{}]*\}|\[[^\[\]]*\]|<[^<>]*>")
# Anything left after annotation removal that marks a non-sentence or an ambiguous one.
_FORBIDDEN = re.compile(r"[(){}\[\]<>/|~…;]|\.\.")
# Optional opening quotes, then a capital letter or a digit ... final punctuation, optionally
# followed by closing quotes.
_SENTENCE = re.compile(r"^[\"'„“‚‘«»]*[0-9A-ZÄÖÜ].*[.!?][\"'“”‘’«»]*$")
_SPACES = re.compile(r"\s+")


@dataclasses.dataclass(frozen=True)
class ExtractionStats:
    """What :func:`extract_pairs` saw and dropped (for the prepare_data report)."""

    entries: int = 0
    misaligned_entries: int = 0
    aligned_alternatives: int = 0
    sentence_pairs: int = 0
    duplicates: int = 0


def _clean(text: str) -> str:
    return _SPACES.sub(" ", _ANNOTATION.sub(" ", text)).strip()


def _is_sentence(text: str, min_words: int) -> bool:
    return (
        bool(_SENTENCE.match(text))
        and not _FORBIDDEN.search(text)
        and len(text.split()) >= min_words
    )


def parse_line(line: str, min_words: int = 3) -> Optional[List[Tuple[str, str]]]:
    """Returns the (English, German) sentence pairs of one dictionary line.

    ``None`` means the line is no entry or its sides cannot be aligned (different numbers of
    ``|`` alternatives); ``[]`` means an aligned entry without sentence pairs.
    """
    line = line.strip()
    if not line or line.startswith("#") or line.count(" :: ") != 1:
        return None
    german, english = line.split(" :: ")
    german_alts, english_alts = german.split(" | "), english.split(" | ")
    if len(german_alts) != len(english_alts):
        return None
    pairs = []
    for de, en in zip(german_alts, english_alts):
        de, en = _clean(de), _clean(en)
        if _is_sentence(de, min_words) and _is_sentence(en, min_words):
            pairs.append((en, de))
    return pairs


def extract_pairs(path: str, min_words: int = 3) -> Tuple[List[Tuple[str, str]], ExtractionStats]:
    """Reads the dictionary file at ``path``; returns unique (English, German) pairs in file order.

    Raises ValueError naming the file (and line) when it is missing, not UTF-8, or holds no
    sentence pair at all (probably not the Ding dictionary).
    """
    if not os.path.isfile(path):
        raise ValueError(
            f"Ding dictionary file not found: {path}. `{FETCH_COMMAND}` fetches {PACKAGE} into "
            f"{PROJECT_PACKAGE_DIR} (no root needed), where --ding_file's default finds it; or "
            f"`apt-get install {PACKAGE}`; or point --ding_file at the file."
        )
    seen = set()
    pairs: List[Tuple[str, str]] = []
    entries = misaligned = aligned = duplicates = 0
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{path}:{number}: invalid UTF-8 at byte {e.start}") from None
            parsed = parse_line(line, min_words)
            if parsed is None:
                if " :: " in line and not line.startswith("#"):
                    entries += 1
                    misaligned += 1
                continue
            entries += 1
            aligned += line.split(" :: ")[0].count(" | ") + 1
            for pair in parsed:
                if pair in seen:
                    duplicates += 1
                    continue
                seen.add(pair)
                pairs.append(pair)
    if not pairs:
        raise ValueError(
            f"{path}: no sentence pairs found in {entries} entries; is this the Ding "
            "`trans-de-en` dictionary (lines `German | ... :: English | ...`)?"
        )
    stats = ExtractionStats(entries, misaligned, aligned, len(pairs), duplicates)
    return pairs, stats


def split_of(source: str) -> str:
    """``"train"``, ``"validation"`` or ``"test"``: a pure function of the source sentence."""
    return hash_split(source, TEST_FRACTION, VALIDATION_FRACTION)


def split_pairs(pairs: Sequence[Tuple[str, str]]) -> Dict[str, List[Tuple[str, str]]]:
    """Partitions (English, German) pairs into train/validation/test by :func:`split_of`."""
    splits: Dict[str, List[Tuple[str, str]]] = {"train": [], "validation": [], "test": []}
    for pair in pairs:
        splits[split_of(pair[0])].append(pair)
    return splits


def resolve_ding_file(path: Optional[str] = None) -> str:
    """The given path, else the Debian location, else the project-local unpacked copy."""
    if path:
        return path
    if os.path.isfile(DEFAULT_DING_FILE) or not os.path.isfile(PROJECT_DING_FILE):
        return DEFAULT_DING_FILE
    return PROJECT_DING_FILE


def fetch(folder: str = PROJECT_PACKAGE_DIR) -> str:
    """The dictionary file: where ``apt-get install`` puts it, else in ``folder``, fetched and
    unpacked there first if need be (``debian.installed_or_fetched``)."""
    from keras_transformer.data import debian

    return debian.installed_or_fetched([PACKAGE], DEFAULT_DING_FILE, os.path.isfile, folder)


# The offline-corpus interface of data.pipeline (shared with libreoffice_help).
SOURCE_KWARG = "ding_file"
SOURCE_NOUN = "dictionary"
PACKAGES = (PACKAGE,)
found = os.path.isfile


def check_source(path: str) -> None:
    extract_pairs(path)


@functools.cache
def builder_class():
    """The TFDS builder class (registered as ``ding_de_en`` on first call)."""
    return make_builder_class(
        "DingDeEn",
        version="1.0.0",
        release_note="Sentence pairs from the 2023 dictionary, hash-split.",
        description=__doc__,
        homepage="https://dict.tu-chemnitz.de/",
        license="GPL-2.0-or-later (Ding dictionary, Frank Richter, TU Chemnitz)",
        manual_instructions=(
            "Install the Debian/Ubuntu package `trans-de-en` (`apt-get install trans-de-en`, "
            "or `apt-get download trans-de-en && dpkg -x trans-de-en_*.deb DIR`) and pass "
            "builder_kwargs={'ding_file': PATH}, or put its file `de-en` into manual_dir."
        ),
        manual_name="de-en",
        source_kwarg=SOURCE_KWARG,
        resolve_source=resolve_ding_file,
        load_splits=lambda path: split_pairs(extract_pairs(path)[0]),
    )
