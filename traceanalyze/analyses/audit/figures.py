"""What a finding moves: the figures the audit weighs, a finding's record, and how much a
finding moves each figure (in the figure's unit, per iteration) and by what share.

A figure is moved by the difference a repair makes (the events dropped, clipped or put back in
their step, see each check), so an error bar is never a guess at a figure it cannot move.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from traceanalyze.analyses.audit.steps import STEP_FIGURES, Weight

# Every figure a finding can move, with its unit.
FIGURES: dict[str, str] = {
    **{name: ("µs" if "_us_" in name else "per iteration") for name in STEP_FIGURES},
    # GPU activity time per iteration put under the op that launched it (kernels --by op).
    "launch_op_us_per_iter": "µs",
    # A rank's clock against the reference rank's (ranks, comms on a folder of ranks).
    "clock_offset_us": "µs",
    # CPU operators in no counted iteration, over the whole trace (summary).
    "cpu_ops_outside_iterations_total": "ops",
}
# The bound verdict: moved when the figures it reads, moved by a finding, can change it.
VERDICT = "bound"
# The figure a figure's share is taken of, where it is not the figure itself.
SHARE_OF = {"launch_op_us_per_iter": "gpu_activity_us_per_iter"}
# Figures moved by an amount that is no share of a mean (a clock offset).
ABSOLUTE = ("clock_offset_us", "cpu_ops_outside_iterations_total")
# Moves smaller than this (in a figure's unit) are rounding, not a move.
_NOISE = 1e-9


@dataclass(frozen=True)
class Finding:
    """What one check found of one kind: ``count`` events, their GPU or CPU time per counted
    iteration, the first examples (``detail``), and how much each figure moves (``moves``:
    figure -> amount per iteration in its unit, from :data:`FIGURES`)."""

    check: str
    finding: str
    count: int
    affected_us_per_iter: float
    detail: str
    moves: Mapping[str, float] = field(default_factory=dict)
    offsets_us: Mapping[int, float] | None = None  # clock_skew: rank -> offset
    verdict_changes: bool = False  # the repair changes the bound verdict
    # figure -> its value with the fault minus its value without (signed); a moved figure
    # missing here is one the fault inflates (delta = +move)
    deltas: Mapping[str, float] = field(default_factory=dict)


def weighed(
    check: str, finding: str, count: int, affected_us: float, detail: str, weight: Weight
) -> Finding:
    """A finding whose moves are a repair's (:func:`~.steps.weigh`); the per-op figure moves
    with the GPU activity (the op table sums the activities' time)."""
    moves, deltas = dict(weight.moves), dict(weight.deltas)
    if "gpu_activity_us_per_iter" in moves:
        moves["launch_op_us_per_iter"] = moves["gpu_activity_us_per_iter"]
    return Finding(
        check,
        finding,
        count,
        affected_us,
        detail,
        moves,
        verdict_changes=weight.verdict_changes,
        deltas=deltas,
    )


def moved_pct(
    figure: str, amount: float, base: Mapping[str, float], delta: float | None = None
) -> float | None:
    """``amount`` as a share of the figure's value without the fault: its value in ``base``
    (with the fault) minus ``delta`` (the fault's signed part of it; +``amount`` when not
    given: the fault inflates it). Above 100% where the fault more than doubles the figure
    (infinite where the figure is 0 without it; None for absolute figures). A figure shared
    of another (SHARE_OF) takes that one's value and ``delta``."""
    if figure in ABSOLUTE:
        return None
    if amount <= _NOISE:
        return 0.0
    of = base.get(SHARE_OF.get(figure, figure), 0.0)
    without = abs(of - (amount if delta is None else delta))
    return amount / without * 100 if without > _NOISE else math.inf


# The figures each command prints (by the command's, and the library function's, name): a
# warning or error that moves one of them by WARN_LINE_PCT or more is said on stderr.
_PER_ITER = tuple(FIGURES)[: len(STEP_FIGURES)]
_GPU_COUNTS = ("kernels_per_iter", "memcpy_per_iter", "memset_per_iter")
_GPU_TIMES = (
    "gpu_activity_us_per_iter",
    "gpu_kernel_us_per_iter",
    "gpu_memcpy_us_per_iter",
    "gpu_memset_us_per_iter",
)
_BETWEEN = ("gpu_busy_us_per_iter", "gpu_span_us_per_iter", "gpu_idle_us_per_iter")
COMMAND_FIGURES: dict[str, tuple[str, ...]] = {
    "summary": (*_PER_ITER, VERDICT, "cpu_ops_outside_iterations_total"),
    "check": (*_PER_ITER, VERDICT),
    "iterations": _PER_ITER,
    "compare": (*_PER_ITER, VERDICT, "launch_op_us_per_iter"),
    "report": (*_PER_ITER, VERDICT, "launch_op_us_per_iter"),
    "diff": (*_PER_ITER, "launch_op_us_per_iter"),
    "explain": (*_PER_ITER, "launch_op_us_per_iter"),
    "kernels": (*_GPU_COUNTS, *_GPU_TIMES, "launch_op_us_per_iter"),
    "occupancy": ("kernels_per_iter", "gpu_kernel_us_per_iter"),
    "memcpy": (
        "memcpy_per_iter",
        "memset_per_iter",
        "gpu_memcpy_us_per_iter",
        "gpu_memset_us_per_iter",
        "launch_op_us_per_iter",
    ),
    "cudnn": ("cpu_op_us_per_iter",),
    "graphs": ("gpu_activity_us_per_iter", "launch_op_us_per_iter"),
    "idle": (*_BETWEEN, "launch_us_per_iter"),
    "streams": (*_GPU_COUNTS, *_BETWEEN),
    "launches": ("kernels_per_iter", "launch_us_per_iter"),
    "critical-path": ("wall_us_per_iter", "gpu_busy_us_per_iter", "cpu_op_us_per_iter"),
    "comms": ("gpu_kernel_us_per_iter", "clock_offset_us"),
    "roofline": ("gpu_kernel_us_per_iter", "gpu_activity_us_per_iter", "launch_op_us_per_iter"),
    "stacks": ("gpu_activity_us_per_iter", "cpu_op_us_per_iter", "kernels_per_iter"),
    "cold": ("gpu_activity_us_per_iter", "cpu_op_us_per_iter", "wall_us_per_iter"),
    "annotate": ("gpu_activity_us_per_iter", "launch_op_us_per_iter"),
    "ranks": (
        "wall_us_per_iter",
        "gpu_busy_us_per_iter",
        "gpu_kernel_us_per_iter",
        "gpu_idle_us_per_iter",
        "clock_offset_us",
    ),
}
