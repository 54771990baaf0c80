"""`report`, `compare` and `diff`: several traces side by side."""

from __future__ import annotations

import shlex
from pathlib import Path

import click
import polars as pl
from click.core import ParameterSource

from traceanalyze import api
from traceanalyze.analyses.report import expectations as expect
from traceanalyze.analyses.report.hta_breakdown import failures, require_hta
from traceanalyze.cli.options import (
    Loader,
    Output,
    cache_options,
    iteration_options,
    output_options,
    table_option,
)
from traceanalyze.render.formats import refusal
from traceanalyze.render.report.markdown import CHART_TITLES, COMPARISON, DIFF, charts

paths_argument = click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
baseline_option = click.option(
    "--baseline",
    default=None,
    help="Variant the speed-ups are relative to (must be one of them). [default: naive if "
    "present, else the first variant]",
)
label_option = click.option(
    "--label",
    "labels",
    multiple=True,
    help="A prefix for the variants of each path, one per path in order (for folders whose "
    "variants share names), e.g. --label before --label after.",
)
full_names_option = click.option(
    "--full-names", is_flag=True, help="Show kernel names in full instead of shortened."
)


@click.command()
@paths_argument
@baseline_option
@label_option
@full_names_option
@click.option("--hta", "with_hta", is_flag=True, help="Add HTA's temporal and idle-time breakdown.")
@click.option(
    "--expect",
    "expect_files",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="A file of expectations, one per line, in the syntax of `check` (e.g. "
    "'kernels_per_iter <= 1'): adds a Guesses section, broken first. Repeatable.",
)
@output_options(folder_file="report.md")
@cache_options
@iteration_options
@click.pass_context
def report(
    ctx: click.Context,
    paths: tuple[Path, ...],
    baseline: str | None,
    labels: tuple[str, ...],
    full_names: bool,
    with_hta: bool,
    expect_files: tuple[Path, ...],
    out: Output,
    loader: Loader,
) -> None:
    """A markdown report comparing the traces in PATHS, with PNG charts beside it.

    PATHS are trace files or folders; a capture folder (with manifest.json) is read as a set of
    variants in the order they were captured. Charts are written next to -o's file; -o FOLDER/
    (or an existing folder) writes FOLDER/report.md and its charts inside.

    \b
    Example:
      traceanalyze report sample_traces/h200_default -o report.md
      traceanalyze report naive.json.gz sdpa_flash.json.gz --baseline naive -o out/report.md
      traceanalyze report sample_traces/h200_default --expect guesses.txt -o report.md
    """
    # The format follows -o's suffix: `-o report.json` must not silently get markdown.
    refused = refusal(api.REPORT, out.format)
    if refused is not None:
        raise click.UsageError(refused)
    if with_hta:
        require_hta()  # before the slow part, not after it
    guesses = [e for path in expect_files for e in expect.read_file(path)]
    files = {chart: name for chart in CHART_TITLES if (name := out.chart_beside(chart))}
    result = api.report(
        paths,
        baseline=baseline,
        labels=labels,
        expectations=guesses,
        hta=with_hta,
        loading=loader,
    )
    images = charts(result.report) if files else {}
    text = api.REPORT.render(
        result,
        out.format,
        command=_command_line(ctx),
        charts={chart: files[chart] for chart in images},
        full_names=full_names,
    )
    out.write(text, inputs=paths)
    for chart, data in images.items():
        out.write_beside(files[chart], data)
    if result.hta is not None:
        _warn_of_hta_failures(result.hta)


def _warn_of_hta_failures(breakdown: pl.DataFrame) -> None:
    """One line, where HTA failed on some variant (the report's section says why)."""
    failed = failures(breakdown)["variant"].to_list()
    if failed:
        click.echo(
            f"traceanalyze: warning: Holistic Trace Analysis failed on {len(failed)} of "
            f"{breakdown.height} traces ({', '.join(failed)}); the report's HTA section says why",
            err=True,
        )


@click.command()
@paths_argument
@baseline_option
@label_option
@full_names_option
@output_options
@cache_options
@iteration_options
def compare(
    paths: tuple[Path, ...],
    baseline: str | None,
    labels: tuple[str, ...],
    full_names: bool,
    out: Output,
    loader: Loader,
) -> None:
    """The comparison table alone: one row per variant (trace) in PATHS.

    \b
    Example:
      traceanalyze compare sample_traces/h200_default
      traceanalyze compare a.json.gz b.json.gz --format csv -o table.csv
    """
    table = api.compare(paths, baseline=baseline, labels=labels, loading=loader)
    out.write(COMPARISON.render(table, out.format, full_names=full_names), inputs=paths)


@click.command()
@click.argument("base", type=click.Path(path_type=Path))
@click.argument("new", type=click.Path(path_type=Path))
@full_names_option
@table_option(DIFF)
@output_options
@cache_options
@iteration_options
def diff(
    base: Path,
    new: Path,
    full_names: bool,
    table: str | None,
    out: Output,
    loader: Loader,
) -> None:
    """What changed from BASE to NEW: per-iteration figures, time per category, kernels
    added, removed or changed.

    \b
    Example:
      traceanalyze diff sample_traces/h200_default/naive.json.gz \\
          sample_traces/h200_default/naive_inplace.json.gz
    """
    result = api.diff(base, new, loading=loader)
    if not out.on_terminal_for_people:  # the markdown shows them
        for warning in result.warnings:
            click.echo(f"traceanalyze: warning: {warning}", err=True)
    text = DIFF.render(result, out.format, full_names=full_names, table=table)
    out.write(text, inputs=[base, new])


def _command_line(ctx: click.Context) -> str:
    """The command as given, rebuilt from what click parsed: sys.argv is the host program's
    under CliRunner or an embedding script, not this command's."""
    words = ["traceanalyze", ctx.info_name or ctx.command.name or ""]
    for param in ctx.command.params:
        value = ctx.params.get(param.name or "")
        if ctx.get_parameter_source(param.name or "") is not ParameterSource.COMMANDLINE:
            continue
        if isinstance(param, click.Argument):
            words += [str(v) for v in value] if isinstance(value, tuple) else [str(value)]
        elif getattr(param, "is_flag", False):
            words.append(param.opts[0])
        elif isinstance(value, tuple):  # a repeatable option: the flag once per value
            words += [word for item in value for word in (param.opts[0], str(item))]
        else:
            words += [param.opts[0], str(value)]
    return shlex.join(words)


COMMANDS = (report, compare, diff)
