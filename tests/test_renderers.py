"""The cold, report and perf renderers, line by line, on results of micro traces whose figures
are worked out by hand in the comments (the analyses' own tests check the frames)."""

from __future__ import annotations

from pathlib import Path

import pytest

import traceanalyze
from tests.micro import kernel, load
from tests.test_cold import cold_folder
from tests.test_roofline import GEMM, footprint, step
from traceanalyze.analyses.cold.variants import cold_set
from traceanalyze.analyses.roofline.model import roofline
from traceanalyze.analyses.variants.compare import comparison
from traceanalyze.load.variants import VariantSet
from traceanalyze.render.cold import COLD
from traceanalyze.render.perf import roofline_markdown
from traceanalyze.render.report.markdown import COMPARISON


@pytest.fixture
def capture(tmp_path: Path) -> VariantSet:
    """naive (call 1 500 µs, call 2 300 µs; timed 0.6 ms / 0.25 ms) and sdpa_cudnn (call 1
    1,000 µs, steady median 100 µs; timed 1.2 ms / 0.09 ms), flex_attention skipped."""
    return traceanalyze.load_variants([cold_folder(tmp_path)], cache=False)


def test_cold_markdown(capture: VariantSet) -> None:
    result = cold_set(capture.variants, manifest=capture.manifests[0])
    lines = COLD.render(result, "md").splitlines()
    # excess vs timed: (200 - 350) / 350 = -42.86%, (900 - 1,110) / 1,110 = -18.92%; the
    # advantage is the steady timings' difference, 250 - 90 = 160 µs, and cuDNN's extra
    # one-off work, 1,110 - 350 = 760 µs, is paid back after ceil(760 / 160) = 5 calls. A row
    # of the breakdown pays its own excess back with the traces' advantage, 300 - 100 = 200 µs:
    # ceil(645 / 200) = 4 calls.
    for line in [
        "| naive | a fresh process (capture manifest) | as_found | manifest |",
        "| naive | 2 | 500 | 300 | 1 | 200 | 200 | 0 |  | cublas_init |",
        "| sdpa_cudnn | 3 | 1,000 | 100 | 2 | 900 | 900 | 0 | 645 | cudnn_plan |",
        "| naive | 600 | 250 | 350 | -42.86 | 20.00 |",
        "| sdpa_cudnn | 1,200 | 90 | 1,110 | -18.92 | 11.11 |",
        "| naive |  |  |  |  | the baseline itself |",
        "| sdpa_cudnn | 160 | 760 | capture timing | 5 | 760.0 µs more one-off work / 160.0 µs "
        "less per call, both from the capture timing; 200.0 µs faster per call under the "
        "profiler; for caches as_found |",
        "3 calls (annotations call<i>); call 1 ran in a fresh process (capture manifest); "
        "caches: as_found (manifest). Under the profiler call 1 took 1 ms against 100 µs for "
        "the median of its 2 steady calls (wall time): 900 µs of one-off work (900 µs on the "
        "CPU, split below); paid back after 5 calls against `naive` (760.0 µs more one-off "
        "work / 160.0 µs less per call, both from the capture timing; 200.0 µs faster per call "
        "under the profiler; for caches as_found). Timed without the profiler (cold capture: "
        "each call's wall clock, no profiler (call_wall_ms)): 1.2 ms against 90 µs, 1.11 ms of "
        "one-off work.",
        "| cpu | 2 | cudnn_plan | 700 | 55 | 645 | 71.67 | 4 |",
        "- the manifest lists 3 calls, the trace holds 2: shapes are read from the trace.",
        "- the profiled process started with caches cuda_jit 12 files, triton empty, inductor "
        "absent, the timing process with cuda_jit 12 files.",
        "No comparison: needs CUDA. Caches: unknown (no capture manifest says, no cache event "
        "in the trace).",
    ]:
        assert line in lines, line
    assert lines.count("### `naive`") == 1


def test_comparison_markdown(capture: VariantSet) -> None:
    lines = COMPARISON.render(comparison(capture.variants), "md").splitlines()
    # Each call (call1, call2, ...) is a step: 60 µs of GPU busy time a step in both, so a
    # speed-up of 1; wall time from the steps' counted windows: naive's two (500 and 300 µs;
    # two steps are too few to flag an outlier) against cuDNN's calls 2 and 3 (160 and 170 µs
    # to their kernels' ends; call 1, 1,000 µs of plan building on the CPU, is a first step
    # waiting on the CPU, left out): 400 / 165 = 2.42.
    assert lines[:4] == [
        "| variant | GPU busy µs/iter | speed-up | speed-up wall | bound | kernels/iter | "
        "memcpy/iter | fused kernel |",
        "|---|---:|---:|---:|---|---:|---:|---|",
        "| naive | 60 | 1 | 1.00 | CPU-bound | 1 | 0 | — |",
        "| sdpa_cudnn | 60 | 1 | 2.42 | CPU-bound | 1 | 0 | "
        "cudnn_generated_fort_native_sdpa_sm90_flash_fpr… |",
    ]
    assert (
        "- `naive`: CPU-bound: GPU 15.0% (compute 15.0%), CPU 85.0% (host 85.0%) of the wall (the "
        "trace's step windows); margin 42.5 points; 2 of 2 counted steps agree (100% of their "
        "wall time)"
    ) in lines
    # cuDNN over its counted calls 2 and 3: 60 µs of GPU in 165 µs of wall, 36.4%.
    assert (
        "- `sdpa_cudnn`: CPU-bound: GPU 36.4% (compute 36.4%), CPU 63.6% (host 63.6%) of the "
        "wall (the trace's step windows); margin 31.8 points; 2 of 2 counted steps agree (100% "
        "of their wall time)"
    ) in lines


def test_roofline_markdown(tmp_path: Path) -> None:
    trace = load(
        tmp_path, [*step(0, 1), *step(1000, 2), kernel(GEMM, 5, 50, 999, **footprint(300))]
    )
    lines = roofline_markdown(roofline(trace)).splitlines()
    # copy_: 2 x 2 MiB in 1 µs = 4.19 TB/s, 87.38% of 4.8 TB/s; addmm: 2 x 64 x 256 x 128
    # FLOP in 10 µs = 0.419 TFLOP/s. 300 GEMM blocks over 264 per wave: 1.14 waves.
    assert lines[0].startswith(
        "Peaks: H200 SXM: bf16 989.4 TFLOP/s, fp32 67 TFLOP/s, 4.8 TB/s (NVIDIA H200 Tensor "
        "Core GPU datasheet (SXM), dense). 3 op shapes modelled, 86.1% of the GPU activity time "
        "(36.0 µs per iteration)."
    )
    for line in [
        "| aten::addmm | [[256],[64,128],[128,256]] | bf16 | 1 | 10 | 10 | 27.78 | 0.42 | "
        "0.0115 | 36.41 | 989.40 | 0.24 | memory |",
        "| aten::copy_ | [[1024,1024],[1024,1024]] | bf16 | 1 | 1 | 1 | 2.78 |  | 4.1943 |  |  | "
        "87.38 | memory |",
        "| aten::copy_ | [[1024,1024],[1024,1024]] | memory-bound, 87% of the roofline: near "
        "the roofline |",
        "| aten::cat | no FLOP/byte model for this op | 1 | 5 | 13.89 |",
        "| sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64 | 1 | 10 | 300 | 264 | "
        "1.136 | 13.64 | 56.82 |",
    ]:
        assert line in lines, line
