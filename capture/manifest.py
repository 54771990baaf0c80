"""The manifest written beside the traces: what ran, where, with which results."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

SCHEMA = 1
Status = Literal["ok", "skipped", "failed"]


@dataclass(frozen=True)
class VariantResult:
    """The outcome of one variant: its trace file, accuracy and median time, or why not."""

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


@dataclass(frozen=True)
class Manifest:
    """Everything ``manifest.json`` holds; ``variants`` keeps the order they ran in."""

    created: str
    command: tuple[str, ...]
    environment: dict[str, object]
    config: dict[str, object]
    method: dict[str, str]
    variants: dict[str, VariantResult] = field(default_factory=dict)
    schema: int = SCHEMA

    @property
    def failed(self) -> list[str]:
        """Names of the variants whose status is ``failed``."""
        return [name for name, result in self.variants.items() if result.status == "failed"]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with ``schema`` first."""
        body = dataclasses.asdict(self)
        return {"schema": body.pop("schema"), **body, "command": list(self.command)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Manifest:
        """The inverse of `to_dict`."""
        variants = {name: VariantResult(**fields) for name, fields in data["variants"].items()}
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
