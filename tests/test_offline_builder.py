"""make_builder_class: a corpus read from a local path becomes a TFDS builder like
wmt14_translate/de-en (features en and de, splits train/validation/test, the TFDS name from the
class name), its source found in the documented order: the builder argument, then manual_dir,
then the corpus's default location."""

import os

import pytest

tfds = pytest.importorskip("tensorflow_datasets")

from keras_transformer.data.offline_builder import make_builder_class


def tab_file(path, rows):
    with open(path, "w", encoding="utf-8") as stream:
        stream.writelines(f"{en}\t{de}\n" for en, de in rows)
    return str(path)


def load_splits(path):
    with open(path, encoding="utf-8") as stream:
        pairs = [tuple(line.rstrip("\n").split("\t")) for line in stream]
    return {"train": pairs[2:], "validation": pairs[:1], "test": pairs[1:2]}


DEFAULT_SOURCE = {}  # the corpus's default location, set by each test
_CLASSES = []  # TFDS registers a builder class by name once per process


def builder_class(default):
    DEFAULT_SOURCE["path"] = default
    if not _CLASSES:
        _CLASSES.append(make_builder_class(
            "ToyPairsEnDe", version="1.0.0", release_note="toy", description="Toy pairs.\nMore.",
            homepage="https://example.org/", license="CC0", manual_instructions="put pairs.tsv",
            manual_name="pairs.tsv", source_kwarg="pairs_file",
            resolve_source=lambda _: DEFAULT_SOURCE["path"], load_splits=load_splits))
    return _CLASSES[0]


def served(builder):
    builder.download_and_prepare()
    return {split: sorted((en.decode(), de.decode()) for en, de in
                          tfds.as_numpy(builder.as_dataset(split=split, as_supervised=True)))
            for split in ("train", "validation", "test")}


def test_a_local_corpus_becomes_a_tfds_builder_with_the_three_splits(tmp_path):
    rows = [("one", "eins"), ("two", "zwei"), ("three", "drei"), ("four", "vier")]
    cls = builder_class(default=tab_file(tmp_path / "default.tsv", rows))
    assert cls.name == "toy_pairs_en_de" and cls.__doc__ == "Toy pairs."
    builder = cls(data_dir=str(tmp_path / "data"))
    assert set(builder.info.features) == {"en", "de"}
    assert builder.info.supervised_keys == ("en", "de")
    assert served(builder) == {"train": sorted(rows[2:]), "validation": rows[:1], "test": rows[1:2]}


def test_the_source_is_the_argument_then_manual_dir_then_the_default(tmp_path):
    default = tab_file(tmp_path / "default.tsv", [("a", "A"), ("b", "B"), ("default", "D")])
    given = tab_file(tmp_path / "given.tsv", [("a", "A"), ("b", "B"), ("given", "G")])
    manual = tmp_path / "manual"
    os.makedirs(manual)
    tab_file(manual / "pairs.tsv", [("a", "A"), ("b", "B"), ("manual", "M")])
    cls = builder_class(default)
    config = tfds.download.DownloadConfig(manual_dir=str(manual))

    def train(data_dir, **kwargs):
        builder = cls(data_dir=str(tmp_path / data_dir), **kwargs)
        builder.download_and_prepare(download_config=config)
        return [en.decode() for en, _ in tfds.as_numpy(builder.as_dataset(split="train",
                                                                          as_supervised=True))]

    assert train("d1", pairs_file=given) == ["given"]
    assert train("d2") == ["manual"]
    os.remove(manual / "pairs.tsv")
    assert train("d3") == ["default"]
