"""traceanalyze.hardware.occupancy agrees with CUDA's occupancy API on the local GPU (needs
CuPy)."""

from __future__ import annotations

import pytest

from tests.gpu.scripts import load_script


def _cuda_available() -> bool:
    try:
        import cupy  # type: ignore[import-not-found]
    except ImportError:
        return False
    try:
        return bool(cupy.cuda.runtime.getDeviceCount() > 0)
    except cupy.cuda.runtime.CUDARuntimeError:
        return False


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda_available(), reason="needs CuPy and an NVIDIA GPU")
def test_occupancy_matches_cuda() -> None:
    import cupy

    check = load_script("occupancy_check_gpu")
    devices = check.device_row(cupy.cuda.runtime.getDeviceProperties(0))
    result = check.compare(check.measure(check.CASES), devices)
    disagreeing = result.filter(~result["agree"])
    assert disagreeing.is_empty(), f"CUDA disagrees:\n{disagreeing}"
