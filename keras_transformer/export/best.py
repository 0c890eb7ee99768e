"""Export on best (OpenNMT-tf's ``export_on_best: bleu``, Model Garden's best-checkpoint exporter):
while a run trains, each dev evaluation whose BLEU beats every earlier one is exported for serving.

    train_run(..., callbacks=[ExportBest()])      # --export_best

The exports are ``model_dir/best_export/<step>`` and ``model_dir/best_export_ids/<step>``
(``export_for_serving``: the same writer as every export, so a version appears whole or not at
all); point TF Serving's ``--model_base_path`` at ``best_export``. Once a new best is written the
older versions are deleted, so the run keeps exactly one. A kill while exporting leaves the
previous best untouched (the half-written one is a temporary folder, cleared at the next export).
Each export records its step and dev BLEU in ``assets/config.json`` (``"selected"``), which is
also how a resumed run knows the best score to beat. With an EMA (``ema_decay``) the dev BLEU and
the export are the moving average's, as every dev evaluation is.
"""

import math
import os
import re

import tensorflow as tf
from absl import logging

from keras_transformer import runs, writing
from keras_transformer.export.common import recorded_settings
from keras_transformer.export.saved_model import export_for_serving
from keras_transformer.inference import DecodingConfig, Translator
from keras_transformer.tokenizer import SubwordTokenizer
from keras_transformer.training.callbacks import Callback


class ExportBest(Callback):
    """Exports the model whenever the dev BLEU (``logs["bleu"]``, from a ``DevBleu`` placed
    before this callback) is the best of the run so far; only the chief writes. The vocabulary
    and the corpus the exports carry are the run folder's own (``vocab.model``, ``config.json``),
    as for ``python -m trainers.export`` of the same run."""

    requires_dev_bleu = True

    def __init__(self, decoding_config=DecodingConfig()):
        self.decoding_config = decoding_config
        self.tokenizer = self.data_config = self.best = self.paths = self.translator = None

    def _bases(self):
        """The two base folders ``export_for_serving`` writes (text, ids) in the run folder."""
        model_dir = self.trainer.config.model_dir
        return [os.path.join(model_dir, runs.BEST_EXPORT),
                os.path.join(model_dir, f"{runs.BEST_EXPORT}_ids")]

    def on_begin(self, step):
        if not self.trainer.chief:
            return
        model_dir = self.trainer.config.model_dir
        self.tokenizer = SubwordTokenizer.load(os.path.join(model_dir, runs.VOCABULARY_FILE))
        self.data_config = runs.data_config(runs.read_config(model_dir))
        # A resumed run beats the best it exported before, not its first evaluation.
        selected = (recorded_settings(self._bases()[0]) or {}).get("selected") or {}
        self.best = selected.get("dev_bleu")
        self.translator = None  # made at this run's first export, of this trainer's model

    def on_dev(self, step, logs):
        if not self.trainer.chief:
            return
        if "bleu" not in logs:
            raise ValueError("export_best needs the dev BLEU (a DevBleu callback before it, "
                             "dev_bleu_sentences > 0).")
        bleu = logs["bleu"]
        if (math.isnan(bleu)  # NaN: the dev BLEU failed
                or (self.best is not None and bleu <= self.best)
                # this step's weights are exported already (a resumed run's repeat)
                or any(os.path.isdir(os.path.join(base, str(step))) for base in self._bases())):
            return
        if self.translator is None:
            # One translator for the run: its signatures are traced at the first export and read
            # the model's variables, so every later export writes that step's weights as they are.
            self.translator = Translator(self.trainer.model, self.tokenizer, self.decoding_config)
            self.translator.data_config = self.data_config
        translator = self.translator
        translator.selected = {"step": step, "dev_bleu": bleu}
        try:
            self.paths = export_for_serving(translator, self.trainer.config.model_dir,
                                            runs.BEST_EXPORT, version=step)
        except (ValueError, OSError, tf.errors.OpError) as error:
            # As for the dev BLEU: a failed export (a full disk) must not end a long run; the
            # previous best stays whole, and the next improvement tries again.
            logging.warning("export of the best dev BLEU failed at step %d (training goes on; "
                            "the previous export is kept): %s", step,
                            (str(error).strip().splitlines() or [type(error).__name__])[0])
            return
        self.best = bleu
        for base in self._bases():  # the new best is complete: the older ones go
            for name in os.listdir(base):
                if re.fullmatch(r"\d+", name) and name != str(step):
                    writing.remove_folder(os.path.join(base, name))
        logs["exported"] = self.paths[0]  # the progress line says so
