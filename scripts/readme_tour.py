"""Regenerate (or check) the command outputs and definitions in README.md and docs/*.md.

A tour block in the README or a docs page is::

    <!-- tour: kernels sample_traces/h200_default/sdpa_flash.json.gz --top 3 -->
    ```text
    $ traceanalyze kernels sample_traces/h200_default/sdpa_flash.json.gz --top 3
    ...output...
    ```
    <!-- /tour -->

``<!-- tour: ARGS | lines N -->`` keeps the first N lines of the output and says how many
were left out. A definitions block prints a DEFINITIONS dict of the code, one ``- `name`:
sentence.`` line per entry, so a figure's definition is written once, in the code::

    <!-- definitions: traceanalyze.tables.definitions:COLUMN_DEFINITIONS -->
    - `speedup_low`: ...
    <!-- /definitions -->
 A block whose input lies beside the repository (``../shared/...``, the public
traces) is kept as it is where that input is absent. Run from the repository root:

    PYTHONPATH=$PWD python scripts/readme_tour.py          # rewrite the blocks
    PYTHONPATH=$PWD python scripts/readme_tour.py --check  # exit 1 if a block is out of date

(PYTHONPATH: the commands of this checkout, not of an editable install elsewhere.)
"""

from __future__ import annotations

import argparse
import importlib
import re
import shlex
import sys
from pathlib import Path

from click.testing import CliRunner

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


def pages() -> list[Path]:
    """The files that hold tour blocks: the README and every docs page."""
    return [README, *sorted((REPO / "docs").glob("*.md"))]


BLOCK = re.compile(
    r"<!-- tour: (?P<args>.+?)(?: \| lines (?P<lines>\d+))? -->\n.*?<!-- /tour -->",
    re.DOTALL,
)


def run(args: str) -> str:
    from traceanalyze.cli import main

    result = CliRunner().invoke(main, shlex.split(args), catch_exceptions=False)
    return result.stdout


def render(match: re.Match[str]) -> str:
    args, lines = match["args"].strip(), match["lines"]
    beside = [word for word in shlex.split(args) if word.startswith("../")]
    if any(not (REPO / word).exists() for word in beside):
        return match.group(0)
    output = run(args).rstrip("\n").splitlines()
    if lines is not None and len(output) > int(lines):
        left = len(output) - int(lines)
        output = [*output[: int(lines)], f"({left} more line{'s' if left != 1 else ''})"]
    body = "\n".join([f"$ traceanalyze {args}", *output])
    head = f"<!-- tour: {args}{f' | lines {lines}' if lines else ''} -->"
    return f"{head}\n```text\n{body}\n```\n<!-- /tour -->"


DEFINITIONS_BLOCK = re.compile(
    r"<!-- definitions: (?P<module>[\w.]+):(?P<name>\w+) -->\n.*?<!-- /definitions -->",
    re.DOTALL,
)


def definition_lines(module: str, name: str) -> str:
    """One ``- `key`: sentence.`` line per entry of the dict ``name`` in ``module``."""
    definitions: dict[str, str] = getattr(importlib.import_module(module), name)
    return "\n".join(f"- `{key}`: {text}." for key, text in definitions.items())


def render_definitions(match: re.Match[str]) -> str:
    module, name = match["module"], match["name"]
    head = f"<!-- definitions: {module}:{name} -->"
    return f"{head}\n{definition_lines(module, name)}\n<!-- /definitions -->"


def regenerate(text: str) -> str:
    return DEFINITIONS_BLOCK.sub(render_definitions, BLOCK.sub(render, text))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a block is out of date")
    options = parser.parse_args()
    stale = []
    for page in pages():
        current = page.read_text(encoding="utf-8")
        fresh = regenerate(current)
        if fresh != current:
            stale.append(page.relative_to(REPO))
            if not options.check:
                page.write_text(fresh, encoding="utf-8")
    if options.check and stale:
        print(
            f"tour blocks out of date in {', '.join(map(str, stale))}: run scripts/readme_tour.py"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
