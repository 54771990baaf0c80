"""`stacks`, diff-test style: Python frames (with_stack) around ops, and the exact rows.

Times are microseconds (tests/micro.py). Two profiler steps, identical; in each, on the main
thread (pid 1, tid 1) under ``train.py(10): main``:

- ``train.py(5): step`` calls ``model.py(20): forward``, which calls torch's ``_call_impl``,
  which runs ``aten::mm`` (a 10 µs GEMM) and ``aten::copy_`` (a 4 µs host-to-device copy);
- ``step`` calls ``typing.py(300): cast`` (standard library) around ``aten::add`` (2 µs) and a
  built-in around ``aten::item`` (no GPU work);
- autograd's thread (tid 2, no Python frames) runs ``aten::mm_backward`` (6 µs) while ``step``
  waits on the main thread;
- ``main`` itself runs ``aten::zeros`` (1 µs);
- another process (pid 9, no Python frames at all) runs ``aten::relu`` (3 µs).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

import traceanalyze
from tests.conftest import CORPUS_TRACES, SHARED, skip_without
from tests.micro import annotation, call, expected, kernel, op, span, write_trace
from traceanalyze.analyses.iterations import counted
from traceanalyze.analyses.stacks import NO_FRAME, NO_STACKS, stacks, user_frames
from traceanalyze.analyses.step.model import mean_per_iter
from traceanalyze.cli import main
from traceanalyze.load import fast
from traceanalyze.load.parse import parse_file
from traceanalyze.schema import PYTHON_SCHEMA

Event = dict[str, Any]
ROWS: dict[str, pl.DataType] = {
    "frame": pl.String(),
    "gpu_us_per_iter": pl.Float64(),
    "cpu_us_per_iter": pl.Float64(),
    "kernels_per_iter": pl.Float64(),
    "share_of_gpu_activity_pct": pl.Float64(),
}


def frame(name: str, ts: float, dur: float, python_id: int, parent: int | None) -> Event:
    return span(
        "python_function",
        name,
        ts,
        dur,
        **{"Python parent id": parent, "Python id": python_id, "Ev Idx": python_id},
    )


def launch(
    name: str, ts: float, dur: float, activity: str, gpu_dur: float, corr: int, **kw: Any
) -> list[Event]:
    """An op launching one GPU activity (``kw``: the op's tid/pid, the activity's cat/bytes)."""
    where = {k: kw.pop(k) for k in ("tid", "pid") if k in kw}
    return [
        op(name, ts, dur, **where),
        call("cudaLaunchKernel", ts + 0.5, 0.5, corr, **where),
        kernel(activity, ts + 1, gpu_dur, corr, **kw),
    ]


def one_step(offset: float, first_id: int, corr: int) -> list[Event]:
    o = offset
    return [
        annotation(f"ProfilerStep#{corr // 10}", o, 100),
        frame("train.py(5): step", o + 1, 89, first_id, 1),
        frame("model.py(20): forward", o + 2, 38, first_id + 1, first_id),
        frame("torch/nn/modules/module.py(1775): _call_impl", o + 3, 36, first_id + 2, 0),
        *launch("aten::mm", o + 4, 10, "sm90_xmma_gemm_bf16bf16", 10, corr),
        *launch(
            "aten::copy_",
            o + 15,
            10,
            "Memcpy HtoD (Pageable -> Device)",
            4,
            corr + 1,
            cat="gpu_memcpy",
            bytes=1024,
        ),
        frame("typing.py(300): cast", o + 41, 4, first_id + 3, first_id),
        *launch("aten::add", o + 42, 2, "vectorized_elementwise_kernel", 2, corr + 2),
        frame("<built-in method item of Tensor object at 0x7f>", o + 50, 10, first_id + 4, 0),
        op("aten::item", o + 51, 8),
        *launch("aten::mm_backward", o + 60, 20, "sm90_xmma_gemm_bf16bf16", 6, corr + 3, tid=2),
        *launch("aten::zeros", o + 95, 2, "FillFunctor", 1, corr + 4),
        *launch("aten::relu", o + 5, 5, "vectorized_elementwise_kernel", 3, corr + 5, pid=9),
    ]


def two_steps() -> list[Event]:
    return [
        frame("train.py(10): main", 0, 200, 1, None),
        *one_step(0, 10, 10),
        *one_step(100, 20, 20),
    ]


def load(folder: Path, events: list[Event]) -> traceanalyze.Trace:
    return traceanalyze.load(write_trace(folder, events), cache=False)


def test_python_frame_is_the_same_from_both_decoders(tmp_path: Path) -> None:
    path = write_trace(tmp_path, two_steps())
    reference = parse_file(path, native=False)
    if fast.AVAILABLE:
        assert_frame_equal(parse_file(path).python, reference.python)
    want = expected(
        PYTHON_SCHEMA,
        "rank name pid tid ts_ns dur_ns python_id python_parent_id",
        (0, "train.py(10): main", 1, 1, 0, 200_000, 1, None),
        (0, "train.py(5): step", 1, 1, 1_000, 89_000, 10, 1),
        (0, "model.py(20): forward", 1, 1, 2_000, 38_000, 11, 10),
    )
    assert_frame_equal(reference.python.head(3), want)
    assert reference.python.height == 11
    assert reference.meta[0].event_counts["python_function"] == 11


def test_rows_per_user_frame(tmp_path: Path) -> None:
    result = stacks(load(tmp_path, two_steps()))
    total = 14 + 8 + 3 + 1
    want = expected(
        ROWS,
        " ".join(ROWS),
        ("model.py:20 forward", 14.0, 20.0, 1.0, 14 * 100 / total),
        # add (under the standard library's frame) and the backward thread's mm_backward.
        ("train.py:5 step", 8.0, 30.0, 2.0, 8 * 100 / total),
        (NO_FRAME, 3.0, 5.0, 1.0, 3 * 100 / total),
        ("train.py:10 main", 1.0, 2.0, 1.0, 1 * 100 / total),
    )
    assert_frame_equal(result.rows, want)
    assert result.rows["share_of_gpu_activity_pct"].sum() == pytest.approx(100)
    assert result.python_frames == 11


def test_full_stack_names_the_user_frames_outermost_first(tmp_path: Path) -> None:
    rows = stacks(load(tmp_path, two_steps()), full_stack=True).rows
    assert rows["frame"].to_list() == [
        "train.py:10 main -> train.py:5 step -> model.py:20 forward",
        "train.py:10 main -> train.py:5 step",
        NO_FRAME,
        "train.py:10 main",
    ]


def test_copies_by_line_and_the_memcpy_category(tmp_path: Path) -> None:
    trace = load(tmp_path, two_steps())
    result = stacks(trace)
    assert result.copies.to_dicts() == [
        {
            "frame": "model.py:20 forward",
            "chain": "aten::copy_ -> Memcpy HtoD (Pageable -> Device)",
            "count_per_iter": 1.0,
            "us_per_iter": 4.0,
            "bytes_per_iter": 1024.0,
        }
    ]
    copies = stacks(trace, category="memcpy").rows
    assert copies.filter(pl.col("gpu_us_per_iter") > 0).select(
        "frame", "gpu_us_per_iter", "kernels_per_iter", "share_of_gpu_activity_pct"
    ).rows() == [("model.py:20 forward", 4.0, 0.0, 100.0)]


def test_exclude_leaves_out_a_package(tmp_path: Path) -> None:
    rows = stacks(load(tmp_path, two_steps()), exclude=("model.py",)).rows
    assert rows.filter(pl.col("frame") == "train.py:5 step")["gpu_us_per_iter"].item() == 22.0


@pytest.mark.parametrize(
    ("name", "user"),
    [
        ("train.py(1): <module>", True),
        ("my_model/typing_utils.py(3): f", True),  # not the standard library's typing
        ("/tmp/ipykernel_2566/1623915622.py(18): <cell line: 0>", True),
        ("threading.py(1012): run", False),
        ("concurrent/futures/thread.py(58): run", False),
        ("/usr/lib/python3.10/threading.py(953): run", False),
        ("/opt/venv/lib/python3.11/site-packages/foo/bar.py(2): g", False),
        ("torch/nn/modules/module.py(1775): _call_impl", False),
        ("<frozen os>(717): __getitem__", False),
        ("<built-in method item of Tensor object at 0x7f>", False),
        ("nn.Module: Linear_0", False),
        ("ipykernel/kernelbase.py(510): dispatch_queue", False),
    ],
)
def test_which_frames_are_the_users(name: str, user: bool) -> None:
    python = pl.DataFrame(
        {"rank": [0], "name": [name], "pid": [1], "tid": [1], "ts_ns": [0], "dur_ns": [1]}
    )
    assert user_frames(python).height == int(user)


def test_a_trace_without_stacks_says_how_to_record_them(tmp_path: Path) -> None:
    events = [e for e in two_steps() if e["cat"] != "python_function"]
    path = write_trace(tmp_path, events)
    assert stacks(traceanalyze.load(path, cache=False)).empty
    result = CliRunner().invoke(main, ["stacks", str(path), "--format", "md"])
    # stdout: the hand-made kernels overlap on one stream, which stderr's audit line says
    assert (result.exit_code, result.stdout) == (0, NO_STACKS + "\n")
    result = CliRunner().invoke(main, ["stacks", str(path), "--format", "json"])
    assert (result.exit_code, json.loads(result.stdout)) == (0, [])


def test_command_json_rows(tmp_path: Path) -> None:
    path = write_trace(tmp_path, two_steps())
    result = CliRunner().invoke(main, ["stacks", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert list(rows[0]) == list(ROWS)
    assert rows[0]["frame"] == "model.py:20 forward"
    markdown = CliRunner().invoke(main, ["stacks", str(path), "--format", "md"]).stdout
    assert "## Memory copies and sets by line" in markdown


BENCH = SHARED / "bench" / "h200_train_175mb.json.gz"
# Real traces recorded with with_stack, and the user frame with the most GPU activity.
WITH_STACK = [
    (BENCH, "capture_ref.py:83 step"),
    (
        CORPUS_TRACES / "new_tl_mi300x_resnet_actckpt_train_rank0.json.gz",
        "train_ddp.py:82 train_step",
    ),
    (CORPUS_TRACES / "kernelforge_gh200_transformer_stack.json.gz", "example.py:36 forward"),
    (
        CORPUS_TRACES / "kernelforge_t4_small_stack.json.gz",
        "/tmp/ipykernel_2566/1623915622.py:18 <cell line: 0>",
    ),
    (
        CORPUS_TRACES / "tl_b200_eager.json.gz",
        "vllm/model_executor/layers/fused_moe/layer.py:1696 forward_native",
    ),
]


@pytest.mark.parametrize(("path", "top"), WITH_STACK, ids=[p.name for p, _ in WITH_STACK])
def test_real_traces_with_stacks(path: Path, top: str) -> None:
    skip_without(path)
    trace = traceanalyze.load(path)
    result = stacks(trace)
    assert result.python_frames > 0
    assert result.rows["frame"][0] == top
    assert result.rows["share_of_gpu_activity_pct"].sum() == pytest.approx(100)
    # The rows split the summary's figures: nothing is lost or counted twice.
    counted_trace = counted(trace)
    for column, figure in (
        ("gpu_us_per_iter", "gpu_activity_us"),
        ("cpu_us_per_iter", "cpu_op_us"),
        ("kernels_per_iter", "kernels"),
    ):
        whole = mean_per_iter(counted_trace, figure)
        assert result.rows[column].sum() == pytest.approx(whole, rel=1e-9), column
