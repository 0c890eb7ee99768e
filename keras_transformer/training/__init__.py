"""The paper's training recipe (sections 5.2-5.4, 6.1) for any ``tf.distribute`` strategy."""

import importlib

# Imported on first use (PEP 562), as in keras_transformer/__init__.py: a program that only parses
# its flags (their choices come from strategy.py's lists) does not start TensorFlow.
_MODULES = {
    "callbacks": ("Callback", "ProgressLine", "TensorBoard", "tensorboard_command"),
    "early_stopping": ("EarlyStopping",),
    "ema": ("moving_average_weights", "moving_averages"),
    "checkpoints": ("Checkpointer", "average_checkpoints", "average_run", "checkpoint_paths",
                    "checkpoint_step", "last_checkpoints", "training_seconds",
                    "write_averaged_checkpoint"),
    "loss": ("LabelSmoothedCrossEntropy", "label_smoothed_cross_entropy", "loss_accuracy_and_nll",
             "loss_and_accuracy", "projected_loss_and_accuracy", "token_accuracy_counts"),
    "schedule": ("TransformerSchedule", "paper_optimizer"),
    "speed": ("seconds_per_update", "seconds_per_update_of_run"),
    "step": ("TrainStep",),
    "strategy": ("PRECISIONS", "STRATEGIES", "bfloat16_cpu", "configure_cpu_devices", "is_chief",
                 "make_strategy", "precision_note", "resolve_precision", "tf_config",
                 "worker_count"),
    "trainer": ("NonFiniteError", "Trainer", "TrainingConfig", "WorkerLostError"),
}
_EXPORTS = {name: module for module, names in _MODULES.items() for name in names}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"keras_transformer.training.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'keras_transformer.training' has no attribute {name!r}")
