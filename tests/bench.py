"""Benchmarks of the installed command (run by hand; pytest does not collect them).

    .venv/bin/python tests/bench.py [ROUNDS]

1. Start-up: the median wall time, interleaved round by round so that machine
   noise hits every command alike, of a bare interpreter, `import tabulate`, and
   `estimate-b300` with the default tables and with --format json.
2. Sweeps: `--sweep native_engine.overhead_cut=...` with JSON output at 1,000,
   5,000, 10,000 and 20,000 points (8 scenario objects each), pinned to one core
   where the platform allows, to show the time per point stays flat.

It prints the ratios the README quotes. Run it from any directory; it needs
`pip install .` first.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path


def startup(exe: Path, rounds: int) -> None:
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "python -c 'import tabulate'": [sys.executable, "-c", "import tabulate"],
        "estimate-b300": [str(exe)],
        "estimate-b300 --format json": [str(exe), "--format", "json"],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, cmd in commands.items():
            start = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
            times[name].append(time.perf_counter() - start)
    median_ms = {name: 1000 * statistics.median(values) for name, values in times.items()}
    for name, ms in median_ms.items():
        print(f"{name:32s} {ms:7.1f} ms (median of {rounds})")
    table = median_ms["estimate-b300"] / median_ms["python -c 'import tabulate'"]
    as_json = median_ms["estimate-b300 --format json"] / median_ms["python -c pass"]
    print(f"default tables / import tabulate: {table:.2f}x (goal <= 1.2x)")
    print(f"--format json / bare python:      {as_json:.2f}x (goal <= 3x)")


def sweeps(exe: Path, rounds: int) -> None:
    pin = [] if not hasattr(os, "sched_setaffinity") else ["taskset", "-c", "0"]
    if pin and subprocess.run(["taskset", "-c", "0", "true"], capture_output=True).returncode != 0:
        pin = []
    for points in (1_000, 5_000, 10_000, 20_000):
        step = 0.9 / points
        cmd = [*pin, str(exe), "--sweep", f"native_engine.overhead_cut=0:{0.9 - step / 2}:{step}", "--format", "json"]
        times = []
        for _ in range(max(3, rounds // 10)):
            start = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
            times.append(time.perf_counter() - start)
        best = min(times)
        print(
            f"sweep of {points:6,} points, JSON: {best:6.3f} s (best of {len(times)}), "
            f"{1e6 * best / points:5.1f} us/point"
        )


def main(rounds: int) -> int:
    exe = Path(sysconfig.get_path("scripts")) / "estimate-b300"
    if not exe.exists():
        print(f"{exe} not found: run `pip install .` into this environment first", file=sys.stderr)
        return 2
    startup(exe, rounds)
    sweeps(exe, rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 40))
