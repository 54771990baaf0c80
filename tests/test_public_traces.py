"""Real traces from other projects (../shared/traces/public): every one loads, and the loader's
counts and links agree with numbers worked out here from the raw JSON, without the loader."""

from __future__ import annotations

import functools
import gzip
import json
import re
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceanalyze
from traceanalyze.schema import TRACE_FRAMES

GPU_CATS = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset"}
KERNEL_CATS = {"kernel", "Kernel"}
CALL_CATS = {"cuda_runtime", "cuda_driver", "Runtime", "Driver"}
OP_CATS = {"cpu_op", "Operator"}
STEP = re.compile(r"ProfilerStep#(\d+)")
Event = dict[str, Any]


@functools.cache
def raw_events(path: Path) -> list[Event]:
    """The complete ("X") events, times as exact Decimals (what the file says, digit for digit)."""
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    document = json.loads(data, parse_float=Decimal)
    events = document["traceEvents"] if isinstance(document, dict) else document
    return [e for e in events if e.get("ph") == "X"]


@functools.cache
def load(path: Path) -> traceanalyze.Trace:
    """Each public trace parsed once per session (a Trace is immutable), never cached on disk."""
    return traceanalyze.load(path, cache=False)


def ns(micros: Decimal | int) -> int:
    return int(Decimal(micros) * 1000)


@dataclass(frozen=True)
class Counts:
    gpu: int
    kernels: int
    linked: int
    cpu_ops: int
    iterations: int  # distinct ProfilerStep#N; 0 where the trace has none


def is_step(e: Event) -> bool:
    # Old traces record the step as an Operator, newer ones as a user annotation.
    return e.get("cat") in {"user_annotation", *OP_CATS} and bool(STEP.fullmatch(e["name"]))


def raw_counts(events: list[Event]) -> Counts:
    gpu = [e for e in events if e.get("cat") in GPU_CATS]
    launched = {
        e["args"]["correlation"]
        for e in events
        if e.get("cat") in CALL_CATS and "correlation" in e.get("args", {})
    }
    steps = {e["name"] for e in events if is_step(e)}
    return Counts(
        gpu=len(gpu),
        kernels=sum(e["cat"] in KERNEL_CATS for e in gpu),
        linked=sum(e.get("args", {}).get("correlation") in launched for e in gpu),
        cpu_ops=sum(e.get("cat") in OP_CATS for e in events),
        iterations=len(steps),
    )


def thread(e: Event) -> tuple[Any, Any]:
    return e["pid"], e["tid"]


def encloses(outer: Event, inner: Event) -> bool:
    return bool(
        outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"]
    )


def raw_links(events: list[Event]) -> list[tuple[Any, ...]]:
    """(kernel ts_ns, launch api, innermost enclosing op, outermost annotation, step) per kernel,
    by brute force over the raw events."""
    calls = {e["args"]["correlation"]: e for e in events if e.get("cat") in CALL_CATS}
    steps = [e for e in events if is_step(e)]
    ops = [e for e in events if e.get("cat") in OP_CATS and not is_step(e)]
    regions = [e for e in events if e.get("cat") == "user_annotation" and not is_step(e)]
    rows: list[tuple[Any, ...]] = []
    for k in (e for e in events if e.get("cat") in KERNEL_CATS):
        launch = calls.get(k["args"].get("correlation"))
        if launch is None:
            rows.append((ns(k["ts"]), None, None, None, None))
            continue
        around = [o for o in ops if thread(o) == thread(launch) and encloses(o, launch)]
        innermost = max(around, key=lambda o: (o["ts"], -o["dur"]), default=None)
        covering = [r for r in regions if thread(r) == thread(launch) and encloses(r, launch)]
        outermost = min(covering, key=lambda r: (r["ts"], -r["dur"]), default=None)
        step = next(
            (s for s in steps if s["ts"] <= launch["ts"] < s["ts"] + s["dur"]),
            None,
        )
        rows.append(
            (
                ns(k["ts"]),
                launch["name"],
                innermost and innermost["name"],
                outermost and outermost["name"],
                step and int(STEP.fullmatch(step["name"]).group(1)),  # type: ignore[union-attr]
            )
        )
    return sorted(rows, key=lambda r: (r[0], str(r[1:])))


def loaded_links(trace: traceanalyze.Trace) -> list[tuple[Any, ...]]:
    kernels = trace.kernels.select("ts_ns", "launch_api", "op_name", "annotation", "iteration")
    if trace.iteration_source != "ProfilerStep":
        kernels = kernels.with_columns(iteration=pl.lit(None, pl.Int64))
    return sorted(kernels.rows(), key=lambda r: (r[0], str(r[1:])))


def test_every_public_trace_loads(public_trace: Path) -> None:
    trace = load(public_trace)
    for name, schema in TRACE_FRAMES.items():
        assert getattr(trace, name).schema == pl.Schema(schema), name
    assert trace.iterations.height >= 1
    assert trace.gpu["ts_ns"].null_count() == 0
    assert trace.cpu["ts_ns"].null_count() == 0
    linked = trace.gpu.filter("linked")
    assert linked["launch_api"].null_count() == 0


def test_counts_agree_with_the_raw_json(public_trace: Path) -> None:
    want = raw_counts(raw_events(public_trace))
    trace = load(public_trace)
    got = Counts(
        gpu=trace.gpu.height,
        kernels=trace.kernels.height,
        linked=int(trace.gpu["linked"].sum()),
        cpu_ops=int((trace.cpu["cat"] == "cpu_op").sum()),
        iterations=trace.iterations.height if trace.iteration_source == "ProfilerStep" else 0,
    )
    assert got == want


# Pinned from the raw files (gpu activities, kernels, linked, cpu ops, ProfilerSteps), so a
# change to the file or to the counting above cannot pass unnoticed.
PINNED = {
    "hta_alexnet_a100.json.gz": Counts(98, 79, 98, 359, 0),
    "hta_backward_thread_handmade.json": Counts(1, 1, 1, 3, 1),
    "hta_cpu_only_rank34.pt.trace.json.gz": Counts(0, 0, 0, 4, 1),
    "hta_inference_rank_1_legacy.json.gz": Counts(4, 4, 4, 0, 0),
    "hta_mi250_rocm.json.gz": Counts(16, 14, 16, 70, 2),
    "hta_nccl_a100.json.gz": Counts(3774, 2700, 3774, 14346, 3),
    "hta_ns_resolution_v100.pt.trace.json.gz": Counts(6095, 4350, 6095, 23910, 5),
    "tl_h100_bert_small.json.gz": Counts(61, 60, 61, 479, 1),
    "tl_mi210_gpu_only.json.gz": Counts(562, 562, 562, 0, 0),
    "tl_torch_compile_triton.json.gz": Counts(12, 12, 12, 41, 0),
}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_pinned_counts(public: Path, name: str) -> None:
    assert raw_counts(raw_events(public / name)) == PINNED[name]


# Small enough for the brute-force link check (it compares every call with every op).
BRUTE_FORCE = [
    "hta_alexnet_a100.json.gz",
    "hta_backward_thread_handmade.json",
    "hta_inference_rank_1_legacy.json.gz",
    "hta_mi250_rocm.json.gz",
    "hta_triton_example_a100.json.gz",
    "tl_h100_bert_small.json.gz",
    "tl_h100_falconsai_conv.json.gz",
    "tl_mi300_bert_small.json.gz",
    "tl_torch_compile_triton.json.gz",
]


@pytest.mark.parametrize("name", BRUTE_FORCE)
def test_links_agree_with_brute_force(public: Path, name: str) -> None:
    path = public / name
    trace = load(path)
    assert loaded_links(trace) == raw_links(raw_events(path))


def test_nanosecond_timestamps_of_a_real_trace(public: Path) -> None:
    # Kineto's ns-resolution epoch timestamps (1712195495505543.047) need exact decoding.
    path = public / "hta_ns_resolution_v100.pt.trace.json.gz"
    events = raw_events(path)
    want = sorted(ns(e["ts"]) for e in events if e.get("cat") in GPU_CATS)
    trace = load(path)
    assert trace.gpu["ts_ns"].sort().to_list() == want
    want_calls = sorted(ns(e["ts"]) for e in events if e.get("cat") in CALL_CATS)
    calls = trace.cpu.filter(pl.col("cat").is_in(["cuda_runtime", "cuda_driver"]))
    assert calls["ts_ns"].sort().to_list() == want_calls


def test_iteration_sources(public: Path) -> None:
    sources = {
        "hta_alexnet_a100.json.gz": "whole trace",
        "hta_mi250_rocm.json.gz": "ProfilerStep",
        "hta_inference_rank_1_legacy.json.gz": "whole trace",
        "tl_mi210_gpu_only.json.gz": "whole trace",
    }
    for name, source in sources.items():
        assert load(public / name).iteration_source == source, name


LAUNCH_APIS_MI250 = {"hipLaunchKernel", "hipExtModuleLaunchKernel"}


def test_rocm_trace_keeps_streams_and_devices(public: Path) -> None:
    trace = load(public / "hta_mi250_rocm.json.gz")
    assert trace.gpu["stream"].unique().to_list() == [0]
    assert set(trace.kernels["launch_api"]) == LAUNCH_APIS_MI250
    assert trace.devices["warp_size"].unique().to_list() == [64]
    assert trace.devices["shared_mem_per_sm"].unique().to_list() == [65536]


def test_public_folder_copy_of_two_ranks(public: Path, tmp_path: Path) -> None:
    # A second copy of a rank-0 trace that claims rank 1 makes a two-rank folder.
    source = public / "hta_backward_thread_handmade.json"
    document = json.loads(source.read_text())
    (tmp_path / "rank0.json").write_text(json.dumps(document))
    document["distributedInfo"] = {"rank": 1}
    (tmp_path / "rank1.json").write_text(json.dumps(document))
    trace = traceanalyze.load(tmp_path, cache=False)
    assert trace.gpu.select("rank", "op_name").sort("rank").rows() == [
        (0, "aten::mm"),
        (1, "aten::mm"),
    ]
