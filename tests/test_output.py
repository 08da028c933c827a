"""Showing the work: the breakdown chart, Markdown, CSV, --explain, provenance and reproducibility."""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import DEFAULT_CALIBRATION, GOLDEN, MEASURED, default_doc, default_estimate, flat, run_main, run_script

import estimate_b300 as eb

# --- The breakdown chart -------------------------------------------------------------------


def test_chart_golden_unicode_and_ascii() -> None:
    """One bar per drafter and pipeline. 1 column = 20.884 ms / 37 = 0.564 ms. current/sglang: MoE 1.99 ms
    ends at round(3.53) = 4, MoE + ATTN_BASE 9.25 ms at round(16.4) = 16, the whole 14.52 ms at round(25.7) = 26."""
    scenarios = default_estimate().scenarios
    assert eb.breakdown_chart(scenarios, 80, False) + "\n" == (GOLDEN / "chart_unicode.txt").read_text()
    ascii_chart = eb.breakdown_chart(scenarios, 80, True)
    assert ascii_chart + "\n" == (GOLDEN / "chart_ascii.txt").read_text()
    assert ascii_chart.splitlines()[0] == "Step time, 0.564 ms a column: [#] MoE [=] ATTN_BASE [.] SPEC"
    first_bar = ascii_chart.splitlines()[1]
    assert first_bar.startswith("current/sglang  " + "#" * 4 + "=" * 12 + "." * 10 + " ")
    assert [line.split()[0] for line in ascii_chart.splitlines()[1:]] == [
        "current/sglang", "current/native", "stronger/sglang", "stronger/native",
    ]  # fmt: skip
    assert ascii_chart.splitlines()[3].endswith("20.88 ms 575-766 tok/s [1]")  # it cannot run: see note [1]


def test_the_charts_scale_is_given_to_three_significant_digits(capsys: pytest.CaptureFixture[str]) -> None:
    """A step of about 0.05 ms over 37 columns: 0.00129 ms a column, not 0.001, which is 20% off."""
    fast = ["--set", "anchors.ar_tok_s=100000", "--set", "anchors.ddtree.tok_s=150000"]
    args = [*fast, "--set", "hardware.target.mem_bandwidth_tb_s=10000"]
    out, doc = run_main(capsys, *args).out, run_main(capsys, *args, "--format", "json").json()
    scale = float(re.search(r"Step time, ([0-9.e-]+) ms a column", out)[1])  # type: ignore[index]
    (bar,) = [line for line in out.splitlines() if line.startswith("stronger/sglang ")]  # the longest step's
    columns = sum(bar.count(fill) for fill in "\u2588\u2592\u2591")
    assert scale == pytest.approx(max(s["step_ms"] for s in doc["scenarios"]) / columns, rel=0.005)


@pytest.mark.parametrize("columns", [60, 80, 100, 132])
def test_chart_fits_the_width(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, columns: int
) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    out = run_main(capsys).out
    chart = out[out.index("Step time, ") :].split("\n\n")[0].splitlines()
    assert len(chart) == 5
    assert max(map(len, chart)) <= columns
    assert max(map(len, chart)) >= columns - 2  # and uses the room it has


def test_chart_is_on_one_scale() -> None:
    """The bar of the longest step fills the bar area; a step half as long fills about half."""
    chart = eb.breakdown_chart(default_estimate().scenarios, 80, True).splitlines()[1:]
    bars = {line.split()[0]: len(line.split()[1]) for line in chart}
    assert bars["stronger/sglang"] == 37
    assert bars["current/native"] == round(9.509 / (20.884 / 37))


def test_no_chart(capsys: pytest.CaptureFixture[str]) -> None:
    assert "Step time, " in run_main(capsys).out
    assert "Step time, " not in run_main(capsys, "--no-chart").out


def test_ascii_output_is_plain_ascii(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_main(capsys, "--ascii", "--sensitivity", "--set", "hardware.target.name=B300\u00e9").out
    assert out.isascii()
    assert "[#] MoE [=] ATTN_BASE [.] SPEC" in out  # a legend, not an equation
    assert "on B300\\xe9" in out  # a name the calibration spells in Unicode, escaped


def test_unicode_is_dropped_when_stdout_cannot_encode_it() -> None:
    run = run_script(env={"PYTHONIOENCODING": "ascii"})
    assert run.code == 0, run.err
    assert run.out.isascii() and "[#] MoE" in run.out
    assert "\u2588" in run_script(env={"PYTHONIOENCODING": "utf-8"}).out


WIDE_NAME = " ".join(["\u4e2d\u6587"] * 8)  # 中文 eight times: a character escaped, \u4e2d, is six


@pytest.mark.parametrize("options", [[], ["--format", "markdown"], ["--format", "csv"], ["--explain"], ["--all"]])
def test_a_code_page_with_the_charts_blocks_escapes_what_it_cannot_write(options: list[str]) -> None:
    """cp437 has the chart's blocks, so the output is not ASCII, but no Chinese: that is escaped, in every format,
    where writing it whole would fail."""
    env = {"PYTHONIOENCODING": "cp437"}
    run = run_script("--set", "hardware.target.name=B300 \u4e2d\u6587", *options, env=env, encoding="cp437")
    assert run.code == 0, run.err
    assert "B300 \\u4e2d\\u6587" in run.out.replace("\\\\", "\\")  # Markdown escapes the backslash itself
    assert "\u2588" in run.out or options  # the chart's full block, as cp437 writes it


@pytest.mark.parametrize("encoding", ["ascii", "cp437"])
def test_escaped_text_is_laid_out_as_it_is_printed(write_calibration: Any, encoding: str) -> None:
    """A paragraph wraps, and a table's borders line up, with each character escaped at its escape's width."""
    doc = default_doc()
    doc["hardware"]["target"]["name"] = WIDE_NAME
    doc["measurements"] = [
        {"drafter": "current", "pipeline": "native", "accept": 4.4, "tok_s": 415, "label": WIDE_NAME}
    ]
    options = ["--calibration", str(write_calibration(doc)), "--all", "--no-chart", "--tablefmt", "grid"]
    lines = run_script(*options, env={"PYTHONIOENCODING": encoding}, encoding=encoding).out.splitlines()
    text = [line for line in lines if "\\u4e2d" in line and not line.startswith(("+", "|"))]  # not in a table
    assert len(text) > 4 and max(map(len, text)) <= 80
    grids = ["\n".join(g) for drawn, g in itertools.groupby(lines, lambda line: line.startswith(("+", "|"))) if drawn]
    assert len(grids) == 8 and "\\u4e2d" in grids[-1]  # the track record: the measurement's label
    assert all(len(set(map(len, grid.splitlines()))) == 1 for grid in grids)  # every border lines up


def test_ascii_refuses_a_unicode_table_format(capsys: pytest.CaptureFixture[str]) -> None:
    run = run_main(capsys, "--ascii", "--tablefmt", "fancy_grid")
    assert (
        run.code == 2
        and run.out == ""
        and "--tablefmt fancy_grid draws with characters that --ascii rules out;" in run.err
    )
    assert run_main(capsys, "--ascii", "--tablefmt", "github").out.isascii()


def test_formats_that_cannot_break_a_cell_are_not_wrapped(capsys: pytest.CaptureFixture[str]) -> None:
    """HTML, LaTeX and TSV keep each row whole (on one line) however wide; TSV keeps its tabs."""
    html = run_main(capsys, "--tablefmt", "html", "--no-chart").out
    assert "<td>1000 / ar_tok_s" in html and all(
        line.count("<tr>") == line.count("</tr>") for line in html.splitlines()
    )
    latex = run_main(capsys, "--tablefmt", "latex", "--no-chart").out
    assert all(line.endswith(("\\\\", "\\hline")) for line in latex.splitlines() if " & " in line)
    tsv = run_main(capsys, "--tablefmt", "tsv", "--no-chart").out
    rows = [[field.strip() for field in line.split("\t")] for line in tsv.splitlines() if "\t" in line]
    assert ["AR step", "1000 / ar_tok_s", "7.52", "", "measured on B300"] in rows and "\\t" not in tsv


@pytest.mark.parametrize(
    ("tablefmt", "written"),
    [
        ("asciidoc", r"B3\|00 \ x"),
        ("jira", "B3&#124;00 &#92; x"),
        ("mediawiki", r"B3&#124;00 \ x"),
        ("orgtbl", r"B3\vert{}00 \backslash{} x"),
        ("textile", r"B3&#124;00 \ x"),
    ],
)
def test_a_bar_in_a_cell_stays_in_its_cell(
    capsys: pytest.CaptureFixture[str], write_calibration: Any, tablefmt: str, written: str
) -> None:
    """Formats whose cells a `|` ends write one as their readers read a literal one (pandoc's, Asciidoctor's)."""
    doc = default_doc()
    doc["anchors"]["measured_on"] = "B3|00 \\ x"
    out = run_main(capsys, "--calibration", str(write_calibration(doc)), "--tablefmt", tablefmt, "--no-chart").out
    rows = [line for line in out.splitlines() if re.match(r"\W*(AR step|MoE\(1\)) ", line)]  # with the text, without
    assert len(rows) == 2 and f"measured on {written}" in rows[0] and "B3|00" not in rows[0]
    bars = [len(re.findall(r"(?<!\\)\|", row)) for row in rows]
    assert bars[0] == bars[1] > 0  # as many cells in both


def test_pretty_rounds_its_numbers_as_every_format_does(capsys: pytest.CaptureFixture[str]) -> None:
    """tabulate parses no numbers in "pretty", and so would print 14.521452145214521 for 14.52."""
    pretty = run_main(capsys, "--tablefmt", "pretty", "--no-chart", "--all").out
    assert "| DDTree step | 1000 * accept / tok_s      | 14.52 | 100.0% |" in pretty
    assert re.search(r"\| native +\| +4\.4 \| 1\.99 \| +4\.36 \| 3\.16 \|  9\.51 \|   463 \|", pretty)
    assert re.search(r"\| stronger \| +16 \| +12 \| +0\.954 \|", pretty)  # .3f, a block as an integer
    assert not re.search(r"\d\.\d{5}", pretty)


@pytest.mark.parametrize("tablefmt", ["orgtbl", "jira", "rst", "github", "html"])
def test_formats_where_a_line_is_a_row_keep_each_row_on_one(capsys: pytest.CaptureFixture[str], tablefmt: str) -> None:
    """A break-even out of reach says why at length; wrapped, it would make rows of its own in these formats."""
    tree = ["--set", "stronger_drafter.block=5", "--set", "stronger_drafter.accept=[4,5,6]"]
    out = run_main(capsys, "--all", "--no-chart", "--tablefmt", tablefmt, *tree).out
    reason = "it would need accept 6.33, above the tree"  # HTML escapes the apostrophe after it
    assert any(reason in line and "SGLang" in line for line in out.splitlines())


# --- Markdown (parsed as GFM in test_markdown.py) -------------------------------------------


def test_markdown_golden(capsys: pytest.CaptureFixture[str]) -> None:
    """Regenerate after a deliberate change: python estimate_b300.py --format markdown > tests/golden/default.md"""
    run = run_main(capsys, "--format", "markdown")
    assert run.code == 0 and run.err == ""
    assert run.out == (GOLDEN / "default.md").read_text()


def test_markdown_document_parts(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_main(capsys, "--format", "markdown").out
    first = out.splitlines()[0]
    assert first.startswith("`estimate_b300 ") and "sha256" in first and "overrides: none`" in first
    assert "| pipeline | accept |  MoE |" in out and "|:---------|-------:|-----:|" in out  # aligned pipe tables
    block = re.search(r"```mermaid\n(.*?)```", out, re.S)
    assert block is not None
    mermaid = block.group(1)
    assert mermaid.startswith("xychart-beta horizontal\n")
    assert re.findall(r'bar "(\w+)"', mermaid) == ["SPEC", "ATTN_BASE", "MoE"]  # the segment each one shows
    steps = re.search(r'bar "SPEC" \[(.*?)\]', mermaid)
    assert steps is not None
    assert [float(v) for v in steps.group(1).split(", ")] == [14.52, 9.51, 20.88, 14.73]  # one bar per drafter/pipeline
    assert "Each bar, left to right: MoE, ATTN_BASE, SPEC; its length is the step time in ms. The series" in out
    assert "### Assumptions" in out
    assert "`overhead_cut` = 0.4: assumed" in out
    assert '`points[0]` = {"m": 1, "ms": 1.15, "basis": "inferred"}: not a recorded measurement' in out
    assert "- \\* MoE extrapolated: M = 33" in out  # escaped, so it is not a nested list item


def test_a_points_documentation_is_not_its_value(capsys: pytest.CaptureFixture[str], write_calibration: Any) -> None:
    doc = default_doc()
    doc["moe_curve"]["points"][1] |= {"ms_note": "run twice", "ms_source": "bench log 3", "note": "warm"}
    out = run_main(capsys, "--calibration", str(write_calibration(doc)), "--format", "markdown").out
    assert '  - `points[1]` = {"m": 9, "ms": 8.85, "basis": "measured"}: measured on the RTX PRO 6000' in out


def test_overrides_are_marked_where_sources_are_listed(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_main(capsys, "--set", "native_engine.overhead_cut=0.3", "--format", "markdown").out
    line = next(line for line in out.splitlines() if line.startswith("  - `overhead_cut`"))
    assert line.startswith(
        "  - `overhead_cut` = 0.3: set by --set native\\_engine.overhead\\_cut=0.3; the file said 0.4 ("
    )
    sens = run_main(capsys, "--set", "ranges.anchors.ar_tok_s.relative=0.05", "--sensitivity").out
    row = next(line for line in sens.splitlines() if line.startswith("anchors.ar_tok_s "))
    assert "set by --set ranges.anchors.ar_tok_s.relative=0.05; the file said relative 0.03 (measured value" in row
    ends = ["--set", "ranges.native_engine.overhead_cut.high=0.5", "--set", "ranges.native_engine.overhead_cut.low=0.3"]
    row = next(x for x in run_main(capsys, *ends, "--sensitivity").out.splitlines() if x.startswith("native_engine"))
    assert (  # both ends: it named the last, and the file's low as if it were in force
        "0.3 to 0.5 861 1061 201 set by --set ranges.native_engine.overhead_cut.high=0.5 and --set "
        "ranges.native_engine.overhead_cut.low=0.3; the file said high 0.6, low 0.2 (assumed:" in " ".join(row.split())
    )
    whole_then_end = ["--set", 'ranges.native_engine.overhead_cut={"low":0.3,"high":0.5,"source":"x"}']
    whole_then_end += ["--set", "ranges.native_engine.overhead_cut.low=0.35"]
    row = run_main(capsys, *whole_then_end, "--sensitivity").out
    row = " ".join(next(x for x in row.splitlines() if x.startswith("native_engine")).split())
    assert (  # the end set after the whole range was left out, beside the 0.35 it gave
        'set by --set ranges.native_engine.overhead_cut={"low":0.3,"high":0.5,"source":"x"} and --set '
        'ranges.native_engine.overhead_cut.low=0.35; the file said {"low": 0.2, "high": 0.6, "source":' in row
    )
    fitted = [
        "--calibration",
        str(MEASURED),
        "--set",
        "native_engine.overhead_cut=0.3",
        "--fit",
        "native_engine.overhead_cut",
    ]
    note = run_main(capsys, *fitted, "--format", "markdown").out  # the fit took the place of the set it started from
    assert "set by --set native\\_engine.overhead\\_cut=0.3 and fitted by --fit native\\_engine.overhead\\_cut;" in note
    curve = json.dumps([{"m": m, "ms": 0.9 + 0.7 * m, "basis": "measured"} for m in range(1, 1001)])
    note = run_main(capsys, "--set", f"moe_curve.points={curve}", "--format", "markdown", "--no-chart").out
    assert len(note) < 400_000  # each of 1,000 entries named the whole option: 40 MB
    swept = run_main(capsys, "--sweep", "native_engine.overhead_cut=0.1,0.2", "--format", "markdown").out
    line = next(line for line in swept.splitlines() if line.startswith("  - `overhead_cut`"))
    assert line.startswith(  # no value: each point has its own
        "  - `overhead_cut`: swept by --sweep native\\_engine.overhead\\_cut=0.1,0.2; the file said 0.4 ("
    )
    inside_a_set = ["--set", 'native_engine={"overhead_cut": 0.9}', "--sweep", "native_engine.overhead_cut=0.1,0.2"]
    around_it = ["--sweep", 'native_engine={"overhead_cut": 0.1},{"overhead_cut": 0.2}']
    for args, by in (
        (inside_a_set, 'set by --set native\\_engine={"overhead\\_cut": 0.9} and swept by'),
        (around_it, "swept by"),
    ):
        line = next(
            x for x in run_main(capsys, *args, "--format", "markdown").out.splitlines() if "`overhead_cut`" in x
        )  # every option that changed it is named
        assert line.startswith(f"  - `overhead_cut`: {by} --sweep native\\_engine") and "the file said 0.4" in line
    accept = run_main(capsys, "--sweep", "stronger_drafter.accept[1]=13,15", "--format", "markdown").out
    assert (
        "  - `accept` = \\[12, 14, 16\\]: swept by --sweep stronger\\_drafter.accept\\[1\\]=13,15; the file said "
        "\\[1\\] 14" in accept
    )  # the list but its swept entry, as the file has it


def test_an_override_that_holds_the_lines_separators_is_quoted_as_a_shell_takes_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = run_main(capsys, "--set", "hardware.target.name=H200, 141 GB", "--set", "native_engine.overhead_cut=0.3").out
    assert "overrides: 'hardware.target.name=H200, 141 GB', native_engine.overhead_cut=0.3" in flat(out)


@pytest.mark.parametrize(
    ("args", "count"), [([], 7), (["--fit", "native_engine.overhead_cut", "--measured", "current/native=470"], 9)]
)
def test_a_restructuredtext_table_stands_apart_from_its_title(
    capsys: pytest.CaptureFixture[str], args: list[str], count: int
) -> None:
    """reST reads a table right under a line of text as part of that paragraph: there is a blank line between,
    under each section's title and under the fit's caption of its second table."""
    lines = run_main(capsys, "--tablefmt", "rst", "--all", "--no-chart", *args).out.splitlines()
    opening = [i for i, line in enumerate(lines) if line.startswith("==") and not lines[i - 1].startswith("==")]
    tops = opening[::3]  # each table has three rules: above the header, under it, and at its foot
    assert len(tops) == count and all(lines[i - 1] == "" for i in tops)


@pytest.mark.parametrize("tablefmt", ["github", "pipe", "textile"])
def test_a_table_format_read_as_markup_stands_apart_from_its_title(
    capsys: pytest.CaptureFixture[str], tablefmt: str
) -> None:
    """GFM takes a table right under a line of text for more of that paragraph: pandoc found none of 7; and
    Textile too, where pandoc found none of 3."""
    lines = run_main(capsys, "--tablefmt", tablefmt, "--all", "--no-chart").out.splitlines()
    headers = [i for i, line in enumerate(lines) if line.startswith("|") and not lines[i - 1].startswith("|")]
    assert len(headers) == 7 and all(lines[i - 1] == "" for i in headers)


def test_a_value_a_fit_found_is_shown_to_6_digits_wherever_it_is_written(capsys: pytest.CaptureFixture[str]) -> None:
    """0.373654003534036 gives itself back at 15 digits, as a typed value does: it was shown so beside 0.373654."""
    sets = ["hardware.target.mem_bandwidth_tb_s=7.35", "anchors.ddtree.accept=5.2", "stronger_drafter.spec_scale=1.388"]
    args = [x for v in sets for x in ("--set", v)] + ["--fit", "native_engine.overhead_cut"]
    args += ["--measured", "current/native=470", "--measured", "ar/native=200"]
    note = run_main(capsys, *args, "--format", "markdown").out
    assert "- `overhead_cut` = 0.373654: fitted by --fit" in note and "0.3736540" not in note
    assert "  overhead_cut = 0.373654 (native_engine.overhead_cut)" in run_main(capsys, *args, "--explain").out


def test_values_as_written_keep_their_digits(capsys: pytest.CaptureFixture[str]) -> None:
    """6 digits would print 0.2000003 as 0.2, beside a headline that says it is outside 0.2000004 to 0.6."""
    low = "ranges.native_engine.overhead_cut.low=0.2000004"
    out = run_main(capsys, "--set", "native_engine.overhead_cut=0.2000003", "--set", low, "--format", "markdown").out
    assert "  - `overhead_cut` = 0.2000003: set by --set" in out
    assert "  - `native_engine.overhead_cut` from 0.2000004 to 0.6: set by --set" in out
    cut = run_main(capsys, "--set", "native_engine.overhead_cut=0.99999999", "--format", "markdown").out
    assert "  - `overhead_cut` = 0.99999999: set by --set" in cut  # not 1, which the cut's domain refuses
    title = run_main(capsys, "--set", "hardware.target.mem_bandwidth_tb_s=7.9999999").out
    assert "= 7.9999999 / 1.8 TB/s =" in flat(title)


# --- CSV -----------------------------------------------------------------------------------


def test_csv_parses_back_to_the_json_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_main(capsys, "--format", "json").json()
    text = run_main(capsys, "--format", "csv").out
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == len(doc["scenarios"]) == 8
    for row, scenario in zip(rows, doc["scenarios"], strict=True):
        for key, value in scenario.items():
            if isinstance(value, bool):
                assert row[key] == str(value).lower()
            elif isinstance(value, (int, float)):
                assert float(row[key]) == value  # full precision, exactly
            else:
                assert row[key] == ("" if value is None else value)
        assert row["calibration_sha256"] == doc["provenance"]["calibration_sha256"]
        assert row["tool_version"] == eb.__version__
        assert row["calibration_file"] == "calibration.json"
        assert row["overrides"] == ""
    assert text.splitlines()[0].startswith("drafter,pipeline,block,budget,m,accept,")


def test_csv_of_a_sweep(capsys: pytest.CaptureFixture[str]) -> None:
    text = run_main(
        capsys, "--sweep", "native_engine.overhead_cut=0.2:0.6:0.1", "--set", "anchors.ar_tok_s=135", "--format", "csv"
    ).out
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == 5 * 8
    assert [float(r["native_engine.overhead_cut"]) for r in rows[::8]] == pytest.approx([0.2, 0.3, 0.4, 0.5, 0.6])
    assert {r["overrides"] for r in rows} == {"anchors.ar_tok_s=135"}


# --- --explain -------------------------------------------------------------------------------

NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:%|x)?(?![\w.])")
NUMERIC_CELL = re.compile(r"-?\d+(?:\.\d+)?(?:%|x)?\*?")


def table_figures(text: str) -> set[str]:
    """The numbers in the cells of every table (tabulate's simple format), as printed: '14.52', '86.3%'."""
    found: set[str] = set()
    lines = text.splitlines()
    for i, rule in enumerate(lines):
        if not re.fullmatch(r"-+( +-+)*", rule):
            continue
        spans = [m.span() for m in re.finditer(r"-+", rule)]
        for row in itertools.takewhile(str.strip, lines[i + 1 :]):
            cells = [row[start : end + 2].strip() for start, end in spans]  # right-aligned numbers may spill left
            found |= {cell.rstrip("*") for cell in cells if NUMERIC_CELL.fullmatch(cell)}
    return found


def figures(text: str) -> set[str]:
    """Every number the text prints, as printed: '14.52', '86.3%', '2.28x'; not the provenance line."""
    return {m.group(0) for line in text.splitlines()[1:] for m in NUMBER.finditer(line)}


@pytest.mark.parametrize("extra", [[], ["--sensitivity"], ["--set", "moe_curve.fit=experts"]])
def test_every_table_figure_appears_in_explain(capsys: pytest.CaptureFixture[str], extra: list[str]) -> None:
    tables = table_figures(run_main(capsys, "--no-chart", "--all", *extra).out)
    assert {"1.53", "0.805", "77.3%", "3582"} <= tables  # the parse finds the tables
    missing = tables - figures(run_main(capsys, "--explain", *extra).out)
    assert not missing, f"table figures missing from --explain: {sorted(missing)}"


def test_explain_lines_show_formula_numbers_and_result(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_main(capsys, "--explain").out
    assert "  ATTN_BASE = AR step - MoE(1) = 7.519 - 0.259 = 7.26 ms" in out
    assert "  SPEC = DDTree step - MoE(9) - ATTN_BASE = 14.521 - 1.991 - 7.260 = 5.27 ms" in out
    assert "  tok/s = 1000 * accept / step = 1000 * 4.4 / 9.509 = 463 tok/s" in out
    curve = "  curve(33) = curve(9) + (33 - 9) * (curve(32) - curve(9)) / (32 - 9)"
    assert f"{curve} = 8.85 + (33 - 9) * (23.8 - 8.85) / (32 - 9) = 24.45 ms" in out
    assert "  kept = 1 - overhead_cut = 1 - 0.4 = 0.600" in out
    assert "Step time breakdown" not in out and "| pipeline" not in out


@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["--set", "moe_curve.fit=experts"],
        ["--set", "hardware.target.mem_bandwidth_tb_s=10000"],  # MoE times of about 0.001 ms
        ["--set", "hardware.target.mem_bandwidth_tb_s=1e6"],  # a MoE floor of 1.23e-05 ms
        ["--set", "anchors.ddtree.tok_s=1.2"],  # throughputs of a few tok/s
        ["--set", "native_engine.overhead_cut=0.99999999999"],  # 1 - 0.99999999999, not 1 - 1, gives 1e-11
        ["--set", "anchors.ddtree.tok_s=475.58842486690304"],  # SPEC = 9.252 - 1.991 - 7.260 cancels to 0.0004
        ["--set", "anchors.ar_tok_s=3860"],  # ATTN_BASE = 0.259 - 0.259 cancels to 0.00032
        ["--set", "moe_curve.points[0].ms=0.00384", "--set", "moe_curve.fit=experts"],  # t0 < 0: fit(1) = 0.50
    ],
)
def test_explain_arithmetic_gives_its_result(capsys: pytest.CaptureFixture[str], extra: list[str]) -> None:
    """Each line's numbers, worked as written, give the result it prints: within half a unit of its last digit.
    A 10,000 TB/s target makes MoE times of about 0.001 ms, which three decimals would print as 0.001 or 0.002
    and so miss by up to 23%; near-equal numbers that cancel need more digits still."""
    checked = 0
    for line in run_main(capsys, "--explain", *extra).out.splitlines():
        parts = line.rsplit(" = ", 2)
        if len(parts) < 3 or not line.startswith("  "):
            continue
        arithmetic = re.sub(r" (TB/s|GB|MB)\b", "", parts[1])
        result = re.fullmatch(r"(-?[0-9.]+(?:e[-+][0-9]+)?)(%| ms| tok/s| MB| GB|x)?", parts[2])
        if result is None or not re.fullmatch(r"[-0-9.e+*/() ^]+", arithmetic):
            continue
        printed = float(result[1]) / (100 if result[2] == "%" else 1)
        worked = eval(arithmetic.replace("^", "**"))
        mantissa, _, exponent = result[1].partition("e")
        last_digit = 10.0 ** (int(exponent or 0) - len(mantissa.partition(".")[2])) / (100 if result[2] == "%" else 1)
        assert worked == pytest.approx(printed, rel=1e-9, abs=last_digit / 2), line
        checked += 1
    assert checked >= 40  # the lines are found


def _half_a_unit(text: str, percent: bool = False) -> float:
    """Half a unit of a printed number's last digit."""
    mantissa, _, exponent = text.lstrip("+").partition("e")
    return 10.0 ** (int(exponent or 0) - len(mantissa.partition(".")[2])) / (200 if percent else 2)


def test_explain_swings_and_errors_give_their_results(capsys: pytest.CaptureFixture[str]) -> None:
    """A swing below 1 tok/s and an error of a throughput far from its prediction once missed by a digit:
    |950.2 - 950.5| = 0.27 by hand is 0.3, and 216.7 / 10.02 - 1 is +2062.7%, printed +2062.6%."""
    narrow = ["--set", "ranges.anchors.ar_tok_s.relative=0.001", "--sensitivity", "--measured", "ar/native=10.02"]
    out = run_main(capsys, "--explain", *narrow, "--measured", "current/native=1102.27").out
    swings = re.findall(r"swing \|([0-9.]+) - ([0-9.]+)\| = ([0-9.]+)$", out, re.M)
    errors = re.findall(r": ([0-9.]+) / ([0-9.]+) - 1 = ([-+][0-9.]+)%$", out, re.M)
    assert len(swings) == 6 and len(errors) == 2
    for high, low, swing in swings:
        assert abs(float(high) - float(low)) == pytest.approx(float(swing), abs=_half_a_unit(swing))
    for predicted, measured, error in errors:
        assert float(predicted) / float(measured) - 1 == pytest.approx(
            float(error) / 100, abs=_half_a_unit(error, True)
        )


@pytest.mark.parametrize("args", [["--format", "json"], ["--format", "csv"], ["--sweep", "anchors.ar_tok_s=130,133"]])
def test_explain_usage_errors(capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    run = run_main(capsys, "--explain", *args)
    assert run.code == 2 and run.out == "" and "--explain" in run.err


# --- Provenance and reproducibility ----------------------------------------------------------

FORMATS = [["--format", "table"], ["--format", "json"], ["--format", "markdown"], ["--format", "csv"], ["--explain"]]


@pytest.mark.parametrize("args", FORMATS)
def test_every_output_names_its_provenance(capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    digest = hashlib.sha256(DEFAULT_CALIBRATION.read_bytes()).hexdigest()[:12]
    out = run_main(capsys, *args, "--set", "native_engine.overhead_cut=0.35").out
    for fragment in ("calibration.json", digest, eb.__version__, "native_engine.overhead_cut=0.35"):
        assert fragment in out


@pytest.mark.parametrize("args", FORMATS)
def test_identical_runs_give_identical_bytes(args: list[str]) -> None:
    analyses = [] if "csv" in args else ["--sensitivity"]
    first, second = run_script(*args, *analyses), run_script(*args, *analyses)
    assert first.code == 0 and first.out == second.out and first.out


def test_one_byte_changes_the_hash(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    original = DEFAULT_CALIBRATION.read_bytes()
    edited = original.replace(b"spec sheet: about 1.8", b"spec sheet: about 1,8", 1)
    assert len(edited) == len(original) and edited != original
    paths = []
    for name, content in (("a.json", original), ("b.json", edited)):
        paths.append(tmp_path / name)
        paths[-1].write_bytes(content)
    hashes = [run_main(capsys, "--calibration", str(p), "--format", "json").json()["provenance"] for p in paths]
    assert hashes[0]["calibration_sha256"] == hashlib.sha256(original).hexdigest()[:12]
    assert hashes[1]["calibration_sha256"] == hashlib.sha256(edited).hexdigest()[:12]
    assert hashes[0]["calibration_sha256"] != hashes[1]["calibration_sha256"]
    table = run_main(capsys, "--calibration", str(paths[1])).out
    assert f"sha256 {hashlib.sha256(edited).hexdigest()[:12]}" in flat(table)


def test_csv_names_a_solved_value_in_a_column(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--solve", "native_engine.overhead_cut", "--observed", "current/native=463"]
    rows = list(csv.DictReader(io.StringIO(run_main(capsys, *args, "--format", "csv").out)))
    solved = run_main(capsys, *args, "--format", "json").json()["solve"]["value"]
    assert {float(r["native_engine.overhead_cut"]) for r in rows} == {solved}


def test_csv_refuses_sensitivity_rather_than_dropping_it(capsys: pytest.CaptureFixture[str]) -> None:
    run = run_main(capsys, "--sensitivity", "--format", "csv")
    assert run.code == 2 and run.out == "" and "--sensitivity needs table, json or markdown" in run.err


def test_no_chart_leaves_the_mermaid_block_out(capsys: pytest.CaptureFixture[str]) -> None:
    assert "```mermaid" in run_main(capsys, "--format", "markdown").out
    assert "```mermaid" not in run_main(capsys, "--format", "markdown", "--no-chart").out


def test_markdown_sweep_table_has_a_one_line_header(capsys: pytest.CaptureFixture[str]) -> None:
    """A pipe table's header must be one line followed by the delimiter row, or GitHub shows no table."""
    out = run_main(capsys, "--format", "markdown", "--sweep", "native_engine.overhead_cut=0.2,0.4").out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| native\\_engine.overhead\\_cut"))
    assert lines[header + 1].startswith("|---") and lines[header + 1].endswith(":|")  # numbers, right-aligned
    texts = run_main(capsys, "--format", "markdown", "--sweep", "hardware.target.name=B300,B200").out.splitlines()
    assert next(line for line in texts if line.startswith("|:---"))  # texts, left-aligned
    assert "current/sglang step ms" in lines[header] and "stronger/native@14 tok/s" in lines[header]


@pytest.mark.parametrize(
    "args", [[], ["--calibration", "tests/data/measured.json", "--fit", "native_engine.overhead_cut"]]
)
def test_explain_shows_each_figure_once(capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    """The bandwidth ratio is computed for every MoE time; --explain prints it once."""
    out = run_main(capsys, "--explain", *args).out
    lines = [line for line in out.splitlines() if " = " in line and not line.startswith("  accept = ")]
    computed = [line for line in lines if ", from " not in line]
    assert len(computed) == len(set(computed)), [line for line in computed if computed.count(line) > 1][:3]
    assert out.count("bandwidth ratio = target bandwidth / reference bandwidth") == 1


def test_explain_names_where_a_block_reads_a_figure_from(
    capsys: pytest.CaptureFixture[str], write_calibration: Callable[[object], Path]
) -> None:
    """A block that reads a figure worked out under an earlier block names it, its value and that block, which
    shows it: the step of stronger/native@14 is stronger/native@12's. Measurements of one tree share a step;
    a label with " (" in it named the wrong block (found by an attack)."""
    doc = default_doc()
    tree = {"drafter": "stronger", "pipeline": "native", "budget": 16}
    doc["measurements"] = [{**tree, "label": "x (y)", "accept": 10, "tok_s": 700}, {**tree, "accept": 11, "tok_s": 750},
                           {**tree, "label": "x", "accept": 12, "tok_s": 780}]  # fmt: skip
    for args in ([], ["--calibration", str(write_calibration(doc))]):
        blocks = run_main(capsys, "--explain", *args).out.split("\n\n")
        at_14 = next(b for b in blocks if b.startswith("Scenario stronger/native@14"))
        assert at_14.splitlines()[1] == "  step = 14.73 ms, from Scenario stronger/native@12"
        assert "\n  of ceiling = tok/s / ceiling = 950.4 / 3134.6 = 30.3%" in at_14  # as @12's in value, not in numbers
        references = 0
        for i, block in enumerate(blocks):
            for line in (line for line in block.splitlines() if ", from " in line):
                references += 1
                figure, _, where = line.strip().partition(", from ")
                name, _, value = figure.partition(" = ")
                named = [b for b in blocks[:i] if b.startswith((f"{where} (", f"{where}:", f"{where}\n"))]
                assert len(named) == 1, line
                shown = named[0].splitlines()
                assert any(row.startswith(f"  {name} = ") and row.endswith(f" = {value}") for row in shown), line
                assert where != "Calibration"  # every block reads the calibration's
        assert references >= 10
    assert "\n  step = 12.39 ms, from Measurement x (y) (measurements[0])\n" in "\n\n".join(blocks)


def test_a_sweeps_scenario_is_written_as_json_writes_it() -> None:
    """A sweep writes each scenario from a template of its keys: the text json.dumps gives the same record, for every
    kind of value (None without `model`, false where SGLang cannot run, a reason with quotes, escapes and non-ASCII)."""
    doc = default_doc()
    doc["sglang"]["max_budget_source"] = 'say "no" \\ to \u00e9\u4e2d\U0001f680\t\x1b, 1e400'
    bare = {k: v for k, v in doc.items() if k != "model"}
    for calibration in (doc, bare):
        rows = eb.scenarios(eb.parse_calibration(calibration))
        assert {row.runnable for row in rows} == {True, False}
        for row in rows:
            assert eb.scenario_json_text(row) == json.dumps(eb._scenario_json(row))
    assert None in eb._scenario_json(rows[-1]).values()  # the floor and the ceiling, without `model`
