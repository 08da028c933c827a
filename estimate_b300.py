# /// script
# requires-python = ">=3.11"
# dependencies = ["tabulate>=0.9"]
# ///
"""Estimate Kimi K2.x decode throughput with DDTree speculative decoding on B300.

What it estimates
-----------------
Tokens per second at concurrency 1 for the DDTree pipeline (a block-diffusion
drafter proposes a token tree; the target model verifies the tree in one
forward pass of M = budget + 1 tokens and commits `accept` tokens on average),
for the current drafter and for a stronger one, on today's SGLang pipeline and
on the native C++/CUDA engine.

How it estimates
----------------
One decode step on the target GPU is split into three parts:

    MoE(M)     = curve(M) / bandwidth_ratio      the routed-expert forward
    ATTN_BASE  = 1000 / ar_tok_s - MoE(1)        everything else in an AR step
    SPEC       = 1000 * accept / tok_s           draft, tree build, extra verify
                 - MoE(budget + 1) - ATTN_BASE

`curve` is the MoE forward time measured on a reference GPU (piecewise linear
in M, extrapolated along the end segments), and bandwidth_ratio is the target's
memory bandwidth over the reference's: the MoE forward is bandwidth-bound.
The two anchors (`ar_tok_s`, the DDTree `tok_s` at `accept`) are measured on
the target itself. A scenario's step is

    SGLang:  MoE(M) + a * ATTN_BASE + s * SPEC
    native:  MoE(M) + (1 - overhead_cut) * (a * ATTN_BASE + s * SPEC)

with a = s = 1 for the current drafter, and tok/s = 1000 * accept / step_ms.

Where the numbers come from
---------------------------
Every input lives in calibration.json (next to this file, or --calibration
PATH), each with a source saying whether it was measured, inferred or
assumed. The code holds formulas only.

Run it
------
    python estimate_b300.py                      # the three estimate tables
    python estimate_b300.py --format json        # one JSON object, full precision
    python estimate_b300.py --tablefmt github    # Markdown tables for notes

Bad input exits with status 2 and one message on stderr naming the file and
the key path; nothing is printed on stdout and no file is ever written.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import NamedTuple

__version__ = "1.0.0"

SCHEMA_VERSION = 1
DEFAULT_CALIBRATION_NAME = "calibration.json"
# Where a non-editable `pip install .` puts the default calibration (pyproject's shared-data).
INSTALLED_DATA_DIR = os.path.join("share", "estimate-b300")

# A whole number above this (a curve's M, a block, a budget, a TP degree) is
# not a meaningful decode step at concurrency 1, and it keeps every later
# float conversion finite.
MAX_COUNT = 1_000_000

# Relative size below which a difference is float rounding, not a conflict in the data.
ROUNDING = 1e-12

DRAFTERS = ("current", "stronger")
PIPELINES = ("sglang", "native")
PIPELINE_LABELS = {"sglang": "SGLang", "native": "native engine"}
POINT_BASES = ("measured", "inferred", "assumed")


class CalibrationError(ValueError):
    """Bad input: names the key path, what is wrong and what was expected.

    The file is filled in where the document is known (`run`), so the model
    and the validators need not carry it: str() gives `file: path: message`.
    """

    def __init__(self, path: str, message: str, file: str = "") -> None:
        super().__init__(path, message)
        self.path, self.message, self.file = path, message, file

    def __str__(self) -> str:
        return ": ".join(part for part in (self.file, self.path, self.message) if part)


# === Loading and validating the calibration ===


class Gpu(NamedTuple):
    name: str
    mem_bandwidth_tb_s: float  # TB = 1e12 bytes


class Hardware(NamedTuple):
    reference: Gpu  # where the MoE curve was measured
    target: Gpu  # where the anchors were measured and the estimate is made


class CurvePoint(NamedTuple):
    m: int  # tokens in the batch
    ms: float  # MoE forward time on the reference GPU
    basis: str  # one of POINT_BASES


class MoeCurve(NamedTuple):
    tp: int
    points: tuple[CurvePoint, ...]  # sorted by m, at least two


class DdtreeAnchor(NamedTuple):
    block: int
    budget: int
    accept: float
    tok_s: float


class Anchors(NamedTuple):
    ar_tok_s: float
    ddtree: DdtreeAnchor


class NativeEngine(NamedTuple):
    overhead_cut: float  # fraction of the non-MoE time the native engine removes


class StrongerDrafter(NamedTuple):
    block: int
    budget: int
    accept: tuple[float, ...]
    attn_base_scale: float
    spec_scale: float


class Calibration(NamedTuple):
    hardware: Hardware
    moe_curve: MoeCurve
    anchors: Anchors
    native_engine: NativeEngine
    stronger_drafter: StrongerDrafter


_REQUIRED = object()


def _show(value: object) -> str:
    """A short rendering of a JSON value for an error message: 40 -> '40'."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**15:
        return f"an integer of {len(str(abs(value)))} digits"
    text = json.dumps(value, allow_nan=True)
    return text if len(text) <= 40 else text[:37] + "..."


def _describe(value: object) -> str:
    """What was found, for error messages: 'true', 'a string "8"', 'a list [1, 2]'."""
    if isinstance(value, (str, list, dict)):
        return f"{_kind(value)} {_show(value)}"
    return _show(value)


def _kind(value: object) -> str:
    """The JSON type of a value, for error messages: True -> 'true/false'."""
    if isinstance(value, bool):
        return "true/false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"


def _closest(word: str, candidates: list[str]) -> str:
    """' (did you mean X?)' for the nearest candidate, or '' when none is near."""
    import difflib  # only on the error path: it costs start-up time

    near = difflib.get_close_matches(word, candidates, n=1, cutoff=0.5)
    return f" (did you mean {near[0]!r}?)" if near else ""


class _Reader:
    """One JSON object under validation.

    It knows its key path (for messages), records every key it is asked for,
    and `finish()` rejects any other key, except the documentation keys:
    `source` and `note` anywhere, and `<key>_source` / `<key>_note` beside a
    known key.
    """

    def __init__(self, data: object, path: str) -> None:
        if not isinstance(data, dict):
            raise CalibrationError(path or "(top level)", f"got {_kind(data)}; expected an object")
        self.data: dict[str, object] = data
        self.path = path
        self.known: list[str] = []

    def at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: str, message: str) -> CalibrationError:
        return CalibrationError(self.at(key), message)

    def raw(self, key: str, expected: str, default: object = _REQUIRED) -> object:
        self.known.append(key)
        if key in self.data:
            return self.data[key]
        if default is _REQUIRED:
            raise self.error(key, f"missing; expected {expected}")
        return default

    def child(self, key: str) -> _Reader:
        return _Reader(self.raw(key, "an object"), self.at(key))

    def number(
        self, key: str, low: float = 0.0, high: float = math.inf, low_open: bool = True, high_open: bool = True
    ) -> float:
        expected = _number_expected(low, high, low_open, high_open)
        return _number(self.raw(key, expected), self.at(key), low, high, low_open, high_open)

    def count(self, key: str) -> int:
        return _count(self.raw(key, _COUNT_EXPECTED), self.at(key))

    def string(self, key: str, choices: tuple[str, ...] = (), default: object = _REQUIRED) -> str:
        expected = f"one of {', '.join(choices)}" if choices else "a string"
        value = self.raw(key, expected, default)
        if not isinstance(value, str) or (choices and value not in choices):
            raise self.error(key, f"got {_describe(value)}; expected {expected}")
        return value

    def items(self, key: str, min_items: int = 1) -> list[object]:
        value = self.raw(key, "a list")
        if not isinstance(value, list):
            raise self.error(key, f"got {_kind(value)}; expected a list")
        if len(value) < min_items:
            raise self.error(key, f"has {len(value)} entries; expected at least {min_items}")
        return value

    def finish(self) -> None:
        docs = {"source", "note"} | {f"{k}_{d}" for k in self.known for d in ("source", "note")}
        for key, value in self.data.items():
            if key in self.known:
                continue
            if key in docs:
                if not isinstance(value, str):
                    raise self.error(key, f"got {_kind(value)}; expected a string (documentation)")
                continue
            hint = _closest(key, self.known) or f" (known keys: {', '.join(self.known)})"
            raise self.error(key, f"unknown key{hint}")


def _number_expected(low: float = 0.0, high: float = math.inf, low_open: bool = True, high_open: bool = True) -> str:
    """Describe a range in words: (0, inf) -> 'a number > 0'."""
    parts = []
    if low > -math.inf:
        parts.append(f"{'>' if low_open else '>='} {low:g}")
    if high < math.inf:
        parts.append(f"{'<' if high_open else '<='} {high:g}")
    return "a number " + " and ".join(parts) if parts else "a number"


def _number(
    value: object,
    path: str,
    low: float = 0.0,
    high: float = math.inf,
    low_open: bool = True,
    high_open: bool = True,
) -> float:
    """A finite JSON number inside the given bounds (default: positive), as a float."""
    expected = _number_expected(low, high, low_open, high_open)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CalibrationError(path, f"got {_describe(value)}; expected {expected}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise CalibrationError(path, f"got {_show(value)}; expected a finite {expected.removeprefix('a ')}")
    too_low = number < low or (low_open and number == low)
    too_high = number > high or (high_open and number == high)
    if too_low or too_high:
        raise CalibrationError(path, f"got {_show(value)}; expected {expected}")
    return number


_COUNT_EXPECTED = f"a whole number from 1 to {MAX_COUNT:,}"


def _count(value: object, path: str) -> int:
    """A positive JSON integer (1.0 passes as 1; 1.5, true and "1" do not)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
        raise CalibrationError(path, f"got {_describe(value)}; expected {_COUNT_EXPECTED}")
    return value


def _accept(value: object, path: str, block: int, budget: int) -> float:
    """A mean accept length: at least 1, at most budget + 1 and block + 1."""
    accept = _number(value, path, low=1.0, low_open=False)
    if accept > budget + 1:
        raise CalibrationError(
            path,
            f"{_show(value)} exceeds the verify batch budget+1 = {budget + 1}; "
            "expected an accept length of at most budget+1",
        )
    if accept > block + 1:
        raise CalibrationError(
            path,
            f"{_show(value)} exceeds the tree depth block+1 = {block + 1}; "
            "expected an accept length of at most block+1",
        )
    return accept


def parse_calibration(data: object) -> Calibration:
    """Validate a decoded calibration document and build the typed calibration.

    Every key is checked; the first problem raises CalibrationError naming
    the key path.
    """
    top = _Reader(data, "")
    version = top.raw("schema_version", f"the number {SCHEMA_VERSION}")
    if isinstance(version, bool) or version != SCHEMA_VERSION:
        raise top.error("schema_version", f"got {_show(version)}; this tool reads schema {SCHEMA_VERSION}")

    hw = top.child("hardware")
    gpus = []
    for role in ("reference", "target"):
        gpu = hw.child(role)
        gpus.append(Gpu(gpu.string("name"), gpu.number("mem_bandwidth_tb_s")))
        gpu.finish()
    hw.finish()

    curve = top.child("moe_curve")
    tp = curve.count("tp")
    points: list[CurvePoint] = []
    for i, item in enumerate(curve.items("points", min_items=2)):
        point = _Reader(item, f"{curve.at('points')}[{i}]")
        m = point.count("m")
        if any(p.m == m for p in points):
            raise point.error("m", f"M = {m} appears twice; expected each M once")
        points.append(CurvePoint(m, point.number("ms"), point.string("basis", POINT_BASES, "measured")))
        point.finish()
    curve.finish()

    anchors = top.child("anchors")
    ar_tok_s = anchors.number("ar_tok_s")
    dd = anchors.child("ddtree")
    block, budget = dd.count("block"), dd.count("budget")
    ddtree = DdtreeAnchor(
        block, budget, _accept(dd.raw("accept", "a number >= 1"), dd.at("accept"), block, budget), dd.number("tok_s")
    )
    dd.finish()
    anchors.finish()

    native = top.child("native_engine")
    overhead_cut = native.number("overhead_cut", low=0.0, high=1.0, low_open=False)
    native.finish()

    sd = top.child("stronger_drafter")
    block, budget = sd.count("block"), sd.count("budget")
    accepts: list[float] = []
    for i, value in enumerate(sd.items("accept")):
        accepts.append(_accept(value, f"{sd.at('accept')}[{i}]", block, budget))
        if accepts[-1] in accepts[:-1]:
            raise sd.error(f"accept[{i}]", f"{_show(value)} appears twice; expected each accept length once")
    stronger = StrongerDrafter(block, budget, tuple(accepts), sd.number("attn_base_scale"), sd.number("spec_scale"))
    sd.finish()
    top.finish()

    return Calibration(
        hardware=Hardware(*gpus),
        moe_curve=MoeCurve(tp, tuple(sorted(points, key=lambda p: p.m))),
        anchors=Anchors(ar_tok_s, ddtree),
        native_engine=NativeEngine(overhead_cut),
        stronger_drafter=stronger,
    )


def read_document(path: str) -> object:
    """Read and decode a calibration file; every failure is a CalibrationError."""
    try:
        with open(path, "rb") as stream:
            raw = stream.read()
    except FileNotFoundError:
        raise CalibrationError("", "no such file; expected a calibration JSON file") from None
    except IsADirectoryError:
        raise CalibrationError("", "is a directory; expected a calibration JSON file") from None
    except OSError as exc:
        raise CalibrationError("", f"cannot be read ({exc.strerror}); expected a readable file") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CalibrationError("", f"byte {exc.start} is not UTF-8; expected a UTF-8 JSON file") from None
    if not text.strip():
        raise CalibrationError("", "is empty; expected a JSON object")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CalibrationError(
            "", f"line {exc.lineno} column {exc.colno}: not valid JSON ({exc.msg}); expected a JSON object"
        ) from None
    except (ValueError, RecursionError) as exc:  # e.g. an integer past Python's digit limit
        raise CalibrationError("", f"cannot be decoded ({exc}); expected a JSON object") from None


def default_calibration_path() -> str:
    """The calibration.json beside this script, else the one `pip install .` placed under the prefix."""
    here = os.path.join(os.path.dirname(os.path.realpath(__file__)), DEFAULT_CALIBRATION_NAME)
    if os.path.exists(here):
        return here
    import site

    for base in (sys.prefix, site.USER_BASE or ""):
        installed = os.path.join(base, INSTALLED_DATA_DIR, DEFAULT_CALIBRATION_NAME)
        if os.path.exists(installed):
            return installed
    return here  # missing: reading it reports the path that was expected


def display_name(path: str) -> str:
    """How a file is named in messages: relative to the working directory when below it."""
    relative = os.path.relpath(path)
    return path if relative.startswith(os.pardir) else relative


# === The model ===


class MoeTime(NamedTuple):
    m: int
    reference_ms: float  # curve(M) on the reference GPU
    ms: float  # on the target: reference_ms / bandwidth_ratio
    extrapolated: bool  # M lies outside the curve's points


def bandwidth_ratio(cal: Calibration) -> float:
    """Target over reference memory bandwidth: 8.0 / 1.8 = 4.444 for B300 vs RTX PRO 6000."""
    return cal.hardware.target.mem_bandwidth_tb_s / cal.hardware.reference.mem_bandwidth_tb_s


def curve_ms(points: tuple[CurvePoint, ...], m: int) -> tuple[float, bool]:
    """The reference-GPU MoE time at M, piecewise linear; (ms, extrapolated).

    Outside the points it extends the nearest end segment: with points
    (9, 8.85) and (32, 23.8), M = 33 gives 23.8 + 1 * 0.65 = 24.45 ms.
    """
    if m <= points[0].m:
        lo, hi = points[0], points[1]
    elif m >= points[-1].m:
        lo, hi = points[-2], points[-1]
    else:
        hi_index = next(i for i, p in enumerate(points) if p.m >= m)
        lo, hi = points[hi_index - 1], points[hi_index]
    slope_ms_per_token = (hi.ms - lo.ms) / (hi.m - lo.m)
    extrapolated = not points[0].m <= m <= points[-1].m
    return lo.ms + (m - lo.m) * slope_ms_per_token, extrapolated


def moe_time(cal: Calibration, m: int) -> MoeTime:
    """MoE(M) on the target: the reference curve divided by the bandwidth ratio."""
    reference_ms, extrapolated = curve_ms(cal.moe_curve.points, m)
    if reference_ms <= 0:
        ms = [p.m for p in cal.moe_curve.points]
        raise CalibrationError(
            "moe_curve.points",
            f"extrapolating the curve (M = {ms[0]}..{ms[-1]}) to M = {m} gives "
            f"{reference_ms:.4g} ms; expected a positive time: add a measured point nearer M = {m}",
        )
    return MoeTime(m, reference_ms, reference_ms / bandwidth_ratio(cal), extrapolated)


class Decomposition(NamedTuple):
    """The calibration step: the two measured anchors split into MoE, ATTN_BASE and SPEC."""

    bandwidth_ratio: float
    ar_step_ms: float  # 1000 / ar_tok_s
    moe_ar: MoeTime  # MoE(1)
    attn_base_ms: float  # ar_step - MoE(1)
    ddtree_step_ms: float  # 1000 * accept / tok_s
    moe_ddtree: MoeTime  # MoE(budget + 1)
    spec_ms: float  # ddtree_step - MoE(budget + 1) - ATTN_BASE

    @property
    def overhead_ms(self) -> float:
        return self.attn_base_ms + self.spec_ms

    @property
    def overhead_share(self) -> float:
        """(ATTN_BASE + SPEC) / DDTree step: about 0.86 for the default calibration."""
        return self.overhead_ms / self.ddtree_step_ms


def decompose(cal: Calibration) -> Decomposition:
    """Split the anchors; raise CalibrationError when they cannot be split.

    Default data: ar_step = 1000 / 133 = 7.519 ms, MoE(1) = 1.15 / 4.444 =
    0.259 ms, so ATTN_BASE = 7.260 ms; ddtree_step = 1000 * 4.4 / 303 =
    14.521 ms, MoE(9) = 8.85 / 4.444 = 1.991 ms, so SPEC = 5.270 ms.
    """
    anchors, dd = cal.anchors, cal.anchors.ddtree
    ar_step_ms = 1000.0 / anchors.ar_tok_s
    moe_ar = moe_time(cal, 1)
    attn_base_ms = ar_step_ms - moe_ar.ms
    if attn_base_ms <= 0:
        raise CalibrationError(
            "anchors.ar_tok_s",
            f"the measured anchors conflict with the MoE curve: "
            f"{anchors.ar_tok_s:g} tok/s is a {ar_step_ms:.4g} ms step, but MoE(1) alone takes "
            f"{moe_ar.ms:.4g} ms on {cal.hardware.target.name}, leaving ATTN_BASE = {attn_base_ms:.4g} ms; "
            f"expected ATTN_BASE > 0, i.e. ar_tok_s below {1000.0 / moe_ar.ms:.4g} "
            "(or a smaller curve(1), or a faster target)",
        )
    ddtree_step_ms = 1000.0 * dd.accept / dd.tok_s
    moe_ddtree = moe_time(cal, dd.budget + 1)
    spec_ms = ddtree_step_ms - moe_ddtree.ms - attn_base_ms
    if -ROUNDING * ddtree_step_ms <= spec_ms < 0:  # anchors exactly at the boundary, less float rounding
        spec_ms = 0.0
    if spec_ms < 0:
        floor_ms = moe_ddtree.ms + attn_base_ms
        raise CalibrationError(
            "anchors.ddtree.tok_s",
            f"the measured anchors conflict by {-spec_ms:.4g} ms: "
            f"DDTree at {dd.tok_s:g} tok/s with accept {dd.accept:g} is a {ddtree_step_ms:.4g} ms step, "
            f"faster than its verify alone, MoE({dd.budget + 1}) + ATTN_BASE = {moe_ddtree.ms:.4g} + "
            f"{attn_base_ms:.4g} = {floor_ms:.4g} ms (ATTN_BASE from ar_tok_s = {anchors.ar_tok_s:g}); "
            f"expected SPEC >= 0, i.e. ddtree.tok_s at most {1000.0 * dd.accept / floor_ms:.4g}",
        )
    return Decomposition(bandwidth_ratio(cal), ar_step_ms, moe_ar, attn_base_ms, ddtree_step_ms, moe_ddtree, spec_ms)


class Drafter(NamedTuple):
    """A drafter as the model sees it: tree shape, accept lengths, overhead scales."""

    name: str  # one of DRAFTERS
    block: int
    budget: int
    accepts: tuple[float, ...]
    attn_base_scale: float  # a: ATTN_BASE grows with the verify batch
    spec_scale: float  # s: draft + tree cost relative to the calibration drafter


def drafters(cal: Calibration) -> tuple[Drafter, Drafter]:
    """The current drafter (the DDTree anchor itself, a = s = 1) and the stronger one."""
    dd, sd = cal.anchors.ddtree, cal.stronger_drafter
    return (
        Drafter("current", dd.block, dd.budget, (dd.accept,), 1.0, 1.0),
        Drafter("stronger", sd.block, sd.budget, sd.accept, sd.attn_base_scale, sd.spec_scale),
    )


class Scenario(NamedTuple):
    """One estimate. moe_ms + attn_base_ms + spec_ms == step_ms, the native cut already applied."""

    drafter: str
    pipeline: str
    block: int
    budget: int
    m: int
    accept: float
    moe_ms: float
    attn_base_ms: float
    spec_ms: float
    step_ms: float
    tok_s: float
    moe_extrapolated: bool
    measured: bool  # the scenario is a measurement (the DDTree anchor), not an estimate

    @property
    def label(self) -> str:
        return f"{self.drafter}/{self.pipeline}@{self.accept:g}"


def scenario(cal: Calibration, dec: Decomposition, drafter: Drafter, pipeline: str, accept: float) -> Scenario:
    """Step time and throughput of one drafter, pipeline and accept length.

    Default stronger drafter on the native engine at accept 14: MoE(33) =
    24.45 / 4.444 = 5.501 ms, kept overhead = 0.6 * (1.03 * 7.260 + 1.5 *
    5.270) = 9.230 ms, step = 14.731 ms, 1000 * 14 / 14.731 = 950.4 tok/s.
    """
    moe = moe_time(cal, drafter.budget + 1)
    kept = 1.0 - (cal.native_engine.overhead_cut if pipeline == "native" else 0.0)
    attn_base_ms = kept * drafter.attn_base_scale * dec.attn_base_ms
    spec_ms = kept * drafter.spec_scale * dec.spec_ms
    step_ms = moe.ms + attn_base_ms + spec_ms
    return Scenario(
        drafter=drafter.name,
        pipeline=pipeline,
        block=drafter.block,
        budget=drafter.budget,
        m=moe.m,
        accept=accept,
        moe_ms=moe.ms,
        attn_base_ms=attn_base_ms,
        spec_ms=spec_ms,
        step_ms=step_ms,
        tok_s=1000.0 * accept / step_ms,
        moe_extrapolated=moe.extrapolated,
        measured=drafter.name == "current" and pipeline == "sglang",
    )


class Estimate(NamedTuple):
    calibration: Calibration
    decomposition: Decomposition
    scenarios: tuple[Scenario, ...]


def estimate(cal: Calibration) -> Estimate:
    """Every scenario: each drafter, each accept length, each pipeline."""
    dec = decompose(cal)
    rows = tuple(
        scenario(cal, dec, drafter, pipeline, accept)
        for drafter in drafters(cal)
        for accept in drafter.accepts
        for pipeline in PIPELINES
    )
    for row in rows:
        for name in ("step_ms", "tok_s"):
            if not math.isfinite(getattr(row, name)):
                raise CalibrationError("", f"{row.label}: {name} is not finite; the inputs are too extreme")
    return Estimate(cal, dec, rows)


# === Rendering ===


def calibration_json(est: Estimate) -> dict[str, object]:
    dec = est.decomposition
    return {
        "bandwidth_ratio": dec.bandwidth_ratio,
        "ar_step_ms": dec.ar_step_ms,
        "moe_ar_ms": dec.moe_ar.ms,
        "attn_base_ms": dec.attn_base_ms,
        "ddtree_m": dec.moe_ddtree.m,
        "ddtree_step_ms": dec.ddtree_step_ms,
        "moe_ddtree_ms": dec.moe_ddtree.ms,
        "spec_ms": dec.spec_ms,
        "overhead_share": dec.overhead_share,
        "moe_extrapolated": dec.moe_ar.extrapolated or dec.moe_ddtree.extrapolated,
    }


def scenario_json(row: Scenario) -> dict[str, object]:
    return {
        "drafter": row.drafter,
        "pipeline": row.pipeline,
        "block": row.block,
        "budget": row.budget,
        "m": row.m,
        "accept": row.accept,
        "moe_ms": row.moe_ms,
        "attn_base_ms": row.attn_base_ms,
        "spec_ms": row.spec_ms,
        "step_ms": row.step_ms,
        "tok_s": row.tok_s,
        "moe_extrapolated": row.moe_extrapolated,
        "measured": row.measured,
    }


def render_json(est: Estimate, file: str) -> str:
    document = {
        "tool": {"name": "estimate_b300", "version": __version__},
        "calibration_file": file,
        "calibration": calibration_json(est),
        "scenarios": [scenario_json(row) for row in est.scenarios],
    }
    return json.dumps(document, indent=2, allow_nan=False) + "\n"


def _pct(fraction: float) -> str:
    return f"{100 * fraction:.1f}%"


def _curve_basis(moe: MoeTime, cal: Calibration) -> str:
    """'curve 8.85 ms at M=9 (measured)', or how an unmeasured M was read off the curve."""
    basis = next((p.basis for p in cal.moe_curve.points if p.m == moe.m), None)
    how = basis or ("extrapolated" if moe.extrapolated else "interpolated")
    return f"curve({moe.m}) = {moe.reference_ms:.4g} ms ({how})"


def _calibration_rows(est: Estimate) -> list[list[object]]:
    cal, dec = est.calibration, est.decomposition
    dd = cal.anchors.ddtree
    ar, mm = dec.moe_ar.m, dec.moe_ddtree.m
    return [
        ["AR step", "1000 / ar_tok_s", dec.ar_step_ms, None, f"measured: {cal.anchors.ar_tok_s:g} tok/s"],
        [f"MoE({ar})", f"curve({ar}) / bandwidth ratio", dec.moe_ar.ms, None, _curve_basis(dec.moe_ar, cal)],
        ["ATTN_BASE", f"AR step - MoE({ar})", dec.attn_base_ms, _pct(dec.attn_base_ms / dec.ddtree_step_ms), "derived"],
        [
            "DDTree step",
            "1000 * accept / tok_s",
            dec.ddtree_step_ms,
            _pct(1.0),
            f"measured: {dd.tok_s:g} tok/s at accept {dd.accept:g} (block {dd.block}, budget {dd.budget})",
        ],
        [
            f"MoE({mm})",
            f"curve({mm}) / bandwidth ratio",
            dec.moe_ddtree.ms,
            _pct(dec.moe_ddtree.ms / dec.ddtree_step_ms),
            _curve_basis(dec.moe_ddtree, cal),
        ],
        [
            "SPEC",
            f"DDTree step - MoE({mm}) - ATTN_BASE",
            dec.spec_ms,
            _pct(dec.spec_ms / dec.ddtree_step_ms),
            "derived",
        ],
        ["overhead", "ATTN_BASE + SPEC", dec.overhead_ms, _pct(dec.overhead_share), "derived"],
    ]


SCENARIO_HEADERS = ["MoE ms", "ATTN_BASE ms", "SPEC ms", "step ms", "tok/s", "vs AR"]
NUMERIC_HEADER_WORDS = {"ms", "tok/s", "AR", "accept", "step"}


def _scenario_cells(row: Scenario, ar_tok_s: float) -> list[object]:
    star = "*" if row.moe_extrapolated else ""
    return [
        f"{row.moe_ms:.2f}{star}",
        row.attn_base_ms,
        row.spec_ms,
        row.step_ms,
        f"{row.tok_s:.0f}",
        f"{row.tok_s / ar_tok_s:.2f}x",
    ]


def render_tables(est: Estimate, file: str, tablefmt: str) -> str:
    from tabulate import tabulate

    cal, dec = est.calibration, est.decomposition
    ref, tgt = cal.hardware.reference, cal.hardware.target
    ar_tok_s = cal.anchors.ar_tok_s
    current, stronger = drafters(cal)
    cut = cal.native_engine.overhead_cut

    def table(rows: list[list[object]], headers: list[str]) -> str:
        """Cells are pre-formatted text; columns whose header names a unit are right-aligned."""
        cells = [[f"{c:.2f}" if isinstance(c, float) else c for c in r] for r in rows]
        align = ["right" if h.split()[-1] in NUMERIC_HEADER_WORDS else "left" for h in headers]
        return tabulate(cells, headers=headers, tablefmt=tablefmt, colalign=align, missingval="", disable_numparse=True)

    out = [
        f"estimate_b300 {__version__}: Kimi K2.x + DDTree at concurrency 1 on {tgt.name} (calibration: {file})",
        "",
        f"Calibration: bandwidth ratio {tgt.name} / {ref.name} = {tgt.mem_bandwidth_tb_s:g} / "
        f"{ref.mem_bandwidth_tb_s:g} TB/s = {dec.bandwidth_ratio:.3f}x (the MoE time divides by it)",
        table((_calibration_rows(est)), ["figure", "formula", "ms", "share of DDTree step", "basis"]),
        "",
        f"Current drafter: block {current.block}, budget {current.budget}, verify batch M = {current.budget + 1}",
    ]
    rows = []
    for row in est.scenarios:
        if row.drafter == "current":
            basis = "measured" if row.measured else f"estimate: overhead cut {100 * cut:g}%"
            rows.append([PIPELINE_LABELS[row.pipeline], f"{row.accept:g}", *_scenario_cells(row, ar_tok_s), basis])
    out.append(table((rows), ["pipeline", "accept", *SCENARIO_HEADERS, "basis"]))
    out += [
        "",
        f"Stronger drafter: block {stronger.block}, budget {stronger.budget}, verify batch M = {stronger.budget + 1}; "
        f"ATTN_BASE x {stronger.attn_base_scale:g}, SPEC x {stronger.spec_scale:g}",
    ]
    rows = [
        [f"{row.accept:g}", PIPELINE_LABELS[row.pipeline], *_scenario_cells(row, ar_tok_s)]
        for row in est.scenarios
        if row.drafter == "stronger"
    ]
    out.append(table((rows), ["accept", "pipeline", *SCENARIO_HEADERS]))
    out.append("")
    out += _footnotes(est)
    return "\n".join(out) + "\n"


def _footnotes(est: Estimate) -> list[str]:
    cal = est.calibration
    ms = [p.m for p in cal.moe_curve.points]
    notes = [f"vs AR: tok/s over the measured autoregressive {cal.anchors.ar_tok_s:g} tok/s."]
    extrapolated = sorted({row.m for row in est.scenarios if row.moe_extrapolated})
    if extrapolated:
        notes.append(
            f"* MoE extrapolated: M = {', '.join(map(str, extrapolated))} lies outside the curve's "
            f"M = {ms[0]}..{ms[-1]}; read along the nearest end segment."
        )
    notes.append(
        "Only the SGLang current-drafter row is measured; every other row is an estimate whose "
        "non-MoE split, stronger-drafter cost and accept lengths are assumptions."
    )
    return notes


# === Command line ===


def terminal_columns() -> int:
    """$COLUMNS when set, else the terminal's width, else 80; without shutil (2 ms of start-up)."""
    try:
        return max(int(os.environ["COLUMNS"]), 20)
    except (KeyError, ValueError):
        pass
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return 80


def _help_formatter(prog: str) -> argparse.HelpFormatter:
    # Given a width, argparse does not import shutil to find one.
    return argparse.HelpFormatter(prog, width=terminal_columns() - 2)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="estimate_b300",
        formatter_class=_help_formatter,
        description="Estimate Kimi K2.x + DDTree decode throughput on B300 from calibration.json.",
    )
    parser.add_argument(
        "--calibration",
        metavar="PATH",
        help="calibration JSON to read (default: the calibration.json shipped beside the tool)",
    )
    parser.add_argument(
        "--format",
        choices=("table", "json"),
        default="table",
        help="tables for people, or one JSON object (default: table)",
    )
    parser.add_argument(
        "--tablefmt",
        default="simple",
        metavar="NAME",
        help="any tabulate table format, e.g. github for Markdown (default: simple)",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> str:
    """Everything main does except printing: load, estimate, render."""
    path = args.calibration or default_calibration_path()
    file = args.calibration if args.calibration else display_name(path)
    try:
        est = estimate(parse_calibration(read_document(path)))
    except CalibrationError as exc:
        exc.file = file
        raise
    if args.format == "json":
        return render_json(est, file)
    import tabulate

    if args.tablefmt not in tabulate.tabulate_formats:
        parser.error(
            f"--tablefmt: unknown format {args.tablefmt!r}; choose from {', '.join(tabulate.tabulate_formats)}"
        )
    return render_tables(est, file, args.tablefmt)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        output = run(args, parser)
    except CalibrationError as exc:
        print(f"estimate_b300: {exc}", file=sys.stderr)
        return 2
    try:
        sys.stdout.write(output)
        sys.stdout.flush()
    except BrokenPipeError:  # `estimate_b300.py | head`: the reader left, which is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
