"""The one exception tree of traceanalyze.

Library code raises these and never prints or exits; the CLI turns them into one line on stderr
and ``exit_code``. Every message names the file, what is wrong with it and what to do.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

# Recording traces on the GPU failed: capture's own error, the one class (capture runs where
# traceanalyze may be absent, so it cannot derive from TraceAnalyzeError); capture's command
# turns it into one line in one place (capture.cli.CaptureFailed).
from capture.errors import CaptureError

# The exit status of a command stopped by Ctrl-C, during start-up or later: 128 + SIGINT, what a
# shell reports for a process the signal ended.
INTERRUPTED_EXIT = 130


class TraceAnalyzeError(Exception):
    """Base of every error traceanalyze raises on purpose."""

    exit_code = 1

    def __init__(self, message: str, path: str | Path | None = None, fix: str | None = None):
        self.message = message
        self.path = None if path is None else Path(path)
        self.fix = fix
        parts = [f"{self.path}: {message}" if self.path else message]
        if fix:
            parts.append(fix)
        super().__init__(" ".join(p if p.endswith(".") else p + "." for p in parts))

    def __reduce__(self) -> tuple[type[TraceAnalyzeError], tuple[str, Path | None, str | None]]:
        # Errors raised on a worker (a process pool, a Dask or Ray cluster) arrive pickled:
        # rebuilt from their parts, they keep the file and the fix.
        return type(self), (self.message, self.path, self.fix)


class TraceReadError(TraceAnalyzeError):
    """The file or folder cannot be read at all (missing, a directory, no permission)."""


# What to do about an operating system's refusal, by its errno (a path of either side: a trace
# read, an output written). The message names the path and the system's own words.
_PATH_FIXES: dict[int, str] = {
    errno.ENAMETOOLONG: "Use a shorter name: a file system allows 255 bytes per name",
    errno.ENOENT: "Check the path",
    errno.ENOTDIR: "A part of the path is a file, not a folder: check the path",
    errno.EISDIR: "It is a folder: name a file",
    errno.EACCES: "Give this user access to it, or use another path",
    errno.EPERM: "Give this user access to it, or use another path",
    errno.ELOOP: "The path goes round a loop of symbolic links: give the real path",
    errno.EROFS: "The file system is read-only: use a path on another one",
    errno.ENOSPC: "The disk is full: free some space or use another disk",
    errno.EDQUOT: "The disk quota is used up: free some space or use another disk",
    errno.EIO: "The device failed to read or write: copy the file to a local disk",
}
_DEFAULT_PATH_FIX = "Check the path, or use another one"


def os_problem(exc: OSError) -> tuple[str, str]:
    """The system's words for ``exc`` (``File name too long``) and what to do about it."""
    reason = exc.strerror or (os.strerror(exc.errno) if exc.errno else type(exc).__name__)
    return reason, _PATH_FIXES.get(exc.errno or 0, _DEFAULT_PATH_FIX)


def path_error(exc: OSError, path: str | Path) -> TraceReadError:
    """An input path the system refused (too long a name, no permission, ...): one error
    naming the path, the system's reason and the fix."""
    reason, fix = os_problem(exc)
    return TraceReadError(f"cannot be read ({reason})", path, fix)


class TraceFormatError(TraceAnalyzeError):
    """The file is not a readable PyTorch profiler (Kineto) Chrome trace."""


class NotATraceError(TraceFormatError):
    """The file is not a Chrome trace at all (not JSON, or JSON of another kind): in a folder
    it is skipped rather than failing the load."""


class EmptyTraceError(TraceAnalyzeError):
    """The input holds no trace events (or a folder holds no traces)."""


class CacheSettingError(TraceAnalyzeError):
    """A cache setting (``TRACEANALYZE_CACHE_MAX``) that cannot be understood."""

    exit_code = 2


class AnalysisError(TraceAnalyzeError):
    """An analysis cannot answer for this trace (for example a needed column is absent)."""


class ExpectationFailed(TraceAnalyzeError):  # noqa: N818 (a verdict, not a fault)
    """`traceanalyze check`: one or more stated expectations do not hold."""


class EngineError(TraceAnalyzeError):
    """The engine that runs per-rank work cannot run it (not installed, cluster unreachable)."""


class UsageError(TraceAnalyzeError):
    """What the user asked for cannot be done as asked (an unknown name, a bad option value)."""

    exit_code = 2


__all__ = [
    "AnalysisError",
    "CaptureError",
    "EmptyTraceError",
    "EngineError",
    "ExpectationFailed",
    "NotATraceError",
    "TraceAnalyzeError",
    "TraceFormatError",
    "TraceReadError",
    "UsageError",
]
