"""The items on the critical path and their slack (critical_path's docstring: *slack*).

An item is a name and kind; its pieces are the path's segments of that name and kind. The sums
run over integer codes (:class:`critical_segments.PathRows`), and the freed time before each
node is a binary search over the items' pieces in (item, iteration, time) order, so that the
cost stays small when the path crosses hundreds of thousands of pieces (the bench trace's
backward on the autograd engine's thread).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import polars as pl

from traceanalyze.analyses.between.critical_segments import PathRows

Ints = npt.NDArray[np.int64]
ITERATION = ["rank", "iteration"]


def items(rows: PathRows, nodes: pl.DataFrame, n: int, top: int) -> pl.DataFrame:
    """The ``top`` named items on the path (gaps left out), longest first (ties by name), with
    ``us_per_iter`` and ``slack_us_per_iter``; ``nodes`` (rank, iteration, at_ns, margin_ns,
    tau_ns) are the nodes that are no segment's start (critical_path._terminal)."""
    # Every segment's (name, kind) as one code; the gaps' codes are left out of the items.
    kinds = len(rows.kinds)
    pair = rows.name * kinds + rows.kind
    counts = np.bincount(pair)
    present = np.flatnonzero(counts)
    present = present[present % kinds != rows.gap]
    sums = np.bincount(pair, weights=rows.end - rows.start, minlength=len(counts))
    codes = pl.DataFrame(
        {
            "pair": present,
            "dur_ns": np.rint(sums[present]).astype(np.int64),  # whole ns, below 2**53
            "name": rows.names.gather(present // kinds),
            "kind": rows.kinds.gather(present % kinds),
        }
    )
    # The same name can have a code in two tables (a launch call's piece and its launch).
    ranked = (
        codes.group_by("name", "kind")
        .agg(pl.col("dur_ns").sum(), pl.col("pair"))
        .sort(["dur_ns", "name", "kind"], descending=[True, False, False])
        .head(top)
        .with_row_index("item")
    )
    item_of_pair = np.full(len(counts), -1, dtype=np.int64)
    numbered = ranked.select("item", "pair").explode("pair")
    item_of_pair[_ints(numbered["pair"])] = _ints(numbered["item"])
    item = item_of_pair[pair]
    slack = _slack(rows, item, nodes)
    return ranked.join(slack, on="item", how="left").select(
        "name",
        "kind",
        us_per_iter=pl.col("dur_ns") / 1e3 / n,
        slack_us_per_iter=pl.col("slack_ns").fill_null(0) / 1e3 / n,
    )


def _ints(column: pl.Series) -> Ints:
    return column.cast(pl.Int64).to_numpy()


def _slack(rows: PathRows, item: Ints, nodes: pl.DataFrame) -> pl.DataFrame:
    """Per item (``item``: each segment's, -1 for none): the iteration shrink if its pieces on
    the path were free, summed over iterations. Each node with a margin can bind (the
    segments' own nodes and ``nodes``); the freed time before a node and before where its
    other chain joins comes from binary searches over the item's pieces."""
    group = rows.group
    chosen = np.flatnonzero(item >= 0)
    # The items' pieces, item after item, each in path order (which is start order): a
    # stable sort, by radix on small integers.
    small = np.uint8 if len(chosen) == 0 or item.max() < 256 else np.int64
    order = chosen[np.argsort(item[chosen].astype(small), kind="stable")]
    pieces = _Pieces(item[order], group[order], rows.start[order], rows.end[order])
    all_nodes = pl.concat([rows.nodes, nodes.filter(pl.col("margin_ns").is_not_null())])
    numbered = rows.runs.select(*ITERATION, "group").unique(ITERATION)
    bounds = (
        all_nodes.join(numbered, on=ITERATION)
        .select("group", "at_ns", "margin_ns", "tau_ns")
        .join(pieces.totals, on="group")
    )
    item_col, group_col = _ints(bounds["item"]), _ints(bounds["group"])
    at_before = pieces.freed_before(item_col, group_col, bounds["at_ns"])
    tau_before = pieces.freed_before(item_col, group_col, bounds["tau_ns"])
    # Freed time between where the other chain joins and the node moves this chain only.
    bounds = bounds.with_columns(
        bound_ns=pl.col("margin_ns") + pl.col("total_ns") - (at_before - tau_before)
    )
    bound = bounds.group_by("item", "group").agg(pl.col("bound_ns").min())
    per_iteration = pieces.totals.join(bound, on=["item", "group"], how="left").select(
        "item", slack_ns=pl.min_horizontal("total_ns", "bound_ns")
    )
    return per_iteration.group_by("item").agg(pl.col("slack_ns").sum())


class _Pieces:
    """The top items' pieces sorted by (item, iteration, start), with the item's path time up
    to each piece's end within its iteration (``before``) and per (item, iteration) its total
    (``totals``: item, group, total_ns)."""

    def __init__(self, item: Ints, group: Ints, start: Ints, end: Ints) -> None:
        self.start, self.end = start, end
        dur = self.end - self.start
        began = np.ones(len(item), dtype=bool)
        began[1:] = (item[1:] != item[:-1]) | (group[1:] != group[:-1])
        running = np.cumsum(dur)
        first = np.maximum.accumulate(np.where(began, np.arange(len(item)), 0))
        self.before = running - (running[first] - dur[first]) if len(item) else running
        last = np.ones(len(item), dtype=bool)
        last[:-1] = began[1:]
        self.totals = pl.DataFrame(
            {"item": item[last], "group": group[last], "total_ns": self.before[last]}
        )
        # One key per piece, ascending: (item, group), then its start as such where it fits
        # beside them, else its rank among the starts.
        self.groups = int(group.max()) + 1 if len(item) else 1
        self.block = item * self.groups + group
        block_bits = int(self.block.max()).bit_length() if len(item) else 1
        self.low = int(self.start.min()) if len(item) else 0
        span = int(self.start.max()) + 1 - self.low if len(item) else 1
        self.starts: Ints | None = None
        if block_bits + span.bit_length() > 62:
            self.starts = np.unique(self.start)
            span = len(self.starts) + 1
        self.bits = span.bit_length()
        self.key = (self.block << self.bits) + self._position(self.start)

    def _position(self, time: Ints) -> Ints:
        """``time`` as the key's low part, which orders as the time does against the starts:
        its offset from the first start (clipped to the key's range), or the number of
        starts before it."""
        if self.starts is not None:
            return np.searchsorted(self.starts, time, side="left")
        return np.clip(time, self.low, self.low + (1 << self.bits) - 1) - self.low

    def freed_before(self, item: Ints, group: Ints, at: pl.Series) -> pl.Series:
        """Per (item, group, time): the item's path time in that iteration before the time (0
        for a null time): the last piece starting before it, less its part after it."""
        time = _ints(at.fill_null(self.low))
        block = item * self.groups + group
        index = np.searchsorted(self.key, (block << self.bits) + self._position(time))
        safe = np.maximum(index - 1, 0)
        found = (index > 0) & (self.block[safe] == block) & at.is_not_null().to_numpy()
        # The last piece may reach past the time: only its part before it counts.
        before = self.before[safe] - np.maximum(self.end[safe] - time, 0)
        return pl.Series(np.where(found, before, 0))
