"""Everything a variant report shows, computed once (rendering is separate and pure).

Every time in the report follows :mod:`traceanalyze.analyses.accounting`; every share names
its total (GPU activity time, CPU operator time or wall time).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import polars as pl

from traceanalyze.analyses.activities import activities, in_iterations, iteration_count
from traceanalyze.analyses.audit import audit
from traceanalyze.analyses.audit.figures import COMMAND_FIGURES
from traceanalyze.analyses.between.critical_path import CriticalPath, critical_path
from traceanalyze.analyses.between.idle import IdleResult, idle_breakdown
from traceanalyze.analyses.calls import CALL_REGION
from traceanalyze.analyses.cold.variants import ColdSet, cold_set
from traceanalyze.analyses.cudnn import cudnn_table
from traceanalyze.analyses.distributed.comms import Comms, comms
from traceanalyze.analyses.distributed.ranks import RanksResult, rank_work, ranks_analysis
from traceanalyze.analyses.info import ROCM_VERSION_KEYS
from traceanalyze.analyses.kernels import kernel_table, op_table
from traceanalyze.analyses.memcpy import memory_traffic
from traceanalyze.analyses.memory.usage import MemoryResult, memory
from traceanalyze.analyses.report.expectations import Expectation, check
from traceanalyze.analyses.report.findings import (
    SDPA_MATH_OP,
    Finding,
    findings,
)
from traceanalyze.analyses.roofline.gemm import gemm_table
from traceanalyze.analyses.roofline.model import Roofline, roofline
from traceanalyze.analyses.step.verdict import Verdict
from traceanalyze.analyses.summary import summary, summary_with_wall
from traceanalyze.analyses.variants.compare import baseline_label, comparison, steady_median_ms
from traceanalyze.analyses.variants.explain import Explanation, explain
from traceanalyze.hardware.devices import AMD_NAME
from traceanalyze.link import nearest_ancestor
from traceanalyze.load.variants import Variant, VariantSet
from traceanalyze.names import readable_names
from traceanalyze.trace import Trace

TOP_KERNELS = 8
ENVIRONMENT_KEYS = (
    "gpu", "compute_capability", "gfx_arch", "driver", "cuda", "hip", "cudnn", "torch", "triton",
    "python",
)  # fmt: skip
VERSION_KEYS = ("cuda_runtime_version", "cuda_driver_version", "hip_runtime_version")


@dataclass(frozen=True)
class VariantReport:
    label: str
    status: str
    reason: str | None
    summary: Mapping[str, Any] = field(default_factory=dict)
    row: dict[str, Any] = field(default_factory=dict)  # the variant's comparison row
    categories: pl.DataFrame = field(default_factory=pl.DataFrame)
    top_kernels: pl.DataFrame = field(default_factory=pl.DataFrame)
    memory: pl.DataFrame = field(default_factory=pl.DataFrame)
    cudnn: pl.DataFrame = field(default_factory=pl.DataFrame)
    warm_up_calls: int | None = None  # calls run before profiling (the manifest's)
    library: str = "cuDNN"  # the DNN library its ops call (MIOpen on ROCm)
    explained: Explanation | None = None  # against the baseline (None for the baseline)
    roofline: Roofline | None = None
    allocations: MemoryResult | None = None  # `memory`: the variant's [memory] events
    # Where the time goes between kernels (issue 20): the critical path and the collectives.
    critical_path: CriticalPath | None = None
    comms: Comms | None = None
    idle: IdleResult | None = None  # `idle`: the GPU's gaps by cause
    path: str | None = None  # the trace (or folder of ranks), as given
    kernels: pl.DataFrame = field(default_factory=pl.DataFrame)  # every kernel (top_kernels: head)
    sdpa_math: bool = False  # the SDPA math backend ran (it upcasts to float32)
    has_cpu_ops: bool = True  # the trace recorded CPU operators (a GPU-only trace does not)
    launch_ops: pl.DataFrame = field(default_factory=pl.DataFrame)  # GPU activity per op
    gemms: pl.DataFrame = field(default_factory=pl.DataFrame)  # gemm_table(): shape findings


@dataclass(frozen=True)
class Report:
    title: str
    header: dict[str, Any]
    comparison: pl.DataFrame
    baseline: str | None
    variants: tuple[VariantReport, ...]
    category_us: pl.DataFrame  # variant, category, us_per_iter: for the chart
    cold: ColdSet | None = None  # for a cold-start capture: first call against steady calls
    ranks: tuple[tuple[str, RanksResult], ...] = ()  # (variant, result) per folder of ranks
    sources: tuple[str, ...] = ()  # the paths given
    workload: str | None = None  # TRAINING or INFERENCE, for a single trace
    # *What the traces say*: ranked findings (analyses/report/findings.py)
    findings: tuple[Finding, ...] = ()
    guesses: pl.DataFrame | None = None  # `--expect`: variant, expectation, measured, held
    # The DNN library the traces' ops call: cuDNN, MIOpen on ROCm, both for a mixed set.
    dnn_library: str = "cuDNN"
    # Each loaded variant's GPU model(s) as the trace names them, for a set that mixes devices.
    variant_gpus: dict[str, str] = field(default_factory=dict)
    # The audit's warnings about figures the report prints, each "`variant`: ...", and the
    # command that details them: the first line of *What the traces say* (issue 40).
    audit_lines: tuple[str, ...] = ()
    audit_command: str = ""


def build_report(
    variant_set: VariantSet,
    baseline: str | None = None,
    expectations: Sequence[Expectation] = (),
) -> Report:
    """Everything the report shows; ``expectations`` (as for `check`) add its guesses."""
    table = comparison(variant_set, baseline)
    rows = {row["variant"]: row for row in table.to_dicts()}
    reports = tuple(_variant_report(v, rows[v.label]) for v in variant_set.variants)
    reports = _with_performance(reports, variant_set, baseline_label(table, baseline))
    long = [
        r.categories.select(pl.lit(r.label).alias("variant"), "category", "us_per_iter")
        for r in reports
        if r.categories.height
    ]
    category_us = (
        pl.concat(long)
        if long
        else pl.DataFrame(
            schema={"variant": pl.String, "category": pl.String, "us_per_iter": pl.Float64}
        )
    )
    built = Report(
        title=title(variant_set),
        header=header(variant_set),
        comparison=table,
        baseline=baseline_label(table, baseline),
        variants=reports,
        category_us=category_us,
        cold=cold_part(variant_set, baseline),
        ranks=rank_results(variant_set),
        sources=tuple(str(p) for p in variant_set.sources),
        workload=workload(variant_set),
        guesses=guesses(variant_set, expectations) if expectations else None,
        dnn_library=dnn_library(variant_set),
        variant_gpus=variant_gpus(variant_set),
        audit_lines=audit_lines(variant_set),
        audit_command=f"traceanalyze audit {' '.join(built_sources(variant_set))}",
    )
    return replace(built, findings=findings(built))


def audit_lines(variant_set: VariantSet) -> tuple[str, ...]:
    """The audit's warnings about the figures the report prints, per loaded variant."""
    return tuple(
        f"`{v.label}`: {key}: {text}"
        for v in variant_set.loaded
        if v.trace is not None
        for key, text in audit(v.trace).warnings_for(COMMAND_FIGURES["report"]).items()
    )


def built_sources(variant_set: VariantSet) -> list[str]:
    return [str(p) for p in variant_set.sources]


def guesses(variant_set: VariantSet, expectations: Sequence[Expectation]) -> pl.DataFrame:
    """`check` of each loaded variant, broken first: the article's "guess, then verify"."""
    frames = [
        check(expectations, summary_with_wall(v.trace, steady_median_ms(v))).select(
            pl.lit(v.label).alias("variant"), pl.all()
        )
        for v in variant_set.loaded
        if v.trace is not None
    ]
    table = pl.concat(frames)
    order = pl.int_range(pl.len())  # the user's order within held and broken
    return table.with_columns(_order=order).sort(["held", "_order"]).drop("_order")


def rank_results(variant_set: VariantSet) -> tuple[tuple[str, RanksResult], ...]:
    """The `ranks` analysis of each variant that is a folder of two or more ranks."""
    return tuple(
        (v.label, ranks_analysis([rank_work(v.trace)]))
        for v in variant_set.loaded
        if v.trace is not None and len(v.trace.meta) > 1
    )


def cold_part(variant_set: VariantSet, baseline: str | None) -> ColdSet | None:
    """The cold-start comparison, for a capture whose traces start before the first call
    (the manifest says so, or the traces hold ``call<i>`` regions); None otherwise."""
    cold = any(
        v.manifest_entry is not None and v.manifest_entry.cold is not None
        for v in variant_set.variants
    ) or any(
        v.trace.cpu["name"].str.contains(CALL_REGION).any()
        for v in variant_set.loaded
        if v.trace is not None
    )
    if not cold:
        return None
    # Each call's shape is in the manifest; with several manifests it is read from the traces.
    manifest = variant_set.manifests[0] if len(variant_set.manifests) == 1 else None
    return cold_set(variant_set.variants, baseline, manifest=manifest)


# CPU ops or annotations that say a trace profiles attention.
ATTENTION_SIGNS = (
    r"(?i)scaled_dot_product|flash_attention|efficient_attention|cudnn_attention|flex_attention"
    r"|(^|[^a-z])(attn|sdpa)|attention"
)
# A trace is an attention variant when at least this share of its GPU activity runs under an
# attention op or region: a BERT or ViT model runs attention too, but among much else (12-29%
# on the public BERT traces), and is no attention variant.
ATTENTION_SHARE_PCT = 50.0
# The capture configuration of an attention variant set (capture/ writes these keys).
ATTENTION_CONFIG_KEYS = ("heads", "head_dim")
# CPU ops that only a training step runs: autograd's backward and an optimizer step.
TRAINING_SIGNS = r"^autograd::engine::evaluate_function|Backward\d*$|^Optimizer\.(step|zero_grad)"
TRAINING = "training"
INFERENCE = "inference"


def _has_cpu_ops(trace: Trace) -> bool:
    return bool((trace.cpu["cat"] == "cpu_op").any())


def workload(variant_set: VariantSet) -> str | None:
    """For a single trace: a training step (backward or optimizer ops ran) or inference (none
    did, among the CPU operators the trace recorded); None for several traces, and for a trace
    without CPU operators (GPU-only or CPU-less): the absence of backward ops says nothing."""
    loaded = [v.trace for v in variant_set.loaded if v.trace is not None]
    return trace_workload(loaded[0]) if len(loaded) == 1 else None


def trace_workload(trace: Trace) -> str | None:
    """One trace's workload, as :func:`workload` decides it."""
    if trace.cpu["name"].str.contains(TRAINING_SIGNS).any():
        return TRAINING
    return INFERENCE if _has_cpu_ops(trace) else None


def attention_share_pct(trace: Trace) -> float | None:
    """The share of the trace's GPU activity (in its iterations) launched under an attention
    op or region (:data:`ATTENTION_SIGNS`), the launching op included; None without any."""
    gpu = in_iterations(activities(trace))
    total = float(gpu["dur_ns"].sum())
    if not total:
        return None
    sign = pl.col("name").str.contains(ATTENTION_SIGNS)
    itself = gpu.select(
        pl.col("op_id").is_not_null() & pl.lit(trace.cpu.select(sign).to_series()).gather("op_id")
    ).to_series()
    above = nearest_ancestor(trace.cpu, gpu["op_id"], sign).is_not_null()
    return float(gpu.filter(itself.fill_null(False) | above)["dur_ns"].sum()) / total * 100


def _attention_variants(variant_set: VariantSet, loaded: list[Trace]) -> bool:
    """The traces compare attention implementations: captured as such (the manifest's attention
    shape), or each one spends most of its GPU activity under attention ops or regions."""
    if any(
        all(key in (m.config or {}) for key in ATTENTION_CONFIG_KEYS) for m in variant_set.manifests
    ):
        return True
    shares = [attention_share_pct(t) for t in loaded]
    return all(s is not None and s >= ATTENTION_SHARE_PCT for s in shares)


# What several traces are, by their common workload, when they are no attention variants.
SET_NAMES = {TRAINING: "Training steps", INFERENCE: "Inference traces"}


def title(variant_set: VariantSet) -> str:
    """What the traces are about, from their content: attention variants only where attention
    is most of the GPU work (or the capture says so), else training steps or inference traces
    (a single trace: a training step or an inference trace), and a folder of ranks as such."""
    loaded = [v.trace for v in variant_set.loaded if v.trace is not None]
    if len(loaded) > 1:
        kinds = {trace_workload(t) or "" for t in loaded}
        what = (
            "Attention variants"
            if _attention_variants(variant_set, loaded)
            else SET_NAMES.get(kinds.pop() if len(kinds) == 1 else "", "Traces")
        )
        return f"{what} compared: profiling report"
    if not loaded:
        return "Profiling report"
    kind = {TRAINING: "A training step", INFERENCE: "An inference trace"}.get(
        workload(variant_set) or "", "A single trace"
    )
    ranks = len(loaded[0].meta)
    on = f" on a folder of {ranks} ranks" if ranks > 1 else ""
    return f"{kind}{on}: profiling report"


# The DNN library PyTorch calls on each platform (MIOpen is cuDNN's ROCm counterpart).
DNN_LIBRARIES = {False: "cuDNN", True: "MIOpen"}
# Signs of a ROCm trace besides its versions: MIOpen's ATen ops, an AMD device name.
ROCM_OPS = r"^aten::miopen_"


def _rocm(trace: Trace) -> bool:
    return (
        any(key in m.versions for m in trace.meta for key in ROCM_VERSION_KEYS)
        or bool(trace.cpu["name"].str.contains(ROCM_OPS).any())
        or bool(trace.devices["name"].str.contains(AMD_NAME).any())
    )


def dnn_library(variant_set: VariantSet) -> str:
    """cuDNN, MIOpen where every trace is ROCm's, "cuDNN/MIOpen" for a mixed set."""
    platforms = sorted({_rocm(v.trace) for v in variant_set.loaded if v.trace is not None})
    return "/".join(DNN_LIBRARIES[rocm] for rocm in platforms) or DNN_LIBRARIES[False]


def variant_gpus(variant_set: VariantSet) -> dict[str, str]:
    """Each loaded variant's GPU model(s), by label (variants whose trace names none left out)."""
    names = {
        v.label: ", ".join(v.trace.devices["name"].drop_nulls().unique().sort().to_list())
        for v in variant_set.loaded
        if v.trace is not None
    }
    return {label: gpu for label, gpu in names.items() if gpu}


def header(variant_set: VariantSet) -> dict[str, Any]:
    """Device, software versions and capture configuration, from the manifest or the traces."""
    info: dict[str, Any] = {}
    if variant_set.manifests:
        manifest = variant_set.manifests[0]
        for key in ENVIRONMENT_KEYS:
            if manifest.environment.get(key):
                info[key] = manifest.environment[key]
        info["config"] = manifest.config
        info["captured"] = manifest.created
    traces = [v.trace for v in variant_set.loaded if v.trace is not None]
    if traces and "gpu" not in info:
        devices = pl.concat([t.devices for t in traces]).get_column("name").unique().sort()
        if devices.len():
            info["gpu"] = ", ".join(devices.to_list())
        # The first trace that records versions (traces[0] alone may have none), as text: the
        # header's table would write the integer 12040 as "12,040".
        versions = next((t.meta[0].versions for t in traces if t.meta[0].versions), {})
        for key in VERSION_KEYS:
            if key in versions:
                info[key] = str(versions[key])
    return info


def _variant_report(variant: Variant, row: dict[str, Any]) -> VariantReport:
    trace = variant.trace
    if trace is None:
        return VariantReport(variant.label, variant.status, variant.reason, row=row)
    figures = summary(trace)
    kernels = kernel_table(trace)
    cudnn = cudnn_table(trace)
    # One readable name per kernel for the whole section: the top-kernels table and the findings.
    kernels = kernels.with_columns(short_name=readable_names(kernels["name"]))
    return VariantReport(
        label=variant.label,
        status=variant.status,
        reason=variant.reason,
        summary=figures,
        row=row,
        categories=categories(trace),
        top_kernels=kernels.head(TOP_KERNELS),
        kernels=kernels,
        path=str(variant.path) if variant.path is not None else None,
        sdpa_math=bool((trace.cpu["name"] == SDPA_MATH_OP).any()),
        has_cpu_ops=_has_cpu_ops(trace),
        launch_ops=op_table(trace),
        gemms=gemm_table(trace),
        memory=memory_traffic(trace),
        cudnn=cudnn,
        warm_up_calls=variant.warm_up_calls,
        library=DNN_LIBRARIES[_rocm(trace)],
        allocations=memory(trace),
        critical_path=critical_path(trace),
        comms=comms(trace),
        idle=idle_breakdown(trace),
    )


def _verdict(row: dict[str, Any]) -> Verdict | None:
    if not row.get("bound_note"):
        return None
    return Verdict(row["bound"], row.get("bound_margin_pct"), {}, row["bound_note"])


def _with_performance(
    reports: tuple[VariantReport, ...], variant_set: VariantSet, baseline: str | None
) -> tuple[VariantReport, ...]:
    """Each loaded variant's roofline, and why it differs from the baseline (`explain`)."""
    traces = {v.label: v.trace for v in variant_set.loaded if v.trace is not None}
    base = traces.get(baseline) if baseline is not None else None
    return tuple(
        replace(
            report,
            # The section's own verdict (against the capture median where there is one).
            roofline=roofline(traces[report.label], judged=_verdict(report.row)),
            explained=(
                explain(base, traces[report.label], baseline or "", report.label)
                if base is not None and report.label != baseline
                else None
            ),
        )
        if report.label in traces
        else report
        for report in reports
    )


def categories(trace: Trace) -> pl.DataFrame:
    """GPU activity per iteration by category; ``us_per_iter`` adds up to the summary's
    ``gpu_activity_us_per_iter``."""
    gpu = in_iterations(activities(trace))
    n = iteration_count(trace)
    total = gpu["dur_ns"].sum() or 1
    return (
        gpu.group_by("category")
        .agg(
            count_per_iter=pl.len() / n,
            us_per_iter=pl.col("dur_ns").sum() / 1e3 / n,
            share_of_gpu_activity_pct=pl.col("dur_ns").sum() / total * 100,
        )
        .sort(["us_per_iter", "category"], descending=[True, False])
    )
