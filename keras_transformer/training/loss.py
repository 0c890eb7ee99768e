"""Label-smoothed cross-entropy summed over real target tokens (section 5.4).

Label smoothing as in Szegedy et al. (the paper's [36]): the target distribution is
``q'(k) = (1 - eps) * onehot(k) + eps / K`` over the ``K`` output classes, and the loss is the
cross-entropy ``-sum_k q'(k) log p(k)`` (the same definition as
``keras.losses.CategoricalCrossentropy(label_smoothing=eps)``).

Losses are returned as SUMS over non-padding target tokens together with the token count, so
that the training step divides by the global number of real target tokens over all replicas
and accumulation steps. Averaging per replica first (Model Garden's choice) weights the tokens
of a replica with few tokens more than those of a replica with many.
"""

import keras
import tensorflow as tf

from keras_transformer.layers import cpu_kernels


def label_smoothed_cross_entropy(labels, logits, label_smoothing: float = 0.1, pad_id: int = 0):
    """Returns ``(loss_sum, num_tokens)`` over positions where ``labels != pad_id``.

    labels: int [batch, length]; logits: float [batch, length, K]. Computed in float32
    whatever the compute dtype of the model (bfloat16 log-softmax over 37k classes is too
    coarse). ``num_tokens`` is float32 so it can be all-reduced along with the loss.
    """
    loss_sum, num_tokens, _ = loss_and_accuracy(labels, logits, label_smoothing, pad_id)
    return loss_sum, num_tokens


def loss_and_accuracy(labels, logits, label_smoothing: float = 0.1, pad_id: int = 0):
    """``(loss_sum, num_tokens, num_correct)``: the label-smoothed loss of
    ``label_smoothed_cross_entropy`` and the number of real tokens whose label has the largest
    logit (a tie for the largest counts as correct), from one pass over the logits.

    Since ``sum_k q'(k) = 1``, the loss of one token is ``logsumexp(z) - (1 - eps) z_y -
    (eps / K) sum_k z_k``: two row reductions and a gather, without the [batch, length, K]
    smoothed distribution that a generic cross-entropy reads. Its gradient ``softmax(z) - q'``
    is written out (a custom gradient) from the softmax the forward pass kept, its one-hot part
    already subtracted at the label, instead of differentiating logsumexp op by op. The row
    maximum that logsumexp needs anyway gives the accuracy, so no separate arg-max over the
    vocabulary is needed. Only the loss is differentiable.
    """
    return loss_accuracy_and_nll(labels, logits, label_smoothing, pad_id)[:3]


def loss_accuracy_and_nll(labels, logits, label_smoothing: float = 0.1, pad_id: int = 0):
    """``loss_and_accuracy`` and, fourth, the summed negative log-likelihood of the labels
    (the unsmoothed cross-entropy, ``logsumexp(z) - z_y``), from the same pass."""
    with tf.name_scope("label_smoothed_loss"):  # a label for profiles (benchmarks.profile_step)
        return _sums(labels, logits, float(label_smoothing), int(pad_id))


def projected_loss_and_accuracy(labels, states, embeddings, label_smoothing: float = 0.1,
                                pad_id: int = 0, real_tokens_only: bool = False):
    """``loss_and_accuracy`` of the logits ``states @ embeddings^T``, the pre-softmax projection
    (section 3.4) of the decoder's output ``states`` [batch, length, d_model] with the
    [K, d_model] ``embeddings``, computed here rather than by the model so that the projection is
    inside the loss's custom gradient. There the gradient of the logits, ``softmax(z) - q'`` per
    real token, is never formed whole: the two backward products read the softmax with its
    one-hot part subtracted at the labels (in float32, then rounded once to the compute dtype:
    in bfloat16 the softmax rounded before the subtraction would lose the difference at the
    label), as the forward pass left it, and the smoothing part reaches the states and the
    embeddings as column sums, so no pass over [tokens, K] is added to the two products. (In
    float32 without our CPU kernel, under XLA and on GPUs, the one-hot part goes around the
    products too, as a gather and a segment sum, rather than through a copy of the softmax.) Their
    results, cast to float32, take the scale, the smoothing part and the mask there: the
    embeddings' gradient (float32) is rounded only by its product, the states' once more, to
    bfloat16, not after every term.

    ``real_tokens_only``: the projection and the loss see the real target tokens only, gathered
    from the padded batch first, so no product or pass over [tokens, K] is spent on padding (the
    same sums; their tokens' count varies from batch to batch, so not under XLA)."""
    with tf.name_scope("label_smoothed_loss"):  # a label for profiles (benchmarks.profile_step)
        dtype = states.dtype
        width = states.shape[-1]
        labels = tf.reshape(tf.cast(labels, tf.int32), [-1])
        rows = tf.reshape(states, [-1, width])
        is_real = tf.not_equal(labels, int(pad_id))
        mask = tf.cast(is_real, tf.float32)
        num_tokens = tf.reduce_sum(mask)
        if real_tokens_only:
            real = tf.where(is_real)[:, 0]
            labels, rows = tf.gather(labels, real), tf.gather(rows, real)
            mask = tf.ones_like(labels, tf.float32)
        eps = float(label_smoothing)

        @tf.custom_gradient
        def projected(rows, table32):
            table = tf.cast(table32, dtype)
            with tf.name_scope("output_projection"):
                logits = tf.matmul(rows, table, transpose_b=True)
            # sum_k z_k is linear in the states: a product with the embeddings' column sum over
            # [tokens, d_model] rather than a reduction over [tokens, K].
            column_sums = tf.reduce_sum(table32, 0) if eps else None
            # The products read softmax(z) - (1 - eps) at the label, formed in float32 and rounded
            # once: rounded to bfloat16 first, softmax(z) would lose its difference from 1 - eps
            # there. The smoothing part, eps / K everywhere, goes around them as column sums, and
            # so does the one-hot part where the softmax was left without it (left_at_label).
            softmax_part, left_at_label, per_token, correct, nll = _token_terms(
                logits, labels, mask, eps, at_label=1.0 - eps, copy_free=True,
                logit_sums=None if column_sums is None else tf.linalg.matvec(
                    tf.cast(rows, tf.float32), column_sums))

            def gradient(upstream, *_):
                num_classes = table.shape[0]
                # Only the 0/1 mask (exact in any precision) before the products; the scale
                # and the smoothing part after them, in float32.
                masked_rows = rows if real_tokens_only else rows * tf.cast(mask, dtype)[:, None]
                with tf.name_scope("output_projection"):
                    states_grad, table_grad = (tf.cast(product, tf.float32) for product in
                                               _projection_gradients(softmax_part, masked_rows,
                                                                     table))
                if left_at_label:
                    states_grad -= left_at_label * tf.gather(table32, labels)
                    table_grad -= left_at_label * tf.math.unsorted_segment_sum(
                        masked_rows, labels, num_classes)
                if eps:
                    uniform = eps / num_classes
                    states_grad -= uniform * column_sums
                    table_grad -= uniform * tf.reduce_sum(tf.cast(masked_rows, tf.float32), 0)
                states_weight = upstream if real_tokens_only else upstream * mask[:, None]
                return tf.cast(states_weight * states_grad, dtype), upstream * table_grad

            return _masked_sums(per_token, correct, nll, mask), gradient

        loss_sum, correct, _ = projected(rows, tf.cast(embeddings, tf.float32))
        return loss_sum, num_tokens, correct


def _projection_gradients(logit_grad, rows, table):
    """The products of the projection's backward pass: (logit_grad @ table, logit_grad^T @ rows),
    the second as the transpose of [d_model, K] (faster than a [K, d_model] product over the long
    token axis)."""
    return (tf.matmul(logit_grad, table),
            tf.transpose(tf.matmul(rows, logit_grad, transpose_a=True)))


def _sums(labels, logits, label_smoothing, pad_id):
    logits = tf.cast(logits, tf.float32)
    shape = tf.shape(logits)
    num_classes = logits.shape[-1]
    labels = tf.reshape(tf.cast(labels, tf.int32), [-1])
    mask = tf.cast(tf.not_equal(labels, pad_id), tf.float32)

    @tf.custom_gradient
    def smoothed(z):
        softmax_part, _, per_token, correct, nll = _token_terms(
            tf.reshape(z, [-1, num_classes]), labels, mask, label_smoothing,
            at_label=1.0 - label_smoothing)

        def gradient(upstream, *_):
            # softmax(z) - q', q' = (1 - eps) onehot + eps / K: the one-hot part is in
            # softmax_part already.
            weight = (upstream * mask)[:, None]
            return tf.reshape(weight * (softmax_part - label_smoothing / num_classes), shape)

        return _masked_sums(per_token, correct, nll, mask), gradient

    loss_sum, correct, nll_sum = smoothed(logits)
    return loss_sum, tf.reduce_sum(mask), correct, nll_sum


# The smallest float32 probability whose logarithm is taken as exact: far above the subnormals,
# which lose digits (and which oneDNN may flush to zero).
_SMALLEST_EXACT_PROBABILITY = 1e-30


def _token_terms(logits, labels, mask, eps, at_label, copy_free=False, logit_sums=None):
    """Per token of logits [tokens, K], labels [tokens] and the mask of real tokens [tokens]:
    (softmax(z) minus ``at_label`` at the label in the logits' dtype and what it leaves of
    ``at_label`` (``_softmax_rows``), the smoothed loss, whether the label has the largest logit,
    the loss without smoothing), float32. ``logit_sums``: sum_k z_k per token if the caller has
    it, else summed here."""
    num_classes = logits.shape[-1]
    softmax_part, left_at_label, logsumexp, row_max, label_logits = _softmax_rows(
        logits, labels, mask, at_label, copy_free)
    nll = logsumexp - label_logits
    per_token = nll + eps * label_logits
    if eps:
        if logit_sums is None:
            logit_sums = tf.reduce_sum(tf.cast(logits, tf.float32), axis=-1)
        per_token -= (eps / num_classes) * logit_sums
    correct = tf.cast(tf.greater_equal(label_logits, row_max), tf.float32)
    return softmax_part, left_at_label, per_token, correct, nll


def _softmax_rows(logits, labels, mask, at_label, copy_free=False):
    """Per row of logits z [tokens, K] (float32 or bfloat16) and its label y: (softmax(z) with
    ``at_label`` subtracted at y, computed in float32 and rounded once to the logits' dtype; the
    part of ``at_label`` not subtracted, 0.0 or ``at_label``; logsumexp(z), max_k z_k and z_y in
    float32). Only the real tokens' (``mask``) logsumexp must be exact. ``copy_free``: with
    TensorFlow's ops in float32, leave the labels' entries to the caller rather than copy the
    softmax to set them.

    Every pass over [tokens, K] costs memory traffic: our CPU kernel (``cpu_kernels``) reads each
    row once. TensorFlow's ops, where it is not built and under XLA, take the row maximum and the
    softmax (one oneDNN kernel), and get logsumexp(z) = z_y - log p_y from the label's
    probability without another pass; only when a real token's p_y is too small for its
    logarithm, the pass: the softmax's largest entry, exp(0) / sum(exp(z - max)), gives it for
    every row. In bfloat16 they cast the logits up and the softmax back, and copy it to set the
    labels' entries."""
    kernels = cpu_kernels.ops_for(logits)
    if kernels is not None:
        softmax_part, logsumexp, row_max, label_logits = kernels.keras_transformer_softmax_rows(
            logits, labels, at_label=at_label)
        return softmax_part, 0.0, logsumexp, row_max, label_logits
    z = tf.cast(logits, tf.float32)
    row_max = tf.reduce_max(z, axis=-1)
    probs = tf.nn.softmax(z)
    label_logits = tf.gather(z, labels, batch_dims=1)
    label_probs = tf.gather(probs, labels, batch_dims=1)
    smallest = tf.reduce_min(tf.where(mask > 0, label_probs, 1.0))
    logsumexp = tf.cond(
        smallest > _SMALLEST_EXACT_PROBABILITY,
        # Padding rows (masked out of every sum) must stay finite: inf * 0 would be NaN.
        lambda: label_logits - tf.math.log(tf.maximum(label_probs, _SMALLEST_EXACT_PROBABILITY)),
        lambda: row_max - tf.math.log(tf.reduce_max(probs, axis=-1)))
    if copy_free and logits.dtype == tf.float32:
        return probs, at_label, logsumexp, row_max, label_logits
    at_labels = tf.stack([tf.range(tf.shape(labels)[0]), labels], 1)
    # Cast first: a scatter copies its whole input on CPU, and bfloat16 is half float32's bytes.
    softmax_part = tf.tensor_scatter_nd_update(tf.cast(probs, logits.dtype), at_labels,
                                               tf.cast(label_probs - at_label, logits.dtype))
    return softmax_part, 0.0, logsumexp, row_max, label_logits


def _masked_sums(per_token, correct, nll, mask):
    return tf.reduce_sum(per_token * mask), tf.reduce_sum(correct * mask), tf.reduce_sum(nll * mask)


def token_accuracy_counts(labels, logits, pad_id: int = 0):
    """Returns ``(num_correct, num_tokens)``: arg-max predictions equal to the label, non-pad."""
    predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
    mask = tf.not_equal(labels, pad_id)
    correct = tf.logical_and(tf.equal(predictions, tf.cast(labels, tf.int32)), mask)
    return tf.reduce_sum(tf.cast(correct, tf.float32)), tf.reduce_sum(tf.cast(mask, tf.float32))


@keras.saving.register_keras_serializable(package="keras_transformer")
class LabelSmoothedCrossEntropy(keras.losses.Loss):
    """The same loss for ``model.compile(loss=...)`` / ``model.fit``.

    Returns the smoothed cross-entropy summed over the replica's real tokens divided by the
    real tokens of ALL replicas (an all-reduce when ``fit`` runs under a distribution
    strategy). With ``reduction="sum"`` Keras does not rescale the value per replica and the
    optimizer sums the replicas' gradients, so the update is the one of the custom loop: a mean
    over the global batch's real tokens, however unevenly they are spread. (The loss Keras
    displays under N replicas is N times one replica's share; the update is what matters.)
    """

    def __init__(self, label_smoothing: float = 0.1, pad_id: int = 0,
                 name: str = "label_smoothed_cross_entropy", **kwargs):
        kwargs.setdefault("reduction", "sum")
        super().__init__(name=name, **kwargs)
        self.label_smoothing = float(label_smoothing)
        self.pad_id = int(pad_id)

    def call(self, y_true, y_pred):
        loss_sum, num_tokens = label_smoothed_cross_entropy(
            y_true, y_pred, self.label_smoothing, self.pad_id
        )
        replica_context = tf.distribute.get_replica_context()
        if replica_context is not None and replica_context.num_replicas_in_sync > 1:
            num_tokens = replica_context.all_reduce(tf.distribute.ReduceOp.SUM, num_tokens)
        return loss_sum / tf.maximum(num_tokens, 1.0)

    def get_config(self):
        return {**super().get_config(), "label_smoothing": self.label_smoothing,
                "pad_id": self.pad_id}
