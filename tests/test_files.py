"""Your own parallel files (keras_transformer/data/files.py) and DataConfig validation."""

import dataclasses
import os
import re
import shlex
import subprocess

import pytest

from keras_transformer import data
from keras_transformer.data import files

PAIRS = [
    ("The house is very old.", "Das Haus ist sehr alt."),
    ("She waved goodbye.", "Sie winkte zum Abschied."),
    ("He was 'on their radar'.", "Er war „auf ihrem Radar“."),
]


def read_all(dataset):
    return [(a.decode("utf-8"), b.decode("utf-8")) for a, b in dataset.as_numpy_iterator()]


def test_tsv_and_two_files_give_the_same_pairs(tmp_path):
    tsv = tmp_path / "train.tsv"
    tsv.write_bytes("".join(f"{s}\t{t}\r\n" for s, t in PAIRS).encode("utf-8"))  # CRLF too
    (tmp_path / "train.en").write_text("".join(f"{s}\n" for s, _ in PAIRS), encoding="utf-8")
    (tmp_path / "train.de").write_text("".join(f"{t}\n" for _, t in PAIRS), encoding="utf-8")
    assert files.check(files.parse_spec(str(tsv))) == 3
    assert read_all(files.load(files.parse_spec(str(tsv)))) == PAIRS
    two = f"{tmp_path / 'train.en'},{tmp_path / 'train.de'}"
    assert read_all(files.load(files.parse_spec(two))) == PAIRS
    config = data.DataConfig(dataset="files", train_data=two, data_dir=str(tmp_path))
    assert read_all(data.load_text_pairs(config, "train")) == PAIRS
    with pytest.raises(ValueError, match=r"dev_data is not set"):
        data.load_text_pairs(config, "dev")


@pytest.mark.parametrize("block", [1, 2, 3, 4096])
def test_pairs_read_a_block_at_a_time_are_the_datasets_in_order(tmp_path, block):
    """decoded_pairs (what the vocabulary, the dev BLEU and the floors read) hands over every
    pair once, in order, whether the blocks divide the corpus or not; read_pairs' limit is a
    prefix; training_texts alternates the two sides."""
    many = [(f"{s} {i}", f"{t} {i}") for i in range(7) for s, t in PAIRS]
    tsv = tmp_path / "train.tsv"
    tsv.write_text("".join(f"{s}\t{t}\n" for s, t in many), encoding="utf-8")
    config = data.DataConfig(dataset="files", train_data=str(tsv), data_dir=str(tmp_path))
    pairs = data.load_text_pairs(config, "train")
    assert list(data.decoded_pairs(pairs, block=block)) == read_all(pairs) == many
    assert data.read_pairs(config, "train", 5) == ([s for s, _ in many[:5]], [t for _, t in many[:5]])
    assert list(data.training_texts(config)) == [text for pair in many for text in pair]


def test_gzip_compressed_files_give_the_plain_files_pairs(tmp_path):
    """Told by their first bytes, not their name: a .gz TSV, a pair with one side compressed, a
    compressed file named .tsv; its own BOM, CRLF and empty last lines as a plain file's. A
    damaged one is one line naming it."""
    import gzip

    text = "\ufeff" + "".join(f"{s}\t{t}\r\n" for s, t in PAIRS) + "\n\n"
    plain = write(tmp_path / "plain.tsv", text)
    packed = gzip.compress(text.encode("utf-8"))
    specs = [write(tmp_path / "train.tsv.gz", packed), write(tmp_path / "named.tsv", packed)]
    (tmp_path / "train.en").write_text("".join(f"{s}\n" for s, _ in PAIRS), encoding="utf-8")
    write(tmp_path / "train.de.gz", gzip.compress("".join(f"{t}\n" for _, t in PAIRS).encode()))
    specs.append(f"{tmp_path / 'train.en'},{tmp_path / 'train.de.gz'}")
    assert read_all(files.load(files.parse_spec(plain))) == PAIRS
    for spec in specs:
        assert files.check(files.parse_spec(spec)) == len(PAIRS)
        assert read_all(files.load(files.parse_spec(spec))) == PAIRS
    config = data.DataConfig(dataset="files", train_data=specs[0], data_dir=str(tmp_path))
    assert data.read_pairs(config, "train") == ([s for s, _ in PAIRS], [t for _, t in PAIRS])

    many = gzip.compress("".join(f"{s} {i}\t{t}\n" for i in range(2000) for s, t in PAIRS).encode())
    cut = write(tmp_path / "cut.tsv.gz", many[:len(many) // 2])
    with pytest.raises(ValueError, match=r"cut.tsv.gz: damaged gzip data after line \d+ \(.*\); "
                                         "download or compress it again"):
        files.check(files.parse_spec(cut))
    bad = write(tmp_path / "bad.tsv.gz", gzip.compress(b"x\ty\n")[:10] + b"\xff" * 40)
    with pytest.raises(ValueError, match=r"bad.tsv.gz: damaged gzip data after line 0"):
        files.check(files.parse_spec(bad))


def write(path, text):
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return str(path)


@pytest.mark.parametrize(
    "name, content, pattern",
    [
        ("a.tsv", "Hello.\tHallo.\nNo tab here\n", r"a.tsv:2: no tab"),
        ("b.tsv", "Hello.\tHallo.\tSalut.\n", r"b.tsv:1: 2 tabs"),
        ("c.tsv", "Hello.\tHallo.\n\nBye.\tTschüss.\n", r"c.tsv:2: empty line"),
        ("d.tsv", "Hello.\t  \n", r"d.tsv:1: empty target sentence"),
        ("e.tsv", b"Hello.\tHallo.\nBad \xc3\x28.\tSchlecht.\n", r"e.tsv:2: invalid UTF-8 at byte 4"),
        ("f.tsv", "", r"f.tsv: empty corpus"),
    ],
)
def test_bad_tsv_files_name_file_and_line(tmp_path, name, content, pattern):
    path = write(tmp_path / name, content)
    with pytest.raises(ValueError, match=pattern):
        files.load(files.parse_spec(path))


def test_a_file_of_more_columns_is_told_the_command_that_keeps_the_pair(tmp_path):
    """A third column (an attribution, as manythings.org's Anki files have) is refused with the
    command that keeps the first two; that command's file is the pairs. One tab only: no hint."""
    lines = [f"{s}\t{t}\tCC-BY 2.0 (France) Attribution: tatoeba.org #{i}\n"
             for i, (s, t) in enumerate(PAIRS)]
    path = write(tmp_path / "deu.txt", "".join(lines))
    with pytest.raises(ValueError, match=r"deu.txt:1: 2 tabs") as refused:
        files.check(files.parse_spec(path))
    command = re.search(r"`([^`]+)`", str(refused.value)).group(1)
    kept = tmp_path / "deu.tsv"
    with open(kept, "wb") as stream:
        subprocess.run([*shlex.split(command), path], stdout=stream, check=True)
    assert read_all(files.load(files.parse_spec(str(kept)))) == PAIRS
    with pytest.raises(ValueError, match="no tab") as refused:
        files.check(files.parse_spec(write(tmp_path / "one.tsv", "Hello. Hallo.\n")))
    assert "cut" not in str(refused.value)


def test_empty_lines_at_a_files_end_are_left_out(tmp_path):
    """Editors often leave empty lines at the end: they are not sentences, so they are left out
    (of the count as of the pairs), a different number in each of two files too; an empty line
    with a sentence after it is still refused, at its own line."""
    tsv = write(tmp_path / "a.tsv", "One.\tEins.\r\nTwo.\tZwei.\r\n\r\n  \n\n")
    en = write(tmp_path / "a.en", "One.\nTwo.\n\n")
    de = write(tmp_path / "a.de", "Eins.\nZwei.\n\n\n\t\n")
    for spec in (files.parse_spec(tsv), files.FileSpec(en, de)):
        assert files.check(spec) == 2
        assert [(s.decode(), t.decode()) for s, t in files.load(spec).as_numpy_iterator()] == [
            ("One.", "Eins."), ("Two.", "Zwei.")]
    middle = write(tmp_path / "b.tsv", "One.\tEins.\n\n\nTwo.\tZwei.\n\n")
    with pytest.raises(ValueError, match=r"b.tsv:2: empty line \(every line must hold a sentence; "
                                         r"only the file's last lines may be empty\)"):
        files.check(files.parse_spec(middle))
    with pytest.raises(ValueError, match=r"c.tsv: empty corpus"):
        files.check(files.parse_spec(write(tmp_path / "c.tsv", "\n\n")))


@pytest.mark.parametrize("first, header", [
    ("source\ttarget", "source<TAB>target"), ("\ufeffEN\tDE\r", "EN<TAB>DE"),
    ("en-US\tde_AT", "en-US<TAB>de_AT"), ("English\tsrc", "English<TAB>src"),
    ("Hello\tHallo", None), ("yes\tja", None), ("de\tde", None), ("the\tder", None)])
def test_a_first_line_of_column_names_is_said_with_its_file(tmp_path, first, header):
    """A header (pandas' ``to_csv(sep="\t")`` writes one) would train as a pair: the programs' data
    line names the file and says so; words that are a pair, or the same word twice, are not one."""
    import gzip

    text = first + "\n" + "".join(f"{s}\t{t}\n" for s, t in PAIRS)
    plain, packed = (write(tmp_path / "train.tsv", text),
                     write(tmp_path / "test.tsv", gzip.compress(text.encode("utf-8"))))
    for spec in (plain, packed):
        assert files.header_line(files.parse_spec(spec)) == header
    config = data.DataConfig(dataset="files", train_data=plain, test_data=packed)
    said = [f"the first line of {spec} ({header}) looks like column names and is read as a "
            "sentence pair: delete it if it is a header" for spec in (plain, packed)]
    assert data.splits_note(config) == ("; ".join(said) if header else "")  # (too few to hold out)
    (tmp_path / "train.en").write_text(first + "\n", encoding="utf-8")  # not a TSV: no columns
    assert files.header_line(files.parse_spec(f"{tmp_path / 'train.en'},{plain}")) is None


def test_bad_aligned_files_name_file_and_line(tmp_path):
    en = write(tmp_path / "x.en", "One.\nTwo.\nThree.\n")
    de = write(tmp_path / "x.de", "Eins.\nZwei.\n")
    with pytest.raises(ValueError, match=r"x.de has 2 lines but .*x.en has more .*line 3"):
        files.load(files.FileSpec(en, de))
    de = write(tmp_path / "y.de", "Eins.\n\nDrei.\n")
    with pytest.raises(ValueError, match=r"y.de:2: empty line"):
        files.load(files.FileSpec(en, de))
    with pytest.raises(ValueError, match=r"missing.de: file not found"):
        files.load(files.FileSpec(en, str(tmp_path / "missing.de")))


def test_bad_specs_name_the_flag():
    with pytest.raises(ValueError, match=r"dev_data='a,b,c': expected PATH.tsv .* or SRC_PATH,TGT_PATH"):
        files.parse_spec("a,b,c", "dev_data")
    with pytest.raises(ValueError, match=r"train_data='a,': expected"):
        files.parse_spec("a,", "train_data")


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        (dict(dataset="wmt15"), r"dataset='wmt15': unknown; choose one of wmt14_en_de"),
        (dict(dataset="files"), r"dataset='files' needs your parallel files"),
        (dict(train_data="t.tsv"), r"train_data='t.tsv' is only read with dataset='files'"),
        (dict(vocab_size=8001), r"vocab_size=8001: must be a multiple of 8"),
        (dict(max_length=4), r"max_length=4: must be at least 8"),
        (dict(token_budget=100, max_length=256), r"token_budget=100: smaller than max_length=256"),
        (dict(bucket_multiple=0), r"bucket_multiple=0: must be in 1..64"),
    ],
)
def test_data_config_errors_name_the_field(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        data.DataConfig(**kwargs)


def test_vocabulary_defaults():
    assert data.DataConfig(dataset="wmt14_en_de").effective_vocab_size == 37000
    ding = data.DataConfig(data_dir="d")
    assert ding.effective_vocab_size == 8000
    assert ding.effective_vocab_path.replace("\\", "/") == "d/vocab/ding_de_en-8000.model"
    a = data.DataConfig(dataset="files", train_data="a.tsv", data_dir="d").effective_vocab_path
    b = data.DataConfig(dataset="files", train_data="b.tsv", data_dir="d").effective_vocab_path
    assert a != b  # one vocabulary per training corpus


def test_own_files_have_no_known_target_language():
    """The evaluation then reads the script of the references (evaluation.written_language), where
    a built-in corpus names its language."""
    assert data.DataConfig(dataset="files", train_data="a.tsv").target_language is None
    assert data.DataConfig(dataset="libreoffice_help_en_de").target_language == "de"
    assert data.DataConfig(dataset="wmt14_en_fr").target_language == "fr"


def test_corpus_empty_after_length_filter_names_the_file(tmp_path):
    from test_batching import NumberTokenizer

    tsv = write(tmp_path / "long.tsv", "1 2 3 4 5 6 7 8\t1 2 3\n1 2\t1 2 3 4 5 6 7 8 9\n")
    config = data.DataConfig(dataset="files", train_data=tsv, max_length=8, token_budget=64)
    with pytest.raises(ValueError, match=r"long.tsv is empty after filtering: its first 2 pairs "
                                         r"are all longer than max_length=8"):
        data.make_dataset(config, NumberTokenizer(), "train", training=True, repeat=True)
    ok = data.DataConfig(dataset="files", train_data=tsv, max_length=9, token_budget=64)
    batches = data.make_dataset(ok, NumberTokenizer(), "train", training=True, repeat=True)
    assert next(iter(batches))[1].shape[1] == 9  # the 8-word source + EOS fits exactly


def held_out_corpus(path, pairs, start=0):
    """``pairs`` numbered pairs; every 50th source three times (with other targets), so that
    copies of a source are there to be kept together."""
    rows = []
    for i in range(start, start + pairs):
        rows.append((f"Sentence {i} of {i % 7} words.", f"Satz {i}."))
        if i % 50 == 0:
            rows += [(rows[-1][0], f"Satz {i}, anders {k}.") for k in range(2)]
    write(path, "".join(f"{s}\t{t}\n" for s, t in rows))
    return rows


def splits_of(config):
    return {split: list(data.decoded_pairs(data.load_text_pairs(config, split)))
            for split in data.SPLITS}


def test_a_single_training_file_holds_out_dev_and_test_by_the_source_sentence(tmp_path,
                                                                             monkeypatch):
    """Dev and test not given: held out of the training file, each about HELD_OUT_PAIRS (5
    standard deviations of the binomial count allowed), the three splits a partition of the
    file (train in its order), every copy of a source in one split, the same each time; and when
    the file grows, its test pairs are old test pairs or new ones, never old training pairs.
    (Smaller held-out splits than the real ones, so that a small file is past the share cap.)"""
    import collections

    monkeypatch.setattr(files, "HELD_OUT_PAIRS", {"test": 100, "dev": 50})
    rows = held_out_corpus(tmp_path / "train.tsv", 4000)
    config = data.DataConfig(dataset="files", train_data=str(tmp_path / "train.tsv"),
                             data_dir=str(tmp_path))
    assert data.held_out_splits(config) == ("dev", "test")
    splits = splits_of(config)
    for split, expected in files.HELD_OUT_PAIRS.items():
        share = expected / len(rows)
        assert abs(len(splits[split]) - expected) < 5 * (len(rows) * share * (1 - share)) ** 0.5
    assert collections.Counter(sum(splits.values(), [])) == collections.Counter(rows)
    training = set(splits["train"])
    assert splits["train"] == [row for row in rows if row in training]
    sources = {split: {s for s, _ in pairs} for split, pairs in splits.items()}
    assert not sources["train"] & sources["dev"] and not sources["train"] & sources["test"]
    assert not sources["dev"] & sources["test"]
    assert splits_of(config) == splits
    assert "dev and test held out of" in data.splits_note(config)

    grown = held_out_corpus(tmp_path / "grown.tsv", 6000)  # the first 4,000 rows, then more
    assert grown[:len(rows)] == rows
    bigger = data.DataConfig(dataset="files", train_data=str(tmp_path / "grown.tsv"),
                             data_dir=str(tmp_path))
    grown_splits = splits_of(bigger)
    assert not set(grown_splits["test"]) & set(splits["train"])
    assert not set(grown_splits["dev"]) & set(splits["train"])
    assert set(grown_splits["test"]) - set(rows)  # new pairs come in


def test_a_run_keeps_its_held_out_splits_when_its_file_is_cut_short(tmp_path, monkeypatch):
    """Pairs removed from a run's training file after it started: sized by the count now, the
    held-out shares would grow and take pairs the run trained on; the run sizes them by the count
    it recorded (``runs.data_to_resume``), so its dev and test pairs are its old ones still there.
    A new run, and a folder without checkpoints, size them by the file now."""
    import tensorflow as tf

    from keras_transformer import runs

    monkeypatch.setattr(files, "HELD_OUT_PAIRS", {"test": 100, "dev": 50})
    rows = held_out_corpus(tmp_path / "train.tsv", 4000)
    asked = data.DataConfig(dataset="files", train_data=str(tmp_path / "train.tsv"),
                            data_dir=str(tmp_path))
    model_dir = str(tmp_path / "run")
    started = runs.data_to_resume(model_dir, asked)
    assert started == dataclasses.replace(asked, hold_out_pairs=len(rows))
    splits = splits_of(started)
    assert splits == splits_of(asked)
    runs.write_json(os.path.join(model_dir, runs.CONFIG_FILE), {"data": dataclasses.asdict(started)})
    assert runs.data_to_resume(model_dir, asked).hold_out_pairs == len(rows)  # no checkpoint yet
    write(tmp_path / "train.tsv", "".join(f"{s}\t{t}\n" for s, t in rows[:1500]))
    assert runs.data_to_resume(model_dir, asked).hold_out_pairs == 1500
    tf.train.CheckpointManager(tf.train.Checkpoint(step=tf.Variable(1)), model_dir, 1).save()

    assert set(splits_of(asked)["test"]) & set(splits["train"])  # what the count now would do
    resumed = runs.data_to_resume(model_dir, asked)
    assert resumed.hold_out_pairs == len(rows)
    kept, remaining = splits_of(resumed), set(rows[:1500])
    for split in data.SPLITS:
        assert kept[split] == [row for row in splits[split] if row in remaining], split
    assert runs.data_to_resume(None, asked).hold_out_pairs == 1500
    # the training command's flags name the run's corpus: its splits (trainers.evaluate)
    assert data.sized_as(asked, resumed) == resumed
    assert data.sized_as(dataclasses.replace(asked, dev_data=asked.train_data),
                         resumed).hold_out_pairs == 1500  # another corpus
    # own files without held-out splits, and the other corpora, are as they were asked
    for config in (dataclasses.replace(asked, hold_out=False), data.DataConfig()):
        assert runs.data_to_resume(model_dir, config) is config


def test_a_split_given_is_read_from_its_file_and_only_the_others_are_held_out(tmp_path):
    rows = held_out_corpus(tmp_path / "train.tsv", 3000)
    test_file = write(tmp_path / "test.tsv", "Ein Test.\tA test.\n")
    both = data.DataConfig(dataset="files", train_data=str(tmp_path / "train.tsv"),
                           data_dir=str(tmp_path))
    given_test = dataclasses.replace(both, test_data=test_file)
    assert data.held_out_splits(given_test) == ("dev",)
    splits = splits_of(given_test)
    assert splits["test"] == [("Ein Test.", "A test.")]
    # the dev pairs are the same either way; the test's hash slice stays in training
    assert splits["dev"] == splits_of(both)["dev"]
    assert sorted(splits["train"] + splits["dev"]) == sorted(rows)
    assert data.splits_note(given_test).startswith("dev held out of ")
    # the training file named as the test file, by another path: its scores are no test's
    os.symlink(tmp_path / "train.tsv", tmp_path / "same.tsv")
    same = dataclasses.replace(both, test_data=str(tmp_path / "same.tsv"))
    assert data.splits_note(same) == (
        f"dev held out of {tmp_path / 'train.tsv'} by a hash of each source sentence; test_data "
        "is the training file: its scores are of pairs the model trains on")
    # each configuration its own vocabulary: their training text differs
    paths = {c.effective_vocab_path for c in (both, given_test,
                                               dataclasses.replace(both, hold_out=False))}
    assert len(paths) == 3


def test_no_hold_out_from_a_small_file_or_when_turned_off(tmp_path):
    """A file under HELD_OUT_MIN_PAIRS, or hold_out=False: every pair trains, and the missing
    split's message says why it is missing."""
    small = held_out_corpus(tmp_path / "small.tsv", files.HELD_OUT_MIN_PAIRS - 10)
    config = data.DataConfig(dataset="files", train_data=str(tmp_path / "small.tsv"))
    assert data.held_out_splits(config) == () and data.splits_note(config) == ""
    assert read_all(data.load_text_pairs(config, "train")) == small
    with pytest.raises(ValueError, match=rf"test_data is not set: .*\(train_data has {len(small)} "
                                         rf"pairs, too few to hold a test split out of: at least "
                                         rf"{files.HELD_OUT_MIN_PAIRS}\)"):
        data.load_text_pairs(config, "test")
    large = held_out_corpus(tmp_path / "large.tsv", 3000)
    off = data.DataConfig(dataset="files", train_data=str(tmp_path / "large.tsv"), hold_out=False)
    assert data.held_out_splits(off) == ()
    assert read_all(data.load_text_pairs(off, "train")) == large
    with pytest.raises(ValueError, match=r"dev_data is not set: .*TGT_PATH\)\.$"):
        data.load_text_pairs(off, "dev")


def test_a_held_out_split_that_gets_no_pair_says_so(tmp_path):
    """Enough lines but few different sources (each lands whole in one split): an empty held-out
    split is one error naming the file and what to pass, not an empty dev set."""
    few = write(tmp_path / "few.tsv", "".join(f"Sentence {i}.\tSatz {i}.\n" for i in range(4)) * 30)
    config = data.DataConfig(dataset="files", train_data=few)
    assert data.held_out_splits(config) == ("dev", "test")
    splits = splits_of_or_errors(config)
    assert any(isinstance(value, ValueError) for value in splits.values())
    for split in ("dev", "test"):
        if isinstance(splits[split], ValueError):
            assert str(splits[split]) == (
                f"train_data={few!r}: no {split} pairs held out of it: its 120 pairs have too few "
                "different source sentences to fall into the held-out share; pass "
                f"{split}_data=PATH, or hold_out=False to train on every pair.")
        else:
            assert splits[split]


def splits_of_or_errors(config):
    found = {}
    for split in data.SPLITS:
        try:
            found[split] = list(data.decoded_pairs(data.load_text_pairs(config, split)))
        except ValueError as error:
            found[split] = error
    return found


def test_runs_recorded_before_held_out_splits_trained_on_every_pair():
    from keras_transformer import runs

    recorded = {"dataset": "files", "train_data": "train.tsv"}
    assert runs.data_config({"data": recorded}).hold_out is False
    assert runs.data_config({"data": {**recorded, "hold_out": True}}).hold_out is True
