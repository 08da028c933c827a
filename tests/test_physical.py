"""The physical cross-check: bytes per step, bandwidth efficiency, floors, the experts fit, chain alpha."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import assert_clean_error, default_doc, default_estimate, flat, run_main
from hypothesis import given
from hypothesis import strategies as st

import estimate_b300 as eb

KIMI = eb.parse_calibration(default_doc()).model
assert KIMI is not None
EXPERT_BYTES = 3 * 7168 * 2048 * (4 + 16 / 32) / 8  # = 24,772,608 bytes


def bytes_per_gpu(m: int) -> float:
    """60 MoE layers, TP 8: every distinct routed expert a batch of m tokens touches, in every MoE layer."""
    return 60 * 384 * (1 - (1 - 8 / 384) ** m) * EXPERT_BYTES / 8


# --- Bytes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("m", "distinct"), [(1, 8.0), (9, 66.28), (32, 188.23), (33, 192.31), (256, 382.25)])
def test_distinct_experts(m: int, distinct: float) -> None:
    """384 * (1 - (47/48)**m): (47/48)**9 = 0.82739 -> 66.28; (47/48)**32 = 0.50981 -> 188.23."""
    assert eb.distinct_experts(KIMI, m).value == pytest.approx(distinct, abs=0.005)


def test_expert_bytes() -> None:
    (expert,) = [f for f in eb.moe_gb_per_gpu(KIMI, 8, 9).inputs if f.name == "expert MB"]
    assert expert.value * 1e6 == pytest.approx(24_772_608, rel=1e-15)


def test_shared_expert_bytes_when_the_curve_includes_it() -> None:
    """The shared expert is read at 16 bits: + 60 * 3 * 7168 * 2048 * 2 / 8 bytes per GPU."""
    doc = default_doc()
    doc["model"]["curve_includes_shared_expert"] = True
    model = eb.parse_calibration(doc).model
    assert model is not None
    assert eb.moe_gb_per_gpu(model, 8, 9).value * 1e9 == pytest.approx(bytes_per_gpu(9) + 60 * 3 * 7168 * 2048 * 2 / 8)


# --- Efficiency of the measured curve ------------------------------------------------------


@pytest.mark.parametrize(
    ("m", "ms", "efficiency"),
    [
        (1, 1.15, 1_486_356_480 / 1.8e9 / 1.15),  # 60 * 8 * 24,772,608 / 8 bytes: 0.8258 ms at peak -> 71.8%
        (9, 8.85, 0.7730),
        (32, 23.8, 0.8164),
    ],
)
def test_roofline_of_the_default_curve(
    capsys: pytest.CaptureFixture[str], m: int, ms: float, efficiency: float
) -> None:
    doc = run_main(capsys, "--format", "json").json()
    point = next(p for p in doc["roofline"]["points"] if p["m"] == m)
    assert point["ms"] == ms
    assert point["bytes_per_gpu"] == pytest.approx(bytes_per_gpu(m), rel=1e-12)
    assert point["efficiency"] == pytest.approx(bytes_per_gpu(m) / 1.8e9 / ms, rel=1e-12)
    assert point["efficiency"] == pytest.approx(efficiency, abs=5e-4)
    assert 0.70 <= point["efficiency"] <= 0.85  # near the 67-73% reported for the Marlin kernel
    assert doc["roofline"]["routing"] == "uniform"
    assert doc["warnings"] == []


def test_roofline_labels_measured_and_inferred_points(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_main(capsys, "--all").out
    section = out[out.index("Physical cross-check") :]
    assert "uniform routing" in section
    row_1 = next(line for line in section.splitlines() if line.split()[:2] == ["1", "inferred"])
    assert row_1.split()[-1] == "71.8%"
    assert any(line.split()[:2] == ["9", "measured"] and line.endswith("77.3%") for line in section.splitlines())


def test_a_point_faster_than_the_bandwidth_allows_warns(capsys: pytest.CaptureFixture[str]) -> None:
    """M = 9 at 3 ms: reading 12.31 GB at 1.8 TB/s needs 6.84 ms, so 3 ms is 228% of peak."""
    for fmt in ("table", "json"):
        run = run_main(capsys, "--set", "moe_curve.points[1].ms=3", "--format", fmt)
        assert run.code == 0 and run.out
        assert run.err.startswith("estimate_b300: warning: moe_curve.points: M = 9 (measured, 3 ms)")
        assert "228.1% of peak bandwidth is impossible" in run.err
        assert "Traceback" not in run.err
    warnings = run.json()["warnings"]
    assert len(warnings) == 1 and "M = 9" in warnings[0]
    slower = run_main(capsys, "--set", "hardware.reference.mem_bandwidth_tb_s=1.3", "--format", "json")
    assert slower.err.endswith("reference.mem_bandwidth_tb_s (and 1 more point like it)\n")  # M = 9 and 32


# --- The floor -----------------------------------------------------------------------------


def test_floor_and_ceiling() -> None:
    """Stronger drafter, M = 33: 35.73 GB per GPU at 8 TB/s = 4.466 ms; accept 14 -> 3135 tok/s ceiling."""
    est = default_estimate()
    for row in est.scenarios:
        assert row.moe_floor_ms == pytest.approx(bytes_per_gpu(row.m) / 8e9, rel=1e-12)
        assert row.tok_s_ceiling == pytest.approx(1000 * row.accept / row.moe_floor_ms, rel=1e-12)
        assert row.tok_s < row.tok_s_ceiling
    stronger = next(r for r in est.scenarios if r.label == "stronger/native@14")
    assert stronger.moe_floor_ms == pytest.approx(4.466, abs=0.001)
    assert stronger.tok_s_ceiling == pytest.approx(3135, abs=1)


def test_an_estimate_faster_than_its_floor_warns(capsys: pytest.CaptureFixture[str]) -> None:
    """curve(32) = 4 ms reads 35 GB at 486% of the PRO 6000's peak; with a 95% cut the native step
    (MoE(33) = 1.04 ms plus 5% of the overhead) drops below the 4.47 ms floor on B300."""
    run = run_main(
        capsys, "--set", "moe_curve.points[2].ms=4", "--set", "native_engine.overhead_cut=0.95", "--format", "json"
    )
    assert run.code == 0
    floor_warnings = [w for w in run.json()["warnings"] if "shorter than reading the MoE weights alone" in w]
    assert floor_warnings and floor_warnings[0].startswith("stronger/native@12")


def test_floor_warning_names_the_sweep_point(capsys: pytest.CaptureFixture[str]) -> None:
    run = run_main(
        capsys,
        "--set",
        "moe_curve.points[2].ms=4",
        "--sweep",
        "native_engine.overhead_cut=0.2,0.95",
        "--format",
        "json",
    )
    assert any("at native_engine.overhead_cut=0.95" in w for w in run.json()["warnings"])


# --- Without a model section ---------------------------------------------------------------


def test_without_model_section(capsys: pytest.CaptureFixture[str], write_calibration: Callable[[object], Path]) -> None:
    doc = default_doc()
    del doc["model"]
    path = str(write_calibration(doc))
    out = flat(run_main(capsys, "--calibration", path, "--all").out)
    assert "Physical cross-check: left out, the calibration has no `model` section." in out
    assert "MoE floor" not in out
    footer = run_main(capsys, "--calibration", path).out.splitlines()[-1]
    assert footer == "--all adds break-even and chain alpha."  # no cross-check and no MoE floor to add
    without = run_main(capsys, "--calibration", path, "--format", "json").json()
    assert without["roofline"] is None
    assert all(s["moe_floor_ms"] is None and s["tok_s_ceiling"] is None for s in without["scenarios"])
    with_model = run_main(capsys, "--format", "json").json()
    for a, b in zip(without["scenarios"], with_model["scenarios"], strict=True):
        assert a["tok_s"] == b["tok_s"]  # the estimate itself does not use the model section


BAD_MODELS = [
    ("experts_per_token", 400, ["model.experts_per_token: 400 exceeds routed_experts = 384"]),
    ("dense_layers", 61, ["model.dense_layers: 61 leaves no MoE layer of 61"]),
    ("dense_layers", -1, ["model.dense_layers: got -1", "from 0 to"]),
    ("weight_bits", 0, ["model.weight_bits: got 0", "from 1 to"]),
    ("group_size", 32.5, ["model.group_size: got 32.5"]),
    ("hidden_size", "7168", ['model.hidden_size: got a string "7168"']),
    ("curve_includes_shared_expert", "no", ['got a string "no"; expected true or false']),
    ("layer", 61, ["model.layer: unknown key (did you mean model.layers?)"]),
]


@pytest.mark.parametrize(("key", "value", "fragments"), BAD_MODELS)
def test_bad_model_sections(
    capsys: pytest.CaptureFixture[str],
    write_calibration: Callable[[object], Path],
    key: str,
    value: object,
    fragments: list[str],
) -> None:
    doc = default_doc()
    doc["model"][key] = value
    assert_clean_error(run_main(capsys, "--calibration", str(write_calibration(doc))), *fragments)


def test_a_flag_written_as_a_number_past_the_float_range_is_told_as_written(
    capsys: pytest.CaptureFixture[str], write_calibration: Callable[[object], Path]
) -> None:
    text = json.dumps(default_doc()).replace(
        '"curve_includes_shared_expert": false', '"curve_includes_shared_expert": 1e-400'
    )
    run = run_main(capsys, "--calibration", str(write_calibration(text)))
    assert_clean_error(run, "model.curve_includes_shared_expert: got 1e-400; expected true or false")


# --- The experts fit -----------------------------------------------------------------------


def test_experts_fit_recovers_exact_data() -> None:
    """Points made from t0 = 0.5 ms, t_expert = 0.1 ms per distinct expert: the fit returns both."""
    doc = default_doc()
    doc["moe_curve"]["fit"] = "experts"
    doc["moe_curve"]["points"] = [
        {"m": m, "ms": 0.5 + 0.1 * eb.distinct_experts(KIMI, m).value} for m in (1, 9, 32, 64)
    ]
    fit = eb.estimate(eb.parse_calibration(doc)).experts_fit
    assert fit is not None
    assert fit.t0.value == pytest.approx(0.5, rel=1e-9)
    assert fit.t_expert.value == pytest.approx(0.1, rel=1e-9)
    assert all(abs(r) < 1e-9 for _, r in fit.residuals_ms)


def test_experts_fit_flattens_beyond_the_curve(capsys: pytest.CaptureFixture[str]) -> None:
    """Budget 64 (M = 65): the straight line keeps rising; the experts fit stays below 2 x MoE(32)."""
    doc = default_doc()
    doc["stronger_drafter"]["budget"] = 64
    linear = eb.parse_calibration(doc)
    doc["moe_curve"]["fit"] = "experts"
    experts = eb.parse_calibration(doc)

    def moe(cal: eb.Calibration, m: int) -> eb.MoeTime:
        return eb.moe_time(cal, m)

    assert moe(experts, 65).time.value < 2 * moe(experts, 32).time.value
    assert moe(experts, 65).time.value < moe(linear, 65).time.value
    assert moe(experts, 65).extrapolated and moe(linear, 65).extrapolated
    out = flat(run_main(capsys, "--set", "moe_curve.fit=experts", "--set", "stronger_drafter.budget=64").out)
    assert "MoE(M) is read from the experts fit" in out and "M = 65 lies outside" in out
    fit = run_main(capsys, "--set", "moe_curve.fit=experts", "--format", "json").json()["moe_fit"]
    assert fit["kind"] == "experts" and [r["m"] for r in fit["residuals"]] == [1, 9, 32]


def test_the_experts_fit_reading_is_not_named_as_a_measured_point(capsys: pytest.CaptureFixture[str]) -> None:
    """The measured curve(9) is an input; what the fit reads at M = 9 is fit(9), as the residuals name it, and no
    figure --explain derives takes the name of an input."""
    out = run_main(capsys, "--set", "moe_curve.fit=experts", "--explain").out
    inputs, rest = out.split("\nExperts fit of the curve", 1)
    read = {line.split(" = ")[0].strip() for line in inputs.splitlines() if line.startswith("  ") and " = " in line}
    derived = {line.split(" = ")[0].strip() for line in rest.splitlines() if line.startswith("  ") and " = " in line}
    assert {"curve(1)", "curve(9)", "curve(32)"} <= read and not read & derived
    assert "  fit(9) = t0 + t_expert * distinct(9) = 0.31101 + 0.1252 * 66.283 = 8.61 ms" in rest  # not 8.60
    assert "  MoE(9) = fit(9) / bandwidth ratio = 8.610 / 4.444 = 1.94 ms" in rest
    table = run_main(capsys, "--set", "moe_curve.fit=experts", "--all").out
    assert re.search(r"MoE\(9\) +fit\(9\) / bandwidth ratio +1\.94 +13\.3% +experts fit", table)
    assert "MoE(M) is read from the experts fit fit(M) = 0.311 + 0.1252 x distinct(M) ms" in flat(table)


def test_experts_fit_needs_the_model(capsys: pytest.CaptureFixture[str], write_calibration) -> None:  # type: ignore[no-untyped-def]
    doc = default_doc()
    del doc["model"]
    doc["moe_curve"]["fit"] = "experts"
    run = run_main(capsys, "--calibration", str(write_calibration(doc)))
    assert_clean_error(run, "moe_curve.fit", "expected a `model` section")


def test_experts_fit_needs_points_it_can_tell_apart(capsys: pytest.CaptureFixture[str]) -> None:
    """Every token routed to all 384 experts: every batch touches all of them, so the fit is singular."""
    run = run_main(capsys, "--set", "moe_curve.fit=experts", "--set", "model.experts_per_token=384")
    assert_clean_error(run, "moe_curve.fit", "same number of distinct experts")


def test_unknown_fit(capsys: pytest.CaptureFixture[str]) -> None:
    assert_clean_error(run_main(capsys, "--set", "moe_curve.fit=cubic"), "moe_curve.fit", "one of linear, experts")


# --- What an accept length demands of the drafter ------------------------------------------


def test_chain_alpha_of_the_defaults() -> None:
    """Accept 4.4 at block 8: alpha = 0.8 gives (1 - 0.8^9) / 0.2 = 4.33, so a little over 0.8."""
    assert eb.chain_alpha(4.4, 8).value == pytest.approx(0.805, abs=0.001)
    assert eb.chain_alpha(16, 16).value == pytest.approx(0.992, abs=0.001)
    assert eb.chain_alpha(17, 16).value == 1.0
    assert eb.chain_alpha(1, 16).value == 0.0  # exactly: a bisection toward 0 would stop at 3.1e-61
    rows = {r.label: r.chain_alpha for r in default_estimate().scenarios}
    assert rows["current/native@4.4"] == eb.chain_alpha(4.4, 8).value
    assert rows["stronger/native@16"] == eb.chain_alpha(16, 16).value


@given(st.floats(0.0, 0.999), st.integers(1, 64))
def test_chain_alpha_round_trips(alpha: float, depth: int) -> None:
    accept = sum(alpha**i for i in range(depth + 1))
    assert eb.chain_alpha(accept, depth).value == pytest.approx(alpha, abs=1e-9)


@pytest.mark.parametrize("depth", [1, 16, 10_000, 1_000_000])
def test_chain_alpha_costs_the_same_at_any_depth(depth: int) -> None:
    """Each bisection probe is in closed form: a block of a million is as quick as a block of 8."""
    import time

    start = time.perf_counter()
    alpha = eb.chain_alpha(1 + depth / 2 + 0.123, depth).value  # a new value (not from the cache), from 1 to depth + 1
    assert time.perf_counter() - start < 0.05
    assert 0 < alpha < 1


def test_chain_alpha_is_printed_with_its_footnote(capsys: pytest.CaptureFixture[str]) -> None:
    assert "chain alpha:" not in run_main(capsys).out  # --all shows it, and its footnote
    out = flat(run_main(capsys, "--all").out)
    assert "stronger 16 16 0.992" in out
    assert "chain alpha: the per-token acceptance rate a single chain as deep as the block needs" in out
    assert all(math.isfinite(s["chain_alpha"]) for s in run_main(capsys, "--format", "json").json()["scenarios"])
