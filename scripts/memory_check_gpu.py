"""The CUDA caching allocator's own figures beside a trace of the same steps (issue 21).

The ground truth for ``traceanalyze memory``: one profiled step per attention variant, recorded
with ``profile_memory=True`` into one Chrome trace; around each step the script reads
``torch.cuda.memory_allocated()`` just before it and ``torch.cuda.max_memory_allocated()``
after it (the peak reset just before). Offline, each iteration's ``start_allocated_bytes`` and
``peak_allocated_bytes`` for ``cuda:0`` must equal those figures (tests/test_memory_check.py).

    python scripts/memory_check_gpu.py --out DIR          # on a GPU box (torch only)
    python scripts/memory_check_gpu.py --out DIR --device cpu --small   # a quick dry run

Writes ``DIR/memory_check.json`` (environment, configuration, per step the variant, its
``ProfilerStep`` number and both figures) and ``DIR/memory_check.json.gz`` (the trace). Exits 1
when no step could run.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from capture.config import CaptureConfig
from capture.environment import describe_environment, nvidia_smi
from capture.measure import make_step, random_inputs, synchronize, unrelated_op
from capture.run import forced_backend
from capture.variants import VARIANTS

TRACE = "memory_check.json.gz"
RESULT = "memory_check.json"
# The seed's lesson: naive and math write the [seq, seq] scores to GPU memory, fused ones do not.
DEFAULT_VARIANTS = (
    "naive",
    "naive_inplace",
    "sdpa_math",
    "sdpa_efficient",
    "sdpa_flash",
    "sdpa_cudnn",
)
SMALL = {"batch": 1, "heads": 2, "seq": 64, "head_dim": 16, "dtype": "float32"}


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    config = CaptureConfig(device=args.device, **(SMALL if args.small else {}))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    variants = [v for v in args.variants.split(",") if v]
    steps = _steps(config, variants)
    measured: list[dict[str, Any]] = []
    _profile(
        [_measuring(name, step, config.device, measured) for name, step in steps],
        config.device,
        out / TRACE,
    )
    result = {
        "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": "cuda:0" if config.device == "cuda" else "cpu",
        "environment": describe_environment(config.device),
        "nvidia_smi": nvidia_smi("name,driver_version,clocks.sm")
        if config.device == "cuda"
        else None,
        "config": {
            k: getattr(config, k) for k in ("batch", "heads", "seq", "head_dim", "dtype", "causal")
        },
        "method": "memory_allocated() after a synchronize just before each profiled step; "
        "reset_peak_memory_stats() then, max_memory_allocated() after a synchronize at its end",
        "steps": measured,
    }
    (out / RESULT).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(measured, indent=2))
    return 0 if measured else 1


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--small", action="store_true", help="tiny fp32 shapes for a dry run")
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS))
    return parser.parse_args(argv)


def _steps(config: CaptureConfig, variants: list[str]) -> list[tuple[str, Callable[[], object]]]:
    """Each variant's step, built (masks made, backends forced inside the call) before profiling."""
    import torch

    inputs = random_inputs(config)
    built: list[tuple[str, Callable[[], object]]] = []
    for name in variants:
        variant = VARIANTS[name]
        if variant.needs_cuda and config.device != "cuda":
            continue
        fn = variant.build(config.attention_spec(), torch.device(config.device))
        step = make_step(fn, inputs, variant.region)

        def forced(step: Callable[[], object] = step, variant: Any = variant) -> object:
            with forced_backend(variant), torch.no_grad():
                return step()

        forced()  # the warm-up call: kernels loaded, plans built, the allocator's pool grown
        built.append((name, forced))
    synchronize(config.device)
    return built


def _measuring(
    name: str, step: Callable[[], object], device: str, measured: list[dict[str, Any]]
) -> Callable[[int], None]:
    """``step`` between the allocator's readings, appended to ``measured`` with its step number."""
    import torch

    def run(step_number: int) -> None:
        synchronize(device)
        before = torch.cuda.memory_allocated() if device == "cuda" else None
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        step()
        synchronize(device)
        peak = torch.cuda.max_memory_allocated() if device == "cuda" else None
        measured.append(
            {
                "variant": name,
                "step": step_number,
                "allocated_before_bytes": before,
                "max_allocated_bytes": peak,
            }
        )

    return run


def _profile(steps: list[Callable[[int], None]], device: str, path: Path) -> None:
    """One warm-up profiler step (an unrelated op), then each of ``steps`` as one active step."""
    from torch.profiler import ProfilerActivity, profile, schedule

    activities = [ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(
        activities=activities,
        schedule=schedule(wait=0, warmup=1, active=len(steps), repeat=1),
        on_trace_ready=lambda prof: prof.export_chrome_trace(str(path)),
        record_shapes=True,
        profile_memory=True,
    ) as prof:
        unrelated_op(device)
        prof.step()
        for step in steps:
            step(prof.step_num)  # the ProfilerStep#N this call is recorded in
            prof.step()


if __name__ == "__main__":
    sys.exit(main())
