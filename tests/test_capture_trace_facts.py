"""scripts/trace_facts.py on a micro trace: a captured graph, one replay, call regions."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.gpu.scripts import load_script
from tests.micro import annotation, call, kernel, span, write_trace


@pytest.fixture(scope="module")
def facts_script() -> ModuleType:
    return load_script("trace_facts")


def test_graph_capture_and_replay(facts_script: ModuleType, tmp_path: Path) -> None:
    events = [
        annotation("ProfilerStep#1", 0, 100),
        annotation("call1", 1, 98),
        annotation("cuda_graph_capture", 2, 40),
        call("cudaLaunchKernel", 2.5, 0.2, 10),  # in the region, before the capture begins
        call("cudaStreamBeginCapture", 2.8, 0.1, 9),
        span("cpu_op", "aten::mm", 3, 10, **{"Input Dims": [[8, 8], [8, 8]]}),
        call("cudaLaunchKernel", 4, 2, 11),  # captured: no kernel runs for it
        call("cuLaunchKernelEx", 20, 2, 12, cat="cuda_driver"),
        call("cudaStreamEndCapture", 30, 1, 8),
        call("cudaLaunchKernel", 60, 2, 13),  # after the capture: not counted as captured
        annotation("call2", 100, 50),
        call("cudaGraphLaunch", 101, 5, 14),
        kernel("gemm", 110, 5, 14, **{"graph id": 1, "graph node id": 3}),
        kernel("softmax", 116, 5, 14),
        kernel("eager", 130, 1, 13),
    ]
    path = write_trace(tmp_path, events, "t.json.gz")
    found = facts_script.facts(path)
    assert found == {
        "trace": str(path),
        "bytes": path.stat().st_size,
        "events": 15,
        "kernels": 3,
        "memcpy": 0,
        "memset": 0,
        "api_calls": {
            "cudaLaunchKernel": 3,
            "cudaStreamBeginCapture": 1,
            "cuLaunchKernelEx": 1,
            "cudaStreamEndCapture": 1,
            "cudaGraphLaunch": 1,
        },
        "graph_launches": 1,
        "activities_per_graph_launch": [2],
        "kernels_with_graph_id": 1,
        "launches_during_capture": 2,
        "call_regions": 2,
        "profiler_steps": 1,
        "ops_with_input_dims": 1,
    }


def test_unreadable_trace_is_one_line(
    facts_script: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bad.json").write_text("{")
    assert facts_script.main([str(tmp_path / "bad.json")]) == 1
    assert '"error": "JSONDecodeError' in capsys.readouterr().out
