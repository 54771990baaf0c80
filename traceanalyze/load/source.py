"""A trace file's bytes, decompressed, in bounded chunks: plain or gzip, told apart by content.

Nothing here holds the whole file: a plain file is read a chunk at a time, gzip data is
inflated a chunk at a time. ``progress(done, total)`` is told the bytes of the file read so far
(compressed bytes for gzip) after each chunk.

gzip is inflated with zlib-ng where it is installed (``pip install traceanalyze[fast]``: about
4x zlib's speed, the same bytes out), else with the standard library's zlib;
``TRACEANALYZE_INFLATE=zlib`` forces the latter.
"""

from __future__ import annotations

import os
import stat
import zlib
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import asdict, dataclass
from io import BufferedReader
from pathlib import Path
from types import ModuleType
from typing import Any, BinaryIO

from traceanalyze.errors import EmptyTraceError, TraceFormatError, TraceReadError, path_error

GZIP_MAGIC = b"\x1f\x8b"
# Decompressed bytes per chunk: large enough that per-chunk costs vanish, small enough that a
# chunk and its decoded columns are a small part of a multi-GB load.
CHUNK_BYTES = 8 * 1024 * 1024
# The least room a plain read makes in the buffer.
_MIN_ROOM_BYTES = 64 * 1024
# Compressed bytes read per step of a gzip file.
_GZIP_READ_BYTES = 1024 * 1024

ByteProgress = Callable[[int, int], None]


def never_back(progress: ByteProgress) -> ByteProgress:
    """``progress``, called only with more bytes done than any call before (a file read again
    by another decoder after a first one declined it starts its count again)."""
    done = -1

    def forward(now: int, total: int) -> None:
        nonlocal done
        if now > done:
            done = now
            progress(now, total)

    return forward


INFLATE_ENV = "TRACEANALYZE_INFLATE"


def inflater() -> ModuleType:
    """The zlib-compatible module gzip data is inflated with (see the module doc)."""
    if os.environ.get(INFLATE_ENV, "").strip().lower() != "zlib":
        try:
            from zlib_ng import zlib_ng

            return zlib_ng
        except ImportError:
            pass  # the `fast` extra is not installed
    return zlib


def chunks(
    path: Path, progress: ByteProgress | None = None, chunk_bytes: int | None = None
) -> Iterator[bytes]:
    """The decompressed bytes of ``path`` in chunks of about ``chunk_bytes`` (default
    CHUNK_BYTES; never empty).

    Raises the precise TraceReadError / TraceFormatError / EmptyTraceError naming ``path``.
    """
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    file, stat, head = _open(path)
    total = stat.st_size
    with file:
        if head == GZIP_MAGIC:
            try:
                read = yield from _gunzip(file, head, total, path, progress, chunk_bytes)
            except StreamCut as cut:
                # a file still being written also ends early: that is said as such
                unchanged(file, stat, cut.read, path)
                raise
        else:
            read = yield from _plain(file, head, total, path, progress, chunk_bytes)
        unchanged(file, stat, read, path)
        if progress:
            progress(total, total)


def is_gzip(path: Path) -> bool:
    """Whether ``path`` starts with the gzip magic (False when it cannot be read: the reader
    then names the problem)."""
    try:
        with path.open("rb") as file:
            return file.read(2) == GZIP_MAGIC
    except OSError:
        return False


class Blocks:
    """A plain (not gzip) file's bytes for a consumer that leaves a tail, in one reused
    buffer: each block is the tail left last time followed by new data; tell :meth:`consume`
    how many bytes of it were used. Reusing the buffer spares a fresh allocation (and its page
    faults) and a copy per chunk: about a quarter of the scan time of a multi-GB file. (Gzip
    data is fed in the inflated pieces themselves: :func:`fast._feed_pieces`.)"""

    def __init__(self, path: Path, progress: ByteProgress | None = None) -> None:
        self.path = path
        self.progress = progress
        # No larger than the file needs: a buffer is zeroed (its pages touched) when made.
        try:
            size = min(2 * CHUNK_BYTES, path.stat().st_size + 1)
        except OSError:
            size = 2 * CHUNK_BYTES  # reading it names the problem
        self.buffer = bytearray(size)
        self.filled = 0

    def __iter__(self) -> Iterator[memoryview]:
        file, stat, head = _open(self.path)
        with file:
            read = yield from self._read(file, head, stat.st_size)
            unchanged(file, stat, read, self.path)
        if self.progress:
            self.progress(stat.st_size, stat.st_size)

    def _read(
        self, file: BufferedReader, head: bytes, total: int
    ) -> Generator[memoryview, None, int]:
        """The blocks; returns the bytes read."""
        self.buffer[:2] = head
        self.filled = done = len(head)
        while True:
            # room for what is left of the file (a little more, should it grow meanwhile)
            self._room(min(CHUNK_BYTES, max(_MIN_ROOM_BYTES, total + 1 - done)))
            try:
                count = file.readinto(memoryview(self.buffer)[self.filled :]) or 0
            except OSError as exc:
                raise _read_error(exc, self.path) from None
            if not count:
                return done
            self.filled += count
            done += count
            if self.progress:
                self.progress(min(done, total), total)
            yield memoryview(self.buffer)[: self.filled]

    def consume(self, used: int) -> None:
        rest = self.filled - used
        if rest > MAX_ITEM_BYTES:
            raise item_too_long(self.path)
        self.buffer[:rest] = self.buffer[used : self.filled]
        self.filled = rest

    def rest(self) -> bytes:
        return bytes(self.buffer[: self.filled])

    def _room(self, count: int) -> None:
        """Space for ``count`` more bytes (a new buffer: a block handed out may still be
        referenced, and a bytearray with live views cannot grow)."""
        if self.filled + count > len(self.buffer):
            bigger = bytearray(max(2 * len(self.buffer), self.filled + count))
            bigger[: self.filled] = self.buffer[: self.filled]
            self.buffer = bigger


FIX_CHANGED = "Load it again once whatever writes it (a profiler's export?) has finished."
# The longest single JSON item (an event, a metadata value) a scanner is handed whole: a
# profiler's events are a few kB; a longer one is input made to exhaust memory.
MAX_ITEM_BYTES = 256 * 1024 * 1024


def item_too_long(path: Path) -> TraceFormatError:
    return TraceFormatError(
        f"holds a single JSON value or run of white space longer than {MAX_ITEM_BYTES >> 20} "
        "MB, far beyond any profiler's event",
        path,
        "Pass a trace written by torch.profiler (export_chrome_trace).",
    )


def unchanged(file: BinaryIO, before: os.stat_result, read: int, path: Path) -> None:
    """A :class:`TraceReadError` when the regular file ``file`` was written while it was read
    (its size or modification time changed, or ``read`` bytes are not its size): what was
    read may mix two versions of it."""
    after = os.fstat(file.fileno())
    if not stat.S_ISREG(before.st_mode):
        return
    if read and before.st_size == 0 and after.st_size == 0:
        # content with no size, then or now: not a file that changed but a pseudo-file
        raise TraceReadError(
            "is a pseudo-file with no stated size (as under /proc or /sys), not a trace",
            path,
            "Save the trace to a file and pass that file.",
        )
    if read != before.st_size or (after.st_size, after.st_mtime_ns) != (
        before.st_size,
        before.st_mtime_ns,
    ):
        raise TraceReadError("changed while it was read", path, FIX_CHANGED)


def refuse_special(path: Path) -> None:
    """A :class:`TraceReadError` when ``path`` is a pipe, socket or device: opening a pipe
    waits for a writer, and a stream cannot be read the several times a load reads a file."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # reading it names the problem
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        raise TraceReadError(
            "is not a regular file (a pipe, socket or device)",
            path,
            "Save the trace to a file and pass that file.",
        )


def _open(path: Path) -> tuple[BufferedReader, os.stat_result, bytes]:
    try:
        file = path.open("rb")
    except OSError as exc:
        raise _read_error(exc, path) from None
    try:
        status = os.fstat(file.fileno())
        head = file.read(2)
    except OSError as exc:
        file.close()
        raise _read_error(exc, path) from None
    if not head:
        file.close()
        raise EmptyTraceError("the file is empty", path, "Re-export the trace from the profiler.")
    return file, status, head


def _plain(
    file: BinaryIO,
    head: bytes,
    total: int,
    path: Path,
    progress: ByteProgress | None,
    chunk_bytes: int,
) -> Generator[bytes, None, int]:
    done = 0
    data = head
    while True:
        try:
            data += file.read(chunk_bytes - len(data))
        except OSError as exc:
            raise _read_error(exc, path) from None
        if not data:
            return done
        done += len(data)
        if progress:
            progress(min(done, total), total)
        yield data
        data = b""


FIX_CUT = "Copy or re-export the file again; it was cut off while being written or copied."
# A gzip member ends with 8 bytes: the CRC-32 of its data and its size (ISIZE).
_TRAILER_BYTES = 8


@dataclass(frozen=True)
class GzipCut:
    """Where a gzip file ends early: its ``member`` (1 for the first) that has no end, the
    file offset that member starts at, the bytes inflated from it, and how many bytes of its
    8-byte trailer (checksum and size) are missing where only the trailer is cut (None where
    compressed data is cut too: how much is unknown)."""

    member: int
    member_offset_bytes: int
    member_inflated_bytes: int
    missing_bytes: int | None

    def as_dict(self) -> dict[str, int | None]:
        """The record as TraceMeta.gzip_cut keeps it (plain values: the cache writes JSON)."""
        return asdict(self)


class StreamCut(TraceFormatError):  # noqa: N818 (a signal UntilCut takes, or the error)
    """The gzip stream of a file ends early (raised after every byte it yields was inflated):
    an error where what was read is not a whole trace, else noted on the trace (see
    :class:`UntilCut`)."""

    def __init__(self, path: Path, cut: GzipCut, read: int) -> None:
        super().__init__("the gzip stream is truncated", path, FIX_CUT)
        self.cut = cut
        self.read = read

    def __reduce__(self) -> tuple[type[TraceFormatError], tuple[str, Path | None, str | None]]:
        # pickled (from a worker), it is the error it stands for
        return TraceFormatError, (self.message, self.path, self.fix)

    def error(self) -> TraceFormatError:
        """The error it stands for, as raised where what was read is no whole trace."""
        return TraceFormatError(self.message, self.path, self.fix)


class UntilCut:
    """The pieces of :func:`chunks`, ending quietly where a gzip stream is cut: ``cut`` then
    holds the :class:`StreamCut`, for the caller to raise when what was read is not a whole
    trace, or to note on the trace when it is (a cut trailer or a cut member after the JSON
    ended: every event was read; only the checksum could not be verified)."""

    def __init__(self, pieces: Iterable[bytes]) -> None:
        self.pieces = pieces
        self.cut: StreamCut | None = None

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self.pieces
        except StreamCut as cut:
            self.cut = cut

    def noted(self) -> dict[str, int | None]:
        """The cut as TraceMeta.gzip_cut keeps it (empty when the stream was whole)."""
        return self.cut.cut.as_dict() if self.cut else {}


def _gunzip(
    file: BinaryIO,
    head: bytes,
    total: int,
    path: Path,
    progress: ByteProgress | None,
    chunk_bytes: int,
) -> Generator[bytes, None, int]:
    module = inflater()
    inflate: Any = module.decompressobj(wbits=31)
    packed = head
    read = len(head)
    member, member_at, member_out = 1, 0, 0  # the member being inflated (see GzipCut)
    # Whether the first bytes inflated start a JSON document (None: none inflated yet): a
    # stream that ends early is a cut-off trace only if it does, else corrupt (issue 41).
    inflated_json: bool | None = None
    while True:
        if not packed:
            try:
                packed = file.read(min(_GZIP_READ_BYTES, chunk_bytes))
            except OSError as exc:
                raise _read_error(exc, path) from None
            read += len(packed)
            if not packed:
                break
        if inflate is None:
            if not packed.strip(b"\0"):  # zero padding after the last member
                packed = b""
                continue
            inflate = module.decompressobj(wbits=31)  # a gzip file may hold several members
            member, member_at, member_out = member + 1, read - len(packed), 0
        try:
            data = inflate.decompress(packed, chunk_bytes)
        except module.error as exc:
            raise TraceFormatError(
                f"is corrupt gzip data ({exc})", path, "Copy or re-export the file again."
            ) from None
        if inflate.eof:
            # The input after the member's end, all of it: a call that began with input left
            # over by an earlier call's output limit may also leave those same bytes in
            # unconsumed_tail (CPython's zlib does), so adding it would inflate them twice.
            packed = inflate.unused_data
            inflate = None
        else:
            packed = inflate.unconsumed_tail
        if data:
            member_out += len(data)
            inflated_json = _starts_json(inflated_json, data)
            if progress:
                progress(min(read, total), total)
            yield data
    if inflate is not None and not inflate.eof:
        _refuse_corrupt(inflated_json, file, path)
        # Every member ends with its checksum and size; a stream without them was cut off.
        member_out += yield from _drained(inflate, chunk_bytes)
        missing = _trailer_missing(inflate, module)
        raise StreamCut(path, GzipCut(member, member_at, member_out, missing), read)
    return read


def _starts_json(known: bool | None, data: bytes) -> bool | None:
    """Whether the inflated bytes start a JSON document: ``known`` once decided, else from
    ``data``'s first byte that is not white space or a byte-order mark (None: none yet)."""
    if known is not None:
        return known
    first = data.lstrip(b" \t\r\n\xef\xbb\xbf")[:1]
    return first in (b"{", b"[") if first else None


# A gzip header's extra flags (XFL) and operating system (OS) bytes as gzip writers set them
# (RFC 1952): a header with others is damaged, not the start of a cut-off file.
_GZIP_XFL = frozenset({0, 2, 4})
_GZIP_OS = frozenset({*range(14), 255})


def _refuse_corrupt(inflated_json: bool | None, file: BinaryIO, path: Path) -> None:
    """A gzip stream that ends before its end mark and is no cut-off trace is corrupt."""
    if not _cut_off(inflated_json, file):
        raise TraceFormatError(
            "is corrupt gzip data (it ends before its end mark, and neither its header "
            "nor what it inflates to is a trace's)",
            path,
            "Copy or re-export the file again.",
        )


def _cut_off(inflated_json: bool | None, file: BinaryIO) -> bool:
    """Whether a gzip stream that ends early is a trace cut off (else it is corrupt): what it
    inflated starts a JSON document or, where nothing was inflated, its header is sound."""
    if inflated_json is not None:
        return inflated_json
    try:
        header = os.pread(file.fileno(), 10, 0)
    except OSError:
        return True  # cannot look again: say what the stream itself shows
    return len(header) < 10 or (header[8] in _GZIP_XFL and header[9] in _GZIP_OS)


def _drained(inflate: Any, chunk_bytes: int) -> Generator[bytes, None, int]:
    """What a member cut short still holds (its input all taken, its output limited); returns
    the bytes yielded."""
    count = 0
    while data := inflate.decompress(b"", chunk_bytes):
        count += len(data)
        yield data
    return count


def _trailer_missing(inflate: Any, module: ModuleType) -> int | None:
    """How many bytes of the member's trailer are missing when only its trailer is cut (its
    compressed data ended), else None. A copy of the inflater is fed zero bytes one at a
    time: compressed data that goes on gives output or a data error; a trailer is checked as
    soon as its CRC-32 (4 bytes), then its size (4 more), are complete, and a wrong one is
    named as such, so the bytes fed until then are those missing."""
    probe = inflate.copy()
    for fed in range(1, _TRAILER_BYTES + 1):
        try:
            if probe.decompress(b"\0"):
                return None  # compressed data
        except module.error as exc:
            if "incorrect data check" in str(exc):  # the CRC-32 completed by this byte
                return fed + _TRAILER_BYTES // 2
            if "incorrect length check" in str(exc):  # the size completed by this byte
                return fed
            return None
        if probe.eof:  # the zeros were the missing bytes (a small member's size ends so)
            return fed
    return None


def _read_error(exc: OSError, path: Path) -> TraceReadError:
    if isinstance(exc, FileNotFoundError):
        return TraceReadError("no such file", path, "Check the path.")
    if isinstance(exc, IsADirectoryError):
        return TraceReadError("is a folder, not a file", path, "Pass the trace file.")
    if isinstance(exc, PermissionError):
        return TraceReadError("permission denied", path, "Make the file readable for this user.")
    return path_error(exc, path)
