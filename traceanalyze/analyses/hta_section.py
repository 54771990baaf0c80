"""An optional report section from Holistic Trace Analysis (the ``hta`` extra): its temporal
breakdown (compute / non-compute / idle) and idle-time breakdown per variant.

HTA reads a folder of per-rank traces, so each trace is linked into a temporary folder of its
own. Its output is reported as HTA computes it; where a variant fails in HTA the section says so.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import polars as pl

from traceanalyze.errors import AnalysisError
from traceanalyze.load.variants import VariantSet
from traceanalyze.render.table import markdown_table


def require_hta() -> type:
    """HTA's ``TraceAnalysis`` class, or an :class:`AnalysisError` saying how to install it."""
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError:
        raise AnalysisError(
            "--hta needs Holistic Trace Analysis, which is not installed",
            None,
            "Install the extra: pip install 'traceanalyze[hta]'.",
        ) from None
    return TraceAnalysis  # type: ignore[no-any-return]


def hta_section(variants: VariantSet) -> str:
    """Markdown: one row per variant with HTA's temporal and idle breakdown."""
    analysis_class = require_hta()
    rows = []
    for variant in variants.loaded:
        if variant.path is None:
            continue
        rows.append({"variant": variant.label, **_breakdown(analysis_class, variant.path)})
    table = pl.DataFrame(rows)
    return (
        "## Holistic Trace Analysis cross-view\n\n"
        "HTA's temporal breakdown of rank 0 (its own definitions: idle = no kernel running, "
        "compute = computation kernels, non-compute = memory and communication kernels) and "
        "its idle-time breakdown (µs idle waiting on the host, on another kernel, or other).\n\n"
        + markdown_table(table)
    )


def _breakdown(analysis_class: type, trace: Path) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="traceanalyze-hta-") as folder, _hta_quiet():
        name = trace.name if trace.name.endswith((".json", ".json.gz")) else trace.name + ".json"
        os.symlink(trace.resolve(), Path(folder) / name)
        try:
            analyzer = analysis_class(trace_dir=folder)
            temporal = analyzer.get_temporal_breakdown(visualize=False)
            idle, _ = analyzer.get_idle_time_breakdown(visualize=False)
        except Exception as exc:  # HTA raises many kinds; report it rather than abort the report
            return {"error": f"{type(exc).__name__}: {exc}"[:120]}
    first = temporal.iloc[0]
    row: dict[str, object] = {
        key: float(first[key])
        for key in temporal.columns
        if key != "rank" and isinstance(first[key], (int, float))
    }
    waits = idle[idle["rank"] == first["rank"]].groupby("idle_category")["idle_time"].sum()
    row |= {f"idle {category} (us)": float(waits.get(category, 0.0)) for category in _IDLE}
    return row


_IDLE = ("host_wait", "kernel_wait", "other")


@contextlib.contextmanager
def _hta_quiet() -> Iterator[None]:
    """HTA logs its parsing progress at INFO, some of it to standard output, where the report
    may be going: keep it to warnings, on standard error."""
    logger = logging.getLogger("hta")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        logger.setLevel(level)
