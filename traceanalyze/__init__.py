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

if TYPE_CHECKING:  # type checkers see the names; at run time they are imported on first use
    from traceanalyze.api import schema as schema
    from traceanalyze.load import SeparateTracesError, load_each
    from traceanalyze.load import load as load
    from traceanalyze.load.variants import Variant, VariantSet, load_variants
    from traceanalyze.trace import IterationSource, Trace, TraceMeta

# Where the loading names live, imported on first use (PEP 562) like the command functions
# below: importing them brings in Polars (0.3 s), and the ``traceanalyze`` command must reach
# its Ctrl-C handler (traceanalyze/__main__.py) before that, so ``import traceanalyze`` costs
# only the error classes. ``traceanalyze.load`` and ``traceanalyze.schema`` are modules that
# are callable (load(path), schema(name)): the function does not shadow the module, so
# ``import traceanalyze.load`` works too.
_LOADING_NAMES = {
    "load": None,
    "schema": None,
    "SeparateTracesError": "traceanalyze.load",
    "load_each": "traceanalyze.load",
    "Variant": "traceanalyze.load.variants",
    "VariantSet": "traceanalyze.load.variants",
    "load_variants": "traceanalyze.load.variants",
    "IterationSource": "traceanalyze.trace",
    "Trace": "traceanalyze.trace",
    "TraceMeta": "traceanalyze.trace",
}

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


# The names of __all__ not bound above nor loading names: the command functions, looked up
# in api on first use.
_API_NAMES = frozenset(__all__) - set(globals()) - set(_LOADING_NAMES)


def __getattr__(name: str) -> object:
    home = _LOADING_NAMES.get(name)
    if home is not None:
        value = getattr(importlib.import_module(home), name)
        globals()[name] = value
        return value
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
