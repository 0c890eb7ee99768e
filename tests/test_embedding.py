"""Section 3.4 (shared embeddings x sqrt(d_model), tied softmax) and 3.5 (positional encodings)."""

import math

import numpy as np
import pytest

from keras_transformer.layers import LearnedPositionalEmbedding, SharedEmbedding, positional_encoding


@pytest.mark.parametrize("d_model", [512, 7])
def test_positional_encoding_is_the_papers_formula(d_model):
    table = np.asarray(positional_encoding(60, d_model))
    assert table.shape == (60, d_model)
    for pos in (0, 1, 17, 59):
        for channel in range(d_model):
            i = channel // 2
            angle = pos / 10000 ** (2 * i / d_model)
            expected = math.sin(angle) if channel % 2 == 0 else math.cos(angle)
            assert table[pos, channel] == pytest.approx(expected, abs=2e-5), (pos, channel)


def test_positional_encoding_offset_equals_slice():
    np.testing.assert_allclose(positional_encoding(3, 16, start=40),
                               np.asarray(positional_encoding(43, 16))[40:], atol=1e-6)


def test_shared_embedding_scales_and_ties_softmax():
    layer = SharedEmbedding(vocab_size=11, d_model=16)
    layer.build()
    matrix = layer.get_weights()[0]
    ids = np.array([[1, 4, 10]])
    np.testing.assert_allclose(layer(ids), matrix[ids] * 4.0, rtol=1e-6)
    hidden = np.random.default_rng(0).normal(size=(1, 3, 16)).astype("float32")
    np.testing.assert_allclose(layer.project(hidden), hidden @ matrix.T, rtol=1e-5, atol=1e-5)


def test_learned_positions_slice_the_table():
    layer = LearnedPositionalEmbedding(max_length=10, d_model=4)
    layer.build()
    np.testing.assert_array_equal(layer(np.zeros((2, 3)), start=2), layer.get_weights()[0][2:5])
