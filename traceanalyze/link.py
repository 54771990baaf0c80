"""Linking: who launched each GPU activity, inside which ops, in which iteration.

Done once at load time, columnar throughout:

1. CPU intervals on each thread form a call tree. In call order (thread, start, longest first,
   annotation > op > call, then file order: a stable sort of one packed thread-and-start key,
   the rest deciding only between rows that share it) an interval's
   depth is its position minus the number of intervals that ended before it started (one
   as-of join over the sorted ends); its parent is then the last interval on the same thread,
   earlier in call order, one level up (an as-of join by one packed thread-and-level key).
   Every step is a sort or a walk over sorted keys: no hashing of strings, no binary search
   per row, Int64 keys wherever the trace's ranges allow (Polars sorts Int128 slowly).
2. A GPU activity joins its runtime/driver call on ``correlation``; the call's nearest ``cpu_op``
   ancestor is the launching op, its outermost user annotation the region.
3. Iterations come from ``ProfilerStep#N`` spans, else a repeated top-level annotation (the
   same name, or a numbered family such as ``attn_iter0``, ``attn_iter1``, ... or ``step_3``:
   ``NUMBERED_STEP``), else the whole trace is one iteration.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.ma
import polars as pl

from traceanalyze.schema import CPU_SCHEMA, GPU_SCHEMA, ITERATION_SCHEMA, null_series
from traceanalyze.trace import IterationSource

# numpy.ma is imported with the package, not by linking's first pl.Series of a NumPy array
# (Polars looks for a mask there, and NumPy imports the module on first use): 10-14 ms of
# one thread in every load, where every core is busy, or alone after the scan.

try:
    from traceanalyze import _tree
except ImportError:  # not built: the Polars steps (_columnar_depth, _parent_ids) do it all
    _tree = None

THREAD = ["rank", "pid", "tid"]
# A dense number per thread (rank, pid, tid), kept while linking and dropped by the final
# select: one integer sorts and joins faster than three columns.
THREAD_KEY = "thread_key"
RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
# Runtime and driver calls that put work on a GPU (CUDA and HIP), as traces name them.
LAUNCH_APIS = (
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel", "cuLaunchKernel",
    "cuLaunchKernelEx", "cudaGraphLaunch", "cudaMemcpyAsync", "cudaMemcpy", "cudaMemcpy2DAsync",
    "cudaMemcpyPeerAsync", "cudaMemsetAsync", "cudaMemset", "cuMemcpyAsync", "cuMemsetD32Async",
    "cuMemsetD8Async", "hipLaunchKernel", "hipExtLaunchKernel", "hipModuleLaunchKernel",
    "hipGraphLaunch", "hipMemcpyAsync", "hipMemcpyWithStream", "hipMemsetAsync",
    "hipExtModuleLaunchKernel", "hipMemset", "cuGraphLaunch",
)  # fmt: skip
# At most 18 digits: the step number must fit in an Int64 (a longer one is no step).
PROFILER_STEP = re.compile(r"^ProfilerStep#(\d{1,18})$")
# A numbered step marker: a step word (``STEP_WORDS``), an optional separator, then the step's
# number: `attn_iter0`, `step_3`, `train-step-12`, `call7`. Annotations of one such family are
# one repeated annotation, each numbered by its own number (`layer_0`, `layer_1` are not steps).
STEP_WORDS = ("iter", "iteration", "step", "batch", "epoch", "call", "round", "run", "repeat")
NUMBERED_STEP = re.compile(rf"^(.*(?:{'|'.join(STEP_WORDS)})[_#\-. ]?)(\d{{1,9}})$", re.IGNORECASE)
# Before user_annotation existed (torch <= 1.10) the step was recorded as an op (Operator).
STEP_CATS = ("user_annotation", "cpu_op")
# What the call order reads.
_CALL_ORDER_COLUMNS = frozenset({*THREAD, "ts_ns", "dur_ns", "cat"})
# At equal start and duration an annotation encloses an op, which encloses a runtime call.
_CAT_ORDER = {"user_annotation": 0, "cpu_op": 1, "cuda_runtime": 2, "cuda_driver": 3}
# Bits of a signed Int64 that the packed call-order key (rank, pid, tid, start) may use.
_PACKED_BITS = 63
# A runtime call's op chain is rarely deeper than a few levels; this bounds the ancestor walk.
_MAX_ANCESTOR_STEPS = 64


@dataclass(frozen=True)
class Linked:
    cpu: pl.DataFrame
    gpu: pl.DataFrame
    iterations: pl.DataFrame
    iteration_source: IterationSource


def link(cpu: pl.DataFrame, gpu: pl.DataFrame, rank: int) -> Linked:
    """Add the linking columns of CPU_SCHEMA and GPU_SCHEMA to freshly decoded frames."""
    # Hand the frame over without keeping a reference here: what the call tree replaces (the
    # decoder's chunks, the frame before its reorder) is then freed while it runs, and the
    # allocator reuses that memory instead of faulting in fresh pages (on a 2.5 GB trace,
    # page faults were half of linking's CPU time; see bench/RESULTS.md).
    handed = [cpu]
    del cpu
    cpu = with_call_tree(handed.pop())
    iterations, source = find_iterations(cpu, gpu, rank)
    cpu = cpu.with_columns(iteration=_iteration_of(cpu["ts_ns"], iterations, source))
    gpu = link_gpu(gpu, cpu, iterations, source)
    return Linked(
        cpu.select(pl.col(name).cast(dtype) for name, dtype in CPU_SCHEMA.items()),
        gpu.select(pl.col(name).cast(dtype) for name, dtype in GPU_SCHEMA.items()),
        iterations,
        source,
    )


def with_call_tree(cpu: pl.DataFrame) -> pl.DataFrame:
    """Sort CPU intervals into call order (thread, start, longest first), number them
    (``op_id``, equal to the row position) and add ``depth``, ``parent_id`` and ``THREAD_KEY``.

    Ties keep the frame's order: of two intervals on one thread with the same start, duration
    and category, the one decoded first encloses the other. The decoder keeps file order
    within a category, and Kineto writes a caller before its callee (``aten::detach`` before
    the ``detach`` it calls, both 2 us at one instant, in HTA's alexnet trace)."""
    # Every column in one chunk first: the decoder concatenates its parts without copying,
    # and gathering columns of several chunks into call order is slower than copying them
    # into one chunk (the frame's rechunk runs on every core, its columns side by side) and
    # gathering that: on the 175 MB bench trace, cold, 45-75 ms against 60-80 for its string
    # columns alone rechunked and 55-100 for none.
    cpu, schema = _without_empty_columns(cpu)
    cpu = cpu.rechunk()
    order, thread_key = call_order(cpu)
    cpu = _with_empty_columns(cpu[order], schema).with_row_index("op_id")
    cpu = cpu.with_columns(pl.col("op_id").cast(pl.Int64), thread_key.alias(THREAD_KEY))
    walked = _walked_call_tree(cpu)
    if walked is not None:
        return cpu.with_columns(walked)
    cpu = cpu.with_columns(depth=_columnar_depth(cpu))
    return cpu.with_columns(parent_id=_parent_ids(cpu))


def _without_empty_columns(cpu: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, pl.DataType]]:
    """``cpu`` without the columns that hold no value at all (besides those the call order
    reads), and the schema to put them back with :func:`_with_empty_columns`. The collective
    columns are null on every op of a trace without collectives, and copying a column of nulls
    into one chunk and then into call order costs as much as a column of values (its values
    and its null mask): 3 of 14 ms on the bench trace's 217k intervals."""
    counts = cpu.null_count().row(0, named=True)
    empty = [
        name
        for name, nulls in counts.items()
        if nulls == cpu.height and name not in _CALL_ORDER_COLUMNS
    ]
    if not empty:
        return cpu, {}
    # the frame made of the other columns, not a drop (a query, which rechunks every column)
    kept = pl.DataFrame([cpu.get_column(name) for name in cpu.columns if name not in empty])
    return kept, dict(cpu.schema)


def _with_empty_columns(cpu: pl.DataFrame, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """``cpu`` with the all-null columns of ``schema`` back in their place (none: as is)."""
    if not schema:
        return cpu
    height = cpu.height
    return cpu.select(
        pl.lit(null_series(name, height, dtype)) if name not in cpu.columns else pl.col(name)
        for name, dtype in schema.items()
    )


# Starts and durations within this many nanoseconds of zero (73 years) add up far inside 64
# bits in the C walk; anything further takes the Polars steps.
_WALK_LIMIT_NS = 1 << 61


def _walked_call_tree(cpu: pl.DataFrame) -> list[pl.Series] | None:
    """``depth`` and ``parent_id`` of ``cpu`` (call order, with THREAD_KEY) from one walk in C
    (``traceanalyze/_tree.c``, the definitions of :func:`_columnar_depth` and
    :func:`_parent_ids`): on a 15 MB rank the sorts and joins cost 5 ms, the walk a tenth.
    None where the extension is not built, a start is null or a time is beyond
    ``_WALK_LIMIT_NS``."""
    ts, dur = cpu["ts_ns"], cpu["dur_ns"]
    if _tree is None or not cpu.height or ts.null_count():
        return None
    extremes = [ts.min(), ts.max(), dur.min(), dur.max()]
    if any(v is not None and abs(v) >= _WALK_LIMIT_NS for v in extremes):
        return None
    if dur.null_count():
        known = dur.is_not_null().to_numpy().astype(np.uint8)
        dur = dur.fill_null(0)
    else:
        known = np.ones(cpu.height, dtype=np.uint8)
    depth, parent = _tree.call_tree(
        *(np.ascontiguousarray(s.to_numpy(), dtype=np.int64) for s in (cpu[THREAD_KEY], ts, dur)),
        known,
    )
    parents = np.frombuffer(parent, dtype=np.int64)
    return [
        pl.Series("depth", np.frombuffer(depth, dtype=np.int32)),
        pl.Series("parent_id", parents).set(pl.Series(parents < 0), None),
    ]


def call_order(cpu: pl.DataFrame) -> tuple[pl.Series, pl.Series | pl.Expr]:
    """Row positions of ``cpu`` in call order: by thread (rank, pid, tid), start, longest
    first, then annotation > op > call, then frame order (a stable sort); and each row's
    thread in that order, numbered from 1 (``THREAD_KEY``; an expression over the rows once
    in call order where the keys do not pack).

    Thread and start are packed into one Int64 key where their ranges fit in 63 bits (each
    from its least value, in the bits its range needs), sorted by :func:`_stable_order`;
    other traces (null threads or starts, or wider ranges) are sorted by Polars on the six
    keys, in the same order."""
    if not cpu.height:
        return pl.Series("order", [], pl.UInt32), pl.Series(THREAD_KEY, [], pl.Int64)
    packed = _packed_thread_and_start(cpu)
    if packed is None:
        keys = [*THREAD, "ts_ns", pl.col("dur_ns").fill_null(0), _category_rank()]
        longest_first = [False] * 4 + [True, False]
        order = cpu.select(
            pl.arg_sort_by(keys, descending=longest_first, maintain_order=True)
        ).to_series()
        # Threads are contiguous in call order: numbering them where the thread changes is
        # one pass (a dense rank of (rank, pid, tid) beforehand was a sort of its own).
        new_thread = pl.any_horizontal(pl.col(c).ne_missing(pl.col(c).shift()) for c in THREAD)
        return order, new_thread.cum_sum().cast(pl.Int64)
    key, start_bits = packed
    packed_keys = cpu.select(key).to_series().to_numpy()
    positions = _stable_order(packed_keys, cpu)
    # The thread is the key's bits above the start's; numbered in place (a 2 GB trace has
    # 2.6M intervals: each array of them is 21 MB at linking's peak of memory).
    threads = packed_keys[positions]
    np.right_shift(threads, start_bits, out=threads)
    thread_key = np.empty(len(positions), dtype=np.int64)
    thread_key[0] = 1
    np.not_equal(threads[1:], threads[:-1], out=thread_key[1:])
    del threads
    np.cumsum(thread_key, out=thread_key)
    # UInt32 as Polars' own sort gives: half the memory of NumPy's positions while the frame
    # is gathered (30 MB less peak on the 2 GB trace)
    return pl.Series("order", positions.astype(np.uint32)), pl.Series(thread_key)


def _stable_order(key: np.ndarray[Any, Any], cpu: pl.DataFrame) -> np.ndarray[Any, Any]:
    """Positions of ``cpu``'s rows in call order, given their packed thread-and-start ``key``.

    By the key alone first: NumPy's stable sort merges the runs it finds, and a trace's
    intervals come in long runs of increasing key (Kineto writes a thread's events mostly in
    start order: 123 descents in the bench trace's 217k intervals), so it costs 1 ms where
    Polars' sort by key and tie-break cost 10, and computing the tie-break of every row 3.
    Then the rows whose key is repeated (an interval and its callee starting at one instant)
    are re-sorted within their key by the tie-break (longest first, then the category),
    stably: frame order decides what is left."""
    order = np.argsort(key, kind="stable")
    by_key = key[order]
    repeated = by_key[1:] == by_key[:-1]
    if not repeated.any():
        return order
    in_group = np.zeros(len(key), dtype=bool)
    in_group[1:] |= repeated
    in_group[:-1] |= repeated
    group = np.cumsum(np.concatenate(([True], ~repeated)))
    rows = np.flatnonzero(in_group)
    tied = pl.Series(order[rows])
    ties = cpu.select(
        dur=pl.col("dur_ns").fill_null(0).gather(tied), rank=_category_rank().gather(tied)
    )
    # lexsort sorts by its last key first, stably: group, longest first (~dur: descending
    # without negation, which wraps at the least Int64), category
    within = np.lexsort((ties["rank"].to_numpy(), ~ties["dur"].to_numpy(), group[rows]))
    order[rows] = order[rows][within]
    return order


def _packed_thread_and_start(cpu: pl.DataFrame) -> tuple[pl.Expr, int] | None:
    """(rank, pid, tid, start) as one non-negative Int64 in the same order, and the bits of
    it that hold the start (the thread is the bits above); None where their ranges need more
    than ``_PACKED_BITS`` bits or one of them is null."""
    columns = [*THREAD, "ts_ns"]
    ranges = cpu.select(
        *(pl.col(c).min().alias(f"{c}_min") for c in columns),
        *(pl.col(c).max().alias(f"{c}_max") for c in columns),
        nulls=pl.sum_horizontal(pl.col(c).null_count() for c in columns),
    ).row(0, named=True)
    if ranges["nulls"]:
        return None
    widths = [int(ranges[f"{c}_max"] - ranges[f"{c}_min"]).bit_length() for c in columns]
    if sum(widths) > _PACKED_BITS:
        return None
    least: dict[str, int] = {c: ranges[f"{c}_min"] for c in columns}

    # Constant columns (width 0) add nothing; the first varying one is not shifted, so every
    # shift is at most 62 bits and the key stays Int64 (a literal 1 << 63 made it Int128).
    def offset(column: str) -> pl.Expr:
        return pl.col(column).cast(pl.Int64) - least[column]

    key: pl.Expr | None = None
    for column, width in zip(columns, widths, strict=True):
        if width:
            key = offset(column) if key is None else key * (1 << width) + offset(column)
    # every row on one thread at one instant: the start's offset, 0 on each row
    return (offset("ts_ns") if key is None else key), widths[-1]


def _category_rank() -> pl.Expr:
    """``_CAT_ORDER`` of each row's category (9 for any other): string comparisons with the
    four names cost half a hashed ``replace_strict`` on 3M rows."""
    rank = pl.lit(9, pl.Int64)
    for cat, order in reversed(_CAT_ORDER.items()):
        rank = pl.when(pl.col("cat") == cat).then(pl.lit(order, pl.Int64)).otherwise(rank)
    return rank


# Boundary keys: thread in the high 64 bits, twice the time in the low ones, so that an end at
# an instant (even key) sorts before a start there (same key, counted by side="right") and a
# zero-length interval's own end (odd key) after it.
_THREAD_STRIDE = 1 << 64
# Bits of a signed Int64 that a boundary key may use; wider traces take Int128 keys.
_DEPTH_KEY_BITS = 62


def nesting_depth(intervals: pl.DataFrame) -> pl.Series:
    """Depth of each interval among the intervals of its thread (0 = root): by the C walk
    where it takes ``intervals``, else by :func:`_columnar_depth` (which defines it)."""
    walked = _walked_call_tree(intervals)
    return _columnar_depth(intervals) if walked is None else walked[0]


def _columnar_depth(intervals: pl.DataFrame) -> pl.Series:
    """Depth of each interval among the intervals of its thread (0 = root).

    ``intervals`` must be in call order: by ``THREAD_KEY``, then start, longest first. Then an
    interval's depth is the number of earlier intervals on its thread still open at its start:
    its position minus the number of intervals closed by then. Keys put each thread above all
    earlier ones, so every interval of an earlier thread counts as closed and one
    count over all threads' sorted ends does every thread at once. At equal times
    an end closes before a start opens (back-to-back siblings do not nest) and a zero-length
    interval stays open at its own instant (what starts there too is its child).
    """
    if not intervals.height:
        return pl.Series("depth", [], pl.Int32)
    origin = intervals["ts_ns"].min()
    # Int64 keys where thread, twice the time and the zero-length bit fit in 63 bits (every
    # trace up to days long): they sort in 0.6x the time of Int128 keys on 3M intervals. The
    # bound is taken in Python integers, which cannot overflow.
    bounds = intervals.select(
        pl.col("ts_ns").max(), pl.col("dur_ns").clip(lower_bound=0).max(), pl.col(THREAD_KEY).max()
    ).row(0)
    last_end = int(bounds[0] or 0) - int(origin or 0) + int(bounds[1] or 0)  # type: ignore[arg-type]
    time_bits = (2 * last_end + 1).bit_length()
    wide = time_bits + int(bounds[2] or 0).bit_length() > _DEPTH_KEY_BITS
    dtype = pl.Int128 if wide else pl.Int64
    stride = _THREAD_STRIDE if wide else 1 << time_bits
    thread = pl.col(THREAD_KEY).cast(dtype) * stride
    start = pl.col("ts_ns").cast(dtype) - origin
    length = pl.col("dur_ns").fill_null(0).clip(lower_bound=0).cast(dtype)
    keys = intervals.select(
        start=thread + 2 * start,
        end=thread + 2 * (start + length) + (length == 0).cast(dtype),
    )
    ends = keys["end"].sort()
    if wide or keys["start"].null_count():
        closed = ends.search_sorted(keys["start"], side="right").cast(pl.Int64)
    else:
        closed = _count_at_or_below(ends, keys["start"])
    position = pl.int_range(intervals.height, dtype=pl.Int64, eager=True)
    return (position - closed).cast(pl.Int32).alias("depth")


def _count_at_or_below(ends: pl.Series, starts: pl.Series) -> pl.Series:
    """For each of the sorted ``starts``, how many of the sorted ``ends`` are at or below it:
    an as-of join walks both once, where ``search_sorted`` searches per start (4x the time
    on 3M intervals)."""
    counted = pl.DataFrame({"key": ends}).with_row_index("closed", offset=1)
    joined = pl.DataFrame({"key": starts}).join_asof(
        counted, on="key", strategy="backward", check_sortedness=False
    )
    return joined["closed"].fill_null(0).cast(pl.Int64)


def _parent_ids(cpu: pl.DataFrame) -> pl.Series:
    """The last interval before each one (call order) on its thread at one level up."""
    # Thread and level as one group key (a level above every depth per thread, so that roots,
    # which ask for level -1, find nothing): an as-of join by one Int64 takes 0.6x the time
    # of one by two columns.
    levels = int(cpu["depth"].max() or 0) + 2  # type: ignore[arg-type]
    group = pl.col(THREAD_KEY) * levels + pl.col("depth")
    children = cpu.select("ts_ns", group=group, order="op_id")  # one level up: group - 1 + 1
    candidates = cpu.select(
        group=group + 1,
        order="op_id",
        parent_id="op_id",
        parent_end=pl.col("ts_ns") + pl.col("dur_ns"),
    )
    joined = children.join_asof(
        candidates,
        on="order",
        by="group",
        strategy="backward",
        allow_exact_matches=False,
        check_sortedness=False,
    )
    # A parent must still be open when the child starts; clock rounding can break nesting.
    return joined.select(
        pl.when(pl.col("parent_end") >= pl.col("ts_ns")).then("parent_id").alias("parent_id")
    ).to_series()


def find_iterations(
    cpu: pl.DataFrame, gpu: pl.DataFrame, rank: int
) -> tuple[pl.DataFrame, IterationSource]:
    """Iteration spans and how they were found (see the module docstring)."""
    # The regular expression only on the rows left by the cheap tests (see _STEP_PREFIX).
    steps = cpu.filter(_cat_is(STEP_CATS) & _may_be_profiler_step()).filter(_is_profiler_step())
    if steps.height:
        frame = steps.select(
            "rank",
            pl.col("name").str.extract(PROFILER_STEP.pattern).cast(pl.Int64).alias("iteration"),
            "name",
            "ts_ns",
            "dur_ns",
        )
        return _iteration_frame(frame), IterationSource.PROFILER_STEP
    repeated = _repeated_top_annotation(cpu)
    if repeated is not None:
        name, spans = repeated
        frame = spans.select("rank", "iteration", "name", "ts_ns", "dur_ns")
        return _iteration_frame(frame), IterationSource.named(IterationSource.ANNOTATION, name)
    return _whole_trace(cpu, gpu, rank), IterationSource.WHOLE_TRACE


def _cat_is(categories: tuple[str, ...]) -> pl.Expr:
    """Whether ``cat`` is one of ``categories``: a comparison each, which costs two thirds of
    ``is_in``'s hashing of every row's text (0.6 against 0.9 ms on 217k intervals)."""
    return pl.any_horizontal(pl.col("cat") == category for category in categories)


def _is_profiler_step() -> pl.Expr:
    return pl.col("name").str.contains(PROFILER_STEP.pattern)


# What every ProfilerStep#N name starts with: a prefix test costs a fifth of the regular
# expression on 3M names, which then runs only on the few rows that pass it.
_STEP_PREFIX = "ProfilerStep#"


def _may_be_profiler_step() -> pl.Expr:
    return pl.col("name").str.starts_with(_STEP_PREFIX)


def ops_not_steps(cpu: pl.DataFrame) -> pl.Series:
    """Whether each row is a ``cpu_op`` other than a ``ProfilerStep#N`` (the launching op)."""
    is_op = cpu.select((pl.col("cat") == "cpu_op").fill_null(value=False)).to_series()
    maybe = cpu.select(_may_be_profiler_step().fill_null(value=False)).to_series() & is_op
    rows = maybe.arg_true()
    if not len(rows):
        return is_op
    steps = cpu["name"].gather(rows).str.contains(PROFILER_STEP.pattern)
    return is_op.scatter(rows, ~steps)


def _iteration_frame(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sort("ts_ns").cast(ITERATION_SCHEMA)  # type: ignore[arg-type]


# How deep under other annotations a numbered step family is looked for when no root-level
# annotation repeats (``record_function("bench")`` around ``step_0`` .. ``step_9``).
NUMBERED_STEP_MAX_DEPTH = 3


def _repeated_top_annotation(cpu: pl.DataFrame) -> tuple[str, pl.DataFrame] | None:
    """The most repeated root-level user annotation (at least twice), with its spans and each
    span's ``iteration``: a numbered family (``NUMBERED_STEP`` with two or more numbers) is one
    annotation named ``<prefix><N>`` whose spans keep their own numbers (when those are unique
    on each rank); another repeated name is numbered 0, 1, ... in time order. Where no root
    annotation repeats, a numbered family nested under one (up to ``NUMBERED_STEP_MAX_DEPTH``
    deep) is taken: the loop wrapped in one outer region."""
    found = _annotation_family(cpu, 0, numbered_only=False)
    for depth in range(1, NUMBERED_STEP_MAX_DEPTH + 1):
        if found is not None:
            break
        found = _annotation_family(cpu, depth, numbered_only=True)
    return found


def _annotation_family(
    cpu: pl.DataFrame, depth: int, *, numbered_only: bool
) -> tuple[str, pl.DataFrame] | None:
    """The most repeated user annotation family at ``depth`` (see
    :func:`_repeated_top_annotation`), only numbered families if ``numbered_only``."""
    roots = cpu.filter((pl.col("cat") == "user_annotation") & (pl.col("depth") == depth))
    parts = pl.col("name").str.extract_groups(NUMBERED_STEP.pattern)
    keyed = roots.with_columns(
        _prefix=pl.when(pl.col("name").str.contains(NUMBERED_STEP.pattern)).then(
            parts.struct.field("1")
        ),
        _number=parts.struct.field("2").cast(pl.Int64, strict=False),
    ).with_columns(
        _numbered=pl.col("_number").n_unique().over("_prefix") >= 2,
    )
    named = pl.col("_numbered") & pl.col("_prefix").is_not_null()
    if numbered_only:
        keyed = keyed.filter(named)
    keyed = keyed.with_columns(
        _family=pl.when(named).then(pl.col("_prefix") + "<N>").otherwise(pl.col("name"))
    )
    counts = (
        keyed.group_by("_family")
        .agg(n=pl.len(), total=pl.col("dur_ns").sum())
        .filter(pl.col("n") >= 2)
        .sort(["n", "total", "_family"], descending=[True, True, False])
    )
    if not counts.height:
        return None
    family = counts.item(0, "_family")
    spans = keyed.filter(pl.col("_family") == family).sort("ts_ns")
    in_order = pl.int_range(pl.len(), dtype=pl.Int64).over("rank")
    own = pl.col("_number").is_not_null().all() & pl.col("_number").is_unique().all()
    numbered = spans.with_columns(
        iteration=pl.when(own.over("rank") & pl.col("_numbered"))
        .then("_number")
        .otherwise(in_order)
    )
    return family, numbered.drop("_prefix", "_number", "_numbered", "_family")


def _whole_trace(cpu: pl.DataFrame, gpu: pl.DataFrame, rank: int) -> pl.DataFrame:
    spans = pl.concat(
        [cpu.select("ts_ns", "dur_ns"), gpu.select("ts_ns", "dur_ns")], how="vertical"
    )
    start = spans["ts_ns"].min()
    end = (spans["ts_ns"] + spans["dur_ns"]).max()
    frame = pl.DataFrame(
        {
            "rank": [rank],
            "iteration": [0],
            "name": ["whole trace"],
            "ts_ns": [start],
            "dur_ns": [None if start is None or end is None else end - start],  # type: ignore[operator]
        }
    )
    return frame.cast(ITERATION_SCHEMA)  # type: ignore[arg-type]


def _iteration_of(ts_ns: pl.Series, iterations: pl.DataFrame, source: IterationSource) -> pl.Series:
    """The iteration whose span holds each timestamp (null outside every span)."""
    if source is IterationSource.WHOLE_TRACE:
        return _first_iteration(len(ts_ns)).set(ts_ns.is_null(), None)
    spans = iterations.select("ts_ns", "iteration", end=pl.col("ts_ns") + pl.col("dur_ns"))
    if spans.null_count().sum_horizontal().item():
        return _iteration_by_polars(ts_ns, spans)
    # Spans are sorted by start: the candidate is the last one starting at or before ts. In
    # NumPy: Polars' search_sorted and two gathers took 5 ms on 217k ops, this 1.5.
    starts, ends = spans["ts_ns"].to_numpy(), spans["end"].to_numpy()
    times = ts_ns.fill_null(0).to_numpy()
    slot = np.searchsorted(starts, times, side="right") - 1
    inside = slot >= 0
    np.maximum(slot, 0, out=slot)
    inside &= times < ends[slot]
    if ts_ns.null_count():
        inside &= ts_ns.is_not_null().to_numpy()
    iteration = pl.Series("iteration", spans["iteration"].to_numpy()[slot])
    return iteration if inside.all() else iteration.set(pl.Series(~inside), None)


def _iteration_by_polars(ts_ns: pl.Series, spans: pl.DataFrame) -> pl.Series:
    """:func:`_iteration_of` where a span has a null start, end or number."""
    slots = spans["ts_ns"].search_sorted(ts_ns, side="right").cast(pl.Int64) - 1
    slot = pl.when(pl.col("ts").is_not_null() & (pl.col("slot") >= 0)).then("slot")
    return (
        pl.DataFrame({"ts": ts_ns, "slot": slots})
        .select(
            pl.when(pl.col("ts") < pl.lit(spans["end"]).gather(slot))
            .then(pl.lit(spans["iteration"]).gather(slot))
            .alias("iteration")
        )
        .to_series()
    )


def _first_iteration(height: int) -> pl.Series:
    """Iteration 0 on every row (a whole trace is one iteration)."""
    return pl.Series("iteration", [0], pl.Int64).new_from_index(0, height)


def link_gpu(
    gpu: pl.DataFrame, cpu: pl.DataFrame, iterations: pl.DataFrame, source: IterationSource
) -> pl.DataFrame:
    """Join GPU activities to their launch call, launching op, annotation and iteration."""
    # The few columns first: filtering and deduplicating every column of the CPU frame took
    # 0.2-0.3 CPU s of a 2 GB trace's linking (0.11-0.13 s so).
    # A loaded trace is one rank: then the correlation alone is the key (a join and a
    # deduplication by (rank, correlation) cost 2x those by one integer).
    keys = ["correlation"] if _one_rank(cpu, gpu) else ["rank", "correlation"]
    calls = (
        cpu.select(
            *keys,
            pl.col("name").alias("launch_api"),
            pl.col("ts_ns").alias("launch_ts_ns"),
            pl.col("dur_ns").alias("launch_dur_ns"),
            pl.col("tid").alias("launch_tid"),
            pl.col("op_id").alias("call_id"),
            is_call=_cat_is(RUNTIME_CATS) & pl.col("correlation").is_not_null(),
        )
        .filter("is_call")
        .drop("is_call")
        # The first call of each correlation: a third of the time of unique(maintain_order).
        .filter(
            pl.struct(keys).is_first_distinct()
            if len(keys) > 1
            else pl.col(keys[0]).is_first_distinct()
        )
    )
    gpu = gpu.join(calls, on=keys, how="left").with_columns(linked=pl.col("call_id").is_not_null())
    ops = nearest_ancestor(cpu, gpu["call_id"], pl.lit(ops_not_steps(cpu)))
    gpu = gpu.with_columns(
        op_id=ops,
        op_name=cpu["name"].gather(ops),
        annotation=outermost_annotation(cpu, gpu["call_id"]),
    )
    if source is IterationSource.WHOLE_TRACE:
        iteration = _first_iteration(gpu.height)
    else:
        iteration = _iteration_of(gpu["launch_ts_ns"], iterations, source)
    return gpu.with_columns(iteration=iteration)


def _one_rank(*frames: pl.DataFrame) -> bool:
    """Whether every row of ``frames`` has one and the same rank (not null)."""
    # Each frame's extremes (a concatenation of the columns first cost 0.4 ms on 240k rows)
    rank = pl.col("rank")
    seen: set[int] = set()
    for frame in frames:
        low, high, nulls = frame.select(
            rank.min(), rank.max().alias("max"), rank.null_count().alias("nulls")
        ).row(0)
        if nulls:
            return False
        seen.update(value for value in (low, high) if value is not None)
    return len(seen) <= 1


def nearest_ancestor(cpu: pl.DataFrame, start_ids: pl.Series, matches: pl.Expr) -> pl.Series:
    """For each id, its nearest strict ancestor whose row satisfies ``matches``, else null.

    Walks the parent pointers of all rows at once, one level per step. ``op_id`` is the row
    position in ``cpu`` (for a combined multi-rank trace too), so a step is a gather; each step
    moves only the rows still walking (most stop at their parent), so the work is the number
    of levels walked, not the rows times the deepest walk. The steps are NumPy array indexing:
    the same steps as Polars Series methods cost ~0.1 ms each however few the rows (each runs
    a query), which made this walk most of linking's time on a small trace.
    """
    parents = cpu["parent_id"].fill_null(_NO_ROW).to_numpy()
    hits = cpu.select(matches.fill_null(value=False)).to_series().to_numpy()
    starts = start_ids.cast(pl.Int64).fill_null(_NO_ROW).to_numpy()
    found = np.full(len(starts), _NO_ROW, dtype=np.int64)
    rows = np.flatnonzero(starts >= 0)
    cursor = parents[starts[rows]]
    for _ in range(_MAX_ANCESTOR_STEPS):
        walking = cursor >= 0
        rows, cursor = rows[walking], cursor[walking]
        if not len(rows):
            break
        hit = hits[cursor]
        found[rows[hit]] = cursor[hit]
        rows, cursor = rows[~hit], parents[cursor[~hit]]
    return pl.Series("op_id", found).set(pl.Series(found < 0), None)


# A missing row (null id) in the NumPy walks: ids are row positions, never negative.
_NO_ROW = -1


def outermost_annotation(cpu: pl.DataFrame, start_ids: pl.Series) -> pl.Series:
    """Name of the outermost user annotation (not ProfilerStep#N) enclosing each call."""
    # Two filters: the regular expression then runs on the annotations alone.
    regions = cpu.filter(pl.col("cat") == "user_annotation").filter(~_is_profiler_step())
    if not regions.height:
        return null_series("annotation", len(start_ids), pl.String)
    top = regions.filter(nesting_depth(regions) == 0)  # regions keep cpu's call order
    # gather, not [ ]: a kernel whose launch is not in the trace has a null start id
    calls = cpu.select(pl.col(THREAD_KEY, "ts_ns", "dur_ns").gather(start_ids)).with_row_index(
        "row"
    )
    spans = top.select(
        THREAD_KEY,
        pl.col("ts_ns").alias("start"),
        (pl.col("ts_ns") + pl.col("dur_ns")).alias("end"),
        pl.col("name").alias("annotation"),
    ).sort("start")
    joined = (
        calls.filter(pl.col("ts_ns").is_not_null())
        .sort("ts_ns")
        .join_asof(
            spans,
            left_on="ts_ns",
            right_on="start",
            by=THREAD_KEY,
            strategy="backward",
            check_sortedness=False,
        )
        .select(
            "row",
            pl.when(pl.col("ts_ns") + pl.col("dur_ns") <= pl.col("end")).then("annotation"),
        )
    )
    # Back to the order of start_ids by a scatter (a join on the row number and a sort took
    # three times as long).
    annotation = null_series("annotation", len(start_ids), pl.String)
    return annotation.scatter(joined["row"], joined["annotation"]).alias("annotation")
