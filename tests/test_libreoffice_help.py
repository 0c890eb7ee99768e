"""The LibreOffice help corpus: aligning pages by element id, the page split, the TFDS builder."""

import os
import random
import subprocess
import sys

import pytest

from keras_transformer.data import libreoffice_help as lh
from test_debian import fake_apt_get, needs_dpkg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ENGLISH_A = """<!DOCTYPE html><html><head><title>Find</title></head><body>
<h1 id="hd_id1"><a name="x"></a>Find &amp; Replace</h1>
<div class="notetext"><p id="par_id2" dir="auto">Use the shortcut <span id="sw1" class="switchinline"><span hidden="true" id="MACsw1" class="MAC"><span class="keycode">Command</span></span><span hidden="true" id="defaultsw1"><span class="keycode">Ctrl</span></span></span><span class="keycode"> + F</span>
   to open the   <span class="menuitem">Find</span> toolbar.</p></div>
<p id="par_id3">Only in English.</p>
<p id="par_id4">LibreOffice</p>
<p>No id, never aligned.</p>
<h2 id="hd_id5">Values &lt; 0 are &quot;negative&quot;</h2>
</body></html>"""

GERMAN_A = """<!DOCTYPE html><html><head><title>Suchen</title></head><body>
<h1 id="hd_id1"><a name="x"></a>Suchen &amp; Ersetzen</h1>
<div class="notetext"><p id="par_id2" dir="auto">Verwenden Sie <span id="sw1" class="switchinline"><span hidden="true" id="MACsw1" class="MAC"><span class="keycode">Befehl</span></span><span hidden="true" id="defaultsw1"><span class="keycode">Strg</span></span></span><span class="keycode"> + F</span>, um die Symbolleiste <span class="menuitem">Suchen</span> zu öffnen.</p></div>
<p id="par_id4">LibreOffice</p>
<p>Ohne id.</p>
<h2 id="hd_id5">Werte &lt; 0 sind &quot;negativ&quot;</h2>
</body></html>"""

ENGLISH_B = '<html><body><p id="par_b1">Select a cell.</p></body></html>'
GERMAN_B = '<html><body><p id="par_b1">Wählen Sie eine Zelle.</p></body></html>'


def write_help(root, pages):
    """pages: {relative page path: (English html, German html)} -> the help folder."""
    for page, (english, german) in pages.items():
        for language, markup in (("en-US", english), ("de", german)):
            path = os.path.join(root, language, page)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(markup)
    return str(root)


def test_aligner_matches_ids_drops_mac_variants_and_unescapes(tmp_path):
    help_dir = write_help(tmp_path / "help", {
        "text/shared/find.html": (ENGLISH_A, GERMAN_A),
        "text/scalc/cell.html": (ENGLISH_B, GERMAN_B),
    })
    by_page, stats = lh.align_help(help_dir)
    assert by_page == {
        "text/scalc/cell.html": [("Select a cell.", "Wählen Sie eine Zelle.")],
        "text/shared/find.html": [
            ("Find & Replace", "Suchen & Ersetzen"),
            ("Use the shortcut Ctrl + F to open the Find toolbar.",
             "Verwenden Sie Strg + F, um die Symbolleiste Suchen zu öffnen."),
            ('Values < 0 are "negative"', 'Werte < 0 sind "negativ"'),
        ],
    }
    # par_id3 exists in English only; par_id4 is identical in both languages.
    assert (stats.common_pages, stats.unmatched_ids, stats.identical_pairs, stats.pairs) == (2, 1, 1, 4)
    assert stats.aligned_elements == 5
    assert "2 pages in both languages" in stats.summary()


def test_a_page_in_one_language_only_is_skipped_and_missing_folders_name_the_setup(tmp_path):
    help_dir = write_help(tmp_path / "help", {"text/shared/find.html": (ENGLISH_A, GERMAN_A)})
    os.makedirs(tmp_path / "help" / "en-US" / "text" / "extra")
    (tmp_path / "help" / "en-US" / "text" / "extra" / "new.html").write_text(ENGLISH_B)
    by_page, stats = lh.align_help(help_dir)
    assert list(by_page) == ["text/shared/find.html"]
    assert (stats.english_pages, stats.german_pages, stats.common_pages) == (2, 1, 1)
    with pytest.raises(ValueError, match=r"not found: .*missing.*`python -m trainers\.prepare_data "
                                         r"--dataset=libreoffice_help_en_de --download` fetches "):
        lh.align_help(str(tmp_path / "missing"))


def synthetic_pages(count=300):
    """Pages of three pairs each; some English sentences repeat on other pages."""
    pages = {}
    for i in range(count):
        pages[f"text/p{i}.html"] = [
            (f"Heading {i}", f"Überschrift {i}"),  # too short for dev/test (2 words)
            (f"Click the button number {i} to continue.", f"Klicken Sie auf Knopf {i}."),
            (f"Shared sentence {i % 7} appears often.", f"Gemeinsamer Satz {i % 7} {i}."),
        ]
    return pages


def test_split_is_deterministic_page_disjoint_and_keeps_test_out_of_training():
    pages = synthetic_pages()
    splits = lh.split_pages(pages)
    shuffled = list(pages.items())
    random.Random(3).shuffle(shuffled)
    # A pure function of the page path: the order pages come in changes nothing per page.
    assert {page: lh.split_of_page(page) for page in pages} == {
        page: lh.split_of_page(page) for page, _ in shuffled}
    assert lh.split_pages(pages) == splits
    held_out = splits["validation"] + splits["test"]
    assert splits["test"] and splits["validation"]
    # Page-disjoint: the pages behind test pairs and behind training pairs do not meet.
    page_of = {pair: page for page, pairs in pages.items() for pair in pairs}
    test_pages = {page_of[pair] for pair in splits["test"]}
    train_pages = {page_of[pair] for pair in splits["train"]}
    dev_pages = {page_of[pair] for pair in splits["validation"]}
    assert not (test_pages & train_pages) and not (dev_pages & train_pages | dev_pages & test_pages)
    assert all(lh.split_of_page(page) == "test" for page in test_pages)
    # No English held-out source in training, each held out once, 3-60 words.
    held_sources = [en for en, _ in held_out]
    assert not set(held_sources) & {en for en, _ in splits["train"]}
    assert len(held_sources) == len(set(held_sources))
    assert all(3 <= len(en.split()) <= 60 for en in held_sources)
    # Roughly the intended fractions of pages.
    test_share = sum(lh.split_of_page(p) == "test" for p in pages) / len(pages)
    assert abs(test_share - lh.TEST_FRACTION) < 0.05


def test_tfds_builder_serves_the_page_split(tmp_path):
    from keras_transformer import data

    pages = {f"text/p{i}.html": (
        f'<p id="a">Click the button number {i} now.</p><h1 id="b">Title {i} of this page</h1>',
        f'<p id="a">Klicken Sie jetzt auf Knopf {i}.</p><h1 id="b">Titel {i} dieser Seite</h1>')
        for i in range(120)}
    help_dir = write_help(tmp_path / "help", pages)
    config = data.DataConfig(dataset="libreoffice_help_en_de", data_dir=str(tmp_path / "data"),
                             libreoffice_help_dir=help_dir)
    expected = lh.load_splits(help_dir)
    for split, name in (("train", "train"), ("dev", "validation"), ("test", "test")):
        ours = [(a.decode(), b.decode())
                for a, b in data.load_text_pairs(config, split).as_numpy_iterator()]
        assert sorted(ours) == sorted(expected[name]) and ours  # TFDS shuffles on write
    # Another LibreOffice version is not served from the old preparation.
    (tmp_path / "help" / "de" / "text" / "p0.html").write_text('<p id="a">Neu.</p>')
    with pytest.raises(ValueError, match=r"libreoffice_help_dir=.* differs from the help pages"):
        data.load_text_pairs(config, "train")


def help_packages(pages):
    """The two Debian packages holding ``pages`` (as ``write_help`` takes them) where Debian's do:
    {package: {path: text}}, for ``test_debian.fake_apt_get``."""
    return {package: {os.path.join(lh.DEFAULT_HELP_DIR, language, page): markup[index]
                      for page, markup in pages.items()}
            for index, (package, language) in enumerate(zip(lh.PACKAGES, ("en-US", "de")))}


@needs_dpkg
@pytest.mark.skipif(lh.holds_pages(lh.DEFAULT_HELP_DIR),
                    reason="apt-get install has put LibreOffice help pages on this machine")
def test_prepare_data_fetches_the_pages_and_prints_the_counts_of_any_help_version(tmp_path,
                                                                                  monkeypatch):
    """Without the pages anywhere, --download fetches the Debian packages (here a stand-in
    apt-get's, holding pages of another help version) into data/ of the folder it runs in; the
    default --libreoffice_help_dir then finds them there."""
    pages = {f"text/v/p{i}.html": (
        f'<p id="a">Open the dialog number {i} here.</p>',
        f'<p id="a">Öffnen Sie hier den Dialog {i}.</p>') for i in range(60)}
    help_dir = write_help(tmp_path / "help", pages)
    fake_apt_get(tmp_path, help_packages(pages), monkeypatch)
    work = tmp_path / "work"
    work.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "trainers.prepare_data", "--dataset=libreoffice_help_en_de",
         "--download", "--vocab_size=320"], capture_output=True, text=True, timeout=300,
        cwd=work, env=dict(os.environ, PYTHONPATH=ROOT))
    assert result.returncode == 0, result.stderr[-2000:]
    assert (f"fetching {' and '.join(lh.PACKAGES)} (apt-get download, no root needed) into "
            f"{lh.PROJECT_PACKAGE_DIR}\ncorpus: {lh.PROJECT_HELP_DIR}\n") in result.stdout
    assert lh.fingerprint(str(work / lh.PROJECT_HELP_DIR)) == lh.fingerprint(help_dir)
    # No package file and no staging folder left.
    assert os.listdir(work / lh.PROJECT_PACKAGE_DIR) == ["usr"]
    assert not [name for name in os.listdir(work / "data") if name.startswith(".tmp-")]
    splits = lh.load_splits(help_dir)
    assert "60 pages in both languages" in result.stdout and "60 unique pairs" in result.stdout
    for split, name in (("train", "train"), ("dev", "validation"), ("test", "test")):
        line = next(l for l in result.stdout.splitlines() if l.startswith(split + " "))
        assert int(line.split()[1].replace(",", "")) == len(splits[name])

    missing = subprocess.run(
        [sys.executable, "-m", "trainers.prepare_data", "--dataset=libreoffice_help_en_de",
         f"--libreoffice_help_dir={tmp_path / 'nothing'}", f"--data_dir={tmp_path / 'data2'}"],
        capture_output=True, text=True, timeout=300)
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    last = missing.stderr.strip().splitlines()[-1]
    assert str(tmp_path / "nothing") in last
    assert "`python -m trainers.prepare_data --dataset=libreoffice_help_en_de --download`" in last
