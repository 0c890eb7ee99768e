"""The shared subword vocabulary (keras_transformer/tokenizer.py)."""

import os
import re
import signal

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf

from keras_transformer import signals
from keras_transformer.tokenizer import END_ID, START_ID, SubwordTokenizer, dense_ids

# Real sentence pairs (Ding dictionary examples), both languages, as the vocabulary sees them.
SENTENCES = [
    "I’ve made one or two modifications to the original design.",
    "Ich habe am ursprünglichen Entwurf ein paar Änderungen vorgenommen.",
    "Please keep the lawn clean and do not litter!",
    "Bitte halten Sie den Rasen sauber und verstreuen Sie keinen Abfall!",
    "She is a personal assistant, as distinct from a secretary.",
    "Sie ist persönliche Assistentin, was nicht dasselbe ist wie eine Sekretärin.",
    "I have to wait until my relief comes.",
    "Ich muss warten, bis meine Ablösung kommt.",
    "These problems do not have a simple remedy.",
    "Um diese Probleme zu lösen, gibt es kein einfaches Rezept.",
    "He felt as if his marital problems were beyond remedy.",
    "Er hatte das Gefühl, dass seine Eheprobleme nicht mehr zu lösen waren.",
    "It is our intention to maintain this practice.",
    "Wir beabsichtigen, diese Praxis beizubehalten.",
    "The road to hell is paved with good intentions.",
    "Der Weg zur Hölle ist mit guten Vorsätzen gepflastert.",
    "Do you wish to make any alterations, additions or corrections?",
    "Möchten Sie irgendetwas ändern, hinzufügen oder richtigstellen?",
    "Professional forgers can knock off a fake passport in no time.",
    "Professionelle Fälscher zaubern im Nu einen falschen Pass aus dem Hut.",
    "He was, as the phrase goes, 'on their radar'.",
    "Er war, wie es so schön heißt, „auf ihrem Radar“.",
    "Frogs won’t give you warts. That’s just an old wives’ tale.",
    "Von Fröschen bekommt man keine Warzen. Das ist nur ein Ammenmärchen.",
] * 4
UNSEEN = [
    "The outburst of violence was heralded years ago.",
    "Der Gewaltausbruch hat sich seit Jahren angekündigt.",
    "Zürich liegt 408 m über dem Meer – 東京 nicht.",
]
VOCAB_SIZE = 320


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("vocab") / "spm.model")
    return SubwordTokenizer.learn(iter(SENTENCES), VOCAB_SIZE, path, seed=3)


def test_vocabulary_size_and_reserved_ids(tokenizer):
    assert tokenizer.vocab_size == VOCAB_SIZE
    pieces = tokenizer.id_to_piece(tf.range(4)).numpy().tolist()
    assert pieces == [b"<pad>", b"<unk>", b"<s>", b"</s>"]
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.start_id, tokenizer.end_id) == (0, 1, 2, 3)


def test_learning_is_deterministic_and_saved_atomically(tokenizer, tmp_path):
    again = SubwordTokenizer.learn(iter(SENTENCES), VOCAB_SIZE, str(tmp_path / "b.model"), seed=3)
    assert again.model_proto == tokenizer.model_proto
    with open(tokenizer.path, "rb") as f:
        assert f.read() == tokenizer.model_proto
    assert os.listdir(tmp_path) == ["b.model"]  # no temporary file left behind
    assert SubwordTokenizer.load(tokenizer.path).model_proto == tokenizer.model_proto


def test_in_graph_tokenize_matches_sentencepiece(tokenizer):
    reference = spm.SentencePieceProcessor(model_proto=tokenizer.model_proto)
    texts = SENTENCES[:24] + UNSEEN
    ids = tokenizer.tokenize(tf.constant(texts))
    assert isinstance(ids, tf.RaggedTensor) and ids.dtype == tf.int32
    assert ids.to_list() == reference.encode(texts)
    assert all(0 < i < VOCAB_SIZE and i not in (2, 3) for row in ids.to_list() for i in row)


def test_round_trip_real_sentences(tokenizer):
    texts = SENTENCES[:24] + UNSEEN  # byte fallback: even characters never seen come back
    back = tokenizer.detokenize(tokenizer.tokenize(tf.constant(texts)))
    assert [b.decode("utf-8") for b in back.numpy()] == texts


def test_detokenize_dense_decoder_output_in_tf_function(tokenizer):
    texts = tf.constant(SENTENCES[:3])
    ids = tokenizer.tokenize(texts)
    # What a decoder emits: BOS, subwords, EOS, then anything (padding or garbage after EOS).
    n = ids.nrows()
    garbage = tf.fill([n, 2], 77)
    dense = tf.concat([tf.fill([n, 1], 2), ids, tf.fill([n, 1], 3), garbage], axis=1).to_tensor()

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def detok(x):
        return tokenizer.detokenize(x)

    assert detok(dense).numpy().tolist() == texts.numpy().tolist()
    padded = ids.to_tensor(default_value=0, shape=[3, int(tf.reduce_max(ids.row_lengths())) + 5])
    assert tokenizer.detokenize(padded).numpy().tolist() == texts.numpy().tolist()


def test_saved_model_takes_and_returns_strings(tokenizer, tmp_path):
    module = tf.Module()
    module.tokenizer = tokenizer
    module.vocab = tf.saved_model.Asset(tokenizer.path)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def round_trip(texts):
        return tokenizer.detokenize(tokenizer.tokenize(texts).to_tensor())

    module.round_trip = round_trip
    tf.saved_model.save(module, str(tmp_path / "sm"))
    assert os.path.isfile(tmp_path / "sm" / "assets" / os.path.basename(tokenizer.path))
    loaded = tf.saved_model.load(str(tmp_path / "sm"))
    texts = tf.constant(UNSEEN)
    np.testing.assert_array_equal(loaded.round_trip(texts).numpy(), texts.numpy())


def test_dense_ids_are_the_ragged_rows_with_their_marks_and_transpose_no_int64():
    """Against tf.concat of ragged rows, which builds the same batch: the rows (empty ones among
    them) with BOS before or EOS after, padded, and their lengths; but dense_ids's graph holds
    no int64 Transpose, which oneDNN logs an error line for in every graph that has one."""
    rng = np.random.default_rng(0)
    spec = tf.RaggedTensorSpec([None, None], tf.int32, row_splits_dtype=tf.int64)
    for rows in ([[5]], [[], [7, 8, 9]], *([list(rng.integers(4, 50, rng.integers(0, 6)))
                                           for _ in range(rng.integers(1, 6))] for _ in range(10))):
        pieces = tf.ragged.constant(rows, dtype=tf.int32, ragged_rank=1, row_splits_dtype=tf.int64)
        marks = tf.RaggedTensor.from_tensor(tf.ones([len(rows), 1], tf.int32))
        for kind, reference in (("start", tf.concat([marks * START_ID, pieces], axis=1)),
                                ("end", tf.concat([pieces, marks * END_ID], axis=1))):
            ids, lengths = dense_ids(pieces, **{kind: True})
            np.testing.assert_array_equal(ids, reference.to_tensor())
            np.testing.assert_array_equal(lengths, reference.row_lengths())
            assert ids.dtype == lengths.dtype == tf.int32
    for kind in ("start", "end"):
        graph = tf.function(lambda r: dense_ids(r, **{kind: True})).get_concrete_function(spec).graph
        transposes = [op for op in graph.get_operations() if op.type == "Transpose"]
        assert not [op for op in transposes if op.get_attr("T") == tf.int64], kind


def test_bad_vocabulary_sizes_and_files(tmp_path):
    with pytest.raises(ValueError, match=r"vocab_size=321: must be a multiple of 8"):
        SubwordTokenizer.learn(iter(SENTENCES), 321)
    # The sizes the errors advise are the nearest that work.
    with pytest.raises(ValueError, match=r"vocab_size=8000 is too large .*: choose at most") as error:
        SubwordTokenizer.learn(iter(SENTENCES), 8000)
    most = int(re.search(r"at most (\d+)", str(error.value)).group(1))
    assert most % 8 == 0 and SubwordTokenizer.learn(iter(SENTENCES), most).vocab_size == most
    with pytest.raises(ValueError, match="too large"):
        SubwordTokenizer.learn(iter(SENTENCES), most + 8)
    # More distinct characters than subwords: the opposite advice.
    many_characters = ["".join(chr(0x4E00 + 7 * i + j) for j in range(7)) for i in range(60)]
    with pytest.raises(ValueError, match=r"vocab_size=264 is too small .*: choose at least") as error:
        SubwordTokenizer.learn(iter(many_characters), 264)
    least = int(re.search(r"at least (\d+)", str(error.value)).group(1))
    assert least % 8 == 0
    assert SubwordTokenizer.learn(iter(many_characters), least).vocab_size == least
    with pytest.raises(ValueError, match="too small"):
        SubwordTokenizer.learn(iter(many_characters), least - 8)
    with pytest.raises(ValueError, match=r"vocabulary file not found: .*missing.model"):
        SubwordTokenizer.load(str(tmp_path / "missing.model"))
    bad = tmp_path / "bad.model"
    bad.write_bytes(b"not a model")
    with pytest.raises(ValueError, match=r"bad.model is not a SentencePiece model"):
        SubwordTokenizer.load(str(bad))


@pytest.mark.parametrize("error", [ValueError("train.tsv:7: no tab between source and target"),
                                   signals.Interrupted(signal.SIGTERM)],
                         ids=["a bad line", "a signal"])
def test_what_the_texts_raise_mid_way_comes_out_as_it_was_and_nothing_is_written(error, tmp_path):
    """SentencePiece reads the texts through Python and would turn an error of theirs into its own
    RuntimeError (the Python stack as text): a bad line must still name its file:line alone, and a
    SIGTERM while the vocabulary is learned must still stop the program as a SIGTERM."""
    def texts():
        yield from SENTENCES[:20]
        raise error

    with pytest.raises(type(error)) as raised:
        SubwordTokenizer.learn(texts(), VOCAB_SIZE, str(tmp_path / "spm.model"))
    assert raised.value is error
    assert os.listdir(tmp_path) == []


def test_subword_sampling_varies_segmentation_but_not_text(tokenizer):
    texts = SENTENCES[:24]
    reference = spm.SentencePieceProcessor(model_proto=tokenizer.model_proto)
    deterministic = reference.encode(texts)
    sampler = tokenizer.with_sampling(0.2)
    assert (sampler.sampling, tokenizer.sampling) == (0.2, 0.0)
    segmentations = [sampler.tokenize(tf.constant(texts)) for _ in range(5)]
    changed = sum(ids != base for s in segmentations for ids, base in zip(s.to_list(), deterministic))
    # A 320-piece vocabulary has few merges to drop; still, many sentences change.
    assert changed > 0.25 * len(texts) * 5
    # Dropped merges give more, shorter pieces, never fewer.
    assert all(len(ids) >= len(base) for s in segmentations
               for ids, base in zip(s.to_list(), deterministic))
    for ids in segmentations:
        assert [b.decode("utf-8") for b in sampler.detokenize(ids).numpy()] == texts
    # The plain tokenizer is untouched by its sampling sibling.
    assert tokenizer.tokenize(tf.constant(texts)).to_list() == deterministic


def test_subword_sampling_only_reaches_the_training_batches(tokenizer):
    from keras_transformer.data import DataConfig, training_tokenizer

    config = DataConfig(dataset="ding_de_en", subword_sampling=0.1)
    assert training_tokenizer(config, tokenizer).sampling == 0.1
    assert training_tokenizer(DataConfig(dataset="ding_de_en"), tokenizer) is tokenizer
    with pytest.raises(ValueError, match=r"subword_sampling=1.0"):
        DataConfig(dataset="ding_de_en", subword_sampling=1.0)


def test_tokenizers_keep_working_after_tensorflow_is_seeded_and_do_not_share_a_model(tokenizer, tmp_path):
    # Seeding clears TensorFlow's kernel cache; tensorflow-text's own resource went with it
    # (tensorflow/text#570), so a notebook that seeds after loading failed at the next call.
    import keras

    other = SubwordTokenizer.learn(iter(SENTENCES), VOCAB_SIZE + 64, str(tmp_path / "o.model"),
                                   seed=3)
    texts = SENTENCES[:24] + UNSEEN
    pipeline = tf.data.Dataset.from_tensor_slices(texts).batch(len(texts)).map(tokenizer.tokenize)
    sampler = tokenizer.with_sampling(0.2)
    keras.utils.set_random_seed(5)
    for each in (tokenizer, other):
        reference = spm.SentencePieceProcessor(model_proto=each.model_proto).encode(texts)
        assert each.tokenize(tf.constant(texts)).to_list() == reference
        assert [b.decode() for b in each.detokenize(each.tokenize(texts)).numpy()] == texts
    # Two vocabularies segment differently: each kept its own model, not the first one made.
    assert tokenizer.tokenize(tf.constant(texts)).to_list() != other.tokenize(
        tf.constant(texts)).to_list()
    assert next(iter(pipeline)).to_list() == tokenizer.tokenize(tf.constant(texts)).to_list()
    assert [b.decode() for b in sampler.detokenize(sampler.tokenize(texts)).numpy()] == texts
