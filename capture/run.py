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
from typing import TYPE_CHECKING

from capture import cases
from capture.cases import dispatch
from capture.config import CaptureConfig
from capture.environment import describe_environment
from capture.errors import CaptureError
from capture.graphs import METHOD as GRAPH_METHOD
from capture.graphs import measure_graphed
from capture.manifest import MANIFEST_FILE, Manifest, VariantResult, write_manifest
from capture.measure import (
    Inputs,
    Measured,
    grad_relative_error,
    make_inputs,
    make_step,
    median_ms,
    output_error,
)
from capture.tracing import BACKEND_SOURCE, record_trace, sdpa_backend
from capture.variants import VARIANTS, Attention, Variant

if TYPE_CHECKING:
    import torch

ProgressCallback = Callable[[str, VariantResult], None]

# An error whose message holds the fragment means this machine cannot run the variant: skip it.
SKIP_WHEN = (
    ("No available kernel", "no kernel of this backend supports this GPU, build or input"),
    ("out of memory", "out of GPU memory"),
    ("Cannot find a working triton installation", "no working Triton"),
)
MAX_REASON_CHARS = 600
METHOD: dict[str, object] = {
    # Machine-readable: one-off work (plans, autotuning, compilation) ran before the profiled
    # window, so no trace of this capture holds it (see `python -m capture --cold` for that).
    "warm_up_calls": 1,
    "one_off_work_in_trace": False,
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


def capture_method(config: CaptureConfig) -> dict[str, object]:
    """The manifest's ``method`` for ``config`` (CUDA graph modes describe their steps)."""
    if config.cuda_graph == "off":
        return dict(METHOD)
    return {**METHOD, "cuda_graph": GRAPH_METHOD[config.cuda_graph]}


def run_capture(
    config: CaptureConfig,
    out_dir: Path | str,
    progress: ProgressCallback | None = None,
    command: Sequence[str] = (),
) -> Manifest:
    """Record ``<variant>.json.gz`` for each of ``config.variants`` and ``manifest.json`` into
    ``out_dir``. Variants that cannot run here are skipped and wrong results are marked failed
    (see `Manifest.failed`); a capture that cannot start at all raises `CaptureError`."""
    torch = import_torch()
    check_device(torch, config)
    out = prepare_out_dir(Path(out_dir))
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    environment = describe_environment(config.device)
    inputs = _make_inputs(torch, config)
    results: dict[str, VariantResult] = {}
    manifest = Manifest(
        created, tuple(command), environment, config.to_dict(), capture_method(config), results
    )
    # Written before and after every variant (``results`` fills in place): a capture killed by
    # a time limit keeps its environment and the variants it finished.
    write_manifest(manifest, out / MANIFEST_FILE)
    for name in config.variants:
        results[name] = run_variant(VARIANTS[name], config, inputs, out)
        if progress is not None:
            progress(name, results[name])
        write_manifest(manifest, out / MANIFEST_FILE)
    return manifest


def run_variant(
    variant: Variant, config: CaptureConfig, inputs: Inputs, out_dir: Path
) -> VariantResult:
    """One variant's result; never raises for a variant that cannot run or runs wrong."""
    needs = _needs_cuda(variant, config)
    if needs and config.device != "cuda":
        return VariantResult(
            "skipped", variant.description, reason=f"{needs}; this capture runs on {config.device}"
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return _measure(variant, config, inputs, out_dir)
        except Exception as exc:
            return result_from_error(variant, exc, [str(w.message) for w in caught])
        finally:
            _release_memory(config.device)


def _measure(
    variant: Variant, config: CaptureConfig, inputs: Inputs, out_dir: Path
) -> VariantResult:
    import torch

    trace = f"{variant.name}.json.gz"
    device = torch.device(config.device)
    tolerance, facts, verdicts = None, classic_facts(variant, config), None
    with forced_backend(variant), torch.set_grad_enabled(config.backward):
        if variant.case is not None:
            case = variant.case(config.case_spec(), device)
            inputs = Inputs(case.q, case.k, case.v, None, expected_out=case.reference())
            tolerance, facts = case.tolerance, case.facts
            arguments = case.sdpa_arguments
            fn: Attention = _dense_output(case)
        else:
            fn = variant.build(config.attention_spec(), device)
            arguments = (inputs.q, inputs.k, inputs.v, None, 0.0, config.causal, False)
        if variant.detect_backend and arguments is not None and config.device == "cuda":
            verdicts = dispatch(arguments)
        if config.cuda_graph == "off":
            measured = _measure_eager(fn, variant.region, config, inputs, out_dir / trace)
        else:
            measured = measure_graphed(fn, variant.region, config, inputs, out_dir / trace)
    problem = accuracy_problem(
        config, measured.relative_error, measured.grad_relative_error, tolerance
    )
    return VariantResult(
        "failed" if problem else "ok",
        variant.description,
        reason=problem,
        trace=trace,
        relative_error=measured.relative_error,
        grad_relative_error=measured.grad_relative_error,
        median_ms=measured.median_ms,
        repeats=config.repeats,
        backend=sdpa_backend(measured.op_names) if variant.detect_backend else None,
        backend_source=BACKEND_SOURCE if variant.detect_backend else None,
        attention=facts,
        dispatch=verdicts,
        sdpa_forced=variant.sdpa_backend,
    )


def _dense_output(case: cases.Case) -> Attention:
    """The case's call, its output as a dense tensor (a nested output's values)."""

    def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return case.dense(case.fn(q, k, v))

    return call


# The variants whose attention is composed of ops (every score computed and written).
COMPOSED_VARIANTS = ("naive", "naive_inplace", "compiled_naive", "sdpa_math")


def classic_facts(variant: Variant, config: CaptureConfig) -> dict[str, object]:
    """The manifest's ``attention`` facts of a variant on the shared inputs."""
    mask = "bool" if variant.name in ("naive", "naive_inplace", "compiled_naive") else "none"
    if variant.name == "flex_attention":
        mask = "block"
    return cases.facts(
        config.case_spec(),
        causal=config.causal,
        mask=mask if config.causal or mask == "block" else "none",
        composed=variant.name in COMPOSED_VARIANTS,
    )  # fmt: skip


def _measure_eager(
    fn: Attention, region: str, config: CaptureConfig, inputs: Inputs, path: Path
) -> Measured:
    step = make_step(fn, inputs, region)
    error = output_error(step(), inputs)  # the untimed warm-up call
    grad_error = grad_relative_error(inputs)
    median = median_ms(step, config.repeats, config.device)
    return Measured(error, grad_error, median, record_trace(step, config, path))


def _needs_cuda(variant: Variant, config: CaptureConfig) -> str | None:
    """Why ``variant`` cannot run without CUDA under ``config`` (None: it can)."""
    if config.cuda_graph != "off":
        return "CUDA graphs need CUDA"
    return "needs CUDA" if variant.needs_cuda else None


@contextlib.contextmanager
def forced_backend(variant: Variant) -> Iterator[None]:
    """Force ``variant``'s SDPA backend (if it names one) for the block."""
    if variant.sdpa_backend is None:
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(getattr(SDPBackend, variant.sdpa_backend)):
        yield


def accuracy_problem(
    config: CaptureConfig,
    error: float | None,
    grad_error: float | None,
    tolerance: float | None = None,
) -> str | None:
    """Why the result is wrong (None: within ``tolerance``, else the dtype's)."""
    allowed = config.tolerance if tolerance is None else tolerance
    checks = [("output", error)] + ([("gradient", grad_error)] if config.backward else [])
    bad = [
        f"{what} relative error {'not finite' if value is None else f'{value:.3g}'}"
        for what, value in checks
        if value is None or value > allowed
    ]
    if not bad:
        return None
    whose = f"for {config.dtype}" if tolerance is None else "for this case"
    return f"wrong result: {', '.join(bad)} (tolerance {whose}: {allowed:g})"


def result_from_error(variant: Variant, exc: Exception, warned: list[str]) -> VariantResult:
    """A skip (this machine cannot run the variant) or a failure, with the reason."""
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


def import_torch() -> ModuleType:
    """torch, or a `CaptureError` that says how to install it."""
    try:
        import torch
    except ImportError as exc:
        raise CaptureError(
            "torch is not installed; capture needs it: install the capture "
            "extra (pip install 'traceanalyze[capture]')"
        ) from exc
    return torch


def check_device(torch: ModuleType, config: CaptureConfig) -> None:
    """Raise `CaptureError` when this machine cannot run any of ``config`` at all."""
    if config.device == "cuda" and not torch.cuda.is_available():
        raise CaptureError(
            f"CUDA is not available to torch {torch.__version__} (a CPU build or "
            "no GPU visible); run on a GPU machine or pass --device cpu"
        )
    if config.device == "cpu" and config.cuda_graph != "off":
        raise CaptureError(
            f"--cuda-graph {config.cuda_graph} needs CUDA; run on a GPU machine or drop "
            "--cuda-graph"
        )
    if config.device == "cpu" and all(VARIANTS[n].needs_cuda for n in config.variants):
        runnable = ", ".join(n for n, v in VARIANTS.items() if not v.needs_cuda)
        raise CaptureError(
            f"every selected variant needs CUDA ({', '.join(config.variants)}); "
            f"on the CPU choose among {runnable}"
        )


def prepare_out_dir(out_dir: Path) -> Path:
    """``out_dir``, created and proven writable (or a `CaptureError` naming it)."""
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
