"""Dev-set BLEU during training: what section 6.1's choices (beam, alpha) were tuned on.

``DevBleu`` translates a fixed subset of the dev set at every dev evaluation of the ``Trainer`` and
puts the sacreBLEU score into the shared logs as ``logs["bleu"]`` and sacreBLEU's chrF2 as
``logs["chrf"]``, so the progress line and the ``TensorBoard`` callback (placed after it) show and
record them with the dev loss, and the first ``SAMPLES`` translations as ``logs["samples"]``
(source, reference, translation), which ``TensorBoard`` shows as text. With ``keep_best`` it also
writes the weights of the best-BLEU evaluation to ``model_dir/best/ckpt`` (+ ``best.json``):
the best is chosen on BLEU, as early stopping and the best export are; chrF is shown beside it.
On a multi-worker job only the chief translates.
"""

import json
import os
from typing import Sequence

import tensorflow as tf
from absl import logging

from keras_transformer.evaluation import chrf_score, sacrebleu_score
from keras_transformer.inference import BATCH_SIZE, DecodingConfig, Translator, translate_in_batches
from keras_transformer.runs import BEST_PREFIX, BEST_RECORD
from keras_transformer.training.callbacks import Callback
from keras_transformer.training.checkpoints import write_model_checkpoint


class DevBleu(Callback):
    SAMPLES = 4

    def __init__(self, tokenizer, sources: Sequence[str], references: Sequence[str],
                 decoding_config: DecodingConfig = DecodingConfig(), batch_size: int = BATCH_SIZE,
                 keep_best: bool = False):
        if len(sources) != len(references) or not sources:
            raise ValueError(f"DevBleu needs as many references as sources (got {len(sources)} and "
                             f"{len(references)}), at least one.")
        self.tokenizer = tokenizer
        self.sources, self.references = list(sources), list(references)
        self.decoding_config = decoding_config
        self.batch_size = batch_size
        self.keep_best = keep_best
        self.best = None
        self._translator = None

    def _translate_fn(self):
        # One translator, whose text function is traced once and reads the model's variables when
        # it runs: every evaluation translates with the current weights.
        if self._translator is None:
            self._translator = Translator(self.trainer.model, self.tokenizer, self.decoding_config)
        return self._translator.text_function()

    def on_begin(self, step):
        # A resumed run keeps the best of its earlier runs unless it beats it.
        if self.keep_best and self.best is None:
            path = os.path.join(self.trainer.config.model_dir, BEST_RECORD)
            try:
                with tf.io.gfile.GFile(path) as stream:
                    self.best = float(json.load(stream)["bleu"])
            except (tf.errors.NotFoundError, ValueError, KeyError, TypeError):
                self.best = None

    def on_dev(self, step, logs):
        if not self.trainer.chief:
            return  # the chief's alone (a multi-worker job's trainer shares it with the others)
        try:
            results = translate_in_batches(self._translate_fn(), self.sources, self.batch_size)
        except (tf.errors.OpError, ValueError, TypeError) as error:
            # A diagnostic must not end a long training run; the failure is shown, not hidden.
            first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
            logging.warning("dev BLEU failed at step %d (training goes on): %s: %s", step,
                            type(error).__name__, first_line)
            logs["bleu"] = logs["chrf"] = float("nan")
            return
        translations = [r["translation"] for r in results]
        bleu = sacrebleu_score(translations, self.references)
        logs["bleu"] = bleu.score
        logs["chrf"] = chrf_score(translations, self.references).score
        logs["samples"] = list(zip(self.sources, self.references, translations))[:self.SAMPLES]
        if self.keep_best and self.trainer.chief and (self.best is None or bleu.score > self.best):
            self.best = bleu.score
            directory = self.trainer.config.model_dir
            write_model_checkpoint(self.trainer.model, os.path.join(directory, BEST_PREFIX),
                                   record=(os.path.join(directory, BEST_RECORD), json.dumps(
                                       {"step": step, "bleu": bleu.score,
                                        "signature": bleu.signature})))
