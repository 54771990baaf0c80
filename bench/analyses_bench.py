"""Analyses benchmark: classification, occupancy, the linking-based analyses and the summary on
the 175 MB trace, timed beyond loading (the trace is loaded first, untimed).

    python bench/analyses_bench.py [TRACE] [--runs 5]

Each run starts from a freshly loaded Trace so nothing is memoised between runs. The steps run
in order on one Trace, so a step's time leaves out what earlier steps memoised; "roofline
alone" times the roofline on a fresh Trace, everything it needs included.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from traceanalyze import load
from traceanalyze.analyses.activities import activities
from traceanalyze.analyses.cudnn import cudnn_table
from traceanalyze.analyses.kernels import kernel_table
from traceanalyze.analyses.memcpy import memory_traffic
from traceanalyze.analyses.roofline.model import roofline
from traceanalyze.analyses.summary import summary
from traceanalyze.trace import Trace

# The same trace as load_bench.py's, in $TRACEANALYZE_SHARED/bench, else ../shared/bench.
DEFAULT_TRACE = (
    Path(os.environ.get("TRACEANALYZE_SHARED") or Path(__file__).resolve().parents[2] / "shared")
    / "bench"
    / "h200_train_175mb.json.gz"
)

STEPS: tuple[tuple[str, Callable[[Trace], Any]], ...] = (
    ("classify + occupancy", activities),
    ("kernel table", kernel_table),
    ("summary (incl. cuDNN CPU time)", summary),
    ("cudnn table", cudnn_table),
    ("memcpy causes", memory_traffic),
    ("roofline (after the steps above)", roofline),
)
ALONE = "roofline alone"


def one_run(path: Path) -> dict[str, float]:
    trace = load(path)  # from the Parquet cache after the first run; not timed
    times = {}
    start = time.perf_counter()
    for name, step in STEPS:
        t0 = time.perf_counter()
        step(trace)
        times[name] = time.perf_counter() - t0
    times["total"] = time.perf_counter() - start
    fresh = load(path)
    t0 = time.perf_counter()
    roofline(fresh)
    times[ALONE] = time.perf_counter() - t0
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    load(args.trace)  # warm the cache
    runs = [one_run(args.trace) for _ in range(args.runs)]
    print(f"trace: {args.trace}, {args.runs} runs, median seconds beyond loading")
    for name in [n for n, _ in STEPS] + ["total", ALONE]:
        print(f"  {name:<34} {statistics.median(r[name] for r in runs):.3f}")


if __name__ == "__main__":
    main()
