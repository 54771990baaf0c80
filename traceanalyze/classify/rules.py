"""Kernel classification rules, as data.

Four ordered tables drive :mod:`traceanalyze.classify.classify`:

* ``OWN_NAME_RULES``: (category, regex on the kernel's own name), checked first.
* ``NAME_RULES``: (category, regex on the kernel name). The first match wins, so specific
  families come before the generic ones that would also match them (fused attention before
  softmax, convolution before GEMM since implicit-GEMM convolutions say "gemm", copy before
  elementwise since PyTorch's copy kernels are elementwise templates).
* ``OP_REFINEMENTS``: where the name alone is ambiguous, the CPU op that launched the kernel (or
  one of its nearest ancestors) decides.
* ``GEMM_PRECISION_RULES``: (precision, regex) for kernels classified as ``gemm``.

Patterns use the Rust ``regex`` syntax that Polars speaks: no look-around, ``(?i)`` for
case-insensitive matching. Names were surveyed on real traces from A100, V100, H100, MI210,
MI250 and MI300 and on the kernel families docs/architecture.md lists.
"""

from __future__ import annotations

from dataclasses import dataclass

# The taxonomy, in the order docs/architecture.md lists it.
CATEGORIES: tuple[str, ...] = (
    "fused_attention",
    "gemm",
    "convolution",
    "softmax",
    "transpose",
    "memcpy",
    "memset",
    "copy",
    "fill",
    "mask",
    "elementwise",
    "reduction",
    "normalization",
    "indexing",
    "optimizer",
    "communication",
    "other",
)

# GPU activities whose kind alone says what they are (the ``kind`` column of the gpu frame).
KIND_CATEGORIES: tuple[tuple[str, str], ...] = (
    ("memcpy", "memcpy"),
    ("memset", "memset"),
)

FALLBACK_CATEGORY = "other"

# Families decided by the kernel's *own* name: the function's unqualified name, without its
# namespaces, template arguments and parameters (``void fbgemm_gpu::foo_kernel<c10::Half>(...)``
# -> ``foo_kernel``; see ``own_name_expr``). Checked before ``NAME_RULES``, whose generic
# patterns would otherwise match a word in a template argument, a parameter type or a
# namespace (FBGEMM's ``fbgemm_gpu::`` says "gemm"; vLLM's ``reshape_and_cache_flash_kernel``
# and FlashInfer's index builders say "flash").
OWN_NAME_RULES: tuple[tuple[str, str], ...] = (
    # SageAttention (quantised QK^T), Triton/vLLM unified attention, FlashInfer/ck_tile/aiter
    # prefill and decode kernels.
    (
        "fused_attention",
        r"(?i)^sage_?(fwd|bwd|attn)|^(kernel_)?unified_attention|^batch(_?prefill|_?decode)"
        r"|^single_(prefill|decode)|^(mha|fmha)_(fwd|bwd|batch)|^paged_attention",
    ),
    # Rotary position embeddings are pointwise math on q and k (not an embedding lookup).
    ("elementwise", r"(?i)rotary|(^|_)rope(_|$)"),
    # KV-cache writes scatter the new keys and values into the (paged) cache: copies, not
    # attention, whatever op launched them.
    ("copy", r"(?i)reshape_and_cache|store_kv_?cache|concat_and_cache|kv_?cache_(write|store)"),
    # Index builders for paged attention, FBGEMM/ATen embedding lookups and their backward
    # (split_embedding_*_codegen_*, compute_grad_weight, bounds checks) and FBGEMM's sparse
    # feature shuffles (permute_2D_*, bucketize, offsets): gathers, not layout transposes.
    (
        "indexing",
        r"(?i)kv_ind(ices|ptr)|^split_embedding|embedding_(forward|backward|bag)"
        r"|^compute_grad_weight|bounds_check_indices|^(batched_)?embedding"
        r"|^permute_(1d|2d|indices|lengths|sparse)|bucketize_sparse|^_?offsets_range|jagged",
    ),
    # A norm fused with the quantisation of its output (aiter add_rmsnorm_quant_kernel) is
    # the norm's.
    ("normalization", r"(?i)(rms|layer)_?norm\w*quant"),
    # Quantisation and dequantisation: scale (per token, channel or block) and cast.
    (
        "elementwise",
        r"(?i)quantiz|_quant(_|$)|^sage_quant|cast_to_fp8|fp8_quant|to_fp8|cast_back"
        r"|fp8_?rowwise_to_float|hfp8_to_float|dequant|fp8_qparam",
    ),
    # GEMMs named by their operand formats: trtllm-gen bmm_MxE4m3_*, bmm_Bfloat16_MxE2m1*,
    # gemm_*, Triton matmul_ogs (MoE), DeepGEMM/CUTLASS grouped GEMMs.
    ("gemm", r"(?i)^(b?mm|gemm|gemv)_|matmul_ogs|grouped_gemm|^_?matmul"),
)

NAME_RULES: tuple[tuple[str, str], ...] = (
    # NCCL/RCCL names embed the reduction ("Sum") and a dtype, so they go before everything.
    # DeepEP's expert-parallel dispatch and combine (dpsk::ep::internode::*, over NVSHMEM) are
    # all-to-all communication too.
    (
        "communication",
        r"(?i)nccl|rccl|msccl|multimem_|cross_device_reduce|deep_?ep::|dpsk::ep::|nvshmem"
        r"|(^|[^a-z])(all_?reduce|all_?gather|reduce_?scatter|all_?to_?all)",
    ),
    # torch.compile (Inductor) names kernels triton_{poi,red,per,tem}_fused_<sorted aten ops>_<n>.
    # The prefix is the reliable part: a pointwise prologue of SDPA is called
    # triton_poi_fused__scaled_dot_product_..._attention_0 but is not an attention kernel.
    ("fused_attention", r"^triton_.*(flex_attention|flex_decoding)|^triton_tem_.*(attention|sdpa)"),
    ("convolution", r"^triton_tem_.*conv"),
    ("gemm", r"^triton_tem_"),  # the remaining templates are mm/bmm/addmm
    ("softmax", r"^triton_(red|per)_.*softmax"),
    # Inductor sorts the op names, so a decomposed RMSNorm reads "mean_..._pow_rsqrt" and a
    # decomposed LayerNorm "..._rsqrt_..._var_mean".
    (
        "normalization",
        r"^triton_(red|per)_.*(layer_norm|group_norm|batch_norm|rms_norm"
        r"|mean.*pow.*rsqrt|rsqrt.*var_mean)",
    ),
    ("reduction", r"^triton_(red|per)_"),
    ("elementwise", r"^triton_poi_"),
    # FlashAttention 2/3 (pytorch_flash::, flash::), memory-efficient (fmha_cutlassF/B,
    # AttentionKernel), cuDNN (cudnn_generated_fort_native_sdpa_*), Blackwell fmhaSm100*,
    # composable-kernel/aiter fmha on ROCm, Triton attn_fwd/_attn_bwd, paged attention.
    (
        "fused_attention",
        r"(?i)flash|fmha|sdpa|attention|attn_(fwd|bwd)|fused_attn|mha_(fwd|bwd)|xformers",
    ),
    # cuDNN/MIOpen/CUTLASS convolutions, including the implicit-GEMM ones that also say "gemm",
    # and their helpers (cask offsets, FFT and Winograd transforms, wgrad reductions).
    (
        "convolution",
        r"(?i)convol|conv[123]d|conv_(fwd|bwd|wrw|dgrad|wgrad)|grouped_conv|naive_conv"
        r"|miopen\w*conv|igemm_(fwd|bwd|wrw)|implicit_?gemm|scudnn|winograd|fprop|dgrad|wgrad"
        r"|cask_cudnn|fft2d_(r2c|c2r).*cudnn|cudnn::cnn::|nhwckrsc",
    ),
    # cuBLAS/cuBLASLt (sgemm, xmma, nvjet, gemv, split-K reduction and epilogue helpers),
    # CUTLASS, hipBLASLt/Tensile (Cijk_*), rocBLAS, composable-kernel gemm, Triton matmul.
    # "fbgemm" (FBGEMM's namespace, in the names of its embedding and quantisation kernels)
    # is not a GEMM: a letter other than b before "gemm", or none.
    (
        "gemm",
        r"(?i)(^|[^b]|[^f]b)gemm|gemv|nvjet|cijk_|cublas|matmul|(^|[^a-z])b?mm_kernel|splitkreduce"
        r"|reducesplitk|splitk_reduce|wgmma|cutlass.*(tensorop|simt)|rocblas|hipblaslt",
    ),
    ("softmax", r"(?i)softmax"),
    # PyTorch's layer/group norm kernels (RowwiseMoments, GammaBetaBackward, ...), cuDNN
    # bn_fw/bn_bw, apex cuApplyLayerNorm/cuComputeGradInput, batch_norm_* (also inside
    # elementwise templates).
    (
        "normalization",
        r"(?i)layer_?norm|rms_?norm|group_?norm|batch_?norm|instance_?norm|bn_(fw|bw)"
        r"|rowwisemoments|gammabeta|computeinternalgradients|computefusedparams"
        r"|backwardfusedparams|cuapply(layer|rms)norm|cucomputegradinput|cucomputepartgrad",
    ),
    # Layout changes: transpose/permute kernels and cuDNN's NCHW<->NHWC conversions (a cost that
    # channels_last removes, so it is worth seeing apart from the convolution itself).
    ("transpose", r"(?i)transpose|permute|nchw_?to_?nhwc|nhwc_?to_?nchw|nchw2nhwc|nhwc2nchw"),
    (
        "mask",
        r"(?i)masked_fill|masked_scatter|masked_select|triu_tril|where_kernel|mask_kernel"
        r"|causal_mask|attn_mask",
    ),
    # multi_tensor_apply_kernel is the foreach machinery that fused optimizers run on. "_adam"
    # and "adam_" keep "hadamard" out; "lamb_" keeps "lambda" out.
    (
        "optimizer",
        r"(?i)multi_tensor_apply|fused_?adam|_adam|adam_|adamw|(^|[^a-z])sgd|lamb_|adagrad|rmsprop"
        r"|_foreach_",
    ),
    # "index_" rather than "index": elementwise_kernel_with_index (arange) is not indexing.
    (
        "indexing",
        r"(?i)index_|indexselect|indexfunc|indexing|gather|scatter|embedding|take_kernel"
        r"|put_kernel|nonzero|unique|upsample|grid_sampler|interpolat|roi_align|bucketize"
        r"|searchsorted|repeat_interleave|one_hot|partials_per_segment",
    ),
    # Copies and casts: direct_copy_kernel_cuda, bfloat16_copy_kernel_cuda, CatArrayBatchedCopy,
    # memcpy128 (a device copy inside a replayed CUDA graph runs as this kernel),
    # ROCm's __amd_rocclr_copyBuffer*, MIOpen's CastTensor/CopyTensor, im2col/col2im.
    (
        "copy",
        r"(?i)copy|memcpy|_to_copy|cast_kernel|convert_|concat|catarray|cat_array"
        r"|subtensoropwith(cast|sub)tensor|im2col|col2im|reshape_and_cache",
    ),
    # FillFunctor, ROCm's __amd_rocclr_fillBuffer*, MIOpen's SetTensor (SubTensorOpWithScalar).
    ("fill", r"(?i)fill|memset|zero_kernel|subtensoropwithscalar"),
    # Reductions, scans, sorts, pooling (a windowed reduction) and losses.
    (
        "reduction",
        r"(?i)reduce|reduction|cumsum|cumprod|scan|sort|topk|radix|argmax|argmin|logsumexp|nll"
        r"|cross_?entropy|loss|mse_|bce_|pool|welford|histc|norm_kernel",
    ),
    (
        "elementwise",
        r"(?i)elementwise|pointwise|functor|unrolled|vectorized|activation|gelu|relu|silu|swiglu"
        r"|geglu|sigmoid|tanh|dropout|distribution|philox|curand|random|bernoulli|clamp"
        r"|threshold|scale|bias|rotary|(^|[^a-z])rope",
    ),
)


@dataclass(frozen=True)
class OpRefinement:
    """Reassign a name-based category from the CPU op context of a kernel.

    ``op_pattern`` is matched against the innermost CPU op that launched the kernel and its
    nearest ancestors (see ``MAX_OP_ANCESTORS``). ``applies_to`` lists the name-based categories
    it may override; ``None`` means every kernel (memcpy/memset activities are never refined).
    """

    category: str
    op_pattern: str
    applies_to: tuple[str, ...] | None
    # Further conditions: a regex on the kernel's name, and one on the innermost launching op
    # alone (not its ancestors).
    kernel_pattern: str | None = None
    launch_op_pattern: str | None = None


# How many ancestors above the innermost op are inspected. aten::contiguous -> aten::clone ->
# aten::copy_ -> kernel needs two; module-level ops far above must not leak into the kernels
# below them, hence a small bound.
MAX_OP_ANCESTORS = 4

OP_REFINEMENTS: tuple[OpRefinement, ...] = (
    # cuDNN SDPA launches helper kernels of its own (cudnn::fusion::convert_dq_to_16bits,
    # compute_dot_do_o) from inside these ops: part of the fused attention. Only cuDNN's own
    # kernels: a copy or an index kernel that ATen launches there is not attention.
    OpRefinement(
        "fused_attention",
        r"^aten::(_cudnn_attention_(forward|backward)|_scaled_dot_product_cudnn_attention)",
        None,
        kernel_pattern=r"(?i)cudnn",
    ),
    # _safe_softmax (SDPA math) guards fully masked rows after the softmax: isneginf, all and
    # a where that puts 0 in such rows. Part of the softmax, not a mask.
    OpRefinement(
        "softmax",
        r"^aten::_safe_softmax$",
        ("mask", "elementwise", "reduction", "fill"),
    ),
    # SDPA math applies a float attention mask (its own causal mask included) with an in-place
    # add on the scores: the mask's application, not other elementwise math.
    OpRefinement(
        "mask",
        r"^aten::_scaled_dot_product_attention_math",
        ("elementwise",),
        launch_op_pattern=r"^aten::add_?$",
    ),
    # Traces rarely record shapes and strides, so whether a copy permutes data can only be read
    # from its context: a copy kernel under aten::contiguous (or a transpose/permute/t op) is
    # assumed to materialise a transposed layout. This is a heuristic: .contiguous() of a
    # sliced or expanded tensor is counted too, and .reshape() of a transposed tensor is not.
    OpRefinement("transpose", r"^aten::(transpose|permute|t|contiguous)$", ("copy",)),
    # cuDNN and the slow convolution paths run plain GEMM kernels (volta_sgemm_*, cutlass
    # s1688gemm, ampere_gcgemm for FFT) and unnamed helpers as steps of a convolution.
    OpRefinement(
        "convolution",
        r"^aten::(_?convolution|cudnn_convolution|miopen_convolution|miopen_depthwise_convolution"
        r"|convolution_backward|_slow_conv2d|slow_conv|_conv_depthwise2d|mkldnn_convolution"
        r"|conv[123]d$|conv_transpose[123]d$)",
        ("gemm", "other"),
    ),
)

# Input precision of GEMM kernels, first match wins. Tensile/hipBLASLt names carry the data type
# as the first token after the index strings: Cijk_Ailk_Bljk_<type>_..., B = bf16, H = fp16,
# S = fp32, F8/B8 = fp8, I8 = int8.
GEMM_PRECISION_RULES: tuple[tuple[str, str], ...] = (
    # 4-bit floats (MXFP4/NVFP4 E2M1), usually the weights beside bf16 or fp8 activations.
    ("fp4", r"(?i)e2m1|fp4"),
    ("fp8", r"(?i)fp8|e4m3|e5m2|f8f6f4|(^|_)[fb]8"),
    ("int8", r"(?i)int8|imma|i8i8|i8i32|s8s8|u8s8|_i8|tensorop_i\d"),
    ("bf16", r"(?i)bf16|bfloat16|cijk_a[a-z]+_b[a-z]+_b[a-z]*_"),
    ("fp16", r"(?i)f16|fp16_|half|hgemm|h884|h1688|h16816|cijk_a[a-z]+_b[a-z]+_h[a-z]*_"),
    # CUTLASS "s1688gemm" is the fp32-in/TF32-tensor-op GEMM on sm80+.
    ("tf32", r"(?i)tf32|xf32|s1688"),
    # Plain fp32 on the CUDA cores (SIMT): cuBLAS sgemm, CUTLASS simt, the fp32 xmma kernels
    # cuBLAS picks when TF32 is off, complex fp32 (gcgemm) used by FFT convolutions.
    ("fp32-cuda-cores", r"(?i)sgemm|ffma|gemm_f32|_f32f32_f32f32_f32|simt|cgemm|sgemv"),
    # Tensor-core kernels whose names do not say the dtype (nvjet_tst_*, some xmma/cutlass).
    ("tensor-core (unknown dtype)", r"(?i)nvjet|tensorop|wmma|xmma|wgmma|hmma|gmma|tcgen05|umma"),
)

UNKNOWN_PRECISION = "unknown"
