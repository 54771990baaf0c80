"""Rendering what `cache info` finds and what `cache clear` removed."""

from __future__ import annotations

from dataclasses import asdict

import polars as pl

from traceanalyze.load.cache import CacheInfo
from traceanalyze.render.formats import Forms
from traceanalyze.render.table import number_cell
from traceanalyze.units import byte_size


def cache_info_markdown(info: CacheInfo) -> str:
    limit = f"a limit of {byte_size(info.max_bytes)}" if info.max_bytes else "caching off"
    return (
        f"Cache at {info.location}: {_entries(info.entries)} in {byte_size(info.size_bytes)} "
        f"({limit}; set TRACEANALYZE_CACHE_MAX to change it).\n"
    )


def cache_cleared_markdown(removed: CacheInfo) -> str:
    return (
        f"Removed {_entries(removed.entries)} ({byte_size(removed.size_bytes)}) "
        f"from {removed.location}.\n"
    )


def _entries(count: int) -> str:
    return f"{number_cell(count)} {'entry' if count == 1 else 'entries'}"


def _record(info: CacheInfo, **_options: object) -> dict[str, object]:
    return asdict(info)


def _row(info: CacheInfo, **_options: object) -> pl.DataFrame:
    return pl.DataFrame([asdict(info)])


# `cache info` and `cache clear`: JSON the record, its table one row; markdown a sentence.
CACHE_INFO: Forms[CacheInfo] = Forms(
    markdown=cache_info_markdown, json=_record, tables={"": _row}, command="cache info"
)
CACHE_CLEARED: Forms[CacheInfo] = Forms(
    markdown=cache_cleared_markdown, json=_record, tables={"": _row}, command="cache clear"
)
