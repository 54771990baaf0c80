"""--cuda-graph on a real GPU: replays launch the captured kernels through cudaGraphLaunch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from capture import CaptureConfig, Manifest, run_capture
from tests.gpu.scripts import load_script

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.torch,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU with CUDA"),
]
SMALL = {"batch": 8, "heads": 16, "seq": 512, "head_dim": 64, "repeats": 3}
VARIANTS = ("naive", "sdpa_flash")
ACTIVE = CaptureConfig().active


@pytest.fixture(scope="module", params=["replay", "capture"])
def graphed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Manifest, Path]:
    out = tmp_path_factory.mktemp(f"gpu_graph_{request.param}")
    config = CaptureConfig(**SMALL, variants=VARIANTS, cuda_graph=request.param)  # type: ignore[arg-type]
    return request.param, run_capture(config, out), out


def facts(graphed: tuple[str, Manifest, Path], variant: str) -> dict[str, Any]:
    found: dict[str, Any] = load_script("trace_facts").facts(graphed[2] / f"{variant}.json.gz")
    return found


@pytest.mark.parametrize("variant", VARIANTS)
def test_graphed_variant_ok(graphed: tuple[str, Manifest, Path], variant: str) -> None:
    result = graphed[1].variants[variant]
    assert result.status == "ok", result.reason
    assert graphed[1].config["cuda_graph"] == graphed[0]


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_replay_is_one_graph_launch(graphed: tuple[str, Manifest, Path], variant: str) -> None:
    found = facts(graphed, variant)
    assert found["graph_launches"] == ACTIVE, found
    assert len(found["activities_per_graph_launch"]) == 1, found  # every replay the same
    if variant == "sdpa_flash":
        assert found["activities_per_graph_launch"] == [1], found


def test_replay_trace_launches_no_kernel_itself(graphed: tuple[str, Manifest, Path]) -> None:
    if graphed[0] != "replay":
        pytest.skip("the capture trace launches kernels while capturing")
    found = facts(graphed, "naive")
    assert not {"cudaLaunchKernel", "cuLaunchKernelEx"} & set(found["api_calls"]), found


@pytest.mark.parametrize("variant", VARIANTS)
def test_capture_trace_holds_one_launch_per_replayed_activity(
    graphed: tuple[str, Manifest, Path], variant: str
) -> None:
    if graphed[0] != "capture":
        pytest.skip("only the capture trace holds the capture")
    found = facts(graphed, variant)
    assert [found["launches_during_capture"]] == found["activities_per_graph_launch"], found
