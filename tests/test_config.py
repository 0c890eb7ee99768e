"""TransformerConfig: Table 3 presets, overrides and validation."""

import dataclasses

import pytest

from keras_transformer import TransformerConfig

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
])
def test_bad_values_name_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TransformerConfig.from_preset("base", vocab_size=37000, **kwargs)


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
