"""`critical-path` stage by stage on the 175 MB trace: CPU seconds of each stage (least of
``--runs``), each run on a Trace freshly loaded from the Parquet cache (untimed).

    POLARS_MAX_THREADS=1 python bench/critical_path_stages.py [TRACE] [--runs 5]

The stages are those of :func:`critical_path`, in its order: ``counted`` (the iteration
choice) and ``activities`` (classification), which every analysis pays once per Trace, then
the graph's GPU nodes and CPU segments, the iteration windows, the sync calls, the edges
between threads, the walk, the path's segments, time by kind and by thread, items and slack,
the segments' frame with names as text, notes. Their sum is about what ``beyond_cache_bench.py``
reports for ``critical-path``.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from traceanalyze import load
from traceanalyze.analyses.activities import activities, iteration_count
from traceanalyze.analyses.between import critical_graph as graph
from traceanalyze.analyses.between import critical_path as path
from traceanalyze.analyses.between.critical_segments import path_rows
from traceanalyze.analyses.between.critical_slack import items
from traceanalyze.analyses.between.critical_threads import thread_edges
from traceanalyze.analyses.between.critical_walk import walk
from traceanalyze.analyses.iterations import counted

DEFAULT_TRACE = (
    Path(os.environ.get("TRACEANALYZE_SHARED") or Path(__file__).resolve().parents[2] / "shared")
    / "bench"
    / "h200_train_175mb.json.gz"
)


def stages(trace_path: Path, times: dict[str, list[float]]) -> None:
    """One run of every stage on a fresh Trace, each stage's CPU seconds added to ``times``."""

    def timed(name: str, action: Callable[[], Any]) -> Any:
        start = time.process_time()
        result = action()
        times.setdefault(name, []).append(time.process_time() - start)
        return result

    loaded = load(trace_path)
    trace = timed("counted", lambda: counted(loaded))
    timed("activities", lambda: activities(trace))
    gpu = timed("gpu nodes", lambda: graph.gpu_nodes(trace))
    segs = timed("cpu segments", lambda: graph.cpu_segments(trace))
    bounds = timed("iteration windows", lambda: graph.iteration_bounds(trace, gpu))
    syncs = timed("sync calls", lambda: graph.sync_calls(trace))
    names = timed("name codes", lambda: graph.name_codes(trace.cpu["name"]))
    crossings = timed("thread edges", lambda: thread_edges(trace, segs, names))
    runs = timed("walk", lambda: walk(segs, gpu, bounds, trace.cpu, syncs, crossings.edges))
    rows = timed("path segments", lambda: path_rows(runs, segs, gpu, trace, syncs, names))
    n = iteration_count(trace)
    timed("by kind", lambda: path._by_kind(rows, n))
    timed("items and slack", lambda: items(rows, path._terminal(runs), n, path.TOP_ITEMS))
    per_run = rows.runs.with_columns(rows.per_run_ns())
    timed("by thread", lambda: path._by_thread(per_run, crossings, n))
    timed("segments as text", rows.strings)
    timed("notes", lambda: path._notes(trace, syncs, crossings))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    load(args.trace)  # fills the cache
    times: dict[str, list[float]] = {}
    for _ in range(args.runs):
        stages(args.trace, times)
    for name, values in times.items():
        print(f"{name}: CPU {min(values):.3f} s")
    print(f"sum: CPU {sum(min(values) for values in times.values()):.3f} s")


if __name__ == "__main__":
    main()
