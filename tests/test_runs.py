"""keras_transformer/runs.py: which checkpoint of a run is used when none is named (averaged, else
the moving average, else best, else latest; section 6.1 decodes with averaged weights), what is
said when none exists, that a run on a TensorFlow file system reads as one on the local disk, and
that a run resumes only on the sentence pairs it trained on."""

import os
import re
import shutil
import time

import pytest
import tensorflow as tf

from keras_transformer import runs


def write(prefix, value):
    """A checkpoint at exactly ``prefix`` (``.../ckpt-N`` is also named in the folder's index)."""
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    path = tf.train.Checkpoint(v=tf.Variable(float(value))).write(prefix)
    if os.path.basename(prefix).startswith("ckpt-"):
        tf.compat.v1.train.update_checkpoint_state(os.path.dirname(prefix), path)
    time.sleep(0.05)  # distinct modification times
    return path


def test_the_default_is_averaged_else_best_else_latest(tmp_path):
    run = str(tmp_path)
    with pytest.raises(ValueError, match="no checkpoint in"):
        runs.default_checkpoint(run)
    latest = write(os.path.join(run, "ckpt-1"), 1)
    assert runs.default_checkpoint(run) == (runs.LATEST, latest)
    best = write(os.path.join(run, runs.BEST_PREFIX), 2)
    assert runs.default_checkpoint(run) == (runs.BEST, best)
    averaged = write(os.path.join(run, runs.AVERAGED_PREFIX), 3)
    assert runs.default_checkpoint(run) == (runs.AVERAGED, averaged)
    assert runs.resolve_checkpoint(run) == averaged
    assert runs.resolve_checkpoint(run, runs.LATEST) == latest
    # Training went on after the average: it is stale, the best (older by nature) is used.
    newer = write(os.path.join(run, "ckpt-2"), 4)
    assert runs.default_checkpoint(run) == (runs.BEST, best)
    os.remove(best + ".index")
    assert runs.default_checkpoint(run) == (runs.LATEST, newer)


def test_the_moving_average_comes_after_the_averaged_and_before_the_best(tmp_path):
    run = str(tmp_path)
    write(os.path.join(run, "ckpt-1"), 1)
    best = write(os.path.join(run, runs.BEST_PREFIX), 2)
    ema = write(os.path.join(run, runs.EMA_PREFIX), 3)
    assert runs.default_checkpoint(run) == (runs.EMA, ema)
    assert runs.resolve_checkpoint(run, runs.EMA) == ema
    averaged = write(os.path.join(run, runs.AVERAGED_PREFIX), 4)
    assert runs.default_checkpoint(run) == (runs.AVERAGED, averaged)
    # Training went on after both were written: both are stale, the best is used.
    write(os.path.join(run, "ckpt-2"), 5)
    assert runs.default_checkpoint(run) == (runs.BEST, best)
    assert runs.resolve_checkpoint(run, runs.EMA) == ema  # named, it is still there


def test_a_run_on_a_tensorflow_file_system_reads_as_on_the_local_disk(tmp_path):
    """Local paths are read without TensorFlow (a program answers a bad flag before its start-up);
    a gs://-style one through tf.io.gfile: ram://, TensorFlow's in-memory file system, stands in
    for a bucket. The same run folder in both places gives the same answers."""
    local, remote = str(tmp_path / "run"), f"ram://{tmp_path.name}/run"
    for run in (local, remote):
        tf.io.gfile.makedirs(run)
        with tf.io.gfile.GFile(os.path.join(run, runs.CONFIG_FILE), "w") as stream:
            stream.write('{"model": {"d_model": 8}, "vocab_path": "v.model"}')
        with tf.io.gfile.GFile(os.path.join(run, runs.SUMMARY_FILE), "w") as stream:
            stream.write('{"steps": 1, "stop_reason": "train_steps"}')
        for prefix in ("ckpt-1", runs.AVERAGED_PREFIX):
            tf.train.Checkpoint(v=tf.Variable(1.0)).write(os.path.join(run, prefix))
        tf.compat.v1.train.update_checkpoint_state(run, os.path.join(run, "ckpt-1"))

    def answers(run):
        # Not the bare prefix RUN/ckpt-1: ram:// calls any leading part of a file's name a folder.
        found = [runs.read_config(run)]
        for checkpoint in (runs.AVERAGED, runs.LATEST, run, os.path.join(run, "ckpt-1.index"),
                           runs.EMA, os.path.join(run, "ckpt-9")):
            try:
                found.append(runs.resolve_checkpoint(run, checkpoint))
            except ValueError as error:
                found.append(f"ValueError: {error}")
        try:
            runs.read_config(os.path.join(run, "nothing"))
        except ValueError as error:
            found.append(f"ValueError: {error}")
        found += [runs.read_summary(run), runs.read_summary(os.path.join(run, "nothing"))]
        return [str(answer).replace(run, "RUN") for answer in found]

    on_disk = answers(local)
    assert on_disk[0] == str({"model": {"d_model": 8}, "vocab_path": "v.model"})
    assert on_disk[1:5] == ["RUN/averaged/ckpt"] + ["RUN/ckpt-1"] * 3
    assert on_disk[5].startswith("ValueError: no ema checkpoint in RUN")
    assert on_disk[6].startswith("ValueError: checkpoint 'RUN/ckpt-9' not found")
    assert on_disk[7].startswith("ValueError: RUN/nothing/config.json not found")
    assert on_disk[8:] == [str({"steps": 1, "stop_reason": "train_steps"}), "{}"]
    assert answers(remote) == on_disk


def test_a_run_resumes_only_on_the_pairs_it_trained_on(tmp_path, monkeypatch):
    """Its record names one corpus, whose test split evaluate reads: other files, another dataset,
    or a changed hold-out are a new run's; where the corpus is kept and how it is batched are not
    the corpus. A relative path is the same file as its absolute one."""
    import dataclasses

    from keras_transformer.data import DataConfig

    monkeypatch.chdir(tmp_path)
    for name in ("a.tsv", "b.tsv", "dev.tsv"):
        (tmp_path / name).write_text("one\teins\n", encoding="utf-8")
    trained = DataConfig(dataset="files", train_data="a.tsv", data_dir="data", max_length=64)
    run = str(tmp_path / "run")
    runs.check_data(run, dataclasses.replace(trained, train_data="b.tsv"))  # no run yet
    runs.write_json(os.path.join(run, runs.CONFIG_FILE), {"data": dataclasses.asdict(trained)})
    runs.check_data(run, dataclasses.replace(trained, train_data="b.tsv"))  # no checkpoint yet
    write(os.path.join(run, "ckpt-1"), 1)
    for same in (trained, dataclasses.replace(trained, train_data=str(tmp_path / "a.tsv")),
                 dataclasses.replace(trained, data_dir="elsewhere", token_budget=512,
                                     max_length=32, vocab_size=1000, subword_sampling=0.1)):
        runs.check_data(run, same)
    for other, named in (
            (dataclasses.replace(trained, train_data="b.tsv"), "train_data='a.tsv', not 'b.tsv'"),
            (dataclasses.replace(trained, dev_data="dev.tsv"), "dev_data=None, not 'dev.tsv'"),
            (dataclasses.replace(trained, hold_out=False), "hold_out=True, not False"),
            (DataConfig(dataset="ding_de_en"), "dataset='files', not 'ding_de_en', "
                                               "train_data='a.tsv', not None")):
        with pytest.raises(ValueError) as error:
            runs.check_data(run, other)
        assert str(error.value) == (
            f"model_dir={run} holds a run trained on other data ({named}); resume it with the "
            f"data it trained on, or train on this data in another model_dir (init_from={run} "
            "starts from its weights).")


def test_a_runs_relative_data_paths_not_found_here_are_read_from_its_training_folder(tmp_path,
                                                                                    monkeypatch):
    """The record keeps the training command's paths and its working folder: a program running in
    another folder reads there the run's files it does not find from where it runs, so it resumes
    with the same files named from there; a project copied or moved whole reads its own copies,
    and absolute or remote paths, or ones found nowhere, are read as given."""
    import dataclasses

    from keras_transformer.data import DataConfig

    trained_in, elsewhere = tmp_path / "project", tmp_path / "other"
    (trained_in / "data").mkdir(parents=True)
    (elsewhere / "data").mkdir(parents=True)
    for name in ("a.tsv", "a.en", "a.de"):
        (trained_in / name).write_text("one\teins\n", encoding="utf-8")
    trained = DataConfig(dataset="files", train_data="a.tsv", test_data="a.en,a.de",
                         dev_data="gone.tsv", vocab_path="/abs/vocab.model", data_dir="data",
                         ding_file="gs://bucket/ding.txt")
    run = str(tmp_path / "run")
    (trained_in / "data" / "v.model").write_bytes(b"pieces")
    runs.write_json(os.path.join(run, runs.CONFIG_FILE), {
        "data": dataclasses.asdict(trained), runs.WORKING_DIR_KEY: str(trained_in),
        "vocab_path": "data/v.model"})  # a run of before runs kept their own copy
    write(os.path.join(run, "ckpt-1"), 1)
    record = runs.read_config(run)

    monkeypatch.chdir(trained_in)
    assert runs.data_config(record) == trained  # where training ran: the paths as given
    monkeypatch.chdir(elsewhere)
    assert runs.data_config(record) == dataclasses.replace(
        trained, train_data=str(trained_in / "a.tsv"),
        test_data=f"{trained_in / 'a.en'},{trained_in / 'a.de'}")  # its own data/ is found here
    assert runs.data_config({"data": dataclasses.asdict(trained)}) == trained  # an export's
    assert runs.vocabulary_path(run, record) == str(trained_in / "data" / "v.model")
    runs.check_data(run, dataclasses.replace(trained, train_data="../project/a.tsv",
                                             test_data="../project/a.en,../project/a.de"))
    with pytest.raises(ValueError, match=re.escape(
            f"train_data={str(trained_in / 'a.tsv')!r}, not 'b.tsv')")):
        runs.check_data(run, dataclasses.replace(trained, train_data="b.tsv",
                                                 test_data="../project/a.en,../project/a.de"))
    shutil.copytree(trained_in, tmp_path / "copy")  # the same names, found where it runs
    monkeypatch.chdir(tmp_path / "copy")
    assert runs.data_config(record) == trained
    runs.check_data(run, trained)
    shutil.move(trained_in, tmp_path / "moved")
    monkeypatch.chdir(elsewhere)
    assert runs.data_config(record) == trained  # found nowhere: as given


def test_data_files_moved_on_their_own_are_the_runs_data_by_their_bytes(tmp_path, monkeypatch):
    """The record keeps each data file's SHA-256 (hashlib's of the bytes written here): the same
    bytes at other paths resume the run; other bytes, a spec of other files, another hold-out or
    a run recorded without digests do not; a resume naming the recorded files carries their
    digests without reading them again."""
    import dataclasses
    import hashlib

    from keras_transformer.data import DataConfig

    monkeypatch.chdir(tmp_path)
    contents = {"a.tsv": b"one\teins\n", "a.en": b"two\n", "a.de": b"zwei\n"}
    for name, content in contents.items():
        (tmp_path / name).write_bytes(content)
    trained = DataConfig(dataset="files", train_data=str(tmp_path / "a.tsv"),
                         test_data="a.en,a.de")
    digests = runs.data_digests(trained)
    assert digests == {"train_data": [hashlib.sha256(contents["a.tsv"]).hexdigest()],
                       "test_data": [hashlib.sha256(contents[n]).hexdigest()
                                     for n in ("a.en", "a.de")]}
    run = str(tmp_path / "run")
    record = {"data": dataclasses.asdict(trained), runs.DATA_DIGESTS_KEY: digests}
    runs.write_json(os.path.join(run, runs.CONFIG_FILE), record)
    write(os.path.join(run, "ckpt-1"), 1)

    def unread(spec):
        raise AssertionError(f"{spec} read again")

    with monkeypatch.context() as patched:
        patched.setattr(runs, "_spec_digests", unread)
        assert runs.data_digests(trained, run) == digests

    (tmp_path / "node").mkdir()
    for name in contents:
        shutil.move(tmp_path / name, tmp_path / "node" / name)
    moved = dataclasses.replace(trained, train_data="node/a.tsv", test_data="node/a.en,node/a.de")
    hashed = runs._file_digest.cache_info().misses
    runs.check_data(run, moved)
    assert runs.data_digests(moved, run) == digests
    assert runs._file_digest.cache_info().misses - hashed == 3  # each moved file read once
    for other in (dataclasses.replace(moved, test_data="node/a.de,node/a.en"),
                  dataclasses.replace(moved, test_data="node/a.en"),
                  dataclasses.replace(moved, hold_out=False)):
        with pytest.raises(ValueError, match="holds a run trained on other data"):
            runs.check_data(run, other)
    (tmp_path / "node" / "a.tsv").write_bytes(b"one\tein\n")
    with pytest.raises(ValueError, match=re.escape(
            f"train_data={str(tmp_path / 'a.tsv')!r}, not 'node/a.tsv'")):
        runs.check_data(run, moved)
    (tmp_path / "node" / "a.tsv").write_bytes(contents["a.tsv"])
    runs.write_json(os.path.join(run, runs.CONFIG_FILE), {"data": record["data"]})
    with pytest.raises(ValueError, match="train_data="):
        runs.check_data(run, moved)


def test_a_folder_is_its_checkpoint_and_a_relative_name_is_also_looked_for_in_the_run(
        tmp_path, monkeypatch):
    """--checkpoint=RUN/best (averaged/, ema/: one ``ckpt`` written without a 'checkpoint' index
    file) is the prefix in it; a run folder is its latest; a copy of a run's checkpoints without
    its index file its highest-numbered one. A relative name not found from the working folder is
    looked for in the run (``ckpt-2``, ``best/ckpt``, ``averaged``); one found from the working
    folder is that one; one found nowhere is one ValueError naming every place looked at."""
    run = str(tmp_path / "run")
    first, latest = write(os.path.join(run, "ckpt-1"), 1), write(os.path.join(run, "ckpt-2"), 2)
    named = {name: write(os.path.join(run, name, "ckpt"), 3)
             for name in (runs.AVERAGED, runs.EMA, runs.BEST)}
    assert runs.resolve_checkpoint(run, run) == latest
    for name, prefix in named.items():
        assert runs.resolve_checkpoint(run, os.path.join(run, name)) == prefix
        assert runs.resolve_checkpoint(run, os.path.join(run, name) + os.sep) == prefix
        assert runs.resolve_checkpoint(run, name) == prefix  # the name, as before

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert runs.resolve_checkpoint(run, "ckpt-2") == os.path.join(run, "ckpt-2")
    assert runs.resolve_checkpoint(run, "ckpt-1.index") == os.path.join(run, "ckpt-1")
    assert runs.resolve_checkpoint(run, "best/ckpt") == named[runs.BEST]
    assert runs.resolve_checkpoint(run, "averaged/") == named[runs.AVERAGED]
    assert runs.resolve_checkpoint("../run", "ckpt-1") == os.path.join("../run", "ckpt-1")
    # A relative path that exists from the working folder is that one, not the run's.
    mine = write(str(elsewhere / "mine" / "ckpt-2"), 4)
    assert runs.resolve_checkpoint(run, "mine/ckpt-2") == "mine/ckpt-2"
    assert os.path.samefile(runs.resolve_checkpoint(run, "mine") + ".index", mine + ".index")

    with pytest.raises(ValueError) as error:
        runs.resolve_checkpoint(run, "ckpt-7")
    assert str(error.value) == ("checkpoint 'ckpt-7' not found (no ckpt-7.index, no "
                                f"{run}/ckpt-7.index; a name is one of latest, averaged, ema, "
                                "best).")
    with pytest.raises(ValueError) as error:
        runs.resolve_checkpoint(run, f"{run}/ckpt-7")
    assert str(error.value) == f"checkpoint '{run}/ckpt-7' not found (no {run}/ckpt-7.index)."
    os.makedirs(os.path.join(run, "empty"))
    with pytest.raises(ValueError, match=f"checkpoint='{run}/empty' is a directory without a "
                                         "checkpoint in it"):
        runs.resolve_checkpoint(run, "empty")

    # Copied without their 'checkpoint' index file: the highest step, not the first in order.
    copy = str(tmp_path / "copy")
    for step in (9, 10):
        tf.train.Checkpoint(v=tf.Variable(float(step))).write(os.path.join(copy, f"ckpt-{step}"))
    assert runs.resolve_checkpoint(run, copy) == os.path.join(copy, "ckpt-10")
    # Prefixes of no one numbering: which one is meant is the user's to say.
    tf.train.Checkpoint(v=tf.Variable(1.0)).write(os.path.join(copy, "other"))
    with pytest.raises(ValueError) as error:
        runs.resolve_checkpoint(run, copy)
    assert str(error.value) == (
        f"checkpoint={copy!r} is a directory with several checkpoints and no 'checkpoint' index "
        "file naming one (ckpt-10, ckpt-9, other): pass one of them.")
    assert first == os.path.join(run, "ckpt-1")


def test_an_ensemble_of_one_string_is_refused_not_read_per_character():
    with pytest.raises(ValueError, match=r"model_dirs='runs/a': a list of run folders, not one "
                                         r"string \(one run: load_translator\)"):
        runs.load_ensemble("runs/a")
