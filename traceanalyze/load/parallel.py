"""The C scanner on every core: the ``traceEvents`` array cut into chunks at event boundaries,
each chunk scanned by its own :class:`_scan.Scanner` in a thread (the scan releases the GIL),
the chunks' column pieces then put together in file order.

This module only wraps the per-chunk scanning (where the chunks are cut, the threads, the
concatenation); what a scanner extracts from an event is the business of ``_scan.c`` and
:func:`traceanalyze.load.fast._scanned` (one result's pieces), unchanged.

Cutting. Chunk ``k`` runs from the first candidate boundary ``}<ws>,<ws>{`` whose ``}`` lies at or
after mark ``k`` of the (decompressed) document to the first one at or after mark ``k + 1`` (never
before the ``traceEvents`` key). A plain file's marks are equal steps (:func:`chunk_marks`); its
cuts are found before any chunk is scanned, from a small read at each mark. A gzip stream,
whose inflated size is not known beforehand, is cut every ``chunk_bytes`` of inflated bytes. A
candidate can lie inside a string, so every chunk is scanned as a small document of its own:
chunk 0 (which starts at the true start) followed by ``]`` (``]}`` for an object document), each
middle chunk as ``[`` chunk ``]``, the last as ``[`` (or ``{"traceEvents":[``) followed by the rest
of the file. A scanner that starts at a real event accepts its chunk only if the chunk ends
exactly between two events, which makes the next chunk's start a real event: so, by induction
from chunk 0, when every chunk is accepted every cut was real and the pieces are those one
scanner would have produced. When any chunk is declined, the file is scanned again by one
scanner (:func:`fast.scan_file`), which then takes it or declines it for its own reasons.

Reading. A plain file is read with positional reads (``os.preadv``) into one buffer per thread,
a block at a time, so memory stays ``threads x BLOCK_BYTES`` however large the file, and the
process is left as it was (no mapped pages, no signal handlers). A file that shrinks, grows or
is rewritten while it is read (a profiler exporting again to the same path) is one clear error,
:class:`~traceanalyze.errors.TraceReadError`, never a signal or a mix of two versions.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from functools import partial
from itertools import chain
from pathlib import Path
from typing import Any

from traceanalyze.errors import TraceReadError
from traceanalyze.load import fast
from traceanalyze.load.scanned import Scanned
from traceanalyze.load.source import (
    FIX_CHANGED,
    GZIP_MAGIC,
    MAX_ITEM_BYTES,
    ByteProgress,
    StreamCut,
    chunks,
    item_too_long,
    never_back,
)

try:
    from traceanalyze.load import _scan  # type: ignore[attr-defined]
except ImportError:  # not built: the msgspec path does everything
    _scan = None

THREADS_ENV = "TRACEANALYZE_THREADS"
# Bytes of document per chunk: enough that a chunk's fixed costs (a scanner, its pieces) stay
# a few percent of its scan, small enough that each thread gets several chunks.
MIN_CHUNK_BYTES = 4 * 1024 * 1024
MAX_CHUNK_BYTES = 32 * 1024 * 1024
# Inflated bytes per byte of a gzip trace, about (to size its chunks before inflating it).
_GZIP_RATIO = 15
# Chunks per thread: equal chunks finish at different times (events differ in cost per
# byte: the slowest of the bench trace's took twice the time of the fastest), and the last ones
# leave a core idle; more, smaller chunks shorten that tail (instead of threads taking work
# from each other, which cost two levels of locks for a few ms).
_CHUNKS_PER_THREAD = 4
# Bytes of a plain file read (and fed to a scanner) at a time by each thread: about a core's
# L2 cache, so the scanner reads what the read just copied while it is still there; a thread
# told to stop (another chunk failed, Ctrl-C) stops within a block.
BLOCK_BYTES = 1024 * 1024
# Bytes read at a mark to find the cut after it (doubled while none is found).
_LOOK_BYTES = 64 * 1024
# A gzip chunk that grows past this many chunk sizes without a cut (no boundary, or no
# traceEvents key yet: a document of white space, one huge event) ends the cutting: the rest of
# the stream is scanned as one last chunk, so that memory stays bounded by the chunks.
_UNCUT_CHUNKS = 2
_BOUNDARY = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")
_EVENTS_KEY = b'"traceEvents"'
_OBJECT_OPEN = b'{"traceEvents":['
_PREADV = getattr(os, "preadv", None)  # not on Windows: one scanner reads the file there


def default_threads() -> int:
    """The scanner threads: ``$TRACEANALYZE_THREADS`` when set, else the share of the cores a
    worker process of :func:`worker_settings` was given, else the cores this process may run
    on."""
    text = os.environ.get(THREADS_ENV, "").strip()
    if text:
        try:
            return max(1, int(text))
        except ValueError:
            pass  # a malformed setting must not stop a load: use the cores
    if _WORKER.threads:
        return _WORKER.threads
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


@dataclass
class _WorkerSettings:
    """What a worker process started by traceanalyze was told (0: nothing)."""

    threads: int = 0


_WORKER = _WorkerSettings()


def _set_worker_threads(threads: int) -> None:
    _WORKER.threads = threads


def worker_settings(threads: int) -> dict[str, Any]:
    """The ``initializer`` and ``initargs`` of a process pool whose workers each scan a file
    on ``threads`` threads (so that the workers together use the cores once). The setting is
    given to each worker explicitly: nothing in this process, its environment included,
    changes."""
    return {"initializer": _set_worker_threads, "initargs": (threads,)}


class _Rejected(Exception):  # noqa: N818 (a signal, not an error)
    """A chunk was declined: one scanner takes the whole file instead."""


class _Changed(Exception):  # noqa: N818 (turned into a TraceReadError naming the file)
    """The file changed while it was read."""


def scan_file(
    path: Path,
    progress: ByteProgress | None = None,
    threads: int | None = None,
    chunk_bytes: int | None = None,
) -> Scanned:
    """Scan ``path`` with the C scanner on ``threads`` threads (default
    :func:`default_threads`); raises :class:`fast.Declined` like :func:`fast.scan_file`.
    ``chunk_bytes`` fixes the chunk size (tests use tiny ones)."""
    count = default_threads() if threads is None else max(1, threads)
    if _scan is None or count == 1:
        return fast.scan_file(path, progress)
    # a file scanned again whole after its chunks reported bytes must not go back
    progress = never_back(progress) if progress else None
    try:
        file = open(path, "rb")  # noqa: SIM115 (closed below, after every thread is done)
    except OSError:
        return fast.scan_file(path, progress)  # which names the read error precisely
    try:
        return _scan_open(file, path, progress, count, chunk_bytes)
    except (_Rejected, StreamCut):
        # a cut gzip stream (rare) is scanned again by one scanner, which tells a cut after
        # whole JSON from one inside it
        return fast.scan_file(path, progress)
    except _Changed:
        raise TraceReadError("changed while it was read", path, FIX_CHANGED) from None
    except fast.ItemTooLong:
        raise item_too_long(path) from None
    except OSError:
        return fast.scan_file(path, progress)  # which names the read error precisely
    finally:
        file.close()


def _scan_open(
    file: Any, path: Path, progress: ByteProgress | None, count: int, chunk_bytes: int | None
) -> Scanned:
    before = os.fstat(file.fileno())
    head = file.read(2)
    gzipped = head == GZIP_MAGIC
    if not gzipped and _PREADV is None:
        raise _Rejected
    # gzip: the size inflated is unknown; a compressed trace is about 15x smaller
    expected = before.st_size * _GZIP_RATIO if gzipped else before.st_size
    if chunk_bytes is None:
        if expected < 2 * MIN_CHUNK_BYTES:
            raise _Rejected  # too small to share: one scanner
        chunk_bytes = expected // (count * _CHUNKS_PER_THREAD)
        chunk_bytes = min(MAX_CHUNK_BYTES, max(MIN_CHUNK_BYTES, chunk_bytes))
    with _threads(count) as pool:
        if gzipped:
            return _scan_stream(_gzip_pieces(path, chunk_bytes, progress), count, pool)
        scanned = _scan_plain(file.fileno(), before, chunk_bytes, pool, progress)
    if _changed(before, os.fstat(file.fileno())):
        raise _Changed
    return scanned


@contextlib.contextmanager
def _threads(count: int) -> Iterator[ThreadPoolExecutor]:
    """The scanner threads, every one finished when this ends, however it ends: after a
    failure or a Ctrl-C their chunks were cancelled or told to stop (at their next block), and
    a KeyboardInterrupt (or a signal handler's exception) that arrives while they finish is
    raised once they have."""
    prefix = f"traceanalyze-scan-{next(_POOLS)}"
    pool = ThreadPoolExecutor(count, thread_name_prefix=prefix)
    try:
        yield pool
    finally:
        interrupted: BaseException | None = None
        while True:
            try:
                pool.shutdown(wait=True, cancel_futures=True)
                _join_strays(prefix)
                break
            except BaseException as error:  # Ctrl-C, or a signal handler's own exception
                interrupted = error
        if interrupted is not None:
            raise interrupted


_POOLS = itertools.count()


def _join_strays(prefix: str) -> None:
    """Wait for the pool's threads that it does not know of: a Ctrl-C inside ``submit``,
    while a new thread started, leaves it out of the pool's list (it ends at once: the pool
    is shut down)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(
        thread.name.startswith(prefix + "_") for thread in threading.enumerate()
    ):
        time.sleep(0.001)


def _changed(before: os.stat_result, after: os.stat_result) -> bool:
    """Whether a file was written between two stats of it (size or modification time)."""
    return (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns)


# --- chunks of a plain file ---------------------------------------------------------------


@dataclass(frozen=True)
class _Span:
    """A chunk of a plain file: bytes ``start`` to ``end``; ``first``: it starts the document,
    ``last``: it runs to the document's end."""

    start: int
    end: int
    first: bool
    last: bool


def _scan_plain(
    fd: int,
    stat: os.stat_result,
    chunk_bytes: int,
    pool: ThreadPoolExecutor,
    progress: ByteProgress | None,
) -> Scanned:
    """A plain file's chunks, each scanned by a pool thread; progress as chunks finish."""
    size = stat.st_size
    reader = _Reader(fd, size)
    opening = _opening(reader.read(0, 4096))
    # A bare array has no key; an object's must come before any cut (the top-level metadata,
    # such as a long distributedInfo, holds lists of objects too).
    events = 0 if opening == b"[" else reader.find(_EVENTS_KEY, 0, chunk_bytes)
    if events < 0:
        raise _Rejected  # no key in the first chunk: unusual, one scanner says what it is
    spans = _spans(reader, chunk_marks(size, chunk_bytes), events)
    scan = partial(_scan_span, reader, opening)
    futures = [pool.submit(scan, span) for span in spans]
    try:
        done = 0
        for future in _as_done(futures):
            span = spans[futures.index(future)]
            done += span.end - span.start
            if progress:
                progress(done, size)
        results = [future.result() for future in futures]
    finally:
        reader.stopped = True  # the others stop at their next block (see _threads)
        for future in futures:
            future.cancel()
    if progress:
        progress(size, size)
    return _merge(results)


def _as_done(futures: list[Future[_Result]]) -> Iterator[Future[_Result]]:
    """``futures`` as each finishes; the first failure raised at once (the rest is then
    cancelled by the caller)."""
    pending = set(futures)
    while pending:
        finished, pending = wait(pending, return_when=FIRST_EXCEPTION)
        for future in finished:
            future.result()  # a chunk declined (_Rejected), the file changed, a read failed
            yield future


def chunk_marks(size: int, chunk_bytes: int) -> list[int]:
    """Where chunks are cut, about (each cut moves to the next event boundary): from 0 to
    ``size``, every ``chunk_bytes``, the last chunk taking what is left (at least a chunk)."""
    full = max(1, size // chunk_bytes)
    return [k * chunk_bytes for k in range(full)] + [size]


def _spans(reader: _Reader, marks: list[int], events: int) -> list[_Span]:
    """The chunks: cut at the first boundary at or after each inner mark (and after the
    ``traceEvents`` key); a mark with no boundary after it, or the same one as the mark
    before, cuts nothing."""
    cuts: list[tuple[int, int]] = []
    for mark in marks[1:-1]:
        found = reader.boundary(max(mark, events))
        if found is None:
            break  # none to the end of the file: the chunk before takes the rest
        if not cuts or found[0] > cuts[-1][0]:
            cuts.append(found)
    starts = [0] + [start for _, start in cuts]
    ends = [close + 1 for close, _ in cuts] + [reader.size]
    last = len(starts) - 1
    return [
        _Span(start, end, first=k == 0, last=k == last)
        for k, (start, end) in enumerate(zip(starts, ends, strict=True))
    ]


class _Reader:
    """Positional reads of one open file, shared by the threads; each thread reads into a
    buffer of its own. A read that comes back short (the file shrank) is :class:`_Changed`."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.size = size
        self.stopped = False  # set when the load ends early: threads stop at their next block
        self._local = threading.local()

    def read(self, at: int, count: int) -> bytes:
        """Bytes ``at`` to ``at + count`` (fewer at the end of the file)."""
        count = max(0, min(count, self.size - at))
        data = bytearray(count)
        self.read_into(memoryview(data), at)
        return bytes(data)

    def read_into(self, view: memoryview, at: int) -> None:
        """Fill ``view`` from byte ``at`` (the GIL is let go while the OS copies)."""
        while len(view):
            count = _PREADV(self.fd, [view], at)  # type: ignore[misc]
            if count <= 0:
                raise _Changed  # the file ends before the size it had: it shrank
            view, at = view[count:], at + count

    def buffer(self, size: int) -> bytearray:
        """This thread's buffer, at least ``size`` bytes (kept for its next chunk)."""
        buffer: bytearray | None = getattr(self._local, "buffer", None)
        if buffer is None or len(buffer) < size:
            buffer = self._local.buffer = bytearray(size)
        return buffer

    def find(self, needle: bytes, start: int, limit: int) -> int:
        """The position of the first ``needle`` in bytes ``start`` to ``limit``, or -1."""
        at = start
        while at < min(limit, self.size):
            data = self.read(at, _LOOK_BYTES + len(needle))
            found = data.find(needle)
            if found >= 0:
                return at + found
            at += _LOOK_BYTES
        return -1

    def boundary(self, start: int) -> tuple[int, int] | None:
        """The positions of the ``}`` and the ``{`` of the first candidate boundary at or
        after ``start`` (None when there is none to the end of the file)."""
        at, look = start, _LOOK_BYTES
        while at < self.size:
            data = self.read(at, look)
            found = _BOUNDARY.search(data)
            if found is not None:
                return at + found.start(), at + found.end() - 1
            if at + len(data) >= self.size:
                return None
            # A boundary may straddle the end of the read: a last '}' followed only by white
            # space and commas is read again at the start of the next read (a longer one when
            # it is already there).
            brace = data.rfind(b"}")
            if brace < 0 or data[brace + 1 :].strip(b" \t\r\n,"):
                at, look = at + len(data), _LOOK_BYTES
            elif brace:
                at, look = at + brace, _LOOK_BYTES
            else:
                look *= 2
        return None


def _scan_span(reader: _Reader, opening: bytes, span: _Span) -> _Result:
    """A chunk of a plain file, read a block at a time into this thread's buffer and scanned
    as a small document of its own (see the module doc): opened as where it starts says,
    closed as it ends. What a feed leaves (an event cut by the block's end) moves to the
    buffer's start, and the next block is read after it."""
    scanner = _scan.Scanner(fast.KINDS)
    # an object document's first chunk, or its last one after the first: closed by "]}"
    closes_object = opening != b"[" and (span.first or span.last)
    try:
        if not span.first:
            _feed_all(scanner, _OBJECT_OPEN if closes_object else b"[")
        buffer = reader.buffer(BLOCK_BYTES)
        pos, kept = span.start, 0  # the next byte to read; bytes left at the buffer's start
        while True:
            if reader.stopped:
                raise _Rejected  # another chunk failed: the load has ended
            if kept == len(buffer):  # an item longer than the buffer: a longer one
                buffer = _grown(reader, buffer, kept)
            count = min(span.end - pos, len(buffer) - kept)
            with memoryview(buffer) as view:
                reader.read_into(view[kept : kept + count], pos)
                pos += count
                final = span.last and pos == span.end
                with view[: kept + count] as fed:  # released even if a traceback holds it
                    used = scanner.feed(fed, final)
            if final:
                break
            kept += count - used
            if pos == span.end:
                if kept:
                    raise _Rejected  # the chunk does not end between two events
                scanner.feed(b"]}" if closes_object else b"]", True)
                break
            buffer[:kept] = buffer[used : used + kept]
    except _scan.Unsupported:
        raise _Rejected from None
    return _result_of(scanner)


def _grown(reader: _Reader, buffer: bytearray, kept: int) -> bytearray:
    """A buffer twice as long, holding ``buffer``'s first ``kept`` bytes."""
    if kept > MAX_ITEM_BYTES:
        raise fast.ItemTooLong
    bigger = bytearray(2 * len(buffer))
    bigger[:kept] = buffer[:kept]
    reader._local.buffer = bigger
    return bigger


def _opening(head: bytes) -> bytes:
    head = head.lstrip(b" \t\r\n")
    if head[:1] not in (b"{", b"["):
        raise _Rejected  # not the usual start: the single scanner says what it is
    return head[:1]


# --- chunks of a gzip stream ------------------------------------------------------------------


@dataclass
class _Chunk:
    """A gzip stream's chunk: the views of the inflated pieces it spans, fed in order (the
    last chunk's pieces may be the rest of the stream, inflated as it is scanned)."""

    index: int
    last: bool
    parts: Iterable[memoryview | bytes]


def _gzip_pieces(path: Path, chunk_bytes: int, progress: ByteProgress | None) -> Iterator[_Chunk]:
    """Chunks of the inflated stream, cut as in the module doc (inflated in this thread while
    the pool scans the chunks before). Inflated pieces are never joined: a chunk is the list
    of views of the pieces it spans, fed in order (only an event cut by a piece's end is
    joined, by :func:`fast._feed_pieces`). Joining them cost a copy of every byte, and the
    fresh pages of each joined chunk, about as much CPU time as inflating. A chunk that finds
    no cut in ``_UNCUT_CHUNKS`` chunk sizes becomes the last: the rest of the stream."""
    earlier: list[memoryview] = []  # the chunk's parts in the pieces before this one
    size = 0  # bytes in earlier
    index = 0
    keyed = False  # the traceEvents key was seen: no cut before it
    seam = b""  # the end of the piece before (the key may straddle two pieces)
    pieces = chunks(path, progress)
    for piece in pieces:
        view = memoryview(piece)
        begin = 0  # where the current chunk's part of this piece starts
        at = 0  # where a cut is looked for
        if not keyed:
            keyed, at = _events_key_in(seam, piece)
            seam = piece[-len(_EVENTS_KEY) :]
        at = max(at, chunk_bytes - size) if keyed else len(piece)
        while at < len(piece) and (found := _BOUNDARY.search(piece, at)) is not None:
            yield _Chunk(index, last=False, parts=[*earlier, view[begin : found.start() + 1]])
            index += 1
            earlier, size = [], 0
            begin = found.end() - 1
            at = begin + chunk_bytes
        earlier.append(view[begin:])
        size += len(piece) - begin
        if size > _UNCUT_CHUNKS * chunk_bytes:
            yield _Chunk(index, last=True, parts=chain(earlier, pieces))
            return
    yield _Chunk(index, last=True, parts=earlier)


def _events_key_in(seam: bytes, piece: bytes) -> tuple[bool, int]:
    """Whether the traceEvents key ends in ``piece`` (``seam``: the end of the piece before),
    and from where in ``piece`` a cut may be looked for."""
    if _EVENTS_KEY in seam + piece[: len(_EVENTS_KEY)]:
        return True, 0
    found = piece.find(_EVENTS_KEY)
    return found >= 0, max(found, 0)


def _scan_stream(pieces: Iterator[_Chunk], count: int, pool: ThreadPoolExecutor) -> Scanned:
    first = next(pieces)
    parts = iter(first.parts)
    head_part = next(parts, b"")
    first.parts = chain([head_part], parts)
    opening = _opening(bytes(head_part[:4096]))
    return _merge(_in_order(pool, count, chain([first], pieces), opening))


# --- scanning and merging ---------------------------------------------------------------------


@dataclass
class _Result:
    scanned: Scanned
    header: bytes


def _scan_chunk(chunk: _Chunk, opening: bytes) -> _Result:
    """A gzip stream's chunk scanned as a small document of its own (see the module doc): its
    opening, its parts fed in order (joined only where an event straddles two), its closing;
    the whole chunk consumed unless it is the last."""
    scanner = _scan.Scanner(fast.KINDS)
    bare = opening == b"["
    try:
        if chunk.index:  # the last chunk ends the document; one in the middle does not
            _feed_all(scanner, b"[" if bare or not chunk.last else _OBJECT_OPEN)
        rest = fast._feed_pieces(scanner, chunk.parts)
        if chunk.last:
            scanner.feed(rest, True)
        else:
            if rest:
                raise _Rejected  # the chunk did not end between two events
            scanner.feed(b"]" if bare or chunk.index else b"]}", True)
    except _scan.Unsupported:
        raise _Rejected from None
    return _result_of(scanner)


def _result_of(scanner: Any) -> _Result:
    result: dict[str, Any] = scanner.result()
    del scanner
    header: bytes = result["header"]
    result["header"] = b""
    return _Result(fast._scanned(result), header)


def _feed_all(scanner: Any, data: bytes | memoryview) -> None:
    """Feed ``data``, which must end between two items (else the chunk is declined)."""
    if scanner.feed(data, False) != len(data):
        raise _Rejected


def _in_order(
    pool: ThreadPoolExecutor, count: int, chunks: Iterator[_Chunk], opening: bytes
) -> list[_Result]:
    """Scan ``chunks`` on the pool, at most two per thread at a time (memory stays bounded),
    and return their results in order. The last chunk is scanned in this thread: its parts may
    be the rest of the stream, inflated as they are read (and progress is reported from the
    thread that asked for it)."""
    results: list[_Result] = []
    last: list[_Result] = []
    running: deque[Future[_Result]] = deque()
    try:
        for chunk in chunks:
            if chunk.last:
                last.append(_scan_chunk(chunk, opening))
                break
            running.append(pool.submit(_scan_chunk, chunk, opening))
            if len(running) >= 2 * count:
                results.append(running.popleft().result())
        while running:
            results.append(running.popleft().result())
    finally:
        for future in running:
            future.cancel()  # those already scanning finish their chunk (see _threads)
    return [*results, *last]


def _merge(results: list[_Result]) -> Scanned:
    """The chunks' pieces in file order, as one scanner would have given them."""
    header = b",".join(r.header for r in results if r.header)
    # has_events from the chunks (extend ors them): a document without a traceEvents list is
    # one chunk (no cut before the key), whose scanner saw none
    merged = Scanned(fast._header(header))
    for result in results:
        merged.extend(result.scanned)
    return merged
