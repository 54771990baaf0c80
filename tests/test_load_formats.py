"""Format variants, folders of ranks, load_each and the Parquet cache, each as a micro trace."""

from __future__ import annotations

import gzip
import os
import shutil
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import traceanalyze
from tests.micro import (
    actual,
    annotation,
    call,
    expected,
    kernel,
    one_step,
    op,
    span,
    write,
    write_trace,
)
from traceanalyze.errors import TraceFormatError
from traceanalyze.load import SeparateTracesError
from traceanalyze.load.cache import frame_file
from traceanalyze.schema import (
    CPU_SCHEMA,
    DEVICE_SCHEMA,
    GPU_SCHEMA,
    TRACE_FRAMES,
)

STEP = one_step()


def assert_traces_equal(left: traceanalyze.Trace, right: traceanalyze.Trace) -> None:
    assert left.meta == right.meta
    assert left.iteration_source == right.iteration_source
    for name in TRACE_FRAMES:
        assert_frame_equal(getattr(left, name), getattr(right, name))


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.iterdir())}


# --- format variants ---------------------------------------------------------------------------


def test_frames_follow_their_schemas(tmp_path: Path) -> None:
    events = [
        *STEP,
        {"ph": "s", "cat": "ac2g", "id": 1, "pid": 1, "tid": 1, "ts": 20, "name": "ac2g"},
        {"ph": "f", "cat": "ac2g", "id": 1, "pid": 0, "tid": 7, "ts": 30, "bp": "e"},
        {"ph": "i", "name": "Iteration Start: PyTorch Profiler", "pid": 1, "tid": 1, "ts": 15},
    ]
    trace = traceanalyze.load(write_trace(tmp_path, events), cache=False)
    for name, schema in TRACE_FRAMES.items():
        assert getattr(trace, name).schema == pl.Schema(schema), name
    assert (trace.flows.height, trace.instants.height, trace.devices.height) == (2, 1, 1)


def test_gpu_args_become_typed_columns(tmp_path: Path) -> None:
    args: dict[str, Any] = {
        "External id": 12,
        "registers per thread": 255,
        "shared memory": 65536,
        "blocks per SM": 0.5,
        "warps per SM": 2.0,
        "est. achieved occupancy %": 6,
    }
    events = [*STEP[:3], kernel("flash", 30, 10, 1, grid=[4, 2, 1], block=[128, 1, 1], **args)]
    trace = traceanalyze.load(write_trace(tmp_path, events), cache=False)
    want = expected(
        GPU_SCHEMA,
        "device stream external_id grid_x grid_y grid_z block_x block_y block_z "
        "registers_per_thread shared_memory blocks_per_sm warps_per_sm est_achieved_occupancy_pct",
        (0, 7, 12, 4, 2, 1, 128, 1, 1, 255, 65536, 0.5, 2.0, 6.0),
    )
    assert_frame_equal(actual(trace.gpu, want), want)


def test_recorded_shapes_are_kept_as_raw_json(tmp_path: Path) -> None:
    shaped = span(
        "cpu_op",
        "aten::mm",
        10,
        50,
        **{
            "External id": 3,
            "Input Dims": [[64, 128], [128, 32]],
            "Input type": ["c10::BFloat16", "c10::BFloat16"],
            "Concrete Inputs": ["", ""],
            "Input Strides": [[128, 1], [32, 1]],
        },
    )
    events = [STEP[0], shaped, op("aten::relu", 70, 5)]
    trace = traceanalyze.load(write_trace(tmp_path, events), cache=False)
    want = expected(
        CPU_SCHEMA,
        "name input_dims input_types concrete_inputs",
        ("ProfilerStep#0", None, None, None),
        (
            "aten::mm",
            "[[64, 128], [128, 32]]",
            '["c10::BFloat16", "c10::BFloat16"]',
            '["", ""]',
        ),
        ("aten::relu", None, None, None),
    )
    assert_frame_equal(actual(trace.cpu, want), want)


@pytest.mark.parametrize("name", ["trace.json", "trace.json.gz", "host_1234.1712.pt.trace.json.gz"])
def test_plain_gzip_and_pt_trace_names_load_alike(tmp_path: Path, name: str) -> None:
    reference = traceanalyze.load(write_trace(tmp_path, STEP, name="reference.json"), cache=False)
    trace = traceanalyze.load(write_trace(tmp_path, STEP, name=name), cache=False)
    for frame in TRACE_FRAMES:
        assert_frame_equal(getattr(trace, frame), getattr(reference, frame))


@pytest.mark.parametrize("gzipped", [False, True])
def test_content_not_the_suffix_decides_gzip(tmp_path: Path, gzipped: bool) -> None:
    # Plain JSON named .json.gz and gzip data named .json both load.
    reference = traceanalyze.load(write_trace(tmp_path, STEP, name="reference.json"), cache=False)
    data = write_trace(tmp_path, STEP, name="plain.json").read_bytes()
    path = write(
        tmp_path, "odd.json" if gzipped else "odd.json.gz", gzip.compress(data) if gzipped else data
    )
    trace = traceanalyze.load(path, cache=False)
    for frame in TRACE_FRAMES:
        assert_frame_equal(getattr(trace, frame), getattr(reference, frame))


def test_nanosecond_float_timestamps_keep_every_digit(tmp_path: Path) -> None:
    # Epoch microseconds need 16 digits before the point: more than a float64 holds with 3 after.
    events = [
        annotation("ProfilerStep#0", Decimal("1712195495505000.001"), 1000.5),
        call("cudaLaunchKernel", Decimal("1712195495505543.250"), 41.768, 135071),
        kernel("cat", Decimal("1712195495505583.047"), 4.928, 135071),
    ]
    trace = traceanalyze.load(write_trace(tmp_path, events), cache=False)
    want = expected(
        GPU_SCHEMA,
        "ts_ns dur_ns launch_ts_ns launch_dur_ns iteration",
        (1712195495505583047, 4928, 1712195495505543250, 41768, 0),
    )
    assert_frame_equal(actual(trace.gpu, want), want)
    want = expected(
        CPU_SCHEMA,
        "name ts_ns dur_ns",
        ("ProfilerStep#0", 1712195495505000001, 1000500),
        ("cudaLaunchKernel", 1712195495505543250, 41768),
    )
    assert_frame_equal(actual(trace.cpu, want, "ts_ns"), want)


def test_string_pid_and_tid(tmp_path: Path) -> None:
    # Some exporters write ids as strings; GPU rows may name the stream ("stream 7").
    events = [
        op("aten::mm", 10, 50, pid="1234", tid="5678"),
        call("cudaLaunchKernel", 20, 5, 1, pid="1234", tid="5678"),
        kernel("gemm", 30, 10, 1, device=0, stream=7) | {"pid": "0", "tid": "stream 7"},
    ]
    trace = traceanalyze.load(write_trace(tmp_path, events), cache=False)
    want = expected(
        CPU_SCHEMA,
        "name pid tid depth",
        ("aten::mm", 1234, 5678, 0),
        ("cudaLaunchKernel", 1234, 5678, 1),
    )
    assert_frame_equal(actual(trace.cpu, want, "depth"), want)
    want = expected(
        GPU_SCHEMA,
        "pid tid stream linked launch_tid op_name",
        (0, -1, 7, True, 5678, "aten::mm"),
    )
    assert_frame_equal(actual(trace.gpu, want), want)


def test_rocm_hip_calls_and_hex_streams(tmp_path: Path) -> None:
    mi250 = {
        "id": 2,
        "name": "AMD Instinct MI250X",
        "computeMajor": 9,
        "computeMinor": 0,
        "numSms": 104,
        "warpSize": 64,
        "maxSharedMemoryPerMultiProcessor": 65536,
    }
    events = [
        annotation("ProfilerStep#0", 0, 200),
        op("aten::copy_", 10, 50),
        span("cuda_runtime", "hipMemcpyWithStream", 11, 30, correlation=117, stream="0x0"),
        op("aten::add", 60, 50),
        span("cuda_runtime", "hipLaunchKernel", 61, 10, correlation=118, stream="0x0"),
        kernel("Memcpy HtoD", 50, 5, 117, cat="gpu_memcpy", device=2, stream=0),
        kernel("elementwise_kernel", 80, 5, 118, device=2, stream=0, kind="Dispatch Kernel"),
    ]
    trace = traceanalyze.load(write_trace(tmp_path, events, devices=[mi250]), cache=False)
    want = expected(
        GPU_SCHEMA,
        "kind device stream linked launch_api op_name",
        ("kernel", 2, 0, True, "hipLaunchKernel", "aten::add"),
        ("memcpy", 2, 0, True, "hipMemcpyWithStream", "aten::copy_"),
    )
    assert_frame_equal(actual(trace.gpu, want, "kind"), want)
    want = expected(
        DEVICE_SCHEMA,
        "device name warp_size num_sms shared_mem_per_sm",
        (2, "AMD Instinct MI250X", 64, 104, 65536),
    )
    assert_frame_equal(actual(trace.devices, want), want)


def test_legacy_categories_and_lowercase_external_id(tmp_path: Path) -> None:
    # Traces before 2021: Kernel/Runtime/Operator and "external id".
    events = [
        span("Operator", "aten::copy_", 10, 50, **{"external id": 5}),
        span("Runtime", "cudaLaunchKernel", 20, 5, correlation=1, **{"external id": 5}),
        span("Kernel", "copy_kernel", 30, 4, pid=0, tid=7, device=0, stream=7,
             correlation=1, **{"external id": 5}),
    ]  # fmt: skip
    trace = traceanalyze.load(write_trace(tmp_path, events, devices=None), cache=False)
    want = expected(
        CPU_SCHEMA,
        "cat name correlation depth",
        ("cpu_op", "aten::copy_", None, 0),
        ("cuda_runtime", "cudaLaunchKernel", 1, 1),
    )
    assert_frame_equal(actual(trace.cpu, want, "depth"), want)
    calls = trace.cpu.filter(pl.col("cat") == "cuda_runtime")
    assert calls["external_id"].to_list() == [5]
    want = expected(
        GPU_SCHEMA,
        "kind external_id linked launch_api op_name",
        ("kernel", 5, True, "cudaLaunchKernel", "aten::copy_"),
    )
    assert_frame_equal(actual(trace.gpu, want), want)


def test_cpu_only_trace(tmp_path: Path) -> None:
    events = [annotation("ProfilerStep#4", 0, 100), op("aten::add", 10, 5)]
    trace = traceanalyze.load(write_trace(tmp_path, events), cache=False)
    assert trace.gpu.is_empty()
    assert trace.gpu.schema == pl.Schema(GPU_SCHEMA)
    assert trace.iteration_source == "ProfilerStep"
    assert trace.iterations["iteration"].to_list() == [4]
    assert trace.cpu["name"].to_list() == ["ProfilerStep#4", "aten::add"]


def test_missing_device_properties(tmp_path: Path) -> None:
    trace = traceanalyze.load(write_trace(tmp_path, STEP, devices=None), cache=False)
    assert trace.devices.is_empty()
    assert trace.devices.schema == pl.Schema(DEVICE_SCHEMA)
    assert trace.kernels["linked"].to_list() == [True]


def test_device_properties_become_the_device_frame(tmp_path: Path) -> None:
    trace = traceanalyze.load(write_trace(tmp_path, STEP), cache=False)
    want = expected(
        DEVICE_SCHEMA,
        "rank device name compute_major compute_minor num_sms regs_per_sm "
        "shared_mem_per_block_optin max_blocks_per_sm",
        (0, 0, "NVIDIA H200", 9, 0, 132, 65536, 232448, None),
    )
    assert_frame_equal(actual(trace.devices, want), want)


def test_bare_event_array(tmp_path: Path) -> None:
    # The Chrome trace format also allows a top-level array of events.
    reference = traceanalyze.load(write_trace(tmp_path, STEP, devices=None), cache=False)
    trace = traceanalyze.load(write(tmp_path, "bare.json", STEP), cache=False)
    for frame in ("gpu", "cpu", "iterations"):
        assert_frame_equal(getattr(trace, frame), getattr(reference, frame))


@pytest.mark.parametrize("bare", [False, True])
def test_phase_outside_the_spec_still_loads(tmp_path: Path, bare: bool) -> None:
    # Decoding types ph as the spec's phases; an unknown one falls back to any string.
    odd = {"ph": "Z", "cat": "custom", "name": "odd", "pid": 1, "tid": 1, "ts": 5}
    reference = traceanalyze.load(write_trace(tmp_path, STEP, devices=None), cache=False)
    if bare:
        path = write(tmp_path, "odd.json", [*STEP, odd])
    else:
        path = write_trace(tmp_path, [*STEP, odd], name="odd.json", devices=None)
    trace = traceanalyze.load(path, cache=False)
    for frame in ("gpu", "cpu", "iterations"):
        assert_frame_equal(getattr(trace, frame), getattr(reference, frame))
    assert trace.meta[0].event_counts["custom"] == 1


def test_metadata(tmp_path: Path) -> None:
    names = [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
    ]
    path = write_trace(
        tmp_path,
        [*STEP, *names],
        rank=1,
        cuda_runtime_version=12040,
        baseTimeNanoseconds=1_700_000_000_000_000_000,
        traceName="run.json",
    )
    meta = traceanalyze.load(path, cache=False).meta
    assert len(meta) == 1
    assert meta[0].path == path
    assert meta[0].rank == 1
    assert meta[0].schema_version == 1
    assert meta[0].trace_name == "run.json"
    assert meta[0].base_time_ns == 1_700_000_000_000_000_000
    assert meta[0].versions == {"cuda_runtime_version": 12040}
    assert meta[0].distributed_info == {"backend": "nccl", "rank": 1, "world_size": 2}
    assert meta[0].thread_names == {"1": "python", "1:1": "main"}
    assert meta[0].event_counts["kernel"] == 1
    assert meta[0].event_counts["cpu_op"] == 1


# --- folders of ranks and load_each ------------------------------------------------------------


def test_folder_of_ranks_becomes_one_trace(tmp_path: Path) -> None:
    # Named so that file order and rank order disagree.
    write_trace(tmp_path, STEP, name="a_worker.json", rank=1)
    write_trace(tmp_path, STEP, name="b_worker.json.gz", rank=0)
    (tmp_path / "notes.txt").write_text("not a trace")
    trace = traceanalyze.load(tmp_path, cache=False)
    assert [(m.path.name, m.rank) for m in trace.meta] == [
        ("a_worker.json", 1),
        ("b_worker.json.gz", 0),
    ]
    want = expected(GPU_SCHEMA, "rank name linked", (0, "gemm", True), (1, "gemm", True))
    assert_frame_equal(actual(trace.gpu, want, "rank"), want)
    assert sorted(trace.cpu["rank"].unique().to_list()) == [0, 1]
    assert trace.iterations.select("rank", "iteration").sort("rank").rows() == [(0, 0), (1, 0)]
    assert trace.devices["rank"].sort().to_list() == [0, 1]


def test_folder_of_ranks_keeps_op_ids_unique(tmp_path: Path) -> None:
    # op_id is the row position in the combined cpu frame, so walking parents (nearest_ancestor)
    # and GPU -> op links never land on another rank's rows.
    write_trace(tmp_path, STEP, name="r0.json", rank=0)
    write_trace(tmp_path, [op("aten::outer", 5, 90), *STEP], name="r1.json", rank=1)
    trace = traceanalyze.load(tmp_path, cache=False)
    assert trace.cpu["op_id"].to_list() == list(range(trace.cpu.height))
    parents = trace.cpu.join(
        trace.cpu.select(pl.col("op_id").alias("parent_id"), pl.col("rank").alias("parent_rank")),
        on="parent_id",
    )
    assert (parents["rank"] == parents["parent_rank"]).all()
    launched = trace.gpu.join(
        trace.cpu.select("op_id", pl.col("rank").alias("op_rank"), pl.col("name").alias("op")),
        on="op_id",
    )
    assert launched.select("rank", "op_rank", "op", "op_name").sort("rank").rows() == [
        (0, 0, "aten::mm", "aten::mm"),
        (1, 1, "aten::mm", "aten::mm"),
    ]
    outer = trace.cpu.filter(pl.col("cat") == "cpu_op")
    ancestors = traceanalyze.link.nearest_ancestor(
        trace.cpu, outer["op_id"], pl.col("cat") == "cpu_op"
    )
    assert outer.with_columns(ancestor=ancestors).select("rank", "name", "ancestor").rows() == [
        (0, "aten::mm", None),
        (1, "aten::outer", None),
        (1, "aten::mm", int(trace.cpu.filter(pl.col("name") == "aten::outer")["op_id"][0])),
    ]


def test_folder_of_traces_stating_no_rank_holds_separate_traces(tmp_path: Path) -> None:
    # Traces without distributedInfo are separate runs (variants), never ranks by file order:
    # adding them up as ranks would report one job that never ran.
    write_trace(tmp_path, STEP, name="r0.json")
    write_trace(tmp_path, STEP, name="r1.json")
    with pytest.raises(SeparateTracesError, match=r"r0\.json states no rank.*load_variants"):
        traceanalyze.load(tmp_path, cache=False)
    variants = traceanalyze.load_variants([tmp_path])
    assert [(v.label, v.trace.meta[0].rank) for v in variants.loaded] == [("r0", 0), ("r1", 0)]


def test_folder_with_two_files_of_one_rank_is_an_error(tmp_path: Path) -> None:
    write_trace(tmp_path, STEP, name="run1.json", rank=0)
    write_trace(tmp_path, STEP, name="run2.json", rank=0)
    with pytest.raises(SeparateTracesError) as error:
        traceanalyze.load(tmp_path, cache=False)
    message = str(error.value)
    assert "run1.json" in message
    assert "run2.json" in message
    assert "load_variants" in message


def test_capture_folder_is_a_variant_set(tmp_path: Path) -> None:
    write_trace(tmp_path, STEP, name="naive.json", rank=0)
    write_trace(tmp_path, STEP, name="flash.json", rank=1)
    write(tmp_path, "manifest.json", {"variants": {"naive": {"trace": "naive.json"}}})
    with pytest.raises(SeparateTracesError, match="capture folder"):
        traceanalyze.load(tmp_path, cache=False)


def test_rank_folder_is_one_variant_of_a_variant_set(tmp_path: Path) -> None:
    write_trace(tmp_path, STEP, name="r0.json", rank=0)
    write_trace(tmp_path, STEP, name="r1.json", rank=1)
    (variant,) = traceanalyze.load_variants([tmp_path]).loaded
    assert variant.label == tmp_path.name
    assert [m.rank for m in variant.trace.meta] == [0, 1]


def test_load_each_keeps_order_and_files_apart(tmp_path: Path) -> None:
    second = write_trace(tmp_path, [*STEP[:3], kernel("other", 30, 10, 1)], name="b.json")
    first = write_trace(tmp_path, STEP, name="a.json.gz")
    seen: list[Path] = []
    traces = traceanalyze.load_each([second, str(first)], cache=False, progress=seen.append)
    assert [t.path for t in traces] == [second, first]
    assert [t.kernels["name"].to_list() for t in traces] == [["other"], ["gemm"]]
    assert seen == [second, first]


def test_large_loads_run_in_worker_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_trace(tmp_path, STEP, name="r0.json", rank=0)
    write_trace(tmp_path, STEP, name="r1.json.gz", rank=5)
    serial = traceanalyze.load(tmp_path, cache=False)
    monkeypatch.setattr(traceanalyze.load, "_PARALLEL_MIN_BYTES", 0)
    assert_traces_equal(traceanalyze.load(tmp_path, cache=False), serial)
    bad = write(tmp_path, "r2.json", b'{"traceEvents": [')
    with pytest.raises(TraceFormatError) as error:  # raised in a worker, re-raised here whole
        traceanalyze.load(tmp_path, cache=False)
    assert (error.value.path, bool(error.value.fix)) == (bad, True)


# --- the Parquet cache -------------------------------------------------------------------------


def test_second_load_comes_from_the_cache(tmp_path: Path, parses: list[Path]) -> None:
    path = write_trace(tmp_path, STEP, name="t.json.gz")
    first = traceanalyze.load(path)
    second = traceanalyze.load(path)
    assert parses == [path]
    assert_traces_equal(second, first)
    assert_traces_equal(second, traceanalyze.load(path, cache=False))


def test_touching_the_file_invalidates_the_cache(tmp_path: Path, parses: list[Path]) -> None:
    path = write_trace(tmp_path, STEP)
    traceanalyze.load(path)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    traceanalyze.load(path)
    assert parses == [path, path]


def test_rewriting_the_file_invalidates_the_cache(tmp_path: Path) -> None:
    path = write_trace(tmp_path, STEP)
    mtime = path.stat().st_mtime_ns
    assert traceanalyze.load(path).kernels["name"].to_list() == ["gemm"]
    # Same size, same modification time as far as a coarse clock can tell: only a new mtime helps.
    write_trace(tmp_path, [*STEP[:3], kernel("gemv", 30, 10, 1, grid=[4, 2, 1], block=[128, 1, 1])])
    os.utime(path, ns=(mtime + 2_000_000_000, mtime + 2_000_000_000))
    assert traceanalyze.load(path).kernels["name"].to_list() == ["gemv"]


def test_changing_a_linking_rule_invalidates_the_cache(
    tmp_path: Path, parses: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A copy of the sources that build a Trace stands in for the package; editing its linker
    # must give new cache keys, so a cached Trace is never one the changed code would not build.
    cache = traceanalyze.load.cache
    package = tmp_path / "package"
    shutil.copytree(Path(cache.__file__).parent.parent, package)
    monkeypatch.setattr(cache, "_PACKAGE", package)
    cache.builder_digest.cache_clear()
    path = write_trace(tmp_path, STEP)
    traceanalyze.load(path)
    traceanalyze.load(path)
    with (package / "link.py").open("a") as linker:
        linker.write("\n# a changed linking rule\n")
    cache.builder_digest.cache_clear()
    traceanalyze.load(path)
    cache.builder_digest.cache_clear()  # later tests see the real package's digest again
    assert parses == [path, path]


def test_cache_dir_argument_and_environment(tmp_path: Path, cache_dir: Path) -> None:
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    path = write_trace(inputs, STEP)
    before = snapshot(inputs)
    traceanalyze.load(path)
    assert any(cache_dir.iterdir())  # $TRACEANALYZE_CACHE_DIR
    chosen = tmp_path / "chosen"
    traceanalyze.load(path, cache_dir=chosen)
    assert any(chosen.iterdir())
    assert snapshot(inputs) == before  # nothing written beside the input, the input untouched


def test_no_cache_writes_nothing(tmp_path: Path, cache_dir: Path) -> None:
    path = write_trace(tmp_path, STEP)
    traceanalyze.load(path, cache=False)
    traceanalyze.load(tmp_path, cache=False, cache_dir=tmp_path / "unused")
    assert list(cache_dir.iterdir()) == []
    assert [p.name for p in tmp_path.iterdir()] == ["trace.json"]


def test_damaged_cache_entry_is_rebuilt(tmp_path: Path, cache_dir: Path) -> None:
    path = write_trace(tmp_path, STEP)
    reference = traceanalyze.load(path)
    (entry,) = cache_dir.iterdir()
    frame_file(entry, "gpu").write_bytes(b"not a frame")
    assert_traces_equal(traceanalyze.load(path), reference)


def test_cached_rank_does_not_depend_on_how_the_file_was_first_loaded(tmp_path: Path) -> None:
    write_trace(tmp_path, STEP, name="r0.json")
    second = write_trace(tmp_path, STEP, name="r1.json")
    loaded = traceanalyze.load_each([tmp_path / "r0.json", second])
    assert [t.meta[0].rank for t in loaded] == [0, 0]  # no distributedInfo: rank 0 each
    alone = traceanalyze.load(second)
    assert_traces_equal(alone, traceanalyze.load(second, cache=False))
    assert alone.meta[0].rank == 0


def test_cache_keeps_the_metadata(tmp_path: Path) -> None:
    names = {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}}
    path = write_trace(tmp_path, [*STEP, names], rank=3, cuda_runtime_version=12040)
    first = traceanalyze.load(path)
    assert traceanalyze.load(path).meta == first.meta
    assert first.meta[0].rank == 3


def test_cached_trace_names_the_path_it_was_loaded_by(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_trace(tmp_path, STEP)
    monkeypatch.chdir(tmp_path)
    assert traceanalyze.load("trace.json").path == Path("trace.json")
    assert traceanalyze.load(path).path == path  # same file, same cache entry


def test_unusable_cache_folder_only_costs_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("")
    monkeypatch.setenv("TRACEANALYZE_CACHE_DIR", str(blocker))
    path = write_trace(tmp_path, STEP)
    assert traceanalyze.load(path).kernels["name"].to_list() == ["gemm"]
    assert traceanalyze.load(path, cache_dir=blocker / "sub").kernels.height == 1
