"""A byte-mutation fuzz run of the C scanner over micro-traces and their truncations.

Mutants (bytes flipped, inserted, deleted, duplicated from elsewhere in the file, cut short)
of a few micro-traces that touch every kind of event the scanner keeps. Two checks:

- the scanner itself, fed each mutant whole and then in random splits, never crashes: it
  returns or raises ``Unsupported`` (run under ASan/UBSan by ``scripts/sanitize_scanner.sh``,
  any memory error or undefined behaviour aborts the run);
- the full load of a mutant gives the msgspec path's Trace or its one-line
  ``TraceAnalyzeError``, exactly.

Bounded by time, not by count: ``TRACEANALYZE_FUZZ_SECONDS`` (default 2 s per test; CI 25 s),
seeded by ``TRACEANALYZE_FUZZ_SEED`` (default 0) so that a failure replays.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from polars.testing import assert_frame_equal

from tests.micro import annotation, call, document, dumps, kernel, memory_event, op, span
from traceanalyze.errors import TraceAnalyzeError
from traceanalyze.load import fast
from traceanalyze.load.parse import parse_file
from traceanalyze.schema import TRACE_FRAMES
from traceanalyze.trace import Trace

pytestmark = pytest.mark.skipif(not fast.AVAILABLE, reason="the C scanner is not built")

SECONDS = float(os.environ.get("TRACEANALYZE_FUZZ_SECONDS", "2"))
SEED = int(os.environ.get("TRACEANALYZE_FUZZ_SEED", "0"))

_EVENTS = [
    annotation("ProfilerStep#1", 0, 100),
    op("aten::mm", 10, 50),
    {**op("record_param_comms", 12, 5), "args": {"Collective name": "allreduce",
     "In msg nelems": 4, "Group size": 2, "dtype": "Float", "Input Dims": [[2, 2]],
     "Input type": ["float"], "Concrete Inputs": ["", "1"]}},
    call("cudaLaunchKernel", 20, 5, 1),
    kernel("gemm", 30, 10, 1, grid=[4, 2, 1], block=[128, 1, 1], **{
        "registers per thread": 255, "shared memory": 65536, "blocks per SM": 0.5,
        "warps per SM": 4.0, "est. achieved occupancy %": 12, "External id": 3}),
    kernel("Memcpy DtoD", 45, 2, 2, cat="gpu_memcpy", bytes=1024,
           **{"memory bandwidth (GB/s)": 1.5}),
    span("Kernel", "old_kernel", 50, 1.5, pid=0, tid="stream 7", **{"external id": 9}),
    {"ph": "s", "id": 1, "pid": 1, "tid": 1, "ts": 20, "cat": "ac2g", "name": "ac2g"},
    {"ph": "f", "id": 1, "pid": 0, "tid": 7, "ts": 30, "cat": "ac2g", "name": "ac2g", "bp": "e"},
    {"ph": "i", "s": "t", "pid": 1, "tid": 1, "ts": 15, "cat": "cpu_instant_event",
     "name": "mark", "args": {}},
    memory_event(16, 4096, 512, 512, 2048),
    {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "python \u00e9"}},
    span("python_function", "f", 11, 3, **{"Python id": 4}),
]  # fmt: skip
SEEDS = [
    dumps(document(_EVENTS)).encode(),
    dumps(document(_EVENTS[:6], rank=1, displayTimeUnit="ms")).encode(),
    json.dumps(_EVENTS, indent=1, ensure_ascii=False).encode(),
]
# Bytes a mutation writes: JSON's structural characters and the scanner's special cases.
_ALPHABET = b'{}[],:"\\0123456789.-eE+ntfulrsaXMiBE\x00\x1f\x7f\xc3\xa9\xe2\x82\xff\n '


def mutants(rng: random.Random) -> Iterator[bytes]:
    """Forever: a seed changed in one to four places, or cut short."""
    while True:
        data = bytearray(rng.choice(SEEDS))
        for _ in range(rng.randint(1, 4)):
            if data:  # a cut can leave nothing to change (the empty input is a mutant too)
                _mutate(rng, data)
        yield bytes(data)


def _mutate(rng: random.Random, data: bytearray) -> None:
    if not data:  # an earlier cut at 0 left nothing (randrange(0) raised: a flaky failure)
        return
    at = rng.randrange(len(data))
    how = rng.randrange(5)
    if how == 0:
        data[at] = rng.choice(_ALPHABET)
    elif how == 1:
        data[at:at] = bytes([rng.choice(_ALPHABET)])
    elif how == 2:
        del data[at : at + rng.randint(1, 8)]
    elif how == 3:
        start = rng.randrange(len(data))
        data[at:at] = data[start : start + rng.randint(1, 40)]
    else:
        del data[at:]


def _budget() -> Iterator[int]:
    """Counts rounds until the time is up (at least one)."""
    deadline = time.monotonic() + SECONDS
    rounds = 0
    while rounds == 0 or time.monotonic() < deadline:
        yield rounds
        rounds += 1


def test_the_scanner_never_crashes_on_mutants_fed_in_pieces() -> None:
    from traceanalyze.load import _scan  # type: ignore[attr-defined]

    rng = random.Random(SEED)
    source = mutants(rng)
    for _ in _budget():
        data = next(source)
        for _ in range(3):
            scanner = _scan.Scanner(fast.KINDS)
            view = memoryview(data)
            try:
                while view:
                    piece = view[: rng.randint(1, len(view))]
                    final = len(piece) == len(view)
                    used = scanner.feed(piece, final)
                    assert 0 <= used <= len(piece)
                    if final:
                        break
                    view = view[used:]  # what was not used comes again, with more
                scanner.result()
            except _scan.Unsupported:
                pass


def test_mutants_load_as_the_msgspec_path_loads_them(tmp_path: Path) -> None:
    rng = random.Random(SEED + 1)
    source = mutants(rng)
    path = tmp_path / "mutant.json"
    for _ in _budget():
        path.write_bytes(next(source))
        native, reference = _outcome(path, True), _outcome(path, False)
        if isinstance(native, str) or isinstance(reference, str):
            assert native == reference
        else:
            _assert_same(native, reference)


def _outcome(path: Path, native: bool) -> Trace | str:
    try:
        return parse_file(path, native=native)
    except TraceAnalyzeError as error:
        message = str(error)
        assert "\n" not in message
        return message


def _assert_same(left: Trace, right: Trace) -> None:
    assert left.meta == right.meta
    for name in TRACE_FRAMES:
        assert_frame_equal(getattr(left, name), getattr(right, name))
