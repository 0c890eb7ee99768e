"""Eq. (1) and multi-head attention (section 3.2), against numpy and keras.layers.MultiHeadAttention."""

import keras
import numpy as np
import pytest

from keras_transformer.layers import MultiHeadAttention, scaled_dot_product_attention
from keras_transformer.layers.masks import cache_step_mask, look_ahead_mask, padding_mask

RNG = np.random.default_rng(0)


def numpy_attention(q, k, v, mask):
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    scores = np.where(mask, scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return weights @ v, weights


def test_scaled_dot_product_attention_matches_equation_1_and_masks():
    q = RNG.normal(size=(2, 3, 5, 8)).astype("float32")
    k = RNG.normal(size=(2, 3, 7, 8)).astype("float32")
    v = RNG.normal(size=(2, 3, 7, 4)).astype("float32")
    ids = np.array([[4, 5, 6, 7, 0, 0, 0], [4, 5, 6, 7, 8, 9, 1]])
    mask = np.asarray(padding_mask(ids))
    outputs, weights = scaled_dot_product_attention(q, k, v, mask)
    expected_outputs, expected_weights = numpy_attention(q, k, v, mask)
    np.testing.assert_allclose(weights, expected_weights, atol=1e-6)
    np.testing.assert_allclose(outputs, expected_outputs, atol=1e-5)
    np.testing.assert_allclose(np.sum(weights, -1), 1.0, atol=1e-6)
    assert np.all(np.asarray(weights)[0, :, :, 4:] == 0.0)


def test_fully_masked_row_gives_finite_uniform_weights():
    q = k = v = np.ones((1, 1, 2, 4), "float32")
    outputs, weights = scaled_dot_product_attention(q, k, v, np.zeros((1, 1, 2, 2), bool))
    assert np.all(np.isfinite(outputs))
    np.testing.assert_allclose(weights, 0.5)


def copy_into_keras_attention(ours, theirs):
    """Our [d_model, h * d_k] projections are the per-head W_i stacked side by side."""
    h, d_k, d_v = ours.num_heads, ours.d_k, ours.d_v
    values = []
    for projection, depth in ((ours.query_projection, d_k), (ours.key_projection, d_k),
                              (ours.value_projection, d_v)):
        kernel, bias = projection.get_weights()
        values += [kernel.reshape(kernel.shape[0], h, depth), bias.reshape(h, depth)]
    kernel, bias = ours.output_projection.get_weights()
    values += [kernel.reshape(h, d_v, kernel.shape[1]), bias]
    theirs.set_weights(values)


@pytest.mark.parametrize("d_k,d_v", [(None, None), (4, 12)])
def test_multi_head_attention_equals_keras(d_k, d_v):
    ours = MultiHeadAttention(num_heads=4, d_model=32, d_k=d_k, d_v=d_v)
    query = RNG.normal(size=(2, 5, 32)).astype("float32")
    memory = RNG.normal(size=(2, 6, 32)).astype("float32")
    memory_ids = np.array([[3, 4, 5, 6, 7, 8], [3, 4, 5, 0, 0, 0]])
    mask = padding_mask(memory_ids)
    ours_out, ours_weights = ours(query, memory, attention_mask=mask, return_attention_weights=True)
    theirs = keras.layers.MultiHeadAttention(num_heads=4, key_dim=ours.d_k, value_dim=ours.d_v)
    theirs.build(query.shape, memory.shape)
    copy_into_keras_attention(ours, theirs)
    keras_mask = np.broadcast_to(np.asarray(mask)[:, 0], (2, 5, 6))
    theirs_out, theirs_weights = theirs(query, memory, attention_mask=keras_mask,
                                        return_attention_scores=True)
    np.testing.assert_allclose(ours_out, theirs_out, atol=1e-5)
    np.testing.assert_allclose(ours_weights, theirs_weights, atol=1e-6)


def keras_weight_gradients_as_ours(ours, gradients):
    """keras.layers.MultiHeadAttention's weight gradients, reshaped to our layers' variables."""
    shapes = [v.shape for p in (ours.query_projection, ours.key_projection, ours.value_projection,
                                ours.output_projection) for v in p.trainable_variables]
    return [np.reshape(g, shape) for g, shape in zip(gradients, shapes)]


@pytest.mark.parametrize("self_attention", [True, False])
@pytest.mark.parametrize("d_k,d_v", [(None, None), (4, 12)])
@pytest.mark.parametrize("dtype", ["float32", "mixed_bfloat16"])
def test_attention_and_its_gradients_equal_keras(self_attention, d_k, d_v, dtype):
    """Q, K and V are projected by one matmul of the kernels side by side (K and V for the
    memory): the same outputs and gradients (inputs and every weight) as Keras' layer."""
    import tensorflow as tf

    ours = MultiHeadAttention(num_heads=4, d_model=32, d_k=d_k, d_v=d_v, dtype=dtype)
    query = tf.constant(RNG.normal(size=(2, 5, 32)).astype("float32"))
    memory = query if self_attention else tf.constant(RNG.normal(size=(2, 6, 32)).astype("float32"))
    ids = np.array([[3, 4, 5, 6, 7, 8], [3, 4, 5, 0, 0, 0]])[:, :memory.shape[1]]
    mask = np.asarray(padding_mask(ids)) & (np.asarray(look_ahead_mask(5)) if self_attention
                                            else True)
    ours(query, None if self_attention else memory, attention_mask=mask)
    theirs = keras.layers.MultiHeadAttention(num_heads=4, key_dim=ours.d_k, value_dim=ours.d_v,
                                             dtype=dtype)
    theirs.build(query.shape, memory.shape)
    copy_into_keras_attention(ours, theirs)
    keras_mask = np.broadcast_to(mask[:, 0], (2, 5, memory.shape[1]))

    with tf.GradientTape(persistent=True) as tape:
        tape.watch([query, memory])
        y_ours = tf.cast(ours(query, None if self_attention else memory, attention_mask=mask),
                         tf.float32)
        y_theirs = tf.cast(theirs(query, memory, attention_mask=keras_mask), tf.float32)
        loss_ours, loss_theirs = (tf.reduce_sum(y * tf.sin(y)) for y in (y_ours, y_theirs))
    inputs = [query] if self_attention else [query, memory]
    g_ours = tape.gradient(loss_ours, inputs + ours.trainable_variables)
    g_theirs = tape.gradient(loss_theirs, inputs + theirs.trainable_variables)
    g_theirs = g_theirs[:len(inputs)] + keras_weight_gradients_as_ours(ours, g_theirs[len(inputs):])
    tolerance = 1e-5 if dtype == "float32" else 3e-2
    np.testing.assert_allclose(y_ours, y_theirs, atol=tolerance * np.abs(y_theirs).max())
    names = [v.path for v in ours.trainable_variables]
    # The key bias adds q . b_k to every score of a row alike, which the softmax cancels: its
    # gradient is zero in exact arithmetic, so both layers' are rounding noise, held near zero
    # at the scale of the other gradients rather than compared with each other.
    key_bias = len(inputs) + names.index(f"{ours.name}/key/bias")
    scale = max(1.0, max(np.abs(np.asarray(g)).max() for g in g_theirs))
    for g in (g_ours[key_bias], g_theirs[key_bias]):
        np.testing.assert_allclose(np.asarray(g), 0.0, atol=tolerance * scale)
    for i, (a, b) in enumerate(zip(g_ours, g_theirs)):
        if i != key_bias:
            b = np.asarray(b)
            np.testing.assert_allclose(np.asarray(a), b, atol=tolerance * max(1.0, np.abs(b).max()))


def test_incremental_self_attention_with_fixed_cache_equals_causal_attention():
    layer = MultiHeadAttention(num_heads=2, d_model=16)
    x = RNG.normal(size=(3, 5, 16)).astype("float32")
    full = np.asarray(layer(x, attention_mask=look_ahead_mask(5)))
    max_length = 8  # longer than the sequence: unused slots must stay invisible
    cache = layer.initial_cache(3, max_length)
    for i in range(5):
        step, cache = layer.self_attention_step(x[:, i], cache, i, cache_step_mask(i, max_length),
                                                grow_cache=False)
        np.testing.assert_allclose(step, full[:, i], atol=1e-5)
        assert cache["key"].shape == (3, 2, max_length, 8)
    assert np.all(np.asarray(cache["key"])[:, :, 5:] == 0)


def test_incremental_self_attention_with_growing_cache_equals_causal_attention():
    layer = MultiHeadAttention(num_heads=2, d_model=16)
    x = RNG.normal(size=(3, 5, 16)).astype("float32")
    full = np.asarray(layer(x, attention_mask=look_ahead_mask(5)))
    cache = layer.initial_cache(3)
    for i in range(5):
        step, cache = layer.self_attention_step(x[:, i], cache, i, grow_cache=True)
        np.testing.assert_allclose(step, full[:, i], atol=1e-5)
        assert cache["key"].shape == (3, 2, i + 1, 8)


def test_memory_attention_serves_several_rows_per_sentence():
    """Beams of one sentence (adjacent rows) attend to its keys without copies of them."""
    layer = MultiHeadAttention(num_heads=2, d_model=16)
    beams = 3
    query = RNG.normal(size=(2 * beams, 1, 16)).astype("float32")
    memory = RNG.normal(size=(2, 4, 16)).astype("float32")
    mask = padding_mask(np.array([[3, 4, 5, 6], [3, 4, 0, 0]]))
    direct = layer(query, np.repeat(memory, beams, axis=0), attention_mask=np.repeat(mask, beams, axis=0))
    memory_cache = layer.compute_cache(memory)
    cached = layer.memory_attention(query[:, 0], memory_cache, mask)
    np.testing.assert_allclose(cached, np.asarray(direct)[:, 0], atol=1e-5)
    assert memory_cache["key"].shape[0] == 2
    # One row per sentence: the same as the direct call without beams.
    single = layer.memory_attention(query[::beams, 0], memory_cache, mask)
    np.testing.assert_allclose(single, np.asarray(layer(query[::beams], memory, attention_mask=mask))[:, 0],
                               atol=1e-5)


def test_one_key_attention_warns_nothing():
    """The first cached decoding step attends over one key: weight 1, and no warning on the
    user's console (keras.ops.softmax warns about any softmax over an axis of size 1)."""
    import warnings

    rng = np.random.default_rng(0)
    query, key, value = (rng.normal(size=(2, 3, 1, 4)).astype("float32") for _ in range(3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        outputs, weights = scaled_dot_product_attention(query, key, value)
    np.testing.assert_allclose(np.asarray(weights), 1.0)
    np.testing.assert_allclose(np.asarray(outputs), value, rtol=1e-6)


def test_config_round_trip():
    layer = MultiHeadAttention(num_heads=4, d_model=32, d_k=4, d_v=12, attention_dropout=0.1)
    clone = MultiHeadAttention.from_config(layer.get_config())
    assert (clone.num_heads, clone.d_k, clone.d_v, clone.attention_dropout) == (4, 4, 12, 0.1)


def test_heads_must_divide_d_model():
    with pytest.raises(ValueError, match="d_model=30 is not divisible by num_heads=4"):
        MultiHeadAttention(num_heads=4, d_model=30)


def keras_shaped_masks():
    """Keras's [batch, T, S] mask with batch == heads, where a mask broadcast without a heads
    axis would still fit the scores, only along the wrong axes; and the same mask as an int
    0/1 array, as a [batch, 1, T, S] one, and as a float64 score bias."""
    allowed = RNG.random((4, 5, 6)) < 0.6
    allowed[..., 0] = True  # a row with every key masked would make both layers' outputs noise
    bias = np.where(allowed, 0.0, -1e9)[:, None]
    return allowed, {"bool": allowed, "int": allowed.astype("int32"),
                     "int with heads axis": allowed[:, None].astype("int32"), "float64 bias": bias}


@pytest.mark.parametrize("form", ["bool", "int", "int with heads axis", "float64 bias"])
def test_keras_shaped_and_int_masks_equal_keras(form):
    ours = MultiHeadAttention(num_heads=4, d_model=32)
    query = RNG.normal(size=(4, 5, 32)).astype("float32")
    memory = RNG.normal(size=(4, 6, 32)).astype("float32")
    allowed, masks = keras_shaped_masks()
    ours_out, ours_weights = ours(query, memory, attention_mask=masks[form],
                                  return_attention_weights=True)
    theirs = keras.layers.MultiHeadAttention(num_heads=4, key_dim=ours.d_k)
    theirs.build(query.shape, memory.shape)
    copy_into_keras_attention(ours, theirs)
    theirs_out, theirs_weights = theirs(query, memory, attention_mask=allowed,
                                        return_attention_scores=True)
    np.testing.assert_allclose(ours_out, theirs_out, atol=1e-5)
    np.testing.assert_allclose(ours_weights, theirs_weights, atol=1e-6)


def test_a_key_padding_mask_masks_keys_of_each_sentence():
    """[batch, S], the Keras mask of a padded sequence, with batch == query length (where it
    would broadcast over the queries instead): the same as padding_mask's [batch, 1, 1, S]."""
    layer = MultiHeadAttention(num_heads=2, d_model=16)
    query = RNG.normal(size=(3, 3, 16)).astype("float32")
    memory = RNG.normal(size=(3, 4, 16)).astype("float32")
    ids = np.array([[3, 4, 5, 6], [3, 4, 0, 0], [3, 0, 0, 0]])
    np.testing.assert_allclose(layer(query, memory, attention_mask=ids != 0),
                               layer(query, memory, attention_mask=padding_mask(ids)), atol=1e-6)


def test_a_mask_of_too_many_axes_is_refused():
    layer = MultiHeadAttention(num_heads=2, d_model=16)
    x = np.ones((2, 3, 16), "float32")
    with pytest.raises(ValueError, match=r"attention_mask must have shape .*got shape \(2, 1, 1, 3, 3\)"):
        layer(x, attention_mask=np.ones((2, 1, 1, 3, 3), bool))


@pytest.mark.parametrize("arguments,message", [
    (dict(num_heads=0, d_model=32), "num_heads must be a positive integer; got 0"),
    (dict(num_heads=-4, d_model=32), "num_heads must be a positive integer; got -4"),
    (dict(num_heads=4, d_model=32, d_k=0), "d_k must be a positive integer; got 0"),
])
def test_sizes_must_be_positive_integers(arguments, message):
    with pytest.raises(ValueError, match=message):
        MultiHeadAttention(**arguments)
