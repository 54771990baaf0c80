"""Loads in a process forked from one that loaded: a clear error instead of a hang.

Polars runs its work on a thread pool it starts on first use. ``os.fork()`` copies only the
thread that calls it, so in the child of a process whose pool had started, the pool's threads
are gone and the first Polars operation that hands them work waits forever (Polars' own
behaviour, whatever calls it). A process that only imported traceanalyze forks safely: its pool
has not started. traceanalyze cannot see a pool that the caller's own Polars code started, but
it knows the process in which its own loads ran Polars, and refuses to load in a fork of it.
A fork of a process whose own Polars code ran first hangs in its first load, in Polars: such
workers need multiprocessing's 'spawn' or 'forkserver' start method (the README says so).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from traceanalyze.errors import UsageError


@dataclass
class _Loaded:
    """The process whose loads (or reads of the cache) ran Polars (0: none yet)."""

    pid: int = 0


_LOADED = _Loaded()


def before_polars() -> None:
    """Call before a load runs Polars: a :class:`UsageError` in the child of a fork made after
    an earlier load (where Polars would hang), else it notes this process."""
    pid = os.getpid()
    if _LOADED.pid and _LOADED.pid != pid:
        raise UsageError(
            f"this process (pid {pid}) was forked from one that had loaded a trace "
            f"(pid {_LOADED.pid}): Polars' threads do not survive os.fork(), and Polars "
            "would wait for them forever",
            fix="Load in the parent and pass the results, or start the worker with "
            "multiprocessing's 'spawn' or 'forkserver' start method",
        )
    _LOADED.pid = pid
