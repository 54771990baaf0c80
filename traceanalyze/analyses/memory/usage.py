"""`memory`: per iteration and device, the allocated bytes at the start, the peak, the blocks live
at the peak, the ops that allocate most, and blocks that outlive their iteration.

Every figure is defined once in the README ("memory"). The source is the ``[memory]`` events
that ``profile_memory=True`` records: ``Total Allocated`` after an event is the allocator's
``memory_allocated()`` at that moment, so an iteration's start is its first event's total minus
that event's bytes. Traces of the oldest form carry no totals; then only the increases (from the
running sum of ``bytes``) are known and the absolute figures are null.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from traceanalyze.analyses.activities import per_trace
from traceanalyze.analyses.iterations import on_counted
from traceanalyze.analyses.memory.blocks import (
    free_pairs,
    memory_blocks,
    memory_events,
    op_details,
    with_devices,
)
from traceanalyze.display import Shown
from traceanalyze.trace import Trace

# Rows kept per (iteration, device): the largest blocks at the peak and the top allocating ops.
TOP_BLOCKS = 10
TOP_OPS = 5
NO_MEMORY_EVENTS = (
    "No memory events in this trace: record them with "
    "torch.profiler.profile(profile_memory=True) (record_shapes=True adds the shapes)."
)


@dataclass(frozen=True, repr=False)  # Shown: a short repr, tables in Jupyter
class MemoryResult(Shown):
    """What ``memory`` shows. Frames are empty when the trace has no memory events."""

    iterations: pl.DataFrame
    peak_blocks: pl.DataFrame
    top_ops: pl.DataFrame
    leak_suspects: pl.DataFrame
    # Allocated and reserved bytes after each event, for the memory curve.
    curve: pl.DataFrame
    # The counted iterations' spans (for shading the curve).
    spans: pl.DataFrame
    events: int

    @property
    def empty(self) -> bool:
        return self.events == 0


@on_counted
def memory(trace: Trace) -> MemoryResult:
    """The memory figures of ``trace`` (see the module docstring)."""
    events = memory_events(trace)
    blocks = memory_blocks(trace)
    per_iteration = iteration_memory(trace)
    return MemoryResult(
        iterations=_public(per_iteration, trace),
        peak_blocks=_public(
            op_details(peak_blocks(per_iteration, blocks), trace.cpu).select(_BLOCK_COLUMNS),
            trace,
        ),
        top_ops=_public(top_ops(blocks), trace),
        leak_suspects=_public(leak_suspects(blocks, per_iteration, trace.iterations), trace),
        curve=with_devices(
            events.select(
                "device_code",
                "ts_ns",
                "iteration",
                allocated_bytes=pl.coalesce("total_allocated_bytes", "running_bytes"),
                reserved_bytes="total_reserved_bytes",
            ),
            trace,
        ).select("device_name", "ts_ns", "iteration", "allocated_bytes", "reserved_bytes"),
        spans=trace.iterations.select("rank", "iteration", "ts_ns", "dur_ns"),
        events=events.height,
    )


ITERATION = ["device_code", "iteration"]
_BLOCK_COLUMNS = (
    "rank", "iteration", "device_name", "op_name", "annotation", "input_dims",
    "allocated_in_iteration", "lifetime_us", "block_bytes",
)  # fmt: skip


@per_trace
@on_counted
def iteration_memory(trace: Trace) -> pl.DataFrame:
    """One row per (iteration, device) with the README's memory figures, the device's columns
    and ``peak_seq``, the event at which the peak is first reached (before the first event
    when the iteration never rises above its start)."""
    # Only the columns read here are filtered (the events frame is wide).
    inside = (
        memory_events(trace)
        .select(*ITERATION, "seq", "bytes", "addr", "running_bytes", "total_allocated_bytes",
                "total_reserved_bytes")
        .filter(pl.col("iteration").is_not_null())
    )  # fmt: skip
    before = pl.col("total_allocated_bytes") - pl.col("bytes")
    running_before = pl.col("running_bytes") - pl.col("bytes")
    level = pl.coalesce("total_allocated_bytes", "running_bytes")
    figures = (
        inside.group_by(ITERATION)
        .agg(
            start_allocated_bytes=before.first(),
            max_total=pl.col("total_allocated_bytes").max(),
            peak_reserved_bytes=pl.col("total_reserved_bytes").max(),
            end_allocated_bytes=pl.col("total_allocated_bytes").last(),
            running_start=running_before.first(),
            running_peak=pl.col("running_bytes").max(),
            first_seq=pl.col("seq").first(),
            # The first event at the highest level (totals when the trace has them).
            level_peak_seq=pl.col("seq").get(level.arg_max()),
            level_max=level.max(),
            level_start=pl.coalesce(before, running_before).first(),
            addressed=pl.col("addr").is_not_null().all(),
        )
        .with_columns(
            peak_allocated_bytes=pl.max_horizontal("start_allocated_bytes", "max_total"),
            peak_seq=pl.when(pl.col("level_max") > pl.col("level_start"))
            .then("level_peak_seq")
            .otherwise(pl.col("first_seq") - 1),
        )
        .with_columns(
            peak_increase_bytes=pl.coalesce(
                pl.col("peak_allocated_bytes") - pl.col("start_allocated_bytes"),
                (pl.col("running_peak") - pl.col("running_start")).clip(lower_bound=0),
            )
        )
    )
    counted = (
        figures.join(_allocation_counts(memory_blocks(trace)), on=ITERATION, how="left")
        .join(_frees_without_allocation(free_pairs(trace)), on=ITERATION, how="left")
        .with_columns(
            pl.col("allocations", "allocated_bytes").fill_null(0),
            # Without addresses (the oldest traces) frees cannot be paired: unknown, not 0.
            pl.when(pl.col("addressed")).then(
                pl.col("outliving_blocks", "outliving_bytes", "frees_without_allocation").fill_null(
                    0
                )
            ),
        )
    )
    return with_devices(counted, trace).sort("rank", "iteration", "device_name")


def _outlives() -> pl.Expr:
    """A block outlives its iteration: freed in another (or outside every counted one), or
    never. Unknown (null) without an address, which pairing needs (the oldest traces)."""
    return pl.when(pl.col("addr").is_not_null()).then(
        pl.col("free_iteration").is_null() | (pl.col("free_iteration") != pl.col("iteration"))
    )


def _allocation_counts(blocks: pl.DataFrame) -> pl.DataFrame:
    paired = pl.col("addr").is_not_null().any()
    return (
        blocks.filter(pl.col("iteration").is_not_null())
        .group_by(ITERATION)
        .agg(
            allocations=pl.len(),
            allocated_bytes=pl.col("bytes").sum(),
            outliving_blocks=pl.when(paired).then(_outlives().sum()),
            outliving_bytes=pl.when(paired).then(pl.col("bytes").filter(_outlives()).sum()),
        )
    )


def _frees_without_allocation(pairs: pl.DataFrame) -> pl.DataFrame:
    return (
        pairs.filter(pl.col("alloc_seq").is_null() & pl.col("iteration").is_not_null())
        .group_by(ITERATION)
        .agg(frees_without_allocation=pl.len())
    )


def peak_blocks(
    per_iteration: pl.DataFrame, blocks: pl.DataFrame, top: int | None = TOP_BLOCKS
) -> pl.DataFrame:
    """The largest blocks (``top`` of them, or all) live at each (iteration, device)'s peak,
    largest first."""
    live = _live_at_peaks(per_iteration, blocks.filter(pl.col("addr").is_not_null()))
    return (
        live.sort(["bytes", "seq"], descending=[True, False])
        .group_by(ITERATION, maintain_order=True)
        .head(top if top is not None else live.height)
        .select(
            "rank",
            "iteration",
            "device_name",
            "on_accelerator",
            "op_id",
            "op_name",
            "allocated_in_iteration",
            "lifetime_us",
            block_bytes="bytes",
        )
        .sort(
            ["rank", "iteration", "device_name", "block_bytes"],
            descending=[False, False, False, True],
            maintain_order=True,
        )
    )


def _live_at_peaks(per_iteration: pl.DataFrame, blocks: pl.DataFrame) -> pl.DataFrame:
    """One row per (block, peak) where the block is live at the peak (allocated at or before
    it, freed after it or never), with the peak's ``iteration`` and the block's own as
    ``allocated_in_iteration``. Events are numbered across devices, so a key of (device, seq)
    orders each device's peaks apart; two searches over the sorted peak keys find the peaks
    inside each block's life, and only blocks alive at some peak are expanded."""
    peaks = per_iteration.select("iteration", key=_seq_key(pl.col("peak_seq"))).sort("key")
    starts = blocks.select(_seq_key(pl.col("seq"))).to_series()
    ends = blocks.select(_seq_key(pl.col("free_seq").fill_null(_SEQ_LIMIT - 1))).to_series()
    expanded = (
        blocks.with_columns(
            first=peaks["key"].search_sorted(starts, side="left"),
            last=peaks["key"].search_sorted(ends, side="left"),
        )
        .filter(pl.col("last") > pl.col("first"))
        .with_columns(peak=pl.int_ranges("first", "last", dtype=pl.UInt32))
        .explode("peak")
    )
    return expanded.rename({"iteration": "allocated_in_iteration"}).with_columns(
        iteration=peaks["iteration"].gather(expanded["peak"])
    )


# Event numbers stay below this, so (device, seq) packs into one sortable integer.
_SEQ_LIMIT = 1 << 40


def _seq_key(seq: pl.Expr) -> pl.Expr:
    return (pl.col("device_code").cast(pl.Int64) * _SEQ_LIMIT + seq).alias("key")


def top_ops(blocks: pl.DataFrame) -> pl.DataFrame:
    """Per (iteration, device), the ops that allocate the most bytes."""
    return (
        blocks.filter(pl.col("iteration").is_not_null())
        .group_by("rank", "iteration", "device_name", "op_name")
        .agg(
            allocations=pl.len(),
            allocated_bytes=pl.col("bytes").sum(),
            largest_block_bytes=pl.col("bytes").max(),
        )
        .sort(
            ["rank", "iteration", "device_name", "allocated_bytes", "op_name"],
            descending=[False, False, False, True, False],
        )
        .group_by("rank", "iteration", "device_name", maintain_order=True)
        .head(TOP_OPS)
    )


def leak_suspects(
    blocks: pl.DataFrame, per_iteration: pl.DataFrame, iterations: pl.DataFrame
) -> pl.DataFrame:
    """Blocks of one op and size that outlive their iteration in every counted iteration (at
    least two) on a device whose allocated memory grows in every counted iteration (each ends
    above its start): the pattern of a leak. A block carried from one step into the next (a
    loss, an optimizer's state built in the first step) outlives its iteration too, but where
    allocated memory stops growing nothing leaks (new_tl_mi300x_norm_profile_memory: 650 KiB
    to 1.77 MiB in the first step, then flat). One iteration alone proves nothing; a trace
    without totals (the oldest form) has no allocated level, so no suspects."""
    counted = iterations.group_by("rank").agg(counted=pl.len())
    start, end = pl.col("start_allocated_bytes"), pl.col("end_allocated_bytes")
    growing = (
        per_iteration.group_by("rank", "device_name")
        .agg(
            grows=(end > start).fill_null(value=False).all(),
            device_growth_bytes_per_iter=(end - start).mean(),
            with_events=pl.col("iteration").n_unique(),
        )
        .join(counted, on="rank")
        .filter(pl.col("grows") & (pl.col("with_events") == pl.col("counted")))
    )
    outliving = blocks.filter(pl.col("iteration").is_not_null() & _outlives())
    return (
        outliving.group_by("rank", "device_name", "op_name", "bytes")
        .agg(iterations=pl.col("iteration").n_unique(), blocks=pl.len())
        .join(growing, on=["rank", "device_name"])
        .filter((pl.col("iterations") == pl.col("counted")) & (pl.col("counted") >= 2))
        .select(
            "rank",
            "device_name",
            "op_name",
            block_bytes="bytes",
            blocks_per_iter=pl.col("blocks") / pl.col("counted"),
            device_growth_bytes_per_iter="device_growth_bytes_per_iter",
        )
        # op_name breaks ties: the group_by's order is not fixed from run to run.
        .sort(
            "rank", "device_name", "block_bytes", "op_name", descending=[False, False, True, False]
        )
    )


_ITERATION_COLUMNS = (
    "iteration", "device_label", "start_allocated_bytes", "peak_allocated_bytes",
    "peak_increase_bytes", "peak_reserved_bytes", "end_allocated_bytes", "allocations",
    "allocated_bytes", "outliving_blocks", "outliving_bytes", "frees_without_allocation",
)  # fmt: skip


def _public(frame: pl.DataFrame, trace: Trace) -> pl.DataFrame:
    """The public form of a result frame: ``device_label`` like ``cuda:0`` (not ``device``,
    which every other table holds as the index the trace records), internal columns dropped,
    ``rank`` only for a trace of several ranks."""
    internal = ("device", "device_type", "device_code", "on_accelerator")
    frame = frame.drop(c for c in internal if c in frame.columns).rename(
        {"device_name": "device_label"}
    )
    if "peak_seq" in frame.columns:
        frame = frame.select(*_ITERATION_COLUMNS, "rank")
    if len(trace.meta) > 1:
        return frame.select("rank", pl.exclude("rank"))
    return frame.drop("rank")


# compare's memory columns (README "compare"): null where the trace has no GPU memory events.
COMPARE_KEYS = ("peak_increase_bytes_per_iter", "largest_block_bytes", "largest_block_op")


@on_counted
def memory_figures(trace: Trace) -> dict[str, Any]:
    """The GPU's median ``peak_increase_bytes`` over the counted iterations (the highest device
    in each, for a trace of several GPUs) and the largest block allocated on a GPU inside
    them, with its op."""
    blocks = memory_blocks(trace).filter(
        pl.col("on_accelerator") & pl.col("iteration").is_not_null()
    )
    increases = (
        iteration_memory(trace)
        .filter(pl.col("on_accelerator"))
        .group_by("rank", "iteration")
        .agg(pl.col("peak_increase_bytes").max())
    )
    median = increases["peak_increase_bytes"].median() if increases.height else None
    largest = blocks.sort(["bytes", "seq"], descending=[True, False]).head(1)
    return {
        "peak_increase_bytes_per_iter": median,
        "largest_block_bytes": largest["bytes"].first() if largest.height else None,
        "largest_block_op": largest["op_name"].first() if largest.height else None,
    }
