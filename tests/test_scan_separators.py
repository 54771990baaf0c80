"""The scanner's learned separators and eight-digit numbers never change a parse.

The scanner remembers the bytes between one member's value and the next value (white space,
comma, key, colon) at each key position, and takes the key as known where the next bytes are
equal. These documents repeat a layout long enough for it to be learned and then break it in
the ways that matter: a key one byte off, a key that extends a learned one, more or other white
space, keys reordered, a key twice, keys past the positions remembered, separators longer than
remembered, and numbers of every length around the eight-byte steps. Each must load exactly as
the msgspec reference loads it (or fail with its message), whole and fed in pieces that cut the
learned separators anywhere.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.test_load_reading import _pieces, _result
from tests.test_scan_fuzz import _assert_same, _outcome
from traceanalyze.load import fast

pytestmark = pytest.mark.skipif(not fast.AVAILABLE, reason="the C scanner is not built")

_OP = (
    '{\n    "ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,\n'
    '    "ts": TS, "dur": 2.5,\n    "args": {\n      "External id": EXT,"Record function id": 0,'
    ' "Input Dims": [[8, 512], []], "Input type": ["float", ""], "Ev Idx": EXT\n    }\n  }'
)
_KERNEL = (
    '{\n    "ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7,\n'
    '    "ts": TS, "dur": 1.25,\n    "args": {\n      "External id": EXT,      "device": 0,'
    ' "stream": 7, "correlation": EXT,      "grid": [4, 1, 1],      "block": [128, 1, 1]\n'
    "    }\n  }"
)
_CALL = (
    '{\n    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,\n'
    '    "ts": TS, "dur": 1,\n    "args": {\n      "External id": EXT, "correlation": EXT\n'
    "    }\n  }"
)
_PYTHON = (
    '{\n    "ph": "X", "cat": "python_function", "name": "model.py(12): forward", "pid": 1,'
    ' "tid": 1,\n    "ts": TS, "dur": 3.125,\n    "args": {\n      "Python parent id": null,'
    ' "Python id": EXT, "Ev Idx": EXT\n    }\n  }'
)

# One event of a learned layout, changed where a learned separator would be compared.
_BREAKS = [
    lambda e: e.replace('"ts":', '"tz":', 1),  # a key one byte off: not read, no ts
    lambda e: e.replace('"ts":', '"tsx":', 1),  # a key that extends a learned one
    lambda e: e.replace('"dur": ', '"dur":   \t', 1),  # more white space after the colon
    lambda e: e.replace('"dur": ', '"dur":', 1),  # less
    lambda e: e.replace(",\n    ", ",\r\n\t", 2),  # other white space before the keys
    lambda e: e.replace(', "cat"', ' , "cat"', 1),  # white space before the comma
    lambda e: e.replace('"ph": "X", "cat": ', '"cat": ', 1).replace('"pid"', '"ph": "X", "pid"'),
    lambda e: e.replace('"args": {', '"args": {"a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "f": 6,'
                        ' "g": 7, "h": 8, "i": 9, "j": 10, "k": 11, "l": 12, "m": 13, "n": 14,'
                        ' "o": 15, "p": 16, "q": 17, "External id": 99,', 1),  # past 16 keys
    lambda e: e.replace('"ts":', '                                    "ts":', 1),  # > 32 bytes
    lambda e: e.replace('"Input Dims"', '"Input Dim"', 1),
    lambda e: e.replace('"External id": ', '"External id":\n', 1),
    lambda e: e.replace("Input Dims", "Input Dims" + " " * 40, 1),  # a long unknown key
]  # fmt: skip
# Breaks the scanner declines (the msgspec path then reads or rejects the file).
_DECLINED = [
    lambda e: e.replace('"pid": 1', '"pid": 1, "pid": 2', 1),  # a key twice
    lambda e: e.replace('"name"', '"na\\u006de"', 1),  # an escaped key
    lambda e: e.replace("}\n  }", "\n    ,}\n  }", 1),  # a trailing comma: an error
]  # fmt: skip


def _number(rng: random.Random, digits: int, fraction: int) -> str:
    # 16 digits from 1 (below 2**63 ns: the scanner declines larger plain timestamps)
    first = 1 if digits == 16 else rng.randint(1, 9)
    whole = str(first) + "".join(rng.choice("0123456789") for _ in range(digits - 1))
    if not fraction:
        return whole
    return whole + "." + "".join(rng.choice("0123456789") for _ in range(fraction))


def _events(rng: random.Random, count: int) -> Iterator[str]:
    templates = [_OP, _KERNEL, _CALL, _PYTHON]
    for index in range(count):
        event = rng.choice(templates)
        # timestamps of 1-16 integer digits and 0-11 fraction digits (the steps are 8 bytes);
        # more than 3 only below 2**43 us (beyond, the scanner declines such timestamps)
        fraction = rng.choice([0, 1, 2, 3, 4, 7, 8, 9, 11])
        ts = _number(rng, rng.randint(1, 16 if fraction <= 3 else 12), fraction)
        external = str(rng.randint(0, 10 ** rng.randint(0, 18)))
        event = event.replace("TS", ts).replace("EXT", external)
        if rng.random() < 0.15:
            event = rng.choice(_BREAKS)(event)
        yield event.replace("TS", str(index))


def _document(seed: int) -> bytes:
    rng = random.Random(seed)
    return ('{"schemaVersion": 1,\n  "traceEvents": [\n  ' + ",\n  ".join(_events(rng, 300))
            + "\n  ]\n}").encode()  # fmt: skip


@pytest.mark.parametrize("seed", range(12))
def test_learned_separators_load_as_the_reference(tmp_path: Path, seed: int) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(_document(seed))
    native, reference = _outcome(path, native=True), _outcome(path, native=False)
    if isinstance(reference, str) or isinstance(native, str):
        assert native == reference
    else:
        _assert_same(native, reference)


@pytest.mark.parametrize("seed", range(6))
def test_learned_separators_cut_anywhere_scan_as_one_buffer(seed: int) -> None:
    data = _document(100 + seed)
    rng = random.Random(seed)
    whole = _scan_outcome(iter([data]))
    assert _scan_outcome(_pieces(data, iter(lambda: rng.randint(1, 80), None))) == whole


def _scan_outcome(pieces: Iterator[bytes]) -> object:
    """The scanner's result, or why it declined (without the position in a chunk)."""
    try:
        return _result(pieces)
    except fast._scan.Unsupported as declined:
        return str(declined).split(" (near byte")[0]


@pytest.mark.parametrize("change", [*_BREAKS, *_DECLINED])
def test_a_layout_learned_then_broken_loads_as_the_reference(
    tmp_path: Path, change: Callable[[str], str]
) -> None:
    """Each break alone, after a run of one layout long enough to be learned; the scanner
    reads every break of _BREAKS itself (a learned separator must not make it decline)."""
    events = [_OP.replace("TS", str(i)).replace("EXT", str(i)) for i in range(20)]
    events.append(change(_OP.replace("TS", "20.5").replace("EXT", "20")))
    events.append(_OP.replace("TS", "21").replace("EXT", "21"))
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [\n  ' + ",\n  ".join(events) + "\n  ]}")
    scanned = _scan_outcome(iter([path.read_bytes()]))
    assert isinstance(scanned, str) == (change in _DECLINED), scanned
    native, reference = _outcome(path, native=True), _outcome(path, native=False)
    if isinstance(reference, str) or isinstance(native, str):
        assert native == reference
    else:
        _assert_same(native, reference)
