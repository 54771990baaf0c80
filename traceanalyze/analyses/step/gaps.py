"""Why the GPU sits idle in a step: each gap of the window and its cause, by causality.

A *gap* is a stretch of a step's window where none of the rank's GPU streams runs anything
(the window minus its busy time, :mod:`.window`; the gaps add up to the step's idle time,
leading and trailing stretches of the window included). Each gap ends when some activity
starts (or at the window's end, the next activity after it). Its cause, first rule that
applies (``CAUSES``, rules as data):

1. ``queued``: that activity had been launched before the gap began (its launch call had
   returned, or it was launched before the profiler started): the GPU had the work and still
   waited, for its own dispatch or for work on another stream it depends on.
2. ``sync``: the launching thread was blocked in a synchronisation or blocking copy when the
   gap began (:mod:`.syncs`): the round trip of a sync, which drains the GPU's queue and leaves
   it idle until the host launches again.
3. otherwise the host: what the launching thread did from the gap's start until the launch,
   the larger part deciding: ``data_loading`` (inside a DataLoader's ``__next__``), ``host``
   (other CPU work: operators, Python, the framework) or ``launch`` (the launch call itself and
   the time until the GPU starts the work).

A gap with no activity after it (the trace's end) is charged to what the rank's launching
thread did meanwhile, by the same rules 2 and 3.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceanalyze.analyses.step.syncs import blocking_calls
from traceanalyze.analyses.step.window import STEP, clipped_to_windows, rank_segments
from traceanalyze.trace import Trace

QUEUED = "queued"
SYNC = "sync"
DATA_LOADING = "data_loading"
HOST = "host"
LAUNCH = "launch"
# A blocking call that returned this little before the gap began still made it: the GPU's
# last work ended, the call returned a moment later (clock alignment of CPU and GPU timelines
# is good to about a microsecond).
SYNC_RETURN_TOLERANCE_NS = 2_000
# CPU events that mean "loading the next batch": torch.utils.data's record_function names
# (`enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__`), matched as literal text.
DATA_LOADING_NAMES = ("DataLoader", "dataloader")


@dataclass(frozen=True)
class Cause:
    """An idle cause: its name and what it means (the README and the report print these)."""

    cause: str
    meaning: str


CAUSES: tuple[Cause, ...] = (
    Cause(QUEUED, "the work that ends the gap had been launched before the gap began: the GPU "
          "waited on its own dispatch or on another stream's work (a cross-stream dependency)"),
    Cause(SYNC, "the launching thread was blocked in a synchronisation or blocking copy when the "
          "gap began: the sync's round trip drained the GPU's queue"),
    Cause(DATA_LOADING, "the launching thread was loading data (DataLoader) for most of the time "
          "from the gap's start to the launch"),
    Cause(HOST, "the launching thread was busy with other CPU work (operators, Python, the "
          "framework) for most of the time from the gap's start to the launch"),
    Cause(LAUNCH, "most of the gap is the launch call itself and the time until the GPU started "
          "the work"),
)  # fmt: skip
CAUSE_NAMES = tuple(c.cause for c in CAUSES)
GAP_COLUMNS = (
    "rank", "iteration", "gap_start_ns", "gap_end_ns", "gap_ns", "cause", "device", "stream",
    "next_activity", "launch_api", "launch_tid",
)  # fmt: skip


def window_gaps(trace: Trace, windows: pl.DataFrame) -> pl.DataFrame:
    """Every gap of every window of ``windows`` with its cause (``GAP_COLUMNS``)."""
    gpu = trace.gpu.lazy().filter(pl.col("ts_ns").is_not_null() & (pl.col("dur_ns") > 0))
    pieces = clipped_to_windows(rank_segments(gpu), windows)
    gaps = _gaps(pieces, windows.lazy())
    with_next = _next_activity(gaps, gpu)
    threads = _launching_thread(with_next, trace)
    return _with_cause(threads, trace).select(GAP_COLUMNS).sort("rank", "gap_start_ns").collect()


def _gaps(pieces: pl.LazyFrame, windows: pl.LazyFrame) -> pl.LazyFrame:
    """The complement of each window's busy pieces inside it: before each piece (from the
    previous piece's end, or the window's start) and after the last (to the window's end)."""
    bounds = windows.select(*STEP, "lo_ns", "hi_ns")
    before = (
        pieces.sort(*STEP, "start_ns")
        .with_columns(prev_end_ns=pl.col("end_ns").shift(1).over(STEP))
        .join(bounds, on=STEP)
        .select(
            *STEP,
            gap_start_ns=pl.coalesce("prev_end_ns", "lo_ns"),
            gap_end_ns="start_ns",
        )
    )
    last = pieces.group_by(STEP).agg(last_end_ns=pl.col("end_ns").max())
    after = bounds.join(last, on=STEP, how="left").select(
        *STEP, gap_start_ns=pl.coalesce("last_end_ns", "lo_ns"), gap_end_ns="hi_ns"
    )
    return pl.concat([before, after]).filter(pl.col("gap_end_ns") > pl.col("gap_start_ns"))


def _next_activity(gaps: pl.LazyFrame, gpu: pl.LazyFrame) -> pl.LazyFrame:
    """Each gap with the first activity of its rank that starts at or after the gap's start
    (the one that ends it; after a trailing gap, the next step's first)."""
    starts = gpu.select(
        "rank",
        next_ts_ns="ts_ns",
        device="device",
        stream="stream",
        next_activity="name",
        linked=pl.col("linked").fill_null(value=False),
        launch_api="launch_api",
        launch_ts_ns="launch_ts_ns",
        launch_end_ns=pl.col("launch_ts_ns") + pl.col("launch_dur_ns"),
        launch_tid="launch_tid",
    ).sort("next_ts_ns")
    return gaps.sort("gap_start_ns").join_asof(
        starts,
        left_on="gap_start_ns",
        right_on="next_ts_ns",
        by="rank",
        strategy="forward",
        check_sortedness=False,
    )


def _launching_thread(gaps: pl.LazyFrame, trace: Trace) -> pl.LazyFrame:
    """``thread``: the thread that launched the gap's next activity, else (no activity after
    the gap, or one launched before the trace) the rank's busiest launching thread."""
    busiest = (
        trace.gpu.lazy()
        .filter(pl.col("launch_tid").is_not_null())
        .group_by("rank", "launch_tid")
        .len()
        .sort("len", "launch_tid", descending=[True, False])
        .group_by("rank", maintain_order=True)
        .agg(main_tid=pl.col("launch_tid").first())
    )
    return gaps.join(busiest, on="rank", how="left").with_columns(
        thread=pl.coalesce("launch_tid", "main_tid")
    )


def _with_cause(gaps: pl.LazyFrame, trace: Trace) -> pl.LazyFrame:
    """``cause`` of each gap (module docstring), in rule order."""
    gs, ge = pl.col("gap_start_ns"), pl.col("gap_end_ns")
    queued = pl.col("linked").not_() & pl.col("next_ts_ns").is_not_null()
    queued = queued | (pl.col("launch_end_ns") <= gs)
    # The host's part runs from the gap's start to the launch (or the gap's end), the launch's
    # part from there to the gap's end.
    until = pl.min_horizontal(pl.coalesce("launch_ts_ns", ge), ge)
    host_ns = (until - gs).clip(lower_bound=0)
    launch_ns = ge - pl.max_horizontal(gs, until)
    data_ns = pl.col("data_loading_ns").fill_null(0)
    host_side = (
        pl.when((data_ns >= host_ns - data_ns) & (data_ns >= launch_ns) & (data_ns > 0))
        .then(pl.lit(DATA_LOADING))
        .when(host_ns - data_ns >= launch_ns)
        .then(pl.lit(HOST))
        .otherwise(pl.lit(LAUNCH))
    )
    cause = (
        pl.when(queued.fill_null(value=False))
        .then(pl.lit(QUEUED))
        .when(pl.col("blocked").fill_null(value=False))
        .then(pl.lit(SYNC))
        .otherwise(host_side)
    )
    marked = _data_loading(_blocked(gaps, trace), trace, until)
    return marked.with_columns(cause=cause, gap_ns=ge - gs)


def _blocked(gaps: pl.LazyFrame, trace: Trace) -> pl.LazyFrame:
    """``blocked``: the gap's thread was inside a blocking call when the gap began."""
    calls = (
        blocking_calls(trace)
        .lazy()
        .select("rank", thread="tid", call_ts_ns="ts_ns", call_end_ns="end_ns")
        .sort("call_ts_ns")
    )
    joined = gaps.sort("gap_start_ns").join_asof(
        calls,
        left_on="gap_start_ns",
        right_on="call_ts_ns",
        by=["rank", "thread"],
        check_sortedness=False,
    )
    return joined.with_columns(
        blocked=pl.col("call_end_ns") >= pl.col("gap_start_ns") - SYNC_RETURN_TOLERANCE_NS
    ).drop("call_ts_ns", "call_end_ns")


def _data_loading(gaps: pl.LazyFrame, trace: Trace, until: pl.Expr) -> pl.LazyFrame:
    """``data_loading_ns``: how much of the gap's host part (its start to ``until``) its thread
    spent in a DataLoader event (the latest one starting before ``until``)."""
    loading = (
        trace.cpu.lazy()
        .filter(
            pl.any_horizontal(
                pl.col("name").str.contains(n, literal=True) for n in DATA_LOADING_NAMES
            )
        )
        .select(
            "rank", thread="tid", dl_ts_ns="ts_ns", dl_end_ns=pl.col("ts_ns") + pl.col("dur_ns")
        )
        .sort("dl_ts_ns")
    )
    joined = (
        gaps.with_columns(_until=until)
        .sort("_until")
        .join_asof(
            loading,
            left_on="_until",
            right_on="dl_ts_ns",
            by=["rank", "thread"],
            check_sortedness=False,
        )
    )
    overlap = pl.min_horizontal("_until", "dl_end_ns") - pl.max_horizontal(
        "gap_start_ns", "dl_ts_ns"
    )
    inside = pl.when(pl.col("dl_ts_ns").is_not_null()).then(overlap.clip(lower_bound=0))
    return joined.with_columns(data_loading_ns=inside.fill_null(0)).drop(
        "_until", "dl_ts_ns", "dl_end_ns"
    )
