"""Times the trace cannot have meant: ``bad_timestamps`` and ``truncated``.

A rank's span is where its events are: its event starts, cut wherever two in a row are
``OUTSIDE_MIN_NS`` or more apart, form clusters, and the cluster holding most events is the
span. An event is outside it when its start or end lies further from the span than
``OUTSIDE_MIN_NS`` or ``OUTSIDE_FACTOR`` times the span's length: a clock of another origin,
or a corrupt time, not a pause (real traces hold an op 3 s before the rest, a step that ends
13 s after it, a window end 2 s after the last op). An event at ts 0 so far from the span is
a ``ts_zero``: the profiler wrote no time for it.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from traceanalyze.analyses.audit.figures import Finding, weighed
from traceanalyze.analyses.audit.rules import (
    CUT_TOLERANCE_NS,
    EXAMPLES,
    OUTSIDE_FACTOR,
    OUTSIDE_MIN_NS,
    SHORT_LAST_STEP_PCT,
    SHORT_STEP_MIN_OTHERS,
)
from traceanalyze.analyses.audit.steps import (
    ITERATION,
    Weight,
    all_steps,
    as_loaded,
    counted_rows,
    counted_steps,
    step_at,
    step_count,
    step_rows,
    weigh,
)
from traceanalyze.analyses.audit.text import clipped, examples, sentence
from traceanalyze.analyses.iterations import CLOSING, choice_of
from traceanalyze.trace import IterationSource, Trace

CHECK_TIMES = "bad_timestamps"
CHECK_TRUNCATED = "truncated"
# The frames whose events carry a time (and, but for instants and memory, a duration).
_TIMED = ("cpu", "gpu", "python", "instants", "memory")


def rank_spans(steps: Trace) -> pl.DataFrame:
    """Per rank: ``span_start``, ``span_end`` (the cluster holding most event starts) and
    ``reach_ns``, how far from it an event may lie."""
    frames: list[pl.DataFrame] = [getattr(steps, name) for name in _TIMED]
    starts = pl.concat([f.select("rank", "ts_ns") for f in frames], how="vertical")
    ranges = starts.group_by("rank").agg(
        span_start=pl.col("ts_ns").min(), span_end=pl.col("ts_ns").max()
    )
    # A rank whose starts all lie within OUTSIDE_MIN_NS is one cluster (every trace of the
    # project's corpus); only the others are sorted (a two-key sort of 475k starts took
    # 0.3-0.5 s).
    spread = ranges.filter(pl.col("span_end") - pl.col("span_start") >= OUTSIDE_MIN_NS)
    clustered = [_main_cluster(starts, rank) for rank in spread["rank"].to_list()]
    spans = ranges.join(spread.select("rank"), on="rank", how="anti")
    return pl.concat([spans, *clustered], how="vertical").select(
        "rank",
        "span_start",
        "span_end",
        reach_ns=pl.max_horizontal(
            pl.lit(OUTSIDE_MIN_NS), (pl.col("span_end") - pl.col("span_start")) * OUTSIDE_FACTOR
        ),
    )


def _main_cluster(starts: pl.DataFrame, rank: int) -> pl.DataFrame:
    """One rank's cluster holding most starts: cut where consecutive starts are
    OUTSIDE_MIN_NS or more apart (the earliest of equally large clusters)."""
    times = np.sort(starts.filter(pl.col("rank") == rank)["ts_ns"].to_numpy())
    cuts = np.flatnonzero(np.diff(times) >= OUTSIDE_MIN_NS) + 1
    edges = np.concatenate(([0], cuts, [len(times)]))
    largest = int(np.argmax(np.diff(edges)))  # the first of the largest
    return pl.DataFrame(
        {
            "rank": [rank],
            "span_start": [int(times[edges[largest]])],
            "span_end": [int(times[edges[largest + 1] - 1])],
        },
        schema={"rank": pl.Int32, "span_start": pl.Int64, "span_end": pl.Int64},
    )


def _marks(frame: pl.DataFrame, spans: pl.DataFrame, ts: str = "ts_ns") -> pl.DataFrame:
    """``frame`` with ``_row``, ``zero`` (at ts 0, outside its rank's span), ``outside``
    (another start or end beyond the span's reach) and ``negative`` (a negative duration)."""
    has_dur = "dur_ns" in frame.columns and ts == "ts_ns"
    end = pl.col(ts) + pl.col("dur_ns") if has_dur else pl.col(ts)

    def far(time: pl.Expr) -> pl.Expr:
        low = pl.col("span_start") - pl.col("reach_ns")
        return (time < low) | (time > pl.col("span_end") + pl.col("reach_ns"))

    outside = (far(pl.col(ts)) | far(end)).fill_null(value=False)
    zero = outside & (pl.col(ts) == 0)
    return (
        frame.with_row_index("_row")
        .join(spans, on="rank", how="left", maintain_order="left")
        .with_columns(
            zero=zero,
            outside=outside & ~zero,
            negative=(pl.col("dur_ns") < 0).fill_null(value=False) if has_dur else pl.lit(False),
        )
    )


def bad_timestamps(trace: Trace) -> list[Finding]:
    """Events at ts 0, with negative durations or outside their rank's span, and steps out of
    order."""
    spans = rank_spans(trace)
    found = []
    if _any_bad_time(trace, spans):
        found = _bad_times(counted_steps(trace), spans)
    # An activity whose own time is lost (ts 0, outside its rank's span) is that finding's.
    early = (
        trace.gpu.with_row_index("_row")
        .filter(pl.col("linked") & (pl.col("ts_ns") < pl.col("launch_ts_ns")))
        .join(spans, on="rank", how="left", maintain_order="left")
        .filter(pl.col("ts_ns") >= pl.col("span_start") - pl.col("reach_ns"))
        .drop("span_start", "span_end", "reach_ns")
    )
    if early.height:
        steps = counted_steps(trace)
        found.append(_before_launch(steps, counted_rows(steps, "gpu", early, "_row")))
    disorder = _steps_out_of_order(as_loaded(trace))
    if disorder is not None:
        found.append(disorder)
    missing = _missing_durations(trace)
    if missing is not None:
        found.append(missing)
    return found


def _missing_durations(trace: Trace) -> Finding | None:
    """Kernels with no duration (the loader reads a missing ``dur`` as 0) on ranks whose
    kernel durations are not all whole microseconds: a kernel of 0 ns is no real time there.
    Their time is estimated from the median of the same kernel's timed runs."""
    kernels = trace.gpu.filter(pl.col("kind") == "kernel")
    fine = kernels.filter(pl.col("dur_ns") % 1000 != 0).select("rank").unique()
    zero = kernels.with_row_index("_row").filter(pl.col("dur_ns") == 0)
    zero = zero.join(fine, on="rank", how="semi", maintain_order="left")
    if not zero.height:
        return None
    steps = counted_steps(trace)
    zero = counted_rows(steps, "gpu", zero, "_row")
    medians = (
        kernels.filter(pl.col("dur_ns") > 0)
        .group_by("rank", "name")
        .agg(est_ns=pl.col("dur_ns").median())
    )
    inside = zero.filter(pl.col("iteration").is_not_null()).join(
        medians, on=["rank", "name"], how="left"
    )
    n = step_count(steps)
    us = float(inside["est_ns"].fill_null(0).sum() or 0) / 1e3 / n
    figures = ("gpu_kernel_us_per_iter", "gpu_activity_us_per_iter", "launch_op_us_per_iter")
    return Finding(
        CHECK_TIMES,
        "missing_duration",
        zero.height,
        us,
        sentence(
            [
                f"{zero.height:,} kernels with no duration (`dur` missing or 0) on a rank that "
                "times kernels to the ns",
                f"estimated lost kernel time {us:,.3f} µs per iteration (median of the same "
                "kernel's timed runs)"
                if us
                else "",
                "first: "
                + examples(
                    zero, pl.format("`{}` (correlation {})", clipped("name"), "correlation")
                ),
            ]
        ),
        dict.fromkeys(figures, us) if us else {},
        deltas=dict.fromkeys(figures, -us) if us else {},
    )


def _before_launch(steps: Trace, early: pl.DataFrame) -> Finding:
    """Activities that start before their launch call, weighed by starting each where its
    call ends (the earliest it can start), its duration kept."""
    earliest = pl.col("launch_ts_ns") + pl.col("launch_dur_ns").fill_null(0)
    moved = early.select("_row", start=earliest)
    gpu = (
        all_steps(steps)
        .gpu.with_row_index("_row")
        .join(moved, on="_row", how="left", maintain_order="left")
        .with_columns(ts_ns=pl.coalesce("start", "ts_ns"))
        .drop("_row", "start")
    )
    n = step_count(steps)
    inside = early.filter(pl.col("iteration").is_not_null())
    ahead_ns = early["launch_ts_ns"] - early["ts_ns"]
    return weighed(
        CHECK_TIMES,
        "before_launch",
        early.height,
        float((inside["launch_ts_ns"] - inside["ts_ns"]).sum() or 0) / 1e3 / n,
        sentence(
            [
                f"{early.height:,} GPU activities start before their launch call, by up to "
                f"{float(ahead_ns.max() or 0) / 1e3:,.3f} µs (median "  # type: ignore[arg-type]
                f"{float(ahead_ns.median() or 0) / 1e3:,.3f} µs)",  # type: ignore[arg-type]
                "first: "
                + examples(
                    early.with_columns(ahead=pl.col("launch_ts_ns") - pl.col("ts_ns")),
                    pl.format("{} ({} ns before its {})", clipped("name"), "ahead", "launch_api"),
                ),
            ]
        ),
        weigh(steps, gpu=gpu),
    )


def _any_bad_time(steps: Trace, spans: pl.DataFrame) -> bool:
    """Whether any event (or launch call's time) lies beyond its rank's reach or has a
    negative duration: each frame's extremes per rank first, a handful of rows, so a clean
    trace is never marked row by row."""
    extremes = []
    for name in (*_TIMED, "launch"):
        frame: pl.DataFrame = steps.gpu if name == "launch" else getattr(steps, name)
        if not frame.height:
            continue
        ts = "launch_ts_ns" if name == "launch" else "ts_ns"
        has_dur = name != "launch" and "dur_ns" in frame.columns
        end = pl.col(ts) + pl.col("dur_ns") if has_dur else pl.col(ts)
        aggregates = (
            pl.min_horizontal(pl.col(ts).min(), end.min()).alias("low"),
            pl.max_horizontal(pl.col(ts).max(), end.max()).alias("high"),
            (pl.col("dur_ns").min() if has_dur else pl.lit(0, pl.Int64)).alias("shortest"),
        )
        ranks = frame.select(pl.col("rank").min().alias("first"), pl.col("rank").max()).row(0)
        if ranks[0] == ranks[1]:  # one rank (most traces): no grouping
            extremes.append(frame.select(pl.lit(ranks[0], pl.Int32).alias("rank"), *aggregates))
        else:
            extremes.append(frame.group_by("rank").agg(*aggregates))
    if not extremes:
        return False
    bad = (
        pl.concat(extremes, how="vertical_relaxed")
        .join(spans, on="rank", how="left")
        .filter(
            (pl.col("low") < pl.col("span_start") - pl.col("reach_ns"))
            | (pl.col("high") > pl.col("span_end") + pl.col("reach_ns"))
            | (pl.col("shortest") < 0)
        )
    )
    return bool(bad.height)


def _bad_times(steps: Trace, spans: pl.DataFrame) -> list[Finding]:
    """Events at ts 0, outside their rank's span or with a negative duration, by kind."""
    marked: dict[str, pl.DataFrame] = {name: _marks(getattr(steps, name), spans) for name in _TIMED}
    launches = _marks(steps.gpu, spans, "launch_ts_ns")
    n = step_count(steps)
    found = []
    for finding, column in (
        ("ts_zero", "zero"),
        ("negative_duration", "negative"),
        ("outside_span", "outside"),
    ):
        rows = pl.concat(
            [
                m.filter(column).select(
                    frame=pl.lit(name),
                    name=_name(m),
                    ts_ns="ts_ns",
                    dur_ns=_dur(m),
                    iteration=_iteration(m),
                )
                for name, m in marked.items()
            ],
            how="vertical",
        )
        late = launches.filter(column).height
        if rows.height or late:
            found.append(_time_finding(steps, marked, launches, column, finding, rows, n))
    return found


def _name(frame: pl.DataFrame) -> pl.Expr:
    return pl.col("name") if "name" in frame.columns else pl.lit("[memory]")


def _dur(frame: pl.DataFrame) -> pl.Expr:
    return pl.col("dur_ns") if "dur_ns" in frame.columns else pl.lit(None, pl.Int64)


def _iteration(frame: pl.DataFrame) -> pl.Expr:
    return pl.col("iteration") if "iteration" in frame.columns else pl.lit(None, pl.Int64)


def _time_finding(
    steps: Trace,
    marked: dict[str, pl.DataFrame],
    launches: pl.DataFrame,
    column: str,
    finding: str,
    rows: pl.DataFrame,
    n: int,
) -> Finding:
    """One kind of bad time, weighed by the repair: GPU activities at a lost time dropped (a
    negative duration made 0), CPU rows at a lost time out of every step, an activity whose
    launch call's time is lost put in the step that holds its own start, and a step at a lost
    time dropped (the whole trace's span taken again without them)."""
    gpu, cpu = marked["gpu"], marked["cpu"]
    bad = pl.col(column)
    replant = launches.select("_row", bad.alias("lost"))["lost"]
    every = all_steps(steps)
    if finding == "negative_duration":
        new_gpu = every.gpu.with_columns(
            dur_ns=pl.when(pl.lit(gpu[column])).then(0).otherwise("dur_ns")
        )
        new_cpu = every.cpu.with_columns(
            dur_ns=pl.when(pl.lit(cpu[column])).then(0).otherwise("dur_ns")
        )
    else:
        placed = _launched_step(every, replant)
        kept = every.gpu.with_columns(
            iteration=pl.when(pl.lit(replant)).then(pl.lit(placed)).otherwise("iteration")
        )
        new_gpu = kept.filter(~gpu[column])
        new_cpu = every.cpu.with_columns(
            iteration=pl.when(pl.lit(cpu[column])).then(None).otherwise("iteration")
        )
    iterations = _steps_without(every, new_cpu, new_gpu, cpu.filter(bad))
    weight = weigh(steps, gpu=new_gpu, cpu=new_cpu, iterations=iterations)
    inside = rows.filter(pl.col("iteration").is_not_null())
    affected_us = float(inside["dur_ns"].abs().sum() or 0) / 1e3 / n
    # CPU operators the bad time put out of every step: their step is unknown, not their time.
    lost = cpu.filter(bad & pl.col("iteration").is_null() & (pl.col("cat") == "cpu_op"))
    if finding != "negative_duration" and lost.height:
        weight, lost_us = _with_lost_ops(weight, lost, n)
        affected_us += lost_us
    lost_launches = int(replant.sum())
    return weighed(
        CHECK_TIMES,
        finding,
        # the events at the bad time (a launch call among them); its activity is affected, not
        # another event at a bad time
        rows.height or lost_launches,
        affected_us,
        sentence(
            [
                f"{rows.height:,} events ({_by_frame(rows)})" if rows.height else "",
                f"{lost_launches:,} of them launch calls whose activities lose their iteration"
                if lost_launches and finding != "negative_duration"
                else "",
                "first: "
                + examples(rows, pl.format("{} `{}` ({} ns)", "frame", clipped("name"), "dur_ns")),
            ]
        ),
        weight,
    )


def _with_lost_ops(weight: Weight, lost: pl.DataFrame, n: int) -> tuple[Weight, float]:
    """``weight`` with what CPU operators at a lost time, outside every step, move: the
    whole-trace count of operators outside the iterations (by their number), and the CPU
    operator time per iteration by their own durations, an upper bound (each may have been an
    outermost operator of some step; where, the trace no longer says). Also their time per
    iteration."""
    us = float(lost["dur_ns"].clip(lower_bound=0).sum() or 0) / 1e3 / n
    moves, deltas = dict(weight.moves), dict(weight.deltas)
    if us > moves.get(_CPU_OP, 0.0):
        moves[_CPU_OP], deltas[_CPU_OP] = us, -us  # the steps lack it
    moves[_OUTSIDE] = deltas[_OUTSIDE] = float(lost.height)  # the count has them in excess
    return Weight(moves, weight.verdict_changes, deltas), us


_CPU_OP = "cpu_op_us_per_iter"
_OUTSIDE = "cpu_ops_outside_iterations_total"


def _launched_step(every: Trace, lost: pl.Series) -> pl.Series:
    """The step each activity whose launch call's time is lost was launched in: that of the
    launch call with the nearest correlation id below its own on the rank whose time is good
    (ids increase with launch time), else the step holding the activity's own start (the GPU
    may run a step's work after the step ends on the CPU, so its own start is the fallback)."""
    gpu = every.gpu.select("rank", "correlation", "launch_ts_ns").with_row_index("_row")
    known = pl.col("correlation").is_not_null()
    good = (
        gpu.filter(~pl.lit(lost) & known & pl.col("launch_ts_ns").is_not_null())
        .select("rank", "correlation", near_ts_ns="launch_ts_ns")
        .sort("correlation")
    )
    near = (
        gpu.filter(pl.lit(lost) & known)
        .sort("correlation")
        .join_asof(good, on="correlation", by="rank", check_sortedness=False)
        .select("_row", "near_ts_ns")
    )
    at = gpu.join(near, on="_row", how="left").sort("_row")
    by_neighbour = step_at(every, at, "near_ts_ns")
    return pl.select(pl.coalesce(by_neighbour, step_at(every, every.gpu))).to_series()


def _by_frame(rows: pl.DataFrame) -> str:
    counted = rows.group_by("frame").len().sort("frame")
    # One row per frame that holds such events (five at most).
    return ", ".join(f"{n:,} {frame}" for frame, n in counted.iter_rows())


def _steps_without(
    every: Trace, cpu: pl.DataFrame, gpu: pl.DataFrame, bad_cpu: pl.DataFrame
) -> pl.DataFrame:
    """Every step but those at a lost time; for a whole-trace iteration, its span taken again
    from the rows left."""
    spans = every.iterations
    if every.iteration_source is IterationSource.WHOLE_TRACE:
        good = [
            cpu.filter(pl.col("iteration").is_not_null()).select("rank", "ts_ns", "dur_ns"),
            gpu.select("rank", "ts_ns", "dur_ns"),
        ]
        bounds = (
            pl.concat(good, how="vertical")
            .group_by("rank")
            .agg(start=pl.col("ts_ns").min(), end=(pl.col("ts_ns") + pl.col("dur_ns")).max())
        )
        return (
            spans.join(bounds, on="rank", how="left", maintain_order="left")
            .with_columns(
                ts_ns=pl.coalesce("start", "ts_ns"),
                dur_ns=pl.coalesce(pl.col("end") - pl.col("start"), "dur_ns"),
            )
            .select(spans.columns)
        )
    lost = bad_cpu.select("rank", "ts_ns", "name")
    return spans.join(lost, on=["rank", "ts_ns", "name"], how="anti", maintain_order="left")


def _steps_out_of_order(trace: Trace) -> Finding | None:
    """Profiler steps whose number is below an earlier step's, or that start before the
    previous step on the rank ends."""
    if trace.iteration_source is not IterationSource.PROFILER_STEP:
        return None
    ordered = trace.iterations.sort("rank", "ts_ns").with_columns(
        highest=pl.col("iteration").cum_max().shift(1).over("rank"),
        previous_end=(pl.col("ts_ns") + pl.col("dur_ns")).cum_max().shift(1).over("rank"),
    )
    wrong = ordered.filter(
        (pl.col("iteration") < pl.col("highest")) | (pl.col("ts_ns") < pl.col("previous_end"))
    )
    if not wrong.height:
        return None
    return Finding(
        CHECK_TIMES,
        "steps_out_of_order",
        wrong.height,
        0.0,
        sentence(
            [
                f"{wrong.height:,} profiler steps out of order or overlapping the previous one",
                "first: " + examples(wrong, pl.format("`{}` after step {}", "name", "highest")),
            ]
        ),
    )


def truncated(trace: Trace) -> list[Finding]:
    """Files and steps cut short: a gzip file that ends early though its JSON is whole, steps
    opened and never closed, the last counted one far shorter than the others, or the
    profiler's empty closing step."""
    found = _gzip_cuts(trace)
    # The regions the trace marks as steps (ProfilerStep, or a repeated annotation) with no
    # duration; the counted step that holds one is weighed (the step model may count other
    # spans than the regions).
    loaded = as_loaded(trace)
    stepped = loaded.iteration_source is IterationSource.PROFILER_STEP
    open_steps = loaded.iterations.filter(pl.col("dur_ns").fill_null(0) <= 0)
    if loaded.iteration_source is not IterationSource.WHOLE_TRACE and open_steps.height:
        steps = counted_steps(trace)
        holding = open_steps.select("rank", iteration=step_at(steps, open_steps)).drop_nulls()
        found.append(_step_finding(steps, open_steps, holding, "open_step"))
    cut = _cut_last_steps(loaded).join(open_steps.select(ITERATION), on=ITERATION, how="anti")
    if cut.height:
        steps = counted_steps(trace)
        holding = cut.select("rank", iteration=step_at(steps, cut)).drop_nulls()
        found.append(_step_finding(steps, cut, holding, "cut_last_step"))
    # Profiler steps are weighed only where their activities say one may be cut or empty (the
    # step model's tables cost most of a clean trace's audit).
    suspect = stepped and _falls_short(loaded)
    if not stepped or suspect:
        steps = counted_steps(trace)
        # A step the recording cut is said once, as cut.
        short = _short_last_steps(steps).join(cut.select(ITERATION), on=ITERATION, how="anti")
        if short.height:
            found.append(_step_finding(steps, short, short.select(ITERATION), "short_last_step"))
    if not suspect:
        return found
    # A closing step that is also open is said once, as open.
    closing = (
        choice_of(counted_steps(trace))
        .table.filter(pl.col("kind") == CLOSING)
        .join(open_steps.select(ITERATION), on=ITERATION, how="anti")
        .join(cut.select(ITERATION), on=ITERATION, how="anti")
    )
    if closing.height:
        numbers = ", ".join(str(i) for i in closing["iteration"].to_list())
        found.append(
            Finding(
                CHECK_TRUNCATED,
                "empty_last_step",
                closing.height,
                0.0,
                f"step {numbers}: no GPU activity, left out of the per-iteration means",
            )
        )
    return found


def _cut_last_steps(loaded: Trace) -> pl.DataFrame:
    """Per rank, the last step region when the recording ends inside it: it ends where the
    rank's last CPU event ends, and a CPU operator ends at that same nanosecond (the stop cut
    both; a step the program closed ends after the operators in it, and before the profiler's
    own last events)."""
    if loaded.iteration_source is IterationSource.WHOLE_TRACE or not loaded.iterations.height:
        return loaded.iterations.clear()
    end = pl.col("ts_ns") + pl.col("dur_ns")
    last_cpu = loaded.cpu.group_by("rank").agg(cpu_end=end.max())
    last = (
        loaded.iterations.filter(pl.col("dur_ns") > 0)
        .sort("rank", "ts_ns")
        .group_by("rank", maintain_order=True)
        .last()
        .join(last_cpu, on="rank")
        .filter((end - pl.col("cpu_end")).abs() <= CUT_TOLERANCE_NS)
    )
    if not last.height:
        return last.select(loaded.iterations.columns)
    # Another operator than the step itself (old traces write ProfilerStep as an operator).
    ops = loaded.cpu.filter(pl.col("cat") == "cpu_op").select("rank", "name", op_end=end)
    # Only ops ending near the last CPU end are joined (a handful), not every op.
    near = ops.join(last_cpu, on="rank").filter(
        pl.col("cpu_end") - pl.col("op_end") <= 2 * CUT_TOLERANCE_NS
    )
    cut = (
        last.join(near.select("rank", "op_end", op_name="name"), on="rank")
        .filter(
            ((end - pl.col("op_end")).abs() <= CUT_TOLERANCE_NS)
            & (pl.col("op_name") != pl.col("name"))
        )
        .select(ITERATION)
        .unique()
    )
    return last.join(cut, on=ITERATION, how="semi").select(loaded.iterations.columns)


def _gzip_cuts(trace: Trace) -> list[Finding]:
    """The files of ``trace`` the loader read whole JSON from although their gzip stream ends
    early (TraceMeta.gzip_cut): one finding naming each such file and where it is cut."""
    cuts = [(meta.path.name, meta.gzip_cut) for meta in trace.meta if meta.gzip_cut]
    if not cuts:
        return []
    return [
        Finding(
            CHECK_TRUNCATED,
            "gzip_cut",
            len(cuts),
            0.0,
            "; ".join(_gzip_cut_text(name, cut) for name, cut in cuts[:EXAMPLES])
            + (f"; and {len(cuts) - EXAMPLES} more files" if len(cuts) > EXAMPLES else ""),
        )
    ]


def _gzip_cut_text(name: str, cut: dict[str, int | None]) -> str:
    """Where one file's gzip stream is cut, in words (from source.GzipCut's record)."""
    member = f"gzip member {cut['member']} of {name} (from byte {cut['member_offset_bytes']:,})"
    missing = cut.get("missing_bytes")
    where = (
        f"lacks {missing} of its 8 trailer bytes (checksum and size)"
        if missing is not None
        else f"ends inside its compressed data after {cut['member_inflated_bytes']:,} "
        "inflated bytes"
    )
    return (
        f"{member} {where}; the JSON is whole, so no event is lost, but the data is "
        "unverified: copy or re-export the file"
    )


def _falls_short(loaded: Trace) -> bool:
    """Whether, on some rank, one of the last two profiler steps launches under
    SHORT_LAST_STEP_PCT of the GPU activities of the step before it (0 for an empty closing
    step): a necessary condition of a cut or empty last step, read from the activities'
    steps alone."""
    launched = loaded.gpu.group_by("rank", "iteration").agg(activities=pl.len())
    last = (
        loaded.iterations.join(launched, on=ITERATION, how="left")
        .with_columns(pl.col("activities").fill_null(0))
        .sort("rank", "ts_ns")
        .group_by("rank", maintain_order=True)
        .tail(3)
        .with_columns(before=pl.col("activities").shift(1).over("rank"))
    )
    share = SHORT_LAST_STEP_PCT / 100
    return bool(last.filter(pl.col("activities") < pl.col("before") * share).height)


def _short_last_steps(steps: Trace) -> pl.DataFrame:
    """Per rank, the last counted step when both its span on the CPU (the step's own record,
    which the profiler's stop cuts) and its GPU activities (kernels, copies, sets) are under
    SHORT_LAST_STEP_PCT of the step before it: cut short, not merely other work (steps of
    different work differ in one or the other)."""
    activities = pl.col("kernels") + pl.col("memcpy") + pl.col("memset")
    ordered = (
        step_rows(steps)
        .sort("rank", "ts_ns")
        .with_columns(
            last=pl.col("ts_ns") == pl.col("ts_ns").max().over("rank"),
            others=pl.len().over("rank") - 1,
            previous_span_us=pl.col("cpu_span_us").shift(1).over("rank"),
            previous_activities=activities.shift(1).over("rank"),
        )
    )
    share = SHORT_LAST_STEP_PCT / 100
    return ordered.filter(
        pl.col("last")
        & (pl.col("others") >= SHORT_STEP_MIN_OTHERS)
        & (pl.col("cpu_span_us") < pl.col("previous_span_us") * share)
        & (activities < pl.col("previous_activities") * share)
    )


def _step_finding(
    steps: Trace, rows: pl.DataFrame, left_out: pl.DataFrame, finding: str
) -> Finding:
    """Steps cut short, weighed by leaving the counted steps that hold them (``left_out``:
    rank, iteration) out of every step."""
    every = all_steps(steps).iterations
    kept = every.join(left_out.select(ITERATION), on=ITERATION, how="anti")
    weight = weigh(steps, iterations=kept) if kept.height else Weight({}, verdict_changes=False)
    numbers = ", ".join(str(i) for i in left_out["iteration"].to_list())
    what = {
        "open_step": "step regions with no duration, never closed",
        "cut_last_step": "last steps the recording ends inside (the step and an operator in "
        "it end together at the rank's last CPU event)",
    }.get(finding, "last steps with under half the CPU span and GPU activities of the step before")
    return weighed(
        CHECK_TRUNCATED,
        finding,
        rows.height,
        float(rows["dur_ns"].fill_null(0).sum()) / 1e3 / step_count(steps),
        sentence(
            [
                f"{rows.height:,} {what}",
                f"in counted step {numbers}" if numbers else "",
                "first: " + examples(rows, pl.format("`{}` ({} ns)", "name", "dur_ns")),
            ]
        ),
        weight,
    )
