"""Regenerate (or check) docs/example_report: `report` on the sample captures, as the code
writes it today. A test (tests/test_report.py) fails when the committed report drifts from
what `report` writes: run this after a change to the report, as the tour's script is run.

    PYTHONPATH=$PWD python scripts/example_report.py          # rewrite docs/example_report/
    PYTHONPATH=$PWD python scripts/example_report.py --check  # exit 1 if it is out of date

(PYTHONPATH: the commands of this checkout, not of an editable install elsewhere.)
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path

from click.testing import CliRunner

REPO = Path(__file__).resolve().parents[1]
FOLDER = REPO / "docs" / "example_report"
REPORT = FOLDER / "report.md"
CAPTURE = "sample_traces/h200_default"
# The report records the command that wrote it; the -o path is the one part that depends on
# where it was written.
PRODUCED_BY = re.compile(
    r"^(Produced by traceanalyze [^:]*: `traceanalyze report \S+) -o .*$", re.M
)


def comparable(text: str) -> str:
    """``text`` without the -o path of its "Produced by" line."""
    return PRODUCED_BY.sub(r"\1 -o ...`.", text)


def write(target: Path, *, cwd: Path) -> None:
    """`traceanalyze report CAPTURE -o target --force`, run in ``cwd`` (which holds
    sample_traces/), in this process."""
    from traceanalyze.cli import main

    here = Path.cwd()
    os.chdir(cwd)
    try:
        args = ["report", CAPTURE, "-o", os.path.relpath(target, cwd), "--force"]
        result = CliRunner().invoke(main, args, catch_exceptions=False)
    finally:
        os.chdir(here)
    if result.exit_code != 0:
        raise SystemExit(f"example_report: report failed:\n{result.output}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/ is out of date")
    options = parser.parse_args()
    if not options.check:
        write(REPORT, cwd=REPO)
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        (folder / "sample_traces").symlink_to(REPO / "sample_traces", target_is_directory=True)
        write(folder / "report.md", cwd=folder)
        fresh = comparable((folder / "report.md").read_text(encoding="utf-8"))
    if fresh != comparable(REPORT.read_text(encoding="utf-8")):
        print("docs/example_report/report.md is out of date: run scripts/example_report.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
