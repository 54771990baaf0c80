"""Folders of ranks made from one real trace: relabelled ranks, shifted clocks, slower ranks.

Timestamps are transformed in integer nanoseconds (read digit for digit with ``Decimal``) and
written back digit for digit, so a test can compute expected values from the written files
(``read_document``, ``ns``) exactly, without the library.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

from tests.micro import dumps

TIMED = ("ts", "dur")


@dataclass(frozen=True)
class RankSpec:
    """One rank of the folder: its id, its host clock and its pace.

    ``shift_us`` is added to every timestamp (a host whose clock is ahead); ``stretch`` scales
    every time measured from the trace's first event (a rank whose work takes longer).
    """

    rank: int
    shift_us: int = 0
    stretch: Fraction = Fraction(1)


def read_document(path: Path) -> dict[str, Any]:
    """A trace with its numbers as Decimals (every digit kept)."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as handle:
        document: dict[str, Any] = json.load(handle, parse_float=Decimal)
    return document


def ns(value: Decimal | int) -> int:
    """Kineto microseconds (three decimals) as integer nanoseconds."""
    return int(Decimal(value) * 1000)


def _us(value_ns: int) -> Decimal:
    return Decimal(value_ns) / 1000


def rank_document(source: dict[str, Any], spec: RankSpec, world_size: int) -> dict[str, Any]:
    """``source`` as rank ``spec.rank`` of a job of ``world_size`` ranks."""
    events = source["traceEvents"]
    origin = min(ns(e["ts"]) for e in events if "ts" in e and e.get("ph") == "X")
    shift = spec.shift_us * 1000

    def moved(event: dict[str, Any]) -> dict[str, Any]:
        if "ts" not in event or event.get("ph") == "M" or (not shift and spec.stretch == 1):
            return event
        out = dict(event)
        out["ts"] = _us(origin + round((ns(event["ts"]) - origin) * spec.stretch) + shift)
        if "dur" in event:
            out["dur"] = _us(round(ns(event["dur"]) * spec.stretch))
        return out

    info = dict(source.get("distributedInfo") or {"backend": "nccl"})
    info |= {"rank": spec.rank, "world_size": world_size}
    return {**source, "distributedInfo": info, "traceEvents": [moved(e) for e in events]}


def write_rank_folder(
    folder: Path, source: Path, specs: Sequence[RankSpec], suffix: str = ".json"
) -> list[Path]:
    """One ``rank<N><suffix>`` per spec in ``folder`` (created), from the trace ``source``;
    ``.json.gz`` files are compressed fast (level 1)."""
    folder.mkdir(parents=True, exist_ok=True)
    document = read_document(source)
    written = []
    for spec in specs:
        data = dumps(rank_document(document, spec, len(specs))).encode()
        if suffix.endswith(".gz"):
            data = gzip.compress(data, compresslevel=1, mtime=0)
        path = folder / f"rank{spec.rank}{suffix}"
        path.write_bytes(data)
        written.append(path)
    return written
