"""The msgspec path's event structs: the reference reading of the Kineto JSON layout.

msgspec decodes straight into slotted structs that keep only the fields we use, skipping the
rest of each event without building Python objects for it. The structs are ``gc=False``: half a
million events would otherwise trigger repeated full garbage collections that cost more than
the decode itself. This path decodes a chunk of events at a time (:mod:`.chunks`); the C
scanner (:mod:`.fast`) reads the same layout faster and hands anything unusual back here.
"""

from __future__ import annotations

import re
import sys
from operator import attrgetter
from pathlib import Path
from typing import Any, Literal, Union

import msgspec

from traceanalyze.errors import NotATraceError, TraceFormatError

Scalar = Union[int, float, str, None]  # noqa: UP007 (msgspec needs a runtime union here)


class Dim3(msgspec.Struct, array_like=True, gc=False, frozen=True):
    """A launch dimension written as a JSON array ``[x, y, z]``."""

    x: int | None = None
    y: int | None = None
    z: int | None = None


_NO_DIM = Dim3()


class Args(msgspec.Struct, gc=False, frozen=True):
    """The event args we keep. Types are loose on purpose: ROCm writes ``"stream": "0x0"``."""

    external_id: Scalar = msgspec.field(default=None, name="External id")
    external_id_legacy: Scalar = msgspec.field(default=None, name="external id")
    correlation: Scalar = None
    device: Scalar = None
    stream: Scalar = None
    # Inductor's cpu_op events write the launch grid as text, e.g. "grid(100,)".
    grid: Union[Dim3, str] = _NO_DIM  # noqa: UP007
    block: Union[Dim3, str] = _NO_DIM  # noqa: UP007
    registers_per_thread: Scalar = msgspec.field(default=None, name="registers per thread")
    shared_memory: Scalar = msgspec.field(default=None, name="shared memory")
    blocks_per_sm: Scalar = msgspec.field(default=None, name="blocks per SM")
    warps_per_sm: Scalar = msgspec.field(default=None, name="warps per SM")
    est_achieved_occupancy_pct: Scalar = msgspec.field(
        default=None, name="est. achieved occupancy %"
    )
    bytes: Scalar = None
    bandwidth_gbps: Scalar = msgspec.field(default=None, name="memory bandwidth (GB/s)")
    sequence_number: Scalar = msgspec.field(default=None, name="Sequence number")
    name: Scalar = None  # process_name / thread_name metadata events
    comm_name: Scalar = msgspec.field(default=None, name="Collective name")
    comm_in_nelems: Scalar = msgspec.field(default=None, name="In msg nelems")
    comm_out_nelems: Scalar = msgspec.field(default=None, name="Out msg nelems")
    comm_group_size: Scalar = msgspec.field(default=None, name="Group size")
    comm_dtype: Scalar = msgspec.field(default=None, name="dtype")
    launch_kernel: Scalar = msgspec.field(default=None, name="kernel")  # ROCm launch calls


class OpArgs(msgspec.Struct, gc=False, frozen=True):
    """The args of a ``cpu_op`` that traceanalyze keeps: the shapes ``record_shapes`` writes,
    as raw JSON (most analyses never read them; the performance models parse them)."""

    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input Dims")
    input_types: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input type")
    concrete_inputs: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Concrete Inputs")
    # record_param_comms: the collective it records.
    comm_name: Scalar = msgspec.field(default=None, name="Collective name")
    comm_in_nelems: Scalar = msgspec.field(default=None, name="In msg nelems")
    comm_out_nelems: Scalar = msgspec.field(default=None, name="Out msg nelems")
    comm_group_size: Scalar = msgspec.field(default=None, name="Group size")
    comm_dtype: Scalar = msgspec.field(default=None, name="dtype")


class MemoryArgs(msgspec.Struct, gc=False, frozen=True):
    """The args of a profile_memory ``[memory]`` instant event."""

    device_type: Scalar = msgspec.field(default=None, name="Device Type")
    device: Scalar = msgspec.field(default=None, name="Device Id")
    addr: Scalar = msgspec.field(default=None, name="Addr")
    bytes: Scalar = msgspec.field(default=None, name="Bytes")
    total_allocated_bytes: Scalar = msgspec.field(default=None, name="Total Allocated")
    total_reserved_bytes: Scalar = msgspec.field(default=None, name="Total Reserved")


class PythonArgs(msgspec.Struct, gc=False, frozen=True):
    """The args of a ``python_function`` event (``with_stack=True``): the frame's id and its
    caller's."""

    python_id: Scalar = msgspec.field(default=None, name="Python id")
    python_parent_id: Scalar = msgspec.field(default=None, name="Python parent id")


class NpuArgs(msgspec.Struct, gc=False, frozen=True):
    """The args of an Ascend NPU task (torch_npu / msprof ``trace_view.json``): a device-side
    activity, told apart from host events by its ``Task Type``."""

    task_type: Union[str, None] = msgspec.field(default=None, name="Task Type")  # noqa: UP007
    stream: Scalar = msgspec.field(default=None, name="Stream Id")
    device: Scalar = msgspec.field(default=None, name="Device Id")
    correlation: Scalar = msgspec.field(default=None, name="connection_id")


_EMPTY_ARGS = msgspec.Raw(b"{}")
_ZERO = msgspec.Raw(b"0")
# The default of ts and dur, this very object: an event whose field ``is UNSET_TIME`` lacks it.
UNSET_TIME = _ZERO


# Every phase of the Chrome trace event format ("" when absent). Typed as this Literal, ph decodes
# to one shared string per phase rather than a new string per event, which makes decoding,
# bucketing by phase and freeing the events cheaper (about 0.1 s on the 175 MB benchmark). A
# trace with a phase outside the spec is decoded again as LenientEvent.
Phase = Literal[
    "", "B", "E", "X", "i", "I", "C", "b", "n", "e", "s", "t", "f", "P", "N", "O", "D", "M", "V",
    "v", "R", "c", "(", ")",
]  # fmt: skip


class Event(msgspec.Struct, gc=False):
    """One Chrome trace event, reduced to the fields traceanalyze reads.

    ``args`` stays raw JSON: most events (python_function, cpu_op, instants) never need it, and
    skipping it is cheaper than building an :class:`Args` per event. :func:`decode_args` turns
    the raw args of the events that do need them into :class:`Args`.
    """

    ph: Phase = ""
    cat: str = ""
    name: str = ""
    pid: Union[int, str] = 0  # noqa: UP007
    tid: Union[int, str] = 0  # noqa: UP007
    # Raw: the number as written (or a string holding one), converted digit for digit later.
    ts: msgspec.Raw = _ZERO
    dur: msgspec.Raw = _ZERO
    id: Scalar = None
    args: msgspec.Raw = _EMPTY_ARGS


class LenientEvent(Event, gc=False):
    """An :class:`Event` whose ``ph`` may be any string: the fallback for nonstandard phases."""

    ph: str = ""  # type: ignore[assignment]


class TraceDocument(msgspec.Struct, gc=False):
    """The top level of a Kineto trace file."""

    traceEvents: Union[list[Event], None] = None  # noqa: N815, UP007
    schemaVersion: Any = None  # noqa: N815
    traceName: Any = None  # noqa: N815
    baseTimeNanoseconds: Any = None  # noqa: N815
    deviceProperties: Union[list[dict[str, Any]], None] = None  # noqa: N815, UP007
    distributedInfo: Union[dict[str, Any], None] = None  # noqa: N815, UP007
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    cupti_version: Any = None
    hip_runtime_version: Any = None
    hip_driver_version: Any = None
    roctracer_version: Any = None
    displayTimeUnit: Any = None  # noqa: N815


class LenientDocument(TraceDocument, gc=False):
    """A :class:`TraceDocument` of :class:`LenientEvent`."""

    traceEvents: Union[list[LenientEvent], None] = None  # type: ignore[assignment]  # noqa: N815, UP007


VERSION_KEYS = (
    "cuda_runtime_version",
    "cuda_driver_version",
    "cupti_version",
    "hip_runtime_version",
    "hip_driver_version",
    "roctracer_version",
)


_DOCUMENT = msgspec.json.Decoder(TraceDocument)
_ARGS = msgspec.json.Decoder(Args)
_OP_ARGS = msgspec.json.Decoder(OpArgs)
_NPU_ARGS = msgspec.json.Decoder(NpuArgs)
_MEMORY_ARGS = msgspec.json.Decoder(MemoryArgs)
_PYTHON_ARGS = msgspec.json.Decoder(PythonArgs)
_EVENT_ARRAY = msgspec.json.Decoder(list[Event])
_LENIENT_DOCUMENT = msgspec.json.Decoder(LenientDocument)
_LENIENT_EVENT_ARRAY = msgspec.json.Decoder(list[LenientEvent])


FIX_NOT_A_TRACE = "Pass a trace written by torch.profiler (export_chrome_trace)."


def too_deep(path: Path) -> TraceFormatError:
    """The error for JSON nested deeper than the decoders go: msgspec's limit is the
    interpreter's recursion limit (about 1,000 levels; the C scanner hands anything past 500
    to msgspec), where a Kineto trace nests a handful."""
    return TraceFormatError(
        "nests arrays or objects deeper than any trace does (past the JSON decoder's limit of "
        f"about {sys.getrecursionlimit():,} levels)",
        path,
        FIX_NOT_A_TRACE,
    )


def decode_args(
    events: list[Event],
    path: Path,
    *,
    ops: bool = False,
    memory: bool = False,
    python: bool = False,
) -> list[Any]:
    """The typed args of ``events``, in order: :class:`Args`, or :class:`OpArgs` for cpu ops,
    :class:`MemoryArgs` for ``[memory]`` events, :class:`PythonArgs` for Python frames."""
    decoder = _OP_ARGS if ops else _MEMORY_ARGS if memory else _PYTHON_ARGS if python else _ARGS
    try:
        return list(map(decoder.decode, map(_raw_args, events)))
    except msgspec.ValidationError as exc:
        raise TraceFormatError(
            f"has an event whose args do not fit the Kineto format ({exc})",
            path,
            "Pass a trace written by torch.profiler (export_chrome_trace).",
        ) from None


_raw_args = attrgetter("args")
_OUTER_LEVEL = re.compile(r"at `\$(\.traceEvents)?(\[\d+\])?`$")
_NOT_NPU = NpuArgs()


def npu_args(events: list[Event]) -> list[NpuArgs]:
    """The NPU task args of ``events`` (empty ones for events whose args are not of that form:
    these are events of other tools, which are not read)."""
    try:
        return list(map(_NPU_ARGS.decode, map(_raw_args, events)))
    except msgspec.ValidationError:
        return [_npu_args_or_none(event.args) for event in events]


def _npu_args_or_none(raw: msgspec.Raw) -> NpuArgs:
    try:
        return _NPU_ARGS.decode(raw)
    except msgspec.ValidationError:
        return _NOT_NPU


def decode_events(data: bytes | memoryview, *, document: bool, bare: bool) -> TraceDocument:
    """Decode a whole document (``document``) or a JSON array of events with the fast
    :class:`Event`; when a phase is outside the spec, again with :class:`LenientEvent`.
    msgspec's own errors propagate (see :func:`format_error`)."""
    try:
        return _decode_with(data, document, bare, _DOCUMENT, _EVENT_ARRAY)
    except msgspec.ValidationError as exc:
        if not str(exc).endswith(".ph`"):
            raise
    return _decode_with(data, document, bare, _LENIENT_DOCUMENT, _LENIENT_EVENT_ARRAY)


def _decode_with(
    data: bytes | memoryview,
    document: bool,
    bare: bool,
    whole: msgspec.json.Decoder[Any],
    array: msgspec.json.Decoder[Any],
) -> TraceDocument:
    if not document or bare:  # the Chrome format also allows a bare event array
        return TraceDocument(traceEvents=array.decode(data))
    decoded: TraceDocument = whole.decode(data)
    return decoded


def format_error(
    exc: msgspec.MsgspecError, path: Path, reason: str | None = None, *, not_a_trace: bool = False
) -> TraceFormatError:
    """The one-line error for a msgspec failure on ``path`` (``reason`` replaces msgspec's
    text, e.g. with positions in the file rather than in the piece decoded)."""
    reason = str(exc) if reason is None else reason
    if isinstance(exc, msgspec.ValidationError):
        # The document, its event list or an event is of another shape: not a trace at all.
        # A field of an event of the wrong type is a damaged trace.
        outer = not_a_trace or _OUTER_LEVEL.search(reason)
        error = NotATraceError if outer else TraceFormatError
        return error(f"is JSON but not a Chrome trace ({reason})", path, FIX_NOT_A_TRACE)
    if "truncated" in reason:
        return TraceFormatError(
            "the JSON ends early: the file is truncated",
            path,
            "Re-export it; a profiler killed while writing leaves such files.",
        )
    return (NotATraceError if not_a_trace else TraceFormatError)(
        f"is not valid JSON ({reason})",
        path,
        "Pass a Chrome trace (.json or .json.gz) written by torch.profiler.",
    )
