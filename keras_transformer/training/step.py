"""One training update, the same under every distribution strategy (sections 5.3, 5.4).

Per replica and per micro-batch: forward and backward pass (optionally one XLA cluster,
``jit_compile=True``), giving the gradient of the label-smoothed loss AVERAGED over the
micro-batch's real target tokens. Each such gradient is weighted by its micro-batch's share of
the real target tokens of the whole global batch (all replicas, all micro-batches), the
weighted gradients are summed across micro-batches and replicas (one all-reduce) and handed to
the optimizer, which applies Adam: the gradient of the loss averaged over the global batch's
real target tokens (with one replica and no accumulation the weight is 1, and is not applied).
Hence k accumulated micro-batches give exactly the update of one k-times larger batch, and N
replicas exactly the update of one device on the same global batch.
The step reports the global norm of that applied gradient; float16 loss scaling checks that same
summed gradient for overflow, so every replica skips or applies the step together.

Only the per-replica forward+backward is compiled with XLA: compiling the whole step under
``MirroredStrategy`` on CPU fails with a device-placement error, and keeping the all-reduce and
the update outside the cluster costs nothing measurable.
"""

import functools
import math

import tensorflow as tf

from keras_transformer.training.loss import loss_accuracy_and_nll, projected_loss_and_accuracy

# Statistics every step returns, summed over replicas and micro-batches (and ``grad_norm``, the
# global norm of the gradient the update applied).
STAT_NAMES = ("loss_sum", "target_tokens", "correct", "source_tokens",
              "source_positions", "target_positions")


def sums_across_replicas(optimizer) -> bool:
    """Whether ``optimizer.apply`` all-reduces (sums) the replicas' gradients itself, as Keras
    optimizers do; ``schedule.paper_optimizer``'s does not (the step has summed them)."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)  # LossScaleOptimizer
    return not getattr(inner, "gradients_are_summed", False)


def _unpack(batch):
    (source, target_in), target_out = batch
    return source, target_in, target_out


class TrainStep:
    """Builds the ``tf.function`` of one update for a model, an optimizer and a strategy.

    ``model``, ``optimizer`` must have been created (and built) inside ``strategy.scope()``.
    Call ``step(iterator)`` with an iterator over ``strategy.distribute_datasets_from_function``
    (it consumes ``accumulation_steps`` batches) or ``step_on_batches(batches)`` with a tuple of
    ``accumulation_steps`` already distributed batches. Both return a dict of the global sums of
    ``STAT_NAMES``, ``grad_norm`` and ``votes``, the sum over replicas of the votes passed in (a
    vector of numbers, e.g. "stop" and "save": how the workers of a multi-worker job agree on
    when to save or stop). ``share(values)`` agrees on numbers outside a step.
    """

    def __init__(self, model, optimizer, strategy=None, *, label_smoothing: float = 0.1,
                 pad_id: int = 0, accumulation_steps: int = 1, jit_compile: bool = False):
        if int(accumulation_steps) < 1:
            raise ValueError(f"accumulation_steps must be >= 1, got {accumulation_steps!r}.")
        self.model = model
        self.optimizer = optimizer
        self.strategy = strategy or tf.distribute.get_strategy()
        self.label_smoothing = float(label_smoothing)
        self.pad_id = int(pad_id)
        self.accumulation_steps = int(accumulation_steps)
        self.jit_compile = bool(jit_compile)
        self._optimizer_sums = sums_across_replicas(optimizer)
        # Without autograph, as the translator's functions (inference.py): the step's control flow
        # is Python's over Python values (the micro-batch loop unrolls), and autograph's rewrite of
        # every function it calls would make a program's start slower than tracing the graph.
        function = functools.partial(tf.function, autograph=False)
        self._forward_backward = function(self._forward_backward_fn, jit_compile=jit_compile)
        self._iterator_step = function(self._iterator_step_fn)
        self._batches_step = function(self._batches_step_fn, reduce_retracing=True)
        self._eval = function(self._eval_fn, reduce_retracing=True)
        self._share = function(self._share_fn, reduce_retracing=True)

    # --- per replica -------------------------------------------------------------------------
    def _forward_backward_fn(self, source, target_in, target_out):
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            memory, memory_mask = self.model.encode(source, training=True)
            states = self.model.decoder_states(target_in, memory, memory_mask, training=True)
            loss_sum, num_tokens, correct = projected_loss_and_accuracy(
                target_out, states, self.model.softmax_embedding.embeddings,
                self.label_smoothing, self.pad_id, real_tokens_only=not self.jit_compile)
            # Differentiate the local MEAN (times the loss scale for float16) so low-precision
            # gradients keep the range of a mean loss; weighted in float32 (``_micro_fn``,
            # ``_apply_fn``) only when micro-batches or replicas are combined.
            objective = self.optimizer.scale_loss(loss_sum / tf.maximum(num_tokens, 1.0))
        grads = tape.gradient(objective, variables)
        grads = [
            tf.zeros_like(v, dtype=tf.float32) if g is None
            else tf.cast(tf.convert_to_tensor(g), tf.float32)
            for g, v in zip(grads, variables)
        ]
        stats = [loss_sum, num_tokens, correct] + self._shape_stats(source, target_out)
        return grads, stats

    def _shape_stats(self, source, target_out):
        source_tokens = tf.reduce_sum(tf.cast(tf.not_equal(source, self.pad_id), tf.float32))
        return [source_tokens, tf.cast(tf.size(source), tf.float32),
                tf.cast(tf.size(target_out), tf.float32)]

    def _micro_fn(self, batch, accumulated=None):
        grads, stats = self._forward_backward(*_unpack(batch))
        if self.accumulation_steps > 1:  # micro-batches add up as loss sums
            grads = [g * stats[1] for g in grads]
        if accumulated is not None:
            grads = [a + g for a, g in zip(accumulated[0], grads)]
            stats = [a + s for a, s in zip(accumulated[1], stats)]
        return grads, stats

    def _apply_fn(self, accumulated, votes):
        grads, stats = accumulated
        context = tf.distribute.get_replica_context()
        if self.accumulation_steps > 1 or context.num_replicas_in_sync > 1:
            global_tokens = tf.maximum(
                context.all_reduce(tf.distribute.ReduceOp.SUM, stats[1]), 1.0)
            # A sum over micro-batches divides by all tokens; a mean counts its own share.
            weight = (1.0 if self.accumulation_steps > 1 else stats[1]) / global_tokens
            grads = context.all_reduce(tf.distribute.ReduceOp.SUM, [g * weight for g in grads])
        # The gradients of a scaled loss (float16): the norm of the unscaled ones.
        grad_norm = tf.linalg.global_norm(grads) / self._loss_scale()
        if self._optimizer_sums and context.num_replicas_in_sync > 1:
            # An optimizer that sums the replicas' gradients again gets each replica's share.
            grads = [g / context.num_replicas_in_sync for g in grads]
        self.optimizer.apply(grads, self.model.trainable_variables)
        return stats, grad_norm, tf.identity(votes)

    def _loss_scale(self):
        """The factor ``optimizer.scale_loss`` multiplies the loss by (read before the update,
        which may change it)."""
        scale = getattr(self.optimizer, "dynamic_scale", None)  # LossScaleOptimizer
        if scale is None:
            scale = getattr(self.optimizer, "loss_scale_factor", None) or 1.0
        return tf.cast(tf.convert_to_tensor(scale), tf.float32)

    # --- whole step (cross-replica) ----------------------------------------------------------
    def _run(self, batches, votes):
        accumulated = None
        for batch in batches:
            args = (batch,) if accumulated is None else (batch, accumulated)
            accumulated = self.strategy.run(self._micro_fn, args=args)
        stats, grad_norm, votes = self.strategy.run(self._apply_fn, args=(accumulated, votes))
        result = {name: self._sum(value) for name, value in zip(STAT_NAMES, stats)}
        # The same on every replica: one replica's value.
        result["grad_norm"] = self.strategy.experimental_local_results(grad_norm)[0]
        result["votes"] = self._sum(votes)
        return result

    def _sum(self, value):
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)

    def _iterator_step_fn(self, iterator, votes):
        return self._run([next(iterator) for _ in range(self.accumulation_steps)], votes)

    def _batches_step_fn(self, batches, votes):
        return self._run(batches, votes)

    def step(self, iterator, votes=None):
        """One update from ``accumulation_steps`` batches of ``iterator``; returns global sums."""
        return self._iterator_step(iterator, self._votes(votes))

    def step_on_batches(self, batches, votes=None):
        """One update from a tuple of ``accumulation_steps`` (distributed) batches."""
        batches = tuple(batches)
        if len(batches) != self.accumulation_steps:
            raise ValueError(
                f"step_on_batches needs accumulation_steps={self.accumulation_steps} batches, "
                f"got {len(batches)}.")
        return self._batches_step(batches, self._votes(votes))

    @staticmethod
    def _votes(votes):
        return tf.constant([0.0] if votes is None else votes, tf.float32)

    # --- agreeing outside a step -------------------------------------------------------------
    def _share_fn(self, values):
        def replica_fn(values):
            context = tf.distribute.get_replica_context()
            first = tf.equal(context.replica_id_in_sync_group, 0)
            # tf.where, not a product: a NaN of another replica must not reach the first's values.
            mine = tf.where(first, values, tf.zeros_like(values))
            return context.all_reduce(tf.distribute.ReduceOp.SUM, tf.stack([mine, values]))

        shared = self.strategy.run(replica_fn, args=(values,))
        return self.strategy.experimental_local_results(shared)[0]

    def share(self, values):
        """``(first, total)``: the values of the first replica (on the chief) and their sum over
        all replicas, as float64 numpy arrays, the same on every worker. A collective: every
        worker must call it at the same point."""
        shared = self._share(tf.constant(values, tf.float64)).numpy()
        return shared[0], shared[1]

    # --- evaluation --------------------------------------------------------------------------
    def _eval_replica_fn(self, batch):
        source, target_in, target_out = _unpack(batch)
        logits = self.model((source, target_in), training=False)
        return list(loss_accuracy_and_nll(target_out, logits, self.label_smoothing, self.pad_id))

    def _eval_fn(self, batch):
        stats = self.strategy.run(self._eval_replica_fn, args=(batch,))
        return [self.strategy.reduce(tf.distribute.ReduceOp.SUM, s, axis=None) for s in stats]

    def evaluate(self, distributed_dataset) -> dict:
        """Over a whole dataset, per real target token (subword, EOS included): the
        label-smoothed ``loss`` (what training minimises), the unsmoothed negative
        log-likelihood ``nll`` and its ``perplexity`` exp(nll) (Table 3's PPL, per subword),
        and the token ``accuracy``."""
        totals = [0.0, 0.0, 0.0, 0.0]
        for batch in distributed_dataset:
            totals = [t + float(v) for t, v in zip(totals, self._eval(batch))]
        loss_sum, tokens, correct, nll_sum = totals
        nll = nll_sum / max(tokens, 1.0)
        return {"loss": loss_sum / max(tokens, 1.0), "nll": nll,
                "perplexity": math.exp(nll) if nll < 700 else math.inf,
                "accuracy": correct / max(tokens, 1.0), "target_tokens": tokens}
