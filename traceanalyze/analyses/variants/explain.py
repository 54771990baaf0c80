"""`explain`: why NEW takes more or less GPU time per iteration than BASE, in parts that add up.

It compares the GPU work each step *launched* (the accounting's own-work figures,
:mod:`traceanalyze.analyses.accounting`): per step, its GPU span (first start to last end) =
own busy + own idle, and own busy = activity - overlap (time two streams run at once, counted
once). So the change in span is exactly

    Δspan = Σ Δactivity of the parts - Δoverlap + Δidle

where the activity is split into parts: kernels by (launching op, category), memory copies and
sets by the op chain that caused them (:mod:`traceanalyze.analyses.memcpy`). A part is
``added`` (only in NEW), ``removed`` (only in BASE) or ``changed``; parts whose change is under
``SMALL_PART_PCT`` of BASE's GPU span are lumped into one ``other`` part per status, so the sum
stays exact. Beside it the CPU side: operator, launch, cuDNN and cuBLAS CPU time per iteration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from traceanalyze.analyses.activities import (
    GRAPH_LAUNCHES,
    activities,
    in_iterations,
    iteration_count,
)
from traceanalyze.analyses.cputree import with_self_time
from traceanalyze.analyses.graphs import with_captured_ops
from traceanalyze.analyses.iterations import choice_of, counted
from traceanalyze.analyses.memcpy import known, number_text, size_expr, transfers
from traceanalyze.analyses.memory.diff import MemoryChange, memory_change
from traceanalyze.analyses.step.model import step_model
from traceanalyze.analyses.summary import summary
from traceanalyze.analyses.variants.diff import paired_columns
from traceanalyze.display import Shown
from traceanalyze.trace import Trace

# A part whose change is smaller than this share of BASE's GPU span per iteration is lumped
# with the other small parts of its status.
SMALL_PART_PCT = 1.0
# Parts the one-line explanation names (the largest changes).
MAIN_PARTS = 3
OVERLAP = "stream overlap"
IDLE = "idle gaps"
NO_OP = "(no CPU op)"
PART_COLUMNS = (
    "part", "kind", "status", "base_count_per_iter", "new_count_per_iter", "base_us_per_iter",
    "new_us_per_iter", "us_per_iter_delta", "what",
)  # fmt: skip
CPU_FIGURES = ("cpu_op_us_per_iter", "launch_us_per_iter", "cudnn_cpu_us_per_iter",
               "cublas_cpu_us_per_iter")  # fmt: skip
# ATen ops that call cuBLAS / cuBLASLt (hipBLAS / hipBLASLt on ROCm) themselves.
CUBLAS_OP = r"^aten::(mm|addmm|bmm|baddbmm|addbmm|mv|addmv|_scaled_mm|_int_mm|addmm_|baddbmm_)$"
# The change in span gets an interval from the per-step spread with this many steps each.
MIN_STEPS_FOR_INTERVAL = 3


@dataclass(frozen=True, repr=False)  # Shown: a short repr, tables in Jupyter
class Explanation(Shown):
    base: str
    new: str
    total_us_per_iter_delta: float  # Δ GPU span per iteration = the sum of the parts
    # Its range with either trace's shortest and longest step (None under 3 steps each).
    total_us_per_iter_delta_low: float | None
    total_us_per_iter_delta_high: float | None
    busy_us_per_iter_delta: float
    wall_us_per_iter_delta: float
    base_figures: dict[str, float]  # span, busy, activity, overlap, idle, wall (µs/iter)
    new_figures: dict[str, float]
    parts: pl.DataFrame  # PART_COLUMNS, largest change first, overlap and idle last
    cpu: pl.DataFrame  # figure, base, new, delta
    sentence: str  # why, in one line
    # The change in the GPU's peak memory and the blocks behind it; None without memory events.
    memory: MemoryChange | None = None

    def to_record(self) -> dict[str, Any]:
        """The JSON form (keys listed in the README)."""
        return {
            "base": self.base,
            "new": self.new,
            "total_us_per_iter_delta": self.total_us_per_iter_delta,
            "total_us_per_iter_delta_low": self.total_us_per_iter_delta_low,
            "total_us_per_iter_delta_high": self.total_us_per_iter_delta_high,
            "busy_us_per_iter_delta": self.busy_us_per_iter_delta,
            "wall_us_per_iter_delta": self.wall_us_per_iter_delta,
            "base_figures": self.base_figures,
            "new_figures": self.new_figures,
            "parts": self.parts.to_dicts(),
            "cpu": self.cpu.to_dicts(),
            "summary": self.sentence,
            "memory": None if self.memory is None else self.memory.to_record(),
        }


def explain(
    base: Trace, new: Trace, base_label: str = "base", new_label: str = "new"
) -> Explanation:
    """Split NEW's change in GPU span per iteration against BASE into parts (module docs)."""
    base, new = counted(base), counted(new)
    before, after = _figures(base), _figures(new)
    activity_parts = _activity_parts(base, new, before["gpu_span_us_per_iter"])
    parts = pl.concat(
        [
            activity_parts.drop("bytes_per_call"),
            _fixed_part(
                OVERLAP,
                before["overlap_us_per_iter"],
                after["overlap_us_per_iter"],
                more_is_faster=True,
            ),
            _fixed_part(
                IDLE,
                before["gpu_own_idle_us_per_iter"],
                after["gpu_own_idle_us_per_iter"],
                ranges=(_idle_range(base), _idle_range(new)),
                note=_idle_outlier(base, base_label) + _idle_outlier(new, new_label),
            ),
        ],
        how="diagonal_relaxed",
    ).select(PART_COLUMNS)
    total = after["gpu_span_us_per_iter"] - before["gpu_span_us_per_iter"]
    low, high = _delta_range(base, new)
    return Explanation(
        base=base_label,
        new=new_label,
        total_us_per_iter_delta=total,
        total_us_per_iter_delta_low=low,
        total_us_per_iter_delta_high=high,
        busy_us_per_iter_delta=after["gpu_own_busy_us_per_iter"]
        - before["gpu_own_busy_us_per_iter"],
        wall_us_per_iter_delta=after["wall_us_per_iter"] - before["wall_us_per_iter"],
        base_figures=before,
        new_figures=after,
        parts=parts,
        cpu=_cpu_side(base, new),
        sentence=_sentence(parts, before, after, base_label, (low, high)),
        memory=memory_change(base, new),
    )


def _figures(trace: Trace) -> dict[str, float]:
    """The own-work figures per step: span, busy, activity, idle, overlap; and the wall."""
    means = step_model(trace).means
    span, busy = means["gpu_span_us_per_iter"], means["own_busy_us_per_iter"]
    activity = means["gpu_activity_us_per_iter"]
    return {
        "gpu_span_us_per_iter": span,
        "gpu_own_busy_us_per_iter": busy,
        "gpu_activity_us_per_iter": activity,
        "gpu_own_idle_us_per_iter": span - busy,
        "wall_us_per_iter": means["wall_us_per_iter"],
        "overlap_us_per_iter": activity - busy,
    }


def _delta_range(base: Trace, new: Trace) -> tuple[float | None, float | None]:
    """The change in span with NEW's shortest step against BASE's longest, and the reverse:
    the range one step of each could give (None under ``MIN_STEPS_FOR_INTERVAL`` steps)."""
    spans = [step_model(t).steps["gpu_span_us"] for t in (base, new)]
    if min(s.len() for s in spans) < MIN_STEPS_FOR_INTERVAL:
        return None, None
    before, after = spans
    low = float(after.min()) - float(before.max())  # type: ignore[arg-type]
    high = float(after.max()) - float(before.min())  # type: ignore[arg-type]
    return low, high


def _keyed_activity(trace: Trace, other: Trace) -> pl.DataFrame:
    """Per part of one trace: ``part``, ``kind``, count and µs per iteration. Kernels are keyed
    by launching op and category, copies and sets by their cause chain; a graph replay's
    activity without an op reads as the eager one it repeats (:func:`_as_eager`)."""
    n = iteration_count(trace)
    kernels = (
        _as_eager(_kernels(trace), _kernels(other))
        .group_by(pl.col("op_name").fill_null(NO_OP), "category")
        .agg(count_per_iter=pl.len() / n, us_per_iter=pl.col("dur_ns").sum() / 1e3 / n)
        .select(
            pl.format("{} ({})", "op_name", "category").alias("part"),
            pl.lit("kernel").alias("kind"),
            "count_per_iter",
            "us_per_iter",
            pl.lit(None, pl.Float64).alias("bytes_per_call"),
        )
    )
    memory = (
        _as_eager(_transfers(trace), _transfers(other))
        .group_by(pl.col("chain").alias("part"), "kind")
        .agg(
            count_per_iter=pl.len() / n,
            us_per_iter=pl.col("dur_ns").sum() / 1e3 / n,
            bytes_per_call=known(pl.col("bytes"), pl.col("bytes").mean()),
        )
    )
    return pl.concat([kernels, memory], how="vertical_relaxed")


def _kernels(trace: Trace) -> pl.DataFrame:
    gpu = with_captured_ops(trace, in_iterations(activities(trace)))
    return gpu.filter(pl.col("kind") == "kernel").with_columns(chain=pl.lit(None, pl.String))


def _transfers(trace: Trace) -> pl.DataFrame:
    return transfers(trace).filter(pl.col("in_iteration"))


def _as_eager(frame: pl.DataFrame, eager: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with each graph-replayed activity that has no op given the op (and, for a
    copy or set, the chain) of ``eager``'s activity at the same place: the same name (a copy
    or set: the same kind, as a graph may run a copy as a kernel of its own) and the same
    occurrence in its iteration. Replays carry no CPU op; without this, identical kernels
    read as gone from one trace and new in the other."""
    place = ["_key", "_nth"]
    key = pl.when(pl.col("kind") == "kernel").then(pl.col("name")).otherwise(pl.col("kind"))
    nth = pl.int_range(pl.len()).over("rank", "iteration", "_key", order_by="ts_ns")
    unmatched = pl.col("op_id").is_null() & pl.col("launch_api").is_in(GRAPH_LAUNCHES)
    known = (
        eager.filter(pl.col("op_id").is_not_null())
        .with_columns(_key=key)
        .with_columns(_nth=nth)
        .group_by(place)
        .agg(_op=pl.col("op_name").first(), _chain=pl.col("chain").first())
    )
    return (
        frame.with_columns(_key=key)
        .with_columns(_nth=nth)
        .join(known, on=place, how="left")
        .with_columns(
            op_name=pl.when(unmatched).then(pl.coalesce("op_name", "_op")).otherwise("op_name"),
            chain=pl.when(unmatched).then(pl.coalesce("_chain", "chain")).otherwise("chain"),
        )
        .drop("_key", "_nth", "_op", "_chain")
    )


def _activity_parts(base: Trace, new: Trace, base_span_us: float) -> pl.DataFrame:
    joined = _keyed_activity(base, new).join(
        _keyed_activity(new, base), on=["part", "kind"], how="full", coalesce=True, suffix="_new"
    )
    parts = joined.select(
        "part",
        "kind",
        *paired_columns(),
        pl.coalesce("bytes_per_call", "bytes_per_call_new").alias("bytes_per_call"),
    ).with_columns(us_per_iter_delta=pl.col("new_us_per_iter") - pl.col("base_us_per_iter"))
    small = pl.col("us_per_iter_delta").abs() < base_span_us * SMALL_PART_PCT / 100
    large = parts.filter(~small).with_columns(what=_what())
    lumped = _lumped(parts.filter(small))
    return pl.concat([large, lumped], how="diagonal_relaxed").sort(
        [pl.col("kind") == "other", pl.col("us_per_iter_delta").abs(), "part"],
        descending=[False, True, False],
    )


def _what() -> pl.Expr:
    """A sentence per part: what it is and how it changed."""
    thing = (
        pl.when(pl.col("kind") == "kernel")
        .then(pl.format("kernels launched by `{}`", "part"))
        .otherwise(pl.format("`{}`", "part"))
    )
    counts = pl.format(
        "{} → {} per iteration{}",
        number_text(pl.col("base_count_per_iter")),
        number_text(pl.col("new_count_per_iter")),
        size_expr("bytes_per_call"),
    )
    times = pl.format(
        "{} → {} µs", number_text(pl.col("base_us_per_iter")),
        number_text(pl.col("new_us_per_iter")),
    )  # fmt: skip
    lead = pl.col("status").replace_strict(
        {"added": "new: ", "removed": "gone: "}, default="", return_dtype=pl.String
    )
    return pl.format("{}{}: {}, {}", lead, thing, counts, times)


def _lumped(small: pl.DataFrame) -> pl.DataFrame:
    """One ``other <status>`` part per status of the small parts (their sums)."""
    by_size = pl.col("part").sort_by(pl.col("us_per_iter_delta").abs(), descending=True)
    return small.group_by("status").agg(
        pl.len().alias("parts"),
        pl.col("base_count_per_iter", "new_count_per_iter", "base_us_per_iter",
               "new_us_per_iter", "us_per_iter_delta").sum(),
        by_size.head(3).alias("largest"),
    ).select(
        pl.format("other {}", "status").alias("part"),
        pl.lit("other").alias("kind"),
        "status", "base_count_per_iter", "new_count_per_iter", "base_us_per_iter",
        "new_us_per_iter", "us_per_iter_delta",
        pl.format(
            "{} smaller {} parts, each changing by under {}% of the baseline's GPU span "
            "(largest: {})",
            "parts", "status", pl.lit(f"{SMALL_PART_PCT:g}"), pl.col("largest").list.join(", "),
        ).alias("what"),
    )  # fmt: skip


def _idle_range(trace: Trace) -> tuple[float, float] | None:
    """The least and most idle time of one iteration (None for a single iteration)."""
    steps = step_model(trace).steps
    idle = steps["gpu_span_us"] - steps["own_busy_us"]
    if idle.len() < 2:
        return None
    return float(idle.min()), float(idle.max())  # type: ignore[arg-type]


def _fixed_part(
    name: str,
    before: float,
    after: float,
    *,
    more_is_faster: bool = False,
    ranges: tuple[tuple[float, float] | None, tuple[float, float] | None] = (None, None),
    note: str = "",
) -> pl.DataFrame:
    """Overlap (more of it shortens the span: its part is before - after) or idle time;
    ``ranges``, each trace's least and most per iteration, show whether one iteration (often
    the first profiled one) makes the mean."""
    what = {
        OVERLAP: "time two or more streams run at once, counted once in busy time (more "
        "overlap shortens the span)",
        IDLE: "gaps between the iteration's first and last GPU activity, where the GPU waits "
        "(for launches, the CPU or synchronisation)",
    }[name]
    return pl.DataFrame(
        {
            "part": [name],
            "kind": [name],
            "status": ["changed"],
            "base_us_per_iter": [before],
            "new_us_per_iter": [after],
            "us_per_iter_delta": [before - after if more_is_faster else after - before],
            "what": [
                f"{what}: {before:,.2f} → {after:,.2f} µs per iteration{_spread(ranges)}{note}"
            ],
        }
    )


# One iteration holding more than this share of a trace's idle time makes its mean.
IDLE_OUTLIER_SHARE_PCT = 50.0


def _idle_outlier(trace: Trace, label: str) -> str:
    """Names the iteration that holds most of ``trace``'s idle time, and why it stands out
    (its flag), where one does: the mean then describes that iteration, not the others."""
    rows = (
        choice_of(trace)
        .table.filter(pl.col("counted"))
        .with_columns(gpu_idle_us=pl.col("gpu_span_us") - pl.col("own_busy_us"))
    )
    total = float(rows["gpu_idle_us"].sum())
    if rows.height < 2 or total <= 0:
        return ""
    top = rows.sort("gpu_idle_us", descending=True).row(0, named=True)
    if top["gpu_idle_us"] <= total * IDLE_OUTLIER_SHARE_PCT / 100:
        return ""
    why = top["flag"] or "not flagged as an outlier by its wall time"
    return (
        f"; `{label}`'s iteration {top['iteration']} holds {top['gpu_idle_us']:,.1f} of the "
        f"{total:,.1f} µs idle of its {rows.height} iterations ({why}): `--skip` or "
        "`--iterations` leaves it out"
    )


def _spread(ranges: tuple[tuple[float, float] | None, tuple[float, float] | None]) -> str:
    base, new = ranges
    if base is None or new is None:
        return ""
    return (
        f" (one iteration's ranged {base[0]:,.2f}-{base[1]:,.2f} → {new[0]:,.2f}-{new[1]:,.2f} µs)"
    )


def _cpu_side(base: Trace, new: Trace) -> pl.DataFrame:
    def figures(trace: Trace) -> list[float]:
        shown = summary(trace)
        return [
            float(shown["cpu_op_us_per_iter"]),
            float(shown["launch_us_per_iter"]),
            float(shown["cudnn_cpu_us_per_iter"]),
            cublas_cpu_us_per_iter(trace),
        ]

    frame = pl.DataFrame(
        {"figure": list(CPU_FIGURES), "base": figures(base), "new": figures(new)},
        schema={"figure": pl.String, "base": pl.Float64, "new": pl.Float64},
    )
    return frame.with_columns(delta=pl.col("new") - pl.col("base"))


def cublas_cpu_us_per_iter(trace: Trace) -> float:
    """CPU self time per iteration of the ops that call cuBLAS (or hipBLAS) themselves
    (``CUBLAS_OP``): ATen's dispatch and checks plus the library's host-side work (handle,
    workspace and algorithm selection); their launch calls are children, not counted. The
    same definition as ``cudnn_cpu_us_per_iter``."""
    ops = trace.cpu.filter(
        (pl.col("cat") == "cpu_op")
        & pl.col("name").str.contains(CUBLAS_OP)
        & pl.col("iteration").is_not_null()
    )
    return (
        float(with_self_time(ops, trace.cpu)["self_ns"].sum() or 0) / 1e3 / iteration_count(trace)
    )


def _sentence(
    parts: pl.DataFrame,
    before: dict[str, float],
    after: dict[str, float],
    base_label: str,
    spread: tuple[float | None, float | None] = (None, None),
) -> str:
    """Why NEW is faster or slower than BASE: the GPU span's change and its largest parts."""
    span_before, span_after = before["gpu_span_us_per_iter"], after["gpu_span_us_per_iter"]
    change = span_after - span_before
    pct = change / span_before * 100 if span_before else 0.0
    direction = "shorter" if change < 0 else "longer"
    threshold = span_before * SMALL_PART_PCT / 100
    ordered = parts.sort(pl.col("us_per_iter_delta").abs(), descending=True)
    main = ordered.filter(pl.col("us_per_iter_delta").abs() >= threshold).head(MAIN_PARTS)
    others = ordered.slice(main.height)
    rest = float(others["us_per_iter_delta"].sum())
    named = (
        main.select(
            pl.format(
                "{}{} ({} µs)",
                pl.col("status").replace_strict(
                    {"added": "new ", "removed": "gone: "}, default="", return_dtype=pl.String
                ),
                _short_part(),
                pl.when(pl.col("us_per_iter_delta") > 0).then(pl.lit("+")).otherwise(pl.lit(""))
                + pl.col("us_per_iter_delta").round(1).cast(pl.String),
            )
        )
        .to_series()
        .to_list()
    )
    relative = f", {pct:+.1f}%" if span_before else ""  # no share of nothing
    low, high = spread
    ranged = f"; {low:+,.1f} to {high:+,.1f} µs with one step of each" if low is not None else ""
    head = (
        f"GPU span per iteration {span_before:,.1f} → {span_after:,.1f} µs "
        f"({change:+,.1f} µs{relative}{ranged}) against `{base_label}`"
    )
    if not named:
        return f"{head}: no part changes by {SMALL_PART_PCT:g}% of the span or more."
    every_other_small = bool((others["us_per_iter_delta"].abs() < threshold).all())
    if not others.height:
        tail = "nothing else changes"
    elif every_other_small:
        tail = f"the rest is unchanged within noise ({rest:+,.1f} µs)"
    else:
        tail = f"the other parts add up to {rest:+,.1f} µs"
    return f"{head}, {direction}: " + "; ".join(named) + f"; {tail}."


def _short_part() -> pl.Expr:
    return (
        pl.when(pl.col("kind") == "kernel")
        .then(pl.format("kernels of `{}`", "part"))
        .when(pl.col("kind") == OVERLAP)
        .then(
            pl.when(pl.col("us_per_iter_delta") < 0)
            .then(pl.lit("more stream overlap"))
            .otherwise(pl.lit("less stream overlap"))
        )
        .when(pl.col("kind").is_in([OVERLAP, IDLE, "other"]))
        .then("part")
        .otherwise(pl.format("`{}`", "part"))
    )
