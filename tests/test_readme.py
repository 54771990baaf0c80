"""The README and docs/ show what the code prints and define what the code computes: every tour
block is the command's current output, every relative link resolves, and each docs page the
figures' definitions live on says exactly the code's sentences (issue 41 moved them from the
README into docs/)."""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest

from traceanalyze.analyses.cold.variants import DEFINITIONS as COLD_DEFINITIONS
from traceanalyze.analyses.distributed.ranks import RANK_DEFINITIONS
from traceanalyze.analyses.iterations import DEFINITIONS as ITERATION_DEFINITIONS
from traceanalyze.analyses.step.definitions import DEFINITIONS
from traceanalyze.classify import CATEGORIES

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
_SPEC = importlib.util.spec_from_file_location("readme_tour", REPO / "scripts/readme_tour.py")
assert _SPEC is not None and _SPEC.loader is not None
tour = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(tour)

PAGES = tour.pages()


def text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_tour_blocks_are_current(page: Path) -> None:
    assert tour.regenerate(text(page)) == text(page), "run: python scripts/readme_tour.py"


def test_the_readme_and_the_family_pages_have_tour_blocks() -> None:
    for name in ("README.md", "tour.md", "what-ran.md", "time.md", "tools.md"):
        page = REPO / name if name == "README.md" else DOCS / name
        assert tour.BLOCK.search(text(page)), f"{name} has no tour blocks"


# Each DEFINITIONS dict is printed, sentence by sentence, on one docs page.
DEFINED_ON = [
    ("time.md", DEFINITIONS),
    ("time.md", RANK_DEFINITIONS),
    ("time.md", COLD_DEFINITIONS),
    ("what-ran.md", ITERATION_DEFINITIONS),
]


@pytest.mark.parametrize(("page", "definitions"), DEFINED_ON, ids=lambda v: str(v)[:20])
def test_docs_define_every_figure_as_the_code_does(page: str, definitions: dict[str, str]) -> None:
    written = text(DOCS / page)
    for key, definition in definitions.items():
        assert f"`{key}`: {definition}." in written, key


def _anchors(page: Path) -> set[str]:
    headings = re.findall(r"^#+ (.+)$", text(page), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_every_relative_link_resolves(page: Path) -> None:
    for target in re.findall(r"\]\((?!https?://|mailto:)([^)\s]+)\)", text(page)):
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.name}: {target}"
        if anchor:
            assert anchor in _anchors(linked), f"{page.name}: {target}"


def test_the_docs_index_lists_every_page() -> None:
    index = text(DOCS / "README.md")
    for page in DOCS.glob("*.md"):
        if page.name != "README.md":
            assert f"]({page.name})" in index, page.name


def test_the_architecture_page_lists_the_taxonomy_in_order() -> None:
    listed = re.findall(r"^\| `(\w+)` \|", text(DOCS / "architecture.md"), re.MULTILINE)
    assert tuple(listed) == CATEGORIES


# --- the README's commands (issue 41: a first answer in seconds, right after the install) ---


def _section(title: str) -> str:
    readme = text(REPO / "README.md")
    start = readme.index(f"\n## {title}\n")
    end = readme.find("\n## ", start + 1)
    return readme[start : end if end != -1 else None]


def _commands(section: str) -> list[str]:
    """The `traceanalyze` command lines of a section's sh blocks (`$T` set as the block sets
    it; a trailing comment dropped)."""
    lines: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", section, re.DOTALL):
        variables = dict(re.findall(r"^(\w+)=(\S+)$", block, re.MULTILINE))
        for line in block.splitlines():
            command = line.split("  #")[0].strip()
            for name, value in variables.items():
                command = command.replace(f"${name}", value)
            if command.startswith("traceanalyze "):
                lines.append(command)
    return lines


def _run(command: str) -> str:
    from click.testing import CliRunner

    from traceanalyze.cli import main

    args = shlex.split(command)[1:]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, f"{command}: {result.output}"
    return result.stdout


def test_the_first_answer_comes_right_after_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    readme = text(REPO / "README.md")
    titles = re.findall(r"^## (.+)$", readme, re.MULTILINE)
    assert titles[:3] == ["Install", "A first answer", "The two commands"]
    first = _commands(_section("A first answer"))
    assert len(first) == 1  # one command, on one sample file (seconds, not a folder's report)
    assert re.fullmatch(r"traceanalyze summary sample_traces/\w+/\w+\.json\.gz", first[0])
    monkeypatch.chdir(REPO)
    assert "| bound | GPU-bound |" in _run(first[0])
    # the main-job command keeps its install (a fresh machine), and says it is needed once
    two = _section("The two commands")
    assert "python -m pip install -e . && traceanalyze report" in two
    assert "needed only once" in two


def test_every_readme_command_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    commands = _commands(text(REPO / "README.md"))
    assert len(commands) >= 9
    for command in commands:
        if not command.startswith("traceanalyze report"):  # 9 traces: tests/test_report.py
            assert _run(command).strip(), command
