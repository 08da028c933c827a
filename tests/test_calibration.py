"""The calibration loader: every class of bad input gets exit 2, an empty stdout and one clear message."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import DEFAULT_CALIBRATION, assert_clean_error, default_doc, mutated, run_main, run_script
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import estimate_b300 as eb

# --- The file itself ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "fragments"),
    [
        (b"", ["is empty", "expected a JSON object"]),
        (b"   \n", ["is empty"]),
        (b"\xff\xfe{}", ["byte 0 is not UTF-8"]),
        (b'{\n  "schema_version": 1,\n  oops\n}', ["line 3 column 3", "not valid JSON"]),
        (b"[1, 2]", ["(top level)", "got a list; expected an object"]),
        (b'"text"', ["(top level)", "got a string"]),
        (b'{"schema_version": 2}', ["schema_version", "got 2", "reads schema 1"]),
        (b'{"schema_version": true}', ["schema_version", "got true"]),
        (b"[" * 100_000 + b"]" * 100_000, ["nests too deep to decode"]),  # nesting past the recursion limit
        (b'{"schema_version": 1' + b"0" * 5000 + b"}", ["schema_version: got an integer of more than 4,300 digits"]),
    ],
)
def test_bad_files(capsys: pytest.CaptureFixture[str], tmp_path: Path, content: bytes, fragments: list[str]) -> None:
    path = tmp_path / "cal.json"
    path.write_bytes(content)
    assert_clean_error(run_main(capsys, "--calibration", str(path)), str(path), *fragments)


def test_an_integer_past_pythons_digit_limit_is_named_at_its_key_with_the_limit_in_force(tmp_path: Path) -> None:
    path = tmp_path / "cal.json"
    path.write_text(DEFAULT_CALIBRATION.read_text().replace('"ar_tok_s": 133', '"ar_tok_s": ' + "1" * 2000, 1))
    run = run_script("--calibration", str(path), env={"PYTHONINTMAXSTRDIGITS": "1000"})
    assert_clean_error(run, "anchors.ar_tok_s: an integer of more than 1,000 digits; expected a number of sensible")
    path.write_text(DEFAULT_CALIBRATION.read_text().replace('"ar_tok_s": 133', '"ar_tok_s": ' + "1" * 1_000_000, 1))
    started = time.perf_counter()  # with the limit off, reading a million digits and counting them took 15 s
    run = run_script("--calibration", str(path), env={"PYTHONINTMAXSTRDIGITS": "0"})
    assert_clean_error(run, "anchors.ar_tok_s: an integer of more than 4,300 digits; expected a number of sensible")
    assert time.perf_counter() - started < 5  # refused unread: about 0.1 s
    path.write_text(DEFAULT_CALIBRATION.read_text().replace('"tp": 8', '"tp": [' + "1" * 5000 + "]", 1))
    told = "moe_curve.tp: got a list holding an integer of more than 4,300 digits; expected a whole number"
    assert_clean_error(run_script("--calibration", str(path)), told)  # not "a list [Infinity]"


@pytest.mark.parametrize(
    "option",
    [
        ["--measured", "current/native=411"],
        ["--observed", "stronger/native=900", "--solve", "native_engine.overhead_cut"],
    ],
)
def test_anchors_that_conflict_are_the_files_to_tell_not_an_options(
    capsys: pytest.CaptureFixture[str], write_calibration: Callable[[object], Path], option: list[str]
) -> None:
    """A throughput given on the command line read a scenario of the file first, and took its error as its own."""
    path = write_calibration(mutated(lambda d: d["moe_curve"]["points"][0].update(ms=40)))
    run = run_main(capsys, "--calibration", str(path), *option)
    assert_clean_error(run, f"{path}: anchors.ar_tok_s: the measured anchors conflict with the MoE curve")


def test_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.json")
    assert_clean_error(run_main(capsys, "--calibration", missing), missing, "no such file")


def test_a_dash_is_a_file_name_and_the_error_names_standard_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert_clean_error(run_main(capsys, "--calibration", "-"), "-: no such file", "standard input is /dev/stdin")


def test_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert_clean_error(run_main(capsys, "--calibration", str(tmp_path)), str(tmp_path), "is a directory")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_unreadable_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "cal.json"
    path.write_text("{}")
    path.chmod(0)
    assert_clean_error(run_main(capsys, "--calibration", str(path)), "cannot be read")


def test_unreadable_file_even_as_root(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A FIFO with no writer cannot be opened without blocking; a socket path cannot be read at all."""
    import socket

    path = tmp_path / "cal.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        assert_clean_error(run_main(capsys, "--calibration", str(path)), str(path), "cannot be read")


# --- Keys and values ---------------------------------------------------------------------

BAD_VALUES: list[tuple[str, Callable[[dict[str, Any]], object], list[str]]] = [
    ("missing key", lambda d: d["anchors"].pop("ar_tok_s"), ["anchors.ar_tok_s: missing", "expected a number > 0"]),
    ("missing section", lambda d: d.pop("native_engine"), ["native_engine: missing", "an object"]),
    (
        "unknown key, near a known one",
        lambda d: d["native_engine"].update(overhead_cutt=0.3),
        ["native_engine.overhead_cutt: unknown key", "did you mean native_engine.overhead_cut?"],
    ),
    (
        "unknown key, near nothing",
        lambda d: d["hardware"].update(zzz=1),
        ["hardware.zzz: unknown key", "known keys: reference, target"],
    ),
    ("top-level typo", lambda d: d.update(anchor={}), ["anchor: unknown key", "did you mean anchors?"]),
    ("documentation key of an unknown key", lambda d: d["anchors"].update(foo_source="x"), ["anchors.foo_source"]),
    ("documentation that is not text", lambda d: d["anchors"].update(source=3), ["anchors.source", "a string"]),
    ("bool for number", lambda d: d["anchors"].update(ar_tok_s=True), ["anchors.ar_tok_s: got true"]),
    ("null for number", lambda d: d["anchors"].update(ar_tok_s=None), ["anchors.ar_tok_s: got null"]),
    ("string for number", lambda d: d["anchors"].update(ar_tok_s="133"), ['got a string "133"', "writes it: 133)"]),
    ("list for object", lambda d: d.update(hardware=[1]), ["hardware: got a list; expected an object"]),
    ("object for list", lambda d: d["stronger_drafter"].update(accept={}), ["stronger_drafter.accept: got an object"]),
    ("NaN", lambda d: d["anchors"].update(ar_tok_s=float("nan")), ["anchors.ar_tok_s: got NaN", "finite"]),
    ("Infinity", lambda d: d["anchors"].update(ar_tok_s=float("inf")), ["got Infinity", "finite"]),
    ("400-digit integer", lambda d: d["anchors"].update(ar_tok_s=10**400), ["an integer of 401 digits", "finite"]),
    ("400-digit count", lambda d: d["stronger_drafter"].update(budget=10**400), ["stronger_drafter.budget"]),
    ("zero bandwidth", lambda d: d["hardware"]["target"].update(mem_bandwidth_tb_s=0), ["target.mem_bandwidth_tb_s"]),
    ("negative bandwidth", lambda d: d["hardware"]["reference"].update(mem_bandwidth_tb_s=-1.8), ["got -1.8"]),
    ("zero throughput", lambda d: d["anchors"]["ddtree"].update(tok_s=0), ["anchors.ddtree.tok_s: got 0"]),
    ("negative throughput", lambda d: d["anchors"].update(ar_tok_s=-133), ["anchors.ar_tok_s: got -133"]),
    ("zero time", lambda d: d["moe_curve"]["points"][1].update(ms=0), ["moe_curve.points[1].ms: got 0"]),
    ("cut of 1", lambda d: d["native_engine"].update(overhead_cut=1), ["overhead_cut: got 1", ">= 0 and < 1"]),
    ("negative cut", lambda d: d["native_engine"].update(overhead_cut=-0.1), ["overhead_cut: got -0.1"]),
    ("fractional block", lambda d: d["stronger_drafter"].update(block=16.5), ["block: got 16.5", "whole number"]),
    ("zero budget", lambda d: d["anchors"]["ddtree"].update(budget=0), ["anchors.ddtree.budget: got 0"]),
    ("string block", lambda d: d["stronger_drafter"].update(block="16.0"), ['block: got a string "16.0"', "it: 16)"]),
    ("one curve point", lambda d: d["moe_curve"].update(points=[{"m": 9, "ms": 8.85}]), ["has 1 entry; expected 2"]),
    (
        "duplicate M",
        lambda d: d["moe_curve"]["points"].append({"m": 9, "ms": 9.0}),
        ["moe_curve.points[3].m", "M = 9 appears twice"],
    ),
    ("fractional M", lambda d: d["moe_curve"]["points"][0].update(m=1.5), ["points[0].m: got 1.5"]),
    ("zero M", lambda d: d["moe_curve"]["points"][0].update(m=0), ["points[0].m: got 0"]),
    ("unknown basis", lambda d: d["moe_curve"]["points"][0].update(basis="guess"), ["one of measured"]),
    ("accept below 1", lambda d: d["stronger_drafter"].update(accept=[0.5]), ["accept[0]: got 0.5", ">= 1"]),
    (
        "accept just below 1",
        lambda d: d["stronger_drafter"].update(accept=[0.9999999999999999]),
        ["accept[0]: got 0.9999999999999999; expected a number >= 1"],
    ),  # not 'got 1', which would contradict it
    (
        "accept above both limits: the binding one is named",
        lambda d: d["stronger_drafter"].update(accept=[12, 40]),
        ["stronger_drafter.accept[1]: 40 exceeds the tree's limit block+1 = 17 (the smaller of block+1 and budget+1)"],
    ),
    (
        "accept above block+1",
        lambda d: d["stronger_drafter"].update(accept=[12, 18]),
        ["stronger_drafter.accept[1]: 18 exceeds the tree's limit block+1 = 17"],
    ),
    (
        "anchor accept above budget+1",
        lambda d: d["anchors"]["ddtree"].update(accept=10),
        ["anchors.ddtree.accept: 10 exceeds the tree's limit budget+1 = 9"],
    ),
    ("empty accept list", lambda d: d["stronger_drafter"].update(accept=[]), ["accept: has 0 entries"]),
    ("duplicate accept", lambda d: d["stronger_drafter"].update(accept=[12, 12]), ["accept[1]: 12 appears twice"]),
    (
        "accepts that read alike",
        lambda d: d["stronger_drafter"].update(accept=[12, 12.000004]),
        ["accept[1]: 12.000004 reads 12, as accept[0] does", "distinct in its first 6 digits"],
    ),  # one column in a table
    ("zero scale", lambda d: d["stronger_drafter"].update(spec_scale=0), ["spec_scale: got 0"]),
    ("blank reason", lambda d: d["sglang"].update(max_budget_source=" \n"), ["max_budget_source: is blank"]),
]


@pytest.mark.parametrize(("edit", "fragments"), [case[1:] for case in BAD_VALUES], ids=[c[0] for c in BAD_VALUES])
def test_bad_values(
    capsys: pytest.CaptureFixture[str],
    write_calibration: Callable[[object], Path],
    edit: Callable[[dict[str, Any]], object],
    fragments: list[str],
) -> None:
    path = write_calibration(mutated(edit))
    assert_clean_error(run_main(capsys, "--calibration", str(path)), str(path), *fragments)


def test_documentation_keys_are_accepted() -> None:
    doc = default_doc()
    doc["anchors"]["ar_tok_s_note"] = "a note on one number"
    doc["anchors"]["ddtree"]["note"] = "a note on the object"
    doc["stronger_drafter"]["budget_source"] = "assumed"
    doc["ranges"]["native_engine.overhead_cut_note"] = "a note beside a range, as beside any key"
    eb.parse_calibration(doc)
    doc["ranges"]["native_engine.overhead_cut_note"] = 3
    with pytest.raises(eb.CalibrationError, match="overhead_cut_note: got a number; expected a string"):
        eb.parse_calibration(doc)
    beside = eb.set_path(default_doc(), eb.parse_path("ranges.native_engine.overhead_cut_note"), "why")  # by --set
    assert beside["ranges"]["native_engine.overhead_cut_note"] == "why"  # beside the range, as in the file
    eb.parse_calibration(beside)


def test_every_number_in_the_default_calibration_carries_a_source() -> None:
    """Each number has a `<key>_source` beside it, or its object (or an enclosing one) a `source`."""

    def walk(node: object, path: str, documented: bool) -> list[str]:
        if isinstance(node, list):
            return [bad for i, item in enumerate(node) for bad in walk(item, f"{path}[{i}]", documented)]
        if not isinstance(node, dict):
            return []
        here = documented or "source" in node
        bad = []
        for key, value in node.items():
            if isinstance(value, (int, float)) and key != "schema_version":
                if not (here or f"{key}_source" in node):
                    bad.append(f"{path}.{key}")
            else:
                bad += walk(value, f"{path}.{key}", here or f"{key}_source" in node)
        return bad

    assert walk(default_doc(), "", False) == []


def test_the_inferred_curve_point_is_labelled() -> None:
    points = {p["m"]: p for p in default_doc()["moe_curve"]["points"]}
    assert points[1]["basis"] == "inferred"
    assert {points[9]["basis"], points[32]["basis"]} == {"measured"}


# --- Calibrations the model cannot use ---------------------------------------------------


def test_anchors_that_leave_no_attn_base(capsys: pytest.CaptureFixture[str], write_calibration) -> None:  # type: ignore[no-untyped-def]
    """curve(1) = 40 ms on the reference is 9 ms on B300, more than the whole 7.52 ms AR step."""
    doc = mutated(lambda d: d["moe_curve"]["points"][0].update(ms=40))
    run = run_main(capsys, "--calibration", str(write_calibration(doc)))
    assert_clean_error(run, "anchors.ar_tok_s", "conflict", "ATTN_BASE = -1.481 ms", "below 111.1")


def test_a_bound_in_a_message_is_rounded_toward_what_it_bounds(capsys: pytest.CaptureFixture[str]) -> None:
    """1000 / MoE(1) = 3864.734 tok/s: at that AR throughput ATTN_BASE is 0 (to rounding). "below 3865" would let
    3864.73 read as allowed; "below 3864" cannot."""
    run = run_main(capsys, "--set", "anchors.ar_tok_s=3864.73429951691")
    assert_clean_error(run, "anchors.ar_tok_s", "3864.73 tok/s", "expected ATTN_BASE > 0, i.e. ar_tok_s below 3864 (")


def test_anchors_that_leave_negative_spec(capsys: pytest.CaptureFixture[str], write_calibration) -> None:  # type: ignore[no-untyped-def]
    """600 tok/s at accept 4.4 is a 7.333 ms step, less than MoE(9) + ATTN_BASE = 9.251 ms."""
    doc = mutated(lambda d: d["anchors"]["ddtree"].update(tok_s=600))
    run = run_main(capsys, "--calibration", str(write_calibration(doc)))
    assert_clean_error(run, "anchors.ddtree.tok_s", "conflict by 1.918 ms", "at most 475.6")


def test_curve_extrapolating_below_zero(capsys: pytest.CaptureFixture[str], write_calibration) -> None:  # type: ignore[no-untyped-def]
    """Points (9, 8.85) and (10, 20): the slope 11.15 ms/token reaches below zero at M = 1."""
    doc = mutated(lambda d: d["moe_curve"].update(points=[{"m": 9, "ms": 8.85}, {"m": 10, "ms": 20}]))
    run = run_main(capsys, "--calibration", str(write_calibration(doc)))
    assert_clean_error(
        run, "moe_curve.points", "at M = 1", "expected a positive time: add a measured point nearer M = 1"
    )


def test_an_experts_fit_below_zero_names_its_line_not_a_missing_point(capsys: pytest.CaptureFixture[str]) -> None:
    """With 42 routed experts the curve's points give t0 < 0, so the fit goes below zero at M = 1, a point of the curve:
    another point there would not help."""
    run = run_main(capsys, "--set", 'moe_curve.fit="experts"', "--set", "model.routed_experts=42")
    told = "at M = 1 gives -0.01373 ms; expected a positive time: points that follow the experts fit, t0 + t_expert *"
    assert_clean_error(run, told, 'here t0 = -4.403 ms and t_expert = 0.5487 ms, or fit "linear"')
    assert "nearer" not in run.err


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d["hardware"]["reference"].update(mem_bandwidth_tb_s=1e-300),
        lambda d: d["hardware"]["target"].update(mem_bandwidth_tb_s=1e-300),
        lambda d: d["anchors"].update(ar_tok_s=1e-300),
        lambda d: d["anchors"]["ddtree"].update(tok_s=1e-300),
        lambda d: d["moe_curve"]["points"][2].update(ms=1e300),
        lambda d: d["stronger_drafter"].update(spec_scale=1e308, attn_base_scale=1e308),
    ],
)
def test_extreme_numbers_give_finite_figures_or_a_clean_error(
    capsys: pytest.CaptureFixture[str], write_calibration: Callable[[object], Path], edit: Callable[[Any], object]
) -> None:
    run = run_main(capsys, "--calibration", str(write_calibration(mutated(edit))), "--format", "json")
    if run.code == 0:
        figures = [v for s in run.json()["scenarios"] for v in s.values() if isinstance(v, float)]
        assert all(v == v and abs(v) != float("inf") for v in figures)
    else:
        assert_clean_error(run)


# --- Fuzz: mutate the default calibration -------------------------------------------------


def _paths(node: object, prefix: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _paths(value, (*prefix, i))
    return found


_ALL_PATHS = _paths(json.loads(DEFAULT_CALIBRATION.read_text()))
_odd_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**400), 10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
    st.lists(st.integers(-3, 40), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(_ALL_PATHS), st.sampled_from(["drop", "retype", "negate", "nest", "rename"]), _odd_values
        ),
        min_size=1,
        max_size=3,
    )
)
def test_fuzzed_calibrations_succeed_or_fail_cleanly(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, edits: list[tuple[tuple[object, ...], str, object]]
) -> None:
    doc: Any = default_doc()
    for path, action, value in edits:
        parent = doc
        try:
            for step in path[:-1]:
                parent = parent[step]
            key = path[-1]
            current = parent[key]
        except (KeyError, IndexError, TypeError):
            continue
        if not isinstance(parent, (dict, list)):  # an earlier edit made it a text, which indexes but cannot change
            continue
        if action == "drop":
            del parent[key]
        elif action == "retype":
            parent[key] = value
        elif action == "negate" and isinstance(current, (int, float)) and not isinstance(current, bool):
            parent[key] = -current
        elif action == "nest":
            parent[key] = {"value": current}
        elif action == "rename" and isinstance(parent, dict):
            parent[f"{key}x"] = parent.pop(key)
    path = tmp_path / "fuzz.json"
    path.write_text(json.dumps(doc))
    for fmt in ("json", "table"):
        run = run_main(capsys, "--calibration", str(path), "--format", fmt)
        if run.code == 0:  # stderr may carry warnings about physically impossible inputs, nothing else
            assert run.out
            assert all(line.startswith("estimate_b300: warning: ") for line in run.err.splitlines())
        else:
            assert_clean_error(run, str(path))


# --- The same through a real process -------------------------------------------------------


def test_a_bad_file_through_the_command_line(write_calibration) -> None:  # type: ignore[no-untyped-def]
    path = write_calibration(mutated(lambda d: d["stronger_drafter"].update(accept=[12, 40])))
    run = run_script("--calibration", str(path))
    assert_clean_error(run, f"{path}: stronger_drafter.accept[1]: 40 exceeds the tree's limit block+1 = 17")


def test_calibration_file_is_never_written(tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    text = DEFAULT_CALIBRATION.read_text()
    path.write_text(text)
    before = path.stat().st_mtime_ns
    assert run_script("--calibration", str(path)).code == 0
    assert run_script("--calibration", str(path), "--format", "json").code == 0
    assert path.read_text() == text and path.stat().st_mtime_ns == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calibration.json"]


@settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.sampled_from(_ALL_PATHS), _odd_values, st.sampled_from([[], ["--sensitivity"], ["--sweep", "a.b=1"]]))
def test_fuzzed_overrides_succeed_or_fail_cleanly(
    capsys: pytest.CaptureFixture[str], path: tuple[object, ...], value: object, extra: list[str]
) -> None:
    key = eb.format_path(path)  # type: ignore[arg-type]
    run = run_main(capsys, "--set", f"{key}={json.dumps(value)}", *extra, "--format", "json")
    if run.code == 0:
        json.loads(run.out)
    else:
        assert_clean_error(run)


def test_a_bandwidth_ratio_that_overflows(capsys: pytest.CaptureFixture[str]) -> None:
    """Found by the fuzzer: 8 / 2.2e-311 TB/s overflows to an infinite ratio."""
    run = run_main(capsys, "--set", "hardware.reference.mem_bandwidth_tb_s=2.2e-311", "--format", "json")
    assert_clean_error(run, "bandwidth ratio: target bandwidth / reference bandwidth with", "gives inf")
    assert "reference bandwidth = 2.2e-311 (hardware.reference.mem_bandwidth_tb_s)" in run.err


def test_sglang_must_run_the_tree_its_anchor_was_measured_on(capsys: pytest.CaptureFixture[str]) -> None:
    """The DDTree anchor ran on SGLang at budget 8: a max_budget below that contradicts the file itself."""
    run = run_main(capsys, "--set", "sglang.max_budget=7")
    assert_clean_error(run, "sglang.max_budget: got 7, but the DDTree anchor was measured on SGLang at budget 8")
    assert run_main(capsys, "--set", "sglang.max_budget=8").code == 0
