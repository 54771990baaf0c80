"""The library is the command line's twin: the facade's doctests, docs/python.md's notebook cells,
and each function's answer equal to what its command writes."""

from __future__ import annotations

import doctest
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

import traceanalyze
import traceanalyze.api
from traceanalyze.cli import main
from traceanalyze.display import markdown_html
from traceanalyze.render.table import to_json

REPO = Path(__file__).resolve().parents[1]
FLASH = "sample_traces/h200_default/sdpa_flash.json.gz"
NAIVE = "sample_traces/h200_default/naive.json.gz"
PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


@pytest.fixture(autouse=True)
def _at_the_repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # the examples name sample traces from the repository's root


def test_the_facade_doctests_pass() -> None:
    failed, attempted = doctest.testmod(traceanalyze.api, optionflags=doctest.ELLIPSIS)
    assert attempted >= 15
    assert failed == 0


def test_the_docs_notebook_section_runs() -> None:
    text = (REPO / "docs" / "python.md").read_text(encoding="utf-8")
    section = text.split("## In a notebook", 1)[1].split("\n## ", 1)[0]
    cells = PYTHON_BLOCK.findall(section)
    assert len(cells) >= 5
    namespace: dict[str, object] = {}
    for cell in cells:
        exec(compile(cell, "docs/python.md (In a notebook)", "exec"), namespace)
    assert isinstance(namespace["trace"], traceanalyze.Trace)


def test_every_analysing_command_has_its_function() -> None:
    # capture records; cache manages the cache folder
    not_functions = {"capture", "cache"}
    for name in main.commands:
        if name not in not_functions:
            assert name.replace("-", "_") in traceanalyze.__all__, name
            assert callable(getattr(traceanalyze, name.replace("-", "_")))
    assert "memory_traffic" not in traceanalyze.__all__
    assert "comparison" not in traceanalyze.__all__


def _cli_json(*args: str) -> object:
    result = CliRunner().invoke(main, [*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.mark.parametrize(
    "command", ["kernels", "occupancy", "memcpy", "streams", "launches", "iterations"]
)
def test_a_table_function_has_the_commands_json_keys_and_rows(command: str) -> None:
    frame = getattr(traceanalyze, command)(NAIVE)
    assert isinstance(frame, pl.DataFrame)
    assert json.loads(to_json(frame)) == _cli_json(command, NAIVE)


def test_summary_is_a_frozen_record_of_the_commands_keys() -> None:
    record = traceanalyze.summary(NAIVE)
    assert isinstance(record, traceanalyze.api.Summary)
    assert json.loads(to_json(record)) == _cli_json("summary", NAIVE)
    assert list(record)[:3] == ["iterations", "ranks", "iteration_source"]
    with pytest.raises(AttributeError):
        record.kernels_per_iter = 0.0  # type: ignore[misc]


def test_a_capture_folder_gives_one_summary_per_variant_named_first() -> None:
    records = traceanalyze.summary("sample_traces/h200_default")
    assert isinstance(records, traceanalyze.PerVariant)
    assert records["sdpa_flash"].kernels_per_iter == 1.0
    assert next(iter(records["sdpa_flash"])) == "variant"


def test_reprs_are_short_and_results_show_as_tables() -> None:
    trace = traceanalyze.load(NAIVE)
    assert repr(trace) == (f"Trace('{NAIVE}', gpu=23, cpu=145, iterations=3 by 'ProfilerStep')")
    idle = traceanalyze.idle(trace)
    assert len(repr(idle)) < 300
    assert "largest_gaps=<" in repr(idle)
    assert idle._repr_markdown_().startswith("GPU idle time")
    assert "<table>" in idle._repr_html_()
    assert len(repr(traceanalyze.summary(trace))) < 200


def test_markdown_tables_become_html_tables() -> None:
    html = markdown_html("## a & b\n\n| x | y |\n|---|--:|\n| 1 | <2> |\n\nafter\n")
    assert html == (
        "<h2>a &amp; b</h2>\n"
        "<table><thead><tr><th>x</th><th>y</th></tr></thead>"
        "<tbody><tr><td>1</td><td>&lt;2&gt;</td></tr></tbody></table>\n"
        "<p>after</p>"
    )


def test_an_unknown_view_is_a_usage_error() -> None:
    with pytest.raises(traceanalyze.TraceAnalyzeError, match="no view 'bogus'") as caught:
        traceanalyze.kernels(FLASH, by="bogus")
    assert caught.value.exit_code == 2


def test_a_loaded_trace_of_a_capture_folder_keeps_its_manifest() -> None:
    # summary(load(f)) left out the capture's median that summary(f) and the command use
    # (wall_source "capture median"), and cold(load(f)) its warm-up note.
    loaded = traceanalyze.load(NAIVE)
    assert dict(traceanalyze.summary(loaded)) == dict(traceanalyze.summary(NAIVE))
    assert traceanalyze.summary(loaded)["wall_source"] == "capture median"
    cold = "sample_traces/h200_cold/sdpa_cudnn.json.gz"
    by_path, by_trace = traceanalyze.cold(cold), traceanalyze.cold(traceanalyze.load(cold))
    assert by_trace.summary.equals(by_path.summary)


def test_a_variant_set_shows_in_one_short_line() -> None:
    shown = repr(traceanalyze.load_variants("sample_traces/h200_default"))
    assert shown.startswith("VariantSet('sample_traces/h200_default', 9 loaded: naive, ")
    assert len(shown) < 200 and "\n" not in shown


def test_the_command_functions_are_imported_on_first_use() -> None:
    # `import traceanalyze` (a rank worker, a notebook's first cell) does not pay for every
    # analysis and renderer; the functions are there on first use, and in dir().
    code = (
        "import sys, traceanalyze as t; assert 'traceanalyze.api' not in sys.modules; "
        "assert {'summary', 'critical_path'} <= set(dir(t)); f = t.summary; "
        "assert 'traceanalyze.api' in sys.modules and f is t.api.summary"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    with pytest.raises(AttributeError, match="no attribute 'not_a_command'"):
        traceanalyze.not_a_command  # noqa: B018
    # submodules are there as before, imported when first named
    code = "import traceanalyze as t; t.api.summary; t.analyses.activities"
    subprocess.run([sys.executable, "-c", code], check=True)


# --- notebook polish (issue 41) -------------------------------------------------------------


def test_the_library_takes_the_limits_of_the_command_line() -> None:
    import click

    from traceanalyze.arguments import LIMITS

    seen = set()
    for command in main.commands.values():
        for param in command.params:
            if param.name in LIMITS:
                limit, kind = LIMITS[param.name], param.type
                assert isinstance(kind, (click.IntRange, click.FloatRange)), param.name
                assert (kind.min, kind.min_open) == (limit.least, limit.above), param.name
                assert isinstance(kind, click.IntRange) == limit.whole, param.name
                seen.add(param.name)
    assert seen == set(LIMITS)


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda: traceanalyze.kernels(NAIVE, top=0), traceanalyze.errors.UsageError, "top=0"),
        (lambda: traceanalyze.kernels(NAIVE, top="3"), TypeError, "top takes a whole number"),
        (lambda: traceanalyze.idle(NAIVE, largest=-1), traceanalyze.errors.UsageError, "largest"),
        (lambda: traceanalyze.roofline(NAIVE, peak_tflops=0), traceanalyze.errors.UsageError,
         "peak_tflops=0"),
        (lambda: traceanalyze.stacks(NAIVE, category="gemms"), traceanalyze.errors.UsageError,
         "not one of"),
        (lambda: traceanalyze.kernels(42), TypeError, "expected a trace file or folder"),
        (lambda: traceanalyze.summary([1, 2]), TypeError, "got list"),
        (lambda: traceanalyze.compare(42), TypeError, "expected trace files or folders"),
        (lambda: traceanalyze.critical_path(3.5), TypeError, "expected one trace file"),
        (lambda: traceanalyze.sql(NAIVE, 42), TypeError, "a query (str)"),
    ],
)  # fmt: skip
def test_wrong_arguments_say_what_was_expected(
    call: Callable[[], object], error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=re.escape(words)):
        call()


def test_every_result_has_a_dataframe_form_and_a_short_repr() -> None:
    folder = traceanalyze.summary("sample_traces/h200_default")
    assert isinstance(folder, traceanalyze.PerVariant)
    assert folder[0] == folder["naive"]
    frame = folder.to_frame()
    assert frame["variant"].to_list()[:2] == ["naive", "naive_inplace"]
    assert repr(folder).startswith("PerVariant(9 Summary: naive, naive_inplace")
    for result in (
        traceanalyze.idle(NAIVE),
        traceanalyze.critical_path(NAIVE),
        traceanalyze.memory(NAIVE),
        traceanalyze.explain(NAIVE, FLASH),
        traceanalyze.diff(NAIVE, FLASH),
    ):
        assert isinstance(result.to_frame(), pl.DataFrame)  # type: ignore[attr-defined]
        assert len(repr(result)) < 600, type(result).__name__
    assert isinstance(traceanalyze.info(NAIVE), pl.DataFrame)
    annotation = traceanalyze.annotate(NAIVE)
    assert len(repr(annotation)) < 300
    assert annotation.to_frame().equals(annotation.activities)
    assert annotation.to_frame("copies").equals(annotation.copies)
    with pytest.raises(traceanalyze.errors.UsageError, match="not one of"):
        annotation.to_frame("nosuch")
    assert len(repr(traceanalyze.load_variants(["sample_traces/h200_default"])[0])) < 300


def test_dir_shows_the_public_names_only() -> None:
    names = dir(traceanalyze)
    assert "TYPE_CHECKING" not in names and "importlib" not in names
    assert {"load", "summary", "sql", "schema"} <= set(names)
    assert set(names) == {*traceanalyze.__all__, "__version__"}


def test_the_error_classes_users_catch_are_exported() -> None:
    # A notebook catches ta.UsageError / ta.TraceReadError without importing traceanalyze.errors.
    errors = {
        name
        for name, value in vars(traceanalyze.errors).items()
        if isinstance(value, type)
        and issubclass(value, traceanalyze.errors.TraceAnalyzeError)
        and value.__module__ == "traceanalyze.errors"
    }
    assert {"UsageError", "TraceReadError"} <= errors
    assert errors <= set(traceanalyze.__all__)
    assert errors <= set(dir(traceanalyze))
    for name in errors:
        assert getattr(traceanalyze, name) is getattr(traceanalyze.errors, name)
    with pytest.raises(traceanalyze.TraceReadError):
        traceanalyze.load("no/such/trace.json")
    with pytest.raises(traceanalyze.UsageError):
        traceanalyze.kernels(NAIVE, top=-1)
