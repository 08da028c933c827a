"""Shared fixtures and helpers: the default calibration as data, the tool run in-process or as a command."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import estimate_b300 as eb

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "estimate_b300.py"
DEFAULT_CALIBRATION = ROOT / "calibration.json"
GOLDEN = Path(__file__).parent / "golden"
MEASURED = Path(__file__).parent / "data" / "measured.json"  # the README's example log of measurements
_DEFAULT_DOC = json.loads(DEFAULT_CALIBRATION.read_text())


@dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def default_doc() -> dict[str, Any]:
    """A fresh, mutable copy of the shipped calibration.json."""
    return copy.deepcopy(_DEFAULT_DOC)


def mutated(edit: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    """The default calibration with one edit applied."""
    doc = default_doc()
    edit(doc)
    return doc


def estimate_of(doc: object) -> eb.Estimate:
    return eb.estimate(eb.parse_calibration(doc))


def default_estimate() -> eb.Estimate:
    return estimate_of(default_doc())


def find(est: eb.Estimate, drafter: str, pipeline: str, accept: float) -> eb.Scenario:
    (row,) = [s for s in est.scenarios if (s.drafter, s.pipeline, s.accept) == (drafter, pipeline, accept)]
    return row


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> Run:
    """The tool in-process (fast), stdout and stderr captured."""
    try:
        code = eb.main(list(argv))
    except SystemExit as exc:  # argparse's --help and --version
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return Run(code, captured.out, captured.err)


def run_script(
    *argv: str, cwd: Path = ROOT, exe: list[str] | None = None, env: dict[str, str] | None = None, encoding: str = ""
) -> Run:
    """The tool as a user runs it: a separate process (its output read in `encoding`, else the locale's)."""
    cmd = (exe or [sys.executable, str(SCRIPT)]) + list(argv)
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | (env or {})  # the chart is 80 wide by default
    proc = subprocess.run(cmd, capture_output=True, text=True, encoding=encoding or None, cwd=cwd, timeout=60, env=env)
    return Run(proc.returncode, proc.stdout, proc.stderr)


def installed_command() -> str | None:
    """The console script of a `pip install` into this interpreter's environment, if there is one."""
    candidate = Path(sysconfig.get_path("scripts")) / "estimate-b300"
    return str(candidate) if candidate.exists() else shutil.which("estimate-b300")


def assert_clean_error(run: Run, *fragments: str) -> None:
    """Exit 2, nothing on stdout, one line on stderr that names the file and says what is wrong."""
    assert run.code == 2, run.err
    assert run.out == ""
    assert "Traceback" not in run.err
    assert run.err.count("\n") == 1, run.err
    assert run.err.startswith("estimate_b300: ")
    for fragment in fragments:
        assert fragment in run.err, f"{fragment!r} not in {run.err!r}"


@pytest.fixture
def write_calibration(tmp_path: Path) -> Callable[..., Path]:
    """Write a calibration document (or raw text) under tmp_path and return its path."""

    def write(doc: object, name: str = "calibration.json") -> Path:
        path = tmp_path / name
        path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
        return path

    return write


@pytest.fixture(autouse=True)
def _project_root_at_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Output names the calibration relative to the working directory, and the chart follows $COLUMNS."""
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("COLUMNS", raising=False)


def flat(text: str) -> str:
    """Text with every run of white space one space: what a reader sees once lines are wrapped to the width."""
    return " ".join(text.split())


def on_cpus(monkeypatch: pytest.MonkeyPatch, n: int) -> list[int]:
    """Make the tool see n CPUs, so that a large run forks up to n workers; the list gathers their pids."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(n)))
    forked: list[int] = []
    fork = os.fork

    def counted() -> int:
        pid = fork()
        if pid:
            forked.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", counted)
    return forked


def counting(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> list[object]:
    """Count the calls of module.name from now on: the list gains the first argument of each."""
    calls: list[object] = []
    function = getattr(module, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[0] if args else None)
        return function(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls
