"""Rendering what `cache info` finds and what `cache clear` removed."""

from __future__ import annotations

from dataclasses import asdict

from traceanalyze.load.cache import CacheInfo
from traceanalyze.render.table import number_cell, to_csv, to_json
from traceanalyze.units import byte_size


def render_cache_info(info: CacheInfo, fmt: str) -> str:
    if fmt in ("json", "csv"):
        return to_json(asdict(info)) if fmt == "json" else to_csv(asdict(info))
    limit = f"a limit of {byte_size(info.max_bytes)}" if info.max_bytes else "caching off"
    return (
        f"Cache at {info.location}: {_entries(info.entries)} in {byte_size(info.size_bytes)} "
        f"({limit}; set TRACEANALYZE_CACHE_MAX to change it).\n"
    )


def render_cache_cleared(removed: CacheInfo, fmt: str) -> str:
    if fmt in ("json", "csv"):
        return to_json(asdict(removed)) if fmt == "json" else to_csv(asdict(removed))
    return (
        f"Removed {_entries(removed.entries)} ({byte_size(removed.size_bytes)}) "
        f"from {removed.location}.\n"
    )


def _entries(count: int) -> str:
    return f"{number_cell(count)} {'entry' if count == 1 else 'entries'}"
