"""The limits of the commands' numeric arguments, as data: the library's functions check them
as the command line's options do (tests/test_api.py keeps the two in step), and a value of the
wrong type or out of range is one error saying what was expected.

>>> check_number("top", 0)
Traceback (most recent call last):
...
traceanalyze.errors.UsageError: top=0 is out of range: give a whole number of at least 1 ...
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traceanalyze.errors import UsageError


@dataclass(frozen=True)
class Limit:
    """What a numeric argument takes: whole numbers or any, the least value (``above``: the
    value must exceed it), and what None means where None is allowed."""

    least: float
    whole: bool = True
    above: bool = False
    none_means: str | None = None

    def describe(self) -> str:
        kind = "a whole number" if self.whole else "a number"
        bound = f"above {self.least:g}" if self.above else f"of at least {self.least:g}"
        default = f" (or None for {self.none_means})" if self.none_means else ""
        return f"{kind} {bound}{default}"


# Argument -> its limit, as the command line's option declares it.
LIMITS: dict[str, Limit] = {
    "top": Limit(1, none_means="every row"),
    "largest": Limit(0),
    "skip": Limit(0),
    "workers": Limit(1, none_means="one per CPU"),
    "straggler_pct": Limit(0, whole=False),
    "peak_tflops": Limit(0, whole=False, above=True, none_means="the GPU's table entry"),
    "peak_tbps": Limit(0, whole=False, above=True, none_means="the GPU's table entry"),
}


def check_number(name: str, value: Any) -> None:
    """A :class:`UsageError` (TypeError for a value that is no number) unless ``value`` is
    within argument ``name``'s limit."""
    limit = LIMITS[name]
    if value is None and limit.none_means:
        return
    numeric = isinstance(value, int) if limit.whole else isinstance(value, (int, float))
    if isinstance(value, bool) or not numeric:
        raise TypeError(f"{name} takes {limit.describe()}, not {type(value).__name__} {value!r}")
    low = value <= limit.least if limit.above else value < limit.least
    if low:
        raise UsageError(f"{name}={value!r} is out of range: give {limit.describe()}")


def check_numbers(**values: Any) -> None:
    """:func:`check_number` for each keyword argument."""
    for name, value in values.items():
        check_number(name, value)


def check_choice(name: str, value: Any, choices: tuple[str, ...] | list[str]) -> None:
    """A :class:`UsageError` unless ``value`` is one of ``choices`` (None passes: the
    default)."""
    if value is not None and value not in choices:
        raise UsageError(f"{name}={value!r} is not one of: {', '.join(map(str, choices))}")


# What a function given a trace takes, said in its type errors.
TRACE_INPUT = "a trace file or folder (str or pathlib.Path), a loaded Trace or a VariantSet"


def is_path(value: Any) -> bool:
    return isinstance(value, (str, os.PathLike))


def wrong_input(value: Any, expected: str = TRACE_INPUT) -> TypeError:
    """The TypeError for an input of another type: what was expected, what was given."""
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return TypeError(f"expected {expected}; got {type(value).__name__} {shown}")


def as_path(value: Any, expected: str = "a path (str or pathlib.Path)") -> Path:
    if not is_path(value):
        raise wrong_input(value, expected)
    return Path(value)
