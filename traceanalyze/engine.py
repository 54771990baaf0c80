"""Where per-rank work runs: local processes (the default), or a Dask cluster.

An engine maps one picklable task over files and returns the results in file order; the
scheduling is the process pool's or Dask's (Ray was measured too and left out: bench/RESULTS.md,
"Many ranks", says why). The task (:class:`RankTask`) loads one rank
through the cache (converting it once) and returns the small frames of
:func:`~traceanalyze.analyses.distributed.ranks.rank_work`, so the caller never holds more than
the results.

On a cluster every worker needs the same traceanalyze version installed (tasks are pickled by
reference to this module), the trace files at the same absolute paths, and a cache folder it can
write (``cache_dir`` if given, else the worker's ``$TRACEANALYZE_CACHE_DIR`` or home cache).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any, TypeVar

from traceanalyze.analyses.distributed.ranks import (
    DEFAULT_STRAGGLER_PCT,
    RanksResult,
    RankWork,
    rank_work,
    ranks_analysis,
)
from traceanalyze.analyses.distributed.skew import ALIGN_ENDS
from traceanalyze.analyses.iterations import Selection, counted
from traceanalyze.errors import EngineError, TraceAnalyzeError, UsageError
from traceanalyze.load import check_ranks, load, rank_files
from traceanalyze.load.cache import default_cache_dir, evict, eviction_deferred, max_cache_bytes
from traceanalyze.load.parallel import worker_settings

ENGINE_LOCAL = "local"
ENGINE_DASK = "dask"
ENGINES = (ENGINE_LOCAL, ENGINE_DASK)
# Below this many bytes in all, starting worker processes costs more than it saves.
PARALLEL_MIN_BYTES = 32 * 1024 * 1024

R = TypeVar("R")


@dataclass(frozen=True)
class RankTask:
    """Load one trace (through the cache) and compute its rank work; runs on a worker."""

    cache: bool = True
    cache_dir: str | None = None
    # Leave most of the cache's eviction to the caller, who evicts once after every task: a
    # walk of the cache folder after each write visits N^2 entries (run_tasks on this
    # machine); a worker still walks after writing a tenth of the limit.
    defer_eviction: bool = False
    # The steps the user chose (--iterations, --skip); None: the counted ones.
    selection: Selection | None = None

    def __call__(self, path: str) -> RankWork | TraceAnalyzeError:
        deferring = eviction_deferred() if self.defer_eviction else contextlib.nullcontext()
        try:
            with deferring:
                loaded = load(path, cache=self.cache, cache_dir=self.cache_dir)
                return rank_work(counted(loaded, self.selection))
        except TraceAnalyzeError as error:
            # Returned, not raised: every engine then delivers it as a value, unchanged (no
            # engine's own error wrapping, no remote traceback).
            return error


def map_files(
    task: Callable[[str], R | TraceAnalyzeError], files: Sequence[Path], pool: Executor
) -> list[R]:
    """``task`` of each file's absolute path on ``pool``, results in file order; the first
    file's error (in file order) is raised."""
    futures = [pool.submit(task, str(file.resolve())) for file in files]
    results: list[R] = []
    for future in futures:
        outcome = future.result()
        if isinstance(outcome, TraceAnalyzeError):
            raise outcome
        results.append(outcome)
    return results


def rank_folder(
    path: str | os.PathLike[str],
    *,
    engine: str = ENGINE_LOCAL,
    address: str | None = None,
    workers: int | None = None,
    cache: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    straggler_pct: float = DEFAULT_STRAGGLER_PCT,
    align: str = ALIGN_ENDS,
    selection: Selection | None = None,
    clock_align: bool = False,
) -> RanksResult:
    """The `ranks` analysis of a folder of the ranks of one job (or of one trace file), each
    rank converted and analysed as a task of ``engine``; ``clock_align``: clocks aligned
    with the audit's offsets."""
    source = Path(path)
    files, skipped = rank_files(source)
    folder_cache = str(Path(cache_dir).resolve()) if cache_dir is not None else None
    # On this machine the cache is this process's too: the workers walk it seldom (see
    # RankTask), and this process once more after every rank is in it.
    here = engine == ENGINE_LOCAL and cache
    task = RankTask(cache, folder_cache, defer_eviction=here, selection=selection)
    works = run_tasks(task, files, engine, address, workers)
    if here:
        evict(Path(folder_cache) if folder_cache else default_cache_dir(), max_cache_bytes())
    check_ranks([meta for work in works for meta in work.meta], source)
    result = ranks_analysis(
        works, straggler_pct=straggler_pct, align=align, clock_align=clock_align
    )
    return replace(result, skipped=tuple(skipped))


def run_tasks(
    task: Callable[[str], R | TraceAnalyzeError],
    files: Sequence[Path],
    engine: str = ENGINE_LOCAL,
    address: str | None = None,
    workers: int | None = None,
) -> list[R]:
    """``task`` of every file on ``engine``."""
    if address is not None and engine == ENGINE_LOCAL:
        raise UsageError(
            "--address names a cluster, but the local engine runs on this machine",
            fix="Add --engine dask, or leave out --address.",
        )
    if address is not None and workers is not None:
        raise UsageError(
            "--workers sizes the pool or local cluster this run starts, but the cluster at "
            "--address has its own workers",
            fix="Leave out --workers (start more `dask worker`s instead), or --address.",
        )
    try:
        with executor(engine, files, address=address, workers=workers) as pool:
            return map_files(task, files, pool)
    except BrokenProcessPool:
        # A script without an `if __name__ == "__main__":` guard cannot spawn workers.
        return map_files(task, files, InProcess())


@contextlib.contextmanager
def executor(
    engine: str, files: Sequence[Path], *, address: str | None = None, workers: int | None = None
) -> Iterator[Executor]:
    """A ``concurrent.futures`` executor for ``engine``, shut down (with any cluster it
    started) on leaving."""
    if engine not in ENGINES:
        raise UsageError(f"unknown engine {engine!r}", fix=f"Use one of: {', '.join(ENGINES)}.")
    count = workers or max(1, min(len(files), os.cpu_count() or 1))
    if engine == ENGINE_DASK:
        with _dask(address, count) as pool:
            yield pool
    elif count < 2 or (workers is None and _size(files) < PARALLEL_MIN_BYTES):
        yield InProcess()
    else:
        # spawn, not fork: forking a process whose Polars thread pool is running can deadlock.
        threads = max(1, (os.cpu_count() or 1) // count)
        with ProcessPoolExecutor(
            count, mp_context=get_context("spawn"), **worker_settings(threads)
        ) as pool:
            yield pool


class InProcess(Executor):
    """Runs each task as it is submitted, in this process (small folders, one CPU)."""

    def submit(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> Future[R]:
        future: Future[R] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as error:  # delivered through the future, as a pool would
            future.set_exception(error)
        return future


def _size(files: Sequence[Path]) -> int:
    return sum(file.stat().st_size for file in files if file.is_file())


@contextlib.contextmanager
def _dask(address: str | None, workers: int) -> Iterator[Executor]:
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise EngineError(
            "--engine dask needs Dask's distributed scheduler, which is not installed",
            None,
            "Install the extra: pip install 'traceanalyze[dask]'.",
        ) from None
    cluster = _local_cluster(LocalCluster, workers) if address is None else None
    try:
        client = Client(cluster if cluster is not None else address)
    except (OSError, TimeoutError) as error:
        if cluster is not None:
            cluster.close()
        raise EngineError(
            f"cannot reach the Dask scheduler at {address} ({error})",
            None,
            "Start it (`dask scheduler`, then `dask worker ADDRESS` on each machine) or check "
            "the address, e.g. tcp://host:8786.",
        ) from None
    try:
        yield client.get_executor(pure=False)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _local_cluster(cluster_class: Any, workers: int) -> Any:
    """A Dask cluster of ``workers`` processes on this machine, for this run."""
    try:
        return cluster_class(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=logging.ERROR,
        )
    except (OSError, RuntimeError) as error:
        raise EngineError(
            f"cannot start a local Dask cluster ({error})",
            None,
            'Call it from a script with an `if __name__ == "__main__":` guard (its workers '
            "start the way multiprocessing's spawn does), or pass --address of a running one.",
        ) from None
