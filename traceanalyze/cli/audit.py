"""`traceanalyze audit`: the checks of a trace itself."""

from __future__ import annotations

from pathlib import Path

import click

from traceanalyze import api
from traceanalyze.cli.options import (
    Loader,
    Output,
    cache_options,
    iteration_options,
    output_options,
    table_option,
)
from traceanalyze.render.audit import AUDIT


@click.command()
@click.argument("trace", type=click.Path(path_type=Path))
@table_option(AUDIT)
@output_options
@cache_options
@iteration_options
def audit(trace: Path, table: str | None, out: Output, loader: Loader) -> None:
    """Can this trace be trusted? Checks of the trace itself, one row per finding: launches
    whose GPU activity is missing, activity whose launch is missing (before the window or
    inside it), overlapping activities on one stream, overflowing durations, bad timestamps,
    truncated steps, rank clock skew (a folder of ranks), profiler overhead, graph replays no
    op explains, missing metadata. Each row says its severity, what it moves by how much, and
    the first examples with the timestamps the trace writes; JSON adds `ok` and the error bar
    of each figure. Exit 0 whatever it finds (read `ok`).

    \b
    Example:
      traceanalyze audit sample_traces/h200_default/naive.json.gz
      traceanalyze audit run/ranks --format json -o audit.json
    """
    result = api.audit(trace, loading=loader)
    out.write(AUDIT.render(api.labelled(result), out.format, table=table), inputs=[trace])


COMMANDS = (audit,)
