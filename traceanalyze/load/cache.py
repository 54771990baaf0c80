"""A Parquet cache of loaded traces, so the second load of a file is near-instant.

Entries live in a cache folder (``$TRACEANALYZE_CACHE_DIR``, else ``$XDG_CACHE_HOME`` or
``~/.cache``, then ``traceanalyze/``), never beside the input unless that folder is chosen. An
entry's key hashes the file's absolute path, size and modification time with the code that built
the entry (the package version and a digest of the loader's and linker's sources) and the Polars
version, so editing the trace or changing how traces are loaded or linked makes a new key and the
old entry unused: a cached Trace is never one that today's code would not build. The
key is the file's stat taken before its parse, and a load stores its Trace only when the path
still names that same file (inode, size, modification time) after the parse: a file replaced
while it was read is not cached under the new file's key.

The folder is kept under a size limit (``$TRACEANALYZE_CACHE_MAX``: ``2G`` by default, ``500M``,
a number of bytes, or ``0`` for no cache): after each write the least recently used entries go
until the rest fit. A hit touches the entry's ``meta.json``, whose modification time is the
entry's last use. An entry that cannot be read back whole (a file truncated or damaged, which
each file's checksum in ``meta.json`` tells before its bytes are decoded; another schema; no
``meta.json``) is removed and rebuilt, never trusted. Writers build an entry in a temporary
folder and rename it into place, so concurrent processes see a whole entry or none.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import io
import json
import os
import secrets
import shutil
import time
import zlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import polars as pl

from traceanalyze import __version__
from traceanalyze.errors import CacheSettingError
from traceanalyze.schema import TRACE_FRAMES
from traceanalyze.trace import Trace, TraceMeta

_PACKAGE = Path(__file__).resolve().parent.parent
# The sources whose behaviour a cached Trace holds: loading (this folder, the C scanner included),
# linking and the frame schemas. A change to any of them makes new keys.
_BUILDERS = ("load/*.py", "load/*.c", "link.py", "schema.py", "trace.py")
MAX_ENV = "TRACEANALYZE_CACHE_MAX"
DEFAULT_MAX_BYTES = 2 * 1024**3
# Binary multiples, as `du -h` and the cache's own `info` write sizes.
_SIZE_SUFFIXES = {"": 1, "B": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_STAGING = ".tmp-"
# A staging folder older than this was left by a process that died mid-write.
_ABANDONED_S = 3600.0


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


def entry_for(path: Path, cache_dir: Path, stat: os.stat_result | None = None) -> Path:
    """The entry of ``path`` as it is now, or as it was when ``stat`` was taken."""
    stat = stat if stat is not None else path.stat()
    identity = (
        f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{builder_digest()}|{pl.__version__}"
    )
    digest = hashlib.sha256(identity.encode()).hexdigest()[:20]
    return cache_dir / f"{path.name[:60]}-{digest}"


def parse_size(text: str) -> int:
    """Bytes from ``2G``, ``500M``, ``1.5G``, ``4096`` or ``0`` (binary multiples)."""
    cleaned = text.strip().upper().removesuffix("IB").removesuffix("B")
    number, suffix = (cleaned[:-1], cleaned[-1]) if cleaned[-1:].isalpha() else (cleaned, "")
    try:
        size = float(number) * _SIZE_SUFFIXES[suffix]
    except (KeyError, ValueError):
        size = -1.0
    if not size >= 0:  # also refuses NaN
        raise CacheSettingError(
            f"{MAX_ENV}={text!r} is not a size",
            fix="Give bytes or a size such as 500M or 2G, or 0 for no cache",
        )
    return int(size)


def max_cache_bytes() -> int:
    """The cache's size limit: ``$TRACEANALYZE_CACHE_MAX``, else 2 GiB; 0 means no cache."""
    setting = os.environ.get(MAX_ENV, "").strip()
    return parse_size(setting) if setting else DEFAULT_MAX_BYTES


def read_entry(entry: Path) -> Trace | None:
    """The cached trace, or None when there is no complete entry (a damaged one is removed,
    so that the caller's rebuild replaces it)."""
    if not (entry / "meta.json").is_file():
        # Writers rename a whole entry into place, meta.json included: a folder without it is
        # damaged, and left there it would block every rebuild's rename.
        if entry.is_dir():
            _remove(entry)
        return None
    try:
        trace = _read_whole(entry)
    except (
        OSError,
        ValueError,
        TypeError,
        KeyError,
        pl.exceptions.PolarsError,
        pl.exceptions.PanicException,  # a BaseException: Polars' decoder gave up on the bytes
    ):
        _remove(entry)
        return None
    with contextlib.suppress(OSError):  # a read-only cache still serves hits
        os.utime(entry / "meta.json")  # the entry's last use, for eviction
    return trace


def frame_file(entry: Path, name: str) -> Path:
    """Where ``entry`` keeps the frame ``name`` (none for a frame without rows: see
    :func:`write_entry`).

    Parquet (lz4, no column statistics: an entry is only read whole). Arrow IPC streams (zstd)
    were measured against it: on a 15 MB rank about as fast to write once Parquet writes no
    file for the empty frames (13-17 ms both), 2 ms faster to read; on the 175 MB trace half as
    fast to read (65-77 ms against 28-37), which every command on a cached trace pays.
    A damaged file can make a decoder panic, read other numbers or (Arrow) abort the process:
    each file's CRC-32 in ``meta.json`` is checked before its bytes are decoded.
    """
    return entry / f"{name}.parquet"


def _read_whole(entry: Path) -> Trace:
    """The entry's trace; raises when a file is missing, damaged, cut short or has another
    schema."""
    stored = _checked_meta(json.loads((entry / "meta.json").read_text()))
    frames = {
        name: _read_frame(entry, name, checksum)
        if (checksum := stored["checksums"][name]) is not None
        # no file: a frame without rows (see write_entry)
        else pl.DataFrame(schema=TRACE_FRAMES[name])
        for name in TRACE_FRAMES
    }
    for name, frame in frames.items():
        if any(frame.schema.get(c) != t for c, t in TRACE_FRAMES[name].items()):
            raise ValueError(f"{frame_file(entry, name)} has another schema")
        if frame.height != stored["heights"][name]:
            raise ValueError(f"{frame_file(entry, name)} is cut short")
    meta = tuple(TraceMeta(**{**m, "path": Path(m["path"])}) for m in stored["meta"])
    return Trace(meta=meta, iteration_source=stored["iteration_source"], **frames)  # type: ignore[arg-type]


def _checked_meta(stored: Any) -> dict[str, Any]:
    """``meta.json``'s content, checked against its own checksum (a changed byte there could
    otherwise name another device or iteration source, or unhook the frames' checksums)."""
    if not isinstance(stored, dict) or stored.pop("checksum", None) != _meta_checksum(stored):
        raise ValueError("meta.json is damaged (checksum)")
    return stored


def _meta_checksum(content: dict[str, Any]) -> int:
    return zlib.crc32(json.dumps(content, sort_keys=True, default=str).encode())


def _read_frame(entry: Path, name: str, checksum: int) -> pl.DataFrame:
    """The frame ``name`` of ``entry``, its bytes checked against ``checksum`` first."""
    data = frame_file(entry, name).read_bytes()
    if zlib.crc32(data) != checksum:
        raise ValueError(f"{frame_file(entry, name)} is damaged (checksum)")
    return pl.read_parquet(data)


def _frame_bytes(frame: pl.DataFrame) -> bytes:
    buffer = io.BytesIO()
    frame.write_parquet(buffer, compression="lz4", statistics=False)
    return buffer.getvalue()


def _remove(entry: Path) -> None:
    """Remove an entry: renamed aside first, so no reader sees it half deleted."""
    aside = entry.parent / f"{_STAGING}gone-{entry.name}-{os.getpid()}-{time.monotonic_ns()}"
    try:
        os.replace(entry, aside)
    except OSError:
        return  # already gone (another process removed it)
    _discard(aside)


def _discard(folder: Path) -> None:
    """Remove ``folder`` whole, even when a Ctrl-C arrives meanwhile (it is raised once the
    folder is gone: an interrupted removal would leave part of an entry behind)."""
    interrupted: BaseException | None = None
    while True:
        try:
            shutil.rmtree(folder, ignore_errors=True)
            break
        except BaseException as error:  # KeyboardInterrupt, or a signal handler's exception
            interrupted = error
    if interrupted is not None:
        raise interrupted


# Set while writes leave most eviction walks to their caller (see eviction_deferred).
_EVICTION_DEFERRED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "eviction_deferred", default=False
)
# While deferred, this process walks the cache again once it has written this share of the
# limit since its last walk: the folder then exceeds the limit by at most that much per
# writing process, and N writes cost a handful of walks, not N.
_DEFERRED_SHARE = 10


@dataclass
class _Writes:
    """Bytes this process wrote into the cache since its last eviction walk."""

    since_walk: int = 0


_WRITES = _Writes()


@contextlib.contextmanager
def eviction_deferred() -> Iterator[None]:
    """Entries written inside skip most eviction walks, each of which visits every entry of
    the folder (after each of N writes that is N^2 visits: 44,000 file stats for 64 ranks): a
    walk only once this process has written a tenth of the limit since its last. The caller
    evicts once after them (:func:`evict`)."""
    token = _EVICTION_DEFERRED.set(True)
    try:
        yield
    finally:
        _EVICTION_DEFERRED.reset(token)


def _due_for_a_walk(entry: Path, max_bytes: int) -> bool:
    """Whether a write of ``entry`` should evict now (always, unless deferred)."""
    if not _EVICTION_DEFERRED.get():
        return True
    _WRITES.since_walk += _size(entry)
    if _WRITES.since_walk * _DEFERRED_SHARE < max_bytes:
        return False
    _WRITES.since_walk = 0
    return True


def write_entry(entry: Path, trace: Trace) -> bool:
    """Store ``trace``; False (and nothing written) when the cache folder is not writable."""
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    # named before it is made, so that whatever interrupts the write (a Ctrl-C included)
    # finds it to remove: mkdtemp's folder is unknown until it returns
    staging = entry.parent / f"{_STAGING}{entry.name}-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        staging.mkdir(mode=0o700)
        heights: dict[str, int] = {}
        checksums: dict[str, int | None] = {}
        for name in TRACE_FRAMES:
            frame = getattr(trace, name)
            heights[name], checksums[name] = frame.height, None
            if _rebuilt_when_empty(frame, name):
                continue  # a file costs ~0.4 ms to write and to read however small
            data = _frame_bytes(frame)
            frame_file(staging, name).write_bytes(data)
            checksums[name] = zlib.crc32(data)
        meta = [{**asdict(m), "path": str(m.path)} for m in trace.meta]
        stored: dict[str, Any] = {
            "meta": meta,
            "iteration_source": trace.iteration_source,
            "heights": heights,
            "checksums": checksums,
        }
        # the checksum of what json gives back (a Path or a tuple comes back as text or a list)
        stored["checksum"] = _meta_checksum(json.loads(json.dumps(stored, default=str)))
        (staging / "meta.json").write_text(json.dumps(stored, default=str))
        os.replace(staging, entry)  # atomic: readers see a whole entry or none
    except BaseException as error:  # a full disk, Ctrl-C: no half entry, no staging left
        try:
            _discard(staging)
        except BaseException:
            # One Ctrl-C can raise twice: a library (Polars' writer) raises KeyboardInterrupt
            # for it, then Python raises its own on entry to _discard, before that retries.
            _discard(staging)
        if not isinstance(error, OSError):
            raise
        return entry.is_dir()  # another process may have won the race with the same content
    limit = max_cache_bytes()
    if _due_for_a_walk(entry, limit):
        evict(entry.parent, limit)
    return entry.is_dir()


def _rebuilt_when_empty(frame: pl.DataFrame, name: str) -> bool:
    """Whether ``frame`` is what :func:`_read_whole` builds for a frame without rows."""
    return not frame.height and list(frame.schema.items()) == list(TRACE_FRAMES[name].items())


@dataclass(frozen=True)
class CacheInfo:
    """What the cache folder holds; the keys of ``cache info --format json``."""

    location: str
    entries: int
    size_bytes: int
    max_bytes: int


def cache_info(cache_dir: Path) -> CacheInfo:
    """The cache folder's entries and their size on disk, with the size limit."""
    entries = _entries(cache_dir)
    size = sum(_size(e) for e in entries)
    return CacheInfo(str(cache_dir), len(entries), size, max_cache_bytes())


def clear_cache(cache_dir: Path) -> CacheInfo:
    """Remove every entry (and abandoned staging folder); what was removed."""
    removed = _entries(cache_dir)
    size = sum(_size(e) for e in removed)
    for entry in removed:
        _remove(entry)
    for staging in _abandoned(cache_dir, now=time.time() + _ABANDONED_S):
        shutil.rmtree(staging, ignore_errors=True)
    return CacheInfo(str(cache_dir), len(removed), size, max_cache_bytes())


def evict(cache_dir: Path, max_bytes: int) -> list[Path]:
    """Remove the least recently used entries until the rest hold at most ``max_bytes``; the
    entries removed, oldest first. Staging folders abandoned by dead writers go too."""
    for staging in _abandoned(cache_dir, now=time.time()):
        shutil.rmtree(staging, ignore_errors=True)
    by_use = sorted(_entries(cache_dir), key=_last_used)
    sizes = [_size(entry) for entry in by_use]
    total = sum(sizes)
    removed: list[Path] = []
    for entry, size in zip(by_use, sizes, strict=True):
        if total <= max_bytes:
            break
        _remove(entry)
        removed.append(entry)
        total -= size
    return removed


def _entries(cache_dir: Path) -> list[Path]:
    try:
        children = list(cache_dir.iterdir())
    except OSError:
        return []
    # every entry, those without meta.json too (damaged: cleared, counted, evicted first)
    return [c for c in children if not c.name.startswith(_STAGING) and c.is_dir()]


def _abandoned(cache_dir: Path, now: float) -> list[Path]:
    try:
        staging = [c for c in cache_dir.iterdir() if c.name.startswith(_STAGING)]
    except OSError:
        return []
    return [s for s in staging if _mtime(s) < now - _ABANDONED_S]


def _last_used(entry: Path) -> float:
    return _mtime(entry / "meta.json")


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0  # gone meanwhile: first to evict, which is then a no-op


def _size(entry: Path) -> int:
    total = 0
    for file in entry.rglob("*"):
        with contextlib.suppress(OSError):
            total += file.stat().st_size if file.is_file() else 0
    return total
