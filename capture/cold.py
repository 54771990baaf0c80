"""Cold start: every variant in fresh processes, its first call profiled and, apart, timed.

For each variant two processes run one after the other (``python -m capture.cold_worker``, see
there): ``profile`` writes ``<variant>.json.gz`` with call 1 onwards in the trace; ``time`` runs
the same calls without the profiler and times each with the wall clock, the truth the
trace-derived figures are checked against. Both start from the same cache state: with
``empty_caches`` each gets its own empty cache folders; otherwise the caches are used as found
and their state before and after each process is recorded. This process makes no CUDA
context (it only asks torch whether CUDA is available).

A variant whose process fails, crashes or runs past the timeout is recorded as failed with the
reason (its output is kept under ``logs/``); the others still run.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from capture.caches import CACHES, NOT_CONTROLLED, cache_states, cold_cost_env, fresh_cache_env
from capture.config import ColdConfig
from capture.manifest import (
    MANIFEST_FILE,
    ColdResult,
    Manifest,
    ProcessRecord,
    VariantResult,
    write_manifest,
)
from capture.measure import UNRELATED_OP
from capture.run import ProgressCallback, check_device, import_torch, prepare_out_dir
from capture.tracing import BACKEND_SOURCE
from capture.variants import VARIANTS, Variant

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
LOGS = "logs"
TAIL_LINES = 3
MAX_REASON_CHARS = 600


@dataclass(frozen=True)
class ProcessOutcome:
    """How a worker process ended (``returncode`` None: killed after ``timeout_s``)."""

    returncode: int | None
    timed_out: bool
    wall_s: float


ProcessRunner = Callable[[Sequence[str], Mapping[str, str], float, Path], ProcessOutcome]


@dataclass(frozen=True)
class WorkerRun:
    """One worker's record for the manifest and what it reported (``status`` always set)."""

    record: ProcessRecord
    response: dict[str, Any] = field(default_factory=dict)


def cold_method(cold: ColdConfig) -> dict[str, object]:
    """The manifest's ``method`` for a cold capture."""
    caches = ", ".join(f"{c.name} ({c.env_var}: {c.holds})" for c in CACHES)
    return {
        # Machine-readable: nothing ran before call 1 but the context op, so the one-off work
        # (plans, autotuning, compilation, lazy loading) is in the trace.
        "warm_up_calls": 0,
        "one_off_work_in_trace": True,
        "cuda_context_made_by": UNRELATED_OP,
        "cache_state": cold.cache_state,
        "processes": "each variant runs in fresh processes, one after the other: 'profile' "
        "writes the trace, then config.cold.timing_processes 'time' processes measure the same "
        "calls without the profiler; each process's caches_before says what it started with",
        "before_call_1": f"the CUDA context is made by {UNRELATED_OP}, then the inputs are "
        "made (torch.randn) and the variant built (masks, torch.compile wrappers)",
        "profiled_calls": "ProfilerStep#i holds record_function('call<i>'), i = 1..calls; "
        "each call ends with a synchronize inside its region, so the region's span is the "
        "call's wall time; the profiler's warm-up step runs the context op again, so the "
        "profiler's start-up is not charged to call 1",
        "timing": "call_wall_ms: time.perf_counter around each call with a synchronize "
        "before and after (the same calls and shapes as the profiled process, no profiler); "
        "with several timing processes each call's median over them (call1_ms_per_process "
        "keeps call 1 of each: the spread of one-off costs between processes); call1_ms is "
        "call 1, steady_median_ms the median of config.cold.steady_calls; "
        "median_ms: CUDA events over `repeats` further calls on the first shape",
        "accuracy": "call 1's output against float64 naive attention (gradients: the first "
        "shape's after its last call), computed after the measured calls",
        "caches": caches,
        "empty_caches": "each process gets fresh empty folders for every cache above, through "
        "the variables named",
        "not_controlled": NOT_CONTROLLED,
        "sdpa_backend": BACKEND_SOURCE,
    }


def run_cold(
    cold: ColdConfig,
    out_dir: Path | str,
    progress: ProgressCallback | None = None,
    command: Sequence[str] = (),
    runner: ProcessRunner | None = None,
) -> Manifest:
    """Record a cold-start trace and timing of each of ``cold.capture.variants`` into
    ``out_dir`` with ``manifest.json``; failures are recorded per variant (see
    `Manifest.failed`), a capture that cannot start at all raises `CaptureError`."""
    check_device(import_torch(), cold.capture)
    out = prepare_out_dir(Path(out_dir))
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    results: dict[str, VariantResult] = {}
    environments: list[dict[str, object]] = []
    for name in cold.capture.variants:
        results[name], environment = run_cold_variant(
            VARIANTS[name], cold, out, runner or run_process
        )
        environments += [environment] if environment else []
        if progress is not None:
            progress(name, results[name])
    with suppress(OSError):  # only when no process left any output
        (out / LOGS).rmdir()
    config = {
        **cold.capture.to_dict(),
        "cold": {**cold.to_dict(), "env": cold_cost_env(os.environ)},
    }
    environment = environments[0] if environments else {"device": cold.capture.device}
    manifest = Manifest(created, tuple(command), environment, config, cold_method(cold), results)
    write_manifest(manifest, out / MANIFEST_FILE)
    return manifest


def run_cold_variant(
    variant: Variant, cold: ColdConfig, out: Path, runner: ProcessRunner
) -> tuple[VariantResult, dict[str, object] | None]:
    """One variant's result and the environment its worker described (None: no worker ran
    or it could not say)."""
    if variant.needs_cuda and cold.capture.device != "cuda":
        reason = f"needs CUDA; this capture runs on {cold.capture.device}"
        return VariantResult(
            "skipped", variant.description, reason=reason, cold=ColdResult(cold.cache_state)
        ), None
    profile = _run_worker("profile", variant, cold, out, runner)
    # A variant that cannot run or ran wrong under the profiler is not timed: it would only
    # spend more fresh starts (seconds to minutes each) on the same outcome.
    timings: list[WorkerRun] = []
    while profile.response["status"] == "ok" and len(timings) < cold.timing_processes:
        timings.append(_run_worker("time", variant, cold, out, runner, len(timings) + 1))
        if timings[-1].response["status"] != "ok":
            break
    return _result(variant, cold, out, profile, timings), profile.response.get("environment")


def run_process(
    argv: Sequence[str], env: Mapping[str, str], timeout_s: float, log: Path
) -> ProcessOutcome:
    """Run ``argv`` in its own process group with its output in ``log``; past ``timeout_s``
    the whole group is killed (torch.compile's worker processes included)."""
    started = time.perf_counter()
    with log.open("wb") as sink:
        process = subprocess.Popen(
            list(argv),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            returncode: int | None = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            returncode = None
    return ProcessOutcome(returncode, returncode is None, time.perf_counter() - started)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _run_worker(
    role: str,
    variant: Variant,
    cold: ColdConfig,
    out: Path,
    runner: ProcessRunner,
    index: int | None = None,
) -> WorkerRun:
    """One fresh worker process; ``index`` numbers the timing processes (their logs)."""
    log = out / LOGS / f"{variant.name}.{role}{index if index and index > 1 else ''}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with _scratch() as scratch:
        fresh = scratch / "caches" if cold.empty_caches else None
        env = _worker_env(fresh)
        request = {
            "role": role,
            "variant": variant.name,
            "capture": cold.capture.to_dict(),
            "cold": {
                "calls": cold.calls,
                "empty_caches": cold.empty_caches,
                "new_shape_every": cold.new_shape_every,
                "process_timeout_s": cold.process_timeout_s,
            },
            "trace": str(out / f"{variant.name}.json.gz") if role == "profile" else None,
            "result": str(scratch / "result.json"),
            "parent_pid": os.getpid(),
        }
        (scratch / "request.json").write_text(json.dumps(request), encoding="utf-8")
        argv = [sys.executable, "-m", "capture.cold_worker", str(scratch / "request.json")]
        before = cache_states(env, fresh)
        outcome = runner(argv, env, cold.process_timeout_s, log)
        after = cache_states(env, fresh)
        response = _response(scratch / "result.json", role, outcome, cold.process_timeout_s, log)
    record = ProcessRecord(
        role,
        outcome.returncode,
        outcome.timed_out,
        round(outcome.wall_s, 3),
        response.get("import_torch_ms"),
        response.get("cuda_context_ms"),
        before,
        after,
        _kept_log(log, out),
    )
    return WorkerRun(record, response)


@contextmanager
def _scratch() -> Iterator[Path]:
    """A private folder for the request, the result and (with empty caches) the caches."""
    with tempfile.TemporaryDirectory(prefix="capture-cold-", ignore_cleanup_errors=True) as tmp:
        yield Path(tmp)


def _worker_env(fresh: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    if fresh is not None:
        env |= fresh_cache_env(fresh)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(PACKAGE_ROOT) + (os.pathsep + path if path else "")
    return env


def _response(
    path: Path, role: str, outcome: ProcessOutcome, timeout_s: float, log: Path
) -> dict[str, Any]:
    """The worker's result, or a failure saying why there is none."""
    if outcome.timed_out:
        reason = f"the {role} process ran past the {timeout_s:g} s timeout and was killed"
        return {"status": "failed", "reason": reason}
    try:
        response: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        reason = (
            f"the {role} process exited with status {outcome.returncode} and wrote no "
            f"result; its output ends: {_tail(log)}"
        )
        return {"status": "failed", "reason": reason[:MAX_REASON_CHARS]}
    return response


def _tail(log: Path) -> str:
    text = log.read_text(errors="replace") if log.is_file() else ""
    lines = [line.strip() for line in text.splitlines()]
    return " | ".join([line for line in lines if line][-TAIL_LINES:]) or "(nothing)"


def _kept_log(log: Path, out: Path) -> str | None:
    """The log's path relative to ``out``; an empty log is removed instead."""
    if not log.is_file() or log.stat().st_size == 0:
        log.unlink(missing_ok=True)
        return None
    return str(log.relative_to(out))


def _result(
    variant: Variant,
    cold: ColdConfig,
    out: Path,
    profile: WorkerRun,
    timings: Sequence[WorkerRun],
) -> VariantResult:
    profiled = profile.response
    status, reason = profiled["status"], profiled.get("reason")
    failed = next((t.response for t in timings if t.response["status"] != "ok"), None)
    if failed is not None and status == "ok":
        status, reason = "failed", f"timing process: {failed.get('reason')}"
    timed = [t.response for t in timings if t.response["status"] == "ok"]
    runs = [tuple(t.get("call_wall_ms", ())) for t in timed]
    # Each call's median over the timing processes: one process's one-off cost is one sample.
    walls = tuple(statistics.median(calls) for calls in zip(*runs, strict=True)) if runs else ()
    steady = [walls[i - 1] for i in cold.steady_calls if i <= len(walls)]
    medians = [t["median_ms"] for t in timed if t.get("median_ms") is not None]
    trace = profiled.get("trace")
    return VariantResult(
        status,
        variant.description,
        reason=reason,
        trace=trace if trace and (out / trace).is_file() else None,
        relative_error=profiled.get("relative_error"),
        grad_relative_error=profiled.get("grad_relative_error"),
        median_ms=statistics.median(medians) if medians else None,
        repeats=timed[0].get("repeats", 0) if timed else 0,
        backend=profiled.get("backend"),
        backend_source=profiled.get("backend_source"),
        sdpa_forced=variant.sdpa_backend,
        cold=ColdResult(
            cold.cache_state,
            call1_ms=walls[0] if walls else None,
            steady_median_ms=statistics.median(steady) if steady else None,
            call_wall_ms=walls,
            processes=(profile.record, *(t.record for t in timings)),
            call1_ms_per_process=tuple(run[0] for run in runs if run),
        ),
    )
