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
    is written out (a custom gradient) from the exponentials the forward pass kept, instead of
    differentiating logsumexp op by op. The row maximum that logsumexp needs anyway gives the
    accuracy, so no separate arg-max over the vocabulary is needed. Only the loss is
    differentiable.
    """
    return loss_accuracy_and_nll(labels, logits, label_smoothing, pad_id)[:3]


def loss_accuracy_and_nll(labels, logits, label_smoothing: float = 0.1, pad_id: int = 0):
    """``loss_and_accuracy`` and, fourth, the summed negative log-likelihood of the labels
    (the unsmoothed cross-entropy, ``logsumexp(z) - z_y``), from the same pass."""
    with tf.name_scope("label_smoothed_loss"):  # a label for profiles (benchmarks.profile_step)
        return _sums(labels, logits, float(label_smoothing), int(pad_id))


def _sums(labels, logits, label_smoothing, pad_id):
    logits = tf.cast(logits, tf.float32)
    labels = tf.cast(labels, tf.int32)
    num_classes = logits.shape[-1]
    eps = label_smoothing
    mask = tf.cast(tf.not_equal(labels, pad_id), tf.float32)

    @tf.custom_gradient
    def smoothed(z):
        row_max = tf.reduce_max(z, axis=-1, keepdims=True)
        exps = tf.exp(z - row_max)
        sums = tf.reduce_sum(exps, axis=-1, keepdims=True)
        log_normalizer = tf.squeeze(row_max + tf.math.log(sums), -1)
        label_logits = tf.gather(z, labels, batch_dims=len(labels.shape))
        nll = log_normalizer - label_logits
        per_token = nll + eps * label_logits
        if eps:
            per_token -= (eps / num_classes) * tf.reduce_sum(z, axis=-1)
        correct = tf.cast(tf.greater_equal(label_logits, tf.squeeze(row_max, -1)), tf.float32)

        def gradient(upstream, *_):
            weight = (upstream * mask)[..., None]
            # softmax(z) - q', with q' = (1 - eps) onehot + eps / K, per real token.
            target = tf.one_hot(labels, num_classes, on_value=1.0 - eps + eps / num_classes,
                                off_value=eps / num_classes, dtype=tf.float32)
            return (exps * (weight / sums)) - target * weight

        return (tf.reduce_sum(per_token * mask), tf.reduce_sum(correct * mask),
                tf.reduce_sum(nll * mask)), gradient

    loss_sum, correct, nll_sum = smoothed(logits)
    return loss_sum, tf.reduce_sum(mask), correct, nll_sum


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
