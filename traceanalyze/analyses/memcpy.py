"""`memcpy`: every memory copy and set, the CPU op chain that caused it, and what to change.

The seed example: out-of-place ``masked_fill`` clones its input, so each call adds
``aten::masked_fill -> aten::clone -> aten::copy_ -> Memcpy DtoD``; ``masked_fill_`` does not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import polars as pl

from traceanalyze.analyses.activities import (
    GRAPH_LAUNCHES,
    activities,
    iteration_count,
    per_trace,
)
from traceanalyze.analyses.cputree import op_chains
from traceanalyze.analyses.graphs import with_captured_ops
from traceanalyze.analyses.iterations import on_counted
from traceanalyze.trace import Trace

# Out-of-place ATen ops that have an in-place twin (name + "_"): when their chain clones the
# input, the in-place form saves a full copy of the tensor.
IN_PLACE_TWINS = frozenset(
    {
        "masked_fill", "masked_scatter", "index_fill", "index_put", "index_add", "index_copy",
        "scatter", "scatter_add", "scatter_reduce", "fill", "zero", "clamp", "relu", "add",
        "sub", "mul", "div", "where", "tril", "triu", "addcmul", "addcdiv", "lerp", "sigmoid",
        "tanh", "exp", "neg", "copy",
    }
)  # fmt: skip


# Namespaces of libraries' custom ops (torch.ops.<namespace>.<op>): a copy inside one of them
# is the library's, not the user's.
LIBRARY_NAMESPACES = (
    "fbgemm", "torchrec", "vllm", "_C", "_vllm_fa2_C", "sgl_kernel", "flashinfer", "trtllm",
    "tensorrt_llm", "xformers", "apex", "aiter", "c10d",
)  # fmt: skip


@dataclass(frozen=True)
class Cause:
    """A chain pattern and the advice it earns.

    ``{op}`` in the advice is the op captured by the pattern's first group; such a cause only
    applies when that op has an in-place twin.
    """

    pattern: str
    advice: str
    # False for traffic that is expected and small: it stays in the table, not in the findings.
    actionable: bool = True

    @property
    def names_op(self) -> bool:
        return "{op}" in self.advice


# First match wins. Patterns run over "op1 -> op2 -> ... -> <activity name>".
CAUSES: tuple[Cause, ...] = (
    # Copies made inside autograd's backward formulas (e.g. MaskedFillBackward0 runs an
    # out-of-place masked_fill on the gradient): the user's code did not write them.
    Cause(
        r"(?:autograd::engine::evaluate_function: \w+|\w+Backward\d*) -> .*Memcpy DtoD",
        "made by autograd's backward formula of an op, not by your code; it goes away only "
        "with a different op or a custom backward",
        actionable=False,
    ),
    # Copies and reads a library's own op makes (FBGEMM's sparse-feature permute reads a
    # length back with `.item()`): the fix is in the library, not in the user's code.
    Cause(
        rf"(?:^|-> )(?:{'|'.join(LIBRARY_NAMESPACES)})::\w+ -> .*Memcpy",
        "made inside a library's own op (see the chain), not by your code; it changes only "
        "with the library's version or options",
        actionable=False,
    ),
    Cause(
        r"aten::(\w+) -> aten::clone -> (?:aten::\w+ -> )*aten::copy_ -> Memcpy DtoD",
        "out-of-place `{op}` clones its input first; use `{op}_` where the input may be "
        "overwritten",
    ),
    Cause(
        r"aten::contiguous -> .*Memcpy DtoD",
        "a non-contiguous (transposed or permuted) tensor is materialised by `.contiguous()`",
    ),
    # Traffic of torch.compile's own compilation (dynamo's frames above it): a one-off of the
    # first call, not of the model's steps.
    Cause(
        r"^dynamo -> ",
        "made while torch.compile compiles (a one-off of the first call, not of each step); "
        "warm up before measuring",
        actionable=False,
    ),
    # `.item()` (and `if tensor:`, through `aten::is_nonzero`) reads one value back; ROCm
    # records that copy as DtoD, CUDA as DtoH: the op, not the direction, names the cause.
    Cause(
        r"aten::_local_scalar_dense -> Memcpy",
        "a scalar read back by `.item()` (or `if tensor:` / `bool(tensor)`): the CPU waits for "
        "the GPU to finish; keep the value on the GPU or read it once, later",
    ),
    # DDP copies each gradient bucket back into the parameters' `.grad` after its all-reduce.
    Cause(
        r"ddp\.reducer::copy_bucket_to_grad -> .*Memcpy DtoD",
        "DDP copies each all-reduced gradient bucket into `.grad`; "
        "`DistributedDataParallel(..., gradient_as_bucket_view=True)` makes the gradients "
        "views of the buckets and removes the copy",
    ),
    # Pinned already: pinning is no advice there. New data each step (a training batch) must be
    # copied each step: "move it once" holds only for data that does not change.
    Cause(
        r"Memcpy HtoD \(Pinned",
        "host-to-device copy from pinned memory inside the measured region; move data that does "
        "not change to the GPU once; for new data each step, copy with non_blocking=True ahead "
        "of its use so it overlaps compute",
    ),
    Cause(
        r"Memcpy HtoD",
        "host-to-device copy inside the measured region; move data that does not change to the "
        "GPU once; for new data each step, copy from pinned memory with non_blocking=True",
    ),
    Cause(
        r"Memcpy DtoH",
        "device-to-host copy: `.item()`, `.cpu()`, `.tolist()` or printing a tensor; it also "
        "synchronises the CPU with the GPU",
    ),
    Cause(
        r"aten::(?:bmm|mm|matmul|addmm|baddbmm|linear)\b.*Memset",
        "cuBLAS zeroes a workspace or split-K accumulator; small and expected",
        actionable=False,
    ),
    Cause(
        r"cudnn.*Memset",
        "cuDNN zeroes a workspace (for example the softmax statistics); small and expected",
        actionable=False,
    ),
    # A replayed CUDA graph's activities have no launching op in the trace (it was captured
    # earlier): the same copies and sets as in the eager run, earning the same advice there.
    Cause(
        r"^cudaGraphLaunch -> (?i:memset)",
        "a memory set replayed from a CUDA graph (the op that captured it is not in the "
        "trace); in the eager run such sets are cuBLAS/cuDNN workspace fills, small and "
        "expected: see the eager trace's `memcpy` for its op",
        actionable=False,
    ),
    Cause(
        r"^cudaGraphLaunch -> (?i:memcpy)",
        "a memory copy replayed from a CUDA graph (the op that captured it is not in the "
        "trace); run `memcpy` on the eager trace for the op that makes it and its advice",
    ),
    # The catch-alls name the traffic but know no cause, so they give no fix: they stay in the
    # table, not in the findings.
    Cause(r"Memset", "zero fill", actionable=False),
    Cause(r"Memcpy DtoD", "device-to-device copy", actionable=False),
)


@per_trace
@on_counted
def transfers(trace: Trace) -> pl.DataFrame:
    """Every memory copy and set, with ``chain`` (its CPU op chain, then its name) and
    ``in_iteration``. A replayed graph's activity takes the op captured at its position where
    the trace holds the capture, else its chain starts with the graph launch call."""
    gpu = with_captured_ops(
        trace, activities(trace).filter(pl.col("kind").is_in(["memcpy", "memset"]))
    )
    chains = op_chains(trace.cpu, gpu["op_id"])
    gpu = gpu.with_columns(chains.alias("ops"))
    # Without a launching op, a graph replay's activity names its launch call instead.
    replayed = pl.col("op_id").is_null() & pl.col("launch_api").is_in(GRAPH_LAUNCHES)
    head = pl.when(replayed).then(pl.concat_list(pl.col("launch_api"))).otherwise(pl.col("ops"))
    return gpu.with_columns(
        chain=pl.concat_list(head, pl.col("name")).list.join(" -> "),
        in_iteration=pl.col("iteration").is_not_null(),
    )


@per_trace
@on_counted
def memory_traffic(trace: Trace) -> pl.DataFrame:
    """Memcpy/memset grouped by cause chain: count, time and bytes per iteration (activities
    launched inside the iterations), bandwidth, advice; ``count`` and ``total_us`` cover the
    whole trace."""
    gpu = transfers(trace)
    n = iteration_count(trace)
    inside = pl.col("in_iteration")
    nbytes = pl.col("bytes")
    table = gpu.group_by("chain", "kind", "name").agg(
        count_per_iter=inside.sum() / n,
        us_per_iter=pl.col("dur_ns").filter(inside).sum() / 1e3 / n,
        bytes_per_call=known(nbytes, nbytes.mean()),
        bytes_per_iter=known(nbytes, nbytes.filter(inside).sum() / n),
        # Bytes moved over the time spent moving them (bytes per ns = GB/s).
        bandwidth_gbps=known(nbytes, nbytes.sum() / pl.col("dur_ns").sum()),
        launch_op=pl.col("op_name").first(),
        count=pl.len(),
        total_us=pl.col("dur_ns").sum() / 1e3,
    )
    return table.with_columns(
        advice=_first_cause(_advice), actionable=_first_cause(_actionable)
    ).sort(["us_per_iter", "total_us", "chain"], descending=[True, True, False])


def known(values: pl.Expr, figure: pl.Expr) -> pl.Expr:
    """``figure`` (an aggregation of ``values``) where every one of ``values`` is known, else
    null: a sum or mean over a group with an unknown size is not the group's (a copy a CUDA graph
    replays as a kernel records no bytes; its size is unknown, not 0 B at 0 GB/s)."""
    return pl.when(values.is_not_null().all()).then(figure)


def _applies(cause: Cause) -> pl.Expr:
    applies = pl.col("chain").str.contains(cause.pattern)
    if cause.names_op:
        applies = applies & _op(cause).is_in(sorted(IN_PLACE_TWINS))
    return applies


def _op(cause: Cause) -> pl.Expr:
    return pl.col("chain").str.extract(cause.pattern, group_index=1)


def _advice(cause: Cause) -> pl.Expr:
    if not cause.names_op:
        return pl.lit(cause.advice)
    pieces = cause.advice.split("{op}")
    return pl.format("{}".join(pieces), *([_op(cause)] * (len(pieces) - 1)))


def _actionable(cause: Cause) -> pl.Expr:
    return pl.lit(cause.actionable)


def _first_cause(value: Callable[[Cause], pl.Expr]) -> pl.Expr:
    """``value`` of the first cause (in table order) that applies to each chain."""
    expr: pl.Expr = pl.lit(None)
    for cause in reversed(CAUSES):
        expr = pl.when(_applies(cause)).then(value(cause)).otherwise(expr)
    return expr


def number_text(value: pl.Expr) -> pl.Expr:
    """A number as a person writes it: 1 rather than 1.0, 2.5 rather than 2.50."""
    return value.round(2).cast(pl.String).str.replace(r"\.0+$", "")


def size_expr(column: str) -> pl.Expr:
    """Text such as ", 256 MiB each" for a byte count (empty when unknown)."""
    nbytes = pl.col(column)
    expr: pl.Expr = pl.format(", {} B each", number_text(nbytes))
    for unit, scale in (("KiB", 2**10), ("MiB", 2**20), ("GiB", 2**30)):
        scaled = pl.format(", {} " + unit + " each", number_text(nbytes / scale))
        expr = pl.when(nbytes >= scale).then(scaled).otherwise(expr)
    return pl.when(nbytes > 0).then(expr).otherwise(pl.lit(""))
