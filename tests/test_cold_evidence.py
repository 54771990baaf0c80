"""Issue 38, item 9: cold figures from evidence. Micro-traces of calls that do not wait for
their GPU work (a running process's trace, as an ordinary capture records it), a warm
capture's manifest (untimed first call, untraced medians), and the cache events of a compile;
each with the exact figures expected."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import traceanalyze
from tests.micro import annotation, call, kernel, load, op, write_trace
from traceanalyze.analyses.cold.caches import (
    EVIDENCE_COLUMNS,
    TRACE_COMPILED,
    TRACE_HIT,
    cache_evidence,
)
from traceanalyze.analyses.cold.context import FROM_TRACE, IN_THIS_TRACE, TIMED_MEDIAN
from traceanalyze.analyses.cold.variants import ColdSet, cold_set
from traceanalyze.load.variants import Variant

Event = dict[str, Any]


def unsynced(cpu: list[float], gpu: list[float], *, before: bool = False) -> list[Event]:
    """Calls ``attn_iter<i>`` of one aten::bmm each that launch one kernel 10 µs before their
    CPU span ends and do not wait for it: the GPU runs the kernels back to back. ``before``: a
    set-up op and its kernel run before the first call."""
    events: list[Event] = []
    t, gpu_free = 100.0, 0.0
    if before:
        events += [op("aten::randn", 0, 50), call("cudaLaunchKernel", 10, 5, 99)]
        events.append(kernel("normal_kernel", 20, 5, 99))
        gpu_free = 25.0
    for i, (span, busy) in enumerate(zip(cpu, gpu, strict=True)):
        events += [
            annotation(f"attn_iter{i}", t, span),
            op("aten::bmm", t + 1, span - 2),
            call("cudaLaunchKernel", t + span - 10, 5, i + 1),
        ]
        start = max(gpu_free, t + span - 5)
        events.append(kernel("sgemm", start, busy, i + 1))
        gpu_free = start + busy
        t += span
    return events


# Issue 38's sdpa_math: the steady calls' CPU span is 1,103 µs while their GPU work takes
# 3,006.6 µs: the first call is compared with the steady call's wall time, not its CPU span.
MATH = unsynced([5000.0, 1103.0, 1110.0], [3000.0, 3006.6, 3010.0])


def test_steady_time_is_the_calls_wall_time_not_their_cpu_span(tmp_path: Path) -> None:
    result = cold_set([Variant("sdpa_math", None, load(tmp_path, MATH))], single=True)
    row = result.summary.row(0, named=True)
    assert (row["calls"], row["steady_calls"]) == (3, 2)
    assert row["first_call_us"] == pytest.approx(5000.0)
    assert row["steady_us"] == pytest.approx(3006.6)  # was 1,103 (the CPU span)
    assert row["excess_us"] == pytest.approx(1993.4)
    # The breakdown splits the CPU span: its total is the CPU side's excess.
    assert row["cpu_excess_us"] == pytest.approx(5000.0 - 1103.0)
    cpu = result.rows.filter(pl.col("side") == "cpu")
    assert cpu["excess_us"].sum() == pytest.approx(row["cpu_excess_us"])
    assert result.calls.select("call", "cpu_us", "wall_us").rows() == [
        (1, 5000.0, 5000.0),
        (2, 1103.0, pytest.approx(3006.6)),
        (3, 1110.0, 3010.0),
    ]


def test_a_first_call_in_a_running_process_says_so(tmp_path: Path) -> None:
    trace = load(
        tmp_path, unsynced([5000.0, 1103.0, 1110.0], [3000.0, 3006.6, 3010.0], before=True)
    )
    row = cold_set([Variant("sdpa_math", None, trace)], single=True).summary.row(0, named=True)
    assert row["first_call_in"] == IN_THIS_TRACE
    assert row["note"] == (
        "call 1 is the first call in this trace, not known to be a fresh process's first: "
        "work the process did before the trace began (a warm-up, earlier steps, another "
        "model) paid part of the one-off cost (this trace holds 1 operator and 1 GPU activity "
        "before call 1); a cold capture (`python -m capture --cold`) records fresh processes"
    )


def warm_folder(folder: Path, *, warm_up_calls: int | None = None) -> Path:
    """A warm capture's folder (median_ms of each variant, no cold record): traces of calls
    that do not wait for their GPU work, as a running process records them."""
    traces = {
        "naive": unsynced([4000.0, 600.0, 610.0], [900.0, 1000.0, 1010.0]),
        "sdpa_math": MATH,
        "sdpa_flash": unsynced([3000.0, 150.0, 152.0], [95.0, 95.0, 95.0]),
        # Faster than flash under the profiler, slower without it (the medians below).
        "sdpa_cudnn": unsynced([20000.0, 140.0, 141.0], [88.0, 88.0, 88.0]),
    }
    medians = {"naive": 0.9, "sdpa_math": 2.694, "sdpa_flash": 0.0943, "sdpa_cudnn": 0.0974}
    entries = {}
    for name, events in traces.items():
        write_trace(folder, events, f"{name}.json")
        entries[name] = {
            "status": "ok", "trace": f"{name}.json", "median_ms": medians[name], "repeats": 20,
        }  # fmt: skip
    method = {} if warm_up_calls is None else {"warm_up_calls": warm_up_calls}
    manifest = {"method": method, "config": {}, "variants": entries}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def warm_set(folder: Path, baseline: str | None = None) -> ColdSet:
    found = traceanalyze.load_variants([folder], cache=False)
    return cold_set(found.variants, baseline, manifest=found.manifests[0])


def test_a_warm_capture_checks_the_trace_against_its_untraced_median(tmp_path: Path) -> None:
    result = warm_set(warm_folder(tmp_path))
    row = result.summary.filter(pl.col("variant") == "sdpa_math").row(0, named=True)
    assert row["steady_us"] == pytest.approx(3006.6)
    assert (row["timed_steady_us"], row["timed_first_call_us"]) == (2694.0, None)
    assert row["timed_source"] == TIMED_MEDIAN.format(repeats=20)
    assert row["steady_vs_timed_pct"] == pytest.approx((3006.6 - 2694.0) / 2694.0 * 100)
    assert row["first_call_in"] == IN_THIS_TRACE
    # The advantage uses the same steady time as the row: 1,000 µs (naive) - 3,006.6 µs.
    assert row["advantage_source"] == FROM_TRACE
    assert row["advantage_us"] == pytest.approx(1000.0 - 3006.6)
    assert row["break_even_calls"] is None
    # Cheaper once (1,993.4 against naive's 3,000 µs) but slower per call.
    assert row["break_even_note"] == (
        "no break-even: 1,006.6 µs cheaper once but 2,006.6 µs per call slower than naive, so "
        "it falls behind after 1 more call (trace (under the profiler))"
    )


def test_an_advantage_the_untraced_medians_deny_has_no_break_even(tmp_path: Path) -> None:
    result = warm_set(warm_folder(tmp_path), baseline="sdpa_flash")
    row = result.summary.filter(pl.col("variant") == "sdpa_cudnn").row(0, named=True)
    assert row["advantage_us"] == pytest.approx(10.0)  # 150 - 140 µs under the profiler
    assert row["break_even_calls"] is None  # was a break-even from the profiled advantage
    assert row["break_even_note"] == (
        "no break-even: the timings disagree on whether it is faster per call than sdpa_flash "
        "(3.1 µs slower per call timed back to back (CUDA events, median_ms), 10.0 µs faster "
        "per call under the profiler)"
    )
    # The breakdown's rows take the traces' payback: none either.
    rows = result.causes.filter(pl.col("variant") == "sdpa_cudnn")
    assert rows["break_even_calls"].null_count() == rows.height


def test_a_warm_up_call_from_the_manifest_is_named(tmp_path: Path) -> None:
    result = warm_set(warm_folder(tmp_path, warm_up_calls=1))
    row = result.summary.filter(pl.col("variant") == "sdpa_math").row(0, named=True)
    assert row["first_call_in"] == "a process after 1 warm-up call (capture manifest)"
    assert str(row["note"]).startswith("1 warm-up call ran before profiling (manifest)")
    # The one-off work ran before profiling: no break-even from what is left of it.
    assert row["break_even_calls"] is None
    assert row["break_even_note"] == (
        "no break-even: sdpa_math and naive ran warm-up calls before profiling (manifest), so "
        "the one-off work is not in the trace"
    )


def compile_call(hit: bool) -> list[Event]:
    """call1 compiles: from AOTAutograd's cache (an ``X`` holding ``X (dynamo_timed)``, as
    torch 2.11 records it) or by lowering the graph (the annotation alone, as older torch
    records it); both import the generated module (PyCodeCache, either way). Calls 2 and 3
    run the compiled region."""
    events = [
        annotation("call1", 0, 1000),
        op("TorchDynamo Cache Lookup", 1, 2),
        op("_compile.compile_inner (dynamo_timed)", 10, 800),
    ]
    if hit:
        events += [
            op("AOTAutogradCache.inductor_load", 20, 300),
            op("AOTAutogradCache.inductor_load (dynamo_timed)", 21, 298),
        ]
    else:
        events.append(annotation("fx_codegen_and_compile (dynamo_timed)", 20, 300))
    events.append(annotation("PyCodeCache.load_by_key_path (dynamo_timed)", 400, 100))
    for i, start in ((1, 900), (2, 1000), (3, 1100)):
        if i > 1:
            events.append(annotation(f"call{i}", start, 100))
        events += [op("Torch-Compiled Region: 0/0", start + 10, 50)]
    return events


def test_cache_events_are_named_and_give_the_cache_state(tmp_path: Path) -> None:
    trace = load(tmp_path, compile_call(hit=True))
    result = cold_set([Variant("compiled", None, trace)], single=True)
    expected = pl.DataFrame(
        [
            (
                "compiled",
                0,
                1,
                "AOTAutogradCache.inductor_load",
                "AOTAutograd cache",
                "hit",
                1,
                300.0,
                None,
            ),
            (
                "compiled",
                0,
                1,
                "PyCodeCache.load_by_key_path",
                "PyCodeCache",
                "either",
                1,
                100.0,
                None,
            ),
        ],
        schema={"variant": pl.String(), **EVIDENCE_COLUMNS, "meaning": pl.String()},
        orient="row",
    ).drop("meaning")
    assert_frame_equal(result.caches.drop("meaning"), expected)
    row = result.summary.row(0, named=True)
    # No manifest: the state comes from the trace's events (was null).
    assert (row["cache_state"], row["cache_state_source"]) == (TRACE_HIT, "trace")
    assert row["cache_hits"] == "AOTAutogradCache.inductor_load x1"
    compiled = cache_evidence(load(tmp_path, compile_call(hit=False), "miss.json"), _spans())
    assert compiled.select("call", "event", "outcome").rows() == [
        (None, "PyCodeCache.load_by_key_path", "either"),
        (None, "fx_codegen_and_compile", "compiled"),
    ]
    missed = cold_set([Variant("c", None, load(tmp_path, compile_call(hit=False), "m2.json"))])
    assert missed.summary["cache_state"].to_list() == [TRACE_COMPILED]
    assert missed.summary["cache_hits"].to_list() == [None]


def _spans() -> pl.DataFrame:
    """No calls: every event is outside them."""
    from traceanalyze.analyses.calls import CALL_SCHEMA

    return pl.DataFrame(schema=CALL_SCHEMA)


def test_cache_events_through_the_cli(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from traceanalyze.cli import main

    path = write_trace(tmp_path, compile_call(hit=True), "compiled.json")
    result = CliRunner().invoke(main, ["cold", str(path), "--by", "cache", "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [(r["call"], r["event"], r["outcome"]) for r in rows] == [
        (1, "AOTAutogradCache.inductor_load", "hit"),
        (1, "PyCodeCache.load_by_key_path", "either"),
    ]
    assert rows[1]["meaning"].startswith("the generated Python module imported from disk")
    text = CliRunner().invoke(main, ["cold", str(path)]).stdout
    assert "caches: cache hits in the trace (the trace's cache events; hits: " in text
    assert "- `PyCodeCache.load_by_key_path` (PyCodeCache, either: runs after a compile" in text


# ---------------------------------------------------------------------------------------------
# Compile cold starts we did not make (../shared/traces/corpus), recomputed from the raw JSON.


def corpus(name: str) -> Path:
    from tests.conftest import CORPUS_TRACES, skip_without

    path = CORPUS_TRACES / f"{name}.json.gz"
    skip_without(path)
    return path


def raw_events(path: Path) -> list[Event]:
    import gzip

    with gzip.open(path) as f:
        events: list[Event] = json.load(f)["traceEvents"]
    return events


@pytest.mark.parametrize(
    ("name", "lookups_per_step"),
    [("wings_rtx4090d_compile_triton", 1), ("wings_rtx4090d_compile_graph_break", 4)],
)
def test_training_steps_without_markers_are_the_calls(name: str, lookups_per_step: int) -> None:
    # Three torch.compile training steps, no annotation: the forward on the main thread, the
    # backward on autograd's (busier) thread. A call is a whole step on the main thread, from
    # one step's Dynamo cache lookup to the next (was: the backward alone).
    path = corpus(name)
    events = raw_events(path)
    region = next(e for e in events if e.get("name") == "Torch-Compiled Region: 0/0")
    starts = sorted(
        e["ts"]
        for e in events
        if e.get("name") == "TorchDynamo Cache Lookup" and e["tid"] == region["tid"]
    )[::lookups_per_step]
    # Each step runs to the next one's start; the last, whose end is not known, is no call.
    spans = [b - a for a, b in itertools.pairwise(starts)]
    result = cold_set([Variant(name, path, traceanalyze.load(path))], single=True)
    row = result.summary.row(0, named=True)
    assert row["call_source"] == "repeated operator sequence"
    assert result.calls["cpu_us"].to_list() == pytest.approx(spans, abs=1e-3)
    assert row["first_call_us"] == pytest.approx(spans[0], abs=1e-3)
    assert row["steady_us"] == pytest.approx(spans[1], abs=1e-3)
    assert row["steady_calls"] == 1
    assert row["first_call_in"] == IN_THIS_TRACE
    assert row["cache_state"] is None  # compiled before the trace began: no cache event


def test_a_compile_cold_start_without_steady_calls_names_its_cache_events() -> None:
    # One call of each of two models, compiled in the trace: the small warm-up model lowered
    # (fx_codegen_and_compile for its forward and backward), ResNet-18 loaded from
    # AOTAutograd's cache. Dynamo tracing ResNet's layers on fake tensors repeats operators,
    # but those are no calls (was: three "calls" inside bytecode_tracing).
    path = corpus("new_wings_rtx4090d_compile_coldstart")
    events = raw_events(path)

    def count(name: str) -> int:
        return sum(1 for e in events if e.get("name") == f"{name} (dynamo_timed)")

    trace = traceanalyze.load(path)
    evidence = cache_evidence(trace, _spans())
    counts = dict(evidence.select("event", "count").iter_rows())
    for event in (
        "AOTAutogradCache.inductor_load",
        "fx_codegen_and_compile",
        "TritonBundler.read_and_emit",
    ):
        assert counts[event] == count(event), event
    assert (counts["AOTAutogradCache.inductor_load"], counts["fx_codegen_and_compile"]) == (1, 2)
    from click.testing import CliRunner

    from traceanalyze.cli import main

    result = CliRunner().invoke(main, ["cold", str(path)])
    assert result.exit_code == 1
    [line] = result.stderr.splitlines()
    assert "no first call to compare with steady calls (fewer than two calls found" in line
    assert (
        "the trace's cache events show cache hits and compiles in the trace "
        "(AOTAutogradCache.inductor_load x1, TritonBundler.read_and_emit x2"
    ) in line
