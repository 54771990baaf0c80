"""Report wording from what the traces hold: the DNN library by platform, titles by content."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.micro import annotation, call, kernel, op, write_trace
from traceanalyze.analyses.report import build_report
from traceanalyze.load.variants import load_variants
from traceanalyze.render.report import render_report

CONV = "miopenSp3AsmConv_v21_1_3_gfx9_fp32_stride1"


def conv_step(library_op: str) -> list[dict[str, object]]:
    """One step: a convolution op that spends 26 us of CPU self time around its launch."""
    return [
        annotation("ProfilerStep#1", 100, 100),
        op(library_op, 110, 30),
        call("hipLaunchKernel", 120, 4, 1),
        kernel(CONV, 150, 10, 1),
    ]


def rendered(paths: list[Path]) -> str:
    report = build_report(load_variants(paths, cache=False))
    return render_report(report, command="traceanalyze report", version="test")


@pytest.mark.parametrize(
    ("hip", "library"),
    [({"hip_runtime_version": 60342134}, "MIOpen"), ({}, "cuDNN")],
)
def test_the_dnn_library_is_named_by_platform(
    tmp_path: Path, hip: dict[str, int], library: str
) -> None:
    path = write_trace(tmp_path, conv_step("aten::cudnn_convolution"), **hip)
    text = rendered([path])

    other = {"MIOpen": "cuDNN", "cuDNN": "MIOpen"}[library]
    assert f"**CPU time in ops that call {library}**" in text
    assert f"{library} CPU µs/iter" in text
    assert f"The ops that call {library} spend 26.0 µs" in text
    assert f"{library} ops spend 26.00 µs" in text
    assert other not in text


def test_a_mixed_set_names_both_libraries(tmp_path: Path) -> None:
    amd = write_trace(tmp_path, conv_step("aten::miopen_convolution"), "amd.json")
    nvidia = write_trace(tmp_path, conv_step("aten::cudnn_convolution"), "nvidia.json")
    text = rendered([amd, nvidia])

    assert "cuDNN/MIOpen CPU µs/iter" in text
    assert "The ops that call MIOpen spend" in text
    assert "The ops that call cuDNN spend" in text
