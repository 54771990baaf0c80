"""The devices of ``[memory]`` events: PyTorch's c10::DeviceType codes, as data.

A name per code and whether it is an accelerator; ``device`` names like ``cuda:0`` and ``cpu``
are built from them. ROCm builds of PyTorch write HIP (6) for the GPU.
"""

from __future__ import annotations

import polars as pl

# c10::DeviceType code -> (name, is an accelerator).
DEVICE_TYPES: dict[int, tuple[str, bool]] = {
    0: ("cpu", False),
    1: ("cuda", True),
    6: ("hip", True),
    12: ("xpu", True),
    13: ("mps", True),
    19: ("mtia", True),
    20: ("privateuse1", True),
}
_NAMES = {code: name for code, (name, _) in DEVICE_TYPES.items()}
_ACCELERATORS = [code for code, (_, accelerator) in DEVICE_TYPES.items() if accelerator]


def device_name() -> pl.Expr:
    """``cuda:0``, ``hip:1``, ``cpu`` (the host has no index), ``device7:0`` for an unknown code."""
    kind = pl.col("device_type").replace_strict(
        _NAMES,
        default=pl.lit("device") + pl.col("device_type").cast(pl.String),
        return_dtype=pl.String,
    )
    indexed = pl.col("device").is_not_null() & (pl.col("device") >= 0)
    return (
        pl.when(indexed)
        .then(pl.concat_str(kind, pl.lit(":"), pl.col("device").cast(pl.String)))
        .otherwise(kind)
        .alias("device_name")
    )


def is_accelerator() -> pl.Expr:
    """Whether the event's device is a GPU (or another accelerator), not the host."""
    return pl.col("device_type").is_in(_ACCELERATORS).alias("on_accelerator")
