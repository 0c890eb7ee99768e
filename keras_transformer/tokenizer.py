"""The shared subword vocabulary (section 5.1): byte-pair encoding over both languages.

The paper encodes WMT14 English-German with "byte-pair encoding [3], which has a shared
source-target vocabulary of about 37000 tokens". We learn the BPE model with SentencePiece
(``model_type=bpe``) on the training text of *both* languages, and tokenize with
``tensorflow_text.SentencepieceTokenizer`` so tokenization and detokenization are TensorFlow
ops: an exported SavedModel takes and returns plain strings.

Reserved ids (shared with the model, see ``TransformerConfig.pad_id``): pad=0, unk=1,
start (BOS)=2, end (EOS)=3. ``byte_fallback`` spells characters outside the vocabulary as
UTF-8 bytes instead of ``<unk>``, so any text round-trips. The vocabulary size is a multiple
of 8 (tensor-core/XLA-friendly embedding and softmax shapes).

Determinism: SentencePiece's BPE merges are deterministic for the same input; sampling of
input sentences (only when there are more than ``input_sentence_size``) follows ``seed``;
``num_threads`` is recorded inside the model proto, so it is pinned to make the bytes
identical for the same data and seed.
"""

import functools
import hashlib
import io
import os
import re
from typing import Iterable, Optional

import tensorflow as tf

from keras_transformer import writing

PAD_ID, UNK_ID, START_ID, END_ID = 0, 1, 2, 3
# Part of the serialized model (trainer_spec.num_threads): fixed, so bytes are reproducible.
_NUM_THREADS = 4


class SubwordTokenizer(tf.Module):
    """SentencePiece BPE model + in-graph tokenize/detokenize (usable inside tf.function).

    ``model_proto`` holds the serialized model (save it with the model, e.g. as the asset at
    ``path``); :meth:`tokenize` maps a ``tf.string`` vector to a ``tf.RaggedTensor`` of int32
    subword ids (no BOS/EOS); :meth:`detokenize` maps ids back to strings, stopping at the
    first EOS or pad and skipping BOS.
    """

    def __init__(self, model_proto: bytes, path: Optional[str] = None, name=None,
                 sampling: float = 0.0):
        super().__init__(name=name)
        import sentencepiece as spm
        import tensorflow_text as tf_text

        self._model_proto = bytes(model_proto)
        self._path = path
        processor = spm.SentencePieceProcessor(model_proto=self._model_proto)
        ids = (processor.pad_id(), processor.unk_id(), processor.bos_id(), processor.eos_id())
        if ids != (PAD_ID, UNK_ID, START_ID, END_ID):
            raise ValueError(
                f"SentencePiece model {path or '<bytes>'} has pad/unk/bos/eos ids {ids}; "
                f"this project needs {(PAD_ID, UNK_ID, START_ID, END_ID)}. Learn it with "
                "SubwordTokenizer.learn."
            )
        self._vocab_size = processor.get_piece_size()
        self._sampling = float(sampling)
        # nbest_size=-1 with a BPE model is BPE-dropout: each merge is skipped with
        # probability alpha, so one word gets different segmentations from batch to batch.
        sampler = dict(nbest_size=-1, alpha=self._sampling) if self._sampling else {}
        self._sp = tf_text.SentencepieceTokenizer(model=self._model_proto, out_type=tf.int32,
                                                  **sampler)
        self._sp._model_resource = _shared_model_resource(self._model_proto)

    # --- construction -------------------------------------------------------------------

    @classmethod
    def learn(
        cls,
        texts: Iterable[str],
        vocab_size: int,
        out_path: Optional[str] = None,
        seed: int = 1,
        input_sentence_size: int = 2_000_000,
    ) -> "SubwordTokenizer":
        """Learns a BPE model on ``texts`` (both languages); writes it to ``out_path`` atomically.

        ``vocab_size`` counts the 4 reserved ids and the 256 byte-fallback pieces.
        """
        import sentencepiece as spm

        if isinstance(texts, (str, bytes)):  # would be one sentence per character
            raise ValueError("texts: an iterable of sentences, not one string.")
        if vocab_size % 8 or vocab_size < 264:
            raise ValueError(
                f"vocab_size={vocab_size}: must be a multiple of 8 and at least 264 "
                "(4 reserved ids + 256 byte-fallback pieces + some subwords)."
            )
        empty, raised = [], []

        def sentences():
            try:
                for text in texts:
                    if isinstance(text, bytes):
                        text = text.decode("utf-8")
                    text = text.strip()
                    if text:
                        yield text
                    else:
                        empty.append(1)
            except BaseException as error:
                # SentencePiece turns whatever its input iterator raises (a bad line's ValueError
                # naming file:line, a signal's Interrupted) into a RuntimeError carrying the
                # Python stack as text: kept here to be raised again as it was.
                raised.append(error)
                raise

        spm.set_random_generator_seed(seed)
        buffer = io.BytesIO()
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=sentences(),
                model_writer=buffer,
                model_type="bpe",
                vocab_size=vocab_size,
                pad_id=PAD_ID,
                unk_id=UNK_ID,
                bos_id=START_ID,
                eos_id=END_ID,
                byte_fallback=True,
                character_coverage=0.9999,
                input_sentence_size=input_sentence_size,
                shuffle_input_sentence=True,
                num_threads=_NUM_THREADS,
                minloglevel=2,
            )
        except RuntimeError as e:
            if raised:
                raise raised[0] from None
            message = str(e)
            # SentencePiece's numbers ("... 320 vs 334.", "... <= 465.") become the nearest size
            # that works; its own advice names options of its trainer this project does not have.
            needed = re.search(r"(\d+) vs (\d+)", message)
            most = re.search(r"<= (\d+)", message)
            if "smaller than required_chars" in message:
                advice = (f"choose at least {-(-int(needed.group(2)) // 8) * 8}" if needed
                          else f"choose a larger multiple of 8 (SentencePiece: {message.strip()})")
                raise ValueError(
                    f"vocab_size={vocab_size} is too small for the characters of this training "
                    f"text (each needs a piece of its own, besides the 260 reserved and byte "
                    f"pieces): {advice}."
                ) from None
            if "Vocabulary size" in message or "vocab_size" in message:
                advice = (f"choose at most {int(most.group(1)) // 8 * 8}" if most
                          else f"choose a smaller multiple of 8 (SentencePiece: {message.strip()})")
                raise ValueError(
                    f"vocab_size={vocab_size} is too large for this training text (it has fewer "
                    f"distinct pieces to learn): {advice}."
                ) from None
            raise ValueError(f"learning the subword vocabulary failed: {message}") from None
        model_proto = buffer.getvalue()
        if out_path:
            writing.write_file(out_path, model_proto)
        return cls(model_proto, path=out_path)

    @classmethod
    def load(cls, path: str) -> "SubwordTokenizer":
        """Loads a model written by :meth:`learn` (or any SentencePiece model with our ids)."""
        if not os.path.isfile(path):
            raise ValueError(f"vocabulary file not found: {path}")
        with open(path, "rb") as f:
            data = f.read()
        try:
            return cls(data, path=path)
        except (RuntimeError, OSError) as e:
            raise ValueError(f"{path} is not a SentencePiece model: {e}") from None

    def with_sampling(self, probability: float) -> "SubwordTokenizer":
        """The same vocabulary, tokenizing by subword sampling for training: BPE-dropout
        (Provilkov et al. 2020), the BPE form of subword regularization (Kudo 2018). Every
        merge is skipped with ``probability``; detokenizing still gives back the text."""
        if not 0.0 <= probability < 1.0:
            raise ValueError(f"subword_sampling={probability}: must be in [0, 1).")
        return SubwordTokenizer(self._model_proto, self._path, sampling=probability)

    # --- properties -----------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def sampling(self) -> float:
        """The BPE-dropout probability of :meth:`tokenize` (0: deterministic)."""
        return self._sampling

    @property
    def model_proto(self) -> bytes:
        """The serialized SentencePiece model (what gets saved next to the model)."""
        return self._model_proto

    @property
    def path(self) -> Optional[str]:
        """The file the model was loaded from or written to (for ``tf.saved_model.Asset``)."""
        return self._path

    pad_id = PAD_ID
    unk_id = UNK_ID
    start_id = START_ID
    end_id = END_ID

    # --- in-graph ops ---------------------------------------------------------------------

    # Plain TensorFlow ops without Python control flow: nothing for AutoGraph to convert. Once,
    # after ~1,000 training steps, AutoGraph ran `tokenize` for a `detokenize` call inside the
    # dev-BLEU tf.function (a conversion-cache mix-up we could not reproduce); not converting
    # these methods takes them out of that path.
    @tf.autograph.experimental.do_not_convert
    def tokenize(self, texts) -> tf.RaggedTensor:
        """``tf.string`` [N] -> ``tf.RaggedTensor`` int32 [N, (subwords)], no BOS/EOS."""
        texts = tf.convert_to_tensor(texts, dtype=tf.string)
        return self._sp.tokenize(texts)

    @tf.autograph.experimental.do_not_convert
    def tokenize_with_offsets(self, texts):
        """``tokenize`` and where each subword lies in its text: ``(ids, starts, ends)``, each
        ``tf.RaggedTensor`` [N, (subwords)], the subword's byte span ``[start, end)``."""
        texts = tf.convert_to_tensor(texts, dtype=tf.string)
        return self._sp.tokenize_with_offsets(texts)

    @tf.autograph.experimental.do_not_convert
    def detokenize(self, ids) -> tf.Tensor:
        """int ids [N, T] (dense, 0/EOS-padded) or ragged -> ``tf.string`` [N].

        Everything from the first EOS or pad on is ignored, BOS ids are skipped: decoder
        outputs can be passed as they are.
        """
        if isinstance(ids, tf.RaggedTensor):
            ids = ids.to_tensor(default_value=PAD_ID)
        ids = tf.cast(tf.convert_to_tensor(ids), tf.int32)
        ended = tf.cumsum(
            tf.cast((ids == END_ID) | (ids == PAD_ID), tf.int32), axis=-1
        ) > 0
        keep = tf.logical_not(ended) & (ids != START_ID)
        return self._sp.detokenize(tf.ragged.boolean_mask(ids, keep))

    def id_to_piece(self, ids) -> tf.Tensor:
        """Subword strings of ids (for inspection)."""
        return self._sp.id_to_string(tf.cast(ids, tf.int32))


def dense_ids(pieces: tf.RaggedTensor, *, start: bool = False, end: bool = False):
    """Ragged subword ids [N, (subwords)] -> (int32 [N, longest row + marks], int32 [N] row
    lengths), each row with BOS before it (``start``) and EOS after it (``end``), padded with
    PAD_ID. Built dense rather than by ``tf.concat`` of ragged rows, whose int64 row partitions
    are transposed: oneDNN refuses an int64 transpose with an error line in the log of every
    graph that holds one ("supports DT_INT64 only on platforms with AVX-512"), the export's
    included."""
    lengths = tf.cast(pieces.row_lengths(), tf.int32)
    ids = tf.cast(pieces, tf.int32).to_tensor(PAD_ID)
    if end:
        ids = tf.pad(ids, [[0, 0], [0, 1]], constant_values=PAD_ID)
        ids = tf.where(tf.range(tf.shape(ids)[1]) == lengths[:, tf.newaxis], END_ID, ids)
        lengths += 1
    if start:
        ids = tf.pad(ids, [[0, 0], [1, 0]], constant_values=START_ID)
        lengths += 1
    return ids, lengths


def _shared_model_resource(model_proto: bytes):
    """The SentencePiece processor's resource, named after the model's bytes.

    tensorflow-text's own resource is private to the kernel that created it, and seeding
    (``tf.random.set_seed``, ``keras.utils.set_random_seed``) clears the eager kernel cache and
    the resource with it: a tokenizer or Translator loaded before fails at its next call
    (tensorflow/text#570; its TODO b/318839908 plans a ref-counted resource). A shared name
    keeps the resource in the device's resource manager. Tokenizers of the same bytes share one
    processor, which is safe: the sampling options are inputs of each call, and we never set
    the resource's other options (BOS/EOS/reverse). It lives as long as its resource manager:
    the process, or the session that loaded a SavedModel. This reaches into two private names of
    tensorflow-text (pinned below 2.22 in setup.cfg); tests/test_tokenizer.py fails if they move.
    """
    return _shared_model_resource_class()(model_proto, "SentencepieceModel")


@functools.cache
def _shared_model_resource_class():
    from tensorflow_text.python.ops import sentencepiece_tokenizer as sp_ops

    class SharedSentencepieceModelResource(sp_ops._SentencepieceModelResource):
        def _create_resource(self):
            with tf.name_scope(self._name):
                return sp_ops.gen_sentencepiece_tokenizer.sentencepiece_op(
                    model=self._model,
                    shared_name="keras_transformer_sentencepiece_"
                    + hashlib.sha256(self._model).hexdigest())

    return SharedSentencepieceModelResource
