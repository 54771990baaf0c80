"""`traceanalyze info`: what is in a trace."""

from __future__ import annotations

from pathlib import Path

import click

from traceanalyze.analyses.info import trace_info
from traceanalyze.cli.options import cache_options, output_options, resolve_output
from traceanalyze.cli.progress import loading
from traceanalyze.load import load
from traceanalyze.render.info import render_info


@click.command()
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=Path))
@output_options
@cache_options
def info(
    traces: tuple[Path, ...],
    fmt: str | None,
    output: Path | None,
    force: bool,
    no_cache: bool,
    cache_dir: Path | None,
) -> None:
    """Device, versions, time span, event counts, iterations and linking of each TRACE.

    TRACE is a .json or .json.gz trace, or a folder of per-rank traces.

    \b
    Example:
      traceanalyze info sample_traces/h200_default/sdpa_flash.json.gz
      traceanalyze info run/*.json.gz --format json
    """
    out = resolve_output(fmt, output, force)
    records = []
    for path in traces:
        with loading([path]):
            records.append(trace_info(load(path, cache=not no_cache, cache_dir=cache_dir)))
    out.write(render_info(records, out.format), inputs=traces)
