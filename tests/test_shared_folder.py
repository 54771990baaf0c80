"""TRACEANALYZE_SHARED points the tests at the shared test data; without it they say, in one
line, how many tests they skipped and why."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ONE_TEST = "tests/test_names.py::test_no_two_kernels_of_a_public_trace_read_alike"


def run(args: list[str], shared: Path) -> str:
    done = subprocess.run(
        [sys.executable, *args],
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
    printed = run(
        ["-c", "from tests.conftest import PUBLIC_TRACES; print(PUBLIC_TRACES)"], tmp_path
    )
    assert printed == f"{tmp_path / 'traces' / 'public'}\n"


def test_skips_for_want_of_it_are_summed_up_in_one_line(tmp_path: Path) -> None:
    # A pytest run of one test in a subprocess, the shared folder nowhere.
    output = run(["-m", "pytest", "-p", "no:cacheprovider", ONE_TEST], tmp_path / "nowhere")
    assert (
        f"1 test skipped: shared test data not found at {tmp_path / 'nowhere'} (set "
        "TRACEANALYZE_SHARED to a folder holding traces/public and bench/)"
    ) in output.splitlines()
