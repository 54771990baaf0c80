"""What a capture manifest says about a variant's attention call that its trace cannot: the
per-sequence lengths of a variable-length (nested) batch, and the share of blocks a flex
block mask skips (its contents are not in the trace).

A fact applies to a call only where the call's recorded shapes agree with the manifest's:
lengths where the call is variable-length and its batch, total query (and key) tokens and
longest sequence are the lengths' count, sum and maximum; a block sparsity where the call is
flex with a block mask and its batch, heads, sequence lengths and head size are the
manifest's. A fact that does not fit is not used (the FLOPs keep their upper-bound note).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import polars as pl

# The manifest's attention facts (capture.cases.facts) that identify the call.
_SHAPE_KEYS = ("batch", "heads_q", "seq_q", "seq_kv", "head_dim")


@dataclass(frozen=True)
class CaptureFacts:
    """A variant's attention facts from its capture manifest (``variants.<name>.attention``)."""

    shape: tuple[tuple[str, int], ...] = ()  # (column, value) of _SHAPE_KEYS the manifest gives
    lengths: tuple[int, ...] = ()  # per sequence of a variable-length batch (q and kv alike)
    block_sparsity_pct: float | None = None  # share of a flex block mask's blocks skipped

    @classmethod
    def from_manifest(cls, attention: Mapping[str, object] | None) -> CaptureFacts | None:
        """From a manifest entry's ``attention`` dict; None where it states neither fact.
        Values of the wrong type are ignored (a hand-written manifest)."""
        if not attention:
            return None
        lengths = attention.get("lengths")
        good_lengths = (
            tuple(lengths)
            if isinstance(lengths, list)
            and lengths
            and all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in lengths)
            else ()
        )
        sparsity = attention.get("block_sparsity_pct")
        good_sparsity = (
            float(sparsity)
            if isinstance(sparsity, int | float)
            and not isinstance(sparsity, bool)
            and 0 <= sparsity < 100
            else None
        )
        if not good_lengths and good_sparsity is None:
            return None
        shape = tuple(
            (key, value)
            for key in _SHAPE_KEYS
            if isinstance(value := attention.get(key), int) and not isinstance(value, bool)
        )
        return cls(shape, good_lengths, good_sparsity)


def with_capture_facts(calls: pl.DataFrame, facts: CaptureFacts | None) -> pl.DataFrame:
    """``calls`` plus ``known_sq``, ``known_sqsq``, ``known_sqsk`` (sums over the manifest's
    sequences, where its lengths fit the call) and ``known_block_share`` (the share of blocks
    computed, where its block sparsity fits): null where no fact fits."""
    lengths = facts.lengths if facts else ()
    sparsity = facts.block_sparsity_pct if facts else None
    fits_lengths = pl.lit(bool(lengths)) & _fits_lengths(lengths)
    same_shape = pl.all_horizontal(
        [pl.col(column) == value for column, value in (facts.shape if facts else ())]
        or [pl.lit(True)]
    )
    block = (pl.col("implementation") == "flex") & (pl.col("mask") == "block")
    fits_blocks = pl.lit(sparsity is not None) & block & same_shape
    sums = {
        "known_sq": sum(lengths),
        "known_sqsq": sum(n * n for n in lengths),
        "known_sqsk": sum(n * n for n in lengths),
    }
    share = (100 - sparsity) / 100 if sparsity is not None else None
    return calls.with_columns(
        **{
            name: pl.when(fits_lengths.fill_null(False)).then(value) for name, value in sums.items()
        },
        known_block_share=pl.when(fits_blocks.fill_null(False)).then(pl.lit(share, pl.Float64)),
    )


def _fits_lengths(lengths: tuple[int, ...]) -> pl.Expr:
    """The call is variable-length with as many sequences, as many query tokens (and key
    tokens where recorded) and the same longest sequence as ``lengths``."""
    if not lengths:
        return pl.lit(False)
    total, longest = sum(lengths), max(lengths)
    keys = pl.col("tokens_kv").is_null() | (pl.col("tokens_kv") == total)
    return (
        (pl.col("varlen").fill_null(False) | pl.col("nested").fill_null(False))
        & (pl.col("batch") == len(lengths))
        & (pl.col("tokens_q") == total)
        & (pl.col("seq_q") == longest)
        & (pl.col("seq_kv") == longest)
        & keys
    )
