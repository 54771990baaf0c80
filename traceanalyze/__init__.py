"""traceanalyze: answers from PyTorch profiler (Kineto) traces, offline and fast."""

from traceanalyze.errors import (
    AnalysisError,
    CaptureError,
    EmptyTraceError,
    TraceAnalyzeError,
    TraceFormatError,
)
from traceanalyze.load import load, load_each
from traceanalyze.trace import Trace, TraceMeta

__all__ = [
    "AnalysisError",
    "CaptureError",
    "EmptyTraceError",
    "Trace",
    "TraceAnalyzeError",
    "TraceFormatError",
    "TraceMeta",
    "load",
    "load_each",
]
__version__ = "0.1.0"
