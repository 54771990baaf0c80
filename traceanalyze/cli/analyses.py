"""Single-trace analysis commands: kernels, summary, occupancy, cudnn, memcpy, check."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from traceanalyze import api
from traceanalyze.analyses.report import expectations as expect
from traceanalyze.cli.options import (
    PRINTED,
    Loader,
    Output,
    cache_options,
    iteration_options,
    output_options,
    table_option,
)
from traceanalyze.errors import ExpectationFailed
from traceanalyze.render.analyses import CHECK, ITERATIONS, SUMMARIES
from traceanalyze.render.formats import table_forms

F = TypeVar("F", bound=Callable[..., Any])


def trace_argument(func: F) -> F:
    return click.argument("trace", type=click.Path(path_type=Path))(func)


def _table_command(name: str, doc: str, empty: str) -> click.Command:
    """A command that renders the library's table of the same name (:data:`api.VIEWS`). With
    several views (e.g. per kernel, per category) a --by option picks one; the first is the
    default. ``empty`` is the line shown instead of a table with no rows."""
    views = api.VIEWS[name]
    forms = table_forms(name, list(views) if len(views) > 1 else [""])
    by_option = click.option(
        "--by",
        type=click.Choice(list(views)),
        default=next(iter(views)),
        show_default=True,
        help="One row per what.",
        hidden=len(views) == 1,
    )

    @click.command(name=name, help=doc)
    @trace_argument
    @by_option
    @click.option("--full-names", is_flag=True, help="Show kernel names in full in markdown.")
    @click.option("--top", type=click.IntRange(min=1), default=None, help="Only the first N rows.")
    @output_options
    @cache_options
    @iteration_options
    def command(
        trace: Path,
        by: str,
        full_names: bool,
        top: int | None,
        out: Output,
        loader: Loader,
    ) -> None:
        table = api.table(name, trace, by, top, loader)
        view = by if len(views) > 1 else None
        text = forms.render(table, out.format, by=view, full_names=full_names, empty=empty)
        out.write(text, inputs=[trace])

    return command


kernels = _table_command(
    "kernels",
    """Every distinct kernel (and memcpy/memset) with its category, count, time, launching op,
    occupancy and GEMM precision, longest total time first. --by op gives the GPU activity per
    launching op (each activity counted for its own op).

    \b
    Example:
      traceanalyze kernels sample_traces/h200_default/sdpa_math.json.gz --top 10
      traceanalyze kernels trace.json.gz --by op --top 5
      traceanalyze kernels trace.json.gz --format json -o kernels.json
    """,
    empty="No GPU activity in this trace: no kernels, memory copies or sets to list.",
)
occupancy = _table_command(
    "occupancy",
    """Theoretical occupancy of each kernel from its footprint (registers, shared memory, block
    size) and the GPU's limits, with the limiting resource, beside the occupancy the trace itself
    reports (blank where Kineto wrote none or 0). --by category gives duration-weighted means.

    \b
    Example:
      traceanalyze occupancy sample_traces/h200_default/sdpa_flash.json.gz
      traceanalyze occupancy sample_traces/h200_default/sdpa_math.json.gz --by category
    """,
    empty="No kernels in this trace: no occupancy to compute.",
)
cudnn = _table_command(
    "cudnn",
    """CPU self time of the ops that call into cuDNN, per iteration and as a share of the CPU
    operator time, the first call in the trace against the steady median, and the launch API.
    (The one-off plan build is only in a trace that starts before it: see `cold`.)

    \b
    Example:
      traceanalyze cudnn sample_traces/h200_default/sdpa_cudnn.json.gz
    """,
    empty="No ops that call cuDNN (or MIOpen) in this trace.",
)
memcpy = _table_command(
    "memcpy",
    """Every memory copy and set grouped by the CPU op chain that caused it, with bytes, time
    and what to change.

    \b
    Example:
      traceanalyze memcpy sample_traces/h200_default/naive.json.gz
    """,
    empty="No memory copies or sets in this trace.",
)


@click.command()
@trace_argument
@table_option(SUMMARIES)
@output_options
@cache_options
@iteration_options
def summary(trace: Path, table: str | None, out: Output, loader: Loader) -> None:
    """Per-iteration figures: kernels, memcpy/memset, GPU activity/busy/idle time, CPU operator
    and launch time, wall time and the bound verdict, CPU-side transposes, cuDNN CPU time, time
    per category and launch APIs. A folder of variants gives one record per variant.

    \b
    Example:
      traceanalyze summary sample_traces/h200_default/sdpa_cudnn.json.gz --format json
    """
    records = api.labelled(api.summary(trace, loading=loader))
    out.write(SUMMARIES.render(records, out.format, table=table), inputs=[trace])


@click.command()
@trace_argument
@click.option(
    "-e",
    "--expect",
    "expressions",
    multiple=True,
    metavar="'METRIC OP NUMBER'",
    help="An expectation, e.g. 'kernels_per_iter <= 1'. Repeatable.",
)
@click.option(
    "-f",
    "--file",
    "files",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="A file of expectations, one per line ('#' comments).",
)
@output_options
@cache_options
@iteration_options
def check(
    trace: Path,
    expressions: tuple[str, ...],
    files: tuple[Path, ...],
    out: Output,
    loader: Loader,
) -> None:
    """Check stated expectations against TRACE; exit 1 if any is broken (for CI guards).

    METRIC is a numeric summary key (kernels_per_iter, memcpy_per_iter, gpu_busy_us_per_iter,
    ...), category:NAME (activities of a category per iteration), category_us:NAME or
    launch_api:NAME. An unknown metric, category or API exits 2 with the valid ones. For a
    folder of variants every expectation is checked on each variant.

    \b
    Example:
      traceanalyze check sample_traces/h200_default/sdpa_flash.json.gz \\
          -e 'kernels_per_iter <= 1' -e 'memcpy_per_iter == 0' -e 'category:softmax == 0'
    """
    parsed = [expect.parse(text) for text in expressions]
    for path in files:
        parsed += expect.read_file(path)
    if not parsed:
        raise click.UsageError("give at least one expectation with -e/--expect or -f/--file")
    # the audit line names only the figures this check prints (its expectations' metrics)
    click.get_current_context().meta[PRINTED] = {e.metric for e in parsed}
    results = api.check(trace, parsed, loading=loader)
    out.write(CHECK.render(results, out.format), inputs=[trace])
    broken = int((~results["held"]).sum())
    if broken:
        raise ExpectationFailed(f"{broken} of {results.height} expectations broken", trace)


@click.command()
@trace_argument
@output_options
@cache_options
@iteration_options
def iterations(trace: Path, out: Output, loader: Loader) -> None:
    """One row per iteration: its kind (profiled, closing, capture, region, ...), a flag saying
    why it is left out of the per-iteration means or stands out (empty closing step, CUDA graph
    capture step, first step waiting on the CPU, outlier by median ± 5·MAD), whether it counts,
    and its GPU busy/span/idle time, kernels, copies, CPU operator and launch time.

    \b
    Example:
      traceanalyze iterations sample_traces/h200_graph_capture/naive.json.gz
      traceanalyze iterations trace.json.gz --skip 1 --format json
    """
    subjects = api.subjects(trace, loader)  # loaded once for the table and its notes
    table = api.iterations(subjects)
    out.write(ITERATIONS.render((table, api.notes(subjects)), out.format), inputs=[trace])


COMMANDS = (kernels, summary, iterations, occupancy, cudnn, memcpy, check)
