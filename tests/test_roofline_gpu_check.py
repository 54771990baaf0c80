"""The roofline against the GPU: hand-timed TFLOP/s of a bf16 GEMM and flash SDPA.

``scripts/roofline_check_gpu.py`` (run on the GPU box) times each case with CUDA events,
computes its FLOPs and bytes by hand and profiles the same calls with shapes into one trace;
its result folder is committed as ``sample_traces/h200_roofline``. This test reads that folder
offline: for every case, the trace-derived row (same op, same FLOPs) must have exactly the hand
FLOPs and bytes, and TFLOP/s within ``TOLERANCE`` of the hand figure from single calls replayed
from a CUDA graph (events around an eager call also time the CPU's dispatch, longer than a small
kernel). It skips where the folder is absent; a fake folder checks the comparison itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceanalyze
from tests.micro import annotation, call, kernel, span, write_trace
from traceanalyze.analyses.roofline import roofline

RESULT_DIR = Path(__file__).resolve().parents[1] / "sample_traces" / "h200_roofline"
RESULT, TRACE = "roofline_check.json", "roofline_check.trace.json.gz"
TOLERANCE = 0.05


def compare(folder: Path) -> list[dict[str, Any]]:
    """One record per measured case: the hand figures beside the trace's."""
    result = json.loads((folder / RESULT).read_text())
    ops = roofline(traceanalyze.load(folder / result["trace"], cache=False)).ops
    records = []
    for case in result["cases"]:
        if case["error"]:
            continue
        rows = ops.filter((pl.col("op_name") == case["op"]) & (pl.col("flops") == case["flops"]))
        assert rows.height == 1, f"{case['name']}: no single roofline row with its FLOPs"
        row = rows.row(0, named=True)
        records.append(
            {
                "case": case["name"],
                "flops": (case["flops"], row["flops"]),
                "bytes": (case["bytes"], row["bytes"]),
                "tflops": (reference(case), row["tflops"]),
                "ratio": row["tflops"] / reference(case),
            }
        )
    return records


def reference(case: dict[str, Any]) -> float:
    """The hand TFLOP/s a trace's kernel time is checked against: single calls replayed from
    a CUDA graph (no CPU dispatch in the time) where measured, else back-to-back calls."""
    value: float = case.get("tflops_graph") or case["tflops_batched"]
    return value


def check(records: list[dict[str, Any]]) -> None:
    assert records, "no measured case"
    for record in records:
        assert record["flops"][0] == record["flops"][1], record
        assert record["bytes"][0] == record["bytes"][1], record
        assert abs(record["ratio"] - 1) <= TOLERANCE, record


def test_trace_derived_tflops_match_the_cuda_event_timings() -> None:
    if not (RESULT_DIR / RESULT).exists():
        pytest.skip(f"no GPU result folder at {RESULT_DIR} (scripts/roofline_check_gpu.py)")
    check(compare(RESULT_DIR))


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
            "error": None, "tflops_batched": flops / 1.2e-3 / 1e12}  # fmt: skip
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
