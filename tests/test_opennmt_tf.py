"""The OpenNMT-tf twin's data (benchmarks/opennmt_tf): the pairs our trainer keeps, as the same
pieces under the same ids, and the throughput read from either engine's log."""

import collections
import dataclasses
import datetime
import os
import subprocess

import pytest

from benchmarks.opennmt_tf import twin
from keras_transformer import data
from keras_transformer.data import batching

SIDE_BY_SIDE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            "benchmarks", "opennmt_tf", "side_by_side.sh")

WORDS = ("the house is very old and she waved goodbye to her friends who were standing near "
         "the small red door of a garden in spring").split()


def corpus(path, count=300):
    """Pairs of 2 to 29 words, so a short length limit drops some."""
    lines = []
    for i in range(count):
        words = [WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(2 + i % 28)]
        lines.append(f"{' '.join(words)}.\t{' '.join(reversed(words))}!\n")
    path.write_text("".join(lines), encoding="utf-8")
    return str(path)


def test_export_gives_the_trainers_pairs_as_pieces_under_the_same_ids(tmp_path):
    config = data.DataConfig(dataset="files", train_data=corpus(tmp_path / "train.tsv"),
                             data_dir=str(tmp_path), vocab_size=320, max_length=64,
                             token_budget=256, bucket_multiple=1)
    tokenizer, _ = data.load_or_learn_tokenizer(config)
    # A limit some pair's longer side reaches exactly: with its EOS it is one too long.
    longest = sorted(max(len(ids) for ids in (tokenizer.tokenize([s]).to_list()[0],
                                              tokenizer.tokenize([t]).to_list()[0]))
                     for s, t in data.load_text_pairs(config, "train").as_numpy_iterator())
    config = dataclasses.replace(config, max_length=longest[len(longest) // 2])
    kept, dropped = twin.export(config, str(tmp_path / "out"))
    # the trainer's training pairs: the file's, but for the dev and test pairs held out of it
    training_pairs = len(list(data.decoded_pairs(data.load_text_pairs(config, "train"))))
    assert data.held_out_splits(config) and training_pairs < 300
    assert kept and dropped and kept + dropped == training_pairs
    vocabulary = (tmp_path / "out" / "vocab.txt").read_text(encoding="utf-8").splitlines()
    # OpenNMT-tf appends <unk>: the same number of ids as ours.
    assert len(vocabulary) + 1 == tokenizer.vocab_size
    assert vocabulary[:3] == twin.OPENNMT_SPECIALS and len(set(vocabulary)) == len(vocabulary)
    ours = {piece: index + 1 for index, piece in enumerate(vocabulary) if index >= 3}

    def ids(line):
        return tuple(ours[piece] for piece in line.split())

    exported = {language: [ids(line) for line in (tmp_path / "out" / f"train.{language}")
                           .read_text(encoding="utf-8").splitlines()] for language in ("en", "de")}
    # The reference: what the trainer's own batching keeps (EOS appended, longer pairs dropped).
    spec = batching.BucketSpec.make(config.max_length, config.token_budget, 1)
    trained = collections.Counter()
    for (source, _), target in batching.bucket_batch(
            batching.encode_pairs(data.load_text_pairs(config, "train"), tokenizer), spec):
        for row, out in zip(source.numpy(), target.numpy()):
            trained[(tuple(int(i) for i in row if i > 0)[:-1],
                     tuple(int(i) for i in out if i > 0)[:-1])] += 1
    assert collections.Counter(zip(exported["en"], exported["de"])) == trained


def log_lines(engine, steps, seconds, tokens):
    """A log of ``engine`` whose interval k ends at steps[k], lasts seconds[k] and runs at
    tokens[k] target tokens/s (interval 0 ends at the first line)."""
    lines, clock, before = [], datetime.datetime(2026, 1, 1, 10), 0
    for step, length, rate in zip(steps, seconds, tokens):
        clock += datetime.timedelta(seconds=length)
        if engine == "ours":
            lines.append(f"{clock:%Y-%m-%d %H:%M:%S} step {step}/{steps[-1]} | loss 5.0 | acc 0.1 | "
                         f"{length / (step - before):.6f} s/step | {rate:,.0f} tgt tok/s | "
                         f"{2 * rate:,.0f} src+tgt tok/s")
        else:
            lines.append(f"{clock.isoformat(' ', 'microseconds')}: I training.py:1] Step = {step} ; "
                         f"steps/s = 1.00, tokens/s = {2 * rate:.0f} ({rate:.0f} source, "
                         f"{rate:.0f} target) ; Loss = 5")
        before = step
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("engine, every", [("ours", 50), ("OpenNMT-tf", 10)])
def test_throughput_is_updates_and_tokens_over_the_windows_time(engine, every):
    steps = list(range(every, 20 * every + 1, every))
    seconds = [1.0 + (k % 3) * 0.5 for k in range(len(steps))]
    tokens = [8000.0 + 100 * k for k in range(len(steps))]
    first, last = steps[4], steps[15] + every // 2  # the window ends at the last line before
    name, updates, total, target = twin.window(log_lines(engine, steps, seconds, tokens),
                                                     first, last)
    inside = range(5, 16)
    assert name == engine and updates == steps[15] - first
    assert total == pytest.approx(sum(seconds[k] for k in inside), rel=1e-5)
    assert target == pytest.approx(sum(seconds[k] * tokens[k] for k in inside), rel=1e-5)
    with pytest.raises(ValueError, match="no progress lines after update"):
        twin.window(log_lines(engine, steps, seconds, tokens), steps[-1])


def fake_program(path, body):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


def side_by_side(cwd, python=None):
    """side_by_side.sh from a project folder with OpenNMT-tf installed (a stand-in that trains
    nothing) and ``python`` as ours (None: the script's own choice)."""
    fake_program(cwd / "runs" / "opennmt_tf" / "venv" / "bin" / "onmt-main", "exit 0")
    env = {k: v for k, v in os.environ.items() if k != "PYTHON"}
    if python:
        env["PYTHON"] = python
    return subprocess.run(["bash", SIDE_BY_SIDE, "10", "2"], cwd=cwd, capture_output=True,
                          text=True, timeout=60, env=env)


@pytest.mark.parametrize("given", [True, False], ids=["PYTHON", "the project's .venv"])
def test_side_by_side_without_our_packages_is_one_line_naming_the_python(tmp_path, given):
    # A Python without the project, given as PYTHON or found as the project's .venv/bin/python.
    bare = fake_program(tmp_path / (".venv/bin" if not given else "bare") / "python", "exit 1")
    result = side_by_side(tmp_path, bare if given else None)
    assert result.returncode == 2
    shown = bare if given else ".venv/bin/python"
    assert result.stderr.strip().splitlines() == [
        f"side_by_side.sh: {shown} cannot import keras_transformer: run from the "
        "project root after bash trainers/setup.sh, or set PYTHON"]
    assert not (tmp_path / "runs" / "opennmt_tf" / "max_step.yml").exists()  # nothing began


def test_a_failed_training_is_one_line_naming_its_log_and_leaves_no_run_folder(tmp_path):
    # Ours: imports fine, its training fails after writing its run folder.
    python = fake_program(tmp_path / "ours" / "python", """case "$1" in
  -c) exit 0 ;;
  -m) [ "$2" = trainers.wmt ] && mkdir -p runs/opennmt_tf/ours && echo "Traceback: boom" && exit 1 ;;
esac
exit 0""")
    (tmp_path / "runs" / "opennmt_tf" / "data").mkdir(parents=True)
    (tmp_path / "runs" / "opennmt_tf" / "data" / "vocab.txt").write_text("<blank>\n")
    result = side_by_side(tmp_path, python)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "side_by_side.sh: the ours training of round 1 failed: its log is runs/opennmt_tf/ours-1.log"]
    assert "Traceback: boom" in (tmp_path / "runs" / "opennmt_tf" / "ours-1.log").read_text()
    assert not (tmp_path / "runs" / "opennmt_tf" / "ours").exists()
