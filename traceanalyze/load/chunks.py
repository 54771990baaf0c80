"""The msgspec path: a trace document decoded a bounded chunk of events at a time.

The head of the document (everything up to the ``[`` of ``traceEvents``) is found with a small
tokenizer. Then, while much of the file remains, the next ~8 MB of events is cut at an event
boundary and decoded alone as a JSON array. JSON lexing from a known boundary is
deterministic, so a cut that is not a real boundary (inside a string, say) can only give a
syntax error, never a wrong decode: such a cut is retried at the next candidate. What remains
at the end (the last events and the rest of the top-level object) is decoded together with the
head as one document, which also yields the metadata. Errors name positions in the file.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

import msgspec

from traceanalyze.errors import (
    EmptyTraceError,
    NotATraceError,
    TraceAnalyzeError,
    TraceFormatError,
)
from traceanalyze.load import source
from traceanalyze.load.decode import (
    FIX_NOT_A_TRACE,
    Event,
    TraceDocument,
    decode_events,
    format_error,
)
from traceanalyze.load.extract import Chunk, extract, pair_spans
from traceanalyze.load.scanned import Scanned
from traceanalyze.load.source import (
    CHUNK_BYTES,
    ByteProgress,
    StreamCut,
    UntilCut,
    chunks,
    item_too_long,
)

_TOKEN = re.compile(rb'\s*(?:("(?:[^"\\]|\\.)*")|([{}\[\]:,])|([^\s{}\[\]:,"]+))', re.S)
_BOUNDARY = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")
_BYTE = re.compile(r"\(byte (\d+)\)")
_INDEX = re.compile(r"\$(\.traceEvents)?\[(\d+)\]")
# Bytes first read (and inflated) to look at a file's head, and the most read for it.
_LOOK_BYTES = 64 * 1024
_HEAD_LIMIT_BYTES = 3 * CHUNK_BYTES
# Cuts tried per chunk before the rest of the file is decoded in one piece.
_CUT_TRIES = 3


# What the whole rest of a file is read as when asked for (then bounded by held_limit).
_ALL = 1 << 62


def held_limit() -> int:
    """The most undecoded bytes this path holds at once: the C scanner's item limit plus the
    chunks read ahead, so that both paths take the same items and refuse the same ones, and
    memory stays bounded whatever a small gzip file inflates to (a run of white space or one
    long string that no cut divides)."""
    return source.MAX_ITEM_BYTES + 3 * CHUNK_BYTES


class _Buffer:
    """The not yet decoded bytes of the file, filled on demand (at most :func:`held_limit`
    of them: more is refused with the C scanner's error for an item too long). A gzip stream
    cut short ends the data where it was cut (``cut``): see :func:`_cut_named`."""

    def __init__(self, pieces: Iterator[bytes], path: Path) -> None:
        self.until_cut = UntilCut(pieces)
        self.source = iter(self.until_cut)
        self.path = path
        self.data = bytearray()
        self.offset = 0  # file position of data[0]
        self.eof = False

    def fill(self, size: int) -> None:
        limit = held_limit()
        while len(self.data) < size and not self.eof:
            piece = next(self.source, None)
            if piece is None:
                self.eof = True
            elif len(self.data) + len(piece) > limit:
                self.data.clear()
                raise item_too_long(self.path)
            else:
                self.data += piece

    def drop(self, count: int) -> None:
        del self.data[:count]
        self.offset += count

    @property
    def cut(self) -> StreamCut | None:
        return self.until_cut.cut


@contextlib.contextmanager
def _cut_named(buffer: _Buffer) -> Iterator[None]:
    """Any error raised on a gzip stream found cut is the cut itself (what was read is then no
    whole trace, and the cut is its cause: the error today's message gives); a stream cut
    after a whole document loads, the cut noted (Scanned.gzip_cut)."""
    try:
        yield
    except TraceAnalyzeError:
        if buffer.cut is not None:
            raise buffer.cut.error() from None
        raise


def scan_document(path: Path, progress: ByteProgress | None = None) -> Scanned:
    """Decode ``path`` with msgspec into column pieces; raises the precise format errors."""
    buffer = _Buffer(chunks(path, progress), path)
    with _cut_named(buffer):
        buffer.fill(CHUNK_BYTES)
        while _blank(buffer.data) and not buffer.eof:
            # white space before the document, dropped as it is read (not held: a small gzip
            # file may inflate to gigabytes of it)
            buffer.drop(len(buffer.data))
            buffer.fill(CHUNK_BYTES)
        if _blank(buffer.data):
            raise EmptyTraceError(
                "the file is empty", path, "Re-export the trace from the profiler."
            )
        scanned = _scan(buffer, path)
    scanned.gzip_cut = buffer.until_cut.noted()
    return scanned


def _blank(data: bytearray) -> bool:
    """Whether ``data`` is JSON white space only."""
    if bytes(data[:4096]).strip():
        return False  # the usual start, told from its first bytes
    return not bytes(data).strip()  # (a bytearray's strip takes twice as long)


def first_look(path: Path) -> bytes | None:
    """Raise NotATraceError when the start of ``path`` shows it is not a Chrome trace (not
    JSON, or a JSON object without traceEvents); reads at most the first chunk or two.

    Returns the head of the document, everything up to and including the ``[`` that opens
    ``traceEvents`` (None when that was not reached, or the document is a bare array)."""
    # Small pieces, doubled while more is needed: a head is a few kB, and inflating or
    # reading a whole chunk per file was most of the time of resolving a folder of ranks.
    buffer = _Buffer(chunks(path, chunk_bytes=_LOOK_BYTES), path)
    with _cut_named(buffer):
        return _look(buffer, path)


def _look(buffer: _Buffer, path: Path) -> bytes | None:
    buffer.fill(_LOOK_BYTES)
    while not buffer.data.strip() and not buffer.eof and len(buffer.data) < CHUNK_BYTES:
        buffer.fill(2 * len(buffer.data))  # leading white space: look further, as far as before
    if not buffer.data.strip():
        raise NotATraceError("is empty or blank", path, FIX_NOT_A_TRACE)
    if bytes(buffer.data.lstrip()[:1]) not in (b"{", b"["):
        raise _not_a_trace(buffer, path)
    while (found := _find_events(_whole(buffer))) == "more":
        if buffer.eof or len(buffer.data) >= _HEAD_LIMIT_BYTES:
            return None  # a long head, or a cut-off one: loading tells which
        buffer.fill(min(2 * len(buffer.data), _HEAD_LIMIT_BYTES))
    if found is None:
        raise NotATraceError(
            "is JSON but not a Chrome trace: it has no traceEvents list", path, FIX_NOT_A_TRACE
        )
    if not isinstance(found, tuple) or found[1]:
        return None  # a bare array has no head
    return bytes(buffer.data[: found[0]])


def _whole(buffer: _Buffer) -> bytes:
    """The data read; at the end of the file with a space after it, so that the tokenizer
    knows its last token is whole (a small JSON object without traceEvents is then told
    from a trace by its head alone)."""
    return bytes(buffer.data) + (b" " if buffer.eof else b"")


def _scan(buffer: _Buffer, path: Path) -> Scanned:
    if bytes(buffer.data.lstrip()[:1]) not in (b"{", b"["):
        raise _not_a_trace(buffer, path)
    start = _events_start(buffer)
    if start is None:  # not the usual layout: decode it whole, which names any problem
        buffer.fill(_ALL)
        return _tail(buffer, path, b"", 0, bare=False, scanned=Scanned(TraceDocument()))
    events_at, bare = start
    head = bytes(buffer.data[:events_at])
    buffer.drop(events_at)
    scanned = Scanned(TraceDocument())
    done = 0
    while True:
        buffer.fill(3 * CHUNK_BYTES)
        if buffer.eof and len(buffer.data) <= 2 * CHUNK_BYTES:
            break
        decoded = _next_chunk(buffer, path, done, bare)
        if decoded is None:
            break
        events, consumed = decoded
        extract(events, scanned, Chunk(path, done, bare))
        done += len(events)
        scanned.events += len(events)
        del events
        buffer.drop(consumed)
    return _tail(buffer, path, head, done, bare, scanned)


def _not_a_trace(buffer: _Buffer, path: Path) -> TraceFormatError:
    """The error for a document that is no JSON object or array (decoding what was read
    gives msgspec's description of its start)."""
    try:
        decode_events(bytes(buffer.data), document=True, bare=False)
    except msgspec.MsgspecError as exc:
        if buffer.eof or "truncated" not in str(exc):
            return format_error(exc, path, not_a_trace=True)
    return NotATraceError(
        "is not a Chrome trace: the top level is not a JSON object or array", path, FIX_NOT_A_TRACE
    )


def _next_chunk(
    buffer: _Buffer, path: Path, done: int, bare: bool
) -> tuple[list[Event], int] | None:
    """The next events up to a boundary past CHUNK_BYTES, and the bytes they span (up to the
    next event); None when no cut worked (the rest is then decoded whole)."""
    search_from = CHUNK_BYTES
    for _ in range(_CUT_TRIES):
        match = _BOUNDARY.search(buffer.data, search_from)
        if match is None:
            return None
        cut = match.start() + 1
        try:
            array = b"[" + buffer.data[:cut] + b"]"
            events = decode_events(array, document=False, bare=True).traceEvents or []
        except msgspec.ValidationError as exc:
            # A real type error inside this chunk: the first problem of the file.
            reason = _shifted(str(exc), done, bare, buffer.offset - 1)
            raise format_error(exc, path, reason) from None
        except msgspec.DecodeError:
            search_from = cut
            continue
        return list(events), match.end() - 1
    return None


def _tail(
    buffer: _Buffer, path: Path, head: bytes, done: int, bare: bool, scanned: Scanned
) -> Scanned:
    """Decode the head plus the rest of the file as one document."""
    buffer.fill(_ALL)
    document_bytes = head + bytes(buffer.data)
    buffer.data.clear()
    try:
        document = decode_events(document_bytes, document=True, bare=bare)
    except msgspec.MsgspecError as exc:
        reason = _shifted(str(exc), done, bare, buffer.offset - len(head), len(head))
        raise format_error(exc, path, reason) from None
    del document_bytes
    events = document.traceEvents
    document.traceEvents = None
    scanned.header = document
    if events is not None:
        scanned.has_events = True
        extract(events, scanned, Chunk(path, done, bare))
        scanned.events += len(events)
    elif done:
        scanned.has_events = True
    pair_spans(scanned, Chunk(path, done, bare))
    return scanned


def _shifted(reason: str, done: int, bare: bool, shift: int, from_byte: int = 0) -> str:
    """msgspec's ``reason`` with event indexes and byte offsets of the file rather than of the
    piece decoded (``shift`` is added to bytes at or after ``from_byte``)."""

    def index(match: re.Match[str]) -> str:
        where = "$" if bare else "$.traceEvents"
        return f"{where}[{int(match.group(2)) + done}]"

    def byte(match: re.Match[str]) -> str:
        at = int(match.group(1))
        return f"(byte {at + shift if at >= from_byte else at})"

    return _INDEX.sub(index, _BYTE.sub(byte, reason))


def _events_start(buffer: _Buffer) -> tuple[int, bool] | None:
    """Where the events of the document begin (just after their ``[``), and whether the
    document is a bare array; None when the head is not of the usual form."""
    while True:
        found = _find_events(bytes(buffer.data))
        if found != "more" or buffer.eof:
            return None if found == "more" else found  # type: ignore[return-value]
        buffer.fill(2 * len(buffer.data) + CHUNK_BYTES)


class _More(Exception):  # noqa: N818 (a signal, not an error)
    """The data read so far ends inside the head."""


def _find_events(data: bytes) -> tuple[int, bool] | str | None:
    tokens = _TOKEN.finditer(data)
    first = next(tokens, None)
    if first is None:
        return "more"
    if first.group(2) == b"[":
        return first.end(), True
    if first.group(2) != b"{":
        return None
    try:
        while True:
            key = _next(tokens, data)
            if key.group(1) is None or _next(tokens, data).group(2) != b":":
                return None  # the end of the object (no traceEvents) or not JSON
            value = _next(tokens, data)
            if key.group(1) == b'"traceEvents"' and value.group(2) == b"[":
                return value.end(), False
            _skip(value, tokens, data)
            if _next(tokens, data).group(2) != b",":
                return None
    except _More:
        return "more"


def _next(tokens: Iterator[re.Match[bytes]], data: bytes) -> re.Match[bytes]:
    token = next(tokens, None)
    if token is None or token.end() >= len(data):  # a token may go on past the data read
        raise _More
    return token


def _skip(first: re.Match[bytes], tokens: Iterator[re.Match[bytes]], data: bytes) -> None:
    """Skip the rest of the value that starts with ``first``."""
    depth = 1 if first.group(2) in (b"{", b"[") else 0
    while depth:
        punct = _next(tokens, data).group(2)
        if punct in (b"{", b"["):
            depth += 1
        elif punct in (b"}", b"]"):
            depth -= 1
