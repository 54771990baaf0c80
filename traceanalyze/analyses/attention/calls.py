"""Every attention call of a trace, and the GPU activities each one ran.

Three sources, in order; a GPU activity belongs to the first that claims it:

1. **Ops** (``source`` op): the outermost CPU op of a chain that ``OP_RULES`` names
   (``aten::scaled_dot_product_attention``, a flex kernel's op, ``vllm::unified_attention``,
   ...). Every activity launched under it is the call's; helper ops (``role`` before) give their
   activities to the next call on their thread.
2. **Composed attention** (``source`` composed): matmul -> softmax -> matmul in the CPU op
   tree (:mod:`.composed`); the activities launched on its thread while it runs.
3. **Kernels** (``source`` kernel): attention kernels no op claimed (a CUDA graph replay, a
   trace without CPU ops, a library op no rule names): each ``main`` kernel is a call, its
   helpers (``before``/``after``) join the next/previous main kernel on their stream.
4. **Captured** (``source`` captured): launches of attention kernels into a graph being
   captured (no GPU work in the trace; the launch names its kernel on ROCm): each is a call
   that runs at the graph's replays, with no GPU time here and no per-call shapes.

The implementation is the most specific one any op or kernel of the call names.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceanalyze.analyses.attention.composed import ComposedCalls, composed_calls
from traceanalyze.analyses.attention.match import kernel_rules, op_rules
from traceanalyze.analyses.attention.rules import (
    FORWARD,
    KERNEL_RULES,
    OP_RULES,
    OTHER,
)
from traceanalyze.link import RUNTIME_CATS, nearest_ancestor
from traceanalyze.trace import Trace

FUSED = "fused_attention"
_SPAN = ("call_id", "rank", "tid", "start_ns", "end_ns", "implementation", "call_site")
NO_OP = "(no CPU op)"
GRAPH_LAUNCHES = ("cudaGraphLaunch", "hipGraphLaunch")
GRAPH_REPLAY = "(CUDA graph replay)"
# A call captured into a graph (it runs at the graph's replays): its capturing op, then this.
GRAPH_CAPTURE = "(captured into a CUDA graph)"
CAPTURED = "captured"

CALL_COLUMNS: dict[str, pl.DataType] = {
    "call_id": pl.Int64(),
    "source": pl.String(),  # op | composed | kernel | captured
    "rank": pl.Int32(),
    "tid": pl.Int64(),
    "iteration": pl.Int64(),
    "start_ns": pl.Int64(),
    "cpu_ns": pl.Int64(),  # the call's time on the CPU (null for a kernel-only call)
    "implementation": pl.String(),
    "direction": pl.String(),
    "call_site": pl.String(),
    "shape_op_id": pl.Int64(),  # the op whose recorded inputs give the shapes
    "region": pl.String(),  # the outermost user annotation around its GPU work
    "end_ns": pl.Int64(),
    "specificity": pl.Int32(),  # of the rule that named its implementation
}


@dataclass(frozen=True)
class FoundCalls:
    calls: pl.DataFrame  # CALL_COLUMNS
    activities: pl.DataFrame  # the gpu rows of the calls, with ``call_id``
    composed: ComposedCalls  # the composed calls' shapes and score writes
    captured: pl.DataFrame  # call_id, name (the kernel launched), ts_ns: captured calls


def find_calls(trace: Trace, gpu: pl.DataFrame) -> FoundCalls:
    """The calls of ``trace`` (its counted iterations and the rest: ``iteration`` says which)
    and the activities of ``gpu`` (classified activities) they launched."""
    gpu = gpu.with_row_index("_row").with_columns(pl.col("_row").cast(pl.Int64))
    cpu = trace.cpu
    matched = _matched_ops(cpu)
    main = matched.filter(pl.col("role") == "main")
    entries = _entries(cpu, main)
    entry_mask = _row_mask(cpu.height, entries["op_id"])
    claimed = _under(cpu, gpu["op_id"], entry_mask)
    claimed = _with_helpers(cpu, matched, entries, gpu["op_id"], claimed)
    by_op = gpu.with_columns(call_id=claimed)
    op_calls = _op_calls(cpu, entries, matched, by_op)

    composed = composed_calls(trace, entry_mask, op_calls.select(_SPAN))
    in_span = _in_spans(by_op.filter(pl.col("call_id").is_null()), composed.calls)
    by_op = (
        by_op.join(in_span, on="_row", how="left", suffix="_span")
        .with_columns(call_id=pl.coalesce("call_id", "call_id_span"))
        .drop("call_id_span")
    )

    named = kernel_rules(gpu["name"], KERNEL_RULES)
    kernel_calls, by_kernel = _kernel_calls(by_op, named)
    captured = _captured_calls(trace, entry_mask)
    activities = by_kernel.filter(pl.col("call_id").is_not_null())
    calls = pl.concat(
        [
            op_calls.select(list(CALL_COLUMNS)),
            composed.calls.select(list(CALL_COLUMNS)),
            kernel_calls.select(list(CALL_COLUMNS)),
            captured.select(list(CALL_COLUMNS)),
        ],
        how="vertical_relaxed",
    )
    calls = _refined_by_kernels(calls, activities, named)
    return FoundCalls(
        calls.select(list(CALL_COLUMNS)),
        activities.drop("_row"),
        composed,
        captured.select("call_id", "name", ts_ns="start_ns"),
    )


def _matched_ops(cpu: pl.DataFrame) -> pl.DataFrame:
    """CPU ops and annotations an op rule names, with the rule's columns."""
    rules = op_rules(cpu["name"], OP_RULES)  # on the distinct names: a handful match
    interval = pl.col("cat").is_in(["cpu_op", "user_annotation"])
    return (
        cpu.filter(pl.col("name").is_in(rules["name"].implode()) & interval)
        .select("op_id", "rank", "tid", "name", "ts_ns", "dur_ns", "iteration")
        .join(rules, on="name", how="inner")
    )


def _row_mask(height: int, ids: pl.Series) -> pl.Series:
    """A boolean per cpu row (op ids are rows): true at ``ids``."""
    mask = pl.Series("hit", [False]).new_from_index(0, height)
    return mask.scatter(ids.drop_nulls(), True) if ids.len() else mask


def _entries(cpu: pl.DataFrame, main: pl.DataFrame) -> pl.DataFrame:
    """The outermost matched op of each chain: the calls."""
    if not main.height:
        return main
    mask = _row_mask(cpu.height, main["op_id"])
    outer = nearest_ancestor(cpu, main["op_id"], pl.lit(mask))
    return main.filter(outer.is_null())


def _under(cpu: pl.DataFrame, op_ids: pl.Series, mask: pl.Series) -> pl.Series:
    """For each op id: itself where ``mask`` holds there, else its nearest ancestor where it
    holds, else null."""
    itself = mask.gather(op_ids.fill_null(0)) & op_ids.is_not_null()
    above = nearest_ancestor(cpu, op_ids, pl.lit(mask))
    return (
        pl.select(pl.when(itself.fill_null(False)).then(op_ids).otherwise(above))
        .to_series()
        .alias("call_id")
    )


def _with_helpers(
    cpu: pl.DataFrame,
    matched: pl.DataFrame,
    entries: pl.DataFrame,
    op_ids: pl.Series,
    claimed: pl.Series,
) -> pl.Series:
    """``claimed`` plus the activities of helper ops (role before), each given to the next call
    that starts after it on its thread."""
    helpers = matched.filter(pl.col("role") == "before")
    if not helpers.height or not entries.height:
        return claimed
    targets = (
        helpers.select("op_id", "rank", "tid", end_ns=pl.col("ts_ns") + pl.col("dur_ns"))
        .sort("end_ns")
        .join_asof(
            entries.select("rank", "tid", "ts_ns", target="op_id").sort("ts_ns"),
            left_on="end_ns",
            right_on="ts_ns",
            by=["rank", "tid"],
            strategy="forward",
            check_sortedness=False,
        )
    )
    helper = _under(cpu, op_ids, _row_mask(cpu.height, helpers["op_id"]))
    target = (
        helper.to_frame("op_id")
        .join(targets.select("op_id", "target"), on="op_id", how="left", maintain_order="left")
        .get_column("target")
    )
    return pl.select(pl.coalesce(claimed, target)).to_series().alias("call_id")


def _op_calls(
    cpu: pl.DataFrame, entries: pl.DataFrame, matched: pl.DataFrame, gpu: pl.DataFrame
) -> pl.DataFrame:
    """One row per entry op: its most specific implementation among the ops of its chain, the
    op that records its shapes (the outermost with a shape family, see :mod:`.shapes`)."""
    if not entries.height:
        return pl.DataFrame(schema=CALL_COLUMNS)
    mask = _row_mask(cpu.height, entries["op_id"])
    member = matched.with_columns(call_id=_under(cpu, matched["op_id"], mask))
    best = (
        member.sort(["call_id", "specificity", "ts_ns"], descending=[False, True, False])
        .group_by("call_id", maintain_order=True)
        .agg(
            implementation=pl.col("implementation").first(),
            specificity=pl.col("specificity").first(),
            shape_ops=pl.col("op_id").sort_by("ts_ns"),
            shape_names=pl.col("name").sort_by("ts_ns"),
        )
    )
    regions = gpu.group_by("call_id").agg(region=pl.col("annotation").drop_nulls().first())
    return (
        entries.select(
            call_id="op_id",
            source=pl.lit("op"),
            rank="rank",
            tid="tid",
            iteration="iteration",
            start_ns="ts_ns",
            cpu_ns="dur_ns",
            direction="direction",
            call_site="name",
            end_ns=pl.col("ts_ns") + pl.col("dur_ns"),
        )
        .join(best, on="call_id", how="left")
        .join(regions, on="call_id", how="left")
        .with_columns(shape_op_id=_first_with_family("shape_ops", "shape_names"))
    )


def _first_with_family(ops: str, names: str) -> pl.Expr:
    """The first op of the call (outermost first, by start) with a shape family."""
    from traceanalyze.analyses.attention.shapes import has_family

    index = pl.col(names).list.eval(has_family(pl.element())).list.arg_max()
    found = pl.col(names).list.eval(has_family(pl.element())).list.any()
    return pl.when(found).then(pl.col(ops).list.get(index, null_on_oob=True))


def _in_spans(activities: pl.DataFrame, spans: pl.DataFrame) -> pl.DataFrame:
    """``_row`` -> ``call_id`` of the span (rank, thread, [start, end]) each activity was
    launched in."""
    empty = pl.DataFrame(schema={"_row": pl.Int64(), "call_id": pl.Int64()})
    if not spans.height or not activities.height:
        return empty
    launched = activities.filter(pl.col("launch_ts_ns").is_not_null()).select(
        "_row", "rank", tid="launch_tid", ts="launch_ts_ns"
    )
    found = launched.sort("ts").join_asof(
        spans.select("rank", "tid", "call_id", "start_ns", "end_ns").sort("start_ns"),
        left_on="ts",
        right_on="start_ns",
        by=["rank", "tid"],
        strategy="backward",
        check_sortedness=False,
    )
    return found.filter(pl.col("ts") <= pl.col("end_ns")).select("_row", "call_id")


def _kernel_calls(gpu: pl.DataFrame, rules: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Calls made of attention kernels no op or composed call claimed, and ``gpu`` with their
    ``call_id`` filled (``rules``: the kernel rule of each kernel name a rule names)."""
    open_ = gpu.filter(pl.col("call_id").is_null() & (pl.col("kind") == "kernel"))
    kernels = open_.join(rules, on="name", how="left").filter(
        pl.col("k_implementation").is_not_null() | (pl.col("category") == FUSED)
    )
    if not kernels.height:
        return pl.DataFrame(schema=CALL_COLUMNS), gpu
    # A call's main kernel is an attention kernel by the taxonomy; a rule's helper kernels
    # (a quantisation, a combine) join one, and are no call of their own.
    fused = pl.col("category") == FUSED
    role = (
        pl.when(fused)
        .then(pl.col("k_role").fill_null("main"))
        .otherwise(pl.when(pl.col("k_role") != "main").then("k_role"))
    )
    order = (
        kernels.with_columns(
            k_implementation=pl.col("k_implementation").fill_null(OTHER), k_role=role
        )
        .drop_nulls("k_role")
        .sort("rank", "stream", "ts_ns")
    )
    key = ["rank", "stream", "iteration"]
    main_id = pl.when(pl.col("k_role") == "main").then(-pl.col("_row") - 1)
    grouped = order.with_columns(
        _previous=main_id.forward_fill().over(key), _next=main_id.backward_fill().over(key)
    ).with_columns(
        call_id=pl.when(pl.col("k_role") == "before")
        .then(pl.coalesce("_next", "_previous"))
        .otherwise(pl.coalesce("_previous", "_next"))
    )
    grouped = grouped.drop_nulls("call_id")  # a helper with no main kernel beside it
    mains = grouped.filter(pl.col("k_role") == "main")
    graph = pl.col("launch_api").is_in(GRAPH_LAUNCHES)
    calls = mains.select(
        "call_id",
        **_rule_call(
            "kernel",
            "launch_tid",
            pl.when(graph)
            .then(pl.lit(GRAPH_REPLAY))
            .otherwise(pl.coalesce("op_name", pl.lit(NO_OP))),
        ),
        region="annotation",
    )
    assigned = (
        gpu.join(grouped.select("_row", call_id_kernel="call_id"), on="_row", how="left")
        .with_columns(call_id=pl.coalesce("call_id", "call_id_kernel"))
        .drop("call_id_kernel")
    )
    return calls, assigned


def _rule_call(source: str, tid: str, call_site: pl.Expr) -> dict[str, pl.Expr]:
    """The CALL_COLUMNS (but call_id and region) of a call that is one main kernel of a kernel
    rule (its ``k_`` columns): no op of its own, so no CPU time, shapes op or end."""
    return {
        "source": pl.lit(source),
        "rank": pl.col("rank"),
        "tid": pl.col(tid),
        "iteration": pl.col("iteration"),
        "start_ns": pl.col("ts_ns"),
        "cpu_ns": pl.lit(None, pl.Int64),
        "implementation": pl.col("k_implementation"),
        "direction": pl.coalesce("k_direction", pl.lit(FORWARD)),
        "call_site": call_site,
        "shape_op_id": pl.lit(None, pl.Int64),
        "end_ns": pl.lit(None, pl.Int64),
        "specificity": pl.col("k_specificity").fill_null(0),
    }


def _captured_calls(trace: Trace, entry_mask: pl.Series) -> pl.DataFrame:
    """Calls captured into a CUDA/HIP graph (CALL_COLUMNS and ``name``, the kernel launched):
    launch calls that ran nothing in the trace (the
    stream was capturing) whose kernel, as the launch names it (``launch_kernel``: ROCm
    traces), a main kernel rule names, outside any attention op (an op's capture is that op's
    call). They run at the graph's replays; the capturing op is their call site."""
    cpu = trace.cpu
    launches = cpu.filter(
        pl.col("cat").is_in(RUNTIME_CATS)
        & pl.col("launch_kernel").is_not_null()
        & ~pl.col("name").is_in(GRAPH_LAUNCHES)
    )
    empty = pl.DataFrame(schema={**CALL_COLUMNS, "name": pl.String()})
    if not launches.height:
        return empty
    ran = trace.gpu.select("rank", "correlation").drop_nulls().unique()
    rules = kernel_rules(launches["launch_kernel"], KERNEL_RULES).filter(pl.col("k_role") == "main")
    captured = (
        launches.join(ran, on=["rank", "correlation"], how="anti")
        .join(rules, left_on="launch_kernel", right_on="name", how="inner")
        .sort("op_id")
    )
    if not captured.height:
        return empty
    inside = _under(cpu, captured["op_id"], entry_mask).is_not_null()
    captured = captured.filter(~inside)
    op = nearest_ancestor(cpu, captured["op_id"], pl.col("cat") == "cpu_op")
    op_name = cpu["name"].gather(op.fill_null(0)).zip_with(op.is_not_null(), pl.Series([None]))
    return (
        captured.with_columns(op_name=op_name)
        .select(
            call_id="op_id",
            **_rule_call(
                CAPTURED,
                "tid",
                pl.format("{} {}", pl.coalesce("op_name", pl.lit(NO_OP)), pl.lit(GRAPH_CAPTURE)),
            ),
            region=pl.lit(None, pl.String),
            name="launch_kernel",
        )
        .cast(empty.schema)
    )


def _refined_by_kernels(
    calls: pl.DataFrame, activities: pl.DataFrame, rules: pl.DataFrame
) -> pl.DataFrame:
    """Each call's implementation: its kernels' where a kernel rule is more specific than the
    ops' (vLLM's attention op runs FlashInfer's or Triton's kernels), its ops' otherwise."""
    named = (
        activities.filter(pl.col("category") == FUSED)
        .join(rules, on="name", how="inner")
        .sort(["call_id", "k_specificity", "ts_ns"], descending=[False, True, False])
        .group_by("call_id")
        .agg(
            kernel_implementation=pl.col("k_implementation").first(),
            kernel_specificity=pl.col("k_specificity").first(),
        )
    )
    with_kernels = calls.join(named, on="call_id", how="left")
    better = pl.col("kernel_specificity") > pl.col("specificity").fill_null(-1)
    return with_kernels.with_columns(
        implementation=pl.when(better.fill_null(False))
        .then("kernel_implementation")
        .otherwise("implementation")
    )
