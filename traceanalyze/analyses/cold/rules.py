"""Causes of one-off (first-call) work, as data: which CPU intervals each cause claims.

A rule claims an interval (an op, annotation or runtime/driver call of the CPU call tree) when
its ``name`` pattern matches the interval's own name (no pattern: any name) and its ``within``
pattern matches the interval's own name or the name of an interval around it (no pattern: no
condition). The first rule in table order that claims an interval gives its cause; an interval
no rule claims is ``other``. So order says which cause wins: a ``cudaMalloc`` inside a cuDNN op
is allocator growth, a cuDNN op inside a compiled region is cuDNN's (but one Dynamo runs on fake
tensors while it traces is compilation), and a Triton benchmark run inside Inductor's compile is
Triton's.

The GPU side uses only the rules without a ``name`` pattern (the *context* of the launch): a
kernel belongs to the cuDNN op, the autotuner or the compiled region that launched it, never to
the launch call's own name.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceanalyze.analyses.cudnn import CUDNN_OP
from traceanalyze.analyses.repeated import COMPILING

OTHER = "other"


@dataclass(frozen=True)
class CauseRule:
    cause: str
    name: str | None = None  # regex on the interval's own name
    within: str | None = None  # regex on its own name or an enclosing interval's


# One description per cause, in the order tables list them (other last).
CAUSES: dict[str, str] = {
    "cudnn_plan": "cuDNN graph/plan build and algorithm search (self time of the ops that "
    "call cuDNN, and everything they run that no earlier rule claims)",
    "cublas_init": "cuBLAS/cuBLASLt handle creation and heuristics (inside the GEMM ops)",
    "triton_compile": "Triton kernel compile, load and autotuning",
    "inductor_compile": "Dynamo tracing and Inductor compilation (`(dynamo_timed)` phases), "
    "and the compiled code's wrappers (guards, first load of the compiled module)",
    "cuda_lazy_init": "lazy CUDA and library initialisation: device queries, streams, events, "
    "modules loaded at a kernel's first launch (launch calls' time over their steady time)",
    "allocator_growth": "the caching allocator asking the driver for memory or giving it back "
    "(cudaMalloc, cudaFree and kin: a failed cudaMalloc empties the cache with cudaFree and "
    "retries)",
    OTHER: "everything no rule claims (Python and framework time, synchronisation, the call "
    "region's own time)",
}

# Frees too: when cudaMalloc fails the caching allocator frees its cached blocks (cudaFree,
# synchronising the device) and retries, so a cold first call inside a cuDNN op can spend
# seconds in cudaFree (hta_alexnet_a100: 6.5 s inside cudnn_convolution) that is allocator
# work, not cuDNN planning.
_ALLOCATOR = (
    r"^(cudaMalloc|cudaMallocAsync|cudaMallocHost|cudaHostAlloc|cudaMallocManaged|cuMemAlloc\w*"
    r"|cuMemCreate|cuMemMap|cuMemAddressReserve|cuMemSetAccess|hipMalloc|hipHostMalloc"
    r"|hipMallocAsync|hipExtMallocWithFlags"
    r"|cudaFree|cudaFreeAsync|cudaFreeHost|cuMemFree\w*|cuMemRelease|cuMemUnmap"
    r"|cuMemAddressFree|hipFree|hipFreeAsync|hipHostFree)$"
)
_MODULE_LOAD = r"^(cuModule\w*|cuLibrary\w*|hipModule(Load|GetFunction)\w*)$"
# Kernel launches are here for their first-call excess: with lazy module loading the first
# launch of a kernel loads its module; a steady launch costs a few microseconds.
_LAZY_INIT = (
    r"^(cuInit|cuDevicePrimaryCtx\w*|cuCtxCreate\w*|cudaSetDevice|cudaGetDeviceProperties\w*"
    r"|cudaGetDeviceCount|cudaDeviceGetAttribute|cudaFuncGetAttributes|cudaFuncSetAttribute"
    r"|cuFuncGetAttribute|cuFuncSetAttribute|cudaStreamCreate\w*|cudaEventCreate\w*"
    r"|cudaGetDriverEntryPoint\w*|cudaDriverGetVersion|cudaRuntimeGetVersion|nvrtc\w*"
    r"|cuModule\w*|cuLibrary\w*|hipInit|hipGetDeviceProperties\w*|hipDeviceGetAttribute"
    r"|hipStreamCreate\w*|hipEventCreate\w*|hipModule(Load|GetFunction)\w*"
    r"|cudaLaunchKernel|cudaLaunchKernelExC|cudaLaunchCooperativeKernel|cuLaunchKernel"
    r"|cuLaunchKernelEx|hipLaunchKernel|hipExtLaunchKernel|hipModuleLaunchKernel"
    r"|hipExtModuleLaunchKernel)$"
)
_CUDNN = CUDNN_OP + r"|^cudnn\w*$|^miopen\w*$"
_CUBLAS = (
    r"^aten::(mm|bmm|addmm|addmv|mv|baddbmm|addbmm|addr|dot|vdot|_scaled_mm|_int_mm"
    r"|_addmm_activation|_grouped_mm|_scaled_grouped_mm)$|^(cublas|hipblas|rocblas)\w*$"
)
_TRITON = (
    r"(?i:triton|autotun|benchmark_all_configs|precompile|do_bench|select_algorithm)"
    r"|^_CALLABLE$"
)
# The compiled code as it runs (its first-call excess: guards, wrappers, first load).
_COMPILED = (
    r"^Torch-Compiled Region|^TorchDynamo|^Pregraph bytecode|^AOTDispatcher|CompiledFunction"
    r"|CompiledFxGraph|(?i:inductor)"
)

CAUSE_RULES: tuple[CauseRule, ...] = (
    CauseRule("allocator_growth", name=_ALLOCATOR),
    CauseRule("triton_compile", name=_MODULE_LOAD, within=f"{_TRITON}|{COMPILING}|{_COMPILED}"),
    CauseRule("cuda_lazy_init", name=_LAZY_INIT),
    CauseRule("triton_compile", within=_TRITON),
    # Before cuDNN and cuBLAS: their ops run on fake tensors while Dynamo traces.
    CauseRule("inductor_compile", within=COMPILING),
    CauseRule("cudnn_plan", within=_CUDNN),
    CauseRule("cublas_init", within=_CUBLAS),
    CauseRule("inductor_compile", within=_COMPILED),
)

# Ancestor chains are short (a runtime call is rarely more than a dozen levels deep).
_MAX_DEPTH = 64


def causes(cpu: pl.DataFrame, op_ids: pl.Series) -> pl.DataFrame:
    """For each interval ``op_ids`` names (rows of ``cpu``, a Trace's cpu frame): ``cause``,
    and ``context_cause``, from the rules without a ``name`` pattern only: the cause of the
    work around the interval, not of the interval itself (how GPU activities get theirs)."""
    within = _within_hits(cpu, op_ids, [r.within for r in CAUSE_RULES])
    frame = within.with_columns(name=cpu["name"].gather(op_ids))
    return frame.select(
        _first_claim(CAUSE_RULES).alias("cause"),
        _first_claim(CAUSE_RULES, context_only=True).alias("context_cause"),
    )


def _first_claim(rules: tuple[CauseRule, ...], *, context_only: bool = False) -> pl.Expr:
    """The cause of the first rule that claims the row (columns ``within_<i>`` and ``name``)."""
    cause = pl.lit(OTHER)
    for index, rule in reversed(list(enumerate(rules))):
        if context_only and rule.name is not None:
            continue
        claims = pl.col(f"within_{index}")
        if rule.name is not None:
            claims = claims & pl.col("name").str.contains(rule.name)
        cause = pl.when(claims.fill_null(value=False)).then(pl.lit(rule.cause)).otherwise(cause)
    return cause


def _within_hits(cpu: pl.DataFrame, op_ids: pl.Series, patterns: list[str | None]) -> pl.DataFrame:
    """``within_<i>``: whether pattern i matches the interval or one of its ancestors (True for
    no pattern), walking all parent pointers at once, one level per step."""
    own = _matches(cpu, {f"within_{i}": p for i, p in enumerate(patterns) if p is not None})
    parents = pl.lit(cpu["parent_id"])
    walk = pl.DataFrame({"cursor": op_ids}, schema={"cursor": pl.Int64}).with_columns(
        pl.lit(hits).gather("cursor").alias(column) for column, hits in own.items()
    )
    for _ in range(_MAX_DEPTH):
        walk = walk.with_columns(cursor=parents.gather("cursor"))
        if walk["cursor"].is_null().all():
            break
        walk = walk.with_columns(
            pl.col(column) | pl.lit(hits).gather("cursor").fill_null(value=False)
            for column, hits in own.items()
        )
    return walk.select(
        (pl.col(f"within_{i}") if p is not None else pl.lit(value=True)).alias(f"within_{i}")
        for i, p in enumerate(patterns)
    )


def _matches(cpu: pl.DataFrame, patterns: dict[str, str]) -> dict[str, pl.Series]:
    """Whether each row's name matches each pattern; matched once per distinct name (a trace
    repeats a few hundred names over hundreds of thousands of rows)."""
    names = cpu.select("name")
    distinct = names.unique().with_columns(
        pl.col("name").str.contains(p).fill_null(value=False).alias(c) for c, p in patterns.items()
    )
    matched = names.join(distinct, on="name", how="left", nulls_equal=True, maintain_order="left")
    return {c: matched[c].fill_null(value=False) for c in patterns}
