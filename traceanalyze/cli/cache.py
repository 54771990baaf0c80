"""`traceanalyze cache info` and `cache clear`: the cache of loaded traces."""

from __future__ import annotations

from pathlib import Path

import click

from traceanalyze.cli.options import Output, output_options
from traceanalyze.load.cache import cache_info, clear_cache, default_cache_dir
from traceanalyze.render.cache import CACHE_CLEARED, CACHE_INFO

_CACHE_DIR = click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The cache folder (default: $TRACEANALYZE_CACHE_DIR, else ~/.cache/traceanalyze).",
)


@click.group()
def cache() -> None:
    """The cache that makes a second load of a trace near-instant.

    Its size is limited by $TRACEANALYZE_CACHE_MAX (default 2G; e.g. 500M; 0 turns caching
    off): the least recently used entries are removed first.
    """


@cache.command("info")
@_CACHE_DIR
@output_options
def info(cache_dir: Path | None, out: Output) -> None:
    """Where the cache is, how many entries it holds, their size and the size limit.

    \b
    Example:
      traceanalyze cache info --format json
    """
    out.write(CACHE_INFO.render(cache_info(cache_dir or default_cache_dir()), out.format))


@cache.command("clear")
@_CACHE_DIR
@output_options
def clear(cache_dir: Path | None, out: Output) -> None:
    """Remove every cached trace (the traces themselves are untouched).

    \b
    Example:
      traceanalyze cache clear
    """
    out.write(CACHE_CLEARED.render(clear_cache(cache_dir or default_cache_dir()), out.format))


COMMANDS = (cache,)
