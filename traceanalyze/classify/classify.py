"""Classify GPU activities into the kernel taxonomy, columnar.

The rule tables in :mod:`traceanalyze.classify.rules` are compiled into Polars expressions: one
``when/then`` chain over the kernel name (evaluated once per distinct name, then joined back),
one over the launching CPU op context, one for the GEMM precision. No per-row Python.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

import polars as pl

from traceanalyze.classify.rules import (
    FALLBACK_CATEGORY,
    GEMM_PRECISION_RULES,
    KIND_CATEGORIES,
    MAX_OP_ANCESTORS,
    NAME_RULES,
    OP_REFINEMENTS,
    OWN_NAME_RULES,
    UNKNOWN_PRECISION,
    OpRefinement,
)
from traceanalyze.query import IN_MEMORY
from traceanalyze.schema import require_columns

GPU_COLUMNS = ("rank", "kind", "name", "op_id")
CPU_COLUMNS = ("rank", "op_id", "parent_id", "name")

# Helper column names; the leading underscore keeps them apart from schema columns.
_NAME_CATEGORY = "_name_category"
_NAME_PRECISION = "_name_precision"
_ANCESTOR = "_ancestor"
_NEXT = "_next"


def _first_match(subject: pl.Expr, rules: Iterable[tuple[str, str]], otherwise: pl.Expr) -> pl.Expr:
    """``when(subject matches p1) then v1 ... otherwise``, in table order."""
    chain: pl.Expr = otherwise
    # Built back to front so the first rule of the table ends up outermost and wins.
    for value, pattern in reversed(tuple(rules)):
        chain = pl.when(subject.str.contains(pattern)).then(pl.lit(value)).otherwise(chain)
    return chain


def own_name_expr() -> pl.Expr:
    """The kernel's own name: the function's unqualified name, without a return type,
    namespaces, template arguments or parameters (``void a::(anonymous namespace)::f<T>(int)``
    -> ``f``); a name that is not a C++ signature is its own (``sage_fwd``, mangled names)."""
    return (
        pl.col("name")
        .str.replace(r"^void\s+", "")
        .str.replace_all(r"\(anonymous namespace\)::", "", literal=False)
        .str.extract(r"^(?:[\w~]+::)*([\w~]+)", 1)
    )


@cache
def category_expr() -> pl.Expr:
    """The name-based category of a GPU activity, from its ``kind`` and ``name`` columns.

    ``kind`` "memcpy"/"memset" map to those categories; kernels go through ``OWN_NAME_RULES``
    on their own name (:func:`own_name_expr`), then ``NAME_RULES`` on the full name, and fall
    back to "other". Usable in any ``with_columns``; the CPU-op refinements that
    :func:`classify` adds need the cpu frame and are not part of this expression.
    """
    by_name = _first_match(
        own_name_expr(),
        OWN_NAME_RULES,
        _first_match(pl.col("name"), NAME_RULES, pl.lit(FALLBACK_CATEGORY)),
    )
    chain = by_name
    for kind, category in reversed(KIND_CATEGORIES):
        chain = pl.when(pl.col("kind") == kind).then(pl.lit(category)).otherwise(chain)
    return chain.cast(pl.String).alias("category")


def _name_precision_expr() -> pl.Expr:
    """The precision a GEMM's ``name`` says (``UNKNOWN_PRECISION`` if none), for any row."""
    return _first_match(pl.col("name"), GEMM_PRECISION_RULES, pl.lit(UNKNOWN_PRECISION))


def _precision_if_gemm(precision: pl.Expr) -> pl.Expr:
    return (
        pl.when(pl.col("category") == "gemm")
        .then(precision)
        .otherwise(pl.lit(None))
        .cast(pl.String)
        .alias("gemm_precision")
    )


@cache
def gemm_precision_expr() -> pl.Expr:
    """Input precision of rows whose ``category`` is "gemm" (null for every other category)."""
    return _precision_if_gemm(_name_precision_expr())


def _flag(index: int) -> str:
    return f"_refine_{index}"


def _op_context_flags(gpu: pl.LazyFrame, cpu: pl.LazyFrame) -> pl.LazyFrame:
    """Per launching op (rank, op_id): does it or one of its nearest ancestors match each
    refinement's op pattern?

    The ancestor walk is a fixed number of self-joins on ``parent_id`` over the ops that
    launched something, so its cost does not depend on the depth of the call tree.
    """
    flags = [_flag(i) for i in range(len(OP_REFINEMENTS))]
    ops = cpu.select(
        "rank",
        "op_id",
        "parent_id",
        *(
            pl.col("name").str.contains(r.op_pattern).fill_null(False).alias(f)
            for r, f in zip(OP_REFINEMENTS, flags, strict=True)
        ),
    )
    launching = gpu.select("rank", "op_id").drop_nulls().unique()
    walk = launching.join(ops, on=["rank", "op_id"], how="inner").rename({"parent_id": _ANCESTOR})
    # A refinement with a launch-op pattern also needs the innermost op itself to match it.
    launch_ops = launching.join(
        cpu.select("rank", "op_id", "name"), on=["rank", "op_id"], how="inner"
    ).select(
        "rank",
        "op_id",
        *(
            pl.col("name").str.contains(r.launch_op_pattern).fill_null(False).alias(f)
            for r, f in zip(OP_REFINEMENTS, flags, strict=True)
            if r.launch_op_pattern is not None
        ),
    )
    parents = ops.select(
        "rank",
        pl.col("op_id").alias(_ANCESTOR),
        pl.col("parent_id").alias(_NEXT),
        *(pl.col(f).alias(f"{f}_up") for f in flags),
    )
    for _ in range(MAX_OP_ANCESTORS):
        walk = (
            walk.join(parents, on=["rank", _ANCESTOR], how="left")
            .with_columns(
                *(pl.col(f) | pl.col(f"{f}_up").fill_null(False) for f in flags),
                pl.col(_NEXT).alias(_ANCESTOR),
            )
            .drop(_NEXT, *(f"{f}_up" for f in flags))
        )
    launch_flags = [
        f for r, f in zip(OP_REFINEMENTS, flags, strict=True) if r.launch_op_pattern is not None
    ]
    return (
        walk.join(launch_ops, on=["rank", "op_id"], how="left", suffix="_launch")
        .with_columns(pl.col(f) & pl.col(f"{f}_launch").fill_null(False) for f in launch_flags)
        .select("rank", "op_id", *flags)
    )


def op_ids_are_rows(cpu: pl.DataFrame) -> bool:
    """Linking numbers ops by their row (``op_id`` 0, 1, ...); hand-made frames may not."""
    ids = cpu["op_id"]
    return ids.null_count() == 0 and (ids == pl.int_range(cpu.height, eager=True)).all()


def _op_context_by_rows(gpu: pl.DataFrame, cpu: pl.DataFrame) -> pl.DataFrame:
    """:func:`_op_context_flags` for a cpu frame whose ``op_id`` is the row: the walk up the
    ancestors is a gather per level over the launching ops alone (no joins)."""
    flags = [_flag(i) for i in range(len(OP_REFINEMENTS))]
    op_id = pl.col("op_id")
    launching = (
        gpu.lazy()
        .select("rank", "op_id")
        .drop_nulls()
        .unique()
        # Only ops of the cpu frame, on the same rank (what the join of the general path keeps).
        .filter(op_id.is_between(0, cpu.height - 1))
        .filter(pl.col("rank") == pl.lit(cpu["rank"]).gather(op_id))
        .collect(engine=IN_MEMORY)  # one query, not five eager steps
    )
    ids = launching["op_id"]
    parents = cpu["parent_id"]
    # The launching ops and their ancestors up to MAX_OP_ANCESTORS levels: the only ops whose
    # names the walk reads, so the only ones matched (a fifth of a training step's ops).
    levels = [parents.gather(ids)]
    for _ in range(MAX_OP_ANCESTORS - 1):
        levels.append(parents.gather(levels[-1]))
    visited = pl.concat([ids, *levels]).drop_nulls().unique()
    # Each op's matches as the bits of one integer: a level of the walk is then one gather
    # and one bitwise or, whatever the number of refinements.
    visited_names = visited.to_frame("op").select(name=pl.lit(cpu["name"]).gather(pl.col("op")))
    mask = visited_names.select(_op_matches(OP_REFINEMENTS)).to_series()
    own = pl.Series("mask", [0], pl.Int64).new_from_index(0, cpu.height).scatter(visited, mask)
    # The op's own matches or'ed with each level's, in one query (a gather, fill and or per
    # level as Series steps were ~0.8 ms, each a query of its own).
    cursors = pl.DataFrame(
        [ids.alias("level0"), *(c.alias(f"level{i + 1}") for i, c in enumerate(levels))]
    )
    matched = [pl.lit(own).gather(pl.col(c)).fill_null(0) for c in cursors.columns]
    reached = cursors.select(functools.reduce(operator.or_, matched).alias("mask"))
    found = reached.select(
        ((pl.col("mask") // (1 << i)) % 2 == 1).alias(f) for i, f in enumerate(flags)
    )
    names = cpu["name"].gather(ids)
    launch_op = [
        (names.str.contains(r.launch_op_pattern).fill_null(False) & found[f]).alias(f)
        for r, f in zip(OP_REFINEMENTS, flags, strict=True)
        if r.launch_op_pattern is not None
    ]
    return launching.hstack(found.with_columns(launch_op))


@cache  # per table (a test may swap it): the expression is immutable
def _op_matches(refinements: tuple[OpRefinement, ...]) -> pl.Expr:
    """An op ``name``'s matches of the refinements' op patterns, as the bits of one integer."""
    return pl.sum_horizontal(
        pl.col("name").str.contains(r.op_pattern).fill_null(False).cast(pl.Int64) * (1 << i)
        for i, r in enumerate(refinements)
    )


@dataclass
class _NameMemo:
    """The name-based category and precision of every (kind, name) this process classified.

    The rules' query costs ~12 ms however few names it reads (a fixed cost, mostly its
    regexes), as much as the rest of ``classify`` on a 15 MB rank; the ranks of one job, which
    a worker converts one after another, share their kernel names, so after the first the
    query runs only where a trace brings new names. A name's figures depend on the rule tables
    alone, whose identity keys the memo (a test that swaps a table gets fresh figures).
    """

    # The key and its frame in one tuple, replaced whole: threads see one pair or the other.
    entry: tuple[tuple[object, ...], pl.DataFrame] | None = None


_NAMES = _NameMemo()
# Past this many distinct names the memo starts afresh (each row is a name and two short
# strings: a few MB at most).
_NAMES_LIMIT = 50_000


def _rules_key(names: pl.DataFrame) -> tuple[object, ...]:
    tables = (OWN_NAME_RULES, NAME_RULES, KIND_CATEGORIES, GEMM_PRECISION_RULES)
    return (*map(id, tables), tuple(names.schema.items()))


def _by_name(gpu: pl.DataFrame) -> pl.DataFrame:
    """Per distinct (kind, name) of ``gpu`` (and others seen before): the name-based category
    and the precision its name says. Names repeat thousands of times; matching each distinct
    name once keeps the regex work proportional to the vocabulary, not to the number of
    launches (the precision too: a GEMM's is its name's, read per row only where the refined
    category is "gemm")."""
    names = gpu.select("kind", "name")
    key = _rules_key(names)
    entry = _NAMES.entry
    known = entry[1] if entry is not None and entry[0] == key else None
    if known is None or known.height > _NAMES_LIMIT:
        known = None
        new = names.unique()
    else:
        new = names.join(known, on=["kind", "name"], how="anti", nulls_equal=True).unique()
    if known is not None and new.height == 0:
        return known
    classified = new.with_columns(
        category_expr().alias(_NAME_CATEGORY), _name_precision_expr().alias(_NAME_PRECISION)
    )
    known = classified if known is None else pl.concat([known, classified])
    _NAMES.entry = (key, known)
    return known


def _refined_category() -> pl.Expr:
    """Apply ``OP_REFINEMENTS`` (first match wins) on top of the name-based category."""
    return _refined_category_of(OP_REFINEMENTS)


@cache  # per table (a test may swap it): building the chain cost ~0.5 ms a classify
def _refined_category_of(refinements: tuple[OpRefinement, ...]) -> pl.Expr:
    name_category = pl.col(_NAME_CATEGORY)
    chain: pl.Expr = name_category
    for index, refinement in reversed(tuple(enumerate(refinements))):
        applies = (pl.col("kind") == "kernel") & pl.col(_flag(index)).fill_null(False)
        if refinement.applies_to is not None:
            applies = applies & name_category.is_in(refinement.applies_to)
        if refinement.kernel_pattern is not None:
            applies = applies & pl.col("name").str.contains(refinement.kernel_pattern)
        chain = pl.when(applies).then(pl.lit(refinement.category)).otherwise(chain)
    return chain.cast(pl.String).alias("category")


def classify(gpu: pl.DataFrame, cpu: pl.DataFrame) -> pl.DataFrame:
    """Add ``category`` and ``gemm_precision`` (String) to the gpu frame of a trace.

    ``category`` follows the taxonomy of docs/architecture.md: the kernel's own name, then its full
    name decide (:func:`category_expr`), then the CPU op that launched the kernel refines
    ambiguous cases (``OP_REFINEMENTS``: copies under a transpose/contiguous, cuDNN's own
    kernels under cuDNN attention, GEMMs under a convolution, _safe_softmax's guard, SDPA
    math's mask add). ``gemm_precision`` is null except for GEMMs. Row order and the
    existing columns are kept.
    """
    require_columns(gpu, GPU_COLUMNS, "classify kernels", "trace.gpu, trace.cpu")
    require_columns(cpu, CPU_COLUMNS, "classify kernels", "trace.gpu, trace.cpu")
    lazy_gpu = gpu.lazy()
    by_name = _by_name(gpu).lazy()
    context = (
        _op_context_by_rows(gpu, cpu).lazy()
        if op_ids_are_rows(cpu)
        else _op_context_flags(lazy_gpu, cpu.lazy())
    )
    # The joins carry only the columns the rules read; the two results are put beside the
    # frame's own columns at the end (joining every column in cost as much as the rules).
    added = (
        lazy_gpu.select("kind", "name", "rank", "op_id")
        .join(by_name, on=["kind", "name"], how="left", nulls_equal=True, maintain_order="left")
        .join(context, on=["rank", "op_id"], how="left", maintain_order="left")
        .with_columns(_refined_category())
        .with_columns(_precision_if_gemm(pl.col(_NAME_PRECISION)))
        .select("category", "gemm_precision")
        .collect(engine=IN_MEMORY)
    )
    return gpu.drop("category", "gemm_precision", strict=False).hstack(added)
