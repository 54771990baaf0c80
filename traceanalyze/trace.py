"""The Trace: one loaded profiler trace, immutable, as metadata plus typed Polars frames."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Self

import polars as pl

from traceanalyze.display import ShortRepr
from traceanalyze.schema import MEMORY_SCHEMA, PYTHON_SCHEMA


class IterationSource(StrEnum):
    """How a trace's iterations were found; its value is what `summary` and `info` write.

    A source found from a named region is a member of its kind carrying the name:
    ``IterationSource.named(IterationSource.ANNOTATION, "step")`` is ``"annotation:step"``,
    with ``kind`` ``ANNOTATION`` and ``region`` ``"step"``.

    >>> source = IterationSource("annotation:step")
    >>> source.kind is IterationSource.ANNOTATION, source.region, source == "annotation:step"
    (True, 'step', True)
    """

    PROFILER_STEP = "ProfilerStep"
    WHOLE_TRACE = "whole trace"
    # The repeated top-level annotation: "annotation:<name>".
    ANNOTATION = "annotation:"
    # A repeated sequence of top-level annotations: "sequence:<name of the first>".
    SEQUENCE = "sequence:"
    # Repeated regions in a trace without step annotations: "region:<names>".
    REGION = "region:"

    @classmethod
    def named(cls, kind: IterationSource, region: str) -> Self:
        """The source of iterations found as the region ``region`` of ``kind``."""
        return cls(kind.value + region)

    @classmethod
    def _missing_(cls, value: object) -> IterationSource | None:
        # A named region's source: a member of its kind (ANNOTATION, SEQUENCE) whose value
        # carries the name, made here since names are the trace's, not a fixed list.
        for kind in (cls.ANNOTATION, cls.SEQUENCE, cls.REGION):
            if isinstance(value, str) and value.startswith(kind.value):
                member = str.__new__(cls, value)
                member._name_ = kind.name
                member._value_ = value
                return member
        return None

    @property
    def kind(self) -> IterationSource:
        """The member this source is one of (itself, but for a named region's)."""
        return type(self)[self.name]

    @property
    def region(self) -> str | None:
        """The region's name of an ANNOTATION, SEQUENCE or REGION source (None for the others)."""
        kind = self.kind
        return self.value.removeprefix(kind.value) if self is not kind else None


@dataclass(frozen=True, repr=False)  # ShortRepr: its dicts' sizes, not their contents
class TraceMeta(ShortRepr):
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
    # Where the gzip file ends early though the JSON inside is whole (its trailer, or a member
    # after the document, cut: every event was read, the checksum not verified): ``member``
    # (1 for the first), ``member_offset_bytes``, ``member_inflated_bytes``, ``missing_bytes``
    # (of the 8-byte trailer; None when compressed data is cut too). Empty when whole.
    gzip_cut: dict[str, int | None] = field(default_factory=dict)


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
    # How iterations were found (a plain string given is read as its IterationSource).
    iteration_source: IterationSource = IterationSource.WHOLE_TRACE
    # Files of the loaded folder that are not traces (a README, unrelated JSON), with why.
    skipped: tuple[Skipped, ...] = ()

    def __post_init__(self) -> None:
        # Callers may give the source as its text (e.g. the cache's stored copy).
        object.__setattr__(self, "iteration_source", IterationSource(self.iteration_source))

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
            f"iterations={steps} by {str(self.iteration_source)!r})"
        )

    @property
    def path(self) -> Path:
        """The file of the first (usually only) rank."""
        return self.meta[0].path

    @property
    def kernels(self) -> pl.DataFrame:
        """GPU kernels only (no memcpy/memset)."""
        return self.gpu.filter(pl.col("kind") == "kernel")
