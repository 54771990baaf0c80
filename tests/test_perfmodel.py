"""FLOPs and bytes of every modelled op against hand-computed values.

Input Dims / Input type / Concrete Inputs are copied from real traces where one holds the op
with shapes (the file is named beside each case); ops no available trace holds with shapes are
written in the same recorded format and say so. Expected values are the formulas written out.
"""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

from traceanalyze.analyses.roofline import formulas as f
from traceanalyze.analyses.roofline.ops import (
    ATTENTION,
    GEMM,
    MEMORY,
    MODELLED_OPS,
    NO_MODEL,
    NO_OP,
    OP_MODELS,
    POINTWISE_ARITY,
    op_table,
    unmodelled_reason,
)

BF16, FP32 = '"c10::BFloat16"', '"float"'

# tl_h100_bert_small.json.gz, aten::_scaled_dot_product_flash_attention, exactly as written
# (the profiler pretty-prints some traces; whitespace must not matter).
BERT_FLASH_DIMS = (
    "[\n          [\n            1,\n            8,\n            141,\n            64\n          ],"
    "\n          [\n            1,\n            8,\n            141,\n            64\n          ],"
    "\n          [\n            1,\n            8,\n            141,\n            64\n          ],"
    "\n          [],\n          [],\n          [],\n          []\n        ]"
)
BERT_FLASH_TYPES = (
    '[\n          "c10::BFloat16",\n          "c10::BFloat16",\n          "c10::BFloat16",\n'
    '          "Scalar",\n          "Scalar",\n          "Scalar",\n          "Scalar"\n        ]'
)
BERT_FLASH_CONCRETE = (
    '[\n          "",\n          "",\n          "",\n          "0.",\n          "False",\n'
    '          "False",\n          "0.125"\n        ]'
)


def model(name: str, dims: str | None, types: str | None, concrete: str | None = None) -> Any:
    calls = pl.DataFrame(
        {
            "call": [7],
            "name": [name],
            "input_dims": [dims],
            "input_types": [types],
            "concrete_inputs": [concrete],
        },
        schema={"call": pl.Int64, "name": pl.String, "input_dims": pl.String,
                "input_types": pl.String, "concrete_inputs": pl.String},
    )  # fmt: skip
    rows = f.model_calls(calls)
    assert rows.height == 1 and rows["call"][0] == 7
    return rows.row(0, named=True)


def check(row: Any, flops: int | None, nbytes: int, dtype: str) -> None:
    assert row["reason"] is None, row["reason"]
    assert (row["flops"], row["bytes"], row["dtype"]) == (flops, nbytes, dtype)


# ---------------------------------------------------------------------------------------------
# GEMM family: 2·numel(A)·N FLOPs; bytes = inputs read once + the output written once


def test_mm_bench_trace() -> None:
    # h200_train_175mb.json.gz
    row = model("aten::mm", "[[4096, 4096], [4096, 1024]]", f"[{BF16}, {BF16}]", '["", ""]')
    check(row, 2 * 4096 * 1024 * 4096, 2 * (4096 * 4096 + 4096 * 1024 + 4096 * 1024), "bf16")
    assert row["family"] == GEMM and row["shapes"] == "[[4096,4096],[4096,1024]]"


def test_mm_with_an_out_tensor_counts_the_output_once() -> None:
    # tl_torch_compile_triton.json.gz: Inductor's extern mm(a, b, out=buf)
    row = model("aten::mm", "[[32768, 2048], [2048, 2048], [32768, 2048]]",
                f"[{BF16}, {BF16}, {BF16}]", '["", "", ""]')  # fmt: skip
    check(row, 2 * 32768 * 2048 * 2048, 2 * (32768 * 2048 + 2048 * 2048 + 32768 * 2048), "bf16")


def test_bmm_fp32() -> None:
    # hta_no_distributed_info_a100.json.gz (no Concrete Inputs: GEMMs need none)
    row = model("aten::bmm", "[[1024, 96, 50], [1024, 50, 8]]", '["float", "float"]')
    check(row, 2 * 1024 * 96 * 8 * 50, 4 * (1024 * 96 * 50 + 1024 * 50 * 8 + 1024 * 96 * 8), "fp32")


def test_addmm_reads_the_bias_but_counts_no_epilogue_flops() -> None:
    # h200_train_175mb.json.gz
    row = model(
        "aten::addmm",
        "[[1024], [4096, 4096], [4096, 1024], [], []]",
        f'[{BF16}, {BF16}, {BF16}, "Scalar", "Scalar"]',
        '["", "", "", "1", "1"]',
    )
    check(row, 2 * 4096 * 1024 * 4096, 2 * (1024 + 4096 * 4096 + 4096 * 1024 + 4096 * 1024), "bf16")


def test_baddbmm() -> None:
    # Written by hand in the recorded format (no available trace has baddbmm with shapes).
    row = model(
        "aten::baddbmm",
        "[[16, 128, 128], [16, 128, 64], [16, 64, 128], [], []]",
        f'[{BF16}, {BF16}, {BF16}, "Scalar", "Scalar"]',
        '["", "", "", "1", "1"]',
    )
    self_, b1, b2, out = 16 * 128 * 128, 16 * 128 * 64, 16 * 64 * 128, 16 * 128 * 128
    check(row, 2 * 16 * 128 * 128 * 64, 2 * (self_ + b1 + b2 + out), "bf16")


def test_matmul_3d_by_2d() -> None:
    # hta_no_distributed_info_a100.json.gz
    row = model("aten::matmul", "[[1024, 96, 50], [50, 15]]", '["float", "float"]')
    check(row, 2 * 1024 * 96 * 50 * 15, 4 * (1024 * 96 * 50 + 50 * 15 + 1024 * 96 * 15), "fp32")


def test_matmul_with_equal_batch_dims() -> None:
    row = model("aten::matmul", "[[8, 16, 128, 64], [8, 16, 64, 128]]", f"[{BF16}, {BF16}]")
    a, b, out = 8 * 16 * 128 * 64, 8 * 16 * 64 * 128, 8 * 16 * 128 * 128
    check(row, 2 * 8 * 16 * 128 * 128 * 64, 2 * (a + b + out), "bf16")


def test_matmul_with_broadcast_batch_dims_is_not_guessed() -> None:
    row = model("aten::matmul", "[[2, 1, 8, 4], [1, 3, 4, 5]]", f"[{BF16}, {BF16}]")
    assert (row["flops"], row["bytes"], row["reason"]) == (None, None, f.BATCH_BROADCAST)


def test_linear_reads_its_weight_as_n_by_k() -> None:
    # h200_train_175mb.json.gz
    row = model("aten::linear", "[[8, 512, 4096], [1024, 4096], [1024]]",
                f"[{BF16}, {BF16}, {BF16}]", '["", "", ""]')  # fmt: skip
    nbytes = 2 * (8 * 512 * 4096 + 1024 * 4096 + 1024 + 8 * 512 * 1024)
    check(row, 2 * 8 * 512 * 4096 * 1024, nbytes, "bf16")


def test_gemm_whose_inner_dimensions_differ() -> None:
    row = model("aten::mm", "[[4, 5], [6, 7]]", f"[{BF16}, {BF16}]")
    assert (row["flops"], row["reason"]) == (None, f.INNER_MISMATCH)


# ---------------------------------------------------------------------------------------------
# Attention: 4·B·H·Sq·Sk·D forward, halved when causal; backward 2.5x


def test_flash_attention_forward_pretty_printed_and_not_causal() -> None:
    row = model("aten::_scaled_dot_product_flash_attention", BERT_FLASH_DIMS, BERT_FLASH_TYPES,
                BERT_FLASH_CONCRETE)  # fmt: skip
    qkv_o = 4 * (1 * 8 * 141 * 64)
    check(row, 4 * 1 * 8 * 141 * 141 * 64, 2 * qkv_o, "bf16")
    assert row["causal"] is False and row["family"] == ATTENTION


def test_cudnn_attention_forward_causal() -> None:
    # h200_train_175mb.json.gz (is_causal is Concrete Inputs[6])
    row = model(
        "aten::_scaled_dot_product_cudnn_attention",
        "[[8, 16, 512, 64], [8, 16, 512, 64], [8, 16, 512, 64], [], [], [], [], [], []]",
        f'[{BF16}, {BF16}, {BF16}, "", "Scalar", "Scalar", "Scalar", "Scalar", ""]',
        '["", "", "", "", "True", "0.10000000000000001", "True", "False", ""]',
    )
    check(row, 4 * 8 * 16 * 512 * 512 * 64 // 2, 2 * 4 * (8 * 16 * 512 * 64), "bf16")
    assert row["causal"] is True


def test_efficient_attention_with_grouped_query_heads() -> None:
    # By hand (recorded format): 32 query heads over 8 key/value heads, causal.
    row = model(
        "aten::_scaled_dot_product_efficient_attention",
        "[[4, 32, 2048, 128], [4, 8, 2048, 128], [4, 8, 2048, 128], [], [], [], [], []]",
        f'[{BF16}, {BF16}, {BF16}, "", "Scalar", "Scalar", "Scalar", "Scalar"]',
        '["", "", "", "", "True", "0.", "True", ""]',
    )
    q_and_out, k_and_v = 2 * (4 * 32 * 2048 * 128), 2 * (4 * 8 * 2048 * 128)
    check(row, 4 * 4 * 32 * 2048 * 2048 * 128 // 2, 2 * (q_and_out + k_and_v), "bf16")


def test_causal_attention_with_unequal_lengths_is_not_guessed() -> None:
    row = model(
        "aten::_scaled_dot_product_flash_attention",
        "[[1, 8, 1, 64], [1, 8, 141, 64], [1, 8, 141, 64], [], [], [], []]",
        f'[{BF16}, {BF16}, {BF16}, "Scalar", "Scalar", "Scalar", "Scalar"]',
        '["", "", "", "0.", "True", "False", ""]',
    )
    assert (row["flops"], row["reason"]) == (None, f.CAUSAL_UNEQUAL)


def test_attention_without_concrete_inputs_says_so() -> None:
    row = model("aten::_scaled_dot_product_flash_attention", BERT_FLASH_DIMS, BERT_FLASH_TYPES)
    assert (row["flops"], row["reason"]) == (None, f.NO_CONCRETE)


def test_cudnn_attention_backward_is_two_and_a_half_forwards() -> None:
    # h200_train_175mb.json.gz (is_causal is Concrete Inputs[14])
    row = model(
        "aten::_scaled_dot_product_cudnn_attention_backward",
        "[[8, 16, 512, 64], [8, 16, 512, 64], [8, 16, 512, 64], [8, 16, 512, 64], "
        "[8, 16, 512, 64], [8, 16, 512, 1], [], [], [], [], [], [], [], [], [], []]",
        f'[{BF16}, {BF16}, {BF16}, {BF16}, {BF16}, "float", "long int", "long int", "", "", '
        '"", "Scalar", "Scalar", "Scalar", "Scalar", ""]',
        '["", "", "", "", "", "", "", "", "", "", "", "512", "512", "0.10000000000000001", '
        '"True", ""]',
    )
    tensor = 8 * 16 * 512 * 64
    reads = 2 * 5 * tensor + 4 * 8 * 16 * 512  # grad_out, q, k, v, out; logsumexp in fp32
    writes = 2 * 3 * tensor  # dq, dk, dv
    check(row, 4 * 8 * 16 * 512 * 512 * 64 // 2 * 5 // 2, reads + writes, "bf16")


def test_flash_attention_backward_reads_only_its_listed_inputs() -> None:
    # By hand (recorded format); the 0-d philox seed and offset are not read by the model.
    row = model(
        "aten::_scaled_dot_product_flash_attention_backward",
        "[[8, 16, 1024, 64], [8, 16, 1024, 64], [8, 16, 1024, 64], [8, 16, 1024, 64], "
        "[8, 16, 1024, 64], [8, 16, 1024], [], [], [], [], [], [], [], [], []]",
        f'[{BF16}, {BF16}, {BF16}, {BF16}, {BF16}, "float", "", "", "Scalar", "Scalar", '
        '"Scalar", "Scalar", "long int", "long int", "Scalar"]',
        '["", "", "", "", "", "", "", "", "1024", "1024", "0.", "False", "", "", ""]',
    )
    tensor = 8 * 16 * 1024 * 64
    nbytes = 2 * 5 * tensor + 4 * 8 * 16 * 1024 + 2 * 3 * tensor
    check(row, 4 * 8 * 16 * 1024 * 1024 * 64 * 5 // 2, nbytes, "bf16")


def test_efficient_attention_backward() -> None:
    # By hand (recorded format): (grad_out, q, k, v, attn_bias, out, logsumexp, seed, offset,
    # dropout_p, grad_input_mask, is_causal, scale); no bias.
    row = model(
        "aten::_scaled_dot_product_efficient_attention_backward",
        "[[2, 4, 256, 64], [2, 4, 256, 64], [2, 4, 256, 64], [2, 4, 256, 64], [], "
        "[2, 4, 256, 64], [2, 4, 256], [], [], [], [], [], []]",
        f'[{BF16}, {BF16}, {BF16}, {BF16}, "", {BF16}, "float", "long int", "long int", '
        '"Scalar", "ScalarList", "Scalar", "Scalar"]',
        '["", "", "", "", "", "", "", "", "", "0.", "[True, True, True, False]", "True", ""]',
    )
    tensor = 2 * 4 * 256 * 64
    nbytes = 2 * 5 * tensor + 4 * 2 * 4 * 256 + 2 * 3 * tensor
    check(row, 4 * 2 * 4 * 256 * 256 * 64 // 2 * 5 // 2, nbytes, "bf16")


# ---------------------------------------------------------------------------------------------
# Convolution: 2·N·numel(weight)·P·Q

FALCON_INPUT, FALCON_WEIGHT = 4 * 3 * 224 * 224, 768 * 3 * 16 * 16
FALCON_OUT = 4 * 768 * 14 * 14  # (224 + 0 - 1·15 - 1) // 16 + 1 = 14
FALCON_FLOPS = 2 * 4 * 768 * 3 * 16 * 16 * 14 * 14


def test_cudnn_convolution_pretty_printed() -> None:
    # tl_h100_falconsai_conv.json.gz, exactly as written: (self, weight, padding, stride, ...)
    dims = (
        "[\n          [\n            4,\n            3,\n            224,\n            224\n"
        "          ],\n          [\n            768,\n            3,\n            16,\n"
        "            16\n          ],\n          [],\n          [],\n          [],\n"
        "          [],\n          [],\n          [],\n          []\n        ]"
    )
    types = (
        '[\n          "c10::BFloat16",\n          "c10::BFloat16",\n          "ScalarList",\n'
        '          "ScalarList",\n          "ScalarList",\n          "Scalar",\n'
        '          "Scalar",\n          "Scalar",\n          "Scalar"\n        ]'
    )
    concrete = (
        '[\n          "",\n          "",\n          "[0, 0]",\n          "[16, 16]",\n'
        '          "[1, 1]",\n          "1",\n          "False",\n          "False",\n'
        '          "True"\n        ]'
    )
    row = model("aten::cudnn_convolution", dims, types, concrete)
    check(row, FALCON_FLOPS, 2 * (FALCON_INPUT + FALCON_WEIGHT + FALCON_OUT), "bf16")


@pytest.mark.parametrize(
    ("name", "dims", "types", "concrete"),
    [
        # tl_h100_falconsai_conv.json.gz (compact form of the recorded values)
        ("aten::_convolution",
         "[[4, 3, 224, 224], [768, 3, 16, 16], [768], [], [], [], [], [], [], [], [], [], []]",
         f'[{BF16}, {BF16}, {BF16}, "ScalarList", "ScalarList", "ScalarList", "Scalar", '
         '"ScalarList", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar"]',
         '["", "", "", "[16, 16]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "1", "False", '
         '"False", "True", "True"]'),
        ("aten::convolution",
         "[[4, 3, 224, 224], [768, 3, 16, 16], [768], [], [], [], [], [], []]",
         f'[{BF16}, {BF16}, {BF16}, "ScalarList", "ScalarList", "ScalarList", "Scalar", '
         '"ScalarList", "Scalar"]',
         '["", "", "", "[16, 16]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "1"]'),
        ("aten::conv2d",
         "[[4, 3, 224, 224], [768, 3, 16, 16], [768], [], [], [], []]",
         f'[{BF16}, {BF16}, {BF16}, "ScalarList", "ScalarList", "ScalarList", "Scalar"]',
         '["", "", "", "[16, 16]", "[0, 0]", "[1, 1]", "1"]'),
    ],
)  # fmt: skip
def test_convolution_ops_with_a_bias(name: str, dims: str, types: str, concrete: str) -> None:
    row = model(name, dims, types, concrete)
    check(row, FALCON_FLOPS, 2 * (FALCON_INPUT + FALCON_WEIGHT + 768 + FALCON_OUT), "bf16")


def test_miopen_convolution_with_stride_and_padding() -> None:
    # By hand (recorded format): (self, weight, bias, padding, stride, dilation, groups, ...)
    row = model(
        "aten::miopen_convolution",
        "[[8, 64, 56, 56], [128, 64, 3, 3], [128], [], [], [], [], [], []]",
        '["float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar", '
        '"Scalar", "Scalar"]',
        '["", "", "", "[1, 1]", "[2, 2]", "[1, 1]", "1", "False", "False"]',
    )
    p = (56 + 2 * 1 - 1 * (3 - 1) - 1) // 2 + 1  # 28
    out = 8 * 128 * p * p
    check(row, 2 * 8 * 128 * 64 * 3 * 3 * p * p,
          4 * (8 * 64 * 56 * 56 + 128 * 64 * 9 + 128 + out), "fp32")  # fmt: skip


def test_depthwise_convolution() -> None:
    row = model(
        "aten::conv2d",
        "[[8, 64, 56, 56], [64, 1, 3, 3], [], [], [], [], []]",
        f'[{BF16}, {BF16}, "", "ScalarList", "ScalarList", "ScalarList", "Scalar"]',
        '["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "64"]',
    )
    check(row, 2 * 8 * 64 * 1 * 9 * 56 * 56, 2 * (2 * 8 * 64 * 56 * 56 + 64 * 9), "bf16")


def test_transposed_and_string_padded_convolutions_are_not_guessed() -> None:
    transposed = model(
        "aten::convolution",
        "[[4, 3, 224, 224], [3, 768, 16, 16], [], [], [], [], [], [], []]",
        f'[{BF16}, {BF16}, "", "ScalarList", "ScalarList", "ScalarList", "Scalar", '
        '"ScalarList", "Scalar"]',
        '["", "", "", "[16, 16]", "[0, 0]", "[1, 1]", "True", "[0, 0]", "1"]',
    )
    assert (transposed["flops"], transposed["reason"]) == (
        None, "a transposed convolution (not modelled)",
    )  # fmt: skip
    same = model(
        "aten::conv2d",
        "[[8, 64, 56, 56], [64, 64, 3, 3], [], [], [], [], []]",
        f'[{BF16}, {BF16}, "", "ScalarList", "", "ScalarList", "Scalar"]',
        '["", "", "", "[1, 1]", "same", "[1, 1]", "1"]',
    )
    assert (same["flops"], same["reason"]) == (None, f.NOT_FITTING)


# ---------------------------------------------------------------------------------------------
# Memory family: bytes only

POINTWISE = sorted(m.name for m in OP_MODELS if m.broadcast)
IN_PLACE = sorted(m.name for m in OP_MODELS if m.family == MEMORY and m.like == (0,)
                  and m.reads is None)  # fmt: skip


@pytest.mark.parametrize("name", POINTWISE)
def test_every_pointwise_op_reads_its_inputs_and_writes_their_broadcast(name: str) -> None:
    # The shapes of h200_train_175mb.json.gz's aten::add, for every op of the family: a unary
    # op's second tensor is its out= tensor (written, not read).
    row = model(name, "[[8, 512, 1024], [8, 512, 1024], []]", f'[{BF16}, {BF16}, "Scalar"]')
    reads = min(POINTWISE_ARITY[name.removeprefix("aten::")], 2)
    check(row, None, (reads + 1) * 2 * 8 * 512 * 1024, "bf16")


def test_an_out_tensor_is_written_not_read() -> None:
    # h200_backward_large/sdpa_math: _safe_softmax's where(rows all -inf, 0, softmax, out=):
    # reads the mask and the softmax, writes out once (was counted as a read too: 82% -> 55%).
    row = model(
        "aten::where",
        "[[4, 32, 2048, 1], [], [4, 32, 2048, 2048], [4, 32, 2048, 2048]]",
        '["bool", "float", "float", "float"]',
    )
    check(row, None, 4 * 32 * 2048 * 1 + 4 + 2 * 4 * 4 * 32 * 2048 * 2048, "fp32")


def test_a_bool_mask_does_not_set_the_output_type() -> None:
    # h200_backward_large/sdpa_math: where(bool [2048, 2048], 0., 0-d float) writes floats.
    row = model("aten::where", "[[2048, 2048], [], []]", '["bool", "Scalar", "float"]')
    check(row, None, 2048 * 2048 * (1 + 4) + 4, "fp32")


@pytest.mark.parametrize("name", IN_PLACE)
def test_every_in_place_op_reads_its_inputs_and_writes_self(name: str) -> None:
    # h200_train_175mb.json.gz's aten::add_, for every in-place op.
    row = model(name, "[[3, 512, 8, 1024], [3, 512, 8, 1024], []]", f'[{BF16}, {BF16}, "Scalar"]')
    check(row, None, 3 * 2 * 3 * 512 * 8 * 1024, "bf16")


def test_broadcast_add() -> None:
    # tl_h100_falconsai_conv.json.gz
    row = model("aten::add", "[[4, 197, 768], [1, 197, 768], []]", f'[{BF16}, {BF16}, "Scalar"]')
    check(row, None, 2 * (4 * 197 * 768 + 197 * 768 + 4 * 197 * 768), "bf16")


def test_broadcast_of_both_inputs() -> None:
    row = model("aten::mul", "[[4, 1], [1, 5]]", f"[{FP32}, {FP32}]")
    check(row, None, 4 * (4 + 5 + 20), "fp32")


def test_inputs_that_do_not_broadcast() -> None:
    row = model("aten::mul", "[[4, 3], [5]]", f"[{FP32}, {FP32}]")
    assert (row["bytes"], row["reason"]) == (None, f.NOT_BROADCASTABLE)


def test_where_writes_the_widest_input_type() -> None:
    # hta_no_distributed_info_a100.json.gz (an older profiler writes "long")
    row = model("aten::where", "[[1024], [1024], [1024]]", '["bool", "long", "long"]')
    # The op computes in its values' type, not in its bool mask's.
    check(row, None, 1024 * (1 + 8 + 8) + 1024 * 8, "int64")


def test_a_zero_dim_tensor_does_not_promote_the_output() -> None:
    # hta_no_distributed_info_a100.json.gz: float [1024, 1] minus a 0-d double tensor
    row = model("aten::sub", "[[1024, 1], [], []]", '["float", "double", "Scalar"]')
    check(row, None, 4 * 1024 + 8 + 4 * 1024, "fp32")


def test_copy_reads_the_source_and_writes_self_in_its_own_type() -> None:
    # h200_train_175mb.json.gz: bf16 into fp32
    row = model("aten::copy_", "[[8, 512, 1024], [8, 512, 1024], []]",
                f'["float", {BF16}, "Scalar"]', '["", "", "False"]')  # fmt: skip
    check(row, None, 2 * 8 * 512 * 1024 + 4 * 8 * 512 * 1024, "fp32")


def test_fill_and_zero_only_write() -> None:
    # h200_train_175mb.json.gz and hta_mi250_rocm.json.gz
    fill = model("aten::fill_", "[[3, 512, 8, 1024], []]", f'[{BF16}, "Scalar"]', '["", "0"]')
    check(fill, None, 2 * 3 * 512 * 8 * 1024, "bf16")
    zero = model("aten::zero_", "[[5, 128]]", '["float"]', '[""]')
    check(zero, None, 4 * 5 * 128, "fp32")


def test_dropout_writes_its_output_and_a_one_byte_mask() -> None:
    # h200_train_175mb.json.gz
    row = model("aten::native_dropout", "[[8, 512, 4096], [], []]",
                f'[{BF16}, "Scalar", "Scalar"]', '["", "0.10000000000000001", "True"]')  # fmt: skip
    n = 8 * 512 * 4096
    check(row, None, 2 * n + 2 * n + n, "bf16")


def test_dropout_backward_reads_the_mask() -> None:
    # h200_train_175mb.json.gz
    row = model("aten::native_dropout_backward", "[[8, 512, 1024], [8, 512, 1024], []]",
                f'[{BF16}, "bool", "Scalar"]', '["", "", "1.1111111111111112"]')  # fmt: skip
    n = 8 * 512 * 1024
    check(row, None, 2 * n + n + 2 * n, "bf16")


@pytest.mark.parametrize("name", ["aten::_softmax", "aten::_log_softmax"])
def test_softmax(name: str) -> None:
    # By hand (recorded format): (self, dim, half_to_float)
    dims, types = "[[8, 16, 1024, 1024], [], []]", f'[{BF16}, "Scalar", "Scalar"]'
    row = model(name, dims, types, '["", "-1", "False"]')
    check(row, None, 2 * 2 * 8 * 16 * 1024 * 1024, "bf16")
    upcast = model(name, dims, types, '["", "-1", "True"]')
    assert upcast["reason"] == "half_to_float: the output type is not recorded"


def test_safe_softmax_without_and_with_a_dtype() -> None:
    dims, types = "[[8, 16, 1024, 1024], [], []]", f'[{FP32}, "Scalar", ""]'
    check(model("aten::_safe_softmax", dims, types, '["", "-1", ""]'), None,
          2 * 4 * 8 * 16 * 1024 * 1024, "fp32")  # fmt: skip
    given = model("aten::_safe_softmax", dims, types, '["", "-1", "6"]')
    assert given["reason"] == "an output dtype is given"


@pytest.mark.parametrize("name", ["aten::_softmax_backward_data",
                                  "aten::_log_softmax_backward_data"])  # fmt: skip
def test_softmax_backward(name: str) -> None:
    row = model(name, "[[8, 16, 1024, 1024], [8, 16, 1024, 1024], [], []]",
                f'[{BF16}, {BF16}, "Scalar", "Scalar"]', '["", "", "-1", "15"]')  # fmt: skip
    check(row, None, 3 * 2 * 8 * 16 * 1024 * 1024, "bf16")


def test_layer_norm_without_concrete_inputs() -> None:
    # hta_no_distributed_info_a100.json.gz: no requirement, so no Concrete Inputs needed
    row = model("aten::native_layer_norm", "[[1024, 512], [], [512], [512], []]",
                '["float", "", "float", "float", "Scalar"]')  # fmt: skip
    check(row, None, 4 * (1024 * 512 + 512 + 512) + 4 * 1024 * 512, "fp32")


def test_layer_norm_backward() -> None:
    # h200_train_175mb.json.gz
    dims = "[[8, 512, 1024], [8, 512, 1024], [], [8, 512, 1], [8, 512, 1], [1024], [1024], []]"
    types = (f'[{BF16}, {BF16}, "ScalarList", "float", "float", {BF16}, {BF16}, '
             '"ScalarList"]')  # fmt: skip
    row = model("aten::native_layer_norm_backward", dims, types,
                '["", "", "[1024]", "", "", "", "", "[True, True, True]"]')  # fmt: skip
    n, rows = 8 * 512 * 1024, 8 * 512
    reads = 2 * n + 2 * n + 4 * rows + 4 * rows + 2 * 1024 + 2 * 1024
    check(row, None, reads + 2 * n + 2 * 1024 + 2 * 1024, "bf16")
    partial = model("aten::native_layer_norm_backward", dims, types,
                    '["", "", "[1024]", "", "", "", "", "[True, False, False]"]')  # fmt: skip
    assert partial["reason"] == "not every gradient is requested"


@pytest.mark.parametrize("name", ["aten::native_batch_norm", "aten::cudnn_batch_norm"])
def test_batch_norm(name: str) -> None:
    row = model(
        name,
        "[[32, 64, 56, 56], [64], [64], [64], [64], [], [], []]",
        '["float", "float", "float", "float", "float", "Scalar", "Scalar", "Scalar"]',
    )
    n = 32 * 64 * 56 * 56
    check(row, None, 4 * (n + 4 * 64) + 4 * n, "fp32")


@pytest.mark.parametrize("name", ["aten::sum", "aten::mean"])
def test_reductions_read_their_input(name: str) -> None:
    # hta_mi250_rocm.json.gz
    row = model(name, "[[5, 128], [], [], []]", '["float", "ScalarList", "Scalar", ""]',
                '["", "[0]", "True", ""]')  # fmt: skip
    check(row, None, 4 * 5 * 128, "fp32")


def test_every_modelled_op_is_covered_here() -> None:
    covered = {
        "aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::matmul", "aten::linear",
        "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_cudnn_attention",
        "aten::_scaled_dot_product_efficient_attention",
        "aten::_scaled_dot_product_cudnn_attention_backward",
        "aten::_scaled_dot_product_flash_attention_backward",
        "aten::_scaled_dot_product_efficient_attention_backward",
        "aten::cudnn_convolution", "aten::_convolution", "aten::convolution", "aten::conv2d",
        "aten::miopen_convolution", "aten::copy_", "aten::fill_", "aten::zero_",
        "aten::native_dropout", "aten::_softmax", "aten::_log_softmax", "aten::_safe_softmax",
        "aten::_softmax_backward_data", "aten::_log_softmax_backward_data",
        "aten::native_layer_norm", "aten::native_layer_norm_backward",
        "aten::native_batch_norm", "aten::cudnn_batch_norm", "aten::sum", "aten::mean",
        *POINTWISE, *IN_PLACE,
    }  # fmt: skip
    assert set(MODELLED_OPS) == covered
    assert len(MODELLED_OPS) == len(set(MODELLED_OPS)) == op_table().height


# ---------------------------------------------------------------------------------------------
# Bad input: one call unmodelled with its reason, never a wrong number or an exception


@pytest.mark.parametrize(
    ("dims", "types", "reason"),
    [
        (None, None, f.NO_SHAPES),
        ("[[1, 2]", f"[{BF16}]", f.UNREADABLE),  # truncated JSON
        ("[[1, 2],]", f"[{BF16}]", f.UNREADABLE),  # trailing comma
        ("[[[4, 1], [3]], []]", '["TensorList", "Scalar"]', f.UNREADABLE),  # nested lists
        ("[[1, 2], [2]]", f"[{BF16}]", f.UNREADABLE),  # dims and types disagree
        ("[[99999999999999999999, 2], [2, 2]]", f"[{BF16}, {BF16}]", f.UNREADABLE),  # overflow
        ("[[1.5, 2], [2, 2]]", f"[{BF16}, {BF16}]", f.UNREADABLE),  # not integers
        ("[[2, 2], [2, 2]]", "[c10::BFloat16, c10::BFloat16]", f.UNREADABLE),  # not JSON
    ],
)
def test_unreadable_shapes(dims: str | None, types: str | None, reason: str) -> None:
    row = model("aten::mm", dims, types)
    assert (row["flops"], row["bytes"], row["reason"]) == (None, None, reason)


def test_unreadable_concrete_inputs_for_an_op_that_needs_them() -> None:
    row = model("aten::_scaled_dot_product_flash_attention", BERT_FLASH_DIMS, BERT_FLASH_TYPES,
                '["", "", "", "0.", "Tr\\"ue", "False", ""]')  # fmt: skip
    assert (row["flops"], row["reason"]) == (None, f.UNREADABLE)


def test_ops_without_a_model_are_dropped_and_get_a_reason() -> None:
    calls = pl.DataFrame(
        {"call": [1, 2], "name": ["aten::cat", "aten::mm"],
         "input_dims": ["[[2, 2]]", "[[2, 3], [3, 4]]"],
         "input_types": [f"[{FP32}]", f"[{FP32}, {FP32}]"], "concrete_inputs": [None, None]}
    )  # fmt: skip
    assert f.model_calls(calls)["call"].to_list() == [2]
    names = pl.DataFrame(
        {
            "op_name": [
                "aten::cat",
                "aten::_foreach_add_",
                None,
                "triton_tem_fused_flex_attention_0",
                "triton_poi_x",
            ]
        }
    )
    reasons = names.select(unmodelled_reason()).to_series().to_list()
    assert reasons[0] == NO_MODEL and reasons[2] == NO_OP
    assert "TensorList" in reasons[1] and "block mask" in reasons[3] and "Inductor" in reasons[4]


def test_identical_calls_are_modelled_once_and_each_keeps_its_row() -> None:
    dims, types = "[[4096, 4096], [4096, 1024]]", f"[{BF16}, {BF16}]"
    calls = pl.DataFrame(
        {"call": [5, 3, 9], "name": ["aten::mm"] * 3, "input_dims": [dims, dims, None],
         "input_types": [types, types, None], "concrete_inputs": [None, None, None]}
    )  # fmt: skip
    rows = f.model_calls(calls).sort("call")
    assert rows["call"].to_list() == [3, 5, 9]
    assert rows["flops"].to_list() == [2 * 4096 * 1024 * 4096] * 2 + [None]
    assert rows["reason"].to_list() == [None, None, f.NO_SHAPES]
