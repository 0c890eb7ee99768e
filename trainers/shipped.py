"""The trained model that comes with the project: the main job's model, exported, so that
``translate``, the notebooks and the API snippet have something to translate with before any
training of the user's own (saved_models/README.md says how it was trained and what it scores)."""

import os
from typing import Optional

from . import checks

SHIPPED_NAME = "quickstart"
# Where the main job (trainers.quickstart) trains by default, relative to the working directory.
MAIN_JOB_RUN = os.path.join("runs", "quickstart")


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
        if checks.holds_saved_model(base):
            return base
    return None
