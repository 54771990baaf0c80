"""`traceanalyze info` through click's CliRunner: formats, -o, --force, errors and exit codes."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tests.micro import annotation, call, kernel, op, write_trace
from traceanalyze.cli import main

EVENTS = [
    annotation("ProfilerStep#1", 0, 100),
    op("aten::mm", 10, 50),
    call("cudaLaunchKernel", 20, 5, 1),
    call("cudaMemsetAsync", 30, 2, 2),
    kernel("gemm", 40, 10, 1),
    kernel("Memset (Device)", 50, 1, 2, cat="gpu_memset"),
    kernel("early", 1, 2, 99),  # launched before the profiling window
]


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    return write_trace(tmp_path, EVENTS, name="run.json.gz", cuda_runtime_version=12040)


SUMMARY = {
    "ranks": 1,
    "iterations": 1,
    "iteration_source": "ProfilerStep",
    "kernels": 2,
    "memcpy": 0,
    "memset": 1,
    "gpu_linked": 2,
    "gpu_unlinked": 1,
    "cpu_ops": 1,
    "runtime_calls": 2,
}


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(main, ["info", *map(str, args)])


def test_json(trace: Path) -> None:
    result = run(trace, "--format", "json")
    assert result.exit_code == 0, result.output
    (record,) = json.loads(result.stdout)
    assert record["file"] == str(trace)
    assert {key: record[key] for key in SUMMARY} == SUMMARY
    assert record["devices"] == ["NVIDIA H200 (compute capability 9.0, 132 SMs)"]
    # Every version key on every trace: null where the trace states none.
    assert record["versions"]["cuda_runtime_version"] == "12040"
    assert set(record["versions"]) >= {"cupti_version", "hip_runtime_version"}
    assert record["versions"]["hip_runtime_version"] is None
    assert record["span_ms"] == pytest.approx(0.1)
    assert record["event_counts"]["kernel"] == 2


# ROCm's deviceProperties (from the MI210 trace in ../shared/traces/public): HIP writes its
# architecture numbers as computeMajor/Minor, which are no CUDA compute capability.
MI210 = {
    "id": 0, "name": "AMD Instinct MI210", "computeMajor": 9, "computeMinor": 0,
    "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536,
    "warpSize": 64, "sharedMemPerBlock": 65536, "numSms": 104,
    "maxSharedMemoryPerMultiProcessor": 65536,
}  # fmt: skip


@pytest.mark.parametrize(
    ("device", "top", "label"),
    [
        (MI210, {"hip_runtime_version": 60443483}, "AMD Instinct MI210 (gfx90a, 104 CUs)"),
        ({**MI210, "name": "AMD Instinct MI300X VF", "computeMinor": 4, "numSms": 304}, {},
         "AMD Instinct MI300X VF (gfx942, 304 CUs)"),
        # An AMD name not in the table: the architecture family from HIP's major number.
        ({**MI210, "name": "AMD Radeon Graphics"}, {}, "AMD Radeon Graphics (gfx9, 104 CUs)"),
        # No name to go by: ROCm's versions or the 64-wide wavefront say AMD.
        ({**MI210, "name": "gpu0"}, {"roctracer_version": 4.1}, "gpu0 (gfx9, 104 CUs)"),
        ({**MI210, "name": "gpu0"}, {}, "gpu0 (gfx9, 104 CUs)"),
    ],
)  # fmt: skip
def test_an_amd_gpu_is_described_by_its_gfx_arch(
    tmp_path: Path, device: dict[str, object], top: dict[str, object], label: str
) -> None:
    path = write_trace(tmp_path, EVENTS, devices=[device], **top)
    result = run(path, "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)[0]["devices"] == [label]


def test_markdown_is_the_default(trace: Path) -> None:
    result = run(trace)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"## {trace}"
    assert "| key | value |" in lines
    assert "| kernels | 2 |" in lines
    assert "| gpu_unlinked | 1 |" in lines
    assert "| iteration_source | ProfilerStep |" in lines


def test_csv(trace: Path) -> None:
    result = run(trace, "--format", "csv")
    assert result.exit_code == 0, result.output
    [row] = csv.DictReader(io.StringIO(result.stdout))
    assert row["file"] == str(trace)
    assert row["kernels"] == "2"
    assert row["gpu_linked"] == "2"
    # The versions are columns of their own (the same on every trace); the event counts, whose
    # keys are data, are a table of their own (--table event_counts).
    assert row["versions.cuda_runtime_version"] == "12040"
    assert row["versions.hip_runtime_version"] == ""
    assert "event_counts" not in row
    counts = run(trace, "--format", "csv", "--table", "event_counts")
    rows = list(csv.DictReader(io.StringIO(counts.stdout)))
    assert {"file": str(trace), "category": "kernel", "events": "2"} in rows
    assert row["devices"] == "NVIDIA H200 (compute capability 9.0, 132 SMs)"
    assert row["span_ms"] == "0.1"


def test_several_traces_one_record_each(trace: Path, tmp_path: Path) -> None:
    other = write_trace(tmp_path, EVENTS[:5], name="other.json")
    result = run(trace, other, "--format", "json")
    assert result.exit_code == 0, result.output
    assert [r["kernels"] for r in json.loads(result.stdout)] == [2, 1]


def test_several_traces_in_csv_are_one_table(trace: Path, tmp_path: Path) -> None:
    other = write_trace(tmp_path, EVENTS[:5], name="other.json")
    result = run(trace, other, "--format", "csv")
    assert result.exit_code == 0, result.output
    header, *rows = list(csv.reader(io.StringIO(result.stdout)))
    assert header[:2] == ["file", "ranks"]
    assert [row[0] for row in rows] == [str(trace), str(other)]
    assert {len(row) for row in rows} == {len(header)}
    # A count only one trace has is a row of that trace: no column exists for one trace.
    counts = run(trace, other, "--format", "csv", "--table", "event_counts")
    rows = [(r["file"], r["category"]) for r in csv.DictReader(io.StringIO(counts.stdout))]
    assert (str(trace), "gpu_memset") in rows
    assert (str(other), "gpu_memset") not in rows


@pytest.mark.parametrize("suffix", [".json", ".md"])
def test_output_file_format_from_suffix(trace: Path, tmp_path: Path, suffix: str) -> None:
    out = tmp_path / "out" / f"info{suffix}"
    result = run(trace, "-o", out)
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert f"wrote {out}" in result.stderr
    text = out.read_text()
    if suffix == ".json":
        assert json.loads(text)[0]["kernels"] == 2
    else:
        assert text.startswith(f"## {trace}\n")


def test_csv_suffix(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "info.csv"
    assert run(trace, "-o", out).exit_code == 0
    assert out.read_text().splitlines()[0].startswith("file,ranks,devices,versions.")


def test_a_suffix_that_says_no_format_is_refused(trace: Path, tmp_path: Path) -> None:
    # The suffix says the format: info.txt would be read as text by whatever opens it.
    out = tmp_path / "info.txt"
    result = run(trace, "-o", out, "--format", "json")
    assert result.exit_code == 2
    assert ".md, .json, .csv or .parquet" in result.stderr
    assert not out.exists()


def test_existing_output_needs_force(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "info.json"
    out.write_text("keep me")
    result = run(trace, "-o", out)
    assert result.exit_code == 2
    assert "--force" in result.stderr
    assert out.read_text() == "keep me"
    result = run(trace, "-o", out, "--force")
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())[0]["kernels"] == 2


def test_refuses_to_overwrite_the_input(tmp_path: Path) -> None:
    trace = write_trace(tmp_path, EVENTS, name="run.json")
    before = trace.read_bytes()
    result = run(trace, "-o", trace, "--force", "--format", "json")
    assert result.exit_code == 2
    assert "refusing to overwrite" in result.stderr
    assert trace.read_bytes() == before


@pytest.mark.parametrize(
    ("name", "content", "words"),
    [
        ("cut.json", b'{"traceEvents": [{"ph": "X"', "truncated"),
        ("empty.json", b"", "empty"),
        ("notes.json", b"not json at all", "not valid JSON"),
        ("results.json", b'{"loss": 1}', "not a Chrome trace"),
        ("broken.json.gz", b"\x1f\x8b\x08\x00garbage", "gzip"),
    ],
)
def test_bad_input_is_one_line_and_exit_1(
    tmp_path: Path, name: str, content: bytes, words: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    result = run(path)
    assert result.exit_code == 1
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"traceanalyze: error: {path}: ")
    assert words in line
    assert "Traceback" not in result.output
    assert path.read_bytes() == content


def test_error_line_says_error(tmp_path: Path) -> None:
    result = run(tmp_path / "nope.json")
    assert result.stderr.startswith("traceanalyze: error: ")


def test_missing_file_and_empty_folder_exit_1(tmp_path: Path) -> None:
    for path in (tmp_path / "nope.json", tmp_path):
        result = run(path)
        assert result.exit_code == 1
        (line,) = result.stderr.splitlines()
        assert line.startswith(f"traceanalyze: error: {path}: ")


def test_usage_errors_exit_2(trace: Path) -> None:
    cases: list[list[str | Path]] = [[], [trace, "--format", "xml"], [trace, "--bogus"]]
    for args in cases:
        result = run(*args)
        assert result.exit_code == 2, args
        assert "Traceback" not in result.output


def test_no_cache_and_cache_dir(trace: Path, tmp_path: Path, cache_dir: Path) -> None:
    assert run(trace, "--no-cache").exit_code == 0
    assert list(cache_dir.iterdir()) == []
    chosen = tmp_path / "cache"
    assert run(trace, "--cache-dir", chosen).exit_code == 0
    assert any(chosen.iterdir())


def test_devices_described_by_what_the_trace_says(tmp_path: Path) -> None:
    devices = [{"id": 0, "name": "NVIDIA H200"}, {"id": 1}]
    path = write_trace(tmp_path, EVENTS, name="partial.json", devices=devices)
    result = run(path, "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)[0]["devices"] == ["NVIDIA H200", "device 1"]


def test_span_ms_is_the_recorded_work_not_the_profilers_envelope(tmp_path: Path) -> None:
    # span_ms's definition: CPU ops, annotations, runtime calls and GPU activities; the
    # profiler's `Trace` envelope, instant events and GPU-side annotations are left out.
    envelope = {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": 1, "tid": 1,
                "ts": -500, "dur": 2000}  # fmt: skip
    instant = {"ph": "i", "cat": "cpu_instant_event", "name": "Record Window End", "pid": 1,
               "tid": 1, "ts": 1400, "s": "t"}  # fmt: skip
    gpu_note = kernel("ProfilerStep#1", -100, 900, 1, cat="gpu_user_annotation")
    path = write_trace(tmp_path, [*EVENTS, envelope, instant, gpu_note], name="env.json")
    (record,) = json.loads(run(path, "--format", "json").stdout)
    assert record["span_ms"] == pytest.approx(0.1)  # the annotation's 0-100 µs
    assert record["event_counts"]["Trace"] == 1  # counted as an event, not in the span


def test_streams_is_a_count_and_defined_as_one(trace: Path) -> None:
    from traceanalyze.tables.definitions import COLUMN_DEFINITIONS

    rows = json.loads(CliRunner().invoke(main, ["kernels", str(trace), "--format", "json"]).stdout)
    assert all(isinstance(row["streams"], int) and row["streams"] >= 1 for row in rows)
    assert COLUMN_DEFINITIONS["streams"].startswith("how many distinct streams")
