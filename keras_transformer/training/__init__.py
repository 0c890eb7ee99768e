"""The paper's training recipe (sections 5.2-5.4, 6.1) for any ``tf.distribute`` strategy."""

from keras_transformer.training.callbacks import Callback, ProgressLine, TensorBoard
from keras_transformer.training.checkpoints import (Checkpointer, average_checkpoints,
                                                    checkpoint_paths, model_checkpoint,
                                                    restore_model, write_averaged_checkpoint)
from keras_transformer.training.loss import (LabelSmoothedCrossEntropy,
                                             label_smoothed_cross_entropy, token_accuracy_counts)
from keras_transformer.training.schedule import TransformerSchedule, paper_optimizer
from keras_transformer.training.step import TrainStep
from keras_transformer.training.strategy import (PRECISIONS, STRATEGIES, configure_cpu_devices,
                                                 is_chief, make_strategy, resolve_precision)
from keras_transformer.training.trainer import (PRECISION_POLICIES, NonFiniteError, Trainer,
                                                TrainingConfig, build_model)

__all__ = [
    "Callback", "Checkpointer", "LabelSmoothedCrossEntropy", "NonFiniteError",
    "PRECISION_POLICIES", "PRECISIONS", "ProgressLine", "STRATEGIES", "TensorBoard", "TrainStep", "Trainer",
    "TrainingConfig", "TransformerSchedule", "average_checkpoints", "build_model",
    "checkpoint_paths", "configure_cpu_devices", "is_chief", "label_smoothed_cross_entropy",
    "make_strategy", "model_checkpoint", "paper_optimizer",
    "resolve_precision", "restore_model",
    "token_accuracy_counts", "write_averaged_checkpoint",
]
