"""keras_transformer/runs.py: which checkpoint of a run is used when none is named (averaged, else
best, else latest; section 6.1 decodes with averaged weights), and what is said when none exists."""

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
