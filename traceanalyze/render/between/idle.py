"""Renderers for the time between kernels: `idle` and the report's "Where the time goes"."""

from __future__ import annotations

from typing import Any

import polars as pl

from traceanalyze.analyses.between.idle import IdleResult
from traceanalyze.analyses.between.where import WhereTimeGoes
from traceanalyze.analyses.step.verdict import CANNOT_TELL
from traceanalyze.names import with_readable_names
from traceanalyze.render.formats import Forms, Labelled, figures_row, labelled
from traceanalyze.render.headings import heading
from traceanalyze.render.table import markdown_table
from traceanalyze.tables import conform

# The figures of one idle result, in its JSON's order (the rest are its tables).
IDLE_FIGURES = ("gpu_idle_us_per_iter", "wall_us_per_iter", "bound", "clock_note",
                "iterations", "gpu_activities_per_iter")  # fmt: skip
IDLE_TABLES = ("causes", "by_stream", "largest_gaps", "syncs")


def idle_record(result: IdleResult) -> dict[str, Any]:
    """The JSON object: ``gpu_idle_us_per_iter`` and ``causes`` (which add up to it), the
    split per stream, the largest gaps and the blocking calls (``syncs``)."""
    figures = conform(figures_row(result, IDLE_FIGURES), "idle.figures").row(0, named=True)
    return figures | {
        name: conform(getattr(result, name), f"idle.{name}").to_dicts() for name in IDLE_TABLES
    }


def _table(frame: pl.DataFrame) -> str:
    return markdown_table(frame.rename({c: heading(c) for c in frame.columns}))


def idle_markdown(result: IdleResult, *, full_names: bool = False, level: int = 3) -> str:
    """The idle time, its causes with what each means, the split per stream where there are
    several, and the largest gaps with what the CPU did during them."""
    marks = "#" * level
    if not result.gpu_activities_per_iter:
        return (
            f"No GPU activity (kernels, copies, memsets) in the {result.iterations} counted "
            "iterations: there is no GPU timeline, so no idle time to split by cause. Record "
            "the GPU with torch.profiler's ProfilerActivity.CUDA.\n"
        )
    causes = result.causes.with_columns(
        meaning=pl.col("cause").replace_strict(result.meanings(), return_dtype=pl.String)
    )
    parts = [
        f"GPU idle time {result.gpu_idle_us_per_iter:,.2f} µs per iteration of a "
        f"{result.wall_us_per_iter:,.2f} µs step ({result.iterations} iterations; "
        f"{_bound_words(result.bound)}): the stretches of each step's window when no stream runs "
        "anything, each with one cause, decided by whether the work that ends it was already "
        "queued, else by what the launching thread did until it launched it.\n",
        *(
            [f"**The causes below cannot be read:** {result.clock_note}.\n"]
            if result.clock_note
            else []
        ),
        _table(causes),
    ]
    if result.by_stream.select("rank", "device", "stream").n_unique() > 1:
        parts += [f"{marks} Per stream (the stream whose activity ends the gap)\n",
                  _table(result.by_stream)]  # fmt: skip
    if result.syncs.height:
        syncs = result.syncs
        if syncs["frame"].is_null().all():
            syncs = syncs.drop("frame")
        parts += [
            f"{marks} Blocking calls (what each costs per iteration: CPU time blocked, GPU work "
            "waited for)\n",
            _table(syncs),
        ]
    if result.largest_gaps.height:
        gaps = result.largest_gaps.rename({"next_activity": "name"})
        gaps = gaps if full_names else with_readable_names(gaps)
        parts += [
            f"{marks} Largest gaps (start from the iteration's start on the CPU)\n",
            _table(gaps.rename({"name": "next_activity"})),
        ]
    return "\n".join(parts)


# What the largest cause of idle time says.
VERDICTS = {
    "queued": "gaps before work that was already queued: the GPU's own dispatch between many "
    "small kernels, or waits on another stream's work (fusion or CUDA graphs remove the first)",
    "sync": "the round trips of blocking synchronisations: a synchronize, `.item()`, `.cpu()` "
    "or `nonzero` drains the GPU's queue and the GPU idles until the host launches again",
    "data_loading": "waiting for the next batch: the DataLoader runs on the launching thread "
    "(more workers, pinned memory, prefetching)",
    "host": "waiting for the CPU to launch work: the host's operators and Python set the pace",
    "launch": "the launch calls themselves: many small launches (fusion or CUDA graphs)",
    "launch_first_call": "one-off launch calls (a lazy module load, a JIT compile): a first "
    "call's cost, not steady launch overhead (warm up before profiling, or load modules "
    "eagerly with CUDA_MODULE_LOADING=EAGER)",
}

# The queued verdict where the work runs on one stream with no stream waits (no other stream).
ONE_STREAM_QUEUED = (
    "gaps before work that was already queued on the one stream the work runs on (no stream "
    "waits): the GPU's own dispatch between many small kernels (fusion or CUDA graphs remove "
    "it), or, for long gaps, a GPU clock offset from the CPU's or work the trace does not record"
)


def where_verdict(where: WhereTimeGoes) -> str:
    """One sentence: how much of the step the GPU idles, and what the largest cause says."""
    idle = where.idle
    if where.wall_us_per_iter <= 0 or not idle.gpu_activities_per_iter:
        return "No GPU activity in the iterations: no idle time to explain."
    if idle.gpu_idle_us_per_iter <= 0:
        return "The GPU never idles in the steps' windows."
    top = idle.causes.sort("us_per_iter", descending=True).row(0, named=True)
    share = idle.gpu_idle_us_per_iter / where.wall_us_per_iter * 100
    says = ONE_STREAM_QUEUED if top["cause"] == "queued" and idle.one_stream else None
    return (
        f"The GPU is idle {share:.2g}% of the step's wall time ({idle.bound}); the largest part "
        f"of that ({top['share_of_idle_pct']:.0f}%) is {top['cause']}: "
        f"{says or VERDICTS[top['cause']]}."
    )


def where_time_goes_markdown(where: WhereTimeGoes) -> str:
    """The report's section: idle causes, launch health and one sentence of verdict."""
    health = where.launches
    launch_line = (
        f"Launches: {health['launches_per_iter']:,.1f} per iteration, median launch call "
        f"{health['launch_cpu_us_median']:,.1f} µs on the CPU, median launch delay "
        f"{health['launch_delay_us_median']:,.1f} µs, median queue ahead "
        f"{health['queue_median']:,.1f}; {health['short_kernels_per_iter']:,.1f} short kernels "
        "per iteration (GPU time under their own launch call's CPU time).\n"
    )
    return "\n".join(
        [
            f"## Where the time goes: {where.label}\n"
            if where.label
            else "## Where the time goes\n",
            f"**{where_verdict(where)}**\n",
            idle_markdown(where.idle, level=3),
            launch_line,
        ]
    )


# `idle`: JSON one object per trace (a list for several); tables the causes (the default),
# per stream, the largest gaps, the blocking calls and the figures (with a ``variant`` column
# for several); markdown one section per trace.
IDLE: Forms[Labelled[IdleResult]] = labelled(
    Forms(
        markdown=idle_markdown,
        json=lambda r, **_: idle_record(r),
        tables={
            **{name: name for name in IDLE_TABLES},
            "figures": lambda r, **_: figures_row(r, IDLE_FIGURES),
        },
        command="idle",
    ),
)


def _bound_words(bound: str | None) -> str:
    """The steps' verdict in the sentence: "the steps are GPU-bound", or why there is none."""
    if bound is None or bound == CANNOT_TELL:
        return "no verdict on the steps' bound"
    return f"the steps are {bound}"
