"""Recount the audit's findings from a trace's raw JSON, without traceanalyze: the hand check
behind docs/audit_findings.md.

    python scripts/audit_raw_check.py TRACE.json.gz [TRACE ...]

Plain ``gzip`` + ``json`` over ``traceEvents``, one simple loop per fault, on the trace's own
numbers (microseconds as written), so that a disagreement with `traceanalyze audit` points at
one of the two. Per trace it prints:

* launch calls (runtime/driver calls named like a launch, copy, set or graph launch, with a
  correlation) whose correlation no GPU event carries, split into those made between a
  Begin/EndCapture pair on their thread and the others;
* GPU events (kernel, gpu_memcpy, gpu_memset) whose correlation no runtime/driver call
  carries, split by whether it precedes every call's correlation (launched before the window);
* GPU events that start before the latest end so far on their (pid, stream), with the launch
  API of the later one and whether both come from one graph launch (``graph``) or the later
  was launched with an extended launch call (``ex``);
* step annotations (ProfilerStep#N, or any repeated user annotation) with a zero duration;
* GPU events carrying the correlation of a graph launch, and the capture calls in the trace;
* events at ts 0 and negative durations.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
CALL_CATS = {"cuda_runtime", "cuda_driver", "Runtime"}
LAUNCH = re.compile(
    r"^(cuda|cu|hip)\w*(LaunchKernel|LaunchCooperativeKernel|GraphLaunch|Memcpy|Memset)"
)
GRAPH = re.compile(r"GraphLaunch$")
EXTENDED = {"cudaLaunchKernelExC", "cuLaunchKernelEx"}


def events(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as handle:
        document = json.load(handle)
    found: list[dict[str, Any]] = (
        document["traceEvents"] if isinstance(document, dict) else document
    )
    return [e for e in found if isinstance(e, dict)]


def correlation(event: dict[str, Any]) -> Any:
    return (event.get("args") or {}).get("correlation")


def check(path: Path) -> None:
    every = events(path)
    spans = [e for e in every if e.get("ph") == "X"]
    gpu = [e for e in spans if e.get("cat") in GPU_CATS]
    calls = [e for e in spans if e.get("cat") in CALL_CATS and correlation(e) is not None]
    call_of = {correlation(c): c for c in calls}
    ran = {correlation(g) for g in gpu}
    print(f"== {path.name}: {len(gpu)} GPU events, {len(calls)} runtime/driver calls")
    _launches(calls, ran)
    _lone(gpu, call_of)
    _overlaps(gpu, call_of)
    _steps(spans)
    replayed = [g for g in gpu if GRAPH.search(call_of.get(correlation(g), {}).get("name", ""))]
    captures = sum("BeginCapture" in c["name"] for c in spans if c.get("cat") in CALL_CATS)
    print(f"  graph-replayed GPU events: {len(replayed)}; BeginCapture calls: {captures}")
    zero = sum(1 for e in spans if e.get("ts") == 0)
    negative = sum(1 for e in spans if (e.get("dur") or 0) < 0)
    print(f"  ts 0 events: {zero}; negative durations: {negative}")


def _launches(calls: list[dict[str, Any]], ran: set[Any]) -> None:
    captures: dict[Any, list[tuple[float, float]]] = defaultdict(list)
    begins: dict[Any, float] = {}
    for call in sorted(calls, key=lambda c: float(c["ts"])):
        if "BeginCapture" in call["name"]:
            begins[call["tid"]] = float(call["ts"])
        elif "EndCapture" in call["name"] and call["tid"] in begins:
            captures[call["tid"]].append((begins.pop(call["tid"]), float(call["ts"])))
    for tid, start in begins.items():  # a capture never ended
        captures[tid].append((start, float("inf")))
    missing = [c for c in calls if LAUNCH.match(c["name"]) and correlation(c) not in ran]
    captured = [
        c for c in missing if any(a <= float(c["ts"]) <= b for a, b in captures.get(c["tid"], []))
    ]
    dropped = [c for c in missing if c not in captured]
    by_name = dict(Counter(c["name"] for c in dropped))
    print(f"  launches without activity: {len(dropped)} dropped {by_name}, "
          f"{len(captured)} during a capture")  # fmt: skip
    for call in sorted(dropped, key=lambda c: float(c["ts"]))[:3]:
        print(f"    {call['name']} correlation {correlation(call)} at ts {call['ts']}")


def _lone(gpu: list[dict[str, Any]], call_of: dict[Any, dict[str, Any]]) -> None:
    first = min(call_of, default=None)
    lone = [g for g in gpu if correlation(g) not in call_of]
    before = [g for g in lone if first is not None and correlation(g) is not None
              and correlation(g) < first]  # fmt: skip
    print(f"  GPU events without a launch call: {len(lone)} ({len(before)} with a correlation "
          f"below the first call's, {first})")  # fmt: skip


def _overlaps(gpu: list[dict[str, Any]], call_of: dict[Any, dict[str, Any]]) -> None:
    streams: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    for g in gpu:
        streams[g.get("pid"), (g.get("args") or {}).get("stream", g.get("tid"))].append(g)
    kinds: Counter[str] = Counter()
    shown = []
    for (_, stream), rows in streams.items():
        rows.sort(key=lambda g: (float(g["ts"]), float(g["ts"]) + float(g["dur"])))
        latest, blocker = None, None
        for g in rows:
            start, end = float(g["ts"]), float(g["ts"]) + float(g["dur"])
            if latest is not None and start < latest and blocker is not None:
                api = call_of.get(correlation(g), {}).get("name")
                same = correlation(g) == correlation(blocker)
                kind = "graph" if same and api and GRAPH.search(api) else (
                    "duplicate" if same else "ex" if api in EXTENDED else "other"
                )  # fmt: skip
                kinds[kind] += 1
                shown.append((g["ts"], stream, g["name"][:40], blocker["name"][:40],
                               round(latest - start, 3), kind))  # fmt: skip
            if latest is None or end >= latest:
                latest, blocker = end, g
    print(f"  overlaps on a stream: {dict(kinds)}")
    for row in sorted(shown)[:3]:
        print(f"    ts {row[0]} stream {row[1]}: {row[2]} over {row[3]} by {row[4]} us ({row[5]})")


def _steps(spans: list[dict[str, Any]]) -> None:
    named = Counter(e["name"] for e in spans if e.get("cat") == "user_annotation")
    regions = [
        e
        for e in spans
        if e.get("cat") in ("user_annotation", "cpu_op")
        and (e["name"].startswith("ProfilerStep#") or named.get(e["name"], 0) >= 2)
        and e.get("cat") == "user_annotation"
    ]
    open_ = [e for e in regions if not e.get("dur")]
    print(f"  step regions with no duration: {[(e['name'], e['ts']) for e in open_]}")


if __name__ == "__main__":
    for given in sys.argv[1:]:
        check(Path(given))
