"""Faults a skeptical pass injected into real traces (issue 40, reports/skeptic40): each on a
micro trace, and on the injected real copy where /tmp/skeptic40/faults holds it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import traceanalyze
from tests.micro import call, kernel, op, write_trace
from tests.test_audit_micro import (
    BASE,
    GEMM,
    STEPS,
    audited,
    clean_events,
    faults,
    is_kernel,
    rank_events,
)
from traceanalyze.cli import main

# Integer µs on a Unix-epoch clock, as the Windows CPU trace of the corpus writes them: a span
# from ts 0 to here is 1.67e21 ps, past Int64.
EPOCH_US = 1_672_900_000_000_000
FAULTS = Path("/tmp/skeptic40/faults")


# the figure a command prints, under its own name
KERNEL_TIME = {"gpu_kernel_us_per_iter": "gpu_kernel_us_per_iter"}


def cpu_only(*extra: dict[str, Any]) -> list[dict[str, Any]]:
    ops = [op("aten::mm", EPOCH_US + 100 * i, 50) for i in range(6)]
    return [*ops, *extra]


@pytest.mark.parametrize("command", ["audit", "summary", "idle", "kernels", "report"])
def test_a_ts_zero_op_on_an_epoch_clock_is_reported_not_a_traceback(
    tmp_path: Path, command: str
) -> None:
    path = write_trace(tmp_path, cpu_only(op("aten::empty", 0, 3), op("aten::empty", 0, 4)))
    formats = [] if command == "report" else ["--format", "json"]
    result = CliRunner().invoke(main, [command, str(path), *formats])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 0, result.output
    if command == "audit":
        row = next(r for r in json.loads(result.stdout)["checks"] if r["finding"] == "ts_zero")
        assert row["count"] == 2


def test_a_ts_zero_op_on_an_epoch_clock_moves_the_wall_by_its_span(tmp_path: Path) -> None:
    result = audited(tmp_path, cpu_only(op("aten::empty", 0, 3)))
    row = faults(result)["bad_timestamps", "ts_zero"]
    assert row["count"] == 1 and row["severity"] == "error"
    assert result.error_bars["wall_us_per_iter"] == pytest.approx(EPOCH_US + 550, rel=1e-9)


@pytest.mark.skipif(not FAULTS.is_dir(), reason="the skeptic's injected copies are absent")
def test_the_injected_windows_cpu_trace_reports_its_ts_zero_ops() -> None:
    path = FAULTS / "cpu_dtu_windows" / "f3_ts0x3_neg2_out2.json.gz"
    found = faults(traceanalyze.audit(traceanalyze.load(path, cache=False)))
    assert found["bad_timestamps", "ts_zero"]["count"] == 3
    assert found["bad_timestamps", "negative_duration"]["count"] == 2
    assert found["bad_timestamps", "outside_span"]["count"] == 2


def test_the_folder_audit_names_the_rank_of_each_example(tmp_path: Path) -> None:
    for rank in (0, 1):
        events = [e for e in rank_events(0) if not is_kernel(e, 2 + rank)]
        write_trace(tmp_path, events, f"rank{rank}.json", rank=rank)
    result = traceanalyze.audit(traceanalyze.load(tmp_path, cache=False))
    detail = faults(result)["launches_without_activity", "dropped"]["detail"]
    assert "correlation 2" in detail and "on rank 0" in detail
    assert "correlation 3" in detail and "on rank 1" in detail


def test_moved_pct_is_a_share_of_the_figure_without_the_fault(tmp_path: Path) -> None:
    # The third GEMM (40 µs) made 400: 300 µs past the next start, 100 µs after its own. Clipped
    # there (the repair), kernel time is (5 * 40 + 100) / 3 = 100 µs per iteration; with the
    # fault (5 * 40 + 400) / 3 = 200. The move (100) is 100% of 100 (it was 50% of the faulty
    # 200).
    events = clean_events()
    next(e for e in events if is_kernel(e, 3))["dur"] = 400
    result = audited(tmp_path, events)
    row = faults(result)["duration_overflow", "past_next"]
    assert result.error_bars["gpu_kernel_us_per_iter"] == pytest.approx(100)
    assert row["moved_pct"] == pytest.approx(100, rel=1e-6)
    said = result.warnings_for(KERNEL_TIME)["duration_overflow/past_next"]
    assert "(100.0% of 100)" in said


def test_moved_pct_of_dropped_work_is_a_share_of_the_figure_with_it(tmp_path: Path) -> None:
    # One of six 40 µs GEMMs lost: 80 µs per iteration without the fault, 80 - 40/3 with it.
    events = [e for e in clean_events() if not is_kernel(e, 4)]
    result = audited(tmp_path, events)
    said = result.warnings_for(KERNEL_TIME)["launches_without_activity/dropped"]
    assert "(16.7% of 80)" in said


def test_a_small_overflow_over_two_kernels_is_one_timing_fault_by_its_true_amount(
    tmp_path: Path,
) -> None:
    # Step 1's first GEMM (BASE+30, 40 µs) made 130 µs: it ends at BASE+160, 30 µs past the
    # start of the next GEMM (BASE+130, cut to 5 µs) and over a third one (BASE+140, 5 µs). 30 µs
    # is under the 100 µs it had before the next start: a timing overlap, not an overflow.
    events = clean_events()
    next(e for e in events if is_kernel(e, 1))["dur"] = 130
    next(e for e in events if is_kernel(e, 2))["dur"] = 5
    events += [
        op("aten::add", BASE + 136, 3),
        call("cudaLaunchKernel", BASE + 137, 1, 100),
        kernel(GEMM, BASE + 140, 5, 100),
    ]
    result = audited(tmp_path, events)
    found = faults(result)
    assert set(found) == {("overlapping_on_stream", "timing")}
    row = found["overlapping_on_stream", "timing"]
    assert row["count"] == 1
    assert row["affected_us_per_iter"] == pytest.approx(30 / STEPS)
    assert "by 30.000 µs in all" in row["detail"] and "over 2 later activities" in row["detail"]
    assert "by 30000 ns" in row["detail"]
    # The repair clips the GEMM to the next start: 100 of its 130 µs kept.
    assert result.error_bars["gpu_kernel_us_per_iter"] == pytest.approx(30 / STEPS)


@pytest.mark.parametrize(("finding", "ts"), [("ts_zero", 0), ("outside_span", BASE + 10**10)])
def test_ops_at_a_lost_time_move_cpu_op_time_and_the_outside_count(
    tmp_path: Path, finding: str, ts: int
) -> None:
    # A 20 µs op at ts 0 (or 3 h after the trace): out of every step, so the steps lack its time
    # and summary counts it outside the iterations.
    result = audited(tmp_path, [*clean_events(), op("aten::add", ts, 20)])
    row = faults(result)["bad_timestamps", finding]
    assert row["affected_us_per_iter"] == pytest.approx(20 / STEPS)
    assert set(row["figures"]) == {"cpu_op_us_per_iter", "cpu_ops_outside_iterations_total"}
    assert result.error_bars == {
        "cpu_op_us_per_iter": pytest.approx(20 / STEPS),
        "cpu_ops_outside_iterations_total": 1.0,
    }
    summary = traceanalyze.summary(traceanalyze.load(tmp_path / "trace.json", cache=False))
    assert summary.cpu_ops_outside_iterations_total == 1  # type: ignore[union-attr]


def test_a_kernel_without_dur_is_a_missing_duration(tmp_path: Path) -> None:
    events = clean_events()
    del next(e for e in events if is_kernel(e, 3))["dur"]
    next(e for e in events if is_kernel(e, 5))["dur"] = 40.5  # kernels timed to the ns
    result = audited(tmp_path, events)
    assert not result.ok
    row = faults(result)["bad_timestamps", "missing_duration"]
    assert row["count"] == 1 and "(correlation 3)" in row["detail"]
    # Its 40 µs (the median of the GEMM's timed runs) over 3 steps.
    assert row["affected_us_per_iter"] == pytest.approx(40 / STEPS)
    assert result.error_bars["gpu_kernel_us_per_iter"] == pytest.approx(40 / STEPS)


def test_zero_length_kernels_of_a_whole_microsecond_trace_are_no_fault(tmp_path: Path) -> None:
    # Legacy traces write whole µs: a sub-µs kernel reads 0 there.
    events = clean_events()
    next(e for e in events if is_kernel(e, 3))["dur"] = 0
    assert ("bad_timestamps", "missing_duration") not in faults(audited(tmp_path, events))


@pytest.mark.skipif(not FAULTS.is_dir(), reason="the skeptic's injected copies are absent")
def test_the_injected_gpt2_copy_reports_its_4_kernels_without_dur() -> None:
    path = FAULTS / "odd" / "kernels4_without_dur.json.gz"
    found = faults(traceanalyze.audit(traceanalyze.load(path, cache=False)))
    assert found["bad_timestamps", "missing_duration"]["count"] == 4


def cut_at(events: list[dict[str, Any]], cut_us: float) -> list[dict[str, Any]]:
    """The recording stopped at ``cut_us``: every event starting after it removed, CPU events
    running across it ending there (as the skeptic's injection, and a profiler's stop, do)."""
    kept = [dict(e) for e in events if e["ts"] <= cut_us]
    for e in kept:
        if e["cat"] != "kernel" and e["ts"] + e["dur"] > cut_us:
            e["dur"] = cut_us - e["ts"]
    return kept


@pytest.mark.parametrize("steps", [1, 2, 3])
def test_a_last_step_the_recording_ends_inside_is_truncated(tmp_path: Path, steps: int) -> None:
    # Cut 40 µs into the last step, inside its first aten::mm (+10..+60 µs), whose GEMM
    # (+30 µs) is recorded: nothing is dropped, the step is merely cut.
    start = BASE + (steps - 1) * 1000
    events = [e for e in clean_events() if e["ts"] < BASE + steps * 1000]
    found = faults(audited(tmp_path, cut_at(events, start + 40)))
    row = found["truncated", "cut_last_step"]
    assert row["count"] == 1 and row["severity"] in ("warning", "error")
    assert f"`ProfilerStep#{steps}`" in row["detail"]
    assert ("launches_without_activity", "dropped") not in found


def test_a_last_step_cut_while_the_gpu_lags_is_truncated_not_an_empty_closing_step(
    tmp_path: Path,
) -> None:
    # The GPU runs 800 µs behind: the last step's kernels start after the cut, so it holds
    # launches and no GPU work, like the profiler's empty closing step.
    events = clean_events()
    for e in events:
        if e["cat"] == "kernel" and e["ts"] > BASE + 2000:
            e["ts"] += 800
    found = faults(audited(tmp_path, cut_at(events, BASE + 2120)))
    assert found["truncated", "cut_last_step"]["count"] == 1
    assert ("truncated", "empty_last_step") not in found


@pytest.mark.skipif(not FAULTS.is_dir(), reason="the skeptic's injected copies are absent")
@pytest.mark.parametrize(
    "name", ["mi300_bert", "h200_gpt2_eager", "a100_nccl_train", "mi300x_resnet_train"]
)
@pytest.mark.parametrize("pct", [30, 50])
def test_the_injected_cut_last_steps_are_truncated(name: str, pct: int) -> None:
    path = FAULTS / name / f"f6_cut_last_step_at{pct}pct.json.gz"
    found = faults(traceanalyze.audit(traceanalyze.load(path, cache=False)))
    assert found["truncated", "cut_last_step"]["count"] == 1
    assert ("truncated", "empty_last_step") not in found


def test_a_closing_step_written_as_an_operator_is_not_cut(tmp_path: Path) -> None:
    # 2020 traces write ProfilerStep#N as an operator: the last one ends at the last CPU event,
    # but no other operator ends with it.
    events = clean_events()
    for e in events:
        if e["name"].startswith("ProfilerStep#"):
            e["cat"] = "cpu_op"
    assert ("truncated", "cut_last_step") not in faults(audited(tmp_path, events))


SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "corpus"


@pytest.mark.skipif(not SHARED.is_dir(), reason="the shared corpus is absent")
def test_the_2020_resnet_trace_ends_after_its_last_step_uncut() -> None:
    path = SHARED / "kineto_tb_resnet50_2020_bare_array.json.gz"
    found = faults(traceanalyze.audit(traceanalyze.load(path)))
    assert not any(check == "truncated" for check, _ in found)
