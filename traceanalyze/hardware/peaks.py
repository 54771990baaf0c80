"""Peak dense throughput by data type and peak memory bandwidth per GPU, as data.

Rows are matched to a trace's ``deviceProperties`` in order: the first whose ``name_pattern``
matches the device name (and ``num_sms``, where given) wins. Figures are the vendors'
datasheet peaks without structured sparsity, at boost clock, per device as PyTorch sees it
(an MI250X or MI250 is two devices, one per graphics compute die, so its figures are halved).

Column meanings (TFLOP/s unless stated; null where the GPU has no such path):

* ``bf16``, ``fp16``, ``fp8``: tensor-core (NVIDIA) / matrix-core (AMD) dense peaks.
* ``tf32``: NVIDIA's TF32 tensor-core peak (fp32 inputs with TF32 allowed); AMD's xf32.
* ``fp32``: fp32 without TF32: NVIDIA's CUDA-core (SIMT) FP32 peak, AMD's FP32 matrix peak.
* ``fp64``: plain FP64 (NVIDIA's CUDA-core FP64, AMD's FP64 vector peak): elementwise and
  other non-matrix math in double precision.
* ``fp64_tensor``: the FP64 tensor-core (NVIDIA DMMA, sm80+) / matrix-core (AMD) peak, what a
  double-precision GEMM can reach; null where the GPU has none (V100).
* ``hbm_tbps``: peak device-memory bandwidth, TB/s (10^12 bytes per second).

Sources per row in the comments. Figures marked "unconfirmed" could not be checked against a
vendor document here (see the comment).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

PEAK_DTYPES = ("bf16", "fp16", "fp8", "tf32", "fp32", "fp64", "fp64_tensor")


@dataclass(frozen=True)
class Peak:
    gpu: str  # the name a reader knows it by
    name_pattern: str  # regex over deviceProperties' name
    bf16: float | None
    fp16: float | None
    fp8: float | None
    tf32: float | None
    fp32: float | None
    fp64: float | None
    fp64_tensor: float | None
    hbm_tbps: float
    source: str
    num_sms: int | None = None  # where the name alone is ambiguous


PEAKS: tuple[Peak, ...] = (
    # NVIDIA H200 datasheet (SXM): BF16/FP16 1,979, FP8 3,958, TF32 989 TFLOPS *with sparsity*
    # (dense is half: the H100 whitepaper's 989.4 / 1,978.9 / 494.7), FP32 67, FP64 34, FP64
    # tensor core 67, HBM3e 4.8 TB/s. The H200 NVL (other clocks) is deliberately not matched.
    Peak("H200 SXM", r"^NVIDIA H200$", 989.4, 989.4, 1978.9, 494.7, 67.0, 34.0, 67.0, 4.8,
         "NVIDIA H200 Tensor Core GPU datasheet (SXM), dense"),
    # NVIDIA H100 datasheet / whitepaper, SXM5: same Hopper peaks as H200, HBM3 3.35 TB/s.
    Peak("H100 SXM", r"^NVIDIA H100 80GB HBM3$|H100 SXM", 989.4, 989.4, 1978.9, 494.7, 67.0,
         34.0, 67.0, 3.35, "NVIDIA H100 Tensor Core GPU datasheet (SXM5), dense"),
    # H100 PCIe: BF16 1,513 / FP8 3,026 / TF32 756 with sparsity, FP32 51, FP64 26, FP64
    # tensor core 51, HBM2e 2.0 TB/s.
    Peak("H100 PCIe", r"H100 PCIe", 756.5, 756.5, 1513.0, 378.0, 51.0, 26.0, 51.0, 2.0,
         "NVIDIA H100 Tensor Core GPU datasheet (PCIe), dense"),
    # H800 (the H100 for export markets, DeepSeek's GPU): the H100's tensor-core, FP32 and
    # memory peaks with FP64 (plain and tensor core) cut to 1 TFLOP/s (0.8 on the PCIe card);
    # NVLink 400 GB/s (comms_rules). Kineto names the SXM part "NVIDIA H800".
    Peak("H800 PCIe", r"H800 PCIe", 756.5, 756.5, 1513.0, 378.0, 51.0, 0.8, 0.8, 2.0,
         "NVIDIA H800 PCIe datasheet, dense"),
    Peak("H800 SXM", r"H800", 989.4, 989.4, 1978.9, 494.7, 67.0, 1.0, 1.0, 3.35,
         "NVIDIA H800 SXM5 datasheet, dense"),
    # A100 datasheet: BF16/FP16 312, TF32 156, FP32 19.5, FP64 9.7, FP64 tensor 19.5 (dense);
    # HBM2e 2,039 GB/s (80GB SXM4), 1,935 GB/s (80GB PCIe), HBM2 1,555 GB/s (40GB SXM4 and PCIe).
    Peak("A100 80GB PCIe", r"A100 80GB PCIe|A100-PCIE-80GB", 312.0, 312.0, None, 156.0, 19.5,
         9.7, 19.5, 1.935, "NVIDIA A100 Tensor Core GPU datasheet (80GB PCIe)"),
    Peak("A100 80GB SXM", r"A100.*80GB", 312.0, 312.0, None, 156.0, 19.5, 9.7, 19.5, 2.039,
         "NVIDIA A100 Tensor Core GPU datasheet (80GB SXM4)"),
    # The 40GB boards (A100-SXM4-40GB, A100-PCIE-40GB, and Meta's A100-PG509-200, whose
    # traces report 42.3e9 bytes of memory) have the 40GB parts' 1,555 GB/s.
    Peak("A100 40GB", r"A100", 312.0, 312.0, None, 156.0, 19.5, 9.7, 19.5, 1.555,
         "NVIDIA A100 Tensor Core GPU datasheet (40GB)"),
    # B200 (HGX, 1,000 W): BF16/FP16 2,250, FP8 4,500, TF32 1,100 dense; unconfirmed against
    # NVIDIA's own page here (taken from glennklockwood.com's B200 notes, which cite NVIDIA's
    # Blackwell datasheet); FP32 given as 75 or 80 TFLOPS and HBM3e as 7.7 or 8 TB/s by
    # different sources: 75 and 8.0 used. FP64 and FP64 tensor core: one figure, 40.
    Peak("B200", r"B200", 2250.0, 2250.0, 4500.0, 1100.0, 75.0, 40.0, 40.0, 8.0,
         "NVIDIA HGX B200 (1,000 W), dense; unconfirmed"),
    # V100 datasheet: tensor (FP16) 125 SXM2 / 112 PCIe, FP32 15.7 / 14, FP64 7.8 / 7,
    # HBM2 900 GB/s. No BF16, TF32, FP8 or FP64 tensor cores on Volta.
    Peak("V100 SXM2", r"V100-SXM", None, 125.0, None, None, 15.7, 7.8, None, 0.9,
         "NVIDIA Tesla V100 datasheet (SXM2)"),
    Peak("V100 PCIe", r"V100", None, 112.0, None, None, 14.0, 7.0, None, 0.9,
         "NVIDIA Tesla V100 datasheet (PCIe)"),
    # AMD Instinct MI300X datasheet: FP16/BF16 1,307.4, FP8 2,614.9 dense; HBM3 5.3 TB/s.
    # TF32 653.7, FP32 matrix 163.4, FP64 vector 81.7 and FP64 matrix 163.4: unconfirmed here
    # (from the same datasheet's table as remembered, not re-read).
    Peak("MI300X", r"MI300X", 1307.4, 1307.4, 2614.9, 653.7, 163.4, 81.7, 163.4, 5.3,
         "AMD Instinct MI300X datasheet; TF32/FP32/FP64 unconfirmed"),
    # MI250X (OAM): BF16/FP16 383, FP32 matrix 95.7, FP64 vector 47.9, FP64 matrix 95.7,
    # HBM2e 3.2 TB/s, two GCDs: halved.
    Peak("MI250X (one GCD)", r"MI250X", 191.5, 191.5, None, None, 47.85, 23.95, 47.85, 1.6,
         "AMD Instinct MI250X datasheet, per GCD (half the OAM's figures)"),
    # MI250 (OAM): BF16/FP16 362.1, FP32 matrix 90.5, FP64 vector 45.3, FP64 matrix 90.5,
    # 3.2 TB/s; per GCD: halved.
    Peak("MI250 (one GCD)", r"MI250", 181.05, 181.05, None, None, 45.25, 22.65, 45.25, 1.6,
         "AMD Instinct MI250 datasheet, per GCD (half the OAM's figures)"),
    # MI210 (PCIe, one GCD of 104 CUs): BF16/FP16 181, FP32 matrix 45.3, FP64 vector 22.6,
    # FP64 matrix 45.3, 1.6 TB/s.
    Peak("MI210", r"MI210", 181.0, 181.0, None, None, 45.3, 22.6, 45.3, 1.6,
         "AMD Instinct MI210 datasheet"),
    # ROCm may report a generic name: 104 CUs of gfx90a are an MI210 or one GCD of an MI250,
    # whose per-GCD peaks are the same (181 TFLOP/s, 1.6 TB/s).
    Peak("MI210 / MI250 GCD", r"^AMD Radeon Graphics$", 181.0, 181.0, None, None, 45.3, 22.6,
         45.3, 1.6, "AMD MI210 / MI250 datasheets (per GCD); matched by 104 compute units",
         num_sms=104),
)  # fmt: skip

PEAK_COLUMNS: dict[str, pl.DataType] = {
    "gpu": pl.String(),
    "name_pattern": pl.String(),
    "num_sms_required": pl.Int32(),
    **{f"peak_{dtype}_tflops": pl.Float64() for dtype in PEAK_DTYPES},
    "peak_tbps": pl.Float64(),
    "peak_source": pl.String(),
}


def peaks_table() -> pl.DataFrame:
    """``PEAKS`` as a frame, in matching order (``order``)."""
    rows = [
        (p.gpu, p.name_pattern, p.num_sms, p.bf16, p.fp16, p.fp8, p.tf32, p.fp32, p.fp64,
         p.fp64_tensor, p.hbm_tbps, p.source)
        for p in PEAKS
    ]  # fmt: skip
    return pl.DataFrame(rows, schema=PEAK_COLUMNS, orient="row").with_row_index("order")


@dataclass(frozen=True)
class PeakOverride:
    """``--peak-tflops`` / ``--peak-tbps``: one compute peak for every data type, one bandwidth."""

    tflops: float | None = None
    tbps: float | None = None

    @property
    def source(self) -> str:
        given = [
            f"{name} {value:g}"
            for name, value in (("TFLOP/s", self.tflops), ("TB/s", self.tbps))
            if value is not None
        ]
        return "given on the command line: " + ", ".join(given) if given else ""


def device_peaks(devices: pl.DataFrame) -> pl.DataFrame:
    """One row per (rank, device) of ``devices`` (DEVICE_SCHEMA) with ``device_name``,
    ``gpu``, the ``peak_<dtype>_tflops`` columns, ``peak_tbps`` and ``peak_source``; the
    peaks are null where no row of ``PEAKS`` matches."""
    keys = ["rank", "device"]
    known = devices.select(*keys, device_name="name", num_sms="num_sms").unique(
        keys, keep="first", maintain_order=True
    )
    num_sms_fits = pl.col("num_sms_required").is_null() | (
        pl.col("num_sms_required") == pl.col("num_sms")
    )
    matched = (
        known.join(peaks_table(), how="cross")
        .filter(pl.col("device_name").str.contains(pl.col("name_pattern")) & num_sms_fits)
        .sort("order")
        .unique(keys, keep="first", maintain_order=True)
        .drop("device_name", "num_sms", "name_pattern", "num_sms_required", "order")
    )
    return known.drop("num_sms").join(matched, on=keys, how="left")


def with_override(frame: pl.DataFrame, override: PeakOverride | None) -> pl.DataFrame:
    """``frame``'s peak columns replaced by the override's values where it gives them."""
    if override is None or (override.tflops is None and override.tbps is None):
        return frame
    columns = []
    if override.tflops is not None:
        columns += [pl.lit(override.tflops).alias(f"peak_{d}_tflops") for d in PEAK_DTYPES]
    if override.tbps is not None:
        columns.append(pl.lit(override.tbps).alias("peak_tbps"))
    return frame.with_columns(
        *columns,
        peak_source=pl.concat_str(
            pl.lit(override.source), pl.col("peak_source"), separator="; ", ignore_nulls=True
        ),
    )
