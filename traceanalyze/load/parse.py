"""One trace file -> one linked :class:`Trace` (no cache, no folders)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from traceanalyze.errors import EmptyTraceError, NotATraceError, TraceFormatError
from traceanalyze.link import link
from traceanalyze.load import fast, frames, parallel
from traceanalyze.load.chunks import scan_document
from traceanalyze.load.decode import FIX_NOT_A_TRACE, too_deep
from traceanalyze.load.foreign import refuse_foreign
from traceanalyze.load.forks import before_polars
from traceanalyze.load.metadata import BadRankError, device_frame, rank_of, trace_meta
from traceanalyze.load.scanned import Scanned
from traceanalyze.load.source import ByteProgress, never_back, refuse_special
from traceanalyze.trace import Trace

# Called with a stage name ("decode", "frames", "link") after each stage.
StageTimer = Callable[[str], None]


def parse_file(
    path: Path,
    timer: StageTimer | None = None,
    progress: ByteProgress | None = None,
    *,
    native: bool = True,
    threads: int | None = None,
) -> Trace:
    """Read, decode, build frames and link one trace file. ``native=False`` skips the C
    scanner (the msgspec path gives the same Trace); ``threads`` scanner threads (default
    :func:`~traceanalyze.load.parallel.default_threads`)."""
    before_polars()
    refuse_special(path)  # before a look inside: opening a pipe waits for a writer
    refuse_foreign(path)  # another tool's file is named as such, not as broken JSON
    return _parse(path, timer or (lambda _stage: None), progress, native, threads)


def scan(
    path: Path,
    progress: ByteProgress | None = None,
    *,
    native: bool = True,
    threads: int | None = None,
) -> Scanned:
    """The column pieces of ``path``: from the C scanner when it takes the file, else msgspec."""
    progress = never_back(progress) if progress else None  # msgspec after the scanner declined
    refuse_special(path)
    if native and fast.AVAILABLE:
        try:
            return parallel.scan_file(path, progress, threads)
        except fast.Declined:
            pass
    try:
        return scan_document(path, progress)
    except RecursionError:  # msgspec's, deep in a value: one line, not a traceback
        raise too_deep(path) from None


def _parse(
    path: Path,
    mark: StageTimer,
    progress: ByteProgress | None,
    native: bool,
    threads: int | None,
) -> Trace:
    scanned = scan(path, progress, native=native, threads=threads)
    _check_events(scanned, path)
    mark("decode")
    header = scanned.header
    try:
        rank = rank_of(header)
    except BadRankError as exc:
        raise TraceFormatError(str(exc), path, FIX_NOT_A_TRACE) from None
    try:
        built = frames.build_frames(scanned, rank)
    except frames.BadTimestampError as exc:
        raise TraceFormatError(str(exc), path, FIX_NOT_A_TRACE) from None
    counts = scanned.counts
    gzip_cut = scanned.gzip_cut
    only_metadata = scanned.metadata_events() == scanned.events
    del scanned
    if not built.cpu.height and not built.gpu.height:
        if only_metadata:
            raise EmptyTraceError(
                "the trace has no events, only metadata (process and thread names)",
                path,
                "Profile at least one active step (check the profiler schedule).",
            )
        raise EmptyTraceError(
            "the trace has no CPU operators, runtime calls or GPU activity",
            path,
            "Profile at least one active step with CPU and CUDA activities.",
        )
    meta = trace_meta(
        header, path, rank, counts, built.thread_names, built.text_ids, gzip_cut=gzip_cut
    )
    devices = device_frame(header, rank, built.npu_devices)
    mark("frames")
    # Hand the CPU and GPU frames over to linking without keeping a reference here, so that
    # what linking replaces (the decoder's chunked columns) is freed, and its memory reused,
    # while it runs.
    unlinked = [built.cpu, built.gpu]
    built = replace(built, cpu=built.cpu.clear(), gpu=built.gpu.clear())
    linked = link(unlinked.pop(0), unlinked.pop(0), rank)
    mark("link")
    return Trace(
        meta=(meta,),
        gpu=linked.gpu,
        cpu=linked.cpu,
        flows=built.flows,
        instants=built.instants,
        iterations=linked.iterations,
        devices=devices,
        memory=built.memory,
        python=built.python,
        iteration_source=linked.iteration_source,
    )


def _check_events(scanned: Scanned, path: Path) -> None:
    if not scanned.has_events:
        raise NotATraceError(
            "is JSON but not a Chrome trace: it has no traceEvents list",
            path,
            FIX_NOT_A_TRACE,
        )
    if not scanned.events:
        raise EmptyTraceError(
            "the trace has no events (traceEvents is empty)",
            path,
            "Profile at least one active step (check the profiler schedule).",
        )
