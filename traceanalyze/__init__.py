"""traceanalyze: answers from PyTorch profiler (Kineto) traces, offline and fast."""

# Before the imports: the cache key (load/cache.py) reads it while the package is importing.
__version__ = "0.1.0"

# One function per command, with the command's name (the `occupancy` function takes the place
# of the module's name as an attribute; `from traceanalyze.occupancy import ...` still works).
from traceanalyze.api import (
    Loading,
    PerVariant,
    check,
    cold,
    comms,
    compare,
    critical_path,
    cudnn,
    diff,
    explain,
    graphs,
    idle,
    iterations,
    kernels,
    launches,
    memcpy,
    memory,
    occupancy,
    ranks,
    report,
    roofline,
    streams,
    summary,
)
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
    "Loading",
    "PerVariant",
    "SeparateTracesError",
    "Trace",
    "TraceAnalyzeError",
    "TraceFormatError",
    "TraceMeta",
    "Variant",
    "VariantSet",
    "check",
    "cold",
    "comms",
    "compare",
    "critical_path",
    "cudnn",
    "diff",
    "explain",
    "graphs",
    "idle",
    "iterations",
    "kernels",
    "launches",
    "load",
    "load_each",
    "load_variants",
    "memcpy",
    "memory",
    "occupancy",
    "ranks",
    "report",
    "roofline",
    "streams",
    "summary",
]
