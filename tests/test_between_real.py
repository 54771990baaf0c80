"""Time between kernels on real traces: the idle causes add up to the idle time on every sample
and public trace, and the per-stream figures agree with the accounting model."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import traceanalyze
from traceanalyze.analyses.accounting import iteration_times
from traceanalyze.analyses.between.idle import idle_breakdown
from traceanalyze.analyses.between.launches import launch_events, launch_table
from traceanalyze.analyses.between.streams import stream_table
from traceanalyze.analyses.iterations import counted
from traceanalyze.analyses.step.model import mean_per_iter

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = [
    pytest.param(p, id=f"{p.parent.name}/{p.name}")
    for p in sorted((ROOT / "sample_traces").glob("h200_*/*.json.gz"))
]


def check(loaded: traceanalyze.Trace) -> None:
    trace = counted(loaded)  # the iterations that count, as every per-iteration figure
    result = idle_breakdown(loaded)
    idle_us = mean_per_iter(trace, "gpu_idle_us")
    assert result.gpu_idle_us_per_iter == pytest.approx(idle_us, rel=1e-12, abs=1e-9)
    assert result.causes["us_per_iter"].sum() == pytest.approx(idle_us, rel=1e-9, abs=1e-9)
    assert result.by_stream["us_per_iter"].sum() == pytest.approx(idle_us, rel=1e-9, abs=1e-9)
    assert (result.causes["us_per_iter"] >= 0).all()
    # Streams overlap, so their busy times add up to at least the device's, both of the work
    # the steps launched (a step's window also holds work carried in: GPT-2 eager's first
    # step runs 937 activities of the warm-up step, whose launches the profiler dropped).
    streams = stream_table(trace)
    times = iteration_times(trace)
    busy_us = float(times["own_busy_us"].sum()) / max(times.height, 1)
    assert streams["busy_us_per_iter"].sum() >= busy_us * (1 - 1e-9) - 1e-9
    assert streams["activity_us_per_iter"].sum() == pytest.approx(
        mean_per_iter(trace, "gpu_activity_us"), rel=1e-9, abs=1e-9
    )
    events = launch_events(trace)
    assert (events["queue"] >= 0).all()
    assert launch_table(trace)["count_in_iterations"].sum() == events.height


@pytest.mark.parametrize("path", SAMPLES)
def test_idle_causes_add_up_on_samples(path: Path) -> None:
    check(traceanalyze.load(path))


def test_idle_causes_add_up_on_public_traces(public_trace: Path) -> None:
    check(traceanalyze.load(public_trace))


def test_host_dominates_the_bench_optimizer_gaps() -> None:
    """The bench trace's training steps idle mostly waiting on the host (its largest gaps are
    before the optimizer's foreach kernels): a regression guard on the classification."""
    from tests.conftest import SHARED, skip_without

    path = SHARED / "bench" / "h200_train_175mb.json.gz"
    skip_without(path)
    result = idle_breakdown(traceanalyze.load(path))
    shares = dict(result.causes.select("cause", "share_of_idle_pct").rows())
    assert shares["host"] + shares["launch"] > 90
    assert result.largest_gaps["cpu_ops"].str.contains("aten::_foreach").any()
    assert pl.Series(result.largest_gaps["cause"]).is_in(["host", "launch"]).all()
