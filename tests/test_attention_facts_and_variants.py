"""The skeptic's findings on `attention` (skeptic39b): nested SDPA is flagged nested; a capture
manifest's per-sequence lengths and flex block sparsity give exact FLOPs where they fit the
call; FlashAttention 3's kernel names give causal and the head sizes; calls of one site that
ran different attention kernels (vLLM's unified 2d vs 3d) are rows of their own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import traceanalyze
from tests.micro import annotation, call, kernel, load, span
from tests.test_attention_kv_and_names import _corpus
from traceanalyze.analyses.attention import attention
from traceanalyze.analyses.attention.capture_facts import CaptureFacts
from traceanalyze.render.attention import attention_markdown

Event = dict[str, Any]
BF16 = "c10::BFloat16"
LENGTHS = (1024, 960, 896, 832, 768, 704, 640, 576)  # sample_traces' sdpa_nested
H, D = 16, 64
FLASH = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4> >()"


def _nested_call(tokens: int) -> list[Event]:
    """Nested-tensor SDPA as recorded on an H200: no SDPA op, the flash op given packed
    [tokens, heads, dim] q, k, v with cumulative lengths [batch + 1] and the longest lengths."""
    dims = [[tokens, H, D]] * 3 + [[len(LENGTHS) + 1]] * 2 + [[]] * 6
    types = [BF16] * 3 + ["int"] * 2 + ["Scalar"] * 6
    concrete = [""] * 5 + ["1024", "1024", "0.", "False", "False", ""]
    args = {"Input Dims": dims, "Input type": types, "Concrete Inputs": concrete}
    return [
        annotation("ProfilerStep#0", 0, 1000),
        span("cpu_op", "aten::_flash_attention_forward", 10, 50, **args),
        call("cudaLaunchKernel", 20, 5, 1),
        kernel(FLASH, 30, 100, 1),
    ]


def _sum_squares(lengths: tuple[int, ...]) -> int:
    return sum(n * n for n in lengths)


def test_nested_sdpa_is_nested_and_exact_with_the_manifest_lengths(tmp_path: Path) -> None:
    trace = load(tmp_path, _nested_call(sum(LENGTHS)))
    bound = attention(trace).rows.row(0, named=True)
    assert bound["nested"] is True
    assert bound["flops_per_call"] == 4 * len(LENGTHS) * H * 1024 * 1024 * D
    assert "upper bound" in bound["flops_note"]
    facts = CaptureFacts.from_manifest({"lengths": list(LENGTHS), "batch": 8})
    exact = attention(trace, facts=facts).rows.row(0, named=True)
    assert exact["flops_per_call"] == 4 * H * D * _sum_squares(LENGTHS) == 21_676_163_072
    assert "capture manifest's per-sequence lengths" in exact["flops_note"]
    assert exact["tflops"] == pytest.approx(21_676_163_072 / 100e-6 / 1e12)


@pytest.mark.parametrize(
    "lengths",
    [(1024, 960, 896, 832, 768, 704, 640, 575), (1024, 960, 896), (1000, 960, 896, 832, 768)],
    ids=["other_total", "other_count", "other_longest"],
)
def test_manifest_lengths_that_do_not_fit_are_not_used(
    tmp_path: Path, lengths: tuple[int, ...]
) -> None:
    trace = load(tmp_path, _nested_call(sum(LENGTHS)))
    facts = CaptureFacts.from_manifest({"lengths": list(lengths)})
    row = attention(trace, facts=facts).rows.row(0, named=True)
    assert row["flops_per_call"] == 4 * len(LENGTHS) * H * 1024 * 1024 * D
    assert "upper bound" in row["flops_note"]


def test_a_library_varlen_call_is_not_nested(tmp_path: Path) -> None:
    # flash-attn's own varlen function: packed inputs, but no nested tensor involved.
    events = [
        annotation("ProfilerStep#0", 0, 1000),
        span("cpu_op", "FlashAttnVarlenFunc", 10, 50),
        call("cudaLaunchKernel", 20, 5, 1),
        kernel("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64> >()", 30, 100, 1),
    ]
    row = attention(load(tmp_path, events)).rows.row(0, named=True)
    assert (row["implementation"], row["nested"]) == ("flash_attn", False)


B, S = 8, 1024
FLEX = "triton_tem_fused_flex_attention_0"


def _flex_call() -> list[Event]:
    """flex's Inductor op (q, k, v, logsumexp, max, kv_num_blocks, kv_indices, ...)."""
    q, blocks = [B, H, S, D], S // 128
    dims = [q, q, q, [B, H, S], [B, H, S], [1, 1, blocks], [1, 1, blocks, blocks], [], []]
    types = [BF16] * 3 + ["float"] * 2 + ["int"] * 2 + ["Scalar"] * 2
    args = {"Input Dims": dims, "Input type": types, "Concrete Inputs": [""] * 9}
    return [
        annotation("ProfilerStep#0", 0, 1000),
        span("cpu_op", FLEX, 10, 40, **args),
        call("cuLaunchKernel", 20, 5, 1, cat="cuda_driver"),
        kernel(FLEX, 30, 60, 1),
    ]


@pytest.mark.parametrize(("head_dim", "fits"), [(D, True), (128, False)], ids=["fits", "other"])
def test_flex_flops_from_the_manifest_block_sparsity(
    tmp_path: Path, head_dim: int, fits: bool
) -> None:
    facts = CaptureFacts.from_manifest(
        {"batch": B, "heads_q": H, "seq_q": S, "seq_kv": S, "head_dim": head_dim,
         "block_sparsity_pct": 67.1875}
    )  # fmt: skip
    row = attention(load(tmp_path, _flex_call()), facts=facts).rows.row(0, named=True)
    dense = 4 * B * H * S * S * D
    if fits:  # 32.8125% of the blocks computed
        assert row["flops_per_call"] == dense * 21 // 64 == 11_274_289_152
        assert "67.19% of the block mask's blocks skipped" in row["flops_note"]
    else:
        assert row["flops_per_call"] == dense
        assert "upper bound" in row["flops_note"]


def test_capture_facts_ignore_what_is_not_a_fact() -> None:
    assert CaptureFacts.from_manifest(None) is None
    assert CaptureFacts.from_manifest({"batch": 8}) is None
    assert CaptureFacts.from_manifest({"lengths": [3, "4"], "block_sparsity_pct": True}) is None
    facts = CaptureFacts.from_manifest({"lengths": [3, 4], "head_dim": 64, "dtype": "bf16"})
    assert facts == CaptureFacts((("head_dim", 64),), (3, 4), None)


# FlashAttention 3 as DeepSeek's H800 training trace names it (MLA: q/k head size 192, v 128).
FA3_FWD = (
    "void flash::compute_attn_ws<Flash_fwd_kernel_traits<192, 128, 128, 12, 2, false, 1, "
    "cutlass::bfloat16_t, 128>, {causal}, flash::SingleTileScheduler, flash::SeqLenTraits<true> >"
    "(flash::CollectiveMainloopFwd<Flash_fwd_kernel_traits<192, 128, 128, 12, 2, false, 1, "
    "cutlass::bfloat16_t, 128>, {causal}, flash::SeqLenTraits<true> >::Params)"
)
FA3_BWD_PRE = (
    "void cutlass::device_kernel<flash::FlashAttnBwdPreprocess<cute::tuple<cute::C<64>, "
    "cute::C<192> >, cute::tuple<cute::C<64>, cute::C<128> >, cutlass::bfloat16_t, float, "
    "cutlass::arch::Sm90, true, true> >(flash::FlashAttnBwdPreprocess<cute::tuple<cute::C<64>, "
    "cute::C<192> > >::Params)"
)
FA3_BWD = (
    "void cutlass::device_kernel<flash::FlashAttnBwd<flash::CollectiveMainloopBwd<2, "
    "cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cute::tuple<cute::C<64>, cute::C<128>, "
    "cute::C<192> > > > >(flash::FlashAttnBwd<> ::Params)"
)


@pytest.mark.parametrize("causal", ["true", "false"])
def test_fa3_kernel_names_give_causal_and_head_sizes(tmp_path: Path, causal: str) -> None:
    # record_shapes off: the flash-attn autograd functions without inputs.
    events = [
        annotation("ProfilerStep#0", 0, 2000),
        span("cpu_op", "FlashAttnVarlenFunc", 10, 50),
        call("cudaLaunchKernel", 20, 5, 1),
        kernel(FA3_FWD.format(causal=causal), 30, 100, 1),
        span("cpu_op", "FlashAttnVarlenFuncBackward", 500, 50),
        call("cudaLaunchKernel", 510, 5, 2),
        kernel(FA3_BWD_PRE, 520, 10, 2),
        call("cudaLaunchKernel", 515, 5, 3),
        kernel(FA3_BWD, 540, 300, 3),
    ]
    rows = {r["direction"]: r for r in attention(load(tmp_path, events)).rows.to_dicts()}
    forward, backward = rows["forward"], rows["backward"]
    assert (forward["causal"], forward["head_dim"], forward["head_dim_v"]) == (
        causal == "true", 192, 128,
    )  # fmt: skip
    assert (backward["head_dim"], backward["head_dim_v"]) == (192, 128)
    assert forward["shapes_from"] == backward["shapes_from"] == "kernel names"


def test_unified_attention_2d_and_3d_calls_are_rows_of_their_own(tmp_path: Path) -> None:
    # A replayed decode graph whose layers alternate: one 2d kernel, or a 3d kernel and its
    # reduction (vLLM's Triton unified attention, by the layer's lengths).
    events: list[Event] = [annotation("ProfilerStep#0", 0, 2000), call("hipGraphLaunch", 5, 5, 1)]
    for t0 in (100, 400):
        events += [
            kernel("kernel_unified_attention_2d", t0, 14, 1),
            kernel("kernel_unified_attention_3d", t0 + 50, 40, 1),
            kernel("reduce_segments", t0 + 100, 6, 1),
        ]
    result = attention(load(tmp_path, events))
    rows = result.rows
    # The markdown's kernels table: a line per row, each with its own kernels.
    markdown = attention_markdown(result)
    assert "| unified | forward | (CUDA graph replay) | kernel_unified_attention_2d |" in markdown
    assert "| kernel_unified_attention_3d, reduce_segments |" in markdown
    assert rows.select("implementation", "calls_per_iter", "kernels_per_call",
                       "gpu_us_per_call").rows() == [
        ("unified", 2.0, 2.0, 46.0), ("unified", 2.0, 1.0, 14.0),
    ]  # fmt: skip


def test_deepseek_h800_fa3_rows_read_their_kernel_names() -> None:
    # By hand: the forward kernel compute_attn_ws<Flash_fwd_kernel_traits<192, ..., bf16, 128>,
    # true, ...> (Is_causal true); the backward's FlashAttnBwdPreprocess<tuple<C<64>, C<192>>,
    # tuple<C<64>, C<128>>, ...>.
    rows = attention(traceanalyze.load(_corpus("deepseek_h800_train_ep64.json.gz"))).rows
    by = {r["direction"]: r for r in rows.to_dicts()}
    assert (by["forward"]["causal"], by["forward"]["head_dim"], by["forward"]["head_dim_v"]) == (
        True, 192, 128,
    )  # fmt: skip
    assert (by["backward"]["head_dim"], by["backward"]["head_dim_v"]) == (192, 128)
    assert by["forward"]["gpu_us_per_call"] == pytest.approx(1237.0)


def test_vllm_fullgraph_decode_splits_2d_and_3d_calls() -> None:
    # By hand: 12 kernel_unified_attention_2d per step (161.786 µs), 12 _3d (493.905 µs) and 12
    # reduce_segments (68.669 µs): 13.482 and 46.881 µs a call.
    rows = attention(traceanalyze.load(_corpus("new_tl_vllm_fullgraph_decode_mi300.json.gz"))).rows
    got = rows.select("calls_per_iter", "kernels_per_call", "gpu_us_per_call").rows()
    assert [(c, k) for c, k, _ in got] == [(12.0, 2.0), (12.0, 1.0)]
    assert [g for _, _, g in got] == pytest.approx([46.881167, 13.482167], abs=1e-5)


@pytest.mark.parametrize("need_weights", ["True", "False"])
def test_native_multi_head_attention_names_why_it_composed(
    tmp_path: Path, need_weights: str
) -> None:
    # nn.MultiheadAttention's fast path (as on kernelforge_gh200_transformer_stack): the
    # composed ops inside aten::_native_multi_head_attention, need_weights its 11th input.
    from tests.test_attention_micro import composed_step

    concrete = ["", "", "", "1024", "16", "", "", "", "", "", need_weights, "True", ""]
    args = {"Input Dims": [[]] * 13, "Input type": [""] * 13, "Concrete Inputs": concrete}
    mha = span("cpu_op", "aten::_native_multi_head_attention", 2, 180, **args)
    row = attention(load(tmp_path, [mha, *composed_step(0, in_place=True)])).rows.row(0, named=True)
    chain = "aten::matmul -> aten::softmax -> aten::matmul"
    if need_weights == "True":
        assert row["call_site"] == (
            f"aten::_native_multi_head_attention (need_weights=True): {chain}"
        )
        assert row["why_not"].startswith("need_weights=True: nn.MultiheadAttention returns")
    else:  # composed for another reason: the op is named, no reason claimed
        assert row["call_site"] == f"aten::_native_multi_head_attention: {chain}"
        assert row["why_not"] is None
    assert row["implementation"] == "composed"


def test_kernelforge_gh200_multi_head_attention_call_site() -> None:
    # By hand: 3 aten::_native_multi_head_attention ops, Concrete Inputs [..., "True", "True",
    # ""] (need_weights, average_attn_weights), each with aten::bmm -> aten::_softmax ->
    # aten::bmm inside.
    rows = attention(
        traceanalyze.load(_corpus("kernelforge_gh200_transformer_stack.json.gz"))
    ).rows.to_dicts()
    (row,) = [r for r in rows if r["implementation"] == "composed"]
    assert row["call_site"] == (
        "aten::_native_multi_head_attention (need_weights=True): "
        "aten::bmm -> aten::_softmax -> aten::bmm"
    )
    assert "need_weights=False lets it run SDPA" in row["why_not"]
