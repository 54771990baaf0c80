"""TRACEANALYZE_SHARED points the tests at the shared test data; without it they say, in one
line, how many tests they skipped and why (a pytest run in a subprocess, on one test)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_traces" / "h200_default" / "sdpa_flash.json.gz"
ONE_TEST = "tests/test_names.py::test_no_two_kernels_of_a_public_trace_read_alike"


def pytest_with_shared(shared: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", ONE_TEST],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "TRACEANALYZE_SHARED": str(shared)},
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_environment_variable_names_the_shared_folder(tmp_path: Path) -> None:
    public = tmp_path / "traces" / "public"
    public.mkdir(parents=True)
    (public / "only_this.json.gz").symlink_to(SAMPLE)
    output = pytest_with_shared(tmp_path)
    assert "read_alike[only_this.json.gz] PASSED" in output
    assert "skipped" not in output


def test_skips_for_want_of_it_are_summed_up_in_one_line(tmp_path: Path) -> None:
    output = pytest_with_shared(tmp_path / "nowhere")
    assert (
        f"1 test skipped: shared test data not found at {tmp_path / 'nowhere'} (set "
        "TRACEANALYZE_SHARED to a folder holding traces/public and bench/)"
    ) in output.splitlines()
