"""The sentences an attention section opens with: what matters first, each from its rows.

Iterating here is over result rows (a handful), not trace events.
"""

from __future__ import annotations

import polars as pl

from traceanalyze.analyses.attention.calls import CAPTURED
from traceanalyze.analyses.attention.host import CUDNN_PLAN, DESCRIPTIONS
from traceanalyze.analyses.attention.rules import BACKWARD, COMPOSED, FORWARD
from traceanalyze.units import byte_size

# At most this many SDPA rows get a sentence of their own.
WHY_NOT_SENTENCES = 3


def _n(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _calls(value: float) -> str:
    """ "call" or "calls", agreeing with ``value``."""
    return "call" if value == 1 else "calls"


def findings(
    rows: pl.DataFrame, host: pl.DataFrame, gpu_us_per_iter: float, iterations: int
) -> tuple[str, ...]:
    """The section's first sentences (empty for a trace without attention)."""
    if not rows.height:
        return ()
    captured = rows.filter(pl.col("source") == CAPTURED)
    ran = rows.filter(pl.col("source") != CAPTURED)
    said = [_overview(ran, gpu_us_per_iter, iterations)] if ran.height else []
    said += _captured(captured, iterations)
    said += _composed(rows)
    said += _why_not(rows)
    said += _flex(rows)
    said += _host(host)
    return tuple(s for s in said if s)


def _captured(rows: pl.DataFrame, iterations: int) -> list[str]:
    """Calls captured into a graph: they ran nowhere in the trace."""
    if not rows.height:
        return []
    calls = float(rows["calls_per_iter"].sum())
    by_impl = rows.group_by("implementation", maintain_order=True).agg(
        pl.col("calls_per_iter").sum()
    )
    parts = ", ".join(f"{impl} {_n(c)}" for impl, c in by_impl.rows())  # a handful of rows
    per = "per iteration" if iterations > 1 else "in the trace's one iteration"
    verb = "was" if _calls(calls) == "call" else "were"
    return [
        f"{_n(calls)} attention {_calls(calls)} {per} ({parts}) {verb} captured into a CUDA/HIP "
        "graph, not run: they take their GPU time at the graph's replays, which this trace "
        "does not hold, and no attention op records their per-call shapes."
    ]


def _overview(rows: pl.DataFrame, gpu_us_per_iter: float, iterations: int) -> str:
    calls = float(rows["calls_per_iter"].sum())
    us = float(rows["gpu_us_per_iter"].sum() or 0)
    by_impl = (
        rows.group_by("implementation")
        .agg(pl.col("gpu_us_per_iter").sum(), pl.col("calls_per_iter").sum())
        .sort("gpu_us_per_iter", descending=True, nulls_last=True)
    )
    parts = ", ".join(
        f"{impl} {_n(c)}" for impl, _, c in by_impl.select(
            "implementation", "gpu_us_per_iter", "calls_per_iter"
        ).rows()
    )  # fmt: skip
    share = (
        f": {us / gpu_us_per_iter * 100:.1f}% of the GPU activity time" if gpu_us_per_iter else ""
    )
    per = "per iteration" if iterations > 1 else "in the trace's one iteration"
    if not gpu_us_per_iter:
        verb = "runs" if _calls(calls) == "call" else "run"
        where = "on the CPU (no GPU activity)"
        return f"{_n(calls)} attention {_calls(calls)} {per} ({parts}) {verb} {where}."
    verb = "takes" if _calls(calls) == "call" else "take"
    return (
        f"{_n(calls)} attention {_calls(calls)} {per} ({parts}) {verb} {_n(us)} µs of GPU "
        f"time{share}."
    )


def _composed(rows: pl.DataFrame) -> list[str]:
    composed = rows.filter(pl.col("implementation").is_in(list(COMPOSED)))
    if not composed.height:
        return []
    total_calls = float(rows.filter(pl.col("direction") == FORWARD)["calls_per_iter"].sum())
    said = []
    for direction in (FORWARD, BACKWARD):
        part = composed.filter(pl.col("direction") == direction)
        if not part.height:
            continue
        calls = float(part["calls_per_iter"].sum())
        share = part["share_of_gpu_activity_pct"].sum()
        impls = ", ".join(sorted(set(part["implementation"])))
        of = f" of {_n(total_calls)}" if direction == FORWARD else ""
        verb = "runs" if _calls(calls) == "call" else "run"
        text = (
            f"{_n(calls)}{of} attention {direction} {_calls(calls)} per "
            f"iteration {verb} composed attention ({impls})"
        )
        if not share:  # on the CPU: no GPU time, writes or estimate to give
            said.append(text + ".")
            continue
        text += f": {share:.1f}% of the GPU activity time"
        text += _scores(part)
        text += _fused(part)
        said.append(text + ".")
    return said


def _scores(part: pl.DataFrame) -> str:
    """The score writes of ``part``'s rows: per iteration (each row's bytes per call times
    its calls) and per call (one figure where the rows agree, else their range)."""
    writing = part.filter(pl.col("scores_bytes") > 0)
    if not writing.height:
        return ""
    calls = float(writing["calls_per_iter"].sum())
    per_iter = float((writing["scores_bytes"] * writing["calls_per_iter"]).sum())
    low, high = int(writing["scores_bytes"].min()), int(writing["scores_bytes"].max())  # type: ignore[arg-type]
    per_call = byte_size(low) if low == high else f"{byte_size(low)} to {byte_size(high)}"
    amount = (
        f"{per_call} per call"
        if calls == 1
        else f"{byte_size(per_iter)} per iteration ({per_call} per call)"
    )
    text = f"; the scores write {amount}"
    if writing["mask_copies"].any():
        text += ", an out-of-place masked_fill copying them once more"
    return text


def _fused(part: pl.DataFrame) -> str:
    """What a fused kernel would need for ``part``'s rows with an estimate, against what they
    took, both per iteration."""
    estimated = part.filter(pl.col("fused_estimate_us").is_not_null())
    if not estimated.height:
        return ""
    calls = estimated["calls_per_iter"]
    fused = float((estimated["fused_estimate_us"] * calls).sum())
    took = float((estimated["gpu_us_per_call"] * calls).sum())
    sources = "; ".join(estimated["fused_estimate_source"].unique(maintain_order=True))
    per = "per call" if float(calls.sum()) == 1 else "per iteration"
    return f"; a fused kernel would need ~{_n(fused)} µs {per} against {_n(took)} µs (at {sources})"


def _why_not(rows: pl.DataFrame) -> list[str]:
    slow = rows.filter(pl.col("why_not").is_not_null()).sort(
        "gpu_us_per_iter", descending=True, nulls_last=True
    )
    said = []
    # sentences for people: at most WHY_NOT_SENTENCES rows
    for row in slow.head(WHY_NOT_SENTENCES).iter_rows(named=True):
        shape = _shape(row)
        said.append(
            f"{_n(row['calls_per_iter'])} {row['implementation']} "
            f"{_calls(row['calls_per_iter'])} per iteration"
            f"{shape} did not run a faster backend: {row['why_not']}."
        )
    if slow.height > WHY_NOT_SENTENCES:
        said.append(f"{slow.height - WHY_NOT_SENTENCES} more SDPA rows say why not in the table.")
    return said


def _shape(row: dict[str, object]) -> str:
    keys = ("batch", "heads_q", "seq_q", "seq_kv", "head_dim", "dtype")
    if row.get("seq_q") is None:
        return ""
    values = [f"{k} {row[k]}" for k in keys if row.get(k) is not None]
    return " (" + ", ".join(values) + ")"


def _flex(rows: pl.DataFrame) -> list[str]:
    flex = rows.filter((pl.col("mask") == "block") & pl.col("blocks_q").is_not_null())
    if not flex.height:
        return []
    row = flex.row(0, named=True)
    return [
        f"flex attention uses a block mask of {row['blocks_q']} x {row['blocks_kv']} blocks; "
        "which of them it computes (the mask's sparsity) is not in the trace, so its FLOPs "
        "count every block: an upper bound."
    ]


def _host(host: pl.DataFrame) -> list[str]:
    said = []
    # one sentence per attention library host cost with a note: a handful of rows
    for row in host.filter(pl.col("note").is_not_null()).iter_rows(named=True):
        said.append(f"{row['name']}: {row['note']} ({_n(row['us_per_call'])} µs per call).")
    named = host.filter(pl.col("kind") != CUDNN_PLAN)
    # the three largest host costs, one sentence each
    for row in named.head(3).iter_rows(named=True):
        said.append(
            f"{DESCRIPTIONS.get(row['kind'], row['kind'])}: {_n(row['calls_per_iter'])} "
            f"{_calls(row['calls_per_iter'])} per "
            f"iteration, {_n(row['us_per_call'])} µs each on the CPU ({row['name']})."
        )
    return said
