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
* ``BEFORE_LAUNCH_MIN_PCT`` or more of the activities start before their launch call began; or
* the clock *drifts*: the shortest delay of the launches onto an idle GPU
  (:func:`idle_launches`: the activity starts after every earlier activity of the rank has
  ended, and the GPU ran other work for less than half the time since its launch call: nothing
  queued ahead for long, so on one clock the delay is the dispatch's few µs) moves steadily
  across the trace, per counted step (per ``DRIFT_WINDOWS`` equal windows of the steps' span
  where fewer than ``DRIFT_MIN_WINDOWS`` steps count), by the rank's delay floor or more: a
  linear fit over ``DRIFT_MIN_WINDOWS`` or more windows of ``DRIFT_MIN_LAUNCHES`` such launches
  each, explaining ``DRIFT_MIN_FIT`` of their variance. A constant offset shows in the whole
  trace's shortest delay; a drift from zero does not (its earliest launches are on time).

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

from traceanalyze.analyses.step.window import rank_segments
from traceanalyze.trace import Trace

# The shortest launch-to-start delay that a GPU on the CPU's clock does not reach over many
# launches (a physical delay is ~5-50 µs; a deep queue that never drains shows no idle GPU).
OFFSET_MIN_DELAY_US = 1_000.0
# On a rank whose GPU work all runs on one stream, with no call making a stream wait on an
# event, a queued kernel has nothing to wait on but its own dispatch: the shortest delay that
# a GPU on the CPU's clock does not reach there is lower (an idle stream starts work 5-50 µs
# after its launch; a +500 µs shift of a one-stream GH200 trace went unseen at 1,000 µs).
OFFSET_ONE_STREAM_MIN_DELAY_US = 100.0
# The shortest delay of a rank's launches onto an idle GPU (:func:`idle_launches`, over
# ``OFFSET_MIN_LAUNCHES`` of them or more) that a GPU on the CPU's clock does not reach, on any
# number of streams: such an activity waited mostly on an idle GPU, which its dispatch explains
# (measured over the 113 sample, public and corpus traces: at most 29.1 µs on a one-stream rank,
# a ROCm one, and 11.0 µs on a rank with several streams); also what a drift must move by.
IDLE_MIN_DELAY_US = 100.0
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
# A drift (module docstring) needs a trend over at least this many windows (counted steps, or
# equal slices of their span) ...
DRIFT_MIN_WINDOWS = 4
# ... the steps' span is cut into this many where fewer steps count ...
DRIFT_WINDOWS = 8
# ... each window with this many launches onto an idle GPU (its minimum is then the dispatch's
# delay, not one launch's accident) ...
DRIFT_MIN_LAUNCHES = 5
# ... and a straight line through the windows' minima explaining this share of their variance
# (R²): a drift moves every window, while a one-off (a first step's lazy module loads) moves one.
DRIFT_MIN_FIT = 0.9


@dataclass(frozen=True)
class ClockOffset:
    """A rank whose GPU times are not on its CPU's clock, and the evidence."""

    rank: int
    launches: int
    min_delay_us: float
    before_launch_pct: float
    waiting_pct: float
    leading_pct: float = 0.0
    # A drift: the shortest delay of launches onto an idle GPU per window (µs, in time order),
    # what the fitted line moves across them, the floor it passed and what the windows are.
    drift_minima_us: tuple[float, ...] = ()
    drift_us: float = 0.0
    floor_us: float = OFFSET_MIN_DELAY_US
    drift_windows: str = "steps"
    # The launches onto an idle GPU and their shortest delay (µs; None without any).
    idle_launches: int = 0
    idle_min_delay_us: float | None = None

    @property
    def idle_delay_shown(self) -> bool:
        """Whether the launches onto an idle GPU all wait ``IDLE_MIN_DELAY_US`` or more."""
        return (
            self.idle_launches >= OFFSET_MIN_LAUNCHES
            and (self.idle_min_delay_us or 0.0) >= IDLE_MIN_DELAY_US
        )

    @property
    def finding(self) -> str:
        """``drift`` (the offset moves across the trace: the more telling, where a constant
        offset shows too), ``offset`` (a constant offset shown) or ``unclear`` (an offset or
        unrecorded earlier work: the trace cannot tell)."""
        if self.drift_minima_us:
            return "drift"
        delayed = self.min_delay_us >= self.floor_us or self.idle_delay_shown
        waiting = delayed and self.waiting_pct >= OFFSET_WAITING_MIN_PCT
        if self.before_launch_pct >= BEFORE_LAUNCH_MIN_PCT or waiting:
            return "offset"
        return "unclear"

    @property
    def shown(self) -> bool:
        """Whether the trace shows the offset (else it cannot tell it from unrecorded work)."""
        return self.finding != "unclear"

    def describe(self) -> str:
        """The evidence, as a clause (only what the trace shows)."""
        delay = (
            f"the shortest delay from a launch call's start to its GPU activity's start is "
            f"{self.min_delay_us:,.1f} µs over {self.launches:,} launches"
        )
        if self.finding == "drift":
            minima = " / ".join(f"{m:,.1f}" for m in self.drift_minima_us[:12])
            more = (
                f" and {len(self.drift_minima_us) - 12} more"
                if len(self.drift_minima_us) > 12
                else ""
            )
            return (
                f"rank {self.rank}'s GPU clock drifts from its CPU clock: the shortest delay "
                f"from a launch onto an idle GPU to its start moves steadily by "
                f"{self.drift_us:+,.1f} µs across the trace (the floor is "
                f"{IDLE_MIN_DELAY_US:,.0f} µs), per {self.drift_windows}: {minima}{more} µs (on "
                "one clock it stays at the dispatch's few µs; the whole trace's shortest delay, "
                f"{self.min_delay_us:,.1f} µs over {self.launches:,} launches, hides a drift)"
            )
        if self.before_launch_pct >= BEFORE_LAUNCH_MIN_PCT:
            seen = (
                f"{self.before_launch_pct:.1f}% of {self.launches:,} GPU activities start before "
                "their launch call began"
            )
        elif self.shown:
            if self.min_delay_us < self.floor_us:  # shown by the launches onto an idle GPU
                delay = (
                    f"the shortest delay of its {self.idle_launches:,} launches onto an idle GPU "
                    f"(nothing ran ahead of them for long) is {self.idle_min_delay_us or 0.0:,.1f} "
                    "µs, where the GPU's dispatch takes a few"
                )
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
    else ``OFFSET_MIN_DELAY_US``), ``idle_launches`` and ``idle_min_delay_us`` (the launches
    onto an idle GPU, :func:`idle_launches`, and their shortest delay)."""
    linked = trace.gpu.filter(pl.col("launch_ts_ns").is_not_null() & pl.col("ts_ns").is_not_null())
    idle = (
        idle_launches(trace)
        .group_by("rank")
        .agg(idle_launches=pl.len(), idle_min_delay_us=pl.col("delay_ns").min() / 1e3)
    )
    return (
        linked.group_by("rank")
        .agg(
            launches=pl.len(),
            min_delay_us=(pl.col("ts_ns") - pl.col("launch_ts_ns")).min() / 1e3,
            before_launch_pct=(pl.col("ts_ns") < pl.col("launch_ts_ns")).mean() * 100,
        )
        .filter(pl.col("launches") >= OFFSET_MIN_LAUNCHES)
        .join(_lone_streams(trace, linked), on="rank", how="left")
        .join(idle, on="rank", how="left")
        .with_columns(pl.col("idle_launches").fill_null(0))
        .with_columns(
            floor_us=pl.when(pl.col("lone_stream").fill_null(value=False))
            .then(OFFSET_ONE_STREAM_MIN_DELAY_US)
            .otherwise(OFFSET_MIN_DELAY_US)
        )
    )


_DEEP_DELAY = pl.col("min_delay_us") >= OFFSET_MIN_DELAY_US
_FLOOR_DELAY = pl.col("min_delay_us") >= pl.col("floor_us")
_BEFORE_LAUNCH = pl.col("before_launch_pct") >= BEFORE_LAUNCH_MIN_PCT
_IDLE_DELAY = (pl.col("idle_launches") >= OFFSET_MIN_LAUNCHES) & (
    pl.col("idle_min_delay_us") >= IDLE_MIN_DELAY_US
)


def clock_offsets(
    trace: Trace, waiting_pct: pl.DataFrame, steps: pl.DataFrame | None = None
) -> list[ClockOffset]:
    """The ranks of ``trace`` whose GPU clock is offset from the CPU's (module docstring);
    ``waiting_pct``: per ``rank``, ``waiting_pct`` and ``leading_pct``, the share of the steps'
    wall the GPU idled with its next work queued (gaps of ``DISPATCH_MAX_NS`` or more) between
    its recorded activities and before the first; ``steps``: the counted steps' windows
    (``rank``, ``lo_ns``, ``hi_ns``), over which a drift is looked for."""
    delays = _launch_delays(trace)
    drifts = window_drifts(trace, steps) if steps is not None else _NO_DRIFT
    drifting = (pl.col("drift_us").abs() >= IDLE_MIN_DELAY_US).fill_null(value=False)
    per_rank = (
        delays.join(waiting_pct, on="rank", how="left")
        .join(drifts, on="rank", how="left")
        .filter(
            (
                (_FLOOR_DELAY | _IDLE_DELAY)
                & (pl.col("waiting_pct").fill_null(0.0) >= OFFSET_WAITING_MIN_PCT)
            )
            | (_DEEP_DELAY & (pl.col("leading_pct").fill_null(0.0) >= OFFSET_WAITING_MIN_PCT))
            | _BEFORE_LAUNCH
            | drifting
        )
        .with_columns(
            drift_minima_us=pl.when(drifting).then(pl.col("minima_us")),
            drift_us=pl.when(drifting).then(pl.col("drift_us")),
        )
        .sort("rank")
    )
    columns = ("rank", "launches", "min_delay_us", "before_launch_pct", "waiting_pct")
    # One row per offset rank: a handful.
    return [
        ClockOffset(
            int(row["rank"]),
            int(row["launches"]),
            float(row["min_delay_us"]),
            float(row["before_launch_pct"]),
            float(row["waiting_pct"] or 0.0),
            float(row["leading_pct"] or 0.0),
            tuple(row["drift_minima_us"] or ()),
            float(row["drift_us"] or 0.0),
            float(row["floor_us"]),
            row["windows"] or "steps",
            int(row["idle_launches"]),
            row["idle_min_delay_us"],
        )
        for row in per_rank.select(
            *columns,
            "leading_pct",
            "drift_minima_us",
            "drift_us",
            "floor_us",
            "windows",
            "idle_launches",
            "idle_min_delay_us",
        ).iter_rows(named=True)
    ]


_NO_DRIFT = pl.DataFrame(
    schema={
        "rank": pl.Int32(),
        "minima_us": pl.List(pl.Float64()),
        "drift_us": pl.Float64(),
        "fit": pl.Float64(),
        "windows": pl.String(),
    }
)


def idle_launches(trace: Trace) -> pl.DataFrame:
    """The launches whose activity found the GPU idle: ``rank``, ``ts_ns``, ``launch_ts_ns``
    and ``delay_ns`` (the activity's start minus its launch call's start) of each activity that
    starts after every activity of its rank that starts before it has ended, launched once the
    GPU had recorded work (before, unrecorded work launched before the profiler may fill the
    delay), and whose GPU ran other work for less than half of the time from its launch call to
    its start (or that starts before its launch call). On one clock nothing ran ahead of such an
    activity for long, so its delay is the GPU's dispatch (a few µs) or a wait on an idle GPU;
    work queued behind other work is left out (a deep queue's delay is its depth, which may grow
    over a trace on one clock: a ROCm vLLM decode trace's grows from 147 to 281 ms)."""
    recorded = trace.gpu.lazy().filter(pl.col("ts_ns").is_not_null())
    activities = recorded.select(
        "rank",
        "ts_ns",
        "launch_ts_ns",
        end_ns=pl.col("ts_ns") + pl.col("dur_ns").fill_null(0).clip(lower_bound=0),
    )
    before = pl.col("end_ns").cum_max().shift(1).over("rank")
    ahead = activities.sort("rank", "ts_ns").with_columns(
        ahead_ns=before, first_ns=pl.col("ts_ns").min().over("rank")
    )
    after_idle = pl.col("ahead_ns").is_not_null() & (pl.col("ts_ns") >= pl.col("ahead_ns"))
    # Launched before the GPU recorded anything: unrecorded earlier work may fill the delay.
    recording = pl.col("launch_ts_ns") >= pl.col("first_ns")
    candidates = ahead.filter(pl.col("launch_ts_ns").is_not_null() & after_idle & recording)
    segments = rank_segments(recorded)
    timed = _busy_until(_busy_until(candidates, segments, "ts_ns"), segments, "launch_ts_ns")
    delay = pl.col("ts_ns") - pl.col("launch_ts_ns")
    busy = pl.col("_busy_ts_ns") - pl.col("_busy_launch_ts_ns")
    mostly_idle = (delay <= 0) | (busy * 2 < delay)
    return (
        timed.filter(mostly_idle).select("rank", "ts_ns", "launch_ts_ns", delay_ns=delay).collect()
    )


def _busy_until(points: pl.LazyFrame, segments: pl.LazyFrame, at: str) -> pl.LazyFrame:
    """``points`` with ``_busy_<at>``: the nanoseconds its rank's GPU was busy (``segments``:
    disjoint per rank, ``start_ns``, ``end_ns``) before the time in its column ``at``."""
    length = pl.col("end_ns") - pl.col("start_ns")
    cumulative = (
        segments.sort("rank", "start_ns")
        .with_columns(_before=length.cum_sum().over("rank") - length)
        .select("rank", "_before", _seg_start="start_ns", _seg_end="end_ns")
        .sort("_seg_start")
    )
    inside = (pl.min_horizontal(at, "_seg_end") - pl.col("_seg_start")).clip(lower_bound=0)
    return (
        points.sort(at)
        .join_asof(cumulative, left_on=at, right_on="_seg_start", by="rank", check_sortedness=False)
        .with_columns((pl.col("_before") + inside).fill_null(0).alias(f"_busy_{at}"))
        .drop("_before", "_seg_start", "_seg_end")
    )


def drift_windows(steps: pl.DataFrame) -> pl.DataFrame:
    """The windows a drift is looked for in, per rank: ``rank``, ``window``, ``lo_ns``,
    ``hi_ns`` and ``windows`` (what they are): its counted steps, or, where fewer than
    ``DRIFT_MIN_WINDOWS`` count, ``DRIFT_WINDOWS`` equal slices of their span."""
    counts = steps.group_by("rank").agg(
        n=pl.len(), span_lo=pl.col("lo_ns").min(), span_hi=pl.col("hi_ns").max()
    )
    many = counts.filter(pl.col("n") >= DRIFT_MIN_WINDOWS).select("rank")
    own = (
        steps.join(many, on="rank")
        .sort("rank", "lo_ns")
        .select(
            "rank",
            window=pl.int_range(pl.len()).over("rank"),
            lo_ns="lo_ns",
            hi_ns="hi_ns",
            windows=pl.lit("counted step"),
        )
    )
    width = (pl.col("span_hi") - pl.col("span_lo")) / DRIFT_WINDOWS
    sliced = (
        counts.filter(pl.col("n") < DRIFT_MIN_WINDOWS)
        .join(pl.DataFrame({"window": list(range(DRIFT_WINDOWS))}), how="cross")
        .select(
            "rank",
            "window",
            lo_ns=(pl.col("span_lo") + width * pl.col("window")).round().cast(pl.Int64),
            hi_ns=(pl.col("span_lo") + width * (pl.col("window") + 1)).round().cast(pl.Int64),
            windows=pl.lit(f"1/{DRIFT_WINDOWS} of the steps' span"),
        )
    )
    return pl.concat([own.cast(sliced.schema), sliced])


def window_minima(trace: Trace, steps: pl.DataFrame) -> pl.DataFrame:
    """Per rank and window (:func:`drift_windows`) with ``DRIFT_MIN_LAUNCHES`` launches onto
    an idle GPU or more (:func:`idle_launches`, by the activity's start: the windows are the
    GPU's, a step's ending with its last work): ``launches``,
    ``min_delay_us`` (their shortest delay), ``mid_ns`` (the window's middle), ``windows``."""
    windows = drift_windows(steps).sort("lo_ns")
    placed = (
        idle_launches(trace)
        .sort("ts_ns")
        .join_asof(windows, left_on="ts_ns", right_on="lo_ns", by="rank", check_sortedness=False)
        .filter(pl.col("ts_ns") < pl.col("hi_ns"))
    )
    return (
        placed.group_by("rank", "window")
        .agg(
            launches=pl.len(),
            min_delay_us=pl.col("delay_ns").min() / 1e3,
            mid_ns=((pl.col("lo_ns") + pl.col("hi_ns")) / 2).first(),
            windows=pl.col("windows").first(),
        )
        .filter(pl.col("launches") >= DRIFT_MIN_LAUNCHES)
        .sort("rank", "window")
    )


def window_drifts(trace: Trace, steps: pl.DataFrame) -> pl.DataFrame:
    """Per rank with ``DRIFT_MIN_WINDOWS`` windows of evidence or more (:func:`window_minima`):
    ``minima_us`` (the windows' shortest delays in time order), ``drift_us`` (what a straight
    line through them moves from the first window's middle to the last's), ``fit`` (its R²)
    and ``windows``; only where the fit is ``DRIFT_MIN_FIT`` or better."""
    minima = window_minima(trace, steps)
    # Times from the rank's first window, in ms: a fit on epoch nanoseconds loses precision.
    x = (pl.col("mid_ns") - pl.col("mid_ns").min().over("rank")) / 1e6
    y = pl.col("min_delay_us")
    return (
        minima.with_columns(x=x)
        .group_by("rank")
        .agg(
            n=pl.len(),
            minima_us=y.sort_by("x"),
            slope=pl.cov("x", y) / pl.col("x").var(),
            span=pl.col("x").max() - pl.col("x").min(),
            fit=(pl.corr("x", y) ** 2).fill_nan(0.0),
            windows=pl.col("windows").first(),
        )
        .filter((pl.col("n") >= DRIFT_MIN_WINDOWS) & (pl.col("fit") >= DRIFT_MIN_FIT))
        .select(
            "rank",
            "minima_us",
            drift_us=pl.col("slope") * pl.col("span"),
            fit="fit",
            windows="windows",
        )
        .cast(_NO_DRIFT.schema)
    )


def one_stream(trace: Trace) -> bool:
    """Whether every rank of ``trace`` with linked GPU work runs it on one stream of one
    device with no call making a stream wait on an event: its GPU then has no other stream's
    work to wait on (a queued kernel waits on its dispatch only, on one clock)."""
    linked = trace.gpu.filter(pl.col("launch_ts_ns").is_not_null() & pl.col("ts_ns").is_not_null())
    lone = _lone_streams(trace, linked)["lone_stream"]
    return bool(lone.len() and lone.all())


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
