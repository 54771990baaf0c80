"""`audit` on micro traces: one fault injected into a clean trace, found with its exact count,
what it moves, and the clean trace `ok` with only info rows.

Times sit on an absolute clock (1.7e12 µs, as Kineto's epoch clock writes them), where ts 0 is
no real time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceanalyze
from tests.micro import annotation, call, kernel, op, write_trace
from traceanalyze.analyses.audit import audit

BASE = 1_700_000_000_000  # µs
GEMM = "nvjet_sm90_tst_64x512_64x2_1x2_h_bz_coopB_NNT"
ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
STEPS = 3
STEP_US = 1000
KERNEL_US = 40


def clean_events(per_step: int = 2) -> list[dict[str, Any]]:
    """Three steps of 1 ms, each ``per_step`` `aten::mm` launching a 40 µs GEMM on stream 7,
    100 µs apart: correlations 1, 2, ... in order."""
    events: list[dict[str, Any]] = []
    correlation = 1
    for step in range(STEPS):
        start = BASE + step * STEP_US
        events.append(annotation(f"ProfilerStep#{step + 1}", start, 900))
        for k in range(per_step):
            ts = start + 10 + k * 100
            events += [
                op("aten::mm", ts, 50),
                call("cudaLaunchKernel", ts + 5, 10, correlation),
                kernel(GEMM, ts + 20, KERNEL_US, correlation),
            ]
            correlation += 1
    return events


def audited(tmp_path: Path, events: list[dict[str, Any]]) -> Any:
    return audit(traceanalyze.load(write_trace(tmp_path, events), cache=False))


def faults(result: Any) -> dict[tuple[str, str], dict[str, Any]]:
    """The rows that found something, by (check, finding)."""
    rows = result.checks.filter(pl.col("count") > 0)
    return {(r["check"], r["finding"]): r for r in rows.iter_rows(named=True)}


def is_kernel(event: dict[str, Any], correlation: int) -> bool:
    return event["cat"] == "kernel" and event["args"]["correlation"] == correlation


def test_the_clean_trace_is_ok_with_info_rows_only(tmp_path: Path) -> None:
    result = audited(tmp_path, clean_events())
    assert result.ok
    assert set(result.checks["severity"]) == {"info"}
    assert result.checks["count"].sum() == 0
    assert result.error_bars == {}
    assert result.checks["check"].unique(maintain_order=True).to_list() == [
        "launches_without_activity", "activity_without_launch", "overlapping_on_stream",
        "duration_overflow", "bad_timestamps", "truncated", "clock_skew", "gpu_clock_offset",
        "profiler_overhead", "graph_replays_opaque", "missing_metadata",
    ]  # fmt: skip


def test_a_dropped_kernel(tmp_path: Path) -> None:
    events = [e for e in clean_events() if not is_kernel(e, 4)]  # step 2's second GEMM
    found = faults(audited(tmp_path, events))
    assert set(found) == {("launches_without_activity", "dropped")}
    row = found["launches_without_activity", "dropped"]
    assert row["count"] == 1
    # Its 40 µs estimated from the other GEMMs launched by aten::mm, over 3 steps.
    assert row["affected_us_per_iter"] == pytest.approx(KERNEL_US / STEPS)
    assert row["severity"] == "error"  # kernels_per_iter moves by 1/3 of 5/3: 20%
    assert "kernels_per_iter" in row["figures"]
    assert "cudaLaunchKernel (correlation 4, under aten::mm)" in row["detail"]


def test_a_dropped_kernel_moves_the_counts_exactly(tmp_path: Path) -> None:
    events = [e for e in clean_events() if not is_kernel(e, 4)]
    result = audited(tmp_path, events)
    assert result.error_bars["kernels_per_iter"] == pytest.approx(1 / STEPS)
    assert result.error_bars["gpu_kernel_us_per_iter"] == pytest.approx(KERNEL_US / STEPS)
    assert result.figures["kernels_per_iter"] == pytest.approx(5 / STEPS)


def test_a_duplicated_overlapping_kernel(tmp_path: Path) -> None:
    events = clean_events()
    original = next(e for e in events if is_kernel(e, 2))
    events.append({**original, "ts": original["ts"] + 5})  # the same record again, 5 µs later
    found = faults(audited(tmp_path, events))
    assert set(found) == {("overlapping_on_stream", "duplicate")}
    row = found["overlapping_on_stream", "duplicate"]
    assert row["count"] == 1
    assert row["affected_us_per_iter"] == pytest.approx(35 / STEPS)  # overlaps 35 of its 40 µs
    assert "kernels_per_iter" in row["figures"] and "gpu_activity_us_per_iter" in row["figures"]


def test_a_ts_zero_op(tmp_path: Path) -> None:
    found = faults(audited(tmp_path, [*clean_events(), op("aten::add", 0, 20)]))
    assert set(found) == {("bad_timestamps", "ts_zero")}
    assert found["bad_timestamps", "ts_zero"]["count"] == 1
    assert "cpu `aten::add`" in found["bad_timestamps", "ts_zero"]["detail"]


def test_a_ts_zero_launch_puts_its_kernel_out_of_the_steps(tmp_path: Path) -> None:
    events = clean_events()
    launch = next(e for e in events if e["cat"] == "cuda_runtime" and e["args"]["correlation"] == 5)
    launch["ts"] = 0
    result = audited(tmp_path, events)
    row = faults(result)["bad_timestamps", "ts_zero"]
    assert row["count"] == 1  # the call at ts 0 (its kernel, which loses its step, is affected)
    # Put back in the step its own start is in, the kernel adds 1 to 5 kernels in 3 steps.
    assert result.error_bars["kernels_per_iter"] == pytest.approx(1 / STEPS)


def test_a_negative_duration(tmp_path: Path) -> None:
    events = clean_events()
    next(e for e in events if is_kernel(e, 3))["dur"] = -40
    found = faults(audited(tmp_path, events))
    assert ("bad_timestamps", "negative_duration") in found
    assert found["bad_timestamps", "negative_duration"]["count"] == 1


def test_an_event_far_outside_the_span(tmp_path: Path) -> None:
    day_us = 86_400 * 1_000_000
    found = faults(audited(tmp_path, [*clean_events(), op("aten::add", BASE + day_us, 20)]))
    assert set(found) == {("bad_timestamps", "outside_span")}
    assert found["bad_timestamps", "outside_span"]["count"] == 1


def test_an_overflowing_duration(tmp_path: Path) -> None:
    events = clean_events()
    next(e for e in events if is_kernel(e, 3))["dur"] = 400  # runs 300 µs past the next start
    result = audited(tmp_path, events)
    found = faults(result)
    assert set(found) == {("duration_overflow", "past_next")}
    row = found["duration_overflow", "past_next"]
    assert row["count"] == 1
    assert row["affected_us_per_iter"] == pytest.approx(300 / STEPS)
    # Clipped to the next start (100 µs), the kernel time falls by 300 µs in one of 3 steps.
    assert result.error_bars["gpu_kernel_us_per_iter"] == pytest.approx(300 / STEPS)


def test_an_implausibly_long_kernel_on_its_own_stream(tmp_path: Path) -> None:
    events = clean_events()
    # Alone at the end of its stream: nothing to run past, but 11 s is no GEMM's length.
    next(e for e in events if is_kernel(e, 6))["dur"] = 11_000_000
    found = faults(audited(tmp_path, events))
    assert ("duration_overflow", "implausible") in found


@pytest.mark.parametrize("per_step", [1, 2])
def test_the_last_kernel_1000x_its_peers_is_implausible(tmp_path: Path, per_step: int) -> None:
    # The last GEMM made 1000x longer (40 ms): under every kind's limit, nothing after it on
    # its stream, and two (one per step) or five other runs of its shape to compare with.
    events = clean_events(per_step)
    next(e for e in events if is_kernel(e, STEPS * per_step))["dur"] = KERNEL_US * 1000
    found = faults(audited(tmp_path, events))
    assert set(found) == {("duration_overflow", "implausible")}
    assert found["duration_overflow", "implausible"]["count"] == 1


def test_an_open_step(tmp_path: Path) -> None:
    events = clean_events()
    next(e for e in events if e["name"] == "ProfilerStep#3")["dur"] = 0
    found = faults(audited(tmp_path, events))
    assert ("truncated", "open_step") in found
    assert found["truncated", "open_step"]["count"] == 1


def test_a_step_begun_and_never_ended_is_open(tmp_path: Path) -> None:
    # Written as a "B" event whose "E" never came (the loader keeps it with duration 0).
    events = clean_events()
    step = next(e for e in events if e["name"] == "ProfilerStep#3")
    step["ph"] = "B"
    del step["dur"]
    found = faults(audited(tmp_path, events))
    assert set(found) == {("truncated", "open_step")}
    assert found["truncated", "open_step"]["count"] == 1


def test_a_ts_zero_launch_on_a_gpu_running_behind_goes_back_to_its_step(tmp_path: Path) -> None:
    # The GPU runs every kernel 2.5 ms late (after every step has ended on the CPU): the kernel
    # of the launch call at ts 0 belongs to the step of the launch before it, not its own start.
    events = clean_events()
    for e in events:
        if e["cat"] == "kernel":
            e["ts"] += 2500
    next(e for e in events if e["cat"] == "cuda_runtime" and e["args"]["correlation"] == 4)[
        "ts"
    ] = 0
    result = audited(tmp_path, events)
    assert faults(result)["bad_timestamps", "ts_zero"]["count"] == 1
    assert result.error_bars["kernels_per_iter"] == pytest.approx(1 / STEPS)


def test_a_last_step_cut_short(tmp_path: Path) -> None:
    # Four GEMMs a step; the profiler stops in the last step after its first GEMM, 200 µs in.
    cut = BASE + 2 * STEP_US + 100
    events = [e for e in clean_events(per_step=4) if e["ts"] < cut]
    next(e for e in events if e["name"] == "ProfilerStep#3")["dur"] = 200
    found = faults(audited(tmp_path, events))
    assert set(found) == {("truncated", "short_last_step")}
    assert found["truncated", "short_last_step"]["count"] == 1


def test_work_launched_before_the_window_is_info(tmp_path: Path) -> None:
    # A kernel whose correlation precedes every launch call of the trace: queued before the
    # profiler started.
    events = [kernel(GEMM, BASE - 30, 40, 0), *clean_events()]
    result = audited(tmp_path, events)
    assert result.ok
    assert faults(result)[("activity_without_launch", "before_window")]["count"] == 1


def test_a_missing_launch_inside_the_window(tmp_path: Path) -> None:
    events = [
        e
        for e in clean_events()
        if not (e["cat"] == "cuda_runtime" and e["args"]["correlation"] == 4)
    ]
    found = faults(audited(tmp_path, events))
    assert set(found) == {("activity_without_launch", "inside_window")}
    row = found["activity_without_launch", "inside_window"]
    assert row["count"] == 1
    assert row["affected_us_per_iter"] == pytest.approx(KERNEL_US / STEPS)


def rank_events(rank_shift_us: int) -> list[dict[str, Any]]:
    """Three steps, each an all-reduce that ends at the same true instant on every rank (ranks
    join it at different times), on a clock ``rank_shift_us`` ahead."""
    events: list[dict[str, Any]] = []
    for step in range(STEPS):
        start = BASE + step * STEP_US + rank_shift_us
        join = 100 + 37 * rank_shift_us % 50  # when this rank joins
        events += [
            annotation(f"ProfilerStep#{step + 1}", start, 900),
            op("c10d::allreduce_", start + 10, 20),
            call("cudaLaunchKernel", start + 12, 5, step + 1),
            kernel(ALL_REDUCE, start + join, 500 - join, step + 1, stream=20),
        ]
    return events


def test_a_rank_shifted_by_a_known_offset(tmp_path: Path) -> None:
    for rank, shift in ((0, 0), (1, 1234)):
        write_trace(tmp_path, rank_events(shift), f"rank{rank}.json", rank=rank)
    result = audit(traceanalyze.load(tmp_path, cache=False))
    row = faults(result)["clock_skew", "skewed"]
    assert row["severity"] == "warning"
    assert result.offsets_us[0] == 0.0
    assert result.offsets_us[1] == pytest.approx(1234, rel=0.05)


def test_ranks_that_agree_are_aligned(tmp_path: Path) -> None:
    for rank in (0, 1):
        write_trace(tmp_path, rank_events(0), f"rank{rank}.json", rank=rank)
    result = audit(traceanalyze.load(tmp_path, cache=False))
    assert faults(result)["clock_skew", "aligned"]["severity"] == "info"
    assert result.offsets_us == {0: 0.0, 1: 0.0}


def test_a_kernel_before_its_launch(tmp_path: Path) -> None:
    # The kernel of call 3 moved 50 µs early: it starts 35 µs before its call (15 µs after).
    events = clean_events()
    next(e for e in events if is_kernel(e, 3))["ts"] -= 50
    found = faults(audited(tmp_path, events))
    assert set(found) == {("bad_timestamps", "before_launch")}
    assert found["bad_timestamps", "before_launch"]["count"] == 1
    assert (
        "(35000 ns before its cudaLaunchKernel)"
        in found["bad_timestamps", "before_launch"]["detail"]
    )


@pytest.mark.parametrize("early_us", [70, 85, 110])
def test_a_kernel_moved_before_its_launch_onto_the_kernel_before_is_one_fault(
    tmp_path: Path, early_us: int
) -> None:
    # Found by injecting faults into real traces: call 4's kernel (ts +1130 µs, launched at
    # +1115) moved early onto call 3's kernel (+1030 to +1070): 70 µs early it overlaps 10 µs
    # (was a timing error), 85 µs early 25 µs (more than call 3's kernel had before it: was
    # an overflow of that kernel); 110 µs early it starts before call 3's kernel, which then
    # overlaps it (was a timing error). All are the early start's fault only.
    events = clean_events()
    next(e for e in events if is_kernel(e, 4))["ts"] -= early_us
    found = faults(audited(tmp_path, events))
    assert set(found) == {("bad_timestamps", "before_launch")}
    assert found["bad_timestamps", "before_launch"]["count"] == 1


def test_a_duplicated_record_that_does_not_overlap(tmp_path: Path) -> None:
    events = clean_events()
    original = next(e for e in events if is_kernel(e, 2))
    events.append(
        {**original, "ts": original["ts"] + 300, "args": {**original["args"], "stream": 9}}
    )
    result = audited(tmp_path, events)
    found = faults(result)
    assert set(found) == {("activity_without_launch", "extra")}
    assert found["activity_without_launch", "extra"]["count"] == 1
    assert result.error_bars["kernels_per_iter"] == pytest.approx(1 / STEPS)


def test_a_duplicate_is_one_fault_whatever_it_covers(tmp_path: Path) -> None:
    # A 95 µs GEMM's record again 30 µs later covers the next GEMM's start: that overlap is
    # the duplicate's, not a timing error of its own (found by a skeptical pass).
    events = clean_events()
    original = next(e for e in events if is_kernel(e, 1))
    original["dur"] = 95
    events.append({**original, "ts": original["ts"] + 30})
    found = faults(audited(tmp_path, events))
    assert set(found) == {("overlapping_on_stream", "duplicate")}
    assert found["overlapping_on_stream", "duplicate"]["count"] == 1


def test_a_duplicate_of_work_launched_before_the_window(tmp_path: Path) -> None:
    early = kernel(GEMM, BASE - 30, 40, 0)
    found = faults(audited(tmp_path, [early, {**early, "ts": BASE - 20}, *clean_events()]))
    assert found["overlapping_on_stream", "duplicate"]["count"] == 1


def test_an_overflow_on_hopper_is_no_programmatic_launch(tmp_path: Path) -> None:
    # Kernels launched with cuLaunchKernelEx on an H200 may overlap the tail of the one before
    # (PDL); not a kernel that runs 50 times its length over the next ones.
    events = clean_events(per_step=4)
    for e in events:
        if e["cat"] == "cuda_runtime":
            e["name"] = "cuLaunchKernelEx"
    next(e for e in events if is_kernel(e, 1))["dur"] = 40 * 50
    found = faults(audited(tmp_path, events))
    assert set(found) == {("duration_overflow", "past_next")}
    assert found["duration_overflow", "past_next"]["count"] == 1


def test_a_ts_zero_kernel_is_one_finding(tmp_path: Path) -> None:
    # Found by a skeptical pass: it was also counted as starting before its launch call.
    events = clean_events()
    next(e for e in events if is_kernel(e, 3))["ts"] = 0
    found = faults(audited(tmp_path, events))
    assert set(found) == {("bad_timestamps", "ts_zero")}


def test_a_ts_zero_op_stretches_a_whole_trace_iteration(tmp_path: Path) -> None:
    # No steps: the whole trace is one iteration, which the op at ts 0 stretches to 1.7e12 µs.
    events = [e for e in clean_events() if e["cat"] != "user_annotation"]
    result = audited(tmp_path, [*events, op("aten::add", 0, 20)])
    assert faults(result)["bad_timestamps", "ts_zero"]["severity"] == "error"
    assert result.error_bars["wall_us_per_iter"] == pytest.approx(BASE - 20, rel=1e-6)


def test_a_rank_missing_one_collective_is_still_aligned(tmp_path: Path) -> None:
    for rank, shift in ((0, 0), (1, 1234)):
        events = rank_events(shift)
        if rank == 1:  # its second all-reduce lost: step 2 no longer runs the same sequence
            events = [e for e in events if not is_kernel(e, 2)]
        write_trace(tmp_path, events, f"rank{rank}.json", rank=rank)
    result = audit(traceanalyze.load(tmp_path, cache=False))
    assert result.offsets_us == {0: 0.0, 1: pytest.approx(1234, rel=0.05)}


def test_ranks_whose_collectives_do_not_end_together_are_not_aligned(tmp_path: Path) -> None:
    for rank in (0, 1):
        events = rank_events(500)
        if rank == 1:  # each all-reduce ends 0, 300 and 600 µs off: no clock offset fits
            for step, late in enumerate((0, 300, 600)):
                next(e for e in events if is_kernel(e, step + 1))["dur"] += late
        write_trace(tmp_path, events, f"rank{rank}.json", rank=rank)
    result = audit(traceanalyze.load(tmp_path, cache=False))
    row = faults(result)["clock_skew", "not_estimable"]
    assert row["count"] == 1 and "do not end together" in row["detail"]
    assert result.offsets_us == {}
