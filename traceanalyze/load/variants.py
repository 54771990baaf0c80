"""Sets of traces compared side by side: a capture folder (with manifest.json), a folder of
traces without one, or trace files given one by one. Each trace is one variant, except that a
folder holding the ranks of one job (see :func:`traceanalyze.load.are_ranks`) is one variant
whose ranks are combined."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, overload

from traceanalyze.errors import EmptyTraceError, TraceFormatError, TraceReadError, UsageError
from traceanalyze.load import are_ranks, combine_ranks, load_each
from traceanalyze.load.folder import load_dropping
from traceanalyze.load.inputs import MANIFEST, Input, InputKind, manifest_beside, resolve
from traceanalyze.trace import Skipped, Trace


@dataclass(frozen=True)
class Variant:
    """One trace in a comparison, with what the capture manifest says about it (if any)."""

    label: str
    path: Path | None
    trace: Trace | None = None
    status: str = "ok"  # ok | skipped | failed (from the manifest)
    reason: str | None = None
    manifest_entry: dict[str, Any] = field(default_factory=dict)
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
    manifests: tuple[dict[str, Any], ...] = ()
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


def label_of(path: Path) -> str:
    """``naive.json.gz`` -> ``naive``; ``host_123.pt.trace.json`` -> ``host_123``."""
    name = path.name
    for suffix in (".gz", ".json", ".pt.trace"):
        name = name.removesuffix(suffix)
    return name


def load_variants(
    paths: Sequence[str | os.PathLike[str]],
    *,
    cache: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    labels: Sequence[str] | None = None,
) -> VariantSet:
    """Every trace under ``paths`` as a variant, in manifest order or the order given.

    ``labels``, one per path, prefix the variants found there (``run1/naive``), so folders
    that hold variants of the same names can be compared.
    """
    if labels is not None and len(labels) != len(paths):
        raise UsageError(
            f"{len(labels)} label(s) for {len(paths)} path(s)",
            fix="Give one --label per path, in the same order.",
        )
    inputs = [resolve(raw) for raw in paths]  # every path decided before any is parsed
    planned: list[Variant] = []
    manifests: list[dict[str, Any]] = []
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
        to_load, listed, lambda files: load_each(files, cache=cache, cache_dir=cache_dir), skipped
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
            Path(paths[0]) if len(paths) == 1 else None,
            "Pass trace files, or folders that hold them.",
        )
    if len(inputs) == 1 and inputs[0].kind is InputKind.RANK_FOLDER:
        loaded = _ranks_as_one(loaded, inputs[0].path)
    return VariantSet(
        tuple(loaded), tuple(manifests), tuple(Path(p) for p in paths), tuple(skipped)
    )


def _ranks_as_one(variants: list[Variant], folder: Path) -> list[Variant]:
    """A folder holding the ranks of one job is one variant, named after the folder."""
    traces = [v.trace for v in variants if v.trace is not None]
    if len(traces) < 2 or len(traces) != len(variants) or not are_ranks(traces):
        return variants
    return [Variant(folder.name or str(folder), folder, combine_ranks(traces, folder))]


def _plan(found: Input, manifests: list[dict[str, Any]], skipped: list[Skipped]) -> list[Variant]:
    """The variants ``found`` holds, not loaded yet (a manifest found is added to
    ``manifests``, files of a folder that are not traces to ``skipped``)."""
    path = found.path
    if found.kind is InputKind.TRACE:
        # A file of a capture folder keeps what its manifest says (median time, warm-up).
        known = capture_entry(path)
        return [replace(known, label=label_of(path)) if known else Variant(label_of(path), path)]
    if found.manifest is not None:
        manifest = _read(found.manifest)
        manifests.append(manifest)
        return _from_manifest(path, manifest)
    skipped += found.skipped
    return [Variant(label_of(p), p, listed=True) for p in found.files]


def capture_entry(trace_file: Path) -> Variant | None:
    """The manifest's variant for a trace file inside a capture folder (not loaded), or None
    when no manifest beside it lists the file."""
    beside = manifest_beside(trace_file)
    if beside is None:
        return None
    manifest = _read(beside)
    for name, entry in manifest["variants"].items():
        if entry.get("trace") == trace_file.name:
            return Variant(
                name, trace_file, None, entry.get("status", "ok"), entry.get("reason"), entry,
                warm_up_calls(manifest),
            )  # fmt: skip
    return None


def capture_config(trace_file: Path) -> dict[str, Any] | None:
    """The capture configuration of a trace file inside a capture folder (its manifest's
    ``config``), or None when there is no manifest beside it."""
    beside = manifest_beside(trace_file)
    if beside is None:
        return None
    config: dict[str, Any] = _read(beside).get("config", {})
    return config


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """The capture manifest of ``folder``, or None when it has none."""
    file = folder / MANIFEST
    return _read(file) if file.is_file() else None


def _read(file: Path) -> dict[str, Any]:
    try:
        manifest = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise TraceFormatError(
            f"is not a readable capture manifest ({exc})",
            file,
            "Re-run the capture, or delete the manifest to compare the traces without it.",
        ) from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("variants"), dict):
        raise TraceFormatError(
            "is not a capture manifest (no 'variants' object)",
            file,
            "Re-run the capture, or delete the manifest to compare the traces without it.",
        )
    return manifest


def _from_manifest(folder: Path, manifest: dict[str, Any]) -> list[Variant]:
    variants = []
    for name, entry in manifest["variants"].items():
        trace = entry.get("trace")
        status = entry.get("status", "ok")
        path = folder / trace if trace else None
        if status == "ok" and (path is None or not path.is_file()):
            raise TraceReadError(
                f"the manifest lists {trace or 'no trace'} for variant {name}, but it is missing",
                folder,
                "Copy the whole capture folder, or re-run the capture.",
            )
        warm_up = warm_up_calls(manifest)
        variants.append(Variant(name, path, None, status, entry.get("reason"), entry, warm_up))
    return variants


def warm_up_calls(manifest: dict[str, Any]) -> int | None:
    """How many calls of each variant ran before profiling started, per the manifest.

    Manifests state it as ``method.warm_up_calls`` (0 for cold captures); older ones describe
    one warm-up call in ``method.warm_up`` only.
    """
    method = manifest.get("method", {})
    for stated in (method.get("warm_up_calls"), manifest.get("config", {}).get("warm_up_calls")):
        if isinstance(stated, int):
            return stated
    return 1 if "warm_up" in method else None


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
