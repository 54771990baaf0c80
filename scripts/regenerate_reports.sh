#!/bin/sh
# After sample_traces/h200_default is re-recorded: rewrite the committed example report, the
# golden files of `report` and `compare` (its first section included) and the README's tour.
# Run from anywhere; review `git diff` before committing.
set -e
cd "$(dirname "$0")/.."
PYTHONPATH=$PWD python scripts/example_report.py
TRACEANALYZE_UPDATE_GOLDEN=1 python -m pytest -q -p no:cacheprovider \
    tests/test_report.py tests/test_findings.py tests/test_compare_diff.py -k golden
PYTHONPATH=$PWD python scripts/readme_tour.py
