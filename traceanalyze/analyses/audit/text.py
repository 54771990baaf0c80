"""The words of a finding's detail: timestamps as the trace writes them, and the first examples.

Times are written in microseconds with three decimals, as Kineto writes ``ts``, from the
integer nanoseconds the frames hold (no float rounding: a timestamp of 1.7e18 ns keeps its
last digit), so an example can be found in the raw JSON as it is written there.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from traceanalyze.analyses.audit.rules import EXAMPLES


def micros(ns: int | None) -> str:
    """``ns`` nanoseconds as Kineto's microseconds with three decimals."""
    if ns is None:
        return "?"
    sign = "-" if ns < 0 else ""
    whole, part = divmod(abs(int(ns)), 1000)
    return f"{sign}{whole}.{part:03d}"


def examples(rows: pl.DataFrame, describe: pl.Expr, ts: str = "ts_ns") -> str:
    """The first :data:`EXAMPLES` rows by ``ts``, each as ``describe`` (a string expression)
    followed by its timestamp (and its rank where ``rows`` hold several); "(+N more)" for the
    rest."""
    if not rows.height:
        return ""
    # A folder of ranks: each example names its rank (the folder audit's examples of two ranks
    # otherwise read alike).
    ranked = "rank" in rows.columns and rows["rank"].n_unique() > 1
    where = pl.format(" on rank {}", "rank") if ranked else pl.lit("")
    first = (
        rows.sort(ts, nulls_last=True)
        .head(EXAMPLES)
        .select(describe.alias("what"), ts, where.alias("where"))
    )
    # At most EXAMPLES rows: a few strings.
    said = [f"{what} at ts {micros(at)} µs{on}" for what, at, on in first.iter_rows()]
    more = rows.height - len(said)
    return "; ".join(said) + (f" (+{more:,} more)" if more > 0 else "")


# Names in an example are cut to this many characters (a template kernel's is thousands).
NAME_CHARS = 60


def clipped(column: str) -> pl.Expr:
    """``column``'s text cut to NAME_CHARS characters, "…" marking a cut."""
    text = pl.col(column).fill_null("?")
    return (
        pl.when(text.str.len_chars() > NAME_CHARS)
        .then(pl.concat_str(text.str.slice(0, NAME_CHARS - 1), pl.lit("…")))
        .otherwise(text)
    )


def counts_by(rows: pl.DataFrame, column: str) -> str:
    """``name N, other M`` of ``column``'s values, most frequent first."""
    counted = rows.group_by(column).len().sort(["len", column], descending=[True, False])
    # One row per distinct value: a handful (launch APIs, kinds).
    return ", ".join(f"{value} {n:,}" for value, n in counted.iter_rows())


def sentence(parts: Sequence[str]) -> str:
    """Non-empty ``parts`` joined into one detail."""
    return "; ".join(part for part in parts if part)
