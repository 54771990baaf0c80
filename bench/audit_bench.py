"""Audit benchmark: `audit` beyond a cached load of the 175 MB trace, each check alone, and
what the one audit line every command writes costs that command.

    python bench/audit_bench.py [TRACE] [--runs 5]

Each run loads the trace afresh from the cache (untimed), so nothing is memoised between runs:

* ``audit (all checks)``: :func:`traceanalyze.analyses.audit.audit` on the fresh Trace, every
  analysis it needs included (the target: under 0.5 s); also in CPU seconds of the process
  (its threads together), steadier where other work shares the cores;
* each check alone, on its own fresh Trace;
* the hook: a command's own work (``summary`` without its audit, ``kernels``), then the audit
  on the same Trace, as the command line runs it after the command (``command_warnings``: the
  checks that could move what the command prints); the audit's time there against the
  command's time (the hook reuses what the command memoised).
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
from traceanalyze.analyses.audit import RUNNERS, audit, command_warnings
from traceanalyze.analyses.audit.figures import COMMAND_FIGURES
from traceanalyze.analyses.kernels import kernel_table
from traceanalyze.analyses.summary import summary
from traceanalyze.trace import Trace

DEFAULT_TRACE = (
    Path(os.environ.get("TRACEANALYZE_SHARED") or Path(__file__).resolve().parents[2] / "shared")
    / "bench"
    / "h200_train_175mb.json.gz"
)
COMMANDS: dict[str, Callable[[Trace], Any]] = {"summary": summary, "kernels": kernel_table}


def timed(step: Callable[[], Any]) -> float:
    start = time.perf_counter()
    step()
    return time.perf_counter() - start


def cpu_timed(step: Callable[[], Any]) -> float:
    """CPU seconds of this process (all its threads): on a machine whose cores other work
    shares, less sensitive to the others than wall time."""
    start = time.process_time()
    step()
    return time.process_time() - start


def one_run(path: Path) -> dict[str, float]:
    fresh = load(path)
    times = {"audit (all checks)": timed(lambda: audit(fresh))}
    fresh = load(path)
    times["audit (all checks), CPU s"] = cpu_timed(lambda: audit(fresh))
    for name, check in RUNNERS.items():
        fresh = load(path)
        times[f"  {name}"] = timed(lambda check=check, fresh=fresh: check(fresh))
    for command, work in COMMANDS.items():
        fresh = load(path)
        times[f"{command}: the command"] = timed(lambda work=work, fresh=fresh: work(fresh))
        figures = COMMAND_FIGURES[command]
        times[f"{command}: its audit line"] = timed(
            lambda fresh=fresh, figures=figures: command_warnings(fresh, figures)
        )
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    load(args.trace)  # warm the cache
    load_s = statistics.median(timed(lambda: load(args.trace)) for _ in range(args.runs))
    runs = [one_run(args.trace) for _ in range(args.runs)]
    median = {name: statistics.median(r[name] for r in runs) for name in runs[0]}
    print(f"trace: {args.trace}, {args.runs} runs, median seconds beyond a cached load")
    print(f"  {'cached load (for scale)':<40} {load_s:.3f}")
    for name, seconds in median.items():
        spread = sorted(r[name] for r in runs)
        print(f"  {name:<40} {seconds:.3f}   (min {spread[0]:.3f}, max {spread[-1]:.3f})")
    for command in COMMANDS:
        ratio = median[f"{command}: its audit line"] / median[f"{command}: the command"]
        print(f"  {command}: audit line / command          {ratio:.2f}x")


if __name__ == "__main__":
    main()
