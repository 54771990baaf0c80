"""The report's Holistic Trace Analysis section, from the frame of
:func:`~traceanalyze.analyses.report.hta_breakdown.hta_breakdown`."""

from __future__ import annotations

import polars as pl

from traceanalyze.render.table import markdown_table

HEADINGS = {
    "variant": "variant",
    "kernel_span_us_total": "kernel span µs (total)",
    "compute_us_total": "compute µs (total)",
    "non_compute_us_total": "non-compute µs (total)",
    "idle_us_total": "idle µs (total)",
    "compute_pct": "compute %",
    "non_compute_pct": "non-compute %",
    "idle_pct": "idle %",
    "idle_host_wait_us_total": "idle on host µs (total)",
    "idle_kernel_wait_us_total": "idle between kernels µs (total)",
    "idle_other_us_total": "idle other µs (total)",
    "error": "HTA error",
}


def hta_markdown(breakdown: pl.DataFrame) -> str:
    """The section: what HTA's figures are, then one row per variant (an error column only
    where HTA failed on some variant)."""
    columns = [c for c in HEADINGS if c != "error" or breakdown["error"].is_not_null().any()]
    table = breakdown.select(columns).rename({c: HEADINGS[c] for c in columns})
    return (
        "## Holistic Trace Analysis cross-view\n\n"
        "HTA's temporal breakdown of rank 0, in its own definitions (compute = computation "
        "kernels, non-compute = memory and communication kernels, idle = no kernel running, "
        "within the span from the first kernel's start to the last kernel's end) and its "
        "idle-time breakdown (idle waiting on the host, between dependent kernels, or other). "
        "These are **totals over the trace as HTA reads it, not per iteration**: HTA leaves "
        "out the kernels of the last profiler step when a trace has several.\n\n"
        + markdown_table(table)
    )
