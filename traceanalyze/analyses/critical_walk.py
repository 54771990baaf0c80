"""The walk back along the critical path: the one sequential step of the analysis.

Following "which predecessor arrived last" from an iteration's end back to its start is a
pointer chase (each step depends on the one before), which no columnar operation expresses.
So this module holds the one Python loop of the analysis, over plain lists, and keeps it short:
every per-node decision is precomputed in columns (:mod:`critical_graph`), and the loop moves
in *runs*: a stretch of one CPU thread up to the previous sync call, or a chain of stream-order
GPU activities, costs one step however many segments it spans. It emits the runs; the frame
code expands them into path segments.

Cost: one step per switch between CPU and GPU on the path, each with a binary search
(O(log n)): O(switches * log n) for an iteration, O(n log n) for the trace at most.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from traceanalyze.analyses.critical_graph import KIND_GAP, KIND_LAUNCH, KIND_SYNC

# A walk never needs more steps than this per iteration unless the graph has a cycle of
# zero-length events; the rest of the span is then a gap rather than an endless loop.
_MAX_STEPS = 1_000_000


@dataclass
class Runs:
    """What a walk emits, each with ``seq``, its position in walk (backward) order."""

    cpu: list[tuple[int, int, int, int, int, int, int]] = field(default_factory=list)
    gpu: list[tuple[int, int, int, int, int, int, int]] = field(default_factory=list)
    single: list[tuple[Any, ...]] = field(default_factory=list)
    terminal: list[tuple[int, int, int | None]] = field(default_factory=list)


class _Rank:
    """One rank's graph as Python lists, indexed by global ``seg`` / ``g``."""

    def __init__(self, segs: pl.DataFrame, gpu: pl.DataFrame) -> None:
        self.seg_start: list[int] = segs["start_ns"].to_list()
        self.seg_end: list[int] = segs["end_ns"].to_list()
        self.is_sync: list[bool] = segs["is_sync"].to_list()
        self.call_ns: list[int | None] = segs["call_ns"].to_list()
        self.prev_sync: list[int] = segs["prev_sync"].to_list()
        self.seg_name: list[str] = segs["name"].to_list()
        self.seg_base = int(segs["seg"].min() or 0) if segs.height else 0
        # Per thread: its first seg and the start times of its segments (sorted).
        self.threads: dict[int, tuple[int, list[int]]] = {}
        for (tid,), part in segs.group_by(["tid"], maintain_order=True):
            first = int(part["seg"][0]) - self.seg_base
            self.threads[int(tid)] = (first, part["start_ns"].to_list())  # type: ignore[arg-type]
        self.g_base = int(gpu["g"].min() or 0) if gpu.height else 0
        self.ts: list[int] = gpu["ts_ns"].to_list()
        self.head: list[int] = gpu["head"].to_list()
        self.choice: list[str] = gpu["choice"].to_list()
        self.launch_ts: list[int | None] = gpu["launch_ts_ns"].to_list()
        self.launch_tid: list[int | None] = gpu["launch_tid"].to_list()
        self.launch_api: list[str | None] = gpu["launch_api"].to_list()
        self.lane: list[str] = gpu.select(pl.format("stream {}", "stream"))["stream"].to_list()
        by_end = gpu.select("end_ns", "g").sort("end_ns", "g")
        self.ends_sorted: list[int] = by_end["end_ns"].to_list()
        self.g_by_end: list[int] = by_end["g"].to_list()


def walk(segs: pl.DataFrame, gpu: pl.DataFrame, bounds: pl.DataFrame) -> Runs:
    """The path of every iteration in ``bounds`` (see :func:`critical_graph.iteration_bounds`)."""
    runs = Runs()
    for (rank,), steps in bounds.group_by(["rank"], maintain_order=True):
        graph = _Rank(segs.filter(pl.col("rank") == rank), gpu.filter(pl.col("rank") == rank))
        for row in steps.iter_rows(named=True):
            _walk_iteration(graph, int(rank), row, runs)  # type: ignore[arg-type]
    return runs


def _walk_iteration(graph: _Rank, rank: int, row: dict[str, Any], runs: Runs) -> None:
    it, lo, hi = row["iteration"], row["lo_ns"], row["hi_ns"]
    tid, last_g = row["cpu_tid"], row["last_g"]
    gpu_end, cpu_end = row["gpu_end_ns"], row["cpu_end_ns"]
    on_gpu = last_g is not None and (tid is None or gpu_end > cpu_end)
    other_end = cpu_end if on_gpu else gpu_end
    margin = None if other_end is None or (on_gpu and tid is None) else hi - other_end
    runs.terminal.append((rank, it, margin))
    node: int | None = last_g - graph.g_base if on_gpu else None
    t, seq, steps = hi, 0, 0

    def single(kind: str, name: str, lane: str, start: int, end: int, margin: int | None) -> None:
        nonlocal seq
        runs.single.append((rank, it, seq, kind, name, lane, max(start, lo), end, margin))
        seq += 1

    while t > lo and steps < _MAX_STEPS:
        steps += 1
        if node is not None:  # on the GPU, at activity `node`
            head = graph.head[node] - graph.g_base
            runs.gpu.append((rank, it, seq, head + graph.g_base, node + graph.g_base, lo, t))
            seq += 1
            t = max(min(graph.ts[head], t), lo)
            launch_ts, launch_tid = graph.launch_ts[head], graph.launch_tid[head]
            if graph.choice[head] != "launch" or launch_ts is None or launch_tid is None:
                single(KIND_GAP, KIND_GAP, graph.lane[head], lo, t, None)
                break
            start = min(launch_ts, t)
            single(KIND_LAUNCH, graph.launch_api[head] or KIND_LAUNCH, f"thread {launch_tid}",
                   start, t, None)  # fmt: skip
            t, tid, node = max(start, lo), launch_tid, None
            continue
        thread = graph.threads.get(tid)
        lane = f"thread {tid}"
        j = -1 if thread is None else thread[0] + bisect_left(thread[1], t) - 1
        if thread is None or j < thread[0]:
            single(KIND_GAP, KIND_GAP, lane, lo, t, None)
            break
        if graph.seg_end[j] < t:
            single(KIND_GAP, KIND_GAP, lane, graph.seg_end[j], t, None)
            t = graph.seg_end[j]
        if graph.is_sync[j]:
            call_ns = graph.call_ns[j]
            k = bisect_right(graph.ends_sorted, t) - 1
            if k >= 0 and call_ns is not None and graph.ends_sorted[k] > call_ns:
                end = graph.ends_sorted[k]
                single(KIND_SYNC, graph.seg_name[j], lane, end, t, end - call_ns)
                t, node = max(end, lo), graph.g_by_end[k] - graph.g_base
                continue
            single(KIND_SYNC, graph.seg_name[j], lane, graph.seg_start[j], t, None)
            t = graph.seg_start[j]
            continue
        # Back along the thread to the previous sync call, or to the iteration's start.
        at_lo = thread[0] + max(bisect_right(thread[1], lo) - 1, 0)
        first = max(graph.prev_sync[j] + 1 - graph.seg_base, at_lo)
        runs.cpu.append((rank, it, seq, first + graph.seg_base, j + graph.seg_base, lo, t))
        seq += 1
        t = max(graph.seg_start[first], lo)
        if first == thread[0] and t > lo:
            single(KIND_GAP, KIND_GAP, lane, lo, t, None)
            break
    if t > lo:
        single(KIND_GAP, KIND_GAP, "", lo, t, None)
