"""Eq. (2): FFN(x) = max(0, x W1 + b1) W2 + b2."""

import numpy as np

from keras_transformer.layers import PositionwiseFeedForward


def test_feed_forward_is_equation_2_position_by_position():
    layer = PositionwiseFeedForward(d_model=8, d_ff=32)
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    y = np.asarray(layer(x))
    w1, b1, w2, b2 = layer.get_weights()
    np.testing.assert_allclose(y, np.maximum(0, x @ w1 + b1) @ w2 + b2, atol=1e-5)
    # "applied to each position separately and identically"
    np.testing.assert_allclose(np.asarray(layer(x[:, 3:4])), y[:, 3:4], atol=1e-6)
