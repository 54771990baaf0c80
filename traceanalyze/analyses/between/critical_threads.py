"""The critical path's edges between CPU threads: a thread that waits while another works for it.

PyTorch's autograd engine runs backward ops on threads of its own (one per device); the thread
that called ``backward`` hands it the graph and waits until it is done, inside whatever frame
called it (a ``ProfilerStep``, a ``## backward ##`` annotation, or no frame at all). Kineto
records nothing on the waiting thread meanwhile, except the engine tasks it runs itself (the
CPU ready queue: ``AccumulateGrad`` of CPU tensors, ``GraphRoot``). Which frames are the
engine's work is data (:data:`ENGINE_FRAMES`); when a thread waits for them is read from the
times, the same way for every trace:

* a *mark* of a thread is a time where it starts or ends something other than engine frames
  (an engine frame and what it calls are transparent: running them is part of the wait);
* a *worker* is a thread whose top-level events include engine frames; a *waiter* is any
  other thread that records operators or annotations (a thread of runtime calls alone, such as
  NCCL's watchdog polling ``cudaEventQuery``, hands no work to the engine);
* a worker's *burst* for a waiter: its top-level events between two consecutive marks of the
  waiter, at least one of them an engine frame, with the worker idle at both marks (no event
  of it spans the first, which began the wait, or the second, where the waiter resumed);
* where bursts of several waiters overlap, a worker's events belong to the waiter whose wait
  (mark to mark) is the shortest around them: the thread the burst explains best.

Each burst gives two kinds of edges (EDGE_SCHEMA): a *fork* from the waiter into the worker at
the burst's first start (the worker was idle: the waiter handed it the work), and a *join*
from the worker back into the waiter at each of the burst's event ends that falls in the
waiter's wait, not inside an engine task of its own (the waiter resumed, or took a task from
the CPU ready queue, after the worker's work that came last). Walking back along a thread, the
path leaves it at the latest of them, as at a sync call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import polars as pl

from traceanalyze.analyses.between.critical_graph import Names, name_codes
from traceanalyze.link import RUNTIME_CATS
from traceanalyze.trace import Trace

Ints = npt.NDArray[np.int64]


@dataclass(frozen=True)
class EngineFrames:
    """A family of frames that are the autograd engine's work: names that start with
    ``prefix`` or match ``pattern``. A ``fallback`` family is read only in traces without a
    frame of the others (older PyTorch wrote each node's name alone)."""

    what: str
    prefix: str | None = None
    pattern: str | None = None
    fallback: bool = False


ENGINE_FRAMES = (
    EngineFrames(
        "an autograd engine task (PyTorch 1.8 and later)",
        prefix="autograd::engine::evaluate_function: ",
    ),
    EngineFrames(
        "an autograd node run by the engine under its own name (older PyTorch)",
        pattern=r"^(?:torch::autograd::[A-Za-z]+|[A-Za-z0-9_]+Backward[0-9]*)$",
        fallback=True,  # a regular expression on every name: read only where needed
    ),
)

# Cross-thread edges: on thread ``tid`` of ``rank`` the path leaves at ``at_ns`` for
# ``to_tid`` (same time); ``fork`` true where the waiter handed work to the worker, false for a
# join; ``margin_ns`` how long before ``at_ns`` the thread's own predecessor was ready (null:
# never, within the trace).
EDGE_SCHEMA = {
    "rank": pl.Int32(),
    "tid": pl.Int64(),
    "at_ns": pl.Int64(),
    "fork": pl.Boolean(),
    "to_tid": pl.Int64(),
    "margin_ns": pl.Int64(),
}
THREAD = ["rank", "tid"]
_NONE = -1  # a missing row (no frame: the thread's top level) in the NumPy arrays
_NEVER = np.iinfo(np.int64).min  # the end of the event before a thread's first


def _families(names: pl.Series) -> list[EngineFrames]:
    """The families of :data:`ENGINE_FRAMES` this trace writes: the primary ones, or where
    none of ``names`` is one of them, the fallback ones."""
    primary = [family for family in ENGINE_FRAMES if not family.fallback]
    if _matching(names, primary).any():
        return primary
    return [family for family in ENGINE_FRAMES if family.fallback]


def _matching(names: pl.Series, families: list[EngineFrames]) -> pl.Series:
    tests = [
        names.str.starts_with(family.prefix)
        if family.prefix is not None
        else names.str.contains(family.pattern or "")
        for family in families
    ]
    found = tests[0] if tests else names.is_null() & names.is_not_null()
    for test in tests[1:]:
        found = found | test
    return found.fill_null(value=False)


@dataclass(frozen=True)
class Crossings:
    """A trace's edges between threads (EDGE_SCHEMA, in no particular order), the threads
    that run the autograd engine's work at their top level (``rank``, ``tid``), and those of
    them that have no fork although other threads of their rank could have called them."""

    edges: pl.DataFrame
    engine_threads: pl.DataFrame
    unlinked: tuple[tuple[int, int], ...] = ()


def thread_edges(trace: Trace, segs: pl.DataFrame, names: Names | None = None) -> Crossings:
    """Every fork and join of the trace (module docstring); ``segs`` is
    :func:`critical_graph.cpu_segments` of the same trace and ``names`` its cpu frame's names
    as codes (:func:`critical_graph.name_codes`; made here where not given)."""
    cpu = trace.cpu
    names = name_codes(cpu["name"]) if names is None else names
    # Which events are the engine's: asked of the distinct names (a few hundred), not of
    # every event.
    by_name = _matching(names.distinct, _families(names.distinct)).to_numpy()
    is_engine = by_name[names.codes] if len(names.codes) else np.zeros(0, dtype=bool)
    # Workers and waiters are told by their top-level events (a few of the trace's), in
    # thread and time order.
    top = (
        cpu.lazy()
        .filter((pl.col("depth") == 0) & (pl.col("dur_ns") > 0))
        .select(
            *THREAD,
            "ts_ns",
            "op_id",
            end_ns=pl.col("ts_ns") + pl.col("dur_ns"),
            ops=~pl.col("cat").is_in(RUNTIME_CATS),
        )
        .collect()
    )
    threads = _Blocks(top["rank"].to_numpy(), top["tid"].to_numpy())
    if not threads.contiguous():  # call order keeps a thread together unless pids differ
        top = top.sort([*THREAD, "ts_ns"])
        threads = _Blocks(top["rank"].to_numpy(), top["tid"].to_numpy())
    engine = is_engine[top["op_id"].to_numpy()]
    workers = threads.any(engine)
    engine_threads = pl.DataFrame(
        threads.keys(workers), schema={"rank": pl.Int32(), "tid": pl.Int64()}, orient="row"
    )
    waiters = threads.keys(threads.any(top["ops"].to_numpy()) & ~workers)
    if not workers.any() or not waiters:
        return Crossings(pl.DataFrame(schema=EDGE_SCHEMA), engine_threads)
    pieces = _Pieces(segs, _visible_rows(cpu, is_engine, waiters), cpu["cat"])
    start, end = top["ts_ns"].to_numpy(), top["end_ns"].to_numpy()
    edges, unlinked = _Edges(), []
    for worker in np.flatnonzero(workers).tolist():  # a few threads
        rank, tid = threads.key(worker)
        rows = threads.rows(worker)
        waits = [pieces.waits(*waiter) for waiter in waiters if waiter[0] == rank]
        if waits and not _add_edges(
            edges, rank, tid, _Work(start[rows], end[rows], engine[rows]), waits
        ):
            unlinked.append((rank, tid))
    return Crossings(edges.frame(), engine_threads, tuple(unlinked))


class _Blocks:
    """Rows sorted by thread, cut into threads: each one's key (rank, tid) and rows."""

    def __init__(self, rank: npt.NDArray[np.int32], tid: Ints) -> None:
        changed = np.flatnonzero((rank[1:] != rank[:-1]) | (tid[1:] != tid[:-1])) + 1
        self.first = np.concatenate([[0], changed]).astype(np.int64)[: len(tid)]
        self.last = np.concatenate([changed, [len(tid)]]).astype(np.int64)[: len(tid)]
        self.rank, self.tid = rank[self.first], tid[self.first]

    def contiguous(self) -> bool:
        """Whether each thread's rows are one block."""
        return len({self.key(block) for block in range(len(self.first))}) == len(self.first)

    def any(self, values: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
        """Per thread, whether any of its rows is true."""
        if not len(self.first):
            return np.zeros(0, dtype=bool)
        return np.asarray(np.logical_or.reduceat(values, self.first), dtype=bool)

    def key(self, block: int) -> tuple[int, int]:
        return int(self.rank[block]), int(self.tid[block])

    def keys(self, chosen: npt.NDArray[np.bool_]) -> list[tuple[int, int]]:
        """The (rank, tid) of the chosen threads (a few)."""
        return [self.key(block) for block in np.flatnonzero(chosen).tolist()]

    def rows(self, block: int) -> slice:
        return slice(int(self.first[block]), int(self.last[block]))


def _visible_rows(
    cpu: pl.DataFrame, is_engine: npt.NDArray[np.bool_], waiters: list[tuple[int, int]]
) -> Ints:
    """Per cpu row, the row that stands for it in its thread's marks: itself, or for an engine
    frame and what it calls, the frame that called the outermost engine frame (``_NONE``: the
    thread's top level). Only the waiters' rows can differ, and only where they run engine
    frames themselves (few threads): their parents are walked up, one level per step."""
    visible = np.arange(cpu.height, dtype=np.int64)
    found = np.flatnonzero(is_engine)
    ranks, tids = cpu["rank"].to_numpy(), cpu["tid"].to_numpy()
    found_ranks, found_tids = ranks[found], tids[found]
    running = [
        (rank, tid)
        for rank, tid in waiters  # a few threads
        if np.any((found_tids == tid) & (found_ranks == rank))
    ]
    if not running:
        return visible
    rows = np.flatnonzero(
        np.logical_or.reduce([(tids == tid) & (ranks == rank) for rank, tid in running])
    )
    parents = cpu["parent_id"].fill_null(_NONE).to_numpy()
    outermost = np.where(is_engine[rows], rows, _NONE)
    walking, cursor = np.arange(len(rows)), parents[rows]
    while len(walking):  # as many steps as the call tree is deep
        alive = cursor >= 0
        walking, cursor = walking[alive], cursor[alive]
        hit = is_engine[cursor]
        outermost[walking[hit]] = cursor[hit]
        cursor = parents[cursor]
    inside = outermost >= 0
    visible[rows[inside]] = parents[outermost[inside]]
    return visible


class _Pieces:
    """The trace's CPU pieces as arrays, to read each waiter's marks from."""

    def __init__(self, segs: pl.DataFrame, visible: Ints, cats: pl.Series) -> None:
        self.cats = cats
        self.start = segs["start_ns"].to_numpy()
        self.end = segs["end_ns"].to_numpy()
        self.owner = segs["owner"].fill_null(_NONE).to_numpy()
        self.visible = visible
        self.threads = _Blocks(segs["rank"].to_numpy(), segs["tid"].to_numpy())
        self.index = {
            self.threads.key(block): block for block in range(len(self.threads.first))
        }  # one per thread

    def waits(self, rank: int, tid: int) -> _Waits:
        block = self.index.get((rank, tid))
        rows = slice(0, 0) if block is None else self.threads.rows(block)
        start, end, owner = self.start[rows], self.end[rows], self.owner[rows]
        shown = np.where(owner >= 0, self.visible[np.maximum(owner, 0)], _NONE)
        # A mark where what the thread visibly does changes (or where its pieces break off).
        changed = np.ones(len(start), dtype=bool)
        changed[1:] = (shown[1:] != shown[:-1]) | (start[1:] != end[:-1])
        marks = np.concatenate([start[changed], end[-1:]])
        doing = np.concatenate([shown[changed], [_NONE]])
        in_engine = (owner >= 0) & (shown != owner)
        return _Waits(tid, marks, doing, self.cats, start, in_engine)


@dataclass(frozen=True)
class _Waits:
    """A waiter's marks, and its pieces' starts with which of them are inside its own engine
    tasks (where a worker's end is no join)."""

    tid: int
    marks: Ints
    doing: Ints  # per mark, the row the thread is inside after it (``_NONE``: none)
    cats: pl.Series  # the cpu frame's categories, by row
    piece_start: Ints
    in_engine: npt.NDArray[np.bool_]

    def in_call(self, marks: Ints) -> npt.NDArray[np.bool_]:
        """Whether the thread is inside a runtime call after each of ``marks`` (indices): a
        wait there is the call's (a sync waits for the GPU, not for a thread)."""
        rows = self.doing[marks]
        called = np.zeros(len(rows), dtype=bool)
        inside = rows >= 0
        called[inside] = self.cats.gather(rows[inside]).is_in(RUNTIME_CATS).to_numpy()
        return called


class _Work:
    """A worker's top-level events in time order, with its neighbours' ends and starts."""

    def __init__(self, start: Ints, end: Ints, engine: npt.NDArray[np.bool_]) -> None:
        self.start, self.end, self.engine = start, end, engine
        self.prev_end = np.concatenate([[_NEVER], end[:-1]])
        self.next_start = np.concatenate([start[1:], [np.iinfo(np.int64).max]])


@dataclass(frozen=True)
class _Bursts:
    """A waiter's bursts of one worker: per burst its first and last event (indices into the
    worker's events), and the wait around it (``s0`` to ``s1``)."""

    first: Ints
    last: Ints
    s0: Ints
    s1: Ints


def _bursts(work: _Work, waits: _Waits) -> _Bursts:
    """The worker's bursts for one waiter (module docstring)."""
    marks = waits.marks
    at_start = np.searchsorted(marks, work.start, side="right") - 1  # last mark <= start
    before_end = np.searchsorted(marks, work.end, side="left") - 1  # last mark < end
    clean = (at_start == before_end) & (at_start >= 0) & (at_start + 1 < len(marks))
    rows = np.flatnonzero(clean)
    # Clean events between the same two marks are consecutive: one burst each.
    _, first_of, counts = np.unique(at_start[rows], return_index=True, return_counts=True)
    first, last = rows[first_of], rows[first_of + counts - 1]
    mark = at_start[first]
    s0, s1 = marks[mark], marks[mark + 1]
    if not len(rows):
        return _Bursts(rows, rows, rows, rows)
    engine = np.logical_or.reduceat(work.engine[rows], first_of)
    idle = (work.prev_end[first] <= s0) & (work.next_start[last] >= s1)
    keep = engine & idle
    keep[keep] = ~waits.in_call(mark[keep])
    return _Bursts(first[keep], last[keep], s0[keep], s1[keep])


class _Edges:
    """Edges as they are found, NumPy arrays per part, made one frame at the end."""

    def __init__(self) -> None:
        self.parts: list[tuple[int, int, Ints, bool, int, Ints, npt.NDArray[np.bool_]]] = []

    def add(
        self,
        rank: int,
        tid: int,
        at: Ints,
        fork: bool,
        to_tid: int,
        margin: Ints,
        known: npt.NDArray[np.bool_],
    ) -> None:
        """Edges from ``tid`` to ``to_tid`` at the times ``at`` (``margin`` where ``known``)."""
        self.parts.append((rank, tid, at, fork, to_tid, margin, known))

    def frame(self) -> pl.DataFrame:
        if not self.parts:
            return pl.DataFrame(schema=EDGE_SCHEMA)
        sizes = [len(part[2]) for part in self.parts]

        def spread(index: int) -> npt.NDArray[np.int64]:
            return np.repeat(np.array([part[index] for part in self.parts]), sizes)

        margin = pl.Series(np.concatenate([part[5] for part in self.parts]))
        known = pl.Series(np.concatenate([part[6] for part in self.parts]))
        return pl.DataFrame(
            {
                "rank": spread(0),
                "tid": spread(1),
                "at_ns": np.concatenate([part[2] for part in self.parts]),
                "fork": spread(3).astype(bool),
                "to_tid": spread(4),
                "margin_ns": margin.set(~known, None),
            },
            schema=EDGE_SCHEMA,
        )


def _add_edges(edges: _Edges, rank: int, worker: int, work: _Work, waits: list[_Waits]) -> int:
    """The forks and joins between one worker and its waiters: each worker event goes to the
    waiter whose wait around it is the shortest; a burst counts where all its events went to
    its waiter. Returns how many bursts counted."""
    n = len(work.start)
    found = [_bursts(work, wait) for wait in waits]
    widths = np.full((len(waits), n), np.iinfo(np.int64).max)
    for row, bursts in enumerate(found):  # a few waiters
        events, burst = _event_rows(bursts)
        widths[row, events] = (bursts.s1 - bursts.s0)[burst]
    chosen = np.argmin(widths, axis=0)
    return sum(
        _add_burst_edges(edges, rank, worker, work, wait, bursts, chosen == row)
        for row, (wait, bursts) in enumerate(zip(waits, found, strict=True))  # a few waiters
    )


def _event_rows(bursts: _Bursts) -> tuple[Ints, Ints]:
    """The worker events of every burst (indices into its events, burst after burst), and
    the burst each belongs to."""
    lengths = bursts.last - bursts.first + 1
    burst = np.repeat(np.arange(len(lengths)), lengths)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    events = bursts.first[burst] + np.arange(len(burst)) - offsets[burst]
    return events, burst


def _add_burst_edges(
    edges: _Edges,
    rank: int,
    worker: int,
    work: _Work,
    waits: _Waits,
    bursts: _Bursts,
    chose: npt.NDArray[np.bool_],
) -> int:
    """The edges of the bursts whose events all chose this waiter; how many bursts those are."""
    events, burst = _event_rows(bursts)
    if not len(events):
        return 0
    lost = np.zeros(len(bursts.first), dtype=bool)
    lost[burst[~chose[events]]] = True
    first = bursts.first[~lost]
    fork_at, prev_end = work.start[first], work.prev_end[first]
    known = prev_end > _NEVER
    margin = fork_at - np.where(known, prev_end, fork_at)
    edges.add(rank, worker, fork_at, True, waits.tid, margin, known)
    # Joins: every end of a kept burst's events that falls in the waiter's wait, not inside
    # an engine task the waiter runs itself; the waiter's own predecessor there is the piece
    # it waited in, ready since that piece began.
    ends = work.end[events[~lost[burst]]]
    piece = np.searchsorted(waits.piece_start, ends, side="left") - 1
    free = ~waits.in_engine[piece]
    ends, ready = ends[free], waits.piece_start[piece[free]]
    edges.add(rank, waits.tid, ends, False, worker, ends - ready, np.ones(len(ends), dtype=bool))
    return len(first)
