"""`sql`: SQL over a trace's tables, through Polars' SQL context (no database, no copy to one).

The tables are the loaded trace's frames, classified and linked, with times as integer
nanoseconds on the trace's clock (``ts_ns``, ``dur_ns``) and durations in microseconds too
(``dur_us``, what every other table states):

- ``gpu``: every GPU activity (kernel, memcpy, memset) with its category, its launching call
  and op, ``op_chain`` (its launching op and the ops around it, outermost first, joined by
  `` > ``), ``stack`` (every operator and ``record_function`` region open around its launch
  call, profiler steps included; Python frames are not in it), the outermost annotation and
  its iteration; ``kernels``: the kernels.
- ``cpu_ops``: CPU operators (the profiler's ``cpu_op`` events) with their parent and depth.
- ``annotations``: ``record_function`` regions and profiler steps.
- ``runtime``: CUDA/HIP runtime and driver calls.
- ``memory``: ``[memory]`` allocation and free events (``profile_memory=True``).
- ``iterations``: the `iterations` command's table.
- ``modules``: the ``nn.Module`` forward calls (``with_stack=True`` or ``with_modules=True``);
  ``gpu``'s ``module_stack`` names those open around each activity's launch call.

Only the tables a query names are built. Each table's columns are declared
(`traceanalyze schema sql`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable

import polars as pl

from traceanalyze.analyses.activities import activities
from traceanalyze.analyses.cputree import op_chains
from traceanalyze.analyses.stacks import module_frames, modules_of_ops
from traceanalyze.analyses.step.model import step_rows
from traceanalyze.errors import UsageError
from traceanalyze.tables import conform, declared
from traceanalyze.trace import Trace

# Joins the CPU ops of a launch's chain in the ``op_chain`` column.
CHAIN_SEPARATOR = " > "
RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
# What ``stack`` names: operators and the record_function regions around them.
STACK_CATS = ("cpu_op", "user_annotation")


def _dur_us() -> pl.Expr:
    return (pl.col("dur_ns") / 1e3).alias("dur_us")


def gpu_table(trace: Trace) -> pl.DataFrame:
    """Every GPU activity, classified, with its launching op's chain of operators and the
    whole CPU stack of its launch call (operators and annotations: a region opened inside the
    launching op, such as ``nccl:all_to_all`` under ``record_param_comms``, is in it too)."""
    frame = activities(trace)
    chains = op_chains(trace.cpu, frame["op_id"]).list.join(CHAIN_SEPARATOR)
    calls = _launch_calls(trace, frame)
    stacks = op_chains(trace.cpu, calls, STACK_CATS)
    modules = modules_of_ops(trace, calls, CHAIN_SEPARATOR)
    module_stack = (
        calls.alias("op_id")
        .to_frame()
        .join(modules, on="op_id", how="left", maintain_order="left")["frame"]
    )
    return frame.with_columns(
        _dur_us(),
        placement(),
        op_chain=chains,
        stack=stacks.list.join(CHAIN_SEPARATOR),
        module=module_stack.str.split(CHAIN_SEPARATOR).list.last(),
        module_stack=module_stack,
    )


# Where a GPU activity stands against the iterations (``placement``): counted in one, launched
# by a call outside every iteration, or with no launch call in the trace at all (the profiler
# dropped it, or it was launched before the trace began), which no iteration can be given.
IN_ITERATION, LAUNCHED_OUTSIDE, NO_LAUNCH = "iteration", "launched_outside_iterations", "no_launch"


def placement() -> pl.Expr:
    """``placement`` of each activity, from its ``iteration`` and ``linked`` columns."""
    return (
        pl.when(pl.col("iteration").is_not_null())
        .then(pl.lit(IN_ITERATION))
        .when(pl.col("linked"))
        .then(pl.lit(LAUNCHED_OUTSIDE))
        .otherwise(pl.lit(NO_LAUNCH))
        .alias("placement")
    )


def modules_table(trace: Trace) -> pl.DataFrame:
    """Every ``nn.Module`` forward call the trace records (``with_stack``/``with_modules``)."""
    return module_frames(trace.python).rename({"frame": "name"}).with_columns(_dur_us())


def _launch_calls(trace: Trace, frame: pl.DataFrame) -> pl.Series:
    """Each activity's launch call (its row id in ``trace.cpu``; null where unlinked): the
    first runtime or driver call with its rank and correlation, as linking chose it."""
    calls = (
        trace.cpu.filter(pl.col("cat").is_in(RUNTIME_CATS) & pl.col("correlation").is_not_null())
        .select("rank", "correlation", call_id="op_id")
        .unique(subset=["rank", "correlation"], keep="first", maintain_order=True)
    )
    keyed = frame.select("rank", "correlation").with_row_index("row")
    joined = keyed.join(calls, on=["rank", "correlation"], how="left").sort("row")
    return joined["call_id"]


def kernels_table(trace: Trace) -> pl.DataFrame:
    return gpu_table(trace).filter(pl.col("kind") == "kernel")


def _cpu(trace: Trace, cats: pl.Expr) -> pl.DataFrame:
    return trace.cpu.filter(cats).with_columns(_dur_us())


# Table name -> how it is built from a trace (each conformed to ``sql.<name>``).
TABLES: dict[str, Callable[[Trace], pl.DataFrame]] = {
    "gpu": gpu_table,
    "kernels": kernels_table,
    "cpu_ops": lambda trace: _cpu(trace, pl.col("cat") == "cpu_op"),
    "annotations": lambda trace: _cpu(trace, pl.col("cat") == "user_annotation"),
    "runtime": lambda trace: _cpu(trace, pl.col("cat").is_in(RUNTIME_CATS)),
    "memory": lambda trace: trace.memory,
    "iterations": step_rows,
    "modules": modules_table,
}


def named_tables(query: str) -> list[str]:
    """The tables ``query`` names (a word of the query equal to a table's name)."""
    words = {w.lower() for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", query)}
    return [name for name in TABLES if name in words]


def tables_for(trace: Trace, query: str) -> dict[str, pl.DataFrame]:
    """The tables ``query`` names, built from ``trace`` as declared (the columns a table
    declares are those a query sees)."""
    return {name: _declared(TABLES[name](trace), f"sql.{name}") for name in named_tables(query)}


def _declared(frame: pl.DataFrame, name: str) -> pl.DataFrame:
    columns = declared(name).schema.names()
    return conform(frame.select(c for c in columns if c in frame.columns), name)


def run_query(query: str, tables: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """``query`` over ``tables``; a query Polars cannot run is one short :class:`UsageError`
    naming the problem (not Polars' plan dump)."""
    if not query.strip():
        raise UsageError("the query is empty", None, _FIX)
    if not _QUERY_START.match(query):
        raise UsageError(_not_a_query(query), None, _FIX)
    context = pl.SQLContext(frames=tables)
    try:
        return context.execute(query, eager=True)
    except (pl.exceptions.PolarsError, ValueError) as exc:
        raise UsageError(_problem(str(exc), tables), None, _FIX) from None


# A query reads: SELECT or WITH first (after comments and opening parentheses). Polars' SQL
# also takes statements (DROP TABLE, CREATE TABLE, TRUNCATE, SHOW TABLES, EXPLAIN) that change
# or describe its context, not the trace; such a statement's "result" would read as "No rows".
_QUERY_START = re.compile(
    r"\s*(?:(?:--[^\n]*(?:\n|$)|/\*.*?\*/|\()\s*)*(?:SELECT|WITH)\b", re.IGNORECASE | re.DOTALL
)


def _not_a_query(query: str) -> str:
    first = query.split(maxsplit=1)[0] if query.split() else ""
    return f"only SELECT and WITH queries are run, not {first[:40]!r} (the tables are read-only)"


# Polars' messages: an unknown column (two wordings), an unknown table, and where the
# plan it appends begins (cut there: the line names the problem, not the plan).
_NO_COLUMN = re.compile(
    r"""unable to find column "([^"]+)"|no column named '([^']+)' found in table '([^']+)'"""
)
_NO_TABLE = re.compile(r"relation '([^']+)' was not found")
_PLAN = re.compile(r"\s*(Resolved plan until failure|This error occurred|; valid columns)")
# The longest reason Polars' message may give on the line (the rest is cut at a word).
_REASON_CHARS = 160


def _problem(message: str, tables: dict[str, pl.DataFrame]) -> str:
    """One short line for Polars' ``message``: an unknown column with the columns of the
    tables the query names that are nearest it, an unknown table with the tables, else the
    first sentence of Polars' reason."""
    if found := _NO_COLUMN.search(message):
        column = found[1] or found[2]
        return f'no column "{column}" in {_columns_near(column, tables)}'
    if found := _NO_TABLE.search(message):
        return f'no table "{found[1]}"; the tables are {", ".join(TABLES)}'
    reason = " ".join(_PLAN.split(message, maxsplit=1)[0].split()) or "Polars refused it"
    if len(reason) > _REASON_CHARS:
        reason = reason[:_REASON_CHARS].rsplit(" ", 1)[0] + " ..."
    return f"the query failed: {reason.rstrip('.')}"


def _columns_near(column: str, tables: dict[str, pl.DataFrame]) -> str:
    """The tables a query names, with their column counts and the columns nearest
    ``column`` (those sharing its first word, then those spelled alike)."""
    names = sorted({c for frame in tables.values() for c in frame.columns})
    stem = column.lower().split("_")[0][:3]
    near = [c for c in names if stem and c.startswith(stem)]
    near += [c for c in difflib.get_close_matches(column, names, n=4, cutoff=0.6) if c not in near]
    where = ", ".join(f"{name} ({frame.width} columns)" for name, frame in tables.items())
    return (where or "the tables it names") + (f"; nearest: {', '.join(near[:5])}" if near else "")


_FIX = "`traceanalyze schema sql` lists the tables and their columns (Polars' SQL dialect)"
