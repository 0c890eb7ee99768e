"""Nothing lost, nothing half-written, from the outside: the training command on files with CRLF
line ends and a byte order mark; a non-finite update (exit 1, the latest checkpoint stays finite,
no average, no export, a summary.json that parses); SIGTERM/SIGINT during the dev BLEU and the
export (exit 143/130 within 5 s, nothing half-written); a full disk while writing a checkpoint,
the vocabulary and an export (one line, no temporary folders, the previous checkpoint loads)."""

import errno
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INTERRUPTING = os.path.join(ROOT, "tests", "interrupting.py")
PAIRS = [(f"the number {i} is small", f"die Zahl {i} ist klein") for i in range(40)] + [
    (f"a red house number {i}", f"ein rotes Haus Nummer {i}") for i in range(40)]


def environment(**extra):
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ROOT, **extra}


def wmt_flags(base, model_dir, *extra):
    return ["--dataset=files", f"--train_data={base}/train.tsv", f"--dev_data={base}/train.tsv",
            f"--data_dir={base}/data", f"--model_dir={model_dir}", "--preset=tiny",
            "--vocab_size=320", "--max_length=24", "--token_budget=256", "--warmup_steps=10",
            "--log_every_steps=1", "--dev_every_steps=0", "--dev_bleu_sentences=4",
            "--checkpoint_every_minutes=10", "--average_last=1", *extra]


def run(args, cwd, timeout=300, **env):
    result = subprocess.run([sys.executable, *args], cwd=cwd, env=environment(**env),
                            capture_output=True, text=True, errors="replace", timeout=timeout,
                            stdin=subprocess.DEVNULL)
    return result.returncode, result.stdout, result.stderr


def leftovers(folder):
    return [os.path.join(d, n) for d, names, files in os.walk(folder) for n in names + files
            if n.startswith(".tmp-") or n.endswith("_temp") or n.endswith(".partial")]


def finite_checkpoint(prefix):
    reader = tf.train.load_checkpoint(prefix)
    values = [reader.get_tensor(k) for k in reader.get_variable_to_shape_map()]
    return all(np.isfinite(v).all() for v in values if np.issubdtype(np.asarray(v).dtype, np.floating))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A run of 4 steps by the training command, on a TSV file with a byte order mark and CRLF
    line ends (what Windows editors write): they train like any file."""
    base = tmp_path_factory.mktemp("reliability")
    text = "\ufeff" + "".join(f"{en}\t{de}\r\n" for en, de in PAIRS)
    (base / "train.tsv").write_bytes(text.encode("utf-8"))
    code, stdout, stderr = run(["-m", "trainers.wmt", *wmt_flags(base, base / "run"),
                                "--train_steps=4"], cwd=base)
    assert code == 0, stderr[-3000:]
    assert "train_steps after 4 steps" in stdout
    return base


def copy_run(trained, tmp_path):
    shutil.copytree(trained / "run", tmp_path / "run")
    return tmp_path / "run"


def test_crlf_and_byte_order_mark_are_not_part_of_the_sentences(tmp_path):
    from keras_transformer.data import files, pipeline

    path = tmp_path / "windows.tsv"
    path.write_bytes("\ufeffGood morning.\tGuten Morgen.\r\nThanks.\tDanke.\r\n".encode("utf-8"))
    pairs = list(pipeline.decoded_pairs(files.load(files.parse_spec(str(path)))))
    assert pairs == [("Good morning.", "Guten Morgen."), ("Thanks.", "Danke.")]


@pytest.mark.slow
def test_a_non_finite_update_exits_1_and_saves_averages_and_exports_nothing(trained, tmp_path):
    model_dir = copy_run(trained, tmp_path)
    code, _, stderr = run(["-m", "trainers.wmt", *wmt_flags(trained, model_dir),
                           "--train_steps=5", "--learning_rate_scale=1e40",
                           f"--export_dir={tmp_path / 'exports'}"], cwd=tmp_path)
    assert code == 1, stderr[-3000:]
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("wmt: error: the update of step 5 made weights NaN or infinite")
    assert f"latest checkpoint {model_dir}/ckpt-4 is the last finite one" in last
    assert os.path.basename(tf.train.latest_checkpoint(str(model_dir))) == "ckpt-4"
    assert finite_checkpoint(str(model_dir / "ckpt-4"))
    assert not os.path.exists(model_dir / "ckpt-5.index")
    assert not os.path.exists(tmp_path / "exports") or not os.listdir(tmp_path / "exports")
    with open(model_dir / "summary.json") as stream:
        summary = json.load(stream, parse_constant=lambda name: pytest.fail(f"bare {name}"))
    assert summary["stop_reason"] == "non_finite" and summary["averaged_checkpoint"] is None
    # The averaged weights of the good run are still those of ckpt-4, not of the bad update.
    assert finite_checkpoint(str(model_dir / "averaged" / "ckpt"))


# From the signal to the process's exit (interpreter and TensorFlow teardown included, on a
# machine running other tests): well inside the 30 s a preempting Kubernetes or Slurm gives, and
# far below the stalled stand-in stage's 60 s, which a stop that waits for it would take.
PROMPT_EXIT_SECONDS = 10


def interrupt(stage, signal_name, module, flags, cwd):
    sent_at = cwd / "signal_sent_at"
    # The program's own temporary folder: the prompt exit skips the interpreter's clean-up, which
    # is where autograph removes the code files it writes there.
    temporary = cwd / "system_temporary"
    temporary.mkdir()
    process = subprocess.run([sys.executable, INTERRUPTING, stage, signal_name, module, *flags],
                             cwd=cwd, env=environment(SIGNAL_SENT_AT=str(sent_at),
                                                      TMPDIR=str(temporary)),
                             capture_output=True, text=True, errors="replace", timeout=300)
    ended = time.time()
    assert sent_at.exists(), process.stderr[-3000:]
    assert os.listdir(temporary) == [], "left in the temporary folder"
    return process.returncode, process.stderr, ended - float(sent_at.read_text())


def test_sigterm_while_the_vocabulary_is_learned_stops_at_once_and_writes_nothing(tmp_path):
    """Before training: the vocabulary is learned by SentencePiece reading the text through Python,
    where the signal arrives (and which would have turned it into an error of its own)."""
    (tmp_path / "train.tsv").write_text("".join(f"{en}\t{de}\n" for en, de in PAIRS),
                                        encoding="utf-8")
    model_dir = tmp_path / "run"
    code, stderr, seconds = interrupt("vocabulary", "SIGTERM", "wmt",
                                      wmt_flags(tmp_path, model_dir, "--train_steps=5"), tmp_path)
    assert code == 143, stderr[-3000:]
    assert seconds < PROMPT_EXIT_SECONDS, f"{seconds:.1f} s from the signal to the exit"
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith("wmt: error: stopped by SIGTERM")
    assert not list(tmp_path.rglob("*.model")) and not list(tmp_path.rglob("*.model.json"))
    assert tf.train.latest_checkpoint(str(model_dir)) is None
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("signal_name, status", [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_signal_during_the_final_dev_bleu_stops_at_once(trained, tmp_path, signal_name, status):
    model_dir = copy_run(trained, tmp_path)
    shutil.rmtree(model_dir / "averaged")
    code, stderr, seconds = interrupt(
        "dev_bleu", signal_name, "wmt", wmt_flags(trained, model_dir, "--train_steps=5",
                                                  f"--export_dir={tmp_path / 'exports'}"), tmp_path)
    assert code == status, stderr[-3000:]
    assert seconds < PROMPT_EXIT_SECONDS, f"{seconds:.1f} s from the signal to the exit"
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith(f"wmt: error: stopped by {signal_name}")
    # The step before the signal was saved; nothing after it started: no average, no export.
    assert os.path.basename(tf.train.latest_checkpoint(str(model_dir))) == "ckpt-5"
    assert not (model_dir / "averaged").exists()
    assert not (tmp_path / "exports").exists() or not os.listdir(tmp_path / "exports")
    with open(model_dir / "summary.json") as stream:
        assert json.load(stream)["stop_reason"] == signal_name.lower()
    assert leftovers(tmp_path) == []


def test_sigterm_during_the_export_stops_at_once_and_leaves_no_half_export(trained, tmp_path):
    exports = tmp_path / "exports"
    code, stderr, seconds = interrupt(
        "export", "SIGTERM", "export", [f"--model_dir={trained / 'run'}", f"--export_dir={exports}",
                                        "--name=tiny"], tmp_path)
    assert code == 143, stderr[-3000:]
    assert seconds < PROMPT_EXIT_SECONDS, f"{seconds:.1f} s from the signal to the exit"
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith("export: error: stopped by SIGTERM")
    # Neither of the two exports appeared, and the half-written one is gone with its folder.
    assert sorted(os.listdir(exports)) in ([], ["tiny"], ["tiny", "tiny_ids"])
    assert not [p for p in (exports / "tiny", exports / "tiny_ids") if p.exists() and os.listdir(p)]
    assert leftovers(exports) == []


# --- a full disk, simulated in-process --------------------------------------------------------

def no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_at_checkpoint_time_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    import keras_transformer as kt
    from keras_transformer import writing
    from keras_transformer.training import Trainer, TrainingConfig
    from keras_transformer.weights import restore_model
    from toy import toy_dataset_fn

    config = kt.TransformerConfig.from_preset("tiny", vocab_size=16)
    training = TrainingConfig(model_dir=str(tmp_path), train_steps=4, warmup_steps=4,
                              checkpoint_every_steps=2, checkpoint_every_minutes=None)
    data = toy_dataset_fn(task="reverse", vocab_size=16, global_batch_size=8, min_length=2,
                          max_length=5)
    trainer = Trainer(config, training)
    real_save = trainer.checkpointer.manager.save

    def save_then_fill_the_disk(checkpoint_number):
        if checkpoint_number < 4:
            return real_save(checkpoint_number=checkpoint_number)
        # What TensorFlow's writer leaves when the disk fills half-way.
        os.makedirs(tmp_path / f"ckpt-{checkpoint_number}_temp")
        (tmp_path / f"ckpt-{checkpoint_number}_temp" / "part-00000-of-00001.data").write_bytes(b"x")
        no_space()

    monkeypatch.setattr(trainer.checkpointer.manager, "save", save_then_fill_the_disk)
    with pytest.raises(writing.WriteError) as raised:
        trainer.fit(data)
    message = str(raised.value)
    assert "\n" not in message
    assert f"cannot write {tmp_path}/ckpt-4: no space left on the device; free space" in message
    assert f"the latest complete checkpoint is still {tmp_path}/ckpt-2" in message
    assert leftovers(tmp_path) == []
    assert tf.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-2")
    model = kt.Transformer(config)
    model((tf.ones([1, 2], tf.int32),) * 2)
    restore_model(model, str(tmp_path / "ckpt-2"))  # loads


def test_a_full_disk_while_writing_the_vocabulary_leaves_no_file(tmp_path, monkeypatch):
    from keras_transformer import writing
    from keras_transformer.tokenizer import SubwordTokenizer

    real_fdopen = os.fdopen

    def full_disk_file(handle, mode="r", *args, **kwargs):
        stream = real_fdopen(handle, mode, *args, **kwargs)
        stream.write = no_space
        return stream

    monkeypatch.setattr(writing.os, "fdopen", full_disk_file)
    target = tmp_path / "vocab" / "v.model"
    with pytest.raises(writing.WriteError, match=f"cannot write {target}: no space left"):
        SubwordTokenizer.learn([" ".join(p) for p in PAIRS] * 3, vocab_size=320,
                               out_path=str(target))
    assert os.listdir(tmp_path / "vocab") == []


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_written_files_get_the_mode_open_gives_them(tmp_path, umask):
    """A shared data_dir's vocabulary and a run's records are as readable as any file the user
    writes (a private temporary file renamed into place is not)."""
    from keras_transformer import writing

    old = os.umask(umask)
    try:
        with open(tmp_path / "by_open", "w") as stream:
            stream.write("x")
        writing.write_file(str(tmp_path / "by_write_file"), "x")
    finally:
        os.umask(old)
    modes = {name: os.stat(tmp_path / name).st_mode & 0o777 for name in ("by_open", "by_write_file")}
    assert modes["by_write_file"] == modes["by_open"] == 0o666 & ~umask
    assert sorted(os.listdir(tmp_path)) == ["by_open", "by_write_file"]


def test_a_full_disk_during_the_second_export_leaves_neither(tmp_path, monkeypatch):
    import keras_transformer as kt
    from keras_transformer import export
    from keras_transformer.inference import DecodingConfig, Translator
    from keras_transformer.tokenizer import SubwordTokenizer

    tokenizer = SubwordTokenizer.learn([" ".join(p) for p in PAIRS] * 3, vocab_size=320)
    model = kt.Transformer(kt.TransformerConfig.from_preset(
        "tiny", vocab_size=tokenizer.vocab_size, max_length=24))
    model((tf.ones([1, 2], tf.int32),) * 2)
    translator = Translator(model, tokenizer, DecodingConfig(beam_size=1, extra_length=4))
    calls = []
    real_save = tf.saved_model.save

    def second_fills_the_disk(root, output, **kwargs):
        calls.append(output)
        if len(calls) == 1:
            return real_save(root, output, **kwargs)
        os.makedirs(os.path.join(output, "variables"))  # half of it written
        no_space()

    monkeypatch.setattr(tf.saved_model, "save", second_fills_the_disk)
    with pytest.raises(ValueError, match="no space left on the device") as raised:
        export.export_for_serving(translator, str(tmp_path), "tiny")
    assert "\n" not in str(raised.value) and len(calls) == 2
    assert [p for p in (tmp_path / "tiny", tmp_path / "tiny_ids")
            if p.exists() and os.listdir(p)] == []  # the text export did not appear alone
    assert leftovers(tmp_path) == []


def test_what_a_killed_export_left_is_removed_at_the_next_export(tmp_path):
    from keras_transformer import writing
    from keras_transformer.export import staged_export

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a process id that no longer runs
    stale = tmp_path / "tiny" / f"{writing.TEMPORARY_PREFIX}{dead.pid}-abc"
    (stale / "output" / "variables").mkdir(parents=True)
    ours = tmp_path / "tiny" / f"{writing.TEMPORARY_PREFIX}{os.getpid()}-live"
    ours.mkdir()
    with staged_export([str(tmp_path / "tiny" / "2")]) as ((output, _),):
        os.makedirs(output)  # the next export (its content does not matter here)
    assert not stale.exists() and ours.exists()
    assert sorted(os.listdir(tmp_path / "tiny")) == sorted(["2", ours.name])


def test_a_write_error_in_a_command_is_one_line(tmp_path):
    code = f"""
import errno, sys
sys.argv = ["prepare_data"]
from trainers import console
from keras_transformer import writing

def main(argv):
    raise OSError(errno.ENOSPC, "No space left on device", {str(tmp_path / 'data')!r})

console.run(main)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=environment(), timeout=120)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"prepare_data: error: cannot write {tmp_path / 'data'}: no space left on the device; "
        "free space there or choose another folder")
