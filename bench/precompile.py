"""Bytecode for the checkouts a benchmark times, written before it times them."""

from __future__ import annotations

import compileall
import sys
from pathlib import Path


def compile_bytecode(*checkouts: Path) -> None:
    """Write the bytecode of each checkout's packages, as installing them does: this sandbox
    sets PYTHONDONTWRITEBYTECODE, so without it every measured process compiled every module it
    imported (0.3 s of each process's start here, more for the larger checkout). A checkout
    that cannot be compiled (read-only) is named on stderr: its timings then include compiling,
    and a comparison with it is not fair."""
    for checkout in checkouts:
        for package in ("traceanalyze", "capture"):
            folder = checkout / package
            if folder.is_dir() and not compileall.compile_dir(folder, quiet=2):
                print(f"warning: could not write the bytecode of {folder}", file=sys.stderr)
