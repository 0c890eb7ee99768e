"""Export to CTranslate2, a C++ inference engine for Transformers (optional extra ``ctranslate2``).

Our weights are written as a ``ctranslate2.specs.TransformerSpec``, filled the way CTranslate2's
own OpenNMT-tf and fairseq converters fill it:

- post-LN (the paper's, section 3.1: ``pre_norm=False``, no final LayerNorm) or pre-LN
  (``config.norm_first``: ``pre_norm=True`` with the stacks' final LayerNorms);
- the positional encodings passed explicitly as a table: ours interleave sin/cos on even/odd
  channels as section 3.5 writes them, CTranslate2's built-in table puts all sines before all
  cosines. The table covers max(max_length, 1024) + extra_length positions: the longest output of
  section 6.1's search, and CTranslate2's default input limit (``max_input_length=1024``; pass
  ``max_input_length=max_length`` to cut inputs where our Translator cuts them). CTranslate2 refuses
  positions beyond the table with a clear error. Learned position embeddings (Table 3 row E) go as
  they are (max_length rows);
- embeddings multiplied by sqrt(d_model) (section 3.4), the pre-softmax projection tied to them and
  without bias; one shared vocabulary, the SentencePiece pieces in id order, with CTranslate2's
  ``unk_token``/``bos_token``/``eos_token`` set to our pieces of ids 1, 2, 3 and the source EOS
  added by CTranslate2 (``add_source_eos``), so users pass the bare pieces;
- self-attention Q/K/V fused into one linear map, encoder-decoder K/V fused (CTranslate2's layout);
  ReLU feed-forward; our LayerNorm epsilon.

The exported folder holds CTranslate2's ``model.bin``, ``config.json`` and
``shared_vocabulary.json``, plus our ``vocab.model`` (to tokenize) and
``keras_transformer.json`` (model config and the decoding settings of the Translator it came from).
"""

import os

import numpy as np

from keras_transformer.export.common import (decoding_settings, staged_export, version_paths,
                                             write_run_files)
from keras_transformer.layers.embedding import positional_encoding

SETTINGS_FILE = "keras_transformer.json"


def _require_ctranslate2():
    try:
        import ctranslate2  # noqa: F401
        from ctranslate2.specs import transformer_spec
    except ImportError:
        raise ValueError("the CTranslate2 export needs the 'ctranslate2' package: "
                         "pip install -e '.[ctranslate2]' in the project folder (or pip install ctranslate2).") from None
    return transformer_spec


def _numpy(variable):
    return np.ascontiguousarray(np.asarray(variable, dtype=np.float32))


def _set_linear(spec, *denses):
    """One CTranslate2 linear map ([out, in] weight) from one or more Keras Dense layers ([in, out]
    kernels), concatenated along the outputs (fused projections)."""
    spec.weight = np.ascontiguousarray(np.concatenate([_numpy(d.kernel).T for d in denses], axis=0))
    spec.bias = np.concatenate([_numpy(d.bias) for d in denses])


def _set_layer_norm(spec, layer_norm):
    spec.gamma = _numpy(layer_norm.gamma)
    spec.beta = _numpy(layer_norm.beta)


def _set_attention(spec, attention, layer_norm, self_attention):
    if self_attention:
        _set_linear(spec.linear[0], attention.query_projection, attention.key_projection,
                    attention.value_projection)
    else:
        _set_linear(spec.linear[0], attention.query_projection)
        _set_linear(spec.linear[1], attention.key_projection, attention.value_projection)
    _set_linear(spec.linear[-1], attention.output_projection)
    _set_layer_norm(spec.layer_norm, layer_norm)


def _set_feed_forward(spec, layer):
    _set_linear(spec.linear_0, layer.feed_forward.inner)
    _set_linear(spec.linear_1, layer.feed_forward.outer)
    _set_layer_norm(spec.layer_norm, layer.feed_forward_norm)


def position_table(model, which, length):
    """The [positions, d_model] table added to the ``which`` ("source"/"target") embeddings."""
    if model.config.positional == "learned":
        return _numpy(getattr(model, f"{which}_positions").position_embeddings)
    return _numpy(positional_encoding(length, model.config.d_model))


def ctranslate2_spec(model, pieces, max_positions):
    """A validated ``ctranslate2.specs.TransformerSpec`` holding ``model``'s weights.

    ``pieces``: the vocabulary, token strings in id order (ids 1, 2, 3 = unk, start, end);
    ``max_positions``: rows of the sinusoidal position table (longest input or output + 1).
    """
    transformer_spec = _require_ctranslate2()
    config = model.config
    if config.d_k != config.d_v:
        raise ValueError(f"CTranslate2 needs d_k == d_v; this model has d_k={config.d_k}, "
                         f"d_v={config.d_v}.")
    pieces = [str(p) for p in pieces]
    if len(pieces) != config.vocab_size or len(pieces) != config.output_vocab_size:
        raise ValueError(f"the vocabulary has {len(pieces)} pieces but the model's vocabulary sizes are "
                         f"{config.vocab_size} (source) and {config.output_vocab_size} (target).")
    if len(set(pieces)) != len(pieces):
        raise ValueError("the vocabulary pieces are not unique; CTranslate2 maps tokens by name.")
    head_dim = None if config.d_k * config.num_heads == config.d_model else config.d_k
    stack = dict(num_layers=config.num_layers, num_heads=config.num_heads,
                 pre_norm=config.norm_first, head_dim=head_dim)
    encoder = transformer_spec.TransformerEncoderSpec(**stack)
    decoder = transformer_spec.TransformerDecoderSpec(**stack)
    spec = transformer_spec.TransformerSpec(encoder, decoder)

    # Section 3.4: lookups scaled by sqrt(d_model) (CTranslate2's scale_embeddings default).
    encoder.embeddings[0].weight = _numpy(model.source_embedding.embeddings)
    decoder.embeddings.weight = _numpy(model.target_embedding.embeddings)
    decoder.projection.weight = _numpy(model.softmax_embedding.embeddings)  # tied, no bias
    encoder.position_encodings.encodings = position_table(model, "source", max_positions)
    decoder.position_encodings.encodings = position_table(model, "target", max_positions)

    for layer_spec, layer in zip(encoder.layer, model.encoder.layers):
        _set_attention(layer_spec.self_attention, layer.self_attention, layer.self_attention_norm, True)
        _set_feed_forward(layer_spec.ffn, layer)
    for layer_spec, layer in zip(decoder.layer, model.decoder.layers):
        _set_attention(layer_spec.self_attention, layer.self_attention, layer.self_attention_norm, True)
        _set_attention(layer_spec.attention, layer.cross_attention, layer.cross_attention_norm, False)
        _set_feed_forward(layer_spec.ffn, layer)
    if config.norm_first:
        _set_layer_norm(encoder.layer_norm, model.encoder.final_norm)
        _set_layer_norm(decoder.layer_norm, model.decoder.final_norm)

    spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = pieces[1], pieces[2], pieces[3]
    spec.config.decoder_start_token = pieces[2]
    spec.config.add_source_eos = True  # our sources are subwords + EOS
    spec.config.layer_norm_epsilon = float(config.layer_norm_epsilon)
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    spec.validate()
    return spec


def tokenizer_pieces(tokenizer):
    """The SentencePiece pieces of ``tokenizer`` (a ``SubwordTokenizer``) in id order."""
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_proto=tokenizer.model_proto)
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())]


def write_ctranslate2(model, tokenizer, output_dir, extra_length=50, quantization=None,
                      decoding_settings=None):
    """Writes ``model`` + ``tokenizer`` as a CTranslate2 model folder ``output_dir`` (which must not
    exist; it appears complete or not at all). ``quantization``: None (float32 as trained) or one of
    CTranslate2's weight types ("int8", "float16", ...). Returns ``output_dir``."""
    max_positions = max(model.config.max_length, 1024) + extra_length + 1
    spec = ctranslate2_spec(model, tokenizer_pieces(tokenizer), max_positions)
    with staged_export([output_dir], "the CTranslate2 export") as ((output, sources),):
        for path in write_run_files(sources, tokenizer, {
                "model": model.config.to_dict(), "extra_length": extra_length,
                "decoding": decoding_settings or {}}, config_name=SETTINGS_FILE):
            spec.register_file(path)
        try:
            spec.optimize(quantization=quantization)
        except ValueError as error:
            raise ValueError(f"quantization={quantization!r}: {error}") from None
        os.makedirs(output)
        spec.save(output)
    return output_dir


def export_ctranslate2(translator, export_dir, name, version=None, quantization=None):
    """``EXPORTERS["ctranslate2"]``: writes ``export_dir/<name>_ctranslate2/<version>`` (default the
    next free version) from an ``inference.Translator`` and returns the path."""
    (target,) = version_paths(export_dir, name, ("_ctranslate2",), version)
    return write_ctranslate2(translator.model, translator.tokenizer, target,
                             extra_length=translator.decoding.extra_length, quantization=quantization,
                             decoding_settings=decoding_settings(translator))
