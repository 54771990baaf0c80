"""`compare` and `report` say when traces are not the same workload or not on the same GPU,
and give no speed-up between different workloads (issue 38)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.conftest import CORPUS_TRACES, skip_without
from tests.micro import H200, annotation, call, kernel, span, write_trace
from traceanalyze.analyses.report.contents import build_report
from traceanalyze.analyses.variants.compare import comparison
from traceanalyze.cli import main
from traceanalyze.load.variants import load_variants
from traceanalyze.render.report.markdown import comparison_markdown

H100 = {**H200, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85_520_809_984}


def step(ops: list[tuple[str, list[list[int]]]], us: float = 10.0) -> list[dict[str, Any]]:
    """One step: each op on its shapes launching one kernel of ``us``."""
    events: list[dict[str, Any]] = [annotation("ProfilerStep#1", 0, 1000)]
    for index, (name, dims) in enumerate(ops):
        ts = 10 + 100 * index
        types = ["c10::BFloat16"] * len(dims)
        events += [
            span("cpu_op", name, ts, 20, **{"Input Dims": dims, "Input type": types}),
            call("cudaLaunchKernel", ts + 1, 5, index + 1),
            kernel(f"kernel_{index}", ts + 10, us, index + 1),
        ]
    return events


ATTENTION = [
    ("aten::matmul", [[8, 16, 1024, 64], [8, 16, 64, 1024]]),
    ("aten::masked_fill", [[8, 16, 1024, 1024], [1024, 1024]]),
    ("aten::softmax", [[8, 16, 1024, 1024]]),
    ("aten::matmul", [[8, 16, 1024, 1024], [8, 16, 1024, 64]]),
]
INPLACE = [*ATTENTION[:1], ("aten::masked_fill_", ATTENTION[1][1]), *ATTENTION[2:]]
UNRELATED = [("aten::conv2d", [[32, 3, 224, 224], [64, 3, 7, 7]]), ("aten::relu", [[32, 64]])]


def compared(tmp_path: Path, *traces: tuple[str, list[dict[str, Any]], dict[str, Any]]) -> dict:
    paths = [write_trace(tmp_path, events, f"{label}.json", **doc) for label, events, doc in traces]
    table = comparison(load_variants(paths, cache=False))
    return {row["variant"]: row for row in table.to_dicts()}


def test_the_same_ops_on_another_gpu_keep_their_speedup_and_say_the_gpu(tmp_path: Path) -> None:
    rows = compared(
        tmp_path,
        ("base", step(ATTENTION, 10.0), {}),
        ("other", step(ATTENTION, 5.0), {"devices": [H100]}),
    )
    other = rows["other"]
    assert (other["same_workload"], other["same_gpu"], other["gpu"]) == (
        "same", False, "NVIDIA H100 80GB HBM3",
    )  # fmt: skip
    assert other["speedup"] == pytest.approx(2.0)


def test_a_code_change_on_the_same_shapes_is_similar(tmp_path: Path) -> None:
    rows = compared(
        tmp_path, ("base", step(ATTENTION, 10.0), {}), ("inplace", step(INPLACE, 8.0), {})
    )
    # Three of four ops alike (masked_fill_ for masked_fill): one workload, code changed.
    assert rows["inplace"]["same_workload"] == "similar"
    assert rows["inplace"]["speedup"] == pytest.approx(1.25)


def test_no_speedup_between_different_workloads(tmp_path: Path) -> None:
    rows = compared(
        tmp_path, ("base", step(ATTENTION, 10.0), {}), ("conv", step(UNRELATED, 1.0), {})
    )
    conv = rows["conv"]
    assert conv["same_workload"] == "different"
    assert (conv["speedup"], conv["speedup_wall"], conv["speedup_wall_source"]) == (None,) * 3
    assert rows["base"]["speedup"] == 1.0
    text = comparison_markdown(comparison(load_variants(
        [tmp_path / "base.json", tmp_path / "conv.json"], cache=False)))  # fmt: skip
    assert "Not the baseline's workload: `conv`" in text
    assert "no speed-up is given between different workloads" in text


def test_a_trace_without_cpu_ops_cannot_be_compared_by_its_ops(tmp_path: Path) -> None:
    gpu_only = [
        annotation("ProfilerStep#1", 0, 1000),
        call("cudaLaunchKernel", 11, 5, 1),
        kernel("kernel_0", 20, 5.0, 1),
    ]
    rows = compared(tmp_path, ("base", step(ATTENTION), {}), ("bare", gpu_only, {}))
    assert rows["bare"]["same_workload"] == "unknown"
    assert rows["bare"]["speedup"] == pytest.approx(8.0)  # four 10 us kernels over one of 5


def test_a_capture_manifest_declares_one_workload() -> None:
    capture = Path(__file__).resolve().parents[1] / "sample_traces/h200_default"
    table = comparison(load_variants([capture]))
    assert set(table["same_workload"]) == {"same"} and set(table["same_gpu"]) == {True}
    assert table["speedup"].is_not_null().all()


def test_compare_on_a_folder_of_unrelated_corpus_traces_gives_no_speedup(tmp_path: Path) -> None:
    names = ["tl_h100_qwen", "kernelforge_gh200_transformer_stack", "tl_b200_eager",
             "hta_nccl_a100_2rank_rank0"]  # fmt: skip
    folder = tmp_path / "unrelated"
    folder.mkdir()
    for name in names:
        source = CORPUS_TRACES / f"{name}.json.gz"
        skip_without(source)
        (folder / source.name).symlink_to(source)
    result = CliRunner().invoke(main, ["compare", str(folder), "--format", "json", "--no-cache"])
    assert result.exit_code == 0, result.output
    rows = {row["variant"]: row for row in json.loads(result.stdout)}
    baseline = "hta_nccl_a100_2rank_rank0"  # the first, in name order
    assert rows[baseline]["speedup"] == 1.0
    for name in set(names) - {baseline}:
        assert rows[name]["same_workload"] == "different", name
        assert rows[name]["speedup"] is None and rows[name]["speedup_wall"] is None, name


def test_the_qwen_traces_are_one_workload_on_two_gpus(tmp_path: Path) -> None:
    paths = [CORPUS_TRACES / "tl_h100_qwen.json.gz", CORPUS_TRACES / "tl_mi300_qwen.json.gz"]
    for path in paths:
        skip_without(path)
    report = build_report(load_variants(paths))
    mi300 = report.comparison.row(1, named=True)
    assert (mi300["same_workload"], mi300["same_gpu"]) == ("same", False)
    assert mi300["speedup"] is not None
