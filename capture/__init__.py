"""capture: record a PyTorch profiler trace of every attention variant on a GPU box.

The only package of the project that imports torch, and only inside functions: importing
``capture`` (or ``capture.cli``) works without torch. Needs torch and click; rich is optional.
"""

from capture.config import CaptureConfig
from capture.errors import CaptureError
from capture.manifest import Manifest, VariantResult, read_manifest, write_manifest
from capture.run import run_capture
from capture.variants import VARIANTS, Variant

__all__ = [
    "VARIANTS",
    "CaptureConfig",
    "CaptureError",
    "Manifest",
    "Variant",
    "VariantResult",
    "read_manifest",
    "run_capture",
    "write_manifest",
]
