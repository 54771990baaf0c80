"""Renderers for `critical-path` and `comms`: a result in, text or PNG bytes out."""

from __future__ import annotations

import polars as pl

from traceanalyze.analyses.between.critical_path import CriticalPath, path_shares
from traceanalyze.analyses.distributed.comms import (
    NO_ARGS,
    NO_CALLS,
    NO_GROUP,
    Comms,
    busiest_collective,
)
from traceanalyze.names import readable_names
from traceanalyze.render.charts import CATEGORY_STYLES, _plain_ticks, _png, _pyplot
from traceanalyze.render.formats import Forms, figures_row, shown_table
from traceanalyze.tables import conform

# Colours of the kinds that are not a kernel category (kernels take their category's).
KIND_STYLES: dict[str, tuple[str, str]] = {
    "cpu_op": ("#0072B2", ""),
    "annotation": ("#56B4E9", "//"),
    "launch": ("#E69F00", "//"),
    "runtime": ("#999999", ""),
    "sync_wait": ("#D55E00", "xx"),
    "copy": CATEGORY_STYLES["memcpy"],
    "gap": ("#FFFFFF", ".."),
}


def critical_path_markdown(
    path: CriticalPath, *, top: int | None = None, chart: str | None = None
) -> str:
    """The figures, the verdict, the time by kind and the items (the first ``top``); ``chart``,
    the file name of the path's chart written beside the markdown, is linked after them."""
    items = path.items if top is None else path.items.head(top)
    text = "\n".join(
        [
            f"Span per iteration: {path.span_us_per_iter:,.1f} µs; critical path length: "
            f"{path.length_us_per_iter:,.1f} µs.",
            "",
            path_verdict(path),
            "",
            *(f"Note: {note}.\n" for note in path.notes),
            "Time on the path by kind (per iteration):",
            "",
            shown_table(path.by_kind),
            *_threads(path),
            "Items on the path, longest first, with their slack (how much an iteration would "
            "shrink if the item took no time):",
            "",
            shown_table(items, empty="No items on the path."),
        ]
    )
    return text + (f"\n![Critical path]({chart})\n" if chart is not None else "")


PATH_FIGURES = ("bound", "bound_margin_pct", "bound_note", "span_us_per_iter",
                "length_us_per_iter", "notes")  # fmt: skip


def _items(path: CriticalPath, *, top: int | None = None, **_: object) -> pl.DataFrame:
    return path.items if top is None else path.items.head(top)


def critical_path_record(
    path: CriticalPath, *, top: int | None = None, **_: object
) -> dict[str, object]:
    """The JSON object: the figures, the time by kind and by CPU thread, the items (the first
    ``top``), the notes; every value of its declared type."""
    figures = conform(figures_row(path, PATH_FIGURES), "critical-path.figures").row(0, named=True)
    notes = figures.pop("notes")
    return figures | {
        "by_kind": conform(path.by_kind, "critical-path.by_kind").to_dicts(),
        "by_thread": conform(path.by_thread, "critical-path.by_thread").to_dicts(),
        "items": conform(_items(path, top=top), "critical-path.items").to_dicts(),
        "notes": notes,
    }


def _threads(path: CriticalPath) -> list[str]:
    """The path's time per CPU thread, where it runs on more than one."""
    if path.by_thread.height < 2:
        return []
    return [
        "Time on the path by CPU thread (per iteration; the autograd engine's threads run "
        "the backward while the thread that called it waits):",
        "",
        shown_table(path.by_thread.with_columns(pl.col("thread").cast(pl.String))),  # an id
    ]


# `critical-path`: JSON the stable object; tables the items (the first ``top``; the default),
# the time by kind and by CPU thread, each iteration's span and length, the figures; markdown
# figures, verdict, the tables.
CRITICAL_PATH: Forms[CriticalPath] = Forms(
    markdown=critical_path_markdown,
    json=critical_path_record,
    tables={
        "items": _items,
        "by_kind": "by_kind",
        "by_thread": "by_thread",
        "iterations": "iterations",
        "figures": lambda path, **_: figures_row(path, PATH_FIGURES),
    },
    command="critical-path",
)


def path_verdict(path: CriticalPath) -> str:
    """One sentence: the steps' verdict (the step model's, as `summary` gives it), what the
    path is made of, and the item whose freeing would buy most."""
    if path.length_us_per_iter <= 0:
        return "No iterations with a span: no critical path."
    gpu_pct, cpu_pct = path_shares(path)
    side = (
        f"{path.bound or 'no verdict'}; the critical path is {gpu_pct:.0f}% GPU work and "
        f"{cpu_pct:.0f}% CPU time (ops, launches, calls)"
    )
    best = path.items.sort("slack_us_per_iter", descending=True).head(1)
    if not best.height or best["slack_us_per_iter"][0] <= 0:
        return side + "."
    name, slack = readable_names(best["name"])[0], best["slack_us_per_iter"][0]
    return f"{side}; freeing `{name}` would shorten an iteration by at most {slack:,.1f} µs."


def comms_verdict(result: Comms) -> str:
    """One sentence from the evidence: the collectives' time, and how fast the kind that takes
    most of it runs against the link's peak (or what is missing to say so)."""
    if not result.calls.height:
        return NO_CALLS.capitalize() + "."
    total, top = busiest_collective(result)
    said = f"Collectives take {total:,.1f} µs per iteration, most of it {top['collective']}"
    if top["busbw"] is None:
        return f"{said}; its bus bandwidth is unknown ({_why_no_busbw(result, top['collective'])})."
    said += f" at a median bus bandwidth of {top['busbw']:,.1f} GB/s"
    if top["peak"] is None:
        return f"{said} (no link peak known for this GPU)."
    return f"{said}, {top['busbw'] / top['peak'] * 100:.0f}% of the link's {top['peak']:.0f} GB/s."


def _why_no_busbw(result: Comms, collective: str) -> str:
    """Why a kind's bus bandwidth is unknown, from its own calls: no sizes, or no group size."""
    calls = result.calls.filter(pl.col("collective") == collective)
    if calls["bytes"].is_null().all():
        return NO_ARGS.split(":", maxsplit=1)[0]
    if NO_GROUP in result.notes:
        return NO_GROUP.split(":", maxsplit=1)[0]
    return "its calls do not record their group size, the `Group size` arg"


def _style(kind: str) -> tuple[str, str]:
    if kind.startswith("kernel:"):
        return CATEGORY_STYLES.get(kind.removeprefix("kernel:"), CATEGORY_STYLES["other"])
    return KIND_STYLES.get(kind, ("#DDDDDD", ""))


def critical_path_chart(path: CriticalPath) -> bytes:
    """The path of the longest iteration over its timeline: one lane per thread and stream,
    each segment of the path a bar coloured by its kind."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(11, 3.5), dpi=100)
    longest = path.iterations.sort("span_us", descending=True).head(1)
    segments = path.segments.join(longest.select("rank", "iteration"), on=["rank", "iteration"])
    if not segments.height:
        axes.set_title("No critical path: no iteration with a span")
        return _png(plt, figure)
    origin = segments["start_ns"].min()
    lanes = sorted(set(segments["lane"].to_list()), key=lambda lane: (lane.startswith("s"), lane))
    shown: dict[str, object] = {}
    frame = segments.with_columns(
        start_us=(pl.col("start_ns") - origin) / 1e3,
        width_us=(pl.col("end_ns") - pl.col("start_ns")) / 1e3,
    )
    groups = frame.group_by("kind", "lane").agg("start_us", "width_us").sort("kind", "lane")
    for kind, lane, starts, widths in groups.rows():
        colour, hatch = _style(kind)
        bars = axes.broken_barh(list(zip(starts, widths, strict=True)),
                                (lanes.index(lane) - 0.4, 0.8), facecolors=colour, hatch=hatch,
                                edgecolor="#444444", linewidth=0.2)  # fmt: skip
        shown.setdefault(kind, bars)
    axes.set_yticks(range(len(lanes)), [lane or "(none)" for lane in lanes], fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel("time since the iteration's start (µs)")
    _plain_ticks(axes, log=False)
    rank, iteration = longest.row(0)[:2]
    axes.set_title(f"Critical path of the longest iteration (rank {rank}, iteration {iteration})")
    axes.legend(list(shown.values()), list(shown), fontsize=8, loc="upper left",
                bbox_to_anchor=(1.01, 1.0))  # fmt: skip
    figure.tight_layout()
    return _png(plt, figure)


def comms_table(result: Comms, *, by: str = "call", top: int | None = None) -> pl.DataFrame:
    """The calls (``by="call"``) or the summary per kind, the first ``top`` rows."""
    table = result.calls if by == "call" else result.by_kind
    return table if top is None else table.head(top)


def comms_markdown(result: Comms, *, by: str = "call", top: int | None = None) -> str:
    """What the trace lacks first, then the table of ``by``."""
    table = comms_table(result, by=by, top=top)
    notes = "".join(f"Note: {note}.\n\n" for note in result.notes)
    if not table.height:
        return notes or "No collective calls.\n"
    return notes + shown_table(table.drop("ts_ns", strict=False)) + PEER_WAIT


# Under every table of collectives: what a collective's time on one rank holds.
PEER_WAIT = (
    "\nA collective's time on one rank includes waiting for its peers, so its bandwidth is a "
    "lower bound on the link's; `traceanalyze ranks FOLDER` on every rank's trace tells waiting "
    "from transfer.\n"
)


# `comms`: the calls or the summary per kind (``by``), the first ``top`` rows; in markdown,
# what the trace lacks first.
COMMS: Forms[Comms] = Forms(
    markdown=comms_markdown,
    json=lambda result, **options: COMMS.table(result, **options),  # noqa: PLW0108 (not yet bound)
    tables={
        "call": lambda result, *, top=None, **_: comms_table(result, by="call", top=top),
        "kind": lambda result, *, top=None, **_: comms_table(result, by="kind", top=top),
    },
    command="comms",
    choose="by",
)


REPORT_ITEMS = 5


def timeline_parts(path: CriticalPath | None, result: Comms | None) -> list[str]:
    """The report's part for one trace: the critical path's verdict and top slack items, and
    the collectives per kind where the trace has any."""
    parts: list[str] = []
    if path is not None and path.length_us_per_iter > 0:
        top = path.items.sort("slack_us_per_iter", descending=True).head(REPORT_ITEMS)
        parts += [
            f"**Critical path** ({path.length_us_per_iter:,.2f} µs per iteration, the span): "
            f"{path_verdict(path)}\n",
            *(f"Note: {note}.\n" for note in path.notes),
            shown_table(top),
        ]
    if result is not None and result.calls.height:
        columns = ("collective", "size_bucket", "on", "count_per_iter", "us_per_iter",
                   "busbw_gbps_median", "link_peak_gbps", "busbw_pct_of_peak")  # fmt: skip
        notes = "".join(f"Note: {note}.\n\n" for note in result.notes)
        parts += [
            f"**Collectives**: {comms_verdict(result)}\n",
            notes + shown_table(result.by_kind.select(columns)),
        ]
    return parts
