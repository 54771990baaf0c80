"""Check traceanalyze.hardware.occupancy against CUDA's own occupancy API on the local NVIDIA GPU.

For each (register cap, threads per block, static and dynamic shared memory) combination the
script compiles a register-hungry CuPy RawKernel with ``--maxrregcount``, reads the registers
and static shared memory the compiler actually gave it, asks the driver
(``cuOccupancyMaxActiveBlocksPerMultiprocessor``) how many blocks fit on one SM, and compares
that with :func:`traceanalyze.hardware.occupancy.theoretical_occupancy` on a kernel row built
from the same footprint and a device row built from ``cudaGetDeviceProperties`` (the struct
Kineto copies into a trace's deviceProperties). Nothing is launched.

Needs CuPy, polars and this repository on ``sys.path``::

    python scripts/occupancy_check_gpu.py

Prints one line per combination and "N/N agree"; exits 1 on any disagreement.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from traceanalyze.hardware.occupancy import ARCH_LIMITS, theoretical_occupancy
from traceanalyze.schema import DEVICE_SCHEMA, GPU_SCHEMA

KIB = 1024
DEFAULT_DYNAMIC_LIMIT = 48 * KIB  # dynamic shared memory allowed without opting in

# (register cap, threads per block, static shared memory, dynamic shared memory).
CASES: list[tuple[int, int, int, int]] = [
    (255, 128, 0, 64 * KIB),  # flash-attention-like forward
    (168, 384, 0, 227 * KIB),  # cuDNN-SDPA-like
    (32, 64, 0, 0),
    (32, 128, 0, 0),
    (32, 256, 0, 0),
    (32, 1024, 0, 0),
    (40, 256, 0, 0),
    (48, 384, 0, 0),
    (64, 128, 0, 0),
    (64, 256, 0, 0),
    (64, 512, 0, 0),
    (64, 1024, 0, 0),
    (72, 96, 0, 0),
    (80, 192, 0, 0),
    (96, 256, 0, 0),
    (96, 640, 0, 0),
    (128, 128, 0, 0),
    (128, 256, 0, 0),
    (128, 512, 0, 0),
    (168, 128, 0, 0),
    (200, 256, 0, 0),
    (255, 64, 0, 0),
    (255, 256, 0, 0),
    (24, 32, 0, 0),  # blocks-limited
    (24, 96, 0, 0),  # warps-limited
    (24, 640, 0, 0),
    (40, 48, 0, 0),
    (32, 128, 0, 1 * KIB),
    (32, 128, 0, 8 * KIB),
    (32, 256, 0, 16 * KIB + 1),
    (32, 128, 0, 48 * KIB),
    (64, 128, 0, 64 * KIB),
    (64, 256, 0, 100 * KIB),
    (32, 128, 0, 113 * KIB),
    (128, 128, 0, 160 * KIB),
    (32, 512, 0, 227 * KIB),
    (64, 64, 12 * KIB, 0),
    (64, 128, 16 * KIB, 20 * KIB),
    (96, 256, 4 * KIB, 75 * KIB),
    (128, 384, 8 * KIB, 100 * KIB),
    (255, 128, 32 * KIB, 32 * KIB),
    (64, 1024, 0, 30 * KIB),
]

# Enough live values that the compiler uses every register the cap allows; STATIC_FLOATS adds a
# static shared array, and the dynamic one is only referenced so that it exists.
KERNEL_SOURCE = r"""
extern "C" __global__ void busy(const float* __restrict__ in, float* __restrict__ out, int n) {
    extern __shared__ float dynamic_smem[];
    float acc[LIVE];
#pragma unroll
    for (int i = 0; i < LIVE; ++i) acc[i] = in[(threadIdx.x * LIVE + i) % n];
    for (int it = 0; it < 4; ++it) {
#pragma unroll
        for (int i = 0; i < LIVE; ++i) acc[i] = acc[i] * acc[(i + 1) % LIVE] + acc[(i + 7) % LIVE];
    }
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < LIVE; ++i) s += acc[i];
#if STATIC_FLOATS > 0
    __shared__ float static_smem[STATIC_FLOATS];
    static_smem[threadIdx.x % STATIC_FLOATS] = s;
    __syncthreads();
    s += static_smem[(threadIdx.x + 1) % STATIC_FLOATS];
#endif
    if (n < 0) dynamic_smem[threadIdx.x] = s;
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
"""


@dataclass(frozen=True)
class Measured:
    """One combination as CUDA sees it."""

    register_cap: int
    threads: int
    registers: int
    static_smem: int
    dynamic_smem: int
    cuda_blocks: int


def device_row(props: dict[str, Any]) -> pl.DataFrame:
    """A DEVICE_SCHEMA row from cudaDeviceProp, with no block limit, as Kineto writes it."""
    name = props["name"]
    row = {
        "rank": 0,
        "device": 0,
        "name": name.decode() if isinstance(name, bytes) else str(name),
        "compute_major": props["major"],
        "compute_minor": props["minor"],
        "num_sms": props["multiProcessorCount"],
        "warp_size": props["warpSize"],
        "max_threads_per_block": props["maxThreadsPerBlock"],
        "max_threads_per_sm": props["maxThreadsPerMultiProcessor"],
        "max_blocks_per_sm": None,
        "regs_per_block": props["regsPerBlock"],
        "regs_per_sm": props["regsPerMultiprocessor"],
        "shared_mem_per_block": props["sharedMemPerBlock"],
        "shared_mem_per_block_optin": props["sharedMemPerBlockOptin"],
        "shared_mem_per_sm": props["sharedMemPerMultiprocessor"],
        "total_global_mem": props["totalGlobalMem"],
    }
    return pl.DataFrame([row], schema=DEVICE_SCHEMA)


def predict(measured: list[Measured], devices: pl.DataFrame) -> pl.DataFrame:
    """Our calculator on kernel rows carrying the measured footprints."""
    columns = {
        "rank": [0] * len(measured),
        "device": [0] * len(measured),
        "block_x": [m.threads for m in measured],
        "block_y": [1] * len(measured),
        "block_z": [1] * len(measured),
        "registers_per_thread": [m.registers for m in measured],
        "shared_memory": [m.static_smem + m.dynamic_smem for m in measured],
        "est_achieved_occupancy_pct": [0.0] * len(measured),
    }
    kernels = pl.DataFrame(columns, schema={c: GPU_SCHEMA[c] for c in columns})
    return theoretical_occupancy(kernels, devices)


def compare(measured: list[Measured], devices: pl.DataFrame) -> pl.DataFrame:
    """One row per combination: CUDA's and our blocks per SM and occupancy, and agreement."""
    max_warps = devices["max_threads_per_sm"][0] // devices["warp_size"][0]
    warp = devices["warp_size"][0]
    ours = predict(measured, devices)
    return pl.DataFrame(
        {
            "reg_cap": [m.register_cap for m in measured],
            "regs": [m.registers for m in measured],
            "threads": [m.threads for m in measured],
            "static_smem": [m.static_smem for m in measured],
            "dynamic_smem": [m.dynamic_smem for m in measured],
            "cuda_blocks": [m.cuda_blocks for m in measured],
            "cuda_pct": [
                m.cuda_blocks * -(-m.threads // warp) / max_warps * 100.0 for m in measured
            ],
        }
    ).with_columns(
        ours_blocks=ours["active_blocks_per_sm"],
        ours_pct=ours["theoretical_occupancy_pct"],
        limiter=ours["occupancy_limiter"],
        agree=(pl.col("cuda_blocks") == ours["active_blocks_per_sm"]).fill_null(False)
        & ((pl.col("cuda_pct") - ours["theoretical_occupancy_pct"]).abs() < 1e-9).fill_null(False),
    )


def _occupancy_api(function_ptr: int, threads: int, dynamic_smem: int) -> int:
    """cuOccupancyMaxActiveBlocksPerMultiprocessor through CuPy, else cuda-python."""
    from cupy.cuda import driver  # type: ignore[import-not-found]

    if hasattr(driver, "occupancyMaxActiveBlocksPerMultiprocessor"):
        return int(
            driver.occupancyMaxActiveBlocksPerMultiprocessor(function_ptr, threads, dynamic_smem)
        )
    from cuda.bindings import driver as cu  # type: ignore[import-not-found]

    error, blocks = cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(
        cu.CUfunction(function_ptr), threads, dynamic_smem
    )
    if error != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuOccupancyMaxActiveBlocksPerMultiprocessor failed: {error}")
    return int(blocks)


def measure(cases: list[tuple[int, int, int, int]]) -> list[Measured]:
    """Compile each footprint, read what the compiler produced, ask CUDA for blocks per SM."""
    import cupy  # type: ignore[import-not-found]

    kernels: dict[tuple[int, int], Any] = {}
    results = []
    for cap, threads, static_smem, dynamic_smem in cases:
        key = (cap, static_smem)
        if key not in kernels:
            options = (
                f"--maxrregcount={cap}",
                f"-DLIVE={cap + 16}",
                f"-DSTATIC_FLOATS={static_smem // 4}",
            )
            kernels[key] = cupy.RawKernel(KERNEL_SOURCE, "busy", options=options)
        kernel = kernels[key]
        static = kernel.shared_size_bytes
        # Opt in to large dynamic shared memory the way frameworks do before launching.
        kernel.max_dynamic_shared_size_bytes = max(dynamic_smem, DEFAULT_DYNAMIC_LIMIT - static)
        blocks = _occupancy_api(kernel.kernel.ptr, threads, dynamic_smem)
        results.append(Measured(cap, threads, kernel.num_regs, static, dynamic_smem, blocks))
    return results


def main() -> int:
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(0)
    devices = device_row(props)
    print(devices.drop("rank", "device", "max_blocks_per_sm", "total_global_mem").to_dicts()[0])
    cc = (props["major"], props["minor"])
    table = ARCH_LIMITS.filter(
        (pl.col("compute_major") == cc[0]) & (pl.col("compute_minor") == cc[1])
    )["_arch_max_blocks"].to_list()
    print(
        f"max blocks per SM: device {props.get('maxBlocksPerMultiProcessor')}, "
        f"ARCH_LIMITS {table[0] if table else None}"
    )
    result = compare(measure(CASES), devices)
    with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=250, tbl_hide_dataframe_shape=True):
        print(result)
    agreeing = int(result["agree"].sum())
    print(f"{agreeing}/{result.height} agree")
    return 0 if agreeing == result.height else 1


if __name__ == "__main__":
    sys.exit(main())
