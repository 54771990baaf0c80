"""One fresh process of a cold capture: ``python -m capture.cold_worker REQUEST.json``.

Started by `capture.cold` (never by hand). The request names the variant, the role and the
configurations; the worker writes its findings as JSON to the request's ``result`` path and
exits 0, also when the variant fails (the reason is in the result). A crash or a timeout leaves
no result, and the parent records the variant as failed.

Role ``profile``: the CUDA context is made by an unrelated op, the variant is built, and every
call from call 1 on is profiled, each inside ``record_function("call<i>")``. Role ``time``: the
same calls without the profiler, each timed with the wall clock between two synchronizes, then
``repeats`` further calls timed with CUDA events. Either way the float64 reference is computed
only after the calls, so its work warms nothing up.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import signal
import sys
import time
import warnings
from contextlib import suppress
from functools import partial
from pathlib import Path
from typing import Any

from capture.config import CaptureConfig, ColdConfig
from capture.environment import describe_environment
from capture.measure import (
    Inputs,
    Step,
    grad_relative_error,
    make_step,
    median_ms,
    output_error,
    random_inputs,
    synced_wall_ms,
    synchronize,
    unrelated_op,
    with_reference,
)
from capture.run import accuracy_problem, forced_backend, result_from_error
from capture.tracing import BACKEND_SOURCE, record_sequence, sdpa_backend
from capture.variants import VARIANTS, Variant

ROLES = ("profile", "time")
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def main(argv: list[str]) -> int:
    """Run the request in ``argv[0]``; 2 when the request itself is unusable."""
    if len(argv) != 1:
        print("usage: python -m capture.cold_worker REQUEST.json", file=sys.stderr)
        return 2
    request = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    if not die_with_parent(request.get("parent_pid")):
        return 1
    started = time.perf_counter()
    import torch  # noqa: F401  (timed: importing torch is part of a cold start)

    import_ms = (time.perf_counter() - started) * 1000.0
    cold = cold_config(request)
    response = run_role(request["role"], VARIANTS[request["variant"]], cold, request.get("trace"))
    response["import_torch_ms"] = import_ms
    Path(request["result"]).write_text(json.dumps(response, indent=1), encoding="utf-8")
    return 0


def die_with_parent(parent_pid: int | None) -> bool:
    """On Linux, have this process killed when the capture that started it dies (a
    ``timeout`` around the capture must leave no worker on the GPU); False when that parent
    is already gone."""
    if sys.platform.startswith("linux"):
        with suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    return parent_pid is None or os.getppid() == parent_pid


def cold_config(request: dict[str, Any]) -> ColdConfig:
    """The `ColdConfig` a request carries."""
    capture = CaptureConfig(**request["capture"])
    return ColdConfig(capture, **request["cold"])


def run_role(role: str, variant: Variant, cold: ColdConfig, trace: str | None) -> dict[str, Any]:
    """The JSON-ready findings of one role (never raises for a variant that fails)."""
    device = cold.capture.device
    context_ms = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            context_ms = synced_wall_ms(partial(unrelated_op, device), device)
            response = _measure(role, variant, cold, trace)
        except Exception as exc:
            result = result_from_error(variant, exc, [str(w.message) for w in caught])
            response = {"status": result.status, "reason": result.reason}
    response["cuda_context_ms"] = context_ms if device == "cuda" else None
    response["environment"] = _environment(device)
    return response


def _environment(device: str) -> dict[str, object] | None:
    """The machine's description, or None where even that fails (no usable GPU)."""
    try:
        return describe_environment(device)
    except Exception:
        return None


def _measure(role: str, variant: Variant, cold: ColdConfig, trace: str | None) -> dict[str, Any]:
    import torch

    config = cold.capture
    shapes = tuple(dict.fromkeys(cold.call_seqs))
    inputs = {seq: random_inputs(dataclasses.replace(config, seq=seq)) for seq in shapes}
    with forced_backend(variant), torch.set_grad_enabled(config.backward):
        fn = variant.build(config.attention_spec(shapes), torch.device(config.device))
        steps = [make_step(fn, inputs[seq], variant.region) for seq in cold.call_seqs]
        first: list[torch.Tensor] = []
        if role == "profile":
            if trace is None:
                raise ValueError("a profile request needs a trace path")
            calls = [
                _profiled_call(i, step, config.device, first) for i, step in enumerate(steps, 1)
            ]
            op_names = record_sequence(
                calls, partial(unrelated_op, config.device), config, Path(trace)
            )
            response: dict[str, Any] = {
                "trace": Path(trace).name,
                "backend": sdpa_backend(op_names) if variant.detect_backend else None,
                "backend_source": BACKEND_SOURCE if variant.detect_backend else None,
            }
        else:
            walls = [synced_wall_ms(_keeping(steps[0], first), config.device)]
            walls += [synced_wall_ms(step, config.device) for step in steps[1:]]
            response = {
                "call_wall_ms": walls,
                "median_ms": median_ms(steps[0], config.repeats, config.device),
                "repeats": config.repeats,
            }
    return {**response, **_accuracy(config, first[0], inputs[config.seq])}


def _profiled_call(i: int, step: Step, device: str, first: list[Any]) -> Step:
    """Call ``i`` inside ``call<i>``, with the synchronize inside too, so the region's span is
    the call's wall time (what the timing process measures)."""
    from torch.profiler import record_function

    def call() -> Any:
        with record_function(f"call{i}"):
            out = step()
            synchronize(device)
        if i == 1:
            first.append(out)
        return out

    return call


def _keeping(step: Step, first: list[Any]) -> Step:
    def call() -> Any:
        out = step()
        first.append(out)
        return out

    return call


def _accuracy(config: CaptureConfig, out: Any, inputs: Inputs) -> dict[str, Any]:
    """Call 1's error (and the gradients' on the first shape) against float64, computed now."""
    checked = with_reference(config, inputs)
    error = output_error(out, checked)
    grad_error = grad_relative_error(checked)
    problem = accuracy_problem(config, error, grad_error)
    return {
        "status": "failed" if problem else "ok",
        "reason": problem,
        "relative_error": error,
        "grad_relative_error": grad_error,
    }


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
