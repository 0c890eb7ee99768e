"""Fine-tuning (--init_from, fairseq's --restore-file --reset-optimizer) from a run or an exported
SavedModel: exactly the source's weights before the first update, a fresh optimizer, step and
schedule, the source recorded, a resumed run on its own checkpoints, the source's vocabulary with
its coverage measured, and every mismatch a clear error."""

import dataclasses
import json
import os
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer import runs
from keras_transformer.training import Callback, Trainer, TrainingConfig
from keras_transformer.training import init_from
from toy import toy_batch

TINY = kt.TransformerConfig.from_preset("tiny", vocab_size=16)
FIXED = toy_batch(5, task="reverse", vocab_size=16, batch_size=4, min_length=2, max_length=6)


def batches(context=None):
    return tf.data.Dataset.from_tensors(toy_batch(0, task="reverse", vocab_size=16, batch_size=8,
                                                  min_length=2, max_length=6)).repeat()


def other_batches(context=None):  # the "new domain": another task
    return tf.data.Dataset.from_tensors(toy_batch(0, task="copy", vocab_size=16, batch_size=8,
                                                  min_length=2, max_length=6)).repeat()


def logits(model):
    (source, target_in), _ = FIXED
    return np.asarray(model((source, target_in), training=False))


class BeforeFirstUpdate(Callback):
    """What the trainer holds when training is about to start (after any restore)."""

    def on_begin(self, step):
        trainer = self.trainer
        self.step = trainer.step
        self.logits = logits(trainer.model)
        self.iterations = int(trainer.optimizer.iterations)
        self.optimizer_variables = [v.numpy() for v in trainer.optimizer.variables
                                    if v is not trainer.optimizer.iterations]
        self.learning_rate = trainer.learning_rate()


def train_config(model_dir, **overrides):
    values = dict(model_dir=str(model_dir), train_steps=5, warmup_steps=4, log_every_steps=100,
                  checkpoint_every_minutes=None)
    values.update(overrides)
    return TrainingConfig(**values)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A trained source run: 5 steps, its latest checkpoint holds the trainer's final weights."""
    model_dir = tmp_path_factory.mktemp("source")
    trainer = Trainer(TINY, train_config(model_dir))
    trainer.fit(batches)
    return dict(dir=str(model_dir), logits=logits(trainer.model),
                checkpoint=tf.train.latest_checkpoint(str(model_dir)),
                iterations=int(trainer.optimizer.iterations))


def test_starts_from_exactly_the_source_weights_with_a_fresh_optimizer(source, tmp_path):
    assert source["iterations"] == 5
    seen = BeforeFirstUpdate()
    tuned = Trainer(TINY, train_config(tmp_path / "tuned", train_steps=2, warmup_steps=10,
                                       learning_rate_scale=0.5, init_from=source["dir"]))
    summary = tuned.fit(other_batches, callbacks=[seen])
    # The source's logits on a fixed batch, before the first update.
    np.testing.assert_array_equal(seen.logits, source["logits"])
    # A fresh optimizer, step and schedule: as a run started from random weights with the same
    # settings (zero moments, iteration 0, the learning rate of step 1 under the new warm-up).
    fresh_seen = BeforeFirstUpdate()
    Trainer(TINY, train_config(tmp_path / "fresh", train_steps=1, warmup_steps=10,
                               learning_rate_scale=0.5)).fit(other_batches, callbacks=[fresh_seen])
    assert seen.step == 0 and seen.iterations == 0 == fresh_seen.iterations
    assert seen.optimizer_variables and all(not v.any() for v in seen.optimizer_variables)
    assert seen.learning_rate == pytest.approx(fresh_seen.learning_rate)
    # Eq. (3) at step_num 1 with warmup 10, d_model 32 and scale 0.5
    assert seen.learning_rate == pytest.approx(0.5 * 32 ** -0.5 * 10 ** -1.5, rel=1e-6)
    assert summary["start_step"] == 0 and summary["steps"] == 2 and summary["resumed_from"] is None
    # It trained away from the source (the new task moved the weights).
    assert np.abs(logits(tuned.model) - source["logits"]).max() > 1e-4
    record = runs.read_config(str(tmp_path / "tuned"))[runs.INIT_FROM_KEY]
    assert record["run_dir"] == source["dir"]
    assert record["checkpoint"] == source["checkpoint"]
    assert record["checkpoint_name"] == runs.LATEST
    assert runs.read_config(str(tmp_path / "tuned"))["training"]["init_from"] == source["dir"]


def test_a_resumed_fine_tuned_run_continues_from_its_own_checkpoint(source, tmp_path):
    copy = str(tmp_path / "source_copy")
    shutil.copytree(source["dir"], copy)
    tuned_dir = tmp_path / "tuned"
    first = Trainer(TINY, train_config(tuned_dir, train_steps=2, init_from=copy))
    first.fit(other_batches)
    own = logits(first.model)
    # The source is gone: a resume must not need it (nor load it again).
    shutil.rmtree(copy)
    seen = BeforeFirstUpdate()
    summary = Trainer(TINY, train_config(tuned_dir, train_steps=4, init_from=copy)).fit(
        other_batches, callbacks=[seen])
    assert summary["start_step"] == 2 and summary["resumed_from"].endswith("ckpt-2")
    np.testing.assert_array_equal(seen.logits, own)
    assert seen.iterations == 2  # its own optimizer state, not a fresh one
    assert runs.read_config(str(tuned_dir))[runs.INIT_FROM_KEY]["run_dir"] == copy
    # Resumed without --init_from, the record of where it came from stays.
    Trainer(TINY, train_config(tuned_dir, train_steps=5)).fit(other_batches)
    assert runs.read_config(str(tuned_dir))[runs.INIT_FROM_KEY]["run_dir"] == copy


def test_a_checkpoint_prefix_and_an_averaged_checkpoint_name_their_run(source, tmp_path):
    named = init_from.resolve(source["checkpoint"])
    assert (named.run_dir, named.checkpoint, named.name) == (
        os.path.dirname(source["checkpoint"]), source["checkpoint"], None)
    copy = tmp_path / "averaged_run"
    shutil.copytree(source["dir"], copy)
    trainer = Trainer(TINY, train_config(copy))  # 5 steps done: restores, averages the last 2
    trainer.restore()
    averaged = trainer.average_last(2)
    by_folder, by_prefix = init_from.resolve(str(copy)), init_from.resolve(averaged)
    assert by_folder.checkpoint == averaged and by_folder.name == runs.AVERAGED
    assert by_prefix.run_dir == str(copy) and by_prefix.checkpoint == averaged
    seen = BeforeFirstUpdate()
    Trainer(TINY, train_config(tmp_path / "tuned", train_steps=1, init_from=averaged)).fit(
        other_batches, callbacks=[seen])
    np.testing.assert_array_equal(seen.logits, logits(trainer.model))  # the averaged weights


@pytest.mark.parametrize("overrides,message", [
    (dict(d_model=64), r"d_model 32, this run 64"),
    (dict(num_layers=3, num_heads=2), r"num_layers 2, this run 3; num_heads 4, this run 2"),
    (dict(positional="learned"), r"positional sinusoidal, this run learned"),
])
def test_another_architecture_is_one_clear_error(source, tmp_path, overrides, message):
    other = kt.TransformerConfig.from_preset("tiny", vocab_size=16, **overrides)
    with pytest.raises(ValueError, match=f"init_from={re.escape(source['dir'])}: .*{message}"):
        Trainer(other, train_config(tmp_path, init_from=source["dir"]))
    assert not os.path.exists(tmp_path / "config.json")


def test_regularisers_may_differ(source, tmp_path):
    tuned = kt.TransformerConfig.from_preset("tiny", vocab_size=16, dropout_rate=0.3,
                                             label_smoothing=0.2, max_length=40)
    seen = BeforeFirstUpdate()
    Trainer(tuned, train_config(tmp_path, train_steps=1, init_from=source["dir"])).fit(
        other_batches, callbacks=[seen])
    np.testing.assert_array_equal(seen.logits, source["logits"])


@pytest.mark.parametrize("name,message", [
    ("missing", "no such run folder, checkpoint or SavedModel"),
    ("empty", "not the model_dir of a training run"),
    ("no_checkpoint", "no checkpoint in"),
])
def test_a_missing_source_is_one_clear_error(source, tmp_path, name, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "no_checkpoint").mkdir()
    shutil.copy(os.path.join(source["dir"], runs.CONFIG_FILE), tmp_path / "no_checkpoint")
    given = str(tmp_path / name)
    with pytest.raises(ValueError, match=f"init_from={re.escape(given)}: .*{message}"):
        Trainer(TINY, train_config(tmp_path / "new", init_from=given))


def test_a_savedmodel_is_a_source_too(tmp_path):
    """The shipped model comes as a SavedModel without its run: fine-tuning starts from the
    exported weights exactly (the logits of the model that was exported), with the export's
    vocabulary, and records the version folder."""
    from keras_transformer.export import export_saved_model
    from test_inference import small_translator

    translator = small_translator(beam_size=1)
    base = tmp_path / "saved_models" / "tiny"
    export_saved_model(translator, str(base), version=1, text_signature=False)
    export_saved_model(translator, str(base), version=2, text_signature=False)
    config = translator.model.config
    batch = toy_batch(5, task="reverse", vocab_size=config.vocab_size, batch_size=4, min_length=2,
                      max_length=6)
    (source, target_in), _ = batch
    expected = np.asarray(translator.model((source, target_in), training=False))

    class Seen(Callback):
        def on_begin(self, step):
            self.logits = np.asarray(self.trainer.model((source, target_in), training=False))

    seen = Seen()
    tuned = Trainer(config, train_config(tmp_path / "tuned", train_steps=1, init_from=str(base)))
    tuned.fit(lambda context=None: tf.data.Dataset.from_tensors(batch).repeat(), callbacks=[seen])
    np.testing.assert_array_equal(seen.logits, expected)
    record = runs.read_config(str(tmp_path / "tuned"))[runs.INIT_FROM_KEY]
    assert record == {"given": str(base), "run_dir": None, "checkpoint": str(base / "2"),
                      "checkpoint_name": init_from.SAVED_MODEL}
    resolved = init_from.resolve(str(base / "1"))
    with open(resolved.vocab_path, "rb") as stream:
        assert stream.read() == translator.tokenizer.model_proto
    # Another architecture names the export's config; a folder of neither kind says so.
    wider = dataclasses.replace(config, d_model=64, d_k=16, d_v=16)
    with pytest.raises(ValueError, match=re.escape(f"init_from={base}: its model "
                                                   f"({base / '2' / 'assets' / 'config.json'}) "
                                                   "differs from this run's: d_model 32, this "
                                                   "run 64")):
        Trainer(wider, train_config(tmp_path / "wider", init_from=str(base)))
    (tmp_path / "neither").mkdir()
    with pytest.raises(ValueError, match="not the model_dir of a training run, nor a SavedModel"):
        init_from.resolve(str(tmp_path / "neither"))


def test_the_shipped_model_is_a_source():
    from trainers import shipped
    from keras_transformer.tokenizer import SubwordTokenizer

    base = shipped.shipped_model_dir()
    if base is None:
        pytest.skip("this copy of the project has no shipped model")
    resolved = init_from.resolve(base)
    assert resolved.is_export and resolved.run_dir is None
    with open(os.path.join(resolved.checkpoint, "assets", "config.json")) as stream:
        assert resolved.model_config.to_dict() == json.load(stream)["model"]
    assert SubwordTokenizer.load(resolved.vocab_path).vocab_size == resolved.model_config.vocab_size


# --- the vocabulary ----------------------------------------------------------------------------

ENGLISH = ["the house is small", "a cat sees the dog", "the old tree is big", "a red house"]
GERMAN = ["das Haus ist klein", "eine Katze sieht den Hund", "der alte Baum ist groß",
          "ein rotes Haus"]


def test_unknown_piece_rate_against_sentencepiece(tmp_path):
    """The share of byte-fallback and unknown pieces, against SentencePiece's own is_byte and
    is_unknown on the same text."""
    import sentencepiece as spm

    from keras_transformer.tokenizer import SubwordTokenizer

    tokenizer = SubwordTokenizer.learn(ENGLISH * 20 + GERMAN * 20, 296)
    texts = ["the house is red", "Дом маленький", "der Baum ist grün €", ""]
    processor = spm.SentencePieceProcessor(model_proto=tokenizer.model_proto)
    ids = [i for text in texts for i in processor.encode(text)]
    reference = np.mean([processor.is_byte(i) or processor.is_unknown(i) for i in ids])
    assert 0.2 < reference < 1  # the Cyrillic and the euro sign are spelled in bytes
    assert init_from.unknown_piece_rate(tokenizer, texts) == pytest.approx(reference)
    assert init_from.unknown_piece_rate(tokenizer, ["the house"]) == 0.0


def write_tsv(path, english, german, repeat):
    path.write_text("".join(f"{e}\t{g}\n" for e, g in zip(english, german)) * repeat,
                    encoding="utf-8")
    return str(path)


def test_train_run_uses_the_source_vocabulary_and_warns_of_poor_coverage(tmp_path, caplog,
                                                                         monkeypatch, capsys):
    from keras_transformer import data
    from keras_transformer.tokenizer import SubwordTokenizer
    from keras_transformer.training import speed
    from keras_transformer.training.run import train_run

    source_data = data.DataConfig(
        dataset="files", train_data=write_tsv(tmp_path / "a.tsv", ENGLISH, GERMAN, 30),
        dev_data=write_tsv(tmp_path / "a_dev.tsv", ENGLISH, GERMAN, 1),
        data_dir=str(tmp_path / "data"), vocab_size=296, max_length=16, token_budget=128)
    train_run(source_data, train_config(tmp_path / "source", train_steps=2), preset="tiny",
              model_overrides=dict(max_length=17), dev_bleu_sentences=0, log=lambda line: None)
    # New text in another script: the source's vocabulary spells most of it byte by byte.
    russian = ["дом маленький", "кошка видит собаку", "старое дерево большое", "красный дом"]
    new_data = data.DataConfig(
        dataset="files", train_data=write_tsv(tmp_path / "b.tsv", russian, GERMAN, 30),
        dev_data=write_tsv(tmp_path / "b_dev.tsv", russian, GERMAN, 1),
        data_dir=str(tmp_path / "data"), vocab_size=304, max_length=64, token_budget=256)
    lines = []
    with caplog.at_level("WARNING"):
        train_run(new_data, train_config(tmp_path / "tuned", train_steps=1,
                                         init_from=str(tmp_path / "source")),
                  preset="tiny", model_overrides=dict(max_length=65), dev_bleu_sentences=0,
                  log=lines.append)
    source_vocab = (tmp_path / "source" / runs.VOCABULARY_FILE).read_bytes()
    assert (tmp_path / "tuned" / runs.VOCABULARY_FILE).read_bytes() == source_vocab
    run = runs.read_config(str(tmp_path / "tuned"))
    assert run["model"]["vocab_size"] == 296  # the source's, not --vocab_size=304
    rate = run[runs.INIT_FROM_KEY]["unknown_piece_rate"]
    assert rate > init_from.UNKNOWN_PIECE_WARNING
    assert f"{100 * rate:.2f}% of its subword pieces" in caplog.text
    (start,) = [line for line in lines if "init_from=" in line]  # after the held-out test note
    assert "unknown pieces" in start
    # A fine-tuned run's update is timed (a recipe sized to a time budget) with that vocabulary too.
    timed = {}
    monkeypatch.setattr(speed, "seconds_per_update", lambda config, batches, *args: timed.update(
        config=config, batches=list(batches)) or 0.5)
    assert speed.seconds_per_update_of_run(new_data, "tiny", dict(max_length=65),
                                           init_from=str(tmp_path / "source")) == 0.5
    assert timed["config"].vocab_size == 296
    source_tokenizer = SubwordTokenizer.load(str(tmp_path / "source" / runs.VOCABULARY_FILE))
    (source_ids, _), _ = next(iter(data.make_dataset(new_data, source_tokenizer, "train",
                                                     training=True, repeat=True)))
    (timed_ids, _), _ = timed["batches"][0]
    assert np.array_equal(timed_ids, source_ids)
    # The quickstart's data stage announces that vocabulary and learns none for the new corpus.
    assert not os.path.exists(new_data.effective_vocab_path)
    from absl import flags
    from absl.testing import flagsaver

    from trainers import quickstart

    with flagsaver.flagsaver():
        flags.FLAGS(["quickstart", f"--model_dir={tmp_path / 'tuned3'}",
                     f"--init_from={tmp_path / 'source'}"])
        quickstart.stage_data(dataclasses.replace(new_data, test_data=new_data.dev_data))
    assert not os.path.exists(new_data.effective_vocab_path)
    assert (f"vocabulary: 296 shared subwords (the --init_from model's) at "
            f"{tmp_path / 'source' / runs.VOCABULARY_FILE}") in capsys.readouterr().out
    # A vocabulary the data flags name explicitly must be the source's.
    other = tmp_path / "other.model"
    other.write_bytes(open(data.load_or_learn_tokenizer(new_data)[0].path, "rb").read())
    with pytest.raises(ValueError, match="vocab_path=.*not the vocabulary of the init_from run"):
        train_run(dataclasses.replace(new_data, vocab_path=str(other)),
                  train_config(tmp_path / "tuned2", init_from=str(tmp_path / "source")),
                  preset="tiny", model_overrides=dict(max_length=65), dev_bleu_sentences=0,
                  log=lines.append)
    assert json.loads((tmp_path / "tuned" / runs.SUMMARY_FILE).read_text())["steps"] == 1


def test_a_resumed_run_keeps_the_vocabulary_it_trained_with(tmp_path):
    """Its embeddings are of its own pieces: resumed with data whose vocabulary would be another
    (other text, here a changed training file), it trains on with its own copy, which stays as it
    was, rather than learning a new one of the same size and reading the checkpoint with it; a
    --vocab_path of other pieces is one error."""
    from keras_transformer import data
    from keras_transformer.tokenizer import SubwordTokenizer
    from keras_transformer.training.run import train_run

    common = dict(dataset="files", data_dir=str(tmp_path / "data"), vocab_size=296,
                  max_length=64, token_budget=256, hold_out=False)
    first = data.DataConfig(train_data=write_tsv(tmp_path / "a.tsv", ENGLISH, GERMAN, 30),
                            **common)
    train_run(first, train_config(tmp_path / "run", train_steps=1), preset="tiny",
              model_overrides=dict(max_length=65), dev_bleu_sentences=0, log=lambda line: None)
    own = (tmp_path / "run" / runs.VOCABULARY_FILE).read_bytes()
    other_english = ["my garden is green", "two birds sing songs", "we walk home slowly",
                     "winter comes quickly"]
    write_tsv(tmp_path / "a.tsv", other_english, GERMAN, 30)  # the same file, changed
    changed = first
    other, _ = data.load_or_learn_tokenizer(
        dataclasses.replace(changed, data_dir=str(tmp_path / "other_data")))
    assert other.model_proto != own  # what the changed data alone would train with
    lines = []
    summary = train_run(changed, train_config(tmp_path / "run", train_steps=2), preset="tiny",
                        model_overrides=dict(max_length=65), dev_bleu_sentences=0,
                        log=lines.append)
    assert (summary["start_step"], summary["steps"]) == (1, 2)
    assert (tmp_path / "run" / runs.VOCABULARY_FILE).read_bytes() == own
    with pytest.raises(ValueError, match=r"vocab_path=.* is not the vocabulary the run in .* "
                                         r"trained with"):
        train_run(dataclasses.replace(changed, vocab_path=other.path),
                  train_config(tmp_path / "run", train_steps=3), preset="tiny",
                  model_overrides=dict(max_length=65), dev_bleu_sentences=0, log=lines.append)
    assert SubwordTokenizer.load(str(tmp_path / "run" / runs.VOCABULARY_FILE)).model_proto == own


def test_a_resumed_run_is_resumed_with_the_source_it_started_from(tmp_path):
    """The same init_from again resumes (the source may be gone by now); another one, or one for
    a run that started from scratch, would be ignored by the resumed run: one error."""
    import tensorflow as tf

    from keras_transformer.training import init_from

    run = tmp_path / "run"
    tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(1.0)), str(run), 1).save()
    source = str(tmp_path / "gone")  # deleted since the run started from it
    runs.write_json(str(run / runs.CONFIG_FILE), {runs.INIT_FROM_KEY: {
        "given": source, "checkpoint": f"{source}/averaged/ckpt"}})
    init_from.check_resumed(str(run), source)
    init_from.check_resumed(str(tmp_path / "new"), str(tmp_path / "other"))  # a new run
    with pytest.raises(ValueError, match=rf"^init_from={tmp_path / 'other'}: the run in {run} "
                                         rf"started from {source} and resumes from its own "
                                         "checkpoints; a run from this model needs another "
                                         "--model_dir.$"):
        init_from.check_resumed(str(run), str(tmp_path / "other"))


def test_a_resume_from_another_folder_names_the_same_source_from_there(tmp_path, monkeypatch):
    """The record's source, named relative to the folder training ran in, is the same source
    named from another folder (``runs.recorded_path``); another source is refused there too."""
    import tensorflow as tf

    from keras_transformer.training import init_from

    trained_in, elsewhere = tmp_path / "project", tmp_path / "other"
    elsewhere.mkdir()
    for name in ("source", "another"):
        tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(1.0)),
                                   str(trained_in / name), 1).save()
        runs.write_json(str(trained_in / name / runs.CONFIG_FILE), {"model": TINY.to_dict()})
    run = tmp_path / "run"
    tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(1.0)), str(run), 1).save()
    monkeypatch.chdir(trained_in)
    runs.write_json(str(run / runs.CONFIG_FILE), {
        runs.WORKING_DIR_KEY: str(trained_in),
        runs.INIT_FROM_KEY: init_from.resolve("source").record()})
    monkeypatch.chdir(elsewhere)
    init_from.check_resumed(str(run), "../project/source")
    with pytest.raises(ValueError, match="the run in .* started from source and resumes"):
        init_from.check_resumed(str(run), "../project/another")


def test_a_fine_tuned_run_resumed_from_another_folder_keeps_its_source_as_found(source, tmp_path,
                                                                                 monkeypatch):
    """A resume from another folder records that folder as its working folder: the record of the
    source (named relative to the first folder) is carried as found from there, so that the
    same source named from the new folder still resumes it."""
    from keras_transformer.training import init_from

    trained_in, elsewhere = tmp_path / "project", tmp_path / "other"
    shutil.copytree(source["dir"], trained_in / "source")
    elsewhere.mkdir()
    tuned_dir = str(tmp_path / "tuned")
    monkeypatch.chdir(trained_in)
    Trainer(TINY, train_config(tuned_dir, train_steps=1, init_from="source"),
            run_info={runs.WORKING_DIR_KEY: str(trained_in)}).fit(other_batches)
    monkeypatch.chdir(elsewhere)
    init_from.check_resumed(tuned_dir, "../project/source")
    Trainer(TINY, train_config(tuned_dir, train_steps=2, init_from="../project/source"),
            run_info={runs.WORKING_DIR_KEY: str(elsewhere)}).fit(other_batches)
    record = runs.read_config(tuned_dir)[runs.INIT_FROM_KEY]
    assert record["given"] == "source"
    assert record["run_dir"] == str(trained_in / "source")
    assert record["checkpoint"].startswith(str(trained_in / "source") + os.sep)
    init_from.check_resumed(tuned_dir, "../project/source")
