"""Move the long README's sections into docs/ pages, one page per family of commands (issue 41).

A migration tool: it reads a README.md that still holds every section (``## ...``), and writes
each page of :data:`PAGES` from the sections it names, verbatim, with their links made relative
to docs/ (``docs/x`` -> ``x``, ``bench/x`` -> ``../bench/x``, ``#anchor`` -> the page holding
that section). The README's introduction and :data:`KEPT` stay in the README. A section that
no page names, or a page's section that the README lacks, is an error naming it: add it to
:data:`PAGES` (a branch that added a README section after the move). Run from the repository
root, on the long README (the short one has nothing to move):

    python scripts/docs_from_readme.py                 # README.md -> docs/*.md
    python scripts/docs_from_readme.py --readme LONG.md
    PYTHONPATH=$PWD python scripts/readme_tour.py      # then the tour blocks, as always

Once the move is merged, the docs pages are the source and this script has no more to do.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"


@dataclass(frozen=True)
class Page:
    file: str
    title: str
    intro: str
    sections: tuple[str, ...]


# The README's sections that stay in it (the short README is written by hand around them).
KEPT = ("The two commands",)

PAGES: tuple[Page, ...] = (
    Page(
        "tour.md",
        "A tour of the commands",
        "The commands on the sample traces, one question each, with their output as it is "
        "today (`PYTHONPATH=$PWD python scripts/readme_tour.py` regenerates every block; "
        "`tests/test_readme.py` fails when one is out of date).",
        ("A tour",),
    ),
    Page(
        "what-ran.md",
        "What ran: kernels, occupancy, roofline, attention, iterations, memory, stacks",
        "The commands of `traceanalyze --help`'s *What ran*: `info`, `summary`, `iterations`, "
        "`kernels`, `occupancy`, `cudnn`, `memcpy`, `graphs`, `stacks`, `memory`, `roofline`, "
        "`attention`. "
        "Their per-iteration figures are defined in [time.md](time.md).",
        (
            "How close to the hardware",
            "Attention: what ran, how well, and why not faster",
            "Iterations",
            "Memory",
            "Python stacks",
        ),
    ),
    Page(
        "audit.md",
        "Can this trace be trusted? audit",
        "`audit TRACE|FOLDER` checks the trace itself (lost, clipped and misplaced events, "
        "clock skew between ranks) before any figure is read from it; every command warns "
        "of what it finds.",
        ("Can this trace be trusted?",),
    ),
    Page(
        "time.md",
        "Where the time goes: accounting, idle time, cold starts, the critical path",
        "How every per-iteration figure is defined (one sentence each, the same sentences the "
        "report prints), and the commands of *Time between kernels*: `idle`, `launches`, "
        "`streams`, `critical-path`, `comms`, `cold` (and `graphs`).",
        (
            "How time is counted",
            "Why the GPU idles, and whether launches keep up",
            "Cold start and CUDA graph replays",
            "Critical path and collectives",
        ),
    ),
    Page(
        "several-traces.md",
        "Several traces: compare, report, diff, explain",
        "The commands of *Several traces*. `compare` and `explain` are shown in the "
        "[tour](tour.md); the report of the sample captures is committed: "
        "[example_report/report.md](example_report/report.md). `ranks` has its own page: "
        "[ranks.md](ranks.md).",
        ("What the report says first",),
    ),
    Page(
        "ranks.md",
        "Ranks: one job, one trace per rank",
        "`ranks FOLDER`, the per-rank figures (defined in [time.md](time.md)), the engines "
        "that run one task per rank, and clock alignment.",
        ("A job of many ranks",),
    ),
    Page(
        "tools.md",
        "Query and tools: sql, schema, capture, annotate",
        "SQL over a trace's tables, recording traces on a GPU box, and annotated traces for "
        "Perfetto. `check` is in the [tour](tour.md); `schema` and `cache` in "
        "[formats.md](formats.md).",
        (
            "SQL over a trace",
            "Capture on a GPU box, analyse on a laptop",
            "Annotated traces for Perfetto",
        ),
    ),
    Page(
        "python.md",
        "The Python API",
        "`import traceanalyze as ta`: one function per command, taking what the command takes "
        "and returning DataFrames or small frozen results.",
        ("As a library", "What a path is", "In a notebook"),
    ),
    Page(
        "formats.md",
        "Output formats, table schemas, stable keys, the cache",
        "What `--format`, `-o` and `--table` write, the declared schema of every table, the "
        "JSON keys that are a public contract, and the cache of loaded traces.",
        ("Output formats", "Column definitions", "Stable keys", "The cache, and number formats"),
    ),
    Page(
        "speed.md",
        "Speed",
        "How fast traces load and analyses run, measured with the scripts in `bench/`.",
        ("Speed",),
    ),
    Page(
        "layout.md",
        "Repository layout",
        "Where the code lives; [architecture.md](architecture.md) says how it fits together.",
        ("Layout",),
    ),
)

HEADING = re.compile(r"^## (.+)$", re.MULTILINE)
FENCE = re.compile(r"^```", re.MULTILINE)
LINK = re.compile(r"\]\((?!https?://|mailto:)([^)\s]+)\)")


def sections(readme: str) -> dict[str, str]:
    """The README's ``## `` sections by title, each with its heading; a line in a fenced code
    block is not a heading (the attention tour's output has a ``## Calls`` line)."""
    fences = [m.start() for m in FENCE.finditer(readme)]
    found = [
        m
        for m in HEADING.finditer(readme)
        if sum(1 for f in fences if f < m.start()) % 2 == 0  # outside every ``` block
    ]
    return {
        m[1].strip(): readme[m.start() : found[i + 1].start() if i + 1 < len(found) else None]
        for i, m in enumerate(found)
    }


def anchor(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def relinked(text: str, page: str, pages_of: dict[str, str]) -> str:
    """``text``'s relative links, written from README.md, as written from docs/``page``."""

    def one(match: re.Match[str]) -> str:
        target = match[1]
        if target.startswith("#"):
            where = pages_of.get(target[1:])
            if where is None:
                raise SystemExit(f"docs_from_readme: no section has the anchor {target}")
            return f"]({target if where == page else where + target})"
        if target.startswith("docs/"):
            return f"]({target.removeprefix('docs/')})"
        return f"](../{target})"

    return LINK.sub(one, text)


def pages(readme: str) -> dict[str, str]:
    """Each docs page's text, from ``readme``."""
    found = sections(readme)
    named = {title for page in PAGES for title in page.sections}
    unplaced = [t for t in found if t not in named and t not in KEPT]
    missing = [t for t in named if t not in found]
    if unplaced or missing:
        raise SystemExit(
            f"docs_from_readme: sections no page names: {unplaced}; sections the README "
            f"lacks: {missing}. Edit PAGES in scripts/docs_from_readme.py."
        )
    pages_of = {anchor(t): p.file for p in PAGES for t in p.sections}
    written = {}
    for page in PAGES:
        body = "".join(found[t].rstrip("\n") + "\n\n" for t in page.sections).rstrip("\n")
        intro = textwrap.fill(page.intro, width=96, break_on_hyphens=False)
        written[page.file] = f"# {page.title}\n\n{intro}\n\n{relinked(body, page.file, pages_of)}\n"
    return written


def index() -> str:
    """docs/README.md: the pages, in order (the docs folder's index)."""
    lines = [f"- [{p.title}]({p.file})" for p in PAGES]
    return "\n".join(
        [
            "# traceanalyze documentation",
            "",
            *lines,
            "- [How traceanalyze is built](architecture.md): data flow, layering, the step "
            "model, the kernel taxonomy",
            "- [An example report](example_report/report.md): `report` on the sample captures",
            "- [Which traces have which faults](audit_findings.md): `audit` over the public and "
            "corpus traces, checked by hand",
            "",
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readme", type=Path, default=REPO / "README.md")
    options = parser.parse_args()
    for name, text in pages(options.readme.read_text(encoding="utf-8")).items():
        (DOCS / name).write_text(text, encoding="utf-8")
    (DOCS / "README.md").write_text(index(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
