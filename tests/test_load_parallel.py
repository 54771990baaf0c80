"""The C scanner on several threads (traceanalyze.load.parallel) gives the Trace one scanner
gives: chunks cut anywhere, raw or gzip, object or bare array, and cuts that fall inside a
string are caught (the file is then scanned whole)."""

from __future__ import annotations

import gzip
import itertools
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.conftest import PUBLIC_TRACES, SHARED
from tests.micro import annotation, call, kernel, op, write_trace
from tests.test_load_paths import SAMPLES, assert_same
from traceanalyze.cli import main
from traceanalyze.errors import TraceAnalyzeError
from traceanalyze.load import fast, parallel
from traceanalyze.load.parse import parse_file

CORPUS = PUBLIC_TRACES.parent / "corpus"
BENCH_TRACE = SHARED / "bench" / "h200_train_175mb.json.gz"
REAL = [
    *SAMPLES,
    *(sorted(PUBLIC_TRACES.glob("*.json*")) if PUBLIC_TRACES.is_dir() else []),
    *(sorted(CORPUS.glob("*.json*")) if CORPUS.is_dir() else []),
]
pytestmark = pytest.mark.skipif(not fast.AVAILABLE, reason="the C scanner is not built")


class Chunked:
    """Forces chunks of ``size`` bytes and records how each parallel scan ended."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, size: int) -> None:
        self.merged = 0
        self.whole = 0
        monkeypatch.setattr(parallel, "MIN_CHUNK_BYTES", size)
        monkeypatch.setattr(parallel, "MAX_CHUNK_BYTES", size)
        merge, single = parallel._merge, parallel.fast.scan_file

        def counted_merge(results: list[Any]) -> Any:
            self.merged += 1
            return merge(results)

        def counted_single(*args: Any) -> Any:
            self.whole += 1
            return single(*args)

        monkeypatch.setattr(parallel, "_merge", counted_merge)
        monkeypatch.setattr(parallel.fast, "scan_file", counted_single)


def _steps(count: int, name: str = "aten::mm") -> list[dict[str, object]]:
    events: list[dict[str, object]] = []
    for step in range(count):
        t = step * 200
        events += [
            annotation(f"ProfilerStep#{step}", t, 100),
            op(name, t + 10, 50),
            call("cudaLaunchKernel", t + 20, 5, step + 1),
            kernel("gemm", t + 30, 10, step + 1, grid=[4, 2, 1], block=[128, 1, 1]),
        ]
    return events


@pytest.mark.parametrize("path", REAL, ids=[p.name for p in REAL])
def test_chunked_threads_agree_with_one_scanner_on_real_traces(
    monkeypatch: pytest.MonkeyPatch, path: Path
) -> None:
    try:
        one = parse_file(path, threads=1)
    except TraceAnalyzeError as exc:  # the same error, whole or in chunks
        Chunked(monkeypatch, 4096)
        with pytest.raises(type(exc), match=re.escape(str(exc))):
            parse_file(path, threads=3)
        return
    try:
        fast.scan_file(path)
        taken = True
    except fast.Declined:  # B/E phases, Ascend tasks...: the msgspec path's
        taken = False
    inflated = path.stat().st_size * (parallel._GZIP_RATIO if path.suffix == ".gz" else 1)
    chunked = Chunked(monkeypatch, max(512, inflated // 8))  # about 8 chunks
    assert_same(parse_file(path, threads=3), one)
    # a trace one scanner takes is taken in chunks, never scanned again whole
    assert (chunked.merged, chunked.whole) == ((1, 0) if taken else (0, 1))


def test_the_bench_trace_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    if not BENCH_TRACE.is_file():
        pytest.skip(f"no bench trace at {BENCH_TRACE}")
    one = parse_file(BENCH_TRACE, threads=1)
    chunked = Chunked(monkeypatch, 1 << 20)
    assert_same(parse_file(BENCH_TRACE, threads=2), one)
    assert_same(parse_file(BENCH_TRACE, threads=2, native=False), one)
    assert (chunked.merged, chunked.whole) == (1, 0)  # the msgspec path has no threads


@pytest.mark.parametrize("size", [300, 1000, 5000])
@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("bare", [False, True])
def test_any_chunk_size_gives_the_same_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int, compress: bool, bare: bool
) -> None:
    events = _steps(40)
    if bare:
        path = tmp_path / ("bare.json.gz" if compress else "bare.json")
        text = json.dumps(events, indent=1).encode()
        path.write_bytes(gzip.compress(text) if compress else text)
    else:
        name = "trace.json.gz" if compress else "trace.json"
        path = write_trace(tmp_path, events, name, traceName="after the events")
    one = parse_file(path, threads=1)
    chunked = Chunked(monkeypatch, size)
    many = parse_file(path, threads=4)
    assert_same(many, one)
    assert (chunked.merged, chunked.whole) == (1, 0)
    assert many.cpu.height == 120
    if not bare:
        assert many.meta[0].trace_name == "after the events"  # a key after traceEvents


def test_a_cut_inside_a_string_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # op names that hold the boundary pattern: some cuts fall inside them
    events = _steps(60, name='x}, {"ph": "X", "cat": "cpu_op", "name": "fake", "ts": 1}, {y')
    path = write_trace(tmp_path, events)
    one = parse_file(path, threads=1, native=False)
    chunked = Chunked(monkeypatch, 700)
    assert_same(parse_file(path, threads=4), one)
    assert chunked.whole == 1  # declined in chunks, taken whole


def test_a_file_the_scanner_declines_still_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = [*_steps(30), {"ph": "B", "cat": "cpu_op", "name": "open", "pid": 1, "tid": 1,
                            "ts": 7000}, {"ph": "E", "pid": 1, "tid": 1, "ts": 7010}]  # fmt: skip
    path = write_trace(tmp_path, events)
    Chunked(monkeypatch, 500)
    with pytest.raises(fast.Declined):
        parallel.scan_file(path, threads=2)
    assert_same(parse_file(path, threads=2), parse_file(path, native=False))


def test_threads_default_to_the_setting_else_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(parallel.THREADS_ENV, "3")
    assert parallel.default_threads() == 3
    monkeypatch.setenv(parallel.THREADS_ENV, "0")
    assert parallel.default_threads() == 1
    monkeypatch.setenv(parallel.THREADS_ENV, "many")
    monkeypatch.setattr(parallel.os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3, 4}, False)
    assert parallel.default_threads() == 5


def test_progress_reaches_the_size_of_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_trace(tmp_path, _steps(40))
    seen: list[tuple[int, int]] = []
    chunked = Chunked(monkeypatch, 1000)
    parallel.scan_file(path, lambda done, total: seen.append((done, total)), threads=3)
    size = path.stat().st_size
    assert chunked.merged == 1
    assert seen == sorted(seen)
    assert seen[-1] == (size, size)


def test_progress_never_goes_back_when_the_file_is_scanned_again_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # chunks report their bytes, then a declined cut (inside a name, near the end) sends the
    # file to one scanner, which counts from the start again
    events = _steps(200)
    events[-20]["name"] = 'x}, {"ph": "X", "cat": "cpu_op", "name": "fake", "ts": 1}, {y'
    path = write_trace(tmp_path, events)
    size = path.stat().st_size
    chunked = Chunked(monkeypatch, size // 40)
    seen: list[int] = []
    fallback = parallel.fast.scan_file

    def whole_with_progress(path: Path, progress: Any = None) -> Any:
        if progress:  # what the single scanner reports: from its first piece again
            progress(size // 4, size)
        return fallback(path, progress)

    monkeypatch.setattr(parallel.fast, "scan_file", whole_with_progress)
    parallel.scan_file(path, lambda done, total: seen.append(done), threads=3)
    assert chunked.merged == 0  # scanned again whole
    assert seen == sorted(seen) and len(seen) == len(set(seen))
    assert seen[-1] == size


def test_a_bare_array_is_not_searched_for_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a key inside an event's args of a bare array: no cut is held back to after it
    path = tmp_path / "bare.json"
    late = {"ph": "X", "cat": "cpu_op", "name": "n", "pid": 1, "tid": 1, "ts": 9000, "dur": 5}
    path.write_text(json.dumps([*_steps(30), {**late, "args": {"traceEvents": 1}}]))
    searched: list[bytes] = []
    find = parallel._Reader.find

    def recorded(reader: Any, needle: bytes, start: int, limit: int) -> int:
        searched.append(needle)
        return find(reader, needle, start, limit)

    monkeypatch.setattr(parallel._Reader, "find", recorded)
    chunked = Chunked(monkeypatch, 1000)
    assert_same(parse_file(path, threads=3), parse_file(path, threads=1))
    assert (chunked.merged, searched) == (1, [])


def test_threads_option_sets_the_loads_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # set here so that the setting the command makes is undone after the test
    monkeypatch.setenv(parallel.THREADS_ENV, "1")
    path = write_trace(tmp_path, _steps(3))
    used: list[int | None] = []
    scan = parallel.scan_file

    def recorded(*args: Any) -> Any:
        used.append(parallel.default_threads() if args[2] is None else args[2])
        return scan(*args)

    monkeypatch.setattr(parallel, "scan_file", recorded)
    result = CliRunner().invoke(main, ["info", str(path), "--threads", "3", "--no-cache"])
    assert result.exit_code == 0, result.output
    assert used == [3]
    bad = CliRunner().invoke(main, ["info", str(path), "--threads", "0"])
    assert bad.exit_code == 2


@pytest.mark.parametrize("piece", [97, 700, 5000])
@pytest.mark.parametrize("size", [300, 2000])
def test_a_gzip_stream_in_small_pieces_is_cut_across_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, piece: int, size: int
) -> None:
    # Inflated pieces far smaller than a chunk, and chunks cut inside pieces: a chunk is the
    # views of the pieces it spans, events cut by a piece's end joined from the next piece.
    from traceanalyze.load import source

    path = write_trace(tmp_path, _steps(40), "trace.json.gz", traceName="after the events")
    one = parse_file(path, threads=1)
    monkeypatch.setattr(source, "CHUNK_BYTES", piece)
    monkeypatch.setattr(fast, "_JOIN_BYTES", 16)
    chunked = Chunked(monkeypatch, size)
    many = parse_file(path, threads=3)
    assert_same(many, one)
    assert (chunked.merged, chunked.whole) == (1, 0)


@pytest.mark.parametrize("compress", [False, True])
def test_json_without_trace_events_is_not_a_trace_on_threads_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compress: bool
) -> None:
    # The chunks' merge said "has a traceEvents list" whatever they saw: a large JSON object
    # without one read as "traceEvents is empty" instead of "not a Chrome trace".
    from traceanalyze.errors import NotATraceError

    text = json.dumps({"meta": [{"a": i} for i in range(500)], "other": 1}).encode()
    path = tmp_path / ("doc.json.gz" if compress else "doc.json")
    path.write_bytes(gzip.compress(text) if compress else text)
    Chunked(monkeypatch, 300)
    with pytest.raises(NotATraceError, match="no traceEvents list"):
        parse_file(path, threads=3)


@pytest.mark.parametrize(("size", "chunk"), [(175, 22), (100, 10), (35, 10), (10, 10), (9, 10)])
def test_chunk_marks_cover_the_file_in_equal_chunks(size: int, chunk: int) -> None:
    marks = parallel.chunk_marks(size, chunk)
    lengths = [b - a for a, b in itertools.pairwise(marks)]
    assert marks[0] == 0 and marks[-1] == size
    assert all(length > 0 for length in lengths)
    assert lengths[:-1] == [chunk] * (len(lengths) - 1)
    assert lengths[-1] < 2 * chunk  # the last takes what is left


@pytest.mark.parametrize("bare", [False, True])
@pytest.mark.parametrize("block", [200, 700, 3000])
def test_blocks_smaller_than_the_events_give_the_same_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bare: bool, block: int
) -> None:
    # a block may end inside an event (its tail read again with the next block), and an
    # event longer than the block grows the thread's buffer
    events = _steps(60)
    events[7]["name"] = "long " * 400
    if bare:
        path = tmp_path / "bare.json"
        path.write_text(json.dumps(events))
    else:
        path = write_trace(tmp_path, events, traceName="after the events")
    one = parse_file(path, threads=1)
    monkeypatch.setattr(parallel, "BLOCK_BYTES", block)
    chunked = Chunked(monkeypatch, path.stat().st_size // 3)
    assert_same(parse_file(path, threads=2), one)
    assert (chunked.merged, chunked.whole) == (1, 0)


@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_a_cut_looked_for_across_reads_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    # white space inside a boundary, longer than a look: the cut straddles two reads
    events = _steps(40)
    path = tmp_path / "spaced.json"
    gap = " " * 300
    text = "[" + ("}" + gap + "," + gap).join(json.dumps(e)[:-1] for e in events) + "}]"
    path.write_text(text)
    monkeypatch.setattr(parallel, "_LOOK_BYTES", {"start": 64, "middle": 301, "end": 600}[where])
    one = parse_file(path, threads=1)
    chunked = Chunked(monkeypatch, path.stat().st_size // 4)
    assert_same(parse_file(path, threads=3), one)
    assert (chunked.merged, chunked.whole) == (1, 0)


# A file changed while a threaded load reads it (a profiler exporting again to the same path):
# truncated, extended, emptied or rewritten in place, before the cuts or while the chunks are
# read. Each is one error naming the file, from a process of its own (a crash would kill it).
_CHANGE = """
import os, sys
from pathlib import Path
from traceanalyze.load import parallel
from traceanalyze.load.parse import parse_file
path, when, how = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
size = path.stat().st_size
parallel.MIN_CHUNK_BYTES = parallel.MAX_CHUNK_BYTES = size // 3
parallel.BLOCK_BYTES = 2048
def change():
    if how == "truncate":
        os.truncate(path, size // 2)
    elif how == "empty":
        os.truncate(path, 0)
    elif how == "extend":
        with open(path, "ab") as out:
            out.write(b" " * 1000)
    else:  # rewritten in place, same size, a newer modification time
        data = path.read_bytes()
        os.utime(path, ns=(0, 0))
        path.write_bytes(data)
if when == "cut":  # before the chunks are cut
    spans = parallel._spans
    def changed_spans(*args):
        change()
        return spans(*args)
    parallel._spans = changed_spans
else:  # once every chunk is cut, while they are scanned
    scan = parallel._scan_span
    def scan_then_change(reader, opening, span):
        if span.last:
            change()
        return scan(reader, opening, span)
    parallel._scan_span = scan_then_change
try:
    parse_file(path, threads=3)
except Exception as exc:
    print(type(exc).__name__, exc)
"""


@pytest.mark.parametrize("when", ["cut", "scan"])
@pytest.mark.parametrize("how", ["truncate", "empty", "extend", "rewrite"])
def test_a_file_changed_while_it_is_read_is_one_error(tmp_path: Path, when: str, how: str) -> None:
    path = write_trace(tmp_path, _steps(1500))
    done = subprocess.run(
        [sys.executable, "-c", _CHANGE, str(path), when, how],
        check=False,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == (
        f"TraceReadError {path}: changed while it was read. {parallel.FIX_CHANGED}"
    )


def test_the_loader_maps_no_file_and_sets_no_signal_handler() -> None:
    # issue 42: positional reads, not maps guarded by a SIGBUS handler
    source = (Path(parallel.__file__).parent / "_scan.c").read_text()
    for word in ("sigaction", "sigsetjmp", "SIGBUS", "mmap"):
        assert word not in source
    assert "mmap" not in Path(parallel.__file__).read_text()


def test_progress_never_goes_back_when_msgspec_reads_a_declined_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # begin/end pairs: the scanner declines the file, then the msgspec path reads it all again
    events: list[dict[str, object]] = [*_steps(1500)]
    events.append({"ph": "B", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 1})
    events.append({"ph": "E", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 2})
    path = write_trace(tmp_path, events)
    Chunked(monkeypatch, path.stat().st_size // 4)
    seen: list[int] = []
    parse_file(path, progress=lambda done, total: seen.append(done), threads=3)
    assert seen == sorted(seen) and len(seen) == len(set(seen))
