"""op_chains: the walk by rows (ids are row positions) against the walk by joins, which defines it.

The chains name an op and its cpu_op ancestors, outermost first, up to ``_MAX_CHAIN`` levels.
"""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_series_equal

import traceanalyze
from traceanalyze.analyses import cputree

REPO = Path(__file__).resolve().parents[1]
CATS = ("cpu_op", "cpu_op", "user_annotation", "cuda_runtime")


def random_forest(seed: int, rows: int = 400) -> pl.DataFrame:
    """Ops numbered by row, each with a parent earlier in the frame (or none), random
    categories, a few null names; chains get deep (a parent is often the row before)."""
    rng = random.Random(seed)
    parents: list[int | None] = [None]
    for row in range(1, rows):
        choice = rng.random()
        parents.append(None if choice < 0.05 else row - 1 if choice < 0.8 else rng.randrange(row))
    return pl.DataFrame(
        {
            "op_id": range(rows),
            "parent_id": parents,
            "name": [None if rng.random() < 0.05 else f"op{row}" for row in range(rows)],
            "cat": [rng.choice(CATS) for _ in range(rows)],
        },
        schema_overrides={"op_id": pl.Int64, "parent_id": pl.Int64},
    )


def by_joins(cpu: pl.DataFrame, ids: pl.Series, monkeypatch: pytest.MonkeyPatch) -> pl.Series:
    with monkeypatch.context() as patch:
        patch.setattr(cputree, "_ids_are_rows", lambda _cpu, _ids: False)
        return cputree.op_chains(cpu, ids)


@pytest.mark.parametrize("seed", range(12))
def test_the_walk_by_rows_equals_the_joins(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    cpu = random_forest(seed)
    rng = random.Random(seed)
    ids = pl.Series("op_id", [rng.choice([None, *range(cpu.height)]) for _ in range(300)])
    assert cputree._ids_are_rows(cpu, ids)
    assert_series_equal(cputree.op_chains(cpu, ids), by_joins(cpu, ids, monkeypatch))


def test_a_chain_deeper_than_the_walk_is_cut_at_its_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Depth 200, one op per level: each way stops after ``_MAX_CHAIN`` levels. (A chain built
    by nesting the levels into each other doubled per level and never finished here.)"""
    depth = 200
    cpu = pl.DataFrame(
        {
            "op_id": range(depth),
            "parent_id": [None, *range(depth - 1)],
            "name": [f"op{row}" for row in range(depth)],
            "cat": ["cpu_op"] * depth,
        },
        schema_overrides={"op_id": pl.Int64, "parent_id": pl.Int64},
    )
    ids = pl.Series("op_id", [depth - 1, 0, None], dtype=pl.Int64)
    chains = cputree.op_chains(cpu, ids)
    deepest = chains[0].to_list()
    assert len(deepest) == cputree._MAX_CHAIN
    assert deepest[-1] == f"op{depth - 1}"
    assert chains[1].to_list() == ["op0"]
    assert chains[2].to_list() == []
    assert_series_equal(chains, by_joins(cpu, ids, monkeypatch))


def test_no_ids_at_all(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu = random_forest(0, rows=20)
    for ids in (pl.Series("op_id", [], pl.Int64), pl.Series("op_id", [None, None], pl.Int64)):
        assert_series_equal(cputree.op_chains(cpu, ids), by_joins(cpu, ids, monkeypatch))


@pytest.mark.parametrize(
    "trace", sorted((REPO / "sample_traces").glob("*/*.json.gz"))[:6], ids=lambda p: p.name
)
def test_every_kernel_of_a_sample_trace(trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = traceanalyze.load(trace, cache=False)
    ids = loaded.gpu["op_id"]
    assert_series_equal(cputree.op_chains(loaded.cpu, ids), by_joins(loaded.cpu, ids, monkeypatch))
