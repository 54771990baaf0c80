"""`ranks` on micro traces: exact interval arithmetic for exposed communication and overlap,
clock alignment and collective skew, stragglers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceanalyze
from tests.micro import annotation, call, kernel, op, write_trace
from traceanalyze.analyses.distributed.ranks import rank_rows, rank_work, ranks_analysis
from traceanalyze.analyses.distributed.skew import ALIGN_NONE
from traceanalyze.engine import rank_folder
from traceanalyze.errors import UsageError

GEMM = "nvjet_sm90_tst_64x512_64x2_1x2_h_bz_coopB_NNT"
ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
BROADCAST = "ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def launched(correlation: int, name: str, ts: float, dur: float, **where: Any) -> list[Any]:
    """A kernel and the launch call for it, 1 us after the step starts (inside step 1)."""
    return [call("cudaLaunchKernel", 1 + correlation * 0.01, 0.005, correlation),
            kernel(name, ts, dur, correlation, **where)]  # fmt: skip


def test_exposed_communication_and_overlap(tmp_path: Path) -> None:
    # Step 1 on device 0: compute [10, 25] and [40, 45] on stream 7; communication [20, 50] and
    # [45, 60] on stream 9 (union [20, 60] = 40 us); a copy [30, 35] that is not compute; and on
    # device 1 a compute kernel [20, 50], which hides nothing on device 0 for the overlap share
    # (per device). Compute overlaps the communication union in [20, 25] and [40, 45]: 10 us
    # of 40. Step 2: compute only.
    events = [
        annotation("ProfilerStep#1", 0, 100),
        op("aten::mm", 0.5, 5),
        *launched(1, GEMM, 10, 15),
        *launched(2, GEMM, 40, 5),
        *launched(3, ALL_REDUCE, 20, 30, stream=9),
        *launched(4, ALL_REDUCE, 45, 15, stream=9),
        *launched(5, "Memcpy DtoD (Device -> Device)", 30, 5, cat="gpu_memcpy", bytes=8),
        *launched(6, GEMM, 20, 30, device=1),
        annotation("ProfilerStep#2", 100, 100),
        call("cudaLaunchKernel", 101, 1, 7),
        kernel(GEMM, 110, 10, 7),
    ]
    trace = traceanalyze.load(write_trace(tmp_path, events), cache=False)
    row = rank_rows(trace).row(0, named=True)
    assert row == {
        "rank": 0,
        "iterations": 2,
        "wall_us_per_iter": 100.0,
        # The rank's GPUs taken together: [10, 60] (device 1's [20, 50] inside it); step 2.
        "gpu_busy_us_per_iter": (50 + 10) / 2,
        "gpu_kernel_us_per_iter": (15 + 5 + 30 + 15 + 30 + 10) / 2,
        "communication_kernel_us_per_iter": (30 + 15) / 2,
        # The step model's (the summary's), the rank's GPUs together: device 1's compute
        # [20, 50] hides device 0's collectives there, leaving [50, 60] exposed.
        "exposed_communication_us_per_iter": 10 / 2,
        "overlap_pct_of_communication": 10 / 40 * 100,
        "collective_busbw_gbps_median": None,  # the kernels carry no collective args
        # The steps' windows (0-100, 100-200) minus their busy time.
        "gpu_idle_us_per_iter": (50 + 90) / 2,
    }


def test_no_communication_has_no_overlap_share(tmp_path: Path) -> None:
    events = [
        annotation("ProfilerStep#1", 0, 50),
        op("aten::mm", 0.5, 5),
        *launched(1, GEMM, 10, 5),
    ]
    row = rank_rows(traceanalyze.load(write_trace(tmp_path, events), cache=False)).row(
        0, named=True
    )
    assert (row["communication_kernel_us_per_iter"], row["exposed_communication_us_per_iter"]) == (
        0.0,
        0.0,
    )
    assert row["overlap_pct_of_communication"] is None


def rank_events(shift: float, late: dict[str, float] | None = None) -> list[Any]:
    """One step with all-reduce #0 [20, 30], all-reduce #1 [60, 70] and a broadcast [80, 85],
    on a clock ``shift`` us ahead; ``late`` starts a collective that much later, ending at the
    same moment (its rank joined late and the collective waited for it)."""
    late = late or {}
    plan = [(1, ALL_REDUCE, 20, 10, "ar0"), (2, ALL_REDUCE, 60, 10, "ar1"),
            (3, BROADCAST, 80, 5, "bc0")]  # fmt: skip
    events = [annotation("ProfilerStep#1", shift, 100), op("aten::mm", shift + 0.5, 5)]
    for correlation, name, ts, dur, key in plan:
        delay = late.get(key, 0.0)
        events += launched(correlation, name, ts + delay, dur - delay, stream=9)
    for event in events:
        if event["cat"] != "user_annotation" and event["name"] != "aten::mm":
            event["ts"] += shift
    return events


def job(folder: Path, *ranks: list[Any]) -> Path:
    folder.mkdir()
    for rank, events in enumerate(ranks):
        write_trace(folder, events, name=f"rank{rank}.json", rank=rank)
    return folder


def test_clock_offsets_and_collective_skew(tmp_path: Path) -> None:
    # Rank 1's host clock is 1000 us ahead and it joins the broadcast 3 us late; rank 2 joins
    # all-reduce #0 7 us late. Every collective ends together on the true clock.
    folder = job(
        tmp_path / "job",
        rank_events(0),
        rank_events(1000, late={"bc0": 3}),
        rank_events(0, late={"ar0": 7}),
    )
    result = rank_folder(folder, cache=False)
    assert result.ranks.select("rank", "clock_offset_us", "collectives_started_last").rows() == [
        (0, 0.0, 0),
        (1, 1000.0, 1),
        (2, 0.0, 1),
    ]
    skew = result.collectives.select(
        "iteration", "occurrence", "ranks", "start_spread_us", "first_rank", "last_rank", "mean_us"
    )
    assert skew.rows() == [
        (1, 0, 3, 7.0, 0, 2, (10 + 10 + 3) / 3),  # all-reduce #0
        (1, 0, 3, 3.0, 0, 1, (5 + 2 + 5) / 3),  # the broadcast
        (1, 1, 3, 0.0, None, None, 10.0),  # all-reduce #1: together, no first or last
    ]
    assert result.collectives["name"].to_list() == [ALL_REDUCE, BROADCAST, ALL_REDUCE]
    assert (result.median_start_spread_us, result.max_start_spread_us) == (3.0, 7.0)
    assert "not synchronised" in result.notes[0]


def test_raw_clocks_on_request(tmp_path: Path) -> None:
    folder = job(tmp_path / "job", rank_events(0), rank_events(1000))
    result = rank_folder(folder, cache=False, align=ALIGN_NONE)
    assert result.collectives["start_spread_us"].to_list() == [1000.0] * 3
    assert result.ranks["clock_offset_us"].to_list() == [0.0, 0.0]
    assert result.notes[0].startswith("Clocks compared raw")


def test_rank_without_a_shared_collective_is_left_out_of_the_skew(tmp_path: Path) -> None:
    other = [
        annotation("ProfilerStep#1", 0, 100),
        op("aten::mm", 0.5, 5),
        *launched(1, "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 20, 10),
    ]
    folder = job(tmp_path / "job", rank_events(0), rank_events(5), other)
    result = rank_folder(folder, cache=False)
    assert result.ranks["clock_offset_us"].to_list() == [0.0, 5.0, None]
    assert set(result.collectives["ranks"].to_list()) == {2}
    assert "Rank(s) 2 share no collective with rank 0" in result.notes[1]


def stepped(wall: float) -> list[Any]:
    return [annotation("ProfilerStep#1", 0, wall), op("aten::mm", 0.5, 5), *launched(1, GEMM, 2, 1)]


@pytest.mark.parametrize(("threshold", "stragglers"), [(10.0, [3]), (25.0, []), (0.0, [3])])
def test_stragglers_exceed_the_median_by_the_threshold(
    tmp_path: Path, threshold: float, stragglers: list[int]
) -> None:
    # Step times 100, 100, 90 and 120 us: median 100; rank 3 is 20% over it.
    traces = [stepped(100), stepped(100), stepped(90), stepped(120)]
    works = [
        rank_work(
            traceanalyze.load(write_trace(tmp_path, t, name=f"r{i}.json", rank=i), cache=False)
        )
        for i, t in enumerate(traces)
    ]
    result = ranks_analysis(works, straggler_pct=threshold)
    assert result.stragglers == stragglers
    assert result.median_wall_us_per_iter == 100.0
    assert result.ranks["wall_pct_over_median"].to_list() == pytest.approx([0, 0, -10, 20])


def test_bad_options_are_usage_errors(tmp_path: Path) -> None:
    work = rank_work(traceanalyze.load(write_trace(tmp_path, stepped(100)), cache=False))
    with pytest.raises(UsageError, match="negative"):
        ranks_analysis([work], straggler_pct=-1)
    with pytest.raises(UsageError, match="unknown clock alignment"):
        ranks_analysis([work], align="ntp")


def test_one_trace_of_several_ranks_gives_what_its_files_give(tmp_path: Path) -> None:
    # The report analyses a rank folder loaded as one Trace; the engine analyses each file.
    folder = job(tmp_path / "job", rank_events(0), rank_events(1000, late={"bc0": 3}))
    combined = ranks_analysis([rank_work(traceanalyze.load(folder, cache=False))])
    per_file = rank_folder(folder, cache=False)
    for mine, theirs in (
        (combined.ranks, per_file.ranks),
        (combined.collectives, per_file.collectives),
    ):
        assert mine.equals(theirs)
    assert isinstance(per_file.ranks, pl.DataFrame)
