"""docs/tools/figures.py: the schedule picture is Eq. (3) as our code computes it, the attention
picture shows the weights the model computes, the command draws every picture from a run folder and
benchmark JSON, re-plots the saved points when the runs are not here, and says in one line which
picture it could not draw and why."""

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from docs.tools import figures

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PNG = b"\x89PNG\r\n\x1a\n"
WORDS = ("the cat sees a big dog", "a small bird eats the red fish", "since 2009 laws have passed")


def paper_rate(step_num, d_model, warmup, scale=1.0):
    """Eq. (3), written out here independently of the library."""
    return scale * d_model ** -0.5 * min(step_num ** -0.5, step_num * warmup ** -1.5)


def test_the_schedule_picture_is_eq3_for_the_paper_and_the_main_job():
    from keras_transformer.config import PRESETS
    from trainers.quickstart import QUICKSTART_DEFAULTS

    main = figures.main_job_schedule()
    # The main job's settings, read from the quickstart's defaults and its preset.
    assert main["d_model"] == PRESETS[QUICKSTART_DEFAULTS["preset"]]["d_model"]
    assert main["warmup_steps"] == QUICKSTART_DEFAULTS["warmup_steps"]
    assert main["scale"] == QUICKSTART_DEFAULTS.get("learning_rate_scale", 1.0)
    assert (figures.PAPER_SCHEDULE["d_model"], figures.PAPER_SCHEDULE["warmup_steps"]) == (512, 4000)
    for settings in (figures.PAPER_SCHEDULE, main, {**main, "scale": 2.5}):
        steps = [1, 2, 50, settings["warmup_steps"] - 1, settings["warmup_steps"],
                 settings["warmup_steps"] + 1, 3429, 100_000]
        expected = [paper_rate(s, settings["d_model"], settings["warmup_steps"], settings["scale"])
                    for s in steps]
        np.testing.assert_allclose(figures.schedule_values(settings, steps), expected, rtol=1e-5)
    # The peak of the paper's base model, as section 5.3 implies: 512^-0.5 * 4000^-0.5.
    assert figures.schedule_values(figures.PAPER_SCHEDULE, [4000])[0] == pytest.approx(
        (512 * 4000) ** -0.5, rel=1e-5)


def tiny_translator(tmp_path=None, norm_first=True):
    """An untrained tiny model (norm_first as the main job) whose vocabulary covers the words of
    the paper's Figure 3 sentence; with ``tmp_path``, the vocabulary is also written there."""
    import keras

    import keras_transformer as kt
    from keras_transformer.inference import Translator
    from keras_transformer.tokenizer import SubwordTokenizer

    keras.utils.set_random_seed(5)
    text = [figures.FIGURE3_SENTENCE] * 20 + [f"{w} {i}." for i in range(30) for w in WORDS]
    tokenizer = SubwordTokenizer.learn(
        text, vocab_size=320, out_path=None if tmp_path is None else str(tmp_path / "vocab.model"))
    config = kt.TransformerConfig.from_preset("tiny", vocab_size=tokenizer.vocab_size,
                                              max_length=160, norm_first=norm_first)
    model = kt.Transformer(config)
    model((np.ones((1, 2), "int32"), np.ones((1, 2), "int32")))
    return Translator(model, tokenizer)


def direct_attention(model, source_ids, layer):
    """The self-attention weights of encoder layer ``layer`` (1-based), computed here through the
    layers one by one, the last sub-layer's softmax(Q K^T / sqrt(d_k)) in NumPy."""
    from keras import ops

    from keras_transformer.layers import masks, positional_encoding

    config = model.config
    length = source_ids.shape[1]
    x = model.source_embedding(source_ids) + positional_encoding(length, config.d_model)
    mask = masks.padding_mask(source_ids, config.pad_id)
    for encoder_layer in model.encoder.layers[:layer - 1]:
        x = encoder_layer(x, padding_mask=mask)
    chosen = model.encoder.layers[layer - 1]
    h = chosen.self_attention_norm(x) if config.norm_first else x
    attention = chosen.self_attention

    def heads(projection):
        value = ops.convert_to_numpy(projection(h))[0]
        return value.reshape(length, config.num_heads, config.d_k).transpose(1, 0, 2)

    q, k = heads(attention.query_projection), heads(attention.key_projection)
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(config.d_k)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return scores / scores.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("norm_first", [True, False])
def test_the_attention_drawn_is_what_the_model_computes(norm_first):
    translator = tiny_translator(norm_first=norm_first)
    model = translator.model
    found = figures.encoder_self_attention(translator, figures.FIGURE3_SENTENCE)
    source_ids = np.asarray(translator.source_ids([figures.FIGURE3_SENTENCE])[0])
    assert found["layer"] == found["num_layers"] == model.config.num_layers  # the last by default
    assert found["pieces"][-1] == "</s>" and len(found["pieces"]) == source_ids.shape[1]
    weights = found["weights"]
    assert weights.shape == (model.config.num_heads,) + (source_ids.shape[1],) * 2
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(weights, direct_attention(model, source_ids, found["layer"]),
                               atol=1e-5)
    first = figures.encoder_self_attention(translator, figures.FIGURE3_SENTENCE, layer=1)
    np.testing.assert_allclose(first["weights"], direct_attention(model, source_ids, 1), atol=1e-5)
    assert not np.allclose(first["weights"], weights)  # another layer, other weights
    with pytest.raises(ValueError, match="layers 1 to 2"):
        figures.encoder_self_attention(translator, "a cat", layer=3)


def test_pieces_are_merged_into_words_keeping_rows_summing_to_one():
    pieces = ["\u2581mak", "ing", "\u2581the", "\u2581vot", "ing", ".", "</s>"]
    assert figures.word_groups(pieces) == [[0, 1], [2], [3, 4, 5], [6]]
    rng = np.random.default_rng(0)
    weights = rng.random((2, 7, 7))
    weights /= weights.sum(axis=-1, keepdims=True)
    words, merged = figures.word_attention(weights, pieces)
    assert words == ["making", "the", "voting.", "<EOS>"]
    np.testing.assert_allclose(merged.sum(axis=-1), 1.0)
    groups = figures.word_groups(pieces)
    for h in range(2):
        for i, rows in enumerate(groups):
            for j, columns in enumerate(groups):
                expected = np.mean([weights[h, r, columns].sum() for r in rows])
                assert merged[h, i, j] == pytest.approx(expected)


def benchmark_results(folder):
    """decoding.json and training_throughput.json in the form the benchmarks write."""
    machine = {"date": "2026-01-01 00:00 UTC", "cpu": "Test CPU", "cpus": 2, "tensorflow": "2.21.0",
               "load_average": [0.1, 0.1, 0.1]}
    sweep = [{"search": "beam4", "batch": 4, "output length": length, "cache": cache,
              "decoder steps": length,
              "seconds": {"median": length * factor, "min": length * factor * 0.9,
                          "max": length * factor * 1.1}}
             for length in (8, 16, 32) for cache, factor in (("yes", 0.01), ("no", 0.03))]
    (folder / "decoding.json").write_text(json.dumps(
        {"model": "a test model", "runs": 3, "machine": machine, "length_sweep": sweep}))
    rows = [{"preset": preset, "precision": precision, "xla": xla,
             "model_flops_per_second": flops, "tokens_per_second": 1000.0}
            for preset, flops in (("small", 4e10), ("base", 6e10))
            for precision in ("float32", "bfloat16") for xla in (False, True)]
    (folder / "training_throughput.json").write_text(json.dumps(
        {"machine": machine, "matmul_size": 1024, "rows": rows,
         "matmul_peak_flops": {"float32": 1e11, "bfloat16": 2e11},
         "data": {"dataset": "ding_de_en", "token_budget": 4096}}))


def tiny_run(tmp_path):
    """A run folder as the trainer leaves it, made by hand in a second: config.json, the
    vocabulary, one checkpoint, TensorBoard train and dev scalars, and its own-files corpus."""
    import tensorflow as tf

    from keras_transformer import runs, weights
    from keras_transformer.data import DataConfig
    from keras_transformer.training import callbacks

    run = tmp_path / "run"
    run.mkdir()
    paths = {}
    for split, count in (("train", 40), ("dev", 6), ("test", 6)):
        paths[split] = tmp_path / f"{split}.tsv"
        paths[split].write_text("".join(f"{WORDS[i % 3]} {i}.\t{WORDS[(i + 1) % 3]} {i}.\n"
                                        for i in range(count)), encoding="utf-8")
    data = DataConfig(dataset="files", data_dir=str(tmp_path / "data"), vocab_size=320,
                      train_data=str(paths["train"]), dev_data=str(paths["dev"]),
                      test_data=str(paths["test"]))
    model = tiny_translator(run).model
    prefix = weights.model_checkpoint(model).write(str(run / "ckpt-4"))
    tf.compat.v1.train.update_checkpoint_state(str(run), prefix)
    runs.write_json(str(run / runs.CONFIG_FILE), {
        "model": model.config.to_dict(), "data": dataclasses.asdict(data), "preset": "tiny",
        "dev_bleu_sentences": 6, "training": {"mixed_precision": "float32"}})
    for folder, tags in (("train", ("loss",)), ("dev", ("loss", "bleu"))):
        with tf.summary.create_file_writer(str(run / folder)).as_default():
            for step in (1, 2, 3, 4):
                for tag in tags:
                    callbacks.write_scalar(tag, 5.0 - step, step)
            callbacks.write_text("translations", "a text summary, not a curve", 4)
    return run


@pytest.mark.slow
def test_the_command_draws_every_picture_and_replots_its_points(tmp_path):
    run = tiny_run(tmp_path)
    results, output = tmp_path / "results", tmp_path / "images"
    results.mkdir()
    benchmark_results(results)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([sys.executable, "-m", "docs.tools.figures", f"--model_dirs={run}",
                           "--labels=tiny run", f"--long_model_dir={run}", "--long_label=long",
                           f"--results_dir={results}",
                           f"--output_dir={output}"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    for name, files in figures.FIGURES.items():
        assert f"figures: {name}: wrote" in done.stdout, done.stdout
        for file in files:
            content = (output / file).read_bytes()
            assert len(content) < 150 * 1024, file
            if file.endswith(".png"):
                assert content.startswith(PNG), file
    assert f"read from the run folders {run}" in done.stdout
    assert f"computed by the model of {run}" in done.stdout
    curve = json.loads((output / "learning_curve.json").read_text())["tiny run"]
    assert [step for _, step, _ in curve["train_loss"]] == [1, 2, 3, 4]
    assert curve["dev_sentences"] == 6 and "float32" in curve["machine"]
    # the long run's picture: the same points, under its own label
    assert json.loads((output / "long_recipe.json").read_text())["long"] == curve
    attention = json.loads((output / "attention.json").read_text())
    assert attention["words"][-1] == "<EOS>" and "making" in attention["words"]
    np.testing.assert_allclose(np.sum(attention["weights"], axis=-1), 1.0, atol=1e-3)

    # The same inputs draw the same pictures, byte for byte (what the docs' pictures rest on).
    again = tmp_path / "again"
    options = {name: figures.FLAGS[name].default for name in (
        "runs_machine", "attention_model_dir", "attention_checkpoint", "sentence", "word", "layer",
        "dpi")}
    options.update(model_dirs=[str(run)], labels=["tiny run"], long_model_dir=str(run),
                   long_label="long", results_dir=str(results), output_dir=str(again))
    assert figures.make_figures(list(figures.FIGURES), options, say=lambda line: None) == []
    for files in figures.FIGURES.values():
        for file in files:
            if file.endswith(".png"):
                assert (again / file).read_bytes() == (output / file).read_bytes(), file

    # Without the run folder: the points saved beside the pictures are plotted again.
    lines = []
    options = {"model_dirs": [str(tmp_path / "gone")], "output_dir": str(output), "dpi": 60,
               "word": "making"}
    os.remove(output / "learning_curve.png")
    assert figures.make_figures(["learning_curve", "attention"], options, say=lines.append) == []
    assert len(lines) == 2 and all("re-plotted from" in line for line in lines), lines
    assert (output / "learning_curve.png").read_bytes().startswith(PNG)


def test_missing_benchmark_data_is_one_line_each(tmp_path):
    lines = []
    options = {"results_dir": str(tmp_path), "output_dir": str(tmp_path / "images"), "dpi": 60}
    (tmp_path / "decoding.json").write_text(json.dumps({"throughput": [], "machine": {}}))
    names = ["decode_time", "training_throughput"]
    assert figures.make_figures(names, options, say=lines.append) == names
    assert len(lines) == 2
    assert lines[0].startswith("figures: decode_time: NOT drawn: ") and "'length_sweep'" in lines[0]
    assert lines[1].startswith("figures: training_throughput: NOT drawn: ")
    assert "training_throughput.json not found" in lines[1]
    assert not (tmp_path / "images").exists()
    # A row without a field the picture needs, and a file that is not JSON.
    (tmp_path / "decoding.json").write_text(json.dumps(
        {"length_sweep": [{"output length": 8, "cache": "yes", "batch": 4}]}))
    (tmp_path / "training_throughput.json").write_text("{not json")
    lines.clear()
    figures.make_figures(names, options, say=lines.append)
    assert "has no 'seconds.median'" in lines[0] and "is not valid JSON" in lines[1], lines


def test_the_command_says_what_it_could_not_draw_without_a_traceback(tmp_path):
    code = """
import runpy, sys
sys.argv = ["figures", "--figures=decode_time,training_throughput",
            "--results_dir=" + sys.argv[1], "--output_dir=" + sys.argv[1]]
try:
    runpy.run_module("docs.tools.figures", run_name="__main__")
finally:
    print("TENSORFLOW IMPORTED" if "tensorflow" in sys.modules else "no tensorflow")
"""
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 3 and lines[-1] == "no tensorflow", lines
    assert all("NOT drawn" in line and "not found" in line for line in lines[:2])
    assert done.stderr.strip().splitlines()[-1].startswith("figures: 2 of 2 pictures not drawn")
