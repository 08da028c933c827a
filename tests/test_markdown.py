"""The Markdown document as a GFM parser reads it: tables, rows, cells, escaping, the Mermaid block."""

from __future__ import annotations

import re
from typing import Any

import pytest
from conftest import default_doc, run_main
from markdown_it import MarkdownIt
from markdown_it.token import Token

GFM = MarkdownIt("commonmark").enable("table")


def parse(text: str) -> list[Token]:
    return GFM.parse(text)


def tables(tokens: list[Token]) -> list[list[list[str]]]:
    """Each table as rows of cell texts, the header row first; a cell's text as a reader sees it."""
    found: list[list[list[str]]] = []
    previous = ""
    for token in tokens:
        if token.type == "table_open":
            found.append([])
        elif token.type == "tr_open":
            found[-1].append([])
        elif token.type == "inline" and previous in ("th_open", "td_open"):
            found[-1][-1].append(_text(token))
        previous = token.type
    return found


def _text(inline: Token) -> str:
    """The visible text of an inline token: what a reader sees, with no markup taken from the content."""
    parts = []
    for child in inline.children or []:
        if child.type in ("text", "code_inline"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        else:  # emphasis, links, raw HTML: markup the tool must never produce from its data
            parts.append(f"<{child.type}>")
    return "".join(parts)


def document(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    run = run_main(capsys, "--format", "markdown", *args)
    assert run.code == 0, run.err
    return run.out


@pytest.mark.parametrize(
    ("args", "shape"),
    [
        ([], [(8, 5), (3, 9), (7, 9)]),  # calibration, current drafter, stronger drafter: rows incl. the header
        (["--all"], [(8, 5), (3, 9), (7, 9), (5, 4), (5, 4), (4, 7), (9, 7)]),
        (["--sensitivity"], [(8, 5), (3, 9), (7, 9), (7, 7)]),
        (["--sweep", "native_engine.overhead_cut=0.2:0.6:0.1"], [(6, 13)]),
    ],
)
def test_the_tables_a_document_should_have(capsys: pytest.CaptureFixture[str], args: list[str], shape: Any) -> None:
    """Every table with exactly its rows: a line after a table never becomes a row of it."""
    found = tables(parse(document(capsys, *args)))
    assert [(len(t), len(t[0])) for t in found] == shape
    assert all(len(row) == len(t[0]) for t in found for row in t)
    assert not any("Band:" in cell or "MoE(M) is read" in cell for t in found for row in t for cell in row)


def test_numbers_are_right_aligned(capsys: pytest.CaptureFixture[str]) -> None:
    html = GFM.render(document(capsys))
    header = re.search(r"<tr>\s*<th[^>]*>pipeline</th>(.*?)</tr>", html, re.S)
    assert header is not None
    assert re.findall(r'<th style="text-align:(\w+)">', header.group(1)) == ["right"] * 7 + ["left"]


def test_a_sweep_of_accept_lists_keeps_each_step_beside_its_throughputs(capsys: pytest.CaptureFixture[str]) -> None:
    """A point with more accept lengths than the first: its columns go beside their step, not at the end."""
    (sweep,) = tables(parse(document(capsys, "--sweep", "stronger_drafter.accept=[12],[12,14]")))
    assert sweep[0][5:] == [
        "stronger/sglang step ms", "stronger/sglang@12 tok/s", "stronger/sglang@14 tok/s", "stronger/native step ms",
        "stronger/native@12 tok/s", "stronger/native@14 tok/s",
    ]  # fmt: skip
    assert [row[7] for row in sweep[1:]] == ["", "670"]  # @14 at the point that has it


def test_the_chart_draws_tiny_steps(capsys: pytest.CaptureFixture[str]) -> None:
    """A million times faster than B300: steps of 0.00001 ms, which two places drew as 0.00 (Mermaid reads no
    exponent); and a billion times slower, 14 digits a bar."""
    fast = [f"moe_curve.points[{i}].ms={ms}" for i, ms in enumerate((1.15e-6, 8.85e-6, 2.38e-5))]
    args = [a for key in ("anchors.ar_tok_s=1.33e8", "anchors.ddtree.tok_s=3.03e8", *fast) for a in ("--set", key)]
    out = document(capsys, *args)
    assert 'title "Step time (1e-5 ms)"' in out  # in a unit of its own power of ten, to 3 digits
    assert '    y-axis "1e-5 ms" 0 --> 3\n    bar "SPEC" [1.45, 0.95, 2.09, 1.47]\n' in out
    assert '    y-axis "ms" 0 --> 21\n    bar "SPEC" [14.52, 9.51, 20.88, 14.73]\n' in document(capsys)
    slow = document(capsys, "--set", "anchors.ar_tok_s=1e-9", "--set", "anchors.ddtree.tok_s=2e-9", "--no-chart")
    assert "```mermaid" not in slow  # --no-chart holds in Markdown too
    slow = document(capsys, "--set", "anchors.ar_tok_s=1e-9", "--set", "anchors.ddtree.tok_s=2e-9")
    assert '    y-axis "1e12 ms" 0 --> 3\n    bar "SPEC" [2.20, 1.32, 2.83, 1.70]\n' in slow


def test_a_caption_does_not_repeat_its_heading(capsys: pytest.CaptureFixture[str]) -> None:
    solved = document(capsys, "--solve", "native_engine.overhead_cut", "--observed", "current/native=463")
    assert "### Solved\n\nnative\\_engine.overhead\\_cut = 0.400489 (was 0.4)" in solved  # a key path as it is
    out = document(capsys, "--all")
    assert "### Current drafter\n\nBlock 8, budget 8, verify batch M = 9; times in ms\n" in out
    assert "### Calibration\n\nIn ms, with each part's share of the DDTree step: MoE scales by" in out
    assert "### The MoE floor\n\nThe weight read at 100% of B300's 8 TB/s" in out
    assert "### Chain alpha\n\nWhat each accept length demands" in out  # a title that does not repeat it, whole


def test_the_sweep_headers_name_their_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    (sweep,) = tables(parse(document(capsys, "--sweep", "native_engine.overhead_cut=0.2,0.4")))
    assert sweep[0] == [
        "native_engine.overhead_cut", "current/sglang step ms", "current/sglang@4.4 tok/s", "current/native step ms",
        "current/native@4.4 tok/s", "stronger/sglang step ms", "stronger/sglang@12 tok/s", "stronger/sglang@14 tok/s",
        "stronger/sglang@16 tok/s", "stronger/native step ms", "stronger/native@12 tok/s", "stronger/native@14 tok/s",
        "stronger/native@16 tok/s",
    ]  # each step beside the throughputs it gives, whose marks it carries  # fmt: skip
    assert len(set(sweep[0])) == len(sweep[0])  # no two columns share a header


HOSTILE = "A|B *x* __y__ <b>z</b> [l](u) `c` \\ ~s~ # &amp; _e_"


def test_text_from_the_calibration_lands_unchanged(capsys: pytest.CaptureFixture[str], write_calibration: Any) -> None:
    """Every special character in a source or a name shows as itself, in its cell, with no markup made of it."""
    doc = default_doc()
    doc["hardware"]["target"]["name"] = HOSTILE
    doc["anchors"]["measured_on"] = HOSTILE
    doc["ranges"]["native_engine.overhead_cut"]["source"] = HOSTILE
    out = document(capsys, "--calibration", str(write_calibration(doc)), "--sensitivity")
    tokens = parse(out)
    found = tables(tokens)
    cells = [cell for t in found for row in t for cell in row]
    assert f"measured on {HOSTILE}" in cells  # the calibration table's basis, and the measured row's
    assert HOSTILE in cells  # the sensitivity table's source
    assert [(len(t), len(t[0])) for t in found] == [(8, 5), (3, 9), (7, 9), (7, 7)]  # no cell was split
    texts = [_text(t) for t in tokens if t.type == "inline"]
    assert f"Kimi K2.x + DDTree at concurrency 1 on {HOSTILE}" in texts  # the title
    assert not any(re.search(r"<(em|strong|link|html_inline|s)_open>|<html_inline>", text) for text in texts)


def test_a_link_in_a_source_stays_whole(capsys: pytest.CaptureFixture[str], write_calibration: Any) -> None:
    """A link is written as an autolink: GFM linked a bare URL only up to its first escape (bench\\_results), and
    unescaped, a link's text could make markup ([run](elsewhere), *emphasis*). A `|` in it ends no cell."""
    link = "https://example.org/~ops/bench_results/b300_run_12.md?a=1&b=x|y"
    doc = default_doc()
    doc["ranges"]["native_engine.overhead_cut"]["source"] = f"assumed_here: see {link}."
    doc["anchors"]["ar_tok_s_source"] = "see https://x.org/[run](https://evil.example) and https://x.org/*draft*/v2"
    doc["anchors"]["ddtree"]["tok_s_source"] = "as https://en.wikipedia.org/wiki/Roofline_(model) says"
    out = document(capsys, "--calibration", str(write_calibration(doc)), "--sensitivity")
    assert "assumed\\_here: see <https://example.org/~ops/bench_results/b300_run_12.md?a=1&b=x%7Cy>." in out
    tokens = parse(out)
    found = tables(tokens)
    assert [(len(t), len(t[0])) for t in found][-1] == (7, 7)  # the sensitivity table: no cell split at the `|`
    links = [c.attrs["href"] for t in tokens if t.children for c in t.children if c.type == "link_open"]
    assert links.count("https://example.org/~ops/bench_results/b300_run_12.md?a=1&b=x%7Cy") == 2  # table and list
    assert "https://x.org/%5Brun%5D(https://evil.example)" in links and "https://evil.example" not in links
    assert "https://x.org/*draft*/v2" in links and "https://en.wikipedia.org/wiki/Roofline_(model)" in links
    assert not any(c.type == "em_open" for t in tokens if t.children for c in t.children)


def test_the_mermaid_block(capsys: pytest.CaptureFixture[str]) -> None:
    (fence,) = [t for t in parse(document(capsys)) if t.type == "fence" and t.info == "mermaid"]
    lines = fence.content.splitlines()
    assert lines[0] == "xychart-beta horizontal"
    assert re.findall(r'bar "(\w+)"', fence.content) == ["SPEC", "ATTN_BASE", "MoE"]
    x_axis = next(line for line in lines if "x-axis" in line)
    assert re.findall(r'"([^"]+)"', x_axis) == [
        "current/sglang",
        "current/native",
        "stronger/sglang [1]",  # the run that cannot be made, marked as the tables and the notes mark it
        "stronger/native",
    ]
    for line in lines:
        if line.strip().startswith("bar "):
            assert len(line.split(" [")[1].split(",")) == 4


def test_github_tables_in_the_text_output_keep_their_rows(
    capsys: pytest.CaptureFixture[str], write_calibration: Any
) -> None:
    """--tablefmt github is for pasting into Markdown: no cell wraps onto a row of its own, and text is escaped."""
    doc = default_doc()
    doc["hardware"]["target"]["name"] = HOSTILE
    doc["anchors"]["measured_on"] = HOSTILE
    run = run_main(capsys, "--calibration", str(write_calibration(doc)), "--tablefmt", "github", "--all", "--no-chart")
    assert run.code == 0, run.err
    found = tables(parse(run.out))
    assert [(len(t), len(t[0])) for t in found] == [(8, 5), (3, 9), (7, 9), (5, 4), (5, 4), (4, 7), (9, 7)]
    assert all(len(row) == len(t[0]) for t in found for row in t)
    assert f"measured on {HOSTILE}" in [cell for t in found for row in t for cell in row]
