"""Time between kernels, diff-test style: `idle` causes, `launches` (queue, delay, short
kernels) and `streams` on a handful of events with the exact expected frames.

Times in the events are microseconds, as Kineto writes them (see tests/micro.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from tests.micro import annotation, call, kernel, load, op, write_trace
from traceanalyze.analyses.between.idle import idle_breakdown
from traceanalyze.analyses.between.launches import launch_events, launch_outliers, launch_table
from traceanalyze.analyses.between.streams import stream_table
from traceanalyze.analyses.between.where import where_time_goes
from traceanalyze.analyses.kernels import kernel_table
from traceanalyze.analyses.step.model import mean_per_iter, step_model
from traceanalyze.cli import main
from traceanalyze.render.between.idle import where_time_goes_markdown

Event = dict[str, Any]


# One step of 200 us (the window: its GPU work spans only 10-130) on stream 7, six gaps:
#   [0, 10]: k1 launched 2-4, on the GPU at 10: 6 of the 10 us after its call returned -> queued
#   k1 [10, 20]; k2 launched 30-35, after k1 ended, the thread in aten::b -> [20, 40] host
#   k2 [40, 50]; the thread in cudaDeviceSynchronize 45-55 when k2 ends; k3 launched 56-58
#                                                                   -> [50, 60] sync 10 us
#   k3 [60, 70]; k4 launched 57-59 (before k3 ended)               -> [70, 72] queued 2 us
#   k4 [72, 80]; k5 launched 60-62, starts at 120 for no visible reason -> [80, 120] queued
#   k5 [120, 130]; nothing after it until the step's end            -> [130, 200] host 70 us
IDLE_EVENTS: list[Event] = [
    annotation("ProfilerStep#1", 0, 200),
    op("aten::a", 1, 4),
    call("cudaLaunchKernel", 2, 2, 1),
    kernel("k1", 10, 10, 1),
    op("aten::b", 29, 7),
    call("cudaLaunchKernel", 30, 5, 2),
    kernel("k2", 40, 10, 2),
    call("cudaDeviceSynchronize", 45, 10, 90),
    call("cudaLaunchKernel", 56, 2, 3),
    kernel("k3", 60, 10, 3),
    call("cudaLaunchKernel", 57, 2, 4),
    kernel("k4", 72, 8, 4),
    call("cudaLaunchKernel", 60, 2, 5),
    kernel("k5", 120, 10, 5),
]


def test_each_idle_cause_on_its_gap(tmp_path: Path) -> None:
    trace = load(tmp_path, IDLE_EVENTS)
    gaps = step_model(trace).gaps.sort("gap_start_ns")
    expected = pl.DataFrame(
        {
            "gap_start_ns": [0, 20_000, 50_000, 70_000, 80_000, 130_000],
            "gap_ns": [10_000, 20_000, 10_000, 2_000, 40_000, 70_000],
            "next_activity": ["k1", "k2", "k3", "k4", "k5", None],
            "cause": ["queued", "host", "sync", "queued", "queued", "host"],
        }
    )
    assert_frame_equal(gaps.select(expected.columns), expected, check_dtypes=False)
    result = idle_breakdown(trace)
    causes = pl.DataFrame(
        {
            # Every cause, each once; no launch call lasts 1 ms (a one-off call): none is
            # launch_first_call.
            "cause": ["queued", "sync", "data_loading", "host", "launch", "launch_first_call"],
            "us_per_iter": [52.0, 10.0, 0.0, 90.0, 0.0, 0.0],
            "gaps_per_iter": [3.0, 1.0, 0.0, 2.0, 0.0, 0.0],
            "share_of_idle_pct": [52 / 1.52, 10 / 1.52, 0.0, 90 / 1.52, 0.0, 0.0],
        }
    )
    assert_frame_equal(result.causes, causes)
    assert result.gpu_idle_us_per_iter == 152.0 == mean_per_iter(trace, "gpu_idle_us")
    # The CPU op under the host's gap is named beside it.
    host = result.largest_gaps.filter(pl.col("starts_at_us") == 20.0).row(0, named=True)
    assert (host["cause"], host["cpu_ops"]) == ("host", "aten::b, cudaLaunchKernel")


def test_a_gap_on_one_stream_covered_by_another_is_not_idle(tmp_path: Path) -> None:
    # Stream 7 idles from 20 to 40 but stream 8 runs 15-45: between its kernels the device
    # idles only 45-50 (5 us), ended by k2 on stream 7, whose launch returned at 35: before the
    # gap, so queued. The window is the step (0-100): 10 us before k1 (launched at 1-3, on the
    # GPU at 10: queued after its call) and 40 after k2 are idle too.
    events = [
        annotation("ProfilerStep#1", 0, 100),
        call("cudaLaunchKernel", 1, 2, 1),
        kernel("k1", 10, 10, 1),
        call("cudaLaunchKernel", 4, 2, 2),
        kernel("side", 15, 30, 2, stream=8),
        call("cudaLaunchKernel", 30, 5, 3),
        kernel("k2", 50, 10, 3),
    ]
    trace = load(tmp_path, events)
    result = idle_breakdown(trace)
    assert result.gpu_idle_us_per_iter == 55.0
    assert result.causes.filter(pl.col("us_per_iter") > 0).rows() == [
        ("queued", 15.0, 2.0, 15 / 55 * 100),
        ("host", 40.0, 1.0, 40 / 55 * 100),
    ]
    assert result.by_stream.rows() == [
        (0, None, None, "host", 40.0),  # after the step's last work: no stream ends it
        (0, 0, 7, "queued", 15.0),
    ]
    streams = stream_table(trace).select("stream", "busy_us_per_iter", "idle_us_per_iter")
    assert streams.rows() == [(8, 30.0, 0.0), (7, 20.0, 30.0)]


# A launch queue on stream 7: three launches at 1, 2, 3 us (1 us calls) run back to back
# 10-20, 20-30, 30-40; a fourth launched at 25 runs 40-42 (two started by then: k1 and k2).
QUEUE_EVENTS: list[Event] = [
    annotation("ProfilerStep#1", 0, 100),
    call("cudaLaunchKernel", 1, 1, 1),
    kernel("long", 10, 10, 1),
    call("cudaLaunchKernel", 2, 1, 2),
    kernel("long", 20, 10, 2),
    call("cudaLaunchKernel", 3, 1, 3),
    kernel("long", 30, 10, 3),
    call("cudaLaunchKernel", 25, 5, 4),
    kernel("tiny", 40, 2, 4),
]


def test_launch_queue_delay_and_short_kernels(tmp_path: Path) -> None:
    trace = load(tmp_path, QUEUE_EVENTS)
    events = launch_events(trace).select(
        "name", "launch_cpu_us", "launch_delay_us", "queue", "short"
    )
    expected = pl.DataFrame(
        {
            "name": ["long", "long", "long", "tiny"],
            "launch_cpu_us": [1.0, 1.0, 1.0, 5.0],
            "launch_delay_us": [9.0, 18.0, 27.0, 15.0],
            "queue": [0, 1, 2, 1],
            "short": [False, False, False, True],
        }
    )
    assert_frame_equal(events, expected, check_dtypes=False)
    table = launch_table(trace).select(
        "name", "count_in_iterations", "launch_cpu_us_median", "launch_delay_us_median",
        "launch_delay_us_p90", "queue_max", "short_kernels",
    )  # fmt: skip
    assert table.rows() == [("long", 3, 1.0, 18.0, 25.2, 2, 0), ("tiny", 1, 5.0, 15.0, 15.0, 1, 1)]
    assert launch_outliers(trace).height == 0


def test_kernels_name_their_stream(tmp_path: Path) -> None:
    events = [*QUEUE_EVENTS, call("cudaLaunchKernel", 50, 1, 5), kernel("tiny", 60, 2, 5, stream=9)]
    table = kernel_table(load(tmp_path, events)).select("name", "stream", "streams")
    assert sorted(table.rows()) == [("long", 7, 1), ("tiny", 7, 2)]


def test_commands_give_the_stable_keys(tmp_path: Path) -> None:
    path = write_trace(tmp_path, IDLE_EVENTS)
    runner = CliRunner()
    idle = runner.invoke(main, ["idle", str(path), "--format", "json", "--no-cache"])
    assert idle.exit_code == 0, idle.output
    record = json.loads(idle.output)
    assert sum(row["us_per_iter"] for row in record["causes"]) == record["gpu_idle_us_per_iter"]
    assert {"cause", "us_per_iter"} <= set(record["causes"][0])
    launches = runner.invoke(main, ["launches", str(path), "--format", "json", "--no-cache"])
    assert launches.exit_code == 0, launches.output
    assert {
        "name", "category", "count_in_iterations", "launch_cpu_us_median", "launch_delay_us_median",
        "launch_delay_us_p90", "short_kernels",
    } <= set(json.loads(launches.output)[0])  # fmt: skip
    streams = runner.invoke(main, ["streams", str(path), "--no-cache"])
    assert streams.exit_code == 0 and "busy µs/iter" in streams.output


def test_where_the_time_goes_names_the_largest_cause(tmp_path: Path) -> None:
    text = where_time_goes_markdown(where_time_goes(load(tmp_path, IDLE_EVENTS)))
    # The window 0-200 us, idle 152 us; the host's is 90 of the 152.
    assert "The GPU is idle 76% of the step's wall time (cannot tell)" in text
    assert "(59%) is host" in text


def test_a_report_on_one_trace_says_where_the_time_goes(tmp_path: Path) -> None:
    path = write_trace(tmp_path, IDLE_EVENTS)
    report = CliRunner().invoke(main, ["report", str(path), "--no-cache"])
    assert report.exit_code == 0, report.output
    assert "## Where the time goes" in report.output
    assert "| host |" in report.output


def test_idle_without_gpu_activity_says_so_instead_of_zero(tmp_path: Path) -> None:
    # A CPU-only step: "GPU idle time 0.00 µs" would read as a busy GPU; there is no GPU at all.
    trace = load(tmp_path, [annotation("ProfilerStep#1", 0, 100), op("aten::a", 1, 50)])
    result = idle_breakdown(trace)
    assert result.gpu_activities_per_iter == 0.0
    assert result.gpu_idle_us_per_iter == 0.0
    text = CliRunner().invoke(main, ["idle", str(tmp_path / "trace.json"), "--no-cache"]).output
    assert text.startswith("No GPU activity (kernels, copies, memsets) in the 1 counted")
    assert "GPU idle time" not in text
    (tmp_path / "gpu").mkdir()
    with_gpu = idle_breakdown(load(tmp_path / "gpu", IDLE_EVENTS))
    assert with_gpu.gpu_activities_per_iter == 5.0
