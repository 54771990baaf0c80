"""Seconds each analysis costs beyond loading its Trace from the Parquet cache (issues 20, 21).

Run it once per code version to compare (e.g. main's checkout and a branch, in turns), with
``POLARS_MAX_THREADS=1`` for the steadiest CPU figure on a shared machine. Each figure is the
least of ``--runs`` of ``analysis(load(...))`` minus the least of ``--runs`` cached loads, so
the iteration choice (``counted``) and classification, made once per Trace, are included.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from traceanalyze import load
from traceanalyze.analyses.between.critical_path import critical_path
from traceanalyze.analyses.between.idle import idle_breakdown
from traceanalyze.analyses.between.launches import launch_by_category, launch_table
from traceanalyze.analyses.distributed.comms import comms
from traceanalyze.analyses.iterations import counted
from traceanalyze.analyses.memory.usage import memory
from traceanalyze.trace import Trace

DEFAULT_TRACE = (
    Path(os.environ.get("TRACEANALYZE_SHARED") or Path(__file__).resolve().parents[2] / "shared")
    / "bench"
    / "h200_train_175mb.json.gz"
)


def _launches(trace: Trace) -> Any:
    return launch_table(trace), launch_by_category(trace)


ANALYSES: dict[str, Callable[[Trace], Any]] = {
    "counted": counted,
    "critical-path": critical_path,
    "launches": _launches,
    "idle": idle_breakdown,
    "comms": comms,
    "memory": memory,
}


def least(action: Callable[[], Any], runs: int) -> tuple[float, float]:
    """Wall and CPU (all threads) seconds of the run with the least CPU time."""
    times = []
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        action()
        times.append((time.perf_counter() - wall, time.process_time() - cpu))
    return min(times, key=lambda t: t[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--analyses", default="counted,critical-path,launches,idle,comms")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cache-dir", type=Path, default=None)
    args = parser.parse_args()
    load(args.trace, cache_dir=args.cache_dir)  # fills the cache
    base = least(lambda: load(args.trace, cache_dir=args.cache_dir), args.runs)
    for name in args.analyses.split(","):
        both = least(
            lambda n=name: ANALYSES[n](load(args.trace, cache_dir=args.cache_dir)), args.runs
        )
        wall, cpu = both[0] - base[0], both[1] - base[1]
        print(f"{name}: beyond loading wall {wall:.3f} s, CPU {cpu:.3f} s")


if __name__ == "__main__":
    main()
