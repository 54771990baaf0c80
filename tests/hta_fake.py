"""Stand-ins for HTA in tests/test_hta_breakdown.py, in a module of their own: pytest rewrites
the assertions of test modules, and these must fail as plain ``assert`` statements do."""

from __future__ import annotations

import logging
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest


def check_positive(value: int) -> None:
    assert value >= 0


def idle_time_per_rank() -> None:
    non_compute_time = -1
    assert non_compute_time >= 0


class Chatty:
    """A stand-in for HTA's TraceAnalysis that talks as HTA does, then fails or answers."""

    def __init__(self, trace_dir: str) -> None:
        logging.getLogger("hta").warning("Parsed %s", trace_dir)
        logging.getLogger("hta.common").warning("Overall parsing in 0.01 seconds")
        print("printed to stdout")
        print("printed to stderr", file=sys.stderr)
        warnings.warn("inplace is deprecated", FutureWarning, stacklevel=1)
        self.fails = any(p.name.startswith("broken") for p in Path(trace_dir).iterdir())

    def get_temporal_breakdown(self, visualize: bool) -> Any:
        pd = pytest.importorskip("pandas")
        if self.fails:
            raise ValueError("no kernels")
        return pd.DataFrame(
            {
                "rank": [0],
                "idle_time(us)": [3.0],
                "compute_time(us)": [90.0],
                "non_compute_time(us)": [7.0],
                "kernel_time(us)": [100.0],
                "idle_time_pctg": [3.0],
                "compute_time_pctg": [90.0],
                "non_compute_time_pctg": [7.0],
            }
        )

    def get_idle_time_breakdown(self, visualize: bool) -> Any:
        pd = pytest.importorskip("pandas")
        idle = pd.DataFrame({"rank": [0, 0], "idle_category": ["host_wait", "other"]})
        return idle.assign(idle_time=[2.0, 1.0]), None
