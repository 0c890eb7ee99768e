"""`python -m benchmarks --smoke`: every benchmark's code path runs, and its report holds
numbers that hang together (so the benchmark command cannot rot unnoticed)."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("ctranslate2")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_smoke_run_reports_every_part(tmp_path):
    # One test, not a module fixture shared by several: under pytest-xdist each worker would
    # run the fixture (minutes) again.
    result = smoke_report(tmp_path)
    check_training_rows(result)
    check_decoding_rows(result)
    check_report(result)


def smoke_report(output):
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke", f"--output_dir={output}",
         f"--data_dir={output / 'data'}"],
        cwd=ROOT, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), capture_output=True, text=True,
        timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    with open(output / "report.json") as stream:
        report = json.load(stream)
    return report, (output / "report.md").read_text(), result.stdout


def check_training_rows(smoke_report):
    report, _, _ = smoke_report
    result = report["training_throughput"]
    peaks = result["matmul_peak_flops"]
    assert peaks["float32"] > 1e8 and peaks["bfloat16"] > 1e8
    rows = result["rows"]
    assert {(r["precision"], r["xla"]) for r in rows} == {
        ("float32", False), ("float32", True), ("bfloat16", False), ("bfloat16", True)}
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
        assert row["model_flops_per_step"] >= 6 * row["target_tokens_per_step"] * (
            row["parameters"] / 4)
        timing = row["step_seconds"]
        assert 0 < timing["min"] <= timing["median"] <= timing["max"]
        assert row["peak_memory_bytes"] >= row["added_memory_bytes"] >= 0
        assert row["peak_memory_bytes"] > 100 * 2**20  # TensorFlow alone is more than that


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
    assert lengths == sorted(lengths) and lengths


def check_report(smoke_report):
    """The report states the machine, the targets and every table."""
    report, markdown, stdout = smoke_report
    targets = {t["target"]: t for t in report["targets"]}
    assert any(name.startswith("beam 4: our sentences/s") for name in targets)
    assert any("linear in output length" in name for name in targets)
    # The smoke run trains only the tiny preset, which has no target.
    assert not any(name.startswith("training tiny") for name in targets)
    for heading in ("## Targets", "## Training throughput", "## Decoding", "## Input pipeline"):
        assert heading in markdown
    assert "Matmul peak measured in the same run" in markdown
    assert report["training_throughput"]["machine"]["cpus"] == os.cpu_count()
    # Each table row of the report is a full row (no column lost to a missing key).
    for line in markdown.splitlines():
        if line.startswith("| tiny |"):
            assert line.count("|") == 13
    assert "wrote" in stdout


def test_targets_are_judged_against_the_issue_goals():
    from benchmarks.targets import decoding_targets, training_targets

    def row(preset, precision, xla, fraction, tokens):
        return {"preset": preset, "precision": precision, "xla": xla,
                "fraction_of_fp32_peak": fraction, "tokens_per_second": tokens}

    training = training_targets({"rows": [
        row("base", "float32", False, 0.71, 100), row("base", "float32", True, 0.60, 90),
        row("small", "float32", False, 0.50, 300), row("small", "float32", True, 0.54, 320)]})
    judged = {t["target"]: t for t in training}
    base = judged["training base float32: model FLOP/s / fp32 matmul peak"]
    small = judged["training small float32: model FLOP/s / fp32 matmul peak"]
    assert (base["met"], base["measured"]) == ("yes", "71% (XLA off)")
    assert (small["met"], small["measured"]) == ("**no**", "54% (XLA on)")
    assert judged["training small float32: XLA on / off"]["measured"] == "1.07x"

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
    assert met["beam 4: our sentences/s / CTranslate2 float32's"] == "**no**"  # 0.49 < 0.5
    assert met["beam4: identical outputs to CTranslate2"] == "yes"  # 99/100
    assert met["greedy: identical outputs to CTranslate2"] == "**no**"  # 98/100
    assert met["cached decoding linear in output length: ms/step at 128 / at 8 tokens"] == "yes"


def test_search_ab_compares_two_versions_of_the_search(tmp_path):
    """benchmarks.search_ab with today's decoding.py on both sides (copied, so it loads as a
    second module): identical outputs, two timings and their ratio in the JSON."""
    import shutil

    before = tmp_path / "decoding.py"
    shutil.copy(os.path.join(ROOT, "keras_transformer", "decoding.py"), before)
    output = tmp_path / "ab.json"
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.search_ab", f"--before={before}", "--preset=tiny",
         "--configs=beam2:2:off,greedy:2:off", "--rounds=2", "--source_length=10",
         "--extra_length=4", f"--output={output}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads(output.read_text())["results"]
    assert set(results) == {"beam2:2:off", "greedy:2:off"}
    for row in results.values():
        assert len(row["runs"]["before"]) == len(row["runs"]["after"]) == 2
        assert row["speed_after_over_before"] == pytest.approx(
            row["median_seconds"]["before"] / row["median_seconds"]["after"])
    assert "identical outputs" in result.stdout
