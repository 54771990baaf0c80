"""Loading traces: files, gzip, folders of per-rank traces, with a cache of loaded traces.

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
import inspect
import os
import sys
import types
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace
from multiprocessing import get_context
from pathlib import Path

import polars as pl

from traceanalyze.errors import TraceFormatError, TraceReadError
from traceanalyze.load.cache import (
    default_cache_dir,
    entry_for,
    max_cache_bytes,
    read_entry,
    write_entry,
)
from traceanalyze.load.folder import load_traces
from traceanalyze.load.forks import before_polars
from traceanalyze.load.inputs import (
    KNOWN_NOT_TRACES,
    MANIFEST,
    TRACE_SUFFIXES,
    Input,
    InputKind,
    is_trace_name,
    no_traces,
    resolve,
)
from traceanalyze.load.parallel import default_threads, worker_settings
from traceanalyze.load.parse import StageTimer, parse_file
from traceanalyze.load.source import ByteProgress
from traceanalyze.trace import Skipped, Trace, TraceMeta

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
    before_polars()
    found = resolve(path)
    if found.kind is InputKind.TRACE:
        return _load_file(found.path, cache, cache_dir, timer, progress, threads)
    refuse_variant_set(found)
    traces, skipped = load_traces(
        found, lambda files: load_each(files, cache=cache, cache_dir=cache_dir, threads=threads)
    )
    return replace(combine_ranks(traces, found.path), skipped=tuple(skipped))


def rank_files(path: str | os.PathLike[str]) -> tuple[list[Path], list[Skipped]]:
    """The trace files of ``path`` (a trace file, or a folder that may hold the ranks of one
    job), and the files skipped as not traces, each with why; a variant set is a
    :class:`SeparateTracesError`, found before any trace is parsed."""
    found = resolve(path)
    refuse_variant_set(found)
    return list(found.files), list(found.skipped)


def refuse_variant_set(found: Input) -> None:
    """A :class:`SeparateTracesError` when ``found`` is a variant set (a capture folder, or
    a folder whose traces state the same rank twice), not the ranks of one job."""
    if found.kind is not InputKind.VARIANT_SET:
        return
    if found.manifest is not None and not found.files:
        raise no_traces(found.path, list(found.skipped))
    if found.manifest is not None:
        problem = f"is a capture folder ({MANIFEST}): its traces are variants of one experiment"
    else:
        problem = f"holds {len(found.files)} separate traces ({_repeated_rank(found)})"
    raise SeparateTracesError(f"{problem}, not the ranks of one job", found.path, _FIX_SEPARATE)


def _repeated_rank(found: Input) -> str:
    """Which two files of ``found`` state the same rank in their heads."""
    seen: dict[int, Path] = {}
    for file, rank in zip(found.files, found.ranks, strict=True):
        if rank is not None and rank in seen:
            return f"{file.name} and {seen[rank].name} are both rank {rank}"
        if rank is not None:
            seen[rank] = file
    return "they do not state distinct ranks"


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
    before_polars()
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
    with ProcessPoolExecutor(
        workers, mp_context=get_context("spawn"), **worker_settings(threads)
    ) as pool:
        futures = {
            i: pool.submit(_load_file, files[i], cache, cache_dir, None, None, threads)
            for i in pending
        }
        for index, future in futures.items():
            parsed[index] = future.result()
            if progress:
                progress(files[index])


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
        python=stack("python"),
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
    before = _version(path)
    # raises the precise error
    trace = parse_file(path, timer=timer, progress=progress, threads=threads)
    after = _version(path)
    if cache and max_cache_bytes() and before and after and before[1] == after[1]:
        # Keyed by the file as it was before the parse opened it; stored only when the path
        # still names that file (same inode, size and modification time) after the parse: a
        # file replaced or rewritten meanwhile would leave the old trace under the new key.
        write_entry(entry_for(path, _cache_folder(cache_dir), before[0]), trace)
    return trace


def _version(path: Path) -> tuple[os.stat_result, tuple[int, int, int, int]] | None:
    """``path``'s stat and what tells one version of the file from another (None: no stat)."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat, (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


class _CallableModule(types.ModuleType):
    """``traceanalyze.load`` is this module (so ``import traceanalyze.load`` and
    ``traceanalyze.load.fast`` work) and, called, :func:`load`: ``traceanalyze.load(path)``
    stays the package's entry point without a function shadowing the module."""

    __call__ = staticmethod(load)


sys.modules[__name__].__class__ = _CallableModule
# inspect.signature (help, IDEs) of the module: load's, with its path.
__signature__ = inspect.signature(load)


__all__ = [
    "TRACE_SUFFIXES",
    "Input",
    "InputKind",
    "SeparateTracesError",
    "are_ranks",
    "check_ranks",
    "is_trace_name",
    "load",
    "load_each",
    "rank_files",
    "resolve",
]
