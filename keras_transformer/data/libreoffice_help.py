"""An offline English->German corpus: the LibreOffice help pages, paragraph by paragraph.

The Debian/Ubuntu packages ``libreoffice-help-en-us`` and ``libreoffice-help-de`` (The Document
Foundation, MPL-2.0; professionally translated documentation) install the same HTML pages in
both languages under ``/usr/share/libreoffice/help/{en-US,de}/text/**.html``. Every paragraph
(``<p>``) and heading (``<h1>``-``<h6>``) carries an ``id`` that is the same in both
languages, so :func:`align_help` pairs them without any sentence aligner:

- the hidden macOS variants of keys and menus (``<span hidden="true" class="MAC">``) are
  dropped, the default (Windows/Linux) variants kept, so a pair never says both "Command"
  and "Ctrl";
- markup is stripped, HTML entities unescaped, whitespace collapsed;
- ids found on one side only, empty elements and pairs whose two sides are identical (code,
  menu names that stay English) are skipped; repeated pairs are kept once.

The split is **by page**: a pure function of the page's path (its SHA-256), about 8% of the
pages for test and 4% for validation. Help pages repeat boilerplate across paragraphs of the
same page, so a split by sentence would put near-copies of test sentences into training and
overstate quality. Held-out pairs keep 3-60 English words (no one-word headings, no long
tables) and each English source once; a training pair whose English is a held-out source is
dropped, so no test sentence is seen in training. A newer LibreOffice version moves no old
page to another split.

:func:`builder_class` wraps this as the TFDS dataset ``libreoffice_help_en_de``.
"""

import collections
import dataclasses
import functools
import hashlib
import html
import html.parser
import os
import re
from typing import Dict, List, Optional, Tuple

from keras_transformer.data.offline_builder import hash_split, make_builder_class

# Where `apt-get install libreoffice-help-en-us libreoffice-help-de` puts the pages (a Debian
# path, not a machine's).
DEFAULT_HELP_DIR = "/usr/share/libreoffice/help"
PACKAGES = ("libreoffice-help-en-us", "libreoffice-help-de")
# Where `fetch` unpacks the packages without root, relative to the project, and the pages in it.
PROJECT_PACKAGE_DIR = os.path.join("data", "libreoffice-help")
PROJECT_HELP_DIR = os.path.join(PROJECT_PACKAGE_DIR, DEFAULT_HELP_DIR.lstrip("/"))
SOURCE_LANGUAGE, TARGET_LANGUAGE = "en-US", "de"
# The program that fetches them (the library's messages name it; the programs rewrite the name as
# installed).
FETCH_COMMAND = "python -m trainers.prepare_data --dataset=libreoffice_help_en_de --download"

TEST_FRACTION = 0.08
VALIDATION_FRACTION = 0.04
HELD_OUT_WORDS = (3, 60)

_ELEMENTS = {"p", "h1", "h2", "h3", "h4", "h5", "h6"}
_SPACES = re.compile(r"\s+")


class _PageParser(html.parser.HTMLParser):
    """Collects the text of every ``<p>``/``<h1..6>`` with an id, without hidden MAC spans."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.texts: Dict[str, str] = {}
        self._element = None  # (tag, id, [text pieces]) of the open paragraph or heading
        self._span_depth = 0
        self._hidden_from = None  # span depth at which a hidden MAC variant opened

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag == "span":
            self._span_depth += 1
            classes = (attributes.get("class") or "").split()
            if self._hidden_from is None and "hidden" in attributes and "MAC" in classes:
                self._hidden_from = self._span_depth
        elif tag in _ELEMENTS and attributes.get("id") and self._element is None:
            self._element = (tag, attributes["id"], [])
        elif tag == "br" and self._element is not None:
            self._element[2].append(" ")

    def handle_endtag(self, tag):
        if tag == "span" and self._span_depth:
            if self._hidden_from == self._span_depth:
                self._hidden_from = None
            self._span_depth -= 1
        elif self._element is not None and tag == self._element[0]:
            _, element_id, pieces = self._element
            text = _SPACES.sub(" ", html.unescape("".join(pieces))).strip()
            if text and element_id not in self.texts:
                self.texts[element_id] = text
            self._element = None

    def handle_data(self, data):
        if self._element is not None and self._hidden_from is None:
            self._element[2].append(data)


def parse_page(markup: str) -> Dict[str, str]:
    """``{id: text}`` of the paragraphs and headings of one help page, in page order."""
    parser = _PageParser()
    parser.feed(markup)
    parser.close()
    return parser.texts


@dataclasses.dataclass(frozen=True)
class AlignmentStats:
    """What :func:`align_help` saw (printed by prepare_data)."""

    english_pages: int = 0
    german_pages: int = 0
    common_pages: int = 0
    aligned_elements: int = 0
    unmatched_ids: int = 0
    identical_pairs: int = 0
    pairs: int = 0

    def summary(self) -> str:
        return (f"LibreOffice help: {self.common_pages:,} pages in both languages "
                f"({self.english_pages:,} English, {self.german_pages:,} German), "
                f"{self.aligned_elements:,} paragraphs and headings aligned by id "
                f"({self.unmatched_ids:,} ids on one side only, {self.identical_pairs:,} "
                f"identical in both languages, dropped): {self.pairs:,} unique pairs")


def _pages(language_dir: str) -> List[str]:
    text_dir = os.path.join(language_dir, "text")
    pages = []
    for root, _, names in os.walk(text_dir):
        for name in names:
            if name.endswith(".html"):
                pages.append(os.path.relpath(os.path.join(root, name), language_dir))
    return sorted(pages)


def _read(path: str) -> str:
    with open(path, "rb") as f:
        return f.read().decode("utf-8", errors="replace")


def check_help_dir(help_dir: str) -> None:
    """Raises ValueError naming the path and the setup command when the pages are missing."""
    for language, package in zip((SOURCE_LANGUAGE, TARGET_LANGUAGE), PACKAGES):
        text_dir = os.path.join(help_dir, language, "text")
        if not os.path.isdir(text_dir):
            raise ValueError(
                f"LibreOffice help pages not found: {text_dir}. `{FETCH_COMMAND}` fetches "
                f"{' and '.join(PACKAGES)} into {PROJECT_PACKAGE_DIR} (no root needed), where "
                "--libreoffice_help_dir's default finds them; or point --libreoffice_help_dir at "
                "a folder holding en-US/ and de/."
            )


def align_help(help_dir: str) -> Tuple[Dict[str, List[Tuple[str, str]]], AlignmentStats]:
    """``({page: [(English, German), ...]}, stats)`` for the pages present in both languages.

    Pairs are unique over the whole corpus (a repeated pair stays on its first page, pages in
    sorted order).
    """
    check_help_dir(help_dir)
    english_dir = os.path.join(help_dir, SOURCE_LANGUAGE)
    german_dir = os.path.join(help_dir, TARGET_LANGUAGE)
    english_pages, german_pages = _pages(english_dir), _pages(german_dir)
    common = sorted(set(english_pages) & set(german_pages))
    seen = set()
    by_page: Dict[str, List[Tuple[str, str]]] = {}
    aligned = unmatched = identical = 0
    for page in common:
        english = parse_page(_read(os.path.join(english_dir, page)))
        german = parse_page(_read(os.path.join(german_dir, page)))
        unmatched += len(english.keys() ^ german.keys())
        pairs = []
        for element_id, en in english.items():
            de = german.get(element_id)
            if de is None:
                continue
            aligned += 1
            if en == de:
                identical += 1
                continue
            if (en, de) not in seen:
                seen.add((en, de))
                pairs.append((en, de))
        if pairs:
            by_page[page] = pairs
    if not seen:
        raise ValueError(
            f"{help_dir}: no aligned paragraphs in {len(common)} pages present in both "
            f"{SOURCE_LANGUAGE}/ and {TARGET_LANGUAGE}/; is this a LibreOffice help folder?"
        )
    stats = AlignmentStats(len(english_pages), len(german_pages), len(common), aligned,
                           unmatched, identical, len(seen))
    return by_page, stats


def alignment_summary(help_dir: Optional[str] = None) -> str:
    """One line of counts for the help pages at ``help_dir`` (default: resolved)."""
    return align_help(resolve_help_dir(help_dir))[1].summary()


def split_of_page(page: str) -> str:
    """``"train"``, ``"validation"`` or ``"test"``: a pure function of the page path."""
    return hash_split(page.replace(os.sep, "/"), TEST_FRACTION, VALIDATION_FRACTION)


def split_pages(by_page: Dict[str, List[Tuple[str, str]]]) -> Dict[str, List[Tuple[str, str]]]:
    """Train/validation/test pairs from the aligned pages (see the module docstring)."""
    splits: Dict[str, List[Tuple[str, str]]] = collections.OrderedDict(
        (name, []) for name in ("train", "validation", "test"))
    held_out_sources = set()
    low, high = HELD_OUT_WORDS
    for page, pairs in by_page.items():
        split = split_of_page(page)
        for en, de in pairs:
            if split == "train":
                splits["train"].append((en, de))
            elif low <= len(en.split()) <= high and en not in held_out_sources:
                held_out_sources.add(en)
                splits[split].append((en, de))
    splits["train"] = [pair for pair in splits["train"] if pair[0] not in held_out_sources]
    return splits


def load_splits(help_dir: str) -> Dict[str, List[Tuple[str, str]]]:
    return split_pages(align_help(help_dir)[0])


def resolve_help_dir(path: Optional[str] = None) -> str:
    """The given folder, else the Debian location, else the project-local unpacked copy."""
    if path:
        return path
    if holds_pages(DEFAULT_HELP_DIR) or not os.path.isdir(PROJECT_HELP_DIR):
        return DEFAULT_HELP_DIR
    return PROJECT_HELP_DIR


def holds_pages(help_dir: str) -> bool:
    return all(os.path.isdir(os.path.join(help_dir, language, "text"))
               for language in (SOURCE_LANGUAGE, TARGET_LANGUAGE))


def fetch(folder: str = PROJECT_PACKAGE_DIR) -> str:
    """The help folder: where ``apt-get install`` puts the pages, else in ``folder``, fetched and
    unpacked there first if need be (``debian.installed_or_fetched``)."""
    from keras_transformer.data import debian

    return debian.installed_or_fetched(PACKAGES, DEFAULT_HELP_DIR, holds_pages, folder)


def fingerprint(help_dir: str) -> str:
    """SHA-256 over the two languages' page paths and bytes (identifies a LibreOffice version)."""
    digest = hashlib.sha256()
    for language in (SOURCE_LANGUAGE, TARGET_LANGUAGE):
        language_dir = os.path.join(help_dir, language)
        for page in _pages(language_dir):
            digest.update(f"{language}/{page}\0".encode("utf-8"))
            with open(os.path.join(language_dir, page), "rb") as f:
                digest.update(f.read())
    return digest.hexdigest()


# The offline-corpus interface of data.pipeline (shared with ding).
SOURCE_KWARG = "help_dir"
SOURCE_NOUN = "help pages"
check_source = check_help_dir
found = holds_pages


@functools.cache
def builder_class():
    """The TFDS builder class (registered as ``libreoffice_help_en_de`` on first call)."""
    return make_builder_class(
        "LibreofficeHelpEnDe",
        version="1.0.0",
        release_note="Paragraphs of the LibreOffice 7.4 help, aligned by id, split by page.",
        description=__doc__,
        homepage="https://help.libreoffice.org/",
        license="MPL-2.0 (LibreOffice help, The Document Foundation)",
        manual_instructions=(
            f"Install the Debian/Ubuntu packages {' and '.join(PACKAGES)} (or `apt-get "
            "download` them and `dpkg -x` each into DIR) and pass builder_kwargs="
            "{'help_dir': DIR/usr/share/libreoffice/help}, or put en-US/ and de/ into "
            "manual_dir/help."
        ),
        manual_name="help",
        source_kwarg=SOURCE_KWARG,
        resolve_source=resolve_help_dir,
        load_splits=load_splits,
    )
