"""Sweep the GPU clock check's drift test over real traces: what it sees on each.

    python scripts/clock_drift_sweep.py [TRACE_OR_FOLDER ...]

Without arguments: every trace (``*.json.gz``) of ``sample_traces/`` and of
``../shared/traces/public`` and ``../shared/traces/corpus`` (``$TRACEANALYZE_SHARED`` if
set). Per trace and rank it prints the windows the drift test looks in (counted steps, or equal
slices of their span), the shortest delay of the launches onto an idle GPU in each window with
enough of them, what a straight line through those minima moves across the trace and its R²,
the rank's delay floor, and what
`audit`'s gpu_clock_offset finds; the last line counts the traces on which it finds anything.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import polars as pl

from traceanalyze.analyses.audit.steps import counted_steps
from traceanalyze.analyses.step.clock import _launch_delays, idle_launches, window_minima
from traceanalyze.analyses.step.model import step_model
from traceanalyze.load import load

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TRACEANALYZE_SHARED") or ROOT.parent / "shared")
FOLDERS = (ROOT / "sample_traces", SHARED / "traces" / "public", SHARED / "traces" / "corpus")


def traces(arguments: list[str]) -> list[Path]:
    """The trace files named, or found under the folders named (default: ``FOLDERS``)."""
    found: list[Path] = []
    for place in [Path(a) for a in arguments] or list(FOLDERS):
        if place.is_dir():
            found += sorted(place.rglob("*.json.gz"))  # traces; manifests and facts are .json
        elif place.exists():
            found.append(place)
    return found


def sweep(path: Path) -> tuple[str, list[str]]:
    """What the check finds on one trace, and a line per rank with its drift evidence."""
    steps = counted_steps(load(path))
    model = step_model(steps)
    windows = model.steps.select("rank", "lo_ns", "hi_ns")
    minima = window_minima(steps, windows)
    floors = _launch_delays(steps).select("rank", "floor_us", "min_delay_us")
    idle = (
        idle_launches(steps)
        .group_by("rank")
        .agg(idle_launches=pl.len(), idle_min_us=pl.col("delay_ns").min() / 1e3)
    )
    lines = [
        f"  rank {rank}: shortest delay {shortest:,.1f} µs over all launches, {low:,.1f} µs over "
        f"{n:,} launches onto an idle GPU; floor {floor:,.0f} µs"
        # One row per rank: a handful.
        for rank, floor, shortest, n, low in floors.join(idle, on="rank").iter_rows()
    ]
    # One row per rank: a handful.
    for (rank,), rows in minima.group_by("rank", maintain_order=True):
        xs = ((rows["mid_ns"] - rows["mid_ns"].min()) / 1e6).to_list()
        ys = rows["min_delay_us"].to_list()
        fit = pl.DataFrame({"x": xs, "y": ys}).select(
            slope=pl.cov("x", "y") / pl.col("x").var(), r2=pl.corr("x", "y") ** 2
        )
        slope, r2 = fit.row(0)
        moved = (slope or 0.0) * (max(xs) - min(xs)) if len(xs) > 1 else 0.0
        lines.append(
            f"  rank {rank}: {len(ys)} windows ({rows['windows'][0]}), minima "
            + " / ".join(f"{y:,.1f}" for y in ys[:16])
            + f" µs; line moves {moved:+,.1f} µs, R² {r2 if r2 is not None else float('nan'):.2f}"
        )
    found = ", ".join(f"rank {o.rank} {o.finding}" for o in model.clock) or "none"
    return found, lines


def main(arguments: list[str]) -> int:
    paths = traces(arguments)
    flagged = {"drift": 0, "offset": 0, "unclear": 0}
    for path in paths:
        try:
            found, lines = sweep(path)
        except Exception as error:  # a trace the tool refuses: say so, go on
            print(f"{path}: not loaded ({type(error).__name__}: {error})")
            continue
        print(f"{path}: gpu_clock_offset {found}")
        print("\n".join(lines))
        for kind in flagged:
            flagged[kind] += f" {kind}" in found
    print(
        f"{len(paths)} traces; with a drift: {flagged['drift']}, an offset: {flagged['offset']}, "
        f"unclear: {flagged['unclear']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
