"""An independent cross-check with Holistic Trace Analysis (HTA 0.5, the ``hta`` extra).

HTA parses each trace with its own (pandas) loader and sorts GPU kernels into three classes by
name (``hta.utils.utils.get_kernel_type``). Our categories map onto them:

    communication     -> COMMUNICATION   (HTA: ^nccl.*Kernel)
    memcpy, memset    -> MEMORY          (HTA: ^Memcpy|^Memset|^dma; both count them as GPU time)
    every other one   -> COMPUTATION

and the total GPU time of each class must agree within 0.5%. Measured on the traces below
(HTA 0.5.0, pandas 3.1.1): every class agrees to the nanosecond once the two principled
differences below are accounted for, so the tolerance is there for float rounding only.

Principled differences, read from HTA's source, applied before comparing:

1. HTA takes every event with an integer ``stream`` arg as a GPU kernel (``stream != -1``). That
   includes CUDA synchronisation events (cat ``cuda_sync``: "Stream Sync", "Context Sync",
   "Stream Wait Event"), which it classes OTHER or COMPUTATION, and Inductor's ``cpu_op`` around
   a Triton launch, which carries ``stream: 0`` in its args (in hta_triton_example_a100 that
   95.8 us CPU op would be counted as a 95.8 us GPU kernel). Neither is GPU work; we compare only
   HTA's rows of the GPU activity categories, and check that the rows set aside are exactly such
   events.
2. With two or more ``ProfilerStep``\\ s HTA keeps only GPU activities launched by a runtime call
   that starts no later than the end of the last step (``include_last_profiler_step=True``; the
   default also drops the last step as possibly incomplete) and drops activities with no runtime
   call (kernels launched before the profiling window). We select the same activities on our side
   (linked, launch start <= end of the last step); with fewer steps neither side filters.

HTA's ``get_gpu_kernel_breakdown`` reports union (busy) time per class and truncates every
interval to whole microseconds, so it is run (it must work with the installed pandas) but its
numbers are not compared with sums of durations. HTA rounds ns-resolution timestamps unless
``HTA_DISABLE_NS_ROUNDING=1``, which this test sets so that durations keep their nanoseconds.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import polars as pl
import pytest

pytest.importorskip("hta")

from hta.trace_analysis import TraceAnalysis
from hta.utils.utils import get_kernel_type

import traceanalyze
from tests.conftest import PUBLIC_TRACES, skip_without
from traceanalyze.analyses.activities import GRAPH_LAUNCHES, GRAPH_TRANSFER_KERNELS, activities

pytestmark = [
    pytest.mark.hta,
    # HTA 0.5 passes inplace=True to pandas methods; pandas 3.1 deprecates that keyword and
    # pandas 4 removes it, hence the extra's "pandas<4".
    pytest.mark.filterwarnings("ignore:The inplace keyword:DeprecationWarning"),
]

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = sorted((ROOT / "sample_traces").glob("h200_*/*.json.gz"))
PUBLIC_NVIDIA = (
    "hta_alexnet_a100.json.gz",
    "hta_inference_rank_1_legacy.json.gz",
    "hta_nccl_a100.json.gz",
    "hta_ns_resolution_v100.pt.trace.json.gz",
    "hta_triton_example_a100.json.gz",
    "tl_h100_bert_small.json.gz",
    "tl_h100_falconsai_conv.json.gz",
)
TRACES = [
    *(pytest.param(p, id=f"{p.parent.name}/{p.name}") for p in SAMPLES),
    *(pytest.param(PUBLIC_TRACES / name, id=f"public/{name}") for name in PUBLIC_NVIDIA),
]
TOLERANCE = 0.005
CLASSES = ("COMPUTATION", "MEMORY", "COMMUNICATION")
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset")
NOT_GPU_WORK = ("cuda_sync", "cpu_op")  # difference 1


def our_class() -> pl.Expr:
    category = pl.col("category")
    # Difference 3: a replayed CUDA graph's copy kernel (memcpy128) is a memory copy for us,
    # a kernel (COMPUTATION) for HTA, whose rule reads only the name's prefix.
    graph_transfer = pl.col("launch_api").is_in(GRAPH_LAUNCHES) & pl.col("name").str.contains(
        "|".join(GRAPH_TRANSFER_KERNELS.values())
    )
    return (
        pl.when(category == "communication")
        .then(pl.lit("COMMUNICATION"))
        .when(category.is_in(["memcpy", "memset"]) & ~graph_transfer)
        .then(pl.lit("MEMORY"))
        .otherwise(pl.lit("COMPUTATION"))
    )


def ours(path: Path) -> dict[str, tuple[int, float]]:
    """Our activities and GPU microseconds per HTA class, over those HTA keeps (difference 2)."""
    trace = traceanalyze.load(path, cache=False)
    frame = activities(trace)
    steps = trace.iterations.filter(pl.col("name").str.starts_with("ProfilerStep"))
    if steps.height >= 2:
        last_end = (steps["ts_ns"] + steps["dur_ns"]).max()
        frame = frame.filter(pl.col("linked") & (pl.col("launch_ts_ns") <= last_end))
    grouped = frame.group_by(our_class().alias("class")).agg(
        n=pl.len(), us=pl.col("dur_ns").sum() / 1e3
    )
    return {name: (n, us) for name, n, us in grouped.rows()}


def hta_analysis(path: Path, folder: Path) -> TraceAnalysis:
    """HTA reads a folder of per-rank traces: give it a folder holding a copy of this one."""
    folder.mkdir()
    shutil.copy(path, folder / path.name)
    logging.getLogger("hta").setLevel(logging.ERROR)
    return TraceAnalysis(trace_dir=str(folder), include_last_profiler_step=True)


def hta_rows(analysis: TraceAnalysis) -> pl.DataFrame:
    """HTA's GPU rows (``stream != -1``, as its kernel breakdown selects them), names decoded."""
    frame = analysis.t.get_trace(analysis.t.get_ranks()[0])
    symbols = analysis.t.symbol_table.get_sym_table()
    gpu = frame[frame["stream"].ne(-1)]
    names = [symbols[i] for i in gpu["name"]]
    return pl.DataFrame(
        {
            "cat": [symbols[i] for i in gpu["cat"]],
            "name": names,
            "class": [get_kernel_type(n) for n in names],
            "dur_us": gpu["dur"].astype(float).to_list(),
        },
        schema={"cat": pl.String, "name": pl.String, "class": pl.String, "dur_us": pl.Float64},
    )


@pytest.mark.parametrize("path", TRACES)
def test_gpu_time_per_class_agrees_with_hta(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    skip_without(path)
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")
    rows = hta_rows(hta_analysis(path, tmp_path / "hta"))
    set_aside = rows.filter(~pl.col("cat").is_in(GPU_CATS))
    assert set(set_aside["cat"]) <= set(NOT_GPU_WORK), set_aside
    gpu = rows.filter(pl.col("cat").is_in(GPU_CATS))
    assert set(gpu["class"]) <= set(CLASSES), gpu.filter(~pl.col("class").is_in(CLASSES))
    grouped = gpu.group_by("class").agg(n=pl.len(), us=pl.col("dur_us").sum())
    theirs = {name: (n, us) for name, n, us in grouped.rows()}
    mine = ours(path)
    assert set(mine) == set(theirs)
    for name, (count, us) in theirs.items():
        assert mine[name][0] == count, name
        assert mine[name][1] == pytest.approx(us, rel=TOLERANCE), name
    total = sum(us for _, us in theirs.values())
    assert sum(us for _, us in mine.values()) == pytest.approx(total, rel=TOLERANCE)


def test_hta_breakdowns_run_with_the_installed_pandas(tmp_path: Path) -> None:
    analysis = hta_analysis(ROOT / "sample_traces/h200_default/naive.json.gz", tmp_path / "hta")
    kernel_types, kernels = analysis.get_gpu_kernel_breakdown(
        visualize=False, include_memory_kernels=True
    )
    assert set(kernel_types["kernel_type"]) == {"COMPUTATION", "MEMORY"}
    assert not kernels.empty
    temporal = analysis.get_temporal_breakdown(visualize=False)
    assert temporal["compute_time_pctg"].iloc[0] > 0
