"""Progress for long loads: a spinner on a terminal, nothing when output is piped."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console


def is_terminal() -> bool:
    return sys.stderr.isatty()


def _size(path: Path) -> str:
    try:
        size = (
            path.stat().st_size
            if path.is_file()
            else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        )
    except OSError:
        return ""
    return f" ({size / 1e6:,.1f} MB)"


@contextmanager
def loading(paths: Sequence[Path]) -> Iterator[None]:
    if not is_terminal():
        yield
        return
    names = ", ".join(p.name for p in paths[:3]) + (" ..." if len(paths) > 3 else "")
    size = _size(paths[0]) if len(paths) == 1 else ""
    console = Console(stderr=True)
    with console.status(f"Loading {names}{size}", spinner="dots"):
        yield
