"""`audit` on real traces: every public, corpus and sample trace audited without a traceback,
the clean samples ok, and the findings checked by hand against the raw JSON (docs/
audit_findings.md says how) found again here, with their counts and timestamps."""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceanalyze
from tests.conftest import CORPUS_TRACES, PUBLIC_TRACES, skip_without
from tests.rankfolder import RankSpec, write_rank_folder
from traceanalyze.analyses.audit import DEFINITIONS, audit
from traceanalyze.analyses.audit.rules import CHECKS, FINDINGS
from traceanalyze.errors import TraceAnalyzeError
from traceanalyze.render.audit import AUDIT

REPO = Path(__file__).resolve().parents[1]
SAMPLES = sorted((REPO / "sample_traces").glob("*/*.json.gz"))
# Samples of a profiler doing only what it does by design: their audit is ok.
CLEAN = ("h200_default", "h200_backward_large", "h200_cold", "h200_with_stack", "h200_roofline")


def shared_files() -> list[Path]:
    return sorted(
        p
        for folder in (PUBLIC_TRACES, CORPUS_TRACES)
        if folder.is_dir()
        for p in folder.iterdir()
        if p.name.endswith((".json", ".json.gz"))
    )


def faults(result: Any) -> dict[tuple[str, str], dict[str, Any]]:
    rows = result.checks.filter(pl.col("count") > 0)
    return {(r["check"], r["finding"]): r for r in rows.iter_rows(named=True)}


ALL = [*SAMPLES, *shared_files()]


@pytest.mark.parametrize("path", ALL, ids=[f"{p.parent.name}/{p.name}" for p in ALL])
def test_every_real_trace_is_audited_without_a_traceback(path: Path) -> None:
    try:
        trace = traceanalyze.load(path)
    except TraceAnalyzeError:
        return  # not a trace the loader reads (an empty window): its one-line error is tested
    result = audit(trace)
    assert result.checks["check"].unique(maintain_order=True).to_list() == list(CHECKS)
    assert set(result.checks["severity"]) <= {"info", "warning", "error"}
    for key in zip(result.checks["check"], result.checks["finding"], strict=True):
        assert key in FINDINGS or key[1] == "none", key
    assert result.ok == bool((result.checks["severity"] == "info").all())
    record = json.loads(AUDIT.render([(None, result)], "json"))
    assert set(record) == {"ok", "checks", "error_bars"}
    assert all(amount >= 0 for amount in result.error_bars.values())
    AUDIT.render([(None, result)], "md")
    AUDIT.render([(None, result)], "csv")


@pytest.mark.parametrize(
    "path",
    [p for p in SAMPLES if p.parent.name in CLEAN],
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_clean_samples_are_ok_with_info_rows_only(path: Path) -> None:
    result = audit(traceanalyze.load(path))
    assert result.ok, result.checks.filter(pl.col("severity") != "info").to_dicts()
    assert result.error_bars == {}


def test_a_graph_replay_without_its_capture_is_opaque() -> None:
    result = audit(traceanalyze.load(REPO / "sample_traces/h200_graph_replay/naive.json.gz"))
    row = faults(result)["graph_replays_opaque", "opaque"]
    figures = ["launch_op_us_per_iter"]
    assert (row["severity"], row["count"], row["figures"]) == ("warning", 21, figures)
    assert row["moved_pct"] == pytest.approx(100.0)


def test_a_graph_replayed_kernel_recorded_twice_is_a_duplicate(tmp_path: Path) -> None:
    # Found by injecting faults: a replayed kernel written twice, 1 ns apart, was taken for
    # concurrent branches of the graph (same correlation). Branches differ in duration.
    path = REPO / "sample_traces/h200_graph_replay/sdpa_flash.json.gz"
    with gzip.open(path, "rt") as handle:
        document = json.load(handle)
    kernel = max(
        (e for e in document["traceEvents"] if e.get("cat") == "kernel"), key=lambda e: e["dur"]
    )
    document["traceEvents"].append({**kernel, "ts": kernel["ts"] + 0.001})
    faulty = tmp_path / "dup.json.gz"
    with gzip.open(faulty, "wt") as handle:
        json.dump(document, handle)
    result = audit(traceanalyze.load(faulty, cache=False))
    assert faults(result)["overlapping_on_stream", "duplicate"]["count"] == 1
    assert ("overlapping_on_stream", "graph_branches") not in faults(result)


def test_launches_during_a_capture_are_info() -> None:
    result = audit(traceanalyze.load(REPO / "sample_traces/h200_graph_capture/naive.json.gz"))
    assert result.ok
    assert faults(result)["launches_without_activity", "captured"]["count"] == 7


def corpus(name: str) -> Path:
    path = CORPUS_TRACES / name
    skip_without(path)
    return path


def raw_events(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as handle:
        events: list[dict[str, Any]] = json.load(handle)["traceEvents"]
    return events


def test_the_negative_queue_trace_overlaps_by_2_us_on_stream_27() -> None:
    # The raw JSON (integer µs): reduce_kernel at 1683564901763490 for 35 µs ends at ...525,
    # the DtoH copy after it on stream 27 starts at ...523.
    path = corpus("hta_negative_queue_rank0.json.gz")
    row = faults(audit(traceanalyze.load(path)))["overlapping_on_stream", "timing"]
    assert row["count"] == 1
    assert "by 2000 ns on stream 27 at ts 1683564901763523.000 µs" in row["detail"]
    on_27 = sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in raw_events(path)
        if e.get("ph") == "X" and e.get("args", {}).get("stream") == 27 and "dur" in e
    )
    overlaps = [(a, b) for a, b in itertools.pairwise(on_27) if b[0] < a[1]]
    assert overlaps == [
        ((1683564901763490, 1683564901763525), (1683564901763523, 1683564901763530))
    ]


def test_the_graph_capture_trace_launches_544_kernels_into_its_capture() -> None:
    # The raw JSON: 546 hipLaunchKernel/hipExtModuleLaunchKernel calls, 544 of them between
    # hipStreamBeginCapture and hipStreamEndCapture on thread 251, none with GPU activity.
    path = corpus("tl_sglang_graph_capture_bs32_mi300x.json.gz")
    result = audit(traceanalyze.load(path))
    assert faults(result)["launches_without_activity", "captured"]["count"] == 544
    assert ("launches_without_activity", "dropped") not in faults(result)


def test_the_gp100_trace_ends_in_an_open_region() -> None:
    # The raw JSON: the fifth Optimizer.step#SGD.step annotation on the CPU has dur 0 (the four
    # before it 164-171 µs), while its GPU-side annotation lasts 64 µs.
    path = corpus("new_hta_gp100_gpu_user_annotation.json.gz")
    row = faults(audit(traceanalyze.load(path)))["truncated", "open_step"]
    assert row["count"] == 1
    assert "`Optimizer.step#SGD.step` (0 ns) at ts 1672876799198575.000 µs" in row["detail"]


def test_pdl_overlaps_on_a_b200_are_by_design() -> None:
    result = audit(traceanalyze.load(corpus("tl_b200_eager.json.gz")))
    assert faults(result)["overlapping_on_stream", "programmatic_launch"]["count"] == 74
    assert result.ok


def test_a_trace_without_gpu_records_drops_every_launch() -> None:
    result = audit(traceanalyze.load(corpus("zoology_a100x8_no_gpu_events.json.gz")))
    row = faults(result)["launches_without_activity", "dropped"]
    assert (row["count"], row["severity"]) == (268, "error")
    assert "the trace holds no GPU activity at all" in row["detail"]


def test_send_recv_alone_cannot_align_the_128_rank_pair(tmp_path: Path) -> None:
    # Both ranks run only ncclKernel_SendRecv (10 each); their ends differ by -68 ms to +134 ms:
    # point-to-point pairs, not a collective of the group.
    for rank in (0, 1):
        source = corpus(f"hta_nccl_128rank_sampled_rank{rank}.json.gz")
        (tmp_path / source.name).symlink_to(source)
    result = audit(traceanalyze.load(tmp_path))
    row = faults(result)["clock_skew", "not_estimable"]
    assert row["count"] == 2 and row["severity"] == "info"
    assert result.offsets_us == {}


def test_a_real_rank_shifted_by_a_known_offset(tmp_path: Path) -> None:
    skip_without(PUBLIC_TRACES / "hta_nccl_a100.json.gz")
    specs = [RankSpec(0), RankSpec(1, shift_us=1234), RankSpec(2, shift_us=-56_789)]
    write_rank_folder(tmp_path, PUBLIC_TRACES / "hta_nccl_a100.json.gz", specs)
    result = audit(traceanalyze.load(tmp_path))
    assert result.offsets_us[1] == pytest.approx(1234, rel=0.05)
    assert result.offsets_us[2] == pytest.approx(-56_789, rel=0.05)
    assert faults(result)["clock_skew", "skewed"]["severity"] == "warning"


def test_the_docs_print_every_finding_and_definition() -> None:
    readme = (REPO / "docs" / "audit.md").read_text()  # the README's section, moved (issue 41)
    for (check, finding), rule in FINDINGS.items():
        assert f"`{check}/{finding}`" in readme and rule.meaning in readme, (check, finding)
    for key, definition in DEFINITIONS.items():
        assert f"`{key}`: {definition}." in readme, key
