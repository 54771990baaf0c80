"""`cold` (first call against steady calls, by cause) and `graphs` (CUDA graph replays)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from traceanalyze.analyses.cold_variants import ColdSet, cold_set
from traceanalyze.analyses.graphs import graph_table
from traceanalyze.cli.analyses import _table_command, trace_argument
from traceanalyze.cli.options import Loader, Output, cache_options, output_options
from traceanalyze.errors import AnalysisError
from traceanalyze.load import InputKind, resolve
from traceanalyze.load.variants import Variant, capture_entry, capture_manifest, label_of
from traceanalyze.render.cold import VIEWS, render_cold


@click.command()
@trace_argument
@click.option(
    "--by",
    "view",
    type=click.Choice(VIEWS),
    default=None,
    help="One row per what: cause and operator (JSON/CSV default), cause, call, or variant "
    "(the summary with break-even). Markdown without --by shows them all.",
)
@click.option(
    "--baseline",
    default=None,
    help="Variant whose steady time the break-even is against. [default: naive if present, "
    "else the first variant; none for a single trace]",
)
@click.option("--full-names", is_flag=True, help="Show operator names in full in markdown.")
@output_options
@cache_options
def cold(
    trace: Path,
    view: str | None,
    baseline: str | None,
    full_names: bool,
    out: Output,
    loader: Loader,
) -> None:
    """One-off work: the first call against the median steady call, CPU and GPU time split by
    cause (cuDNN plan build, cuBLAS init, Triton compile and autotuning, Inductor/Dynamo
    compile, lazy CUDA init, allocator growth, other) and operator.

    Calls are the call<i> annotations of `capture --cold`, else profiler steps, else repeated
    annotations or operator sequences. On a capture folder each variant is compared with the
    manifest's wall-clock timing and gets the calls after which its steady advantage over the
    baseline pays the one-off cost back; every figure says which cache state it is for.

    \b
    Example:
      traceanalyze cold traces/cold/sdpa_cudnn.json.gz
      traceanalyze cold traces/cold --by variant --format json
    """
    result = _cold(trace, loader, baseline)
    out.write(render_cold(result, out.format, view=view, full_names=full_names), inputs=[trace])


def _cold(path: Path, loader: Loader, baseline: str | None) -> ColdSet:
    if resolve(path).kind is not InputKind.TRACE:
        found = loader.variants([path])
        manifest = found.manifests[0] if found.manifests else None
        result = cold_set(found.variants, baseline, manifest=manifest)
    else:
        variant = _beside_its_manifest(path, loader)
        result = cold_set([variant], baseline, manifest=capture_manifest(path), single=True)
    if not result.rows.height:
        reasons = "; ".join(n for n in result.summary["note"].drop_nulls().unique())
        raise AnalysisError(
            f"no first call to compare with steady calls ({reasons or 'no calls found'})",
            path,
            "Profile from before the first call and several calls after it, each in "
            "record_function('call<i>') (python -m capture --cold does), or in profiler steps.",
        )
    return result


def _beside_its_manifest(path: Path, loader: Loader) -> Variant:
    """The trace as a variant, with its entry in the capture manifest beside it if any."""
    known = capture_entry(path) or Variant(label_of(path), path)
    return replace(known, trace=loader.trace(path))


graphs = _table_command(
    "graphs",
    {"node": graph_table},
    """CUDA graph replays: per graph and position, the replayed kernel (or copy), the op
    captured there when the trace also holds the capture, replays and time per iteration.

    \b
    Example:
      traceanalyze graphs traces/graph/sdpa_flash.json.gz
    """,
    empty="No CUDA graph replays (cudaGraphLaunch) in this trace.",
)

COMMANDS = (cold, graphs)
