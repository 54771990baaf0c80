"""The CSV and JSON renderers on small values: plain numbers in their column's type, a
struct's fields as dotted columns, a list as one field (a header must not depend on the
data)."""

from __future__ import annotations

import polars as pl

from traceanalyze.render.table import (
    markdown_record,
    markdown_table,
    prose_number,
    to_csv,
)


def test_a_frame_with_nested_columns_is_flat() -> None:
    frame = pl.DataFrame(
        {
            "name": ["k1", "k2"],
            "apis": [["cudaLaunchKernel", "cuLaunchKernelEx"], ["cudaLaunchKernel"]],
            "grid": [{"x": 132, "y": 1}, {"x": 8, "y": 2}],
            "us": [1234.5, None],
        }
    )
    # A list is one field whatever its length (a struct's fields are part of its type).
    assert to_csv(frame).splitlines() == [
        "name,apis,grid.x,grid.y,us",
        "k1,cudaLaunchKernel;cuLaunchKernelEx,132,1,1234.5",
        "k2,cudaLaunchKernel,8,2,",
    ]
    assert to_csv(frame.head(0)).splitlines() == ["name,apis,grid.x,grid.y,us"]


def test_a_float_column_keeps_its_float_form() -> None:
    frame = pl.DataFrame({"calls_per_iter": [3.0, None, float("nan")], "us": [2.0, 2.5, None]})
    # Whole floats stay floats (3.0): a column reads back as one type on every trace; NaN is
    # missing, like null.
    assert to_csv(frame).splitlines() == ["calls_per_iter,us", "3.0,2.0", ",2.5", ","]
    assert to_csv(pl.DataFrame({"big": [1e20]})).splitlines() == ["big", "1e+20"]


def test_control_characters_are_escaped_in_markdown_and_csv() -> None:
    # A name is whatever the program said: an ESC would colour the terminal, a NUL end the text.
    frame = pl.DataFrame({"name": ["gemm\x1b[31m", "a\x00b|c", "two\nlines"], "n": [1, 2, 3]})
    assert markdown_table(frame).splitlines()[2:] == [
        "| gemm\\x1b[31m | 1 |",
        "| a\\x00b\\|c | 2 |",
        "| two lines | 3 |",
    ]
    assert to_csv(frame) == 'name,n\ngemm\\x1b[31m,1\na\\x00b|c,2\n"two\nlines",3\n'
    assert to_csv(pl.DataFrame({"name": ["k\x07"]})) == "name\nk\\x07\n"
    assert to_csv(pl.DataFrame({"names": [["x\x9b", "y"]]})) == "names\nx\\x9b;y\n"
    assert markdown_record({"k\x1b": "v\x1b"}).splitlines()[2] == "| k\\x1b | v\\x1b |"


def test_prose_numbers_have_thousands_separators_and_no_exponent() -> None:
    assert [prose_number(v) for v in (5.0, 1234567.0, 2.5, 0.0954, 12345.678)] == [
        "5",
        "1,234,567",
        "2.50",
        "0.095",
        "12,345.68",
    ]


def test_a_map_of_whole_counts_prints_integers() -> None:
    # summary's category_count / launch_apis: per-iteration means that came out even are
    # counts (`gemm: 2`, not `gemm: 2.00`); a map with one fraction keeps one format.
    text = markdown_record({"launch_apis": {"cudaLaunchKernel": 3.0, "cuLaunchKernelEx": 2.0}})
    assert "cudaLaunchKernel: 3, cuLaunchKernelEx: 2 |" in text
    mixed = markdown_record({"category_count": {"gemm": 2.0, "softmax": 0.5}})
    assert "gemm: 2.00, softmax: 0.50 |" in mixed


def test_summary_prints_its_per_category_counts_as_integers() -> None:
    from pathlib import Path

    from click.testing import CliRunner

    from traceanalyze.cli import main

    naive = Path(__file__).resolve().parents[1] / "sample_traces/h200_default/naive.json.gz"
    text = CliRunner().invoke(main, ["summary", str(naive)]).stdout
    [counts] = [line for line in text.splitlines() if line.startswith("| category_count |")]
    [apis] = [line for line in text.splitlines() if line.startswith("| launch_apis |")]
    assert "gemm: 2," in counts and ".00" not in counts
    assert "cudaLaunchKernel: 3," in apis and ".00" not in apis
