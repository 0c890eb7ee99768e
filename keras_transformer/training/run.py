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
from typing import Callable, Optional, Sequence

import tensorflow as tf
from absl import logging

from keras_transformer import data, runs, writing
from keras_transformer.config import TransformerConfig
from keras_transformer.training.callbacks import (Callback, ProgressLine, TensorBoard,
                                                  tensorboard_command, timestamped)
from keras_transformer.tokenizer import SubwordTokenizer
from keras_transformer.training import init_from
from keras_transformer.training.strategy import describe, is_chief, precision_note
from keras_transformer.training.trainer import Trainer, TrainingConfig

# Training sentence pairs on which a fine-tuned run measures how well the source's vocabulary
# covers its text: enough for a rate, cheap to tokenize.
COVERAGE_SAMPLE = 2000


def train_run(data_config: data.DataConfig, training_config: TrainingConfig, preset: str = "base",
              model_overrides: Optional[dict] = None,
              strategy: Optional[tf.distribute.Strategy] = None, dev_bleu_sentences: int = 200,
              keep_best_bleu: bool = False, log: Callable[[str], None] = print,
              run_info: Optional[dict] = None, callbacks: Sequence[Callback] = ()) -> dict:
    """Trains the ``preset`` model (with ``model_overrides`` of its TransformerConfig fields; its
    ``max_length`` is the data's longest example's unless they give it) on ``data_config`` as
    ``training_config`` says; returns the summary (also in
    ``model_dir/summary.json``). ``log`` receives the start line and the progress lines.
    ``callbacks`` run after the dev BLEU's and before the progress line's (e.g. the export of
    the best dev BLEU, ``export.ExportBest``). Data errors are ValueErrors naming the file, field
    or split (a file that does not exist: FileNotFoundError)."""
    for name, value, kind, example in (
            ("data_config", data_config, data.DataConfig, "DataConfig(dataset='files', ...)"),
            ("training_config", training_config, TrainingConfig, "TrainingConfig(model_dir=...)"),
            ("strategy", strategy or tf.distribute.get_strategy(), tf.distribute.Strategy,
             "training.make_strategy('mirrored')")):
        if not isinstance(value, kind):
            raise TypeError(f"{name}: a {kind.__name__} ({example}), got {value!r}.")
    strategy = strategy or tf.distribute.get_strategy()
    # The model settings first: a typo costs a second, not a vocabulary learned in vain.
    run_model_config(preset, model_overrides, data_config.effective_vocab_size, data_config)
    runs.check_data(training_config.model_dir, data_config)
    data_config = runs.data_to_resume(training_config.model_dir, data_config)
    init_from.check_resumed(training_config.model_dir, training_config.init_from)
    tokenizer, data_config, init_info = _vocabulary(data_config, training_config)
    train_fn = data.make_distributed_dataset_fn(data_config, tokenizer, "train", training=True,
                                                repeat=True)
    note = data.splits_note(data_config)
    if note:
        log(timestamped(f"data: {note}"))
    dev_fn = None
    try:
        data.load_text_pairs(data_config, "dev")
        dev_fn = data.make_distributed_dataset_fn(data_config, tokenizer, "dev", training=False)
    except ValueError as error:
        if "is not set" not in str(error):
            raise
        log(timestamped(f"data: no dev evaluations (no dev loss, no dev BLEU): {error}"))
    if training_config.early_stopping_patience and (
            dev_fn is None or (training_config.early_stopping_metric == "bleu"
                               and not dev_bleu_sentences)):
        raise ValueError(
            f"early_stopping_patience={training_config.early_stopping_patience} with "
            f"early_stopping_metric={training_config.early_stopping_metric} needs "
            + ("a dev set (dev_data)" if dev_fn is None else "dev BLEU (dev_bleu_sentences > 0)")
            + " to evaluate on.")
    for callback in callbacks:
        if callback.requires_dev_bleu and (dev_fn is None or not dev_bleu_sentences):
            raise ValueError(f"{type(callback).__name__} needs dev BLEU: "
                             + ("a dev set (dev_data)" if dev_fn is None
                                else "dev_bleu_sentences > 0") + ".")

    model_config = run_model_config(preset, model_overrides, tokenizer.vocab_size, data_config)
    model_dir = training_config.model_dir
    info = {"data": dataclasses.asdict(data_config), runs.WORKING_DIR_KEY: os.getcwd(),
            runs.DATA_DIGESTS_KEY: runs.data_digests(data_config, model_dir),
            "vocab_path": tokenizer.path, "preset": preset,
            "dev_bleu_sentences": dev_bleu_sentences, **(run_info or {})}
    if init_info:
        info[runs.INIT_FROM_KEY] = init_info
    trainer = Trainer(model_config, training_config, strategy, run_info=info)
    chief = is_chief(strategy)
    if chief:  # the vocabulary travels with the checkpoints (what translate/export look for)
        writing.write_file(os.path.join(model_dir, runs.VOCABULARY_FILE), tokenizer.model_proto)
    extra_callbacks, callbacks = list(callbacks), []
    if dev_fn is not None and dev_bleu_sentences:
        from keras_transformer.training.dev_bleu import DevBleu

        sources, references = data.read_pairs(data_config, "dev", dev_bleu_sentences)
        callbacks.append(DevBleu(tokenizer, sources, references, keep_best=keep_best_bleu))
    callbacks += extra_callbacks
    callbacks.append(ProgressLine(log, training_config.train_steps))
    if chief:
        callbacks.append(TensorBoard(model_dir))
    log(timestamped(
        f"preset={preset} ({trainer.model.count_params():,} parameters), "
        f"strategy={describe(strategy)}, xla={training_config.jit_compile}, "
        f"precision={training_config.mixed_precision}"
        f"{precision_note(training_config.mixed_precision)}, "
        f"dataset={data_config.dataset}, vocabulary={tokenizer.vocab_size}, model_dir={model_dir}"
        + (f", init_from={trainer.init_source.checkpoint} (weights only: fresh optimizer, step 0; "
           f"its vocabulary, {100 * init_info['unknown_piece_rate']:.2f}% unknown pieces in the "
           "training text)" if trainer.init_source is not None else "")))
    if chief:
        log(timestamped(f"TensorBoard: {tensorboard_command(model_dir)}"))
    return trainer.fit(train_fn, dev_fn, callbacks)


def run_model_config(preset, model_overrides, vocab_size, data_config) -> TransformerConfig:
    """The ``preset`` model with ``model_overrides`` for a vocabulary of ``vocab_size``, with as
    many positions as the data's longest examples have tokens unless the overrides say how many
    (as the programs' --max_length); a ValueError if the overrides set what the data decides or
    give fewer positions."""
    overrides = dict(model_overrides or {})
    for name in ("vocab_size", "target_vocab_size"):
        if name in overrides:
            raise ValueError(f"model_overrides sets {name}: the vocabulary is the tokenizer's "
                             "(DataConfig.vocab_size sets its size).")
    # An example is at most max_length subwords and EOS, and the decoder reads BOS before them.
    overrides.setdefault("max_length", data_config.max_length + 1)
    config = TransformerConfig.from_preset(preset, vocab_size=vocab_size, **overrides)
    if config.max_length < data_config.max_length + 1:
        raise ValueError(f"max_length={data_config.max_length}: the data's longest examples need "
                         f"{data_config.max_length + 1} positions, the model has "
                         f"{config.max_length}; pass model_overrides={{'max_length': "
                         f"{data_config.max_length + 1}}}, or a smaller DataConfig.max_length.")
    return config


def run_vocabulary(data_config: data.DataConfig, model_dir: Optional[str],
                   init_from_given: Optional[str] = None):
    """``(tokenizer, data_config, source, origin)``: the vocabulary the run in ``model_dir`` (None:
    a new run) trains with, the data config then naming its file. ``origin`` says where it comes
    from: ``"own copy"`` (a run resuming from checkpoints of its own keeps the copy it trained
    with: its embeddings are of those pieces, whatever the data flags would learn or find now),
    ``"init_from"`` (a new fine-tuned run: its source run's, ``source`` the
    ``init_from.InitSource``), else ``"learned now"`` or ``"reused"`` (the one the data config
    names, learned if missing). A fine-tuned run never learns one for its new corpus."""
    own = model_dir and os.path.join(model_dir, runs.VOCABULARY_FILE)
    if own and tf.train.latest_checkpoint(model_dir) and tf.io.gfile.exists(own):
        tokenizer = SubwordTokenizer.load(own)
        given = data_config.vocab_path
        if given and tf.io.gfile.exists(given) and (
                SubwordTokenizer.load(given).model_proto != tokenizer.model_proto):
            raise ValueError(f"vocab_path={given!r} is not the vocabulary the run in "
                             f"{model_dir} trained with ({own}); resume without vocab_path, or "
                             "start a new run in another model_dir.")
        return (tokenizer, dataclasses.replace(data_config, vocab_path=tokenizer.path), None,
                "own copy")
    if init_from_given:  # the source's, whatever the data flags would choose
        source = init_from.resolve(init_from_given)
        tokenizer = init_from.tokenizer_for(source, data_config.vocab_path)
        return (tokenizer, dataclasses.replace(data_config, vocab_path=tokenizer.path), source,
                "init_from")
    tokenizer, learned = data.load_or_learn_tokenizer(data_config)
    return tokenizer, data_config, None, "learned now" if learned else "reused"


def _vocabulary(data_config: data.DataConfig, training_config: TrainingConfig):
    """``(tokenizer, data_config, init_info)``: ``run_vocabulary``'s, and for a new fine-tuned run
    ``init_info`` with the source vocabulary's unknown-piece rate on the training text (a warning
    when high)."""
    tokenizer, data_config, source, _ = run_vocabulary(
        data_config, training_config.model_dir, training_config.init_from)
    if source is None:
        return tokenizer, data_config, {}
    if data_config.vocab_size not in (None, tokenizer.vocab_size):
        logging.warning("vocab_size=%d is not used: the init_from run's vocabulary (%s, %d "
                        "pieces) is.", data_config.vocab_size, source.vocab_path,
                        tokenizer.vocab_size)
    texts = [text for pair in zip(*data.read_pairs(data_config, "train", COVERAGE_SAMPLE))
             for text in pair]
    rate = init_from.unknown_piece_rate(tokenizer, texts)
    if rate > init_from.UNKNOWN_PIECE_WARNING:
        logging.warning(
            "the init_from run's vocabulary (%s) covers this training text poorly: %.2f%% of its "
            "subword pieces (first %d sentence pairs) are byte-fallback or unknown pieces (above "
            "%g%%): characters the source never learned a piece for, spelled a byte at a time.",
            source.vocab_path, 100 * rate, COVERAGE_SAMPLE, 100 * init_from.UNKNOWN_PIECE_WARNING)
    return tokenizer, data_config, {"unknown_piece_rate": rate}
