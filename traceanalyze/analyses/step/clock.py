"""Whether the GPU's times are on the CPU's clock: the launch-to-start delay tells.

A kernel (copy, memset) cannot start before the call that launched it began, and a GPU with
nothing queued starts new work a few µs after its launch. A GPU-bound loop's CPU runs ahead, so
every launch of a trace may find a deep queue (shortest delays of 14-48 ms on H200 captures);
but then the GPU is never idle for long: it always has the next work. The GPU's clock is
offset from the CPU's (ROCm traces show 6.9 ms and 146 ms) where, over
``OFFSET_MIN_LAUNCHES`` launches or more of a rank,

* the shortest launch-to-start delay (activity start minus launch call start) is
  ``OFFSET_MIN_DELAY_US`` or more, *and* the GPU sits idle with that queued work for
  ``OFFSET_WAITING_MIN_PCT`` or more of the steps' wall (gaps of ``DISPATCH_MAX_NS`` or more
  ended by work launched before they began): a queue that deep never lets the GPU idle; or
* ``BEFORE_LAUNCH_MIN_PCT`` or more of the activities start before their launch call began.

A gap's cause then compares a launch time with a GPU time on another clock, and a critical
path that crosses between CPU and GPU cannot be read: the step model gives no verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceanalyze.trace import Trace

# The shortest launch-to-start delay that a GPU on the CPU's clock does not reach over many
# launches (a physical delay is ~5-50 µs; a deep queue that never drains shows no idle GPU).
OFFSET_MIN_DELAY_US = 1_000.0
# Over at least this many launches (per rank): fewer may all have found a queue.
OFFSET_MIN_LAUNCHES = 20
# The steps' wall share the GPU idles with work queued (long gaps) that, beside the shortest
# delay above, a queue on one clock cannot show.
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

    def describe(self) -> str:
        """The evidence, as a clause."""
        if self.before_launch_pct >= BEFORE_LAUNCH_MIN_PCT:
            seen = (
                f"{self.before_launch_pct:.1f}% of {self.launches:,} GPU activities start before "
                "their launch call began"
            )
        else:
            seen = (
                f"the shortest delay from a launch call's start to its GPU activity's start is "
                f"{self.min_delay_us:,.1f} µs over {self.launches:,} launches, yet the GPU idles "
                f"{self.waiting_pct:.1f}% of the wall with that work queued (on one clock a queue "
                "that deep never lets it idle)"
            )
        return f"rank {self.rank}'s GPU clock is offset from its CPU clock: {seen}"


def _launch_delays(trace: Trace) -> pl.DataFrame:
    """Per rank with ``OFFSET_MIN_LAUNCHES`` launches or more: ``launches``, ``min_delay_us``
    (the shortest launch-to-start delay) and ``before_launch_pct``."""
    linked = trace.gpu.filter(pl.col("launch_ts_ns").is_not_null() & pl.col("ts_ns").is_not_null())
    return (
        linked.group_by("rank")
        .agg(
            launches=pl.len(),
            min_delay_us=(pl.col("ts_ns") - pl.col("launch_ts_ns")).min() / 1e3,
            before_launch_pct=(pl.col("ts_ns") < pl.col("launch_ts_ns")).mean() * 100,
        )
        .filter(pl.col("launches") >= OFFSET_MIN_LAUNCHES)
    )


_DEEP_DELAY = pl.col("min_delay_us") >= OFFSET_MIN_DELAY_US
_BEFORE_LAUNCH = pl.col("before_launch_pct") >= BEFORE_LAUNCH_MIN_PCT


def offset_possible(trace: Trace) -> bool:
    """Whether any rank's launch delays alone could show an offset: the cheap half of the rule,
    so that a caller can skip building the steps' gaps (``clock_offsets``' ``waiting_pct``)
    where no rank can be offset."""
    return bool(_launch_delays(trace).filter(_DEEP_DELAY | _BEFORE_LAUNCH).height)


def clock_offsets(trace: Trace, waiting_pct: pl.DataFrame) -> list[ClockOffset]:
    """The ranks of ``trace`` whose GPU clock is offset from the CPU's (module docstring);
    ``waiting_pct``: per ``rank``, ``waiting_pct``, the share of the steps' wall the GPU idled
    with its next work queued (gaps of ``DISPATCH_MAX_NS`` or more)."""
    per_rank = (
        _launch_delays(trace)
        .join(waiting_pct, on="rank", how="left")
        .filter(
            (_DEEP_DELAY & (pl.col("waiting_pct").fill_null(0.0) >= OFFSET_WAITING_MIN_PCT))
            | _BEFORE_LAUNCH
        )
        .sort("rank")
    )
    # One row per offset rank: a handful.
    return [
        ClockOffset(int(rank), int(n), float(delay), float(pct), float(waiting or 0.0))
        for rank, n, delay, pct, waiting in per_rank.select(
            "rank", "launches", "min_delay_us", "before_launch_pct", "waiting_pct"
        ).iter_rows()
    ]


def offset_note(offsets: list[ClockOffset]) -> str:
    """Why no gap cause or verdict can be read, and what is missing."""
    said = "; ".join(o.describe() for o in offsets[:3])
    return (
        f"{said}: whether the GPU waited for the host (a gap's cause) and what bounds the step "
        "cannot be told, since they compare launch times with GPU times; the trace lacks a "
        "common clock (profile on one clock source, or align the GPU's times to its launches)"
    )
