"""`critical-path` across CPU threads: the autograd engine's backward ops on the path.

Micro traces with the exact path (times in microseconds, tests/micro.py) and the exact edges
between threads; real training traces where the engine runs on its own thread.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import traceanalyze
from tests.conftest import CORPUS_TRACES, PUBLIC_TRACES, SHARED, skip_without
from tests.micro import annotation, call, kernel, op, write_trace
from traceanalyze.analyses.between.critical_graph import cpu_segments
from traceanalyze.analyses.between.critical_path import (
    NO_SYNC,
    UNLINKED_ENGINE,
    CriticalPath,
    critical_path,
)
from traceanalyze.analyses.between.critical_threads import EDGE_SCHEMA, thread_edges
from traceanalyze.analyses.iterations import counted

Event = dict[str, Any]
MAIN, ENGINE = 1, 2
EVALUATE = "autograd::engine::evaluate_function: "
SGEMM = "ampere_sgemm_128x64_nn"


def path_of(folder: Path, events: list[Event]) -> CriticalPath:
    return critical_path(traceanalyze.load(write_trace(folder, events), cache=False))


def edges_of(folder: Path, events: list[Event]) -> pl.DataFrame:
    trace = counted(traceanalyze.load(write_trace(folder, events), cache=False))
    return thread_edges(trace, cpu_segments(trace)).edges.sort("tid", "at_ns")


def segments(path: CriticalPath) -> list[tuple[str, str, str, float, float]]:
    """(kind, name, lane, start, end) of each path segment, in µs."""
    frame = path.segments.select(
        "kind", "name", "lane", start=pl.col("start_ns") / 1e3, end=pl.col("end_ns") / 1e3
    )
    return [tuple(row) for row in frame.iter_rows()]


def edges(*rows: tuple[int, float, bool, int, float | None]) -> pl.DataFrame:
    """Expected edges: (tid, at µs, fork, to_tid, margin µs or None)."""
    return pl.DataFrame(
        [
            (0, tid, int(at * 1e3), fork, to, None if margin is None else int(margin * 1e3))
            for tid, at, fork, to, margin in rows
        ],
        schema=EDGE_SCHEMA,
        orient="row",
    )


# A training step: the forward (aten::mm, its GEMM 10-20), the loss's seed (ones_like 16-20),
# then the main thread waits in the step's self time while the engine thread runs MmBackward0
# (25-55, launching a GEMM at 30) and AccumulateGrad (60-70); the optimizer (80-95) follows.
# The CPU side is the longer (the GPU's span 10-90), so the path runs along the threads.
BACKWARD = [
    annotation("ProfilerStep#1", 0, 100, tid=MAIN),
    op("aten::mm", 5, 5, tid=MAIN),
    call("cudaLaunchKernel", 6, 2, 1, tid=MAIN),
    kernel(SGEMM, 10, 10, 1),
    op("aten::ones_like", 16, 4, tid=MAIN),
    op(EVALUATE + "MmBackward0", 25, 30, tid=ENGINE),
    op("aten::mm", 27, 20, tid=ENGINE),
    call("cudaLaunchKernel", 30, 3, 2, tid=ENGINE),
    kernel(SGEMM, 33, 20, 2),
    op(EVALUATE + "torch::autograd::AccumulateGrad", 60, 10, tid=ENGINE),
    annotation("Optimizer.step#SGD.step", 80, 15, tid=MAIN),
    call("cudaLaunchKernel", 82, 2, 3, tid=MAIN),
    kernel("multi_tensor_apply_kernel", 85, 5, 3),
]
# Main's marks (where it starts or ends something): 0, 5, 6, 8, 10, 16, 20, 80, 82, 84, 95,
# 100. The engine's two tasks lie between 20 and 80 with the engine idle at both: a burst.
# Fork main -> engine at its first start (25, no earlier engine event: no margin); joins
# engine -> main at each task's end (55, 70), main ready since 20.
BACKWARD_EDGES = edges((MAIN, 55, False, ENGINE, 35), (MAIN, 70, False, ENGINE, 50),
                       (ENGINE, 25, True, MAIN, None))  # fmt: skip
T1, T2 = f"thread {MAIN}", f"thread {ENGINE}"
BACKWARD_PATH = [
    ("annotation", "ProfilerStep#1", T1, 0, 5),
    ("cpu_op", "aten::mm", T1, 5, 6),
    ("launch", "cudaLaunchKernel", T1, 6, 8),
    ("cpu_op", "aten::mm", T1, 8, 10),
    ("annotation", "ProfilerStep#1", T1, 10, 16),
    ("cpu_op", "aten::ones_like", T1, 16, 20),
    ("annotation", "ProfilerStep#1", T1, 20, 25),  # calling backward, the engine waking
    ("cpu_op", EVALUATE + "MmBackward0", T2, 25, 27),
    ("cpu_op", "aten::mm", T2, 27, 30),
    ("launch", "cudaLaunchKernel", T2, 30, 33),
    ("cpu_op", "aten::mm", T2, 33, 47),
    ("cpu_op", EVALUATE + "MmBackward0", T2, 47, 55),
    ("gap", "gap", T2, 55, 60),
    ("cpu_op", EVALUATE + "torch::autograd::AccumulateGrad", T2, 60, 70),
    ("annotation", "ProfilerStep#1", T1, 70, 80),  # backward returning
    ("annotation", "Optimizer.step#SGD.step", T1, 80, 82),
    ("launch", "cudaLaunchKernel", T1, 82, 84),
    ("annotation", "Optimizer.step#SGD.step", T1, 84, 95),
    ("annotation", "ProfilerStep#1", T1, 95, 100),
]


def test_the_backward_runs_on_the_engine_thread_on_the_path(tmp_path: Path) -> None:
    assert_frame_equal(edges_of(tmp_path, BACKWARD), BACKWARD_EDGES)
    path = path_of(tmp_path, BACKWARD)
    assert path.span_us_per_iter == path.length_us_per_iter == 100
    assert segments(path) == BACKWARD_PATH
    assert path.by_thread.rows() == [(0, MAIN, False, 55.0), (0, ENGINE, True, 45.0)]
    assert path.notes == (NO_SYNC,)  # nothing about the engine's thread: it is linked


# The step syncs after the backward (cudaDeviceSynchronize 50-120) on the GEMM the engine
# launched (15-115): the path runs main's forward, crosses to the engine thread at its first
# task (10), takes its launch to the GEMM, and returns to main through the sync.
SYNC_AFTER_BACKWARD = [
    annotation("ProfilerStep#1", 0, 125, tid=MAIN),
    op("aten::ones_like", 2, 3, tid=MAIN),
    op(EVALUATE + "MmBackward0", 10, 20, tid=ENGINE),
    call("cudaLaunchKernel", 12, 3, 1, tid=ENGINE),
    kernel(SGEMM, 15, 100, 1),
    op(EVALUATE + "torch::autograd::AccumulateGrad", 35, 5, tid=ENGINE),
    call("cudaDeviceSynchronize", 50, 70, 0, tid=MAIN),
]


def test_a_backward_kernel_the_step_syncs_on_is_on_the_path(tmp_path: Path) -> None:
    path = path_of(tmp_path, SYNC_AFTER_BACKWARD)
    assert path.span_us_per_iter == path.length_us_per_iter == 125
    assert segments(path) == [
        ("annotation", "ProfilerStep#1", T1, 0, 2),
        ("cpu_op", "aten::ones_like", T1, 2, 5),
        ("annotation", "ProfilerStep#1", T1, 5, 10),
        ("cpu_op", EVALUATE + "MmBackward0", T2, 10, 12),
        ("launch", "cudaLaunchKernel", T2, 12, 15),
        ("kernel:gemm", SGEMM, "stream 7", 15, 115),
        ("sync_wait", "cudaDeviceSynchronize", T1, 115, 120),
        ("annotation", "ProfilerStep#1", T1, 120, 125),
    ]
    # Freeing the GEMM, the sync returns once main reaches it (50): 65 us shorter.
    slack = dict(path.items.select("name", "slack_us_per_iter").iter_rows())
    assert slack[SGEMM] == 65


def test_a_thread_of_runtime_calls_alone_is_no_waiter(tmp_path: Path) -> None:
    # NCCL's watchdog polls cudaEventQuery; between two polls (23-75) it is idle around the
    # engine's burst, more tightly than main (20-80), but it hands the engine no work.
    watchdog = [call("cudaEventQuery", 22, 1, 0, tid=3), call("cudaEventQuery", 75, 1, 0, tid=3)]
    assert_frame_equal(edges_of(tmp_path, [*BACKWARD, *watchdog]), BACKWARD_EDGES)


def test_the_tightest_waiter_gets_the_burst(tmp_path: Path) -> None:
    # A data loader thread (pinning 1-4 and 90-96) is idle around the burst too, but over a
    # longer wait (4-90) than main's (20-80): the engine's work is main's.
    loader = [op("aten::pin_memory", 1, 3, tid=4), op("aten::pin_memory", 90, 6, tid=4)]
    assert_frame_equal(edges_of(tmp_path, [*BACKWARD, *loader]), BACKWARD_EDGES)


def test_no_edges_where_main_works_during_the_backward(tmp_path: Path) -> None:
    # Main runs an op (40-45) while the engine's first task runs: it did not wait, and the
    # engine was busy when main's wait after that op began (45): no burst, the path as before.
    busy = [*BACKWARD, op("aten::add", 40, 5, tid=MAIN)]
    assert edges_of(tmp_path, busy).is_empty()
    path = path_of(tmp_path, busy)
    assert {lane for *_, lane, _, _ in segments(path)} == {T1}
    assert path.notes == (NO_SYNC, UNLINKED_ENGINE.format(tid=ENGINE))


def test_a_wait_inside_a_runtime_call_is_no_wait_for_a_thread(tmp_path: Path) -> None:
    # The engine's tasks run while main blocks in a sync (20-80): main waits for the GPU.
    synced = [
        annotation("ProfilerStep#1", 0, 100, tid=MAIN),
        call("cudaDeviceSynchronize", 20, 60, 0, tid=MAIN),
        *BACKWARD[5:10],
    ]
    assert edges_of(tmp_path, synced).is_empty()


def test_engine_tasks_of_the_waiting_thread_are_part_of_its_wait(tmp_path: Path) -> None:
    # Main runs an AccumulateGrad from the CPU ready queue (45-50) inside its wait: not a mark.
    # The engine's first task ends inside it (47): no join there (main was busy); its second
    # ends at 58 (main waiting since 50).
    events = [
        annotation("ProfilerStep#1", 0, 100, tid=MAIN),
        op("aten::ones_like", 16, 4, tid=MAIN),
        op(EVALUATE + "torch::autograd::AccumulateGrad", 45, 5, tid=MAIN),
        op("aten::add_", 46, 3, tid=MAIN),
        op(EVALUATE + "MmBackward0", 25, 22, tid=ENGINE),
        op(EVALUATE + "AddBackward0", 53, 5, tid=ENGINE),
        annotation("Optimizer.step#SGD.step", 80, 15, tid=MAIN),
    ]
    assert_frame_equal(
        edges_of(tmp_path, events),
        edges((MAIN, 58, False, ENGINE, 8), (ENGINE, 25, True, MAIN, None)),
    )
    # Main's own task is off the path: the engine's work arrived later.
    path = path_of(tmp_path, events)
    assert [(kind, lane, start, end) for kind, _, lane, start, end in segments(path)] == [
        ("annotation", T1, 0, 16), ("cpu_op", T1, 16, 20), ("annotation", T1, 20, 25),
        ("cpu_op", T2, 25, 47), ("gap", T2, 47, 53), ("cpu_op", T2, 53, 58),
        ("annotation", T1, 58, 80), ("annotation", T1, 80, 95), ("annotation", T1, 95, 100),
    ]  # fmt: skip


def test_older_pytorch_names_its_engine_tasks_alone(tmp_path: Path) -> None:
    # Before evaluate_function frames the engine thread's top-level events were the nodes'
    # own names: the same burst.
    older = [
        {**event, "name": event["name"].removeprefix(EVALUATE)}
        if event["name"].startswith(EVALUATE)
        else event
        for event in BACKWARD
    ]
    assert_frame_equal(edges_of(tmp_path, older), BACKWARD_EDGES)


def test_a_trace_without_an_engine_thread_has_no_edges(tmp_path: Path) -> None:
    assert edges_of(tmp_path, BACKWARD[:5]).is_empty()


def test_hta_hand_made_backward_thread() -> None:
    """HTA's hand-made trace: the step (0-413,451 µs) holds `## backward ##` (254,455-362,443)
    on thread 3914, while thread 24922 runs AddmmBackward0 (331,122-331,267) with a launch."""
    trace_path = PUBLIC_TRACES / "hta_backward_thread_handmade.json"
    skip_without(trace_path)
    path = critical_path(traceanalyze.load(trace_path))
    origin_ns = 1666149715033200 * 1000
    rows = path.segments.select(
        "kind",
        "name",
        "lane",
        start=(pl.col("start_ns") - origin_ns) / 1e3,
        end=(pl.col("end_ns") - origin_ns) / 1e3,
    ).rows()
    engine = "autograd::engine::evaluate_function: AddmmBackward0"
    assert rows == [
        ("annotation", "ProfilerStep#552", "thread 3914", 0.0, 254455.0),
        ("annotation", "## backward ##", "thread 3914", 254455.0, 331122.0),
        ("cpu_op", engine, "thread 24922", 331122.0, 331124.0),
        ("cpu_op", "AddmmBackward0", "thread 24922", 331124.0, 331130.0),
        ("cpu_op", "aten::mm", "thread 24922", 331130.0, 331174.0),
        ("launch", "cudaLaunchKernel", "thread 24922", 331174.0, 331184.0),
        ("cpu_op", "aten::mm", "thread 24922", 331184.0, 331188.0),
        ("cpu_op", "AddmmBackward0", "thread 24922", 331188.0, 331226.0),
        ("cpu_op", engine, "thread 24922", 331226.0, 331267.0),
        ("annotation", "## backward ##", "thread 3914", 331267.0, 362443.0),
        ("annotation", "ProfilerStep#552", "thread 3914", 362443.0, 413451.0),
    ]


def _lanes(path: CriticalPath) -> pl.DataFrame:
    """Time on the path per lane and kind, per iteration."""
    n = path.iterations.height
    return path.segments.group_by("lane", "kind").agg(
        us_per_iter=(pl.col("end_ns") - pl.col("start_ns")).sum() / 1e3 / n
    )


def _share(path: CriticalPath, kind: str) -> float:
    by_kind: dict[str, float] = dict(path.by_kind.iter_rows())
    return by_kind.get(kind, 0.0) / path.length_us_per_iter * 100


def test_hta_nccl_rank0_backward_on_the_engine_thread() -> None:
    """DDP ResNet training, 2 ranks (rank 0): the main thread waits in `## backward ##` (102 ms
    a step) while thread 2919752 runs the backward. Before, 53.7% of the path was annotation
    self time and no backward op was on it."""
    trace_path = CORPUS_TRACES / "hta_nccl_a100_2rank_rank0.json.gz"
    skip_without(trace_path)
    path = critical_path(traceanalyze.load(trace_path))
    assert path.length_us_per_iter == pytest.approx(path.span_us_per_iter, rel=1e-12)
    assert _share(path, "annotation") < 10
    on_engine = _lanes(path).filter(pl.col("lane") == "thread 2919752")
    assert on_engine["us_per_iter"].sum() > 90_000  # of the 101.4 ms the engine works a step
    names = path.items["name"].to_list()
    assert "aten::convolution_backward" in names and "## backward ##" not in names


def test_bench_training_trace_backward_on_the_engine_thread() -> None:
    """The 175 MB bench trace (GPT-2-like training, 60 steps): the path crosses to the engine
    thread (477) every step; before, 69.9% of it was annotation self time."""
    trace_path = SHARED / "bench" / "h200_train_175mb.json.gz"
    skip_without(trace_path)
    path = critical_path(traceanalyze.load(trace_path))
    assert path.length_us_per_iter == pytest.approx(path.span_us_per_iter, rel=1e-12)
    assert _share(path, "annotation") < 30
    lanes = _lanes(path).group_by("lane").agg(pl.col("us_per_iter").sum())
    on_engine = lanes.filter(pl.col("lane") == "thread 477")["us_per_iter"].sum()
    assert on_engine > 0.4 * path.length_us_per_iter
    per_step = path.segments.filter(pl.col("lane") == "thread 477")["iteration"].n_unique()
    assert per_step == path.iterations.height
