"""Why the GPU sits idle in a step: each gap of the window and its cause, by causality.

A *gap* is a stretch of a step's window where none of the rank's GPU streams runs anything
(the window minus its busy time, :mod:`.window`; the gaps add up to the step's idle time,
leading and trailing stretches of the window included). Each gap ends when some work starts (or
at the window's end, the next work after it). Its cause (``CAUSES``):

1. ``queued`` outright when that work had been launched before the gap began (its launch call
   had returned, or it was launched before the profiler started): the GPU had the work and
   still waited, for its own dispatch or for work on another stream it depends on.
2. Otherwise the gap is cut, in the order it passed on the launching thread, into parts that add
   up to it, and the largest part names the cause: ``sync`` (the thread was blocked in a
   synchronisation or blocking copy when the gap began, until it returned, plus up to
   ``ROUND_TRIP_HOST_NS`` of the host's work after it: the sync's round trip, which drains the
   GPU's queue), ``data_loading`` (in a DataLoader's ``__next__`` before the launch), ``host``
   (other CPU work before the launch: operators, Python, a compile), ``launch`` (the launch call
   itself; ``launch_first_call`` where that call lasts ``LAUNCH_FIRST_CALL_MIN_NS`` or more:
   one-off work inside it, not steady launch overhead) and ``queued`` again (after the launch
   call returned, until the GPU started the work: a dependency or the GPU's dispatch).

A gap with no work after it (the trace's end) is charged to what the rank's launching thread
did meanwhile, by the same parts.
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
LAUNCH_FIRST_CALL = "launch_first_call"
# A launch call this long does one-off work inside it (a lazy module load, a JIT compile, the
# first call's initialisation): steady launches take 2-50 µs, and a gap means the GPU's queue
# is empty, so the call is not waiting on a full queue either. Seen: a 1.34 s call on an A100
# loading modules lazily, a 6.5 ms first hipLaunchKernel on an MI250.
LAUNCH_FIRST_CALL_MIN_NS = 1_000_000
# A blocking call that returned this little before the gap began still made it: the GPU's
# last work ended, the call returned a moment later (clock alignment of CPU and GPU timelines
# is good to about a microsecond).
SYNC_RETURN_TOLERANCE_NS = 2_000
# After a blocking sync returns, this much of the host's work before the next launch is still
# the sync's round trip (the host reacting and launching again); beyond it, the host's own work
# (a compile, an initialisation) is what the GPU waits for.
ROUND_TRIP_HOST_NS = 100_000
# CPU events that mean "loading the next batch": torch.utils.data's record_function names
# (`enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__`), matched as literal text.
DATA_LOADING_NAMES = ("DataLoader", "dataloader")


@dataclass(frozen=True)
class Cause:
    """An idle cause: its name and what it means (the README and the report print these)."""

    cause: str
    meaning: str


CAUSES: tuple[Cause, ...] = (
    Cause(QUEUED, "the work that ends the gap was already queued (launched before the gap "
          "began, or most of the gap passed after its launch call returned): the GPU waited on "
          "its own dispatch or on another stream's work it depends on"),
    Cause(SYNC, "the launching thread was blocked in a synchronisation or blocking copy when the "
          "gap began, and the sync's round trip (until it returned, then at most "
          f"{ROUND_TRIP_HOST_NS / 1e3:,.0f} µs of the host's work before the next launch) is most "
          "of the gap: it drained the GPU's queue"),
    Cause(DATA_LOADING, "most of the gap the launching thread was loading data (a DataLoader's "
          "`__next__`) before it launched the work"),
    Cause(HOST, "most of the gap the launching thread was busy with other CPU work (operators, "
          "Python, a compile) before it launched the work"),
    Cause(LAUNCH, "most of the gap is the launch call itself, a steady one (shorter than "
          f"{LAUNCH_FIRST_CALL_MIN_NS / 1e3:,.0f} µs)"),
    Cause(LAUNCH_FIRST_CALL, "most of the gap is a launch call of "
          f"{LAUNCH_FIRST_CALL_MIN_NS / 1e3:,.0f} µs or more: one-off work inside it (a lazy "
          "module load, a JIT compile, a first call's initialisation), not steady launch "
          "overhead"),
)  # fmt: skip
CAUSE_NAMES = tuple(c.cause for c in CAUSES)
# What ``queued`` means where the rank's work runs on one stream with no stream waiting on an
# event (:func:`~traceanalyze.analyses.step.clock.one_stream`): no other stream's work can hold
# the GPU there, so a long wait is not a dependency the trace hides behind another stream.
QUEUED_ONE_STREAM_MEANING = (
    "the work that ends the gap was already queued (launched before the gap began, or most of "
    "the gap passed after its launch call returned); the work runs on one stream with no stream "
    "waiting on an event, so no other stream's work held it: beyond the GPU's own dispatch (a "
    "few µs), such a gap points to a GPU clock offset from the CPU's (`audit`'s "
    "gpu_clock_offset) or to work the trace does not record"
)
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
        # At equal starts, the work launched first (no launch call: before the profiler) wins.
    ).sort("next_ts_ns", "launch_ts_ns", nulls_last=False)
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
    """``cause`` of each gap (module docstring): queued outright, else the largest of its parts
    (:func:`_parts`)."""
    gs = pl.col("gap_start_ns")
    queued = pl.col("linked").not_() & pl.col("next_ts_ns").is_not_null()
    queued = (queued | (pl.col("launch_end_ns") <= gs)).fill_null(value=False)
    blocked = _blocked(gaps, trace)
    parts = _parts(_data_loading(blocked, trace))
    largest = pl.max_horizontal(*PART_COLUMNS.values())
    cause: pl.Expr = pl.lit(QUEUED)
    # Ties go to the earlier cause of CAUSES (the last `when` applied wins, so go in reverse).
    for name, column in reversed(PART_COLUMNS.items()):
        cause = pl.when(pl.col(column) == largest).then(pl.lit(name)).otherwise(cause)
    one_off = (pl.col("launch_end_ns") - pl.col("launch_ts_ns")) >= LAUNCH_FIRST_CALL_MIN_NS
    cause = (
        pl.when((cause == LAUNCH) & one_off.fill_null(value=False))
        .then(pl.lit(LAUNCH_FIRST_CALL))
        .otherwise(cause)
    )
    return parts.with_columns(
        cause=pl.when(queued).then(pl.lit(QUEUED)).otherwise(cause),
        gap_ns=pl.col("gap_end_ns") - gs,
    )


# A gap's parts by cause, in CAUSES' order (which breaks ties), and their columns.
PART_COLUMNS = {
    SYNC: "_sync_ns",
    DATA_LOADING: "_data_ns",
    HOST: "_host_ns",
    LAUNCH: "_launch_ns",
    QUEUED: "_after_ns",
}


def _parts(gaps: pl.LazyFrame) -> pl.LazyFrame:
    """The gap's time cut in the order it passed, on the launching thread (they add up to it):
    blocked in a sync (``_sync_ns``, with up to ``ROUND_TRIP_HOST_NS`` of the host's work after
    the sync returned: the round trip), then until the launch call began, in a DataLoader
    (``_data_ns``) or other host work (``_host_ns``), then in the launch call (``_launch_ns``),
    then the work queued after the call returned until the GPU started it (``_after_ns``: a
    dependency or the GPU's own dispatch)."""
    gs, ge = pl.col("gap_start_ns"), pl.col("gap_end_ns")
    sync_end = pl.when(pl.col("blocked")).then(pl.min_horizontal(pl.col("call_end_ns"), ge))
    host_from = pl.max_horizontal(gs, sync_end.fill_null(gs))
    launched = pl.col("launch_ts_ns").is_not_null()
    until = pl.min_horizontal(pl.coalesce("launch_ts_ns", ge), ge)
    returned = pl.min_horizontal(pl.coalesce("launch_end_ns", ge), ge)
    host_window = (until - host_from).clip(lower_bound=0)
    host = (host_window - pl.col("data_loading_ns")).clip(lower_bound=0)
    round_trip = (
        pl.when(pl.col("blocked"))
        .then(pl.min_horizontal(host, ROUND_TRIP_HOST_NS))
        .otherwise(pl.lit(0, pl.Int64))
    )
    return gaps.with_columns(
        _sync_ns=(host_from - gs) + round_trip,
        _data_ns=pl.col("data_loading_ns"),
        _host_ns=host - round_trip,
        _launch_ns=pl.when(launched).then((returned - pl.max_horizontal(until, host_from)).clip(0)),
        _after_ns=pl.when(launched).then((ge - pl.max_horizontal(returned, host_from)).clip(0)),
    ).with_columns(pl.col("_launch_ns", "_after_ns").fill_null(0))


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
    blocked = pl.col("call_end_ns") >= pl.col("gap_start_ns") - SYNC_RETURN_TOLERANCE_NS
    return joined.with_columns(blocked=blocked.fill_null(value=False)).drop("call_ts_ns")


def _data_loading(gaps: pl.LazyFrame, trace: Trace) -> pl.LazyFrame:
    """``data_loading_ns``: how much of the gap's host part (from its start, or the end of the
    sync it began in, to the launch) its thread spent in a DataLoader event (the latest one
    starting before the launch)."""
    gs, ge = pl.col("gap_start_ns"), pl.col("gap_end_ns")
    until = pl.min_horizontal(pl.coalesce("launch_ts_ns", ge), ge)
    sync_end = pl.when(pl.col("blocked")).then(pl.min_horizontal(pl.col("call_end_ns"), ge))
    host_from = pl.max_horizontal(gs, sync_end.fill_null(gs))
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
        gaps.with_columns(_until=until, _host_from=host_from)
        .sort("_until")
        .join_asof(
            loading,
            left_on="_until",
            right_on="dl_ts_ns",
            by=["rank", "thread"],
            check_sortedness=False,
        )
    )
    overlap = pl.min_horizontal("_until", "dl_end_ns") - pl.max_horizontal("_host_from", "dl_ts_ns")
    inside = pl.when(pl.col("dl_ts_ns").is_not_null()).then(overlap.clip(lower_bound=0))
    return joined.with_columns(data_loading_ns=inside.fill_null(0)).drop(
        "_until", "_host_from", "dl_ts_ns", "dl_end_ns"
    )
