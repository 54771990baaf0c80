"""Every analysis on the public real traces (../shared/traces/public, skipped when absent): no
errors, almost nothing left unclassified on NVIDIA, and spot checks of what each trace holds."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import polars as pl
import pytest

import traceanalyze
from tests.micro import present
from traceanalyze.analyses.activities import activities
from traceanalyze.analyses.cudnn import cudnn_table
from traceanalyze.analyses.kernels import kernel_table, occupancy_table
from traceanalyze.analyses.memcpy import memory_traffic
from traceanalyze.analyses.summary import summary

AMD = ("hta_mi250_rocm", "tl_mi210_gpu_only", "tl_mi300_bert_small", "tl_torch_compile_triton")
# Kernel time the taxonomy may leave as "other" on NVIDIA traces.
OTHER_BUDGET_PCT = 2.0


@cache
def load(path: Path) -> traceanalyze.Trace:
    return traceanalyze.load(path, cache=False)


def stem(path: Path) -> str:
    return path.name.split(".")[0]


def is_nvidia(path: Path) -> bool:
    name = stem(path)
    if name.startswith("hta_"):
        return name not in ("hta_mi250_rocm", "hta_cpu_only_rank34")
    return name.startswith("tl_h100_")


def kernels(path: Path) -> pl.DataFrame:
    return kernel_table(load(path)).filter(pl.col("kind") == "kernel")


def category_us(path: Path) -> dict[str, float]:
    frame = activities(load(path)).filter(pl.col("kind") == "kernel")
    grouped = frame.group_by("category").agg(pl.col("dur_ns").sum() / 1e3)
    return dict(grouped.rows())


def test_every_analysis_runs(public_trace: Path) -> None:
    trace = load(public_trace)
    result = summary(trace)
    assert result["iterations"] >= 1
    tables = {
        "kernels": kernel_table(trace),
        "cudnn": cudnn_table(trace),
        "memcpy": memory_traffic(trace),
        "occupancy": occupancy_table(trace),
    }
    assert tables["kernels"]["count"].sum() == trace.gpu.height
    assert tables["occupancy"].height == trace.kernels["name"].n_unique()
    # Machine-readable output: every float is a number or null (JSON has no NaN).
    for table in tables.values():
        for column in table.select(pl.selectors.float()).columns:
            assert not table[column].is_nan().any(), column


def test_other_is_a_small_share_on_nvidia(public_trace: Path) -> None:
    if not is_nvidia(public_trace):
        pytest.skip("not an NVIDIA trace")
    times = category_us(public_trace)
    total = sum(times.values())
    assert times.get("other", 0.0) <= total * OTHER_BUDGET_PCT / 100, times


def test_nccl_trace_has_communication(public: Path) -> None:
    table = kernels(public / "hta_nccl_a100.json.gz")
    nccl = table.filter(pl.col("name").str.starts_with("ncclKernel_"))
    assert not nccl.is_empty()
    assert set(nccl["category"]) == {"communication"}
    assert category_us(public / "hta_nccl_a100.json.gz")["communication"] > 0


def test_h100_conv_trace_has_convolution_and_layout_transposes(public: Path) -> None:
    table = kernels(public / "tl_h100_falconsai_conv.json.gz")
    by_category = dict(table.group_by("category").agg(pl.col("name").first()).rows())
    assert "fprop" in by_category["convolution"]
    assert "nchwToNhwc" in by_category["transpose"]
    assert "flash_fwd_kernel" in by_category["fused_attention"]


def test_alexnet_cudnn_convolution_is_attributed(public: Path) -> None:
    trace = load(public / "hta_alexnet_a100.json.gz")
    table = cudnn_table(trace)
    assert "aten::cudnn_convolution" in table["name"].to_list()
    assert summary(trace)["cudnn_cpu_us_per_iter"] > 0


def test_h100_bert_gemms_use_tensor_cores(public: Path) -> None:
    gemms = kernels(public / "tl_h100_bert_small.json.gz").filter(pl.col("category") == "gemm")
    assert set(gemms["gemm_precision"]) == {"bf16"}


@pytest.mark.parametrize("name", AMD)
def test_amd_gemms_are_tensile_and_occupancy_is_unknown(public: Path, name: str) -> None:
    table = kernels(next(public.glob(f"{name}.json*")))
    gemms = table.filter(pl.col("category") == "gemm")
    assert not gemms.is_empty()
    assert gemms["name"].str.starts_with("Cijk_").all()
    # ROCm traces carry no register-file size: theoretical occupancy is left unknown.
    assert table["theoretical_occupancy_pct"].null_count() == table.height


def test_nvidia_occupancy_is_known_where_the_footprint_is(public: Path) -> None:
    table = occupancy_table(load(public / "tl_h100_bert_small.json.gz"))
    assert table["theoretical_occupancy_pct"].null_count() == 0
    assert table["theoretical_occupancy_pct"].is_between(0, 100, closed="right").all()


def test_cpu_only_trace_has_empty_gpu_figures(public: Path) -> None:
    result = summary(load(public / "hta_cpu_only_rank34.pt.trace.json.gz"))
    assert (result["kernels_per_iter"], result["gpu_kernel_us_per_iter"]) == (0, 0)
    assert present(result["category_us"]) == {}
