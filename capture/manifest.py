"""The manifest written beside the traces: what ran, where, with which results.

The one definition of ``manifest.json``: capture writes it, and traceanalyze reads it through
:func:`manifest_from_dict`, which takes manifests of older schemas (and hand-written ones) as
they are: a field they lack takes the value in ``_WHEN_ABSENT``, a field this version does not
know is dropped. Standard library only: capture runs on a GPU box with torch and nothing else.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from capture.caches import CacheState

SCHEMA = 1
# The manifest's file name in a capture folder: capture writes it, traceanalyze looks for it.
MANIFEST_FILE = "manifest.json"
Status = Literal["ok", "skipped", "failed"]
_FORCED_IN_DESCRIPTION = re.compile(r"with sdpa_kernel\(SDPBackend\.([A-Z_]+)\)")
T = TypeVar("T")


class ManifestError(ValueError):
    """A manifest that is JSON but not a capture manifest (the reader says which part)."""


@dataclass(frozen=True)
class ProcessRecord:
    """One fresh process of a cold capture: how it ended and the caches it started with."""

    role: str | None  # "profile" (writes the trace) or "time" (wall clock, no profiler)
    returncode: int | None  # None: killed after the timeout
    timed_out: bool
    wall_s: float | None  # None only in manifests that do not state it
    import_torch_ms: float | None = None
    cuda_context_ms: float | None = None
    caches_before: tuple[CacheState, ...] = ()
    caches_after: tuple[CacheState, ...] = ()
    log: str | None = None  # the process's output, relative to the capture folder

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProcessRecord:
        """The inverse of ``dataclasses.asdict`` (tolerant: see the module)."""
        data = _fields(cls, data)
        states = {
            key: tuple(_build(CacheState, state) for state in _list(data, key))
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

    cache_state: str | None  # None only in manifests that do not state it
    call1_ms: float | None = None
    steady_median_ms: float | None = None
    call_wall_ms: tuple[float, ...] = ()
    processes: tuple[ProcessRecord, ...] = ()
    call1_ms_per_process: tuple[float, ...] = ()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ColdResult:
        """The inverse of ``dataclasses.asdict`` (tolerant: see the module)."""
        data = _fields(cls, data)
        return cls(
            **{
                **data,
                "call_wall_ms": tuple(_list(data, "call_wall_ms")),
                "call1_ms_per_process": tuple(_list(data, "call1_ms_per_process")),
                "processes": tuple(ProcessRecord.from_dict(p) for p in _list(data, "processes")),
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
    # What the trace of the call should show (shapes, dtype, mask, causal, dense FLOPs; see
    # capture.cases.facts), and PyTorch's own verdict on each fused SDPA backend for it.
    attention: dict[str, Any] | None = None
    dispatch: dict[str, Any] | None = None
    # The SDPBackend member the capture forced with sdpa_kernel (None: PyTorch chose).
    sdpa_forced: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; ``cold``, ``attention``, ``dispatch`` and ``sdpa_forced`` only where
        there are some."""
        body = dataclasses.asdict(self)
        for optional in ("cold", "attention", "dispatch", "sdpa_forced"):
            if getattr(self, optional) is None:
                del body[optional]
        return body

    @property
    def forced_backend(self) -> str | None:
        """The SDPBackend member forced with sdpa_kernel: ``sdpa_forced``, or for a manifest
        written before that field, the one the description names (capture.variants._forced
        writes "... with sdpa_kernel(SDPBackend.MATH)"); None: PyTorch chose."""
        if self.sdpa_forced is not None:
            return self.sdpa_forced
        found = _FORCED_IN_DESCRIPTION.search(self.description)
        return found.group(1) if found else None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VariantResult:
        """The inverse of `to_dict` (tolerant: see the module)."""
        data = _fields(cls, data)
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
    def warm_up_calls(self) -> int | None:
        """How many calls of each variant ran before profiling started (None: not said).

        Manifests state it as ``method.warm_up_calls`` (0 for cold captures); older ones
        describe one warm-up call in ``method.warm_up`` only."""
        for stated in (self.method.get("warm_up_calls"), self.config.get("warm_up_calls")):
            if isinstance(stated, int) and not isinstance(stated, bool):
                return stated
        return 1 if "warm_up" in self.method else None

    @property
    def call_seqs(self) -> tuple[int | str, ...] | None:
        """Each call's sequence length in a cold capture (``config.cold.call_seqs``)."""
        cold = self.config.get("cold")
        seqs = cold.get("call_seqs") if isinstance(cold, dict) else None
        return tuple(seqs) if isinstance(seqs, list) else None

    def entry_for(self, trace_name: str) -> tuple[str, VariantResult] | None:
        """The variant whose trace file is called ``trace_name``, with its result."""
        for name, result in self.variants.items():
            if result.trace == trace_name:
                return name, result
        return None

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
        """The inverse of `to_dict` (tolerant: see the module)."""
        if not isinstance(data, dict) or not isinstance(data.get("variants"), dict):
            raise ManifestError("no 'variants' object")
        data = _fields(cls, data)
        variants = {
            name: _part(f"variant {name!r}", VariantResult.from_dict, v)
            for name, v in data["variants"].items()
        }
        return cls(**{**data, "command": tuple(_list(data, "command")), "variants": variants})


def manifest_from_dict(data: Any) -> Manifest:
    """A manifest of any schema read so far, or a `ManifestError` that says what is wrong."""
    return Manifest.from_dict(data)


def write_manifest(manifest: Manifest, path: Path) -> None:
    """Write ``manifest`` as indented JSON, whole or not at all (written beside, then renamed:
    a capture killed mid-write leaves the previous manifest)."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(manifest.to_dict(), indent=2) + "\n", encoding="utf-8")
    partial.replace(path)


def read_manifest(path: Path) -> Manifest:
    """Read a manifest written by `write_manifest` (or an older one)."""
    return manifest_from_dict(json.loads(path.read_text(encoding="utf-8")))


# What a field is when a manifest does not state it (older schemas, hand-written manifests).
_WHEN_ABSENT: dict[type, dict[str, Any]] = {
    Manifest: {
        "created": None, "command": (), "environment": {}, "config": {}, "method": {},
        "schema": 0,
    },
    VariantResult: {"status": "ok", "description": ""},
    ColdResult: {"cache_state": None},
    ProcessRecord: {"role": None, "returncode": None, "timed_out": False, "wall_s": None},
    CacheState: {
        "name": "", "env_var": "", "path": "", "source": "", "exists": False, "empty": False,
        "files": 0, "bytes": 0,
    },
}  # fmt: skip
# Fields holding an object: not an object in the file is not a manifest.
_OBJECTS = ("environment", "config", "method", "cold", "attention", "dispatch")


def _fields(cls: type, data: Any) -> dict[str, Any]:
    """``data``'s values of the fields of ``cls``, those absent as ``_WHEN_ABSENT`` says."""
    if not isinstance(data, dict):
        raise ManifestError(f"{cls.__name__} is not an object")
    known = {f.name for f in dataclasses.fields(cls)}
    found = {**_WHEN_ABSENT.get(cls, {}), **{k: v for k, v in data.items() if k in known}}
    for key in _OBJECTS:
        if key in found and found[key] is not None and not isinstance(found[key], dict):
            raise ManifestError(f"{cls.__name__}.{key} is not an object")
    return found


def _build(cls: type[T], data: Any) -> T:
    return cls(**_fields(cls, data))


def _list(data: dict[str, Any], key: str) -> list[Any]:
    value = data.get(key) or []
    if not isinstance(value, (list, tuple)):
        raise ManifestError(f"{key} is not a list")
    return list(value)


def _part(what: str, read: Any, data: Any) -> Any:
    try:
        return read(data)
    except ManifestError as exc:
        raise ManifestError(f"{what}: {exc}") from None
    except TypeError as exc:  # a field of the wrong kind (a number where a list belongs)
        raise ManifestError(f"{what}: {exc}") from None
