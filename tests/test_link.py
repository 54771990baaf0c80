"""Linking, diff-test style: a few events in, the exact call tree / GPU frame / iterations out."""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal, assert_series_equal

import traceanalyze
from tests.micro import actual, annotation, call, expected, kernel, load, op, span, write_trace
from traceanalyze import link
from traceanalyze.schema import CPU_SCHEMA, GPU_SCHEMA, ITERATION_SCHEMA
from traceanalyze.trace import IterationSource

CPU_TREE = {**CPU_SCHEMA, "parent": pl.String()}


def with_parent_names(cpu: pl.DataFrame) -> pl.DataFrame:
    """The CPU frame with the parent's name beside ``parent_id`` (ids are internal numbering)."""
    names = cpu.select(pl.col("op_id").alias("parent_id"), pl.col("name").alias("parent"))
    return cpu.join(names, on="parent_id", how="left")


def test_call_tree_nesting(tmp_path: Path) -> None:
    trace = load(
        tmp_path,
        [
            annotation("region", 0, 100),
            op("aten::a", 10, 30),
            op("aten::a_child", 10, 10),  # same start as its parent: the longer one encloses
            op("aten::b", 40, 30),  # starts as aten::a ends: a sibling, not a child
            op("aten::mark", 50, 0),  # zero duration inside aten::b
            op("aten::after_b", 70, 0),  # zero duration exactly at aten::b's end: a sibling
            op("aten::other_thread", 20, 10, tid=2),
        ],
    )
    want = expected(
        CPU_TREE,
        "name tid ts_ns dur_ns depth parent",
        ("region", 1, 0, 100_000, 0, None),
        ("aten::a", 1, 10_000, 30_000, 1, "region"),
        ("aten::a_child", 1, 10_000, 10_000, 2, "aten::a"),
        ("aten::b", 1, 40_000, 30_000, 1, "region"),
        ("aten::mark", 1, 50_000, 0, 2, "aten::b"),
        ("aten::after_b", 1, 70_000, 0, 1, "region"),
        ("aten::other_thread", 2, 20_000, 10_000, 0, None),
    )
    assert_frame_equal(actual(with_parent_names(trace.cpu), want, "tid", "ts_ns", "depth"), want)


def test_equal_spans_nest_annotation_op_call(tmp_path: Path) -> None:
    # One instant, one duration: the annotation encloses the op, which encloses the call.
    trace = load(
        tmp_path,
        [
            call("cudaLaunchKernel", 10, 20, 1),
            op("aten::x", 10, 20),
            annotation("region", 10, 20),
            kernel("k", 40, 5, 1),
        ],
    )
    want = expected(
        CPU_TREE,
        "cat name depth parent",
        ("user_annotation", "region", 0, None),
        ("cpu_op", "aten::x", 1, "region"),
        ("cuda_runtime", "cudaLaunchKernel", 2, "aten::x"),
    )
    assert_frame_equal(actual(with_parent_names(trace.cpu), want, "depth"), want)
    want = expected(GPU_SCHEMA, "name op_name annotation", ("k", "aten::x", "region"))
    assert_frame_equal(actual(trace.gpu, want), want)


def test_kernel_links_to_call_innermost_op_and_outermost_annotation(tmp_path: Path) -> None:
    trace = load(
        tmp_path,
        [
            annotation("ProfilerStep#3", 0, 1000),
            annotation("forward", 10, 500),
            annotation("attention", 20, 200),
            op("aten::linear", 30, 100),
            op("aten::mm", 40, 50),
            call("cudaLaunchKernel", 50, 10, 7),
            call("cudaLaunchKernel", 400, 10, 9),  # under an annotation but no op
            op("aten::copy_", 600, 50),
            call("cudaMemcpyAsync", 610, 20, 8),
            kernel("gemm", 300, 20, 7),
            kernel("bare", 450, 5, 9),
            kernel("Memcpy HtoD (Pinned -> Device)", 700, 5, 8, cat="gpu_memcpy", bytes=4096),
        ],
    )
    want = expected(
        GPU_SCHEMA,
        "name kind correlation linked launch_api launch_ts_ns launch_dur_ns launch_tid "
        "op_name annotation iteration bytes",
        ("gemm", "kernel", 7, True, "cudaLaunchKernel", 50_000, 10_000, 1,
         "aten::mm", "forward", 3, None),
        ("bare", "kernel", 9, True, "cudaLaunchKernel", 400_000, 10_000, 1,
         None, "forward", 3, None),
        ("Memcpy HtoD (Pinned -> Device)", "memcpy", 8, True, "cudaMemcpyAsync", 610_000, 20_000, 1,
         "aten::copy_", None, 3, 4096),
    )  # fmt: skip
    assert_frame_equal(actual(trace.gpu, want, "launch_ts_ns"), want)
    # op_id points at the launching op's row in the CPU frame.
    launching = trace.gpu.join(trace.cpu, on="op_id", suffix="_cpu").select("name", "name_cpu")
    assert sorted(launching.rows()) == [
        ("Memcpy HtoD (Pinned -> Device)", "aten::copy_"),
        ("gemm", "aten::mm"),
    ]


def test_kernel_launched_from_backward_thread(tmp_path: Path) -> None:
    # The autograd thread has no annotation of its own; the main thread's is not its region.
    trace = load(
        tmp_path,
        [
            annotation("ProfilerStep#1", 0, 500),
            annotation("## backward ##", 100, 300),
            op("autograd::engine::evaluate_function: MmBackward0", 150, 100, tid=2),
            op("MmBackward0", 151, 90, tid=2),
            op("aten::mm", 160, 50, tid=2),
            call("cudaLaunchKernel", 170, 5, 9, tid=2),
            kernel("gemm_bwd", 400, 30, 9),
        ],
    )
    want = expected(
        GPU_SCHEMA,
        "name linked launch_tid op_name annotation iteration",
        ("gemm_bwd", True, 2, "aten::mm", None, 1),
    )
    assert_frame_equal(actual(trace.gpu, want), want)
    want = expected(
        CPU_TREE,
        "tid name depth parent iteration",
        (1, "ProfilerStep#1", 0, None, 1),
        (1, "## backward ##", 1, "ProfilerStep#1", 1),
        (2, "autograd::engine::evaluate_function: MmBackward0", 0, None, 1),
        (2, "MmBackward0", 1, "autograd::engine::evaluate_function: MmBackward0", 1),
        (2, "aten::mm", 2, "MmBackward0", 1),
        (2, "cudaLaunchKernel", 3, "aten::mm", 1),
    )
    assert_frame_equal(actual(with_parent_names(trace.cpu), want, "tid", "depth"), want)


def test_kernel_without_runtime_call_stays_unlinked(tmp_path: Path) -> None:
    trace = load(
        tmp_path,
        [
            annotation("ProfilerStep#2", 100, 100),
            op("aten::relu", 110, 20),
            call("cudaLaunchKernel", 115, 5, 21),
            kernel("early", 50, 10, 20),  # launched before the profiling window opened
            kernel("relu", 130, 5, 21),
        ],
    )
    want = expected(
        GPU_SCHEMA,
        "name linked launch_api launch_ts_ns launch_tid op_name annotation iteration",
        ("early", False, None, None, None, None, None, None),
        ("relu", True, "cudaLaunchKernel", 115_000, 1, "aten::relu", None, 2),
    )
    assert_frame_equal(actual(trace.gpu, want, "name"), want)


def test_iterations_from_profiler_steps(tmp_path: Path) -> None:
    trace = load(
        tmp_path,
        [
            annotation("ProfilerStep#5", 0, 100),
            annotation("ProfilerStep#6", 100, 100),
            op("aten::add", 10, 10),
            call("cudaLaunchKernel", 12, 2, 1),
            op("aten::add", 100, 10),  # starts as step 5 ends: step 6
            call("cudaLaunchKernel", 102, 2, 2),
            op("aten::sync", 250, 10),  # after the last step
            call("cudaLaunchKernel", 252, 2, 3),
            kernel("k5", 20, 5, 1),
            kernel("k6", 104, 5, 2),
            kernel("k_after", 260, 5, 3),
        ],
    )
    assert trace.iteration_source == "ProfilerStep"
    want = expected(
        ITERATION_SCHEMA,
        "rank iteration name ts_ns dur_ns",
        (0, 5, "ProfilerStep#5", 0, 100_000),
        (0, 6, "ProfilerStep#6", 100_000, 100_000),
    )
    assert_frame_equal(trace.iterations, want)
    want = expected(GPU_SCHEMA, "name iteration", ("k5", 5), ("k6", 6), ("k_after", None))
    assert_frame_equal(actual(trace.gpu, want, "ts_ns"), want)
    want = expected(
        CPU_SCHEMA,
        "name ts_ns iteration",
        ("ProfilerStep#5", 0, 5),
        ("aten::add", 10_000, 5),
        ("cudaLaunchKernel", 12_000, 5),
        ("ProfilerStep#6", 100_000, 6),
        ("aten::add", 100_000, 6),
        ("cudaLaunchKernel", 102_000, 6),
        ("aten::sync", 250_000, None),
        ("cudaLaunchKernel", 252_000, None),
    )
    assert_frame_equal(actual(trace.cpu, want, "ts_ns"), want)  # ties: longer first


def test_iterations_from_repeated_root_annotation(tmp_path: Path) -> None:
    trace = load(
        tmp_path,
        [
            annotation("setup", 0, 50),
            annotation("train_step", 100, 100),
            annotation("inner", 110, 10),  # nested: not a candidate, however often it repeats
            annotation("train_step", 200, 100),
            annotation("inner", 210, 10),
            annotation("train_step", 300, 100),
            annotation("inner", 310, 10),
            annotation("eval", 500, 10),  # repeated too, but less often
            annotation("eval", 520, 10),
            op("aten::mm", 230, 20),
            call("cudaLaunchKernel", 235, 5, 1),
            kernel("gemm", 260, 10, 1),
        ],
    )
    assert trace.iteration_source == "annotation:train_step"
    want = expected(
        ITERATION_SCHEMA,
        "rank iteration name ts_ns dur_ns",
        (0, 0, "train_step", 100_000, 100_000),
        (0, 1, "train_step", 200_000, 100_000),
        (0, 2, "train_step", 300_000, 100_000),
    )
    assert_frame_equal(trace.iterations, want)
    want = expected(
        GPU_SCHEMA, "name op_name annotation iteration", ("gemm", "aten::mm", "train_step", 1)
    )
    assert_frame_equal(actual(trace.gpu, want), want)


def test_whole_trace_is_one_iteration_without_steps_or_repeats(tmp_path: Path) -> None:
    trace = load(
        tmp_path,
        [
            annotation("once", 8, 30),
            op("aten::mm", 10, 20),
            call("cudaLaunchKernel", 15, 5, 1),
            kernel("gemm", 40, 10, 1),
            kernel("early", 5, 2, 99),
        ],
    )
    assert trace.iteration_source == "whole trace"
    want = expected(
        ITERATION_SCHEMA, "rank iteration name ts_ns dur_ns", (0, 0, "whole trace", 5_000, 45_000)
    )
    assert_frame_equal(trace.iterations, want)
    want = expected(
        GPU_SCHEMA,
        "name linked annotation iteration",
        ("early", False, None, 0),
        ("gemm", True, "once", 0),
    )
    assert_frame_equal(actual(trace.gpu, want, "ts_ns"), want)
    assert trace.cpu["iteration"].to_list() == [0, 0, 0]


def test_driver_launch_cu_launch_kernel_ex(tmp_path: Path) -> None:
    # cuDNN's SDPA kernels are launched through the driver API, not cudaLaunchKernel.
    trace = load(
        tmp_path,
        [
            op("aten::_cudnn_attention_forward", 10, 50),
            call("cudaMemsetAsync", 15, 2, 30),
            call("cuLaunchKernelEx", 20, 5, 31, cat="cuda_driver"),
            kernel("Memset (Device)", 65, 1, 30, cat="gpu_memset"),
            kernel("cudnn_generated_fort_native_sdpa_sm90_flash_fprop", 70, 30, 31),
        ],
    )
    want = expected(
        GPU_SCHEMA,
        "kind linked launch_api launch_ts_ns op_name",
        ("memset", True, "cudaMemsetAsync", 15_000, "aten::_cudnn_attention_forward"),
        ("kernel", True, "cuLaunchKernelEx", 20_000, "aten::_cudnn_attention_forward"),
    )
    assert_frame_equal(actual(trace.gpu, want, "launch_ts_ns"), want)
    want = expected(
        CPU_TREE,
        "cat name depth parent correlation",
        ("cpu_op", "aten::_cudnn_attention_forward", 0, None, None),
        ("cuda_runtime", "cudaMemsetAsync", 1, "aten::_cudnn_attention_forward", 30),
        ("cuda_driver", "cuLaunchKernelEx", 1, "aten::_cudnn_attention_forward", 31),
    )
    assert_frame_equal(actual(with_parent_names(trace.cpu), want, "depth", "correlation"), want)


def test_profiler_step_recorded_as_an_operator(tmp_path: Path) -> None:
    # Before user_annotation existed (torch <= 1.10), ProfilerStep#N was an "Operator" event:
    # reduced from the PyTorch TensorBoard plugin's legacy-format test trace.
    legacy = [
        span("Operator", "ProfilerStep#1", 50, 400, pid=13721, tid="123"),
        span("Operator", "aten::to", 200, 60, pid=13721, tid="123"),
        span("Runtime", "cudaMemcpyAsync", 210, 20, pid=13721, tid="123", correlation=334),
        span("Runtime", "cudaLaunchKernel", 300, 5, pid=13721, tid="123", correlation=40348),
        span("Memcpy", "Memcpy HtoD (Pageable -> Device)", 405, 10, pid=0, tid="stream 7",
             stream=7, correlation=334),
        span("Kernel", "cunn_ClassNLLCriterion_updateGradInput_kernel", 430, 15, pid=0,
             tid="stream 7", correlation=40348, device=0),
    ]  # fmt: skip
    trace = traceanalyze.load(write_trace(tmp_path, legacy, devices=None), cache=False)
    assert trace.iteration_source == "ProfilerStep"
    want = expected(
        ITERATION_SCHEMA,
        "rank iteration name ts_ns dur_ns",
        (0, 1, "ProfilerStep#1", 50_000, 400_000),
    )
    assert_frame_equal(trace.iterations, want)
    want = expected(
        GPU_SCHEMA,
        "kind launch_api op_name annotation iteration",
        ("memcpy", "cudaMemcpyAsync", "aten::to", None, 1),
        ("kernel", "cudaLaunchKernel", None, None, 1),  # the step is not the launching op
    )
    assert_frame_equal(actual(trace.gpu, want, "launch_ts_ns"), want)


def test_first_call_of_a_correlation_and_a_step_like_op_name(tmp_path: Path) -> None:
    # Two calls share correlation 1 (written later one first): the kernel takes the first in
    # call order. An op named like a step but not ProfilerStep#<digits> is an ordinary op, so
    # it launches; linking tests the prefix first and the full pattern only on what passes.
    trace = load(
        tmp_path,
        [
            op("aten::later", 50, 20),
            call("cudaLaunchKernel", 55, 5, 1),
            op("ProfilerStep#x", 0, 40),
            call("cudaLaunchKernel", 10, 5, 1),
            kernel("k", 200, 5, 1),
        ],
    )
    assert trace.iteration_source == "whole trace"
    want = expected(GPU_SCHEMA, "name launch_ts_ns op_name", ("k", 10_000, "ProfilerStep#x"))
    assert_frame_equal(actual(trace.gpu, want), want)


@pytest.mark.parametrize("seed", range(12))
def test_the_iteration_of_a_time_is_the_same_in_numpy_and_polars(seed: int) -> None:
    # _iteration_of (NumPy) against _iteration_by_polars, which defines it: times before,
    # between, at the edges of and after the spans, and null times.
    rng = random.Random(seed)
    starts = sorted(rng.sample(range(0, 1000, 10), rng.randint(1, 8)))
    spans = pl.DataFrame(
        {
            "ts_ns": starts,
            "iteration": [rng.randint(0, 50) for _ in starts],
            "end": [start + rng.choice([0, 5, 10, 40]) for start in starts],
        }
    )
    iterations = spans.select("ts_ns", "iteration", dur_ns=pl.col("end") - pl.col("ts_ns"))
    times = [None if rng.random() < 0.1 else rng.randint(-20, 1100) for _ in range(300)]
    times += [*starts, *spans["end"].to_list()]
    ts_ns = pl.Series("ts_ns", times, pl.Int64)
    source = IterationSource.PROFILER_STEP
    assert_series_equal(
        link._iteration_of(ts_ns, iterations, source), link._iteration_by_polars(ts_ns, spans)
    )


def test_an_all_null_column_keeps_its_place_and_type_in_call_order(tmp_path: Path) -> None:
    # with_call_tree leaves columns without a value out of its copies and puts them back
    cpu = load(tmp_path, [op("aten::b", 20, 5), op("aten::a", 10, 30)]).cpu
    unordered = cpu.select(pl.exclude(_LINKED)).reverse()
    tree = link.with_call_tree(unordered)
    assert [c for c in tree.columns if c in unordered.columns] == unordered.columns
    assert tree.select(unordered.columns).schema == unordered.schema
    assert tree["comm_name"].null_count() == 2
    assert tree["name"].to_list() == ["aten::a", "aten::b"]


_LINKED = ["op_id", "parent_id", "depth", "iteration"]


def test_a_step_number_beyond_64_bits_is_no_step(tmp_path: Path) -> None:
    # ProfilerStep#<20 digits> made the step's number cast fail with a Polars traceback
    trace = load(
        tmp_path,
        [annotation("ProfilerStep#99999999999999999999", 0, 10), op("aten::mm", 1, 1)],
    )
    assert trace.iteration_source is IterationSource.WHOLE_TRACE
    assert trace.cpu["iteration"].to_list() == [0, 0]


@pytest.mark.parametrize(
    ("ranks", "one"),
    [
        ([[3, 3], [3]], True),
        ([[3, 3], []], True),
        ([[], []], True),  # nothing to tell apart: one rank, as a concatenation of them said
        ([[3, 4], [3]], False),
        ([[3, 3], [4]], False),
        ([[3, None], [3]], False),
        ([[], [None]], False),
    ],
)
def test_one_rank_looks_at_every_row_of_every_frame(
    ranks: list[list[int | None]], one: bool
) -> None:
    frames = [pl.DataFrame({"rank": pl.Series(values, dtype=pl.Int32)}) for values in ranks]
    assert link._one_rank(*frames) is one


def test_a_category_test_is_is_in() -> None:
    cats = pl.Series("cat", ["cuda_runtime", "cpu_op", None, "cuda_driver", "cuda_runtime_x", ""])
    frame = pl.DataFrame({"cat": cats})
    for categories in (link.RUNTIME_CATS, link.STEP_CATS, ("cpu_op",)):
        assert_series_equal(
            frame.select(link._cat_is(categories)).to_series(),
            frame.select(pl.col("cat").is_in(categories)).to_series(),
            check_names=False,
        )
