"""Hand-computed TFLOP/s of a bf16 GEMM and flash SDPA, and a trace of the same calls.

The ground truth for ``traceanalyze roofline`` (issue 12): each case is timed with CUDA events,
its FLOPs and minimal bytes come from the formulas below, written out by hand; then the same
calls are profiled (shapes recorded) into one Chrome trace, each case inside
``record_function(<case name>)``. Offline, the roofline figure derived from the trace must agree
with the figure here within a few percent.

    python scripts/roofline_check_gpu.py --out DIR          # on a GPU box (torch only)
    python scripts/roofline_check_gpu.py --out DIR --device cpu --small   # a quick dry run

Writes ``DIR/roofline_check.json`` (environment, formulas, per case FLOPs, bytes, times and
TFLOP/s) and ``DIR/roofline_check.trace.json.gz``. Exits 1 if a case failed (reason in JSON).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from capture.environment import describe_environment, nvidia_smi
from capture.measure import event_ms, synced_wall_ms, synchronize

BF16_BYTES = 2
TRACE = "roofline_check.trace.json.gz"
RESULT = "roofline_check.json"
FORMULAS = {
    "gemm_flops": "2*M*N*K (one multiply and one add per term of each of the M*N dot products)",
    "gemm_bytes": "2*(M*K + K*N + M*N) in bf16: each operand read once, the result written once",
    "sdpa_flops": "4*B*H*Sq*Sk*D forward (QK^T and PV, 2*Sq*Sk*D each per head), halved when "
    "causal (the diagonal's extra half-row per query is ignored: a 1/Sk relative error)",
    "sdpa_bytes": "2*B*H*D*(2*Sq + 2*Sk) in bf16: q and o of Sq rows, k and v of Sk rows, each "
    "read or written once",
    "tflops": "flops / seconds / 1e12 with seconds from the CUDA-event median of single calls; "
    "tflops_batched uses the mean of `batch` back-to-back calls between two events; "
    "tflops_graph the median of `calls` single calls replayed from a CUDA graph, each between "
    "two events after a synchronize (no CPU dispatch in the time: the figure a trace's kernel "
    "time is checked against)",
}


def gemm_flops(m: int, n: int, k: int) -> int:
    """Multiply-adds of an (M x K) @ (K x N) product, counted as two FLOPs each."""
    return 2 * m * n * k


def gemm_bytes(m: int, n: int, k: int) -> int:
    """Bytes a bf16 GEMM must move at least: both operands read, the result written."""
    return BF16_BYTES * (m * k + k * n + m * n)


def sdpa_flops(b: int, h: int, sq: int, sk: int, d: int, causal: bool) -> int:
    """Forward attention FLOPs: QK^T (2*Sq*Sk*D) plus PV (2*Sq*Sk*D) per head, halved if
    causal."""
    full = 4 * b * h * sq * sk * d
    return full // 2 if causal else full


def sdpa_bytes(b: int, h: int, sq: int, sk: int, d: int) -> int:
    """Bytes a fused bf16 attention must move at least: q, k, v read, o written."""
    return BF16_BYTES * b * h * d * (2 * sq + 2 * sk)


@dataclass(frozen=True)
class Case:
    """One timed call: a GEMM (m, n, k) or a flash SDPA (b, h, sq, sk, d, causal)."""

    name: str
    op: str  # the ATen op the trace will hold
    shape: dict[str, int]
    causal: bool = False

    @property
    def flops(self) -> int:
        s = self.shape
        if self.op == "aten::mm":
            return gemm_flops(s["m"], s["n"], s["k"])
        return sdpa_flops(s["b"], s["h"], s["sq"], s["sk"], s["d"], self.causal)

    @property
    def bytes(self) -> int:
        s = self.shape
        if self.op == "aten::mm":
            return gemm_bytes(s["m"], s["n"], s["k"])
        return sdpa_bytes(s["b"], s["h"], s["sq"], s["sk"], s["d"])


def _gemm(name: str, size: int) -> Case:
    return Case(name, "aten::mm", {"m": size, "n": size, "k": size})


def _sdpa(name: str, b: int, h: int, s: int, d: int, causal: bool) -> Case:
    shape = {"b": b, "h": h, "sq": s, "sk": s, "d": d}
    return Case(name, "aten::_scaled_dot_product_flash_attention", shape, causal)


CASES = (
    _gemm("gemm_bf16_8192", 8192),
    _sdpa("sdpa_flash_causal_b8h16s1024d64", 8, 16, 1024, 64, True),
    _sdpa("sdpa_flash_b8h16s1024d64", 8, 16, 1024, 64, False),
    _sdpa("sdpa_flash_causal_b4h32s4096d128", 4, 32, 4096, 128, True),
    _sdpa("sdpa_flash_b4h32s4096d128", 4, 32, 4096, 128, False),
)
SMALL_CASES = (
    _gemm("gemm_bf16_256", 256),
    _sdpa("sdpa_flash_causal_b1h2s128d64", 1, 2, 128, 64, True),
)


@dataclass
class Measured:
    """One case's hand figures (times in ms; None where the case failed)."""

    name: str
    op: str
    shape: dict[str, int]
    causal: bool
    dtype: str
    flops: int
    bytes: int
    calls: int
    batch: int
    median_ms: float | None = None
    min_ms: float | None = None
    batched_mean_ms: float | None = None
    graph_ms: float | None = None
    tflops: float | None = None
    tflops_batched: float | None = None
    tflops_graph: float | None = None
    tbps: float | None = None
    error: str | None = None

    @classmethod
    def of(cls, case: Case, calls: int, batch: int) -> Measured:
        """No figures yet."""
        return cls(
            case.name,
            case.op,
            case.shape,
            case.causal,
            "bfloat16",
            case.flops,
            case.bytes,
            calls,
            batch,
        )


def build(case: Case, device: str) -> Callable[[], Any]:
    """The call ``case`` times: a @ b, or flash SDPA forced with sdpa_kernel."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    generator = torch.Generator(device=device).manual_seed(0)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=generator, device=device, dtype=torch.bfloat16)

    s = case.shape
    if case.op == "aten::mm":
        a, b = randn(s["m"], s["k"]), randn(s["k"], s["n"])
        return lambda: a @ b
    q = randn(s["b"], s["h"], s["sq"], s["d"])
    k, v = randn(s["b"], s["h"], s["sk"], s["d"]), randn(s["b"], s["h"], s["sk"], s["d"])

    def attention() -> torch.Tensor:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return scaled_dot_product_attention(q, k, v, is_causal=case.causal)

    return attention


def time_case(case: Case, fn: Callable[[], Any], device: str, calls: int, batch: int) -> Measured:
    """Median/min of single calls between two CUDA events, and the mean of ``batch`` calls
    back to back (perf_counter on the CPU)."""
    result = Measured.of(case, calls, batch)
    for _ in range(3):  # plans, heuristics, clocks ramping up
        fn()
    synchronize(device)
    if device == "cuda":
        singles = event_ms(fn, calls)
        batched = event_ms(lambda: [fn() for _ in range(batch)], 1)[0] / batch
    else:
        singles = [synced_wall_ms(fn, device) for _ in range(calls)]
        batched = synced_wall_ms(lambda: [fn() for _ in range(batch)], device) / batch
    result.median_ms, result.min_ms = statistics.median(singles), min(singles)
    result.batched_mean_ms = batched
    if device == "cuda":
        result.graph_ms = statistics.median(graph_replay_ms(fn, calls))
        result.tflops_graph = case.flops / (result.graph_ms * 1e-3) / 1e12
    result.tflops = case.flops / (result.median_ms * 1e-3) / 1e12
    result.tflops_batched = case.flops / (batched * 1e-3) / 1e12
    result.tbps = case.bytes / (result.median_ms * 1e-3) / 1e12
    return result


def graph_replay_ms(fn: Callable[[], Any], calls: int) -> list[float]:
    """Milliseconds of one call replayed from a CUDA graph, ``calls`` times, each between two
    CUDA events with a synchronize before it: the GPU's time for a single call as the profiler
    sees it (the GPU idle before, as in the profiled steps), without the CPU's dispatch, which
    the events around an eager call also time and which is longer than small kernels."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up on a side stream, as graph capture requires
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(float(start.elapsed_time(end)))
    return times


def profile_cases(fns: dict[str, Callable[[], Any]], device: str, path: Path) -> None:
    """Three active profiler steps, each running every case once inside its own region."""
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(
        activities=activities,
        schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
        on_trace_ready=lambda prof: prof.export_chrome_trace(str(path)),
        record_shapes=True,
    ) as prof:
        for _ in range(5):
            for name, fn in fns.items():
                with record_function(name):
                    fn()
            synchronize(device)
            prof.step()


def run(out: Path, device: str, cases: tuple[Case, ...], calls: int, batch: int) -> dict[str, Any]:
    """Time and profile ``cases``; the JSON-ready result (also written to ``out``)."""
    out.mkdir(parents=True, exist_ok=True)
    measured, fns = [], {}
    for case in cases:
        try:
            fn = build(case, device)
            measured.append(time_case(case, fn, device, calls, batch))
            fns[case.name] = fn
        except Exception as exc:  # one case failing must not lose the others
            failed = Measured.of(case, calls, batch)
            failed.error = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"
            measured.append(failed)
    if fns:
        profile_cases(fns, device, out / TRACE)
    result = {
        "schema": 1,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "environment": describe_environment(device),
        "gpu_clocks": _gpu_clocks() if device == "cuda" else None,
        "formulas": FORMULAS,
        "trace": TRACE if fns else None,
        "trace_layout": "profiler schedule wait=1 warmup=1 active=3; each active step runs every "
        "case once inside record_function(<case name>), then synchronizes",
        "cases": [asdict(m) for m in measured],
    }
    (out / RESULT).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


def _gpu_clocks() -> str | None:
    """nvidia-smi's view of clocks and power (a GPU below its boost clock explains a low
    figure)."""
    query = "clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu"
    return nvidia_smi(query, "csv")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--small", action="store_true", help="tiny shapes (a dry run)")
    parser.add_argument("--calls", type=int, default=50, help="single calls timed per case")
    parser.add_argument("--batch", type=int, default=20, help="back-to-back calls, timed once")
    args = parser.parse_args(argv)
    result = run(
        args.out, args.device, SMALL_CASES if args.small else CASES, args.calls, args.batch
    )
    for case in result["cases"]:
        if case["error"]:
            print(f"{case['name']:<34} failed: {case['error']}")
        else:
            print(
                f"{case['name']:<34} {case['median_ms']:9.4f} ms  {case['tflops']:8.1f} TFLOP/s"
                f"  (batched {case['tflops_batched']:.1f})  {case['tbps']:.2f} TB/s"
            )
    print(f"wrote {args.out / RESULT}")
    return 1 if any(case["error"] for case in result["cases"]) else 0


if __name__ == "__main__":
    sys.exit(main())
