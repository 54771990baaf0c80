"""The one error capture raises on purpose.

``capture`` runs on GPU machines where ``traceanalyze`` (and polars) may be absent, so it keeps
its own exception instead of importing ``traceanalyze.errors``. The CLI turns it into one line on
stderr and exit status 1.
"""

from __future__ import annotations


class CaptureError(Exception):
    """Recording traces cannot start or finish (no torch, no CUDA, unwritable output, ...)."""

    exit_code = 1
