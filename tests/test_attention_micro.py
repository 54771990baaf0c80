"""`attention`, diff-test style: a handful of events as a tiny Kineto trace, and the exact rows.

Times in the events are microseconds, as Kineto writes them (see tests/micro.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tests.micro import annotation, call, kernel, load, span
from traceanalyze.analyses.attention import attention
from traceanalyze.analyses.attention.dispatch import ELIGIBLE
from traceanalyze.analyses.attention.model import cudnn_preferred

Event = dict[str, Any]
FLASH = (
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, "
    "false, cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, "
    "false, true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)"
)
GEMM = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT"
SOFTMAX = "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, float, float, 10>()"
B, H, S, D = 8, 16, 1024, 64
Q = [B, H, S, D]
SCORES = [B, H, S, S]


def shaped(name: str, ts: float, dur: float, dims: list[Any], types: list[str],
           concrete: list[str], *, tid: int = 1) -> Event:  # fmt: skip
    """A cpu_op with recorded inputs (record_shapes)."""
    args = {"Input Dims": dims, "Input type": types, "Concrete Inputs": concrete}
    return span("cpu_op", name, ts, dur, tid=tid, **args)


BF16 = "c10::BFloat16"
SDPA_ARGS = (
    [Q, Q, Q, [], [], [], [], []],
    [BF16, BF16, BF16, "", "Scalar", "Scalar", "", "Scalar"],
)


def sdpa_step(step: int, t0: float, *, causal: str = "True") -> list[Event]:
    """One step: SDPA -> its flash op -> the kernel's op -> a launch of the flash kernel."""
    dims, types = SDPA_ARGS
    return [
        annotation(f"ProfilerStep#{step}", t0, 100),
        shaped("aten::scaled_dot_product_attention", t0 + 10, 60, dims, types,
               ["", "", "", "", "0.", causal, "", "False"]),
        shaped("aten::_scaled_dot_product_flash_attention", t0 + 12, 50, dims[:7],
               [BF16, BF16, BF16, "Scalar", "Scalar", "Scalar", ""],
               ["", "", "", "0.", causal, "False", ""]),
        span("cpu_op", "aten::_flash_attention_forward", t0 + 15, 40),
        call("cudaLaunchKernel", t0 + 20, 5, step + 1),
        kernel(FLASH, t0 + 30, 40, step + 1),
    ]  # fmt: skip


def test_sdpa_flash_call_shapes_flops_and_time(tmp_path: Path) -> None:
    # Two steps of one causal flash call each: one row, per iteration and per call.
    trace = load(tmp_path, sdpa_step(0, 0) + sdpa_step(1, 200))
    result = attention(trace)
    row = result.rows.row(0, named=True)
    assert result.rows.height == 1
    assert {k: row[k] for k in ("implementation", "direction", "call_site", "calls_per_iter",
                                "batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim",
                                "dtype", "causal", "mask", "kernels_per_call")} == {
        "implementation": "sdpa_flash", "direction": "forward",
        "call_site": "aten::scaled_dot_product_attention", "calls_per_iter": 1.0,
        "batch": B, "heads_q": H, "heads_kv": H, "seq_q": S, "seq_kv": S, "head_dim": D,
        "dtype": "bf16", "causal": True, "mask": "none", "kernels_per_call": 1.0,
    }  # fmt: skip
    # Causal and square: half of 4*B*H*S*S*D.
    assert row["flops_per_call"] == 4 * B * H * S * S * D // 2
    assert row["gpu_us_per_call"] == 40.0 and row["cpu_us_per_call"] == 60.0
    assert row["tflops"] == pytest.approx(row["flops_per_call"] / 40e-6 / 1e12)
    assert row["pct_of_peak"] == pytest.approx(row["tflops"] / 989.4 * 100)
    assert row["scores_bytes"] == 0 and row["kernels"] == [FLASH]
    # H200 without a cuDNN version: cuDNN and flash tie, so flash needs no why-not.
    assert row["why_not"] is None
    assert any("does not record the cuDNN version" in n for n in result.notes)


def test_why_not_names_cudnn_when_preferred(tmp_path: Path) -> None:
    trace = load(tmp_path, sdpa_step(0, 0))
    row = attention(trace, cudnn_version="9.19.0").rows.row(0, named=True)
    assert row["why_not"] == f"cudnn: {ELIGIBLE}"
    assert cudnn_preferred("9.15.0") is False and cudnn_preferred("9.16.1") is True
    assert cudnn_preferred(None) is None and cudnn_preferred("n/a") is None


def test_why_not_says_first_that_the_capture_forced_the_backend(tmp_path: Path) -> None:
    trace = load(tmp_path, sdpa_step(0, 0))
    row = attention(trace, cudnn_version="9.19.0", forced="flash").rows.row(0, named=True)
    assert row["why_not"] == (
        "the capture forced flash with sdpa_kernel (its manifest says so); without that: "
        "cudnn: eligible by every rule the trace shows"
    )
    # Forcing a backend other than the one that ran (not possible in PyTorch) changes nothing.
    other = attention(trace, cudnn_version="9.19.0", forced="math").rows.row(0, named=True)
    assert other["why_not"] == f"cudnn: {ELIGIBLE}"


def test_math_fallback_says_which_rule_refused_each_backend(tmp_path: Path) -> None:
    # A bool mask and head size 60 (bf16): flash takes no mask, memory-efficient attention and
    # cuDNN want head sizes in multiples of 8 (PyTorch falls back to math).
    q = [2, 4, 128, 60]
    dims = [q, q, q, [2, 1, 128, 128], [], [], [], []]
    types = [BF16, BF16, BF16, "bool", "Scalar", "Scalar", "", "Scalar"]
    math_dims = [*dims, []]
    events = [
        annotation("ProfilerStep#0", 0, 100),
        shaped("aten::scaled_dot_product_attention", 10, 60, dims, types,
               ["", "", "", "", "0.", "False", "", "False"]),
        shaped("aten::_scaled_dot_product_attention_math", 12, 50, math_dims, [*types, "Scalar"],
               ["", "", "", "", "0.", "False", "", "", "False"]),
        call("cudaLaunchKernel", 20, 5, 1),
        kernel(GEMM, 30, 40, 1),
    ]  # fmt: skip
    row = attention(load(tmp_path, events), cudnn_version="9.19.0").rows.row(0, named=True)
    assert row["implementation"] == "sdpa_math"
    assert row["why_not"] == (
        "cudnn: head sizes q 60 / v 60: cuDNN takes multiples of 8 up to 256 | flash: an "
        "attn_mask is given (bool mask): flash takes none, is_causal only | efficient: head "
        "sizes q 60 / v 60 not multiples of 8 (bf16 inputs)"
    )


def composed_step(t0: float, *, in_place: bool) -> list[Event]:
    """The seed's naive attention: q @ k^T, * scale, masked_fill, softmax, @ v."""
    qt = [B, H, D, S]
    fill = "aten::masked_fill_" if in_place else "aten::masked_fill"
    events = [
        annotation("ProfilerStep#0", t0, 1000),
        annotation("attn_fwd", t0 + 1, 990),
        span("cpu_op", "aten::transpose", t0 + 2, 1),
        shaped("aten::matmul", t0 + 5, 30, [Q, qt], [BF16, BF16], ["", ""]),
        shaped("aten::bmm", t0 + 6, 20, [[B * H, S, D], [B * H, D, S]], [BF16, BF16], ["", ""]),
        call("cudaLaunchKernel", t0 + 8, 2, 1),
        shaped("aten::mul", t0 + 40, 10, [SCORES, []], [BF16, "double"], ["", ""]),
        call("cudaLaunchKernel", t0 + 42, 2, 2),
        shaped(fill, t0 + 60, 40, [SCORES, [S, S], []], [BF16, "bool", "Scalar"], ["", "", "-inf"]),
    ]  # fmt: skip
    if not in_place:  # the out-of-place fill clones the scores, then fills in place
        events += [
            shaped("aten::clone", t0 + 61, 20, [SCORES, []], [BF16, "Scalar"], ["", "0"]),
            shaped("aten::copy_", t0 + 62, 10, [SCORES, SCORES, []], [BF16, BF16, "Scalar"],
                   ["", "", "False"]),
            call("cudaMemcpyAsync", t0 + 63, 2, 3),
            shaped("aten::masked_fill_", t0 + 85, 10, [SCORES, [S, S], []],
                   [BF16, "bool", "Scalar"], ["", "", "-inf"]),
        ]  # fmt: skip
    events += [
        call("cudaLaunchKernel", t0 + 88, 2, 4),
        shaped("aten::softmax", t0 + 110, 20, [SCORES, [], []], [BF16, "Scalar", ""],
               ["", "-1", ""]),
        shaped("aten::_softmax", t0 + 111, 15, [SCORES, [], []], [BF16, "Scalar", "Scalar"],
               ["", "-1", "False"]),
        call("cudaLaunchKernel", t0 + 112, 2, 5),
        shaped("aten::matmul", t0 + 140, 30, [SCORES, Q], [BF16, BF16], ["", ""]),
        shaped("aten::bmm", t0 + 141, 20, [[B * H, S, S], [B * H, S, D]], [BF16, BF16], ["", ""]),
        call("cudaLaunchKernel", t0 + 142, 2, 6),
        kernel(GEMM, t0 + 300, 100, 1),
        kernel("vectorized_elementwise_kernel<8, MulFunctor>", t0 + 400, 50, 2),
        kernel("elementwise_kernel<128, 4, masked_fill_kernel>", t0 + 500, 50, 4),
        kernel(SOFTMAX, t0 + 600, 60, 5),
        kernel(GEMM, t0 + 700, 100, 6),
    ]  # fmt: skip
    if not in_place:
        events.append(kernel("Memcpy DtoD (Device -> Device)", t0 + 460, 30, 3, cat="gpu_memcpy"))
    return events


@pytest.mark.parametrize("in_place", [False, True])
def test_composed_attention_in_the_op_tree(tmp_path: Path, in_place: bool) -> None:
    result = attention(load(tmp_path, composed_step(0, in_place=in_place)))
    expected = pl.DataFrame(
        {
            "implementation": ["composed"], "direction": ["forward"],
            "call_site": ["aten::matmul -> aten::softmax -> aten::matmul"],
            "batch": [B], "heads_q": [H], "seq_q": [S], "seq_kv": [S], "head_dim": [D],
            "dtype": ["bf16"], "mask": ["bool"], "kernels_per_call": [5.0],
            # 360 µs of kernels, 30 µs more with the copy of the out-of-place fill.
            "gpu_us_per_call": [360.0 if in_place else 390.0],
            "cpu_us_per_call": [165.0],
            # Every score is computed: 4*B*H*S*S*D.
            "flops_per_call": [4 * B * H * S * S * D],
            # QK^T, the scale, the fill, the softmax: each writes B*H*S*S bf16 scores; the
            # out-of-place fill's copy once more.
            "scores_bytes": [B * H * S * S * 2 * (4 if in_place else 5)],
            "mask_copies": [not in_place],
        }
    )  # fmt: skip
    assert_frame_equal(result.rows.select(expected.columns), expected)
    # No fused call in the trace: the estimate is the bf16 peak's (a lower bound).
    row = result.rows.row(0, named=True)
    assert row["fused_estimate_us"] == pytest.approx(row["flops_per_call"] / 989.4e6)
    assert "lower bound" in row["fused_estimate_source"]


def test_a_classifier_softmax_is_not_attention(tmp_path: Path) -> None:
    # A 2-D softmax after a linear layer: logits, not scores.
    events = [
        annotation("ProfilerStep#0", 0, 100),
        shaped("aten::linear", 5, 10, [[32, 512], [10, 512], [10]], ["float"] * 3, ["", "", ""]),
        shaped("aten::softmax", 20, 10, [[32, 10], [], []], ["float", "Scalar", ""],
               ["", "-1", ""]),
        call("cudaLaunchKernel", 22, 2, 1),
        kernel(SOFTMAX, 30, 5, 1),
    ]  # fmt: skip
    assert attention(load(tmp_path, events)).empty


def test_graph_replay_kernels_make_calls_with_their_helpers(tmp_path: Path) -> None:
    # A replayed graph: no op launches the kernels; each paged-attention kernel is a call and
    # its reduce kernel (a helper after it) belongs to it.
    main = "paged_attention_ll4mi_QKV_mfma16_kernel<__hip_bfloat16, 128>"
    reduce = "paged_attention_ll4mi_reduce_kernel<__hip_bfloat16, 128>"
    events = [
        annotation("ProfilerStep#0", 0, 1000),
        call("cudaGraphLaunch", 5, 5, 1),
        kernel(main, 100, 50, 1),
        kernel(reduce, 160, 10, 1),
        kernel(main, 200, 50, 1),
        kernel(reduce, 260, 10, 1),
    ]
    result = attention(load(tmp_path, events))
    row = result.rows.row(0, named=True)
    assert (row["implementation"], row["call_site"], row["calls_per_iter"]) == (
        "paged", "(CUDA graph replay)", 2.0,
    )  # fmt: skip
    assert row["kernels_per_call"] == 2.0 and row["gpu_us_per_call"] == 60.0
    assert row["dtype"] == "bf16" and row["flops_per_call"] is None
    assert "graph replay" in row["flops_note"]


def test_cudnn_plan_built_every_call(tmp_path: Path) -> None:
    # Every call's CPU self time is a plan build's (5 ms): after the first step too.
    events = []
    for step in range(3):
        t0 = step * 10_000
        events += [
            annotation(f"ProfilerStep#{step}", t0, 9_000),
            span("cpu_op", "aten::_cudnn_attention_forward", t0 + 10, 5_010),
            call("cuLaunchKernel", t0 + 5_000, 10, step + 1),
            kernel("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7",
                   t0 + 5_100, 40, step + 1),
        ]  # fmt: skip
    result = attention(load(tmp_path, events))
    host = result.host.row(0, named=True)
    assert (host["kind"], host["calls_per_iter"], host["plan_builds_per_iter"]) == (
        "cudnn_plan", 1.0, 1.0,
    )  # fmt: skip
    assert host["us_per_call"] == pytest.approx(5_000.0)
    assert "every call" in host["note"]
    assert any("plan is built every call" in f for f in result.findings)


@pytest.mark.parametrize(
    ("op_name", "kernel_name", "implementation"),
    [
        ("aclnnFlashAttentionScore", "FlashAttentionScore_1234_mix_aic", "ascend"),
        ("flash_attn::_flash_attn_forward", "void flash::flash_fwd_kernel<Flash_fwd_kernel_"
         "traits<128, 128, 64, 4, false, false, cutlass::half_t>>()", "flash_attn"),
        ("xformers::efficient_attention_forward_cutlass", "fmha_cutlassF_f16_aligned_64x64_rf_sm80",
         "xformers"),
        ("aiter::mha_fwd", "_ZN5aiter24fmha_fwd_hd128_bf16_causal", "ck_aiter"),
        ("FusedAttnFunc", "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16",
         "transformer_engine"),
    ],
)  # fmt: skip
def test_library_ops_name_their_implementation(
    tmp_path: Path, op_name: str, kernel_name: str, implementation: str
) -> None:
    events = [
        annotation("ProfilerStep#0", 0, 100),
        span("cpu_op", op_name, 10, 50),
        call("cudaLaunchKernel", 20, 5, 1),
        kernel(kernel_name, 30, 20, 1),
    ]
    (row,) = attention(load(tmp_path, events)).rows.to_dicts()
    assert (row["implementation"], row["call_site"], row["kernels_per_call"]) == (
        implementation, op_name, 1.0,
    )  # fmt: skip


FP8 = "c10::Float8_e4m3fn"
# The op and kernel of fp8 flex on an H200 (sample_traces/h200_attention_cases/flex_fp8):
# Inductor fused K's transpose into the template and named the op after both.
FLEX_FP8 = "triton_tem_fused_clone_flex_attention_transpose_1"


def test_flex_op_named_after_fused_ops_keeps_its_shapes(tmp_path: Path) -> None:
    """(q, v, k transposed, logsumexp, max, kv_num_blocks, kv_indices, ...) as recorded."""
    blocks = S // 128
    dims = [Q, Q, [B, H, D, S], [B, H, S], [B, H, S], [1, 1, blocks], [1, 1, blocks, blocks],
            [1, 1, blocks], [1, 1, blocks, blocks], Q, [], [], []]  # fmt: skip
    types = [FP8, FP8, FP8, "float", "float", "int", "int", "int", "int", FP8, "Scalar",
             "Scalar", "Scalar"]  # fmt: skip
    events = [
        annotation("ProfilerStep#0", 0, 100),
        annotation("attn_fwd", 5, 80),
        shaped(FLEX_FP8, 10, 40, dims, types, [""] * 10 + ["16", "8", "16"]),
        call("cuLaunchKernel", 20, 5, 1, cat="cuda_driver"),
        kernel(FLEX_FP8, 30, 60, 1),
    ]
    row = attention(load(tmp_path, events)).rows.row(0, named=True)
    assert {k: row[k] for k in ("implementation", "direction", "source", "batch", "heads_q",
                                "heads_kv", "seq_q", "seq_kv", "head_dim", "dtype", "mask",
                                "kernels_per_call", "peak_dtype")} == {
        "implementation": "flex", "direction": "forward", "source": "op", "batch": B,
        "heads_q": H, "heads_kv": H, "seq_q": S, "seq_kv": S, "head_dim": D, "dtype": "fp8",
        "mask": "block", "kernels_per_call": 1.0, "peak_dtype": "fp8",
    }  # fmt: skip
    # Every block counted: the block mask's contents are not in the trace.
    assert row["flops_per_call"] == 4 * B * H * S * S * D
    assert row["flops_note"] and "upper bound" in row["flops_note"]


def test_scores_written_in_the_promoted_dtype(tmp_path: Path) -> None:
    """GPT-2's eager attention in transformers 5 (as recorded on an H200): bf16 scores plus
    an fp32 additive mask write fp32 scores (PyTorch's type promotion), which the softmax
    reads and writes in fp32; in place, the first input's dtype stays."""
    mask = [B, 1, S, S]
    events = [
        annotation("ProfilerStep#0", 0, 1000),
        shaped("aten::matmul", 5, 30, [Q, [B, H, D, S]], [BF16, BF16], ["", ""]),
        shaped("aten::bmm", 6, 20, [[B * H, S, D], [B * H, D, S]], [BF16, BF16], ["", ""]),
        call("cudaLaunchKernel", 8, 2, 1),
        shaped("aten::mul", 40, 10, [SCORES, []], [BF16, "double"], ["", ""]),
        call("cudaLaunchKernel", 42, 2, 2),
        shaped("aten::add", 60, 10, [SCORES, mask, []], [BF16, "float", "Scalar"], ["", "", "1"]),
        call("cudaLaunchKernel", 62, 2, 3),
        shaped("aten::add_", 75, 10, [SCORES, mask, []], [BF16, "float", "Scalar"],
               ["", "", "1"]),
        call("cudaLaunchKernel", 77, 2, 4),
        shaped("aten::softmax", 110, 20, [SCORES, [], []], ["float", "Scalar", ""],
               ["", "-1", ""]),
        shaped("aten::_softmax", 111, 15, [SCORES, [], []], ["float", "Scalar", "Scalar"],
               ["", "-1", "False"]),
        call("cudaLaunchKernel", 112, 2, 5),
        shaped("aten::matmul", 140, 30, [SCORES, Q], [BF16, BF16], ["", ""]),
        shaped("aten::bmm", 141, 20, [[B * H, S, S], [B * H, S, D]], [BF16, BF16], ["", ""]),
        call("cudaLaunchKernel", 142, 2, 6),
        kernel(GEMM, 300, 100, 1),
        kernel("vectorized_elementwise_kernel<8, MulFunctor>", 400, 50, 2),
        kernel("vectorized_elementwise_kernel<4, CUDAFunctor_add>", 450, 50, 3),
        kernel("vectorized_elementwise_kernel<4, CUDAFunctor_add>", 500, 50, 4),
        kernel(SOFTMAX, 600, 60, 5),
        kernel(GEMM, 700, 100, 6),
    ]  # fmt: skip
    row = attention(load(tmp_path, events)).rows.row(0, named=True)
    assert (row["implementation"], row["mask"]) == ("composed", "float")
    # QK^T 2 + scale 2 + add (promoted to fp32) 4 + add_ (in place, bf16) 2 + softmax 4.
    assert row["scores_bytes"] == B * H * S * S * (2 + 2 + 4 + 2 + 4)
