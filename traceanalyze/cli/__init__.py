"""The ``traceanalyze`` command line: thin commands over the library.

Errors from the library arrive as :class:`~traceanalyze.errors.TraceAnalyzeError` and are turned
into one line on stderr and exit status 1 here, and only here. Usage errors exit 2 (click).
"""

from __future__ import annotations

from typing import Any

import click

from traceanalyze import __version__
from traceanalyze.errors import TraceAnalyzeError


class LibraryError(click.ClickException):
    """A library error shown as one line, with the error's own exit status."""

    exit_code = 1

    def show(self, file: Any = None) -> None:
        click.echo(f"traceanalyze: error: {self.format_message()}", err=True)


class LibraryUsageError(LibraryError):
    """A library error about what the user asked for (e.g. a malformed expectation)."""

    exit_code = 2


class Commands(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TraceAnalyzeError as error:
            shown = LibraryUsageError if error.exit_code == 2 else LibraryError
            raise shown(str(error)) from None


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="traceanalyze")
def main() -> None:
    """Answers from PyTorch profiler traces: kernels, occupancy, cuDNN planning, variants."""


def _register() -> None:
    from traceanalyze.cli.analyses import COMMANDS as ANALYSES
    from traceanalyze.cli.between import COMMANDS as BETWEEN
    from traceanalyze.cli.cache import COMMANDS as CACHE
    from traceanalyze.cli.cold import COMMANDS as COLD
    from traceanalyze.cli.info import info
    from traceanalyze.cli.memory import COMMANDS as MEMORY
    from traceanalyze.cli.perf import COMMANDS as PERF
    from traceanalyze.cli.ranks import ranks
    from traceanalyze.cli.report import COMMANDS as REPORTS
    from traceanalyze.cli.stacks import COMMANDS as STACKS
    from traceanalyze.cli.timeline import COMMANDS as TIMELINE

    for command in (
        info,
        *ANALYSES,
        *BETWEEN,
        *PERF,
        *COLD,
        *REPORTS,
        *MEMORY,
        ranks,
        *TIMELINE,
        *STACKS,
        *CACHE,
    ):
        main.add_command(command)
    from traceanalyze.cli.annotate import annotate

    main.add_command(annotate)
    # The capture command imports torch only when it runs, so registering it costs nothing.
    from capture.cli import capture

    main.add_command(capture)


_register()
