"""A Parquet cache of loaded traces, so the second load of a file is near-instant.

Entries live in a cache folder (``$TRACEANALYZE_CACHE_DIR``, else ``$XDG_CACHE_HOME`` or
``~/.cache``, then ``traceanalyze/``), never beside the input unless that folder is chosen. An
entry's key hashes the file's absolute path, size and modification time with the loader's
format version, so editing or replacing the trace makes a new key and the old entry unused.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path

import polars as pl

from traceanalyze.schema import TRACE_FRAMES
from traceanalyze.trace import Trace, TraceMeta

# Bump when frames or linking change, so stale entries are never read.
CACHE_FORMAT = 6


def default_cache_dir() -> Path:
    explicit = os.environ.get("TRACEANALYZE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "traceanalyze"


def entry_for(path: Path, cache_dir: Path, default_rank: int = 0) -> Path:
    stat = path.stat()
    # The default rank (a file's place in its folder) is in the key: a trace without
    # distributedInfo is rank 0 alone but rank 1 as a folder's second file.
    identity = (
        f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{default_rank}|{CACHE_FORMAT}"
        f"|{pl.__version__}"
    )
    digest = hashlib.sha256(identity.encode()).hexdigest()[:20]
    return cache_dir / f"{path.name[:60]}-{digest}"


def read_entry(entry: Path) -> Trace | None:
    """The cached trace, or None when there is no complete entry."""
    if not (entry / "meta.json").is_file():
        return None
    try:
        stored = json.loads((entry / "meta.json").read_text())
        frames = {name: pl.read_parquet(entry / f"{name}.parquet") for name in TRACE_FRAMES}
    except (OSError, ValueError, pl.exceptions.PolarsError):
        return None  # a damaged entry is simply rebuilt
    meta = tuple(TraceMeta(**{**m, "path": Path(m["path"])}) for m in stored["meta"])
    return Trace(meta=meta, iteration_source=stored["iteration_source"], **frames)  # type: ignore[arg-type]


def write_entry(entry: Path, trace: Trace) -> bool:
    """Store ``trace``; False (and nothing written) when the cache folder is not writable."""
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".tmp-", dir=entry.parent))
    except OSError:
        return False
    try:
        for name in TRACE_FRAMES:
            getattr(trace, name).write_parquet(staging / f"{name}.parquet", compression="lz4")
        meta = [{**asdict(m), "path": str(m.path)} for m in trace.meta]
        stored = {"meta": meta, "iteration_source": trace.iteration_source}
        (staging / "meta.json").write_text(json.dumps(stored, default=str))
        os.replace(staging, entry)  # atomic: readers see a whole entry or none
        return True
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        return entry.is_dir()  # another process may have won the race with the same content
