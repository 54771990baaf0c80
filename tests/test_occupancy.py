"""Theoretical occupancy: known kernels, each limiter, missing inputs, AMD, weighted means."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from traceanalyze import load
from traceanalyze.errors import AnalysisError
from traceanalyze.hardware.occupancy import (
    KERNEL_COLUMNS,
    theoretical_occupancy,
    weighted_occupancy,
)
from traceanalyze.schema import DEVICE_SCHEMA, GPU_SCHEMA

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces" / "h200_default"

# deviceProperties as Kineto writes them (H200 measured here; A100 and MI300X from the public
# traces in ../shared/traces/public).
H200 = {
    "name": "NVIDIA H200",
    "compute_major": 9,
    "compute_minor": 0,
    "num_sms": 132,
    "warp_size": 32,
    "max_threads_per_block": 1024,
    "max_threads_per_sm": 2048,
    "regs_per_block": 65536,
    "regs_per_sm": 65536,
    "shared_mem_per_block": 49152,
    "shared_mem_per_block_optin": 232448,
    "shared_mem_per_sm": 233472,
}
A100 = H200 | {
    "name": "NVIDIA A100-SXM4-80GB",
    "compute_major": 8,
    "num_sms": 108,
    "shared_mem_per_block_optin": 166912,
    "shared_mem_per_sm": 167936,
}
RTX4090 = H200 | {  # sm89: 1536 threads and 24 blocks per SM, 100 KiB shared memory
    "name": "NVIDIA GeForce RTX 4090",
    "compute_major": 8,
    "compute_minor": 9,
    "max_threads_per_sm": 1536,
    "shared_mem_per_block_optin": 101376,
    "shared_mem_per_sm": 102400,
}
MI300X = {  # ROCm: 64-lane wavefronts, no regsPerMultiprocessor
    "name": "AMD Instinct MI300X",
    "compute_major": 9,
    "compute_minor": 4,
    "num_sms": 304,
    "warp_size": 64,
    "max_threads_per_block": 1024,
    "max_threads_per_sm": 2048,
    "regs_per_block": 131072,
    "regs_per_sm": None,
    "shared_mem_per_block": 65536,
    "shared_mem_per_block_optin": None,
    "shared_mem_per_sm": 65536,
}


def _devices(*props: dict[str, Any]) -> pl.DataFrame:
    """One device per rank, ranks numbered in order."""
    rows = [{"rank": rank, "device": 0, **p} for rank, p in enumerate(props)]
    return pl.DataFrame(rows, schema=DEVICE_SCHEMA)


def _kernels(
    rows: list[tuple[int, int, int | None, int | None, float | None]],
) -> pl.DataFrame:
    """(rank, threads, registers, shared memory, est. achieved occupancy) per kernel."""
    columns = [*KERNEL_COLUMNS, "dur_ns"]
    data = [(rank, 0, t, 1, 1, r, s, a, 1000) for rank, t, r, s, a in rows]
    return pl.DataFrame(data, schema={c: GPU_SCHEMA[c] for c in columns}, orient="row")


def _result(rows: list[tuple[int | None, int | None, float | None, str | None]]) -> pl.DataFrame:
    return pl.DataFrame(
        rows,
        schema={
            "threads_per_block": pl.Int64,
            "active_blocks_per_sm": pl.Int64,
            "theoretical_occupancy_pct": pl.Float64,
            "occupancy_limiter": pl.String,
        },
        orient="row",
    )


def _occupancy(kernels: pl.DataFrame, devices: pl.DataFrame) -> pl.DataFrame:
    return theoretical_occupancy(kernels, devices).select(
        "threads_per_block",
        "active_blocks_per_sm",
        "theoretical_occupancy_pct",
        "occupancy_limiter",
    )


def test_known_attention_kernels() -> None:
    kernels = _kernels(
        [
            # H200 flash forward: 255 regs -> 8192 per warp -> 2 warps per sub-partition -> 8
            # warps = 2 blocks of 4 warps = 12.5 %.
            (0, 128, 255, 65536, 0.0),
            # H200 cuDNN SDPA: 227 KiB + 1 KiB reserved fills the 228 KiB, and 168 regs leave 3
            # warps per sub-partition (12 per SM): 1 block of 12 warps either way; the tie names
            # registers.
            (0, 384, 168, 232448, 0.0),
            # A100 flash forward: registers and shared memory (2 x 65 KiB of 164) both allow 2.
            (1, 128, 255, 65536, 13.0),
        ]
    )
    assert_frame_equal(
        _occupancy(kernels, _devices(H200, A100)),
        _result(
            [
                (128, 2, 12.5, "registers"),
                (384, 1, 18.75, "registers"),
                (128, 2, 12.5, "registers"),
            ]
        ),
    )


def test_each_limiter() -> None:
    kernels = _kernels(
        [
            (0, 256, 64, 0, None),  # 2048 regs/warp: 8 warps/sub-partition = 4 blocks of 8 warps
            (0, 128, 32, 100 * 1024, None),  # 101 KiB + 1 KiB: 2 blocks of 4 warps
            (0, 1024, 16, 0, None),  # 64 warps / 32 per block = 2 blocks, 100 %
            (0, 32, 32, 0, None),  # 64 one-warp blocks allowed, the SM holds 32
            (0, 128, 0, 0, None),  # no registers, no shared memory: warps limit (16)
        ]
    )
    assert_frame_equal(
        _occupancy(kernels, _devices(H200)),
        _result(
            [
                (256, 4, 50.0, "registers"),
                (128, 2, 12.5, "shared_memory"),
                (1024, 2, 100.0, None),  # at 100% no resource limits the kernel
                (32, 32, 50.0, "blocks"),
                (128, 16, 100.0, None),
            ]
        ),
    )


def test_granularities_round_up() -> None:
    kernels = _kernels(
        [
            # 40 regs * 32 = 1280 -> 1280 (already a multiple of 256); 41 -> 1312 -> 1536.
            (0, 256, 40, 0, None),  # 16384 // 1280 = 12 warps/sub-partition, 48 warps: 6 blocks
            (0, 256, 41, 0, None),  # 16384 // 1536 = 10 -> 40 warps: 5 blocks
            # 48 KiB + 1 KiB + 1 byte rounds to 50304 bytes: 233472 // 50304 = 4 blocks.
            (0, 64, 32, 48 * 1024 + 1, None),
        ]
    )
    assert_frame_equal(
        _occupancy(kernels, _devices(H200)),
        _result(
            [
                (256, 6, 75.0, "registers"),
                (256, 5, 62.5, "registers"),
                (64, 4, 12.5, "shared_memory"),
            ]
        ),
    )


def test_sm89_limits_come_from_the_device_and_the_table() -> None:
    # 48 warps per SM and at most 24 blocks: 24 one-warp blocks = 50 %.
    assert_frame_equal(
        _occupancy(_kernels([(0, 32, 16, 0, None)]), _devices(RTX4090)),
        _result([(32, 24, 50.0, "blocks")]),
    )


def test_device_block_limit_overrides_the_table() -> None:
    devices = _devices(H200).with_columns(pl.lit(16, dtype=pl.Int32).alias("max_blocks_per_sm"))
    assert_frame_equal(
        _occupancy(_kernels([(0, 32, 16, 0, None)]), devices),
        _result([(32, 16, 25.0, "blocks")]),
    )


def test_missing_inputs_give_null() -> None:
    unknown_cc = H200 | {"compute_major": 11, "compute_minor": 7}
    kernels = _kernels(
        [
            (0, 128, None, 0, None),  # no registers
            (0, 128, 32, None, None),  # no shared memory
            (1, 128, 32, 0, None),  # rank 1 has no deviceProperties
            (2, 128, 32, 0, None),  # a compute capability the table does not know
        ]
    )
    kernels = pl.concat(
        [kernels, _kernels([(0, 1, 32, 0, None)]).with_columns(pl.lit(None).alias("block_x"))]
    )
    devices = pl.concat(
        [_devices(H200), _devices(H200, H200, unknown_cc).filter(pl.col("rank") == 2)]
    )
    assert_frame_equal(
        _occupancy(kernels, devices),
        _result(
            [
                (128, None, None, None),
                (128, None, None, None),
                (128, None, None, None),
                (128, None, None, None),
                (None, None, None, None),
            ]
        ),
    )


def test_amd_gives_null() -> None:
    out = _occupancy(_kernels([(0, 256, 64, 0, 40.0)]), _devices(MI300X))
    assert_frame_equal(out, _result([(256, None, None, None)]))


def test_achieved_zero_becomes_null_and_rows_are_kept() -> None:
    kernels = _kernels([(0, 128, 255, 65536, 0.0), (0, 128, 255, 65536, 13.2)])
    out = theoretical_occupancy(kernels, _devices(H200))
    assert out["achieved_occupancy_pct"].to_list() == [None, 13.2]
    assert out.columns[: len(kernels.columns)] == kernels.columns
    assert_frame_equal(theoretical_occupancy(out, _devices(H200)), out)


def test_no_duplicate_rows_when_devices_repeat() -> None:
    devices = pl.concat([_devices(H200), _devices(H200)])
    assert theoretical_occupancy(_kernels([(0, 128, 32, 0, None)]), devices).height == 1


def test_missing_column_fails_loudly() -> None:
    with pytest.raises(AnalysisError, match="registers_per_thread"):
        theoretical_occupancy(
            _kernels([(0, 128, 32, 0, None)]).drop("registers_per_thread"), _devices(H200)
        )


def test_weighted_occupancy() -> None:
    frame = pl.DataFrame(
        {
            "category": ["a", "a", "b", "b", "c", "c"],
            "dur_ns": [100, 300, 50, 50, 300, 100],
            "theoretical_occupancy_pct": [10.0, 50.0, None, None, 20.0, 100.0],
            "achieved_occupancy_pct": [None, 20.0, 30.0, 10.0, None, 90.0],
        }
    )
    assert_frame_equal(
        weighted_occupancy(frame, by=["category"]),
        pl.DataFrame(
            {
                "category": ["a", "b", "c"],
                "dur_ns": [400, 100, 400],
                # a: 75% of the time has an estimate: both means over the one kernel with both.
                # b: no footprint at all: the estimate over the kernels that carry one.
                # c: 25% coverage: no estimate; the theoretical mean over every kernel.
                "theoretical_occupancy_pct": [50.0, None, 40.0],
                "achieved_occupancy_pct": [20.0, 20.0, None],
                "reported_coverage_pct": [75.0, 100.0, 25.0],
            }
        ),
    )


@pytest.mark.parametrize(("variant", "expected"), [("sdpa_flash", 12.5), ("sdpa_cudnn", 18.75)])
def test_h200_sample_attention_kernels(variant: str, expected: float) -> None:
    # Real H200 captures: one attention kernel per forward, footprint and deviceProperties from
    # the trace. Kineto's own estimate is 13 % for flash and 0 (no estimate) for cuDNN.
    path = SAMPLES / f"{variant}.json.gz"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    trace = load(path)
    out = theoretical_occupancy(trace.kernels, trace.devices)
    assert out["theoretical_occupancy_pct"].unique().to_list() == [expected]
