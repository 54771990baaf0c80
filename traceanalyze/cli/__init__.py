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
from traceanalyze.errors import INTERRUPTED_EXIT, TraceAnalyzeError


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


# `traceanalyze --help`: each command's line, in sections (a command missing here is listed
# under "Other" with click's own, possibly cut, line; tests/test_cli_output_rules.py checks
# that none is).
SECTIONS: dict[str, dict[str, str]] = {
    "What ran": {
        "info": "Device, versions, span and event counts of a trace",
        "audit": "Can the trace be trusted: lost, clipped, misplaced events",
        "summary": "Per-iteration figures and the bound verdict",
        "iterations": "Each iteration: its kind, whether it counts, figures",
        "kernels": "Every kernel: category, count, time, occupancy",
        "occupancy": "Theoretical occupancy and its limiting resource",
        "cudnn": "CPU time of the ops that call into cuDNN",
        "memcpy": "Memory copies and sets by the op chain behind them",
        "graphs": "CUDA graph replays per graph and position",
        "stacks": "GPU and CPU time by line of your own Python code",
        "memory": "Allocated memory per iteration, peaks, leak suspects",
        "roofline": "FLOPs, bytes and % of the roofline of each op",
        "attention": "Every attention call: backend, shapes, TFLOP/s, why not",
    },
    "Time between kernels": {
        "idle": "Why the GPU idles: causes that add up to its idle time",
        "launches": "Launch cost, launch delay and queue per kernel",
        "streams": "Each GPU stream's busy and idle time per iteration",
        "critical-path": "The chain of work that sets each step's length",
        "comms": "Collectives: size, time and bus bandwidth",
        "cold": "The first call against the steady calls, by cause",
    },
    "Several traces": {
        "compare": "One row per variant: speed-ups and verdicts",
        "report": "A markdown report comparing variants, with charts",
        "diff": "What changed from one trace to another",
        "explain": "Why one trace's GPU time differs from another's",
        "ranks": "Per rank of a job: stragglers, collective skew",
    },
    "Query and tools": {
        "sql": "SQL over a trace's kernels, ops, memory and steps",
        "schema": "The declared columns of each command's tables",
        "check": "Check expectations against a trace (for CI)",
        "annotate": "A copy of a trace with the analysis, for Perfetto",
        "cache": "The cache of loaded traces: where, size, clear",
        "capture": "Record a trace of each attention variant (GPU box)",
    },
}


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
        except click.Abort as error:
            click.echo("Aborted!", err=True)
            # Ctrl-C (click turns it into Abort) exits as the entry does during start-up
            # (traceanalyze/__main__.py); any other abort is a plain failure.
            interrupted = isinstance(error.__cause__, KeyboardInterrupt)
            sys.exit(INTERRUPTED_EXIT if interrupted else 1)
        sys.exit(done if isinstance(done, int) else 0)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands in sections, each with its one line (:data:`SECTIONS`)."""
        listed = {name for section in SECTIONS.values() for name in section}
        others = {
            name: command.get_short_help_str()
            for name, command in self.commands.items()
            if name not in listed and not command.hidden
        }
        for title, lines in [*SECTIONS.items(), ("Other", others)]:
            rows = [(name, line) for name, line in lines.items() if name in self.commands]
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)

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
    from traceanalyze.cli.tables import COMMANDS as TABLES
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
        *TABLES,
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
