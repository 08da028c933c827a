"""The command line end to end: tables, JSON, formats, help, the installed command, start-up imports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import (
    DEFAULT_CALIBRATION,
    GOLDEN,
    ROOT,
    SCRIPT,
    assert_clean_error,
    flat,
    installed_command,
    run_main,
    run_script,
)

SCENARIO_KEYS = {
    "drafter",
    "pipeline",
    "block",
    "budget",
    "m",
    "accept",
    "chain_alpha",
    "moe_ms",
    "attn_base_ms",
    "spec_ms",
    "step_ms",
    "tok_s",
    "moe_extrapolated",
    "measured",
    "moe_floor_ms",
    "tok_s_ceiling",
    "vs_today",
    "runnable",
    "not_runnable_reason",
}


def test_default_tables_match_the_golden_text(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regenerate after a deliberate change with: python estimate_b300.py > tests/golden/default_table.txt"""
    monkeypatch.chdir(ROOT)  # the header names the calibration relative to the working directory
    monkeypatch.delenv("COLUMNS", raising=False)  # the chart is 80 columns wide unless COLUMNS says otherwise
    run = run_main(capsys)
    assert run.code == 0 and run.err == ""
    assert run.out == (GOLDEN / "default_table.txt").read_text()


def test_tables_label_what_was_measured(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_main(capsys).out
    assert "bandwidth ratio B300 / RTX PRO 6000 Blackwell = 8 / 1.8 TB/s = 4.444x" in flat(out)
    assert flat(out).count("measured on B300") == 5  # the headline, the two anchors, the measured row, x today
    assert "inferred point" in out and "measured point" in out
    sglang_row = next(line for line in out.splitlines() if line.startswith("SGLang "))
    assert sglang_row.endswith("1.00  measured on B300")


def test_json_output(capsys: pytest.CaptureFixture[str]) -> None:
    run = run_main(capsys, "--format", "json")
    assert run.code == 0 and run.err == ""
    doc = run.json()
    cal = doc["calibration"]
    assert {"bandwidth_ratio", "ar_step_ms", "ddtree_step_ms", "attn_base_ms", "spec_ms"} <= cal.keys()
    assert cal["bandwidth_ratio"] == pytest.approx(8.0 / 1.8, rel=1e-15)
    assert len(doc["scenarios"]) == 8  # current x 2 pipelines + stronger x 3 accepts x 2 pipelines
    for s in doc["scenarios"]:
        assert set(s) == SCENARIO_KEYS
        assert s["moe_ms"] + s["attn_base_ms"] + s["spec_ms"] == s["step_ms"]
        assert s["tok_s"] == pytest.approx(1000 * s["accept"] / s["step_ms"], rel=1e-15)
    assert [s["vs_today"] for s in doc["scenarios"][:2]] == [1, pytest.approx(4400 / 9.509371 / 303, rel=1e-6)]
    measured = [s for s in doc["scenarios"] if s["measured"]]
    assert [(s["drafter"], s["pipeline"], s["tok_s"]) for s in measured] == [("current", "sglang", pytest.approx(303))]
    # full precision: not rounded to the tables' two decimals
    assert cal["ar_step_ms"] == 1000 / 133


def test_tablefmt_passes_through(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_main(capsys, "--tablefmt", "github").out
    assert "| pipeline | accept |  MoE | ATTN\\_BASE |" in out  # a Markdown table, escaped as --format markdown
    assert "|----------|--------|------|------------|" in out


def test_unknown_tablefmt_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    run = run_main(capsys, "--tablefmt", "nosuch")
    assert run.code == 2 and run.out == ""
    assert "--tablefmt: unknown format 'nosuch'" in run.err and "github" in run.err
    empty = run_main(capsys, "--tablefmt=")
    assert empty.code == 2 and "--tablefmt: unknown format ''" in empty.err  # not the default, unseen


@pytest.mark.parametrize(
    ("args", "told"),
    [
        (["--format", "json", "--tablefmt", "grid"], "--format json"),
        (["--format", "csv", "--tablefmt", "bogus"], "--format csv"),
        (["--format", "markdown", "--tablefmt", "grid"], "--format markdown"),
        (["--explain", "--tablefmt", "github"], "--explain"),
    ],
)
def test_tablefmt_outside_the_tables_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], args: list[str], told: str
) -> None:
    """Markdown draws its own GFM tables, JSON and CSV none: a --tablefmt there would be ignored unseen."""
    run = run_main(capsys, *args)
    assert run.code == 2 and run.out == "" and run.err.count("\n") == 1
    assert f"usage: --tablefmt chooses how --format table draws its tables; it does nothing with {told}" in run.err


@pytest.mark.parametrize(
    "args",
    [
        ["--format", "json"], ["--explain"],
        ["--sweep", "native_engine.overhead_cut=0.2,0.4"],
        ["--sweep", "native_engine.overhead_cut=0.2,0.4", "--format", "json"],
    ],
)  # fmt: skip
def test_all_and_no_chart_are_taken_where_what_they_ask_is_given(
    capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    """JSON and --explain give every section and no chart, a sweep no chart: the README says these are taken there
    and change nothing, where --tablefmt, which those cannot honour, is refused."""
    plain = run_main(capsys, *args)
    extra = ["--no-chart"] if "--sweep" in args else ["--all", "--no-chart"]
    assert run_main(capsys, *args, *extra) == plain and plain.code == 0


def test_csv_takes_no_chart_and_refuses_all(capsys: pytest.CaptureFixture[str]) -> None:
    """CSV has no chart to leave out; it holds no section --all adds, which it dropped with nothing said."""
    csv = run_main(capsys, "--format", "csv")
    assert run_main(capsys, "--format", "csv", "--no-chart") == csv and csv.code == 0
    told = "usage: --format csv holds a row per scenario (its chain alpha and MoE floor too) and per measurement;"
    assert_clean_error(run_main(capsys, "--format", "csv", "--all"), told)


@pytest.mark.parametrize(
    ("args", "told"),
    [
        (["--format", "markdown"], "it takes no --format markdown"),
        (["--format", "json"], "it takes no --format json"),
        (["--sweep", "native_engine.overhead_cut=0.2,0.3"], "it takes no --sweep"),
    ],
)
def test_explain_names_the_option_it_cannot_take(
    capsys: pytest.CaptureFixture[str], args: list[str], told: str
) -> None:
    run = run_main(capsys, "--explain", *args)
    assert run.code == 2 and run.out == "" and run.err.count("\n") == 1
    assert run.err.startswith("estimate_b300: usage: --explain prints") and told in run.err


@pytest.mark.parametrize(
    "option", ["--calibration", "--format", "--tablefmt", "--set", "--sweep", "--scenario", "--solve", "--observed",
               "--measured", "--fit"],
)  # fmt: skip
def test_a_double_dash_as_a_value_is_a_usage_error(capsys: pytest.CaptureFixture[str], option: str) -> None:
    """argparse hands `--set=--` on as an empty list: it failed deep inside, or the option went unseen."""
    run = run_main(capsys, f"{option}=--", *(["--sensitivity"] if option == "--scenario" else []))
    assert run.code == 2 and run.out == "" and run.err.count("\n") == 1
    assert f"usage: argument {option}: expected a value after it; '--' ends the options instead" in run.err


def test_unknown_option_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    run = run_main(capsys, "--formatt", "json")
    assert run.code == 2 and run.out == "" and "usage:" in run.err


@pytest.mark.parametrize(
    "args",
    [
        [
            "--solve",
            "native_engine.overhead_cut",
            "--observed",
            "current/native=463",
            "--observed",
            "current/native=400",
        ],
        ["--format", "json", "--format=csv"],
        ["--calibration", str(DEFAULT_CALIBRATION), "--calibration", str(DEFAULT_CALIBRATION)],
        ["--tablefmt", "github", "--tablef", "grid"],
        ["--sensitivity", "--scenario", "current/native", "--scenario", "stronger/native"],
        ["--solve", "native_engine.overhead_cut", "--solve", "anchors.ar_tok_s", "--observed", "current/native=463"],
    ],
)
def test_an_option_of_one_value_given_twice_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    """The later value would win unseen; --set, --sweep, --measured and --fit are the options that repeat."""
    run = run_main(capsys, *args)
    assert run.code == 2 and run.out == "" and run.err.count("\n") == 1
    assert ": given twice; expected it once; see --help" in run.err


@pytest.mark.parametrize("prog", ["estimate-b300", "estimate_b300.py"])  # installed, and the script run as is
def test_help_explains_every_option(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, prog: str
) -> None:
    monkeypatch.setattr(sys, "argv", [prog])
    run = run_main(capsys, "--help")
    assert run.code == 0
    for option in ("--calibration PATH", "--format", "--tablefmt NAME", "--version"):
        assert option in run.out
    assert max(map(len, run.out.splitlines())) <= 80  # COLUMNS=80 here, as in every test


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    import estimate_b300 as eb

    assert run_main(capsys, "--version").out.strip() == f"estimate_b300 {eb.__version__}"


def test_default_calibration_is_found_from_any_directory(tmp_path: Path) -> None:
    run = run_script("--format", "json", cwd=tmp_path)
    assert run.code == 0, run.err
    assert run.json()["provenance"]["calibration_file"] == str(DEFAULT_CALIBRATION)


def test_json_run_does_not_import_tabulate() -> None:
    """A fresh interpreter runs main() for JSON, then says whether tabulate (30 ms of start-up) was imported."""
    code = (
        f"import sys, io; sys.path.insert(0, {str(ROOT)!r}); import estimate_b300"
        "\nout, sys.stdout = sys.stdout, io.StringIO(); code = estimate_b300.main(['--format', 'json'])"
        "\nsys.stdout = out; print(code, 'tabulate' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0 False"


def test_main_in_process_leaves_the_collector_as_it_was(capsys: pytest.CaptureFixture[str]) -> None:
    """main(argv) called from Python leaves the garbage collector working on every object; only the command,
    whose process ends with the run, spares the collector its passes at exit (see Speed in the README)."""
    import gc

    frozen = gc.get_freeze_count()
    assert run_main(capsys, "--format", "json").code == 0
    assert run_main(capsys, "--set", "anchors.ar_tok_s=-1").code == 2
    assert gc.get_freeze_count() == frozen
    assert gc.isenabled()


def test_pep723_header_names_tabulate() -> None:
    """The bare file runs with `uv run` / `pipx run`: its inline metadata must parse and name tabulate."""
    import re
    import tomllib

    text = SCRIPT.read_text()
    block = re.search(r"(?m)^# /// script$\s(?P<content>(^#(| .*)$\s)+)^# ///$", text)
    assert block is not None
    content = "".join(line[2:] + "\n" for line in block["content"].splitlines())
    meta = tomllib.loads(content)
    assert meta["requires-python"] == ">=3.11"
    assert any(dep.startswith("tabulate") for dep in meta["dependencies"])


@pytest.mark.skipif(installed_command() is None, reason="estimate-b300 is not installed (pip install .)")
def test_installed_command_runs_from_any_directory(tmp_path: Path) -> None:
    """Installed either way (pip install . or -e .), it finds the default calibration and prints the estimate."""
    exe = [installed_command() or ""]
    table = run_script(cwd=tmp_path, exe=exe)
    assert table.code == 0, table.err
    golden = (GOLDEN / "default_table.txt").read_text().splitlines()
    title = golden.index("Kimi K2.x + DDTree at concurrency 1 on B300")  # the provenance line names another path
    assert table.out.splitlines()[table.out.splitlines().index(golden[title]) :] == golden[title:]
    installed = run_script("--format", "json", cwd=tmp_path, exe=exe).json()
    source = run_script("--format", "json").json()
    assert installed["provenance"]["calibration_file"].endswith("calibration.json")
    for key in ("calibration_sha256", "tool_version"):  # the same calibration, byte for byte
        assert installed["provenance"][key] == source["provenance"][key]
    assert {k: v for k, v in installed.items() if k != "provenance"} == {
        k: v for k, v in source.items() if k != "provenance"
    }
