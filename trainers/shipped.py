"""The trained model that comes with the project: the main job's model, exported, so that
``translate``, the notebooks and the API snippet have something to translate with before any
training of the user's own (saved_models/README.md says how it was trained and what it scores)."""

import os
from typing import Optional

SHIPPED_NAME = "quickstart"
# Where the main job (trainers.quickstart) trains by default, relative to the working directory.
MAIN_JOB_RUN = os.path.join("runs", "quickstart")


def _has_version(base: str) -> bool:
    return os.path.isdir(base) and any(
        name.isdigit() and os.path.isfile(os.path.join(base, name, "saved_model.pb"))
        for name in os.listdir(base))


def shipped_model_dir() -> Optional[str]:
    """The shipped SavedModel's base folder (``<base>/<version>/saved_model.pb``), or None when this
    copy of the project has none.

    Two places, one per way of having the project: a clone (or an editable install of one) keeps
    it in the project's saved_models/, beside trainers/; the wheel carries the same folder as
    package data, inside this package (setup.cfg maps saved_models/ to
    ``keras_transformer_trainers.saved_models``)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for base in (os.path.join(os.path.dirname(here), "saved_models", SHIPPED_NAME),
                 os.path.join(here, "saved_models", SHIPPED_NAME)):
        if _has_version(base):
            return base
    return None


def model_from_export(path: str):
    """(Keras ``Transformer``, ``SubwordTokenizer``) of a SavedModel written by the project's
    export (``path``: the base folder or one version), for what the serving signatures do not
    show, such as the attention maps. The weights are the SavedModel's own variables, matched to
    the model's by their path inside the model (a Keras 3 variable's TensorFlow variable, which the
    export keeps, is named by it); a missing one is a ValueError naming the export."""
    import json

    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops of the text signatures)

    from keras_transformer.config import TransformerConfig
    from keras_transformer.export.common import CONFIG_ASSET, VOCABULARY_ASSET
    from keras_transformer.inference import exported_version_path
    from keras_transformer.tokenizer import SubwordTokenizer
    from keras_transformer.weights import build_model

    def inside_model(name):  # without the model's own name, which Keras numbers per process
        return name.removesuffix(":0").split("/", 1)[-1]

    path = exported_version_path(path)
    with open(os.path.join(path, "assets", CONFIG_ASSET), encoding="utf-8") as stream:
        config = TransformerConfig.from_dict(json.load(stream)["model"])
    model = build_model(config)
    saved = {inside_model(v.name): v for v in tf.saved_model.load(path)._all_variables}
    for variable in model.weights:  # not the dropout layers' seed states, which no export keeps
        value = saved.get(inside_model(variable.path))
        if value is None or value.shape != variable.shape:
            raise ValueError(f"{path}: no variable {inside_model(variable.path)} of shape "
                             f"{list(variable.shape)} (the model its config.json describes)")
        variable.assign(value)
    return model, SubwordTokenizer.load(os.path.join(path, "assets", VOCABULARY_ASSET))
