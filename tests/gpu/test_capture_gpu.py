"""capture/ on a real GPU: every variant runs and is right; fused backends launch one kernel."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from capture import VARIANTS, CaptureConfig, Manifest, run_capture

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.torch,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU with CUDA"),
]

# Enough (batch x heads x query blocks) to fill the GPU, so flash does not split the keys
# (split-KV adds a combine kernel per forward).
SMALL = {"batch": 8, "heads": 16, "seq": 512, "head_dim": 64, "repeats": 3}
FUSED_KERNEL = {
    "sdpa_flash": r"flash_fwd",
    "sdpa_cudnn": r"cudnn|sdpa",
    "sdpa_efficient": r"fmha_cutlassF|efficient",
}


@pytest.fixture(scope="module")
def forward(tmp_path_factory: pytest.TempPathFactory) -> tuple[Manifest, Path]:
    out = tmp_path_factory.mktemp("gpu_forward")
    return run_capture(CaptureConfig(**SMALL), out), out  # type: ignore[arg-type]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_forward_variant_ok(forward: tuple[Manifest, Path], variant: str) -> None:
    result = forward[0].variants[variant]
    assert result.status == "ok", result.reason
    assert result.median_ms is not None and result.median_ms > 0
    assert (forward[1] / f"{variant}.json.gz").is_file()


def test_sdpa_auto_names_its_backend(forward: tuple[Manifest, Path]) -> None:
    assert forward[0].variants["sdpa_auto"].backend in {"flash", "efficient", "cudnn", "math"}
    assert forward[0].variants["sdpa_flash"].backend == "flash"
    assert forward[0].variants["sdpa_cudnn"].backend == "cudnn"


def test_environment_names_the_gpu(forward: tuple[Manifest, Path]) -> None:
    environment = forward[0].environment
    assert environment["gpu"] == torch.cuda.get_device_name()
    assert environment["compute_capability"] is not None
    assert environment["cuda"] == torch.version.cuda


def linked_kernels(path: Path) -> list[str]:
    """Names of the kernels launched inside the window (their runtime call is in the trace)."""
    with gzip.open(path, "rt") as stream:
        events = json.load(stream)["traceEvents"]
    launched = {
        e["args"]["correlation"]
        for e in events
        if e.get("cat") in {"cuda_runtime", "cuda_driver"} and "correlation" in e.get("args", {})
    }
    return [
        e["name"]
        for e in events
        if e.get("cat") == "kernel" and e["args"].get("correlation") in launched
    ]


@pytest.mark.parametrize("variant", list(FUSED_KERNEL))
def test_one_fused_kernel_per_forward(forward: tuple[Manifest, Path], variant: str) -> None:
    kernels = linked_kernels(forward[1] / f"{variant}.json.gz")
    assert len(kernels) == CaptureConfig().active, kernels
    assert all(re.search(FUSED_KERNEL[variant], name) for name in kernels), kernels


def test_backward_every_variant_ok(tmp_path: Path) -> None:
    manifest = run_capture(CaptureConfig(**SMALL, backward=True), tmp_path)  # type: ignore[arg-type]
    problems = {n: r.reason for n, r in manifest.variants.items() if r.status != "ok"}
    assert not problems
    assert all(r.grad_relative_error is not None for r in manifest.variants.values())
