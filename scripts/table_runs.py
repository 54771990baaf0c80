"""Every table every command writes, run over real traces: the command lines, and a draft of
the declared schemas from what the commands write (for a new table or column).

Each command's tables are read from its options (``--table``, ``--by``: their choices); a
command without either writes one table. ``runs(trace)`` lists, for one trace, the arguments
that write each table; tests/test_schemas.py runs them all with a strict schema. Run from the
repository root:

    PYTHONPATH=$PWD python scripts/table_runs.py --draft idle   # what idle's tables hold
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import click
import polars as pl

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_traces"
# Commands that take no trace or write no table.
NOT_TABLES = frozenset({"capture", "cache", "annotate", "report", "schema"})
TWO_TRACES = frozenset({"diff", "explain"})
FOLDERS = frozenset({"ranks", "compare"})  # take a folder (or several paths)
EXTRA = {"check": ("-e", "kernels_per_iter >= 0", "-e", "category:other >= 0")}
# The option a command's views are chosen with, as the command line spells it.
CHOOSERS = ("--table", "--by")


def views(command: click.Command) -> tuple[str | None, list[str]]:
    """The option that picks ``command``'s table and its choices ([''] for one table; for
    `sql`, the tables a query reads, picked by its FROM)."""
    if command.name == "sql":
        from traceanalyze.analyses.sql import TABLES

        return "FROM", list(TABLES)
    for param in command.params:
        flags = getattr(param, "opts", [])
        chooser = next((f for f in flags if f in CHOOSERS), None)
        if chooser and isinstance(param.type, click.Choice) and not param.hidden:  # type: ignore[attr-defined]
            return chooser, [str(c) for c in param.type.choices]
    return None, [""]


def table_commands() -> dict[str, click.Command]:
    from traceanalyze.cli import main

    return {name: c for name, c in main.commands.items() if name not in NOT_TABLES}


def runs(trace: Path, folder: Path | None = None) -> Iterator[tuple[str, str, list[str]]]:
    """(command, view, arguments without --format) for every table of every command on
    ``trace`` (``folder``: a folder holding it alone, for the commands that take folders)."""
    for name, command in table_commands().items():
        chooser, choices = views(command)
        if name in FOLDERS and folder is None:
            continue
        inputs = [str(folder if name in FOLDERS else trace)] * (2 if name in TWO_TRACES else 1)
        for view in choices:
            chosen = [chooser, view] if chooser else []
            if chooser == "FROM":  # `sql TRACE QUERY`: the whole table
                chosen = [f"SELECT * FROM {view}"]
            yield name, view, [name, *inputs, *EXTRA.get(name, ()), *chosen]


def alone_in_folder(trace: Path, folder: Path) -> Path:
    """``folder``, made to hold ``trace`` alone (a link to it), for the commands that take
    a folder."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / trace.name).symlink_to(trace.resolve())
    return folder


def load_once() -> None:
    """Each trace loaded once for every command (the analyses memoised per Trace then run
    once too)."""
    from traceanalyze.cli import options

    loaded = functools.cache(options.load)
    options.load = lambda path, **_: loaded(Path(path).resolve())  # type: ignore[assignment]


def _observe() -> dict[str, dict[str, set[str]]]:
    """Make every table pass unconformed and record each column's dtypes by table."""
    from traceanalyze import tables

    seen: dict[str, dict[str, set[str]]] = {}

    def recording(frame: pl.DataFrame, name: str) -> pl.DataFrame:
        columns = seen.setdefault(name, {})
        for column, dtype in frame.schema.items():
            columns.setdefault(column, set()).add(str(dtype))
        return frame

    # Every caller imported conform itself: its code is swapped, to run with the tables
    # module's globals, where `_recording` is then bound (a drafting aid, never in a test).
    tables.__dict__["_recording"] = recording
    tables.conform.__code__ = _via_recording.__code__
    return seen


def _via_recording(frame: pl.DataFrame, name: str) -> pl.DataFrame:
    return _recording(frame, name)  # type: ignore[name-defined, no-any-return]  # noqa: F821


def draft(commands: list[str], traces: list[Path]) -> dict[str, dict[str, set[str]]]:
    from click.testing import CliRunner

    from traceanalyze.cli import main

    seen = _observe()
    load_once()
    with tempfile.TemporaryDirectory() as scratch:
        for index, trace in enumerate(traces):
            for name, _view, args in runs(
                trace, alone_in_folder(trace, Path(scratch) / str(index))
            ):
                if commands and name not in commands:
                    continue
                CliRunner().invoke(main, [*args, "--format", "csv"])
    return seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draft", nargs="*", metavar="COMMAND", help="commands (default all)")
    parser.add_argument("traces", nargs="*", type=Path, help="default: the sample traces")
    options = parser.parse_args()
    traces = options.traces or sorted(SAMPLES.rglob("*.json.gz"))
    for name, columns in sorted(draft(options.draft or [], traces).items()):
        print(f"{name}:")
        for column, dtypes in columns.items():
            print(f"    {column}: {' | '.join(sorted(dtypes))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
