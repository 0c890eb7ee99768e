"""A model's weights: building a ``Transformer`` from its ``TransformerConfig`` in a precision, the
``tf.train.Checkpoint`` that holds its variables, and restoring them from a checkpoint path.

Where the checkpoints of a run lie and which one a name (latest, averaged, ema, best) means is the
run folder's business (``runs``); this module knows only a model and a checkpoint prefix, so that
training, the run folder and the programs build and restore models the same way, and which
version folder of an export holds the SavedModel (``exported_version_path``; cheap to import,
so that the programs check their flags before TensorFlow is loaded).
"""

import os
from typing import Optional

# --mixed_precision value -> Keras dtype policy (variables stay float32 in both mixed modes).
PRECISION_POLICIES = {"float32": "float32", "bfloat16": "mixed_bfloat16",
                      "float16": "mixed_float16"}


def exported_version_path(path: str) -> str:
    """``path`` if it holds a ``saved_model.pb``, else its highest numeric version folder that
    does; a ValueError naming the path if there is none."""
    if os.path.isfile(os.path.join(path, "saved_model.pb")):
        return path
    if not os.path.isdir(path):
        raise ValueError(f"SavedModel {path} does not exist.")
    versions = [int(n) for n in os.listdir(path)
                if n.isdigit() and os.path.isfile(os.path.join(path, n, "saved_model.pb"))]
    if not versions:
        raise ValueError(f"{path} holds no saved_model.pb and no numeric version folder with one.")
    return os.path.join(path, str(max(versions)))


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


# Where ``model_checkpoint`` keeps the model's i-th variable in a checkpoint file.
MODEL_VARIABLE_KEY = "model_variables/{}/.ATTRIBUTES/VARIABLE_VALUE"


def _misfit(model, path: str) -> Optional[str]:
    """Why the checkpoint ``path`` cannot be restored into the built ``model`` (None if it can),
    found from the checkpoint's index alone: the number of model variables it holds, or the
    shape or dtype of the first that differs from the model's.

    Checked before restoring because a restore that fails half-way leaves TensorFlow's restore
    status to be deleted without ``expect_partial()``: its deletion logs one warning per value
    of the file left unread (all the optimizer slots of a training checkpoint), hundreds of
    lines burying the one that says what is wrong."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(path)
    shapes = reader.get_variable_to_shape_map()
    dtypes = reader.get_variable_to_dtype_map()
    variables = model.variables
    prefix, suffix = MODEL_VARIABLE_KEY.split("{}")
    held = sum(1 for key in shapes if key.startswith(prefix) and key.endswith(suffix))
    if held != len(variables):
        return f"it holds {held} model variables, the model has {len(variables)}"
    for index, variable in enumerate(variables):
        key = MODEL_VARIABLE_KEY.format(index)
        name = getattr(variable, "path", None) or variable.name
        if key not in shapes:
            return f"it lacks model variable {index} ({name})"
        mine, theirs = tuple(variable.shape), tuple(shapes[key])
        if mine != theirs:
            return (f"variable {name} has shape {theirs} in the checkpoint, "
                    f"{mine} in the model")
        mine, theirs = tf.as_dtype(variable.dtype), tf.as_dtype(dtypes[key])
        if mine != theirs:
            return (f"variable {name} has dtype {theirs.name} in the checkpoint, "
                    f"{mine.name} in the model")
    return None


def restore_model(model, path: str, config_path: Optional[str] = None) -> None:
    """Loads the model variables of checkpoint ``path`` (a training or averaged checkpoint)
    into the built ``model``; optimizer state in the file is ignored.

    A missing checkpoint, or one of another architecture, is a one-line ValueError naming
    ``path`` (and ``config_path``, the config.json that describes ``model``, if given), and
    nothing else: one that does not fit (``_misfit``) is refused before TensorFlow restores
    anything, so no warnings about values left unread come with it."""
    import tensorflow as tf

    if not tf.io.gfile.exists(path + ".index"):
        raise ValueError(f"Checkpoint {path!r} does not exist (no {path}.index).")
    described = f" of {config_path}" if config_path else ""
    try:
        reason = _misfit(model, path)
    except tf.errors.OpError as error:  # an unreadable index
        reason = str(error)
    if reason is None:
        try:
            # The optimizer slots, step and training time of a training checkpoint are left
            # unread on purpose: expect_partial() says so (no warnings about them).
            model_checkpoint(model).read(path).expect_partial().assert_existing_objects_matched()
        # What the index cannot show (damaged data): an OpError, or an IndexError if cut short.
        except (ValueError, AssertionError, IndexError, tf.errors.OpError) as error:
            reason = str(error) or type(error).__name__
    if reason is not None:
        first = (reason.strip().splitlines() or [""])[0]
        raise ValueError(f"checkpoint {path} does not fit the model{described}: "
                         f"{first[:300]}") from None
