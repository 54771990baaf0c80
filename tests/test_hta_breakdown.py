"""The --hta analysis without HTA itself: its output is captured, its failures are described in
words, and it returns a frame (the renderer is separate)."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import polars as pl
import pytest

from tests.hta_fake import Chatty, check_positive, idle_time_per_rank
from tests.micro import call, kernel, op, write_trace
from traceanalyze.analyses.report import hta_breakdown as module
from traceanalyze.analyses.report.hta_breakdown import (
    SCHEMA,
    describe_error,
    failures,
    hta_breakdown,
)
from traceanalyze.load.variants import load_variants
from traceanalyze.render.report.hta import hta_markdown


def test_an_empty_assertion_is_described_by_the_check_that_failed() -> None:
    with pytest.raises(AssertionError) as caught:
        check_positive(-1)
    assert str(caught.value) == ""  # what the report used to show: "AssertionError: "
    assert describe_error(caught.value) == (
        "AssertionError (`assert value >= 0` failed in check_positive, hta_fake.py:16)"
    )


def test_a_known_failure_gets_its_cause() -> None:
    with pytest.raises(AssertionError) as caught:
        idle_time_per_rank()
    assert describe_error(caught.value).endswith(
        "whole microseconds, so an activity under 1 µs (a memset, for example) can get a "
        "negative duration"
    )
    assert describe_error(KeyError("rank")) == "KeyError: 'rank'"


def test_hta_says_nothing_and_its_figures_are_totals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("pandas")
    monkeypatch.setattr(module, "require_hta", lambda: Chatty)
    events = [op("aten::mm", 0, 10), call("cudaLaunchKernel", 1, 2, 1), kernel("k", 5, 3, 1)]
    paths = [write_trace(tmp_path, events, name=f"{n}.json") for n in ("good", "broken")]

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning that escaped would fail the test
        frame = hta_breakdown(load_variants(paths, cache=False))

    assert capsys.readouterr() == ("", "")
    assert frame.schema == pl.Schema(SCHEMA)
    assert frame.row(0, named=True) == {
        "variant": "good",
        "idle_us_total": 3.0,
        "compute_us_total": 90.0,
        "non_compute_us_total": 7.0,
        "kernel_span_us_total": 100.0,
        "idle_pct": 3.0,
        "compute_pct": 90.0,
        "non_compute_pct": 7.0,
        "idle_host_wait_us_total": 2.0,
        "idle_kernel_wait_us_total": 0.0,
        "idle_other_us_total": 1.0,
        "error": None,
    }
    [(variant, error)] = failures(frame).rows()
    assert variant == "broken"
    assert error.startswith("ValueError: no kernels (in get_temporal_breakdown, ")
    # HTA's logger is as it was.
    assert logging.getLogger("hta").handlers == []
    assert logging.getLogger("hta").propagate
    section = hta_markdown(frame)
    assert "| variant | kernel span µs (total) | compute µs (total) |" in section
    assert section.rstrip().endswith(f"| {error} |")
