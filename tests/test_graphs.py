"""CUDA graph replays: counted per iteration, labelled, and attributed to the captured ops."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import polars as pl

from tests.micro import annotation, call, kernel, load, op
from traceanalyze.analyses.graphs import (
    GRAPH_ID,
    GRAPH_NODE_ID,
    NOT_CAPTURED,
    graph_replay,
    graph_table,
    replayed_activities,
)
from traceanalyze.analyses.summary import summary

Event = dict[str, Any]


def capture(start: float, *, region: bool = True) -> list[Event]:
    """A capture: aten::mm and aten::softmax launch a kernel each (correlations 1, 2), which
    run nothing while the stream captures; inside ``cuda_graph_capture`` unless not
    ``region``."""
    events = [
        op("aten::mm", start + 10, 20),
        call("cudaLaunchKernel", start + 15, 5, 1),
        op("aten::softmax", start + 40, 20),
        call("cudaLaunchKernel", start + 45, 5, 2),
    ]
    return [annotation("cuda_graph_capture", start, 80), *events] if region else events


def replay(step: int, start: float, correlation: int, softmax_us: float) -> list[Event]:
    """ProfilerStep#``step``: one cudaGraphLaunch replaying a GEMM and a softmax kernel."""
    return [
        annotation(f"ProfilerStep#{step}", start, 100),
        annotation("attn_fwd", start + 10, 20),
        call("cudaGraphLaunch", start + 12, 8, correlation),
        kernel("gemm_k", start + 30, 30, correlation),
        kernel("softmax_k", start + 61, softmax_us, correlation),
    ]


EVENTS: list[Event] = [
    annotation("ProfilerStep#1", 0, 100),
    *capture(5),
    *replay(2, 100, 10, 10),
    *replay(3, 200, 11, 12),
]


def test_replayed_kernels_are_attributed_to_the_captured_ops(tmp_path: Path) -> None:
    trace = load(tmp_path, EVENTS)
    rows = replayed_activities(trace).select(
        "iteration", "replay", "graph", "position", "name", "captured_op", "captured_call"
    )
    assert rows.rows() == [
        (2, 10, 1, 0, "gemm_k", "aten::mm", "cudaLaunchKernel"),
        (2, 10, 1, 1, "softmax_k", "aten::softmax", "cudaLaunchKernel"),
        (3, 11, 1, 0, "gemm_k", "aten::mm", "cudaLaunchKernel"),
        (3, 11, 1, 1, "softmax_k", "aten::softmax", "cudaLaunchKernel"),
    ]
    table = graph_table(trace).select(
        "graph", "position", "name", "captured_op", "replays_per_iter", "us_per_iter", "mean_us"
    )
    # Two iterations, two replays: the capture's step is its own kind, left out of the means
    # (was three iterations, 2/3 replay each, with the capture step averaged in).
    assert table.rows() == [
        (1, 0, "gemm_k", "aten::mm", 1.0, 30.0, 30.0),
        (1, 1, "softmax_k", "aten::softmax", 1.0, 11.0, 11.0),
    ]
    assert trace.gpu.filter(graph_replay()).height == 4
    assert summary(trace)["graph_launches_per_iter"] == 1.0


def test_a_capture_without_a_region_is_the_run_of_unlaunched_calls(tmp_path: Path) -> None:
    events = [
        op("aten::add", 0, 10),
        call("cudaLaunchKernel", 2, 3, 7),  # launched: ends the run before the capture
        kernel("add_k", 20, 5, 7),
        *capture(30, region=False),
        *replay(1, 200, 10, 10),
    ]
    rows = replayed_activities(load(tmp_path, events))
    assert rows["captured_op"].to_list() == ["aten::mm", "aten::softmax"]
    assert rows["attribution_note"].to_list() == [None, None]


def test_a_capture_that_does_not_match_leaves_the_replay_unattributed(tmp_path: Path) -> None:
    events = [*capture(0)[:3], *replay(1, 200, 10, 10)]  # one captured launch, two kernels
    rows = replayed_activities(load(tmp_path, events))
    assert rows["captured_op"].to_list() == [None, None]
    assert (
        rows["attribution_note"].to_list()
        == [
            "no capture in the trace with as many launches of the same kinds as a replay has "
            "activities"
        ]
        * 2
    )
    without = replayed_activities(load(tmp_path, replay(1, 200, 10, 10)))
    assert without["attribution_note"].to_list() == [NOT_CAPTURED] * 2


def test_graph_node_ids_order_a_replay(tmp_path: Path) -> None:
    # The loader does not read Kineto's "graph id"/"graph node id" yet: add the columns as it
    # will (Int64). The two kernels run concurrently, softmax first; node ids keep the
    # capture order, so the GEMM is still position 0 and aten::mm's.
    events = [
        annotation("ProfilerStep#1", 0, 100),
        *capture(5),
        annotation("ProfilerStep#2", 100, 100),
        call("cudaGraphLaunch", 112, 8, 10),
        kernel("gemm_k", 131, 30, 10, stream=7),
        kernel("softmax_k", 130, 10, 10, stream=8),
    ]
    trace = load(tmp_path, events)
    nodes = pl.when(pl.col("name") == "gemm_k").then(5).otherwise(6)
    with_ids = dataclasses.replace(
        trace, gpu=trace.gpu.with_columns(pl.lit(3).alias(GRAPH_ID), nodes.alias(GRAPH_NODE_ID))
    )
    rows = replayed_activities(with_ids).select("position", "name", "captured_op")
    assert rows.sort("position").rows() == [
        (0, "gemm_k", "aten::mm"),
        (1, "softmax_k", "aten::softmax"),
    ]
    by_time = replayed_activities(trace).select("position", "name", "captured_op")
    assert by_time.sort("position").rows() == [
        (0, "softmax_k", "aten::mm"),  # without node ids start time orders, wrongly here
        (1, "gemm_k", "aten::softmax"),
    ]


def test_no_graph_replays(tmp_path: Path) -> None:
    trace = load(tmp_path, [op("aten::add", 0, 10), call("cudaLaunchKernel", 1, 2, 1)])
    assert replayed_activities(trace).height == 0
    assert graph_table(trace).height == 0
    assert summary(trace)["graph_launches_per_iter"] == 0.0
