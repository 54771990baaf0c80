"""Idle-time causes cross-checked with Holistic Trace Analysis' ``get_idle_time_breakdown``.

HTA (0.5, read from ``hta/analyzers/breakdown_analysis.py``) works per stream over the whole
trace: each activity's ``idle_interval`` is its start minus the previous activity's end on its
stream; ``host_wait`` when the activity's runtime call *started* after that end; else
``kernel_wait`` when the interval is under ``consecutive_kernel_delay`` (in the trace's
microseconds, although its docstring says ns); else ``other``.

Ours differ on purpose (README, "Why the GPU idles"): we split the *device's* idle time inside
the steps' windows (gaps no stream covers, which add up to ``gpu_idle_us_per_iter``) and decide
a gap's cause by causality: ``queued`` when the launch call of the work that ends it had
*returned* before the gap began (HTA's kernel wait and other, by length), else what the
launching thread did (a sync's round trip, data loading, host work, the launch itself: HTA's
host wait, which compares the call's *start*).

So the first check runs an HTA-style gap finder (per stream, over the population HTA keeps) on
our loaded columns and classifies with HTA's rule, against HTA itself: our timestamps and
populations agree with HTA's. The second checks that our causes refine HTA's categories on the
same traces: every gap of ours whose next work was queued is one HTA calls kernel wait or
other, every gap HTA would call host wait is one of our host-side causes. Tolerances:

* each stream's total idle time within 1 µs: a sum of gaps telescopes, so HTA's coarse
  timestamps (below) err only at its ends;
* each category within the gaps whose class HTA's timestamps cannot decide, plus 0.05 µs. HTA
  keeps absolute timestamps as floats of microseconds too coarse for nanoseconds (0.25 µs steps
  on hta_ns_resolution_v100, measured), so a gap whose launch call starts within
  ``AMBIGUOUS_US`` of its beginning, or whose length is within that of the threshold, may fall
  in the neighbouring category on HTA's side. On most traces that margin is 0 and the
  agreement is exact to 0.05 µs.

HTA also sums negative intervals (activities overlapping on one stream); a trace with such
overlaps is skipped, saying so.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

pytest.importorskip("hta")

import traceanalyze
from tests.conftest import PUBLIC_TRACES, skip_without
from tests.test_hta_crosscheck import PUBLIC_NVIDIA, hta_analysis
from traceanalyze.analyses.activities import activities
from traceanalyze.analyses.step.model import step_model

pytestmark = [
    pytest.mark.hta,
    pytest.mark.filterwarnings("ignore:The inplace keyword:DeprecationWarning"),
    # HTA's own join, which pandas 3 deprecates: HTA's to fix.
    pytest.mark.filterwarnings("ignore:The 'lsuffix' and 'rsuffix' keywords:Warning"),
]
ROOT = Path(__file__).resolve().parents[1]
SAMPLES = sorted((ROOT / "sample_traces").glob("h200_default/*.json.gz"))
TRACES = [
    *(pytest.param(p, id=f"{p.parent.name}/{p.name}") for p in SAMPLES),
    *(pytest.param(PUBLIC_TRACES / name, id=f"public/{name}") for name in PUBLIC_NVIDIA),
]
STREAM = ["rank", "device", "stream"]
AMBIGUOUS_US = 0.5
# HTA's consecutive_kernel_delay in this check (its default is 30 µs).
LAUNCH_OVERHEAD_MAX_US = 10.0


def activity_gaps(gpu: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """HTA's idle intervals: per group of ``by``, where an activity starts after every earlier
    one of its group has ended, with the activity's launch call."""
    ordered = gpu.sort([*by, "ts_ns", "launch_ts_ns"]).with_columns(
        gap_start_ns=(pl.col("ts_ns") + pl.col("dur_ns")).cum_max().shift(1).over(by)
    )
    return ordered.filter(pl.col("ts_ns") > pl.col("gap_start_ns")).select(
        *by,
        "gap_start_ns",
        gap_ns=pl.col("ts_ns") - pl.col("gap_start_ns"),
        launch_ts_ns="launch_ts_ns",
    )


def hta_population(trace: traceanalyze.Trace) -> pl.DataFrame:
    """The activities HTA keeps (see test_hta_crosscheck, difference 2)."""
    frame = activities(trace)
    steps = trace.iterations.filter(pl.col("name").str.starts_with("ProfilerStep"))
    if steps.height >= 2:
        last_end = (steps["ts_ns"] + steps["dur_ns"]).max()
        frame = frame.filter(pl.col("linked") & (pl.col("launch_ts_ns") <= last_end))
    return frame


def ours_hta_style(
    trace: traceanalyze.Trace,
) -> tuple[dict[tuple[int, str], float], dict[int, float], dict[int, float]]:
    """Per (stream, HTA category) our idle µs; per stream the total and the undecidable part."""
    gaps = activity_gaps(hta_population(trace), STREAM)
    margin = AMBIGUOUS_US * 1e3
    threshold = LAUNCH_OVERHEAD_MAX_US * 1e3
    undecided = ((pl.col("launch_ts_ns") - pl.col("gap_start_ns")).abs() < margin) | (
        (pl.col("gap_ns") - threshold).abs() < margin
    )
    host_wait = pl.col("launch_ts_ns").fill_null(0) > pl.col("gap_start_ns")
    category = (
        pl.when(host_wait)
        .then(pl.lit("host_wait"))
        .when(pl.col("gap_ns") < LAUNCH_OVERHEAD_MAX_US * 1e3)
        .then(pl.lit("kernel_wait"))
        .otherwise(pl.lit("other"))
    )
    grouped = gaps.group_by("stream", category.alias("category")).agg(pl.col("gap_ns").sum())
    per_stream = gaps.group_by("stream").agg(
        total=pl.col("gap_ns").sum(), undecided=pl.col("gap_ns").filter(undecided).sum()
    )
    return (
        {(s, c): ns / 1e3 for s, c, ns in grouped.rows()},
        {s: total / 1e3 for s, total, _ in per_stream.rows()},
        {s: u / 1e3 for s, _, u in per_stream.rows()},
    )


@pytest.mark.parametrize("path", TRACES)
def test_idle_breakdown_agrees_with_hta(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    skip_without(path)
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")
    trace = traceanalyze.load(path, cache=False)
    population = hta_population(trace).sort([*STREAM, "ts_ns"])
    overlapping = population.filter(
        pl.col("ts_ns") < (pl.col("ts_ns") + pl.col("dur_ns")).shift(1).over(STREAM)
    )
    if overlapping.height:
        pytest.skip(f"{overlapping.height} activities overlap on one stream: HTA sums negatives")
    analysis = hta_analysis(path, tmp_path / "hta")
    idle, _ = analysis.get_idle_time_breakdown(
        ranks=analysis.t.get_ranks()[:1],
        visualize=False,
        consecutive_kernel_delay=LAUNCH_OVERHEAD_MAX_US,
    )
    theirs = {
        (int(s), str(c)): float(t)
        for s, c, t in idle[["stream", "idle_category", "idle_time"]].itertuples(index=False)
    }
    mine, totals, undecided = ours_hta_style(trace)
    for stream, total in totals.items():
        hta_total = sum(us for (s, _), us in theirs.items() if s == stream)
        assert total == pytest.approx(hta_total, rel=1e-6, abs=1.0), stream
    for key in set(theirs) | set(mine):
        margin = undecided.get(key[0], 0.0) + 0.05
        assert mine.get(key, 0.0) == pytest.approx(theirs.get(key, 0.0), abs=margin), key


@pytest.mark.parametrize("path", TRACES)
def test_our_causes_refine_htas_categories(path: Path) -> None:
    skip_without(path)
    trace = traceanalyze.load(path, cache=False)
    gaps = step_model(trace).gaps
    gpu = activities(trace).select(
        "rank", next_ts_ns="ts_ns", launch_ts_ns="launch_ts_ns", linked="linked"
    )
    # Each gap's next work and its launch call's start (HTA's test), beside our cause.
    joined = gaps.sort("gap_start_ns").join_asof(
        gpu.sort("next_ts_ns"),
        left_on="gap_start_ns",
        right_on="next_ts_ns",
        by="rank",
        strategy="forward",
    )
    hta_host_wait = pl.col("linked") & (pl.col("launch_ts_ns") > pl.col("gap_start_ns"))
    assert joined.filter(hta_host_wait & (pl.col("cause") == "queued")).height == 0
    ours_queued = joined.filter(pl.col("cause") == "queued")
    assert ours_queued.filter(hta_host_wait).height == 0
    assert set(gaps["cause"].unique().to_list()) <= {
        "queued",
        "sync",
        "data_loading",
        "host",
        "launch",
        "launch_first_call",
    }
