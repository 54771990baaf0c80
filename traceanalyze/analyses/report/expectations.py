"""`check`: "guess, then verify". Users state what they expect of a trace; each expectation
is checked against the summary and reported as held or broken with the measured value.

An expectation is ``METRIC OP NUMBER``:
- METRIC is a numeric summary key (``kernels_per_iter``, ``memcpy_per_iter``,
  ``gpu_busy_us_per_iter``, ``transpose_ops_per_iter``, ``cudnn_cpu_us_per_iter``, ...), or
  ``category:NAME`` (activities of that taxonomy category per iteration), or
  ``category_us:NAME`` (their microseconds per iteration), or ``launch_api:NAME`` (launches
  through that runtime/driver API per iteration). An unknown metric, category or API is a
  usage error (exit 2) that lists the valid ones: a typo must never pass as "0 == 0".
- OP is one of ``== != <= >= < >``.
Files hold one expectation per line; ``#`` starts a comment.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from traceanalyze.classify import CATEGORIES
from traceanalyze.errors import UsageError
from traceanalyze.link import LAUNCH_APIS

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


class ExpectationError(UsageError):
    """An expectation that cannot be parsed or names no known metric, category or API."""


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


# Summary keys that hold text, not numbers (also where a trace leaves them null).
_TEXT_KEYS = frozenset({"iteration_source", "iteration_note", "bound", "bound_note", "wall_source"})


def _is_numeric(key: str, value: Any) -> bool:
    """A number (null where the trace gives none), never text, a flag or a table."""
    if value is None:
        return key not in _TEXT_KEYS
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def measure(metric: str, summary: Mapping[str, Any]) -> float:
    """The measured value of ``metric`` (NaN where the trace gives it no value, which breaks
    any expectation); a valid category or API absent from the trace is 0."""
    group, _, member = metric.partition(":")
    if member and group in _GROUPED:
        present = summary[_GROUPED[group]]
        valid = CATEGORIES if group.startswith("category") else (*LAUNCH_APIS, *present)
        if member not in valid:
            kind = "category" if group.startswith("category") else "launch API"
            raise ExpectationError(
                f"unknown {kind} {member!r} in {metric!r}",
                None,
                f"Use one of: {', '.join(sorted(set(valid)))}.",
            )
        return float(present.get(member, 0.0))
    numeric = sorted(k for k, v in summary.items() if _is_numeric(k, v))
    if isinstance(summary.get(metric), str):
        raise ExpectationError(
            f"{metric!r} is not a number (it holds {summary[metric]!r}); check compares numbers",
            None,
            "Use one of: " + ", ".join(numeric) + ".",
        )
    if metric not in numeric:
        raise ExpectationError(
            f"unknown metric {metric!r}",
            None,
            "Use one of: " + ", ".join(numeric) + ", or category:NAME, category_us:NAME, "
            "launch_api:NAME.",
        )
    value = summary[metric]
    return float("nan") if value is None else float(value)


def check(expectations: Iterable[Expectation], summary: Mapping[str, Any]) -> pl.DataFrame:
    """One row per expectation: the expectation, the measured value and whether it held."""
    rows = []
    for expectation in expectations:  # a handful of user-written lines, not trace rows
        measured = measure(expectation.metric, summary)
        compare = _OPERATORS[expectation.op]
        held = compare(round(measured, 9), round(expectation.value, 9)) or (
            expectation.op in ("==", "<=", ">=") and abs(measured - expectation.value) <= _TOLERANCE
        )
        measured_or_none = None if math.isnan(measured) else measured
        rows.append({"expectation": str(expectation), "measured": measured_or_none, "held": held})
    schema = {"expectation": pl.String, "measured": pl.Float64, "held": pl.Boolean}
    return pl.DataFrame(rows, schema=schema)
