"""`schema` (the declared columns of the commands' tables) and `sql` (SQL over a trace)."""

from __future__ import annotations

from pathlib import Path

import click

from traceanalyze import api
from traceanalyze.cli.analyses import trace_argument
from traceanalyze.cli.options import (
    Loader,
    Output,
    cache_options,
    iteration_options,
    output_options,
)
from traceanalyze.render.formats import QUERY, Forms, shown_table
from traceanalyze.tables import commands

SCHEMA: Forms[object] = Forms(markdown=shown_table, command="schema")


@click.command()
@click.argument("command", nargs=-1)
@click.option(
    "--table",
    "--by",
    "table",
    default=None,
    help="Only this table of the command (the name its --table or --by option takes).",
)
@output_options
def schema(command: tuple[str, ...], table: str | None, out: Output) -> None:
    """The declared columns of COMMAND's tables: name, dtype and unit of each, the same for
    every trace (without COMMAND, every command's). `sql` lists the tables SQL queries read.

    \b
    Example:
      traceanalyze schema idle
      traceanalyze schema kernels --by op --format json
      traceanalyze schema sql
    """
    name = " ".join(command) or None  # `schema cache info`: a subcommand's table
    if name is not None and name not in commands():
        raise click.BadParameter(
            f"{name!r} writes no tables; one of: {', '.join(commands())}", param_hint="COMMAND"
        )
    out.write(SCHEMA.render(api.schema(name, table=table), out.format))


@click.command()
@trace_argument
@click.argument("query")
@output_options
@cache_options
@iteration_options
def sql(trace: Path, query: str, out: Output, loader: Loader) -> None:
    """Run the SQL QUERY (Polars' dialect) over TRACE's tables and write its result like any
    table. The tables: gpu (every kernel, memcpy and memset, classified, with its launching op
    and op chain, module and placement), kernels, cpu_ops, annotations, runtime, memory,
    modules (nn.Module calls) and iterations; a folder of variants adds a variant column.
    `traceanalyze schema sql` lists their columns.

    \b
    Example:
      traceanalyze sql trace.json.gz "SELECT name, sum(dur_ns) AS ns FROM kernels
          WHERE op_chain LIKE '%attention%' GROUP BY name ORDER BY ns DESC"
      traceanalyze sql trace.json.gz "SELECT * FROM gpu WHERE kind = 'memcpy'
          AND bytes > 1048576" --format csv -o big_copies.csv
    """
    result = api.sql(trace, query, loading=loader)
    out.write(QUERY.render(result, out.format), inputs=[trace])


COMMANDS = (schema, sql)
