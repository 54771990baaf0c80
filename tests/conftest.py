"""Fixtures shared by the tests: an isolated cache, a record of the files parsed, and the public
real-trace corpus, which lives outside the repository (``$TRACEANALYZE_SHARED``, else
``../shared`` beside it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import traceanalyze

# The folder holding traces/public (real traces from other projects' test suites) and bench/
# (the 175 MB benchmark trace), kept beside (never inside) the repository.
SHARED = Path(
    os.environ.get("TRACEANALYZE_SHARED") or Path(__file__).resolve().parents[2] / "shared"
)
PUBLIC_TRACES = SHARED / "traces" / "public"
# Real LLM, recsys and odd-format traces gathered for issue 19 (see its PROVENANCE.md).
CORPUS_TRACES = SHARED / "traces" / "corpus"
# Every skip for want of the shared folder says this, so that the summary can count them.
MISSING_SHARED = "shared test data not found"


def skip_without(path: Path) -> None:
    """Skip the test when ``path`` (under :data:`SHARED`) is absent."""
    if not path.exists():
        pytest.skip(f"{MISSING_SHARED}: {path}")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line saying how many tests did not run for want of the shared folder, and the fix."""
    skipped = [
        report
        for report in terminalreporter.stats.get("skipped", [])
        if MISSING_SHARED in str(getattr(report, "longrepr", ""))
    ]
    if skipped:
        tests = "test" if len(skipped) == 1 else "tests"
        terminalreporter.write_line(
            f"{len(skipped)} {tests} skipped: {MISSING_SHARED} at {SHARED} (set "
            "TRACEANALYZE_SHARED to a folder holding traces/public and bench/)",
            yellow=True,
        )


@pytest.fixture(autouse=True)
def cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own empty cache folder (outside ``tmp_path``, which holds inputs)."""
    folder = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("TRACEANALYZE_CACHE_DIR", str(folder))
    return folder


@pytest.fixture
def public() -> Path:
    """The public trace folder; the test is skipped where it is absent."""
    skip_without(PUBLIC_TRACES)
    return PUBLIC_TRACES


def public_trace_files() -> list[Path]:
    if not PUBLIC_TRACES.is_dir():
        return []
    return sorted(p for p in PUBLIC_TRACES.iterdir() if p.name.endswith((".json", ".json.gz")))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test asking for ``public_trace`` runs once per public trace file (skipped without any)."""
    if "public_trace" not in metafunc.fixturenames:
        return
    files = public_trace_files()
    if files:
        metafunc.parametrize("public_trace", files, ids=[p.name for p in files])
    else:
        metafunc.parametrize(
            "public_trace",
            [pytest.param(None, marks=pytest.mark.skip(f"{MISSING_SHARED}: {PUBLIC_TRACES}"))],
        )


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The files actually parsed (cache misses) during the test."""
    seen: list[Path] = []
    loader = traceanalyze.load  # the module (callable as load(), not shadowed by it)
    parse = loader.parse_file

    def counting(path: Path, *args: object, **kwargs: object) -> traceanalyze.Trace:
        seen.append(path)
        trace: traceanalyze.Trace = parse(path, *args, **kwargs)
        return trace

    monkeypatch.setattr(loader, "parse_file", counting)
    return seen
