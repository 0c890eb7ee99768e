"""`python -m trainers.prepare_data` and the vocabulary reuse behind it (data/pipeline.py)."""

import dataclasses
import json
import os
import re
import subprocess
import sys

import pytest

from keras_transformer import data
from keras_transformer.data import ding, pipeline

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def dictionary(n=400):
    """A Ding-format file with n sentence entries plus non-sentence noise."""
    lines = ["# Version :: test\n", "Haus {n} | Häuser {pl} :: house | houses\n"]
    for i in range(n):
        lines.append(f"Nummer {{f}} | Das ist der Satz Nummer {i} von vielen. :: number | "
                     f"This is sentence number {i} of many.\n")
    return "".join(lines)


@pytest.fixture(scope="module")
def ding_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("ding") / "de-en"
    path.write_text(dictionary(), encoding="utf-8")
    return str(path)


def run(*args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    return subprocess.run([sys.executable, "-m", "trainers.prepare_data", *args],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)


def test_prepare_data_reports_and_is_idempotent(ding_file, tmp_path):
    args = [f"--ding_file={ding_file}", f"--data_dir={tmp_path}", "--vocab_size=320"]
    first = run(*args)
    assert first.returncode == 0, first.stderr[-3000:]
    expected = ding.split_pairs(ding.extract_pairs(ding_file)[0])
    for split, name in (("train", "train"), ("dev", "validation"), ("test", "test")):
        row = re.search(rf"^{split}\s+([\d,]+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s+(\d+)\s+(\d+)\s+"
                        rf"([\d.]+)%\s+(\d+)$", first.stdout, re.M)
        assert row, first.stdout
        assert int(row.group(1).replace(",", "")) == len(expected[name])
        assert int(row.group(6)) >= 1 and int(row.group(8)) == 0  # batches, too long
    assert "vocabulary: 320 subwords (learned now)" in first.stdout
    vocab = os.path.join(str(tmp_path), "vocab", "ding_de_en-320.model")
    with open(vocab, "rb") as f:
        learned = f.read()

    second = run(*args)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "vocabulary: 320 subwords (reused)" in second.stdout
    with open(vocab, "rb") as f:
        assert f.read() == learned


def test_bad_flags_and_bad_files_fail_cleanly(tmp_path):
    bad_flag = run("--vocab_size=8001")
    assert bad_flag.returncode != 0 and "--vocab_size=8001: must be a multiple of 8" in bad_flag.stderr
    tsv = tmp_path / "train.tsv"
    tsv.write_text("Hello.\tHallo.\nno tab\n", encoding="utf-8")
    bad_file = run("--dataset=files", f"--train_data={tsv}", f"--data_dir={tmp_path}")
    assert bad_file.returncode != 0
    assert f"{tsv}:2: no tab" in bad_file.stderr and "Traceback" not in bad_file.stderr
    assert not os.path.exists(tmp_path / "vocab")  # nothing half-written


def test_vocabulary_of_other_data_is_not_reused_silently(ding_file, tmp_path):
    """Under its default path a vocabulary whose training text or seed changed is learned again
    (a fixed file run again works); one named by vocab_path is the user's: an error naming what
    differs, unless overwritten."""
    config = data.DataConfig(data_dir=str(tmp_path), ding_file=ding_file, vocab_size=320)
    tokenizer, learned = data.load_or_learn_tokenizer(config)
    assert learned and tokenizer.vocab_size == 320
    again, learned = data.load_or_learn_tokenizer(config)
    assert not learned and again.model_proto == tokenizer.model_proto
    named = dataclasses.replace(config, vocab_path=tokenizer.path, seed=7)
    with pytest.raises(ValueError) as error:
        data.load_or_learn_tokenizer(named)
    assert str(error.value) == (f"vocab_path={tokenizer.path!r} was learned from seed 1, not 7; "
                                "pass another vocab_path, or relearn it (prepare_data "
                                "--overwrite_vocab).")
    relearned, learned = data.load_or_learn_tokenizer(named, overwrite=True)
    assert learned
    default = dataclasses.replace(config, seed=9)  # the default path, another seed: learned again
    relearned, learned = data.load_or_learn_tokenizer(default)
    assert learned and relearned.path == tokenizer.path
    assert data.load_or_learn_tokenizer(default)[1] is False  # and then reused


def test_own_files_fixed_and_run_again_learn_their_vocabulary_again(tmp_path):
    lines = [f"sentence number {i} is here\tSatz Nummer {i} ist hier" for i in range(60)]
    tsv = tmp_path / "train.tsv"
    tsv.write_text("source\ttarget\n" + "\n".join(lines) + "\n", encoding="utf-8")
    config = data.DataConfig(dataset="files", train_data=str(tsv), data_dir=str(tmp_path),
                             vocab_size=296, hold_out=False)
    first, learned = data.load_or_learn_tokenizer(config)
    tsv.write_text("\n".join(lines) + "\n", encoding="utf-8")  # the header line removed
    second, learned = data.load_or_learn_tokenizer(config)
    assert learned and second.path == first.path
    with open(first.path + ".json") as record:
        assert json.load(record)["data"] == pipeline.data_fingerprint(config)
    tsv.write_text("\n".join(lines[:30]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"was learned from other training text \(its files "
                                         r"changed since, or other files\)"):
        data.load_or_learn_tokenizer(dataclasses.replace(config, vocab_path=first.path))


def test_preparing_a_corpus_changes_no_seeded_weights(ding_file, tmp_path):
    """A run seeds, prepares its corpus if it is not there, then builds its model: the weights
    must not depend on whether the corpus was prepared in the same process (TFDS draws the name
    of its temporary folder from Python's random numbers, as Keras does its default seeds)."""
    import keras

    config = data.DataConfig(dataset="ding_de_en", data_dir=str(tmp_path), ding_file=ding_file,
                             vocab_size=320)

    def seeded_weights(prepare):
        keras.utils.set_random_seed(1)
        if prepare:
            data.prepare_offline(config)
        layer = keras.layers.Dense(8)
        layer.build((None, 8))
        return layer.kernel.numpy()

    alone = seeded_weights(prepare=False)
    assert not os.path.isdir(tmp_path / "ding_de_en")
    prepared_now = seeded_weights(prepare=True)
    assert os.path.isdir(tmp_path / "ding_de_en")
    prepared_before = seeded_weights(prepare=True)
    assert (prepared_now == alone).all() and (prepared_before == alone).all()


def test_a_single_own_file_shows_the_splits_held_out_of_it(tmp_path):
    """Only --train_data: the table has dev and test rows of the pairs held out of it (as the
    library reads them) and says where they come from; --nohold_out has neither."""
    tsv = tmp_path / "train.tsv"
    tsv.write_text("".join(f"This is sentence number {i}.\tDas ist Satz Nummer {i}.\n"
                           for i in range(400)), encoding="utf-8")
    args = ["--dataset=files", f"--train_data={tsv}", f"--data_dir={tmp_path}", "--vocab_size=320"]
    result = run(*args)
    assert result.returncode == 0, result.stderr[-3000:]
    config = data.DataConfig(dataset="files", train_data=str(tsv), data_dir=str(tmp_path))
    for split in data.SPLITS:
        row = re.search(rf"^{split}\s+([\d,]+)\s", result.stdout, re.M)
        assert row, result.stdout
        expected = len(list(data.decoded_pairs(data.load_text_pairs(config, split))))
        assert int(row.group(1).replace(",", "")) == expected > 0
    assert f"(dev and test held out of {tsv} by a hash of each source sentence)" in result.stdout

    whole = run(*args, "--nohold_out")
    assert whole.returncode == 0, whole.stderr[-3000:]
    assert re.search(r"^train\s+400\s", whole.stdout, re.M) and "held out" not in whole.stdout
    assert re.search(r"^dev\s+\(not given\)", whole.stdout, re.M)
