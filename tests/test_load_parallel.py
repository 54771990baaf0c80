"""The C scanner on several threads (traceanalyze.load.parallel) gives the Trace one scanner
gives: chunks cut anywhere, raw or gzip, object or bare array, and cuts that fall inside a
string are caught (the file is then scanned whole)."""

from __future__ import annotations

import gzip
import itertools
import json
import os
import re
import subprocess
import sys
import time
import types
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


def test_a_bare_array_is_not_searched_for_the_key(tmp_path: Path) -> None:
    path = tmp_path / "bare.json"
    late = {"ph": "X", "cat": "cpu_op", "name": "n", "pid": 1, "tid": 1, "ts": 9000, "dur": 5}
    path.write_text(json.dumps([*_steps(30), {**late, "args": {"traceEvents": 1}}]))
    with (
        open(path, "rb") as file,
        parallel.mmap.mmap(file.fileno(), 0, access=parallel.mmap.ACCESS_READ) as data,
    ):
        assert parallel._Mapped(data, len(data), b"[").events == 0
        assert parallel._Mapped(data, len(data), b"{").events > 0  # (an object would be)


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
    marks = parallel.chunk_marks(size, chunk, 2)
    lengths = [b - a for a, b in itertools.pairwise(marks)]
    assert marks[0] == 0 and marks[-1] == size
    assert all(length > 0 for length in lengths)
    assert lengths[:-1] == [chunk] * (len(lengths) - 1)
    assert lengths[-1] < 2 * chunk  # the last takes what is left


class _SlowScanner:
    """The C scanner, a millisecond slower per block fed: small test files would otherwise be
    scanned before an idle thread could take part of a chunk."""

    def __init__(self, kinds: Any) -> None:
        self.scanner = fast._scan.Scanner(kinds)

    def feed(self, data: Any, final: bool) -> int:
        time.sleep(0.001)
        return int(self.scanner.feed(data, final))

    def result(self) -> Any:
        return self.scanner.result()


class Stealing(Chunked):
    """Chunked, with blocks of ``block`` bytes fed slowly and a steal whenever a thread is idle
    and a running chunk has two blocks left; counts the steals."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, size: int, block: int) -> None:
        super().__init__(monkeypatch, size)
        self.steals = 0
        monkeypatch.setattr(parallel, "BLOCK_BYTES", block)
        monkeypatch.setattr(parallel, "MIN_STEAL_BYTES", 2 * block)
        slow = types.SimpleNamespace(
            Scanner=_SlowScanner,
            Unsupported=fast._scan.Unsupported,
            find_boundary=fast._scan.find_boundary,
            find_bytes=fast._scan.find_bytes,
        )
        monkeypatch.setattr(parallel, "_scan", slow)
        steal = parallel._Plan.steal

        def counted_steal(plan: Any) -> Any:
            stolen = steal(plan)
            self.steals += stolen is not None
            return stolen

        monkeypatch.setattr(parallel._Plan, "steal", counted_steal)


@pytest.mark.parametrize("bare", [False, True])
@pytest.mark.parametrize("block", [200, 700, 3000])
def test_threads_that_take_the_rest_of_a_chunk_give_the_same_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bare: bool, block: int
) -> None:
    events = _steps(150)
    if bare:
        path = tmp_path / "bare.json"
        path.write_text(json.dumps(events, indent=1))
    else:
        path = write_trace(tmp_path, events, traceName="after the events")
    one = parse_file(path, threads=1)
    # two chunks for four threads: two of them start by taking parts of them
    stealing = Stealing(monkeypatch, path.stat().st_size // 2, block)
    many = parse_file(path, threads=4)
    assert_same(many, one)
    assert (stealing.merged, stealing.whole) == (1, 0)
    assert stealing.steals >= 2
    if not bare:
        assert many.meta[0].trace_name == "after the events"  # read by the new last chunk


def test_a_stolen_cut_inside_a_string_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # each op's name, its last key, ends with the boundary pattern: a cut looked for from
    # most places of an event falls inside the next name, not at the event's end
    fake = "x" * 150 + '}, {"ph": "X", "cat": "cpu_op", "name": "fake", "ts": 1}, {y'
    ops = [
        {"ph": "X", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5, "name": fake}
        for i in range(400)
    ]
    path = write_trace(tmp_path, ops)
    one = parse_file(path, threads=1, native=False)
    stealing = Stealing(monkeypatch, path.stat().st_size // 2, 1000)
    for _ in range(3):
        assert_same(parse_file(path, threads=4), one)
    assert stealing.steals >= 1
    assert stealing.whole >= 1  # a cut fell inside a name: the file was scanned again whole


# Every fourth real trace (all of them: test_chunked_threads_agree_with_one_scanner_on_real_traces)
STOLEN = REAL[::4]


@pytest.mark.parametrize("path", STOLEN, ids=[p.name for p in STOLEN])
def test_real_traces_split_by_stealing_agree_with_one_scanner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: Path
) -> None:
    if path.suffix == ".gz":  # stealing is for plain files: inflated first
        plain = tmp_path / path.stem
        plain.write_bytes(gzip.decompress(path.read_bytes()))
        path = plain
    try:
        one = parse_file(path, threads=1)
    except TraceAnalyzeError:
        return  # errors in chunks: test_chunked_threads_agree_with_one_scanner_on_real_traces
    size = path.stat().st_size
    stealing = Stealing(monkeypatch, size // 2, max(256, size // 64))
    assert_same(parse_file(path, threads=5), one)
    assert stealing.steals >= 1


# A file truncated while a threaded load reads it (a profiler exporting again to the same path):
# in a process of its own, as the mapped pages past the new end raise SIGBUS.
_TRUNCATE = """
import os, sys
from pathlib import Path
from traceanalyze.load import parallel
from traceanalyze.load.parse import parse_file
path, when = Path(sys.argv[1]), sys.argv[2]
size = path.stat().st_size
half = size // 2
# three chunks, no steals: when the file shrinks while they are scanned, a scanner's own read
# past the new end is what fails
parallel.MIN_CHUNK_BYTES = parallel.MAX_CHUNK_BYTES = size // 3
# small blocks: every feed under 4 kB, where the scanner keeps the GIL
parallel.BLOCK_BYTES = 2048 if when == "small feeds" else 16 * 1024
parallel.MIN_STEAL_BYTES = size
if when == "cut":  # before the chunks are cut
    init = parallel._Plan.__init__
    def truncated_init(self, *args):
        init(self, *args)
        os.truncate(path, half)
    parallel._Plan.__init__ = truncated_init
else:  # once every chunk is cut, while they are scanned
    take = parallel._Plan.take
    def take_then_truncate(self):
        running = take(self)
        if running is not None and running.last:
            os.truncate(path, half)
        return running
    parallel._Plan.take = take_then_truncate
try:
    parse_file(path, threads=3)
except Exception as exc:
    print(type(exc).__name__, exc)
"""


@pytest.mark.parametrize("when", ["cut", "scan", "small feeds"])
def test_a_file_truncated_while_it_is_read_is_an_error_not_a_crash(
    tmp_path: Path, when: str
) -> None:
    path = write_trace(tmp_path, _steps(1500))
    done = subprocess.run(
        [sys.executable, "-c", _TRUNCATE, str(path), when],
        check=False,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]  # -7 / 135: killed by SIGBUS
    with pytest.raises(TraceAnalyzeError) as one:  # the truncated file, read by one scanner
        parse_file(path, threads=1)
    assert done.stdout.strip() == f"{type(one.value).__name__} {one.value}"


def test_a_file_emptied_before_it_is_mapped_is_the_empty_file_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_trace(tmp_path, _steps(1500))
    Chunked(monkeypatch, path.stat().st_size // 4)
    mapped = parallel._mapped

    def emptied_first(file: Any) -> Any:
        os.truncate(path, 0)
        return mapped(file)

    monkeypatch.setattr(parallel, "_mapped", emptied_first)
    with pytest.raises(TraceAnalyzeError) as threaded:
        parse_file(path, threads=3)
    with pytest.raises(TraceAnalyzeError) as one:
        parse_file(path, threads=1)
    assert (type(threaded.value), str(threaded.value)) == (type(one.value), str(one.value))


# SIGBUS that is not a guarded read's: as if the scanner's handler were not there.
_CHAINED = """
import mmap, os, signal, sys
if sys.argv[1] == "python handler":
    signal.signal(signal.SIGBUS, lambda *_: print("handled", flush=True))
from traceanalyze.load import _scan
os.kill(os.getpid(), signal.SIGBUS)
print("alive", flush=True)
# the guard is still there: a read of a truncated mapped file declines
with open(sys.argv[2], "rb") as file:
    data = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    os.truncate(sys.argv[2], 0)
    try:
        _scan.find_boundary(data, 0, -1)
    except _scan.Unsupported:
        print("declined", flush=True)
"""


@pytest.mark.parametrize("before", ["default", "python handler"])
def test_a_sigbus_sent_by_kill_goes_where_it_went_before(tmp_path: Path, before: str) -> None:
    path = tmp_path / "pages.bin"
    path.write_bytes(b"x" * 65536)
    done = subprocess.run(
        [sys.executable, "-c", _CHAINED, before, str(path)],
        check=False,
        capture_output=True,
        text=True,
    )
    if before == "default":
        # killed as without the scanner (by the default action, or by a sanitizer's handler)
        bare = subprocess.run(
            [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGBUS)"],
            check=False,
            capture_output=True,
        )
        assert done.returncode == bare.returncode != 0
        assert "alive" not in done.stdout
    else:
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.split() == ["handled", "alive", "declined"]


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
