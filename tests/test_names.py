"""Readable kernel names: the wrapped kernel, demangled, never cut in the middle, and never two
kernels alike in one table."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

import traceanalyze
from tests.micro import call, kernel, op, write_trace
from traceanalyze.cli import main
from traceanalyze.names import demangle, readable_names, with_readable_names

FLASH = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128>>(Flash_fwd_params)"
SOFTMAX = "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10>(float*)"
CUDNN_SDPA = (
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1"
    "_kernel0_0"
)
# The same functor under two arity wrappers: two kernels that read alike when shortened.
MUL_SCALAR = (
    "void at::native::vectorized_elementwise_kernel<8, at::native::AUnaryFunctor<c10::BFloat16, "
    "c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, "
    "std::array<char*, 2ul> >(int, at::native::AUnaryFunctor<c10::BFloat16, c10::BFloat16, "
    "c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul>)"
)
MUL_TENSOR = MUL_SCALAR.replace("AUnaryFunctor", "BinaryFunctor").replace("2ul", "3ul")
GEMM = "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x6_tn_align8"


def readable(*names: str, width: int | None = None) -> list[str]:
    return readable_names(pl.Series(names, dtype=pl.String), width=width).to_list()


@pytest.mark.parametrize(
    ("name", "short"),
    [
        (FLASH, "pytorch_flash::flash_fwd_kernel"),
        (SOFTMAX, "softmax_warp_forward"),
        (
            "nvjet_sm90_tst_64x512_64x2_1x2_h_bz_coopB_NNT",
            "nvjet_sm90_tst_64x512_64x2_1x2_h_bz_coopB_NNT",
        ),
        # The arity wrapper (AUnaryFunctor) names no operation; the functor inside it does.
        (MUL_SCALAR, "vectorized_elementwise_kernel [MulFunctor]"),
        (
            "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl<at::native::"
            "CUDAFunctor_add<float> >(at::TensorIteratorBase&)::{lambda(int)#1}>(int)",
            "elementwise_kernel [CUDAFunctor_add]",
        ),
        # ReduceOp and func_wrapper_t wrap what is reduced; a lambda names the op that owns it.
        (
            "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::"
            "func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::"
            "TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4> >(at::native::"
            "ReduceOp<float>)",
            "reduce_kernel [sum_functor]",
        ),
        (
            "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::"
            "native::(anonymous namespace)::masked_fill_kernel(at::TensorIterator&, c10::Scalar "
            "const&)::{lambda()#1}::operator()() const::{lambda(c10::BFloat16, bool)#1}>(at::"
            "TensorIteratorBase&)::{lambda(int)#1}>(int)",
            "elementwise_kernel [masked_fill_kernel]",
        ),
        # CUTLASS's device-side wrappers: the kernel is the template argument.
        (f"void cutlass::Kernel2<{GEMM}>({GEMM}::Params)", GEMM),
        (f"void cutlass::Kernel<{GEMM}>", GEMM),
        (
            "void cutlass_cudnn_infer::Kernel<cutlass_tensorop_s1688dgrad_optimized_tf32_64x128_"
            "32x3_nhwc_align4>(cutlass_tensorop_s1688dgrad_optimized_tf32_64x128_32x3_nhwc_align4"
            "::Params)",
            "cutlass_tensorop_s1688dgrad_optimized_tf32_64x128_32x3_nhwc_align4",
        ),
        # Never cut: the whole name, however long (tables are copied and searched).
        (CUDNN_SDPA, CUDNN_SDPA),
        ("x" * 80, "x" * 80),
        ("Memcpy DtoD (Device -> Device)", "Memcpy DtoD"),
    ],
)
def test_readable_name(name: str, short: str) -> None:
    assert readable(name) == [short]


needs_demangler = pytest.mark.skipif(
    demangle("_Z3fooi") is None, reason="no C++ runtime with __cxa_demangle on this machine"
)


@needs_demangler
def test_mangled_names_are_demangled() -> None:
    assert demangle("_ZN4attn6kernelIfEEvPT_i") == "void attn::kernel<float>(float*, int)"
    assert readable("_Z15my_fused_kernelPfi", "_ZN4attn6kernelIfEEvPT_i") == [
        "my_fused_kernel",
        "attn::kernel",
    ]
    # Two instances of one template: told apart by their template arguments.
    assert readable("_ZN4attn6kernelIfEEvPT_i", "_ZN4attn6kernelIdEEvPT_i") == [
        "attn::kernel<float>",
        "attn::kernel<double>",
    ]
    # A wrapped CUTLASS kernel, mangled: demangled, then unwrapped.
    assert readable("_ZN7cutlass6KernelI24cutlass_80_tensorop_gemmEEvNT_6ParamsE") == [
        "cutlass_80_tensorop_gemm"
    ]


def test_a_name_the_demangler_cannot_read_keeps_its_leading_names() -> None:
    # cuDNN's CUTLASS convolutions (cut short here) are too deep for libstdc++'s demangler;
    # their outer name and first template argument still read, and the tile tells them apart.
    head = "_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11thread"
    tail = "block22ImplicitGemmMultistageINS_4gemm9GemmShapeILi{}ELi128ELi32EEEE"
    names = [head + tail.format(64), head + tail.format(128)]
    assert readable(*names) == [
        "cutlass_cudnn_train::conv::kernel::ImplicitGemmConvolution [tile 64x128x32]",
        "cutlass_cudnn_train::conv::kernel::ImplicitGemmConvolution [tile 128x128x32]",
    ]
    assert demangle("not_mangled") is None


def test_names_that_read_alike_are_told_apart() -> None:
    assert readable(MUL_SCALAR, MUL_TENSOR, FLASH) == [
        "vectorized_elementwise_kernel<8, AUnaryFunctor<BFloat16, BFloat16, BFloat16, "
        "MulFunctor<float>>, std::array<char*, 2ul>>",
        "vectorized_elementwise_kernel<8, BinaryFunctor<BFloat16, BFloat16, BFloat16, "
        "MulFunctor<float>>, std::array<char*, 3ul>>",
        "pytorch_flash::flash_fwd_kernel",
    ]
    # Equal names stay equal; a missing name stays missing.
    assert readable(FLASH, FLASH) == ["pytorch_flash::flash_fwd_kernel"] * 2
    assert readable_names(pl.Series([None, FLASH])).to_list() == [
        None,
        "pytorch_flash::flash_fwd_kernel",
    ]


def test_a_narrow_column_cuts_at_the_end_unless_two_names_would_read_alike() -> None:
    assert readable(CUDNN_SDPA, FLASH, width=48) == [
        CUDNN_SDPA[:47] + "…",
        "pytorch_flash::flash_fwd_kernel",
    ]
    fprop, bprop = CUDNN_SDPA, CUDNN_SDPA.replace("knob_7", "knob_9")
    assert readable(fprop, bprop, width=48) == [fprop, bprop]


def test_with_readable_names_replaces_only_the_named_column() -> None:
    frame = pl.DataFrame({"name": [FLASH], "launch_op": ["aten::_flash_attention_forward"]})
    assert with_readable_names(frame).row(0) == (
        "pytorch_flash::flash_fwd_kernel",
        "aten::_flash_attention_forward",
    )
    assert with_readable_names(frame, "other").equals(frame)


def test_kernels_markdown_shows_whole_unique_names(tmp_path: Path) -> None:
    names = [CUDNN_SDPA, MUL_SCALAR, MUL_TENSOR, f"void cutlass::Kernel2<{GEMM}>({GEMM}::Params)"]
    events = [op("aten::op", 0, 100)]
    for n, name in enumerate(names, start=1):
        events += [call("cudaLaunchKernel", 10 * n, 2, n), kernel(name, 10 * n + 5, 3, n)]
    trace = write_trace(tmp_path, events)

    result = CliRunner().invoke(main, ["kernels", str(trace), "--no-cache"])

    assert result.exit_code == 0, result.output
    shown = [line.split(" | ")[0].removeprefix("| ") for line in result.stdout.splitlines()[2:]]
    assert len(set(shown)) == len(names)
    assert CUDNN_SDPA in shown
    assert GEMM in shown
    assert "…" not in result.stdout


def test_no_two_kernels_of_a_public_trace_read_alike(public_trace: Path) -> None:
    names = traceanalyze.load(public_trace).gpu["name"].unique()
    shown = readable_names(names)
    assert shown.n_unique() == names.n_unique()
    assert not shown.str.contains("…").any()
    # No wrapper is left where the kernel it wraps could be named.
    assert not shown.str.contains(r"^(\w+::)?Kernel2?$").any()


# AMD Tensile GEMMs (from tl_mi300_bert_small): the problem and type, then ~300 characters of
# tuning parameters among which the macro tile (MT) and matrix instruction (MI).
TENSILE = (
    "Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT16x16x128_MI16x16x1_SN_LDSB0_AFC1_AFEM1_"
    "AFEM1_ASEM1_CLR1_CADS0_DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA8_GRVWB8_GSUAMB_GLS0_ISA942_IU1_K1"
)


def test_tensile_names_read_as_problem_type_and_tile() -> None:
    other_tile = TENSILE.replace("MT16x16x128", "MT32x64x128")
    assert readable(
        TENSILE, other_tile, TENSILE.replace("Cijk_Alik_Bljk_B_", "Cijk_Ailk_Bjlk_SB_")
    ) == [
        "Cijk_Alik_Bljk_B [tile 16x16x128]",
        "Cijk_Alik_Bljk_B [tile 32x64x128]",
        "Cijk_Ailk_Bjlk_SB [tile 16x16x128]",
    ]
    # One tile, two matrix instructions: the instruction tells them apart.
    other_mi = TENSILE.replace("MI16x16x1", "MI32x32x2")
    assert readable(TENSILE, other_mi) == [
        "Cijk_Alik_Bljk_B [tile 16x16x128, MI16x16x1]",
        "Cijk_Alik_Bljk_B [tile 16x16x128, MI32x32x2]",
    ]
    # Alike in both: the whole names, never two kernels that read the same.
    other_tuning = TENSILE.replace("GRVWA8", "GRVWA4")
    assert readable(TENSILE, other_tuning) == [TENSILE, other_tuning]
