"""Invariants of the steps of every real trace (sample_traces/, and ../shared's public and corpus
traces where present): the steps of a rank run one after another on the CPU, and each step's
window holds its CPU span and the span of the GPU work it launched, but for the time an earlier
step's window runs into it (back-to-back windows never overlap: a step's wall is its period, see
docs/time.md, so a step whose start the previous step's GPU work still occupies is shorter than
its CPU span by at most that time)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import traceanalyze
from tests.conftest import CORPUS_TRACES, PUBLIC_TRACES
from traceanalyze.analyses.iterations import choice_of, concurrent_spans
from traceanalyze.analyses.step.model import step_rows
from traceanalyze.analyses.step.window import step_windows
from traceanalyze.errors import TraceAnalyzeError

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
# Rounding of µs figures to ns in the table.
TOLERANCE_US = 1e-3


def _traces() -> list[Path]:
    found = sorted(SAMPLES.rglob("*.json.gz"))
    for folder in (PUBLIC_TRACES, CORPUS_TRACES):
        if folder.is_dir():
            found += sorted(p for p in folder.iterdir() if p.name.endswith((".json", ".gz")))
    return found


@pytest.mark.parametrize("path", _traces(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_each_step_holds_its_cpu_and_gpu_spans(path: Path) -> None:
    try:
        trace = traceanalyze.load(path)
    except TraceAnalyzeError:
        pytest.skip("not a trace this tool reads (its own test says why)")
    regions = choice_of(trace).regions
    assert concurrent_spans(regions.iterations) == 0
    windows = (
        step_windows(regions)
        .sort("rank", "lo_ns")
        .with_columns(reach_ns=pl.col("hi_ns").cum_max().shift(1).over("rank"))
        .select(
            "rank",
            "iteration",
            # How far the earlier windows run past the step's first start (CPU or GPU).
            lead_in_us=(pl.col("reach_ns") - pl.min_horizontal("cpu_lo_ns", "own_lo_ns"))
            .clip(lower_bound=0)
            .fill_null(0)
            / 1e3,
        )
    )
    rows = step_rows(trace).join(windows, on=["rank", "iteration"])
    assert rows.height == step_rows(trace).height
    held = pl.col("wall_us") + pl.col("lead_in_us") + TOLERANCE_US
    short = rows.filter((held < pl.col("cpu_span_us")) | (held < pl.col("gpu_span_us")))
    # With no lead-in (the first step of a rank, say) both spans are held whole.
    assert short.select("iteration", "wall_us", "cpu_span_us", "gpu_span_us").rows() == []
