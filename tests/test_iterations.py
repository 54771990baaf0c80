"""Which iterations count (issue 19): micro-traces with exact rows, then the real traces the
issue names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner

import traceanalyze
from tests.conftest import SHARED, skip_without
from tests.micro import annotation, call, kernel, load, op, present, write_trace
from traceanalyze.analyses.calls import find_calls
from traceanalyze.analyses.iterations import (
    Selection,
    choice_of,
    counted,
    iteration_notes,
)
from traceanalyze.analyses.memcpy import memory_traffic
from traceanalyze.analyses.step.model import step_model, step_rows
from traceanalyze.analyses.summary import WALL_FROM_STEADY, summary, wall_verdict
from traceanalyze.analyses.variants.compare import comparison
from traceanalyze.cli import main
from traceanalyze.errors import UsageError
from traceanalyze.load.variants import load_variants
from traceanalyze.trace import IterationSource

Event = dict[str, Any]
SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
CORPUS = SHARED / "traces" / "corpus"
PUBLIC = SHARED / "traces" / "public"
ROWS = ["iteration", "kind", "flag", "counted", "kernels", "memcpy", "gpu_busy_us"]


def step(number: int, start: float, dur: float, correlation: int, kernel_us: float) -> list[Event]:
    """ProfilerStep#``number``: aten::mm launches one kernel of ``kernel_us``."""
    return [
        annotation(f"ProfilerStep#{number}", start, dur),
        op("aten::mm", start + 1, 5),
        call("cudaLaunchKernel", start + 2, 2, correlation),
        kernel("gemm_k", start + 10, kernel_us, correlation),
    ]


def rows(trace: traceanalyze.Trace) -> list[tuple[Any, ...]]:
    return step_rows(trace).select(ROWS).rows()


# hta_mi250_rocm reduced: step 1 holds the work, step 2 is the profiler's closing step.
STUB = [*step(1, 0, 100, 1, 20), annotation("ProfilerStep#2", 100, 5)]


def test_a_stub_closing_step_is_left_out(tmp_path: Path) -> None:
    trace = load(tmp_path, STUB)
    assert rows(trace) == [
        (1, "profiled", None, True, 1, 0, 20.0),
        (2, "closing", "empty closing step (no GPU activity): the profiler's last step", False,
         0, 0, 0.0),
    ]  # fmt: skip
    result = summary(trace)
    assert (result["iterations"], result["kernels_per_iter"]) == (1, 1.0)  # was 2 and 0.5
    assert result["gpu_busy_us_per_iter"] == 20.0
    assert result["iterations_left_out"] == 1
    assert result["iteration_note"] == (
        "iteration 2 left out (empty closing step (no GPU activity): the profiler's last step)"
    )
    # The restricted trace: only step 1 counts; step 2's rows have no iteration.
    restricted = counted(trace)
    assert restricted.iterations["iteration"].to_list() == [1]
    assert restricted.cpu.filter(pl.col("name") == "ProfilerStep#2")["iteration"].to_list() == [
        None
    ]
    assert counted(restricted) is restricted


def capture_step(start: float) -> list[Event]:
    """A step that captures a graph: the launches run nothing while the stream captures."""
    return [
        annotation("ProfilerStep#1", start, 100),
        call("cudaStreamBeginCapture", start + 1, 1, 90),
        op("aten::mm", start + 5, 10),
        call("cudaLaunchKernel", start + 6, 2, 1),
        op("aten::copy_", start + 20, 10),
        call("cudaMemcpyAsync", start + 21, 2, 2),
        call("cudaStreamEndCapture", start + 40, 1, 91),
        call("cudaGraphInstantiateWithFlags", start + 50, 30, 92),
    ]


def replay(number: int, start: float, correlation: int) -> list[Event]:
    """A replay: the GEMM, then the copy, which the graph runs as its own copy kernel."""
    return [
        annotation(f"ProfilerStep#{number}", start, 45),
        call("cudaGraphLaunch", start + 2, 5, correlation),
        kernel("gemm_k", start + 10, 30, correlation),
        kernel("memcpy128", start + 41, 10, correlation),
    ]


GRAPH = [*capture_step(0), *replay(2, 100, 10), *replay(3, 200, 11)]


def test_the_capture_step_is_its_own_kind_and_graph_copies_are_copies(tmp_path: Path) -> None:
    trace = load(tmp_path, GRAPH)
    flag = "CUDA graph capture step: one-off capture and instantiation, not a replay"
    assert rows(trace) == [
        (1, "capture", flag, False, 0, 0, 0.0),
        (2, "profiled", None, True, 1, 1, 40.0),
        (3, "profiled", None, True, 1, 1, 40.0),
    ]
    result = summary(trace)
    # The graph's memcpy128 is the eager run's cudaMemcpyAsync: a copy, not a kernel.
    assert (result["kernels_per_iter"], result["memcpy_per_iter"]) == (1.0, 1.0)
    assert result["gpu_memcpy_us_per_iter"] == 10.0
    assert present(result["category_count"]) == {"gemm": 1.0, "memcpy": 1.0}
    # The copy takes the op captured at its position: its chain is the eager one.
    [chain] = memory_traffic(trace)["chain"].to_list()
    assert chain == "aten::copy_ -> memcpy128"
    # No CPU operator in a replay step, yet a GPU busy 40 of the step's 45 µs is GPU-bound.
    assert result["cpu_op_us_per_iter"] == 0
    assert result["bound"] == "GPU-bound"


def sequence(start: float, correlation: int) -> list[Event]:
    """One training step without ProfilerStep: zero_grad, an unannotated forward (a 10 µs
    kernel) and an optimizer step (a 1 µs kernel)."""
    return [
        annotation("zero_grad", start, 5),
        op("aten::mm", start + 10, 10),
        call("cudaLaunchKernel", start + 11, 2, correlation),
        kernel("gemm_k", start + 15, 10, correlation),
        annotation("step", start + 40, 30),
        op("aten::add_", start + 41, 5),
        call("cudaLaunchKernel", start + 42, 2, correlation + 1),
        kernel("add_k", start + 50, 1, correlation + 1),
    ]


def test_a_repeated_region_that_misses_the_work_gives_way_to_the_sequence(
    tmp_path: Path,
) -> None:
    # `step` is the most repeated top-level annotation with the most time, but holds 1 of every
    # 11 µs of GPU activity (new_hta_gp100_gpu_user_annotation reduced).
    trace = load(tmp_path, [*sequence(0, 1), *sequence(100, 3), *sequence(200, 5)])
    assert trace.iteration_source == "annotation:step"
    choice = choice_of(trace)
    assert choice.regions.iteration_source == "sequence:zero_grad"
    assert choice.coverage_pct == 100.0
    result = summary(trace)
    assert (result["iterations"], result["kernels_per_iter"]) == (3, 2.0)
    assert result["iteration_coverage_pct"] == 100.0
    assert result["gpu_activity_us_per_iter"] == 11.0
    assert "each from one `zero_grad` to the next" in result["iteration_note"]
    assert iteration_notes(trace)[:2] == [
        "iterations from: sequence:zero_grad",
        "iteration_coverage_pct: 100.0% of the trace's GPU activity time was launched inside "
        "these iterations",
    ]


def test_the_last_round_of_a_sequence_runs_to_the_end_of_the_cpu_activity(
    tmp_path: Path,
) -> None:
    # The profiler stopped inside the last optimizer step: its annotation is 0 µs long and its
    # add_ (and kernel) come after it (new_hta_gp100_gpu_user_annotation's last round; in
    # new_tl_mi300x_norm_profile_memory the unannotated backward follows the last annotation).
    cut = [
        {**event, "dur": 0} if event.get("name") == "step" else event for event in sequence(200, 5)
    ]
    trace = load(tmp_path, [*sequence(0, 1), *sequence(100, 3), *cut])
    choice = choice_of(trace)
    assert choice.regions.iteration_source == "sequence:zero_grad"
    assert choice.coverage_pct == 100.0
    rows = step_rows(trace).select(ROWS).to_dicts()
    assert [(r["iteration"], r["kernels"], r["gpu_busy_us"]) for r in rows] == [
        (0, 2, 11.0),
        (1, 2, 11.0),
        (2, 2, 11.0),
    ]


def test_without_a_covering_sequence_the_whole_trace_is_one_iteration(tmp_path: Path) -> None:
    events = [
        annotation("probe", 0, 10),
        op("aten::add", 1, 5),
        call("cudaLaunchKernel", 2, 2, 1),
        kernel("add_k", 5, 1, 1),
        annotation("probe", 20, 10),
        # The work, after the last `probe`: 3% of the activity is inside the regions.
        op("aten::mm", 40, 10),
        call("cudaLaunchKernel", 41, 2, 2),
        kernel("gemm_k", 45, 32, 2),
    ]
    trace = load(tmp_path, events)
    result = summary(trace)
    assert result["iteration_source"] == "whole trace"
    assert (result["iterations"], result["kernels_per_iter"]) == (1, 2.0)
    assert result["iteration_coverage_pct"] == 100.0
    assert result["iteration_note"] == (
        "whole trace taken as one iteration: the repeated annotation `probe` covers 3.0% of "
        "the GPU activity, and no repeated sequence of top-level annotations runs one after "
        "another and covers 50%"
    )


def test_annotations_that_run_at_once_on_several_threads_are_no_steps(tmp_path: Path) -> None:
    # hta_mtia_inference reduced: a server's per-request annotation on several threads, the
    # second starting before the first ends. As steps, the second's window began where the
    # first's ended: 1 µs of wall for 9 µs on the CPU (was 0.02 for 9.86 µs). The trace has
    # no GPU activity, and the requests hold 23 of the 130 µs of CPU operators.
    events = [
        annotation("request", 0, 10, tid=1),
        op("aten::to", 1, 8, tid=1),
        annotation("request", 2, 9, tid=2),
        op("aten::to", 3, 7, tid=2),
        annotation("request", 40, 10, tid=3),
        op("aten::to", 41, 8, tid=3),
        op("aten::mm", 60, 100, tid=1),
        op("aten::relu", 165, 7, tid=1),
    ]
    trace = load(tmp_path, events)
    assert trace.iteration_source == "annotation:request"  # what the linker found
    result = summary(trace)
    assert (result["iteration_source"], result["iterations"]) == ("whole trace", 1)
    assert result["iteration_note"] == (
        "whole trace taken as one iteration: the repeated annotation `request` covers 17.7% of "
        "the CPU operators' time (no GPU activity) and 1 of its 3 spans start before an "
        "earlier one has ended (they run at once, on several threads: no loop), and no "
        "repeated sequence of top-level annotations runs one after another and covers 50%"
    )
    table = step_rows(trace)
    assert table.select("wall_us", "cpu_span_us").rows() == [(172.0, 172.0)]


def test_sequential_annotations_that_hold_the_cpu_work_are_steps_without_a_gpu(
    tmp_path: Path,
) -> None:
    # The same requests one after another on one thread, holding the work: steps (no GPU
    # activity, so the coverage is the outermost CPU operators' time: 24 of 31 µs).
    events = [
        annotation("request", 0, 10),
        op("aten::to", 1, 8),
        annotation("request", 12, 10),
        op("aten::to", 13, 8),
        annotation("request", 24, 10),
        op("aten::to", 25, 8),
        op("aten::relu", 40, 7),
    ]
    trace = load(tmp_path, events)
    result = summary(trace)
    assert (result["iteration_source"], result["iterations"]) == ("annotation:request", 3)
    assert step_rows(trace).select("wall_us", "cpu_span_us").rows() == [(10.0, 10.0)] * 3


def test_hta_mtia_inference_is_one_whole_trace_step() -> None:
    # Recomputed from the raw JSON (json/gzip): 137 `# TensorsToDeviceModule #` annotations of
    # 0.88-15.1 µs on 6 threads, 8 starting before the one before has ended; the outermost CPU
    # operators starting inside them hold 0.05% of the outermost operators' time.
    path = CORPUS / "hta_mtia_inference.json.gz"
    skip_without(path)
    trace = traceanalyze.load(path)
    assert trace.iteration_source == "annotation:# TensorsToDeviceModule #"
    result = summary(trace)
    assert (result["iteration_source"], result["iterations"]) == ("whole trace", 1)
    assert "8 of its 137 spans start before an earlier one has ended" in result["iteration_note"]
    assert result["bound"] == "cannot tell"
    # `cold` takes no calls from annotations that run at once either: the next rule's 15
    # `Stage::preprocess::remote.forward` regions, one after another (was the 137 annotations).
    calls = find_calls(trace)
    assert (calls.source, calls.count) == (
        "repeated region: Stage::preprocess::remote.forward",
        15,
    )


def test_outliers_are_flagged_and_kept(tmp_path: Path) -> None:
    # Step 1 waits on the CPU for 400 µs: a one-off first step, left out of the means and the
    # verdict alike; step 4's kernel ends 290 µs after it starts: an outlier, kept.
    events = [
        *step(1, 0, 500, 1, 20),
        *step(2, 500, 100, 2, 20),
        *step(3, 600, 100, 3, 20),
        *step(4, 700, 30, 4, 290),
        *step(5, 1000, 100, 5, 20),
    ]
    table = step_rows(load(tmp_path, events))
    assert table.select("iteration", "flag", "counted").rows() == [
        (1, "first step waiting on the CPU: wall 5.0x the other steps' median", False),
        (2, None, True),
        (3, None, True),
        (4, "outlier: wall 3.0x the median (beyond median ± 5·MAD)", True),
        (5, None, True),
    ]


def test_the_user_chooses_iterations(tmp_path: Path) -> None:
    events = [*step(1, 0, 100, 1, 10), *step(2, 100, 100, 2, 20), *step(3, 200, 100, 3, 30)]
    trace = load(tmp_path, events)
    chosen = counted(trace, Selection(first=2, last=3))
    assert summary(chosen)["gpu_busy_us_per_iter"] == 25.0
    skipped = counted(trace, Selection(skip=1))
    assert summary(skipped)["iteration_note"] == (
        "iterations chosen with --skip 1; iteration 1 left out (not chosen)"
    )
    with pytest.raises(UsageError, match="leaves no iteration"):
        counted(trace, Selection(first=7))
    path = write_trace(tmp_path, events, "steps.json")
    result = CliRunner().invoke(
        main, ["summary", str(path), "--iterations", "2-", "--skip", "1", "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["gpu_busy_us_per_iter"] == 30.0
    bad = CliRunner().invoke(main, ["summary", str(path), "--iterations", "two"])
    assert bad.exit_code == 2
    table = CliRunner().invoke(main, ["iterations", str(path), "--format", "json"])
    assert [list(row)[:4] for row in json.loads(table.stdout)] == [
        ["rank", "iteration", "kind", "flag"]
    ] * 3


# The real traces issue 19 names.


def test_hta_mi250_counts_one_step() -> None:
    path = PUBLIC / "hta_mi250_rocm.json.gz"
    skip_without(path)
    result = summary(traceanalyze.load(path))
    # ProfilerStep#2 is the profiler's 49 µs closing step (was: 2 iterations, 7 kernels each).
    assert (result["iterations"], result["kernels_per_iter"]) == (1, 14.0)
    assert result["iterations_left_out"] == 1


def test_graph_replay_counts_its_copy_and_is_gpu_bound() -> None:
    trace = traceanalyze.load(SAMPLES / "h200_graph_replay" / "naive.json.gz")
    result = summary(trace)
    assert (result["kernels_per_iter"], result["memcpy_per_iter"]) == (5.0, 1.0)  # was 6, 0
    assert result["bound"] == "GPU-bound"  # was blank at 100.9% busy
    traffic = memory_traffic(trace)
    assert traffic.filter(pl.col("kind") == "memset")["actionable"].to_list() == [False]


def test_graph_capture_leaves_the_capture_step_out() -> None:
    trace = traceanalyze.load(SAMPLES / "h200_graph_capture" / "naive.json.gz")
    table = step_rows(trace)
    assert table["kind"].to_list() == ["capture", "profiled", "profiled", "profiled"]
    result = summary(trace)
    assert result["kernels_per_iter"] == 5.0  # was 4.25, the capture step averaged in
    chains = memory_traffic(trace)["chain"].to_list()
    assert "aten::masked_fill -> aten::clone -> aten::copy_ -> Memcpy DtoD (Device -> Device)" in (
        chains
    )


def test_cold_captures_are_judged_on_their_steady_medians() -> None:
    variants = load_variants([SAMPLES / "h200_cold"])
    table = comparison(variants.variants).filter(pl.col("variant") == "sdpa_efficient")
    row = table.row(0, named=True)
    assert row["wall_source"] == WALL_FROM_STEADY
    # naive's steady median over sdpa_efficient's (was 41.96 from trace means with call 1).
    assert row["speedup_wall"] == pytest.approx(1.1565 / row["steady_median_ms"], rel=1e-3)
    assert 4 < row["speedup_wall"] < 6


@pytest.mark.parametrize(
    ("name", "starter", "coverage", "kernels"),
    [
        # Recomputed from the raw JSON: 26 kernels launched from each zero_grad to the next (the
        # last round's 4 optimizer kernels come after its 0 µs step annotation); 10 norm tests
        # per round, 59 kernels and 1 memset a round with the unannotated work between rounds
        # (the first round adds 3 memsets; was 81.6% and 23 kernels in the last round).
        (
            "new_hta_gp100_gpu_user_annotation.json.gz",
            "Optimizer.zero_grad#SGD.zero_grad",
            99.7,
            [26, 26, 26, 26, 26],
        ),
        ("new_tl_mi300x_norm_profile_memory.json.gz", "BatchNorm affine=True", 100.0, [50, 59, 59]),
    ],
)
def test_corpus_regions_that_miss_the_work(
    name: str, starter: str, coverage: float, kernels: list[int]
) -> None:
    path = CORPUS / name
    skip_without(path)
    trace = traceanalyze.load(path)
    assert trace.iteration_source.startswith("annotation:")  # what the linker found
    result = summary(trace)
    assert result["iteration_source"] == f"sequence:{starter}"
    assert result["iteration_coverage_pct"] == pytest.approx(coverage, abs=0.1)
    assert step_rows(trace)["kernels"].to_list() == kernels


def test_a_lone_capture_step_is_kept_and_says_so(tmp_path: Path) -> None:
    # tl_sglang_graph_capture_bs32_mi300x: its one step captures graphs; nothing else to count.
    trace = load(tmp_path, [*capture_step(0), kernel("fill_k", 60, 2, 1)])
    assert rows(trace) == [
        (1, "capture", "CUDA graph capture step: one-off capture and instantiation, not a "
         "replay; kept: no other iteration to count", True, 1, 0, 2.0),
    ]  # fmt: skip
    assert summary(trace)["iterations_left_out"] == 0


def test_no_verdict_when_busy_time_is_not_the_medians_work(tmp_path: Path) -> None:
    # h200_cold_new_shape's compiled_naive had 46 ms of GPU busy time per iteration (autotuning
    # each new shape) against a 1.5 ms steady median: was "GPU busy time 3095%", GPU-bound.
    events = []
    for step in range(3):
        t0 = step * 30
        events += [
            annotation(f"ProfilerStep#{step}", t0, 21),
            call("cudaLaunchKernel", t0, 1, step + 1),
            kernel("k", t0 + 1, 20, step + 1),
        ]
    model = step_model(load(tmp_path, events))
    judged = wall_verdict(model, 0.010)  # 10 us measured for 20 us of GPU work a step
    assert (judged["bound"], judged["gpu_busy_pct_of_wall"]) == ("cannot tell", None)
    assert judged["bound_note"].startswith("the GPU's time per step (20.0 µs) exceeds")
    # A few percent over an unprofiled median is the profiler's own cost: capped, judged.
    close = wall_verdict(model, 0.0195)
    assert (close["bound"], close["gpu_busy_pct_of_wall"]) == ("GPU-bound", 100.0)


def test_iteration_source_is_an_enum_whose_json_is_its_text(tmp_path: Path) -> None:
    events = [*sequence(0, 1), *sequence(100, 3), *sequence(200, 5)]
    linked = load(tmp_path, events)  # the linker's repeated annotation, then the sequence
    assert (linked.iteration_source.kind, linked.iteration_source.region) == (
        IterationSource.ANNOTATION,
        "step",
    )
    figures = summary(linked)
    assert figures.iteration_source.kind is IterationSource.SEQUENCE
    assert isinstance(figures.iteration_source, IterationSource)
    path = write_trace(tmp_path, events, name="sequence.json")
    for command in ("summary", "info"):
        result = CliRunner().invoke(main, [command, str(path), "--format", "json", "--no-cache"])
        record = json.loads(result.stdout)
        record = record[0] if isinstance(record, list) else record
        assert record["iteration_source"] == "sequence:zero_grad"
    naive = summary(traceanalyze.load(SAMPLES / "h200_default" / "naive.json.gz"))
    assert naive.iteration_source is IterationSource.PROFILER_STEP
    assert IterationSource("whole trace") is IterationSource.WHOLE_TRACE


def forward_region(name: str, start: float, dur: float, correlation: int) -> list[Event]:
    """A benchmark's region (``name``) whose conv2d launches one 10 µs kernel."""
    return [
        annotation(name, start, dur),
        op("aten::conv2d", start + 1, 5),
        call("cudaLaunchKernel", start + 2, 2, correlation),
        kernel("conv_k", start + 10, 10, correlation),
    ]


# hta_alexnet_a100 reduced: no step annotation; setup work, then a warm-up and a measured
# forward nested in one top-level region (which is no step: it does not repeat).
BENCHMARK = [
    annotation("[param|cuda]", 0, 1000),
    op("aten::to", 5, 20),
    call("cudaMemcpyAsync", 6, 2, 1),
    kernel("Memcpy HtoD", 8, 50, 1, cat="gpu_memcpy"),
    *forward_region("model|warmup|forward", 100, 400, 2),
    *forward_region("model|measure|forward", 600, 50, 3),
]


def test_repeated_regions_are_the_steps_of_a_trace_without_step_annotations(
    tmp_path: Path,
) -> None:
    trace = load(tmp_path, BENCHMARK)
    assert trace.iteration_source == "whole trace"  # what the linker found
    result = summary(trace)
    assert result["iteration_source"] == ("region:model|warmup|forward / model|measure|forward")
    assert step_rows(trace).select(*ROWS, "wall_us").rows() == [
        (
            0,
            "warm-up region",
            "a repeated region named as a warm-up: one-off work (lazy init, allocator growth, "
            "first calls), not a steady step",
            False,
            1,
            0,
            10.0,
            400.0,
        ),
        (1, "region", None, True, 1, 0, 10.0, 50.0),
    ]
    # The measured forward alone: its window is its CPU span, 10 of its 50 µs GPU busy.
    assert (result["iterations"], result["wall_us_per_iter"]) == (1, 50.0)
    assert result["gpu_busy_us_per_iter"] == 10.0
    # The setup copy (50 of the 70 µs of GPU activity) is in no iteration.
    assert result["iteration_coverage_pct"] == pytest.approx(20 / 70 * 100)
    assert "GPU work launched before the first region is setup" in result["iteration_note"]


def test_regions_that_miss_the_work_after_them_leave_the_whole_trace(tmp_path: Path) -> None:
    # After the regions, unannotated work holds most of the GPU time: no loop of regions.
    events = [
        *BENCHMARK,
        op("aten::mm", 700, 10),
        call("cudaLaunchKernel", 701, 2, 4),
        kernel("gemm_k", 710, 100, 4),
    ]
    result = summary(load(tmp_path, events))
    assert result["iteration_source"] == "whole trace"
    assert result["iterations"] == 1


def test_hta_alexnet_steps_are_the_forwards_cold_finds() -> None:
    path = PUBLIC / "hta_alexnet_a100.json.gz"
    skip_without(path)
    trace = traceanalyze.load(path)
    result = summary(trace)
    assert result["iteration_source"].startswith("region:[param|pytorch.model.alex_net")
    # Recomputed from the raw JSON: the measure|forward annotation spans 79,678 µs, and the
    # GPU runs 5,282 µs of it; the warm-up (12,757,093 µs) is left out.
    assert (result["iterations"], result["iterations_left_out"]) == (1, 1)
    assert result["wall_us_per_iter"] == 79_678.0
    assert result["gpu_busy_us_per_iter"] == 5_282.0
    kinds = step_rows(trace).select("kind", "wall_us").rows()
    assert kinds == [("warm-up region", 12_757_093.0), ("region", 79_678.0)]
    # One rule: cold's calls are the same regions.
    calls = find_calls(trace).spans
    assert calls["ts_ns"].to_list() == choice_of(trace).regions.iterations["ts_ns"].to_list()


def test_a_step_paced_by_its_gpu_keeps_its_leading_wait(tmp_path: Path) -> None:
    # The step's kernel (50 µs) spans longer than the step on the CPU (5 µs): the window ends at
    # the kernel, and starts at the step's CPU start, since the GPU ran nothing before (the
    # 10 µs before the kernel, a data load's wait in a real step, are the step's).
    result = step_rows(load(tmp_path, step(1, 0, 5, 1, 50))).select("wall_us", "gpu_idle_us")
    assert result.rows() == [(60.0, 10.0)]


def test_a_step_paced_by_its_gpu_starts_after_earlier_gpu_work(tmp_path: Path) -> None:
    # Work launched before the profiler (no launch recorded) runs until 8 µs: the window starts
    # there, not at the CPU start (0), so the GPU's time on earlier work is no step's.
    events = [*step(1, 0, 5, 1, 50), kernel("earlier_k", -20, 28, 99)]
    result = step_rows(load(tmp_path, events)).select("wall_us", "gpu_busy_us", "carried_in_us")
    assert result.rows() == [(52.0, 50.0, 0.0)]
