"""The `explain` waterfall: BASE's GPU span, each part's change, NEW's span. Pure: an
explanation in, PNG bytes out (the conventions of :mod:`traceanalyze.render.charts`)."""

from __future__ import annotations

from traceanalyze.analyses.explain import Explanation

# The charts module's helpers, shared so that every chart follows one set of conventions.
from traceanalyze.render.charts import _plain_ticks, _png, _pyplot

# Okabe-Ito colours (colour-blind safe), told apart by hatching too.
TOTAL = ("#999999", "")
DECREASE = ("#0072B2", "")
INCREASE = ("#D55E00", "//")
LABEL_WIDTH = 60


def _label(text: str) -> str:
    return text if len(text) <= LABEL_WIDTH else text[: LABEL_WIDTH - 1] + "…"


def waterfall(explanation: Explanation) -> bytes:
    """Horizontal bars, top to bottom: BASE's span, one floating bar per part (its change,
    starting where the previous one ended), NEW's span."""
    parts = explanation.parts
    start = explanation.base_figures["gpu_span_us_per_iter"]
    end = explanation.new_figures["gpu_span_us_per_iter"]
    labels = [f"{explanation.base} GPU span"]
    lefts, widths, styles = [0.0], [start], [TOTAL]
    level = start
    lead = {"added": "new: ", "removed": "gone: "}
    rows = zip(parts["part"].to_list(), parts["status"].to_list(),
               parts["us_per_iter_delta"].to_list(), strict=True)  # fmt: skip
    for part, status, delta in rows:
        labels.append(_label(lead.get(status, "") + part))
        lefts.append(min(level, level + delta))
        widths.append(abs(delta))
        styles.append(DECREASE if delta < 0 else INCREASE)
        level += delta
    labels.append(f"{explanation.new} GPU span")
    lefts.append(0.0)
    widths.append(end)
    styles.append(TOTAL)
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(9, 0.42 * len(labels) + 1.8), dpi=100)
    positions = list(range(len(labels)))
    for position, left, width, (colour, hatch) in zip(positions, lefts, widths, styles,
                                                      strict=True):  # fmt: skip
        axes.barh(position, width, left=left, color=colour, hatch=hatch, edgecolor="#444444",
                  linewidth=0.3)  # fmt: skip
    axes.set_yticks(positions, labels, fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel("GPU span per iteration (µs): busy + idle, stream overlap counted once")
    _plain_ticks(axes, log=False)
    axes.set_title(f"Why {explanation.new} differs from {explanation.base}: the GPU span's parts")
    handles = [
        plt.Rectangle((0, 0), 1, 1, color=c, hatch=h, ec="#444444", lw=0.3)
        for c, h in (TOTAL, DECREASE, INCREASE)
    ]
    axes.legend(handles, ["span", "less time", "more time"], fontsize=8, loc="upper left",
                bbox_to_anchor=(1.01, 1.0))  # fmt: skip
    figure.tight_layout()
    return _png(plt, figure)
