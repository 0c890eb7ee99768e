"""The model flags derive from TransformerConfig (trainers/model_flags.py): one flag per field a user
sets, with the field's name, type and help; unset, the preset's value; a bad value refused in one
line naming the flag, by the field's own rule."""

import dataclasses
import json
import os
import subprocess
import sys
import typing

import pytest
from absl import app, flags
from absl.testing import flagsaver

from keras_transformer.config import POSITIONAL, POSITIONAL_KINDS, PRESETS, TransformerConfig
from trainers import model_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAGS = flags.FLAGS

# The model flags users have (commands, flag files such as trainers/cpu.flags): renaming or
# dropping one breaks them.
USER_FLAGS = {"num_layers", "d_model", "d_ff", "num_heads", "d_k", "d_v", "dropout_rate",
              "attention_dropout", "relu_dropout", "label_smoothing", "source_word_dropout",
              "target_word_dropout", "decoder_layerdrop", "positional", "norm_first",
              "share_embeddings"}
FLAG_CLASSES = {int: "IntegerParser", float: "FloatParser", bool: "BooleanParser",
                str: "EnumParser"}


@pytest.fixture
def parse():
    """Parses ``argv`` with the trainer's defaults (a program module another test imported may
    have set its own, e.g. the quickstart's --preset=mini)."""
    with flagsaver.flagsaver():
        def parse(*argv):
            FLAGS.unparse_flags()
            for name in model_flags.NAMES:
                FLAGS.set_default(name, None)
            FLAGS.set_default("preset", "base")
            FLAGS(["prog", *argv])
        yield parse
    FLAGS.unparse_flags()


def user_fields():
    return [field for field in dataclasses.fields(TransformerConfig)
            if field.name not in model_flags.SET_BY_THE_PROGRAM]


def test_the_flags_are_todays_and_every_user_field_has_one():
    assert set(model_flags.NAMES) == USER_FLAGS
    assert {field.name for field in user_fields()} == USER_FLAGS
    for name in model_flags.SET_BY_THE_PROGRAM:
        assert name in TransformerConfig.__dataclass_fields__, name  # no stale exclusion


@pytest.mark.parametrize("field", user_fields(), ids=lambda field: field.name)
def test_each_flag_has_its_fields_name_type_and_help(field):
    flag = FLAGS[field.name]
    # absl puts an enum's choices first: "<sinusoidal|learned>: Table 3 row (E)."
    assert flag.help.split(">: ", 1)[-1] == field.metadata["help"] and len(flag.help) > 4
    if field.metadata["rule"] is POSITIONAL:
        assert tuple(flag.parser.enum_values) == POSITIONAL_KINDS
    kind = typing.get_type_hints(TransformerConfig)[field.name]
    kind = next(a for a in typing.get_args(kind) if a is not type(None)) if typing.get_args(
        kind) else kind
    assert type(flag.parser).__name__ == FLAG_CLASSES[kind], (field.name, flag.parser)
    assert FLAGS.find_module_defining_flag(field.name) == model_flags.__name__


def test_the_help_keeps_the_citations():
    text = " ".join(FLAGS[name].help for name in model_flags.NAMES)
    for citation in ("Araabi & Monz 2020", "Sennrich & Zhang 2019", "Fan et al. 2020",
                     "Table 3 row (E)", "(3.4)"):
        assert citation in text


def test_a_flag_left_unset_takes_the_presets_value(parse):
    parse("--preset=big", "--d_model=2048", "--norm_first")
    config = model_flags.model_config(vocab_size=100)
    expected = TransformerConfig.from_preset("big", vocab_size=100, d_model=2048, norm_first=True,
                                             max_length=FLAGS.max_length + 1)
    assert config == expected
    assert (config.num_layers, config.d_ff, config.dropout_rate) == (
        PRESETS["big"]["num_layers"], PRESETS["big"]["d_ff"], PRESETS["big"]["dropout_rate"])
    assert model_flags.overrides() == {"d_model": 2048, "norm_first": True,
                                       "max_length": FLAGS.max_length + 1}


def test_false_is_a_value_not_unset(parse):
    parse("--preset=tiny", "--noshare_embeddings")
    assert model_flags.model_config(vocab_size=100).share_embeddings is False


# A value that breaks each rule of config.py.
BAD = {"must be a positive integer": "0", "must be in [0, 1)": "1.0"}


@pytest.mark.parametrize("field", [f for f in user_fields() if f.metadata["rule"] is not None
                                   and f.metadata["rule"][1] in BAD], ids=lambda f: f.name)
def test_a_bad_value_is_refused_by_the_fields_rule_naming_the_flag(parse, field):
    problem = field.metadata["rule"][1]
    value = BAD[problem]
    with pytest.raises(flags.IllegalFlagValueError) as error:
        parse(f"--{field.name}={value}")
    message = str(error.value)
    assert message == f"flag --{field.name}={FLAGS[field.name].parser.parse(value)}: {problem}"
    assert "\n" not in message


def test_values_that_do_not_fit_together_name_the_preset_and_the_flags(parse):
    parse("--preset=tiny", "--d_model=100", "--num_heads=8")
    with pytest.raises(app.UsageError) as error:
        model_flags.check()
    assert str(error.value).startswith(
        "flags --preset=tiny --d_model=100 --num_heads=8: d_model=100 is not divisible by "
        "num_heads=8")


def test_the_command_says_a_bad_value_in_one_line_naming_the_flag(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "trainers.wmt", "--dataset=ding_de_en", "--d_model=-8"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert lines == ["wmt: error: flag --d_model=-8: must be a positive integer (see python -m "
                     "trainers.wmt --help)"]


def test_every_model_flag_is_unset_by_default_in_the_trainer():
    # In a process of its own: trainers.quickstart, which other tests import, sets defaults of its
    # own for some of these flags.
    code = ("import json; from absl import flags; from trainers import wmt, model_flags; "
            "print(json.dumps({n: flags.FLAGS[n].default for n in model_flags.NAMES}))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    defaults = json.loads(result.stdout.strip().splitlines()[-1])
    assert defaults == dict.fromkeys(USER_FLAGS)  # unset: the preset's value
