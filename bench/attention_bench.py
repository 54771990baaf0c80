"""Seconds `attention` costs beyond loading its Trace from the Parquet cache (issue 39).

Each figure is the least of ``--runs`` of ``attention(load(...))`` minus the least of
``--runs`` cached loads, so the iteration choice and the classification, made once per Trace,
are included; ``--against`` runs a peer analysis the same way in the same process (default
``roofline``, which also reads every op's recorded shapes), so the ratio holds on a busy
machine. Target: under 0.5 s on the 175 MB bench trace.

    python bench/attention_bench.py [TRACE] [--runs 5]

(From a worktree other than the installed one, put the worktree first: PYTHONPATH=.)
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

# The sibling script's trace default and run picker (this folder is on the path when a script
# of it runs).
from beyond_cache_bench import DEFAULT_TRACE, least

from traceanalyze import load
from traceanalyze.analyses.attention import attention
from traceanalyze.analyses.roofline.model import roofline
from traceanalyze.analyses.summary import summary

PEERS: dict[str, Callable[..., Any]] = {"roofline": roofline, "summary": summary}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--against", choices=sorted(PEERS), default="roofline")
    parser.add_argument("--cache-dir", type=Path, default=None)
    args = parser.parse_args()

    def loaded() -> Any:
        return load(args.trace, cache_dir=args.cache_dir)

    loaded()  # fills the cache
    base = least(loaded, args.runs)
    for name, analysis in (("attention", attention), (args.against, PEERS[args.against])):
        both = least(lambda a=analysis: a(loaded()), args.runs)
        wall, cpu = both[0] - base[0], both[1] - base[1]
        print(f"{name}: beyond loading wall {wall:.3f} s, CPU {cpu:.3f} s")
    result = attention(loaded())
    print(f"{result.calls.height} calls, {result.rows.height} rows; {result.findings[0]}")


if __name__ == "__main__":
    main()
