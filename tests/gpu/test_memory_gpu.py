"""scripts/memory_check_gpu.py on a real GPU: the trace's memory figures equal the allocator's.

For every profiled step, ``traceanalyze memory``'s ``start_allocated_bytes`` and
``peak_allocated_bytes`` on ``cuda:0`` must equal ``torch.cuda.memory_allocated()`` just before
the step and ``torch.cuda.max_memory_allocated()`` after it (peak reset before it), within one
allocation's rounding. Needs polars on the GPU machine (carried as wheels, see
/work/.library/device/README.md in the project's workplace, or installed).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gpu.scripts import load_script

torch = pytest.importorskip("torch")
pytest.importorskip("polars")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.torch,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU with CUDA"),
]


def test_trace_memory_equals_the_allocator_per_step(tmp_path: Path) -> None:
    from tests.test_memory_real import compare_with_torch

    check = load_script("memory_check_gpu")
    assert check.main(["--out", str(tmp_path)]) == 0
    compare_with_torch(tmp_path / check.TRACE, tmp_path / check.RESULT)
