"""What `explain BASE NEW` says about memory: the change in the GPU's peak per iteration and the
blocks live at the peak that appear, disappear or change in number."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from traceanalyze.analyses.memory.blocks import memory_blocks
from traceanalyze.analyses.memory.usage import iteration_memory, memory_figures, peak_blocks
from traceanalyze.trace import Trace

# Block rows shown: the largest changes in bytes live at the peak.
TOP_CHANGES = 10


@dataclass(frozen=True)
class MemoryChange:
    """Peak figures of both traces (null without GPU memory events) and the block changes."""

    base_peak_increase_bytes_per_iter: float | None
    new_peak_increase_bytes_per_iter: float | None
    # op_name, block_bytes, base_per_iter, new_per_iter, bytes_per_iter_delta, change
    blocks: pl.DataFrame

    @property
    def peak_increase_bytes_per_iter_delta(self) -> float | None:
        before, after = (
            self.base_peak_increase_bytes_per_iter,
            self.new_peak_increase_bytes_per_iter,
        )
        return None if before is None or after is None else after - before

    def to_record(self) -> dict[str, Any]:
        return {
            "base_peak_increase_bytes_per_iter": self.base_peak_increase_bytes_per_iter,
            "new_peak_increase_bytes_per_iter": self.new_peak_increase_bytes_per_iter,
            "peak_increase_bytes_per_iter_delta": self.peak_increase_bytes_per_iter_delta,
            "peak_blocks": self.blocks.to_dicts(),
        }


def memory_change(base: Trace, new: Trace) -> MemoryChange | None:
    """None when neither trace has memory events on a GPU."""
    before = memory_figures(base)["peak_increase_bytes_per_iter"]
    after = memory_figures(new)["peak_increase_bytes_per_iter"]
    if before is None and after is None:
        return None
    joined = _live_at_peak(base).join(
        _live_at_peak(new), on=["op_name", "block_bytes"], how="full", coalesce=True,
        suffix="_new",
    )  # fmt: skip
    blocks = (
        joined.select(
            "op_name",
            "block_bytes",
            base_per_iter=pl.col("per_iter").fill_null(0.0),
            new_per_iter=pl.col("per_iter_new").fill_null(0.0),
        )
        .with_columns(
            bytes_per_iter_delta=(pl.col("new_per_iter") - pl.col("base_per_iter"))
            * pl.col("block_bytes"),
            change=pl.when(pl.col("base_per_iter") == 0)
            .then(pl.lit("appears"))
            .when(pl.col("new_per_iter") == 0)
            .then(pl.lit("disappears"))
            .otherwise(pl.lit("changes")),
        )
        .filter(pl.col("bytes_per_iter_delta") != 0)
        .sort(
            [pl.col("bytes_per_iter_delta").abs(), "op_name", "block_bytes"],
            descending=[True, False, True],
        )
        .head(TOP_CHANGES)
    )
    return MemoryChange(before, after, blocks)


def _live_at_peak(trace: Trace) -> pl.DataFrame:
    """Blocks live at the GPU's peak, by op and size, per counted iteration."""
    live = peak_blocks(iteration_memory(trace), memory_blocks(trace), top=None).filter(
        pl.col("on_accelerator")
    )
    iterations = max(live.select(pl.struct("rank", "iteration").n_unique()).item(), 1)
    return live.group_by("op_name", "block_bytes").agg(per_iter=pl.len() / iterations)
