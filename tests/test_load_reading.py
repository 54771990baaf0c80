"""How bytes reach the scanner: inflated gzip pieces fed in place (an event cut by a piece's end
completed from the next), a file's head read in small doubling pieces, and gzip inflated by
zlib-ng where installed (the same trace and the same errors as the standard library's zlib)."""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from tests.micro import write_trace
from tests.test_load_parallel import _steps
from tests.test_load_paths import assert_same_frames
from traceanalyze.errors import NotATraceError, TraceFormatError
from traceanalyze.load import chunks as chunks_module
from traceanalyze.load import fast, source
from traceanalyze.load.inputs import resolve
from traceanalyze.load.parse import parse_file

native_only = pytest.mark.skipif(not fast.AVAILABLE, reason="the C scanner is not built")


def _pieces(data: bytes, sizes: Iterator[int]) -> Iterator[bytes]:
    at = 0
    while at < len(data):
        size = next(sizes)
        yield data[at : at + size]
        at += size


def _result(pieces: Iterator[bytes]) -> object:
    scanner = fast._scan.Scanner(fast.KINDS)
    scanner.feed(fast._feed_pieces(scanner, pieces), True)
    return _plain(scanner.result())


def _plain(value: object) -> object:
    """A scanner's result with its column buffers as bytes (comparable)."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if type(value).__name__ == "Column":
        return bytes(memoryview(value))  # type: ignore[arg-type]
    if type(value).__name__ == "Exported":  # Arrow columns: their values
        return pl.Series(value).to_list()
    return value


@native_only
@pytest.mark.parametrize("seed", range(6))
def test_pieces_of_any_size_scan_as_one_buffer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, seed: int
) -> None:
    # Pieces from 1 byte to several events, joins of 16 bytes: events cut anywhere, tails
    # longer than the next piece, items longer than a whole piece.
    path = write_trace(tmp_path, _steps(30), "t.json", traceName="after the events")
    data = path.read_bytes()
    monkeypatch.setattr(fast, "_JOIN_BYTES", 16)
    rng = random.Random(seed)
    whole = _result(iter([data]))
    sizes = iter(lambda: rng.choice([1, 2, 7, 16, 50, 300, 2000]), None)
    assert _result(_pieces(data, sizes)) == whole


@native_only
def test_a_gzip_trace_loads_as_its_raw_twin_in_small_pieces(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    raw = write_trace(tmp_path, _steps(40), "t.json")
    packed = tmp_path / "t.json.gz"
    packed.write_bytes(gzip.compress(raw.read_bytes()))
    monkeypatch.setattr(source, "CHUNK_BYTES", 333)  # inflated pieces cut inside events
    monkeypatch.setattr(fast, "_JOIN_BYTES", 40)
    assert_same_frames(parse_file(packed, threads=1), parse_file(raw, threads=1))


def _read_sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the pieces `chunks` is asked for, as they are asked."""
    asked: list[int] = []
    real = chunks_module.chunks

    def recorded(path: Path, progress: object = None, chunk_bytes: int = 0) -> Iterator[bytes]:
        asked.append(chunk_bytes)
        return real(path, chunk_bytes=chunk_bytes)  # type: ignore[arg-type]

    monkeypatch.setattr(chunks_module, "chunks", recorded)
    return asked


def test_a_head_is_read_in_small_pieces(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A folder is resolved from its files' heads: 64 kB of each (it was 8 MB inflated).
    asked = _read_sizes(monkeypatch)
    ranks = [write_trace(tmp_path, _steps(2000), f"r{r}.json.gz", rank=r) for r in range(2)]
    assert resolve(tmp_path).files == tuple(ranks)
    assert asked == [chunks_module._LOOK_BYTES] * 2


def test_a_long_head_and_leading_white_space_are_read_on(tmp_path: Path) -> None:
    # A head of ~300 kB (a long distributedInfo) after ~100 kB of white space: more than the
    # first look, found by reading on.
    info = {"rank": 3, "hosts": ["h" * 60] * 5000}
    document = {"distributedInfo": info, "traceEvents": _steps(3)}
    path = tmp_path / "long_head.json.gz"
    path.write_bytes(gzip.compress(b" " * 100_000 + json.dumps(document).encode()))
    head = chunks_module.first_look(path)
    assert head is not None and len(head) > 300_000
    assert resolve(tmp_path).ranks == (3,)
    assert parse_file(path).meta[0].rank == 3


def test_a_blank_file_is_still_told_apart(tmp_path: Path) -> None:
    path = tmp_path / "blank.json"
    path.write_bytes(b" \n" * 50_000)
    with pytest.raises(NotATraceError, match="is empty or blank"):
        chunks_module.first_look(path)


def _inflaters() -> list[str]:
    try:
        import zlib_ng  # noqa: F401
    except ImportError:
        return ["zlib"]
    return ["zlib", "zlib-ng"]


def _use(inflate: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inflate with ``inflate`` ("zlib" or "zlib-ng") in this test."""
    if inflate == "zlib":
        monkeypatch.setenv(source.INFLATE_ENV, "zlib")
    else:
        monkeypatch.delenv(source.INFLATE_ENV, raising=False)


@pytest.mark.parametrize("inflate", _inflaters())
def test_inflaters_give_the_same_trace_and_errors(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, inflate: str
) -> None:
    _use(inflate, monkeypatch)
    assert source.inflater().__name__.endswith("zlib_ng" if inflate == "zlib-ng" else "zlib")
    raw = write_trace(tmp_path, _steps(40), "t.json")
    packed = tmp_path / "t.json.gz"
    packed.write_bytes(gzip.compress(raw.read_bytes()))
    assert_same_frames(parse_file(packed), parse_file(raw))
    corrupt = tmp_path / "corrupt.json.gz"
    corrupt.write_bytes(packed.read_bytes()[:40] + b"\xff" * 64 + packed.read_bytes()[104:])
    with pytest.raises(TraceFormatError, match="is corrupt gzip data"):
        parse_file(corrupt)
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(packed.read_bytes()[:-20])
    with pytest.raises(TraceFormatError, match="the gzip stream is truncated"):
        parse_file(cut)


def _members(data: bytes, size: int) -> bytes:
    """``data`` as a gzip file of several members of ``size`` inflated bytes each (what
    `cat a.gz b.gz` or a writer that flushes by member makes)."""
    return b"".join(gzip.compress(data[i : i + size], 1) for i in range(0, len(data), size))


@pytest.mark.parametrize("inflate", _inflaters())
def test_members_longer_than_a_chunk_inflate_once_each(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, inflate: str
) -> None:
    # Members of 9 MiB, more than a chunk (8 MiB): a member's end is reached by a call that
    # began with input left over by the output limit; those bytes were inflated twice.
    _use(inflate, monkeypatch)
    # 20 MiB of generated event-like text, compressible like a trace (~20x): a 1 MiB read
    # of compressed input then fills a chunk's output limit and leaves input unconsumed
    words = [f'{{"ph": "X", "name": "op{i}", "ts": {i}}}, '.encode() for i in range(8)]
    text = b"".join(random.Random(7).choices(words, k=20 * 2**20 // 40))
    path = tmp_path / "members.gz"
    path.write_bytes(_members(text, 9 * 2**20))
    got = bytearray()
    for chunk in source.chunks(path):
        got += chunk
        assert len(got) <= len(text)  # a member inflated twice: fail before memory runs out
    assert got == text


def test_a_multi_member_trace_loads_as_its_raw_twin(tmp_path: Path) -> None:
    raw = tmp_path / "t.json"
    events = json.dumps(_steps(40)[1:])
    # ~20 MiB of white space between events: members end inside the list
    raw.write_bytes(
        f'{{"traceEvents": [{json.dumps(_steps(1)[0])},'.encode()
        + b" " * (20 * 2**20)
        + events.encode()[1:]
        + b"}"
    )
    packed = tmp_path / "t.json.gz"
    packed.write_bytes(_members(raw.read_bytes(), 9 * 2**20))
    assert_same_frames(parse_file(packed), parse_file(raw))
    assert_same_frames(parse_file(packed, native=False), parse_file(raw))


def test_two_whole_traces_in_one_gzip_file_are_not_valid_json(tmp_path: Path) -> None:
    # `cat a.json.gz a.json.gz`: valid gzip of two documents, refused as JSON, not as gzip
    one = gzip.compress(write_trace(tmp_path, _steps(3), "t.json").read_bytes())
    path = tmp_path / "twice.json.gz"
    path.write_bytes(one + one)
    with pytest.raises(TraceFormatError, match="is not valid JSON"):
        parse_file(path)
    with pytest.raises(TraceFormatError, match="is not valid JSON"):
        parse_file(path, native=False)


@native_only
def test_the_columns_are_handed_over_once(tmp_path: Path) -> None:
    # result() moves the columns' memory into buffers it owns (no copy): it is taken once,
    # the scanner takes no more bytes, and the columns outlive the scanner.
    path = write_trace(tmp_path, _steps(5), "t.json")
    scanner = fast._scan.Scanner(fast.KINDS)
    scanner.feed(path.read_bytes(), True)
    result = scanner.result()
    with pytest.raises(RuntimeError, match="already taken"):
        scanner.result()
    with pytest.raises(RuntimeError, match="already taken"):
        scanner.feed(b"[]", True)
    del scanner
    tables = [pl.DataFrame(part["table"]) for part in result["parts"]]
    assert sum(table["ts_ns"].len() for table in tables) == 20  # 20 intervals
    with pytest.raises(RuntimeError, match="already handed over"):
        pl.DataFrame(result["parts"][0]["table"])


def test_a_long_object_without_trace_events_is_still_told_apart(tmp_path: Path) -> None:
    # The head is looked at as far as before (24 MB): a JSON object whose top level runs past
    # 16 MB without traceEvents is skipped in a folder, not taken for a trace.
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"meta": "m" * 20_000_000, "other": 1}))
    with pytest.raises(NotATraceError, match="no traceEvents list"):
        chunks_module.first_look(path)


def test_the_scanner_keeps_its_own_copy_of_the_category_table() -> None:
    # The table is copied when the scanner is made (a scan never takes the GIL to look a
    # category up): later changes to the dict do not reach it; a non-ASCII category matches
    # its UTF-8 bytes; a category not in the table is "other" (not kept as an operator).
    kinds = {"cpu_op": fast.KINDS["cpu_op"], "opé": fast.KINDS["cpu_op"]}
    scanner = fast._scan.Scanner(kinds)
    kinds.clear()
    events = [
        {"ph": "X", "cat": cat, "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 2}
        for cat in ("cpu_op", "opé", "unknown")
    ]
    scanner.feed(json.dumps({"traceEvents": events}, ensure_ascii=False).encode(), True)
    result = scanner.result()
    kept = {result["cats"][part["cat"]] for part in result["parts"]}
    assert kept == {"cpu_op", "opé"}


def test_a_category_table_of_the_wrong_types_is_refused() -> None:
    with pytest.raises(TypeError):
        fast._scan.Scanner({"cpu_op": "op"})


def test_a_scanner_is_initialised_once() -> None:
    # a second __init__ would mix two category tables (a skeptical pass found it)
    scanner = fast._scan.Scanner(fast.KINDS)
    with pytest.raises(RuntimeError, match="initialised once"):
        scanner.__init__({"kernel": fast.KINDS["kernel"]})  # type: ignore[misc]
