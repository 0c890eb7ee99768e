"""Learning rate of Eq. (3) and the optimizer of section 5.3.

    lrate = d_model^-0.5 * min(step_num^-0.5, step_num * warmup_steps^-1.5)        (3)

Keras calls a schedule with the number of updates already applied (0 before the first
update); the paper's ``step_num`` counts updates from 1, so update ``i`` (0-based) uses
``step_num = i + 1``. Without that shift the first update would have a learning rate of 0.
"""

from typing import Optional

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up for ``warmup_steps`` updates, then decay as ``step_num^-0.5`` (Eq. 3).

    ``scale`` multiplies the whole curve (1.0 is the paper); it is the knob people turn when
    they change the batch size or the number of replicas.
    """

    def __init__(self, d_model: int, warmup_steps: int = 4000, scale: float = 1.0):
        if int(d_model) <= 0:
            raise ValueError(f"TransformerSchedule: d_model must be positive, got {d_model!r}.")
        if int(warmup_steps) <= 0:
            raise ValueError(
                f"TransformerSchedule: warmup_steps must be positive, got {warmup_steps!r}."
            )
        if not float(scale) > 0:
            raise ValueError(f"TransformerSchedule: scale must be positive, got {scale!r}.")
        self.d_model = int(d_model)
        self.warmup_steps = int(warmup_steps)
        self.scale = float(scale)

    def __call__(self, step):
        step_num = tf.cast(step, tf.float32) + 1.0
        warmup = tf.cast(self.warmup_steps, tf.float32)
        rate = tf.math.rsqrt(tf.cast(self.d_model, tf.float32)) * tf.minimum(
            tf.math.rsqrt(step_num), step_num * warmup**-1.5
        )
        return self.scale * rate

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}


@keras.saving.register_keras_serializable(package="keras_transformer")
class SummedGradientsAdam(keras.optimizers.Adam):
    """Adam for gradients already summed across replicas (``TrainStep`` all-reduces them once
    itself, to report their norm and to let float16 loss scaling check the gradient that is
    applied). A Keras optimizer would sum them again under a distribution strategy."""

    gradients_are_summed = True

    def _all_reduce_sum_gradients(self, grads_and_vars):
        # Keras's hook for that second all-reduce (TensorFlow backend).
        return grads_and_vars

    def update_step(self, gradient, variable, learning_rate):
        """Keras's Adam update as TensorFlow's one fused kernel per variable (the same formula:
        m += (g - m)(1 - beta_1), v += (g^2 - v)(1 - beta_2), variable -= m lr sqrt(1 - beta_2^t)
        / (1 - beta_1^t) / (sqrt(v) + epsilon)) instead of some 25 small ops: a model of many
        small variables spends its step on their dispatch."""
        if self.amsgrad or not hasattr(variable, "handle"):
            return super().update_step(gradient, variable, learning_rate)
        dtype = variable.dtype
        index = self._get_variable_index(variable)
        step = tf.cast(self.iterations + 1, dtype)
        beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        tf.raw_ops.ResourceApplyAdam(
            var=variable.handle, m=self._momentums[index].value.handle,
            v=self._velocities[index].value.handle, beta1_power=tf.pow(beta_1, step),
            beta2_power=tf.pow(beta_2, step), lr=tf.cast(learning_rate, dtype), beta1=beta_1,
            beta2=beta_2, epsilon=tf.cast(self.epsilon, dtype), grad=tf.cast(gradient, dtype))


def paper_optimizer(d_model: int, warmup_steps: int = 4000, scale: float = 1.0,
                    loss_scaling: bool = False,
                    ema_decay: Optional[float] = None) -> keras.optimizers.Optimizer:
    """Adam(beta_1=0.9, beta_2=0.98, epsilon=1e-9) on the schedule of Eq. (3) (section 5.3).

    ``loss_scaling=True`` wraps it in a dynamic ``keras.optimizers.LossScaleOptimizer``, which
    ``float16`` training needs (``bfloat16`` has float32's exponent range and does not).
    ``ema_decay``: the optimizer also keeps an exponential moving average of the trainable
    weights (Keras's ``use_ema``: the first update copies the weights, every later one mixes
    ``average = decay * average + (1 - decay) * weights``), an optimizer variable saved and
    restored with its checkpoints; see ``training/ema.py``.
    Create it inside ``strategy.scope()`` so its slots are mirrored like the weights.
    """
    ema = {} if ema_decay is None else {"use_ema": True, "ema_momentum": float(ema_decay)}
    optimizer = SummedGradientsAdam(
        learning_rate=TransformerSchedule(d_model, warmup_steps, scale),
        beta_1=0.9, beta_2=0.98, epsilon=1e-9, **ema,
    )
    if loss_scaling:
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer
