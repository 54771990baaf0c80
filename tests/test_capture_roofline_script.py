"""scripts/roofline_check_gpu.py: the hand FLOP/byte formulas and a dry run on the CPU."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from types import ModuleType

import pytest

from tests.gpu.scripts import load_script


@pytest.fixture(scope="module")
def check() -> ModuleType:
    return load_script("roofline_check_gpu")


def test_gemm_formulas(check: ModuleType) -> None:
    assert check.gemm_flops(8192, 8192, 8192) == 1_099_511_627_776  # 2 * 8192**3
    assert check.gemm_flops(2, 3, 4) == 48
    assert check.gemm_bytes(2, 3, 4) == 2 * (8 + 12 + 6)


def test_sdpa_formulas(check: ModuleType) -> None:
    # B8 H16 S1024 D64: 4*8*16*1024*1024*64 = 34_359_738_368, causal half of it
    assert check.sdpa_flops(8, 16, 1024, 1024, 64, causal=False) == 34_359_738_368
    assert check.sdpa_flops(8, 16, 1024, 1024, 64, causal=True) == 17_179_869_184
    assert check.sdpa_bytes(8, 16, 1024, 1024, 64) == 2 * 8 * 16 * 64 * 4 * 1024


def test_cases_are_the_issue_s(check: ModuleType) -> None:
    cases = {case.name: case for case in check.CASES}
    assert cases["gemm_bf16_8192"].flops == 1_099_511_627_776
    causal = cases["sdpa_flash_causal_b8h16s1024d64"]
    assert (causal.causal, causal.flops) == (True, 17_179_869_184)
    assert not cases["sdpa_flash_b8h16s1024d64"].causal


@pytest.mark.torch
def test_dry_run_on_the_cpu(check: ModuleType, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    assert check.main(["--out", str(tmp_path), "--device", "cpu", "--small", "--calls", "2"]) == 0
    result = json.loads((tmp_path / "roofline_check.json").read_text())
    gemm = result["cases"][0]
    assert (gemm["name"], gemm["flops"], gemm["error"]) == ("gemm_bf16_256", 2 * 256**3, None)
    assert gemm["tflops"] == pytest.approx(gemm["flops"] / (gemm["median_ms"] * 1e-3) / 1e12)
    with gzip.open(tmp_path / result["trace"], "rt") as stream:
        events = [e for e in json.load(stream)["traceEvents"] if e.get("ph") == "X"]
    events.sort(key=lambda e: float(e["ts"]))
    regions = [e["name"] for e in events if e["name"] in {c["name"] for c in result["cases"]}]
    assert regions == ["gemm_bf16_256", "sdpa_flash_causal_b1h2s128d64"] * 3
    dims = [e["args"]["Input Dims"] for e in events if e["name"] == "aten::mm"]
    assert dims == [[[256, 256], [256, 256]]] * 3
