"""`annotate`: a copy of the trace with the analysis inside, the input untouched, and a copy
that loads back to the same tables."""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

import traceanalyze
from tests.micro import annotation, call, kernel, op, span, write_trace
from traceanalyze.analyses.annotate import annotate
from traceanalyze.analyses.kernels import kernel_table
from traceanalyze.analyses.memcpy import memory_traffic
from traceanalyze.analyses.memory.usage import memory_figures
from traceanalyze.analyses.summary import summary
from traceanalyze.cli import main

ROOT = Path(__file__).resolve().parents[1]
NAIVE = ROOT / "sample_traces" / "h200_default" / "naive.json.gz"
MEMORY = ROOT / "sample_traces" / "h200_memory_check" / "memory_check.json.gz"
GPU = ("kernel", "gpu_memcpy", "gpu_memset")
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"


def _events() -> list[dict[str, Any]]:
    """One step: a bf16 1024^3 matmul (flash's launch footprint: 12.5% occupancy on an H200)
    and an out-of-place masked_fill whose clone is a device-to-device copy; before the step, a
    kernel launched before the profiling window (no runtime call)."""
    mm = span(
        "cpu_op",
        "aten::mm",
        110,
        20,
        **{
            "Input Dims": [[1024, 1024], [1024, 1024]],
            "Input type": ["c10::BFloat16", "c10::BFloat16"],
        },
    )
    return [
        kernel("early_kernel", 50, 5, 1),
        annotation("ProfilerStep#1", 100, 200),
        mm,
        call("cudaLaunchKernel", 112, 5, 10),
        op("aten::masked_fill", 140, 30),
        op("aten::clone", 141, 20),
        op("aten::copy_", 142, 15),
        call("cudaMemcpyAsync", 143, 5, 11),
        kernel(
            GEMM,
            150,
            20,
            10,
            grid=[8, 8, 1],
            block=[128, 1, 1],
            **{"registers per thread": 255, "shared memory": 65536},
        ),
        kernel("Memcpy DtoD (Device -> Device)", 180, 10, 11, cat="gpu_memcpy", bytes=1 << 20),
    ]


def _run(*args: str | Path) -> Any:
    return CliRunner().invoke(main, ["annotate", *map(str, args)])


def _events_of(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as handle:
        events: list[dict[str, Any]] = json.load(handle)["traceEvents"]
    return events


def _added(events: list[dict[str, Any]], phase: str) -> list[dict[str, Any]]:
    return [e for e in events if e.get("cat") == "traceanalyze" and e["ph"] == phase]


def test_micro_args(tmp_path: Path) -> None:
    source = write_trace(tmp_path, _events())
    result = _run(source, "-o", tmp_path / "out.json")
    assert result.exit_code == 0, result.output
    gpu = {e["name"]: e["args"] for e in _events_of(tmp_path / "out.json") if e["cat"] in GPU}
    added = {name: {k: v for k, v in args.items() if k.startswith("traceanalyze.")}
             for name, args in gpu.items()}  # fmt: skip
    # The roofline of 2 x 1024^3 FLOP and 3 x 2 MiB in 20 us on an H200 (989.4 TFLOP/s bf16,
    # 4.8 TB/s): the FLOP term, 2.17 us, is the larger, 10.9% of the time taken.
    assert added == {
        "early_kernel": {"traceanalyze.category": "other"},
        GEMM: {
            "traceanalyze.category": "gemm",
            "traceanalyze.launch_op": "aten::mm",
            "traceanalyze.iteration": 1,
            "traceanalyze.theoretical_occupancy_pct": 12.5,
            "traceanalyze.roofline_op": "aten::mm",
            "traceanalyze.roofline_pct": 10.9,
            "traceanalyze.bound": "compute",
        },
        "Memcpy DtoD (Device -> Device)": {
            "traceanalyze.category": "memcpy",
            "traceanalyze.launch_op": "aten::copy_",
            "traceanalyze.iteration": 1,
        },
    }
    # The kernel's own args are kept, in their order, before the added ones.
    assert list(gpu[GEMM])[:4] == ["device", "stream", "correlation", "grid"]


def test_micro_added_events(tmp_path: Path) -> None:
    source = write_trace(tmp_path, _events())
    assert _run(source, "-o", tmp_path / "out.json.gz").exit_code == 0
    events = _events_of(tmp_path / "out.json.gz")
    chain = "aten::masked_fill -> aten::clone -> aten::copy_ -> Memcpy DtoD (Device -> Device)"
    # The arrow starts at the launching op and ends at the copy (bound to its slice).
    assert _added(events, "s") == [
        {"ph": "s", "cat": "traceanalyze", "id": 1, "name": chain, "pid": 1, "tid": 1,
         "ts": 142.0},
    ]  # fmt: skip
    assert _added(events, "f") == [
        {"ph": "f", "cat": "traceanalyze", "bp": "e", "id": 1, "name": chain, "pid": 0,
         "tid": 7, "ts": 180.0},
    ]  # fmt: skip
    busy = [(e["ts"], e["args"]["busy"]) for e in _added(events, "C")
            if e["name"] == "GPU busy, stream 7"]  # fmt: skip
    assert busy == [(50.0, 1), (55.0, 0), (150.0, 1), (170.0, 0), (180.0, 1), (190.0, 0)]
    path = [e for e in _added(events, "C") if e["name"] == "Critical path"]
    assert path and {e["args"]["on_path"] for e in path} == {0, 1}
    markers = _added(events, "i")
    assert all(m["s"] == "g" and m["ts"] == 100.0 and m["args"]["rule"] for m in markers)


def test_micro_memory_counter(tmp_path: Path) -> None:
    memory = {"Device Type": 1, "Device Id": 0, "Addr": 4096, "Total Reserved": 1 << 21}
    events = [
        *_events(),
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1,
         "ts": 120, "s": "t", "args": {**memory, "Bytes": 512, "Total Allocated": 1536}},
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1,
         "ts": 200, "s": "t", "args": {**memory, "Bytes": -512, "Total Allocated": 1024}},
    ]  # fmt: skip
    source = write_trace(tmp_path, events)
    assert _run(source, "-o", tmp_path / "out.json").exit_code == 0
    counters = [e for e in _added(_events_of(tmp_path / "out.json"), "C")
                if e["name"].startswith("Memory")]  # fmt: skip
    assert [(e["name"], e["pid"], e["ts"], e["args"]) for e in counters] == [
        ("Memory allocated, cuda:0", 1, 120.0, {"bytes": 1536}),
        ("Memory allocated, cuda:0", 1, 200.0, {"bytes": 1024}),
    ]


def test_times_keep_their_digits(tmp_path: Path) -> None:
    """Epoch microseconds beyond what a float holds to the ns: the copy's events and the
    added ones keep every digit (the loader's times are unchanged)."""
    from decimal import Decimal

    base = Decimal("1712195495505583.047")
    events = [
        annotation("ProfilerStep#1", base, 100),
        op("aten::mm", base + 1, 20),
        call("cudaLaunchKernel", base + 2, 5, 10),
        kernel(GEMM, base + 10, Decimal("20.001"), 10),
    ]
    source = write_trace(tmp_path, events)
    assert _run(source, "-o", tmp_path / "out.json").exit_code == 0
    text = (tmp_path / "out.json").read_text()
    assert '"ts":1712195495505593.047' in text
    before = traceanalyze.load(source, cache=False).gpu
    after = traceanalyze.load(tmp_path / "out.json", cache=False).gpu
    assert_frame_equal(before, after)


def _tables(trace: traceanalyze.Trace) -> dict[str, Any]:
    return {
        "kernels": kernel_table(trace),
        "memcpy": memory_traffic(trace),
        "iterations": trace.iterations,
        "gpu": trace.gpu,
        "cpu": trace.cpu,
        "memory": trace.memory,
    }


@pytest.mark.parametrize("sample", [NAIVE, MEMORY], ids=lambda p: p.name)
def test_sample_loads_back_to_the_same_tables(sample: Path, tmp_path: Path) -> None:
    digest = hashlib.sha256(sample.read_bytes()).hexdigest()
    target = tmp_path / "annotated.json.gz"
    result = _run(sample, "-o", target)
    assert result.exit_code == 0, result.output
    assert hashlib.sha256(sample.read_bytes()).hexdigest() == digest  # input untouched
    original = traceanalyze.load(sample, cache=False)
    annotated = traceanalyze.load(target, cache=False)
    assert summary(annotated) == summary(original)
    assert memory_figures(annotated) == memory_figures(original)
    for name, table in _tables(original).items():
        assert_frame_equal(_tables(annotated)[name], table, check_exact=True), name
    # Every GPU activity gained its category.
    events = _events_of(target)
    gpu = [e for e in events if e.get("cat") in GPU]
    assert gpu and all("traceanalyze.category" in e["args"] for e in gpu)
    assert len(_added(events, "i")) == len(annotate(original).findings) > 0


def test_public_traces_load_back(public_trace: Path, tmp_path: Path) -> None:
    """Every public trace (NVIDIA, ROCm, legacy, CPU only): each GPU activity found and
    annotated, and the copy loads to the same frames."""
    target = tmp_path / "annotated.json.gz"
    result = _run(public_trace, "-o", target)
    if result.exit_code == 1:  # bad input for every command (e.g. no events): one line
        assert result.output.count("\n") == 1 and "Traceback" not in result.output
        return
    assert result.exit_code == 0, result.output
    original = traceanalyze.load(public_trace, cache=False)
    annotated = traceanalyze.load(target, cache=False)
    assert f"({original.gpu.height} GPU activities annotated" in result.output
    for name in ("gpu", "cpu", "iterations", "memory", "devices"):
        assert_frame_equal(getattr(annotated, name), getattr(original, name)), name


def test_arrows_end_on_a_stream_the_trace_names_by_text(tmp_path: Path) -> None:
    # Older Kineto (kineto_tb_resnet50_legacy) writes "tid": "stream 7": the loader numbers
    # that text (-1); the arrow must end on the trace's own track, not on a thread -1.
    events = [{**e, "tid": "stream 7"} if e.get("cat") in GPU else e for e in _events()]
    source = write_trace(tmp_path, events)
    assert _run(source, "-o", tmp_path / "out.json").exit_code == 0
    added = _events_of(tmp_path / "out.json")
    assert [(e["pid"], e["tid"]) for e in _added(added, "f")] == [(0, "stream 7")]


def test_the_critical_path_counter_leaves_out_the_paths_gaps(tmp_path: Path) -> None:
    # Two kernels launched early, B waiting on the stream 20 us after A: the path is the CPU up to
    # A's launch, A, a gap, B. The window runs from the step's CPU start (0; no earlier GPU work)
    # to the end of the GPU's work (60). The counter marked the whole window.
    events = [
        annotation("ProfilerStep#1", 0, 30),
        op("aten::mm", 5, 3),
        call("cudaLaunchKernel", 6, 1, 1),
        op("aten::add", 8, 3),
        call("cudaLaunchKernel", 9, 1, 2),
        kernel(GEMM, 10, 10, 1),
        kernel("add_kernel", 40, 20, 2),
    ]
    source = write_trace(tmp_path, events)
    assert _run(source, "-o", tmp_path / "out.json").exit_code == 0
    path = [(e["ts"], e["args"]["on_path"]) for e in _added(_events_of(tmp_path / "out.json"), "C")
            if e["name"] == "Critical path"]  # fmt: skip
    assert path == [(0.0, 1), (20.0, 0), (40.0, 1), (60.0, 0)]


def test_bare_event_array(tmp_path: Path) -> None:
    """A trace that is a bare array of events stays one in the copy."""
    source = tmp_path / "bare.json"
    source.write_text(json.dumps(_events()))
    assert _run(source, "-o", tmp_path / "out.json").exit_code == 0
    copy = json.loads((tmp_path / "out.json").read_text())
    assert isinstance(copy, list) and len(copy) > len(_events())
    assert copy[0]["args"]["traceanalyze.category"] == "other"


def _hta_gpu_rows(trace: Path, folder: Path) -> tuple[int, int, set[str]]:
    """HTA's GPU rows of ``trace`` (``stream != -1``): count, total duration, names."""
    from hta.trace_analysis import TraceAnalysis

    folder.mkdir()
    (folder / trace.name).write_bytes(trace.read_bytes())
    logging.getLogger("hta").setLevel(logging.ERROR)
    analysis = TraceAnalysis(trace_dir=str(folder))
    frame = analysis.t.get_trace(0)
    gpu = frame[frame["stream"] != -1]
    names = set(analysis.t.symbol_table.sym_table)
    return len(gpu), int(gpu["dur"].sum()), names


@pytest.mark.hta
@pytest.mark.filterwarnings("ignore:The inplace keyword:DeprecationWarning")
def test_hta_reads_the_annotated_sample(tmp_path: Path) -> None:
    """An independent reader (HTA, pandas) finds the same GPU work in the copy."""
    pytest.importorskip("hta")
    annotated = tmp_path / "naive.json.gz"
    assert _run(NAIVE, "-o", annotated).exit_code == 0
    count, total, names = _hta_gpu_rows(NAIVE, tmp_path / "original")
    assert _hta_gpu_rows(annotated, tmp_path / "annotated")[:2] == (count, total)
    assert count > 0 and set(traceanalyze.load(NAIVE, cache=False).gpu["name"]) <= names


def test_refusals(tmp_path: Path) -> None:
    source = write_trace(tmp_path, _events())
    same = _run(source, "-o", source, "--force")
    assert same.exit_code == 2 and "is one of the inputs" in same.output
    assert _run(source).exit_code == 2  # -o is required
    wrong = _run(source, "-o", tmp_path / "out.txt")
    assert wrong.exit_code == 2 and ".json or .json.gz" in wrong.output
    (tmp_path / "taken.json").write_text("{}")
    assert _run(source, "-o", tmp_path / "taken.json").exit_code == 2
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    broken = _run(bad, "-o", tmp_path / "out.json")
    assert broken.exit_code == 1 and "bad.json" in broken.output
    assert "Traceback" not in broken.output and not (tmp_path / "out.json").exists()


def test_no_copy_left_when_writing_fails(tmp_path: Path) -> None:
    source = write_trace(tmp_path, _events())
    (tmp_path / "file").write_text("")
    result = _run(source, "-o", tmp_path / "file" / "out.json")
    assert result.exit_code == 1 and "cannot write" in result.output
    assert pl.Series([p.name for p in tmp_path.iterdir()]).str.starts_with(".").sum() == 0


def test_a_capture_files_bound_marker_is_judged_against_the_capture_median() -> None:
    # As `report FILE` and `summary FILE` judge it: the manifest beside the file is read.
    findings = annotate(traceanalyze.load(NAIVE, cache=False)).findings
    [bound] = [f for f in findings if f.rule == "bound"]
    assert "capture median" in str(bound.figures["note"])
    assert bound.figures["note"] == traceanalyze.summary(NAIVE)["bound_note"]
