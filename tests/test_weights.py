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
