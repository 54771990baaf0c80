"""Options every command shares, defined once: output format, output file, overwrite, cache."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from traceanalyze.render.table import FORMATS

F = TypeVar("F", bound=Callable[..., Any])
SUFFIX_FORMATS = {".md": "md", ".markdown": "md", ".json": "json", ".csv": "csv"}


@dataclass(frozen=True)
class Output:
    """Where and how a command writes its result."""

    format: str
    path: Path | None
    force: bool

    def write(self, text: str, inputs: Sequence[Path] = ()) -> None:
        if self.path is None:
            click.echo(text, nl=False)
            return
        resolved = self.path.resolve()
        if any(resolved == Path(p).resolve() for p in inputs):
            raise click.UsageError(
                f"-o {self.path} is one of the inputs; refusing to overwrite it."
            )
        if self.path.exists() and not self.force:
            raise click.UsageError(f"{self.path} exists; pass --force to overwrite it.")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(text)
        click.echo(f"wrote {self.path}", err=True)


def output_options(func: F) -> F:
    """--format, -o/--output and --force; the command receives ``output: Output``."""

    decorators = [
        click.option(
            "--format",
            "fmt",
            type=click.Choice(FORMATS),
            default=None,
            help="Output format (default: from the -o suffix, else md).",
        ),
        click.option(
            "-o",
            "--output",
            type=click.Path(dir_okay=False, path_type=Path),
            default=None,
            help="Write to this file instead of standard output.",
        ),
        click.option("--force", is_flag=True, help="Overwrite the -o file if it exists."),
    ]
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


def resolve_output(fmt: str | None, output: Path | None, force: bool) -> Output:
    if fmt is None:
        fmt = SUFFIX_FORMATS.get(output.suffix.lower(), "md") if output else "md"
    return Output(fmt, output, force)


def cache_options(func: F) -> F:
    """--no-cache and --cache-dir; the command receives ``cache`` and ``cache_dir``."""
    func = click.option(
        "--cache-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Folder for the Parquet cache "
        "(default: $TRACEANALYZE_CACHE_DIR, else ~/.cache/traceanalyze).",
    )(func)
    return click.option(
        "--no-cache",
        "no_cache",
        is_flag=True,
        help="Parse the trace again even if a cached copy exists, and write no cache.",
    )(func)


def is_terminal() -> bool:
    return sys.stderr.isatty()
