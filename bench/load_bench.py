"""Loader benchmark: traceanalyze vs a bare decode vs Holistic Trace Analysis, same machine.

Every measured load runs in a fresh subprocess (cold: nothing cached in memory, peak RSS is
that process's own), timed inside the process around the load alone (interpreter start and
imports excluded, for every contender alike). One extra row loads repeatedly in one process, as
a notebook or a report over many traces does.

``--long N`` adds the multi-GB case: the trace repeated N times in time (each copy shifted past
the one before, its correlation and external ids and step numbers renumbered, so the result is
one long valid trace), written to a temporary folder (never to the repository) and loaded raw
and as gzip, with HTA given ``--hta-timeout`` seconds.

    python bench/load_bench.py                       # the 175 MB trace in ../shared/bench
                                                     # (or $TRACEANALYZE_SHARED/bench)
    python bench/load_bench.py TRACE --runs 5 --hta-python /path/to/venv-with-hta/bin/python
    python bench/load_bench.py --runs 5 --long 14 --hta-python .venv/bin/python
    python bench/load_bench.py --targets --runs 5 [--long 12] [--baseline /tmp/base]
                                                     # issues 23 and 42's ratios, pass/fail
"""

from __future__ import annotations

import argparse
import gzip
import inspect
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
from peak import own_peak_rss_mb  # bench/peak.py, beside this script

REPO = Path(__file__).resolve().parents[1]
# The shared folder of test data: $TRACEANALYZE_SHARED, else ../shared beside the repository.
SHARED = Path(os.environ.get("TRACEANALYZE_SHARED") or REPO.parent / "shared")
DEFAULT_TRACE = SHARED / "bench" / "h200_train_175mb.json.gz"


def worker_parse(path: str, native: str = "1", threads: str = "0") -> dict[str, Any]:
    """Full load without the cache, stage by stage: ``traceanalyze.load(path, cache=False)``
    (``native`` "0": the msgspec path, through the parser; ``threads`` "0": the default,
    every core)."""
    import traceanalyze
    from traceanalyze.load.parse import parse_file

    stages: dict[str, float] = {}
    cpu_stages: dict[str, float] = {}  # CPU seconds (every thread): fair on a busy machine
    last = [time.perf_counter()]
    last_cpu = [time.process_time()]

    def mark(stage: str) -> None:
        now, now_cpu = time.perf_counter(), time.process_time()
        stages[stage] = now - last[0]
        cpu_stages[stage] = now_cpu - last_cpu[0]
        last[0], last_cpu[0] = now, now_cpu

    options: dict[str, Any] = {"timer": mark}
    load: Any = traceanalyze.load
    if native != "1":
        load, options["native"] = parse_file, False
    else:
        options["cache"] = False
    if "threads" in inspect.signature(load).parameters:  # not in a --baseline checkout
        options["threads"] = int(threads) or None
    start, start_cpu = last[0], last_cpu[0]
    trace = load(Path(path), **options)
    total = time.perf_counter() - start
    return {
        "seconds": total,
        "cpu_seconds": time.process_time() - start_cpu,
        "stages": stages,
        "cpu_stages": cpu_stages,
        "rss_mb": own_peak_rss_mb(),
        "gpu_rows": trace.gpu.height,
        "cpu_rows": trace.cpu.height,
    }


def worker_warm(path: str, runs: str) -> dict[str, Any]:
    """Several full loads (no cache) in one process, as a notebook or a multi-trace report
    does: the allocator's memory is already mapped after the first."""
    from traceanalyze.load.parse import parse_file

    times = []
    for _ in range(int(runs)):
        start = time.perf_counter()
        parse_file(Path(path))
        times.append(time.perf_counter() - start)
    return {"seconds": statistics.median(times[1:] or times), "rss_mb": own_peak_rss_mb()}


def worker_cached(path: str, cache_dir: str) -> dict[str, Any]:
    """Reload from a cache entry written by an earlier process."""
    from traceanalyze import load

    start = time.perf_counter()
    trace = load(path, cache_dir=cache_dir)
    return {
        "seconds": time.perf_counter() - start,
        "rss_mb": own_peak_rss_mb(),
        "rows": trace.gpu.height,
    }


class BareEvent(msgspec.Struct, gc=False):
    """The floor's event: the 7 fields every loader needs, typed, no args."""

    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float = 0.0
    dur: float = 0.0


class BareDocument(msgspec.Struct, gc=False):
    traceEvents: list[BareEvent] = []  # noqa: N815


def worker_bare(path: str) -> dict[str, Any]:
    """The floor: read + msgspec decode of the same events into structs of 7 typed fields (no
    args), garbage collection off; no frames, no linking."""
    import gc

    decoder = msgspec.json.Decoder(BareDocument)
    gc.disable()
    start, start_cpu = time.perf_counter(), time.process_time()
    document = decoder.decode(Path(path).read_bytes())
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "cpu_seconds": time.process_time() - start_cpu,
        "rss_mb": own_peak_rss_mb(),
        "events": len(document.traceEvents),
    }


def worker_hta(trace_dir: str) -> dict[str, Any]:
    import resource

    from hta.trace_analysis import TraceAnalysis

    # Beyond this HTA would crowd out the machine's other work: a MemoryError ends the run.
    limit = 14 * 1024**3
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    start = time.perf_counter()
    TraceAnalysis(trace_dir=trace_dir)
    return {"seconds": time.perf_counter() - start, "rss_mb": own_peak_rss_mb()}


WORKERS: dict[str, Callable[..., dict[str, Any]]] = {
    "parse": worker_parse,
    "warm": worker_warm,
    "cached": worker_cached,
    "bare": worker_bare,
    "hta": worker_hta,
}


def run_worker(
    python: str,
    name: str,
    *args: str,
    timeout: float | None = None,
    checkout: Path | None = None,
) -> dict[str, Any]:
    """One measurement in a fresh process; ``checkout``: import traceanalyze from that source
    tree instead of this one (``--baseline``)."""
    command = [python, __file__, "--worker", name, *args]
    env = None
    if checkout is not None:
        env = {**os.environ, "PYTHONPATH": str(checkout), "PYTHONSAFEPATH": "1"}
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, check=False, timeout=timeout, env=env
        )
    except subprocess.TimeoutExpired:
        return {"seconds": float("nan"), "rss_mb": float("nan"), "timeout": timeout}
    if result.returncode != 0 and name == "hta":
        return {"seconds": float("nan"), "rss_mb": float("nan"), "failed": result.stderr[-300:]}
    if result.returncode != 0:
        raise SystemExit(f"{name} worker failed:\n{result.stderr[-3000:]}")
    measured: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return measured


Measured = tuple[float, float, list[dict[str, Any]]]  # median seconds, peak RSS, every run


def median_of(python: str, runs: int, name: str, *args: str) -> Measured:
    return _summary([run_worker(python, name, *args) for _ in range(runs)])


def interleaved(python: str, runs: int, names: tuple[str, str], *args: str) -> list[Measured]:
    """Runs of two workers taken in turns (A B A B ...), so that both see the same machine:
    on a shared host the speed drifts within minutes, and their ratio is the figure to trust."""
    results: list[list[dict[str, Any]]] = [[], []]
    for _ in range(runs):
        for index, name in enumerate(names):
            results[index].append(run_worker(python, name, *args))
    return [_summary(r) for r in results]


def _summary(results: list[dict[str, Any]]) -> Measured:
    return (
        statistics.median(r["seconds"] for r in results),
        max(r["rss_mb"] for r in results),
        results,
    )


Row = tuple[str, float, float, str]


def make_long_pair(raw: Path, work: Path, copies: int) -> tuple[Path, Path]:
    """The trace repeated ``copies`` times, raw and gzipped, written under ``work``."""
    long_raw = work / "long" / f"long_{copies}x.json"
    long_raw.parent.mkdir()
    make_long_trace(raw, long_raw, copies)
    long_gz = work / f"long_{copies}x.json.gz"
    make_long_trace(raw, long_gz, copies, compress=True)
    return long_raw, long_gz


def make_long_trace(raw: Path, target: Path, copies: int, compress: bool = False) -> None:
    """``raw`` repeated ``copies`` times in time as one valid trace (see the module doc)."""
    text = raw.read_bytes()
    start = text.index(b"[", text.index(b'"traceEvents"')) + 1
    end = text.rindex(b"]")
    head, events, tail = text[:start], text[start:end].rstrip().rstrip(b","), text[end:]
    stamps = [float(m) for m in re.findall(rb'"ts": ([-0-9.]+)', events)]
    span_us = int(max(stamps) - min(stamps)) + 1_000_000
    numbered = re.compile(rb'("(?:ts|correlation|External id|id)": )(\d+)|ProfilerStep#(\d+)')
    with gzip.open(target, "wb", compresslevel=1) if compress else target.open("wb") as out:
        out.write(head)
        for copy in range(copies):

            def shift(match: re.Match[bytes], copy: int = copy) -> bytes:
                if match.group(3) is not None:
                    return b"ProfilerStep#%d" % (int(match.group(3)) + copy * 100_000)
                step = span_us if match.group(1).startswith(b'"ts"') else 10_000_000
                return match.group(1) + b"%d" % (int(match.group(2)) + copy * step)

            out.write(b",\n" if copy else b"\n")
            out.write(numbered.sub(shift, events))
        out.write(b"\n" + tail)


def bench_one(python: str, trace: Path, raw: Path, runs: int, hta: str | None) -> list[Row]:
    """The rows for one raw trace (and its .gz ``trace`` when given)."""
    size_mb = raw.stat().st_size / 1e6
    rows: list[Row] = []
    (t_raw, rss_raw, results), (t_bare, rss_bare, _) = interleaved(
        python, runs, ("parse", "bare"), str(raw)
    )
    stages = {k: statistics.median(r["stages"][k] for r in results) for k in results[0]["stages"]}
    rows.append((f"traceanalyze, raw JSON ({size_mb:.0f} MB)", t_raw, rss_raw, "C scanner"))
    rows.append(("bare read + msgspec decode (floor)", t_bare, rss_bare, "7 fields, no args"))
    t_py, rss_py, _ = median_of(python, max(1, runs // 2), "parse", str(raw), "0")
    rows.append(("traceanalyze, msgspec path (no C)", t_py, rss_py, "fallback"))
    if trace.suffix == ".gz":
        t_gz, rss_gz, _ = median_of(python, runs, "parse", str(trace))
        rows.append(("traceanalyze, .json.gz directly", t_gz, rss_gz, "streamed"))
    print(
        f"{raw.name}: full / floor {t_raw / t_bare:.2f}x; stages (median s): "
        + ", ".join(f"{k} {v:.3f}" for k, v in stages.items()),
        flush=True,
    )
    if hta:
        timeout = ARGS_HTA_TIMEOUT[0]
        measured = run_worker(hta, "hta", str(raw.parent), timeout=timeout)
        note = (
            "1 run"
            if "timeout" not in measured and "failed" not in measured
            else (
                f"did not finish in {timeout:.0f} s" if "timeout" in measured else "failed (memory)"
            )
        )
        rows.append(
            ("HTA TraceAnalysis(trace_dir=...)", measured["seconds"], measured["rss_mb"], note)
        )
        if measured["seconds"] == measured["seconds"]:
            print(f"HTA / traceanalyze: {measured['seconds'] / t_raw:.1f}x", flush=True)
    return rows


def bench_threads(python: str, raw: Path, runs: int, counts: list[int]) -> None:
    """Full loads with 1, 2, ... scanner threads and the floor, in turns; threads=1 is the
    single scanner of before (the same code path as main before issue 23)."""
    names = [str(n) for n in counts]
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in ["floor", *names]}
    for _ in range(runs):
        results["floor"].append(run_worker(python, "bare", str(raw)))
        for name in names:
            results[name].append(run_worker(python, "parse", str(raw), "1", name))
    floor = statistics.median(r["seconds"] for r in results["floor"])
    one = statistics.median(r["seconds"] for r in results[names[0]])
    print(f"threads on {raw.name} ({raw.stat().st_size / 1e6:.0f} MB), medians of {runs}; "
          f"floor (bare msgspec decode, 7 fields) {floor:.3f} s")  # fmt: skip
    print(f"{'threads':>7} {'seconds':>8} {'/ floor':>8} {'speed-up':>9} {'RSS MB':>8}  stages")
    for name in names:
        runs_of = results[name]
        seconds = statistics.median(r["seconds"] for r in runs_of)
        stages = {
            k: statistics.median(r["stages"][k] for r in runs_of) for k in runs_of[0]["stages"]
        }
        print(
            f"{name:>7} {seconds:>8.3f} {seconds / floor:>7.2f}x {one / seconds:>8.2f}x "
            f"{max(r['rss_mb'] for r in runs_of):>8.0f}  "
            + ", ".join(f"{k} {v:.3f}" for k, v in stages.items()),
            flush=True,
        )


def scaling(python: str, args: argparse.Namespace, raw: Path, work: Path) -> None:
    counts = [int(n) for n in args.threads.split(",")]
    if not args.long_only:
        bench_threads(python, raw, args.runs, counts)
    if args.long:
        long_raw = work / "long" / f"long_{args.long}x.json"
        long_raw.parent.mkdir()
        make_long_trace(raw, long_raw, args.long)
        bench_threads(python, long_raw, max(1, args.runs // 2), counts)


# The targets (issues 23 and 42): (name, limit, "max" or "min"); a ratio passes when it is at
# most (max) or at least (min) the limit. Issue 42 (read, don't map; no signal handlers) asks
# for the speed of the code before it, within 5%: timed in turns with --baseline.
TARGETS = {
    "175 MB load / bare msgspec decode": (0.4, "max"),
    "175 MB load / --baseline's, in turns (issue 42)": (1.05, "max"),
    "2 GB load / --baseline's, in turns (issue 42)": (1.05, "max"),
    "2 GB load / 175 MB load": (12.5, "max"),
    "2 GB peak RSS / its JSON size": (1.0, "max"),
    "2 GB .json.gz load / raw load": (1.5, "max"),
    "2 GB .json.gz load / --baseline's, in turns": (1.05, "max"),
}


def _median(results: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in results)


def targets(python: str, args: argparse.Namespace, raw: Path, work: Path) -> None:
    """Every target of issue 23 as a ratio within this run (wall and CPU seconds), pass/fail.
    The 175 MB loads (default threads, one thread) and the floor run in turns."""
    runs: dict[str, list[dict[str, Any]]] = {"floor": [], "one": [], "all": []}
    if args.baseline:
        runs["baseline"] = []
    for _ in range(args.runs):
        runs["floor"].append(run_worker(python, "bare", str(raw)))
        runs["one"].append(run_worker(python, "parse", str(raw), "1", "1"))
        runs["all"].append(run_worker(python, "parse", str(raw), "1", "0"))
        if args.baseline:
            runs["baseline"].append(
                run_worker(python, "parse", str(raw), "1", "0", checkout=args.baseline)
            )
    wall = {name: _median(results, "seconds") for name, results in runs.items()}
    cpu = {name: _median(results, "cpu_seconds") for name, results in runs.items()}
    for label, figures in (("wall", wall), ("CPU", cpu)):
        print(f"175 MB medians, {label} s: " + ", ".join(f"{name} {value:.3f}" for name, value in
              figures.items()))  # fmt: skip
    for name, results in runs.items():
        print(f"175 MB {name}, wall s: " + " ".join(f"{r['seconds']:.3f}" for r in results))
    # Not a target of the issue (before --baseline existed it stood in for "2x main"): how far
    # the default threads beat one, with linking on one core whatever the threads.
    print(f"175 MB one scanner thread / default threads: wall {wall['one'] / wall['all']:.2f}, "
          f"CPU {cpu['one'] / cpu['all']:.2f}")  # fmt: skip
    measured: dict[str, tuple[float, float | None]] = {
        "175 MB load / bare msgspec decode": (
            wall["all"] / wall["floor"], cpu["all"] / cpu["floor"]),
    }  # fmt: skip
    if args.baseline:
        measured["175 MB load / --baseline's, in turns (issue 42)"] = _ratios(
            runs["all"], runs["baseline"]
        )
    t_175, cpu_175 = wall["all"], cpu["all"]
    if args.long:
        long_targets(python, args, raw, work, measured, t_175, cpu_175)
    print_targets(measured)


def _ratios(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> tuple[float, float | None]:
    """Median wall and CPU seconds of ``ours`` over those of ``theirs``."""
    return (
        _median(ours, "seconds") / _median(theirs, "seconds"),
        _median(ours, "cpu_seconds") / _median(theirs, "cpu_seconds"),
    )


def long_targets(
    python: str,
    args: argparse.Namespace,
    raw: Path,
    work: Path,
    measured: dict[str, tuple[float, float | None]],
    t_175: float,
    cpu_175: float,
) -> None:
    """The 2 GB targets: the long trace raw and gzipped (and --baseline's loads of both, in
    turns with these)."""
    long_raw, long_gz = make_long_pair(raw, work, args.long)
    size_mb = long_raw.stat().st_size / 1e6
    names = ["big", "gz", *(["big base", "gz base"] if args.baseline else [])]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for _ in range(max(1, args.runs // 2)):
        for name in names:
            path = long_gz if name.startswith("gz") else long_raw
            checkout = args.baseline if name.endswith("base") else None
            runs[name].append(run_worker(python, "parse", str(path), checkout=checkout))
    for name, results in runs.items():
        print(f"{size_mb:.0f} MB {name}: {_median(results, 'seconds'):.2f} s "
              f"(CPU {_median(results, 'cpu_seconds'):.2f}), peak "
              f"{max(r['rss_mb'] for r in results):.0f} MB; wall "
              + " ".join(f"{r['seconds']:.2f}" for r in results))  # fmt: skip
    big, gz = runs["big"], runs["gz"]
    measured["2 GB load / 175 MB load"] = (
        _median(big, "seconds") / t_175, _median(big, "cpu_seconds") / cpu_175)  # fmt: skip
    measured["2 GB peak RSS / its JSON size"] = (max(r["rss_mb"] for r in big) / size_mb, None)
    measured["2 GB .json.gz load / raw load"] = _ratios(gz, big)
    if args.baseline:
        measured["2 GB load / --baseline's, in turns (issue 42)"] = _ratios(big, runs["big base"])
        measured["2 GB .json.gz load / --baseline's, in turns"] = _ratios(gz, runs["gz base"])


def print_targets(measured: dict[str, tuple[float, float | None]]) -> None:
    print(f"{'target':<64} {'limit':>7} {'wall':>7} {'CPU':>7}  verdict (wall)")
    for name, (limit, how) in TARGETS.items():
        if name not in measured:
            dashes = f"{'-':>7} {'-':>7}"
            print(f"{name:<64} {limit:>7.2f} {dashes}  not measured (--long N, --baseline DIR)")
            continue
        wall, cpu = measured[name]
        ok = wall <= limit if how == "max" else wall >= limit
        cpu_text = f"{cpu:>7.2f}" if cpu is not None else f"{'-':>7}"
        print(f"{name:<64} {limit:>7.2f} {wall:>7.2f} {cpu_text}  {'PASS' if ok else 'FAIL'}")
    print("64-rank folder (cold cache) 2x faster: measured by bench/ranks_bench.py, not here")


ARGS_HTA_TIMEOUT = [600.0]


def print_rows(title: str, rows: list[Row]) -> None:
    print(title)
    print(f"{'contender':<44} {'seconds':>8} {'peak RSS MB':>12}  note")
    for name, seconds, rss, note in rows:
        print(f"{name:<44} {seconds:>8.3f} {rss:>12.0f}  {note}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--hta-python", help="a Python with hta installed (skipped if absent)")
    parser.add_argument("--long", type=int, default=0, help="also the trace repeated N times")
    parser.add_argument("--long-only", action="store_true", help="only the --long case")
    parser.add_argument("--hta-timeout", type=float, default=600.0)
    parser.add_argument(
        "--threads", help="only the thread scaling: comma-separated counts, e.g. 1,2,4,8"
    )
    parser.add_argument(
        "--targets", action="store_true", help="only the targets (issues 23, 42): ratios, pass/fail"
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="a source checkout (its C scanner built in place) timed in turns with this one: "
        "git worktree add /tmp/base main && (cd /tmp/base && python setup.py build_ext "
        "--inplace)",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.worker:
        print(json.dumps(WORKERS[args.worker](str(args.trace), *rest)))
        return
    ARGS_HTA_TIMEOUT[0] = args.hta_timeout
    python = sys.executable
    # here, not at the top: a --baseline worker runs with PYTHONSAFEPATH, without this folder
    from precompile import compile_bytecode  # bench/precompile.py

    compile_bytecode(REPO, *([args.baseline] if args.baseline else []))
    work = Path(tempfile.mkdtemp(prefix="traceanalyze-bench-"))
    try:
        raw = work / "raw" / args.trace.name.removesuffix(".gz")
        raw.parent.mkdir()
        opener = gzip.open if args.trace.suffix == ".gz" else open
        with opener(args.trace, "rb") as src, raw.open("wb") as dst:
            shutil.copyfileobj(src, dst)
        print(f"trace: {args.trace} ({raw.stat().st_size / 1e6:.0f} MB raw), {args.runs} runs")
        if args.threads:
            scaling(python, args, raw, work)
            return
        if args.targets:
            targets(python, args, raw, work)
            return
        if not args.long_only:
            rows = bench_one(python, args.trace, raw, args.runs, args.hta_python)
            warm = run_worker(python, "warm", str(raw), str(args.runs + 1))
            rows.append(("traceanalyze, raw JSON, in one process", warm["seconds"],
                         warm["rss_mb"], f"median of loads 2..{args.runs + 1}"))  # fmt: skip
            cache_dir = work / "cache"
            run_worker(python, "cached", str(raw), str(cache_dir))  # writes the entry
            t_cache, rss_cache, _ = median_of(python, args.runs, "cached", str(raw), str(cache_dir))
            rows.append(("traceanalyze, reload from Parquet cache", t_cache, rss_cache, ""))
            print_rows("medians:", rows)
        if args.long:
            long_raw, long_gz = make_long_pair(raw, work, args.long)
            size_gb = long_raw.stat().st_size / 1e9
            print(f"long trace: {args.long} copies, {size_gb:.2f} GB raw", flush=True)
            rows = bench_one(python, long_gz, long_raw, max(1, args.runs // 2), args.hta_python)
            print_rows(f"long trace ({size_gb:.2f} GB), medians:", rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
