"""Shared helpers: the default calibration as data, and the tool run in-process or as a command."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import estimate_b300 as eb

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "estimate_b300.py"
DEFAULT_CALIBRATION = ROOT / "calibration.json"


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


_DEFAULT_DOC = json.loads(DEFAULT_CALIBRATION.read_text())


def default_estimate() -> eb.Estimate:
    return eb.estimate(eb.parse_calibration(default_doc()))


def find(est: eb.Estimate, drafter: str, pipeline: str, accept: float) -> eb.Scenario:
    (row,) = [s for s in est.scenarios if (s.drafter, s.pipeline, s.accept) == (drafter, pipeline, accept)]
    return row


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> Run:
    """The tool in-process (fast), stdout and stderr captured."""
    try:
        code = eb.main(list(argv))
    except SystemExit as exc:  # argparse usage errors and --help
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return Run(code, captured.out, captured.err)


def run_script(*argv: str, cwd: Path = ROOT, exe: list[str] | None = None, env: dict[str, str] | None = None) -> Run:
    """The tool as a user runs it: a separate process."""
    cmd = (exe or [sys.executable, str(SCRIPT)]) + list(argv)
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | (env or {})  # the chart is 80 wide by default
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=60, env=env)
    return Run(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def write_calibration(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Write a calibration document (or raw text) under tmp_path and return its path."""

    def write(doc: object, name: str = "calibration.json") -> Path:
        path = tmp_path / name
        path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
        return path

    return write
