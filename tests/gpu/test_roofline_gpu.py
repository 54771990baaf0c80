"""scripts/roofline_check_gpu.py on a real GPU (small shapes): figures and a trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gpu.scripts import load_script

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.torch,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU with CUDA"),
]


def test_small_cases_are_timed_and_traced(tmp_path: Path) -> None:
    check = load_script("roofline_check_gpu")
    result = check.run(tmp_path, "cuda", check.SMALL_CASES, calls=5, batch=5)
    for case in result["cases"]:
        assert case["error"] is None, case
        assert case["tflops"] > 0 and case["median_ms"] > 0
    found = load_script("trace_facts").facts(tmp_path / result["trace"])
    assert found["kernels"] >= 2 * 3  # each case launched at least one kernel per active step
    assert found["ops_with_input_dims"] > 0
    assert result["environment"]["gpu"] == torch.cuda.get_device_name()
