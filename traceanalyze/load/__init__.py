"""Loading traces: files, gzip, folders of per-rank traces, with a Parquet cache.

``load(path)`` returns one :class:`~traceanalyze.Trace`. For a folder of the ranks of one job
(every trace states a different rank in its ``distributedInfo``) it combines them into one
Trace whose frames carry a ``rank`` column (ranks parse in parallel processes). Any other
folder holds separate traces: a capture folder (``manifest.json``), or traces that share a rank
or state none. Those are variants, and ``load`` refuses them with :class:`SeparateTracesError`
rather than adding up unrelated runs; :func:`traceanalyze.load_variants` loads them as a set,
and ``load_each(paths)`` loads separate traces in order.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace
from multiprocessing import get_context
from pathlib import Path

import polars as pl

from traceanalyze.errors import EmptyTraceError, TraceFormatError, TraceReadError
from traceanalyze.load.cache import (
    default_cache_dir,
    entry_for,
    max_cache_bytes,
    read_entry,
    write_entry,
)
from traceanalyze.load.folder import KNOWN_NOT_TRACES, listing, load_traces, sort_files
from traceanalyze.load.parallel import default_threads
from traceanalyze.load.parse import StageTimer, parse_file
from traceanalyze.load.source import ByteProgress
from traceanalyze.trace import Skipped, Trace, TraceMeta

TRACE_SUFFIXES = (".json", ".json.gz")
CAPTURE_MANIFEST = "manifest.json"
# Files in a trace folder that are known not to be traces (capture writes a manifest).
NOT_TRACES = KNOWN_NOT_TRACES
# Below this many bytes in all, starting worker processes costs more than it saves.
_PARALLEL_MIN_BYTES = 32 * 1024 * 1024

Progress = Callable[[Path], None]


class SeparateTracesError(TraceFormatError):
    """A folder of separate traces (variants), not the ranks of one job."""


_FIX_SEPARATE = (
    "Compare them as variants with `traceanalyze compare FOLDER` or `traceanalyze report "
    "FOLDER` (in Python: load_variants), or give one trace file."
)


def load(
    path: str | os.PathLike[str],
    *,
    cache: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    timer: StageTimer | None = None,
    progress: ByteProgress | None = None,
    threads: int | None = None,
) -> Trace:
    """Load a trace file (``.json``, ``.json.gz``) or a folder of the ranks of one job.

    ``progress(done, total)`` is called with the bytes of a single file read so far. Files of
    a folder that are not traces are skipped, each named with why in ``Trace.skipped``.
    ``threads``: how many threads scan a file (default ``$TRACEANALYZE_THREADS``, else the
    cores this process may use)."""
    source = Path(path)
    if source.is_dir():
        traces, skipped = load_traces(
            source,
            lambda files: load_each(files, cache=cache, cache_dir=cache_dir, threads=threads),
        )
        refuse_capture_folder(source)
        return replace(combine_ranks(traces, source), skipped=tuple(skipped))
    return _load_file(source, cache, cache_dir, timer, progress, threads)


def rank_files(folder: Path) -> tuple[list[Path], list[Skipped]]:
    """The trace files of a folder that may hold the ranks of one job, and the files skipped
    as not traces, each with why (a capture folder is a :class:`SeparateTracesError`)."""
    files, skipped = sort_files(folder)
    refuse_capture_folder(folder)
    return files, skipped


def refuse_capture_folder(folder: Path) -> None:
    """A capture folder (manifest.json) holds variants: a :class:`SeparateTracesError`."""
    if (folder / CAPTURE_MANIFEST).is_file():
        raise SeparateTracesError(
            "is a capture folder (manifest.json): its traces are variants of one "
            "experiment, not the ranks of one job",
            folder,
            _FIX_SEPARATE,
        )


def are_ranks(traces: Sequence[Trace]) -> bool:
    """Whether ``traces`` are the ranks of one job: each states a rank, all different."""
    return _why_not_ranks([t.meta[0] for t in traces]) is None


def check_ranks(metas: Sequence[TraceMeta], folder: Path) -> None:
    """A :class:`SeparateTracesError` unless ``metas`` (one per file of ``folder``) are the
    ranks of one job; one file is always one rank."""
    problem = _why_not_ranks(metas) if len(metas) > 1 else None
    if problem is not None:
        raise SeparateTracesError(
            f"holds {len(metas)} separate traces ({problem}), not the ranks of one job",
            folder,
            _FIX_SEPARATE,
        )


def load_each(
    paths: Sequence[str | os.PathLike[str]],
    *,
    cache: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
    threads: int | None = None,
) -> list[Trace]:
    """Load several separate traces, in parallel processes when they are large (``threads``
    in all, shared among the processes)."""
    files = [Path(p) for p in paths]
    for file in files:
        if file.is_dir():
            raise TraceReadError("is a folder", file, "Pass trace files, or load the folder.")
    traces: dict[int, Trace] = {}
    for index, file in enumerate(files):
        cached = _cached(file, cache, cache_dir)
        if cached is not None:
            traces[index] = cached
            if progress:
                progress(file)
    pending = [i for i in range(len(files)) if i not in traces]
    traces |= _parse_all(files, pending, cache, cache_dir, progress, threads)
    return [traces[i] for i in range(len(files))]


def _parse_all(
    files: list[Path],
    pending: list[int],
    cache: bool,
    cache_dir: str | os.PathLike[str] | None,
    progress: Progress | None,
    threads: int | None,
) -> dict[int, Trace]:
    """Parse ``files[i]`` for each pending i: in worker processes when they are large."""
    parsed: dict[int, Trace] = {}
    total = sum(files[i].stat().st_size for i in pending if files[i].is_file())
    workers = min(len(pending), os.cpu_count() or 1)
    if workers >= 2 and total >= _PARALLEL_MIN_BYTES:
        # Each process scans with its share of the threads: processes x threads = cores.
        each = max(1, (threads or default_threads()) // workers)
        # A script without an `if __name__ == "__main__":` guard cannot spawn workers (the pool
        # breaks); whatever they did not parse is parsed here below.
        with contextlib.suppress(BrokenProcessPool):
            _parse_in_workers(files, pending, workers, cache, cache_dir, progress, parsed, each)
    for index in pending:
        if index not in parsed:
            parsed[index] = _load_file(files[index], cache, cache_dir, None, None, threads)
            if progress:
                progress(files[index])
    return parsed


def _parse_in_workers(
    files: list[Path],
    pending: list[int],
    workers: int,
    cache: bool,
    cache_dir: str | os.PathLike[str] | None,
    progress: Progress | None,
    parsed: dict[int, Trace],
    threads: int,
) -> None:
    # spawn, not fork: forking a process whose Polars thread pool is running can deadlock.
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        futures = {
            i: pool.submit(_load_file, files[i], cache, cache_dir, None, None, threads)
            for i in pending
        }
        for index, future in futures.items():
            parsed[index] = future.result()
            if progress:
                progress(files[index])


def trace_files(folder: Path) -> list[Path]:
    """The trace files directly inside ``folder``, sorted by name."""
    files = [
        p for p in listing(folder) if p.is_file() and is_trace_name(p) and p.name not in NOT_TRACES
    ]
    if not files:
        raise EmptyTraceError(
            "the folder holds no trace files (*.json, *.json.gz)",
            folder,
            "Point at the folder torch.profiler wrote, or at a trace file.",
        )
    return files


def is_trace_name(path: Path) -> bool:
    return path.name.endswith(TRACE_SUFFIXES)


def combine_ranks(traces: Iterable[Trace], folder: Path) -> Trace:
    """One Trace from the ranks of one job (see :func:`are_ranks`); separate traces are a
    :class:`SeparateTracesError`."""
    traces = list(traces)
    if len(traces) == 1:
        return traces[0]
    check_ranks([t.meta[0] for t in traces], folder)

    # op_id is the row position in the cpu frame: each rank's ids move past the ranks before.
    offsets = [0]
    for trace in traces[:-1]:
        offsets.append(offsets[-1] + trace.cpu.height)

    def stack(name: str, ids: tuple[str, ...] = ()) -> pl.DataFrame:
        frames: list[pl.DataFrame] = [getattr(t, name) for t in traces]
        if ids:
            frames = [f.with_columns(pl.col(ids) + n) for f, n in zip(frames, offsets, strict=True)]
        return pl.concat(frames, how="vertical")

    return Trace(
        meta=tuple(t.meta[0] for t in traces),
        gpu=stack("gpu", ("op_id",)),
        cpu=stack("cpu", ("op_id", "parent_id")),
        flows=stack("flows"),
        instants=stack("instants"),
        iterations=stack("iterations"),
        devices=stack("devices"),
        memory=stack("memory"),
        iteration_source=traces[0].iteration_source,
    )


def _why_not_ranks(metas: Sequence[TraceMeta]) -> str | None:
    """The first file that states no rank or repeats one (None: they are ranks)."""
    seen: dict[int, Path] = {}
    for meta in metas:
        if not isinstance(meta.distributed_info.get("rank"), int):
            return f"{meta.path.name} states no rank"
        if meta.rank in seen:
            return f"{meta.path.name} and {seen[meta.rank].name} are both rank {meta.rank}"
        seen[meta.rank] = meta.path
    return None


def _cache_folder(cache_dir: str | os.PathLike[str] | None) -> Path:
    return Path(cache_dir) if cache_dir is not None else default_cache_dir()


def _cached(path: Path, cache: bool, cache_dir: str | os.PathLike[str] | None) -> Trace | None:
    """The cached trace of ``path``, or None (no cache, no entry, or the file is unreadable)."""
    if not cache or not max_cache_bytes():  # a limit of 0 bytes is no cache
        return None
    try:
        cached = read_entry(entry_for(path, _cache_folder(cache_dir)))
    except OSError:
        return None
    if cached is None:
        return None
    # Entries are keyed by the resolved path: name the file as this caller did.
    return replace(cached, meta=tuple(replace(m, path=path) for m in cached.meta))


def _load_file(
    path: Path,
    cache: bool,
    cache_dir: str | os.PathLike[str] | None,
    timer: StageTimer | None,
    progress: ByteProgress | None = None,
    threads: int | None = None,
) -> Trace:
    cached = _cached(path, cache, cache_dir)
    if cached is not None:
        return cached
    # raises the precise error
    trace = parse_file(path, timer=timer, progress=progress, threads=threads)
    if cache and max_cache_bytes():
        write_entry(entry_for(path, _cache_folder(cache_dir)), trace)
    return trace


__all__ = [
    "SeparateTracesError",
    "are_ranks",
    "check_ranks",
    "load",
    "load_each",
    "rank_files",
    "trace_files",
]
