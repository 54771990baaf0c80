"""Workloads whose bound is known by construction, each profiled into its own trace: the ground
truth for the step model's verdicts and idle causes (issue 38).

    python scripts/verdict_cases_gpu.py --out DIR            # on a GPU box (torch only)
    python scripts/verdict_cases_gpu.py --out DIR --device cpu --small   # a quick dry run

Each case runs ``STEPS`` profiled steps (after one wait and one warm-up step) and, before the
profiler, the same step timed ``TIMED`` times with a synchronize around each (the step's wall
time without the profiler). ``DIR/verdict_cases.json`` holds the environment and, per case, the
expected verdict and idle cause and why, the timed median and the trace's file name.

Cases (the expectation is what the workload is built to be):

* ``gpu_bound``: large matrix products queued back to back, no synchronisation: GPU-bound.
* ``host_bound``: thousands of tiny element-wise ops: the GPU waits for the host (CPU-bound,
  idle mostly ``host``/``launch``).
* ``sync_loop``: small kernels, each followed by ``.item()`` (a blocking copy): sync-bound.
* ``data_loader``: each step first pulls a batch from a DataLoader whose dataset sleeps: CPU-bound,
  idle mostly ``data_loading``.
* ``training``: an MLP's forward, backward (on the autograd engine's thread) and optimizer step,
  large enough to keep the GPU busy: GPU-bound, with backward ops on another thread.
* ``graph_replay``: the host-bound step above captured once in a CUDA graph and replayed:
  GPU-bound (one launch a step).
* ``numbered``: the GPU-bound step in ``record_function(f"step_{i}")`` regions with no
  profiler schedule (no ProfilerStep): steps found from the numbered annotations.
* ``carried_in``: each step opens with a synchronize that waits for a long kernel queued before
  the step began: the step's window holds that carried-in work.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

RESULT = "verdict_cases.json"
STEPS = 5
TIMED = 20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--small", action="store_true", help="tiny sizes for a dry run")
    parser.add_argument("--cases", default="", help="comma-separated case names (default all)")
    args = parser.parse_args(argv)
    import torch

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    scale = 0.05 if args.small else 1.0
    chosen = [c for c in args.cases.split(",") if c] or list(CASES)
    results: dict[str, Any] = {}
    for name in chosen:
        expected, cause, why, build = CASES[name]
        started = time.perf_counter()
        try:
            step, profiled = build(torch, args.device, scale)
            timed = _timed(torch, step, args.device)
            path = out / f"{name}.json.gz"
            profiled(path)
            results[name] = {
                "status": "ok",
                "trace": path.name,
                "expected_bound": expected,
                "expected_idle_cause": cause,
                "why": why,
                "timed_step_median_ms": timed,
                "seconds": round(time.perf_counter() - started, 1),
            }
        except Exception as error:  # a case that cannot run here is reported, not fatal
            results[name] = {"status": "failed", "reason": f"{type(error).__name__}: {error}"}
        print(name, results[name].get("status"), results[name].get("reason", ""), flush=True)
    manifest = {
        "recorded": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "environment": _environment(torch, args.device),
        "method": {
            "profiled_steps": STEPS,
            "timed_steps": TIMED,
            "timing": "perf_counter around each step with a synchronize before and after, "
            "without the profiler; the median",
        },
        "cases": results,
    }
    (out / RESULT).write_text(json.dumps(manifest, indent=2) + "\n")
    return 0 if any(r["status"] == "ok" for r in results.values()) else 1


def _environment(torch: Any, device: str) -> dict[str, Any]:
    env = {"python": platform.python_version(), "torch": torch.__version__, "device": device}
    if device == "cuda" and torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
        env["cuda"] = torch.version.cuda
    return env


def _sync(torch: Any, device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _timed(torch: Any, step: Callable[[int], None], device: str) -> float:
    for i in range(3):
        step(i)
    _sync(torch, device)
    times = []
    for i in range(TIMED):
        _sync(torch, device)
        start = time.perf_counter()
        step(i)
        _sync(torch, device)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _profiled(torch: Any, step: Callable[[int], None], device: str) -> Callable[[Path], None]:
    """Record wait=1, warmup=1, active=STEPS profiler steps of ``step`` into a path."""
    from torch.profiler import ProfilerActivity, profile, schedule

    def record(path: Path) -> None:
        activities = [ProfilerActivity.CPU]
        if device == "cuda":
            activities.append(ProfilerActivity.CUDA)
        done: list[bool] = []

        def save(prof: Any) -> None:
            prof.export_chrome_trace(str(path))
            done.append(True)

        with profile(
            activities=activities,
            schedule=schedule(wait=1, warmup=1, active=STEPS, repeat=1),
            on_trace_ready=save,
            record_shapes=True,
        ) as prof:
            for i in range(STEPS + 2):
                step(i)
                prof.step()
        _sync(torch, device)
        if not done:
            raise RuntimeError("the profiler exported no trace")

    return record


def _gpu_bound(torch: Any, device: str, scale: float) -> tuple[Any, Any]:
    n = max(int(4096 * scale), 64)
    a = torch.randn(n, n, device=device, dtype=torch.float16 if device == "cuda" else torch.float32)
    b = torch.randn_like(a)

    def step(_: int) -> None:
        with torch.profiler.record_function("matmuls"):
            for _ in range(8):
                torch.mm(a, b)

    return step, _profiled(torch, step, device)


def _host_bound(torch: Any, device: str, scale: float) -> tuple[Any, Any]:
    x = torch.randn(256, device=device)

    def step(_: int) -> None:
        y = x
        for _ in range(max(int(400 * scale), 20)):
            y = y * 1.0001 + 0.0001

    return step, _profiled(torch, step, device)


def _sync_loop(torch: Any, device: str, scale: float) -> tuple[Any, Any]:
    n = max(int(2048 * scale), 64)
    a = torch.randn(n, n, device=device)

    def step(_: int) -> None:
        total = 0.0
        for _ in range(20):
            total += float((a @ a[:, :64]).sum().item())

    return step, _profiled(torch, step, device)


def _data_loader(torch: Any, device: str, scale: float) -> tuple[Any, Any]:
    from torch.utils.data import DataLoader, Dataset

    class Slow(Dataset):  # type: ignore[misc]
        def __len__(self) -> int:
            return 10_000

        def __getitem__(self, index: int) -> Any:
            time.sleep(0.002 * scale)
            return torch.randn(512)

    loader = iter(DataLoader(Slow(), batch_size=4, num_workers=0))
    n = max(int(1024 * scale), 64)
    w = torch.randn(512, n, device=device)

    def step(_: int) -> None:
        batch = next(loader).to(device)
        (batch @ w).relu().sum()

    return step, _profiled(torch, step, device)


def _training(torch: Any, device: str, scale: float) -> tuple[Any, Any]:
    width = max(int(4096 * scale), 64)
    model = torch.nn.Sequential(
        *(layer for _ in range(4) for layer in (torch.nn.Linear(width, width), torch.nn.ReLU()))
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(max(int(8192 * scale), 32), width, device=device)

    def step(_: int) -> None:
        with torch.profiler.record_function("forward"):
            loss = model(x).square().mean()
        with torch.profiler.record_function("backward"):
            loss.backward()
        with torch.profiler.record_function("optimizer"):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    return step, _profiled(torch, step, device)


def _graph_replay(torch: Any, device: str, scale: float) -> tuple[Any, Any]:
    if device != "cuda":
        raise RuntimeError("CUDA graphs need CUDA")
    x = torch.randn(256, device=device)
    out = torch.empty_like(x)

    def body() -> None:
        y = x
        for _ in range(400):
            y = y * 1.0001 + 0.0001
        out.copy_(y)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        body()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()

    def step(_: int) -> None:
        for _ in range(4):
            graph.replay()

    return step, _profiled(torch, step, device)


def _numbered(torch: Any, device: str, scale: float) -> tuple[Any, Any]:
    step, _ = _gpu_bound(torch, device, scale)

    def record(path: Path) -> None:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if device == "cuda":
            activities.append(ProfilerActivity.CUDA)
        step(0)  # warm-up, outside every numbered region
        with profile(activities=activities, record_shapes=True) as prof:
            step(-1)  # one more call outside the regions, as a warm-up in a real script
            for i in range(STEPS):
                with torch.profiler.record_function(f"step_{i}"):
                    step(i)
            _sync(torch, device)
        prof.export_chrome_trace(str(path))

    return step, record


def _carried_in(torch: Any, device: str, scale: float) -> tuple[Any, Any]:
    n = max(int(8192 * scale), 64)
    a = torch.randn(n, n, device=device, dtype=torch.float16 if device == "cuda" else torch.float32)
    small = torch.randn(256, 256, device=device)

    def step(_: int) -> None:
        _sync(torch, device)  # waits for the long product queued at the end of the last step
        for _ in range(20):
            torch.mm(small, small)
        for _ in range(3):
            torch.mm(a, a)  # queued; runs on into the next step

    return step, _profiled(torch, step, device)


# name -> (expected bound, expected largest idle cause or None, why, builder)
CASES: dict[str, tuple[str, str | None, str, Callable[[Any, str, float], tuple[Any, Any]]]] = {
    "gpu_bound": ("GPU-bound", None, "8 large fp16 GEMMs a step, queued, no sync", _gpu_bound),
    "host_bound": ("CPU-bound", "host", "400 tiny element-wise ops a step", _host_bound),
    "sync_loop": ("sync-bound", "sync", "20 small GEMMs a step, each read back with .item()",
                  _sync_loop),
    "data_loader": ("CPU-bound", "data_loading", "a slow DataLoader (sleep per item) first",
                    _data_loader),
    "training": ("GPU-bound", None, "a 4-layer MLP's forward, backward, SGD step", _training),
    "graph_replay": ("GPU-bound", None, "the host-bound body in a CUDA graph, replayed 4 times",
                     _graph_replay),
    "numbered": ("GPU-bound", None, "gpu_bound's step in record_function('step_<i>') regions",
                 _numbered),
    "carried_in": ("GPU-bound", None, "a sync at each step's start waits for GEMMs queued by "
                   "the step before", _carried_in),
}  # fmt: skip

if __name__ == "__main__":
    sys.exit(main())
