"""A few facts about Kineto traces, with the standard library only (for the GPU box's log).

    python scripts/trace_facts.py TRACE.json.gz [TRACE...]

One JSON line per trace: size, kernels (and how many came from a ``cudaGraphLaunch``, how many
carry Kineto's ``graph id``), runtime/driver calls by name, ``call<i>`` / ``ProfilerStep#``
regions, CPU ops with recorded shapes, and the kernel launch calls made while a CUDA graph was
being captured (inside ``cuda_graph_capture``). Enough to see at a glance that a recording on
the GPU box holds what it should, before the traces are analysed elsewhere.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

LAUNCH_CALLS = frozenset(
    {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx"}
)
GRAPH_LAUNCHES = frozenset({"cudaGraphLaunch", "cuGraphLaunch"})
# Calls that add a node to a graph being captured.
NODE_CALLS = LAUNCH_CALLS | {
    "cudaMemcpyAsync",
    "cudaMemsetAsync",
    "cuMemcpyAsync",
    "cuMemsetD32Async",
}
GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
API_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})
CALL_REGION = re.compile(r"call\d+$")


def events(path: Path) -> list[dict[str, Any]]:
    """The trace's complete (``ph: X``) events, in time order."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as stream:
        trace = json.load(stream)
    found = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    return sorted(found, key=lambda e: float(e.get("ts", 0)))


def graph_activities(found: list[dict[str, Any]]) -> dict[int, list[str]]:
    """GPU activity names (kernels, memory copies and sets) per ``cudaGraphLaunch`` correlation
    id (every node of one replay shares its launch's id)."""
    launches = {
        e["args"]["correlation"]
        for e in found
        if e.get("cat") in API_CATEGORIES and e["name"] in GRAPH_LAUNCHES
    }
    kernels: dict[int, list[str]] = {c: [] for c in launches}
    for e in found:
        if e.get("cat") in GPU_CATEGORIES and e.get("args", {}).get("correlation") in launches:
            kernels[e["args"]["correlation"]].append(e["name"])
    return kernels


def launches_during_capture(found: list[dict[str, Any]]) -> list[str]:
    """Launch calls (kernels, memory copies and sets) between a ``cudaStreamBeginCapture`` and
    its ``cudaStreamEndCapture`` on the same thread: one per node of the graph. (The
    ``cuda_graph_capture`` region also holds launches made before the capture begins.)"""
    calls = sorted((e for e in found if e.get("cat") in API_CATEGORIES), key=lambda e: e["ts"])
    capturing: set[Any] = set()
    launched = []
    for e in calls:
        if e["name"] == "cudaStreamBeginCapture":
            capturing.add(e["tid"])
        elif e["name"] == "cudaStreamEndCapture":
            capturing.discard(e["tid"])
        elif e["tid"] in capturing and e["name"] in NODE_CALLS:
            launched.append(e["name"])
    return launched


def facts(path: Path) -> dict[str, Any]:
    """What ``path`` holds, in a few numbers."""
    found = events(path)
    kernels = [e for e in found if e.get("cat") == "kernel"]
    replays = graph_activities(found)
    names = Counter(e["name"] for e in found)
    return {
        "trace": str(path),
        "bytes": path.stat().st_size,
        "events": len(found),
        "kernels": len(kernels),
        "memcpy": sum(e.get("cat") == "gpu_memcpy" for e in found),
        "memset": sum(e.get("cat") == "gpu_memset" for e in found),
        "api_calls": dict(Counter(e["name"] for e in found if e.get("cat") in API_CATEGORIES)),
        "graph_launches": len(replays),
        "activities_per_graph_launch": sorted({len(k) for k in replays.values()}),
        "kernels_with_graph_id": sum("graph id" in e.get("args", {}) for e in kernels),
        "launches_during_capture": len(launches_during_capture(found)),
        "call_regions": sum(n for name, n in names.items() if CALL_REGION.match(name)),
        "profiler_steps": sum(n for name, n in names.items() if name.startswith("ProfilerStep#")),
        "ops_with_input_dims": sum(
            e.get("cat") == "cpu_op" and "Input Dims" in e.get("args", {}) for e in found
        ),
    }


def main(paths: list[str]) -> int:
    """Print one line per trace; 1 if one cannot be read."""
    status = 0
    for name in paths:
        try:
            print(json.dumps(facts(Path(name))))
        except (OSError, ValueError, KeyError) as exc:
            print(json.dumps({"trace": name, "error": f"{type(exc).__name__}: {exc}"}))
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
