"""Seed inputs for the scanner's fuzzer: every sample, public and corpus trace cut into small
documents (the trace's own top-level metadata and a few consecutive events, an object document
or a bare array), written to a folder outside the repository (the traces are not copied in).

    python fuzz/seeds.py OUT [--per-trace 24] [--max-bytes 4096]
"""

from __future__ import annotations

import argparse
import gzip
import random
import sys
from pathlib import Path

import msgspec

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.conftest import PUBLIC_TRACES  # noqa: E402 (the repository first on the path)

SOURCES = [REPO / "sample_traces", PUBLIC_TRACES, PUBLIC_TRACES.parent / "corpus"]


def traces() -> list[Path]:
    found: list[Path] = []
    for folder in SOURCES:
        if folder.is_dir():
            found += sorted(p for p in folder.rglob("*.json*") if p.name != "manifest.json")
    return found


def _document(path: Path) -> dict[str, msgspec.Raw] | list[msgspec.Raw] | None:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    try:
        top = msgspec.json.decode(data, type=dict[str, msgspec.Raw] | list[msgspec.Raw])
    except msgspec.MsgspecError:
        return None  # a damaged trace of the corpus: its own bytes are a seed below
    return top


def pieces(path: Path, count: int, max_bytes: int, rng: random.Random) -> list[bytes]:
    """Up to ``count`` small documents cut from ``path``."""
    top = _document(path)
    if top is None:
        raw = path.read_bytes()
        return [raw[:max_bytes]]
    bare = isinstance(top, list)
    events = (
        top if bare else msgspec.json.decode(top.get("traceEvents", b"[]"), type=list[msgspec.Raw])
    )
    head = {} if bare else {k: v for k, v in top.items() if k != "traceEvents"}
    out: list[bytes] = []
    for _ in range(count):
        take = rng.choice([0, 1, 2, 3, 5, 8])
        start = rng.randrange(max(1, len(events)))
        window = events[start : start + take]
        body = b"[" + b",\n".join(bytes(e) for e in window) + b"]"
        if bare:
            document = body
        else:
            keys = [k for k in head if rng.random() < 0.5]
            pairs = [msgspec.json.encode(k) + b": " + bytes(head[k]) for k in keys]
            pairs.insert(rng.randrange(len(pairs) + 1), b'"traceEvents": ' + body)
            document = b"{" + b",\n".join(pairs) + b"}"
        if len(document) <= max_bytes:
            out.append(document)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--per-trace", type=int, default=24)
    parser.add_argument("--max-bytes", type=int, default=4096)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(42)
    written = 0
    for path in traces():
        for index, document in enumerate(pieces(path, args.per_trace, args.max_bytes, rng)):
            (args.out / f"{path.parent.name}-{path.name}-{index}.json").write_bytes(document)
            written += 1
    print(f"{written} seeds from {len(traces())} traces in {args.out}")


if __name__ == "__main__":
    main()
