"""GEMM shape findings (issue 38): a leading dimension off its data type's multiple, an
older-architecture or narrow-load kernel, fp32 on the CUDA cores; each with its shape and fix,
in `gemm_table`, the roofline's why and the report's first section."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceanalyze
from tests.conftest import CORPUS_TRACES, PUBLIC_TRACES, skip_without
from tests.micro import H200, annotation, call, kernel, span, write_trace
from traceanalyze.analyses.report.contents import build_report
from traceanalyze.analyses.roofline.gemm import gemm_table
from traceanalyze.analyses.roofline.gemm_rules import kernel_align_elements, kernel_sm
from traceanalyze.analyses.roofline.model import roofline
from traceanalyze.load.variants import load_variants
from traceanalyze.render.report.findings import sentence

BF16 = "c10::BFloat16"
# GPT-2's LM head on an H200 (issue 38): vocabulary 50257, not a multiple of 8.
LM_HEAD_KERNEL = (
    "void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1>("
    "cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1::Params)"
)
HOPPER_KERNEL = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"
FOOTPRINT = {"registers per thread": 232, "shared memory": 49152}
A100 = {**H200, "name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8, "numSms": 108,
        "sharedMemPerMultiprocessor": 167936, "sharedMemPerBlockOptin": 166912}  # fmt: skip


def gemm(
    ts: float, correlation: int, name: str, dims: list[list[int]], us: float,
    op_name: str = "aten::mm", types: list[str] | None = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """``op_name`` on ``dims`` launching ``name`` for ``us``."""
    types = types or [BF16] * len(dims)
    return [
        span("cpu_op", op_name, ts, 20, **{"Input Dims": dims, "Input type": types}),
        call("cudaLaunchKernel", ts + 1, 5, correlation),
        kernel(name, ts + 10, us, correlation, block=[128, 1, 1], grid=[1572, 1, 1],
               **FOOTPRINT),
    ]  # fmt: skip


def lm_head_step() -> list[dict[str, Any]]:
    """One step of 1,000 us: the LM head (N = 50257) in 400 us, an aligned GEMM in 100 us."""
    return [
        annotation("ProfilerStep#1", 0, 1000),
        *gemm(10, 1, LM_HEAD_KERNEL, [[2048, 768], [768, 50257]], 400),
        *gemm(500, 2, HOPPER_KERNEL, [[2048, 768], [768, 3072]], 100),
    ]


@pytest.mark.parametrize(
    ("name", "sm", "align"),
    [
        (LM_HEAD_KERNEL, 75, 1),
        (HOPPER_KERNEL, 90, None),
        ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_"
         "aligna4_alignc4_execute_kernel__5x_cublas", 80, 4),
        ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn", 80, None),
        ("volta_sgemm_128x64_nn", 70, None),
        ("cutlass3x_sm100_tensorop_gemm_bf16_bf16_f32_bf16_bf16_256x128x64_align8", 100, 8),
        ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTT", None, None),
        ("Cijk_Ailk_Bljk_BBS_BH_MT128x128x64_MI16x16x16", None, None),
    ],
)  # fmt: skip
def test_kernel_architecture_and_alignment_from_the_name(
    name: str, sm: int | None, align: int | None
) -> None:
    row = pl.select(pl.lit(name).alias("name")).select(kernel_sm(), kernel_align_elements())
    assert row.row(0) == (sm, align)


def test_the_lm_head_finding_says_the_shape_the_kernel_and_the_fix(tmp_path: Path) -> None:
    trace = traceanalyze.load(write_trace(tmp_path, lm_head_step()), cache=False)
    table = gemm_table(trace)
    head, aligned = table.row(0, named=True), table.row(1, named=True)
    assert (head["op_name"], head["shapes"], head["dtype"]) == (
        "aten::mm", "[[2048,768],[768,50257]]", "bf16",
    )  # fmt: skip
    assert (head["gemm_m"], head["gemm_n"], head["gemm_k"]) == (2048, 50257, 768)
    assert (head["kernel_sm"], head["gpu_sm"], head["kernel_align_elements"]) == (75, 90, 1)
    assert head["misaligned_dims"] == [{"dim": "N", "size": 50257, "multiple": 8, "padded": 50304}]
    assert head["causes"] == ["alignment", "architecture"]
    assert head["us_per_iter"] == pytest.approx(400.0)
    assert (aligned["misaligned_dims"], aligned["causes"]) == ([], [])

    # The roofline's why: the shape and the kernel before the occupancy.
    verdict = roofline(trace).ops.filter(pl.col("shapes") == head["shapes"])["verdict"][0]
    alignment = verdict.index("alignment: N = 50257 is not a multiple of 8 (pad it to 50304)")
    architecture = verdict.index("architecture: an sm75 kernel on this sm90 GPU")
    assert alignment < architecture < verdict.index("low occupancy")
    assert "its kernel loads 1-element operands (align1)" in verdict

    report = build_report(load_variants([write_trace(tmp_path, lm_head_step())], cache=False))
    found = {f.rule: f for f in report.findings}
    text = sentence(found["gemm_shapes"])
    assert text == (
        "GEMMs slowed by their shape or kernel: `aten::mm` [[2048,768],[768,50257]] bf16, "
        "400.00 µs per iteration (80.00% of the GPU activity) in "
        "`cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1`: N = 50,257 is not a "
        "multiple of 8 for bf16, so it loads 1-element operands (`align1`), an sm75 kernel on "
        "this sm90 GPU (none of its own tensor-core instructions); pad N from 50,257 to 50,304."
    )
    # A GEMM's occupancy is no finding of its own, by design or by accident.
    assert not {"occupancy_design", "occupancy_accident"} & set(found)


def test_small_dimensions_and_aligned_shapes_get_no_finding(tmp_path: Path) -> None:
    # N = 5 (a handful of tokens) is under a tile: padding it would multiply the work. K = 768
    # and N = 3072 are multiples of 8. Hopper kernels: no architecture finding either.
    events = [
        annotation("ProfilerStep#1", 0, 1000),
        *gemm(10, 1, HOPPER_KERNEL, [[2048, 768], [768, 5]], 400),
        *gemm(500, 2, HOPPER_KERNEL, [[2048, 768], [768, 3072]], 400),
    ]
    trace = traceanalyze.load(write_trace(tmp_path, events), cache=False)
    assert gemm_table(trace)["causes"].to_list() == [[], []]
    report = build_report(load_variants([write_trace(tmp_path, events)], cache=False))
    assert "gemm_shapes" not in {f.rule for f in report.findings}


def test_a_tf32_gemm_pads_to_its_multiple_where_64_costs_too_much(tmp_path: Path) -> None:
    # As new_htadiff_control_a100_rank3: fp32 inputs (TF32) with N = 30 and K = 647 in an
    # align1 kernel on an A100. Multiples of 64 would add 113% and 9%: 32 and 648 instead.
    tf32 = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x4_nn_align1>(Params)"
    events = [
        annotation("ProfilerStep#1", 0, 1000),
        *gemm(10, 1, tf32, [[1024, 96, 647], [1024, 647, 30]], 400, "aten::bmm",
              ["float", "float"]),
    ]  # fmt: skip
    trace = traceanalyze.load(write_trace(tmp_path, events, devices=[A100]), cache=False)
    row = gemm_table(trace).row(0, named=True)
    assert row["misaligned_dims"] == [
        {"dim": "N", "size": 30, "multiple": 4, "padded": 32},
        {"dim": "K", "size": 647, "multiple": 4, "padded": 648},
    ]
    # An sm80 kernel on an sm80 GPU: alignment only.
    assert (row["gpu_sm"], row["dims_aligned"], row["causes"]) == (80, False, ["alignment"])


def test_narrow_loads_on_an_aligned_shape_blame_a_stride(tmp_path: Path) -> None:
    events = [
        annotation("ProfilerStep#1", 0, 1000),
        *gemm(10, 1, LM_HEAD_KERNEL, [[2048, 768], [768, 50304]], 400),
    ]
    report = build_report(load_variants([write_trace(tmp_path, events)], cache=False))
    text = sentence({f.rule: f for f in report.findings}["gemm_shapes"])
    assert "pad" not in text
    assert "its N and K are aligned, so an operand's stride or offset is not" in text


def test_fp8_wants_multiples_of_16(tmp_path: Path) -> None:
    fp8 = "c10::Float8_e4m3fn"
    events = [
        annotation("ProfilerStep#1", 0, 1000),
        *gemm(10, 1, HOPPER_KERNEL, [[2048, 4104], [4104, 4096]], 400, types=[fp8, fp8]),
    ]
    trace = traceanalyze.load(write_trace(tmp_path, events), cache=False)
    # 4104 is a multiple of 8 but not of 16: the fp8 K is off, padded to 4160.
    assert gemm_table(trace)["misaligned_dims"].to_list() == [
        [{"dim": "K", "size": 4104, "multiple": 16, "padded": 4160}]
    ]


def test_a_gemm_under_the_noise_floor_is_not_a_finding(tmp_path: Path) -> None:
    # The LM head kernel for 5 us of a 1,000 us step (0.5%): below 1% of the step.
    events = [
        annotation("ProfilerStep#1", 0, 1000),
        *gemm(10, 1, LM_HEAD_KERNEL, [[2048, 768], [768, 50257]], 5),
        *gemm(500, 2, HOPPER_KERNEL, [[2048, 768], [768, 3072]], 400),
    ]
    report = build_report(load_variants([write_trace(tmp_path, events)], cache=False))
    assert "gemm_shapes" not in {f.rule for f in report.findings}


def test_owlv2_on_an_h100_pads_its_5185_tokens() -> None:
    path = CORPUS_TRACES / "tl_h100_owlv2.json.gz"
    skip_without(path)
    table = gemm_table(traceanalyze.load(path))
    top = table.head(2)
    # 16 heads x 5185 tokens x 64: QK^T's N and PV's K are 5185, run by sm75 align1 kernels.
    assert top["shapes"].to_list() == [
        "[[16,5185,64],[16,64,5185]]",
        "[[16,5185,5185],[16,5185,64]]",
    ]
    assert top["misaligned_dims"].to_list() == [
        [{"dim": "N", "size": 5185, "multiple": 8, "padded": 5248}],
        [{"dim": "K", "size": 5185, "multiple": 8, "padded": 5248}],
    ]
    assert top["kernel_sm"].to_list() == [75, 75] and top["gpu_sm"].to_list() == [90, 90]
    assert top["causes"].to_list() == [["alignment", "architecture"]] * 2
    assert top["share_of_gpu_activity_pct"].sum() == pytest.approx(40.46, abs=0.01)
    # The roofline's why names the shape and the kernel before the occupancy.
    ops = roofline(traceanalyze.load(path)).ops
    verdict = ops.filter(pl.col("shapes") == "[[16,5185,64],[16,64,5185]]")["verdict"][0]
    assert verdict.index("alignment: N = 5185") < verdict.index("architecture: an sm75 kernel")
    assert verdict.index("architecture") < verdict.index("low occupancy")


def test_sdpa_math_is_told_its_precision_not_its_occupancy() -> None:
    path = Path(__file__).resolve().parents[1] / "sample_traces/h200_default/sdpa_math.json.gz"
    report = build_report(load_variants([path]))
    found = {f.rule: f for f in report.findings}
    # The FFMA sgemm is the longest kernel; its 12.5% occupancy is no "design".
    assert not {"occupancy_design", "occupancy_accident"} & set(found)
    assert "gemm_shapes" not in found  # its shapes are aligned; precision is fp32_gemm's
    text = sentence(found["fp32_gemm"])
    assert "the longest `aten::bmm` [[128,1024,64],[128,64,1024]]" in text
    assert "a fused SDPA backend (flash, memory-efficient or cuDNN)" in text


AMPERE_KERNEL = (
    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x64_64x6_tn_align8>("
    "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x64_64x6_tn_align8::Params)"
)


def test_an_older_kernel_is_a_cause_only_on_a_large_or_misaligned_gemm(tmp_path: Path) -> None:
    # An sm80 kernel on an aligned [141, 512] x [512, 512] (74 MFLOP: cuBLAS's pick for a
    # small problem, as on tl_h100_bert_small) is no cause; on an aligned 4096^3 GEMM (137
    # GFLOP) it is.
    events = [
        annotation("ProfilerStep#1", 0, 1000),
        *gemm(10, 1, AMPERE_KERNEL, [[141, 512], [512, 512]], 300),
        *gemm(500, 2, AMPERE_KERNEL, [[4096, 4096], [4096, 4096]], 400),
    ]
    trace = traceanalyze.load(write_trace(tmp_path, events), cache=False)
    causes = dict(gemm_table(trace).select("shapes", "causes").rows())
    assert causes == {
        "[[141,512],[512,512]]": [],
        "[[4096,4096],[4096,4096]]": ["architecture"],
    }


def test_bert_small_on_an_h100_pads_its_vocabulary_only() -> None:
    path = PUBLIC_TRACES / "tl_h100_bert_small.json.gz"
    skip_without(path)
    table = gemm_table(traceanalyze.load(path))
    found = table.filter(pl.col("causes").list.len() > 0)
    # The MLM head: a vocabulary of 30522 (not a multiple of 8) in an sm80 align2 kernel; the
    # attention projections' sm80 kernels on [141, 512] x [512, 512] are no cause.
    assert found.select("shapes", "kernel_sm", "kernel_align_elements", "causes").rows() == [
        ("[[30522],[141,512],[512,30522]]", 80, 2, ["alignment", "architecture"])
    ]
    assert found["misaligned_dims"][0].to_list() == [
        {"dim": "N", "size": 30522, "multiple": 8, "padded": 30528}
    ]
    small = table.filter(pl.col("shapes") == "[[512],[141,512],[512,512]]")
    assert small["kernel_sm"].to_list() == [80] and small["causes"].to_list() == [[]]
