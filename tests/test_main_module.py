"""``python -m traceanalyze`` behaves as the ``traceanalyze`` command: output, exit statuses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

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


# --- Ctrl-C: one line and exit 130, from the first import on ----------------------------------

# The command as its console script runs it (traceanalyze.__main__.run), in a child that says
# "ready" once Python's own Ctrl-C handler is in place and the entry module is imported, then
# waits for a line: the signal can then be sent at a known moment after the command starts.
_STARTED_ON_CUE = r"""
import signal, sys
from traceanalyze.__main__ import run
sys.argv = ["traceanalyze", *sys.argv[1:]]
# Until run() sets its handler, a signal lands in this harness (still in readline), not in the
# command: ignored, so that run is one that finished before it.
signal.signal(signal.SIGINT, signal.SIG_IGN)
print("ready", flush=True)
sys.stdin.readline()
run()
"""

# The CLI's imports interrupted for certain: the import of Polars, which every command brings
# in before it parses its arguments, raises KeyboardInterrupt as Ctrl-C there would.
_INTERRUPTED_IMPORT = r"""
import sys


class CtrlCOnPolars:
    def find_spec(self, name, path=None, target=None):
        if name == "polars":
            raise KeyboardInterrupt
        return None


sys.meta_path.insert(0, CtrlCOnPolars())
sys.argv = ["traceanalyze", *sys.argv[1:]]
from traceanalyze.__main__ import run
run()
"""


# As NumPy does when Ctrl-C cuts its import short: the signal comes, the module catches the
# KeyboardInterrupt and raises an ImportError of its own.
_IMPORT_TURNS_CTRL_C_INTO_ITS_OWN_ERROR = r"""
import os, signal, sys


class NumPyLike:
    def find_spec(self, name, path=None, target=None):
        if name == "polars":
            try:
                os.kill(os.getpid(), signal.SIGINT)
                signal.pthread_sigmask(signal.SIG_BLOCK, [])  # lets the handler run
            except KeyboardInterrupt:
                raise ImportError("Importing the C-extensions failed") from None
        return None


sys.meta_path.insert(0, NumPyLike())
sys.argv = ["traceanalyze", *sys.argv[1:]]
from traceanalyze.__main__ import run
run()
"""


def _summary_in(child: str) -> subprocess.CompletedProcess[str]:
    """``summary`` of the sample run by the ``child`` script (which calls the entry's run())."""
    return subprocess.run(
        [sys.executable, "-c", child, "summary", str(SAMPLE)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("child", [_INTERRUPTED_IMPORT, _IMPORT_TURNS_CTRL_C_INTO_ITS_OWN_ERROR])
def test_ctrl_c_during_the_imports_is_one_line_and_exit_130(child: str) -> None:
    done = _summary_in(child)
    assert (done.returncode, done.stderr, done.stdout) == (130, "Aborted!\n", "")


def test_an_import_error_without_ctrl_c_is_not_called_an_abort() -> None:
    broken = _INTERRUPTED_IMPORT.replace("raise KeyboardInterrupt", "raise ImportError('no')")
    done = _summary_in(broken)
    assert done.returncode == 1 and "ImportError: no" in done.stderr


def _interrupted_after(delay_s: float, cache: Path) -> subprocess.CompletedProcess[str]:
    command = ["summary", str(SAMPLE), "--format", "json", "--cache-dir", str(cache)]
    child = subprocess.Popen(
        [sys.executable, "-c", _STARTED_ON_CUE, *command],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert child.stdin is not None and child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    child.stdin.write("\n")
    child.stdin.flush()
    time.sleep(delay_s)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=120)
    return subprocess.CompletedProcess(child.args, child.returncode, out, err)


@pytest.mark.skipif(os.name != "posix", reason="POSIX signals")
def test_ctrl_c_at_any_moment_of_a_run_is_one_line_and_exit_130(tmp_path: Path) -> None:
    # Moments spread over a short run: the CLI's imports (about half of it), argument parsing,
    # the load and the analysis. A run that printed its answer before the signal came exits 0,
    # or, when the signal lands in the interpreter's own shutdown, is ended by it as Python
    # ends any process there (-SIGINT, nothing on stderr): either way its answer is whole.
    interrupted = 0
    for delay_s in (0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.45, 0.6, 0.8, 1.1):
        done = _interrupted_after(delay_s, tmp_path / "cache")
        if done.returncode in (0, -signal.SIGINT) and not done.stderr:
            assert json.loads(done.stdout)["kernels_per_iter"] == 1.0
            continue
        interrupted += 1
        assert done.returncode == 130, (delay_s, done.returncode, done.stderr[-2000:])
        # Rare: Ctrl-C lands in an import Polars makes from Rust, and Rust prints its panic
        # report (with the KeyboardInterrupt in it) before the command aborts.
        if "panicked at" in done.stderr:
            assert done.stderr.rstrip().endswith("Aborted!"), (delay_s, done.stderr[-2000:])
            continue
        assert "Traceback" not in done.stderr, (delay_s, done.stderr[-2000:])
        # click writes an empty line before its own "Aborted!" (a fresh line after ^C)
        assert done.stderr.split() == ["Aborted!"], (delay_s, done.stderr[-2000:])
    assert interrupted >= 3  # most moments fall inside the run
