"""The library as the command line's twin: one function per command, with the command's name.

Each takes what the command takes (a trace file, a folder of ranks, a capture folder of
variants; or an already loaded :class:`~traceanalyze.trace.Trace` or
:class:`~traceanalyze.load.variants.VariantSet`) and returns what the command prints, before
it is rendered: a ``polars.DataFrame`` whose columns are the command's JSON keys, or a small
frozen result whose fields are. Results show as the command's tables in Jupyter.

>>> import traceanalyze as ta
>>> ta.summary("sample_traces/h200_default/sdpa_flash.json.gz").kernels_per_iter
1.0
>>> ta.kernels("sample_traces/h200_default/sdpa_flash.json.gz")["category"].to_list()
['fused_attention']

The commands call these same functions; they add only parsing, progress and writing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Generic, NamedTuple, Self, TypeAlias, TypeVar, cast

import polars as pl

from traceanalyze import __version__, display
from traceanalyze.analyses.annotate import Annotation
from traceanalyze.analyses.annotate import annotate as annotation_of
from traceanalyze.analyses.attention import AttentionResult
from traceanalyze.analyses.attention import attention as attention_of
from traceanalyze.analyses.attention.capture_facts import CaptureFacts
from traceanalyze.analyses.attention.dispatch import FORCED
from traceanalyze.analyses.audit import Audit
from traceanalyze.analyses.audit import audit as audit_of
from traceanalyze.analyses.audit.clocks import aligned_comms
from traceanalyze.analyses.audit.figures import COMMAND_FIGURES
from traceanalyze.analyses.between.critical_path import CriticalPath
from traceanalyze.analyses.between.critical_path import critical_path as critical_path_of
from traceanalyze.analyses.between.idle import LARGEST_GAPS, IdleResult, idle_breakdown
from traceanalyze.analyses.between.launches import launch_by_category, launch_outliers, launch_table
from traceanalyze.analyses.between.streams import stream_iterations, stream_table
from traceanalyze.analyses.between.where import WhereTimeGoes, where_time_goes_of
from traceanalyze.analyses.cold.variants import ColdSet, cold_set
from traceanalyze.analyses.cudnn import cudnn_table
from traceanalyze.analyses.distributed.comms import Comms
from traceanalyze.analyses.distributed.comms import comms as comms_of
from traceanalyze.analyses.distributed.ranks import DEFAULT_STRAGGLER_PCT, RanksResult
from traceanalyze.analyses.distributed.skew import ALIGN_ENDS, ALIGNMENTS
from traceanalyze.analyses.graphs import graph_table
from traceanalyze.analyses.info import trace_info
from traceanalyze.analyses.iterations import Selection, counted, iteration_notes
from traceanalyze.analyses.kernels import (
    kernel_table,
    occupancy_by_category,
    occupancy_table,
    op_table,
)
from traceanalyze.analyses.memcpy import memory_traffic
from traceanalyze.analyses.memory.usage import MemoryResult
from traceanalyze.analyses.memory.usage import memory as memory_of
from traceanalyze.analyses.report import expectations as expect
from traceanalyze.analyses.report.contents import Report, build_report
from traceanalyze.analyses.report.hta_breakdown import hta_breakdown, require_hta
from traceanalyze.analyses.roofline.model import Roofline
from traceanalyze.analyses.roofline.model import roofline as roofline_of
from traceanalyze.analyses.sql import run_query, tables_for
from traceanalyze.analyses.stacks import StacksResult
from traceanalyze.analyses.stacks import stacks as stacks_of
from traceanalyze.analyses.step.model import step_rows
from traceanalyze.analyses.summary import Summary, summary_with_wall, verdict_fields
from traceanalyze.analyses.variants.compare import comparison, steady_median_ms
from traceanalyze.analyses.variants.diff import TraceDiff
from traceanalyze.analyses.variants.diff import diff as diff_traces
from traceanalyze.analyses.variants.explain import Explanation
from traceanalyze.analyses.variants.explain import explain as explain_traces
from traceanalyze.arguments import (
    as_path,
    check_choice,
    check_number,
    check_numbers,
    is_path,
    wrong_input,
)
from traceanalyze.classify import CATEGORIES
from traceanalyze.engine import ENGINE_LOCAL, ENGINES, rank_folder
from traceanalyze.errors import AnalysisError, UsageError
from traceanalyze.hardware.peaks import PeakOverride
from traceanalyze.load import Input as ResolvedInput
from traceanalyze.load import InputKind, load, resolve
from traceanalyze.load.annotated import write_annotated
from traceanalyze.load.variants import (
    Variant,
    VariantSet,
    capture_config,
    capture_entry,
    capture_manifest,
    label_of,
    load_variants,
)
from traceanalyze.render.analyses import SUMMARIES
from traceanalyze.render.annotate import activity_args, added_events
from traceanalyze.render.attention import ATTENTION, attention_section
from traceanalyze.render.audit import AUDIT
from traceanalyze.render.between.critical_path import COMMS, CRITICAL_PATH
from traceanalyze.render.between.idle import IDLE, where_time_goes_markdown
from traceanalyze.render.cold import COLD
from traceanalyze.render.formats import FOR_PEOPLE, MARKDOWN, Forms
from traceanalyze.render.info import INFO
from traceanalyze.render.memory.tables import MEMORY
from traceanalyze.render.perf import EXPLAIN, ROOFLINE
from traceanalyze.render.ranks import RANKS
from traceanalyze.render.report.hta import hta_markdown
from traceanalyze.render.report.markdown import DIFF, render_report
from traceanalyze.render.stacks import STACKS
from traceanalyze.tables import TABLES, VARIANT, conform, schema_rows, table_name, tables_of
from traceanalyze.trace import Trace

R = TypeVar("R")
PathLike = str | Path


class Subject(NamedTuple):
    """One trace a single-trace command reports on."""

    label: str | None  # the variant, for a folder of separate traces
    trace: Trace
    median_ms: float | None  # the capture's steady median time per call, where known


# What a single-trace function takes: a path (a trace file, a folder of ranks, a capture
# folder), a loaded Trace or VariantSet, or the subjects a Loading already resolved.
Input: TypeAlias = str | Path | Trace | VariantSet | Sequence[Subject]


@dataclass(frozen=True)
class Loading:
    """How paths load: the cache (``cache``, ``cache_dir``), which iterations count
    (``selection``; None: the default rule) and the threads that scan a file (``threads``;
    None: ``$TRACEANALYZE_THREADS``, else the cores). The command line's loader adds progress
    and warnings by overriding :meth:`load_trace` and :meth:`load_variants`."""

    cache: bool = True
    cache_dir: Path | None = None
    selection: Selection | None = None
    threads: int | None = None

    def choosing(self, selection: Selection | None) -> Self:
        return replace(self, selection=selection)

    def load_trace(self, path: Path) -> Trace:
        return load(path, cache=self.cache, cache_dir=self.cache_dir, threads=self.threads)

    def load_variants(
        self, paths: Sequence[Path | ResolvedInput], labels: Sequence[str] | None
    ) -> VariantSet:
        return load_variants(
            paths, cache=self.cache, cache_dir=self.cache_dir, labels=labels, threads=self.threads
        )

    def audit_noted(self, path: Path, found: Sequence[Trace | str]) -> None:
        """Told what a command loaded from ``path`` (traces, or audit warnings written where
        the ranks were analysed); the command line warns of their faults, the library not."""

    def trace(self, path: PathLike) -> Trace:
        return counted(self.load_trace(Path(path)), self.selection)

    def variants(
        self, paths: Sequence[PathLike | ResolvedInput], labels: Sequence[str] | None = None
    ) -> VariantSet:
        given = [p if isinstance(p, ResolvedInput) else Path(p) for p in paths]
        return self.counting(self.load_variants(given, labels or None))

    def counting(self, found: VariantSet) -> VariantSet:
        """``found`` restricted to the iterations that count."""
        chosen = tuple(
            v if v.trace is None else replace(v, trace=counted(v.trace, self.selection))
            for v in found.variants
        )
        return replace(found, variants=chosen)

    def each(self, path: Path) -> list[Subject]:
        """The traces a single-trace command runs on: one for a file or a folder of ranks,
        one per variant (with its label) for a folder of separate traces; each with the
        capture's steady median time where a manifest gives one (for the bound verdict)."""
        found = resolve(path)
        if found.kind is InputKind.TRACE:
            known = capture_entry(path)
            median = steady_median_ms(known) if known else None
            return [Subject(None, self.trace(path), median)]
        variants = self.variants([found]).loaded
        if found.kind is InputKind.RANK_FOLDER and len(variants) == 1:  # the ranks of one job
            return [Subject(None, variants[0].trace, None)]  # type: ignore[arg-type]
        return [
            Subject(v.label, v.trace, steady_median_ms(v)) for v in variants if v.trace is not None
        ]


def subjects(x: Input, loading: Loading | None = None) -> list[Subject]:
    """The traces a single-trace function reports on, from whatever it was given."""
    loading = _loading(loading)
    if isinstance(x, Trace):
        return [Subject(None, counted(x, loading.selection), _capture_median(x))]
    if isinstance(x, VariantSet):
        chosen = loading.counting(x).loaded
        return [Subject(v.label, v.trace, steady_median_ms(v)) for v in chosen if v.trace]
    if is_path(x):
        return loading.each(Path(x))  # type: ignore[arg-type]
    given = list(x) if isinstance(x, (list, tuple)) else None
    if given is None or not all(isinstance(s, Subject) for s in given):
        raise wrong_input(x)
    return given


def _loading(loading: Loading | None) -> Loading:
    if loading is not None and not isinstance(loading, Loading):
        raise wrong_input(loading, "loading=Loading(...) or None")
    return loading or Loading()


def _capture_median(trace: Trace) -> float | None:
    """A trace loaded from a file of a capture folder keeps the capture's median, as its path
    does (``summary(load(f))`` and ``summary(f)`` give the same verdict)."""
    known = capture_entry(trace.path) if len(trace.meta) == 1 and trace.path.is_file() else None
    return steady_median_ms(known) if known else None


def one_trace(x: PathLike | Trace, loading: Loading | None = None) -> Trace:
    """One trace (for the commands that compare or walk exactly one)."""
    loading = _loading(loading)
    if isinstance(x, Trace):
        return counted(x, loading.selection)
    return loading.trace(as_path(x, ONE_TRACE))


ONE_TRACE = "one trace file or folder of ranks (str or pathlib.Path) or a loaded Trace"


def per_variant(
    loaded: Sequence[Subject],
    analysis: Callable[[Subject], pl.DataFrame],
    top: int | None,
    name: str,
) -> pl.DataFrame:
    """``analysis`` of each trace as table ``name`` declares it; for a folder of variants,
    with a leading ``variant`` column."""
    frames = []
    for subject in loaded:
        frame = conform(analysis(subject), name)
        if top is not None:
            frame = frame.head(top)
        if subject.label is not None:
            frame = frame.select(pl.lit(subject.label).alias(VARIANT), pl.all())
        frames.append(frame)
    return pl.concat(frames) if len(frames) > 1 else frames[0]


@dataclass(frozen=True, repr=False)
class PerVariant(display.Shown, Generic[R]):
    """One result per variant of a capture folder, by label (``pv["sdpa_flash"]``) or
    position (``pv[0]``); ``to_frame()`` stacks the results' tables with a ``variant``
    column."""

    results: tuple[tuple[str | None, R], ...]

    def __getitem__(self, key: str | int) -> R:
        if isinstance(key, int) and not isinstance(key, bool):
            return self.results[key][1]
        for name, result in self.results:
            if name == key:
                return result
        raise KeyError(f"{key!r}: no such variant (there are {', '.join(map(str, self.labels))})")

    def __len__(self) -> int:
        return len(self.results)

    def __iter__(self) -> Iterator[R]:
        return (result for _, result in self.results)

    @property
    def labels(self) -> list[str | None]:
        return [label for label, _ in self.results]

    def __repr__(self) -> str:
        kind = type(self.results[0][1]).__name__ if self.results else "result"
        return f"PerVariant({len(self.results)} {kind}: {', '.join(map(str, self.labels))})"


def labelled(result: R | PerVariant[R]) -> list[tuple[str | None, R]]:
    """A function's answer as (label, result) pairs, the renderers' input."""
    return list(result.results) if isinstance(result, PerVariant) else [(None, result)]


def _each(x: Input, loading: Loading | None, analysis: Callable[[Subject], R]) -> R | PerVariant[R]:
    """``analysis`` of each trace (its tables as declared): the result itself for one
    unlabelled trace."""
    results = tuple((s.label, conformed(analysis(s))) for s in subjects(x, loading))
    if len(results) == 1 and results[0][0] is None:
        return results[0][1]
    return PerVariant(results)


def info(
    paths: PathLike | Trace | Sequence[PathLike],
    *,
    table: str = "traces",
    loading: Loading | None = None,
) -> pl.DataFrame:
    """Device, versions, time span, event counts, iterations and linking: one row per trace;
    a capture folder gives one per variant, ``variant`` first. ``table="event_counts"``: one
    row per trace and event category.

    >>> info("sample_traces/h200_default/sdpa_flash.json.gz")["iteration_source"].to_list()
    ['ProfilerStep']
    """
    return INFO.table(info_records(paths, loading=loading), table=table)


def info_records(
    paths: PathLike | Trace | Sequence[PathLike], *, loading: Loading | None = None
) -> list[dict[str, Any]]:
    """What `info` says of each trace, as records (the command's JSON)."""
    listed = [paths] if is_path(paths) or isinstance(paths, Trace) else paths
    if not isinstance(listed, (list, tuple)):
        raise wrong_input(paths, "trace paths (str or pathlib.Path), a Trace, or a list of them")
    return [
        trace_info(s.trace) if s.label is None else {VARIANT: s.label, **trace_info(s.trace)}
        for given in listed
        for s in subjects(cast(Input, given), loading)
    ]


# The table commands' views (--by), the first the default: the data behind `--by`.
VIEWS: dict[str, dict[str, Callable[[Trace], pl.DataFrame]]] = {
    "kernels": {"kernel": kernel_table, "op": op_table},
    "occupancy": {"kernel": occupancy_table, "category": occupancy_by_category},
    "cudnn": {"op": cudnn_table},
    "memcpy": {"chain": memory_traffic},
    "streams": {"stream": stream_table, "iteration": stream_iterations},
    "launches": {
        "kernel": launch_table,
        "category": launch_by_category,
        "outlier": launch_outliers,
    },
    "graphs": {"node": graph_table},
}


def table(
    command: str,
    x: Input,
    by: str | None = None,
    top: int | None = None,
    loading: Loading | None = None,
) -> pl.DataFrame:
    """The table of ``command`` (one of :data:`VIEWS`), one row per ``by``."""
    views = VIEWS[command]
    view = by or next(iter(views))
    if view not in views:
        raise UsageError(
            f"{command} has no view {view!r}", None, f"Use one of: {', '.join(views)}."
        )
    check_number("top", top)
    name = table_name(command, view if len(views) > 1 else "")
    return per_variant(subjects(x, loading), lambda s: views[view](s.trace), top, name)


def kernels(
    x: Input, *, by: str = "kernel", top: int | None = None, loading: Loading | None = None
) -> pl.DataFrame:
    """Every distinct kernel (and memcpy/memset): ``name``, ``category``, ``count``,
    ``total_us``, ``mean_us``, occupancy, ``launch_op``, ...; ``by="op"``: per launching op.

    >>> k = kernels("sample_traces/h200_default/naive.json.gz", top=2)
    >>> k.select("category", "count").rows()
    [('mask', 3), ('softmax', 4)]
    """
    return table("kernels", x, by, top, loading)


def occupancy(
    x: Input, *, by: str = "kernel", top: int | None = None, loading: Loading | None = None
) -> pl.DataFrame:
    """Theoretical occupancy of each kernel and its limiting resource (``by="category"``:
    duration-weighted means).

    >>> occupancy("sample_traces/h200_default/sdpa_flash.json.gz")[
    ...     "theoretical_occupancy_pct"].to_list()
    [12.5]
    """
    return table("occupancy", x, by, top, loading)


def cudnn(x: Input, *, top: int | None = None, loading: Loading | None = None) -> pl.DataFrame:
    """CPU self time of the ops that call into cuDNN, per iteration.

    >>> cudnn("sample_traces/h200_default/sdpa_cudnn.json.gz").height
    1
    """
    return table("cudnn", x, None, top, loading)


def memcpy(x: Input, *, top: int | None = None, loading: Loading | None = None) -> pl.DataFrame:
    """Every memory copy and set grouped by the CPU op chain that caused it.

    >>> memcpy("sample_traces/h200_default/naive.json.gz")["kind"].to_list()
    ['memcpy', 'memset']
    """
    return table("memcpy", x, None, top, loading)


def streams(
    x: Input, *, by: str = "stream", top: int | None = None, loading: Loading | None = None
) -> pl.DataFrame:
    """Each GPU stream per iteration (``by="iteration"``: per stream and iteration).

    >>> streams("sample_traces/h200_default/sdpa_flash.json.gz").height
    1
    """
    return table("streams", x, by, top, loading)


def launches(
    x: Input, *, by: str = "kernel", top: int | None = None, loading: Loading | None = None
) -> pl.DataFrame:
    """Launch call CPU time, launch delay and queue per kernel name (``by="category"``,
    ``by="outlier"``).

    >>> "launch_delay_us_median" in launches("sample_traces/h200_default/sdpa_flash.json.gz")
    True
    """
    return table("launches", x, by, top, loading)


def graphs(x: Input, *, top: int | None = None, loading: Loading | None = None) -> pl.DataFrame:
    """CUDA graph replays per graph and position.

    >>> graphs("sample_traces/h200_default/sdpa_flash.json.gz").height
    0
    """
    return table("graphs", x, None, top, loading)


def iterations(x: Input, *, loading: Loading | None = None) -> pl.DataFrame:
    """One row per iteration: its kind, flag, whether it counts, its GPU and CPU figures.

    >>> iterations("sample_traces/h200_default/sdpa_flash.json.gz")["counted"].to_list()
    [False, True, True]
    """
    return per_variant(subjects(x, loading), lambda s: step_rows(s.trace), None, "iterations")


def notes(x: Input, *, loading: Loading | None = None) -> list[str]:
    """What `iterations` says under its table (how iterations were found, which left out)."""
    return [
        (f"{s.label}: " if s.label is not None else "") + line
        for s in subjects(x, loading)
        for line in iteration_notes(s.trace)
    ]


def summary(x: Input, *, loading: Loading | None = None) -> Summary | PerVariant[Summary]:
    """Per-iteration figures as a frozen :class:`~traceanalyze.analyses.summary.Summary`
    (fields: the README's stable keys); one per variant for a capture folder.

    >>> s = summary("sample_traces/h200_default/naive.json.gz")
    >>> s.kernels_per_iter, s.memcpy_per_iter, s["iteration_source"]
    (5.0, 1.0, <IterationSource.PROFILER_STEP: 'ProfilerStep'>)
    """
    return _each(
        x,
        loading,
        lambda s: (
            summary_with_wall(s.trace, s.median_ms)
            .of_variant(s.label)
            .audited(audit_of(s.trace).warnings_for(COMMAND_FIGURES["summary"]))
        ),
    )


def audit(x: Input, *, loading: Loading | None = None) -> Audit | PerVariant[Audit]:
    """Can the trace be trusted? Each check of the trace itself (dropped launches and
    activities, overlaps, overflowing durations, bad timestamps, truncation, rank clock skew,
    profiler overhead, opaque graph replays, missing metadata) with what it moves, ``ok`` and
    the error bar of each figure; one per variant for a capture folder.

    >>> audit("sample_traces/h200_default/sdpa_flash.json.gz").ok
    True
    """
    return _each(x, loading, lambda s: audit_of(s.trace, untraced_median_ms=s.median_ms))


def check(
    x: Input, expectations: Sequence[str | expect.Expectation], *, loading: Loading | None = None
) -> pl.DataFrame:
    """Each expectation (``'kernels_per_iter <= 1'``) against the summary: ``expectation``,
    ``measured``, ``held``.

    >>> check("sample_traces/h200_default/sdpa_flash.json.gz", ["kernels_per_iter <= 1"])[
    ...     "held"].to_list()
    [True]
    """
    listed = [expectations] if isinstance(expectations, (str, expect.Expectation)) else expectations
    parsed = [expect.parse(e) if isinstance(e, str) else e for e in listed]
    return per_variant(
        subjects(x, loading),
        lambda s: expect.check(parsed, summary_with_wall(s.trace, s.median_ms)),
        None,
        "check",
    )


def idle(
    x: Input, *, largest: int = LARGEST_GAPS, loading: Loading | None = None
) -> IdleResult | PerVariant[IdleResult]:
    """The GPU's idle time per iteration split by cause, per stream, and the largest gaps
    (``largest``: how many)."""
    check_number("largest", largest)
    return _each(
        x,
        loading,
        lambda s: replace(
            idle_breakdown(s.trace, largest), bound=verdict_fields(s.trace, s.median_ms)["bound"]
        ),
    )


def stacks(
    x: Input,
    *,
    full_stack: bool = False,
    category: str | None = None,
    exclude: Sequence[str] = (),
    loading: Loading | None = None,
) -> StacksResult | PerVariant[StacksResult]:
    """GPU, kernel and CPU time per iteration by the innermost Python frame of the user's own
    code, and the memory copies by line (traces recorded with ``with_stack=True``; without
    stacks ``python_frames`` is 0 and the tables are empty).

    >>> ta_stacks = stacks("sample_traces/h200_with_stack/naive.json.gz")
    >>> ta_stacks.python_frames > 0, "gpu_us_per_iter" in ta_stacks.rows.columns
    (True, True)
    """
    check_choice("category", category, CATEGORIES)
    if isinstance(exclude, str):
        exclude = (exclude,)
    return _each(
        x,
        loading,
        lambda s: stacks_of(s.trace, full_stack=full_stack, category=category, exclude=exclude),
    )


def roofline(
    x: Input,
    *,
    peak_tflops: float | None = None,
    peak_tbps: float | None = None,
    loading: Loading | None = None,
) -> Roofline | PerVariant[Roofline]:
    """FLOPs, bytes and % of the roofline of each op (needs ``record_shapes=True``)."""
    check_numbers(peak_tflops=peak_tflops, peak_tbps=peak_tbps)
    override = PeakOverride(peak_tflops, peak_tbps)
    return _each(x, loading, lambda s: roofline_of(s.trace, override))


def memory(x: Input, *, loading: Loading | None = None) -> MemoryResult | PerVariant[MemoryResult]:
    """Allocated bytes per iteration and device, the blocks at the peak, the top ops (needs
    ``profile_memory=True``)."""
    return _each(x, loading, lambda s: memory_of(s.trace))


def attention(
    x: Input, *, cudnn_version: str | None = None, loading: Loading | None = None
) -> AttentionResult | PerVariant[AttentionResult]:
    """Every attention call: implementation, shapes, kernels, time, FLOPs and % of peak, the
    scores written, why not a faster SDPA backend, the host cost of attention libraries.
    ``cudnn_version`` (traces do not record it) defaults to the capture manifest's.

    >>> a = attention("sample_traces/h200_default/sdpa_math.json.gz")
    >>> a.rows["implementation"].to_list(), a.rows["kernels_per_call"].to_list()
    (['sdpa_math'], [20.0])
    """
    return _each(x, loading, lambda s: _attention_of(s.trace, cudnn_version))


def _attention_of(trace: Trace, cudnn_version: str | None = None) -> AttentionResult:
    """`attention_of` with what the capture manifest beside the trace's file says that traces
    do not record: the cuDNN version (unless ``cudnn_version`` is given), the SDPA backend
    the capture forced with sdpa_kernel, and the call's per-sequence lengths and block
    sparsity (for exact FLOPs)."""
    path = trace.path
    manifest = capture_manifest(path) if len(trace.meta) == 1 and path.is_file() else None
    if manifest is None:
        return attention_of(trace, cudnn_version)
    found = manifest.environment.get("cudnn")
    entry = manifest.entry_for(path.name)
    member = entry[1].forced_backend if entry is not None else None
    facts = CaptureFacts.from_manifest(entry[1].attention) if entry is not None else None
    return attention_of(
        trace, cudnn_version or (str(found) if found else None), FORCED.get(member or ""), facts
    )


def critical_path(x: PathLike | Trace, *, loading: Loading | None = None) -> CriticalPath:
    """The chain of work that sets each iteration's length, by kind, with slack.

    >>> path = critical_path("sample_traces/h200_default/naive.json.gz")
    >>> path.iterations.height
    3
    """
    trace = one_trace(x, loading)
    path = replace(critical_path_of(trace), **verdict_fields(trace, _capture_median(trace)))
    return conformed(path)


def comms(
    x: PathLike | Trace, *, clock_align: bool = False, loading: Loading | None = None
) -> Comms:
    """Every collective call with its size and bus bandwidth, and per kind; ``clock_align``:
    on a trace of several ranks, each rank's times moved onto the lowest rank's clock by the
    audit's offsets first (the notes say so)."""
    trace = one_trace(x, loading)
    return conformed(aligned_comms(trace) if clock_align else comms_of(trace))


def explain(
    base: PathLike | Trace, new: PathLike | Trace, *, loading: Loading | None = None
) -> Explanation:
    """Why ``new``'s GPU time per iteration differs from ``base``'s, in parts that add up.

    >>> e = explain("sample_traces/h200_default/naive.json.gz",
    ...             "sample_traces/h200_default/naive_inplace.json.gz")
    >>> e.base, e.new, e.total_us_per_iter_delta < 0
    ('naive', 'naive_inplace', True)
    """
    found = explain_traces(
        one_trace(base, loading), one_trace(new, loading), _label(base), _label(new)
    )
    if found.memory is not None:
        blocks = conform(found.memory.blocks, "explain.memory_blocks")
        found = replace(found, memory=replace(found.memory, blocks=blocks))
    return conformed(found)


def diff(
    base: PathLike | Trace, new: PathLike | Trace, *, loading: Loading | None = None
) -> TraceDiff:
    """What changed from ``base`` to ``new``: figures, time per category, kernels."""
    found = diff_traces(
        one_trace(base, loading), one_trace(new, loading), _config(base), _config(new)
    )
    return conformed(found)


def _label(x: PathLike | Trace) -> str:
    return label_of(x.path if isinstance(x, Trace) else Path(x))


def _config(x: PathLike | Trace) -> dict[str, Any] | None:
    return None if isinstance(x, Trace) else capture_config(Path(x))


def variant_set(
    paths: PathLike | VariantSet | Sequence[PathLike],
    labels: Sequence[str] | None = None,
    loading: Loading | None = None,
) -> VariantSet:
    """The variants of ``paths`` (files or folders), restricted to the iterations that count."""
    loading = _loading(loading)
    if isinstance(paths, VariantSet):
        return loading.counting(paths)
    listed = [paths] if is_path(paths) else paths
    if not isinstance(listed, (list, tuple)) or not all(map(is_path, listed)):
        raise wrong_input(paths, "trace files or folders (str or pathlib.Path), a list of them, "
                          "or a VariantSet")  # fmt: skip
    return loading.variants(cast(Sequence[PathLike], listed), labels)


def compare(
    paths: PathLike | VariantSet | Sequence[PathLike],
    *,
    baseline: str | None = None,
    labels: Sequence[str] | None = None,
    loading: Loading | None = None,
) -> pl.DataFrame:
    """The comparison table: one row per variant, speed-ups against ``baseline``.

    >>> compare("sample_traces/h200_default")["variant"].head(3).to_list()
    ['naive', 'naive_inplace', 'sdpa_math']
    """
    return conform(comparison(variant_set(paths, labels, loading), baseline), "compare")


@dataclass(frozen=True, repr=False)
class ReportResult(display.Shown):
    """What `report` writes: the report, the where-time-goes sections (a single trace) and
    Holistic Trace Analysis's breakdown (with ``hta=True``)."""

    report: Report
    where: tuple[WhereTimeGoes, ...] = ()
    hta: pl.DataFrame | None = None
    # `attention` of each loaded variant (its section shows the traces that hold attention).
    attention: tuple[tuple[str | None, AttentionResult], ...] = ()

    def markdown(
        self, *, command: str = "", charts: dict[str, str] | None = None, full_names: bool = False
    ) -> str:
        """The report's markdown (``charts``: chart -> file name beside it)."""
        extra = tuple(map(where_time_goes_markdown, self.where))
        extra += (attention_section(self.attention),)
        extra += (hta_markdown(self.hta),) if self.hta is not None else ()
        return render_report(
            self.report,
            command=command,
            version=__version__,
            charts=charts or {},
            extra_sections=extra,
            full_names=full_names,
        )


# `report` writes markdown only (`compare` is its table for programs).
REPORT: Forms[ReportResult] = Forms(
    markdown=lambda result, **options: result.markdown(**options),
    # Its table (a notebook's ``to_frame()``) is the comparison, as `compare` writes it.
    tables={"": lambda result, **_: result.report.comparison},
    command="compare",
    refused={
        fmt: "report writes markdown; use `compare` for JSON or CSV"
        for fmt, for_people in FOR_PEOPLE.items()
        if not for_people
    },
)


def report(
    paths: PathLike | VariantSet | Sequence[PathLike],
    *,
    baseline: str | None = None,
    labels: Sequence[str] | None = None,
    expectations: Sequence[str | expect.Expectation] = (),
    hta: bool = False,
    loading: Loading | None = None,
) -> ReportResult:
    """The report comparing the variants of ``paths``; in Jupyter it shows as markdown."""
    if hta:
        require_hta()  # before the slow part, not after it
    guesses = [expect.parse(e) if isinstance(e, str) else e for e in expectations]
    variants = variant_set(paths, labels, loading)
    built = build_report(variants, baseline, guesses)
    breakdown = hta_breakdown(variants) if hta else None
    attention_of_each = tuple(
        (v.label, _attention_of(v.trace)) for v in variants.loaded if v.trace is not None
    )
    return ReportResult(built, where_time_goes_of(variants), breakdown, attention_of_each)


def cold(
    x: PathLike | Trace, *, baseline: str | None = None, loading: Loading | None = None
) -> ColdSet:
    """The first call against the median steady call, by cause and operator; on a capture
    folder per variant, with the calls to break even."""
    loading = _loading(loading)
    if isinstance(x, Trace):
        known = capture_entry(x.path) or Variant(label_of(x.path), x.path)
        variant = replace(known, trace=counted(x, loading.selection))
        result = cold_set([variant], baseline, manifest=capture_manifest(x.path), single=True)
        return conformed(_some_calls(result, x.path))
    path = as_path(x, ONE_TRACE)
    found = resolve(path)
    if found.kind is not InputKind.TRACE:
        loaded = loading.variants([found])
        manifest = loaded.manifests[0] if loaded.manifests else None
        return conformed(_some_calls(cold_set(loaded.variants, baseline, manifest=manifest), path))
    variant = _beside_its_manifest(path, loading)
    result = cold_set([variant], baseline, manifest=capture_manifest(path), single=True)
    return conformed(_some_calls(result, path))


def _some_calls(result: ColdSet, path: Path) -> ColdSet:
    if not result.rows.height:
        reasons = "; ".join(n for n in result.summary["note"].drop_nulls().unique())
        # A single compile is still worth naming: what its cache events show.
        seen = result.summary.filter(pl.col("cache_state_source") == "trace")
        caches = "".join(
            f"; the trace's cache events show {state}" + (f" ({hits})" if hits else "")
            # the distinct cache states seen: a few rows, one clause each
            for state, hits in seen.select("cache_state", "cache_hits").unique().iter_rows()
        )
        raise AnalysisError(
            f"no first call to compare with steady calls ({reasons or 'no calls found'}{caches})",
            path,
            "Profile from before the first call and several calls after it, each in "
            "record_function('call<i>') (python -m capture --cold does), or in profiler steps.",
        )
    return result


def _beside_its_manifest(path: Path, loading: Loading) -> Variant:
    """The trace as a variant, with its entry in the capture manifest beside it if any."""
    known = capture_entry(path) or Variant(label_of(path), path)
    return replace(known, trace=loading.trace(path))


def annotate(
    x: PathLike | Trace,
    output: PathLike | None = None,
    *,
    force: bool = False,
    loading: Loading | None = None,
) -> Annotation:
    """What ``annotate`` writes into a trace: each GPU activity's figures, the copies' arrows,
    the counter tracks and the findings; with ``output`` (``.json`` or ``.json.gz``), the
    annotated copy is written there too (never over the input; an existing file only with
    ``force``).

    >>> annotate("sample_traces/h200_default/naive.json.gz").activities.height
    23
    """
    trace = one_trace(x, loading)
    if output is not None:
        _check_annotated_output(trace.path, Path(output), force)
    annotation = annotation_of(trace)
    if output is not None:
        write_annotated(
            trace.path, Path(output), activity_args(annotation), added_events(annotation)
        )
    return annotation


def _check_annotated_output(source: Path, output: Path, force: bool) -> None:
    if output.exists() and output.resolve() == source.resolve():
        raise UsageError(f"{output} is the trace itself", output, "Write the copy elsewhere.")
    if output.exists() and not force:
        raise UsageError(f"{output} exists", output, "Pass force=True to overwrite it.")


def ranks(
    folder: PathLike,
    *,
    straggler_pct: float = DEFAULT_STRAGGLER_PCT,
    align: str = ALIGN_ENDS,
    engine: str = ENGINE_LOCAL,
    address: str | None = None,
    workers: int | None = None,
    clock_align: bool = False,
    loading: Loading | None = None,
) -> RanksResult:
    """One row per rank of the job in ``folder``, the stragglers and collective skew;
    ``clock_align``: the ranks' clocks aligned with the audit's offsets (`audit`'s
    clock_skew) instead of ``align``'s, and the notes say so."""
    loading = _loading(loading)
    check_numbers(straggler_pct=straggler_pct, workers=workers)
    check_choice("align", align, ALIGNMENTS)
    check_choice("engine", engine, ENGINES)
    found = rank_folder(
        as_path(folder, "a folder of the ranks of one job (str or pathlib.Path)"),
        engine=engine,
        address=address,
        workers=workers,
        cache=loading.cache,
        cache_dir=loading.cache_dir,
        straggler_pct=straggler_pct,
        align=align,
        selection=loading.selection,
        clock_align=clock_align,
    )
    loading.audit_noted(Path(folder), list(found.audit_warnings))
    return conformed(found)


def sql(x: Input, query: str, *, loading: Loading | None = None) -> pl.DataFrame:
    """``query`` (Polars' SQL) over the trace's tables: ``gpu`` (every GPU activity, classified,
    with its launching op and op chain), ``kernels``, ``cpu_ops``, ``annotations``,
    ``runtime``, ``memory`` and ``iterations``; a folder of variants stacks each table with a
    leading ``variant`` column. ``schema("sql")`` lists their columns.

    >>> per_category = "SELECT category, count(*) AS n FROM kernels GROUP BY category"
    >>> sql("sample_traces/h200_default/naive.json.gz", per_category + " ORDER BY n DESC, category"
    ...     )["category"].to_list()
    ['gemm', 'softmax', 'elementwise', 'mask']
    """
    if not isinstance(query, str):
        raise wrong_input(query, "a query (str)")
    found = subjects(x, loading)
    stacks: dict[str, list[pl.DataFrame]] = {}
    for subject in found:
        for name, table in tables_for(subject.trace, query).items():
            rows = (
                table
                if subject.label is None
                else table.select(pl.lit(subject.label).alias(VARIANT), pl.all())
            )
            stacks.setdefault(name, []).append(rows)
    return run_query(query, {name: pl.concat(frames) for name, frames in stacks.items()})


def schema(command: str | None = None, *, table: str | None = None) -> pl.DataFrame:
    """The declared columns (name, dtype, unit) of ``command``'s tables (every command's
    when None; ``table``: one of them, by its --table or --by name): one row per column.

    >>> schema("idle", table="causes")["column"].to_list()
    ['cause', 'us_per_iter', 'gaps_per_iter', 'share_of_idle_pct']
    """
    chosen = tables_of(command) if command else list(TABLES.values())
    if table is not None:
        views = [t.view for t in chosen]
        check_choice("table", table, views)
        chosen = [t for t in chosen if t.view == table]
    return schema_rows(chosen)


# Each result's renderers, as its command writes it (Jupyter shows the markdown). Results a
# capture folder gives one per variant are rendered as a list of (label, result) pairs.
_LABELLED: dict[type, Forms[Any]] = {
    Summary: SUMMARIES,
    Audit: AUDIT,
    IdleResult: IDLE,
    Roofline: ROOFLINE,
    MemoryResult: MEMORY,
    StacksResult: STACKS,
    AttentionResult: ATTENTION,
}
_ONE: dict[type, Forms[Any]] = {
    CriticalPath: CRITICAL_PATH,
    Comms: COMMS,
    Explanation: EXPLAIN,
    TraceDiff: DIFF,
    ColdSet: COLD,
    RanksResult: RANKS,
    ReportResult: REPORT,
}


def _forms_of(result: object) -> Forms[Any] | None:
    """The forms of one result of ``result``'s type (None: a type with no tables)."""
    for kind in type(result).__mro__:
        if kind in _LABELLED:
            return _LABELLED[kind].each
        if kind in _ONE:
            return _ONE[kind]
    return None


def conformed(result: R) -> R:
    """``result`` with each of its table attributes as its command declares it."""
    forms = _forms_of(result)
    if forms is None or not forms.command:
        return result
    attributes = {view: a for view, a in forms.tables.items() if isinstance(a, str)}
    return replace(  # type: ignore[type-var]
        result,
        **{
            a: conform(getattr(result, a), table_name(forms.command, v))
            for v, a in attributes.items()
        },
    )


def _markdown(forms: Forms[Any]) -> Callable[[Any], str]:
    return lambda result: str(forms.render(result, MARKDOWN))


def _alone(forms: Forms[Any]) -> Callable[[Any], str]:
    """The markdown of one unlabelled result of a type rendered as labelled pairs."""
    return lambda result: str(forms.render([(None, result)], MARKDOWN))


def _frame(forms: Forms[Any], *, alone: bool) -> Callable[[Any, str | None], pl.DataFrame]:
    """A result's table ``table`` (None: the default) as a DataFrame."""
    return lambda result, table: forms.table(
        [(None, result)] if alone else result, **{forms.choose: table}
    )


display.MARKDOWN.update({kind: _markdown(forms) for kind, forms in _ONE.items()})
display.MARKDOWN.update({kind: _alone(forms) for kind, forms in _LABELLED.items()})
display.MARKDOWN[PerVariant] = lambda r: str(
    _LABELLED[type(r.results[0][1])].render(list(r.results), MARKDOWN)
)
display.FRAMES.update({kind: _frame(forms, alone=False) for kind, forms in _ONE.items()})
display.FRAMES.update({kind: _frame(forms, alone=True) for kind, forms in _LABELLED.items()})
display.FRAMES[PerVariant] = lambda r, table: _LABELLED[type(r.results[0][1])].table(
    list(r.results), **{_LABELLED[type(r.results[0][1])].choose: table}
)
