"""keras_transformer/weights.py: a model built in each precision keeps float32 variables, a checkpoint
holds every variable (not only the embeddings Keras 3 shows tf.train.Checkpoint) and restores them
value for value, and a missing checkpoint or one of another architecture is one ValueError line
naming it."""

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer import weights

TINY = kt.TransformerConfig.from_preset("tiny", vocab_size=16)


def test_each_precision_computes_in_its_dtype_and_keeps_float32_variables():
    assert weights.PRECISION_POLICIES == {"float32": "float32", "bfloat16": "mixed_bfloat16",
                                          "float16": "mixed_float16"}
    for precision in weights.PRECISION_POLICIES:
        model = weights.build_model(TINY, precision)
        assert model.compute_dtype == precision
        floating = [v for v in model.variables if tf.as_dtype(v.dtype).is_floating]
        assert floating and {v.dtype for v in floating} == {"float32"}, precision


def test_a_checkpoint_restores_every_variable_value_for_value(tmp_path):
    saved = weights.build_model(TINY)
    # Values no initialiser gives (biases start at 0, layer-norm scales at 1): each variable the
    # checkpoint missed would keep its fresh value and differ.
    rng = np.random.default_rng(0)
    floating = [v for v in saved.variables if tf.as_dtype(v.dtype).is_floating]
    assert len(floating) > 20  # the encoder's and decoder's layers, not only the embeddings
    for variable in floating:
        variable.assign(rng.normal(size=variable.shape).astype(np.float32))
    # A training checkpoint holds more than the model; restoring reads the model's part only.
    prefix = weights.model_checkpoint(saved, step=tf.Variable(7, dtype=tf.int64)).write(
        str(tmp_path / "ckpt-7"))
    restored = weights.build_model(TINY)
    weights.restore_model(restored, prefix)
    for mine, theirs in zip(restored.variables, saved.variables):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy(), err_msg=mine.path)


def test_a_missing_checkpoint_is_one_line_naming_it(tmp_path):
    path = str(tmp_path / "ckpt-3")
    with pytest.raises(ValueError) as raised:
        weights.restore_model(weights.build_model(TINY), path)
    assert str(raised.value) == f"Checkpoint {path!r} does not exist (no {path}.index)."


@pytest.mark.parametrize("config_path", [None, "runs/other/config.json"])
def test_a_checkpoint_of_another_architecture_is_one_line_naming_it(tmp_path, config_path):
    prefix = weights.model_checkpoint(weights.build_model(TINY)).write(str(tmp_path / "ckpt"))
    wider = weights.build_model(kt.TransformerConfig.from_preset("tiny", vocab_size=16, d_model=64))
    with pytest.raises(ValueError) as raised:
        weights.restore_model(wider, prefix, config_path=config_path)
    message = str(raised.value)
    assert "\n" not in message
    described = f" of {config_path}" if config_path else ""
    assert message.startswith(f"checkpoint {prefix} does not fit the model{described}: ")
    assert "shape" in message  # TensorFlow's reason: the variables' shapes differ


# What TensorFlow logs, one line per value left unread, when a restore's status is deleted
# without expect_partial() (a restore that failed half-way never returned it).
UNREAD_WARNINGS = ("could not be found in the restored object", "Unresolved object",
                   "deleted with unrestored values")


def _training_checkpoint(config, prefix):
    """A checkpoint as a training run writes it: the model, Adam's slots, the step."""
    import keras

    model = weights.build_model(config)
    optimizer = keras.optimizers.Adam()
    optimizer.build(model.trainable_variables)
    return weights.model_checkpoint(model, optimizer=optimizer,
                                    step=tf.Variable(3, dtype=tf.int64)).write(prefix)


def _damage_data(prefix):
    """Flips the first bytes of the checkpoint's data: its index still says it fits."""
    (data,) = tf.io.gfile.glob(prefix + ".data-*")
    with open(data, "r+b") as stream:
        head = stream.read(2000)
        stream.seek(0)
        stream.write(bytes(b ^ 0xFF for b in head))


@pytest.mark.parametrize("case", ["other_vocabulary", "damaged_data"])
def test_a_training_checkpoint_that_does_not_fit_is_one_line(tmp_path, caplog, case):
    import gc

    vocab = 24 if case == "other_vocabulary" else 16
    prefix = _training_checkpoint(kt.TransformerConfig.from_preset("tiny", vocab_size=vocab),
                                  str(tmp_path / "ckpt-3"))
    if case == "damaged_data":
        _damage_data(prefix)
    model = weights.build_model(TINY)
    caplog.set_level("WARNING")
    with pytest.raises(ValueError) as raised:
        weights.restore_model(model, prefix, config_path="runs/tiny/config.json")
    gc.collect()  # a restore status left behind logs its warnings when it is deleted
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"checkpoint {prefix} does not fit the model of "
                              "runs/tiny/config.json: ")
    if case == "other_vocabulary":
        assert "shape (24, 32) in the checkpoint, (16, 32) in the model" in message
        # refused from the index, before a restore whose status would log a line per value
        logged = [record.getMessage() for record in caplog.records]
        assert not [line for line in logged if any(w in line for w in UNREAD_WARNINGS)], logged[:5]


def test_a_checkpoint_with_other_layers_is_refused_before_restoring(tmp_path):
    prefix = weights.model_checkpoint(weights.build_model(
        kt.TransformerConfig.from_preset("tiny", vocab_size=16, num_layers=3))).write(
        str(tmp_path / "ckpt"))
    model = weights.build_model(TINY)
    before = [v.numpy() for v in model.variables]
    with pytest.raises(ValueError, match=r"does not fit the model: it holds \d+ model variables, "
                                         r"the model has \d+$"):
        weights.restore_model(model, prefix)
    for value, variable in zip(before, model.variables):  # nothing of it was restored
        np.testing.assert_array_equal(value, variable.numpy())


def test_averaging_a_checkpoint_of_another_model_is_one_line_without_warnings(tmp_path):
    """``trainers.average_checkpoints`` over the checkpoints of two runs of other vocabularies
    (as tests/test_bad_inputs.py runs a command, with TensorFlow's log level as the user has it):
    status 1, nothing written, and stderr ends with the one line naming the checkpoint, with no
    TensorFlow warning per value the refused checkpoint held."""
    import os
    import subprocess
    import sys

    from keras_transformer.training import Trainer, TrainingConfig

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    prefixes = {}
    for name, vocab in (("run", 16), ("other", 24)):
        trainer = Trainer(kt.TransformerConfig.from_preset("tiny", vocab_size=vocab, max_length=24),
                          TrainingConfig(model_dir=str(tmp_path / name), train_steps=1),
                          run_info={"vocab_path": str(tmp_path / "vocab.model"),
                                    "data": {"dataset": "files"}})
        trainer._write_run_config()
        prefixes[name] = trainer.checkpointer.save(1)
    output = tmp_path / "averaged" / "ckpt"
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    env["PYTHONPATH"] = root
    result = subprocess.run(
        [sys.executable, "-m", "trainers.average_checkpoints", f"--model_dir={tmp_path / 'run'}",
         f"--checkpoints={prefixes['run']},{prefixes['other']}", f"--output={output}"],
        cwd=root, env=env, capture_output=True, timeout=300, stdin=subprocess.DEVNULL)
    stderr = result.stderr.decode("utf-8", "replace")
    lines = stderr.strip().splitlines()
    assert result.returncode == 1, stderr[-3000:]
    assert lines[-1].startswith(f"average_checkpoints: error: checkpoint {prefixes['other']} "
                                "does not fit the model: "), stderr[-3000:]
    assert "(24, 32) in the checkpoint, (16, 32) in the model" in lines[-1]
    flooding = [line for line in lines if any(w in line for w in UNREAD_WARNINGS)]
    assert not flooding, f"{len(flooding)} warning lines, e.g. {flooding[:3]}"
    assert not os.path.exists(output.parent)
