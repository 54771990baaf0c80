"""The critical path's graph, as frames: CPU segments per thread, GPU activities per stream.

The dependency graph of an iteration has five kinds of edges (README, "Critical path"):

* nesting and order on each CPU thread: the thread's timeline cut into *segments*, each owned
  by the innermost event covering it (an op's self time, a runtime call, or nothing: a gap);
* launch (CPU -> GPU): a runtime/driver call to the activity it launched;
* stream order (GPU -> GPU): an activity to the next one on its stream;
* cross-stream wait (GPU -> GPU): an activity that started well after its own predecessors
  were done, from the activity on another stream of its device that ended last before it
  (an event wait, e.g. on an NCCL kernel; Kineto does not record the event pairs);
* synchronisation (GPU -> CPU): a blocking call (the step model's, or an async copy call that
  returned only after its copy: :func:`sync_calls`) to the activity that ended last while it
  waited.

Every edge goes forward in time, so the graph is a DAG ordered by timestamps. Each node has at
most three candidate predecessors, and which one arrived last is a property of the node alone;
this module computes it for every node in columns, and :mod:`critical_walk` follows the
choices back from the iteration's end.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import polars as pl

from traceanalyze.analyses.activities import activities
from traceanalyze.analyses.step.model import step_model
from traceanalyze.analyses.step.syncs import blocking_ids
from traceanalyze.link import RUNTIME_CATS
from traceanalyze.trace import Trace

# Kinds of time on the path (``by_kind``); a kernel's kind is "kernel:<category>".
KIND_CPU_OP = "cpu_op"  # self time of a CPU operator
KIND_ANNOTATION = "annotation"  # self time of a record_function region (Python between ops)
KIND_LAUNCH = "launch"  # a launch call and the wait until its activity starts
KIND_RUNTIME = "runtime"  # other runtime/driver calls (event record, allocation, ...)
KIND_SYNC = "sync_wait"  # a blocking call waiting for the GPU
KIND_COPY = "copy"  # memory copies and sets on the GPU
KIND_GAP = "gap"  # nothing recorded: an idle thread or stream on the path
_OWNER_KINDS = {"cpu_op": KIND_CPU_OP, "user_annotation": KIND_ANNOTATION}
# Every kind a CPU piece can have (its code in owner_kinds is its index here).
PIECE_KINDS = (KIND_CPU_OP, KIND_ANNOTATION, KIND_LAUNCH, KIND_RUNTIME, KIND_SYNC, KIND_GAP)

# A lane of the path: a CPU thread's is "thread <tid>", a stream's "stream <stream>".
THREAD_LANE, STREAM_LANE = "thread ", "stream "
ITERATION_KEY = ["rank", "iteration"]
THREAD = ["rank", "tid"]
STREAM = ["rank", "device", "stream"]


def cpu_segments(trace: Trace) -> pl.DataFrame:
    """Every CPU thread's timeline cut at each event's start and end, one row per piece, sorted
    by (rank, tid, start): ``seg`` (the row number), ``rank``, ``tid``, ``owner`` (the innermost
    event's ``op_id``; null in a gap), ``start_ns`` and ``end_ns``. What a piece's time is (its
    kind and name) is its owner's (:func:`owner_kinds`)."""
    # An event of 0 ns owns no time; kept, its end would sort before its start and leave it
    # the owner of everything up to the thread's next event.
    events = trace.cpu.filter(pl.col("dur_ns") > 0).select(
        *THREAD, "op_id", "parent_id", "depth", "ts_ns", "dur_ns"
    )
    # After an event's start the innermost owner is the event; after its end, its parent. At
    # equal times ends come first (deepest first), then starts (outermost first).
    starts = events.select(*THREAD, t="ts_ns", owner="op_id", order=pl.lit(1), key="depth")
    ends = events.select(
        *THREAD,
        t=pl.col("ts_ns") + pl.col("dur_ns"),
        owner="parent_id",
        order=pl.lit(0),
        key=-pl.col("depth"),
    )
    points = _sorted_points(pl.concat([starts, ends]))
    same_thread = (pl.col("tid").shift(-1) == pl.col("tid")) & (
        pl.col("rank").shift(-1) == pl.col("rank")
    )
    pieces = points.select(
        *THREAD, "owner", start_ns="t", end_ns=pl.when(same_thread).then(pl.col("t").shift(-1))
    ).filter(pl.col("end_ns") > pl.col("start_ns"))
    return pieces.with_row_index("seg").with_columns(pl.col("seg").cast(pl.Int64))


def sync_calls(trace: Trace) -> pl.Series:
    """The ``op_id`` of every call that blocked until GPU work was done, in the cpu frame's
    order: the step model's blocking calls (:func:`~traceanalyze.analyses.step.syncs.
    blocking_ids`: synchronisations, blocking copies and sets, and the async copy calls that
    returned only after their copy), so the path and the idle causes agree on what blocks."""
    return blocking_ids(trace)


# Bits of the one-integer sort key of _sorted_points: thread, time since the trace's first
# event (2**40 ns is 18 minutes), and the tie-break of ends before starts by depth.
_THREAD_BITS, _TIME_BITS, _TIE_BITS = 11, 40, 12


def _sorted_points(points: pl.DataFrame) -> pl.DataFrame:
    """``points`` sorted by (rank, tid, t, order, key). Packed into one integer where the
    ranges allow (a third of the time of a sort on five columns), else sorted column-wise."""
    columns = [*THREAD, "t", "order", "key"]
    if not points.height:
        return points
    raw = _sorted_by_raw_key(points)
    if raw is not None:
        return raw
    # A thread's number: its dense rank on one integer (rank, tid - the lowest tid) where that
    # fits, which ranks several times faster than a struct of the two columns.
    low, high = points["tid"].min(), points["tid"].max()
    packable = (
        isinstance(low, int)
        and isinstance(high, int)
        and high - low < 2**31
        and points["rank"].null_count() == 0
    )
    thread = (
        (pl.col("rank").cast(pl.Int64) * 2**31 + (pl.col("tid") - low)).rank("dense")
        if packable
        else pl.struct(THREAD).rank("dense")
    ) - 1
    since = pl.col("t") - pl.col("t").min()
    tie = pl.col("order") * 2 ** (_TIE_BITS - 1) + pl.col("key") + 2 ** (_TIE_BITS - 2)
    fits = points.select(
        (thread.max() < 2**_THREAD_BITS)
        & (since.max() < 2**_TIME_BITS)
        & (pl.col("key").abs().max() < 2 ** (_TIE_BITS - 2))
    ).item()
    if not fits:
        return points.sort(columns)
    packed = thread.cast(pl.Int64) * 2 ** (_TIME_BITS + _TIE_BITS) + since * 2**_TIE_BITS + tie
    # Only the columns the pieces read are moved into the sorted order.
    key = points.select(packed.alias("key")).to_series()
    return points.select(*THREAD, "t", "owner").with_columns(key).sort("key").drop("key")


def _sorted_by_raw_key(points: pl.DataFrame) -> pl.DataFrame | None:
    """``points``' (rank, tid, t, owner) sorted by (rank, tid, t, order, key) through one
    integer made of the values themselves, each in as many bits as its range needs, where they
    fit in 63 bits (None otherwise). Only that integer and the owner are sorted: rank, tid and
    t come back out of the integer, and no thread numbering (a sort of its own) is needed."""
    stats = points.select(
        nulls=pl.sum_horizontal(pl.col(*THREAD, "t").null_count()),
        rank_min=pl.col("rank").min(),
        rank_max=pl.col("rank").max(),
        tid_min=pl.col("tid").min(),
        tid_max=pl.col("tid").max(),
        t_min=pl.col("t").min(),
        t_max=pl.col("t").max(),
        key_max=pl.col("key").abs().max(),
    ).row(0, named=True)
    if stats["nulls"] or stats["rank_min"] < 0 or stats["key_max"] >= 2 ** (_TIE_BITS - 2):
        return None
    rank_bits = int(stats["rank_max"]).bit_length()
    tid_bits = int(stats["tid_max"] - stats["tid_min"]).bit_length()
    time_bits = int(stats["t_max"] - stats["t_min"]).bit_length()
    if rank_bits + tid_bits + time_bits + _TIE_BITS > 63:
        return None
    tid_low, t_low = int(stats["tid_min"]), int(stats["t_min"])
    thread = pl.col("rank").cast(pl.Int64) * 2**tid_bits + (pl.col("tid") - tid_low)
    tie = pl.col("order") * 2 ** (_TIE_BITS - 1) + pl.col("key") + 2 ** (_TIE_BITS - 2)
    packed = (thread * 2**time_bits + (pl.col("t") - t_low)) * 2**_TIE_BITS + tie
    ordered = points.select(packed.alias("packed"), "owner").sort("packed", maintain_order=True)
    thread_of = pl.col("packed") // 2 ** (time_bits + _TIE_BITS)
    return ordered.select(
        rank=(thread_of // 2**tid_bits).cast(points.schema["rank"]),
        tid=(thread_of % 2**tid_bits + tid_low).cast(points.schema["tid"]),
        t=(pl.col("packed") // 2**_TIE_BITS % 2**time_bits + t_low).cast(points.schema["t"]),
        owner=pl.col("owner"),
    )


def _step_end(cpu: pl.DataFrame, steps: pl.DataFrame) -> pl.Expr:
    """Per row of ``cpu``, the end of its iteration's step (null outside ``steps``): a lookup
    on one integer (rank, iteration) where both fit in it, which costs half a join."""
    bounds = pl.concat([f.select(*ITERATION_KEY) for f in (cpu, steps)]).select(
        low=pl.min_horizontal(pl.col("rank").min(), pl.col("iteration").min()),
        high=pl.col("iteration").max(),
    )
    low, high = bounds.row(0)
    key = pl.col("rank").cast(pl.Int64) * 2**32 + pl.col("iteration")
    if low is not None and low >= 0 and high < 2**32:
        return key.replace_strict(steps.select(key).to_series(), steps["cpu_end_ns"], default=None)
    # Otherwise the same lookup as a join, in the rows' order.
    ends = cpu.select(*ITERATION_KEY).join(
        steps.select(*ITERATION_KEY, "cpu_end_ns"),
        on=ITERATION_KEY,
        how="left",
        maintain_order="left",
    )
    return pl.lit(ends["cpu_end_ns"])


@dataclass(frozen=True)
class Names:
    """A column of names as codes: ``distinct`` (the distinct names, one chunk) and per row
    its name's index there (a trace's 217k CPU events have a few hundred names)."""

    distinct: pl.Series
    codes: npt.NDArray[np.int64]


def name_codes(names: pl.Series) -> Names:
    """``names`` as :class:`Names`: an Enum of the distinct names, whose categories are its own
    (no process-wide string cache). A missing name is the empty one."""
    filled = names.fill_null("")
    distinct = filled.unique().rechunk()
    codes = filled.cast(pl.Enum(distinct)).to_physical()
    return Names(distinct.rename("name"), codes.cast(pl.Int64).to_numpy())


def owner_kinds(trace: Trace, syncs: pl.Series) -> npt.NDArray[np.uint8]:
    """Per cpu row (``op_id``), the kind of time its self time is, as its index in
    ``PIECE_KINDS``: by its category, then the runtime calls by what they do (``syncs``: the
    blocking calls, :func:`sync_calls`). A piece's kind is then one gather of its owner's."""
    cpu = trace.cpu
    code = {kind: index for index, kind in enumerate(PIECE_KINDS)}
    by_cat = pl.lit(code[KIND_CPU_OP], pl.UInt8)
    for cat, kind in _OWNER_KINDS.items():
        by_cat = pl.when(pl.col("cat") == cat).then(pl.lit(code[kind], pl.UInt8)).otherwise(by_cat)
    codes = cpu.select(by_cat.cast(pl.UInt8)).to_series()
    calls = cpu.select(
        "rank", "correlation", "op_id", row=pl.int_range(pl.len(), dtype=pl.Int64)
    ).filter(cpu["cat"].is_in(RUNTIME_CATS))
    if calls.height:
        launched = activities(trace).select("rank", "correlation").drop_nulls()
        is_launch = pl.struct("rank", "correlation").is_in(
            launched.select(pl.struct("rank", "correlation")).to_series().implode()
        )
        call_codes = calls.select(
            pl.when(pl.col("op_id").is_in(syncs.implode()))
            .then(pl.lit(code[KIND_SYNC], pl.UInt8))
            .when(is_launch)
            .then(pl.lit(code[KIND_LAUNCH], pl.UInt8))
            .otherwise(pl.lit(code[KIND_RUNTIME], pl.UInt8))
        ).to_series()
        codes = codes.scatter(calls["row"], call_codes)
    return codes.to_numpy()


def gpu_nodes(trace: Trace) -> pl.DataFrame:
    """GPU activities sorted by (rank, device, stream, start), ``g`` the row number, with the
    predecessor each one waited for: ``choice`` "wait" (``waited_g``, an activity on another
    stream, see :func:`_with_waits`), "stream" (the previous activity on its stream
    ended after its launch call began), "launch" (the launch call came later) or "none";
    ``head`` the first ``g`` of its run of stream-order choices; ``margin_ns`` how much earlier
    the chosen predecessor could have arrived before the other one would bind (null: none), and
    ``tau_ns`` where the other one's chain joins the CPU (see critical_path's docstring)."""
    # Only the columns read below are sorted (an activity row has some forty).
    frame = (
        activities(trace)
        .select(
            *STREAM,
            "ts_ns",
            "dur_ns",
            "launch_ts_ns",
            "launch_tid",
            "launch_api",
            "kind",
            "category",
            "name",
            "iteration",
            "correlation",
        )
        .sort([*STREAM, "ts_ns"])
    )
    prev_end = (pl.col("ts_ns") + pl.col("dur_ns")).shift(1).over(STREAM)
    launch = pl.col("launch_ts_ns").is_not_null() & pl.col("launch_tid").is_not_null()
    nodes = frame.select(
        *STREAM,
        "ts_ns",
        end_ns=pl.col("ts_ns") + pl.col("dur_ns"),
        prev_end_ns=prev_end,
        launch_ts_ns=pl.when(launch).then(pl.col("launch_ts_ns")),
        launch_tid=pl.when(launch).then(pl.col("launch_tid")),
        launch_api="launch_api",
        kind=pl.when(pl.col("kind") == "kernel")
        .then(pl.format("kernel:{}", "category"))
        .otherwise(pl.lit(KIND_COPY)),
        name="name",
        iteration="iteration",
        correlation="correlation",
    ).with_row_index("g")
    by_stream = pl.col("prev_end_ns").is_not_null() & (
        pl.col("launch_ts_ns").is_null() | (pl.col("prev_end_ns") >= pl.col("launch_ts_ns"))
    )
    nodes = _with_waits(nodes.with_columns(pl.col("g").cast(pl.Int64)))
    waits = pl.col("waited_g").is_not_null()
    nodes = nodes.with_columns(
        choice=pl.when(waits)
        .then(pl.lit("wait"))
        .when(by_stream)
        .then(pl.lit("stream"))
        .when(pl.col("launch_ts_ns").is_not_null())
        .then(pl.lit("launch"))
        .otherwise(pl.lit("none")),
        margin_ns=pl.when(waits)
        .then(pl.col("waited_end_ns") - pl.col("ready_ns"))
        .otherwise((pl.col("prev_end_ns") - pl.col("launch_ts_ns")).abs()),
    )
    run = (pl.col("choice") != "stream").cum_sum().over(STREAM)
    nodes = nodes.with_columns(head=pl.col("g").first().over([*STREAM, run]))
    # Where the other predecessor's chain leaves the CPU, so that both move together before
    # it: a run's launch call (its head's) for the own launch (stream order chosen, the path
    # leaves the CPU at the head's launch), the previous run's for the previous activity.
    head_launch = nodes["launch_ts_ns"].gather(nodes["head"] - _first_g(nodes))
    return nodes.with_columns(head_launch_ns=head_launch).with_columns(
        tau_ns=pl.when(pl.col("choice").is_in(["stream", "wait"]))
        .then(pl.col("head_launch_ns"))
        .otherwise(pl.col("head_launch_ns").shift(1).over(STREAM))
    )


# An activity that starts this long after both of its own predecessors were ready (its
# launch call's start, the previous activity on its stream) waited for something else. The
# call's start, not its end: a blocking copy's call lasts until the copy is done.
WAIT_MIN_NS = 10_000


def _with_waits(nodes: pl.DataFrame) -> pl.DataFrame:
    """``waited_g``: the activity on another stream of the same device that the node waited
    for (a cross-stream event wait, e.g. a compute stream waiting for an NCCL kernel): the
    last to end before the node's start, where that end came more than WAIT_MIN_NS after the
    node was ready; null where none did. ``ready_ns`` is when its own predecessors were done,
    ``waited_end_ns`` that activity's end. Kineto records no event record/wait pairs, so the
    edge is read from the times: nothing else explains the node's late start."""
    nodes = nodes.with_columns(ready_ns=pl.max_horizontal("prev_end_ns", "launch_ts_ns"))
    ends = nodes.select(
        "rank", "device", waited_end_ns="end_ns", waited_g="g", waited_stream="stream"
    ).sort("waited_end_ns")
    found = (
        nodes.select("rank", "device", "g", "stream", "ready_ns", "ts_ns")
        .sort("ts_ns")
        .join_asof(
            ends,
            left_on="ts_ns",
            right_on="waited_end_ns",
            by=["rank", "device"],
            check_sortedness=False,  # both sorted by time above
        )
    )
    waited = (pl.col("waited_stream") != pl.col("stream")) & (
        pl.col("waited_end_ns") > pl.col("ready_ns") + WAIT_MIN_NS
    )
    found = found.select(
        "g",
        waited_g=pl.when(waited).then("waited_g"),
        waited_end_ns=pl.when(waited).then("waited_end_ns"),
    )
    return nodes.join(found, on="g", how="left").sort("g")


def _first_g(nodes: pl.DataFrame) -> int:
    return int(nodes["g"][0]) if nodes.height else 0


def iteration_bounds(trace: Trace, gpu: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, iteration) the window its path covers, ``lo_ns`` to ``hi_ns``: the step
    model's window (:mod:`traceanalyze.analyses.step.window`), whose length is the step's
    ``wall_us``. So the path's length, which equals its window, is ``wall_us`` of the same
    step.

    Also ``cpu_end_ns``, ``gpu_end_ns`` and ``last_g`` (the last GPU activity of the step to
    end inside the window; null without any) and ``cpu_tid``, the thread of the latest-ending
    CPU event inside the step: where the walk back starts."""
    steps = trace.iterations.select(
        "rank", "iteration", step_ns="ts_ns", cpu_end_ns=pl.col("ts_ns") + pl.col("dur_ns")
    )
    mine = gpu.filter(pl.col("iteration").is_not_null())
    windows = (
        step_model(trace)
        .steps.select(*ITERATION_KEY, "lo_ns", "hi_ns")
        .join(steps.select(*ITERATION_KEY, "cpu_end_ns"), on=ITERATION_KEY)
    )
    last_gpu = (
        mine.join(windows.select(*ITERATION_KEY, "hi_ns"), on=ITERATION_KEY)
        .filter(pl.col("end_ns") <= pl.col("hi_ns"))
        .sort("end_ns", "g")
        .group_by(ITERATION_KEY)
        .agg(gpu_end_ns=pl.col("end_ns").last(), last_g=pl.col("g").last())
    )
    return (
        windows.join(last_gpu, on=ITERATION_KEY, how="left")
        .join(_latest_cpu_thread(trace, steps), on=ITERATION_KEY, how="left")
        .sort(ITERATION_KEY)
    )


def _latest_cpu_thread(trace: Trace, steps: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, iteration), ``cpu_tid``: the thread of the latest-ending CPU event inside the
    step (at equal ends the outermost, then the last in call order). The latest events are
    found by comparing with their iteration's latest end, so only those few rows are sorted."""
    cpu = trace.cpu.select(
        "rank", "iteration", "tid", "depth", end_ns=pl.col("ts_ns") + pl.col("dur_ns")
    ).filter(pl.col("iteration").is_not_null())
    inside = cpu.filter(pl.col("end_ns") <= _step_end(cpu, steps))
    latest = inside.filter(pl.col("end_ns") == pl.col("end_ns").max().over(ITERATION_KEY))
    return (
        latest.sort([*ITERATION_KEY, "depth"], descending=[False, False, True], maintain_order=True)
        .group_by(ITERATION_KEY, maintain_order=True)
        .agg(cpu_tid=pl.col("tid").last())
    )
