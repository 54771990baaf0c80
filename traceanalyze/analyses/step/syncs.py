"""Blocking calls: the synchronisations and blocking copies of a trace, each priced.

A call *blocks* when the calling thread cannot go on until GPU work has finished: a device,
stream or event synchronize, a synchronous copy or set, or an asynchronous copy call with a side
in pageable host memory that returned only once its copy ran (``cudaMemcpyAsync`` to or from
pageable memory: what ``.item()``, ``.cpu()`` and ``aten::nonzero`` do; a pageable
host-to-device copy's call returns a little before its last chunk lands:
``COPY_RETURN_TOLERANCE_NS``). A device-to-device or pinned copy never blocks the host, however
its times fall (``HOST_STAGED_KINDS``). A stream waiting on an event (``cudaStreamWaitEvent``)
does not block the host and is not one. Each blocking call is priced by the CPU time it blocked
and the GPU work that ran while it waited, and named by the operator that made it (the
outermost CPU operator around it that is not a step marker: ``aten::item``, ``aten::nonzero``,
``aten::to``) and, where the trace has Python stacks, by the user's line.
"""

from __future__ import annotations

import polars as pl

from traceanalyze.analyses.activities import per_trace
from traceanalyze.analyses.cputree import op_chains, outermost_in, outermost_mask
from traceanalyze.analyses.step.window import busy_in_windows
from traceanalyze.link import PROFILER_STEP, RUNTIME_CATS
from traceanalyze.trace import Trace

# The `syncs` table's columns (per step means over the counted steps).
SYNC_COLUMNS = (
    "op",
    "frame",
    "count_per_iter",
    "cpu_blocked_us_per_iter",
    "gpu_waited_us_per_iter",
)

# Calls that block the calling thread until GPU work is done (CUDA runtime and driver, HIP,
# Ascend CL). Streams waiting on events are not here: they do not block the host.
BLOCKING_CALLS = (
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
    "cudaMemcpy", "cudaMemcpy2D", "cudaMemcpy3D", "cudaMemcpyToSymbol", "cudaMemcpyFromSymbol",
    "cudaMemset", "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize",
    "cuMemcpyDtoH_v2", "cuMemcpyHtoD_v2", "cuMemcpy",
    "hipDeviceSynchronize", "hipStreamSynchronize", "hipEventSynchronize", "hipMemcpy",
    "hipMemset",
    # PyTorch's memcpy_and_sync on ROCm (`.item()`, `.cpu()`): a copy and a stream synchronize
    # in one call (cudaMemcpyAsync + cudaStreamSynchronize on CUDA). ROCm names the `.item()`
    # copy DtoD, so the copy rule below never takes it.
    "hipMemcpyWithStream",
    "AscendCL@aclrtSynchronizeDevice", "AscendCL@aclrtSynchronizeStream",
    "AscendCL@aclrtSynchronizeStreamWithTimeout", "AscendCL@aclrtSynchronizeEvent",
)  # fmt: skip
# An asynchronous copy call blocks only where one side of its copy is host memory the GPU cannot
# read directly: the driver stages it through a buffer of its own before the call returns. The
# copy's name says so: Kineto writes the memory kinds (`Memcpy HtoD (Pageable -> Device)`;
# ROCm: `(Host -> Device)`, which does not tell pageable from pinned), older traces only the
# direction (`Memcpy HtoD`). A pinned or device-to-device copy is queued and the call returns
# (tl_b200_eager: vLLM's 33 DtoD copies per step would otherwise be 988 µs of "syncs").
HOST_STAGED_KINDS = ("Pageable", "Host")
# Directions whose copy may be host-staged where the name carries no memory kinds.
HOST_DEVICE_DIRECTIONS = ("HtoD", "DtoH")
# Such a call that lasted at least WAIT_MIN_NS waited for the GPU (for the work queued before
# the copy, and the copy itself) where its copy ended by the call's return, or no later than
# COPY_RETURN_TOLERANCE_NS after it with the call covering at least COPY_COVERED_MIN_PCT of the
# copy: a blocking copy, whether the copy started at once or after the queue drained. A pageable
# copy returns once its last chunk is staged, a little before the DMA ends (param_resnet_kineto:
# a 77 MB H2D copy ends 34 µs after its 90 ms call returns). A call that returns while its copy
# is queued, or with most of it still to run, did not block.
WAIT_MIN_NS = 10_000
COPY_RETURN_TOLERANCE_NS = 100_000
COPY_COVERED_MIN_PCT = 50.0


def host_staged() -> pl.Expr:
    """Whether a copy (its ``name``) has a side in pageable host memory (the rule above)."""
    kinds = pl.col("name").str.extract(r"\(([^)]*)\)", 1)
    staged = kinds.str.contains(rf"\b(?:{'|'.join(HOST_STAGED_KINDS)})\b")
    legacy = pl.col("name").str.contains(rf"^Memcpy (?:{'|'.join(HOST_DEVICE_DIRECTIONS)})\b")
    return pl.when(kinds.is_null()).then(legacy).otherwise(staged).fill_null(value=False)


def _blocked_copy() -> pl.Expr:
    """Whether a copy's launch call blocked until its copy (nearly) ended (the rule above)."""
    call_end = pl.col("launch_ts_ns") + pl.col("launch_dur_ns")
    end = pl.col("ts_ns") + pl.col("dur_ns")
    covered = pl.min_horizontal(end, call_end) - pl.max_horizontal("ts_ns", "launch_ts_ns")
    nearly = (end <= call_end + COPY_RETURN_TOLERANCE_NS) & (
        covered * 100 >= pl.col("dur_ns") * COPY_COVERED_MIN_PCT
    )
    timed = (pl.col("launch_dur_ns") >= WAIT_MIN_NS) & ((end <= call_end) | nearly)
    return host_staged() & timed


def blocking_ids(trace: Trace) -> pl.Series:
    """The ``op_id`` of every blocking call (module docstring), in the cpu frame's order."""
    # The gpu frame's own kind (a replayed graph's copy kernels have no launch call of their
    # own to wait in), not the classified activities: this needs no classification.
    copies = trace.gpu.filter(pl.col("kind") == "memcpy")
    blocked = copies.filter(_blocked_copy()).select(pl.struct("rank", "correlation"))
    named = pl.col("name").is_in(BLOCKING_CALLS)
    by_name = named & (pl.col("cat").is_in(RUNTIME_CATS) | pl.col("name").str.starts_with("Ascend"))
    waited = pl.col("cat").is_in(RUNTIME_CATS) & pl.struct("rank", "correlation").is_in(
        blocked.to_series().implode()
    )
    return trace.cpu.filter(by_name | waited)["op_id"]


@per_trace  # the gaps' causes and the priced calls both read them
def blocking_calls(trace: Trace) -> pl.DataFrame:
    """Every blocking call: ``op_id``, ``rank``, ``tid``, ``iteration``, ``name``, ``ts_ns``,
    ``end_ns``."""
    ids = blocking_ids(trace)
    return (
        trace.cpu.filter(pl.col("op_id").is_in(ids.implode()))
        .select(
            "op_id",
            "rank",
            "tid",
            "iteration",
            "name",
            "ts_ns",
            end_ns=pl.col("ts_ns") + pl.col("dur_ns"),
        )
        .sort("ts_ns")
    )


def priced_calls(trace: Trace) -> pl.DataFrame:
    """Every blocking call inside a step: ``op_id``, ``rank``, ``tid``, ``iteration``, ``op``
    (the outermost CPU operator around it that is not a step marker, else the call's own
    name), ``instance`` (that
    operator's ``op_id``, else the call's: one ``.item()`` may block twice), ``ts_ns``, ``end_ns``,
    ``cpu_blocked_ns`` (its duration) and ``gpu_waited_ns`` (the time the rank's GPU was busy
    while it waited)."""
    calls = blocking_calls(trace).filter(pl.col("iteration").is_not_null())
    cpu, outermost_ops = _operators(trace)
    outermost = op_chains(cpu, calls["op_id"]).list.first()
    calls = calls.with_columns(op=pl.coalesce(outermost, pl.col("name")))
    calls = calls.join(
        _outer_instances(cpu.filter(outermost_ops), calls), on="op_id", how="left"
    ).with_columns(instance=pl.coalesce("instance", "op_id"))
    # The calls as windows of their own (numbered by op_id) to clip the GPU's busy time to.
    spans = calls.select("rank", iteration="op_id", lo_ns="ts_ns", hi_ns="end_ns")
    waited = busy_in_windows(trace.gpu.lazy(), _disjoint(spans), "gpu_waited_ns").collect()
    return calls.join(
        waited.rename({"iteration": "op_id"}).drop("rank"), on="op_id", how="left"
    ).select(
        "op_id",
        "rank",
        "tid",
        "iteration",
        "op",
        "instance",
        "ts_ns",
        "end_ns",
        cpu_blocked_ns=pl.col("end_ns") - pl.col("ts_ns"),
        gpu_waited_ns=pl.col("gpu_waited_ns").fill_null(0),
    )


def _operators(trace: Trace) -> tuple[pl.DataFrame, pl.Series]:
    """``trace``'s cpu frame with its step markers out of the operators, and the mask of its
    outermost operators: what a blocking call is named after. Old traces write
    ``ProfilerStep#N`` as an operator (kineto_tb_resnet50_legacy: its syncs were named
    ``ProfilerStep#5``..``#10``, not the ``aten::to`` that blocked); a marker becomes the
    annotation newer traces write, and so does any event the steps were taken from."""
    steps = trace.iterations
    # Two filters: the expressions of the second run on the few operators the first keeps.
    markers = (
        trace.cpu.filter(
            (pl.col("cat") == "cpu_op")
            & (
                pl.col("name").str.starts_with("ProfilerStep#")
                | pl.col("ts_ns").is_in(steps["ts_ns"].implode())
            )
        )
        .filter(
            pl.col("name").str.contains(PROFILER_STEP.pattern)
            | pl.col("name").is_in(steps["name"].implode())
        )
        .get_column("op_id")
    )
    if not markers.len():
        return trace.cpu, outermost_mask(trace)
    cpu = trace.cpu.with_columns(
        cat=pl.when(pl.col("op_id").is_in(markers.implode()))
        .then(pl.lit("user_annotation"))
        .otherwise("cat")
    )
    return cpu, outermost_in(cpu)


def _outer_instances(outer_ops: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
    """Per blocking call (``op_id``): ``instance``, the ``op_id`` of the outermost CPU operator
    (of ``outer_ops``) around it on its thread (none where it was called outside every
    operator)."""
    outer = outer_ops.select(
        "rank",
        "tid",
        "ts_ns",
        instance="op_id",
        outer_end_ns=pl.col("ts_ns") + pl.col("dur_ns"),
    ).sort("ts_ns")
    return (
        calls.select("op_id", "rank", "tid", "ts_ns")
        .sort("ts_ns")
        .join_asof(outer, on="ts_ns", by=["rank", "tid"], check_sortedness=False)
        .filter(pl.col("outer_end_ns") >= pl.col("ts_ns"))
        .select("op_id", "instance")
    )


def _disjoint(spans: pl.DataFrame) -> pl.DataFrame:
    """``spans`` cut so that those of one rank never overlap (two threads blocked at once: the
    later call's wait starts where the earlier one's ends), as window clipping needs."""
    reach = pl.col("hi_ns").cum_max().shift(1).over("rank")
    return (
        spans.sort("rank", "lo_ns")
        .with_columns(lo_ns=pl.max_horizontal("lo_ns", reach))
        .with_columns(hi_ns=pl.max_horizontal("hi_ns", "lo_ns"))
    )


def sync_table(calls: pl.DataFrame, frames: pl.DataFrame | None, steps: int) -> pl.DataFrame:
    """The `syncs` table: per operator (and user frame, where ``frames`` maps ``op_id`` to
    one), how many blocking calls a step makes and what they cost, most blocked first."""
    keyed = calls.with_columns(frame=pl.lit(None, pl.String))
    if frames is not None:
        keyed = calls.join(frames.select("op_id", "frame"), on="op_id", how="left")
    return (
        keyed.group_by("op", "frame")
        .agg(
            # per operator call, not per blocking call: one `.item()` can make two
            count_per_iter=pl.col("instance").n_unique() / steps,
            cpu_blocked_us_per_iter=pl.col("cpu_blocked_ns").sum() / 1e3 / steps,
            gpu_waited_us_per_iter=pl.col("gpu_waited_ns").sum() / 1e3 / steps,
        )
        .sort(["cpu_blocked_us_per_iter", "op"], descending=[True, False])
        .select(SYNC_COLUMNS)
    )
