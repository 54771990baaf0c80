"""Report wording from what the traces hold: the DNN library by platform, titles by content."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.micro import annotation, call, kernel, op, write_trace
from traceanalyze.analyses.report.contents import build_report
from traceanalyze.load.variants import load_variants
from traceanalyze.render.report.markdown import _gpu_labels, render_report

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


def model_step(attention_us: int, gemm_us: int) -> list[dict[str, object]]:
    """One inference step: an SDPA op's flash kernel and a linear layer's GEMM."""
    return [
        annotation("ProfilerStep#1", 100, 200),
        op("aten::scaled_dot_product_attention", 110, 20),
        op("aten::_scaled_dot_product_flash_attention", 112, 15),
        call("cudaLaunchKernel", 114, 4, 1),
        kernel("pytorch_flash::flash_fwd_kernel", 150, attention_us, 1),
        op("aten::linear", 140, 10),
        call("cudaLaunchKernel", 142, 4, 2),
        kernel("nvjet_tst_128x64_64x8_1x1_v_bz_TNN", 150 + attention_us, gemm_us, 2),
    ]


@pytest.mark.parametrize(
    ("attention_us", "title"),
    [
        # Attention is most of the GPU work: attention variants.
        (30, "Attention variants compared: profiling report"),
        # A model whose attention is a part (BERT, ViT): named by its workload.
        (10, "Inference traces compared: profiling report"),
    ],
)
def test_several_traces_are_attention_variants_only_when_attention_is_most_of_them(
    tmp_path: Path, attention_us: int, title: str
) -> None:
    paths = [write_trace(tmp_path, model_step(attention_us, 20), f"{name}.json") for name in "ab"]
    assert build_report(load_variants(paths, cache=False)).title == title


def test_two_bert_traces_are_inference_traces(public: Path) -> None:
    # Attention is 12% (H100) and 29% (MI300) of their GPU activity.
    paths = [public / "tl_h100_bert_small.json.gz", public / "tl_mi300_bert_small.json.gz"]
    report = build_report(load_variants(paths))
    assert report.title == "Inference traces compared: profiling report"
    assert report.dnn_library == "cuDNN/MIOpen"
    assert report.variant_gpus == {
        "tl_h100_bert_small": "NVIDIA H100 80GB HBM3",
        "tl_mi300_bert_small": "AMD Instinct MI300X VF",
    }
    text = render_report(report, command="traceanalyze report", version="test")
    assert (
        "These traces ran on different GPUs (`tl_h100_bert_small`: NVIDIA H100 80GB HBM3; "
        "`tl_mi300_bert_small`: AMD Instinct MI300X VF): a speed-up compares the devices as "
        "well as the code." in text
    )
    assert (
        _gpu_labels(report)["tl_h100_bert_small"] == "tl_h100_bert_small\n(NVIDIA H100 80GB HBM3)"
    )


def test_one_gpu_model_is_not_repeated_in_labels(tmp_path: Path) -> None:
    paths = [write_trace(tmp_path, model_step(30, 20), f"{name}.json") for name in "ab"]
    report = build_report(load_variants(paths, cache=False))
    assert len(set(report.variant_gpus.values())) == 1
    assert _gpu_labels(report) == {}
    assert "different GPUs" not in render_report(report, command="c", version="v")
