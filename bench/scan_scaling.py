"""The C scanner alone on 1, 2, 4, ... threads: wall and CPU seconds of scanning one large file
cut into chunks at event boundaries as ``traceanalyze/load/parallel.py`` cuts it.

Needs only CPython and the built ``_scan`` extension (no Polars, no msgspec), so that it runs on
a many-core host where the rest of the stack is not installed; it says nothing about frames or
linking (``load_bench.py --threads`` measures the full load). The file is a trace repeated
``--copies`` times (default: the largest sample trace in the repository), written to a
temporary folder.

    python setup.py -q build_ext --inplace && python bench/scan_scaling.py --threads 1,2,4,8,16
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import re
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = REPO / "sample_traces" / "h200_cold_new_shape" / "compiled_naive.json.gz"
BOUNDARY = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")  # as parallel._BOUNDARY
# Category -> kind code for the categories of Kineto traces (fast.KINDS, which needs Polars to
# import; tests/test_scan_tables.py checks these against it).
KINDS = {"kernel": 1, "gpu_memcpy": 1, "gpu_memset": 1, "cpu_op": 2, "user_annotation": 2,
         "cuda_runtime": 3, "cuda_driver": 3, "python_function": 9, "cpu_instant_event": 4,
         "Trace": 4, "overhead": 4, "gpu_user_annotation": 4}  # fmt: skip


def load_scan() -> Any:
    """The built extension, loaded by path (importing the package would import Polars)."""
    found = sorted((REPO / "traceanalyze" / "load").glob("_scan*.so"))
    if not found:
        raise SystemExit("build it first: python setup.py -q build_ext --inplace")
    spec = importlib.util.spec_from_file_location("_scan", found[-1])
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def repeated(trace: Path, copies: int, target: Path) -> bytes:
    text = gzip.decompress(trace.read_bytes()) if trace.suffix == ".gz" else trace.read_bytes()
    start = text.index(b"[", text.index(b'"traceEvents"')) + 1
    end = text.rindex(b"]")
    head, events, tail = text[:start], text[start:end].strip().rstrip(b","), text[end:]
    data = head + b",\n".join([events] * copies) + b"\n" + tail
    target.write_bytes(data)
    return data


def cuts(data: bytes, chunk_bytes: int) -> list[tuple[int, int]]:
    """(start, end) of each chunk: from one event boundary to the next past the chunk size."""
    floor = data.find(b'"traceEvents"')
    spans, start = [], 0
    while True:
        found = BOUNDARY.search(data, max(start + chunk_bytes, floor))
        if found is None:
            spans.append((start, len(data)))
            return spans
        spans.append((start, found.start() + 1))
        start = found.end() - 1


def scan_chunk(scan: Any, view: memoryview, index: int, last: bool) -> int:
    scanner = scan.Scanner(KINDS)
    if index:  # the last chunk ends the document's object too
        scanner.feed(b'{"traceEvents":[' if last else b"[", False)
    if last:
        scanner.feed(view, True)
    else:
        used = scanner.feed(view, False)
        assert used == len(view), "a cut inside a string: pick another chunk size"
        scanner.feed(b"]" if index else b"]}", True)
    result: dict[str, Any] = scanner.result()
    return int(result["events"])


def timed(scan: Any, data: bytes, threads: int) -> tuple[float, float, int]:
    chunk = min(32 << 20, max(4 << 20, len(data) // (threads * 4)))
    spans = cuts(data, chunk)
    view = memoryview(data)
    wall, cpu = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(threads) as pool:
        futures = [
            pool.submit(scan_chunk, scan, view[a:b], i, i == len(spans) - 1)
            for i, (a, b) in enumerate(spans)
        ]
        events = sum(f.result() for f in futures)
    return time.perf_counter() - wall, time.process_time() - cpu, events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--copies", type=int, default=40)
    parser.add_argument("--threads", default="1,2,4,8")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    scan = load_scan()
    with tempfile.TemporaryDirectory() as folder:
        data = repeated(args.trace, args.copies, Path(folder) / "big.json")
    print(f"{args.trace.name} x{args.copies}: {len(data) / 1e6:.0f} MB; medians of {args.runs}")
    print(f"{'threads':>7} {'wall s':>8} {'CPU s':>8} {'MB/s':>8} {'speed-up':>9} events")
    one = None
    for threads in (int(n) for n in args.threads.split(",")):
        runs = [timed(scan, data, threads) for _ in range(args.runs)]
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        one = one or wall
        print(f"{threads:>7} {wall:>8.3f} {cpu:>8.3f} {len(data) / 1e6 / wall:>8.0f} "
              f"{one / wall:>8.2f}x {runs[0][2]}", flush=True)  # fmt: skip
    sys.stdout.flush()


if __name__ == "__main__":
    main()
