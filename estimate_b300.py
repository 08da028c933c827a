# /// script
# requires-python = ">=3.11"
# dependencies = ["tabulate>=0.9"]
# ///
"""Estimate Kimi K2.x decode throughput with DDTree speculative decoding on B300 (README.md: what it
answers, the calibration file, every option and output; --help: the options and exit statuses).

How: a decode step on the target GPU is split into MoE(M) + ATTN_BASE + SPEC.
The MoE time is a curve measured on a reference GPU, scaled by memory
bandwidth; ATTN_BASE and SPEC are what is left of two throughputs measured on
the target. The section "The model" holds every formula, each written once as
text that is also what computes it; the derivation is handed over as data,
which --explain prints line by line:

>>> est = estimate(parse_calibration(read_document(default_calibration_path())[0]))
>>> for figure in (est.decomposition.attn_base, est.decomposition.spec):
...     print(explain_line(figure))
  ATTN_BASE = AR step - MoE(1) = 7.519 - 0.259 = 7.26 ms
  SPEC = DDTree step - MoE(9) - ATTN_BASE = 14.521 - 1.991 - 7.260 = 5.27 ms

The numbers come from calibration.json, each with its source; the code holds formulas only.

The file reads top to bottom: the calibration's records; the model; loading and
validating the calibration, with key paths; the analyses (overrides, work spread over
the CPUs, sweeps, sensitivity, the fit and solving, warnings); one run's report;
rendering; the command line.
"""

import argparse
import bisect
import codecs
import collections
import contextlib
import errno
import functools
import gc
import hashlib
import itertools
import json
import math
import operator
import os
import re
import sys
import time
from collections.abc import Callable, Container, Generator, Iterable, Iterator, Sequence
from typing import Any, BinaryIO, Literal, NamedTuple, NoReturn, Protocol, TypeVar, cast, get_args

__version__ = "1.0.0"

SCHEMA_VERSION = 1
DRAFTERS = ("current", "stronger")
PIPELINES = ("sglang", "native")
PIPELINE_LABELS = {"sglang": "SGLang", "native": "native engine"}
POINT_BASES = ("measured", "inferred", "assumed")
CURVE_FITS = ("linear", "experts")
ROUNDING = 1e-12  # a relative difference this small is float rounding, not a conflict in the data
FLOAT_NOISE = 1e-14  # a difference of a few dozen ulps: all the rounding a result's few operations leave in it

# Limits on the size of the input, each checked before the work it bounds.
MAX_COUNT = 1_000_000  # the largest M, block, budget or TP: far past any decode step at concurrency 1
MAX_FIGURE = 1e15  # a figure this large (ms, tok/s, GB) means inputs of no sensible size
MAX_FILE_BYTES = 4 << 20  # a calibration file: the shipped one is 5 KB
MAX_READ_SECONDS = 5  # reading it from a pipe: `cat calibration.json |` takes milliseconds
MAX_ITEMS = {"points": 1000, "accept": 64}  # curve points; accept lengths of a drafter
MAX_RANGES = 10  # the band tries every combination of range ends: 2^10
MAX_PATH = 16  # segments of a key path; the deepest in a calibration has 5
MAX_TEXT = 500  # characters of a name, label, source or note: the longest shipped is 263; tables wrap them
MAX_NESTING = 32  # lists and objects within a --set value
MAX_HINTED = 5000  # keys a "did you mean" compares: a calibration at every limit has about 2,500 numbers
MAX_SWEEPS, MAX_SWEEP_POINTS = 2, 100_000  # two sweeps make a grid
MAX_SWEEP_SCENARIOS = 1_000_000  # in all its points: 100,000 points of the shipped calibration's 8 are 800,000
MAX_SWEEP_CURVE_READS = 300_000  # curve points a sweep's cross-check reads again: 100,000 points of the shipped 3
FAR_FROM_BEFORE = 10  # a fitted or solved value this many times, or this fraction of, its value before: a warning
MAX_FIT = 8  # values fitted at once: more than the measurements of one model can usually tell apart
FIT_STEPS = 100  # Levenberg-Marquardt steps of a fit or a refit: a few are the rule, the rest a value running off
MAX_FIT_EVALUATIONS = 20_000  # of the model, by a least squares (3x what one of 8 values took): see fit()
MAX_LOO_EVALUATIONS = 160_000  # by the leave-one-out refits in all, counted in their order
REREAD_EVALUATIONS = 30  # a trial's re-read of the calibration, as evaluations: about the time it takes
POINTS_PER_EVALUATION = 32  # and when it re-reads curve points, one more for each 32 points of the curve
SCENARIO_EVALUATIONS = 3  # a report scenario derives five figures where a prediction derives one or two
MAX_ARGUMENTS = 1000  # on the command line: 100 --measured and 8 --fit take 216
MAX_MEASUREMENTS = 100  # logged and --measured together: a fit of a few values needs far fewer


T = TypeVar("T")
Item = TypeVar("Item")
PathSegments = tuple[str | int, ...]  # a key path, split: ("moe_curve", "points", 1, "ms")
Change = tuple[PathSegments, object]  # a key path and the value it takes


class CalibrationError(ValueError):
    """Bad input: the key path, what is wrong and what was expected; `file` names the file or option at fault."""

    def __init__(self, path: str, message: str, file: str = "") -> None:
        super().__init__(path, message)
        self.path, self.message, self.file = path, message, file

    def __str__(self) -> str:
        return ": ".join(part for part in (self.file, shortened(self.path), self.message) if part)


# === The calibration: typed records that mirror calibration.json ===


class Gpu(NamedTuple):
    name: str
    mem_bandwidth_tb_s: float  # TB = 1e12 bytes


class Hardware(NamedTuple):
    reference: Gpu  # where the MoE curve was measured
    target: Gpu  # where the anchors were measured and the estimate is made


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


class CurvePoint(NamedTuple):
    m: int  # tokens in the batch
    ms: float  # MoE forward time on the reference GPU
    basis: str  # one of POINT_BASES
    position: int  # its place in the file: moe_curve.points[position]


class CurvePoints(tuple[CurvePoint, ...]):
    """A curve's points, sorted by m, hashed once: the model's caches hash the curve at every call, and it may
    have 1,000 points."""

    @functools.cached_property
    def _hash(self) -> int:
        return super().__hash__()

    @functools.cached_property
    def batches(self) -> tuple[int, ...]:
        """Each point's M, in order: what curve(M) looks M up in."""
        return tuple(p.m for p in self)

    def __hash__(self) -> int:
        return self._hash


class MoeCurve(NamedTuple):
    tp: int
    points: CurvePoints  # at least two
    fit: str  # one of CURVE_FITS: how MoE(M) is read from the points


class DdtreeAnchor(NamedTuple):
    block: int
    budget: int
    accept: float
    tok_s: float


class Anchors(NamedTuple):
    ar_tok_s: float
    ddtree: DdtreeAnchor
    measured_on: str | None  # the GPU the anchors were measured on, when the file says
    elsewhere: Gpu | None = None  # that GPU with its bandwidth, where the file gives it: see split_on


ANCHORS_BANDWIDTH = "anchors.measured_on_mem_bandwidth_tb_s"  # the bandwidth of Anchors.elsewhere


class NativeEngine(NamedTuple):
    overhead_cut: float  # the share of the non-MoE time the native engine removes


class SglangPipeline(NamedTuple):
    max_budget: int  # the largest tree budget SGLang can verify on the target
    reason: str  # why: the source of max_budget


class StrongerDrafter(NamedTuple):
    block: int
    budget: int
    accept: tuple[float, ...]
    attn_base_scale: float
    spec_scale: float


class Measurement(NamedTuple):
    """One measured throughput of one configuration: the model's track record, and what --fit fits to."""

    label: str
    drafter: str | None  # one of DRAFTERS; None for an autoregressive run
    pipeline: str
    block: int | None  # None: the drafter's own
    budget: int | None
    accept: float | None  # the measured mean accept length; None for an autoregressive run
    tok_s: float
    source: str
    origin: str  # where it was given: "measurements[2]", or the --measured option

    @property
    def step_key(self) -> tuple[str | None, str, int | None]:
        """What its prediction's step rests on: the drafter, the pipeline and the budget as written (an
        autoregressive run: None, the pipeline and None); measurements alike in this share one step."""
        return self.drafter, self.pipeline, self.budget

    def origin_of(self, key: str) -> str:
        """Where one of its values was given: 'measurements[2].tok_s', or the --measured option."""
        return self.origin if self.origin.startswith("--") else f"{self.origin}.{key}"


class Range(NamedTuple):
    """One assumption's what-if range, for --sensitivity."""

    path: str
    low: float
    high: float
    source: str


class Domain(NamedTuple):
    """The values a number of the calibration may take: checked on load, searched by --solve."""

    low: float = 0.0
    high: float = math.inf
    low_open: bool = True
    high_open: bool = True
    integer: bool = False

    def __contains__(self, value: object) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        above = value > self.low or (not self.low_open and value == self.low)
        return above and (value < self.high or (not self.high_open and value == self.high))

    def describe(self) -> str:
        """In words: Domain() -> 'a number > 0'."""
        if self.integer:
            return f"a whole number from {self.low:g} to {self.high:,.0f}"
        bounds = [f"{'>' if self.low_open else '>='} {self.low:g}"] if self.low > -math.inf else []
        bounds += [f"{'<' if self.high_open else '<='} {self.high:g}"] if self.high < math.inf else []
        return f"a number {' and '.join(bounds)}".rstrip()


POSITIVE = Domain()
THROUGHPUT = Domain(1e-6, MAX_FIGURE, low_open=False)  # a measured tok/s: its ratio to a prediction stays finite
ANY_NUMBER = Domain(-math.inf)
COUNT = Domain(1, MAX_COUNT, False, False, integer=True)
ACCEPT = Domain(1.0, low_open=False)  # a mean accept length: every step commits at least one token


class Calibration(NamedTuple):
    hardware: Hardware
    model: ModelGeometry | None  # None: no `model` section, no physical cross-check
    moe_curve: MoeCurve
    anchors: Anchors
    native_engine: NativeEngine
    sglang: SglangPipeline | None  # None: no `sglang` section, so SGLang runs any tree
    stronger_drafter: StrongerDrafter
    measurements: tuple[Measurement, ...]  # measured throughputs beyond the anchors; often none
    ranges: tuple[Range, ...] | None  # None: no `ranges` section, so no --sensitivity
    domains: dict[str, Domain]  # every number read, by key path: what --fit, --solve and ranges may vary


# === The model ===
#
# One decode step on the target GPU, in milliseconds, and the throughput it gives:
#
#     step  = MoE(M) + kept * (attn_base_scale * ATTN_BASE + spec_scale * SPEC)
#     tok/s = 1000 * accept / step
#
# MoE(M) is the reference GPU's curve at the verify batch M = budget + 1, divided by the bandwidth
# ratio. ATTN_BASE and SPEC are what is left of the two anchors measured on the target. `kept` is 1
# on SGLang and 1 - overhead_cut on the native engine; both scales are 1 for the current drafter.
#
# Every number is a Figure that carries its derivation: derive(name, formula, unit, *inputs) runs
# the formula's own text, so what --explain, the tables and JSON show is what ran. Two figures are
# solved, not derived, and their text says how: chain alpha (a bisection) and the experts line
# (a least squares). The experts fit, the physical cross-check, the whole estimate and how a
# formula's text runs follow the main line, in that order.
#
# Four functions of the whole calibration (moe_time, decompose, drafters, drafter_on) hand the
# sections they read to a cached twin: decompose(cal) is _decompose(hardware, model, curve, anchors).
# A sweep that changes another section, or a fit that moves one value, finds the rest computed;
# the calibration itself changes with any value, and holds a dict, so it is no cache key.


class Figure(NamedTuple):
    """One number of the estimate and how it was reached: `name = formula = value`.

    A number read from the calibration has no formula; `path` is its key path.
    """

    name: str
    value: float
    unit: str  # one of FIGURE_FORMATS
    formula: str = ""  # arithmetic over the names of the inputs; ^ is a power
    inputs: tuple["Figure", ...] = ()
    path: str = ""


def given(name: str, value: float, unit: str = "", path: str = "") -> Figure:
    """An input: a number from the calibration (at `path`), or one fixed by definition."""
    return Figure(name, value, unit, path=path)


def derive(name: str, formula: str, unit: str, *inputs: Figure) -> Figure:
    """A figure computed by its formula: the text, with the inputs' values for their names, is what runs
    (compiled once: see _compile, at the end of the model).

    >>> derive("AR step", "1000 / ar_tok_s", "ms", given("ar_tok_s", 125)).value
    8.0
    """
    compute = _COMPILED.get(formula) or _compile(formula, inputs)
    gives = ""  # what the arithmetic gives, where it stops short of a value
    try:
        value = float(compute(inputs))
    except ArithmeticError as exc:
        value, gives = math.nan, "divides by 0" if isinstance(exc, ZeroDivisionError) else "overflows"
    if not abs(value) < MAX_FIGURE:  # also NaN
        values = ", ".join(f"{i.name} = {i.value:.4g}" + (f" ({i.path})" if i.path else "") for i in inputs)
        shown = f"{value:.4g}"
        if abs(float(shown)) == MAX_FIGURE:  # a value just past the bound, not rounded onto it
            shown = f"{value:.9g}"
        gives = gives or f"gives {shown}"
        raise CalibrationError(
            name, f"{formula} with {values} {gives}; expected a finite figure below {MAX_FIGURE:.0e}: "
            "inputs of sensible size"
        )  # fmt: skip
    return Figure(name, value, unit, formula, inputs)


@functools.lru_cache(maxsize=64)  # one hardware, every M: a fit reads the curve at each measured tree's M
def bandwidth_ratio(hardware: Hardware, elsewhere: Gpu | None = None) -> Figure:
    """Target over reference memory bandwidth: 8.0 / 1.8 = 4.444 for B300 vs RTX PRO 6000; or, `elsewhere`, that
    of the GPU the anchors were measured on, where it is not the target."""
    reference = bandwidth(hardware.reference, "reference")
    if elsewhere is None:
        target = bandwidth(hardware.target, "target")
        return derive("bandwidth ratio", "target bandwidth / reference bandwidth", "ratio", target, reference)
    anchors = given("anchors' bandwidth", elsewhere.mem_bandwidth_tb_s, "TB/s", ANCHORS_BANDWIDTH)
    return derive("anchors' ratio", "anchors' bandwidth / reference bandwidth", "ratio", anchors, reference)


def bandwidth(gpu: Gpu, role: Literal["target", "reference"]) -> Figure:
    """A GPU's memory bandwidth, as an input; `role` is the GPU's key in `hardware`."""
    return given(f"{role} bandwidth", gpu.mem_bandwidth_tb_s, "TB/s", f"hardware.{role}.mem_bandwidth_tb_s")


class MoeTime(NamedTuple):
    m: int
    time: Figure  # MoE(M) on the target (or on the anchors' GPU elsewhere), from curve(M) on the reference GPU
    extrapolated: bool  # M lies outside the curve's points
    floor: Figure | None  # the weight read at 100% of the target's bandwidth (needs `model`)


def moe_time(cal: Calibration, m: int) -> MoeTime:
    """MoE(M) = curve(M) / bandwidth ratio: the MoE forward is bandwidth-bound."""
    return _moe_time(cal.hardware, cal.model, cal.moe_curve, m, None)


@functools.lru_cache(maxsize=256)  # a sweep computes it again only where the sections it reads changed
def _moe_time(
    hardware: Hardware, model: ModelGeometry | None, curve: MoeCurve, m: int, elsewhere: Gpu | None
) -> MoeTime:
    """MoE(M) on the target; or, `elsewhere`, "anchors' MoE(M)" on the GPU the anchors were measured on."""
    at = curve_at(curve, model, m)
    if not at.value > 0:
        ms, fix = curve.points.batches, f"add a measured point nearer M = {m}"  # past the points, a line goes on
        if curve.fit == "experts" and model:  # the experts fit's line, anywhere
            t0, t_expert = at.inputs[:2]
            fix = (f"points that follow the experts fit, t0 + t_expert * distinct(M), here t0 = {t0.value:.4g} ms "
                   f'and t_expert = {t_expert.value:.4g} ms, or fit "linear"')  # fmt: skip
        raise CalibrationError(
            "moe_curve.points", f"reading the curve (M = {ms[0]}..{ms[-1]}, fit {curve.fit}) at M = {m} "
            f"gives {at.value:.4g} ms; expected a positive time: {fix}"
        )  # fmt: skip
    floor = moe_floor(hardware.target, model, curve.tp, m) if model and elsewhere is None else None
    ratio, name = bandwidth_ratio(hardware, elsewhere), f"MoE({m})" if elsewhere is None else f"anchors' MoE({m})"
    time = derive(name, f"{at.name} / {ratio.name}", "ms", at, ratio)
    return MoeTime(m, time, not curve.points[0].m <= m <= curve.points[-1].m, floor)


def curve_at(curve: MoeCurve, model: ModelGeometry | None, m: int) -> Figure:
    """curve(M): a measured point, the straight line through the nearest two, or the experts fit.

    Outside the points the nearest end segment goes on: with (9, 8.85) and (32, 23.8),
    curve(33) = 8.85 + (33 - 9) * (23.8 - 8.85) / (32 - 9) = 24.45 ms.
    """
    if curve.fit == "experts" and model:
        (t0, t_expert), distinct = experts_line(curve.points, model), distinct_experts(model, m)
        return derive(f"fit({m})", f"t0 + t_expert * {distinct.name}", "ms", t0, t_expert, distinct)
    points = curve.points
    at_or_above = bisect.bisect_left(points.batches, m)
    if at_or_above < len(points) and points[at_or_above].m == m:
        return point_figure(points[at_or_above])
    above = min(max(at_or_above, 1), len(points) - 1)
    lo, hi = points[above - 1], points[above]  # its own segment inside, the nearest end one outside
    formula = f"curve({lo.m}) + ({m} - {lo.m}) * (curve({hi.m}) - curve({lo.m})) / ({hi.m} - {lo.m})"
    return derive(f"curve({m})", formula, "ms", point_figure(lo), point_figure(hi))


def point_figure(p: CurvePoint) -> Figure:
    return given(f"curve({p.m})", p.ms, "ms", f"moe_curve.points[{p.position}].ms")


class Decomposition(NamedTuple):
    """The calibration step: the two measured anchors split into MoE, ATTN_BASE and SPEC, at the target's MoE time,
    or at that of the GPU they were measured on where it is another and its bandwidth is given (see split_on)."""

    bandwidth_ratio: Figure  # the target's, which the scenarios' MoE scales by
    today: Figure  # the DDTree anchor's tok_s: the throughput measured today
    ar_step: Figure
    moe_ar: MoeTime  # MoE(1), where the anchors were measured
    attn_base: Figure
    ddtree_step: Figure
    moe_ddtree: MoeTime  # MoE(budget + 1), where the anchors were measured
    spec: Figure
    overhead: Figure
    shares: dict[str, Figure]  # each part as a share of the DDTree step, by the part's name
    anchors_ratio: Figure | None  # where the anchors were measured on another GPU than the target: its ratio


def decompose(cal: Calibration) -> Decomposition:
    """Split the anchors: AR step - MoE(1) leaves ATTN_BASE; DDTree step - MoE(M) - ATTN_BASE leaves SPEC. The MoE
    is that of the GPU split_on names, else the target's; the scenarios keep ATTN_BASE and SPEC and add the
    target's MoE."""
    return _decompose(cal.hardware, cal.model, cal.moe_curve, cal.anchors)


@functools.lru_cache(maxsize=64)  # a sweep splits the anchors again only where the sections it reads changed
def _decompose(hardware: Hardware, model: ModelGeometry | None, curve: MoeCurve, anchors: Anchors) -> Decomposition:
    dd, elsewhere = anchors.ddtree, split_on(hardware, anchors)
    measured_on = elsewhere or hardware.target
    ratio = bandwidth_ratio(hardware)
    ar_measured = given("ar_tok_s", anchors.ar_tok_s, "tok/s", "anchors.ar_tok_s")
    accept = given("accept", dd.accept, "tokens", "anchors.ddtree.accept")
    tok_s = given("tok_s", dd.tok_s, "tok/s", "anchors.ddtree.tok_s")
    moe_ar, moe_dd = (_moe_time(hardware, model, curve, m, elsewhere) for m in (1, dd.budget + 1))
    moe_1, moe_m = moe_ar.time, moe_dd.time

    ar_step = derive("AR step", "1000 / ar_tok_s", "ms", ar_measured)
    attn_base = rounded_to_0(derive("ATTN_BASE", f"AR step - {moe_1.name}", "ms", ar_step, moe_1), ar_step)
    ddtree_step = derive("DDTree step", "1000 * accept / tok_s", "ms", accept, tok_s)
    spec = derive("SPEC", f"DDTree step - {moe_m.name} - ATTN_BASE", "ms", ddtree_step, moe_m, attn_base)
    spec = rounded_to_0(spec, ddtree_step)
    overhead = derive("overhead", "ATTN_BASE + SPEC", "ms", attn_base, spec)

    if not attn_base.value > 0:
        raise CalibrationError(
            "anchors.ar_tok_s", f"the measured anchors conflict with the MoE curve: {anchors.ar_tok_s:g} tok/s is a "
            f"{ar_step.value:.4g} ms step, but {moe_1.name} alone takes {moe_1.value:.4g} ms on {measured_on.name}, "
            f"leaving ATTN_BASE = {attn_base.value:.4g} ms; expected ATTN_BASE > 0, i.e. ar_tok_s below "
            f"{rounded_down(1000.0 / moe_1.value)} (or a smaller curve(1), or "
            f"{'a faster target' if elsewhere is None else 'a larger ' + ANCHORS_BANDWIDTH})"
        )  # fmt: skip
    if spec.value < 0:
        verify = moe_m.value + attn_base.value
        raise CalibrationError(
            "anchors.ddtree.tok_s", f"the measured anchors conflict by {-spec.value:.4g} ms: DDTree at {dd.tok_s:g} "
            f"tok/s with accept {dd.accept:g} is a {ddtree_step.value:.4g} ms step, faster than its verify alone, "
            f"{moe_m.name} + ATTN_BASE = {moe_m.value:.4g} + {attn_base.value:.4g} = {verify:.4g} ms (ATTN_BASE from "
            f"ar_tok_s = {anchors.ar_tok_s:g}); expected SPEC >= 0, i.e. ddtree.tok_s at most "
            f"{rounded_down(1000.0 * dd.accept / verify)}"
        )  # fmt: skip
    shares = {
        part.name: derive(f"share of {part.name}", f"{part.name} / DDTree step", "%", part, ddtree_step)
        for part in (ddtree_step, moe_m, attn_base, spec, overhead)
    }
    today = tok_s._replace(name="today")
    anchors_ratio = bandwidth_ratio(hardware, elsewhere) if elsewhere else None
    return Decomposition(
        ratio, today, ar_step, moe_ar, attn_base, ddtree_step, moe_dd, spec, overhead, shares, anchors_ratio
    )


def split_on(hardware: Hardware, anchors: Anchors) -> Gpu | None:
    """The GPU whose bandwidth the anchors are split at, where it is not the target's: the one they were measured
    on, where the file gives its bandwidth and the target is another GPU. On the target itself they are split at
    its bandwidth, which a range or a sweep of it moves."""
    gpu = anchors.elsewhere
    return gpu if gpu and gpu.name != hardware.target.name else None


def rounded_to_0(difference: Figure, whole: Figure) -> Figure:
    """A difference within float rounding of 0, next to the whole it was taken from, is 0: anchors exactly at a
    boundary give ATTN_BASE or SPEC = 0, not 5.6e-17 or 3.6e-15 ms."""
    return difference._replace(value=0.0) if abs(difference.value) <= FLOAT_NOISE * whole.value else difference


class Drafter(NamedTuple):
    """A drafter as the model sees it: tree shape, accept lengths, and how its overhead scales."""

    name: str  # one of DRAFTERS
    block: int
    budget: int
    accepts: tuple[Figure, ...]
    attn_base_scale: Figure  # ATTN_BASE grows with the verify batch
    spec_scale: Figure  # draft + tree cost relative to the calibration drafter

    @property
    def m(self) -> int:
        """The verify batch: the tree's budget and the token it grows from."""
        return self.budget + 1


def drafters(cal: Calibration) -> tuple[Drafter, Drafter]:
    """The current drafter (the DDTree anchor itself, both scales 1) and the stronger one."""
    return _drafters(cal.anchors.ddtree, cal.stronger_drafter)


def drafter_named(cal: Calibration, name: str) -> Drafter:
    """One of DRAFTERS: "current" or "stronger"."""
    return drafters(cal)[DRAFTERS.index(name)]


@functools.lru_cache(maxsize=64)
def _drafters(dd: DdtreeAnchor, sd: StrongerDrafter) -> tuple[Drafter, Drafter]:
    current = (given("accept", dd.accept, "tokens", "anchors.ddtree.accept"),)
    stronger = tuple(given("accept", a, "tokens", f"stronger_drafter.accept[{i}]") for i, a in enumerate(sd.accept))
    scales = [given(key, getattr(sd, key), "", f"stronger_drafter.{key}") for key in ("attn_base_scale", "spec_scale")]
    return (
        Drafter("current", dd.block, dd.budget, current, given("attn_base_scale", 1.0), given("spec_scale", 1.0)),
        Drafter("stronger", sd.block, sd.budget, stronger, *scales),
    )


@functools.lru_cache(maxsize=64)  # one engine, every tree: a fit estimates each measured tree's step at every trial
def kept(engine: NativeEngine | None) -> Figure:
    """The share of the non-MoE time a pipeline keeps: all of it on SGLang (no engine), 1 - overhead_cut natively."""
    if engine is None:
        return given("kept", 1.0)
    cut = given("overhead_cut", engine.overhead_cut, "", "native_engine.overhead_cut")
    return derive("kept", "1 - overhead_cut", "", cut)


class Step(NamedTuple):
    """One drafter's step on one pipeline: it does not depend on the accept length."""

    moe: MoeTime
    attn_base: Figure
    spec: Figure
    step: Figure


def step_parts(dec: Decomposition, drafter: Drafter, k: Figure) -> tuple[Figure, Figure]:
    """The ATTN_BASE and SPEC parts of a drafter's step on a pipeline that keeps `k` of them: the same at every M."""
    a, s = drafter.attn_base_scale, drafter.spec_scale
    attn_base = derive("ATTN_BASE part", "kept * attn_base_scale * ATTN_BASE", "ms", k, a, dec.attn_base)
    spec = derive("SPEC part", "kept * spec_scale * SPEC", "ms", k, s, dec.spec)
    return attn_base, spec


def step(moe: MoeTime, parts: tuple[Figure, Figure]) -> Step:
    """One step at M: MoE(M) and the drafter's parts (step_parts) on its pipeline."""
    attn_base, spec = parts
    total = derive("step", f"{moe.time.name} + ATTN_BASE part + SPEC part", "ms", moe.time, attn_base, spec)
    return Step(moe, attn_base, spec, total)


def throughput(accept: Figure, step_ms: Figure) -> Figure:
    return derive("tok/s", "1000 * accept / step", "tok/s", accept, step_ms)


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
    vs_today: float  # tok/s over today's measured throughput, the DDTree anchor's
    runnable: bool  # False: the pipeline cannot run this drafter's tree
    not_runnable_reason: str | None
    figures: dict[str, Figure]  # the derivation of the numbers above, by name

    @property
    def label(self) -> str:
        return f"{self.drafter}/{self.pipeline}@{self.accept:g}"


def scenario(
    dec: Decomposition, drafter: Drafter, pipeline: str, accept: Figure, part: Step, limit: str | None
) -> Scenario:
    """Throughput at one accept length: the default stronger drafter natively at 14 gives 1000 * 14 / 14.731.

    `limit` says why the pipeline cannot run this drafter's tree, or is None when it can.
    """
    moe, step_ = part.moe, part.step
    tok_s = throughput(accept, step_)
    x_today = derive("x today", "tok/s / today", "x", tok_s, dec.today)
    alpha = chain_alpha(accept.value, drafter.block)
    figures = [moe.time, part.attn_base, part.spec, step_, tok_s, x_today, alpha]
    ceiling = derive("ceiling", "1000 * accept / MoE floor", "tok/s", accept, moe.floor) if moe.floor else None
    if ceiling:
        figures += [ceiling, derive("of ceiling", "tok/s / ceiling", "%", tok_s, ceiling)]
    return Scenario(
        drafter=drafter.name, pipeline=pipeline, block=drafter.block, budget=drafter.budget, m=moe.m,
        accept=accept.value, chain_alpha=alpha.value, moe_ms=moe.time.value, attn_base_ms=part.attn_base.value,
        spec_ms=part.spec.value, step_ms=step_.value, tok_s=tok_s.value, moe_extrapolated=moe.extrapolated,
        measured=drafter.name == "current" and pipeline == "sglang" and dec.anchors_ratio is None,
        moe_floor_ms=moe.floor.value if moe.floor else None, tok_s_ceiling=ceiling.value if ceiling else None,
        vs_today=x_today.value, runnable=limit is None, not_runnable_reason=limit, figures={f.name: f for f in figures},
    )  # fmt: skip


@functools.lru_cache(maxsize=1024)
def chain_alpha(accept: float, depth: int) -> Figure:
    """The per-token acceptance rate a chain of `depth` drafted tokens needs for a mean accept length.

    Solves (1 - a^(depth + 1)) / (1 - a) = accept (Leviathan et al., 2023) by bisection,
    each probe in closed form, so any depth costs the same; accept = depth + 1 means a = 1.

    >>> round(chain_alpha(4.4, 8).value, 3)
    0.805
    """
    # the length rises with a from 1 (at a = 0: the token the tree grows from) to depth + 1 (at a = 1)
    low, high = (1.0, 1.0) if accept >= depth + 1 else (0.0, 0.0) if accept <= 1 else (0.0, 1.0)
    for _ in range(200):
        a = (low + high) / 2
        if a in (low, high):
            break
        length = -math.expm1((depth + 1) * math.log(a)) / (1 - a) if a > 0 else 1.0  # exact as a nears 1
        low, high = (a, high) if length < accept else (low, a)
    formula = "the a with (1 - a^(block + 1)) / (1 - a) equal to accept"  # Leviathan et al., 2023: in the notes
    return Figure(
        "chain alpha", (low + high) / 2, "", formula, (given("block", depth, "count"), given("accept", accept))
    )


def scenarios(cal: Calibration) -> tuple[Scenario, ...]:
    """Every scenario: each drafter, each of its accept lengths, each pipeline."""
    rows: list[Scenario] = []
    for drafter in drafters(cal):
        on = [drafter_on(cal, drafter, pipeline, drafter.accepts) for pipeline in PIPELINES]
        rows += [row for same_accept in zip(*on, strict=True) for row in same_accept]
    return tuple(rows)


def runs(rows: Iterable[Scenario]) -> dict[tuple[str, str], tuple[Scenario, ...]]:
    """The scenarios of each drafter on each pipeline, one per accept length, in the order given."""
    found: dict[tuple[str, str], list[Scenario]] = {}
    for row in rows:
        found.setdefault((row.drafter, row.pipeline), []).append(row)
    return {run: tuple(rows) for run, rows in found.items()}


def drafter_on(cal: Calibration, drafter: Drafter, pipeline: str, accepts: tuple[Figure, ...]) -> tuple[Scenario, ...]:
    """One drafter on one pipeline at some accept lengths."""
    engine = engine_on(cal, pipeline)
    limit = cannot_run(cal.sglang, drafter.budget) if pipeline == "sglang" else None
    return _drafter_on(cal.hardware, cal.model, cal.moe_curve, cal.anchors, drafter, engine, pipeline, accepts, limit)


def engine_on(cal: Calibration, pipeline: str) -> NativeEngine | None:
    """The native engine on its pipeline; SGLang has none, and so keeps all of the overhead."""
    return cal.native_engine if pipeline == "native" else None


def cannot_run(sglang: SglangPipeline | None, budget: int) -> str | None:
    """Why SGLang cannot run a tree of this budget, or None when it can (or the calibration sets no limit)."""
    if sglang is None or budget <= sglang.max_budget:
        return None
    why = f": {sglang.reason.rstrip('.')}" if sglang.reason else ""  # a sentence goes on after it
    return f"SGLang cannot verify a budget above {sglang.max_budget}{why}"


# A sweep computes a drafter's scenarios on a pipeline again only when a section they read has changed.
@functools.lru_cache(maxsize=256)
def _drafter_on(
    hardware: Hardware, model: ModelGeometry | None, curve: MoeCurve, anchors: Anchors, drafter: Drafter,
    engine: NativeEngine | None, pipeline: str, accepts: tuple[Figure, ...], limit: str | None,
) -> tuple[Scenario, ...]:  # fmt: skip
    dec = _decompose(hardware, model, curve, anchors)
    part = step(_moe_time(hardware, model, curve, drafter.m, None), step_parts(dec, drafter, kept(engine)))
    return tuple(scenario(dec, drafter, pipeline, accept, part, limit) for accept in accepts)


class BreakEven(NamedTuple):
    """The accept length at which the stronger drafter matches another way of decoding."""

    pipeline: str
    versus: str  # "current" or "autoregressive"
    accept: float | None  # None: it cannot break even inside the tree
    tok_s_to_match: float
    reason: str | None
    stronger_step_ms: float
    figures: tuple[Figure, ...]


def ar_tok_s(cal: Calibration, dec: Decomposition, pipeline: str, moe_1: MoeTime | None = None) -> Figure:
    """Autoregressive decoding on a pipeline, on the target, or at another MoE(1) (the anchors', see predictions);
    on SGLang on the GPU the anchors were measured on, it gives back the measured ar_tok_s."""
    k, moe = kept(engine_on(cal, pipeline)), (moe_1 or moe_time(cal, 1)).time
    return derive("AR tok/s", f"1000 / ({moe.name} + kept * ATTN_BASE)", "tok/s", moe, k, dec.attn_base)


def break_even(cal: Calibration, dec: Decomposition, rows: tuple[Scenario, ...]) -> tuple[BreakEven, ...]:
    """The stronger step does not depend on accept, so the accept that matches a rival is tok/s * step / 1000."""
    limit, bound = accept_limit(cal.stronger_drafter.block, cal.stronger_drafter.budget)
    result, by_run = [], runs(rows)
    for pipeline in PIPELINES:
        current, strong = (by_run[d, pipeline][0] for d in DRAFTERS)
        for versus, rival in (("current", current.figures["tok/s"]), ("autoregressive", ar_tok_s(cal, dec, pipeline))):
            needed = accept_needed(rival.value, strong.step_ms)
            reason: str | None = None
            accept: float | None = needed.value
            if needed.value > limit:
                needs = _apart(needed.value, limit, least=3)  # 17.0000004, not 17, above a limit of 17
                reason, accept = f"it would need accept {needs}, above the tree's limit {bound}", None
            elif needed.value < 1:  # every step commits at least the one token it grows from
                reason = "below 1: ahead at any accept"
            result.append(BreakEven(pipeline, versus, accept, rival.value, reason, strong.step_ms,
                                    (*derivation(rival), needed)))  # fmt: skip
    return tuple(result)


def accept_needed(tok_s: float, stronger_step_ms: float) -> Figure:
    """The accept length at which the stronger drafter's step gives `tok_s`: tok/s = 1000 * accept / step, solved."""
    to_match, stronger_step = given("tok/s to match", tok_s, "tok/s"), given("stronger step", stronger_step_ms, "ms")
    return derive("accept needed", "tok/s to match * stronger step / 1000", "tokens", to_match, stronger_step)


def accept_limit(block: int, budget: int) -> tuple[int, str]:
    """The largest mean accept length a tree allows, and the bound that sets it: (17, 'block+1 = 17')."""
    return (budget + 1, f"budget+1 = {budget + 1}") if budget <= block else (block + 1, f"block+1 = {block + 1}")


def tree_shape(cal: Calibration, m: Measurement) -> tuple[int, int]:
    """The block and budget a measurement ran: its own, else its drafter's."""
    tree = cal.stronger_drafter if m.drafter == "stronger" else cal.anchors.ddtree
    return m.block or tree.block, m.budget or tree.budget


# --- The experts fit: curve(M) read as fit(M) = t0 + t_expert * distinct(M), far past the points too ---


@functools.lru_cache(maxsize=2048)  # the experts fit reads it at every point of the curve, at every refit
def distinct_experts(model: ModelGeometry, m: int) -> Figure:
    """Expected distinct routed experts one MoE layer touches for M tokens, under uniform routing.

    >>> kimi = ModelGeometry(61, 1, 7168, 2048, 384, 8, 1, 4, 32, 16, False)
    >>> [round(distinct_experts(kimi, m).value, 2) for m in (1, 9, 32)]
    [8.0, 66.28, 188.23]
    """
    e = given("E", model.routed_experts, "count", "model.routed_experts")
    k = given("k", model.experts_per_token, "count", "model.experts_per_token")
    return derive(f"distinct({m})", f"E * (1 - (1 - k / E)^{m})", "experts", e, k)


class ExpertsFit(NamedTuple):
    """The experts line (experts_line), and how far each curve point lies from it."""

    t0: Figure
    t_expert: Figure
    residuals_ms: tuple[tuple[int, float], ...]  # (M, measured - fitted) at each point


def fit_experts(points: CurvePoints, model: ModelGeometry) -> ExpertsFit:
    """The experts line through the curve's points, and each point's residual from it."""
    t0, t_expert = experts_line(points, model)
    distinct = [distinct_experts(model, p.m).value for p in points]
    residuals = tuple((p.m, p.ms - (t0.value + t_expert.value * x)) for p, x in zip(points, distinct, strict=True))
    return ExpertsFit(t0, t_expert, residuals)


@functools.lru_cache(maxsize=64)
def experts_line(points: CurvePoints, model: ModelGeometry) -> tuple[Figure, Figure]:
    """t0 and t_expert (the time of each distinct routed expert a layer touches): the ordinary least squares
    of curve(M) = t0 + t_expert * x over every point, x = distinct(M), gives
    t_expert = sum((x - mean x) * (y - mean y)) / Sxx and t0 = mean y - t_expert * mean x.

    Distinct experts flatten as a batch touches nearly all of them, so this reads large M far better
    than a straight line in M does. The x side depends on the points' Ms alone and is computed once.
    """
    x_mean, weights = _experts_weights(points.batches, model)
    ys = [p.ms for p in points]
    y_mean = sum(ys) / len(ys)
    slope = sum(w * (y - y_mean) for w, y in zip(weights, ys, strict=True))
    how = "least squares of curve(M) = t0 + t_expert * distinct(M) through the curve's points"
    return Figure("t0", y_mean - slope * x_mean, "ms", how), Figure("t_expert", slope, "ms", how)


@functools.lru_cache(maxsize=16)
def _experts_weights(ms: tuple[int, ...], model: ModelGeometry) -> tuple[float, tuple[float, ...]]:
    """mean x, and each point's (x - mean x) / Sxx: what turns the times into the slope."""
    xs = [distinct_experts(model, m).value for m in ms]
    x_mean = sum(xs) / len(xs)
    sxx = sum((x - x_mean) ** 2 for x in xs)
    if sxx <= ROUNDING * max(x_mean * x_mean, 1.0):
        raise CalibrationError(
            "moe_curve.fit", "every point touches the same number of distinct experts (experts_per_token = "
            'routed_experts?); expected points the experts fit can tell apart, or fit "linear"'
        )  # fmt: skip
    return x_mean, tuple((x - x_mean) / sxx for x in xs)


# --- The physical cross-check: the bytes the MoE must read ---


@functools.lru_cache(maxsize=1024)  # keyed without the curve: a fit that moves the curve's times finds it here
def moe_floor(target: Gpu, model: ModelGeometry, tp: int, m: int) -> Figure:
    """The time in ms of one step's MoE weight read at 100% of the target's bandwidth."""
    read = moe_gb_per_gpu(model, tp, m)
    return derive("MoE floor", f"{read.name} / target bandwidth", "ms", read, bandwidth(target, "target"))


@functools.lru_cache(maxsize=2048)  # each point of a curve of up to 1,000, and the scenarios' M
def moe_gb_per_gpu(model: ModelGeometry, tp: int, m: int) -> Figure:
    """Weight bytes one GPU reads in one step's MoE: every MoE layer, split over the TP ranks.

    >>> round(moe_gb_per_gpu(ModelGeometry(61, 1, 7168, 2048, 384, 8, 1, 4, 32, 16, False), 8, 9).value, 2)
    12.31
    """
    layers, expert, shared = expert_weights(model)
    distinct, ranks = distinct_experts(model, m), given("TP", tp, "count", "moe_curve.tp")
    if shared is None:
        formula = f"MoE layers * {distinct.name} * expert MB / TP / 1000"
        return derive(f"GB per GPU({m})", formula, "GB", layers, distinct, expert, ranks)
    formula = f"MoE layers * ({distinct.name} * expert MB + shared MB) / TP / 1000"
    return derive(f"GB per GPU({m})", formula, "GB", layers, distinct, expert, shared, ranks)


@functools.lru_cache(maxsize=64)  # every M's read shares them
def expert_weights(model: ModelGeometry) -> tuple[Figure, Figure, Figure | None]:
    """The MoE layers, one routed expert's MB and, when the curve times the shared expert, its MB.

    One routed expert is its gate, up and down projections with their quantization scales
    (24.77 MB for Kimi K2 in INT4, group size 32); a shared expert the curve times stays at 16 bits.
    """
    shape = {key: given(key, getattr(model, key), "count", f"model.{key}") for key in ModelGeometry._fields[:-1]}
    expert = derive(
        "expert MB", "3 * hidden_size * expert_intermediate_size * (weight_bits + scale_bits / group_size) / 8 / 1e6",
        "MB", *(shape[k] for k in ("hidden_size", "expert_intermediate_size", "weight_bits", "scale_bits",
                                   "group_size")),
    )  # fmt: skip
    layers = derive("MoE layers", "layers - dense_layers", "count", shape["layers"], shape["dense_layers"])
    if not model.curve_includes_shared_expert:
        return layers, expert, None
    shared = derive(
        "shared MB", "shared_experts * 3 * hidden_size * expert_intermediate_size * 2 / 1e6", "MB",
        *(shape[k] for k in ("shared_experts", "hidden_size", "expert_intermediate_size")),
    )  # fmt: skip
    return layers, expert, shared


class RooflinePoint(NamedTuple):
    """One curve point against the reference GPU's peak bandwidth."""

    m: int
    ms: float
    basis: str
    distinct_experts: float
    bytes_per_gpu: float
    peak_ms: float  # the read at 100% of the reference bandwidth
    efficiency: float  # peak_ms / ms; above 1 is impossible
    figures: tuple[Figure, ...]  # the read, the peak read and the efficiency; derivation() gives what they rest on


CURVES_HELD = 64  # rooflines, and curves' warnings, the caches hold: a grid's inner sweep of this many values


@functools.lru_cache(maxsize=CURVES_HELD)  # keyed without the target: a sweep of its bandwidth finds it here
def roofline(reference: Gpu, model: ModelGeometry, curve: MoeCurve) -> tuple[RooflinePoint, ...]:
    """For every curve point: the bytes it must read, and the share of peak bandwidth its time implies."""
    return tuple(_roofline_point(reference, model, curve.tp, p) for p in curve.points)


@functools.lru_cache(maxsize=2048)  # a sweep of one point's time reads the other 999 again
def _roofline_point(reference: Gpu, model: ModelGeometry, tp: int, p: CurvePoint) -> RooflinePoint:
    read, peak_bandwidth = moe_gb_per_gpu(model, tp, p.m), bandwidth(reference, "reference")
    peak = derive(f"peak read({p.m})", f"{read.name} / reference bandwidth", "ms", read, peak_bandwidth)
    efficiency = derive(f"efficiency({p.m})", f"peak read({p.m}) / curve({p.m})", "%", peak, point_figure(p))
    distinct, figures = distinct_experts(model, p.m).value, (read, peak, efficiency)
    return RooflinePoint(p.m, p.ms, p.basis, distinct, read.value * 1e9, peak.value, efficiency.value, figures)


# --- The whole estimate ---


class Estimate(NamedTuple):
    calibration: Calibration
    decomposition: Decomposition
    scenarios: tuple[Scenario, ...]
    break_even: tuple[BreakEven, ...]
    roofline: tuple[RooflinePoint, ...] | None  # None without a `model` section
    experts_fit: ExpertsFit | None  # when the curve is read through the experts fit


def estimate(cal: Calibration) -> Estimate:
    """The decomposition, every scenario, the break-even accept lengths and the physical cross-check."""
    dec = decompose(cal)
    rows = scenarios(cal)
    experts = fit_experts(cal.moe_curve.points, cal.model) if cal.moe_curve.fit == "experts" and cal.model else None
    roof = roofline(cal.hardware.reference, cal.model, cal.moe_curve) if cal.model else None
    return Estimate(cal, dec, rows, break_even(cal, dec, rows), roof, experts)


# --- How a formula runs: its text, compiled once, and the figures a figure rests on ---


_COMPILED: dict[str, Callable[[tuple[Figure, ...]], float]] = {}  # formula text -> the function it spells
_SHAPES: dict[str, Callable[[tuple[float, ...]], Callable[[tuple[Figure, ...]], float]]] = {}  # -> its maker
NUMBER = r"(?<![\w.\[])\d+(?:\.\d+)?(?:e[+-]?\d+)?(?![\w.\]])"  # a number in a formula's code, not v[0]


def _compile(formula: str, inputs: tuple[Figure, ...]) -> Callable[[tuple[Figure, ...]], float]:
    """'AR step - MoE(1)' -> lambda v: v[0].value - v[1].value. The cache is keyed by the text alone: a formula's
    text is written at one place, and so always comes with the same inputs in the same order.

    Formulas that differ only in their names and numbers (peak read(9) and peak read(33); E * (1 - (1 - k / E)^9)
    and ^33) share one shape of code, compiled once, each made from it with its own numbers: a curve of 1,000
    points, or a fit over many trees, has thousands of formulas and few shapes, and _SHAPES is never cleared.
    """
    shape, numbers = formula_shape(formula, inputs)
    if len(_COMPILED) > 4096:  # formulas that name an M (curve(33)) are many in a sweep of budgets
        _COMPILED.clear()
    make = _SHAPES.get(shape) or _SHAPES.setdefault(shape, eval(f"lambda c: lambda v: {shape}", {"__builtins__": {}}))
    compute = _COMPILED[formula] = make(numbers)  # the shape's maker, given this formula's numbers
    return compute


def formula_shape(formula: str, inputs: tuple[Figure, ...]) -> tuple[str, tuple[float, ...]]:
    """A formula as code over its inputs v and its numbers c, and the numbers, each as its literal would be.

    >>> formula_shape("E * (1 - (1 - k / E)^9)", (given("E", 384), given("k", 8)))
    ('v[0].value * (c[0] - (c[1] - v[1].value / v[0].value)**c[2])', (1, 1, 9))
    """
    index = {f.name: i for i, f in enumerate(inputs)}
    code = replace_names(formula, index, lambda name: f"v[{index[name]}].value").replace("^", "**")
    numbers: list[float] = []

    def numbered(number: re.Match[str]) -> str:
        numbers.append(int(number[0]) if number[0].isdigit() else float(number[0]))
        return f"c[{len(numbers) - 1}]"

    return re.sub(NUMBER, numbered, code), tuple(numbers)


def replace_names(formula: str, names: Iterable[str], by: Callable[[str], str]) -> str:
    """The formula with each name that stands as a whole word replaced; a longer name goes first.

    >>> replace_names("DDTree step - step", ["step", "DDTree step"], str.upper)
    'DDTREE STEP - STEP'
    >>> replace_names("a.step + step_ms + step2 + step", ["step"], str.upper)
    'a.step + step_ms + step2 + STEP'
    """
    spans: list[tuple[int, int, str]] = []  # (start, end, name), none overlapping another
    for name in sorted(names, key=len, reverse=True):
        start = formula.find(name)
        while start >= 0:
            end = start + len(name)
            if (
                not _in_word(formula, start - 1) and not _in_word(formula, end)
                and not any(s < end and start < e for s, e, _ in spans)
            ):  # fmt: skip
                spans.append((start, end, name))
            start = formula.find(name, start + 1)
    out, i = [], 0
    for start, end, name in sorted(spans):
        out += [formula[i:start], by(name)]
        i = end
    return "".join([*out, formula[i:]])


def _in_word(text: str, k: int) -> bool:
    """Whether the character at k (if any) would continue a name: a letter, a digit, _ or ."""
    return 0 <= k < len(text) and (text[k].isalnum() or text[k] in "_.")


def derivation(*figures: Figure, found: dict[int, Figure] | None = None) -> list[Figure]:
    """Every computed figure the given ones rest on, each once, in the order they were computed."""
    found = {} if found is None else found
    for figure in figures:
        if figure.formula and id(figure) not in found:
            derivation(*figure.inputs, found=found)
            found[id(figure)] = figure
    return list(found.values())


# === Loading and validating the calibration ===

# --- Text as errors and output show it: escapes, a value quoted, the digits that tell a value from a bound ---


def printable(text: str) -> str:
    r"""Text with the characters that can steer a terminal or break a line escaped: controls, line and
    paragraph separators, bidirectional overrides and isolates, lone surrogates. Spaces, joiners and
    the rest of Unicode stay as they are.

    The loader passes every text of the calibration here as it reads it, so a name or a label stays on
    its line in every format, JSON included; the renderers pass what they print here too.

    >>> printable("B300\x1b[31m\n\ud800"), printable("Smith et al.\u202f2025")
    ('B300\\x1b[31m\\n\\ud800', 'Smith et al.\u202f2025')
    """
    if text.isprintable():
        return text
    import unicodedata

    def steers(ch: str) -> bool:
        bidi = "\u202a" <= ch <= "\u202e" or "\u2066" <= ch <= "\u2069" or ch in "\u200e\u200f\u061c"
        return bidi or unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp")

    return "".join(_escaped(ch) if steers(ch) else ch for ch in text)


BLANK = "\u115f\u1160\u3164\uffa0\u2800\u17b4\u17b5"  # show nothing: Hangul fillers, empty braille, Khmer


def visible(text: str) -> str:
    r"""Text with every character that does not show escaped as printable() escapes: what printable() escapes,
    the spaces other than " ", the format characters, private code points, noncharacters, blank fillers, a mark
    on nothing or on ASCII punctuation, a joiner that does not stand between two characters that show (not ASCII
    ones), and the tags of a flag after anything but its black flag. A mark or a variation selector on what
    shows, joined letters and an emoji built of several characters stay. Errors and warnings are read to find
    what is wrong, not copied back.

    >>> print(visible("overhead_cut\u200b: got B\u00a0300\n"), visible("中文 👨\u200d👩 1\ufe0f\u20e3"))
    overhead_cut\u200b: got B\xa0300\n 中文 👨‍👩 1️⃣
    >>> visible("\u3164 \u0301 e\u0301 cut\u200d X\U000e0041") == "\\u3164 \\u0301 e\u0301 cut\\u200d X\\U000e0041"
    True
    """
    if text.isascii() and text.isprintable():
        return text
    import unicodedata

    out, base = [], ""  # what the marks after it build on: "" (nothing that shows), "flag", or a character's category
    for i, ch in enumerate(text):
        category = unicodedata.category(ch)
        if "\U000e0020" <= ch <= "\U000e007f":  # the tags that make a black flag a region's flag
            hidden = base != "flag"
        elif ch in "\u200c\u200d":  # a joiner: of the letters of a script that joins them, or of an emoji's parts
            before, after = text[i - 1 : i], text[i + 1 : i + 2]  # neither of them ASCII, which joins nothing
            hidden = not base or before.isascii() or after.isascii() or not _shows(after, unicodedata.category(after))
        elif category[0] == "M":  # a mark, a variation selector, the grapheme joiner
            hidden = not base or ch in BLANK
        else:  # not all of Cn: an emoji newer than Python's Unicode tables is unassigned in them; a noncharacter
            never = "\ufdd0" <= ch <= "\ufdef" or ord(ch) & 0xFFFE == 0xFFFE  # is never assigned
            hidden = ch in BLANK or never or (category in ("Cc", "Cf", "Co", "Cs", "Zl", "Zp", "Zs") and ch != " ")
            builds_on = _shows(ch, category) and (ch.isalnum() or not ch.isascii())  # not on "=" or ":" in a message
            base = ("flag" if ch == "\U0001f3f4" else category) if builds_on else ""
        out.append(_escaped(ch) if hidden else ch)
    return "".join(out)


def _escaped(ch: str) -> str:
    return ch.encode("unicode_escape").decode("ascii")


def _shows(ch: str, category: str) -> bool:
    """Whether a character of this Unicode category shows: a letter, digit, punctuation or symbol, not a filler."""
    return category[0] in "LNPS" and ch not in BLANK


def shows_something(text: str) -> bool:
    r"""Whether a text has a character that shows: a letter, digit, punctuation or symbol. Spaces,
    zero-width and direction marks, marks that combine with nothing and blank fillers do not.

    >>> shows_something("B300"), shows_something(" \t\u2028"), shows_something("\u200b\u200f\u0301\u3164")
    (True, False, False)
    """
    if text.isascii():
        return any("!" <= ch <= "~" for ch in text)
    import unicodedata

    return any(_shows(ch, unicodedata.category(ch)) for ch in text)


def documents(key: str) -> bool:
    """Whether a key holds text that documents a value: `source`, `note`, `<key>_source` or `<key>_note`."""
    return key in ("source", "note") or key.endswith(("_source", "_note"))


def _describe(value: object) -> str:
    """A value as an error message shows it: 40 -> '40', "8" -> 'a string "8"', [1] -> 'a list [1]'."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**15:
        try:
            return f"an integer of {len(str(abs(value))):,} digits"
        except ValueError:  # more digits than Python turns into text
            return f"an integer of more than {sys.get_int_max_str_digits():,} digits"
    if isinstance(value, Unheld):
        return value.written
    if isinstance(value, list | dict) and (unheld := _unheld_in(value)):  # JSON would show it as Infinity
        return f"{_kind(value)} holding {unheld.written}"
    if isinstance(value, float) and math.isfinite(value):
        text = f"{value + 0.0:.15g}"  # 40.0 -> '40', 0.1 -> '0.1', -0.0 -> '0'
        exact = float(text) == value and len(text) <= len(repr(value))  # 1e-320, not 9.99988867182683e-321
        return text if exact else repr(value)  # 0.9999999999999999, not 1, below a bound of 1
    try:
        text = json_shown(value)
    except (RecursionError, ValueError):  # nested deeper than the stack allows
        return _kind(value) + " nested too deep to show"
    if len(text) > 40:  # cut, and an escape the cut split left out whole: not "\u0...
        text = re.sub(r"(?<!\\)((?:\\\\)*)\\(?:u[0-9a-fA-F]{0,3})?$", r"\1", text[:37]) + "..."
    return f"{_kind(value)} {text}" if isinstance(value, (str, list, dict)) else text


def _unheld_in(value: object) -> "Unheld | None":
    """A number no float holds, anywhere in a list or an object (walked without recursion), or None."""
    stack = [value]
    while stack:
        if isinstance(item := stack.pop(), Unheld):
            return item
        stack.extend(item if isinstance(item, list) else item.values() if isinstance(item, dict) else ())
    return None


def _apart(value: float, other: float, least: int = 6) -> str:
    """A value to `least` significant digits, or to as many more as tell it from another: 504.999991 beside
    504.99999, not 505."""
    for digits in range(least, 17):
        if f"{value:.{digits}g}" != f"{other:.{digits}g}" or value == other:
            return f"{value:.{digits}g}"
    return repr(value)


def _against(value: float, low: float, high: float, domain: Domain | None) -> tuple[str, str, str]:
    """A value and the ends of its range, to 6 significant digits or to as many more as keep the value inside or
    outside the ends as printed, as it is, each on its side of its domain's ends: 0.2000003 outside 0.2000004 to
    0.6, not 0.2 to 0.6; 0.999999907 outside 0.2 to 0.6 in a domain below 1, not 1; an end of 0.9999999 too.

    >>> _against(0.2000003, 0.2000004, 0.6, None), _against(0.3, 0.2, 0.6, None)
    (('0.2000003', '0.2000004', '0.6'), ('0.3', '0.2', '0.6'))
    """
    inside, numbers = low <= value <= high, (value, low, high)
    for digits in (6, 9, 12):
        texts = (f"{value:.{digits}g}", f"{low:.{digits}g}", f"{high:.{digits}g}")
        shown, lo, hi = map(float, texts)
        sides = domain is None or all(
            (float(t) in domain) == (n in domain) for t, n in zip(texts, numbers, strict=True)
        )
        if (lo <= shown <= hi) == inside and sides:
            return texts
    return repr(value), repr(low), repr(high)


def rounded_down(bound: float) -> str:
    """An upper bound to 4 significant digits, rounded down (in decimal, from the bound as repr writes it): a
    value below the text is below the bound.

    >>> rounded_down(3864.7343), rounded_down(0.25879), rounded_down(0.35), rounded_down(0.009252999999999999)
    ('3864', '0.2587', '0.35', '0.009252')
    """
    import decimal

    exact = decimal.Decimal(repr(bound))
    return f"{float(exact.quantize(decimal.Decimal(1).scaleb(exact.adjusted() - 3), decimal.ROUND_FLOOR)):.4g}"


def json_shown(value: object) -> str:
    r"""JSON as a message or a table shows it: a letter of any script as it is, a character that does not show
    (a control, a space other than " ", a joiner, a lone surrogate) as JSON escapes it.

    >>> print(json_shown(["B300 中文", "\u00a0133\n"]))
    ["B300 中文", "\u00a0133\n"]
    """
    text = json.dumps(value, allow_nan=True, ensure_ascii=False)
    return text if text.isprintable() else "".join(c if c.isprintable() else json.dumps(c)[1:-1] for c in text)


def _kind(value: object) -> str:
    """The JSON type of a value: True -> 'true/false'."""
    if isinstance(value, bool) or value is None:
        return "true/false" if value is not None else "null"
    if isinstance(value, (int, float, str)):
        return "a string" if isinstance(value, str) else "a number"
    return "a list" if isinstance(value, list) else "an object"


def _unknown(key: str, candidates: Iterable[str], fallback: str, prefix: str = "") -> str:
    """The one hint for a key that is not there: 'did you mean PREFIX + the nearest?', else the fallback. A key
    that is the nearest but for white space, which reads alike in the message, is told so."""
    near = _closest(key, candidates)
    space = ", without the white space" if near and near == "".join(key.split()) else ""
    return f"did you mean {prefix}{near}{space}?" if near else fallback


def _closest(word: str, candidates: Iterable[str]) -> str | None:
    import difflib  # only on the error path

    near = difflib.get_close_matches(word, list(itertools.islice(candidates, MAX_HINTED)), n=1, cutoff=0.5)
    return near[0] if near else None


# --- The assumptions: the numbers --fit, --solve and `ranges` may vary ---


NOT_ASSUMED = ("ranges.", "measurements")  # numbers that are not the model's assumptions: see `assumptions`


def assumptions(domains: dict[str, Domain]) -> list[str]:
    """The numbers that --fit, --solve and `ranges` may vary: continuous ones, not in `ranges` or `measurements`."""
    return [path for path, domain in domains.items() if not domain.integer and not path.startswith(NOT_ASSUMED)]


SCENARIO_ACCEPTS = "stronger_drafter.accept"  # the list of accept lengths the stronger drafter's scenarios are at


def scenario_accept(key: str, domains: dict[str, Domain]) -> bool:
    """Whether a key path is the stronger drafter's accept list or one of its accept lengths."""
    return key == SCENARIO_ACCEPTS or (key in domains and key.startswith(f"{SCENARIO_ACCEPTS}["))


def not_an_assumption(key: str, domains: dict[str, Domain], varied_by: str) -> str | None:
    """Why --fit, --solve or a range (`varied_by`) may not vary a key, or None when it is one of `assumptions`."""
    if key in domains and domains[key].integer:
        return f"is a whole number; {varied_by} needs a continuous one"
    if key.startswith("ranges.") or (key in domains and key.startswith(NOT_ASSUMED)):  # ranges' are read last
        section = "measurements" if key.startswith("measurements") else "ranges"
        return f"is in `{section}`, not an assumption of the model; expected e.g. native_engine.overhead_cut"
    fitted = varied_by.startswith("--")  # --fit or --solve: their measurements keep their own accept lengths
    if fitted and scenario_accept(key, domains):
        return (
            f"{'holds' if key == SCENARIO_ACCEPTS else 'is one of'} the accept lengths of the stronger drafter's "
            "scenarios; a measurement keeps the accept length it was measured at, whatever the list holds, so no "
            "prediction depends on it: expected an assumption the step rests on"
        )  # fmt: skip
    if key in domains:
        return None
    inside = [  # in a list or an object: the numbers of it that may be varied
        name for name in assumptions(domains)
        if name.startswith((f"{key}[", f"{key}.")) and not (fitted and name.startswith(f"{SCENARIO_ACCEPTS}["))
    ]  # fmt: skip
    if inside:
        if len(inside) == 1:
            return f"holds one number {varied_by} may vary; expected its key path, {inside[0]}"
        shown = ", ".join(inside[:3]) + (", ..." if len(inside) > 3 else "")
        return f"holds {len(inside)} numbers {varied_by} may vary ({shown}); expected the key path of one of them"
    hint = _unknown(key, assumptions(domains), "expected the key path of a number, e.g. native_engine.overhead_cut")
    return f"not a number of the calibration ({hint})"


# --- Reading: each section checked value by value, every error naming its key path ---


def _number(value: object, path: str, domain: Domain = POSITIVE) -> float:
    """A finite JSON number in its domain, as a float (a whole number, when the domain says so)."""
    if isinstance(value, Unheld):
        raise CalibrationError(path, value.problem)
    if domain.integer and isinstance(value, float) and value.is_integer():
        value = int(value)  # 16.0 passes as 16; 16.5, true and "16" do not
    if isinstance(value, bool) or not isinstance(value, int if domain.integer else (int, float)):
        raise CalibrationError(path, f"got {_describe(value)}; expected {domain.describe()}{_as_json(value, domain)}")
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an integer past the float range
        finite = False
    if not finite and not domain.integer:
        raise CalibrationError(
            path, f"got {_describe(value)}; expected a finite {domain.describe().removeprefix('a ')}"
        )
    if value not in domain:
        raise CalibrationError(path, f"got {_describe(value)}; expected {domain.describe()}")
    return value if domain.integer else float(value)


def _as_json(value: object, domain: Domain) -> str:
    """How JSON writes a text that reads as a number of the domain: '.3' typed, "0.3" quoted in the file.

    >>> _as_json(".3", Domain(0, 1, low_open=False)), _as_json("B300", POSITIVE)
    (' (as JSON writes it: 0.3)', '')
    """
    try:
        number = float(value) if isinstance(value, str) else math.nan
    except ValueError:
        return ""
    if domain.integer and number.is_integer():
        number = int(number)
    elif domain.integer:
        return ""
    return f" (as JSON writes it: {_describe(number)})" if number in domain and math.isfinite(number) else ""


def _accept(value: object, path: str, block: int, budget: int) -> float:
    """A mean accept length: at least 1, at most the smaller of block + 1 (the tree's depth) and budget + 1."""
    limit, bound = accept_limit(block, budget)
    if isinstance(value, str):  # refused, with how JSON writes it if the tree allows that length
        _number(value, path, ACCEPT._replace(high=limit, high_open=False))
    accept = _number(value, path, ACCEPT)
    if accept > limit:
        raise CalibrationError(
            path, f"{_describe(value)} exceeds the tree's limit {bound} (the smaller of block+1 and budget+1); "
            f"expected an accept length of at most {limit}",
        )  # fmt: skip
    return accept


_REQUIRED = object()


class _Reader:
    """One JSON object under validation.

    It knows its key path and records every key asked for; `finish()` rejects any other
    key but the documentation keys (`source` and `note` anywhere, `<key>_source` and
    `<key>_note` beside a known key). `domains`, when given, collects every number's domain.
    """

    def __init__(self, data: object, path: str, domains: dict[str, Domain] | None, root: object = None) -> None:
        if not isinstance(data, dict):
            raise CalibrationError(path or "(top level)", f"got {_kind(data)}; expected an object")
        self.data: dict[str, object] = data
        self.path, self.domains = path, domains
        self.root = data if root is None else root  # the whole document: ranges read values in force from it
        self.known: dict[str, None] = {}  # the keys asked for, in order
        for key, value in data.items():
            if len(key) > MAX_TEXT:
                message = f"has a key of {len(key):,} characters ({_describe(key)}); expected at most {MAX_TEXT:,}"
                raise CalibrationError(path or "(top level)", message)
            if isinstance(value, str) and len(value) > MAX_TEXT:
                raise self.error(key, f"has {len(value):,} characters; expected at most {MAX_TEXT:,}")

    def at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: str, message: str) -> CalibrationError:
        return CalibrationError(self.at(key), message)

    def raw(self, key: str, expected: "str | Domain", default: object = _REQUIRED) -> object:
        self.known[key] = None
        if key in self.data or default is not _REQUIRED:
            return self.data.get(key, default)
        typo = _closest(key, [k for k in self.data if k not in self.known])
        expected = expected if isinstance(expected, str) else expected.describe()  # worded only when missing
        raise self.error(
            key, f"missing; expected {expected}" + (f" (is {self.at(typo)} a misspelling of it?)" if typo else "")
        )

    def child(self, key: str) -> "_Reader":
        return _Reader(self.raw(key, "an object"), self.at(key), self.domains, self.root)

    def element(self, path: str, item: object) -> "_Reader":
        return _Reader(item, path, self.domains, self.root)

    def number(self, key: str, domain: Domain = POSITIVE) -> float:
        value, path = self.raw(key, domain), self.at(key)
        if self.domains is not None:
            self.domains[path] = domain
        return _number(value, path, domain)

    def count(self, key: str, low: int = 1) -> int:
        return int(self.number(key, COUNT if low == 1 else COUNT._replace(low=low)))  # a curve of 1,000: shared

    def accept(self, path: str, value: object, block: int, budget: int) -> float:
        if self.domains is not None:
            self.domains[path] = ACCEPT._replace(high=accept_limit(block, budget)[0], high_open=False)
        return _accept(value, path, block, budget)

    def flag(self, key: str, default: bool) -> bool:
        value = self.raw(key, "true or false", default)
        if not isinstance(value, bool):
            raise self.error(key, f"got {_describe(value)}; expected true or false")
        return value

    def string(self, key: str, choices: tuple[str, ...] = (), default: object = _REQUIRED) -> str:
        expected = f"one of {', '.join(choices)}" if choices else "a string"
        value = self.raw(key, expected, default)
        if not isinstance(value, str) or (choices and value not in choices):
            raise self.error(key, f"got {_describe(value)}; expected {expected}")
        if key in self.data and not shows_something(value):  # before escaping: "\n" is no name either
            raise self.error(key, "is blank; expected a text with at least one visible character")
        return printable(value)

    def items(self, key: str, most: int, fewest: int = 1, default: object = _REQUIRED) -> list[object]:
        value = self.raw(key, "a list", default)
        if not isinstance(value, list):
            raise self.error(key, f"got {_kind(value)}; expected a list")
        if not fewest <= len(value) <= most:
            raise self.error(key, f"has {plural(len(value), 'entry', 'entries')}; expected {fewest} to {most:,}")
        return value

    def finish(self) -> None:
        for key, value in self.data.items():
            documentation = documents(key) and (key in ("source", "note") or key.rpartition("_")[0] in self.known)
            if documentation and not isinstance(value, str):
                raise self.error(key, f"got {_kind(value)}; expected a string (documentation)")
            if not documentation and key not in self.known:
                hint = _unknown(key, self.known, "known keys: " + ", ".join(self.known), prefix=self.at(""))
                raise self.error(key, f"unknown key ({hint})")


def _read_hardware(hw: _Reader) -> Hardware:
    gpus = []
    for role in ("reference", "target"):
        gpu = hw.child(role)
        gpus.append(Gpu(gpu.string("name"), gpu.number("mem_bandwidth_tb_s")))
        gpu.finish()
    return Hardware(*gpus)


def _read_model(section: _Reader) -> ModelGeometry:
    """The optional `model` section, checked field by field and across fields."""
    may_be_zero = ("dense_layers", "shared_experts")
    counts = {key: section.count(key, 0 if key in may_be_zero else 1) for key in ModelGeometry._fields[:-1]}
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
    return model


def _read_curve(curve: _Reader) -> MoeCurve:
    tp, points, seen = curve.count("tp"), [], set()
    for i, item in enumerate(curve.items("points", fewest=2, most=MAX_ITEMS["points"])):
        point = _read_point(curve, i, item)
        if point.m in seen:
            raise CalibrationError(f"{curve.at('points')}[{i}].m", f"M = {point.m} appears twice; expected each M once")
        seen.add(point.m)
        points.append(point)
    return MoeCurve(tp, CurvePoints(sorted(points)), curve.string("fit", CURVE_FITS, "linear"))


POINT_KEYS = ("m", "ms", "basis")  # a curve point's keys in the file


def _read_point(curve: _Reader, position: int, item: object) -> CurvePoint:
    point = curve.element(f"{curve.at('points')}[{position}]", item)
    read = CurvePoint(point.count("m"), point.number("ms"), point.string("basis", POINT_BASES, "measured"), position)
    point.finish()
    return read


def _reread_points(curve: _Reader, before: MoeCurve, positions: set[int]) -> MoeCurve | None:
    """`before` with some points read again: a point whose M is the same keeps its place, else the points are
    sorted again. None when a point is wrong or shares its M with another, for a full read to tell the error
    that a full read tells first."""
    items, batches = curve.items("points", fewest=2, most=MAX_ITEMS["points"]), before.points.batches
    try:
        points = [_read_point(curve, i, items[i]) for i in sorted(positions)]
    except CalibrationError:
        return None
    replaced = list(before.points)
    for point in points:
        at = bisect.bisect_left(batches, point.m)
        if at == len(batches) or (batches[at], before.points[at].position) != (point.m, point.position):
            break  # its M changed
        replaced[at] = point
    else:
        new = CurvePoints(replaced)
        vars(new)["batches"] = batches  # every M where it was: the cached property's value carries over
        return before._replace(points=new)
    moved = sorted([*(p for p in before.points if p.position not in positions), *points])
    if any(a.m == b.m for a, b in itertools.pairwise(moved)):
        return None
    return before._replace(points=CurvePoints(moved))


def _read_anchors(anchors: _Reader) -> Anchors:
    ar_tok_s, dd = anchors.number("ar_tok_s"), anchors.child("ddtree")
    block, budget = dd.count("block"), dd.count("budget")
    accept = dd.accept(dd.at("accept"), dd.raw("accept", ACCEPT.describe()), block, budget)
    ddtree = DdtreeAnchor(block, budget, accept, dd.number("tok_s"))
    dd.finish()
    measured_on = anchors.string("measured_on", default="") or None
    key = ANCHORS_BANDWIDTH.removeprefix("anchors.")
    if key not in anchors.data:
        anchors.known[key] = None  # for the hint that names an unknown key
        return Anchors(ar_tok_s, ddtree, measured_on)
    if measured_on is None:
        raise anchors.error(key, "is the bandwidth of the GPU the anchors were measured on; expected measured_on too")
    return Anchors(ar_tok_s, ddtree, measured_on, Gpu(measured_on, anchors.number(key)))


def _read_sglang(section: _Reader) -> SglangPipeline:
    """The optional `sglang` section: the largest budget the SGLang pipeline can verify, and why (its source)."""
    return SglangPipeline(section.count("max_budget"), section.string("max_budget_source", default=""))


def _read_native_engine(native: _Reader) -> NativeEngine:
    return NativeEngine(native.number("overhead_cut", Domain(0.0, 1.0, low_open=False)))  # none of it, up to all


def _read_stronger_drafter(sd: _Reader) -> StrongerDrafter:
    block, budget = sd.count("block"), sd.count("budget")
    accepts: list[float] = []
    shown: dict[str, int] = {}  # each as the scenarios' labels and the tables' columns give it -> its index
    for i, value in enumerate(sd.items("accept", most=MAX_ITEMS["accept"])):
        accepts.append(sd.accept(f"{sd.at('accept')}[{i}]", value, block, budget))
        if (text := f"{accepts[-1]:g}") in shown:
            first = shown[text]
            clash = "appears twice" if accepts[first] == accepts[-1] else f"reads {text}, as accept[{first}] does"
            raise sd.error(f"accept[{i}]", f"{_describe(value)} {clash}; expected each accept length once, distinct "
                                           "in its first 6 digits")  # fmt: skip
        shown[text] = i
    return StrongerDrafter(block, budget, tuple(accepts), sd.number("attn_base_scale"), sd.number("spec_scale"))


def _read_measurements(top: _Reader) -> tuple[Measurement, ...]:
    """The optional `measurements` list; an accept length is checked against its tree in _checked()."""
    found = []
    for i, item in enumerate(top.items("measurements", fewest=0, most=MAX_MEASUREMENTS, default=[])):
        entry = top.element(f"measurements[{i}]", item)
        autoregressive = entry.string("decode", ("ddtree", "autoregressive"), "ddtree") == "autoregressive"
        if autoregressive and (
            tree := next((k for k in ("drafter", "block", "budget", "accept") if k in entry.data), None)
        ):
            raise entry.error(tree, f'an autoregressive run has no {tree}; expected it only with "decode": "ddtree"')
        drafter = None if autoregressive else entry.string("drafter", DRAFTERS)
        pipeline = entry.string("pipeline", PIPELINES)
        block, budget = (entry.count(key) if key in entry.data else None for key in ("block", "budget"))
        accept = None if autoregressive else entry.number("accept", ACCEPT)
        tok_s = entry.number("tok_s", THROUGHPUT)
        shape = ", ".join(f"{key} {size}" for key, size in (("block", block), ("budget", budget)) if size is not None)
        default_label = f"AR/{pipeline}" if autoregressive else f"{drafter}/{pipeline}@{accept:g}"
        default_label += f" ({shape})" if shape else ""  # two budgets at one accept length: two labels
        label = entry.string("label", default=default_label)
        entry.known |= dict.fromkeys(("block", "budget", "source"))  # for the hint that names an unknown key
        source = entry.data.get("source", "")
        entry.finish()
        found.append(
            Measurement(label, drafter, pipeline, block, budget, accept, tok_s, printable(str(source)), entry.path)
        )
    return tuple(found)


def _read_ranges(section: _Reader) -> tuple[Range, ...]:
    """The optional `ranges` section: {path: {low, high} or {relative}, each with a source}.

    A relative range is taken around the value in force (after --set, --fit or --solve): 0.03 around
    ar_tok_s = 133 gives 129.01 to 136.99. A fixed range's ends must lie in its number's domain; a
    relative one's move with the value, and an end the calibration cannot take costs the band, which
    is where it is found (an error with --sensitivity).
    """
    domains = section.domains or {}
    ranges = []
    keys = [key for key in section.data if not documents(key)]
    if len(keys) > MAX_RANGES:
        message = f"has {len(keys)} ranges; expected at most {MAX_RANGES} (the band tries every combination of ends)"
        raise CalibrationError(section.path, message)
    for key in keys:
        if why := not_an_assumption(key, domains, "a range"):  # as --fit and --solve say of it
            raise section.error(key, why)
        entry, domain = section.child(key), domains[key]
        if "relative" in entry.data and (both := [end for end in ("low", "high") if end in entry.data]):
            raise entry.error(both[0], "a range is {low, high} or {relative}, not both; expected one of the two")
        if "relative" in entry.data:
            relative = entry.number("relative", Domain(0.0, 1.0, high_open=False))
            value = number_at(section.root, parse_path(key))
            low, high = sorted((value * (1 - relative), value * (1 + relative)))
        else:
            low, high = entry.number("low", ANY_NUMBER), entry.number("high", ANY_NUMBER)
            if low > high:
                raise entry.error(
                    "high", f"got {_apart(high, low)}, below low = {_apart(low, high)}; expected low <= high"
                )
            for end, given_as in ((low, "low"), (high, "high")):
                if end not in domain:
                    reaches = _apart(end, domain.high if end > domain.high else domain.low)  # 17.0000001, not 17
                    raise entry.error(
                        given_as, f"the range reaches {reaches}; expected {domain.describe()}, as for {key} itself"
                    )
        ranges.append(Range(key, low, high, entry.string("source")))
        entry.finish()
    return tuple(ranges)


# Each top-level section, its reader and what the reader is handed, in the order they are read: `ranges` last,
# since its ends are checked against the domains of every number before it. A sweep re-reads only the sections it
# changes. An optional section that is absent reads as None; `measurements`, a list, is read from the top level.
# A reader reads the keys it knows; _read_section() then rejects any other key of the section, with finish().
SECTIONS: dict[str, tuple[Callable[[Any], object], str]] = {
    "hardware": (_read_hardware, "object"),
    "model": (_read_model, "optional"),
    "moe_curve": (_read_curve, "object"),
    "anchors": (_read_anchors, "object"),
    "native_engine": (_read_native_engine, "object"),
    "sglang": (_read_sglang, "optional"),
    "stronger_drafter": (_read_stronger_drafter, "object"),
    "measurements": (_read_measurements, "top"),
    "ranges": (_read_ranges, "optional"),
}

# The sections that give a tree's block and budget, and those whose accept lengths a tree limits: reading one of
# them again checks again the measurements' accept lengths and the ranges on accept lengths.
TREE_SECTIONS = frozenset(("anchors", "stronger_drafter", "measurements"))


def parse_calibration(data: object) -> Calibration:
    """Validate a decoded calibration document and build its records; the first problem raises CalibrationError."""
    domains: dict[str, Domain] = {}
    top = _Reader(data, "", domains)
    version = top.raw("schema_version", f"the number {SCHEMA_VERSION}")
    if isinstance(version, bool) or version != SCHEMA_VERSION:
        raise top.error("schema_version", f"got {_describe(version)}; this tool reads schema {SCHEMA_VERSION}")
    sections = {key: _read_section(top, key) for key in SECTIONS}
    top.finish()
    return _checked(Calibration(**sections, domains=domains), SECTIONS.keys())  # type: ignore[arg-type]


def reread(
    cal: Calibration, doc: object, changed: Iterable[PathSegments], reshaped: Sequence[Change] = ()
) -> Calibration:
    """The calibration with the sections of the changed key paths read again from doc, the others taken over.

    What --sweep, --sensitivity, --fit and --solve do at each of their points. A change inside
    curve points re-reads those points alone (a curve may have 1,000). A change that may add or
    remove numbers (a list, an object or null) is `reshaped` too, with the value it replaced: the
    numbers of that value leave the domains, the sections read again record those there now, and a
    range at or inside it is read again.
    """
    changed = list(changed)
    if not (heads := {path[0] for path in changed}) <= SECTIONS.keys():
        return parse_calibration(doc)  # a key outside every section: the full read names it
    on_accept = heads & TREE_SECTIONS and cal.ranges and any("accept" in p for p in _range_paths(cal.ranges))
    if on_accept and not _values_only(cal, changed):
        heads.add("ranges")  # a range's ends on an accept length, checked again against its tree's new limit
    domains = None  # every number's domain, which a range's key is checked against
    if reshaped or "ranges" in heads:
        domains = dict(cal.domains)
        for path, before in reshaped:  # its numbers go; the sections read again record those there now
            for key in _paths_in(before, format_path(path)):
                domains.pop(key, None)
            if any(at_or_inside(ranged, path) for ranged in _range_paths(cal.ranges or ())):
                heads.add("ranges")
    top = _Reader(doc, "", domains)
    in_curve = [path for path in changed if path[0] == "moe_curve"]
    in_points = [path for path in in_curve if len(path) == 4 and path[1] == "points" and path[3] in POINT_KEYS]
    points, points_only = {int(path[2]) for path in in_points}, len(in_points) == len(in_curve)
    read: dict[str, object] = {}
    for key in [key for key in SECTIONS if key in heads]:  # in a full read's order: it tells the error --set tells
        if key == "moe_curve" and points_only and (curve := _reread_points(top.child(key), cal.moe_curve, points)):
            read[key] = curve
        else:
            read[key] = _read_section(top, key)
    found = cal._replace(**read, domains=cal.domains if domains is None else domains)  # type: ignore[arg-type]
    return _checked(found, read.keys())


@functools.lru_cache(maxsize=64)  # a sweep or a fit re-reads a tree at every point or trial, the ranges the same
def _range_paths(ranges: tuple[Range, ...]) -> tuple[PathSegments, ...]:
    """The key path of each range, split."""
    return tuple(parse_path(r.path) for r in ranges)


def _values_only(cal: Calibration, changed: Iterable[PathSegments]) -> bool:
    """Whether every change is to a continuous number the calibration has: no list, block or budget changes, and
    so no tree's limit on an accept length, nor the numbers a range may name (a fit's trials, the band's corners)."""
    domains = [cal.domains.get(format_path(path)) for path in changed]
    return all(domain is not None and not domain.integer for domain in domains)


def _read_section(top: _Reader, key: str) -> object:
    """A section read by its reader; None for an optional section that is absent."""
    read, handed = SECTIONS[key]
    if handed == "top":
        return read(top)
    if handed == "optional" and key not in top.data:  # null is there, and not an object
        top.raw(key, "an object", None)  # a known key even when absent: `<key>_source` may document its absence
        return None
    section = top.child(key)
    value = read(section)
    section.finish()
    return value


def _checked(cal: Calibration, read: Container[str]) -> Calibration:
    """The checks across sections; the measurements' accept lengths only when a section they read was just `read`
    (a fit's trial of a curve point re-reads that alone, and there may be 100 measurements)."""
    if cal.moe_curve.fit == "experts" and cal.model is None:
        raise CalibrationError(
            "moe_curve.fit", '"experts" counts distinct experts; expected a `model` section beside it'
        )
    if cal.sglang and cal.anchors.ddtree.budget > cal.sglang.max_budget:
        raise CalibrationError(
            "sglang.max_budget", f"got {cal.sglang.max_budget}, but the DDTree anchor was measured on SGLang at budget "
            f"{cal.anchors.ddtree.budget}; expected at least {cal.anchors.ddtree.budget}",
        )  # fmt: skip
    for m in cal.measurements if any(key in read for key in TREE_SECTIONS) else ():
        block, budget = tree_shape(cal, m)
        if m.accept is not None and not m.accept <= accept_limit(block, budget)[0]:
            _accept(m.accept, m.origin_of("accept"), block, budget)  # the error, naming the limit
    return cal


def read_document(path: str) -> tuple[object, str]:
    """Read and decode a calibration file: (document, the first 12 hex digits of its SHA-256).

    Opened without blocking (a pipe with no writer reads as empty), read only up to its size limit
    (/dev/zero ends there) and for at most MAX_READ_SECONDS (a pipe whose writer never ends is an error).
    A key given twice in one object is an error naming its path.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            raw = _read_bounded(fd)
        finally:
            os.close(fd)
    except FileNotFoundError:
        stdin = " (standard input is /dev/stdin)" if str(path) == "-" else ""
        raise CalibrationError("", f"no such file; expected a calibration JSON file{stdin}") from None
    except IsADirectoryError:
        raise CalibrationError("", "is a directory; expected a calibration JSON file") from None
    except OSError as exc:
        raise CalibrationError("", f"cannot be read ({exc.strerror}); expected a readable file") from None
    if len(raw) > MAX_FILE_BYTES:
        raise CalibrationError("", f"is larger than {MAX_FILE_BYTES >> 20} MiB; expected a calibration file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CalibrationError("", f"byte {exc.start} is not UTF-8; expected a UTF-8 JSON file") from None
    if not text.strip():
        raise CalibrationError("", "is empty; expected a JSON object")
    twice: list[tuple[dict[str, object], str]] = []  # (an object with a key twice, the first key met again)

    def object_of(pairs: list[tuple[str, object]]) -> dict[str, object]:
        obj = dict(pairs)
        if len(obj) < len(pairs):
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    twice.append((obj, key))
                    break
                seen.add(key)
        return obj

    try:
        doc = json.loads(text, object_pairs_hook=object_of, parse_float=file_float, parse_int=file_int)
    except json.JSONDecodeError as exc:
        raise CalibrationError(
            "", f"line {exc.lineno} column {exc.colno}: not valid JSON ({exc.msg}); expected a JSON object"
        ) from None
    except RecursionError:
        raise CalibrationError("", "nests too deep to decode; expected a calibration JSON object") from None
    if twice:  # one inside a value that a later copy of its key replaced is not in the document: not that one
        key_of = {id(obj): key for obj, key in twice}
        segments, obj = _first_object(doc, key_of)
        where = format_path((*segments, key_of[id(obj)]))
        raise CalibrationError(where, "appears twice in its object; expected each key once (the later one would win)")
    return doc, hashlib.sha256(raw).hexdigest()[:12]


def json_float(text: str) -> float:
    """A JSON number with a fraction or an exponent, as a float: one past what a float holds is an error that
    names it as written, not the Infinity or the 0 it would read as (1e-400 would pass for a cut of 0)."""
    value = float(text)
    if math.isinf(value) or (value == 0 and text.lower().partition("e")[0].strip("-0.")):
        size, read = ("too small", "0") if value == 0 else ("too large", f"{'-' if value < 0 else ''}Infinity")
        raise CalibrationError(
            "", f"{shortened(text)} is {size} for a float and would read as {read}; expected a number of sensible size"
        )
    return value + 0.0  # -0.0 + 0.0 is 0.0: a -0 shows as 0


class Unheld(float):
    """A number of the calibration file that no float holds, or an integer of more digits than Python reads:
    the error, kept for the loader to raise where it reads the number, so that the error names its key path."""

    written: str  # as the file has it: 1e-400; or what it is: an integer of more than 4,300 digits
    problem: str  # the error


def file_float(text: str) -> float:
    """json_float for the file: a number no float holds becomes an Unheld (its value the 0 or Infinity it reads
    as)."""
    try:
        return json_float(text)
    except CalibrationError as exc:
        return _unheld(text, text, exc.message)


def file_int(text: str) -> int | float:
    """An integer of the file, or an Unheld where it has more digits than Python turns into a number."""
    try:
        return json_int(text)
    except CalibrationError as exc:
        return _unheld(text, exc.message.partition(";")[0], exc.message)


def json_int(text: str) -> int:
    """A JSON integer, refused before it is read where it has more digits than Python reads (or than it reads by
    default, where PYTHONINTMAXSTRDIGITS=0 lifts the limit: reading a million digits takes seconds)."""
    limit = sys.get_int_max_str_digits() or sys.int_info.default_max_str_digits
    if len(text) - text.startswith("-") > limit:
        raise CalibrationError("", f"an integer of more than {limit:,} digits; expected a number of sensible size")
    return int(text)


def _unheld(text: str, written: str, problem: str) -> Unheld:
    unheld = Unheld(text)
    unheld.written, unheld.problem = written, problem
    return unheld


def _read_bounded(fd: int) -> bytes:
    """Up to MAX_FILE_BYTES + 1 bytes, to the end of the file or MAX_READ_SECONDS, whichever comes first.

    A named pipe that no writer has opened yet reads as ended; it is waited on, as a pipe with nothing to read
    yet is, until a writer opens it (and writes, or closes it: then it has ended).
    """
    import stat

    chunks: list[bytes] = []
    size, deadline, waiting = 0, time.monotonic() + MAX_READ_SECONDS, None
    unopened = stat.S_ISFIFO(os.fstat(fd).st_mode)  # a named pipe that no writer may have opened yet
    late = CalibrationError(
        "", f"did not end within {MAX_READ_SECONDS} s; expected a file, or a pipe whose writer finishes"
    )
    while size <= MAX_FILE_BYTES:
        if time.monotonic() > deadline:  # a writer that trickles
            raise late
        try:
            chunk: bytes | None = os.read(fd, MAX_FILE_BYTES + 1 - size)
        except BlockingIOError:  # a pipe or terminal with nothing to read yet
            chunk = None
        if chunk is None or (not chunk and unopened and not size):
            if waiting is None:
                import select

                waiting = select.poll()  # not select.select, which takes no descriptor past 1023
                waiting.register(fd, select.POLLIN)
            if not waiting.poll(max(deadline - time.monotonic(), 0) * 1000):
                raise late from None
            unopened = False  # a writer has come: data, or its end
            continue
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _first_object(doc: object, wanted: Container[int]) -> tuple[PathSegments, object]:
    """The key path of the first object in the document whose id is wanted, and the object: inner ones first,
    as they were read. Depth first without recursion, stopping there: a file may nest 900 deep."""
    path: list[str | int] = []
    stack: list[tuple[object, Iterator[tuple[str | int, object]]]] = [(doc, _children(doc))]
    while stack:
        node, children = stack[-1]
        for key, child in children:
            if isinstance(child, dict | list):
                path.append(key)
                stack.append((child, _children(child)))
                break
        else:
            stack.pop()
            if id(node) in wanted:
                return tuple(path), node
            if path:
                path.pop()
    raise ValueError("no wanted object in the document")  # the outermost object with a key twice is in it


def _children(node: object) -> Iterator[tuple[str | int, object]]:
    return iter(node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ())


def _paths_in(value: object, path: str) -> Iterator[str]:
    """The key paths of a value at `path` and of everything inside it, as the domains name them."""
    yield path
    for key, child in _children(value):
        yield from _paths_in(child, f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}")


def default_calibration_path() -> str:
    """The calibration.json beside this script, else the one `pip install .` put in <prefix>/share/estimate-b300."""
    try:
        here = os.path.join(os.path.dirname(os.path.realpath(__file__)), "calibration.json")
    except OSError:  # a working directory that no longer exists
        here = os.path.join(os.path.dirname(__file__), "calibration.json")
    if os.path.exists(here):
        return here
    import site

    for base in (sys.prefix, site.USER_BASE or ""):
        installed = os.path.join(base, "share", "estimate-b300", "calibration.json")
        if os.path.exists(installed):
            return installed
    return here  # missing: reading it reports the path that was expected


def display_name(path: str) -> str:
    """How a file is named in messages: relative to the working directory when below it."""
    try:
        relative = os.path.relpath(path)
    except (OSError, ValueError):  # a working directory that no longer exists
        return path
    return path if relative.startswith(os.pardir) else relative


# --- Key paths: how --set, --sweep, --solve and `ranges` name a value ---


def parse_path(text: str) -> PathSegments:
    """Split a key path: 'moe_curve.points[1].ms' -> ('moe_curve', 'points', 1, 'ms')."""
    if text.count(".") + text.count("[") >= MAX_PATH:
        raise CalibrationError(
            text[:60] + "...", f"a key path of more than {MAX_PATH} parts; expected one into the calibration"
        )
    segments: list[str | int] = []
    start = 0  # where the part starts in the text
    for part in text.split("."):
        name, *indices = part.split("[")
        if name:
            segments.append(name)
        elif not indices or not segments:
            raise CalibrationError(text, "expected a key path such as native_engine.overhead_cut")
        opens = start + len(name)  # where the index's "[" is
        for index in indices:
            digits = index[:-1]
            if not index.endswith("]") or not (digits.isascii() and digits.isdigit() and len(digits) <= 9):
                # as typed: up to the next "[", or past its "]" to the end of the part, a "." inside it kept: [1.5]x
                found = re.match(r"\[[^][]*(?:\][^[.]*)?", text[opens:])
                typed = found[0] if found else text[opens:]
                raise CalibrationError(text, f"bad index {shortened(typed)}; expected [N] with a whole number N")
            segments.append(int(digits))
            opens += len(index) + 1
        start += len(part) + 1
    return tuple(segments)


def at_or_inside(path: PathSegments, outer: PathSegments) -> bool:
    """Whether a key path names the value at another or one inside it: ('a', 'b', 0) at or inside ('a', 'b')."""
    return path[: len(outer)] == outer


def format_path(segments: PathSegments) -> str:
    """The inverse of parse_path: ('a', 'b', 0) -> 'a.b[0]'."""
    text = ""
    for segment in segments:
        text += f"[{segment}]" if isinstance(segment, int) else (f".{segment}" if text else segment)
    return text


def key_text(segments: PathSegments) -> str:
    """A key path as a message names it: shortened past 80 characters, as everything a message echoes."""
    return shortened(format_path(segments))


def _descend(node: object, segments: PathSegments, i: int) -> tuple[str | int, int]:
    """The key at segments[i] within node, and the index after it.

    A key may itself hold dots (the keys of `ranges` are key paths): the longest run of
    segments that names an existing key wins.
    """
    if isinstance(node, dict) and isinstance(segments[i], str):
        for j in range(len(segments), i + 1, -1):
            if (joined := format_path(segments[i:j])) in node:  # 'moe_curve.points[1].ms' is one key of ranges
                return joined, j
        if segments[:1] == ("ranges",) and i == 1 and documents(str(segments[-1])):  # a new note beside a range
            return format_path(segments[i:]), len(segments)
    return segments[i], i + 1


def get_path(doc: object, segments: PathSegments) -> object:
    """The value at a key path; CalibrationError when there is none."""
    node, i = doc, 0
    while i < len(segments):
        key, i = _descend(node, segments, i)
        in_list = isinstance(node, list) and isinstance(key, int) and key < len(node)
        if in_list or (isinstance(node, dict) and key in node):
            node = node[key]  # type: ignore[index]
        else:
            raise CalibrationError(format_path(segments), "no such key in the calibration")
    return node


def number_at(doc: object, segments: PathSegments) -> float:
    """The number at a key path of a document whose numbers were validated."""
    value = get_path(doc, segments)
    assert isinstance(value, (int, float)), f"{format_path(segments)} is not a number"
    return float(value)


def set_path(doc: object, segments: PathSegments, value: object, i: int = 0) -> object:
    """A copy of doc with the value at a key path replaced; only the objects along the path are copied.

    Missing object keys are created (validation then names any that are unknown); list indices must exist.
    """
    if i == len(segments):
        return value
    key, after = _descend(doc, segments, i)
    if isinstance(key, int):
        where = format_path(segments[:after])
        if not isinstance(doc, list):
            raise CalibrationError(where, f"the value there is {_kind(doc)}, not a list")
        if key >= len(doc):
            raise CalibrationError(
                where, f"the list has {plural(len(doc), 'entry', 'entries')}; expected an index below {len(doc)}"
            )
        return [*doc[:key], set_path(doc[key], segments, value, after), *doc[key + 1 :]]
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise CalibrationError(
            format_path(segments[:i]), f"is {_kind(doc)}, not an object with key {shortened(repr(key))}"
        )
    if key not in doc and after < len(segments) and segments[0] == "ranges" and i == 1:  # in no range that is there
        raise CalibrationError(  # a range's key is a key path, so the whole path would name the range
            format_path(segments), "no such range in the calibration; a new range goes in with --set 'ranges={...}'"
        )
    if key not in doc and after < len(segments) and isinstance(segments[after], int):  # no list to take [N] from
        lists = [k for k, v in doc.items() if isinstance(v, list)][:64]  # the nearest of them, if few: a hint
        hint = _unknown(key, lists, "expected a key that holds a list", format_path(segments[:i]) + "." * bool(i))
        raise CalibrationError(format_path(segments[:after]), f"unknown key ({hint})")
    return {**doc, key: set_path(doc.get(key), segments, value, after)}


# === The analyses: overrides, work spread over the CPUs, sweeps, sensitivity, the fit and solving, warnings ===


def recalibrate(doc: object, cal: Calibration, changes: Sequence[Change]) -> tuple[object, Calibration]:
    """The document and calibration with some values changed, checked again where they changed (see reread):
    a list, an object or null may add or remove keys that `ranges` name."""
    reshaped = []
    for path, value in changes:
        if value is None or isinstance(value, (list, dict)):
            try:
                reshaped.append((path, get_path(doc, path)))
            except CalibrationError:  # a key the document did not have: no number left with it
                reshaped.append((path, None))
        doc = set_path(doc, path, value)
    return doc, reread(cal, doc, [path for path, _ in changes], reshaped)


class Override(NamedTuple):
    text: str  # as given: "native_engine.overhead_cut=0.3"
    path: PathSegments
    value: object


def parse_assignment(text: str) -> tuple[PathSegments, str]:
    """'KEY.PATH=VALUE' -> (segments, 'VALUE')."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise CalibrationError("", "expected KEY.PATH=VALUE, e.g. native_engine.overhead_cut=0.3")
    return parse_path(key), value


@contextlib.contextmanager
def naming(option: str, text: str) -> Iterator[None]:
    """A CalibrationError raised inside names the option at fault (a long one shortened)."""
    try:
        yield
    except CalibrationError as exc:
        exc.file = f"{option} {shortened(text)}"
        raise


def shortened(text: str) -> str:
    """A text as a message echoes it (a value typed, a key path): at most 80 characters, both ends kept."""
    return text if len(text) <= 80 else f"{text[:50]}...{text[-27:]}"


def plural(count: int, noun: str, nouns: str = "") -> str:
    """A count and its noun: '1 point', '1,000 points', '2 entries' (nouns given)."""
    return f"{count:,} {noun if count == 1 else nouns or noun + 's'}"


def parse_value(text: str, within: int = 0) -> object:
    """A --set value: JSON when it parses ('0.3', '[10,12]', 'true'), else the plain string ('B200'); `within`
    lists that are not part of a value hold it (a --sweep's list of values)."""
    too_deep = CalibrationError("", f"a value nested more than {MAX_NESTING} deep; expected a calibration value")
    try:
        value = json.loads(text, object_pairs_hook=_each_key_once, parse_float=json_float, parse_int=json_int)
    except json.JSONDecodeError:  # not JSON: a plain string (a hook's CalibrationError is no JSONDecodeError)
        return text
    except RecursionError:
        raise too_deep from None
    level, depth = [value], 0  # the lists and objects around the deepest value, counted without recursion
    while (level := [v for v in level if isinstance(v, dict | list)]) and depth <= MAX_NESTING + within:
        level = [c for v in level for c in (v.values() if isinstance(v, dict) else v)]
        depth += 1
    if depth > MAX_NESTING + within:
        raise too_deep
    return value


def _each_key_once(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """An object of a value on the command line, whose keys must differ, as in the file."""
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            message = "appears twice in an object; expected each key once (the later one would win)"
            raise CalibrationError("", f"{shortened(json_shown(key))} {message}")
        seen.add(key)
    return dict(pairs)


def parse_override(text: str) -> Override:
    with naming("--set", text):
        path, value = parse_assignment(text)
        return Override(text, path, parse_value(value))


class ScenarioSpec(NamedTuple):
    """A scenario named on the command line: 'stronger/native@14'; accept None means the default.

    With autoregressive=True (--measured) the drafter may also be "ar": 'ar/native', an AR run.
    """

    drafter: str
    pipeline: str
    accept: float | None

    @staticmethod
    def parse(option: str, text: str, autoregressive: bool = False) -> "ScenarioSpec":
        head, at, accept_text = text.partition("@")
        drafter, _, pipeline = head.partition("/")
        known = (*DRAFTERS, "ar") if autoregressive else DRAFTERS
        drafter = "ar" if autoregressive and drafter == "AR" else drafter  # as a measurement's label spells it
        bad = functools.partial(CalibrationError, "", file=f"{option} {shortened(text)}")
        shown = shortened(accept_text)  # as messages echo it; the number is read from the whole text
        if drafter == "ar" and at and autoregressive:
            raise bad("an autoregressive run takes no @ACCEPT: it commits one token a step; expected e.g. ar/native")
        if drafter not in known or pipeline not in PIPELINES:
            also = ", or ar/PIPELINE for an autoregressive run" if autoregressive else ""
            raise bad(
                f"expected DRAFTER/PIPELINE[@ACCEPT] with DRAFTER in {', '.join(DRAFTERS)} and PIPELINE in "
                f"{', '.join(PIPELINES)}, e.g. stronger/native@14{also}"
            )
        accept = None
        if at and not accept_text:
            raise bad("nothing after @; expected an accept length, e.g. @14")
        if accept_text:
            with naming(option, text):
                number, accept = parse_value(accept_text), math.nan  # JSON, as every number on the command line
            if isinstance(number, (int, float)) and not isinstance(number, bool) and abs(number) < MAX_FIGURE:
                accept = float(number)
            if not math.isfinite(accept):
                tree = "; a run of another block or budget goes in the file's `measurements`"
                tree = tree if autoregressive and re.search(r"(?i)block|budget|^b\d", accept_text) else ""
                raise bad(f"@{shown}: expected an accept length, e.g. @14{_as_json(number, ACCEPT)}{tree}")
            if accept < 1:
                raise bad(f"@{shown}: got {_describe(number)}; expected {ACCEPT.describe()}")
        return ScenarioSpec(drafter, pipeline, accept)


class Throughput(NamedTuple):
    """A throughput named on the command line (--observed, --measured) for a scenario."""

    spec: ScenarioSpec
    tok_s: float
    text: str  # as typed, for messages: 'current/native@4.4=463'


def scenario_for(cal: Calibration, spec: ScenarioSpec, option: str, place: int | None = None) -> Scenario:
    """The one scenario a spec names; by default at the median accept of its drafter (the lower middle one).

    `place` pins the default to a place in the accept list: where the median was before a range moved it.
    """
    drafter = drafter_named(cal, spec.drafter)
    if spec.accept is None:
        accept = drafter.accepts[median_place(drafter) if place is None else place]
    else:
        typed = f"@{_describe(spec.accept)}"  # as typed, not rounded: @9.0000001 is past a limit of 9
        with naming(option, f"{spec.drafter}/{spec.pipeline}{typed}"):
            accept = given("accept", _accept(spec.accept, typed, drafter.block, drafter.budget), "tokens")
    return drafter_on(cal, drafter, spec.pipeline, (accept,))[0]


def median_place(drafter: Drafter) -> int:
    """Where in the drafter's accept list its median accept length is (the lower middle one)."""
    order = sorted(range(len(drafter.accepts)), key=lambda i: drafter.accepts[i].value)
    return order[(len(order) - 1) // 2]


# --- Work spread over the CPUs: large sweeps, the band, a solve's scan, the leave-one-out refits of a large fit ---


MAX_WORKERS = 8  # forked processes at most, each a copy of the interpreter (measured here on 2 CPUs only)


def over_cpus(tasks: Sequence[Callable[[], T]], min_tasks: int = 2) -> Generator[T, None, None]:
    """Each task's result, in order; with at least `min_tasks` tasks and more than one CPU, forked
    workers compute them.

    Worker w of n does tasks w, w + n, ... and sends each result back pickled through its own pipe,
    whose buffer holds it back once full: memory stays flat. A task that a worker does not send
    back (an error, a worker killed, no worker started) is done here, so it fails here as it would
    alone. A task done here runs without the garbage collector, as in a worker (see _start_worker).
    """
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    workers = min(len(tasks), cpus, MAX_WORKERS) if hasattr(os, "fork") and len(tasks) >= min_tasks else 1
    if workers < 2:
        yield from map(_uncollected, tasks)
        return
    import pickle
    import signal

    started: list[tuple[int, BinaryIO] | None] = []  # each worker's pid and the pipe it writes to
    try:
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # until each worker is listed: a Ctrl-C
        try:  # between a fork and the list would leave that worker to run on, as `finally` ends the listed ones
            for w in range(workers):
                started.append(_start_worker(tasks[w::workers], started))
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        for i, task in enumerate(tasks):
            worker = started[i % workers]
            data = _received(worker[1]) if worker else None
            yield _uncollected(task) if data is None else pickle.loads(data)
    finally:
        for pid, pipe in filter(None, started):
            pipe.close()
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)  # a worker still at work is not needed any more
                os.waitpid(pid, 0)


def over_cpus_in_chunks(work: Callable[[Sequence[Item]], list[T]], items: Sequence[Item], size: int) -> list[T]:
    """work() over the items, `size` at a time, each chunk a task for over_cpus: the results in order."""
    chunks = [items[i : i + size] for i in range(0, len(items), size)]
    return list(itertools.chain.from_iterable(over_cpus([functools.partial(work, chunk) for chunk in chunks])))


def _uncollected(task: Callable[[], T]) -> T:
    """task(), with the garbage collector paused while it runs (if it was on), as a worker runs it."""
    if not gc.isenabled():
        return task()
    gc.disable()
    try:
        return task()
    finally:
        gc.enable()


def _start_worker(
    tasks: Sequence[Callable[[], object]], started: Sequence[tuple[int, BinaryIO] | None]
) -> tuple[int, BinaryIO] | None:
    """Fork a worker for `tasks`: its pid and the pipe it sends their results through; None if it cannot.

    The worker runs without the garbage collector. A sweep's work makes no reference cycles (a test holds it
    to that), so the collector's passes over the records each point makes find nothing: see Speed in the
    README for what that saves. A fit's refits are bounded by their budget, and whatever cycles they leave
    go when the worker ends.
    """
    try:
        fd_in, fd_out = os.pipe()
    except OSError:  # no file descriptor left
        return None
    try:
        pid = os.fork()
    except OSError:  # no process left
        os.close(fd_in)
        os.close(fd_out)
        return None
    if pid == 0:  # the worker, which never returns; a task that fails ends it, and the parent does that task
        try:
            import pickle
            import signal

            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # held while the parent forked it
            _silence(2)  # whatever it would say (a warning, an error), the parent says if it matters
            gc.disable()  # see the docstring
            os.close(fd_in)
            for worker in filter(None, started):
                worker[1].close()
            with os.fdopen(fd_out, "wb") as out:
                for task in tasks:  # each result pickled, its size first
                    data = pickle.dumps(task(), pickle.HIGHEST_PROTOCOL)
                    out.write(len(data).to_bytes(8, "little"))
                    out.write(data)
                    out.flush()
        finally:  # whatever happened, even Ctrl-C: not through the interpreter's exit, which would flush
            os._exit(0)  # the buffers that the parent holds too
    os.close(fd_out)
    return pid, os.fdopen(fd_in, "rb")


def _received(pipe: BinaryIO) -> bytes | None:
    """The next result a worker sent, or None when it stopped short of it."""
    head = pipe.read(8)
    if len(head) < 8:
        return None
    size = int.from_bytes(head, "little")
    data = pipe.read(size)
    return data if len(data) == size else None


# --- Sweeps ---


SWEEP_CHUNK = 8000  # scenarios a worker estimates at a time (1,000 points of 8): a 3 MB piece of JSON
SWEEP_HELD = 32 * 2**20  # bytes of checked points held, compressed: 100,000 points of 319 (the default: ~135)


class Sweep(NamedTuple):
    text: str
    path: PathSegments
    values: tuple[object, ...]
    typed: tuple[str, ...]  # each value of a list as typed, for messages; () for a range, whose values are its own


class SweepPoint(NamedTuple):
    values: tuple[tuple[str, object], ...]  # (key path, value) for each --sweep
    scenarios: tuple[Scenario, ...]  # in a point the check held, without their derivation (`figures` empty)


def parse_sweep(text: str) -> Sweep:
    """'PATH=V1,V2,...' (each value JSON, else a string) or 'PATH=START:STOP:STEP'.

    A range is computed in decimal on the numbers as written, so its values are exactly those
    a person would write: START, START + STEP, ... up to STOP (included when a step lands on it).

    >>> parse_sweep("a=0.2:0.6:0.1").values, parse_sweep("stronger_drafter.budget=16:64:16").values
    ((0.2, 0.3, 0.4, 0.5, 0.6), (16, 32, 48, 64))
    """
    with naming("--sweep", text):
        path, spec = parse_assignment(text)
        parts = spec.split(":")
        is_range = len(parts) == 3 and "," not in spec and not spec.lstrip().startswith('"')  # "a:b:c" is a text
        values, typed = _range(*parts) if is_range else _list(spec)
        if not values:
            raise CalibrationError("", "expected V1,V2,... or START:STOP:STEP")
        return Sweep(text, path, values, typed)


# A number as JSON writes it, or as .2 or 2., with the white space JSON allows around it: Decimal also takes 1_6,
# the digits of other scripts and Unicode spaces, which --set does not. Compiled where first used (0.5 ms).
DECIMAL = r"[ \t\n\r]*[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?[ \t\n\r]*"  # one way to match: linear


def _range(*parts: str) -> tuple[tuple[object, ...], tuple[str, ...]]:
    import decimal

    if not all(re.fullmatch(DECIMAL, part) for part in parts):
        raise CalibrationError(
            "", "expected START:STOP:STEP with three finite decimal numbers in digits 0-9, e.g. 0.2:0.6:0.1"
        )
    # Exact: a sum or a product that would round (1e-999999999 + 0.1, or 29 digits at decimal's usual 28) raises
    exact_context = decimal.Context(prec=200, Emin=decimal.MIN_EMIN, Emax=decimal.MAX_EMAX, traps=[
        decimal.Inexact, decimal.InvalidOperation, decimal.DivisionByZero, decimal.Overflow])  # fmt: skip
    try:
        start, stop, step_size = [decimal.Decimal(part) for part in parts]
        whole = all(part.strip().lstrip("+-").isdigit() for part in parts)  # 16:64:16 gives 16, not 16.0
        if not whole and not all(math.isfinite(float(number)) for number in (start, stop, step_size)):
            raise CalibrationError("", "expected START:STOP:STEP with numbers of sensible size")  # 1e400: Infinity
        for number, part, what in zip((start, stop, step_size), parts, ("a value", "a stop", "a step"), strict=True):
            if not whole and number and not float(number):  # 1e-400: 0, as a float
                raise CalibrationError("", f"{what} of {shortened(part.strip())} is too small for a float and would "
                                           "read as 0; expected numbers of sensible size")  # fmt: skip
        with decimal.localcontext(exact_context) as context:
            context.traps[decimal.Inexact] = False  # the steps, rounded: a count past the limit needs no more
            steps = ((stop - start) / step_size).to_integral_value(decimal.ROUND_FLOOR) if step_size else -1
            if steps < 0:
                typed = [shortened(part) for part in parts]
                raise CalibrationError("", f"a step of {typed[2]} never goes from {typed[0]} to {typed[1]}")
            if (values := steps + 1) <= MAX_SWEEP_POINTS + 1:  # the last that does not pass STOP, exactly: not 0.3
                context.traps[decimal.Inexact] = True  # for 0:0.29...9 (29 9s):0.1, at decimal's usual 28 digits
                span = stop - start
                while steps > 0 and (span - steps * step_size) * step_size < 0:
                    steps -= 1
                while (span - (steps + 1) * step_size) * step_size >= 0:
                    steps += 1
                values = steps + 1
            if values > MAX_SWEEP_POINTS:  # a Decimal: 1e400 steps stay cheap
                count = f"{int(values):,}" if values < 10**12 else f"about {values:.2e}"
                raise CalibrationError("", f"{count} values; expected at most {MAX_SWEEP_POINTS:,}")
            exact = [start + i * step_size for i in range(int(steps) + 1)]
    except decimal.Inexact:  # 1e-300 + 0.1 is 301 digits
        raise CalibrationError(
            "", "values of more than 200 digits; expected START:STOP:STEP whose values hold in 200"
        ) from None
    except decimal.DecimalException:  # past the exponents decimal holds: 1e1000000
        raise CalibrationError("", "expected START:STOP:STEP with numbers of sensible size") from None
    swept = tuple(int(v) if whole else float(v) + 0.0 for v in exact)  # + 0.0: -0 is 0
    if lost := next((v for v, f in zip(exact, swept, strict=True) if v and not f), None):  # 1e-400 as 0
        shown = shortened(format(lost, "g"))
        raise CalibrationError("", f"a value of {shown} is too small for a float and would read as 0; expected "
                                   "numbers of sensible size")  # fmt: skip
    return swept, ()


def _list(spec: str) -> tuple[tuple[object, ...], tuple[str, ...]]:
    """The values of V1,V2,... and each as typed: JSON as a whole, else each item JSON or a string."""
    whole = parse_value(f"[{spec}]", within=1)
    if whole == []:  # no value at all: parse_sweep says so
        return (), ()
    items = _items(spec)
    if isinstance(whole, list):
        values = tuple(whole)
    else:  # not JSON as a whole: each item on its own, a string if not JSON
        if empty := [i for i, item in enumerate(items, 1) if not item.strip()]:
            raise CalibrationError("", f"item {empty[0]} of {len(items)} is empty; expected a value between the commas")
        values = tuple(map(parse_value, items))  # JSON with the white space JSON allows around it, else the item
    return values, tuple(v if v == item else item.strip(" \t\n\r") for v, item in zip(values, items, strict=True))


def _items(spec: str) -> list[str]:
    """V1,V2,... split at its commas, but for those inside an item that is a JSON string, list or object:
    '"x,y",[1, 2],z' is three items. Any other item runs to the next comma, as --set reads it: '5",B200' is two."""
    if not any(mark in spec for mark in '"[{'):
        return spec.split(",")
    items, at = [], 0
    while True:
        first = _past_blank(spec, at)
        end = _json_item_end(spec, first) if spec[first : first + 1] in ('"', "[", "{") else -1
        if end < 0:
            end = spec.find(",", at)
            end = len(spec) if end < 0 else end
        items.append(spec[at:end])
        if end == len(spec):
            return items
        at = end + 1


def _json_item_end(spec: str, first: int) -> int:
    """Where the JSON value that opens at `first` ends, with the white space after it, when the list's next comma
    or its end follows; else -1 (not JSON, or more text after it)."""
    try:
        end = json.JSONDecoder().raw_decode(spec, first)[1]
    except (ValueError, RecursionError):
        return -1
    end = _past_blank(spec, end)
    return end if end == len(spec) or spec[end] == "," else -1


def _past_blank(spec: str, at: int) -> int:
    """Where the white space JSON allows, from `at` on, ends."""
    while at < len(spec) and spec[at] in " \t\n\r":
        at += 1
    return at


class SweepRow(NamedTuple):
    """What a sweep's table shows of one point: its values, and each scenario's step and throughput."""

    values: tuple[tuple[str, object], ...]
    names: tuple[tuple[str, str, str], ...]  # each scenario's drafter, pipeline and label
    # each scenario's step_ms, moe_extrapolated, tok_s and not_runnable_reason
    numbers: tuple[tuple[float, bool, float, str | None], ...]


def sweep_row(point: SweepPoint, before: SweepRow | None = None) -> SweepRow:
    """The row of a point; its names are the row before's when they are equal, so held once."""
    names = tuple((r.drafter, r.pipeline, r.label) for r in point.scenarios)
    names = before.names if before and before.names == names else names
    numbers = tuple((r.step_ms, r.moe_extrapolated, r.tok_s, r.not_runnable_reason) for r in point.scenarios)
    return SweepRow(point.values, names, numbers)


class SweepPlan(NamedTuple):
    """A sweep whose every point has been checked, so that a bad one is an error before any output.

    The check also holds what the output reads of each point: a table's rows, or else the points
    without their scenarios' derivations. It holds them chunk by chunk, pickled and compressed, up to
    SWEEP_HELD bytes in all, and the output reads them back; a point not held is estimated again. So
    each point of the usual sweeps is estimated once, and a sweep of any size runs in bounded memory.
    """

    sweeps: tuple[Sweep, ...]
    doc: object
    calibration: Calibration
    label: str  # how errors name the calibration
    size: int  # the number of points
    chunk: int  # points a worker estimates at a time: SWEEP_CHUNK scenarios, for the most a point may have
    table: bool  # the output is a table: the check holds its rows, not the points
    warnings: tuple[str, ...] = ()  # over every point, each kind once with the number of points it holds at
    extrapolated: tuple[int, ...] = ()  # every M read outside the curve at some point
    cannot_run: tuple[tuple[str, int], ...] = ()  # for a table: why a pipeline cannot run a tree, at how many points
    names: tuple[tuple[str, str, str], ...] = ()  # for a table: every scenario of some point (drafter, pipeline, label)
    held: tuple[bytes | None, ...] = ()  # what the output reads of each chunk; None past SWEEP_HELD

    def in_chunks(self, work: Callable[[Iterator[SweepPoint], int], T]) -> Iterator[T]:
        """work(points, index of the first), chunk by chunk in order, on every CPU (see over_cpus)."""
        return over_cpus([functools.partial(work, self._points(i), i) for i in range(0, self.size, self.chunk)])

    def rows(self) -> Iterator[SweepRow]:
        """What a table shows of every point: as the check held it for a table, else made again."""
        for start in range(0, self.size, self.chunk):
            held = self._held(start) if self.table else None
            yield from map(sweep_row, self._points(start)) if held is None else _unpacked(held)

    def _points(self, start: int) -> Iterator[SweepPoint]:
        """The chunk of points from `start`: as the check held them, else estimated again."""
        held = None if self.table else self._held(start)
        if held is None:
            yield from (point for _, point in self.estimated(start))
        else:
            made: dict[int, Scenario] = {}  # a scenario that points share, made once: JSON and CSV encode it once
            for values, rows in _unpacked(held):
                scenarios = [made.get(id(r)) or made.setdefault(id(r), Scenario._make((*r, {}))) for r in rows]
                yield SweepPoint(values, tuple(scenarios))

    def _held(self, start: int) -> bytes | None:
        return self.held[start // self.chunk] if self.held else None

    def estimated(self, start: int) -> Iterator[tuple[Calibration, SweepPoint]]:
        """The chunk of points from `start`, estimated: each point's calibration and its scenarios."""
        names = [format_path(s.path) for s in self.sweeps]
        combos = itertools.product(*(s.values for s in self.sweeps))
        for i, combo in enumerate(itertools.islice(combos, start, start + self.chunk), start):
            values = tuple(zip(names, combo, strict=True))
            try:
                changes = [(s.path, v) for s, v in zip(self.sweeps, combo, strict=True)]
                cal = recalibrate(self.doc, self.calibration, changes)[1]
                yield cal, SweepPoint(values, scenarios(cal))
            except CalibrationError as exc:
                exc.file = f"{self.label} at --sweep {self.point_text(i)}"
                raise

    def point_text(self, index: int) -> str:
        """The point at `index` as it was typed: "native_engine.overhead_cut=1e400", not =Infinity."""
        typed = []
        for sweep in reversed(self.sweeps):  # the last sweep varies fastest, as in itertools.product
            index, at = divmod(index, len(sweep.values))
            text = sweep.typed[at] if sweep.typed else _swept_text(sweep.values[at])
            typed.append(shortened(f"{format_path(sweep.path)}={text}"))
        return ", ".join(reversed(typed))


def plan_sweep(doc: object, cal: Calibration, sweeps: Sequence[Sweep], label: str, table: bool = False) -> SweepPlan:
    """Estimate every point once, so that a bad one is an error before anything is printed; gather warnings;
    hold what the output reads of each point (a table's rows if `table`), up to SWEEP_HELD bytes."""
    count = math.prod(len(s.values) for s in sweeps)
    most = most_scenarios(cal, sweeps)
    if count > MAX_SWEEP_POINTS or count * most > MAX_SWEEP_SCENARIOS:
        raise CalibrationError(
            "", f"the grid has {count:,} points of up to {most} scenarios, {count * most:,} in all; expected at most "
            f"{MAX_SWEEP_POINTS:,} points and {MAX_SWEEP_SCENARIOS:,} scenarios", file="--sweep",
        )  # fmt: skip
    curve, times = curve_rereads(cal, sweeps)
    if curve * times > MAX_SWEEP_CURVE_READS:
        raise CalibrationError(
            "", f"the physical cross-check would read all {curve:,} curve points again {times:,} times, "
            f"{curve * times:,} in all; expected at most {MAX_SWEEP_CURVE_READS:,}: fewer values, or fewer curve "
            "points", file="--sweep",
        )  # fmt: skip
    plan = SweepPlan(tuple(sweeps), doc, cal, label, count, max(1, SWEEP_CHUNK // most), table)
    seen: dict[str, tuple[int, str, str]] = {}  # kind -> (points, the first point's values, its message)
    extrapolated: set[int] = set()
    cannot: collections.Counter[str] = collections.Counter()  # in the order first met
    names: dict[tuple[str, str, str], None] = {}  # in the order first met
    held: list[bytes | None] = []
    size = 0
    checks = [functools.partial(_check_chunk, plan, start) for start in range(0, count, plan.chunk)]
    for found, ms, reasons, met, packed in over_cpus(checks):
        for kind, (n, at, first) in found.items():
            before, at, first = seen.get(kind, (0, at, first))
            seen[kind] = (before + n, at, first)
        extrapolated |= ms
        cannot.update(reasons)
        names.update(met)
        size += len(packed)
        held.append(packed if size <= SWEEP_HELD else None)
    points = plural(count, "sweep point")
    warnings = [f"at {n:,} of {points} (the first at {at}): {first}" for n, at, first in seen.values()]
    return plan._replace(
        warnings=tuple(warnings), extrapolated=tuple(sorted(extrapolated)), cannot_run=tuple(cannot.items()),
        names=tuple(names), held=tuple(held),
    )  # fmt: skip


def most_scenarios(cal: Calibration, sweeps: Sequence[Sweep]) -> int:
    """The most scenarios a point of the sweep may have: each drafter's accept lengths on each pipeline, the
    stronger one's the longest list that the calibration or a swept value gives it."""
    accept = longest_list(("stronger_drafter", "accept"), len(cal.stronger_drafter.accept), sweeps)
    return len(PIPELINES) * (1 + min(max(1, accept), MAX_ITEMS["accept"]))


def longest_list(path: PathSegments, length: int, sweeps: Sequence[Sweep]) -> int:
    """The longest list at `path` over the points of the sweeps: `length`, the calibration's, unless a sweep at or
    around `path` replaces it at every point; then the longest list a swept value gives."""
    replacing = [s for s in sweeps if at_or_inside(path, s.path)]
    lengths = [] if replacing else [length]
    for sweep in replacing:
        for value in sweep.values:
            with contextlib.suppress(CalibrationError):  # a value without a list there fails its point's check
                listed = get_path(value, path[len(sweep.path) :])
                lengths += [len(listed)] if isinstance(listed, list) else []
    return max(lengths, default=0)


# What the physical cross-check reads of the curve. A swept value at, inside or around one of these makes it read
# every curve point again (its roofline and its falls), once for each value it takes; inside the points, only
# when the experts fit reads them all.
CROSS_CHECKED = (("hardware", "reference"), ("model",), ("moe_curve", "tp"), ("moe_curve", "points"))


def curve_rereads(cal: Calibration, sweeps: Sequence[Sweep]) -> tuple[int, int]:
    """(curve points, times): how many curve points the physical cross-check reads again over the whole sweep,
    and how many times. A time for each value of the sweeps that reach it; in a grid whose inner sweep alone
    reaches it, for each of its values at each outer one when the caches cannot hold them all. The curve is the
    calibration's, or the longest list a sweep puts in its place."""
    points = CROSS_CHECKED[-1]
    reaching = [
        sweep for sweep in sweeps
        if any(at_or_inside(sweep.path, c) or at_or_inside(c, sweep.path) for c in CROSS_CHECKED)
        # a point's own time or M: the cross-check reads that point alone, unless the experts fit reads them all
        and not (len(sweep.path) > len(points) and at_or_inside(sweep.path, points) and cal.moe_curve.fit != "experts")
        and (cal.model is not None or at_or_inside(("model",), sweep.path))  # without a model, no cross-check
    ]  # fmt: skip
    curve = longest_list(points, len(cal.moe_curve.points), sweeps) if reaching else 0
    times = math.prod(len(s.values) for s in reaching)
    if reaching == [sweeps[-1]] and len(sweeps) > 1 and times > CURVES_HELD:
        times *= len(sweeps[0].values)
    return curve, times if curve else 0


def _check_chunk(
    plan: SweepPlan, start: int
) -> tuple[
    dict[str, tuple[int, str, str]], set[int], collections.Counter[str], dict[tuple[str, str, str], None], bytes
]:
    """A chunk's warnings (kind -> how many, the first point's values, its message), the Ms it reads outside
    the curve, for a table at how many points each reason a pipeline cannot run a tree holds and the names of
    its scenarios, and what the output reads of it, packed."""
    seen: dict[str, tuple[int, str, str]] = {}
    extrapolated: set[int] = set()
    cannot: collections.Counter[str] = collections.Counter()
    names: dict[tuple[str, str, str], None] = {}
    kept: list[Any] = []  # what the output reads of each point, made as it comes so that the point can go
    bare: dict[tuple[object, ...], tuple[object, ...]] = {}  # a scenario without its derivation, once if alike
    for i, (cal, point) in enumerate(plan.estimated(start), start):
        for kind, message in physical_warnings(cal, point.scenarios):
            n, at, first = seen[kind] if kind in seen else (0, plan.point_text(i), message)
            seen[kind] = (n + 1, at, first)
        extrapolated |= {row.m for row in point.scenarios if row.moe_extrapolated}
        if plan.table:  # its notes say why a step is marked; JSON and CSV give each scenario's reason
            kept.append(row := sweep_row(point, before := kept[-1] if kept else None))
            cannot.update(dict.fromkeys((reason for *_, reason in row.numbers if reason), 1))
            names.update(dict.fromkeys(row.names if before is None or row.names is not before.names else ()))
        else:
            kept.append((point.values, [bare.setdefault(s[:-1], s[:-1]) for s in point.scenarios]))
    return seen, extrapolated, cannot, names, _packed(kept)


def _packed(items: list[Any]) -> bytes:
    """Items pickled and compressed; an object they share is packed once and read back once."""
    import pickle
    import zlib

    return zlib.compress(pickle.dumps(items, pickle.HIGHEST_PROTOCOL), 1)


def _unpacked(data: bytes) -> list[Any]:
    import pickle
    import zlib

    items: list[Any] = pickle.loads(zlib.decompress(data))
    return items


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
        """How far the range moves the throughput: 0 where it moves it by float rounding alone (an assumption the
        scenario does not read, reached by another path of arithmetic)."""
        swing, at = abs(self.tok_s_at_high - self.tok_s_at_low), max(self.tok_s_at_high, self.tok_s_at_low)
        return swing if swing > ROUNDING * at else 0.0

    @property
    def outside(self) -> bool:
        """The value in force lies outside the range: the band spans the range all the same."""
        return not self.low <= self.value <= self.high


class Sensitivity(NamedTuple):
    scenario: str
    spec: ScenarioSpec  # as named: without an accept length, a range on the default one moves the scenario with it
    tok_s: float  # with every assumption at its value in force
    rows: tuple[SensitivityRow, ...]  # sorted by swing, largest first
    tok_s_min: float  # over every combination of the range ends
    tok_s_max: float
    combinations: int


BAND_CHUNK = 256  # combinations of range ends a worker estimates at a time: the 1,024 of 10 ranges on 4 CPUs


def sensitivity(doc: object, cal: Calibration, spec: ScenarioSpec, every_corner: bool = True) -> Sensitivity:
    """A tornado (each range end alone, the others as in force) and the band over combinations of range ends.

    The band takes every combination of ends; with every_corner=False only the two where each assumption
    sits at the end that moves the estimate the same way, the way read inside the ranges (an assumption that
    moves nothing there takes both its ends). That is the whole band wherever each assumption moves the
    estimate one way throughout the ranges (as for the shipped calibration: a test checks); each end of the
    two is flipped to see, and where a flip passes them, every combination is taken.
    """
    place = median_place(drafter_named(cal, spec.drafter))  # a range on that accept moves the scenario
    base = scenario_for(cal, spec, "--scenario", place)
    if not cal.ranges:
        got, want = ("missing", "a `ranges` section") if cal.ranges is None else ("lists no range", "at least one")
        raise CalibrationError("ranges", f"{got}; --sensitivity varies the assumptions listed there: expected {want} "
                                         "(the shipped calibration.json has ranges to copy)")  # fmt: skip
    paths = [parse_path(r.path) for r in cal.ranges]

    def estimate_at(
        corner: Sequence[Change],
        start: tuple[object, Calibration] = (doc, cal),
        changes: Sequence[Change] | None = None,
        whole: bool = False,
    ) -> tuple[float, tuple[object, Calibration]]:
        """tok/s with the range ends of `corner`, reached from `start` by `changes` (by default all of the corner),
        and the calibration there; an error names the whole corner. `whole` estimates every scenario and logged
        measurement there too, as --set would: an end the calibration cannot take fails whichever scenario is
        studied."""
        try:
            moved = recalibrate(*start, corner if changes is None else changes)
            if whole:  # checked, not kept
                estimate(moved[1])
                predictions(moved[1])
            return scenario_for(moved[1], spec, "--scenario", place).tok_s, moved
        except CalibrationError as exc:
            ends = ((format_path(p), cast(float, v)) for p, v in corner)  # a corner holds range ends
            at = ", ".join(f"{key}={number_text(end, cal.domains[key])}" for key, end in ends)
            raise CalibrationError(
                "ranges", f"at {at} the calibration fails ({exc.path}: {exc.message}); expected ranges it can use"
            ) from None

    rows = [
        SensitivityRow(r.path, r.low, r.high, estimate_at([(p, r.low)], whole=True)[0],
                       estimate_at([(p, r.high)], whole=True)[0], number_at(doc, p), r.source)
        for r, p in zip(cal.ranges, paths, strict=True)
    ]  # fmt: skip
    ends = [(r.low, r.high) for r in cal.ranges]
    corners: list[Sequence[float]] = list(itertools.product(*ends))
    if not every_corner:  # the ends that raise the estimate, and those that lower it, read inside the ranges
        moves = [(row.tok_s_at_low, row.tok_s_at_high) for row in rows]
        inside = [min(max(row.value, row.low), row.high) for row in rows]
        if inside != [row.value for row in rows]:  # a value in force outside its range: read at its nearest end
            centre = list(zip(paths, inside, strict=True))
            start = estimate_at(centre)[1]

            def tok_s_at(path: PathSegments, end: float) -> float:  # the range's end, the others at the centre
                return estimate_at([(q, end if q == path else v) for q, v in centre], start, [(path, end)])[0]

            moves = [(tok_s_at(p, r.low), tok_s_at(p, r.high)) for r, p in zip(cal.ranges, paths, strict=True)]
        ups = [None if abs(hi - lo) <= ROUNDING * max(hi, lo) else hi > lo for lo, hi in moves]

        def toward(raising: bool) -> list[Sequence[float]]:
            """The end of each range that moves the estimate that way; both ends of one that moves nothing where its
            way is read, since it may move the estimate elsewhere."""
            return [[end[up == raising]] if up is not None else end for end, up in zip(ends, ups, strict=True)]

        corners = list(dict.fromkeys(c for raising in (True, False) for c in itertools.product(*toward(raising))))

    def band_of(chunk: Sequence[Sequence[float]]) -> list[float]:
        """tok/s at each corner of the chunk, each from the one before, which in this order it differs from in an
        end or two, mostly."""
        band, start = [], (doc, cal)
        before: Sequence[float | None] = [None] * len(paths)
        for at in chunk:
            corner = list(zip(paths, at, strict=True))
            tok_s, start = estimate_at(corner, start, [c for c, e in zip(corner, before, strict=True) if c[1] != e])
            band.append(tok_s)
            before = at
        return band

    band = over_cpus_in_chunks(band_of, corners, BAND_CHUNK)
    if not every_corner:  # each end of the two corners flipped: one that passes them finds a way that turns inside
        extremes = [corners[band.index(extreme(band))] for extreme in (min, max)]
        flips = [(*c[:i], end, *c[i + 1 :]) for c in extremes for i, pair in enumerate(ends) for end in pair
                 if end != c[i]]  # fmt: skip
        slack = ROUNDING * max(band)
        if any(not min(band) - slack <= tok_s <= max(band) + slack for tok_s in band_of(flips)):
            band = over_cpus_in_chunks(band_of, list(itertools.product(*ends)), BAND_CHUNK)  # then every one
    rows.sort(key=lambda row: -row.swing)
    return Sensitivity(base.label, spec, base.tok_s, tuple(rows), min(band), max(band), len(band))


# --- Calibrating from measurements: the track record, the fit, and --solve as the fit of one value ---


class Prediction(NamedTuple):
    """A measured throughput beside what the model predicts for it."""

    measurement: Measurement
    block: int | None  # the tree it ran: the measurement's own, else its drafter's; None for AR
    budget: int | None
    m: int  # the verify batch: budget + 1, or 1 for an autoregressive run
    predicted_tok_s: float
    relative_error: float  # predicted / measured - 1
    residual: float  # ln(predicted) - ln(measured): what the fit makes small
    figure: Figure  # the predicted tok/s, with its derivation


def predictions(cal: Calibration, measurements: Iterable[Measurement] | None = None) -> tuple[Prediction, ...]:
    """Every measurement (by default the calibration's) with the model's prediction for it, on the GPU it was
    taken on: where the anchors were, at the MoE time they are split at (split_on), not the target's."""
    dec, found = decompose(cal), []
    taken_on = split_on(cal.hardware, cal.anchors)  # None: the target, where the anchors are split
    ar: dict[str, Figure] = {}  # the AR tok/s on each pipeline, once
    parts: dict[tuple[str, str], tuple[Figure, Figure]] = {}  # each drafter's parts on each pipeline, once
    steps: dict[tuple[str, str, int], Figure] = {}  # each drafter's step on each pipeline at each M, once
    for m in cal.measurements if measurements is None else measurements:
        if m.drafter is None:
            block, budget, batch = None, None, 1
            if m.pipeline not in ar:
                ar[m.pipeline] = ar_tok_s(cal, dec, m.pipeline, dec.moe_ar)
            predicted = ar[m.pipeline]
        else:
            (block, budget), on = tree_shape(cal, m), (m.drafter, m.pipeline)
            batch = budget + 1  # M
            if on not in parts:
                parts[on] = step_parts(dec, drafter_named(cal, m.drafter), kept(engine_on(cal, m.pipeline)))
            if (key := (*on, batch)) not in steps:
                moe = _moe_time(cal.hardware, cal.model, cal.moe_curve, batch, taken_on)
                steps[key] = step(moe, parts[on]).step
            predicted = throughput(given("accept", m.accept or 1.0, "tokens", m.origin_of("accept")), steps[key])
        ratio = predicted.value / m.tok_s
        found.append(Prediction(m, block, budget, batch, predicted.value, ratio - 1, math.log(ratio), predicted))
    return tuple(found)


def measurements_where(cal: Calibration) -> str:
    """' on B300' where measurements are predicted on the GPU the anchors were measured on, not on the target (see
    predictions), for the messages about them; else ''."""
    gpu = split_on(cal.hardware, cal.anchors)
    return f" on {gpu.name}" if gpu else ""


def rms(values: Iterable[float]) -> float | None:
    """The root mean square, or None of nothing: rms([0.03, -0.04]) is about 0.0354."""
    values = list(values)
    return math.sqrt(sum(v * v for v in values) / len(values)) if values else None


class FitValue(NamedTuple):
    path: str
    value: float
    previous: float
    range: Range | None  # the calibration's range for it, if it has one
    domain: Domain  # the values it may take

    @property
    def text(self) -> str:
        return number_text(self.value, self.domain)

    @property
    def previous_text(self) -> str:
        return number_text(self.previous, self.domain)


def number_text(value: float, domain: Domain) -> str:
    """A value to 6 digits, or to as many more as keep it on its side of its domain's ends: 0.99999995 inside
    a domain that ends below 1 (not 1, which --set would refuse), 1.0000001 outside one that ends at 1.

    >>> below_1, up_to_1 = Domain(0, 1, low_open=False), Domain(0, 1, low_open=False, high_open=False)
    >>> number_text(0.99999995, below_1), number_text(1.0000001, up_to_1), number_text(0.31234567, below_1)
    ('0.99999995', '1.0000001', '0.312346')
    """
    for digits in (6, 9, 12):
        if (float(text := f"{value:.{digits}g}") in domain) == (value in domain):
            return text
    return repr(value)


class Fit(NamedTuple):
    """The values of some assumptions that best explain the measurements, and how well they do."""

    values: tuple[FitValue, ...]
    before: tuple[Prediction, ...]  # at the values in force before the fit
    after: tuple[Prediction, ...]
    loo_residuals: tuple[float | None, ...]  # each measurement's residual when the fit is made without it
    other_roots: tuple[float, ...]  # one value, one measurement: further values that fit exactly
    method: str
    warnings: tuple[str, ...]

    @property
    def rms_before(self) -> float | None:
        return rms(p.relative_error for p in self.before)

    @property
    def rms_after(self) -> float | None:
        return rms(p.relative_error for p in self.after)


def fittable(cal: Calibration, path_text: str, option: str) -> tuple[PathSegments, Domain]:
    """A key path that --fit and --solve may vary: a continuous number of the calibration, not a range."""
    path = parse_path(path_text)
    key = format_path(path)
    if why := not_an_assumption(key, cal.domains, option):
        raise CalibrationError(key, why, file=option)
    return path, cal.domains[key]


NullWhy = Literal["all", "alone", "wall", "steps", "budget", "unpredicted"]  # why a leave-one-out residual is null
EVALUATIONS = " evaluations of the model (predictions, trees' steps, the report's scenarios, re-reads)"
Stop = Literal["minimum", "wall", "steps", "budget"]  # where a least squares stopped: see _levenberg_marquardt


def fit(
    doc: object, cal: Calibration, paths: Sequence[str], measurements: Sequence[Measurement], option: str = "--fit"
) -> Fit:
    """Least squares of ln(predicted) - ln(measured) over the measurements, each value kept inside its domain.

    Levenberg-Marquardt on a forward-difference Jacobian: a few values, at most 100 measurements. One value
    and one measurement (--solve) is a root of the residual instead, and every root over the domain is found.

    The work is bounded by counts, so the output is the same on any machine. A trial of the values counts
    as evaluations of the model: re-reading the calibration (REREAD_EVALUATIONS, and POINTS_PER_EVALUATION
    when curve points are fitted), the report's scenarios (SCENARIO_EVALUATIONS each, but not in a
    Jacobian's probe), each distinct step (`Measurement.step_key`) and each prediction. A least squares, the
    fit's or a refit's, takes no further step past MAX_FIT_EVALUATIONS; the refits stop past
    MAX_LOO_EVALUATIONS in all, counted in their order, and the residuals of the rest are null. Every null
    residual gets a warning.
    """
    keys = [fittable(cal, p, option) for p in paths]
    where = measurements_where(cal)
    names = [format_path(path) for path, _ in keys]
    if twice := [name for i, name in enumerate(names) if name in names[:i]]:
        raise CalibrationError(twice[0], "is given twice; expected each value once", file=option)
    if not measurements:
        raise CalibrationError(
            "", "the calibration logs no measurements to fit; expected a `measurements` list in the file, or "
            "--measured SCENARIO=TOK_S", file=option,
        )  # fmt: skip
    if len(measurements) < len(keys):
        raise CalibrationError(
            "", f"{plural(len(measurements), 'measurement')} cannot fit {len(keys)} values; "
            "expected at least as many measurements as values", file=option,
        )  # fmt: skip
    start = [number_at(doc, path) for path, _ in keys]
    before = predictions(cal, measurements)  # at the values in force: an error here is the calibration's
    trials = _Trials(doc, cal, keys, start, measurements)
    domains = [domain for _, domain in keys]
    ends = [_ends(domain) for domain in domains]
    roots: list[float] = []
    stop: Stop = "minimum"  # where the least squares stopped
    if len(keys) == 1 and len(measurements) == 1:  # --solve: every root, not only the nearest minimum

        def gap(value: float) -> float | None:
            r = trials.residuals([value])
            return None if r is None else r[0]

        roots, method = _roots(gap, domains[0], start[0], names[0], measurements[0], option, where)
        values = [roots.pop(0)]
    else:
        begin = _clipped(start, ends)  # a value within 1e-6 of an open end starts at the fit's own end
        r_begin = [p.residual for p in before] if begin == start else trials.residuals(begin)
        if r_begin is None:
            assert trials.failed is not None
            at = ", ".join(shortened(f"{n}={_swept_text(v)}") for n, v in zip(names, begin, strict=True))
            why = trials.failed
            raise CalibrationError(
                why.path, f"at the values the fit starts from, {at} (the nearest to the values in force), "
                f"the calibration does not hold: {why.message}", file=option,
            )  # fmt: skip
        columns = _jacobian(trials.residuals, begin, r_begin, ends)
        _check_identifiable(columns, begin, names, measurements, option, where)
        values, stop = _levenberg_marquardt(trials.residuals, begin, r_begin, ends, columns, trials.past_budget)
        method = "least squares of ln tok/s (Levenberg-Marquardt)"
    values = [_snapped(v, d) for v, d in zip(values, domains, strict=True)]  # 0, not the 1.4e-17 of float rounding
    roots = [_snapped(v, domains[0]) for v in roots]
    warnings = [_stop_warning(stop, trials.failed, option)] if stop != "minimum" else []
    after = predictions(trials.calibrated(values), measurements)  # the fit only moves to values where it holds
    loo: list[float | None] = [None] * len(measurements)
    if len(measurements) > len(keys):  # each left out in turn, refitted from the full fit
        loo, refit_warnings = _leave_one_out(trials, values, after, names, domains, option)
        warnings += refit_warnings
    ranges = {r.path: r for r in cal.ranges or ()}
    fit_values = tuple(
        FitValue(name, value, before, ranges.get(name), domain)
        for name, value, before, domain in zip(names, values, start, domains, strict=True)
    )
    warnings += _value_warnings(fit_values, option, len(measurements), where)
    warnings += _held_accepts(fit_values, measurements, option)
    return Fit(fit_values, before, after, tuple(loo), tuple(roots), method, tuple(warnings))


def _held_accepts(values: Sequence[FitValue], measurements: Sequence[Measurement], option: str) -> list[str]:
    """The anchor's accept is the current drafter's in every row; a measurement of that drafter holds the accept
    it ran at: found elsewhere, the rows do not show the measurement (current/native@4.4 at 470, the row 462)."""
    found = next((v for v in values if v.path == "anchors.ddtree.accept"), None)
    held = [m for m in measurements if found and m.drafter == "current" and m.accept != found.value]
    if not held or not found:
        return []
    more = f" (and {plural(len(held) - 1, 'more measurement')})" if len(held) > 1 else ""
    return [
        f"{option} anchors.ddtree.accept: the current drafter's rows are at the value found, {found.text}, but "
        f"{held[0].label} ran at {_value_text(held[0].accept)}{more}: no row shows it"
    ]


class _Trials:
    """A fit's trials of values: the calibration at each, the residuals there, and the evaluations they spent.

    A trial reads the calibration from the values read last, changing those that differ (a Jacobian's
    probe moves one), and estimates the report's scenarios too unless it is a probe: a fit goes only where
    they hold. (The break-even and the physical cross-check are checked after the fit.)
    """

    def __init__(
        self, doc: object, cal: Calibration, keys: Sequence[tuple[PathSegments, Domain]], start: Sequence[float],
        measurements: Sequence[Measurement],
    ) -> None:  # fmt: skip
        self.paths = [path for path, _ in keys]
        self.measurements = measurements
        in_curve = any(path[:2] == ("moe_curve", "points") for path in self.paths)
        points = len(cal.moe_curve.points) // POINTS_PER_EVALUATION if in_curve else 0
        self.probe_evaluations = REREAD_EVALUATIONS + points  # a probe re-reads the calibration
        self.trial_evaluations = self.probe_evaluations + SCENARIO_EVALUATIONS * len(scenarios(cal))  # and estimates
        self.spent = 0  # evaluations of the model by the least squares, then by the refit under way
        self.last: tuple[Sequence[float], object, Calibration] = (start, doc, cal)  # the values read last, as read
        self.failed: CalibrationError | None = None  # why the calibration did not hold, the last time it did not

    def calibrated(self, values: Sequence[float], *, probe: bool = False) -> Calibration:
        read_values, read_doc, read_cal = self.last
        changes = [(path, v) for path, v, was in zip(self.paths, values, read_values, strict=True) if v != was]
        at_doc, at = recalibrate(read_doc, read_cal, changes)
        self.last = (tuple(values), at_doc, at)
        if not probe:
            scenarios(at)
        return at

    def residuals(
        self, values: Sequence[float], among: Sequence[Measurement] | None = None, *, probe: bool = False
    ) -> list[float] | None:
        """The residuals of `among` (by default every measurement) at the values; None where the calibration
        does not hold."""
        among = self.measurements if among is None else among
        trees = len({m.step_key for m in among})
        self.spent += (self.probe_evaluations if probe else self.trial_evaluations) + trees + len(among)
        try:
            return [p.residual for p in predictions(self.calibrated(values, probe=probe), among)]
        except CalibrationError as exc:
            self.failed = exc.with_traceback(None)  # kept without the frames it was raised in, which hold self
            return None

    def past_budget(self) -> bool:
        """Whether the least squares under way, the fit's or a refit's, is past its budget."""
        return self.spent > MAX_FIT_EVALUATIONS


def _leave_one_out(
    trials: _Trials, values: list[float], after: Sequence[Prediction], names: Sequence[str],
    domains: Sequence[Domain], option: str,
) -> tuple[list[float | None], list[str]]:  # fmt: skip
    """Each measurement's residual when the fit is refitted from `values` without it, and the warnings for
    those left null: refits in order, on every CPU, until MAX_LOO_EVALUATIONS in all."""
    measurements, ends = trials.measurements, [_ends(domain) for domain in domains]
    r_full = [p.residual for p in after]
    j_full = _jacobian(trials.residuals, values, r_full, ends)
    # A value the full fit left on an edge may stay there, so only the others need the rest to tell them
    # apart. (Should a refit move such a value off its edge, it is refitted unchecked; a value that moves
    # no prediction then takes no step, as _solve_linear gives a zero pivot none.)
    free = [k for k, (v, d) in enumerate(zip(values, domains, strict=True)) if not _at_edge(v, d)]

    def identifiable(columns: list[list[float]], among: Sequence[Measurement]) -> bool:
        """Whether these measurements (the Jacobian's columns over them) can make the fit of the free values."""
        try:
            if free:
                free_values, free_names = [values[k] for k in free], [names[k] for k in free]
                _check_identifiable([columns[k] for k in free], free_values, free_names, among, option)
        except CalibrationError:
            return False
        return True

    def refit_without(i: int) -> tuple[float | None, int, NullWhy | None]:
        """Measurement i's residual when the fit is made without it, the evaluations that took, and why the
        residual is null, if it is."""
        trials.spent = 0
        rest, r_rest = [*measurements[:i], *measurements[i + 1 :]], [*r_full[:i], *r_full[i + 1 :]]
        columns = [[*col[:i], *col[i + 1 :]] for col in j_full]
        if not identifiable(columns, rest):  # without it the values cannot be told apart: no refit
            return None, 0, "alone"
        rest_residuals = functools.partial(trials.residuals, among=rest)
        refit, refit_stop = _levenberg_marquardt(rest_residuals, values, r_rest, ends, columns, trials.past_budget)
        if refit_stop != "minimum":
            return None, trials.spent, refit_stop
        r_out = trials.residuals(refit, [measurements[i]])
        return (None, trials.spent, "unpredicted") if r_out is None else (r_out[0], trials.spent, None)

    loo: list[float | None] = [None] * len(measurements)
    warnings, used, nulls = [], 0, collections.Counter[NullWhy]()
    if not identifiable(j_full, measurements):  # nor can all of them, where the fit ended: no refit at all
        nulls["all"] = len(measurements)
    tasks = [] if nulls["all"] else [functools.partial(refit_without, i) for i in range(len(measurements))]
    slow = trials.spent > MAX_FIT_EVALUATIONS // 4  # the least squares was, and so its refits will be
    with contextlib.closing(over_cpus(tasks, min_tasks=2 if slow else 8)) as refits:  # forking pays from there
        for done, (residual, evaluations, why) in enumerate(refits, 1):
            loo[done - 1], used = residual, used + evaluations
            nulls.update([why] if why else [])
            if used > MAX_LOO_EVALUATIONS and done < len(measurements):
                left = len(measurements) - done
                rest = f"residuals of the last {left} measurements are" if left > 1 else "residual of the last one is"
                warnings.append(
                    f"{option}: leave-one-out stopped after {done} of {len(measurements)} refits, past its budget "
                    f"of {MAX_LOO_EVALUATIONS:,}{EVALUATIONS}; the {rest} null (fit fewer values or fewer "
                    "measurements to have them all)"
                )
                break
    warnings += [_null_warning(option, why, nulls[why]) for why in get_args(NullWhy) if nulls[why]]
    return loo, warnings


def _stop_warning(stop: Stop, failed: CalibrationError | None, option: str) -> str:
    """Why a least squares stopped short of a minimum: at a wall of the calibration, or out of steps or budget."""
    if stop == "wall" and failed:
        return (
            f"{option}: the fit stopped where the calibration stops holding, not at a minimum: one step on, "
            f"{failed.path}: {failed.message}; the measurements pull the values past what the model can take"
        )
    where = f"after {FIT_STEPS} steps" if stop == "steps" else f"past its budget of {MAX_FIT_EVALUATIONS:,}"
    return (
        f"{option}: the fit stopped {where}{EVALUATIONS if stop == 'budget' else ''}, still lowering the cost: "
        "the values are where it stopped, not at a minimum; the measurements may leave a value free to run off "
        "(fit fewer values)"
    )


def _value_warnings(fit_values: Sequence[FitValue], option: str, measured: int, where: str = "") -> list[str]:
    """What a value found says of itself: outside its range, far from its value before with no range to hold it
    to (10 times it or a tenth), or on the edge of what it may take (`where`: see _check_identifiable)."""
    found = "solved" if option == "--solve" else "fitted"
    data = "the observation" if option == "--solve" else "the measurement" if measured == 1 else "the measurements"
    data += where
    outside = [
        f"{option} {v.path}: the {found} value {value} lies outside its range in the calibration, {low} to {high} "
        f"({r.source}); {data} and that assumption disagree"
        for v in fit_values if (r := v.range) and not r.low <= v.value <= r.high
        for value, low, high in [_against(v.value, r.low, r.high, v.domain)]
    ]  # fmt: skip
    far = [
        f"{option} {v.path}: the {found} value {v.text} is {_times(v.value / v.previous)} the value before, "
        f"{v.previous_text}, and the calibration has no range to say what is plausible; {data} and the model "
        "disagree, or the value lies far from what was assumed"
        for v in fit_values
        if v.range is None and v.value * v.previous > 0
        and not 1 / FAR_FROM_BEFORE < v.value / v.previous < FAR_FROM_BEFORE
    ]  # fmt: skip
    edge = [
        f"{option} {v.path}: {v.text} lies on the edge of the values it may take ({v.domain.describe()})"
        for v in fit_values if _at_edge(v.value, v.domain)
    ]  # fmt: skip
    return outside + far + edge


def _times(ratio: float) -> str:
    """A ratio in words: 4616.4 -> '4,616x', 0.0654 -> '1/15.3 of'."""
    up = max(ratio, 1 / ratio)
    text = f"{up:,.0f}" if up >= 100 else f"{up:.3g}"
    return f"{text}x" if ratio >= 1 else f"1/{text} of"


def _null_warning(option: str, why: NullWhy, count: int) -> str:
    """The warning for `count` leave-one-out residuals null for one reason."""
    those = "each of those measurements" if count > 1 else "that measurement"
    because = {
        "all": "at the fitted values not even all the measurements can make the fit (a value none of them moves, "
               "or values they cannot tell apart), so none is refitted without one",
        "alone": f"without {those}, the rest cannot make the fit (a value none of them moves, or values they "
                 "cannot tell apart)",
        "wall": f"the refit without {those} stopped where the calibration stops holding, short of a minimum",
        "steps": f"the refit without {those} was still lowering the cost after {FIT_STEPS} steps",
        "budget": f"the refit without {those} was still lowering the cost past {MAX_FIT_EVALUATIONS:,}{EVALUATIONS}",
        "unpredicted": f"the refit without {those} reached values at which the model cannot predict it",
    }[why]  # fmt: skip
    return f"{option}: {count} leave-one-out residual{'s are' if count > 1 else ' is'} null: {because}"


def _ends(domain: Domain) -> tuple[float, float]:
    """The lowest and highest values a fit may try: an open end moved inside by 1e-6 of the domain's size."""
    margin = 1e-6 * _size(domain)
    return domain.low + (margin if domain.low_open else 0.0), domain.high - (margin if domain.high_open else 0.0)


def _clipped(values: Sequence[float], ends: Sequence[tuple[float, float]]) -> list[float]:
    """Each value moved to the nearer of its ends where it lies past one."""
    return [min(max(x, low), high) for x, (low, high) in zip(values, ends, strict=True)]


def _at_edge(value: float, domain: Domain) -> bool:
    """Within 1e-5 of the domain's size of an end: where the fit stops a value that the measurements push past
    it (and where an interior minimum that close to an end is told of as on the edge too)."""
    return any(math.isfinite(end) and abs(value - end) <= 1e-5 * _size(domain) for end in (domain.low, domain.high))


def _snapped(value: float, domain: Domain) -> float:
    """A value within float rounding of an end its domain includes is that end: the cut at which the native
    engine gives back SGLang's 303 tok/s is 0, not the 1.4e-17 that arithmetic on 0.4 leaves."""
    for end, is_open in ((domain.low, domain.low_open), (domain.high, domain.high_open)):
        if not is_open and math.isfinite(end) and abs(value - end) <= FLOAT_NOISE * max(abs(end), 1.0):
            return float(end)
    return value


def _size(domain: Domain) -> float:
    """How large a domain counts as: its largest finite end, at least 1 (in the units the calibration uses).
    Not the value's start, which may be anything --set put there: a margin that scaled with it would keep a
    value started at 1e12 above 1,000."""
    return max([abs(end) for end in (domain.low, domain.high) if math.isfinite(end)] + [1.0])


class Residuals(Protocol):
    """The residuals at some values, or None where the calibration does not hold. A probe, a Jacobian's
    difference, measures a slope only: it does not estimate the report's scenarios, as a trial does."""

    def __call__(self, values: Sequence[float], *, probe: bool = False) -> list[float] | None: ...


def _jacobian(
    residuals: Residuals, values: Sequence[float], r0: Sequence[float], ends: Sequence[tuple[float, float]]
) -> list[list[float]]:
    """Forward differences, one column per value (backward where forward passes its end)."""
    columns = []
    for j, (value, (low, high)) in enumerate(zip(values, ends, strict=True)):
        step = 1e-6 * _scale(value)
        for h in (step, -step):
            moved = [*values[:j], value + h, *values[j + 1 :]]
            if low <= value + h <= high and (r := residuals(moved, probe=True)) is not None:
                columns.append([(a - b) / h for a, b in zip(r, r0, strict=True)])
                break
        else:
            columns.append([0.0] * len(r0))
    return columns


def _scale(value: float) -> float:
    """How large a value counts as when a change of it is weighed: itself, but at least 1e-3, so that 0 can
    move, and a value held just above 0 is differenced over a step (1e-9) that float noise does not swamp."""
    return max(abs(value), 1e-3)


def _check_identifiable(
    columns: list[list[float]], values: Sequence[float], names: Sequence[str], measurements: Sequence[Measurement],
    option: str, where: str = "",
) -> None:  # fmt: skip
    """Each value moves some measurement, and no two move them alike: else name those at fault (`where` says on
    which GPU the measurements are predicted, where it is not the target: " on B300").

    A value moves nothing when a change of it by 1 part in 1e7 (of its scale: a value at 0 has one)
    moves no prediction by more than float noise (elasticities below 1e-7). The columns are scaled to
    unit length and a singular value below 1e-6 of the largest counts as zero.
    """
    norms = [math.sqrt(sum(x * x for x in col)) for col in columns]
    for name, norm, value in zip(names, norms, values, strict=True):
        if norm * _scale(value) <= 1e-7:
            said = (
                f"{measurements[0].label}{where} does not depend on it" if len(measurements) == 1
                else f"none of the {len(measurements)} measurements{where} depends on it"
            )  # fmt: skip
            raise CalibrationError(name, f"{said}; expected a value that moves some prediction", file=option)
    sigma, v = _singular_values([[x / n for x in col] for col, n in zip(columns, norms, strict=True)])
    smallest = min(range(len(sigma)), key=sigma.__getitem__)
    if sigma[smallest] < 1e-6 * max(sigma):
        alike = [name for name, weight in zip(names, v[smallest], strict=True) if abs(weight) > 0.1]
        raise CalibrationError(
            "", f"the measurements{where} cannot tell {' and '.join(alike)} apart: a change in one is undone by a "
            f"change in the other{'s' if len(alike) > 2 else ''}; fit one of them (the others stay as they are), or "
            "add measurements that move them differently", file=option,
        )  # fmt: skip


def _singular_values(columns: list[list[float]]) -> tuple[list[float], list[list[float]]]:
    """The singular values of a matrix given by its columns, and for each its right singular vector.

    Jacobi's eigenvalue method on the Gram matrix: p x p for p values, whatever the number of rows.
    Squaring loses half the digits, leaving singular values good to ~1e-8 of the largest: enough to
    tell one below 1e-6 of it.
    """
    p = len(columns)
    a = _products(columns, columns)
    v = [[float(i == j) for j in range(p)] for i in range(p)]
    for _ in range(50):
        if sum(a[i][j] ** 2 for i, j in itertools.combinations(range(p), 2)) <= 1e-32 * sum(x * x for x in a[0]):
            break
        for i, j in itertools.combinations(range(p), 2):
            if a[i][j] == 0:
                continue
            theta = (a[j][j] - a[i][i]) / (2 * a[i][j])
            t = math.copysign(1.0, theta) / (abs(theta) + math.sqrt(theta * theta + 1))
            c = 1 / math.sqrt(t * t + 1)
            s = t * c
            for rows in (a, v):  # columns i and j rotated: A J, and V J
                for row in rows:
                    row[i], row[j] = c * row[i] - s * row[j], s * row[i] + c * row[j]
            pairs = list(zip(a[i], a[j], strict=True))
            a[i], a[j] = [c * x - s * y for x, y in pairs], [s * x + c * y for x, y in pairs]
    return [math.sqrt(max(a[k][k], 0.0)) for k in range(p)], [[row[k] for row in v] for k in range(p)]


def _levenberg_marquardt(
    residuals: Residuals, start: Sequence[float], r0: Sequence[float], ends: Sequence[tuple[float, float]],
    columns: list[list[float]] | None = None, past_budget: Callable[[], bool] = lambda: False,
) -> tuple[list[float], Stop]:  # fmt: skip
    """Minimise the sum of squared residuals from `start`, each value kept between its `ends` (see _ends); and
    where it stopped: "minimum", "wall" (its last steps failed because the calibration stops holding there),
    "steps" (still lowering the cost after FIT_STEPS steps) or "budget" (past_budget() before a step).

    A step that would take a value past an end stops it there; there it is held while the cost falls
    outward, and the other values move without it. `columns` is the Jacobian at `start` when the caller
    has it. It stops when a step no longer lowers the cost by more than float noise, or no longer moves
    the values, or after FIT_STEPS steps; or when a step reached the minimum of the linear model
    (r + J step) and lowered the cost by what that model foresaw, both to float noise: the model then
    holds here, and a further step would gain float noise.
    """
    values, r, cost, damping = list(start), list(r0), sum(x * x for x in r0), 1e-3
    for _ in range(FIT_STEPS):
        if past_budget():
            return values, "budget"
        columns = columns or _jacobian(residuals, values, r, ends)
        a = _products(columns, columns)  # J^T J
        g = [row[0] for row in _products(columns, [r])]  # J^T r
        free = [  # not held at an end that the cost falls past
            i for i, (x, (low, high)) in enumerate(zip(values, ends, strict=True))
            if not ((x <= low and g[i] > 0) or (x >= high and g[i] < 0))
        ]  # fmt: skip
        blocked = False  # a step tried here failed for want of a calibration that holds
        while True:
            step = _step(a, g, free, damping)
            trial = _clipped([x + step.get(i, 0.0) for i, x in enumerate(values)], ends)
            moved = max(abs(t - x) / max(abs(x), 1e-12) for t, x in zip(trial, values, strict=True))
            if moved <= 1e-13 or damping > 1e12:
                return values, "wall" if blocked else "minimum"  # no step left to take: as far as floats tell
            if (rt := residuals(trial)) is not None and (ct := sum(x * x for x in rt)) < cost:
                break
            blocked, damping = blocked or rt is None, damping * 10
        taken = {i: t - x for i, (t, x) in enumerate(zip(trial, values, strict=True))}  # as clipped to the ends
        foreseen, best = (cost - sum(x * x for x in _linear(r, columns, d)) for d in (taken, _step(a, g, free, 0.0)))
        noise = 1e-12 * cost
        converged = (
            cost - ct <= noise or ct <= 1e-30 or moved <= 1e-10
            or (best - foreseen <= noise and abs(cost - ct - foreseen) <= noise)
        )  # fmt: skip
        values, r, cost, damping, columns = trial, rt, ct, max(damping / 10, 1e-12), None
        if converged:  # after a step cut short by a wall, the small gain is no minimum
            return values, "wall" if blocked else "minimum"
    return values, "steps"


def _step(a: list[list[float]], g: list[float], free: list[int], damping: float) -> dict[int, float]:
    """The damped Gauss-Newton step of the free values, (J^T J + damping diag(J^T J)) step = -J^T r."""
    damped = [[a[i][j] * (1 + damping if i == j else 1) for j in free] for i in free]
    return dict(zip(free, _solve_linear(damped, [-g[i] for i in free]), strict=True))


def _linear(r: Sequence[float], columns: list[list[float]], step: dict[int, float]) -> list[float]:
    """The residuals after a step as the Jacobian foresees them: r + J step."""
    return [x + sum(columns[j][k] * d for j, d in step.items()) for k, x in enumerate(r)]


def _products(rows: list[list[float]], columns: Sequence[Sequence[float]]) -> list[list[float]]:
    """Every dot product of a row with a column: the Gram matrix J^T J when both are J's columns."""
    return [[sum(x * y for x, y in zip(row, col, strict=True)) for col in columns] for row in rows]


def _solve_linear(a: list[list[float]], b: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting: the x with a x = b (a is small and positive definite here)."""
    n = len(b)
    rows = [[*row, rhs] for row, rhs in zip(a, b, strict=True)]  # augmented: a | b
    for k in range(n):
        pivot = max(range(k, n), key=lambda i: abs(rows[i][k]))
        rows[k], rows[pivot] = rows[pivot], rows[k]
        for i in range(k + 1, n):
            f = rows[i][k] / rows[k][k] if rows[k][k] else 0.0
            rows[i] = [x - f * y for x, y in zip(rows[i], rows[k], strict=True)]
    x = [0.0] * n
    for k in reversed(range(n)):
        pivot_value = rows[k][k]
        x[k] = (rows[k][n] - sum(rows[k][j] * x[j] for j in range(k + 1, n))) / pivot_value if pivot_value else 0.0
    return x


GRID_CHUNK = 50  # values of a scan for roots that a worker tries at a time


def _roots(
    gap: Callable[[float], float | None], domain: Domain, previous: float, name: str, m: Measurement, option: str,
    where: str = "",
) -> tuple[list[float], str]:  # fmt: skip
    """Every value where the residual of one measurement is zero, the nearest to the value in force first.

    1 / tok/s is the step over the accept length, and most assumptions enter the step linearly: when
    three spread probes show that, the value is found in closed form and checked. Otherwise the
    domain is scanned for sign changes of the residual, and each is bisected.
    """
    bounded = math.isfinite(domain.high)
    span = domain.high - domain.low if bounded else (previous - domain.low if previous > domain.low else 1.0)
    probes = [domain.low + f * span for f in ((0.1, 0.5, 0.9) if bounded else (0.5, 1.0, 2.0))]
    inverse = [1 / (m.tok_s * math.exp(g)) for v in probes if (g := gap(v)) is not None]
    if len(inverse) == 3:
        (i0, i1, i2), (v0, v1, v2) = inverse, probes
        slope = (i1 - i0) / (v1 - v0)
        if slope != 0 and abs(i0 + slope * (v2 - v0) - i2) <= 1e-9 * abs(i2):
            value = v0 + (1 / m.tok_s - i0) / slope
            if value not in domain:
                raise CalibrationError(
                    name, f"{m.label}{where} reaches {_describe(m.tok_s)} tok/s only at {number_text(value, domain)}, "
                    f"outside the values it may take ({domain.describe()})", file=option,
                )  # fmt: skip
            if (g := gap(value)) is not None and abs(g) <= 1e-9:
                return [value], "closed form (the step is linear in it)"
    if bounded:
        grid = [domain.low + span * i / 400 for i in range(401)]
    else:  # geometric, 2^-20 to 2^20 times the distance of the value in force from the domain's low end
        grid = [domain.low + span * 2.0 ** (k / 8) for k in range(-160, 161)]
    grid = [v for v in grid if v in domain]
    gaps = over_cpus_in_chunks(lambda chunk: [gap(v) for v in chunk], grid, GRID_CHUNK)
    seen = [(v, g) for v, g in zip(grid, gaps, strict=True) if g is not None]
    roots = crossings(gap, seen)
    reached = [m.tok_s * math.exp(g) for _, g in seen]  # the predicted tok/s over the domain
    if reached and max(reached) - min(reached) <= 1e-9 * max(reached):
        stays = f"it stays at {reached[0]:.6g} tok/s"
        raise CalibrationError(
            name, f"{m.label}{where} does not depend on it ({stays}); expected a value that moves it", file=option
        )
    if not roots:
        target = _describe(m.tok_s)  # as typed, and each end told apart from it: 504.99999 and 504.999991
        tried = f"{_apart(min(reached), m.tok_s)} to {_apart(max(reached), m.tok_s)} tok/s" if reached else "none"
        values = f"it may take ({domain.describe()})" if bounded else f"tried ({grid[0]:.3g} to {grid[-1]:.3g})"
        raise CalibrationError(
            name, f"no value {values} brings {m.label}{where} to {target} tok/s; those values give {tried}", file=option
        )
    return sorted(roots, key=lambda v: abs(v - previous)), "bisection"


def crossings(gap: Callable[[float], float | None], seen: list[tuple[float, float]]) -> list[float]:
    """Each sign change of gap between the values seen, (value, gap) in order, narrowed by bisection.

    >>> f = lambda v: (v - 1) * (v - 3)
    >>> crossings(f, [(v, f(v)) for v in [0.5 * i for i in range(9)]])
    [1.0, 3.0]
    """
    roots = [v for v, g in seen if g == 0]
    for (a, ga), (b, gb) in itertools.pairwise(seen):
        if ga * gb >= 0:
            continue
        gm: float | None = None
        while a < (mid := (a + b) / 2) < b and (gm := gap(mid)) is not None and gm != 0:
            a, ga, b = (mid, gm, b) if (gm < 0) == (ga < 0) else (a, ga, mid)
        roots.append(mid if gm == 0 else (a + b) / 2)
    return sorted(roots)


def observation(cal: Calibration, given: Throughput, option: str) -> Measurement:
    """A throughput named on the command line (--observed, --measured), as a measurement."""
    spec, tok_s = given.spec, given.tok_s
    named = "" if spec.accept is None else f"@{_describe(spec.accept)}"
    text = f"{option} {spec.drafter}/{spec.pipeline}{named}={_describe(tok_s)}"
    if spec.drafter == "ar":
        return Measurement(f"AR/{spec.pipeline}", None, spec.pipeline, None, None, None, tok_s, text, text)
    with naming(option, given.text):  # the whole option as typed, its throughput too
        row = scenario_for(cal, spec, option)
    return Measurement(row.label, spec.drafter, spec.pipeline, None, None, row.accept, tok_s, text, text)


def solve(doc: object, cal: Calibration, path_text: str, observed: Throughput) -> Fit:
    """The value of one assumption at which a scenario's estimate equals an observed tok/s: the fit of one value.

    Default data: current/native = 463 tok/s needs overhead_cut = 0.4005.
    """
    m, spec = observation(cal, observed, "--observed"), observed.spec
    if spec.drafter == "stronger" and scenario_accept(key := format_path(parse_path(path_text)), cal.domains):
        raise CalibrationError(key, accept_to_meet(cal, spec, m), file="--solve")
    result = fit(doc, cal, [path_text], [m], "--solve")
    cannot = sglang_cannot(cal, m)  # an observation SGLang could not have made, as a logged one would be told
    return result._replace(warnings=(*result.warnings, cannot)) if cannot else result


def accept_to_meet(cal: Calibration, spec: ScenarioSpec, m: Measurement) -> str:
    """Why --solve does not vary a stronger-drafter accept length for an observation of that drafter, and the
    accept length at which the observed scenario's step gives the observed tok/s."""
    row, tok_s = scenario_for(cal, spec, "--observed"), _describe(m.tok_s)
    predicted = predictions(cal, [m])[0].figure  # on the GPU it was taken on
    step_ms = next(f for f in derivation(predicted) if f.name == "step").value
    where = f"{on}, where the anchors were measured," if (on := measurements_where(cal)) else ""
    accept = accept_needed(m.tok_s, step_ms).value
    limit, bound = accept_limit(row.block, row.budget)
    named = spec.accept is not None
    at = f"the accept length it names, {row.accept:g}" if named else f"its default accept length, {row.accept:g}"
    outside = f", outside the 1 to {limit} its tree allows ({bound})" if not 1 <= accept <= limit else ""
    cannot = f"; and {row.not_runnable_reason}" if row.not_runnable_reason else ""
    return (
        f"{m.label} is observed at {at}, whatever the list holds, and its step does not depend on it: the accept "
        f"length at which it gives {tok_s} tok/s{where} is tok/s * step / 1000 = {tok_s} * {step_ms:.6g} / 1000 = "
        f"{accept:.6g}{outside}{cannot}; expected an assumption the step rests on"
    )


def log_measured(doc: object, cal: Calibration, measured: Sequence[Throughput]) -> tuple[object, Calibration]:
    """The document and calibration with the --measured throughputs added to its `measurements` list."""
    if not measured:
        return doc, cal
    if len(cal.measurements) + len(measured) > MAX_MEASUREMENTS:
        raise CalibrationError(
            "", f"the calibration logs {plural(len(cal.measurements), 'measurement')} and --measured adds "
            f"{len(measured)}; expected at most {MAX_MEASUREMENTS} in all", file="--measured",
        )  # fmt: skip
    added = [observation(cal, given, "--measured") for given in measured]
    kinds = [{"drafter": m.drafter, "accept": m.accept} if m.drafter else {"decode": "autoregressive"} for m in added]
    entries = [
        {"label": m.label, **kind, "pipeline": m.pipeline, "tok_s": m.tok_s, "source": m.source}
        for m, kind in zip(added, kinds, strict=True)
    ]
    in_file = doc.get("measurements") if isinstance(doc, dict) else None  # a list: the calibration was read
    doc, cal = recalibrate(doc, cal, [(("measurements",), [*(in_file if isinstance(in_file, list) else []), *entries])])
    read = cal.measurements[-len(added) :]
    named = tuple(m._replace(origin=a.origin) for m, a in zip(read, added, strict=True))  # by option, not list place
    return doc, cal._replace(measurements=cal.measurements[: -len(added)] + named)


# --- Warnings: inputs that ask more than the hardware can give ---


# How a warning counts the cases after its first, by kind (the anchors' GPU can differ from the target only once).
MORE_CASES = {"curve": ("place", "where it falls"), "peak": ("point", "like it"), "floor": ("scenario", "like it"),
              "sglang": ("measurement", "like it")}  # fmt: skip


def physical_warnings(cal: Calibration, rows: Iterable[Scenario]) -> list[tuple[str, str]]:
    """Inputs that contradict themselves or ask more than the hardware can give: (kind, message) pairs.

    One message of each kind: the first case, and how many more there are (a curve may have 1,000 points).
    """
    tgt, measured_on, found = cal.hardware.target, cal.anchors.measured_on, []
    if measured_on is not None and measured_on != tgt.name:
        on = f"hardware.target.name: the estimate is for {tgt.name}, but the anchors were measured on {measured_on}"
        if cal.anchors.elsewhere:
            kept = f"it keeps {measured_on}'s overhead (ATTN_BASE and SPEC) and takes from {tgt.name} only the MoE time"
            found.append(("elsewhere", f"{on}: {kept} its bandwidth gives"))
        else:
            found.append((
                "as if here", f"{on}; it splits them at {tgt.name}'s bandwidth, as if they were measured there; "
                f"expected {ANCHORS_BANDWIDTH}, {measured_on}'s bandwidth, to keep {measured_on}'s overhead and take "
                f"from {tgt.name} only the MoE time",
            ))  # fmt: skip
    elif (unused := cal.anchors.elsewhere) and unused.mem_bandwidth_tb_s != tgt.mem_bandwidth_tb_s:
        found.append((
            "unused", f"{ANCHORS_BANDWIDTH}: {_value_text(unused.mem_bandwidth_tb_s)} TB/s is not used: the "
            f"target is {tgt.name}, on which the anchors were measured, and they are split at its "
            f"{_value_text(tgt.mem_bandwidth_tb_s)} TB/s",
        ))  # fmt: skip
    found += curve_warnings(cal.hardware.reference, cal.model, cal.moe_curve)
    found += [
        ("floor", f"{row.label}: the estimated step of {row.step_ms:.3g} ms is shorter than reading the "
         f"MoE weights alone ({row.moe_floor_ms:.3g} ms at 100% of {tgt.name}'s "
         f"{_value_text(tgt.mem_bandwidth_tb_s)} TB/s); the inputs are inconsistent: check the curve, the "
         "bandwidths and the anchors")
        for row in rows if row.moe_floor_ms is not None and row.step_ms < row.moe_floor_ms
    ]  # fmt: skip
    found += [("sglang", message) for m in cal.measurements if (message := sglang_cannot(cal, m))]
    return counted(found)


@functools.lru_cache(maxsize=CURVES_HELD)  # a sweep that leaves the curve as it is finds them here
def curve_warnings(reference: Gpu, model: ModelGeometry | None, curve: MoeCurve) -> tuple[tuple[str, str], ...]:
    """The curve's own warnings, each kind counted: where its time falls as M grows, and its points that would
    read faster than the reference GPU's peak bandwidth."""

    def falls(pair: tuple[CurvePoint, CurvePoint]) -> str:
        a, b = pair
        return (
            f"moe_curve.points: the MoE time falls from {_value_text(a.ms)} ms at M = {a.m} to "
            f"{_value_text(b.ms)} ms at M = {b.m}; a larger batch reads at least as many experts: check the times"
        )

    def reads_too_fast(p: RooflinePoint) -> str:
        return (
            f"moe_curve.points: M = {p.m} ({p.basis}, {_value_text(p.ms)} ms) reads {p.bytes_per_gpu / 1e9:.3g} "
            f"GB per GPU, which takes at least {p.peak_ms:.3g} ms at {reference.name}'s "
            f"{_value_text(reference.mem_bandwidth_tb_s)} TB/s: {fixed(p.efficiency, '.1%')} of peak bandwidth "
            "is impossible; check the time, the `model` geometry or hardware.reference.mem_bandwidth_tb_s"
        )

    # each kind's message made for its first case alone: a sweep checks a curve of 1,000 points at every point
    falling = [(a, b) for a, b in itertools.pairwise(curve.points) if b.ms < a.ms]
    too_fast = [p for p in (roofline(reference, model, curve) if model else ()) if p.efficiency > 1]
    return (*first_case("curve", falling, falls), *first_case("peak", too_fast, reads_too_fast))  # a cached tuple


def counted(found: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """(kind, message) pairs, one of each kind: the first, and how many more there are of it."""
    cases: dict[str, list[str]] = {}
    for kind, message in dict.fromkeys(found):
        cases.setdefault(kind, []).append(message)
    return [told for kind, messages in cases.items() for told in first_case(kind, messages, str)]


def first_case(kind: str, cases: Sequence[Item], message: Callable[[Item], str]) -> list[tuple[str, str]]:
    """The (kind, message) of the first of some cases of one kind, which says how many more there are; none of
    none."""
    if not cases:
        return []
    first = message(cases[0])
    if more := len(cases) - 1:
        noun, tail = MORE_CASES[kind]
        first += f" (and {plural(more, f'more {noun}')} {tail})"
    return [(kind, first)]


def sglang_cannot(cal: Calibration, m: Measurement) -> str | None:
    """Why a measurement on SGLang cannot have been made (its tree is past SGLang's budget), or None."""
    why = cannot_run(cal.sglang, tree_shape(cal, m)[1]) if m.pipeline == "sglang" and m.drafter else None
    if why is None:
        return None
    return f"{m.origin}: {m.label} is a measurement on SGLang, but {why}; check its pipeline, or sglang.max_budget"


# === One run: everything the options ask for, computed once ===


class Options(NamedTuple):
    """What the command line asks for, parsed into plain values."""

    calibration: str | None  # None: the default calibration
    overrides: tuple[Override, ...] = ()
    sweeps: tuple[Sweep, ...] = ()
    sensitivity: ScenarioSpec | None = None
    solve: str | None = None
    observed: Throughput | None = None
    measured: tuple[Throughput, ...] = ()  # throughputs --measured adds to the calibration's log
    fit: tuple[str, ...] = ()  # key paths to fit to the measurements
    headline_band: bool = False  # the uncertainty band of the headline estimate, when the output shows it
    sweep_table: bool = False  # the output shows a sweep as a table


class Provenance(NamedTuple):
    calibration_file: str
    calibration_sha256: str  # the first 12 hex digits of the file's SHA-256
    tool_version: str
    overrides: tuple[str, ...]  # --set options in force, as given
    measurements_added: tuple[str, ...]  # by --measured, as read: "current/native=415"


class Headline(NamedTuple):
    """What a design note quotes first."""

    today: Scenario  # the throughput measured today: the DDTree anchor
    native: Scenario  # today's drafter on the native engine
    stronger: dict[str, tuple[Scenario, ...]]  # the stronger drafter, by each pipeline that can run it
    band: Sensitivity | None  # of the stronger drafter on the native engine over the calibration's ranges
    no_band: str = ""  # why there is no band although the calibration has ranges


class Report(NamedTuple):
    """Everything one run computed; the renderers read it and compute nothing new, except that a sweep's plan
    estimates again, as they are read, the points its check did not hold (see SweepPlan)."""

    provenance: Provenance
    estimate: Estimate
    headline: Headline
    track_record: tuple[Prediction, ...]  # each logged measurement beside the prediction in force
    track_record_rms: float | None  # the RMS of their relative errors; None without measurements
    fit: Fit | None  # --fit: the fitted values, and the measurements before and after
    solve: Fit | None  # --solve: the fit of one value to the one --observed throughput
    sensitivity: Sensitivity | None
    sweep: SweepPlan | None
    warnings: tuple[str, ...]  # what the run should say (physical, the band's, the fit's); on stderr, exit 0
    document: object  # the calibration document in force (after --set, --measured, --fit and --solve)
    changed: tuple[tuple[PathSegments, str], ...]  # each key path an option changed, and the option, in order
    original: object  # the document as the file has it, for what an option changed


def build_report(options: Options) -> Report:
    """Load, override, fit, estimate and analyse: everything a run does except printing."""
    path = options.calibration or default_calibration_path()
    file = options.calibration or display_name(path)
    given = [(f"--set {shortened(o.text)}", format_path(o.path)) for o in options.overrides]  # (option, key path)
    found_by = "--solve" if options.solve else "--fit"  # the option that finds values from measurements
    try:
        original, digest = read_document(path)
        doc = original
        for override in options.overrides:
            doc = set_path(doc, override.path, override.value)
        doc = _without_stale_reason(doc, [*(o.path for o in options.overrides), *(s.path for s in options.sweeps)])
        cal = parse_calibration(doc)
        decompose(cal)  # anchors that conflict are the file's (and --set's) to tell, before an option reads a scenario
        doc, cal = log_measured(doc, cal, options.measured)
        added = cal.measurements[len(cal.measurements) - len(options.measured) :]  # --measured logs them last
        given += [(m.source, "measurements") for m in added]  # errors at a sweep's point say they are there
        fitted = None
        if options.solve and options.observed:
            fitted = solve(doc, cal, options.solve, options.observed)
        elif options.fit:
            fitted = fit(doc, cal, options.fit, cal.measurements)
        if fitted:
            doc, cal = recalibrate(doc, cal, [(parse_path(v.path), v.value) for v in fitted.values])
            given += [(f"{found_by} {v.path}={v.text}", v.path) for v in fitted.values]  # errors say so
            cal = reread(cal, doc, [("ranges",)]) if cal.ranges else cal  # relative ranges follow the values found
        est = estimate(cal)
        record = () if options.sweeps else predictions(cal)  # a sweep's would be of a calibration no point uses
        sens = sensitivity(doc, cal, options.sensitivity) if options.sensitivity else None
        sweep = (
            plan_sweep(doc, cal, options.sweeps, _where(file, given), options.sweep_table) if options.sweeps else None
        )
        top = headline_of(doc, cal, est, options.headline_band, sens)
    except CalibrationError as exc:
        exc.file = exc.file or _where(file, given, exc.path)
        raise
    # a sweep prints its points, not the calibration under them: their warnings, not its
    warnings = list(sweep.warnings) if sweep else [message for _, message in physical_warnings(cal, est.scenarios)]
    warnings += [top.no_band] if top.no_band else []
    studied = scenario_for(cal, options.sensitivity, "--scenario") if options.sensitivity else None
    if studied and not studied.runnable:
        warnings.append(f"--sensitivity of {studied.label}: {studied.not_runnable_reason}; its band is of a run that "
                        "cannot be made")  # fmt: skip
    warnings += fitted.warnings if fitted else ()
    changed = [(o.path, f"--set {o.text}") for o in options.overrides]  # "--set KEY.PATH=VALUE"
    changed += [(s.path, f"--sweep {s.text}") for s in options.sweeps]
    changed += [(parse_path(v.path), f"{found_by} {v.path}") for v in fitted.values] if fitted else []
    measured = tuple(m.source.removeprefix("--measured ") for m in added)
    provenance = Provenance(printable(file), digest, __version__, tuple(printable(o.text) for o in options.overrides),
                            measured)  # fmt: skip
    return Report(
        provenance, est, top, record, rms(p.relative_error for p in record),
        None if options.solve else fitted, fitted if options.solve else None, sens, sweep,
        tuple(dict.fromkeys(warnings)), doc, tuple(changed), original,
    )  # fmt: skip


def _without_stale_reason(doc: object, changed: Sequence[PathSegments]) -> object:
    """The document without `sglang.max_budget_source` where an option changed the budget and not its reason: the
    file's reason is of the file's budget ("fail above budget 8", beside a budget of 16)."""
    budget, reason = ("sglang", "max_budget"), ("sglang", "max_budget_source")
    if budget not in changed or any(at_or_inside(reason, path) for path in changed):
        return doc
    if not isinstance(doc, dict) or not isinstance(sglang := doc.get("sglang"), dict):
        return doc
    return {**doc, "sglang": {key: value for key, value in sglang.items() if key != reason[1]}}


def _where(file: str, given: Sequence[tuple[str, str]], at: str = "") -> str:
    """The file and the options that changed it, (option, key path) each, as an error names where it went wrong:
    every option, or past ten the first ten that set a value rather than a text that documents one, those at the
    key path at fault first, then those in its section, and how many more: 500 --set options made a line of 9,000
    characters."""

    def rank(option: tuple[str, str]) -> tuple[bool, bool, bool]:  # a value, at the key at fault, in its section
        try:
            mine, fault = parse_path(option[1]), parse_path(at)
        except CalibrationError:  # no key path at fault ("", a file's own error)
            mine, fault = parse_path(option[1]) if option[1] else (), ()
        at_fault = bool(fault) and (at_or_inside(mine, fault) or at_or_inside(fault, mine))
        near = mine[:1] == fault[:1]  # in the section at fault: a block of 2 fails its accept lengths
        return bool(mine) and documents(str(mine[-1])), not at_fault, not near

    shown = list(given)
    if len(given) > 10:
        kept = sorted(given, key=rank)[:10]  # a stable sort: in the order given within a rank
        shown = [option for option in given if option in kept]
    more = f" and {plural(len(given) - len(shown), 'more option')}" if len(shown) < len(given) else ""
    return shortened(file) + "".join(f" with {text}" for text, _ in shown) + more


def headline_of(doc: object, cal: Calibration, est: Estimate, band: bool, studied: Sensitivity | None) -> Headline:
    """Today's throughput, the native engine's, the stronger drafter's where it can run, and how sure.

    The band is the whole band when --sensitivity studied the same scenario, else the two corners that are the
    whole band wherever each assumption moves the estimate one way throughout the ranges (see sensitivity).
    """
    by_run = runs(est.scenarios)  # the current drafter's have one accept each
    stronger = {p: by_run["stronger", p] for p in PIPELINES}
    spread, no_band, spec = None, "", ScenarioSpec("stronger", "native", None)
    if band and cal.ranges:
        try:
            middle = f"{SCENARIO_ACCEPTS}[{median_place(drafter_named(cal, 'stronger'))}]"  # the default's accept
            held = studied and studied.spec != spec and any(r.path == middle for r in cal.ranges)
            same = studied and not held and studied.scenario == scenario_for(cal, spec, "--scenario").label
            spread = studied if same else sensitivity(doc, cal, spec, every_corner=False)
        except CalibrationError as exc:  # a range end the calibration cannot take costs the band, not the run
            no_band = f"the headline has no uncertainty band: {exc.path}: {exc.message}"
    runnable = {p: rows for p, rows in stronger.items() if rows[0].runnable}
    return Headline(by_run["current", "sglang"][0], by_run["current", "native"][0], runnable, spread, no_band)


# === Rendering: every renderer formats the report; none calls the model (a sweep's points come from its plan) ===

# How a figure prints, by unit: its format as a result and as a number inside another figure's formula, and
# the unit after it (inside a formula, only for the units that do not cancel: TB/s, GB and MB).
FIGURE_FORMATS = {
    "ms": (".2f", ".3f", " ms"),
    "tok/s": (".0f", ".1f", " tok/s"),
    "x": (".2f", ".3f", ""),  # a speed-up, named "x ..."
    "ratio": (".3f", ".3f", "x"),  # the bandwidth ratio
    "%": (".1%", ".3f", ""),
    "GB": (".2f", ".3f", " GB"),
    "MB": (".2f", ".2f", " MB"),
    "TB/s": ("g", "g", " TB/s"),
    "experts": (".1f", ".2f", ""),
    "tokens": (".2f", ".2f", ""),  # an accept length
    "count": (".0f", ".0f", ""),
    "": (".3f", ".4g", ""),
}


def figure_text(figure: Figure, operand: bool = False, least: int = 3) -> str:
    """A figure as the tables round it ('7.26 ms', '463 tok/s', '86.3%'); a calibration value as given. An operand
    that its places round keeps `least` significant digits: 0.00124 and 3.63, not 0.001 and 3.6."""
    result, inside, unit = FIGURE_FORMATS[figure.unit]
    unit = unit if not operand or figure.unit in ("TB/s", "GB", "MB") else ""
    # a calibration value as written: 0.2000003 as typed, a fitted 0.99999999999 for a cut below 1, not 1
    text = _value_text(figure.value) if figure.path else fixed(figure.value, inside if operand else result)
    digits = text.partition("e")[0].lstrip("+-0.").replace(".", "")  # the significant ones: 1.2e-05 has 2
    if operand and len(digits) < least and float(text) != figure.value:
        text = f"{figure.value:.{least}g}"
    return f"{text}{unit}"


def fixed(value: float, spec: str, deviation: bool = False) -> str:
    """A number in a fixed-point format spec, at a sensible precision: one of 1e9 or more in 3 significant
    digits, with its exponent; a magnitude that is not 0 but would show as 0 in the spec's places in 2 (a
    throughput of 0.082 tok/s, not 0). A deviation (a signed spec, +, a value below 0, or `deviation`: a residual,
    an error, an RMS, an intercept) that shows as 0 is float rounding of 0: +0.0%, not +2.2e-14%.

    >>> fixed(950.4, ".0f"), fixed(0.0816, ".0f"), fixed(2e-5, ".1%"), fixed(0.0, ".2f"), fixed(0.5, "g")
    ('950', '0.082', '0.002%', '0.00', '0.5')
    >>> fixed(1.453e13, "+.0%"), fixed(146260.05, ".2f"), fixed(-2.2e-16, "+.1%"), fixed(-1e-5, ".4f", True)
    ('+1.45e+15%', '146260.05', '+0.0%', '0.0000')
    """
    if spec[-1:] not in ("f", "%") or not math.isfinite(value) or plain(value, spec):
        return format(value, spec)
    sign, shown = "+" if spec.startswith("+") else "", value * 100 if spec.endswith("%") else value
    unit, text = "%" if spec.endswith("%") else "", format(value, re.sub("^([+ -]?)", r"\1z", spec))  # z: no -0
    if len(text.lstrip("+-").split(".")[0].rstrip("%")) >= 10:  # 1e9 or more, rounded: 999999999.99 too
        return f"{shown:{sign}.3g}{unit}"
    if not value or value < 0 or sign or deviation or any(d in text for d in "123456789"):  # below 0: a deviation
        return text
    return f"{shown:.2g}{unit}"


def plain(value: float, spec: str) -> bool:
    """Whether fixed shows a number as format does, told without formatting it: one from 1 to below 1e8 (a share's
    percent), which has a digit that is not 0 and, rounded, fewer than 10 before the point."""
    return 1 <= abs(value) * (100 if spec.endswith("%") else 1) < 1e8


def explain_line(figure: Figure) -> str:
    """name = formula = the formula with each input's value for its name = result, one line of --explain.

    The numbers put in keep as few significant digits as make the formula, worked on them, give the result as
    printed: 9.251697 - 1.99125 - 7.260047 = 0.0004 ms where near-equal numbers cancel, not 9.252 - 1.991 - 7.260.
    """
    texts = worked_inputs(figure)
    numbers = replace_names(figure.formula, {i.name for i in figure.inputs}, lambda name: texts[name])
    return f"  {figure.name} = {figure.formula} = {numbers} = {figure_text(figure)}"


def worked_inputs(figure: Figure, shown: Callable[[Figure], str] = figure_text) -> dict[str, str]:
    """Each input of a figure as its line puts it in, by name: to as few significant digits (3, 5, ... 17) as
    make the formula, worked on them, give the result as `shown` prints it."""
    try:
        compute = _COMPILED.get(figure.formula) or _compile(figure.formula, figure.inputs)
    except SyntaxError:  # a formula told in words (chain alpha's), which nothing here can work
        compute = None
    result = shown(figure)
    for least in (3, 5, 7, 9, 12, 17):
        texts = {i.name: figure_text(i, operand=True, least=least) for i in figure.inputs}
        if compute is None or _worked(figure, compute, texts, shown) == result:
            break
    return texts


def _worked(
    figure: Figure, compute: Callable[[tuple[Figure, ...]], float], texts: dict[str, str],
    shown: Callable[[Figure], str],
) -> str:  # fmt: skip
    """What a figure's formula gives on its numbers as put in ('1.486 GB': 1.486), as printed; "" where they
    divide by 0."""
    as_put = tuple(i._replace(value=float(texts[i.name].split(" ")[0])) for i in figure.inputs)
    try:
        return shown(figure._replace(value=float(compute(as_put))))
    except ArithmeticError:
        return ""


def _swept_text(value: object) -> str:
    """A swept value as its column and messages show it: a float to as many digits as tell it apart from its
    neighbours (0.30000001 beside 0.3, which 6 digits would show alike), anything else as _value_text does."""
    return _describe(value) if isinstance(value, float) else _value_text(value)


def _value_text(value: object) -> str:
    """A value of the calibration or an option as written: 0.4, 32, B300, [12, 14]. A float as typed (0.2000003
    and 7.9999999, which 6 digits would round: its shortest text has at most 12 significant digits), or, where a
    fit or a solve computed it, to 6 digits but not rounded onto a whole number: 0.447526, 0.99999999999.

    >>> _value_text(0.2000003), _value_text(0.4475261537380284), _value_text(0.373654003534036)
    ('0.2000003', '0.447526', '0.373654')
    >>> _value_text(1 - 1e-11), _value_text(1e16), _value_text(1e-320)
    ('0.99999999999', '1e+16', '1e-320')
    """
    if not isinstance(value, float):
        return value if isinstance(value, str) else _json_text(value)
    typed = _describe(value)  # the shortest text that gives it back
    if len(typed.partition("e")[0].lstrip("-0.").replace(".", "")) <= 12:
        return typed
    text = f"{value:g}"
    return repr(value) if float(text).is_integer() and float(text) != value else text


def _json_text(value: object) -> str:
    """JSON, but for a whole number of 16 digits or more, which takes 6: 10^300 is 1e+300, not 301 digits."""
    if isinstance(value, list):
        return f"[{', '.join(map(_json_text, value))}]"
    if isinstance(value, dict):
        return f"{{{', '.join(f'{_json_text(k)}: {_json_text(v)}' for k, v in value.items())}}}"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**15:
        import decimal

        return f"{decimal.Decimal(value).normalize(decimal.Context(prec=6)):g}"
    return json_shown(value)


MARKDOWN_ESCAPES = str.maketrans({c: "\\" + c for c in "\\`*_[]<>|~#&"})  # each with a backslash before it
URL = r"https?://[^\s<>`'\"]+"  # a link: http:// or https:// up to white space, <, >, a backtick or a quote
URL_ESCAPES = str.maketrans({"|": "%7C", "\\": "%5C"})  # the same address, with nothing that ends a cell
PAIRS = (("(", ")"), ("[", "]"))


def _link(url: str) -> str:
    """A URL less what ends the sentence around it: a stop, and a ) or ] it did not open (as GFM reads one)."""
    while url[-1] in ".,:;!?*_~" or any(url[-1] == end and url.count(end) > url.count(start) for start, end in PAIRS):
        url = url[:-1]
    return url


def markdown_text(text: object) -> str:
    r"""Text from the calibration or the command line, escaped for a Markdown cell or paragraph; a link in it is
    written as an autolink, whose text Markdown reads as it is (no emphasis, no [link](elsewhere) in it).

    >>> markdown_text("a|b *c* <b>[d]</b> `e` \\ f_g, see https://x.org/a_b|c*d*.")
    'a\\|b \\*c\\* \\<b\\>\\[d\\]\\</b\\> \\`e\\` \\\\ f\\_g, see <https://x.org/a_b%7Cc*d>\\*.'
    >>> markdown_text("(see https://en.wikipedia.org/wiki/Roofline_(model)), https://x.org's")
    "(see <https://en.wikipedia.org/wiki/Roofline_(model)>), <https://x.org>'s"
    """
    shown = printable(str(text))
    if "://" not in shown:  # a sweep's table may have 100,000 rows
        return shown.translate(MARKDOWN_ESCAPES)
    out, at = [], 0
    for found in re.finditer(URL, shown):
        if found.start() >= at:
            link = _link(found[0])
            out += [shown[at : found.start()].translate(MARKDOWN_ESCAPES), f"<{link.translate(URL_ESCAPES)}>"]
            at = found.start() + len(link)
    return "".join([*out, shown[at:].translate(MARKDOWN_ESCAPES)])


def code_span(text: str) -> str:
    """Text as Markdown code: nothing inside is markup; the fence is one backtick longer than any run inside.

    >>> code_span("a"), code_span("a`b``c")
    ('`a`', '``` a`b``c ```')
    """
    text = printable(text)
    fence = "`" * (1 + max(map(len, re.findall("`+", text)), default=0))
    return f"{fence} {text} {fence}" if len(fence) > 1 else f"`{text}`"


GLUE = "\0"  # a space that wrapping does not break at (text that reaches it is printable: it holds none)


def _kept(text: str) -> str:
    """Text with GLUE where wrapping must not break it, in a paragraph or a table's cell: a range ("7.7 - 8", not
    "7.7 -" above "8", read as a minus), a name and the number it equals ("block+1 = 17", not "block+1 =" above
    "17"), a footnote's mark and the word it marks ("run [1]", not "[1]" alone). A chain of any of them (1 - 2 - 3,
    a = 1 = 2, word [1] [2]) is glued at most a pair, so that no glued word grows longer than two of its own."""
    if " - " in text:
        text = re.sub(r"(?<![\d.])\d[\d.]*+(?: - -?\d[\d.]*+)+", _glued_range, text)  # linear in a long number too
    if " = " not in text and " [" not in text:
        return text

    def glued(pair: re.Match[str]) -> str:
        in_chain = pair["number"] and (text.endswith("= ", 0, pair.start()) or text.startswith(" =", pair.end()))
        return pair[0] if in_chain else pair[0].replace(" ", GLUE)

    # each part matches one way, from the start of a word or at one space: linear in the longest text
    return re.sub(r"(?<!\S)\S++ = (?P<number>-?\d[\d.]*+)|(?<=[^\]\s]) (?=\[\d+\])", glued, text)


def _glued_range(numbers: re.Match[str]) -> str:
    text = numbers.group(0)
    return text.replace(" - ", f"{GLUE}-{GLUE}") if text.count(" - ") == 1 else text


class Style(NamedTuple):
    """How the output is laid out: what the command line and the terminal ask for."""

    tablefmt: str = "simple"
    width: int = 80  # every line of text and table fits it, where a table can be made to
    chart_width: int = 80  # 0: no chart
    ascii_only: bool = False
    everything: bool = False  # --all: every section, not only what a design note needs
    markdown: bool = False
    charset: str | None = None  # the output's encoding, when it cannot write every character: "ascii", "cp437"

    @property
    def under_title(self) -> str:
        """What goes between a title and its table: a blank line where a reader would take a table right under a
        line of text for more of that paragraph (Markdown, reST and Textile)."""
        return "\n\n" if self.markdown or self.tablefmt in ("rst", "github", "pipe", "textile") else "\n"

    def wrap(self, text: str, indent: str = "") -> str:
        """A paragraph broken at word boundaries to the width; in Markdown, one escaped line."""
        if self.markdown:
            return markdown_text(text)
        import textwrap

        kept = _kept(self.written(text))
        lines = textwrap.fill(
            kept, self.width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
        )
        return lines.replace(GLUE, " ")

    def written(self, text: str) -> str:
        r"""Text as the output's encoding can write it, a character it cannot escaped (B\u4e2d), before a line or
        a column is measured: the escape is laid out with the rest."""
        if self.charset is None or text.isascii():
            return text
        return text.encode(self.charset, "backslashreplace").decode(self.charset)


class Column(NamedTuple):
    header: str
    cell: Callable[[Any], object]  # the cell of a row
    fmt: str = ""  # a number format, right-aligned; "" for left-aligned text, "s" for right-aligned text


ONE_LINE_ROWS = ("pipe", "github", "orgtbl", "jira", "rst")  # formats where every line is a row: nothing wraps

# Text in a cell, where a `|` would end the cell or a backslash escape what follows: written as these formats'
# readers read it literally (Markdown's cells are markdown_text's). YouTrack's and MoinMoin's have no reader here.
CELL_ESCAPES = {
    "asciidoc": str.maketrans({"|": r"\|"}),
    "jira": str.maketrans({"|": "&#124;", "\\": "&#92;"}),
    "mediawiki": str.maketrans({"|": "&#124;"}),
    "orgtbl": str.maketrans({"|": r"\vert{}", "\\": r"\backslash{}"}),
    "textile": str.maketrans({"|": "&#124;"}),
}


def table(rows: Iterable[Any], columns: Sequence[Column], style: Style) -> str:
    """A table in any tabulate format: tabulate formats and aligns the numbers, and wraps text to fit the width.

    Only where a cell may take several lines: not in Markdown, Org, Jira or reST tables, HTML, LaTeX, TSV.
    """
    import textwrap

    import tabulate as tabulate_module
    from tabulate import tabulate

    text = [i for i, c in enumerate(columns) if c.fmt in ("", "s")]  # words, which may wrap
    tablefmt = "pipe" if style.markdown else style.tablefmt
    markdown = tablefmt in ("pipe", "github")  # text in a cell is Markdown
    escapes = CELL_ESCAPES.get(tablefmt, {})  # else plain text, with what would end its cell escaped
    wraps = tablefmt in tabulate_module.multiline_formats and tablefmt not in ONE_LINE_ROWS

    def shown(value: object, as_text: bool) -> object:  # text as it lands: one line, escaped; None left empty
        if isinstance(value, str):
            if markdown:
                return markdown_text(value)
            text = printable(value) if style.charset is None else style.written(printable(value))
            return text.translate(escapes) if escapes else text  # a sweep's table may have 100,000 rows
        return value if value is None or not as_text else str(value)

    cells = [[shown(c.cell(row), not c.fmt) for c in columns] for row in rows]

    def as_text(i: int, fmt: str) -> bool:
        """Whether a column's numbers go as text, formatted here: every one in "pretty", where tabulate parses no
        numbers and so formats none; elsewhere, a column with a number its places would show wrongly (see fixed)."""
        if fmt in ("", "s"):  # text already
            return False
        if tablefmt == "pretty":
            return True
        return fmt[-1:] in ("f", "%") and any(
            isinstance(v := r[i], float) and not plain(v, fmt) and fixed(v, fmt) != format(v, fmt) for r in cells
        )

    shown_fixed = [i for i, c in enumerate(columns) if as_text(i, c.fmt)]
    for r, i in itertools.product(cells, shown_fixed):
        fmt, v = columns[i].fmt, r[i]
        r[i] = fixed(v, fmt) if isinstance(v, float) else format(v, fmt) if isinstance(v, int) else v
    headers = [str(shown(c.header, True)) for c in columns]
    every: list[Sequence[object]] = [*cells, headers]
    width = {i: max(len(str(r[i] or "")) for r in every) for i in text}  # of each text column, as it stands
    # the least width of a text column: its longest word, its header (tabulate does not wrap those), or 12
    kept = {i: [_kept(c) if isinstance(c := r[i], str) else c for r in cells] for i in text}  # as wrapping sees them
    least = {i: max([12, len(headers[i]), *(len(w) for c in kept[i] for w in str(c or "").split())]) for i in text}
    wrapped = {i: [r[i] for r in cells] for i in text}  # its cells at that width
    while True:
        # a column as wide as its widest cell or header, which stand apart already: for this table, not a caller's
        padding, tabulate_module.MIN_PADDING = tabulate_module.MIN_PADDING, 0
        try:
            out: str = tabulate(
                [[wrapped[i][k] if i in wrapped else c for i, c in enumerate(row)] for k, row in enumerate(cells)],
                headers=headers, tablefmt=tablefmt, missingval="",
                floatfmt=[c.fmt or "g" for c in columns], colalign=["right" if c.fmt else "left" for c in columns],
                disable_numparse=text + shown_fixed if cells else True,  # tabulate fails on columns without rows
            )  # fmt: skip
        finally:
            tabulate_module.MIN_PADDING = padding
        excess = max(map(len, out.splitlines()), default=0) - style.width
        narrower = [i for i in text if width[i] > least[i]]
        if excess <= 0 or not wraps or not narrower:
            return out
        # wrap the widest text column that is wider than its least, so far as that allows;
        # textwrap, not tabulate's maxcolwidths: several times faster on long text (tabulate's wrapper
        # measures every word with a regular expression), and it wraps only the column that changed
        widest = max(narrower, key=width.__getitem__)
        width[widest] = max(least[widest], width[widest] - excess)
        fill = functools.partial(textwrap.fill, width=width[widest], break_long_words=False, break_on_hyphens=False)
        wrapped[widest] = [fill(cell).replace(GLUE, " ") if isinstance(cell, str) else cell for cell in kept[widest]]


class Section(NamedTuple):
    name: str  # a heading: "Calibration"
    title: str  # what the table holds
    body: str  # a table, and any lines under it


def _header_line(report: Report, tie: str = " ") -> str:
    """The provenance line every output carries: tool version, calibration file and hash, overrides, and the
    throughputs --measured logged, the sweeps (a grid's "A by B") and the values --fit or --solve found, so that
    the line says how to run it again.
    `tie` follows each label (sha256, overrides:, ...): GLUE keeps the label on the line of what it names."""
    prov = report.provenance
    overrides = ", ".join(map(_listed, prov.overrides)) or "none"
    file = f"{prov.calibration_file}, sha256{tie}{prov.calibration_sha256}"
    line = f"estimate_b300 {prov.tool_version}; {file}; overrides:{tie}{overrides}"
    line += f"; measured:{tie}{', '.join(prov.measurements_added)}" if prov.measurements_added else ""
    line += f"; swept:{tie}{' by '.join(printable(s.text) for s in report.sweep.sweeps)}" if report.sweep else ""
    if sol := report.solve:
        (found,), (seen,) = sol.values, sol.before
        line += f"; solved:{tie}{found.path} for {seen.measurement.label}={_describe(seen.measurement.tok_s)}"
    elif report.fit:
        line += f"; fitted:{tie}{', '.join(v.path for v in report.fit.values)}"
    return line


def _listed(option: str) -> str:
    """An option's value as a list of them shows it: as typed, or quoted as a shell would take it where it holds
    what would split the list or the line (hardware.target.name=H200, 141 GB)."""
    if ", " not in option and ";" not in option and option.strip() == option:
        return option
    import shlex

    return shlex.quote(option)


def _title(report: Report) -> str:
    name = ("hardware", "target", "name")  # a sweep of it, or of an object that holds it, varies the target
    if report.sweep and any(at_or_inside(name, s.path) for s in report.sweep.sweeps):
        return "Kimi K2.x + DDTree at concurrency 1 on each target GPU swept"
    return f"Kimi K2.x + DDTree at concurrency 1 on {report.estimate.calibration.hardware.target.name}"


def _measured(cal: Calibration) -> str:
    return f"measured on {cal.anchors.measured_on}" if cal.anchors.measured_on else "measured"


def _spread(values: Sequence[float], fmt: str) -> str:
    """'815-1086', or one value when they are all the same; '3.8e-11 to 5.1e-11', where a dash would read as a
    minus or run into an exponent."""
    low, high = fixed(min(values), fmt), fixed(max(values), fmt)
    return low if low == high else f"{low} to {high}" if "-" in low + high or "e" in low + high else f"{low}-{high}"


def _change(share: float) -> str:
    """A relative change to whole percents, or to a tenth below half a percent: -0.1%, not -0%."""
    return fixed(share, "+.0%" if abs(share) >= 0.005 else "+.1%")


def range_texts(report: Report, row: SensitivityRow) -> tuple[str, str, str]:
    """A value in force and its range's ends, as a line or a table prints them (see _against)."""
    return _against(row.value, row.low, row.high, report.estimate.calibration.domains.get(row.path))


CHANGED_HOW = {"--solve": "solved", "--fit": "fitted", "--sweep": "swept", "--set": "set"}  # an option, in a word
TODAY, TODAY_ACCEPT = ("anchors", "ddtree", "tok_s"), ("anchors", "ddtree", "accept")  # the DDTree step's inputs
TODAY_BUDGET = ("anchors", "ddtree", "budget")  # and the tree today's row, and its M, are at


def _changed_how(report: Report, *paths: PathSegments) -> str:
    """How options changed some numbers, each itself or the object around it, in words ("solved", "set and fitted"),
    or "" where none did."""
    options = [o for p, o in report.changed for path in paths if at_or_inside(path, p)]
    words = [word for option in options for start, word in CHANGED_HOW.items() if option.startswith(start)]
    return " and ".join(dict.fromkeys(words))


def point_basis(report: Report, point: CurvePoint) -> str:
    """A curve point's basis ("measured", "inferred", "assumed"), or how options changed its time or M ("set")."""
    at = ("moe_curve", "points", point.position)
    return _changed_how(report, (*at, "ms"), (*at, "m")) or point.basis


def _anchor_basis(report: Report, *paths: PathSegments) -> str:
    """Where an anchor's figure comes from: measured (on B300), or the options that changed the values it rests on."""
    return _changed_how(report, *paths) or _measured(report.estimate.calibration)


def _taken_on(report: Report) -> str:
    """' on B300' where measurements are predicted on the GPU the anchors were measured on, another than the target
    (see predictions); else ''."""
    elsewhere = report.estimate.calibration.anchors.elsewhere
    return f" on {elsewhere.name}" if elsewhere and report.estimate.decomposition.anchors_ratio else ""


def headline_lines(report: Report) -> list[str]:
    """Three to five lines: today's throughput, the native engine's, the stronger drafter's, how sure, and how
    well the model predicted the logged measurements."""
    h, cal = report.headline, report.estimate.calibration
    cut = cal.native_engine.overhead_cut
    removed = fixed(cut, ".0%")
    removed = f"{_apart(100 * cut, 100)}%" if removed == "100%" and cut < 1 else removed  # 99.6%, not 100%
    measured = fixed(report.estimate.decomposition.today.value, ".0f")  # the anchor's tok/s
    accept, how = _value_text(h.today.accept), _changed_how(report, TODAY_ACCEPT)
    today = f"Today: {measured} tok/s, {_anchor_basis(report, TODAY)} (current drafter on SGLang, accept {accept}"
    today += f", {how})" if how else ")"
    if not h.today.measured:  # on another target than the anchors': today's x is over the measured throughput
        today += f"; on {cal.hardware.target.name} the same gives {fixed(h.today.tok_s, '.0f')} tok/s"
    lines = [
        f"{today}.",
        f"The native engine with today's drafter: {fixed(h.native.tok_s, '.0f')} tok/s, "
        f"{fixed(h.native.vs_today, '.2f')}x today, if it removes {removed} of the time outside the MoE.",
    ]
    rows = [r for pipeline_rows in h.stronger.values() for r in pipeline_rows]  # native always runs it
    on = "; ".join(
        f"{_spread([r.tok_s for r in group], '.0f')} tok/s on {'the ' if p == 'native' else ''}{PIPELINE_LABELS[p]}, "
        f"{_spread([r.vs_today for r in group], '.2f')}x today"
        for p, group in h.stronger.items()
    )
    cannot = [PIPELINE_LABELS[p] for p in PIPELINES if p not in h.stronger]
    but = f" ({' and '.join(cannot)} cannot run its budget of {rows[0].budget})" if cannot else ""
    lines.append(f"The stronger drafter at accept {_spread([r.accept for r in rows], 'g')}: {on}{but}.")
    if b := h.band:
        off = [f"{r.path} = {value} is outside {low} to {high}" for r in b.rows if r.outside
               for value, low, high in [range_texts(report, r)]]  # fmt: skip
        outside = f" The band spans the ranges, not the values in force: {'; '.join(off)}." if off else ""
        lines.append(
            f"Uncertainty: over the ranges in the calibration, {b.scenario} ({fixed(b.tok_s, '.0f')} tok/s) spans "
            f"{fixed(b.tok_s_min, '.0f')} to {fixed(b.tok_s_max, '.0f')} tok/s "
            f"({_change(b.tok_s_min / b.tok_s - 1)} / {_change(b.tok_s_max / b.tok_s - 1)}).{outside}"
        )
    if record := report.track_record:
        at = " at the fitted values" if report.fit else " at the solved value" if report.solve else ""
        worst = max(record, key=lambda p: abs(p.relative_error))
        error = report.track_record_rms or 0.0
        logged = f"the {plural(len(record), 'measurement')}"
        lines.append(
            f"Track record: the model predicts {logged}{_taken_on(report)}{at} within "
            f"{fixed(error, '.1%', deviation=True)} RMS (worst: "
            f"{worst.measurement.label}, {fixed(worst.relative_error, '+.1%')})."
        )
    return lines


def calibration_section(report: Report, style: Style) -> Section:
    est = report.estimate
    dec, cal = est.decomposition, est.calibration
    ref, tgt = cal.hardware.reference, cal.hardware.target

    def curve_basis(moe: MoeTime) -> str:
        point = next((p for p in cal.moe_curve.points if p.m == moe.m), None)
        if est.experts_fit:
            return "experts fit"
        return (
            f"{point_basis(report, point)} point" if point else "extrapolated" if moe.extrapolated else "interpolated"
        )

    basis = {
        "AR step": _anchor_basis(report, ("anchors", "ar_tok_s")),
        "DDTree step": _anchor_basis(report, TODAY, TODAY_ACCEPT),
        dec.moe_ar.time.name: curve_basis(dec.moe_ar), dec.moe_ddtree.time.name: curve_basis(dec.moe_ddtree),
    }  # fmt: skip
    figures = (dec.ar_step, dec.moe_ar.time, dec.attn_base, dec.ddtree_step, dec.moe_ddtree.time, dec.spec,
               dec.overhead)  # fmt: skip
    shares = {name: f.value for name, f in dec.shares.items()}  # MoE(budget+1) has one, never MoE(1): budgets are >= 1
    columns = [
        Column("figure", lambda f: f.name),
        Column("formula", lambda f: f.formula),
        Column("ms", lambda f: f.value, ".2f"),
        Column("share", lambda f: shares.get(f.name), ".1%"),
        Column("basis", lambda f: basis.get(f.name, "derived")),
    ]
    title = (
        f"Calibration, in ms, with each part's share of the DDTree step: MoE scales by the bandwidth ratio "
        f"{tgt.name} / {ref.name} = {_value_text(tgt.mem_bandwidth_tb_s)} / {_value_text(ref.mem_bandwidth_tb_s)} "
        f"TB/s = {figure_text(dec.bandwidth_ratio)}"
    )
    if (elsewhere := cal.anchors.elsewhere) and dec.anchors_ratio:  # their MoE, their overhead
        title += (
            f"; the anchors, measured on {elsewhere.name}, are split at its ratio "
            f"{_value_text(elsewhere.mem_bandwidth_tb_s)} / {_value_text(ref.mem_bandwidth_tb_s)} TB/s = "
            f"{figure_text(dec.anchors_ratio)}, and the estimate keeps their ATTN_BASE and SPEC"
        )
    body = table(figures, columns, style)
    if fit := est.experts_fit:
        residuals = ", ".join(f"M={m}: {r:+.3f}" for m, r in fit.residuals_ms)
        body += "\n\n" + style.wrap(
            f"MoE(M) is read from the experts fit fit(M) = {fit.t0.value:.4g} + {fit.t_expert.value:.4g} x "
            f"distinct(M) ms, least squares over the curve (residuals in ms: {residuals})."
        )
    return Section("Calibration", title, body)


def drafter_sections(report: Report, style: Style) -> list[Section]:
    cal, rows = report.estimate.calibration, report.estimate.scenarios
    footnote = _footnotes(rows)

    def basis(row: Scenario) -> str:
        if not row.runnable:
            return f"cannot run{footnote(row)}"
        return _anchor_basis(report, TODAY, TODAY_ACCEPT, TODAY_BUDGET) if row.measured else "estimate"

    columns = [
        Column("pipeline", lambda r: PIPELINE_LABELS[r.pipeline].removesuffix(" engine")),
        Column("accept", lambda r: r.accept, "g"),
        Column("MoE", lambda r: fixed(r.moe_ms, ".2f") + ("*" if r.moe_extrapolated else ""), "s"),
        Column("ATTN_BASE", lambda r: r.attn_base_ms, ".2f"),
        Column("SPEC", lambda r: r.spec_ms, ".2f"),
        Column("step", lambda r: r.step_ms, ".2f"),
        Column("tok/s", lambda r: r.tok_s, ".0f"),
        Column("x today", lambda r: r.vs_today, ".2f"),
        Column("basis", basis),
    ]
    current, stronger = ([r for r in rows if r.drafter == d] for d in DRAFTERS)
    dd, sd = cal.anchors.ddtree, cal.stronger_drafter
    return [
        Section(
            "Current drafter",
            f"Current drafter: block {dd.block}, budget {dd.budget}, verify batch M = {current[0].m}; times in ms",
            table(current, columns, style),
        ),
        Section(
            "Stronger drafter", f"Stronger drafter: block {sd.block}, budget {sd.budget}, M = {stronger[0].m}; "
            f"ATTN_BASE x {_value_text(sd.attn_base_scale)}, SPEC x {_value_text(sd.spec_scale)}",
            table(stronger, columns, style),
        ),
    ]  # fmt: skip


def _reasons(rows: Iterable[Scenario]) -> list[str]:
    """Why some scenarios cannot run, each reason once: the footnotes [1], [2], ..."""
    return list(dict.fromkeys(r.not_runnable_reason for r in rows if r.not_runnable_reason))


def _footnotes(rows: Iterable[Scenario]) -> Callable[[Scenario], str]:
    """A scenario's footnote mark among `rows`, " [1]", numbered as the notes number them; "" if it can run."""
    reasons = _reasons(rows)
    return lambda row: f" [{reasons.index(row.not_runnable_reason) + 1}]" if row.not_runnable_reason else ""


def chain_alpha_section(report: Report, style: Style) -> Section:
    rows = [r for r in report.estimate.scenarios if r.pipeline == PIPELINES[0]]  # the same on every pipeline
    columns = [
        Column("drafter", lambda r: r.drafter),
        Column("block", lambda r: r.block, "d"),
        Column("accept", lambda r: r.accept, "g"),
        Column("chain alpha", lambda r: r.chain_alpha, ".3f"),
    ]
    title = "What each accept length demands of the drafter: chain alpha (see the notes)"
    return Section("Chain alpha", title, table(rows, columns, style))


def break_even_section(report: Report, style: Style) -> Section:
    versus = {"current": "current drafter", "autoregressive": "autoregressive"}
    rows, scenarios = report.estimate.break_even, report.estimate.scenarios
    footnote = _footnotes(scenarios)  # a pipeline that cannot run the stronger tree: marked as its table marks it
    cannot = {r.pipeline: footnote(r) for r in scenarios if r.drafter == "stronger"}
    columns = [
        Column("pipeline", lambda b: PIPELINE_LABELS[b.pipeline] + cannot.get(b.pipeline, "")),
        Column("versus", lambda b: versus[b.versus]),
        Column("tok/s to match", lambda b: b.tok_s_to_match, ".0f"),
        Column("accept needed", lambda b: b.accept, ".2f"),
        *([Column("note", lambda b: b.reason)] if any(b.reason for b in rows) else []),
    ]
    title = (
        "Break-even: the accept length at which the stronger drafter matches another way of decoding on the same "
        "pipeline"
    )
    return Section("Break-even", title, table(rows, columns, style))


def roofline_figure(roof: tuple[RooflinePoint, ...], name: str) -> Figure:
    """A figure that every curve point's read shares ("MoE layers", "expert MB"), from the first one's derivation."""
    return next(f for f in derivation(*roof[0].figures) if f.name == name)


def physical_sections(report: Report, style: Style) -> list[Section]:
    est = report.estimate
    cal, model, roof = est.calibration, est.calibration.model, est.roofline
    if model is None or roof is None:
        return [
            Section(
                "Physical cross-check", "Physical cross-check: left out, the calibration has no `model` section.", ""
            )
        ]
    ref, tgt = cal.hardware.reference, cal.hardware.target
    expert, layers = roofline_figure(roof, "expert MB"), roofline_figure(roof, "MoE layers")
    points = {p.m: p for p in cal.moe_curve.points}  # each M once
    shared = ", shared expert included at 16 bits" if model.curve_includes_shared_expert else ""
    title = (
        f"Physical cross-check, under uniform routing (each token picks {model.experts_per_token} of "
        f"{model.routed_experts} experts independently): {layers.value:g} MoE layers, one routed "
        f"expert {figure_text(expert)}, TP {cal.moe_curve.tp}{shared}. Each curve point against {ref.name}'s "
        f"{_value_text(ref.mem_bandwidth_tb_s)} TB/s peak."
    )
    columns = [
        Column("M", lambda p: p.m, "d"),
        Column("basis", lambda p: point_basis(report, points[p.m])),
        Column("curve ms", lambda p: f"{p.ms:g}", "s"),
        Column("experts", lambda p: p.distinct_experts, ".1f"),
        Column("GB per GPU", lambda p: p.bytes_per_gpu / 1e9, ".2f"),
        Column("peak ms", lambda p: p.peak_ms, ".2f"),
        Column("efficiency", lambda p: p.efficiency, ".1%"),
    ]
    footnote = _footnotes(est.scenarios)  # a scenario that cannot run, marked as in the drafter tables
    floors = [
        Column("scenario", lambda r: r.label + footnote(r)),
        Column("M", lambda r: r.m, "d"),
        Column("floor ms", lambda r: r.moe_floor_ms, ".2f"),
        Column("step ms", lambda r: r.step_ms, ".2f"),
        Column("tok/s", lambda r: r.tok_s, ".0f"),
        Column("ceiling tok/s", lambda r: r.tok_s_ceiling, ".0f"),
        Column("of ceiling", lambda r: r.figures["of ceiling"].value, ".1%"),
    ]
    floor_title = (
        f"The MoE floor: the weight read at 100% of {tgt.name}'s {_value_text(tgt.mem_bandwidth_tb_s)} TB/s, and "
        "the tok/s ceiling if everything else took no time"
    )
    return [
        Section("Physical cross-check", title, table(roof, columns, style)),
        Section("The MoE floor", floor_title, table(est.scenarios, floors, style)),
    ]


def sensitivity_section(report: Report, style: Style) -> Section:
    sens = report.sensitivity
    assert sens is not None
    columns = [
        Column("assumption", lambda r: r.path),
        Column("in force", lambda r: range_texts(report, r)[0], "s"),
        Column("range", lambda r: " to ".join(range_texts(report, r)[1:]), "s"),
        Column("tok/s at low", lambda r: r.tok_s_at_low, ".0f"),
        Column("tok/s at high", lambda r: r.tok_s_at_high, ".0f"),
        Column("swing", lambda r: r.swing, ".0f"),
        Column("source", lambda r: _changed_source(report, ("ranges", *parse_path(r.path)), r.source)),
    ]
    title = (
        f"Sensitivity of {sens.scenario} ({fixed(sens.tok_s, '.0f')} tok/s): each assumption at either end of its "
        "range, the others as in force"
    )
    band = style.wrap(
        f"Band: {fixed(sens.tok_s_min, '.0f')} to {fixed(sens.tok_s_max, '.0f')} tok/s over all {sens.combinations} "
        "combinations of the range ends; a what-if range, not a statistical interval."
    )
    wide = table(sens.rows, columns, style._replace(width=10**6))  # a wide table: its sources are sentences
    return Section("Sensitivity", title, f"{wide}\n\n{band}")


def sweep_section(report: Report, style: Style) -> Section:
    """A row per point: the swept values, then for each drafter and pipeline its step and its tok/s by accept,
    side by side, so that a step's mark (extrapolated, cannot run) stands beside the throughputs it gives."""
    assert report.sweep is not None
    columns = [  # a column of numbers right-aligned, as numbers are everywhere
        Column(
            format_path(sweep.path), operator.itemgetter(i), "s" if all(v in ANY_NUMBER for v in sweep.values) else ""
        )
        for i, sweep in enumerate(report.sweep.sweeps)
    ]
    where: dict[str, int] = {}  # a column's header -> its place
    every = report.sweep.names  # each scenario of any point, and so each drafter on each pipeline, in order met
    drafter_runs = list(dict.fromkeys((d, p) for d, p, _ in every))
    for d, p, label in sorted(every, key=lambda name: drafter_runs.index(name[:2])):  # accept lengths in order met
        for header, fmt in ((f"{d}/{p} step ms", "s"), (f"{label} tok/s", ".0f")):
            if header not in where:
                where[header] = len(columns)
                columns.append(Column(header, operator.itemgetter(len(columns)), fmt))
    rows, names, places = [], None, []  # the places of each scenario's step and tok/s, for the row's names
    footnote = {reason: i for i, (reason, _) in enumerate(report.sweep.cannot_run, 1)}  # as the notes number them
    for row in report.sweep.rows():
        if row.names is not names:  # held once for rows alike; every name is among the sweep's, placed above
            names = row.names
            places = [(where[f"{d}/{p} step ms"], where[f"{label} tok/s"]) for d, p, label in names]
        cells: dict[int, object] = {i: _swept_text(v) for i, (_, v) in enumerate(row.values)}
        for (step_at, tok_s_at), (step_ms, extrapolated, tok_s, reason) in zip(places, row.numbers, strict=True):
            cannot = f" [{footnote[reason]}]" if reason else ""
            cells[step_at], cells[tok_s_at] = f"{fixed(step_ms, '.2f')}{'*' if extrapolated else ''}{cannot}", tok_s
        rows.append([cells.get(i) for i in range(len(columns))])  # every column is placed: a row of each
    title = f"Sweep: {plural(report.sweep.size, 'point')}"
    return Section("Sweep", title, table(rows, columns, style._replace(width=10**6)))


def solve_section(report: Report, style: Style) -> Section:
    sol = report.solve
    assert sol is not None
    (found,), (seen,) = sol.values, sol.before
    title = (
        f"Solved: {found.path} = {found.text} (was {found.previous_text}) brings "
        f"{seen.measurement.label}{_taken_on(report)} to the observed {_describe(seen.measurement.tok_s)} tok/s; "
        f"{sol.method}. Every figure below uses it."
    )
    others = ", ".join(number_text(v, found.domain) for v in sol.other_roots)
    return Section(
        "Solved", title, f"Other values fit too: {others} (the estimate is not monotonic in it)." if others else ""
    )


def fitted_texts(v: FitValue) -> tuple[str, str, str]:
    """A value found and its range's ends, as the fit's table prints them (see _against); no range, no ends."""
    return _against(v.value, v.range.low, v.range.high, v.domain) if v.range else (v.text, "", "")


def fit_section(report: Report, style: Style) -> Section:
    """The fitted values, then every measurement before and after the fit, with its leave-one-out residual."""
    fit = report.fit
    assert fit is not None
    values = [
        Column("assumption", lambda v: v.path),
        Column("before", lambda v: v.previous_text, "s"),
        Column("fitted", lambda v: fitted_texts(v)[0], "s"),
        Column("range", lambda v: " to ".join(fitted_texts(v)[1:]) if v.range else "", "s"),
    ]
    left_out = len(fit.before) > len(fit.values)
    measurements = [  # a row: (prediction before, prediction after, leave-one-out residual)
        Column("measurement", lambda r: r[0].measurement.label),
        Column("tok/s", lambda r: r[0].measurement.tok_s, ".1f"),
        Column("before", lambda r: r[0].predicted_tok_s, ".1f"),
        Column("after", lambda r: r[1].predicted_tok_s, ".1f"),
        Column("error", lambda r: r[1].relative_error, "+.1%"),
        Column("residual", lambda r: r[1].residual, "+.4f"),
        *([Column("left out", lambda r: r[2], "+.4f")] if left_out else []),
    ]
    rows = list(zip(fit.before, fit.after, fit.loo_residuals, strict=True))
    title = (
        f"Fit of {plural(len(fit.values), 'value')} to {plural(len(fit.before), 'measurement')}: "
        f"{fit.method}; RMS error {fixed(fit.rms_before or 0.0, '.1%', deviation=True)} before, "
        f"{fixed(fit.rms_after or 0.0, '.1%', deviation=True)} after. Every figure below "
        "uses the fitted values."
    )
    key = (
        "tok/s: measured; before, after: predicted with the values before and after the fit; error: after / "
        "measured - 1; residual: ln(after / measured)"
    )
    if left_out:
        key += "; left out: the residual when the fit is made without that measurement (empty where it cannot be)"
    if fit.other_roots:
        key += f"; other values fit too: {', '.join(f'{v:.6g}' for v in fit.other_roots)} (not monotonic in it)"
    caption = style.wrap(
        f"Each measurement, as the model predicts it{_taken_on(report)} with the values before and after the fit:"
    )
    caption += style.under_title  # a title above its table, as a section's is
    body = (
        f"{table(fit.values, values, style)}\n\n{caption}{table(rows, measurements, style)}\n\n{style.wrap(key + '.')}"
    )
    return Section("Fit", title, body)


def measurements_section(report: Report, style: Style) -> Section:
    """The model's track record: each logged measurement beside its prediction."""
    columns = [
        Column("measurement", lambda p: p.measurement.label),
        Column("M", lambda p: p.m, "d"),
        Column("accept", lambda p: p.measurement.accept, "g"),
        Column("tok/s", lambda p: p.measurement.tok_s, ".1f"),
        Column("predicted", lambda p: p.predicted_tok_s, ".1f"),
        Column("error", lambda p: p.relative_error, "+.1%"),
        Column("source", lambda p: p.measurement.source),
    ]
    error = report.track_record_rms or 0.0
    title = (
        f"Measurements: the model's track record{_taken_on(report)}, {fixed(error, '.1%', deviation=True)} RMS; "
        "tok/s measured and predicted, error = predicted / measured - 1"
    )
    return Section("Measurements", title, table(report.track_record, columns, style))


def sections(report: Report, style: Style) -> list[Section]:
    """The tables a design note needs, in the order every format prints them, before the chart (more_sections:
    what --all adds after it)."""
    parts = [solve_section(report, style)] if report.solve else []
    parts += [fit_section(report, style)] if report.fit else []
    if report.sweep is not None:
        parts.append(sweep_section(report, style))
    else:
        parts += [calibration_section(report, style), *drafter_sections(report, style)]
    return parts + ([sensitivity_section(report, style)] if report.sensitivity else [])


def more_sections(report: Report, style: Style) -> list[Section]:
    """What --all adds, after the chart."""
    if not style.everything:  # --all and --sweep are a usage error together
        return []
    parts = [break_even_section(report, style), chain_alpha_section(report, style), *physical_sections(report, style)]
    return parts + ([measurements_section(report, style)] if report.track_record and not report.fit else [])


def notes(report: Report, style: Style) -> list[str]:
    """The footnotes the printed sections need, each a sentence or two."""
    est, sens = report.estimate, report.sensitivity
    cal, rows = est.calibration, est.scenarios
    ms = cal.moe_curve.points.batches
    extrapolated = report.sweep.extrapolated if report.sweep else sorted({r.m for r in rows if r.moe_extrapolated})
    found = []
    curve_swept = report.sweep is not None and any(s.path[0] == "moe_curve" for s in report.sweep.sweeps)
    if extrapolated:  # a swept curve differs from point to point: it has no one range of M to name
        read = "read along its nearest end segment" if cal.moe_curve.fit == "linear" else "read from the experts fit"
        outside = " at some points" if curve_swept else f"'s M = {ms[0]}..{ms[-1]}, {read}"
        found.append(f"* MoE extrapolated: M = {', '.join(map(str, extrapolated))} lies outside the curve{outside}.")
    if report.sweep is None:
        found += [f"[{i}] {reason}." for i, reason in enumerate(_reasons(rows), 1)]
        today = _value_text(est.decomposition.today.value)
        found.append(f"x today: tok/s over today's {today} tok/s, {_anchor_basis(report, TODAY)}.")
    else:  # a step is marked [i] at each point where its pipeline cannot run the tree
        size = plural(report.sweep.size, "point")
        found += [f"[{i}] at {n:,} of {size}: {why}." for i, (why, n) in enumerate(report.sweep.cannot_run, 1)]
    if style.everything:
        found.append(
            "chain alpha: the per-token acceptance rate a single chain as deep as the block needs for that accept "
            "length, (1 - a^(block+1)) / (1 - a) = accept (Leviathan et al., 2023); a tree reaches it with less."
        )
    named = {r.path for r in report.headline.band.rows if r.outside} if report.headline.band else set()
    found += [  # what the headline has not said already
        f"{r.path} = {value} lies outside its range {low} to {high}."
        for r in (sens.rows if sens else ())
        if r.outside and r.path not in named
        for value, low, high in [range_texts(report, r)]
    ]
    if not report.headline.band and report.sweep is None:
        no_band = "the ranges in the calibration give no band (see the warning)"
        band = no_band if report.headline.no_band else "a `ranges` section in the calibration gives a band"
        found.append(
            "Every row but the measured one is an estimate: the non-MoE split, the native cut and the stronger "
            f"drafter's cost and accept lengths are assumptions; {band}."
        )
    if not style.everything and report.sweep is None:
        adds = ["break-even", "chain alpha", *(["the physical cross-check", "the MoE floor"] if cal.model else [])]
        adds += ["the measurements table"] if report.track_record and not report.fit else []
        found.append(f"--all adds {', '.join(adds[:-1])} and {adds[-1]}.")
    return found


# --- The breakdown chart ---

CHART_FILLS = {False: ("\u2588", "\u2592", "\u2591"), True: ("#", "=", ".")}  # MoE, ATTN_BASE, SPEC


def chart_bars(scenarios: Sequence[Scenario]) -> list[tuple[str, Scenario, str]]:
    """One bar per drafter and pipeline: the step does not depend on the accept length. (label, row, tok/s)."""
    return [(f"{d}/{p}", rows[0], _spread([r.tok_s for r in rows], ".0f")) for (d, p), rows in runs(scenarios).items()]


def breakdown_chart(scenarios: Sequence[Scenario], columns: int, ascii_only: bool) -> str:
    """One stacked bar per drafter and pipeline, all on one time scale, fitting in `columns`.

    Segment ends are rounded on the running total, so each bar is as long as its whole step.
    """
    fills, bars = CHART_FILLS[ascii_only], chart_bars(scenarios)
    footnote = _footnotes(scenarios)
    steps = [f"{fixed(row.step_ms, '.2f')} ms" for _, row, _ in bars]
    rates = [f"{tok_s} tok/s{footnote(row)}" for _, row, tok_s in bars]
    ends = [f"{s:>{max(map(len, steps))}} {r:>{max(map(len, rates))}}" for s, r in zip(steps, rates, strict=True)]
    label_width = max(len(label) for label, _, _ in bars)
    bar_width = max(columns - label_width - len(ends[0]) - 2, 10)
    ms_per_column = max(row.step_ms for _, row, _ in bars) / bar_width
    legend = " ".join(f"[{fill}] {part}" for fill, part in zip(fills, ("MoE", "ATTN_BASE", "SPEC"), strict=True))
    scale = fixed(ms_per_column, ".3f") if ms_per_column >= 1 else f"{ms_per_column:#.3g}"  # 0.00125, not 0.001
    lines = [f"Step time, {scale} ms a column: {legend}"]
    for (label, row, _), end in zip(bars, ends, strict=True):
        bar, done, total = "", 0, 0.0
        for fill, part_ms in zip(fills, (row.moe_ms, row.attn_base_ms, row.spec_ms), strict=True):
            total += part_ms
            upto = round(total / ms_per_column)
            bar, done = bar + fill * (upto - done), upto
        lines.append(f"{label:<{label_width}} {bar:<{bar_width}} {end}")
    return "\n".join(lines)


def mermaid_chart(scenarios: Sequence[Scenario]) -> str:
    """The breakdown as a Mermaid xychart, one bar per drafter and pipeline.

    Mermaid draws bar series over one another, not stacked: each series is a running total, longest first,
    named for the segment that shows of it.
    """
    bars, footnote = chart_bars(scenarios), _footnotes(scenarios)
    # Mermaid reads no exponent: a step past 0.01 to 999,999 ms is drawn in a unit of its own power of ten
    # (1e-5 ms), every value to the places that give the longest step 3 significant digits (2 to 4; a part
    # too short to show in them is too short to see), and the axis to its leading digit, rounded up.
    power = math.floor(math.log10(max(row.step_ms for _, row, _ in bars)))
    power = power if not -2 <= power <= 5 else 0
    unit = "ms" if not power else f"1e{power} ms"
    series = [
        (name, [ms / 10.0**power for ms in values]) for name, values in (
            ("SPEC", [row.step_ms for _, row, _ in bars]),
            ("ATTN_BASE", [row.moe_ms + row.attn_base_ms for _, row, _ in bars]),
            ("MoE", [row.moe_ms for _, row, _ in bars]),
        )
    ]  # fmt: skip
    top = max(series[0][1])
    places, digit = max(2, 2 - math.floor(math.log10(top))), 10.0 ** min(math.floor(math.log10(top)), 0)
    labels = ", ".join(f'"{label}{footnote(row)}"' for label, row, _ in bars)  # a run that cannot be made, marked
    return "\n".join([
        "```mermaid",
        "xychart-beta horizontal",
        f'    title "Step time ({unit})"',
        f"    x-axis [{labels}]",
        f'    y-axis "{unit}" 0 --> {math.ceil(top / digit) * digit:.{places if digit < 1 else 0}f}',
        *(f'    bar "{name}" [{", ".join(f"{v:.{places}f}" for v in values)}]' for name, values in series),
        "```",
    ])  # fmt: skip


# --- The formats: text, Markdown, JSON, CSV, --explain ---


def render_tables(report: Report, style: Style) -> Iterable[str]:
    parts = [f"{style.wrap(_header_line(report, GLUE), '  ')}\n{style.wrap(_title(report), '  ')}"]
    if report.sweep is None:
        parts.append("\n".join(style.wrap(line, "  ") for line in headline_lines(report)))
    above = style.under_title
    parts += [f"{style.wrap(s.title)}{above}{s.body}".rstrip("\n") for s in sections(report, style)]
    if style.chart_width and report.sweep is None:
        parts.append(breakdown_chart(report.estimate.scenarios, style.chart_width, style.ascii_only))
    parts += [f"{style.wrap(s.title)}{above}{s.body}".rstrip("\n") for s in more_sections(report, style)]
    parts.append("\n".join(style.wrap(note, "  ") for note in notes(report, style)))
    return ["\n\n".join(parts) + "\n"]


def render_markdown(report: Report, style: Style) -> Iterable[str]:
    """A document to paste into design notes: pipe tables, a Mermaid chart, the assumptions with sources, notes."""
    style = style._replace(markdown=True)
    parts = [code_span(_header_line(report)), f"## {markdown_text(_title(report))}"]
    if report.sweep is None:
        parts.append("\n".join(f"- {markdown_text(line)}" for line in headline_lines(report)))
    if report.warnings:  # on stderr too; a note pasted from stdout keeps them beside the numbers they qualify
        parts += ["### Warnings", "\n".join(f"- {markdown_text(w)}" for w in report.warnings)]
    for section in sections(report, style):
        parts += [f"### {section.name}", _caption(section), *([section.body] if section.body else [])]
    if style.chart_width and report.sweep is None:
        caption = (
            "Each bar, left to right: MoE, ATTN_BASE, SPEC; its length is the step time in ms. The series are "
            "drawn over one another, so each gives where its part ends: SPEC's is the whole step."
        )
        parts += ["### Step-time breakdown", mermaid_chart(report.estimate.scenarios), caption]
    for section in more_sections(report, style):
        parts += [f"### {section.name}", _caption(section), *([section.body] if section.body else [])]
    parts += ["### Assumptions", _assumption_list(report), "### Notes"]
    parts.append("\n".join(f"- {markdown_text(note)}" for note in notes(report, style)))
    return ["\n\n".join(parts) + "\n"]


def _caption(section: Section) -> str:
    """A section's title under its heading, less the words the heading has just said: "### Current drafter" and
    then "Block 8, budget 8, ...", not "Current drafter: block 8, ..." again."""
    for said in (f"{section.name}: ", f"{section.name}, "):
        if section.title.startswith(said) and len(section.title) > len(said):
            rest = section.title[len(said) :]
            word = rest.split(" ", 1)[0]  # a word capitalised, not a key path: native_engine.overhead_cut = ...
            return markdown_text(rest[0].upper() + rest[1:] if word.isalpha() else rest)
    return markdown_text(section.title)


def _changed_source(report: Report, path: PathSegments, source: str) -> str:
    """A source, or, for a value options changed (itself, keys inside it, or an object around it), which options
    changed it and what the file said."""
    changed = [(p, o) for p, o in report.changed if at_or_inside(p, path) or at_or_inside(path, p)]
    if not changed:
        return source
    options: dict[str, list[str]] = {}  # by how: "set", "swept", "fitted", "solved"
    for _, option in changed:
        how = next(w for start, w in CHANGED_HOW.items() if option.startswith(start))
        options.setdefault(how, []).append(shortened(option))  # a curve of 1,000 points set whole: each entry
    looked = list(dict.fromkeys(p if at_or_inside(p, path) else path for p, _ in changed))  # in the options' order
    looked = [path] if path in looked else looked  # what the file had: the value whole, or each key inside it
    said = []
    for at in looked:
        inner = format_path(at[len(path) :])
        with contextlib.suppress(CalibrationError):  # one the file did not have, it did not say
            said.append(f"{inner + ' ' if inner else ''}{_value_text(get_path(report.original, at))}")
    if not source and looked == [path] and isinstance(path[-1], str):  # one left out (see _without_stale_reason)
        with contextlib.suppress(CalibrationError):
            source = str(get_path(report.original, (*path[:-1], f"{path[-1]}_source")))
    by = " and ".join(f"{how} by {' and '.join(given)}" for how, given in options.items())
    return by + (f"; the file said {', '.join(said)}" if said else "") + (f" ({source})" if source else "")


def _assumption_list(report: Report) -> str:
    """Every value of the calibration with the source that documents it, as a Markdown list by section.

    A value's source is its `<key>_source`, else the `source` of the nearest object around it; a
    section's own source is given once. An object inside a list (a curve point) is one entry. A value
    an option changed says so, and what the file said. The ranges come last, with their ends in force,
    when the output shows a band that spans them.
    """
    lines: list[str] = []

    def entry(indent: str, name: str, value: str, said: str) -> None:
        lines.append(f"{indent}- {code_span(name)}{value}" + (f": {markdown_text(said)}" if said else ""))

    def walk(node: object, path: PathSegments, source: str, section_source: str) -> None:
        if isinstance(node, dict) and not (path and isinstance(path[-1], int)):
            source = own if isinstance(own := node.get("source"), str) else source
            for key, value in node.items():
                if documents(key) or key in ("schema_version", "ranges", "measurements"):
                    continue
                if not path:  # a section: its heading and its own source
                    section_source = value.get("source", "") if isinstance(value, dict) else ""
                    entry("", key, "", section_source)
                own = node.get(f"{key}_source")
                walk(value, (*path, key), own if isinstance(own, str) else source, section_source)
        elif isinstance(node, list) and any(isinstance(item, dict) for item in node):
            for i, item in enumerate(node):
                own = item.get("source", source) if isinstance(item, dict) else source
                walk(item, (*path, i), own, section_source)
        else:
            if isinstance(node, dict):  # an object inside a list: its fields, less the documentation
                node = {k: v for k, v in node.items() if not documents(k)}
            shown = source if source != section_source else ""
            said = _changed_source(report, path, shown)
            name = format_path(path[1:]) or format_path(path)
            swept = report.sweep and any(at_or_inside(path, s.path) for s in report.sweep.sweeps)
            value = "" if swept else f" = {markdown_text(_value_text(node))}"  # no one value: each point has its own
            entry("  ", name, value, said)

    walk(report.document, (), "", "")
    ranges = report.estimate.calibration.ranges
    if ranges and (report.headline.band or report.sensitivity):  # no band shown, no range used
        section = report.document.get("ranges") if isinstance(report.document, dict) else None
        entry("", "ranges", "", section.get("source", "") if isinstance(section, dict) else "")
        domains = report.estimate.calibration.domains
        for r in ranges:
            said = _changed_source(report, ("ranges", *parse_path(r.path)), r.source)
            value = number_at(report.document, parse_path(r.path))  # in force: it stays inside or outside as it is
            _, low, high = _against(value, r.low, r.high, domains.get(r.path))
            entry("  ", r.path, f" from {low} to {high}", said)
    return "\n".join(lines)


def report_json(report: Report) -> dict[str, object]:
    est = report.estimate
    cal, dec = est.calibration, est.decomposition
    document: dict[str, object] = {
        "provenance": report.provenance._asdict(),  # its tuples are JSON lists
        "calibration": {
            "bandwidth_ratio": dec.bandwidth_ratio.value,
            "ar_step_ms": dec.ar_step.value,
            "moe_ar_ms": dec.moe_ar.time.value,
            "attn_base_ms": dec.attn_base.value,
            "ddtree_m": dec.moe_ddtree.m,
            "ddtree_step_ms": dec.ddtree_step.value,
            "moe_ddtree_ms": dec.moe_ddtree.time.value,
            "spec_ms": dec.spec.value,
            "overhead_share": dec.shares["overhead"].value,
            "moe_extrapolated": dec.moe_ar.extrapolated or dec.moe_ddtree.extrapolated,
        },
        "moe_fit": {"kind": cal.moe_curve.fit},
        "scenarios": [_scenario_json(row) for row in est.scenarios],
        "break_even": [dict(zip(BreakEven._fields[:-1], b, strict=False)) for b in est.break_even],
        "measurements": [_measurement_json(p) for p in report.track_record],
        "measurements_rms_relative_error": report.track_record_rms,
        "roofline": None,
        "warnings": list(report.warnings),
    }
    if fit := est.experts_fit:
        document["moe_fit"] = {
            "kind": "experts",
            "t0_ms": fit.t0.value,
            "t_expert_ms": fit.t_expert.value,
            "residuals": [{"m": m, "residual_ms": r} for m, r in fit.residuals_ms],
        }
    if est.roofline is not None:
        document["roofline"] = {
            "routing": "uniform",
            "moe_layers": round(roofline_figure(est.roofline, "MoE layers").value),
            "expert_bytes": roofline_figure(est.roofline, "expert MB").value * 1e6,
            "tp": cal.moe_curve.tp,
            "points": [dict(zip(RooflinePoint._fields[:-1], p, strict=False)) for p in est.roofline],
        }
    if sol := report.solve:
        (found,), (seen,) = sol.values, sol.before
        document["solve"] = {
            "path": found.path, "value": found.value, "previous": found.previous, "observed": seen.measurement.tok_s,
            "scenario": seen.measurement.label, "method": sol.method, "other_values": list(sol.other_roots),
        }  # fmt: skip
    if least := report.fit:
        document["fit"] = {
            "paths": [v.path for v in least.values],
            "values": [v.value for v in least.values],
            "previous": [v.previous for v in least.values],
            "ranges": [None if v.range is None else [v.range.low, v.range.high] for v in least.values],
            "method": least.method,
            "other_values": list(least.other_roots),
            "rms_before": least.rms_before,
            "rms_after": least.rms_after,
            "measurements": _fit_measurements_json(least),
            "warnings": list(least.warnings),
        }
    if sens := report.sensitivity:
        document["sensitivity"] = {
            "scenario": sens.scenario,
            "tok_s": sens.tok_s,
            "rows": [row._asdict() for row in sens.rows],
            "band": {"tok_s_min": sens.tok_s_min, "tok_s_max": sens.tok_s_max, "combinations": sens.combinations},
        }
    return document


SCENARIO_FIELDS = Scenario._fields[:-1]  # what JSON and CSV print of a scenario: all but its derivation


def _scenario_json(row: Scenario) -> dict[str, object]:
    return dict(zip(SCENARIO_FIELDS, row, strict=False))


# How a sweep writes a scenario: its keys once, in a template, and each value as json writes it. A 100,000-point
# JSON sweep takes 0.89 of the time and of the CPU time it took with json.dumps of a dict (6 paired rounds).
SCENARIO_JSON = "{" + ", ".join(f"{json.dumps(name)}: %s" for name in SCENARIO_FIELDS) + "}"
JSON_VALUES: dict[type, Callable[[Any], str]] = {
    float: float.__repr__, int: int.__repr__, str: json.encoder.encode_basestring_ascii,
    bool: lambda v: "true" if v else "false", type(None): lambda _: "null",
}  # fmt: skip


def scenario_json_text(row: Scenario) -> str:
    """json.dumps(_scenario_json(row)), byte for byte (a test holds it to that), in 0.7 of its time."""
    return SCENARIO_JSON % tuple([JSON_VALUES.get(type(v), json.dumps)(v) for v in row[: len(SCENARIO_FIELDS)]])


def _measurement_json(p: Prediction) -> dict[str, object]:
    m = p.measurement
    return {"label": m.label, "drafter": m.drafter or "autoregressive", "pipeline": m.pipeline, "block": p.block,
            "budget": p.budget, "m": p.m, "accept": m.accept, "tok_s": m.tok_s, "predicted_tok_s": p.predicted_tok_s,
            "relative_error": p.relative_error, "source": m.source}  # fmt: skip


def _fit_measurements_json(fit: Fit) -> list[dict[str, object]]:
    """Each measurement of a fit, as JSON and CSV give it: its track record after the fit, then the fit's numbers."""
    return [
        {**_measurement_json(after), "predicted_before": before.predicted_tok_s,
         "predicted_after": after.predicted_tok_s, "residual": after.residual, "loo_residual": loo}
        for before, after, loo in zip(fit.before, fit.after, fit.loo_residuals, strict=True)
    ]  # fmt: skip


def render_json(report: Report, style: Style) -> Iterator[str]:
    """One JSON object; a sweep's points (up to 800,000 scenarios) stream out compact, one at a time."""
    if report.sweep is None:
        yield json.dumps(report_json(report), indent=2) + "\n"
        return
    yield json.dumps(report_json(report))[:-1] + ', "sweep": ['
    yield from report.sweep.in_chunks(_json_points)
    yield "]}\n"


def _json_points(points: Iterable[SweepPoint], first: int) -> str:
    """Sweep points as the items of a JSON list that has `first` items before them."""
    scenario = encoded_once(scenario_json_text)
    out = []
    for i, point in enumerate(points, first):
        values = {name: printable(v) if isinstance(v, str) else v for name, v in point.values}  # as the loader shows it
        scenarios = ", ".join(map(scenario, point.scenarios))
        out.append(f'{", " if i else ""}{{"values": {json.dumps(values)}, "scenarios": [{scenarios}]}}')
    return "".join(out)


def encoded_once(encode: Callable[[Scenario], str]) -> Callable[[Scenario], str]:
    """`encode`, once per scenario record. A swept value leaves the scenarios it does not reach as they were,
    and the model's caches give back the very records of the point before: those are not encoded again."""
    done: dict[int, tuple[Scenario, str]] = {}  # by identity; the record is kept, so its id stays its own

    def once(row: Scenario) -> str:
        found = done.get(id(row))
        if found is None or found[0] is not row:
            if len(done) >= 1024:  # memory stays flat in the sweep's size
                done.clear()
            found = done[id(row)] = (row, encode(row))
        return found[1]

    return once


def render_csv(report: Report, style: Style) -> Iterator[str]:
    """One row per scenario (per sweep point and scenario when sweeping) with provenance columns; then, when the
    calibration logs measurements, a blank line and a row per measurement."""
    prov = report.provenance
    provenance = [prov.calibration_file, prov.calibration_sha256, prov.tool_version, "; ".join(prov.overrides),
                  "; ".join(prov.measurements_added)]  # fmt: skip
    found_by = report.solve or report.fit  # each value found is a column, as a swept one is
    solved = tuple((v.path, v.value) for v in found_by.values) if found_by else ()
    names = [format_path(s.path) for s in report.sweep.sweeps] if report.sweep else [name for name, _ in solved]
    line = _csv_writer()
    yield line([*names, *SCENARIO_FIELDS, *Provenance._fields])
    rows = functools.partial(_csv_points, provenance=provenance)
    if report.sweep:
        yield from report.sweep.in_chunks(rows)
    else:
        yield rows([SweepPoint(solved, report.estimate.scenarios)], 0)
    if report.track_record:  # a second table after a blank line: the measurements, as JSON gives them
        fit = report.fit
        measured = _fit_measurements_json(fit) if fit else [_measurement_json(p) for p in report.track_record]
        yield line([])
        yield line([*measured[0], *Provenance._fields])
        yield from (line([*row.values(), *provenance]) for row in measured)


def _csv_writer() -> Callable[[Iterable[object]], str]:
    """A function that gives one row as the csv module quotes it, each cell as _csv_cell shows it, with its
    line end. Every cell is escaped here, so the output needs no pass of its own (as JSON escapes itself)."""
    import csv
    import io

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")

    def line(cells: Iterable[object]) -> str:
        out.seek(0)
        out.truncate()
        # numbers, most of the cells, go as they are: the csv module writes them at full precision (repr)
        writer.writerow([cell if type(cell) in (float, int) else _csv_cell(cell) for cell in cells])
        return out.getvalue()

    return line


def _csv_points(points: Iterable[SweepPoint], _: int, provenance: Sequence[str]) -> str:
    """A row for each scenario of each point: the point's values, the scenario's fields, the provenance."""
    line = _csv_writer()
    ending = line(["", *provenance])  # ",p1,...,p5": the same on every row, written once
    scenario = encoded_once(lambda row: line(row[: len(SCENARIO_FIELDS)])[:-1] + ending)
    out = []
    for point in points:
        values = line([*(v for _, v in point.values), ""])[:-1] if point.values else ""  # "a,b,"
        out += [values + scenario(row) for row in point.scenarios]
    return "".join(out)


def _csv_cell(value: object) -> object:
    """Numbers as they are, booleans as true/false, lists as JSON, missing values empty."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return printable(value)  # one line: a newline in a label stays \n
    return json.dumps(value) if isinstance(value, (list, dict)) else "" if value is None else value


def render_explain(report: Report, style: Style) -> Iterable[str]:
    """The derivation in the order it is computed: name = formula = numbers = result, one figure a line.

    Results are rounded as the tables round them, so every table figure can be found here and
    checked with a pocket calculator from the lines above it. Each figure shows where first needed.
    """
    est = report.estimate
    dec, cal = est.decomposition, est.calibration
    parts = [dec.bandwidth_ratio, dec.ar_step, dec.moe_ar.time, dec.attn_base, dec.ddtree_step, dec.moe_ddtree.time]
    # each block: its name (what a later block that reads its figures calls it), the rest of its heading, its figures
    blocks: list[tuple[str, str, Sequence[Figure]]] = [("Calibration", "", [*parts, dec.spec, *dec.shares.values()])]
    for row in est.scenarios:
        where = f" ({PIPELINE_LABELS[row.pipeline]}; block {row.block}, budget {row.budget}, M = {row.m})"
        blocks.append((f"Scenario {row.label}", where, list(row.figures.values())))
    versus = {"current": "the current drafter", "autoregressive": "autoregressive decoding"}
    for b in est.break_even:
        reach = "" if b.reason is None else f"; {'not reachable: ' if b.accept is None else ''}{b.reason}"
        blocks.append((f"Break-even, {PIPELINE_LABELS[b.pipeline]} versus {versus[b.versus]}", reach, b.figures))
    if est.roofline:
        blocks.append(("Physical cross-check", " (uniform routing)", [f for p in est.roofline for f in p.figures]))
    for p in report.track_record:
        m = p.measurement
        tail = f": {_value_text(m.tok_s)} tok/s measured"
        blocks.append((f"Measurement {m.label}{_taken_on(report)} ({m.origin})", tail, [p.figure]))
    for p in report.solve.after if report.solve else ():  # what the solved value brings to the observed tok/s
        observed = f"{_taken_on(report)}: {_describe(p.measurement.tok_s)} tok/s observed"
        blocks.append((f"Observation {p.measurement.label}", observed, [p.figure]))
    derived = [derivation(*figures) for *_, figures in blocks]

    out = [
        _header_line(report),
        _title(report),
        "",
        "Inputs (from the calibration; --format markdown gives their sources)",
        f"  target GPU: {cal.hardware.target.name}; reference GPU: {cal.hardware.reference.name}",
    ]
    inputs = {i.path: i for figures in derived for f in figures for i in f.inputs if i.path}
    out += [f"  {i.name} = {figure_text(i)} ({path})" for path, i in inputs.items()]
    if sol := report.solve:
        (found,), (seen,) = sol.values, sol.before
        run, observed = f"{seen.measurement.label}{_taken_on(report)}", _describe(seen.measurement.tok_s)  # as typed
        out.append(f"  {found.path} = {found.text}: solved so that {run} = {observed} tok/s; {sol.method}")
    if report.fit:
        out += [
            f"  {v.path} = {v.text}: fitted to {plural(len(report.fit.before), 'measurement')}{_taken_on(report)}, was "
            f"{v.previous_text}; "
            f"{report.fit.method}" for v in report.fit.values
        ]  # fmt: skip
    if fit := est.experts_fit:
        out += ["", "Experts fit of the curve: least squares of curve(M) = t0 + t_expert * distinct(M)"]
        out.append(f"  t0 = {fit.t0.value:.4g} ms, t_expert = {fit.t_expert.value:.4g} ms per distinct expert")
        out += [f"  residual({m}) = curve({m}) - fit({m}) = {r:+.3f} ms" for m, r in fit.residuals_ms]
    shown: dict[str, str] = {}  # each figure's line once (a figure may be computed again), and the block it is in
    lines: dict[int, str] = {}  # each figure's line by the figure's id: the blocks share many figures

    def line_of(f: Figure) -> str:
        return lines.get(id(f)) or lines.setdefault(id(f), explain_line(f))

    for (name, rest, own), figures in zip(blocks, derived, strict=True):
        new = {line: f for f in figures if f.inputs and (line := line_of(f)) not in shown}
        # what the new lines read from an earlier block; every block reads the calibration's, so those go unnamed
        earlier: dict[str, str] = {}
        reads = [i for f in new.values() for i in f.inputs] if new else own  # all shown already (an AR run's): own
        for i in reads:
            if i.inputs and shown.get(line := line_of(i), "Calibration") != "Calibration":
                earlier[line] = f"  {i.name} = {figure_text(i)}, from {shown[line]}"
        out += ["", name + rest, *earlier.values(), *new] if new or earlier else []
        shown.update(dict.fromkeys(new, name))
    if report.track_record:
        out += ["", f"Track record{_taken_on(report)}: error = predicted / measured - 1"]
        for p in report.track_record:  # each operand to the digits that give the error as printed
            predicted = given("predicted", p.predicted_tok_s, "tok/s")
            measured = given("measured", p.measurement.tok_s, "tok/s", p.measurement.origin_of("tok_s"))  # as written
            error = derive("error", "predicted / measured - 1", "%", predicted, measured)
            texts = worked_inputs(error, lambda f: fixed(f.value, "+.1%"))
            error_text = fixed(p.relative_error, "+.1%")
            out.append(f"  {p.measurement.label}: {texts['predicted']} / {texts['measured']} - 1 = {error_text}")
        out.append(f"  RMS over {len(report.track_record)}: {fixed(report.track_record_rms or 0.0, '.1%', True)}")
    if sens := report.sensitivity:
        tok_s = functools.partial(fixed, spec=".0f")
        out += ["", f"Sensitivity of {sens.scenario}: {tok_s(sens.tok_s)} tok/s as in force; each line re-estimates it"]
        for r in sens.rows:
            value, low, high = range_texts(report, r)
            ends = given("at high", r.tok_s_at_high, "tok/s"), given("at low", r.tok_s_at_low, "tok/s")
            larger, smaller = sorted(ends, key=lambda end: end.value, reverse=True)
            swing = derive("swing", f"{larger.name} - {smaller.name}", "tok/s", larger, smaller)
            texts = worked_inputs(swing, lambda f: tok_s(f.value)) if r.swing else {}  # 0 within rounding: as shown
            at_high, at_low = (texts.get(end.name) or fixed(end.value, ".1f") for end in ends)
            out.append(
                f"  {r.path}: {value} in force, range {low} to {high} ({r.source}); at {low}: "
                f"{tok_s(r.tok_s_at_low)} tok/s, at {high}: {tok_s(r.tok_s_at_high)} tok/s; swing "
                f"|{at_high.removesuffix(' tok/s')} - {at_low.removesuffix(' tok/s')}| = {tok_s(r.swing)}"
            )
        out.append(
            f"  band over all {sens.combinations} combinations of range ends: "
            f"{tok_s(sens.tok_s_min)} to {tok_s(sens.tok_s_max)} tok/s"
        )
    return ["\n".join(out) + "\n"]


RENDERERS: dict[str, Callable[[Report, Style], Iterable[str]]] = {
    "table": render_tables,
    "json": render_json,
    "markdown": render_markdown,
    "csv": render_csv,
}


# === Command line ===

EPILOG = """examples:
  %(prog)s --tablefmt github --no-chart
  %(prog)s --set native_engine.overhead_cut=0.3 --format json
  %(prog)s --sweep native_engine.overhead_cut=0.2:0.6:0.1 --format csv
  %(prog)s --sensitivity --scenario stronger/native@14
  %(prog)s --solve native_engine.overhead_cut \\
      --observed current/native=463
  %(prog)s --measured current/native=415 --measured ar/native=201 \\
      --fit native_engine.overhead_cut

exit status: 0 estimated (warnings, if any, on stderr); 2 bad calibration,
option, usage or environment, such as tabulate missing for tables (one line
on stderr, nothing on stdout); 1 the output could not be written, memory ran
out, or an internal error; 130 interrupted (Ctrl-C)."""


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error raised as one line rather than printed with the usage block."""

    def error(self, message: str) -> NoReturn:  # each long word or value it quotes shortened, as every message's
        raise usage_error(re.sub(r"""'[^']{81,}'|"[^"]{81,}"|[^\s'"]{81,}""", lambda long: shortened(long[0]), message))

    def unrecognized(self, extra: list[str]) -> NoReturn:
        """The arguments no option took, the first three of them: a glob may expand to hundreds."""
        more = f" and {len(extra) - 3:,} more" if len(extra) > 3 else ""
        self.error(f"unrecognized arguments: {' '.join(map(shortened, extra[:3]))}{more}")


class _Once(argparse.Action):
    """An option that takes one value: given twice, it is a usage error, not the later value winning unseen."""

    given = False

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:  # fmt: skip
        if self.given:
            raise argparse.ArgumentError(self, "given twice; expected it once")
        self.given = True
        setattr(namespace, self.dest, _one_value(self, values))


class _Many(argparse.Action):
    """A repeatable option: each value in a list of its own, in the order given."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:  # fmt: skip
        setattr(namespace, self.dest, [*getattr(namespace, self.dest), _one_value(self, values)])


def _one_value(action: argparse.Action, values: object) -> str:
    """The value given; argparse hands `--OPTION=--` on as no value at all, an empty list."""
    if not isinstance(values, str):
        raise argparse.ArgumentError(action, "expected a value after it; '--' ends the options instead")
    return values


def usage_error(message: str) -> CalibrationError:
    return CalibrationError("", f"{message}; see --help", file="usage")


def build_parser(columns: int) -> _Parser:
    wrapped = functools.partial(argparse.RawDescriptionHelpFormatter, width=columns - 2)  # as argparse's own
    parser = _Parser(
        formatter_class=wrapped, epilog=EPILOG, add_help=False,
        description="Estimate Kimi K2.x + DDTree decode throughput on B300 from calibration.json.",
    )  # fmt: skip

    def kinds(group: Any) -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]:
        """add_argument for a flag, an option given at most once, and a repeatable option."""
        add = functools.partial(functools.partial, group.add_argument)
        return add(action="store_true"), add(action=_Once), add(action=_Many, default=[])

    flag, once, _ = kinds(parser)
    flag("-h", "--help", help="show this help and exit")
    flag("--version", help="show the version and exit")
    once("--calibration", metavar="PATH", help="calibration JSON to read (default: the one installed with the tool)")
    once("--format", choices=RENDERERS, default="table", help="tables, one JSON object, a Markdown document, or CSV")
    once("--tablefmt", metavar="NAME", help="any tabulate format for the tables (default simple), e.g. github")
    flag, _, _ = kinds(parser.add_argument_group("showing the work"))
    flag("--all", help="every section: break-even, chain alpha, the physical cross-check, the MoE floor, "
                       "measurements (JSON and --explain give them always; not with CSV or --sweep)")  # fmt: skip
    flag("--explain", help="print the derivation, one figure a line, in place of the tables (the table format only; "
                           "no --tablefmt or --sweep)")  # fmt: skip
    flag("--no-chart", help="leave out the step-time breakdown chart (which only the tables and Markdown of one "
                            "estimate draw)")  # fmt: skip
    flag("--ascii", help="plain ASCII output (automatic when the chart is drawn and stdout cannot write its blocks)")
    flag, once, many = kinds(parser.add_argument_group("what-if analysis"))
    many("--set", metavar="KEY.PATH=VALUE", help="override one value (JSON, else a string); repeatable")
    many("--sweep", metavar="KEY.PATH=VALUES", help="estimate at each of V1,V2,... or START:STOP:STEP; two make a grid")
    flag("--sensitivity", help="swing each assumption across its range (calibration `ranges`), and the band")
    once(
        "--scenario",
        metavar="DRAFTER/PIPELINE[@ACCEPT]",
        help="what --sensitivity studies (default: stronger/native at the middle accept, the lower of two)",
    )
    once("--solve", metavar="KEY.PATH", help="find the value of one assumption that matches --observed")
    once("--observed", metavar="SCENARIO=TOK_S", help="a measured throughput for --solve, e.g. current/native=463")
    _, _, many = kinds(
        parser.add_argument_group("calibrating from measurements (the calibration's `measurements` log)")
    )
    many(
        "--measured",
        metavar="SCENARIO=TOK_S",
        help="add a measured throughput to this run's log (the file stays as it is), e.g. current/native=415, "
        "stronger/native@13.2=900 (its accept length as measured) or ar/native=201; repeatable",
    )
    many(
        "--fit",
        metavar="KEY.PATH",
        help="fit this assumption to every measurement (least squares in ln tok/s); repeatable",
    )
    return parser


def _check_usage(args: argparse.Namespace) -> None:
    """Options that do not go together: a usage error, before anything is read."""
    problems = [
        *((text == "", f"{option}: empty; expected {what}") for option, text, what in (
            ("--solve", args.solve, "the key path of a number, e.g. native_engine.overhead_cut"),
            ("--observed", args.observed, "SCENARIO=TOK_S, e.g. current/native=463"),
            ("--scenario", args.scenario, "DRAFTER/PIPELINE[@ACCEPT], e.g. stronger/native@14"),
        )),
        (bool(args.solve) != bool(args.observed), "--solve and --observed go together"),
        (args.solve and args.sweep,
         "--solve and --sweep cannot be combined: solve first, then --set the value and sweep"),
        (args.fit and args.sweep, "--fit and --sweep cannot be combined: fit first, then --set the values and sweep"),
        (args.fit and args.solve,
         "--fit and --solve cannot be combined: --solve matches one --observed value, --fit every measurement"),
        (len(args.measured) > MAX_MEASUREMENTS,
         f"--measured: {len(args.measured)} given; expected at most {MAX_MEASUREMENTS} measurements in all"),
        (len(args.fit) > MAX_FIT, f"--fit: {len(args.fit)} given; expected at most {MAX_FIT} values to fit"),
        (args.scenario and not args.sensitivity, "--scenario chooses what --sensitivity studies; add --sensitivity"),
        (args.sensitivity and args.format == "csv",
         "--format csv holds one row per scenario; --sensitivity needs table, json or markdown"),
        (args.explain and args.format != "table",
         f"--explain prints the derivation as text, in place of the tables; it takes no --format {args.format}"),
        (args.explain and args.sweep,
         "--explain prints one estimate's derivation; it takes no --sweep (JSON gives each point's figures)"),
        (len(args.sweep) > MAX_SWEEPS,
         f"--sweep: {len(args.sweep)} given; expected at most {MAX_SWEEPS} (two make a grid)"),
        (args.calibration == "", "--calibration: an empty path; expected a calibration file"),
        (args.tablefmt is not None and (args.format != "table" or args.explain),
         "--tablefmt chooses how --format table draws its tables; it does nothing with "
         f"{'--explain' if args.explain else f'--format {args.format}'}"),
        (args.sweep and args.all,
         "--all and --sweep cannot be combined: --all adds the sections of one estimate (break-even, chain alpha, the "
         "physical cross-check, the MoE floor), and a sweep has many"),
        (args.all and args.format == "csv",
         "--format csv holds a row per scenario (its chain alpha and MoE floor too) and per measurement; --all's "
         "break-even and physical cross-check need table, json or markdown"),
        (args.sweep and args.sensitivity,
         "--sensitivity and --sweep cannot be combined: --sensitivity studies one calibration, a sweep has many"),
        (args.sweep and args.measured,
         "--measured and --sweep cannot be combined: a measurement goes to the track record and --fit, which a sweep "
         "does not show"),
    ]  # fmt: skip
    for wrong, message in problems:
        if wrong:
            raise usage_error(message)
    if args.format == "table" and not args.explain:
        import tabulate

        tablefmt = Style().tablefmt if args.tablefmt is None else args.tablefmt
        if tablefmt not in tabulate.tabulate_formats:
            formats = ", ".join(tabulate.tabulate_formats)
            raise usage_error(f"--tablefmt: unknown format {shortened(repr(tablefmt))}; choose from {formats}")
        sample = tabulate.tabulate([["x"]], headers=["x"], tablefmt=tablefmt)
        encoding = "ascii" if args.ascii else _encoding(sys.stdout)
        for_chart = _encodes(sample, encoding) and _ascii_only(args, encoding)  # it could, but the chart needs ASCII
        drawn_in = "ascii" if for_chart else encoding
        writes = _encodes("x " * 40, encoding) and _writes_lines(encoding)  # a line, or the output fails (idna)
        if writes and not _encodes(sample, drawn_in):
            told = f"ascii: {encoding} cannot write the chart's blocks" if for_chart else encoding
            cannot = "--ascii rules out" if args.ascii else f"the output encoding ({told}) cannot show"
            raise usage_error(
                f"--tablefmt {tablefmt} draws with characters that {cannot}; "
                f"choose an ASCII format, e.g. simple or grid{', or --no-chart' if for_chart else ''}"
            )


def _has_tabulate() -> bool:
    try:
        import tabulate  # noqa: F401  (the one import the tables need; a table run makes it anyway)
    except ModuleNotFoundError:  # another ImportError is a module there that did not load: see main()
        return False
    return True


def parse_throughput(option: str, text: str) -> Throughput:
    """--observed and --measured: 'current/native=463' (--measured also takes 'ar/native=201')."""
    label, sep, tok_s_text = text.rpartition("=")
    with naming(option, text):  # the whole text: 'current/native=415=3' is wrong in its label, as typed
        if not sep:
            raise CalibrationError("", "expected SCENARIO=TOK_S, e.g. current/native=463")
        spec = ScenarioSpec.parse(option, label, autoregressive=option == "--measured")
        if option == "--measured" and spec.drafter == "stronger" and spec.accept is None:  # current's: the anchor's
            raise CalibrationError(
                "",
                "the stronger drafter's accept lengths in the calibration are assumptions, not "
                "a measurement's; expected the one measured, e.g. stronger/native@13.2=900",
            )
        tok_s = parse_value(tok_s_text)
        if tok_s not in THROUGHPUT:
            expected = f"a positive throughput in tok/s, {THROUGHPUT.describe()}{_as_json(tok_s, THROUGHPUT)}"
            raise CalibrationError("", f"got {_describe(tok_s)}; expected {expected}")
        return Throughput(spec, float(tok_s), text)


SWEPT_IN_VAIN = {  # what a sweep of a key under these would vary: none of it moves a scenario
    "measurements": "a logged measurement",
    "ranges": "a range (for the band and --sensitivity)",
    "schema_version": "the calibration's schema version",
}


def parse_options(args: argparse.Namespace) -> Options:
    """The command line's values, parsed: a bad one is a CalibrationError naming its option."""
    observed = parse_throughput("--observed", args.observed) if args.observed else None
    for option, text in [("--solve", args.solve)] * bool(args.solve) + [("--fit", p) for p in args.fit]:
        with naming(option, text):
            parse_path(text)
    sweeps = tuple(parse_sweep(text) for text in args.sweep)
    for s in sweeps:  # a logged measurement, a range, the schema or a text that documents moves no scenario
        if s.path[0] in SWEPT_IN_VAIN or documents(str(s.path[-1])):  # --measured's go in `measurements`
            what = SWEPT_IN_VAIN.get(str(s.path[0]), "a text that documents a value")
            raise CalibrationError(
                format_path(s.path), f"{what} moves no scenario, and a sweep shows only scenarios; "
                "expected a key the estimate reads", file=f"--sweep {shortened(s.text)}",
            )  # fmt: skip
    overrides = tuple(parse_override(text) for text in args.set)
    for earlier, later in itertools.combinations(overrides, 2):
        if at_or_inside(earlier.path, later.path):  # the later --set replaces it: it would show, unused
            clash = "is set twice" if earlier.path == later.path else f"lies inside {key_text(later.path)}"
            raise CalibrationError(
                "", f"{key_text(earlier.path)} {clash}, and --set {shortened(later.text)} replaces it; expected each "
                "key once", file=f"--set {shortened(earlier.text)}",
            )  # fmt: skip
    for o, s in itertools.product(overrides, sweeps):
        if at_or_inside(o.path, s.path):  # the sweep sets it at every point: the --set would show, unused
            clash = "is swept too" if o.path == s.path else f"lies inside {key_text(s.path)}, which is swept"
            raise CalibrationError(
                "", f"{key_text(o.path)} {clash}; expected a key either set or swept", file=f"--set {shortened(o.text)}"
            )
    for outer, inner in itertools.permutations((s.path for s in sweeps), 2):
        if at_or_inside(inner, outer):  # the outer value's points would set the inner one, whatever its column said
            clash = "is swept twice; expected each key once" if inner == outer else (
                f"lies inside {key_text(outer)}, which is swept too; expected keys apart (its values set this one)"
            )  # fmt: skip
            raise CalibrationError("", f"{key_text(inner)} {clash}", file="--sweep")
    return Options(
        calibration=args.calibration,
        overrides=overrides,
        sweeps=sweeps,
        sensitivity=ScenarioSpec.parse("--scenario", args.scenario or "stronger/native") if args.sensitivity else None,
        solve=args.solve,
        observed=observed,
        measured=tuple(parse_throughput("--measured", text) for text in args.measured),
        fit=tuple(args.fit),
    )


def terminal_columns() -> int:
    """$COLUMNS, else the terminal's width when stdout is one, else 80; clamped to 60..1,000, junk ignored (any
    but ASCII digits: int() would read 1_2_0 and Arabic-Indic digits)."""
    if re.fullmatch("[0-9]+", text := os.environ.get("COLUMNS", "")):
        digits = text.lstrip("0") or "0"
        columns = int(digits) if len(digits) < 5 else 1000  # past 1,000 in any case; int() refuses 4,301 digits
    else:
        columns = 80
        if hasattr(sys.stdout, "isatty") and sys.stdout.isatty():
            import shutil

            columns = shutil.get_terminal_size().columns
    return min(max(columns, 60), 1000)


# --- Writing: the output escaped for a terminal, failures of stdout and stderr handled ---


def printable_lines(text: str) -> str:
    """Output escaped but for its own line breaks and tabs (TSV); the input's were escaped on their way in."""
    if text.replace("\n", " ").replace("\t", " ").isprintable():  # nearly always: three passes in C
        return text
    return "\n".join("\t".join(map(printable, line.split("\t"))) for line in text.split("\n"))


def _encoding(stream: object) -> str:
    """The encoding a standard stream writes in (UTF-8 when it says none)."""
    return getattr(stream, "encoding", None) or "utf-8"


def _utf(encoding: str) -> bool:
    """Whether an encoding is a UTF, which writes every character."""
    return codecs.lookup(encoding).name.startswith("utf")


def _writes_lines(encoding: str) -> bool:
    """Whether an output encoding keeps the lines: a UTF, or one that writes a line break as one byte (punycode
    and unicode_escape write it as two, and the output would be one garbled line)."""
    try:
        return _utf(encoding) or len("\n".encode(encoding)) == 1
    except (LookupError, UnicodeError):
        return False


def _ascii_only(args: argparse.Namespace, encoding: str) -> bool:
    """--ascii, or a table with the chart whose blocks the output's encoding cannot write as themselves: cp1252 has
    none, raw_unicode_escape writes them as escapes. Other output writes what its encoding can (ü in cp1252)."""
    if args.ascii:
        return True
    if args.format != "table" or args.explain or args.no_chart:
        return False
    try:
        return "".join(CHART_FILLS[False]).encode(encoding).isascii()
    except (UnicodeError, LookupError):
        return True


def _encodes(text: str, encoding: str, errors: str = "strict") -> bool:
    try:
        text.encode(encoding, errors)
    except (UnicodeError, LookupError):  # UnicodeError itself: a codec that encodes nothing (undefined)
        return False
    return True


def _charset(encoding: str, ascii_only: bool) -> str | None:
    """What the output's text is escaped for (see Style.written): nothing in a UTF, which writes every character."""
    if ascii_only:
        return "ascii"
    if _utf(encoding):
        return None
    return encoding if _encodes("\U0010ffff", encoding, "backslashreplace") else "ascii"  # idna writes no escape


def say(line: str) -> None:
    """One line on stderr, every character that does not show escaped; a stderr that cannot take it changes
    nothing else."""
    text = visible(line) + "\n"
    try:
        try:
            if not _writes_lines(_encoding(sys.stderr)):
                raise UnicodeError  # PYTHONIOENCODING=punycode would garble it: in ASCII, as below
            sys.stderr.write(text)
        except UnicodeError:  # an encoding that cannot write it (PYTHONIOENCODING=idna): the line in ASCII
            sys.stderr.buffer.write(text.encode("ascii", "backslashreplace"))
        sys.stderr.flush()
    except (AttributeError, OSError, ValueError):  # closed, full, or gone
        _silence(2)


def emit(chunks: Iterable[str]) -> int:
    """Write the output: 0 when written (or the reader left early), 1 when stdout cannot take it. Each chunk is
    made outside the handling of the writes' errors: an error in making one is the tool's, not the output's."""
    if status := _written(_writable):
        return status
    for chunk in chunks:
        if status := _written(functools.partial(sys.stdout.write, chunk)):
            return status
    return _written(sys.stdout.flush)


def _writable() -> None:
    """Raise what would make the output fail before a line of it is written."""
    if sys.stdout is None:
        raise OSError("stdout is closed")
    if not _writes_lines(encoding := _encoding(sys.stdout)):  # punycode: the output would be one garbled line
        line_break = "\n".encode(encoding)
        raise UnicodeError(f"it writes a line break as {line_break!r}")


def _written(write: Callable[[], object]) -> int:
    """0 when `write` wrote (or the reader left early), 1 when stdout cannot take it, with a line on stderr."""
    try:
        write()
    except BrokenPipeError:  # `estimate-b300 | head`: the reader left, which is not an error
        _silence(1)
        return 0
    except UnicodeError as exc:  # an encoding that cannot write the text (PYTHONIOENCODING=idna)
        _silence(1)
        say(
            f"estimate_b300: cannot write the output in the encoding {_encoding(sys.stdout)} ({exc}); expected an "
            "encoding of text such as utf-8 (PYTHONIOENCODING)"
        )
        return 1
    except (OSError, ValueError) as exc:
        _silence(1)
        say(f"estimate_b300: cannot write the output: {getattr(exc, 'strerror', None) or exc}")
        return 1
    return 0


def _silence(fd: int) -> None:
    """Point a failed stream at /dev/null, so that the interpreter's last flush of it cannot fail too."""
    with contextlib.suppress(OSError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), fd)


def main(argv: list[str] | None = None) -> int:
    """The command line; the exit status: 0 estimated, 2 bad input, 1 the output or the memory failed,
    130 interrupted."""
    # What memory running out leaves half done (a table's rows being read) may fail again as it is freed, on the
    # way up or later: the one line below says it, not Python's "Exception ignored".
    hook = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: None if isinstance(unraisable.exc_value, MemoryError) else hook(unraisable)
    try:
        return _run(sys.argv[1:] if argv is None else argv)
    except (MemoryError, OSError) as exc:  # at any stage: a limit such as ulimit -v, or a run too large
        if isinstance(exc, OSError) and exc.errno != errno.ENOMEM:  # ENOMEM: an import, a fork, a file's map
            raise
        exc.__traceback__ = None
        gc.collect()  # what it held, freed here while the hook above is in force: not at exit, where it is not
        say("estimate_b300: out of memory; expected more than the process may use (ulimit -v), or a smaller run")
        return 1
    except ImportError as exc:  # a module there but not loaded: under ulimit -v, its shared object not mapped
        say(f"estimate_b300: cannot load a module ({exc}); expected an intact Python, and the memory to load it")
        return 1
    except KeyboardInterrupt:  # Ctrl-C: what was printed stays, the workers are gone, and no traceback
        say("estimate_b300: interrupted")
        return 130
    finally:
        sys.unraisablehook = hook
        if argv is None:  # the process's own command line: the process ends with the run
            # What the run leaves goes as the process ends; the collector's passes over every object at exit
            # cost more than the run itself after tabulate's import (see Speed in the README).
            gc.freeze()


def _run(argv: list[str]) -> int:
    columns = terminal_columns()  # the help's width, and the output's
    parser = build_parser(columns)
    try:
        if len(argv) > MAX_ARGUMENTS:  # before argparse, whose work grows faster than the count
            raise usage_error(f"{len(argv):,} arguments; expected at most {MAX_ARGUMENTS:,}")
        args, extra = parser.parse_known_args(argv)
        if extra:
            parser.unrecognized(extra)
        if args.help or args.version:
            return emit([parser.format_help() if args.help else f"estimate_b300 {__version__}\n"])
        shows_tables = args.format in ("table", "markdown") and not args.explain
        if shows_tables and not _has_tabulate():
            say(
                "estimate_b300: tables and Markdown need tabulate, which is not installed: pip install tabulate, or "
                "run uv run estimate_b300.py; --format json and --format csv work without it"
            )
            return 2  # the environment is the input at fault
        _check_usage(args)
        options = parse_options(args)._replace(headline_band=shows_tables and not args.sweep, sweep_table=shows_tables)
        report = build_report(options)
    except CalibrationError as exc:
        say(f"estimate_b300: {exc}")
        return 2
    encoding = _encoding(sys.stdout)
    ascii_only = _ascii_only(args, encoding)
    style = Style(width=max(columns, 80), chart_width=0 if args.no_chart else columns, ascii_only=ascii_only,
                  everything=args.all, charset=_charset(encoding, ascii_only))  # fmt: skip
    style = style if args.tablefmt is None else style._replace(tablefmt=args.tablefmt)  # else Style's default
    chunks = (render_explain if args.explain else RENDERERS[args.format])(report, style)
    if args.format not in ("json", "csv"):  # JSON and CSV escape their cells; text is escaped here
        chunks = map(printable_lines, chunks)
    if style.charset:  # what was not laid out as text: Markdown, JSON, CSV, --explain
        chunks = map(style.written, chunks)
    if status := emit(chunks):  # the output failed: its one line on stderr says so, and nothing more
        return status
    for warning in report.warnings:  # under the output, where a terminal shows them last
        say(f"estimate_b300: warning: {warning}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
