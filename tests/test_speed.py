"""training.speed: the seconds per update it reports are the median of the timed updates only (the
first ones, which compile each batch shape, left out; a later trace an outlier), each a real
update of the model; the run's
timing measures the model and the training batches that ``training.run.train_run`` would use."""

import numpy as np
import pytest

from tests import toy

VOCAB = 24


def batches(count):
    return [toy.toy_batch(i, task="reverse", vocab_size=VOCAB, batch_size=4, min_length=2,
                          max_length=5 + i % 3) for i in range(count)]


def test_the_untimed_updates_are_left_out_and_the_timed_ones_median_reported(monkeypatch):
    from keras_transformer.config import TransformerConfig
    from keras_transformer.training import speed
    from keras_transformer.training.step import TrainStep

    # A clock that each update moves on by its own cost: compiling costs far more than updating,
    # and a shape the untimed batches lacked is traced again among the timed ones (the 40).
    costs = [100.0, 50.0, 25.0] + [1.0, 2.0, 40.0, 3.0, 2.5]
    assert len(costs) > speed.UNTIMED == 3
    clock, seen, losses = [0.0], [], []
    update = TrainStep.step_on_batches

    def timed_update(self, step_batches, votes=None):
        sums = update(self, step_batches, votes)
        losses.append(float(sums["loss_sum"]) / float(sums["target_tokens"]))
        clock[0] += costs[len(seen)]
        seen.append(step_batches[0])
        return sums

    monkeypatch.setattr(TrainStep, "step_on_batches", timed_update)
    monkeypatch.setattr(speed.time, "perf_counter", lambda: clock[0])
    given = batches(len(costs))
    config = TransformerConfig.from_preset("tiny", vocab_size=VOCAB, max_length=16)
    seconds = speed.seconds_per_update(config, given)
    assert seconds == pytest.approx(2.5)  # not the mean, 9.7: the trace is no update's cost
    # every batch once, in order, each a real update: repeating the first batch's shape, the
    # loss moves (the optimizer changed the weights)
    assert len(seen) == len(given)
    for used, batch in zip(seen, given):
        np.testing.assert_array_equal(used[1].numpy(), batch[1].numpy())
    assert len(set(losses)) == len(losses)
    with pytest.raises(ValueError, match="more than 3 batches"):
        speed.seconds_per_update(config, given[:speed.UNTIMED])


def test_the_run_is_timed_on_its_own_model_and_first_training_batches(monkeypatch, tmp_path):
    from keras_transformer import data
    from keras_transformer.config import TransformerConfig
    from keras_transformer.training import speed

    pairs = [(f"word {i} and {i % 7}", f"wort {i} und {i % 7}") for i in range(300)]
    train = tmp_path / "train.tsv"
    train.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    config = data.DataConfig(dataset="files", train_data=str(train), data_dir=str(tmp_path),
                             vocab_size=320, token_budget=64, max_length=16)
    measured = {}

    def seconds_per_update(model_config, timed, mixed_precision, jit_compile):
        measured.update(config=model_config, batches=list(timed), precision=mixed_precision,
                        jit_compile=jit_compile)
        return 0.25

    monkeypatch.setattr(speed, "seconds_per_update", seconds_per_update)
    assert speed.seconds_per_update_of_run(config, "tiny", {"d_model": 48, "num_heads": 2},
                                           "bfloat16", jit_compile=True) == 0.25
    tokenizer, _ = data.load_or_learn_tokenizer(config)
    # the model train_run builds: as many positions as the data's longest examples need
    assert measured["config"] == TransformerConfig.from_preset(
        "tiny", vocab_size=tokenizer.vocab_size, d_model=48, num_heads=2, max_length=17)
    assert (measured["precision"], measured["jit_compile"]) == ("bfloat16", True)
    # the training pipeline's first batches (shuffled with the run's seed), as many as timed
    expected = list(data.make_dataset(config, tokenizer, "train", training=True, repeat=True)
                    .take(speed.UNTIMED + speed.TIMED))
    assert len(measured["batches"]) == len(expected)
    for got, want in zip(measured["batches"], expected):
        np.testing.assert_array_equal(got[0][0].numpy(), want[0][0].numpy())
