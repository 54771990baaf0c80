"""The C scanner's field tables, in one place: what ``_scan.c`` reads and where it puts it.

``scripts/gen_scan_tables.py`` writes ``_scan_tables.h`` (the C enums, names and key lookups)
from these tables, and :mod:`traceanalyze.load.fast` takes its kind codes from them, so the C
side and the Python side cannot drift apart (``tests/test_scan_tables.py`` checks that the
header is the one these tables generate). Adding a field or a kind is one row here, then
``python scripts/gen_scan_tables.py`` and a rebuild.
"""

from __future__ import annotations

from dataclasses import dataclass

from traceanalyze.load.scanned import (
    CALL_CATS,
    COMM_INTS,
    FLOATS,
    GPU_KINDS,
    OP_CATS,
    PYTHON_CATS,
    SKIPPED_CATS,
    TEXT_ARGS,
)


@dataclass(frozen=True)
class Tagged:
    """A scalar column kept with a tag per row (null, int, float or text)."""

    c_name: str  # the C enum constant, C_<c_name>
    column: str  # the column name of the scanner's result (and of the frames)
    from_args: bool = True  # reset for every event's args (pid, tid and id are top-level keys)


# The top-level ones first: the args' columns are then one range, reset in one sweep per event.
TAGGED = (
    Tagged("PID", "pid", from_args=False),
    Tagged("TID", "tid", from_args=False),
    Tagged("ID", "id", from_args=False),
    Tagged("EXT", "external_id"),
    Tagged("EXT_LEGACY", "external_id_legacy"),
    Tagged("CORR", "correlation"),
    Tagged("DEV", "device"),
    Tagged("STREAM", "stream"),
    Tagged("GX", "grid_x"),
    Tagged("GY", "grid_y"),
    Tagged("GZ", "grid_z"),
    Tagged("BX", "block_x"),
    Tagged("BY", "block_y"),
    Tagged("BZ", "block_z"),
    Tagged("REGS", "registers_per_thread"),
    Tagged("SMEM", "shared_memory"),
    Tagged("BPSM", "blocks_per_sm"),
    Tagged("WPSM", "warps_per_sm"),
    Tagged("OCC", "est_achieved_occupancy_pct"),
    Tagged("BYTES", "bytes"),
    Tagged("BW", "bandwidth_gbps"),
    Tagged("COLL", "comm_name"),
    Tagged("IN_N", "comm_in_nelems"),
    Tagged("OUT_N", "comm_out_nelems"),
    Tagged("GROUP", "comm_group_size"),
    Tagged("DTYPE", "comm_dtype"),
    Tagged("SEQ", "sequence_number"),
    Tagged("LABEL", "label"),
    Tagged("DEVTYPE", "device_type"),
    Tagged("ADDR", "addr"),
    Tagged("TALLOC", "total_allocated_bytes"),
    Tagged("TRES", "total_reserved_bytes"),
    Tagged("PYID", "python_id"),
    Tagged("PYPARENT", "python_parent_id"),
    Tagged("KERNEL", "launch_kernel"),
)

# How the scanner's result() hands a tagged column to Polars (an Arrow column, X_<NAME> in C),
# the types both decoders give the column (scanned.py's sets):
#   int       Int64, null where null; left to Python when a float or a text is among them
#   float     Float64 from ints and floats, null where null; left to Python with a text among
#             them (text that spells a number reads as it, other text null)
#   text      String from texts, null where null or float; left to Python with an int among
#             them (its digits become the text)
#   int_only  Int64 from ints, null where anything else
#   python    always left to Python (a label: int, float or text, as written)
EXPORTS = ("int", "float", "text", "int_only", "python")


def export_type(column: str) -> str:
    """The EXPORTS type of a tagged column."""
    if column in FLOATS:
        return "float"
    if column in TEXT_ARGS:
        return "text"
    if column in COMM_INTS:
        return "int_only"
    if column == "label":
        return "python"
    return "int"


# Args kept as their raw JSON text (interned), on CPU ops: (C enum constant R_<name>, column).
RAW = (("DIMS", "input_dims"), ("TYPES", "input_types"), ("CONCRETE", "concrete_inputs"))


@dataclass(frozen=True)
class Kind:
    """A destination of the scanner: a part of the result, or a way of not keeping an event."""

    name: str  # K_<NAME> in C; the part kind of :mod:`traceanalyze.load.scanned` where kept
    columns: tuple[str, ...] = ()  # tagged columns stored (name, pid, tid and ts always)
    dur: bool = False  # stores dur
    phase: bool = False  # stores ph
    raw: bool = False  # stores the RAW columns
    args_as: str | None = None  # the kind whose arg keys its args are read with (None: skipped)
    kept: bool = True  # a part of the result (False: counted, or only looked at)


_GPU_COLUMNS = (
    "external_id", "external_id_legacy", "correlation", "device", "stream",
    "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
    "registers_per_thread", "shared_memory", "blocks_per_sm", "warps_per_sm",
    "est_achieved_occupancy_pct", "bytes", "bandwidth_gbps",
    "comm_name", "comm_in_nelems", "comm_out_nelems", "comm_group_size", "comm_dtype",
)  # fmt: skip
_COMM_COLUMNS = _GPU_COLUMNS[-5:]
_MEMORY_COLUMNS = (
    "device_type", "device", "addr", "bytes", "total_allocated_bytes", "total_reserved_bytes"
)  # fmt: skip

# In code order: a kind's code is its position (the categories' codes below use them).
KINDS = (
    # X events of other categories: only looked at (Ascend NPU tasks make the scanner decline;
    # without a category they are the pre-Kineto export's CPU ops)
    Kind("other", args_as="other", kept=False),
    Kind("gpu", _GPU_COLUMNS, dur=True, args_as="gpu"),
    Kind("op", _COMM_COLUMNS, dur=True, raw=True, args_as="op"),
    Kind(
        "call",
        ("external_id", "external_id_legacy", "correlation", "launch_kernel"),
        dur=True,
        args_as="call",
    ),
    Kind("skip", kept=False),
    Kind("flow", ("id",), phase=True),
    Kind("instant"),
    Kind("meta", ("label",), args_as="gpu"),
    Kind("memory", _MEMORY_COLUMNS, args_as="memory"),
    # with_stack's python_function events: kept like ops, with their frame ids
    Kind("python", ("python_id", "python_parent_id"), dur=True, args_as="python"),
)
KIND_CODES = {kind.name: code for code, kind in enumerate(KINDS)}
# Part slots per category in the scanner (more than every kind), and the flag a category's
# code carries when it spells the external id "external id" (old traces).
KIND_SLOTS = 16
LEGACY_FLAG = 16

# Category -> kind, as the caller tells the scanner; other categories are K_OTHER.
CATEGORY_KINDS = {
    **{cat: "gpu" for cat in GPU_KINDS},
    **{cat: "op" for cat in OP_CATS},
    **{cat: "call" for cat in CALL_CATS},
    **{cat: "skip" for cat in SKIPPED_CATS},
    **{cat: "python" for cat in PYTHON_CATS},
}


@dataclass(frozen=True)
class ArgKey:
    """A key of an event's ``args`` that the scanner reads, and how."""

    key: str  # as Kineto writes it
    target: str  # a TAGGED or RAW column; for "dim3" its x column; for "decline" the reason
    kinds: tuple[str, ...]  # the args_as kinds that read it
    reader: str = "scalar"  # scalar | dim3 ([x, y, z]) | raw (JSON text) | decline


_KINETO = ("gpu", "call")  # the typed args of GPU activities and runtime calls
_COMM = ("gpu", "op")  # a collective's args, on its record_param_comms op and its NCCL kernel
ARG_KEYS = (
    ArgKey("Collective name", "comm_name", _COMM),
    ArgKey("In msg nelems", "comm_in_nelems", _COMM),
    ArgKey("Out msg nelems", "comm_out_nelems", _COMM),
    ArgKey("Group size", "comm_group_size", _COMM),
    ArgKey("dtype", "comm_dtype", _COMM),
    ArgKey("Input Dims", "input_dims", ("op",), "raw"),
    ArgKey("Input type", "input_types", ("op",), "raw"),
    ArgKey("Concrete Inputs", "concrete_inputs", ("op",), "raw"),
    ArgKey("Device Type", "device_type", ("memory",)),
    ArgKey("Device Id", "device", ("memory",)),
    ArgKey("Addr", "addr", ("memory",)),
    ArgKey("Bytes", "bytes", ("memory",)),
    ArgKey("Total Allocated", "total_allocated_bytes", ("memory",)),
    ArgKey("Total Reserved", "total_reserved_bytes", ("memory",)),
    ArgKey("Python id", "python_id", ("python",)),
    ArgKey("Python parent id", "python_parent_id", ("python",)),
    ArgKey("kernel", "launch_kernel", ("call",)),
    ArgKey("Task Type", "NPU task", ("other",), "decline"),  # the msgspec path reads those
    ArgKey("grid", "grid_x", _KINETO, "dim3"),
    ArgKey("block", "block_x", _KINETO, "dim3"),
    ArgKey("name", "label", _KINETO),
    ArgKey("bytes", "bytes", _KINETO),
    ArgKey("device", "device", _KINETO),
    ArgKey("stream", "stream", _KINETO),
    ArgKey("External id", "external_id", _KINETO),
    ArgKey("external id", "external_id_legacy", _KINETO),
    ArgKey("correlation", "correlation", _KINETO),
    ArgKey("warps per SM", "warps_per_sm", _KINETO),
    ArgKey("blocks per SM", "blocks_per_sm", _KINETO),
    ArgKey("shared memory", "shared_memory", _KINETO),
    ArgKey("Sequence number", "sequence_number", _KINETO),
    ArgKey("registers per thread", "registers_per_thread", _KINETO),
    ArgKey("memory bandwidth (GB/s)", "bandwidth_gbps", _KINETO),
    ArgKey("est. achieved occupancy %", "est_achieved_occupancy_pct", _KINETO),
)
READERS = ("skip", "scalar", "dim3", "raw", "decline")


def category_codes(legacy: frozenset[str]) -> dict[str, int]:
    """Category -> the scanner's kind code (with LEGACY_FLAG for the ``legacy`` spellings)."""
    return {
        cat: KIND_CODES[kind] | (LEGACY_FLAG if cat in legacy else 0)
        for cat, kind in CATEGORY_KINDS.items()
    }
