"""`critical-path` and `comms` on the 175 MB trace, timed beyond loading, with HTA's critical
path on the same trace in the same run.

    python bench/critical_path_bench.py [TRACE] [--runs 5] [--hta-python PYTHON] [--hta-steps N]

Each timing starts from a freshly loaded Trace (from the Parquet cache, untimed), so it includes
everything the analysis needs (classification too). ``--hta-python`` names an interpreter with
HTA 0.5 and pandas < 3 (its critical path fails on pandas 3); it loads the trace (timed
separately) and runs ``critical_path_analysis`` on each of the first N ProfilerStep instances
(default: all), the answer our one call gives for every step. HTA has no collectives analysis.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from traceanalyze import load
from traceanalyze.analyses.between.critical_path import critical_path
from traceanalyze.analyses.distributed.comms import comms
from traceanalyze.trace import Trace

DEFAULT_TRACE = (
    Path(os.environ.get("TRACEANALYZE_SHARED") or Path(__file__).resolve().parents[2] / "shared")
    / "bench"
    / "h200_train_175mb.json.gz"
)
STEPS: tuple[tuple[str, Callable[[Trace], Any]], ...] = (
    ("critical-path", critical_path),
    ("comms", comms),
)
# Run by --hta-python: HTA's load, then its critical path per step; prints JSON.
HTA_SCRIPT = """
import json, logging, sys, time
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
analysis = TraceAnalysis(trace_dir=sys.argv[1])
loaded = time.perf_counter() - t0
steps, failed, t1 = int(sys.argv[2]), 0, time.perf_counter()
for i in range(steps):
    try:
        analysis.critical_path_analysis(0, "ProfilerStep", (i, i))
    except Exception:
        failed += 1
print(json.dumps({"load_s": loaded, "critical_path_s": time.perf_counter() - t1,
                  "steps": steps, "failed": failed}))
"""


def one_run(path: Path) -> dict[str, float]:
    """Wall and CPU seconds of each step (CPU time: all threads, steadier on a shared VM)."""
    times = {}
    for name, step in STEPS:
        trace = load(path)  # fresh: nothing memoised
        t0, c0 = time.perf_counter(), time.process_time()
        step(trace)
        times[name] = time.perf_counter() - t0
        times[f"{name} cpu"] = time.process_time() - c0
    return times


def hta_run(python: str, path: Path, steps: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / path.name).symlink_to(path.resolve())
        env = {**os.environ, "HTA_DISABLE_NS_ROUNDING": "1"}
        done = subprocess.run(
            [python, "-c", HTA_SCRIPT, folder, str(steps)],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--hta-python", default=None)
    parser.add_argument("--hta-steps", type=int, default=None)
    args = parser.parse_args()
    trace = load(args.trace)  # warm the cache
    iterations = trace.iterations.height
    runs = [one_run(args.trace) for _ in range(args.runs)]
    load_average = os.getloadavg()[0]
    print(
        f"trace: {args.trace}, {iterations} iterations, {args.runs} runs, median seconds beyond "
        f"loading (load average {load_average:.1f} on {os.cpu_count()} CPUs)"
    )
    for name, _ in STEPS:
        wall = statistics.median(r[name] for r in runs)
        cpu = statistics.median(r[f"{name} cpu"] for r in runs)
        print(f"  {name:<14} wall {wall:.3f}, CPU {cpu:.3f}")
    if args.hta_python:
        steps = args.hta_steps or iterations
        hta = hta_run(args.hta_python, args.trace, steps)
        print(
            f"  HTA load {hta['load_s']:.2f}, critical path of {hta['steps']} steps "
            f"{hta['critical_path_s']:.2f} ({hta['failed']} failed)"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
