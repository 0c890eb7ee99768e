"""The learning rate of Eq. (3) and the optimizer of section 5.3."""

import math

import keras
import numpy as np
import pytest

from keras_transformer.training.schedule import TransformerSchedule, paper_optimizer


def eq3(step_num, d_model, warmup_steps):
    """Eq. (3) written out from the paper."""
    return d_model ** -0.5 * min(step_num ** -0.5, step_num * warmup_steps ** -1.5)


@pytest.mark.parametrize("d_model,warmup", [(512, 4000), (1024, 4000), (256, 100)])
@pytest.mark.parametrize("step_num", [1, 2, 100, 3999, 4000, 4001, 10_000, 100_000, 300_000])
def test_schedule_matches_eq3(d_model, warmup, step_num):
    schedule = TransformerSchedule(d_model, warmup)
    # Keras passes the number of updates already applied: update number step_num gets step_num - 1.
    got = float(schedule(step_num - 1))
    assert got == pytest.approx(eq3(step_num, d_model, warmup), rel=1e-5)


def test_schedule_shape_and_scale():
    schedule = TransformerSchedule(512, 4000, scale=2.0)
    rates = np.array([float(schedule(s - 1)) for s in (1000, 2000, 4000, 8000, 16000)])
    assert rates[0] * 2 == pytest.approx(rates[1], rel=1e-5)  # linear warm-up
    assert rates[2] == pytest.approx(2.0 * 512 ** -0.5 * 4000 ** -0.5, rel=1e-5)  # peak
    assert rates[3] * math.sqrt(2) == pytest.approx(rates[2], rel=1e-5)  # inverse square root
    assert rates[4] * math.sqrt(2) == pytest.approx(rates[3], rel=1e-5)


def test_schedule_serialises():
    schedule = TransformerSchedule(256, 1234, scale=0.5)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert isinstance(restored, TransformerSchedule)
    assert restored.get_config() == {"d_model": 256, "warmup_steps": 1234, "scale": 0.5}
    assert float(restored(77)) == pytest.approx(float(schedule(77)))


def test_optimizer_is_the_papers_adam():
    optimizer = paper_optimizer(512)
    assert isinstance(optimizer, keras.optimizers.Adam)
    assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.9, 0.98, 1e-9)
    config = keras.optimizers.serialize(optimizer)
    restored = keras.optimizers.deserialize(config)
    assert isinstance(restored._learning_rate, TransformerSchedule)
    scaled = paper_optimizer(512, loss_scaling=True)
    assert isinstance(scaled, keras.optimizers.LossScaleOptimizer)


@pytest.mark.parametrize("kwargs", [dict(d_model=0), dict(d_model=8, warmup_steps=0),
                                    dict(d_model=8, scale=-1.0)])
def test_schedule_rejects_bad_values(kwargs):
    with pytest.raises(ValueError, match="TransformerSchedule"):
        TransformerSchedule(**kwargs)


def test_the_fused_adam_update_equals_keras_adam():
    """SummedGradientsAdam applies Adam with TensorFlow's fused kernel: the same weights and
    moments as keras.optimizers.Adam after several updates (inside tf.function, as training)."""
    import tensorflow as tf

    from keras_transformer.training.schedule import SummedGradientsAdam

    rng = np.random.default_rng(0)
    initial = [rng.normal(size=shape).astype("float32") for shape in ((5, 3), (3,))]
    results = []
    for cls in (SummedGradientsAdam, keras.optimizers.Adam):
        weights = [keras.Variable(value) for value in initial]
        optimizer = cls(learning_rate=TransformerSchedule(16, 4), beta_1=0.9, beta_2=0.98,
                        epsilon=1e-9)
        optimizer.build(weights)
        apply = tf.function(lambda grads: optimizer.apply(grads, weights))
        for step in range(4):
            grads = [tf.constant(np.sin(value * (step + 1)), tf.float32) for value in initial]
            apply(grads)
        graph = apply.get_concrete_function(grads).graph
        fused = [op for op in graph.get_operations() if op.type == "ResourceApplyAdam"]
        assert len(fused) == (2 if cls is SummedGradientsAdam else 0)
        results.append([np.asarray(v) for v in weights + optimizer.variables[1:]])
    assert len(results[0]) == len(results[1]) == 6  # the weights, then the moments
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)  # updates are ~1e-2
    assert not np.allclose(results[0][0], initial[0])
