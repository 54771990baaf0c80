"""One trace file -> one linked :class:`Trace` (no cache, no folders)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from traceanalyze.link import link
from traceanalyze.load import frames
from traceanalyze.load.decode import decode_document, gc_paused
from traceanalyze.load.metadata import device_frame, rank_of, thread_names, trace_meta
from traceanalyze.load.read import read_bytes
from traceanalyze.trace import Trace

# Called with a stage name ("read", "decode", "frames", "link") after each stage finishes.
StageTimer = Callable[[str], None]


def parse_file(path: Path, default_rank: int = 0, timer: StageTimer | None = None) -> Trace:
    """Read, decode, build frames and link one trace file."""
    with gc_paused():  # the events are acyclic; collecting while building them is pure cost
        return _parse(path, default_rank, timer)


def _parse(path: Path, default_rank: int, timer: StageTimer | None) -> Trace:
    mark = timer or (lambda _stage: None)
    data = read_bytes(path)
    mark("read")
    document = decode_document(data, path)
    del data  # the raw bytes are the largest object alive; free them before building frames
    mark("decode")
    events = document.traceEvents or []
    rank = rank_of(document, default_rank)
    buckets = frames.bucket_by_category(events)
    counts = {cat or "(none)": len(bucket) for cat, bucket in buckets.items()}
    ids = frames.IdMapper()
    other = [
        event
        for cat, bucket in buckets.items()
        if cat not in frames.GPU_KINDS
        and cat not in frames.CPU_CATS
        and cat not in frames.SKIPPED_CATS
        for event in bucket
    ]
    flows = [e for e in other if e.ph in frames.FLOW_PHASES]
    instants = [e for e in other if e.ph in frames.INSTANT_PHASES]
    gpu = frames.gpu_frame(buckets, ids, rank, path)
    cpu = frames.cpu_frame(buckets, ids, rank, path)
    flow = frames.flow_frame(flows, ids, rank, path)
    instant = frames.instant_frame(instants, ids, rank, path)
    names = thread_names([e for e in buckets.get("", []) if e.ph == "M"], path)
    meta = trace_meta(document, path, rank, counts, names)
    devices = device_frame(document, rank)
    del document, events, buckets, other, flows, instants
    mark("frames")
    linked = link(cpu, gpu, rank)
    mark("link")
    return Trace(
        meta=(meta,),
        gpu=linked.gpu,
        cpu=linked.cpu,
        flows=flow,
        instants=instant,
        iterations=linked.iterations,
        devices=devices,
        iteration_source=linked.iteration_source,
    )
