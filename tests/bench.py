"""Benchmarks (run by hand; pytest does not collect them). The README quotes what they print.

    .venv/bin/python tests/bench.py [ROUNDS] [--only startup|sweeps|fit|large] [--against DIR]

1. Start-up: the median wall time of a bare interpreter, `import tabulate`, and the installed
   `estimate-b300` with the default tables and with --format json, interleaved round by round
   so that machine noise hits every command alike; then their ratios.
2. Sweeps: a 100,000-point `--sweep native_engine.overhead_cut=...` (800,000 scenarios) in each
   format, its wall time and its peak resident memory (from wait4: the largest of the process's
   own and its workers'), on every CPU the machine gives and, under `taskset`, on one; then, in
   process on one CPU over 20,000 points, where a JSON point's time goes (the check, which estimates
   the point and holds it compressed; reading it back; encoding it). With `--against DIR`,
   the same run of DIR/estimate_b300.py on DIR/calibration.json (another checkout) follows. The
   runs of one format go one right after the other, and each prints its ratio to the first.
3. Fits, in process: measurements made by the model at known values with 1% noise, fitted from
   the shipped values: 5 values to 50 measurements (the least squares alone, then with
   leave-one-out), and 2 and 5 values to 100 measurements with leave-one-out.
4. Large runs: a 1,000-point curve with --sensitivity, fits of 100 measurements over many trees
   (of 8 values too, and of measurements no values can reach, which spend the fit's budgets),
   a sweep of one point, and the largest cases an attack found (10 ranges, 4 on accept lengths,
   beside a fit of 8 values or a solve by bisection): the installed command with --format json,
   3 rounds, on every CPU and on one.

It needs `pip install .` (or `-e .`) into the interpreter that runs it.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import sysconfig
import time
from collections.abc import Sequence
from pathlib import Path

import estimate_b300 as eb

ROOT = Path(__file__).resolve().parent.parent


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
    print(f"default tables / import tabulate: {table:.2f}x")
    print(f"--format json / bare python:      {as_json:.2f}x")


def sweeps(exe: Path, against: Path | None) -> None:
    points = 100_000
    step = 0.9 / points
    sweep = ["--sweep", f"native_engine.overhead_cut=0:{0.9 - step / 2}:{step}"]
    runs = {f"on {len(os.sched_getaffinity(0))} CPUs": [str(exe)]}
    if shutil.which("taskset"):  # the same run without workers
        runs["on one CPU"] = ["taskset", "-c", str(min(os.sched_getaffinity(0))), str(exe)]
    if against:
        runs[str(against)] = [sys.executable, str(against / "estimate_b300.py"), "--calibration",
                              str(against / "calibration.json")]  # fmt: skip
    for fmt in ("json", "csv", "table", "markdown"):
        first = None
        for name, command in runs.items():  # one after the other, so that machine noise hits each alike
            seconds, peak_mb = timed([*command, *sweep, "--format", fmt])
            first = first or seconds
            ratio = f" ({seconds / first:.2f}x the time of the first)" if seconds != first else ""
            print(f"sweep of {points:,} points, --format {fmt:8s} {name}: {seconds:5.1f} s, peak {peak_mb:5.0f} MB"
                  f"{ratio}")  # fmt: skip
    sweep_split(20_000)


def timed(command: list[str]) -> tuple[float, float]:
    """A command's wall time in seconds and its peak resident memory in MB: from wait4, the largest of the
    child's own and its workers'."""
    start = time.perf_counter()
    with open(os.devnull, "w") as devnull:
        child = subprocess.Popen(command, stdout=devnull)
        _, status, usage = os.wait4(child.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, command
    return time.perf_counter() - start, usage.ru_maxrss / 1024  # KiB on Linux


def sweep_split(points: int) -> None:
    """Where a JSON sweep point's time goes, in process on one CPU: the check, reading it back, the encoding."""
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})  # no workers
    try:
        _sweep_split(points)
    finally:
        os.sched_setaffinity(0, cpus)


def _sweep_split(points: int) -> None:
    doc, _ = eb.read_document(eb.default_calibration_path())
    cal = eb.parse_calibration(doc)
    step = 0.9 / points
    sweep = eb.parse_sweep(f"native_engine.overhead_cut=0:{0.9 - step / 2}:{step}")
    t0 = time.perf_counter()
    plan = eb.plan_sweep(doc, cal, [sweep], "bench")
    check = time.perf_counter() - t0
    held = sum(map(len, filter(None, plan.held)))
    every_point = functools.partial(plan.in_chunks, lambda points, _: points)  # on one CPU: in this process
    t0 = time.perf_counter()
    for _ in itertools.chain.from_iterable(every_point()):
        pass
    read = time.perf_counter() - t0
    encode = 0.0
    scenario = eb.encoded_once(eb.scenario_json_text)  # as render_json encodes
    for point in itertools.chain.from_iterable(every_point()):
        t0 = time.perf_counter()
        f'{{"values": {json.dumps(dict(point.values))}, "scenarios": [{", ".join(map(scenario, point.scenarios))}]}}'
        encode += time.perf_counter() - t0
    check, read, encode = (1e6 * t / points for t in (check, read, encode))
    print(f"a JSON sweep point, over {points:,}: check {check:.0f} us (held in {held / points:.0f} bytes), ", end="")
    print(f"read back {read:.0f} us, encode {encode:.0f} us")


def generated(n: int, rng: random.Random) -> tuple[dict[str, object], list[dict[str, object]]]:
    """The shipped calibration, and n measurements the model makes at other values, with 1% noise."""
    doc = json.loads((ROOT / "calibration.json").read_text())
    truth = {
        "native_engine.overhead_cut": 0.31,
        "stronger_drafter.spec_scale": 1.7,
        "anchors.ar_tok_s": 130.0,
        "moe_curve.points[2].ms": 24.5,
        "anchors.ddtree.tok_s": 300.0,
    }
    at = doc
    for path, value in truth.items():
        at = eb.set_path(at, eb.parse_path(path), value)
    cal = eb.parse_calibration(at)
    entries = []
    for i in range(n):
        kind = i % 4
        if kind == 3:
            entry: dict[str, object] = {"decode": "autoregressive", "pipeline": "native"}
        elif kind == 2:
            entry = {"drafter": "stronger", "pipeline": "native", "accept": 12 + i % 5}
        else:
            entry = {"drafter": "current", "pipeline": rng.choice(eb.PIPELINES), "budget": rng.choice([8, 12, 16, 24])}
            entry["accept"] = 4.0 + (i % 5) * 0.2
        entries.append(entry)
    cal = eb.parse_calibration(eb.set_path(at, ("measurements",), [{**e, "tok_s": 1.0} for e in entries]))
    for entry, p in zip(entries, eb.predictions(cal), strict=True):
        entry["tok_s"] = p.predicted_tok_s * math.exp(rng.gauss(0, 0.01))
    return eb.set_path(doc, ("measurements",), entries), entries  # type: ignore[return-value]


def _residuals(
    doc: object, cal: eb.Calibration, paths: list[eb.PathSegments], values: Sequence[float], *, probe: bool = False
) -> list[float]:
    at = eb.recalibrate(doc, cal, list(zip(paths, values, strict=True)))[1]
    if not probe:
        eb.scenarios(at)  # as the fit does at each trial, but not at a probe of the Jacobian
    return [p.residual for p in eb.predictions(at)]


def fits() -> None:
    paths = [
        "native_engine.overhead_cut",
        "stronger_drafter.spec_scale",
        "anchors.ar_tok_s",
        "moe_curve.points[2].ms",
        "anchors.ddtree.tok_s",
    ]
    rng = random.Random(1)
    for n, p in ((50, 5), (100, 2), (100, 5)):
        doc, _ = generated(n, rng)
        cal = eb.parse_calibration(doc)
        keys = [eb.fittable(cal, path, "--fit") for path in paths[:p]]
        start = [eb.number_at(doc, path) for path, _ in keys]

        residuals = functools.partial(_residuals, doc, cal, [path for path, _ in keys])
        r0 = residuals(start)
        assert r0 is not None
        t0 = time.perf_counter()
        ends = [eb._ends(domain) for _, domain in keys]
        eb._levenberg_marquardt(residuals, start, r0, ends)  # the least squares alone
        alone = time.perf_counter() - t0
        t0 = time.perf_counter()
        eb.fit(doc, cal, paths[:p], cal.measurements)
        whole = time.perf_counter() - t0
        print(
            f"fit of {p} values to {n:3d} measurements: least squares {1000 * alone:5.0f} ms; "
            f"with leave-one-out {whole:5.2f} s"
        )


def large_calibrations(directory: Path) -> dict[str, list[str]]:
    """Runs on a 1,000-point curve, and a fit of measurements that no values explain: name -> arguments."""
    doc = json.loads((ROOT / "calibration.json").read_text())
    distinct = [384 * (1 - (1 - 8 / 384) ** m) for m in range(1, 1001)]  # uniform routing over Kimi K2's experts
    curve = [{"m": m, "ms": 0.5 + 0.25 * d} for m, d in enumerate(distinct, 1)]
    on_points = {f"moe_curve.points[{i}].ms": {"relative": 0.05, "source": "x"} for i in (3, 8, 31, 32)}
    sensitivity = {**doc, "moe_curve": {**doc["moe_curve"], "points": curve}, "ranges": doc["ranges"] | on_points}
    experts = {**sensitivity, "moe_curve": {**sensitivity["moe_curve"], "fit": "experts"}}
    experts["ranges"] = {f"moe_curve.points[{i}].ms": {"relative": 0.05, "source": "x"} for i in range(0, 100, 10)}
    trees = {k: v for k, v in doc.items() if k != "sglang"}
    trees["moe_curve"] = {**doc["moe_curve"], "points": [{"m": m, "ms": 0.5 + 0.08 * m**0.8} for m in range(1, 1001)]}
    trees["measurements"] = [
        {"decode": "autoregressive", "pipeline": "native", "tok_s": 200.0} if i % 10 == 0 else
        {"drafter": ["current", "stronger"][i % 2], "pipeline": "native", "block": 16, "budget": 8 + i,
         "accept": 5.0 + i % 2, "tok_s": 420.0 + i}
        for i in range(100)
    ]  # fmt: skip
    rng = random.Random(11)
    wild = {**trees, "measurements": []}
    for i in range(100):
        if i % 5 == 0:
            wild["measurements"].append({"decode": "autoregressive", "pipeline": rng.choice(eb.PIPELINES),
                                         "tok_s": rng.uniform(100, 250)})  # fmt: skip
            continue
        block, budget = rng.choice([4, 8, 16]), rng.randint(4, 600)
        wild["measurements"].append({"drafter": rng.choice(eb.DRAFTERS), "pipeline": rng.choice(eb.PIPELINES),
                                     "block": block, "budget": budget, "tok_s": rng.uniform(150, 900),
                                     "accept": round(rng.uniform(1.5, min(block, budget) + 1), 2)})  # fmt: skip
    runaway = {**wild, "measurements": [{**m, "tok_s": 50 * m["tok_s"]} for m in wild["measurements"]]}
    lengths = {**wild, "stronger_drafter": {**wild["stronger_drafter"], "accept": [1 + i / 4 for i in range(64)]}}
    on_accepts = {key: {"relative": 0.01, "source": "x"} for key in ("anchors.ddtree.accept", *(
        f"stronger_drafter.accept[{i}]" for i in (10, 30, 50)))}  # fmt: skip
    studied = {**lengths, "ranges": doc["ranges"] | on_accepts}  # 10 ranges, 4 of them on accept lengths
    files = {}
    named = {"sensitivity": sensitivity, "experts": experts, "trees": trees, "wild": wild, "runaway": runaway,
             "lengths": lengths, "studied": studied}  # fmt: skip
    for name, content in named.items():
        files[name] = directory / f"{name}.json"
        files[name].write_text(json.dumps(content))

    def fitting(*paths: str) -> list[str]:
        return [f"--fit={path}" for path in ("native_engine.overhead_cut", "stronger_drafter.spec_scale", *paths)]

    five = fitting(*(f"moe_curve.points[{i}].ms" for i in (20, 60, 90)))
    wild5 = fitting("anchors.ar_tok_s", *(f"moe_curve.points[{i}].ms" for i in (46, 279)))
    points = [f"moe_curve.points[{i}].ms" for i in (46, 279, 119, 52)]
    wild8 = fitting("anchors.ar_tok_s", "anchors.ddtree.tok_s", *points)
    runaway8 = fitting("hardware.target.mem_bandwidth_tb_s", "anchors.ddtree.tok_s", *points)
    sweep = "moe_curve.points[5].ms=9:10:0.01"
    return {
        "--sensitivity, 10 ranges (4 on points)": [f"--calibration={files['sensitivity']}", "--sensitivity"],
        '--sensitivity, "experts", 10 ranges on points': [f"--calibration={files['experts']}", "--sensitivity"],
        "--fit of 2 values to 100 measurements over 90 trees": [f"--calibration={files['trees']}", *fitting()],
        "--fit of 5 values to them, and --sensitivity": [f"--calibration={files['trees']}", *five, "--sensitivity"],
        "--fit of 5 values to 100 random measurements": [f"--calibration={files['wild']}", *wild5],
        "--fit of 8 values to them": [f"--calibration={files['wild']}", *wild8],
        "--fit of 8 values to them 50x faster, past what any values give": [
            f"--calibration={files['runaway']}",
            *runaway8,
        ],
        "--fit of 8 values to them with 64 accept lengths (130 scenarios)": [
            f"--calibration={files['lengths']}",
            *wild8,
        ],
        "--sweep of one point's time over 101 values": [f"--calibration={files['trees']}", f"--sweep={sweep}"],
        "the 64 accept lengths, 10 ranges (4 on accept lengths): --fit of 8 values and --sensitivity": [
            f"--calibration={files['studied']}",
            *wild8,
            "--sensitivity",
        ],
        "the same: --solve of an accept length, --sensitivity and --all": [
            f"--calibration={files['studied']}",
            *["--solve=anchors.ddtree.accept", "--observed=current/native@4.4=470", "--sensitivity", "--all"],
        ],
    }


def large(exe: Path, rounds: int) -> None:
    """Each large case as the installed command, on every CPU and on one, interleaved round by round."""
    import tempfile

    one = ["taskset", "-c", str(min(os.sched_getaffinity(0)))] if shutil.which("taskset") else None
    with tempfile.TemporaryDirectory() as directory:
        for name, args in large_calibrations(Path(directory)).items():
            times: dict[str, list[float]] = {"every CPU": [], "one CPU": []}
            for _ in range(rounds):
                for where, prefix in (("every CPU", []), ("one CPU", one)):
                    if prefix is not None:
                        start = time.perf_counter()
                        subprocess.run([*prefix, str(exe), *args, "--format", "json"], capture_output=True, check=True)
                        times[where].append(time.perf_counter() - start)
            spans = ", ".join(f"{where} {min(t):.2f}-{max(t):.2f} s" for where, t in times.items() if t)
            print(f"{name}: {spans} ({rounds} rounds)")


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="The benchmarks the README quotes (see this file's docstring).")
    parser.add_argument("rounds", nargs="?", type=int, default=40, help="start-up rounds (default 40)")
    parser.add_argument("--only", choices=("startup", "sweeps", "fit", "large"), help="one benchmark alone")
    parser.add_argument("--against", type=Path, help="another checkout, whose sweeps run beside these")
    args = parser.parse_args(argv)
    rounds, only = args.rounds, args.only
    against = args.against.resolve() if args.against else None
    exe = Path(sysconfig.get_path("scripts")) / "estimate-b300"
    if only in (None, "startup", "sweeps", "large") and not exe.exists():
        print(f"{exe} not found: run `pip install .` into this environment first", file=sys.stderr)
        return 2
    if only in (None, "startup"):
        startup(exe, rounds)
    if only in (None, "sweeps"):
        sweeps(exe, against)
    if only in (None, "fit"):
        fits()
    if only in (None, "large"):
        large(exe, 3)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
