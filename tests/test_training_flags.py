"""The training flags of trainers.wmt and trainers.quickstart (trainers/training_flags.py): read
into one TrainingConfig, once, the same in both programs for the same flags; --average_last's
default follows --preset; the quickstart shares the flag modules, not trainers.wmt."""

import json
import os
import subprocess
import sys

import pytest
from absl import flags
from absl.testing import flagsaver

from trainers import training_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAGS = flags.FLAGS


@pytest.fixture
def parse():
    """Parses ``argv`` with the trainer's defaults (a program module another test imported may
    have set its own)."""
    with flagsaver.flagsaver():
        def parse(*argv):
            FLAGS.unparse_flags()
            for name, default in (("preset", "base"), ("average_last", None),
                                  ("keep_checkpoints", 20)):
                FLAGS.set_default(name, default)
            FLAGS(["prog", *argv])
        yield parse
    FLAGS.unparse_flags()


@pytest.mark.parametrize("preset,averaged", [("base", 5), ("big", 20), ("mini", 5)])
def test_unset_average_last_is_section_6_1s_count_for_the_preset(parse, preset, averaged):
    parse(f"--preset={preset}", "--keep_checkpoints=1")
    config = training_flags.training_config("runs/x")
    assert config.average_last == averaged
    assert config.keep_checkpoints == averaged  # never fewer than it averages


def test_given_average_last_wins_over_the_preset(parse):
    parse("--preset=big", "--average_last=0")
    config = training_flags.training_config("runs/x")
    assert (config.average_last, config.keep_checkpoints) == (0, 20)


def test_keep_only_the_averaged_unless_keep_checkpoints_is_given(parse):
    parse("--average_last=2")
    assert training_flags.training_config("runs/x", keep_only_the_averaged=True) \
        .keep_checkpoints == 2
    parse("--average_last=0")
    assert training_flags.training_config("runs/x", keep_only_the_averaged=True) \
        .keep_checkpoints == 1
    parse("--average_last=2", "--keep_checkpoints=9")
    assert training_flags.training_config("runs/x", keep_only_the_averaged=True) \
        .keep_checkpoints == 9


def test_zero_means_none_where_the_config_takes_none(parse):
    parse("--train_steps=0", "--train_minutes=3", "--checkpoint_every_steps=0",
          "--dev_every_steps=0", "--early_stopping_patience=0")
    config = training_flags.training_config("runs/x")
    assert (config.train_steps, config.train_minutes, config.checkpoint_every_steps,
            config.dev_every_steps, config.early_stopping_patience) == (None, 3.0, None, None,
                                                                       None)
    # The minutes' 0 too, so that a flagfile's time limit (trainers/cpu.flags) can be lifted.
    parse("--flagfile=" + os.path.join(ROOT, "trainers", "cpu.flags"), "--train_steps=7",
          "--train_minutes=0", "--checkpoint_every_minutes=0", "--checkpoint_every_steps=5")
    config = training_flags.training_config("runs/x")
    assert (config.train_steps, config.train_minutes, config.checkpoint_every_minutes,
            config.checkpoint_every_steps) == (7, None, None, 5)


# A program's main() up to where TensorFlow would start (make_strategy): every TrainingConfig it
# built, and whether trainers.wmt was imported.
BUILT = """
import dataclasses, importlib, json, sys
from absl import flags
name = sys.argv[1]
program = importlib.import_module("trainers." + name)
from trainers import training_flags
flags.FLAGS([name, *sys.argv[2:]])
built = []
build = training_flags.training_config
training_flags.training_config = lambda *a, **k: built.append(build(*a, **k)) or built[-1]

def stop():
    print(json.dumps({"configs": [dataclasses.asdict(c) for c in built],
                      "imports_wmt": "trainers.wmt" in sys.modules}))
    sys.exit(0)

training_flags.make_strategy = stop
program.main([name])
"""


def built(program, args, tmp_path):
    result = subprocess.run([sys.executable, "-c", BUILT, program, *args], cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"},
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_init_from_shipped_is_the_shipped_models_folder(parse, monkeypatch):
    """``--init_from=shipped`` works the same in a clone and in the wheel, which keeps the shipped
    model elsewhere; anything else is kept as given."""
    from trainers import shipped

    monkeypatch.setattr(shipped, "shipped_model_dir", lambda: "elsewhere/saved_models/quickstart")
    parse("--init_from=shipped")
    assert training_flags.training_config("runs/x").init_from == "elsewhere/saved_models/quickstart"
    parse("--init_from=./shipped")
    assert training_flags.training_config("runs/x").init_from == "./shipped"
    monkeypatch.setattr(shipped, "shipped_model_dir", lambda: None)
    with pytest.raises(flags.IllegalFlagValueError,
                       match="--init_from=shipped: this copy of the project has no shipped model"):
        parse("--init_from=shipped")


def test_quickstart_and_wmt_build_the_same_training_config_once_for_the_same_flags(tmp_path):
    args = [f"--model_dir={tmp_path / 'run'}", f"--export_dir={tmp_path / 'saved'}",
            "--dataset=ding_de_en", "--preset=tiny", "--train_steps=50", "--train_minutes=3",
            "--warmup_steps=10", "--learning_rate_scale=2", "--accumulation_steps=2",
            "--mixed_precision=float32", "--checkpoint_every_steps=5",
            "--checkpoint_every_minutes=1", "--keep_checkpoints=7", "--average_last=3",
            "--log_every_steps=5", "--dev_every_steps=10", "--resume_data=restart",
            "--early_stopping_patience=2", "--early_stopping_metric=loss",
            "--early_stopping_min_delta=0.01", "--ema_decay=0.9"]
    wmt, quickstart = built("wmt", args, tmp_path), built("quickstart", args, tmp_path)
    assert len(wmt["configs"]) == len(quickstart["configs"]) == 1
    assert wmt["configs"] == quickstart["configs"]
    assert wmt["configs"][0]["average_last"] == 3 and wmt["configs"][0]["ema_decay"] == 0.9
    assert not quickstart["imports_wmt"], "the quickstart shares flag modules, not trainers.wmt"

