"""`critical-path`: micro traces with the exact path, and length == span on real traces.

Times in the events are microseconds (tests/micro.py); the expected frames are too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

import traceanalyze
from tests.conftest import public_trace_files
from tests.micro import annotation, call, kernel, op, write_trace
from traceanalyze import api
from traceanalyze.analyses.between.critical_graph import _sorted_points, _step_end
from traceanalyze.analyses.between.critical_path import (
    NO_SYNC,
    CriticalPath,
    critical_path,
    path_shares,
)
from traceanalyze.analyses.iterations import counted
from traceanalyze.analyses.step.model import mean_per_iter, step_model
from traceanalyze.cli import main
from traceanalyze.render.between.critical_path import path_verdict

Event = dict[str, Any]
SGEMM = "ampere_sgemm_128x64_nn"
SOFTMAX = "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10>(float*)"
SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def path_of(folder: Path, events: list[Event]) -> CriticalPath:
    return critical_path(traceanalyze.load(write_trace(folder, events), cache=False))


def path_trace(folder: Path) -> traceanalyze.Trace:
    """The trace :func:`path_of` wrote last into ``folder``."""
    return traceanalyze.load(folder / "trace.json", cache=False)


def kinds(path: CriticalPath) -> dict[str, float]:
    return dict(path.by_kind.iter_rows())


def items(path: CriticalPath) -> pl.DataFrame:
    return path.items.select("name", "kind", "us_per_iter", "slack_us_per_iter").sort("name")


def expected_items(*rows: tuple[str, str, float, float]) -> pl.DataFrame:
    frame = pl.DataFrame(
        rows, schema=["name", "kind", "us_per_iter", "slack_us_per_iter"], orient="row"
    )
    return frame.sort("name")


# GPU-bound: two kernels back to back on one stream, launched early by a short CPU step.
# A (GEMM, 10-60) waits for its launch at 6; B (softmax, 60-100) for A (its launch was at 21).
# The GPU's span (10-100, 90 us) is longer than the step's (0-50): the iteration's window runs
# to the GPU's end, from the step's start (the GPU ran nothing before A), as its wall time
# does (accounting), and the path is the CPU up to A's launch (10 us), then A and B.
GPU_BOUND = [
    annotation("ProfilerStep#1", 0, 50),
    op("aten::mm", 5, 10),
    call("cudaLaunchKernel", 6, 2, 1),
    kernel(SGEMM, 10, 50, 1),
    op("aten::softmax", 20, 10),
    call("cudaLaunchKernel", 21, 2, 2),
    kernel(SOFTMAX, 60, 40, 2),
]


def test_gpu_bound_path_runs_through_its_kernels(tmp_path: Path) -> None:
    path = path_of(tmp_path, GPU_BOUND)
    assert path.span_us_per_iter == path.length_us_per_iter == 100
    assert path.span_us_per_iter == mean_per_iter(counted(path_trace(tmp_path)), "wall_us")
    # The step's annotation until aten::mm (5), the op until its launch (1), the launch until
    # A starts (4).
    assert kinds(path) == {
        "annotation": 5,
        "cpu_op": 1,
        "launch": 4,
        "kernel:gemm": 50,
        "kernel:softmax": 40,
    }
    # Free the GEMM and B starts once its own launch (21) has come: 39 us shorter. Free the
    # softmax and the step ends with A at 60 (its CPU side ended at 50): 40 us shorter.
    assert_frame_equal(
        items(path),
        expected_items(
            ("ProfilerStep#1", "annotation", 5.0, 5.0),
            (SGEMM, "kernel:gemm", 50.0, 39.0),
            ("aten::mm", "cpu_op", 1.0, 1.0),
            ("cudaLaunchKernel", "launch", 4.0, 4.0),
            (SOFTMAX, "kernel:softmax", 40.0, 40.0),
        ),
    )
    # One step, GPU-bound by 20 points: the step model's verdict on that step alone, and the
    # path's make-up.
    assert path_verdict(path).startswith("GPU-bound; the critical path is 90% GPU work")


# CPU-bound: two ops with short kernels; the step's CPU side ends last (100) after the last
# kernel (95-98). The path stays on the CPU thread: step self time 25, ops 70, launches 5.
CPU_BOUND = [
    annotation("ProfilerStep#1", 0, 100),
    op("aten::add", 10, 30),
    call("cudaLaunchKernel", 12, 2, 1),
    kernel(SOFTMAX, 20, 5, 1),
    op("aten::mul", 50, 45),
    call("cudaLaunchKernel", 90, 3, 2),
    kernel(SGEMM, 95, 3, 2),
]


def test_cpu_bound_path_runs_through_ops_and_launches(tmp_path: Path) -> None:
    path = path_of(tmp_path, CPU_BOUND)
    assert path.span_us_per_iter == path.length_us_per_iter == 100
    assert kinds(path) == {"cpu_op": 70, "annotation": 25, "launch": 5}
    # Freeing aten::mul moves the last kernel's launch too (its 40 us before the launch), so
    # all 42 us go. The step's self time after that launch (5 us) and the last launch call
    # (3 us) move only the CPU's end, which binds 2 us later on the kernel's end (98): 25 - 5
    # + 2 and 5 - 3 + 2. The kernels are off the path.
    assert_frame_equal(
        items(path),
        expected_items(
            ("aten::mul", "cpu_op", 42.0, 42.0),
            ("aten::add", "cpu_op", 28.0, 28.0),
            ("ProfilerStep#1", "annotation", 25.0, 22.0),
            ("cudaLaunchKernel", "launch", 5.0, 4.0),
        ),
    )
    assert path_verdict(path).startswith("cannot tell; the critical path is 0% GPU work and 100%")


def test_a_zero_duration_op_owns_no_time(tmp_path: Path) -> None:
    # Kineto writes ops of 0 us (aten::as_strided, ...). Its end sorts before its start at
    # the same time, so it must not be taken as still open: the step's self time after it
    # (45-50) stays the step's (new_htadiff_control_a100_rank3 put 23 ms per step of an idle
    # backward thread on a 0 us aten::as_strided).
    path = path_of(tmp_path, [*CPU_BOUND, op("aten::as_strided", 45, 0)])
    assert kinds(path) == {"cpu_op": 70, "annotation": 25, "launch": 5}
    assert "aten::as_strided" not in path.items["name"].to_list()


# A sync edge: the CPU launches a 50 us kernel at 2-4 (it runs 5-55) and blocks in
# cudaDeviceSynchronize 10-58; the sync returns 3 us after the kernel ends, then 58-60 ends the
# step. Path: 0-2 step, launch 2-5, kernel 5-55, sync wait 55-58, step 58-60.
SYNC = [
    annotation("ProfilerStep#1", 0, 60),
    call("cudaLaunchKernel", 2, 2, 1),
    kernel(SGEMM, 5, 50, 1),
    call("cudaDeviceSynchronize", 10, 48, 0),
]


def test_sync_edge_goes_from_the_gpu_back_to_the_cpu(tmp_path: Path) -> None:
    path = path_of(tmp_path, SYNC)
    assert path.span_us_per_iter == path.length_us_per_iter == 60
    assert kinds(path) == {"kernel:gemm": 50, "annotation": 4, "launch": 3, "sync_wait": 3}
    assert_frame_equal(
        path.segments.select("kind", "lane", "start_ns", "end_ns"),
        pl.DataFrame(
            {
                "kind": ["annotation", "launch", "kernel:gemm", "sync_wait", "annotation"],
                "lane": ["thread 1", "thread 1", "stream 7", "thread 1", "thread 1"],
                "start_ns": [0, 2000, 5000, 55000, 58000],
                "end_ns": [2000, 5000, 55000, 58000, 60000],
            }
        ),
    )
    # Freeing the kernel lets the sync return once the CPU reaches it (at 10): 45 us shorter.
    slack = dict(path.items.select("kind", "slack_us_per_iter").iter_rows())
    assert slack["kernel:gemm"] == 45
    assert path.notes == ()


# A cross-stream wait (as new_tl_mi300x_resnet_actckpt: the compute stream waits for an NCCL
# all_reduce on stream 20): B, launched at 12 after A, starts at 105, 5 us after the all_reduce
# C ends at 100. Without a wait edge the path ran A, then 85 us of "gap" on stream 7 to B.
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
CROSS_STREAM = [
    annotation("ProfilerStep#1", 0, 30),
    op("aten::mm", 1, 4),
    call("cudaLaunchKernel", 2, 1, 1),
    kernel(SGEMM, 10, 10, 1),
    op("c10d::allreduce_", 5, 5),
    call("cudaLaunchKernel", 6, 1, 2),
    kernel(NCCL, 12, 88, 2, stream=20),
    op("aten::softmax", 11, 4),
    call("cudaLaunchKernel", 12, 1, 3),
    kernel(SOFTMAX, 105, 15, 3),
]  # fmt: skip


def test_a_stream_waiting_for_another_streams_kernel_puts_that_kernel_on_the_path(
    tmp_path: Path,
) -> None:
    path = path_of(tmp_path, CROSS_STREAM)
    # The window runs from the step's start (the GPU ran nothing before) to the GPU's end,
    # 0-120: B 15, the wait's release 100-105, C 12-100, C's launch from its call at 6, and the
    # CPU before it (allreduce_ from 5, mm 1-5, the step's annotation 0-1).
    assert path.span_us_per_iter == path.length_us_per_iter == 120
    assert kinds(path) == {
        "kernel:softmax": 15,
        "gap": 5,
        "kernel:communication": 88,
        "launch": 7,
        "cpu_op": 4,
        "annotation": 1,
    }
    assert "86% GPU work" in path_verdict(path)


# A cudaMemcpyAsync to pageable memory blocks until its copy is done (hta_negative_queue: a
# 147 ms call). Here the call (10-100) waits for a GEMM queued before it (10-80): the copy runs
# 85-95. The path must run through the GEMM and the copy (a sync wait), not call it 90 us of
# "launch" time on the CPU.
BLOCKING_COPY = [
    annotation("ProfilerStep#1", 0, 110),
    op("aten::mm", 2, 6),
    call("cudaLaunchKernel", 3, 2, 1),
    kernel(SGEMM, 10, 70, 1),
    op("aten::copy_", 9, 92),
    call("cudaMemcpyAsync", 10, 90, 2),
    kernel("Memcpy DtoH (Device -> Pageable)", 85, 10, 2, cat="gpu_memcpy"),
]


def test_an_async_copy_call_that_waits_for_the_gpu_is_a_sync_wait(tmp_path: Path) -> None:
    path = path_of(tmp_path, BLOCKING_COPY)
    # Back from 110: the step's tail, copy_, the call's wait after its copy (95-100), the copy,
    # the stream's 5 us between, the GEMM, its launch (3 until it starts at 10), mm, the step.
    assert kinds(path) == {
        "annotation": 11, "cpu_op": 2, "sync_wait": 5, "copy": 10, "gap": 5,
        "kernel:gemm": 70, "launch": 7,
    }  # fmt: skip


# A blocking copy waits for its own copy, not for whatever ends last meanwhile (found on
# new_htadiff_control_a100_rank3: a pageable DtoH copy's call was put on a kernel of another
# stream that ended 6 us after the copy). The copy (stream 20, 62-65) waited for the GEMM on
# stream 7 (5-35); a softmax on stream 8 (6-68) ends inside the call (10-70) but after the
# copy: it is off the path.
OWN_COPY = [
    annotation("ProfilerStep#1", 0, 100),
    call("cudaLaunchKernel", 2, 1, 1),
    kernel(SGEMM, 5, 30, 1),
    call("cudaLaunchKernel", 4, 1, 3),
    kernel(SOFTMAX, 6, 62, 3, stream=8),
    call("cudaMemcpyAsync", 10, 60, 2),
    kernel("Memcpy DtoH (Device -> Pageable)", 62, 3, 2, cat="gpu_memcpy", stream=20),
]


def test_a_blocking_copy_waits_for_its_own_copy(tmp_path: Path) -> None:
    path = path_of(tmp_path, OWN_COPY)
    assert path.span_us_per_iter == path.length_us_per_iter == 100
    assert_frame_equal(
        path.segments.select("kind", "lane", "start_ns", "end_ns"),
        pl.DataFrame(
            {
                "kind": ["annotation", "launch", "kernel:gemm", "gap", "copy", "sync_wait",
                         "annotation"],
                "lane": ["thread 1", "thread 1", "stream 7", "stream 20", "stream 20",
                         "thread 1", "thread 1"],
                "start_ns": [0, 2000, 5000, 35000, 62000, 65000, 70000],
                "end_ns": [2000, 5000, 35000, 62000, 65000, 70000, 100000],
            }
        ),
    )  # fmt: skip


def test_an_all_gpu_path_has_no_negative_cpu_share() -> None:
    # All kernels and gaps: the CPU's share, 100 minus the others, came out -1e-15 ("-0%").
    path = critical_path(traceanalyze.load(SAMPLES / "h200_graph_replay" / "naive.json.gz"))
    assert path_shares(path)[1] >= 0.0


def test_a_trace_without_sync_calls_says_so(tmp_path: Path) -> None:
    assert path_of(tmp_path, GPU_BOUND).notes == (NO_SYNC,)


def test_json_keys_and_markdown(tmp_path: Path) -> None:
    trace = write_trace(tmp_path, GPU_BOUND)
    result = CliRunner().invoke(main, ["critical-path", str(trace), "--format", "json"])
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    assert list(record) == [
        "bound",
        "bound_margin_pct",
        "bound_note",
        "span_us_per_iter",
        "length_us_per_iter",
        "by_kind",
        "by_thread",
        "items",
        "notes",
    ]
    # The CPU until the first kernel starts (10 us), then the GPU.
    assert record["by_thread"] == [
        {"rank": 0, "thread": 1, "autograd_engine": False, "us_per_iter": 10.0}
    ]
    assert sum(row["us_per_iter"] for row in record["by_kind"]) == pytest.approx(100)
    assert set(record["items"][0]) == {"name", "kind", "us_per_iter", "slack_us_per_iter"}
    top = CliRunner().invoke(main, ["critical-path", str(trace), "--format", "json", "--top", "1"])
    assert [row["name"] for row in json.loads(top.output)["items"]] == [SGEMM]
    out = tmp_path / "out" / "path.md"
    out.parent.mkdir()
    result = CliRunner().invoke(main, ["critical-path", str(trace), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "the critical path is 90% GPU work" in out.read_text()
    assert (out.parent / "path_path.png").read_bytes().startswith(b"\x89PNG")


def _traces_with_gpu() -> list[Path]:
    samples = sorted(SAMPLES.glob("*/*.json.gz"))
    return samples + public_trace_files()


@pytest.mark.parametrize("trace", _traces_with_gpu(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_length_equals_span_on_real_traces(trace: Path) -> None:
    loaded = traceanalyze.load(trace)
    if not loaded.gpu.height:
        pytest.skip("no GPU activity")
    path = api.critical_path(loaded)  # the analysis, with the verdict as the CLI gives it
    iterations = path.iterations
    assert iterations.height == counted(loaded).iterations.height  # a closing step is left out
    # Each iteration's window is as long as its wall time (the slower side's span), exactly.
    walls = step_model(counted(loaded)).steps.select("rank", "iteration", "wall_us")
    assert_frame_equal(
        iterations.select("rank", "iteration", wall_us="span_us"), walls, check_dtypes=False
    )
    assert path.span_us_per_iter == pytest.approx(
        mean_per_iter(counted(loaded), "wall_us"), rel=1e-12
    )
    assert_frame_equal(
        iterations.select(pl.col("length_us").round(3)),
        iterations.select(pl.col("span_us").round(3).alias("length_us")),
    )
    slack_within = path.items.filter(
        (pl.col("slack_us_per_iter") < 0) | (pl.col("slack_us_per_iter") > pl.col("us_per_iter"))
    )
    assert slack_within.height == 0
    # The verdict is summary's, word for word (issue 38: the commands never disagree).
    summary = api.summary(loaded)
    assert (path.bound, path.bound_margin_pct, path.bound_note) == (
        summary["bound"],
        summary["bound_margin_pct"],
        summary["bound_note"],
    )


@pytest.mark.parametrize(
    ("variant", "bound"),
    # flash (recording of 2026-12-03 22:36): 55% of the mean path is CPU time, all of it from
    # its first step (225 us on the CPU, the window), an outlier; steps 3 and 4 run along the
    # GPU (test_flash_steady_steps_run_along_the_gpu): the steps' verdict is GPU-bound, the
    # same in `summary` and `critical-path` (issue 38, item 5).
    [("naive", "GPU-bound"), ("sdpa_flash", "GPU-bound"), ("sdpa_cudnn", "CPU-bound")],
)
def test_samples_bound_side(variant: str, bound: str) -> None:
    path = SAMPLES / "h200_default" / f"{variant}.json.gz"
    found = api.critical_path(path)
    assert path_verdict(found).startswith(bound)
    assert found.bound == api.summary(path)["bound"] == bound


def test_flash_steady_steps_run_along_the_gpu() -> None:
    path = critical_path(traceanalyze.load(SAMPLES / "h200_default" / "sdpa_flash.json.gz"))
    on_gpu = path.segments.with_columns(
        gpu=pl.col("kind").str.starts_with("kernel:"), dur=pl.col("end_ns") - pl.col("start_ns")
    )
    shares = (
        on_gpu.group_by("iteration")
        .agg(gpu_pct=pl.col("dur").filter("gpu").sum() / pl.col("dur").sum() * 100)
        .sort("iteration")
    )
    # Step 2 waits on the CPU (a one-off first step): not counted, so not on the path either.
    assert shares["iteration"].to_list() == [3, 4]
    assert all(pct > 50 for pct in shares["gpu_pct"].to_list())


def _points(ranks: list[int], tids: list[int], times: list[int]) -> pl.DataFrame:
    """Start and end points as cpu_segments makes them, every sort key distinct."""
    rows = [
        (rank, tid, t, owner, order, key)
        for owner, (rank, tid, t) in enumerate(
            (r, tid, t) for r in ranks for tid in tids for t in times
        )
        for order, key in ((0, -(owner % 7)), (1, owner % 5))
    ]
    schema = {
        "rank": pl.Int32,
        "tid": pl.Int64,
        "t": pl.Int64,
        "owner": pl.Int64,
        "order": pl.Int32,
        "key": pl.Int64,
    }
    points = pl.DataFrame(rows, schema=schema, orient="row")
    return points.sample(fraction=1.0, shuffle=True, seed=7)


@pytest.mark.parametrize(
    ("tids", "times"),
    [
        ([443, 450, -1], [0, 5, 3, 1_000_000]),  # every value in its own bits
        ([1, 2**40], [0, 5, 3, 1_000_000]),  # tids too far apart: threads numbered
        ([1, 7], [0, 2**50, 3]),  # a time range beyond the packed keys: a sort by columns
    ],
)
def test_segment_points_sort_in_call_order(tids: list[int], times: list[int]) -> None:
    """Each way of sorting the points (raw values packed, threads numbered, columns) gives
    the order of a plain sort by the columns."""
    points = _points([0, 3], tids, times)
    expected = points.sort(["rank", "tid", "t", "order", "key"]).select("rank", "tid", "t", "owner")
    got = _sorted_points(points).select("rank", "tid", "t", "owner")
    assert_frame_equal(got, expected)


@pytest.mark.parametrize("other", [7, -1, 2**40])  # packed in one integer, or joined
def test_a_cpu_events_step_end_is_its_iterations(other: int) -> None:
    cpu = pl.DataFrame(
        {"rank": [0, 0, 1, 1], "iteration": [5, other, 5, None]},
        schema={"rank": pl.Int32, "iteration": pl.Int64},
    )
    steps = pl.DataFrame(
        {"rank": [0, 1, 0], "iteration": [5, 5, other], "cpu_end_ns": [10, 20, 30]},
        schema={"rank": pl.Int32, "iteration": pl.Int64, "cpu_end_ns": pl.Int64},
    )
    ends = cpu.select(_step_end(cpu, steps).alias("end"))["end"].to_list()
    assert ends == [10, 30, 20, None]
