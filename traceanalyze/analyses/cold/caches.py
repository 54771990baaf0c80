"""Cache hits and compiles a trace shows, as data: the events that name a cache and what each
says about it.

Dynamo and Inductor time their phases with ``dynamo_timed``, and the profiler records each as
a CPU event: ``X`` (a ``cpu_op``, holding ``X (dynamo_timed)``) or, on some versions, only
``X (dynamo_timed)`` (a ``user_annotation``). Some phases run only when a cache held the work
(``hit``), some only when the work was done (``compiled``), some either way (``either``: named
so that a reader does not take them for a hit; ``PyCodeCache.load_by_key_path`` imports the
generated module after a fresh compile just as after a hit).

Caches that leave no event are not here: cuDNN's plan cache lives in the process's memory (a
first call that builds no plan shows only as a small ``cudnn_plan`` excess), the CUDA driver's
JIT cache (``CUDA_CACHE_PATH``) only makes a module load faster.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceanalyze.analyses.calls import ops_in_time
from traceanalyze.trace import Trace

HIT = "hit"
COMPILED = "compiled"
EITHER = "either"
# What each outcome says, for the legend.
OUTCOMES: dict[str, str] = {
    HIT: "the work came from a cache",
    COMPILED: "the work was done in this process: the cache missed, was bypassed or is off",
    EITHER: "runs after a compile and after a hit alike: no evidence either way",
}
_TIMED = " (dynamo_timed)"


@dataclass(frozen=True)
class CacheEvent:
    event: str  # the phase's name, without " (dynamo_timed)"
    cache: str
    outcome: str  # HIT | COMPILED | EITHER
    meaning: str


CACHE_EVENTS: tuple[CacheEvent, ...] = (
    CacheEvent(
        "AOTAutogradCache.inductor_load", "AOTAutograd cache", HIT,
        "a compiled graph (forward and backward) loaded from AOTAutograd's cache: no AOT "
        "tracing and no Inductor lowering for it",
    ),
    CacheEvent(
        "TritonBundler.read_and_emit", "FX graph cache", HIT,
        "the Triton kernels stored with a cached FX graph written back for loading (runs only "
        "when a cache entry is read)",
    ),
    CacheEvent(
        "TritonBundler.load_cached_static_autotuners", "FX graph cache", HIT,
        "autotuned Triton kernels restored from the cache entry, not tuned again",
    ),
    CacheEvent(
        "StaticAutotunerFuture.warm_precompile", "FX graph cache", HIT,
        "a cached Triton kernel readied from its saved binary (no compile)",
    ),
    CacheEvent(
        "fx_codegen_and_compile", "FX graph cache", COMPILED,
        "Inductor lowered a graph and generated its code",
    ),
    CacheEvent(
        "TritonBundler.collect", "FX graph cache", COMPILED,
        "the kernels compiled in this process collected for a new cache entry",
    ),
    CacheEvent(
        "async_compile.precompile", "Triton cache", EITHER,
        "Triton kernels compiled, or loaded from Triton's own cache (the trace does not say "
        "which)",
    ),
    CacheEvent(
        "PyCodeCache.load_by_key_path", "PyCodeCache", EITHER,
        "the generated Python module imported from disk, after a compile and after a hit "
        "alike",
    ),
    CacheEvent(
        "inductor_codecache_torch_key", "Inductor caches", EITHER,
        "the hash of torch's own sources that Inductor's cache keys hold (once per process)",
    ),
)  # fmt: skip

# The cache state a trace shows, where no manifest says (none: no cache event at all).
TRACE_HIT = "cache hits in the trace"
TRACE_COMPILED = "compiled in the trace, no cache hit"
TRACE_MIXED = "cache hits and compiles in the trace"

EVIDENCE_COLUMNS: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "call": pl.Int64(),  # the call the event starts in (null: outside every call)
    "event": pl.String(),
    "cache": pl.String(),
    "outcome": pl.String(),
    "count": pl.UInt32(),
    "us": pl.Float64(),  # the events' summed duration
    "meaning": pl.String(),
}


def cache_evidence(trace: Trace, spans: pl.DataFrame) -> pl.DataFrame:
    """Per call (``spans``: calls.CALL_SCHEMA; null outside them) and cache event of
    ``CACHE_EVENTS``: how many the trace holds and their time. An ``X`` and the
    ``X (dynamo_timed)`` inside it are one event."""
    table = pl.DataFrame(CACHE_EVENTS)
    cpu = trace.cpu
    base = pl.col("name").str.strip_suffix(_TIMED)
    named = cpu.select("op_id", "rank", "pid", "tid", "ts_ns", "dur_ns", event=base)
    parent = named["event"].gather(cpu["parent_id"].fill_null(0))
    nested = cpu["parent_id"].is_not_null() & (parent == named["event"])
    events = named.filter(~nested).join(table, on="event")
    placed = ops_in_time(events, spans)
    return (
        placed.group_by("rank", "call", "event", "cache", "outcome", "meaning")
        .agg(count=pl.len(), us=pl.col("dur_ns").sum() / 1e3)
        .sort(["rank", "call", "event"], nulls_last=True)
        .select(EVIDENCE_COLUMNS.keys())
        .cast(EVIDENCE_COLUMNS)  # type: ignore[arg-type]
    )


def cache_state_of(evidence: pl.DataFrame) -> str | None:
    """The cache state the events show: hits, compiles, both; None where there is neither."""
    outcomes = set(evidence["outcome"].to_list())
    if HIT in outcomes:
        return TRACE_MIXED if COMPILED in outcomes else TRACE_HIT
    return TRACE_COMPILED if COMPILED in outcomes else None


def hits_seen(evidence: pl.DataFrame) -> str | None:
    """``AOTAutogradCache.inductor_load x1, ...``: the hit events, in table order."""
    order = {e.event: i for i, e in enumerate(CACHE_EVENTS)}
    hits = (
        evidence.filter(pl.col("outcome") == HIT)
        .group_by("event")
        .agg(pl.col("count").sum())
        .sort(pl.col("event").replace_strict(order, return_dtype=pl.Int64))
    )
    # A handful of event kinds, not per event.
    parts = [f"{event} x{count}" for event, count in hits.iter_rows()]
    return ", ".join(parts) or None
