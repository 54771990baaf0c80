"""A Parquet cache of loaded traces, so the second load of a file is near-instant.

Entries live in a cache folder (``$TRACEANALYZE_CACHE_DIR``, else ``$XDG_CACHE_HOME`` or
``~/.cache``, then ``traceanalyze/``), never beside the input unless that folder is chosen. An
entry's key hashes the file's absolute path, size and modification time with the code that built
the entry (the package version and a digest of the loader's and linker's sources) and the Polars
version, so editing the trace or changing how traces are loaded or linked makes a new key and the
old entry unused: a cached Trace is never one that today's code would not build.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path

import polars as pl

from traceanalyze import __version__
from traceanalyze.schema import TRACE_FRAMES
from traceanalyze.trace import Trace, TraceMeta

_PACKAGE = Path(__file__).resolve().parent.parent
# The sources whose behaviour a cached Trace holds: loading (this folder, the C scanner included),
# linking and the frame schemas. A change to any of them makes new keys.
_BUILDERS = ("load/*.py", "load/*.c", "link.py", "schema.py", "trace.py")


@functools.cache
def builder_digest() -> str:
    """A digest of the package version and of the sources that build a Trace."""
    digest = hashlib.sha256(__version__.encode())
    for pattern in _BUILDERS:
        for source in sorted(_PACKAGE.glob(pattern)):
            digest.update(source.name.encode())
            digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


def default_cache_dir() -> Path:
    explicit = os.environ.get("TRACEANALYZE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "traceanalyze"


def entry_for(path: Path, cache_dir: Path) -> Path:
    stat = path.stat()
    identity = (
        f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{builder_digest()}|{pl.__version__}"
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
