"""The walk's runs made into the path's segments, in integer columns.

A path holds as many segments as the pieces it crosses: 434k a run on the 175 MB bench trace,
where it follows the autograd engine's thread through the backward. So the segments are made
and summed as integers: each segment's kind and name are codes into small tables (a trace has
a few hundred distinct op and kernel names), its lane is its run's. Names become strings only
in the tables a person reads and in the segments' frame (:meth:`PathRows.strings`), by
gathers from those small tables.

Order: the runs are put in forward order (by iteration, then the walk's order reversed: it
walks back), a few hundred of them, and each is expanded in its own forward order, so the
segments come out in order with no sort of the segments themselves. Every run is a range of
one numbering of all pieces that can be on a path (``_Pieces``): the CPU pieces, then per GPU
activity the stream's wait before it and the activity, then the walk's single segments.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import polars as pl

from traceanalyze.analyses.between.critical_graph import (
    KIND_COPY,
    KIND_GAP,
    PIECE_KINDS,
    STREAM_LANE,
    THREAD_LANE,
    Names,
    name_codes,
    owner_kinds,
)
from traceanalyze.analyses.between.critical_walk import Runs
from traceanalyze.trace import Trace

Ints = npt.NDArray[np.int64]
ITERATION = ["rank", "iteration"]
_NONE = -1  # a missing value (a gap's owner, a null margin) in the NumPy arrays


@dataclass(frozen=True)
class PathRows:
    """The path's segments in forward order per iteration, as NumPy arrays: each one's
    ``run``, ``group`` (its iteration's number in path order), ``kind`` (``kinds[kind]``),
    ``name`` (``names[name]``), ``start`` and ``end`` (ns). ``runs`` has a row per run, in
    that order: ``rank``, ``iteration``, ``group`` and ``lane``. ``nodes`` are the segments
    that can bind (critical_path's docstring): ``rank``, ``iteration``, ``at_ns`` (their
    start), ``margin_ns``, ``tau_ns``."""

    run: Ints
    group: Ints
    kind: Ints
    name: Ints
    start: Ints
    end: Ints
    runs: pl.DataFrame
    nodes: pl.DataFrame
    kinds: pl.Series
    names: pl.Series
    gap: int  # the code of KIND_GAP in ``kinds``

    def per_run_ns(self) -> pl.Series:
        """Each run's time on the path, in ns (exact: the sums stay below 2**53)."""
        sums = np.bincount(self.run, weights=self.end - self.start, minlength=self.runs.height)
        return pl.Series("dur_ns", np.rint(sums).astype(np.int64))

    def strings(self) -> pl.DataFrame:
        """The segments with their kind, name and lane as strings: rank, iteration, kind, name,
        lane, start_ns, end_ns."""
        # Indices as UInt32, Polars' own (Int64 ones are checked and converted first).
        run = pl.Series(self.run.astype(np.uint32))
        return pl.DataFrame(
            [
                self.runs["rank"].gather(run),
                self.runs["iteration"].gather(run),
                self.kinds.gather(pl.Series(self.kind.astype(np.uint32))).alias("kind"),
                self.names.gather(pl.Series(self.name.astype(np.uint32))).alias("name"),
                self.runs["lane"].gather(run),
                pl.Series("start_ns", self.start),
                pl.Series("end_ns", self.end),
            ]
        )


def path_rows(
    runs: Runs,
    segs: pl.DataFrame,
    gpu: pl.DataFrame,
    trace: Trace,
    syncs: pl.Series,
    names: Names,
) -> PathRows:
    """The walk's runs expanded into segments in forward time order per iteration, trimmed so
    that they never overlap (clock jitter can make neighbours overlap by a few ns); ``names``
    are the cpu frame's (:func:`critical_graph.name_codes`)."""
    pieces = _Pieces(runs, segs, gpu, trace, syncs, names)
    order = _RunOrder(runs, pieces)
    rows = order.rows()
    start = np.maximum(pieces.start[rows], order.per_row(order.bottom))
    end = np.minimum(pieces.end[rows], order.per_row(order.top))
    run = order.per_row(np.arange(len(order.first)))
    group = order.per_row(order.group)
    # Each segment ends where the next one of its iteration starts (the earliest start after
    # it, walked back), and starts no later than it ends.
    later, known = _later_start(start, group)
    end = np.where(known, np.minimum(end, later), end)
    start = np.minimum(start, end)
    # Trimmed, non-empty segments do not overlap, so they are in start order. (Mostly all
    # are kept: then nothing is copied.)
    keep = end > start
    if not keep.all():
        rows, start, end, run, group = (a[keep] for a in (rows, start, end, run, group))
    node = np.flatnonzero(rows >= pieces.n_seg)  # only GPU activities and singles can bind
    node = node[pieces.margin_of(rows[node]) != _MISSING]
    nodes = pl.DataFrame(
        {
            "rank": pl.Series(order.rank[run[node]], dtype=pl.Int32),
            "iteration": order.iteration[run[node]],
            "at_ns": start[node],
            "margin_ns": pieces.margin_of(rows[node]),
            "tau_ns": _nullable(pieces.tau_of(rows[node])),
        }
    )
    runs_table = pl.DataFrame(
        {
            "rank": pl.Series(order.rank, dtype=pl.Int32),
            "iteration": order.iteration,
            "group": order.group,
            "lane": order.lanes,
        }
    )
    return PathRows(
        run,
        group,
        pieces.kind[rows],
        pieces.name[rows],
        start,
        end,
        runs_table,
        nodes,
        pieces.kinds,
        pieces.names,
        pieces.gap,
    )


def _nullable(values: Ints) -> pl.Series:
    """``values`` as Int64, ``_MISSING`` as null."""
    return pl.Series(values, dtype=pl.Int64).set(pl.Series(values == _MISSING), None)


# A missing margin or tau in the arrays: no trace time or duration is this small.
_MISSING = np.iinfo(np.int64).min


class _Pieces:
    """Every piece a path can cross, numbered: the CPU pieces (``segs``' rows), then per GPU
    activity ``g`` the stream's wait before it (``2g``) and the activity (``2g + 1``), then
    the walk's single segments: per piece its times and its kind and name codes (one array
    each, so that the path's rows are one gather per column), and for the GPU pieces and
    singles, the only ones that can bind, their margin and tau."""

    def __init__(
        self,
        runs: Runs,
        segs: pl.DataFrame,
        gpu: pl.DataFrame,
        trace: Trace,
        syncs: pl.Series,
        names: Names,
    ) -> None:
        self.n_seg, self.n_gpu = segs.height, gpu.height
        single = runs.single
        # Kinds: the CPU pieces' first (their codes are owner_kinds'), then the others.
        extra = sorted(set(gpu["kind"].unique().to_list()) - set(PIECE_KINDS) | {KIND_COPY})
        kinds = [*PIECE_KINDS, *extra]
        index = {kind: code for code, kind in enumerate(kinds)}
        self.kinds = pl.Series("kind", kinds, dtype=pl.String)
        self.gap = index[KIND_GAP]
        cpu_names, cpu_codes = names.distinct, names.codes
        gpu_named = name_codes(gpu["name"])
        gpu_names, gpu_codes = gpu_named.distinct, gpu_named.codes
        literal = list(dict.fromkeys([KIND_GAP, *(r[4] for r in single)]))  # a few hundred
        # One table of names, in one chunk: gathers from several cost five times as much.
        self.names = pl.concat(
            [cpu_names, gpu_names, pl.Series("name", literal, pl.String)], rechunk=True
        )
        gap_name = len(cpu_names) + len(gpu_names)
        literal_code = {name: gap_name + code for code, name in enumerate(literal)}
        # A CPU piece's kind and name are its owner's (a gap's: the gap's).
        owner = segs["owner"].fill_null(_NONE).to_numpy()
        owned = owner >= 0
        safe = np.where(owned, owner, 0)
        cpu_kind = np.where(owned, owner_kinds(trace, syncs)[safe], self.gap)
        cpu_name = np.where(owned, cpu_codes[safe], gap_name)
        # Per GPU activity: the stream's wait before it, then the activity.
        ts = _ints(gpu["ts_ns"])
        prev_end = _ints(gpu["prev_end_ns"].fill_null(gpu["ts_ns"]))
        gpu_kind = gpu["kind"].replace_strict(index, return_dtype=pl.Int64).to_numpy()
        gaps, gap_names = np.full(self.n_gpu, self.gap), np.full(self.n_gpu, gap_name)
        self.start = np.concatenate(
            [_ints(segs["start_ns"]), _pairs(np.minimum(prev_end, ts), ts), _column(single, 6)]
        )
        self.end = np.concatenate(
            [_ints(segs["end_ns"]), _pairs(ts, _ints(gpu["end_ns"])), _column(single, 7)]
        )
        self.kind = np.concatenate(
            [
                cpu_kind,
                _pairs(gaps, gpu_kind),
                np.array([index[r[3]] for r in single], dtype=np.int64),  # a few
            ]
        )
        self.name = np.concatenate(
            [
                cpu_name,
                _pairs(gap_names, gpu_codes + len(cpu_names)),
                np.array([literal_code[r[4]] for r in single], dtype=np.int64),
            ]
        )
        none = np.full(self.n_gpu, _MISSING)
        self.margin = np.concatenate(
            [_pairs(none, _ints(gpu["margin_ns"], _MISSING)), _column(single, 8)]
        )
        self.tau = np.concatenate(
            [_pairs(none, _ints(gpu["tau_ns"], _MISSING)), _column(single, 9)]
        )
        self.tid = segs["tid"]
        self.stream = gpu["stream"]

    def margin_of(self, rows: Ints) -> Ints:
        """The margins of GPU pieces and singles ``rows``."""
        margin: Ints = self.margin[rows - self.n_seg]
        return margin

    def tau_of(self, rows: Ints) -> Ints:
        """The taus of GPU pieces and singles ``rows``."""
        tau: Ints = self.tau[rows - self.n_seg]
        return tau


def _ints(column: pl.Series, null: int = 0) -> Ints:
    return column.cast(pl.Int64).fill_null(null).to_numpy()


def _pairs(first: npt.ArrayLike, second: npt.ArrayLike) -> Ints:
    """``first`` and ``second`` interleaved: first[0], second[0], first[1], ..."""
    a, b = np.asarray(first, dtype=np.int64), np.asarray(second, dtype=np.int64)
    both = np.empty(2 * len(a), dtype=np.int64)
    both[0::2], both[1::2] = a, b
    return both


def _column(records: list[tuple[object, ...]], index: int) -> Ints:
    """Field ``index`` of the walk's single segments (None: ``_MISSING``)."""
    values = [r[index] for r in records]  # the walk's few single segments
    return np.array([_MISSING if v is None else v for v in values], dtype=np.int64)


class _RunOrder:
    """Every run of the walk (CPU, GPU and single) in forward order, each with the range of
    ``_Pieces`` it covers, its clip bounds, its iteration (numbered in order: ``group``) and
    its lane."""

    def __init__(self, runs: Runs, pieces: _Pieces) -> None:
        n_seg, n_gpu = pieces.n_seg, pieces.n_gpu
        cpu = _run_array(runs.cpu)
        gpu = _run_array(runs.gpu)
        single = np.array([(r[0], r[1], r[2]) for r in runs.single], dtype=np.int64).reshape(
            -1, 3
        )  # the walk's few single segments
        k = np.arange(len(single), dtype=np.int64) + n_seg + 2 * n_gpu
        big = np.iinfo(np.int64).max
        table = np.concatenate(
            [
                np.column_stack([cpu[:, :5], cpu[:, 5:7], np.zeros(len(cpu), np.int64)]),
                np.column_stack(
                    [
                        gpu[:, :3],
                        n_seg + 2 * gpu[:, 3:5] + 1,
                        gpu[:, 5:7],
                        np.ones(len(gpu), np.int64),
                    ]
                ),
                np.column_stack(
                    [single, k, k, np.full(len(k), -big), np.full(len(k), big), np.full(len(k), 2)]
                ),
            ]
        )
        # Forward order: by rank and iteration, then the walk's sequence reversed.
        order = np.lexsort((-table[:, 2], table[:, 1], table[:, 0]))
        table = table[order]
        self.rank, self.iteration = table[:, 0], table[:, 1]
        self.first, self.last = table[:, 3], table[:, 4]
        self.bottom, self.top = table[:, 5], table[:, 6]
        kind = table[:, 7]
        changed = np.ones(len(table), dtype=bool)
        changed[1:] = (self.rank[1:] != self.rank[:-1]) | (
            self.iteration[1:] != self.iteration[:-1]
        )
        self.group = np.cumsum(changed) - 1
        self.lengths = self.last - self.first + 1
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)
        self.lanes = _lanes(runs, order, kind, self.first, pieces)

    def rows(self) -> Ints:
        """The pieces of every run, run after run: the path's segments in forward order."""
        rows: Ints = self.per_row(self.first - self.offsets) + np.arange(self.lengths.sum())
        return rows

    def per_row(self, values: Ints) -> Ints:
        """Each run's value on each of its rows (repeated: a sequential write, no gather)."""
        return np.repeat(values, self.lengths)


def _run_array(records: list[tuple[int, int, int, int, int, int, int]]) -> Ints:
    """The walk's CPU or GPU runs (rank, iteration, seq, first, last, bottom, top)."""
    return np.array(records, dtype=np.int64).reshape(-1, 7)


def _lanes(runs: Runs, order: Ints, kind: Ints, first: Ints, pieces: _Pieces) -> pl.Series:
    """Each run's lane, in forward order: its thread's or stream's, or a single segment's."""
    n_seg, n_gpu = pieces.n_seg, pieces.n_gpu
    cpu_rows = first[kind == 0]
    gpu_rows = (first[kind == 1] - n_seg - 1) // 2
    singles = first[kind == 2] - n_seg - 2 * n_gpu
    lanes = pl.Series("lane", [None] * len(first), dtype=pl.String)
    parts = [
        (kind == 0, pl.format(THREAD_LANE + "{}", pl.lit(pieces.tid.gather(cpu_rows)))),
        (kind == 1, pl.format(STREAM_LANE + "{}", pl.lit(pieces.stream.gather(gpu_rows)))),
    ]
    for chosen, lane in parts:
        lanes = lanes.scatter(np.flatnonzero(chosen), pl.select(lane).to_series())
    single_lanes = pl.Series([runs.single[int(i)][5] for i in singles], dtype=pl.String)
    return lanes.scatter(np.flatnonzero(kind == 2), single_lanes) if len(singles) else lanes


def _later_start(start: Ints, group: Ints) -> tuple[Ints, npt.NDArray[np.bool_]]:
    """Per row, the earliest start among the later rows of its iteration (``group``, numbered
    in order), and whether there is one. One reverse running minimum over the start lifted
    by its iteration's number, so that no iteration sees a later one's, where that fits in 63
    bits; else one per iteration."""
    n = len(start)
    known = np.zeros(n, dtype=bool)
    if not n:
        return start.copy(), known
    known[:-1] = group[1:] == group[:-1]
    low = int(start.min())
    time_bits = int(start.max() - low).bit_length()
    if time_bits + int(group[-1]).bit_length() <= 62:
        lifted = (group << time_bits) + (start - low)
        suffix = np.minimum.accumulate(lifted[::-1])[::-1]
        later = np.empty(n, dtype=np.int64)
        later[:-1] = suffix[1:] - (group[:-1] << time_bits) + low
        later[-1] = 0
        return later, known
    later = np.zeros(n, dtype=np.int64)
    bounds = np.flatnonzero(np.diff(group)) + 1
    for a, b in zip(np.r_[0, bounds], np.r_[bounds, n], strict=True):  # one per iteration
        suffix = np.minimum.accumulate(start[a:b][::-1])[::-1]
        later[a : b - 1] = suffix[1:]
    return later, known
