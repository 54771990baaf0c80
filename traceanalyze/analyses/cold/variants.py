"""Cold start across variants: each variant's one-off cost, checked against the capture's
timing, and the calls after which its steady advantage over the baseline pays it back
(``break_even_calls``).

Every figure has one source, named: the trace (``first_call_us``, ``steady_us``,
``excess_us``: the calls' wall time under the profiler) or the capture's timing without the
profiler (``timed_*``, from the manifest). The break-even takes its per-call difference and
its one-off difference from one source: the capture's timing where the manifest has call 1
and the steady calls timed for the variant and the baseline, else the traces; none where the
variant never catches up, and otherwise a note that says what it was found from and what it
holds. A row of the breakdown pays back its own (trace) excess with the traces' per-call
difference, on the ``cpu`` side only (the call's span; GPU time overlaps it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from capture.manifest import Manifest
from traceanalyze.analyses.cold.caches import cache_state_of, hits_seen
from traceanalyze.analyses.cold.context import (
    IN_THIS_TRACE,
    NO_BASELINE,
    CallTimes,
    ColdContext,
    Payback,
    Timings,
    payback,
)
from traceanalyze.analyses.cold.first_calls import (
    FIRST,
    ColdStart,
    cold_start,
    share_of_excess,
    traced_times,
)
from traceanalyze.analyses.variants.compare import pick_baseline
from traceanalyze.display import Shown
from traceanalyze.load.variants import Variant

GPU_BREAK_EVEN = "counted on the call's wall time (side cpu)"
BY_CAUSE = ["variant", "rank", "call", "steady_call", "steady_calls", "side", "cause"]
FROM_MANIFEST = "manifest"
FROM_EVENTS = "trace"

# One sentence per figure, printed by the report's cold-start section and the README.
DEFINITIONS: dict[str, str] = {
    "first_call_us": "in the breakdown, the first call's time on side `cpu` (its span on the "
    "CPU, split over its CPU tree by the self time of each interval, by cause and outermost "
    "operator) or side `gpu` (the GPU activity time it launched); per variant, call 1's wall "
    "time in the trace, under the profiler: the longer of its CPU span and the span of the "
    "GPU work it launched (with `capture --cold`, which synchronizes inside each call, its "
    "span)",
    "steady_us": "the same for the median steady call: the later call of the same input "
    "shapes whose time is the median (the lower middle one for an even count); per variant, "
    "the median wall time of call 1's steady calls (`steady_calls` of them), under the "
    "profiler",
    "excess_us": "first_call_us minus steady_us: the one-off work (in the breakdown it adds up "
    "over the rows of a call and side; per variant it is the wall time's, and "
    "`cpu_excess_us`, `gpu_excess_us` are the breakdown's totals)",
    "first_call_in": "where call 1 ran, which says what its excess is the one-off cost of: a "
    "fresh process (a cold capture's manifest), a process after warm-up calls (a manifest), "
    "or this trace (not known to be the process's first call: work done before the trace "
    "began paid part of the one-off cost)",
    "cache_state": "what the caches held when call 1 ran: the manifest's (`empty`, "
    "`as_found`), else what the trace's cache events show (cache hits, compiles, or both; "
    "`cache_state_source` says which); `cache_hits` names the hit events (`--by cache` lists "
    "every cache event and what it means)",
    "cudnn_planning_us": "the first call's CPU excess of the cause `cudnn_plan`: the one "
    "figure called planning; only where it is positive and no warm-up call ran before "
    "profiling (else the plan was built before the trace began)",
    "timed_first_call_us": "call 1 timed with the wall clock in a fresh process without the "
    "profiler (a cold capture's manifest: `call_wall_ms`, the median over its timing "
    "processes); `timed_steady_us` the lower median of the timed steady calls of call 1's "
    "shape, or a warm capture's median (CUDA events, no first call); `timed_source` says "
    "which; `timed_excess_us` their difference: the truth the trace's excess is checked "
    "against",
    "timed_first_call_spread_pct": "the range of call 1 over the timing processes, (max - "
    "min) / median x 100: how much one-off costs vary from one fresh process to the next (the "
    "trace is one such process)",
    "excess_vs_timed_pct": "the trace's excess against the timed one, (excess_us - "
    "timed_excess_us) / timed_excess_us x 100: the profiler's own cost and caches that differ "
    "between the two processes make them differ",
    "steady_vs_timed_pct": "the trace's steady call against the timed one, (steady_us - "
    "timed_steady_us) / timed_steady_us x 100: what the profiler adds to a steady call",
    "advantage_us": "the baseline's steady call time minus the variant's, and "
    "`one_off_difference_us` the variant's excess minus the baseline's, both from one source "
    "(`advantage_source`): the capture's timing where the manifest has call 1 and the steady "
    "calls timed for both, else the traces (under the profiler)",
    "break_even_calls": "calls after which the variant's extra one-off work is paid back by "
    "its steady advantage: ceil(one_off_difference_us / advantage_us), 0 when it is cheaper "
    "from the first call; none where it never catches up (slower per call), where the timings "
    "disagree on which is faster per call, or where the one-off work ran in warm-up calls "
    "before profiling; `break_even_note` says which "
    "source and what it holds, or why there is none (a row of the breakdown: its own excess "
    "alone over the traces' per-call difference, side cpu only)",
}
SUMMARY_COLUMNS: dict[str, pl.DataType] = {
    "variant": pl.String(),
    "status": pl.String(),
    "call_source": pl.String(),
    "calls": pl.Int64(),
    "first_call_in": pl.String(),
    "cache_state": pl.String(),
    "cache_state_source": pl.String(),
    "cache_hits": pl.String(),
    "first_call_us": pl.Float64(),
    "steady_us": pl.Float64(),
    "steady_calls": pl.Int64(),
    "excess_us": pl.Float64(),
    "cpu_excess_us": pl.Float64(),
    "gpu_excess_us": pl.Float64(),
    "timed_source": pl.String(),
    "timed_first_call_us": pl.Float64(),
    "timed_steady_us": pl.Float64(),
    "timed_excess_us": pl.Float64(),
    "timed_first_call_spread_pct": pl.Float64(),
    "excess_vs_timed_pct": pl.Float64(),
    "steady_vs_timed_pct": pl.Float64(),
    "cudnn_planning_us": pl.Float64(),
    "top_cause": pl.String(),
    "advantage_us": pl.Float64(),
    "one_off_difference_us": pl.Float64(),
    "advantage_source": pl.String(),
    "break_even_calls": pl.Int64(),
    "break_even_note": pl.String(),
    "note": pl.String(),
}


@dataclass(frozen=True)
class ColdVariant:
    label: str
    status: str
    start: ColdStart | None
    context: ColdContext
    reason: str | None = None


@dataclass(frozen=True, repr=False)  # Shown: a short repr, tables in Jupyter
class ColdSet(Shown):
    """The cold-start comparison of a set of variants (or of one trace)."""

    summary: pl.DataFrame  # SUMMARY_COLUMNS, one row per variant
    rows: pl.DataFrame  # the breakdown: variant + cold.EXCESS_COLUMNS + context columns
    causes: pl.DataFrame  # the breakdown by cause alone (no op_name), same columns otherwise
    calls: pl.DataFrame  # variant + cold.CALL_COLUMNS
    caches: pl.DataFrame  # variant + caches.EVIDENCE_COLUMNS: the cache events of each trace
    baseline: str | None
    notes: dict[str, tuple[str, ...]]  # per variant, what a reader must know


def cold_set(
    variants: Sequence[Variant],
    baseline: str | None = None,
    *,
    manifest: Manifest | None = None,
    single: bool = False,
) -> ColdSet:
    """The cold-start comparison of ``variants``; ``manifest``: their capture manifest
    (each call's shape); ``single``: one trace given alone (no baseline to pay back against
    unless ``baseline`` names it)."""
    found = [_cold_variant(v, manifest) for v in variants]
    label = None if single and baseline is None else _baseline(found, baseline)
    timings = {v.label: _timings(v) for v in found}
    reference = timings.get(label) if label is not None else None
    paid = {k: payback(t, reference) if reference else NO_BASELINE for k, t in timings.items()}
    # The breakdown's rows hold the trace's excess: paid back with the traces' advantage.
    by_trace = {
        k: payback(t, reference, only_trace=True) if reference else NO_BASELINE
        for k, t in timings.items()
    }
    summary = pl.DataFrame(
        [_summary_row(v, timings[v.label], paid[v.label]) for v in found], schema=SUMMARY_COLUMNS
    )
    started = [v for v in found if v.start is not None]
    return ColdSet(
        summary,
        _stacked([_rows(v, by_trace[v.label], _start(v).excess, label) for v in started]),
        _stacked(
            [_rows(v, by_trace[v.label], _by_cause(_start(v).excess), label) for v in started]
        ),
        _stacked([_labelled(v, _start(v).calls) for v in started]),
        _stacked([_labelled(v, _start(v).caches) for v in started]),
        label,
        {v.label: _start(v).notes for v in started if _start(v).notes},
    )


def _start(variant: ColdVariant) -> ColdStart:
    assert variant.start is not None
    return variant.start


def _labelled(variant: ColdVariant, frame: pl.DataFrame) -> pl.DataFrame:
    return frame.select(pl.lit(variant.label).alias("variant"), pl.all())


def _stacked(frames: list[pl.DataFrame]) -> pl.DataFrame:
    return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()


def _cold_variant(variant: Variant, manifest: Manifest | None) -> ColdVariant:
    context = ColdContext.from_entry(variant.manifest_entry, manifest, variant.warm_up_calls)
    trace = variant.trace
    start = cold_start(trace, context.call_shapes) if trace is not None else None
    return ColdVariant(variant.label, variant.status, start, context, variant.reason)


def _baseline(found: list[ColdVariant], baseline: str | None) -> str | None:
    usable = [v.label for v in found if v.start is not None and v.start.excess.height]
    return pick_baseline(usable, baseline, "a variant with a first call and steady calls")


def _first_call(variant: ColdVariant, side: str = "cpu") -> pl.DataFrame:
    """The rows comparing call 1 (the first of the first shape) on one side, on the first
    rank (the summary speaks of one process)."""
    if variant.start is None or not variant.start.calls.height:
        return pl.DataFrame()
    calls = variant.start.calls
    firsts = calls.filter((pl.col("role") == FIRST) & (pl.col("rank") == calls["rank"].min()))
    return variant.start.excess.join(firsts.select("rank", "call"), on=["rank", "call"]).filter(
        pl.col("side") == side
    )


def _timings(variant: ColdVariant) -> Timings:
    """The variant's call 1 and steady call from each source, for the break-even."""
    traced = traced_times(variant.start.calls) if variant.start is not None else None
    context = variant.context
    return Timings(
        variant.label,
        context.timed,
        CallTimes(traced.first_call_us, traced.steady_us) if traced else CallTimes(),
        context.untraced,
        context.fresh_process,
        _cache_state(variant)[0],
        context.warm_up_calls,
    )


def _cache_state(variant: ColdVariant) -> tuple[str | None, str | None]:
    """The cache state and where it comes from: the manifest, else the trace's events."""
    if variant.context.cache_state is not None:
        return variant.context.cache_state, FROM_MANIFEST
    found = cache_state_of(variant.start.caches) if variant.start is not None else None
    return found, FROM_EVENTS if found is not None else None


def _summary_row(variant: ColdVariant, timings: Timings, paid: Payback) -> dict[str, object]:
    context = variant.context
    cpu = _first_call(variant)
    state, state_source = _cache_state(variant)
    hits = hits_seen(variant.start.caches) if variant.start is not None else None
    notes = [variant.reason, context.caches_note, _warm(context)]
    notes += [_in_this_trace(variant)] if cpu.height else [_no_comparison(variant)]
    notes.append(_hits_despite_empty(state, hits))
    timed = context.timed
    row: dict[str, object] = {
        "variant": variant.label,
        "status": variant.status,
        "first_call_in": context.first_call_in if variant.start is not None else None,
        "cache_state": state,
        "cache_state_source": state_source,
        "cache_hits": hits,
        "timed_source": context.timed_source,
        "timed_first_call_us": timed.first_call_us,
        "timed_steady_us": timed.steady_us,
        "timed_excess_us": timed.excess_us,
        "timed_first_call_spread_pct": context.timed_first_call_spread_pct,
        "note": "; ".join(n for n in notes if n) or None,
    }
    return row | _figures(variant, timings, cpu, paid) if cpu.height else row


def _figures(
    variant: ColdVariant, timings: Timings, cpu: pl.DataFrame, paid: Payback
) -> dict[str, object]:
    """Call 1's figures: its wall time against its steady calls' in the trace, the CPU
    side's causes and the GPU side's total, and the payback."""
    start = _start(variant)
    gpu = _first_call(variant, "gpu")
    traced = traced_times(start.calls)
    excess, timed = timings.traced.excess_us, timings.timed
    by_cause = (
        cpu.group_by("cause")
        .agg(pl.col("excess_us").sum())
        .sort(["excess_us", "cause"], descending=[True, False])
    )
    planning = by_cause.filter(pl.col("cause") == "cudnn_plan")["excess_us"]
    return {
        "call_source": start.source,
        "calls": start.calls.filter(pl.col("rank") == cpu["rank"][0]).height,
        "first_call_us": traced.first_call_us,
        "steady_us": traced.steady_us,
        "steady_calls": traced.steady_calls,
        "excess_us": excess,
        "cpu_excess_us": float(cpu["excess_us"].sum()),
        "gpu_excess_us": float(gpu["excess_us"].sum()) if gpu.height else None,
        "excess_vs_timed_pct": _pct(excess, timed.excess_us),
        "steady_vs_timed_pct": _pct(traced.steady_us, timed.steady_us),
        "cudnn_planning_us": _planning(variant, planning),
        "top_cause": by_cause["cause"][0],
        "advantage_us": paid.advantage_us,
        "one_off_difference_us": paid.one_off_difference_us,
        "advantage_source": paid.source,
        "break_even_calls": paid.calls,
        "break_even_note": paid.note,
    }


def _pct(value: float | None, truth: float | None) -> float | None:
    """``value`` against ``truth``, in percent of ``truth`` (None without both)."""
    if value is None or not truth:
        return None
    return (value - truth) / truth * 100


def _planning(variant: ColdVariant, planning: pl.Series) -> float | None:
    """cuDNN's one-off plan building: the first call's excess of the cause `cudnn_plan`, only
    where it is one-off work that the trace holds: positive, and no warm-up call ran before
    profiling (there, the plan was built before the trace began)."""
    if variant.context.warm_up_calls or not planning.len() or planning[0] <= 0:
        return None
    return float(planning[0])


def _warm(context: ColdContext) -> str | None:
    if not context.warm_up_calls:
        return None
    calls = "call" if context.warm_up_calls == 1 else "calls"
    return (
        f"{context.warm_up_calls} warm-up {calls} ran before profiling (manifest): the one-off "
        "work is not in this trace, only what is left of it in the first profiled call"
    )


def _in_this_trace(variant: ColdVariant) -> str | None:
    """The caveat of a call 1 not known to be the process's first, with the trace's signs
    of earlier work."""
    if variant.start is None or variant.context.first_call_in != IN_THIS_TRACE:
        return None
    ops, activities = variant.start.earlier_work
    earlier = ""
    if ops or activities:
        earlier = (
            f" (this trace holds {_count(ops, 'operator')} and "
            f"{_count(activities, 'GPU activity', 'GPU activities')} before call 1)"
        )
    return (
        "call 1 is the first call in this trace, not known to be a fresh process's first: "
        "work the process did before the trace began (a warm-up, earlier steps, another "
        f"model) paid part of the one-off cost{earlier}; a cold capture (`python -m capture "
        "--cold`) records fresh processes"
    )


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n:,} {one if n == 1 else many or one + 's'}"


def _hits_despite_empty(state: str | None, hits: str | None) -> str | None:
    if state != "empty" or hits is None:
        return None
    return (
        f"the manifest says the caches started empty, yet the trace shows cache hits ({hits}): "
        "entries written earlier in the same process"
    )


def _no_comparison(variant: ColdVariant) -> str | None:
    if variant.start is None:
        return None
    if variant.start.calls.height < 2:
        return "fewer than two calls found: nothing to compare the first call with"
    return "; ".join(variant.start.notes) or "no steady call to compare the first call with"


def _by_cause(excess: pl.DataFrame) -> pl.DataFrame:
    """The breakdown summed over operators."""
    keys = [k for k in BY_CAUSE if k != "variant"]
    return (
        excess.group_by(keys, maintain_order=True)
        .agg(pl.col("first_call_us", "steady_us", "excess_us").sum())
        .with_columns(share_of_excess_pct=share_of_excess())
        .sort(
            ["rank", "call", "side", "excess_us", "cause"],
            descending=[False, False, False, True, False],
        )
    )


def _rows(
    variant: ColdVariant, paid: Payback, excess: pl.DataFrame, baseline: str | None
) -> pl.DataFrame:
    """``excess`` with the variant, its context and each row's break-even: its own excess
    over the traces' per-call difference (side cpu; none where the traces give none)."""
    assert variant.start is not None
    cpu = pl.col("side") == "cpu"
    break_even: pl.Expr = pl.lit(None, pl.Int64)
    note: pl.Expr = pl.when(cpu).then(pl.lit(paid.note)).otherwise(pl.lit(GPU_BREAK_EVEN))
    if paid.calls is not None and paid.advantage_us:
        calls = (pl.col("excess_us") / paid.advantage_us).ceil().clip(lower_bound=0)
        break_even = pl.when(cpu).then(calls.cast(pl.Int64))
        own = (
            f"this row's excess alone over {paid.advantage_us:,.1f} µs less per call than "
            f"{baseline} ({paid.source})"
        )
        note = pl.when(cpu).then(pl.lit(own)).otherwise(pl.lit(GPU_BREAK_EVEN))
    return excess.select(
        pl.lit(variant.label).alias("variant"),
        pl.all(),
        break_even_calls=break_even,
        break_even_note=note,
        cache_state=pl.lit(_cache_state(variant)[0], pl.String),
        call_source=pl.lit(variant.start.source),
    )
