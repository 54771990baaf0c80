"""traceanalyze: answers from PyTorch profiler (Kineto) traces, offline and fast."""

# Before the imports: the cache key (load/cache.py) reads it while the package is importing.
__version__ = "0.1.0"

from typing import TYPE_CHECKING

# One function per command, with the command's name (the occupancy model is the module
# traceanalyze.hardware.occupancy, so no function shadows a module).
from traceanalyze.api import (
    Loading,
    PerVariant,
    annotate,
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
    info,
    iterations,
    kernels,
    launches,
    memcpy,
    memory,
    occupancy,
    ranks,
    report,
    roofline,
    stacks,
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
from traceanalyze.load import SeparateTracesError, load_each

if TYPE_CHECKING:  # type checkers see the function; at run time it is the callable module
    from traceanalyze.load import load as load
else:
    # ``traceanalyze.load`` is the module traceanalyze/load/, callable as load(path): the
    # function does not shadow the module, so ``import traceanalyze.load`` works too.
    from traceanalyze import load
from traceanalyze.load.variants import Variant, VariantSet, load_variants
from traceanalyze.trace import IterationSource, Trace, TraceMeta

__all__ = [
    "AnalysisError",
    "CaptureError",
    "EmptyTraceError",
    "IterationSource",
    "Loading",
    "PerVariant",
    "SeparateTracesError",
    "Trace",
    "TraceAnalyzeError",
    "TraceFormatError",
    "TraceMeta",
    "Variant",
    "VariantSet",
    "annotate",
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
    "info",
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
    "stacks",
    "streams",
    "summary",
]
