"""How a GPU is described: NVIDIA by compute capability and SMs, AMD by gfx architecture and
compute units (ROCm traces write ``computeMajor``/``computeMinor`` too, but for an MI GPU those
are HIP's architecture numbers, not a CUDA compute capability)."""

from __future__ import annotations

import polars as pl

# AMD GPUs by the name ROCm reports -> their gfx target (AMD's ROCm hardware specifications).
AMD_ARCHES = pl.DataFrame(
    {
        "pattern": [
            r"\bMI100\b",
            r"\bMI2(?:10|50X?)\b",
            r"\bMI3(?:00[AX]|08X|25X)\b",
            r"\bMI35[05]X\b",
        ],
        "gfx_arch": ["gfx908", "gfx90a", "gfx942", "gfx950"],
    }
)
AMD_NAME = r"(?i)\b(?:AMD|Radeon|Instinct)\b"


def device_label(*, rocm: pl.Expr | bool = False) -> pl.Expr:
    """A one-line description of each row of a Trace's ``devices`` frame; ``rocm`` says the
    trace came from ROCm (its devices are AMD's whatever their name says).

    ``NVIDIA H200 (compute capability 9.0, 132 SMs)``; ``AMD Instinct MI210 (gfx90a, 104 CUs)``;
    an AMD GPU not in :data:`AMD_ARCHES` gets its architecture family from HIP's major number
    (``AMD Radeon Graphics (gfx9, 104 CUs)``). Missing properties leave the name alone.
    """
    name = pl.col("name")
    amd = pl.lit(rocm) if isinstance(rocm, bool) else rocm
    # A 64-wide wavefront is AMD's (NVIDIA's warps are 32): "AMD Radeon Graphics" or no name.
    amd = amd | name.str.contains(AMD_NAME).fill_null(False) | (pl.col("warp_size") == 64)
    amd = amd.fill_null(False)
    arch = pl.coalesce(
        *(
            pl.when(name.str.contains(pattern)).then(pl.lit(gfx))
            for pattern, gfx in AMD_ARCHES.iter_rows()  # the rule table, to build one expression
        ),
        pl.format("gfx{}", pl.col("compute_major")),
    )
    # pl.format is null when any part is: fall back to what the trace does say.
    return pl.coalesce(
        pl.when(amd)
        .then(pl.format("{} ({}, {} CUs)", name, arch, pl.col("num_sms")))
        .otherwise(
            pl.format(
                "{} (compute capability {}.{}, {} SMs)",
                name,
                pl.col("compute_major"),
                pl.col("compute_minor"),
                pl.col("num_sms"),
            )
        ),
        name,
        pl.format("device {}", pl.col("device")),
    )
