"""Loader benchmark: traceanalyze vs a bare decode vs Holistic Trace Analysis, same machine.

Every measured load runs in a fresh subprocess (cold: nothing cached in memory, peak RSS is
that process's own), timed inside the process around the load alone (interpreter start and
imports excluded, for every contender alike). One extra row loads repeatedly in one process, as
a notebook or a report over many traces does.

    python bench/load_bench.py                       # the 175 MB trace in ../shared/bench
                                                     # (or $TRACEANALYZE_SHARED/bench)
    python bench/load_bench.py TRACE --runs 5 --hta-python /path/to/venv-with-hta/bin/python
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# The shared folder of test data: $TRACEANALYZE_SHARED, else ../shared beside the repository.
SHARED = Path(os.environ.get("TRACEANALYZE_SHARED") or REPO.parent / "shared")
DEFAULT_TRACE = SHARED / "bench" / "h200_train_175mb.json.gz"


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker_parse(path: str) -> dict[str, Any]:
    """Full load without the cache, stage by stage."""
    from traceanalyze.load.parse import parse_file

    stages: dict[str, float] = {}
    last = [time.perf_counter()]

    def mark(stage: str) -> None:
        now = time.perf_counter()
        stages[stage] = now - last[0]
        last[0] = now

    start = last[0]
    trace = parse_file(Path(path), timer=mark)
    total = time.perf_counter() - start
    return {
        "seconds": total,
        "stages": stages,
        "rss_mb": _peak_rss_mb(),
        "gpu_rows": trace.gpu.height,
        "cpu_rows": trace.cpu.height,
    }


def worker_warm(path: str, runs: str) -> dict[str, Any]:
    """Several full loads (no cache) in one process, as a notebook or a multi-trace report
    does: the allocator's memory is already mapped after the first."""
    from traceanalyze.load.parse import parse_file

    times = []
    for _ in range(int(runs)):
        start = time.perf_counter()
        parse_file(Path(path))
        times.append(time.perf_counter() - start)
    return {"seconds": statistics.median(times[1:] or times), "rss_mb": _peak_rss_mb()}


def worker_cached(path: str, cache_dir: str) -> dict[str, Any]:
    """Reload from a cache entry written by an earlier process."""
    from traceanalyze import load

    start = time.perf_counter()
    trace = load(path, cache_dir=cache_dir)
    return {
        "seconds": time.perf_counter() - start,
        "rss_mb": _peak_rss_mb(),
        "rows": trace.gpu.height,
    }


def worker_bare(path: str) -> dict[str, Any]:
    """The floor: read + msgspec decode of the same events, no frames, no linking."""
    from traceanalyze.load.decode import decode_document
    from traceanalyze.load.read import read_bytes

    start = time.perf_counter()
    document = decode_document(read_bytes(Path(path)), Path(path))
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "rss_mb": _peak_rss_mb(), "events": len(document.traceEvents or [])}


def worker_hta(trace_dir: str) -> dict[str, Any]:
    from hta.trace_analysis import TraceAnalysis

    start = time.perf_counter()
    TraceAnalysis(trace_dir=trace_dir)
    return {"seconds": time.perf_counter() - start, "rss_mb": _peak_rss_mb()}


WORKERS: dict[str, Callable[..., dict[str, Any]]] = {
    "parse": worker_parse,
    "warm": worker_warm,
    "cached": worker_cached,
    "bare": worker_bare,
    "hta": worker_hta,
}


def run_worker(python: str, name: str, *args: str) -> dict[str, Any]:
    command = [python, __file__, "--worker", name, *args]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{name} worker failed:\n{result.stderr[-3000:]}")
    measured: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return measured


Measured = tuple[float, float, list[dict[str, Any]]]  # median seconds, peak RSS, every run


def median_of(python: str, runs: int, name: str, *args: str) -> Measured:
    return _summary([run_worker(python, name, *args) for _ in range(runs)])


def interleaved(python: str, runs: int, names: tuple[str, str], *args: str) -> list[Measured]:
    """Runs of two workers taken in turns (A B A B ...), so that both see the same machine:
    on a shared host the speed drifts within minutes, and their ratio is the figure to trust."""
    results: list[list[dict[str, Any]]] = [[], []]
    for _ in range(runs):
        for index, name in enumerate(names):
            results[index].append(run_worker(python, name, *args))
    return [_summary(r) for r in results]


def _summary(results: list[dict[str, Any]]) -> Measured:
    return (
        statistics.median(r["seconds"] for r in results),
        max(r["rss_mb"] for r in results),
        results,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--hta-python", help="a Python with hta installed (skipped if absent)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.worker:
        print(json.dumps(WORKERS[args.worker](str(args.trace), *rest)))
        return

    python = sys.executable
    work = Path(tempfile.mkdtemp(prefix="traceanalyze-bench-"))
    try:
        raw = work / "raw" / args.trace.name.removesuffix(".gz")
        raw.parent.mkdir()
        opener = gzip.open if args.trace.suffix == ".gz" else open
        with opener(args.trace, "rb") as src, raw.open("wb") as dst:
            shutil.copyfileobj(src, dst)
        size_mb = raw.stat().st_size / 1e6
        rows: list[tuple[str, float, float, str]] = []

        (t_raw, rss_raw, results), (t_bare, rss_bare, _) = interleaved(
            python, args.runs, ("parse", "bare"), str(raw)
        )
        stages = {
            k: statistics.median(r["stages"][k] for r in results) for k in results[0]["stages"]
        }
        rows.append(
            (f"traceanalyze, raw JSON ({size_mb:.0f} MB)", t_raw, rss_raw, "full load + linking")
        )
        if args.trace.suffix == ".gz":
            t_gz, rss_gz, _ = median_of(python, args.runs, "parse", str(args.trace))
            rows.append(("traceanalyze, .json.gz directly", t_gz, rss_gz, "full load + linking"))
        warm = run_worker(python, "warm", str(raw), str(args.runs + 1))
        rows.append(
            (
                "traceanalyze, raw JSON, in one process",
                warm["seconds"],
                warm["rss_mb"],
                f"median of loads 2..{args.runs + 1}",
            )
        )
        rows.append(
            ("bare read + msgspec decode (floor)", t_bare, rss_bare, "no frames, no linking")
        )
        cache_dir = work / "cache"
        run_worker(python, "cached", str(raw), str(cache_dir))  # writes the entry
        t_cache, rss_cache, _ = median_of(python, args.runs, "cached", str(raw), str(cache_dir))
        rows.append(("traceanalyze, reload from Parquet cache", t_cache, rss_cache, ""))
        hta_ratio = ""
        if args.hta_python:
            t_hta, rss_hta, _ = median_of(args.hta_python, 1, "hta", str(raw.parent))
            rows.append(("HTA TraceAnalysis(trace_dir=...)", t_hta, rss_hta, "1 run"))
            hta_ratio = f"HTA / traceanalyze (raw JSON): {t_hta / t_raw:.1f}x"

        print(f"trace: {args.trace} ({size_mb:.0f} MB raw), {args.runs} runs each, median")
        print(f"{'contender':<44} {'seconds':>8} {'peak RSS MB':>12}  note")
        for name, seconds, rss, note in rows:
            print(f"{name:<44} {seconds:>8.3f} {rss:>12.0f}  {note}")
        print(
            "stages of the raw-JSON load (median s): "
            + ", ".join(f"{k} {v:.3f}" for k, v in stages.items())
        )
        print(f"full load / bare decode: {t_raw / t_bare:.2f}x")
        if hta_ratio:
            print(hta_ratio)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
