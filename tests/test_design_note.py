"""What a design note quotes: the focused default, its headline, honest baselines and labels, what can run."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import MEASURED, ROOT, assert_clean_error, default_doc, flat, run_main, run_script

import estimate_b300 as eb

# --- The focused default ---------------------------------------------------------------------


def test_the_default_run_is_short_and_fits_80_columns() -> None:
    run = run_script()
    lines = run.out.splitlines()
    assert run.code == 0 and run.err == ""
    assert len(lines) <= 52
    assert max(map(len, lines)) <= 80
    for absent in ("Break-even", "Physical cross-check,", "The MoE floor:", "What each accept length demands"):
        assert absent not in run.out
    assert lines[-1] == "--all adds break-even, chain alpha, the physical cross-check and the MoE floor."


def test_all_shows_every_section_and_still_fits() -> None:
    out = run_script("--all").out
    assert max(map(len, out.splitlines())) <= 80
    for present in ("Break-even", "Physical cross-check", "The MoE floor", "chain alpha", "Calibration"):
        assert present in out
    assert "--all adds" not in out
    floor = out[out.index("The MoE floor") :]  # a scenario SGLang cannot run is marked there too
    assert all(f"stronger/sglang@{accept} [1]" in floor for accept in (12, 14, 16))


def test_a_long_cell_wraps_its_own_column_at_word_boundaries(capsys: pytest.CaptureFixture[str]) -> None:
    """A break-even out of reach says why in a long sentence: that column wraps, not the short words beside it."""
    run = run_main(capsys, "--all", "--set", "stronger_drafter.block=5", "--set", "stronger_drafter.accept=[4,5,6]")
    assert run.code == 0, run.err
    lines = run.out.splitlines()
    assert max(map(len, lines)) <= 80
    table = lines[lines.index("of decoding on the same pipeline") + 1 :]
    table = table[: table.index("")]
    assert (
        sum("autoregressive" in line for line in table) == 2 and sum("current drafter" in line for line in table) == 2
    )
    assert any(line.rstrip().endswith("it would need") for line in table)


def test_a_wider_terminal_is_used() -> None:
    """COLUMNS (or the terminal, when stdout is one) wider than 80 is the width text and chart fill."""
    out = run_script("--all", env={"COLUMNS": "120"}).out
    assert 80 < max(map(len, out.splitlines())) <= 120


def test_the_headline(capsys: pytest.CaptureFixture[str]) -> None:
    out = flat(run_main(capsys).out)
    assert "Today: 303 tok/s, measured on B300 (current drafter on SGLang, accept 4.4)." in out
    assert (
        "The native engine with today's drafter: 463 tok/s, 1.53x today, if it removes 40% of the time outside the "
        "MoE." in out
    )
    assert (
        "The stronger drafter at accept 12-16: 815-1086 tok/s on the native engine, 2.69-3.58x today "
        "(SGLang cannot run its budget of 32)." in out
    )
    assert "Uncertainty: over the ranges in the calibration, stronger/native@14 (950 tok/s) spans 640 to 1243" in out
    both = flat(run_main(capsys, "--set", "sglang.max_budget=32").out)  # each pipeline beside its own speed-up
    assert (
        "The stronger drafter at accept 12-16: 575-766 tok/s on SGLang, 1.90-2.53x today; 815-1086 tok/s on the "
        "native engine, 2.69-3.58x today." in both
    )


def test_the_headline_calls_no_value_an_option_gave_measured(capsys: pytest.CaptureFixture[str]) -> None:
    """A solved anchor throughput was 'measured on B300', and so was the accept a solve had found."""
    solved = flat(run_main(capsys, "--solve", "anchors.ddtree.tok_s", "--observed", "current/native=470").out)
    assert "Today: 308 tok/s, solved (current drafter on SGLang, accept 4.4)." in solved
    assert "x today: tok/s over today's 308.224 tok/s, solved." in solved
    accept = flat(run_main(capsys, "--solve", "anchors.ddtree.accept", "--observed", "current/native=470").out)
    assert "Today: 303 tok/s, measured on B300 (current drafter on SGLang, accept 4.32543, solved)." in accept
    assert "Today: 310 tok/s, set (" in flat(run_main(capsys, "--set", "anchors.ddtree.tok_s=310").out)


def basis_of(text: str, first: str) -> str:
    """The basis column of the first table row that starts with `first`: its last words after two spaces."""
    line = next(line for line in text.splitlines() if line.startswith(first))
    return line.rsplit("  ", 1)[1].strip()


@pytest.mark.parametrize(
    ("options", "ar_step", "ddtree"),
    [
        ((), "measured on B300", "measured on B300"),
        (("--set", "anchors.ddtree.tok_s=350"), "measured on B300", "set"),
        (("--set", "anchors.ar_tok_s=150"), "set", "measured on B300"),
        (("--set", "anchors.ddtree.tok_s_source=a rerun"), "measured on B300", "measured on B300"),  # a text
        (("--set", "anchors.ddtree.block=9"), "measured on B300", "measured on B300"),  # no input of the step
        (("--set", "anchors.ddtree.budget=6"), "measured on B300", "measured on B300"),  # its row's: below
        (("--set", 'anchors.ddtree={"block": 8, "budget": 8, "accept": 4.4, "tok_s": 303}'), "measured on B300", "set"),
        (("--set", "anchors.ddtree.accept=4", "--solve", "anchors.ddtree.tok_s", "--observed", "current/native=470"),
         "measured on B300", "set and solved"),
        (("--sweep", "anchors.ddtree.block=8,9"), None, None),  # a sweep's table has no basis
    ],
)  # fmt: skip
def test_no_row_calls_a_value_an_option_gave_measured(
    capsys: pytest.CaptureFixture[str], options: tuple[str, ...], ar_step: str | None, ddtree: str | None
) -> None:
    """The headline said 'set', and the calibration table and today's row beside it 'measured on B300'."""
    out = run_main(capsys, *options, "--no-chart").out
    if ar_step is None:
        assert "measured on B300" not in out.split("\n", 4)[4]  # below the headline
        return
    assert basis_of(out, "AR step") == ar_step
    assert basis_of(out, "DDTree step") == ddtree
    budget = "anchors.ddtree.budget" in " ".join(options)  # the tree the row is at: not the one 303 was measured on
    assert basis_of(out, "SGLang ") == ("set" if budget else ddtree)  # today's row, the first on SGLang
    markdown = run_main(capsys, *options, "--format", "markdown").out
    cells = next(line for line in markdown.splitlines() if line.startswith("| DDTree step ")).split("|")
    assert cells[-2].strip() == ddtree


@pytest.mark.parametrize(
    ("options", "basis"),
    [
        ((), "measured"),
        (("--set", "moe_curve.points[1].ms=12"), "set"),
        (("--set", "moe_curve.points[1].basis=assumed"), "assumed"),  # a basis given, not a time
        (("--fit", "moe_curve.points[1].ms", "--measured", "current/native=440"), "fitted"),
    ],
)
def test_a_curve_point_an_option_changed_is_not_called_measured(
    capsys: pytest.CaptureFixture[str], options: tuple[str, ...], basis: str
) -> None:
    """MoE(9)'s point said 'measured point' in the calibration table, and 'measured' in the cross-check, at a time
    that --set or --fit gave."""
    out = run_main(capsys, *options, "--all", "--no-chart").out
    assert basis_of(out, "MoE(9) ") == f"{basis} point"
    cross_check = next(line for line in out.splitlines() if re.match(r" 9  \w", line))
    assert cross_check.split()[1] == basis


@pytest.mark.parametrize(("cut", "removed"), [("0.3", "30%"), ("0.004", "0.4%"), ("0.996", "99.6%"), ("0", "0%")])
def test_the_headline_says_the_cut_the_native_engine_rests_on(
    capsys: pytest.CaptureFixture[str], cut: str, removed: str
) -> None:
    """A cut below all of the time never reads as 100%, nor one above none of it as 0%."""
    out = flat(run_main(capsys, "--set", f"native_engine.overhead_cut={cut}", "--no-chart").out)
    assert f"x today, if it removes {removed} of the time outside the MoE." in out


def test_the_headline_band_is_the_whole_band(capsys: pytest.CaptureFixture[str]) -> None:
    """The headline takes the two corners where every assumption pushes the same way; with the shipped
    calibration each pushes one way throughout the ranges, so that is the band over all 64 corners."""
    full = run_main(capsys, "--sensitivity", "--format", "json").json()["sensitivity"]["band"]
    doc = default_doc()
    cal = eb.parse_calibration(doc)
    quick = eb.sensitivity(doc, cal, eb.ScenarioSpec("stronger", "native", None), every_corner=False)
    assert (quick.tok_s_min, quick.tok_s_max) == (pytest.approx(full["tok_s_min"]), pytest.approx(full["tok_s_max"]))
    assert quick.combinations == 2


@pytest.mark.parametrize(
    "ranges",
    [
        ["ranges.stronger_drafter.spec_scale.low=0.5"],  # below attn_base_scale, ar_tok_s's way turns
        ["ranges.stronger_drafter.spec_scale.low=0.5", "ranges.anchors.ar_tok_s.relative=0.3"],
    ],
)
def test_where_a_way_turns_inside_the_ranges_the_headline_takes_every_corner(
    capsys: pytest.CaptureFixture[str], ranges: list[str]
) -> None:
    """Two corners gave 640 to 1486 and 613 to 1397 here, where every combination gives 640 to 1500 and 613 to
    1551: a flip of one end of a corner passes it, and the headline then takes them all."""
    sets = [x for r in ranges for x in ("--set", r)]
    full = run_main(capsys, *sets, "--sensitivity", "--format", "json").json()["sensitivity"]["band"]
    headline = flat(run_main(capsys, *sets).out)
    low, high = (f"{full[key]:.0f}" for key in ("tok_s_min", "tok_s_max"))
    assert f"spans {low} to {high} tok/s" in headline


def test_a_value_outside_its_range_is_named_beside_the_band(capsys: pytest.CaptureFixture[str]) -> None:
    """The band spans the calibration's ranges: a --set outside one does not move it, and the headline says so."""
    run = run_main(capsys, "--set", "hardware.target.name=H200", "--set", "hardware.target.mem_bandwidth_tb_s=4.8")
    assert run.code == 0 and run.err.count("\n") == 1  # the warning that the anchors were measured on B300
    assert (
        "spans 640 to 1243 tok/s (-21% / +53%). The band spans the ranges, not the values in force: "
        "hardware.target.mem_bandwidth_tb_s = 4.8 is outside 7.7 to 8." in flat(run.out)
    )
    assert "The band spans the ranges" not in flat(run_main(capsys).out)


def test_wrapping_keeps_a_mark_a_hash_and_an_equation_with_their_words(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 80 columns a footnote's mark stays beside its word, a hash beside "sha256", a number beside its "=":
    cells wrap as "cannot" / "run [1]", never leaving a "[1]" or a "17" on a line of its own."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / ("d" * 29)).mkdir()
    shutil.copy(ROOT / "calibration.json", path := f"{'d' * 29}/calibration.json")  # "sha256" ends at column 80
    scale = ("--all", "--set", "stronger_drafter.spec_scale=12", "--set", "hardware.target.mem_bandwidth_tb_s=1e5")
    lines = run_main(capsys, "--calibration", path, *scale).out.splitlines()
    assert lines[0] == f"estimate_b300 {eb.__version__}; {path}," and lines[1].startswith("  sha256 e8a03030eafc;")
    assert "run [1]" in map(str.strip, lines) and "block+1 = 17" in map(str.strip, lines)  # wrapped, each whole
    assert not [line for line in lines if re.fullmatch(r"\[\d+\]|\d+", line.strip()) or line.endswith(" =")]
    assert max(map(len, lines)) <= 80


@pytest.mark.parametrize(
    "text",
    [
        "word [1] [2] [3] [4] [5] [6] [7] [8] [9] [10] [11] [12] [13] [14] [15] [16] [17]",
        "a = 1 = 2 = 3 = 4 = 5 = 6 = 7 = 8 = 9 = 10 = 11 = 12 = 13 = 14 = 15 = 16",
        " ".join(["sha256"] * 14),
    ],
)
def test_a_chain_of_what_wrapping_keeps_together_still_wraps(capsys: pytest.CaptureFixture[str], text: str) -> None:
    """Only a pair is kept on one line, a mark with its word or a number with its name: a chain of them in a
    name glued whole was 144 characters wide. The title, which names the target, wraps too."""
    for key in ("anchors.measured_on", "hardware.target.name"):
        out = run_main(capsys, "--all", "--set", f"{key}={text}").out
        assert max(map(len, out.splitlines())) <= 80 and "\0" not in out


@pytest.mark.parametrize("spec_scale", ["10", "1000"])
def test_the_headline_band_reads_its_corners_inside_the_ranges(
    capsys: pytest.CaptureFixture[str], spec_scale: str
) -> None:
    """At spec_scale 10 (outside its range, 1.5 to 2) more bandwidth slows the stronger drafter: its SPEC grows
    more than its MoE shrinks. Inside the ranges it speeds it up, and those are the corners the band spans."""
    scale = ("--set", f"stronger_drafter.spec_scale={spec_scale}")
    tornado = run_main(capsys, *scale, "--sensitivity", "--format", "json").json()["sensitivity"]
    (bandwidth,) = (row for row in tornado["rows"] if row["path"] == "hardware.target.mem_bandwidth_tb_s")
    assert bandwidth["tok_s_at_high"] < bandwidth["tok_s_at_low"]  # at the value in force
    band = f"spans {tornado['band']['tok_s_min']:.0f} to {tornado['band']['tok_s_max']:.0f} tok/s"
    assert band == "spans 640 to 1243 tok/s"  # the shipped band: every range as shipped
    assert band in flat(run_main(capsys, *scale).out)


def test_an_assumption_that_moves_nothing_where_its_way_is_read_takes_both_its_ends(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Anchors that leave SPEC exactly 0 at ddtree.tok_s = 500: spec_scale moves nothing there, but at 450, where
    SPEC > 0, a larger one slows the stronger drafter. The two corners read from 500 gave 1352 to 1480."""
    curve = '[{"m": 1, "ms": 1.0}, {"m": 9, "ms": 2.0}, {"m": 32, "ms": 5.0}]'
    ranges = {
        "anchors.ddtree.tok_s": {"low": 450, "high": 500, "source": "x"},
        "stronger_drafter.spec_scale": {"low": 1.5, "high": 4, "source": "x"},
    }
    sets = [
        "hardware.target.mem_bandwidth_tb_s=1.8", "anchors.ar_tok_s=125", f"moe_curve.points={curve}",
        "anchors.ddtree.accept=4.5", "anchors.ddtree.tok_s=500", f"ranges={json.dumps(ranges)}",
    ]  # fmt: skip
    args = [part for value in sets for part in ("--set", value)]
    band = run_main(capsys, *args, "--sensitivity", "--format", "json").json()["sensitivity"]["band"]
    assert (round(band["tok_s_min"]), round(band["tok_s_max"])) == (1181, 1480)
    assert "spans 1181 to 1480 tok/s" in flat(run_main(capsys, *args).out)


def test_a_range_is_not_broken_at_its_dash(capsys: pytest.CaptureFixture[str]) -> None:
    """A range reads "7.7 to 8": as "7.7 - 8." at the end of a line at 80 columns, "7.7 -" read as a minus. A run
    of numbers and minus signs in a text stays on one line."""
    run = run_script("--solve", "hardware.target.mem_bandwidth_tb_s", "--observed", "current/native=450")
    lines = run.out.splitlines()
    assert "is outside 7.7 to 8." in flat(run.out) and not any(line.endswith(" -") for line in lines)
    assert max(map(len, lines)) <= 80
    doc = default_doc()
    doc["sglang"]["max_budget_source"] = "runs " + " - ".join(map(str, range(1, 40)))  # a run of dashes may break
    run = run_main(capsys, "--set", f"sglang={json.dumps(doc['sglang'])}")
    assert run.code == 0 and max(map(len, run.out.splitlines())) <= 80


def test_a_markdown_note_lists_the_ranges_its_band_spans(capsys: pytest.CaptureFixture[str]) -> None:
    """The headline quotes a band, so the assumptions list what it spans: each range's ends in force, and its source."""
    lines = run_main(capsys, "--format", "markdown", "--set", "ranges.anchors.ar_tok_s.relative=0.05").out.splitlines()
    heading = (
        "- `ranges`: what-if ranges for the headline's band and --sensitivity; each end is a plausible value, not a "
        "confidence bound"
    )
    at = lines.index(heading)
    assert lines[at + 1] == (
        "  - `native_engine.overhead_cut` from 0.2 to 0.6: assumed: the native engine's cut is a design target, "
        "not yet measured"
    )
    assert lines[at + 5].startswith(  # 133 * (1 -/+ 0.05)
        "  - `anchors.ar_tok_s` from 126.35 to 139.65: set by --set ranges.anchors.ar\\_tok\\_s.relative=0.05; "
        "the file said relative 0.03 (measured value;"
    )
    assert [line[:4] for line in lines[at + 1 : at + 8]] == ["  - "] * 6 + [""]  # the six ranges, then the list ends
    swept = run_main(capsys, "--format", "markdown", "--sweep", "native_engine.overhead_cut=0.3,0.4").out
    assert "`ranges`" not in swept  # no band shown, so no range used


def test_a_markdown_note_keeps_the_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    run = run_main(capsys, "--format", "markdown", "--set", "hardware.target.name=H200")
    assert run.code == 0
    (warning,) = run.err.splitlines()
    lines = run.out.splitlines()
    at = lines.index("### Warnings")
    assert lines[at + 2] == "- " + eb.markdown_text(warning.removeprefix("estimate_b300: warning: "))
    assert lines.index("### Calibration") > at and "### Warnings" not in run_main(capsys, "--format", "markdown").out


def test_without_ranges_there_is_no_band_and_no_error(
    capsys: pytest.CaptureFixture[str], write_calibration: Any
) -> None:
    doc = default_doc()
    del doc["ranges"]
    run = run_main(capsys, "--calibration", str(write_calibration(doc)))
    assert run.code == 0 and run.err == ""
    assert "Uncertainty: over the ranges" not in flat(run.out)
    assert "a `ranges` section in the calibration gives a band" in flat(run.out)


@pytest.mark.parametrize("fmt", ["table", "markdown", "json"])
def test_ranges_the_calibration_cannot_take_cost_the_band_not_the_run(
    capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    """A DDTree anchor so fast that the low end of ar_tok_s's range conflicts with it: every format runs."""
    run = run_main(capsys, "--set", "anchors.ddtree.tok_s=466.834", "--format", fmt)
    assert run.code == 0, run.err
    if fmt == "json":  # JSON shows no headline, so it has no band to miss
        assert run.err == ""
        return
    assert run.err.count("\n") == 1
    assert run.err.startswith(
        "estimate_b300: warning: the headline has no uncertainty band: ranges: at anchors.ar_tok_s="
    )
    assert "Uncertainty:" not in flat(run.out)
    assert "the ranges in the calibration give no band (see the warning)" in flat(run.out)
    asked = run_main(capsys, "--set", "anchors.ddtree.tok_s=466.834", "--sensitivity")
    assert asked.code == 2 and "expected ranges it can use" in asked.err  # asked for, it is an error
    others = [["--sweep", "native_engine.overhead_cut=0.1,0.2"]] + [["--explain"]] * (fmt == "table")
    for other in others:  # they show no headline
        run = run_main(capsys, "--set", "anchors.ddtree.tok_s=466.834", "--format", fmt, *other)
        assert (run.code, run.err) == (0, ""), other


def test_sensitivity_fails_at_a_range_end_the_calibration_cannot_take_whichever_scenario_it_studies(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The stronger drafter's SPEC overflows at spec_scale = 1e300, which --set refuses. The current drafter's
    scenarios do not read that value, yet their --sensitivity fails as the stronger one's does, for the same reason."""
    ranges = '--set=ranges={"stronger_drafter.spec_scale": {"low": 1.5, "high": 1e300, "source": "s"}}'
    told = "ranges: at stronger_drafter.spec_scale=1e+300 the calibration fails (SPEC part: kept * spec_scale * SPEC"
    for scenario in ("current/native", "stronger/native"):
        assert_clean_error(run_main(capsys, ranges, "--sensitivity", "--scenario", scenario), told)
    run = run_main(capsys, ranges)
    assert run.code == 0 and f"warning: the headline has no uncertainty band: {told}" in run.err
    assert_clean_error(run_main(capsys, "--set", "stronger_drafter.spec_scale=1e300"), "SPEC part: kept * spec_scale")


def test_a_range_end_at_which_a_logged_measurement_cannot_be_predicted_fails_as_set_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A measurement at budget 200 reads the curve at M = 201, where a third point of 5 ms takes the end segment
    below zero: --set of that value fails, and so does --sensitivity over a range that reaches it. Both errors
    name the file and the options they come from."""
    logged = (
        '--set=measurements=[{"drafter": "current", "pipeline": "native", "budget": 200, "accept": 4.4, "tok_s": 300}]'
    )
    told = "reading the curve (M = 1..32, fit linear) at M = 201 gives -23.29 ms; expected a positive time"
    run = run_main(capsys, logged, "--set", "moe_curve.points[2].ms=5")
    assert_clean_error(run, "calibration.json with --set measurements=[", "with --set moe_curve.points[2].ms=5: ", told)
    ranges = '--set=ranges={"moe_curve.points[2].ms": {"low": 5, "high": 30, "source": "s"}}'
    run = run_main(capsys, logged, ranges, "--sensitivity")
    assert_clean_error(run, "ranges: at moe_curve.points[2].ms=5 the calibration fails (moe_curve.points: ", told)


# --- One baseline per comparison ---------------------------------------------------------------


def test_speed_ups_are_over_todays_measured_throughput(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_main(capsys, "--format", "json").json()
    for s in doc["scenarios"]:
        assert s["vs_today"] == pytest.approx(s["tok_s"] / 303, rel=1e-12)
    out = run_main(capsys).out
    assert "vs AR" not in out and "x today" in out
    break_even = flat(run_main(capsys, "--all").out)
    assert "matches another way of decoding on the same pipeline" in break_even  # AR compared on its own pipeline
    # the throughput to match is rounded as the drafter tables round it: 463 there, 463 here
    assert re.search(r"native engine +current drafter +463 +6\.82", break_even)


# --- What can run --------------------------------------------------------------------------------


def test_sglang_cannot_run_the_stronger_drafter(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_main(capsys, "--format", "json").json()
    runnable = {(s["drafter"], s["pipeline"]): (s["runnable"], s["not_runnable_reason"]) for s in doc["scenarios"]}
    assert runnable["current", "sglang"] == (True, None)
    assert runnable["current", "native"] == (True, None)
    assert runnable["stronger", "native"] == (True, None)
    ok, reason = runnable["stronger", "sglang"]
    assert not ok and reason.startswith("SGLang cannot verify a budget above 8: its verify CUDA graphs")
    table = run_main(capsys).out
    assert table.count("cannot run [1]") == 3 and "[1] SGLang cannot verify a budget above 8" in table
    unsaid = '{"source": "the SGLang pipeline the anchors were measured with", "max_budget": 8}'
    table = run_main(capsys, "--set", f"sglang={unsaid}").out  # the section's source is no reason
    assert "[1] SGLang cannot verify a budget above 8.\n" in table


def test_sweeps_say_what_can_run(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_main(capsys, "--sweep", "sglang.max_budget=8,32", "--format", "json").json()
    flags = [[s["runnable"] for s in p["scenarios"] if s["pipeline"] == "sglang"] for p in doc["sweep"]]
    assert flags == [[True, False, False, False], [True, True, True, True]]
    assert all("vs_today" in s for p in doc["sweep"] for s in p["scenarios"])


def test_without_the_sglang_section_everything_runs(capsys: pytest.CaptureFixture[str], write_calibration: Any) -> None:
    doc = default_doc()
    del doc["sglang"]
    run = run_main(capsys, "--calibration", str(write_calibration(doc)), "--format", "json")
    assert all(s["runnable"] for s in run.json()["scenarios"])
    text = flat(run_main(capsys, "--calibration", str(write_calibration(doc))).out)
    assert "The stronger drafter at accept 12-16: 575-766 tok/s on SGLang, 1.90-2.53x today; 815-1086 tok/s on" in text
    assert "cannot run" not in text


# --- Where the anchors were measured -----------------------------------------------------------


H200 = ("--set", "hardware.target.name=H200", "--set", "hardware.target.mem_bandwidth_tb_s=4.8")


def test_another_target_keeps_the_anchors_labels(capsys: pytest.CaptureFixture[str]) -> None:
    run = run_main(capsys, *H200)
    assert run.code == 0
    assert "Kimi K2.x + DDTree at concurrency 1 on H200" in run.out
    assert "measured on B300" in run.out and "measured on H200" not in run.out
    assert run.err.startswith("estimate_b300: warning: hardware.target.name: the estimate is for H200, but the anchors")
    assert "as if they were measured there; expected anchors.measured_on_mem_bandwidth_tb_s, B300's" in run.err
    warnings = run_main(capsys, "--set", "hardware.target.name=H200", "--format", "json").json()["warnings"]
    assert any("anchors were measured on B300" in w for w in warnings)


def test_another_target_keeps_the_anchors_overhead_and_takes_its_own_moe(capsys: pytest.CaptureFixture[str]) -> None:
    """Given B300's bandwidth, the anchors are split there: ATTN_BASE and SPEC stay B300's, H200 adds its MoE."""
    doc, b300 = default_doc(), run_main(capsys, "--format", "json").json()
    run = run_main(capsys, *H200, "--set", "anchors.measured_on_mem_bandwidth_tb_s=8", "--format", "json")
    h200 = run.json()
    assert run.code == 0 and "it keeps B300's overhead (ATTN_BASE and SPEC)" in run.err
    for key in ("attn_base_ms", "spec_ms", "moe_ar_ms", "moe_ddtree_ms"):  # the split, at B300's bandwidth
        assert h200["calibration"][key] == pytest.approx(b300["calibration"][key], rel=1e-12)
    assert h200["calibration"]["bandwidth_ratio"] == pytest.approx(4.8 / 1.8, rel=1e-12)
    points = {p["m"]: p["ms"] for p in doc["moe_curve"]["points"]}
    overhead = b300["calibration"]["attn_base_ms"] + b300["calibration"]["spec_ms"]  # 12.53 ms
    today = next(s for s in h200["scenarios"] if (s["drafter"], s["pipeline"]) == ("current", "sglang"))
    step = points[9] / (4.8 / 1.8) + overhead  # 3.32 + 12.53 ms
    assert today["tok_s"] == pytest.approx(1000 * 4.4 / step, rel=1e-12) and round(today["tok_s"]) == 278
    assert today["measured"] is False  # an estimate for H200, not the measurement on B300
    table = run_main(capsys, *H200, "--set", "anchors.measured_on_mem_bandwidth_tb_s=8").out
    today_line = (
        "Today: 303 tok/s, measured on B300 (current drafter on SGLang, accept 4.4); on H200 the same gives 278"
    )
    assert today_line in flat(table)
    assert "anchors' MoE(9)" in table and "split at its ratio 8 / 1.8 TB/s = 4.444x" in flat(table)


def test_measurements_are_predicted_where_the_anchors_were_measured(capsys: pytest.CaptureFixture[str]) -> None:
    """Logged on B300 as the anchors were, they were predicted on H200: a fit of the cut to them gave 0.4071 there,
    0.3158 on B300. Given B300's bandwidth, they are predicted on B300, fitted and solved there, and the output says
    so; without it, the anchors and they alike are read as the target's (0.3598)."""
    logged = ("--calibration", str(MEASURED), "--fit", "native_engine.overhead_cut", "--format", "json")
    b300 = run_main(capsys, *logged).json()
    elsewhere = ("--set", "anchors.measured_on_mem_bandwidth_tb_s=8")
    h200 = run_main(capsys, *logged, *H200, *elsewhere).json()
    assert h200["fit"]["values"][0] == pytest.approx(b300["fit"]["values"][0], rel=1e-9)
    assert round(b300["fit"]["values"][0], 4) == 0.3158
    for mine, theirs in zip(h200["fit"]["measurements"], b300["fit"]["measurements"], strict=True):
        assert mine["predicted_tok_s"] == pytest.approx(theirs["predicted_tok_s"], rel=1e-12)
    as_if_here = run_main(capsys, *logged, *H200).json()["fit"]["values"][0]  # the anchors too
    assert round(as_if_here, 4) == 0.3598
    table = flat(run_main(capsys, "--calibration", str(MEASURED), *H200, *elsewhere, "--all").out)
    assert "Track record: the model predicts the 4 measurements on B300 within" in table
    assert "Measurements: the model's track record on B300," in table
    explained = run_main(capsys, "--calibration", str(MEASURED), *H200, *elsewhere, "--explain").out
    assert "Track record on B300: error" in explained and "anchors' MoE(17) = curve(17) / anchors' ratio" in explained
    solved = flat(run_main(capsys, *H200, *elsewhere, "--solve", "native_engine.overhead_cut", "--observed",
                           "current/native=470").out)  # fmt: skip
    assert "brings current/native@4.4 on B300 to the observed 470 tok/s" in solved
    assert "native_engine.overhead_cut = 0.411785 (was 0.4)" in solved  # as on B300
    stronger = run_main(capsys, *H200, *elsewhere, "--solve", "stronger_drafter.accept[1]", "--observed",
                        "stronger/native=900")  # fmt: skip
    told = "900 tok/s on B300, where the anchors were measured, is tok/s * step / 1000 = 900 * 14.7311 / 1000"
    assert_clean_error(stronger, told)  # B300's step, not H200's
    unmoved = run_main(capsys, *H200, *elsewhere, "--solve", "hardware.target.mem_bandwidth_tb_s", "--observed",
                       "stronger/native=900")  # fmt: skip
    assert_clean_error(unmoved, "stronger/native@14 on B300 does not depend on it (it stays at 950.37 tok/s)")
    explained = run_main(capsys, *H200, *elsewhere, "--solve", "native_engine.overhead_cut", "--observed",
                         "current/native=420", "--explain").out  # fmt: skip
    assert "solved so that current/native@4.4 on B300 = 420 tok/s; closed form" in explained
    assert "Observation current/native@4.4 on B300: 420 tok/s observed\n" in explained
    assert "  step = anchors' MoE(9) + ATTN_BASE part + SPEC part = 1.991 + " in explained
    outside = run_main(capsys, *H200, *elsewhere, "--solve", "native_engine.overhead_cut", "--observed",
                       "current/native=350")  # fmt: skip
    assert "the solved value 0.155626 lies outside" in outside.err
    assert "the observation on B300 and that assumption disagree" in outside.err


def test_the_anchors_bandwidth_is_used_only_for_another_target(capsys: pytest.CaptureFixture[str]) -> None:
    """Beside a target of the anchors' own name it is not used (a warning says so where it differs), so a sweep
    of the target's name runs every GPU; without measured_on it names no GPU, and is an error; mistyped, the hint
    names it."""
    key = "anchors.measured_on_mem_bandwidth_tb_s"
    same, default = run_main(capsys, "--set", f"{key}=7.9", "--format", "json"), run_main(capsys, "--format", "json")
    assert same.code == 0 and same.json()["scenarios"] == default.json()["scenarios"]
    assert f"{key}: 7.9 TB/s is not used: the target is B300, on which the anchors were measured" in same.err
    swept = run_main(capsys, "--set", f"{key}=8", "--sweep", "hardware.target.name=H200,B300", "--format", "json")
    assert swept.code == 0 and len(swept.json()["sweep"]) == 2
    kinds = ["--set", "hardware.target.mem_bandwidth_tb_s=4.8", "--sweep", "hardware.target.name=B300,H200"]
    warned = run_main(capsys, "--set", f"{key}=8", *kinds, "--format", "csv").err.splitlines()  # each its own point
    assert [line.split("): ", 1)[1].split(":")[0] for line in warned] == [key, "hardware.target.name"]
    assert all("at 1 of 2 sweep points" in line for line in warned)
    anchors = '{"ar_tok_s": 133, "ddtree": {"block": 8, "budget": 8, "accept": 4.4, "tok_s": 303}, "%s": 8}'
    told = f"{key}: is the bandwidth of the GPU the anchors were measured on; expected measured_on too"
    assert_clean_error(run_main(capsys, "--set", "anchors=" + anchors % key.split(".")[1]), told)
    typo = run_main(capsys, "--set", "anchors.measured_on_mem_bandwith_tb_s=8")
    assert_clean_error(typo, f"(did you mean {key}?)")


# --- Sweep values as written ---------------------------------------------------------------------


def test_sweep_values_are_the_numbers_typed(capsys: pytest.CaptureFixture[str]) -> None:
    args = ("--sweep", "native_engine.overhead_cut=0.2:0.6:0.1")
    values = [
        p["values"]["native_engine.overhead_cut"] for p in run_main(capsys, *args, "--format", "json").json()["sweep"]
    ]
    assert values == [0.2, 0.3, 0.4, 0.5, 0.6]
    rows = list(csv.DictReader(io.StringIO(run_main(capsys, *args, "--format", "csv").out)))
    assert sorted({r["native_engine.overhead_cut"] for r in rows}) == ["0.2", "0.3", "0.4", "0.5", "0.6"]
    listed = run_main(capsys, "--sweep", "native_engine.overhead_cut=0.30,0.1", "--format", "json").json()
    assert [p["values"]["native_engine.overhead_cut"] for p in listed["sweep"]] == [0.3, 0.1]
    fine = run_main(capsys, "--sweep", "native_engine.overhead_cut=0.3:0.30000002:0.00000001").out.splitlines()
    column = [line.split()[0] for line in fine[fine.index("Sweep: 3 points") + 3 :][:3]]
    assert column == ["0.3", "0.30000001", "0.30000002"]  # not three rows of 0.3, as 6 digits would show them


# --- The small ones ----------------------------------------------------------------------------


def test_a_solved_value_outside_its_range_warns(capsys: pytest.CaptureFixture[str]) -> None:
    run = run_main(
        capsys, "--solve", "stronger_drafter.spec_scale", "--observed", "stronger/native@14=1000", "--format", "json"
    )
    assert run.code == 0
    value = run.json()["solve"]["value"]
    assert value < 1.5
    assert run.err.count("\n") == 1 and "lies outside its range in the calibration, 1.5 to 2" in run.err
    assert run.err.endswith("; the observation and that assumption disagree\n")  # one, not "the measurements"
    assert any("lies outside its range" in w for w in run.json()["warnings"])
    run = run_main(capsys, "--solve", "native_engine.overhead_cut", "--observed", "current/native=628.2725")
    assert "the solved value 0.600000024 lies outside its range in the calibration, 0.2 to 0.6" in run.err  # not 0.6
    run = run_main(capsys, "--solve", "native_engine.overhead_cut", "--observed", "current/native=2209.666")
    assert "the solved value 0.999999907 lies outside its range" in run.err  # not 1, which the cut cannot be


def test_a_fit_of_one_measurement_counts_it_in_the_singular(capsys: pytest.CaptureFixture[str]) -> None:
    run = run_main(capsys, "--measured", "current/native=330", "--fit", "native_engine.overhead_cut", "--explain")
    assert "native_engine.overhead_cut = 0.0948204: fitted to 1 measurement, was 0.4" in run.out
    assert run.err.endswith("; the measurement and that assumption disagree\n")
    listed = run_main(capsys, "--set", "stronger_drafter.accept=[14]", "--set", "stronger_drafter.accept[3]=12")
    assert_clean_error(listed, "stronger_drafter.accept[3]: the list has 1 entry; expected an index below 1")


def test_without_tabulate_tables_say_what_to_install() -> None:
    """A fresh interpreter in which tabulate cannot be imported."""
    code = (
        "import sys; sys.modules['tabulate'] = None; sys.path.insert(0, {root!r}); import estimate_b300 as eb; "
        "sys.exit(eb.main({args!r}))"
    )
    for args, status in (([], 2), (["--format", "markdown"], 2), (["--format", "json"], 0), (["--format", "csv"], 0)):
        proc = subprocess.run(
            [sys.executable, "-c", code.format(root=str(ROOT), args=args)], capture_output=True, text=True, cwd=ROOT
        )
        assert proc.returncode == status, proc.stderr
        if status:
            assert proc.stdout == "" and proc.stderr.count("\n") == 1
            assert "pip install tabulate" in proc.stderr and "--format json and --format csv" in proc.stderr
        else:
            assert proc.stdout and "Traceback" not in proc.stderr


def test_a_bad_accept_names_the_binding_limit(capsys: pytest.CaptureFixture[str]) -> None:
    run = run_main(capsys, "--set", "stronger_drafter.accept=[12, 20]")
    assert_clean_error(run, "20 exceeds the tree's limit block+1 = 17")
    assert "33" not in run.err


def test_json_without_a_band_when_none_is_asked(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_main(capsys, "--format", "json").json()
    assert "sensitivity" not in doc and json.dumps(doc)
