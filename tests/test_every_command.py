"""Every command over every real trace (../shared/traces/public and ../shared/traces/corpus,
skipped when absent), in every format: no traceback, bad input as one line, and the accounting
identities of the summary (issue 19's "Done when")."""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import traceanalyze
from tests.conftest import CORPUS_TRACES, MISSING_SHARED, PUBLIC_TRACES
from traceanalyze.analyses.step.verdict import BOUNDS
from traceanalyze.cli import main, options
from traceanalyze.render.formats import FORMATS


def _traces() -> list[Path]:
    found = []
    for folder in (PUBLIC_TRACES, CORPUS_TRACES):
        if folder.is_dir():
            found += sorted(p for p in folder.iterdir() if p.name.endswith((".json", ".json.gz")))
    return found


TRACES = _traces()
# Each command with its arguments; "{t}" is the trace. Two-trace commands compare the trace
# with itself (what they compute must still hold together).
COMMANDS: tuple[tuple[str, ...], ...] = (
    ("info", "{t}"),
    ("summary", "{t}"),
    ("kernels", "{t}"),
    ("occupancy", "{t}"),
    ("cudnn", "{t}"),
    ("memcpy", "{t}"),
    ("stacks", "{t}"),
    ("graphs", "{t}"),
    ("roofline", "{t}"),
    ("cold", "{t}"),
    ("check", "{t}", "-e", "kernels_per_iter >= 0", "-e", "category:other >= 0"),
    ("compare", "{t}"),
    ("diff", "{t}", "{t}"),
    ("explain", "{t}", "{t}"),
    ("report", "{t}"),
)
# report writes markdown only (compare is its table in JSON or CSV).
MARKDOWN_ONLY = frozenset({"report"})
_ERROR = "traceanalyze: error: "


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache folder for the module: each trace is parsed once, then read from Parquet."""
    return tmp_path_factory.mktemp("every_command_cache")


@pytest.fixture
def one_load_per_trace(shared_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The single-trace commands get the same Trace object for a file every time, so the
    analyses memoised per Trace run once per trace, not once per command and format."""
    monkeypatch.setenv("TRACEANALYZE_CACHE_DIR", str(shared_cache))
    real_load = options.load

    @cache
    def load_once(path: Path) -> traceanalyze.Trace:
        return real_load(path)

    def load(path: Path, **_: Any) -> traceanalyze.Trace:
        return load_once(Path(path).resolve())

    monkeypatch.setattr(options, "load", load)
    yield
    load_once.cache_clear()


def _run(args: list[str]) -> Result:
    return CliRunner().invoke(main, args)


def _assert_clean(result: Result, args: list[str]) -> None:
    """Success, or bad input said in one line with exit status 1 (never a usage error: the
    arguments here are valid)."""
    shown = " ".join(args)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{shown}: traceback") from result.exception
    assert result.exit_code in (0, 1), f"{shown}: {result.stderr}"
    assert "Traceback" not in result.output, shown
    if result.exit_code:
        lines = [line for line in result.stderr.splitlines() if not line.startswith("wrote ")]
        lines = [line for line in lines if "warning:" not in line]
        assert len(lines) == 1 and lines[0].startswith(_ERROR), f"{shown}: {result.stderr}"


def _assert_figures_add_up(summary: dict[str, Any], shown: str) -> None:
    """The accounting identities of the README's time model, on one summary object."""
    activity = summary["gpu_activity_us_per_iter"]
    approx = pytest.approx(activity, rel=1e-9, abs=1e-6)
    assert sum(summary["category_us"].values()) == approx, shown
    parts = ("gpu_kernel_us_per_iter", "gpu_memcpy_us_per_iter", "gpu_memset_us_per_iter")
    assert sum(summary[p] for p in parts) == approx, shown
    # The step model: the window's split adds up to the wall, the idle causes to the idle.
    wall = summary["wall_us_per_iter"]
    tolerance = 1e-6 + 1e-9 * abs(wall)
    busy, idle = summary["gpu_busy_us_per_iter"], summary["gpu_idle_us_per_iter"]
    assert busy <= wall + tolerance, shown
    assert idle >= -tolerance, shown
    if activity or busy:  # without any GPU activity there is no GPU timeline to be idle
        assert busy + idle == pytest.approx(wall, rel=1e-9, abs=1e-6), shown
    split = ("compute_us_per_iter", "exposed_communication_us_per_iter", "exposed_copy_us_per_iter")
    assert sum(summary[p] for p in split) == pytest.approx(busy, rel=1e-9, abs=1e-6), shown
    causes = summary["idle_us_by_cause"]
    assert sum(causes.values()) == pytest.approx(idle, rel=1e-9, abs=1e-6), shown
    assert 0 <= summary["carried_in_us_per_iter"] <= busy + tolerance, shown
    assert summary["bound"] in BOUNDS, shown
    counts = summary["category_count"]
    kinds = summary["kernels_per_iter"] + summary["memcpy_per_iter"] + summary["memset_per_iter"]
    assert sum(counts.values()) == pytest.approx(kinds, rel=1e-9, abs=1e-9), shown


@pytest.mark.skipif(not TRACES, reason=f"{MISSING_SHARED}: {PUBLIC_TRACES}, {CORPUS_TRACES}")
@pytest.mark.parametrize("trace", TRACES, ids=[p.name for p in TRACES])
def test_every_command_in_every_format(
    trace: Path, one_load_per_trace: None, tmp_path: Path
) -> None:
    for command in COMMANDS:
        for fmt in ("md",) if command[0] in MARKDOWN_ONLY else FORMATS:
            # Parquet is written to a file only (-o by its suffix).
            chosen = ["-o", str(tmp_path / "out.parquet"), "--force"] if fmt == "parquet" else []
            args = [a.format(t=trace) for a in command] + (chosen or ["--format", fmt])
            result = _run(args)
            _assert_clean(result, args)
            if command[0] == "summary" and fmt == "json" and result.exit_code == 0:
                _assert_figures_add_up(json.loads(result.stdout), " ".join(args))
