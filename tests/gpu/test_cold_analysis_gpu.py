"""The cold-start and graph-replay analyses on traces recorded here, on a real GPU.

Needs the capture package with ``--cold`` and ``--cuda-graph`` (capture.run_cold); skipped
without it, without torch or without CUDA. Run on the GPU box:
``python -m pytest -m gpu tests/gpu/test_cold_analysis_gpu.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pl = pytest.importorskip("polars")  # the analyses need it (carried as wheels to the GPU box)
torch = pytest.importorskip("torch")

import traceanalyze  # noqa: E402 (after the skips: it needs polars)
from traceanalyze.analyses.cold.variants import ColdSet, cold_set  # noqa: E402
from traceanalyze.analyses.graphs import graph_table, replayed_activities  # noqa: E402
from traceanalyze.analyses.summary import summary  # noqa: E402

capture = pytest.importorskip("capture")
if not hasattr(capture, "run_cold"):
    pytest.skip("this capture package has no --cold", allow_module_level=True)
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.torch,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU with CUDA"),
]
VARIANTS = ("naive", "sdpa_flash", "sdpa_cudnn")
# The acceptance: the trace's first-call excess within 20% of the wall-clock timing.
AGREEMENT_PCT = 20.0


@pytest.fixture(scope="module")
def cold(tmp_path_factory: pytest.TempPathFactory) -> ColdSet:
    out = tmp_path_factory.mktemp("gpu_cold_analysis")
    config = capture.CaptureConfig(repeats=5, variants=VARIANTS)  # the blog's shapes
    capture.run_cold(capture.ColdConfig(config, calls=6, empty_caches=True), out)
    found = traceanalyze.load_variants([out])
    return cold_set(found.variants, manifest=found.manifests[0])


def test_every_variant_is_compared(cold: ColdSet) -> None:
    rows = cold.summary.filter(pl.col("status") == "ok")
    assert rows["variant"].to_list() == list(VARIANTS)
    assert set(rows["call_source"].to_list()) == {"annotations call<i>"}
    assert set(rows["cache_state"].to_list()) == {"empty"}
    assert (rows["excess_us"] > 0).all(), rows


def test_cudnn_first_call_excess_agrees_with_the_timing(cold: ColdSet) -> None:
    row = cold.summary.filter(pl.col("variant") == "sdpa_cudnn").row(0, named=True)
    print({k: row[k] for k in ("excess_us", "timed_excess_us", "timed_first_call_spread_pct",
                               "excess_vs_timed_pct", "cudnn_planning_us")})  # fmt: skip
    assert row["timed_excess_us"] is not None
    assert abs(row["excess_vs_timed_pct"]) <= AGREEMENT_PCT, row
    assert row["cudnn_planning_us"] is not None and row["cudnn_planning_us"] > 0
    assert row["break_even_calls"] is not None, row  # cuDNN is faster than naive when steady


@pytest.fixture(scope="module", params=["replay", "capture"])
def graphed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp(f"gpu_graph_analysis_{request.param}")
    config = capture.CaptureConfig(
        batch=8, heads=16, seq=512, head_dim=64, repeats=3, variants=("naive",),
        cuda_graph=request.param,
    )  # fmt: skip
    capture.run_capture(config, out)
    return out / "naive.json.gz"


def test_graph_replays_are_counted_and_attributed(graphed: Path) -> None:
    trace = traceanalyze.load(graphed, cache=False)
    assert summary(trace)["graph_launches_per_iter"] > 0
    replays = replayed_activities(trace)
    assert replays.height > 0
    kernels_per_replay = replays.group_by("replay").len()["len"].unique().to_list()
    assert len(kernels_per_replay) == 1, kernels_per_replay  # every replay the same graph
    table = graph_table(trace)
    if "cuda_graph_capture" in set(trace.cpu["name"].to_list()):
        # The capture is in the trace: every replayed activity has the op that launched it.
        assert table["captured_op"].null_count() == 0, table
        assert "aten::bmm" in table["captured_op"].to_list()
    else:
        assert table["captured_op"].null_count() == table.height
