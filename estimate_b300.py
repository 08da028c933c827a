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
assumed. The code holds formulas only. An optional `model` section (the
target model's MoE geometry) adds a physical cross-check: the bytes each step
must read, the bandwidth efficiency the curve implies, and the weight-read
floor under every estimate.

Run it
------
    python estimate_b300.py                        # the tables and a breakdown chart
    python estimate_b300.py --format json          # one JSON object, full precision
    python estimate_b300.py --format markdown      # a document for design notes
    python estimate_b300.py --format csv           # one row per scenario
    python estimate_b300.py --explain              # the derivation, one figure a line
    python estimate_b300.py --set native_engine.overhead_cut=0.3
    python estimate_b300.py --sweep native_engine.overhead_cut=0.2:0.6:0.1
    python estimate_b300.py --sensitivity          # tornado and uncertainty band
    python estimate_b300.py --solve native_engine.overhead_cut --observed current/native=463

Bad input exits with status 2 and one message on stderr naming the file and
the key path; nothing is printed on stdout and no file is ever written.

The file reads top to bottom: loading and validating the calibration, the
model (with the physical cross-check), the analyses (overrides, sweeps,
sensitivity, solving, warnings), one run's report, rendering (tables, chart,
JSON, Markdown, CSV, --explain), and the command line.
"""

import argparse
import functools
import itertools
import json
import math
import os
import sys
from collections import namedtuple
from collections.abc import Callable, Sequence

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing; type checkers read it as True

if TYPE_CHECKING:
    from typing import NamedTuple, TypeVar

    T = TypeVar("T")
else:

    class _NamedTupleMeta(type):
        """typing.NamedTuple's class syntax on collections.namedtuple.

        The records of this file are named tuples; building 30 of them through
        typing costs about 2 ms of start-up (importing typing included), a
        tenth of a --format json run. This keeps the class syntax and the type
        checking (mypy reads typing.NamedTuple above) and skips that cost.
        """

        def __new__(mcls, name: str, bases: tuple[type, ...], ns: dict[str, object]) -> type:
            if not bases:
                return super().__new__(mcls, name, bases, ns)
            fields = list(ns.get("__annotations__", {}))
            defaults = [ns[field] for field in fields if field in ns]
            record = namedtuple(name, fields, defaults=defaults, module=ns["__module__"])
            extra = {k: v for k, v in ns.items() if k not in fields and k != "__annotations__"}
            return type(name, (record,), {**extra, "__slots__": ()})

    class NamedTuple(metaclass=_NamedTupleMeta):
        pass


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
FORMATS = ("table", "json", "markdown", "csv")
POINT_BASES = ("measured", "inferred", "assumed")
CURVE_FITS = ("linear", "experts")


class CalibrationError(ValueError):
    """Bad input: names the key path, what is wrong and what was expected.

    The file is filled in where the document is known (`build_report`), or
    names the command-line option at fault, so the model and the validators
    need not carry it: str() gives `file: path: message`.
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


class ExpertsFit(NamedTuple):
    """ms = t0_ms + t_expert_ms * distinct(M), least squares over the curve's points."""

    t0_ms: float
    t_expert_ms: float  # per distinct routed expert per layer touched by the batch
    residuals_ms: tuple[tuple[int, float], ...]  # (M, measured - fitted) at each point


class MoeCurve(NamedTuple):
    tp: int
    points: tuple[CurvePoint, ...]  # sorted by m, at least two
    fit: str  # one of CURVE_FITS: how MoE(M) is read from the points
    experts_fit: ExpertsFit | None  # the fit, when fit == "experts"


class ModelGeometry(NamedTuple):
    """The target model's MoE shape: what the physical cross-check counts bytes with."""

    layers: int
    dense_layers: int
    hidden_size: int
    expert_intermediate_size: int
    routed_experts: int
    experts_per_token: int
    shared_experts: int
    weight_bits: int
    group_size: int  # weights per quantization scale
    scale_bits: int
    curve_includes_shared_expert: bool  # the curve times the shared expert too (read at 16 bits)

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers


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


class Domain(NamedTuple):
    """The values a number in the calibration may take: what --solve searches and ranges must respect."""

    low: float
    high: float
    low_open: bool
    high_open: bool
    integer: bool = False

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, (int, float)):
            return False
        above = value > self.low or (not self.low_open and value == self.low)
        below = value < self.high or (not self.high_open and value == self.high)
        return above and below

    def describe(self) -> str:
        if self.integer:
            return f"a whole number from {self.low:g} to {self.high:,.0f}"
        return _number_expected(*self[:4])


class Range(NamedTuple):
    """One assumption's what-if range, for --sensitivity."""

    path: str
    low: float
    high: float
    relative: float | None  # set when the range was given as value x (1 -/+ relative)
    source: str


class Calibration(NamedTuple):
    hardware: Hardware
    moe_curve: MoeCurve
    anchors: Anchors
    native_engine: NativeEngine
    stronger_drafter: StrongerDrafter
    ranges: tuple[Range, ...]
    domains: dict[str, Domain]  # every number read, by key path: what --solve and ranges may vary
    model: ModelGeometry | None  # None: no `model` section, no physical cross-check


_REQUIRED = object()


def _show(value: object) -> str:
    """A short rendering of a JSON value for an error message: 40 -> '40'."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**15:
        return f"an integer of {len(str(abs(value)))} digits"
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.15g}"  # 40.0 -> '40', 0.1 -> '0.1'
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


def _closest(word: str, candidates: list[str]) -> str | None:
    """The candidate nearest to a mistyped word, or None when none is near."""
    import difflib  # only on the error path: it costs start-up time

    near = difflib.get_close_matches(word, candidates, n=1, cutoff=0.5)
    return near[0] if near else None


class _Reader:
    """One JSON object under validation.

    It knows its key path (for messages), records every key it is asked for,
    and `finish()` rejects any other key, except the documentation keys:
    `source` and `note` anywhere, and `<key>_source` / `<key>_note` beside a
    known key.
    """

    def __init__(self, data: object, path: str, domains: dict[str, Domain] | None) -> None:
        if not isinstance(data, dict):
            raise CalibrationError(path or "(top level)", f"got {_kind(data)}; expected an object")
        self.data: dict[str, object] = data
        self.path = path
        self.known: dict[str, None] = {}  # the keys asked for, in order
        self.domains = domains  # shared by every reader of one document; None when nobody needs them

    def register(self, path: str, domain: Domain) -> None:
        if self.domains is not None:
            self.domains[path] = domain

    def at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: str, message: str) -> CalibrationError:
        return CalibrationError(self.at(key), message)

    def raw(self, key: str, expected: "str | Domain", default: object = _REQUIRED) -> object:
        self.known[key] = None
        if key in self.data:
            return self.data[key]
        if default is _REQUIRED:
            what = expected if isinstance(expected, str) else expected.describe()
            typo = _closest(key, [k for k in self.data if k not in self.known])
            hint = f" (is {self.at(typo)} a misspelling of it?)" if typo else ""
            raise self.error(key, f"missing; expected {what}{hint}")
        return default

    def child(self, key: str, default: object = _REQUIRED) -> "_Reader":
        return _Reader(self.raw(key, "an object", default), self.at(key), self.domains)

    def element(self, path: str, item: object) -> "_Reader":
        return _Reader(item, path, self.domains)

    def number(
        self, key: str, low: float = 0.0, high: float = math.inf, low_open: bool = True, high_open: bool = True
    ) -> float:
        path, domain = self.at(key), Domain(low, high, low_open, high_open)
        self.register(path, domain)
        return _number(self.raw(key, domain), path, low, high, low_open, high_open)

    def optional_child(self, key: str) -> "_Reader | None":
        """The object at key, or None when the key is absent (null is present, and not an object)."""
        if key not in self.data:
            self.raw(key, "an object", None)  # still a known key: `<key>_source` may document its absence
            return None
        return self.child(key)

    def count(self, key: str, low: int = 1) -> int:
        path = self.at(key)
        self.register(path, _COUNT_DOMAINS[low])
        return _count(self.raw(key, _COUNT_DOMAINS[low]), path, low)

    def flag(self, key: str, default: bool) -> bool:
        value = self.raw(key, "true or false", default)
        if not isinstance(value, bool):
            raise self.error(key, f"got {_describe(value)}; expected true or false")
        return value

    def accept(self, path: str, value: object, block: int, budget: int) -> float:
        self.register(path, Domain(1.0, min(block, budget) + 1.0, False, False))
        return _accept(value, path, block, budget)

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
        for key, value in self.data.items():
            if key in self.known:
                continue
            if key in ("source", "note") or (
                key.endswith(("_source", "_note")) and key.rpartition("_")[0] in self.known
            ):
                if not isinstance(value, str):
                    raise self.error(key, f"got {_kind(value)}; expected a string (documentation)")
                continue
            near = _closest(key, list(self.known))
            hint = f"did you mean {self.at(near)}?" if near else f"known keys: {', '.join(self.known)}"
            raise self.error(key, f"unknown key ({hint})")


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
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        expected = _number_expected(low, high, low_open, high_open)
        raise CalibrationError(path, f"got {_describe(value)}; expected {expected}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        expected = _number_expected(low, high, low_open, high_open).removeprefix("a ")
        raise CalibrationError(path, f"got {_show(value)}; expected a finite {expected}")
    too_low = number < low or (low_open and number == low)
    too_high = number > high or (high_open and number == high)
    if too_low or too_high:
        raise CalibrationError(path, f"got {_show(value)}; expected {_number_expected(low, high, low_open, high_open)}")
    return number


_COUNT_DOMAINS = {low: Domain(low, MAX_COUNT, False, False, integer=True) for low in (0, 1)}


def _count(value: object, path: str, low: int = 1) -> int:
    """A whole JSON number from low to MAX_COUNT (1.0 passes as 1; 1.5, true and "1" do not)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_COUNT:
        raise CalibrationError(path, f"got {_describe(value)}; expected {_COUNT_DOMAINS[low].describe()}")
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


def parse_calibration(data: object, full: bool = True, like: "tuple[object, Calibration] | None" = None) -> Calibration:
    """Validate a decoded calibration document and build the typed calibration.

    Every key is checked; the first problem raises CalibrationError naming
    the key path. The analyses that re-estimate a calibration thousands of
    times (sweeps, sensitivity, solving) have read its ranges and the domain
    of each number once already and skip both (full=False); they also pass
    `like` = (the document they started from, its calibration), and every
    section that is still the very same object is taken over, not read again.
    """
    domains: dict[str, Domain] = {}
    top = _Reader(data, "", domains if full else None)
    version = top.raw("schema_version", f"the number {SCHEMA_VERSION}")
    if isinstance(version, bool) or version != SCHEMA_VERSION:
        raise top.error("schema_version", f"got {_show(version)}; this tool reads schema {SCHEMA_VERSION}")

    def section(key: str, read: "Callable[[], T]", *depends_on: str) -> "T":
        if (
            like
            and not full
            and isinstance(like[0], dict)
            and all(top.data.get(k) is like[0].get(k) for k in (key, *depends_on))
        ):
            top.known[key] = None
            reused: T = getattr(like[1], key)
            return reused
        return read()

    hardware = section("hardware", lambda: _parse_hardware(top.child("hardware")))
    model = section("model", lambda: _parse_model(top.optional_child("model")))
    moe_curve = section("moe_curve", lambda: _parse_curve(top.child("moe_curve"), model), "model")
    anchors = section("anchors", lambda: _parse_anchors(top.child("anchors")))
    native = section("native_engine", lambda: _parse_native_engine(top.child("native_engine")))
    stronger = section("stronger_drafter", lambda: _parse_stronger_drafter(top.child("stronger_drafter")))
    ranges_section = top.child("ranges", DEFAULT_RANGES)
    ranges = _parse_ranges(ranges_section, data, domains) if full else ()
    top.finish()
    return Calibration(hardware, moe_curve, anchors, native, stronger, ranges, domains, model)


def _parse_hardware(hw: _Reader) -> Hardware:
    gpus = []
    for role in ("reference", "target"):
        gpu = hw.child(role)
        gpus.append(Gpu(gpu.string("name"), gpu.number("mem_bandwidth_tb_s")))
        gpu.finish()
    hw.finish()
    return Hardware(*gpus)


def _parse_curve(curve: _Reader, model: ModelGeometry | None) -> MoeCurve:
    tp = curve.count("tp")
    points: list[CurvePoint] = []
    for i, item in enumerate(curve.items("points", min_items=2)):
        point = curve.element(f"{curve.at('points')}[{i}]", item)
        m = point.count("m")
        if any(p.m == m for p in points):
            raise point.error("m", f"M = {m} appears twice; expected each M once")
        points.append(CurvePoint(m, point.number("ms"), point.string("basis", POINT_BASES, "measured")))
        point.finish()
    points.sort(key=lambda p: p.m)
    fit = curve.string("fit", CURVE_FITS, "linear")
    experts_fit = None
    if fit == "experts":
        if model is None:
            raise curve.error("fit", '"experts" counts distinct experts; expected a `model` section beside it')
        experts_fit = fit_experts(points, model)
    curve.finish()
    return MoeCurve(tp, tuple(points), fit, experts_fit)


def _parse_anchors(anchors: _Reader) -> Anchors:
    ar_tok_s = anchors.number("ar_tok_s")
    dd = anchors.child("ddtree")
    block, budget = dd.count("block"), dd.count("budget")
    accept = dd.accept(dd.at("accept"), dd.raw("accept", "a number >= 1"), block, budget)
    ddtree = DdtreeAnchor(block, budget, accept, dd.number("tok_s"))
    dd.finish()
    anchors.finish()
    return Anchors(ar_tok_s, ddtree)


def _parse_native_engine(native: _Reader) -> NativeEngine:
    overhead_cut = native.number("overhead_cut", low=0.0, high=1.0, low_open=False)
    native.finish()
    return NativeEngine(overhead_cut)


def _parse_stronger_drafter(sd: _Reader) -> StrongerDrafter:
    block, budget = sd.count("block"), sd.count("budget")
    accepts: list[float] = []
    for i, value in enumerate(sd.items("accept")):
        accepts.append(sd.accept(f"{sd.at('accept')}[{i}]", value, block, budget))
        if accepts[-1] in accepts[:-1]:
            raise sd.error(f"accept[{i}]", f"{_show(value)} appears twice; expected each accept length once")
    stronger = StrongerDrafter(block, budget, tuple(accepts), sd.number("attn_base_scale"), sd.number("spec_scale"))
    sd.finish()
    return stronger


def _parse_model(section: "_Reader | None") -> ModelGeometry | None:
    """The optional `model` section, checked field by field and across fields."""
    if section is None:
        return None
    counts = {
        key: section.count(key, low=0 if key in ("dense_layers", "shared_experts") else 1)
        for key in ModelGeometry._fields[:-1]
    }
    model = ModelGeometry(**counts, curve_includes_shared_expert=section.flag("curve_includes_shared_expert", False))
    if model.dense_layers >= model.layers:
        raise section.error(
            "dense_layers", f"{model.dense_layers} leaves no MoE layer of {model.layers}; expected fewer than layers"
        )
    if model.experts_per_token > model.routed_experts:
        raise section.error(
            "experts_per_token",
            f"{model.experts_per_token} exceeds routed_experts = {model.routed_experts}; expected at most that",
        )
    section.finish()
    return model


# Used when a calibration has no `ranges` section. The shipped calibration.json spells out the same.
DEFAULT_RANGES: dict[str, object] = {
    "native_engine.overhead_cut": {
        "low": 0.2,
        "high": 0.6,
        "source": "built-in default: the native engine's cut is a design target, not a measurement",
    },
    "stronger_drafter.spec_scale": {
        "low": 1.5,
        "high": 2.0,
        "source": "built-in default: block 16 costs the drafter and tree build 1.5-2x block 8",
    },
    "stronger_drafter.attn_base_scale": {
        "low": 1.0,
        "high": 1.2,
        "source": "built-in default: a larger verify batch grows ATTN_BASE slightly",
    },
    "hardware.target.mem_bandwidth_tb_s": {
        "low": 7.7,
        "high": 8.0,
        "source": "built-in default: the bandwidth B300 delivers may fall a little short of its rating",
    },
    "anchors.ar_tok_s": {"relative": 0.03, "source": "built-in default: run-to-run noise of a throughput measurement"},
    "anchors.ddtree.tok_s": {
        "relative": 0.03,
        "source": "built-in default: run-to-run noise of a throughput measurement",
    },
}


def _parse_ranges(section: _Reader, data: object, domains: dict[str, Domain]) -> tuple[Range, ...]:
    """The `ranges` section: {path: {low, high} or {relative}, each with a source}.

    A relative range is taken around the value in force (after --set): 0.03
    around ar_tok_s = 133 gives 129.01 to 136.99.
    """
    numbers = [path for path, domain in domains.items() if not domain.integer]
    ranges = []
    for key in section.data:
        if key in ("source", "note"):
            continue
        if key not in numbers:
            near = _closest(key, numbers)
            hint = (
                f"did you mean {near}?"
                if near
                else "expected the key path of a number, e.g. native_engine.overhead_cut"
            )
            raise section.error(key, f"not a number of the calibration ({hint})")
        entry, domain = section.child(key), domains[key]
        if "relative" in entry.data:
            relative: float | None = (r := entry.number("relative", high=1.0))
            value = number_at(data, parse_path(key))
            low, high = sorted((value * (1 - r), value * (1 + r)))
        else:
            relative = None
            low, high = entry.number("low", low=-math.inf), entry.number("high", low=-math.inf)
            if low > high:
                raise entry.error("high", f"got {high:g}, below low = {low:g}; expected low <= high")
        for end, given_as in ((low, "low"), (high, "high")):
            if end not in domain:
                raise entry.error(
                    "relative" if relative else given_as,
                    f"the range reaches {end:g}; expected {domain.describe()}, as for {key} itself",
                )
        ranges.append(Range(key, low, high, relative, entry.string("source")))
        entry.finish()
    return tuple(ranges)


def read_document(path: str) -> tuple[object, str]:
    """Read and decode a calibration file: (document, first 12 hex digits of its SHA-256).

    Every failure is a CalibrationError.
    """
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
        return json.loads(text), _sha256_hex(raw)[:12]
    except json.JSONDecodeError as exc:
        raise CalibrationError(
            "", f"line {exc.lineno} column {exc.colno}: not valid JSON ({exc.msg}); expected a JSON object"
        ) from None
    except (ValueError, RecursionError) as exc:  # e.g. an integer past Python's digit limit
        raise CalibrationError("", f"cannot be decoded ({exc}); expected a JSON object") from None


def _sha256_hex(data: bytes) -> str:
    try:  # the interpreter's builtin module: hashlib's OpenSSL import costs 2-3 ms of start-up
        from _sha2 import sha256  # type: ignore[import-not-found,unused-ignore]  # Python 3.12+
    except ImportError:
        try:
            from _sha256 import sha256  # type: ignore[import-not-found,no-redef,unused-ignore]  # Python 3.11
        except ImportError:
            from hashlib import sha256  # type: ignore[assignment,unused-ignore]
    return str(sha256(data).hexdigest())


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


# --- Key paths: how --set, --sweep, --solve and `ranges` name a value ---

PathSegments = tuple[str | int, ...]


def parse_path(text: str) -> PathSegments:
    """Split a key path: 'moe_curve.points[1].ms' -> ('moe_curve', 'points', 1, 'ms')."""
    segments: list[str | int] = []
    for part in text.split("."):
        name, *indices = part.split("[")
        if name:
            segments.append(name)
        elif not indices or not segments:
            raise CalibrationError(text, "expected a key path such as native_engine.overhead_cut")
        for index in indices:
            if not index.endswith("]") or not index[:-1].isdigit():
                raise CalibrationError(text, f"bad index [{index}; expected [N] with a whole number N")
            segments.append(int(index[:-1]))
    return tuple(segments)


def format_path(segments: PathSegments) -> str:
    """The inverse of parse_path: ('a', 'b', 0) -> 'a.b[0]'."""
    text = ""
    for segment in segments:
        text += f"[{segment}]" if isinstance(segment, int) else (f".{segment}" if text else segment)
    return text


def _descend(node: object, segments: PathSegments, i: int) -> tuple[str | int, int]:
    """The key at segments[i] within node, and the index after it.

    A key of an object may itself hold dots (the keys of `ranges` are key
    paths), so the longest run of segments that names an existing key wins.
    """
    if isinstance(node, dict):
        for j in range(len(segments), i + 1, -1):
            run = segments[i:j]
            if all(isinstance(s, str) for s in run) and (joined := ".".join(map(str, run))) in node:
                return joined, j
    return segments[i], i + 1


def get_path(doc: object, segments: PathSegments) -> object:
    """The value at a key path; CalibrationError when there is none."""
    node, i = doc, 0
    while i < len(segments):
        key, i = _descend(node, segments, i)
        if isinstance(node, list) and isinstance(key, int) and key < len(node):
            node = node[key]
            continue
        if not (isinstance(node, dict) and key in node):
            raise CalibrationError(format_path(segments), "no such key in the calibration")
        node = node[key]
    return node


def number_at(doc: object, segments: PathSegments) -> float:
    """The number at a key path of a document whose numbers were validated (its domain is known)."""
    value = get_path(doc, segments)
    assert isinstance(value, (int, float)), f"{format_path(segments)} is not a number"
    return float(value)


def set_path(doc: object, segments: PathSegments, value: object) -> object:
    """A copy of doc with the value at a key path replaced; doc itself is not changed.

    Only the objects along the path are copied, so a sweep of 10,000 points
    costs 10,000 small copies, not 10,000 deep ones. Missing object keys are
    created (validation then names any that are unknown); list indices must exist.
    """

    def replace(node: object, i: int) -> object:
        if i == len(segments):
            return value
        key, after = _descend(node, segments, i)
        where = format_path(segments[:after])
        if isinstance(key, int):
            if not isinstance(node, list):
                raise CalibrationError(where, f"the value there is {_kind(node)}, not a list")
            if key >= len(node):
                raise CalibrationError(where, f"the list has {len(node)} entries; expected an index below {len(node)}")
            copy = list(node)
            copy[key] = replace(node[key], after)
            return copy
        if node is None:
            node = {}
        if not isinstance(node, dict):
            raise CalibrationError(format_path(segments[:i]), f"is {_kind(node)}, not an object with key {key!r}")
        return {**node, key: replace(node.get(key), after)}

    return replace(doc, 0)


# === The model ===


class MoeTime(NamedTuple):
    m: int
    reference_ms: float  # curve(M) on the reference GPU
    ms: float  # on the target: reference_ms / bandwidth_ratio
    extrapolated: bool  # M lies outside the curve's points
    floor_ms: float | None  # the weight read at 100% of the target's bandwidth (needs `model`)


def bandwidth_ratio(cal: Calibration) -> float:
    """Target over reference memory bandwidth: 8.0 / 1.8 = 4.444 for B300 vs RTX PRO 6000."""
    return cal.hardware.target.mem_bandwidth_tb_s / cal.hardware.reference.mem_bandwidth_tb_s


def curve_segment(points: tuple[CurvePoint, ...], m: int) -> tuple[CurvePoint, CurvePoint]:
    """The two points M is read between: its own segment inside the curve, the nearest end segment outside."""
    if m <= points[0].m:
        return points[0], points[1]
    if m >= points[-1].m:
        return points[-2], points[-1]
    above = next(i for i, p in enumerate(points) if p.m >= m)
    return points[above - 1], points[above]


def curve_ms(points: tuple[CurvePoint, ...], m: int) -> tuple[float, bool]:
    """The reference-GPU MoE time at M, piecewise linear; (ms, extrapolated).

    Outside the points it extends the nearest end segment: with points
    (9, 8.85) and (32, 23.8), M = 33 gives 23.8 + 1 * 0.65 = 24.45 ms.
    """
    lo, hi = curve_segment(points, m)
    slope_ms_per_token = (hi.ms - lo.ms) / (hi.m - lo.m)
    extrapolated = not points[0].m <= m <= points[-1].m
    return lo.ms + (m - lo.m) * slope_ms_per_token, extrapolated


def moe_time(cal: Calibration, m: int) -> MoeTime:
    """MoE(M) on the target: the reference curve (or its experts fit) divided by the bandwidth ratio."""
    curve = cal.moe_curve
    reference_ms, extrapolated = curve_ms(curve.points, m)
    if curve.experts_fit and cal.model:
        reference_ms = curve.experts_fit.t0_ms + curve.experts_fit.t_expert_ms * distinct_experts(cal.model, m)
    if reference_ms <= 0:
        ms = [p.m for p in curve.points]
        raise CalibrationError(
            "moe_curve.points",
            f"reading the curve (M = {ms[0]}..{ms[-1]}, fit {curve.fit}) at M = {m} gives "
            f"{reference_ms:.4g} ms; expected a positive time: add a measured point nearer M = {m}",
        )
    floor_ms = None
    if cal.model:
        floor_ms = read_ms(moe_bytes_per_gpu(cal.model, curve.tp, m), cal.hardware.target.mem_bandwidth_tb_s)
    return MoeTime(m, reference_ms, reference_ms / bandwidth_ratio(cal), extrapolated, floor_ms)


# --- The physical cross-check: bytes the MoE must read ---


def distinct_experts(model: ModelGeometry, m: int) -> float:
    """Expected distinct routed experts one MoE layer touches for M tokens, under uniform routing.

    E * (1 - (1 - k/E)**M): for E = 384, k = 8 it is 8.0 at M = 1, 66.28 at M = 9, 188.23 at M = 32.
    """
    e, k = model.routed_experts, model.experts_per_token
    return e * (1.0 - (1.0 - k / e) ** m)


def expert_bytes(model: ModelGeometry) -> float:
    """Bytes of one routed expert: gate, up and down projections, quantized weights plus their scales.

    3 * 7168 * 2048 * (4 + 16 / 32) / 8 = 24,772,608 bytes for Kimi K2 INT4, group size 32.
    """
    bits_per_weight = model.weight_bits + model.scale_bits / model.group_size
    return 3 * model.hidden_size * model.expert_intermediate_size * bits_per_weight / 8


def shared_expert_bytes(model: ModelGeometry) -> float:
    """Bytes of one shared expert, which stays in 16 bits: 3 * 7168 * 2048 * 2 = 88,080,384 for Kimi K2."""
    return 3 * model.hidden_size * model.expert_intermediate_size * 16 / 8


def moe_bytes_per_gpu(model: ModelGeometry, tp: int, m: int) -> float:
    """Weight bytes one GPU reads in the MoE of one step: every MoE layer, split over the TP ranks.

    Default M = 9: 60 * 66.3 * 24,772,608 / 8 = 12.32 GB per GPU.
    """
    per_layer = distinct_experts(model, m) * expert_bytes(model)
    if model.curve_includes_shared_expert:
        per_layer += model.shared_experts * shared_expert_bytes(model)
    return model.moe_layers * per_layer / tp


def read_ms(n_bytes: float, bandwidth_tb_s: float) -> float:
    """Time to read n_bytes at a bandwidth in TB/s (1e12 bytes/s): 12.32e9 B at 1.8 TB/s = 6.84 ms."""
    return n_bytes / (bandwidth_tb_s * 1e9)


def fit_experts(points: list[CurvePoint], model: ModelGeometry) -> ExpertsFit:
    """Ordinary least squares of ms = t0 + t_expert * distinct(M) over every curve point.

    Distinct experts flatten as a batch touches nearly all of them, so this
    reads large M far better than a straight line in M does.
    """
    xs = [distinct_experts(model, p.m) for p in points]
    ys = [p.ms for p in points]
    x_mean, y_mean = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - x_mean) ** 2 for x in xs)
    if sxx <= ROUNDING * max(x_mean * x_mean, 1.0):
        raise CalibrationError(
            "moe_curve.fit",
            "every point touches the same number of distinct experts (experts_per_token = routed_experts?); "
            'expected points the experts fit can tell apart, or fit "linear"',
        )
    slope = sum((x - x_mean) * (y - y_mean) for x, y in zip(xs, ys, strict=True)) / sxx
    t0 = y_mean - slope * x_mean
    residuals = tuple((p.m, p.ms - (t0 + slope * x)) for p, x in zip(points, xs, strict=True))
    return ExpertsFit(t0, slope, residuals)


@functools.cache
def chain_alpha(accept: float, depth: int) -> float:
    """The per-token acceptance rate a chain of `depth` drafted tokens needs for a mean accept length.

    Solves (1 - alpha**(depth + 1)) / (1 - alpha) = accept (Leviathan et al., 2023) by
    bisection; accept = depth + 1 means alpha = 1. Accept 4.4 at depth 8 needs 0.805.
    """
    if accept >= depth + 1:
        return 1.0
    low, high = 0.0, 1.0  # the expected length rises with alpha from 1 to depth + 1
    for _ in range(200):
        alpha = (low + high) / 2
        if alpha in (low, high):
            break
        if sum(alpha**i for i in range(depth + 1)) < accept:
            low = alpha
        else:
            high = alpha
    return (low + high) / 2


class RooflinePoint(NamedTuple):
    """One curve point against the reference GPU's peak bandwidth."""

    m: int
    ms: float
    basis: str
    distinct_experts: float
    bytes_per_gpu: float
    peak_ms: float  # the read at 100% of the reference bandwidth
    efficiency: float  # peak_ms / ms; above 1 is impossible


def roofline(cal: Calibration) -> tuple[RooflinePoint, ...]:
    model = cal.model
    assert model is not None
    rows = []
    for p in cal.moe_curve.points:
        n_bytes = moe_bytes_per_gpu(model, cal.moe_curve.tp, p.m)
        peak_ms = read_ms(n_bytes, cal.hardware.reference.mem_bandwidth_tb_s)
        if not math.isfinite(peak_ms / p.ms):
            raise CalibrationError(
                "hardware.reference.mem_bandwidth_tb_s",
                f"reading {n_bytes:.4g} bytes at that bandwidth takes {peak_ms} ms; "
                "expected a bandwidth of sensible size",
            )
        rows.append(RooflinePoint(p.m, p.ms, p.basis, distinct_experts(model, p.m), n_bytes, peak_ms, peak_ms / p.ms))
    return tuple(rows)


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
    ratio = bandwidth_ratio(cal)
    if not 0 < ratio < math.inf:
        raise CalibrationError(
            "hardware",
            f"target / reference bandwidth = {ratio:g}; "
            "expected a finite, positive ratio (bandwidths of sensible size)",
        )
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
    return Decomposition(ratio, ar_step_ms, moe_ar, attn_base_ms, ddtree_step_ms, moe_ddtree, spec_ms)


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
    chain_alpha: float  # per-token acceptance a chain of depth `block` needs for this accept length
    moe_ms: float
    attn_base_ms: float
    spec_ms: float
    step_ms: float
    tok_s: float
    moe_extrapolated: bool
    measured: bool  # the scenario is a measurement (the DDTree anchor), not an estimate
    moe_floor_ms: float | None  # the MoE weight read at 100% of the target's bandwidth (needs `model`)
    tok_s_ceiling: float | None  # 1000 * accept / moe_floor_ms: nothing but that read left

    @property
    def label(self) -> str:
        return f"{self.drafter}/{self.pipeline}@{self.accept:g}"


def scenario(
    cal: Calibration, dec: Decomposition, drafter: Drafter, pipeline: str, accept: float, moe: MoeTime | None = None
) -> Scenario:
    """Step time and throughput of one drafter, pipeline and accept length.

    Default stronger drafter on the native engine at accept 14: MoE(33) =
    24.45 / 4.444 = 5.501 ms, kept overhead = 0.6 * (1.03 * 7.260 + 1.5 *
    5.270) = 9.230 ms, step = 14.731 ms, 1000 * 14 / 14.731 = 950.4 tok/s.
    """
    moe = moe or moe_time(cal, drafter.budget + 1)  # the caller may pass MoE(budget + 1), computed once
    kept = _kept(cal, pipeline)
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
        chain_alpha=chain_alpha(accept, drafter.block),
        moe_ms=moe.ms,
        attn_base_ms=attn_base_ms,
        spec_ms=spec_ms,
        step_ms=step_ms,
        tok_s=1000.0 * accept / step_ms,
        moe_extrapolated=moe.extrapolated,
        measured=drafter.name == "current" and pipeline == "sglang",
        moe_floor_ms=moe.floor_ms,
        tok_s_ceiling=1000.0 * accept / moe.floor_ms if moe.floor_ms else None,
    )


class BreakEven(NamedTuple):
    """The accept length at which the stronger drafter matches another way of decoding."""

    pipeline: str
    versus: str  # "current" or "autoregressive"
    accept: float | None  # None: it cannot break even inside the tree
    tok_s_to_match: float
    reason: str | None
    stronger_step_ms: float  # accept = tok_s_to_match * stronger_step_ms / 1000


class Estimate(NamedTuple):
    calibration: Calibration
    decomposition: Decomposition
    scenarios: tuple[Scenario, ...]
    break_even: tuple[BreakEven, ...]


def ar_step_ms(cal: Calibration, dec: Decomposition, pipeline: str) -> float:
    """Autoregressive step on a pipeline: MoE(1) + (1 - cut) * ATTN_BASE; on SGLang the measured AR step."""
    return dec.moe_ar.ms + _kept(cal, pipeline) * dec.attn_base_ms


def _kept(cal: Calibration, pipeline: str) -> float:
    """The share of the non-MoE time a pipeline keeps: 1 on SGLang, 1 - overhead_cut natively."""
    return 1.0 - (cal.native_engine.overhead_cut if pipeline == "native" else 0.0)


def break_even(cal: Calibration, dec: Decomposition) -> tuple[BreakEven, ...]:
    """Accept lengths at which the stronger drafter's tok/s equals the alternative's.

    The stronger step does not depend on accept, so accept = tok_s * step / 1000.
    Default, SGLang vs the current drafter: 303 * 20.884 / 1000 = 6.33.
    """
    current, stronger = drafters(cal)
    limit = min(stronger.budget, stronger.block) + 1
    bound = f"budget+1 = {stronger.budget + 1}" if stronger.budget <= stronger.block else f"block+1 = {limit}"
    rows = []
    for pipeline in PIPELINES:
        step = scenario(cal, dec, stronger, pipeline, 1.0).step_ms
        rivals = {
            "current": scenario(cal, dec, current, pipeline, current.accepts[0]).tok_s,
            "autoregressive": 1000.0 / ar_step_ms(cal, dec, pipeline),
        }
        for versus, tok_s in rivals.items():
            accept = tok_s * step / 1000.0
            if accept > limit:
                reason = f"it would need accept {accept:.3g}, above the tree's limit {bound}"
                rows.append(BreakEven(pipeline, versus, None, tok_s, reason, step))
            else:
                rows.append(BreakEven(pipeline, versus, accept, tok_s, None, step))
    return tuple(rows)


def scenarios(cal: Calibration, dec: Decomposition) -> tuple[Scenario, ...]:
    """Every scenario: each drafter, each accept length, each pipeline."""
    rows = []
    for drafter in drafters(cal):
        moe = moe_time(cal, drafter.budget + 1)
        rows += [scenario(cal, dec, drafter, pipeline, a, moe) for a in drafter.accepts for pipeline in PIPELINES]
    for row in rows:
        for name in ("moe_ms", "attn_base_ms", "spec_ms", "step_ms", "tok_s", "moe_floor_ms", "tok_s_ceiling"):
            value = getattr(row, name)
            if value is not None and not math.isfinite(value):
                raise CalibrationError(
                    row.label, f"{name} = {value}; expected a finite figure: inputs of sensible size"
                )
    return tuple(rows)


def estimate(cal: Calibration) -> Estimate:
    """The decomposition, every scenario, and the stronger drafter's break-even accept lengths."""
    dec = decompose(cal)
    return Estimate(cal, dec, scenarios(cal, dec), break_even(cal, dec))


# === The analyses: overrides, sweeps, sensitivity, solving ===


class Override(NamedTuple):
    text: str  # as given: "native_engine.overhead_cut=0.3"
    path: PathSegments
    value: object


def parse_assignment(option: str, text: str) -> tuple[PathSegments, str]:
    """'KEY.PATH=VALUE' -> (segments, 'VALUE'); errors name the option."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise CalibrationError(
            "", "expected KEY.PATH=VALUE, e.g. native_engine.overhead_cut=0.3", file=f"{option} {text}"
        )
    try:
        return parse_path(key), value
    except CalibrationError as exc:
        exc.file = f"{option} {text}"
        raise


def parse_value(text: str) -> object:
    """A --set value: JSON when it parses ('0.3', '[10,12]', 'true'), else the plain string ('B200')."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_override(text: str) -> Override:
    path, value = parse_assignment("--set", text)
    return Override(text, path, parse_value(value))


def apply(doc: object, changes: Sequence[tuple[PathSegments, object]]) -> object:
    for path, value in changes:
        doc = set_path(doc, path, value)
    return doc


class ScenarioSpec(NamedTuple):
    """A scenario named on the command line: 'stronger/native@14'; accept None means the default."""

    drafter: str
    pipeline: str
    accept: float | None

    @staticmethod
    def parse(option: str, text: str) -> "ScenarioSpec":
        """'current/native' or 'stronger/sglang@14'."""
        head, _, accept_text = text.partition("@")
        drafter, _, pipeline = head.partition("/")
        if drafter not in DRAFTERS or pipeline not in PIPELINES:
            raise CalibrationError(
                "",
                f"expected DRAFTER/PIPELINE[@ACCEPT] with DRAFTER in {', '.join(DRAFTERS)} and PIPELINE in "
                f"{', '.join(PIPELINES)}, e.g. stronger/native@14",
                file=f"{option} {text}",
            )
        if not accept_text:
            return ScenarioSpec(drafter, pipeline, None)
        try:
            accept = float(accept_text)
        except ValueError:
            accept = math.nan
        if not math.isfinite(accept):
            raise CalibrationError("", f"@{accept_text}: expected an accept length, e.g. @14", file=f"{option} {text}")
        return ScenarioSpec(drafter, pipeline, accept)

    def resolve(self, cal: Calibration, option: str) -> tuple[Drafter, float]:
        """The drafter and accept length; by default the median of its accept list (the lower middle one)."""
        drafter = drafters(cal)[DRAFTERS.index(self.drafter)]
        if self.accept is None:
            return drafter, sorted(drafter.accepts)[(len(drafter.accepts) - 1) // 2]
        try:
            return drafter, _accept(self.accept, f"@{self.accept:g}", drafter.block, drafter.budget)
        except CalibrationError as exc:
            exc.file = f"{option} {self.drafter}/{self.pipeline}@{self.accept:g}"
            raise


def scenario_for(cal: Calibration, spec: ScenarioSpec, option: str) -> Scenario:
    drafter, accept = spec.resolve(cal, option)
    return scenario(cal, decompose(cal), drafter, spec.pipeline, accept)


# --- Sweeps ---

MAX_SWEEP_POINTS = 100_000  # 800,000 scenarios, a 240 MB JSON document: plenty for a what-if


class Sweep(NamedTuple):
    text: str
    path: PathSegments
    values: tuple[object, ...]


class SweepPoint(NamedTuple):
    values: tuple[tuple[str, object], ...]  # (key path, value) for each --sweep
    scenarios: tuple[Scenario, ...]


def parse_sweep(text: str) -> Sweep:
    """'PATH=V1,V2,...' (each value JSON, else a string) or 'PATH=START:STOP:STEP'.

    A range gives START + i * STEP (computed, not accumulated) up to STOP,
    which is included when a step lands on it within rounding:
    0.2:0.6:0.1 -> 0.2, 0.3, 0.4, 0.5, 0.6 (five values).
    """
    path, spec = parse_assignment("--sweep", text)
    parts = spec.split(":")
    if len(parts) == 3 and "," not in spec:
        numbers = [
            n
            for part in parts
            if isinstance(n := parse_value(part), (int, float)) and not isinstance(n, bool) and math.isfinite(n)
        ]
        if len(numbers) != 3:
            raise CalibrationError("", "expected START:STOP:STEP with three finite numbers", file=f"--sweep {text}")
        if not all(isinstance(n, int) for n in numbers):  # 16:64:16 keeps whole numbers whole (a budget, say)
            numbers = [float(n) for n in numbers]
        start, stop, step = numbers
        if step == 0 or (stop - start) / step < 0:
            raise CalibrationError(
                "", f"a step of {step:g} never goes from {start:g} to {stop:g}", file=f"--sweep {text}"
            )
        count = math.floor((stop - start) / step + 1e-9) + 1
        if count > MAX_SWEEP_POINTS:
            raise CalibrationError(
                "", f"{count:,} values; expected at most {MAX_SWEEP_POINTS:,}", file=f"--sweep {text}"
            )
        return Sweep(text, path, tuple(start + i * step for i in range(count)))
    try:
        values = json.loads(f"[{spec}]")
    except ValueError:
        values = spec.split(",")
    if not spec or not values:
        raise CalibrationError("", "expected V1,V2,... or START:STOP:STEP", file=f"--sweep {text}")
    return Sweep(text, path, tuple(values))


def run_sweep(doc: object, cal: Calibration, sweeps: list[Sweep], file: str) -> tuple[SweepPoint, ...]:
    """Every combination of the sweeps' values (the first sweep outermost), each estimated afresh."""
    total = math.prod(len(s.values) for s in sweeps)
    if total > MAX_SWEEP_POINTS:
        raise CalibrationError(
            "", f"the grid has {total:,} points; expected at most {MAX_SWEEP_POINTS:,}", file="--sweep"
        )
    names = [format_path(s.path) for s in sweeps]
    points = []
    for combo in itertools.product(*(s.values for s in sweeps)):
        at = tuple(zip(names, combo, strict=True))
        try:
            changed = apply(doc, [(s.path, v) for s, v in zip(sweeps, combo, strict=True)])
            point = parse_calibration(changed, full=False, like=(doc, cal))
            points.append(SweepPoint(at, scenarios(point, decompose(point))))
        except CalibrationError as exc:
            exc.file = f"{file} at --sweep " + ", ".join(f"{n}={json.dumps(v)}" for n, v in at)
            raise
    return tuple(points)


# --- Sensitivity ---


class SensitivityRow(NamedTuple):
    path: str
    low: float
    high: float
    tok_s_at_low: float
    tok_s_at_high: float
    value: float  # in force
    source: str

    @property
    def swing(self) -> float:
        return abs(self.tok_s_at_high - self.tok_s_at_low)


class Sensitivity(NamedTuple):
    scenario: str
    tok_s: float  # with every assumption at its value in force
    rows: tuple[SensitivityRow, ...]  # sorted by swing, largest first
    tok_s_min: float  # over every combination of the range ends
    tok_s_max: float
    combinations: int


MAX_BAND_RANGES = 16  # the band evaluates 2**n combinations


def sensitivity(doc: object, cal: Calibration, spec: ScenarioSpec) -> Sensitivity:
    """A tornado (each range end alone) and the band over all combinations of range ends.

    Default data, stronger/native@14 at 950.4 tok/s: overhead_cut 0.2 gives
    1000 * 14 / (5.501 + 0.8 * 15.383) = 786.2 tok/s.
    """
    base = scenario_for(cal, spec, "--scenario")
    if len(cal.ranges) > MAX_BAND_RANGES:
        raise CalibrationError(
            "ranges", f"{len(cal.ranges)} ranges; expected at most {MAX_BAND_RANGES} (the band tries 2^n combinations)"
        )
    paths = [parse_path(r.path) for r in cal.ranges]

    def tok_s(ends: tuple[float, ...], which: list[int]) -> float:
        changes = [(paths[i], end) for i, end in zip(which, ends, strict=True)]
        try:
            changed = parse_calibration(apply(doc, changes), full=False, like=(doc, cal))
            return scenario_for(changed, spec, "--scenario").tok_s
        except CalibrationError as exc:
            at = ", ".join(f"{format_path(p)}={v:g}" for p, v in changes)
            raise CalibrationError(
                "ranges", f"at {at} the calibration fails ({exc.path}: {exc.message}); expected ranges it can use"
            ) from None

    rows = []
    for i, r in enumerate(cal.ranges):
        value = number_at(doc, paths[i])
        rows.append(SensitivityRow(r.path, r.low, r.high, tok_s((r.low,), [i]), tok_s((r.high,), [i]), value, r.source))
    everyone = list(range(len(cal.ranges)))
    band = [tok_s(ends, everyone) for ends in itertools.product(*((r.low, r.high) for r in cal.ranges))]
    return Sensitivity(
        base.label,
        base.tok_s,
        tuple(sorted(rows, key=lambda row: -row.swing)),
        min(band, default=base.tok_s),
        max(band, default=base.tok_s),
        len(band),
    )


# --- Solving an assumption from a measurement ---


class Solution(NamedTuple):
    path: str
    value: float
    previous: float  # the value in force before solving
    observed: float
    scenario: str
    method: str
    other_values: tuple[float, ...]  # further values that also fit, when the estimate is not monotonic


def solve(doc: object, cal: Calibration, path_text: str, spec: ScenarioSpec, observed: float) -> Solution:
    """The value of one assumption at which a scenario's estimate equals an observed tok/s.

    When the step is linear in the assumption (checked at three points and
    verified after) it is solved in closed form: default data,
    current/native = 463 tok/s needs the kept overhead
    (1000 * 4.4 / 463 - 1.991) / 12.530 = 0.5995, so overhead_cut = 0.4005.
    Otherwise the valid domain is scanned for sign changes and each is bisected.
    """
    option = "--solve"
    path = parse_path(path_text)
    key = format_path(path)
    candidates = [k for k, d in cal.domains.items() if not d.integer and not k.startswith("ranges.")]
    if key not in candidates:
        near = _closest(key, candidates)
        hint = f"did you mean {near}?" if near else "expected the key path of a number, e.g. native_engine.overhead_cut"
        whole = key in cal.domains and cal.domains[key].integer
        raise CalibrationError(
            key,
            "is a whole number; --solve needs a continuous one"
            if whole
            else f"not a number of the calibration ({hint})",
            file=option,
        )
    domain = cal.domains[key]
    previous = number_at(doc, path)
    target = scenario_for(cal, spec, "--observed")
    label = target.label

    def gap(value: float) -> float | None:
        """Estimated minus observed tok/s at this value; None where the calibration is invalid there."""
        try:
            changed = parse_calibration(set_path(doc, path, value), full=False, like=(doc, cal))
            return scenario_for(changed, spec, "--observed").tok_s - observed
        except CalibrationError:
            return None

    def fits(value: float) -> bool:
        g = gap(value)
        return g is not None and abs(g) <= 1e-9 * observed

    # Closed form: tok/s = 1000 * accept / step, and many assumptions enter the step linearly.
    probes = _probes(domain, previous)
    gaps = [g for v in probes if (g := gap(v)) is not None]
    if len(gaps) == len(probes):
        s0, s1, s2 = (1000.0 * target.accept / (g + observed) for g in gaps)  # the step times
        v0, v1, v2 = probes
        slope = (s1 - s0) / (v1 - v0)
        if slope != 0 and abs(s0 + slope * (v2 - v0) - s2) <= 1e-9 * max(abs(s2), 1e-300):
            value = v0 + (1000.0 * target.accept / observed - s0) / slope
            if value not in domain:
                raise CalibrationError(
                    key,
                    f"{label} reaches {observed:g} tok/s only at {value:.6g}, outside the values it may take "
                    f"({domain.describe()})",
                    file=option,
                )
            if fits(value):
                return Solution(key, value, previous, observed, label, "closed form (the step is linear in it)", ())

    roots, reached = _bisect_roots(gap, _scan_grid(domain, previous))
    if reached and min(reached) == max(reached):
        raise CalibrationError(
            key, f"{label} does not depend on it (it stays at {reached[0] + observed:.6g} tok/s)", file=option
        )
    if not roots:
        span = f"{min(reached) + observed:.6g} to {max(reached) + observed:.6g} tok/s" if reached else "no valid value"
        raise CalibrationError(
            key,
            f"no value it may take ({domain.describe()}) brings {label} to {observed:g} tok/s; "
            f"over the values tried it gives {span}",
            file=option,
        )
    roots.sort(key=lambda v: abs(v - previous))
    return Solution(key, roots[0], previous, observed, label, "bisection", tuple(roots[1:]))


def _span(domain: Domain, value: float) -> float:
    """How far to look above the domain's low end: its width when bounded, else the value's distance from it."""
    if math.isfinite(domain.high):
        return domain.high - domain.low
    return value - domain.low if value > domain.low else 1.0


def _probes(domain: Domain, value: float) -> tuple[float, float, float]:
    """Three well-spread points inside a domain, for the linearity check."""
    span = _span(domain, value)
    factors = (0.1, 0.5, 0.9) if math.isfinite(domain.high) else (0.5, 1.0, 2.0)
    low, mid, high = (domain.low + f * span for f in factors)
    return low, mid, high


def _scan_grid(domain: Domain, value: float) -> list[float]:
    """Points across a domain: 401 evenly spaced when it is bounded; else geometric, 2^-20 to 2^20 around value."""
    span = _span(domain, value)
    if math.isfinite(domain.high):
        grid = [domain.low + span * i / 400 for i in range(401)]
    else:
        grid = [domain.low + span * 2.0 ** (k / 8) for k in range(-160, 161)]
    return [v for v in grid if v in domain]


def _bisect_roots(gap: Callable[[float], float | None], grid: list[float]) -> tuple[list[float], list[float]]:
    """Each sign change of gap along the grid, narrowed by bisection; and every gap seen."""
    seen = [(v, g) for v in grid if (g := gap(v)) is not None]
    roots = []
    for (a, ga), (b, gb) in itertools.pairwise(seen):
        if ga == 0:
            roots.append(a)
        elif ga * gb < 0:
            for _ in range(200):
                mid = (a + b) / 2
                gm = gap(mid)
                if gm is None or mid in (a, b):
                    break
                if (gm < 0) == (ga < 0):
                    a, ga = mid, gm
                else:
                    b = mid
            roots.append((a + b) / 2)
    if seen and seen[-1][1] == 0:
        roots.append(seen[-1][0])
    return roots, [g for _, g in seen]


# === One run: everything the options ask for, computed once ===


class Provenance(NamedTuple):
    calibration_file: str
    calibration_sha256: str  # the first 12 hex digits of the file's SHA-256
    tool_version: str
    overrides: tuple[str, ...]  # --set options in force, as given


class Report(NamedTuple):
    """Everything one run computed; the renderers read it and compute nothing new."""

    provenance: Provenance
    estimate: Estimate
    solve: Solution | None
    sensitivity: Sensitivity | None
    sweep: tuple[SweepPoint, ...] | None
    roofline: tuple[RooflinePoint, ...] | None  # None without a `model` section
    warnings: tuple[str, ...]  # physically impossible inputs; printed on stderr, the exit status stays 0
    document: object  # the calibration document in force (after --set and --solve), for its sources


def _parse_observed(text: str) -> tuple[ScenarioSpec, float]:
    """'current/native=463' -> (the scenario, 463.0)."""
    label, sep, tok_s_text = text.rpartition("=")
    if not sep:
        raise CalibrationError("", "expected SCENARIO=TOK_S, e.g. current/native=463", file=f"--observed {text}")
    spec = ScenarioSpec.parse("--observed", label)
    tok_s = parse_value(tok_s_text)
    if isinstance(tok_s, bool) or not isinstance(tok_s, (int, float)) or not 0 < tok_s < math.inf:
        raise CalibrationError(
            "", f"{tok_s_text!r}: expected a positive throughput in tok/s", file=f"--observed {text}"
        )
    return spec, float(tok_s)


def build_report(args: argparse.Namespace) -> Report:
    """Load, override, solve, estimate and analyse: everything main does except printing."""
    overrides = [parse_override(text) for text in args.set]
    sweeps = [parse_sweep(text) for text in args.sweep]
    focus = ScenarioSpec.parse("--scenario", args.scenario or "stronger/native")
    observed = _parse_observed(args.observed) if args.observed else None

    path = args.calibration or default_calibration_path()
    file = args.calibration or display_name(path)
    label = file + "".join(f" with --set {o.text}" for o in overrides)
    try:
        raw, digest = read_document(path)
        doc = apply(raw, [(o.path, o.value) for o in overrides])
        cal = parse_calibration(doc)
        solution = None
        if args.solve and observed:
            solution = solve(doc, cal, args.solve, *observed)
            doc = set_path(doc, parse_path(args.solve), solution.value)
            cal = parse_calibration(doc)
        est = estimate(cal)
        sens = sensitivity(doc, cal, focus) if args.sensitivity else None
        sweep = run_sweep(doc, cal, sweeps, label) if sweeps else None
    except CalibrationError as exc:
        exc.file = exc.file or label
        raise
    provenance = Provenance(file, digest, __version__, tuple(o.text for o in overrides))
    roof = roofline(cal) if cal.model else None
    warnings = physical_warnings(est, roof, sweep)
    return Report(provenance, est, solution, sens, sweep, roof, warnings, doc)


# === Rendering ===


# --- Warnings: inputs that ask more than the hardware can give ---


def physical_warnings(
    est: Estimate, roof: tuple[RooflinePoint, ...] | None, sweep: tuple[SweepPoint, ...] | None
) -> tuple[str, ...]:
    """Inputs that ask for more than 100% of a GPU's memory bandwidth."""
    cal = est.calibration
    ref, tgt = cal.hardware.reference, cal.hardware.target
    warnings = [
        f"moe_curve.points: M = {p.m} ({p.basis}, {p.ms:g} ms) reads {p.bytes_per_gpu / 1e9:.3g} GB per GPU, "
        f"which takes at least {p.peak_ms:.3g} ms at {ref.name}'s {ref.mem_bandwidth_tb_s:g} TB/s: "
        f"{_pct(p.efficiency)} of peak bandwidth is impossible; check the time, the `model` geometry "
        "or hardware.reference.mem_bandwidth_tb_s"
        for p in roof or ()
        if p.efficiency > 1
    ]
    seen = set()
    for values, rows in [((), est.scenarios), *((p.values, p.scenarios) for p in sweep or ())]:
        for row in rows:
            if row.moe_floor_ms is not None and row.step_ms < row.moe_floor_ms and row.label not in seen:
                seen.add(row.label)
                at = "".join(f" at {name}={_value_text(v)}" for name, v in values)
                warnings.append(
                    f"{row.label}{at}: the estimated step of {row.step_ms:.3g} ms is shorter than reading the MoE "
                    f"weights alone ({row.moe_floor_ms:.3g} ms at 100% of {tgt.name}'s {tgt.mem_bandwidth_tb_s:g} "
                    "TB/s); the inputs are inconsistent: check the curve, the bandwidths and the anchors"
                )
    return tuple(warnings)


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


def report_json(report: Report) -> dict[str, object]:
    est = report.estimate
    cal = est.calibration
    document: dict[str, object] = {
        "provenance": {**report.provenance._asdict(), "overrides": list(report.provenance.overrides)},
        "calibration": calibration_json(est),
        "moe_fit": {"kind": cal.moe_curve.fit, **_fit_json(cal.moe_curve.experts_fit)},
        "scenarios": [row._asdict() for row in est.scenarios],
        "break_even": [row._asdict() for row in est.break_even],
        "roofline": None,
        "warnings": list(report.warnings),
    }
    if report.roofline is not None and cal.model:
        document["roofline"] = {
            "routing": "uniform",
            "moe_layers": cal.model.moe_layers,
            "expert_bytes": expert_bytes(cal.model),
            "tp": cal.moe_curve.tp,
            "points": [row._asdict() for row in report.roofline],
        }
    if report.solve:
        document["solve"] = {**report.solve._asdict(), "other_values": list(report.solve.other_values)}
    if report.sensitivity:
        sens = report.sensitivity
        document["sensitivity"] = {
            "scenario": sens.scenario,
            "tok_s": sens.tok_s,
            "rows": [row._asdict() for row in sens.rows],
            "band": {"tok_s_min": sens.tok_s_min, "tok_s_max": sens.tok_s_max, "combinations": sens.combinations},
        }
    if report.sweep is not None:
        document["sweep"] = [
            {"values": dict(point.values), "scenarios": [row._asdict() for row in point.scenarios]}
            for point in report.sweep
        ]
    return document


def _fit_json(fit: ExpertsFit | None) -> dict[str, object]:
    if fit is None:
        return {}
    residuals = [{"m": m, "residual_ms": r} for m, r in fit.residuals_ms]
    return {"t0_ms": fit.t0_ms, "t_expert_ms": fit.t_expert_ms, "residuals": residuals}


def render_json(report: Report) -> str:
    # A sweep can hold 80,000 scenario objects: printed compact, which is also the fast path of json.
    indent = None if report.sweep is not None else 2
    return json.dumps(report_json(report), indent=indent, allow_nan=False) + "\n"


def _pct(fraction: float) -> str:
    return f"{100 * fraction:.1f}%"


def _curve_basis(moe: MoeTime, cal: Calibration) -> str:
    """'curve(9) = 8.85 ms (measured)', or how an unmeasured M was read off the curve."""
    point = next((p for p in cal.moe_curve.points if p.m == moe.m), None)
    if cal.moe_curve.experts_fit:
        how = "experts fit" + (f"; the {point.basis} point is {point.ms:g} ms" if point else "")
    else:
        how = point.basis if point else ("extrapolated" if moe.extrapolated else "interpolated")
    return f"curve({moe.m}) = {moe.reference_ms:.4g} ms ({how})"


def _calibration_rows(est: Estimate) -> list[list[object]]:
    cal, dec = est.calibration, est.decomposition
    dd = cal.anchors.ddtree
    ar, mm = dec.moe_ar.m, dec.moe_ddtree.m
    share = dec.ddtree_step_ms
    return [
        ["AR step", "1000 / ar_tok_s", dec.ar_step_ms, None, f"measured: {cal.anchors.ar_tok_s:g} tok/s"],
        [f"MoE({ar})", f"curve({ar}) / bandwidth ratio", dec.moe_ar.ms, None, _curve_basis(dec.moe_ar, cal)],
        ["ATTN_BASE", f"AR step - MoE({ar})", dec.attn_base_ms, _pct(dec.attn_base_ms / share), "derived"],
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
            _pct(dec.moe_ddtree.ms / share),
            _curve_basis(dec.moe_ddtree, cal),
        ],
        ["SPEC", f"DDTree step - MoE({mm}) - ATTN_BASE", dec.spec_ms, _pct(dec.spec_ms / share), "derived"],
        ["overhead", "ATTN_BASE + SPEC", dec.overhead_ms, _pct(dec.overhead_share), "derived"],
    ]


# Table formats that draw a two-line header as one header (the sweep's); the others get it on one line.
MULTILINE_HEADER_FORMATS = {
    *("plain", "simple", "grid", "simple_grid", "rounded_grid", "heavy_grid", "mixed_grid", "double_grid"),
    *("fancy_grid", "outline", "simple_outline", "rounded_outline", "heavy_outline", "mixed_outline"),
    *("double_outline", "fancy_outline", "presto", "pretty", "psql", "rst"),
}
SCENARIO_HEADERS = ["MoE ms", "ATTN_BASE ms", "SPEC ms", "step ms", "tok/s", "vs AR"]
NUMERIC_HEADER_WORDS = {
    *("ms", "tok/s", "AR", "accept", "step", "needed", "match", "low", "high", "swing", "alpha", "M"),
    *("experts", "GPU", "peak", "efficiency", "ceiling"),
}


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


def _value_text(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else json.dumps(value) if not isinstance(value, str) else value


class Section(NamedTuple):
    name: str  # a heading: "Calibration"
    title: str  # one line saying what the table holds
    body: str  # a table, and any lines under it


class _Tables:
    """The report's tables in one tabulate format, as titled sections; text and Markdown both use them."""

    def __init__(self, report: Report, tablefmt: str) -> None:
        self.report, self.tablefmt = report, tablefmt
        self.est = report.estimate
        self.cal = self.est.calibration

    def table(self, rows: Sequence[Sequence[object]], headers: list[str]) -> str:
        """Cells are pre-formatted text; columns whose header ends in a unit are right-aligned."""
        from tabulate import tabulate

        cells = [[f"{c:.2f}" if isinstance(c, float) else c for c in r] for r in rows]
        align = ["right" if h.split()[-1] in NUMERIC_HEADER_WORDS else "left" for h in headers]
        if self.tablefmt not in MULTILINE_HEADER_FORMATS:  # a pipe table's header is one line, say
            headers = [h.replace("\n", " ") for h in headers]
        text: str = tabulate(
            cells, headers=headers, tablefmt=self.tablefmt, colalign=align, missingval="", disable_numparse=True
        )
        return text

    def sections(self) -> list[Section]:
        parts = [self.solve()] if self.report.solve else []
        if self.report.sweep is not None:
            parts.append(self.sweep())
        else:
            parts += [self.calibration(), self.current(), self.stronger(), self.break_even(), *self.physical()]
        if self.report.sensitivity:
            parts.append(self.sensitivity())
        return parts

    def solve(self) -> Section:
        sol = self.report.solve
        assert sol is not None
        title = (
            f"Solved: {sol.path} = {sol.value:.6g} (was {sol.previous:g}) brings {sol.scenario} to the observed "
            f"{sol.observed:g} tok/s; {sol.method}. Every figure below uses it."
        )
        others = ", ".join(f"{v:.6g}" for v in sol.other_values)
        body = f"Other values fit too: {others} (the estimate is not monotonic in {sol.path})." if others else ""
        return Section("Solved", title, body)

    def calibration(self) -> Section:
        ref, tgt = self.cal.hardware.reference, self.cal.hardware.target
        title = (
            f"Calibration: bandwidth ratio {tgt.name} / {ref.name} = {tgt.mem_bandwidth_tb_s:g} / "
            f"{ref.mem_bandwidth_tb_s:g} TB/s = {self.est.decomposition.bandwidth_ratio:.3f}x "
            "(the MoE time divides by it)"
        )
        headers = ["figure", "formula", "ms", "share of DDTree step", "basis"]
        body = self.table(_calibration_rows(self.est), headers)
        fit = self.cal.moe_curve.experts_fit
        if fit:
            residuals = ", ".join(f"M={m}: {r:+.3f}" for m, r in fit.residuals_ms)
            body += (
                f"\nMoE(M) read from the experts fit: curve(M) = {fit.t0_ms:.4g} + {fit.t_expert_ms:.4g} x "
                f"distinct(M) ms (least squares over the curve; residuals in ms: {residuals})"
            )
        return Section("Calibration", title, body)

    def current(self) -> Section:
        current = drafters(self.cal)[0]
        cut = self.cal.native_engine.overhead_cut
        rows = []
        for row in self.est.scenarios:
            if row.drafter == "current":
                basis = "measured" if row.measured else f"estimate: overhead cut {100 * cut:g}%"
                cells = _scenario_cells(row, self.cal.anchors.ar_tok_s)
                rows.append([PIPELINE_LABELS[row.pipeline], f"{row.accept:g}", f"{row.chain_alpha:.3f}", *cells, basis])
        title = (
            f"Current drafter: block {current.block}, budget {current.budget}, verify batch M = {current.budget + 1}"
        )
        return Section(
            "Current drafter",
            title,
            self.table(rows, ["pipeline", "accept", "chain alpha", *SCENARIO_HEADERS, "basis"]),
        )

    def stronger(self) -> Section:
        sd = drafters(self.cal)[1]
        rows = [
            [
                f"{row.accept:g}",
                f"{row.chain_alpha:.3f}",
                PIPELINE_LABELS[row.pipeline],
                *_scenario_cells(row, self.cal.anchors.ar_tok_s),
            ]
            for row in self.est.scenarios
            if row.drafter == "stronger"
        ]
        title = (
            f"Stronger drafter: block {sd.block}, budget {sd.budget}, verify batch M = {sd.budget + 1}; "
            f"ATTN_BASE x {sd.attn_base_scale:g}, SPEC x {sd.spec_scale:g}"
        )
        return Section(
            "Stronger drafter", title, self.table(rows, ["accept", "chain alpha", "pipeline", *SCENARIO_HEADERS])
        )

    def break_even(self) -> Section:
        versus = {"current": "current drafter", "autoregressive": "autoregressive"}
        rows = []
        for row in self.est.break_even:
            needed = f"{row.accept:.2f}" if row.accept is not None else f"cannot: {row.reason}"
            rows.append([PIPELINE_LABELS[row.pipeline], versus[row.versus], f"{row.tok_s_to_match:.1f}", needed])
        title = "Break-even: the accept length at which the stronger drafter matches"
        return Section(
            "Break-even accept", title, self.table(rows, ["pipeline", "versus", "tok/s to match", "accept needed"])
        )

    def physical(self) -> list[Section]:
        model, roof = self.cal.model, self.report.roofline
        if model is None or roof is None:
            return [
                Section(
                    "Physical cross-check",
                    "Physical cross-check: left out, the calibration has no `model` section.",
                    "",
                )
            ]
        ref, tgt = self.cal.hardware.reference, self.cal.hardware.target
        shared = ", shared expert included at 16 bits" if model.curve_includes_shared_expert else ""
        title = (
            f"Physical cross-check (uniform routing: each token picks {model.experts_per_token} of "
            f"{model.routed_experts} experts independently): {model.moe_layers} MoE layers, one routed expert "
            f"{expert_bytes(model) / 1e6:.2f} MB, TP {self.cal.moe_curve.tp}{shared}"
        )
        rows = [
            [
                p.m,
                p.basis,
                f"{p.ms:g}",
                f"{p.distinct_experts:.1f}",
                f"{p.bytes_per_gpu / 1e9:.2f}",
                p.peak_ms,
                _pct(p.efficiency),
            ]
            for p in roof
        ]
        peak = f"ms at {ref.mem_bandwidth_tb_s:g} TB/s peak"
        headers = ["M", "basis", "curve ms", "distinct experts", "GB per GPU", peak, "efficiency"]
        floors = [
            [
                row.label,
                row.m,
                row.moe_floor_ms,
                row.step_ms,
                f"{row.tok_s:.0f}",
                f"{row.tok_s_ceiling:.0f}",
                _pct(row.tok_s / row.tok_s_ceiling),
            ]
            for row in self.est.scenarios
            if row.moe_floor_ms is not None and row.tok_s_ceiling is not None
        ]
        floor_headers = ["scenario", "M", "MoE floor ms", "step ms", "tok/s", "ceiling tok/s", "of ceiling"]
        floor_title = (
            f"The floor: the MoE weight read at 100% of {tgt.name}'s {tgt.mem_bandwidth_tb_s:g} TB/s, and the "
            "tok/s ceiling if everything else took no time"
        )
        return [
            Section("Physical cross-check", title, self.table(rows, headers)),
            Section("The MoE floor", floor_title, self.table(floors, floor_headers)),
        ]

    def sensitivity(self) -> Section:
        sens = self.report.sensitivity
        assert sens is not None
        rows = [
            [
                row.path,
                f"{row.value:g}",
                f"{row.low:g} - {row.high:g}",
                f"{row.tok_s_at_low:.0f}",
                f"{row.tok_s_at_high:.0f}",
                f"{row.swing:.0f}",
                row.source,
            ]
            for row in sens.rows
        ]
        headers = ["assumption", "in force", "range", "tok/s at low", "tok/s at high", "swing", "source"]
        title = (
            f"Sensitivity of {sens.scenario} ({sens.tok_s:.0f} tok/s): each assumption at either end of its range, "
            "the others as in force"
        )
        band = (
            f"Band: {sens.tok_s_min:.0f} to {sens.tok_s_max:.0f} tok/s over all {sens.combinations} combinations "
            "of the range ends; a what-if range, not a statistical interval."
        )
        return Section("Sensitivity", title, f"{self.table(rows, headers)}\n{band}")

    def sweep(self) -> Section:
        points = self.report.sweep or ()
        groups: dict[tuple[str, str], list[str]] = {}  # (drafter, pipeline) -> scenario labels, in order
        for row in (row for point in points for row in point.scenarios):
            labels = groups.setdefault((row.drafter, row.pipeline), [])
            if row.label not in labels:
                labels.append(row.label)
        headers = [name for name, _ in points[0].values] if points else []
        steps: dict[tuple[str, str], int] = {}  # column of each group's step time
        rates: dict[str, int] = {}  # column of each scenario's tok/s
        for (drafter, pipeline), labels in groups.items():
            steps[(drafter, pipeline)] = len(headers)
            headers.append(f"{drafter}/{pipeline}\nstep ms")
            for label in labels:
                rates[label] = len(headers)
                headers.append(f"@{label.partition('@')[2]}\ntok/s")
        rows = []
        for point in points:
            cells: list[object] = [_value_text(v) for _, v in point.values]
            cells += [None] * (len(headers) - len(cells))
            for row in point.scenarios:
                cells[steps[(row.drafter, row.pipeline)]] = f"{row.step_ms:.2f}" + ("*" if row.moe_extrapolated else "")
                cells[rates[row.label]] = f"{row.tok_s:.0f}"
            rows.append(cells)
        return Section("Sweep", f"Sweep: {len(points)} points", self.table(rows, headers))

    def footnotes(self) -> list[str]:
        cal = self.cal
        ms = [p.m for p in cal.moe_curve.points]
        scenarios = [row for p in self.report.sweep or () for row in p.scenarios] or list(self.est.scenarios)
        notes = []
        if self.report.sweep is None:
            notes.append(f"vs AR: tok/s over the measured autoregressive {cal.anchors.ar_tok_s:g} tok/s.")
            notes.append(
                "chain alpha: the per-token acceptance rate a single chain as deep as the block would need for "
                "that accept length, (1 - a^(block+1)) / (1 - a) = accept (Leviathan et al., 2023); a tree "
                "verifies several candidates per depth, so it reaches the same accept length with a lower alpha."
            )
        extrapolated = sorted({row.m for row in scenarios if row.moe_extrapolated})
        if extrapolated:
            notes.append(
                f"* MoE extrapolated: M = {', '.join(map(str, extrapolated))} lies outside the curve's "
                f"M = {ms[0]}..{ms[-1]}; read along the nearest end segment"
                + (" of the curve." if cal.moe_curve.fit == "linear" else " range by the experts fit.")
            )
        if self.report.sensitivity:
            for row in self.report.sensitivity.rows:
                if not row.low <= row.value <= row.high:
                    notes.append(f"Note: {row.path} = {row.value:g} lies outside its range {row.low:g} - {row.high:g}.")
        sens = self.report.sensitivity
        band = (
            f" Over the ranges of its assumptions, {sens.scenario} spans {sens.tok_s_min:.0f} to "
            f"{sens.tok_s_max:.0f} tok/s (a what-if band, not a statistical interval)."
            if sens
            else " --sensitivity shows how far each assumption moves them."
        )
        notes.append(
            "Uncertainty: only the SGLang current-drafter row is measured; every other row is an estimate whose "
            "non-MoE split, stronger-drafter cost and accept lengths are assumptions." + band
        )
        return notes


def _header_line(report: Report) -> str:
    """The provenance line every output carries: tool version, calibration file and hash, overrides."""
    prov = report.provenance
    overrides = ", ".join(prov.overrides) or "none"
    return (
        f"estimate_b300 {prov.tool_version}; calibration {prov.calibration_file} "
        f"(sha256 {prov.calibration_sha256}); overrides: {overrides}"
    )


def _title(report: Report) -> str:
    return f"Kimi K2.x + DDTree at concurrency 1 on {report.estimate.calibration.hardware.target.name}"


# --- The breakdown chart ---

CHART_FILLS = {False: ("\u2588", "\u2592", "\u2591"), True: ("#", "=", ".")}  # MoE, ATTN_BASE, SPEC
CHART_PARTS = ("MoE", "ATTN_BASE", "SPEC")


def breakdown_chart(scenarios: Sequence[Scenario], columns: int, ascii_only: bool) -> str:
    """One stacked bar per scenario, all on one time scale, fitting in `columns`.

    Segment ends are rounded on the running total, so each bar is as long as
    its whole step: with 38 columns for 20.88 ms, MoE 5.50 ms ends at column 10.
    """
    fills = CHART_FILLS[ascii_only]
    labels = [row.label for row in scenarios]
    steps, rates = [f"{row.step_ms:.2f}" for row in scenarios], [f"{row.tok_s:.0f}" for row in scenarios]
    step_width, rate_width = max(map(len, steps)), max(map(len, rates))
    ends = [f"{step:>{step_width}} ms {rate:>{rate_width}} tok/s" for step, rate in zip(steps, rates, strict=True)]
    label_width, end_width = max(map(len, labels)), max(map(len, ends))
    bar_width = max(columns - label_width - end_width - 3, 10)
    ms_per_column = max(row.step_ms for row in scenarios) / bar_width
    legend = "  ".join(f"{fill} {part}" for fill, part in zip(fills, CHART_PARTS, strict=True))
    lines = [f"Step time breakdown: 1 column = {ms_per_column:.3f} ms", f"{legend}  (one scale for all bars)"]
    for label, end, row in zip(labels, ends, scenarios, strict=True):
        bar, done, total = "", 0, 0.0
        for fill, part_ms in zip(fills, (row.moe_ms, row.attn_base_ms, row.spec_ms), strict=True):
            total += part_ms
            upto = round(total / ms_per_column)
            bar += fill * (upto - done)
            done = upto
        lines.append(f"{label:<{label_width}} {bar:<{bar_width}} {end:>{end_width}}")
    return "\n".join(lines)


def mermaid_chart(scenarios: Sequence[Scenario]) -> str:
    """The breakdown as a Mermaid xychart for GitHub.

    Mermaid draws a chart's bar series over one another rather than stacked,
    so the series are running totals, longest first: step, MoE + ATTN_BASE, MoE.
    """
    labels = ", ".join(f'"{row.label}"' for row in scenarios)
    top = math.ceil(max(row.step_ms for row in scenarios))
    series = [
        ("step = MoE + ATTN_BASE + SPEC", [row.step_ms for row in scenarios]),
        ("MoE + ATTN_BASE", [row.moe_ms + row.attn_base_ms for row in scenarios]),
        ("MoE", [row.moe_ms for row in scenarios]),
    ]
    lines = [
        "```mermaid",
        "xychart-beta horizontal",
        '    title "Step time per scenario (ms)"',
        f"    x-axis [{labels}]",
        f'    y-axis "ms" 0 --> {top}',
        *(f'    bar "{name}" [{", ".join(f"{v:.2f}" for v in values)}]' for name, values in series),
        "```",
    ]
    return "\n".join(lines)


# --- Text, Markdown, CSV, --explain ---


def render_tables(report: Report, tablefmt: str, chart_columns: int = 80, ascii_only: bool = False) -> str:
    tables = _Tables(report, tablefmt)
    parts = [f"{_header_line(report)}\n{_title(report)}"]
    parts += [f"{s.title}\n{s.body}".rstrip("\n") for s in tables.sections()]
    if chart_columns and report.sweep is None:
        parts.append(breakdown_chart(report.estimate.scenarios, chart_columns, ascii_only))
    parts.append("\n".join(tables.footnotes()))
    return "\n\n".join(parts) + "\n"


def render_markdown(report: Report, chart: bool = True) -> str:
    """A document to paste into design notes: GitHub tables, a Mermaid chart, assumptions and notes."""
    tables = _Tables(report, "github")
    parts = [f"_{_header_line(report)}_", f"## {_title(report)}"]
    for section in tables.sections():
        parts += [f"### {section.name}", section.title]
        if section.body:
            parts.append(section.body)
    if chart and report.sweep is None:
        legend = "Bars drawn over one another: the longest is the whole step; MoE + ATTN_BASE and MoE lie on top."
        parts += ["### Step-time breakdown", mermaid_chart(report.estimate.scenarios), legend]
    notes = [note.replace("* ", "\\* ", 1) if note.startswith("* ") else note for note in tables.footnotes()]
    parts += ["### Assumptions", _assumption_list(assumptions(report.document)), "### Notes"]
    parts.append("\n".join(f"- {note}" for note in notes))
    return "\n\n".join(parts) + "\n"


class Assumption(NamedTuple):
    path: str
    value: object
    source: str  # its `<key>_source`, else the `source` of the nearest object around it
    group_source: str  # the `source` of its top-level section


def assumptions(doc: object) -> tuple[Assumption, ...]:
    """Every value of a (valid) calibration document with the source that documents it; not the ranges.

    A list of objects (the curve points) gives one entry per object, its fields as compact JSON.
    """
    found: list[Assumption] = []

    def source_of(node: dict[str, object], default: str) -> str:
        value = node.get("source")
        return value if isinstance(value, str) else default

    def walk(node: object, path: PathSegments, source: str, group: str) -> None:
        if isinstance(node, dict) and not (path and isinstance(path[-1], int)):
            source = source_of(node, source)
            for key, value in node.items():
                if key in ("source", "note", "schema_version", "ranges") or key.endswith(("_source", "_note")):
                    continue
                own = node.get(f"{key}_source")
                inner = source_of(value, "") if not path and isinstance(value, dict) else group
                walk(value, (*path, key), own if isinstance(own, str) else source, inner)
        elif isinstance(node, list) and any(isinstance(item, dict) for item in node):
            for i, item in enumerate(node):
                walk(item, (*path, i), source_of(item, source) if isinstance(item, dict) else source, group)
        else:
            if isinstance(node, dict):  # an object inside a list: its fields, less the documentation
                node = {k: v for k, v in node.items() if k not in ("source", "note") and not k.endswith("_source")}
            found.append(Assumption(format_path(path), node, source, group))

    walk(doc, (), "", "")
    return tuple(found)


def _assumption_list(items: Sequence[Assumption]) -> str:
    """A Markdown list grouped by calibration section: the section's source once, a value's own beside it."""
    lines, group = [], None
    for item in items:
        top, _, rest = item.path.partition(".")
        if top != group:
            group = top
            lines.append(f"- `{top}`" + (f": {item.group_source}" if item.group_source else ""))
        own = f": {item.source}" if item.source and item.source != item.group_source else ""
        lines.append(f"  - `{rest or top}` = {_value_text(item.value)}{own}")
    return "\n".join(lines)


def render_csv(report: Report) -> str:
    """One row per scenario (per sweep point when sweeping) with provenance columns; nothing but the table."""
    import csv
    import io

    prov = report.provenance
    provenance = [prov.calibration_file, prov.calibration_sha256, prov.tool_version, "; ".join(prov.overrides)]
    solved = ((report.solve.path, report.solve.value),) if report.solve else ()  # a column, as a swept value is
    points = report.sweep if report.sweep is not None else (SweepPoint(solved, report.estimate.scenarios),)
    swept = [name for name, _ in points[0].values] if points else []
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*swept, *Scenario._fields, "calibration_file", "calibration_sha256", "tool_version", "overrides"])
    for point in points:
        values = [_csv_cell(v) for _, v in point.values]
        for row in point.scenarios:
            writer.writerow([*values, *(_csv_cell(v) for v in row), *provenance])
    return out.getvalue()


def _csv_cell(value: object) -> object:
    """Numbers at full precision (repr), booleans as true/false, lists as JSON, missing values empty."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return "" if value is None else value


def render_explain(report: Report) -> str:
    """The derivation in the order it is computed: name = formula = numbers = result, one figure a line.

    Results are rounded as the tables round them, so every table figure can be
    found here and checked with a pocket calculator from the lines above it.
    """
    est = report.estimate
    cal, dec = est.calibration, est.decomposition
    ref, tgt, dd, sd = cal.hardware.reference, cal.hardware.target, cal.anchors.ddtree, cal.stronger_drafter
    out = [_header_line(report), _title(report), "", "Inputs (calibration; see --format markdown for sources)"]

    def say(name: str, formula: str, numbers: str, result: str) -> None:
        out.append(f"  {name} = {formula} = {numbers} = {result}")

    out += [
        f"  reference bandwidth = {ref.mem_bandwidth_tb_s:g} TB/s ({ref.name}); "
        f"target bandwidth = {tgt.mem_bandwidth_tb_s:g} TB/s ({tgt.name})",
        *(
            f"  curve({p.m}) = {p.ms:g} ms ({p.basis}, on the reference GPU, TP {cal.moe_curve.tp})"
            for p in cal.moe_curve.points
        ),
        f"  ar_tok_s = {cal.anchors.ar_tok_s:g} tok/s (measured)",
        f"  DDTree anchor: block {dd.block}, budget {dd.budget}, verify batch M = {dd.budget + 1}, "
        f"accept {dd.accept:g}, {dd.tok_s:g} tok/s (measured)",
        f"  overhead_cut = {cal.native_engine.overhead_cut:g} ({100 * cal.native_engine.overhead_cut:g}%), "
        f"kept = 1 - overhead_cut = {1 - cal.native_engine.overhead_cut:g} on the native engine, 1 on SGLang",
        f"  stronger drafter: block {sd.block}, budget {sd.budget}, verify batch M = {sd.budget + 1}, "
        f"accept {', '.join(f'{a:g}' for a in sd.accept)}; "
        f"ATTN_BASE x {sd.attn_base_scale:g}, SPEC x {sd.spec_scale:g}",
    ]
    if report.solve:
        sol = report.solve
        out.append(
            f"  {sol.path} = {sol.value:.6g}: solved so that {sol.scenario} = {sol.observed:g} tok/s ({sol.method})"
        )
    fit = cal.moe_curve.experts_fit
    if fit and cal.model:
        out += ["", "Experts fit of the curve: least squares of curve(M) = t0 + t_expert * distinct(M)"]
        out.append(f"  t0 = {fit.t0_ms:.4g} ms, t_expert = {fit.t_expert_ms:.4g} ms per distinct expert")
        for (m, residual), point in zip(fit.residuals_ms, cal.moe_curve.points, strict=True):
            fitted = point.ms - residual
            say(f"residual({m})", f"curve({m}) - fit({m})", f"{point.ms:g} - {fitted:.3f}", f"{residual:+.3f} ms")
    out += ["", "Calibration"]
    ratio = dec.bandwidth_ratio
    say(
        "bandwidth ratio",
        "target / reference",
        f"{tgt.mem_bandwidth_tb_s:g} / {ref.mem_bandwidth_tb_s:g}",
        f"{ratio:.3f}x",
    )
    say("AR step", "1000 / ar_tok_s", f"1000 / {cal.anchors.ar_tok_s:g}", f"{dec.ar_step_ms:.2f} ms")
    out += _explain_moe(cal, dec.moe_ar)
    say(
        "ATTN_BASE",
        f"AR step - MoE({dec.moe_ar.m})",
        f"{dec.ar_step_ms:.3f} - {dec.moe_ar.ms:.3f}",
        f"{dec.attn_base_ms:.2f} ms",
    )
    say("DDTree step", "1000 * accept / tok_s", f"1000 * {dd.accept:g} / {dd.tok_s:g}", f"{dec.ddtree_step_ms:.2f} ms")
    mm = dec.moe_ddtree.m
    out += _explain_moe(cal, dec.moe_ddtree)
    say(
        "SPEC",
        f"DDTree step - MoE({mm}) - ATTN_BASE",
        f"{dec.ddtree_step_ms:.3f} - {dec.moe_ddtree.ms:.3f} - {dec.attn_base_ms:.3f}",
        f"{dec.spec_ms:.2f} ms",
    )
    say("overhead", "ATTN_BASE + SPEC", f"{dec.attn_base_ms:.3f} + {dec.spec_ms:.3f}", f"{dec.overhead_ms:.2f} ms")
    say(
        "share of DDTree step",
        "DDTree step / DDTree step",
        f"{dec.ddtree_step_ms:.3f} / {dec.ddtree_step_ms:.3f}",
        _pct(1.0),
    )
    for name, ms in (
        (f"MoE({mm})", dec.moe_ddtree.ms),
        ("ATTN_BASE", dec.attn_base_ms),
        ("SPEC", dec.spec_ms),
        ("overhead", dec.overhead_ms),
    ):
        say(
            f"share of {name}",
            f"{name} / DDTree step",
            f"{ms:.3f} / {dec.ddtree_step_ms:.3f}",
            _pct(ms / dec.ddtree_step_ms),
        )

    drafter_of = dict(zip(DRAFTERS, drafters(cal), strict=True))
    for row in est.scenarios:
        drafter = drafter_of[row.drafter]
        kept = _kept(cal, row.pipeline)
        out += [
            "",
            f"Scenario {row.label} ({PIPELINE_LABELS[row.pipeline]}; "
            f"block {row.block}, budget {row.budget}, M = {row.m})",
        ]
        out += _explain_moe(cal, moe_time(cal, row.m))
        say(
            "ATTN_BASE part",
            "kept * a * ATTN_BASE",
            f"{kept:g} * {drafter.attn_base_scale:g} * {dec.attn_base_ms:.3f}",
            f"{row.attn_base_ms:.2f} ms",
        )
        say(
            "SPEC part",
            "kept * s * SPEC",
            f"{kept:g} * {drafter.spec_scale:g} * {dec.spec_ms:.3f}",
            f"{row.spec_ms:.2f} ms",
        )
        say(
            "step",
            "MoE + ATTN_BASE part + SPEC part",
            f"{row.moe_ms:.3f} + {row.attn_base_ms:.3f} + {row.spec_ms:.3f}",
            f"{row.step_ms:.2f} ms",
        )
        say("tok/s", "1000 * accept / step", f"1000 * {row.accept:g} / {row.step_ms:.3f}", f"{row.tok_s:.0f} tok/s")
        say(
            "vs AR",
            "tok/s / ar_tok_s",
            f"{row.tok_s:.1f} / {cal.anchors.ar_tok_s:g}",
            f"{row.tok_s / cal.anchors.ar_tok_s:.2f}x",
        )
        out.append(
            f"  chain alpha = the a solving (1 - a^{row.block + 1}) / (1 - a) = {row.accept:g} "
            f"(Leviathan et al., 2023): {row.chain_alpha:.3f}"
        )
        if cal.model and row.moe_floor_ms is not None and row.tok_s_ceiling is not None:
            n_bytes = moe_bytes_per_gpu(cal.model, cal.moe_curve.tp, row.m)
            say(
                "MoE floor",
                f"bytes per GPU({row.m}) / target bandwidth at 100%",
                f"{n_bytes / 1e9:.3f} GB / {tgt.mem_bandwidth_tb_s:g} TB/s",
                f"{row.moe_floor_ms:.2f} ms",
            )
            say(
                "ceiling",
                "1000 * accept / MoE floor",
                f"1000 * {row.accept:g} / {row.moe_floor_ms:.3f}",
                f"{row.tok_s_ceiling:.0f} tok/s",
            )
            say(
                "of ceiling",
                "tok/s / ceiling",
                f"{row.tok_s:.1f} / {row.tok_s_ceiling:.1f}",
                _pct(row.tok_s / row.tok_s_ceiling),
            )

    out += ["", "Break-even accept of the stronger drafter (its step does not depend on accept)"]
    for be in est.break_even:
        if be.versus == "autoregressive":
            kept = _kept(cal, be.pipeline)
            say(
                f"{PIPELINE_LABELS[be.pipeline]} autoregressive",
                "1000 / (MoE(1) + kept * ATTN_BASE)",
                f"1000 / ({dec.moe_ar.ms:.3f} + {kept:g} * {dec.attn_base_ms:.3f})",
                f"{be.tok_s_to_match:.1f} tok/s",
            )
        else:
            say(
                f"{PIPELINE_LABELS[be.pipeline]} current drafter",
                "its tok/s (above)",
                f"{be.tok_s_to_match:.3f}",
                f"{be.tok_s_to_match:.1f} tok/s",
            )
        needed = f"{be.accept:.2f}" if be.accept is not None else f"none: {be.reason}"
        say(
            f"{PIPELINE_LABELS[be.pipeline]} accept to match {be.versus}",
            "tok/s to match * stronger step / 1000",
            f"{be.tok_s_to_match:.3f} * {be.stronger_step_ms:.3f} / 1000",
            needed,
        )

    if cal.model and report.roofline:
        model = cal.model
        out += [
            "",
            f"Physical cross-check (uniform routing), "
            f"{model.moe_layers} MoE layers = {model.layers} - {model.dense_layers}",
        ]
        say(
            "expert bytes",
            "3 * hidden * intermediate * (weight_bits + scale_bits / group_size) / 8",
            f"3 * {model.hidden_size} * {model.expert_intermediate_size} * ({model.weight_bits} + "
            f"{model.scale_bits} / {model.group_size}) / 8",
            f"{expert_bytes(model) / 1e6:.2f} MB",
        )
        e, k = model.routed_experts, model.experts_per_token
        for p in report.roofline:
            say(
                f"distinct experts({p.m})",
                "E * (1 - (1 - k/E)^M)",
                f"{e} * (1 - (1 - {k}/{e})^{p.m})",
                f"{p.distinct_experts:.1f}",
            )
            say(
                f"bytes per GPU({p.m})",
                "MoE layers * distinct * expert bytes / TP"
                + (" + shared" if model.curve_includes_shared_expert else ""),
                f"{model.moe_layers} * {p.distinct_experts:.2f} * {expert_bytes(model) / 1e6:.2f} MB "
                f"/ {cal.moe_curve.tp}",
                f"{p.bytes_per_gpu / 1e9:.2f} GB",
            )
            say(
                f"peak read({p.m})",
                "bytes per GPU / reference bandwidth",
                f"{p.bytes_per_gpu / 1e9:.3f} GB / {ref.mem_bandwidth_tb_s:g} TB/s",
                f"{p.peak_ms:.2f} ms",
            )
            say(f"efficiency({p.m})", "peak read / curve", f"{p.peak_ms:.3f} / {p.ms:g}", _pct(p.efficiency))

    if report.sensitivity:
        sens = report.sensitivity
        out += ["", f"Sensitivity of {sens.scenario}: {sens.tok_s:.0f} tok/s as in force; each line re-estimates it"]
        for r in sens.rows:
            out.append(
                f"  {r.path}: {r.value:g} in force, range {r.low:g} - {r.high:g} ({r.source}); at {r.low:g}: "
                f"{r.tok_s_at_low:.0f} tok/s, at {r.high:g}: {r.tok_s_at_high:.0f} tok/s; swing "
                f"|{r.tok_s_at_high:.1f} - {r.tok_s_at_low:.1f}| = {r.swing:.0f}"
            )
        out.append(
            f"  band over all {sens.combinations} combinations of range ends: {sens.tok_s_min:.0f} to "
            f"{sens.tok_s_max:.0f} tok/s"
        )
    return "\n".join(out) + "\n"


def _explain_moe(cal: Calibration, moe: MoeTime) -> list[str]:
    """How MoE(M) is read: the curve point, the segment it lies on, or the experts fit; then the ratio."""
    points, m = cal.moe_curve.points, moe.m
    fit = cal.moe_curve.experts_fit
    ratio = bandwidth_ratio(cal)
    lines = []
    if fit and cal.model:
        distinct = distinct_experts(cal.model, m)
        lines.append(
            f"  curve({m}) = t0 + t_expert * distinct({m}) = {fit.t0_ms:.4g} + {fit.t_expert_ms:.4g} * "
            f"{distinct:.2f} = {moe.reference_ms:.3f} ms (experts fit)"
        )
    elif not any(p.m == m for p in points):
        lo, hi = curve_segment(points, m)
        how = "extrapolated" if moe.extrapolated else "interpolated"
        lines.append(
            f"  curve({m}) = curve({lo.m}) + ({m} - {lo.m}) * (curve({hi.m}) - curve({lo.m})) / ({hi.m} - {lo.m}) = "
            f"{lo.ms:g} + {m - lo.m} * {(hi.ms - lo.ms) / (hi.m - lo.m):.4g} = {moe.reference_ms:.3f} ms ({how})"
        )
    lines.append(f"  MoE({m}) = curve({m}) / bandwidth ratio = {moe.reference_ms:.4g} / {ratio:.3f} = {moe.ms:.2f} ms")
    return lines


# === Command line ===


def _columns_set() -> int | None:
    """$COLUMNS as a whole number, or None when it is unset or not a number."""
    try:
        return int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        return None


def terminal_columns() -> int:
    """$COLUMNS when set, else the terminal's width, else 80; without shutil (2 ms of start-up)."""
    if (columns := _columns_set()) is not None:
        return max(columns, 20)
    try:
        return os.get_terminal_size((sys.__stdout__ or sys.stdout).fileno()).columns
    except (AttributeError, ValueError, OSError):
        return 80


def chart_columns() -> int:
    """$COLUMNS when it is set (60 at the least), else 80: the chart's width does not follow the terminal."""
    columns = _columns_set()
    return 80 if columns is None else max(columns, 60)


def _help_formatter(prog: str) -> argparse.HelpFormatter:
    # Given a width, argparse does not import shutil to find one.
    return argparse.RawDescriptionHelpFormatter(prog, width=terminal_columns() - 2)


EPILOG = """examples:
  estimate_b300 --tablefmt github --no-chart
  estimate_b300 --set native_engine.overhead_cut=0.3 --format json
  estimate_b300 --sweep native_engine.overhead_cut=0.2:0.6:0.1 --format csv
  estimate_b300 --sensitivity --scenario stronger/native@14
  estimate_b300 --solve native_engine.overhead_cut --observed current/native=463

exit status: 0 estimated (warnings, if any, on stderr); 2 bad calibration, option or usage
(one message on stderr, nothing on stdout); 1 internal error."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="estimate_b300",
        formatter_class=_help_formatter,
        description="Estimate Kimi K2.x + DDTree decode throughput on B300 from calibration.json.",
        epilog=EPILOG,
    )
    add = parser.add_argument
    add("--calibration", metavar="PATH", help="calibration JSON to read (default: the one shipped beside the tool)")
    add(
        "--format",
        choices=FORMATS,
        default="table",
        help="tables for a terminal, one JSON object, a Markdown document for notes, or CSV rows",
    )
    add("--tablefmt", default="simple", metavar="NAME", help="any tabulate format for the tables, e.g. github")
    show = parser.add_argument_group("showing the work")
    show.add_argument("--explain", action="store_true", help="print the derivation, one figure a line, not the tables")
    show.add_argument("--no-chart", action="store_true", help="leave out the step-time breakdown chart")
    show.add_argument(
        "--ascii", action="store_true", help="plain ASCII output (automatic when stdout cannot take Unicode)"
    )
    what_if = parser.add_argument_group("what-if analysis")
    what_if.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help="override one calibration value (VALUE is JSON, else a string); repeatable",
    )
    what_if.add_argument(
        "--sweep",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUES",
        help="estimate at each of V1,V2,... or START:STOP:STEP; two sweeps make a grid",
    )
    what_if.add_argument(
        "--sensitivity",
        action="store_true",
        help="swing each assumption across its range (calibration `ranges`) and show the combined band",
    )
    what_if.add_argument(
        "--scenario",
        metavar="DRAFTER/PIPELINE[@ACCEPT]",
        help="the scenario --sensitivity studies (default: stronger/native at its median accept)",
    )
    what_if.add_argument("--solve", metavar="KEY.PATH", help="find the value of one assumption that matches --observed")
    what_if.add_argument(
        "--observed",
        metavar="SCENARIO=TOK_S",
        help="a measured throughput for --solve, e.g. current/native=463",
    )
    add("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


def _check_usage(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    if bool(args.solve) != bool(args.observed):
        parser.error("--solve and --observed go together")
    if args.solve and args.sweep:
        parser.error("--solve and --sweep cannot be combined: solve first, then --set the value and sweep")
    if args.scenario and not args.sensitivity:
        parser.error("--scenario chooses what --sensitivity studies; add --sensitivity")
    if args.sensitivity and args.format == "csv":
        parser.error("--format csv holds one row per scenario; --sensitivity needs table, json or markdown")
    if args.explain and (args.format != "table" or args.sweep):
        parser.error("--explain prints one estimate's derivation in place of the tables: no --sweep, --format table")
    if args.format == "table" and not args.explain:
        import tabulate

        if args.tablefmt not in tabulate.tabulate_formats:
            formats = ", ".join(tabulate.tabulate_formats)
            parser.error(f"--tablefmt: unknown format {args.tablefmt!r}; choose from {formats}")
        if args.ascii and not tabulate.tabulate([["x"]], tablefmt=args.tablefmt).isascii():
            parser.error(f"--ascii: --tablefmt {args.tablefmt} draws with Unicode; choose an ASCII format")


def render(report: Report, args: argparse.Namespace, ascii_only: bool) -> str:
    if args.explain:
        return render_explain(report)
    if args.format == "json":
        return render_json(report)
    if args.format == "markdown":
        return render_markdown(report, chart=not args.no_chart)
    if args.format == "csv":
        return render_csv(report)
    return render_tables(report, args.tablefmt, 0 if args.no_chart else chart_columns(), ascii_only)


def _can_print(text: str) -> bool:
    try:
        text.encode(sys.stdout.encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _check_usage(args, parser)
    try:
        report = build_report(args)
    except CalibrationError as exc:
        print(f"estimate_b300: {exc}", file=sys.stderr)
        return 2
    for warning in report.warnings:
        print(f"estimate_b300: warning: {warning}", file=sys.stderr)
    ascii_only = args.ascii or not _can_print("".join(CHART_FILLS[False]))
    output = render(report, args, ascii_only)
    if ascii_only:
        output = output.encode("ascii", "replace").decode("ascii")  # names from the calibration, say
    try:
        sys.stdout.write(output)
        sys.stdout.flush()
    except BrokenPipeError:  # `estimate_b300.py | head`: the reader left, which is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def cli() -> None:
    """The command's entry point: main(), then exit without the interpreter's teardown.

    Tearing down what tabulate imports (importlib.metadata, email, ...) takes
    about 10 ms, a sixth of a table run. Both streams are flushed first and
    nothing else is pending: the tool holds no files and registers no atexit
    work. An internal error still propagates as a traceback with status 1.
    """
    code = main()
    for stream in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105 (contextlib.suppress would import contextlib for this alone)
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    cli()
