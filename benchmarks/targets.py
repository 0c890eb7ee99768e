"""The performance issue's targets, judged from the benchmarks' JSON results (no flags here, so
tests and other programs can import it)."""

# The targets of the performance issue, as ratios measured in one run on one machine.
TRAINING_TARGETS = {"base": 0.70, "small": 0.55}
CTRANSLATE2_SPEED_TARGET = 0.5
IDENTICAL_TARGET = 0.99
# Cached decoding is "linear in the output length" if the time per decoder step at the longest
# swept length is within this factor of the time per step at the shortest.
LINEAR_STEP_FACTOR = 2.0


def _target(name, measured, target, met, note=""):
    return {"target": name, "measured": measured, "goal": target,
            "met": "yes" if met else "**no**", "note": note}


def training_targets(result):
    rows = []
    for preset, goal in TRAINING_TARGETS.items():
        fp32 = [r for r in result["rows"] if r["preset"] == preset and r["precision"] == "float32"]
        if not fp32:
            continue
        best = max(fp32, key=lambda r: r["fraction_of_fp32_peak"])
        rows.append(_target(
            f"training {preset} float32: model FLOP/s / fp32 matmul peak",
            f"{100 * best['fraction_of_fp32_peak']:.0f}% (XLA {'on' if best['xla'] else 'off'})",
            f">= {100 * goal:.0f}%", best["fraction_of_fp32_peak"] >= goal))
    for preset in TRAINING_TARGETS:
        for precision in ("float32", "bfloat16"):
            pair = {r["xla"]: r for r in result["rows"]
                    if r["preset"] == preset and r["precision"] == precision}
            if len(pair) == 2:
                ratio = pair[True]["tokens_per_second"] / pair[False]["tokens_per_second"]
                rows.append(_target(
                    f"training {preset} {precision}: XLA on / off", f"{ratio:.2f}x",
                    "XLA on by default only where >= 1x", True,
                    "XLA is off by default (trainers.wmt --xla)"))
    return rows


def decoding_targets(result):
    rows = []
    ours = {r["search"]: r for r in result.get("ctranslate2", []) if r["engine"] == "ours"}
    for search, row in ours.items():
        identical, total = (int(x) for x in row["identical"].split(" ")[0].split("/"))
        if search == "beam4":
            rows.append(_target(
                "beam 4: our sentences/s / CTranslate2 float32's", f"{row['ours / CTranslate2']:.2f}",
                f">= {CTRANSLATE2_SPEED_TARGET}",
                row["ours / CTranslate2"] >= CTRANSLATE2_SPEED_TARGET))
        rows.append(_target(
            f"{search}: identical outputs to CTranslate2", f"{identical}/{total}",
            f">= {100 * IDENTICAL_TARGET:.0f}%", identical >= IDENTICAL_TARGET * total,
            "" if "trained" in result.get("model", "") else
            "random weights: near-ties decide; meaningful only with --model_dir"))
    cached = [r for r in result.get("length_sweep", []) if r["cache"] == "yes"]
    if len(cached) >= 2:
        first, last = cached[0], cached[-1]
        factor = last["ms/step"] / first["ms/step"]
        rows.append(_target(
            f"cached decoding linear in output length: ms/step at {last['output length']} / "
            f"at {first['output length']} tokens", f"{factor:.2f}x", f"<= {LINEAR_STEP_FACTOR}x",
            factor <= LINEAR_STEP_FACTOR))
    pairs = {}
    for r in result.get("throughput", []):
        pairs.setdefault((r["search"], r["batch"], r["cache"]), {})[r["xla"]] = r
    for (search, batch, cache), pair in pairs.items():
        if len(pair) == 2 and cache == "yes":
            ratio = pair["yes"]["sentences/s"] / pair["no"]["sentences/s"]
            rows.append(_target(f"{search} batch {batch}: XLA on / off", f"{ratio:.2f}x",
                                "XLA on by default only where >= 1x", True,
                                "XLA is off by default for decoding and in the SavedModel"))
    return rows
