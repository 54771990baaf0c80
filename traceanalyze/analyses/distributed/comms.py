"""`comms`: every collective call with its size, time, algorithm and bus bandwidth; per kind
and size bucket the count, time and median bus bandwidth against the link's peak.

A call is an NCCL/RCCL kernel (category ``communication``) or, for collectives that run on the
CPU (Gloo), a ``record_param_comms`` op that launched no kernel. Its args (collective name,
In/Out msg nelems, dtype, group size) come from the kernel (newer traces) or from the
``record_param_comms`` op that launched it; its kind, where no args name it, from the c10d op
above it or the kernel's name. Rules: :mod:`comms_rules`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import polars as pl

from traceanalyze.analyses.activities import classified_activities, iteration_count, per_trace
from traceanalyze.analyses.cputree import op_chains
from traceanalyze.analyses.distributed.comms_rules import (
    BUS_FACTORS,
    BYTES_SOURCES,
    DTYPE_BYTES,
    GROUP_FROM_RATIO,
    GROUP_SOURCES,
    INPUT_TYPE_DTYPES,
    KIND_RULES,
    LINK_PEAKS,
    NCCL_ANNOTATION_PREFIX,
    SIZE_BUCKETS,
)
from traceanalyze.analyses.iterations import on_counted
from traceanalyze.analyses.roofline.formulas import SHAPES_PATTERN, STRINGS_PATTERN
from traceanalyze.display import Shown
from traceanalyze.query import IN_MEMORY
from traceanalyze.trace import Trace

COMMUNICATION = "communication"
PARAM_COMMS = "record_param_comms"
# The trace's columns of a collective's args (schema.COMM_SCHEMA) and the names used here.
ARGS = {
    "comm_in_nelems": "in_msg_nelems",
    "comm_out_nelems": "out_msg_nelems",
    "comm_group_size": "group_size",
    "comm_dtype": "dtype",
}
CALL_COLUMNS = (
    "collective", "dtype", "group_size", "bytes", "us", "algbw_gbps", "busbw_gbps", "iteration",
    "rank", "name", "on", "size_bucket", "bytes_source", "group_size_source", "ts_ns",
)  # fmt: skip
NO_ARGS = (
    "this trace does not record the collectives' sizes (the `In msg nelems`, `Out msg "
    "nelems`, `dtype` and `Group size` args of record_param_comms ops or NCCL kernels, written "
    "by PyTorch 2.1 and later): bandwidths are unknown"
)
NO_GROUP = (
    "this trace does not record the collectives' group sizes (the `Group size` arg, written by "
    "PyTorch 2.1 and later): bus bandwidths are unknown; sizes come from the recorded shapes "
    "(`bytes_source`)"
)
SOME_WITHOUT_BYTES = (
    "collective calls record neither their size (`In msg nelems`, `Out msg nelems`, `dtype`) nor "
    "shapes: their bandwidths are unknown"
)
SOME_WITHOUT_GROUP = (
    "collective calls do not record their group size (the `Group size` arg): their bus "
    "bandwidths are unknown"
)
GROUP_FROM_JOB = (
    "collective calls do not record their group size: it is taken from the trace's "
    "distributedInfo (`group_size_source`: pg_config, the one size of its process groups of "
    "more than one rank; world_size, where no call shows a group of another size)"
)
NO_CALLS = "no collective calls in this trace (no NCCL/RCCL kernels or record_param_comms ops)"


@dataclass(frozen=True, repr=False)  # Shown: a short repr, tables in Jupyter
class Comms(Shown):
    """The collective calls of a trace and their summary per kind and size bucket."""

    calls: pl.DataFrame  # CALL_COLUMNS, one row per call, in time order
    by_kind: pl.DataFrame  # collective, size_bucket, count, us_per_iter, busbw_gbps_median, ...
    notes: tuple[str, ...]  # what the trace lacks, said once


@per_trace
@on_counted
def comms(trace: Trace) -> Comms:
    """Collective calls and their bandwidth (README, "Collectives")."""
    every = collective_calls(trace)
    # The counted steps' calls only: with --iterations/--skip the table and its medians are
    # of the steps asked for; calls outside every counted step are told, not mixed in.
    calls = every.filter(pl.col("iteration").is_not_null())
    outside = every.height - calls.height
    left_out = (f"{outside} of {every.height} {OUTSIDE_STEPS}",) if outside and calls.height else ()
    return Comms(
        calls=calls.select(CALL_COLUMNS),
        by_kind=_by_kind(calls, _link_peaks(trace), iteration_count(trace)),
        notes=_notes(calls if calls.height else every) + left_out,
    )


@per_trace
@on_counted
def collective_calls(trace: Trace) -> pl.DataFrame:
    """:func:`comms`' calls with the columns its summary reads too, without the summary: for
    ``ranks``, which reads only the calls' bus bandwidth (the summary and notes are ~2 ms of a
    15 MB rank's collectives)."""
    # Two queries (in-memory engine): the calls, then their sizes and bandwidth once the
    # calls say which need the shapes; as eager steps they were ~20 queries.
    calls = pl.concat([_gpu_calls(trace), _cpu_calls(trace)]).collect(engine=IN_MEMORY)
    sizes = _sizes_from_shapes(trace, _without_args(calls))
    return (
        _with_bandwidth(
            calls.lazy().join(sizes.lazy(), on="op_id", how="left"), _job_groups(trace).lazy()
        )
        .filter(pl.col("collective") != "")
        .sort("rank", "ts_ns")
        .collect(engine=IN_MEMORY)
    )


def _job_groups(trace: Trace) -> pl.DataFrame:
    """Per rank, what its ``distributedInfo`` says of group sizes: ``pg_size``, the size of
    every process group of more than one rank in ``pg_config`` where they all have one size
    (tl_b200_eager: groups of 8 and of 1; a collective over one rank moves nothing), and
    ``world_size`` where no process group has another size."""
    rows = []
    for meta in trace.meta:  # one per rank: a handful
        info = meta.distributed_info
        groups = info.get("pg_config")
        sizes = {
            g.get("pg_size")
            for g in (groups if isinstance(groups, list) else [])
            if isinstance(g, dict) and isinstance(g.get("pg_size"), int) and g["pg_size"] > 1
        }
        world = info.get("world_size")
        known_world = isinstance(world, int) and world > 1 and sizes <= {world}
        rows.append(
            {
                "rank": meta.rank,
                "pg_size": sizes.pop() if len(sizes) == 1 else None,
                # Process groups of other sizes: the world is not every call's group.
                "world_size": world if known_world else None,
            }
        )
    schema = {"rank": pl.Int32, "pg_size": pl.Int64, "world_size": pl.Int64}
    return pl.DataFrame(rows, schema=schema)


@functools.cache  # an expression is immutable; building this one cost ~0.1 ms (its dict)
def _bytes_from_args() -> pl.Expr:
    """A call's bytes from its args: elements (the larger of in and out) times the dtype's."""
    nelems = pl.max_horizontal("in_msg_nelems", "out_msg_nelems")
    element = pl.col("dtype").replace_strict(DTYPE_BYTES, default=None, return_dtype=pl.Int64)
    return nelems * element


def _without_args(calls: pl.DataFrame) -> pl.Series:
    """The launching ops of the calls whose args give no bytes or no dtype: only those read
    the recorded shapes (:func:`_with_bandwidth` takes the args' where they are; newer traces
    record them on every call, and the shapes' JSON decoding is ~6 ms of a 15 MB rank)."""
    lacking = _bytes_from_args().is_null() | pl.col("dtype").is_null()
    return calls.filter(lacking)["op_id"]


OUTSIDE_STEPS = "collective calls ran outside the counted steps and are left out"


def _notes(calls: pl.DataFrame) -> tuple[str, ...]:
    """What the calls lack, said once: for all of them, or for how many of them (a trace can
    mix NCCL calls that carry their args with others, e.g. symmetric-memory all_reduces, that
    only have shapes)."""
    if not calls.height:
        return (NO_CALLS,)
    no_bytes = calls["bytes"].is_null()
    if no_bytes.all():
        return (NO_ARGS,)
    if calls["group_size"].is_null().all():
        return (NO_GROUP,)
    notes = []
    if no_bytes.any():
        notes.append(f"{no_bytes.sum()} of {calls.height} {SOME_WITHOUT_BYTES}")
    no_group = calls["group_size"].is_null() & ~no_bytes
    if no_group.any():
        notes.append(f"{no_group.sum()} of {calls.height} {SOME_WITHOUT_GROUP}")
    from_job = calls["group_size_source"].is_in(list(GROUP_SOURCES[3:]))
    if from_job.any():
        notes.append(f"{from_job.sum()} of {calls.height} {GROUP_FROM_JOB}")
    return tuple(notes)


@on_counted
def comm_calls(trace: Trace) -> pl.DataFrame:
    return comms(trace).calls


@on_counted
def comm_summary(trace: Trace) -> pl.DataFrame:
    return comms(trace).by_kind


def _gpu_calls(trace: Trace) -> pl.LazyFrame:
    kernels = classified_activities(trace).filter(pl.col("category") == COMMUNICATION)
    launched_by = trace.cpu.lazy().select(
        "op_id", *(pl.col(a).alias(f"op_{a}") for a in [*ARGS, "comm_name"])
    )
    joined = kernels.lazy().join(launched_by, on="op_id", how="left", maintain_order="left")
    return _with_c10d(trace, kernels, joined).select(
        *_CALL_COLUMNS,
        *(pl.coalesce(a, f"op_{a}").alias(name) for a, name in ARGS.items()),
        raw=pl.coalesce("comm_name", "op_comm_name", "c10d", "name"),
        on=pl.lit("gpu"),
    )


def _with_c10d(trace: Trace, kernels: pl.DataFrame, joined: pl.LazyFrame) -> pl.LazyFrame:
    """``c10d``: per kernel, the c10d op above its launch, which names the collective where
    no args do."""
    if not kernels["comm_name"].null_count():
        # Every kernel names its collective, so `raw` reads no c10d name: the walk up the
        # call tree (~4 ms of a 15 MB rank) is skipped.
        return joined.with_columns(c10d=pl.lit(None, pl.String))
    rows = joined.collect(engine=IN_MEMORY)
    c10d = op_chains(trace.cpu, rows["op_id"]).list.eval(
        pl.element().filter(pl.element().str.starts_with("c10d::"))
    )
    return rows.lazy().with_columns(c10d=c10d.list.last())


def _cpu_calls(trace: Trace) -> pl.LazyFrame:
    """record_param_comms ops that launched no kernel: collectives run by the CPU (Gloo)."""
    launched = classified_activities(trace).lazy().select("op_id").drop_nulls()
    ops = (
        trace.cpu.lazy()
        .filter((pl.col("name") == PARAM_COMMS) & pl.col("comm_name").is_not_null())
        .join(launched, on="op_id", how="anti")
    )
    return ops.select(
        *_CALL_COLUMNS,
        *(pl.col(a).alias(name) for a, name in ARGS.items()),
        raw="comm_name",
        on=pl.lit("cpu"),
    )


# What a collective call keeps of its kernel (on the GPU) or of its op (on the CPU, Gloo).
_CALL_COLUMNS = ("rank", "op_id", "iteration", "ts_ns", "dur_ns", "name")


def _sizes_from_shapes(trace: Trace, op_ids: pl.Series) -> pl.DataFrame:
    """Per launching op (``op_id``): the bytes and dtype of the largest tensor among the
    recorded shapes of the op, its parent and its ``nccl:`` annotation, and which of them gave
    it (``shape_source``, comms_rules.BYTES_SOURCES). For traces whose collectives carry no
    ``In/Out msg nelems``."""
    cpu = trace.cpu
    launch = op_ids.drop_nulls().unique().to_frame("op_id")
    if not launch.height:  # every call has its args: the same empty frame, without the queries
        return pl.DataFrame(schema={"op_id": op_ids.dtype, **_SHAPE_SIZES})
    parents = launch.join(cpu.select("op_id", "parent_id"), on="op_id").drop_nulls()
    annotations = cpu.filter(
        pl.col("name").str.starts_with(NCCL_ANNOTATION_PREFIX)
        & pl.col("parent_id").is_in(launch["op_id"].implode())
    )
    shapes = cpu.select("op_id", "input_dims", "input_types")
    candidates = pl.concat(
        [
            launch.join(shapes, on="op_id").with_columns(source=pl.lit(BYTES_SOURCES[1])),
            parents.join(shapes, left_on="parent_id", right_on="op_id")
            .drop("parent_id")
            .with_columns(source=pl.lit(BYTES_SOURCES[2])),
            annotations.select(
                pl.col("parent_id").alias("op_id"),
                "input_dims",
                "input_types",
                source=pl.lit(BYTES_SOURCES[3]),
            ),
        ]
    )
    readable = pl.col("input_dims").str.contains(SHAPES_PATTERN) & pl.col(
        "input_types"
    ).str.contains(STRINGS_PATTERN)
    tensors = (
        candidates.filter(readable)
        .with_columns(
            dims=pl.col("input_dims").str.json_decode(pl.List(pl.List(pl.Int64))),
            types=pl.col("input_types").str.json_decode(pl.List(pl.String)),
        )
        .filter(pl.col("dims").list.len() == pl.col("types").list.len())
        .explode("dims", "types")
        .with_columns(
            shape_dtype=pl.col("types").replace_strict(
                INPUT_TYPE_DTYPES, default=None, return_dtype=pl.String
            )
        )
        .filter(pl.col("shape_dtype").is_not_null())
        .with_columns(
            shape_bytes=pl.col("dims").list.eval(pl.element().product()).list.first()
            * pl.col("shape_dtype").replace_strict(DTYPE_BYTES, return_dtype=pl.Int64),
            priority=pl.col("source").replace_strict(
                {s: i for i, s in enumerate(BYTES_SOURCES)}, return_dtype=pl.Int64
            ),
        )
    )
    # The largest tensor; of equal ones, the source nearest the collective's own args.
    largest = (
        tensors.sort(["op_id", "shape_bytes", "priority"], descending=[False, True, False])
        .group_by("op_id", maintain_order=True)
        .first()
        .select("op_id", "shape_bytes", "shape_dtype", shape_source="source")
    )
    return largest.join(_shape_ratios(tensors), on="op_id", how="left")


def _shape_ratios(tensors: pl.DataFrame) -> pl.DataFrame:
    """Per launching op, its largest tensor's elements over its smallest's, among the tensors
    of one recorded op (``c10d::_allgather_base_``: output ``[1073741824]``, input
    ``[16777216]``: 64), where the larger is a whole multiple of the smaller: an all-gather's
    or a reduce-scatter's group size."""
    numel = pl.col("dims").list.eval(pl.element().product()).list.first()
    per_op = (
        tensors.with_columns(numel=numel)
        .filter(pl.col("numel") > 0)
        .group_by("op_id", "source")
        .agg(most=pl.col("numel").max(), least=pl.col("numel").min(), tensors=pl.len())
        .filter((pl.col("tensors") >= 2) & (pl.col("most") % pl.col("least") == 0))
        .with_columns(ratio=pl.col("most") // pl.col("least"))
        .filter(pl.col("ratio") > 1)
    )
    return per_op.group_by("op_id").agg(shape_ratio=pl.col("ratio").max())


# The columns :func:`_sizes_from_shapes` adds to a launching op.
_SHAPE_SIZES = {
    "shape_bytes": pl.Int64,
    "shape_dtype": pl.String,
    "shape_source": pl.String,
    "shape_ratio": pl.Int64,
}


def collective_kind(name: pl.Expr) -> pl.Expr:
    """The collective a name says (a key of ``BUS_FACTORS``, ``""`` for no collective, else
    ``other``), by the first rule of ``KIND_RULES`` it matches."""
    lowered = name.str.to_lowercase()
    expr: pl.Expr = pl.lit("other")
    for rule in reversed(KIND_RULES):
        expr = pl.when(lowered.str.contains(rule.pattern)).then(pl.lit(rule.kind)).otherwise(expr)
    return expr


def _bus_factor(kind: pl.Expr, n: pl.Expr) -> pl.Expr:
    expr: pl.Expr = pl.lit(None, pl.Float64)
    for name, (scaled, fixed) in BUS_FACTORS.items():
        value = pl.lit(fixed, pl.Float64) if scaled is None else scaled * (n - 1) / n
        expr = pl.when(kind == name).then(value).otherwise(expr)
    return expr


def _size_bucket(nbytes: pl.Expr) -> pl.Expr:
    expr: pl.Expr = pl.lit(None, pl.String)
    for label, low in SIZE_BUCKETS:
        expr = pl.when(nbytes >= low).then(pl.lit(label)).otherwise(expr)
    return expr


def _with_bandwidth(calls: pl.LazyFrame, groups: pl.LazyFrame) -> pl.LazyFrame:
    sizes, bandwidth, bus = _bandwidth_steps()
    sized = calls.with_columns(sizes).with_columns(_own_group_size())
    return (
        _with_job_group_size(sized, groups)
        .with_columns(bandwidth)
        .with_columns(bus)
        .drop("own_group_size", "own_group_source", "pg_size", "world_size")
    )


def _own_group_size() -> list[pl.Expr]:
    """``own_group_size`` and ``own_group_source`` from the call itself: its ``Group size``
    arg (``args``), else for a gather or scatter the ratio of its output to its input elements
    (``msg_ratio``, from ``In/Out msg nelems``; ``shape_ratio``, from the recorded shapes):
    every rank contributes one input to an all-gather's output."""
    kind = pl.col("collective")
    larger = pl.max_horizontal("in_msg_nelems", "out_msg_nelems")
    smaller = pl.min_horizontal("in_msg_nelems", "out_msg_nelems")
    gathers = kind.is_in(list(GROUP_FROM_RATIO))
    msg_ratio = pl.when(
        gathers & (smaller > 0) & (larger % smaller == 0) & (larger > smaller)
    ).then(larger // smaller)
    shape_ratio = pl.when(gathers).then(pl.col("shape_ratio"))
    sources = (
        (pl.col("group_size"), GROUP_SOURCES[0]),
        (msg_ratio, GROUP_SOURCES[1]),
        (shape_ratio, GROUP_SOURCES[2]),
    )
    source: pl.Expr = pl.lit(None, pl.String)
    for value, name in reversed(sources):
        source = pl.when(value.is_not_null()).then(pl.lit(name)).otherwise(source)
    return [
        pl.coalesce(*(value for value, _ in sources)).alias("own_group_size"),
        source.alias("own_group_source"),
    ]


def _with_job_group_size(calls: pl.LazyFrame, groups: pl.LazyFrame) -> pl.LazyFrame:
    """``group_size`` and ``group_size_source``: the call's own (:func:`_own_group_size`),
    else the one size of the rank's multi-rank process groups (``pg_config``), else its world
    size (``world_size``) where no call of the rank shows a group of another size
    (hta_nccl_128rank_sampled_rank0: world 128, but its 1 GiB all-gather gathers 64 inputs of
    16 MiB, so its other calls' groups are not known)."""
    own = pl.col("own_group_size")
    # all() ignores nulls: calls without a size of their own do not contradict the world size.
    world_fits = own.eq(pl.col("world_size")).all().over("rank")
    job = (
        pl.when(pl.col("pg_size").is_not_null())
        .then(pl.struct(size="pg_size", source=pl.lit(GROUP_SOURCES[3])))
        .when(world_fits)
        .then(pl.struct(size="world_size", source=pl.lit(GROUP_SOURCES[4])))
    )
    return calls.join(groups, on="rank", how="left").with_columns(
        group_size=pl.coalesce(own, job.struct.field("size")),
        group_size_source=pl.coalesce(
            "own_group_source",
            pl.when(job.struct.field("size").is_not_null()).then(job.struct.field("source")),
        ),
    )


@functools.cache  # immutable expressions, whose rule tables cost ~1 ms a call to build
def _bandwidth_steps() -> tuple[list[pl.Expr], list[pl.Expr], list[pl.Expr]]:
    """:func:`_with_bandwidth`'s three steps, each reading the one before."""
    # Bytes per nanosecond are GB/s.
    algbw = pl.col("bytes") / pl.col("dur_ns")
    from_args = _bytes_from_args().alias("bytes")
    return (
        [
            collective_kind(pl.col("raw")).alias("collective"),
            pl.when(from_args.is_not_null())
            .then(pl.lit(BYTES_SOURCES[0]))
            .otherwise("shape_source")
            .alias("bytes_source"),
            pl.coalesce(from_args, "shape_bytes").alias("bytes"),
            pl.coalesce("dtype", "shape_dtype").alias("dtype"),
            (pl.col("dur_ns") / 1e3).alias("us"),
        ],
        [
            pl.when(pl.col("dur_ns") > 0).then(algbw).alias("algbw_gbps"),
            _size_bucket(pl.col("bytes")).alias("size_bucket"),
        ],
        [
            (
                pl.col("algbw_gbps")
                * _bus_factor(pl.col("collective"), pl.col("group_size").cast(pl.Float64))
            ).alias("busbw_gbps")
        ],
    )


def _link_peaks(trace: Trace) -> pl.DataFrame:
    """Per rank: the link peak of its first GPU where the table knows the GPU."""
    names = trace.devices.group_by("rank").agg(pl.col("name").first())
    peak: pl.Expr = pl.lit(None, pl.Float64)
    for row in reversed(LINK_PEAKS):
        hit = pl.col("name").str.contains(row.name_pattern)
        peak = pl.when(hit).then(pl.lit(row.gbps)).otherwise(peak)
    return names.select("rank", link_peak_gbps=peak)


def _by_kind(calls: pl.DataFrame, peaks: pl.DataFrame, n: int) -> pl.DataFrame:
    inside = pl.col("iteration").is_not_null()
    table = (
        calls.join(peaks, on="rank", how="left")
        .group_by("collective", "size_bucket", "on")
        .agg(
            count_per_iter=inside.sum() / n,
            us_per_iter=pl.col("dur_ns").filter(inside).sum() / 1e3 / n,
            bytes_median=pl.col("bytes").median(),
            busbw_gbps_median=pl.col("busbw_gbps").median(),
            link_peak_gbps=pl.col("link_peak_gbps").max(),
            count=pl.len(),
            total_us=pl.col("dur_ns").sum() / 1e3,
        )
    )
    return table.with_columns(
        busbw_pct_of_peak=pl.col("busbw_gbps_median") / pl.col("link_peak_gbps") * 100
    ).sort(["total_us", "collective"], descending=[True, False])


def busiest_collective(result: Comms) -> tuple[float, dict[str, Any]]:
    """The collectives' µs per iteration, and the kind taking most of it: ``collective``,
    ``us_per_iter``, ``count_per_iter``, ``busbw`` (the median bus bandwidth over its calls,
    GB/s, as ``busbw_gbps_median`` is per size bucket) and ``peak`` (the link's, GB/s). For a
    result with calls."""
    busiest = result.by_kind.group_by("collective").agg(
        pl.col("us_per_iter").sum(),
        pl.col("count_per_iter").sum(),
        peak=pl.col("link_peak_gbps").max(),
    )
    medians = result.calls.group_by("collective").agg(busbw=pl.col("busbw_gbps").median())
    total = float(busiest["us_per_iter"].sum())
    top = (
        busiest.join(medians, on="collective", how="left")
        .sort(["us_per_iter", "collective"], descending=[True, False])
        .row(0, named=True)
    )
    return total, top
