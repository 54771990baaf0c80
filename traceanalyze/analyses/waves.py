"""Wave quantisation: how evenly a kernel's grid fills the GPU.

An SM runs ``active_blocks_per_sm`` blocks of a kernel at once (the occupancy model), so the
GPU runs ``blocks_per_wave = num_sms x active_blocks_per_sm`` blocks at a time and a grid of
``grid_blocks`` takes ``waves = grid_blocks / blocks_per_wave`` waves. The last wave is only
``last_wave_fill_pct`` full; if every block takes equally long, the launched wave slots are
used ``wave_efficiency_pct = waves / ceil(waves) x 100`` percent, and the rest
(``wave_loss_pct``) is SM time left idle by the tail. Null where occupancy is unknown (AMD,
no deviceProperties) or the grid is not recorded.
"""

from __future__ import annotations

import polars as pl

from traceanalyze.analyses.activities import activities, in_iterations, iteration_count, per_trace
from traceanalyze.trace import Trace

WAVE_COLUMNS = (
    "grid_blocks", "blocks_per_wave", "waves", "last_wave_fill_pct", "wave_efficiency_pct",
    "wave_loss_pct",
)  # fmt: skip
WAVE_TABLE_COLUMNS = (
    "name", "category", "count_per_iter", "us_per_iter", "grid_blocks", "threads_per_block",
    "active_blocks_per_sm", "blocks_per_wave", "waves", "last_wave_fill_pct",
    "wave_efficiency_pct", "wave_loss_pct", "launch_op",
)  # fmt: skip


def with_waves(kernels: pl.DataFrame, devices: pl.DataFrame) -> pl.DataFrame:
    """``kernels`` (activities() rows) plus ``WAVE_COLUMNS``; rows and order kept."""
    sms = devices.select("rank", "device", "num_sms").unique(["rank", "device"], keep="first")
    grid = pl.col("grid_x") * pl.col("grid_y") * pl.col("grid_z")
    per_wave = pl.col("num_sms").cast(pl.Int64) * pl.col("active_blocks_per_sm")
    waves = pl.col("grid_blocks") / pl.col("blocks_per_wave")
    fraction = pl.col("waves") - pl.col("waves").floor()
    return (
        kernels.join(sms, on=["rank", "device"], how="left", maintain_order="left")
        .with_columns(
            grid_blocks=pl.when(pl.col("kind") == "kernel").then(grid),
            blocks_per_wave=pl.when(per_wave > 0).then(per_wave),
        )
        .with_columns(waves=pl.when(pl.col("grid_blocks") > 0).then(waves))
        .with_columns(
            last_wave_fill_pct=pl.when(fraction > 0)
            .then(fraction * 100)
            .otherwise(pl.when(pl.col("waves").is_not_null()).then(100.0)),
            wave_efficiency_pct=pl.col("waves") / pl.col("waves").ceil() * 100,
        )
        .with_columns(wave_loss_pct=100 - pl.col("wave_efficiency_pct"))
        .drop("num_sms")
    )


@per_trace
def wave_table(trace: Trace) -> pl.DataFrame:
    """One row per kernel name and launch shape (grid, block) launched inside the
    iterations, most time per iteration first."""
    kernels = in_iterations(activities(trace)).filter(pl.col("kind") == "kernel")
    n = iteration_count(trace)
    keyed = with_waves(kernels, trace.devices)
    table = keyed.group_by("name", "grid_blocks", "threads_per_block", "active_blocks_per_sm").agg(
        pl.col("category").first(),
        count_per_iter=pl.len() / n,
        us_per_iter=pl.col("dur_ns").sum() / 1e3 / n,
        blocks_per_wave=pl.col("blocks_per_wave").first(),
        waves=pl.col("waves").first(),
        last_wave_fill_pct=pl.col("last_wave_fill_pct").first(),
        wave_efficiency_pct=pl.col("wave_efficiency_pct").first(),
        wave_loss_pct=pl.col("wave_loss_pct").first(),
        launch_op=pl.col("op_name").drop_nulls().mode().sort().first(),
    )
    return table.sort(
        ["us_per_iter", "name", "grid_blocks"], descending=[True, False, False], nulls_last=True
    ).select(WAVE_TABLE_COLUMNS)
