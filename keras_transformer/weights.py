"""A model's weights: building a ``Transformer`` from its ``TransformerConfig`` in a precision, the
``tf.train.Checkpoint`` that holds its variables, and restoring them from a checkpoint path.

Where the checkpoints of a run lie and which one a name (latest, averaged, ema, best) means is the
run folder's business (``runs``); this module knows only a model and a checkpoint prefix, so that
training, the run folder and the programs build and restore models the same way.
"""

from typing import Optional

# --mixed_precision value -> Keras dtype policy (variables stay float32 in both mixed modes).
PRECISION_POLICIES = {"float32": "float32", "bfloat16": "mixed_bfloat16",
                      "float16": "mixed_float16"}


def build_model(model_config, mixed_precision: str = "float32"):
    """A built ``Transformer`` (variables created) with the dtype policy of ``mixed_precision``."""
    import tensorflow as tf

    from keras_transformer.model import Transformer

    model = Transformer(model_config, dtype=PRECISION_POLICIES[mixed_precision])
    dummy = tf.ones([1, 2], tf.int32)
    model((dummy, dummy), training=False)
    return model


def model_checkpoint(model, **others):
    """A ``tf.train.Checkpoint`` holding every variable of ``model`` (plus ``others``).

    Keras 3 does not expose layers kept in Python lists (the encoder's N layers) to
    ``tf.train.Checkpoint``'s object graph, so ``Checkpoint(model=model)`` alone would save the
    embeddings only. The variables are therefore also tracked as one list, in the model's
    deterministic variable order (same code and config, same order).
    """
    import tensorflow as tf

    return tf.train.Checkpoint(model=model, model_variables=list(model.variables), **others)


def restore_model(model, path: str, config_path: Optional[str] = None) -> None:
    """Loads the model variables of checkpoint ``path`` (a training or averaged checkpoint)
    into the built ``model``; optimizer state in the file is ignored.

    A missing checkpoint, or one of another architecture, is a one-line ValueError naming
    ``path`` (and ``config_path``, the config.json that describes ``model``, if given)."""
    import tensorflow as tf

    if not tf.io.gfile.exists(path + ".index"):
        raise ValueError(f"Checkpoint {path!r} does not exist (no {path}.index).")
    try:
        model_checkpoint(model).read(path).expect_partial().assert_existing_objects_matched()
    # Variables of another shape are a ValueError, variables the file lacks an AssertionError, an
    # unreadable file an OpError: all three say the checkpoint is not this model's.
    except (ValueError, AssertionError, tf.errors.OpError) as error:
        described = f" of {config_path}" if config_path else ""
        raise ValueError(f"checkpoint {path} does not fit the model{described}: "
                         f"{str(error).splitlines()[0][:300]}") from None
