"""`comms`: a collective of each kind with known sizes, exact bytes and bandwidths; both
loaders read the collective args alike; traces without args say so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

import traceanalyze
from tests.conftest import CORPUS_TRACES, PUBLIC_TRACES, skip_without
from tests.micro import annotation, call, kernel, op, span, write_trace
from tests.test_load_properties import load_all_ways
from traceanalyze.analyses.distributed.comms import (
    NO_ARGS,
    NO_CALLS,
    NO_GROUP,
    SOME_WITHOUT_BYTES,
    SOME_WITHOUT_GROUP,
    busiest_collective,
    comms,
)
from traceanalyze.cli import main
from traceanalyze.render.between.critical_path import comms_verdict

Event = dict[str, Any]


def comm_args(name: str, nelems_in: int, nelems_out: int, dtype: str, group: int) -> Event:
    return {
        "Collective name": name,
        "In msg nelems": nelems_in,
        "Out msg nelems": nelems_out,
        "dtype": dtype,
        "Group size": group,
    }


def collective(
    ts: float, correlation: int, kernel_name: str, dur: float, args: Event | None, **op_args: Any
) -> list[Event]:
    """record_param_comms (with ``op_args``) launching an NCCL kernel of ``dur`` us (with
    ``args`` on the kernel when given)."""
    return [
        span("cpu_op", "record_param_comms", ts, 10, **op_args),
        call("cudaLaunchKernel", ts + 1, 2, correlation),
        kernel(kernel_name, ts + 5, dur, correlation, **(args or {})),
    ]


# One collective of each kind, 1 MiB moved in 10 us where the size allows (algbw 104.8576
# GB/s), on 4 ranks. Args on the ops except for the all_reduce (on its kernel, as newer traces
# write them); the gather/scatter forms are given as the larger side.
EVENTS: list[Event] = [
    annotation("ProfilerStep#1", 0, 1000),
    *collective(10, 1, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 10,
                comm_args("allreduce", 262144, 262144, "Float", 4)),
    *collective(100, 2, "ncclDevKernel_AllGather_RING_LL", 10, None,
                **comm_args("_allgather_base", 131072, 524288, "BFloat16", 4)),
    *collective(200, 3, "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", 10, None,
                **comm_args("reduce_scatter_tensor_coalesced", 524288, 131072, "Half", 4)),
    *collective(300, 4, "ncclDevKernel_SendRecv", 10, None,
                **comm_args("all_to_allv", 131072, 131072, "Long", 4)),
    *collective(400, 5, "ncclDevKernel_Broadcast_RING_LL", 10, None,
                **comm_args("broadcast", 1048576, 1048576, "Byte", 4)),
    *collective(500, 6, "ncclDevKernel_Reduce_Sum_f32_RING_LL", 20, None,
                **comm_args("reduce", 262144, 262144, "Float", 4)),
    # A Gloo all_reduce on the CPU (no kernel): 4 KiB in 40 us over 2 ranks.
    span("cpu_op", "record_param_comms", 600, 40,
         **comm_args("allreduce", 1024, 1024, "Float", 2)),
    # A work handle's wait is not a collective.
    span("cpu_op", "record_param_comms", 700, 5, **comm_args("wait", 0, 0, "Byte", 1)),
]  # fmt: skip
MIB_IN_10_US = 2**20 / 10_000  # GB/s


def test_each_kind_with_known_sizes(tmp_path: Path) -> None:
    result = comms(traceanalyze.load(write_trace(tmp_path, EVENTS), cache=False))
    assert result.notes == ()
    got = result.calls.select(
        "collective", "dtype", "group_size", "bytes", "us", "algbw_gbps", "busbw_gbps", "on"
    )
    a = MIB_IN_10_US
    expected = pl.DataFrame(
        [
            ("all_reduce", "Float", 4, 2**20, 10.0, a, a * 2 * 3 / 4, "gpu"),
            ("all_gather", "BFloat16", 4, 2**20, 10.0, a, a * 3 / 4, "gpu"),
            ("reduce_scatter", "Half", 4, 2**20, 10.0, a, a * 3 / 4, "gpu"),
            ("all_to_all", "Long", 4, 2**20, 10.0, a, a * 3 / 4, "gpu"),
            ("broadcast", "Byte", 4, 2**20, 10.0, a, a, "gpu"),
            ("reduce", "Float", 4, 2**20, 20.0, a / 2, a / 2, "gpu"),
            ("all_reduce", "Float", 2, 4096, 40.0, 4096 / 40_000, 4096 / 40_000, "cpu"),
        ],
        schema=got.schema,
        orient="row",
    )
    assert_frame_equal(got, expected)
    assert result.calls["iteration"].to_list() == [1] * 7


def test_summary_per_kind_and_bucket(tmp_path: Path) -> None:
    result = comms(traceanalyze.load(write_trace(tmp_path, EVENTS), cache=False))
    # H200 (the micro traces' device): NVLink 4, 450 GB/s one way.
    row = result.by_kind.filter(pl.col("collective") == "broadcast").row(0, named=True)
    assert row["size_bucket"] == "1 - 16 MiB"
    assert row["count_per_iter"] == 1
    assert row["us_per_iter"] == 10
    assert row["busbw_gbps_median"] == pytest.approx(MIB_IN_10_US)
    assert row["busbw_pct_of_peak"] == pytest.approx(MIB_IN_10_US / 450 * 100)
    gloo = result.by_kind.filter(pl.col("on") == "cpu").row(0, named=True)
    assert (gloo["collective"], gloo["size_bucket"]) == ("all_reduce", "< 64 KiB")


def test_kernels_without_args_say_so(tmp_path: Path) -> None:
    events = [
        annotation("ProfilerStep#1", 0, 100),
        op("c10d::alltoall_base_", 5, 20),
        call("cudaLaunchKernel", 6, 2, 1),
        kernel("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", 10, 30, 1),
    ]
    result = comms(traceanalyze.load(write_trace(tmp_path, events), cache=False))
    assert result.notes == (NO_ARGS,)
    # The c10d op names the collective the SendRecv kernel carries out.
    assert result.calls.select("collective", "bytes", "us").rows() == [("all_to_all", None, 30.0)]


def test_no_collectives(tmp_path: Path) -> None:
    trace = write_trace(tmp_path, [annotation("ProfilerStep#1", 0, 100), op("aten::mm", 1, 5)])
    assert comms(traceanalyze.load(trace, cache=False)).notes == (NO_CALLS,)
    result = CliRunner().invoke(main, ["comms", str(trace)])
    assert result.exit_code == 0
    assert "no collective calls" in result.output


def test_both_loaders_read_the_args_alike(tmp_path: Path) -> None:
    # Odd but valid JSON: a number where text is expected and text where a number is.
    odd = {"Collective name": 7, "In msg nelems": "12", "dtype": "Float", "Group size": 2.5}
    path = write_trace(tmp_path, [*EVENTS, span("cpu_op", "record_param_comms", 800, 1, **odd)])
    trace = load_all_ways(path, None)
    assert isinstance(trace, traceanalyze.Trace)
    last = trace.cpu.filter(pl.col("ts_ns") == 800_000).row(0, named=True)
    assert (last["comm_name"], last["comm_in_nelems"], last["comm_group_size"]) == ("7", None, None)


def test_json_rows_have_the_stable_keys(tmp_path: Path) -> None:
    trace = write_trace(tmp_path, EVENTS)
    result = CliRunner().invoke(main, ["comms", str(trace), "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    stable = {"collective", "dtype", "group_size", "bytes", "us", "algbw_gbps", "busbw_gbps",
              "iteration"}  # fmt: skip
    assert len(rows) == 7 and all(stable <= set(row) for row in rows)


def test_public_nccl_trace() -> None:
    path = PUBLIC_TRACES / "hta_nccl_a100.json.gz"
    skip_without(path)
    result = comms(traceanalyze.load(path))
    # 15 all_reduce and 6 broadcast kernels, each with its args; A100 NVLink 3: 300 GB/s.
    counts = result.calls.group_by("collective").len().sort("collective").rows()
    assert counts == [("all_reduce", 15), ("broadcast", 6)]
    assert result.calls["bytes"].null_count() == 0
    assert result.by_kind["link_peak_gbps"].unique().to_list() == [300.0]


def shapes(dims: list[list[int]], types: list[str]) -> Event:
    return {"Input Dims": dims, "Input type": types}


# Older traces (PyTorch < 2.1, as hta_nccl_128rank_sampled): no msg nelems anywhere; the sizes
# are in the recorded shapes of the c10d op, record_param_comms or the nccl: annotation inside.
SHAPED: list[Event] = [
    annotation("ProfilerStep#1", 0, 1000),
    # all_reduce: the ops record a TensorList (no shape); nccl:all_reduce has 1 MiB of floats.
    span("cpu_op", "c10d::allreduce_", 10, 30,
         **shapes([[], [], [], []], ["TensorList", "", "", "Scalar"])),
    span("cpu_op", "record_param_comms", 11, 28, **shapes([[], []], ["TensorList", "Scalar"])),
    span("user_annotation", "nccl:all_reduce", 12, 20, **shapes([[262144]], ["float"])),
    call("cudaLaunchKernel", 13, 2, 1),
    kernel("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", 50, 10, 1),
    # all_gather launched by the c10d op itself: its output (1 MiB of bf16) is the message.
    span("cpu_op", "c10d::_allgather_base_", 100, 30,
         **shapes([[524288], [131072], []], ["c10::BFloat16", "c10::BFloat16", ""])),
    span("user_annotation", "nccl:_all_gather_base", 102, 20,
         **shapes([[131072]], ["c10::BFloat16"])),
    call("cudaLaunchKernel", 103, 2, 2),
    kernel("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", 150, 10, 2),
    # all_to_all: record_param_comms has the input (1 MiB of longs); its parent's larger side
    # is the same size, so the op nearer the collective is named.
    span("cpu_op", "c10d::alltoall_base_", 200, 30,
         **shapes([[65536], [131072], []], ["long", "long", ""])),
    span("cpu_op", "record_param_comms", 201, 28, **shapes([[131072], []], ["long", "Scalar"])),
    call("cudaLaunchKernel", 203, 2, 3),
    kernel("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", 250, 10, 3),
    # An op with args keeps them: 2 MiB from msg nelems, though its shapes say 1 MiB.
    *collective(300, 4, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 10, None,
                **comm_args("allreduce", 524288, 524288, "Float", 4),
                **shapes([[262144]], ["float"])),
]  # fmt: skip


def test_sizes_from_recorded_shapes(tmp_path: Path) -> None:
    result = comms(traceanalyze.load(write_trace(tmp_path, SHAPED), cache=False))
    got = result.calls.select("collective", "dtype", "bytes", "algbw_gbps", "bytes_source")
    a = MIB_IN_10_US
    expected = pl.DataFrame(
        [
            ("all_reduce", "Float", 2**20, a, "nccl_annotation_dims"),
            ("all_gather", "BFloat16", 2**20, a, "launch_op_dims"),
            ("all_to_all", "Long", 2**20, a, "launch_op_dims"),
            ("all_reduce", "Float", 2**21, 2 * a, "msg_nelems"),
        ],
        schema=got.schema,
        orient="row",
    )
    assert_frame_equal(got, expected)
    # The all_gather's group is its output over its input (4 inputs of 256 KiB gathered); the
    # two other calls without a group size have no bus bandwidth, and the note says why.
    groups = result.calls.select("group_size", "group_size_source").rows()
    assert groups == [(None, None), (4, "shape_ratio"), (None, None), (4, "args")]
    assert result.calls["busbw_gbps"].null_count() == 2
    assert result.notes == (f"2 of 4 {SOME_WITHOUT_GROUP}",)


def test_a_mix_of_calls_with_and_without_group_size(tmp_path: Path) -> None:
    # As tl_b200_eager: one NCCL all_gather with its args, and symmetric-memory all_reduces
    # sized from their op's shapes only; the note said nothing and the verdict blamed sizes.
    events = [
        annotation("ProfilerStep#1", 0, 1000),
        span("cpu_op", "symm_mem::multimem_all_reduce_", 10, 30, **shapes([[262144]], ["float"])),
        call("cudaLaunchKernel", 11, 2, 1),
        kernel("multimem_all_reduce_kernel", 50, 100, 1),
        *collective(300, 2, "ncclDevKernel_AllGather_RING_LL", 10, None,
                    **comm_args("_allgather_base", 131072, 524288, "BFloat16", 4)),
    ]  # fmt: skip
    result = comms(traceanalyze.load(write_trace(tmp_path, events), cache=False))
    assert result.calls.select("collective", "bytes", "group_size").rows() == [
        ("all_reduce", 2**20, None),
        ("all_gather", 2**20, 4),
    ]
    assert result.notes == (f"1 of 2 {SOME_WITHOUT_GROUP}",)
    assert "do not record their group size" in comms_verdict(result)


def test_sizes_from_shapes_alone_say_the_group_is_missing(tmp_path: Path) -> None:
    # Without the all_gather, no call shows its group: the note says so for all of them.
    events = [*SHAPED[:6], *SHAPED[10:-3]]
    result = comms(traceanalyze.load(write_trace(tmp_path, events), cache=False))
    assert result.calls["collective"].to_list() == ["all_reduce", "all_to_all"]
    assert result.notes == (NO_GROUP,)
    assert "group sizes" in comms_verdict(result)


def test_shapes_on_the_128_rank_sample() -> None:
    path = CORPUS_TRACES / "hta_nccl_128rank_sampled_rank0.json.gz"
    skip_without(path)
    calls = comms(traceanalyze.load(path)).calls
    # Every call has a size now; the all_reduces only from their nccl: annotation (float).
    assert calls["bytes"].null_count() == 0
    sources = calls.group_by("collective", "bytes_source").len().sort("collective").rows()
    assert sources == [
        ("all_gather", "launch_op_dims", 2),
        ("all_reduce", "nccl_annotation_dims", 4),
        ("all_to_all", "launch_op_dims", 4),
    ]
    # The all_gather's message is its output, 1 GiB (64 x the 16 MiB input).
    assert calls.filter(pl.col("collective") == "all_gather")["bytes"].to_list() == [2**30] * 2


def test_a_call_without_any_size_among_sized_ones_is_counted(tmp_path: Path) -> None:
    events = [
        *EVENTS[:4],
        op("c10d::alltoall_base_", 900, 20),
        call("cudaLaunchKernel", 901, 2, 9),
        kernel("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", 905, 30, 9),
    ]
    result = comms(traceanalyze.load(write_trace(tmp_path, events), cache=False))
    assert result.notes == (f"1 of 2 {SOME_WITHOUT_BYTES}",)


# ---------------------------------------------------------------------------------------------
# Group sizes from every source the trace has (issue 38)


def _no_group(args: Event) -> Event:
    return {key: value for key, value in args.items() if key != "Group size"}


# An all_gather (no Group size: 4 inputs of 128 Ki elements make its 512 Ki output) and an
# all_reduce, both without a group size of their own.
UNGROUPED: list[Event] = [
    annotation("ProfilerStep#1", 0, 1000),
    *collective(10, 1, "ncclDevKernel_AllGather_RING_LL", 10, None,
                **_no_group(comm_args("_allgather_base", 131072, 524288, "BFloat16", 4))),
    *collective(100, 2, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 10, None,
                **_no_group(comm_args("allreduce", 262144, 262144, "Float", 4))),
]  # fmt: skip


def _groups(tmp_path: Path, info: Event | None) -> list[tuple[Any, ...]]:
    extra = {} if info is None else {"distributedInfo": info}
    result = comms(traceanalyze.load(write_trace(tmp_path, UNGROUPED, **extra), cache=False))
    return result.calls.select("collective", "group_size", "group_size_source").rows()


def test_group_size_from_the_gathers_ratio_alone(tmp_path: Path) -> None:
    assert _groups(tmp_path, None) == [
        ("all_gather", 4, "msg_ratio"),
        ("all_reduce", None, None),
    ]


def test_group_size_from_the_one_size_of_the_multi_rank_process_groups(tmp_path: Path) -> None:
    # As tl_b200_eager: groups of 4 and of 1 (a group of one rank moves nothing).
    groups = [{"pg_name": "0", "pg_size": 4, "ranks": [0, 1, 2, 3]},
              {"pg_name": "5", "pg_size": 1, "ranks": [0]}]  # fmt: skip
    info = {"backend": "nccl", "rank": 0, "world_size": 4, "pg_config": groups}
    assert _groups(tmp_path, info) == [
        ("all_gather", 4, "msg_ratio"),
        ("all_reduce", 4, "pg_config"),
    ]
    # Groups of two sizes: which one a call used is not in the trace.
    groups.append({"pg_name": "7", "pg_size": 2, "ranks": [0, 1]})
    assert _groups(tmp_path, info)[1] == ("all_reduce", None, None)


def test_world_size_only_where_no_call_shows_another_group(tmp_path: Path) -> None:
    info = {"backend": "nccl", "rank": 0, "world_size": 4}
    assert _groups(tmp_path, info)[1] == ("all_reduce", 4, "world_size")
    # World 8 while the all_gather gathers 4: the all_reduce's group is not known.
    assert _groups(tmp_path, info | {"world_size": 8})[1] == ("all_reduce", None, None)


def test_busiest_collectives_median_is_over_calls_not_buckets(tmp_path: Path) -> None:
    # Three small all_reduces at one bus bandwidth, one large at ten times it: the median
    # over the four calls is the small ones', where the mean of the two buckets' medians was
    # 5.5 times it.
    small = comm_args("allreduce", 1024, 1024, "Float", 2)  # 4 KiB
    large = comm_args("allreduce", 1024 * 1024, 1024 * 1024, "Float", 2)  # 4 MiB
    events = [
        annotation("ProfilerStep#1", 0, 10_000),
        *collective(10, 1, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 4.096, small),
        *collective(100, 2, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 4.096, small),
        *collective(200, 3, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 4.096, small),
        *collective(300, 4, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 419.4304, large),
    ]
    result = comms(traceanalyze.load(write_trace(tmp_path, events), cache=False))
    assert sorted(result.by_kind["busbw_gbps_median"].to_list()) == pytest.approx([1.0, 10.0])
    _, top = busiest_collective(result)
    assert top["busbw"] == pytest.approx(1.0)


def test_group_sizes_on_corpus_traces() -> None:
    cases = {
        # 1 GiB all_gathers of 16 MiB inputs: 64 (the world is 128; the other calls' groups
        # are then unknown).
        "hta_nccl_128rank_sampled_rank0.json.gz": {
            ("all_gather", 64, "shape_ratio", 2), ("all_reduce", None, None, 4),
            ("all_to_all", None, None, 4),
        },
        # Multimem all_reduces without args: pg_config's groups of 8 (and of 1).
        "tl_b200_eager.json.gz": {("all_gather", 8, "args", 1), ("all_reduce", 8, "pg_config", 73)},
        # No pg_config, no args: the world size, 8.
        "new_htadiff_control_a100_rank3.json.gz": {
            ("all_reduce", 8, "world_size", 18), ("send_recv", 8, "world_size", 42),
        },
    }  # fmt: skip
    for name, expected in cases.items():
        path = CORPUS_TRACES / name
        skip_without(path)
        calls = comms(traceanalyze.load(path)).calls
        got = calls.group_by("collective", "group_size", "group_size_source").len().rows()
        assert set(got) == expected, name
        known = calls.filter(pl.col("group_size").is_not_null() & pl.col("bytes").is_not_null())
        assert known.filter(pl.col("collective") != "other")["busbw_gbps"].null_count() == 0


def test_skipped_steps_calls_are_left_out_and_told() -> None:
    # Steps 4, 5 and 6, seven collectives each; --skip 2 keeps step 6's seven.
    path = PUBLIC_TRACES / "hta_nccl_a100.json.gz"
    skip_without(path)
    result = CliRunner().invoke(main, ["comms", str(path), "--skip", "2", "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert {row["iteration"] for row in rows} == {6} and len(rows) == 7
    told = CliRunner().invoke(main, ["comms", str(path), "--skip", "2"])
    assert "14 of 21 collective calls ran outside the counted steps" in told.output
