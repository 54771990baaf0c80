"""The manifest written beside the traces: what ran, where, with which results."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from capture.caches import CacheState

SCHEMA = 1
Status = Literal["ok", "skipped", "failed"]


@dataclass(frozen=True)
class ProcessRecord:
    """One fresh process of a cold capture: how it ended and the caches it started with."""

    role: str  # "profile" (writes the trace) or "time" (wall clock, no profiler)
    returncode: int | None  # None: killed after the timeout
    timed_out: bool
    wall_s: float
    import_torch_ms: float | None = None
    cuda_context_ms: float | None = None
    caches_before: tuple[CacheState, ...] = ()
    caches_after: tuple[CacheState, ...] = ()
    log: str | None = None  # the process's output, relative to the capture folder

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProcessRecord:
        """The inverse of ``dataclasses.asdict``."""
        states = {
            key: tuple(CacheState(**state) for state in data[key])
            for key in ("caches_before", "caches_after")
        }
        return cls(**{**data, **states})


@dataclass(frozen=True)
class ColdResult:
    """A variant's cold-start figures, all from the process that ran without the profiler.

    ``call_wall_ms`` holds every call, call 1 first (wall clock, synchronize before and after;
    with several timing processes, each call's median over them); ``call1_ms`` is call 1 and
    ``call1_ms_per_process`` its time in each timing process (the spread one-off costs have
    between processes); ``steady_median_ms`` is the median of the calls listed in the
    manifest's ``config.cold.steady_calls``. ``cache_state`` says what the caches held at the
    start.
    """

    cache_state: str
    call1_ms: float | None = None
    steady_median_ms: float | None = None
    call_wall_ms: tuple[float, ...] = ()
    processes: tuple[ProcessRecord, ...] = ()
    call1_ms_per_process: tuple[float, ...] = ()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ColdResult:
        """The inverse of ``dataclasses.asdict``."""
        processes = tuple(ProcessRecord.from_dict(p) for p in data["processes"])
        return cls(
            **{
                **data,
                "call_wall_ms": tuple(data["call_wall_ms"]),
                "call1_ms_per_process": tuple(data.get("call1_ms_per_process", ())),
                "processes": processes,
            }
        )


@dataclass(frozen=True)
class VariantResult:
    """The outcome of one variant: its trace file, accuracy and median time, or why not.
    A cold capture adds ``cold`` (absent from the JSON of other captures)."""

    status: Status
    description: str
    reason: str | None = None
    trace: str | None = None
    relative_error: float | None = None
    grad_relative_error: float | None = None
    median_ms: float | None = None
    repeats: int = 0
    backend: str | None = None
    backend_source: str | None = None
    cold: ColdResult | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; ``cold`` only where there is one."""
        body = dataclasses.asdict(self)
        if self.cold is None:
            del body["cold"]
        return body

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VariantResult:
        """The inverse of `to_dict`."""
        cold = data.get("cold")
        return cls(**{**data, "cold": None if cold is None else ColdResult.from_dict(cold)})


@dataclass(frozen=True)
class Manifest:
    """Everything ``manifest.json`` holds; ``variants`` keeps the order they ran in."""

    created: str
    command: tuple[str, ...]
    environment: dict[str, object]
    config: dict[str, object]
    method: dict[str, object]
    variants: dict[str, VariantResult] = field(default_factory=dict)
    schema: int = SCHEMA

    @property
    def failed(self) -> list[str]:
        """Names of the variants whose status is ``failed``."""
        return [name for name, result in self.variants.items() if result.status == "failed"]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with ``schema`` first."""
        return {
            "schema": self.schema,
            "created": self.created,
            "command": list(self.command),
            "environment": self.environment,
            "config": self.config,
            "method": self.method,
            "variants": {name: result.to_dict() for name, result in self.variants.items()},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Manifest:
        """The inverse of `to_dict`."""
        variants = {name: VariantResult.from_dict(v) for name, v in data["variants"].items()}
        return cls(
            created=data["created"],
            command=tuple(data["command"]),
            environment=data["environment"],
            config=data["config"],
            method=data["method"],
            variants=variants,
            schema=data["schema"],
        )


def write_manifest(manifest: Manifest, path: Path) -> None:
    """Write ``manifest`` as indented JSON."""
    path.write_text(json.dumps(manifest.to_dict(), indent=2) + "\n", encoding="utf-8")


def read_manifest(path: Path) -> Manifest:
    """Read a manifest written by `write_manifest`."""
    return Manifest.from_dict(json.loads(path.read_text(encoding="utf-8")))
