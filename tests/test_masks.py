"""Padding and look-ahead masks (section 3.2.3), by shape and value."""

import numpy as np

from keras_transformer.layers import decoder_self_attention_mask, look_ahead_mask, padding_mask
from keras_transformer.layers.masks import cache_step_mask, causal_mask, key_padding_mask


def test_padding_mask_marks_real_tokens():
    ids = np.array([[5, 6, 0, 0], [7, 0, 0, 0]])
    mask = np.asarray(padding_mask(ids))
    assert mask.shape == (2, 1, 1, 4)
    np.testing.assert_array_equal(mask[:, 0, 0], ids != 0)


def test_look_ahead_mask_is_lower_triangular():
    mask = np.asarray(look_ahead_mask(4))
    assert mask.shape == (1, 1, 4, 4)
    for i in range(4):
        for j in range(4):
            assert mask[0, 0, i, j] == (j <= i)


def test_decoder_mask_combines_both():
    ids = np.array([[2, 5, 6, 0]])
    mask = np.asarray(decoder_self_attention_mask(ids))
    assert mask.shape == (1, 1, 4, 4)
    expected = np.tril(np.ones((4, 4), bool)) & (ids[0] != 0)[None, :]
    np.testing.assert_array_equal(mask[0, 0], expected)


def test_a_keras_mask_gives_the_masks_of_the_ids():
    """A Keras mask (True at real tokens, what Embedding(mask_zero=True) sets) gives the masks
    the ids give; without one, the decoder's mask is the look-ahead mask alone."""
    ids = np.array([[2, 5, 6, 0], [2, 0, 0, 0]])
    real = ids != 0
    np.testing.assert_array_equal(np.asarray(key_padding_mask(real)), real[:, None, None, :])
    expected = np.tril(np.ones((4, 4), bool))[None, None] & real[:, None, None, :]
    np.testing.assert_array_equal(np.asarray(causal_mask(4, real)), expected)
    np.testing.assert_array_equal(np.asarray(causal_mask(4)), np.tril(np.ones((1, 1, 4, 4), bool)))


def test_cache_step_mask_shows_written_slots_only():
    np.testing.assert_array_equal(np.asarray(cache_step_mask(2, 5))[0, 0, 0],
                                  [True, True, True, False, False])
