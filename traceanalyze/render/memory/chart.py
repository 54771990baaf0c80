"""The memory curve (PNG): allocated and reserved bytes over time, one panel per device, the
counted iterations shaded and the highest peak marked with its largest blocks. Pure: a
:class:`~traceanalyze.analyses.memory.usage.MemoryResult` in, PNG bytes out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from traceanalyze.analyses.memory.usage import MemoryResult
from traceanalyze.render.charts import _png, _pyplot
from traceanalyze.units import byte_size

# Blocks named beside the peak marker.
_PEAK_LABELS = 3
_UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("bytes", 1))


def memory_curve(result: MemoryResult) -> bytes:
    """Allocated (solid) and reserved (dashed) bytes, in the unit that suits each device,
    against milliseconds since the first event."""
    plt = _pyplot()
    devices = result.curve["device_name"].unique().sort().to_list()
    figure, axes_list = plt.subplots(
        len(devices), 1, figsize=(10, 2.8 * len(devices)), squeeze=False
    )
    origin = int(result.curve.select(pl.col("ts_ns").min().fill_null(0)).item())
    for axes, device in zip(axes_list[:, 0], devices, strict=True):
        curve = result.curve.filter(pl.col("device_name") == device)
        highest = curve.select(
            pl.max_horizontal(pl.col("allocated_bytes", "reserved_bytes").max()).fill_null(0)
        ).item()
        unit, scale = next(((u, s) for u, s in _UNITS if highest >= s), _UNITS[-1])
        _shade_iterations(axes, result.spans, origin)
        times = ((curve["ts_ns"] - origin) / 1e6).to_list()
        axes.step(times, (curve["allocated_bytes"] / scale).to_list(), where="post",
                  label="allocated", color="#0072B2")  # fmt: skip
        if curve["reserved_bytes"].null_count() < curve.height:
            axes.step(times, (curve["reserved_bytes"] / scale).to_list(), where="post",
                      label="reserved", color="#D55E00", linestyle="--")  # fmt: skip
        _mark_peak(axes, result, device, curve, (origin, scale))
        axes.set_title(f"{device}: memory over time (iterations shaded)")
        axes.set_ylabel(unit)
        axes.ticklabel_format(axis="y", style="plain", useOffset=False)
        axes.grid(alpha=0.3)
        axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    axes_list[-1, 0].set_xlabel("ms since the first memory event")
    figure.tight_layout()
    return _png(plt, figure)


def memory_chart(results: Sequence[tuple[str | None, MemoryResult]]) -> bytes | None:
    """The memory curve of the one trace of ``results`` with memory events; None where none
    or several have some (one chart beside the file shows one trace)."""
    drawn = [result for _, result in results if not result.empty]
    return memory_curve(drawn[0]) if len(drawn) == 1 else None


def _shade_iterations(axes: Any, spans: pl.DataFrame, origin: int) -> None:
    for index, (start, duration) in enumerate(spans.select("ts_ns", "dur_ns").rows()):
        if start is None or duration is None:
            continue
        left = (start - origin) / 1e6
        axes.axvspan(left, left + duration / 1e6, color="#999999",
                     alpha=0.12 if index % 2 else 0.22, linewidth=0)  # fmt: skip


def _mark_peak(
    axes: Any, result: MemoryResult, device: str, curve: pl.DataFrame, where: tuple[int, float]
) -> None:
    """A marker at the highest point inside the counted iterations, with the largest blocks
    live at that peak."""
    origin, scale = where
    inside = curve.filter(
        pl.col("iteration").is_not_null() & pl.col("allocated_bytes").is_not_null()
    )
    if not inside.height:
        return
    top = inside.sort("allocated_bytes", descending=True, maintain_order=True).row(0, named=True)
    x = (top["ts_ns"] - origin) / 1e6
    y = top["allocated_bytes"] / scale
    axes.plot([x], [y], marker="v", color="black")
    blocks = result.peak_blocks.filter(
        (pl.col("device_label") == device) & (pl.col("iteration") == top["iteration"])
    ).head(_PEAK_LABELS)
    lines = [f"peak {byte_size(top['allocated_bytes'])}"] + [
        f"{byte_size(size)} {op}" for op, size in blocks.select("op_name", "block_bytes").rows()
    ]
    axes.annotate("\n".join(lines), (x, y), textcoords="offset points", xytext=(6, -4),
                  fontsize=7, va="top")  # fmt: skip
