"""capture: record a PyTorch profiler trace of every attention variant on a GPU box: warm
(`run_capture`, also with CUDA graphs) or from a cold start in fresh processes (`run_cold`).

The only package of the project that imports torch, and only inside functions: importing
``capture`` (or ``capture.cli``) works without torch. Needs torch and click; rich is optional.
"""

from capture.cold import run_cold
from capture.config import CaptureConfig, ColdConfig
from capture.errors import CaptureError
from capture.manifest import (
    ColdResult,
    Manifest,
    ProcessRecord,
    VariantResult,
    read_manifest,
    write_manifest,
)
from capture.run import run_capture
from capture.variants import VARIANTS, AttentionSpec, Variant

__all__ = [
    "VARIANTS",
    "AttentionSpec",
    "CaptureConfig",
    "CaptureError",
    "ColdConfig",
    "ColdResult",
    "Manifest",
    "ProcessRecord",
    "Variant",
    "VariantResult",
    "read_manifest",
    "run_capture",
    "run_cold",
    "write_manifest",
]
