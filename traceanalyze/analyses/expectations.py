"""`check`: "guess, then verify". Users state what they expect of a trace; each expectation
is checked against the summary and reported as held or broken with the measured value.

An expectation is ``METRIC OP NUMBER``:
- METRIC is a summary key (``kernels_per_iter``, ``memcpy_per_iter``, ``gpu_kernel_us_per_iter``,
  ``transpose_ops_per_iter``, ``cudnn_planning_us_per_iter``, ...), or ``category:NAME`` (kernels
  of that category per iteration), or ``category_us:NAME`` (their microseconds per iteration),
  or ``launch_api:NAME`` (launches through that API per iteration);
- OP is one of ``== != <= >= < >``.
Files hold one expectation per line; ``#`` starts a comment.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from traceanalyze.errors import TraceAnalyzeError

_OPERATORS: dict[str, Callable[[float, float], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<=": operator.le,
    ">=": operator.ge,
    "<": operator.lt,
    ">": operator.gt,
}
# The number must be one float() reads: "[\d.]+" let "1.2.3" through to a ValueError traceback.
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_SYNTAX = re.compile(rf"^\s*([A-Za-z_][\w.:/#-]*)\s*(==|!=|<=|>=|<|>)\s*({_NUMBER})\s*$")
_GROUPED = {"category": "category_count", "category_us": "category_us", "launch_api": "launch_apis"}
# Figures are means over iterations; compare with a tolerance far below anything meaningful.
_TOLERANCE = 1e-9


class ExpectationError(TraceAnalyzeError):
    """An expectation that cannot be parsed or names no known metric."""

    exit_code = 2


@dataclass(frozen=True)
class Expectation:
    metric: str
    op: str
    value: float

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.value:g}"


def parse(text: str, source: str = "--expect") -> Expectation:
    match = _SYNTAX.match(text)
    if not match:
        raise ExpectationError(
            f"cannot read the expectation {text!r}",
            source,
            "Write METRIC OP NUMBER, e.g. 'kernels_per_iter <= 1' or 'category:softmax == 0'.",
        )
    metric, op, value = match.groups()
    return Expectation(metric, op, float(value))


def read_file(path: Path) -> list[Expectation]:
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise ExpectationError(
            f"cannot read the expectations file ({exc.strerror})", path
        ) from None
    stripped = (line.split("#", 1)[0].strip() for line in lines)
    return [parse(line, str(path)) for line in stripped if line]


def measure(metric: str, summary: dict[str, Any]) -> float:
    """The measured value of ``metric``; a grouped metric absent from the trace is 0."""
    group, _, member = metric.partition(":")
    if member and group in _GROUPED:
        return float(summary[_GROUPED[group]].get(member, 0.0))
    value = summary.get(metric)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        known = sorted(k for k, v in summary.items() if isinstance(v, (int, float)))
        raise ExpectationError(
            f"unknown metric {metric!r}",
            None,
            "Use one of: " + ", ".join(known) + ", or category:NAME, category_us:NAME, "
            "launch_api:NAME.",
        )
    return float(value)


def check(expectations: Iterable[Expectation], summary: dict[str, Any]) -> pl.DataFrame:
    """One row per expectation: the expectation, the measured value and whether it held."""
    rows = []
    for expectation in expectations:  # a handful of user-written lines, not trace rows
        measured = measure(expectation.metric, summary)
        compare = _OPERATORS[expectation.op]
        held = compare(round(measured, 9), round(expectation.value, 9)) or (
            expectation.op in ("==", "<=", ">=") and abs(measured - expectation.value) <= _TOLERANCE
        )
        rows.append({"expectation": str(expectation), "measured": measured, "held": held})
    schema = {"expectation": pl.String, "measured": pl.Float64, "held": pl.Boolean}
    return pl.DataFrame(rows, schema=schema)
