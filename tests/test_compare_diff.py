"""`traceanalyze compare` and `traceanalyze diff`: the H200 capture through the CLI (golden
markdown and JSON), speed-up baselines, label clashes, and a micro trace pair for the diff."""

from __future__ import annotations

import csv
import io
import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import traceanalyze
from tests.micro import annotation, call, kernel, op, write_trace
from tests.test_report import CAPTURE, SAMPLES, VARIANTS, check_golden, invoke
from traceanalyze.analyses.summary import summary
from traceanalyze.analyses.variants.compare import COLUMNS
from traceanalyze.analyses.variants.diff import diff

# The machine-readable contract of `compare --format json` (README, "Stable keys").
CONTRACT_KEYS = [
    "variant", "gpu_busy_us_per_iter", "gpu_kernel_us_per_iter", "gpu_activity_us_per_iter",
    "cpu_op_us_per_iter", "wall_us_per_iter", "speedup", "speedup_wall", "bound",
    "kernels_per_iter", "memcpy_per_iter", "memset_per_iter", "transpose_ops_per_iter",
    "fused_kernel", "theoretical_occupancy_pct", "achieved_occupancy_pct",
    "reported_coverage_pct", "cudnn_cpu_us_per_iter", "launch_api", "gemm_precision",
]  # fmt: skip
NAIVE = str(CAPTURE / "naive.json.gz")
NAIVE_INPLACE = str(CAPTURE / "naive_inplace.json.gz")


@pytest.fixture(scope="module")
def module_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("module-cache")


def run(args: list[str], cache: Path) -> str:
    result = invoke(args, cache)
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture(scope="module")
def compare_json(module_cache: Path) -> str:
    return run(["compare", str(CAPTURE), "--format", "json"], module_cache)


# ---------------------------------------------------------------------------------------------
# compare


def test_compare_markdown_matches_golden(module_cache: Path) -> None:
    check_golden("compare_h200_default.md", run(["compare", str(CAPTURE)], module_cache))


def test_compare_json_matches_golden(compare_json: str) -> None:
    check_golden("compare_h200_default.json", compare_json)


def test_compare_json_keys_and_order(compare_json: str) -> None:
    rows = json.loads(compare_json)
    assert [row["variant"] for row in rows] == VARIANTS
    for row in rows:
        assert list(row) == list(COLUMNS)
        assert set(CONTRACT_KEYS) <= set(row)
    by_variant = {row["variant"]: row for row in rows}
    assert by_variant["naive"]["memcpy_per_iter"] == 1.0
    assert by_variant["naive_inplace"]["memcpy_per_iter"] == 0.0
    assert by_variant["sdpa_cudnn"]["launch_api"] == ["cuLaunchKernelEx"]
    assert by_variant["sdpa_math"]["gemm_precision"] == ["fp32-cuda-cores"]
    assert by_variant["sdpa_flash"]["theoretical_occupancy_pct"] == 12.5


def test_in_place_masked_fill_is_faster_by_the_copy(compare_json: str) -> None:
    # The seed's lesson in the headline: the busy time counts the Memcpy DtoD that kernel time
    # leaves out, so naive_inplace is faster, as the capture medians measured.
    rows = {row["variant"]: row for row in json.loads(compare_json)}
    naive, inplace = rows["naive"], rows["naive_inplace"]
    assert naive["gpu_kernel_us_per_iter"] == pytest.approx(inplace["gpu_kernel_us_per_iter"], 0.01)
    assert inplace["speedup"] >= 1.1
    assert inplace["speedup_wall"] >= 1.1
    assert inplace["speedup_wall_source"] == "capture median"


def test_cpu_bound_variants_are_named_and_ranked_by_wall_time(compare_json: str) -> None:
    rows = {row["variant"]: row for row in json.loads(compare_json)}
    # flex_attention has less GPU busy time than flash but waits on the CPU: its wall-time
    # speed-up (the capture medians) puts flash ahead, as measured.
    assert rows["flex_attention"]["speedup"] > rows["sdpa_flash"]["speedup"]
    assert rows["flex_attention"]["bound"] == "CPU-bound"
    assert rows["sdpa_flash"]["speedup_wall"] > rows["flex_attention"]["speedup_wall"]
    assert rows["naive"]["bound"] == rows["sdpa_math"]["bound"] == "GPU-bound"
    # Every figure adds up with its neighbours.
    for row in rows.values():
        assert row["gpu_busy_us_per_iter"] <= row["gpu_activity_us_per_iter"] + 1e-9
        assert row["gpu_kernel_us_per_iter"] <= row["gpu_activity_us_per_iter"] + 1e-9
        assert row["gpu_busy_us_per_iter"] <= row["wall_us_per_iter"] + 1e-9
        # One wall time per row: the capture median, which the verdict uses too.
        assert row["wall_source"] == "capture median"
        # Capped at 100: a profiled run's busy time can exceed the unprofiled median.
        assert row["gpu_busy_pct_of_wall"] == pytest.approx(
            min(row["gpu_busy_us_per_iter"] / (row["median_ms"] * 1e3) * 100, 100.0)
        )
        assert (row["bound"] == "GPU-bound") == (row["gpu_busy_pct_of_wall"] >= 80)
        assert row["speedup_wall"] == pytest.approx(rows["naive"]["median_ms"] / row["median_ms"])


def test_compare_csv_holds_the_json_figures(compare_json: str, module_cache: Path) -> None:
    text = run(["compare", str(CAPTURE), "--format", "csv"], module_cache)
    rows = list(csv.DictReader(io.StringIO(text)))
    # The JSON's keys in its order; a list is one field (never launch_api.0, .1 as present).
    assert list(rows[0]) == list(COLUMNS)
    for row, expected in zip(rows, json.loads(compare_json), strict=True):
        for key, value in expected.items():
            if value is None:
                assert row[key] == ""
            elif isinstance(value, list):
                assert row[key] == ";".join(value), key
            elif isinstance(value, float):
                assert float(row[key]) == value, key
            elif isinstance(value, bool):
                assert row[key] == str(value).lower(), key
            else:
                assert row[key] == str(value), key


def test_speedup_is_relative_to_naive_by_default(compare_json: str) -> None:
    rows = {row["variant"]: row for row in json.loads(compare_json)}
    naive_us = rows["naive"]["gpu_busy_us_per_iter"]
    for row in rows.values():
        assert row["speedup"] == pytest.approx(naive_us / row["gpu_busy_us_per_iter"])
    assert rows["naive"]["speedup"] == 1.0


def busy(path: str) -> float:
    value: float = summary(traceanalyze.load(path))["gpu_busy_us_per_iter"]
    return value


def speedups(args: list[str], cache: Path) -> dict[str, Any]:
    rows = json.loads(run(["compare", *args, "--format", "json"], cache))
    return {row["variant"]: row["speedup"] for row in rows}


def test_speedup_relative_to_the_baseline_option(module_cache: Path) -> None:
    result = speedups([NAIVE, NAIVE_INPLACE, "--baseline", "naive_inplace"], module_cache)
    assert result["naive_inplace"] == 1.0
    # GPU busy times per iteration of the two traces.
    assert result["naive"] == pytest.approx(busy(NAIVE_INPLACE) / busy(NAIVE))


def test_speedup_relative_to_the_first_variant_without_naive(module_cache: Path) -> None:
    flash, cudnn = str(CAPTURE / "sdpa_flash.json.gz"), str(CAPTURE / "sdpa_cudnn.json.gz")
    result = speedups([flash, cudnn], module_cache)
    assert result["sdpa_flash"] == 1.0
    assert result["sdpa_cudnn"] == pytest.approx(busy(flash) / busy(cudnn))


def test_an_unknown_baseline_is_a_usage_error(module_cache: Path) -> None:
    result = invoke(["compare", NAIVE, "--baseline", "no_such_variant"], module_cache)
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert "--baseline 'no_such_variant' is not one of the loaded variants" in line
    assert "naive" in line


def test_duplicate_labels_are_an_error_naming_both_files(
    tmp_path: Path, module_cache: Path
) -> None:
    other = tmp_path / "elsewhere"
    other.mkdir()
    copy = shutil.copy2(NAIVE, other)

    result = invoke(["compare", NAIVE, str(copy)], module_cache)

    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert "two traces are both called 'naive'" in line
    assert NAIVE in line and str(copy) in line
    assert "--label" in line
    labelled = invoke(
        ["compare", NAIVE, str(copy), "--label", "a", "--label", "b", "--format", "json"],
        module_cache,
    )
    assert [row["variant"] for row in json.loads(labelled.stdout)] == ["a/naive", "b/naive"]


def test_a_folder_and_a_file_of_the_same_label_clash(tmp_path: Path, module_cache: Path) -> None:
    copy = shutil.copy2(NAIVE, tmp_path)

    result = invoke(["compare", str(CAPTURE), str(copy)], module_cache)

    assert result.exit_code == 2
    assert f"({NAIVE} and {copy})" in result.stderr


# ---------------------------------------------------------------------------------------------
# diff on the H200 traces


def diff_json(base: str, new: str, cache: Path) -> dict[str, list[dict[str, Any]]]:
    return json.loads(run(["diff", base, new, "--format", "json"], cache))  # type: ignore[no-any-return]


def test_diff_naive_to_in_place_removes_the_copy(module_cache: Path) -> None:
    result = diff_json(NAIVE, NAIVE_INPLACE, module_cache)

    figures = {row["figure"]: row for row in result["figures"]}
    assert (figures["memcpy_per_iter"]["base"], figures["memcpy_per_iter"]["new"]) == (1.0, 0.0)
    assert figures["memcpy_per_iter"]["change_pct"] == -100.0
    assert figures["kernels_per_iter"]["change"] == 0.0
    [removed] = [row for row in result["kernels"] if row["status"] != "changed"]
    assert removed["name"].startswith("Memcpy DtoD")
    assert (removed["status"], removed["category"]) == ("removed", "memcpy")
    assert (removed["base_count_per_iter"], removed["new_count_per_iter"]) == (1.0, 0.0)
    # The copy's time shows in the categories too, the largest change.
    assert result["categories"][0]["category"] == "memcpy"
    assert result["categories"][0]["new_us"] == 0.0

    markdown = run(["diff", NAIVE, NAIVE_INPLACE], module_cache)
    assert "| Memcpy DtoD | memcpy | removed | 1 | 0 |" in markdown
    # Headed as every other table; the change column has one format (-0.041 µs elsewhere).
    assert "| memcpy/iter | 1.00 | 0.00 | -1.000 | -100.00 |" in markdown
    assert "| figure | base | new | change | change % |" in markdown
    assert "| category | base µs | new µs | change µs |" in markdown


def test_diff_warns_when_the_configurations_differ(module_cache: Path) -> None:
    other = str(SAMPLES / "h200_backward_large" / "naive.json.gz")
    result = invoke(["diff", NAIVE, other, "--format", "json"], module_cache)
    assert result.exit_code == 0
    warnings = json.loads(result.stdout)["warnings"]
    assert "the traces differ in backward: False vs True" in warnings
    assert "the traces differ in seq: 1024 vs 2048" in warnings
    assert "traceanalyze: warning: the traces differ in batch: 8 vs 4" in result.stderr
    assert (
        json.loads(run(["diff", NAIVE, NAIVE_INPLACE, "--format", "json"], module_cache))[
            "warnings"
        ]
        == []
    )


def test_diff_of_a_trace_with_itself_is_empty(module_cache: Path) -> None:
    result = diff_json(NAIVE, NAIVE, module_cache)

    assert result["kernels"] == []
    assert all(row["change"] == 0.0 for row in result["figures"])
    assert all(row["change_us"] == 0.0 for row in result["categories"])
    # Equal changes are ordered by name, not by hash order.
    names = [row["category"] for row in result["categories"]]
    assert names == sorted(names)
    markdown = run(["diff", NAIVE, NAIVE], module_cache)
    assert markdown.endswith("## Kernels added, removed or changed\n\nNone.\n")


def test_diff_csv_carries_every_section_of_the_json(module_cache: Path) -> None:
    # Each section is one named table (issue 41: --table figures|categories|kernels, each with
    # its declared schema), no longer one table with a `section` column.
    expected = diff_json(NAIVE, NAIVE_INPLACE, module_cache)
    for section, records in expected.items():
        if section == "warnings":
            continue
        text = run(
            ["diff", NAIVE, NAIVE_INPLACE, "--table", section, "--format", "csv"], module_cache
        )
        got = list(csv.DictReader(io.StringIO(text)))
        assert len(got) == len(records), section
        for row, record in zip(got, records, strict=True):
            for key, value in record.items():
                if isinstance(value, float):
                    assert float(row[key]) == value, (section, key)
                elif isinstance(value, bool):
                    assert row[key] == str(value).lower(), (section, key)
                else:
                    assert row[key] == ("" if value is None else str(value)), (section, key)


# ---------------------------------------------------------------------------------------------
# diff on a micro trace pair: the exact frames

SGEMM = "ampere_sgemm_128x64_nn"
SOFTMAX = "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10>(float*)"
FUSED = "triton_per_fused__softmax_0"
DTOD = "Memcpy DtoD (Device -> Device)"


def step(number: int, kernels: Sequence[tuple[str, float]], cat: dict[str, str]) -> list[Any]:
    """A 100 us profiler step: one op launching each (name, duration in us) in turn."""
    start = number * 100
    events: list[Any] = [annotation(f"ProfilerStep#{number}", start, 100)]
    for index, (name, dur) in enumerate(kernels):
        correlation = number * 10 + index
        at = start + index * 30
        events += [
            op("aten::op", at + 1, 10),
            call("cudaLaunchKernel", at + 2, 2, correlation),
            kernel(name, at + 5, dur, correlation, cat=cat.get(name, "kernel")),
        ]
    return events


def micro_pair(folder: Path) -> tuple[traceanalyze.Trace, traceanalyze.Trace]:
    # Base: a GEMM, a device copy and a softmax per step. New: the GEMM 2 us slower, the copy
    # gone, the softmax unchanged (so not listed) and a Triton kernel added.
    cat = {DTOD: "gpu_memcpy"}
    base = [(SGEMM, 10), (DTOD, 6), (SOFTMAX, 8)]
    new = [(SGEMM, 12), (SOFTMAX, 8), (FUSED, 4)]
    paths = [
        write_trace(folder, [*step(1, kernels, cat), *step(2, kernels, cat)], name)
        for name, kernels in (("base.json", base), ("new.json", new))
    ]
    first, second = traceanalyze.load_each(paths, cache=False)
    return first, second


def test_diff_micro_frames(tmp_path: Path) -> None:
    result = diff(*micro_pair(tmp_path))

    kernels = pl.DataFrame(
        [
            (DTOD, "memcpy", "removed", 1.0, 0.0, 6.0, 0.0, -6.0),
            (FUSED, "softmax", "added", 0.0, 1.0, 0.0, 4.0, 4.0),
            (SGEMM, "gemm", "changed", 1.0, 1.0, 10.0, 12.0, 2.0),
        ],
        schema={
            "name": pl.String,
            "category": pl.String,
            "status": pl.String,
            "base_count_per_iter": pl.Float64,
            "new_count_per_iter": pl.Float64,
            "base_us_per_iter": pl.Float64,
            "new_us_per_iter": pl.Float64,
            "change_us": pl.Float64,
        },
        orient="row",
    )
    assert_frame_equal(result.kernels, kernels)
    categories = pl.DataFrame(
        [("memcpy", 6.0, 0.0, -6.0), ("softmax", 8.0, 12.0, 4.0), ("gemm", 10.0, 12.0, 2.0)],
        schema={"category": pl.String, "base_us": pl.Float64, "new_us": pl.Float64,
                "change_us": pl.Float64},
        orient="row",
    )  # fmt: skip
    assert_frame_equal(result.categories, categories)
    figures = dict(zip(result.figures["figure"], result.figures["change"], strict=True))
    assert figures["memcpy_per_iter"] == -1.0
    assert figures["kernels_per_iter"] == 1.0  # the Triton kernel
    assert figures["gpu_kernel_us_per_iter"] == 6.0


def test_reported_occupancy_needs_half_the_kernel_time() -> None:
    # cuDNN backward: the main kernel (driver-API launch) reports no occupancy; its small helper
    # reporting 100% must not stand for the variant.
    from traceanalyze.hardware.occupancy import occupancy_means

    kernels = pl.DataFrame(
        {
            "dur_ns": [900, 100],
            "theoretical_occupancy_pct": [18.75, 100.0],
            "achieved_occupancy_pct": [None, 100.0],
        },
        schema={
            "dur_ns": pl.Int64,
            "theoretical_occupancy_pct": pl.Float64,
            "achieved_occupancy_pct": pl.Float64,
        },
    )
    assert kernels.select(occupancy_means()).row(0) == (26.875, None, 10.0)
    covered = kernels.with_columns(pl.Series("achieved_occupancy_pct", [12.0, 100.0]))
    assert kernels.select(occupancy_means()).row(0)[2] == 10.0
    assert covered.select(occupancy_means()).row(0) == (26.875, 20.8, 100.0)
