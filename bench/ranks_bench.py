"""Many-ranks benchmark: `ranks` on a 64-rank folder with each engine, time and peak memory.

The folder is generated in a temporary directory from one real rank of an NCCL job
(``../shared/traces/public/hta_nccl_a100.json.gz``): 64 copies with their own rank ids and host
clocks, one of them 20% slower. It is never committed. Each measurement runs in a fresh process;
a sampler adds up the resident memory of that process and all its descendants (engine workers,
a local cluster's scheduler) every 50 ms, so "tree peak" is the most memory the run held at
once (shared pages counted once per process, so an upper bound).

    python bench/ranks_bench.py                        # local, dask and ray (where installed)
    python bench/ranks_bench.py --ranks 16 --engines local dask
    python bench/ranks_bench.py --keep /tmp/ranks64    # reuse (or keep) the generated folder
    python bench/ranks_bench.py --ranks 16 --workers 2 # worker processes even for a small folder
    python bench/ranks_bench.py --baseline /tmp/base   # the CLI, this checkout vs another

Rows: ``cold`` converts every rank into an empty Parquet cache and analyses it (what the first
`ranks` run on a folder does); ``cached`` reads that cache back; ``combined`` is the peer:
``traceanalyze.load(folder)`` combining every rank in one process (no cache), then the same
analysis. ``overhead`` maps a task that does nothing over the files: the engine's start-up
(until a first such task is back) and then its cost per task. ``ray`` is measured for the
record (the library offers local and dask only), through the same executor interface.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Executor
from fractions import Fraction
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from peak import own_peak_rss_mb  # bench/peak.py, beside this script
from precompile import compile_bytecode  # bench/precompile.py, beside this script

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.rankfolder builds the folder

# The shared folder of test data: $TRACEANALYZE_SHARED, else ../shared beside the repository.
SHARED = Path(os.environ.get("TRACEANALYZE_SHARED") or REPO.parent / "shared")
SOURCE = SHARED / "traces" / "public" / "hta_nccl_a100.json.gz"
DELAYED_RANK = 5


class TreeMemory:
    """The peak of the summed RSS of this process and its descendants, sampled."""

    def __init__(self, interval: float = 0.05) -> None:
        import psutil

        self._root = psutil.Process()
        self._interval = interval
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self._interval):
            self.sample()

    def sample(self) -> None:
        import psutil

        total = 0
        for process in [self._root, *self._root.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):  # a process that has just ended
                total += process.memory_info().rss
        self.peak_bytes = max(self.peak_bytes, total)

    def __enter__(self) -> TreeMemory:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def _nothing(path: str) -> int:
    return len(path)


@contextlib.contextmanager
def ray_pool(workers: int) -> Iterator[Executor]:
    """Ray behind the executor interface, for measuring it (the library does not offer it)."""
    import logging

    import ray

    class RayPool(Executor):
        def __init__(self) -> None:
            self.remote = ray.remote(_call)

        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            return self.remote.remote(fn, *args).future()

    ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False,
             logging_level=logging.ERROR)  # fmt: skip
    try:
        yield RayPool()
    finally:
        ray.shutdown()


def _call(task: Any, path: str) -> Any:
    return task(path)


def pool_for(
    engine: str, files: list[Path], workers: int | None
) -> contextlib.AbstractContextManager[Executor]:
    from traceanalyze.engine import executor

    if engine == "ray":
        return ray_pool(workers or os.cpu_count() or 1)
    return executor(engine, files, workers=workers)


def worker(
    kind: str, folder: str, engine: str, cache_dir: str, out: str, workers: str
) -> dict[str, Any]:
    """One measurement, in this (fresh) process (``workers`` "0": the engine's default)."""
    from traceanalyze.analyses.distributed.ranks import rank_work, ranks_analysis
    from traceanalyze.engine import RankTask, map_files
    from traceanalyze.load import check_ranks

    files = sorted(Path(folder).iterdir())
    extra: dict[str, float] = {}
    with TreeMemory() as memory:
        start = time.perf_counter()
        if kind == "combined":
            import traceanalyze

            result = ranks_analysis([rank_work(traceanalyze.load(folder, cache=False))])
        else:
            with pool_for(engine, files, int(workers) or None) as pool:
                if kind == "overhead":
                    # Start-up: until a first task's result is back (a pool starts lazily).
                    map_files(_nothing, files[:1], pool)
                    started = time.perf_counter()
                    map_files(_nothing, files, pool)
                    extra = {"startup_s": started - start}
                    extra["per_task_ms"] = (time.perf_counter() - started) / len(files) * 1e3
                else:  # what engine.rank_folder does, on this pool
                    works = map_files(RankTask(cache=True, cache_dir=cache_dir), files, pool)
                    check_ranks([m for w in works for m in w.meta], Path(folder))
                    result = ranks_analysis(works)
        seconds = time.perf_counter() - start
    if kind != "overhead":
        from traceanalyze.render.ranks import ranks_record

        Path(out).write_text(json.dumps(ranks_record(result), sort_keys=True))
    return {
        "seconds": seconds,
        "tree_peak_mb": memory.peak_bytes / 2**20,
        "driver_peak_mb": own_peak_rss_mb(),
        **extra,
    }


def run(
    kind: str, folder: Path, engine: str, cache_dir: Path, out: Path, workers: int
) -> dict[str, Any]:
    command = [sys.executable, __file__, "--worker", kind, str(folder), engine, str(cache_dir),
               str(out), str(workers)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"{kind} {engine} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def build(folder: Path, ranks: int) -> None:
    from tests.rankfolder import RankSpec, write_rank_folder

    # Hosts' clocks up to ~0.9 s apart; one rank 20% slower than the rest.
    specs = [
        RankSpec(
            r,
            shift_us=(r * 7919) % 900_000,
            stretch=Fraction(6, 5) if r == DELAYED_RANK else Fraction(1),
        )
        for r in range(ranks)
    ]
    write_rank_folder(folder, SOURCE, specs, suffix=".json.gz")


def cli_turns(folder: Path, baseline: Path, runs: int) -> None:
    """`traceanalyze ranks FOLDER` as a user runs it (a fresh process, an empty cache), with
    this checkout and with ``baseline`` (a checkout of main before issue 23, its scanner built
    in place), in turns: wall seconds and the peak memory of the run's process tree."""
    compile_bytecode(baseline)
    print(f"\n`traceanalyze ranks` on {folder.name}, cold cache, {runs} runs in turns")
    print("| checkout | seconds (each run) | median | tree peak MB |")
    print("| --- | --- | ---: | ---: |")
    timings: dict[str, list[float]] = {"this": [], "baseline": []}
    peaks: dict[str, float] = {"this": 0.0, "baseline": 0.0}
    outputs: dict[str, str] = {}
    for _ in range(runs):
        for name, checkout in (("baseline", baseline), ("this", REPO)):
            with tempfile.TemporaryDirectory() as scratch:
                env = {**os.environ, "PYTHONPATH": str(checkout), "PYTHONSAFEPATH": "1",
                       "TRACEANALYZE_CACHE_DIR": str(Path(scratch) / "cache")}  # fmt: skip
                out = Path(scratch) / "ranks.json"
                command = [sys.executable, "-m", "traceanalyze", "ranks", str(folder),
                           "--format", "json", "-o", str(out)]  # fmt: skip
                with TreeMemory() as memory:
                    start = time.perf_counter()
                    subprocess.run(command, check=True, capture_output=True, env=env, cwd=scratch)
                    timings[name].append(time.perf_counter() - start)
                peaks[name] = max(peaks[name], memory.peak_bytes / 2**20)
                record = json.loads(out.read_text())
                outputs[name] = json.dumps(_without_new_keys(record), sort_keys=True)
    for name in ("baseline", "this"):
        each = ", ".join(f"{t:.2f}" for t in timings[name])
        print(f"| {name} | {each} | {statistics.median(timings[name]):.2f} | {peaks[name]:.0f} |")
    ratio = statistics.median(timings["baseline"]) / statistics.median(timings["this"])
    same = outputs["this"] == outputs["baseline"]
    print(f"\nspeed-up over the baseline: {ratio:.2f}x; results equal (keys the baseline "
          f"lacks left out): {'yes' if same else 'NO'}")  # fmt: skip


def _without_new_keys(record: Any) -> Any:
    """A ranks record without the keys added after the baseline (collective bandwidth)."""
    if isinstance(record, dict):
        return {k: _without_new_keys(v) for k, v in record.items() if k not in _NEW_KEYS}
    if isinstance(record, list):
        return [_without_new_keys(v) for v in record]
    return record


_NEW_KEYS = {"collective_busbw_gbps_median"}


def result_bytes(folder: Path) -> int:
    """The size of one rank's pickled result: what a worker sends back."""
    import traceanalyze
    from traceanalyze.analyses.distributed.ranks import rank_work

    return len(pickle.dumps(rank_work(traceanalyze.load(next(folder.iterdir()), cache=False))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=64)
    installed = [e for e, module in (("dask", "distributed"), ("ray", "ray")) if find_spec(module)]
    parser.add_argument("--engines", nargs="+", default=["local", *installed])
    parser.add_argument("--keep", type=Path, default=None, help="Folder for the ranks (kept).")
    parser.add_argument(
        "--workers", type=int, default=0, help="Worker processes (default: the engine's own)."
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="also time `traceanalyze ranks` against this checkout (main before issue 23, "
        "its scanner built in place) in turns, as a user runs it",
    )
    parser.add_argument("--runs", type=int, default=3, help="runs of each, with --baseline")
    args = parser.parse_args()
    compile_bytecode(REPO)
    scratch = Path(tempfile.mkdtemp(prefix="ranks-bench-"))
    folder = args.keep or scratch / "ranks"
    try:
        if not folder.is_dir() or len(list(folder.iterdir())) != args.ranks:
            shutil.rmtree(folder, ignore_errors=True)
            started = time.perf_counter()
            build(folder, args.ranks)
            print(
                f"built {args.ranks} ranks in {time.perf_counter() - started:.1f} s",
                file=sys.stderr,
            )
        size = sum(p.stat().st_size for p in folder.iterdir())
        print(f"{args.ranks} ranks, {size / 1e6:.1f} MB gzipped; one rank's result pickles to "
              f"{result_bytes(folder) / 1e3:.1f} kB\n")  # fmt: skip
        if args.baseline:
            cli_turns(folder, args.baseline, args.runs)
            return
        print(
            "| engine | run | seconds | tree peak MB | driver peak MB | start-up s | per task ms |"
        )
        print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
        outputs: dict[str, str] = {}
        rows = [("local", "combined")] + [
            (e, k) for e in args.engines for k in ("overhead", "cold", "cached")
        ]
        for engine, kind in rows:
            out = scratch / f"{engine}-{kind}.json"
            cache = scratch / f"cache-{engine}"
            got = run(kind, folder, engine, cache, out, args.workers)
            if kind != "overhead":
                outputs[f"{engine} {kind}"] = out.read_text()
            startup = f"{got['startup_s']:.2f}" if "startup_s" in got else ""
            per_task = f"{got['per_task_ms']:.2f}" if "per_task_ms" in got else ""
            cells = [engine, kind, f"{got['seconds']:.2f}", f"{got['tree_peak_mb']:.0f}",
                     f"{got['driver_peak_mb']:.0f}", startup, per_task]  # fmt: skip
            print("| " + " | ".join(cells) + " |", flush=True)
        same = len(set(outputs.values())) == 1
        print(f"\nrank results identical across engines and runs: {'yes' if same else 'NO'}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        print(json.dumps(worker(*sys.argv[2:8])))
    else:
        main()
