"""`roofline`: how close each op runs to the GPU's limits, from the trace alone.

Kernel time is attributed per iteration (activities launched inside the iterations, as the
accounting counts them) to the innermost *modelled* op among the launching op and its
ancestors: ``aten::linear -> aten::addmm`` counts once, at addmm; the kernels flash attention
launches from ``aten::_flash_attention_forward`` count at
``aten::_scaled_dot_product_flash_attention``. A row models only the work its own kernels do:
a modelled op with a modelled op below it that kernels are attributed to (a composite) gets no
row, since its model would count the children's bytes and FLOPs a second time; its remaining
kernels are listed as not modelled (SDPA math's ``aten::_safe_softmax``: its softmax and where
have rows, its isneginf and all kernels do not). Memory copies and sets an op launches are part
of its GPU time. FLOPs and bytes come from the recorded shapes
(:mod:`traceanalyze.analyses.roofline.ops`).

Per row (an op with one set of shapes, dtype and peaks), with ``gpu_us`` the mean GPU time of
one call:

* ``tflops`` = flops / gpu_us, ``tbps`` = bytes / gpu_us (bytes are a lower bound);
* ``intensity`` = flops / bytes (FLOP per byte);
* the roofline bound for that intensity is min(peak_tflops, intensity x peak_tbps); in time,
  the call can take no less than max(flops / peak FLOP/s, bytes / peak bandwidth), and
  ``pct_of_roofline`` is that time over ``gpu_us`` (100% = on the roofline);
* ``bound`` is ``compute`` when the FLOP term is the larger, else ``memory`` (ops without
  FLOPs, such as copies and elementwise math, are ``memory``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from traceanalyze.analyses.activities import activities, in_iterations, iteration_count, per_trace
from traceanalyze.analyses.iterations import on_counted
from traceanalyze.analyses.roofline.formulas import model_calls
from traceanalyze.analyses.roofline.gemm_rules import (
    architecture_is_a_cause,
    narrow_loads,
    with_gemm_evidence,
)
from traceanalyze.analyses.roofline.ops import (
    COMPOSITE,
    GEMM,
    MEMORY,
    MODELLED_OPS,
    unmodelled_reason,
)
from traceanalyze.analyses.step.model import step_model
from traceanalyze.analyses.step.verdict import COMMUNICATION_BOUND, CPU_BOUND, SYNC_BOUND, Verdict
from traceanalyze.analyses.waves import wave_table, with_waves
from traceanalyze.display import Shown
from traceanalyze.hardware.occupancy import duration_weighted_mean
from traceanalyze.hardware.peaks import PeakOverride, device_peaks, with_override
from traceanalyze.link import nearest_ancestor
from traceanalyze.trace import Trace

# Below this share of the roofline the verdict lists what the trace shows about why.
NEAR_ROOFLINE_PCT = 70.0
LOW_OCCUPANCY_PCT = 25.0
POOR_WAVE_EFFICIENCY_PCT = 85.0
TINY_KERNEL_US = 5.0
# Rows that get a verdict in the report's short table.
TOP_OPS = 10

ROOFLINE_COLUMNS = (
    "op_name", "shapes", "dtype", "causal", "count_in_iterations", "count_per_iter", "flops",
    "bytes",
    "gpu_us", "gpu_us_per_iter", "share_of_gpu_activity_pct", "tflops", "tbps", "intensity",
    "peak_tflops", "peak_tbps", "pct_of_roofline", "bound", "peak_dtype", "family",
    "kernels_per_call", "mean_kernel_us", "theoretical_occupancy_pct", "occupancy_limiter",
    "grid_blocks", "blocks_per_wave", "waves", "last_wave_fill_pct", "wave_efficiency_pct",
    "gemm_precision", "gpu", "verdict", "gpu_sm", "kernel_sm", "kernel_align_elements",
    "misaligned_dims",
)  # fmt: skip
UNMODELLED_COLUMNS = (
    "op_name", "reason", "activities_per_iter", "gpu_us_per_iter", "share_of_gpu_activity_pct",
)  # fmt: skip


@dataclass(frozen=True, repr=False)  # Shown: a short repr, tables in Jupyter
class Roofline(Shown):
    """Everything `roofline` reports for one trace."""

    ops: pl.DataFrame  # ROOFLINE_COLUMNS, most GPU time per iteration first
    unmodelled: pl.DataFrame  # UNMODELLED_COLUMNS
    waves: pl.DataFrame  # wave_table(): per kernel and launch shape
    devices: pl.DataFrame  # device_peaks() rows, override applied
    gpu_activity_us_per_iter: float
    modelled_pct: float  # share of the GPU activity time in ``ops``
    has_shapes: bool  # the trace's CPU ops carry recorded shapes
    notes: tuple[str, ...] = field(default_factory=tuple)


NOT_GPU_BOUND_NOTE = (
    "the steps are {}: {}; kernels nearer the roofline will not shorten them by much"
)
# Verdicts under which faster kernels barely shorten a step.
NOT_GPU_BOUNDS = (CPU_BOUND, SYNC_BOUND, COMMUNICATION_BOUND)


@on_counted
def roofline(
    trace: Trace, override: PeakOverride | None = None, judged: Verdict | None = None
) -> Roofline:
    """The roofline of every modelled op in ``trace`` (see the module docstring).

    ``judged`` is the iterations' bound verdict where the caller has a better wall time than
    the trace's (a capture median); else the trace's own."""
    attributed = attributed_activities(trace)
    n = iteration_count(trace)
    total_ns = int(attributed["dur_ns"].sum() or 0)
    peaks = with_override(device_peaks(trace.devices), override)
    is_modelled = pl.col("reason").is_null() & pl.col("family").is_not_null()
    modelled = attributed.filter(is_modelled)
    ops = _rows(_with_peaks(modelled, peaks, override), n, total_ns)
    unmodelled = _unmodelled(attributed.filter(~is_modelled), n, total_ns)
    has_shapes = bool(trace.cpu["input_dims"].is_not_null().any())
    return Roofline(
        ops=ops,
        unmodelled=unmodelled,
        waves=wave_table(trace),
        devices=peaks,
        gpu_activity_us_per_iter=total_ns / 1e3 / n,
        modelled_pct=float(modelled["dur_ns"].sum() or 0) / total_ns * 100 if total_ns else 0.0,
        has_shapes=has_shapes,
        notes=tuple(_notes(trace, peaks, has_shapes, override, judged)),
    )


# The columns that name one roofline row (an op with one set of shapes, dtype and GPU).
_ROW = ["op_name", "shapes", "dtype", "causal", "family", "flops", "bytes", "gpu"]


@on_counted
def activity_rooflines(trace: Trace) -> pl.DataFrame:
    """Each GPU activity (``name``, ``ts_ns``, ``dur_ns``) that a roofline row covers, with
    that row's ``op_name``, ``pct_of_roofline`` and ``bound``: the figures of the op whose
    time the activity is part of (for `annotate`)."""
    modelled = attributed_activities(trace).filter(
        pl.col("reason").is_null() & pl.col("family").is_not_null()
    )
    peaks = with_override(device_peaks(trace.devices), None)
    rows = roofline(trace).ops.select(*_ROW, "pct_of_roofline", "bound")
    return (
        _with_peaks(modelled, peaks, None)
        .select(
            "name",
            "ts_ns",
            "dur_ns",
            "shapes",
            "dtype",
            "causal",
            "family",
            "flops",
            "gpu",
            op_name="model_name",
            bytes="op_bytes",
        )
        .join(rows, on=_ROW, how="inner", nulls_equal=True, maintain_order="left")
        .select("name", "ts_ns", "dur_ns", "op_name", "pct_of_roofline", "bound")
    )


@per_trace
def attributed_activities(trace: Trace) -> pl.DataFrame:
    """GPU activities inside the iterations with ``model_op`` (the innermost modelled op
    among the launching op and its ancestors), their wave figures, the model columns and the
    GEMM evidence of :func:`~.gemm_rules.with_gemm_evidence`."""
    gpu = in_iterations(activities(trace))
    cpu = trace.cpu
    is_modelled = pl.col("name").is_in(MODELLED_OPS) & (pl.col("cat") == "cpu_op")
    launching_modelled = cpu.select(is_modelled).to_series().gather(gpu["op_id"])
    ancestor = nearest_ancestor(cpu, gpu["op_id"], is_modelled)
    gpu = gpu.with_columns(
        model_op=pl.when(launching_modelled.fill_null(value=False))
        .then(pl.col("op_id"))
        .otherwise(ancestor)
    )
    composite = _composites(cpu, gpu["model_op"], is_modelled)
    # op_id is the row position in the cpu frame: the calls are a gather.
    calls = cpu[gpu["model_op"].drop_nulls().unique().sort()].select(
        call="op_id", name="name", input_dims="input_dims", input_types="input_types",
        concrete_inputs="concrete_inputs",
    )  # fmt: skip
    # The gpu frame's own ``bytes`` are those of memory copies and sets.
    models = (
        model_calls(calls)
        .rename({"bytes": "op_bytes"})
        .join(calls.select("call", model_name="name"), on="call")
    )
    modelled = (
        with_waves(gpu, trace.devices)
        .join(models.rename({"call": "model_op"}), on="model_op", how="left", maintain_order="left")
        .with_columns(
            reason=pl.when(pl.col("model_op").is_in(composite.implode()))
            .then(pl.lit(COMPOSITE))
            .otherwise("reason")
        )
    )
    return with_gemm_evidence(modelled, trace.devices)


def _composites(cpu: pl.DataFrame, model_ops: pl.Series, is_modelled: pl.Expr) -> pl.Series:
    """The modelled ops above another op that kernels are attributed to: composites whose
    model counts work that their modelled children's rows already count (SDPA math's
    ``aten::_safe_softmax`` above ``aten::_softmax`` and ``aten::where``). One level of the
    modelled ancestors per step, so nesting of any depth is found."""
    found: list[pl.Series] = []
    current = model_ops.drop_nulls().unique()
    while current.len():
        parents = nearest_ancestor(cpu, current, is_modelled).drop_nulls().unique()
        found.append(parents)
        current = parents
    return pl.concat(found).unique() if found else pl.Series("op_id", [], pl.Int64)


def _with_peaks(
    frame: pl.DataFrame, peaks: pl.DataFrame, override: PeakOverride | None
) -> pl.DataFrame:
    """Each activity's device peaks (an override also covers devices the trace does not
    describe). Where the activity's device id is not described but its rank describes one GPU
    model only, that model's peaks apply: ROCm traces number deviceProperties from 0 while
    kernels carry the physical device id (tl_mi300_bert_small: properties for 0, kernels on 2)."""
    columns = [c for c in peaks.columns if c not in ("rank", "device")]
    single_model = (
        peaks.group_by("rank")
        .agg(pl.col(columns).first(), models=pl.col("device_name").n_unique())
        .filter(pl.col("models") == 1)
        .drop("models")
    )
    joined = frame.join(peaks, on=["rank", "device"], how="left", maintain_order="left").join(
        single_model, on="rank", how="left", suffix="_of_rank", maintain_order="left"
    )
    described = pl.col("device_name").is_not_null()
    return with_override(
        joined.with_columns(
            pl.when(described).then(pl.col(c)).otherwise(pl.col(f"{c}_of_rank")).alias(c)
            for c in columns
        ).drop([f"{c}_of_rank" for c in columns], "device_name"),
        override,
    )


def _peak_tflops() -> pl.Expr:
    """The compute peak of the row's dtype; fp32 gets the TF32 peak where its GEMM kernels
    run TF32 (the kernel names say so), else the fp32 peak; an fp64 GEMM the FP64 tensor-core
    peak (cuBLAS's DGEMM runs DMMA on sm80+), other fp64 work the plain FP64 peak."""
    dtype = pl.col("dtype")
    expr = pl.lit(None, pl.Float64)
    for name in ("bf16", "fp16", "fp8"):
        expr = pl.when(dtype == name).then(pl.col(f"peak_{name}_tflops")).otherwise(expr)
    fp64 = (
        pl.when(pl.col("family") == GEMM)
        .then(pl.coalesce("peak_fp64_tensor_tflops", "peak_fp64_tflops"))
        .otherwise("peak_fp64_tflops")
    )
    expr = pl.when(dtype == "fp64").then(fp64).otherwise(expr)
    fp32 = pl.when(pl.col("tf32_kernels")).then("peak_tf32_tflops").otherwise("peak_fp32_tflops")
    return (
        pl.when(pl.col("family") == MEMORY)
        .then(None)
        .when(dtype == "fp32")
        .then(fp32)
        .otherwise(expr)
    )


def _peak_dtype() -> pl.Expr:
    tf32 = pl.when(pl.col("tf32_kernels")).then(pl.lit("tf32")).otherwise(pl.lit("fp32"))
    return (
        pl.when(pl.col("family") == MEMORY)
        .then(None)
        .when(pl.col("dtype") == "fp32")
        .then(tf32)
        .otherwise("dtype")
    )


_KEY = ["model_name", "shapes", "dtype", "causal", "family", "flops", "op_bytes", "gpu",
        "peak_bf16_tflops", "peak_fp16_tflops", "peak_fp8_tflops", "peak_tf32_tflops",
        "peak_fp32_tflops", "peak_fp64_tflops", "peak_fp64_tensor_tflops", "peak_tbps"]  # fmt: skip


def _rows(frame: pl.DataFrame, n: int, total_ns: int) -> pl.DataFrame:
    kernel = pl.col("kind") == "kernel"
    kernel_dur = pl.col("dur_ns").filter(kernel)
    grouped = frame.group_by(_KEY).agg(
        count=pl.col("model_op").n_unique(),
        gpu_ns=pl.col("dur_ns").sum(),
        kernels=kernel.sum(),
        kernel_ns=kernel_dur.sum(),
        theoretical_occupancy_pct=duration_weighted_mean("theoretical_occupancy_pct"),
        occupancy_limiter=pl.col("occupancy_limiter").sort_by("dur_ns").drop_nulls().last(),
        # The waves of the row's longest kernel launch: where most of its time goes.
        **{
            column: pl.col(column).filter(kernel).sort_by(kernel_dur).last()
            for column in (
                "grid_blocks",
                "blocks_per_wave",
                "waves",
                "last_wave_fill_pct",
                "wave_efficiency_pct",
            )
        },
        gemm_precision=pl.col("gemm_precision").sort_by("dur_ns").drop_nulls().last(),
        tf32_kernels=(pl.col("gemm_precision") == "tf32").any(),
        # The GEMM evidence of the row's longest GEMM kernel launch (gemm_rules).
        gpu_sm=pl.col("gpu_sm").drop_nulls().first(),
        **{
            column: pl.col(column).filter(_gemm_kernel()).sort_by(_gemm_kernel_dur()).last()
            for column in ("kernel_sm", "kernel_align_elements")
        },
        misaligned_dims=pl.col("misaligned_dims")
        .sort_by(pl.col("misaligned_dims").list.len())
        .last(),
    )
    gpu_us = pl.col("gpu_ns") / pl.col("count") / 1e3
    rows = grouped.with_columns(
        op_name="model_name",
        bytes="op_bytes",
        # calls inside the counted iterations (not the whole trace, as `kernels`' `count`)
        count_in_iterations="count",
        count_per_iter=pl.col("count") / n,
        gpu_us=gpu_us,
        gpu_us_per_iter=pl.col("gpu_ns") / 1e3 / n,
        share_of_gpu_activity_pct=pl.col("gpu_ns") / (total_ns or 1) * 100,
        kernels_per_call=pl.col("kernels") / pl.col("count"),
        mean_kernel_us=pl.when(pl.col("kernels") > 0).then(
            pl.col("kernel_ns") / pl.col("kernels") / 1e3
        ),
        peak_tflops=_peak_tflops(),
        peak_dtype=_peak_dtype(),
    )
    return (
        _roofline_math(rows)
        .with_columns(verdict=_verdict())
        # Every key column breaks ties: rows that differ only in dtype (an aten::copy_ of one
        # shape from float and from int, equally long) came out in either order from run to run.
        .sort(["gpu_us_per_iter", *_KEY], descending=[True] + [False] * len(_KEY), nulls_last=True)
        .select(ROOFLINE_COLUMNS)
    )


def _gemm_kernel() -> pl.Expr:
    return (pl.col("kind") == "kernel") & (pl.col("category") == "gemm")


def _gemm_kernel_dur() -> pl.Expr:
    return pl.col("dur_ns").filter(_gemm_kernel())


def _roofline_math(rows: pl.DataFrame) -> pl.DataFrame:
    """Achieved throughput, intensity, the time at the roofline and the bound."""
    seconds = pl.col("gpu_us") * 1e-6
    compute_s = pl.col("flops") / (pl.col("peak_tflops") * 1e12)
    memory_s = pl.col("bytes") / (pl.col("peak_tbps") * 1e12)
    has_flops = pl.col("flops").is_not_null()
    ideal_s = pl.when(has_flops).then(pl.max_horizontal(compute_s, memory_s)).otherwise(memory_s)
    known = pl.col("peak_tbps").is_not_null() & (~has_flops | pl.col("peak_tflops").is_not_null())
    return rows.with_columns(
        tflops=pl.when(seconds > 0).then(pl.col("flops") / seconds / 1e12),
        tbps=pl.when(seconds > 0).then(pl.col("bytes") / seconds / 1e12),
        intensity=pl.when(pl.col("bytes") > 0).then(pl.col("flops") / pl.col("bytes")),
        pct_of_roofline=pl.when(known & (seconds > 0)).then(ideal_s / seconds * 100),
        bound=pl.when(~has_flops)
        .then(pl.lit("memory"))
        .when(known)
        .then(pl.when(compute_s >= memory_s).then(pl.lit("compute")).otherwise(pl.lit("memory"))),
    )


# What the trace can say about a row below its roofline, in order: each a condition and a
# clause (a Polars string expression). Stated only from measured or computed evidence. The
# causes the shape and the kernel name show (alignment, architecture, precision) come before
# occupancy: a misaligned GEMM gets an older, narrower kernel whatever its occupancy.
def _signs() -> tuple[tuple[pl.Expr, pl.Expr], ...]:
    misaligned = pl.col("misaligned_dims").list.eval(
        pl.format(
            "{} = {} is not a multiple of {} (pad it to {})",
            pl.element().struct.field("dim"),
            pl.element().struct.field("size"),
            pl.element().struct.field("multiple"),
            pl.element().struct.field("padded"),
        )
    )
    align = pl.col("kernel_align_elements")
    narrow = pl.format("its kernel loads {}-element operands (align{})", align, align)
    return (
        (
            (pl.col("misaligned_dims").list.len() > 0) | narrow_loads(),
            pl.concat_str(
                [
                    pl.lit("alignment: "),
                    pl.concat_str(
                        [
                            pl.when(pl.col("misaligned_dims").list.len() > 0).then(
                                misaligned.list.join("; ")
                            ),
                            pl.when(narrow_loads()).then(narrow),
                        ],
                        separator=", ",
                        ignore_nulls=True,
                    ),
                ]
            ),
        ),
        (
            architecture_is_a_cause(pl.col("gpu_sm")),
            pl.format(
                "architecture: an sm{} kernel on this sm{} GPU (none of its own tensor-core "
                "instructions)",
                "kernel_sm",
                "gpu_sm",
            ),
        ),
        (
            pl.col("gemm_precision") == "fp32-cuda-cores",
            pl.lit("fp32 on the CUDA cores (its GEMM kernels use no tensor cores)"),
        ),
        (
            pl.col("waves") < 1,
            pl.format(
                "a small grid: its longest kernel's {} blocks fill {}% of the {} the GPU runs "
                "at once",
                "grid_blocks",
                pl.col("last_wave_fill_pct").round(0).cast(pl.Int64),
                "blocks_per_wave",
            ),
        ),
        (
            (pl.col("waves") > 1) & (pl.col("wave_efficiency_pct") < POOR_WAVE_EFFICIENCY_PCT),
            pl.format(
                "tail wave: {} waves, the last {}% full ({}% of the launched SM slots idle)",
                pl.col("waves").round(2),
                pl.col("last_wave_fill_pct").round(0).cast(pl.Int64),
                (100 - pl.col("wave_efficiency_pct")).round(0).cast(pl.Int64),
            ),
        ),
        (
            pl.col("theoretical_occupancy_pct") < LOW_OCCUPANCY_PCT,
            pl.format(
                "low occupancy: {}% theoretical{}",
                pl.col("theoretical_occupancy_pct").round(1),
                pl.when(pl.col("occupancy_limiter").is_not_null())
                .then(_limited_by())
                .otherwise(pl.lit("")),
            ),
        ),
        (
            pl.col("mean_kernel_us") < TINY_KERNEL_US,
            pl.format(
                "tiny kernels (mean {} µs): start-up and tail dominate",
                pl.col("mean_kernel_us").round(1),
            ),
        ),
    )  # fmt: skip


def _limited_by() -> pl.Expr:
    return pl.format(", limited by {}", pl.col("occupancy_limiter").str.replace("_", " "))


def _verdict() -> pl.Expr:
    signs = pl.concat_str(
        [pl.when(condition.fill_null(False)).then(text) for condition, text in _signs()],
        separator="; ",
        ignore_nulls=True,
    )
    pct = pl.col("pct_of_roofline")
    shown = (
        pl.when(pct < 10)
        .then(pct.round(1).cast(pl.String))
        .otherwise(pct.round(0).cast(pl.Int64).cast(pl.String))
    )
    head = pl.format("{}-bound, {}% of the roofline", "bound", shown)
    # Waves and occupancy need the occupancy model, which AMD GPUs do not get.
    silent = (
        pl.when(pl.col("theoretical_occupancy_pct").is_null())
        .then(pl.lit("no cause the trace can show (no occupancy or waves for this GPU)"))
        .otherwise(
            pl.lit(
                "the trace shows no alignment, architecture, precision, tail wave or occupancy "
                "cause"
            )
        )
    )
    below = (
        pl.when(signs != "")
        .then(pl.format("{}; below it: {}", head, signs))
        .otherwise(pl.format("{}; {}", head, silent))
    )
    return (
        pl.when(pct.is_null())
        .then(pl.lit("no peak known for this GPU: pass --peak-tflops and --peak-tbps"))
        .when(pct >= NEAR_ROOFLINE_PCT)
        .then(pl.format("{}: near the roofline", head))
        .otherwise(below)
    )


def _unmodelled(frame: pl.DataFrame, n: int, total_ns: int) -> pl.DataFrame:
    """GPU time not in a roofline row: the op and why it has no figures."""
    named = frame.with_columns(
        op_name=pl.coalesce("model_name", "op_name"),
        reason=pl.coalesce("reason", unmodelled_reason()),
    )
    return (
        named.group_by("op_name", "reason")
        .agg(
            activities_per_iter=pl.len() / n,
            gpu_us_per_iter=pl.col("dur_ns").sum() / 1e3 / n,
            share_of_gpu_activity_pct=pl.col("dur_ns").sum() / (total_ns or 1) * 100,
        )
        .sort(["gpu_us_per_iter", "op_name"], descending=[True, False], nulls_last=True)
        .select(UNMODELLED_COLUMNS)
    )


def _notes(
    trace: Trace,
    peaks: pl.DataFrame,
    has_shapes: bool,
    override: PeakOverride | None,
    judged: Verdict | None,
) -> list[str]:
    notes = []
    if not has_shapes:
        notes.append(
            "the trace has no recorded shapes (profiled without record_shapes=True): no op "
            "can be modelled"
        )
    unknown = peaks.filter(pl.col("peak_tbps").is_null())["device_name"].unique().sort()
    if unknown.len():
        notes.append(
            f"no peaks known for {', '.join(unknown.to_list())}: pass --peak-tflops and --peak-tbps"
        )
    if not peaks.height and (override is None or override.tbps is None):
        notes.append(
            "the trace describes no GPU (no deviceProperties): pass --peak-tflops and --peak-tbps"
        )
    if judged is None:
        judged = step_model(trace).verdict
    if judged.bound in NOT_GPU_BOUNDS:
        notes.append(NOT_GPU_BOUND_NOTE.format(judged.bound, judged.note))
    return notes
