"""The two decoders (the C scanner and the msgspec path) give the same Trace, whole or in
chunks of any size, and the loader reports its progress in bytes."""

from __future__ import annotations

import gzip
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tests.conftest import PUBLIC_TRACES
from tests.micro import annotation, call, kernel, op, write_trace
from traceanalyze.load import chunks, fast, source
from traceanalyze.load.parse import parse_file
from traceanalyze.schema import TRACE_FRAMES
from traceanalyze.trace import Trace

REPO = Path(__file__).resolve().parents[1]
BENCH_TRACE = REPO.parent / "shared" / "bench" / "h200_train_175mb.json.gz"
SAMPLES = sorted((REPO / "sample_traces").glob("*/*.json.gz"))
REAL = [
    *SAMPLES,
    *(sorted(PUBLIC_TRACES.glob("*.json*")) if PUBLIC_TRACES.is_dir() else []),
]
native_only = pytest.mark.skipif(not fast.AVAILABLE, reason="the C scanner is not built")

STEP = [
    annotation("ProfilerStep#0", 0, 100),
    op("aten::mm", 10, 50),
    call("cudaLaunchKernel", 20, 5, 1),
    kernel("gemm", 30, 10, 1, grid=[4, 2, 1], block=[128, 1, 1]),
]


def assert_same(left: Trace, right: Trace) -> None:
    assert left.meta == right.meta
    assert left.iteration_source == right.iteration_source
    for name in TRACE_FRAMES:
        assert_frame_equal(getattr(left, name), getattr(right, name))


@native_only
@pytest.mark.parametrize("path", REAL, ids=[p.name for p in REAL])
def test_both_decoders_agree_on_real_traces(path: Path) -> None:
    fast.scan_file(path)  # the C scanner takes every real Kineto trace (raises if it declines)
    assert_same(parse_file(path), parse_file(path, native=False))


@native_only
def test_both_decoders_agree_on_the_bench_trace() -> None:
    if not BENCH_TRACE.is_file():
        pytest.skip(f"no bench trace at {BENCH_TRACE}")
    assert_same(parse_file(BENCH_TRACE), parse_file(BENCH_TRACE, native=False))


@pytest.mark.parametrize("chunk", [7, 64, 333])
@pytest.mark.parametrize("native", [False, True])
def test_tiny_chunks_give_the_same_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int, native: bool
) -> None:
    if native and not fast.AVAILABLE:
        pytest.skip("the C scanner is not built")
    events = [e for step in range(20) for e in _shifted(STEP, step * 200, step)]
    path = write_trace(tmp_path, events, traceName="after the events")
    whole = parse_file(path, native=native)
    monkeypatch.setattr(source, "CHUNK_BYTES", chunk)
    monkeypatch.setattr(chunks, "CHUNK_BYTES", chunk)
    assert_same(parse_file(path, native=native), whole)
    assert whole.cpu.height == 60
    assert whole.meta[0].trace_name == "after the events"


def _shifted(events: list[dict[str, object]], by: float, step: int) -> list[dict[str, object]]:
    out = []
    for event in events:
        moved = {**event, "ts": float(event["ts"]) + by}  # type: ignore[arg-type]
        args = dict(event["args"])  # type: ignore[call-overload]
        if "correlation" in args:
            args["correlation"] = step + 1
        if event["name"] == "ProfilerStep#0":
            moved["name"] = f"ProfilerStep#{step}"
        moved["args"] = args
        out.append(moved)
    return out


@pytest.mark.parametrize("name", ["trace.json", "trace.json.gz"])
def test_progress_counts_the_bytes_of_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    events = [e for step in range(50) for e in _shifted(STEP, step * 200, step)]
    path = write_trace(tmp_path, events, name=name)
    monkeypatch.setattr(source, "CHUNK_BYTES", 256)
    monkeypatch.setattr(source, "_GZIP_READ_BYTES", 128)
    seen: list[tuple[int, int]] = []
    parse_file(path, progress=lambda done, total: seen.append((done, total)))
    size = path.stat().st_size
    assert len(seen) > 3
    assert all(total == size for _, total in seen)
    done = [d for d, _ in seen]
    assert done == sorted(done)
    assert done[-1] == size


def test_gzip_of_several_members_loads(tmp_path: Path) -> None:
    plain = write_trace(tmp_path, STEP, name="plain.json")
    data = plain.read_bytes()
    half = len(data) // 2
    two = tmp_path / "two.json.gz"
    two.write_bytes(gzip.compress(data[:half]) + gzip.compress(data[half:]))
    assert_same_frames(parse_file(two), parse_file(plain))


def assert_same_frames(left: Trace, right: Trace) -> None:
    for name in TRACE_FRAMES:
        assert_frame_equal(getattr(left, name), getattr(right, name))


def test_progress_is_drawn_on_a_terminal_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from traceanalyze.cli import progress

    path = write_trace(tmp_path, STEP)
    monkeypatch.setattr(progress, "is_terminal", lambda: False)
    with progress.loading_file(path) as callback:
        assert callback is None  # piped: quiet
    monkeypatch.setattr(progress, "is_terminal", lambda: True)
    with progress.loading_file(path) as callback:
        assert callback is not None
        parse_file(path, progress=callback)
    with progress.loading_file(tmp_path) as callback:
        assert callback is None  # a folder: a spinner, no byte counts


@native_only
def test_every_exported_value_type_matches_the_msgspec_path(tmp_path: Path) -> None:
    # The scanner hands its columns to Polars as Arrow arrays (_scan.c's export): texts as
    # string views (inline up to 12 bytes, else in the text buffer), escapes resolved, null
    # masks from the tags, floats from ints; and leaves the rest to Python (a collective's
    # integer written where text goes, ids written as text). Each case against the reference.
    names = ["", "a" * 11, "b" * 12, "c" * 13, "ops " * 10, 'q"uote\\d', "caf\u00e9 \U0001f600"]
    events: list[dict[str, object]] = []
    for i, name in enumerate(names):
        args: dict[str, object] = {"External id": i}
        if i % 2:
            args |= {"Input Dims": [[i, 2], []], "Input type": ["float", ""]}
        if i % 3 == 1:
            args |= {"Collective name": "allreduce", "In msg nelems": i, "dtype": "Float"}
        events.append(op(name, 10 * i, 5) | {"args": args})
    events += [
        call("cudaLaunchKernel", 100, 5, 1),
        kernel("gemm " * 5, 110, 10, 1, grid=[4, 2, 1], block=[128, 1, 1]),
        kernel("k", 130, 10, 2)
        | {"args": {"correlation": 2, "warps per SM": 3, "blocks per SM": 1.5}},
        kernel("nccl", 150, 10, 3)
        | {"args": {"correlation": 3, "Collective name": 7, "dtype": None}},
        {"ph": "s", "cat": "ac2g", "name": "flow", "id": 4, "pid": 1, "tid": 1, "ts": 100},
        {"ph": "f", "cat": "ac2g", "name": "flow", "id": "0x10", "pid": 1, "tid": 1, "ts": 110},
        {"ph": "X", "cat": "python_function", "name": "f" * 20, "pid": 1, "tid": "main",
         "ts": 1, "dur": 2, "args": {"Python id": 1}},
    ]  # fmt: skip
    path = write_trace(tmp_path, events)
    fast.scan_file(path)  # the C scanner takes it (raises if it declines)
    fast_trace = parse_file(path)
    assert_same(fast_trace, parse_file(path, native=False))
    assert fast_trace.cpu.filter(pl.col("cat") == "cpu_op")["name"].to_list() == names


@native_only
def test_recorded_shapes_seen_before_read_as_the_msgspec_path_reads_them(tmp_path: Path) -> None:
    # The scanner compares an op's array, object and string args with the last two values of
    # its (op name, position) as bytes (_scan.c's memo_value): values equal, longer, shorter,
    # alternating, nested, and a value equal to one but with an escape or more white space.
    shapes: list[object] = [
        [[8, 512], []], [[8, 512], [], [1]], [[8, 512]], [[8, 512], []], [[8, 51]],
        [[8, 512], []], {"a": [1]}, "text", 'te"xt', [], [[]], [[8, 512], []],
    ]  # fmt: skip
    events = []
    for i, shape in enumerate(shapes * 3):
        args = {"Input Dims": shape, "Input type": shape, "Input Strides": shape, "Ev Idx": i}
        events.append(op("aten::add" if i % 2 else "aten::mul", 10 * i, 5) | {"args": args})
    path = write_trace(tmp_path, events)
    text = path.read_text().replace(
        '"Input Dims": [[8, 512], []]', '"Input Dims": [[8, 512],  []]', 1
    )
    path.write_text(text)
    fast.scan_file(path)  # the C scanner takes it (raises if it declines)
    trace = parse_file(path)
    assert_same(trace, parse_file(path, native=False))
    assert trace.cpu["input_dims"].n_unique() > 8


@native_only
def test_a_float_arg_written_as_text_reads_as_the_msgspec_path_reads_it(tmp_path: Path) -> None:
    # "warps per SM": "4" is 4.0 on both paths (a skeptical pass found the scanner's null);
    # text that spells no number is null on both.
    args = {"correlation": 1, "warps per SM": "4", "blocks per SM": "0.5", "stream": 7}
    events = [
        call("cudaLaunchKernel", 1, 1, 1),
        kernel("k", 2, 1, 1) | {"args": args},
        kernel("k", 4, 1, 1) | {"args": {**args, "warps per SM": "many"}},
    ]
    path = write_trace(tmp_path, events)
    fast.scan_file(path)  # the C scanner takes it (raises if it declines)
    trace = parse_file(path)
    assert_same(trace, parse_file(path, native=False))
    assert trace.gpu["warps_per_sm"].to_list() == [4.0, None]
    assert trace.gpu["blocks_per_sm"].to_list() == [0.5, 0.5]
