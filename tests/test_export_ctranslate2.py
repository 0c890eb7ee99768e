"""CTranslate2 export: a tiny model trained for a few seconds on a toy reversal task, exported to
CTranslate2, decodes a batch of unseen inputs to exactly the token ids our own searches give
(greedy, and beam 4 without length penalty), post-LN and pre-LN; the exported folder, the
``trainers.export --format=ctranslate2`` command and the errors for what cannot be exported."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer import decoding
from keras_transformer.export import EXPORTERS
from keras_transformer.export.ctranslate2 import ctranslate2_spec, tokenizer_pieces, write_ctranslate2
from keras_transformer.inference import DecodingConfig, Translator
from keras_transformer.tokenizer import END_ID, PAD_ID, START_ID, SubwordTokenizer
from keras_transformer.training.loss import label_smoothed_cross_entropy
from toy import toy_batch

ctranslate2 = pytest.importorskip("ctranslate2")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SENTENCES = ["The cat sits on the mat.", "A dog runs.", "Where is the train station?"]
TOY = dict(task="reverse", vocab_size=24, min_length=2, max_length=8)  # words are ids 4..23
EXTRA = 6  # outputs up to input length + this


@pytest.fixture(scope="module")
def tokenizer():
    text = [f"{s} {i}" for i in range(40) for s in SENTENCES] + [f"Das ist Satz {i}." for i in range(80)]
    return SubwordTokenizer.learn(text, vocab_size=320)


def train(config, steps, seed):
    """A few hundred Adam steps on the toy task: enough for outputs that end (EOS) at varying
    lengths and depend on the input, i.e. not the degenerate outputs of random weights."""
    keras.utils.set_random_seed(seed)
    model = kt.Transformer(config)
    optimizer = keras.optimizers.Adam(3e-3)

    @tf.function
    def step(index):
        (source, target_in), target_out = toy_batch(index, batch_size=64, **TOY)
        with tf.GradientTape() as tape:
            loss, tokens = label_smoothed_cross_entropy(target_out, model((source, target_in), training=True), 0.0)
            loss = loss / tokens
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    for index in range(steps):
        step(tf.constant(index))
    return model


# Post-LN as in the paper; pre-LN also with learned positions (Table 3 row E) and d_k * h != d_model
# (Table 3 rows A/B: CTranslate2's head_dim).
VARIANTS = {"post_ln": (dict(), 250), "pre_ln": (dict(norm_first=True, positional="learned", d_k=16, d_v=16), 150)}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def exported(request, tokenizer, tmp_path_factory):
    overrides, steps = VARIANTS[request.param]
    config = kt.TransformerConfig.from_preset("tiny", vocab_size=tokenizer.vocab_size, max_length=24, **overrides)
    model = train(config, steps, seed=1)
    path = write_ctranslate2(model, tokenizer, str(tmp_path_factory.mktemp("ct2") / "model"), extra_length=EXTRA)
    (source, _), _ = toy_batch(10_000, batch_size=16, **TOY)  # a batch never trained on
    return model, ctranslate2.Translator(path, device="cpu"), source.numpy(), tokenizer_pieces(tokenizer)


def our_search(model, source, beam_size):
    """Our decoder (model.decode_step) under decoding.greedy_search / beam_search with alpha 0;
    pad and start masked as the Translator masks them; one length limit for the batch, as
    CTranslate2's max_decoding_length. Returns the best hypotheses as id lists without EOS."""
    length = source.shape[1] + EXTRA
    memory, mask = model.encode(source)
    cache, memory_cache = model.init_cache(memory, mask, length)
    never = np.zeros(model.config.output_vocab_size, "float32")
    never[[PAD_ID, START_ID]] = -1e9

    def step(ids, i, cache):  # the encoder's keys/values tiled per beam (fixed shapes, as XLA's)
        logits, self_cache = model.decode_step(ids[:, i], i, cache["self"], cache["memory"],
                                               grow_cache=False)
        return logits + never, {"self": self_cache, "memory": cache["memory"]}

    cache = {"self": cache, "memory": memory_cache}

    start = tf.fill([source.shape[0]], START_ID)
    if beam_size == 1:
        result = decoding.greedy_search(step, start, cache, length, END_ID)
        ids, scores = result.ids.numpy(), result.scores.numpy()
    else:
        result = decoding.beam_search(step, start, cache, beam_size, 0.0, length, END_ID)
        ids, scores = result.ids.numpy()[:, 0], result.scores.numpy()[:, 0]
    return [[t for t in row if t not in (PAD_ID, END_ID)] for row in ids], scores, length


def ctranslate2_search(translator, source, pieces, beam_size, length):
    index = {piece: i for i, piece in enumerate(pieces)}
    # CTranslate2 appends the source EOS itself (add_source_eos): pass the bare pieces.
    tokens = [[pieces[t] for t in row if t not in (PAD_ID, END_ID)] for row in source]
    results = translator.translate_batch(tokens, beam_size=beam_size, length_penalty=0.0,
                                         max_decoding_length=length, min_decoding_length=0,
                                         suppress_sequences=[[pieces[PAD_ID]], [pieces[START_ID]]])
    return [[index[p] for p in r.hypotheses[0]] for r in results]


@pytest.mark.parametrize("beam_size", [1, 4])
def test_same_outputs_as_our_decoder(exported, beam_size):
    model, translator, source, pieces = exported
    ours, _, length = our_search(model, source, beam_size)
    theirs = ctranslate2_search(translator, source, pieces, beam_size, length)
    assert theirs == ours
    # Not degenerate: most outputs end before the limit, and they depend on the input.
    lengths = [len(row) for row in ours]
    assert sum(n < length - 1 for n in lengths) >= 12 and len(set(map(tuple, ours))) >= 12


def test_same_log_probabilities_as_teacher_forcing(exported):
    """CTranslate2's log-probability of each token of our outputs (its score_batch) equals our
    teacher-forced model's log-softmax: the whole network, not only its argmax, is the same."""
    model, translator, source, pieces = exported
    ours, _, _ = our_search(model, source, 1)
    width = max(map(len, ours)) + 1
    target = np.array([[START_ID] + row + [END_ID] + [PAD_ID] * (width - len(row) - 1) for row in ours])
    log_probs = tf.nn.log_softmax(model((source, target[:, :-1]))).numpy()
    tokens = [[pieces[t] for t in row if t not in (PAD_ID, END_ID)] for row in source]
    scored = translator.score_batch(tokens, [[pieces[t] for t in row] for row in ours])
    for k, row in enumerate(ours):
        expected = [log_probs[k, i, t] for i, t in enumerate(row + [END_ID])]  # EOS scored too
        np.testing.assert_allclose(scored[k].log_probs, expected, atol=1e-4)


def test_exporter_registry_folder_and_versions(tokenizer, tmp_path):
    config = kt.TransformerConfig.from_preset("tiny", vocab_size=tokenizer.vocab_size, max_length=24)
    translator = Translator(kt.Transformer(config), tokenizer, DecodingConfig(beam_size=3, extra_length=EXTRA))
    first = EXPORTERS["ctranslate2"](translator, str(tmp_path), "tiny")
    second = EXPORTERS["ctranslate2"](translator, str(tmp_path), "tiny")
    assert (first, second) == (str(tmp_path / "tiny_ctranslate2" / "1"), str(tmp_path / "tiny_ctranslate2" / "2"))
    assert sorted(os.listdir(tmp_path / "tiny_ctranslate2")) == ["1", "2"]  # no temporary folders left
    assert sorted(os.listdir(first)) == ["config.json", "keras_transformer.json", "model.bin",
                                         "shared_vocabulary.json", "vocab.model"]
    with open(os.path.join(first, "shared_vocabulary.json")) as f:
        assert json.load(f) == tokenizer_pieces(tokenizer)
    with open(os.path.join(first, "config.json")) as f:
        ct2_config = json.load(f)
    assert (ct2_config["unk_token"], ct2_config["bos_token"], ct2_config["eos_token"]) == ("<unk>", "<s>", "</s>")
    assert ct2_config["add_source_eos"] and ct2_config["layer_norm_epsilon"] == config.layer_norm_epsilon
    with open(os.path.join(first, "vocab.model"), "rb") as f:
        assert f.read() == tokenizer.model_proto
    with pytest.raises(ValueError, match="exists already"):
        EXPORTERS["ctranslate2"](translator, str(tmp_path), "tiny", version=1)


def test_what_cannot_be_exported_is_a_clear_error(tokenizer):
    config = kt.TransformerConfig.from_preset("tiny", vocab_size=tokenizer.vocab_size, d_k=8, d_v=16)
    with pytest.raises(ValueError, match="d_k == d_v"):
        ctranslate2_spec(kt.Transformer(config), tokenizer_pieces(tokenizer), 80)
    config = kt.TransformerConfig.from_preset("tiny", vocab_size=tokenizer.vocab_size)
    with pytest.raises(ValueError, match="vocabulary has 319 pieces"):
        ctranslate2_spec(kt.Transformer(config), tokenizer_pieces(tokenizer)[:-1], 80)


def test_export_command(tokenizer, tmp_path):
    """``trainers.export --format=ctranslate2`` on a training run's model_dir; the written model
    translates the text of the printed usage lines like the in-memory export."""
    from keras_transformer.training import Trainer, TrainingConfig

    path = str(tmp_path / "vocab.model")
    with open(path, "wb") as f:
        f.write(tokenizer.model_proto)
    config = kt.TransformerConfig.from_preset("tiny", vocab_size=tokenizer.vocab_size, max_length=24)
    trainer = Trainer(config, TrainingConfig(model_dir=str(tmp_path / "run"), train_steps=1),
                      run_info={"vocab_path": path})
    trainer._write_run_config()
    trainer.checkpointer.save(1)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run([sys.executable, "-m", "trainers.export", "--format=ctranslate2",
                             f"--model_dir={tmp_path / 'run'}", f"--export_dir={tmp_path / 'out'}",
                             "--extra_length=6", "--beam_size=2"],
                            cwd=ROOT, env=env, capture_output=True, timeout=300, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    written = str(tmp_path / "out" / "run_ctranslate2" / "1")
    assert written in result.stdout and "translate_batch(pieces, beam_size=2" in result.stdout
    in_memory = write_ctranslate2(trainer.model, tokenizer, str(tmp_path / "in_memory"), extra_length=6)
    import sentencepiece

    # The Python SentencePiece, as the printed usage lines tokenize (tokenizer.tokenize's TF resource
    # does not survive the seeding in other tests of this module).
    pieces = sentencepiece.SentencePieceProcessor(model_file=path).encode(SENTENCES[0], out_type=str)
    outputs = [ctranslate2.Translator(p).translate_batch([pieces], beam_size=2, max_decoding_length=12)[0]
               .hypotheses[0] for p in (written, in_memory)]
    assert outputs[0] == outputs[1]
