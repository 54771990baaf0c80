"""Renderers for `attention`: an :class:`~traceanalyze.analyses.attention.AttentionResult` in,
text out; and the report's Attention section."""

from __future__ import annotations

from typing import Any

import polars as pl

from traceanalyze.analyses.attention import AttentionResult
from traceanalyze.names import readable_names
from traceanalyze.render.formats import Forms, Labelled, figures_row, labelled
from traceanalyze.render.headings import heading
from traceanalyze.render.table import markdown_table

# The main table for people (JSON and CSV carry every column).
TABLE_COLUMNS = (
    "implementation", "direction", "call_site", "calls_per_iter", "batch", "heads_q",
    "heads_kv", "seq_q", "seq_kv", "head_dim", "gqa_ratio", "dtype", "causal", "mask",
    "kernels_per_call", "gpu_us_per_call", "kv_cache_write_us_per_call", "cpu_us_per_call",
    "flops_per_call", "tflops", "pct_of_peak",
    "peak_dtype", "scores_bytes", "share_of_gpu_activity_pct",
)  # fmt: skip
WHY_NOT_COLUMNS = ("implementation", "call_site", "seq_q", "head_dim", "dtype", "why_not")
FUSED_COLUMNS = ("implementation", "direction", "call_site", "gpu_us_per_call",
                 "fused_estimate_us", "fused_estimate_source")  # fmt: skip
NOTE_COLUMNS = ("implementation", "direction", "call_site", "flops_note")
HOST_COLUMNS = ("kind", "name", "calls_per_iter", "us_per_call", "us_per_iter",
                "plan_builds_per_iter", "note")  # fmt: skip
KERNEL_WIDTH = 60
# Kernels listed per row for people (JSON and CSV list them all), in launch order.
KERNELS_SHOWN = 8
NO_ATTENTION = "No attention calls: no attention op, composed softmax or attention kernel."
NONE_COUNTED = "No attention calls in the counted iterations.\n"


def attention_record(result: AttentionResult) -> dict[str, Any]:
    """The JSON object of `attention` (stable keys: see the README)."""
    return {
        "gpu_activity_us_per_iter": result.gpu_activity_us_per_iter,
        "attention_us_per_iter": result.attention_us_per_iter,
        "has_shapes": result.has_shapes,
        "findings": list(result.findings),
        "notes": list(result.notes),
        "rows": result.rows.to_dicts(),
        "host": result.host.to_dicts(),
    }


def _table(frame: pl.DataFrame, columns: tuple[str, ...]) -> str:
    kept = [c for c in columns if c in frame.columns and not frame[c].is_null().all()]
    shown = frame.select(kept)
    return markdown_table(shown.rename({c: heading(c) for c in kept}))


def attention_markdown(
    result: AttentionResult, *, full_names: bool = False, level: int = 3, **_options: Any
) -> str:
    """Findings first, then the table of calls, why not faster, the composed calls' fused
    estimate, where FLOPs are bounds, the kernels each row ran and the host cost."""
    if result.empty:
        return NO_ATTENTION + "\n"
    mark = "#" * level
    parts = ["\n".join(f"- {sentence}" for sentence in result.findings) + "\n"]
    if result.notes:
        parts.append("\n".join(f"- {n[0].upper()}{n[1:]}." for n in result.notes) + "\n")
    rows = result.rows
    if not rows.height:
        return "\n".join([*parts, NONE_COUNTED])
    parts += [f"{mark} Calls (per iteration and per call)\n", _table(rows, TABLE_COLUMNS)]
    slow = rows.filter(pl.col("why_not").is_not_null())
    if slow.height:
        parts += [f"{mark} Why not a faster SDPA backend\n", _table(slow, WHY_NOT_COLUMNS)]
    fused = rows.filter(pl.col("fused_estimate_us").is_not_null())
    if fused.height:
        parts += [
            f"{mark} Composed attention against a fused kernel\n",
            _table(fused, FUSED_COLUMNS),
        ]
    bounds = rows.filter(pl.col("flops_note").is_not_null())
    if bounds.height:
        parts += [f"{mark} FLOPs that are bounds or unknown\n", _table(bounds, NOTE_COLUMNS)]
    parts += [f"{mark} Kernels each row ran\n", _kernels(rows, full_names)]
    if result.host.height:
        parts += [f"{mark} Host cost of attention libraries\n", _table(result.host, HOST_COLUMNS)]
    return "\n".join(parts)


def _kernels(rows: pl.DataFrame, full_names: bool) -> str:
    """One line per row: its implementation, direction, call site and kernels."""
    # Per row (rows of one site may differ in shape or in the kernels they ran: a line each).
    names = (
        rows.with_row_index("_row")
        .select("_row", "implementation", "direction", "call_site", "kernels")
        .explode("kernels")
    )
    if not full_names and names["kernels"].drop_nulls().len():
        names = names.with_columns(readable_names(names["kernels"], width=KERNEL_WIDTH))
    distinct = pl.col("kernels").drop_nulls().unique(maintain_order=True)
    more = distinct.len().cast(pl.Int64) - KERNELS_SHOWN
    listed = (
        names.group_by("_row", "implementation", "direction", "call_site", maintain_order=True)
        .agg(
            kernels=pl.concat_str(
                distinct.head(KERNELS_SHOWN).str.join(", "),
                pl.when(more > 0).then(pl.format(" (+{} more)", more)).otherwise(pl.lit("")),
            )
        )
        .drop("_row")
    )
    return markdown_table(listed.rename({c: heading(c) for c in listed.columns}))


# `attention`: JSON one object per trace (a list for several); tables the rows (one per call
# site and shape, the default), the host cost and the figures (with a ``variant`` column for
# several); markdown one section per trace.
ATTENTION_FIGURES = ("gpu_activity_us_per_iter", "attention_us_per_iter", "has_shapes")
ATTENTION: Forms[Labelled[AttentionResult]] = labelled(
    Forms(
        markdown=attention_markdown,
        json=lambda result, **_: attention_record(result),
        tables={
            "rows": "rows",
            "host": "host",
            "figures": lambda result, **_: figures_row(result, ATTENTION_FIGURES),
        },
        command="attention",
    ),
    nested_markdown=lambda result, nested, **options: attention_markdown(
        result, level=3 if nested else 2, **options
    ),
)


def attention_section(results: Labelled[AttentionResult]) -> str:
    """The report's Attention section (nothing where no trace holds attention): one trace's
    findings first, then its tables; several traces' findings first, one bullet each, then
    their rows in one table with a ``variant`` column."""
    holding = [(label, r) for label, r in results if not r.empty]
    if not holding:
        return ""
    if len(results) == 1:
        return "## Attention\n\n" + attention_markdown(holding[0][1], level=3)
    findings = [
        f"- **{label}**: " + " ".join(result.findings)
        for label, result in holding
        if result.findings
    ]
    rows = pl.concat(
        [r.rows.select(pl.lit(label).alias("variant"), pl.all()) for label, r in holding],
        how="diagonal_relaxed",
    )
    parts = ["## Attention\n", "\n".join(findings) + "\n"]
    parts += ["### Calls (per iteration and per call)\n", _table(rows, ("variant", *TABLE_COLUMNS))]
    slow = rows.filter(pl.col("why_not").is_not_null())
    if slow.height:
        why = _table(slow, ("variant", *WHY_NOT_COLUMNS))
        parts += ["### Why not a faster SDPA backend\n", why]
    return "\n".join(parts)
