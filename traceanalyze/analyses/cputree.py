"""Questions about the CPU call tree: self time, outermost ops, ancestor chains."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from traceanalyze.analyses.activities import per_trace
from traceanalyze.link import nearest_ancestor, ops_not_steps
from traceanalyze.trace import Trace

# Views that only change metadata (shape/strides) on the CPU: no kernel unless materialised.
VIEW_OPS = ("aten::transpose", "aten::permute", "aten::t", "aten::transpose_", "aten::swapaxes")
# Ancestor chains are short in practice; this bounds the walk.
_MAX_CHAIN = 32


def with_self_time(ops: pl.DataFrame, cpu: pl.DataFrame) -> pl.DataFrame:
    """Add ``self_ns`` to ``ops`` (rows of ``cpu``): duration minus the durations of direct
    children (ops and runtime calls)."""
    children = (
        cpu.filter(pl.col("parent_id").is_in(ops["op_id"].implode()))
        .group_by("parent_id")
        .agg(children_ns=pl.col("dur_ns").sum())
    )
    return (
        ops.join(children, left_on="op_id", right_on="parent_id", how="left")
        .with_columns(self_ns=pl.col("dur_ns") - pl.col("children_ns").fill_null(0))
        .drop("children_ns")
    )


def outermost_ops(trace: Trace) -> pl.DataFrame:
    """cpu_op rows with no cpu_op ancestor: the time spent inside PyTorch operators."""
    # One filter of every column (the rows kept are a fifth of the ops), not two.
    return trace.cpu.filter(outermost_mask(trace))


@per_trace  # the accounting, the syncs and the critical path each ask for it
def outermost_mask(trace: Trace) -> pl.Series:
    """Per cpu row: whether it is an outermost op (:func:`outermost_ops`), for callers that
    keep a few columns of those rows."""
    return outermost_in(trace.cpu)


def outermost_in(cpu: pl.DataFrame) -> pl.Series:
    """:func:`outermost_mask` of a cpu frame (one whose categories a caller has changed).

    A ``ProfilerStep#N`` operator (legacy traces record the step as one) is the step, not an
    op: the ops inside it are outermost, as under the annotation newer traces record."""
    is_op = pl.lit(ops_not_steps(cpu))
    ops = cpu.select("op_id", row=pl.int_range(pl.len(), dtype=pl.Int64), is_op=is_op).filter(
        "is_op"
    )
    outermost = nearest_ancestor(cpu, ops["op_id"], is_op).is_null()
    return pl.Series([False]).new_from_index(0, cpu.height).scatter(ops["row"], outermost)


def op_chains(cpu: pl.DataFrame, op_ids: pl.Series, cats: Sequence[str] = ("cpu_op",)) -> pl.Series:
    """For each op id, the names of it and its ancestors of the categories ``cats`` (cpu_op:
    the operators; add user_annotation for the record_function regions), outermost first."""
    if _ids_are_rows(cpu, op_ids):
        return _op_chains_by_rows(cpu, op_ids, cats)
    names = cpu.select("op_id", "parent_id", "name", "cat")
    walk = op_ids.alias("cursor").to_frame().with_row_index("row")
    walk = walk.with_columns(chain=pl.lit([], pl.List(pl.String)))
    for _ in range(_MAX_CHAIN):
        if walk["cursor"].is_null().all():
            break
        walk = (
            walk.join(names, left_on="cursor", right_on="op_id", how="left")
            .with_columns(
                chain=pl.when(pl.col("cat").is_in(cats))
                .then(pl.concat_list(pl.col("name"), "chain"))
                .otherwise("chain"),
                cursor=pl.col("parent_id"),
            )
            .select("row", "cursor", "chain")
        )
    return walk.sort("row").get_column("chain")


def _ids_are_rows(cpu: pl.DataFrame, op_ids: pl.Series) -> bool:
    """Whether linking numbered ``cpu``'s ops by their row (``op_id`` 0, 1, ...) and every id
    of ``op_ids`` and ``parent_id`` is a row (or null): a parent is then a gather, not a join."""
    height = cpu.height
    ids = cpu["op_id"]
    if ids.null_count() or not (ids == pl.int_range(height, eager=True)).all():
        return False
    return all(
        ref.null_count() == ref.len() or (ref.min() >= 0 and ref.max() < height)  # type: ignore[operator]
        for ref in (op_ids, cpu["parent_id"])
    )


def _op_chains_by_rows(cpu: pl.DataFrame, op_ids: pl.Series, cats: Sequence[str]) -> pl.Series:
    """:func:`op_chains` where ids are rows (:func:`_ids_are_rows`): the walk up gathers each
    level's name and category (a join per level of the whole cpu frame cost ~6 ms for a
    trace's few dozen collectives), then one query builds the chains exactly as the joins do
    (a level adds its name where its category is cpu_op, innermost last)."""
    names, is_op, parents = cpu["name"], cpu["cat"].is_in(cats), cpu["parent_id"]
    levels: dict[str, pl.Series] = {}
    cursor = op_ids
    for level in range(_MAX_CHAIN):
        if cursor.null_count() == cursor.len():
            break
        levels[f"name{level}"] = names.gather(cursor).alias(f"name{level}")
        levels[f"op{level}"] = is_op.gather(cursor).alias(f"op{level}")
        cursor = parents.gather(cursor)
    # Each level is a list of its name or of nothing, and the chain their concatenation,
    # outermost first: one expression per level. (Nesting the chain so far into both branches
    # of each level's when/then doubled the expression per level: 2^depth nodes, which took
    # 10 s at depth 16 and all the memory beyond.)
    nothing = pl.lit([], pl.List(pl.String))
    parts = [
        pl.when(pl.col(f"op{level}")).then(pl.concat_list(f"name{level}")).otherwise(nothing)
        for level in reversed(range(len(levels) // 2))
    ]
    chain = pl.concat_list(parts) if parts else nothing
    # The ids ride along so that a walk of no level (every id null) still has the rows: the
    # empty-list literal alone would make one row.
    frame = pl.DataFrame([op_ids.alias("ids"), *levels.values()])
    return frame.select("ids", chain.alias("chain")).get_column("chain")
