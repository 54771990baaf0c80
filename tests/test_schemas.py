"""One declared schema per table (issue 41): every table every command writes, over every
public and corpus trace (../shared, skipped when absent) and the sample traces, read back from
its CSV and its Parquet with the declared schema and concatenated with a strict schema; the
tables the commands offer are exactly those declared; zero rows keep the schema."""

from __future__ import annotations

import importlib.util
import inspect
import io
import json
import re
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner

import traceanalyze
from tests.conftest import CORPUS_TRACES, PUBLIC_TRACES
from traceanalyze import tables
from traceanalyze.cli import main, options

REPO = Path(__file__).resolve().parents[1]
_SPEC = importlib.util.spec_from_file_location("table_runs", REPO / "scripts" / "table_runs.py")
assert _SPEC is not None and _SPEC.loader is not None
table_runs = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(table_runs)

NAIVE = REPO / "sample_traces" / "h200_default" / "naive.json.gz"


def _traces() -> list[Path]:
    # One trace of each sample capture (each records something the others lack: memory,
    # stacks, shapes, graphs, cold calls), then every public and corpus trace.
    found = [min(folder.glob("*.json.gz")) for folder in sorted((REPO / "sample_traces").iterdir())
             if folder.is_dir()]  # fmt: skip
    for folder in (PUBLIC_TRACES, CORPUS_TRACES):
        if folder.is_dir():
            found += sorted(p for p in folder.iterdir() if p.name.endswith((".json", ".json.gz")))
    return found


TRACES = _traces()


@pytest.fixture(scope="module")
def load_once(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Each trace is loaded once for the module, whatever the command (the analyses memoised
    per Trace then run once too); yields a scratch folder."""
    patch = pytest.MonkeyPatch()
    patch.setenv("TRACEANALYZE_CACHE_DIR", str(tmp_path_factory.mktemp("schemas_cache")))
    real_load = options.load

    @cache
    def loaded(path: Path) -> traceanalyze.Trace:
        return real_load(path)

    patch.setattr(options, "load", lambda path, **_: loaded(Path(path).resolve()))
    # Each command's answer computed once per trace, whichever of its tables is written.
    for name in traceanalyze.__all__:
        function = getattr(traceanalyze.api, name, None)
        if inspect.isfunction(function):
            patch.setattr(traceanalyze.api, name, _memoised(function))
    yield tmp_path_factory.mktemp("schemas")
    patch.undo()
    loaded.cache_clear()


def _memoised(function: Callable[..., Any]) -> Callable[..., Any]:
    answers: dict[Any, Any] = {}

    def memoised(*args: Any, **kwargs: Any) -> Any:
        key = (args, tuple(sorted(kwargs.items())))
        try:
            hash(key)
        except TypeError:
            return function(*args, **kwargs)
        if key not in answers:
            answers[key] = function(*args, **kwargs)
        return answers[key]

    return memoised


def test_the_tables_offered_are_the_tables_declared() -> None:
    offered = {
        tables.table_name(name, view)
        for name, command in table_runs.table_commands().items()
        for view in table_runs.views(command)[1]
    }
    not_run = {"schema", "cache info", "cache clear"}  # no trace: tested below
    assert offered == set(tables.TABLES) - not_run
    for table in tables.TABLES.values():
        chooser, views = table_runs.views(main.commands[table.command.split()[0]])
        if table.option in ("--by", "--table", tables.FROM):
            assert (chooser, table.view) == (table.option, views[views.index(table.view)])


def _written(args: list[str], name: str, scratch: Path) -> tuple[pl.DataFrame, pl.DataFrame] | None:
    """The table's CSV and Parquet as read back with the declared schema (None: the command
    cannot answer for this trace, said in one line)."""
    csv = CliRunner().invoke(main, [*args, "--format", "csv"])
    if csv.exit_code == 1 and csv.stderr.startswith("traceanalyze: error: "):
        return None
    assert csv.exit_code == 0, (args, csv.output)
    target = scratch / f"{name.replace(' ', '_')}.parquet"
    parquet = CliRunner().invoke(main, [*args, "-o", str(target), "--force"])
    assert parquet.exit_code == 0, (args, parquet.output)
    variant = csv.stdout.startswith(f"{tables.VARIANT},")
    schema = tables.csv_schema(name, variant=variant)
    from_csv = pl.read_csv(io.StringIO(csv.stdout), schema=schema)
    from_parquet = pl.read_parquet(target)
    expected = ({tables.VARIANT: pl.String()} if variant else {}) | dict(
        tables.declared(name).schema
    )
    assert dict(from_parquet.schema) == expected, args
    assert from_csv.height == from_parquet.height, args
    return from_csv, from_parquet


def _runs() -> list[tuple[str, str]]:
    return sorted(
        {(name, view) for name, view, _ in table_runs.runs(NAIVE, NAIVE.parent)},
        key=lambda run: run,
    )


@pytest.mark.parametrize(("command", "view"), _runs(), ids=[" ".join(r).strip() for r in _runs()])
def test_every_table_concatenates_over_every_trace(
    command: str, view: str, load_once: Path
) -> None:
    name = tables.table_name(command, view)
    csvs: list[pl.DataFrame] = []
    parquets: list[pl.DataFrame] = []
    for index, trace in enumerate(TRACES):
        folder = table_runs.alone_in_folder(trace, load_once / name / str(index))
        for run, chosen, args in table_runs.runs(trace, folder):
            if (run, chosen) != (command, view):
                continue
            written = _written(args, name, load_once)
            if written is not None:
                csvs.append(written[0])
                parquets.append(written[1])
    assert parquets, f"no trace gave a {name} table"
    # Strict: every frame has exactly the same columns and dtypes.
    assert pl.concat(csvs, how="vertical").schema == tables.csv_schema(name)
    assert dict(pl.concat(parquets, how="vertical").schema) == dict(tables.declared(name).schema)


def test_zero_rows_keep_the_schema(tmp_path: Path) -> None:
    # The sample trace has no CUDA graph replays: a table of no rows.
    result = CliRunner().invoke(main, ["graphs", str(NAIVE), "--format", "csv"])
    assert result.stdout.splitlines() == [",".join(tables.csv_schema("graphs"))]
    frame = pl.read_csv(io.StringIO(result.stdout), schema=tables.csv_schema("graphs"))
    assert frame.height == 0
    target = tmp_path / "g.parquet"
    assert CliRunner().invoke(main, ["graphs", str(NAIVE), "-o", str(target)]).exit_code == 0
    assert pl.read_parquet(target).schema == tables.declared("graphs").schema
    assert traceanalyze.graphs(NAIVE).schema == tables.declared("graphs").schema


def test_a_float_column_reads_back_as_floats_whatever_its_values() -> None:
    # Issue 41: achieved_occupancy_pct was written 50 on one trace and 37.5 on another, so
    # the two CSVs read as Int64 and Float64 and did not concatenate.
    result = CliRunner().invoke(main, ["kernels", str(NAIVE), "--format", "csv"])
    inferred = pl.read_csv(io.StringIO(result.stdout), infer_schema_length=None)
    declared = tables.csv_schema("kernels.kernel")
    for column, dtype in inferred.schema.items():
        if inferred[column].null_count() < inferred.height:  # an all-empty column reads as text
            assert dtype == declared[column], column


def test_the_summary_table_has_every_key_on_every_trace() -> None:
    # Issue 41: spread_per_iter had keys only where steps differed by more than 5%, and the
    # summary CSV was key,value text.
    frame = traceanalyze.summary(NAIVE).to_frame()
    assert frame.schema == tables.declared("summary.figures").schema
    written = CliRunner().invoke(main, ["summary", str(NAIVE), "--format", "json"]).stdout
    record = json.loads(written)
    spread = tables.declared("summary.figures").schema["spread_per_iter"]
    assert isinstance(spread, pl.Struct)
    assert list(record["spread_per_iter"]) == [f.name for f in spread.fields]
    assert list(record["category_us"]) == list(traceanalyze.classify.CATEGORIES)


@pytest.mark.parametrize(("args", "name"), [
    (["schema", "idle"], "schema"), (["cache", "info"], "cache info"),
])  # fmt: skip
def test_tables_of_no_trace_follow_their_schema(args: list[str], name: str, tmp_path: Path) -> None:
    target = tmp_path / "t.parquet"
    result = CliRunner().invoke(main, [*args, "-o", str(target)])
    assert result.exit_code == 0, result.output
    assert pl.read_parquet(target).schema == tables.declared(name).schema


def test_schema_prints_each_tables_columns_with_units() -> None:
    result = CliRunner().invoke(main, ["schema", "idle", "--table", "causes", "--format", "json"])
    rows: list[dict[str, Any]] = json.loads(result.stdout)
    assert [(r["column"], r["dtype"], r["unit"]) for r in rows] == [
        ("cause", "String", ""),
        ("us_per_iter", "Float64", "µs per iteration"),
        ("gaps_per_iter", "Float64", "per iteration"),
        ("share_of_idle_pct", "Float64", "%"),
    ]
    assert {r["selected_by"] for r in rows} == {"idle --table causes"}
    unknown = CliRunner().invoke(main, ["schema", "nosuch"])
    assert unknown.exit_code == 2 and "writes no tables" in unknown.stderr


@pytest.mark.parametrize(
    ("name", "fix"),
    [
        ("kernels", "Did you mean kernels.kernel or kernels.op?"),  # the newcomer's guess
        ("idle.gaps", "Did you mean idle.causes or idle.by_stream or idle.largest_gaps or "
         "idle.syncs or idle.figures?"),
        ("kernls.kernel", "Did you mean kernels.kernel or "),
        ("nosuch", "The tables are info.traces, info.event_counts, kernels.kernel,"),
    ],
)  # fmt: skip
def test_an_unknown_table_name_says_which_names_exist(name: str, fix: str) -> None:
    # Issue 41's second newcomer pass: csv_schema("kernels") said only "no table 'kernels' is
    # declared", not that the command's tables are kernels.kernel and kernels.op.
    with pytest.raises(traceanalyze.UsageError) as raised:
        tables.csv_schema(name)
    assert raised.value.message == f"no table {name!r} is declared"
    assert raised.value.fix is not None and raised.value.fix.startswith(fix)


@pytest.mark.parametrize(("command", "view"), _runs(), ids=[" ".join(r).strip() for r in _runs()])
def test_every_table_command_writes_markdown_and_json(
    command: str, view: str, load_once: Path
) -> None:
    # The whole answer in markdown and JSON, and the one table --table names (a markdown
    # renderer once received table=None and raised a TypeError: explain, roofline).
    for name, chosen, args in table_runs.runs(NAIVE, table_runs.alone_in_folder(
            NAIVE, load_once / "md" / f"{command}.{view}")):  # fmt: skip
        if (name, chosen) != (command, view):
            continue
        # The default answer too: without the --table or --by that ends the arguments.
        whole = args[:-2] if args[-2:-1] in (["--table"], ["--by"]) else args
        for fmt in ("md", "json"):
            for given in (args, whole):
                result = CliRunner().invoke(main, [*given, "--format", fmt])
                assert result.exit_code == 0, (given, fmt, result.output)
                assert result.stdout.strip(), (given, fmt)


def test_the_formats_pages_csv_recipe_reads_a_zero_row_csv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CSV has no types: a plain read of a zero-row table is all strings and will not
    # concatenate. docs/formats.md's recipe (run here as written) reads both with the schema.
    from tests.micro import annotation, op, write_trace

    docs = (Path(__file__).resolve().parents[1] / "docs" / "formats.md").read_text()
    [recipe] = re.findall(r"```python\n(.*?)```", docs, re.DOTALL)
    no_gpu = write_trace(tmp_path, [annotation("ProfilerStep#1", 0, 100), op("aten::add", 1, 5)])
    naive = Path(__file__).resolve().parents[1] / "sample_traces/h200_default/naive.json.gz"
    for trace, name in ((naive, "a.csv"), (no_gpu, "empty.csv")):
        result = CliRunner().invoke(main, ["kernels", str(trace), "-o", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
    assert pl.read_csv(tmp_path / "empty.csv").height == 0
    with pytest.raises(pl.exceptions.SchemaError):  # what the recipe is for
        pl.concat([pl.read_csv(tmp_path / n) for n in ("a.csv", "empty.csv")])
    monkeypatch.chdir(tmp_path)
    scope: dict[str, object] = {}
    exec(recipe, scope)  # the documented snippet, run as a reader would
    kernels = scope["kernels"]
    assert isinstance(kernels, pl.DataFrame) and kernels.height == pl.read_csv("a.csv").height
    assert kernels.schema == tables.csv_schema("kernels.kernel")
