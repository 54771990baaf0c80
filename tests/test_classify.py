"""Kernel classification: real kernel names, op-context refinements, precision."""

from __future__ import annotations

import gzip
import importlib
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tests.conftest import CORPUS_TRACES, PUBLIC_TRACES, skip_without
from traceanalyze import load
from traceanalyze.analyses.kernels import kernel_table
from traceanalyze.classify import CATEGORIES, category_expr, classify
from traceanalyze.classify.rules import (
    GEMM_PRECISION_RULES,
    MAX_OP_ANCESTORS,
    NAME_RULES,
    OP_REFINEMENTS,
)
from traceanalyze.errors import AnalysisError
from traceanalyze.schema import CPU_SCHEMA, GPU_SCHEMA

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
# The module, not the function the package exports under the same name.
classify_module = importlib.import_module("traceanalyze.classify.classify")

# (kind, name, category, gemm_precision): names from the public traces in ../shared/traces/public,
# the blog's six attention variants and the kernel families of docs/architecture.md.
NAMES: list[tuple[str, str, str, str | None]] = [
    # sample_traces/h200_graph_replay: a device copy replayed from a CUDA graph is this kernel.
    ("kernel", "memcpy128", "copy", None),
    # Blog: the attention variants on A100/H100/H200.
    (
        "kernel",
        "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, "
        "4, false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 4, "
        "cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>"
        "(pytorch_flash::Flash_fwd_params)",
        "fused_attention",
        None,
    ),
    (
        "kernel",
        "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<"
        "cutlass::bfloat16_t, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)",
        "fused_attention",
        None,
    ),
    (
        "kernel",
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x64_4x1x"
        "1_kernel0_0",
        "fused_attention",
        None,
    ),
    ("kernel", "fmha_cutlassB_bf16_aligned_64x64_k64_sm80(Params)", "fused_attention", None),
    (
        "kernel",
        "void flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<T>",
        "fused_attention",
        None,
    ),
    (
        "kernel",
        "void flash_bwd_convert_dq_kernel<Kernel_traits>(Flash_bwd_params)",
        "fused_attention",
        None,
    ),
    (
        "kernel",
        "fmhaSm100fKernel_QkvE4m3OBfloat16HQk128HV128SeparateQkvCausal",
        "fused_attention",
        None,
    ),
    (
        "kernel",
        "attention_kernel_batched_impl<AttentionKernel<float, Sm80, true, 64, 64, 64>>",
        "fused_attention",
        None,
    ),
    ("kernel", "triton_tem_fused_flex_attention_0", "fused_attention", None),
    ("kernel", "triton_tem_fused_flex_attention_backward_1", "fused_attention", None),
    ("kernel", "attn_fwd", "fused_attention", None),  # MI300 Triton flash attention
    (
        "kernel",
        "ck_tile::FmhaFwdKernel<ck_tile::BlockFmhaPipelineQRKSVSAsync<>>",
        "fused_attention",
        None,
    ),
    (
        "kernel",
        "void vllm::paged_attention_v2_kernel<__nv_bfloat16, 128, 16>",
        "fused_attention",
        None,
    ),
    # GEMM: cuBLAS/cuBLASLt/CUTLASS on V100, A100, H100/H200, B200; hipBLASLt/Tensile on AMD.
    ("kernel", "volta_sgemm_128x64_nn", "gemm", "fp32-cuda-cores"),
    ("kernel", "ampere_sgemm_32x32_sliced1x4_tn", "gemm", "fp32-cuda-cores"),
    ("kernel", "ampere_gcgemm_64x64_nt", "gemm", "fp32-cuda-cores"),
    (
        "kernel",
        "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4",
        "gemm",
        "fp32-cuda-cores",
    ),
    (
        "kernel",
        "void cutlass::Kernel<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>"
        "(cutlass_80_simt_sgemm_128x32_8x5_nn_align1::Params)",
        "gemm",
        "fp32-cuda-cores",
    ),
    (
        "kernel",
        "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>",
        "gemm",
        "tf32",
    ),
    ("kernel", "sm80_xmma_gemm_tf32f32_tf32f32_f32_tn_n_tilesize128x128x16_stage4", "gemm", "tf32"),
    (
        "kernel",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_"
        "segment_k_off_kernel__5x_cublas",
        "gemm",
        "bf16",
    ),
    (
        "kernel",
        "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2"
        "_tn_align8>"
        "(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8::Params)",
        "gemm",
        "bf16",
    ),
    (
        "kernel",
        "sm100_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize256x128x64_cluster2x1x1",
        "gemm",
        "bf16",
    ),
    (
        "kernel",
        "void cutlass::Kernel<cutlass_70_wmma_tensorop_f16_s161616gemm_f16_32x32_64x2_tn_align8>"
        "(cutlass_70_wmma_tensorop_f16_s161616gemm_f16_32x32_64x2_tn_align8::Params)",
        "gemm",
        "fp16",
    ),
    ("kernel", "volta_h884gemm_64x64_ldg8_nn", "gemm", "fp16"),
    ("kernel", "sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x128", "gemm", "fp8"),
    ("kernel", "sm80_xmma_gemm_i8i8_i8i32_f32_tn_n_tilesize128x128x64", "gemm", "int8"),
    ("kernel", "nvjet_tst_128x64_64x8_2x1_v_bz_TNT", "gemm", "tensor-core (unknown dtype)"),
    ("kernel", "nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_NTN", "gemm", "tensor-core (unknown dtype)"),
    (
        "kernel",
        "void gemmk1_kernel<float, 256, 5, false, false, false, false, cublasGemvTensorSt"
        "ridedBatched"
        "<__half const>, cublasGemvTensorStridedBatched<__half>, float, true, true>"
        "(cublasGemmk1Params<float, __half const>)",
        "gemm",
        "fp16",
    ),
    (
        "kernel",
        "void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, true, true, "
        "false>(cublasLt::cublasSplitKParams<float>, float const*, float const*, float*)",
        "gemm",
        "unknown",
    ),
    (
        "kernel",
        "void epilogue::impl::globalKernel<float, float, float, true, true>(int, int, lon"
        "g, float*, "
        "cublasLtEpilogue_t, int, float*, long)",
        "gemm",
        "unknown",
    ),
    (
        "kernel",
        "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x192x64_MI16x16x1_SN_LDSB1_AFC1_AFEM1",
        "gemm",
        "bf16",
    ),
    (
        "kernel",
        "Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT16x16x128_MI16x16x1_SN",
        "gemm",
        "bf16",
    ),
    ("kernel", "Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8_SN", "gemm", "fp16"),
    # fp32 on AMD matrix cores is none of our precision classes.
    (
        "kernel",
        "Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0",
        "gemm",
        "unknown",
    ),
    ("kernel", "triton_tem_fused_mm_0", "gemm", "unknown"),
    ("kernel", "triton_tem_fused_addmm_relu_1", "gemm", "unknown"),
    (
        "kernel",
        "void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<>>",
        "gemm",
        "unknown",
    ),
    # Convolution (cuDNN, CUTLASS in cuDNN, MIOpen) and its helpers.
    ("kernel", "cudnn_infer_volta_scudnn_128x64_relu_medium_nn_v1", "convolution", None),
    ("kernel", "cudnn_ampere_scudnn_128x64_relu_xregs_large_nn_v1", "convolution", None),
    (
        "kernel",
        "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize"
        "128x128x16_"
        "stage4_warpsize2x2x1_g1_tensor16x8x8_alignc4_execute_kernel_cudnn",
        "convolution",
        None,
    ),
    (
        "kernel",
        "sm80_xmma_dgrad_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize64x128x32",
        "convolution",
        None,
    ),
    (
        "kernel",
        "void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, false, true>",
        "convolution",
        None,
    ),
    (
        "kernel",
        "void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int, int)",
        "convolution",
        None,
    ),
    (
        "kernel",
        "void wgrad_alg0_engine<float, 128, 6, 7, 3, 3, 5, false, 512>(int, int, int)",
        "convolution",
        None,
    ),
    (
        "kernel",
        "cudnn_infer_volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1",
        "convolution",
        None,
    ),
    (
        "kernel",
        "void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>"
        "(cudnn::winograd_nonfused::WinogradDataParams<float, float>)",
        "convolution",
        None,
    ),
    (
        "kernel",
        "void cutlass_cudnn_infer::Kernel<cutlass_tensorop_s1688fprop_optimized_tf32_128x128_32x4_"
        "nhwc_align4>(cutlass_tensorop_s1688fprop_optimized_tf32_128x128_32x4_nhwc_align4::Params)",
        "convolution",
        None,
    ),
    (
        "kernel",
        "_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11t"
        "hreadblock",
        "convolution",
        None,
    ),
    (
        "kernel",
        "void cask_cudnn_infer::computeOffsetsKernel<false, false>(cask_cudnn_infer::Comp"
        "uteOffsetsParams)",
        "convolution",
        None,
    ),
    (
        "kernel",
        "void fft2d_r2c_32x32<float, false, 0u, false>(float2*, float const*, int, int, "
        "cudnn::reduced_divisor, bool, int2, int, int)",
        "convolution",
        None,
    ),
    (
        "kernel",
        "void cudnn::cnn::reduce_wgrad_nchw_helper<float, float>(void*, void const*, floa"
        "t, int, int)",
        "convolution",
        None,
    ),
    (
        "kernel",
        "igemm_fwd_gtcx2_nhwc_bf16_bx0_ex1_bt32x256x32_wt16x64x4_ws1x1_wr1x2",
        "convolution",
        None,
    ),
    ("kernel", "MIOpenConvUni", "convolution", None),
    # Softmax.
    (
        "kernel",
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
        "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)",
        "softmax",
        None,
    ),
    (
        "kernel",
        "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true, false>"
        "(float*, float const*, int, int, int, bool const*, int, bool)",
        "softmax",
        None,
    ),
    ("kernel", "triton_per_fused__safe_softmax_0", "softmax", None),
    ("kernel", "triton_red_fused__log_softmax_1", "softmax", None),
    # Transpose / layout changes.
    (
        "kernel",
        "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernel"
        "DataType_t)2>"
        "(cudnn::ops::nchw2nhwc_params_t<float>, float const*, float*)",
        "transpose",
        None,
    ),
    ("kernel", "batched_transpose_16x64_pack_1x4_ediv_1x2_half", "transpose", None),
    # GPU memory activities.
    ("memcpy", "Memcpy DtoD (Device -> Device)", "memcpy", None),
    ("memcpy", "Memcpy HtoD (Pageable -> Device)", "memcpy", None),
    ("memset", "Memset (Device)", "memset", None),
    # Copies and casts.
    (
        "kernel",
        "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl<at::native::"
        "(anonymous namespace)::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}>",
        "copy",
        None,
    ),
    (
        "kernel",
        "void at::native::vectorized_elementwise_kernel<4, at::native::bfloat16_copy_kernel_cuda"
        "(at::TensorIteratorBase&)::{lambda(float)#1}, std::array<char*, 2ul> >",
        "copy",
        None,
    ),
    (
        "kernel",
        "void at::native::(anonymous namespace)::CatArrayBatchedCopy_aligned16_contig<at::native::"
        "(anonymous namespace)::OpaqueType<4u>, unsigned int, 1, 128, 1>",
        "copy",
        None,
    ),
    ("kernel", "__amd_rocclr_copyBuffer", "copy", None),
    ("kernel", "SubTensorOpWithCastTensor1d", "copy", None),
    # Fill.
    (
        "kernel",
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
        "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::A"
        "rray<char*, 1>)",
        "fill",
        None,
    ),
    ("kernel", "__amd_rocclr_fillBufferAligned", "fill", None),
    ("kernel", "SubTensorOpWithScalar1d", "fill", None),
    # Masks (naive attention and SDPA math).
    (
        "kernel",
        "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
        "masked_fill_kernel(at::TensorIterator&, c10::Scalar const&)::{lambda()#1}>",
        "mask",
        None,
    ),
    (
        "kernel",
        "void at::native::triu_tril_kernel<bool, int, false, 8, true>(at::cuda::detail::T"
        "ensorInfo)",
        "mask",
        None,
    ),
    (
        "kernel",
        "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<a"
        "t::native::"
        "(anonymous namespace)::where_kernel_impl(at::TensorIterator&)::{lambda()#1}>",
        "mask",
        None,
    ),
    # Elementwise.
    (
        "kernel",
        "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, "
        "float, at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 2> >",
        "elementwise",
        None,
    ),
    (
        "kernel",
        "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<float, float, u"
        "nsigned int, 1, 4, bool>",
        "elementwise",
        None,
    ),
    ("kernel", "triton_poi_fused_add_cos_sin_0", "elementwise", None),
    # A pointwise prologue of SDPA is not attention: Inductor's prefix wins.
    ("kernel", "triton_poi_fused__scaled_dot_product_flash_attention_0", "elementwise", None),
    (
        "kernel",
        "void cudnn::ops::scalePackedTensor_kernel<float, float>(long, float*, float)",
        "elementwise",
        None,
    ),
    # Reduction.
    (
        "kernel",
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps"
        "<float, float, float, float>, unsigned int, float, 4> >",
        "reduction",
        None,
    ),
    ("kernel", "triton_red_fused_sum_0", "reduction", None),
    ("kernel", "triton_per_fused_amax_1", "reduction", None),
    (
        "kernel",
        "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float>",
        "reduction",
        None,
    ),
    (
        "kernel",
        "void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int)",
        "reduction",
        None,
    ),
    # Normalization.
    (
        "kernel",
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>"
        "(int, float, c10::BFloat16 const*)",
        "normalization",
        None,
    ),
    (
        "kernel",
        "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 128, true, 1, true>(cud"
        "nnTensorStruct)",
        "normalization",
        None,
    ),
    (
        "kernel",
        "void cudnn::bn_bw_1C11_singleread<float, 512, true, 1, 2, 0>(cudnn::bn_bw_1C11_a"
        "rgs<float>)",
        "normalization",
        None,
    ),
    (
        "kernel",
        "void at::native::batch_norm_collect_statistics_kernel<at::native::Var, float>",
        "normalization",
        None,
    ),
    (
        "kernel",
        "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel_32x32<float, float>",
        "normalization",
        None,
    ),
    ("kernel", "triton_red_fused_add_mean_mul_pow_rsqrt_0", "normalization", None),
    ("kernel", "triton_per_fused_native_layer_norm_0", "normalization", None),
    # Indexing.
    (
        "kernel",
        "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, "
        "unsigned int, 2, 2, -2, true>",
        "indexing",
        None,
    ),
    (
        "kernel",
        "void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel>",
        "indexing",
        None,
    ),
    (
        "kernel",
        "void at::native::(anonymous namespace)::embedding_backward_feature_kernel<float>",
        "indexing",
        None,
    ),
    # Optimizer.
    (
        "kernel",
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
        "namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpLi"
        "stAlphaFunctor",
        "optimizer",
        None,
    ),
    (
        "kernel",
        "void at::native::(anonymous namespace)::fused_adam_kernel<float>",
        "optimizer",
        None,
    ),
    # Communication.
    (
        "kernel",
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
        "communication",
        None,
    ),
    (
        "kernel",
        "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        "communication",
        None,
    ),
    (
        "kernel",
        "void c10d::symmetric_memory::multimem_all_reduce_kernel<bf16, 4>",
        "communication",
        None,
    ),
    # Nothing matches.
    ("kernel", "my_custom_kernel", "other", None),
    # Issue 19, names from the LLM/recsys traces of ../shared/traces/corpus (PROVENANCE.md).
    # B200 trtllm-gen MX-format GEMMs (tl_b200_eager): operand formats in the name, no "gemm".
    (
        "kernel",
        "bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN"
        "_transOut_schedP2x1x2x3_biasM_bN_tma_tmaOpt_clmp_swiGlu_dynBatch_sm100f",
        "gemm",
        "fp4",
    ),
    (
        "kernel",
        "bmm_Bfloat16_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM"
        "_TN_transOut_schedP2x1x2x3_biasM_bN_tmaOpt_clmp_dynBatch_sm100f",
        "gemm",
        "fp4",
    ),
    ("kernel", "_matmul_ogs_NNT_bf16xbf16xmxfp4_128x128x128x1", "gemm", "fp4"),
    # SageAttention (new_tl_xdit_flux_sage_mi300x) and its quantisation of q and k.
    ("kernel", "sage_fwd", "fused_attention", None),
    ("kernel", "sage_quant_kernel", "elementwise", None),
    ("kernel", "kernel_unified_attention_2d", "fused_attention", None),
    # Rotary embeddings are pointwise math, not an embedding lookup.
    ("kernel", "rotary_kernel", "elementwise", None),
    ("kernel", "void vllm::rotary_embedding_kernel<c10::BFloat16, true>()", "elementwise", None),
    # KV-cache writes: "flash" in the name, but a scatter copy into the cache.
    (
        "kernel",
        "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, unsigned char, "
        "(vllm::Fp8KVCacheDataType)1>(__nv_bfloat16 const*, __nv_bfloat16 const*, unsigned char*)",
        "copy",
        None,
    ),
    (
        "kernel",
        "void (anonymous namespace)::store_kvcache<2048l, 4, false, long>((anonymous namespace)"
        "::StoreKVCacheParams)",
        "copy",
        None,
    ),
    # FlashInfer's index builder for paged attention ("flash" again).
    ("kernel", "create_flashinfer_kv_indices_triton", "indexing", None),
    # Quantisation: "flashinfer::" in a parameter type, "fbgemm" in a namespace.
    (
        "kernel",
        "void tensorrt_llm::kernels::quantize_with_block_size<(tensorrt_llm::BlockScaleQuantization"
        "Type)2, __nv_bfloat16, 32, true>(int, int, __nv_bfloat16 const*, flashinfer::"
        "QuantizationSFLayout)",
        "elementwise",
        None,
    ),
    (
        "kernel",
        "void fbgemm_gpu::(anonymous namespace)::_compute_FP8_quantize_cuda_kernel<float>(float "
        "const*, float const*, int, int, unsigned char*, bool)",
        "elementwise",
        None,
    ),
    (
        "kernel",
        "void cuda::per_token_cast_to_fp8_with_channels<__nv_bfloat16, 128, false, 128, false>"
        "(__nv_bfloat16 const*, int, unsigned char*, float*, int)",
        "elementwise",
        None,
    ),
    # DeepEP's expert-parallel all-to-all (deepseek_h800_train_ep64).
    (
        "kernel",
        "void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*, float*)",
        "communication",
        None,
    ),
    # A norm fused with its output's quantisation stays a norm (new_tl_sglang_prefilldecode).
    (
        "kernel",
        "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi64ELi8ELb0ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_"
        "S4_diiiiiiib",
        "normalization",
        None,
    ),
    # FBGEMM's sparse-feature shuffles gather rows ("fbgemm_gpu::" is not a GEMM).
    (
        "kernel",
        "void fbgemm_gpu::permute_2D_data_kernel<false, int, int, decltype(nullptr)>(int, int)",
        "indexing",
        None,
    ),
    # FBGEMM table-batched embeddings (hta_nccl_128rank_sampled): "fbgemm" in the parameters.
    (
        "kernel",
        "void split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_cta_per_row_1"
        "<c10::Half, float, c10::Half, 2ul, 32>(at::GenericPackedTensorAccessor<float, 2ul, "
        "at::RestrictPtrTraits, long>, fbgemm_gpu::FixedDivisor)",
        "indexing",
        None,
    ),
    (
        "kernel",
        "void at::native::(anonymous namespace)::compute_grad_weight<float, long>(long const*)",
        "indexing",
        None,
    ),
]


def _gpu(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """A gpu frame with the schema's types for the columns the rows give."""
    columns = list(rows[0])
    return pl.DataFrame(rows, schema={c: GPU_SCHEMA[c] for c in columns})


def _cpu(rows: list[dict[str, Any]]) -> pl.DataFrame:
    columns = ["rank", "op_id", "parent_id", "name"]
    schema = {c: CPU_SCHEMA[c] for c in columns}
    return pl.DataFrame(rows, schema=schema) if rows else pl.DataFrame(schema=schema)


def _expected(rows: list[tuple[str, str | None]]) -> pl.DataFrame:
    return pl.DataFrame(
        rows, schema={"category": pl.String, "gemm_precision": pl.String}, orient="row"
    )


def test_real_kernel_names() -> None:
    gpu = _gpu([{"rank": 0, "kind": k, "name": n, "op_id": None} for k, n, _, _ in NAMES])
    out = classify(gpu, _cpu([]))
    assert_frame_equal(
        out.select("name", "category", "gemm_precision"),
        pl.DataFrame(
            [(n, c, p) for _, n, c, p in NAMES],
            schema={"name": pl.String, "category": pl.String, "gemm_precision": pl.String},
            orient="row",
        ),
    )


def test_category_expr_matches_classify_without_op_context() -> None:
    gpu = _gpu([{"rank": 0, "kind": k, "name": n, "op_id": None} for k, n, _, _ in NAMES])
    assert_frame_equal(
        gpu.select(category_expr()),
        classify(gpu, _cpu([])).select("category"),
    )


def test_rule_tables_name_only_taxonomy_categories() -> None:
    named = {c for c, _ in NAME_RULES} | {r.category for r in OP_REFINEMENTS}
    assert named <= set(CATEGORIES)
    for refinement in OP_REFINEMENTS:
        assert refinement.applies_to is None or set(refinement.applies_to) <= set(CATEGORIES)
    assert len({p for p, _ in GEMM_PRECISION_RULES}) == len(GEMM_PRECISION_RULES)


COPY = (
    "void at::native::elementwise_kernel<128, 4, direct_copy_kernel_cuda(at::TensorIteratorBase&)>"
)
MUL = "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float> >"
SGEMM = "volta_sgemm_128x64_nn"


def test_copy_under_contiguous_is_a_transpose() -> None:
    # q.transpose(1, 2).contiguous(): contiguous -> clone -> copy_ -> direct_copy_kernel.
    cpu = _cpu(
        [
            {"rank": 0, "op_id": 1, "parent_id": None, "name": "aten::contiguous"},
            {"rank": 0, "op_id": 2, "parent_id": 1, "name": "aten::clone"},
            {"rank": 0, "op_id": 3, "parent_id": 2, "name": "aten::copy_"},
            {"rank": 0, "op_id": 4, "parent_id": None, "name": "aten::copy_"},
            {"rank": 0, "op_id": 5, "parent_id": None, "name": "aten::contiguous"},
        ]
    )
    gpu = _gpu(
        [
            {"rank": 0, "kind": "kernel", "name": COPY, "op_id": 3},
            {"rank": 0, "kind": "kernel", "name": COPY, "op_id": 4},  # a plain copy_
            {"rank": 0, "kind": "kernel", "name": MUL, "op_id": 5},  # not a copy kernel
            {"rank": 0, "kind": "memcpy", "name": "Memcpy DtoD (Device -> Device)", "op_id": 3},
            {"rank": 0, "kind": "kernel", "name": COPY, "op_id": None},  # unlinked
        ]
    )
    assert_frame_equal(
        classify(gpu, cpu).select("category", "gemm_precision"),
        _expected(
            [
                ("transpose", None),
                ("copy", None),
                ("elementwise", None),
                ("memcpy", None),
                ("copy", None),
            ]
        ),
    )


def test_only_cudnn_kernels_under_cudnn_attention_are_fused_attention() -> None:
    # Issue 19: a fill or a copy that ATen launches inside the attention op is not attention.
    cpu = _cpu(
        [
            {
                "rank": 0,
                "op_id": 1,
                "parent_id": None,
                "name": "aten::scaled_dot_product_attention",
            },
            {
                "rank": 0,
                "op_id": 2,
                "parent_id": 1,
                "name": "aten::_scaled_dot_product_cudnn_attention",
            },
            {"rank": 0, "op_id": 3, "parent_id": 2, "name": "aten::_cudnn_attention_forward"},
            {"rank": 0, "op_id": 4, "parent_id": 3, "name": "aten::fill_"},
        ]
    )
    gpu = _gpu(
        [
            {"rank": 0, "kind": "kernel", "name": "cudnn_helper_kernel_0", "op_id": 3},
            {
                "rank": 0,
                "kind": "kernel",
                "name": "void cudnn::fusion::compute_dot_do_o_specialized<true, 128>(void const*)",
                "op_id": 3,
            },
            {
                "rank": 0,
                "kind": "kernel",
                "name": "void at::native::unrolled_elementwise_kernel<at::native::"
                "direct_copy_kernel_cuda(at::TensorIteratorBase&)>(int)",
                "op_id": 3,
            },
            {
                "rank": 0,
                "kind": "kernel",
                "name": "void at::native::FillFunctor<float>",
                "op_id": 4,
            },
            {"rank": 0, "kind": "memset", "name": "Memset (Device)", "op_id": 3},
        ]
    )
    assert_frame_equal(
        classify(gpu, cpu).select("category", "gemm_precision"),
        _expected(
            [
                ("fused_attention", None),
                ("fused_attention", None),
                ("copy", None),
                ("fill", None),
                ("memset", None),
            ]
        ),
    )


def test_sdpa_math_mask_and_safe_softmax_guard() -> None:
    # Issue 19, as in sample_traces/h200_default/sdpa_math: the float mask is applied with an
    # in-place add (mask); _safe_softmax's isneginf/all/where guard for fully masked rows is
    # the softmax's; the where that builds the mask stays a mask, a scaling mul elementwise.
    math = "aten::_scaled_dot_product_attention_math"
    cpu = _cpu(
        [
            {"rank": 0, "op_id": 1, "parent_id": None, "name": math},
            {"rank": 0, "op_id": 2, "parent_id": 1, "name": "aten::add_"},
            {"rank": 0, "op_id": 3, "parent_id": 1, "name": "aten::mul"},
            {"rank": 0, "op_id": 4, "parent_id": 1, "name": "aten::_safe_softmax"},
            {"rank": 0, "op_id": 5, "parent_id": 4, "name": "aten::where"},
            {"rank": 0, "op_id": 6, "parent_id": 4, "name": "aten::isneginf"},
            {"rank": 0, "op_id": 7, "parent_id": 4, "name": "aten::all"},
            {"rank": 0, "op_id": 8, "parent_id": 1, "name": "aten::where"},
        ]
    )
    where = "void at::native::elementwise_kernel<128, 2, where_kernel_impl(at::TensorIterator&)>()"
    names = [
        (2, "void at::native::elementwise_kernel<128, 2, at::native::CUDAFunctor_add<float> >()"),
        (3, "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float> >()"),
        (5, where),
        (6, "void at::native::vectorized_elementwise_kernel<4, isneginf_kernel_impl()>()"),
        (7, "void at::native::reduce_kernel<512, 1, ReduceOp<bool, and_kernel_cuda>>()"),
        (8, where),
    ]
    gpu = _gpu([{"rank": 0, "kind": "kernel", "name": n, "op_id": i} for i, n in names])
    assert classify(gpu, cpu)["category"].to_list() == [
        "mask", "elementwise", "softmax", "softmax", "softmax", "mask",
    ]  # fmt: skip


def test_gemm_under_convolution_is_convolution() -> None:
    cpu = _cpu(
        [
            {"rank": 0, "op_id": 1, "parent_id": None, "name": "aten::cudnn_convolution"},
            {"rank": 0, "op_id": 2, "parent_id": None, "name": "aten::convolution_backward"},
            {"rank": 0, "op_id": 3, "parent_id": None, "name": "aten::mm"},
        ]
    )
    gpu = _gpu(
        [
            {"rank": 0, "kind": "kernel", "name": SGEMM, "op_id": 1},
            {"rank": 0, "kind": "kernel", "name": "void unknown_helper(int)", "op_id": 2},
            {"rank": 0, "kind": "kernel", "name": MUL, "op_id": 2},  # elementwise stays
            {"rank": 0, "kind": "kernel", "name": SGEMM, "op_id": 3},
        ]
    )
    assert_frame_equal(
        classify(gpu, cpu).select("category", "gemm_precision"),
        _expected(
            [
                ("convolution", None),
                ("convolution", None),
                ("elementwise", None),
                ("gemm", "fp32-cuda-cores"),
            ]
        ),
    )


def test_ancestor_walk_is_bounded_and_per_rank() -> None:
    # A chain of MAX_OP_ANCESTORS + 1 plain ops under aten::contiguous: too far to count.
    chain = [{"rank": 0, "op_id": 0, "parent_id": None, "name": "aten::contiguous"}]
    chain += [
        {"rank": 0, "op_id": i, "parent_id": i - 1, "name": "aten::copy_"}
        for i in range(1, MAX_OP_ANCESTORS + 2)
    ]
    near = MAX_OP_ANCESTORS  # its ancestor MAX_OP_ANCESTORS levels up is op 0
    far = MAX_OP_ANCESTORS + 1
    # Rank 1 reuses the op ids with no transpose context.
    other_rank = [
        {"rank": 1, "op_id": i, "parent_id": None, "name": "aten::copy_"} for i in (near, far)
    ]
    gpu = _gpu(
        [
            {"rank": 0, "kind": "kernel", "name": COPY, "op_id": near},
            {"rank": 0, "kind": "kernel", "name": COPY, "op_id": far},
            {"rank": 1, "kind": "kernel", "name": COPY, "op_id": near},
        ]
    )
    assert_frame_equal(
        classify(gpu, _cpu(chain + other_rank)).select("category"),
        _expected([("transpose", None), ("copy", None), ("copy", None)]).select("category"),
    )


def test_keeps_rows_columns_and_replaces_previous_results() -> None:
    gpu = _gpu(
        [
            {"rank": 0, "kind": "kernel", "name": SGEMM, "op_id": None, "dur_ns": 5},
            {"rank": 0, "kind": "kernel", "name": MUL, "op_id": None, "dur_ns": 7},
            {"rank": 0, "kind": "kernel", "name": SGEMM, "op_id": None, "dur_ns": 9},
        ]
    )
    once = classify(gpu, _cpu([]))
    assert once.columns == [*gpu.columns, "category", "gemm_precision"]
    assert once["dur_ns"].to_list() == [5, 7, 9]
    assert_frame_equal(classify(once, _cpu([])), once)


def test_missing_column_fails_loudly() -> None:
    gpu = _gpu([{"rank": 0, "kind": "kernel", "name": SGEMM, "op_id": None}]).drop("op_id")
    with pytest.raises(AnalysisError, match="op_id"):
        classify(gpu, _cpu([]))


def _kernel_times(path: Path) -> pl.DataFrame:
    """Kernel names and durations read straight from a trace file (no loader involved)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        data = json.load(fh)
    rows = [
        {"kind": "kernel", "name": e["name"], "dur": float(e.get("dur", 0))}
        for e in data["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "Kernel")
    ]
    return pl.DataFrame(rows, schema={"kind": pl.String, "name": pl.String, "dur": pl.Float64})


NVIDIA_TRACES = [
    "hta_alexnet_a100.json.gz",
    "hta_nccl_a100.json.gz",
    "hta_ns_resolution_v100.pt.trace.json.gz",
    "hta_triton_example_a100.json.gz",
    "hta_inference_rank_1_legacy.json.gz",
    "tl_h100_bert_small.json.gz",
    "tl_h100_falconsai_conv.json.gz",
]


@pytest.mark.parametrize("file", NVIDIA_TRACES)
def test_public_nvidia_traces_leave_little_in_other(file: str) -> None:
    path = PUBLIC_TRACES / file
    skip_without(path)
    kernels = _kernel_times(path).with_columns(category_expr())
    other_share = kernels.select(
        pl.col("dur").filter(pl.col("category") == "other").sum() / pl.col("dur").sum()
    ).item()
    assert other_share < 0.02


def test_h200_cudnn_backward_helpers_are_fused_attention() -> None:
    # cuDNN's backward runs helpers such as cudnn::fusion::convert_dq_to_16bits, which the name
    # alone would call a copy; its launching op (aten::_cudnn_attention_backward) says otherwise.
    path = SAMPLES / "h200_backward_large" / "sdpa_cudnn.json.gz"
    skip_without(path)
    trace = load(path)
    out = classify(trace.gpu, trace.cpu)
    # Launched before the profiling window, a helper has no launching op: only its name can
    # classify it, as a copy. The kernel table names it by its linked launches.
    linked = out.filter(pl.col("linked"))
    assert set(linked.filter(pl.col("kind") == "kernel")["category"]) == {"fused_attention"}
    assert set(out.filter(pl.col("kind") == "memset")["category"]) == {"memset"}
    table = kernel_table(trace)
    assert set(table.filter(pl.col("kind") == "kernel")["category"]) == {"fused_attention"}


# Issue 19 on the real LLM/recsys traces of ../shared/traces/corpus: (trace, kernel-name
# prefix after "void ", the category every such kernel gets).
CORPUS_KERNELS = [
    ("tl_b200_eager", "bmm_MxE4m3_MxE2m1MxE4m3", "gemm"),
    ("tl_b200_eager", "bmm_Bfloat16_MxE2m1", "gemm"),
    ("tl_b200_eager", "tensorrt_llm::kernels::quantize_with_block_size", "elementwise"),
    ("tl_b200_eager", "vllm::reshape_and_cache_flash_kernel", "copy"),
    ("tl_b200_eager", "vllm::rotary_embedding_kernel", "elementwise"),
    ("new_tl_xdit_flux_sage_mi300x", "sage_fwd", "fused_attention"),
    ("new_tl_sglang_prefilldecode_mi300x", "create_flashinfer_kv_indices_triton", "indexing"),
    ("new_tl_sglang_prefilldecode_mi300x", "_ZN7ck_tile6kentryILi2ENS_38FmhaBatchPrefill",
     "fused_attention"),
    ("hta_nccl_128rank_sampled_rank0", "split_embedding_backward_codegen_", "indexing"),
    ("hta_nccl_128rank_sampled_rank0", "split_embedding_codegen_forward_", "indexing"),
    ("deepseek_h800_train_ep64", "dpsk::ep::internode::", "communication"),
    ("deepseek_h800_train_ep64", "rotary_kernel", "elementwise"),
]  # fmt: skip


@pytest.mark.parametrize("trace", sorted({t for t, _, _ in CORPUS_KERNELS}))
def test_corpus_kernel_families(trace: str) -> None:
    path = CORPUS_TRACES / f"{trace}.json.gz"
    skip_without(path)
    classified = kernel_table(load(path, cache=False)).with_columns(
        own=pl.col("name").str.replace(r"^void\s+", "")
    )
    for _, prefix, category in (k for k in CORPUS_KERNELS if k[0] == trace):
        found = classified.filter(pl.col("own").str.starts_with(prefix))
        assert found.height, prefix
        assert found["category"].unique().to_list() == [category], prefix
    # No kernel outside attention is called attention because of "flash" in its name.
    attention = classified.filter(pl.col("category") == "fused_attention")["own"]
    assert not attention.str.contains("(?i)reshape_and_cache|kv_indices|quantiz").any()


def test_ancestor_walk_by_rows_is_bounded() -> None:
    # The same chain with op_id equal to the row, as linking numbers ops: the gather walk.
    chain = [{"rank": 0, "op_id": 0, "parent_id": None, "name": "aten::contiguous"}]
    chain += [
        {"rank": 0, "op_id": i, "parent_id": i - 1, "name": "aten::copy_"}
        for i in range(1, MAX_OP_ANCESTORS + 2)
    ]
    gpu = _gpu(
        [
            {"rank": 0, "kind": "kernel", "name": COPY, "op_id": MAX_OP_ANCESTORS},
            {"rank": 0, "kind": "kernel", "name": COPY, "op_id": MAX_OP_ANCESTORS + 1},
            {"rank": 1, "kind": "kernel", "name": COPY, "op_id": MAX_OP_ANCESTORS},  # no such op
        ]
    )
    assert_frame_equal(
        classify(gpu, _cpu(chain)).select("category"),
        _expected([("transpose", None), ("copy", None), ("copy", None)]).select("category"),
    )


@pytest.mark.parametrize(
    "path",
    [
        SAMPLES / "h200_backward_large" / "sdpa_cudnn.json.gz",
        PUBLIC_TRACES / "hta_nccl_a100.json.gz",
        PUBLIC_TRACES / "tl_h100_falconsai_conv.json.gz",
    ],
    ids=lambda p: p.name,
)
def test_op_context_by_rows_matches_the_joins(path: Path) -> None:
    skip_without(path)
    trace = load(path, cache=False)
    by_rows = classify_module._op_context_by_rows(trace.gpu, trace.cpu)
    by_joins = classify_module._op_context_flags(trace.gpu.lazy(), trace.cpu.lazy()).collect()
    assert by_rows.height > 0
    assert_frame_equal(by_rows.sort("rank", "op_id"), by_joins.sort("rank", "op_id"))
