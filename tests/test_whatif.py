"""What-if analysis: --set, --sweep, --sensitivity with ranges, break-even accept, --solve."""

from __future__ import annotations

import functools
import gc
import itertools
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    MEASURED,
    assert_clean_error,
    counting,
    default_doc,
    default_estimate,
    find,
    flat,
    on_cpus,
    run_main,
)

import estimate_b300 as eb

# Figures of the default calibration used below, each derived once:
#   MoE(9) = 8.85 / (8 / 1.8) = 1.99125 ms, MoE(33) = 24.45 / 4.444 = 5.50125 ms
#   ATTN_BASE = 1000/133 - 1.15/4.444 = 7.260047 ms, SPEC = 1000*4.4/303 - 1.99125 - 7.260047 = 5.270155 ms
#   stronger overhead = 1.03 * 7.260047 + 1.5 * 5.270155 = 15.383081 ms
MOE_9, MOE_33 = 8.85 * 1.8 / 8, 24.45 * 1.8 / 8
ATTN_BASE = 1000 / 133 - 1.15 * 1.8 / 8
SPEC = 1000 * 4.4 / 303 - MOE_9 - ATTN_BASE
STRONGER_OVERHEAD = 1.03 * ATTN_BASE + 1.5 * SPEC


def native_tok_s(accept: float, cut: float, moe: float = MOE_33, overhead: float = STRONGER_OVERHEAD) -> float:
    return 1000 * accept / (moe + (1 - cut) * overhead)


# --- Overrides -----------------------------------------------------------------------------


def test_set_changes_the_estimate_and_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    """A 30% cut: current/native = 4400 / (1.99125 + 0.7 * 12.530202) = 408.83 tok/s."""
    run = run_main(capsys, "--set", "native_engine.overhead_cut=0.3", "--format", "json")
    doc = run.json()
    assert doc["provenance"]["overrides"] == ["native_engine.overhead_cut=0.3"]
    row = next(s for s in doc["scenarios"] if (s["drafter"], s["pipeline"]) == ("current", "native"))
    assert row["tok_s"] == pytest.approx(4400 / (MOE_9 + 0.7 * (ATTN_BASE + SPEC)), rel=1e-12)
    assert row["tok_s"] == pytest.approx(408.83, abs=0.01)
    table = flat(run_main(capsys, "--set", "native_engine.overhead_cut=0.3").out)
    assert "overrides: native_engine.overhead_cut=0.3" in table
    assert (
        "The native engine with today's drafter: 409 tok/s, 1.35x today, if it removes 30% of the time outside "
        "the MoE." in table
    )


def test_set_takes_json_lists_and_plain_strings(capsys: pytest.CaptureFixture[str]) -> None:
    run = run_main(
        capsys, "--set", "stronger_drafter.accept=[10,12]", "--set", "hardware.target.name=B200", "--format", "json"
    )
    doc = run.json()
    assert sorted({s["accept"] for s in doc["scenarios"] if s["drafter"] == "stronger"}) == [10, 12]
    table = run_main(capsys, "--set", "hardware.target.name=B200").out
    assert "at concurrency 1 on B200" in table


def test_set_several_and_nested_index(capsys: pytest.CaptureFixture[str]) -> None:
    """curve(32) = 30 ms: MoE(33) = (30 + (30 - 8.85) / 23) * 1.8 / 8 = 6.9569 ms."""
    run = run_main(
        capsys, "--set", "moe_curve.points[2].ms=30", "--set", "anchors.ddtree.tok_s=310", "--format", "json"
    )
    row = next(s for s in run.json()["scenarios"] if s["drafter"] == "stronger")
    assert row["moe_ms"] == pytest.approx((30 + 21.15 / 23) * 1.8 / 8, rel=1e-12)
    current = next(s for s in run.json()["scenarios"] if s["measured"])
    assert current["tok_s"] == pytest.approx(310, rel=1e-12)


@pytest.mark.parametrize(
    ("option", "fragments"),
    [
        (
            "native_engine.overhead_cutt=0.3",
            ["with --set native_engine.overhead_cutt=0.3", "did you mean native_engine.overhead_cut?"],
        ),
        ("native_engin.overhead_cut=0.3", ["native_engin: unknown key", "did you mean native_engine?"]),
        ("native_engine.overhead_cut=1.5", ["native_engine.overhead_cut: got 1.5", ">= 0 and < 1"]),
        ("native_engine.overhead_cut=0.3x", ['got a string "0.3x"; expected a number >= 0 and < 1\n']),
        (
            "native_engine.overhead_cut=.3",
            ['got a string ".3"; expected a number >= 0 and < 1 (as JSON writes it: 0.3)\n'],
        ),
        ("native_engine.overhead_cut=.", ['got a string "."; expected a number >= 0 and < 1\n']),
        # the hint offers only what the key takes, and reads numbers as JSON does: no-break space is not blank there
        ('stronger_drafter.block="16.5"', ['got a string "16.5"; expected a whole number from 1 to 1,000,000\n']),
        ('stronger_drafter.accept[0]="40"', ['got a string "40"; expected a number >= 1 and <= 17\n']),
        ('stronger_drafter.accept[0]="13"', ["expected a number >= 1 and <= 17 (as JSON writes it: 13)\n"]),
        ("anchors.ar_tok_s=\u00a0133", ['got a string "\\u00a0133"; expected a number > 0 (as JSON writes it: 133)']),
        # a letter of any script as typed, a space that is not " " and a joiner escaped
        ('anchors.ar_tok_s="八\u200d"', ['got a string "八\\u200d"; expected a number > 0\n']),
        ('anchors.ar_tok_s=["八"]', ['got a list ["八"]; expected a number > 0\n']),
        # a long text cut where no escape is split: not "\u0...
        ('anchors.ar_tok_s="' + "a" * 33 + '\u00a0b"', ['got a string "' + "a" * 33 + "...; expected"]),
        ("anchors.ar_tok_s.x=1", ["anchors.ar_tok_s: is a number, not an object"]),
        ("moe_curve.points[7].ms=1", ["moe_curve.points[7]: the list has 3 entries"]),
        ("moe_curve.points[x].ms=1", ["bad index"]),
        ("nosuch[0]=1", ["nosuch: unknown key (expected a key that holds a list)"]),
        ("moe_curve.pionts[1].ms=9", ["moe_curve.pionts: unknown key (did you mean moe_curve.points?)"]),
        ("anchors.ddtree.sourc[0]=1", ["anchors.ddtree.sourc: unknown key (expected a key that holds a list)"]),
        ('ranges.moe_curve.points[1].ms={"relative": 0.1, "source": "s"}', ["a new range goes in with --set 'ranges="]),
        (
            "ranges.native_engine.overhead_cut.lo[0]=1",
            ["overhead_cut.lo: unknown key (expected a key that holds a list)"],
        ),
        ("novalue", ["--set novalue: expected KEY.PATH=VALUE"]),
        ("=3", ["--set =3: expected KEY.PATH=VALUE"]),
        (
            "stronger_drafter.accept=[12,40]",
            ["stronger_drafter.accept[1]: 40 exceeds the tree's limit block+1 = 17 (the smaller of"],
        ),
    ],
)
def test_bad_overrides(capsys: pytest.CaptureFixture[str], option: str, fragments: list[str]) -> None:
    for fmt in ("table", "json"):
        assert_clean_error(run_main(capsys, "--set", option, "--format", fmt), *fragments)


def test_set_and_ranges_with_dotted_keys(capsys: pytest.CaptureFixture[str]) -> None:
    """The keys of `ranges` hold dots; --set finds the longest existing key."""
    run = run_main(capsys, "--set", "ranges.native_engine.overhead_cut.low=0.3", "--sensitivity", "--format", "json")
    row = next(r for r in run.json()["sensitivity"]["rows"] if r["path"] == "native_engine.overhead_cut")
    assert row["low"] == 0.3


def test_a_range_on_a_curve_point_is_set_and_swept_by_its_key(
    capsys: pytest.CaptureFixture[str], write_calibration: Callable[..., Path]
) -> None:
    """A key of `ranges` may hold an index too: 'moe_curve.points[1].ms' is one key, found whole. A sweep of a
    range or of a logged measurement is refused: no scenario at any point reads it (a sweep shows no band), and
    --measured's would be replaced unseen."""
    doc = default_doc()
    doc["ranges"]["moe_curve.points[1].ms"] = {"relative": 0.1, "source": "x"}
    path = str(write_calibration(doc))
    run = run_main(capsys, "--calibration", path, "--set", "ranges.moe_curve.points[1].ms.relative=0.2",
                   "--sensitivity", "--format", "json")  # fmt: skip
    row = next(r for r in run.json()["sensitivity"]["rows"] if r["path"] == "moe_curve.points[1].ms")
    assert (row["low"], row["high"]) == pytest.approx((8.85 * 0.8, 8.85 * 1.2), rel=1e-12)
    run = run_main(capsys, "--calibration", path, "--sweep", "ranges.moe_curve.points[1].ms.relative=0.1,0.3")
    assert_clean_error(run, "ranges.moe_curve.points[1].ms.relative: a range (for the band and --sensitivity) moves no")
    run = run_main(capsys, "--calibration", str(MEASURED), "--sweep",
                   "measurements[0].tok_s=400,410")  # fmt: skip
    for documents in ("note=a,b", "stronger_drafter.accept_source=a,b", "sglang.max_budget_source=a,b"):
        told = "a text that documents a value moves no scenario, and a sweep shows only scenarios"
        assert_clean_error(run_main(capsys, "--sweep", documents), f"--sweep {documents}: ", told)
    told = "schema_version: the calibration's schema version moves no scenario"
    assert_clean_error(run_main(capsys, "--sweep", "schema_version=1,1"), "--sweep schema_version=1,1: ", told)
    told = "measurements[0].tok_s: a logged measurement moves no scenario, and a sweep shows only scenarios"
    assert_clean_error(run, f"--sweep measurements[0].tok_s=400,410: {told}; expected a key the estimate reads")


# --- Sweeps --------------------------------------------------------------------------------


def test_parse_sweep_range_includes_stop() -> None:
    sweep = eb.parse_sweep("native_engine.overhead_cut=0.2:0.6:0.1")
    assert sweep.values == pytest.approx((0.2, 0.3, 0.4, 0.5, 0.6), rel=1e-15)
    assert eb.parse_sweep("a=0:1:0.3").values == pytest.approx((0.0, 0.3, 0.6, 0.9), rel=1e-15)  # 1.0 not on a step
    assert eb.parse_sweep("a=3:1:-1").values == (3.0, 2.0, 1.0)
    whole = eb.parse_sweep("stronger_drafter.budget=16:64:16").values
    assert whole == (16, 32, 48, 64) and all(isinstance(v, int) for v in whole)  # shown as 16, not 16.0
    assert eb.parse_sweep("a=1,2.5,[3]").values == (1, 2.5, [3])
    assert eb.parse_sweep("hardware.target.name=B200,H200").values == ("B200", "H200")


@pytest.mark.parametrize(
    ("spec", "values"),
    [
        ('"x,y",z', ("x,y", "z")),  # a comma inside a JSON string is the string's
        ('"x\\",y",z', ('x",y', "z")),  # and so is one after an escaped quote
        ('"x,y,z', ('"x', "y", "z")),  # not a JSON string: texts up to each comma, as --set takes them
        ('5",B200', ('5"', "B200")),  # a quote inside a text opens nothing
        ('[12, 14],"a,b" , {"c": [1, 2]},z', ([12, 14], "a,b", {"c": [1, 2]}, "z")),
    ],
)
def test_a_list_of_texts_splits_at_the_commas_between_items(spec: str, values: tuple[object, ...]) -> None:
    assert eb.parse_sweep(f"hardware.target.name={spec}").values == values


def test_minus_zero_reads_as_zero(capsys: pytest.CaptureFixture[str]) -> None:
    """-0.0 is 0: a cut of -0 showed as "-0" in the headline, the sensitivity table, --explain and a sweep."""
    assert [str(v) for v in eb.parse_sweep("a=-0.0,0.1").values + eb.parse_sweep("a=-0.0:0.1:0.1").values] == [
        "0.0", "0.1", "0.0", "0.1"
    ]  # fmt: skip
    cut = ("--set", "native_engine.overhead_cut=-0.0")
    for args in (
        [*cut, "--sensitivity"], [*cut, "--explain"], ["--sweep", "native_engine.overhead_cut=-0.0,0.1"],
        ["--measured", "current/sglang=303.1", "--all"],  # its error, -0.003%, showed as -0.0%
    ):  # fmt: skip
        out = run_main(capsys, *args).out
        assert out.count("\n") > 10 and not re.search(r"(?<![\w.])-0(?![\d.]*[1-9])", out.split("\n", 2)[2])


@pytest.mark.parametrize(
    ("spec", "values"),
    [  # decimal's usual 28 digits would round the first STOP up to 0.3 and the second down to 0
        ("0:0.29999999999999999999999999999:0.1", (0.0, 0.1, 0.2)),
        ("0.5:0.00000000000000000000000000001:-0.1", (0.5, 0.4, 0.3, 0.2, 0.1)),
        ("0.2:0.2:0.1", (0.2,)),
    ],
)
def test_a_range_never_passes_its_stop(spec: str, values: tuple[float, ...]) -> None:
    assert eb.parse_sweep(f"native_engine.overhead_cut={spec}").values == pytest.approx(values, rel=1e-15)


@pytest.mark.parametrize(
    ("spec", "told"),
    [
        ("1e-999999999:0.5:0.1", "a value of 1e-999999999 is too small for a float and would read as 0"),
        ("1e-1000027:0.5:0.1", "a value of 1e-1000027 is too small for a float"),  # 0 in decimal too: it was taken
        ("0.5:1e-400:-0.1", "a stop of 1e-400 is too small for a float"),
        ("1e-300:0.5:0.1", "values of more than 200 digits; expected START:STOP:STEP whose values hold in 200"),
    ],
)
def test_a_range_whose_steps_decimal_cannot_hold_exactly_is_refused(spec: str, told: str) -> None:
    with pytest.raises(eb.CalibrationError, match=told):
        eb.parse_sweep(f"native_engine.overhead_cut={spec}")


def test_a_range_of_exactly_the_most_points_is_allowed() -> None:
    """0:0.8999955:9e-06 is 99,999.5 steps: 100,000 values, the limit, and not one more."""
    assert len(eb.parse_sweep("native_engine.overhead_cut=0:0.8999955:9e-06").values) == eb.MAX_SWEEP_POINTS
    with pytest.raises(eb.CalibrationError, match="100,001 values; expected at most 100,000"):
        eb.parse_sweep("native_engine.overhead_cut=0:0.9:9e-06")


def test_sweep_of_overhead_cut(capsys: pytest.CaptureFixture[str]) -> None:
    """At a 20% cut the stronger drafter on the native engine gives about 675-900 tok/s at accept 12-16:
    1000 * 12 / (5.50125 + 0.8 * 15.383081) = 673.9, and 16 gives 898.5."""
    run = run_main(capsys, "--sweep", "native_engine.overhead_cut=0.2:0.6:0.1", "--format", "json")
    points = run.json()["sweep"]
    assert [p["values"]["native_engine.overhead_cut"] for p in points] == pytest.approx([0.2, 0.3, 0.4, 0.5, 0.6])
    first = {(s["drafter"], s["pipeline"], s["accept"]): s for s in points[0]["scenarios"]}
    assert first["stronger", "native", 12]["tok_s"] == pytest.approx(native_tok_s(12, 0.2), rel=1e-12)
    assert first["stronger", "native", 12]["tok_s"] == pytest.approx(675, rel=0.01)
    assert first["stronger", "native", 16]["tok_s"] == pytest.approx(900, rel=0.01)
    for point in points:
        assert len(point["scenarios"]) == 8
        for s in point["scenarios"]:
            assert s["moe_ms"] + s["attn_base_ms"] + s["spec_ms"] == s["step_ms"]
    # the middle point is the default calibration
    assert points[2]["scenarios"] == run.json()["scenarios"]


def test_two_sweeps_make_a_grid(capsys: pytest.CaptureFixture[str]) -> None:
    run = run_main(
        capsys,
        "--sweep",
        "native_engine.overhead_cut=0.2,0.4",
        "--sweep",
        "stronger_drafter.spec_scale=1.5:2:0.25",
        "--format",
        "json",
    )
    values = [p["values"] for p in run.json()["sweep"]]
    assert values == [
        {"native_engine.overhead_cut": cut, "stronger_drafter.spec_scale": scale}
        for cut in (0.2, 0.4)
        for scale in (1.5, 1.75, 2.0)
    ]


def test_a_sweep_warns_of_its_points_only(
    capsys: pytest.CaptureFixture[str], write_calibration: Callable[..., Path]
) -> None:
    """The calibration under a sweep is never printed: its own warnings would describe no row."""
    doc = default_doc()
    doc["hardware"]["target"]["name"] = "H200"  # in the file: a --set of a swept key is refused
    run = run_main(capsys, "--calibration", str(write_calibration(doc)), "--sweep", "hardware.target.name=B300,B300")
    assert run.code == 0 and run.err == ""
    run = run_main(capsys, "--set", "hardware.target.name=H200", "--sweep", "native_engine.overhead_cut=0.1,0.2")
    assert run.code == 0 and run.err.count("\n") == 1 and "at 2 of 2 sweep points" in run.err
    run = run_main(capsys, "--sweep", "moe_curve.points[2].m=10,40", "--set", "stronger_drafter.budget=100")
    assert "M = 101 lies outside the curve at some points." in run.out  # not the file's curve: it was swept


def test_a_sweep_marks_the_steps_a_pipeline_cannot_run(capsys: pytest.CaptureFixture[str]) -> None:
    """As the drafters' tables say "cannot run [1]", a sweep's table marks the step of each point where the
    pipeline cannot run the tree, and its notes say why and at how many points; a reason that differs, apart."""
    sweep = ["--sweep", "sglang.max_budget=8,16,32", "--format", "markdown"]
    lines = run_main(capsys, *sweep).out.splitlines()
    rows = [line.split("|")[1:-1] for line in lines if line.startswith("| ") and line.split("|")[1].strip().isdigit()]
    header = next(line for line in lines if "stronger/sglang step ms" in line).split("|")[1:-1]
    at = next(i for i, cell in enumerate(header) if "stronger/sglang step ms" in cell)
    assert [row[at].strip() for row in rows] == ["20.88\\* \\[1\\]", "20.88\\* \\[2\\]", "20.88\\*"]
    assert all("[" not in cell for row in rows for i, cell in enumerate(row) if i != at)  # current/sglang runs
    notes = [line for line in lines if line.startswith("- \\[")]
    assert notes == [  # the file's reason is of its budget of 8: "above 16: ... fail above budget 8" is not told
        "- \\[1\\] at 1 of 3 points: SGLang cannot verify a budget above 8.",
        "- \\[2\\] at 1 of 3 points: SGLang cannot verify a budget above 16.",
    ]  # fmt: skip
    note = run_main(capsys, "--set", "sglang.max_budget=16", "--format", "markdown").out
    assert "- \\[1\\] SGLang cannot verify a budget above 16.\n" in note
    assert (  # the list still gives the file's reason, beside the budget it was given for
        "  - `max_budget` = 16: set by --set sglang.max\\_budget=16; the file said 8 (its verify CUDA graphs fail "
        "above budget 8 on sm\\_103 (B300), as measured)" in note
    )
    dotted = run_main(capsys, "--sweep", "native_engine.overhead_cut=0.2", "--set", "sglang.max_budget_source=fails.")
    single = run_main(capsys, "--set", "sglang.max_budget_source=fails.").out  # a reason's own full stop, once
    assert "[1] at 1 of 1 point: SGLang cannot verify a budget above 8: fails.\n" in dotted.out
    assert "[1] SGLang cannot verify a budget above 8: fails.\n" in single
    runs = run_main(capsys, "--sweep", "native_engine.overhead_cut=0.2,0.4", "--set", "sglang.max_budget=32").out
    assert "[1]" not in runs and "cannot" not in runs


def test_the_first_line_names_the_sweeps_so_that_it_says_how_to_run_again(
    capsys: pytest.CaptureFixture[str],
) -> None:
    grid = ["--sweep", "native_engine.overhead_cut=0.2,0.3", "--sweep", "stronger_drafter.spec_scale=1.5:2:0.25"]
    swept = "swept: native_engine.overhead_cut=0.2,0.3 by stronger_drafter.spec_scale=1.5:2:0.25"
    first, _ = run_main(capsys, *grid).out.split("\nKimi K2.x + DDTree", 1)  # the first line, wrapped
    assert flat(first).startswith("estimate_b300 1.0.0; calibration.json, sha256 ")
    assert flat(first).endswith(f"; overrides: none; {swept}")
    assert run_main(capsys, *grid, "--format", "markdown").out.splitlines()[0].endswith(f"; {swept}`")
    assert "swept" not in run_main(capsys).out  # no sweep, no label


def test_a_sweep_of_the_target_does_not_title_one_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    title = "Kimi K2.x + DDTree at concurrency 1 on each target GPU swept"
    for sweep in ("hardware.target.name=H200,B300", 'hardware.target={"name": "H200", "mem_bandwidth_tb_s": 4.8}'):
        assert title in run_main(capsys, "--sweep", sweep).out.splitlines()
        assert f"## {title}" in run_main(capsys, "--sweep", sweep, "--format", "markdown").out
    cut = run_main(
        capsys, "--sweep", "native_engine.overhead_cut=0.3", "--sweep", "hardware.target.mem_bandwidth_tb_s=7"
    )
    assert "Kimi K2.x + DDTree at concurrency 1 on B300" in cut.out.splitlines()


def test_a_swept_text_is_taken_as_set_takes_it(capsys: pytest.CaptureFixture[str]) -> None:
    esc = '"' + "B\\u001b" * 100 + '"'  # 200 characters, 500 once escaped: within the limit as written
    for option in ("--set", "--sweep"):
        run = run_main(capsys, option, f"hardware.target.name={esc}" + (",B300" if option == "--sweep" else ""))
        assert run.code == 0, run.err
    run = run_main(capsys, "--sweep", 'hardware.target.name="a:b:c"', "--format", "json")
    assert run.code == 0 and [p["values"] for p in run.json()["sweep"]] == [{"hardware.target.name": "a:b:c"}]


def test_a_sweep_of_one_point_counts_it_in_the_singular(capsys: pytest.CaptureFixture[str]) -> None:
    run = run_main(capsys, "--sweep", "hardware.target.name=H200", "--no-chart")
    out = flat(run.out)
    assert "Sweep: 1 point " in out and "[1] at 1 of 1 point: SGLang cannot verify a budget above 8" in out
    assert run.err.startswith("estimate_b300: warning: at 1 of 1 sweep point (the first at hardware.target.name=H200)")


def test_sweep_table(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_main(capsys, "--sweep", "native_engine.overhead_cut=0.2,0.6").out
    assert "Sweep: 2 points" in out
    lines = out.splitlines()
    row = next(line for line in lines if line.lstrip().startswith("0.2 "))  # a number, right-aligned
    assert f"{native_tok_s(14, 0.2):.0f}" in row.split()
    assert "stronger/native" in out and "step ms" in out


@pytest.mark.parametrize("fmt", ["table", "markdown", "json", "csv"])
def test_a_sweep_estimates_each_point_once(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    """The check that runs before any output holds what it estimated: 40 more points, 40 more estimates."""
    on_cpus(monkeypatch, 1)  # in this process, where the calls are counted
    calls = counting(monkeypatch, eb, "scenarios")
    made = []
    for step in ("0.01", "0.005"):  # 41 points, then 81
        before = len(calls)
        run_main(capsys, "--sweep", f"native_engine.overhead_cut=0.1:0.5:{step}", "--format", fmt)
        made.append(len(calls) - before)
    assert made[1] - made[0] == 40


@pytest.mark.parametrize("fmt", ["table", "json", "csv"])
def test_a_sweep_past_what_it_holds_estimates_the_rest_again(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    """81 points in chunks of 10. Held up to three chunks' bytes, the other 51 points are estimated again;
    held not at all, all 81; the output is the same each time."""
    on_cpus(monkeypatch, 1)
    monkeypatch.setattr(eb, "SWEEP_CHUNK", 80)  # scenarios: 10 points of 8
    sweep = "native_engine.overhead_cut=0.1:0.5:0.005"
    doc = default_doc()
    held = eb.plan_sweep(doc, eb.parse_calibration(doc), [eb.parse_sweep(sweep)], "x", fmt == "table").held
    assert len(held) == 9 and all(held)
    calls = counting(monkeypatch, eb, "scenarios")
    runs, made = [], []
    for limit in (eb.SWEEP_HELD, sum(map(len, held[:3])), 0):
        monkeypatch.setattr(eb, "SWEEP_HELD", limit)
        before = len(calls)
        runs.append(run_main(capsys, "--sweep", sweep, "--format", fmt))
        made.append(len(calls) - before)
    assert [n - made[0] for n in made] == [0, 51, 81]
    assert runs[0].code == 0 and runs[0] == runs[1] == runs[2]


@pytest.mark.parametrize(
    "sweep",
    ["native_engine.overhead_cut=0.1:0.5:0.005", "stronger_drafter.budget=16:96:1", "moe_curve.points[2].ms=4:6:0.05",
     "stronger_drafter.accept=[12,14],[11],[10,13,16]"],
)  # fmt: skip
def test_a_sweep_makes_no_reference_cycles(monkeypatch: pytest.MonkeyPatch, sweep: str) -> None:
    """The workers run without the garbage collector: the check and every output of the points free all they make,
    the model's cached functions included (once the modules they import are in)."""
    on_cpus(monkeypatch, 1)
    doc = default_doc()
    cal = eb.parse_calibration(doc)
    csv_points = functools.partial(eb._csv_points, provenance=["file"])

    def every_output() -> int:
        points = 0
        for table in (True, False):
            plan = eb.plan_sweep(doc, cal, [eb.parse_sweep(sweep)], "x", table)
            points += sum(1 for _ in plan.rows()) if table else len("".join(plan.in_chunks(eb._json_points)))
            points += len("".join(plan.in_chunks(csv_points)))
        return points

    assert every_output() > 10_000  # it ran, and imported what it imports
    for cached in vars(eb).values():  # a worker's caches hold the parent's calibration, not the sweep's points
        getattr(cached, "cache_clear", lambda: None)()
    gc.collect()
    gc.disable()
    try:
        every_output()
        found = gc.collect()
    finally:
        gc.enable()
    assert found == 0


def test_a_sweep_table_shows_what_json_gives(capsys: pytest.CaptureFixture[str]) -> None:
    """A grid whose second sweep changes the stronger drafter's accept lengths, and so the table's columns."""
    accepts = "stronger_drafter.accept=[12,14],[11],[12,14]"
    sweeps = ["--sweep", "native_engine.overhead_cut=0.2,0.4", "--sweep", accepts]
    points = run_main(capsys, *sweeps, "--format", "json").json()["sweep"]
    table = run_main(capsys, *sweeps, "--tablefmt", "tsv", "--no-chart").out.splitlines()
    start = next(i for i, line in enumerate(table) if line.startswith("native_engine.overhead_cut\t"))
    names, *rows = ([cell.strip() for cell in line.split("\t")] for line in table[start : start + 7])
    assert len(rows) == len(points) == 6
    for row, point in zip(rows, points, strict=True):
        cells = dict(itertools.zip_longest(names, row, fillvalue=""))  # TSV drops a row's empty cells at its end
        tok_s = {f"{s['drafter']}/{s['pipeline']}@{s['accept']:g} tok/s": s for s in point["scenarios"]}
        assert {name for name, cell in cells.items() if cell and "tok/s" in name} == tok_s.keys()
        for name, s in tok_s.items():
            assert cells[name] == f"{s['tok_s']:.0f}"
            mark = ("*" if s["moe_extrapolated"] else "") + ("" if s["runnable"] else " [1]")  # one reason: [1]
            assert cells[f"{s['drafter']}/{s['pipeline']} step ms"] == f"{s['step_ms']:.2f}{mark}"


@pytest.mark.parametrize(
    ("option", "fragments"),
    [
        ("native_engine.overhead_cut=0.2:0.6:0", ["a step of 0 never goes from 0.2 to 0.6"]),
        ("native_engine.overhead_cut=0.6:0.2:0.1", ["a step of 0.1 never goes from 0.6 to 0.2"]),
        ("native_engine.overhead_cut=a:b:c", ["START:STOP:STEP with three finite decimal numbers in digits 0-9"]),
        # as --set refuses them: Decimal reads 1_6 as 16, and digits of other scripts
        ("stronger_drafter.budget=1_6:1_6:1", ["three finite decimal numbers in digits 0-9, e.g. 0.2:0.6:0.1\n"]),
        ("stronger_drafter.budget=\u0661\u0666:\u0661\u0666:\u0661", ["three finite decimal numbers in digits 0-9"]),
        ("native_engine.overhead_cut=0:1e9:1", ["1,000,000,001 values; expected at most 100,000"]),
        ("native_engine.overhead_cut=", ["expected V1,V2"]),
        ("overhead_cut", ["expected KEY.PATH=VALUE"]),
        ("native_engine.overhead_cut=0.2,1.5", ["at --sweep native_engine.overhead_cut=1.5", "got 1.5"]),
        # the point as typed, as --set names its value: not as the number or text it reads as
        ("native_engine.overhead_cut=0.1, 1e400", ["overhead_cut=0.1, 1e400: 1e400 is too large for a float"]),
        ("stronger_drafter.accept[1]=1e-320", ["at --sweep stronger_drafter.accept[1]=1e-320: "]),
        ('hardware.target.name="B2,00", ""', ['at --sweep hardware.target.name="": ', "is blank"]),
        ('hardware.target.name=B200,"\\u200b"', ['at --sweep hardware.target.name="\\u200b": ', "is blank"]),
        ("native_engine.overhead_cut=0.2, [0.3, 0.4]", ["at --sweep native_engine.overhead_cut=[0.3, 0.4]: "]),
        ("native_engine.overhead_cut=0.1, abc ,0.2", ['cut= abc : native_engine.overhead_cut: got a string " abc "']),
        ("stronger_drafter.spec_scale=\u00a01:2:1", ["three finite decimal numbers in digits 0-9"]),  # as --set
        ("stronger_drafter.spec_scale=1:1e1000000:1", ["START:STOP:STEP with numbers of sensible size\n"]),
        ("native_engine.overhead_cutt=0.2", ["native_engine.overhead_cutt: unknown key"]),
    ],
)
def test_bad_sweeps(capsys: pytest.CaptureFixture[str], option: str, fragments: list[str]) -> None:
    for fmt in ("table", "json"):
        assert_clean_error(run_main(capsys, "--sweep", option, "--format", fmt), *fragments)


def test_too_large_a_grid(capsys: pytest.CaptureFixture[str], write_calibration: Callable[..., Path]) -> None:
    run = run_main(capsys, "--sweep", "native_engine.overhead_cut=0:0.9:0.0001", "--sweep", "a.b=1:200:1")
    told = "the grid has 1,800,200 points of up to 8 scenarios, 14,401,600 in all; expected at most 100,000 points"
    assert_clean_error(run, f"{told} and 1,000,000 scenarios")


def test_a_sweep_is_bounded_by_the_curve_points_its_cross_check_reads_again(
    capsys: pytest.CaptureFixture[str], write_calibration: Callable[..., Path]
) -> None:
    """A swept value that changes what the physical cross-check reads of the curve (the reference GPU, the model,
    the TP, the points; a point's own time under the experts fit) has it read every curve point again, once for
    each value it takes: at most 300,000 in all, so that a 1,000-point curve sweeps 300 such values, and the
    shipped 3-point curve 100,000, as before. Another sweep beside it costs nothing more while the caches hold
    the curves of the first (64), and sweeps of the target, or without a `model` section, read no point again."""
    doc = default_doc()
    doc["moe_curve"]["points"] = [{"m": m, "ms": 0.5 + 0.02 * m} for m in range(1, 1001)]
    path = str(write_calibration(doc))
    run = run_main(capsys, "--calibration", path, "--sweep", "hardware.reference.mem_bandwidth_tb_s=1:1.3:0.001")
    told = "--sweep: the physical cross-check would read all 1,000 curve points again 301 times, 301,000 in all"
    assert_clean_error(run, told, "expected at most 300,000: fewer values, or fewer curve points")

    def rereads(document: dict[str, Any], *sweeps: str) -> tuple[int, int]:
        return eb.curve_rereads(eb.parse_calibration(document), [eb.parse_sweep(s) for s in sweeps])

    assert rereads(doc, "model.hidden_size=7000,7100") == rereads(doc, "moe_curve.tp=4,8") == (1000, 2)
    assert rereads(doc, "moe_curve.points[3].ms=1:1.999:0.001") == (0, 0)  # that point alone, on a line
    experts = {**doc, "moe_curve": {**doc["moe_curve"], "fit": "experts"}}
    assert rereads(experts, "moe_curve.points[3].ms=1:1.999:0.001") == (1000, 1000)  # the fit reads them all
    assert rereads(doc, "hardware.target.mem_bandwidth_tb_s=7,8", "native_engine.overhead_cut=0,0.1") == (0, 0)
    grid = ["hardware.reference.mem_bandwidth_tb_s=1.7,1.8", "native_engine.overhead_cut=0:0.4999:0.0001"]
    assert rereads(doc, *grid) == rereads(doc, *grid[::-1]) == (1000, 2)  # two values, held in the caches
    assert rereads(doc, "native_engine.overhead_cut=0,0.1", "moe_curve.tp=1:65:1") == (1000, 130)  # 65 are not
    shipped = default_doc()
    assert rereads(shipped, "hardware.reference.mem_bandwidth_tb_s=1:1.99999:0.00001") == (3, 100_000)
    curves = ",".join(json.dumps([{"m": m, "ms": m} for m in range(1, n + 1)]) for n in (2, 5))
    assert rereads(shipped, f"moe_curve.points={curves}") == (5, 2)  # the longest list a swept value gives
    two = ",".join(json.dumps([{"m": 1, "ms": 1.15}, {"m": 9, "ms": ms}]) for ms in (8.85, 8.9))
    assert rereads(doc, f"moe_curve.points={two}", "model.layers=2:301:1") == (2, 600)  # not the file's 1,000
    grid = ["--sweep", f"moe_curve.points={two}", "--sweep", "model.layers=2:301:1"]
    run = run_main(capsys, "--calibration", path, *grid, "--format", "json")
    assert run.code == 0 and len(run.json()["sweep"]) == 600
    del shipped["model"]
    assert rereads(shipped, "hardware.reference.mem_bandwidth_tb_s=1,2") == (0, 0)
    assert rereads(shipped, 'model={"layers": 61}') == (3, 1)  # a sweep that gives the model gives the cross-check


def test_a_sweep_is_bounded_by_its_scenarios_too(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, write_calibration: Callable[..., Path]
) -> None:
    """A point of 64 accept lengths has 130 scenarios: at most 7,692 such points, and a worker takes 61 at a time,
    so that what it holds at once (a chunk's JSON) stays the size of 1,000 points of 8. A sweep of accept lists is
    counted at the longest it gives."""
    doc = default_doc()
    doc["stronger_drafter"]["accept"] = [4.0 + i * 0.2 for i in range(64)]
    path = str(write_calibration(doc))
    run = run_main(capsys, "--calibration", path, "--sweep", "native_engine.overhead_cut=0:0.7693:0.0001")
    assert_clean_error(run, "the grid has 7,694 points of up to 130 scenarios, 1,000,220 in all; expected at most")
    cal = eb.parse_calibration(doc)
    sweep = eb.parse_sweep("native_engine.overhead_cut=0:0.7691:0.0001")
    plan = eb.plan_sweep(doc, cal, [sweep], "x")
    assert (plan.size, plan.chunk, len(plan.held)) == (7692, 61, 127)
    shipped = default_doc()
    cal = eb.parse_calibration(shipped)
    assert eb.most_scenarios(cal, [sweep]) == 8
    assert eb.most_scenarios(cal, [eb.parse_sweep("stronger_drafter.accept=[12],[14]")]) == 4  # not the file's 3
    assert eb.most_scenarios(cal, [eb.parse_sweep("stronger_drafter.accept=[12],[10,12,14,16,17]")]) == 12
    whole = eb.parse_sweep('stronger_drafter={"accept": [10, 11, 12, 13, 14, 15, 16, 17]},3')
    assert eb.most_scenarios(cal, [whole]) == 18  # a value without a list there fails its own point
    long = eb.parse_calibration(doc)  # 64 accept lengths, which a sweep of the list replaces at every point
    assert eb.most_scenarios(long, [eb.parse_sweep("stronger_drafter.accept=[12],[14]")]) == 4
    lists, cuts = "stronger_drafter.accept=[12,14,16],[13,15,17]", "native_engine.overhead_cut=0:0.3999:0.0001"
    csv = run_main(capsys, "--sweep", lists, "--sweep", cuts, "--format", "csv").out
    assert csv.count("\n") == 1 + 8000 * 8  # 8,000 points, past the 7,692 a count of 130 a point allowed


# --- Sensitivity and the band -------------------------------------------------------------


def test_each_corner_of_the_band_is_what_the_calibration_gives_there() -> None:
    """The band reaches each corner from the one before; at every corner that is the estimate made afresh."""
    doc = default_doc()
    doc["ranges"] |= {f"moe_curve.points[{i}].ms": {"relative": 0.2, "source": "x"} for i in (1, 2)}
    cal = eb.parse_calibration(doc)
    spec = eb.ScenarioSpec("stronger", "native", None)
    ends = [[(eb.parse_path(r.path), end) for end in (r.low, r.high)] for r in cal.ranges or ()]
    afresh = [eb.scenario_for(eb.recalibrate(doc, cal, list(c))[1], spec, "--scenario").tok_s
              for c in itertools.product(*ends)]  # fmt: skip
    band = eb.sensitivity(doc, cal, spec)
    assert band.combinations == len(afresh) == 256
    assert (band.tok_s_min, band.tok_s_max) == (min(afresh), max(afresh))  # exactly: the same arithmetic


def test_default_sensitivity(capsys: pytest.CaptureFixture[str]) -> None:
    """stronger/native@14 (the median of 12, 14, 16). overhead_cut 0.2 -> 786.2, 0.6 -> 1201.3 tok/s."""
    sens = run_main(capsys, "--sensitivity", "--format", "json").json()["sensitivity"]
    assert sens["scenario"] == "stronger/native@14"
    assert sens["tok_s"] == pytest.approx(native_tok_s(14, 0.4), rel=1e-12)
    rows = {r["path"]: r for r in sens["rows"]}
    assert set(rows) == {
        "native_engine.overhead_cut",
        "stronger_drafter.spec_scale",
        "stronger_drafter.attn_base_scale",
        "hardware.target.mem_bandwidth_tb_s",
        "anchors.ar_tok_s",
        "anchors.ddtree.tok_s",
    }
    cut = rows["native_engine.overhead_cut"]
    assert (cut["low"], cut["high"]) == (0.2, 0.6)
    assert cut["tok_s_at_low"] == pytest.approx(native_tok_s(14, 0.2), rel=1e-12)
    assert cut["tok_s_at_low"] == pytest.approx(786.2, abs=0.05)
    assert cut["tok_s_at_high"] == pytest.approx(1201.3, abs=0.05)
    spec = rows["stronger_drafter.spec_scale"]  # 2.0: overhead 1.03 * ATTN_BASE + 2 * SPEC
    assert spec["tok_s_at_high"] == pytest.approx(native_tok_s(14, 0.4, overhead=1.03 * ATTN_BASE + 2 * SPEC))
    ar = rows["anchors.ar_tok_s"]
    assert (ar["low"], ar["high"]) == (pytest.approx(133 * 0.97), pytest.approx(133 * 1.03))
    swings = [abs(r["tok_s_at_high"] - r["tok_s_at_low"]) for r in sens["rows"]]
    assert swings == sorted(swings, reverse=True)
    band = sens["band"]
    assert band["combinations"] == 64
    every = [v for r in sens["rows"] for v in (r["tok_s_at_low"], r["tok_s_at_high"])]
    assert band["tok_s_min"] <= min(every) and max(every) <= band["tok_s_max"]


def test_band_of_a_single_range_is_its_two_ends(capsys: pytest.CaptureFixture[str], write_calibration) -> None:  # type: ignore[no-untyped-def]
    doc = default_doc()
    doc["ranges"] = {"native_engine.overhead_cut": {"low": 0.2, "high": 0.6, "source": "test"}}
    run = run_main(capsys, "--calibration", str(write_calibration(doc)), "--sensitivity", "--format", "json")
    band = run.json()["sensitivity"]["band"]
    assert band == {
        "tok_s_min": pytest.approx(native_tok_s(14, 0.2), rel=1e-12),
        "tok_s_max": pytest.approx(native_tok_s(14, 0.6), rel=1e-12),
        "combinations": 2,
    }


def test_sensitivity_without_a_ranges_section_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], write_calibration: Callable[[object], Path]
) -> None:
    """The ranges live in the calibration, nowhere else: without them --sensitivity has nothing to vary."""
    doc = default_doc()
    del doc["ranges"]
    path = str(write_calibration(doc))
    assert run_main(capsys, "--calibration", path).code == 0
    assert_clean_error(run_main(capsys, "--calibration", path, "--sensitivity"), "ranges: missing", "--sensitivity")


@pytest.mark.parametrize("fmt", ["table", "markdown", "json", "csv"])
@pytest.mark.parametrize("ranges", ["ranges={}", 'ranges={"source": "none yet"}'])
def test_sensitivity_over_a_ranges_section_that_lists_none_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], ranges: str, fmt: str
) -> None:
    """Found by an attack: a table of no rows was a traceback from tabulate."""
    assert run_main(capsys, "--set", ranges, "--format", fmt).code == 0  # without --sensitivity, only no band
    run = run_main(capsys, "--set", ranges, "--sensitivity", "--format", fmt)
    if fmt == "csv":  # CSV refuses --sensitivity before it reads the ranges
        assert run.code == 2
    else:
        assert_clean_error(run, "ranges: lists no range; --sensitivity varies the assumptions listed there")


def test_relative_range_follows_the_value_in_force(capsys: pytest.CaptureFixture[str]) -> None:
    sens = run_main(capsys, "--set", "anchors.ar_tok_s=140", "--sensitivity", "--format", "json").json()
    row = next(r for r in sens["sensitivity"]["rows"] if r["path"] == "anchors.ar_tok_s")
    assert (row["low"], row["high"], row["value"]) == (pytest.approx(135.8), pytest.approx(144.2), 140)


def test_sensitivity_table_explains_the_band(capsys: pytest.CaptureFixture[str]) -> None:
    out = flat(run_main(capsys, "--sensitivity", "--set", "native_engine.overhead_cut=0.7").out)
    assert "Sensitivity of stronger/native@14" in out
    assert "a what-if range, not a statistical interval" in out
    assert out.count("native_engine.overhead_cut = 0.7 is outside 0.2 to 0.6") == 1  # beside the band, once
    assert "lies outside its range" not in out
    out = flat(run_main(capsys, "--sensitivity", "--set", "native_engine.overhead_cut=0.6000000001").out)
    assert "native_engine.overhead_cut = 0.6000000001 is outside 0.2 to 0.6." in out  # not "0.6 is outside"
    ends = ["--set", "ranges.native_engine.overhead_cut.low=0.2000004", "--set", "native_engine.overhead_cut=0.2000003"]
    out = flat(run_main(capsys, *ends).out)  # the end too keeps its digits: not "0.2000003 is outside 0.2 to 0.6"
    assert "native_engine.overhead_cut = 0.2000003 is outside 0.2000004 to 0.6." in out
    near_1 = ["--set", 'ranges.native_engine.overhead_cut={"low": 0.2, "high": 0.9999999, "source": "x"}']
    out = flat(run_main(capsys, *near_1, "--set", "native_engine.overhead_cut=0.1").out)  # an end of 1 is refused
    assert "native_engine.overhead_cut = 0.1 is outside 0.2 to 0.9999999." in out
    table = run_main(capsys, *ends, "--sensitivity", "--no-chart").out  # and so do the table and --explain
    assert re.search(r"\nnative_engine\.overhead_cut +0\.2000003 +0\.2000004 to 0\.6 +786 +1201 +415 ", table)
    explain = run_main(capsys, *ends, "--sensitivity", "--explain").out
    assert "  native_engine.overhead_cut: 0.2000003 in force, range 0.2000004 to 0.6 (" in explain
    assert "; at 0.2000004: 786 tok/s, at 0.6: 1201 tok/s;" in explain


@pytest.mark.parametrize("fmt", ["table", "markdown", "json"])
def test_a_sweep_and_a_sensitivity_do_not_go_together(capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    """--sensitivity studies one calibration, and beside a sweep it studied one that no point used (cut 0.4 here,
    around which its band was built): in every format that is a usage error, not a table of values no point had."""
    run = run_main(capsys, "--sweep", "native_engine.overhead_cut=0.1,0.2", "--sensitivity", "--format", fmt)
    assert_clean_error(run, "usage: --sensitivity and --sweep cannot be combined: --sensitivity studies one")


def test_a_range_on_the_median_accept_moves_the_median_scenario(
    capsys: pytest.CaptureFixture[str], write_calibration: Any
) -> None:
    """accept[1] is the median 14: from 10 to 17 the scenario is the one at 10 and at 17, as --set gives them."""
    doc = default_doc()
    doc["ranges"] = {"stronger_drafter.accept[1]": {"low": 10, "high": 17, "source": "x"}}
    (row,) = run_main(capsys, "--calibration", str(write_calibration(doc)), "--sensitivity", "--format", "json").json()[
        "sensitivity"
    ]["rows"]
    at = {a: find(eb.estimate(eb.parse_calibration(eb.set_path(doc, ("stronger_drafter", "accept", 1), a))),
                  "stronger", "native", a).tok_s for a in (10, 17)}  # fmt: skip
    assert (row["tok_s_at_low"], row["tok_s_at_high"]) == (at[10], at[17])


def test_the_headline_band_is_the_whole_band_beside_sensitivity(
    capsys: pytest.CaptureFixture[str], write_calibration: Any
) -> None:
    """Bandwidth helps where spec_scale is low and slows where it is high (with the cut 0): no one way throughout the
    ranges, so two corners missed the low end (390); a flip of one end of a corner finds it, and the headline alone
    then takes every corner too."""
    doc = default_doc()
    doc["ranges"] = {
        "hardware.target.mem_bandwidth_tb_s": {"low": 4, "high": 12, "source": "x"},
        "stronger_drafter.spec_scale": {"low": 1.0, "high": 5.0, "source": "y"},
        "native_engine.overhead_cut": {"low": 0.0, "high": 0.6, "source": "w"},
    }
    path = str(write_calibration(doc))
    out = flat(run_main(capsys, "--calibration", path, "--sensitivity", "--no-chart").out)
    assert "spans 346 to 1550 tok/s" in out and "Band: 346 to 1550 tok/s over all 8 combinations" in out
    assert "spans 346 to 1550 tok/s" in flat(run_main(capsys, "--calibration", path).out)  # the headline alone


def test_a_named_accept_length_is_held_where_a_range_would_move_the_default_scenario(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With a range on the middle accept length, stronger/native moves with it and stronger/native@14 does not: two
    studies under one label. The headline's band is always the default scenario's, with or without --sensitivity."""
    ranges = {"stronger_drafter.accept[1]": {"low": 13, "high": 17, "source": "x"},
              "native_engine.overhead_cut": {"low": 0.2, "high": 0.6, "source": "y"}}  # fmt: skip
    args = ["--set", f"ranges={json.dumps(ranges)}", "--no-chart"]
    headline = "stronger/native@14 (950 tok/s) spans 730 to 1459 tok/s (-23% / +53%)."
    assert headline in flat(run_main(capsys, *args).out)
    for scenario, band in (("stronger/native", "730 to 1459"), ("stronger/native@14", "786 to 1201")):
        out = flat(run_main(capsys, *args, "--sensitivity", "--scenario", scenario).out)
        assert headline in out and f"Band: {band} tok/s over all 4 combinations" in out
    ranges["stronger_drafter.accept[0]"] = ranges.pop("stronger_drafter.accept[1]")  # not the default's: the same
    args = ["--set", f"ranges={json.dumps(ranges)}", "--no-chart"]
    out = flat(run_main(capsys, *args, "--sensitivity", "--scenario", "stronger/native@14").out)
    assert "(950 tok/s) spans 786 to 1201 tok/s" in out and "Band: 786 to 1201 tok/s over all 4" in out


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        ("stronger/sglang@12", "stronger/sglang@12"),
        ("current/native", "current/native@4.4"),
        ("stronger/native@9.5", "stronger/native@9.5"),
    ],
)
def test_scenario_choice(capsys: pytest.CaptureFixture[str], label: str, expected: str) -> None:
    run = run_main(capsys, "--sensitivity", "--scenario", label, "--format", "json")
    assert run.json()["sensitivity"]["scenario"] == expected


def test_default_scenario_takes_the_lower_middle_accept() -> None:
    doc = default_doc()
    doc["stronger_drafter"]["accept"] = [16, 12, 14, 10]
    cal = eb.parse_calibration(doc)
    assert eb.scenario_for(cal, eb.ScenarioSpec.parse("--scenario", "stronger/native"), "--scenario").accept == 12


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--sensitivity", "--scenario", "strong/native"], ["--scenario strong/native: expected DRAFTER/PIPELINE"]),
        (["--sensitivity", "--scenario", "stronger/native@40"], ["@40: 40 exceeds the tree's limit block+1 = 17"]),
        (["--sensitivity", "--scenario", "stronger/native@x"], ["@x: expected an accept length"]),
        (["--sensitivity", "--scenario", "stronger/native@1_4"], ["stronger/native@1_4: @1_4: expected an accept"]),
        (["--sensitivity", "--scenario", "stronger/native@1e999"], ["@1e999: 1e999 is too large for a float"]),
        (
            ["--measured", "current/native@4.9:budget=16=415"],  # a tree of its own: the file's to log
            ["@4.9:budget=16: expected an accept length, e.g. @14; a run of another block or budget goes in"],
        ),
    ],
)
def test_bad_scenarios(capsys: pytest.CaptureFixture[str], args: list[str], fragments: list[str]) -> None:
    assert_clean_error(run_main(capsys, *args), *fragments)


def test_scenario_needs_sensitivity(capsys: pytest.CaptureFixture[str]) -> None:
    run = run_main(capsys, "--scenario", "stronger/native")
    assert run.code == 2 and run.out == "" and "add --sensitivity" in run.err


BAD_RANGES: list[tuple[dict[str, Any], list[str]]] = [
    (
        {"native_engine.overhead_cutt": {"low": 0.1, "high": 0.2, "source": "x"}},
        ["did you mean native_engine.overhead_cut?"],
    ),
    (
        {"stronger_drafter.budget": {"low": 8, "high": 16, "source": "x"}},
        ["stronger_drafter.budget: is a whole number; a range needs a continuous one"],
    ),
    (
        {"native_engine.overhead_cut": {"low": 0.5, "high": 0.2, "source": "x"}},
        ["overhead_cut.high: got 0.2, below low = 0.5"],
    ),
    (
        {"native_engine.overhead_cut": {"low": 0.2, "high": 1.2, "source": "x"}},
        ["overhead_cut.high: the range reaches 1.2"],
    ),
    ({"native_engine.overhead_cut": {"low": 0.2, "high": 0.3}}, ["overhead_cut.source: missing"]),
    ({"anchors.ar_tok_s": {"relative": 1.5, "source": "x"}}, ["ar_tok_s.relative: got 1.5"]),
    (
        {"anchors.ar_tok_s": {"relative": 0.1, "sourc": "x"}},
        ["ranges.anchors.ar_tok_s.source: missing", "is ranges.anchors.ar_tok_s.sourc a misspelling of it?"],
    ),
    ({"anchors.ddtree.accept": {"low": 1, "high": 12, "source": "x"}}, ["the range reaches 12", "<= 9"]),
    # an end just past a bound is told apart from it, not rounded onto it
    (
        {"native_engine.overhead_cut": {"low": 0.2, "high": 0.19999999999999998, "source": "x"}},
        ["overhead_cut.high: got 0.19999999999999998, below low = 0.2; expected low <= high"],
    ),
    (
        {"stronger_drafter.accept[1]": {"low": 1, "high": 17.0000001, "source": "x"}},
        ["accept[1].high: the range reaches 17.0000001; expected a number >= 1 and <= 17"],
    ),
    (
        {"anchors.ddtree.accept": {"low": 0.9999999, "high": 5, "source": "x"}},
        ["accept.low: the range reaches 0.9999999; expected a number >= 1 and <= 9"],
    ),
]


@pytest.mark.parametrize(("ranges", "fragments"), BAD_RANGES)
def test_bad_ranges(
    capsys: pytest.CaptureFixture[str],
    write_calibration: Callable[[object], Path],
    ranges: dict[str, Any],
    fragments: list[str],
) -> None:
    doc = default_doc()
    doc["ranges"] = ranges
    assert_clean_error(run_main(capsys, "--calibration", str(write_calibration(doc))), "ranges.", *fragments)


def test_range_ends_that_break_the_calibration(capsys: pytest.CaptureFixture[str], write_calibration) -> None:  # type: ignore[no-untyped-def]
    """DDTree at +50% (454.5 tok/s) is still valid, at +60% (484.8 tok/s) SPEC would be negative."""
    doc = default_doc()
    doc["ranges"] = {"anchors.ddtree.tok_s": {"relative": 0.6, "source": "x"}}
    run = run_main(capsys, "--calibration", str(write_calibration(doc)), "--sensitivity")
    assert_clean_error(run, "ranges: at anchors.ddtree.tok_s=484.8", "the measured anchors conflict")


# --- Break-even accept ---------------------------------------------------------------------


def test_break_even_default() -> None:
    """SGLang vs current: 303 * 20.884 / 1000 = 6.33. Native vs autoregressive:
    1000 / (MoE(1) + 0.6 * ATTN_BASE) = 1000 / (0.25875 + 4.356028) = 216.70 tok/s,
    and 216.70 * 14.731 / 1000 = 3.19."""
    est = default_estimate()
    rows = {(b.pipeline, b.versus): b for b in est.break_even}
    sglang_step = MOE_33 + STRONGER_OVERHEAD
    native_step = MOE_33 + 0.6 * STRONGER_OVERHEAD
    assert rows["sglang", "current"].accept == pytest.approx(303 * sglang_step / 1000, rel=1e-12)
    assert rows["sglang", "current"].accept == pytest.approx(6.3, abs=0.05)
    assert rows["sglang", "autoregressive"].accept == pytest.approx(133 * sglang_step / 1000, rel=1e-12)
    native_ar = 1000 / (1.15 * 1.8 / 8 + 0.6 * ATTN_BASE)
    assert rows["native", "autoregressive"].tok_s_to_match == pytest.approx(native_ar, rel=1e-12)
    assert rows["native", "autoregressive"].accept == pytest.approx(native_ar * native_step / 1000, rel=1e-12)
    current_native = find(est, "current", "native", 4.4).tok_s
    assert rows["native", "current"].accept == pytest.approx(current_native * native_step / 1000, rel=1e-12)
    assert all(b.reason is None for b in est.break_even)


def test_break_even_out_of_reach(capsys: pytest.CaptureFixture[str]) -> None:
    """spec_scale 60: SGLang step = 5.50 + 7.48 + 316.2 = 329.2 ms, so matching 303 tok/s needs accept 99.7 > 33."""
    run = run_main(capsys, "--set", "stronger_drafter.spec_scale=60", "--format", "json")
    row = next(b for b in run.json()["break_even"] if (b["pipeline"], b["versus"]) == ("sglang", "current"))
    assert row["accept"] is None
    assert "above the tree's limit block+1 = 17" in row["reason"]  # block 16 binds before budget 32
    table = run_main(capsys, "--set", "stronger_drafter.spec_scale=60", "--all").out
    assert "accept needed  note" in table  # the reason in a column of its own, the accept left empty
    assert "it would need accept 99.7, above the tree's limit block+1 = 17" in flat(table)
    run = run_main(capsys, "--set", "stronger_drafter.spec_scale=8.1863", "--format", "json")  # needs 17.01
    assert "it would need accept 17.01, above the tree's limit block+1 = 17" in json.dumps(run.json()["break_even"])


def test_a_break_even_below_1_says_the_stronger_drafter_is_ahead_at_any_accept(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Scales of 0.01 and a flat curve: matching 133 tok/s on SGLang takes accept 0.29, which no step commits."""
    args = ["--set", "stronger_drafter.spec_scale=0.01", "--set", "stronger_drafter.attn_base_scale=0.01",
            "--set", "moe_curve.points[2].ms=9"]  # fmt: skip
    rows = run_main(capsys, *args, "--format", "json").json()["break_even"]
    row = next(b for b in rows if (b["pipeline"], b["versus"]) == ("sglang", "autoregressive"))
    assert row["accept"] == pytest.approx(133 * row["stronger_step_ms"] / 1000) and row["accept"] < 1
    assert row["reason"] == "below 1: ahead at any accept"
    assert all((b["reason"] is None) == (b["accept"] >= 1) for b in rows)
    explained = run_main(capsys, *args, "--explain").out
    assert "Break-even, SGLang versus autoregressive decoding; below 1: ahead at any accept" in explained
    assert "not reachable" not in explained  # it is reached at every accept


def test_break_even_marks_a_pipeline_that_cannot_run_the_stronger_tree(capsys: pytest.CaptureFixture[str]) -> None:
    table = run_main(capsys, "--all").out
    sglang = [line for line in table.splitlines() if line.startswith("SGLang [1]  ")]
    assert len(sglang) == 2 and "[1] SGLang cannot verify a budget above 8" in table
    assert not any(line.startswith("native engine (") for line in table.splitlines())
    runs = run_main(capsys, "--all", "--set", "sglang.max_budget=32").out
    assert "cannot run" not in runs and len(re.findall(r"^SGLang +(current drafter|autoregressive) ", runs, re.M)) == 2


def test_break_even_names_budget_when_it_binds(capsys: pytest.CaptureFixture[str]) -> None:
    run = run_main(
        capsys,
        *("--set", "stronger_drafter.spec_scale=60", "--set", "stronger_drafter.block=64"),
        *("--set", "stronger_drafter.budget=20", "--format", "json"),
    )
    reasons = [b["reason"] for b in run.json()["break_even"] if b["accept"] is None]
    assert reasons and all("budget+1 = 21" in r for r in reasons)


# --- Solving an assumption from a measurement ---------------------------------------------


def test_solve_overhead_cut_from_463(capsys: pytest.CaptureFixture[str]) -> None:
    """1000 * 4.4 / 463 = 9.5032 ms = MoE(9) + kept * 12.530202, so kept = 0.59952, cut = 0.40048."""
    run = run_main(
        capsys, "--solve", "native_engine.overhead_cut", "--observed", "current/native=463", "--format", "json"
    )
    doc = run.json()
    solve = doc["solve"]
    expected = 1 - (4400 / 463 - MOE_9) / (ATTN_BASE + SPEC)
    assert solve["value"] == pytest.approx(expected, rel=1e-9)
    assert solve["value"] == pytest.approx(0.40, abs=0.005)
    assert (solve["path"], solve["observed"], solve["scenario"]) == (
        "native_engine.overhead_cut",
        463,
        "current/native@4.4",
    )
    assert solve["method"].startswith("closed form")
    current = next(s for s in doc["scenarios"] if (s["drafter"], s["pipeline"]) == ("current", "native"))
    assert current["tok_s"] == pytest.approx(463, rel=1e-9)  # the scenarios are recomputed at the solved value
    table = run_main(capsys, "--solve", "native_engine.overhead_cut", "--observed", "current/native=463").out
    assert "Solved: native_engine.overhead_cut = 0.400489 (was 0.4)" in table


ROUND_TRIPS = [
    ("native_engine.overhead_cut", "current/native", 0.25),
    ("stronger_drafter.spec_scale", "stronger/sglang@12", 1.8),
    ("stronger_drafter.attn_base_scale", "stronger/native@16", 1.1),
    ("hardware.target.mem_bandwidth_tb_s", "stronger/native@14", 6.5),
    ("hardware.reference.mem_bandwidth_tb_s", "current/native", 2.0),
    ("anchors.ddtree.tok_s", "current/sglang", 290),
    ("anchors.ar_tok_s", "stronger/native@12", 128),
    ("moe_curve.points[2].ms", "stronger/sglang@14", 26.0),
    ("anchors.ddtree.accept", "stronger/native@14", 4.0),
]


@pytest.mark.parametrize(("path", "label", "value"), ROUND_TRIPS)
def test_solve_round_trips(capsys: pytest.CaptureFixture[str], path: str, label: str, value: float) -> None:
    """Estimate with the assumption set to `value`, then solve it back from that estimate."""
    spec = eb.ScenarioSpec.parse("--observed", label)
    doc = eb.set_path(default_doc(), eb.parse_path(path), value)
    observed = eb.scenario_for(eb.parse_calibration(doc), spec, "--observed").tok_s
    run = run_main(capsys, "--solve", path, "--observed", f"{label}={observed!r}", "--format", "json")
    assert run.code == 0, run.err
    assert run.json()["solve"]["value"] == pytest.approx(value, abs=1e-6)


def test_crossings_finds_every_root() -> None:
    """gap(v) = (v - 1)(v - 3) crosses zero at 1 and 3; both are narrowed to float precision."""
    gap = lambda v: (v - 1) * (v - 3)  # noqa: E731
    roots = eb.crossings(gap, [(v, gap(v)) for v in [0.1 * i for i in range(51)]])
    assert roots == [pytest.approx(1, abs=1e-12), pytest.approx(3, abs=1e-12)]


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (
            ["--solve", "native_engine.overhead_cut", "--observed", "current/native=5000"],
            ["--solve: native_engine.overhead_cut", "only at 1.08869", ">= 0 and < 1"],
        ),
        (
            ["--solve", "anchors.ar_tok_s", "--observed", "stronger/native@14=100000"],
            ["no value tried (", "brings stronger/native@14 to 100000 tok/s; those values give"],
        ),
        (
            ["--solve", "native_engine.overhead_cutt", "--observed", "current/native=463"],
            ["did you mean native_engine.overhead_cut?"],
        ),
        (["--solve", "stronger_drafter.budget", "--observed", "current/native=463"], ["is a whole number"]),
        (
            ["--solve", "native_engine.overhead_cut", "--observed", "current/native=-3"],
            ["--observed current/native=-3", "positive throughput"],
        ),
        (
            ["--solve", "native_engine.overhead_cut", "--observed", "current/native"],
            ["--observed current/native: expected SCENARIO=TOK_S"],
        ),
        (
            ["--solve", "native_engine.overhead_cut", "--observed", "stronger/native@99=463"],
            ["exceeds the tree's limit block+1 = 17"],
        ),
        (["--solve", "stronger_drafter.spec_scale", "--observed", "current/native=463"], ["does not depend on"]),
    ],
)
def test_bad_solves(capsys: pytest.CaptureFixture[str], args: list[str], fragments: list[str]) -> None:
    for fmt in ("table", "json"):
        assert_clean_error(run_main(capsys, *args, "--format", fmt), *fragments)


@pytest.mark.parametrize(
    "args",
    [
        ["--solve", "native_engine.overhead_cut"],
        ["--observed", "current/native=463"],
        ["--solve", "native_engine.overhead_cut", "--observed", "current/native=463", "--sweep", "a=1,2"],
    ],
)
def test_solve_usage_errors(capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    run = run_main(capsys, *args)
    assert run.code == 2 and run.out == "" and "usage:" in run.err


def test_json_of_all_analyses_is_strict_json(capsys: pytest.CaptureFixture[str]) -> None:
    run = run_main(
        capsys,
        "--set",
        "native_engine.overhead_cut=0.35",
        "--sensitivity",
        "--solve",
        "stronger_drafter.spec_scale",
        "--observed",
        "stronger/native@14=900",
        "--format",
        "json",
    )
    doc = json.loads(run.out, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert {"provenance", "calibration", "scenarios", "break_even", "sensitivity", "solve"} <= doc.keys()
    assert doc["provenance"]["overrides"] == ["native_engine.overhead_cut=0.35"]


@pytest.mark.parametrize(
    ("option", "extra"),
    [
        ("native_engine.overhead_cut=0.1,0.5", []),
        ("moe_curve.points[1].ms=8,9.5", []),
        ("model.experts_per_token=6,10", ["--set", "moe_curve.fit=experts"]),
        ("anchors.ddtree.tok_s=290,310", []),
        ("stronger_drafter.accept=[10],[12,16]", []),
        ("hardware.target.mem_bandwidth_tb_s=4.8,8", []),
    ],
)
def test_sweep_points_equal_fresh_estimates(capsys: pytest.CaptureFixture[str], option: str, extra: list[str]) -> None:
    """A sweep re-reads only the sections its path changes; each point must equal a run with --set."""
    path = option.partition("=")[0]
    points = run_main(capsys, *extra, "--sweep", option, "--format", "json").json()["sweep"]
    for point in points:
        value = json.dumps(point["values"][path])
        fresh = run_main(capsys, *extra, "--set", f"{path}={value}", "--format", "json").json()
        assert point["scenarios"] == fresh["scenarios"]


def test_changing_a_points_time_rereads_to_what_a_full_read_gives() -> None:
    """Points out of M order in the file: a point's place in the file is not its place on the curve."""
    doc = default_doc()
    doc["moe_curve"]["points"].reverse()  # M = 32, 9, 1
    cal = eb.parse_calibration(doc)
    changes: list[eb.Change] = [(("moe_curve", "points", 0, "ms"), 25.0), (("moe_curve", "points", 2, "ms"), 1.3)]
    changed_doc, reread = eb.recalibrate(doc, cal, changes)
    assert reread == eb.parse_calibration(changed_doc)
    assert [(p.m, p.ms, p.position) for p in reread.moe_curve.points] == [(1, 1.3, 2), (9, 8.85, 1), (32, 25.0, 0)]
    assert reread.moe_curve.points.batches == (1, 9, 32)


@pytest.mark.parametrize(
    "changes",
    [
        [(("stronger_drafter", "accept"), [12, 14])],  # the range on accept[2] names a number no longer there
        [(("stronger_drafter", "accept"), [12, 14, 15, 16])],
        [(("stronger_drafter",), {"block": 8, "budget": 8, "accept": [4], "attn_base_scale": 1, "spec_scale": 1})],
        [
            (
                ("stronger_drafter",),
                {"block": 9, "budget": 9, "accept": [4, 5, 6], "attn_base_scale": 1, "spec_scale": 2},
            )
        ],
        [(("sglang",), None)],  # an optional section, gone
        [(("model",), {"layers": 61})],  # a section missing keys
        [(("measurements",), [{"drafter": "current", "pipeline": "native", "accept": 4.4, "tok_s": 415}])],
        [(("moe_curve", "points"), [{"m": 1, "ms": 1.2}, {"m": 8, "ms": 8}])],  # the range on points[2] names none
        [(("moe_curve", "points", 0, "m"), 40)],  # the point moves to the other end of the curve
        [(("moe_curve", "points", 2, "m"), 9)],  # the M of another point
        [(("moe_curve", "points", 2, "m"), 0), (("moe_curve", "points", 1, "m"), 32)],  # the first error is [1]'s
        [(("moe_curve", "points", 1, "basis"), "assumed"), (("moe_curve", "points", 1, "ms"), 9.5)],
        [(("moe_curve", "points", 1), {"m": 12, "ms": 9.5})],
        [
            (("native_engine", "overhead_cut"), 0.3),
            (("anchors", "ddtree"), {"block": 6, "budget": 7, "accept": 4, "tok_s": 300}),
        ],
    ],
)
def test_a_change_rereads_to_what_a_full_read_of_the_changed_file_gives(changes: list[eb.Change]) -> None:
    """A sweep's point, a fit's trial: the records, every number's domain, or the error, as a full read gives."""
    doc = default_doc()
    doc["moe_curve"]["points"].reverse()  # M = 32, 9, 1: a point's place in the file is not its place on the curve
    doc["ranges"] |= {
        key: {"relative": 0.05, "source": "x"} for key in ("stronger_drafter.accept[2]", "moe_curve.points[2].ms")
    }
    cal, changed = eb.parse_calibration(doc), doc
    for path, value in changes:
        changed = eb.set_path(changed, path, value)

    def outcome(read: Callable[[], eb.Calibration]) -> eb.Calibration | str:
        try:
            return read()
        except eb.CalibrationError as exc:
            return str(exc)

    reread = outcome(lambda: eb.recalibrate(doc, cal, changes)[1])
    assert reread == outcome(lambda: eb.parse_calibration(changed))
    assert changes[0][1] != [12, 14] or "stronger_drafter.accept[2]" in str(reread)  # a case that fails fails


@pytest.mark.parametrize(
    ("option", "change", "accept", "limit"),
    [
        ("--set", "stronger_drafter.block=8", 12, "block+1 = 9"),
        ("--sweep", "stronger_drafter.budget=64,10", 12, "budget+1 = 11"),
        ("--sweep", "anchors.ddtree.budget=8,4", 6, "budget+1 = 5"),
    ],
)
def test_a_change_to_a_tree_checks_the_measurements_on_it_again(
    capsys: pytest.CaptureFixture[str],
    write_calibration: Callable[..., Path],
    option: str,
    change: str,
    accept: int,
    limit: str,
) -> None:
    """Reading a section a measurement's tree comes from again (a sweep's point re-reads that section alone)
    checks the measurement's accept length again."""
    doc = default_doc()
    doc["stronger_drafter"]["accept"] = [4.0]  # within every tree here: the measurement is what fails
    doc["anchors"]["ddtree"]["accept"] = 4.0
    drafter = "current" if "anchors" in change else "stronger"
    doc["measurements"] = [{"drafter": drafter, "pipeline": "native", "accept": accept, "tok_s": 400, "source": "x"}]
    path = str(write_calibration(doc))
    assert run_main(capsys, "--calibration", path, "--format", "json").code == 0
    run = run_main(capsys, "--calibration", path, option, change, "--format", "json")
    assert_clean_error(run, f"measurements[0].accept: {accept} exceeds the tree's limit {limit}")


@pytest.mark.parametrize(
    ("accept_range", "option", "change", "limit"),
    [
        ({"anchors.ddtree.accept": {"low": 4, "high": 9, "source": "x"}}, "anchors.ddtree.block", "8,6", "<= 7"),
        ({"stronger_drafter.accept[1]": {"low": 12, "high": 17, "source": "x"}}, "stronger_drafter.budget", "64,15",
         "<= 16"),
    ],
)  # fmt: skip
def test_a_sweep_of_a_tree_checks_the_ranges_on_its_accept_lengths_again(
    capsys: pytest.CaptureFixture[str], accept_range: dict[str, Any], option: str, change: str, limit: str
) -> None:
    """A fixed range on an accept length must lie within the tree's limit: a point of a sweep that lowers the limit
    below the range fails as --set of its value does."""
    ranges = f"ranges={json.dumps(accept_range)}"
    bad = change.split(",")[-1]
    told = f"the range reaches {next(iter(accept_range.values()))['high']}; expected a number >= 1 and {limit}"
    assert_clean_error(run_main(capsys, "--set", ranges, "--set", f"{option}={bad}", "--format", "json"), told)
    for fmt in ("json", "csv", "table"):
        run = run_main(capsys, "--set", ranges, "--sweep", f"{option}={change}", "--format", fmt)
        assert_clean_error(run, f"at --sweep {option}={bad}: ranges.", told)


def test_of_two_bad_point_times_a_sweep_names_the_one_set_names() -> None:
    """A sweep re-reads the points it changed in the order of a full read, so it tells the error --set tells."""
    doc = default_doc()
    doc["moe_curve"]["points"] = [{"m": m, "ms": 0.5 + m} for m in range(1, 12)]
    cal = eb.parse_calibration(doc)
    changes: list[eb.Change] = [(("moe_curve", "points", 8, "ms"), -1.0), (("moe_curve", "points", 1, "ms"), -2.0)]
    with pytest.raises(eb.CalibrationError) as reread:
        eb.recalibrate(doc, cal, changes)
    with pytest.raises(eb.CalibrationError) as full:
        eb.parse_calibration(eb.set_path(eb.set_path(doc, *changes[0]), *changes[1]))
    assert reread.value.path == full.value.path == "moe_curve.points[1].ms"


def test_a_range_on_a_logged_measurement_is_refused(
    capsys: pytest.CaptureFixture[str], write_calibration: Callable[..., Path]
) -> None:
    """As --fit refuses it: a measurement moves no estimate."""
    doc = json.loads(MEASURED.read_text())
    doc["ranges"] = {"measurements[0].tok_s": {"relative": 0.03, "source": "x"}}
    run = run_main(capsys, "--calibration", str(write_calibration(doc)), "--sensitivity")
    assert_clean_error(run, "ranges.measurements[0].tok_s: is in `measurements`, not an assumption of the model")
    doc["ranges"] = {"measurements[0].tok_x": {"relative": 0.03, "source": "x"}}
    run = run_main(capsys, "--calibration", str(write_calibration(doc)), "--sensitivity")
    assert_clean_error(run, "ranges.measurements[0].tok_x: not a number of the calibration")
    assert "measurements[" not in run.err.split("(", 1)[1]  # nor is one suggested
    for key in ("ranges.anchors.ar_tok_s.relative", "ranges.native_engine.overhead_cut.low"):
        doc["ranges"] = {"native_engine.overhead_cut": {"low": 0.2, "high": 0.6, "source": "x"},
                         key: {"low": 0.1, "high": 0.2, "source": "x"}}  # fmt: skip
        path = str(write_calibration(doc))
        assert_clean_error(run_main(capsys, "--calibration", path, "--sensitivity"), f"ranges.{key}: is in `ranges`")
        assert_clean_error(run_main(capsys, "--calibration", path, "--fit", key), f"{key}: is in `ranges`")


@pytest.mark.parametrize(("change", "got"), [("ranges.source=1", "a number"), ("ranges.note=[null]", "a list")])
def test_the_ranges_own_documentation_is_text(capsys: pytest.CaptureFixture[str], change: str, got: str) -> None:
    run = run_main(capsys, "--set", change, "--format", "json")
    assert_clean_error(run, f"{change.split('=')[0]}: got {got}; expected a string (documentation)")


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ((("moe_curve", "points", 1, "ms"), -1), "moe_curve.points[1].ms: got -1; expected a number > 0"),
        ((("moe_curve", "points", 2, "m"), 9), "moe_curve.points[2].m: M = 9 appears twice"),
        ((("moe_curve", "points", 2, "ms"), "fast"), 'moe_curve.points[2].ms: got a string "fast"'),
    ],
)
def test_a_changed_point_is_checked_as_a_full_read_checks_it(change: eb.Change, fragment: str) -> None:
    doc = default_doc()
    with pytest.raises(eb.CalibrationError) as error:
        eb.recalibrate(doc, eb.parse_calibration(doc), [change])
    assert fragment in f"{error.value.path}: {error.value.message}"


def test_a_csv_sweep_gives_each_point_as_a_run_with_set_gives_it(capsys: pytest.CaptureFixture[str]) -> None:
    """The scenarios a sweep point shares with the point before are written once and copied: the same text."""
    import csv

    swept = list(
        csv.reader(
            run_main(capsys, "--sweep", "native_engine.overhead_cut=0.1,0.5,0.1", "--format", "csv").out.splitlines()
        )
    )
    assert swept[0][0] == "native_engine.overhead_cut" and len(swept) == 1 + 3 * 8
    for i, value in enumerate(["0.1", "0.5", "0.1"]):
        fresh = list(
            csv.reader(
                run_main(capsys, "--set", f"native_engine.overhead_cut={value}", "--format", "csv").out.splitlines()
            )
        )
        rows = swept[1 + 8 * i : 9 + 8 * i]
        assert [row[0] for row in rows] == [value] * 8
        assert [row[1:-2] for row in rows] == [row[:-2] for row in fresh[1:]]  # all but overrides, measurements_added
