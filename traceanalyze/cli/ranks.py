"""`traceanalyze ranks`: one row per rank of a job, stragglers and collective skew."""

from __future__ import annotations

from pathlib import Path

import click

from traceanalyze import api
from traceanalyze.analyses.distributed.ranks import DEFAULT_STRAGGLER_PCT
from traceanalyze.analyses.distributed.skew import ALIGN_ENDS, ALIGNMENTS
from traceanalyze.cli.options import (
    Loader,
    Output,
    cache_options,
    clock_align_option,
    iteration_options,
    output_options,
    table_option,
    warn_skipped,
)
from traceanalyze.cli.progress import loading
from traceanalyze.engine import ENGINE_LOCAL, ENGINES
from traceanalyze.render.ranks import RANKS


@click.command()
@click.argument("folder", type=click.Path(path_type=Path))
@click.option(
    "--straggler-pct",
    type=click.FloatRange(min=0),
    default=DEFAULT_STRAGGLER_PCT,
    show_default=True,
    help="A rank is a straggler when its step time exceeds the median by more than this.",
)
@click.option(
    "--align",
    type=click.Choice(ALIGNMENTS),
    default=ALIGN_ENDS,
    show_default=True,
    help="How ranks' clocks are aligned before collective starts are compared: on collective "
    "ends, or none (raw clocks: only for ranks of one host).",
)
@click.option(
    "--engine",
    type=click.Choice(ENGINES),
    default=ENGINE_LOCAL,
    show_default=True,
    help="Where each rank is converted and analysed: local processes, or a Dask cluster "
    "(the dask extra).",
)
@click.option(
    "--address",
    default=None,
    help="The Dask scheduler to run on, e.g. tcp://host:8786; without it --engine dask "
    "starts a local cluster for this run.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Worker processes of the local engine or local cluster [default: one per CPU].",
)
@click.option("--full-names", is_flag=True, help="Show kernel names in full in markdown.")
@table_option(RANKS)
@clock_align_option
@output_options
@cache_options
@iteration_options
def ranks(
    folder: Path,
    straggler_pct: float,
    align: str,
    engine: str,
    address: str | None,
    workers: int | None,
    full_names: bool,
    table: str | None,
    clock_align: bool,
    out: Output,
    loader: Loader,
) -> None:
    """Per rank of the job in FOLDER (every trace states a different rank): step time, GPU
    busy, kernel and communication time, exposed communication, overlap and idle time; the
    stragglers; and how far apart the ranks start each collective. --format csv gives the
    rank table; json every table.

    \b
    Example:
      traceanalyze ranks run/ranks --straggler-pct 5
      traceanalyze ranks run/ranks --clock-align
      traceanalyze ranks /shared/job42 --engine dask --address tcp://scheduler:8786 -o ranks.json
    """
    with loading([folder]):
        result = api.ranks(
            folder,
            straggler_pct=straggler_pct,
            align=align,
            engine=engine,
            address=address,
            workers=workers,
            clock_align=clock_align,
            loading=loader,
        )
    warn_skipped(result.skipped)
    text = RANKS.render(result, out.format, full_names=full_names, table=table)
    out.write(text, inputs=[folder])
