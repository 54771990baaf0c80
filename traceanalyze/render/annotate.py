"""An :class:`~traceanalyze.analyses.annotate.Annotation` as Chrome trace JSON: the members
each GPU activity's ``args`` gain, and the counter (ph "C"), flow (ph "s"/"f") and instant
(ph "i") events added after the trace's own. Built column by column; times are written as
microseconds with three decimals from integer nanoseconds, so no digit is lost to a float."""

from __future__ import annotations

import json
from collections.abc import Mapping

import polars as pl

from traceanalyze.analyses.annotate import ACTIVITY_COLUMNS, Annotation
from traceanalyze.load.annotated import ACTIVITY_KEY
from traceanalyze.render.report.findings import sentence

# Prefix of every args key the annotation adds, and the category of every event it adds.
PREFIX = "traceanalyze."
CATEGORY = "traceanalyze"
# Digits kept per figure (the others are integers or text).
ROUNDING = {"theoretical_occupancy_pct": 2, "roofline_pct": 1}


def json_value(value: pl.Expr) -> pl.Expr:
    """``value`` as JSON text (strings quoted and escaped; null for null)."""
    encoded = pl.struct(value.alias("v")).struct.json_encode()
    return encoded.str.strip_prefix('{"v":').str.strip_suffix("}")


def json_us(ns: pl.Expr) -> pl.Expr:
    """Integer nanoseconds as a JSON number of microseconds with three decimals."""
    fraction = (ns % 1000).cast(pl.String).str.zfill(3)
    return pl.format("{}.{}", ns // 1000, fraction)


def _member(key: str, value: pl.Expr) -> pl.Expr:
    """``"key":value``, or null where the value is (so the member is left out)."""
    return pl.when(value.is_not_null()).then(pl.lit(f'"{key}":') + json_value(value))


def activity_args(annotation: Annotation) -> pl.DataFrame:
    """``ACTIVITY_KEY`` and ``members``: the text to add inside each activity's args object
    (``"traceanalyze.category":"gemm",...``), figures not computed left out."""
    members = [
        _member(PREFIX + column, pl.col(column).round(ROUNDING[column]))
        if column in ROUNDING
        else _member(PREFIX + column, pl.col(column))
        for column in ACTIVITY_COLUMNS
    ]
    return annotation.activities.select(
        *ACTIVITY_KEY, members=pl.concat_str(members, separator=",", ignore_nulls=True)
    )


def _event(**fields: pl.Expr) -> pl.Expr:
    """One JSON object per row from already encoded ``fields``."""
    pieces = [pl.lit(f'"{name}":') + value for name, value in fields.items()]
    return pl.concat_str([pl.lit("{"), pl.concat_str(pieces, separator=","), pl.lit("}")])


def _common(phase: str) -> dict[str, pl.Expr]:
    return {"ph": pl.lit(f'"{phase}"'), "cat": pl.lit(f'"{CATEGORY}"')}


def written_id(column: str, text_ids: Mapping[int, str]) -> pl.Expr:
    """A pid or tid as the trace wrote it: its number, or the text the loader numbered."""
    as_text = {number: json.dumps(text) for number, text in text_ids.items()}
    return pl.col(column).replace_strict(
        as_text, default=pl.col(column).cast(pl.String), return_dtype=pl.String
    )


def _written(number: int, text_ids: Mapping[int, str]) -> str:
    return json.dumps(text_ids[number]) if number in text_ids else str(number)


def counter_events(counters: pl.DataFrame, text_ids: Mapping[int, str]) -> pl.Series:
    args = pl.format("{{{}:{}}}", json_value(pl.col("series")), pl.col("value"))
    return counters.select(
        _event(
            **_common("C"),
            name=json_value(pl.col("track")),
            pid=written_id("pid", text_ids),
            ts=json_us(pl.col("ts_ns")),
            args=args,
        )
    ).to_series()


def flow_events(copies: pl.DataFrame, text_ids: Mapping[int, str]) -> pl.Series:
    """Each copy's arrow: it starts at the launching op and ends (``bp: e``, bound to the
    enclosing slice) at the copy or set; both ends carry the op chain as the name."""
    shared = {"id": pl.col("flow_id").cast(pl.String), "name": json_value(pl.col("chain"))}
    start = _event(
        **_common("s"),
        **shared,
        pid=written_id("op_pid", text_ids),
        tid=written_id("op_tid", text_ids),
        ts=json_us(pl.col("op_ts_ns")),
    )
    end = _event(
        **_common("f"),
        bp=pl.lit('"e"'),
        **shared,
        pid=written_id("pid", text_ids),
        tid=written_id("tid", text_ids),
        ts=json_us(pl.col("ts_ns")),
    )
    return copies.select(pl.concat_list(start, end).alias("event")).explode("event").to_series()


def marker_events(annotation: Annotation) -> pl.Series:
    """A global instant per finding at the first iteration's start, named by its sentence."""
    findings = pl.DataFrame(
        {
            "name": [sentence(f) for f in annotation.findings],
            "rule": [f.rule for f in annotation.findings],
            "command": [f.command for f in annotation.findings],
        },
        schema={"name": pl.String, "rule": pl.String, "command": pl.String},
    )
    args = pl.format(
        '{{"rule":{},"command":{}}}', json_value(pl.col("rule")), json_value(pl.col("command"))
    )
    return findings.select(
        _event(
            **_common("i"),
            s=pl.lit('"g"'),
            name=json_value(pl.col("name")),
            pid=pl.lit(_written(annotation.marker_pid, annotation.text_ids)),
            ts=json_us(pl.lit(annotation.marker_ts_ns, pl.Int64)),
            args=args,
        )
    ).to_series()


def added_events(annotation: Annotation) -> pl.Series:
    """Every event the annotation adds, as JSON text: counters, arrows, then markers."""
    return pl.concat(
        [
            counter_events(annotation.counters, annotation.text_ids),
            flow_events(annotation.copies, annotation.text_ids),
            marker_events(annotation),
        ]
    ).cast(pl.String)
