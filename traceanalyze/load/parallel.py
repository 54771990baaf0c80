"""The C scanner on every core: the ``traceEvents`` array cut into chunks at event boundaries,
each chunk scanned by its own :class:`_scan.Scanner` in a thread (the scan releases the GIL),
the chunks' column pieces then put together in file order.

This module only wraps the per-chunk scanning (where the chunks are cut, the threads, the
concatenation); what a scanner extracts from an event is the business of ``_scan.c`` and
:func:`traceanalyze.load.fast._scanned` (one result's pieces), unchanged.

Cutting. Chunk ``k`` runs from the first candidate boundary ``}<ws>,<ws>{`` whose ``}`` lies at or
after mark ``k`` of the (decompressed) document to the first one at or after mark ``k + 1`` (never
before the ``traceEvents`` key). A plain file's marks come from :func:`chunk_marks` (equal chunks,
split further while they are scanned: see Balancing); a gzip stream, whose inflated size is not
known beforehand, is cut every ``chunk_bytes`` of inflated bytes. A candidate can lie inside a
string, so every chunk is scanned as a small document of its own: chunk 0 (which starts at the true
start) followed by ``]`` (``]}`` for an object document), each middle chunk as ``[`` chunk ``]``,
the last as ``[`` (or ``{"traceEvents":[``) followed by the rest of the file. A scanner that starts
at a real event accepts its chunk only if the chunk ends exactly between two events, which makes
the next chunk's start a real event: so, by induction from chunk 0, when every chunk is accepted
every cut was real and the pieces are those one scanner would have produced. When any chunk is
declined, the file is scanned again by one scanner (:func:`fast.scan_file`), which then takes it or
declines it for its own reasons.

Balancing. A thread scans a plain file's chunk a block at a time (``BLOCK_BYTES``), claiming each
block before it feeds it. Once no chunk is left to start, a thread without work takes the second
half of what is left of the largest chunk still being scanned: it moves that chunk's end back to
a candidate boundary past the half (and past the block its scanner claimed) and scans the rest
as a chunk of its own, which inherits the end of the document when the chunk had it. A stolen cut
is checked like any other (the chunk it ends must end there between two events), and the pieces
are put together by where each chunk starts, so the result is the one scanner's. Events differ in
cost per byte (a kernel's typed args against a Python frame's name), so equal chunks finish at
different times: the slowest of the bench trace's took twice the time of the fastest, and the
last chunks left one core idle for a third of a chunk's time on average.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from traceanalyze.load import fast
from traceanalyze.load.scanned import Scanned
from traceanalyze.load.source import GZIP_MAGIC, ByteProgress, chunks, never_back

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
# Chunks per thread aimed at (threads balance their last ones by stealing; see the module doc).
_CHUNKS_PER_THREAD = 2
# Bytes of a plain file a scanner is fed at a time: what another thread cannot take from it,
# and how often its scanned pages are dropped.
BLOCK_BYTES = 4 * 1024 * 1024
# The least left to scan in a chunk for a thread without work to take half of it.
MIN_STEAL_BYTES = 2 * 1024 * 1024
_BOUNDARY = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")
_OBJECT_OPEN = b'{"traceEvents":['


def default_threads() -> int:
    """The scanner threads: ``$TRACEANALYZE_THREADS`` when set, else the cores this process
    may run on."""
    text = os.environ.get(THREADS_ENV, "").strip()
    if text:
        try:
            return max(1, int(text))
        except ValueError:
            pass  # a malformed setting must not stop a load: use the cores
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


_POLARS_THREADS_ENV = "POLARS_MAX_THREADS"
_OPENBLAS_THREADS_ENV = "OPENBLAS_NUM_THREADS"


@contextlib.contextmanager
def worker_environment(threads: int) -> Iterator[None]:
    """While a process pool starts its workers (spawned: they read the environment before
    importing Polars, which fixes its thread count then): each scans a file and runs Polars
    on ``threads`` threads, and OpenBLAS on one, so that the workers together use the cores
    once (each on every core only added switching: 64 ranks on 2 cores took 10% longer). No
    worker multiplies matrices, but importing NumPy starts OpenBLAS's thread per core, which
    spins: 0.1 CPU-s of each worker's start on the 2-core machine. Settings the user made are
    kept."""
    wanted = {
        THREADS_ENV: str(threads),
        _POLARS_THREADS_ENV: str(threads),
        _OPENBLAS_THREADS_ENV: "1",
    }
    added = [name for name in wanted if name not in os.environ]
    for name in added:
        os.environ[name] = wanted[name]
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


class _Rejected(Exception):  # noqa: N818 (a signal, not an error)
    """A chunk was declined: one scanner takes the whole file instead."""


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
        with open(path, "rb") as file:
            head = file.read(2)
            size = os.fstat(file.fileno()).st_size
    except OSError:
        return fast.scan_file(path, progress)  # which names the read error precisely
    gzipped = head == GZIP_MAGIC
    # gzip: the size inflated is unknown; a compressed trace is about 15x smaller
    expected = size * _GZIP_RATIO if gzipped else size
    if chunk_bytes is None:
        if expected < 2 * MIN_CHUNK_BYTES:
            return fast.scan_file(path, progress)
        chunk_bytes = expected // (count * _CHUNKS_PER_THREAD)
        chunk_bytes = min(MAX_CHUNK_BYTES, max(MIN_CHUNK_BYTES, chunk_bytes))
    pieces = _gzip_pieces(path, chunk_bytes, progress) if gzipped else None
    try:
        with ThreadPoolExecutor(count, thread_name_prefix="traceanalyze-scan") as pool:
            if pieces is None:
                return _scan_plain(path, size, chunk_bytes, count, pool, progress)
            return _scan_stream(pieces, count, pool)
    except _Rejected:
        return fast.scan_file(path, progress)
    except OSError:
        return fast.scan_file(path, progress)  # which names the read error precisely


# --- chunks of a plain file ---------------------------------------------------------------


@dataclass
class _Chunk:
    """A gzip stream's chunk: the views of the inflated pieces it spans, fed in order (a plain
    file's chunks are :class:`_Running`)."""

    index: int
    last: bool
    parts: list[memoryview]


def _scan_plain(
    path: Path,
    size: int,
    chunk_bytes: int,
    count: int,
    pool: ThreadPoolExecutor,
    progress: ByteProgress | None,
) -> Scanned:
    """A plain file, mapped read-only: the scanners read the page cache in place (no copy,
    no fresh buffers to fault in). Scanned pages are dropped a block at a time, so resident
    memory stays a few blocks however large the file. Only C reads the mapped pages (the
    scanners, and the searches for cuts), where a page past the end of a file truncated
    meanwhile (SIGBUS) declines the scan: the file is then read again, as one scanner reads
    it."""
    with open(path, "rb") as file, _mapped(file) as data:
        opening = _opening(file.read(4096))
        mapped = _Mapped(data, size, opening)
        plan = _Plan(mapped, chunk_marks(size, chunk_bytes, count), opening)
        workers = [pool.submit(plan.work) for _ in range(count)]
        try:
            for done in plan.finished(count):
                if progress:
                    progress(done, size)
        finally:
            plan.stop()
            wait(workers)  # the map must outlive every scan that reads it
        for worker in workers:
            worker.result()  # a chunk declined (_Rejected) or a read failed
        if progress:
            progress(size, size)
        return _merge([result for _, result in sorted(plan.results, key=lambda r: r[0])])


def _mapped(file: Any) -> mmap.mmap:
    """``file`` mapped read-only; a file emptied since its size was read declines (mmap
    refuses an empty file, and one scanner then says what the file is)."""
    try:
        return mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    except ValueError:
        raise _Rejected from None


def chunk_marks(size: int, chunk_bytes: int, count: int) -> list[int]:
    """Where chunks are cut, about (each cut moves to the next event boundary): from 0 to
    ``size``, every ``chunk_bytes``, the last chunk taking what is left (at least a chunk)."""
    full = max(1, size // chunk_bytes)
    return [k * chunk_bytes for k in range(full)] + [size]


class _Running:
    """A chunk of a plain file being scanned: its end, which another thread may move back
    (see :meth:`_Plan.steal`), and how far its scanner has claimed."""

    def __init__(self, start: int, end: int, first: bool, last: bool) -> None:
        self.lock = threading.Lock()
        self.start = start
        self.end = end
        self.first = first  # the start of the document
        self.last = last  # to the end of the document
        self.claimed = start

    def left(self) -> int:
        with self.lock:
            return self.end - self.claimed


class _Plan:
    """The chunks of a plain file, handed to the threads in file order, then split by
    stealing (see the module doc); their results by where each starts."""

    def __init__(self, mapped: _Mapped, marks: list[int], opening: bytes) -> None:
        self.mapped = mapped
        self.marks = marks
        self.opening = opening
        self.lock = threading.Lock()
        self.next = 0  # the next chunk of marks to start
        self.running: list[_Running] = []
        self.results: list[tuple[int, _Result]] = []
        self.done = threading.Condition(self.lock)
        self.scanned = 0  # bytes of finished chunks
        self.idle = 0  # threads that found no more work
        self.stopped = False

    def work(self) -> None:
        """One thread's loop: chunks until none is left to start or to split."""
        try:
            while not self.stopped and (running := self.take()) is not None:
                result = _scan_running(running, self)
                with self.lock:
                    self.running.remove(running)
                    self.results.append((running.start, result))
                    self.scanned += running.end - running.start
                    self.done.notify_all()
        except BaseException:
            self.stopped = True  # the file is scanned again whole: the others stop
            raise
        finally:
            with self.lock:
                self.idle += 1
                self.done.notify_all()

    def finished(self, threads: int) -> Iterator[int]:
        """Bytes of the chunks finished so far, each time one finishes, until ``threads``
        threads have no more work."""
        reported = -1
        while True:
            with self.lock:
                while self.scanned == reported and self.idle < threads:
                    self.done.wait()
                scanned, idle = self.scanned, self.idle
            if scanned != reported:
                reported = scanned
                yield scanned
            if idle >= threads:
                return

    def stop(self) -> None:
        self.stopped = True

    def take(self) -> _Running | None:
        with self.lock:
            while self.next < len(self.marks) - 1:
                running = _plain_chunk(self.mapped, self.next, self.marks)
                self.next += 1
                if running is not None:
                    self.running.append(running)
                    return running
            return self.steal()

    def steal(self) -> _Running | None:
        """The second half of what is left of the largest running chunk, as a chunk of its
        own (None when every chunk is nearly done). Called with the plan's lock held."""
        if not self.running:
            return None
        victim = max(self.running, key=_Running.left)
        with victim.lock:
            claimed, end = victim.claimed, victim.end
        if end - claimed < MIN_STEAL_BYTES:
            return None
        half = max(claimed + (end - claimed) // 2, self.mapped.events)
        found = _boundary(self.mapped.data, half, end)
        if found is None:
            return None
        close, start = found
        cut = close + 1
        with victim.lock:
            if victim.claimed > close or victim.end != end:
                return None  # its scanner got there first
            stolen = _Running(start, end, first=False, last=victim.last)
            victim.end, victim.last = cut, False
        self.running.append(stolen)
        return stolen


def _scan_running(running: _Running, plan: _Plan) -> _Result:
    """A chunk of a plain file scanned a block at a time (see the module doc): as a small
    document of its own, opened as where it started says, closed as it ends (its end may move
    back while it is scanned). Scanned pages are dropped as it goes."""
    scanner = _scan.Scanner(fast.KINDS)
    bare = plan.opening == b"["
    # an object document's first chunk, or its last one after the first: closed by "]}"
    closes_object = not bare and (running.first or running.last)
    if not running.first:
        _feed_all(scanner, _OBJECT_OPEN if closes_object else b"[")
    mapped, pos, block = plan.mapped, running.start, BLOCK_BYTES
    dropped = pos  # the pages before this are dropped
    with memoryview(mapped.data) as view:
        try:
            while True:
                if plan.stopped:
                    raise _Rejected
                with running.lock:
                    end, last = running.end, running.last
                    stop = min(end, pos + block)
                    running.claimed = stop
                final = last and stop == end
                with view[pos:stop] as fed:  # released even if a traceback holds it
                    used = scanner.feed(fed, final)
                pos += used
                if final:
                    break
                if pos == end:  # between two events: the chunk is whole
                    scanner.feed(b"]}" if closes_object else b"]", True)
                    break
                if stop == end:
                    raise _Rejected  # the chunk does not end between two events
                # an item longer than the block: a longer one
                block = 2 * block if used == 0 else BLOCK_BYTES
                if pos - dropped >= BLOCK_BYTES:  # whole pages only: the one at pos is read on
                    dropped = mapped.drop(dropped, pos // mapped.page * mapped.page)
        except _scan.Unsupported:
            raise _Rejected from None
    mapped.drop(dropped, running.end)
    return _result_of(scanner)


def _opening(head: bytes) -> bytes:
    head = head.lstrip(b" \t\r\n")
    if head[:1] not in (b"{", b"["):
        raise _Rejected  # not the usual start: the single scanner says what it is
    return head[:1]


def _events_key(data: mmap.mmap) -> int:
    """Where the ``traceEvents`` key is (0 if not found): no cut before it (the top-level
    metadata, such as a long ``distributedInfo``, holds lists of objects too)."""
    try:
        at: int = _scan.find_bytes(data, b'"traceEvents"', 0)
    except _scan.Unsupported:
        raise _Rejected from None
    return max(0, at)


def _boundary(data: mmap.mmap, start: int, end: int = -1) -> tuple[int, int] | None:
    """The positions of the ``}`` and the ``{`` of the first candidate boundary in
    ``data[start:end]`` (None when there is none). The mapped file's pages are read in C, where
    a file truncated meanwhile declines the scan instead of killing the process (SIGBUS)."""
    try:
        found: tuple[int, int] | None = _scan.find_boundary(data, start, end)
    except _scan.Unsupported:
        raise _Rejected from None
    return found


class _Mapped:
    """The mapped file, and dropping a scanned chunk's pages from this process."""

    def __init__(self, data: mmap.mmap, size: int, opening: bytes) -> None:
        self.data = data
        self.size = size
        self.page = mmap.PAGESIZE
        # A bare array has no key: looking for one read every page of the file (a 175 MB
        # array: 167 MB more mapped at once). An object's key is near its start, else the
        # pages the search read are dropped again.
        self.events = 0 if opening == b"[" else _events_key(data)
        if self.events > BLOCK_BYTES or (opening != b"[" and not self.events):
            self.drop(0, self.events or size)

    def drop(self, start: int, end: int) -> int:
        """Drop the pages that hold bytes ``start`` to ``end`` from this process (a page
        shared with a neighbour is read again from the page cache if it still needs it);
        returns ``end``."""
        if hasattr(mmap, "MADV_DONTNEED") and end > start:
            first = start // self.page * self.page
            self.data.madvise(mmap.MADV_DONTNEED, first, min(self.size, end) - first)
        return end


def _plain_chunk(mapped: _Mapped, index: int, marks: list[int]) -> _Running | None:
    """Chunk ``index`` of the file, cut near ``marks[index]`` and ``marks[index + 1]`` (None
    when an earlier chunk reaches past its start)."""
    low, high = marks[index], marks[index + 1]
    if index == 0:
        start = 0
    else:
        first = _boundary(mapped.data, max(low, mapped.events))
        if first is None or first[0] >= high:
            return None  # no boundary in this chunk's range: the chunk before takes it all
        start = first[1]
    following = _boundary(mapped.data, max(high, mapped.events)) if high < mapped.size else None
    if following is None:  # the last chunk: to the end of the file
        return _Running(start, mapped.size, first=index == 0, last=True)
    return _Running(start, following[0] + 1, first=index == 0, last=False)


# --- chunks of a gzip stream ------------------------------------------------------------------


def _gzip_pieces(path: Path, chunk_bytes: int, progress: ByteProgress | None) -> Iterator[_Chunk]:
    """Chunks of the inflated stream, cut as in the module doc (inflated in this thread while
    the pool scans the chunks before). Inflated pieces are never joined: a chunk is the list
    of views of the pieces it spans, fed in order (only an event cut by a piece's end is
    joined, by :func:`fast._feed_pieces`). Joining them cost a copy of every byte, and the
    fresh pages of each joined chunk, about as much CPU time as inflating."""
    earlier: list[memoryview] = []  # the chunk's parts in the pieces before this one
    size = 0  # bytes in earlier
    index = 0
    keyed = False  # the traceEvents key was seen: no cut before it
    seam = b""  # the end of the piece before (the key may straddle two pieces)
    for piece in chunks(path, progress):
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
    yield _Chunk(index, last=True, parts=earlier)


_EVENTS_KEY = b'"traceEvents"'


def _events_key_in(seam: bytes, piece: bytes) -> tuple[bool, int]:
    """Whether the traceEvents key ends in ``piece`` (``seam``: the end of the piece before),
    and from where in ``piece`` a cut may be looked for."""
    if _EVENTS_KEY in seam + piece[: len(_EVENTS_KEY)]:
        return True, 0
    found = piece.find(_EVENTS_KEY)
    return found >= 0, max(found, 0)


def _scan_stream(pieces: Iterator[_Chunk], count: int, pool: ThreadPoolExecutor) -> Scanned:
    first = next(pieces)
    head = bytes(first.parts[0][:4096]) if first.parts else b""
    opening = _opening(head)

    def jobs() -> Iterator[Callable[[], _Result]]:
        for chunk in _chain(first, pieces):
            yield partial(_scan_chunk, chunk, opening)

    return _merge(_in_order(pool, count, jobs()))


def _chain(first: _Chunk, rest: Iterator[_Chunk]) -> Iterator[_Chunk]:
    yield first
    yield from rest


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
    pool: ThreadPoolExecutor, count: int, jobs: Iterator[Callable[[], _Result]]
) -> list[_Result]:
    """Run ``jobs`` on the pool, at most two per thread at a time (memory stays bounded), and
    return their results in order."""
    results: list[_Result] = []
    running: deque[Future[_Result]] = deque()
    try:
        for job in jobs:
            running.append(pool.submit(job))
            if len(running) >= 2 * count:
                results.append(running.popleft().result())
        while running:
            results.append(running.popleft().result())
    finally:
        for future in running:
            future.cancel()
        wait(running)  # the chunks' buffers must outlive every scan that reads them
    return results


def _merge(results: list[_Result]) -> Scanned:
    """The chunks' pieces in file order, as one scanner would have given them."""
    header = b",".join(r.header for r in results if r.header)
    # has_events from the chunks (extend ors them): a document without a traceEvents list is
    # one chunk (no cut before the key), whose scanner saw none
    merged = Scanned(fast._header(header))
    for result in results:
        merged.extend(result.scanned)
    return merged
