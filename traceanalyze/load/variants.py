"""Sets of traces compared side by side: a capture folder (with manifest.json), a folder of
traces without one, or trace files given one by one. Each trace is one variant, except that a
folder holding the ranks of one job (see :func:`traceanalyze.load.are_ranks`) is one variant
whose ranks are combined."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import overload

from capture.manifest import Manifest, ManifestError, VariantResult, manifest_from_dict
from traceanalyze.display import ShortRepr
from traceanalyze.errors import EmptyTraceError, TraceFormatError, TraceReadError, UsageError
from traceanalyze.load import are_ranks, combine_ranks, load_each
from traceanalyze.load.folder import load_dropping
from traceanalyze.load.inputs import Input, InputKind, manifest_beside, resolve
from traceanalyze.trace import Skipped, Trace


@dataclass(frozen=True, repr=False)  # ShortRepr: the trace and manifest entry in a few words
class Variant(ShortRepr):
    """One trace in a comparison, with what the capture manifest says about it (if any)."""

    label: str
    path: Path | None
    trace: Trace | None = None
    status: str = "ok"  # ok | skipped | failed (from the manifest)
    reason: str | None = None
    manifest_entry: VariantResult | None = None  # its entry in the capture manifest
    # Calls made before profiling started, as the manifest says (None: not known). With one or
    # more, one-off work (plan building, autotuning, compiling) ran before the trace began.
    warm_up_calls: int | None = None
    # Found in a folder listing (not named by a manifest or given): skipped if not a trace.
    listed: bool = False


@dataclass(frozen=True)
class VariantSet(Sequence[Variant]):
    """The variants found under some paths, with their manifests. A sequence of its
    ``variants``, so every library function that takes variants takes the set itself."""

    variants: tuple[Variant, ...]
    manifests: tuple[Manifest, ...] = ()
    sources: tuple[Path, ...] = ()
    skipped: tuple[Skipped, ...] = ()  # files of a folder that are not traces, with why

    @overload
    def __getitem__(self, index: int) -> Variant: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Variant]: ...
    def __getitem__(self, index: int | slice) -> Variant | Sequence[Variant]:
        return self.variants[index]

    def __len__(self) -> int:
        return len(self.variants)

    @property
    def loaded(self) -> list[Variant]:
        return [v for v in self.variants if v.trace is not None]

    def __repr__(self) -> str:
        """One line: where from, and the labels (each variant is a ``set[i]`` away); the
        dataclass repr printed every trace and manifest entry (10 kB for a capture)."""
        labels = [v.label for v in self.variants]
        shown = ", ".join(labels[:6]) + (f", ... ({len(labels)} in all)" if len(labels) > 6 else "")
        where = ", ".join(str(p) for p in self.sources[:2]) + (
            ", ..." if len(self.sources) > 2 else ""
        )
        return f"VariantSet({where!r}, {len(self.loaded)} loaded: {shown})"


def label_of(path: Path) -> str:
    """``naive.json.gz`` -> ``naive``; ``host_123.pt.trace.json`` -> ``host_123``."""
    name = path.name
    for suffix in (".gz", ".json", ".pt.trace"):
        name = name.removesuffix(suffix)
    return name


def load_variants(
    paths: str | os.PathLike[str] | Input | Sequence[str | os.PathLike[str] | Input],
    *,
    cache: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    labels: Sequence[str] | None = None,
    threads: int | None = None,
) -> VariantSet:
    """Every trace under ``paths`` as a variant, in manifest order or the order given.

    ``labels``, one per path, prefix the variants found there (``run1/naive``), so folders
    that hold variants of the same names can be compared. One path may be given alone.
    """
    # A lone path (as in a notebook: load_variants("runs/h200")): a str is a Sequence too,
    # whose items would be read as one-letter paths.
    if isinstance(paths, (str, os.PathLike, Input)):
        paths = [paths]
    if labels is not None and len(labels) != len(paths):
        raise UsageError(
            f"{len(labels)} label(s) for {len(paths)} path(s)",
            fix="Give one --label per path, in the same order.",
        )
    # Every path decided before any is parsed (an Input given was resolved already).
    inputs = [raw if isinstance(raw, Input) else resolve(raw) for raw in paths]
    planned: list[Variant] = []
    manifests: list[Manifest] = []
    skipped: list[Skipped] = []
    for index, given in enumerate(inputs):
        found = _plan(given, manifests, skipped)
        if labels is not None:
            found = [replace(v, label=f"{labels[index]}/{v.label}") for v in found]
        planned += found
    _check_unique(planned)
    to_load = [v.path for v in planned if v.path is not None and v.status == "ok"]
    # A file of a folder (no manifest names it) that is JSON of another kind is skipped.
    listed = [v.path for v in planned if v.listed and v.path is not None]
    kept, traces = load_dropping(
        to_load,
        listed,
        lambda files: load_each(files, cache=cache, cache_dir=cache_dir, threads=threads),
        skipped,
    )
    by_path = dict(zip(kept, traces, strict=True))
    loaded = [
        replace(v, trace=by_path[v.path]) if v.path in by_path and v.status == "ok" else v
        for v in planned
        if not (v.listed and v.path not in by_path)
    ]
    if not loaded:
        raise EmptyTraceError(
            "no traces among the paths given",
            inputs[0].path if len(inputs) == 1 else None,
            "Pass trace files, or folders that hold them.",
        )
    if len(inputs) == 1 and inputs[0].kind is InputKind.RANK_FOLDER:
        loaded = _ranks_as_one(loaded, inputs[0].path)
    return VariantSet(
        tuple(loaded), tuple(manifests), tuple(i.path for i in inputs), tuple(skipped)
    )


def _ranks_as_one(variants: list[Variant], folder: Path) -> list[Variant]:
    """A folder holding the ranks of one job is one variant, named after the folder."""
    traces = [v.trace for v in variants if v.trace is not None]
    if len(traces) < 2 or len(traces) != len(variants) or not are_ranks(traces):
        return variants
    return [Variant(folder.name or str(folder), folder, combine_ranks(traces, folder))]


def _plan(found: Input, manifests: list[Manifest], skipped: list[Skipped]) -> list[Variant]:
    """The variants ``found`` holds, not loaded yet (a manifest found is added to
    ``manifests``, files of a folder that are not traces to ``skipped``)."""
    path = found.path
    if found.kind is InputKind.TRACE:
        # A file of a capture folder keeps what its manifest says (median time, warm-up).
        known = capture_entry(path)
        return [replace(known, label=label_of(path)) if known else Variant(label_of(path), path)]
    if found.manifest is not None:
        manifest = read_manifest(found.manifest)
        manifests.append(manifest)
        return _from_manifest(path, manifest)
    skipped += found.skipped
    return [Variant(label_of(p), p, listed=True) for p in found.files]


def capture_entry(trace_file: Path) -> Variant | None:
    """The manifest's variant for a trace file inside a capture folder (not loaded), or None
    when no manifest beside it lists the file."""
    manifest = capture_manifest(trace_file)
    found = manifest.entry_for(trace_file.name) if manifest is not None else None
    if manifest is None or found is None:
        return None
    name, entry = found
    return Variant(
        name, trace_file, None, entry.status, entry.reason, entry, manifest.warm_up_calls
    )  # fmt: skip


def capture_manifest(trace_file: Path) -> Manifest | None:
    """The manifest of the capture folder that holds ``trace_file`` (None: it has none)."""
    beside = manifest_beside(trace_file)
    return None if beside is None else read_manifest(beside)


def capture_config(trace_file: Path) -> dict[str, object] | None:
    """The capture configuration of a trace file inside a capture folder (its manifest's
    ``config``), or None when there is no manifest beside it."""
    manifest = capture_manifest(trace_file)
    return None if manifest is None else manifest.config


def read_manifest(file: Path) -> Manifest:
    """The capture manifest ``file`` (any schema so far, see :mod:`capture.manifest`); one
    that cannot be read, or is not a manifest, is a :class:`TraceFormatError`."""
    try:
        return manifest_from_dict(json.loads(file.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:  # ManifestError is a ValueError
        problem = "is not a capture manifest" if isinstance(exc, ManifestError) else (
            "is not a readable capture manifest"
        )  # fmt: skip
        raise TraceFormatError(
            f"{problem} ({exc})",
            file,
            "Re-run the capture, or delete the manifest to compare the traces without it.",
        ) from None


def _from_manifest(folder: Path, manifest: Manifest) -> list[Variant]:
    variants = []
    for name, entry in manifest.variants.items():
        path = folder / entry.trace if entry.trace else None
        if entry.status == "ok" and (path is None or not path.is_file()):
            raise TraceReadError(
                f"the manifest lists {entry.trace or 'no trace'} for variant {name}, but it is "
                "missing",
                folder,
                "Copy the whole capture folder, or re-run the capture.",
            )
        variants.append(
            Variant(name, path, None, entry.status, entry.reason, entry, manifest.warm_up_calls)
        )
    return variants


def _check_unique(variants: list[Variant]) -> None:
    seen: dict[str, Path | None] = {}
    for variant in variants:
        if variant.label in seen:
            raise UsageError(
                f"two traces are both called {variant.label!r} ({seen[variant.label]} and "
                f"{variant.path})",
                fix="Give each path a --label (e.g. --label before --label after), or compare "
                "them in separate runs.",
            )
        seen[variant.label] = variant.path
