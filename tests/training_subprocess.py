"""Child process for tests/test_training.py: things that need a fresh TensorFlow (logical CPU
devices are fixed at start-up), several processes (multi-worker), or a process to kill.

    python tests/training_subprocess.py mirrored OUT.json
    python tests/training_subprocess.py train OUT.json MODEL_DIR STEPS [--strategy=S]
        [--checkpoint_every_steps=N] [--sleep=SECONDS] [--reference=MODEL_DIR]

    python tests/training_subprocess.py uneven OUT.json MODEL_DIR   (TF_CONFIG of 2 workers)

Prints nothing useful; results go to OUT.json (written atomically).
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

TOY = dict(task="reverse", vocab_size=16, global_batch_size=16, min_length=2, max_length=6)


def write(path, value):
    with open(path + ".partial", "w") as stream:
        json.dump(value, stream)
    os.replace(path + ".partial", path)


def global_batch(num_examples=8):
    """A batch whose padding is very uneven between its halves (so per-replica means differ
    from the global mean)."""
    import numpy as np

    rng = np.random.default_rng(0)
    source = rng.integers(4, 24, size=(num_examples, 7)).astype(np.int32)
    target = rng.integers(4, 24, size=(num_examples, 6)).astype(np.int32)
    for row in range(num_examples // 2):  # first half: mostly padding
        source[row, 2 + row % 2:] = 0
        target[row, 1 + row % 2:] = 0
    target_in = np.concatenate([np.full((num_examples, 1), 2, np.int32), target[:, :-1]], 1)
    return (source, target_in), target


def mirrored(out):
    from keras_transformer.training.strategy import make_strategy

    strategy = make_strategy("mirrored", num_cpu_devices=2)
    import keras
    import numpy as np
    import tensorflow as tf

    import keras_transformer as kt
    from keras_transformer.training import LabelSmoothedCrossEntropy, TrainStep

    config = kt.TransformerConfig.from_preset("tiny", vocab_size=24)
    (source, target_in), target = global_batch()

    def build(strat, optimizer_fn):
        with strat.scope():
            keras.utils.set_random_seed(7)
            model = kt.Transformer(config)
            model((tf.ones([1, 2], tf.int32),) * 2)
            optimizer = optimizer_fn()
            optimizer.build(model.trainable_variables)
        return model, optimizer

    def distributed(strat):
        def value_fn(context):
            n = len(target) // context.num_replicas_in_sync
            part = slice(context.replica_id_in_sync_group * n,
                         (context.replica_id_in_sync_group + 1) * n)
            inputs = (tf.constant(source[part]), tf.constant(target_in[part]))
            return inputs, tf.constant(target[part])
        return strat.experimental_distribute_values_from_function(value_fn)

    def custom_loop(strat, optimizer_fn, jit=False, steps=2, norms=None):
        model, optimizer = build(strat, optimizer_fn)
        step = TrainStep(model, optimizer, strat, jit_compile=jit)
        batch = distributed(strat)
        losses = []
        for _ in range(steps):
            stats = step.step_on_batches((batch,))
            losses.append(float(stats["loss_sum"]))
            if norms is not None:
                norms.append(float(stats["grad_norm"]))
        momentum = [v for v in optimizer.variables if "momentum" in v.path]  # Adam's first moment
        if norms is not None and momentum:
            norms.append(float(tf.linalg.global_norm(momentum)) / (1 - 0.9))
        return losses, [v.numpy() for v in model.trainable_variables]

    def reference_gradient_norm():
        """The gradient of the mean label-smoothed loss over the global batch, on one device."""
        from keras_transformer.training.loss import label_smoothed_cross_entropy

        model, _ = build(tf.distribute.get_strategy(), lambda: keras.optimizers.SGD(0.5))
        with tf.GradientTape() as tape:
            logits = model((tf.constant(source), tf.constant(target_in)), training=True)
            loss_sum, tokens = label_smoothed_cross_entropy(tf.constant(target), logits, 0.1)
            loss = loss_sum / tokens
        return float(tf.linalg.global_norm(tape.gradient(loss, model.trainable_variables)))

    def fit(strat):
        model, optimizer = build(strat, lambda: keras.optimizers.SGD(0.5))
        with strat.scope():
            model.compile(optimizer=optimizer, loss=LabelSmoothedCrossEntropy(0.1))
            # Build the compiled loss on real ids: under a strategy Keras otherwise builds it on
            # the replicas' batches averaged with reduce("MEAN"), which turns int ids to floats.
            x = (tf.constant(source), tf.constant(target_in))
            model.compute_loss(x=x, y=tf.constant(target), y_pred=model(x))
        data = tf.data.Dataset.from_tensors(((source, target_in), target)).repeat(2)
        model.fit(data, epochs=1, verbose=0)
        return [v.numpy() for v in model.trainable_variables]

    def max_diff(a, b):
        return float(max(np.abs(x - y).max() for x, y in zip(a, b)))

    one = tf.distribute.get_strategy()
    sgd = lambda: keras.optimizers.SGD(0.5)  # noqa: E731
    sgd_norms_one, sgd_norms_two, paper_norms_two = [], [], []
    sgd_one, sgd_one_weights = custom_loop(one, sgd, norms=sgd_norms_one)
    sgd_two, sgd_two_weights = custom_loop(strategy, sgd, norms=sgd_norms_two)
    from keras_transformer.training.schedule import paper_optimizer

    custom_loop(strategy, lambda: paper_optimizer(32, warmup_steps=4), steps=1,
                norms=paper_norms_two)
    jit_two, _ = custom_loop(strategy, sgd, jit=True)
    _, initial = custom_loop(one, sgd, steps=0)
    fit_one = fit(one)
    fit_two = fit(strategy)
    write(out, {
        "replicas": strategy.num_replicas_in_sync,
        "sgd_losses": [sgd_one, sgd_two],
        "jit_mirrored_losses": jit_two,
        "sgd_weight_diff": max_diff(sgd_one_weights, sgd_two_weights),
        "sgd_weight_change": max_diff(sgd_one_weights, initial),
        "fit_vs_custom_loop_diff": max_diff(fit_one, sgd_one_weights),
        "fit_mirrored_vs_one_diff": max_diff(fit_one, fit_two),
        "reference_gradient_norm": reference_gradient_norm(),
        "sgd_grad_norms": [sgd_norms_one[0], sgd_norms_two[0]],
        # [the step's grad_norm, |Adam's first moment| / (1 - beta_1)] on two devices
        "paper_grad_norms_two": paper_norms_two,
    })


def train(out, model_dir, steps, options):
    """Trains ``steps`` in ``model_dir`` (resuming from its checkpoints); with
    ``--reference=DIR``, then trains a run never interrupted, from scratch in DIR, in this same
    process (seeded again as a fresh process is), its summary in OUT.reference.json."""
    strategy_name = options.get("strategy", "default")
    from keras_transformer.training.strategy import make_strategy

    strategy = make_strategy(strategy_name)
    import time

    import keras
    import numpy as np
    import tensorflow as tf

    import keras_transformer as kt
    from keras_transformer.training import Callback, Trainer, TrainingConfig
    from toy import toy_dataset_fn

    tf.config.experimental.enable_op_determinism()
    sleep = float(options.get("sleep", 0))

    class Slow(Callback):
        def on_log(self, step, logs):
            time.sleep(sleep)

    def run(out, model_dir, every):
        keras.utils.set_random_seed(3)
        config = kt.TransformerConfig.from_preset("tiny", vocab_size=TOY["vocab_size"])
        trainer = Trainer(config, TrainingConfig(
            model_dir=model_dir, train_steps=steps, warmup_steps=20, log_every_steps=1,
            checkpoint_every_steps=int(every) if every else None, checkpoint_every_minutes=None),
            strategy)
        summary = trainer.fit(toy_dataset_fn(**TOY), callbacks=[Slow()] if sleep else [])
        weights = [v.numpy() for v in trainer.model.trainable_variables]
        summary["weight_sum"] = float(sum(np.abs(w).sum() for w in weights))
        summary["weights_file"] = os.path.join(out + ".npz")
        np.savez(summary["weights_file"], *weights)
        write(out, summary)

    run(out, model_dir, options.get("checkpoint_every_steps"))
    if options.get("reference"):
        run(out + ".reference.json", options["reference"], None)


def uneven(out, model_dir):
    """Two workers whose shards differ tenfold (training and dev): they must take the same steps,
    not hang, and agree on the dev loss of all the dev examples."""
    from keras_transformer.training.strategy import make_strategy

    strategy = make_strategy("multi_worker_mirrored")
    import keras
    import tensorflow as tf

    import keras_transformer as kt
    from keras_transformer.training import Trainer, TrainingConfig, TrainStep
    from toy import toy_batch

    def batches(first, count):
        return tf.data.Dataset.range(count).map(lambda k: toy_batch(
            first + k, task="reverse", vocab_size=16, batch_size=8, min_length=2, max_length=6))

    dev_shards = [(0, 10), (10, 1)]  # worker 0: ten dev batches, worker 1: one
    train_shards = [(100, 20), (200, 2)]

    keras.utils.set_random_seed(3)
    trainer = Trainer(kt.TransformerConfig.from_preset("tiny", vocab_size=16), TrainingConfig(
        model_dir=model_dir, train_steps=12, warmup_steps=4, log_every_steps=1,
        dev_every_steps=5, checkpoint_every_minutes=None), strategy)
    summary = trainer.fit(lambda context: batches(*train_shards[context.input_pipeline_id]),
                          lambda context: batches(*dev_shards[context.input_pipeline_id]))
    # The reference: all dev batches of both shards, on this process alone.
    everything = batches(*dev_shards[0]).concatenate(batches(*dev_shards[1]))
    alone = TrainStep(trainer.model, trainer.optimizer, tf.distribute.get_strategy())
    summary["dev_loss_alone"] = alone.evaluate(everything)["loss"]
    write(out, summary)


if __name__ == "__main__":
    mode, out = sys.argv[1], sys.argv[2]
    if mode == "mirrored":
        mirrored(out)
    elif mode == "train":
        opts = dict(a[2:].split("=", 1) for a in sys.argv[5:])
        train(out, sys.argv[3], int(sys.argv[4]), opts)
    elif mode == "uneven":
        uneven(out, sys.argv[3])
    else:
        raise SystemExit(f"unknown mode {mode!r}")
