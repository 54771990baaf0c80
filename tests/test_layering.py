"""Imports point down only (docs/architecture.md): read from the source, so a new fault fails
here."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "traceanalyze"
# (a layer, the layers above it that it must not import)
RULES = [
    ("tables", ("load", "classify", "hardware", "analyses", "render", "cli")),
    ("load", ("analyses", "render", "cli")),
    ("classify", ("analyses", "render", "cli")),
    ("hardware", ("load", "classify", "analyses", "render", "cli")),
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
        for path in sorted((PACKAGE / layer).rglob("*.py"))
        for name in imported(path)
        if any(
            name == f"traceanalyze.{up}" or name.startswith(f"traceanalyze.{up}.") for up in above
        )
    }
    assert not faults


def test_the_layers_cover_every_subpackage() -> None:
    # A new subpackage (say analyses/ grouped into capability packages) is scanned by rglob;
    # a new top-level package must be given a rule here.
    packages = {p.parent.relative_to(PACKAGE).parts[0] for p in PACKAGE.rglob("*/__init__.py")}
    ruled = {layer for layer, _ in RULES} | {up for _, above in RULES for up in above}
    assert packages <= ruled, packages - ruled


# Only the input resolver lists a folder to decide what an input is; anything else that lists
# files says why here.
RESOLVER = PACKAGE / "load" / "inputs.py"
LISTING_CALLS = {"iterdir", "glob", "rglob", "listdir", "scandir", "walk"}
ALLOWED_LISTING = {
    # The cache key hashes the package's own loader sources, not an input.
    PACKAGE / "load" / "cache.py": "hashes traceanalyze's own sources for the cache key",
    # An output's folder, for the writer's own temporaries a killed write left (issue 42).
    PACKAGE / "files.py": "removes its own stale .NAME.<hex>.tmp files beside an output",
}


def listing_calls(path: Path) -> list[str]:
    return [
        f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.func.attr}"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in LISTING_CALLS
    ]


def test_only_the_resolver_lists_folders() -> None:
    faults = [
        call
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != RESOLVER and path not in ALLOWED_LISTING
        for call in listing_calls(path)
    ]
    assert not faults
    assert listing_calls(RESOLVER), "the resolver itself lists folders: the scan must see it"
    assert all(listing_calls(path) for path in ALLOWED_LISTING), "an allowance no longer used"


def test_manifest_json_is_named_in_one_module() -> None:
    naming = [
        str(path.relative_to(PACKAGE.parent))
        for path in sorted([*PACKAGE.rglob("*.py"), *(PACKAGE.parent / "capture").rglob("*.py")])
        if any(
            isinstance(node, ast.Constant) and node.value == "manifest.json"
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        )
    ]
    assert naming == ["capture/manifest.py"]


# capture/ runs on a GPU box with torch and the standard library only (click for its
# command line): the manifest that traceanalyze reads must import nothing else.
CAPTURE = PACKAGE.parent / "capture"


def test_the_manifest_module_needs_only_the_standard_library() -> None:
    third_party = {
        name
        for module in ("manifest.py", "caches.py", "errors.py")
        for name in imported(CAPTURE / module)
        if name.split(".")[0] not in {"__future__", "capture", *sys.stdlib_module_names}
    }
    assert not third_party


def test_traceanalyze_reads_capture_only_through_the_manifest_and_its_error() -> None:
    faults = {
        f"{path.relative_to(PACKAGE.parent)} imports {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for name in imported(path)
        if name.startswith("capture")
        and name not in {"capture.manifest", "capture.caches", "capture.errors", "capture.cli"}
    }
    assert not faults


# The format names (--format's choices): only the renderer registry chooses by them.
FORMAT_REGISTRY = PACKAGE / "render" / "formats.py"
FORMAT_NAMES = {"md", "json", "csv"}
FORMAT_VARIABLES = {"fmt", "format"}


def _format_name(node: ast.expr) -> bool:
    """A format's name: a literal (``"json"``), a collection of them, or a constant that holds
    one (``MARKDOWN``)."""
    if isinstance(node, ast.Constant):
        return node.value in FORMAT_NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(map(_format_name, node.elts))
    return isinstance(node, ast.Name) and node.id.isupper()


def _format_variable(node: ast.expr) -> bool:
    """``fmt``, ``format`` or ``out.format``."""
    if isinstance(node, ast.Name):
        return node.id in FORMAT_VARIABLES
    return isinstance(node, ast.Attribute) and node.attr in FORMAT_VARIABLES


def _branches_on_format(node: ast.AST) -> bool:
    if isinstance(node, ast.Match):
        return _format_variable(node.subject)
    if not isinstance(node, ast.Compare):
        return False
    operands = [node.left, *node.comparators]
    literal = any(isinstance(o, ast.Constant) and _format_name(o) for o in operands)
    collection = any(isinstance(o, (ast.Tuple, ast.List, ast.Set)) and _format_name(o)
                     for o in operands)  # fmt: skip
    named = any(map(_format_variable, operands)) and any(map(_format_name, operands))
    return literal or collection or named


def format_branches(source: str) -> list[str]:
    """Comparisons with a format's name (``fmt == "json"``, ``out.format != "md"``,
    ``fmt in ("json", "csv")``, ``fmt == MARKDOWN``) and ``match fmt`` statements: branches on
    the output format, as ``line: code``. (Whether a format was given, ``fmt is None``, is no
    branch on which one.)"""
    return [
        f"{node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(ast.parse(source))
        if _branches_on_format(node)
    ]


def test_only_the_renderer_registry_branches_on_the_format() -> None:
    # One row per format in render/formats.py's WRITERS, one Forms per result: an `if fmt ==`
    # elsewhere is a renderer or command choosing by format on its own again.
    faults = [
        f"{path.relative_to(PACKAGE.parent)}:{branch}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != FORMAT_REGISTRY
        for branch in format_branches(path.read_text(encoding="utf-8"))
    ]
    assert not faults


def test_the_format_branch_check_finds_each_kind_of_branch() -> None:
    source = (
        "def render(fmt, out, name):\n"
        "    if fmt == 'json':\n        return 1\n"
        "    if out.format in ('csv', 'md'):\n        return 2\n"
        "    match fmt:\n        case _:\n            return 3\n"
        "    if fmt == MARKDOWN:\n        return 4\n"
        "    if name == 'md5' or name in ('.md', 'csv_file') or fmt is None or a != fmt:\n"
        "        return 5\n"
    )
    assert sorted(b.split(":")[0] for b in format_branches(source)) == ["2", "4", "6", "9"]
