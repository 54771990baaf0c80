"""capture --cold on a real GPU: fresh processes, empty caches, call 1 dearer than steady."""

from __future__ import annotations

from pathlib import Path

import pytest

from capture import CaptureConfig, ColdConfig, Manifest, run_cold
from tests.gpu.scripts import load_script

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.torch,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU with CUDA"),
]
VARIANTS = ("sdpa_flash", "sdpa_cudnn")
CALLS = 4


@pytest.fixture(scope="module")
def cold(tmp_path_factory: pytest.TempPathFactory) -> tuple[Manifest, Path]:
    out = tmp_path_factory.mktemp("gpu_cold")
    capture = CaptureConfig(batch=8, heads=16, seq=512, head_dim=64, repeats=5, variants=VARIANTS)
    config = ColdConfig(capture, calls=CALLS, empty_caches=True, process_timeout_s=240)
    return run_cold(config, out), out


@pytest.mark.parametrize("variant", VARIANTS)
def test_variant_ok_in_its_processes(cold: tuple[Manifest, Path], variant: str) -> None:
    result = cold[0].variants[variant]
    assert result.status == "ok", result.reason
    assert result.cold is not None
    # One profiling process, then ColdConfig's timing processes (3 by default since issue 13).
    timing = [("time", 0)] * ColdConfig(CaptureConfig()).timing_processes
    assert [(p.role, p.returncode) for p in result.cold.processes] == [("profile", 0), *timing]
    assert all(
        p.cuda_context_ms is not None and p.cuda_context_ms > 0 for p in result.cold.processes
    )
    assert len(result.cold.call_wall_ms) == CALLS
    assert result.median_ms is not None and result.median_ms > 0


@pytest.mark.parametrize("variant", VARIANTS)
def test_first_call_costs_more_than_steady(cold: tuple[Manifest, Path], variant: str) -> None:
    timing = cold[0].variants[variant].cold
    assert timing is not None and timing.call1_ms is not None
    assert timing.steady_median_ms is not None
    assert timing.call1_ms > 2 * timing.steady_median_ms, timing.call_wall_ms


def test_every_call_is_in_the_trace(cold: tuple[Manifest, Path]) -> None:
    facts = load_script("trace_facts")
    found = facts.facts(cold[1] / "sdpa_flash.json.gz")
    assert (found["call_regions"], found["profiler_steps"]) == (CALLS, CALLS)
    assert found["kernels"] == CALLS  # one flash kernel per call, nothing else
    assert found["ops_with_input_dims"] > 0


def test_processes_started_with_empty_caches(cold: tuple[Manifest, Path]) -> None:
    for result in cold[0].variants.values():
        assert result.cold is not None
        states = [s for p in result.cold.processes for s in p.caches_before]
        assert states and all(s.source == "fresh" and s.empty for s in states)
    assert cold[0].config["cold"]["cache_state"] == "empty"  # type: ignore[index]
    assert cold[0].environment["gpu"] == torch.cuda.get_device_name()
