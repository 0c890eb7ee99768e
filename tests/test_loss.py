"""Label-smoothed cross-entropy (section 5.4) against independent computations."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.layers import cpu_kernels
from keras_transformer.training import loss as loss_module
from keras_transformer.training.loss import (LabelSmoothedCrossEntropy,
                                             label_smoothed_cross_entropy, loss_accuracy_and_nll,
                                             loss_and_accuracy, projected_loss_and_accuracy,
                                             token_accuracy_counts)


def numpy_reference(labels, logits, eps, pad_id=0):
    """Szegedy et al.: q' = (1 - eps) onehot + eps / K; loss = -sum_k q'(k) log p(k)."""
    k = logits.shape[-1]
    shifted = logits - logits.max(-1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    total, count = 0.0, 0
    for b in range(labels.shape[0]):
        for t in range(labels.shape[1]):
            if labels[b, t] == pad_id:
                continue
            q = np.full(k, eps / k)
            q[labels[b, t]] += 1.0 - eps
            total += -(q * log_p[b, t]).sum()
            count += 1
    return total, count


@pytest.fixture(autouse=True, params=["cpu_kernel", "tensorflow_ops"])
def softmax_ops(request, monkeypatch):
    """Every test twice: with the loss's softmax from our CPU kernel (cpu_kernels.cc) and from
    TensorFlow's ops, which the loss uses where the kernel is not built and under XLA."""
    if request.param == "cpu_kernel":
        request.getfixturevalue("cpu_kernels_built")
    else:
        monkeypatch.setattr(cpu_kernels, "ops", lambda: None)
    return request.param


@pytest.fixture(scope="module")
def batch():
    rng = np.random.default_rng(3)
    logits = rng.normal(scale=3.0, size=(3, 5, 11)).astype(np.float32)
    labels = rng.integers(1, 11, size=(3, 5)).astype(np.int32)
    labels[0, 3:] = 0
    labels[2, 1:] = 0
    return labels, logits


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_matches_numpy(batch, eps):
    labels, logits = batch
    loss_sum, tokens = label_smoothed_cross_entropy(labels, logits, eps)
    want_sum, want_count = numpy_reference(labels.astype(np.int64), logits.astype(np.float64), eps)
    assert float(tokens) == want_count == 9
    assert float(loss_sum) == pytest.approx(want_sum, rel=1e-5)


def test_matches_keras_categorical_crossentropy(batch):
    labels, logits = batch
    mask = labels != 0
    keras_loss = keras.losses.CategoricalCrossentropy(
        from_logits=True, label_smoothing=0.1, reduction="sum")
    want = keras_loss(tf.one_hot(labels[mask], 11), logits[mask])
    got, _ = label_smoothed_cross_entropy(labels, logits, 0.1)
    assert float(got) == pytest.approx(float(want), rel=1e-5)


def test_padding_positions_do_not_count(batch):
    labels, logits = batch
    changed = logits.copy()
    changed[labels == 0] = 1e4  # garbage where the target is padding
    a = label_smoothed_cross_entropy(labels, logits, 0.1)
    b = label_smoothed_cross_entropy(labels, changed, 0.1)
    assert float(a[0]) == pytest.approx(float(b[0]))


def test_bfloat16_logits_are_computed_in_float32(batch):
    labels, logits = batch
    loss_sum, _ = label_smoothed_cross_entropy(labels, tf.cast(logits, tf.bfloat16), 0.1)
    assert loss_sum.dtype == tf.float32
    rounded = tf.cast(tf.cast(logits, tf.bfloat16), tf.float64).numpy()
    want, _ = numpy_reference(labels, rounded, 0.1)
    assert float(loss_sum) == pytest.approx(want, rel=1e-4)


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("jit_compile", [False, True])
def test_gradient_is_softmax_minus_smoothed_target(batch, eps, jit_compile):
    """The hand-written gradient against its definition: d loss / d z = softmax(z) - q' at real
    tokens, 0 at padding, times the upstream gradient (here 2.5)."""
    labels, logits = batch

    @tf.function(jit_compile=jit_compile)
    def gradient(z):
        with tf.GradientTape() as tape:
            tape.watch(z)
            loss_sum, _ = label_smoothed_cross_entropy(labels, z, eps)
            objective = 2.5 * loss_sum
        return tape.gradient(objective, z)

    got = gradient(tf.constant(logits)).numpy()
    z = logits.astype(np.float64)
    softmax = np.exp(z - z.max(-1, keepdims=True))
    softmax /= softmax.sum(-1, keepdims=True)
    k = z.shape[-1]
    q = np.full(z.shape, eps / k)
    np.put_along_axis(q, labels[..., None].astype(np.int64),
                      1.0 - eps + eps / k, axis=-1)
    want = 2.5 * (softmax - q) * (labels != 0)[..., None]
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_loss_and_accuracy_in_one_pass(batch):
    """The accuracy the training step reads from the loss's pass equals the arg-max count
    (no ties in this batch), and the loss is the same as label_smoothed_cross_entropy's."""
    labels, logits = batch
    labels = labels.copy()
    labels[1, ::2] = logits[1, ::2].argmax(-1)  # some right answers (all real tokens)
    loss_sum, tokens, correct = loss_and_accuracy(labels, logits, 0.1)
    mask = labels != 0
    assert float(correct) == ((logits.argmax(-1) == labels) & mask).sum() == 3
    assert float(tokens) == mask.sum()
    want, _ = numpy_reference(labels, logits.astype(np.float64), 0.1)
    assert float(loss_sum) == pytest.approx(want, rel=1e-5)


def test_nll_from_the_same_pass_is_the_unsmoothed_loss(batch):
    """The evaluation's negative log-likelihood comes with the smoothed loss from one pass: it is
    the eps = 0 loss of the numpy reference, while the smoothed loss stays eps = 0.3's."""
    labels, logits = batch
    # Labels with the largest logits, so that smoothing clearly raises the loss above the nll.
    labels = np.where(labels != 0, logits.argmax(-1), 0).astype(np.int32)
    loss_sum, tokens, _, nll_sum = loss_accuracy_and_nll(labels, logits, 0.3)
    want_nll, _ = numpy_reference(labels, logits.astype(np.float64), 0.0)
    want_loss, _ = numpy_reference(labels, logits.astype(np.float64), 0.3)
    assert float(nll_sum) == pytest.approx(want_nll, rel=1e-5)
    assert float(loss_sum) == pytest.approx(want_loss, rel=1e-5)
    assert float(loss_sum) > 1.5 * float(nll_sum)


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("jit_compile, real_tokens_only", [(False, False), (True, False),
                                                            (False, True)])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_projection_inside_the_loss_is_the_loss_of_the_projected_logits(eps, jit_compile,
                                                                        real_tokens_only, dtype):
    """The training step's loss over decoder states and the tied embeddings: the same sums, and
    the same gradients for the states and the embeddings, as the loss of the logits ``states @
    embeddings^T`` differentiated op by op (float64 numpy: softmax(z) - q' through the product),
    whether the padding's rows are projected or left out first (their gradient zero either way).
    bfloat16 rounds the inputs of both products, so its bound is bfloat16's."""
    rng = np.random.default_rng(7)
    states = rng.normal(size=(3, 5, 6)).astype(np.float32)
    table = rng.normal(scale=0.8, size=(11, 6)).astype(np.float32)
    labels = rng.integers(1, 11, size=(3, 5)).astype(np.int32)
    labels[0, 3:] = 0
    labels[2, 1:] = 0
    labels[1, 0] = (states[1, 0] @ table.T).argmax()  # one right answer

    @tf.function(jit_compile=jit_compile)
    def run(states, table):
        with tf.GradientTape() as tape:
            tape.watch([states, table])
            sums = projected_loss_and_accuracy(labels, tf.cast(states, dtype), table, eps,
                                               real_tokens_only=real_tokens_only)
            objective = 2.5 * sums[0]
        return sums, tape.gradient(objective, [states, table])

    (loss_sum, tokens, correct), (states_grad, table_grad) = run(tf.constant(states),
                                                                 tf.constant(table))
    rounded = lambda x: tf.cast(tf.cast(x, dtype), tf.float64).numpy()
    z = rounded(states) @ rounded(table).T
    want_loss, want_tokens = numpy_reference(labels, z, eps)
    softmax = np.exp(z - z.max(-1, keepdims=True))
    softmax /= softmax.sum(-1, keepdims=True)
    q = np.full(z.shape, eps / 11)
    np.put_along_axis(q, labels[..., None].astype(np.int64), 1.0 - eps + eps / 11, axis=-1)
    logit_grad = 2.5 * (softmax - q) * (labels != 0)[..., None]
    tolerance = dict(rtol=1e-5, atol=1e-5) if dtype == "float32" else dict(rtol=2e-2, atol=2e-2)
    assert float(tokens) == want_tokens == 9
    assert float(correct) == ((z.argmax(-1) == labels) & (labels != 0)).sum() >= 1
    np.testing.assert_allclose(float(loss_sum), want_loss, **tolerance)
    np.testing.assert_allclose(states_grad.numpy(), logit_grad @ rounded(table), **tolerance)
    np.testing.assert_allclose(table_grad.numpy(),
                               np.einsum("btk,btd->kd", logit_grad, rounded(states)), **tolerance)


def test_bfloat16_gradient_keeps_the_difference_at_the_label():
    """In bfloat16 the label's softmax(z)_y - (1 - eps) must be formed before rounding: softmax(z)_y
    near 1 - eps rounded first (steps of 2^-8 there) would err by up to ~2e-3 in the gradient at
    the label, which is itself a few hundredths. Logits exact in bfloat16 (identity embeddings,
    the states the logits themselves), the float64 softmax gradient as reference."""
    eps, num_classes = 0.1, 4
    logits = np.zeros((1, 8, num_classes), np.float32)
    logits[0, :, 1] = 3.5 + np.arange(8) * 3 / 64  # softmax(z)_1 from 0.917 to 0.938
    labels = np.ones((1, 8), np.int32)
    table = np.eye(num_classes, dtype=np.float32)
    states = tf.constant(logits)
    with tf.GradientTape() as tape:
        tape.watch(states)
        loss_sum = projected_loss_and_accuracy(labels, tf.cast(states, "bfloat16"), table, eps)[0]
    got = tape.gradient(loss_sum, states).numpy()[0]
    z = logits[0].astype(np.float64)
    softmax = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    q = np.full(z.shape, eps / num_classes)
    q[:, 1] += 1.0 - eps
    rounded_first = tf.cast(tf.cast(softmax, "bfloat16"), tf.float64).numpy()
    assert np.abs(rounded_first - softmax)[:, 1].max() > 1e-3  # the error the test must not see
    np.testing.assert_allclose(got, softmax - q, rtol=0, atol=2.5e-4)


@pytest.mark.parametrize("real_tokens_only", [False, True])
def test_bfloat16_gradients_are_not_rounded_after_every_term(real_tokens_only):
    """bfloat16's gradients of the states and the embeddings are rounded once, by their
    products: the scale (1 / tokens, not a power of two), the smoothing part and the mask follow
    in float32, so the embeddings' gradient (float32) carries its product's rounding and nothing
    more, the states' that and one rounding to bfloat16 at the end. A rounding after each term
    adds errors that a sum over the batch's tokens (LayerNorm's beta and gamma) collects. The
    reference: float64 around this machine's own bfloat16 products (the logits, the two backward
    products), since how a product rounds is its kernel's (oneDNN's to nearest; Eigen's, which
    TensorFlow runs for bfloat16 on CPUs without AVX-512, truncates), and all that follows is
    this loss's."""
    as64 = lambda x: tf.cast(x, tf.float64).numpy()
    rounded = lambda x: as64(tf.cast(x, tf.bfloat16))
    rng = np.random.default_rng(3)
    eps, width, num_classes = 0.1, 64, 300
    states = rng.normal(size=(16, 32, width)).astype(np.float32)
    table = rng.normal(scale=0.3, size=(num_classes, width)).astype(np.float32)
    labels = rng.integers(1, num_classes, size=(16, 32)).astype(np.int32)
    labels[:, 25:] = 0

    @tf.function
    def run(states, table):
        with tf.GradientTape() as tape:
            tape.watch([states, table])
            loss_sum, tokens, _ = projected_loss_and_accuracy(
                labels, tf.cast(states, tf.bfloat16), table, eps,
                real_tokens_only=real_tokens_only)
            objective = loss_sum / tokens
        return tokens, tape.gradient(objective, [states, table])

    tokens, (states_grad, table_grad) = run(tf.constant(states), tf.constant(table))
    tokens = float(tokens)
    flat_labels = labels.reshape(-1)
    mask = (flat_labels != 0)[:, None]
    rows = tf.cast(states.reshape(-1, width) * mask, tf.bfloat16)  # padding rows add nothing
    embeddings = tf.cast(table, tf.bfloat16)
    z = as64(tf.matmul(rows, embeddings, transpose_b=True))  # the logits as the kernel has them
    softmax_part = np.exp(z - z.max(-1, keepdims=True))
    softmax_part /= softmax_part.sum(-1, keepdims=True)
    softmax_part[np.arange(flat_labels.size), flat_labels] -= 1.0 - eps
    softmax_part = tf.cast(softmax_part, tf.bfloat16)  # before the products by design (test above)
    products = {"states": as64(tf.matmul(softmax_part, embeddings)),
                "embeddings": as64(tf.matmul(rows, softmax_part, transpose_a=True)).T}
    uniform = eps / num_classes
    exact = {"states": mask * (products["states"] - uniform * as64(embeddings).sum(0)) / tokens,
             "embeddings": (products["embeddings"] - uniform * as64(rows).sum(0)) / tokens}
    expected = {"states": rounded(exact["states"]), "embeddings": exact["embeddings"]}
    got = {"states": as64(states_grad).reshape(-1, width), "embeddings": as64(table_grad)}
    # In units of one more rounding to bfloat16: about 1 for each rounding added on the way.
    roundings = {name: np.sqrt(np.mean((got[name] - expected[name]) ** 2)
                               / np.mean((rounded(exact[name]) - exact[name]) ** 2))
                 for name in exact}
    assert roundings["states"] < 0.3, roundings
    assert roundings["embeddings"] < 0.3, roundings


@pytest.mark.parametrize("projected", [False, True])
@pytest.mark.parametrize("vanishing", ["label", "padding"])
def test_a_label_of_vanishing_probability_keeps_an_exact_loss(projected, vanishing):
    """The loss reads logsumexp off the label's probability; where that underflows float32 (a
    label logit far below the row's largest), for a real token or a padding position, the loss
    must still be the float64 reference, finite, not inf or NaN."""
    rng = np.random.default_rng(7)
    logits = rng.normal(size=(2, 3, 11)).astype(np.float32)
    labels = np.array([[4, 2, 0], [7, 1, 5]], np.int32)
    # p_y about e^-150: zero in float32
    logits[(1, 0, 7) if vanishing == "label" else (0, 2, 0)] = -150.0
    if projected:  # logits = states @ embeddings^T, made exact: states as one-hot rows
        embeddings = np.concatenate([logits.reshape(-1, 11).T, np.zeros((11, 2), np.float32)], 1)
        states = np.eye(6, 8, dtype=np.float32).reshape(2, 3, 8)
        loss_sum, tokens, _ = projected_loss_and_accuracy(labels, states, embeddings, 0.1)
    else:
        loss_sum, tokens, _ = loss_and_accuracy(labels, logits, 0.1)
    want_sum, want_count = numpy_reference(labels, logits.astype(np.float64), 0.1)
    assert float(tokens) == want_count == 5
    assert (want_sum > 130) == (vanishing == "label")
    assert float(loss_sum) == pytest.approx(want_sum, rel=1e-5)


def test_token_accuracy(batch):
    labels, logits = batch
    correct, tokens = token_accuracy_counts(labels, logits)
    mask = labels != 0
    assert float(correct) == ((logits.argmax(-1) == labels) & mask).sum()
    assert float(tokens) == mask.sum()


def test_keras_loss_is_the_token_mean(batch):
    labels, logits = batch
    want_sum, want_count = numpy_reference(labels, logits.astype(np.float64), 0.1)
    loss = LabelSmoothedCrossEntropy(label_smoothing=0.1)
    assert float(loss(labels, logits)) == pytest.approx(want_sum / want_count, rel=1e-5)
    restored = LabelSmoothedCrossEntropy.from_config(loss.get_config())
    assert restored.label_smoothing == 0.1 and restored.pad_id == 0


def float64_softmax_rows(logits, labels, at_label):
    z = tf.cast(logits, tf.float64).numpy()
    row_max = z.max(-1)
    logsumexp = row_max + np.log(np.exp(z - row_max[:, None]).sum(-1))
    probs = np.exp(z - logsumexp[:, None])
    rows = np.arange(len(labels))
    probs[rows, labels] -= at_label
    return probs, logsumexp, row_max, z[rows, labels]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("tokens, classes", [(37, 8000), (5, 17), (3, 1), (0, 9)])
def test_the_softmax_rows_against_float64(dtype, tokens, classes):
    """The softmax and the row statistics the loss reads, against float64 numpy: within float32's
    rounding (a few units in the last place of the largest entry) in float32, one rounding to
    bfloat16 in bfloat16 (the subtraction at the label made before it). Rows of wide range:
    entries far below the row's largest (under float32's smallest normal number once
    exponentiated), a label among them; row widths not a multiple of the vector width."""
    rng = np.random.default_rng(5)
    logits = rng.normal(scale=4.0, size=(tokens, classes)).astype(np.float32)
    labels = rng.integers(0, classes, size=tokens).astype(np.int32)
    if tokens and classes > 1:
        logits[0, :classes // 2] = -120.0  # exp(-120 - max) is zero in float32
        labels[0] = 0
        logits[1, labels[1]] = logits[1].max() + 30.0  # p_y = 1 in float32
    logits = tf.cast(logits, dtype)
    mask = tf.ones([tokens])
    part, left, *stats = loss_module._softmax_rows(logits, tf.constant(labels), mask, 0.9)
    assert left == 0.0  # subtracted at the labels, not left to the caller
    got = [x.numpy().astype(np.float64) for x in (part, *stats)]
    want = float64_softmax_rows(logits, labels, 0.9)
    assert got[0].shape == want[0].shape and all(x.shape == (tokens,) for x in got[1:])
    bound = 2e-6 if dtype == "float32" else 2 ** -8
    np.testing.assert_allclose(got[0], want[0], rtol=bound, atol=bound * 1e-3)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6, atol=1e-6)  # logsumexp, float32
    np.testing.assert_array_equal(got[2], want[2])  # the row maximum and the label's logit: exact
    np.testing.assert_array_equal(got[3], want[3])


def test_a_non_finite_logit_makes_the_loss_non_finite(batch):
    """A NaN or an infinity among a real token's logits must not vanish inside the softmax: the
    trainer stops on a non-finite loss before it saves. No smoothing: its sum over the logits
    would carry the NaN past the softmax."""
    labels, logits = batch
    for bad in (np.nan, np.inf):
        changed = logits.copy()
        changed[0, 1, 7] = bad  # a real token's row, neither its label nor its largest logit
        loss_sum, _ = label_smoothed_cross_entropy(labels, changed, 0.0)
        assert not np.isfinite(float(loss_sum)), bad


@pytest.mark.parametrize("softmax_ops", ["cpu_kernel"], indirect=True)
def test_the_training_step_reads_the_kernel_and_xla_the_tensorflow_ops(softmax_ops):
    states = tf.random.normal([2, 3, 4])
    table = tf.random.normal([9, 4])
    labels = tf.constant([[1, 2, 0], [3, 0, 0]])

    def op_types(jit_compile):
        function = tf.function(
            lambda s, t: projected_loss_and_accuracy(labels, s, t, 0.1)[0], jit_compile=jit_compile)
        graph = function.get_concrete_function(states, table).graph
        return {op.type for op in graph.get_operations()}

    assert "KerasTransformerSoftmaxRows" in op_types(False)
    assert "KerasTransformerSoftmaxRows" not in op_types(True)
