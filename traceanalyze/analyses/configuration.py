"""What a trace ran: GPU, backward or not, tensor dtypes, and the capture's shapes where a
manifest says them. ``diff`` and ``explain`` warn when two traces ran different things."""

from __future__ import annotations

from typing import Any

import polars as pl

from traceanalyze.trace import Trace

# Capture configuration keys worth comparing (the manifest's `config`).
CAPTURE_KEYS = ("batch", "heads", "seq", "head_dim", "dtype", "causal", "backward")
# "Input type" entries that are not tensor dtypes.
_NOT_DTYPES = ("", "Scalar", "ScalarList", "TensorList", "GenericList", "None", "Device", "Layout")
_BACKWARD = r"Backward\d*$|^autograd::engine::evaluate_function"


def configuration(trace: Trace, capture: dict[str, Any] | None = None) -> dict[str, Any]:
    """The trace's configuration; ``capture`` is the manifest's ``config`` where known."""
    names = trace.devices["name"].drop_nulls().unique().sort().to_list()
    found: dict[str, Any] = {
        "gpu": ", ".join(names) or None,
        "backward": bool(trace.cpu["name"].str.contains(_BACKWARD).any()),
        "dtypes": _dtypes(trace),
    }
    for key in CAPTURE_KEYS:
        if capture and key in capture:
            found[key] = capture[key]
    return found


def _dtypes(trace: Trace) -> list[str] | None:
    """Tensor dtypes among the ops' recorded input types (None without record_shapes)."""
    types = trace.cpu["input_types"].drop_nulls()
    if not types.len():
        return None
    decoded = types.str.json_decode(pl.List(pl.String)).explode().drop_nulls()
    return decoded.filter(~decoded.is_in(_NOT_DTYPES)).unique().sort().to_list()


def differences(base: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """One sentence per configuration key that both traces state and that differs."""
    return [
        f"the traces differ in {key}: {base[key]} vs {new[key]}"
        for key in base
        if key in new and base[key] is not None and new[key] is not None and base[key] != new[key]
    ]
