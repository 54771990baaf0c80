"""PNG charts for reports (matplotlib, headless). Pure: a table in, PNG bytes out."""

from __future__ import annotations

import io

import polars as pl

# Fixed colours per category, so a category looks the same in every chart and report.
CATEGORY_COLOURS = {
    "fused_attention": "#1b9e77",
    "gemm": "#d95f02",
    "convolution": "#7570b3",
    "softmax": "#e7298a",
    "transpose": "#66a61e",
    "memcpy": "#e6ab02",
    "memset": "#a6761d",
    "copy": "#666666",
    "fill": "#a6cee3",
    "mask": "#1f78b4",
    "elementwise": "#b2df8a",
    "reduction": "#33a02c",
    "normalization": "#fb9a99",
    "indexing": "#fdbf6f",
    "optimizer": "#cab2d6",
    "communication": "#6a3d9a",
    "other": "#bbbbbb",
}


def _figure(height: float):  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")  # no display on servers and CI
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(figsize=(8, height), dpi=100)
    return plt, figure, axes


def _png(plt, figure) -> bytes:  # type: ignore[no-untyped-def]
    buffer = io.BytesIO()
    figure.tight_layout()
    # No timestamps or software tags in the file, so the same data gives the same bytes.
    figure.savefig(buffer, format="png", metadata={"Software": None})
    plt.close(figure)
    return buffer.getvalue()


def gpu_time_by_category(category_us: pl.DataFrame) -> bytes:
    """Horizontal stacked bars: GPU kernel time per iteration of each variant, by category.

    ``category_us`` has columns variant, category, us (one row per pair).
    """
    variants = category_us["variant"].unique(maintain_order=True).to_list()
    plt, figure, axes = _figure(0.45 * len(variants) + 1.6)
    left = [0.0] * len(variants)
    for category, colour in CATEGORY_COLOURS.items():
        rows = category_us.filter(pl.col("category") == category)
        if not rows.height:
            continue
        lookup = dict(zip(rows["variant"].to_list(), rows["us"].to_list(), strict=True))
        widths = [lookup.get(v, 0.0) for v in variants]
        axes.barh(variants, widths, left=left, color=colour, label=category)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    axes.invert_yaxis()
    axes.set_xlabel("GPU kernel time per iteration (µs)")
    axes.set_title("GPU time per variant, by kernel category")
    axes.legend(fontsize=8, loc="lower right")
    axes.grid(axis="x", alpha=0.3)
    return _png(plt, figure)


def cpu_vs_gpu(table: pl.DataFrame) -> bytes:
    """Grouped bars: CPU time in operators vs GPU kernel time per iteration, per variant."""
    rows = table.filter(pl.col("gpu_us_per_iter").is_not_null())
    variants = rows["variant"].to_list()
    plt, figure, axes = _figure(0.45 * len(variants) + 1.6)
    positions = list(range(len(variants)))
    height = 0.4
    axes.barh(
        [p - height / 2 for p in positions], rows["cpu_us_per_iter"].to_list(), height,
        label="CPU time in operators", color="#7570b3",
    )  # fmt: skip
    axes.barh(
        [p + height / 2 for p in positions], rows["gpu_us_per_iter"].to_list(), height,
        label="GPU kernel time", color="#1b9e77",
    )  # fmt: skip
    axes.set_yticks(positions, variants)
    axes.invert_yaxis()
    axes.set_xlabel("µs per iteration")
    axes.set_title("CPU vs GPU time per iteration")
    axes.legend(fontsize=8, loc="lower right")
    axes.grid(axis="x", alpha=0.3)
    return _png(plt, figure)
