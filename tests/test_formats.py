"""The renderer registry (render/formats.py): one writer per --format choice, one Forms per
result, and the labelled (per-variant) forms every multi-trace command shares."""

from __future__ import annotations

import json

import polars as pl
import pytest

from traceanalyze import api
from traceanalyze.errors import UsageError
from traceanalyze.render.formats import (
    BINARY,
    FOR_PEOPLE,
    FORMATS,
    TABLE,
    WRITERS,
    Forms,
    labelled,
)

ROWS = pl.DataFrame({"name": ["k"], "total_us": [1.5]})
# A result of two parts: JSON its record, CSV its rows, markdown a line.
ONE: Forms[pl.DataFrame] = Forms(
    markdown=lambda frame, *, shout=False, **_: (
        ("ROWS" if shout else "rows") + f" {frame.height}\n"
    ),
    json=lambda frame, **_: {"rows": frame.height},
)
PER_VARIANT = labelled(ONE)


def test_every_format_choice_has_one_writer_and_says_who_reads_it() -> None:
    assert FORMATS == ("md", "json", "csv", "parquet")
    assert set(WRITERS) == set(FOR_PEOPLE) == set(BINARY) == set(FORMATS)


def test_a_table_in_each_format() -> None:
    assert TABLE.render(ROWS, "json") == '[\n  {\n    "name": "k",\n    "total_us": 1.5\n  }\n]\n'
    assert TABLE.render(ROWS, "csv") == "name,total_us\nk,1.5\n"
    assert TABLE.render(ROWS, "md").splitlines()[0] == "| name | total µs (whole trace) |"
    assert TABLE.render(ROWS.clear(), "md", empty="Nothing.") == "Nothing.\n"


def test_options_reach_the_markdown_and_the_others_ignore_them() -> None:
    assert ONE.render(ROWS, "md", shout=True) == "ROWS 1\n"
    assert json.loads(ONE.render(ROWS, "json", shout=True)) == {"rows": 1}


def test_labelled_results_one_unlabelled_and_several_variants() -> None:
    alone = [(None, ROWS)]
    assert json.loads(PER_VARIANT.render(alone, "json")) == {"rows": 1}
    assert PER_VARIANT.render(alone, "md") == "rows 1\n"
    several = [("a", ROWS), ("b", ROWS.head(0))]
    assert json.loads(PER_VARIANT.render(several, "json")) == [
        {"variant": "a", "rows": 1},
        {"variant": "b", "rows": 0},
    ]
    assert PER_VARIANT.render(several, "csv") == "variant,name,total_us\na,k,1.5\n"
    assert PER_VARIANT.render(several, "md") == "## a\n\nrows 1\n\n## b\n\nrows 0\n"


def test_a_format_a_result_refuses_is_a_usage_error() -> None:
    for fmt, for_people in FOR_PEOPLE.items():
        if for_people:
            continue
        with pytest.raises(UsageError, match="report writes markdown"):
            api.REPORT.render(None, fmt)
