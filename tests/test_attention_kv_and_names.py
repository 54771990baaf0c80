"""`attention` on inference traces: KV-cache writes timed apart, head size and GQA ratio from
paged kernels' template arguments, mask none where the op takes none, varlen FLOPs exact
where every sequence is as long as the longest, and the composed finding summed over rows.

Micro-traces first (times in microseconds, as Kineto writes them), then the corpus traces
(skipped when absent), their figures recomputed by hand from the raw JSON.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceanalyze
from tests.conftest import CORPUS_TRACES, skip_without
from tests.micro import annotation, call, kernel, load, span
from traceanalyze.analyses.attention import attention
from traceanalyze.analyses.attention.findings import findings

Event = dict[str, Any]
# As on tl_sglang_decode (MI300X): aiter's ll4mi kernel, HEAD_SIZE 128, GQA_RATIO 4.
LL4MI = (
    "void paged_attention_ll4mi_QKV_mfma16_kernel<0, __hip_bfloat16, __hip_bfloat16, "
    "(vllm::Fp8KVCacheDataType)0, 1, 128, 256, false, 4, 1, ck_tile::ComposedAttention<0u, "
    "false> >(__hip_bfloat16 const*, float*)"
)
# vLLM's own ROCm version: an OUTT type after KV_DTYPE, HEAD_SIZE 64, GQA_RATIO 8.
LL4MI_VLLM = (
    "void paged_attention_ll4mi_QKV_mfma16_kernel<__hip_bfloat16, __hip_bfloat16, "
    "(vllm::Fp8KVCacheDataType)0, __hip_bfloat16, 16, 64, 256, false, 8>(__hip_bfloat16 const*)"
)
REDUCE = (
    "void paged_attention_ll4mi_reduce_kernel<__hip_bfloat16, __hip_bfloat16, 128, 128, 256, 3, "
    "false>(__hip_bfloat16*)"
)
STORE_KV = "void (anonymous namespace)::store_kvcache<2048l, 4, false, long>(StoreKVCacheParams)"
RESHAPE = "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, unsigned char>(long const*)"
FMHA = "fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128PersistentContext"
BF16 = "c10::BFloat16"


def test_graph_replay_reads_head_size_and_gqa_ratio_and_times_kv_writes_apart(
    tmp_path: Path,
) -> None:
    # A replayed decode graph: store_kvcache, then paged attention and its reduce, twice.
    events = [annotation("ProfilerStep#0", 0, 1000), call("hipGraphLaunch", 5, 5, 1)]
    for t0 in (100, 300):
        events += [
            kernel(STORE_KV, t0, 5, 1),
            kernel(LL4MI, t0 + 10, 50, 1),
            kernel(REDUCE, t0 + 70, 10, 1),
        ]
    (row,) = attention(load(tmp_path, events)).rows.to_dicts()
    assert {k: row[k] for k in ("implementation", "call_site", "calls_per_iter", "head_dim",
                                "gqa_ratio", "heads_q", "kernels_per_call", "gpu_us_per_call",
                                "kv_cache_write_us_per_call", "shapes_from")} == {
        "implementation": "paged", "call_site": "(CUDA graph replay)", "calls_per_iter": 2.0,
        "head_dim": 128, "gqa_ratio": 4, "heads_q": None, "kernels_per_call": 2.0,
        "gpu_us_per_call": 60.0, "kv_cache_write_us_per_call": 5.0,
        "shapes_from": "kernel names",
    }  # fmt: skip
    assert row["flops_per_call"] is None and "graph replay" in row["flops_note"]
    assert row["mask"] is None  # no op says: unknown
    assert not any("store_kvcache" in k for k in row["kernels"])


def test_vllm_rocm_ll4mi_name_with_an_output_type(tmp_path: Path) -> None:
    events = [
        annotation("ProfilerStep#0", 0, 1000),
        call("hipGraphLaunch", 5, 5, 1),
        kernel(LL4MI_VLLM, 100, 50, 1),
    ]
    row = attention(load(tmp_path, events)).rows.row(0, named=True)
    assert (row["head_dim"], row["gqa_ratio"]) == (64, 8)


def _vllm_call(t0: float, correlation: int, *, kv_inside: bool) -> list[Event]:
    """vLLM's attention op (q, k, v [tokens, heads, dim], output, layer name) with its KV-cache
    write inside it (FlashInfer backend, tl_b200_eager) or in its own op just before it
    (unified_kv_cache_update, tl_vllm_piecewise_hipgraph_mi300)."""
    dims = [[32, 8, 64], [32, 1, 64], [32, 1, 64], [32, 8, 64], []]
    types = [BF16, BF16, BF16, BF16, "str"]
    op = span("cpu_op", "vllm::unified_attention_with_output", t0 + 20, 40,
              **{"Input Dims": dims, "Input type": types, "Concrete Inputs": [""] * 5})  # fmt: skip
    writes = [
        call("cudaLaunchKernel", t0 + (25 if kv_inside else 5), 2, correlation),
        kernel(RESHAPE, t0 + 100, 4, correlation),
    ]
    before = [] if kv_inside else [span("cpu_op", "vllm::unified_kv_cache_update", t0 + 2, 10)]
    return [
        *before,
        op,
        *writes,
        call("cudaLaunchKernel", t0 + 30, 2, correlation + 1),
        kernel(FMHA, t0 + 110, 14, correlation + 1),
    ]


@pytest.mark.parametrize("kv_inside", [True, False], ids=["inside", "own_op_before"])
def test_kv_cache_writes_are_not_attention_compute(tmp_path: Path, kv_inside: bool) -> None:
    events = [annotation("ProfilerStep#0", 0, 1000)]
    events += _vllm_call(0, 1, kv_inside=kv_inside) + _vllm_call(300, 3, kv_inside=kv_inside)
    (row,) = attention(load(tmp_path, events)).rows.to_dicts()
    assert {k: row[k] for k in ("implementation", "calls_per_iter", "kernels_per_call",
                                "gpu_us_per_call", "kv_cache_write_us_per_call", "heads_q",
                                "heads_kv", "gqa_ratio", "head_dim", "mask")} == {
        "implementation": "flashinfer", "calls_per_iter": 2.0, "kernels_per_call": 1.0,
        "gpu_us_per_call": 14.0, "kv_cache_write_us_per_call": 4.0, "heads_q": 8,
        "heads_kv": 1, "gqa_ratio": 8, "head_dim": 64, "mask": "none",
    }  # fmt: skip


def test_mask_unknown_where_the_op_takes_one_but_recorded_no_arguments(tmp_path: Path) -> None:
    # No record_shapes: SDPA takes an attn_mask, so whether it had one is unknown; flash's op
    # takes none.
    def step(name: str) -> list[Event]:
        return [
            annotation("ProfilerStep#0", 0, 100),
            span("cpu_op", name, 10, 50),
            call("cudaLaunchKernel", 20, 5, 1),
            kernel("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>()", 30, 20,
                   1),
        ]  # fmt: skip

    sdpa = attention(load(tmp_path, step("aten::scaled_dot_product_attention"), "a.json"))
    flash = attention(load(tmp_path, step("aten::_scaled_dot_product_flash_attention"), "b.json"))
    assert sdpa.rows["mask"].to_list() == [None]
    assert flash.rows["mask"].to_list() == ["none"]


def _prefill(tokens: int) -> list[Event]:
    """aiter::mha_batch_prefill (q [tokens, 32, 128], the paged cache, cu_seqlens_q [16], ...,
    max_seqlen_q 1024, max_seqlen_k 1024, ..., is_causal True), as on the SGLang MI300X trace."""
    dims = [[tokens, 32, 128], [1000, 16, 8, 128], [1000, 16, 8, 128], [16], [16], [1000],
            [], [], [], [], [], [], []]  # fmt: skip
    types = [BF16, BF16, BF16, "int", "int", "int", "Scalar", "Scalar", "Scalar", "Scalar",
             "Scalar", "Scalar", "Scalar"]  # fmt: skip
    concrete = ["", "", "", "", "", "", "1024", "1024", "0.", "0.088", "0.", "False", "True"]
    return [
        annotation("ProfilerStep#0", 0, 1000),
        span("cpu_op", "aiter::mha_batch_prefill", 10, 50,
             **{"Input Dims": dims, "Input type": types, "Concrete Inputs": concrete}),
        call("hipLaunchKernel", 20, 5, 1),
        kernel("_ZN7ck_tile6kentryILi2ENS_38FmhaBatchPrefillWithPagedKVCacheKernel", 30, 500, 1),
    ]  # fmt: skip


@pytest.mark.parametrize(("tokens", "exact"), [(15 * 1024, True), (15 * 1024 - 100, False)])
def test_varlen_flops_exact_when_every_sequence_is_the_longest(
    tmp_path: Path, tokens: int, exact: bool
) -> None:
    row = attention(load(tmp_path, _prefill(tokens))).rows.row(0, named=True)
    assert row["flops_per_call"] == 4 * 15 * 32 * 1024 * 1024 * 128 // 2
    if exact:
        assert row["flops_note"] is None
    else:
        assert "upper bound" in row["flops_note"]


def test_composed_finding_sums_score_writes_and_estimates_over_rows() -> None:
    # Two composed rows with different shapes: 2 calls writing 100 MiB and 4 writing 10 MiB.
    mib = 1024 * 1024
    rows = pl.DataFrame(
        {
            "implementation": ["composed", "composed"],
            "source": ["composed", "composed"],
            "direction": ["forward", "forward"],
            "calls_per_iter": [2.0, 4.0],
            "gpu_us_per_iter": [200.0, 40.0],
            "gpu_us_per_call": [100.0, 10.0],
            "share_of_gpu_activity_pct": [20.0, 4.0],
            "scores_bytes": [100 * mib, 10 * mib],
            "mask_copies": [False, False],
            "fused_estimate_us": [5.0, 1.0],
            "fused_estimate_source": ["the GPU's bf16 peak"] * 2,
            "why_not": [None, None],
            "mask": ["none", "none"],
            "blocks_q": [None, None],
        },
        schema_overrides={"why_not": pl.String, "blocks_q": pl.Int64},
    )
    host = pl.DataFrame(schema={"kind": pl.String, "note": pl.String})
    said = findings(rows, host, 1000.0, 1)[1]
    assert "the scores write 240 MiB per iteration (10 MiB to 100 MiB per call)" in said
    assert "a fused kernel would need ~14 µs per iteration against 240 µs" in said


def _corpus(name: str) -> Path:
    path = CORPUS_TRACES / name
    skip_without(path)
    return path


def test_b200_flashinfer_row_without_its_kv_cache_writes() -> None:
    # By hand (tests' docstring): 36 vllm::unified_attention_with_output ops; the kernels
    # launched inside them: 36 reshape_and_cache_flash (162.686 µs), and fmhaSm100 kernels of
    # two kinds, the layers alternating: 18 ...PagedKvCausal... (273.277 µs) and 18
    # ...PagedKvSlidingOrChunkedCausal... (212.544 µs), so 15.182 and 11.808 µs of attention
    # per call, a row each; the KV-cache write before each (4.519 µs a call over all 36):
    # 4.524 µs before a causal one, 4.514 before a sliding-window one.
    rows = attention(traceanalyze.load(_corpus("tl_b200_eager.json.gz"))).rows
    assert rows.select("implementation", "calls_per_iter", "kernels_per_call").rows() == [
        ("flashinfer", 18.0, 1.0), ("flashinfer", 18.0, 1.0),
    ]  # fmt: skip
    assert rows["gpu_us_per_call"].to_list() == pytest.approx([15.182056, 11.808], abs=1e-5)
    assert "SlidingOrChunked" in rows["kernels"][1][0]
    kv_us = rows["kv_cache_write_us_per_call"].to_list()
    assert kv_us == pytest.approx([4.524444, 4.513667], abs=1e-5)
    assert rows["mask"].to_list() == ["none", "none"]


def test_vllm_mi300_kv_cache_update_op_is_its_calls_kv_write() -> None:
    # By hand: 24 vllm::unified_kv_cache_update ops launch 24 reshape_and_cache_flash kernels
    # (24.432 µs a call); the attention ops' kernels take 214.454 µs a call.
    rows = attention(traceanalyze.load(_corpus("tl_vllm_piecewise_hipgraph_mi300.json.gz"))).rows
    row = rows.row(0, named=True)
    assert row["gpu_us_per_call"] == pytest.approx(214.454417, abs=1e-5)
    assert row["kv_cache_write_us_per_call"] == pytest.approx(24.432125, abs=1e-5)


def test_sglang_decode_paged_kernels_say_head_size_and_gqa_ratio() -> None:
    # By hand: the ll4mi kernel's template arguments are <0, bf16, bf16, KV_DTYPE 0, BLOCK 1,
    # HEAD_SIZE 128, THREADS 256, ALIBI false, GQA_RATIO 4, MTP 1, ...>; 36 store_kvcache
    # kernels (4.821 µs a call) run in the replay beside 36 paged calls (59.107 µs a call).
    rows = attention(traceanalyze.load(_corpus("tl_sglang_decode.json.gz"))).rows
    row = rows.row(0, named=True)
    assert (row["head_dim"], row["gqa_ratio"], row["calls_per_iter"]) == (128, 4, 36.0)
    assert row["gpu_us_per_call"] == pytest.approx(59.107472, abs=1e-5)
    assert row["kv_cache_write_us_per_call"] == pytest.approx(4.820694, abs=1e-5)


def test_sglang_prefill_of_equal_sequences_has_exact_flops() -> None:
    # aiter::mha_batch_prefill: q [15360, 32, 128], 15 sequences (cu_seqlens_q [16]), max 1024
    # each way, causal: all 15 sequences are 1024 long, 4·15·32·1024²·128 / 2 FLOPs.
    rows = attention(traceanalyze.load(_corpus("new_tl_sglang_prefilldecode_mi300x.json.gz"))).rows
    row = rows.row(0, named=True)
    assert row["flops_per_call"] == 128_849_018_880 and row["flops_note"] is None


def test_kernels_captured_into_a_graph_are_calls_without_gpu_time(tmp_path: Path) -> None:
    # A HIP graph capture (as on tl_sglang_graph_capture_bs32_mi300x): the launches ran
    # nothing (no kernel with their correlation); roctracer names the kernel on the launch.
    def launch(ts: float, correlation: int, name: str) -> Event:
        return span("cuda_runtime", "hipLaunchKernel", ts, 2, correlation=correlation,
                    kernel=name)  # fmt: skip

    events = [annotation("ProfilerStep#0", 0, 1000), call("hipStreamBeginCapture", 1, 1, 90)]
    for i, t0 in enumerate((100, 300)):
        events += [
            span("cpu_op", "sglang::store_cache", t0, 10),
            launch(t0 + 2, 10 * i + 1, STORE_KV),
            span("cpu_op", "sglang_profiler::attention_paged_attention_ragged_100", t0 + 20, 50),
            launch(t0 + 30, 10 * i + 2, LL4MI),
            launch(t0 + 40, 10 * i + 3, REDUCE),
        ]
    result = attention(load(tmp_path, events))
    (row,) = result.rows.to_dicts()
    assert {k: row[k] for k in ("implementation", "source", "call_site", "calls_per_iter",
                                "kernels_per_call", "gpu_us_per_call", "head_dim", "gqa_ratio",
                                "dtype", "flops_per_call")} == {
        "implementation": "paged", "source": "captured",
        "call_site": "sglang_profiler::attention_paged_attention_ragged_100 (captured into a "
        "CUDA graph)", "calls_per_iter": 2.0, "kernels_per_call": 0.0, "gpu_us_per_call": None,
        "head_dim": 128, "gqa_ratio": 4, "dtype": "bf16", "flops_per_call": None,
    }  # fmt: skip
    assert "captured into a CUDA/HIP graph" in row["flops_note"]
    assert "were captured into a CUDA/HIP graph, not run" in result.findings[0]


def test_a_launch_that_ran_is_not_captured(tmp_path: Path) -> None:
    # The same launch with its kernel in the trace: an ordinary (kernel) call, not a capture.
    events = [
        annotation("ProfilerStep#0", 0, 1000),
        span("cuda_runtime", "hipLaunchKernel", 30, 2, correlation=1, kernel=LL4MI),
        kernel(LL4MI, 100, 50, 1),
    ]
    (row,) = attention(load(tmp_path, events)).rows.to_dicts()
    assert (row["source"], row["gpu_us_per_call"]) == ("kernel", 50.0)


def test_sglang_graph_capture_finds_its_captured_attention() -> None:
    # By hand: 36 hipLaunchKernel calls name paged_attention_ll4mi_QKV_mfma16_kernel (HEAD_SIZE
    # 128, GQA_RATIO 4), none ran (the trace's only kernels are 2 fills); each under
    # sglang_profiler::attention_paged_attention_ragged_100.
    result = attention(traceanalyze.load(_corpus("tl_sglang_graph_capture_bs32_mi300x.json.gz")))
    (row,) = result.rows.to_dicts()
    assert (row["implementation"], row["source"], row["calls_per_iter"]) == (
        "paged", "captured", 36.0,
    )  # fmt: skip
    assert (row["head_dim"], row["gqa_ratio"], row["gpu_us_per_call"]) == (128, 4, None)


def test_vllm_step_annotation_sums_give_the_flops(tmp_path: Path) -> None:
    # The step annotation: one prefill of 100 tokens (100 x 100 pairs) and two decodes
    # (1 query each, 50 keys in all); the op records no lengths, the kernel's name says causal:
    # the unmasked pairs, sqsk - (sqsq - sq) / 2 = 10050 - (10002 - 102) / 2 = 5100.
    events = [annotation("ProfilerStep#0", 0, 1000)]
    events += [
        annotation("execute_102_context_1(sq100sk100sqsq10000sqsk10000)_generation_2(sq2sk50"
                   "sqsq2sqsk50)", 1, 900),
    ]  # fmt: skip
    events += _vllm_call(0, 1, kv_inside=True)
    (row,) = attention(load(tmp_path, events)).rows.to_dicts()
    assert row["causal"] is True
    assert row["flops_per_call"] == 2 * 8 * (64 + 64) * 5100
    assert row["flops_note"].startswith("from the step annotation's sums")


def test_vllm_mi300_flops_from_its_step_annotation() -> None:
    # By hand: execute_8192_context_9(sq8155sk8430sqsq7475785sqsk7671310)_generation_37(sq37
    # sk34489sqsq37sqsk34489) around the step; 64 query heads of 64: 4·64·64·(7671310 + 34489).
    rows = attention(traceanalyze.load(_corpus("tl_vllm_piecewise_hipgraph_mi300.json.gz"))).rows
    row = rows.row(0, named=True)
    assert row["flops_per_call"] == 126_251_810_816
    assert "upper bound" in row["flops_note"]  # causal is not recorded
