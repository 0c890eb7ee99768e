"""Checkpoints written by an earlier version restore into today's model, value for value.

A run's checkpoints hold the model's variables in the model's own order
(``weights.model_checkpoint``), so renaming, reordering or regrouping the sub-layers of a layer would
silently load weights into the wrong places, or fail to restore at all. tests/data/checkpoint_2026_11 holds checkpoints and
teacher-forced logits that the code of commit e4eea39 wrote (see make.py there)."""

import json
import os

import numpy as np
import pytest

FIXTURES = os.path.join(os.path.dirname(__file__), "data", "checkpoint_2026_11")


@pytest.mark.parametrize("name", ["post_ln_shared", "pre_ln_learned_untied"])
def test_an_earlier_versions_checkpoint_gives_its_logits(name):
    import keras_transformer as kt
    from keras_transformer import weights

    folder = os.path.join(FIXTURES, name)
    with open(os.path.join(folder, "config.json")) as f:
        fields = json.load(f)
    model = kt.Transformer(kt.TransformerConfig.from_preset("tiny", **fields))
    saved = np.load(os.path.join(folder, "logits.npz"))
    fresh = np.asarray(model((saved["source"], saved["target"])))
    assert np.abs(fresh - saved["logits"]).max() > 1e-3  # the fresh weights differ: a real restore
    weights.restore_model(model, os.path.join(folder, "ckpt"))
    # float32 rounding differs between CPU kinds (oneDNN picks other kernels on AMX than on AVX2)
    # by about one unit in the last place; a wrong restore is off by far more than that.
    np.testing.assert_allclose(np.asarray(model((saved["source"], saved["target"]))), saved["logits"],
                               atol=1e-5)
