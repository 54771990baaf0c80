"""Loading traces: files, gzip, folders of per-rank traces, with a Parquet cache.

``load(path)`` returns one :class:`~traceanalyze.Trace`. For a folder it combines the per-rank
traces inside into one Trace whose frames carry a ``rank`` column (ranks parse in parallel
processes). ``load_each(paths)`` loads separate traces (for example one per attention variant)
and returns them in order.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from multiprocessing import get_context
from pathlib import Path

import polars as pl

from traceanalyze.errors import EmptyTraceError, TraceFormatError, TraceReadError
from traceanalyze.load.cache import default_cache_dir, entry_for, read_entry, write_entry
from traceanalyze.load.parse import StageTimer, parse_file
from traceanalyze.trace import Trace

TRACE_SUFFIXES = (".json", ".json.gz")
# Files in a trace folder that are known not to be traces (capture writes a manifest).
NOT_TRACES = frozenset({"manifest.json"})
# Below this many bytes in all, starting worker processes costs more than it saves.
_PARALLEL_MIN_BYTES = 32 * 1024 * 1024

Progress = Callable[[Path], None]


def load(
    path: str | os.PathLike[str],
    *,
    cache: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    timer: StageTimer | None = None,
) -> Trace:
    """Load a trace file (``.json``, ``.json.gz``) or a folder of per-rank trace files."""
    source = Path(path)
    if source.is_dir():
        files = trace_files(source)
        traces = load_each(files, cache=cache, cache_dir=cache_dir)
        return combine_ranks(traces, source)
    return _load_file(source, 0, cache, cache_dir, timer)


def load_each(
    paths: Sequence[str | os.PathLike[str]],
    *,
    cache: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
) -> list[Trace]:
    """Load several separate traces, in parallel processes when they are large."""
    files = [Path(p) for p in paths]
    for file in files:
        if file.is_dir():
            raise TraceReadError("is a folder", file, "Pass trace files, or load the folder.")
    total = sum(f.stat().st_size for f in files if f.is_file())
    workers = min(len(files), os.cpu_count() or 1)
    if workers < 2 or total < _PARALLEL_MIN_BYTES:
        traces = []
        for index, file in enumerate(files):
            traces.append(_load_file(file, index, cache, cache_dir, None))
            if progress:
                progress(file)
        return traces
    # spawn, not fork: forking a process whose Polars thread pool is running can deadlock.
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        futures = [
            pool.submit(_load_file, f, i, cache, cache_dir, None) for i, f in enumerate(files)
        ]
        traces = []
        for file, future in zip(files, futures, strict=True):
            traces.append(future.result())
            if progress:
                progress(file)
        return traces


def trace_files(folder: Path) -> list[Path]:
    """The trace files directly inside ``folder``, sorted by name."""
    try:
        entries = sorted(folder.iterdir())
    except OSError as exc:
        raise TraceReadError(
            f"cannot list the folder ({exc.strerror})",
            folder,
            "Make the folder readable for this user, or pass the trace files.",
        ) from None
    files = [p for p in entries if p.is_file() and is_trace_name(p) and p.name not in NOT_TRACES]
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
    """One Trace from per-rank traces; two files claiming one rank is an error."""
    traces = list(traces)
    if len(traces) == 1:
        return traces[0]
    seen: dict[int, Path] = {}
    for trace in traces:
        meta = trace.meta[0]
        if meta.rank in seen:
            raise TraceFormatError(
                f"{meta.path.name} and {seen[meta.rank].name} are both rank {meta.rank}, so "
                "these are separate runs rather than the ranks of one job",
                folder,
                "Load them one by one (traceanalyze.load_each, or pass the files).",
            )
        seen[meta.rank] = meta.path

    def stack(name: str) -> pl.DataFrame:
        frames: list[pl.DataFrame] = [getattr(t, name) for t in traces]
        return pl.concat(frames, how="vertical")

    return Trace(
        meta=tuple(t.meta[0] for t in traces),
        gpu=stack("gpu"),
        cpu=stack("cpu"),
        flows=stack("flows"),
        instants=stack("instants"),
        iterations=stack("iterations"),
        devices=stack("devices"),
        iteration_source=traces[0].iteration_source,
    )


def _load_file(
    path: Path,
    default_rank: int,
    cache: bool,
    cache_dir: str | os.PathLike[str] | None,
    timer: StageTimer | None,
) -> Trace:
    if not cache:
        return parse_file(path, default_rank, timer)
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    try:
        entry = entry_for(path, folder, default_rank)
    except OSError:
        return parse_file(path, default_rank, timer)  # read_bytes gives the precise error
    cached = read_entry(entry)
    if cached is not None:
        # Entries are keyed by the resolved path: name the file as this caller did.
        return replace(cached, meta=tuple(replace(m, path=path) for m in cached.meta))
    trace = parse_file(path, default_rank, timer)
    write_entry(entry, trace)
    return trace


__all__ = ["load", "load_each", "trace_files"]
