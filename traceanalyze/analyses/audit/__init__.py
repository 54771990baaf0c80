"""`audit`: can this trace be trusted? Checks of the trace itself, before any analysis of it.

Each check (:data:`~traceanalyze.analyses.audit.rules.CHECKS`) is a pure function of a Trace
returning what it found, one :class:`~traceanalyze.analyses.audit.figures.Finding` per kind;
:func:`audit` runs them all and weighs each finding: its severity (the rules' table), the
figures it moves and by how much, and per figure an error bar (the sum of what the warnings
and errors move it by). A check that found nothing is one ``info`` row with count 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import polars as pl

from traceanalyze.analyses.activities import per_trace
from traceanalyze.analyses.audit.clocks import clock_skew, gpu_clock_offset
from traceanalyze.analyses.audit.figures import (
    FIGURES,
    SHARE_OF,
    VERDICT,
    Finding,
    moved_pct,
)
from traceanalyze.analyses.audit.launches import activity_without_launch, launches_without_activity
from traceanalyze.analyses.audit.recording import (
    graph_replays_opaque,
    missing_metadata,
    profiler_overhead,
)
from traceanalyze.analyses.audit.rules import (
    CHECKS,
    CLEAN,
    ERROR,
    FINDINGS,
    INFO,
    WARN_LINE_PCT,
    WARNING,
)
from traceanalyze.analyses.audit.steps import counted_steps, step_means
from traceanalyze.analyses.audit.streams import duration_overflow, overlapping_on_stream
from traceanalyze.analyses.audit.timestamps import bad_timestamps, truncated
from traceanalyze.display import Shown
from traceanalyze.trace import Trace

# The checks of a trace alone (profiler_overhead also reads the capture's median).
RUNNERS: dict[str, Callable[[Trace], list[Finding]]] = {
    "launches_without_activity": launches_without_activity,
    "activity_without_launch": activity_without_launch,
    "overlapping_on_stream": overlapping_on_stream,
    "duration_overflow": duration_overflow,
    "bad_timestamps": bad_timestamps,
    "truncated": truncated,
    "clock_skew": clock_skew,
    "gpu_clock_offset": gpu_clock_offset,
    "profiler_overhead": profiler_overhead,
    "graph_replays_opaque": graph_replays_opaque,
    "missing_metadata": missing_metadata,
}
# The columns of the audit's table (the JSON keys of each row of `audit --format json`).
CHECK_COLUMNS: dict[str, pl.DataType] = {
    "check": pl.String(),
    "finding": pl.String(),
    "severity": pl.String(),
    "count": pl.Int64(),
    "affected_us_per_iter": pl.Float64(),
    "figures": pl.List(pl.String()),
    "moved_pct": pl.Float64(),
    "detail": pl.String(),
}
# What a clean check says it looked for.
CLEAN_DETAIL: dict[str, str] = {
    "launches_without_activity": "every launch call has its GPU activity",
    "activity_without_launch": "every GPU activity has its launch call",
    "overlapping_on_stream": "no two activities of one stream overlap",
    "duration_overflow": "no activity runs past the next one or beyond its kind's limits",
    "bad_timestamps": "no event at ts 0, with a negative duration or outside its rank's span; "
    "steps in order",
    "truncated": "no open, cut or empty last step; no gzip file cut short",
    "clock_skew": "one rank: no clocks to compare",
    "gpu_clock_offset": "launch-to-start delays fit one clock for the CPU and the GPU",
    "profiler_overhead": "nothing recorded besides ops and GPU activity",
    "graph_replays_opaque": "no graph replay without its capture",
    "missing_metadata": "device properties, a known GPU and distributed info where needed",
}
# One sentence per figure of the audit; the README's "Can this trace be trusted?" prints them.
DEFINITIONS: dict[str, str] = {
    "affected_us_per_iter": "the GPU or CPU time of those events inside the counted "
    "iterations (a missing activity's: estimated from recorded ones launched alike), per "
    "iteration",
    "figures": "the figures the finding moves: those that change when its events are repaired "
    "(dropped, clipped, put back in their step), and `bound` where the verdict can change",
    "moved_pct": "the largest move of one of those figures, as a share of the figure without "
    "the fault (its repaired value: above 100% where the fault more than doubles it); null "
    "where it moves none, or moves one that is 0 without the fault (no share to give)",
    "severity": "`info` for what a profiler does by design, `warning` for a fault, `error` for "
    "a fault that moves a figure by 10% or more",
    "ok": "no warning and no error",
    "error_bars": "per figure, what the warnings and errors move it by in all, in its unit: the "
    "figure is within ± this of its true value as far as the trace's own faults go",
    "offsets_us": "clock_skew: each rank's clock minus the lowest rank's, in µs, from "
    "collectives that must end together",
    "launch_op_us_per_iter": "(a figure in `figures` and `error_bars`) the GPU activity time "
    "per iteration put under the op that launched it: `us_per_iter` of `kernels --by op` and "
    "of `memcpy`'s rows; a finding moves it where activities lose or change their launching op",
}


@dataclass(frozen=True, repr=False)
class Audit(Shown):
    """What :func:`audit` found in one trace: ``checks`` (one row per finding, CHECK_COLUMNS),
    the error bar per figure, the rank clock offsets, and the figures' values the shares are
    of (``figures``)."""

    checks: pl.DataFrame
    error_bars: dict[str, float]
    offsets_us: dict[int, float]
    figures: dict[str, float]
    findings: tuple[Finding, ...] = ()

    @property
    def ok(self) -> bool:
        """No warning and no error."""
        return bool((self.checks["severity"] == INFO).all())

    def warnings_for(self, printed: Mapping[str, str]) -> dict[str, str]:
        """Each warning or error that moves one of ``printed`` figures (figure -> the name the
        command prints it under, :data:`~.figures.COMMAND_FIGURES`) by ``WARN_LINE_PCT`` or
        more, or that its rule says always (a cut gzip file: its detail), the largest move
        first: ``check/finding`` -> what it moves most, by how much
        (``{"launches_without_activity/dropped": "22 events move memset_per_iter ±22 per
        iteration (0 without the fault)"}``)."""
        said: list[tuple[float, str, str]] = []
        for finding in self.findings:
            if severity(finding, self.figures) == INFO:
                continue
            moves = [
                (pct, figure, amount)
                for figure, amount in finding.moves.items()
                if figure in printed
                and (pct := _pct(finding, figure, amount, self.figures)) is not None
                and pct >= WARN_LINE_PCT
            ]
            if FINDINGS[(finding.check, finding.finding)].said_always:
                said.append((math.inf, f"{finding.check}/{finding.finding}", finding.detail))
            elif finding.verdict_changes and VERDICT in printed:
                said.append(
                    (math.inf, f"{finding.check}/{finding.finding}", self._verdict(finding))
                )
            elif moves:
                pct, figure, amount = max(moves)
                said.append(
                    (
                        pct,
                        f"{finding.check}/{finding.finding}",
                        self._move(finding, printed[figure], figure, amount, pct),
                    )
                )
        return {key: text for _, key, text in sorted(said, key=lambda item: -item[0])}

    @staticmethod
    def _verdict(finding: Finding) -> str:
        return f"{_events(finding.count)} the bound verdict once repaired"

    def _move(self, finding: Finding, shown: str, figure: str, amount: float, pct: float) -> str:
        value = amount / pct * 100 if pct else 0.0  # the figure without the fault
        share = "0 without the fault" if math.isinf(pct) else f"{pct:.1f}% of {value:,.4g}"
        return (
            f"{_events(finding.count, 'move')} {shown} ±{amount:,.4g} {FIGURES[figure]} ({share})"
        )


def _events(count: int, verb: str = "change") -> str:
    """``1 event moves``, ``3 events move``."""
    return f"{count:,} event{'s' if count != 1 else ''} {verb}{'s' if count == 1 else ''}"


def severity(finding: Finding, figures: Mapping[str, float]) -> str:
    """``info`` for what is by design or found nothing, else ``warning``, or ``error`` where
    the finding moves a figure by its rule's share or more."""
    rule = FINDINGS[(finding.check, finding.finding)]
    if not finding.count or rule.severity == INFO:
        return INFO
    if rule.error_pct is not None and _largest_pct(finding, figures) >= rule.error_pct:
        return ERROR
    return WARNING


def _pct(
    finding: Finding, figure: str, amount: float, figures: Mapping[str, float]
) -> float | None:
    """``amount`` as a share of ``figure`` without ``finding``'s fault (a figure shared of
    another: that one without the fault, which moves by its own delta or not at all)."""
    of = SHARE_OF.get(figure, figure)
    return moved_pct(figure, amount, figures, finding.deltas.get(of, None if of == figure else 0.0))


def _largest_pct(finding: Finding, figures: Mapping[str, float]) -> float:
    shares = [_pct(finding, f, amount, figures) for f, amount in finding.moves.items()]
    return max((s for s in shares if s is not None), default=0.0)


# Checks whose findings move no figure, only the bound verdict (``verdict_changes``); they read
# the step model, most of an audit's time on a large trace (the 175 MB bench trace: 0.56 of
# 0.68 s), which a command that prints no verdict (kernels, memcpy, ...) does not build.
VERDICT_ONLY_CHECKS = ("gpu_clock_offset",)


@per_trace
def _findings(trace: Trace) -> tuple[Finding, ...]:
    """Every check's findings on ``trace`` (the capture's median aside), in check order."""
    return _findings_apart_from_verdict(trace) + tuple(
        f for check in VERDICT_ONLY_CHECKS for f in RUNNERS[check](trace)
    )


@per_trace
def _findings_apart_from_verdict(trace: Trace) -> tuple[Finding, ...]:
    """The findings of every check but :data:`VERDICT_ONLY_CHECKS`."""
    return tuple(
        f for check in CHECKS if check not in VERDICT_ONLY_CHECKS for f in RUNNERS[check](trace)
    )


def audit(trace: Trace, *, untraced_median_ms: float | None = None, verdict: bool = True) -> Audit:
    """Every check on ``trace``; ``untraced_median_ms`` (the capture's median time per call,
    without the profiler) lets ``profiler_overhead`` measure what profiling added;
    ``verdict=False`` leaves out :data:`VERDICT_ONLY_CHECKS` (for a command that prints no
    bound verdict: their findings could not move what it prints)."""
    found = list(_findings(trace) if verdict else _findings_apart_from_verdict(trace))
    found.sort(key=lambda f: CHECKS.index(f.check))  # stable: a check's own order kept
    if untraced_median_ms:
        measured = profiler_overhead(trace, untraced_median_ms)
        found += [f for f in measured if f.finding == "measured"]
        found.sort(key=lambda f: CHECKS.index(f.check))
    # The figures are read only where a finding moves one (the step model's tables are most
    # of a clean trace's audit).
    figures = _base(trace) if any(f.moves for f in found) else {}
    return Audit(
        checks=_table(found, figures),
        error_bars=_error_bars(found, figures),
        offsets_us={
            rank: offset
            for f in found
            if f.offsets_us is not None
            for rank, offset in f.offsets_us.items()
        },
        figures=figures,
        findings=tuple(found),
    )


def command_warnings(trace: Trace, printed: Mapping[str, str]) -> dict[str, str]:
    """The audit line of a command that prints ``printed`` (figure -> its printed name,
    :data:`~.figures.COMMAND_FIGURES`): :meth:`Audit.warnings_for` of the checks that could
    move what it prints."""
    return audit(trace, verdict=VERDICT in printed).warnings_for(printed)


def _base(trace: Trace) -> dict[str, float]:
    """The figures' values over the counted iterations (the shares' denominators)."""
    means = step_means(counted_steps(trace))
    return {**means, **{f: means[of] for f, of in SHARE_OF.items()}}


def _table(found: Sequence[Finding], figures: Mapping[str, float]) -> pl.DataFrame:
    rows: list[tuple[object, ...]] = []
    for check in CHECKS:
        mine = [f for f in found if f.check == check]
        if not mine:
            rows.append((check, CLEAN, INFO, 0, 0.0, [], None, CLEAN_DETAIL[check]))
        for f in mine:  # a handful of findings per check
            moved = sorted(f.moves)
            if f.verdict_changes:
                moved.append(VERDICT)
            pct = _largest_pct(f, figures) if f.moves else None
            if pct is not None and math.isinf(pct):
                pct = None  # a figure that is 0 without the fault: no share to give
            rows.append(
                (f.check, f.finding, severity(f, figures), f.count, f.affected_us_per_iter,
                 moved, pct, f.detail)
            )  # fmt: skip
    return pl.DataFrame(rows, schema=CHECK_COLUMNS, orient="row")


def _error_bars(found: Sequence[Finding], figures: Mapping[str, float]) -> dict[str, float]:
    bars: dict[str, float] = {}
    for f in found:
        if severity(f, figures) == INFO:
            continue
        for figure, amount in f.moves.items():
            bars[figure] = bars.get(figure, 0.0) + amount
    return {figure: bars[figure] for figure in FIGURES if figure in bars}


__all__ = ["CHECKS", "DEFINITIONS", "Audit", "Finding", "audit", "command_warnings", "severity"]
