"""Every `console` sample in README.md is what the tool prints for its command, at 80 columns.

A sample is `$ .venv/bin/estimate-b300 ARGS` and the lines under it: stdout, then stderr (an error,
or the warnings the tool writes after its output), as a terminal shows them. The command may end
in `| head -n N`, `| tail -n N` or `| tail -n +N` (in turn). It runs in process, in a scratch copy
of the project root as the README's first command leaves it: the installed command reads its
calibration from `.venv/share/estimate-b300/`.

    .venv/bin/python tests/test_readme.py --write    # regenerate the samples after a change
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

import estimate_b300 as eb

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
EXAMPLE = "tests/data/measured.json"
BLOCK = re.compile(r"^```console\n(.*?)^```\n", re.M | re.S)


def samples(text: str) -> list[tuple[str, str]]:
    """(command, the output under it) for each `$ ` line of each console block."""
    found = []
    for block in BLOCK.findall(text):
        for part in re.split(r"^\$ ", block, flags=re.M)[1:]:
            command, _, output = part.partition("\n")
            found.append((command, output))
    return found


INSTALLED = ".venv/share/estimate-b300/calibration.json"  # where `pip install .` puts the calibration
COMMAND = ".venv/bin/estimate-b300"


def run(command: str, root: Path) -> str:
    """What a terminal shows for the command in `root`: its stdout through the pipes, then its stderr."""
    program, *pipes = [shlex.split(part) for part in command.split(" | ")]
    assert program[0] == COMMAND, command
    argv = program[1:] if "--calibration" in program else ["--calibration", INSTALLED, *program[1:]]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), contextlib.chdir(root):
        eb.main(argv)
    lines = out.getvalue().splitlines(keepends=True)
    for pipe in pipes:
        match pipe:
            case ["head", "-n", n]:
                lines = lines[: int(n)]
            case ["tail", "-n", n] if n.startswith("+"):
                lines = lines[int(n) - 1 :]
            case ["tail", "-n", n]:
                lines = lines[-int(n) :]
            case _:
                raise AssertionError(f"{command}: only head -n and tail -n are understood")
    return "".join(lines) + err.getvalue()


def installed_root(scratch: Path) -> Path:
    """The files the samples read, where an installed command finds them."""
    for name, source in [(INSTALLED, ROOT / "calibration.json"), (EXAMPLE, ROOT / EXAMPLE)]:
        (scratch / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, scratch / name)
    return scratch


SAMPLES = samples(README.read_text())


def test_the_readme_has_its_samples_and_no_placeholder() -> None:
    assert len(SAMPLES) >= 12
    assert SAMPLES[0][0] == COMMAND
    assert not re.search(r"^[A-Z][A-Z_]+$", README.read_text(), re.M)  # a placeholder left on its own line


def test_each_link_within_the_readme_lands_on_a_heading() -> None:
    """A link `(#anchor)` names a heading as GitHub makes its anchor: lower case, punctuation dropped,
    spaces as hyphens."""
    text = README.read_text()
    headings = re.findall(r"^#{1,6} (.+)$", re.sub(r"(?ms)^```.*?^```$", "", text), re.M)
    anchors = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}
    links = re.findall(r"\]\(#([^)]+)\)", text)
    assert len(links) >= 5
    assert [link for link in links if link not in anchors] == []


@pytest.mark.parametrize(("command", "shown"), SAMPLES, ids=[c for c, _ in SAMPLES])
def test_each_readme_sample_is_what_the_tool_prints(command: str, shown: str, tmp_path: Path) -> None:
    assert run(command, installed_root(tmp_path)) == shown


def write() -> None:
    """Put each sample's output under its command."""
    text = README.read_text()
    with tempfile.TemporaryDirectory() as scratch:
        root = installed_root(Path(scratch))

        def fill(block: re.Match[str]) -> str:
            commands = [command for command, _ in samples(block.group(0))]
            return "```console\n" + "".join(f"$ {c}\n{run(c, root)}" for c in commands) + "```\n"

        README.write_text(BLOCK.sub(fill, text))


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    os.environ.pop("COLUMNS", None)
    write()
