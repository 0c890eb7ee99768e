"""Ding dictionary extraction, hash split, TFDS builder (keras_transformer/data/ding.py)."""

import hashlib
import os
import re

import pytest

from keras_transformer.data import ding

# A miniature dictionary in the real format; each line exercises one rule of extract_pairs.
FIXTURE = """\
# Version :: devel 2023-01-30
# License :: GPL Version 2 or later; GNU General Public License
Haus {n} | Häuser {pl} | Das Haus ist sehr alt. :: house | houses | The house is very old.
Fahne {f} [ugs.] | Er hat eine Fahne. [ugs.] :: alcohol breath | He smells of booze. [coll.]
Abhilfe {f} | Da ist nichts verloren.; Da ist noch Abhilfe möglich. :: remedy | It is not without remedy.
Ahnung {f} | Hast du eine Ahnung, wo er ist? :: notion | Have you any idea where he is?; Do you know where he is?
Absicht {f} | Absichten {pl} | Das war nicht meine Absicht. :: intention | Such was not my intention.
Ablösung {f} | Ich warte, bis meine Ablösung kommt. :: relief | I wait until my relief comes/arrives.
Film {m} | Der Film ist anders (aufgebaut) als das Buch. :: film | The film is different from the book.
Absolvent {m} | Danach werden Sie in der Lage sein … :: graduate | Then you will be able to …
in der besten Absicht | mit guten Vorsätzen :: with the best intentions | with good intentions
Keine Ahnung! :: No idea!
Sobald die Sonne aufgeht, beginnt der Tag :: Once the sun rises, the day begins
Radar {n} | Er war „auf ihrem Radar“. :: radar | He was 'on their radar'.
alt {adj} | Das Haus ist sehr alt. :: old | The house is very old.
Abschied {m} | Er verabschiedete sich schnell. | Sie winkte zum Abschied. :: leave | He took his leave quickly. | She waved goodbye.
Akte {f} | Holen Sie mir die Akte. <Akt> :: file | Get me the record of the case.
a line without the separator
Achsel {f} | Er zuckte die Achseln. :: shoulder | shrugged shoulders
"""

EXPECTED = [
    ("The house is very old.", "Das Haus ist sehr alt."),
    ("He smells of booze.", "Er hat eine Fahne."),
    ("He was 'on their radar'.", "Er war „auf ihrem Radar“."),
    ("He took his leave quickly.", "Er verabschiedete sich schnell."),
    ("She waved goodbye.", "Sie winkte zum Abschied."),
    ("Get me the record of the case.", "Holen Sie mir die Akte."),
]


@pytest.fixture
def fixture_file(tmp_path):
    path = tmp_path / "de-en"
    path.write_text(FIXTURE, encoding="utf-8")
    return str(path)


def test_extraction_gives_exactly_the_expected_pairs(fixture_file):
    pairs, stats = ding.extract_pairs(fixture_file)
    assert pairs == EXPECTED
    assert stats.misaligned_entries == 1  # the "Absicht" entry: 3 German vs 2 English alternatives
    assert stats.duplicates == 1  # "The house is very old." twice
    assert stats.sentence_pairs == len(EXPECTED)


def test_min_words_is_a_parameter(fixture_file):
    pairs, _ = ding.extract_pairs(fixture_file, min_words=2)
    assert ("No idea!", "Keine Ahnung!") in pairs
    assert len(pairs) == len(EXPECTED) + 1


def test_split_is_a_pure_function_of_the_source_sentence():
    sources = [f"Sentence number {i} is here." for i in range(20000)]
    pairs = [(s, f"Satz {i}.") for i, s in enumerate(sources)]
    splits = ding.split_pairs(pairs)
    assert sorted(p for split in splits.values() for p in split) == sorted(pairs)  # a partition
    # Independent of order and of the other pairs (a new dictionary entry moves nothing).
    again = ding.split_pairs(list(reversed(pairs[:5000])) + [("Another one.", "Noch einer.")])
    for name, split in again.items():
        assert set(split) - {("Another one.", "Noch einer.")} <= set(splits[name])
    # A duplicate source with another translation goes to the same split (no test leakage).
    for name, split in splits.items():
        for source, _ in split[:50]:
            assert ding.split_pairs([(source, "anders.")])[name]
    # Sizes follow the fractions (binomial, 5 standard deviations).
    n = len(pairs)
    for name, fraction in (("test", ding.TEST_FRACTION), ("validation", ding.VALIDATION_FRACTION)):
        sd = (n * fraction * (1 - fraction)) ** 0.5
        assert abs(len(splits[name]) - n * fraction) < 5 * sd


def test_split_uses_sha256_of_the_source():
    # Reference computation from the documented rule, not through split_of.
    for source in ("The house is very old.", "She waved goodbye.", "Ein Satz."):
        u = int(hashlib.sha256(source.encode()).hexdigest()[:16], 16) / 2**64
        expected = ("test" if u < ding.TEST_FRACTION else
                    "validation" if u < ding.TEST_FRACTION + ding.VALIDATION_FRACTION else "train")
        assert ding.split_of(source) == expected


def test_missing_file_error_says_how_to_get_it(tmp_path):
    with pytest.raises(ValueError, match=r"not found: .*nope\. `python -m trainers\.prepare_data "
                                         r"--dataset=ding_de_en --download` fetches trans-de-en "
                                         r".*; or `apt-get install trans-de-en`"):
        ding.extract_pairs(str(tmp_path / "nope"))


def test_invalid_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "de-en"
    path.write_bytes(FIXTURE.encode("utf-8") + b"Kaputt \xff ist das. :: Broken it is.\n")
    with pytest.raises(ValueError, match=rf"{path}:{FIXTURE.count(chr(10)) + 1}: invalid UTF-8"):
        ding.extract_pairs(str(path))


def test_file_without_sentence_pairs_is_an_error(tmp_path):
    path = tmp_path / "de-en"
    path.write_text("Haus {n} :: house\nBaum {m} :: tree\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"no sentence pairs found in 2 entries"):
        ding.extract_pairs(str(path))


def test_tfds_builder_serves_the_hash_splits(tmp_path, system_temporary):
    import tensorflow_datasets as tfds

    from keras_transformer import data

    # TFDS leaves an empty folder in the system's temporary folder for each builder it makes
    # before its dataset is prepared; ours must leave none.

    # Enough synthetic entries that validation and test are not empty.
    lines = [FIXTURE] + [
        f"Nummer {{f}} | Das ist Satz Nummer {i}. :: number | This is sentence number {i}.\n"
        for i in range(300)
    ]
    source = tmp_path / "de-en"
    source.write_text("".join(lines), encoding="utf-8")
    config = data.DataConfig(dataset="ding_de_en", data_dir=str(tmp_path / "data"),
                             ding_file=str(source))
    data.prepare_offline(config)
    expected = ding.split_pairs(ding.extract_pairs(str(source))[0])
    for split, tfds_split in (("train", "train"), ("dev", "validation"), ("test", "test")):
        ours = [(a.decode(), b.decode())
                for a, b in data.load_text_pairs(config, split).as_numpy_iterator()]
        assert sorted(ours) == sorted(expected[tfds_split]) and ours
        # The same through plain tfds.load (the builder is registered as "ding_de_en").
        loaded = tfds.load("ding_de_en", split=tfds_split, data_dir=config.data_dir,
                           builder_kwargs={"ding_file": str(source)})
        assert len(list(loaded)) == len(expected[tfds_split])
        # A prefix (the dev-BLEU subset, --limit) is the split's first pairs; a limit beyond
        # the split gives all of it.
        for limit in (3, len(ours) + 5):
            prefix = [(a.decode(), b.decode())
                      for a, b in data.load_text_pairs(config, split, limit).as_numpy_iterator()]
            assert prefix == ours[:limit]
    assert [p.name for p in system_temporary.iterdir() if p.is_dir()] == []

    # A different dictionary file is not served silently from the old preparation.
    source.write_text("".join(lines[:-1]), encoding="utf-8")
    with pytest.raises(ValueError, match=r"differs from the dictionary"):
        data.load_text_pairs(config, "train")


@pytest.mark.skipif(not os.path.isfile(ding.DEFAULT_DING_FILE),
                    reason="the trans-de-en package is not installed")
def test_real_dictionary_gives_over_10000_pairs():
    pairs, stats = ding.extract_pairs(ding.DEFAULT_DING_FILE)
    splits = ding.split_pairs(pairs)
    assert len(pairs) >= 10000
    assert len(splits["validation"]) >= 400 and len(splits["test"]) >= 800
    assert all(re.search(r"[.!?]\W*$", en) and re.search(r"[.!?]\W*$", de) for en, de in pairs)
