"""Theoretical occupancy of each kernel from its footprint and the GPU's properties.

The arithmetic restates CUDA's occupancy calculator (``cuda_occupancy.h``,
``cudaOccMaxActiveBlocksPerMultiprocessor``) as Polars expressions, for the default launch
(no shared-memory carveout preference, no clusters, partitioned global caching off). For a
block of ``T`` threads with ``R`` registers per thread and ``S`` bytes of shared memory
(static + dynamic, as Kineto reports it), resident blocks per SM are the least of:

* registers: a warp's registers, ``R * 32`` rounded up to the allocation unit of 256, are
  allocated in each of the SM's sub-partitions (4 from Volta on), so the SM holds
  ``floor(regs_per_sm / sub_partitions / regs_per_warp) * sub_partitions`` warps, i.e.
  ``floor(that / warps_per_block)`` blocks;
* shared memory: ``S`` plus the 1 KiB the driver reserves per block from sm80 on, rounded up to
  the allocation unit (128 bytes from sm80, 256 before), divided into the SM's configurable
  shared memory (Kineto's ``sharedMemPerMultiprocessor``, e.g. 233472 on H100/H200);
* warps: ``max_threads_per_sm / warp_size / warps_per_block``;
* blocks: the per-SM block limit of the compute capability (``ARCH_LIMITS``).

Zero registers or zero shared memory impose no limit (as in CUDA). The limiter named is the
first resource, in the order registers, shared_memory, warps, blocks, that reaches the minimum,
so a tie between registers and shared memory reports "registers".

AMD GPUs get null: Kineto's ROCm deviceProperties carry no register-file size, and a wavefront
of 64 lanes with per-SIMD VGPR/AGPR/SGPR files and LDS granularity needs data the trace does
not hold, so any number would be a guess. A GPU is treated as computable only when it reports a
32-thread warp, a register-file size and a compute capability listed in ``ARCH_LIMITS``.
"""

from __future__ import annotations

import polars as pl

from traceanalyze.schema import require_columns

REGISTER_ALLOCATION_UNIT = 256  # registers, per warp, every NVIDIA architecture since Kepler
NVIDIA_WARP_SIZE = 32

# Per compute capability, from cuda_occupancy.h (CUDA 12.6: cudaOccMaxBlocksPerMultiprocessor,
# cudaOccSubPartitionsPerMultiprocessor, cudaOccSMemAllocationGranularity). That header stops at
# 9.0: the block limits of 10.0 and 12.0 are the CUDA programming guide's, their sub-partitions
# and shared-memory unit are assumed equal to sm90's. The driver reserves 1 KiB of shared memory
# per block from sm80 on (cudaDevAttrReservedSharedMemoryPerBlock). Checked on an H200 against
# cuOccupancyMaxActiveBlocksPerMultiprocessor (scripts/occupancy_check_gpu.py).
ARCH_LIMITS = pl.DataFrame(
    [
        # major, minor, max blocks/SM, sub-partitions, smem unit, smem reserved per block
        (6, 0, 32, 2, 256, 0),
        (6, 1, 32, 4, 256, 0),
        (6, 2, 32, 4, 256, 0),
        (7, 0, 32, 4, 256, 0),
        (7, 2, 32, 4, 256, 0),
        (7, 5, 16, 4, 256, 0),
        (8, 0, 32, 4, 128, 1024),
        (8, 6, 16, 4, 128, 1024),
        (8, 7, 16, 4, 128, 1024),
        (8, 9, 24, 4, 128, 1024),
        (9, 0, 32, 4, 128, 1024),
        (10, 0, 32, 4, 128, 1024),
        (12, 0, 32, 4, 128, 1024),
    ],
    schema={
        "compute_major": pl.Int32,
        "compute_minor": pl.Int32,
        "_arch_max_blocks": pl.Int64,
        "_sub_partitions": pl.Int64,
        "_smem_unit": pl.Int64,
        "_smem_reserved": pl.Int64,
    },
    orient="row",
)

KERNEL_COLUMNS = (
    "rank",
    "device",
    "block_x",
    "block_y",
    "block_z",
    "registers_per_thread",
    "shared_memory",
    "est_achieved_occupancy_pct",
)
DEVICE_COLUMNS = (
    "rank",
    "device",
    "compute_major",
    "compute_minor",
    "warp_size",
    "max_threads_per_sm",
    "max_blocks_per_sm",
    "regs_per_sm",
    "shared_mem_per_sm",
)
LIMITERS = ("registers", "shared_memory", "warps", "blocks")
OUTPUT_COLUMNS = (
    "threads_per_block",
    "active_blocks_per_sm",
    "theoretical_occupancy_pct",
    "occupancy_limiter",
    "achieved_occupancy_pct",
)

# The device properties a kernel row is joined with, under names no kernel column uses.
_DEVICE_RENAMES = {
    "warp_size": "_warp_size",
    "max_threads_per_sm": "_max_threads_per_sm",
    "max_blocks_per_sm": "_device_max_blocks",
    "regs_per_sm": "_regs_per_sm",
    "shared_mem_per_sm": "_smem_per_sm",
}
_LIMIT_COLUMNS = tuple(f"_limit_{name}" for name in LIMITERS)


def _ceil_div(numerator: pl.Expr, denominator: pl.Expr | int) -> pl.Expr:
    return (numerator + denominator - 1) // denominator


def _device_properties(devices: pl.DataFrame) -> pl.DataFrame:
    """One row per (rank, device) with the properties and the architecture's limits."""
    return (
        devices.select(DEVICE_COLUMNS)
        .unique(subset=["rank", "device"], keep="first", maintain_order=True)
        .join(ARCH_LIMITS, on=["compute_major", "compute_minor"], how="left")
        .drop("compute_major", "compute_minor")
        .rename(_DEVICE_RENAMES)
    )


def threads_per_block_expr() -> pl.Expr:
    """Threads in one block: ``block_x * block_y * block_z``."""
    return (pl.col("block_x") * pl.col("block_y") * pl.col("block_z")).alias("threads_per_block")


def _warps_per_block() -> pl.Expr:
    return _ceil_div(pl.col("threads_per_block"), pl.col("_warp_size"))


def _max_warps_per_sm() -> pl.Expr:
    return pl.col("_max_threads_per_sm") // pl.col("_warp_size")


def _register_limit() -> pl.Expr:
    registers = pl.col("registers_per_thread")
    regs_per_warp = (
        _ceil_div(registers * pl.col("_warp_size"), REGISTER_ALLOCATION_UNIT)
        * REGISTER_ALLOCATION_UNIT
    )
    sub_partitions = pl.col("_sub_partitions")
    warps_per_sub_partition = pl.col("_regs_per_sm") // sub_partitions // regs_per_warp
    blocks = warps_per_sub_partition * sub_partitions // _warps_per_block()
    return pl.when(registers > 0).then(blocks).alias("_limit_registers")


def _shared_memory_limit() -> pl.Expr:
    shared = pl.col("shared_memory")
    unit = pl.col("_smem_unit")
    allocated = _ceil_div(shared + pl.col("_smem_reserved"), unit) * unit
    return (
        pl.when(shared > 0).then(pl.col("_smem_per_sm") // allocated).alias("_limit_shared_memory")
    )


def _warp_limit() -> pl.Expr:
    return (_max_warps_per_sm() // _warps_per_block()).alias("_limit_warps")


def _block_limit() -> pl.Expr:
    # A device row that states its block limit wins over the architecture table.
    return (
        pl.coalesce("_device_max_blocks", "_arch_max_blocks").cast(pl.Int64).alias("_limit_blocks")
    )


def _computable() -> pl.Expr:
    """The kernel's footprint and its GPU's properties are all known, and the GPU is NVIDIA."""
    return (
        pl.all_horizontal(
            pl.col("threads_per_block") > 0,
            pl.col("registers_per_thread").is_not_null(),
            pl.col("shared_memory").is_not_null(),
            pl.col("_warp_size") == NVIDIA_WARP_SIZE,
            pl.col("_max_threads_per_sm") > 0,
            pl.col("_regs_per_sm") > 0,
            pl.col("_smem_per_sm") > 0,
            pl.col("_limit_blocks") > 0,
            pl.col("_sub_partitions").is_not_null(),
        )
        .fill_null(False)
        .alias("_computable")
    )


def _limiter() -> pl.Expr:
    """The first resource, in ``LIMITERS`` order, whose limit equals the active blocks."""
    chain: pl.Expr = pl.lit(None, dtype=pl.String)
    for name, column in reversed(tuple(zip(LIMITERS, _LIMIT_COLUMNS, strict=True))):
        hit = (pl.col(column) == pl.col("active_blocks_per_sm")).fill_null(False)
        chain = pl.when(hit).then(pl.lit(name)).otherwise(chain)
    return chain.alias("occupancy_limiter")


def achieved_occupancy_expr() -> pl.Expr:
    """The trace's own estimate; Kineto writes 0 when CUPTI could not estimate (e.g. kernels
    launched with cuLaunchKernelEx), so 0 becomes null."""
    achieved = pl.col("est_achieved_occupancy_pct").cast(pl.Float64)
    return pl.when(achieved != 0).then(achieved).alias("achieved_occupancy_pct")


def theoretical_occupancy(kernels: pl.DataFrame, devices: pl.DataFrame) -> pl.DataFrame:
    """Add theoretical and achieved occupancy columns to a frame of GPU kernels.

    ``kernels`` follows ``GPU_SCHEMA`` (at least ``KERNEL_COLUMNS``), ``devices`` follows
    ``DEVICE_SCHEMA``; they are joined on (rank, device). Added columns:
    ``threads_per_block`` (Int64), ``active_blocks_per_sm`` (Int64),
    ``theoretical_occupancy_pct`` (Float64, resident warps / max warps per SM * 100),
    ``occupancy_limiter`` (String: registers | shared_memory | warps | blocks) and
    ``achieved_occupancy_pct`` (Float64). The theoretical columns are null where the footprint
    or the device's properties are missing, and for AMD GPUs (see the module docstring).
    Rows and their order are kept.
    """
    require_columns(kernels, KERNEL_COLUMNS, "compute occupancy", "trace.kernels, trace.devices")
    require_columns(devices, DEVICE_COLUMNS, "compute occupancy", "trace.kernels, trace.devices")
    helpers = [*_DEVICE_RENAMES.values(), *ARCH_LIMITS.columns[2:], *_LIMIT_COLUMNS, "_computable"]
    active = pl.min_horizontal(*_LIMIT_COLUMNS)
    occupancy = (
        pl.col("active_blocks_per_sm") * _warps_per_block() / _max_warps_per_sm() * 100.0
    ).cast(pl.Float64)
    return (
        kernels.lazy()
        .drop(*OUTPUT_COLUMNS, strict=False)
        .join(
            _device_properties(devices).lazy(),
            on=["rank", "device"],
            how="left",
            maintain_order="left",
        )
        .with_columns(threads_per_block_expr().cast(pl.Int64))
        .with_columns(_block_limit())
        .with_columns(_computable())
        .with_columns(_register_limit(), _shared_memory_limit(), _warp_limit())
        .with_columns(
            pl.when("_computable").then(active).cast(pl.Int64).alias("active_blocks_per_sm")
        )
        .with_columns(
            pl.when("_computable").then(occupancy).alias("theoretical_occupancy_pct"),
            # At full occupancy no resource limits the kernel.
            pl.when(
                pl.col("_computable")
                & (pl.col("active_blocks_per_sm") * _warps_per_block() < _max_warps_per_sm())
            )
            .then(_limiter())
            .alias("occupancy_limiter"),
            achieved_occupancy_expr(),
        )
        .drop(helpers)
        .collect()
    )


def duration_weighted_mean(column: str) -> pl.Expr:
    """Mean of ``column`` weighted by ``dur_ns`` over the rows where it is known (null when
    no row has it)."""
    weight = pl.when(pl.col(column).is_not_null() & pl.col(column).is_not_nan()).then(
        pl.col("dur_ns")
    )
    return (
        pl.when(weight.sum() > 0).then((pl.col(column) * weight).sum() / weight.sum()).alias(column)
    )


# Below this share of kernel time with a reported value, the trace's estimate does not speak
# for the group: cuDNN's main kernel reports none, and its helpers' 100% must not stand for it.
MIN_REPORTED_COVERAGE_PCT = 50.0


def _known(column: str) -> pl.Expr:
    return pl.col(column).is_not_null() & pl.col(column).is_not_nan()


def occupancy_means() -> list[pl.Expr]:
    """Aggregations for one group of kernels: ``theoretical_occupancy_pct``,
    ``achieved_occupancy_pct`` and ``reported_coverage_pct``, over one kernel set.

    ``reported_coverage_pct`` is the share of the group's kernel time whose kernels carry the
    trace's own estimate. Where it is at least ``MIN_REPORTED_COVERAGE_PCT``, both means are
    duration-weighted over the kernels that have both values, so they compare like with like;
    below it the estimate is left out (null) and the theoretical mean covers every kernel with a
    computable footprint. Without any computable footprint (no deviceProperties, AMD GPUs)
    the estimate's mean covers the kernels that carry one.
    """
    theoretical = _known("theoretical_occupancy_pct")
    # Where no kernel has a computable footprint (no deviceProperties, AMD), the set is the
    # kernels with an estimate.
    both = _known("achieved_occupancy_pct") & (theoretical | ~theoretical.any())
    total = pl.col("dur_ns").sum()
    coverage = pl.when(total > 0).then(  # no kernel time: no coverage (not 0/0)
        pl.col("dur_ns").filter(_known("achieved_occupancy_pct")).sum() / total * 100
    )
    enough = coverage >= MIN_REPORTED_COVERAGE_PCT

    def weighted(column: str, rows: pl.Expr) -> pl.Expr:
        weight = pl.when(rows & _known(column)).then(pl.col("dur_ns"))
        return pl.when(weight.sum() > 0).then((pl.col(column) * weight).sum() / weight.sum())

    return [
        pl.when(enough)
        .then(weighted("theoretical_occupancy_pct", both))
        .otherwise(weighted("theoretical_occupancy_pct", theoretical))
        .alias("theoretical_occupancy_pct"),
        pl.when(enough)
        .then(weighted("achieved_occupancy_pct", both))
        .alias("achieved_occupancy_pct"),
        coverage.alias("reported_coverage_pct"),
    ]


# The occupancy figures of `compare` and the report, defined once (README "How time is
# counted" and the report's glossary print these).
OCCUPANCY_DEFINITIONS: dict[str, str] = {
    "theoretical_occupancy_pct": "resident warps per SM that a kernel's registers, shared memory "
    "and block size allow on this GPU, as a share of the SM's maximum; in the comparison, "
    "time-weighted over every kernel with a computable footprint (the same set for every "
    "variant)",
    "theoretical_occupancy_of_estimated_pct": "the same, time-weighted over only the kernels "
    "that carry the trace's estimate: the kernel set of `estimated_occupancy_pct`, so the two "
    "compare like with like",
    "estimated_occupancy_pct": "the trace's `est. achieved occupancy %`: CUPTI's "
    "occupancy-calculator estimate at launch, not a measurement (a 0, as driver-API launches "
    "report, counts as absent); time-weighted over the kernels that carry it, and left out "
    f"where they hold under {MIN_REPORTED_COVERAGE_PCT:.0f}% of the kernel time",
    "achieved_occupancy_pct": "the former name of `estimated_occupancy_pct`, the same value "
    "(kept for JSON compatibility)",
    "reported_coverage_pct": "the share of the kernel time whose kernels carry the trace's "
    "estimate",
}


def compare_occupancy() -> list[pl.Expr]:
    """The comparison's occupancy figures over one group of kernels (see
    :data:`OCCUPANCY_DEFINITIONS`): ``theoretical_occupancy_pct`` over every kernel with a
    footprint; ``theoretical_occupancy_of_estimated_pct`` and ``estimated_occupancy_pct``
    over one set, the kernels with both values (:func:`occupancy_means`);
    ``achieved_occupancy_pct`` the estimate's former name; ``reported_coverage_pct``."""
    means = {expr.meta.output_name(): expr for expr in occupancy_means()}
    estimated = means["achieved_occupancy_pct"]
    return [
        theoretical_mean(),
        pl.when(estimated.is_not_null())
        .then(means["theoretical_occupancy_pct"])
        .alias("theoretical_occupancy_of_estimated_pct"),
        estimated.alias("estimated_occupancy_pct"),
        estimated.alias("achieved_occupancy_pct"),
        means["reported_coverage_pct"],
    ]


def theoretical_mean() -> pl.Expr:
    """``theoretical_occupancy_pct`` time-weighted over every kernel with a computable
    footprint, whatever the trace estimates: one kernel set for every compared row."""
    weight = pl.when(_known("theoretical_occupancy_pct")).then(pl.col("dur_ns"))
    return (
        pl.when(weight.sum() > 0)
        .then((pl.col("theoretical_occupancy_pct") * weight).sum() / weight.sum())
        .alias("theoretical_occupancy_pct")
    )


def weighted_occupancy(frame: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Occupancy means per group (see :func:`occupancy_means`).

    ``frame`` is the output of :func:`theoretical_occupancy` (with ``dur_ns``), ``by`` the
    grouping columns, e.g. ``["category"]``. Returns one row per group, in order of first
    appearance, with ``by``, ``dur_ns`` (total), ``theoretical_occupancy_pct``,
    ``achieved_occupancy_pct`` and ``reported_coverage_pct``.
    """
    needed = [*by, "dur_ns", "theoretical_occupancy_pct", "achieved_occupancy_pct"]
    require_columns(frame, needed, "average occupancy", "theoretical_occupancy(...)'s result")
    return frame.group_by(by, maintain_order=True).agg(pl.col("dur_ns").sum(), *occupancy_means())
