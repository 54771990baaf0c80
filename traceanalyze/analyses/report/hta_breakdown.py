"""Holistic Trace Analysis's view of each variant (the ``hta`` extra): its temporal breakdown
(compute / non-compute / idle) and idle-time breakdown, as one frame for the report.

HTA reads a folder of per-rank traces, so each trace is linked into a temporary folder of its
own. Its figures are kept as HTA computes them, but named as ours are: they are totals over the
trace as HTA reads it (``_us_total``), not per iteration, and HTA leaves out the kernels of the
last profiler step when a trace has several. HTA's own output (some 60 log lines a report) is
captured, never printed; where HTA fails on a variant, the row says why and where.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import tempfile
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl

from traceanalyze.errors import AnalysisError
from traceanalyze.load.variants import VariantSet

# HTA's temporal breakdown columns -> ours (the span is first kernel start to last kernel end).
TEMPORAL = {
    "idle_time(us)": "idle_us_total",
    "compute_time(us)": "compute_us_total",
    "non_compute_time(us)": "non_compute_us_total",
    "kernel_time(us)": "kernel_span_us_total",
    "idle_time_pctg": "idle_pct",
    "compute_time_pctg": "compute_pct",
    "non_compute_time_pctg": "non_compute_pct",
}
# HTA's idle-time categories -> ours.
IDLE = {
    "host_wait": "idle_host_wait_us_total",
    "kernel_wait": "idle_kernel_wait_us_total",
    "other": "idle_other_us_total",
}
# What was behind HTA's failures seen on real traces, by the statement that failed.
KNOWN_CAUSES = {
    # sdpa_cudnn's 0.768 µs memset at ts ...831.095 becomes ts 832, end 831: -1 µs.
    "assert non_compute_time >= 0": (
        "HTA rounds each event's start up and its end down to whole microseconds, so an "
        "activity under 1 µs (a memset, for example) can get a negative duration"
    ),
}
SCHEMA = {
    "variant": pl.String,
    **{column: pl.Float64 for column in (*TEMPORAL.values(), *IDLE.values())},
    "error": pl.String,
}


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


def hta_breakdown(variants: VariantSet) -> pl.DataFrame:
    """One row per loaded variant: HTA's breakdown of rank 0 (columns :data:`SCHEMA`), or, where
    HTA fails on it, the failure in ``error`` and no figures."""
    analysis_class = require_hta()
    rows = [
        {"variant": variant.label, **_breakdown(analysis_class, variant.path)}
        for variant in variants.loaded
        if variant.path is not None
    ]
    return pl.DataFrame(rows, schema=SCHEMA)


def failures(breakdown: pl.DataFrame) -> pl.DataFrame:
    """The variants HTA failed on, with why."""
    return breakdown.filter(pl.col("error").is_not_null()).select("variant", "error")


def describe_error(error: BaseException) -> str:
    """An exception as a cause in words: its type and message, and where HTA raised it (an
    empty ``AssertionError`` says nothing without the assertion it failed)."""
    said = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return said
    last = frames[-1]
    where = _within_package(last.filename)
    statement = f"`{last.line}` failed " if isinstance(error, AssertionError) and last.line else ""
    cause = KNOWN_CAUSES.get(last.line or "")
    return f"{said} ({statement}in {last.name}, {where}:{last.lineno})" + (
        f": {cause}" if cause else ""
    )


def _within_package(filename: str) -> str:
    """``hta/analyzers/x.py`` for a file of HTA's package, else the file's name."""
    parts = Path(filename).parts
    starts = [i for i, part in enumerate(parts) if part == "hta"]
    return "/".join(parts[starts[-1] :]) if starts else Path(filename).name


def _breakdown(analysis_class: type, trace: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="traceanalyze-hta-") as folder, _captured():
        name = trace.name if trace.name.endswith((".json", ".json.gz")) else trace.name + ".json"
        os.symlink(trace.resolve(), Path(folder) / name)
        try:
            analyzer = analysis_class(trace_dir=folder)
            temporal = analyzer.get_temporal_breakdown(visualize=False)
            idle, _ = analyzer.get_idle_time_breakdown(visualize=False)
        except Exception as error:  # HTA raises many kinds; report it rather than abort
            return {"error": describe_error(error)}
    first = temporal.iloc[0]
    row: dict[str, Any] = {ours: float(first[theirs]) for theirs, ours in TEMPORAL.items()}
    waits = idle[idle["rank"] == first["rank"]].groupby("idle_category")["idle_time"].sum()
    row |= {ours: float(waits.get(theirs, 0.0)) for theirs, ours in IDLE.items()}
    return row


@contextlib.contextmanager
def _captured() -> Iterator[None]:
    """Everything HTA says while it runs, kept from the terminal and from the report that may be
    going to standard output: its log records (it logs progress as warnings, which Python's
    last-resort handler prints when no handler is set), its prints and pandas' warnings."""
    logger = logging.getLogger("hta")
    saved = logger.handlers, logger.propagate
    logger.handlers, logger.propagate = [logging.NullHandler()], False
    try:
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
        ):
            # pandas' deprecation warnings under HTA are HTA's to fix (and -W error must not
            # turn them into failures of ours).
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.handlers, logger.propagate = saved
