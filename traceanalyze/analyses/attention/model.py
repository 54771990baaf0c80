"""`attention`: every attention call of a trace, what ran, how well, and why not faster.

One row per call site and shape (:data:`ATTENTION_COLUMNS`), per iteration of the counted
iterations; the host cost of attention libraries; and the findings that matter, first. Every
figure is defined once in :data:`DEFINITIONS` (the README prints them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from traceanalyze.analyses.activities import classified_activities, iteration_count
from traceanalyze.analyses.attention.calls import FUSED, FoundCalls, find_calls
from traceanalyze.analyses.attention.capture_facts import CaptureFacts, with_capture_facts
from traceanalyze.analyses.attention.composed import ComposedCalls
from traceanalyze.analyses.attention.dispatch import BACKENDS, family
from traceanalyze.analyses.attention.figures import (
    rows,
    with_call_figures,
    with_fused_estimate,
)
from traceanalyze.analyses.attention.findings import findings
from traceanalyze.analyses.attention.host import host_costs
from traceanalyze.analyses.attention.match import kernel_rules, name_mask
from traceanalyze.analyses.attention.rules import (
    BACKWARD,
    CUDNN_PLAN_BUILD_US,
    KERNEL_RULES,
    KV_CACHE_WRITE_KERNELS,
)
from traceanalyze.analyses.attention.scores import score_writes
from traceanalyze.analyses.attention.shapes import (
    KERNEL_SAID,
    SHAPE_COLUMNS,
    kernel_shapes,
    op_shapes,
    step_lengths,
)
from traceanalyze.analyses.iterations import counted
from traceanalyze.display import Shown
from traceanalyze.hardware.devices import AMD_NAME
from traceanalyze.hardware.peaks import PEAK_DTYPES, device_peaks
from traceanalyze.trace import Trace

ATTENTION_COLUMNS = (
    "implementation", "direction", "call_site", "calls_per_iter", "batch", "heads_q",
    "heads_kv", "seq_q", "seq_kv", "head_dim", "gqa_ratio", "dtype", "causal", "mask",
    "dropout", "kernels_per_call", "gpu_us_per_call", "cpu_us_per_call", "flops_per_call", "tflops",
    "pct_of_peak", "scores_bytes", "why_not", "refused_backends", "eligible_backends",
    "gpu_us_per_iter", "share_of_gpu_activity_pct",
    "peak_dtype", "peak_tflops", "flops_note", "fused_estimate_us", "fused_estimate_source",
    "head_dim_v", "tokens_q", "blocks_q", "blocks_kv", "mask_copies", "nested", "region",
    "kv_cache_write_us_per_call",
    "source", "shapes_from", "kernels",
)  # fmt: skip

DEFINITIONS: dict[str, str] = {
    "implementation": "what ran the call: composed attention (matmul, softmax, matmul ops), "
    "an SDPA backend (sdpa_math, sdpa_efficient, sdpa_flash, sdpa_cudnn), flex, a library "
    "(flash_attn, xformers, flashinfer, paged, unified, transformer_engine, sage, ck_aiter, "
    "ascend), a Triton kernel (triton_fused) or other; the most specific name any of its ops "
    "or kernels carries",
    "call_site": "the CPU op that made the call (its outermost attention op), the composed "
    "ops (matmul -> softmax -> matmul, after the op that chose to compose them where one "
    "did, e.g. aten::_native_multi_head_attention (need_weights=True)), or for a call with "
    "no op of its own the op that launched its kernels (a CUDA graph replay says so)",
    "calls_per_iter": "calls of this site and shape per counted iteration (calls that ran "
    "different attention kernels, such as vLLM's unified 2d and 3d kernels or a causal and a "
    "sliding-window kernel, are rows of their own)",
    "shape columns": "`batch`, `heads_q`, `heads_kv`, `seq_q`, `seq_kv`, `head_dim` from the "
    "call's recorded inputs (`record_shapes`); composed attention from the softmax's scores "
    "[batch, heads, seq_q, seq_kv] and the matmuls; a variable-length batch gives its longest "
    "sequences; without recorded shapes what the kernel names say (`shapes_from`): a "
    "head size, a dtype, causal, a GQA ratio (ROCm's paged decode kernels), never the "
    "per-call batch, heads or sequence lengths",
    "batch": "sequences in the call: the query's first dimension, or for a packed "
    "variable-length batch one less than the length of its cumulative query lengths",
    "heads_q": "query heads",
    "heads_kv": "key/value heads (fewer than `heads_q` under grouped-query attention)",
    "seq_q": "query tokens per sequence (a variable-length batch: its longest, the call's "
    "maximum query length argument)",
    "seq_kv": "key/value tokens per sequence (a variable-length batch: its longest, the "
    "call's maximum key length argument)",
    "head_dim": "the head size of the queries and keys, in elements",
    "head_dim_v": "the head size of the values (and of the output), in elements",
    "tokens_q": "query tokens of the call: batch x seq_q, or a packed batch's token count (the "
    "query's first dimension)",
    "dropout": "the dropout probability the call recorded (composed attention: its dropout "
    "op's, 0 without one or in eval mode)",
    "blocks_q": "flex attention's block mask: its query blocks (the last dimension of the "
    "op's `kv_num_blocks` input)",
    "blocks_kv": "flex attention's block mask: the most key/value blocks one query block "
    "lists (the last dimension of the op's `kv_indices` input)",
    "gqa_ratio": "query heads per key/value head: heads_q / heads_kv where recorded, else the "
    "GQA_RATIO template argument of the call's kernel",
    "causal": "is_causal as the call recorded it, or the kernel's name says it; null where "
    "neither says (composed attention: the mask's contents are not in the trace)",
    "mask": "none, bool or float (an attn_mask, or the masking op of composed attention), "
    "block (flex's block mask); none also where the call's op takes no mask argument "
    "(flash, vLLM's attention op); null where the trace does not say",
    "kernels_per_call": "GPU kernels the call ran (memory copies and sets not counted, nor "
    "its KV-cache writes)",
    "gpu_us_per_call": "GPU time of everything the call launched (kernels, copies, sets) but "
    "its KV-cache writes, mean per call",
    "kv_cache_write_us_per_call": "GPU time of the KV-cache writes (reshape_and_cache, "
    "store_kvcache, ...) the call launched or its KV-cache op just before it launched (vLLM's "
    "unified_kv_cache_update, SGLang's store_cache), mean per call; not attention compute, so "
    "apart from gpu_us_per_call; null where it wrote none",
    "cpu_us_per_call": "the call's time on the CPU: its op's duration, or the span from the "
    "first to the last matmul of composed attention; null for a call with no op of its own",
    "flops_per_call": "2·B·H·Sq·Skv·(D + Dv) forward (4·B·H·Sq·Skv·D for equal head sizes), "
    "halved when causal for kernels that skip the masked half (not composed attention or SDPA "
    "math, which compute every score), 2.5x for a backward; a variable-length call without "
    "lengths of its own (vLLM, SGLang) from its step annotation's sums over the sequences "
    "(2·H·(D + Dv)·Σ Sq·Skv, causal Σ Sq·Skv - Sq·(Sq - 1)/2; a row's mean over its steps); "
    "where a capture manifest beside the trace states them and they fit the call, its "
    "per-sequence lengths (the same sums: exact) and a flex block mask's sparsity (the blocks "
    "computed); `flops_note` says where it is an upper bound or unknown, or where the manifest "
    "gave it",
    "tflops": "flops_per_call / gpu_us_per_call",
    "pct_of_peak": "tflops over the GPU's dense peak for `peak_dtype` (the inputs' dtype; "
    "composed attention: its GEMMs' precision)",
    "scores_bytes": "bytes written per call into tensors of the scores' size "
    "(batch·heads·seq_q·seq_kv elements), in the dtype each op writes; 0 for fused kernels",
    "why_not": "for an SDPA forward call that did not run the fastest backend for its GPU, "
    "each faster backend and the dispatch rule its inputs fail (PyTorch's sdp_utils), or "
    "eligible when they fail none; first, where the capture manifest says the caller forced "
    "the backend that ran (sdpa_kernel), that; `refused_backends` and `eligible_backends` "
    "list them; for composed attention inside an op that chose to compose it "
    "(nn.MultiheadAttention's native op with need_weights=True), that op's reason",
    "nested": "nested (jagged) inputs: a nested tensor, or packed [tokens, heads, dim] inputs "
    "with cumulative lengths given to an SDPA backend's op (how nested-tensor SDPA reaches it); "
    "a library's own variable-length call (flash-attn, vLLM) is not nested",
    "share_of_gpu_activity_pct": "the row's GPU time per iteration over the iteration's GPU "
    "activity time",
    "fused_estimate_us": "for composed attention: its FLOPs at the rate this trace's fused "
    "calls of the same direction, sequence lengths and head size achieved, else at the GPU's "
    "peak for its dtype (a lower bound); `fused_estimate_source` says which",
    "host cost": "per kind of host work of attention libraries: cuDNN attention's CPU self "
    "time (a call above 1,000 µs builds a plan), FlashInfer planning, vLLM and SGLang "
    "attention metadata, flex's create_block_mask, per call and per iteration",
    "us_per_call": "host cost per call, mean: a cuDNN attention op's CPU self time, else the "
    "duration of the op, annotation or Python frame",
    "plan_builds_per_iter": "cuDNN attention calls per iteration whose CPU self time exceeds "
    f"{CUDNN_PLAN_BUILD_US:,.0f} µs (a plan built, or the plan cache missed); null for the "
    "other kinds",
    "attention_us_per_iter": "GPU time of every attention call per iteration: `gpu_us_per_iter` "
    "summed over the rows",
}


def attention_steps(trace: Trace) -> Trace:
    """The iterations the attention figures are over: today the counted ones
    (:func:`~traceanalyze.analyses.iterations.counted`); the one place to change it."""
    return counted(trace)


@dataclass(frozen=True, repr=False)  # Shown: a short repr, tables in Jupyter
class AttentionResult(Shown):
    """Everything `attention` reports for one trace."""

    rows: pl.DataFrame  # ATTENTION_COLUMNS, most GPU time per iteration first
    host: pl.DataFrame  # host.HOST_COLUMNS
    calls: pl.DataFrame  # one row per call (every iteration; ``iteration`` null: not counted)
    findings: tuple[str, ...]
    gpu_activity_us_per_iter: float
    attention_us_per_iter: float
    has_shapes: bool
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def empty(self) -> bool:
        return not self.calls.height


def attention(
    trace: Trace,
    cudnn_version: str | None = None,
    forced: str | None = None,
    facts: CaptureFacts | None = None,
) -> AttentionResult:
    """The attention calls of ``trace`` (see the module docstring). ``cudnn_version`` (e.g.
    "9.19.0", a capture manifest's) decides whether PyTorch prefers cuDNN's SDPA on sm90/sm100
    (newer than 9.15); traces do not record it, and without it flash is the first choice.
    ``forced`` is the SDPA backend ("math", "flash", ... as ``dispatch.FORCED`` names them) the
    caller forced with sdpa_kernel around the whole trace, where a capture manifest says so.
    ``facts``: what the capture manifest says of the call that the trace cannot (per-sequence
    lengths, a block mask's sparsity), used for FLOPs where it fits the call."""
    trace = attention_steps(trace)
    gpu = classified_activities(trace)
    found = find_calls(trace, gpu)
    preferred = cudnn_preferred(cudnn_version)
    calls = with_call_figures(with_capture_facts(_per_call(trace, found, preferred, forced), facts))
    n = iteration_count(trace)
    activity_us = float(gpu.filter(pl.col("iteration").is_not_null())["dur_ns"].sum() or 0) / 1e3
    per_iter = activity_us / n
    table = with_fused_estimate(rows(calls, n, per_iter))
    table = table.with_columns(kernels=pl.col("kernel_names")).sort(
        ["gpu_us_per_iter", "call_site"], descending=[True, False], nulls_last=True
    )
    host = host_costs(trace)
    has_shapes = bool(trace.cpu["input_dims"].is_not_null().any())
    attention_us = float(table["gpu_us_per_iter"].sum() or 0)
    return AttentionResult(
        rows=table.select(ATTENTION_COLUMNS),
        host=host,
        calls=calls.select(CALL_TABLE),
        findings=findings(table, host, per_iter, n),
        gpu_activity_us_per_iter=per_iter,
        attention_us_per_iter=attention_us,
        has_shapes=has_shapes,
        notes=tuple(_notes(calls, has_shapes, cudnn_version)),
    )


CALL_TABLE = (
    "call_id", "rank", "iteration", "source", "implementation", "direction", "call_site",
    "batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim", "dtype", "causal", "mask",
    "kernels", "gpu_ns", "cpu_ns", "flops_per_call", "scores_bytes", "kernel_names",
    "kv_cache_write_ns",
)  # fmt: skip


def cudnn_preferred(version: str | None) -> bool | None:
    """Whether PyTorch prefers cuDNN's SDPA on sm90/sm100: with cuDNN newer than 9.15
    (sdp_utils' check_prefer_cudnn_attention); None when the version is not known."""
    parts = [int(p) for p in (version or "").split(".")[:2] if p.isdigit()]
    if len(parts) != 2:
        return None
    return (parts[0], parts[1]) > CUDNN_PREFERRED_AFTER


# cuDNN versions after this one are PyTorch's first SDPA choice on sm90/sm100.
CUDNN_PREFERRED_AFTER = (9, 15)


def _per_call(
    trace: Trace, found: FoundCalls, cudnn_first: bool | None, forced: str | None
) -> pl.DataFrame:
    """Each call with its shapes, GPU work, device and score writes."""
    # KV-cache writes are the call's but not attention compute: timed apart, not counted.
    kv = name_mask(found.activities, KV_CACHE_WRITE_KERNELS)
    activities = found.activities.filter(~kv)
    kv_writes = (
        found.activities.filter(kv)
        .group_by("call_id")
        .agg(kv_cache_write_ns=pl.col("dur_ns").sum())
    )
    work = (
        activities.sort("ts_ns")
        .group_by("call_id")
        .agg(
            kernels=(pl.col("kind") == "kernel").sum(),
            gpu_ns=pl.col("dur_ns").sum(),
            kernel_names=pl.col("name")
            .filter(pl.col("kind") == "kernel")
            .unique(maintain_order=True),
            kernel_set=pl.col("name").filter(_attention_kernel(activities)).unique().sort(),
            device=pl.col("device").first(),
            gemm_precision=pl.col("gemm_precision")
            .filter(pl.col("category") == "gemm")
            .sort_by(pl.col("dur_ns").filter(pl.col("category") == "gemm"), descending=True)
            .first(),
        )
    )
    # A captured call's kernel ran nowhere in the trace: its launch names it.
    named = pl.concat([activities.select("call_id", "name", "ts_ns"), found.captured])
    shapes = _shapes(trace, found.calls, found.composed, named)
    calls = (
        found.calls.join(shapes, on="call_id", how="left")
        .join(work, on="call_id", how="left")
        .join(kv_writes, on="call_id", how="left")
        .join(
            found.captured.group_by("call_id").agg(captured_names=pl.col("name").unique()),
            on="call_id",
            how="left",
        )
        .with_columns(
            pl.col("kernels").fill_null(0),
            pl.coalesce("kernel_names", "captured_names").fill_null([]),
        )
        .drop("captured_names")
        .with_columns(nested=_nested())
    )
    calls = (
        _with_devices(calls, _devices(trace))
        .with_columns(
            cudnn_preferred=pl.lit(cudnn_first, pl.Boolean),
            forced=pl.lit(forced, pl.String),
        )
        .with_columns(
            family=family(),
            training=pl.lit(bool((calls["direction"] == BACKWARD).any())),
            scores_numel=pl.col("batch_heads") * pl.col("seq_q") * pl.col("seq_kv"),
        )
    )
    # A variable-length call with no lengths of its own: its step annotation's sums, if any.
    calls = calls.with_columns(
        **{
            name: pl.when(pl.col("varlen").fill_null(False) & pl.col("seq_q").is_null()).then(value)
            for name, value in step_lengths(pl.col("region")).items()
        }
    )
    writes = score_writes(trace.cpu, calls, activities)
    return calls.join(writes, on="call_id", how="left")


def _shapes(
    trace: Trace, calls: pl.DataFrame, composed: ComposedCalls, named: pl.DataFrame
) -> pl.DataFrame:
    """Per call: its recorded shapes (ops or composed), kernel-name fills (``named``: call_id,
    name, ts_ns of its attention kernels), and a backward's missing shapes from its forward
    call."""
    recorded = pl.concat([op_shapes(trace.cpu, calls), composed.shapes], how="diagonal_relaxed")
    said = kernel_shapes(named)
    shapes = (
        calls.select("call_id")
        .join(recorded, on="call_id", how="left")
        .join(said, on="call_id", how="left")
    )
    shapes = shapes.with_columns(
        shapes_from=pl.when(
            pl.col("shapes_recorded").fill_null(False) | pl.col("seq_q").is_not_null()
        )
        .then(pl.lit("recorded shapes"))
        .when(pl.any_horizontal(pl.col(f"k_{c}").is_not_null() for c in KERNEL_SAID))
        .then(pl.lit("kernel names"))
        .otherwise(pl.lit("none")),
        head_dim=pl.coalesce("head_dim", "k_head_dim"),
        causal=pl.coalesce("causal", "k_causal"),
        dtype=pl.coalesce("dtype", "k_dtype"),
    )
    shapes = _from_forward(shapes).with_columns(dtype=pl.coalesce("dtype", "scores_dtype"))
    # Query heads per key/value head: the recorded heads', else the kernel name's.
    recorded_ratio = pl.when(pl.col("heads_q") % pl.col("heads_kv") == 0).then(
        pl.col("heads_q") // pl.col("heads_kv")
    )
    return shapes.with_columns(
        batch_heads=pl.coalesce(pl.col("batch") * pl.col("heads_q"), "batch_heads"),
        head_dim_v=pl.coalesce("head_dim_v", "k_head_dim_v", "head_dim"),
        heads_kv=pl.coalesce("heads_kv", pl.col("heads_q") // pl.col("k_gqa_ratio"), "heads_q"),
        gqa_ratio=pl.coalesce(recorded_ratio, "k_gqa_ratio"),
    ).drop([f"k_{c}" for c in KERNEL_SAID])


def _attention_kernel(activities: pl.DataFrame) -> pl.Expr:
    """An attention kernel (by the taxonomy or a kernel rule, helpers included): the kernels
    that tell one variant of a call from another (vLLM's unified attention runs one 2d kernel
    or a 3d kernel and its reduction, by the step's lengths)."""
    named = kernel_rules(activities["name"].unique(), KERNEL_RULES)["name"]
    return (pl.col("kind") == "kernel") & (
        (pl.col("category") == FUSED) | pl.col("name").is_in(named.implode())
    )


def _nested() -> pl.Expr:
    """Nested (jagged) inputs: a nested tensor recorded without dims, or packed [tokens, heads,
    dim] inputs with cumulative lengths given to an SDPA backend's op, which is how
    nested-tensor SDPA reaches it (no aten::scaled_dot_product_attention op is recorded); a
    library's varlen call (flash_attn, vLLM) is varlen, not nested."""
    sdpa = pl.col("implementation").is_in(list(BACKENDS))
    return pl.col("nested").fill_null(False) | (pl.col("varlen").fill_null(False) & sdpa)


# Shape columns a backward takes from its forward call where it has none of its own.
_INHERITED = ("batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim", "head_dim_v", "dtype",
              "causal", "mask", "dropout", "tokens_q", "tokens_kv", "batch_heads")  # fmt: skip


def _from_forward(shapes: pl.DataFrame) -> pl.DataFrame:
    if "forward_call_id" not in shapes.columns:
        return shapes
    forward = shapes.select(
        forward_call_id="call_id", **{f"f_{c}": c for c in _INHERITED if c in shapes.columns}
    )
    joined = shapes.join(forward, on="forward_call_id", how="left")
    return joined.with_columns(
        pl.coalesce(c, f"f_{c}").alias(c) for c in _INHERITED if c in shapes.columns
    ).drop([f"f_{c}" for c in _INHERITED if c in shapes.columns])


def _with_devices(calls: pl.DataFrame, devices: pl.DataFrame) -> pl.DataFrame:
    """``calls`` with their device's columns: by (rank, device), else the rank's only device
    (ROCm traces number a kernel's device apart from deviceProperties' ids)."""
    exact = calls.join(devices, on=["rank", "device"], how="left")
    only = devices.filter(pl.len().over("rank") == 1).drop("device")
    missing = [c for c in only.columns if c != "rank"]
    fallback = exact.select("call_id", "rank").join(only, on="rank", how="left")
    return exact.with_columns(pl.coalesce(pl.col(c), fallback[c]).alias(c) for c in missing)


def _devices(trace: Trace) -> pl.DataFrame:
    """Per (rank, device): sm (major * 10 + minor), rocm, and the peaks by dtype."""
    devices = trace.devices
    rocm = pl.col("name").str.contains(AMD_NAME).fill_null(False) | (pl.col("warp_size") == 64)
    rocm = rocm | pl.lit(any("hip_runtime_version" in m.versions for m in trace.meta))
    described = devices.select(
        "rank",
        "device",
        sm=pl.col("compute_major") * 10 + pl.col("compute_minor"),
        rocm=rocm.fill_null(False),
    ).unique(["rank", "device"], keep="first")
    peaks = device_peaks(devices).select(
        "rank", "device", *[f"peak_{d}_tflops" for d in PEAK_DTYPES]
    )
    return described.join(peaks, on=["rank", "device"], how="left")


def _notes(calls: pl.DataFrame, has_shapes: bool, cudnn_version: str | None) -> list[str]:
    notes = []
    hopper = calls.filter(
        pl.col("sm").is_in([90, 100, 103]) & pl.col("implementation").str.starts_with("sdpa_")
    )
    if hopper.height and cudnn_version is None:
        notes.append(
            "PyTorch prefers cuDNN's SDPA on sm90/sm100 with cuDNN newer than 9.15; the trace "
            "does not record the cuDNN version (a capture manifest does), so why_not takes "
            "cuDNN and flash as equal first choices there"
        )
    if calls.height and not has_shapes:
        notes.append(
            "the trace recorded no shapes (record_shapes=False): shapes and FLOPs come from "
            "kernel names where they say them"
        )
    outside = calls.filter(pl.col("iteration").is_null()).height
    if outside == 1:
        notes.append("1 call outside the counted iterations is left out of the rows")
    elif outside:
        notes.append(f"{outside} calls outside the counted iterations are left out of the rows")
    return notes


__all__ = ["ATTENTION_COLUMNS", "DEFINITIONS", "SHAPE_COLUMNS", "AttentionResult", "attention"]
