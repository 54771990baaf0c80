"""What every command shares, defined once: where output goes (--format, -o, --force) and how
traces load (--no-cache, --cache-dir, progress). Commands receive one ``out: Output`` and one
``loader: Loader`` instead of five loose parameters."""

from __future__ import annotations

import errno
import functools
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast, overload

import click

from traceanalyze import files
from traceanalyze.analyses.audit import command_warnings
from traceanalyze.analyses.audit.figures import COMMAND_FIGURES
from traceanalyze.analyses.audit.rules import SAID_ALWAYS
from traceanalyze.analyses.iterations import Selection, counted
from traceanalyze.api import Loading
from traceanalyze.cli.progress import loading, loading_file
from traceanalyze.errors import os_problem
from traceanalyze.load import Input, load
from traceanalyze.load.parallel import THREADS_ENV
from traceanalyze.load.variants import VariantSet, load_variants
from traceanalyze.render.formats import BINARY, FOR_PEOPLE, FORMATS, MARKDOWN, Forms
from traceanalyze.trace import Skipped, Trace

F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R")
SUFFIX_FORMATS = {
    ".md": "md",
    ".markdown": "md",
    ".json": "json",
    ".csv": "csv",
    ".parquet": "parquet",
}
STDOUT = "-"  # -o - writes standard output, as the default does


@dataclass(frozen=True)
class Output:
    """Where and how a command writes its result."""

    format: str
    path: Path | None
    force: bool

    @classmethod
    def from_options(
        cls, fmt: str | None, given: str | None, force: bool, *, folder_file: str | None = None
    ) -> Output:
        """The format follows the -o suffix (md without -o); a suffix that names no format is
        refused. A folder (a trailing slash, or one that exists) is written inside, as
        ``folder_file``, by a command that writes several files (``report``), and refused by
        the others. An existing -o file is refused here, before any trace is loaded, unless
        --force."""
        path = None if given is None or given == STDOUT else _output_path(given, folder_file)
        implied = SUFFIX_FORMATS.get(path.suffix.lower()) if path else None
        if path is not None and implied is None:
            raise click.UsageError(
                f"-o {given}: {_suffix_words(path)}; name the file .md, .json, .csv or .parquet "
                "(its suffix says the format)"
            )
        if fmt is None:
            fmt = implied or MARKDOWN
        elif implied is not None and implied != fmt:
            raise click.UsageError(
                f"-o {path} says {implied} by its suffix but --format says {fmt}; make them agree."
            )
        if BINARY[fmt] and path is None:
            raise click.UsageError(f"{fmt} is a binary format; write it to a file: -o FILE.{fmt}")
        out = cls(fmt, path, force)
        if path is not None:
            out.check_free(path)
        return out

    def chart_beside(self, name: str) -> str | None:
        """The file name of the chart ``name`` written beside the -o file (``FILE_name.png``),
        where the output is a file people read (markdown links it); None otherwise. An existing
        one is refused here, before any trace is loaded, unless --force."""
        if self.path is None or not FOR_PEOPLE[self.format]:
            return None
        chart = f"{self.path.stem}_{name}.png"
        self.check_free(self.path.parent / chart)
        return chart

    @property
    def on_terminal_for_people(self) -> bool:
        """Whether the output is shown to a person on the terminal (markdown on standard
        output), who then reads its warnings in it, not on stderr too."""
        return self.path is None and FOR_PEOPLE[self.format]

    def check_free(self, path: Path) -> None:
        with _writing(path):
            there = path.exists()
        if there and not self.force:
            raise click.UsageError(f"{path} exists; pass --force to overwrite it.")

    def write(self, text: str | bytes, inputs: Sequence[Path] = ()) -> None:
        if isinstance(text, bytes):  # a binary format: only to a file (from_options)
            self.write_with(lambda path: _write_bytes(path, text), inputs)
            click.echo(f"wrote {self.path}", err=True)
            return
        if self.path is None:
            click.echo(text, nl=False)
            return
        self.refuse_inputs(self.path, inputs)
        self.check_free(self.path)
        with _writing(self.path):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            files.write_text(self.path, text)
        click.echo(f"wrote {self.path}", err=True)

    def write_with(self, write: Callable[[Path], R], inputs: Sequence[Path] = ()) -> R:
        """Let ``write(path)`` write the -o file itself (large or binary output), with the same
        refusals as :meth:`write`."""
        assert self.path is not None
        self.refuse_inputs(self.path, inputs)
        self.check_free(self.path)
        with _writing(self.path):
            return write(self.path)

    @staticmethod
    def refuse_inputs(path: Path, inputs: Sequence[Path]) -> None:
        """Never write onto an input, nor onto an existing file inside an input folder (a
        trace the command reads, whatever --force says)."""
        with _writing(path):
            resolved = _resolved(path)
        for given in map(Path, inputs):
            with _writing(given):
                source = _resolved(given)
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
        with _writing(target):
            files.write_bytes(target, data)
        click.echo(f"wrote {target}", err=True)


class OutputError(click.ClickException):
    """The output cannot be written: one line, exit status 1."""

    exit_code = 1

    def show(self, file: Any = None) -> None:
        click.echo(f"traceanalyze: error: {self.format_message()}", err=True)


@contextmanager
def _writing(path: Path) -> Iterator[None]:
    """Turn the OS's refusal to write ``path`` (no permission, a missing or read-only folder,
    a file where a folder should be) into one line that says what to do."""
    try:
        yield
    except OSError as exc:
        if isinstance(exc, FileExistsError) and exc.filename and not os.path.isdir(exc.filename):
            # Making the folders: a part of the path is a file (the system says "exists").
            exc = NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), exc.filename)
        reason, fix = os_problem(exc)
        where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(path) else ""
        raise OutputError(
            f"cannot write {path}: {reason}{where}. {fix}; or write to standard output (-o -)."
        ) from None


def _resolved(path: Path) -> Path:
    """``path.resolve()``, a loop of symbolic links an OSError (pathlib before Python 3.13
    raises RuntimeError for one)."""
    try:
        return path.resolve()
    except RuntimeError:
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path)) from None


def _write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _output_path(given: str, folder_file: str | None) -> Path:
    """The file -o names: ``given``, or ``folder_file`` inside it where it is a folder."""
    path = Path(given)
    with _writing(path):
        folder = given.endswith(("/", os.sep)) or path.is_dir()
    if not folder:
        return path
    if folder_file is None:
        raise click.UsageError(f"-o {given} is a folder; name a file, e.g. -o {path / 'out.md'}")
    return path / folder_file


def _suffix_words(path: Path) -> str:
    if not path.suffix:
        return "the name has no suffix"
    return f"traceanalyze writes no {path.suffix} files"


@dataclass(frozen=True)
class Loader(Loading):
    """The library's loading with progress on a terminal, one warning line per file of a
    folder that is not a trace, and the traces noted for the command's audit line."""

    def load_trace(self, path: Path) -> Trace:
        with loading_file(path) as progress:
            trace = load(
                path,
                cache=self.cache,
                cache_dir=self.cache_dir,
                progress=progress,
                threads=self.threads,
            )
        warn_skipped(trace.skipped)
        self.audit_noted(path, [trace])
        return trace

    def load_variants(
        self, paths: Sequence[Path | Input], labels: Sequence[str] | None
    ) -> VariantSet:
        given = [p.path if isinstance(p, Input) else p for p in paths]
        with loading(given):
            found = load_variants(
                paths,
                cache=self.cache,
                cache_dir=self.cache_dir,
                labels=labels,
                threads=self.threads,
            )
        warn_skipped(found.skipped)
        self.audit_noted(given[0], [v.trace for v in found.loaded if v.trace is not None])
        return found

    def audit_noted(self, path: Path, found: Sequence[Trace | str]) -> None:
        """Note what the running command loaded from ``path`` (traces, or a worker's audit
        warnings already written) for its one audit line (:func:`warn_audited`)."""
        ctx = click.get_current_context(silent=True)
        if ctx is not None and (ctx.info_name or "") in COMMAND_FIGURES:
            ctx.meta.setdefault(AUDITED, []).append((ctx.info_name, path, list(found)))


# The key of click's context meta (shared by the contexts of one command line) under which the
# Loader notes what the command loaded.
AUDITED = "traceanalyze.audited"
# ... and under which a command that prints only some of its figures (`check`: the metrics its
# expectations name) says which.
PRINTED = "traceanalyze.printed"


def warn_audited(ctx: click.Context) -> None:
    """At the end of a command that succeeded: one line on stderr when a warning or error of
    the audit of what it loaded moves a figure the command prints by 1% or more (nothing for a
    clean trace). The audit's analyses are memoised per trace, so most of its work is the
    command's own."""
    noted: list[tuple[str, Path, list[Trace | str]]] = ctx.meta.get(AUDITED, [])
    found: list[tuple[Path, str]] = []
    for command, path, loaded in noted:
        figures = COMMAND_FIGURES[command]
        if PRINTED in ctx.meta:
            figures = {k: v for k, v in figures.items() if k in ctx.meta[PRINTED]}
        for item in loaded:
            lines = (
                [item]
                if isinstance(item, str)
                else [
                    f"{item.path.name}: {key}: {text}"
                    # the counted trace the command analysed: its audit shares its tables
                    for key, text in command_warnings(counted(item), figures).items()
                ]
            )
            found += [(path, line) for line in lines]
    if not found:
        return
    path, first = found[0]
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    # a finding said whatever it moves (a cut gzip file) comes first, and moves no figure
    what = (
        "leave what this command read unverified"
        if any(f": {key}: " in first for key in SAID_ALWAYS)
        else "move figures this command prints"
    )
    click.echo(
        f"traceanalyze: warning: the trace's own faults {what}: "
        f"{first}{more}; see `traceanalyze audit {path}`",
        err=True,
    )


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
        type=click.Path(),
        default=None,
        help="Write to this file instead of standard output: .md, .json, .csv or .parquet, "
        "which says the format (- for standard output).",
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
        help="Folder for the cache of loaded traces (default: $TRACEANALYZE_CACHE_DIR, else "
        "~/.cache/traceanalyze).",
    ),
    click.option(
        "--threads",
        type=click.IntRange(min=1),
        default=None,
        help=f"Threads that scan a trace file (default: ${THREADS_ENV}, else every core).",
    ),
)


@overload
def output_options(func: F, *, folder_file: str | None = None) -> F: ...
@overload
def output_options(func: None = None, *, folder_file: str | None = None) -> Callable[[F], F]: ...
def output_options(func: F | None = None, *, folder_file: str | None = None) -> Any:
    """--format, -o/--output and --force; the command receives ``out: Output``. With
    ``folder_file``, -o naming a folder writes that file inside it (else it is refused)."""

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def command(
            *args: Any, fmt: str | None, output: str | None, force: bool, **kwargs: Any
        ) -> Any:
            out = Output.from_options(fmt, output, force, folder_file=folder_file)
            return func(*args, out=out, **kwargs)

        return cast(F, _add_options(command, _OUTPUT_OPTIONS))

    return decorate if func is None else decorate(func)


def table_option(forms: Forms[Any]) -> Decorator:
    """--table: which of a nested answer's tables CSV, Parquet, JSON and markdown write (CSV and
    Parquet: the first without it; JSON: every table in one object); the command receives
    ``table`` and passes it to the renderer."""
    views = list(forms.tables)
    return click.option(
        "--table",
        type=click.Choice(views),
        default=None,
        help=f"Write one table of the answer (CSV and Parquet write {views[0]} without it; JSON "
        "and markdown the whole answer). `traceanalyze schema` lists each table's columns.",
    )


def cache_options(func: F) -> F:
    """--no-cache, --cache-dir and --threads; the command receives ``loader: Loader``."""

    @functools.wraps(func)
    def command(
        *args: Any, no_cache: bool, cache_dir: Path | None, threads: int | None, **kwargs: Any
    ) -> Any:
        # A parameter of every load, not an environment variable: the CLI runs in-process
        # too (CliRunner, a notebook's main([...])), where a setting would outlive the command.
        loader = Loader(not no_cache, cache_dir, threads=threads)
        return func(*args, loader=loader, **kwargs)

    return cast(F, _add_options(command, _CACHE_OPTIONS))


def _selection(iterations: str | None, skip: int) -> Selection | None:
    if iterations is None and not skip:
        return None
    first = last = None
    if iterations is not None:
        low, dash, high = iterations.partition("-")
        try:
            first = int(low) if low.strip() else None
            last = (int(high) if high.strip() else None) if dash else first
        except ValueError:
            raise click.BadParameter(
                f"{iterations!r} is not a range of iteration numbers such as 2-4, 3 or 2-",
                param_hint="--iterations",
            ) from None
    return Selection(first, last, skip)


_ITERATION_OPTIONS: tuple[Decorator, ...] = (
    click.option(
        "--iterations",
        "iterations",
        default=None,
        metavar="FIRST-LAST",
        help="Only these iterations (numbers as the `iterations` command lists them, e.g. "
        "2-4, 3 or 2-), whatever their kind. Default: every iteration except empty closing "
        "steps and CUDA graph capture steps.",
    ),
    click.option(
        "--skip",
        type=click.IntRange(min=0),
        default=0,
        show_default=True,
        help="Leave out the first N of those iterations (e.g. a warm-up step).",
    ),
)


def iteration_options(func: F) -> F:
    """--iterations and --skip for a per-iteration command; place it below ``cache_options``:
    the command's ``loader`` then restricts traces to the chosen iterations."""

    @functools.wraps(func)
    def command(
        *args: Any, iterations: str | None, skip: int, loader: Loader, **kwargs: Any
    ) -> Any:
        return func(*args, loader=loader.choosing(_selection(iterations, skip)), **kwargs)

    return cast(F, _add_options(command, _ITERATION_OPTIONS))


# `ranks` and `comms` on a folder of ranks: the audit's repair of rank clocks, only when asked.
clock_align_option = click.option(
    "--clock-align",
    is_flag=True,
    help="Move each rank's times onto the lowest rank's clock by the offset `audit` estimates "
    "from collectives that must end together (its clock_skew check) before comparing ranks; "
    "the notes say which offsets were applied.",
)
