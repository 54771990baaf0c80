"""Renderers for `roofline` and `explain`: a result in, a ``str`` out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import polars as pl

from traceanalyze.analyses.roofline.model import TOP_OPS, Roofline
from traceanalyze.analyses.variants.explain import Explanation
from traceanalyze.names import with_readable_names
from traceanalyze.render.formats import Forms, Labelled, figures_row, labelled
from traceanalyze.render.headings import heading
from traceanalyze.render.memory.tables import memory_change_markdown
from traceanalyze.render.table import markdown_table
from traceanalyze.tables import conform

FIGURE_COLUMNS = (
    "op_name", "shapes", "dtype", "count_per_iter", "gpu_us", "gpu_us_per_iter",
    "share_of_gpu_activity_pct", "tflops", "tbps", "intensity", "peak_tflops",
    "pct_of_roofline", "bound",
)  # fmt: skip
VERDICT_COLUMNS = ("op_name", "shapes", "verdict")
WAVE_COLUMNS = (
    "name", "count_per_iter", "us_per_iter", "grid_blocks", "blocks_per_wave", "waves",
    "last_wave_fill_pct", "wave_efficiency_pct",
)  # fmt: skip
PART_COLUMNS = ("part", "status", "base_us_per_iter", "new_us_per_iter", "us_per_iter_delta",
                "what")  # fmt: skip
PEAK_COLUMNS = ("device_name", "gpu", "peak_bf16_tflops", "peak_fp16_tflops",
                "peak_tf32_tflops", "peak_fp32_tflops", "peak_tbps", "peak_source")  # fmt: skip


ROOFLINE_FIGURES = ("gpu_activity_us_per_iter", "modelled_pct", "has_shapes", "notes")


def _limited(result: Roofline, top: int | None) -> Roofline:
    """``result`` with its lists of rows limited to the first ``top``."""
    if top is None:
        return result
    return replace(
        result, ops=result.ops.head(top), unmodelled=result.unmodelled.head(top),
        waves=result.waves.head(top),
    )  # fmt: skip


def _peaks(result: Roofline) -> pl.DataFrame:
    """The peaks of each GPU model the trace ran on (one row per model)."""
    return result.devices.drop("rank", "device").unique(maintain_order=True)


def roofline_record(result: Roofline, *, top: int | None = None) -> dict[str, Any]:
    """The JSON form of one trace's roofline (keys listed in the README); ``top`` limits its
    lists of rows, as it limits the markdown's tables."""
    result = _limited(result, top)
    figures = conform(figures_row(result, ROOFLINE_FIGURES), "roofline.figures")
    return figures.row(0, named=True) | {
        "devices": conform(_peaks(result), "roofline.devices").to_dicts(),
        **{name: conform(getattr(result, name), f"roofline.{name}").to_dicts()
           for name in ("ops", "unmodelled", "waves")},
    }  # fmt: skip


def roofline_markdown(result: Roofline, *, top: int | None = None, full_names: bool = False) -> str:
    """The roofline for people: the peaks, the op figures, verdicts, what is not modelled and
    the kernels' waves. ``top`` limits every table."""
    parts = [_roofline_intro(result)]
    if result.notes:
        parts.append("\n".join(f"- {note[0].upper()}{note[1:]}." for note in result.notes) + "\n")
    ops = result.ops.head(top) if top else result.ops
    if ops.height:
        parts += [
            _table(ops, FIGURE_COLUMNS),
            f"**Verdicts** (the {min(ops.height, top or TOP_OPS)} ops with the most GPU time)\n",
            _table(ops.head(top or TOP_OPS), VERDICT_COLUMNS),
        ]
    unmodelled = result.unmodelled.head(top) if top else result.unmodelled
    if unmodelled.height:
        parts += ["**Not modelled** (GPU time without a FLOP/byte figure)\n",
                  _table(unmodelled, tuple(unmodelled.columns))]  # fmt: skip
    waves = result.waves.filter(pl.col("waves").is_not_null()).head(top or TOP_OPS)
    if waves.height:
        if not full_names:
            waves = with_readable_names(waves)
        parts += ["**Waves** (kernels with the most time; waves = grid blocks / (SMs x "
                  "resident blocks per SM))\n", _table(waves, WAVE_COLUMNS)]  # fmt: skip
    return "\n".join(parts)


def _roofline_intro(result: Roofline) -> str:
    devices = result.devices.drop("rank", "device").unique(maintain_order=True)
    known = devices.filter(pl.col("peak_tbps").is_not_null())
    if known.height:
        peaks = "; ".join(
            f"{row['gpu'] or row['device_name']}: bf16 {_tflops(row['peak_bf16_tflops'])}, "
            f"fp32 {_tflops(row['peak_fp32_tflops'])}, {row['peak_tbps']:g} TB/s "
            f"({row['peak_source']})"
            for row in known.to_dicts()  # one row per GPU model: rendering, not analysing
        )
    else:
        peaks = "none known"
    modelled = (
        f"{result.ops.height} op shapes modelled, {result.modelled_pct:.1f}% of the GPU "
        f"activity time ({result.gpu_activity_us_per_iter:,.1f} µs per iteration)"
    )
    return (
        f"Peaks: {peaks}. {modelled}. Bytes are a lower bound (each input read once, each "
        "output written once), so memory-bound percentages are upper bounds.\n"
    )


def _tflops(value: float | None) -> str:
    return "n/a" if value is None else f"{value:g} TFLOP/s"


def _table(frame: pl.DataFrame, columns: Sequence[str]) -> str:
    kept = [c for c in columns if c in frame.columns and not frame[c].is_null().all()]
    return markdown_table(frame.select(kept).rename({c: heading(c) for c in kept}))


def explain_markdown(result: Explanation, *, charts: Sequence[str] = (), **_: Any) -> str:
    total = float(result.parts["us_per_iter_delta"].sum())
    # The traces' labels head the columns, unless they cannot (equal, or a heading's name).
    labels = {result.base, result.new}
    base, new = (
        (result.base, result.new)
        if len(labels) == 2 and not labels & {"figure", "change"}
        else ("base", "new")
    )
    figures = pl.DataFrame(
        {
            "figure": list(result.base_figures),
            base: list(result.base_figures.values()),
            new: list(result.new_figures.values()),
        }
    ).with_columns(change=pl.col(new) - pl.col(base))
    parts = [
        f"{result.sentence}\n",
        f"**Parts of the change in GPU span per iteration** (they add up to {total:+,.2f} µs, "
        "the change in span)\n",
        _table(result.parts, PART_COLUMNS),
        *[f"![Waterfall of the GPU span's parts]({chart})\n" for chart in charts],
        "**Per-iteration figures** (µs; span = busy + idle, busy = activity - overlap)\n",
        markdown_table(figures),
        "**CPU side** (µs per iteration)\n",
        markdown_table(result.cpu.rename({"base": base, "new": new, "delta": "change"})),
        *memory_change_markdown(result.memory),
    ]
    return "\n".join(parts)


# `roofline`: JSON one object per trace (a list for several); tables the op rows (the
# default), what is not modelled, the kernels' waves, the GPU peaks and the figures (with a
# ``variant`` column for several; ``top`` limits the rows); markdown one section per trace.
ROOFLINE: Forms[Labelled[Roofline]] = labelled(
    Forms(
        markdown=roofline_markdown,
        json=lambda r, *, top=None, **_: roofline_record(r, top=top),
        tables={
            **{
                name: (lambda r, *, top=None, _name=name, **_: getattr(_limited(r, top), _name))
                for name in ("ops", "unmodelled", "waves")
            },
            "devices": lambda r, **_: _peaks(r),
            "figures": lambda r, **_: figures_row(r, ROOFLINE_FIGURES),
        },
        command="roofline",
    ),
)


def explain_figures(result: Explanation) -> pl.DataFrame:
    """The explanation's figures as one row (its JSON's scalars and the memory peaks)."""
    record = result.to_record()
    memory = record.pop("memory") or {}
    for name in ("parts", "cpu"):
        del record[name]
    peaks = {k: memory.get(k) for k in EXPLAIN_MEMORY_FIGURES}
    return pl.DataFrame([record | peaks], infer_schema_length=None)


def explain_blocks(result: Explanation) -> pl.DataFrame:
    """The blocks behind the change in peak memory (none without memory events)."""
    return result.memory.blocks if result.memory is not None else pl.DataFrame()


EXPLAIN_MEMORY_FIGURES = ("base_peak_increase_bytes_per_iter", "new_peak_increase_bytes_per_iter",
                          "peak_increase_bytes_per_iter_delta")  # fmt: skip
# `explain`: JSON the explanation's record; tables its parts (the default), the CPU side, the
# figures and the memory blocks; markdown the sentence, the parts, the figures they add up to
# and the CPU side.
EXPLAIN: Forms[Explanation] = Forms(
    markdown=explain_markdown,
    json=lambda result, **_: result.to_record(),
    tables={
        "parts": "parts",
        "cpu": "cpu",
        "figures": lambda result, **_: explain_figures(result),
        "memory_blocks": lambda result, **_: explain_blocks(result),
    },
    command="explain",
)
