"""The CSV and JSON renderers on small values: plain numbers, nested values as dotted names in
a record, one field in a table (whose header must not depend on the data)."""

from __future__ import annotations

import json

import polars as pl

from traceanalyze.render.table import (
    flatten,
    markdown_record,
    markdown_table,
    prose_number,
    records_csv,
    to_csv,
    to_json,
)


def test_a_record_is_key_value_rows_with_dotted_keys() -> None:
    record = {
        "busy_us": 1075.585667,
        "count": 1234567,
        "held": True,
        "missing": None,
        "category_us": {"mask": 367.2, "softmax": 284.5},
        "devices": ["H200", "H100"],
    }
    assert to_csv(record).splitlines() == [
        "key,value",
        "busy_us,1075.585667",
        "count,1234567",
        "held,true",
        "missing,",
        "category_us.mask,367.2",
        "category_us.softmax,284.5",
        "devices.0,H200",
        "devices.1,H100",
    ]
    # JSON keeps the nesting, lists as lists.
    assert json.loads(to_json(record))["devices"] == ["H200", "H100"]


def test_records_are_one_table_whose_columns_do_not_depend_on_the_data() -> None:
    # info's event counts are keyed by whatever categories a trace holds: one field, not a
    # column per category that only some traces have.
    records = [
        {"file": "a.json", "counts": {"kernel": 2}, "devices": ["H200"], "kernels": 2.0},
        {"file": "b, c.json", "counts": {"kernel": 1, "memset": 3}, "devices": [], "kernels": 1},
    ]
    assert records_csv(records).splitlines() == [
        "file,counts,devices,kernels",
        "a.json,kernel=2,H200,2",
        '"b, c.json",kernel=1;memset=3,,1',
    ]


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


def test_whole_numbers_are_written_as_integers() -> None:
    frame = pl.DataFrame({"calls_per_iter": [3.0, None, float("nan")], "us": [2.0, 2.5, None]})
    # A column of whole numbers reads as integers; a column with a fraction keeps one form.
    assert to_csv(frame).splitlines() == ["calls_per_iter,us", "3,2.0", ",2.5", ","]
    assert to_csv({"kernels_per_iter": 12.0, "big": 1e20}).splitlines() == [
        "key,value",
        "kernels_per_iter,12",
        "big,1e+20",
    ]


def test_flatten() -> None:
    assert flatten({"a": {"b": 1, "c": [2, {"d": 3}]}, "e": ()}) == {
        "a.b": 1,
        "a.c.0": 2,
        "a.c.1.d": 3,
    }


def test_control_characters_are_escaped_in_markdown_and_csv() -> None:
    # A name is whatever the program said: an ESC would colour the terminal, a NUL end the text.
    frame = pl.DataFrame({"name": ["gemm\x1b[31m", "a\x00b|c", "two\nlines"], "n": [1, 2, 3]})
    assert markdown_table(frame).splitlines()[2:] == [
        "| gemm\\x1b[31m | 1 |",
        "| a\\x00b\\|c | 2 |",
        "| two lines | 3 |",
    ]
    assert to_csv(frame) == 'name,n\ngemm\\x1b[31m,1\na\\x00b|c,2\n"two\nlines",3\n'
    assert to_csv({"name": "k\x07"}) == "key,value\nname,k\\x07\n"
    assert records_csv([{"names": ["x\x9b", "y"]}]) == "names\nx\\x9b;y\n"
    assert markdown_record({"k\x1b": "v\x1b"}).splitlines()[2] == "| k\\x1b | v\\x1b |"


def test_prose_numbers_have_thousands_separators_and_no_exponent() -> None:
    assert [prose_number(v) for v in (5.0, 1234567.0, 2.5, 0.0954, 12345.678)] == [
        "5",
        "1,234,567",
        "2.50",
        "0.095",
        "12,345.68",
    ]
