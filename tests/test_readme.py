"""Every `console` sample in README.md is what the tool prints for its command, at 80 columns.

A sample is `$ estimate-b300 ARGS` and the lines under it: stderr, then stdout, as a terminal
shows them. The command may end in `| head -n N`, `| tail -n N` or `| tail -n +N` (any of them,
in turn). It runs in process from the project root; without --calibration it reads the shipped
file by the name `calibration.json`, as the script and an editable install print it.

    .venv/bin/python tests/test_readme.py --write    # regenerate the samples after a change
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import sys
from pathlib import Path

import pytest

import estimate_b300 as eb

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"^```console\n(.*?)^```\n", re.M | re.S)


def samples(text: str) -> list[tuple[str, str]]:
    """(command, the output under it) for each `$ ` line of each console block."""
    found = []
    for block in BLOCK.findall(text):
        for part in re.split(r"^\$ ", block, flags=re.M)[1:]:
            command, _, output = part.partition("\n")
            found.append((command, output))
    return found


def run(command: str) -> str:
    """What a terminal shows for the command: its stderr, then its stdout through the pipes."""
    program, *pipes = [shlex.split(part) for part in command.split(" | ")]
    assert program[0] == "estimate-b300", command
    argv = program[1:] if "--calibration" in program else ["--calibration", "calibration.json", *program[1:]]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
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
    return err.getvalue() + "".join(lines)


SAMPLES = samples(README.read_text())


def test_the_readme_has_its_samples() -> None:
    assert len(SAMPLES) >= 12
    assert SAMPLES[0][0] == "estimate-b300"


@pytest.mark.parametrize(("command", "shown"), SAMPLES, ids=[c for c, _ in SAMPLES])
def test_each_readme_sample_is_what_the_tool_prints(command: str, shown: str) -> None:
    assert run(command) == shown


def write() -> None:
    """Put each sample's output under its command."""
    text = README.read_text()

    def fill(block: re.Match[str]) -> str:
        commands = [command for command, _ in samples(block.group(0))]
        return "```console\n" + "".join(f"$ {c}\n{run(c)}" for c in commands) + "```\n"

    README.write_text(BLOCK.sub(fill, text))


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    os.chdir(README.parent)
    os.environ.pop("COLUMNS", None)
    write()
