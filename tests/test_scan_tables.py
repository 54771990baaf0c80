"""The C scanner's tables are generated from one Python table (load/scan_tables.py), and the
scanner is built wherever CI says it must be."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest

from traceanalyze import link
from traceanalyze.load import fast, scanned
from traceanalyze.load.scan_tables import KINDS, TAGGED

REPO = Path(__file__).resolve().parents[1]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen", REPO / "scripts/gen_scan_tables.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_header_is_the_generated_one() -> None:
    header = REPO / "traceanalyze/load/_scan_tables.h"
    assert header.read_text() == _generator().render(), "run: python scripts/gen_scan_tables.py"


def test_every_kept_kind_stores_the_columns_the_frames_read() -> None:
    tagged = {t.column for t in TAGGED}
    for kind in KINDS:
        if not kind.kept:
            continue
        wanted = {c for c in scanned.COLUMNS[kind.name] if c in tagged} - {"pid", "tid"}
        assert wanted <= set(kind.columns), kind.name


def test_the_part_kinds_are_the_tables_kinds() -> None:
    assert fast._KIND_NAMES == {1: "gpu", 2: "op", 3: "call", 5: "flow", 6: "instant",
                                7: "meta", 8: "memory", 9: "python"}  # fmt: skip
    assert fast.KINDS["Kernel"] == 1 | 16 and fast.KINDS["cpu_op"] == 2


@pytest.mark.skipif(not os.environ.get("TRACEANALYZE_REQUIRE_SCANNER"), reason="not required")
def test_the_scanner_is_built_where_required() -> None:
    # CI sets TRACEANALYZE_REQUIRE_SCANNER: a failed build must fail the run, not fall back.
    assert fast.AVAILABLE, "the C scanner did not build: python setup.py build_ext --inplace"
    assert link._tree is not None, "traceanalyze._tree did not build: python setup.py build_ext"


def test_the_scaling_benchs_kinds_are_the_scanners() -> None:
    # bench/scan_scaling.py runs without Polars, so it cannot import fast.KINDS: it copies them.
    spec = importlib.util.spec_from_file_location("scaling", REPO / "bench/scan_scaling.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert {cat: fast.KINDS[cat] for cat in module.KINDS} == module.KINDS
