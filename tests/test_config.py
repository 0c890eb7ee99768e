"""TransformerConfig: Table 3 presets, overrides and validation; the kinds of value every config takes."""

import dataclasses
import json
import pathlib

import numpy as np
import pytest

from keras_transformer import TransformerConfig
from keras_transformer.data import DataConfig
from keras_transformer.inference import DecodingConfig, SamplingConfig
from keras_transformer.training import TrainingConfig

TABLE_3 = {  # N, d_model, d_ff, h, d_k, d_v, P_drop
    "base": (6, 512, 2048, 8, 64, 64, 0.1),
    "big": (6, 1024, 4096, 16, 64, 64, 0.3),
}


@pytest.mark.parametrize("preset", sorted(TABLE_3))
def test_presets_are_table_3(preset):
    c = TransformerConfig.from_preset(preset, vocab_size=37000)
    assert (c.num_layers, c.d_model, c.d_ff, c.num_heads, c.d_k, c.d_v, c.dropout_rate) == TABLE_3[preset]
    assert c.label_smoothing == 0.1 and c.positional == "sinusoidal" and c.share_embeddings
    assert not c.norm_first and c.vocab_size == 37000


@pytest.mark.parametrize("overrides,expected", [
    (dict(num_heads=1, d_k=512, d_v=512), (1, 512, 512)),  # row (A)
    (dict(num_heads=16), (16, 32, 32)),                      # row (A), d_k derived
    (dict(d_k=16), (8, 16, 64)),                              # row (B)
])
def test_table_3_rows_are_overrides(overrides, expected):
    c = TransformerConfig.from_preset("base", vocab_size=37000, **overrides)
    assert (c.num_heads, c.d_k, c.d_v) == expected


def test_config_is_frozen_and_round_trips():
    c = TransformerConfig.from_preset("small", vocab_size=8000, positional="learned")
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.d_model = 3
    assert TransformerConfig.from_dict(c.to_dict()) == c


@pytest.mark.parametrize("kwargs,message", [
    (dict(heads=3), r"Unknown TransformerConfig field\(s\) \['heads'\]"),
    (dict(num_heads=3), "d_model=512 is not divisible by num_heads=3"),
    (dict(dropout_rate=1.5), "dropout_rate must be in"),
    (dict(positional="rotary"), "positional must be one of"),
    (dict(num_layers=0), "num_layers must be a positive integer"),
    # a string where a bool is wanted is true to Python: "no" would build a pre-LN model
    (dict(norm_first="no"), "norm_first must be True or False, got 'no'"),
    (dict(share_embeddings="False"), "share_embeddings must be True or False"),
    (dict(layer_norm_epsilon=-1e-6), "layer_norm_epsilon must be a positive number"),
    (dict(layer_norm_epsilon="1e-6"), "layer_norm_epsilon must be a positive number"),
    # each field alone before the checks between fields, which would compare a str with an int
    (dict(num_heads="4"), "num_heads must be a positive integer, got '4'"),
    (dict(pad_id="0"), "pad_id must be an integer >= 0, got '0'"),
])
def test_bad_values_name_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TransformerConfig.from_preset("base", vocab_size=37000, **kwargs)


def test_numpy_scalars_are_settings_kept_as_python_s():
    # a size read from an array: accepted, and recorded as JSON and Keras configs can hold it
    c = TransformerConfig.from_preset("tiny", vocab_size=np.int64(296), norm_first=np.bool_(True),
                                      dropout_rate=np.float32(0.25))
    assert (c.vocab_size, c.norm_first, c.dropout_rate) == (296, True, 0.25)
    assert [type(v) for v in (c.vocab_size, c.norm_first, c.dropout_rate)] == [int, bool, float]
    assert TransformerConfig.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    data = DataConfig(vocab_size=np.int64(320), hold_out=np.bool_(False),
                      data_dir=pathlib.Path("d"))
    assert type(data.vocab_size) is int and data.hold_out is False and data.data_dir == "d"
    assert type(DecodingConfig(beam_size=np.int32(4)).beam_size) is int


@pytest.mark.parametrize("kwargs,message", [
    (dict(hold_out="no"), "hold_out='no': must be True or False"),
    (dict(dataset="files", train_data=["a.tsv"]), r"train_data=\['a.tsv'\]: must be a string"),
    (dict(vocab_size="8000"), "vocab_size='8000': must be an integer"),
    (dict(subword_sampling=float("nan")), "subword_sampling=nan: must be a finite number"),
])
def test_data_settings_of_the_wrong_kind_name_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DataConfig(**kwargs)


def test_a_bool_is_no_count_and_a_string_no_bool_in_the_other_configs():
    for make, message in (
            (lambda: DecodingConfig(beam_size=True), "beam_size must be a positive integer, got True"),
            (lambda: SamplingConfig(top_k=True), "top_k must be an integer >= 0"),
            (lambda: TrainingConfig(model_dir="x", jit_compile="no"),
             "jit_compile must be True or False, got 'no'"),
            (lambda: TrainingConfig(model_dir="x", ema_decay=True), "ema_decay must be a number")):
        with pytest.raises(ValueError, match=message):
            make()


def test_unknown_preset_and_bad_vocabulary():
    with pytest.raises(ValueError, match="Unknown preset 'huge'"):
        TransformerConfig.from_preset("huge", vocab_size=100)
    with pytest.raises(ValueError, match="vocab_size must be a positive integer"):
        TransformerConfig.from_preset("tiny", vocab_size=0)


LOW_RESOURCE = ("source_word_dropout", "target_word_dropout", "decoder_layerdrop")


@pytest.mark.parametrize("preset", ["base", "big", "small", "mini", "tiny"])
def test_low_resource_regularisers_are_off_by_default(preset):
    c = TransformerConfig.from_preset(preset, vocab_size=1000)
    assert [getattr(c, name) for name in LOW_RESOURCE] == [0.0, 0.0, 0.0]


def test_low_resource_regularisers_are_overrides_and_round_trip():
    c = TransformerConfig.from_preset("mini", vocab_size=1000, source_word_dropout=0.1,
                                      target_word_dropout=0.2, decoder_layerdrop=0.3)
    assert (c.source_word_dropout, c.target_word_dropout, c.decoder_layerdrop) == (0.1, 0.2, 0.3)
    assert (c.num_layers, c.d_model) == (3, 128)  # the rest is still the preset's
    values = c.to_dict()  # what a run's config.json records
    assert {name: values[name] for name in LOW_RESOURCE} == dict(
        source_word_dropout=0.1, target_word_dropout=0.2, decoder_layerdrop=0.3)
    assert TransformerConfig.from_dict(values) == c
    # config.json of a run from before these fields existed still loads, with them off.
    older = {k: v for k, v in values.items() if k not in LOW_RESOURCE}
    assert [getattr(TransformerConfig.from_dict(older), n) for n in LOW_RESOURCE] == [0.0] * 3


@pytest.mark.parametrize("field", LOW_RESOURCE)
@pytest.mark.parametrize("value", [1.0, 1.5, -0.1, "0.1"])
def test_low_resource_rates_must_be_in_0_1(field, value):
    with pytest.raises(ValueError, match=rf"{field} must be in \[0, 1\)"):
        TransformerConfig.from_preset("tiny", vocab_size=100, **{field: value})
