"""The CSV and JSON renderers on small values: plain numbers, nested values as dotted names."""

from __future__ import annotations

import json

import polars as pl

from traceanalyze.render.table import flatten, records_csv, to_csv, to_json


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


def test_records_are_one_table_with_the_columns_of_a_key_together() -> None:
    records = [
        {"file": "a.json", "counts": {"kernel": 2}, "kernels": 2},
        {"file": "b, c.json", "counts": {"kernel": 1, "memset": 3}, "kernels": 1},
    ]
    assert records_csv(records).splitlines() == [
        "file,counts.kernel,counts.memset,kernels",
        "a.json,2,,2",
        '"b, c.json",1,3,1',
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
    assert to_csv(frame).splitlines() == [
        "name,apis.0,apis.1,grid.x,grid.y,us",
        "k1,cudaLaunchKernel,cuLaunchKernelEx,132,1,1234.5",
        "k2,cudaLaunchKernel,,8,2,",
    ]


def test_flatten() -> None:
    assert flatten({"a": {"b": 1, "c": [2, {"d": 3}]}, "e": ()}) == {
        "a.b": 1,
        "a.c.0": 2,
        "a.c.1.d": 3,
    }
