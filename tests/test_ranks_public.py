"""`ranks` on rank folders built from real traces (tests/rankfolder.py), checked against values
computed here by hand from the written files, in plain Python; and the engines agree."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Iterable
from fractions import Fraction
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

import traceanalyze
from tests.conftest import PUBLIC_TRACES
from tests.rankfolder import RankSpec, ns, read_document, write_rank_folder
from traceanalyze.analyses.distributed.ranks import (
    RanksResult,
    RankWork,
    rank_rows,
    ranks_analysis,
)
from traceanalyze.analyses.report.contents import build_report
from traceanalyze.cli import main
from traceanalyze.engine import InProcess, RankTask, map_files, rank_folder
from traceanalyze.load.variants import load_variants
from traceanalyze.render.ranks import RANKS, ranks_markdown

NCCL = "hta_nccl_a100.json.gz"
SPECS = (
    RankSpec(0),
    RankSpec(1, shift_us=1_000_000),  # a host whose clock is 1 s ahead
    RankSpec(2, shift_us=-500_000, stretch=Fraction(6, 5)),  # 0.5 s behind, every step 20% slower
)
Interval = tuple[int, int]


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not (PUBLIC_TRACES / NCCL).is_file():
        pytest.skip(f"{NCCL} not found in {PUBLIC_TRACES}")
    folder = tmp_path_factory.mktemp("job")
    write_rank_folder(folder, PUBLIC_TRACES / NCCL, SPECS)
    return folder


@pytest.fixture(scope="module")
def job_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for the module: each rank is converted once, then read back."""
    return tmp_path_factory.mktemp("job_cache")


@pytest.fixture(scope="module")
def works(job: Path, job_cache: Path) -> list[RankWork]:
    """Each rank's own half of the work, in this process."""
    return map_files(RankTask(cache_dir=str(job_cache)), sorted(job.iterdir()), InProcess())


@pytest.fixture(scope="module")
def result(works: list[RankWork]) -> RanksResult:
    return ranks_analysis(works)


# --- by hand: the written events, without the library --------------------------------------


def kernels_by_step(path: Path) -> dict[int, list[dict[str, Any]]]:
    """Each step's kernels (``ProfilerStep#N`` -> N), as (name, start, end) in ns: a kernel
    belongs to the step its launch call (same correlation) starts in."""
    events = read_document(path)["traceEvents"]
    steps = [
        (int(e["name"].split("#")[1]), ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]))
        for e in events
        if e.get("name", "").startswith("ProfilerStep#")
    ]
    launch = {
        e["args"]["correlation"]: ns(e["ts"])
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    found: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e.get("cat") != "kernel":
            continue
        at = launch.get(e["args"].get("correlation"))
        for step, start, end in steps:
            if at is not None and start <= at <= end:
                begin = ns(e["ts"])
                found[step].append({"name": e["name"], "start": begin, "end": begin + ns(e["dur"])})
    return found


def union(intervals: Iterable[Interval]) -> list[Interval]:
    merged: list[list[int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def length(intervals: Iterable[Interval]) -> int:
    return sum(b - a for a, b in intervals)


def overlap(a: list[Interval], b: list[Interval]) -> int:
    return sum(max(0, min(x1, y1) - max(x0, y0)) for x0, x1 in a for y0, y1 in b)


def collectives(path: Path) -> dict[tuple[int, str, int], dict[str, int]]:
    """(step, name, occurrence) -> start and end of each communication kernel."""
    found = {}
    for step, kernels in kernels_by_step(path).items():
        seen: dict[str, int] = defaultdict(int)
        for k in sorted((k for k in kernels if "nccl" in k["name"]), key=lambda k: k["start"]):
            found[(step, k["name"], seen[k["name"]])] = k
            seen[k["name"]] += 1
    return found


# --- the checks ------------------------------------------------------------------------------


def test_exposed_communication_and_overlap_by_hand(job: Path, result: RanksResult) -> None:
    exposed, busy, hidden, steps = 0, 0, 0, 0
    for kernels in kernels_by_step(job / "rank0.json").values():
        comm = union((k["start"], k["end"]) for k in kernels if "nccl" in k["name"])
        compute = union((k["start"], k["end"]) for k in kernels if "nccl" not in k["name"])
        both = overlap(comm, compute)
        busy, hidden, steps = busy + length(comm), hidden + both, steps + 1
        exposed += length(comm) - both
    row = result.ranks.row(0, named=True)
    assert hidden > 0 and exposed > 0  # the trace has both, or this test checks little
    assert row["exposed_communication_us_per_iter"] == pytest.approx(exposed / 1e3 / steps)
    assert row["overlap_pct_of_communication"] == pytest.approx(hidden / busy * 100)


def test_shifted_clocks_change_nothing_but_the_offset(result: RanksResult) -> None:
    ranks = result.ranks
    figures = ranks.drop("rank", "clock_offset_us", "collectives_started_last")
    assert figures.row(1) == figures.row(0)
    assert ranks["clock_offset_us"].to_list()[:2] == [0.0, 1e6]  # exact, in µs


def test_the_slower_rank_is_the_straggler(works: list[RankWork], result: RanksResult) -> None:
    walls = result.ranks["wall_us_per_iter"].to_list()
    assert result.median_wall_us_per_iter == walls[0]  # median of w, w, 1.2 w
    assert walls[2] / walls[0] == pytest.approx(1.2, rel=1e-6)
    assert result.stragglers == [2]
    assert result.ranks["wall_pct_over_median"][2] == pytest.approx(20.0, abs=1e-4)
    assert ranks_analysis(works, straggler_pct=25).stragglers == []


def test_offsets_and_skew_by_hand(job: Path, result: RanksResult) -> None:
    per_rank = [collectives(job / f"rank{spec.rank}.json") for spec in SPECS]
    reference = per_rank[0]
    offsets = [
        statistics.median(mine[key]["end"] - reference[key]["end"] for key in reference)
        for mine in per_rank
    ]
    aligned = [
        {k: c["start"] - o for k, c in r.items()} for r, o in zip(per_rank, offsets, strict=True)
    ]
    spread = {key: max(a[key] for a in aligned) - min(a[key] for a in aligned) for key in reference}
    assert result.ranks["clock_offset_us"].to_list() == pytest.approx([o / 1e3 for o in offsets])
    got = {
        (row["iteration"], row["name"], row["occurrence"]): row["start_spread_us"]
        for row in result.collectives.to_dicts()
    }
    assert got == pytest.approx({key: value / 1e3 for key, value in spread.items()})
    assert len(got) == 21 and set(result.collectives["ranks"]) == {3}


def test_worker_processes_and_the_cache_give_identical_results(
    job: Path, tmp_path: Path, result: RanksResult
) -> None:
    # The public path: rank_folder in worker processes (asked for, though the folder is small).
    pooled = rank_folder(job, cache_dir=tmp_path, workers=2)
    assert sorted(p.name.split("-")[0] for p in tmp_path.iterdir()) == [
        f"rank{spec.rank}.json" for spec in SPECS
    ]  # each rank converted once, into the cache
    uncached = rank_folder(job, cache=False)
    for other in (pooled, uncached):
        assert_frame_equal(other.ranks, result.ranks)
        assert_frame_equal(other.collectives, result.collectives)


def test_dask_engine_gives_identical_results(
    job: Path, job_cache: Path, result: RanksResult
) -> None:
    distributed = pytest.importorskip("distributed")
    # A cluster of its own (worker processes: results and errors cross a process boundary)...
    own = rank_folder(job, cache_dir=job_cache, engine="dask", workers=2)
    # ... and an existing one, by its address.
    with distributed.LocalCluster(processes=False, n_workers=1, dashboard_address=None) as cluster:
        existing = rank_folder(
            job, cache_dir=job_cache, engine="dask", address=cluster.scheduler_address
        )
    for other in (own, existing):
        assert_frame_equal(other.ranks, result.ranks)
        assert_frame_equal(other.collectives, result.collectives)
        assert other.notes == result.notes


def test_report_has_a_rank_section_equal_to_the_command(
    job: Path, job_cache: Path, result: RanksResult
) -> None:
    report = build_report(load_variants([job], cache_dir=job_cache))
    ((label, in_report),) = report.ranks
    assert label == job.name
    assert_frame_equal(in_report.ranks, result.ranks)
    assert_frame_equal(in_report.collectives, result.collectives)
    args = ["report", str(job), "--cache-dir", str(job_cache)]
    text = CliRunner().invoke(main, args).stdout
    assert f"## Ranks of `{job.name}`" in text
    assert "Stragglers (step time more than 10% over the median of 222,368.45 µs): rank 2" in text


def test_cli_formats(job: Path, job_cache: Path, result: RanksResult) -> None:
    runner = CliRunner()

    def ranks(*args: str) -> str:
        return runner.invoke(main, ["ranks", str(job), "--cache-dir", str(job_cache), *args]).stdout

    record = json.loads(ranks("--format", "json"))
    assert record["stragglers"] == [2] and record["clock_alignment"] == "collective-ends"
    assert [r["rank"] for r in record["ranks"]] == [0, 1, 2]
    assert record["collectives_matched"] == 21 == len(record["collectives"])
    csv = pl.read_csv(RANKS.render(result, "csv").encode())
    assert csv["rank"].to_list() == [0, 1, 2] and csv.columns == list(record["ranks"][0])
    text = ranks_markdown(result)
    assert "| rank | iterations | wall µs/iter |" in text and "## Collective skew" in text


def test_compute_only_ranks(public: Path, tmp_path: Path) -> None:
    # A BERT trace without distributedInfo, written as two ranks: no communication at all.
    write_rank_folder(
        tmp_path, public / "tl_h100_bert_small.json.gz", [RankSpec(0), RankSpec(1, 250)]
    )
    result = rank_folder(tmp_path, cache=False)
    assert result.ranks["communication_kernel_us_per_iter"].to_list() == [0.0, 0.0]
    assert result.ranks["overlap_pct_of_communication"].to_list() == [None, None]
    assert result.stragglers == [] and result.collectives.height == 0
    assert result.notes == (
        "No communication kernels in the iterations: no overlap and no collective skew.",
    )


FORMAT_VARIANTS = (
    "hta_cpu_only_rank34.pt.trace.json.gz",
    "hta_inference_rank_1_legacy.json.gz",
    "hta_mi250_rocm.json.gz",
    "tl_mi210_gpu_only.json.gz",
    "tl_torch_compile_triton.json.gz",
)


@pytest.mark.parametrize("name", FORMAT_VARIANTS)
def test_rank_figures_hold_together_on_format_variants(public: Path, name: str) -> None:
    # CPU only, legacy categories, ROCm, GPU only, Triton: a row whose parts fit.
    row = rank_rows(traceanalyze.load(public / name)).row(0, named=True)
    assert (
        0
        <= row["exposed_communication_us_per_iter"]
        <= row["communication_kernel_us_per_iter"] + 1e-6
    )
    assert row["communication_kernel_us_per_iter"] <= row["gpu_kernel_us_per_iter"] + 1e-6
    share = row["overlap_pct_of_communication"]
    assert (share is None) == (row["communication_kernel_us_per_iter"] == 0)
    assert share is None or 0 <= share <= 100
