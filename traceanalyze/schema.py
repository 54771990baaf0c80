"""Column schemas of the frames a :class:`~traceanalyze.Trace` holds.

Every frame has exactly these columns in this order, whatever trace format it came from, so
analyses can rely on names and types. Times are integer nanoseconds on the trace's own clock
(``ts_ns`` is absolute, ``dur_ns`` a duration); Kineto writes microseconds with three decimals,
so nanoseconds keep every digit and make interval containment exact.

Ids that Kineto writes as strings (``"Spans"``, ``"stream 7"``) are parsed when numeric, else
mapped to negative ids in order of first appearance, so ``pid``/``tid`` stay integers.
"""

from __future__ import annotations

import inspect
import sys
import types
from collections.abc import Sequence

import polars as pl

from traceanalyze.errors import AnalysisError

# A collective's args as Kineto writes them on record_param_comms ops and NCCL kernels.
COMM_SCHEMA: dict[str, pl.DataType] = {
    "comm_name": pl.String(),  # "Collective name", e.g. allreduce, allgather, send
    "comm_in_nelems": pl.Int64(),  # "In msg nelems"
    "comm_out_nelems": pl.Int64(),  # "Out msg nelems"
    "comm_group_size": pl.Int64(),  # "Group size"
    "comm_dtype": pl.String(),  # "dtype", e.g. Float, BFloat16, Int
}

# One row per GPU activity: kernels, memory copies and memory sets.
# The ``*_linked`` block is filled by linking (see traceanalyze.link): the runtime or driver call
# with the same correlation id, the CPU ops around that call and the iteration it belongs to.
GPU_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "kind": pl.String(),  # "kernel" | "memcpy" | "memset"
    "name": pl.String(),
    "pid": pl.Int64(),
    "tid": pl.Int64(),
    "device": pl.Int32(),
    "stream": pl.Int64(),
    "ts_ns": pl.Int64(),
    "dur_ns": pl.Int64(),
    "correlation": pl.Int64(),
    "external_id": pl.Int64(),
    "grid_x": pl.Int64(),
    "grid_y": pl.Int64(),
    "grid_z": pl.Int64(),
    "block_x": pl.Int64(),
    "block_y": pl.Int64(),
    "block_z": pl.Int64(),
    "registers_per_thread": pl.Int64(),
    "shared_memory": pl.Int64(),  # bytes per block, static + dynamic, as the trace reports it
    "blocks_per_sm": pl.Float64(),  # grid blocks / SMs: a load figure, not occupancy
    "warps_per_sm": pl.Float64(),
    "est_achieved_occupancy_pct": pl.Float64(),
    "bytes": pl.Int64(),
    "bandwidth_gbps": pl.Float64(),
    # A collective's args (NCCL kernels of newer traces): "Collective name", "In msg nelems",
    # "Out msg nelems", "Group size", "dtype"; null elsewhere.
    **COMM_SCHEMA,
    # Linking results.
    "linked": pl.Boolean(),  # a runtime/driver call with this correlation exists
    "launch_api": pl.String(),  # e.g. cudaLaunchKernel, cuLaunchKernelEx, hipLaunchKernel
    "launch_ts_ns": pl.Int64(),
    "launch_dur_ns": pl.Int64(),
    "launch_tid": pl.Int64(),
    "op_id": pl.Int64(),  # innermost enclosing cpu_op (row id in the cpu frame)
    "op_name": pl.String(),
    "annotation": pl.String(),  # outermost user annotation other than ProfilerStep#N
    "iteration": pl.Int64(),
}

# One row per CPU-side interval: cpu_op (aten ops and other operators), user_annotation
# (record_function regions, ProfilerStep#N) and runtime/driver calls. Keeping the runtime calls
# in this frame lets one containment pass build the whole per-thread call tree.
CPU_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "op_id": pl.Int64(),  # the row position (0, 1, ...), unique across the ranks of a folder
    "cat": pl.String(),  # "cpu_op" | "user_annotation" | "cuda_runtime" | "cuda_driver"
    "name": pl.String(),
    "pid": pl.Int64(),
    "tid": pl.Int64(),
    "ts_ns": pl.Int64(),
    "dur_ns": pl.Int64(),
    # Runtime/driver calls only, like correlation: linking uses time containment, and reading
    # every cpu_op's args would cost a tenth of the load time.
    "external_id": pl.Int64(),
    "correlation": pl.Int64(),  # runtime/driver calls only
    # A launch call's kernel name where the trace writes it (ROCm); null elsewhere.
    "launch_kernel": pl.String(),
    # cpu_op rows of traces recorded with record_shapes: the args "Input Dims", "Input type" and
    # "Concrete Inputs" as raw JSON text (e.g. "[[8, 16, 1024, 64], []]"); null otherwise.
    "input_dims": pl.String(),
    "input_types": pl.String(),
    "concrete_inputs": pl.String(),
    # record_param_comms ops: the collective's args (as on the kernel); null elsewhere.
    **COMM_SCHEMA,
    # Linking results.
    "parent_id": pl.Int64(),  # op_id of the innermost interval containing this one, same thread
    "depth": pl.Int32(),  # 0 for a root on its thread
    "iteration": pl.Int64(),
}

# Flow events (ph s/f): ac2g (CPU launch -> GPU), fwdbwd (forward -> backward), async_gpu.
FLOW_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "cat": pl.String(),
    "id": pl.Int64(),
    "phase": pl.String(),  # "s" (start) | "f" (finish)
    "pid": pl.Int64(),
    "tid": pl.Int64(),
    "ts_ns": pl.Int64(),
}

# Instant events (ph i), e.g. [memory] allocations and the profiler's own markers.
INSTANT_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "cat": pl.String(),
    "name": pl.String(),
    "pid": pl.Int64(),
    "tid": pl.Int64(),
    "ts_ns": pl.Int64(),
}

# One row per ``[memory]`` instant event (recorded with ``profile_memory=True``): an allocation
# (``bytes`` > 0) or a free (``bytes`` < 0) on one device, in file order. ``device_type`` is
# PyTorch's c10::DeviceType code (0 CPU, 1 CUDA, 6 HIP, ...; see analyses/memory/devices.py),
# ``device`` its index (-1 for the CPU). The totals are the allocator's after the event.
MEMORY_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "pid": pl.Int64(),
    "tid": pl.Int64(),
    "ts_ns": pl.Int64(),
    "device_type": pl.Int32(),
    "device": pl.Int32(),
    "addr": pl.Int64(),
    "bytes": pl.Int64(),
    "total_allocated_bytes": pl.Int64(),
    "total_reserved_bytes": pl.Int64(),
}

# One row per Python frame call recorded with ``with_stack=True`` (``python_function`` events):
# ``name`` as Kineto writes it, ``"path/to/file.py(123): function"`` (paths relative to the
# entry of sys.path that holds them) or ``"<built-in ...>"`` / ``"nn.Module: Linear_0"``.
# ``python_id`` numbers the call; ``python_parent_id`` is its caller's (null for a root).
# Empty when the trace was recorded without with_stack.
PYTHON_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "name": pl.String(),
    "pid": pl.Int64(),
    "tid": pl.Int64(),
    "ts_ns": pl.Int64(),
    "dur_ns": pl.Int64(),
    "python_id": pl.Int64(),
    "python_parent_id": pl.Int64(),
}

# One row per iteration: ProfilerStep#N, else a repeated top-level annotation, else the trace.
ITERATION_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "iteration": pl.Int64(),
    "name": pl.String(),
    "ts_ns": pl.Int64(),
    "dur_ns": pl.Int64(),
}

# One row per GPU the trace describes (Kineto's deviceProperties); empty when the trace has none.
DEVICE_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "device": pl.Int32(),
    "name": pl.String(),
    "compute_major": pl.Int32(),
    "compute_minor": pl.Int32(),
    "num_sms": pl.Int32(),
    "warp_size": pl.Int32(),
    "max_threads_per_block": pl.Int32(),
    "max_threads_per_sm": pl.Int32(),
    "max_blocks_per_sm": pl.Int32(),  # absent from Kineto; null unless known
    "regs_per_block": pl.Int64(),
    "regs_per_sm": pl.Int64(),
    "shared_mem_per_block": pl.Int64(),
    "shared_mem_per_block_optin": pl.Int64(),
    "shared_mem_per_sm": pl.Int64(),
    "total_global_mem": pl.Int64(),
}


# Every frame of a Trace, by attribute name, with its schema.
TRACE_FRAMES: dict[str, dict[str, pl.DataType]] = {
    "gpu": GPU_SCHEMA,
    "cpu": CPU_SCHEMA,
    "flows": FLOW_SCHEMA,
    "instants": INSTANT_SCHEMA,
    "iterations": ITERATION_SCHEMA,
    "devices": DEVICE_SCHEMA,
    "memory": MEMORY_SCHEMA,
    "python": PYTHON_SCHEMA,
}


def require_columns(frame: pl.DataFrame, columns: Sequence[str], task: str, frames: str) -> None:
    """Fail loudly (AnalysisError) when ``frame`` lacks a column ``task`` needs.

    ``frames`` names what to pass instead, e.g. "trace.gpu, trace.cpu".
    """
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise AnalysisError(
            f"cannot {task}: the frame lacks column(s) {', '.join(missing)}",
            fix=f"pass the frames of a loaded Trace ({frames})",
        )


def null_series(name: str, height: int, dtype: pl.DataType | type[pl.DataType]) -> pl.Series:
    """A column of ``height`` nulls. One null repeated by Polars: ``pl.repeat(None, ...)``
    costs about 150 us however short (it runs a query), which made most of turning a scanned
    chunk into columns, whose collective and args columns are mostly all null."""
    one = _ONE_NULL.get(dtype)
    if one is None:
        one = _ONE_NULL.setdefault(dtype, pl.Series("", [None], dtype=dtype))
    return one.new_from_index(0, height).alias(name)


# One null of each dtype asked for (building even a one-row Series costs a few microseconds).
_ONE_NULL: dict[pl.DataType | type[pl.DataType], pl.Series] = {}


class _CallableModule(types.ModuleType):
    """``traceanalyze.schema`` is this module (the Trace frames' schemas) and, called, the
    `schema` command's function (:func:`traceanalyze.api.schema`: the declared columns of the
    commands' tables), as ``traceanalyze.load`` is both the loader and its module."""

    def __call__(self, command: str | None = None, *, table: str | None = None) -> pl.DataFrame:
        from traceanalyze.api import schema  # the facade sits above this module

        return schema(command, table=table)


sys.modules[__name__].__class__ = _CallableModule
# inspect.signature (help, IDEs) of the module: the function's.
__signature__ = inspect.signature(_CallableModule.__call__).replace(
    parameters=list(inspect.signature(_CallableModule.__call__).parameters.values())[1:]
)
