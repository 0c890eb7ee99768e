"""The ``translate_ids`` signature behind TF Serving's batcher: with ``pad_variable_length_inputs``
the server pads each request's id tensor at the end, to the batch's longest, with that tensor's
first element (tensorflow_serving/batching/batching_util.cc, ``PadTensor``), not with our PAD id.
Loaded the way the server loads it (session loader, ``serve`` tag, tensors named by the
signature_def), every sentence must come out as it does alone, whatever follows its EOS. And the
string export needs no op beyond core TensorFlow's but the SentencepieceOps that docs/serving.md
names (the stock server links them)."""

import os

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.export import IDS_SIGNATURE, export_for_serving
from test_export import run_python
from test_inference import SENTENCES, small_translator

LONGER = "The train is late again today, and nobody knows why the cat sits there."
# The string export's ops outside core TensorFlow; docs/serving.md names them and shows that the
# stock model server links them (tensorflow-text's ops_lib).
TF_TEXT_OPS = ["SentencepieceDetokenizeOp", "SentencepieceOp", "SentencepieceTokenizeOp",
               "SentencepieceTokenizeWithOffsetsOp"]


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """``(translator, text_path, ids_path)``: a tiny model's two SavedModels."""
    translator = small_translator(beam_size=2)
    export_dir = str(tmp_path_factory.mktemp("saved_models"))
    return (translator,) + export_for_serving(translator, export_dir, "tiny")


@pytest.fixture(scope="module")
def served(exports):
    """``(translator, run)``: ``run(source_ids)`` feeds the exported ids-only SavedModel's
    ``translate_ids`` through a TF1 session, as tensorflow_model_server does."""
    translator, _, ids_path = exports
    graph = tf.Graph()
    session = tf.compat.v1.Session(graph=graph)
    meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], ids_path)
    signature = meta_graph.signature_def[IDS_SIGNATURE]
    (input_name,) = signature.inputs
    outputs = {k: v.name for k, v in signature.outputs.items()}

    def run(source_ids):
        return session.run(outputs, {signature.inputs[input_name].name: np.asarray(source_ids, np.int32)})

    yield translator, run
    session.close()


def batch_like_tf_serving(requests, pad, vocab_size, rng):
    """What the batcher makes of ``requests`` (int32 [rows, length] each): every request padded at
    the end of its length axis to the batch's longest, then the rows concatenated. ``pad``:
    ``"first"`` (the server's choice: the request tensor's first element), ``"random"`` (any id
    of the vocabulary, drawn per position) or an id."""
    longest = max(r.shape[1] for r in requests)
    padded = []
    for request in requests:
        missing = longest - request.shape[1]
        if pad == "random":
            tail = rng.integers(0, vocab_size, (len(request), missing))
        else:
            tail = np.full((len(request), missing), request.flat[0] if pad == "first" else pad)
        padded.append(np.concatenate([request, tail.astype(request.dtype)], axis=1))
    return np.concatenate(padded)


@pytest.mark.parametrize("pad", ["pad", "first", "random"])
def test_ids_signature_ignores_what_the_server_pads_after_eos(served, pad):
    translator, run = served
    end_id, pad_id = translator.tokenizer.end_id, translator.tokenizer.pad_id
    sentences = [LONGER] + SENTENCES + ["Yes."]
    ids, _, _ = translator.source_ids(tf.constant(sentences))
    ids = np.asarray(ids)
    rows = [row[:list(row).index(end_id) + 1] for row in ids]  # each sentence up to its EOS
    alone = [run(row[None]) for row in rows]
    # Requests as clients send them: single sentences, and one request of two rows that the
    # client padded with PAD itself (the server then pads that tensor with its first element).
    requests = [rows[1][None], ids[2:4, :max(len(rows[2]), len(rows[3]))], rows[4][None], rows[0][None]]
    order = [1, 2, 3, 4, 0]
    rng = np.random.default_rng(7)
    batch = batch_like_tf_serving(requests, pad_id if pad == "pad" else pad,
                                  translator.tokenizer.vocab_size, rng)
    assert batch.shape == (len(sentences), len(rows[0]))
    if pad != "pad":  # the padding really is something other than PAD after some sentence's EOS
        assert any(np.any(batch[i, len(rows[s]):] != pad_id) for i, s in enumerate(order))
    out = run(batch)
    for i, s in enumerate(order):
        np.testing.assert_array_equal(out["ids"][i], alone[s]["ids"][0], err_msg=sentences[s])
        np.testing.assert_array_equal(out["lengths"][i], alone[s]["lengths"][0], err_msg=sentences[s])
        np.testing.assert_allclose(out["scores"][i], alone[s]["scores"][0], rtol=1e-4, err_msg=sentences[s])


def test_a_row_without_eos_is_its_non_pad_tokens(served):
    translator, run = served
    ids, _, _ = translator.source_ids(tf.constant([SENTENCES[1], LONGER]))
    ids = np.asarray(ids)
    short = list(ids[0]).index(translator.tokenizer.end_id)
    no_eos = ids.copy()
    no_eos[0, short] = translator.tokenizer.pad_id  # the short row: its subwords, then only PAD
    alone = run(no_eos[:1, :short])
    out = run(no_eos)
    np.testing.assert_array_equal(out["ids"][0], alone["ids"][0])
    np.testing.assert_allclose(out["scores"][0], alone["scores"][0], rtol=1e-4)


def test_ops_outside_core_tensorflow_are_the_documented_sentencepiece_ops(exports):
    _, text_path, ids_path = exports
    # A fresh process: this one has imported tensorflow_text, which registers its ops.
    found = run_python(f"""
import json, sys
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.python.framework import op_def_registry
found = {{}}
for path in {[text_path, ids_path]!r}:
    saved_model = saved_model_pb2.SavedModel.FromString(open(path + "/saved_model.pb", "rb").read())
    graph = saved_model.meta_graphs[0].graph_def
    functions = {{f.signature.name for f in graph.library.function}}
    ops = {{n.op for n in graph.node}} | {{n.op for f in graph.library.function for n in f.node_def}}
    found[path] = sorted(op for op in ops - functions if op_def_registry.get(op) is None)
assert "tensorflow_text" not in sys.modules
print(json.dumps(found))
""")
    assert found == {text_path: TF_TEXT_OPS, ids_path: []}
    with open(os.path.join(os.path.dirname(__file__), "..", "docs", "serving.md")) as f:
        doc = f.read()
    assert all(f"`{op}`" in doc for op in TF_TEXT_OPS)


def session_signature(path, name):
    """``(run, session)``: ``run(**inputs)`` feeds the export's signature ``name`` through a TF1
    session, tensors named by its signature_def, as tensorflow_model_server does."""
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops, as the stock server links them)

    session = tf.compat.v1.Session(graph=tf.Graph())
    signature = tf.compat.v1.saved_model.loader.load(session, ["serve"], path).signature_def[name]
    outputs = {k: v.name for k, v in signature.outputs.items()}
    return (lambda **inputs: session.run(outputs, {signature.inputs[k].name: v
                                                   for k, v in inputs.items()})), session


def served_and_in_memory(path, name, function, sources, targets):
    """The outputs of the export's pair signature ``name`` through the session loader, and those of
    the in-memory ``function``, for the same sentence pairs (NumPy, each)."""
    run, session = session_signature(path, name)
    with session:
        out = run(sources=np.array(sources, object), targets=np.array(targets, object))
    expected = function(tf.constant(sources), tf.constant(targets))
    return out, {k: np.asarray(v) for k, v in expected.items()}


PAIRS = [(SENTENCES[0], "Das ist Satz 5."), (SENTENCES[1], ""), (LONGER, "Das ist Satz 7. " * 10)]


def test_score_signature_through_the_session_loader_gives_the_translators_scores(exports):
    from keras_transformer.inference import SCORE_SIGNATURE, load_exported_score_fn

    translator, text_path, _ = exports
    sources, targets = [s for s, _ in PAIRS], [t for _, t in PAIRS]
    out, expected = served_and_in_memory(text_path, SCORE_SIGNATURE, translator.score_function(),
                                         sources, targets)
    assert sorted(out) == ["log_prob", "nll_per_token", "tokens", "truncated"]
    np.testing.assert_allclose(out["log_prob"], expected["log_prob"], atol=1e-4)
    np.testing.assert_allclose(out["nll_per_token"], expected["nll_per_token"], atol=1e-4)
    np.testing.assert_array_equal(out["tokens"], expected["tokens"])
    np.testing.assert_array_equal(out["truncated"], [False, False, True])

    score_fn, path = load_exported_score_fn(os.path.dirname(text_path))  # as trainers.score loads it
    assert path == text_path
    np.testing.assert_allclose(score_fn(tf.constant(sources), tf.constant(targets))["log_prob"],
                               expected["log_prob"], atol=1e-4)


def test_align_signature_through_the_session_loader_gives_the_translators_alignments(exports,
                                                                                   monkeypatch):
    from keras_transformer.inference import (ALIGN_SIGNATURE, SCORE_SIGNATURE, load_exported_align_fn,
                                             load_exported_fns)

    translator, text_path, _ = exports
    # Words split by spaces beyond ASCII's (str.split()'s), an empty target, a target cut to the
    # model's length.
    pairs = PAIRS + [("Hello\u00a0world, again.", "Hallo\u3000Welt,\u2009noch mal.")]
    sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
    out, expected = served_and_in_memory(text_path, ALIGN_SIGNATURE, translator.align_function(),
                                         sources, targets)
    assert sorted(out) == ["alignments", "attention", "source_words"]
    np.testing.assert_array_equal(out["alignments"], expected["alignments"])
    np.testing.assert_array_equal(out["source_words"], expected["source_words"])
    np.testing.assert_allclose(out["attention"], expected["attention"], atol=1e-5)
    for (source, target), line in zip(pairs, out["alignments"]):
        links = [tuple(map(int, link.split("-"))) for link in line.decode().split()]
        # at most one source word per target word, by target word, each a word of the texts
        assert [t for _, t in links] == sorted({t for _, t in links})
        assert all(0 <= s < len(source.split()) and t < len(target.split()) for s, t in links)
        assert bool(links) == bool(target)
    assert len(out["alignments"][-1].decode().split()) == 4  # Hallo Welt, noch mal.

    align_fn, path = load_exported_align_fn(os.path.dirname(text_path))
    assert path == text_path
    np.testing.assert_array_equal(align_fn(tf.constant(sources), tf.constant(targets))["alignments"],
                                  expected["alignments"])
    # as trainers.score --alignments loads the first export: both signatures from one load
    loads, load = [], tf.saved_model.load
    monkeypatch.setattr(tf.saved_model, "load", lambda *args: loads.append(args) or load(*args))
    (score_fn, align_fn), path = load_exported_fns(os.path.dirname(text_path), SCORE_SIGNATURE,
                                                   ALIGN_SIGNATURE)
    assert path == text_path and len(loads) == 1
    np.testing.assert_array_equal(align_fn(tf.constant(sources), tf.constant(targets))["alignments"],
                                  expected["alignments"])
    np.testing.assert_allclose(score_fn(tf.constant(sources), tf.constant(targets))["log_prob"],
                               translator.score_text(tf.constant(sources), tf.constant(targets))[
                                   "log_prob"], atol=1e-4)


@pytest.mark.parametrize("loader, missing", [
    ("load_exported_score_fn", "score signature: it was exported before scoring was"),
    ("load_exported_align_fn", "align signature: it was exported before alignments were")])
def test_an_export_without_a_pair_signature_is_named_with_what_it_lacks(exports, tmp_path, loader,
                                                                        missing):
    from keras_transformer import inference
    from test_export import write_old_export

    _, _, ids_path = exports
    load = getattr(inference, loader)
    with pytest.raises(ValueError, match="has no text signature: it is the ids-only export"):
        load(ids_path)
    write_old_export(str(tmp_path / "old" / "1"))
    with pytest.raises(ValueError, match=f"{tmp_path}/old/1 has no {missing}; export the run again"):
        load(str(tmp_path / "old"))


def test_score_ids_signature_ignores_what_the_server_pads_after_eos(exports):
    from keras_transformer.inference import SCORE_IDS_SIGNATURE

    translator, _, ids_path = exports
    end_id = translator.tokenizer.end_id
    sources, targets = (np.asarray(translator.source_ids(tf.constant(side))[0]) for side in zip(*PAIRS))
    rows = [[row[:list(row).index(end_id) + 1] for row in side] for side in (sources, targets)]
    run, session = session_signature(ids_path, SCORE_IDS_SIGNATURE)
    with session:
        alone = [run(source_ids=s[None], target_ids=t[None]) for s, t in zip(*rows)]
        # One request per pair, padded by the batcher with each tensor's first element.
        rng = np.random.default_rng(7)
        batch = {name: batch_like_tf_serving([row[None] for row in side], "first",
                                             translator.tokenizer.vocab_size, rng)
                 for name, side in zip(("source_ids", "target_ids"), rows)}
        out = run(**batch)
    assert (batch["target_ids"] != 0).sum() > sum(len(t) for t in rows[1])  # not PAD after some EOS
    for i, single in enumerate(alone):
        np.testing.assert_array_equal(out["tokens"][i], single["tokens"][0])
        np.testing.assert_allclose(out["log_prob"][i], single["log_prob"][0], atol=1e-4)
