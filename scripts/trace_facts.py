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
API_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})
CALL_REGION = re.compile(r"call\d+$")


def events(path: Path) -> list[dict[str, Any]]:
    """The trace's complete (``ph: X``) events, in time order."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as stream:
        trace = json.load(stream)
    found = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    return sorted(found, key=lambda e: float(e.get("ts", 0)))


def graph_kernels(found: list[dict[str, Any]]) -> dict[int, list[str]]:
    """Kernel names per ``cudaGraphLaunch`` correlation id (every kernel of one replay shares
    its launch's id)."""
    launches = {
        e["args"]["correlation"]
        for e in found
        if e.get("cat") in API_CATEGORIES and e["name"] in GRAPH_LAUNCHES
    }
    kernels: dict[int, list[str]] = {c: [] for c in launches}
    for e in found:
        if e.get("cat") == "kernel" and e.get("args", {}).get("correlation") in launches:
            kernels[e["args"]["correlation"]].append(e["name"])
    return kernels


def launches_during_capture(found: list[dict[str, Any]]) -> list[str]:
    """Kernel launch calls inside a ``cuda_graph_capture`` region (same thread)."""
    regions = [e for e in found if e["name"] == "cuda_graph_capture"]
    return [
        e["name"]
        for e in found
        if e.get("cat") in API_CATEGORIES
        and e["name"] in LAUNCH_CALLS
        and any(r["tid"] == e["tid"] and r["ts"] <= e["ts"] <= r["ts"] + r["dur"] for r in regions)
    ]


def facts(path: Path) -> dict[str, Any]:
    """What ``path`` holds, in a few numbers."""
    found = events(path)
    kernels = [e for e in found if e.get("cat") == "kernel"]
    replays = graph_kernels(found)
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
        "kernels_per_graph_launch": sorted({len(k) for k in replays.values()}),
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
