"""The `explain` waterfall: BASE's GPU span, each part's change, NEW's span. Pure: an
explanation in, PNG bytes out (the conventions of :mod:`traceanalyze.render.charts`)."""

from __future__ import annotations

import textwrap

from traceanalyze.analyses.variants.explain import Explanation

# The charts module's helpers, shared so that every chart follows one set of conventions.
from traceanalyze.render.charts import _plain_ticks, _png, _pyplot

# Okabe-Ito colours (colour-blind safe), told apart by hatching too.
TOTAL = ("#999999", "")
DECREASE = ("#0072B2", "")
INCREASE = ("#D55E00", "//")
MINUS = "\u2212"  # the typographic minus, as wide as the plus
# Labels are wrapped at this width, never cut: a chain of ops is read whole.
LABEL_WIDTH = 48


def _label(text: str) -> str:
    """The whole label, wrapped between the ops of a chain where it is long."""
    return "\n".join(textwrap.wrap(text, LABEL_WIDTH, break_on_hyphens=False)) or text


def _signed(delta: float) -> str:
    """A part's change as its bar's label: signed, in µs."""
    return f"{'+' if delta >= 0 else MINUS}{abs(delta):,.1f}"


def waterfall(explanation: Explanation) -> bytes:
    """Horizontal bars, top to bottom: BASE's span, one floating bar per part (its change,
    starting where the previous one ended), NEW's span."""
    parts = explanation.parts
    start = explanation.base_figures["gpu_span_us_per_iter"]
    end = explanation.new_figures["gpu_span_us_per_iter"]
    labels = [f"{explanation.base} GPU span"]
    lefts, widths, styles = [0.0], [start], [TOTAL]
    values = [f"{start:,.1f} µs"]
    level = start
    lead = {"added": "new: ", "removed": "gone: "}
    rows = zip(parts["part"].to_list(), parts["status"].to_list(),
               parts["us_per_iter_delta"].to_list(), strict=True)  # fmt: skip
    for part, status, delta in rows:
        labels.append(_label(lead.get(status, "") + part))
        lefts.append(min(level, level + delta))
        widths.append(abs(delta))
        styles.append(DECREASE if delta < 0 else INCREASE)
        values.append(_signed(delta))
        level += delta
    labels.append(f"{explanation.new} GPU span")
    lefts.append(0.0)
    widths.append(end)
    styles.append(TOTAL)
    values.append(f"{end:,.1f} µs")
    plt = _pyplot()
    lines = sum(label.count("\n") + 1 for label in labels)
    figure, axes = plt.subplots(figsize=(11, 0.3 * lines + 0.15 * len(labels) + 1.8), dpi=100)
    positions = list(range(len(labels)))
    for position, left, width, (colour, hatch), value in zip(
        positions, lefts, widths, styles, values, strict=True
    ):
        axes.barh(position, width, left=left, color=colour, hatch=hatch, edgecolor="#444444",
                  linewidth=0.3)  # fmt: skip
        # The value just past the bar's right end, so that a sliver of a part still reads.
        axes.annotate(value, (left + width, position), xytext=(3, 0), textcoords="offset points",
                      va="center", fontsize=7)  # fmt: skip
    axes.margins(x=0.1)
    axes.set_yticks(positions, labels, fontsize=8)
    axes.tick_params(axis="y", length=0)  # a tick beside a wrapped label reads as a character
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
