"""The roofline against the GPU: hand-timed TFLOP/s of a bf16 GEMM and flash SDPA.

``scripts/roofline_check_gpu.py`` (run on the GPU box) times each case with CUDA events,
computes its FLOPs and bytes by hand and profiles the same calls with shapes into one trace;
its result folder is committed as ``sample_traces/h200_roofline``. This test reads that folder
offline: for every case, the trace-derived row (same op, same FLOPs) must have exactly the hand
FLOPs and bytes, and its kernel time per call must match the least of the script's CUDA-event
timings within ``TOLERANCE`` (or, for kernels of about 0.1 ms, within the events' fixed per-call
cost). It skips where the folder is absent; a fake folder checks the comparison itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceanalyze
from tests.micro import annotation, call, kernel, span, write_trace
from traceanalyze.analyses.roofline.model import roofline

RESULT_DIR = Path(__file__).resolve().parents[1] / "sample_traces" / "h200_roofline"
RESULT, TRACE = "roofline_check.json", "roofline_check.trace.json.gz"
TOLERANCE = 0.05
# A CUDA-event timing of one call holds at least a launch and two events besides the kernel: a
# few µs, which a 0.1 ms kernel feels as several percent.
EVENT_OVERHEAD_US = 15.0


def compare(folder: Path) -> list[dict[str, Any]]:
    """One record per measured case: the hand figures beside the trace's, and the time of one
    call both ways (µs): the trace's kernel time and the least of the CUDA-event timings."""
    result = json.loads((folder / RESULT).read_text())
    ops = roofline(traceanalyze.load(folder / result["trace"], cache=False)).ops
    records = []
    for case in result["cases"]:
        if case["error"]:
            continue
        rows = ops.filter((pl.col("op_name") == case["op"]) & (pl.col("flops") == case["flops"]))
        assert rows.height == 1, f"{case['name']}: no single roofline row with its FLOPs"
        row = rows.row(0, named=True)
        event_us = event_call_us(case)
        trace_us = case["flops"] / (row["tflops"] * 1e12) * 1e6
        records.append(
            {
                "case": case["name"],
                "flops": (case["flops"], row["flops"]),
                "bytes": (case["bytes"], row["bytes"]),
                "tflops": (case["flops"] / (event_us * 1e-6) / 1e12, row["tflops"]),
                "call_us": (event_us, trace_us),
                "ratio": row["tflops"] / (case["flops"] / (event_us * 1e-6) / 1e12),
            }
        )
    return records


def event_call_us(case: dict[str, Any]) -> float:
    """The least of the script's CUDA-event timings of one call (µs): single calls (median),
    single calls replayed from a CUDA graph, back-to-back calls (mean). Each can only add to the
    kernel's own time (CPU dispatch, launch, the events, clocks after sustained load), so the
    least is the one nearest the kernel."""
    timed = [case.get("median_ms"), case.get("graph_ms"), case.get("batched_mean_ms")]
    if not any(timed):  # a result folder of an older script: the batched figure only
        return float(case["flops"] / (case["tflops_batched"] * 1e12) * 1e6)
    return min(ms for ms in timed if ms) * 1e3


def check(records: list[dict[str, Any]]) -> None:
    """FLOPs and bytes exactly the hand figures; the trace's time of one call within
    ``TOLERANCE`` of the event timing, or, for kernels so short that a fixed per-call cost of
    the event timing (launch, events) is over that share, the trace shorter by at most
    ``EVENT_OVERHEAD_US``."""
    assert records, "no measured case"
    for record in records:
        assert record["flops"][0] == record["flops"][1], record
        assert record["bytes"][0] == record["bytes"][1], record
        event_us, trace_us = record["call_us"]
        assert trace_us <= event_us * (1 + TOLERANCE), record  # events time at least the kernel
        assert event_us - trace_us <= max(TOLERANCE * event_us, EVENT_OVERHEAD_US), record


def test_trace_derived_tflops_match_the_cuda_event_timings() -> None:
    if not (RESULT_DIR / RESULT).exists():
        pytest.skip(f"no GPU result folder at {RESULT_DIR} (scripts/roofline_check_gpu.py)")
    records = compare(RESULT_DIR)
    check(records)
    # The long kernels (1 ms and more), where the events' own cost is under 1%, agree within
    # the tolerance in TFLOP/s too.
    long = [r for r in records if r["call_us"][0] >= 1000]
    assert long and all(abs(r["ratio"] - 1) <= TOLERANCE for r in long), long


def fake_folder(folder: Path, kernel_us: float) -> Path:
    """A result folder in the script's layout: one 8192³ bf16 GEMM timed at 1.2 ms."""
    flops, nbytes = 2 * 8192**3, 2 * 3 * 8192 * 8192
    events = [
        annotation("ProfilerStep#1", 0, 5000),
        annotation("gemm_bf16_8192", 10, 4000),
        span("cpu_op", "aten::mm", 20, 30, **{"Input Dims": [[8192, 8192], [8192, 8192]],
                                               "Input type": ["c10::BFloat16"] * 2}),
        call("cudaLaunchKernel", 25, 5, 1),
        kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", 100, kernel_us, 1),
    ]  # fmt: skip
    write_trace(folder, events, TRACE)
    case = {"name": "gemm_bf16_8192", "op": "aten::mm", "flops": flops, "bytes": nbytes,
            "error": None, "median_ms": 1.25, "graph_ms": 1.2, "batched_mean_ms": 1.3,
            "tflops_batched": flops / 1.3e-3 / 1e12}  # fmt: skip
    (folder / RESULT).write_text(json.dumps({"trace": TRACE, "cases": [case]}))
    return folder


def test_the_comparison_on_a_fake_result_folder(tmp_path: Path) -> None:
    (tmp_path / "close").mkdir()
    (tmp_path / "far").mkdir()
    close = compare(fake_folder(tmp_path / "close", 1190.0))
    check(close)
    assert close[0]["ratio"] == pytest.approx(1200 / 1190)
    with pytest.raises(AssertionError):
        check(compare(fake_folder(tmp_path / "far", 1000.0)))
