"""The columnar call tree against a brute-force reference, on random nested intervals.

Times sit on a coarse grid so that shared starts, shared ends, back-to-back siblings and
zero-length intervals at their parent's edges all occur often.
"""

from __future__ import annotations

import random

import polars as pl
import pytest

from traceanalyze.link import with_call_tree

CATS = ("user_annotation", "cpu_op", "cuda_runtime")


def nested_intervals(rng: random.Random, start: int, end: int, level: int) -> list[tuple[int, int]]:
    """Random children inside [start, end], recursively: (ts, dur) pairs."""
    spans: list[tuple[int, int]] = []
    cursor = start
    while cursor <= end and len(spans) < 6 and level < 6:
        child_start = rng.choice([cursor, cursor, rng.randint(cursor, end)])
        child_end = rng.choice([child_start, end, rng.randint(child_start, end)])
        spans.append((child_start, child_end - child_start))
        if child_end > child_start:
            spans.extend(nested_intervals(rng, child_start, child_end, level + 1))
        cursor = child_end + rng.choice([0, 0, 1])  # often back to back
        if rng.random() < 0.2:
            break
    return spans


def random_cpu_frame(seed: int) -> pl.DataFrame:
    rng = random.Random(seed)
    rows = []
    for tid in (1, 2, 3):
        rows.extend((tid, ts, dur) for ts, dur in nested_intervals(rng, 0, 60, 0))
    # Identical spans are dropped: which of two encloses the other is the category tie-break,
    # which test_link covers; the reference below does not model it.
    rows = sorted(set(rows))
    return pl.DataFrame(
        {
            "rank": [0] * len(rows),
            "pid": [7] * len(rows),
            "tid": [tid for tid, _, _ in rows],
            "cat": [rng.choice(CATS) for _ in rows],
            "name": [f"op{i}" for i in range(len(rows))],
            "ts_ns": [ts for _, ts, _ in rows],
            "dur_ns": [dur for _, _, dur in rows],
        },
        schema_overrides={"rank": pl.Int32},
    )


def reference_tree(cpu: pl.DataFrame) -> tuple[list[int], list[int | None]]:
    """Depth = earlier intervals on the thread still open at this start; parent = the latest
    of them. Open at t: ends after t, or is zero-length at t itself."""
    rows = cpu.select("tid", "ts_ns", "dur_ns").rows()
    depths: list[int] = []
    parents: list[int | None] = []
    for i, (tid, ts, _) in enumerate(rows):
        open_before = [
            j
            for j, (other_tid, other_ts, other_dur) in enumerate(rows[:i])
            if other_tid == tid
            and (other_ts + other_dur > ts or (other_dur == 0 and other_ts == ts))
        ]
        depths.append(len(open_before))
        parents.append(open_before[-1] if open_before else None)
    return depths, parents


@pytest.mark.parametrize("seed", range(40))
def test_depth_and_parent_match_the_definition(seed: int) -> None:
    tree = with_call_tree(random_cpu_frame(seed))
    assert tree["op_id"].to_list() == list(range(tree.height))
    depths, parents = reference_tree(tree)
    assert tree["depth"].to_list() == depths
    assert tree["parent_id"].to_list() == parents
