"""Keep NumPy's OpenBLAS from spinning on the cores the loader scans with.

Importing NumPy (pip's wheels bundle OpenBLAS) starts a BLAS thread for each core but one,
and each spins for 2**28 CPU cycles (about 0.1 s) waiting for work before it sleeps.
traceanalyze multiplies no matrices, yet a command loads its trace right after its imports:
on the 2-core machine the spinning thread took one core from the scanner threads for the first
60 ms of the load of the bench trace (one of the first two chunks took 60 ms instead of 33; the
load 30-40 ms of CPU more, see bench/RESULTS.md). ``OPENBLAS_THREAD_TIMEOUT=4`` makes an
idle BLAS thread sleep after 2**4 cycles: BLAS keeps its threads (a user's matrix products
still run on every core) and only waits for a condition variable instead of spinning between
them.

Importing this module applies it (``traceanalyze/__init__.py`` imports it first). It is an
environment variable, so processes started afterwards inherit it; their BLAS then also sleeps
when idle, which only costs a wake-up between products (none measurable on 256x256 products
0.2 ms apart).
"""

from __future__ import annotations

import os
import sys

THREAD_TIMEOUT_ENV = "OPENBLAS_THREAD_TIMEOUT"
# log2 of the cycles an idle OpenBLAS thread spins before it sleeps (OpenBLAS's least).
_SHORTEST_TIMEOUT = "4"


def shorten_idle_spin() -> None:
    """Set ``OPENBLAS_THREAD_TIMEOUT`` before NumPy loads OpenBLAS (which reads it once, at
    load): not when the user set it, nor when NumPy is already imported (too late; an
    interactive session is then long past the spin anyway)."""
    if "numpy" in sys.modules:
        return
    os.environ.setdefault(THREAD_TIMEOUT_ENV, _SHORTEST_TIMEOUT)


shorten_idle_spin()
