"""Property-based tests of the loader and linker (hypothesis).

Random valid traces (nested CPU intervals on several threads, launches onto several streams,
ranks, missing fields, unicode names, huge and negative times) must load to what a brute-force
definition computes from the generated events, identically with both decoders and with any
chunk size. Random corruptions (truncation at any byte, flipped bytes, a wrong type in any
field) must give either a Trace (then both decoders agree) or one TraceAnalyzeError of one
line, and exit status 1 with one line on stderr from the CLI: never a traceback.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import tempfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any
from unittest import mock

import polars as pl
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from tests.micro import H200
from traceanalyze.cli import main
from traceanalyze.errors import TraceAnalyzeError
from traceanalyze.load import chunks, fast, source
from traceanalyze.load.parse import parse_file
from traceanalyze.schema import TRACE_FRAMES
from traceanalyze.trace import Trace

# Bounded so that the whole file runs in under 20 s on a 2-core machine; a longer fuzzing run:
# TRACEANALYZE_FUZZ_SCALE=20 python -m pytest tests/test_load_properties.py
SCALE = int(os.environ.get("TRACEANALYZE_FUZZ_SCALE", "1"))
VALID = settings(
    max_examples=200 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
BROKEN = settings(
    max_examples=400 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

# Unicode names, including characters JSON writers escape and some they write raw.
NAMES = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=6)
BASES_NS = st.sampled_from([0, -5_000_000, 5_349_173_412_821_900, 1_712_195_495_505_000_123])


@dataclass
class Span:
    cat: str
    name: str
    thread: tuple[Any, Any]
    ts_ns: int
    dur_ns: int
    children: list[Span] = field(default_factory=list)
    correlation: int | None = None


@dataclass
class Generated:
    events: list[dict[str, Any]]
    spans: list[Span]
    kernels: list[tuple[int, int, Span]]  # (ts_ns, correlation, launching call)
    rank: int | None


def micros(ns: int) -> Decimal:
    return Decimal(ns) / 1000


@st.composite
def forests(draw: st.DrawFn, thread: tuple[Any, Any], lo: int, hi: int, depth: int) -> list[Span]:
    """Disjoint spans inside [lo, hi), each with its own children; leaves may be launches."""
    spans: list[Span] = []
    cursor = lo
    for _ in range(draw(st.integers(0, 3 if depth < 3 else 0))):
        if hi - cursor < 4:
            break
        start = draw(st.integers(cursor, hi - 3))
        end = draw(st.integers(start + 2, hi - 1))
        if depth and draw(st.booleans()):
            api = draw(st.sampled_from(["cudaLaunchKernel", "hipLaunchKernel"]))
            span = Span("cuda_runtime", api, thread, start, end - start)
        else:
            cat = "user_annotation" if depth == 0 and draw(st.booleans()) else "cpu_op"
            span = Span(cat, draw(NAMES), thread, start, end - start)
            # A child may share its parent's start, never its whole span.
            span.children = draw(forests(thread, start + draw(st.integers(0, 1)), end, depth + 1))
        spans.append(span)
        cursor = end + draw(st.integers(0, 1))
    return spans


def walk(spans: list[Span]) -> Iterator[Span]:
    for span in spans:
        yield span
        yield from walk(span.children)


IDS = st.one_of(
    st.integers(0, 2**62), st.integers(0, 10**6).map(str), st.sampled_from(["main", "Spans"])
)


@st.composite
def valid_traces(draw: st.DrawFn) -> Generated:
    base = draw(BASES_NS)
    # Ids the loader reads as one number (5 and "5") would be one thread: drawn distinct.
    threads = draw(
        st.lists(
            st.tuples(IDS, IDS),
            min_size=1,
            max_size=3,
            unique_by=lambda t: repr(tuple(str(i) for i in t)),
        )
    )
    spans: list[Span] = []
    for index, thread in enumerate(threads):
        roots = draw(forests(thread, base, base + 10_000, 0))
        if index == 0:
            for step, root in enumerate(roots):
                root.cat, root.name = "user_annotation", f"ProfilerStep#{step}"
        spans += roots
    kernels = []
    for number, call in enumerate(s for s in walk(spans) if s.cat == "cuda_runtime"):
        call.correlation = number + 1
        kernels.append((call.ts_ns + draw(st.integers(1, 500)), number + 1, call))
    events = [span_event(s, draw) for s in walk(spans)]
    for ts_ns, correlation, _ in kernels:
        stream = draw(st.sampled_from([0, 7, 13]))
        events.append({
            "ph": "X", "cat": "kernel", "name": draw(NAMES), "pid": 0, "tid": stream,
            "ts": micros(ts_ns), "dur": micros(draw(st.integers(1, 999))),
            "args": {"device": 0, "stream": stream, "correlation": correlation,
                     "grid": [draw(st.integers(1, 2**31)), 1, 1], "block": [128, 1, 1],
                     "blocks per SM": draw(st.floats(0, 1e6, allow_nan=False))},
        })  # fmt: skip
    events += draw(st.lists(noise_events(base), max_size=4))
    order = draw(st.permutations(range(len(events))))
    return Generated(
        [events[i] for i in order], spans, kernels, draw(st.none() | st.integers(0, 7))
    )


def span_event(span: Span, draw: st.DrawFn) -> dict[str, Any]:
    event: dict[str, Any] = {
        "ph": "X", "cat": span.cat, "name": span.name, "pid": span.thread[0],
        "tid": span.thread[1], "ts": micros(span.ts_ns), "dur": micros(span.dur_ns),
    }  # fmt: skip
    if span.correlation is not None:
        event["args"] = {"correlation": span.correlation, "External id": span.correlation}
    elif draw(st.booleans()):
        event["args"] = {"Input Dims": [[draw(st.integers(-1, 2**40))]], "Input type": ["float"]}
    if draw(st.integers(0, 9)) == 0:  # some writers put times in strings
        event["ts"] = str(event["ts"])
    return event


def noise_events(base: int) -> st.SearchStrategy[dict[str, Any]]:
    """Events that must change nothing but their own frames: skipped categories, Python frames,
    instants, flows, metadata, events with missing fields."""
    return st.sampled_from([
        {"ph": "X", "cat": "python_function", "name": "f", "pid": 1, "tid": 1, "ts": 1, "dur": 1},
        {"ph": "X", "cat": "python_function", "name": "m.py(3): f", "pid": 1, "tid": 1, "ts": 1,
         "dur": 2, "args": {"Python id": 7, "Python parent id": None, "Ev Idx": 3}},
        {"ph": "X", "cat": "python_function", "name": "<built-in function len>", "pid": 1,
         "tid": 1, "ts": 2, "dur": 0, "args": {"Python id": "x", "Python parent id": 7}},
        {"ph": "i", "cat": "python_function", "name": "g", "pid": 1, "tid": 1, "ts": 1},
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 2},
        {"ph": "s", "cat": "ac2g", "id": 5, "pid": 1, "tid": 1, "ts": micros(base)},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main ☃"}},
        {"ph": "X", "name": "no category"},
        {"ph": "C", "name": "counter", "pid": 1, "ts": 3, "args": {"value": 1e300}},
    ])  # fmt: skip


def document(generated: Generated, bare: bool) -> Any:
    if bare:
        return generated.events
    doc: dict[str, Any] = {"schemaVersion": 1, "deviceProperties": [H200]}
    if generated.rank is not None:
        doc["distributedInfo"] = {"rank": generated.rank}
    return {**doc, "traceEvents": generated.events, "displayTimeUnit": "ms"}


def encode(content: Any, raw_utf8: bool) -> bytes:
    """JSON with exact Decimal numbers; non-ASCII escaped (as json does) or written raw."""
    text = json.dumps(content, default=lambda n: f"{_EXACT}{n}", ensure_ascii=not raw_utf8)
    return re.sub(rf'"{_EXACT}([^"]*)"', r"\1", text).encode()


_EXACT = "exact-number:"


@contextmanager
def chunk_size(size: int | None) -> Iterator[None]:
    if size is None:
        yield
        return
    with (
        mock.patch.object(source, "CHUNK_BYTES", size),
        mock.patch.object(chunks, "CHUNK_BYTES", size),
    ):
        yield


def load_all_ways(path: Path, size: int | None) -> Trace | str:
    """The Trace (or the error message) of the msgspec path, checked against the C scanner's,
    both with the chunk size ``size`` (None: the usual one)."""
    outcomes = []
    ways = [(False, None), (True, None)] if size is None else [(False, size), (True, size)]
    for native, chunk in ways:
        if native and not fast.AVAILABLE:
            continue
        with chunk_size(chunk):
            try:
                outcomes.append(parse_file(path, native=native))
            except TraceAnalyzeError as error:
                message = str(error)
                assert "\n" not in message
                outcomes.append(message)
    first = outcomes[0]
    for other in outcomes[1:]:
        if isinstance(first, str) or isinstance(other, str):
            assert other == first
        else:
            assert_same(other, first)
    return first


def assert_same(left: Trace, right: Trace) -> None:
    assert left.meta == right.meta
    for name in TRACE_FRAMES:
        assert_frame_equal(getattr(left, name), getattr(right, name))


# --- valid traces -------------------------------------------------------------------------


@VALID
@given(
    valid_traces(), st.booleans(), st.booleans(), st.booleans(), st.sampled_from([None, 48, 301])
)
def test_random_valid_traces_load_and_link_as_defined(
    generated: Generated, bare: bool, gz: bool, raw_utf8: bool, size: int | None
) -> None:
    data = encode(document(generated, bare), raw_utf8)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / ("t.json.gz" if gz else "t.json")
        path.write_bytes(gzip.compress(data) if gz else data)
        trace = load_all_ways(path, size)
    if not list(walk(generated.spans)):
        assert isinstance(trace, str)  # nothing to analyse: a clear error
        return
    assert isinstance(trace, Trace), trace
    check_call_tree(trace, generated)
    check_links(trace, generated)
    assert trace.meta[0].rank == (generated.rank if generated.rank is not None and not bare else 0)


def check_call_tree(trace: Trace, generated: Generated) -> None:
    """Depth and parent of every CPU interval, by brute-force containment."""
    spans = list(walk(generated.spans))
    expected = []
    for span in spans:
        around = [
            o for o in spans if o is not span and o.thread == span.thread and contains(o, span)
        ]
        parent = max(around, key=lambda o: (o.ts_ns, -o.dur_ns), default=None)
        expected.append((span.name, span.ts_ns, span.dur_ns, len(around), parent and parent.name))
    cpu = trace.cpu
    names = cpu["name"].to_list()
    parents = [None if p is None else names[p] for p in cpu["parent_id"].to_list()]
    loaded = list(zip(names, cpu["ts_ns"], cpu["dur_ns"], cpu["depth"], parents, strict=True))
    assert sorted(loaded, key=repr) == sorted(expected, key=repr)


def contains(outer: Span, inner: Span) -> bool:
    return outer.ts_ns <= inner.ts_ns and inner.ts_ns + inner.dur_ns <= outer.ts_ns + outer.dur_ns


def check_links(trace: Trace, generated: Generated) -> None:
    """Launch call, innermost op, outermost annotation and step of every kernel."""
    spans = list(walk(generated.spans))
    steps = [s for s in spans if s.name.startswith("ProfilerStep#") and s.cat == "user_annotation"]
    expected = []
    for ts_ns, _, call in generated.kernels:
        around = [
            s for s in spans if s.thread == call.thread and contains(s, call) and s is not call
        ]
        ops = [s for s in around if s.cat == "cpu_op"]
        regions = [s for s in around if s.cat == "user_annotation" and s not in steps]
        op = max(ops, key=lambda o: (o.ts_ns, -o.dur_ns), default=None)
        region = min(regions, key=lambda o: (o.ts_ns, -o.dur_ns), default=None)
        step = next((s for s in steps if s.ts_ns <= call.ts_ns < s.ts_ns + s.dur_ns), None)
        expected.append((ts_ns, call.name, op and op.name, region and region.name,
                         step and int(step.name.removeprefix("ProfilerStep#"))))  # fmt: skip
    gpu = trace.gpu.select("ts_ns", "launch_api", "op_name", "annotation", "iteration")
    if trace.iteration_source != "ProfilerStep":
        gpu = gpu.with_columns(iteration=pl.lit(None, pl.Int64))
        expected = [(*row[:4], None) for row in expected]
    assert sorted(gpu.rows(), key=repr) == sorted(expected, key=repr)


# --- corruptions --------------------------------------------------------------------------

WRONG_VALUES = st.sampled_from(
    [None, True, [], {}, "text", "12", 1.5, -1, 2**70, -(2**63), 1e308, [1, "x"], {"a": [1]}]
)
FIELDS = st.sampled_from(
    ["ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "args",
     "args.correlation", "args.External id", "args.grid", "args.stream", "args.device",
     "args.Input Dims", "args.name", "args.blocks per SM", "args.registers per thread"]
)  # fmt: skip


@st.composite
def corruptions(draw: st.DrawFn) -> tuple[bytes, str]:
    generated = draw(valid_traces())
    bare = draw(st.booleans())
    content = document(generated, bare)
    how = draw(st.sampled_from(["truncate", "flip", "type", "type"]))
    if how == "type" and generated.events:
        index = draw(st.integers(0, len(generated.events) - 1))
        event = dict(generated.events[index])
        key, value = draw(FIELDS), draw(WRONG_VALUES)
        if key.startswith("args."):
            event["args"] = {**dict(event.get("args") or {}), key[5:]: value}
        else:
            event[key] = value
        generated.events[index] = event
    data = encode(content, raw_utf8=False)
    if draw(st.booleans()):
        data = gzip.compress(data, mtime=0)
    if how == "truncate":
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif how == "flip":
        for _ in range(draw(st.integers(1, 3))):
            at = draw(st.integers(0, len(data) - 1))
            data = data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1 :]
    return data, how


@BROKEN
@given(corruptions(), st.sampled_from([None, 40]))
def test_corrupt_traces_give_one_line_errors_never_tracebacks(
    corrupted: tuple[bytes, str], size: int | None
) -> None:
    data, how = corrupted
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.json.gz"
        path.write_bytes(data)
        outcome = load_all_ways(path, size)
        if how == "truncate" and not _only_whitespace_lost(data, path):
            assert isinstance(outcome, str), "a truncated file loaded"
        result = CliRunner().invoke(main, ["info", str(path), "--no-cache"])
    if isinstance(outcome, str):
        assert result.exit_code == 1, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("traceanalyze: error: "), result.stderr
    else:
        assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output


def _only_whitespace_lost(data: bytes, path: Path) -> bool:
    """A cut that removed only trailing whitespace leaves a valid document; so does a gzip
    stream cut in its trailer (or its last deflate bytes) after the whole document: it loads,
    the cut noted (TraceMeta.gzip_cut)."""
    if data[:2] == b"\x1f\x8b":
        try:
            data = zlib.decompressobj(wbits=31).decompress(data)  # what the stream still gives
        except zlib.error:
            return False
    try:
        json.loads(data)
    except ValueError:
        return False
    return True
