"""`memory` on real traces: the figures agree with the traces' own ``Total Allocated`` fields and
with what ``torch.cuda`` measured while recording (the GPU check's ``memory_check.json``)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceanalyze
from tests.conftest import SHARED, skip_without
from tests.micro import annotation, memory_event, op, write, write_trace
from traceanalyze.analyses.iterations import counted
from traceanalyze.analyses.memory.usage import memory

CORPUS = SHARED / "traces" / "corpus"
MEMORY_TRACES = (
    "new_harryjmoss_a100_profile_memory.json.gz",
    "new_tl_mi300x_norm_profile_memory.json.gz",
    "new_unsloth_cpu_fwdbwd_profile_memory.json.gz",
)
# Written by the GPU check (capture side): a profile_memory trace and torch.cuda's figures.
MEMORY_CHECK = Path(__file__).resolve().parents[1] / "sample_traces" / "h200_memory_check"
# One allocation's rounding in PyTorch's caching allocator.
ROUNDING_BYTES = 512
_DEVICE_NAMES = {0: "cpu", 1: "cuda", 6: "hip"}


def _raw_memory_events(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as handle:
        document = json.load(handle)
    events = [e for e in document["traceEvents"] if e.get("name") == "[memory]"]
    # In time order (the file's order breaks ties): "allocated at the start" is before the first
    # event in time, and Kineto does not always write them in time order.
    return sorted(events, key=lambda e: float(e["ts"]))


def _device(args: dict[str, Any]) -> str:
    name = _DEVICE_NAMES[args["Device Type"]]
    return name if args["Device Id"] < 0 else f"{name}:{args['Device Id']}"


def _expected_from_totals(path: Path, trace: traceanalyze.Trace) -> dict[tuple[int, str], Any]:
    """(iteration, device) -> (start, peak) straight from the events' own totals."""
    spans = trace.iterations.select("iteration", "ts_ns", "dur_ns").rows()
    found: dict[tuple[int, str], list[int]] = {}
    for event in _raw_memory_events(path):  # the test's own reading, independent of the loader
        ts_ns = round(float(event["ts"]) * 1000)
        args = event["args"]
        for iteration, start, duration in spans:
            whole = trace.iteration_source == "whole trace"
            if whole or start <= ts_ns < start + duration:
                key = (iteration, _device(args))
                before = args["Total Allocated"] - args["Bytes"]
                if key not in found:
                    found[key] = [before, before]
                found[key][1] = max(found[key][1], args["Total Allocated"])
    return {key: tuple(value) for key, value in found.items()}


@pytest.mark.parametrize("name", MEMORY_TRACES)
def test_figures_agree_with_the_traces_own_totals(name: str) -> None:
    path = CORPUS / name
    skip_without(path)
    trace = counted(traceanalyze.load(path))  # the iterations memory reports
    result = memory(trace)
    measured = {
        (row["iteration"], row["device_label"]): (
            row["start_allocated_bytes"],
            row["peak_allocated_bytes"],
        )
        for row in result.iterations.iter_rows(named=True)  # checking a small result
    }
    assert measured == _expected_from_totals(path, trace)
    assert result.iterations.height > 0
    increases = result.iterations.select(
        (pl.col("peak_increase_bytes")
         == pl.col("peak_allocated_bytes") - pl.col("start_allocated_bytes")).all()
    ).item()  # fmt: skip
    assert increases


def compare_with_torch(trace_path: Path, check_path: Path) -> None:
    """The trace's start and peak allocated bytes on the check's device equal what torch.cuda
    measured around each profiled step, within one allocation's rounding."""
    check = json.loads(check_path.read_text())
    rows = memory(traceanalyze.load(trace_path)).iterations.filter(
        pl.col("device_label") == check["device"]
    )
    figures = {
        row["iteration"]: row for row in rows.iter_rows(named=True)
    }  # checking a small result
    assert check["steps"], "the check recorded no steps"
    for step in check["steps"]:
        row = figures[step["step"]]
        assert abs(row["start_allocated_bytes"] - step["allocated_before_bytes"]) <= ROUNDING_BYTES
        assert abs(row["peak_allocated_bytes"] - step["max_allocated_bytes"]) <= ROUNDING_BYTES


def test_figures_agree_with_torch_cuda_on_the_gpu_check() -> None:
    if not MEMORY_CHECK.is_dir():
        pytest.skip(f"{MEMORY_CHECK} is not recorded yet (the capture side's GPU check)")
    compare_with_torch(MEMORY_CHECK / "memory_check.json.gz", MEMORY_CHECK / "memory_check.json")


def test_comparison_with_torch_on_a_synthetic_check(tmp_path: Path) -> None:
    """The same comparison on a made-up recording: 4 MiB live before each step, a 2 MiB
    activation and a 1 MiB temporary inside it."""
    mib = 2**20
    events = [
        annotation("ProfilerStep#3", 0, 100),
        annotation("ProfilerStep#4", 100, 100),
        op("aten::mm", 10, 40),
        op("aten::mm", 110, 40),
    ]
    steps = []
    for base, step in ((0, 3), (100, 4)):
        events += [
            memory_event(base + 11, 0x100, 2 * mib, 6 * mib, 8 * mib),
            memory_event(base + 12, 0x200, 1 * mib, 7 * mib, 8 * mib),
            memory_event(base + 20, 0x200, -1 * mib, 6 * mib, 8 * mib),
            memory_event(base + 30, 0x100, -2 * mib, 4 * mib, 8 * mib),
        ]
        steps.append(
            {"step": step, "allocated_before_bytes": 4 * mib, "max_allocated_bytes": 7 * mib}
        )
    trace = write_trace(tmp_path, events, name="memory_check.json.gz")
    check = write(tmp_path, "memory_check.json", {"device": "cuda:0", "steps": steps})
    compare_with_torch(trace, check)
