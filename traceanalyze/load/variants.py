"""Sets of traces compared side by side: a capture folder (with manifest.json), a folder of
traces without one, or trace files given one by one. Each trace is one variant."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traceanalyze.errors import TraceFormatError, TraceReadError
from traceanalyze.load import is_trace_name, load_each, trace_files
from traceanalyze.trace import Trace

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Variant:
    """One trace in a comparison, with what the capture manifest says about it (if any)."""

    label: str
    path: Path | None
    trace: Trace | None = None
    status: str = "ok"  # ok | skipped | failed (from the manifest)
    reason: str | None = None
    manifest_entry: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class VariantSet:
    variants: tuple[Variant, ...]
    manifests: tuple[dict[str, Any], ...] = ()
    sources: tuple[Path, ...] = ()

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
) -> VariantSet:
    """Every trace under ``paths`` as a variant, in manifest order or the order given."""
    planned: list[Variant] = []
    manifests: list[dict[str, Any]] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            manifest = read_manifest(path)
            if manifest is not None:
                manifests.append(manifest)
                planned += _from_manifest(path, manifest)
            else:
                planned += [Variant(label_of(p), p) for p in trace_files(path)]
        elif path.is_file() or is_trace_name(path):
            planned.append(Variant(label_of(path), path))
        else:
            raise TraceReadError("no such file or folder", path, "Check the path.")
    _check_unique(planned)
    to_load = [v.path for v in planned if v.path is not None and v.status == "ok"]
    traces = iter(load_each(to_load, cache=cache, cache_dir=cache_dir))
    loaded = tuple(
        Variant(v.label, v.path, next(traces), v.status, v.reason, v.manifest_entry)
        if v.path is not None and v.status == "ok"
        else v
        for v in planned
    )
    return VariantSet(loaded, tuple(manifests), tuple(Path(p) for p in paths))


def read_manifest(folder: Path) -> dict[str, Any] | None:
    file = folder / MANIFEST
    if not file.is_file():
        return None
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
        variants.append(Variant(name, path, None, status, entry.get("reason"), entry))
    return variants


def _check_unique(variants: list[Variant]) -> None:
    seen: dict[str, Path | None] = {}
    for variant in variants:
        if variant.label in seen:
            raise TraceReadError(
                f"two traces are both called {variant.label!r} ({seen[variant.label]} and "
                f"{variant.path})",
                variant.path,
                "Compare them in separate runs, or rename one.",
            )
        seen[variant.label] = variant.path
