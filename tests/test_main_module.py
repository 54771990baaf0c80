"""``python -m traceanalyze`` behaves as the ``traceanalyze`` command: output, exit statuses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from traceanalyze import __version__

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_traces" / "h200_default" / "sdpa_flash.json.gz"


def python_m(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "traceanalyze", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def test_python_m_runs_the_command(tmp_path: Path) -> None:
    done = python_m("summary", str(SAMPLE), "--format", "json", "--cache-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["kernels_per_iter"] == 1.0

    version = python_m("--version")
    assert version.stdout == f"traceanalyze, version {__version__}\n"
    assert python_m("--help").stdout.startswith("Usage: traceanalyze [OPTIONS] COMMAND")


def test_python_m_exit_statuses(tmp_path: Path) -> None:
    usage = python_m("kernels")
    assert usage.returncode == 2
    [said] = usage.stderr.splitlines()  # one line, as every error
    assert said == (
        "traceanalyze kernels: error: Missing argument 'TRACE'. See 'traceanalyze kernels --help'."
    )
    missing = python_m("info", str(tmp_path / "missing.json"))
    assert missing.returncode == 1
    [line] = missing.stderr.splitlines()
    assert line.startswith("traceanalyze: error: ")
