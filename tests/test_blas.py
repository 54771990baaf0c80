"""traceanalyze shortens OpenBLAS's idle spin before NumPy loads it (traceanalyze/_blas.py),
and leaves a user's setting, or a NumPy loaded before it, alone."""

from __future__ import annotations

import os
import subprocess
import sys

_PRINT_SETTING = "import os; print(os.environ.get('OPENBLAS_THREAD_TIMEOUT', 'unset'))"


def _setting_after(code: str, **env: str) -> str:
    environment = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    result = subprocess.run(
        [sys.executable, "-c", f"{code}; {_PRINT_SETTING}"],
        env={**environment, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.strip()


def test_importing_traceanalyze_sets_the_shortest_spin_before_numpy_loads() -> None:
    code = (
        "import sys; import traceanalyze; import numpy; "
        "assert 'numpy' in sys.modules"  # NumPy was loaded after the setting, by the package
    )
    assert _setting_after(code) == "4"


def test_a_users_setting_is_kept() -> None:
    assert _setting_after("import traceanalyze", OPENBLAS_THREAD_TIMEOUT="12") == "12"


def test_nothing_is_set_once_numpy_is_loaded() -> None:
    # OpenBLAS read its settings when NumPy loaded it: setting one now would only mislead
    assert _setting_after("import numpy; import traceanalyze") == "unset"
