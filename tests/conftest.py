"""Fixtures shared by the loader tests: an isolated cache and the public real-trace corpus."""

from __future__ import annotations

from pathlib import Path

import pytest

# Real traces from other projects' test suites, kept beside (never inside) the repository.
PUBLIC_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "public"


@pytest.fixture(autouse=True)
def cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own empty cache folder (outside ``tmp_path``, which holds inputs)."""
    folder = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("TRACEANALYZE_CACHE_DIR", str(folder))
    return folder


@pytest.fixture
def public() -> Path:
    """The public trace folder; the test is skipped where it is absent."""
    if not PUBLIC_TRACES.is_dir():
        pytest.skip(f"public traces not found at {PUBLIC_TRACES}")
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
            "public_trace", [pytest.param(None, marks=pytest.mark.skip("no public traces"))]
        )
