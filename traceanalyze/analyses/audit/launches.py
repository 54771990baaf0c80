"""Launches and activities that do not pair: ``launches_without_activity`` and
``activity_without_launch``.

A launch call and the GPU activity it starts share a correlation id (per rank). A call whose
activity is missing is a dropped record, unless its thread was capturing a graph (the launch is
recorded into the graph, not run). An activity whose call is missing was launched before the
profiled window when its correlation id precedes every call's of its rank (CUPTI and roctracer
number calls in order), else its call was dropped inside the window.
"""

from __future__ import annotations

import polars as pl

from traceanalyze.analyses.audit.figures import Finding, weighed
from traceanalyze.analyses.audit.rules import CAPTURE_BEGIN, CAPTURE_END
from traceanalyze.analyses.audit.steps import (
    Weight,
    all_steps,
    counted_rows,
    counted_steps,
    step_at,
    step_count,
)
from traceanalyze.analyses.audit.steps import weigh as weigh_repair
from traceanalyze.analyses.audit.streams import stream_walk
from traceanalyze.analyses.audit.text import clipped, counts_by, examples, sentence
from traceanalyze.analyses.graphs import GRAPH_LAUNCH_APIS
from traceanalyze.link import LAUNCH_APIS, RUNTIME_CATS, THREAD, nearest_ancestor
from traceanalyze.trace import Trace

CHECK_LAUNCHES = "launches_without_activity"
CHECK_ACTIVITY = "activity_without_launch"
# What a launch call puts on the GPU, by its name (a graph launch runs kernels).
_CALL_KINDS = (("memcpy", "(?i)memcpy"), ("memset", "(?i)memset"))
_KINDS = ("kernel", "memcpy", "memset")
_COUNT_FIGURE = {
    "kernel": "kernels_per_iter",
    "memcpy": "memcpy_per_iter",
    "memset": "memset_per_iter",
}
_TIME_FIGURE = {
    "kernel": "gpu_kernel_us_per_iter",
    "memcpy": "gpu_memcpy_us_per_iter",
    "memset": "gpu_memset_us_per_iter",
}
# A missing activity's GPU time fills what is idle, up to its length: these move as much.
_GPU_TIME_FIGURES = (
    "gpu_activity_us_per_iter",
    "gpu_busy_us_per_iter",
    "gpu_idle_us_per_iter",
    "launch_op_us_per_iter",
)
# Of those, the figures missing activities make larger (the GPU looks idle where it worked).
_INFLATED = ("gpu_idle_us_per_iter",)


def launches_without_activity(trace: Trace) -> list[Finding]:
    """Launch calls whose GPU activity is not in the trace: dropped, or made during a capture."""
    calls = _launch_calls(trace)
    ran = trace.gpu.select("rank", "correlation").drop_nulls().unique()
    missing = calls.join(ran, on=["rank", "correlation"], how="anti", maintain_order="left")
    if not missing.height:
        return []
    missing = missing.with_columns(
        captured=_during_capture(trace.cpu, missing),
        launch_op=trace.cpu["name"].gather(
            nearest_ancestor(trace.cpu, missing["op_id"], pl.col("cat") == "cpu_op")
        ),
        kind=_call_kind(),
    )
    found = []
    dropped = missing.filter(~pl.col("captured"))
    if dropped.height:
        steps = counted_steps(trace)
        found.append(_dropped(steps, counted_rows(steps, "cpu", dropped, "op_id")))
    captured = missing.filter(pl.col("captured"))
    if captured.height:
        found.append(
            Finding(
                CHECK_LAUNCHES,
                "captured",
                captured.height,
                0.0,
                sentence(
                    [
                        f"{captured.height:,} launch calls during a graph capture "
                        f"({counts_by(captured, 'name')})",
                        "first: " + examples(captured, _call_words()),
                    ]
                ),
            )
        )
    return found


_CALL_COLUMNS = (
    "rank",
    "op_id",
    "pid",
    "tid",
    "name",
    "ts_ns",
    "dur_ns",
    "correlation",
    "iteration",
)


def _launch_calls(trace: Trace) -> pl.DataFrame:
    """Runtime/driver calls that put work on a GPU, with a correlation id."""
    # The columns first: filtering the whole frame copies every column of the rows kept.
    return (
        trace.cpu.select(*_CALL_COLUMNS, "cat")
        .filter(
            pl.col("cat").is_in(RUNTIME_CATS)
            & pl.col("name").is_in(LAUNCH_APIS)
            & pl.col("correlation").is_not_null()
        )
        .drop("cat")
    )


def _call_kind() -> pl.Expr:
    kind: pl.Expr = pl.lit("kernel")
    for name, pattern in _CALL_KINDS:
        kind = pl.when(pl.col("name").str.contains(pattern)).then(pl.lit(name)).otherwise(kind)
    return kind.alias("kind")


def _during_capture(cpu: pl.DataFrame, calls: pl.DataFrame) -> pl.Series:
    """Whether each call came while its thread was capturing a stream: the last capture call
    on the thread before it began a capture (and none ended it since)."""
    marks = (
        cpu.filter(
            pl.col("cat").is_in(RUNTIME_CATS) & pl.col("name").is_in([*CAPTURE_BEGIN, *CAPTURE_END])
        )
        .select(*THREAD, "ts_ns", begins=pl.col("name").is_in(CAPTURE_BEGIN))
        .sort("ts_ns")
    )
    if not marks.height:
        return pl.Series("captured", [False] * calls.height)
    rows = calls.select(*THREAD, "ts_ns").with_row_index("_row")
    joined = (
        rows.sort("ts_ns")
        .join_asof(marks, on="ts_ns", by=THREAD, strategy="backward", check_sortedness=False)
        .sort("_row")
    )
    return joined["begins"].fill_null(value=False).alias("captured")


def _call_words() -> pl.Expr:
    op = pl.col("launch_op").fill_null("no op")
    return pl.format("{} (correlation {}, under {})", "name", "correlation", op)


def _dropped(steps: Trace, dropped: pl.DataFrame) -> Finding:
    """The dropped launches, with the GPU time they would have added: per call, the median
    duration of recorded activities launched by the same call from the same op, else by the
    same call, else nothing known (0)."""
    recorded = steps.gpu.filter(pl.col("linked")).select(
        name="launch_api", launch_op="op_name", dur_ns="dur_ns"
    )
    by_op = recorded.group_by("name", "launch_op").agg(by_op=pl.col("dur_ns").median())
    by_call = recorded.group_by("name").agg(by_call=pl.col("dur_ns").median())
    estimated = (
        dropped.join(
            by_op, on=["name", "launch_op"], how="left", nulls_equal=True, maintain_order="left"
        )
        .join(by_call, on="name", how="left", maintain_order="left")
        .with_columns(
            unknown=pl.col("by_op").is_null() & pl.col("by_call").is_null(),
            est_ns=pl.coalesce("by_op", "by_call", pl.lit(0.0)),
        )
    )
    n = step_count(steps)
    inside = estimated.filter(pl.col("iteration").is_not_null())
    moves: dict[str, float] = {}
    for kind in _KINDS:
        rows = inside.filter(pl.col("kind") == kind)
        if rows.height:
            moves[_COUNT_FIGURE[kind]] = rows.height / n
            moves[_TIME_FIGURE[kind]] = float(rows["est_ns"].sum()) / 1e3 / n
    estimate_us = float(inside["est_ns"].sum()) / 1e3 / n
    if estimate_us > 0:
        moves.update(dict.fromkeys(_GPU_TIME_FIGURES, estimate_us))
    nothing = "the trace holds no GPU activity at all" if not steps.gpu.height else ""
    return Finding(
        CHECK_LAUNCHES,
        "dropped",
        dropped.height,
        estimate_us,
        sentence(
            [
                f"{dropped.height:,} launch calls without GPU activity "
                f"({counts_by(dropped, 'name')})",
                f"{inside.height:,} inside the counted iterations"
                if inside.height < dropped.height
                else "",
                nothing,
                "first: " + examples(dropped, _call_words()),
                f"estimated missing GPU time {estimate_us:,.3f} µs per iteration (median of "
                "recorded activities launched alike)"
                if inside.height
                else "",
                f"{unknown:,} of them with no recorded activity launched alike: their time is "
                "unknown, counted as 0"
                if (unknown := int(inside["unknown"].sum()))
                else "",
            ]
        ),
        {k: v for k, v in moves.items() if v > 0},
        # The lost records are missing from every figure but idle time, which they inflate.
        deltas={k: v if k in _INFLATED else -v for k, v in moves.items() if v > 0},
    )


def activity_without_launch(trace: Trace) -> list[Finding]:
    """GPU activities whose launch call is not in the trace, split into work launched before
    the window and calls missing inside it; and activities that share a launch call which
    starts one activity (not a graph launch) with an earlier one."""
    found = _without_launch(trace)
    extra = _extra_activities(trace)
    if extra.height:
        steps = counted_steps(trace)
        found.append(_extra_finding(steps, counted_rows(steps, "gpu", extra, "_row")))
    return found


def _without_launch(trace: Trace) -> list[Finding]:
    lone = trace.gpu.with_row_index("_row").filter(~pl.col("linked"))
    if not lone.height:
        return []
    steps = counted_steps(trace)
    lone = counted_rows(steps, "gpu", lone, "_row")
    calls = (
        trace.cpu.filter(pl.col("cat").is_in(RUNTIME_CATS) & pl.col("correlation").is_not_null())
        .group_by("rank")
        .agg(first_correlation=pl.col("correlation").min(), first_call_ns=pl.col("ts_ns").min())
    )
    lone = (
        lone.with_columns(step=step_at(steps, lone, "ts_ns"))
        .join(calls, on="rank", how="left", maintain_order="left")
        .with_columns(
            before=pl.when(pl.col("correlation").is_not_null())
            .then(pl.col("correlation") < pl.col("first_correlation"))
            .otherwise(pl.col("ts_ns") < pl.col("first_call_ns"))
        )
    )
    n = step_count(steps)
    found = []
    no_calls = lone.filter(pl.col("first_correlation").is_null())
    if no_calls.height:
        found.append(_lone_finding(steps, no_calls, "no_launch_calls", n, weigh=False))
    rest = lone.filter(pl.col("first_correlation").is_not_null())
    for finding, rows, weigh in (
        ("before_window", rest.filter(pl.col("before")), False),
        ("inside_window", rest.filter(~pl.col("before")), True),
    ):
        if rows.height:
            found.append(_lone_finding(steps, rows, finding, n, weigh=weigh))
    return found


def _lone_finding(
    steps: Trace, rows: pl.DataFrame, finding: str, n: int, *, weigh: bool
) -> Finding:
    """Activities without a launch: their time inside the counted steps (by their own start,
    or their iteration where they have one) and, where ``weigh``, what putting them in the step
    that holds their start moves."""
    placed = pl.coalesce("iteration", "step")
    in_steps = rows.filter(placed.is_not_null())
    affected_us = float(in_steps["dur_ns"].sum()) / 1e3 / n
    weight = Weight({}, verdict_changes=False)
    if weigh and in_steps.height:
        every = all_steps(steps)
        put_back = (
            every.gpu["iteration"].clone().scatter(rows["_row"], step_at(every, rows, "ts_ns"))
        )
        weight = weigh_repair(steps, gpu=every.gpu.with_columns(put_back.alias("iteration")))
        # No op launched them: the per-op figures miss all of their time.
        weight.moves["launch_op_us_per_iter"] = affected_us
    first = rows.select(pl.col("correlation").min(), pl.col("first_correlation").first()).row(0)
    return Finding(
        CHECK_ACTIVITY,
        finding,
        rows.height,
        affected_us,
        sentence(
            [
                f"{rows.height:,} GPU activities without a launch call ({counts_by(rows, 'kind')})",
                f"correlation ids from {first[0]}, the trace's launch calls from {first[1]}"
                if first[1] is not None and first[0] is not None
                else "",
                f"{in_steps.height:,} run inside the counted iterations "
                f"({affected_us:,.3f} µs per iteration)",
                "first: " + examples(rows, pl.format("{} on stream {}", clipped("name"), "stream")),
            ]
        ),
        {k: v for k, v in weight.moves.items() if v > 0},
        verdict_changes=weight.verdict_changes,
        deltas=weight.deltas,
    )


def _extra_activities(trace: Trace) -> pl.DataFrame:
    """Activities after the first of a launch call that starts one (every call but a graph
    launch: none of the project's 100 real traces has a second), the latest ones, less as
    many as there are overlapping duplicates of it (``overlapping_on_stream`` counts those)."""
    one_each = trace.gpu.with_row_index("_row").filter(
        pl.col("linked") & ~pl.col("launch_api").is_in(GRAPH_LAUNCH_APIS)
    )
    shared = (
        one_each.group_by("rank", "correlation").agg(records=pl.len()).filter(pl.col("records") > 1)
    )
    if not shared.height:  # the common case: every call has its one activity
        return one_each.clear()
    duplicates = (
        stream_walk(trace)
        .filter(pl.col("how") == "duplicate")
        .group_by("rank", "correlation")
        .agg(duplicates=pl.len())
    )
    order = pl.col("ts_ns").rank("ordinal").over("rank", "correlation")
    return (
        one_each.join(shared.select("rank", "correlation"), on=["rank", "correlation"])
        .join(duplicates, on=["rank", "correlation"], how="left")
        .filter(order > 1 + pl.col("duplicates").fill_null(0))
        .drop("duplicates")
    )


def _extra_finding(steps: Trace, extra: pl.DataFrame) -> Finding:
    """Extra activities of a launch call, weighed by dropping them."""
    n = step_count(steps)
    every = all_steps(steps).gpu.with_row_index("_row")
    gpu = every.filter(~pl.col("_row").is_in(extra["_row"].implode())).drop("_row")
    inside = extra.filter(pl.col("iteration").is_not_null())
    return weighed(
        CHECK_ACTIVITY,
        "extra",
        extra.height,
        float(inside["dur_ns"].sum()) / 1e3 / n,
        sentence(
            [
                f"{extra.height:,} activities share a launch call with an earlier one (a call that "
                "starts one activity, not a graph launch): duplicated or mis-correlated records",
                "first: "
                + examples(
                    extra,
                    pl.format(
                        "{} (correlation {}, {})", clipped("name"), "correlation", "launch_api"
                    ),
                ),
            ]
        ),
        weigh_repair(steps, gpu=gpu),
    )
