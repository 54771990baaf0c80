"""What a GEMM's shape and kernel name say about its speed, as data: the dimension multiples
tensor cores want per data type, the architecture a kernel was built for, its load width.

* **Alignment.** Tensor-core GEMMs want every leading dimension a multiple of 16 bytes: 8
  elements in fp16/bf16, 16 in fp8/int8, 4 in fp32 (TF32). Off that, cuBLAS falls back to
  kernels that load one or two elements at a time (CUTLASS names end in ``align1``/``align2``)
  and, on Hopper, to older-architecture kernels: GPT-2's vocabulary of 50257 runs its LM-head
  GEMMs in ``cutlass_75_*_align1`` kernels at 9.5-15% of an H200's peak; padding it to 50304
  (a multiple of 64) is the usual fix; where a multiple of 64 would add more than 2% to the
  dimension, the data type's multiple does (647 -> 648). A dimension no larger than the
  multiple (a matrix-vector product) is left alone.
* **Architecture.** A kernel's name says the architecture it was built for (``sm80_xmma_*``,
  ``cutlass_75_*``, ``ampere_*``, ``volta_*``); on a newer GPU such a kernel uses none of its
  own tensor-core instructions (Hopper's wgmma, Blackwell's tcgen05). Plain fp32 GEMMs on the
  CUDA cores are exempt: no architecture has newer SIMT kernels for them.
* **Precision.** fp32 on the CUDA cores (no tensor cores) is told by the precision rules of
  :mod:`traceanalyze.classify.rules`.

All expressions read the columns of the activities frame (``name``, ``gemm_precision``) and,
where the op was modelled, the GEMM's ``dtype``, ``gemm_n`` and ``gemm_k``.
"""

from __future__ import annotations

import functools

import polars as pl

# Elements per 16 bytes: the multiple each leading dimension wants, by the op's data type.
DIM_MULTIPLE: dict[str, int] = {"bf16": 8, "fp16": 8, "fp8": 16, "int8": 16, "fp32": 4}
# The fix pads a dimension to a multiple of this (50257 -> 50304: whole tiles as well) where
# that adds at most MAX_PAD_PCT to the dimension, else to its data type's multiple (647 -> 648,
# not 704).
PAD_TO = 64
MAX_PAD_PCT = 2.0
# An older-architecture kernel on a GEMM this large (FLOPs per call) is a cause on its own.
ARCH_MIN_FLOPS = 1e9
# Vector loads of this many bytes are what tensor-core kernels are built for.
FULL_LOAD_BYTES = 16

# The architecture a GEMM kernel's name says it was built for, first match wins: a pattern
# with a group reads the number (sm80, cutlass_75), one without gives the fixed value.
KERNEL_ARCH_RULES: tuple[tuple[str, int | None], ...] = (
    (r"cutlass_(\d{2,3})_", None),
    (r"(?:^|[\s:<_])sm_?(\d{2,3})a?_", None),
    (r"(?:^|[\s:<_])hopper_", 90),
    (r"(?:^|[\s:<_])ampere_", 80),
    (r"(?:^|[\s:<_])turing_", 75),
    (r"(?:^|[\s:<_])volta_", 70),
    (r"(?:^|[\s:<_])maxwell_", 50),
)
# A GPU's own GEMM kernels where they are not built for its exact compute capability: Ada
# (sm89) and the sm86/sm87 parts run Ampere's sm80 kernels; the B300 (sm103) Blackwell's.
NATIVE_GEMM_ARCH: dict[int, int] = {86: 80, 87: 80, 89: 80, 103: 100, 121: 120}
# Bytes per element of each GEMM precision, for a kernel's load width.
PRECISION_BYTES: dict[str, int] = {
    "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "tf32": 4, "fp32-cuda-cores": 4,
}  # fmt: skip
# Kernels exempt from the architecture finding (their architecture is not the point).
NO_ARCH_PRECISIONS = ("fp32-cuda-cores",)

ALIGNMENT = "alignment"
ARCHITECTURE = "architecture"
PRECISION = "precision"
# The causes in the order the evidence is told: a misaligned shape makes cuBLAS pick the
# narrow, older kernel, so the shape comes first.
CAUSES = (ALIGNMENT, ARCHITECTURE, PRECISION)


@functools.cache  # an immutable expression
def kernel_sm() -> pl.Expr:
    """The architecture (compute capability x 10) a kernel's ``name`` was built for, or null."""
    name = pl.col("name")
    expr: pl.Expr = pl.lit(None, pl.Int64)
    for pattern, fixed in reversed(KERNEL_ARCH_RULES):
        value = (
            name.str.extract(pattern, 1).cast(pl.Int64)
            if fixed is None
            else pl.when(name.str.contains(pattern)).then(pl.lit(fixed, pl.Int64))
        )
        expr = pl.coalesce(value, expr)
    return expr.alias("kernel_sm")


def native_sm(device_sm: pl.Expr) -> pl.Expr:
    """The architecture a GPU's own GEMM kernels are built for (:data:`NATIVE_GEMM_ARCH`)."""
    return device_sm.replace(NATIVE_GEMM_ARCH)


def kernel_align_elements() -> pl.Expr:
    """The smallest operand alignment a kernel's name states (``align1``, ``aligna4_alignc4``),
    in elements; null where it states none."""
    found = pl.col("name").str.extract_all(r"align[abc]?(\d+)(?:[^0-9]|$)")
    digits = found.list.eval(pl.element().str.extract(r"(\d+)", 1).cast(pl.Int64))
    return digits.list.min().alias("kernel_align_elements")


def older_arch(device_sm: pl.Expr) -> pl.Expr:
    """The kernel was built for an older architecture than the GPU's own GEMM kernels (not
    told for fp32 on the CUDA cores, whose kernels are the same on every architecture)."""
    exempt = pl.col("gemm_precision").is_in(list(NO_ARCH_PRECISIONS)).fill_null(value=False)
    return (pl.col("kernel_sm") < native_sm(device_sm)).fill_null(value=False) & ~exempt


def narrow_loads() -> pl.Expr:
    """The kernel loads its operands in pieces under :data:`FULL_LOAD_BYTES` (``align1`` bf16:
    2 bytes); with an unknown precision, an alignment of one or two elements. Not told for fp32
    on the CUDA cores, whose precision is the cause (tensor cores first; then the alignment)."""
    elements = pl.col("kernel_align_elements")
    size = pl.col("gemm_precision").replace_strict(PRECISION_BYTES, default=None)
    simt = pl.col("gemm_precision").is_in(list(NO_ARCH_PRECISIONS)).fill_null(value=False)
    narrow = (
        pl.when(size.is_not_null())
        .then(elements * size < FULL_LOAD_BYTES)
        .otherwise(elements <= 2)
        .fill_null(value=False)
    )
    return narrow & ~simt


def _round_up(size: pl.Expr, to: pl.Expr | int) -> pl.Expr:
    return (size + to - 1) // to * to


def padded(size: pl.Expr, multiple: pl.Expr) -> pl.Expr:
    """``size`` rounded up to a multiple of :data:`PAD_TO` where that adds at most
    :data:`MAX_PAD_PCT`, else to ``multiple``."""
    tile = _round_up(size, PAD_TO)
    cheap = (tile - size) * 100 <= size * MAX_PAD_PCT
    return pl.when(cheap).then(tile).otherwise(_round_up(size, multiple))


def _dim_multiple() -> pl.Expr:
    return pl.col("dtype").replace_strict(DIM_MULTIPLE, default=None, return_dtype=pl.Int64)


def dims_aligned() -> pl.Expr:
    """The modelled GEMM's N and K are both multiples of their data type's (null: unknown)."""
    multiple = _dim_multiple()
    return (pl.col("gemm_n") % multiple == 0) & (pl.col("gemm_k") % multiple == 0)


def misaligned_dims() -> pl.Expr:
    """The modelled GEMM's leading dimensions (N, K) off their data type's multiple, each as
    ``{dim, size, multiple, padded}``; empty where both are aligned, the shape is unknown, or
    the kernel runs on the CUDA cores (fp32 SIMT: its precision is the cause). A dimension no
    larger than the multiple (a matrix-vector product, N = 1) is no misalignment."""
    multiple = _dim_multiple()
    simt = pl.col("gemm_precision").is_in(list(NO_ARCH_PRECISIONS)).fill_null(value=False)

    def off(dim: str, column: str) -> pl.Expr:
        size = pl.col(column)
        bad = (size % multiple != 0) & (size > multiple) & ~simt
        entry = pl.struct(
            dim=pl.lit(dim), size=size, multiple=multiple, padded=padded(size, multiple)
        )
        return pl.when(bad.fill_null(value=False)).then(entry)

    return (
        pl.concat_list(off("N", "gemm_n"), off("K", "gemm_k"))
        .list.drop_nulls()
        .alias("misaligned_dims")
    )


def with_gemm_evidence(frame: pl.DataFrame, devices: pl.DataFrame) -> pl.DataFrame:
    """``frame`` (activities with the roofline's model columns) plus, on GEMM kernels,
    ``gpu_sm`` (the device's compute capability x 10), ``kernel_sm``,
    ``kernel_align_elements``, ``older_arch``, ``narrow_loads`` and ``misaligned_dims``
    (empty lists and false flags elsewhere)."""
    sm = devices.select(
        "rank", "device", gpu_sm=pl.col("compute_major") * 10 + pl.col("compute_minor")
    ).unique(["rank", "device"], keep="first")
    gemm = (pl.col("category") == "gemm") & (pl.col("kind") == "kernel")
    joined = frame.join(sm, on=["rank", "device"], how="left", maintain_order="left")
    evidence = joined.with_columns(
        gpu_sm=pl.col("gpu_sm").cast(pl.Int64),
        kernel_sm=pl.when(gemm).then(kernel_sm()),
        kernel_align_elements=pl.when(gemm).then(kernel_align_elements()),
    )
    return evidence.with_columns(
        narrow_loads=gemm & narrow_loads(),
        misaligned_dims=pl.when(gemm)
        .then(misaligned_dims())
        .otherwise(pl.lit([], pl.List(_DIM_STRUCT))),
    ).with_columns(older_arch=gemm & architecture_is_a_cause(pl.col("gpu_sm")))


def architecture_is_a_cause(device_sm: pl.Expr) -> pl.Expr:
    """An older-architecture kernel (:func:`older_arch`) told as a cause: beside a misaligned
    shape or narrow loads (the fallback cuBLAS takes for them), or on a GEMM of at least
    :data:`ARCH_MIN_FLOPS` per call. cuBLAS's heuristics pick older kernels for small problems
    on purpose (Hopper's wgmma tiles want large ones): tl_h100_bert_small's [141, 512] x
    [512, 512] runs an sm80 kernel in 5.8 µs, where the kernel's architecture is not what
    bounds it. Reads ``misaligned_dims``, ``kernel_align_elements``, ``gemm_precision``,
    ``kernel_sm`` and ``flops`` (per call; null where the shape was not recorded)."""
    misaligned = pl.col("misaligned_dims").list.len() > 0
    large = (pl.col("flops") >= ARCH_MIN_FLOPS).fill_null(value=False)
    return older_arch(device_sm) & (misaligned | narrow_loads() | large)


_DIM_STRUCT = pl.Struct(
    {"dim": pl.String, "size": pl.Int64, "multiple": pl.Int64, "padded": pl.Int64}
)
