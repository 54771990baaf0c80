"""The peak memory of a child process alone, for tests that bound what a load holds.

Not ``ru_maxrss``: on Linux ``execve`` keeps in it the RSS high-water of the memory it replaces,
and Python's ``subprocess`` starts a child with ``vfork``, so that memory is the *parent's*: a
child started by pytest reports pytest's own peak (2.9 GB once tests/test_c*.py had run in the
same process), whatever it used itself. ``os.wait4`` and ``RUSAGE_CHILDREN`` read the same
figure. ``VmHWM`` in /proc is the high-water of the child's own address space, which ``execve``
makes new, so it counts the child alone.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

needs_proc = pytest.mark.skipif(
    not Path("/proc/self/status").is_file(), reason="reads the peak memory (VmHWM) from /proc"
)

# appended to the child's code: its last line of output is its own peak, in MB
_PRINT_PEAK = """
with open("/proc/self/status", encoding="ascii") as _status:
    print(next(int(line.split()[1]) // 1024 for line in _status if line.startswith("VmHWM:")))
"""


def run_measured(
    code: str, *args: str, env: Mapping[str, str], timeout: float
) -> tuple[list[str], int]:
    """``code`` in a fresh interpreter run from the repository with ``env`` (pass
    ``PYTHONPATH`` for this checkout's package): the lines it printed, and its own peak RSS in
    MB. A test that uses it carries ``needs_proc``."""
    done = subprocess.run(
        [sys.executable, "-c", code + _PRINT_PEAK, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=dict(env),
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    *lines, peak_mb = done.stdout.splitlines()
    return lines, int(peak_mb)
