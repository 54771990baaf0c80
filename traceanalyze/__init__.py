"""traceanalyze: answers from PyTorch profiler (Kineto) traces, offline and fast."""

# Before the imports: the cache key (load/cache.py) reads it while the package is importing.
__version__ = "0.1.0"

from traceanalyze.errors import (
    AnalysisError,
    CaptureError,
    EmptyTraceError,
    TraceAnalyzeError,
    TraceFormatError,
)
from traceanalyze.load import SeparateTracesError, load, load_each
from traceanalyze.load.variants import Variant, VariantSet, load_variants
from traceanalyze.trace import Trace, TraceMeta

__all__ = [
    "AnalysisError",
    "CaptureError",
    "EmptyTraceError",
    "SeparateTracesError",
    "Trace",
    "TraceAnalyzeError",
    "TraceFormatError",
    "TraceMeta",
    "Variant",
    "VariantSet",
    "load",
    "load_each",
    "load_variants",
]
