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


# The figures each command prints (by the command's, and the library function's, name), each
# with the name it is printed under: a warning or error that moves one of them by
# WARN_LINE_PCT or more is said on stderr, naming what the command printed. A figure a command
# prints only split into rows (`kernels`' count_per_iter per name) is named by that column and
# the rows whose sum it is; a figure the command prints in no form is not listed (a warning
# naming it would send the reader looking for what is not there: issue 41's newcomer met
# `kernels` warning about memcpy_per_iter). tests/test_audit_cli.py holds each name to the
# command's declared columns.
_PER_ITER = tuple(FIGURES)[: len(STEP_FIGURES)]


def _named(*figures: str) -> dict[str, str]:
    return {figure: figure for figure in figures}


def _summed(column: str, rows: str, *figures: str) -> dict[str, str]:
    """``figures``, each printed as ``column`` of ``rows`` (a figure's kind of rows: the
    figure's own part of them), which add up to it."""
    return {figure: f"{column} of {rows} (their sum is {figure})" for figure in figures}


_KINDS = {
    "kernels_per_iter": "the kernel rows",
    "memcpy_per_iter": "the memcpy rows",
    "memset_per_iter": "the memset rows",
    "gpu_kernel_us_per_iter": "the kernel rows",
    "gpu_memcpy_us_per_iter": "the memcpy rows",
    "gpu_memset_us_per_iter": "the memset rows",
}


def _by_kind(column: str, *figures: str) -> dict[str, str]:
    return {f: _summed(column, _KINDS[f], f)[f] for f in figures}


_COUNTS = ("kernels_per_iter", "memcpy_per_iter", "memset_per_iter")
_TIMES = ("gpu_kernel_us_per_iter", "gpu_memcpy_us_per_iter", "gpu_memset_us_per_iter")
# What the per-step table prints of each step figure: the step's X of X_per_iter.
_PER_STEP = {
    f: f"{f.removesuffix('_per_iter')} (its mean over the counted steps is {f})" for f in _PER_ITER
}
# The summary's figures (own_busy_us_per_iter is the step table's and explain's, not the
# summary's).
_SUMMARY = tuple(f for f in _PER_ITER if f != "own_busy_us_per_iter")
# The summary figures `diff` compares, one row each (analyses/variants/diff.py's FIGURES).
_DIFF = (
    "gpu_busy_us_per_iter", "gpu_activity_us_per_iter", "gpu_kernel_us_per_iter",
    "gpu_memcpy_us_per_iter", "gpu_memset_us_per_iter", "gpu_idle_us_per_iter",
    "cpu_op_us_per_iter", "launch_us_per_iter", "wall_us_per_iter", *_COUNTS,
)  # fmt: skip
# The step figures a report prints by name: its compare tables' columns (the rest it prints
# only in prose and definitions).
_REPORT = (
    "gpu_busy_us_per_iter", "wall_us_per_iter", "gpu_activity_us_per_iter",
    "gpu_kernel_us_per_iter", "cpu_op_us_per_iter", *_COUNTS,
)  # fmt: skip
COMMAND_FIGURES: dict[str, dict[str, str]] = {
    "summary": _named(*_SUMMARY, VERDICT, "cpu_ops_outside_iterations_total"),
    # `check` prints the metrics its expectations name (cli/analyses.py narrows it to them).
    "check": _named(*_SUMMARY),
    "iterations": _PER_STEP,
    "compare": _named(*_REPORT, VERDICT),
    "report": _named(*_REPORT, VERDICT),
    "diff": _named(*_DIFF),
    # explain's `cpu` rows and its base_figures / new_figures (own busy as gpu_own_busy).
    "explain": _named(
        "cpu_op_us_per_iter",
        "launch_us_per_iter",
        "gpu_span_us_per_iter",
        "gpu_activity_us_per_iter",
        "wall_us_per_iter",
    )
    | {"own_busy_us_per_iter": "gpu_own_busy_us_per_iter"},
    "kernels": _by_kind("count_per_iter", *_COUNTS)
    | _by_kind("us_per_iter", *_TIMES)
    | _summed("us_per_iter", "the rows", "gpu_activity_us_per_iter")
    | {"launch_op_us_per_iter": "us_per_iter of `kernels --by op` (per launching op)"},
    "occupancy": _by_kind("count_per_iter", "kernels_per_iter")
    | _summed("us_per_iter", "the rows", "gpu_kernel_us_per_iter"),
    "memcpy": _by_kind("count_per_iter", "memcpy_per_iter", "memset_per_iter")
    | _by_kind("us_per_iter", "gpu_memcpy_us_per_iter", "gpu_memset_us_per_iter")
    | {"launch_op_us_per_iter": "us_per_iter (per launching op, `launch_op`)"},
    "cudnn": {},
    "graphs": {},
    "idle": _named("gpu_idle_us_per_iter", "wall_us_per_iter", VERDICT),
    "streams": {f: _summed(f, "the streams", f)[f] for f in _COUNTS}
    | _summed("activity_us_per_iter", "the streams", "gpu_activity_us_per_iter")
    | _summed("kernel_us_per_iter", "the streams", "gpu_kernel_us_per_iter"),
    # every activity launched in the iterations, one row per name
    "launches": _by_kind("count_per_iter", *_COUNTS),
    "critical-path": {},
    "comms": _named("clock_offset_us"),
    "roofline": _named("gpu_activity_us_per_iter"),
    "stacks": _summed("gpu_us_per_iter", "the frames", "gpu_activity_us_per_iter")
    | _summed("cpu_us_per_iter", "the frames", "cpu_op_us_per_iter")
    | _summed("kernels_per_iter", "the frames", "kernels_per_iter"),
    "cold": {},
    "annotate": {},
    "ranks": _named(
        "wall_us_per_iter",
        "gpu_busy_us_per_iter",
        "gpu_kernel_us_per_iter",
        "gpu_idle_us_per_iter",
        "clock_offset_us",
    ),
}
