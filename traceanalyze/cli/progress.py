"""Progress for long loads on a terminal (bytes read of the total, and the rate); nothing when
output is piped. The loader only calls back; this module draws."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from traceanalyze.load.source import ByteProgress


def is_terminal() -> bool:
    return sys.stderr.isatty()


@contextmanager
def loading(paths: Sequence[Path]) -> Iterator[None]:
    """A spinner while several traces (or a folder) load."""
    if not is_terminal():
        yield
        return
    names = ", ".join(p.name for p in paths[:3]) + (" ..." if len(paths) > 3 else "")
    with Console(stderr=True).status(f"Loading {names}", spinner="dots"):
        yield


@contextmanager
def loading_file(path: Path) -> Iterator[ByteProgress | None]:
    """A byte-progress callback for loading one file: None when not on a terminal; a folder
    gets a spinner instead."""
    if not is_terminal() or not path.is_file():
        with loading([path]):
            yield None
        return
    columns = (
        TextColumn("Loading {task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(path.name, total=None)

        def advance(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield advance
