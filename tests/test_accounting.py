"""The time-accounting model: exact micro cases for each definition, verdicts only from
evidence, and the invariants every real trace must keep (figures that add up)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import traceanalyze
from tests.conftest import public_trace_files
from tests.micro import annotation, call, kernel, load, op
from traceanalyze.analyses.kernels import kernel_table
from traceanalyze.analyses.report.contents import build_report
from traceanalyze.analyses.step.times import split_times, step_times
from traceanalyze.analyses.summary import WHOLE_TRACE_NOTE, summary
from traceanalyze.cli import main
from traceanalyze.render.report.variant_findings import variant_findings

REPO = Path(__file__).resolve().parents[1]
SAMPLES = sorted((REPO / "sample_traces").glob("*/*.json.gz"))
GEMM = "nvjet_sm90_tst_64x512_64x2_1x2_h_bz_coopB_NNT"


def test_per_iteration_frame(tmp_path: Path) -> None:
    # Step 1: a 10 us kernel on stream 7 overlapping a 10 us kernel on stream 8 by 5 us, then a
    # 2 us copy after a 3 us gap. The GPU side ([20, 40]) is longer than the step (15 us).
    trace = load(
        tmp_path,
        [
            annotation("ProfilerStep#1", 0, 15),
            op("aten::mm", 1, 6),
            call("cudaLaunchKernel", 2, 1, 1),
            call("cudaLaunchKernel", 4, 1, 2),
            call("cudaMemcpyAsync", 6, 1, 3),
            kernel(GEMM, 20, 10, 1, stream=7),
            kernel(GEMM, 25, 10, 2, stream=8),
            kernel("Memcpy DtoD (Device -> Device)", 38, 2, 3, cat="gpu_memcpy", bytes=8),
        ],
    )
    times = step_times(trace).join(split_times(trace), on=["rank", "iteration"])
    row = times.drop("lo_ns", "hi_ns").row(0, named=True)
    assert row == {
        "rank": 0,
        "iteration": 1,
        "kernels": 2,
        "memcpy": 1,
        "memset": 0,
        "gpu_activity_us": 22.0,
        "gpu_kernel_us": 20.0,
        "gpu_memcpy_us": 2.0,
        "gpu_memset_us": 0.0,
        "gpu_span_us": 20.0,
        "own_busy_us": 17.0,  # [20, 35] and [38, 40]: less than the activity time
        "cpu_op_us": 6.0,
        "launch_us": 3.0,
        "cpu_span_us": 15.0,
        # The window: the GPU side [20, 40] is longer than the step, and the GPU ran nothing
        # before it, so it starts with the step: [0, 40].
        "wall_us": 40.0,
        "carried_in_warmup_us": 0.0,
        "gpu_busy_us": 17.0,
        "gpu_idle_us": 23.0,
        "compute_us": 15.0,
        "communication_us": 0.0,
        "exposed_communication_us": 0.0,
        "exposed_copy_us": 2.0,
        "carried_in_us": 0.0,
    }
    # Busy 17 of 40 us; the 20 us before the first kernel, launched at 2, wait on queued work
    # (a lone step needs a GPU side 10 points past the 80% line: critical-path's GPU_BOUND).
    figures = summary(trace)
    assert (figures["bound"], figures["bound_margin_pct"]) == ("cannot tell", None)
    assert "waiting on queued work 50.0% of the wall" in figures["bound_note"]


def test_no_gpu_activity_gets_no_verdict(tmp_path: Path) -> None:
    trace = load(tmp_path, [annotation("ProfilerStep#1", 0, 100), op("aten::add", 10, 20)])
    result = summary(trace)
    assert result["bound"] == "cannot tell"
    assert result["bound_note"].startswith("no GPU activity in the steps")
    assert result["gpu_busy_pct_of_wall"] == 0.0


def test_no_cpu_operators_gets_no_verdict(tmp_path: Path) -> None:
    # Launch calls but no operators (a legacy or GPU-only trace): 40 us of launches for 2 us of
    # GPU work would read "GPU-bound" under a rule that compares operators with the GPU.
    trace = load(
        tmp_path,
        [call("cudaLaunchKernel", 0, 40, 1), kernel(GEMM, 50, 2, 1)],
    )
    result = summary(trace)
    assert result["bound"] == "cannot tell"
    assert result["bound_note"].startswith("one step only")
    assert (result["iteration_source"], result["iteration_note"]) == (
        "whole trace",
        WHOLE_TRACE_NOTE,
    )
    assert result["launch_us_per_iter"] == 40.0


def test_cpu_bound_advice_follows_the_trace(tmp_path: Path) -> None:
    # CPU-bound with launch calls that take no time: no advice about launches.
    events = []
    for step in range(3):
        t0 = step * 100
        events += [
            annotation(f"ProfilerStep#{step + 1}", t0, 100),
            op("aten::item", t0 + 1, 90),
            op("aten::mm", t0 + 92, 2),
            call("cudaLaunchKernel", t0 + 93, 0, step + 2),
            kernel(GEMM, t0 + 93, 5, step + 2),
        ]
    trace = load(tmp_path, events)
    report = build_report(traceanalyze.load_variants([trace.path], cache=False))
    (section,) = report.variants
    [bound] = [s for s in variant_findings(section) if s.startswith("CPU-bound")]
    assert "fewer launches" not in bound  # the only launch call took no time
    assert "less CPU work between GPU activities" in bound


def test_capture_folder_commands_run_per_variant() -> None:
    folder = REPO / "sample_traces" / "h200_default"
    runner = CliRunner()
    records = json.loads(runner.invoke(main, ["summary", str(folder), "--format", "json"]).stdout)
    assert [r["variant"] for r in records][:2] == ["naive", "naive_inplace"]
    assert all(r["ranks"] == 1 for r in records)
    assert records[0]["memcpy_per_iter"] == 1.0 and records[1]["memcpy_per_iter"] == 0.0
    # One broken expectation in one variant fails the check.
    result = runner.invoke(main, ["check", str(folder), "-e", "memcpy_per_iter == 0"])
    assert result.exit_code == 1
    assert "BROKEN  naive: memcpy_per_iter == 0   (measured 1)" in result.stdout
    assert "held    naive_inplace: memcpy_per_iter == 0   (measured 0)" in result.stdout
    kernels = runner.invoke(main, ["kernels", str(folder), "--top", "1", "--format", "json"])
    assert [row["variant"] for row in json.loads(kernels.stdout)][:2] == ["naive", "naive_inplace"]
    with pytest.raises(traceanalyze.SeparateTracesError, match="capture folder"):
        traceanalyze.load(folder)


@pytest.mark.parametrize(
    ("expectation", "message"),
    [
        ("category:nosuchcat == 0", "unknown category 'nosuchcat'"),
        ("category_us:Softmax == 0", "unknown category 'Softmax'"),
        ("launch_api:cudaLaunchKernal == 0", "unknown launch API 'cudaLaunchKernal'"),
        ("gpu_us_per_iter > 0", "unknown metric 'gpu_us_per_iter'"),
    ],
)
def test_unknown_names_in_expectations_are_usage_errors(expectation: str, message: str) -> None:
    path = REPO / "sample_traces" / "h200_default" / "sdpa_flash.json.gz"
    result = CliRunner().invoke(main, ["check", str(path), "-e", expectation])
    assert result.exit_code == 2
    assert message in result.stderr
    assert (
        "fused_attention" in result.stderr
        or "gpu_busy_us_per_iter" in result.stderr
        or ("cudaLaunchKernel" in result.stderr)
    )


# ---------------------------------------------------------------------------------------------
# Invariants on every real trace: the figures add up with their neighbours.

REAL = [*SAMPLES, *public_trace_files()]


@pytest.mark.parametrize("path", REAL, ids=[f"{p.parent.name}/{p.name}" for p in REAL])
def test_figures_add_up(path: Path) -> None:
    trace = traceanalyze.load(path)
    result = summary(trace)
    activity = result["gpu_activity_us_per_iter"]
    assert sum(result["category_us"].values()) == pytest.approx(activity, abs=1e-6)
    parts = ("gpu_kernel_us_per_iter", "gpu_memcpy_us_per_iter", "gpu_memset_us_per_iter")
    assert sum(result[p] for p in parts) == pytest.approx(activity, abs=1e-6)
    busy, wall = result["gpu_busy_us_per_iter"], result["wall_us_per_iter"]
    assert busy <= wall + 1e-6
    idle = result["gpu_idle_us_per_iter"]
    if trace.gpu.height:  # a trace without GPU activity has no GPU timeline to be idle
        assert idle == pytest.approx(wall - busy, abs=1e-6)
    assert sum(result["idle_us_by_cause"].values()) == pytest.approx(idle, abs=1e-6)
    table = kernel_table(trace)
    per_launch = table.filter(table["count_per_iter"] > 0)
    assert (per_launch["count_per_iter"] * per_launch["mean_us"]).to_list() == pytest.approx(
        per_launch["us_per_iter"].to_list()
    )
    assert table["us_per_iter"].sum() == pytest.approx(activity, abs=1e-6)
    assert table["share_of_gpu_activity_pct"].sum() == pytest.approx(
        100.0 if activity else 0.0, abs=1e-6
    )
    limited = table.filter(table["theoretical_occupancy_pct"] == 100.0)
    assert limited["occupancy_limiter"].null_count() == limited.height


def test_a_busy_gpu_is_gpu_bound_without_cpu_operators(public: Path) -> None:
    # A GPU busy 89% of the step is GPU-bound whatever the CPU did (issue 19: CUDA graph
    # replays have no CPU operators); the whole trace is one step, so no verdict is given, but
    # the note says what that step is.
    result = summary(traceanalyze.load(public / "tl_mi210_gpu_only.json.gz"))
    assert result["cpu_op_us_per_iter"] == 0
    assert result["bound"] == "cannot tell"
    assert "that step alone:" in result["bound_note"] and "GPU-bound by" in result["bound_note"]
    assert result["gpu_busy_pct_of_wall"] == pytest.approx(88.69, abs=0.01)


@pytest.mark.parametrize(
    ("name", "note"),
    [
        # No GPU activity; its CPU ops lie outside the profiler steps.
        ("hta_cpu_only_rank34.pt.trace.json.gz", "no GPU activity in the steps"),
        # 1,448 µs of launches for 30 µs of GPU work, no CPU operators at all, one step.
        ("hta_inference_rank_1_legacy.json.gz", "one step only"),
        ("hta_no_distributed_info_a100.json.gz", "no GPU activity in the steps"),
    ],
)
def test_degenerate_public_traces_get_no_verdict(public: Path, name: str, note: str) -> None:
    trace = traceanalyze.load(public / name)
    result = summary(trace)
    assert result["bound"] == "cannot tell"
    assert result["bound_note"].startswith(note)
    report = build_report(traceanalyze.load_variants([public / name]))
    (section,) = report.variants
    assert not [s for s in variant_findings(section) if "bound" in s or "launches" in s]
