"""Imports point down only (ARCHITECTURE.md): read from the source, so a new fault fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "traceanalyze"
# (a layer, the layers above it that it must not import)
RULES = [
    ("load", ("analyses", "render", "cli")),
    ("classify", ("analyses", "render", "cli")),
    ("analyses", ("render", "cli")),
    ("render", ("cli",)),
]


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize(("layer", "above"), RULES, ids=[layer for layer, _ in RULES])
def test_a_layer_imports_nothing_above_it(layer: str, above: tuple[str, ...]) -> None:
    faults = {
        f"{path.relative_to(PACKAGE.parent)} imports {name}"
        for path in sorted((PACKAGE / layer).glob("*.py"))
        for name in imported(path)
        if any(
            name == f"traceanalyze.{up}" or name.startswith(f"traceanalyze.{up}.") for up in above
        )
    }
    assert not faults
