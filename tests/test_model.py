"""The model's numbers: the published figures, a hand-worked case, and properties."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from conftest import default_doc, default_estimate, estimate_of, find
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import estimate_b300 as eb

# --- The published figures, from the shipped calibration.json ---------------------------
# Calibration figures were published to 0.01 ms; the "about" scenario figures were rounded
# to 0.1 ms and 5 tok/s, so they are matched within 1.5%.

CALIBRATION_FIGURES = [
    ("moe_ddtree", 1.99),
    ("attn_base", 7.26),
    ("spec", 5.27),
    ("ar_step", 7.52),
    ("ddtree_step", 14.52),
]


@pytest.mark.parametrize(("name", "published_ms"), CALIBRATION_FIGURES)
def test_published_calibration_figures(name: str, published_ms: float) -> None:
    dec = default_estimate().decomposition
    value = getattr(dec, name)
    figure = value.time if isinstance(value, eb.MoeTime) else value
    assert figure.value == pytest.approx(published_ms, abs=0.01)


def test_overhead_is_about_86_percent_of_the_ddtree_step() -> None:
    assert default_estimate().decomposition.shares["overhead"].value == pytest.approx(0.86, abs=0.005)


def test_current_drafter_published() -> None:
    est = default_estimate()
    sglang = find(est, "current", "sglang", 4.4)
    assert sglang.measured
    assert sglang.tok_s == pytest.approx(303, rel=1e-12)  # the measurement itself
    native = find(est, "current", "native", 4.4)
    assert not native.measured
    assert native.step_ms == pytest.approx(9.51, abs=0.01)
    assert native.tok_s == pytest.approx(463, abs=0.5)  # published as a whole number


@pytest.mark.parametrize(
    ("pipeline", "step_ms", "tok_s_by_accept"),
    [
        ("sglang", 20.9, {12: 570, 14: 670, 16: 765}),
        ("native", 14.7, {12: 815, 14: 950, 16: 1090}),
    ],
)
def test_stronger_drafter_published(pipeline: str, step_ms: float, tok_s_by_accept: dict[int, float]) -> None:
    est = default_estimate()
    for accept, tok_s in tok_s_by_accept.items():
        row = find(est, "stronger", pipeline, accept)
        assert row.step_ms == pytest.approx(step_ms, rel=0.015)
        assert row.tok_s == pytest.approx(tok_s, rel=0.015)
        assert row.moe_extrapolated  # M = 33 lies beyond the curve's last point, 32


# --- A hand-worked case ------------------------------------------------------------------


def test_hand_worked_case() -> None:
    """Round numbers chosen so every figure can be checked in one's head.

    reference 2 TB/s, target 8 TB/s: bandwidth ratio 4.
    curve: M=1 -> 2 ms, M=5 -> 10 ms (slope 2 ms/token).
    ar_tok_s = 200: AR step 5 ms; MoE(1) = 2/4 = 0.5 ms; ATTN_BASE = 4.5 ms.
    DDTree block 4, budget 4 (M=5), accept 3 at 300 tok/s: step 10 ms;
      MoE(5) = 10/4 = 2.5 ms; SPEC = 10 - 2.5 - 4.5 = 3 ms.
    native cut 0.5: current native step = 2.5 + 0.5 * (4.5 + 3) = 6.25 ms -> 3000/6.25 = 480 tok/s.
    stronger: block 8, budget 6 (M=7, extrapolated: curve 14 ms -> MoE 3.5 ms), a=1.2, s=2, accept 5:
      SGLang step = 3.5 + 1.2*4.5 + 2*3 = 3.5 + 5.4 + 6 = 14.9 ms -> 5000/14.9 = 335.57 tok/s;
      native step = 3.5 + 0.5*(5.4 + 6) = 9.2 ms -> 5000/9.2 = 543.48 tok/s.
    """
    doc = {
        "schema_version": 1,
        "hardware": {
            "reference": {"name": "ref", "mem_bandwidth_tb_s": 2},
            "target": {"name": "tgt", "mem_bandwidth_tb_s": 8},
        },
        "moe_curve": {"tp": 8, "points": [{"m": 5, "ms": 10}, {"m": 1, "ms": 2}]},
        "anchors": {"ar_tok_s": 200, "ddtree": {"block": 4, "budget": 4, "accept": 3, "tok_s": 300}},
        "native_engine": {"overhead_cut": 0.5},
        "stronger_drafter": {"block": 8, "budget": 6, "accept": [5], "attn_base_scale": 1.2, "spec_scale": 2},
    }
    est = estimate_of(doc)
    dec = est.decomposition
    assert dec.bandwidth_ratio.value == pytest.approx(4)
    assert dec.moe_ar.time.value == pytest.approx(0.5)
    assert dec.attn_base.value == pytest.approx(4.5)
    assert dec.ddtree_step.value == pytest.approx(10)
    assert dec.spec.value == pytest.approx(3)
    assert find(est, "current", "native", 3).step_ms == pytest.approx(6.25)
    assert find(est, "current", "native", 3).tok_s == pytest.approx(480)
    sglang, native = find(est, "stronger", "sglang", 5), find(est, "stronger", "native", 5)
    assert (sglang.m, sglang.moe_ms, sglang.moe_extrapolated) == (7, pytest.approx(3.5), True)
    assert (sglang.attn_base_ms, sglang.spec_ms) == (pytest.approx(5.4), pytest.approx(6))
    assert sglang.step_ms == pytest.approx(14.9)
    assert sglang.tok_s == pytest.approx(335.5705, rel=1e-6)
    assert native.step_ms == pytest.approx(9.2)
    assert native.tok_s == pytest.approx(543.4783, rel=1e-6)


@pytest.mark.parametrize(
    ("m", "expected_ms", "extrapolated"),
    [
        (1, 1.15, False),
        (5, 1.15 + 4 * (8.85 - 1.15) / 8, False),  # inside the first segment
        (20, 8.85 + 11 * 0.65, False),  # (23.8 - 8.85) / 23 = 0.65 ms per token
        (33, 24.45, True),  # one token past the end, along the 9-32 segment
    ],
)
def test_curve_is_piecewise_linear(m: int, expected_ms: float, extrapolated: bool) -> None:
    cal = eb.parse_calibration(default_doc())
    moe = eb.moe_time(cal, m)
    assert moe.time.value == pytest.approx(expected_ms * 1.8 / 8, rel=1e-12)
    assert moe.extrapolated == extrapolated


def test_curve_extrapolates_below_the_first_point() -> None:
    doc = default_doc()
    doc["moe_curve"]["points"] = doc["moe_curve"]["points"][1:]
    cal = eb.parse_calibration(doc)
    assert eb.curve_at(cal.moe_curve, cal.model, 1).value == pytest.approx(8.85 - 8 * 0.65)
    assert eb.moe_time(cal, 1).extrapolated


@pytest.mark.parametrize("tok_s", [475.6089879695794, 475.60898796957947, 475.6089879695795])
def test_anchors_at_the_boundary_leave_spec_of_exactly_0(tok_s: float) -> None:
    """DDTree at 475.609 tok/s leaves no time for SPEC: within float rounding of the boundary, on either side,
    SPEC is 0, not 3.6e-15 ms."""
    doc = default_doc()
    doc["anchors"]["ddtree"]["tok_s"] = tok_s
    dec = eb.decompose(eb.parse_calibration(doc))
    assert dec.spec.value == 0.0 and dec.overhead.value == dec.attn_base.value


@pytest.mark.parametrize("ar_tok_s", [3864.734299516908, 3864.7342995169083])
def test_anchors_at_the_boundary_leave_no_attn_base(ar_tok_s: float) -> None:
    """An AR step that MoE(1) alone fills, within float rounding, leaves ATTN_BASE = 0: an error, not 5.6e-17 ms."""
    doc = default_doc()
    doc["anchors"]["ar_tok_s"] = ar_tok_s
    with pytest.raises(eb.CalibrationError, match="leaving ATTN_BASE = 0 ms; expected ATTN_BASE > 0"):
        eb.decompose(eb.parse_calibration(doc))


def test_a_small_attn_base_that_is_no_rounding_stays() -> None:
    """3999.999999999 tok/s against MoE(1) = 0.25 ms leaves ATTN_BASE = 6.25e-14 ms, 2.5e-13 of the step: more than
    the few ulps of rounding, so a value below the bound the error names (4000) is taken."""
    doc = default_doc()
    doc["hardware"]["target"]["mem_bandwidth_tb_s"] = 1.8
    doc["moe_curve"]["points"][0]["ms"] = 0.25
    doc["anchors"]["ar_tok_s"] = 3999.999999999
    assert eb.decompose(eb.parse_calibration(doc)).attn_base.value == pytest.approx(6.25e-14, rel=1e-3)


# --- Properties --------------------------------------------------------------------------

unit = st.floats(0.0, 1.0, exclude_max=True)


@st.composite
def calibrations(draw: st.DrawFn) -> dict[str, object]:
    """Valid calibrations around the default: every figure perturbed, anchors kept decomposable."""
    doc = default_doc()
    doc["hardware"]["target"]["mem_bandwidth_tb_s"] = draw(st.floats(1.0, 20.0))
    doc["native_engine"]["overhead_cut"] = draw(st.floats(0.0, 0.9))
    sd = doc["stronger_drafter"]
    sd["attn_base_scale"] = draw(st.floats(0.5, 2.0))
    sd["spec_scale"] = draw(st.floats(0.5, 3.0))
    sd["budget"] = draw(st.integers(1, 128))
    sd["block"] = draw(st.integers(1, 64))
    top = min(sd["budget"], sd["block"]) + 1
    accepts = st.lists(st.floats(1.0, float(top)), min_size=1, max_size=4, unique_by=lambda a: f"{a:g}")
    sd["accept"] = draw(accepts)  # distinct as they read: accept lengths that read alike are refused
    dd = doc["anchors"]["ddtree"]
    dd["accept"] = draw(st.floats(1.0, 9.0))
    cal = eb.parse_calibration(doc)
    moe_9 = eb.moe_time(cal, 9).time.value
    attn_base = 1000 / doc["anchors"]["ar_tok_s"] - eb.moe_time(cal, 1).time.value
    # SPEC >= 0 needs 1000 * accept / tok_s >= MoE(9) + ATTN_BASE
    dd["tok_s"] = 1000 * dd["accept"] / ((moe_9 + attn_base) * (1 + draw(st.floats(0.0, 2.0))))
    return doc


@settings(max_examples=200, deadline=None)
@given(calibrations())
def test_components_sum_to_the_step_and_the_anchor_is_reproduced(doc: dict[str, object]) -> None:
    est = estimate_of(doc)
    for row in est.scenarios:
        assert sum((row.moe_ms, row.attn_base_ms, row.spec_ms)) == row.step_ms
        assert row.tok_s == pytest.approx(1000 * row.accept / row.step_ms, rel=1e-12)
    anchor = doc["anchors"]["ddtree"]  # type: ignore[index]
    measured = find(est, "current", "sglang", anchor["accept"])
    assert measured.measured
    assert measured.step_ms == pytest.approx(est.decomposition.ddtree_step.value, rel=1e-12, abs=1e-12)
    assert measured.tok_s == pytest.approx(anchor["tok_s"], rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(calibrations(), st.floats(1.0, 5.0), st.floats(1.0, 5.0))
def test_tok_s_rises_with_accept(doc: dict[str, object], a1: float, a2: float) -> None:
    lo, hi = sorted((a1, a2))
    assume(f"{lo:g}" != f"{hi:g}")  # accept lengths that read alike are refused
    sd = doc["stronger_drafter"]  # type: ignore[index]
    sd.update(block=8, budget=8, accept=[lo, hi])
    est = estimate_of(doc)
    for pipeline in eb.PIPELINES:
        assert find(est, "stronger", pipeline, lo).tok_s <= find(est, "stronger", pipeline, hi).tok_s


@settings(max_examples=200, deadline=None)
@given(calibrations(), unit, unit)
def test_native_tok_s_rises_with_overhead_cut(doc: dict[str, object], c1: float, c2: float) -> None:
    lo, hi = sorted((c1, c2))
    results = []
    for cut in (lo, hi):
        doc["native_engine"]["overhead_cut"] = cut  # type: ignore[index]
        results.append(estimate_of(doc))
    for before, after in zip(*(r.scenarios for r in results), strict=True):
        if before.pipeline == "native":
            assert before.tok_s <= after.tok_s
        else:  # SGLang rows do not depend on the native cut
            assert before[: len(eb.SCENARIO_FIELDS)] == after[: len(eb.SCENARIO_FIELDS)]


def test_tok_s_need_not_rise_with_target_bandwidth() -> None:
    """A faster target shrinks MoE, but ATTN_BASE and SPEC are anchored on the target by
    subtraction: the time moves into them, and the stronger drafter scales SPEC by 1.5.
    With spec_scale 4, SGLang stronger@14: going from 8 to 16 TB/s saves curve(33)/8.889 in MoE
    but moves (1.03 * 1.15 + 4 * (8.85 - 1.15)) / 8.889 into the scaled overhead, a net loss."""
    doc = default_doc()
    doc["stronger_drafter"]["spec_scale"] = 4.0
    at_8 = find(estimate_of(doc), "stronger", "sglang", 14).tok_s
    doc["hardware"]["target"]["mem_bandwidth_tb_s"] = 16.0
    at_16 = find(estimate_of(doc), "stronger", "sglang", 14).tok_s
    assert at_16 < at_8


def test_every_figure_is_finite() -> None:
    for row in default_estimate().scenarios:
        assert all(math.isfinite(v) for v in (row.moe_ms, row.attn_base_ms, row.spec_ms, row.step_ms, row.tok_s))


def test_a_figure_past_its_bound_says_so_in_enough_digits() -> None:
    """A figure just past 1e15 is an error that shows it past the bound, not rounded onto it."""
    for value, shown in ((1.00004e15, "gives 1.00004e+15;"), (-1.2e16, "gives -1.2e+16;"), (1e15, "gives 1e+15;")):
        with pytest.raises(eb.CalibrationError) as error:
            eb.derive("big", "x * 1", "", eb.given("x", value))
        assert shown in error.value.message and "expected a finite figure below 1e+15" in error.value.message
    with pytest.raises(eb.CalibrationError, match="gives nan;"):
        eb.derive("nothing", "x - x", "", eb.given("x", math.inf))
    with pytest.raises(eb.CalibrationError, match=r"with accept = 4.4, step = 0 divides by 0; expected a finite"):
        eb.derive("tok/s", "1000 * accept / step", "tok/s", eb.given("accept", 4.4), eb.given("step", 0.0))
    with pytest.raises(eb.CalibrationError, match=r"with x = 1e\+300 overflows; expected a finite"):
        eb.derive("power", "x^2", "", eb.given("x", 1e300))


# --- The derivation the model hands over -----------------------------------------------------


def all_figures(est: eb.Estimate) -> list[eb.Figure]:
    dec = est.decomposition
    roots = [dec.bandwidth_ratio, dec.spec, *dec.shares.values()]
    roots += [f for row in est.scenarios for f in row.figures.values()]
    roots += [f for b in est.break_even for f in b.figures]
    roots += [f for p in est.roofline or () for f in p.figures]
    return eb.derivation(*roots)


@settings(max_examples=100, deadline=None)
@given(calibrations(), st.booleans(), st.booleans())
def test_every_formula_names_its_inputs_and_recomputes_its_value(
    doc: dict[str, Any], experts: bool, shared: bool
) -> None:
    """A formula's text is what computes its figure; here it is read back independently of the model.

    Every input is named in the text, each name stands for one input, the same text always takes the
    same inputs (the model compiles each text once), and the text evaluates to the value.
    """
    doc["moe_curve"]["fit"] = "experts" if experts else "linear"
    doc["model"]["curve_includes_shared_expert"] = shared
    figures = all_figures(estimate_of(doc))
    assert len(figures) > 40
    inputs_of: dict[str, list[str]] = {}
    for figure in figures:
        names = [i.name for i in figure.inputs]
        assert inputs_of.setdefault(figure.formula, names) == names, figure.formula
        if figure.name in ("t0", "t_expert"):  # least squares over the curve: see test_physical
            continue
        if figure.name == "chain alpha":  # an equation: the value must solve it
            block, accept = (i.value for i in figure.inputs)
            a = figure.value
            assert a == 1 or (1 - a ** (block + 1)) / (1 - a) == pytest.approx(accept, rel=1e-9)
            continue
        values = {i.name: f"({float(i.value)!r})" for i in figure.inputs}
        for name in sorted(values, key=len, reverse=True):
            assert re.search(r"(?<![\w.])" + re.escape(name) + r"(?![\w.])", figure.formula), (name, figure.formula)
        text = re.sub(
            "|".join(rf"(?<![\w.]){re.escape(n)}(?![\w.])" for n in sorted(values, key=len, reverse=True)),
            lambda m, v=values: v[m[0]],  # type: ignore[misc]
            figure.formula,
        ).replace("^", "**")
        assert re.fullmatch(r"[\d\s.e+\-*/()]+", text), text  # nothing but numbers and arithmetic is left
        # abs: a SPEC within float rounding of zero is set to zero
        assert eval(text) == pytest.approx(figure.value, rel=1e-12, abs=1e-12), figure.formula
