"""capture: record a PyTorch profiler trace of every attention variant on a GPU box: warm
(`run_capture`, also with CUDA graphs) or from a cold start in fresh processes (`run_cold`).

The only package of the project that imports torch, and only inside functions: importing
``capture`` (or ``capture.cli``) works without torch. Needs torch and click; rich is optional.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
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

# Where each name lives; imported on first use (PEP 562), so that `import capture.errors` (which
# traceanalyze does for CaptureError) does not import the runner, the cold-start driver and
# their dependencies (about 0.07 s of every command's start).
_WHERE = {
    "run_cold": "capture.cold",
    "CaptureConfig": "capture.config",
    "ColdConfig": "capture.config",
    "CaptureError": "capture.errors",
    "ColdResult": "capture.manifest",
    "Manifest": "capture.manifest",
    "ProcessRecord": "capture.manifest",
    "VariantResult": "capture.manifest",
    "read_manifest": "capture.manifest",
    "write_manifest": "capture.manifest",
    "run_capture": "capture.run",
    "VARIANTS": "capture.variants",
    "AttentionSpec": "capture.variants",
    "Variant": "capture.variants",
}

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


def __getattr__(name: str) -> object:
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'capture' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
