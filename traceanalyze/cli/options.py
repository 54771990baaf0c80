"""What every command shares, defined once: where output goes (--format, -o, --force) and how
traces load (--no-cache, --cache-dir, progress). Commands receive one ``out: Output`` and one
``loader: Loader`` instead of five loose parameters."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeVar, cast

import click

from traceanalyze.analyses.compare import steady_median_ms
from traceanalyze.cli.progress import loading, loading_file
from traceanalyze.load import load
from traceanalyze.load.parallel import THREADS_ENV
from traceanalyze.load.variants import VariantSet, capture_entry, load_variants
from traceanalyze.render.table import FORMATS
from traceanalyze.trace import Skipped, Trace

F = TypeVar("F", bound=Callable[..., Any])
SUFFIX_FORMATS = {".md": "md", ".markdown": "md", ".json": "json", ".csv": "csv"}


@dataclass(frozen=True)
class Output:
    """Where and how a command writes its result."""

    format: str
    path: Path | None
    force: bool

    @classmethod
    def from_options(cls, fmt: str | None, path: Path | None, force: bool) -> Output:
        """The format defaults to the -o suffix, else md. An existing -o file is refused here,
        before any trace is loaded, unless --force."""
        implied = SUFFIX_FORMATS.get(path.suffix.lower()) if path else None
        if fmt is None:
            fmt = implied or "md"
        elif implied is not None and implied != fmt:
            raise click.UsageError(
                f"-o {path} says {implied} by its suffix but --format says {fmt}; make them agree."
            )
        out = cls(fmt, path, force)
        if path is not None:
            out.check_free(path)
        return out

    def check_free(self, path: Path) -> None:
        if path.exists() and not self.force:
            raise click.UsageError(f"{path} exists; pass --force to overwrite it.")

    def write(self, text: str, inputs: Sequence[Path] = ()) -> None:
        if self.path is None:
            click.echo(text, nl=False)
            return
        self.refuse_inputs(self.path, inputs)
        self.check_free(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(text)
        click.echo(f"wrote {self.path}", err=True)

    @staticmethod
    def refuse_inputs(path: Path, inputs: Sequence[Path]) -> None:
        """Never write onto an input, nor onto an existing file inside an input folder (a
        trace the command reads, whatever --force says)."""
        resolved = path.resolve()
        for given in map(Path, inputs):
            source = given.resolve()
            if resolved == source:
                raise click.UsageError(f"-o {path} is one of the inputs; refusing to overwrite it.")
            if source.is_dir() and resolved.is_file() and source in resolved.parents:
                raise click.UsageError(
                    f"-o {path} is an existing file inside the input folder {given}; refusing "
                    "to overwrite what the command reads. Write the output elsewhere."
                )

    def write_beside(self, name: str, data: bytes) -> None:
        """A companion file (a chart) in the folder of the -o file."""
        assert self.path is not None
        target = self.path.parent / name
        target.write_bytes(data)
        click.echo(f"wrote {target}", err=True)


class Subject(NamedTuple):
    """One trace a single-trace command reports on."""

    label: str | None  # the variant, for a folder of separate traces
    trace: Trace
    median_ms: float | None  # the capture's steady median time per call, where known


@dataclass(frozen=True)
class Loader:
    """Loads traces for a command, with the cache options given and progress on a terminal."""

    cache: bool
    cache_dir: Path | None

    def trace(self, path: Path) -> Trace:
        with loading_file(path) as progress:
            trace = load(path, cache=self.cache, cache_dir=self.cache_dir, progress=progress)
        warn_skipped(trace.skipped)
        return trace

    def each(self, path: Path) -> list[Subject]:
        """The traces a single-trace command runs on: one for a file or a folder of ranks,
        one per variant (with its label) for a folder of separate traces; each with the
        capture's steady median time where a manifest gives one (for the bound verdict)."""
        if not path.is_dir():
            known = capture_entry(path) if path.is_file() else None
            median = steady_median_ms(known) if known else None
            return [Subject(None, self.trace(path), median)]
        variants = self.variants([path]).loaded
        if len(variants) == 1 and variants[0].path == path:  # the ranks of one job
            return [Subject(None, variants[0].trace, None)]  # type: ignore[arg-type]
        return [
            Subject(v.label, v.trace, steady_median_ms(v)) for v in variants if v.trace is not None
        ]

    def variants(self, paths: Sequence[Path], labels: Sequence[str] | None = None) -> VariantSet:
        with loading(list(paths)):
            found = load_variants(
                paths, cache=self.cache, cache_dir=self.cache_dir, labels=labels or None
            )
        warn_skipped(found.skipped)
        return found


def warn_skipped(skipped: Sequence[Skipped]) -> None:
    """One line on stderr per file of a folder that is not a trace."""
    for item in skipped:
        click.echo(f"traceanalyze: warning: skipped {item.path}: {item.reason}", err=True)


Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def _add_options(func: Callable[..., Any], options: Sequence[Decorator]) -> Any:
    for option in reversed(options):
        func = option(func)
    return func


_OUTPUT_OPTIONS: tuple[Decorator, ...] = (
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
)
_CACHE_OPTIONS: tuple[Decorator, ...] = (
    click.option(
        "--no-cache",
        "no_cache",
        is_flag=True,
        help="Parse the trace again even if a cached copy exists, and write no cache.",
    ),
    click.option(
        "--cache-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Folder for the Parquet cache (default: $TRACEANALYZE_CACHE_DIR, else "
        "~/.cache/traceanalyze).",
    ),
    click.option(
        "--threads",
        type=click.IntRange(min=1),
        default=None,
        help=f"Threads that scan a trace file (default: ${THREADS_ENV}, else every core).",
    ),
)


def output_options(func: F) -> F:
    """--format, -o/--output and --force; the command receives ``out: Output``."""

    @functools.wraps(func)
    def command(
        *args: Any, fmt: str | None, output: Path | None, force: bool, **kwargs: Any
    ) -> Any:
        return func(*args, out=Output.from_options(fmt, output, force), **kwargs)

    return cast(F, _add_options(command, _OUTPUT_OPTIONS))


def cache_options(func: F) -> F:
    """--no-cache, --cache-dir and --threads; the command receives ``loader: Loader``."""

    @functools.wraps(func)
    def command(
        *args: Any, no_cache: bool, cache_dir: Path | None, threads: int | None, **kwargs: Any
    ) -> Any:
        if threads is not None:
            # The setting, not a parameter: it reaches every load of the command, the worker
            # processes of a folder included.
            os.environ[THREADS_ENV] = str(threads)
        return func(*args, loader=Loader(not no_cache, cache_dir), **kwargs)

    return cast(F, _add_options(command, _CACHE_OPTIONS))
