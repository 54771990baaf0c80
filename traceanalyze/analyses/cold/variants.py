"""Cold start across variants: each variant's one-off cost, checked against the capture's
wall-clock timing, and the calls after which its steady advantage over the baseline pays it
back (``break_even_calls``).

Break-even: ``ceil((excess_us - baseline excess_us) / advantage_us)`` (0 when the variant's
one-off cost is below the baseline's), the advantage being the baseline's steady call time
minus the variant's. In the summary both come from the capture's wall-clock timing
(``timed_*``, no profiler) where the manifest has it for the variant and the baseline, else
from the traces; a row of the breakdown pays back its own (trace) excess with the same
advantage, on the ``cpu`` side only (the call's wall time; GPU time overlaps it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from capture.manifest import Manifest
from traceanalyze.analyses.cold.context import (
    FROM_TIMING,
    NO_BASELINE,
    ColdContext,
    Payback,
    payback,
)
from traceanalyze.analyses.cold.first_calls import FIRST, ColdStart, cold_start, share_of_excess
from traceanalyze.analyses.variants.compare import pick_baseline
from traceanalyze.display import Shown
from traceanalyze.load.variants import Variant

GPU_BREAK_EVEN = "counted on the call's wall time (side cpu)"
BY_CAUSE = ["variant", "rank", "call", "steady_call", "steady_calls", "side", "cause"]

# One sentence per figure, printed by the report's cold-start section and the README.
DEFINITIONS: dict[str, str] = {
    "first_call_us": "the first call's time: on side `cpu` its span on the CPU (with "
    "`capture --cold`, which synchronizes inside each call, its wall time), on side `gpu` the "
    "GPU activity time it launched; split over the call's CPU tree by the self time of each "
    "interval, by cause and outermost operator",
    "steady_us": "the same for the median steady call: the later call of the same input "
    "shapes whose time is the median (the lower middle one for an even count)",
    "excess_us": "first_call_us minus steady_us: the one-off work (it adds up over the rows "
    "of a call and side)",
    "cudnn_planning_us": "the first call's CPU excess of the cause `cudnn_plan`: the one "
    "figure called planning; only where it is positive and no warm-up call ran before "
    "profiling (else the plan was built before the trace began)",
    "timed_first_call_us": "call 1 timed with the wall clock in fresh processes without the "
    "profiler (capture manifest; the median over its timing processes); `timed_steady_us` the "
    "median of the steady calls, `timed_excess_us` their difference: the truth the trace's "
    "excess is checked against",
    "timed_first_call_spread_pct": "the range of call 1 over the timing processes, (max - "
    "min) / median x 100: how much one-off costs vary from one fresh process to the next (the "
    "trace is one such process)",
    "excess_vs_timed_pct": "the trace's excess against the timed one, (excess_us - "
    "timed_excess_us) / timed_excess_us x 100: the profiler's own cost and caches that differ "
    "between the two processes make them differ",
    "advantage_us": "the baseline's steady call time minus the variant's: from the capture's "
    "timing where the manifest has it for both (`advantage_source` capture timing), else the "
    "wall time of each trace's median steady call (trace)",
    "break_even_calls": "calls after which the variant's one-off cost beyond the baseline's "
    "own is paid back by its steady advantage over the baseline (the baseline's steady call "
    "time minus the variant's): ceil((excess_us - the baseline's excess_us) / advantage_us), "
    "both excesses from the same source as the advantage, 0 when the variant is cheaper from "
    "the first call (a row of the breakdown: its own excess alone, side cpu only); none "
    "without an advantage",
}
SUMMARY_COLUMNS: dict[str, pl.DataType] = {
    "variant": pl.String(),
    "status": pl.String(),
    "call_source": pl.String(),
    "calls": pl.Int64(),
    "cache_state": pl.String(),
    "first_call_us": pl.Float64(),
    "steady_us": pl.Float64(),
    "excess_us": pl.Float64(),
    "gpu_excess_us": pl.Float64(),
    "timed_first_call_us": pl.Float64(),
    "timed_steady_us": pl.Float64(),
    "timed_excess_us": pl.Float64(),
    "timed_first_call_spread_pct": pl.Float64(),
    "excess_vs_timed_pct": pl.Float64(),
    "cudnn_planning_us": pl.Float64(),
    "top_cause": pl.String(),
    "advantage_us": pl.Float64(),
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
    warm_up_calls: int | None = None  # calls before profiling, as the manifest says


@dataclass(frozen=True, repr=False)  # Shown: a short repr, tables in Jupyter
class ColdSet(Shown):
    """The cold-start comparison of a set of variants (or of one trace)."""

    summary: pl.DataFrame  # SUMMARY_COLUMNS, one row per variant
    rows: pl.DataFrame  # the breakdown: variant + cold.EXCESS_COLUMNS + context columns
    causes: pl.DataFrame  # the breakdown by cause alone (no op_name), same columns otherwise
    calls: pl.DataFrame  # variant + cold.CALL_COLUMNS
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
    reference = next((v for v in found if v.label == label), None)
    paybacks = {v.label: _payback(v, reference) for v in found}
    summary = pl.DataFrame(
        [_summary_row(v, paybacks[v.label]) for v in found], schema=SUMMARY_COLUMNS
    )
    rows = [_rows(v, paybacks[v.label], v.start.excess) for v in found if v.start is not None]
    by_cause = [
        _rows(v, paybacks[v.label], _by_cause(v.start.excess)) for v in found if v.start is not None
    ]
    calls = [
        v.start.calls.select(pl.lit(v.label).alias("variant"), pl.all())
        for v in found
        if v.start is not None
    ]
    return ColdSet(
        summary,
        pl.concat(rows, how="diagonal_relaxed") if rows else pl.DataFrame(),
        pl.concat(by_cause, how="diagonal_relaxed") if by_cause else pl.DataFrame(),
        pl.concat(calls, how="diagonal_relaxed") if calls else pl.DataFrame(),
        label,
        {v.label: v.start.notes for v in found if v.start is not None and v.start.notes},
    )


def _cold_variant(variant: Variant, manifest: Manifest | None) -> ColdVariant:
    context = ColdContext.from_entry(variant.manifest_entry, manifest)
    trace = variant.trace
    start = cold_start(trace, context.call_shapes) if trace is not None else None
    return ColdVariant(
        variant.label, variant.status, start, context, variant.reason, variant.warm_up_calls
    )


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


def _steady_times(variant: ColdVariant | None) -> tuple[float | None, float | None]:
    """(timed, trace) steady call time of call 1's shape: the capture's wall-clock median, and
    the wall time of the median steady call in the trace."""
    if variant is None or variant.start is None:
        return None, None
    rows = _first_call(variant)
    trace = None
    if rows.height:
        steady = variant.start.calls.join(
            rows.select("rank", call="steady_call").unique(), on=["rank", "call"]
        )
        trace = float(steady["wall_us"][0])
    return variant.context.timed_steady_us, trace


def _payback(variant: ColdVariant, reference: ColdVariant | None) -> Payback:
    if reference is None:
        return NO_BASELINE
    return payback(
        _steady_times(variant),
        _steady_times(reference),
        reference.label,
        variant.label == reference.label,
        _one_off(reference),
    )


def _one_off(variant: ColdVariant) -> tuple[float | None, float | None]:
    """(timed, trace) one-off cost of call 1: the capture's timed excess, the trace's CPU
    excess."""
    rows = _first_call(variant)
    trace = float(rows["excess_us"].sum()) if rows.height else None
    return variant.context.timed_excess_us, trace


def _summary_row(variant: ColdVariant, paid: Payback) -> dict[str, object]:
    context = variant.context
    cpu = _first_call(variant)
    notes = [variant.reason, context.caches_note, _warm(variant)]
    if not cpu.height:
        notes.append(_no_comparison(variant))
    row: dict[str, object] = {
        "variant": variant.label,
        "status": variant.status,
        "cache_state": context.cache_state,
        "timed_first_call_us": context.timed_first_call_us,
        "timed_steady_us": context.timed_steady_us,
        "timed_excess_us": context.timed_excess_us,
        "timed_first_call_spread_pct": context.timed_first_call_spread_pct,
        "note": "; ".join(n for n in notes if n) or None,
    }
    return row | _figures(variant, cpu, paid) if cpu.height else row


def _figures(variant: ColdVariant, cpu: pl.DataFrame, paid: Payback) -> dict[str, object]:
    """Call 1's figures from its comparison rows on the CPU side (and the GPU side's total)."""
    assert variant.start is not None
    gpu = _first_call(variant, "gpu")
    excess = float(cpu["excess_us"].sum())
    timed = variant.context.timed_excess_us
    by_cause = (
        cpu.group_by("cause")
        .agg(pl.col("excess_us").sum())
        .sort(["excess_us", "cause"], descending=[True, False])
    )
    planning = by_cause.filter(pl.col("cause") == "cudnn_plan")["excess_us"]
    return {
        "call_source": variant.start.source,
        "calls": variant.start.calls.filter(pl.col("rank") == cpu["rank"][0]).height,
        "first_call_us": float(cpu["first_call_us"].sum()),
        "steady_us": float(cpu["steady_us"].sum()),
        "excess_us": excess,
        "gpu_excess_us": float(gpu["excess_us"].sum()) if gpu.height else None,
        "excess_vs_timed_pct": (excess - timed) / timed * 100 if timed else None,
        "cudnn_planning_us": _planning(variant, planning),
        "top_cause": by_cause["cause"][0],
        "advantage_us": paid.advantage_us,
        "advantage_source": paid.source,
        "break_even_calls": paid.net_calls(timed if paid.source == FROM_TIMING else excess),
        "break_even_note": paid.note,
    }


def _planning(variant: ColdVariant, planning: pl.Series) -> float | None:
    """cuDNN's one-off plan building: the first call's excess of the cause `cudnn_plan`, only
    where it is one-off work that the trace holds: positive, and no warm-up call ran before
    profiling (there, the plan was built before the trace began)."""
    if variant.warm_up_calls or not planning.len() or planning[0] <= 0:
        return None
    return float(planning[0])


def _warm(variant: ColdVariant) -> str | None:
    if not variant.warm_up_calls:
        return None
    calls = "call" if variant.warm_up_calls == 1 else "calls"
    return (
        f"{variant.warm_up_calls} warm-up {calls} ran before profiling (manifest): the one-off "
        "work is not in this trace, only what is left of it in the first profiled call"
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


def _rows(variant: ColdVariant, paid: Payback, excess: pl.DataFrame) -> pl.DataFrame:
    """``excess`` with the variant, its context and each row's break-even."""
    assert variant.start is not None
    cpu = pl.col("side") == "cpu"
    break_even: pl.Expr = pl.lit(None, pl.Int64)
    note: pl.Expr = pl.when(cpu).then(pl.lit(paid.note)).otherwise(pl.lit(GPU_BREAK_EVEN))
    if paid.note is None and paid.advantage_us:
        calls = (pl.col("excess_us") / paid.advantage_us).ceil().clip(lower_bound=0)
        break_even = pl.when(cpu).then(calls.cast(pl.Int64))
        note = pl.when(~cpu).then(pl.lit(GPU_BREAK_EVEN))
    return excess.select(
        pl.lit(variant.label).alias("variant"),
        pl.all(),
        break_even_calls=break_even,
        break_even_note=note,
        cache_state=pl.lit(variant.context.cache_state, pl.String),
        call_source=pl.lit(variant.start.source),
    )
