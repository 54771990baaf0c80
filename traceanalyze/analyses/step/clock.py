"""Whether the GPU's times are on the CPU's clock: the launch-to-start delay tells.

A kernel (copy, memset) cannot start before the call that launched it began, and a GPU with
nothing queued starts new work a few µs after its launch. A GPU-bound loop's CPU runs ahead, so
every launch of a trace may find a deep queue (shortest delays of 14-48 ms on H200 captures);
but then the GPU is never idle for long: it always has the next work. The GPU's clock is
offset from the CPU's where, over ``OFFSET_MIN_LAUNCHES`` launches or more of a rank,

* the shortest launch-to-start delay (activity start minus launch call start) is
  ``OFFSET_MIN_DELAY_US`` or more, *and* between its recorded activities the GPU sits idle
  with that queued work for ``OFFSET_WAITING_MIN_PCT`` or more of the steps' wall (gaps of
  ``DISPATCH_MAX_NS`` or more ended by work launched before they began).
  On a rank whose work runs on one stream, with no stream waiting on an event, the delay
  floor is ``OFFSET_ONE_STREAM_MIN_DELAY_US``: there a queued kernel waits on nothing the
  trace could hide but its dispatch; or
* ``BEFORE_LAUNCH_MIN_PCT`` or more of the activities start before their launch call began.

Where the delay is that long but the only such idle lies before the rank's first recorded
activity, the trace cannot tell an offset from a GPU still busy with work launched before the
profiler started (which it did not record; ROCm vLLM decode traces: the GPU is 99.8% busy from
its first activity on): the check says so (``shown`` false) rather than claim an offset.

Either way a gap's cause compares a launch time with a GPU time that may be on another clock,
and a critical path that crosses between CPU and GPU cannot be read: the step model gives no
verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceanalyze.trace import Trace

# The shortest launch-to-start delay that a GPU on the CPU's clock does not reach over many
# launches (a physical delay is ~5-50 µs; a deep queue that never drains shows no idle GPU).
OFFSET_MIN_DELAY_US = 1_000.0
# On a rank whose GPU work all runs on one stream, with no call making a stream wait on an
# event, a queued kernel has nothing to wait on but its own dispatch: the shortest delay that
# a GPU on the CPU's clock does not reach there is lower (an idle stream starts work 5-50 µs
# after its launch; a +500 µs shift of a one-stream GH200 trace went unseen at 1,000 µs).
OFFSET_ONE_STREAM_MIN_DELAY_US = 100.0
# Calls that make a stream wait on another's event: a dependency the GPU may idle on.
STREAM_WAIT_CALLS = ("cudaStreamWaitEvent", "hipStreamWaitEvent", "cuStreamWaitEvent")
# Over at least this many launches (per rank): fewer may all have found a queue.
OFFSET_MIN_LAUNCHES = 20
# The steps' wall share the GPU idles with work queued (long gaps between recorded activities)
# that, beside the shortest delay above, a queue on one clock cannot show; the same share
# before the first recorded activity leaves the clocks in doubt (module docstring).
OFFSET_WAITING_MIN_PCT = 5.0
# A share of activities starting before their launch call began: the GPU's clock is behind.
BEFORE_LAUNCH_MIN_PCT = 10.0


@dataclass(frozen=True)
class ClockOffset:
    """A rank whose GPU times are not on its CPU's clock, and the evidence."""

    rank: int
    launches: int
    min_delay_us: float
    before_launch_pct: float
    waiting_pct: float
    leading_pct: float = 0.0

    @property
    def shown(self) -> bool:
        """Whether the trace shows the offset (else it cannot tell it from unrecorded work)."""
        return (
            self.before_launch_pct >= BEFORE_LAUNCH_MIN_PCT
            or self.waiting_pct >= OFFSET_WAITING_MIN_PCT
        )

    def describe(self) -> str:
        """The evidence, as a clause (only what the trace shows)."""
        delay = (
            f"the shortest delay from a launch call's start to its GPU activity's start is "
            f"{self.min_delay_us:,.1f} µs over {self.launches:,} launches"
        )
        if self.before_launch_pct >= BEFORE_LAUNCH_MIN_PCT:
            seen = (
                f"{self.before_launch_pct:.1f}% of {self.launches:,} GPU activities start before "
                "their launch call began"
            )
        elif self.shown:
            seen = (
                f"{delay}, yet between its recorded activities the GPU idles "
                f"{self.waiting_pct:.1f}% of the wall with that work queued (on one clock, work "
                "queued that long would have run in those gaps)"
            )
        else:
            return (
                f"rank {self.rank}: {delay}, and nothing is recorded on the GPU for the first "
                f"{self.leading_pct:.1f}% of the wall while that work is queued: its GPU clock "
                "is offset from its CPU clock, or the GPU was busy with work launched before the "
                "profiler started (not recorded); the trace cannot tell which"
            )
        return f"rank {self.rank}'s GPU clock is offset from its CPU clock: {seen}"


def _launch_delays(trace: Trace) -> pl.DataFrame:
    """Per rank with ``OFFSET_MIN_LAUNCHES`` launches or more: ``launches``, ``min_delay_us``
    (the shortest launch-to-start delay), ``before_launch_pct`` and ``floor_us`` (the delay
    floor: ``OFFSET_ONE_STREAM_MIN_DELAY_US`` on a rank with one stream and no stream waits,
    else ``OFFSET_MIN_DELAY_US``)."""
    linked = trace.gpu.filter(pl.col("launch_ts_ns").is_not_null() & pl.col("ts_ns").is_not_null())
    return (
        linked.group_by("rank")
        .agg(
            launches=pl.len(),
            min_delay_us=(pl.col("ts_ns") - pl.col("launch_ts_ns")).min() / 1e3,
            before_launch_pct=(pl.col("ts_ns") < pl.col("launch_ts_ns")).mean() * 100,
        )
        .filter(pl.col("launches") >= OFFSET_MIN_LAUNCHES)
        .join(_lone_streams(trace, linked), on="rank", how="left")
        .with_columns(
            floor_us=pl.when(pl.col("lone_stream").fill_null(value=False))
            .then(OFFSET_ONE_STREAM_MIN_DELAY_US)
            .otherwise(OFFSET_MIN_DELAY_US)
        )
    )


_DEEP_DELAY = pl.col("min_delay_us") >= OFFSET_MIN_DELAY_US
_FLOOR_DELAY = pl.col("min_delay_us") >= pl.col("floor_us")
_BEFORE_LAUNCH = pl.col("before_launch_pct") >= BEFORE_LAUNCH_MIN_PCT


def offset_possible(trace: Trace) -> bool:
    """Whether any rank's launch delays alone could show an offset: the cheap half of the rule,
    so that a caller can skip building the steps' gaps (``clock_offsets``' ``waiting_pct``)
    where no rank can be offset."""
    return bool(_launch_delays(trace).filter(_FLOOR_DELAY | _BEFORE_LAUNCH).height)


def clock_offsets(trace: Trace, waiting_pct: pl.DataFrame) -> list[ClockOffset]:
    """The ranks of ``trace`` whose GPU clock is offset from the CPU's (module docstring);
    ``waiting_pct``: per ``rank``, ``waiting_pct`` and ``leading_pct``, the share of the steps'
    wall the GPU idled with its next work queued (gaps of ``DISPATCH_MAX_NS`` or more) between
    its recorded activities and before the first."""
    per_rank = (
        _launch_delays(trace)
        .join(waiting_pct, on="rank", how="left")
        .filter(
            (_FLOOR_DELAY & (pl.col("waiting_pct").fill_null(0.0) >= OFFSET_WAITING_MIN_PCT))
            | (_DEEP_DELAY & (pl.col("leading_pct").fill_null(0.0) >= OFFSET_WAITING_MIN_PCT))
            | _BEFORE_LAUNCH
        )
        .sort("rank")
    )
    # One row per offset rank: a handful.
    return [
        ClockOffset(
            int(rank), int(n), float(delay), float(pct), float(waiting or 0.0), float(lead or 0.0)
        )
        for rank, n, delay, pct, waiting, lead in per_rank.select(
            "rank", "launches", "min_delay_us", "before_launch_pct", "waiting_pct", "leading_pct"
        ).iter_rows()
    ]


def _lone_streams(trace: Trace, linked: pl.DataFrame) -> pl.DataFrame:
    """Per rank, ``lone_stream``: all its GPU activities on one stream of one device, and no
    call making a stream wait on an event (nothing recorded for a queued kernel to wait on)."""
    streams = trace.gpu.group_by("rank").agg(one=pl.struct("device", "stream").n_unique() == 1)
    waits = (
        trace.cpu.filter(pl.col("name").is_in(STREAM_WAIT_CALLS))
        .group_by("rank")
        .agg(waits=pl.len())
    )
    return (
        linked.select("rank")
        .unique()
        .join(streams, on="rank", how="left")
        .join(waits, on="rank", how="left")
        .select(
            "rank", lone_stream=pl.col("one").fill_null(value=False) & pl.col("waits").is_null()
        )
    )


def offset_note(offsets: list[ClockOffset]) -> str:
    """Why no gap cause or verdict can be read, and what is missing."""
    said = "; ".join(o.describe() for o in offsets[:3])
    fix = (
        "the trace lacks a common clock (profile on one clock source, or align the GPU's times "
        "to its launches)"
        if any(o.shown for o in offsets)
        else "the trace shows neither a common clock nor the GPU's earlier work (profile more "
        "steps, with a sync before the first, or on one clock source)"
    )
    return (
        f"{said}: whether the GPU waited for the host (a gap's cause) and what bounds the step "
        f"cannot be told, since they compare launch times with GPU times; {fix}"
    )
