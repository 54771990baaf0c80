"""traceanalyze.occupancy agrees with CUDA's occupancy API on the local GPU (needs CuPy)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "occupancy_check_gpu.py"


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("occupancy_check_gpu", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


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

    check = _load_script()
    devices = check.device_row(cupy.cuda.runtime.getDeviceProperties(0))
    result = check.compare(check.measure(check.CASES), devices)
    disagreeing = result.filter(~result["agree"])
    assert disagreeing.is_empty(), f"CUDA disagrees:\n{disagreeing}"
