"""CUDA graph replays: the GPU activities of one ``cudaGraphLaunch``, counted and attributed.

Every activity a replay runs carries the correlation id of its graph launch, so the loader
links them all to that one call (``launch_api`` "cudaGraphLaunch"). Here they are labelled as
replays (``graph_replay``), grouped into graphs and numbered by position, and, where the trace
also holds the capture, paired with the op that launched each of them while the stream was
captured.

* A graph is identified by Kineto's ``graph id`` where the trace has it (column ``graph_id``;
  see below), else by the ordered names of a replay's activities.
* A position orders a replay's activities by ``graph node id`` where present (column
  ``graph_node_id``; CUPTI numbers nodes as they are created, so in capture order), else by
  start time (the capture order for a graph captured from one stream).
* The capture: launch calls (kernel launches, async copies and sets) that ran no GPU activity
  (a capturing stream records them instead), inside an annotation whose name says graph
  capture, else all such calls before the graph's first replay. A capture pairs with a graph
  when it holds as many launches as a replay holds activities, of the same kinds in order;
  otherwise the replay is left unattributed and says why.

Kineto writes ``graph id`` and ``graph node id`` into kernel (and, since mid-2026, memcpy and
memset) args on CUDA 12+ builds (pytorch/kineto#1276, February 2026); the loader does not read
them yet. Until it does, the columns are absent and the fallbacks above apply; a Trace whose
gpu frame has them (Int64, 0 or null for activities outside graphs) is used as is.
"""

from __future__ import annotations

import polars as pl

from traceanalyze.analyses.activities import iteration_count, per_trace, transfer_kind
from traceanalyze.analyses.iterations import on_counted
from traceanalyze.link import LAUNCH_APIS, RUNTIME_CATS, nearest_ancestor
from traceanalyze.trace import Trace

GRAPH_LAUNCH_APIS = ("cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch")
GRAPH_ID = "graph_id"
GRAPH_NODE_ID = "graph_node_id"
CAPTURE_REGION = r"(?i)graph.?capture"
_ACTIVITY_LAUNCHES = tuple(api for api in LAUNCH_APIS if api not in GRAPH_LAUNCH_APIS)
NOT_CAPTURED = "no capture of this graph in the trace"

REPLAY_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "iteration": pl.Int64(),
    "replay": pl.Int64(),  # the correlation id of the graph launch
    "graph": pl.Int64(),
    "position": pl.Int64(),
    "kind": pl.String(),
    "name": pl.String(),
    "ts_ns": pl.Int64(),
    "dur_ns": pl.Int64(),
    "captured_op": pl.String(),
    "captured_op_id": pl.Int64(),  # that op's row in the cpu frame
    "captured_call": pl.String(),
    "attribution_note": pl.String(),
}


def graph_replay() -> pl.Expr:
    """True for GPU activities run by a graph replay (on the gpu frame)."""
    return pl.col("launch_api").is_in(GRAPH_LAUNCH_APIS).fill_null(value=False)


@on_counted
def graph_launches_per_iter(trace: Trace) -> float:
    """Graph launch calls per iteration (each replays a whole graph)."""
    launches = trace.cpu.filter(
        pl.col("cat").is_in(RUNTIME_CATS)
        & pl.col("name").is_in(GRAPH_LAUNCH_APIS)
        & pl.col("iteration").is_not_null()
    )
    return launches.height / iteration_count(trace)


@per_trace
def replayed_activities(trace: Trace) -> pl.DataFrame:
    """One row per activity of a graph replay (REPLAY_SCHEMA): its replay (the launch's
    correlation), graph (1, 2, ... in order of first replay), position, and the op captured
    at that position with the launch call it made (null where not attributed, with why)."""
    replays = _numbered(trace.gpu.filter(graph_replay()).with_columns(transfer_kind()))
    if not replays.height:
        return pl.DataFrame(schema=REPLAY_SCHEMA)
    captured, notes = _captures(trace, replays)
    return (
        replays.join(captured, on=["rank", "graph", "position"], how="left")
        .join(notes, on=["rank", "graph"], how="left")
        .with_columns(
            attribution_note=pl.when(pl.col("captured_call").is_null()).then(
                pl.col("graph_note").fill_null(NOT_CAPTURED)
            )
        )
        .sort("rank", "ts_ns")
        .select(REPLAY_SCHEMA.keys())
        .cast(REPLAY_SCHEMA)  # type: ignore[arg-type]
    )


def _numbered(replays: pl.DataFrame) -> pl.DataFrame:
    """``replay``, ``position`` and ``graph`` for each replayed activity."""
    replay = ["rank", "correlation"]
    order = [GRAPH_NODE_ID, "ts_ns"] if GRAPH_NODE_ID in replays.columns else ["ts_ns"]
    numbered = replays.sort([*replay, *order]).with_columns(
        position=pl.int_range(pl.len()).over(replay), replay=pl.col("correlation")
    )
    if GRAPH_ID in numbered.columns:
        identity = pl.col(GRAPH_ID).cast(pl.String).first()
    else:
        # One hash of the names per replay: the joined names mapped back onto every row (a
        # window) held a replay's whole text per activity, 4 s for 5,000 replayed activities.
        identity = pl.col("name").str.join("\n").hash()
    identities = numbered.group_by(replay).agg(_identity=identity, _start=pl.col("ts_ns").min())
    numbered = numbered.join(identities, on=replay, how="left", maintain_order="left")
    first_replay = pl.col("_start").min().over("rank", "_identity")
    return numbered.with_columns(graph=first_replay.rank("dense").over("rank").cast(pl.Int64))


def _captures(trace: Trace, replays: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per (rank, graph, position): the op and the launch call captured there; and per graph
    without a capture, ``graph_note`` saying why."""
    calls = _unlaunched_calls(trace)
    graphs = (
        replays.filter(pl.col("replay") == pl.col("replay").min().over("rank", "graph"))
        .group_by("rank", "graph")
        .agg(
            kinds=pl.col("kind").sort_by("position"),
            first_replay=pl.col("ts_ns").min(),
        )
    )
    blocks = calls.group_by("rank", "block").agg(
        kinds=pl.col("kind"),
        ops=pl.col("captured_op"),
        op_ids=pl.col("captured_op_id"),
        apis=pl.col("captured_call"),
        end=pl.col("ts_ns").max(),
    )
    # A graph pairs with the last capture before its first replay that has its kinds in order.
    pairs = (
        graphs.join(blocks, on="rank", suffix="_captured")
        .filter(
            (pl.col("end") < pl.col("first_replay")) & (pl.col("kinds") == pl.col("kinds_captured"))
        )
        .sort("end", descending=True)
        .unique(["rank", "graph"], keep="first")
    )
    paired = (
        pairs.select("rank", "graph", "ops", "op_ids", "apis")
        .explode("ops", "op_ids", "apis")
        .with_columns(position=pl.int_range(pl.len()).over("rank", "graph"))
    )
    notes = graphs.join(pairs.select("rank", "graph"), on=["rank", "graph"], how="anti").select(
        "rank",
        "graph",
        graph_note=pl.lit(
            "no capture in the trace with as many launches of the same kinds as a replay has "
            "activities"
            if calls.height
            else NOT_CAPTURED
        ),
    )
    captured = paired.select(
        "rank",
        "graph",
        "position",
        captured_op="ops",
        captured_op_id="op_ids",
        captured_call="apis",
    )
    return captured, notes


def _unlaunched_calls(trace: Trace) -> pl.DataFrame:
    """Launch calls that ran no GPU activity (captured ones), in call order, with the op that
    made them and ``block``, one per capture: the capture region they are in where the trace
    has such regions, else each run of them on a thread between two calls that did launch."""
    cpu = trace.cpu
    launched = trace.gpu.select("rank", "correlation").drop_nulls().unique()
    calls = (
        cpu.filter(
            pl.col("cat").is_in(RUNTIME_CATS)
            & pl.col("name").is_in(_ACTIVITY_LAUNCHES)
            & pl.col("correlation").is_not_null()
        )
        .join(launched.with_columns(ran=pl.lit(value=True)), on=["rank", "correlation"], how="left")
        .with_columns(pl.col("ran").fill_null(value=False))
        .sort("rank", "pid", "tid", "ts_ns")
    )
    regions = nearest_ancestor(
        cpu,
        calls["op_id"],
        (pl.col("cat") == "user_annotation") & pl.col("name").str.contains(CAPTURE_REGION),
    )
    if regions.is_not_null().any():
        block = regions
    else:
        block = calls.select(pl.col("ran").cum_sum().over("rank", "pid", "tid")).to_series()
        block = block * 1_000_000 + calls["tid"].rank("dense").cast(pl.Int64)
    ops = nearest_ancestor(cpu, calls["op_id"], pl.col("cat") == "cpu_op")
    return calls.with_columns(
        block=block,
        captured_op=cpu["name"].gather(ops),
        captured_op_id=ops,
        captured_call=pl.col("name"),
        kind=pl.when(pl.col("name").str.contains("(?i)memcpy"))
        .then(pl.lit("memcpy"))
        .when(pl.col("name").str.contains("(?i)memset"))
        .then(pl.lit("memset"))
        .otherwise(pl.lit("kernel")),
    ).filter(~pl.col("ran") & pl.col("block").is_not_null())


@on_counted
def graph_table(trace: Trace) -> pl.DataFrame:
    """Per graph and position: the activity, the op captured there, replays per iteration and
    time per iteration (replays inside iterations)."""
    rows = replayed_activities(trace).filter(pl.col("iteration").is_not_null())
    n = iteration_count(trace)
    return (
        rows.group_by("rank", "graph", "position")
        .agg(
            pl.col("kind").first(),
            pl.col("name").first(),
            pl.col("captured_op").first(),
            pl.col("captured_call").first(),
            replays_per_iter=pl.len() / n,
            us_per_iter=pl.col("dur_ns").sum() / 1e3 / n,
            mean_us=pl.col("dur_ns").mean() / 1e3,
            attribution_note=pl.col("attribution_note").first(),
        )
        .sort("rank", "graph", "position")
    )


def with_captured_ops(trace: Trace, frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` (rows of the gpu frame) with ``op_id`` and ``op_name`` of each replayed
    activity taken from the op captured at its position, where the trace holds the capture:
    the replay then reads as the eager launch it repeats."""
    captured = replayed_activities(trace).filter(pl.col("captured_op_id").is_not_null())
    if not captured.height:
        return frame
    keys = captured.select(
        "rank",
        "ts_ns",
        "name",
        correlation="replay",
        _op_id="captured_op_id",
        _op_name="captured_op",
    )
    return (
        frame.join(keys, on=["rank", "correlation", "ts_ns", "name"], how="left")
        .with_columns(
            op_id=pl.coalesce("op_id", "_op_id"), op_name=pl.coalesce("op_name", "_op_name")
        )
        .drop("_op_id", "_op_name")
    )
