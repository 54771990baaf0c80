"""The ``traceanalyze`` command line: thin commands over the library.

Errors from the library arrive as :class:`~traceanalyze.errors.TraceAnalyzeError` and are turned
into one line on stderr and exit status 1 here, and only here. Usage errors are one line too, exit
status 2.
"""

from __future__ import annotations

import sys
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


# Click 8.2+ raises this (a UsageError) to show the help when no command is given.
_NO_ARGS_IS_HELP: Any = getattr(click.exceptions, "NoArgsIsHelpError", ())


class Commands(click.Group):
    def main(self, *args: Any, **kwargs: Any) -> Any:
        """As click's, but a usage error is one line (what is wrong, and where the help is),
        like every other error, rather than the usage block, a hint and the error."""
        if not kwargs.get("standalone_mode", True):
            return super().main(*args, **kwargs)
        try:
            done = super().main(*args, **{**kwargs, "standalone_mode": False})
        except _NO_ARGS_IS_HELP as error:  # no command given: the help, as click shows it
            error.show()
            sys.exit(error.exit_code)
        except click.UsageError as error:
            where = error.ctx.command_path if error.ctx else "traceanalyze"
            message = error.format_message().rstrip(".")
            click.echo(f"{where}: error: {message}. See '{where} --help'.", err=True)
            sys.exit(error.exit_code)
        except click.ClickException as error:
            error.show()
            sys.exit(error.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(done if isinstance(done, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        from traceanalyze.cli.options import warn_audited

        try:
            done = super().invoke(ctx)
            # The one place every command warns of the trace's own faults (issue 40).
            warn_audited(ctx)
        except TraceAnalyzeError as error:
            shown = LibraryUsageError if error.exit_code == 2 else LibraryError
            raise shown(str(error)) from None
        return done


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="traceanalyze")
def main() -> None:
    """Answers from PyTorch profiler traces: kernels, occupancy, cuDNN planning, variants."""


def _register() -> None:
    from traceanalyze.cli.analyses import COMMANDS as ANALYSES
    from traceanalyze.cli.audit import COMMANDS as AUDIT
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
        *AUDIT,
    ):
        main.add_command(command)
    from traceanalyze.cli.annotate import annotate
    from traceanalyze.cli.attention import COMMANDS as ATTENTION

    main.add_command(annotate)
    for command in ATTENTION:
        main.add_command(command)
    # The capture command imports torch only when it runs, so registering it costs nothing.
    from capture.cli import capture

    main.add_command(capture)


_register()
