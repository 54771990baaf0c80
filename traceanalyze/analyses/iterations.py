"""Which iterations count: the one place that decides it.

Three decisions, in order:

1. **Regions.** A repeated top-level annotation is an iteration only when its spans cover the
   work: ``iteration_coverage_pct``, the share of the trace's GPU activity time launched inside
   the chosen iterations, must reach ``MIN_COVERAGE_PCT``. Otherwise the iterations are the
   repeated sequence of top-level annotations (each from one start of the sequence's first
   annotation to the next, e.g. zero_grad -> forward -> backward -> step), else the whole trace.
2. **Kinds.** Every iteration row gets a ``kind`` (``KINDS``) and a ``flag``: null, or why the
   row is left out of the means (an empty closing step, a CUDA graph capture step) or stands
   out (the first step waiting on the CPU, an outlier by median ± k·MAD of its wall time).
3. **Selection.** :func:`counted` returns a Trace restricted to the counted iterations: its
   ``iterations`` frame holds only those rows and the ``iteration`` of every CPU and GPU row of
   the others is null, so every per-iteration figure (``iteration_count``, ``in_iterations``,
   ``iteration_times``) follows without knowing about this module. The user can choose instead
   (``Selection``: a range of iteration numbers, the first N counted ones skipped).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Concatenate, ParamSpec, TypeVar, cast

import polars as pl

from traceanalyze.analyses.accounting import ITERATION
from traceanalyze.analyses.activities import per_trace
from traceanalyze.analyses.cputree import outermost_ops
from traceanalyze.analyses.repeated import group_spans, region_groups
from traceanalyze.analyses.step.times import step_times
from traceanalyze.errors import UsageError
from traceanalyze.link import RUNTIME_CATS
from traceanalyze.query import IN_MEMORY
from traceanalyze.schema import ITERATION_SCHEMA
from traceanalyze.trace import IterationSource, Trace

PROFILED = "profiled"
CLOSING = "closing"
EMPTY = "empty"
CAPTURE = "capture"
REGION = "region"
WHOLE = "whole trace"
WARM_UP = "warm-up"
WARM_UP_REGION = "warm-up region"
# A repeated region named as a warm-up (a benchmark's `warmup|forward` before its
# `measure|forward`): one-off work by the trace's own word, left out of the means.
WARM_UP_NAME = r"(?i)warm[-_ ]?up"
# A step is `warm-up` when GPU work launched before the rank's first step (or with no launch
# recorded) runs in at least this share of its window: the profiler's warm-up steps' work
# queued ahead of the first recorded step, whose launches the trace dropped. Its GPU busy and
# wall time are not its own, so it is left out of the means (a GPT-2 eager capture's first step:
# 40,692 µs of 121,233 carried in, speed-up 2.13x with it, 1.68x without).
WARM_UP_MIN_PCT = 5.0
# Every kind, and why a row of that kind is left out of the means (None: it counts).
KINDS: dict[str, str | None] = {
    PROFILED: None,
    REGION: None,
    WHOLE: None,
    CLOSING: "empty closing step (no GPU activity): the profiler's last step",
    EMPTY: "no GPU activity while the other iterations have some",
    CAPTURE: "CUDA graph capture step: one-off capture and instantiation, not a replay",
    WARM_UP: "GPU work launched before the first step (the profiler's warm-up, launches not "
    f"recorded) runs in {WARM_UP_MIN_PCT:g}% or more of its window: its GPU time is not its own",
    WARM_UP_REGION: "a repeated region named as a warm-up: one-off work (lazy init, allocator "
    "growth, first calls), not a steady step",
}
# Runtime calls that only a step capturing a CUDA (or HIP) graph makes.
CAPTURE_CALLS = (
    "cudaStreamBeginCapture",
    "cudaStreamEndCapture",
    "cudaGraphInstantiate",
    "cudaGraphInstantiateWithFlags",
    "hipStreamBeginCapture",
    "hipStreamEndCapture",
    "hipGraphInstantiate",
    "hipGraphInstantiateWithFlags",
)
# Outliers: wall time further from the median than k times the median absolute deviation,
# and further than the noise floor (a share of the median), among at least MIN_ROWS rows.
OUTLIER_MAD_K = 5.0
NOISE_PCT = 5.0
OUTLIER_MIN_ROWS = 3
# The flag of a counted first step that stands out because the GPU waited on the host.
FIRST_STEP_FLAG = "first step waiting on the CPU"
# A first step waiting on the CPU stands out, beside the outlier rule, where its wall time is at
# least this many times the median of the other counted steps: with 3 steps the MAD is one
# distance between the other two, so 5·MAD kept a 1.94x first step of one variant and dropped
# a 1.95x one of its sibling (h200_with_stack). A ratio is the same for any spread; from
# FIRST_STEP_RATIO_MAX_ROWS + 1 counted steps on the MAD is steady and decides alone.
FIRST_STEP_MIN_RATIO = 1.5
FIRST_STEP_RATIO_MAX_ROWS = 5
# A repeated annotation must cover at least this share of the GPU activity to be the iteration.
MIN_COVERAGE_PCT = 50.0
# One sentence per figure of this module; the README's "Iterations" section prints them.
DEFINITIONS: dict[str, str] = {
    "kind": "what the iteration is: `profiled` (a ProfilerStep), `closing` (the profiler's "
    "last step with no GPU activity), `empty` (no GPU activity while others have some), "
    "`capture` (a step that captures a CUDA graph), `warm-up` (GPU work launched before the "
    "first step or with no launch recorded, `carried_in_warmup_us`, runs in "
    f"{WARM_UP_MIN_PCT:g}% or more of its window), `region` (a repeated annotation, sequence "
    "of annotations, or repeated region of a trace without step annotations), `warm-up region` "
    "(such a region whose name says warm-up, e.g. `...|warmup|forward`), `whole trace`",
    "flag": "null, or why the iteration is left out of the means (its kind) or stands out: an "
    "outlier whose wall time is further from the median than "
    f"{OUTLIER_MAD_K:g} median absolute deviations and {NOISE_PCT:g}% of the median (with at "
    "least 3 iterations), kept in the means, unless it is the first and waits on the CPU (its "
    "CPU span longer than its GPU span): that one-off step, an outlier or, among at most "
    f"{FIRST_STEP_RATIO_MAX_ROWS} iterations, {FIRST_STEP_MIN_RATIO:g} times the median wall of "
    "the others or more, is left out of the means and the verdict alike",
    "counted": "whether the iteration is in the per-iteration means and the verdict (one "
    "population for every command): every kind but closing, empty, capture, warm-up and "
    "warm-up region "
    "(unless none would be left) and a first step flagged as waiting on the CPU, or what "
    "--iterations / --skip chose",
    "iteration_coverage_pct": "the share of the trace's GPU activity time launched inside the "
    "iterations; a repeated annotation below "
    f"{MIN_COVERAGE_PCT:g}% (in a trace without GPU activity: below {MIN_COVERAGE_PCT:g}% of "
    "the outermost CPU operators' time starting inside it), or whose spans run at once (one "
    "starting before an earlier one of its rank has ended: per-request annotations on several "
    "threads), gives way to the repeated sequence of top-level annotations (from "
    "one start of its first annotation to the next, the last one to the end of the rank's CPU "
    "activity but no longer than the median of the earlier ones; its first annotation's spans "
    "must not run at once either), else to the whole trace. A trace without "
    "step annotations takes its repeated regions (annotations at any depth running the same "
    "operators, as `cold` finds them) as iterations when they hold "
    f"{MIN_COVERAGE_PCT:g}% of the GPU activity time launched from the first region on (work "
    "before it is setup, in no iteration, and not counted in that share), else the whole "
    "trace; in a trace without GPU activity regions are never steps (`cold` may still take "
    "them as calls)",
    "iterations_left_out": "how many iterations the means leave out (`iteration_note` says "
    "which and why)",
    "spread_per_iter": "`<figure>_min`, `_median` and `_max` over the counted iterations for "
    "kernels, GPU busy and idle, CPU operator and wall time; null for a figure whose values "
    f"differ by no more than {NOISE_PCT:g}% of their median, and with fewer than two iterations",
}
# The first columns of the `iterations` table (its JSON keys are a public contract).
TABLE_COLUMNS = (
    "rank",
    "iteration",
    "kind",
    "flag",
    "counted",
    "gpu_busy_us",
    "gpu_span_us",
    "gpu_idle_us",
    "kernels",
    "memcpy",
    "memset",
    "cpu_op_us",
    "launch_us",
    "cpu_span_us",
    "wall_us",
)


@dataclass(frozen=True)
class Selection:
    """Which iterations the user asked for: numbers ``first``..``last`` (inclusive, None: no
    bound) among all rows, then the first ``skip`` of those left out."""

    first: int | None = None
    last: int | None = None
    skip: int = 0

    @property
    def ranged(self) -> bool:
        return self.first is not None or self.last is not None

    def describe(self) -> str:
        parts = []
        if self.ranged:
            parts.append(f"--iterations {_bound(self.first)}-{_bound(self.last)}")
        if self.skip:
            parts.append(f"--skip {self.skip}")
        return " ".join(parts)


def _bound(value: int | None) -> str:
    return "" if value is None else str(value)


@dataclass(frozen=True)
class Choice:
    """How a restricted Trace was made: the regions it came from, every row with its kind,
    flag and whether it counts, the coverage, and what a reader must be told."""

    origin: Trace
    regions: Trace
    table: pl.DataFrame
    coverage_pct: float | None
    notes: tuple[str, ...]

    @property
    def note(self) -> str | None:
        """The notes as one sentence (None without any)."""
        return "; ".join(self.notes) or None


_CHOICES: weakref.WeakKeyDictionary[Trace, Choice] = weakref.WeakKeyDictionary()
_DEFAULTS: weakref.WeakKeyDictionary[Trace, Trace] = weakref.WeakKeyDictionary()
P = ParamSpec("P")
R = TypeVar("R")


def on_counted(analysis: Callable[Concatenate[Trace, P], R]) -> Callable[Concatenate[Trace, P], R]:
    """An analysis of a trace's counted iterations: ``analysis(counted(trace), ...)``. The
    library's per-iteration entry points wear it, so a raw trace and a restricted one give
    the same figures."""

    def on_counted_iterations(trace: Trace, *args: P.args, **kwargs: P.kwargs) -> R:
        return analysis(counted(trace), *args, **kwargs)

    return cast(
        Callable[Concatenate[Trace, P], R],
        functools.wraps(analysis)(on_counted_iterations),
    )


def counted(trace: Trace, selection: Selection | None = None) -> Trace:
    """``trace`` restricted to the iterations that count (see the module docstring).

    Idempotent: a restricted trace is returned as is when no selection is given.
    """
    if trace in _CHOICES and selection is None:
        return trace
    if selection is None or selection == Selection():
        return _default(trace)
    return _restrict(_origin_of(trace), selection)


def choice_of(trace: Trace) -> Choice:
    """How ``trace`` (restricted or not) was chosen; the default choice for a raw trace."""
    return _CHOICES[counted(trace)]


@per_trace
def _default(trace: Trace) -> Trace:
    # Every per-iteration entry point asks for this: decide once per loaded Trace.
    restricted = _DEFAULTS.get(trace)
    if restricted is None:
        restricted = _DEFAULTS[trace] = _restrict(trace, None)
    return restricted


def _origin_of(trace: Trace) -> Trace:
    return _CHOICES[trace].origin if trace in _CHOICES else trace


def iteration_rows(trace: Trace) -> pl.DataFrame:
    """One row per iteration of the regions, with ``kind``, ``flag`` and ``counted`` (what
    ``trace``'s selection kept), then the accounting columns and the window's wall time (the
    step model's ``step_rows`` adds the rest of the `iterations` table)."""
    return choice_of(trace).table


def iteration_notes(trace: Trace) -> list[str]:
    """What the `iterations` table's reader must know: how the iterations were found, their
    coverage of the GPU activity, which were left out and which stand out."""
    choice = choice_of(trace)
    source = choice.regions.iteration_source
    lines = [f"iterations from: {source}"]
    if choice.coverage_pct is not None:
        lines.append(
            f"iteration_coverage_pct: {choice.coverage_pct:.1f}% of the trace's GPU activity "
            "time was launched inside these iterations"
        )
    return [*lines, *choice.notes]


def _restrict(origin: Trace, selection: Selection | None) -> Trace:
    base = regions(origin)
    table = classify_iterations(base)
    keep = _kept(table, selection)
    if not keep.height:
        numbers = table["iteration"].to_list()
        raise UsageError(
            f"{selection.describe() if selection else 'the selection'} leaves no iteration "
            f"(the trace has iterations {numbers})",
            path=base.path,
            fix="Choose iterations the `iterations` command lists.",
        )
    if selection is not None:
        # Without a selection `keep` is the counted rows themselves: nothing to recompute.
        table = table.with_columns(
            counted=pl.struct(ITERATION).is_in(
                keep.select(pl.struct(ITERATION)).to_series().implode()
            )
        )
    # A user's selection always gets a Trace of its own, so the default choice of ``base``
    # (remembered per Trace) is never replaced by it.
    unchanged = keep.height == table.height and selection is None
    restricted = base if unchanged else _only(base, keep)
    _CHOICES[restricted] = Choice(
        origin, base, table, coverage_pct(base), _notes(origin, base, table, selection)
    )
    return restricted


def _kept(table: pl.DataFrame, selection: Selection | None) -> pl.DataFrame:
    rows: pl.LazyFrame | pl.DataFrame
    if selection is not None and selection.ranged:
        number = pl.col("iteration")
        rows = table.filter(
            (number >= (selection.first if selection.first is not None else number.min()))
            & (number <= (selection.last if selection.last is not None else number.max()))
        )
    else:
        rows = table.lazy().filter(pl.col("counted"))
    skip = selection.skip if selection is not None else 0
    # One query (in-memory engine), not four eager steps.
    return (
        rows.lazy()
        .sort(ITERATION)
        .filter(pl.int_range(pl.len()).over("rank") >= skip)
        .select(ITERATION)
        .collect(engine=IN_MEMORY)
    )


def _only(trace: Trace, keep: pl.DataFrame) -> Trace:
    """The same trace with ``iteration`` null outside the rows of ``keep``."""
    key = keep.select(pl.struct(ITERATION)).to_series().implode()
    inside = pl.struct(ITERATION).is_in(key)
    null_outside = pl.when(inside).then(pl.col("iteration")).alias("iteration")
    # replace(), not Trace(...): every other frame (memory, flows, ...) is kept as it is.
    return replace(
        trace,
        gpu=trace.gpu.with_columns(null_outside),
        cpu=trace.cpu.with_columns(null_outside),
        iterations=trace.iterations.filter(inside),
    )


@per_trace
def classify_iterations(trace: Trace) -> pl.DataFrame:
    """Every iteration row of ``trace`` with ``kind``, ``flag`` and ``counted`` (the default
    rule: rows whose kind is left out do not count, unless nothing else would)."""
    times = step_times(trace)
    # One query (in-memory engine), not ~10 eager steps of ~0.1-0.3 ms fixed cost each.
    captures = (
        trace.cpu.lazy()
        .filter(
            pl.col("cat").is_in(RUNTIME_CATS)
            & pl.col("name").is_in(CAPTURE_CALLS)
            & pl.col("iteration").is_not_null()
        )
        .select(ITERATION)
        .unique()
        .with_columns(capture=pl.lit(True))
    )
    active = (pl.col("kernels") + pl.col("memcpy") + pl.col("memset")) > 0
    rows = (
        times.lazy()
        .join(captures, on=ITERATION, how="left")
        .with_columns(
            capture=pl.col("capture").fill_null(False),
            active=active,
            rank_active=active.any().over("rank"),
            last=pl.col("iteration") == pl.col("iteration").max().over("rank"),
        )
    )
    names = trace.iterations.lazy().select(*ITERATION, "name").unique(ITERATION)
    rows = rows.join(names, on=ITERATION, how="left")
    kinds = rows.with_columns(kind=_kind_expr(trace.iteration_source)).with_columns(
        counted=pl.col("kind").is_in([k for k, why in KINDS.items() if why is None])
    )
    # Nothing left to count (every step a capture, say): count them all rather than none.
    kinds = kinds.with_columns(counted=pl.col("counted") | ~pl.col("counted").any().over("rank"))
    left_out = pl.col("kind").replace_strict(KINDS, return_dtype=pl.String, default=None)
    flagged = kinds.with_columns(
        flag=pl.when(left_out.is_null())
        .then(_outlier_flag())
        .when(pl.col("counted"))
        .then(pl.format("{}; kept: no other iteration to count", left_out))
        .otherwise(left_out)
    )
    # A first step waiting on the CPU (one-off host work: lazy init, planning, a data loader's
    # start) is not a steady step: left out of the means and the verdict alike, so every
    # figure and the bound are over one population (the rule needs 3+ counted rows, so 2+ stay).
    first = pl.col("flag").fill_null("").str.starts_with(FIRST_STEP_FLAG)
    steady = flagged.with_columns(counted=pl.col("counted") & ~first)
    return steady.select(
        *ITERATION, "kind", "flag", "counted", *[c for c in times.columns if c not in ITERATION]
    ).collect(engine=IN_MEMORY)


def _kind_expr(source: IterationSource) -> pl.Expr:
    if source is IterationSource.WHOLE_TRACE:
        return pl.lit(WHOLE)
    idle = ~pl.col("active") & pl.col("rank_active")
    steps = source is IterationSource.PROFILER_STEP
    warm_up = pl.col("carried_in_warmup_us") >= pl.col("wall_us") * WARM_UP_MIN_PCT / 100
    regions = source.kind is IterationSource.REGION
    named_warm_up = pl.lit(regions) & pl.col("name").str.contains(WARM_UP_NAME).fill_null(False)
    return (
        pl.when(pl.col("capture"))
        .then(pl.lit(CAPTURE))
        .when(idle & pl.col("last") & pl.lit(steps))
        .then(pl.lit(CLOSING))
        .when(idle)
        .then(pl.lit(EMPTY))
        .when(warm_up & (pl.col("carried_in_warmup_us") > 0))
        .then(pl.lit(WARM_UP))
        .when(named_warm_up)
        .then(pl.lit(WARM_UP_REGION))
        .otherwise(pl.lit(PROFILED if steps else REGION))
    )


def _outlier_flag() -> pl.Expr:
    """Why a counted row's wall time stands out, or null (median ± k·MAD among counted rows)."""
    wall = pl.col("wall_us").filter(pl.col("counted"))
    median = wall.median().over("rank")
    mad = (wall - wall.median()).abs().median().over("rank")
    rows = pl.col("counted").sum().over("rank")
    distance = (pl.col("wall_us") - median).abs()
    limit = pl.max_horizontal(mad * OUTLIER_MAD_K, median * NOISE_PCT / 100)
    ratio = (pl.col("wall_us") / median).round(1)
    first = pl.col("iteration") == pl.col("iteration").filter(pl.col("counted")).min().over("rank")
    # The host's own span is longer than a typical step: one-off CPU work, not a late GPU.
    cpu = pl.col("cpu_span_us")
    waits = first & (cpu > pl.col("gpu_span_us")) & (cpu > median) & (pl.col("wall_us") > median)
    enough = pl.col("counted") & (rows >= OUTLIER_MIN_ROWS)
    outlier = enough & (distance > limit)
    others = pl.col("wall_us").filter(pl.col("counted") & ~first).median().over("rank")
    few = rows <= FIRST_STEP_RATIO_MAX_ROWS
    slow = enough & few & (pl.col("wall_us") >= others * FIRST_STEP_MIN_RATIO)
    slower = (pl.col("wall_us") / others).round(1)
    return (
        pl.when(waits & (outlier | slow))
        .then(pl.format(FIRST_STEP_FLAG + ": wall {}x the other steps' median", slower))
        .when(outlier)
        .then(pl.format("outlier: wall {}x the median (beyond median ± 5·MAD)", ratio))
    )


def coverage_pct(trace: Trace) -> float | None:
    """``iteration_coverage_pct``: the share of the trace's GPU activity time launched inside
    its iterations (None without GPU activity)."""
    total = trace.gpu["dur_ns"].sum()
    if not total:
        return None
    inside = trace.gpu.filter(pl.col("iteration").is_not_null())["dur_ns"].sum()
    return float(inside) / float(total) * 100


@per_trace
def regions(trace: Trace) -> Trace:
    """``trace`` with iterations that cover the work: a repeated annotation that covers less
    than ``MIN_COVERAGE_PCT`` of the GPU activity gives way to the repeated sequence of
    top-level annotations, else to the whole trace. A trace without step annotations takes its
    repeated regions where they hold the work from the first one on."""
    if trace.iteration_source is IterationSource.WHOLE_TRACE:
        found = _region_steps(trace)
        return trace if found is None else found
    if trace.iteration_source.kind is not IterationSource.ANNOTATION or _holds_steps(trace):
        return trace
    sequence = _sequence_spans(trace.cpu)
    if sequence is not None:
        starter, spans = sequence
        named = IterationSource.named(IterationSource.SEQUENCE, starter)
        candidate = _with_iterations(trace, spans, named)
        if _covers(candidate):
            return candidate
    return _with_iterations(trace, _whole_spans(trace), IterationSource.WHOLE_TRACE)


def _holds_steps(trace: Trace) -> bool:
    """Whether ``trace``'s annotation spans can be its steps: one after another on each rank
    (:func:`concurrent_spans` finds none) and covering the work (:func:`_covers`)."""
    return not concurrent_spans(trace.iterations) and _covers(trace)


def concurrent_spans(spans: pl.DataFrame) -> int:
    """How many of ``spans`` (``rank``, ``ts_ns``, ``dur_ns``) start before an earlier one of
    their rank has ended: spans that run at once (one per request on several threads of a
    server, say) are no steps of one loop; a step's window would cut one at the other's end
    (an MTIA inference trace's 9.9 µs annotation got a 0.02 µs window: skeptic38d)."""
    ends = (pl.col("ts_ns") + pl.col("dur_ns")).cum_max().shift(1).over("rank")
    return int(spans.sort("rank", "ts_ns").select((pl.col("ts_ns") < ends).sum()).item())


def _region_steps(trace: Trace) -> Trace | None:
    """``trace`` with the repeated regions (:mod:`~traceanalyze.analyses.repeated`, the best
    group of each rank) as iterations, or None: no GPU activity, a rank without repeated
    regions, or regions that hold less than ``MIN_COVERAGE_PCT`` of the GPU activity time
    launched from the first region on."""
    groups = region_groups(trace)
    if not trace.gpu.height or not groups.height:
        return None
    best = groups.group_by("rank", maintain_order=True).head(1)  # sorted best first
    if best["rank"].n_unique() < trace.iterations["rank"].n_unique():
        return None
    spans = group_spans(trace, best)
    steps = spans.select(
        "rank",
        iteration=pl.int_range(pl.len(), dtype=pl.Int64).over("rank"),
        name="name",
        ts_ns="ts_ns",
        dur_ns="dur_ns",
    ).cast(ITERATION_SCHEMA)  # type: ignore[arg-type]
    names = " / ".join(spans["name"].unique(maintain_order=True).to_list())
    candidate = _with_iterations(trace, steps, IterationSource.named(IterationSource.REGION, names))
    return candidate if _holds_from_first(candidate) else None


def _holds_from_first(trace: Trace) -> bool:
    """Whether the iterations hold ``MIN_COVERAGE_PCT`` of the GPU activity time launched
    from the rank's first iteration on (what ran before is setup, not a missed step)."""
    first = trace.iterations.group_by("rank").agg(first=pl.col("ts_ns").min())
    after = trace.gpu.join(first, on="rank").filter(pl.col("launch_ts_ns") >= pl.col("first"))
    total = int(after["dur_ns"].sum())
    inside = int(after.filter(pl.col("iteration").is_not_null())["dur_ns"].sum())
    return total > 0 and inside * 100 >= total * MIN_COVERAGE_PCT


def _covers(trace: Trace) -> bool:
    """Whether the iterations cover the work: ``MIN_COVERAGE_PCT`` of the GPU activity time,
    or in a trace without GPU activity of the CPU operators' time (:func:`cpu_coverage_pct`)."""
    share = coverage_pct(trace)
    if share is None:
        share = cpu_coverage_pct(trace)
    return share is None or share >= MIN_COVERAGE_PCT


def cpu_coverage_pct(trace: Trace) -> float | None:
    """The share of the outermost CPU operators' time (every thread) that starts inside the
    iterations (None without operators): the coverage of a trace without GPU activity."""
    ops = outermost_ops(trace)
    total = int(ops["dur_ns"].sum())
    if not total:
        return None
    inside = int(ops.filter(pl.col("iteration").is_not_null())["dur_ns"].sum())
    return inside / total * 100


def _sequence_spans(cpu: pl.DataFrame) -> tuple[str, pl.DataFrame] | None:
    """Per rank: from each start of the first repeated top-level annotation to the next (the
    last to the end of the rank's CPU activity, at most as long as the median round before it:
    the work between two starts, such as a backward outside any annotation, belongs to the last
    round too, and a round the profiler cut short still holds the kernels launched after its
    last annotation, while work long after the rounds stays outside)."""
    roots = cpu.filter((pl.col("cat") == "user_annotation") & (pl.col("depth") == 0))
    repeated = roots.filter(pl.len().over("rank", "name") >= 2).sort("rank", "ts_ns")
    if not repeated.height:
        return None
    starters = repeated.group_by("rank").agg(pl.col("name").first())
    ends = cpu.group_by("rank").agg(end=(pl.col("ts_ns") + pl.col("dur_ns")).max())
    starts = repeated.join(starters, on=["rank", "name"], how="semi")
    if concurrent_spans(starts):
        # The first annotation runs several times at once (on several threads): no loop.
        return None
    spans = (
        starts.join(ends, on="rank")
        .sort("rank", "ts_ns")
        .with_columns(until_next=pl.col("ts_ns").shift(-1).over("rank") - pl.col("ts_ns"))
        .select(
            "rank",
            pl.int_range(pl.len(), dtype=pl.Int64).over("rank").alias("iteration"),
            "name",
            "ts_ns",
            dur_ns=pl.coalesce(
                "until_next",
                pl.min_horizontal(
                    pl.col("end") - pl.col("ts_ns"), pl.col("until_next").median().over("rank")
                ),
            ),
        )
    )
    return str(starters["name"][0]), spans.cast(ITERATION_SCHEMA)  # type: ignore[arg-type]


def _whole_spans(trace: Trace) -> pl.DataFrame:
    rows = pl.concat(
        [f.select("rank", "ts_ns", "dur_ns") for f in (trace.cpu, trace.gpu)], how="vertical"
    )
    return (
        rows.group_by("rank")
        .agg(start=pl.col("ts_ns").min(), end=(pl.col("ts_ns") + pl.col("dur_ns")).max())
        .select(
            "rank",
            iteration=pl.lit(0, pl.Int64),
            name=pl.lit(WHOLE),
            ts_ns="start",
            dur_ns=pl.col("end") - pl.col("start"),
        )
        .sort("rank")
        .cast(ITERATION_SCHEMA)  # type: ignore[arg-type]
    )


def _with_iterations(trace: Trace, spans: pl.DataFrame, source: IterationSource) -> Trace:
    """``trace`` with new iteration spans: CPU rows by their start, GPU rows by their launch
    call's start (every GPU row for the whole trace, as the linker does)."""
    gpu_ts = "ts_ns" if source is IterationSource.WHOLE_TRACE else "launch_ts_ns"
    return replace(
        trace,
        gpu=trace.gpu.with_columns(iteration=_iteration_at(trace.gpu, gpu_ts, spans)),
        cpu=trace.cpu.with_columns(iteration=_iteration_at(trace.cpu, "ts_ns", spans)),
        iterations=spans,
        iteration_source=source,
    )


def _iteration_at(frame: pl.DataFrame, ts: str, spans: pl.DataFrame) -> pl.Series:
    """The iteration whose span (same rank) holds each row's ``ts`` (null outside), in the
    frame's own row order (other frames index it by position)."""
    rows = frame.select("rank", at=pl.col(ts)).with_row_index("row")
    ends = spans.select("rank", "iteration", start="ts_ns", end=pl.col("ts_ns") + pl.col("dur_ns"))
    found = (
        rows.filter(pl.col("at").is_not_null())
        .sort("at")
        .join_asof(
            ends.sort("start"), left_on="at", right_on="start", by="rank", check_sortedness=False
        )
        .select(
            "row",
            iteration=pl.when(pl.col("at") < pl.col("end")).then("iteration"),
        )
    )
    return rows.join(found, on="row", how="left").sort("row")["iteration"].alias("iteration")


def _notes(
    origin: Trace, base: Trace, table: pl.DataFrame, selection: Selection | None
) -> tuple[str, ...]:
    """What a reader must know: how iterations were found and which were left out, why."""
    parts = []
    source = base.iteration_source
    if base is not origin and source is IterationSource.WHOLE_TRACE:
        parts.append(
            f"whole trace taken as one iteration: {_why_not_steps(origin)}, and no repeated "
            "sequence of top-level annotations runs one after another and covers "
            f"{MIN_COVERAGE_PCT:.0f}%"
        )
    if source.kind is IterationSource.REGION:
        parts.append(
            f"iterations are the repeated regions `{source.region}` (the trace has no step "
            "annotation; `cold` finds the same regions as its calls); GPU work launched before "
            "the first region is setup, in no iteration"
        )
    if source.kind is IterationSource.SEQUENCE:
        parts.append(
            "iterations are the repeated sequence of top-level annotations, each from one "
            f"`{source.region}` to the next (a single repeated annotation "
            f"covered less than {MIN_COVERAGE_PCT:.0f}% of the GPU activity)"
        )
    chosen = selection is not None and selection != Selection()
    if chosen:
        parts.append(f"iterations chosen with {selection.describe()}")  # type: ignore[union-attr]
    # Most tables count every row and flag none: then there is nothing to list (and the
    # queries below, ~1 ms, are skipped).
    if not table["counted"].all():
        parts.extend(_left_out_notes(table))
    if table["flag"].null_count() < table.height:
        standing = table.filter(pl.col("counted") & pl.col("flag").is_not_null())
        for number, flag in standing.select("iteration", "flag").iter_rows():  # flagged only
            parts.append(f"iteration {number} stands out ({flag}), kept in the means")
    return tuple(parts)


def _why_not_steps(origin: Trace) -> str:
    """Why the repeated annotation of ``origin`` (as the loader found it) makes no steps."""
    name = origin.iteration_source.region
    overlapping = concurrent_spans(origin.iterations)
    gpu = coverage_pct(origin)
    cpu = cpu_coverage_pct(origin) if gpu is None else None
    covered = (
        f"{gpu:.1f}% of the GPU activity"
        if gpu is not None
        else f"{cpu or 0:.1f}% of the CPU operators' time (no GPU activity)"
    )
    said = f"the repeated annotation `{name}` covers {covered}"
    if overlapping:
        said += (
            f" and {overlapping} of its {origin.iterations.height} spans start before an "
            "earlier one has ended (they run at once, on several threads: no loop)"
        )
    return said


def _left_out_notes(table: pl.DataFrame) -> list[str]:
    """One note per reason rows were left out, with the iterations it left out."""
    left_out = pl.col("kind").replace_strict(KINDS, return_dtype=pl.String, default=None)
    reasons = (
        table.filter(~pl.col("counted"))
        .with_columns(why=pl.coalesce(left_out, "flag", pl.lit("not chosen")))
        .group_by("why", maintain_order=True)
        .agg("iteration")
    )
    notes = []
    for why, numbers in reasons.iter_rows():  # one row per reason: a handful of notes
        listed = ", ".join(map(str, numbers))
        notes.append(f"iteration{'s' if len(numbers) > 1 else ''} {listed} left out ({why})")
    return notes


def iteration_at(events: pl.DataFrame, trace: Trace) -> pl.Series:
    """The counted iteration whose span holds each event's ``ts_ns`` (on its ``rank``; null
    outside every one): for events the loader did not place (memory events, Python frames)."""
    if trace.iteration_source is IterationSource.WHOLE_TRACE:
        whole = trace.iterations["iteration"]
        value = whole[0] if whole.len() else None
        return pl.Series("iteration", [value] * events.height, dtype=pl.Int64)
    spans = trace.iterations.select(
        "rank", "iteration", start="ts_ns", end=pl.col("ts_ns") + pl.col("dur_ns")
    ).sort("start")
    # The as-of join wants its left side sorted: sort, join, and put the rows back in order.
    joined = (
        events.select("rank", "ts_ns")
        .with_row_index("_row")
        .sort("ts_ns")
        .join_asof(
            spans,
            left_on="ts_ns",
            right_on="start",
            by="rank",
            strategy="backward",
            check_sortedness=False,
        )
        .sort("_row")
    )
    return joined.select(
        pl.when(pl.col("ts_ns") < pl.col("end")).then("iteration").alias("iteration")
    ).to_series()
