"""Chrome-trace variants and other accelerators' traces, each as a micro trace with the exact
frame it must give: Ascend NPU traces, string and integer times, begin/end pairs, missing
dur, metadata-only traces, MTIA, MI300 and CUPTI range (counter mode) events."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

import traceanalyze
from tests.conftest import CORPUS_TRACES, skip_without
from tests.micro import (
    H200,
    actual,
    annotation,
    call,
    expected,
    kernel,
    op,
    span,
    write,
    write_trace,
)
from traceanalyze.cli import main
from traceanalyze.errors import EmptyTraceError, TraceFormatError
from traceanalyze.load import fast
from traceanalyze.load.parse import parse_file
from traceanalyze.schema import CPU_SCHEMA, DEVICE_SCHEMA, GPU_SCHEMA, TRACE_FRAMES

STEP = [
    annotation("ProfilerStep#0", 0, 100),
    op("aten::mm", 10, 50),
    call("cudaLaunchKernel", 20, 5, 1),
    kernel("gemm", 30, 10, 1),
]


def both(path: Path) -> traceanalyze.Trace:
    """The Trace of ``path``; both decoders must give it (the C one may decline the file)."""
    trace = parse_file(path, native=False)
    if fast.AVAILABLE:
        native = parse_file(path)
        assert native.meta == trace.meta
        for name in TRACE_FRAMES:
            assert_frame_equal(getattr(native, name), getattr(trace, name))
    return trace


def test_ascend_npu_trace(tmp_path: Path) -> None:
    # trace_view.json of torch_npu: a bare array, ts as text (epoch microseconds), no
    # deviceProperties; device tasks carry "Task Type" and "Stream Id" in their args.
    events = [
        {"ph": "M", "name": "process_name", "pid": 2, "tid": 0,
         "args": {"name": "Ascend Hardware"}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1,
         "ts": "1717575134213722.340", "dur": 12.5, "args": {"Sequence number": 7}},
        {"ph": "X", "name": "Add", "pid": 2, "tid": 3, "ts": "1717575134213730.021",
         "dur": "2.441", "args": {"Task Type": "AI_VECTOR_CORE", "Stream Id": 3, "Task Id": 9,
                                  "connection_id": 41}},
        {"ph": "X", "name": "MEMCPY_ASYNC", "pid": 2, "tid": 3, "ts": "1717575134213740.000",
         "dur": "1.0", "args": {"Task Type": "MEMCPY_ASYNC", "Stream Id": 3}},
    ]  # fmt: skip
    trace = both(write(tmp_path, "trace_view.json", events))
    want = expected(
        GPU_SCHEMA,
        "kind name device stream correlation ts_ns dur_ns linked",
        ("kernel", "Add", 0, 3, 41, 1717575134213730021, 2441, False),
        ("memcpy", "MEMCPY_ASYNC", 0, 3, None, 1717575134213740000, 1000, False),
    )
    assert_frame_equal(actual(trace.gpu, want, "ts_ns"), want)
    want = expected(CPU_SCHEMA, "name ts_ns dur_ns", ("aten::add", 1717575134213722340, 12500))
    assert_frame_equal(actual(trace.cpu, want), want)
    want = expected(DEVICE_SCHEMA, "device name", (0, "Ascend NPU"))
    assert_frame_equal(actual(trace.devices, want), want)


@pytest.mark.parametrize(
    ("ts", "dur", "ts_ns", "dur_ns"),
    [
        (30, 10, 30_000, 10_000),  # integer microseconds (old traces)
        ("30", "10", 30_000, 10_000),  # numbers written as text
        (30.0004, 1e1, 30_000, 10_000),  # below a nanosecond rounds; an exponent is a number
        ("-2.5", 0, -2_500, 0),  # negative
    ],
)
def test_time_spellings(tmp_path: Path, ts: object, dur: object, ts_ns: int, dur_ns: int) -> None:
    events = [*STEP, kernel("other", ts, dur, 99)]  # type: ignore[arg-type]
    trace = both(write_trace(tmp_path, events))
    want = expected(GPU_SCHEMA, "name ts_ns dur_ns", ("other", ts_ns, dur_ns))
    assert_frame_equal(actual(trace.gpu.filter(trace.gpu["name"] == "other"), want), want)


def test_missing_dur_is_zero(tmp_path: Path) -> None:
    event = {k: v for k, v in op("aten::empty", 60, 1).items() if k != "dur"}
    trace = both(write_trace(tmp_path, [*STEP, event]))
    assert trace.cpu.filter(trace.cpu["name"] == "aten::empty")["dur_ns"].to_list() == [0]


def test_begin_end_pairs_become_spans(tmp_path: Path) -> None:
    # Nested B/E on one thread; the E events name nothing (the spec does not require it); an
    # unmatched B is kept with duration 0 (as an X without dur); the display unit does not
    # change the times' unit.
    events = [
        {"ph": "B", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1,
         "ts": 0},
        {"ph": "B", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 20, "dur": 5, "args": {"correlation": 1}},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 60.5},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 100},
        {"ph": "B", "cat": "cpu_op", "name": "never closed", "pid": 1, "tid": 2, "ts": 5},
        kernel("gemm", 30, 10, 1),
    ]  # fmt: skip
    trace = both(write_trace(tmp_path, events, displayTimeUnit="ns"))
    want = expected(
        CPU_SCHEMA,
        "name ts_ns dur_ns depth",
        ("ProfilerStep#0", 0, 100_000, 0),
        ("never closed", 5_000, 0, 0),
        ("aten::mm", 10_000, 50_500, 1),
        ("cudaLaunchKernel", 20_000, 5_000, 2),
    )
    assert_frame_equal(actual(trace.cpu, want, "ts_ns"), want)
    assert trace.gpu["op_name"].to_list() == ["aten::mm"]
    assert trace.iterations["iteration"].to_list() == [0]


def test_metadata_only_trace_says_so(tmp_path: Path) -> None:
    names = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}]
    path = write_trace(tmp_path, names)
    with pytest.raises(EmptyTraceError, match="no events, only metadata"):
        traceanalyze.load(path, cache=False)


def test_mtia_trace(tmp_path: Path) -> None:
    # MTIA: host runtime calls ("mtia_runtime") and device-side events ("mtia_ccp_events")
    # are categories traceanalyze does not classify: the CPU side loads, nothing is misread
    # as a CUDA kernel, and the events are counted.
    events = [
        annotation("ProfilerStep#0", 0, 100),
        op("aten::mm", 10, 50),
        span("mtia_runtime", "runFunction", 20, 5, correlation=3),
        span("mtia_ccp_events", "fused_mm_kernel", 30, 12, pid=10, tid=2, correlation=3),
    ]
    trace = both(write_trace(tmp_path, events, devices=None))
    assert trace.gpu.is_empty()
    assert trace.cpu["name"].to_list() == ["ProfilerStep#0", "aten::mm"]
    counts = trace.meta[0].event_counts
    assert (counts["mtia_runtime"], counts["mtia_ccp_events"]) == (1, 1)


def test_mi300_trace(tmp_path: Path) -> None:
    # ROCm 6 on MI300X: hip calls as cuda_runtime, kernels on stream 0, wavefront 64.
    mi300 = {"id": 0, "name": "AMD Instinct MI300X", "computeMajor": 9, "computeMinor": 4,
             "numSms": 304, "warpSize": 64, "maxSharedMemoryPerMultiProcessor": 65536}  # fmt: skip
    events = [
        annotation("ProfilerStep#0", 0, 100),
        op("aten::mm", 10, 50),
        span("cuda_runtime", "hipExtModuleLaunchKernel", 20, 5, correlation=7),
        kernel("Cijk_Alik_Bljk_BBS_BH_MT128x128x64", 30, 9, 7, stream=0,
               grid=[1024, 1, 1], block=[256, 1, 1]),
    ]  # fmt: skip
    trace = both(write_trace(tmp_path, events, devices=[mi300]))
    want = expected(
        GPU_SCHEMA,
        "name stream linked launch_api op_name block_x",
        ("Cijk_Alik_Bljk_BBS_BH_MT128x128x64", 0, True, "hipExtModuleLaunchKernel", "aten::mm",
         256),
    )  # fmt: skip
    assert_frame_equal(actual(trace.gpu, want), want)
    assert trace.devices["warp_size"].to_list() == [64]


def test_cupti_range_events_in_counter_mode(tmp_path: Path) -> None:
    # CUPTI range profiling ("cuda_profiler_range"): one span per profiled range with counter
    # values as args. Not a GPU activity; kernels and links are unchanged.
    ranges = [
        span("cuda_profiler_range", "gemm", 30, 10, pid=0, tid=7,
             **{"smsp__sass_thread_inst_executed_op_dfma_pred_on.sum": 0,
                "sm__warps_active.avg.pct_of_peak_sustained_active": 12.5}),
    ]  # fmt: skip
    reference = both(write_trace(tmp_path, STEP, name="plain.json"))
    trace = both(write_trace(tmp_path, [*STEP, *ranges]))
    assert_frame_equal(trace.gpu, reference.gpu)
    assert trace.meta[0].event_counts["cuda_profiler_range"] == 1


def test_folder_warnings_reach_the_user_on_stderr(tmp_path: Path) -> None:
    write_trace(tmp_path, STEP, name="rank0.json")
    (tmp_path / "README.md").write_text("notes\n")
    write(tmp_path, "results.json", {"loss": 0.5})
    result = CliRunner().invoke(main, ["info", str(tmp_path), "--format", "json"])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 2
    assert warnings[0].startswith(f"traceanalyze: warning: skipped {tmp_path / 'README.md'}: ")
    assert "no traceEvents list" in warnings[1]
    assert json.loads(result.stdout)


def test_kernel_without_its_launch_beside_an_annotation(tmp_path: Path) -> None:
    # Found by the property tests: a kernel whose runtime call is not in the trace, in a trace
    # with a user annotation region, made linking index by a null id (a traceback).
    events = [
        annotation("ProfilerStep#0", 0, 100),
        annotation("forward", 5, 90),
        op("aten::mm", 10, 50),
        kernel("gemm", 30, 10, 1),  # correlation 1: no call launched it
    ]
    trace = both(write_trace(tmp_path, events))
    want = expected(GPU_SCHEMA, "name linked annotation op_name", ("gemm", False, None, None))
    assert_frame_equal(actual(trace.gpu, want), want)


def test_device_id_beyond_32_bits_is_a_one_line_error(tmp_path: Path) -> None:
    # Found by the property tests: the device column is 32 bits; a larger id was a traceback.
    path = write_trace(tmp_path, [*STEP[:3], kernel("gemm", 30, 10, 1, device=-(2**63))])
    with pytest.raises(TraceFormatError, match="device is out of range"):
        both(path)


def test_metadata_of_the_wrong_type(tmp_path: Path) -> None:
    # A device property written in another form is as good as absent (null); a rank that is no
    # 32-bit number is an error (the rank keys the rows of a folder of ranks).
    odd = {**H200, "numSms": "132", "maxThreadsPerBlock": 2**40, "name": 7}
    trace = both(write_trace(tmp_path, STEP, devices=[odd]))
    want = expected(
        DEVICE_SCHEMA,
        "device name num_sms max_threads_per_block warp_size",
        (0, None, None, None, 32),
    )
    assert_frame_equal(actual(trace.devices, want), want)
    path = write_trace(tmp_path, STEP, name="rank.json", distributedInfo={"rank": 2**40})
    with pytest.raises(TraceFormatError, match="distributedInfo rank"):
        both(path)


def test_compare_of_a_mixed_folder_skips_what_is_not_a_trace(tmp_path: Path) -> None:
    write_trace(tmp_path, STEP, name="a.json")
    write_trace(tmp_path, STEP, name="b.json.gz")
    (tmp_path / "notes.txt").write_text("not a trace\n")
    write(tmp_path, "results.json", {"loss": 0.5})  # JSON, but no traceEvents list
    result = CliRunner().invoke(main, ["compare", str(tmp_path), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert [row["variant"] for row in json.loads(result.stdout)] == ["a", "b"]
    warnings = [line for line in result.stderr.splitlines() if "warning: skipped" in line]
    assert len(warnings) == 2 and any("results.json" in w for w in warnings)


def test_pre_kineto_autograd_export(tmp_path: Path) -> None:
    # torch.autograd.profiler's own export (before Kineto): a bare array of complete events with
    # no category, pid "CPU functions", relative float times. Its operators are CPU ops.
    events = [
        {"name": "aten::conv2d", "ph": "X", "ts": 136.73, "dur": 184.65, "tid": 1,
         "pid": "CPU functions", "args": {}},
        {"name": "aten::relu", "ph": "X", "ts": 400.5, "dur": 10.25, "tid": 1,
         "pid": "CPU functions", "args": {}},
    ]  # fmt: skip
    trace = both(write(tmp_path, "profiler_trace.json", events))
    want = expected(
        CPU_SCHEMA,
        "cat name ts_ns dur_ns",
        ("cpu_op", "aten::conv2d", 136730, 184650),
        ("cpu_op", "aten::relu", 400500, 10250),
    )
    assert_frame_equal(actual(trace.cpu, want), want)
    assert trace.gpu.height == 0


def test_pre_kineto_autograd_export_from_the_corpus() -> None:
    path = CORPUS_TRACES / "new_luxmea_legacy_autograd_bare_array.json.gz"
    skip_without(path)
    trace = both(path)
    assert trace.cpu.filter(pl.col("cat") == "cpu_op").height == 1442
    result = CliRunner().invoke(main, ["summary", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["bound"] == "cannot tell"
