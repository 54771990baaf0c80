"""`annotate`: what the analyses say about each GPU activity, and the tracks to draw beside
them, as frames that a writer puts back into a copy of the trace (render/annotate.py turns
them into Chrome events, load/annotated.py writes the copy).

Activities are keyed by ``ACTIVITY_KEY``: name, start and duration as the trace writes them,
plus ``occurrence`` (0 for the first activity with those three in file order, 1 for a second
one, ...), so the writer finds each one among the file's events without an event index (the
loader records none, and its GPU frame keeps file order within a category).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import polars as pl

from traceanalyze.analyses.accounting import busy_segments
from traceanalyze.analyses.activities import activities
from traceanalyze.analyses.between.critical_graph import KIND_GAP
from traceanalyze.analyses.between.critical_path import critical_path
from traceanalyze.analyses.iterations import counted
from traceanalyze.analyses.memcpy import transfers
from traceanalyze.analyses.memory.devices import device_name
from traceanalyze.analyses.report.contents import build_report
from traceanalyze.analyses.report.findings import Finding
from traceanalyze.analyses.roofline.model import activity_rooflines
from traceanalyze.display import ShortRepr
from traceanalyze.errors import UsageError
from traceanalyze.load.annotated import ACTIVITY_KEY, with_occurrence
from traceanalyze.load.variants import Variant, VariantSet, capture_entry, label_of
from traceanalyze.trace import Trace

# The figures each activity gains, in the order its args list them (null: not computed).
ACTIVITY_COLUMNS = (
    "category", "launch_op", "iteration", "theoretical_occupancy_pct", "roofline_op",
    "roofline_pct", "bound",
)  # fmt: skip
COUNTER_SCHEMA: dict[str, pl.DataType] = {
    "track": pl.String(),  # the counter track's name
    "series": pl.String(),  # the value's name in the track (its args key)
    "pid": pl.Int64(),
    "ts_ns": pl.Int64(),
    "value": pl.Int64(),
}
BUSY_TRACK = "GPU busy, stream {}"
MEMORY_TRACK = "Memory allocated, {}"
PATH_TRACK = "Critical path"


@dataclass(frozen=True, repr=False)  # ShortRepr: each field's shape, never whole tables
class Annotation(ShortRepr):
    """Everything `annotate` adds to a trace."""

    activities: pl.DataFrame  # ACTIVITY_KEY + ACTIVITY_COLUMNS, one row per GPU activity
    # Memory copies and sets with a launching op: flow_id, chain, op_pid, op_tid, op_ts_ns,
    # pid, tid, ts_ns (the op the arrow starts at, the activity it ends at).
    copies: pl.DataFrame
    counters: pl.DataFrame  # COUNTER_SCHEMA, each track in time order
    findings: tuple[Finding, ...]  # the report's first section
    marker_pid: int  # where the findings' markers go: the main CPU process,
    marker_ts_ns: int  # at the start of the first counted iteration
    # pid/tid the trace wrote as text ("stream 7"): the frames' integer -> that text, so the
    # added events land on the trace's own tracks.
    text_ids: dict[int, str] = field(default_factory=dict)

    def to_frame(self, table: str | None = None) -> pl.DataFrame:
        """One of the frames the annotation adds to the trace: ``activities`` (the default),
        ``copies`` or ``counters``."""
        chosen = table or ANNOTATION_FRAMES[0]
        if chosen not in ANNOTATION_FRAMES:
            raise UsageError(
                f"table={chosen!r} is not one of {', '.join(ANNOTATION_FRAMES)}",
                fix="Name one of them, or none for the activities.",
            )
        frame: pl.DataFrame = getattr(self, chosen)
        return frame


# The frames of an Annotation, the default first.
ANNOTATION_FRAMES = ("activities", "copies", "counters")


def annotate(trace: Trace) -> Annotation:
    """The annotation of one trace's counted iterations (README, "Annotated traces for
    Perfetto")."""
    trace = counted(trace)
    pid = _main_pid(trace)
    starts = trace.iterations["ts_ns"]
    first = starts.min() if starts.len() else trace.cpu["ts_ns"].min()
    return Annotation(
        activities=activity_figures(trace),
        copies=copy_flows(trace),
        counters=pl.concat(
            [busy_counters(trace), memory_counters(trace), path_counters(trace, pid)]
        ),
        findings=build_report(_alone(trace)).findings,
        marker_pid=pid,
        marker_ts_ns=int(first) if isinstance(first, int) else 0,
        text_ids={number: text for meta in trace.meta for text, number in meta.text_ids.items()},
    )


def activity_figures(trace: Trace) -> pl.DataFrame:
    """Every GPU activity with its category, launching op, iteration, theoretical occupancy
    and, where its op is modelled, the op's roofline figures."""
    frame = with_occurrence(activities(trace))
    roofline = with_occurrence(activity_rooflines(trace)).rename(
        {"op_name": "roofline_op", "pct_of_roofline": "roofline_pct"}
    )
    return frame.join(roofline, on=ACTIVITY_KEY, how="left", maintain_order="left").select(
        *ACTIVITY_KEY,
        "category",
        pl.col("op_name").alias("launch_op"),
        "iteration",
        "theoretical_occupancy_pct",
        "roofline_op",
        "roofline_pct",
        "bound",
    )


def copy_flows(trace: Trace) -> pl.DataFrame:
    """One arrow per memory copy or set with a launching op: from that op to the activity,
    named by the activity's op chain (memcpy's ``chain``). Ids follow the trace's own flow ids
    so no arrow joins one of Kineto's."""
    first_id = int(trace.flows["id"].max() or 0) + 1  # type: ignore[arg-type]
    copies = transfers(trace).filter(pl.col("op_id").is_not_null())
    ops = trace.cpu.select(op_id="op_id", op_pid="pid", op_tid="tid", op_ts_ns="ts_ns")
    return copies.join(ops, on="op_id", how="left", maintain_order="left").select(
        # Kineto's ids can be as large as 64-bit times: no 32-bit row index.
        (pl.int_range(pl.len(), dtype=pl.Int64) + first_id).alias("flow_id"),
        "chain",
        "op_pid",
        "op_tid",
        "op_ts_ns",
        "pid",
        "tid",
        "ts_ns",
    )


def _steps(segments: pl.DataFrame, track: pl.Expr, series: str) -> pl.DataFrame:
    """A 0/1 counter from disjoint ``start``/``end`` segments (with ``pid``): 1 from each
    start, 0 from each end."""
    rises = segments.select(track=track, pid="pid", ts_ns="start", value=pl.lit(1, pl.Int64))
    falls = segments.select(track=track, pid="pid", ts_ns="end", value=pl.lit(0, pl.Int64))
    return (
        pl.concat([rises, falls])
        .with_columns(series=pl.lit(series))
        .sort("track", "ts_ns", "value")
        .select(list(COUNTER_SCHEMA))
        .cast(COUNTER_SCHEMA)  # type: ignore[arg-type]
    )


def busy_counters(trace: Trace) -> pl.DataFrame:
    """Per stream, 1 while any activity runs on it (the union of its intervals), else 0."""
    segments = busy_segments(trace.gpu, ["rank", "pid", "stream"])
    return _steps(segments, pl.format(BUSY_TRACK, "stream"), "busy")


def memory_counters(trace: Trace) -> pl.DataFrame:
    """Per device, the allocator's total allocated bytes after each [memory] event."""
    # The oldest traces' [memory] events have no Total Allocated: nothing to draw.
    return (
        trace.memory.filter(pl.col("total_allocated_bytes").is_not_null())
        .with_columns(device_name())
        .select(
            track=pl.format(MEMORY_TRACK, "device_name"),
            series=pl.lit("bytes"),
            pid="pid",
            ts_ns="ts_ns",
            value="total_allocated_bytes",
        )
        .cast(COUNTER_SCHEMA)  # type: ignore[arg-type]
    )


def path_counters(trace: Trace, pid: int) -> pl.DataFrame:
    """1 while an item on an iteration's critical path runs, else 0 (empty without GPU work)."""
    if not trace.gpu.height or not trace.iterations.height:
        return pl.DataFrame(schema=COUNTER_SCHEMA)
    # The path's pieces tile each window: without its gaps (nothing recorded runs) the
    # counter would only mark the windows.
    segments = (
        critical_path(trace)
        .segments.filter(pl.col("kind") != KIND_GAP)
        .select("rank", "iteration", ts_ns="start_ns", dur_ns=pl.col("end_ns") - "start_ns")
    )
    merged = busy_segments(segments, ["rank", "iteration"]).with_columns(pid=pl.lit(pid))
    return _steps(merged, pl.lit(PATH_TRACK), "on_path")


def _main_pid(trace: Trace) -> int:
    """The process most CPU events belong to (the one that ran the iterations)."""
    pids = trace.cpu["pid"].drop_nulls()
    return int(pids.mode().sort()[0]) if pids.len() else 0


def _alone(trace: Trace) -> VariantSet:
    """``trace`` as a set of one variant, the way `report` sees a single trace: a file of a
    capture folder with its manifest entry (the capture's median times the wall, as in
    `report FILE` and `summary FILE`)."""
    known = capture_entry(trace.path) if len(trace.meta) == 1 and trace.path.is_file() else None
    variant = (
        replace(known, trace=trace) if known else Variant(label_of(trace.path), trace.path, trace)
    )
    return VariantSet((variant,), sources=(trace.path,))
