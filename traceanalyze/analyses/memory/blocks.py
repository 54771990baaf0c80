"""Memory events attributed and paired: who allocated each block, and how long it lived.

Columnar throughout (joins and as-of joins, no per-event Python):

1. Events are numbered in time order (``seq``; file order breaks ties) and get the iteration
   whose span holds them (``trace.iterations``: only the iterations that count).
2. Each event's op is the innermost ``cpu_op`` around it on its thread: the last CPU interval
   starting at or before the event (an as-of join; in call order, so the deepest of equal
   starts), then up the call tree that linking built (``parent_id``) to the first ``cpu_op``
   still open at the event. An allocation helper (``aten::empty`` ...) hands the allocation to
   the op that called it. Its outermost user annotation comes from linking too.
3. A free pairs with the latest earlier allocation at the same device and address (an as-of
   join); a free with none was allocated before the profiling window.
"""

from __future__ import annotations

import polars as pl

from traceanalyze.analyses.activities import per_trace
from traceanalyze.analyses.iterations import iteration_at, on_counted
from traceanalyze.analyses.memory.devices import device_name, is_accelerator
from traceanalyze.link import THREAD, THREAD_KEY, outermost_annotation
from traceanalyze.schema import null_series
from traceanalyze.trace import Trace

# One device's events, as the figures group them.
DEVICE_KEY = ["rank", "device_type", "device"]
# The op chain above an event is rarely deeper than a few levels; this bounds the walk.
_MAX_WALK = 64
NO_OP = "(no op)"
# Above every 64-bit address: (device, address) packs into one 128-bit sort key.
_ADDRESS_SPAN = 1 << 64
# Ops that only allocate for their caller: an allocation inside one is charged to the op that
# called it (aten::bmm, not the aten::empty it calls for its output).
ALLOCATION_HELPERS = (
    "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
    "aten::new_empty_strided", "aten::resize_", "aten::zeros", "aten::zeros_like",
    "aten::ones_like", "aten::full_like", "aten::to", "aten::_to_copy",
)  # fmt: skip


@per_trace
@on_counted
def memory_events(trace: Trace) -> pl.DataFrame:
    """The memory frame in time order with ``seq``, ``device_code`` (a number per device; see
    :func:`memory_devices`), ``iteration``, ``op_id``, ``op_name`` and ``running_bytes`` (the
    sum of ``bytes`` on the device so far: the allocated bytes relative to the window's start,
    for traces whose events lack ``Total Allocated``)."""
    memory = trace.memory
    if not memory["ts_ns"].is_sorted():  # Kineto writes them in time order; sort otherwise
        memory = memory.sort("ts_ns", maintain_order=True)  # stable: file order breaks ties
    # Each event's device code by a search over the few devices' packed keys (no join).
    codes = memory_devices(trace).select(_packed_device(), "device_code").sort("packed_device")
    packed = memory.select(_packed_device()).to_series()
    events = memory.with_columns(
        seq=pl.int_range(pl.len(), dtype=pl.Int64),
        device_code=codes["device_code"].gather(codes["packed_device"].search_sorted(packed)),
    ).select("seq", *memory.columns, "device_code")
    running = pl.col("bytes").fill_null(0).cum_sum()
    events = events.with_columns(
        running_bytes=running if codes.height == 1 else running.over("device_code"),
        iteration=iteration_at(events, trace),
    )
    return _with_ops(events, trace.cpu)


@per_trace
def memory_devices(trace: Trace) -> pl.DataFrame:
    """One row per device with memory events: ``DEVICE_KEY``, ``device_code`` (0, 1, ...),
    ``device_name`` (``cuda:0``, ``cpu``) and ``on_accelerator``."""
    # The first event of each device, found on one packed integer (cheaper than a unique
    # over three columns of every event).
    firsts = trace.memory.select(_packed_device().arg_unique()).to_series()
    return (
        trace.memory.select(DEVICE_KEY)
        .gather(firsts)
        .sort(DEVICE_KEY, nulls_last=True)
        .with_row_index("device_code")
        .with_columns(device_name(), is_accelerator())
    )


def _packed_device() -> pl.Expr:
    """(rank, device type, device) as one integer, which joins faster than three columns."""
    part = [pl.col(c).cast(pl.Int64).fill_null(-1) + 1 for c in DEVICE_KEY]
    return (part[0] * (1 << 40) + part[1] * (1 << 20) + part[2]).alias("packed_device")


def with_devices(frame: pl.DataFrame, trace: Trace) -> pl.DataFrame:
    """``frame`` (with ``device_code``) plus its device's columns (those it lacks). The code is
    the device's row in :func:`memory_devices`: a gather, not a join."""
    devices = memory_devices(trace)
    added = [c for c in devices.columns if c not in frame.columns]
    return frame.with_columns(devices.select(added).gather(frame["device_code"]))


def _with_ops(events: pl.DataFrame, cpu: pl.DataFrame) -> pl.DataFrame:
    """Add the op each event is charged to (``op_id``, ``op_name``)."""
    op_ids = attributed_ops(events, cpu)
    return events.with_columns(op_id=op_ids, op_name=cpu["name"].gather(op_ids))


def op_details(frame: pl.DataFrame, cpu: pl.DataFrame) -> pl.DataFrame:
    """``frame`` (with ``op_id``) plus the op's outermost user annotation and the input shapes
    it recorded. Done for the few rows shown, not for every event."""
    ops = frame["op_id"].unique().drop_nulls()
    keyed = cpu.with_columns(pl.struct(THREAD).rank("dense").cast(pl.Int64).alias(THREAD_KEY))
    details = pl.DataFrame(
        {
            "op_id": ops,
            "annotation": outermost_annotation(keyed, ops),
            "input_dims": cpu["input_dims"].gather(ops),
        },
        schema={"op_id": pl.Int64, "annotation": pl.String, "input_dims": pl.String},
    )
    return frame.join(details, on="op_id", how="left", maintain_order="left")


def attributed_ops(events: pl.DataFrame, cpu: pl.DataFrame) -> pl.Series:
    """The op each event is charged to: the innermost enclosing op that is not an allocation
    helper (ALLOCATION_HELPERS), else the innermost op (a helper called directly)."""
    if not cpu.height or not events.height:
        return null_series("op_id", events.height, pl.Int64)
    last = last_started(events, cpu)
    ts_ns = events["ts_ns"]
    innermost = enclosing(last, ts_ns, cpu, pl.col("cat") == "cpu_op")
    helper = cpu["name"].is_in(ALLOCATION_HELPERS).gather(innermost).fill_null(value=False)
    if not helper.any():
        return innermost
    # Only the events inside a helper walk on, from the helper's parent.
    doer = enclosing(
        cpu["parent_id"].gather(innermost.filter(helper)),
        ts_ns.filter(helper),
        cpu,
        (pl.col("cat") == "cpu_op") & ~pl.col("name").is_in(ALLOCATION_HELPERS),
    )
    return innermost.scatter(helper.arg_true(), doer.fill_null(innermost.filter(helper)))


def last_started(events: pl.DataFrame, cpu: pl.DataFrame) -> pl.Series:
    """For each event, the last CPU interval of its thread that starts at or before it, in
    call order (so the deepest of equal starts): an as-of join on one hashed thread key. The
    cpu frame is in call order, so it is sorted by time within each thread, which is all the
    join needs; events are in time order."""
    key = pl.struct(THREAD).hash().alias("thread_hash")
    starts = cpu.select(key, "ts_ns", last_id="op_id")
    return (
        events.select(key, "ts_ns")
        .join_asof(
            starts, on="ts_ns", by="thread_hash", strategy="backward", check_sortedness=False
        )
        .get_column("last_id")
    )


def enclosing(last: pl.Series, ts_ns: pl.Series, cpu: pl.DataFrame, matches: pl.Expr) -> pl.Series:
    """From each event's last started interval up the call tree (``parent_id``), the first
    interval matching ``matches`` (never a ProfilerStep) still open at the event, else null.
    Each step is a gather for all events at once."""
    tree = cpu.select(
        hit=(matches & ~pl.col("name").str.starts_with("ProfilerStep#")).fill_null(value=False),
        end=pl.col("ts_ns") + pl.col("dur_ns").fill_null(0),
        parent="parent_id",
    )
    hits, ends, parents = tree["hit"], tree["end"], tree["parent"]
    # Only the events still walking take part in each step: most stop at the first or second
    # interval, so the later steps gather a few rows instead of every event.
    rows = pl.int_range(len(last), dtype=pl.UInt32, eager=True).filter(last.is_not_null())
    cursor = last.filter(last.is_not_null())
    stopped_rows, stopped_at = [], []
    for _ in range(_MAX_WALK):
        if not len(cursor):
            break
        here = (hits.gather(cursor) & (ends.gather(cursor) >= ts_ns.gather(rows))).fill_null(
            value=False
        )
        stopped_rows.append(rows.filter(here))
        stopped_at.append(cursor.filter(here))
        cursor, rows = parents.gather(cursor.filter(~here)), rows.filter(~here)
        rows, cursor = rows.filter(cursor.is_not_null()), cursor.drop_nulls()
    found = null_series("op_id", len(last), pl.Int64)
    if stopped_rows:
        found = found.scatter(pl.concat(stopped_rows), pl.concat(stopped_at))
    return found


@per_trace
@on_counted
def memory_blocks(trace: Trace) -> pl.DataFrame:
    """One row per allocation: where, how large, by which op, and its free (null when the
    block outlives the trace). ``lifetime_us`` is the time from allocation to free."""
    events = memory_events(trace)
    pairs = free_pairs(trace).filter(pl.col("alloc_seq").is_not_null())
    # An allocation is freed at most once, and ``seq`` is the event's row: its free's columns
    # are scattered into place (no join).
    at = pairs["alloc_seq"]
    blocks = events.with_columns(
        _scattered(pairs["free_seq"], at, events.height),
        _scattered(pairs["free_ts_ns"], at, events.height),
        _scattered(pairs["iteration"], at, events.height).alias("free_iteration"),
    ).filter(pl.col("bytes") > 0)
    return with_devices(blocks, trace).select(
        *DEVICE_KEY,
        "device_code",
        "device_name",
        "on_accelerator",
        "addr",
        "bytes",
        "seq",
        "ts_ns",
        "iteration",
        "op_id",
        pl.col("op_name").fill_null(NO_OP),
        "free_seq",
        "free_ts_ns",
        "free_iteration",
        lifetime_us=(pl.col("free_ts_ns") - pl.col("ts_ns")) / 1e3,
    )


def _scattered(values: pl.Series, at: pl.Series, height: int) -> pl.Series:
    """``values`` at rows ``at`` of a column of ``height`` nulls."""
    return null_series(values.name, height, values.dtype).scatter(at, values)


@per_trace
def free_pairs(trace: Trace) -> pl.DataFrame:
    """Every free of a known address with the allocation it frees (``alloc_seq``; null when the
    block was allocated before the window): the latest earlier allocation at that address on
    that device. In (device, address, time) order that is the event just before the free,
    when it is an allocation; a second free of one block pairs with nothing."""
    events = memory_events(trace)
    addressed = events.filter(pl.col("addr").is_not_null() & (pl.col("bytes") != 0))
    # One key, a stable sort: events keep their time order within each address. Only the
    # three columns the pairing reads are sorted.
    ordered = addressed.select(_address_key(addressed).alias("key"), "bytes", "seq").sort(
        "key", maintain_order=True
    )
    follows_allocation = (pl.col("key") == pl.col("key").shift(1)) & (pl.col("bytes").shift(1) > 0)
    frees = ordered.select(
        "bytes", alloc_seq=pl.when(follows_allocation).then(pl.col("seq").shift(1)), free_seq="seq"
    ).filter(pl.col("bytes") < 0)
    # ``seq`` is the event's row in ``events``: the free's other columns are gathered by it.
    free = events.select("device_code", "iteration", "ts_ns").gather(frees["free_seq"])
    return pl.DataFrame(
        [
            free["device_code"], free["iteration"], frees["alloc_seq"], frees["free_seq"],
            free["ts_ns"].alias("free_ts_ns"),
        ]
    )  # fmt: skip


def _address_key(events: pl.DataFrame) -> pl.Expr:
    """(device, address) as one sortable integer: 64 bits when the addresses' span times the
    devices fits (it sorts faster), else 128."""
    low, high = events["addr"].min(), events["addr"].max()
    devices = events["device_code"].max()
    if not isinstance(low, int) or not isinstance(high, int) or not isinstance(devices, int):
        return pl.col("addr").cast(pl.Int64)  # no addressed event: any key sorts nothing
    span = high - low + 1
    if (devices + 1) * span < 1 << 63:
        return pl.col("device_code").cast(pl.Int64) * span + (pl.col("addr") - low)
    return pl.col("device_code").cast(pl.Int128) * _ADDRESS_SPAN + pl.col("addr")
