"""The Trace: one loaded profiler trace, immutable, as metadata plus typed Polars frames."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from traceanalyze.schema import MEMORY_SCHEMA, PYTHON_SCHEMA


@dataclass(frozen=True)
class TraceMeta:
    """What a trace file says about itself, one per rank."""

    path: Path
    rank: int
    schema_version: int | None = None
    trace_name: str | None = None
    base_time_ns: int | None = None
    # Versions the trace records: cuda_runtime_version, cuda_driver_version, cupti_version,
    # hip_runtime_version, roctracer_version, ... kept as written.
    versions: dict[str, Any] = field(default_factory=dict)
    distributed_info: dict[str, Any] = field(default_factory=dict)
    # Events per Kineto category as found in the file, including categories not kept as frames
    # (python_function, overhead, ...).
    event_counts: dict[str, int] = field(default_factory=dict)
    # Names the trace gives to processes and threads (ph "M" events), keyed by (pid, tid).
    thread_names: dict[str, str] = field(default_factory=dict)
    # Ids written as text ("stream 7" in older traces) -> the integer the frames hold for them.
    text_ids: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Skipped:
    """A file of a trace folder that was not loaded, and why (e.g. "is not valid JSON")."""

    path: Path
    reason: str


@dataclass(frozen=True, eq=False)
class Trace:
    """A loaded trace. Frames follow the schemas in :mod:`traceanalyze.schema`.

    Compared and hashed by identity (``eq=False``): frames have no cheap equality, and analyses
    memoise derived frames per Trace object.
    """

    meta: tuple[TraceMeta, ...]
    gpu: pl.DataFrame
    cpu: pl.DataFrame
    flows: pl.DataFrame
    instants: pl.DataFrame
    iterations: pl.DataFrame
    devices: pl.DataFrame
    # [memory] events (schema.MEMORY_SCHEMA); empty when the trace was recorded without
    # profile_memory. Last among the frames, with a default, so older callers still build a Trace.
    memory: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=MEMORY_SCHEMA))
    # Python frames (schema.PYTHON_SCHEMA); empty when the trace was recorded without with_stack.
    python: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=PYTHON_SCHEMA))
    # How iterations were found: "ProfilerStep", "annotation:<name>" or "whole trace".
    iteration_source: str = "whole trace"
    # Files of the loaded folder that are not traces (a README, unrelated JSON), with why.
    skipped: tuple[Skipped, ...] = ()

    def __repr__(self) -> str:
        """One line: the file, ranks, event counts and how iterations were found (the frames
        themselves are a print away: ``trace.gpu``, ``trace.cpu``)."""
        where = (
            str(self.path)
            if len(self.meta) == 1
            else f"{self.path.parent} ({len(self.meta)} ranks)"
        )
        steps = self.iterations["iteration"].n_unique() if self.iterations.height else 0
        return (
            f"Trace({where!r}, gpu={self.gpu.height}, cpu={self.cpu.height}, "
            f"iterations={steps} by {self.iteration_source!r})"
        )

    @property
    def path(self) -> Path:
        """The file of the first (usually only) rank."""
        return self.meta[0].path

    @property
    def kernels(self) -> pl.DataFrame:
        """GPU kernels only (no memcpy/memset)."""
        return self.gpu.filter(pl.col("kind") == "kernel")
