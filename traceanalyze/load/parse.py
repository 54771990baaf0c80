"""One trace file -> one linked :class:`Trace` (no cache, no folders)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from traceanalyze.errors import EmptyTraceError, TraceFormatError
from traceanalyze.link import link
from traceanalyze.load import frames
from traceanalyze.load.decode import (
    FIX_NOT_A_TRACE,
    decode_document,
    gc_paused,
    needs_exact_timestamps,
    restore_exact_timestamps,
)
from traceanalyze.load.metadata import device_frame, rank_of, trace_meta
from traceanalyze.load.read import read_bytes
from traceanalyze.trace import Trace

# Called with a stage name ("read", "decode", "extract", "frames", "link") after each stage.
StageTimer = Callable[[str], None]


def parse_file(path: Path, default_rank: int = 0, timer: StageTimer | None = None) -> Trace:
    """Read, decode, build frames and link one trace file."""
    with gc_paused():  # the events are acyclic; collecting while building them is pure cost
        return _parse(path, default_rank, timer)


def _parse(path: Path, default_rank: int, timer: StageTimer | None) -> Trace:
    mark = timer or (lambda _stage: None)
    data = read_bytes(path)
    mark("read")
    header = decode_document(data, path)
    events = header.traceEvents or []
    header.traceEvents = None
    mark("decode")
    extracted = frames.extract(events, path)
    if needs_exact_timestamps(extracted.largest_timestamp_us()):
        restore_exact_timestamps(data, events)
        extracted = frames.extract(events, path)
    # The raw bytes and the events are the largest objects alive; free them before building.
    del data, events
    mark("extract")
    rank = rank_of(header, default_rank)
    try:
        built = frames.build_frames(extracted, rank)
    except frames.BadTimestampError as exc:
        raise TraceFormatError(str(exc), path, FIX_NOT_A_TRACE) from None
    if not built.cpu.height and not built.gpu.height:
        raise EmptyTraceError(
            "the trace has no CPU operators, runtime calls or GPU activity",
            path,
            "Profile at least one active step with CPU and CUDA activities.",
        )
    meta = trace_meta(header, path, rank, extracted.counts, built.thread_names)
    del extracted
    devices = device_frame(header, rank)
    mark("frames")
    linked = link(built.cpu, built.gpu, rank)
    mark("link")
    return Trace(
        meta=(meta,),
        gpu=linked.gpu,
        cpu=linked.cpu,
        flows=built.flows,
        instants=built.instants,
        iterations=linked.iterations,
        devices=devices,
        iteration_source=linked.iteration_source,
    )
