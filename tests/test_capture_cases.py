"""The capture cases (inputs of their own) on the CPU, end to end: each records its trace and
the manifest's `attention` facts, and `traceanalyze attention` reads the same shapes back."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

import traceanalyze
from capture import CaptureConfig, run_capture
from capture.cases import CaseSpec, dense_flops, facts, said_while
from traceanalyze.analyses.attention import attention

CPU_CASES = ("sdpa_causal_padded", "sdpa_odd_head_mask", "sdpa_gqa", "sdpa_decode", "sdpa_nested")


def test_facts_of_a_case() -> None:
    spec = CaseSpec(batch=2, heads=8, seq=128, head_dim=64, dtype="bfloat16")
    found = facts(spec, heads_kv=2, seq_q=1, causal=False, mask="none", extra=1)
    assert found == {
        "batch": 2, "heads_q": 8, "heads_kv": 2, "seq_q": 1, "seq_kv": 128, "head_dim": 64,
        "dtype": "bf16", "causal": False, "mask": "none", "dropout": 0.0,
        "flops_dense": 4 * 2 * 8 * 1 * 128 * 64, "extra": 1,
    }  # fmt: skip
    assert dense_flops(1, 2, 3, 4, 5) == 4 * 1 * 2 * 3 * 4 * 5


@pytest.mark.torch
def test_cpu_cases_record_facts_the_analysis_reads_back(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    config = CaptureConfig(
        device="cpu", batch=2, heads=4, seq=64, head_dim=16, dtype="float32", repeats=2,
        variants=CPU_CASES,
    )  # fmt: skip
    manifest = run_capture(config, tmp_path)
    assert not manifest.failed
    for name in CPU_CASES:
        entry = manifest.variants[name]
        assert entry.status == "ok" and entry.attention is not None, name
        expected = entry.attention
        result = attention(traceanalyze.load(tmp_path / f"{name}.json.gz"))
        (row,) = result.rows.to_dicts()
        if expected.get("nested"):  # the CPU records no dims for nested tensors
            assert row["seq_q"] is None and row["flops_note"] is not None
            continue
        for key in ("batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim", "dtype"):
            assert row[key] == expected[key], (name, key)
        assert row["mask"] == expected["mask"], name
        assert row["causal"] == expected["causal"], name
        assert row["flops_per_call"] == (
            expected["flops_dense"] // 2 if expected["causal"] else expected["flops_dense"]
        ), name


def test_dispatch_reasons_printed_by_cpp_are_kept() -> None:
    """PyTorch's SDPA checks print their reasons from C++ to file descriptor 2 (the H200
    capture of 2026-12-07 recorded none of them): each is kept, once, beside Python's."""

    def check() -> bool:
        line = (
            "[W1207 04:24:44.283651307 sdp_utils.cpp:255] Warning: Mem efficient attention "
            "requires last dimension of inputs to be divisible by 8. Got Query.size(-1): 60 "
            "instead. (function check_head_dim_size_mem_efficient)\n"
        )
        os.write(2, line.encode())
        os.write(2, line.encode())
        os.write(2, b"unrelated output\n")
        warnings.warn("a Python warning", UserWarning, stacklevel=1)
        return False

    ok, why = said_while(check)
    assert ok is False
    assert why == [
        "Mem efficient attention requires last dimension of inputs to be divisible by 8. "
        "Got Query.size(-1): 60 instead.",
        "a Python warning",
    ]
