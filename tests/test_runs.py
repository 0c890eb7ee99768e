"""keras_transformer/runs.py: which checkpoint of a run is used when none is named (averaged, else
the moving average, else best, else latest; section 6.1 decodes with averaged weights), and what is
said when none exists."""

import os
import time

import pytest
import tensorflow as tf

from keras_transformer import runs


def write(prefix, value):
    """A checkpoint at exactly ``prefix`` (``.../ckpt-N`` is also named in the folder's index)."""
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    path = tf.train.Checkpoint(v=tf.Variable(float(value))).write(prefix)
    if os.path.basename(prefix).startswith("ckpt-"):
        tf.compat.v1.train.update_checkpoint_state(os.path.dirname(prefix), path)
    time.sleep(0.05)  # distinct modification times
    return path


def test_the_default_is_averaged_else_best_else_latest(tmp_path):
    run = str(tmp_path)
    with pytest.raises(ValueError, match="no checkpoint in"):
        runs.default_checkpoint(run)
    latest = write(os.path.join(run, "ckpt-1"), 1)
    assert runs.default_checkpoint(run) == (runs.LATEST, latest)
    best = write(os.path.join(run, runs.BEST_PREFIX), 2)
    assert runs.default_checkpoint(run) == (runs.BEST, best)
    averaged = write(os.path.join(run, runs.AVERAGED_PREFIX), 3)
    assert runs.default_checkpoint(run) == (runs.AVERAGED, averaged)
    assert runs.resolve_checkpoint(run) == averaged
    assert runs.resolve_checkpoint(run, runs.LATEST) == latest
    # Training went on after the average: it is stale, the best (older by nature) is used.
    newer = write(os.path.join(run, "ckpt-2"), 4)
    assert runs.default_checkpoint(run) == (runs.BEST, best)
    os.remove(best + ".index")
    assert runs.default_checkpoint(run) == (runs.LATEST, newer)


def test_the_moving_average_comes_after_the_averaged_and_before_the_best(tmp_path):
    run = str(tmp_path)
    write(os.path.join(run, "ckpt-1"), 1)
    best = write(os.path.join(run, runs.BEST_PREFIX), 2)
    ema = write(os.path.join(run, runs.EMA_PREFIX), 3)
    assert runs.default_checkpoint(run) == (runs.EMA, ema)
    assert runs.resolve_checkpoint(run, runs.EMA) == ema
    averaged = write(os.path.join(run, runs.AVERAGED_PREFIX), 4)
    assert runs.default_checkpoint(run) == (runs.AVERAGED, averaged)
    # Training went on after both were written: both are stale, the best is used.
    write(os.path.join(run, "ckpt-2"), 5)
    assert runs.default_checkpoint(run) == (runs.BEST, best)
    assert runs.resolve_checkpoint(run, runs.EMA) == ema  # named, it is still there
