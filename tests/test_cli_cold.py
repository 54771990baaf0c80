"""`cold` and `graphs` through click's CliRunner, in every format, and the report's section."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tests.micro import annotation, op, write_trace
from tests.test_cold import CUDNN_EVENTS, cold_folder
from tests.test_graphs import EVENTS as GRAPH_EVENTS
from traceanalyze.cli import main

ROW_KEYS = {
    "variant", "rank", "call", "steady_call", "steady_calls", "side", "cause", "op_name",
    "first_call_us", "steady_us", "excess_us", "share_of_excess_pct", "break_even_calls",
    "break_even_note", "cache_state", "call_source",
}  # fmt: skip


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.output, result.exception)
    return result


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    return write_trace(tmp_path, CUDNN_EVENTS, "sdpa_cudnn.json")


def test_cold_markdown(trace: Path) -> None:
    text = ok(run("cold", trace)).stdout
    assert text.startswith(
        "3 calls (annotations call<i>); call 1 ran in this trace (not known to be the "
        "process's first call); caches: unknown (no capture manifest says, no cache event in "
        "the trace). Under the profiler call 1 took 1 ms against 100 µs for the median of its "
        "2 steady calls (wall time): 900 µs of one-off work (900 µs on the CPU, split below); "
        "break-even: no baseline"
    )
    assert "- call 1 is the first call in this trace, not known to be a fresh process's" in text
    assert "**Call 1 (first) against the median of its 2 steady calls, by cause**" in text
    assert "| cpu | 2 | cudnn_plan | 700 | 55 | 645 | 71.67 |" in text
    assert "| cpu | 2 | other | (outside operators) | 100 | 20 | 80 | 8.89 |" in text
    assert "- `cudnn_plan`: cuDNN graph/plan build" in text


def test_cold_json_rows(trace: Path) -> None:
    rows = json.loads(ok(run("cold", trace, "--format", "json")).stdout)
    assert {key for row in rows for key in row} == ROW_KEYS
    top = rows[0]
    assert (top["side"], top["cause"], top["op_name"]) == (
        "cpu",
        "cudnn_plan",
        "aten::scaled_dot_product_attention",
    )
    assert (top["first_call_us"], top["steady_us"], top["excess_us"]) == (700.0, 55.0, 645.0)
    assert top["break_even_calls"] is None
    assert top["break_even_note"].startswith("no baseline")
    assert sum(r["excess_us"] for r in rows if r["side"] == "cpu") == 900.0


def test_cold_csv_by_cause(trace: Path) -> None:
    text = ok(run("cold", trace, "--by", "cause", "--format", "csv")).stdout
    rows = list(csv.DictReader(io.StringIO(text)))
    # Every excess is whole here, and written as the Float64 its schema declares (issue 41: a
    # column's type never depends on its values).
    assert [(r["side"], r["cause"], r["excess_us"]) for r in rows] == [
        ("cpu", "cudnn_plan", "645.0"),
        ("cpu", "allocator_growth", "100.0"),
        ("cpu", "other", "100.0"),
        ("cpu", "cuda_lazy_init", "55.0"),
        ("gpu", "cudnn_plan", "0.0"),
    ]


def test_cold_on_a_capture_folder(tmp_path: Path) -> None:
    folder = cold_folder(tmp_path)
    rows = json.loads(ok(run("cold", folder, "--by", "variant", "--format", "json")).stdout)
    assert [(r["variant"], r["status"], r["break_even_calls"]) for r in rows] == [
        ("naive", "ok", None),
        ("sdpa_cudnn", "ok", 5),  # net of the baseline's own one-off cost (was 7)
        ("flex_attention", "skipped", None),
    ]
    assert rows[1]["cache_state"] == "as_found"
    assert rows[1]["cudnn_planning_us"] == 645.0
    text = ok(run("cold", folder)).stdout
    assert "**Paid back** (against `naive`; per-call and one-off differences from one source)" in (
        text
    )
    assert (
        "| sdpa_cudnn | 160 | 760 | capture timing | 5 | 760.0 µs more one-off work / 160.0 µs "
        "less per call, both from the capture timing; 200.0 µs faster per call under the "
        "profiler; for caches as_found |"
    ) in text
    assert "### `sdpa_cudnn`" in text
    # One trace of the folder alone still finds its manifest entry (cache state, timing).
    alone = ok(run("cold", folder / "sdpa_cudnn.json")).stdout
    assert "caches: as_found" in alone
    assert "call 1 ran in a fresh process (capture manifest); caches: as_found (manifest)" in alone
    assert (
        "Timed without the profiler (cold capture: each call's wall clock, no profiler "
        "(call_wall_ms)): 1.2 ms against 90 µs, 1.11 ms of one-off work."
    ) in alone


def test_cold_baseline_must_be_a_variant(tmp_path: Path) -> None:
    result = run("cold", cold_folder(tmp_path), "--baseline", "nope")
    assert result.exit_code == 2
    assert "--baseline 'nope' is not a variant" in result.stderr


def test_cold_without_steady_calls_is_one_error_line(tmp_path: Path) -> None:
    path = write_trace(tmp_path, [annotation("call1", 0, 10), op("aten::add", 1, 5)])
    result = run("cold", path)
    assert result.exit_code == 1
    [line] = result.stderr.splitlines()
    assert line.startswith(f"traceanalyze: error: {path}: no first call to compare")
    assert "python -m capture --cold" in line


def test_report_of_a_cold_capture_has_the_cold_section(tmp_path: Path) -> None:
    out = tmp_path / "out" / "report.md"
    ok(run("report", cold_folder(tmp_path), "-o", out))
    text = out.read_text()
    section = text[text.index("## Cold start") : text.index("## How to read this")]
    assert "Break-even is against `naive`." in section
    assert "| sdpa_cudnn | 3 | 1,000 | 100 | 2 | 900 | 900 | 0 | 645 | cudnn_plan |" in section
    assert "**`sdpa_cudnn` by cause**" in section
    assert "- *break even calls*: calls after which" in section


def test_graphs_command(tmp_path: Path) -> None:
    path = write_trace(tmp_path, GRAPH_EVENTS)
    text = ok(run("graphs", path)).stdout
    assert "| 0 | 1 | 0 | kernel | gemm_k | aten::mm | cudaLaunchKernel |" in text
    rows = json.loads(ok(run("graphs", path, "--format", "json")).stdout)
    assert [(r["position"], r["captured_op"]) for r in rows] == [
        (0, "aten::mm"),
        (1, "aten::softmax"),
    ]
    empty = ok(run("graphs", write_trace(tmp_path, CUDNN_EVENTS, "plain.json"))).stdout
    assert empty == "No CUDA graph replays (cudaGraphLaunch) in this trace.\n"


def test_cold_on_alexnet(public: Path) -> None:
    path = public / "hta_alexnet_a100.json.gz"
    rows = json.loads(ok(run("cold", path, "--by", "variant", "--format", "json")).stdout)
    [row] = rows
    assert row["call_source"].startswith("repeated region: ")
    assert (row["first_call_us"], row["steady_us"]) == (12_757_093.0, 79_678.0)
    # cudaFree inside cudnn_convolution is the allocator's, not planning (issue 19)
    assert row["top_cause"] == "allocator_growth"
