"""The model of a trace's counted steps: the one stop every per-step figure and verdict reads.

:func:`step_model` takes a trace (raw or restricted to chosen iterations) and gives, for the
steps that count (:func:`~traceanalyze.analyses.iterations.counted`, one rule everywhere):

* ``steps``: one row per counted step with every time figure (:mod:`.times`), its idle time
  by cause (``idle_<cause>_us``) and its own verdict (``bound``);
* ``gaps``: every idle gap of those steps' windows with its cause (:mod:`.gaps`);
* ``calls``: every blocking call in them, priced (:mod:`.syncs`);
* ``means``: each figure's mean per step (``<figure>_per_iter``);
* ``verdict``: what bounds the steps (:mod:`.verdict`), against the trace's wall time;
  :func:`against_wall` judges the same split against a capture's measured median instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import polars as pl

from traceanalyze.analyses.activities import per_trace
from traceanalyze.analyses.iterations import (
    TABLE_COLUMNS,
    WARM_UP_MIN_PCT,
    WHOLE,
    choice_of,
    counted,
    iteration_rows,
)
from traceanalyze.analyses.stacks import frames_of_ops
from traceanalyze.analyses.step.clock import ClockOffset, clock_offsets, offset_note, one_stream
from traceanalyze.analyses.step.gaps import CAUSE_NAMES, HOST, QUEUED, window_gaps
from traceanalyze.analyses.step.syncs import priced_calls, sync_table
from traceanalyze.analyses.step.times import SPLIT_US_COLUMNS, STEP_COLUMNS, split_times
from traceanalyze.analyses.step.verdict import (
    AGREEING_STEPS,
    BUSY_OVER_WALL_TOLERANCE_PCT,
    CANNOT_TELL,
    COMMUNICATION_BOUND,
    DISPATCH_MAX_NS,
    GPU_BOUND,
    LONE_STEP_MIN_MARGIN_PCT,
    QUEUED_DISPATCH,
    QUEUED_WAITING,
    SIDES,
    Verdict,
    describe,
    idle_column,
    judge,
    shares_of,
    side_times,
)
from traceanalyze.analyses.step.window import STEP, step_windows
from traceanalyze.display import Shown
from traceanalyze.trace import Trace

IDLE_COLUMNS = (
    *(idle_column(cause) for cause in CAUSE_NAMES),
    QUEUED_DISPATCH,
    QUEUED_WAITING,
)
# Every figure with a mean per step.
FIGURES = (*STEP_COLUMNS, *IDLE_COLUMNS)
WALL_FROM_TRACE = "the trace's step windows"
WALL_FROM_MEDIAN = "capture median"
WALL_FROM_STEADY = "cold capture's steady median (one-off first calls left out)"
WAITING_NOTE = (
    "the GPU waits with work queued for most of the time it does not compute, on a dependency "
    "the trace does not show (another stream's event, a host callback, a peer rank): "
)
# The same where the work runs on one stream with no stream waits: no other stream can hold it.
ONE_STREAM_WAITING_NOTE = (
    "the GPU waits with work queued for most of the time it does not compute, yet its work runs "
    "on one stream with no stream waiting on an event, so no other stream's work holds it: such "
    "gaps point to a GPU clock offset from the CPU's below the clock check's floor (`audit`'s "
    "gpu_clock_offset), or to work the trace does not record (another process on the GPU, a "
    "host callback): "
)
# A collective kernel's time on one rank includes its wait for the slowest peer.
COMMUNICATION_NOTE = (
    "collective time on one rank includes waiting for its peers (a late rank makes the others' "
    "collectives long): `traceanalyze ranks FOLDER` on every rank's trace tells waiting from "
    "transfer"
)
# Carried-in work is named in the verdict's note when it is at least this share of the wall.
CARRIED_IN_NOTE_MIN_PCT = 1.0


@dataclass(frozen=True, repr=False)  # Shown: a short repr, tables in Jupyter
class StepModel(Shown):
    """The counted steps of one trace: their figures, gaps, blocking calls and verdict."""

    steps: pl.DataFrame
    gaps: pl.DataFrame
    calls: pl.DataFrame
    means: Mapping[str, float]
    verdict: Verdict
    wall_source: str
    # Ranks whose GPU clock is offset from the CPU's: no gap cause or verdict can be read.
    clock: tuple[ClockOffset, ...] = ()

    @property
    def step_count(self) -> int:
        """How many (rank, step) rows count: the divisor of every per-step mean."""
        return self.steps.height

    def syncs(self, trace: Trace) -> pl.DataFrame:
        """The `syncs` table of ``trace`` (the trace this model is of): per operator and user
        line, blocking calls per step and their cost."""
        frames = None
        if trace.python.height and self.calls.height:
            frames = frames_of_ops(trace, self.calls["op_id"])
        return sync_table(self.calls, frames, max(self.step_count, 1))


def step_model(trace: Trace) -> StepModel:
    """The model of ``trace``'s counted steps (module docstring)."""
    return _model(counted(trace))


@per_trace
def _model(trace: Trace) -> StepModel:
    choice = choice_of(trace)
    rows = _with_split(choice.table.filter(pl.col("counted")), choice.regions)
    keys = rows.select(STEP)
    gaps = _all_gaps(choice.regions).join(keys, on=STEP, how="semi")
    steps = _with_verdicts(_with_idle_causes(rows, gaps))
    calls = priced_calls(trace)
    means = _means(steps)
    launched = bool(trace.gpu["linked"].fill_null(value=False).any())
    recorded = trace.gpu.height > 0
    clock = tuple(clock_offsets(trace, _waiting_pct(steps, gaps, trace), steps))
    waiting = ONE_STREAM_WAITING_NOTE if one_stream(trace) else WAITING_NOTE
    verdict = _verdict(steps, means, gaps, calls, waiting, launched=launched, recorded=recorded)
    if clock:
        verdict = Verdict(CANNOT_TELL, None, verdict.shares_pct, offset_note(list(clock)))
    return StepModel(steps, gaps, calls, means, verdict, WALL_FROM_TRACE, clock)


def _waiting_pct(steps: pl.DataFrame, gaps: pl.DataFrame, trace: Trace) -> pl.DataFrame:
    """Per rank: the share of the steps' wall the GPU idled with its next work queued (long
    gaps), which the clock check weighs: ``waiting_pct`` between recorded GPU activities (from
    the rank's first activity on) and ``leading_pct`` before the first (where work launched
    before the profiler, which it did not record, may have kept the GPU busy)."""
    first = (
        trace.gpu.filter(pl.col("ts_ns").is_not_null())
        .group_by("rank")
        .agg(first_ns=pl.col("ts_ns").min())
    )
    waiting = (pl.col("cause") == QUEUED) & (pl.col("gap_ns") >= DISPATCH_MAX_NS)
    leading = pl.col("gap_end_ns") <= pl.col("first_ns")
    per_rank = (
        gaps.filter(waiting)
        .join(first, on="rank")
        .group_by("rank")
        .agg(
            between_us=pl.col("gap_ns").filter(~leading).sum() / 1e3,
            leading_us=pl.col("gap_ns").filter(leading).sum() / 1e3,
        )
    )
    wall = steps.group_by("rank").agg(wall_us=pl.col("wall_us").sum().clip(lower_bound=1e-9))
    return wall.join(per_rank, on="rank", how="left").select(
        "rank",
        waiting_pct=pl.col("between_us").fill_null(0.0) / pl.col("wall_us") * 100,
        leading_pct=pl.col("leading_us").fill_null(0.0) / pl.col("wall_us") * 100,
    )


@per_trace
def _all_gaps(regions: Trace) -> pl.DataFrame:
    # Over every step of the regions (windows depend on the steps before them), once a trace;
    # a rank with no GPU activity at all has no GPU timeline, so no gaps.
    windows = step_windows(regions).join(regions.gpu.select("rank").unique(), on="rank")
    return window_gaps(regions, windows)


def _with_idle_causes(rows: pl.DataFrame, gaps: pl.DataFrame) -> pl.DataFrame:
    """Each step's idle time per cause, and its queued gaps split into the GPU's dispatch
    (short) and waits on a dependency (long), for the verdict."""
    queued = pl.col("cause") == QUEUED
    waiting = queued & (pl.col("gap_ns") >= DISPATCH_MAX_NS)
    split = gaps.group_by(STEP).agg(
        (pl.col("gap_ns").filter(queued & ~waiting).sum() / 1e3).alias(QUEUED_DISPATCH),
        (pl.col("gap_ns").filter(waiting).sum() / 1e3).alias(QUEUED_WAITING),
    )
    by_cause = (
        gaps.group_by(*STEP, "cause")
        .agg(us=pl.col("gap_ns").sum() / 1e3)
        .pivot("cause", index=STEP, values="us")
    )
    missing = [c for c in CAUSE_NAMES if c not in by_cause.columns]
    by_cause = by_cause.with_columns(pl.lit(0.0).alias(c) for c in missing).rename(
        {c: idle_column(c) for c in CAUSE_NAMES}
    )
    return (
        rows.join(by_cause, on=STEP, how="left")
        .join(split, on=STEP, how="left")
        .with_columns(pl.col(*IDLE_COLUMNS).cast(pl.Float64).fill_null(0.0))
        .select(*rows.columns, *IDLE_COLUMNS)
    )


def _with_verdicts(steps: pl.DataFrame) -> pl.DataFrame:
    """Each step's own verdict (``bound``), for the agreement between steps."""
    columns = [p for side in SIDES for p in side.parts]
    bounds = [
        judge(side_times(dict(zip(columns, values, strict=True))))[0]
        # One verdict per step row: a handful to a few hundred rows.
        for values in steps.select(columns).iter_rows()
    ]
    return steps.with_columns(bound=pl.Series(bounds, dtype=pl.String))


def _means(steps: pl.DataFrame) -> dict[str, float]:
    # Summed as integer picoseconds: a float sum's order follows Polars' chunks and threads, and
    # a mean such as 168.05 µs then prints as 168.0 on one machine and 168.1 on another.
    # Int128: a span from an event at ts 0 to one at a Unix-epoch time (1.7e15 µs) is 1.7e21
    # ps, past Int64; the audit reports such events, so the figure must not raise.
    n = max(steps.height, 1)
    row = steps.select(
        ((pl.col(c).cast(pl.Float64) * 1e6).round().cast(pl.Int128).sum() / 1e6 / n).alias(
            f"{c}_per_iter"
        )
        for c in FIGURES
    ).row(0, named=True)
    return {key: float(value or 0.0) for key, value in row.items()}


def _per_step(means: Mapping[str, float]) -> dict[str, float]:
    return {c: means[f"{c}_per_iter"] for c in FIGURES}


def _verdict(
    steps: pl.DataFrame,
    means: Mapping[str, float],
    gaps: pl.DataFrame,
    calls: pl.DataFrame,
    waiting: str,
    *,
    launched: bool,
    recorded: bool,
) -> Verdict:
    """The steps' verdict: the one held by counted steps that make up at least two thirds of
    their wall time (each step judged on its own split), with its margin and evidence from
    their mean split; else ``cannot tell``. The counted steps are the means' population too
    (a warm-up step and a first step waiting on the CPU are not counted: ``iterations``), so
    every figure beside the verdict is over the same steps. ``waiting``: what the note says
    where the GPU waits on queued work (a dependency the trace does not show)."""
    parts = _per_step(means)
    times = side_times(parts)
    shares = shares_of(times)
    missing = _missing_evidence(steps, gaps, shares, launched=launched, recorded=recorded)
    if missing is not None:
        said = [missing, describe(times, parts)] if sum(times.values()) > 0 else [missing]
        return Verdict(CANNOT_TELL, None, shares, "; ".join(said))
    weights = (
        steps.group_by("bound")
        .agg(wall=pl.col("wall_us").sum(), n=pl.len())
        .sort("wall", "bound", descending=[True, False])
    )
    bound, held_us, agreeing = weights.row(0)
    total_us = float(steps["wall_us"].sum())
    held_pct = held_us / total_us * 100 if total_us > 0 else 0.0
    share, out_of = AGREEING_STEPS
    judged, margin = judge(times)
    lone = steps.height == 1 and not _lone_step_holds(steps, judged, margin)
    if lone or held_pct < share / out_of * 100 or judged != bound:
        said = [
            describe(times, parts)
            + ("" if judged == CANNOT_TELL else f", {judged} by {margin:.1f} points")
        ]
        split = ", ".join(f"{n} {b}" for b, _, n in weights.iter_rows())  # a few verdicts
        why = (
            "one step only counts, and a verdict needs two or more that agree, or one marked "
            f"step GPU-bound by {LONE_STEP_MIN_MARGIN_PCT:g} points or more on its own work "
            "(profile more steps); that step alone: "
            if lone
            else "the steps disagree "
            f"({split} of {steps.height} counted; the largest holds {held_pct:.0f}% of "
            "their wall time, a verdict needs two thirds and their mean to agree); "
            "over all of them: "
        )
        return Verdict(CANNOT_TELL, None, shares, why + "; ".join(said + _carried_in(steps, calls)))
    notes = [
        f"{describe(times, parts)} ({WALL_FROM_TRACE})",
        *_carried_in(steps, calls),
        f"{agreeing} of {steps.height} counted steps agree ({held_pct:.0f}% of their wall "
        f"time){_dissent(steps, bound)}"
        if steps.height > 1
        else f"one step only counts: it is GPU-bound by {LONE_STEP_MIN_MARGIN_PCT:g} points or "
        "more on its own work, so the verdict is given on that step alone (profile more steps "
        "to confirm it)",
    ]
    if bound == COMMUNICATION_BOUND:
        notes.append(COMMUNICATION_NOTE)
    if bound == CANNOT_TELL:
        return Verdict(bound, None, shares, waiting + "; ".join(notes))
    # Where some steps disagree, the verdict also changes if the agreeing steps' share of the
    # wall falls below two thirds: the margin is then the nearer of the two.
    vote_margin = held_pct - share / out_of * 100
    if agreeing < steps.height and vote_margin < margin:
        margin = vote_margin
        notes[0] += f"; margin {margin:.1f} points (the steps' vote: {held_pct:.1f}% of the wall)"
    else:
        notes[0] += f"; margin {margin:.1f} points"
    return Verdict(bound, margin, shares, "; ".join(notes))


def _lone_step_holds(steps: pl.DataFrame, judged: str, margin: float) -> bool:
    """Whether one counted step's own verdict is given: a marked step (not the whole trace
    taken as one, which may hold warm-up work) GPU-bound by ``LONE_STEP_MIN_MARGIN_PCT`` or
    more on its own work (work carried in from before it under ``WARM_UP_MIN_PCT`` of its wall:
    a lone step opening with a sync that waits for earlier work is judged on that work too).
    GPU-bound only: a lone step's host side is often one-off (a first call's launches, a
    compile, a graph capture) that a second step would not repeat; its GPU work is the step's."""
    marked = steps["kind"][0] != WHOLE
    own = float(steps["carried_in_us"][0]) < float(steps["wall_us"][0]) * WARM_UP_MIN_PCT / 100
    return marked and own and judged == GPU_BOUND and margin >= LONE_STEP_MIN_MARGIN_PCT


def _dissent(steps: pl.DataFrame, bound: str) -> str:
    """The steps whose own verdict differs, with why they stand out where they do."""
    others = steps.filter(pl.col("bound") != bound)
    if not others.height:
        return ""
    named = [
        f"step {number} is {its}" + (f" ({flag})" if flag else "")
        # The few steps that disagree.
        for number, its, flag in others.select("iteration", "bound", "flag").head(3).iter_rows()
    ]
    more = f" and {others.height - 3} more" if others.height > 3 else ""
    return ": " + ", ".join(named) + more


def _missing_evidence(
    steps: pl.DataFrame,
    gaps: pl.DataFrame,
    shares: Mapping[str, float],
    *,
    launched: bool,
    recorded: bool,
) -> str | None:
    """Why no verdict can be given, or None."""
    if not steps.height or float(steps["gpu_busy_us"].sum()) <= 0:
        if not recorded:
            return (
                "no GPU activity in the steps: the trace records none (kernels, copies, memsets); "
                "profile with "
                "torch.profiler's ProfilerActivity.CUDA to judge the GPU"
            )
        return "no GPU activity in the steps"
    if shares["gpu"] >= 80 or not gaps.height:
        return None
    # Gaps whose next work has no launch call read as queued: with no launch call recorded at
    # all, nothing tells whether the GPU waited for the host.
    if not launched and float(gaps["gap_ns"].sum()) > 0:
        return "the trace records no launch calls, so why the GPU waited cannot be told"
    return None


def _carried_in(steps: pl.DataFrame, calls: pl.DataFrame) -> list[str]:
    """A note naming the GPU work carried into the steps and the blocking call that waited for
    it, where it is at least ``CARRIED_IN_NOTE_MIN_PCT`` of the wall."""
    carried, wall = float(steps["carried_in_us"].sum()), float(steps["wall_us"].sum())
    if wall <= 0 or carried / wall * 100 < CARRIED_IN_NOTE_MIN_PCT:
        return []
    n = steps.height
    note = (
        f"{carried / n:,.1f} µs per step ({carried / wall * 100:.1f}% of the wall) of GPU work "
        "launched before the step ran in its window (carried in)"
    )
    # Only calls of steps that hold carried-in work, ending inside their window.
    holding = steps.filter(pl.col("carried_in_us") > 0).select(*STEP, "lo_ns", "hi_ns")
    opening = (
        calls.join(holding, on=STEP)
        .filter(pl.col("end_ns").is_between(pl.col("lo_ns"), pl.col("hi_ns")))
        .filter(pl.col("ts_ns") <= pl.col("lo_ns") + (pl.col("end_ns") - pl.col("ts_ns")))
        .sort("gpu_waited_ns", descending=True)
    )
    if opening.height:
        top = opening.row(0, named=True)
        note += (
            f"; `{top['op']}` near the step's start waited {top['cpu_blocked_ns'] / 1e3:,.1f} "
            "µs for it"
        )
    return [note]


def against_wall(model: StepModel, median_ms: float | None, steady: bool = False) -> Verdict:
    """The model's verdict judged against a capture's measured median time per step (the
    truth for wall time, without the profiler) where given: the GPU side and exposed
    communication keep their traced time, and the rest of the median is split between the CPU
    and sync sides as the trace's idle gaps are. ``steady``: the median is a cold capture's
    steady one."""
    if not median_ms or model.clock:
        return model.verdict
    parts = _per_step(model.means)
    traced = side_times(parts)
    gpu_side = gpu_time_us(model)
    wall_us = median_ms * 1e3
    source = WALL_FROM_STEADY if steady else WALL_FROM_MEDIAN
    if gpu_side <= 0:
        return Verdict(CANNOT_TELL, None, shares_of(traced), "no GPU activity in the steps")
    if not comparable(model, median_ms):
        return Verdict(
            CANNOT_TELL,
            None,
            shares_of(traced),
            f"the GPU's time per step ({gpu_side:,.1f} µs) exceeds the wall time ({source}, "
            f"{wall_us:,.1f} µs) by {gpu_side / wall_us * 100 - 100:.0f}%: the steps hold work "
            "that wall time does not (one-off calls, other shapes), so no verdict",
        )
    host_side = traced["cpu"] + traced["sync"]
    rest = max(wall_us - gpu_side, 0.0)
    scale = rest / host_side if host_side > 0 else 0.0
    host_parts = {p for side in SIDES if side.name in ("cpu", "sync") for p in side.parts}
    scaled = {p: v * scale if p in host_parts else v for p, v in parts.items()}
    if host_side <= 0 and rest > 0:
        # Time the trace shows no gap for: the host's, with no cause to name.
        scaled[idle_column(HOST)] = rest
    times = side_times(scaled)
    bound, margin = judge(times)
    over = (
        f"; the profiled GPU time exceeds it by {gpu_side / wall_us * 100 - 100:.1f}%, the GPU "
        "side is capped at the wall"
        if gpu_side > wall_us
        else ""
    )
    return Verdict(
        bound,
        margin,
        shares_of(times),
        f"{describe(times, scaled)} (wall: {source}, {wall_us:,.1f} µs{over}); margin "
        f"{margin:.1f} points",
    )


def gpu_time_us(model: StepModel) -> float:
    """The GPU's own time per step: its side and exposed communication (µs)."""
    traced = side_times(_per_step(model.means))
    return traced["gpu"] + traced["communication"]


def comparable(model: StepModel, median_ms: float) -> bool:
    """Whether the traced steps and a capture's median describe the same work: the GPU's time
    per step exceeds the median by at most ``BUSY_OVER_WALL_TOLERANCE_PCT``."""
    return gpu_time_us(model) <= median_ms * 1e3 * (1 + BUSY_OVER_WALL_TOLERANCE_PCT / 100)


def gpu_busy_pct_of_wall(model: StepModel, median_ms: float | None) -> float | None:
    """GPU busy time as a share of the wall time: the capture's median where given, else the
    steps' windows (at most 100)."""
    busy = model.means["gpu_busy_us_per_iter"]
    wall = median_ms * 1e3 if median_ms else model.means["wall_us_per_iter"]
    return min(busy / wall * 100, 100.0) if wall > 0 else None


def mean_per_iter(trace: Trace, column: str) -> float:
    """The mean per counted step of one step-table column (``wall_us``, ``gpu_busy_us``, ...)."""
    return step_model(trace).means[f"{column}_per_iter"]


def step_rows(trace: Trace) -> pl.DataFrame:
    """The `iterations` table: every step of the regions (counted or not) with its kind, flag,
    whether it counts, every time figure, its idle time by cause and its own verdict."""
    regions = choice_of(trace).regions
    rows = _with_split(iteration_rows(trace), regions).drop("lo_ns", "hi_ns")
    table = _with_verdicts(_with_idle_causes(rows, _all_gaps(regions)))
    return table.select(*TABLE_COLUMNS, *[c for c in table.columns if c not in TABLE_COLUMNS])


def _with_split(rows: pl.DataFrame, regions: Trace) -> pl.DataFrame:
    """``rows`` (steps of ``regions``) with the window's split, after the wall time."""
    split = split_times(regions)
    at = rows.columns.index("wall_us") + 1
    joined = rows.join(split, on=STEP, how="left")
    return joined.select(*rows.columns[:at], *SPLIT_US_COLUMNS, *rows.columns[at:])
