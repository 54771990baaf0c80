"""Check that a speed change keeps every result: dump the results of one code version, then
compare two dumps frame by frame with ``assert_frame_equal``.

    PYTHONPATH=<main checkout> python bench/same_results.py dump /tmp/main [--corpus]
    PYTHONPATH=<branch checkout> python bench/same_results.py dump /tmp/branch [--corpus]
    python bench/same_results.py compare /tmp/main /tmp/branch

``dump`` writes, per trace (every sample trace, every public trace and the bench trace; with
``--corpus`` the corpus traces instead), the loaded frames and every frame of the analyses
below as Parquet, and their other values (span, notes, ...) as text, under ``OUT/<trace>/``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
from polars.testing import assert_frame_equal

import traceanalyze as ta
from traceanalyze import load
from traceanalyze.analyses.accounting import iteration_times
from traceanalyze.analyses.activities import activities
from traceanalyze.analyses.between.critical_path import critical_path
from traceanalyze.analyses.between.idle import idle_breakdown
from traceanalyze.analyses.between.launches import (
    launch_by_category,
    launch_events,
    launch_outliers,
    launch_table,
)
from traceanalyze.analyses.distributed.comms import comms
from traceanalyze.analyses.iterations import counted, iteration_rows
from traceanalyze.analyses.summary import summary
from traceanalyze.trace import Trace

SHARED = Path(
    os.environ.get("TRACEANALYZE_SHARED") or Path(__file__).resolve().parents[2] / "shared"
)
SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
ANALYSES: dict[str, Callable[[Trace], Any]] = {
    "trace_cpu": lambda t: t.cpu,
    "trace_gpu": lambda t: t.gpu,
    "trace_iterations": lambda t: t.iterations,
    "activities": lambda t: activities(counted(t)),
    "iteration_rows": iteration_rows,
    "iteration_times": lambda t: iteration_times(counted(t)),
    "critical_path": critical_path,
    "idle": idle_breakdown,
    "launch_table": launch_table,
    "launch_by_category": launch_by_category,
    "launch_outliers": launch_outliers,
    "launch_events": launch_events,
    "comms": comms,
    "summary": summary,
    "kernels": ta.kernels,
    "kernels_op": lambda t: ta.kernels(t, by="op"),
    "occupancy": ta.occupancy,
    "cudnn": ta.cudnn,
    "memcpy": ta.memcpy,
    "streams": ta.streams,
    "graphs": ta.graphs,
    "stacks": ta.stacks,
    "roofline": ta.roofline,
}


def traces(corpus: bool) -> list[Path]:
    if corpus:
        return sorted((SHARED / "traces" / "corpus").glob("*.json*"))
    return [
        *sorted(SAMPLES.glob("*/*.json.gz")),
        *sorted((SHARED / "traces" / "public").glob("*.json*")),
        SHARED / "bench" / "h200_train_175mb.json.gz",
    ]


def _put(folder: Path, name: str, value: Any, values: dict[str, str]) -> None:
    """Frames to Parquet; dataclasses and mappings field by field; anything else as text."""
    if isinstance(value, pl.DataFrame):
        value.write_parquet(folder / f"{name}.parquet")
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            _put(folder, f"{name}.{field.name}", getattr(value, field.name), values)
    elif isinstance(value, dict):
        for key, item in value.items():
            _put(folder, f"{name}.{key}", item, values)
    else:
        values[name] = repr(value)


def dump(out: Path, corpus: bool) -> None:
    for path in traces(corpus):
        folder = out / f"{path.parent.name}__{path.name}"
        folder.mkdir(parents=True, exist_ok=True)
        values: dict[str, str] = {}
        try:
            trace = load(path)
        except ta.TraceAnalyzeError as error:
            values["load"] = str(error)
        else:
            for name, analysis in ANALYSES.items():
                try:
                    _put(folder, name, analysis(trace), values)
                except ta.TraceAnalyzeError as error:  # the same refusal on both sides
                    values[f"{name}.error"] = str(error)
        (folder / "values.json").write_text(json.dumps(values, indent=1, sort_keys=True))
        print(folder.name, flush=True)


def compare(first: Path, second: Path) -> int:
    """Prints every difference; returns how many there were."""
    compared = differences = 0
    for folder in sorted(first.iterdir()):
        other = second / folder.name
        names = sorted(f.name for f in folder.iterdir())
        other_names = sorted(f.name for f in other.iterdir()) if other.exists() else []
        if names != other_names:
            differences += 1
            print(f"{folder.name}: files differ: {sorted(set(names) ^ set(other_names))}")
        for name in sorted(set(names) & set(other_names)):
            compared += 1
            if name.endswith(".json"):
                mine, theirs = ((f / name).read_text() for f in (folder, other))
                if json.loads(mine) != json.loads(theirs):
                    differences += 1
                    print(f"{folder.name}: values differ")
                continue
            try:
                assert_frame_equal(pl.read_parquet(folder / name), pl.read_parquet(other / name))
            except AssertionError as error:
                differences += 1
                print(f"{folder.name}: {name}: {str(error)[:300]}")
    traces_compared = len(list(first.iterdir()))
    print(f"{compared} files compared over {traces_compared} traces: {differences} differ")
    return differences


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    dumping = commands.add_parser("dump")
    dumping.add_argument("out", type=Path)
    dumping.add_argument("--corpus", action="store_true")
    comparing = commands.add_parser("compare")
    comparing.add_argument("first", type=Path)
    comparing.add_argument("second", type=Path)
    args = parser.parse_args()
    if args.command == "dump":
        dump(args.out, args.corpus)
    else:
        raise SystemExit(1 if compare(args.first, args.second) else 0)


if __name__ == "__main__":
    main()
