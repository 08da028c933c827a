"""Hostile input and huge runs: whatever the input, one line on stderr, the right exit status, no hang."""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
from conftest import (
    DEFAULT_CALIBRATION,
    MEASURED,
    ROOT,
    SCRIPT,
    Run,
    assert_clean_error,
    default_doc,
    flat,
    mutated,
    on_cpus,
    run_main,
    run_script,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import estimate_b300 as eb

FUZZ = int(os.environ.get("FUZZ_EXAMPLES", "200"))


def shell(command: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> Run:
    """A command line through sh, for what Python's subprocess cannot arrange (closed streams, a deleted directory)."""
    script = command.replace("TOOL", f"{sys.executable} {SCRIPT}")
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | (env or {})
    proc = subprocess.run(["sh", "-c", script], capture_output=True, text=True, cwd=cwd, env=env, timeout=60)
    return Run(proc.returncode, proc.stdout, proc.stderr)


# --- Usage errors: one line and a pointer to --help -------------------------------------------


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--formatt", "json"], "unrecognized arguments: --formatt json"),
        (["--format", "yaml"], "argument --format: invalid choice: 'yaml'"),
        (["--set"], "argument --set: expected one argument"),
        (["--solve", "native_engine.overhead_cut"], "--solve and --observed go together"),
        (["--sweep", "a=1", "--sweep", "b=1", "--sweep", "c=1"], "--sweep: 3 given; expected at most 2"),
        (["--calibration", ""], "--calibration: an empty path"),
        (["--solve", ""], "--solve: empty; expected the key path of a number"),
        (["--solve", "", "--observed", "current/native=463"], "--solve: empty; expected the key path of a number"),
        (["--observed", ""], "--observed: empty; expected SCENARIO=TOK_S"),
        (["--scenario", "", "--sensitivity"], "--scenario: empty; expected DRAFTER/PIPELINE[@ACCEPT]"),
        (["--sweep", "native_engine.overhead_cut=0.2,0.4", "--all"], "--all and --sweep cannot be combined"),
    ],
)
def test_usage_errors_are_one_line(capsys: pytest.CaptureFixture[str], args: list[str], fragment: str) -> None:
    run = run_main(capsys, *args)
    assert_clean_error(run, "estimate_b300: usage: ", fragment, "see --help")


@pytest.mark.parametrize(
    ("args", "where"),
    [
        (["--set", 'native_engine={"overhead_cut": 0.3, "overhead_cut": 0.5}'], "--set native_engine="),
        (["--set", 'ranges={"anchors.ar_tok_s": {"relative": 0.1, "relative": 0.2, "source": "x"}}', "--sensitivity"],
         "--set ranges="),
        (["--sweep", 'native_engine={"overhead_cut": 0.3},{"overhead_cut": 0.3, "overhead_cut": 0.5}'],
         "--sweep native_engine="),
        (["--sensitivity", "--scenario", 'stronger/native@{"a": 1, "a": 2}'], "--scenario stronger/native@"),
        (["--solve", "native_engine.overhead_cut", "--observed", 'current/native={"a": 1, "a": 2}'],
         "--observed current/native="),
    ],
)  # fmt: skip
def test_a_key_twice_in_an_object_on_the_command_line(
    capsys: pytest.CaptureFixture[str], args: list[str], where: str
) -> None:
    """As in the file: the later value would win, so the earlier one is refused, not dropped."""
    twice = "appears twice in an object; expected each key once (the later one would win)"
    assert_clean_error(run_main(capsys, *args, "--format", "json"), f"estimate_b300: {where}", twice)


def test_the_same_key_swept_twice(capsys: pytest.CaptureFixture[str]) -> None:
    run = run_main(capsys, "--sweep", "native_engine.overhead_cut=0.1,0.2", "--sweep", "native_engine.overhead_cut=0.3")
    assert_clean_error(run, "native_engine.overhead_cut is swept twice; expected each key once")
    for sweep, clash in (('native_engine={"overhead_cut": 0.5}', "lies inside native_engine, which is swept"),
                         ("native_engine.overhead_cut=0.5,0.6", "is swept too")):  # fmt: skip
        run = run_main(capsys, "--set", "native_engine.overhead_cut=0.3", "--sweep", sweep)
        assert_clean_error(run, f"--set native_engine.overhead_cut=0.3: native_engine.overhead_cut {clash}; expected")
    outer = ["--set", 'native_engine={"overhead_cut": 0.3}', "--sweep", "native_engine.overhead_cut=0.5,0.6"]
    assert run_main(capsys, *outer).code == 0  # the sweep varies a value inside what --set gave
    for later, clash in (("native_engine.overhead_cut=0.5", "is set twice"),
                         ('native_engine={"overhead_cut": 0.5}', "lies inside native_engine")):  # fmt: skip
        run = run_main(capsys, "--set", "native_engine.overhead_cut=0.3", "--set", later)
        assert_clean_error(run, f"--set native_engine.overhead_cut=0.3: native_engine.overhead_cut {clash}, and "
                                f"--set {later} replaces it; expected each key once")  # fmt: skip
    inside = run_main(capsys, "--set", 'native_engine={"overhead_cut": 0.5}', "--set", "native_engine.overhead_cut=0.3")
    assert inside.code == 0 and "The native engine with today's drafter: 409 tok/s" in inside.out  # refined: 0.3
    nested = "--sweep: native_engine.overhead_cut lies inside native_engine, which is swept too; expected keys apart"
    for sweeps in (["native_engine.overhead_cut=0.1,0.2", 'native_engine={"overhead_cut": 0.3}'],
                   ['native_engine={"overhead_cut": 0.3}', "native_engine.overhead_cut=0.1,0.2"]):  # fmt: skip
        assert_clean_error(run_main(capsys, "--sweep", sweeps[0], "--sweep", sweeps[1]), nested)
    grid = ["--sweep", "moe_curve.points[1].ms=8,9", "--sweep", "moe_curve.points[1].m=9,10", "--format", "json"]
    assert len(run_main(capsys, *grid).json()["sweep"]) == 4  # keys side by side make a grid


def test_help_names_the_command_as_invoked() -> None:
    run = run_script("--help")
    assert run.code == 0 and run.err == ""
    assert run.out.startswith("usage: estimate_b300.py ")
    assert "  estimate_b300.py --sweep native_engine.overhead_cut=0.2:0.6:0.1 --format csv" in run.out


# --- Whatever the user typed comes back escaped ------------------------------------------------


def test_control_characters_in_a_key_path_are_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    run = run_main(capsys, "--set", "native_engine.over\nhead\x1b[31m_cut=0.3")
    assert_clean_error(run, "native_engine.over\\nhead\\x1b[31m_cut")
    assert "\x1b" not in run.err


def test_errors_and_warnings_show_every_character_that_would_not_show(capsys: pytest.CaptureFixture[str]) -> None:
    """A zero-width space in a key would make "did you mean native_engine.overhead_cut?" name the key typed; on
    stderr every such character is escaped. The output keeps a name as typed, so that a line copied back gives
    the same run; only the characters that steer a terminal are escaped there."""
    run = run_main(capsys, "--set", "native_engine.overhead_cut\u200b=0.3")
    assert_clean_error(run, "native_engine.overhead_cut\\u200b: unknown key (did you mean native_engine.overhead_cut?)")
    for never in ("\ufdd0", "\uffff", "\U0010ffff"):  # a noncharacter is never assigned, as a new emoji may be
        run = run_main(capsys, "--set", f"native_engine.overhead_cut{never}=0.3{never}")
        shown = never.encode("unicode_escape").decode()
        assert_clean_error(
            run, f"--set native_engine.overhead_cut{shown}=0.3{shown}: native_engine.overhead_cut{shown}: "
        )
    run = run_main(capsys, "--set", "hardware.target.name=\u200b\u3000")
    assert_clean_error(run, "--set hardware.target.name=\\u200b\\u3000: hardware.target.name: is blank")
    run = run_main(capsys, "--set", "hardware.target.name=X\u200bY\u00adZ")
    assert run.code == 0 and "the estimate is for X\\u200bY\\xadZ, but the anchors" in run.err
    assert "X\u200bY\u00adZ" not in run.err and "X\u200bY\u00adZ" in run.out and "中" not in run.err
    run = run_main(capsys, "--set", "hardware.target.name=中文\u200b")
    assert "the estimate is for 中文\\u200b, but" in run.err  # a letter of any script shows as it is
    name = "👨\u200d👩\u200d👧 فارسی\u200cزبان 🩷 🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f"  # noqa: RUF001
    run = run_main(capsys, "--set", f"hardware.target.name={name}")  # joiners and tags build what they join
    assert f"the estimate is for {name}, but" in run.err
    # what the loader calls blank is escaped where it is named: a filler, a mark on nothing, tags and a private
    # code point alone; a tag or a grapheme joiner on a letter builds nothing, and a mark on a letter stays
    for blank, shown in [("\u3164", "\\u3164"), ("\u034f", "\\u034f"), ("\uf8ff", "\\uf8ff"),
                         ("\U000e0041\U000e0042", "\\U000e0041\\U000e0042")]:  # fmt: skip
        run = run_main(capsys, "--set", f"hardware.target.name={blank}")
        assert_clean_error(run, f"--set hardware.target.name={shown}: hardware.target.name: is ")
    run = run_main(capsys, "--set", "hardware.target.name=X\U000e0041Y \u00a9\U000e0041 K\u00e9 Ke\u0301 \u2764\ufe0f")
    assert "the estimate is for X\\U000e0041Y \u00a9\\U000e0041 K\u00e9 Ke\u0301 \u2764\ufe0f, but" in run.err
    # a joiner that joins nothing, or ASCII letters, would make a key read as the key it suggests
    for key in (
        "native_engine.overhead_cut\u200d",
        "native_engine.\u200doverhead_cut",
        "native_engine.overhead_cut\u17b4",
    ):
        run = run_main(capsys, "--set", f"{key}=0.3")
        assert_clean_error(run, f"{key.encode('unicode_escape').decode()}: unknown key (did you mean native_engine.")
    # what builds a character stays: a keycap, an emoji with a selector after an arrow, a kanji's variant, a
    # grapheme joiner in Hebrew, Devanagari joined by a joiner after its virama
    texts = ["1\ufe0f\u20e3", "\U0001f642\u200d\u2194\ufe0f", "\u845b\U000e0100",
             "\u05dc\u05b7\u034f\u05b4\u05dd", "\u0915\u094d\u200d\u0937"]  # fmt: skip
    run = run_main(capsys, "--set", f"hardware.target.name={' '.join(texts)}")
    assert f"the estimate is for {' '.join(texts)}, but" in run.err


@pytest.mark.parametrize("fmt", [["--format", "table"], ["--format", "markdown"], ["--explain"], ["--format", "csv"]])
def test_a_gpu_name_cannot_steer_the_terminal(capsys: pytest.CaptureFixture[str], fmt: list[str]) -> None:
    run = run_main(capsys, "--set", "hardware.target.name=B\x1b[31m300\u0007", *fmt)
    assert run.code == 0, run.err
    assert "\x1b" not in run.out and "\x07" not in run.out
    if fmt != ["--format", "csv"]:
        assert "B\\x1b[31m300\\x07" in run.out


def test_every_csv_cell_is_escaped_where_it_is_written(write_calibration: Any) -> None:
    """CSV gets no pass over its whole text, as tables do: a swept text and the file's name come out escaped,
    and a reader finds one row per scenario and point."""
    path = write_calibration(DEFAULT_CALIBRATION.read_text(), name="new\nline\x1b.json")
    run = run_script("--calibration", str(path), "--sweep", 'hardware.target.name="B\\u001b300","x\\ny\\ud800"',
                     "--format", "csv")  # fmt: skip
    assert run.code == 0, run.err
    assert run.out.isascii() and run.out.replace("\n", "").isprintable()
    rows = list(csv.DictReader(io.StringIO(run.out)))
    assert len(rows) == 2 * 8 and run.out.count("\n") == 1 + 2 * 8
    assert {row["hardware.target.name"] for row in rows} == {"B\\x1b300", "x\\ny\\ud800"}
    assert {row["calibration_file"] for row in rows} == {str(path).replace("\n", "\\n").replace("\x1b", "\\x1b")}


@pytest.mark.parametrize(
    "fmt", [["--format", "table"], ["--format", "markdown"], ["--explain"], ["--format", "json"], ["--format", "csv"]]
)
def test_a_lone_surrogate_in_the_calibration(write_calibration: Any, fmt: list[str]) -> None:
    """JSON may hold "\\ud800", which no encoder can write; every format shows it escaped."""
    text = DEFAULT_CALIBRATION.read_text().replace('"name": "B300"', '"name": "B\\ud800300"')
    run = run_script("--calibration", str(write_calibration(text)), *fmt)
    assert run.code == 0, run.err
    if fmt[-1] not in ("json", "csv"):  # they do not print the GPU's name
        assert "\\ud800" in run.out


NEWLINES = {  # key path -> a text with a newline in it, in the calibration file (not echoed as an option)
    "hardware.target.name": "EV\nIL",
    "anchors.measured_on": "ME\nASURED",
    "sglang.max_budget_source": "RE\nASON",
    "measurements[0].label": "LA\nBEL",
    "measurements[0].source": "SO\nURCE",
}


@pytest.mark.parametrize(
    "fmt", [[], ["--all"], ["--format", "markdown", "--all"], ["--explain"], ["--format", "json"], ["--format", "csv"]]
)
def test_a_newline_in_calibration_text_stays_on_its_line(
    capsys: pytest.CaptureFixture[str], write_calibration: Any, fmt: list[str]
) -> None:
    """A name, a source or a label shows its newline as \\n in every format and never breaks a line."""
    doc: object = json.loads(MEASURED.read_text())
    for path, text in NEWLINES.items():
        doc = eb.set_path(doc, eb.parse_path(path), text)
    run = run_main(capsys, "--calibration", str(write_calibration(doc)), *fmt)
    assert run.code == 0, run.err
    for text in NEWLINES.values():
        assert text not in run.out + run.err
    if "json" in fmt:
        assert json.loads(run.out)["measurements"][0]["label"] == "LA\\nBEL"
    elif "csv" in fmt:  # no GPU name in CSV; the measurements' table has the label
        assert "\nLA\\nBEL," in run.out
    elif "markdown" in fmt:  # the backslash escaped for Markdown too
        assert "on EV\\\\nIL" in run.out and "| LA\\\\nBEL " in run.out
    else:
        assert "on EV\\nIL" in run.out and ("LA\\nBEL" in run.out or not fmt)  # the default names the worst only


# --- The output streams ------------------------------------------------------------------------


def test_stdout_closed() -> None:
    run = shell("TOOL >&-")
    assert run.code == 1
    assert run.err.count("\n") == 1 and run.err.startswith("estimate_b300: cannot write the output")


def test_a_fault_in_making_the_output_is_not_called_a_write_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """The output is made as it is written; a ValueError in making it is the tool's, not stdout's."""

    def faulty(report: eb.Report, style: eb.Style) -> Iterator[str]:
        yield "{"
        raise ValueError("a fault in a renderer")

    monkeypatch.setitem(eb.RENDERERS, "json", faulty)
    with pytest.raises(ValueError, match="a fault in a renderer"):
        eb.main(["--format", "json"])


def test_stdout_full() -> None:
    run = shell("TOOL --format json > /dev/full")
    assert run.code == 1 and run.err.count("\n") == 1 and "No space left on device" in run.err


def test_warnings_follow_the_output_and_give_way_to_its_failure() -> None:
    """A terminal shows the warnings under the output; an output that fails has its one line on stderr alone."""
    warns = "--set moe_curve.points[1].ms=3"  # faster than the weights can be read: a warning
    run = shell(f"TOOL {warns} --format json 2>&1")
    output, _, after = run.out.rpartition("}\n")
    warnings = json.loads(output + "}")["warnings"]
    assert run.code == 0 and warnings
    assert after.startswith("estimate_b300: warning: ") and after.count("\n") == len(warnings)
    for failing in ("> /dev/full", ">&-"):
        run = shell(f"TOOL {warns} {failing}")
        assert run.code == 1 and run.err.count("\n") == 1 and run.err.startswith("estimate_b300: cannot write")


def test_a_reader_that_leaves_early() -> None:
    run = shell("TOOL --sweep native_engine.overhead_cut=0:0.9:0.001 --format csv | head -1")
    assert run.code == 0 and run.err == "" and run.out.startswith("native_engine.overhead_cut,drafter")


@pytest.mark.parametrize("redirect", ["2>/dev/full", "2>&-"])
def test_a_failing_stderr_changes_nothing_else(redirect: str) -> None:
    good = shell(f"TOOL --format json {redirect}")
    assert good.code == 0 and json.loads(good.out)
    bad = shell(f"TOOL --set native_engine.overhead_cut=2 {redirect}")
    assert bad.code == 2 and bad.out == ""
    warned = shell(f"TOOL --set moe_curve.points[1].ms=3 --format json {redirect}")
    assert warned.code == 0 and json.loads(warned.out)["warnings"]


def test_an_output_encoding_that_cannot_write_text() -> None:
    """Python's idna codec takes no line of more than 63 letters between dots: one line on stderr, in ASCII."""
    run = run_script(env={"PYTHONIOENCODING": "idna"})
    assert run.code == 1 and run.err.count("\n") == 1 and "Traceback" not in run.err
    assert run.err.startswith("estimate_b300: cannot write the output in the encoding idna (")
    assert run.err.endswith("expected an encoding of text such as utf-8 (PYTHONIOENCODING)\n")
    assert_clean_error(run_script("--bogus", env={"PYTHONIOENCODING": "idna"}), "unrecognized arguments: --bogus")


@pytest.mark.parametrize(("encoding", "line_break"), [("punycode", r"b'\n-'"), ("unicode_escape", r"b'\\n'")])
def test_an_output_encoding_that_would_write_no_lines(encoding: str, line_break: str) -> None:
    """Both write any text, but not its lines: the output would be one garbled line (punycode ends each write
    with a "-"), and so would an error or a warning, which goes to stderr in ASCII instead."""
    run = run_script("--format", "json", env={"PYTHONIOENCODING": encoding})
    assert (run.code, run.out) == (1, "")
    assert run.err == (
        f"estimate_b300: cannot write the output in the encoding {encoding.replace('_', '-')} (it writes a line "
        f"break as {line_break}); expected an encoding of text such as utf-8 (PYTHONIOENCODING)\n"
    )
    bogus = run_script("--bogus", env={"PYTHONIOENCODING": encoding})
    assert_clean_error(bogus, "unrecognized arguments: --bogus")
    assert bogus.err.endswith("; see --help\n")


@pytest.mark.parametrize("typed", ["native_engine.overhead_cut =0.3", " native_engine.overhead_cut=0.3"])
def test_a_key_that_differs_only_in_white_space_is_told_so(capsys: pytest.CaptureFixture[str], typed: str) -> None:
    """The key and the suggestion read alike in the message: 'overhead_cut : unknown key (did you mean
    overhead_cut?)'."""
    assert_clean_error(run_main(capsys, "--set", typed), ", without the white space?)")


def test_an_error_names_the_options_in_its_section_and_counts_the_rest(capsys: pytest.CaptureFixture[str]) -> None:
    """Every --set was named, the cause among them: 499 made a line of 9,000 characters. Past ten, those that set
    a value come first, at the key at fault, then in its section."""
    many = [x for i in range(499) for x in ("--set", f"native_engine.k{i}=1")]
    run = run_main(capsys, *many)
    assert_clean_error(run, "native_engine.k9=1 and 489 more options: native_engine.k0: unknown key")  # 10 named
    assert len(run.err) < 600
    values = ["hardware.target.mem_bandwidth_tb_s=8", "hardware.reference.mem_bandwidth_tb_s=1.8",
              "sglang.max_budget=8", "native_engine.overhead_cut=0.4", "stronger_drafter.spec_scale=1.5",
              "stronger_drafter.block=16", "stronger_drafter.budget=32", "stronger_drafter.attn_base_scale=1.03",
              "anchors.ddtree.block=8", "anchors.ddtree.budget=8", "anchors.ar_tok_s=5000"]  # fmt: skip
    run = run_main(capsys, *[x for v in values for x in ("--set", v)])  # the key at fault, set last, is named
    assert_clean_error(run, "with --set anchors.ar_tok_s=5000 and 1 more option: anchors.ar_tok_s: the measured")
    kinds = ("note", "ms_note", "m_note", "basis_note")
    notes = [x for i in range(11) for x in ("--set", f"moe_curve.points[{i % 3}].{kinds[i // 3]}=x")]
    run = run_main(capsys, *notes, "--set", "stronger_drafter.block=2")  # a value before the texts
    assert_clean_error(run, "with --set stronger_drafter.block=2 and 2 more options: stronger_drafter.accept[0]: 12")
    few = run_main(capsys, "--set", "native_engine.overhead_cut=0.3", "--set", "stronger_drafter.block=2")
    assert_clean_error(few, "with --set native_engine.overhead_cut=0.3 with --set stronger_drafter.block=2: ")


@pytest.mark.parametrize(
    "args",
    [
        ["--set", f"anchors.ar_tok_s={'x' * 100_000}"],
        ["--sensitivity", "--scenario", f"stronger/native@{'9' * 100_000}"],
        ["--sweep", f"anchors.ar_tok_s={'x' * 100_000}"],
        ["--measured", f"current/native@{'x' * 100_000}=400"],
        ["--sweep", "anchors.ar_tok_s=1,2", "--set", f"anchors.ddtree.tok_s={'x' * 100_000}"],
        ["--measured", f"current/native={'x' * 100_000}"],
        ["--fit", f"native_engine.{'x' * 100_000}", "--measured", "current/native=400"],
        ["--sweep", f"stronger_drafter.{'x' * 100_000}=1"],
        ["--set", f"hardware.target.name={'x' * 100_000}", "--set", "hardware.target={}"],
        ["--sweep", f"native_engine.overhead_cut={'9' * 5000}:1:1"],
        ["--set", f"native_engine.{'k' * 300}=1", "--set", f"native_engine.{'k' * 300}=2"],
        ["--set", f"native_engine.{'k' * 300}=1", "--sweep", "native_engine=1,2"],
        ["--set", f"native_engine.overhead_cut.{'k' * 300}=1"],
        ["--tablefmt", "q" * 5000],
        ["--format", "q" * 5000],
        ["--calibration", "q" * 5000],
        ["--bogus=" + "x" * 5000],  # argparse's own messages
        ["--se=" + "x" * 5000],  # ambiguous
        ["--all=it's" + "x" * 5000],  # repr quotes it in double quotes
        ["--calibration", "calibration.json", *(f"calibration_variant_{i}.json" for i in range(300))],  # a glob
        ["x" * 1000] * 999,
    ],
)
def test_a_long_value_is_echoed_shortened(capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    """A 100 KB value once made a 100 KB line on stderr, and an @ACCEPT one of 200 KB."""
    run = run_main(capsys, *args)
    assert_clean_error(run)
    assert len(run.err) < 600 and ("..." in run.err or " more; see --help" in run.err)  # --tablefmt's: 450


@pytest.mark.parametrize("args", [[], ["--format", "json"], ["--explain"], ["--tablefmt", "fancy_grid"]])
def test_an_output_encoding_that_encodes_nothing(args: list[str]) -> None:
    """Python's `undefined` codec raises UnicodeError itself, not UnicodeEncodeError: the same one line."""
    run = run_script(*args, env={"PYTHONIOENCODING": "undefined"})
    assert run.code == 1 and run.out == "" and run.err.count("\n") == 1 and "Traceback" not in run.err
    assert run.err.startswith("estimate_b300: cannot write the output in the encoding undefined (")


@pytest.mark.parametrize(
    ("encoding", "why"), [("unicode_escape", "unicode-escape (it writes a line break as"), ("idna", "idna (label")]
)
def test_an_output_encoding_that_writes_no_lines_is_told_before_a_table_format(encoding: str, why: str) -> None:
    """unicode_escape writes a line break as two bytes, idna no line of 64 characters: a box format's usage error
    suggested --no-chart, with which the output then failed as it would anyway."""
    run = run_script("--tablefmt", "fancy_grid", env={"PYTHONIOENCODING": encoding})
    assert run.code == 1 and run.out == "" and run.err.count("\n") == 1
    assert run.err.startswith(f"estimate_b300: cannot write the output in the encoding {why}")


def test_an_output_encoding_that_cannot_draw_the_table_format() -> None:
    run = run_script("--tablefmt", "fancy_grid", env={"PYTHONIOENCODING": "ascii"})
    assert_clean_error(run, "--tablefmt fancy_grid draws with characters", "(ascii)")
    plain = run_script(env={"PYTHONIOENCODING": "ascii"})
    assert plain.code == 0 and plain.out.isascii() and "?" not in plain.out


def test_only_the_chart_turns_ascii_on_and_a_format_is_checked_against_it() -> None:
    """shift_jis has box drawing but not the chart's shades; cp1252 has ü but not the shades."""
    sjis = {"PYTHONIOENCODING": "shift_jis"}
    boxes = run_script("--tablefmt", "simple_grid", "--no-chart", env=sjis, encoding="shift_jis")
    assert boxes.code == 0 and "\u250c" in boxes.out and "\\u250c" not in boxes.out  # as themselves
    told = "(ascii: shift_jis cannot write the chart's blocks) cannot show"
    assert_clean_error(run_script("--tablefmt", "simple_grid", env=sjis, encoding="shift_jis"), told)
    csv = run_script("--set", "hardware.target.name=Gr\u00fcne", "--format", "csv", env={"PYTHONIOENCODING": "cp1252"},
                     encoding="cp1252")  # fmt: skip
    assert csv.code == 0 and "Gr\u00fcne" in csv.out
    escaped = run_script(env={"PYTHONIOENCODING": "raw_unicode_escape"}, encoding="ascii")
    assert escaped.code == 0 and escaped.out.isascii() and "\\u2588" not in escaped.out and "####" in escaped.out


@pytest.mark.parametrize("columns", ["99999999999999999999999", "1000000000", "-5", "wide", ""])
def test_any_columns_is_clamped_or_ignored(columns: str) -> None:
    run = run_script(env={"COLUMNS": columns})
    assert run.code == 0 and run.err == ""
    assert max(map(len, run.out.splitlines())) <= 1000


@pytest.mark.parametrize("columns", ["1_2_0", "\u0661\u0662\u0660", " 120", "+120"])
def test_columns_is_read_only_as_ascii_digits(columns: str) -> None:
    """int() would read each of these as 120; the chart is 80 wide by default, and as wide as COLUMNS."""
    chart_width = max(map(len, run_script(env={"COLUMNS": columns}).out.splitlines()))
    assert chart_width == max(map(len, run_script().out.splitlines())) < 120


def test_help_wraps_at_the_width_the_output_takes() -> None:
    """--help follows the tool's one width rule: COLUMNS=30 is clamped to 60, so the options wrap at 58 columns
    (argparse's own margin of 2), as at COLUMNS=60; the description and the examples stay as written."""
    run, same = (run_script("--help", env={"COLUMNS": columns}) for columns in ("30", "60"))
    assert run.code == 0 and run.err == ""
    assert run.out == same.out

    def widest_option(text: str) -> int:  # the options and their help, not the groups' titles
        lines = text[text.index("options:") : text.index("examples:")].splitlines()
        return max(len(line) for line in lines if line.startswith("  "))

    assert widest_option(run.out) <= 58 < widest_option(run_script("--help", env={"COLUMNS": "80"}).out)


def test_bytes_in_the_environment_that_are_not_utf8() -> None:
    env = {k.encode(): v.encode() for k, v in os.environ.items() if k != "COLUMNS"} | {b"COLUMNS": b"\xff\xfe"}
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, env=env, cwd=ROOT, timeout=60)  # type: ignore[arg-type]
    assert proc.returncode == 0 and proc.stderr == b""


def test_a_working_directory_that_was_deleted(tmp_path: Path) -> None:
    run = shell("mkdir gone && cd gone && rmdir ../gone && TOOL --format json", cwd=tmp_path)
    assert run.code == 0, run.err
    assert json.loads(run.out)["provenance"]["calibration_file"] == str(DEFAULT_CALIBRATION)


# --- Files ---------------------------------------------------------------------------------------


def test_an_endless_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert_clean_error(run_main(capsys, "--calibration", "/dev/zero"), "/dev/zero: is larger than 4 MiB")


def test_a_missing_key_among_a_file_of_near_misses(capsys: pytest.CaptureFixture[str], write_calibration: Any) -> None:
    """An object of 230,000 keys like the one missing, within the size limit: the hint compares 5,000 of them, so
    the error comes at once (comparing every key had taken 3 s)."""
    doc = default_doc()
    del doc["anchors"]["ar_tok_s"]
    doc["anchors"] |= {f"ar_tok{i:06d}": 0 for i in range(230_000)}
    path = write_calibration(json.dumps(doc, separators=(",", ":")))
    assert path.stat().st_size < eb.MAX_FILE_BYTES
    start = time.perf_counter()
    assert_clean_error(run_main(capsys, "--calibration", str(path)), "anchors.ar_tok_s: missing; expected a number > 0")
    assert time.perf_counter() - start < 2


def test_a_named_pipe_waits_for_its_writer(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that opens the pipe late is read, one that opens it and closes it leaves it empty, and one that
    never comes is waited for no longer than a writer that never finishes."""
    fifo = tmp_path / "cal.fifo"
    os.mkfifo(fifo)
    late = subprocess.Popen(["sh", "-c", f"sleep 0.5; cat {DEFAULT_CALIBRATION} > {fifo}"])
    try:
        run = run_main(capsys, "--calibration", str(fifo), "--format", "json")
    finally:
        late.wait(5)
    assert run.code == 0
    assert run.json()["provenance"]["calibration_sha256"] == eb.read_document(str(DEFAULT_CALIBRATION))[1]
    closes = subprocess.Popen(["sh", "-c", f"sleep 0.3; : > {fifo}"])
    try:
        assert_clean_error(run_main(capsys, "--calibration", str(fifo)), "cal.fifo: is empty; expected a JSON object")
    finally:
        closes.wait(5)
    monkeypatch.setattr(eb, "MAX_READ_SECONDS", 0.3)
    start = time.perf_counter()
    assert_clean_error(run_main(capsys, "--calibration", str(fifo)), "cal.fifo: did not end within 0.3 s")
    assert 0.3 <= time.perf_counter() - start < 2


def test_a_pipe_whose_writer_never_finishes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer holds the pipe open and sends a little, then nothing: an error once the wait is up, not a hang."""
    monkeypatch.setattr(eb, "MAX_READ_SECONDS", 0.3)
    fifo = tmp_path / "cal.fifo"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR)  # a writer that stays, without blocking this test
    try:
        os.write(writer, b'{"schema_version": ')
        start = time.perf_counter()
        run = run_main(capsys, "--calibration", str(fifo))
        assert 0.3 <= time.perf_counter() - start < 2
    finally:
        os.close(writer)
    assert_clean_error(run, "cal.fifo: did not end within 0.3 s; expected a file, or a pipe whose writer finishes")


def test_a_pipe_that_ends_is_read_whole(tmp_path: Path) -> None:
    """`cat calibration.json | estimate-b300 --calibration /dev/stdin`, its first bytes late."""
    run = shell(f"(sleep 0.5; cat {DEFAULT_CALIBRATION}) | TOOL --calibration /dev/stdin --format json", cwd=tmp_path)
    assert run.code == 0, run.err
    assert json.loads(run.out)["provenance"]["calibration_sha256"] == eb.read_document(str(DEFAULT_CALIBRATION))[1]


def test_a_pipe_read_at_a_descriptor_past_1023() -> None:
    """With 1,100 files open the calibration's descriptor is past what select() takes: a traceback (found by an
    attack). Its first bytes come late, so the read must wait."""
    if shutil.which("bash") is None:
        pytest.skip("needs bash, for descriptors past 9")
    opened = '{ ulimit -n 2048 || exit 77; } && for i in $(seq 3 1100); do eval "exec $i</dev/null"; done'
    tool = f"{sys.executable} {SCRIPT} --calibration /dev/stdin --format json"
    script = f"{opened} && (sleep 0.3; cat {DEFAULT_CALIBRATION}) | {tool}"
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60)
    if proc.returncode == 77:
        pytest.skip("this user may not open 2,048 files")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["provenance"]["calibration_file"] == "/dev/stdin"


def test_a_key_given_twice(capsys: pytest.CaptureFixture[str], write_calibration: Any) -> None:
    text = DEFAULT_CALIBRATION.read_text().replace('"overhead_cut": 0.4,', '"overhead_cut": 0.4, "overhead_cut": 0.3,')
    run = run_main(capsys, "--calibration", str(write_calibration(text)))
    assert_clean_error(run, "native_engine.overhead_cut: appears twice in its object")
    for twice, named in (
        ('{"a": {"x": 1, "x": 2}, "a": 3}', "a: appears"),  # the object with "x" twice is gone from the document
        ('{"a": [{"b": {"x": 1, "x": 2}, "b": 3}], "a": 4, "c": {"y": 1, "y": 2}}', "c.y: appears"),  # read first
        ('{"a": [[{"x": 1}, {"x": 1, "x": 2}]]}', "a[0][1].x: appears"),
        ('{"a": ' + "[" * 900 + '{"x": 1, "x": 2}' + "]" * 900 + ', "a": 1}', "a: appears"),
    ):
        assert_clean_error(run_main(capsys, "--calibration", str(write_calibration(twice))), named)
    shadowed = DEFAULT_CALIBRATION.read_text().replace(
        "{", '{"native_engine": {"overhead_cut": 0.3, "overhead_cut": 0.5},', 1
    )
    run = run_main(capsys, "--calibration", str(write_calibration(shadowed)))
    assert_clean_error(run, ": native_engine: appears twice in its object")
    wide = "{" + ",".join(f'"k{i}": 0' for i in range(50_000)) + ', "k49999": 1}'  # the key met again is the last
    start = time.perf_counter()
    assert_clean_error(run_main(capsys, "--calibration", str(write_calibration(wide))), "k49999: appears twice")
    assert time.perf_counter() - start < 2  # the check is one pass, not a count of each key again
    deep = '{"a": ' + "[" * 900 + "[]," * 100_000 + '{"x": 1, "x": 2}' + "]" * 900 + "}"  # 100,000 lists, 900 deep
    many = '{"a": [' + ",".join(['{"b": 1, "b": 2}'] * 200_000) + "]}"  # 200,000 objects with a key twice
    long_path = "a" + "[0]" * 899 + "[100000].x"  # named by both its ends, as every path past 80 characters is
    for text, named in ((deep, f"{long_path[:50]}...{long_path[-27:]}: appears"), (many, "a[0].b: appears")):
        start = time.perf_counter()
        assert_clean_error(run_main(capsys, "--calibration", str(write_calibration(text))), named)
        assert time.perf_counter() - start < 2  # a key path is made for the one object the error names


def _many_ranges(doc: dict[str, Any]) -> None:
    extra = {f"moe_curve.points[{i}].ms": {"relative": 0.1, "source": "x"} for i in range(3)}
    extra |= {f"stronger_drafter.accept[{i}]": {"relative": 0.01, "source": "x"} for i in range(2)}
    doc["ranges"].update(extra)


LONG_LISTS = [
    (lambda d: d["moe_curve"].update(points=[{"m": i, "ms": float(i)} for i in range(1, 1002)]), "has 1,001 entries"),
    (lambda d: d["stronger_drafter"].update(accept=[1 + i / 10 for i in range(65)]), "accept: has 65 entries"),
    (_many_ranges, "ranges: has 11 ranges; expected at most 10"),
]


@pytest.mark.parametrize(("edit", "fragment"), LONG_LISTS)
def test_lists_have_a_limit(
    capsys: pytest.CaptureFixture[str], write_calibration: Any, edit: Any, fragment: str
) -> None:
    assert_clean_error(run_main(capsys, "--calibration", str(write_calibration(mutated(edit)))), fragment)


@pytest.mark.parametrize("fit", ["linear", "experts"])
def test_sensitivity_at_the_largest_curve_and_the_most_ranges(
    capsys: pytest.CaptureFixture[str], write_calibration: Any, fit: str
) -> None:
    """1,024 corners over a curve of 1,000 points: each re-reads only the points it changes (it took 11 s), and
    the experts fit of a curve the corners change counts the distinct experts at each M once."""
    doc = default_doc()
    distinct = [384 * (1 - (1 - 8 / 384) ** m) for m in range(1, 1001)]  # as uniform routing gives for Kimi K2
    doc["moe_curve"]["points"] = [{"m": m, "ms": 0.5 + 0.25 * d} for m, d in enumerate(distinct, 1)]
    doc["moe_curve"]["fit"] = fit
    doc["ranges"].update({f"moe_curve.points[{i}].ms": {"relative": 0.05, "source": "x"} for i in (3, 8, 31, 32)})
    start = time.perf_counter()
    run = run_main(capsys, "--calibration", str(write_calibration(doc)), "--sensitivity", "--format", "json")
    assert time.perf_counter() - start < 4.0
    studied = run.json()["sensitivity"]
    assert studied["band"]["combinations"] == 1024
    assert studied["band"]["tok_s_min"] < studied["tok_s"] < studied["band"]["tok_s_max"]


def test_a_sweep_of_a_point_of_the_largest_curve(capsys: pytest.CaptureFixture[str], write_calibration: Any) -> None:
    """The physical cross-check reads each point once, not the whole curve at every sweep point (found by an
    attack: 101 points took 12 s, 0.4 s after), and gives what --set gives at the same value."""
    doc = default_doc()
    doc["moe_curve"]["points"] = [{"m": m, "ms": 0.5 + 0.25 * 384 * (1 - (1 - 8 / 384) ** m)} for m in range(1, 1001)]
    path = str(write_calibration(doc))
    start = time.perf_counter()
    run = run_main(capsys, "--calibration", path, "--sweep", "moe_curve.points[5].ms=9:10:0.01", "--format", "json")
    assert time.perf_counter() - start < 4.0
    last = run.json()["sweep"][-1]
    assert last["values"] == {"moe_curve.points[5].ms": 10.0}
    single = run_main(capsys, "--calibration", path, "--set", "moe_curve.points[5].ms=10", "--format", "json").json()
    assert last["scenarios"] == single["scenarios"]


def test_a_fit_at_the_largest_curve_and_the_most_measurements(
    capsys: pytest.CaptureFixture[str], write_calibration: Any
) -> None:
    """100 measurements on 90 trees over a curve of 1,000 points: each prediction hashes the curve for the model's
    caches, once per curve now (it took 5-6 s, under 1 s after). A fit of 2 values with leave-one-out."""
    doc = default_doc()
    doc["moe_curve"]["points"] = [{"m": m, "ms": 0.5 + 0.08 * m**0.8} for m in range(1, 1001)]
    doc.pop("sglang")
    doc["measurements"] = [
        {"decode": "autoregressive", "pipeline": "native", "tok_s": 200.0}
        if i % 10 == 0
        else {
            "drafter": ["current", "stronger"][i % 2],
            "pipeline": "native",
            "block": 16,
            "budget": 8 + i,
            "accept": 5.0 + i % 2,
            "tok_s": 420.0 + i,
        }
        for i in range(100)
    ]
    start = time.perf_counter()
    run = run_main(
        capsys, "--calibration", str(write_calibration(doc)), "--fit", "native_engine.overhead_cut",
        "--fit", "stronger_drafter.spec_scale", "--format", "json",
    )  # fmt: skip
    assert time.perf_counter() - start < 4.0
    assert run.code == 0, run.err
    assert len(run.json()["measurements"]) == 100


# --- Values ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--sweep", "native_engine.overhead_cut=0:0.9:5e-324"], "about 1.80e+323 values; expected at most 100,000"),
        (["--sweep", "native_engine.overhead_cut=0:" + "9" * 400 + ":1"], "values; expected at most 100,000"),
        (
            ["--solve", "native_engine.overhead_cut", "--observed", "current/native=" + "9" * 400],
            "got an integer of 400 digits",
        ),
        (["--sweep", "native_engine.overhead_cut=0.1,0.2,"], "item 3 of 3 is empty"),
        (["--sweep", "native_engine.overhead_cut=0.1,,0.2"], "item 2 of 3 is empty"),
        (["--sweep", "native_engine.overhead_cut=1e400:1e400:1"], "START:STOP:STEP with numbers of sensible size"),
        (["--sweep", "native_engine.overhead_cut=0.2:0.6:1e400"], "START:STOP:STEP with numbers of sensible size"),
        (["--sweep", "native_engine.overhead_cut=0.2:0.6:1e-400"],  # not "about 4.00e+399 values"
         "0.2:0.6:1e-400: a step of 1e-400 is too small for a float and would read as 0; expected numbers of"),
        (["--set", "x=" + "[" * 1000 + "]" * 1000], "a value nested more than 32 deep"),
        # 32 lists around a number are 32 deep, not 33: the value is checked, and found not to be an object
        (["--set", "native_engine=" + "[" * 32 + "1" + "]" * 32], "native_engine: got a list; expected an object"),
        (["--set", "native_engine=" + "[" * 33 + "1" + "]" * 33], "a value nested more than 32 deep"),
        # a value 32 deep goes in a sweep's list as in --set; its list is not a level of the value
        (["--sweep", "stronger_drafter.accept=1," + "[" * 32 + "]" * 32], "accept=1: stronger_drafter.accept: got a"),
        (["--sweep", "stronger_drafter.accept=1," + "[" * 33 + "]" * 33], "a value nested more than 32 deep"),
        # past the 4,300 digits Python turns into an integer: not a text of 4,301 characters
        (["--set", "native_engine.overhead_cut=" + "1" * 4301], "an integer of more than 4,300 digits; expected a"),
        (["--set", "stronger_drafter.accept=[" + "1" * 4301 + "]"], "accept=[111"),
        (["--measured", "ar/native=-" + "1" * 5000], "111: an integer of more than 4,300 digits; expected a"),
        (["--set", ".".join(["a"] * 1000) + "=1"], "a key path of more than 16 parts"),
        (["--set", "moe_curve.points[²].ms=1"], "bad index [²]; expected [N] with a whole number N"),
        (["--sweep", "moe_curve.points[\u0661].ms=1"], "bad index [\u0661]; expected [N]"),
        (["--set", "moe_curve.points[1.5].ms=3"], "moe_curve.points[1.5].ms: bad index [1.5]; expected [N]"),
        (["--set", "moe_curve.points[1]x[2].ms=3"], "moe_curve.points[1]x[2].ms: bad index [1]x; expected [N]"),
        (["--set", "a[1.5]x=1"], "a[1.5]x: bad index [1.5]x; expected [N]"),  # up to the next "[" or "."
        (["--set", "a[1[2]=1"], "a[1[2]: bad index [1; expected [N]"),
        (["--set", "a[x.b.c.d[0]=1"], "a[x.b.c.d[0]: bad index [x.b.c.d; expected [N]"),
        (["--fit", "moe_curve.points[0][a.b].ms"], "ms: moe_curve.points[0][a.b].ms: bad index [a.b]; expected"),
        (["--set", f"moe_curve.points[{'9' * 5000}].ms=1"], "expected [N] with a whole number N"),
        (["--sweep", "ranges.anchors.ar_tok_s.relative=0.01,2"], "ranges.anchors.ar_tok_s.relative: a range (for"),
        (["--measured", "stronger/native@1e-400=500"],
         "--measured stronger/native@1e-400=500: 1e-400 is too small for a float and would read as 0; expected"),
        (["--solve", "a..b", "--observed", "current/native=463"], "--solve a..b: a..b: expected a key path"),
        (["--solve", "stronger_drafter.spec_scale", "--observed", "current/native=463"], "does not depend on it"),
        # an observation is at its own accept length: the one that gives 900 tok/s is 900 * 14.7311 / 1000
        (["--solve", "stronger_drafter.accept[1]", "--observed", "stronger/native@14=900"],
         "--solve: stronger_drafter.accept[1]: stronger/native@14 is observed at the accept length it names, 14, "
         "whatever the list holds, and its step does not depend on it: the accept length at which it gives 900 tok/s "
         "is tok/s * step / 1000 = 900 * 14.7311 / 1000 = 13.258; expected an assumption the step rests on"),
        (["--solve", "stronger_drafter.accept[1]", "--observed", "stronger/sglang=900"],
         "stronger/sglang@14 is observed at its default accept length, 14, whatever the list holds, and its step "
         "does not depend on it: the accept length at which it gives 900 tok/s is tok/s * step / 1000 = 900 * "
         "20.8843 / 1000 = 18.7959, outside the 1 to 17 its tree allows (block+1 = 17); and SGLang cannot verify"),
        (["--measured", "stronger/native@14=900", "--fit", "stronger_drafter.accept[1]"],
         "--fit: stronger_drafter.accept[1]: is one of the accept lengths of the stronger drafter's scenarios; a "
         "measurement keeps the accept length it was measured at, whatever the list holds, so no prediction"),
        (["--solve", "stronger_drafter.accept", "--observed", "current/native=900"],
         "stronger_drafter.accept: holds the accept lengths of the stronger drafter's scenarios; a measurement"),
        (["--solve", "stronger_drafter", "--observed", "current/native=900"],
         "stronger_drafter: holds 2 numbers --solve may vary (stronger_drafter.attn_base_scale, "
         "stronger_drafter.spec_scale); expected the key path of one of them"),
        (["--fit", "hardware.target", "--measured", "current/native=400"],
         "hardware.target: holds one number --fit may vary; expected its key path, hardware.target.mem_bandwidth_tb_s"),
        (["--sweep", f"native_engine.overhead_cut=0:1{'0' * 4300}:1{'0' * 4300}"],
         "native_engine.overhead_cut: got an integer of more than 4,300 digits; expected a finite number"),
        # named as typed: the whole text, and an accept length not rounded onto the limit it passes
        (["--solve", "native_engine.overhead_cut", "--observed", "current/native=415=3"],
         "--observed current/native=415=3: expected DRAFTER/PIPELINE[@ACCEPT]"),
        (["--solve", "native_engine.overhead_cut", "--observed", "current/native@9.0000001=415"],
         "--observed current/native@9.0000001=415: @9.0000001: 9.0000001 exceeds the tree's limit budget+1 = 9"),
        (["--sweep", "stronger_drafter.block=16,4", "--measured", "stronger/native@14=900"],
         "usage: --measured and --sweep cannot be combined: a measurement goes to the track record and --fit"),
        (["--solve", "native_engine.overhead_cut", "--observed", "current/native=5000.123456"],
         "current/native@4.4 reaches 5000.123456 tok/s only at 1.08869"),  # as typed, not 5000.12
        (["--solve", "native_engine.overhead_cut", "--observed", "current/native=1e-400"],
         "1e-400 is too small for a float"),
        (["--set", "ranges.native_engine.overhead_cut.relative=0.1"],
         "ranges.native_engine.overhead_cut.low: a range is {low, high} or {relative}, not both"),
        (["--set", "ranges.moe_curve.points[1].ms.relative=0.2"],
         "ranges.moe_curve.points[1].ms.relative: no such range in the calibration; a new range goes in with"),
        (["--set", 'ranges.anchors.ddtree.accept={"relative":0.1,"source":"s"}'],  # not "holds 3 numbers" in ranges
         "ranges.anchors.ddtree.accept: no such range in the calibration; a new range goes in with"),
        (["--set", 'ranges.model.hidden_size={"relative":0.1,"source":"s"}'],
         "ranges.model.hidden_size: no such range in the calibration; a new range goes in with"),
        (["--set", "hardware[0]=1"], "with --set hardware[0]=1: hardware[0]: the value there is an object, not a list"),
        (["--sensitivity", "--scenario", "stronger/native@0.5"],
         "--scenario stronger/native@0.5: @0.5: got 0.5; expected a number >= 1"),
    ],
)  # fmt: skip
def test_values_that_break_arithmetic(capsys: pytest.CaptureFixture[str], args: list[str], fragment: str) -> None:
    start = time.perf_counter()
    assert_clean_error(run_main(capsys, *args), fragment)
    assert time.perf_counter() - start < 1.0


LONG = "0" * 50_000  # digits: a pattern that backtracked over them took 26 s (wrapping) and over 20 s (a step)


@pytest.mark.parametrize(
    "args",
    [
        ["--set", f"native_engine.overhead_cut=0.3{LONG}"],  # the overrides' line wraps with it
        ["--set", f"stronger_drafter.accept=[12.{LONG},14,16]", "--all"],
        ["--set", f"native_engine.overhead_cut=0e{LONG}"],
        ["--sweep", f"native_engine.overhead_cut=0:0.5:0.1{LONG}"],
        ["--sweep", f"native_engine.overhead_cut=0:1:{'1' * 50_000}x"],  # not a number: refused
        ["--solve", "native_engine.overhead_cut", "--observed", f"current/native=463.{LONG}"],
    ],
)
def test_a_long_number_costs_no_more_than_its_length(capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    start = time.perf_counter()
    run = run_main(capsys, *args)
    assert time.perf_counter() - start < 1.0
    assert run.code == 0 or (run.code == 2 and "expected START:STOP:STEP" in run.err)


def test_a_long_index_is_shortened_where_the_message_echoes_it(capsys: pytest.CaptureFixture[str]) -> None:
    run = run_main(capsys, "--set", f"moe_curve.points[{'9' * 5000}].ms=1")
    assert_clean_error(run, "bad index [99999", "...9", "99999]; expected [N] with a whole number N")
    assert len(run.err) < 400


def test_a_number_no_float_holds_is_named_as_written(
    capsys: pytest.CaptureFixture[str], write_calibration: Callable[..., Path]
) -> None:
    """1e-400 read as 0 passed for a cut of 0, and the first line named 1e-400; 1e400 read as Infinity. Both are
    errors that name the number as written, on the command line and in the file. 5e-324 and -0.0 are floats."""
    run = run_main(capsys, "--set", "native_engine.overhead_cut=1e-400")
    assert_clean_error(run, "--set native_engine.overhead_cut=1e-400: 1e-400 is too small for a float and would read "
                            "as 0; expected a number of sensible size")  # fmt: skip
    assert_clean_error(run_main(capsys, "--set", "anchors.ar_tok_s=-1.5E+400"), "-1.5E+400 is too large for a float "
                       "and would read as -Infinity")  # fmt: skip
    text = (ROOT / "calibration.json").read_text().replace('"overhead_cut": 0.4', '"overhead_cut": 0.0004e-397')
    path = str(write_calibration(text))
    told = f"{path}: native_engine.overhead_cut: 0.0004e-397 is too small for a float"  # where it is, as written
    assert_clean_error(run_main(capsys, "--calibration", path), told)
    run = run_main(capsys, "--sweep", "native_engine.overhead_cut=1e-400:0.2:0.1", "--format", "csv")
    assert_clean_error(run, "--sweep native_engine.overhead_cut=1e-400:0.2:0.1: a value of 1e-400 is too small")
    for fine in ("5e-324", "-0.0", "0e400", "0.000"):
        assert run_main(capsys, "--set", f"native_engine.overhead_cut={fine}", "--format", "json").code == 0


def test_a_figure_past_any_sensible_size_names_its_inputs(capsys: pytest.CaptureFixture[str]) -> None:
    run = run_main(capsys, "--set", "stronger_drafter.spec_scale=1e300")
    assert_clean_error(
        run, "SPEC part: kept * spec_scale * SPEC with", "spec_scale = 1e+300 (stronger_drafter.spec_scale)"
    )


def test_tiny_inputs_print_at_a_bounded_width(capsys: pytest.CaptureFixture[str]) -> None:
    run = run_main(
        capsys, "--set", "stronger_drafter.spec_scale=1e-300", "--set", "stronger_drafter.attn_base_scale=1e-300"
    )
    assert run.code == 0, run.err
    assert not re.search(r"\d[\d.,]{24}", run.out)  # no figure printed with dozens of digits


def test_a_tiny_result_is_not_printed_as_0(capsys: pytest.CaptureFixture[str]) -> None:
    """A tree of a million tokens verifies at 0.0816-0.109 tok/s (JSON): printed to no places, that read as 0."""
    args = ["--set", "stronger_drafter.budget=1000000", "--no-chart"]
    tok_s = [s["tok_s"] for s in run_main(capsys, *args, "--format", "json").json()["scenarios"][3::2]]
    assert [f"{v:.2g}" for v in tok_s] == ["0.082", "0.096", "0.11"]  # native at accept 12, 14 and 16
    run = run_main(capsys, *args)
    assert "The stronger drafter at accept 12-16: 0.082-0.11 tok/s on the native engine," in flat(run.out)
    assert "stronger/native@14 (0.096 tok/s) spans 0.092 to 0.096 tok/s" in flat(run.out)
    native = [line.split() for line in run.out.splitlines() if line.startswith("native ") and "146260.05" in line]
    assert [row[6:8] for row in native] == [["0.082", "0.00027"], ["0.096", "0.00032"], ["0.11", "0.00036"]]
    markdown = run_main(capsys, *args, "--format", "markdown").out
    assert "| native   |     14 | 146250.82\\* |       4.49 | 4.74 | 146260.05 | 0.096 | 0.00032 |" in markdown


def test_a_huge_share_prints_with_its_exponent(capsys: pytest.CaptureFixture[str]) -> None:
    """A band 1e15 times the estimate it spans: its shares in 3 digits and an exponent, not 16 digits."""
    run = run_main(capsys, "--set", "stronger_drafter.spec_scale=1e14", "--no-chart")
    assert "spans 640 to 1243 tok/s (+1.45e+15% / +2.81e+15%)." in flat(run.out)
    assert "accept 12-16: 3.8e-11 to 5.1e-11 tok/s on the native engine" in flat(run.out)  # no dash to read as minus


def test_every_table_shows_a_tiny_or_huge_figure_as_the_text_does(capsys: pytest.CaptureFixture[str]) -> None:
    """A 100,000 TB/s target at a million tok/s: MoE(9) is 0.00016 ms, which "0.00" hid, in the tables, the chart
    and a sweep; AR at 1e-11 tok/s is a 2.2e14 ms step, 18 digits in a table and 2.2e+14 in --explain."""
    fast = ["--set", "hardware.target.mem_bandwidth_tb_s=1e5", "--set", "anchors.ar_tok_s=1e6", "--set",
            "anchors.ddtree.tok_s=3e6", "--set", 'ranges={"source": "x"}']  # fmt: skip
    run = run_main(capsys, *fast)
    assert "SGLang       4.4  0.00016    0.00098  0.00033   0.0015  3000000     1.00" in run.out
    assert "Step time, 7.19e-05 ms a column" in run.out and "  0.0015 ms             3000000 tok/s" in run.out
    sweep = run_main(capsys, *fast[:4], *fast[6:], "--sweep", "anchors.ddtree.tok_s=3e6,2e6").out.splitlines()
    assert sweep[sweep.index(next(line for line in sweep if line.startswith("-----"))) + 1].split()[1] == "0.0015"
    slow = run_main(capsys, "--set", "anchors.ar_tok_s=1e-11", "--set", "anchors.ddtree.tok_s=2e-11", "--no-chart")
    assert re.search(r"\nAR step +1000 / ar_tok_s +1e\+14 ", slow.out)  # not 100000000000000.00
    assert not re.search(r"\d{11}", slow.out)


def test_a_huge_error_shows_alike_everywhere(capsys: pytest.CaptureFixture[str]) -> None:
    """1e-6 tok/s measured against 463 predicted: an error of 4.6e10 (a fraction), 4.63e+10% in every place."""
    args = ["--measured", "current/native=0.000001", "--no-chart"]
    out = flat(run_main(capsys, *args, "--all").out)
    assert "within 4.63e+10% RMS (worst: current/native@4.4, +4.63e+10%)." in out
    assert "track record, 4.63e+10% RMS;" in out and " 462.7 +4.63e+10% --measured" in out
    assert run_main(capsys, *args, "--explain").out.endswith("  RMS over 1: 4.63e+10%\n")
    fit = flat(run_main(capsys, "--measured", "current/native=423", "--fit", "native_engine.overhead_cut").out)
    assert "RMS error 9.4% before, 0.0% after." in fit  # float rounding of 0 after a fit that meets it
    big = run_main(capsys, "--measured", "current/native=999999999.99", "--all", "--no-chart").out
    assert " 4.4  1e+09      462.7  -100.0%  --measured" in big  # 10 digits once rounded, in a table too


def test_a_warning_shows_a_share_as_the_tables_do(capsys: pytest.CaptureFixture[str]) -> None:
    points = '[{"m": 1, "ms": 1e-12}, {"m": 9, "ms": 1e-11}, {"m": 32, "ms": 3e-11}]'
    run = run_main(capsys, "--all", "--no-chart", "--set", f"moe_curve.points={points}")
    assert "8.26e+13% of peak bandwidth is impossible" in run.err and "  8.26e+13%" in run.out


def test_a_small_band_shows_its_tenths(capsys: pytest.CaptureFixture[str]) -> None:
    ranges = '{"source": "x", "anchors.ar_tok_s": {"relative": 0.01, "source": "y"}}'
    out = flat(run_main(capsys, "--set", f"ranges={ranges}").out)
    assert "spans 949 to 952 tok/s (-0.1% / +0.1%)." in out  # not -0% / +0%


def test_float_rounding_of_0_shows_as_0(capsys: pytest.CaptureFixture[str]) -> None:
    """A fit that meets its one measurement leaves residuals of float rounding (2.2e-16), and a range of an assumption
    the scenario does not read swings it by 5.7e-14 tok/s: both are 0, as the track record says."""
    fit = run_main(capsys, "--measured", "current/native=423", "--fit", "native_engine.overhead_cut", "--no-chart")
    assert "current/native@4.4  423.0   462.7  423.0  +0.0%   +0.0000" in fit.out
    args = ["--sensitivity", "--scenario", "current/sglang", "--set", "anchors.ar_tok_s=120", "--set",
            "anchors.ddtree.tok_s=317", "--no-chart"]  # fmt: skip
    rows = [line.split() for line in run_main(capsys, *args).out.splitlines() if line.startswith("anchors.ar_tok_s ")]
    assert rows == [["anchors.ar_tok_s", "120", "116.4", "to", "123.6", "317", "317", "0", "measured", "value;", "3%",
                     "run-to-run", "noise", "of", "a", "throughput", "measurement"]]  # fmt: skip


def test_an_extreme_block_is_quick() -> None:
    start = time.perf_counter()
    run = run_script(
        "--set", "stronger_drafter.block=1000000", "--set", "stronger_drafter.budget=1000000", "--format", "json"
    )
    assert run.code == 0, run.err
    assert time.perf_counter() - start < 3.0  # the start-up of a fresh interpreter included


@pytest.mark.parametrize(
    ("path", "value"),
    [("hardware.target.name", "B" * 501), ("measurements", [{"decode": "autoregressive", "pipeline": "native",
      "tok_s": 200, "source": "s " * 251}]), ("stronger_drafter.accept_source", "x" * 10**5)],
)  # fmt: skip
def test_a_text_longer_than_500_characters_is_refused(
    capsys: pytest.CaptureFixture[str], path: str, value: object
) -> None:
    run = run_main(capsys, "--set", f"{path}={json.dumps(value)}")
    assert_clean_error(run, "characters; expected at most 500")


def test_a_key_of_no_sensible_length_is_refused_quickly(
    capsys: pytest.CaptureFixture[str], write_calibration: Any
) -> None:
    doc = default_doc()
    doc["k" * 3_000_000] = 1  # a 3 MB file: difflib's hint for an unknown key took a second over it
    path = str(write_calibration(doc))
    start = time.perf_counter()
    run = run_main(capsys, "--calibration", path)
    assert time.perf_counter() - start < 1.0
    assert run.code == 2 and run.out == "" and run.err.count("\n") == 1 and len(run.err) < 300
    assert "(top level): has a key of 3,000,000 characters" in run.err and "expected at most 500" in run.err


def test_a_swept_string_is_escaped_in_json_too(capsys: pytest.CaptureFixture[str]) -> None:
    run = run_main(capsys, "--sweep", 'hardware.target.name="a\\nb\\u001b[31m\\ud800","c"', "--format", "json")
    assert run.code == 0, run.err
    values = [point["values"]["hardware.target.name"] for point in json.loads(run.out)["sweep"]]
    assert values == ["a\\nb\\x1b[31m\\ud800", "c"]


def test_the_longest_texts_everywhere_stay_quick(capsys: pytest.CaptureFixture[str], write_calibration: Any) -> None:
    """100 measurements whose label and source are 500 characters of one-letter words: every table wraps them."""
    doc = default_doc()
    doc["hardware"]["target"]["name"] = "B" * 500
    doc["measurements"] = [
        {"drafter": "current", "pipeline": "native", "accept": 4.4, "tok_s": 400 + i, "label": f"{i:03d} " + "a " * 248,
         "source": "b " * 250}
        for i in range(100)
    ]  # fmt: skip
    path = str(write_calibration(doc))
    for fmt in (["--all"], ["--all", "--tablefmt", "grid"], ["--format", "markdown", "--all"]):
        start = time.perf_counter()
        run = run_main(capsys, "--calibration", path, *fmt)
        assert run.code == 0, run.err
        assert time.perf_counter() - start < 0.5, fmt  # 0.1 s here; tabulate's own wrapping took 0.6-1.3 s


# --- Nothing absurd without a word -------------------------------------------------------------


def test_many_cases_of_one_warning_are_one_line(
    capsys: pytest.CaptureFixture[str], write_calibration: Callable[..., Path]
) -> None:
    """Found by an attack: a 1,000-point curve faster than the bandwidth allows gave 998 warning lines."""
    doc = default_doc()
    doc["moe_curve"]["points"] = [{"m": m, "ms": 0.1 * m, "basis": "measured"} for m in range(1, 1001)]
    run = run_main(capsys, "--calibration", str(write_calibration(doc)), "--format", "json")
    assert run.code == 0
    (line,) = run.err.splitlines()
    impossible = [p for p in run.json()["roofline"]["points"] if p["efficiency"] > 1]
    assert len(impossible) > 300
    assert line.startswith(f"estimate_b300: warning: moe_curve.points: M = {impossible[0]['m']} (measured, ")
    assert line.endswith(f"(and {len(impossible) - 1} more points like it)")


def test_a_whole_number_past_float_precision_prints_short(
    capsys: pytest.CaptureFixture[str], write_calibration: Callable[..., Path]
) -> None:
    """Found by an attack: a curve point's time of 10^300, as an integer, printed 301 digits in Markdown."""
    doc = default_doc()
    doc["moe_curve"]["points"][2:] = [{"m": 33, "ms": 24.45, "basis": "measured"},
                                      {"m": 10**6, "ms": 10**300, "basis": "assumed"}]  # fmt: skip
    run = run_main(capsys, "--calibration", str(write_calibration(doc)), "--format", "markdown", "--all")
    assert run.code == 0
    assert '"ms": 1e+300, "basis": "assumed"}' in run.out
    assert not re.search(r"\d{30}", run.out)


def test_direction_marks_are_escaped() -> None:
    """A right-to-left mark turns the neutral characters around it; inside a name it is shown, not obeyed."""
    assert eb.printable("B300\u200f (x)\u200e\u061c") == "B300\\u200f (x)\\u200e\\u061c"


@pytest.mark.parametrize("path", ["hardware.target.name", "hardware.reference.name", "anchors.measured_on"])
@pytest.mark.parametrize("blank", ["", " \\t", "\\u2028", "\\u200b", "\\u200f\\u0301", "\\u3164\\u00a0"])
def test_a_blank_name_is_refused(capsys: pytest.CaptureFixture[str], path: str, blank: str) -> None:
    """A name that prints as nothing would leave "on " in every title; blank is judged before escaping."""
    run = run_main(capsys, "--set", f'{path}="{blank}"')
    assert_clean_error(run, f"{path}: is blank; expected a text with at least one visible character")


def test_a_curve_that_falls_with_m_warns(capsys: pytest.CaptureFixture[str]) -> None:
    run = run_main(capsys, "--set", "moe_curve.points[2].ms=8", "--format", "json")
    assert run.code == 0
    assert run.err.startswith("estimate_b300: warning: moe_curve.points: the MoE time falls from 8.85 ms at M = 9")


def test_sweeps_warn_as_set_does_once_per_kind(capsys: pytest.CaptureFixture[str]) -> None:
    """At cut 0.99 the native step (MoE(33) = 1.04 ms plus 1% of the overhead) drops below the 4.47 ms floor."""
    args = [
        "--set",
        "moe_curve.points[2].ms=4",
        "--sweep",
        "native_engine.overhead_cut=0.1,98e-2,0.99",
        "--format",
        "csv",
    ]
    run = run_main(capsys, *args)
    assert run.code == 0 and run.out
    floors = [line for line in run.err.splitlines() if "stronger/native@12: the estimated step" in line]
    assert len(floors) == 1
    assert "at 2 of 3 sweep points (the first at native_engine.overhead_cut=98e-2)" in floors[0]  # as typed


# --- Large runs spread over the CPUs ----------------------------------------------------------


def on_two_cpus(tmp_path: Path) -> str:
    """A command that runs the tool as if the machine had two CPUs, so that it forks wherever the tests run."""
    wrapper = tmp_path / "on_two_cpus.py"
    wrapper.write_text(
        f"import os, runpy, sys\nos.sched_getaffinity = lambda pid: {{0, 1}}\nsys.argv[0] = {str(SCRIPT)!r}\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    return f"{sys.executable} {wrapper}"


@pytest.mark.parametrize(
    "args",
    [
        ["--sweep", "native_engine.overhead_cut=0:0.4998:0.0002", "--format", "json"],
        ["--sweep", "native_engine.overhead_cut=0:0.4998:0.0002", "--format", "csv"],
        ["--sweep", "stronger_drafter.budget=16:2600:1", "--format", "json"],
        ["--set", "moe_curve.points[2].ms=4", "--sweep", "native_engine.overhead_cut=0.9:0.99:0.00004"],  # warnings
        ["--sweep", "native_engine.overhead_cut=0:0.4998:0.0002", "--format", "markdown"],
    ],
)
def test_a_large_sweep_gives_the_same_output_on_one_cpu_and_on_many(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    """2,400-2,600 points: three chunks, done by two workers (the first does two), or one after another here."""
    forked = on_cpus(monkeypatch, 2)
    many = run_main(capsys, *args)
    assert len(forked) == (4 if "json" in args or "csv" in args else 2)  # the check; the rows of JSON and CSV
    alone = on_cpus(monkeypatch, 1)
    one = run_main(capsys, *args)
    assert not alone
    assert many.code == 0 and len(many.out) > 500_000
    assert many == one
    assert many.err.count("\n") == (3 if "--set" in args else 0)  # each warning once, over every chunk


def test_a_bad_point_in_a_late_chunk_fails_as_it_would_alone(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 3,865 tok/s the AR step leaves no ATTN_BASE: point 3,766, in the fourth chunk, the second worker's."""
    args = ["--sweep", "anchors.ar_tok_s=100:5000:1", "--format", "json"]
    forked = on_cpus(monkeypatch, 2)
    many = run_main(capsys, *args)
    assert len(forked) == 2
    assert_clean_error(many, "at --sweep anchors.ar_tok_s=3865: anchors.ar_tok_s: the measured anchors conflict")
    on_cpus(monkeypatch, 1)
    assert run_main(capsys, *args) == many


@pytest.mark.parametrize("option", ["--sweep", "--set"])
def test_a_point_wrong_in_two_sections_names_the_first_section(option: str) -> None:
    """Each value alone is a number the key may take; together both sections break: the one a full read meets
    first is named, whatever order Python's string hashing gives a set of section names."""
    args = [option, "anchors.ddtree.accept=20", option, "stronger_drafter.block=4"]
    runs = [run_script(*args, env={"PYTHONHASHSEED": str(seed)}) for seed in range(6)]
    assert_clean_error(runs[0], "anchors.ddtree.accept: 20 exceeds the tree's limit")
    assert all(run == runs[0] for run in runs)


@pytest.mark.parametrize(
    ("first", "then"),
    [
        ("hardware.target.mem_bandwidth_tb_s=-1", "moe_curve.points[0].ms=-1"),
        ("model.layers=0", "moe_curve.points[0].ms=-1"),
    ],
)
def test_a_sweep_tells_the_error_that_set_tells(capsys: pytest.CaptureFixture[str], first: str, then: str) -> None:
    """A curve point's time is read again apart from its section, yet in the section's place in the file."""
    told = run_main(capsys, "--set", first, "--set", then).err.split(": ", 2)[2]
    assert told.startswith(first.split("=")[0])
    for order in ((first, then), (then, first)):
        run = run_main(capsys, "--sweep", order[0], "--sweep", order[1])
        assert_clean_error(run)
        assert run.err.split(": ", 2)[2] == told


def test_a_swept_text_that_reads_as_a_number_is_told_in_quotes(capsys: pytest.CaptureFixture[str]) -> None:
    """--set echoes what was typed; a sweep point is told as it would be typed, so "0.3" is not 0.3."""
    run = run_main(capsys, "--sweep", 'native_engine.overhead_cut="0.3"')
    assert_clean_error(run, 'at --sweep native_engine.overhead_cut="0.3": native_engine.overhead_cut: got a string')
    named = run_main(capsys, "--sweep", "hardware.target.name=H200,B200", "--format", "csv")
    assert named.code == 0 and "(the first at hardware.target.name=H200)" in named.err
    deep = "[" * 33 + "]" * 33  # too deep for a value, so a text: typed back in quotes, it is one
    run = run_main(capsys, "--sweep", f'native_engine.overhead_cut="{deep}"')
    typed = f'native_engine.overhead_cut="{deep}"'
    assert_clean_error(run, f"at --sweep {typed[:50]}...{typed[-27:]}: ")  # in quotes, both ends kept
    run = run_main(capsys, "--sweep", 'native_engine.overhead_cut="\\"é\\""')
    assert_clean_error(run, 'at --sweep native_engine.overhead_cut="\\"é\\"": ')


def test_a_swept_list_object_or_null_is_read_as_set_reads_it(
    capsys: pytest.CaptureFixture[str], write_calibration: Any
) -> None:
    """A range on the third accept length: a sweep that leaves one accept length is refused, as --set refuses it;
    and any value that is a list, an object or null tells the error --set tells."""
    doc = default_doc()
    doc["ranges"]["stronger_drafter.accept[2]"] = {"low": 15, "high": 16.5, "source": "x"}
    path = str(write_calibration(doc))
    told = "ranges.stronger_drafter.accept[2]: not a number of the calibration"
    for value in ("stronger_drafter.accept=[14]", "sglang=null", 'sglang={"reason": "x"}', "model=null", "model={}"):
        set_, sweep = (run_main(capsys, "--calibration", path, option, value) for option in ("--set", "--sweep"))
        assert_clean_error(set_)
        assert_clean_error(sweep)
        assert sweep.err.split(": ", 2)[2] == set_.err.split(": ", 2)[2]  # past the file and the option
        assert (told in sweep.err) == value.startswith("stronger_drafter.accept")


def test_a_swept_list_in_a_grid_is_read_whole(capsys: pytest.CaptureFixture[str], write_calibration: Any) -> None:
    """A range on an accept length that a swept list leaves out is checked against the list at each point."""
    doc = default_doc()
    doc["ranges"]["stronger_drafter.accept[2]"] = {"low": 15, "high": 16.5, "source": "x"}
    path = str(write_calibration(doc))
    told = "ranges.stronger_drafter.accept[2]: not a number of the calibration"
    grid = run_main(
        capsys, "--calibration", path, "--sweep", "stronger_drafter.accept=[14]", "--sweep", "anchors.ar_tok_s=130,133"
    )
    assert_clean_error(grid, told)


def test_leave_one_out_gives_the_same_on_one_cpu_and_on_many(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, write_calibration: Any
) -> None:
    """40 measurements: their refits go to the workers, whole, and stopped by the budget after the same refit."""
    doc = default_doc()
    doc["measurements"] = [
        {"decode": "autoregressive", "pipeline": "native", "tok_s": 200.0 + i}
        if i % 10 == 0
        else {"drafter": eb.DRAFTERS[i % 2], "pipeline": "native", "block": 16, "budget": 8 + i, "accept": 5.0 + i % 2,
              "tok_s": 420.0 + 3 * i}
        for i in range(40)
    ]  # fmt: skip
    args = ["--calibration", str(write_calibration(doc)), "--fit", "native_engine.overhead_cut", "--fit",
            "stronger_drafter.spec_scale", "--format", "json"]  # fmt: skip
    runs, full = {}, eb.MAX_LOO_EVALUATIONS
    for budget in (full, 2_000):
        monkeypatch.setattr(eb, "MAX_LOO_EVALUATIONS", budget)
        for cpus in (2, 1):
            forked = on_cpus(monkeypatch, cpus)
            runs[budget, cpus] = run_main(capsys, *args)
            assert len(forked) == (2 if cpus == 2 else 0)
        assert runs[budget, 2] == runs[budget, 1]
    whole = [m["loo_residual"] for m in runs[full, 2].json()["fit"]["measurements"]]
    assert len(whole) == 40 and None not in whole
    stopped = re.search(r"leave-one-out stopped after (\d+) of 40 refits", runs[2_000, 2].err)
    assert stopped and 0 < int(stopped[1]) < 40
    cut = [m["loo_residual"] for m in runs[2_000, 2].json()["fit"]["measurements"]]
    assert cut == whole[: int(stopped[1])] + [None] * (40 - int(stopped[1]))


def _worker_task(i: int, parent: int, fail: str) -> tuple[int, bool]:
    """Task i and whether it ran in `parent`; in a worker, every third one kills the worker or raises."""
    here = os.getpid() == parent
    if not here and i % 3 == 1:
        if fail == "kill":
            os.kill(os.getpid(), 9)
        raise eb.CalibrationError("x", f"task {i} failed in a worker")
    return i, here


@pytest.mark.parametrize("fail", ["kill", "raise"])
def test_a_task_a_worker_does_not_finish_is_done_here(monkeypatch: pytest.MonkeyPatch, fail: str) -> None:
    forked = on_cpus(monkeypatch, 4)
    tasks = [functools.partial(_worker_task, i, os.getpid(), fail) for i in range(20)]
    results = list(eb.over_cpus(tasks))
    assert len(forked) == 4
    assert [i for i, _ in results] == list(range(20))
    # worker w does w, w + 4, ... and stops at its first failure (1, 4, 7, 10): the rest are done here
    assert [i for i, here in results if not here] == [0, 2, 3, 6]
    assert [i for i, here in results if here] == [1, 4, 5, 7, *range(8, 20)]


def no_worker_is_left() -> bool:
    """Whether this process has no child left, running or not yet reaped."""
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_an_error_here_comes_after_the_results_before_it(monkeypatch: pytest.MonkeyPatch) -> None:
    on_cpus(monkeypatch, 2)
    tasks = [functools.partial(_worker_task, i, -1, "raise") for i in range(10)]  # -1: it fails here too
    results = eb.over_cpus(tasks)
    assert next(results) == (0, False)
    with pytest.raises(eb.CalibrationError, match="task 1 failed in a worker"):
        next(results)
    assert no_worker_is_left()


def test_a_reader_that_stops_early_leaves_no_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    forked = on_cpus(monkeypatch, 2)
    results = eb.over_cpus([functools.partial(time.sleep, 0.01)] * 100)
    next(results)
    results.close()
    assert len(forked) == 2 and no_worker_is_left()


def test_a_ctrl_c_just_after_a_fork_leaves_no_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C waits while the workers are forked and listed, so one that comes between the two ends the worker too
    (before, it ran on until it wrote to the pipe the tool had closed by then)."""
    forked = on_cpus(monkeypatch, 2)
    fork = os.fork

    def interrupted() -> int:
        pid = fork()
        if pid:
            os.kill(os.getpid(), signal.SIGINT)  # the moment the first worker exists
        return pid

    monkeypatch.setattr(os, "fork", interrupted)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, however pytest was run
    try:
        with pytest.raises(KeyboardInterrupt):
            list(eb.over_cpus([functools.partial(time.sleep, 2)] * 4))
    finally:
        signal.signal(signal.SIGINT, previous)
    assert forked and no_worker_is_left()


def test_few_tasks_are_done_here(monkeypatch: pytest.MonkeyPatch) -> None:
    forked = on_cpus(monkeypatch, 4)
    tasks = [functools.partial(_worker_task, i, os.getpid(), "raise") for i in range(5)]
    assert list(eb.over_cpus(tasks, min_tasks=6)) == [(i, True) for i in range(5)]
    assert not forked


def test_a_task_done_here_runs_without_the_collector_as_in_a_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """One CPU, or too few tasks, or a task a worker left: it runs with the collector paused, and the collector is
    on again after it (and after a task that fails); a caller that had paused it finds it paused still."""
    import gc

    def fails() -> bool:
        raise ZeroDivisionError

    on_cpus(monkeypatch, 1)
    assert list(eb.over_cpus([gc.isenabled] * 3)) == [False] * 3 and gc.isenabled()
    with pytest.raises(ZeroDivisionError):
        list(eb.over_cpus([gc.isenabled, fails]))
    assert gc.isenabled()
    gc.disable()
    try:
        assert list(eb.over_cpus([gc.isenabled])) == [False] and not gc.isenabled()
    finally:
        gc.enable()


def test_no_process_to_fork_leaves_the_work_here(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    on_cpus(monkeypatch, 4)
    monkeypatch.setattr(os, "fork", refuse)
    tasks = [functools.partial(_worker_task, i, os.getpid(), "raise") for i in range(9)]
    assert list(eb.over_cpus(tasks)) == [(i, True) for i in range(9)]


@pytest.mark.parametrize(
    ("env", "args", "lines"),
    [
        ({"PYTHONDEVMODE": "1"}, ["--sweep", "native_engine.overhead_cut=0:0.9:0.0005", "--format", "json"], 0),
        ({"PYTHONWARNINGS": "error"}, ["--sweep", "native_engine.overhead_cut=0:0.9:0.0005", "--format", "csv"], 0),
        ({"PYTHONDEVMODE": "1"}, ["--sweep", "anchors.ar_tok_s=100:5000:1"], 1),  # the error alone
    ],
)
def test_workers_say_nothing(tmp_path: Path, env: dict[str, str], args: list[str], lines: int) -> None:
    """What a worker would print (a warning about a file it leaves to the operating system) is not shown."""
    run = run_script(*args, exe=on_two_cpus(tmp_path).split(), env=env)
    assert run.err.count("\n") == lines, run.err
    assert "Warning" not in run.err


def running(marker: str) -> list[str]:
    """The command lines of the processes that name `marker`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if marker in text:
                found.append(text)
    return found


def test_a_reader_that_leaves_a_large_sweep_early(tmp_path: Path) -> None:
    """The tool ends at once with exit 0, and no worker outlives it."""
    tool = on_two_cpus(tmp_path)
    start = time.perf_counter()
    sweep = "--sweep native_engine.overhead_cut=0:0.9:0.00005 --format json"
    run = shell(f"{{ {tool} {sweep}; echo $? >&2; }} | head -c 99")
    assert time.perf_counter() - start < 20  # the check of 18,001 points takes about 3 s; the output is not made
    assert run.code == 0 and run.err == "0\n" and run.out.startswith('{"provenance": {')
    assert running(str(tmp_path)) == []


@pytest.mark.parametrize("group", [False, True])
def test_ctrl_c_is_one_line(tmp_path: Path, group: bool) -> None:
    """SIGINT in the middle of a sweep, to the tool or to its process group as Ctrl-C sends it: exit 130."""
    command = [*on_two_cpus(tmp_path).split(), "--sweep", "native_engine.overhead_cut=0:0.9:0.00001", "--format=json"]
    # SIGINT as from a terminal: a suite started in the background (`cmd &`) ignores it, and so would the tool
    default_sigint = functools.partial(signal.signal, signal.SIGINT, signal.SIG_DFL)
    proc = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=default_sigint,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while len(running(str(tmp_path))) < 2 and time.monotonic() < deadline:  # 90,001 points: checked by workers
        time.sleep(0.05)
    time.sleep(0.2)
    if group:
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGINT)
    err = proc.communicate(timeout=60)[1]
    assert (proc.returncode, err) == (130, "estimate_b300: interrupted\n")
    assert running(str(tmp_path)) == []


OUT_OF_MEMORY = "estimate_b300: out of memory; expected more than the process may use (ulimit -v), or a smaller run"


@pytest.mark.parametrize("error", [MemoryError(), OSError(12, "Cannot allocate memory")])
def test_out_of_memory_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    def exhausted(*args: object) -> NoReturn:
        raise error

    monkeypatch.setattr(eb, "build_report", exhausted)
    run = run_main(capsys, "--format", "json")
    assert run == Run(1, "", f"{OUT_OF_MEMORY}\n")


def test_a_module_there_that_does_not_load_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under ulimit -v an import can fail to map its shared object: that is no missing tabulate, and no traceback."""
    unmapped = ImportError("/usr/lib/_struct.so: failed to map segment from shared object")
    monkeypatch.delitem(sys.modules, "tabulate", raising=False)
    real_import = __import__

    def importing(name: str, *args: Any, **kwargs: Any) -> object:
        if name == "tabulate":
            raise unmapped
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr("builtins.__import__", importing)
    run = run_main(capsys)
    assert run == Run(1, "", f"estimate_b300: cannot load a module ({unmapped}); expected an intact Python, and the "
                             "memory to load it\n")  # fmt: skip


def test_out_of_memory_says_one_line_when_what_it_left_half_done_fails_again() -> None:
    """A table's rows are read from a generator; memory that runs out mid-way leaves it open, and closing it may
    run out again, which Python reports as an 'Exception ignored' of several lines. In a process of its own:
    pytest takes such reports for itself."""
    program = """if True:
        import sys
        import estimate_b300 as eb

        def exhausted(*args):
            def rows():
                try:
                    yield 1
                finally:
                    raise MemoryError  # as its close finds no memory either

            reading = rows()
            next(reading)
            raise MemoryError

        eb.build_report = exhausted
        raise SystemExit(eb.main(["--format", "json"]))
    """
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert Run(proc.returncode, proc.stdout, proc.stderr) == Run(1, "", f"{OUT_OF_MEMORY}\n")


def test_out_of_memory_under_a_limit_is_one_line(tmp_path: Path) -> None:
    """A table of 45,001 rows needs some 200 MB; the interpreter and the check need about 40 MB, workers too."""
    tool = on_two_cpus(tmp_path)
    if shell(f"ulimit -v 50000; {tool} --version").code != 0:
        pytest.skip("this interpreter does not start in 50 MB")
    run = shell(f"ulimit -v 50000; {tool} --sweep native_engine.overhead_cut=0:0.9:0.00002")
    assert run == Run(1, "", f"{OUT_OF_MEMORY}\n")


# --- A fuzz of the whole command line ------------------------------------------------------------

_KEYS = [
    *("native_engine.overhead_cut", "anchors.ar_tok_s", "stronger_drafter.accept", "hardware.target.name"),
    *("moe_curve.points[1].ms", "ranges.anchors.ar_tok_s.relative", "stronger_drafter.block", "model.layers"),
]
_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12) | st.sampled_from(
    ["\n", "\x1b[2J", "\ud800", "1e400", "-0", "NaN", "[[[[", "{}", ",", ":", "::", "1:2:0", "0:1:1e-300", "@", "=",
     "--", "0.3" + "0" * 50_000, "0:1:" + "1" * 50_000 + "x", '"x,y",z']  # a long number: linear time, or 26 s
)  # fmt: skip
_numbers = st.one_of(
    st.integers(-(10**30), 10**30), st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e-300, 5e-324])
).map(lambda v: json.dumps(v) if not isinstance(v, float) or v == v else "NaN")


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    value = st.one_of(_text, _numbers, st.lists(_numbers, max_size=3).map(",".join))
    key = st.sampled_from(_KEYS) | _text
    options = st.one_of(
        st.tuples(st.just("--set"), st.builds(lambda k, v: f"{k}={v}", key, value)),
        st.tuples(st.just("--sweep"), st.builds(lambda k, v: f"{k}={v}", key, value)),
        st.tuples(st.just("--format"), st.sampled_from(["table", "json", "markdown", "csv", "xml"])),
        st.tuples(st.just("--tablefmt"), st.sampled_from(["simple", "github", "fancy_grid", "nope"])),
        st.tuples(st.just("--scenario"), _text | st.sampled_from(["stronger/native@14", "current/sglang@99"])),
        st.tuples(st.just("--solve"), key),
        st.tuples(st.just("--observed"), _text | st.builds(lambda v: f"current/native={v}", _numbers)),
        st.tuples(
            st.just("--measured"),
            _text
            | st.builds(lambda s, v: f"{s}={v}", st.sampled_from(["ar/native", "current/native@4", "ar/x"]), _numbers),
        ),
        st.tuples(st.just("--fit"), key),
        st.tuples(st.sampled_from(["--sensitivity", "--explain", "--no-chart", "--ascii"])),
        st.tuples(
            st.just("--calibration"), st.sampled_from(["", "/dev/null", "/nonexistent", str(DEFAULT_CALIBRATION)])
        ),
        st.tuples(_text),
    )
    drawn = draw(st.lists(st.tuples(options, st.booleans()), max_size=4))  # each option and its value apart, or
    return [part for option, joined in drawn for part in (["=".join(option)] if joined else option)]  # --set=k=v


@settings(max_examples=FUZZ, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(command_lines())
def test_fuzzed_command_lines_succeed_or_fail_cleanly(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    start = time.perf_counter()
    run = run_main(capsys, *argv)
    assert time.perf_counter() - start < 5.0, argv
    assert "Traceback" not in run.err
    assert "\x1b" not in run.out + run.err and not re.search("[\ud800-\udfff]", run.out + run.err)
    if run.code == 0:
        assert run.out
        assert all(line.startswith("estimate_b300: warning: ") for line in run.err.splitlines())
    else:
        assert_clean_error(run)


@settings(max_examples=max(FUZZ // 10, 10), deadline=None)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "COLUMNS": _text | _numbers,
            "PYTHONIOENCODING": st.sampled_from(
                ["ascii", "latin-1", "utf-8", "utf-16", "cp1252"]
            ),  # Python needs a codec
            "LANG": _text,
            "TERM": _text,
        },
    )
)
def test_fuzzed_environments(env: dict[str, str]) -> None:
    env = {k: "".join(c for c in v if c != "\x00" and not 0xD800 <= ord(c) <= 0xDFFF) for k, v in env.items()}
    run = run_script("--format", "markdown", env=env)
    assert "Traceback" not in run.err
    assert run.code in (0, 2), run.err
    if run.code == 2:
        assert run.err.count("\n") == 1


def test_identical_inputs_give_valid_json_for_every_sweep_size(capsys: pytest.CaptureFixture[str]) -> None:
    """The streamed JSON of a sweep is one valid document, whatever its size."""
    for sweep in ("native_engine.overhead_cut=0.4", "native_engine.overhead_cut=0:0.9:0.01"):
        doc = run_main(capsys, "--sweep", sweep, "--format", "json").json()
        assert doc["sweep"] and doc["scenarios"] == default_scenarios(capsys)


def default_scenarios(capsys: pytest.CaptureFixture[str]) -> Any:
    return run_main(capsys, "--format", "json").json()["scenarios"]


def test_the_default_document_is_not_changed_by_a_sweep() -> None:
    doc = default_doc()
    plan = eb.plan_sweep(doc, eb.parse_calibration(doc), [eb.parse_sweep("native_engine.overhead_cut=0.1,0.2")], "x")
    assert plan.size == 2 and doc == default_doc()


def test_the_band_and_a_solve_scan_give_the_same_on_one_cpu_and_on_many(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, write_calibration: Any
) -> None:
    """10 ranges make 1,024 combinations of ends, which the workers estimate 256 at a time; a solve by bisection
    scans its 401 values on the workers too. Either gives what one process gives."""
    doc = default_doc()
    more = ("anchors.ddtree.accept", "stronger_drafter.accept[1]", "moe_curve.points[1].ms")
    doc["ranges"] |= {key: {"relative": 0.05, "source": "x"} for key in more}
    doc["ranges"]["hardware.reference.mem_bandwidth_tb_s"] = {"low": 1.7, "high": 1.9, "source": "x"}
    path = str(write_calibration(doc))
    solve = ["--solve", "hardware.target.mem_bandwidth_tb_s", "--observed", "stronger/native@14=1000"]
    for args in (["--sensitivity"], solve):
        runs = {}
        for cpus in (2, 1):
            forked = on_cpus(monkeypatch, cpus)
            runs[cpus] = run_main(capsys, "--calibration", path, *args, "--format", "json")
            assert runs[cpus].code == 0 and len(forked) == (2 if cpus == 2 else 0), (args, runs[cpus].err)
        assert runs[2] == runs[1]
        studied = runs[1].json().get("sensitivity")
        assert studied is None or studied["band"]["combinations"] == 1024
    assert runs[1].json()["solve"]["method"] == "bisection"
