"""`python -m benchmarks --smoke`: every benchmark's code path runs, and its report holds
numbers that hang together (so the benchmark command cannot rot unnoticed)."""

import collections
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("ctranslate2")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_smoke_run_reports_every_part(tmp_path):
    # One test, not a module fixture shared by several: under pytest-xdist each worker would
    # run the fixture (minutes) again.
    result = smoke_report(tmp_path)
    check_training_rows(result)
    check_profile_rows(result)
    check_decoding_rows(result)
    check_input_pipeline_rows(result)
    check_report(result)


def smoke_report(output):
    temporary = output / "system_temporary"  # the benchmarks' own: nothing may stay in it
    temporary.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke", f"--output_dir={output}",
         f"--data_dir={output / 'data'}"],
        cwd=ROOT, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TMPDIR=str(temporary)),
        capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert os.listdir(temporary) == []
    with open(output / "report.json") as stream:
        report = json.load(stream)
    return report, (output / "report.md").read_text(), result.stdout


def check_training_rows(smoke_report):
    report, _, _ = smoke_report
    result = report["training_throughput"]
    peaks = result["matmul_peak_flops"]
    assert peaks["float32"] > 1e8 and peaks["bfloat16"] > 1e8
    # The peak is the best of samples taken before, between and after the configurations (four
    # of them in the smoke run), and the spread reported is that of the same samples.
    samples = result["matmul_peak_samples"]
    assert [s["when"] for s in samples][0] == "before" and samples[-1]["when"] == "after"
    assert len(samples) == 1 + len(result["rows"])
    for dtype in ("float32", "bfloat16"):
        values = [s[dtype] for s in samples]
        assert peaks[dtype] == max(values)
        spread = result["matmul_peak_spread"][dtype]
        assert (spread["min"], spread["max"], spread["samples"]) == (min(values), max(values),
                                                                     len(values))
    rows = result["rows"]
    assert {(r["precision"], r["xla"]) for r in rows if r["preset"] == "tiny"} == {
        ("float32", False), ("float32", True), ("bfloat16", False), ("bfloat16", True)}
    # The main job's model in float32 (an AVX2-only machine's precision) and in this machine's own.
    from keras_transformer.training import resolve_precision

    main_job = [r for r in rows if r.get("main_job")]
    assert {r["preset"] for r in main_job} == {"mini"}
    assert [r["precision"] for r in main_job] == list(dict.fromkeys(
        ["float32", resolve_precision("auto")]))
    # each at the width the quickstart's recipe for its precision trains
    from benchmarks.common import MAIN_JOB, main_job_label, main_job_options
    from keras_transformer.config import TransformerConfig
    from keras_transformer.weights import build_model

    for row in main_job:
        assert row["model"] == main_job_label(row["precision"])
        config = TransformerConfig.from_preset(MAIN_JOB["preset"], result["data"]["vocab_size"],
                                               **main_job_options(row["precision"]))
        model = build_model(config)
        assert row["parameters"] == model.count_params(), row["model"]
        # Its products timed shape by shape: one per weight matrix of the model (the shared
        # embedding as the pre-softmax projection), each shape once, each in the table.
        products = row["products_by_shape"]
        timed = collections.Counter()
        for p in products:
            tokens, inputs, outputs = p["shape"]
            timed[inputs, outputs] += p["per_step"]
            gflops = 6 * p["per_step"] * tokens * inputs * outputs / p["seconds"] / 1e9
            assert (f"| {row['model']} | {row['precision']} | {tokens:,} x {inputs:,} x {outputs:,} | "
                    f"{p['per_step']} | {1e3 * p['seconds']:.2f} | {gflops:,.1f} |"
                    ) in result["markdown"]
        matrices = [v for v in model.trainable_variables if len(v.shape) == 2]
        # (a kernel is [inputs, outputs], the embedding [outputs, inputs])
        assert timed == collections.Counter(
            tuple(v.shape)[::-1] if "embedding" in v.path else tuple(v.shape) for v in matrices)
        assert len({tuple(p["shape"]) for p in products}) == len(products)
    # The step's matmuls timed alone take part of the step, and XLA's own matmul was measured
    # because XLA rows ran.
    assert all(0 < r["matmul_share_of_step"] for r in rows)
    assert set(result["xla_matmul_flops"]) == {"float32", "bfloat16"}
    for row in rows:
        # Each XLA setting on the trainer's default bucket grid for it.
        data = row["batches"]
        assert data["bucket_multiple"] == (8 if row["xla"] else 1)
        assert 0 < data["real_tokens"] < data["padded_tokens"]
        assert data["padding_fraction"] == pytest.approx(
            1 - data["real_tokens"] / data["padded_tokens"])
        # The trainer's own counts of real tokens equal the benchmark's count of non-pad ids
        # (source + target of the one batch), and the FLOPs follow the 6-per-weight rule.
        assert row["source_tokens_per_step"] + row["target_tokens_per_step"] == data["real_tokens"]
        assert row["fraction_of_fp32_peak"] == pytest.approx(
            row["model_flops_per_second"] / peaks["float32"])
        assert row["peak_error"] == (row["fraction_of_fp32_peak"] > 1 if row["precision"] ==
                                     "float32" else row["fraction_of_bf16_peak"] > 1)
        assert row["model_flops_per_step"] >= 6 * row["target_tokens_per_step"] * (
            row["parameters"] / 4)
        timing = row["step_seconds"]
        assert 0 < timing["min"] <= timing["median"] <= timing["max"]
        assert row["peak_memory_bytes"] >= row["added_memory_bytes"] >= 0
        assert row["peak_memory_bytes"] > 100 * 2**20  # TensorFlow alone is more than that


def check_profile_rows(smoke_report):
    """The step profile: its categories share out the profiled wall time."""
    report, _, _ = smoke_report
    rows = report["profile_step"]["rows"]
    assert [(r["preset"], r["precision"]) for r in rows] == [("tiny", "float32")]
    for row in rows:
        assert sum(row["categories"].values()) == pytest.approx(row["step_seconds_profiled"],
                                                                rel=0.05)
        assert row["top_ops"] and row["sync_every_step_seconds"] > 0


def check_decoding_rows(smoke_report):
    """Every decoding configuration and the CTranslate2 comparison are there."""
    report, _, _ = smoke_report
    result = report["decoding"]
    kinds = {(r["search"], r["cache"], r["xla"]) for r in result["throughput"]}
    for search in ("beam4", "greedy"):
        assert {(search, "yes", "no"), (search, "yes", "yes"), (search, "no", "no")} <= kinds
    for row in result["throughput"]:
        assert row["sentences/s"] > 0 and row["peak_memory_bytes"] > 0
    engines = {(r["search"], r["engine"]) for r in result["ctranslate2"]}
    assert engines == {(s, e) for s in ("beam4", "greedy") for e in ("ours", "ctranslate2")}
    lengths = [r["output length"] for r in result["length_sweep"] if r["cache"] == "yes"]
    assert lengths == sorted(lengths) and len(lengths) >= 2
    # Uncached too, but only up to the sweep's limit for it (the smoke run's: its shortest length).
    uncached = [r["output length"] for r in result["length_sweep"] if r["cache"] == "no"]
    assert uncached == lengths[:1]


def check_input_pipeline_rows(smoke_report):
    report, _, _ = smoke_report
    runs = report["input_pipeline"]["runs"]
    epochs = [r for r in runs if r["run"].startswith("epoch")]
    training = [r for r in runs if not r["run"].startswith("epoch")]
    # an epoch on either bucket grid reads every example of the split once
    assert len(epochs) == 2 and len({r["examples"] for r in epochs}) == 1
    # the trainer's batches with autotune on, then off: the smoke run's 5 timed batches each,
    # the pass that fills the token cache before them not counted
    assert [r["batches"] for r in training] == [5, 5], training
    assert "autotune off" in training[1]["run"]
    for row in runs:
        assert 0 < row["tokens_per_s"] <= row["padded_tokens_per_s"]
        assert row["padding_fraction"] == pytest.approx(
            1 - row["tokens_per_s"] / row["padded_tokens_per_s"], abs=1e-3)


def check_report(smoke_report):
    """The report states the machine, the targets and every table."""
    report, markdown, stdout = smoke_report
    targets = {t["target"]: t for t in report["targets"]}
    assert any(name.startswith("beam 4: our sentences/s") for name in targets)
    assert any("linear in output length" in name for name in targets)
    # The smoke run trains only the tiny preset, which has no target.
    assert not any(name.startswith("training tiny") for name in targets)
    for heading in ("## Targets", "## Training throughput", "## Where a training step's time goes",
                    "## Decoding", "## Input pipeline"):
        assert heading in markdown
    assert "Matmul peak measured in the same run" in markdown
    assert "samples: median" in markdown
    assert report["training_throughput"]["machine"]["cpus"] == os.cpu_count()
    # Each table row of the report is a full row (no column lost to a missing key).
    rows = [line for line in markdown.splitlines()
            if line.startswith("| tiny |") or line.startswith("| mini") and "(main job" in line]
    # tiny in both precisions with and without XLA, and the main job in each of its precisions
    main_job_rows = [r for r in smoke_report[0]["training_throughput"]["rows"] if r.get("main_job")]
    assert len(rows) == 4 + len(main_job_rows)
    for line in rows:
        assert line.count("|") == 14  # 13 columns
    assert "wrote" in stdout


def test_matmul_peak_is_the_best_of_every_sample(monkeypatch):
    """A slow sample (another process held a core) must not lower the peak, whichever moment of
    the run it falls on; the spread shows it."""
    from benchmarks import common

    # Two timed matmuls per sample (the warm-up is not timed): a busy machine before, its own
    # speed between two measurements, busy again after. Each pair of readings brackets one.
    durations = [4.0, 5.0, 2.0, 1.0, 3.0, 3.0]
    readings = iter([t for d in durations for t in (0.0, d)])
    monkeypatch.setattr(common.time, "perf_counter", lambda: next(readings))
    peak = common.MatmulPeak(8, ("float32",), repeats=2)
    peak._matmul = lambda a, b: _Done()
    for when in ("before", "between", "after"):
        peak.sample(when)
    flops = 2.0 * 8 ** 3
    assert [s["float32"] for s in peak.samples] == [flops / 4.0, flops / 1.0, flops / 3.0]
    assert [s["when"] for s in peak.samples] == ["before", "between", "after"]
    assert peak.best("float32") == peak.peaks()["float32"] == flops / 1.0
    assert peak.spread()["float32"] == {"median": flops / 3.0, "min": flops / 4.0,
                                        "max": flops / 1.0, "samples": 3}


class _Done:
    def numpy(self):
        return 0.0


def test_a_row_above_the_peak_of_its_precision_is_a_measurement_error():
    from benchmarks import common
    from benchmarks.targets import training_targets

    def row(precision, fp32, bf16):
        return {"preset": "small", "precision": precision, "xla": False,
                "fraction_of_fp32_peak": fp32, "fraction_of_bf16_peak": bf16,
                "tokens_per_second": 1.0}

    assert common.peak_error(row("float32", 1.06, 0.6))
    assert not common.peak_error(row("float32", 0.99, 0.6))
    assert not common.peak_error(row("bfloat16", 1.06, 0.66))  # bf16 may beat the fp32 peak
    assert common.peak_error(row("bfloat16", 1.8, 1.01))
    judged = {t["target"]: t for t in training_targets({"rows": [row("float32", 1.06, 0.6)]})}
    small = judged["training small float32: model FLOP/s / fp32 matmul peak"]
    assert small["met"] != "yes" and "peak" in small["note"]


def test_targets_are_judged_against_the_issue_goals():
    from benchmarks.targets import decoding_targets, training_targets

    def row(preset, precision, xla, fraction, tokens, bf16=None):
        return {"preset": preset, "precision": precision, "xla": xla,
                "fraction_of_fp32_peak": fraction, "fraction_of_bf16_peak": bf16,
                "tokens_per_second": tokens,
                "batches": {"real_tokens": 75 if xla else 90, "padded_tokens": 100}}

    profile = {"rows": [{"preset": "small", "precision": "float32", "step_seconds_profiled": 2.0,
                         "categories": {"matmul: layer projections and FFN (fwd + bwd)": 1.2,
                                        "dropout (random masks, mask multiply)": 0.2,
                                        "LayerNorm (fwd + bwd)": 0.1}}]}
    training = training_targets({"rows": [
        row("base", "float32", False, 0.76, 100), row("base", "float32", True, 0.60, 90),
        row("small", "float32", False, 0.50, 300), row("small", "float32", True, 0.54, 320),
        # bfloat16 is judged against the bfloat16 peak, not the fp32 one it may exceed.
        row("base", "bfloat16", False, 1.10, 200, bf16=0.74)]}, profile)
    judged = {t["target"]: t for t in training}
    base = judged["training base float32: model FLOP/s / fp32 matmul peak"]
    small = judged["training small float32: model FLOP/s / fp32 matmul peak"]
    base_bf16 = judged["training base bfloat16: model FLOP/s / bf16 matmul peak"]
    assert (base["met"], base["measured"]) == ("yes", "76.0% (XLA off)")
    assert (small["met"], small["measured"]) == ("**no**", "54.0% (XLA on)")
    assert (base_bf16["met"], base_bf16["measured"]) == ("**no**", "74.0% (XLA off)")
    # A missed goal says by how much and what the profile shows besides the layers' matmuls.
    assert small["note"].startswith("short by 6.0 points; profile: dropout")
    # With the step's matmuls timed alone, the note says how much of the step lies outside them.
    alone = dict(row("small", "float32", False, 0.50, 300), matmul_share_of_step=0.6)
    note = training_targets({"rows": [alone]})[0]["note"]
    assert "matmuls alone take 60% of its time, the other 40%" in note
    # Part of a step cannot take longer than the step: such a timing is called disturbed.
    disturbed = dict(alone, matmul_share_of_step=1.12)
    note = training_targets({"rows": [disturbed]})[0]["note"]
    assert "took 112% of the step, a disturbed measurement" in note and "-12%" not in note
    assert "LayerNorm (fwd + bwd) 5%" in small["note"]
    assert judged["training small float32: XLA on / off"]["measured"] == "1.07x"
    assert judged["training small float32: XLA on / off"]["met"] == "yes"
    assert judged["training base float32: XLA on / off"]["met"] == "**no**"
    # 0.9x: padding (75% real tokens vs 90%: 0.83x) and the compiled step (1.08x faster per
    # padded token) multiply to it.
    reason = judged["training base float32: XLA on / off"]["note"]
    assert "75% real tokens vs 90% without XLA (0.83x)" in reason and "1.08x" in reason

    def engine(search, name, ratio, identical):
        return {"search": search, "engine": name, "ours / CTranslate2": ratio,
                "identical": f"{identical}/100 ({identical}.0%)"}

    decoding = decoding_targets({
        "model": "trained model runs/x",
        "ctranslate2": [engine("beam4", "ours", 0.49, 99), engine("beam4", "ctranslate2", 0.49, 99),
                        engine("greedy", "ours", 0.8, 98), engine("greedy", "ctranslate2", 0.8, 98)],
        "length_sweep": [{"cache": "yes", "output length": 8, "ms/step": 10.0},
                         {"cache": "no", "output length": 8, "ms/step": 12.0},
                         {"cache": "yes", "output length": 128, "ms/step": 19.0}]})
    met = {t["target"]: t["met"] for t in decoding}
    assert met["beam 4: our sentences/s / CTranslate2 float32's"] == "**no**"  # 0.49 < 0.8
    assert met["beam4: identical outputs to CTranslate2"] == "yes"  # 99/100
    assert met["greedy: identical outputs to CTranslate2"] == "**no**"  # 98/100
    assert met["cached decoding linear in output length: ms/step at 128 / at 8 tokens"] == "yes"
    # Several batch sizes: one row each.
    rows = [dict(engine("beam4", name, ratio, 100), batch=batch, threads=1)
            for batch, ratio in ((16, 0.79), (64, 0.81)) for name in ("ours", "ctranslate2")]
    judged = {t["target"]: t for t in decoding_targets({"model": "trained", "ctranslate2": rows})}
    assert judged["beam 4: our sentences/s / CTranslate2 float32's (batch 16, 1 threads)"]["met"] \
        == "**no**"
    assert "short by 0.01" in judged[
        "beam 4: our sentences/s / CTranslate2 float32's (batch 16, 1 threads)"]["note"]
    assert judged["beam 4: our sentences/s / CTranslate2 float32's (batch 64, 1 threads)"]["met"] \
        == "yes"
    assert len(judged) == 4


def test_a_repeated_run_is_the_same_within_its_noise_band_and_a_busy_one_settles_nothing():
    """--compare: each row's share of its own peak beside the earlier run's. The noise band is
    the larger of a fixed tolerance and the larger (max - min) / median of the two rows' passes;
    passes further apart than REPEAT_MAX_SPREAD make the row "too noisy", never "same"."""
    from benchmarks.targets import (REPEAT_MAX_SPREAD, REPEAT_TOLERANCE, comparison_markdown,
                                    repeat_comparison)

    assert REPEAT_TOLERANCE == 0.05 and REPEAT_MAX_SPREAD == 0.20

    def row(preset, precision, fraction, seconds, xla=False):
        median, low, high = seconds
        return {"preset": preset, "precision": precision, "xla": xla,
                "fraction_of_fp32_peak": fraction if precision == "float32" else 2 * fraction,
                "fraction_of_bf16_peak": fraction,
                "step_seconds": {"median": median, "min": low, "max": high}}

    earlier = {"rows": [row("small", "float32", 0.60, (1.0, 0.98, 1.02)),
                        row("base", "bfloat16", 0.62, (4.0, 3.9, 4.1)),
                        row("base", "float32", 0.63, (7.0, 6.9, 7.1)),
                        row("small", "bfloat16", 0.50, (2.0, 1.99, 2.01)),
                        row("small", "float32", 0.40, (1.0, 1.0, 1.0), xla=True)]}
    now = [row("small", "float32", 0.66, (1.0, 0.95, 1.06)),   # +10% within an 11% spread
           row("base", "bfloat16", 0.68, (4.0, 3.95, 4.05)),  # +9.7% beyond 5%, judged in bf16
           row("base", "float32", 0.63, (7.0, 6.0, 7.5)),     # no change, but passes 21% apart
           row("small", "bfloat16", 0.51, (2.0, 2.0, 2.0)),   # +2%: spreads 1%, within the 5% floor
           row("small", "float32", 0.60, (1.0, 1.0, 1.0), xla=True),  # XLA rows pair with XLA rows
           row("big", "float32", 0.5, (9.0, 9.0, 9.0))]        # nothing to compare with
    compared = repeat_comparison(earlier, now)
    assert [(c["preset"], c["precision"], c["verdict"], c["same"]) for c in compared] == [
        ("small", "float32", "same", True), ("base", "bfloat16", "different", False),
        ("base", "float32", "too noisy", False), ("small", "bfloat16", "same", True),
        ("small", "float32", "different", False)]
    assert compared[0]["change"] == pytest.approx(0.10) and compared[0]["band"] == pytest.approx(0.11)
    assert compared[1]["change"] == pytest.approx(0.68 / 0.62 - 1)
    assert compared[1]["band"] == pytest.approx(0.05)
    assert compared[3]["band"] == pytest.approx(0.05)
    table = comparison_markdown({"rows": compared})
    assert "| small float32 XLA off | 60.0% | 66.0% | +10.0% | 11.0% | ±11.0% | same |" in table
    assert "| base float32 XLA off | 63.0% | 63.0% | +0.0% | 21.4% | ±21.4% | **too noisy** |" in table


def test_the_timed_matmuls_are_the_models_weight_matrices():
    """benchmarks.common.layer_matmul_shapes against the model itself: one product per weight
    matrix of the layers (Q, K, V, output, FFN; d_k != d_model / heads here), encoder ones over
    the source rows, decoder ones over the target rows except cross-attention's K and V."""
    import keras_transformer as kt
    from benchmarks import common
    from keras_transformer.weights import build_model

    config = kt.TransformerConfig.from_preset("tiny", vocab_size=64, d_k=12, d_v=10)
    model = build_model(config, "float32")
    shapes = common.layer_matmul_shapes(config, source_rows=3, target_rows=5)
    kernels = {"encoder": [], "decoder": []}
    for variable in model.trainable_variables:
        stack = variable.path.split("/")[1]  # transformer/<stack>/layer_i/...
        if len(variable.shape) == 2 and stack in kernels:
            kernels[stack].append(tuple(variable.shape))
    encoder = shapes[:len(kernels["encoder"])]
    decoder = shapes[len(kernels["encoder"]):-1]
    assert sorted((i, o) for _, i, o in encoder) == sorted(kernels["encoder"])
    assert sorted((i, o) for _, i, o in decoder) == sorted(kernels["decoder"])
    assert shapes[-1] == (5, config.d_model, config.output_vocab_size)  # the tied projection
    assert {rows for rows, _, _ in encoder} == {3}
    # Cross-attention's keys and values are the source's: two source-row products per layer.
    assert sorted(rows for rows, _, _ in decoder) == (
        [3] * (2 * config.num_layers) + [5] * (8 * config.num_layers))


def test_xla_reason_names_xlas_own_matmul_beside_tensorflows():
    from benchmarks.targets import xla_reason

    def row(xla, tokens):
        return {"precision": "bfloat16", "xla": xla, "tokens_per_second": tokens,
                "batches": {"real_tokens": 80, "padded_tokens": 100}}

    result = {"matmul_size": 4096, "matmul_peak_flops": {"bfloat16": 400e9},
              "xla_matmul_flops": {"bfloat16": 100e9}}
    reason = xla_reason(row(True, 50), row(False, 100), result)
    assert "compiled step per padded token: 0.50x" in reason
    assert "bfloat16 matmul runs at 100 GFLOP/s, 0.25x of TensorFlow's (400)" in reason
    assert "XLA's own" not in xla_reason(row(True, 50), row(False, 100))


def test_main_job_row_uses_the_main_jobs_settings():
    """The benchmark's main-job row trains what `python -m trainers.quickstart` trains."""
    from benchmarks.common import MAIN_JOB
    from trainers.quickstart import QUICKSTART_DEFAULTS

    assert MAIN_JOB == {key: QUICKSTART_DEFAULTS[key] for key in MAIN_JOB}
    from benchmarks.common import MAIN_JOB_WIDTHS
    from trainers.quickstart import KIND_RECIPES

    assert MAIN_JOB_WIDTHS == {precision: widths for precision, (_, widths) in KIND_RECIPES.items()}


def test_measured_batches_are_spread_over_a_pass_not_taken_from_its_start(tmp_path):
    """The benchmarks' batches: evenly spaced over the trainer's own first pass (whose start, the
    buckets that fill first, holds more padding than the pass), at most 50 per batch measured read,
    or the whole pass; with the padding of the chosen batches and of all those read. The pass is
    that of a run with the default --seed, whatever the benchmark's process seeded before (its
    earlier rows seed their models)."""
    import keras
    import numpy as np

    from benchmarks import common
    from keras_transformer import data
    from keras_transformer.data.config import DataConfig
    from toy import write_word_for_word_corpus
    from trainers import training_flags

    write_word_for_word_corpus(tmp_path, (("train", 600),))
    config = DataConfig(dataset="files", train_data=str(tmp_path / "train.tsv"),
                        data_dir=str(tmp_path / "data"), vocab_size=320, max_length=16,
                        token_budget=48, bucket_multiple=1)
    keras.utils.set_random_seed(training_flags.FLAGS["seed"].default)  # as the trainer seeds
    tokenizer, _ = data.load_or_learn_tokenizer(config)
    one_pass = list(data.make_dataset(config, tokenizer, "train", training=True))
    assert 50 < len(one_pass) < 200  # so that 4 batches read the whole pass and 1 does not

    def position(batch, among):
        (source, _), target = batch
        return [i for i, ((s, _), t) in enumerate(among)
                if s.shape == source.shape and t.shape == target.shape
                and np.array_equal(s, source) and np.array_equal(t, target)]

    def padding(batches):
        real = sum(np.count_nonzero(s) + np.count_nonzero(t) for (s, _), t in batches)
        return 1 - real / sum(np.size(s) + np.size(t) for (s, _), t in batches)

    for count, read in ((4, len(one_pass)), (1, 50), (0, len(one_pass))):
        keras.utils.set_random_seed(count + 7)  # what a row measured before does
        _, batches, stats = common.real_batches(config, count)
        assert stats["batches_read"] == read
        found = [position(batch, one_pass[:read]) for batch in batches]
        assert all(len(places) == 1 for places in found), found  # batches of the trainer's pass
        places = [p[0] for p in found]
        if count:  # one from each of `count` equal stretches of what was read, not its start
            assert [p * count // read for p in places] == list(range(count)), places
            assert min(places) > 0
        else:  # the whole pass, in its order
            assert places == list(range(read))
        assert stats["padding_fraction"] == pytest.approx(padding(batches))
        assert stats["padding_fraction_of_batches_read"] == pytest.approx(padding(one_pass[:read]))
        assert stats["real_tokens"] == sum(
            np.count_nonzero(s) + np.count_nonzero(t) for (s, _), t in batches)


def test_profile_splits_each_instant_among_the_ops_running():
    """benchmarks.profile_step's attribution: overlapping ops share the wall time they overlap,
    gaps are idle, and the shares add up to the window."""
    from benchmarks import profile_step as ps

    ps_per_s = 10 ** 12
    events = [(0, 4 * ps_per_s, "_MklMatMul", "transformer_2_1/Tensordot/MatMul"),
              (2 * ps_per_s, 6 * ps_per_s, "Mul", "transformer/encoder/layer_0/dropout/Mul"),
              (8 * ps_per_s, 9 * ps_per_s, "SoftmaxCrossEntropyWithLogits", "softmax_cross_entropy")]
    categories, ops, concurrency = ps.attribute(events, 0, 10 * ps_per_s)
    assert categories["matmul: tied output projection (fwd + bwd)"] == pytest.approx(3.0)
    assert categories["dropout (random masks, mask multiply)"] == pytest.approx(3.0)
    assert categories["loss over the vocabulary (softmax-CE, one-hot, arg-max)"] == pytest.approx(1.0)
    assert categories[ps.IDLE] == pytest.approx(3.0)  # 6-8 s and 9-10 s
    assert sum(categories.values()) == pytest.approx(10.0)
    assert concurrency == pytest.approx(9.0 / 7.0)  # 9 s of ops over 7 s with any running


def test_profile_categories_follow_the_ops_names():
    from benchmarks.profile_step import category

    # The model's own pre-softmax projection, whatever suffix Keras gave the model's scope.
    for scope in ("transformer_1", "transformer_1_1", "gradient_tape/transformer_3_1"):
        assert category("_MklMatMul", f"{scope}/Tensordot/MatMul").startswith("matmul: tied")
    assert category("_MklMatMul", "transformer_1_1/decoder_1/layer_0_1/feed_forward_1/inner_1/"
                    "Tensordot/MatMul").startswith("matmul: layer")
    assert category("_MklBatchMatMulV2", "transformer/encoder/layer_0/self_attention/MatMul"
                    ).startswith("matmul: attention")
    assert category("Mean", "transformer/encoder/layer_0/self_attention_norm/moments/mean"
                    ).startswith("LayerNorm")
    assert category("ArgMax", "ArgMax").startswith("loss")
    # The loss's own ops, in its name scope, also under the gradient tape.
    for name in ("label_smoothed_loss/Exp", "gradient_tape/label_smoothed_loss/mul_1"):
        assert category("Exp", name).startswith("loss")
    # The fused Q, K, V split into heads (an unstack) and its gradient (a stack).
    assert category("Pack", "gradient_tape/encoder_1/layer_1_1/self_attention_1/stack"
                    ).startswith("transposes")


def test_profile_names_every_kernel_of_ours_without_its_layers_scope():
    """A custom gradient's ops run outside the layer's name scope (the profile shows
    ``KerasTransformerLayerNormGrad_5`` alone): each kernel the library registers has a category
    by its type."""
    import re

    from benchmarks.profile_step import category

    with open(os.path.join(ROOT, "keras_transformer", "layers", "cpu_kernels.cc")) as stream:
        kernels = re.findall(r'REGISTER_OP\("(\w+)"\)', stream.read())
    assert len(kernels) >= 5
    expected = {"Dropout": "dropout", "ApplyKeep": "dropout", "LayerNorm": "LayerNorm",
                "SoftmaxRows": "loss"}
    for kernel in kernels:
        (want,) = [value for key, value in expected.items() if key in kernel]
        assert category(kernel, f"{kernel}_5").startswith(want), kernel


def test_a_dense_layers_bias_gradient_is_profiled_as_the_bias():
    """layers.dense's hand-written gradient sums the bias gradient outside any name scope; its
    name puts it beside BiasAdd in the profile, not among "other ops"."""
    import tensorflow as tf

    from benchmarks.profile_step import category
    from keras_transformer.layers.dense import affine

    rows = tf.random.normal([6, 4])
    kernel, bias = tf.Variable(tf.ones([4, 3])), tf.Variable(tf.zeros([3]))

    @tf.function
    def gradients():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(affine(rows, kernel, bias, relu=True, training=True))
        return tape.gradient(loss, [kernel, bias])

    graph = gradients.get_concrete_function().graph
    bias_sums = [op for op in graph.get_operations()
                 if op.type == "Sum" and op.outputs[0].shape.as_list() == [3]]
    assert len(bias_sums) == 1
    assert category("Sum", bias_sums[0].name).startswith("bias add")
