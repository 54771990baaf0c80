"""Per call and per row: FLOPs, time, % of peak, score writes, and the fused estimate.

FLOPs of a forward call: ``QK^T`` and ``PV`` are ``2·Sq·Skv·D`` each per head, so
``2·B·H·Sq·Skv·(D + Dv)`` (``4·B·H·Sq·Skv·D`` when the value head size is the query's), H the
query heads (GQA reads fewer key/value heads but multiplies as many). Halved when the call is
causal and its kernels skip the masked half (every fused kernel with ``Sq == Skv``); composed
attention and SDPA's math backend compute every score, so they are counted in full. A backward
is 2.5x its forward (FlashAttention's convention: five matrix products against two).
"""

from __future__ import annotations

import re

import polars as pl

from traceanalyze.analyses.attention.calls import CAPTURED, GRAPH_REPLAY
from traceanalyze.analyses.attention.dispatch import BACKENDS, DISPATCH_INPUTS, with_why_not
from traceanalyze.analyses.attention.rules import BACKWARD, COMPOSED, COMPOSED_BY, FORWARD
from traceanalyze.hardware.peaks import PEAK_DTYPES

SHAPES_MISSING = "shapes not recorded (record_shapes=False) and not in the kernel names"
PER_SEQUENCE = "variable-length batch: the per-sequence lengths are not in the trace"
CAPTURED_NOTE = (
    "captured into a CUDA/HIP graph, not run here: it runs (and takes GPU time) at the "
    "graph's replays; no op records the per-call shapes"
)
STEP_EXACT = (
    "from the step annotation's sums over its sequences (query x key lengths): exact, the "
    "per-sequence lengths themselves are not in the trace"
)
STEP_BOUND = (
    "upper bound: every query-key pair of the step annotation's sequences counted (causal "
    "not recorded); the per-sequence lengths are not in the trace"
)
GRAPH_SHAPES = (
    "a CUDA/HIP graph replay: no op records the per-call shapes (batch, heads, sequence "
    "lengths); the kernel names give at most the head size, dtype and GQA ratio"
)
VARLEN_BOUND = "upper bound: variable-length batch counted as batch x longest q x longest kv"
MANIFEST_LENGTHS = (
    "exact, from the capture manifest's per-sequence lengths (the trace holds only their "
    "count, total and longest)"
)
MANIFEST_BLOCKS = (
    "the blocks computed: {}% of the block mask's blocks skipped, from the capture manifest "
    "(the block mask's contents are not in the trace)"
)
BLOCK_BOUND = "upper bound: every block counted (the block mask's contents are not in the trace)"
CAUSAL_UNEQUAL = (
    "is_causal with seq_q != seq_kv: the share computed depends on the mask's alignment"
)
# A GEMM kernel's precision (activities' gemm_precision) -> the peak it runs against.
PRECISION_PEAKS = {"fp32-cuda-cores": "fp32", "tf32": "tf32", "bf16": "bf16", "fp16": "fp16",
                   "fp8": "fp8"}  # fmt: skip


def flops() -> tuple[pl.Expr, pl.Expr]:
    """``flops_per_call`` and ``flops_note`` (null: exact) from the shape columns."""
    pairs = pl.col("batch_heads") * pl.col("seq_q") * pl.col("seq_kv")
    full = 2 * pairs * (pl.col("head_dim") + pl.coalesce("head_dim_v", "head_dim"))
    impl = pl.col("implementation")
    skips = ~impl.is_in(list(COMPOSED)) & (impl != "flex")
    causal = pl.col("causal").fill_null(False) & skips
    square = pl.col("seq_q") == pl.col("seq_kv")
    forward = pl.when(causal & square).then(full // 2).when(causal).then(None).otherwise(full)
    # A varlen call whose step annotation sums its sequences' lengths: exact where causal is
    # known (the unmasked pairs), else every pair (an upper bound).
    causal_pairs = pl.col("step_sqsk") - (pl.col("step_sqsq") - pl.col("step_sq")) // 2
    pairs = pl.when(pl.col("causal").fill_null(False)).then(causal_pairs).otherwise("step_sqsk")
    dims = pl.col("heads_q") * (pl.col("head_dim") + pl.coalesce("head_dim_v", "head_dim"))
    forward = pl.coalesce(forward, 2 * pairs * dims)
    # A capture manifest's facts (capture_facts), where they fit the call: the per-sequence
    # lengths (exact), and the share of blocks a flex block mask computes.
    known_causal = pl.col("known_sqsk") - (pl.col("known_sqsq") - pl.col("known_sq")) // 2
    causal_known = pl.col("causal").fill_null(False)
    by_lengths = 2 * pl.when(causal_known).then(known_causal).otherwise("known_sqsk") * dims
    by_blocks = (full * pl.col("known_block_share")).round().cast(pl.Int64)
    forward = pl.coalesce(by_lengths, by_blocks, forward)
    value = pl.when(pl.col("direction") == BACKWARD).then(forward * 5 // 2).otherwise(forward)
    varlen = pl.col("varlen").fill_null(False) & ~_uniform()
    graph = pl.col("call_site") == GRAPH_REPLAY
    note = (
        pl.when(pl.col("source") == CAPTURED).then(pl.lit(CAPTURED_NOTE))
        .when(by_lengths.is_not_null()).then(pl.lit(MANIFEST_LENGTHS))
        .when(by_blocks.is_not_null())
        .then(pl.format(MANIFEST_BLOCKS, (100 - pl.col("known_block_share") * 100).round(2)))
        .when(full.is_null() & graph).then(pl.lit(GRAPH_SHAPES))
        .when(full.is_null() & pairs.is_not_null() & pl.col("causal").is_null())
        .then(pl.lit(STEP_BOUND))
        .when(full.is_null() & pairs.is_not_null()).then(pl.lit(STEP_EXACT))
        .when(full.is_null() & varlen).then(pl.lit(PER_SEQUENCE))
        .when(full.is_null()).then(pl.lit(SHAPES_MISSING))
        .when(causal & ~square).then(pl.lit(CAUSAL_UNEQUAL))
        .when(varlen).then(pl.lit(VARLEN_BOUND))
        .when(pl.col("mask") == "block").then(pl.lit(BLOCK_BOUND))
    )  # fmt: skip
    return value, note


def _uniform() -> pl.Expr:
    """A variable-length batch whose sequences are all as long as the longest, so batch x
    longest q x longest kv is exact: its query tokens are batch x longest q, and its key tokens
    batch x longest kv where recorded, else (a causal call: every sequence attends to at least
    its own queries, no more than the longest kv) the longest kv is the longest q."""
    all_q = pl.col("tokens_q") == pl.col("batch") * pl.col("seq_q")
    all_kv = (pl.col("tokens_kv") == pl.col("batch") * pl.col("seq_kv")).fill_null(
        pl.col("causal").fill_null(False) & (pl.col("seq_kv") == pl.col("seq_q"))
    )
    return (all_q & all_kv).fill_null(False)


def peak_dtype() -> pl.Expr:
    """The dtype of the call's arithmetic: composed calls run at their GEMMs' precision (SDPA
    math upcasts to fp32 and may use the CUDA cores), fused kernels at their inputs'."""
    from_gemms = pl.col("gemm_precision").replace_strict(PRECISION_PEAKS, default=None)
    composed = pl.col("implementation").is_in(list(COMPOSED))
    return pl.when(composed).then(pl.coalesce(from_gemms, "dtype")).otherwise(pl.col("dtype"))


def peak_tflops(of: str) -> pl.Expr:
    """The device's peak for the dtype in column ``of`` (null where the GPU or the dtype has
    none)."""
    by_dtype = [pl.when(pl.col(of) == d).then(pl.col(f"peak_{d}_tflops")) for d in PEAK_DTYPES]
    return pl.coalesce(by_dtype)


def with_call_figures(calls: pl.DataFrame) -> pl.DataFrame:
    """Per call: flops, TFLOP/s, peak, % of peak and why not a faster SDPA backend."""
    value, note = flops()
    figures = calls.with_columns(flops_per_call=value, flops_note=note, peak_dtype=peak_dtype())
    figures = figures.with_columns(
        peak_tflops=peak_tflops("peak_dtype"), input_peak_tflops=peak_tflops("dtype")
    )
    # The dispatch rules are one large expression: evaluate it on the distinct SDPA forward
    # signatures only (a training trace repeats a handful of them thousands of times).
    sdpa = pl.col("implementation").is_in(list(BACKENDS)) & (pl.col("direction") == FORWARD)
    signature = [c for c in DISPATCH_INPUTS if c in figures.columns]
    judged = with_why_not(figures.filter(sdpa).select(signature).unique())
    figures = figures.join(judged, on=signature, how="left", nulls_equal=True)
    return figures.with_columns(why_not=pl.coalesce("why_not", composed_why()))


def composed_why() -> pl.Expr:
    """A composed call's why_not where an op chose to compose it (COMPOSED_BY: its call site
    names the op and the argument)."""
    why: pl.Expr = pl.lit(None, pl.String)
    for rule in reversed(COMPOSED_BY):
        chose = f"({rule.label}={rule.value}): "
        site = pl.col("call_site").str.contains(rule.op.rstrip("$") + " " + re.escape(chose))
        why = (
            pl.when(site & pl.col("implementation").is_in(list(COMPOSED)))
            .then(pl.lit(rule.why))
            .otherwise(why)
        )
    return why


# A row is a call site and shape (not a region: a cold capture names every call's region).
ROW_KEY = (
    "call_site", "implementation", "direction", "batch", "heads_q", "heads_kv",
    "seq_q", "seq_kv", "head_dim", "head_dim_v", "gqa_ratio", "tokens_q", "dtype", "causal",
    "mask",
    "dropout",
)  # fmt: skip


def rows(calls: pl.DataFrame, iterations: int, gpu_activity_us_per_iter: float) -> pl.DataFrame:
    """One row per call site and shape: the calls of the counted iterations, per iteration and
    per call (means)."""
    counted = calls.filter(pl.col("iteration").is_not_null())
    gpu_us = pl.col("gpu_ns") / 1e3
    # Calls of one site and shape that ran different attention kernels (vLLM's unified
    # attention: a 2d kernel, or a 3d kernel and its reduction) are rows of their own: a mean
    # over both would describe no call.
    key = [*ROW_KEY, "kernel_set"] if "kernel_set" in counted.columns else list(ROW_KEY)
    table = counted.group_by(key, maintain_order=True).agg(
        source=pl.col("source").first(),
        region=pl.col("region").drop_nulls().first(),
        calls_per_iter=pl.len() / iterations,
        kernels_per_call=pl.col("kernels").mean(),
        gpu_us_per_call=gpu_us.mean(),
        cpu_us_per_call=(pl.col("cpu_ns") / 1e3).mean(),
        gpu_us_per_iter=gpu_us.sum() / iterations,
        kv_cache_write_us_per_call=(pl.col("kv_cache_write_ns") / 1e3).mean(),
        # Calls of a row share their shapes, so their FLOPs, except where a step annotation
        # gives them (each step its own lengths): then the mean.
        flops_per_call=pl.when(pl.col("flops_per_call").n_unique() == 1)
        .then(pl.col("flops_per_call").first())
        .otherwise(pl.col("flops_per_call").mean().round().cast(pl.Int64)),
        flops_note=pl.col("flops_note").first(),
        peak_dtype=pl.col("peak_dtype").first(),
        peak_tflops=pl.col("peak_tflops").first(),
        input_peak_tflops=pl.col("input_peak_tflops").first(),
        # A mean: one call of a row may write more (T5's first layer makes its position bias).
        scores_bytes=pl.col("scores_bytes").mean().round().cast(pl.Int64),
        mask_copies=pl.col("mask_copies").any(),
        kernel_names=pl.col("kernel_names")
        .list.explode(keep_nulls=False, empty_as_null=False)
        .unique(maintain_order=True),
        why_not=pl.col("why_not").first(),
        refused_backends=pl.col("refused_backends").first(),
        eligible_backends=pl.col("eligible_backends").first(),
        shapes_from=pl.col("shapes_from").first(),
        nested=pl.col("nested").any(),
        blocks_q=pl.col("blocks_q").first(),
        blocks_kv=pl.col("blocks_kv").first(),
    )
    tflops = pl.col("flops_per_call") / pl.col("gpu_us_per_call") / 1e6
    share = (
        pl.col("gpu_us_per_iter") / gpu_activity_us_per_iter * 100
        if gpu_activity_us_per_iter
        else pl.lit(None, pl.Float64)
    )
    return table.with_columns(
        tflops=pl.when(pl.col("gpu_us_per_call") > 0).then(tflops),
        share_of_gpu_activity_pct=share,
    ).with_columns(pct_of_peak=pl.col("tflops") / pl.col("peak_tflops") * 100)


def with_fused_estimate(table: pl.DataFrame) -> pl.DataFrame:
    """For composed rows: the GPU time a fused kernel would take for the same FLOPs, at the
    rate the trace's fused calls of the same direction and shapes (seq_q, seq_kv, head_dim)
    achieved (FLOP-weighted), else at the GPU's peak for the row's dtype (a lower bound); the
    source says which."""
    fused = table.filter(
        ~pl.col("implementation").is_in(list(COMPOSED))
        & pl.col("flops_note").is_null()
        & pl.col("tflops").is_not_null()
    )
    same = ["direction", "seq_q", "seq_kv", "head_dim"]
    rates = fused.group_by(same).agg(
        fused_tflops=(pl.col("flops_per_call") * pl.col("calls_per_iter")).sum()
        / (pl.col("gpu_us_per_call") * pl.col("calls_per_iter")).sum()
        / 1e6,
        fused_by=pl.col("implementation").unique().sort().str.join(", "),
    )
    joined = table.join(rates, on=same, how="left", nulls_equal=False)
    composed = (
        pl.col("implementation").is_in(list(COMPOSED)) & pl.col("flops_per_call").is_not_null()
    )
    at_rate = pl.col("flops_per_call") / pl.col("fused_tflops") / 1e6
    input_peak = pl.col("input_peak_tflops")
    at_peak = pl.col("flops_per_call") / input_peak / 1e6
    return joined.with_columns(
        fused_estimate_us=pl.when(composed).then(pl.coalesce(at_rate, at_peak)),
        fused_estimate_source=pl.when(composed & at_rate.is_not_null())
        .then(pl.format("the {} calls of this trace ({} TFLOP/s)", "fused_by",
                        pl.col("fused_tflops").round(1)))
        .when(composed & at_peak.is_not_null())
        .then(pl.format("the GPU's {} peak ({} TFLOP/s): a lower bound", "dtype", input_peak)),
    ).drop("fused_tflops", "fused_by", "input_peak_tflops")  # fmt: skip
