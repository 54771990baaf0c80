"""The call tree against a brute-force reference, on random nested intervals, by both paths:
the C walk (traceanalyze/_tree.c, where built) and the columnar Polars steps it must equal.

Times sit on a coarse grid so that shared starts, shared ends, back-to-back siblings and
zero-length intervals at their parent's edges all occur often. Call order is (thread, start,
longest first, annotation > op > call, frame order): of two identical spans on one thread,
the one earlier in the frame (the file) encloses the other.
"""

from __future__ import annotations

import itertools
import random

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from traceanalyze import link
from traceanalyze.link import with_call_tree

CATS = ("user_annotation", "cpu_op", "cuda_runtime")
CAT_RANK = {cat: rank for rank, cat in enumerate(CATS)}


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
    # Identical spans are dropped here: which of two encloses the other is the tie rule, which
    # random_frame_with_ties and reference_order below cover.
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


@pytest.fixture(params=["walk", "columnar"])
def tree_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test below by the C walk (skipped where it is not built) and by the Polars steps."""
    if request.param == "walk" and link._tree is None:
        pytest.skip("traceanalyze._tree is not built")
    if request.param == "columnar":
        monkeypatch.setattr(link, "_tree", None)
    return str(request.param)


@pytest.mark.parametrize("seed", range(40))
def test_depth_and_parent_match_the_definition(seed: int, tree_path: str) -> None:
    tree = with_call_tree(random_cpu_frame(seed))
    assert tree["op_id"].to_list() == list(range(tree.height))
    depths, parents = reference_tree(tree)
    assert tree["depth"].to_list() == depths
    assert tree["parent_id"].to_list() == parents


def random_frame_with_ties(seed: int) -> pl.DataFrame:
    """Random nested spans on two processes, a third of them written twice (same thread, start
    and duration; the copy's category often the same), rows shuffled: file order is random."""
    rng = random.Random(seed)
    rows: list[tuple[int, int, int, int, str]] = []
    for pid, tid in ((7, 2), (7, 1), (3, 9)):
        for ts, dur in nested_intervals(rng, 0, 40, 0):
            cat = rng.choice(CATS)
            rows.append((pid, tid, ts, dur, cat))
            if rng.random() < 0.33:
                rows.append((pid, tid, ts, dur, rng.choice([cat, cat, *CATS])))
    rng.shuffle(rows)
    return pl.DataFrame(
        {
            "rank": [0] * len(rows),
            "pid": [row[0] for row in rows],
            "tid": [row[1] for row in rows],
            "cat": [row[4] for row in rows],
            "name": [f"op{i}" for i in range(len(rows))],  # the file position
            "ts_ns": [row[2] for row in rows],
            "dur_ns": [row[3] for row in rows],
        },
        schema_overrides={"rank": pl.Int32},
    )


def reference_order(cpu: pl.DataFrame) -> list[str]:
    """Names in call order, by the definition (Python's sort is stable: frame order last)."""
    rows = cpu.select("rank", "pid", "tid", "ts_ns", "dur_ns", "cat", "name").rows()
    ordered = sorted(rows, key=lambda r: (r[0], r[1], r[2], r[3], -r[4], CAT_RANK[r[5]]))
    return [row[6] for row in ordered]


@pytest.mark.parametrize("seed", range(30))
def test_ties_keep_frame_order(seed: int, tree_path: str) -> None:
    frame = random_frame_with_ties(seed)
    tree = with_call_tree(frame)
    assert tree["name"].to_list() == reference_order(frame)
    depths, parents = reference_tree(tree.filter(pl.col("pid") == 7, pl.col("tid") == 1))
    first = tree.filter(pl.col("pid") == 7, pl.col("tid") == 1)
    assert first["depth"].to_list() == depths
    offset: int = first.item(0, "op_id")
    assert first["parent_id"].to_list() == [None if p is None else p + offset for p in parents]


def test_an_identical_span_written_later_is_the_child() -> None:
    """``aten::detach`` then ``detach``, as HTA's alexnet trace writes them: the caller first."""
    frame = pl.DataFrame(
        {
            "rank": [0, 0, 0],
            "pid": [1, 1, 1],
            "tid": [1, 1, 1],
            "cat": ["cpu_op"] * 3,
            "name": ["step", "aten::detach", "detach"],
            "ts_ns": [0, 5, 5],
            "dur_ns": [10, 2, 2],
        },
        schema_overrides={"rank": pl.Int32},
    )
    for rows in (frame, frame.reverse()):
        tree = with_call_tree(rows)
        expected = (
            ["step", "aten::detach", "detach"]
            if rows is frame
            else ["step", "detach", "aten::detach"]
        )
        assert tree["name"].to_list() == expected
        assert tree["parent_id"].to_list() == [None, 0, 1]
        assert tree["depth"].to_list() == [0, 1, 2]


@pytest.mark.parametrize("seed", range(20))
def test_the_unpacked_sort_gives_the_same_order(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Threads and spans too wide for the packed key (no bits to spare) sort by five keys
    in Polars, the same way as the packed key and its tie-break in NumPy."""
    frame = random_frame_with_ties(seed)
    packed = with_call_tree(frame)
    monkeypatch.setattr(link, "_PACKED_BITS", 0)
    assert_frame_equal(with_call_tree(frame), packed)


@pytest.mark.parametrize("seed", range(10))
def test_ties_with_unknown_durations_and_other_categories(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Repeated (thread, start) keys whose tie-break reads a null duration (as 0) or a
    category outside annotation > op > call (after them): the packed sort equals the five-key
    sort and the definition."""
    rng = random.Random(seed)
    frame = random_frame_with_ties(seed)
    frame = frame.with_columns(
        pl.Series("dur_ns", [None if rng.random() < 0.2 else d for d in frame["dur_ns"]]),
        pl.Series("cat", [rng.choice(["python_function", c]) for c in frame["cat"]]),
    )
    packed = with_call_tree(frame)
    rank = {**CAT_RANK, "python_function": 9}
    rows = frame.select("rank", "pid", "tid", "ts_ns", "dur_ns", "cat", "name").rows()
    expected = sorted(rows, key=lambda r: (r[0], r[1], r[2], r[3], -(r[4] or 0), rank[r[5]]))
    assert packed["name"].to_list() == [row[6] for row in expected]
    monkeypatch.setattr(link, "_PACKED_BITS", 0)
    assert_frame_equal(with_call_tree(frame), packed)


@pytest.mark.parametrize("seed", range(5))
def test_wide_depth_keys_give_the_same_tree(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spans too wide for Int64 boundary keys (no bits to spare) take Int128 keys, same tree."""
    frame = random_frame_with_ties(seed)
    narrow = with_call_tree(frame)
    monkeypatch.setattr(link, "_DEPTH_KEY_BITS", 0)
    assert_frame_equal(with_call_tree(frame), narrow)


def random_tangle(seed: int) -> pl.DataFrame:
    """What real traces hold beside clean nesting: spans that overlap without nesting (clock
    rounding, threads handing work over), null and negative durations, zero-length spans,
    and a null start now and then (``nulls``)."""
    rng = random.Random(seed)
    rows = 300
    return pl.DataFrame(
        {
            "rank": [0] * rows,
            "pid": [rng.choice([7, 8]) for _ in range(rows)],
            "tid": [rng.choice([1, 2, 3]) for _ in range(rows)],
            "cat": [rng.choice(CATS) for _ in range(rows)],
            "name": [f"op{i}" for i in range(rows)],
            "ts_ns": [rng.randint(0, 80) for _ in range(rows)],
            "dur_ns": [rng.choice([None, -3, 0, 0, *range(1, 40)]) for _ in range(rows)],
        },
        schema_overrides={"rank": pl.Int32},
    )


@pytest.mark.skipif(link._tree is None, reason="traceanalyze._tree is not built")
@pytest.mark.parametrize("seed", range(30))
def test_the_walk_equals_the_columnar_steps_on_tangled_spans(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    frame = random_tangle(seed)
    walked = with_call_tree(frame)
    monkeypatch.setattr(link, "_tree", None)
    assert_frame_equal(walked, with_call_tree(frame))


@pytest.mark.skipif(link._tree is None, reason="traceanalyze._tree is not built")
@pytest.mark.parametrize("case", ["null start", "beyond the limit"])
def test_frames_the_walk_does_not_take_get_the_columnar_steps(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    frame = random_tangle(0)
    if case == "null start":
        frame = frame.with_columns(ts_ns=pl.when(pl.col("name") != "op5").then("ts_ns"))
    else:
        monkeypatch.setattr(link, "_WALK_LIMIT_NS", 50)  # below the frame's latest starts
    walks: list[object] = []
    walk = link._walked_call_tree
    monkeypatch.setattr(link, "_walked_call_tree", lambda cpu: walks.append(walk(cpu)) or walks[-1])
    declined = with_call_tree(frame)
    assert walks == [None]
    monkeypatch.setattr(link, "_tree", None)
    assert_frame_equal(with_call_tree(frame), declined)


def _frame(rows: list[tuple[int, int, int, int | None, str]]) -> pl.DataFrame:
    """(tid, ts_ns, dur_ns, ...) rows on rank 0, pid 1, named r0, r1, ... in frame order."""
    return pl.DataFrame(
        {
            "rank": [0] * len(rows),
            "pid": [row[0] for row in rows],
            "tid": [row[1] for row in rows],
            "cat": [row[4] for row in rows],
            "name": [f"r{i}" for i in range(len(rows))],
            "ts_ns": [row[2] for row in rows],
            "dur_ns": [row[3] for row in rows],
        },
        schema={
            "rank": pl.Int32,
            "pid": pl.Int64,
            "tid": pl.Int64,
            "cat": pl.String,
            "name": pl.String,
            "ts_ns": pl.Int64,
            "dur_ns": pl.Int64,
        },
    )


@pytest.mark.parametrize(
    "rows",
    [
        # one column's range needs all 63 bits, the others constant: the key must stay Int64
        [(1, 0, 0, 1, "cpu_op"), (1, 1 << 62, 0, 1, "cpu_op")],
        [(1, 5, 10_000, 1, "cpu_op"), (1, 5, 4_620_000_000_000_000_000, 1, "cpu_op")],
        # 64 bits: the six-key sort
        [(1, 0, 0, 1, "cpu_op"), (1, -(1 << 62), 0, 1, "cpu_op"), (1, 1 << 62, 0, 1, "cpu_op")],
        # every row on one thread at one instant: only the tie-break orders them
        [(3, 4, 9, 1, "cuda_runtime"), (3, 4, 9, 5, "cpu_op"), (3, 4, 9, None, "x")],
        # durations 2**59 ns apart (a tie-break packed as (max - dur) * 16 overflowed)
        [(1, 1, 0, 0, "cpu_op"), (1, 1, 0, 1 << 59, "cpu_op"), (1, 1, 0, 1, "cpu_op")],
        # the least Int64 duration is the shortest (its negation wraps)
        [(1, 1, 0, -(1 << 63), "cpu_op"), (1, 1, 0, 0, "cpu_op"), (1, 1, 0, 7, "cpu_op")],
    ],
)
def test_extreme_keys_sort_by_the_definition(
    rows: list[tuple[int, int, int, int | None, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    frame = _frame(rows)
    rank = {**CAT_RANK, "cuda_driver": 3}
    ordered = sorted(
        frame.rows(named=True),
        key=lambda r: (r["pid"], r["tid"], r["ts_ns"], -(r["dur_ns"] or 0), rank.get(r["cat"], 9)),
    )
    tree = with_call_tree(frame)
    assert tree["name"].to_list() == [row["name"] for row in ordered]
    threads = [(row["pid"], row["tid"]) for row in ordered]
    changes = [0] + [int(a != b) for a, b in itertools.pairwise(threads)]
    assert tree["thread_key"].to_list() == [1 + n for n in itertools.accumulate(changes)]
    monkeypatch.setattr(link, "_PACKED_BITS", 0)
    assert_frame_equal(with_call_tree(frame), tree)
