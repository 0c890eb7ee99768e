"""A whole training run as one library call: corpus and vocabulary, batches, the model of a preset,
the Trainer with its dev loss, dev BLEU, progress lines and TensorBoard, and the run folder's own
copy of the vocabulary.

    summary = train_run(DataConfig(...), TrainingConfig(model_dir=...), preset="base")

``python -m trainers.wmt`` is flags -> configs -> this call; ``python -m trainers.quickstart``
calls it in-process with its own defaults. SIGTERM/SIGINT end it after the current step with a
checkpoint (``summary["stop_reason"]``); a NaN/Inf update raises ``NonFiniteError``.
"""

import dataclasses
import os
from typing import Callable, Optional

import tensorflow as tf
from absl import logging

from keras_transformer import data, runs, writing
from keras_transformer.config import TransformerConfig
from keras_transformer.training.callbacks import ProgressLine, TensorBoard, timestamped
from keras_transformer.training.strategy import describe, is_chief
from keras_transformer.training.trainer import Trainer, TrainingConfig


def train_run(data_config: data.DataConfig, training_config: TrainingConfig, preset: str = "base",
              model_overrides: Optional[dict] = None,
              strategy: Optional[tf.distribute.Strategy] = None, dev_bleu_sentences: int = 200,
              keep_best_bleu: bool = False, log: Callable[[str], None] = print,
              run_info: Optional[dict] = None) -> dict:
    """Trains the ``preset`` model (with ``model_overrides`` of its TransformerConfig fields) on
    ``data_config`` as ``training_config`` says; returns the summary (also in
    ``model_dir/summary.json``). ``log`` receives the start line and the progress lines.
    Data errors are ValueErrors naming the file, flag or split."""
    strategy = strategy or tf.distribute.get_strategy()
    tokenizer, _ = data.load_or_learn_tokenizer(data_config)
    train_fn = data.make_distributed_dataset_fn(data_config, tokenizer, "train", training=True,
                                                repeat=True)
    dev_fn = None
    try:
        data.load_text_pairs(data_config, "dev")
        dev_fn = data.make_distributed_dataset_fn(data_config, tokenizer, "dev", training=False)
    except ValueError as error:
        if "is not set" not in str(error):
            raise
        logging.warning("No dev data (%s): no dev loss.", error)

    model_config = TransformerConfig.from_preset(preset, vocab_size=tokenizer.vocab_size,
                                                 **(model_overrides or {}))
    info = {"data": dataclasses.asdict(data_config), "vocab_path": tokenizer.path,
            "preset": preset, "dev_bleu_sentences": dev_bleu_sentences, **(run_info or {})}
    trainer = Trainer(model_config, training_config, strategy, run_info=info)
    model_dir = training_config.model_dir
    chief = is_chief(strategy)
    if chief:  # the vocabulary travels with the checkpoints (what translate/export look for)
        writing.write_file(os.path.join(model_dir, runs.VOCABULARY_FILE), tokenizer.model_proto)
    callbacks = []
    if dev_fn is not None and dev_bleu_sentences:
        from keras_transformer.training.dev_bleu import DevBleu

        pairs = list(data.load_text_pairs(data_config, "dev", dev_bleu_sentences)
                     .as_numpy_iterator())
        callbacks.append(DevBleu(tokenizer, [s.decode() for s, _ in pairs],
                                 [t.decode() for _, t in pairs], keep_best=keep_best_bleu))
    callbacks.append(ProgressLine(log, training_config.train_steps))
    if chief:
        callbacks.append(TensorBoard(model_dir))
    log(timestamped(
        f"preset={preset} ({trainer.model.count_params():,} parameters), "
        f"strategy={describe(strategy)}, xla={training_config.jit_compile}, precision={training_config.mixed_precision}, "
        f"dataset={data_config.dataset}, vocabulary={tokenizer.vocab_size}, model_dir={model_dir}"))
    if chief:
        log(timestamped(f"TensorBoard: tensorboard --logdir={model_dir} "
                        "(pip install -e '.[tensorboard]' in the project folder)"))
    return trainer.fit(train_fn, dev_fn, callbacks)
