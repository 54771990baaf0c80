"""Run the selected variants: check accuracy, time, profile; write traces and the manifest.

Prints nothing: progress goes to the optional callback, results to the returned `Manifest`.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType

from capture.config import CaptureConfig
from capture.environment import describe_environment
from capture.errors import CaptureError
from capture.manifest import Manifest, VariantResult, write_manifest
from capture.measure import (
    Inputs,
    grad_relative_error,
    make_inputs,
    make_step,
    median_ms,
    relative_error,
)
from capture.tracing import BACKEND_SOURCE, record_trace, sdpa_backend
from capture.variants import VARIANTS, Variant

ProgressCallback = Callable[[str, VariantResult], None]

# An error whose message holds the fragment means this machine cannot run the variant: skip it.
SKIP_WHEN = (
    ("No available kernel", "no kernel of this backend supports this GPU, build or input"),
    ("out of memory", "out of GPU memory"),
    ("Cannot find a working triton installation", "no working Triton"),
)
MAX_REASON_CHARS = 600
METHOD = {
    "warm_up": "one untimed call per variant before timing and profiling, so torch.compile, "
    "autotuning and cuDNN plan building stay out of the trace; the profiler's own "
    "wait/warmup steps are then skipped as usual",
    "timing": "median of `repeats` calls outside the profiler: CUDA events recorded around each "
    "call (one synchronize at the end) on the GPU, time.perf_counter on the CPU",
    "accuracy": "||out - ref|| / ||ref|| against float64 naive attention on the same inputs; "
    "with backward, grad_relative_error is the worst of dq, dk, dv",
    "grad_mode": "torch.no_grad() unless backward",
    "sdpa_backend": BACKEND_SOURCE,
}


def run_capture(
    config: CaptureConfig,
    out_dir: Path | str,
    progress: ProgressCallback | None = None,
    command: Sequence[str] = (),
) -> Manifest:
    """Record ``<variant>.json.gz`` for each of ``config.variants`` and ``manifest.json`` into
    ``out_dir``. Variants that cannot run here are skipped and wrong results are marked failed
    (see `Manifest.failed`); a capture that cannot start at all raises `CaptureError`."""
    torch = _import_torch()
    _check_device(torch, config)
    out = _prepare_out_dir(Path(out_dir))
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    environment = describe_environment(config.device)
    inputs = _make_inputs(torch, config)
    results: dict[str, VariantResult] = {}
    for name in config.variants:
        results[name] = run_variant(VARIANTS[name], config, inputs, out)
        if progress is not None:
            progress(name, results[name])
    manifest = Manifest(created, tuple(command), environment, config.to_dict(), METHOD, results)
    write_manifest(manifest, out / "manifest.json")
    return manifest


def run_variant(
    variant: Variant, config: CaptureConfig, inputs: Inputs, out_dir: Path
) -> VariantResult:
    """One variant's result; never raises for a variant that cannot run or runs wrong."""
    if variant.needs_cuda and config.device != "cuda":
        return VariantResult(
            "skipped",
            variant.description,
            reason=f"needs CUDA; this capture runs on {config.device}",
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return _measure(variant, config, inputs, out_dir)
        except Exception as exc:
            return _result_from_error(variant, exc, [str(w.message) for w in caught])
        finally:
            _release_memory(config.device)


def _measure(
    variant: Variant, config: CaptureConfig, inputs: Inputs, out_dir: Path
) -> VariantResult:
    import torch

    with _forced_backend(variant), torch.set_grad_enabled(config.backward):
        step = make_step(variant.build(config, torch.device(config.device)), inputs, variant.region)
        error = relative_error(step(), inputs.expected_out)  # the untimed warm-up call
        grad_error = grad_relative_error(inputs)
        median = median_ms(step, config.repeats, config.device)
        trace = f"{variant.name}.json.gz"
        op_names = record_trace(step, config, out_dir / trace)
    problem = _accuracy_problem(config, error, grad_error)
    return VariantResult(
        "failed" if problem else "ok",
        variant.description,
        reason=problem,
        trace=trace,
        relative_error=error,
        grad_relative_error=grad_error,
        median_ms=median,
        repeats=config.repeats,
        backend=sdpa_backend(op_names) if variant.detect_backend else None,
        backend_source=BACKEND_SOURCE if variant.detect_backend else None,
    )


@contextlib.contextmanager
def _forced_backend(variant: Variant) -> Iterator[None]:
    if variant.sdpa_backend is None:
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(getattr(SDPBackend, variant.sdpa_backend)):
        yield


def _accuracy_problem(
    config: CaptureConfig, error: float | None, grad_error: float | None
) -> str | None:
    checks = [("output", error)] + ([("gradient", grad_error)] if config.backward else [])
    bad = [
        f"{what} relative error {'not finite' if value is None else f'{value:.3g}'}"
        for what, value in checks
        if value is None or value > config.tolerance
    ]
    if not bad:
        return None
    return f"wrong result: {', '.join(bad)} (tolerance for {config.dtype}: {config.tolerance:g})"


def _result_from_error(variant: Variant, exc: Exception, warned: list[str]) -> VariantResult:
    message = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}"
    why = next((why for fragment, why in SKIP_WHEN if fragment in str(exc)), None)
    if why is None:
        return VariantResult("failed", variant.description, reason=message[:MAX_REASON_CHARS])
    details = "; ".join(dict.fromkeys(w.strip().splitlines()[0] for w in warned if w.strip()))
    reason = f"{why} ({message})" + (f"; warnings: {details}" if details else "")
    return VariantResult("skipped", variant.description, reason=reason[:MAX_REASON_CHARS])


def _release_memory(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def _import_torch() -> ModuleType:
    try:
        import torch
    except ImportError as exc:
        raise CaptureError(
            "torch is not installed; capture needs it: install the capture "
            "extra (pip install 'traceanalyze[capture]')"
        ) from exc
    return torch


def _check_device(torch: ModuleType, config: CaptureConfig) -> None:
    if config.device == "cuda" and not torch.cuda.is_available():
        raise CaptureError(
            f"CUDA is not available to torch {torch.__version__} (a CPU build or "
            "no GPU visible); run on a GPU machine or pass --device cpu"
        )
    if config.device == "cpu" and all(VARIANTS[n].needs_cuda for n in config.variants):
        runnable = ", ".join(n for n, v in VARIANTS.items() if not v.needs_cuda)
        raise CaptureError(
            f"every selected variant needs CUDA ({', '.join(config.variants)}); "
            f"on the CPU choose among {runnable}"
        )


def _prepare_out_dir(out_dir: Path) -> Path:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / ".capture-write-test"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise CaptureError(
            f"{out_dir}: cannot write the output folder ({exc.strerror}); choose another --out"
        ) from exc
    return out_dir


def _make_inputs(torch: ModuleType, config: CaptureConfig) -> Inputs:
    try:
        return make_inputs(config)
    except torch.OutOfMemoryError as exc:
        raise CaptureError(
            "the inputs and float64 reference for this shape do not fit in "
            "memory; choose a smaller --batch/--heads/--seq"
        ) from exc
