"""`memory`, diff-test style: a handful of [memory] events beside ops, and the exact frames.

Times are microseconds (tests/micro.py). The trace below has two profiler steps on cuda:0 and the
host, with 1000 bytes allocated before the window:

- step 1: aten::empty_like allocates 256 B and frees it inside itself; aten::mm allocates 512 B
  (block B) that is freed in step 2, and 64 B on the host (freed at once); the 1000 B from
  before the window are freed, with no allocation in the trace.
- step 2: aten::mm allocates 512 B (block C) and frees it in the step; block B is freed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
from polars.testing import assert_frame_equal

import traceanalyze
from tests.conftest import CORPUS_TRACES, skip_without
from tests.micro import annotation, expected, load, memory_event, op, span, write_trace
from traceanalyze.analyses.memory.blocks import _address_key, memory_events
from traceanalyze.analyses.memory.usage import NO_MEMORY_EVENTS, memory
from traceanalyze.load.parse import parse_file
from traceanalyze.schema import MEMORY_SCHEMA

Event = dict[str, Any]
MM_SHAPES = [[4, 8], [8, 16]]
CPU = {"device_type": 0, "device": -1}


def mm(ts: float, dur: float) -> Event:
    return span("cpu_op", "aten::mm", ts, dur, **{"Input Dims": MM_SHAPES})


def two_steps() -> list[Event]:
    return [
        annotation("ProfilerStep#1", 0, 100),
        annotation("ProfilerStep#2", 100, 100),
        annotation("fwd", 5, 85),
        op("aten::empty_like", 10, 20),
        mm(30, 20),
        mm(110, 20),
        memory_event(12, 0x10, 256, 1256, 2048),
        memory_event(25, 0x10, -256, 1000, 2048),
        memory_event(35, 0x20, 512, 1512, 2048),
        memory_event(36, 0x30, 64, 64, 0, **CPU),
        memory_event(40, 0x30, -64, 0, 0, **CPU),
        memory_event(60, 0x9, -1000, 512, 2048),
        memory_event(115, 0x40, 512, 1024, 4096),
        memory_event(150, 0x20, -512, 512, 4096),
        memory_event(180, 0x40, -512, 0, 4096),
    ]


ITERATION_TYPES: dict[str, pl.DataType] = {
    "iteration": pl.Int64(),
    "device_label": pl.String(),
    "start_allocated_bytes": pl.Int64(),
    "peak_allocated_bytes": pl.Int64(),
    "peak_increase_bytes": pl.Int64(),
    "peak_reserved_bytes": pl.Int64(),
    "end_allocated_bytes": pl.Int64(),
    "allocations": pl.UInt32(),
    "allocated_bytes": pl.Int64(),
    "outliving_blocks": pl.UInt32(),
    "outliving_bytes": pl.Int64(),
    "frees_without_allocation": pl.UInt32(),
}


def test_memory_frame_is_the_same_from_both_decoders(tmp_path: Path) -> None:
    path = write_trace(tmp_path, two_steps())
    native, reference = parse_file(path), parse_file(path, native=False)
    assert_frame_equal(native.memory, reference.memory)
    want = expected(
        MEMORY_SCHEMA,
        "rank pid tid ts_ns device_type device addr bytes total_allocated_bytes "
        "total_reserved_bytes",
        (0, 1, 1, 12_000, 1, 0, 0x10, 256, 1256, 2048),
        (0, 1, 1, 36_000, 0, -1, 0x30, 64, 64, 0),
    )
    assert_frame_equal(native.memory.filter(pl.col("ts_ns").is_in([12_000, 36_000])), want)
    assert native.memory.height == 9
    assert native.instants.height == 0  # [memory] events are not plain instants


def test_per_iteration_figures(tmp_path: Path) -> None:
    result = memory(load(tmp_path, two_steps()))
    want = expected(
        ITERATION_TYPES,
        " ".join(ITERATION_TYPES),
        (1, "cpu", 0, 64, 64, 0, 0, 1, 64, 0, 0, 0),
        # B outlives step 1; the free of the 1000 B has no allocation in the trace.
        (1, "cuda:0", 1000, 1512, 512, 2048, 512, 2, 768, 1, 512, 1),
        (2, "cuda:0", 512, 1024, 512, 4096, 0, 1, 512, 0, 0, 0),
    )
    assert_frame_equal(result.iterations, want)


def test_blocks_live_at_each_peak(tmp_path: Path) -> None:
    result = memory(load(tmp_path, two_steps()))
    shapes = "[[4, 8], [8, 16]]"
    want = pl.DataFrame(
        [
            (1, "cpu", "aten::mm", "fwd", shapes, 1, 4.0, 64),
            (1, "cuda:0", "aten::mm", "fwd", shapes, 1, 115.0, 512),
            # At step 2's peak both B (from step 1) and C are live; A was freed in its op.
            (2, "cuda:0", "aten::mm", "fwd", shapes, 1, 115.0, 512),
            (2, "cuda:0", "aten::mm", None, shapes, 2, 65.0, 512),
        ],
        schema={
            "iteration": pl.Int64,
            "device_label": pl.String,
            "op_name": pl.String,
            "annotation": pl.String,
            "input_dims": pl.String,
            "allocated_in_iteration": pl.Int64,
            "lifetime_us": pl.Float64,
            "block_bytes": pl.Int64,
        },
        orient="row",
    )
    assert_frame_equal(result.peak_blocks, want)


def test_top_ops_per_iteration(tmp_path: Path) -> None:
    result = memory(load(tmp_path, two_steps()))
    want = pl.DataFrame(
        [
            (1, "cpu", "aten::mm", 1, 64, 64),
            (1, "cuda:0", "aten::mm", 1, 512, 512),
            (1, "cuda:0", "aten::empty_like", 1, 256, 256),
            (2, "cuda:0", "aten::mm", 1, 512, 512),
        ],
        schema={
            "iteration": pl.Int64,
            "device_label": pl.String,
            "op_name": pl.String,
            "allocations": pl.UInt32,
            "allocated_bytes": pl.Int64,
            "largest_block_bytes": pl.Int64,
        },
        orient="row",
    )
    assert_frame_equal(result.top_ops, want)
    assert result.leak_suspects.height == 0  # B outlives one step only


def test_a_block_kept_by_every_iteration_is_a_leak_suspect(tmp_path: Path) -> None:
    events = [
        annotation("ProfilerStep#1", 0, 100),
        annotation("ProfilerStep#2", 100, 100),
        op("aten::cat", 10, 10),
        op("aten::cat", 110, 10),
        memory_event(12, 0x10, 128, 128, 2048),
        memory_event(112, 0x20, 128, 256, 2048),
    ]
    suspects = memory(load(tmp_path, events)).leak_suspects
    # Allocated memory grows 128 B in each step (0 -> 128 -> 256): the kept blocks leak.
    want = pl.DataFrame(
        {"device_label": ["cuda:0"], "op_name": ["aten::cat"], "block_bytes": [128],
         "blocks_per_iter": [1.0], "device_growth_bytes_per_iter": [128.0]},
    )  # fmt: skip
    assert_frame_equal(suspects, want)


def test_a_block_carried_into_the_next_step_is_no_leak_where_memory_stops_growing(
    tmp_path: Path,
) -> None:
    # As new_tl_mi300x_norm_profile_memory: each step's 128 B block outlives its step (freed in
    # the next one), but after the first step allocated memory is flat (128 -> 128): no leak.
    events = [
        annotation("ProfilerStep#1", 0, 100),
        annotation("ProfilerStep#2", 100, 100),
        annotation("ProfilerStep#3", 200, 100),
        op("aten::mse_loss", 10, 10),
        op("aten::mse_loss", 110, 10),
        op("aten::mse_loss", 210, 10),
        memory_event(12, 0x10, 128, 128, 2048),
        memory_event(112, 0x20, 128, 256, 2048),
        memory_event(114, 0x10, -128, 128, 2048),
        memory_event(212, 0x10, 128, 256, 2048),
        memory_event(214, 0x20, -128, 128, 2048),
    ]
    result = memory(load(tmp_path, events))
    assert result.iterations["outliving_blocks"].to_list() == [1, 1, 1]
    assert result.iterations.select("start_allocated_bytes", "end_allocated_bytes").rows() == [
        (0, 128), (128, 128), (128, 128),
    ]  # fmt: skip
    assert result.leak_suspects.height == 0


def test_no_leak_suspect_on_the_mi300x_norm_trace() -> None:
    path = CORPUS_TRACES / "new_tl_mi300x_norm_profile_memory.json.gz"
    skip_without(path)
    result = memory(traceanalyze.load(path))
    gpu = result.iterations.filter(pl.col("device_label") == "hip:0")
    # The first of the three repeated regions (332 ms of one-off CPU work, 1,842x the median)
    # waits on the CPU: left out of the counted steps. The allocated level at each counted
    # step's start and end is 1.77 MiB (1,852,416 bytes): flat, so the two blocks (1 MiB) that
    # outlive each step are carried state, not a leak.
    assert gpu["iteration"].to_list() == [1, 2]
    assert gpu["start_allocated_bytes"].to_list() == [1_852_416] * 2
    assert gpu["end_allocated_bytes"].to_list() == gpu["start_allocated_bytes"].to_list()
    assert gpu["outliving_blocks"].to_list() == [2, 2]
    assert result.leak_suspects.height == 0


def test_oldest_form_gives_increases_only(tmp_path: Path) -> None:
    """Traces of 2021 write [memory] without a category, an address or totals."""
    events = [
        annotation("ProfilerStep#1", 0, 100),
        op("aten::relu", 10, 30),
        memory_event(12, None, 300, None, None, cat=None),
        memory_event(20, None, 200, None, None, cat=None),
        memory_event(30, None, -300, None, None, cat=None),
    ]
    result = memory(load(tmp_path, events))
    row = result.iterations.row(0, named=True)
    assert row["peak_increase_bytes"] == 500
    assert row["start_allocated_bytes"] is None and row["peak_allocated_bytes"] is None
    assert row["outliving_blocks"] is None and row["frees_without_allocation"] is None
    assert result.peak_blocks.height == 0


def test_no_memory_events(tmp_path: Path) -> None:
    result = memory(load(tmp_path, [annotation("ProfilerStep#1", 0, 100), op("aten::mm", 1, 5)]))
    assert result.empty
    assert "profile_memory=True" in NO_MEMORY_EVENTS


def test_memory_survives_the_cache(tmp_path: Path) -> None:
    path = write_trace(tmp_path, two_steps())
    first = traceanalyze.load(path)
    again = traceanalyze.load(path)
    assert_frame_equal(first.memory, again.memory)
    assert again.memory.height == 9


def test_cli_json_keys_and_no_memory_line(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from traceanalyze.cli import main

    runner = CliRunner()
    path = write_trace(tmp_path, two_steps())
    done = runner.invoke(main, ["memory", str(path), "--format", "json", "--no-cache"])
    assert done.exit_code == 0, done.output
    record = json.loads(done.output)
    assert set(record) >= {"iterations", "peak_blocks", "top_ops"}
    assert set(record["iterations"][0]) >= {
        "iteration", "device_label", "start_allocated_bytes", "peak_allocated_bytes",
        "peak_increase_bytes", "peak_reserved_bytes",
    }  # fmt: skip
    bare = write_trace(tmp_path, [op("aten::mm", 1, 5)], name="bare.json")
    done = runner.invoke(main, ["memory", str(bare), "--no-cache"])
    assert done.exit_code == 0
    assert done.output == NO_MEMORY_EVENTS + "\n"


def test_cli_writes_the_memory_curve_beside_markdown(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from traceanalyze.cli import main

    path = write_trace(tmp_path, two_steps())
    out = tmp_path / "out" / "memory.md"
    done = CliRunner().invoke(main, ["memory", str(path), "-o", str(out), "--no-cache"])
    assert done.exit_code == 0, done.output
    assert "## Largest blocks live at each peak" in out.read_text()
    assert (out.parent / "memory_memory.png").read_bytes().startswith(b"\x89PNG")


def test_an_allocation_helper_hands_its_block_to_the_caller(tmp_path: Path) -> None:
    """aten::bmm allocates its output through aten::empty: the block is bmm's. A runtime call
    inside the helper, and a sibling op that ended before the event, change nothing."""
    events = [
        annotation("ProfilerStep#1", 0, 100),
        op("aten::bmm", 10, 50),
        op("aten::view", 11, 2),
        op("aten::empty", 14, 10),
        span("cuda_runtime", "cudaMalloc", 15, 5, correlation=1),
        memory_event(16, 0x10, 4096, 4096, 8192),
    ]
    blocks = memory(load(tmp_path, events)).top_ops
    assert blocks["op_name"].to_list() == ["aten::bmm"]


def test_explain_gives_the_change_in_peak_and_the_blocks_that_appear(tmp_path: Path) -> None:
    from traceanalyze.analyses.memory.diff import memory_change

    def step(extra: bool) -> list[Event]:
        events = [
            annotation("ProfilerStep#1", 0, 100),
            op("aten::softmax", 10, 10),
            memory_event(12, 0x10, 1024, 1024, 8192),
            memory_event(30, 0x10, -1024, 0, 8192),
        ]
        if extra:
            events += [
                span("cpu_op", "aten::bmm", 14, 4, **{"Input Dims": [[2, 32], [32, 32]]}),
                memory_event(15, 0x20, 4096, 5120, 8192),
                memory_event(31, 0x20, -4096, 0, 8192),
            ]
        return events

    base = traceanalyze.load(write_trace(tmp_path, step(False), name="base.json"), cache=False)
    new = traceanalyze.load(write_trace(tmp_path, step(True), name="new.json"), cache=False)
    change = memory_change(base, new)
    assert change is not None
    assert change.to_record() == {
        "base_peak_increase_bytes_per_iter": 1024.0,
        "new_peak_increase_bytes_per_iter": 5120.0,
        "peak_increase_bytes_per_iter_delta": 4096.0,
        "peak_blocks": [
            {"op_name": "aten::bmm", "block_bytes": 4096, "base_per_iter": 0.0,
             "new_per_iter": 1.0, "bytes_per_iter_delta": 4096.0, "change": "appears"},
        ],
    }  # fmt: skip
    assert memory_change(base, base) is not None
    assert memory_change(base, base).blocks.height == 0  # type: ignore[union-attr]


def test_events_out_of_time_order_in_the_file_give_the_same_figures(tmp_path: Path) -> None:
    events = two_steps()
    shuffled = [e for e in events if e["name"] != "[memory]"] + [
        e for e in reversed(events) if e["name"] == "[memory]"
    ]
    ordered = memory(load(tmp_path, events))
    (tmp_path / "shuffled").mkdir()
    reordered = memory(load(tmp_path / "shuffled", shuffled))
    assert_frame_equal(reordered.iterations, ordered.iterations)
    assert_frame_equal(reordered.peak_blocks, ordered.peak_blocks)


def test_addresses_too_far_apart_for_one_64_bit_key_pair_the_same(tmp_path: Path) -> None:
    # Two devices and addresses 2**62 apart: (device, address) no longer packs into 64 bits,
    # and the frees pair on the 128-bit key with the same figures.
    far = 1 << 62
    events = [
        {**e, "args": {**e["args"], "Addr": e["args"]["Addr"] + far}}
        if e["name"] == "[memory]" and e["args"].get("Addr") == 0x40
        else e
        for e in two_steps()
    ]
    (tmp_path / "far").mkdir()
    near_result, far_result = (
        memory(load(tmp_path, two_steps())),
        memory(load(tmp_path / "far", events)),
    )
    assert_frame_equal(far_result.iterations, near_result.iterations)
    assert_frame_equal(far_result.peak_blocks, near_result.peak_blocks)
    assert near_result.iterations["outliving_blocks"].sum() > 0  # pairing decides something
    far_events = memory_events(load(tmp_path / "far", events))
    assert far_events.select(_address_key(far_events)).dtypes == [pl.Int128]
