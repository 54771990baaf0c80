"""*What the traces say*: the findings' rules (micro traces, exact figures), their sentences,
and on real traces numbers equal to what `compare`, `memcpy`, `occupancy`, `cudnn` and `ranks`
print. The golden first section of the H200 capture is rewritten with
TRACEANALYZE_UPDATE_GOLDEN=1 (after the capture is re-recorded)."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.micro import annotation, call, kernel, memory_event, op, write_trace
from tests.rankfolder import RankSpec, write_rank_folder
from tests.test_report import CAPTURE, REPO, check_golden, invoke, module_cache  # noqa: F401
from traceanalyze.analyses.between.critical_path import critical_path, path_shares
from traceanalyze.analyses.between.idle import idle_breakdown
from traceanalyze.analyses.cudnn import cudnn_table
from traceanalyze.analyses.distributed.comms import busiest_collective, comms
from traceanalyze.analyses.distributed.ranks import rank_work, ranks_analysis
from traceanalyze.analyses.kernels import kernel_table, occupancy_table, op_table
from traceanalyze.analyses.memcpy import memory_traffic
from traceanalyze.analyses.report import findings as findings_module
from traceanalyze.analyses.report.contents import Report, build_report
from traceanalyze.analyses.report.findings import RULES, Finding
from traceanalyze.analyses.variants.compare import comparison
from traceanalyze.load.variants import load_variants
from traceanalyze.render.report.findings import (
    ITEM_CLAUSES,
    SENTENCES,
    Sentence,
    fields,
    fill,
    findings_section,
    sentence,
)
from traceanalyze.render.report.variant_findings import variant_findings
from traceanalyze.render.table import number_cell

DTOD = "Memcpy DtoD (Device -> Device)"
SOFTMAX = "softmax_warp_forward"
CHAIN = "aten::masked_fill -> aten::clone -> aten::copy_"
# A one-warp block, few registers, no shared memory: only the per-SM block limit binds.
SMALL_BLOCKS = {
    "block": [32, 1, 1],
    "grid": [132, 1, 1],
    "registers per thread": 16,
    "shared memory": 0,
}


def by_rule(report: Report) -> dict[str, Finding]:
    found = {f.rule: f for f in report.findings}
    assert len(found) == len(report.findings), "one finding per rule here"
    return found


# ---------------------------------------------------------------------------------------------
# micro traces: each rule from a handful of events


def masked_fill_step(copy: bool) -> list[dict[str, Any]]:
    """One step: a softmax kernel (10 us); out of place, masked_fill first clones its input
    (a 1 KiB DtoD copy of 6 us)."""
    events = [
        annotation("ProfilerStep#1", 100, 100),
        op("aten::softmax", 150, 10),
        call("cudaLaunchKernel", 151, 5, 2),
        kernel(SOFTMAX, 160, 10, 2, **SMALL_BLOCKS),
    ]
    if copy:
        events += [
            op("aten::masked_fill", 110, 30),
            op("aten::clone", 112, 20),
            op("aten::copy_", 114, 10),
            call("cudaMemcpyAsync", 115, 3, 1),
            kernel(DTOD, 120, 6, 1, cat="gpu_memcpy", bytes=1024),
        ]
    return events


def test_copy_removed_and_ranking_from_two_micro_traces(tmp_path: Path) -> None:
    paths = [
        write_trace(tmp_path, masked_fill_step(copy=True), "outofplace.json"),
        write_trace(tmp_path, masked_fill_step(copy=False), "inplace.json"),
    ]
    report = build_report(load_variants(paths, cache=False))
    found = by_rule(report)

    # GPU busy: 16 us (copy + softmax) against 10 us.
    assert found["copy_removed"].figures == {
        "variant": "inplace",
        "twin": "outofplace",
        "activity": DTOD,
        "chain": CHAIN,
        "copies_per_iter": 1.0,
        "copy_us": 6.0,
        "bytes_per_iter": 1024.0,
        "advice": "out-of-place `masked_fill` clones its input first; use `masked_fill_` where "
        "the input may be overwritten",
        "speedup": 1.6,
    }
    assert found["copy_removed"].weight_us == pytest.approx(6.0)
    assert found["copy_removed"].command == f"traceanalyze memcpy {paths[0]}"
    ranking = found["ranking"].figures
    assert (ranking["fastest"], ranking["fastest_speedup"]) == ("inplace", 1.6)
    assert (ranking["baseline"], ranking["baseline_busy_us"]) == ("outofplace", 16.0)
    # The copy is told once, by the pair: no separate copies finding.
    assert "copies" not in found
    assert sentence(found["copy_removed"]).startswith(
        f"`inplace` removes the {DTOD} of `outofplace` (1 per iteration: 6.00 µs, 1 KiB, "
        f"from {CHAIN}) and is 1.60x faster on the GPU"
    )


def test_a_single_trace_gets_the_copy_its_category_and_no_ranking(tmp_path: Path) -> None:
    path = write_trace(tmp_path, masked_fill_step(copy=True), "one.json")
    report = build_report(load_variants([path], cache=False))
    found = by_rule(report)

    assert report.title == "An inference trace: profiling report"
    assert not {"ranking", "copy_removed", "slowest"} & set(found)
    assert found["copies"].figures["variant"] is None  # one trace: no variant to name
    assert found["copies"].figures["chain"] == f"{CHAIN} -> {DTOD}"
    top = found["top_categories"].figures
    assert top["items"] == (
        {"category": "softmax", "us": 10.0, "pct": 62.5},
        {"category": "memcpy", "us": 6.0, "pct": 37.5},
    )
    assert (found["top_op"].figures["top_op"], found["top_op"].figures["top_op_us"]) == (
        "aten::softmax",
        10.0,
    )


def test_small_blocks_are_low_occupancy_by_accident(tmp_path: Path) -> None:
    # 32-thread blocks, 16 registers, no shared memory: the per-SM block limit (32 on sm90)
    # holds 32 of 64 warps.
    events = masked_fill_step(copy=False)
    path = write_trace(tmp_path, events, "small_blocks.json")
    found = by_rule(build_report(load_variants([path], cache=False)))

    item = found["occupancy_accident"].figures["items"][0]
    assert (item["occupancy_pct"], item["limiter"], item["threads"]) == (50.0, "blocks", 32)
    assert found["occupancy_accident"].weight_us == 10.0  # the kernel's time
    assert "occupancy_design" not in found


def test_a_trace_without_gpu_activity_says_no_finding(tmp_path: Path) -> None:
    events = [annotation("ProfilerStep#1", 100, 100), op("aten::add", 110, 20)]
    report = build_report(load_variants([write_trace(tmp_path, events)], cache=False))

    assert report.findings == ()
    assert findings_section(report.findings) == (
        "## What the traces say\n\n"
        "No finding: none of the rules has the evidence it needs in these traces.\n"
    )


def late_launch_step(nbytes: int) -> list[dict[str, Any]]:
    """One step of 200 us: a GEMM (10 us), then a ReLU launched 70 us after it ended (the GPU
    waits 80 us for the CPU); aten::mm allocates ``nbytes`` over 1000 live bytes, freed late."""
    return [
        annotation("ProfilerStep#1", 100, 200),
        op("aten::mm", 110, 10),
        memory_event(112, 0x10, nbytes, 1000 + nbytes, 8192),
        call("cudaLaunchKernel", 113, 5, 1),
        kernel("gemm_k", 120, 10, 1),
        op("aten::relu", 200, 10),
        call("cudaLaunchKernel", 201, 5, 2),
        kernel("relu_k", 210, 10, 2),
        memory_event(250, 0x10, -nbytes, 1000, 8192),
    ]


def test_idle_critical_path_and_memory_peak_of_a_late_launch(tmp_path: Path) -> None:
    path = write_trace(tmp_path, late_launch_step(4096), "late.json")
    found = by_rule(build_report(load_variants([path], cache=False)))

    # The step's window is its 200 us on the CPU, busy 20 us: 20 us before the GEMM (its
    # launch at 113, 7 us before it runs), 80 before the ReLU (launched at 201) and 80 after it,
    # all the host's.
    assert found["idle"].figures == {
        "idle_us": 180.0,
        "idle_pct": 90.0,
        "span_us": 200.0,
        "cause": "host",
        "cause_us": 180.0,
        "cause_pct": 100.0,
        "gaps": 3.0,
        "meaning": "most of the gap the launching thread was busy with other CPU work "
        "(operators, Python, a compile) before it launched the work",
    }
    assert found["idle"].weight_us == 180.0
    assert found["idle"].command == f"traceanalyze idle {path}"
    # The whole step is CPU time; the step's own Python time (an annotation) names no item,
    # so the two 5 us launches are the item with the most slack.
    assert found["critical_path"].figures == {
        "length_us": 200.0,
        "gpu_pct": 0.0,
        "cpu_pct": 100.0,
        "bound": "cannot tell",  # one step only
        "item": "cudaLaunchKernel",
        "item_kind": "launch",
        "slack_us": 10.0,
    }
    assert found["memory_peak"].figures == {
        "peak_bytes": 4096.0,
        "block_bytes": 4096,
        "block_op": "aten::mm",
    }
    assert "collectives" not in found and "memory_wall" not in found
    assert sentence(found["idle"]).startswith(
        "The GPU is idle 180.00 µs per iteration, 90.00% of the step's wall time of 200.00 µs; "
        "most of it host (180.00 µs, 100.00% of the idle time, 3 gaps per iteration)"
    )
    assert sentence(found["critical_path"]) == (
        "Critical path 200.00 µs per iteration, 0% GPU work and 100% CPU time (cannot tell); "
        "removing `cudaLaunchKernel` (launch) would shorten an iteration by at most 10.00 µs."
    )
    assert sentence(found["memory_peak"]) == (
        "Memory: the GPU's allocated peak rises 4 KiB per iteration above the iteration's "
        "start; largest block 4 KiB, from `aten::mm`."
    )


def test_idle_under_the_threshold_is_not_said(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(findings_module, "MIN_IDLE_PCT", 91.0)  # the micro trace's is 90%
    path = write_trace(tmp_path, late_launch_step(4096), "late.json")
    assert "idle" not in by_rule(build_report(load_variants([path], cache=False)))


def test_memory_wall_names_the_most_against_the_least(tmp_path: Path) -> None:
    paths = [
        write_trace(tmp_path, late_launch_step(4096), "big.json"),
        write_trace(tmp_path, late_launch_step(1024), "small.json"),
        write_trace(tmp_path, late_launch_step(3000), "close.json"),
    ]
    found = by_rule(build_report(load_variants(paths, cache=False)))

    assert found["memory_wall"].figures == {
        "variant": "big",
        "peak_bytes": 4096.0,
        "block_bytes": 4096,
        "block_op": "aten::mm",
        "least": "small",
        "least_bytes": 1024.0,
        "ratio": 4.0,
    }
    assert "memory_peak" not in found  # several traces: the wall, not each peak
    # Each variant's path is all CPU time, but each is one step: no verdict, so no variant is
    # named as bound on the host side.
    assert "critical_cpu" not in found
    assert sentence(found["memory_wall"]) == (
        "Memory: `big` raises the GPU's allocated peak by 4 KiB per iteration (largest block "
        "4 KiB, from `aten::mm`), against 1 KiB in `small` (4.00x)."
    )
    # Under MIN_MEMORY_RATIO apart, no wall.
    close = build_report(load_variants(paths[::2], cache=False))
    assert "memory_wall" not in by_rule(close)


def test_no_memory_or_collective_finding_without_their_events(tmp_path: Path) -> None:
    path = write_trace(tmp_path, masked_fill_step(copy=True), "one.json")
    found = by_rule(build_report(load_variants([path], cache=False)))
    assert not {"memory_peak", "memory_wall", "collectives"} & set(found)


# ---------------------------------------------------------------------------------------------
# sentences


def test_every_rule_has_a_sentence_and_every_clause_is_used() -> None:
    assert {rule.id for rule in RULES} == set(SENTENCES)
    for template in SENTENCES.values():
        for name in template.clauses:
            assert "{" + name + "}" in template.text


def test_a_clause_with_an_unknown_figure_is_left_out_or_says_its_fallback() -> None:
    clauses = {"wall": "; wall {wall_us:t} µs", "who": ("rank {rank}", "no rank")}
    text = "{busy_us:t} µs{wall}, {who}"
    assert fill(text, clauses, {"busy_us": 1076.0, "wall_us": None, "rank": None}) == (
        "1,076.00 µs, no rank"
    )
    assert fill(text, clauses, {"busy_us": 0.4061, "wall_us": 3.0, "rank": 1}) == (
        "0.41 µs; wall 3.00 µs, rank 1"
    )
    assert fields("{a:t} and {b}") == {"a", "b"}
    gemm = {"gemm_where", "gemm_shape", "gemm_dims", "gemm_narrow", "gemm_arch", "gemm_fp32",
            "gemm_fix", "gemm_strides"}  # fmt: skip
    assert set(ITEM_CLAUSES) == {"reported", "footprint", *gemm}


def test_items_are_joined_and_an_empty_tuple_is_unknown(monkeypatch: Any) -> None:
    template = Sentence("{items}{cpu}.", {"cpu": " CPU-bound: {names:names}"}, item="{x:n}")
    monkeypatch.setitem(SENTENCES, "test", template)
    items = ({"x": 1.0}, {"x": 2.5})
    assert sentence(Finding("test", 0.0, {"items": items, "names": ()})) == "1, 2.5."
    assert sentence(Finding("test", 0.0, {"items": items, "names": ("a", "b", "c")})) == (
        "1, 2.5 CPU-bound: `a`, `b` and `c`."
    )


# ---------------------------------------------------------------------------------------------
# the H200 capture: the article's conclusions, numbers equal to the other commands'


@pytest.fixture(scope="module")
def h200(module_cache: Path) -> Report:  # noqa: F811
    return build_report(load_variants([CAPTURE], cache_dir=module_cache))


def traces(report: Report) -> dict[str, Path]:
    return {v.label: Path(v.path or "") for v in report.variants}


def test_h200_first_section_states_the_articles_conclusions(h200: Report) -> None:
    found = by_rule(h200)
    table = comparison(load_variants([CAPTURE]).variants)
    rows = {row["variant"]: row for row in table.to_dicts()}
    paths = traces(h200)

    # Variant ranking on GPU and wall time, with the CPU-bound ones named.
    ranking = found["ranking"].figures
    fastest = table.sort("gpu_busy_us_per_iter").row(0, named=True)
    assert ranking["fastest"] == fastest["variant"]
    assert ranking["fastest_speedup"] == fastest["speedup"]
    assert ranking["fastest_wall_speedup"] == table["speedup_wall"].max()
    cpu_bound = table.filter(pl.col("bound") == "CPU-bound")["variant"].to_list()
    assert list(ranking["cpu_bound"]) == cpu_bound and cpu_bound

    # naive_inplace's speed-up over naive and the Memcpy DtoD it removes.
    removed = found["copy_removed"].figures
    copy = memory_traffic_row(paths["naive"])
    assert (removed["variant"], removed["twin"]) == ("naive_inplace", "naive")
    assert removed["speedup"] == pytest.approx(rows["naive_inplace"]["speedup"])
    assert removed["activity"].startswith("Memcpy DtoD")
    assert (removed["copy_us"], removed["advice"]) == (copy["us_per_iter"], copy["advice"])

    # sdpa_math: kernel count, fp32 GEMMs, slowdown.
    slow = found["slowest"].figures
    fp32 = kernel_table_of(paths["sdpa_math"]).filter(pl.col("gemm_precision") == "fp32-cuda-cores")
    assert slow["variant"] == "sdpa_math"
    assert slow["kernels"] == rows["sdpa_math"]["kernels_per_iter"]
    assert slow["speedup"] == rows["sdpa_math"]["speedup"] < 1
    assert slow["fp32_gemms"] == fp32["count_per_iter"].sum() > 0

    # flash: theoretical occupancy and its limiter, low by design.
    items = {i["who"]: i for i in found["occupancy_design"].figures["items"]}
    flash = occupancy_of(paths["sdpa_flash"]).row(0, named=True)
    assert items["sdpa_flash"]["occupancy_pct"] == flash["theoretical_occupancy_pct"]
    assert items["sdpa_flash"]["limiter"] == flash["occupancy_limiter"].replace("_", " ")

    # cuDNN's CPU time per iteration against its GPU lead.
    cudnn = found["cudnn_cpu"].figures
    lead = cudnn["variant"]
    assert cudnn["cpu_us"] == rows[lead]["cudnn_cpu_us_per_iter"] > 0
    assert cudnn["cpu_us"] == pytest.approx(cudnn_of(paths[lead])["self_us_per_iter"].sum())
    assert cudnn["lead_us"] > 0 and cudnn["library"] == "cuDNN"

    # The memory wall: compare's peak increase per iteration, the most against the least.
    wall = found["memory_wall"].figures
    peaks = table.filter(pl.col("peak_increase_bytes_per_iter").is_not_null())
    most = peaks.sort("peak_increase_bytes_per_iter", descending=True).row(0, named=True)
    assert wall["variant"] == most["variant"] == "sdpa_math"
    assert wall["peak_bytes"] == most["peak_increase_bytes_per_iter"]
    assert wall["block_bytes"] == most["largest_block_bytes"]
    assert wall["block_op"] == most["largest_block_op"]
    assert wall["least_bytes"] == peaks["peak_increase_bytes_per_iter"].min()

    # The CPU-bound variants' critical path, as `critical-path` prints it for each: exactly the
    # variants compare calls CPU-bound (one verdict; sdpa_flash's first profiled step runs
    # along the CPU, but its steps are GPU-bound).
    on_cpu = {i["who"]: i for i in found["critical_cpu"].figures["items"]}
    assert set(on_cpu) == set(cpu_bound)
    cudnn_path = critical_path(load_trace(paths["sdpa_cudnn"]))
    said = on_cpu["sdpa_cudnn"]
    assert said["length_us"] == cudnn_path.length_us_per_iter
    assert said["cpu_pct"] == path_shares(cudnn_path)[1] >= 50
    item = cudnn_path.items.filter(pl.col("name") == said["item"]).row(0, named=True)
    assert (item["kind"], item["slack_us_per_iter"]) == ("cpu_op", said["slack_us"])


def test_h200_host_bound_paths_agree_with_the_verdict(h200: Report) -> None:
    # Only the variants the comparison calls CPU- or sync-bound are named as bound on the host
    # side, each with its verdict (issue 38, item 5: one verdict in every command).
    found = by_rule(h200)
    rows = {
        r["variant"]: r for r in comparison(load_variants([CAPTURE]).variants).iter_rows(named=True)
    }
    for item in found["critical_cpu"].figures["items"]:
        assert item["bound"] == rows[item["who"]]["bound"]
        assert item["bound"] in ("CPU-bound", "sync-bound")
    assert "sdpa_flash" not in {i["who"] for i in found["critical_cpu"].figures["items"]}


def test_h200_sentences_write_the_numbers_as_the_tables_do(h200: Report) -> None:
    text = findings_section(h200.findings)
    found = by_rule(h200)
    slow, removed = found["slowest"].figures, found["copy_removed"].figures
    cudnn, ranking = found["cudnn_cpu"].figures, found["ranking"].figures
    flash = next(i for i in found["occupancy_design"].figures["items"] if i["who"] == "sdpa_flash")
    for expected in (
        f"`sdpa_math`, {number_cell(slow['speedup'])}x `naive`",
        f"with {slow['kernels']:g} kernels per iteration",
        f"{slow['fp32_gemms']:g} of them are GEMMs in fp32 on CUDA cores",
        f"and is {number_cell(removed['speedup'])}x faster on the GPU",
        f"`sdpa_flash` {number_cell(flash['occupancy_pct'])}% (registers",
        f"spend {number_cell(cudnn['cpu_us'])} µs of CPU self time per iteration",
        f"{number_cell(ranking['fastest_speedup'])}x `naive`",
        names_text(ranking["cpu_bound"]),
    ):
        assert expected in text
    lines = text.strip().splitlines()
    assert len(lines) < 15
    assert all(line.endswith("`)") for line in lines[2:])  # each names its command


def test_h200_first_section_matches_golden(module_cache: Path, monkeypatch: Any) -> None:  # noqa: F811
    # Relative paths, as a user types them, so that the commands in the sentences are stable.
    monkeypatch.chdir(REPO)
    report = build_report(
        load_variants([Path("sample_traces/h200_default")], cache_dir=module_cache)
    )
    check_golden("report_findings_h200_default.md", findings_section(report.findings))


def names_text(names: tuple[str, ...]) -> str:
    """``("a", "b", "c")`` as a sentence lists them: `a`, `b` and `c`."""
    quoted = [f"`{name}`" for name in names]
    return ", ".join(quoted[:-1]) + " and " + quoted[-1] if len(quoted) > 1 else quoted[0]


def load_trace(path: Path) -> Any:
    from traceanalyze import load

    return load(path)


def memory_traffic_row(path: Path) -> dict[str, Any]:
    from traceanalyze import load

    table = memory_traffic(load(path)).filter(pl.col("actionable") & (pl.col("kind") == "memcpy"))
    return table.row(0, named=True)


def kernel_table_of(path: Path) -> pl.DataFrame:
    from traceanalyze import load

    return kernel_table(load(path))


def occupancy_of(path: Path) -> pl.DataFrame:
    from traceanalyze import load

    return occupancy_table(load(path))


def cudnn_of(path: Path) -> pl.DataFrame:
    from traceanalyze import load

    return cudnn_table(load(path))


# ---------------------------------------------------------------------------------------------
# `report --expect`: guesses, broken first


def test_report_expect_adds_guesses_broken_first(tmp_path: Path, module_cache: Path) -> None:  # noqa: F811
    guesses = tmp_path / "guesses.txt"
    guesses.write_text("memcpy_per_iter == 0  # in place\nkernels_per_iter <= 5\n")
    out = tmp_path / "report.md"
    files = [str(CAPTURE / f"{v}.json.gz") for v in ("naive", "naive_inplace")]
    result = invoke(["report", *files, "--expect", str(guesses), "-o", str(out)], module_cache)

    assert result.exit_code == 0, result.output  # a broken guess is a finding, not a failure
    text = out.read_text(encoding="utf-8")
    section = text.split("## Guesses\n")[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| naive")]
    assert rows[0] == "| naive | memcpy_per_iter == 0 | 1 | BROKEN |"
    assert [row.rsplit("|", 2)[1].strip() for row in rows[1:]] == ["held"] * 3
    assert "1 of 4 expectations broken" in section
    assert f"--expect {guesses}" in text  # the command line names the file


# ---------------------------------------------------------------------------------------------
# public traces of other kinds: the same first section, written for what they hold


def single_report(path: Path, cache: Path) -> Report:
    return build_report(load_variants([path], cache_dir=cache))


@pytest.mark.parametrize(
    ("name", "title"),
    [
        ("tl_h100_bert_small.json.gz", "An inference trace: profiling report"),
        ("hta_nccl_a100.json.gz", "A training step: profiling report"),
    ],
)
def test_public_single_trace(public: Path, module_cache: Path, name: str, title: str) -> None:  # noqa: F811
    report = single_report(public / name, module_cache)
    found = by_rule(report)
    figures = report.variants[0].summary

    assert report.title == title
    assert not {"ranking", "copy_removed", "slowest", "ranks"} & set(found)
    bound = found["bound"].figures
    assert (bound["bound"], bound["busy_us"]) == (figures["bound"], figures["gpu_busy_us_per_iter"])
    categories = report.variants[0].categories
    assert found["top_categories"].figures["items"][0]["category"] == categories["category"][0]
    assert len(findings_section(report.findings).strip().splitlines()) < 15
    trace = report_trace(public / name, module_cache)

    # Idle, as `idle` prints it; the span, as `summary` does.
    idle = found["idle"].figures
    breakdown = idle_breakdown(trace)
    top = breakdown.causes.sort("us_per_iter", descending=True).row(0, named=True)
    assert idle["idle_us"] == breakdown.gpu_idle_us_per_iter
    assert idle["span_us"] == figures["wall_us_per_iter"]
    assert (idle["cause"], idle["cause_us"]) == (top["cause"], top["us_per_iter"])
    assert idle["idle_pct"] >= findings_module.MIN_IDLE_PCT

    # The critical path, as `critical-path` prints it.
    path = critical_path(trace)
    cpath = found["critical_path"].figures
    assert cpath["length_us"] == path.length_us_per_iter
    assert (cpath["gpu_pct"], cpath["cpu_pct"]) == path_shares(path)
    slack = path.items.filter(pl.col("name") == cpath["item"])["slack_us_per_iter"]
    assert cpath["slack_us"] == slack.max() > 0
    assert cpath["item_kind"] not in findings_module.NO_SLACK_KINDS


def test_public_collectives_as_comms_prints_them(public: Path, module_cache: Path) -> None:  # noqa: F811
    path = public / "hta_nccl_a100.json.gz"
    report = single_report(path, module_cache)
    found = by_rule(report)
    result = comms(report_trace(path, module_cache))
    total_us, top = busiest_collective(result)

    said = found["collectives"].figures
    assert (said["total_us"], said["collective"]) == (total_us, top["collective"])
    assert said["count"] == result.by_kind["count_per_iter"].sum() > 0
    assert (said["busbw"], said["peak"]) == (top["busbw"], top["peak"])
    assert f"{number_cell(said['busbw'])} GB/s" in sentence(found["collectives"])
    assert "collectives" not in by_rule(
        single_report(public / "tl_h100_bert_small.json.gz", module_cache)
    )


def test_rank_folder(public: Path, tmp_path: Path, module_cache: Path) -> None:  # noqa: F811
    folder = tmp_path / "job"
    # Rank 2 takes 30% longer than the other two (the median).
    specs = [RankSpec(0), RankSpec(1, shift_us=50), RankSpec(2, stretch=Fraction(13, 10))]
    write_rank_folder(folder, public / "hta_nccl_a100.json.gz", specs, ".json.gz")
    report = single_report(folder, module_cache)
    found = by_rule(report)
    result = ranks_analysis([rank_work(report_trace(folder, module_cache))])

    assert report.title == "A training step on a folder of 3 ranks: profiling report"
    ranks = found["ranks"].figures
    slow = result.ranks.sort("wall_us_per_iter", descending=True).row(0, named=True)
    assert (ranks["ranks"], ranks["slowest_rank"]) == (3, 2) == (3, slow["rank"])
    assert ranks["over_median_pct"] == slow["wall_pct_over_median"]
    assert ranks["stragglers"] == ("2",)  # over the 10% threshold
    assert found["ranks"].command == f"traceanalyze ranks {folder}"
    assert "stragglers (over 10.00%): rank `2`" in sentence(found["ranks"])


def report_trace(folder: Path, cache: Path) -> Any:
    variants = load_variants([folder], cache_dir=cache).loaded
    return variants[0].trace


def test_findings_json_safe(h200: Report) -> None:
    # Figures are plain values (numbers, text, tuples): a later `--format json` can carry them.
    for finding in h200.findings:
        json.dumps(dict(finding.figures))


# ---------------------------------------------------------------------------------------------
# a skeptic's pass: nothing said that the trace cannot support


def test_the_same_kernel_count_with_other_kernels_is_no_in_place_twin(tmp_path: Path) -> None:
    # Both run one kernel; only the first copies, but the other's kernel is another one: not the
    # in-place form of the first, so no "removes" sentence; the copy is told on its own.
    other = masked_fill_step(copy=False)
    other[-1] = kernel("gemm_other_kernel", 160, 10, 2, **SMALL_BLOCKS)
    paths = [
        write_trace(tmp_path, masked_fill_step(copy=True), "outofplace.json"),
        write_trace(tmp_path, other, "unrelated.json"),
    ]
    found = by_rule(build_report(load_variants(paths, cache=False)))

    assert "copy_removed" not in found
    assert found["copies"].figures["variant"] == "outofplace"


def gemm_step(name: str, *, math_op: bool) -> list[dict[str, Any]]:
    """One step of one SDPA call: a GEMM of 10 us, launched inside the SDPA math op or not
    (the outermost op is the same: one workload)."""
    events = [
        annotation("ProfilerStep#1", 100, 100),
        op("aten::scaled_dot_product_attention", 130, 60),
        op("aten::bmm", 150, 10),
        call("cudaLaunchKernel", 151, 5, 2),
        kernel(name, 160, 10, 2, **SMALL_BLOCKS),
    ]
    if math_op:
        events.append(op("aten::_scaled_dot_product_attention_math", 140, 40))
    return events


def test_the_math_backend_is_said_to_upcast_only_beside_fp32_gemms(tmp_path: Path) -> None:
    # The slowest runs the math op but its GEMM is bf16 on tensor cores: no upcast is told.
    bf16 = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"
    slow = [
        *gemm_step(bf16, math_op=True),
        op("aten::mul", 175, 2),
        call("cudaLaunchKernel", 176, 1, 3),
        kernel("elementwise_kernel", 171, 20, 3, **SMALL_BLOCKS),
    ]
    paths = [
        write_trace(tmp_path, slow, "math.json"),
        write_trace(tmp_path, gemm_step(bf16, math_op=False), "fast.json"),
    ]
    found = by_rule(build_report(load_variants(paths, cache=False)))

    assert found["slowest"].figures["variant"] == "math"
    assert "upcast_op" not in found["slowest"].figures
    assert "float32" not in sentence(found["slowest"])


def test_a_trace_without_cpu_operators_is_neither_training_nor_inference(tmp_path: Path) -> None:
    # GPU activity and its launch calls only (a GPU-only trace): the absence of backward ops
    # says nothing, and no CPU operator time is written as zero (GPU-bound: 18 of 20 us busy).
    events = [
        annotation("ProfilerStep#1", 100, 20),
        call("cudaLaunchKernel", 100.5, 0.5, 2),
        kernel(SOFTMAX, 101, 18, 2, **SMALL_BLOCKS),
    ]
    report = build_report(load_variants([write_trace(tmp_path, events)], cache=False))
    found = by_rule(report)

    assert report.workload is None
    assert report.title == "A single trace: profiling report"
    assert "forward only" not in sentence(found["top_categories"])
    # One step, GPU-bound by 10 points or more: given on that step alone.
    assert found["bound"].figures["bound"] == "GPU-bound"
    assert "CPU operators" not in sentence(found["bound"])


def test_a_whole_trace_gets_no_advice_to_cut_cpu_time(tmp_path: Path) -> None:
    # No step: the whole trace is one iteration whose wall time includes what lies outside the
    # work (here 1 ms after the kernel), so CPU-bound comes without the advice.
    events = [
        op("aten::softmax", 100, 10),
        call("cudaLaunchKernel", 101, 5, 2),
        kernel(SOFTMAX, 110, 10, 2, **SMALL_BLOCKS),
        op("aten::add", 1100, 10),
    ]
    found = by_rule(build_report(load_variants([write_trace(tmp_path, events)], cache=False)))

    assert found["bound"].figures["bound"] == "cannot tell"  # one step only
    assert found["bound"].figures["whole_trace"] is True
    assert "less CPU time" not in sentence(found["bound"])


def _big_footprint_step(name: str, op_name: str) -> list[dict[str, Any]]:
    """One step: ``name`` launched by ``op_name``, 128 threads, 64 registers, 100 KiB of
    shared memory per block: 2 blocks (8 warps) of 64 on an H200."""
    return [
        annotation("ProfilerStep#1", 100, 100),
        op(op_name, 150, 10),
        call("cudaLaunchKernel", 151, 5, 2),
        kernel(name, 160, 10, 2, block=[128, 1, 1], grid=[264, 1, 1],
               **{"registers per thread": 64, "shared memory": 100 * 1024}),
    ]  # fmt: skip


def test_a_shared_memory_limited_kernel_names_its_shared_memory(tmp_path: Path) -> None:
    events = _big_footprint_step(
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>(Flash_fwd_params)",
        "aten::_scaled_dot_product_flash_attention",
    )
    found = by_rule(build_report(load_variants([write_trace(tmp_path, events)], cache=False)))

    item = found["occupancy_design"].figures["items"][0]
    assert (item["occupancy_pct"], item["limiter"]) == (12.5, "shared memory")
    assert (
        "(shared memory: 100 KiB shared memory/block, 128 threads/block; fused attention, "
        "which keeps its Q, K and V tiles on chip)"
    ) in sentence(found["occupancy_design"])


@pytest.mark.parametrize(
    ("name", "op_name"),
    [
        # Issue 38: SDPA math's FFMA sgemm and GPT-2's sm75 align1 LM-head GEMM were called
        # "low by design ... as flash attention does".
        ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_"
         "aligna4_alignc4_execute_kernel__5x_cublas", "aten::bmm"),
        ("void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1>("
         "cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1::Params)", "aten::mm"),
        # A large footprint in a kernel not known to trade occupancy for reuse: no verdict.
        (SOFTMAX, "aten::softmax"),
    ],
)  # fmt: skip
def test_low_occupancy_is_by_design_only_for_known_kernels(
    tmp_path: Path, name: str, op_name: str
) -> None:
    events = _big_footprint_step(name, op_name)
    found = by_rule(build_report(load_variants([write_trace(tmp_path, events)], cache=False)))
    assert "occupancy_design" not in found
    assert "occupancy_accident" not in found


def copy_step(chain: list[str], activity: str) -> list[dict[str, Any]]:
    """One step: a kernel, and a 4-byte copy made under ``chain`` (outermost first)."""
    events = masked_fill_step(copy=False)
    for depth, name in enumerate(chain):
        events.append(op(name, 110 + depth, 30 - 2 * depth))
    events += [
        call("cudaMemcpyAsync", 115, 3, 1),
        kernel(activity, 120, 6, 1, cat="gpu_memcpy", bytes=4),
    ]
    return events


@pytest.mark.parametrize(
    ("chain", "activity", "advice"),
    [
        # ROCm records `.item()`'s copy as DtoD: the op names the cause, not the direction.
        (["aten::item", "aten::_local_scalar_dense"], DTOD, "a scalar read back by `.item()`"),
        (
            ["aten::item", "aten::_local_scalar_dense"],
            "Memcpy DtoH (Device -> Pinned)",
            "a scalar read back by `.item()`",
        ),
        (
            ["torch.distributed.ddp.reducer::copy_bucket_to_grad", "aten::copy_"],
            DTOD,
            "DDP copies each all-reduced gradient bucket",
        ),
        (["aten::copy_"], DTOD, None),  # no cause known: no fix to tell
        # A library op's own `.item()` (new_htadiff_control_a100_rank3): not the user's to fix.
        (
            ["fbgemm::permute_sparse_features", "aten::item", "aten::_local_scalar_dense"],
            "Memcpy DtoH (Device -> Pageable)",
            None,
        ),
    ],
)
def test_a_copy_is_a_finding_only_with_its_cause(
    tmp_path: Path, chain: list[str], activity: str, advice: str | None
) -> None:
    path = write_trace(tmp_path, copy_step(chain, activity))
    found = {f.rule: f for f in build_report(load_variants([path], cache=False)).findings}

    if advice is None:
        assert "copies" not in found
    else:
        assert found["copies"].figures["advice"].startswith(advice)
        assert found["copies"].figures["bytes_per_iter"] == 4.0


def test_the_top_op_counts_each_launch_for_its_own_op(tmp_path: Path) -> None:
    # One GEMM kernel name launched by two ops: aten::mm twice (2 x 10 us), aten::addmm once
    # (10 us); aten::mul launches 25 us. The kernel's most frequent op (mm) does not get the
    # kernel's 30 us: mul launches the most.
    gemm = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n"
    events = [annotation("ProfilerStep#1", 100, 200)]
    for i, (name, dur) in enumerate([("aten::mm", 10), ("aten::mm", 10), ("aten::addmm", 10)]):
        events += [
            op(name, 110 + 20 * i, 5),
            call("cudaLaunchKernel", 111 + 20 * i, 2, i + 1),
            kernel(gemm, 200 + 20 * i, dur, i + 1, **SMALL_BLOCKS),
        ]
    events += [
        op("aten::mul", 180, 5),
        call("cudaLaunchKernel", 181, 2, 9),
        kernel("elementwise_kernel", 260, 25, 9, **SMALL_BLOCKS),
    ]
    path = write_trace(tmp_path, events)
    found = by_rule(build_report(load_variants([path], cache=False)))

    assert dict(found["top_op"].figures) == {
        "top_op": "aten::mul",
        "top_op_us": 25.0,
        "top_op_pct": 25 / 55 * 100,
    }
    assert found["top_op"].command == f"traceanalyze kernels {path} --by op"
    from traceanalyze import load

    ops = op_table(load(path, cache=False))
    assert ops.select("launch_op", "us_per_iter").rows() == [
        ("aten::mul", 25.0),
        ("aten::mm", 20.0),
        ("aten::addmm", 10.0),
    ]


def test_the_slowest_baseline_gets_no_speedup_over_itself(tmp_path: Path) -> None:
    # The baseline runs two kernels (20 us), the other one (10 us): the slowest is the baseline.
    slow = [
        *masked_fill_step(copy=False),
        op("aten::mul", 175, 2),
        call("cudaLaunchKernel", 176, 1, 3),
        kernel("elementwise_kernel", 171, 10, 3, **SMALL_BLOCKS),
    ]
    paths = [
        write_trace(tmp_path, slow, "base.json"),
        write_trace(tmp_path, masked_fill_step(copy=False), "fast.json"),
    ]
    found = by_rule(build_report(load_variants(paths, cache=False)))

    assert found["slowest"].figures["variant"] == "base"
    assert sentence(found["slowest"]).startswith("Slowest: `base` (20.00 µs per iteration), with 2")


def test_a_copy_without_bytes_states_no_size(tmp_path: Path) -> None:
    # A copy whose event carries no bytes: no "0 B" (the HtoD cause is known, so it is told).
    events = [
        *masked_fill_step(copy=False),
        op("aten::to", 110, 30),
        call("cudaMemcpyAsync", 115, 3, 1),
        kernel("Memcpy HtoD (Pageable -> Device)", 120, 6, 1, cat="gpu_memcpy"),
    ]
    found = by_rule(build_report(load_variants([write_trace(tmp_path, events)], cache=False)))

    assert found["copies"].figures["bytes_per_iter"] is None
    assert "(6.00 µs):" in sentence(found["copies"])


def test_torch_compiles_own_copies_are_no_finding(tmp_path: Path) -> None:
    path = write_trace(
        tmp_path, copy_step(["dynamo", "aten::to"], "Memcpy HtoD (Pageable -> Device)")
    )
    found = {f.rule: f for f in build_report(load_variants([path], cache=False)).findings}
    assert "copies" not in found


def test_a_one_off_first_cudnn_call_is_told_beside_its_mean(tmp_path: Path) -> None:
    # Three steps; cuDNN's op takes 3,000 us of self time in the first, 20 in the others.
    events = []
    for i, self_us in enumerate([3000, 20, 20]):
        start = 100 + 5000 * i
        events += [
            annotation(f"ProfilerStep#{i + 1}", start, 4000),
            op("aten::_cudnn_attention_forward", start + 10, self_us + 3),  # 3 us: the launch
            call("cuLaunchKernelEx", start + 10 + self_us, 3, i + 1, cat="cuda_driver"),
            kernel("cudnn_generated_fort_native_sdpa", start + 20 + self_us, 10, i + 1),
        ]
    found = by_rule(build_report(load_variants([write_trace(tmp_path, events)], cache=False)))

    figures = found["cudnn_cpu"].figures
    assert (figures["first_us"], figures["steady_us"]) == (3000.0, 20.0)
    assert "one-off first call of 3,000.00 µs against a steady median of 20.00 µs" in sentence(
        found["cudnn_cpu"]
    )


def test_a_collective_gets_no_occupancy_finding(tmp_path: Path) -> None:
    # A 20 us NCCL kernel with flash's footprint (255 registers, 128 threads: 12.5%) beside the
    # 10 us softmax: the collective waits on the link and the other ranks, not on warps, so
    # the occupancy findings speak of the softmax alone.
    events = masked_fill_step(copy=False)
    events += [
        op("record_param_comms", 170, 10),
        call("cudaLaunchKernel", 171, 5, 3),
        kernel(
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
            175,
            20,
            3,
            block=[128, 1, 1],
            grid=[2, 1, 1],
            **{"registers per thread": 255, "shared memory": 0},
        ),
    ]
    report = build_report(load_variants([write_trace(tmp_path, events)], cache=False))
    found = by_rule(report)

    assert "occupancy_design" not in found
    assert found["occupancy_accident"].figures["items"][0]["who"] == SOFTMAX
    said = [s for s in variant_findings(report.variants[0]) if "theoretical occupancy" in s]
    assert said == [
        f"The longest kernel outside the collectives per iteration, `{SOFTMAX}` (from "
        "`aten::softmax`), has 50.00% theoretical occupancy, limited by blocks (16 "
        "registers/thread, 32 threads/block, 0 B shared memory); the trace carries no CUPTI "
        "estimate (0 or absent, as for driver-API launches)."
    ]


def test_a_finding_under_one_percent_of_the_step_is_noise(tmp_path: Path) -> None:
    # The same `.item()` copy (6 us) in a step of 100 us (6%) and of 1,000 us (0.6%).
    chain = ["aten::item", "aten::_local_scalar_dense"]
    short = copy_step(chain, "Memcpy DtoH (Device -> Pinned)")
    long = [annotation("ProfilerStep#1", 100, 1000), *short[1:]]
    for events, told in ((short, True), (long, False)):
        path = write_trace(tmp_path, events)
        found = by_rule(build_report(load_variants([path], cache=False)))
        assert ("copies" in found) is told


def test_sentences_quote_short_kernel_names(tmp_path: Path) -> None:
    # A kernel name of over 1,000 characters (ROCm's composable-kernel names run to 2,004, and
    # a sentence quoted them whole): at most 80 in a sentence, cut with an ellipsis.
    name = "ck_kernel_batched_xdlops_bwd_weight_" + "Gridwise_bk0mk1_xdl" * 55
    events = masked_fill_step(copy=False)
    events[-1] = kernel(name, 160, 40, 2, **SMALL_BLOCKS)
    report = build_report(load_variants([write_trace(tmp_path, events)], cache=False))
    texts = [sentence(f) for f in report.findings]
    quoted = [part for text in texts for part in text.split("`")[1::2]]
    assert any(part.startswith("ck_kernel_batched_xdlops") for part in quoted)
    assert max(len(part) for part in quoted) <= 80


def test_fp32_gemm_advice_follows_the_gpu() -> None:
    # A V100 has no TF32 or bf16 tensor cores: the fix there is fp16 (autocast); on the H200
    # sdpa_math sample the fix is a fused SDPA backend.
    from tests.conftest import CORPUS_TRACES, skip_without

    path = CORPUS_TRACES / "new_htadiff_test_v100_cudagraph_rank1.json.gz"
    skip_without(path)
    said = sentence(by_rule(build_report(load_variants([path], cache=False)))["fp32_gemm"])
    assert 'fp16 inputs (`torch.autocast("cuda", dtype=torch.float16)`)' in said
    assert "TF32" in said and "allow_tf32" not in said
