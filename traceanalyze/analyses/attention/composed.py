"""Composed attention in the CPU op tree: matmul -> (scale) -> (mask) -> softmax -> (dropout)
-> matmul, written by hand (the seed's naive attention) or by a model's eager code (GPT-2,
CLIP, T5), or compiled (Inductor's matmuls around a fused Triton softmax).

A **forward** call is anchored on a softmax op over the last dimension of a tensor of at least
three dimensions (the scores), outside any attention op a rule names (SDPA's math backend is
a call of its own). The nearest batched matmul before it at the same level of the op tree (same
thread and parent) must write the scores' elements (Q @ K^T), the nearest after it must read
them (P @ V), each within ``COMPOSED_WINDOW_SHAPED`` sibling ops; where the trace recorded no
shapes, the order alone decides, within ``COMPOSED_WINDOW``.

A **backward** call is anchored on a softmax backward op: at the level of its autograd node
(eager) or of the op itself (a compiled backward graph), the nearest matmuls (or their autograd
nodes) before and after it, each extended by one adjacent matmul (a backward runs two per
forward matmul). The call is linked to its forward call by the profiler's forward/backward flow
events where they connect them unambiguously (``forward_call_id``).

The call's span on its thread (first matmul's start to last matmul's end) claims the GPU
activities launched in it.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceanalyze.analyses.attention.match import matches, name_mask
from traceanalyze.analyses.attention.recorded import decoded, dim, dims, dtype, ndim, numel
from traceanalyze.analyses.attention.rules import (
    ATTENTION_GEMM_OPS,
    BACKWARD,
    COMPOSED_BY,
    COMPOSED_WINDOW,
    COMPOSED_WINDOW_SHAPED,
    DROPOUT_OPS,
    FORWARD,
    GEMM_BACKWARD_NODES,
    MASK_OPS,
    SOFTMAX_BACKWARD_OPS,
    SOFTMAX_DIM_POSITIONS,
    SOFTMAX_OPS,
)
from traceanalyze.link import nearest_ancestor
from traceanalyze.trace import Trace

COMPOSED_SPECIFICITY = 9  # no kernel rule overrides a composed call's implementation
SHAPE_COLUMNS: dict[str, pl.DataType] = {
    "call_id": pl.Int64(),
    "batch": pl.Int64(),
    "heads_q": pl.Int64(),
    "heads_kv": pl.Int64(),
    "batch_heads": pl.Int64(),
    "seq_q": pl.Int64(),
    "seq_kv": pl.Int64(),
    "head_dim": pl.Int64(),
    "head_dim_v": pl.Int64(),
    "dtype": pl.String(),
    "mask": pl.String(),
    "mask_copies": pl.Boolean(),  # an out-of-place masked_fill copies the scores
    "dropout": pl.Float64(),
    "forward_call_id": pl.Int64(),
    "scores_dtype": pl.String(),  # a backward's dtype where its forward gives none
}
_AUTOGRAD_NODE = r"^autograd::engine::evaluate_function: "
# Inductor names a fused kernel after the ops it fuses: a masking op among them is the mask.
_COMPILED_MASK = r"_masked_fill|_where"
_BACKWARD_NODE = r"Backward\d*$"


@dataclass(frozen=True)
class ComposedCalls:
    calls: pl.DataFrame  # calls.CALL_COLUMNS plus end_ns and specificity
    shapes: pl.DataFrame  # SHAPE_COLUMNS


def composed_calls(trace: Trace, claimed: pl.Series, forward_calls: pl.DataFrame) -> ComposedCalls:
    """The composed calls of ``trace`` outside the ops ``claimed`` (a per-row mask of the cpu
    frame: the attention calls ops make); ``forward_calls`` (call_id, rank, tid, start_ns,
    end_ns, implementation, call_site) are the other forward calls a backward may link to."""
    cpu = trace.cpu
    forward = _calls(cpu, claimed, FORWARD)
    backward = _calls(cpu, claimed, BACKWARD)
    if backward.height:
        spans = (
            pl.concat(
                [forward.select(forward_calls.columns), forward_calls], how="vertical_relaxed"
            )
            if forward.height
            else forward_calls
        )
        backward = backward.join(
            _links(trace, backward, spans), on="call_id", how="left"
        ).with_columns(
            implementation=pl.coalesce("linked_implementation", "implementation"),
            call_site=pl.coalesce("linked_call_site", "call_site"),
        )
    both = pl.concat([forward, backward], how="diagonal_relaxed")
    if not both.height:
        return ComposedCalls(
            pl.DataFrame(schema={**_CALL_SCHEMA}), pl.DataFrame(schema=SHAPE_COLUMNS)
        )
    calls = both.select(*_CALL_SCHEMA)
    shapes = both.select(
        [pl.col(c).cast(t) if c in both.columns else pl.lit(None, t).alias(c)
         for c, t in SHAPE_COLUMNS.items()]
    )  # fmt: skip
    return ComposedCalls(calls, shapes)


_CALL_SCHEMA: dict[str, pl.DataType] = {
    "call_id": pl.Int64(),
    "source": pl.String(),
    "rank": pl.Int32(),
    "tid": pl.Int64(),
    "iteration": pl.Int64(),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
    "cpu_ns": pl.Int64(),
    "implementation": pl.String(),
    "direction": pl.String(),
    "call_site": pl.String(),
    "shape_op_id": pl.Int64(),
    "region": pl.String(),
    "specificity": pl.Int32(),
}


def _mask_of(cpu: pl.DataFrame, ids: pl.Series) -> pl.Series:
    mask = pl.Series("hit", [False]).new_from_index(0, cpu.height)
    return mask.scatter(ids, True) if ids.len() else mask


def _anchors(cpu: pl.DataFrame, pattern: str, claimed: pl.Series) -> pl.DataFrame:
    """The outermost ops matching ``pattern`` that no attention op claims, decoded."""
    found = cpu.filter(name_mask(cpu, pattern) & (pl.col("cat") == "cpu_op"))
    if not found.height:
        return found
    mask = _mask_of(cpu, found["op_id"])
    outermost = nearest_ancestor(cpu, found["op_id"], pl.lit(mask)).is_null()
    inside = (
        claimed.gather(found["op_id"])
        | nearest_ancestor(cpu, found["op_id"], pl.lit(claimed)).is_not_null()
    )
    return decoded(found.filter(outermost & ~inside))


def _scores(anchors: pl.DataFrame) -> pl.DataFrame:
    """Anchors whose first input can be attention scores: at least 3-D, softmax over the last
    dimension (where the trace recorded shapes and the dim)."""
    rank = ndim(0)
    at = pl.col("name").replace_strict(
        dict(SOFTMAX_DIM_POSITIONS), default=1, return_dtype=pl.Int64
    )
    softmax_dim = pl.col("concrete").list.get(at, null_on_oob=True)
    last = (softmax_dim == "-1") | (softmax_dim == (rank - 1).cast(pl.String))
    aten = pl.col("name").str.starts_with("aten::")
    plausible = (rank >= 3) & (~aten | last.fill_null(True))
    return anchors.filter(plausible.fill_null(True)).with_columns(
        scores=dims(0), scores_numel=numel(0)
    )


def _siblings(ops: pl.DataFrame, at: pl.DataFrame) -> pl.DataFrame:
    """The ops at the levels (rank, tid, parent) of ``at``, numbered in time order."""
    key = ["rank", "tid", "parent"]
    levels = ops.with_columns(parent=pl.col("parent_id").fill_null(-1))
    return (
        levels.join(at.select(key).unique(), on=key, how="semi")
        .sort("ts_ns")
        .with_columns(pos=pl.int_range(pl.len()).over(key))
    )


def _calls(cpu: pl.DataFrame, claimed: pl.Series, direction: str) -> pl.DataFrame:
    """The composed calls of one direction, with their shapes."""
    pattern = SOFTMAX_OPS if direction == FORWARD else SOFTMAX_BACKWARD_OPS
    anchors = _anchors(cpu, pattern, claimed)
    if not anchors.height:
        return pl.DataFrame()
    ops = cpu.filter(pl.col("cat") == "cpu_op")
    anchors = _scores(anchors)
    if direction == BACKWARD:
        anchors = anchors.with_columns(level_id=_autograd_level(cpu, anchors["op_id"]))
    else:
        anchors = anchors.with_columns(level_id=pl.col("op_id"))
    level = ops.filter(pl.col("op_id").is_in(anchors["level_id"].implode())).with_columns(
        parent=pl.col("parent_id").fill_null(-1)
    )
    siblings = _siblings(ops, level)
    gemm = (
        ATTENTION_GEMM_OPS
        if direction == FORWARD
        else f"{ATTENTION_GEMM_OPS}|{GEMM_BACKWARD_NODES}"
    )
    placed = anchors.join(
        siblings.select(level_id="op_id", pos="pos", parent="parent"), on="level_id"
    )
    pairs = _nearest_gemms(placed, siblings, gemm, extend=direction == BACKWARD)
    if not pairs.height:
        return pl.DataFrame()
    return _described(cpu, ops, pairs, siblings, direction)


def _autograd_level(cpu: pl.DataFrame, ids: pl.Series) -> pl.Series:
    """For each softmax backward op: the autograd node it runs in (eager autograd), else
    itself (a compiled backward graph, whose ops are siblings)."""
    node = name_mask(cpu, _AUTOGRAD_NODE + r"\w*SoftmaxBackward")
    found = nearest_ancestor(cpu, ids, pl.lit(node))
    return pl.select(pl.coalesce(found, ids)).to_series().alias("level_id")


def _nearest_gemms(
    placed: pl.DataFrame, siblings: pl.DataFrame, pattern: str, *, extend: bool
) -> pl.DataFrame:
    """Per anchor: the nearest matmul sibling before and after it within the window (and, for
    a backward, the matmul sibling right next to each, if any)."""
    key = ["rank", "tid", "parent"]
    gemms = siblings.filter(name_mask(siblings, pattern)).select(*key, g_pos="pos")
    window = (
        pl.when(pl.col("scores_numel").is_not_null())
        .then(COMPOSED_WINDOW_SHAPED)
        .otherwise(COMPOSED_WINDOW)
    )
    near = (
        placed.select("op_id", *key, "pos", window=window)
        .join(gemms, on=key)
        .filter((pl.col("g_pos") - pl.col("pos")).abs() <= pl.col("window"))
    )
    found = near.group_by("op_id").agg(
        before=pl.col("g_pos").filter(pl.col("g_pos") < pl.col("pos")).max(),
        after=pl.col("g_pos").filter(pl.col("g_pos") > pl.col("pos")).min(),
        gemm_positions=pl.col("g_pos"),
    )
    found = found.drop_nulls(["before", "after"])
    if extend:
        found = found.with_columns(
            first=pl.when(pl.col("gemm_positions").list.contains(pl.col("before") - 1))
            .then(pl.col("before") - 1)
            .otherwise("before"),
            last=pl.when(pl.col("gemm_positions").list.contains(pl.col("after") + 1))
            .then(pl.col("after") + 1)
            .otherwise("after"),
        )
    else:
        found = found.with_columns(first=pl.col("before"), last=pl.col("after"))
    return placed.join(found.drop("gemm_positions"), on="op_id")


def _described(
    cpu: pl.DataFrame,
    ops: pl.DataFrame,
    pairs: pl.DataFrame,
    siblings: pl.DataFrame,
    direction: str,
) -> pl.DataFrame:
    """Each anchored call's span, call site, checked shapes, mask and dropout."""
    key = ["rank", "tid", "parent"]
    at = siblings.select(*key, "pos", "op_id", "name", "ts_ns", "dur_ns")

    def sibling(position: str, prefix: str) -> pl.DataFrame:
        return at.rename({c: f"{prefix}_{c}" for c in ("op_id", "name", "ts_ns", "dur_ns")}).rename(
            {"pos": position}
        )

    spans = (
        pairs.join(sibling("first", "first"), on=[*key, "first"])
        .join(sibling("last", "last"), on=[*key, "last"])
        .join(sibling("before", "qk"), on=[*key, "before"])
        .join(sibling("after", "pv"), on=[*key, "after"])
    )
    gemms = decoded(
        ops.filter(
            pl.col("op_id").is_in(pl.concat([spans["qk_op_id"], spans["pv_op_id"]]).implode())
        )
    ).select("op_id", "name", "dims", "types")
    spans = _with_gemm_shapes(spans, gemms, direction)
    if direction == FORWARD:
        spans = spans.filter(_shapes_fit())
    if direction == FORWARD:
        described = spans.join(_between(ops, spans), on="op_id", how="left")
    else:  # a backward's mask and dropout are its forward's
        described = spans.with_columns(
            mask=pl.lit(None, pl.String), mask_copies=pl.lit(None, pl.Boolean),
            dropout=pl.lit(None, pl.Float64),
        )  # fmt: skip
    compiled = pl.col("name").str.starts_with("triton_")
    implementation = (
        pl.when(compiled).then(pl.lit("composed_compiled")).otherwise(pl.lit("composed"))
    )
    site = pl.concat_str([pl.col("qk_name"), pl.col("name"), pl.col("pv_name")], separator=" -> ")
    described = described.join(_composed_by(cpu, described["op_id"]), on="op_id", how="left")
    site = (
        pl.when(pl.col("by_site").is_not_null())
        .then(pl.format("{}: {}", "by_site", site))
        .otherwise(site)
    )
    return described.select(
        call_id="op_id",
        source=pl.lit("composed"),
        rank="rank",
        tid="tid",
        iteration="iteration",
        start_ns="first_ts_ns",
        end_ns=pl.col("last_ts_ns") + pl.col("last_dur_ns"),
        cpu_ns=pl.col("last_ts_ns") + pl.col("last_dur_ns") - pl.col("first_ts_ns"),
        implementation=implementation,
        direction=pl.lit(direction),
        call_site=site,
        shape_op_id=pl.lit(None, pl.Int64),
        region=pl.lit(None, pl.String),
        specificity=pl.lit(COMPOSED_SPECIFICITY, pl.Int32),
        batch=pl.when(pl.col("scores").list.len() == 4).then(pl.col("scores").list.get(0)),
        heads_q=pl.when(pl.col("scores").list.len() == 4).then(pl.col("scores").list.get(1)),
        heads_kv=pl.when(pl.col("scores").list.len() == 4).then(pl.col("scores").list.get(1)),
        batch_heads=pl.col("scores")
        .list.slice(0, pl.col("scores").list.len() - 2)
        .list.eval(pl.element().product())
        .list.first(),
        seq_q=pl.col("scores").list.get(-2, null_on_oob=True),
        seq_kv=pl.col("scores").list.get(-1, null_on_oob=True),
        head_dim="head_dim",
        head_dim_v="head_dim_v",
        dtype=pl.coalesce("qk_dtype", "scores_dtype")
        if direction == FORWARD
        else pl.lit(None, pl.String),
        scores_dtype="scores_dtype",
        mask=pl.when(pl.col("qk_name") == "aten::baddbmm")
        .then(pl.lit("float"))
        .when(compiled & matches(_COMPILED_MASK))
        .then(pl.lit("bool"))
        .when(pl.lit(direction == FORWARD))
        .then(pl.coalesce("mask", pl.lit("none"))),
        mask_copies=pl.col("mask_copies").fill_null(False),
        dropout="dropout",
    )


def _composed_by(cpu: pl.DataFrame, ids: pl.Series) -> pl.DataFrame:
    """op_id -> ``by_site``: the COMPOSED_BY op around each composed call (its softmax
    ``ids``), with the argument that made it compose where recorded so, e.g.
    "aten::_native_multi_head_attention (need_weights=True)"; absent where none is around."""
    pattern = "|".join(f"(?:{rule.op})" for rule in COMPOSED_BY)
    above = nearest_ancestor(cpu, ids, pl.lit(name_mask(cpu, pattern)))
    found = pl.DataFrame({"op_id": ids, "by_id": above}).drop_nulls()
    if not found.height:
        return pl.DataFrame(schema={"op_id": pl.Int64(), "by_site": pl.String()})
    ops = decoded(
        cpu.select("op_id", "name", "input_dims", "input_types", "concrete_inputs").join(
            found.select(op_id="by_id").unique(), on="op_id"
        )
    )
    site: pl.Expr = pl.col("name")
    for rule in reversed(COMPOSED_BY):
        chose = pl.col("name").str.contains(rule.op) & (
            pl.col("concrete").list.get(rule.argument, null_on_oob=True) == rule.value
        )
        site = (
            pl.when(chose)
            .then(pl.format("{} ({}={})", "name", pl.lit(rule.label), pl.lit(rule.value)))
            .otherwise(site)
        )
    by = ops.select(by_id="op_id", by_site=site)
    return found.join(by, on="by_id").select("op_id", "by_site")


def _gemm_roles(name: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """The input positions of A and B (baddbmm's bias comes first)."""
    bias = name == "aten::baddbmm"
    return pl.when(bias).then(1).otherwise(0), pl.when(bias).then(2).otherwise(1)


def _with_gemm_shapes(spans: pl.DataFrame, gemms: pl.DataFrame, direction: str) -> pl.DataFrame:
    """The Q @ K^T product's elements and A's last dim (the head size), P @ V's A elements and
    B's last dim (the value head size), the scores' dtype; null where not recorded."""
    a, b = _gemm_roles(pl.col("name"))
    shaped = gemms.with_columns(
        out_numel=pl.when(pl.col("name") != "aten::einsum").then(
            numel(a) // dim(a, -1) * dim(b, -1)
        ),
        a_numel=numel(a),
        a_last=dim(a, -1),
        b_last=dim(b, -1),
        a_dtype=dtype(a),
    )
    qk = shaped.select(
        qk_op_id="op_id", qk_out=pl.col("out_numel"), qk_a_last="a_last", qk_dtype="a_dtype",
        qk_b_last="b_last",
    )  # fmt: skip
    pv = shaped.select(pv_op_id="op_id", pv_a=pl.col("a_numel"), pv_b_last="b_last")
    joined = spans.join(qk, on="qk_op_id", how="left").join(pv, on="pv_op_id", how="left")
    scores_dtype = dtype(0)
    if direction == FORWARD:
        return joined.with_columns(
            head_dim="qk_a_last", head_dim_v="pv_b_last", scores_dtype=scores_dtype
        )
    # A backward's matmuls are inside autograd nodes: the head size comes from its forward.
    return joined.with_columns(
        head_dim=pl.lit(None, pl.Int64), head_dim_v=pl.lit(None, pl.Int64),
        qk_dtype=pl.lit(None, pl.String), scores_dtype=scores_dtype,
    )  # fmt: skip


def _shapes_fit() -> pl.Expr:
    """Q @ K^T writes the scores' elements and P @ V reads them (unknown counts pass)."""
    qk = (pl.col("qk_out") == pl.col("scores_numel")).fill_null(True)
    pv = (pl.col("pv_a") == pl.col("scores_numel")).fill_null(True)
    return qk & pv


def _between(ops: pl.DataFrame, spans: pl.DataFrame) -> pl.DataFrame:
    """Per call (anchor op id): the mask kind of the first masking op between Q @ K^T and the
    softmax, whether it copies the scores, and the dropout probability after the softmax."""
    key = ["rank", "tid"]
    level = spans.select("op_id", *key, "parent", lo="qk_ts_ns", mid="ts_ns", hi="pv_ts_ns")
    # Ops at the call's level between its matmuls (a handful per call).
    inside = (
        ops.with_columns(parent=pl.col("parent_id").fill_null(-1))
        .join(level.select(*key, "parent").unique(), on=[*key, "parent"], how="semi")
        .select(*key, "parent", at="ts_ns", between_name="name", between_id="op_id")
        .join(level, on=[*key, "parent"])
        .filter((pl.col("at") > pl.col("lo")) & (pl.col("at") < pl.col("hi")))
    )
    masks = inside.filter(
        (pl.col("at") < pl.col("mid")) & pl.col("between_name").is_in(list(MASK_OPS))
    )
    mask = (
        masks.sort("at")
        .group_by("op_id")
        .agg(
            mask=pl.col("between_name").first().replace_strict(dict(MASK_OPS)),
            mask_copies=(pl.col("between_name") == "aten::masked_fill").any(),
        )
    )
    drops = decoded(
        ops.filter(pl.col("op_id").is_in(inside.filter(
            (pl.col("at") > pl.col("mid")) & matches(DROPOUT_OPS, "between_name")
        )["between_id"].implode()))
    )  # fmt: skip
    p = pl.col("concrete").list.get(1, null_on_oob=True).cast(pl.Float64, strict=False)
    train = pl.col("concrete").list.get(2, null_on_oob=True) != "False"
    dropped = drops.select(
        between_id="op_id", dropout=pl.when(train.fill_null(True)).then(p).otherwise(0.0)
    )
    dropout = (
        inside.join(dropped, on="between_id").group_by("op_id").agg(dropout=pl.col("dropout").max())
    )
    return mask.join(dropout, on="op_id", how="full", coalesce=True).with_columns(
        dropout=pl.col("dropout").fill_null(0.0)
    )


def _links(trace: Trace, backward: pl.DataFrame, forward: pl.DataFrame) -> pl.DataFrame:
    """Backward call -> the forward call its autograd node came from (profiler fwdbwd flows):
    the forward call whose span holds the forward op's start, or the one call whose start is
    inside the forward op (a compiled graph's forward op holds its composed calls)."""
    empty = pl.DataFrame(
        schema={
            "call_id": pl.Int64(), "forward_call_id": pl.Int64(),
            "linked_implementation": pl.String(), "linked_call_site": pl.String(),
        }
    )  # fmt: skip
    flows = trace.flows.filter(pl.col("cat") == "fwdbwd")
    if not flows.height or not forward.height:
        return empty
    cpu = trace.cpu
    node_ids = nearest_ancestor(cpu, backward["call_id"], pl.lit(name_mask(cpu, _BACKWARD_NODE)))
    nodes = (
        backward.select("call_id", "rank")
        .with_columns(node=node_ids)
        .join(cpu.select(node="op_id", node_tid="tid", node_ts="ts_ns"), on="node")
    )
    ends = flows.filter(pl.col("phase") == "f").select(
        "rank", "id", node_tid="tid", node_ts="ts_ns"
    )
    starts = flows.filter(pl.col("phase") == "s").select("rank", "id", f_tid="tid", f_ts="ts_ns")
    sources = (
        nodes.join(ends, on=["rank", "node_tid", "node_ts"])
        .join(starts, on=["rank", "id"])
        .join(
            cpu.select("rank", f_tid="tid", f_ts="ts_ns", f_end=pl.col("ts_ns") + pl.col("dur_ns")),
            on=["rank", "f_tid", "f_ts"],
        )
        .group_by("call_id", "rank", "f_tid", "f_ts")
        .agg(pl.col("f_end").max())
    )
    candidates = sources.join(
        forward.select(
            "rank", f_tid="tid", forward_call_id="call_id", s="start_ns", e="end_ns",
            linked_implementation="implementation", linked_call_site="call_site",
        ),
        on=["rank", "f_tid"],
    ).filter(
        ((pl.col("s") <= pl.col("f_ts")) & (pl.col("f_ts") <= pl.col("e")))
        | ((pl.col("f_ts") <= pl.col("s")) & (pl.col("s") <= pl.col("f_end")))
    )  # fmt: skip
    unique = candidates.group_by("call_id").agg(
        pl.col("forward_call_id").unique(), pl.col("linked_implementation").first(),
        pl.col("linked_call_site").first(),
    ).filter(pl.col("forward_call_id").list.len() == 1)  # fmt: skip
    return unique.with_columns(pl.col("forward_call_id").list.first()).select(empty.columns)
