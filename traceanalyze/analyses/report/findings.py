"""The report's first section, *What the traces say*: findings drawn from evidence by rules
kept as data.

A rule (:class:`Rule`, one row of :data:`RULES`) has an id, the inputs it applies to (a set of
variants compared, a single trace, a folder of ranks, or any), an evidence function and the
command that shows the detail. The evidence function reads the report's results (comparison
rows, kernel, memory and cuDNN tables, the ranks result) and returns one :class:`Evidence` per
finding it supports, or none: a finding whose evidence the trace cannot support is not
written. Each evidence carries its figures (named values, never prose) and its weight, the
time per iteration it explains; findings are ranked by weight. The sentences live in
:mod:`traceanalyze.render.report.findings` (one template per rule id), so this module holds
no prose.

Adding a rule (its analysis's result a field of the report's ``VariantReport``):

1. write ``def _my_rule(report: Report) -> list[Evidence]`` returning the figures the sentence
   needs and ``weight_us`` (the µs per iteration the finding explains);
2. add ``Rule("my_rule", SCOPE, _my_rule, "traceanalyze my-command {path}")`` to ``RULES``;
3. add ``"my_rule": Sentence("... {figure} ...")`` to ``SENTENCES`` in render/report/findings.py.

A test checks that every rule has a sentence and that every figure a sentence names exists.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import polars as pl

from traceanalyze.analyses.between.critical_graph import KIND_ANNOTATION, KIND_GAP
from traceanalyze.analyses.between.critical_path import is_gpu_kind, path_shares
from traceanalyze.analyses.distributed.comms import busiest_collective
from traceanalyze.analyses.roofline.gemm_rules import ALIGNMENT, ARCHITECTURE, PRECISION
from traceanalyze.analyses.step.gaps import CAUSES
from traceanalyze.analyses.step.verdict import (
    COMMUNICATION_BOUND,
    CPU_BOUND,
    SYNC_BOUND,
)
from traceanalyze.analyses.variants.sameness import DIFFERENT
from traceanalyze.hardware.peaks import PEAKS
from traceanalyze.names import readable_names
from traceanalyze.trace import IterationSource

if TYPE_CHECKING:
    from traceanalyze.analyses.report.contents import Report, VariantReport

# Which inputs a rule applies to.
VARIANTS = "variants"  # two or more traces compared (speed-ups against a baseline)
SINGLE = "single"  # one trace (of one rank or of several)
RANKS = "ranks"  # a trace of two or more ranks
ANY = "any"

# At most this theoretical occupancy (half the warps), a variant's longest kernel is worth a
# sentence. (A kernel limited by the block count alone reaches 50% with one-warp blocks.)
LOW_OCCUPANCY_PCT = 50.0


@dataclass(frozen=True)
class OccupancyCause:
    """Why occupancy is low: the limiting resource and the footprint that says it was chosen."""

    limiter: str
    cause: str  # "design" or "accident"
    footprint: str = ""  # a kernel_table column that must reach ``at_least`` ("" for none)
    at_least: int = 0


# A kernel limited by a large register or shared-memory footprint keeps its tiles on chip
# (flash attention's trade); one limited by the per-SM block count launches blocks too small
# to fill the SM. A low occupancy that fits no row (a modest footprint) gets no sentence.
OCCUPANCY_CAUSES = (
    OccupancyCause("registers", "design", "registers_per_thread", 128),
    OccupancyCause("shared_memory", "design", "shared_memory_bytes", 48 * 1024),
    OccupancyCause("blocks", "accident"),
)
# Kernels whose occupancy says nothing of their speed: a collective runs one block per channel
# by design and waits on the link and the other ranks, not on warps.
NO_OCCUPANCY_CATEGORIES = ("communication",)
# A GEMM precision finding below this share of the GPU activity is noise.
MIN_FP32_SHARE_PCT = 1.0
# The op launching the most GPU time is named only when linked kernels cover this share.
MIN_LINKED_SHARE_PCT = 50.0
SDPA_MATH_OP = "aten::_scaled_dot_product_attention_math"
MIOPEN_OP = r"^aten::miopen_"
TOP_CATEGORIES = 3
# Idle time is worth a sentence from this share of the GPU span per iteration.
MIN_IDLE_PCT = 10.0
# Path kinds whose slack names no work to shorten: a record_function region's self time is
# Python between ops (no single item), a gap is waiting on neither side.
NO_SLACK_KINDS = (KIND_ANNOTATION, KIND_GAP)
# The memory wall is said when the largest peak increase is at least this many times the least.
MIN_MEMORY_RATIO = 2.0
IDLE_MEANINGS = {c.cause: c.meaning for c in CAUSES}
# What to change, by verdict, where it is not a faster kernel (a GPU-bound step's advice is
# the kernel and roofline findings').
ADVICE: dict[str, str] = {
    CPU_BOUND: "a faster kernel will not help, less CPU time between GPU work will (fewer, "
    "larger ops; CUDA graphs or torch.compile to cut launches)",
    SYNC_BOUND: "a faster kernel will not help, fewer blocking synchronisations will (the "
    "`idle` command's syncs table names the ops: `.item()`, `.cpu()`, `nonzero`)",
    COMMUNICATION_BOUND: "a faster kernel helps only the compute part; overlapping the "
    "collectives with compute, or fewer or smaller ones, shortens the step",
}
OCCUPANCY_ITEMS = 4  # variants named in one occupancy finding
# Verdicts whose critical path the CPU items shorten.
HOST_BOUNDS = (CPU_BOUND, SYNC_BOUND)
# A first call this many times the steady median is a one-off (cuDNN plan building).
ONE_OFF_RATIO = 10.0
# The noise floor: a finding about a time under this share of its step is not written.
MIN_STEP_PCT = 1.0
# Kernel names in sentences: readable forms, cut at this many characters.
NAME_WIDTH = 80


@dataclass(frozen=True)
class ByDesign:
    """Kernels known to trade occupancy for reuse: a low occupancy is their design, not a
    fault, where a large footprint (registers or shared memory) limits it. Matched by
    category and, where given, a name pattern."""

    what: str
    category: str
    pattern: str | None = None


# Only kernels known to keep tiles on chip at the cost of occupancy: fused attention (flash,
# memory-efficient, cuDNN, flex, paged) keeps Q, K and V tiles in registers and shared memory.
# Never a GEMM: cuBLAS picks its tiles for the shape, and a GEMM's shape findings speak for it.
OCCUPANCY_BY_DESIGN: tuple[ByDesign, ...] = (
    ByDesign("fused attention, which keeps its Q, K and V tiles on chip", "fused_attention"),
)


@dataclass(frozen=True)
class Evidence:
    """The figures one finding states and the time per iteration it explains.

    ``step_pct`` is the share of its step that the time the finding is about holds (a copy's
    time, a kernel's, the slack an item would free), where the finding is about such a time:
    under :data:`MIN_STEP_PCT` the finding is noise and is not written. None for findings
    about no one time (a verdict, a ranking, memory)."""

    weight_us: float
    figures: Mapping[str, Any]
    path: str = ""  # the trace or folder its command runs on
    step_pct: float | None = None


@dataclass(frozen=True)
class Rule:
    id: str
    scope: str  # VARIANTS | SINGLE | RANKS | ANY
    evidence: Callable[[Report], list[Evidence]]
    command: str  # with {path}


@dataclass(frozen=True)
class Finding:
    rule: str
    weight_us: float
    figures: Mapping[str, Any] = field(default_factory=dict)
    command: str = ""


# ---------------------------------------------------------------------------------------------
# small readers of the report's results


def _loaded(report: Report) -> list[VariantReport]:
    return [v for v in report.variants if v.status == "ok" and v.summary]


def _rows(report: Report) -> pl.DataFrame:
    return report.comparison.filter(
        (pl.col("status") == "ok") & pl.col("gpu_busy_us_per_iter").is_not_null()
    )


def _row(report: Report, label: str) -> dict[str, Any]:
    return _rows(report).filter(pl.col("variant") == label).row(0, named=True)


def _path(variant: VariantReport) -> str:
    return variant.path or variant.label


def _folder(report: Report) -> str:
    return " ".join(report.sources) or "PATH"


def _step_pct(variant: VariantReport, us: float | None) -> float | None:
    """``us`` as a share of the variant's step (its wall time per iteration)."""
    step = variant.summary.get("wall_us_per_iter")
    return None if us is None or not step else us / step * 100


def _largest(shares: Sequence[float | None]) -> float | None:
    known = [share for share in shares if share is not None]
    return max(known) if known else None


def sentence_name(name: str) -> str:
    """A kernel's name as sentences quote it: its readable form, at most NAME_WIDTH long."""
    return str(readable_names(pl.Series([name]), width=NAME_WIDTH)[0])


# ---------------------------------------------------------------------------------------------
# rules over a set of variants


def ranking(report: Report) -> list[Evidence]:
    """Fastest on the GPU and on wall time against the baseline; the CPU-bound ones named."""
    rows = _rows(report).filter(pl.col("speedup").is_not_null())
    if rows.height < 2 or report.baseline is None:
        return []
    gpu = rows.sort("gpu_busy_us_per_iter").row(0, named=True)
    wall = rows.filter(pl.col("speedup_wall").is_not_null()).sort("speedup_wall", descending=True)
    base = _row(report, report.baseline)
    figures: dict[str, Any] = {
        "baseline": report.baseline,
        "baseline_busy_us": base["gpu_busy_us_per_iter"],
        "fastest": gpu["variant"],
        "fastest_busy_us": gpu["gpu_busy_us_per_iter"],
        "fastest_speedup": gpu["speedup"],
        "cpu_bound": tuple(rows.filter(pl.col("bound") == CPU_BOUND)["variant"].to_list()),
    }
    if wall.height:
        top = wall.row(0, named=True)
        figures |= {
            "fastest_wall": top["variant"],
            "fastest_wall_speedup": top["speedup_wall"],
            "wall_source": top["speedup_wall_source"],
        }
    weight = base["gpu_busy_us_per_iter"] - gpu["gpu_busy_us_per_iter"]
    return [Evidence(weight, figures, _folder(report))]


def _actionable_copies(variant: VariantReport) -> pl.DataFrame:
    return variant.memory.filter(
        (pl.col("count_per_iter") > 0) & pl.col("actionable") & (pl.col("kind") == "memcpy")
    )


def _kernel_set(variant: VariantReport) -> pl.DataFrame:
    """The kernels a variant runs per iteration: names and counts, in one order."""
    return (
        variant.kernels.filter((pl.col("kind") == "kernel") & (pl.col("count_per_iter") > 0))
        .select("name", "count_per_iter")
        .sort("name", "count_per_iter")
    )


def _twin(report: Report, variant: VariantReport) -> dict[str, Any] | None:
    """The variant that runs the same kernels as ``variant`` (the same names, as many of each)
    with fewer copies (the in-place form of an out-of-place op), if one was captured. The same
    kernel count alone is no evidence: unrelated traces can share it."""
    row = _row(report, variant.label)
    kernels = _kernel_set(variant)
    fewer = set(_rows(report).filter(pl.col("memcpy_per_iter") < row["memcpy_per_iter"])["variant"])
    same = [v.label for v in _loaded(report) if v.label in fewer and _kernel_set(v).equals(kernels)]
    twins = _rows(report).filter(pl.col("variant").is_in(same))
    return twins.sort("gpu_busy_us_per_iter").row(0, named=True) if twins.height else None


def copy_removed(report: Report) -> list[Evidence]:
    """A variant that removes another's avoidable copy, with the copy's chain and the speed-up."""
    found = []
    for variant in _loaded(report):  # a handful of variants, not trace rows
        copies = _actionable_copies(variant)
        twin = _twin(report, variant) if copies.height else None
        if twin is None:
            continue
        copy = copies.row(0, named=True)
        busy = variant.row["gpu_busy_us_per_iter"]
        figures = {
            "variant": twin["variant"],
            "twin": variant.label,
            "activity": copy["name"],
            "chain": copy["chain"].removesuffix(f" -> {copy['name']}"),
            "copies_per_iter": copy["count_per_iter"],
            "copy_us": copy["us_per_iter"],
            # Exact (a per-call figure is a mean); unknown where the trace gives no bytes.
            "bytes_per_iter": None if copy["bytes_per_call"] is None else copy["bytes_per_iter"],
            "advice": copy["advice"],
            "speedup": busy / twin["gpu_busy_us_per_iter"],
        }
        saved = busy - twin["gpu_busy_us_per_iter"]
        found.append(Evidence(saved, figures, _path(variant), _step_pct(variant, saved)))
    return found


def _fp32_gemms(variant: VariantReport) -> pl.DataFrame:
    return variant.kernels.filter(
        (pl.col("gemm_precision") == "fp32-cuda-cores") & (pl.col("us_per_iter") > 0)
    )


def slowest(report: Report) -> list[Evidence]:
    """What makes the slowest variant slow: more kernels than the fastest, fp32 GEMMs."""
    rows = _rows(report).filter(pl.col("speedup").is_not_null()).sort("gpu_busy_us_per_iter")
    if rows.height < 2:
        return []
    fast, slow = rows.row(0, named=True), rows.row(-1, named=True)
    variant = next(v for v in _loaded(report) if v.label == slow["variant"])
    fp32 = _fp32_gemms(variant)
    if slow["kernels_per_iter"] <= fast["kernels_per_iter"] and not fp32.height:
        return []  # nothing in the evidence says why
    own = slow["variant"] == report.baseline  # no speed-up of the baseline over itself
    figures: dict[str, Any] = {
        "variant": slow["variant"],
        "baseline": None if own else report.baseline,
        "speedup": None if own else slow["speedup"],
        "busy_us": slow["gpu_busy_us_per_iter"],
        "kernels": slow["kernels_per_iter"],
        "fastest": fast["variant"],
        "fastest_kernels": fast["kernels_per_iter"],
    }
    if fp32.height:
        figures |= {
            "fp32_gemms": float(fp32["count_per_iter"].sum()),
            "fp32_us": float(fp32["us_per_iter"].sum()),
            "fp32_pct": float(fp32["share_of_gpu_activity_pct"].sum()),
        }
    if variant.sdpa_math and fp32.height:  # the upcast is told only beside its fp32 GEMMs
        figures["upcast_op"] = SDPA_MATH_OP
    weight = slow["gpu_busy_us_per_iter"] - fast["gpu_busy_us_per_iter"]
    return [Evidence(weight, figures, _path(variant))]


# ---------------------------------------------------------------------------------------------
# rules for any input


def copies(report: Report) -> list[Evidence]:
    """Avoidable copies not already told as removed by a twin variant, with cause and fix."""
    told = {e.figures["twin"] for e in copy_removed(report)}
    several = len(_loaded(report)) > 1
    found = []
    for variant in _loaded(report):
        if variant.label in told:
            continue
        for copy in _actionable_copies(variant).head(1).to_dicts():
            figures = {
                "variant": variant.label if several else None,
                "chain": copy["chain"],
                "copies_per_iter": copy["count_per_iter"],
                "copy_us": copy["us_per_iter"],
                # Exact (a per-call figure is a mean); unknown where the trace gives no bytes.
                "bytes_per_iter": None
                if copy["bytes_per_call"] is None
                else copy["bytes_per_iter"],
                "advice": copy["advice"],
            }
            found.append(
                Evidence(
                    copy["us_per_iter"],
                    figures,
                    _path(variant),
                    _step_pct(variant, copy["us_per_iter"]),
                )
            )
    return found


def _top_kernel(variant: VariantReport) -> dict[str, Any] | None:
    return top_occupancy_kernel(variant.kernels)


def top_occupancy_kernel(kernels: pl.DataFrame) -> dict[str, Any] | None:
    """The longest kernel per iteration (``kernels`` as kernel_table sorts it) that has a
    theoretical occupancy and whose speed occupancy can explain."""
    top = kernels.filter(
        (pl.col("kind") == "kernel")
        & pl.col("theoretical_occupancy_pct").is_not_null()
        & (pl.col("us_per_iter") > 0)
        & ~pl.col("category").is_in(NO_OCCUPANCY_CATEGORIES)
    ).head(1)
    return top.row(0, named=True) if top.height else None


def by_design(kernel: Mapping[str, Any]) -> ByDesign | None:
    """The :data:`OCCUPANCY_BY_DESIGN` row a kernel (a kernel_table row) matches, if any."""
    for row in OCCUPANCY_BY_DESIGN:
        if kernel["category"] == row.category and (
            row.pattern is None or re.search(row.pattern, kernel["name"])
        ):
            return row
    return None


def _occupancy_cause(kernel: dict[str, Any]) -> str | None:
    """``design`` for a known occupancy-for-reuse kernel limited by its footprint, ``accident``
    for any kernel but a GEMM limited by blocks too small, else None (a GEMM, or a large
    footprint in a kernel not known to trade occupancy for reuse: no verdict)."""
    if kernel["category"] == "gemm":
        return None
    for row in OCCUPANCY_CAUSES:
        if kernel["occupancy_limiter"] == row.limiter and (
            not row.footprint or (kernel[row.footprint] or 0) >= row.at_least
        ):
            if row.cause == "design" and by_design(kernel) is None:
                return None
            return row.cause
    return None


def _occupancy(cause: str) -> Callable[[Report], list[Evidence]]:
    def evidence(report: Report) -> list[Evidence]:
        items, weight, paths, shares = [], 0.0, [], []
        several = len(_loaded(report)) > 1
        for variant in _loaded(report):
            kernel = _top_kernel(variant)
            if kernel is None or kernel["theoretical_occupancy_pct"] > LOW_OCCUPANCY_PCT:
                continue
            if _occupancy_cause(kernel) != cause:
                continue
            design = by_design(kernel)
            items.append(
                {
                    # A variant by its label, a single trace's kernel by its name.
                    "who": variant.label if several else sentence_name(kernel["name"]),
                    "design": design.what if design is not None else None,
                    "occupancy_pct": kernel["theoretical_occupancy_pct"],
                    "limiter": kernel["occupancy_limiter"].replace("_", " "),
                    # The footprint that binds: registers, or shared memory per block.
                    "registers": kernel["registers_per_thread"]
                    if kernel["occupancy_limiter"] != "shared_memory"
                    else None,
                    "shared_memory_bytes": kernel["shared_memory_bytes"] or 0,
                    "threads": kernel["threads_per_block"],
                    "reported_pct": kernel["achieved_occupancy_pct"],
                    "us_per_iter": kernel["us_per_iter"],
                }
            )
            weight += kernel["us_per_iter"]
            paths.append(_path(variant))
            shares.append(_step_pct(variant, kernel["us_per_iter"]))
        if not items:
            return []
        # The lowest first (the longest kernels among equals); the rest are counted.
        items.sort(key=lambda item: (item["occupancy_pct"], -item["us_per_iter"]))
        shown = tuple(items[:OCCUPANCY_ITEMS])
        more = len(items) - len(shown)
        # Low by design costs nothing to fix: it ranks last; by accident, the kernels' time.
        explained = weight if cause == "accident" else 0.0
        path = paths[0] if len(paths) == 1 else _folder(report)
        figures = {"items": shown, "more": more or None}
        return [Evidence(explained, figures, path, _largest(shares))]

    return evidence


def _one_off(op: dict[str, Any]) -> dict[str, Any]:
    """The first call's self time against the steady median, where the first is over
    :data:`ONE_OFF_RATIO` times the median: the mean per iteration then holds a one-off."""
    first, steady = op["self_us_first_in_trace"], op["self_us_steady_median"]
    if first is None or not steady or first < ONE_OFF_RATIO * steady:
        return {}
    return {"first_us": first, "steady_us": steady}


def cudnn_cpu(report: Report) -> list[Evidence]:
    """The CPU self time of the ops that call cuDNN (MIOpen) against the GPU time it saves."""
    users = [v for v in _loaded(report) if v.summary.get("cudnn_cpu_us_per_iter", 0) > 0]
    if not users:
        return []
    lead = min(users, key=lambda v: v.row.get("gpu_busy_us_per_iter") or float("inf"))
    ops = lead.cudnn.filter(pl.col("self_us_per_iter") > 0)
    rocm = report.dnn_library == "MIOpen" or ops["name"].str.contains(MIOPEN_OP).any()
    library = "MIOpen" if rocm else "cuDNN"
    figures: dict[str, Any] = {
        "variant": lead.label if len(_loaded(report)) > 1 else None,
        "library": library,
        "cpu_us": lead.summary["cudnn_cpu_us_per_iter"],
        "op": ops["name"].first(),  # the table is sorted by self time per iteration
        # With several ops, how many and the first one's part of the time.
        "ops": ops.height if ops.height > 1 else None,
        "op_us": ops["self_us_per_iter"].first(),
        **_one_off(ops.row(0, named=True)),
        "others": tuple(
            (v.label, v.summary["cudnn_cpu_us_per_iter"]) for v in users if v is not lead
        ),
    }
    others = _rows(report).filter(~pl.col("variant").is_in([v.label for v in users]))
    busy = lead.row.get("gpu_busy_us_per_iter")
    if others.height and busy is not None:
        runner = others.sort("gpu_busy_us_per_iter").row(0, named=True)
        if busy < runner["gpu_busy_us_per_iter"]:
            figures |= {
                "busy_us": busy,
                "runner": runner["variant"],
                "runner_busy_us": runner["gpu_busy_us_per_iter"],
                "lead_us": runner["gpu_busy_us_per_iter"] - busy,
            }
    compared = lead.label != report.baseline and lead.row.get("speedup_wall") is not None
    if lead.row.get("bound") == CPU_BOUND and compared:
        figures |= {
            "baseline": report.baseline,
            "speedup": lead.row["speedup"],
            "speedup_wall": lead.row["speedup_wall"],
        }
    return [Evidence(figures["cpu_us"], figures, _path(lead), _step_pct(lead, figures["cpu_us"]))]


# ---------------------------------------------------------------------------------------------
# rules for a single trace


def _single(report: Report) -> VariantReport | None:
    loaded = _loaded(report)
    return loaded[0] if len(loaded) == 1 else None


def top_categories(report: Report) -> list[Evidence]:
    """Where the GPU time goes: the largest categories."""
    variant = _single(report)
    if variant is None or not variant.categories.height:
        return []
    top = variant.categories.head(TOP_CATEGORIES)
    figures: dict[str, Any] = {
        "activity_us": variant.summary["gpu_activity_us_per_iter"],
        "items": tuple(
            {"category": c, "us": us, "pct": pct}
            for c, us, pct in top.select(
                "category", "us_per_iter", "share_of_gpu_activity_pct"
            ).rows()  # three rows of a result, for the sentence
        ),
        "workload": report.workload,
    }
    return [Evidence(variant.summary["gpu_activity_us_per_iter"], figures, _path(variant))]


def top_op(report: Report) -> list[Evidence]:
    """The op that launches the most GPU activity, each activity counted for its own op (not
    a kernel name's most frequent op: one GEMM kernel may come from several ops); only where
    linked activities cover :data:`MIN_LINKED_SHARE_PCT` of it."""
    variant = _single(report)
    if variant is None or not variant.launch_ops.height:
        return []
    ops = variant.launch_ops.filter(pl.col("launch_op").is_not_null())
    if not ops.height or ops["share_of_gpu_activity_pct"].sum() < MIN_LINKED_SHARE_PCT:
        return []
    op = ops.row(0, named=True)
    figures = {
        "top_op": op["launch_op"],
        "top_op_us": op["us_per_iter"],
        "top_op_pct": op["share_of_gpu_activity_pct"],
    }
    us = op["us_per_iter"]
    return [Evidence(us, figures, _path(variant), _step_pct(variant, us))]


def bound(report: Report) -> list[Evidence]:
    """The bound verdict with both sides of it; none where the trace cannot give one."""
    variant = _single(report)
    if variant is None:
        return []
    row = variant.row or {}
    verdict = row.get("bound") or variant.summary.get("bound")
    if not verdict or not variant.summary.get("gpu_busy_us_per_iter"):
        return []  # no GPU activity: nothing to say of what bounds it
    figures = variant.summary
    busy, wall = figures["gpu_busy_us_per_iter"], figures["wall_us_per_iter"]
    whole = figures["iteration_source"] == IterationSource.WHOLE_TRACE
    evidence = {
        "bound": verdict,
        "note": row.get("bound_note") or figures["bound_note"],
        "busy_us": busy,
        # A trace without CPU operators did not record them: no figure, not zero.
        "cpu_op_us": figures["cpu_op_us_per_iter"] if variant.has_cpu_ops else None,
        "wall_us": wall,
        "iterations": figures["iterations"],
        "whole_trace": True if whole else None,
        # Advice only where the wall time is the work's: a whole trace's wall time includes
        # waits outside it, which less CPU time does not shorten.
        "advice_text": None if whole else ADVICE.get(verdict),
    }
    weight = busy if verdict not in ADVICE else wall - busy
    return [Evidence(weight, evidence, _path(variant))]


def fp32_gemm(report: Report) -> list[Evidence]:
    """GEMMs on CUDA cores in fp32 where tensor cores could run them."""
    variant = _single(report)
    if variant is None:
        return []
    fp32 = _fp32_gemms(variant)
    if fp32["share_of_gpu_activity_pct"].sum() < MIN_FP32_SHARE_PCT:
        return []
    fp32_us = float(fp32["us_per_iter"].sum())
    figures = {
        "fp32_gemms": float(fp32["count_per_iter"].sum()),
        "fp32_us": fp32_us,
        "fp32_pct": float(fp32["share_of_gpu_activity_pct"].sum()),
        "upcast_op": SDPA_MATH_OP if variant.sdpa_math else None,
        "tensor_core_fix": _tensor_core_fix(variant),
        **_longest_fp32_shape(variant),
    }
    return [Evidence(fp32_us, figures, _path(variant), _step_pct(variant, fp32_us))]


def _tensor_core_fix(variant: VariantReport) -> str:
    """How fp32 GEMMs reach the tensor cores of the variant's GPU: TF32 or bf16 from Ampere
    on; fp16 only on a GPU whose peaks table has no TF32 and no bf16 (Volta, Turing)."""
    name = str(variant.row.get("gpu") or "")
    peak = next((p for p in PEAKS if name and re.search(p.name_pattern, name)), None)
    if peak is not None and peak.tf32 is None and peak.bf16 is None and peak.fp16:
        return (
            'fp16 inputs (`torch.autocast("cuda", dtype=torch.float16)`) run them on tensor '
            f"cores; the {peak.gpu} has none for TF32 or bf16"
        )
    return (
        "TF32 (`torch.backends.cuda.matmul.allow_tf32 = True`) or bf16 inputs run them on "
        "tensor cores"
    )


# Items in one GEMM finding (its op and shape rows, most time first); the rest are counted.
GEMM_ITEMS = 3


def _gemm_item(row: dict[str, Any], several: bool, label: str) -> dict[str, Any]:
    """One GEMM row's figures: its op, shape and kernel, and each cause with its evidence."""
    causes = set(row["causes"])
    narrow = ALIGNMENT in causes and row["kernel_align_elements"] is not None
    older = ARCHITECTURE in causes
    return {
        "variant": label if several else None,
        "op": row["op_name"],
        "shapes": row["shapes"],
        "dtype": row["dtype"],
        "kernel": sentence_name(row["name"]),
        "us": row["us_per_iter"],
        "pct": row["share_of_gpu_activity_pct"],
        "misaligned": tuple(
            (d["dim"], d["size"], d["multiple"], d["padded"]) for d in row["misaligned_dims"]
        )
        or None,
        "align": row["kernel_align_elements"] if narrow else None,
        # Narrow loads on a recorded shape whose N and K are aligned: a stride or an offset.
        "aligned_shape": True if narrow and row["dims_aligned"] else None,
        "kernel_sm": row["kernel_sm"] if older else None,
        "gpu_sm": row["gpu_sm"] if older else None,
        "fp32": True if PRECISION in causes else None,
    }


def gemm_shapes(report: Report) -> list[Evidence]:
    """GEMMs whose shape or kernel shows why they are slow: a leading dimension off its data
    type's multiple (with the padding that fixes it), a kernel loading under 16 bytes at a
    time (``align1``) or built for an older GPU (fp32 on the CUDA cores alone is the
    ``fp32_gemm`` finding's); each item over the noise floor."""
    several = len(_loaded(report)) > 1
    found = []
    for variant in _loaded(report):  # a handful of variants, not trace rows
        if not variant.gemms.height:
            continue
        shown = variant.gemms.filter(
            pl.col("causes").list.set_intersection([ALIGNMENT, ARCHITECTURE]).list.len() > 0
        )
        rows = [
            row
            for row in shown.to_dicts()  # the few GEMM rows with a cause
            if (_step_pct(variant, row["us_per_iter"]) or 0.0) >= MIN_STEP_PCT
        ]
        if not rows:
            continue
        items = tuple(_gemm_item(row, several, variant.label) for row in rows[:GEMM_ITEMS])
        weight = sum(row["us_per_iter"] for row in rows)
        figures = {"items": items, "more": len(rows) - len(items) or None}
        found.append(Evidence(weight, figures, _path(variant), _step_pct(variant, weight)))
    return found


def _longest_fp32_shape(variant: VariantReport) -> dict[str, Any]:
    """The op and recorded shapes of the fp32 CUDA-core GEMM with the most time (none where
    the shapes were not recorded)."""
    rows = (
        variant.gemms.filter(
            pl.col("causes").list.contains(PRECISION) & pl.col("shapes").is_not_null()
        )
        if variant.gemms.height
        else variant.gemms
    )
    if not rows.height:
        return {}
    top = rows.row(0, named=True)  # gemm_table: most time first
    return {"op": top["op_name"], "shapes": top["shapes"]}


def ranks(report: Report) -> list[Evidence]:
    """For a folder of ranks: the slowest rank against the median and the stragglers."""
    found = []
    paths = {v.label: _path(v) for v in report.variants}
    for label, result in report.ranks:
        table = result.ranks.filter(pl.col("wall_us_per_iter").is_not_null())
        if table.height < 2 or result.median_wall_us_per_iter is None:
            continue
        slow = table.sort("wall_us_per_iter", descending=True).row(0, named=True)
        figures = {
            "ranks": table.height,
            "slowest_rank": slow["rank"],
            "slowest_wall_us": slow["wall_us_per_iter"],
            "over_median_pct": slow["wall_pct_over_median"],
            "median_wall_us": result.median_wall_us_per_iter,
            "straggler_pct": result.straggler_pct,
            "stragglers": tuple(str(r) for r in result.stragglers) or None,
        }
        weight = slow["wall_us_per_iter"] - result.median_wall_us_per_iter
        found.append(Evidence(weight, figures, paths.get(label, label)))
    return found


# ---------------------------------------------------------------------------------------------
# rules for the analyses between kernels: memory, idle, critical path, collectives


def _with_memory(report: Report) -> pl.DataFrame:
    return _rows(report).filter(pl.col("peak_increase_bytes_per_iter").is_not_null())


def memory_wall(report: Report) -> list[Evidence]:
    """The variants' GPU peak increase per iteration: the most against the least, when one
    needs at least :data:`MIN_MEMORY_RATIO` times the other's."""
    # Memory is compared only between variants of one workload (compare's same_workload).
    comparable = pl.col("same_workload").ne_missing(DIFFERENT)
    rows = (
        _with_memory(report)
        .filter(comparable)
        .sort(["peak_increase_bytes_per_iter", "variant"], descending=[True, False])
    )
    if rows.height < 2:
        return []
    top, low = rows.row(0, named=True), rows.row(-1, named=True)
    most, least = top["peak_increase_bytes_per_iter"], low["peak_increase_bytes_per_iter"]
    if most < MIN_MEMORY_RATIO * max(least, 1):
        return []
    figures = {
        "variant": top["variant"],
        "peak_bytes": most,
        "block_bytes": top["largest_block_bytes"],
        "block_op": top["largest_block_op"],
        "least": low["variant"],
        "least_bytes": least,
        "ratio": most / least if least > 0 else None,
    }
    return [Evidence(0.0, figures, _folder(report))]  # memory explains no time


def memory_peak(report: Report) -> list[Evidence]:
    """A single trace's GPU peak increase per iteration and its largest block."""
    variant = _single(report)
    row = variant.row if variant is not None else {}
    if variant is None or row.get("peak_increase_bytes_per_iter") is None:
        return []
    figures = {
        "peak_bytes": row["peak_increase_bytes_per_iter"],
        "block_bytes": row["largest_block_bytes"],
        "block_op": row["largest_block_op"],
    }
    return [Evidence(0.0, figures, _path(variant))]


def idle(report: Report) -> list[Evidence]:
    """The GPU's idle share of the step's wall time and the largest cause, when idle is a
    meaningful share (:data:`MIN_IDLE_PCT`)."""
    variant = _single(report)
    if variant is None or variant.idle is None:
        return []
    span = variant.summary.get("wall_us_per_iter") or 0.0
    idle_us = variant.idle.gpu_idle_us_per_iter
    if span <= 0 or idle_us / span * 100 < MIN_IDLE_PCT:
        return []
    cause = variant.idle.causes.sort(["us_per_iter", "cause"], descending=[True, False]).row(
        0, named=True
    )
    figures = {
        "idle_us": idle_us,
        "idle_pct": idle_us / span * 100,
        "span_us": span,
        "cause": cause["cause"],
        "cause_us": cause["us_per_iter"],
        "cause_pct": cause["share_of_idle_pct"],
        "gaps": cause["gaps_per_iter"],
        "meaning": IDLE_MEANINGS[cause["cause"]],
    }
    return [Evidence(idle_us, figures, _path(variant))]


def _path_figures(variant: VariantReport, cpu_items: bool = False) -> dict[str, Any] | None:
    """The variant's critical path: length, GPU and CPU shares, the step model's verdict
    (``bound``: the path's shares describe it, they do not judge it again) and the work item
    (a CPU one with ``cpu_items``) with the most slack; None without a path or without GPU
    work (then the path says nothing of what bounds the step)."""
    path = variant.critical_path
    if path is None or path.length_us_per_iter <= 0:
        return None
    if not variant.summary.get("gpu_activity_us_per_iter"):
        return None
    gpu_pct, cpu_pct = path_shares(path)
    figures: dict[str, Any] = {
        "length_us": path.length_us_per_iter,
        "gpu_pct": gpu_pct,
        "cpu_pct": cpu_pct,
        "bound": (variant.row or {}).get("bound") or variant.summary.get("bound"),
    }
    work = ~pl.col("kind").is_in(NO_SLACK_KINDS) & (pl.col("slack_us_per_iter") > 0)
    if cpu_items:
        work &= ~is_gpu_kind(pl.col("kind"))
    items = path.items.filter(work).sort(["slack_us_per_iter", "name"], descending=[True, False])
    if items.height:
        top = items.row(0, named=True)
        figures |= {
            "item": sentence_name(top["name"]) if is_gpu_name(top["kind"]) else top["name"],
            "item_kind": top["kind"],
            "slack_us": top["slack_us_per_iter"],
        }
    return figures


def is_gpu_name(kind: str) -> bool:
    """Whether a path item of ``kind`` is named by a GPU activity (a kernel's long name)."""
    return bool(pl.select(is_gpu_kind(pl.lit(kind))).item())


def critical(report: Report) -> list[Evidence]:
    """The critical path's make-up and the work item whose removal would shorten it most."""
    variant = _single(report)
    figures = _path_figures(variant) if variant is not None else None
    if variant is None or figures is None:
        return []
    slack = figures.get("slack_us")
    if slack is not None and (_step_pct(variant, slack) or 0.0) < MIN_STEP_PCT:
        # The item frees too little to name: the path's split is still worth its sentence.
        figures = {k: v for k, v in figures.items() if k not in ("item", "item_kind", "slack_us")}
    return [Evidence(figures.get("slack_us") or 0.0, figures, _path(variant))]


def critical_cpu(report: Report) -> list[Evidence]:
    """Among variants, those the step model calls CPU- or sync-bound, each with the CPU item on
    its critical path that would shorten it most (for a GPU-bound variant the item is its
    longest kernel, which the kernel findings already name)."""
    items, paths = [], []
    for variant in _loaded(report):
        figures = _path_figures(variant, cpu_items=True)
        if figures is None or figures["bound"] not in HOST_BOUNDS or "item" not in figures:
            continue
        if (_step_pct(variant, figures["slack_us"]) or 0.0) < MIN_STEP_PCT:
            continue  # the item frees too little of the step to name
        items.append({"who": variant.label} | figures)
        paths.append(_path(variant))
    if not items:
        return []
    items.sort(key=lambda item: (-item["slack_us"], item["who"]))
    shown = tuple(items[:OCCUPANCY_ITEMS])
    more = len(items) - len(shown)
    weight = sum(item["slack_us"] for item in items)
    path = paths[0] if len(paths) == 1 else _folder(report)
    return [Evidence(weight, {"items": shown, "more": more or None}, path)]


def collectives(report: Report) -> list[Evidence]:
    """The collectives' count and time per iteration, and the busiest kind's median bus
    bandwidth against the link's peak."""
    found = []
    several = len(_loaded(report)) > 1
    for variant in _loaded(report):
        result = variant.comms
        if result is None or not result.calls.height:
            continue
        total_us, top = busiest_collective(result)
        peak, busbw = top["peak"], top["busbw"]
        figures = {
            "variant": variant.label if several else None,
            "count": float(result.by_kind["count_per_iter"].sum()),
            "total_us": total_us,
            "collective": top["collective"],
            "top_us": top["us_per_iter"],
            "busbw": busbw,
            "peak": peak,
            "busbw_pct": busbw / peak * 100 if busbw is not None and peak else None,
        }
        found.append(Evidence(total_us, figures, _path(variant), _step_pct(variant, total_us)))
    return found


RULES: tuple[Rule, ...] = (
    Rule("ranking", VARIANTS, ranking, "traceanalyze compare {path}"),
    Rule("copy_removed", VARIANTS, copy_removed, "traceanalyze memcpy {path}"),
    Rule("slowest", VARIANTS, slowest, "traceanalyze kernels {path}"),
    Rule("top_categories", SINGLE, top_categories, "traceanalyze summary {path}"),
    Rule("top_op", SINGLE, top_op, "traceanalyze kernels {path} --by op"),
    Rule("bound", SINGLE, bound, "traceanalyze summary {path}"),
    Rule("fp32_gemm", SINGLE, fp32_gemm, "traceanalyze kernels {path}"),
    Rule("gemm_shapes", ANY, gemm_shapes, "traceanalyze roofline {path}"),
    Rule("copies", ANY, copies, "traceanalyze memcpy {path}"),
    Rule("cudnn_cpu", ANY, cudnn_cpu, "traceanalyze cudnn {path}"),
    Rule("occupancy_accident", ANY, _occupancy("accident"), "traceanalyze occupancy {path}"),
    Rule("occupancy_design", ANY, _occupancy("design"), "traceanalyze occupancy {path}"),
    Rule("ranks", RANKS, ranks, "traceanalyze ranks {path}"),
    Rule("idle", SINGLE, idle, "traceanalyze idle {path}"),
    Rule("critical_path", SINGLE, critical, "traceanalyze critical-path {path}"),
    Rule("critical_cpu", VARIANTS, critical_cpu, "traceanalyze critical-path {path}"),
    Rule("collectives", ANY, collectives, "traceanalyze comms {path}"),
    Rule("memory_wall", VARIANTS, memory_wall, "traceanalyze compare {path}"),
    Rule("memory_peak", SINGLE, memory_peak, "traceanalyze memory {path}"),
)
MAX_FINDINGS = 8


def applies(rule: Rule, report: Report) -> bool:
    loaded = len(_loaded(report))
    return {
        VARIANTS: loaded > 1,
        SINGLE: loaded == 1,
        RANKS: bool(report.ranks),
        ANY: loaded > 0,
    }[rule.scope]


def findings(report: Report, rules: Sequence[Rule] = RULES) -> tuple[Finding, ...]:
    """Every finding the rules draw from ``report``, the most time explained first (ties keep
    the rules' order), at most :data:`MAX_FINDINGS`; none about a time under
    :data:`MIN_STEP_PCT` of its step (the noise floor)."""
    found = [
        Finding(rule.id, e.weight_us, e.figures, rule.command.format(path=e.path))
        for rule in rules
        if applies(rule, report)
        for e in rule.evidence(report)
        if e.step_pct is None or e.step_pct >= MIN_STEP_PCT
    ]
    ranked = sorted(found, key=lambda f: -f.weight_us)  # stable: rule order breaks ties
    return tuple(ranked[:MAX_FINDINGS])
