"""Time between kernels benchmark: `launches` and `idle` on the 175 MB trace, timed beyond
loading (each run loads a fresh Trace from the cache, untimed), beside Holistic Trace
Analysis' time for the same answers (``get_cuda_kernel_launch_stats``,
``get_idle_time_breakdown``) in the same run, after its own (reported, untimed) load.

    python bench/between_kernels_bench.py [TRACE] [--runs 5] [--no-hta]

Each analysis runs on its own freshly loaded Trace, so nothing it needs was memoised by the
other (classification included).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import logging
import os
import shutil
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from traceanalyze import load
from traceanalyze.analyses.between.idle import LAUNCH_OVERHEAD_MAX_US, idle_breakdown
from traceanalyze.analyses.between.launches import launch_by_category, launch_table
from traceanalyze.trace import Trace

DEFAULT_TRACE = (
    Path(os.environ.get("TRACEANALYZE_SHARED") or Path(__file__).resolve().parents[2] / "shared")
    / "bench"
    / "h200_train_175mb.json.gz"
)


def _launches(trace: Trace) -> Any:
    return launch_table(trace), launch_by_category(trace)


OURS: dict[str, Callable[[Trace], Any]] = {"launches": _launches, "idle": idle_breakdown}


def timed(func: Callable[[], Any]) -> float:
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


def ours(path: Path, runs: int) -> dict[str, tuple[float, float]]:
    """Per analysis the median wall time and the median CPU time (all threads) of a run: on a
    shared machine the CPU time moves less with other people's load."""
    load(path)  # fill the cache
    return {name: _medians(path, analysis, runs) for name, analysis in OURS.items()}


def _medians(path: Path, analysis: Callable[[Trace], Any], runs: int) -> tuple[float, float]:
    walls, cpus = [], []
    for _ in range(runs):
        trace = load(path)
        cpu = time.process_time()
        walls.append(timed(functools.partial(analysis, trace)))
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def hta(path: Path, runs: int) -> dict[str, float]:
    from hta.trace_analysis import TraceAnalysis

    logging.getLogger("hta").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory() as folder, contextlib.redirect_stdout(io.StringIO()):
        shutil.copy(path, Path(folder) / path.name)
        start = time.perf_counter()
        analysis = TraceAnalysis(trace_dir=folder)
        loaded = time.perf_counter() - start
        idle = statistics.median(
            timed(
                lambda: analysis.get_idle_time_breakdown(
                    visualize=False, consecutive_kernel_delay=LAUNCH_OVERHEAD_MAX_US
                )
            )
            for _ in range(runs)
        )
        stats = statistics.median(
            timed(lambda: analysis.get_cuda_kernel_launch_stats(visualize=False))
            for _ in range(runs)
        )
    return {"load (not counted)": loaded, "launches": stats, "idle": idle}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-hta", action="store_true")
    args = parser.parse_args()
    mine = ours(args.trace, args.runs)
    theirs = {} if args.no_hta else hta(args.trace, args.runs)
    print(f"| answer | traceanalyze s (median of {args.runs}) | its CPU s | HTA s |")
    print("| --- | ---: | ---: | ---: |")
    for name in ("launches", "idle"):
        other = f"{theirs[name]:.3f}" if name in theirs else "-"
        wall, cpu = mine[name]
        print(f"| {name} | {wall:.3f} | {cpu:.3f} | {other} |")
    if theirs:
        print(f"\nHTA's own load (not counted above): {theirs['load (not counted)']:.1f} s")


if __name__ == "__main__":
    main()
