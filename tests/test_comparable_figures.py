"""Numbers side by side that are comparable (issue 38, item 7): occupancy means over one kernel
set, unknown sizes left unknown, every launching op of a kernel, the peaks table. Bus
bandwidth medians and group sizes: tests/test_comms.py."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

import traceanalyze
from tests.conftest import CORPUS_TRACES, skip_without
from tests.micro import annotation, call, kernel, op, write_trace
from traceanalyze.analyses.kernels import kernel_table, op_table
from traceanalyze.analyses.memcpy import memory_traffic
from traceanalyze.analyses.variants.compare import comparison
from traceanalyze.cli import main
from traceanalyze.hardware.occupancy import OCCUPANCY_DEFINITIONS
from traceanalyze.hardware.peaks import device_peaks
from traceanalyze.load.variants import load_variants

REPO = Path(__file__).resolve().parents[1]

# 128 threads x 255 registers: 2 blocks of 4 warps, 12.5% on an H200 (FACTS.md).
FLASH = {"block": [128, 1, 1], "grid": [264, 1, 1], "registers per thread": 255,
         "shared memory": 0}  # fmt: skip
# 256 threads x 32 registers: 8 blocks of 8 warps, 100%.
SMALL = {"block": [256, 1, 1], "grid": [1056, 1, 1], "registers per thread": 32,
         "shared memory": 0}  # fmt: skip


def test_compare_occupancy_means_name_their_kernel_sets(tmp_path: Path) -> None:
    # 30 us of a 12.5% kernel with CUPTI's estimate (13%) and 10 us of a 100% kernel without
    # one (a driver-API launch reports 0): 75% of the kernel time carries the estimate.
    events = [
        annotation("ProfilerStep#1", 0, 100),
        op("aten::a", 1, 5),
        call("cudaLaunchKernel", 2, 1, 1),
        kernel("flash_fwd_kernel", 10, 30, 1, **FLASH, **{"est. achieved occupancy %": 13}),
        op("aten::b", 50, 5),
        call("cuLaunchKernelEx", 51, 1, 2, cat="cuda_driver"),
        kernel("small_kernel", 60, 10, 2, **SMALL, **{"est. achieved occupancy %": 0}),
    ]
    row = comparison(load_variants([write_trace(tmp_path, events)], cache=False)).row(0, named=True)
    # Theoretical over every kernel: (30 x 12.5 + 10 x 100) / 40.
    assert row["theoretical_occupancy_pct"] == pytest.approx(34.375)
    # Over the kernels that carry the estimate only, both figures: like with like.
    assert row["theoretical_occupancy_of_estimated_pct"] == pytest.approx(12.5)
    assert row["estimated_occupancy_pct"] == pytest.approx(13.0)
    assert row["achieved_occupancy_pct"] == row["estimated_occupancy_pct"]  # the old key
    assert row["reported_coverage_pct"] == pytest.approx(75.0)
    assert "not a measurement" in OCCUPANCY_DEFINITIONS["estimated_occupancy_pct"]


def test_the_docs_define_the_occupancy_figures_as_the_code_does() -> None:
    readme = (REPO / "docs" / "time.md").read_text()  # the README's section, moved (issue 41)
    for key, definition in OCCUPANCY_DEFINITIONS.items():
        assert f"- `{key}`: {definition}." in readme, key


def test_a_graph_copy_of_unknown_size_stays_unknown() -> None:
    # The replayed graph's copy is a kernel (memcpy128) with no bytes: not "0 B at 0.0 GB/s".
    trace = traceanalyze.load(REPO / "sample_traces/h200_graph_replay/naive.json.gz")
    row = memory_traffic(trace).filter(pl.col("name") == "memcpy128").row(0, named=True)
    assert row["us_per_iter"] > 100
    assert (row["bytes_per_call"], row["bytes_per_iter"], row["bandwidth_gbps"]) == (None,) * 3
    # A copy whose size the trace gives keeps it.
    memset = memory_traffic(trace).filter(pl.col("kind") == "memset").row(0, named=True)
    assert memset["bytes_per_iter"] == 4


def test_every_launching_op_of_a_kernel(tmp_path: Path) -> None:
    # One GEMM kernel launched twice by aten::mm and once by aten::addmm, per step of 2.
    events = [annotation("ProfilerStep#1", 0, 100), annotation("ProfilerStep#2", 100, 100)]
    for step in (0, 100):
        for index, name in enumerate(("aten::mm", "aten::mm", "aten::addmm")):
            ts, correlation = step + 10 + 20 * index, step + index + 1
            events += [
                op(name, ts, 10),
                call("cudaLaunchKernel", ts + 1, 2, correlation),
                kernel("gemm_kernel", ts + 5, 4 if name == "aten::mm" else 2, correlation),
            ]
    trace = traceanalyze.load(write_trace(tmp_path, events), cache=False)
    row = kernel_table(trace).row(0, named=True)
    assert row["launch_op"] == "aten::mm"
    assert row["launch_ops"] == [
        {"op": "aten::mm", "count_per_iter": 2.0, "us_per_iter": 8.0},
        {"op": "aten::addmm", "count_per_iter": 1.0, "us_per_iter": 2.0},
    ]
    # `kernels --by op` is the same split, summed over kernel names.
    assert op_table(trace).select("launch_op", "count_per_iter", "us_per_iter").rows() == [
        ("aten::mm", 2.0, 8.0), ("aten::addmm", 1.0, 2.0),
    ]  # fmt: skip


def test_qwen_gemm_launches_from_addmm_and_mm() -> None:
    path = CORPUS_TRACES / "tl_h100_qwen.json.gz"
    skip_without(path)
    trace = traceanalyze.load(path)
    table = kernel_table(trace)
    gemm = table.filter(pl.col("name").str.starts_with("sm90_xmma_gemm_bf16bf16")).row(
        0, named=True
    )
    ops = {entry["op"]: entry["count_per_iter"] for entry in gemm["launch_ops"]}
    assert gemm["count_per_iter"] == 168 and ops == {"aten::mm": 96, "aten::addmm": 72}
    # Summed over every kernel, launch_ops agree with `kernels --by op` op for op.
    split = (
        table.select("launch_ops")
        .explode("launch_ops")
        .unnest("launch_ops")
        .drop_nulls("count_per_iter")
        .group_by("op")
        .agg(pl.col("count_per_iter", "us_per_iter").sum())
    )
    by_op = op_table(trace).rename({"launch_op": "op"})
    joined = by_op.join(split, on="op", how="full", nulls_equal=True, coalesce=True)
    assert joined.height == by_op.height
    assert joined["count_per_iter"].to_list() == pytest.approx(joined["count_per_iter_right"])
    assert joined["us_per_iter"].to_list() == pytest.approx(joined["us_per_iter_right"])


def test_kernels_json_keeps_launch_op_and_adds_launch_ops(tmp_path: Path) -> None:
    path = REPO / "sample_traces/h200_default/naive.json.gz"
    result = CliRunner().invoke(main, ["kernels", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = __import__("json").loads(result.output)
    assert all({"launch_op", "launch_ops"} <= set(row) for row in rows)
    assert all(
        row["launch_op"] == (row["launch_ops"][0]["op"] if row["launch_ops"] else row["launch_op"])
        for row in rows
    )


@pytest.mark.parametrize(
    ("name", "gpu", "fp64", "fp64_tensor", "bf16", "tbps"),
    [
        ("NVIDIA H800", "H800 SXM", 1.0, 1.0, 989.4, 3.35),
        ("NVIDIA H800 PCIe", "H800 PCIe", 0.8, 0.8, 756.5, 2.0),
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 34.0, 67.0, 989.4, 3.35),
        ("NVIDIA H200", "H200 SXM", 34.0, 67.0, 989.4, 4.8),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM", 9.7, 19.5, 312.0, 2.039),
        ("Tesla V100-SXM2-32GB", "V100 SXM2", 7.8, None, None, 0.9),
    ],
)  # fmt: skip
def test_peaks_list_plain_fp64_apart_from_fp64_tensor_core(
    name: str, gpu: str, fp64: float, fp64_tensor: float | None, bf16: float | None, tbps: float
) -> None:
    devices = pl.DataFrame(
        {"rank": [0], "device": [0], "name": [name], "num_sms": [132]},
        schema={"rank": pl.Int32, "device": pl.Int32, "name": pl.String, "num_sms": pl.Int32},
    )
    row = device_peaks(devices).row(0, named=True)
    got = (row["gpu"], row["peak_fp64_tflops"], row["peak_fp64_tensor_tflops"],
           row["peak_bf16_tflops"], row["peak_tbps"])  # fmt: skip
    assert got == (gpu, fp64, fp64_tensor, bf16, tbps)


def test_the_h800_corpus_trace_gets_its_peaks() -> None:
    path = CORPUS_TRACES / "deepseek_h800_train_ep64.json.gz"
    skip_without(path)
    peaks = device_peaks(traceanalyze.load(path).devices)
    assert set(peaks["gpu"]) == {"H800 SXM"}


def test_the_blog_capture_sets_its_occupancy_figures_side_by_side() -> None:
    # Issue 38: 74.4% theoretical over every kernel sat beside 86.5% "achieved" over the
    # kernels with an estimate. Now the estimate sits beside the theoretical figure of its own
    # kernels (CUPTI's 86.38 against 86.19).
    table = comparison(load_variants([REPO / "sample_traces/h200_default"]))
    naive = table.filter(pl.col("variant") == "naive").row(0, named=True)
    assert naive["theoretical_occupancy_pct"] == pytest.approx(74.17, abs=0.01)
    assert naive["theoretical_occupancy_of_estimated_pct"] == pytest.approx(86.19, abs=0.01)
    assert naive["estimated_occupancy_pct"] == pytest.approx(86.38, abs=0.01)


def test_the_reports_median_bus_bandwidth_is_over_calls() -> None:
    from tests.conftest import PUBLIC_TRACES
    from traceanalyze.analyses.distributed.comms import busiest_collective, comms

    path = PUBLIC_TRACES / "hta_nccl_a100.json.gz"
    skip_without(path)
    result = comms(traceanalyze.load(path))
    # 15 all_reduces over two ranks: their median is 5.755 GB/s; the mean of the two size
    # buckets' medians (10.98 and 3.91) was 7.45.
    _, top = busiest_collective(result)
    assert top["collective"] == "all_reduce"
    assert top["busbw"] == pytest.approx(5.755, abs=0.001)
    calls = result.calls.filter(pl.col("collective") == "all_reduce")["busbw_gbps"]
    assert calls.len() == 15 and top["busbw"] == pytest.approx(calls.median())
