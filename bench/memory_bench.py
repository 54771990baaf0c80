"""Memory benchmark: a trace with 1 million ``[memory]`` events, loaded, and `memory` on it.

    python bench/memory_bench.py [TRACE] [--events 1000000] [--runs 3] [--work /tmp/membench]

The script builds two raw JSON files from TRACE (the 175 MB bench trace by default): the trace
plus ``--events`` profile_memory events (pairs of an allocation and its free inside a cpu_op
of the trace, on its thread, one in eight kept past its op), and a twin of exactly the same
bytes whose added events are named ``[memorx]``, which the loader counts and skips as it
skipped every memory event before they were loaded. Then, medians of ``--runs``:

- load (no cache) of the twin and of the memory trace: the cost of the memory frame is their
  difference, the same bytes parsed either way;
- `memory` beyond loading from the cache: the trace comes from the cache untimed, then the
  whole analysis (attribution, pairing, figures) is timed on that fresh Trace.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import os
import statistics
import tempfile
import time
from pathlib import Path

import polars as pl

from traceanalyze import load
from traceanalyze.analyses.memory.usage import memory

DEFAULT_TRACE = (
    Path(os.environ.get("TRACEANALYZE_SHARED") or Path(__file__).resolve().parents[2] / "shared")
    / "bench"
    / "h200_train_175mb.json.gz"
)
MARKER = b'"traceEvents": ['


def memory_events(source: Path, count: int) -> bytes:
    """``count`` [memory] events as JSON text (each followed by a comma), in pairs inside the
    trace's cpu_ops, with consistent totals on cuda:0."""
    cpu = load(source).cpu.filter((pl.col("cat") == "cpu_op") & (pl.col("dur_ns") > 4_000))
    pairs = count // 2
    ops = cpu.sample(pairs, with_replacement=True, seed=21).with_row_index("block")
    size = ((pl.col("block") % 64) + 1) * 512
    # One block in eight outlives its op (freed a millisecond later); the rest are temporaries.
    free_at = pl.when(pl.col("block") % 8 == 0).then(pl.col("ts_ns") + 1_000_000)
    allocations = ops.select(
        "pid", "tid", ts_ns=pl.col("ts_ns") + pl.col("dur_ns") // 4, addr=0x7F0000000000
        + pl.col("block").cast(pl.Int64) * 65536, bytes=size.cast(pl.Int64),
        free_ns=free_at.otherwise(pl.col("ts_ns") + pl.col("dur_ns") * 3 // 4),
    )  # fmt: skip
    frees = allocations.select("pid", "tid", "addr", ts_ns="free_ns", bytes=-pl.col("bytes"))
    events = (
        pl.concat([allocations.drop("free_ns"), frees.select(allocations.drop("free_ns").columns)])
        .sort("ts_ns")
        .with_columns(total=pl.col("bytes").cum_sum() + 2**30)
    )
    ts_us = pl.concat_str(
        (pl.col("ts_ns") // 1000).cast(pl.String),
        pl.lit("."),
        (pl.col("ts_ns") % 1000).cast(pl.String).str.zfill(3),
    )
    text = events.select(
        pl.concat_str(
            pl.lit('{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": '),
            pl.col("pid").cast(pl.String),
            pl.lit(', "tid": '),
            pl.col("tid").cast(pl.String),
            pl.lit(', "ts": '),
            ts_us,
            pl.lit(', "args": {"Total Reserved": 4294967296, "Total Allocated": '),
            pl.col("total").cast(pl.String),
            pl.lit(', "Bytes": '),
            pl.col("bytes").cast(pl.String),
            pl.lit(', "Addr": '),
            pl.col("addr").cast(pl.String),
            pl.lit(', "Device Id": 0, "Device Type": 1}},\n'),
        )
    ).to_series()
    return "".join(text.to_list()).encode()


def build(source: Path, count: int, work: Path) -> tuple[Path, Path]:
    """The memory trace and its twin (same bytes, events renamed), written once to ``work``."""
    with_memory = work / f"memory_{count}.json"
    twin = work / f"memorx_{count}.json"
    if with_memory.is_file() and twin.is_file():
        return with_memory, twin
    work.mkdir(parents=True, exist_ok=True)
    original = gzip.decompress(source.read_bytes())
    at = original.index(MARKER) + len(MARKER)
    added = memory_events(source, count)
    with_memory.write_bytes(original[:at] + added + original[at:])
    twin.write_bytes(original[:at] + added.replace(b"[memory]", b"[memorx]") + original[at:])
    return with_memory, twin


def timed(action: object, runs: int) -> tuple[float, float]:
    """Medians of wall and CPU (all threads) seconds: on a shared machine the CPU time is the
    steadier figure, and on an idle one the wall time is at most it."""
    walls, cpus = [], []
    for _ in range(runs):
        gc.collect()
        wall, cpu = time.perf_counter(), time.process_time()
        action()  # type: ignore[operator]
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def alternating(first: object, second: object, runs: int) -> tuple[tuple[float, float], ...]:
    """``first`` and ``second`` in turns (A B A B ...), so that a change in the machine's load
    hits both alike."""
    pairs = [(timed(first, 1), timed(second, 1)) for _ in range(runs)]
    return tuple(
        (statistics.median(p[i][0] for p in pairs), statistics.median(p[i][1] for p in pairs))
        for i in (0, 1)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "membench")
    args = parser.parse_args()
    with_memory, twin = build(args.trace, args.events, args.work)
    cache = args.work / "cache"
    skipped, kept = alternating(
        lambda: load(twin, cache=False), lambda: load(with_memory, cache=False), args.runs
    )
    trace = load(with_memory, cache_dir=cache)
    print(f"{trace.memory.height:,} memory events in {with_memory} "
          f"({with_memory.stat().st_size / 1e6:,.0f} MB)")  # fmt: skip
    cached, analysed = alternating(
        lambda: load(with_memory, cache_dir=cache),
        lambda: memory(load(with_memory, cache_dir=cache)),
        args.runs,
    )
    print("seconds (median wall, median CPU of all threads)")
    print(f"load, memory events skipped (twin): {skipped[0]:.3f}  {skipped[1]:.3f}")
    added = f"+{kept[0] / skipped[0] - 1:.0%} wall, +{kept[1] / skipped[1] - 1:.0%} CPU"
    print(f"load, memory events kept:           {kept[0]:.3f}  {kept[1]:.3f}  ({added})")
    print(f"memory beyond loading from the cache: {analysed[0] - cached[0]:.3f}  "
          f"{analysed[1] - cached[1]:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
