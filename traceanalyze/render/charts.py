"""PNG charts for reports (matplotlib, headless). Pure: a table in, PNG bytes out.

Conventions for every chart: a title and axis units, the legend outside the plotting area,
plain tick labels (no offset or scientific notation), and a log axis or a second panel where
values differ tenfold or more, so small bars stay readable.
"""

from __future__ import annotations

import io
from typing import Any

import polars as pl

# Fixed colours per category, so a category looks the same in every chart and report. The
# first eight are the Okabe-Ito colour-blind-safe palette, the rest Paul Tol's muted palette
# drawn with hatching, so no two categories rely on a hue difference alone.
CATEGORY_STYLES: dict[str, tuple[str, str]] = {
    "fused_attention": ("#009E73", ""),
    "gemm": ("#E69F00", ""),
    "softmax": ("#CC79A7", ""),
    "memcpy": ("#D55E00", ""),
    "mask": ("#0072B2", ""),
    "elementwise": ("#56B4E9", ""),
    "transpose": ("#F0E442", ""),
    "copy": ("#000000", ""),
    "convolution": ("#332288", "//"),
    "memset": ("#DDCC77", "//"),
    "fill": ("#117733", "//"),
    "reduction": ("#88CCEE", "//"),
    "normalization": ("#882255", "//"),
    "indexing": ("#44AA99", "//"),
    "optimizer": ("#999933", "//"),
    "communication": ("#AA4499", "//"),
    "other": ("#DDDDDD", "//"),
}
# Values spanning at least this ratio get a log axis or a second, normalised panel.
WIDE_RANGE = 10.0


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # no display on servers and CI
    from matplotlib import pyplot as plt

    return plt


def _png(plt: Any, figure: Any) -> bytes:
    buffer = io.BytesIO()
    # No timestamps or software tags in the file, so the same data gives the same bytes.
    figure.savefig(buffer, format="png", metadata={"Software": None}, bbox_inches="tight")
    plt.close(figure)
    return buffer.getvalue()


def _plain_ticks(axes: Any, log: bool) -> None:
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda value, _pos: f"{value:,.0f}")
    if log:
        axes.set_xscale("log")
        # Label the 2x and 5x minor ticks too, so a log axis reads without counting decades.
        axes.xaxis.set_minor_formatter(
            FuncFormatter(lambda value, _pos: plain(value) if f"{value:.0e}"[0] in "25" else "")
        )
    axes.xaxis.set_major_formatter(plain)
    axes.grid(axis="x", alpha=0.3, which="both" if log else "major")


def _wide(values: list[float]) -> bool:
    positive = [v for v in values if v > 0]
    return len(positive) > 1 and max(positive) / min(positive) >= WIDE_RANGE


def gpu_time_by_category(category_us: pl.DataFrame) -> bytes:
    """Horizontal stacked bars: GPU activity time per iteration of each variant by category;
    where the variants differ tenfold or more, a second panel shows each one's shares.

    ``category_us`` has columns variant, category, us_per_iter (one row per pair).
    """
    variants = category_us["variant"].unique(maintain_order=True).to_list()
    totals = category_us.group_by("variant", maintain_order=True).agg(pl.col("us_per_iter").sum())
    split = _wide(totals["us_per_iter"].to_list())
    plt = _pyplot()
    height = 0.45 * len(variants) + 1.8
    figure, panels = plt.subplots(
        1, 2 if split else 1, figsize=(12 if split else 8, height), dpi=100, squeeze=False
    )
    absolute = panels[0][0]
    lookup_total = dict(zip(totals["variant"], totals["us_per_iter"], strict=True))
    _stack(absolute, category_us, variants, lambda v, us: us)
    absolute.set_xlabel("GPU activity time per iteration (µs): kernels + memcpy + memset")
    _plain_ticks(absolute, log=False)
    absolute.invert_yaxis()
    if split:
        shares = panels[0][1]
        _stack(shares, category_us, variants, lambda v, us: us / lookup_total[v] * 100)
        shares.set_xlabel("share of the variant's GPU activity time (%)")
        shares.set_xlim(0, 100)
        shares.set_yticks(range(len(variants)), [""] * len(variants))
        shares.invert_yaxis()
        _plain_ticks(shares, log=False)
    figure.suptitle("GPU activity per iteration, by kernel category")
    handles, labels = absolute.get_legend_handles_labels()
    figure.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.0, 0.95), fontsize=8)
    figure.tight_layout()
    return _png(plt, figure)


def _stack(axes: Any, category_us: pl.DataFrame, variants: list[str], scale: Any) -> None:
    left = [0.0] * len(variants)
    for category, (colour, hatch) in CATEGORY_STYLES.items():
        rows = category_us.filter(pl.col("category") == category)
        if not rows.height:
            continue
        lookup = dict(zip(rows["variant"].to_list(), rows["us_per_iter"].to_list(), strict=True))
        widths = [scale(v, lookup.get(v, 0.0)) for v in variants]
        axes.barh(
            variants, widths, left=left, color=colour, hatch=hatch, edgecolor="#444444",
            linewidth=0.3, label=category,
        )  # fmt: skip
        left = [a + b for a, b in zip(left, widths, strict=True)]


def cpu_vs_gpu(table: pl.DataFrame) -> bytes:
    """Grouped bars per variant: CPU operator time and GPU busy time per iteration (log axis
    when they span tenfold or more)."""
    rows = table.filter(pl.col("gpu_busy_us_per_iter").is_not_null())
    variants = rows["variant"].to_list()
    cpu = rows["cpu_op_us_per_iter"].fill_null(0.0).to_list()
    gpu = rows["gpu_busy_us_per_iter"].to_list()
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(8, 0.45 * len(variants) + 1.8), dpi=100)
    positions = list(range(len(variants)))
    height = 0.4
    axes.barh([p - height / 2 for p in positions], cpu, height, label="CPU operator time",
              color="#0072B2")  # fmt: skip
    axes.barh([p + height / 2 for p in positions], gpu, height, label="GPU busy time",
              color="#E69F00")  # fmt: skip
    axes.set_yticks(positions, variants)
    axes.invert_yaxis()
    log = _wide(cpu + gpu)
    axes.set_xlabel("µs per iteration" + (" (log scale)" if log else ""))
    _plain_ticks(axes, log)
    axes.set_title("CPU operator time vs GPU busy time per iteration")
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figure.tight_layout()
    return _png(plt, figure)
