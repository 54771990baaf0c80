"""Every figure a command prints is defined in docs/ (issue 41's newcomer pass met ~30 that were
not). Walks the declared tables (tests/test_schemas.py holds every command's output to them on
every trace): each numeric column must have a definition line in docs/ (``- `name`: ...``) or be
built from a defined figure by one of the rules docs/formats.md states (``base_X``, ``new_X``,
``X_delta``, ``X_step_min``/``_max`` of a figure ``X`` or of ``X_per_iter``, a per-step
table's ``X`` for ``X_per_iter``). Definitions are written once in the code
(``traceanalyze/tables/definitions.py`` or an analysis' DEFINITIONS dict) and printed into docs/
by ``scripts/readme_tour.py``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from traceanalyze.tables.declared import DECLARED
from traceanalyze.tables.definitions import COLUMN_DEFINITIONS

DOCS = Path(__file__).resolve().parents[1] / "docs"
# Tables of one row per step: their X is the step's value of the figure X_per_iter.
PER_STEP = {("iterations", ""), ("sql", "iterations"), ("streams", "iteration")}
PER_STEP |= {("critical-path", "iterations")}
# Tables that describe the tool, not a trace.
NOT_FIGURES = {"schema", "cache info", "cache clear"}


def _docs() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(DOCS.glob("*.md")))


def _defined_names(docs: str) -> set[str]:
    """Names with a definition line: ``- `name`: ...`` or ``- `a`, `name` (...): ...``, or a
    ``*name*:`` line of a definitions list the report and docs print."""
    names: set[str] = set()
    for line in re.findall(r"^\s*[-*] (.+)$", docs, re.MULTILINE):
        head = re.match(r"((?:`[a-z0-9_]+`(?:,? (?:and |or )?)?)+)(?: \([^)]*\))?: ", line)
        if head:
            names |= set(re.findall(r"`([a-z0-9_]+)`", head[1]))
        names |= set(re.findall(r"^\*([a-z0-9_ ]+)\*: ", line))
    return names


def _defined(column: str, table: tuple[str, str], names: set[str]) -> bool:
    if column in names:
        return True
    for prefix in ("base_", "new_"):
        if column.startswith(prefix) and column.removeprefix(prefix) in names:
            return True
    for suffix in ("_delta", "_step_min", "_step_max"):
        if column.endswith(suffix) and column.removesuffix(suffix) in names:
            return True
    for suffix in ("_step_min", "_step_max"):  # the steps' values of X_per_iter
        if column.endswith(suffix) and f"{column.removesuffix(suffix)}_per_iter" in names:
            return True
    return table in PER_STEP and f"{column}_per_iter" in names


def _undefined() -> dict[str, list[str]]:
    names = _defined_names(_docs())
    missing: dict[str, list[str]] = {}
    for table in DECLARED:
        if table.command in NOT_FIGURES:
            continue
        for column, dtype in table.columns.items():
            key = (table.command, table.view)
            if dtype.is_numeric() and not _defined(column, key, names):
                missing.setdefault(column, []).append(f"{table.command} {table.view}".strip())
    return missing


def test_every_figure_column_is_defined_in_docs() -> None:
    missing = _undefined()
    assert not missing, f"figure columns with no definition in docs/ (define them): {missing}"


@pytest.mark.parametrize(
    "column",
    ["speedup_low", "speedup_high", "speedup_wall_low", "speedup_wall_high", "self_us_mean",
     "self_us_first_in_trace", "self_us_steady_median", "calls_total", "share_of_cpu_op_pct",
     "waves", "blocks_per_wave", "last_wave_fill_pct", "wave_efficiency_pct", "wave_loss_pct",
     "launch_delay_us_median", "queue_median", "placement", "module_stack"],
)  # fmt: skip
def test_the_figures_the_newcomer_met_are_defined(column: str) -> None:
    assert column in _defined_names(_docs())


def test_column_definitions_are_printed_in_formats_md() -> None:
    text = (DOCS / "formats.md").read_text(encoding="utf-8")
    for column, definition in COLUMN_DEFINITIONS.items():
        assert f"- `{column}`: {definition}." in text, column


# Struct columns and JSON maps whose fields are figures (each must be defined); every other
# map's keys are data (causes, categories, APIs, `cat` values) and the map itself is defined.
FIGURE_MAPS = {"base_figures", "new_figures", "error_bars"}
# `spread_per_iter`'s keys: X_min, X_median, X_max of a figure X_per_iter (its definition).
SPREAD = re.compile(r"(.+)_(min|median|max)$")


def _numeric(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _undefined_keys(value: object, table: tuple[str, str], names: set[str]) -> set[str]:
    """The numeric keys, and the keys of maps of numbers, of a command's JSON with no
    definition in docs/ (``name (map)`` for a map)."""
    missing: set[str] = set()
    if isinstance(value, list):
        for item in value:
            missing |= _undefined_keys(item, table, names)
    if not isinstance(value, dict):
        return missing
    for key, item in value.items():
        if _numeric(item) and not _defined(key, table, names):
            missing.add(key)
        elif key == "figure" and isinstance(item, str) and not _defined(item, table, names):
            # a row of a table of figures (explain's `cpu`, diff's `figures`, audit's
            # `error_bars`): the figure it names is one too (cublas_cpu_us_per_iter was not)
            missing.add(f"{item} (a `figure` row)")
        elif isinstance(item, dict) and key == "spread_per_iter":
            spread = {
                k for k in item if not (m := SPREAD.match(k)) or f"{m[1]}_per_iter" not in names
            }
            missing |= spread
        elif isinstance(item, dict) and key in FIGURE_MAPS:
            missing |= {k for k, v in item.items() if _numeric(v) and not _defined(k, table, names)}
        elif isinstance(item, dict) and item and all(_numeric(v) for v in item.values()):
            if not _defined(key, table, names):
                missing.add(f"{key} (map)")
        else:
            missing |= _undefined_keys(item, table, names)
    return missing


NAIVE = "sample_traces/h200_default/naive.json.gz"
ONE_TRACE = [
    "summary", "kernels", "idle", "streams", "launches", "memcpy", "iterations", "info",
    "audit", "occupancy", "memory", "comms", "cold", "critical-path", "stacks", "roofline",
    "attention",
]  # fmt: skip
JSON_COMMANDS = [[c, NAIVE] for c in ONE_TRACE] + [
    ["compare", "sample_traces/h200_default"],
    ["diff", NAIVE, "sample_traces/h200_default/sdpa_flash.json.gz"],
    ["explain", NAIVE, "sample_traces/h200_default/sdpa_flash.json.gz"],
]


@pytest.mark.parametrize("args", JSON_COMMANDS, ids=[a[0] for a in JSON_COMMANDS])
def test_every_json_figure_key_is_defined_in_docs(args: list[str]) -> None:
    # The declared tables cover the columns; a command's JSON also holds maps (summary's
    # idle_us_by_cause, info's event_counts) and records of figures (explain's base_figures).
    import json

    from click.testing import CliRunner

    from traceanalyze.cli import main

    result = CliRunner().invoke(main, [*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    missing = _undefined_keys(json.loads(result.stdout), (args[0], ""), _defined_names(_docs()))
    assert not missing, f"`{args[0]}` JSON keys with no definition in docs/: {sorted(missing)}"


def test_every_figure_an_audit_finding_names_is_defined() -> None:
    from traceanalyze.analyses.audit.figures import FIGURES

    names = _defined_names(_docs())
    # X_per_iter is the mean of a per-step table's X (DERIVED): `own_busy_us_per_iter`.
    assert not [f for f in FIGURES if f not in names and f.removesuffix("_per_iter") not in names]


def test_no_name_is_defined_twice_in_docs() -> None:
    # One figure, one definition: a second ``- `name`: ...`` line (the step model's
    # wall_us_per_iter again per rank, issue 41's newcomer pass) is a second meaning.
    seen: dict[str, int] = {}
    for line in re.findall(r"^\s*[-*] (.+)$", _docs(), re.MULTILINE):
        head = re.match(r"((?:`[a-z0-9_]+`(?:,? (?:and |or )?)?)+)(?: \([^)]*\))?: ", line)
        for name in set(re.findall(r"`([a-z0-9_]+)`", head[1])) if head else ():
            seen[name] = seen.get(name, 0) + 1
    assert not [name for name, n in seen.items() if n > 1]


def test_a_figure_named_by_a_row_must_be_defined_too() -> None:
    # explain's CPU table holds its figures as rows (`figure`: cublas_cpu_us_per_iter), not as
    # keys: issue 41's second newcomer pass met that one undefined.
    names = {"base", "new", "delta"}
    rows = {"cpu": [{"figure": "made_up_us_per_iter", "base": 1.0, "new": 2.0, "delta": 1.0}]}
    assert _undefined_keys(rows, ("explain", ""), names) == {"made_up_us_per_iter (a `figure` row)"}
    assert not _undefined_keys(rows, ("explain", ""), names | {"made_up_us_per_iter"})


# Names many tables share (issue 41's second newcomer pass found each defined for one table
# only: `device` a string in `memory`, an index elsewhere; `count` whole-trace in `kernels`,
# inside the iterations in `launches`): one definition that names every command using it, and
# one dtype everywhere.
SHARED_NAMES = ("kernels_per_iter", "count", "count_in_iterations", "device", "bytes")


@pytest.mark.parametrize("name", SHARED_NAMES)
def test_a_shared_name_has_one_definition_for_every_table(name: str) -> None:
    using = [t for t in DECLARED if name in t.columns]
    assert len(using) > 1
    definition = COLUMN_DEFINITIONS[name]
    assert not [t.command for t in using if f"`{t.command}" not in definition]
    assert len({str(t.columns[name]) for t in using}) == 1, name
    assert len(re.findall(rf"^\s*[-*] `{name}`: ", _docs(), re.MULTILINE)) == 1
