"""The performance targets, judged from the benchmarks' JSON results, and the comparison of a
training run with an earlier one (no flags here, so tests and other programs can import it)."""

from benchmarks import common

# Training goals as ratios measured in one run on one machine: model FLOP/s of the training step
# over the matmul peak of the same precision. "mini" is the main job's model (its rows only, at
# the width its precision's recipe trains: benchmarks.common.MAIN_JOB_WIDTHS).
TRAINING_TARGETS = {("small", "float32"): 0.60, ("base", "float32"): 0.75,
                    ("small", "bfloat16"): 0.60, ("base", "bfloat16"): 0.75,
                    ("mini", "float32"): 0.55, ("mini", "bfloat16"): 0.45}
# Beam 4: our sentences/s over CTranslate2 float32's, same weights and number of threads.
CTRANSLATE2_SPEED_TARGET = 0.8
IDENTICAL_TARGET = 0.99
# Cached decoding is "linear in the output length" if the time per decoder step at the longest
# swept length is within this factor of the time per step at the shortest.
LINEAR_STEP_FACTOR = 2.0


def _target(name, measured, target, met, note=""):
    return {"target": name, "measured": measured, "goal": target,
            "met": "yes" if met else "**no**", "note": note}


def training_targets(result, profile=None):
    """The training rows of the targets table; ``profile``: benchmarks.profile_step's JSON, whose
    largest items other than the model's matmuls explain a missed goal."""
    rows = []
    for (preset, precision), goal in TRAINING_TARGETS.items():
        candidates = [r for r in result["rows"]
                      if r["preset"] == preset and r["precision"] == precision]
        if not candidates:
            continue
        key = "fraction_of_fp32_peak" if precision == "float32" else "fraction_of_bf16_peak"
        best = max(candidates, key=lambda r: r[key])
        fraction = best[key]
        short = {"float32": "fp32", "bfloat16": "bf16"}[precision]
        name = (f"training {best.get('model', preset)} {precision}: model FLOP/s / {short} "
                "matmul peak")
        # One decimal: 59.6% must not read as a met 60%.
        measured = f"{100 * fraction:.1f}% (XLA {'on' if best['xla'] else 'off'})"
        if fraction > 1.0:  # faster than the machine's matmuls: the peak was measured too low
            rows.append(_target(name, measured, f">= {100 * goal:.0f}%", False,
                                "measurement error: above the matmul peak (peak too low)"))
            continue
        note = "" if fraction >= goal else (
            f"short by {100 * (goal - fraction):.1f} points; " + _outside_matmuls(best)
            + profile_reason(profile, preset, precision))
        rows.append(_target(name, measured, f">= {100 * goal:.0f}%", fraction >= goal, note))
    for preset in dict.fromkeys(p for p, _ in TRAINING_TARGETS):
        for precision in ("float32", "bfloat16"):
            pair = {r["xla"]: r for r in result["rows"]
                    if r["preset"] == preset and r["precision"] == precision}
            if len(pair) == 2:
                ratio = pair[True]["tokens_per_second"] / pair[False]["tokens_per_second"]
                rows.append(_target(
                    f"training {preset} {precision}: XLA on / off", f"{ratio:.2f}x",
                    ">= 1x, or a profile reason", ratio >= 1.0,
                    "" if ratio >= 1.0 else xla_reason(pair[True], pair[False], result)))
    return rows


def xla_reason(on, off, result=None) -> str:
    """Splits XLA's loss of real tokens/s into its two causes: the coarser bucket grid XLA
    needs (padding: fewer real tokens in the same padded step) and the compiled step's speed per
    padded token; and, if the run measured it, XLA's own matmul beside TensorFlow's (oneDNN),
    which the compiled step's matmuls run on instead."""
    def padded_per_second(row):
        data = row["batches"]
        real_per_padded = data["real_tokens"] / data["padded_tokens"]
        return row["tokens_per_second"] / real_per_padded, real_per_padded

    on_speed, on_real = padded_per_second(on)
    off_speed, off_real = padded_per_second(off)
    return (f"XLA stays off by default (trainers.wmt --xla). Padding: its bucket grid leaves "
            f"{100 * on_real:.0f}% real tokens vs {100 * off_real:.0f}% without XLA "
            f"({on_real / off_real:.2f}x); compiled step per padded token: "
            f"{on_speed / off_speed:.2f}x of TensorFlow's kernels" + _xla_matmul_note(on, result))


def _xla_matmul_note(row, result) -> str:
    xla_matmul = (result or {}).get("xla_matmul_flops", {}).get(row["precision"])
    if not xla_matmul:
        return ""
    peak = result["matmul_peak_flops"][row["precision"]]
    return (f"; XLA's own {result['matmul_size']}^3 {row['precision']} matmul runs at "
            f"{xla_matmul / 1e9:,.0f} GFLOP/s, {xla_matmul / peak:.2f}x of TensorFlow's "
            f"({peak / 1e9:,.0f})")


def _outside_matmuls(row) -> str:
    """How much of the step the layers' matmuls alone would take (training_throughput times
    them without the rest): the remainder is what keeps the step from the peak."""
    share = row.get("matmul_share_of_step")
    if share is None:
        return ""
    if common.matmul_timing_disturbed(row):
        return (f"the step's matmuls timed alone took {100 * share:.0f}% of the step, a disturbed "
                "measurement that says nothing; ")
    return (f"the step's matmuls alone take {100 * share:.0f}% of its time, the other "
            f"{100 * (1 - share):.0f}% is element-wise work, the loss and the optimizer; ")


def profile_reason(profile, preset, precision) -> str:
    """The largest shares of the step other than the layers' matmuls, from the profile."""
    rows = [r for r in (profile or {}).get("rows", [])
            if r["preset"] == preset and r["precision"] == precision]
    if not rows:
        return "no profile of this configuration (python -m benchmarks.profile_step)"
    row = rows[0]
    shares = sorted(((seconds / row["step_seconds_profiled"], name)
                     for name, seconds in row["categories"].items()
                     if not name.startswith("matmul: layer")), reverse=True)[:3]
    where = (f" (profile.md, {profile['machine']['date']})"
             if "machine" in profile else "")
    return "profile: " + ", ".join(f"{name} {100 * share:.0f}%" for share, name in shares) + where


def decoding_targets(result):
    rows = []
    ours = [r for r in result.get("ctranslate2", []) if r["engine"] == "ours"]
    several = len({r.get("batch") for r in ours}) > 1  # then each row names its batch size
    for row in ours:
        search = row["search"]
        where = f" (batch {row['batch']}, {row.get('threads')} threads)" if several else ""
        identical, total = (int(x) for x in row["identical"].split(" ")[0].split("/"))
        if search == "beam4":
            ratio = row["ours / CTranslate2"]
            note = "" if ratio >= CTRANSLATE2_SPEED_TARGET else (
                f"short by {CTRANSLATE2_SPEED_TARGET - ratio:.2f}; where the time goes: "
                "benchmarks/results/decoding_profile.md")
            rows.append(_target(
                f"beam 4: our sentences/s / CTranslate2 float32's{where}", f"{ratio:.2f}",
                f">= {CTRANSLATE2_SPEED_TARGET}", ratio >= CTRANSLATE2_SPEED_TARGET, note))
        rows.append(_target(
            f"{search}: identical outputs to CTranslate2{where}", f"{identical}/{total}",
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


def own_peak_fraction(row) -> float:
    """A training row's model FLOP/s over the matmul peak of its own precision."""
    return row["fraction_of_fp32_peak" if row["precision"] == "float32" else "fraction_of_bf16_peak"]


def _pass_spread(row) -> float:
    seconds = row["step_seconds"]
    return (seconds["max"] - seconds["min"]) / seconds["median"]


# A quiet machine repeats a row's share of its peak within a few percent from one run to the
# next, however closely each run's own passes agree: a smaller change is not a difference.
REPEAT_TOLERANCE = 0.05
# Passes further apart than this mean the machine was disturbed during the row; its median then
# cannot tell "the same" from "different", whatever the change.
REPEAT_MAX_SPREAD = 0.20


def repeat_comparison(earlier, rows):
    """Each training row beside the same configuration of an ``earlier`` run's result: the
    relative change of its share of its own precision's peak, and a verdict. "same" when the
    change is within the noise band, the larger of REPEAT_TOLERANCE and the larger relative
    spread (max - min) / median of the two rows' passes; "different" when beyond it; "too noisy"
    when that spread exceeds REPEAT_MAX_SPREAD, which settles nothing. Only "same" counts as a
    repeat (``same``)."""
    def key(row):
        return (row["preset"], row["precision"], row["xla"], bool(row.get("main_job")),
                row.get("model", row["preset"]))

    before = {key(row): row for row in earlier["rows"]}
    compared = []
    for row in rows:
        old = before.get(key(row))
        if old is not None:
            change = own_peak_fraction(row) / own_peak_fraction(old) - 1.0
            noise = max(_pass_spread(row), _pass_spread(old))
            band = max(REPEAT_TOLERANCE, noise)
            verdict = ("too noisy" if noise > REPEAT_MAX_SPREAD
                       else "same" if abs(change) <= band else "different")
            compared.append({"preset": row["preset"], "precision": row["precision"],
                             "xla": row["xla"], "earlier": own_peak_fraction(old),
                             "now": own_peak_fraction(row), "change": change, "noise": noise,
                             "band": band, "verdict": verdict,
                             "same": verdict == "same"})
    return compared


def comparison_markdown(comparison) -> str:
    return common.markdown([{
        "configuration": f"{c['preset']} {c['precision']} XLA {'on' if c['xla'] else 'off'}",
        "% of own peak, earlier": f"{100 * c['earlier']:.1f}%",
        "% of own peak, now": f"{100 * c['now']:.1f}%",
        "change": f"{100 * c['change']:+.1f}%",
        "largest pass spread": f"{100 * c['noise']:.1f}%",
        "noise band": f"±{100 * c['band']:.1f}%",
        "verdict": c["verdict"] if c["same"] else f"**{c['verdict']}**"}
        for c in comparison["rows"]],
        ["configuration", "% of own peak, earlier", "% of own peak, now", "change",
         "largest pass spread", "noise band", "verdict"])
