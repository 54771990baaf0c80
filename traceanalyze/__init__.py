"""traceanalyze: answers from PyTorch profiler (Kineto) traces, offline and fast."""

# Before the imports: the cache key (load/cache.py) reads it while the package is importing.
__version__ = "0.1.0"

import importlib
from typing import TYPE_CHECKING

# The error classes a caller catches (every one a TraceAnalyzeError).
from traceanalyze.errors import (
    AnalysisError,
    CacheSettingError,
    CaptureError,
    EmptyTraceError,
    EngineError,
    ExpectationFailed,
    NotATraceError,
    TraceAnalyzeError,
    TraceFormatError,
    TraceReadError,
    UsageError,
)
from traceanalyze.load import SeparateTracesError, load_each

if TYPE_CHECKING:  # type checkers see the function; at run time it is the callable module
    from traceanalyze.load import load as load
else:
    # ``traceanalyze.load`` is the module traceanalyze/load/, callable as load(path): the
    # function does not shadow the module, so ``import traceanalyze.load`` works too.
    from traceanalyze import load
if TYPE_CHECKING:  # the function; at run time the callable module (Trace frames' schemas)
    from traceanalyze.api import schema as schema
else:
    from traceanalyze import schema
from traceanalyze.load.variants import Variant, VariantSet, load_variants
from traceanalyze.trace import IterationSource, Trace, TraceMeta

# One function per command, with the command's name (the occupancy model is the module
# traceanalyze.hardware.occupancy, so no function shadows a module). Imported on first use
# (PEP 562): they bring in every analysis and renderer, which a process that only loads
# traces (a rank worker, a notebook's first cell) need not pay for (0.3 s of 0.7 s).
if TYPE_CHECKING:
    from traceanalyze.api import (
        Loading,
        PerVariant,
        annotate,
        attention,
        audit,
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
        sql,
        stacks,
        streams,
        summary,
    )


__all__ = [
    "AnalysisError",
    "CacheSettingError",
    "CaptureError",
    "EmptyTraceError",
    "EngineError",
    "ExpectationFailed",
    "IterationSource",
    "Loading",
    "NotATraceError",
    "PerVariant",
    "SeparateTracesError",
    "Trace",
    "TraceAnalyzeError",
    "TraceFormatError",
    "TraceMeta",
    "TraceReadError",
    "UsageError",
    "Variant",
    "VariantSet",
    "annotate",
    "attention",
    "audit",
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
    "schema",
    "sql",
    "stacks",
    "streams",
    "summary",
]


# The names of __all__ not bound above: the command functions, looked up in api on first use.
_API_NAMES = frozenset(__all__) - set(globals())


def __getattr__(name: str) -> object:
    if name in _API_NAMES:
        from traceanalyze import api

        value = getattr(api, name)
        globals()[name] = value
        return value
    # A submodule never imported yet (``traceanalyze.api``, ``traceanalyze.analyses``): what
    # importing every command function used to bind as a side effect.
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as error:
        if error.name != f"{__name__}.{name}":
            raise  # the submodule exists and one of its own imports is missing
    raise AttributeError(f"module 'traceanalyze' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public names only (``dir(ta)`` in a notebook), not the imports."""
    return sorted({*__all__, "__version__"})
