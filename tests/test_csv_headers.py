"""A table's CSV header depends on the command alone: the same columns on every sample trace
(sample_traces/) and every public trace (../shared/traces/public, skipped when absent), so a
sheet built on one trace's CSV takes any other's (issue 22's "Done when")."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import traceanalyze
from tests.conftest import PUBLIC_TRACES
from traceanalyze.cli import main, options

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
# Commands that take no single trace, or write no table: the rest are every command with CSV.
# schema reads no trace and sql needs a query: both in tests/test_schemas.py.
NOT_SINGLE_TRACE = frozenset({"cache", "capture", "ranks", "report", "schema", "sql"})
TWO_TRACES = frozenset({"diff", "explain"})
EXTRA_ARGS = {"check": ("-e", "kernels_per_iter >= 0")}


def _csv_commands() -> list[str]:
    return sorted(
        name
        for name, command in main.commands.items()
        if name not in NOT_SINGLE_TRACE
        and any(p.name == "fmt" and "csv" in getattr(p.type, "choices", ()) for p in command.params)
    )


def _traces() -> list[Path]:
    found = sorted(SAMPLES.rglob("*.json.gz"))
    if PUBLIC_TRACES.is_dir():
        found += sorted(p for p in PUBLIC_TRACES.iterdir() if p.name.endswith((".json", ".gz")))
    return found


@pytest.fixture(scope="module")
def load_once(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Each trace is loaded once for the whole module, whatever the command."""
    patch = pytest.MonkeyPatch()
    patch.setenv("TRACEANALYZE_CACHE_DIR", str(tmp_path_factory.mktemp("headers_cache")))
    real_load = options.load

    @cache
    def loaded(path: Path) -> traceanalyze.Trace:
        return real_load(path)

    def load(path: Path, **_: Any) -> traceanalyze.Trace:
        return loaded(Path(path).resolve())

    patch.setattr(options, "load", load)
    yield
    patch.undo()
    loaded.cache_clear()


def test_every_table_command_is_covered() -> None:
    commands = _csv_commands()
    assert {"summary", "kernels", "compare", "cudnn", "info", "diff"} <= set(commands)


@pytest.mark.usefixtures("load_once")
@pytest.mark.parametrize("command", _csv_commands())
def test_the_csv_header_is_the_same_on_every_trace(command: str) -> None:
    headers: dict[str, list[str]] = {}
    for trace in _traces():
        inputs = [str(trace)] * (2 if command in TWO_TRACES else 1)
        args = [command, *inputs, *EXTRA_ARGS.get(command, ()), "--format", "csv"]
        result = CliRunner().invoke(main, args)
        if result.exit_code == 1 and result.output.startswith("traceanalyze: error: "):
            continue  # a trace the command cannot answer for (said in one line): no table
        assert result.exit_code == 0, (trace, result.output)
        headers.setdefault(result.stdout.partition("\n")[0], []).append(trace.name)
    assert len(headers) == 1, {header: names[:3] for header, names in headers.items()}


def test_a_variant_folder_has_the_single_trace_header(load_once: None) -> None:
    # compare on a capture folder (one row per variant) writes the columns of one trace's row.
    single = CliRunner().invoke(main, ["compare", str(_traces()[0]), "--format", "csv"])
    folders = sorted({p.parent for p in SAMPLES.rglob("manifest.json")})
    for folder in folders:
        result = CliRunner().invoke(main, ["compare", str(folder), "--format", "csv"])
        assert result.exit_code == 0, result.output
        assert result.stdout.partition("\n")[0] == single.stdout.partition("\n")[0], folder
