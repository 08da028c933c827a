"""Start-up benchmark of the installed command (run by hand; pytest does not collect it).

    .venv/bin/python tests/bench_startup.py [ROUNDS]

Times, interleaved round by round so that machine noise hits every command alike,
the median wall time of: a bare interpreter, `import tabulate`, and the installed
`estimate-b300` with the default tables and with --format json. Prints the ratios
the README quotes. Run it from any directory; it needs `pip install .` first.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path


def main(rounds: int) -> int:
    exe = Path(sysconfig.get_path("scripts")) / "estimate-b300"
    if not exe.exists():
        print(f"{exe} not found: run `pip install .` into this environment first", file=sys.stderr)
        return 2
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 40))
