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
# first seven are the Okabe-Ito colour-blind-safe palette; the rest were chosen so that every
# pair of categories stays at least MIN_CATEGORY_DELTA_E apart in CIELAB (CIE76), neighbours
# such as mask, elementwise and reduction or normalization and communication included (tests
# check it), and are drawn with hatching too, so no two rely on a hue difference alone.
CATEGORY_STYLES: dict[str, tuple[str, str]] = {
    "fused_attention": ("#009E73", ""),
    "gemm": ("#E69F00", ""),
    "softmax": ("#CC79A7", ""),
    "memcpy": ("#D55E00", ""),
    "mask": ("#0072B2", ""),
    "elementwise": ("#66CCEE", ""),
    "transpose": ("#F0E442", ""),
    "copy": ("#000000", ""),
    "convolution": ("#8B4513", "//"),
    "memset": ("#EE8866", "//"),
    "fill": ("#B2DF8A", "//"),
    "reduction": ("#6A3D9A", "//"),
    "normalization": ("#882255", "//"),
    "indexing": ("#999933", "//"),
    "optimizer": ("#4D4D4D", "//"),
    "communication": ("#EE3377", "//"),
    "other": ("#DDDDDD", "//"),
}
MIN_CATEGORY_DELTA_E = 30.0
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
    absolute.tick_params(axis="y", length=0)  # beside a two-line label a tick reads as a character
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
    """Per variant: CPU operator time and GPU busy time per iteration as grouped bars on a
    linear axis (lengths compare honestly; each bar carries its value, so a short one still
    reads), and beside them CPU time ÷ GPU busy time, the ratio the bars show."""
    rows = table.filter(pl.col("gpu_busy_us_per_iter").is_not_null())
    variants = rows["variant"].to_list()
    cpu = rows["cpu_op_us_per_iter"].to_list()
    gpu = rows["gpu_busy_us_per_iter"].to_list()
    ratios = [c / g if c is not None and g else None for c, g in zip(cpu, gpu, strict=True)]
    plt = _pyplot()
    figure, (times, ratio) = plt.subplots(
        1, 2, figsize=(12, 0.5 * len(variants) + 1.8), dpi=100,
        gridspec_kw={"width_ratios": [3, 1.3]}, sharey=True,
    )  # fmt: skip
    positions = list(range(len(variants)))
    height = 0.4
    for offset, values, label, colour in (
        (-height / 2, cpu, "CPU operator time", "#0072B2"),
        (height / 2, gpu, "GPU busy time", "#E69F00"),
    ):
        shown = [v or 0.0 for v in values]
        bars = times.barh([p + offset for p in positions], shown, height, label=label,
                          color=colour)  # fmt: skip
        _label_bars(times, bars, [_value(v) for v in values])
    times.set_yticks(positions, variants)
    times.tick_params(axis="y", length=0)  # a tick beside a two-line label reads as a character
    times.invert_yaxis()
    times.set_xlabel("µs per iteration")
    _plain_ticks(times, log=False)
    times.margins(x=0.12)  # room for the last label
    times.set_title("CPU operator time and GPU busy time per iteration")
    times.legend(fontsize=8, loc="best")
    bars = ratio.barh(positions, [r or 0.0 for r in ratios], 0.6, color="#999999")
    _label_bars(ratio, bars, [_ratio(r) for r in ratios])
    ratio.axvline(1.0, color="black", linewidth=0.8, linestyle="--")
    ratio.set_xlabel("CPU operator time ÷ GPU busy time")
    ratio.margins(x=0.15)
    ratio.grid(axis="x", alpha=0.3)
    ratio.set_title("ratio (1: equal)")
    figure.tight_layout()
    return _png(plt, figure)


def _label_bars(axes: Any, bars: Any, labels: list[str]) -> None:
    """Each bar's value written just past its end ("" for none)."""
    for bar, label in zip(bars, labels, strict=True):
        if label:
            end = (bar.get_x() + bar.get_width(), bar.get_y() + bar.get_height() / 2)
            axes.annotate(
                label, end, xytext=(3, 0), textcoords="offset points", va="center", fontsize=7
            )


def _value(us: float | None) -> str:
    """A time as its bar's label: whole µs from 10 on, three figures below."""
    if us is None:
        return ""
    return f"{us:,.0f}" if us >= 10 else f"{us:.3g}"


def _ratio(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:,.0f}" if value >= 10 else f"{value:.2g}"
