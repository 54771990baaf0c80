"""The fuzzer's differential check: on every input that both the C scanner and the msgspec
path accept, the Trace built from the C scanner's columns equals the msgspec path's (every
frame, the metadata, the iteration source); and the threaded loader, cutting the input into
chunks of a few dozen bytes, gives what one scanner gives (or declines to one scanner).

    python fuzz/differential.py DIR... [--max-files N]

Run over the fuzzer's corpus (fuzz/corpus and what a run found): exits 1, naming each input
that differs, with what differs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

from polars.testing import assert_frame_equal

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from traceanalyze.errors import TraceAnalyzeError  # noqa: E402
from traceanalyze.load import fast, parallel  # noqa: E402
from traceanalyze.load.parse import parse_file  # noqa: E402
from traceanalyze.schema import TRACE_FRAMES  # noqa: E402
from traceanalyze.trace import Trace  # noqa: E402


def same(left: Trace, right: Trace) -> None:
    assert left.meta == right.meta, "meta"
    assert left.iteration_source == right.iteration_source, "iteration source"
    for name in TRACE_FRAMES:
        assert_frame_equal(getattr(left, name), getattr(right, name))


def outcome(path: Path, **options: object) -> Trace | TraceAnalyzeError:
    try:
        return parse_file(path, **options)  # type: ignore[arg-type]
    except TraceAnalyzeError as error:
        return error


def check(path: Path, tally: Counter[str]) -> str | None:
    """What differs for the input at ``path`` (None: nothing)."""
    try:
        fast.scan_file(path)
        taken = True
    except fast.Declined:
        taken = False
    except TraceAnalyzeError:
        taken = False  # unreadable or empty: no columns to compare
    native = outcome(path, threads=1)
    python = outcome(path, native=False)
    if taken and isinstance(native, Trace) and isinstance(python, Trace):
        tally["both accept"] += 1
        try:
            same(native, python)
        except AssertionError as exc:
            return f"C scanner and msgspec path differ: {exc}"
    elif taken:
        # the scanner took the JSON: what refuses it is the same code on both paths
        if isinstance(native, Trace) or isinstance(python, Trace):
            return f"one path refuses: C scanner {native!r}, msgspec path {python!r}"
        if (type(native), str(native)) != (type(python), str(python)):
            return f"different errors: C scanner {native!r}, msgspec path {python!r}"
        tally["both refuse the Trace alike"] += 1
    else:
        tally["C scanner declines"] += 1
    # the threaded loader in chunks of a few dozen bytes: one scanner's outcome
    threaded = outcome(path, threads=3, chunk_bytes=48)
    if isinstance(native, Trace) != isinstance(threaded, Trace):
        return f"threaded: {threaded!r} against one scanner's {native!r}"
    if isinstance(native, Trace):
        try:
            same(threaded, native)  # type: ignore[arg-type]
        except AssertionError as exc:
            return f"threaded loader and one scanner differ: {exc}"
    elif (type(native), str(native)) != (type(threaded), str(threaded)):
        return f"threaded error {threaded!r} against one scanner's {native!r}"
    return None


def _with_chunk_bytes() -> None:
    """parse_file(..., chunk_bytes=N): the threaded loader with chunks of N bytes."""
    from traceanalyze.load import parse

    scan_file = parallel.scan_file
    original = parse.parse_file

    def parse_with(
        path: Path, *args: object, chunk_bytes: int | None = None, **kw: object
    ) -> Trace:
        if chunk_bytes is None:
            return original(path, *args, **kw)  # type: ignore[arg-type]
        parallel.scan_file = lambda p, prog=None, threads=None: scan_file(  # type: ignore[assignment]
            p, prog, threads, chunk_bytes
        )
        try:
            return original(path, *args, **kw)  # type: ignore[arg-type]
        finally:
            parallel.scan_file = scan_file  # type: ignore[assignment]

    globals()["parse_file"] = parse_with


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--max-files", type=int, default=0)
    args = parser.parse_args()
    if not fast.AVAILABLE:
        print("differential: the C scanner is not built")
        return 1
    _with_chunk_bytes()
    inputs = sorted(p for folder in args.folders if folder.is_dir() for p in folder.iterdir())
    if args.max_files:
        inputs = inputs[: args.max_files]
    tally: Counter[str] = Counter()
    failures = 0
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        for index, source in enumerate(inputs):
            # a name the loader reads as a trace (the corpus' names are hashes)
            path = Path(work) / f"input{index}.json"
            try:
                path.write_bytes(source.read_bytes())
            except FileNotFoundError:
                continue  # a running fuzzer replaced it with a smaller one
            try:
                problem = check(path, tally)
            except Exception:  # a crash of the loader itself: a finding too
                problem = "raised:\n" + traceback.format_exc()
            if problem is not None:
                failures += 1
                print(f"{source}: {problem}")
            path.unlink()
    seconds = time.perf_counter() - start
    print(f"differential: {len(inputs)} inputs in {seconds:.0f} s, {failures} differ; "
          + ", ".join(f"{k} {v}" for k, v in sorted(tally.items())))  # fmt: skip
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
