"""The walk back along the critical path: the one sequential step of the analysis.

Following "which predecessor arrived last" from an iteration's end back to its start is a
pointer chase (each step depends on the one before), which no columnar operation expresses.
So this module holds the one Python loop of the analysis, over lists and arrays, and keeps it short:
every per-node decision is precomputed in columns (:mod:`critical_graph`,
:mod:`critical_threads`), and the loop moves in *runs*: a stretch of one CPU thread up to the
previous sync call or crossing to another thread, or a chain of stream-order GPU activities,
costs one step however many segments it spans. It emits the runs; the frame code expands them
into path segments.

Cost: one step per switch between CPU and GPU on the path, each with a binary search
(O(log n)): O(switches * log n) for an iteration, O(n log n) for the trace at most.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import polars as pl

from traceanalyze.analyses.between.critical_graph import (
    KIND_GAP,
    KIND_LAUNCH,
    KIND_SYNC,
    STREAM_LANE,
    THREAD_LANE,
)

# A walk never needs more steps than this per iteration unless the graph has a cycle of
# zero-length events; the rest of the span is then a gap rather than an endless loop.
_MAX_STEPS = 1_000_000


@dataclass
class Runs:
    """What a walk emits, each with ``seq``, its position in walk (backward) order."""

    cpu: list[tuple[int, int, int, int, int, int, int]] = field(default_factory=list)
    gpu: list[tuple[int, int, int, int, int, int, int]] = field(default_factory=list)
    single: list[tuple[Any, ...]] = field(default_factory=list)
    # Per iteration: its end, the margin to the other side's end and where that side's chain
    # joins the CPU.
    terminal: list[tuple[Any, ...]] = field(default_factory=list)
    # Per crossing to another thread: where, the margin to the left thread's own predecessor
    # and where that thread joins the path again (the same fields as ``terminal``).
    crossings: list[tuple[Any, ...]] = field(default_factory=list)


class _Rank:
    """One rank's graph as arrays and columns, indexed by ``seg`` / ``g`` minus the rank's first."""

    def __init__(
        self,
        segs: pl.DataFrame,
        gpu: pl.DataFrame,
        cpu: pl.DataFrame,
        syncs: pl.Series,
        edges: pl.DataFrame,
    ) -> None:
        self.seg_base = _first(segs["seg"])
        # Arrays (no copy), not lists: a walk reads a few of a thread's many segments, and
        # turning every segment into a Python int cost more than the walk.
        self.seg_start = _ints(segs["start_ns"])
        self.seg_end = _ints(segs["end_ns"])
        # Sync calls are few: their pieces' start and name by local index.
        mine = segs.filter(pl.col("owner").is_in(syncs.implode())) if len(syncs) else segs.clear()
        owners = mine["owner"]
        self.syncs: dict[int, tuple[int, str]] = {
            seg: (call, name)
            for seg, call, name in zip(  # sync pieces: a few
                (mine["seg"] - self.seg_base).to_list(),
                cpu["ts_ns"].gather(owners).to_list(),
                cpu["name"].gather(owners).to_list(),
                strict=True,
            )
        }
        self.sync_segs = sorted(self.syncs)
        self.own = _own_activities(mine, cpu, gpu)
        # Per thread: the local indices of its first and last segment (rows are sorted by
        # thread, so a thread's pieces are one run).
        tids = segs["tid"].rle().struct.unnest()
        lasts = tids["len"].cast(pl.Int64).cum_sum() - 1
        self.threads: dict[int, tuple[int, int]] = {
            tid: (last - length + 1, last)
            for tid, length, last in zip(  # one per thread
                tids["value"].to_list(), tids["len"].to_list(), lasts.to_list(), strict=True
            )
        }
        self.g_base = _first(gpu["g"])
        # Arrays and columns, not lists: a walk reads the activities where it switches sides
        # (a CPU-bound step hardly ever), and listing every activity cost more than the walk.
        self.ts = _ints(gpu["ts_ns"])
        self.head = _ints(gpu["head"])
        self.launch_chosen = (gpu["choice"] == "launch").to_numpy()
        self.wait_chosen = (gpu["choice"] == "wait").to_numpy()
        self.waited = gpu["waited_g"]
        self.waited_end = gpu["waited_end_ns"]
        self.launch_ts = gpu["launch_ts_ns"]
        self.launch_tid = gpu["launch_tid"]
        self.launch_api = gpu["launch_api"]
        self.stream = gpu["stream"]
        self.end = _ints(gpu["end_ns"])
        by_end = gpu.select("end_ns", "g").sort("end_ns", "g")
        self.ends_sorted = _ints(by_end["end_ns"])
        self.g_by_end = _ints(by_end["g"])
        self.edges = _thread_edges(edges)

    def lane(self, g: int) -> str | None:
        """The lane of local activity ``g``: its stream's."""
        stream = self.stream[g]
        return None if stream is None else f"{STREAM_LANE}{stream}"

    def last_edge(self, tid: int, t: int) -> tuple[int, int, int | None] | None:
        """The latest crossing out of thread ``tid`` a walk back from ``t`` meets: a fork at or
        before ``t``, a join before it (a join at ``t`` itself would send the walk back and
        forth between two threads at one instant). (time, thread, margin) or None."""
        edges = self.edges.get(tid)
        if edges is None:
            return None
        at, fork, to, margin, known = edges
        k = int(np.searchsorted(at, t, side="right")) - 1
        while k >= 0 and at[k] == t and not fork[k]:
            k -= 1
        if k < 0:
            return None
        return int(at[k]), int(to[k]), int(margin[k]) if known[k] else None

    def after_sync(self, j: int, first_seg: int) -> int:
        """The local index just after the nearest sync piece at or before ``j`` on its thread
        (whose first piece is ``first_seg``), else ``first_seg``: a walk back stops there."""
        k = bisect_right(self.sync_segs, j) - 1
        if k >= 0 and self.sync_segs[k] >= first_seg:
            return self.sync_segs[k] + 1
        return first_seg


def _own_activities(mine: pl.DataFrame, cpu: pl.DataFrame, gpu: pl.DataFrame) -> dict[int, int]:
    """Per sync piece (``mine``: seg, owner; keyed by ``seg``), the local index of the GPU
    activity its call put on the GPU itself (a blocking copy's copy; the last to end, where
    there are several), none for a synchronize call. ``gpu`` is one rank's (its ``g`` less
    the first is the local index)."""
    calls = mine.select("seg", correlation=cpu["correlation"].gather(mine["owner"])).drop_nulls()
    if not calls.height:
        return {}
    own = (
        gpu.select("g", "end_ns", "correlation")
        .join(calls, on="correlation")
        .sort("end_ns")
        .group_by("seg")
        .agg(pl.col("g").last())
    )
    g_base = _first(gpu["g"])
    return {
        int(seg): int(g) - g_base
        for seg, g in zip(own["seg"].to_list(), own["g"].to_list(), strict=True)  # a few
    }


def _thread_edges(edges: pl.DataFrame) -> dict[int, tuple[Any, ...]]:
    """Per thread, its crossings (critical_threads.EDGE_SCHEMA) as arrays sorted by time."""
    found: dict[int, tuple[Any, ...]] = {}
    for (tid,), mine in edges.group_by(["tid"]):  # one per thread that crosses
        order = np.argsort(_ints(mine["at_ns"]), kind="stable")
        found[cast(int, tid)] = (
            _ints(mine["at_ns"])[order],
            mine["fork"].to_numpy()[order],
            _ints(mine["to_tid"])[order],
            _ints(mine["margin_ns"].fill_null(0))[order],
            mine["margin_ns"].is_not_null().to_numpy()[order],
        )
    return found


def _ints(column: pl.Series) -> npt.NDArray[np.int64]:
    return column.cast(pl.Int64).to_numpy()


def _left(values: npt.NDArray[np.int64], x: int, lo: int, hi: int) -> int:
    """``bisect_left(values, x, lo, hi)``."""
    return lo + int(np.searchsorted(values[lo:hi], x, side="left"))


def _right(values: npt.NDArray[np.int64], x: int, lo: int, hi: int) -> int:
    """``bisect_right(values, x, lo, hi)``."""
    return lo + int(np.searchsorted(values[lo:hi], x, side="right"))


def _first(rows: pl.Series) -> int:
    """The first row's value (rows are sorted, so the smallest); 0 without rows."""
    return int(rows[0]) if len(rows) else 0


def walk(
    segs: pl.DataFrame,
    gpu: pl.DataFrame,
    bounds: pl.DataFrame,
    cpu: pl.DataFrame,
    syncs: pl.Series,
    edges: pl.DataFrame,
) -> Runs:
    """The path of every iteration in ``bounds`` (see :func:`critical_graph.iteration_bounds`);
    ``cpu`` is the trace's cpu frame (``op_id`` its row), ``syncs`` its blocking calls'
    ``op_id`` (:func:`critical_graph.sync_calls`) and ``edges`` its crossings between threads
    (:func:`critical_threads.thread_edges`)."""
    runs = Runs()
    for (rank,), steps in bounds.group_by(["rank"], maintain_order=True):
        mine = _of_rank(segs, rank), _of_rank(gpu, rank), _of_rank(edges, rank)
        graph = _Rank(mine[0], mine[1], cpu, syncs, mine[2])
        for row in steps.iter_rows(named=True):  # one walk per iteration (walks are sequential)
            _Walker(graph, cast(int, rank), row, runs).run()
    return runs


def _of_rank(frame: pl.DataFrame, rank: object) -> pl.DataFrame:
    """The rows of ``rank``: the frame itself when it holds no other (a copy saved)."""
    ranks = frame["rank"]
    if ranks.null_count() == 0 and ranks.min() == rank and ranks.max() == rank:
        return frame
    return frame.filter(pl.col("rank") == rank)


class _Walker:
    """One iteration's walk: the current time ``t`` and place (a GPU activity or a thread)."""

    def __init__(self, graph: _Rank, rank: int, row: dict[str, Any], runs: Runs) -> None:
        self.graph, self.rank, self.runs = graph, rank, runs
        self.it, self.lo, self.t = row["iteration"], row["lo_ns"], row["hi_ns"]
        self.tid: int | None = row["cpu_tid"]
        last_g, gpu_end, cpu_end = row["last_g"], row["gpu_end_ns"], row["cpu_end_ns"]
        on_gpu = last_g is not None and (self.tid is None or gpu_end > cpu_end)
        other_end = cpu_end if on_gpu else gpu_end
        margin = None if other_end is None or self.tid is None else self.t - other_end
        # Nodes whose other predecessor is a thread wait here for the time the path (walked
        # backward) reaches that thread again: up to there both chains move together.
        self.pending: dict[int, list[tuple[list[Any], int]]] = {}
        tau = None
        if last_g is not None and not on_gpu:
            head = int(graph.head[last_g - graph.g_base]) - graph.g_base
            tau = graph.launch_ts[head]
        runs.terminal.append((rank, self.it, self.t, margin, tau))
        if on_gpu and self.tid is not None:
            self.pending.setdefault(self.tid, []).append((runs.terminal, len(runs.terminal) - 1))
        self.node: int | None = last_g - graph.g_base if on_gpu else None
        # The last GPU activity when the path ends on the CPU: if the path passes through it
        # (a sync), the GPU's end moves with the path up to that activity's end.
        self.last_gpu = None if on_gpu or last_g is None else (last_g - graph.g_base, gpu_end)
        self.seq = 0

    def _reached(self, tid: int) -> None:
        """The walk reached thread ``tid`` at ``t``: the join point of the nodes waiting on it."""
        for records, index in self.pending.pop(tid, []):
            records[index] = (*records[index][:-1], self.t)

    def run(self) -> None:
        steps, going = 0, True
        while going and self.t > self.lo and steps < _MAX_STEPS:
            steps += 1
            going = self._gpu_step() if self.node is not None else self._cpu_step()
        if self.t > self.lo:
            self._single(KIND_GAP, KIND_GAP, "", self.lo, None)

    def _single(
        self,
        kind: str,
        name: str,
        lane: str | None,
        start: int,
        margin: int | None,
        tau: int | None = None,
    ) -> None:
        """A segment from ``start`` to the current time; the walk moves to its start."""
        start = max(min(start, self.t), self.lo)
        record = (self.rank, self.it, self.seq, kind, name, lane, start, self.t, margin, tau)
        self.runs.single.append(record)
        self.seq += 1
        self.t = start

    def _run(
        self,
        into: list[tuple[int, int, int, int, int, int, int]],
        a: int,
        b: int,
        bottom: int | None = None,
    ) -> None:
        """Rows ``a`` to ``b`` (segments or activities), clipped to ``bottom`` (default: the
        window's start) and the current time."""
        into.append(
            (self.rank, self.it, self.seq, a, b, self.lo if bottom is None else bottom, self.t)
        )
        self.seq += 1

    def _gpu_step(self) -> bool:
        """Back along the stream-order run ending at the current activity, then to the
        activity on another stream it waited for, or to its launch."""
        graph, node = self.graph, self.node
        assert node is not None
        head = int(graph.head[node]) - graph.g_base
        self._run(self.runs.gpu, head + graph.g_base, node + graph.g_base)
        if self.last_gpu is not None and head <= self.last_gpu[0] <= node:
            terminal = self.runs.terminal
            terminal[-1] = (*terminal[-1][:-1], self.last_gpu[1])
            self.last_gpu = None
        self.t = max(min(int(graph.ts[head]), self.t), self.lo)
        waited, waited_end = graph.waited[head], graph.waited_end[head]
        if graph.wait_chosen[head] and waited is not None and waited_end is not None:
            # The stream waited for an activity on another: on to that one, across streams.
            self._single(KIND_GAP, KIND_GAP, graph.lane(head), waited_end, None)
            self.node = waited - graph.g_base
            return True
        launch_ts, launch_tid = graph.launch_ts[head], graph.launch_tid[head]
        if not graph.launch_chosen[head] or launch_ts is None or launch_tid is None:
            self._single(KIND_GAP, KIND_GAP, graph.lane(head), self.lo, None)
            return False
        api = graph.launch_api[head] or KIND_LAUNCH
        self._single(KIND_LAUNCH, api, f"{THREAD_LANE}{launch_tid}", launch_ts, None)
        self.tid, self.node = launch_tid, None
        self._reached(launch_tid)
        return True

    def _cpu_step(self) -> bool:
        """Back along the thread to the previous sync call or crossing from another thread (or
        the iteration's start)."""
        graph, lane = self.graph, f"{THREAD_LANE}{self.tid}"
        thread = None if self.tid is None else graph.threads.get(self.tid)
        if thread is None or self.tid is None:
            self._single(KIND_GAP, KIND_GAP, lane, self.lo, None)
            return False
        edge = graph.last_edge(self.tid, self.t)
        if edge is not None and edge[0] == self.t > self.lo:  # a fork right here
            self._cross(*edge)
            return True
        first_seg, last_seg = thread
        j = _left(graph.seg_start, self.t, first_seg, last_seg + 1) - 1
        if j < first_seg:
            self._single(KIND_GAP, KIND_GAP, lane, self.lo, None)
            return False
        seg_end = int(graph.seg_end[j])
        if seg_end < self.t:
            self._single(KIND_GAP, KIND_GAP, lane, seg_end, None)
        if j in graph.syncs:
            self._sync(j, lane)
            return True
        at_lo = max(_right(graph.seg_start, self.lo, first_seg, j + 1) - 1, first_seg)
        first = max(graph.after_sync(j, first_seg), at_lo)
        if edge is not None and edge[0] > self.lo and edge[0] >= graph.seg_start[first]:
            # Another thread's work arrived last here: along this one only back to it.
            at = edge[0]
            k = _right(graph.seg_start, at, first, j + 1) - 1
            self._run(self.runs.cpu, k + graph.seg_base, j + graph.seg_base, at)
            self.t = at
            self._cross(*edge)
            return True
        self._run(self.runs.cpu, first + graph.seg_base, j + graph.seg_base)
        self.t = max(int(graph.seg_start[first]), self.lo)
        if first == first_seg and self.t > self.lo:
            self._single(KIND_GAP, KIND_GAP, lane, self.lo, None)
            return False
        return True

    def _cross(self, at: int, to_tid: int, margin: int | None) -> None:
        """Over to thread ``to_tid`` at ``at`` (the current time): a crossing is a node whose
        other predecessor, this thread's own, was ready ``margin`` earlier and joins the path
        where the walk reaches this thread again."""
        assert self.tid is not None
        crossings = self.runs.crossings
        crossings.append((self.rank, self.it, at, margin, None))
        self.pending.setdefault(self.tid, []).append((crossings, len(crossings) - 1))
        self.t, self.tid = at, to_tid
        self._reached(to_tid)

    def _sync(self, j: int, lane: str) -> None:
        """A blocking call: it waited for the activity it put on the GPU itself, where it has
        one that ended while it ran (a blocking copy waits for its copy, whatever ends on
        other streams meanwhile), else for the GPU activity that ended last while it ran (a
        synchronize call waits for all the work before it)."""
        graph = self.graph
        call_ns, name = graph.syncs[j]
        own = graph.own.get(j + graph.seg_base)
        if own is not None and call_ns < graph.end[own] <= self.t:
            node: int | None = own
        else:
            k = int(np.searchsorted(graph.ends_sorted, self.t, side="right")) - 1
            ok = k >= 0 and graph.ends_sorted[k] > call_ns
            node = int(graph.g_by_end[k]) - graph.g_base if ok else None
        if node is None:
            self._single(KIND_SYNC, name, lane, int(graph.seg_start[j]), None)
            return
        end = int(graph.end[node])
        self._single(KIND_SYNC, name, lane, end, end - call_ns)
        if self.tid is not None:
            waiting = self.pending.setdefault(self.tid, [])
            waiting.append((self.runs.single, len(self.runs.single) - 1))
        self.node = node
