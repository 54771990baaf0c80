"""What the recording itself says: ``profiler_overhead``, ``graph_replays_opaque`` and
``missing_metadata``."""

from __future__ import annotations

import polars as pl

from traceanalyze.analyses.audit.figures import Finding
from traceanalyze.analyses.audit.steps import counted_steps, step_count, step_means
from traceanalyze.analyses.audit.text import sentence
from traceanalyze.analyses.graphs import graph_replay, replayed_activities
from traceanalyze.classify.rules import NAME_RULES
from traceanalyze.hardware.peaks import device_peaks
from traceanalyze.trace import Trace

CHECK_OVERHEAD = "profiler_overhead"
CHECK_GRAPHS = "graph_replays_opaque"
CHECK_METADATA = "missing_metadata"
# Kernel names of collectives: the taxonomy's rule for the communication category.
COMMUNICATION_NAMES = dict(NAME_RULES)["communication"]
# The profiler's own events, by the category Kineto writes them in.
PROFILER_CATEGORIES = ("overhead",)


def profiler_overhead(trace: Trace, untraced_median_ms: float | None = None) -> list[Finding]:
    """What was recorded besides ops and GPU activity, and the CPU time the profiler added per
    step where the capture's untraced median gives it."""
    shapes = int(
        trace.cpu.select(
            ((pl.col("cat") == "cpu_op") & pl.col("input_dims").is_not_null()).sum()
        ).item()
    )
    own = sum(m.event_counts.get(cat, 0) for m in trace.meta for cat in PROFILER_CATEGORIES)
    recorded = {
        "ops with shapes (record_shapes)": shapes,
        "Python frames (with_stack)": trace.python.height,
        "memory events (profile_memory)": trace.memory.height,
        "profiler events of its own (buffer requests and flushes; their time is not loaded)": own,
    }
    found = []
    listed = [f"{n:,} {what}" for what, n in recorded.items() if n]
    if listed:
        found.append(
            Finding(CHECK_OVERHEAD, "recorded", sum(recorded.values()), 0.0, "; ".join(listed))
        )
    if untraced_median_ms:
        found.append(_measured(counted_steps(trace), untraced_median_ms))
    return found


def _measured(steps: Trace, untraced_median_ms: float) -> Finding:
    wall_us = step_means(steps)["wall_us_per_iter"]
    untraced_us = untraced_median_ms * 1e3
    added_us = wall_us - untraced_us
    share = f" ({added_us / untraced_us * 100:+.1f}%)" if untraced_us else ""
    return Finding(
        CHECK_OVERHEAD,
        "measured",
        step_count(steps),
        max(added_us, 0.0),
        f"traced wall time {wall_us:,.3f} µs per iteration against the capture's untraced "
        f"median {untraced_us:,.3f} µs: {added_us:+,.3f} µs{share}",
        {"wall_us_per_iter": abs(added_us)},
        # Without the profiler the wall is the untraced median (the trace may be the faster).
        deltas={"wall_us_per_iter": added_us},
    )


def graph_replays_opaque(trace: Trace) -> list[Finding]:
    """GPU time of graph replays whose activities no captured op explains."""
    if not trace.gpu.select(graph_replay().any()).item():
        return []
    steps = counted_steps(trace)
    replayed = replayed_activities(steps)
    opaque = replayed.filter(pl.col("captured_op").is_null())
    if not opaque.height:
        return []
    n = step_count(steps)
    inside = opaque.filter(pl.col("iteration").is_not_null())
    opaque_us = float(inside["dur_ns"].sum()) / 1e3 / n
    activity_us = step_means(steps)["gpu_activity_us_per_iter"]
    share = f", {opaque_us / activity_us * 100:.1f}% of the GPU activity" if activity_us else ""
    graphs = opaque.select("rank", "graph").unique().height
    replays = opaque.select("rank", "replay").unique().height
    return [
        Finding(
            CHECK_GRAPHS,
            "opaque",
            opaque.height,
            opaque_us,
            sentence(
                [
                    f"{opaque.height:,} activities of {replays:,} replays of {graphs:,} graph(s) "
                    f"with no op: {opaque_us:,.3f} µs per iteration{share}",
                    str(opaque["attribution_note"].drop_nulls().first() or ""),
                ]
            ),
            {"launch_op_us_per_iter": opaque_us},
        )
    ]


def _gpu_name(name: str) -> str:
    return f"`{name}`" if name else "an unnamed GPU"


def missing_metadata(trace: Trace) -> list[Finding]:
    """No device properties, an unknown GPU, or collectives without distributed info."""
    found = []
    active = trace.gpu.select("rank").unique()
    described = trace.devices.select("rank").unique()
    blind = active.join(described, on="rank", how="anti")["rank"].sort().to_list()
    if blind:
        found.append(
            Finding(
                CHECK_METADATA,
                "no_device_properties",
                len(blind),
                0.0,
                "rank(s) " + ", ".join(map(str, blind)) + " have GPU activity and no "
                "deviceProperties",
            )
        )
    peaks = device_peaks(trace.devices).filter(pl.col("gpu").is_null())
    if peaks.height:
        names = peaks["device_name"].fill_null("").unique().sort().to_list()
        found.append(
            Finding(
                CHECK_METADATA,
                "unknown_gpu",
                peaks.height,
                0.0,
                "no peaks known for " + ", ".join(map(_gpu_name, names)),
            )
        )
    lacking = [m.rank for m in trace.meta if not m.distributed_info]
    # Collectives by the taxonomy's own name rule (classifying every kernel for this was most
    # of the audit's time on a trace whose ranks state their distributed info anyway).
    talking = (
        trace.gpu.filter(
            pl.col("rank").is_in(lacking)
            & (pl.col("kind") == "kernel")
            & pl.col("name").str.contains(COMMUNICATION_NAMES)
        )["rank"]
        .unique()
        .to_list()
        if lacking
        else []
    )
    lost = sorted(rank for rank in lacking if rank in talking)
    if lost:
        found.append(
            Finding(
                CHECK_METADATA,
                "no_distributed_info",
                len(lost),
                0.0,
                "rank(s) " + ", ".join(map(str, lost)) + " run collectives without distributedInfo",
            )
        )
    return found
