#!/usr/bin/env bash
# The C scanner and linking's C call tree built with AddressSanitizer + UndefinedBehaviorSanitizer,
# then the tests that drive them hardest run on that build: the byte-mutation fuzz run, the
# hypothesis corruptions, the scanner-vs-msgspec differential tests on the sample and public
# traces, and the call tree's walk against its Polars reference. Any memory error or undefined
# behaviour aborts the run (non-zero exit). Used by .ci/run; by hand:
#   scripts/sanitize_scanner.sh                 # TRACEANALYZE_FUZZ_SECONDS=25 by default
# The copy is made in a temporary folder so that the repository's own build is left alone.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$repo/traceanalyze" "$repo/tests" "$repo/scripts" "$repo/bench" "$repo/pyproject.toml" "$repo/setup.py" "$work/"
ln -s "$repo/sample_traces" "$work/sample_traces"
rm -f "$work"/traceanalyze/load/_scan*.so "$work"/traceanalyze/_tree*.so
cd "$work"
sanitize="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
CFLAGS="$sanitize -g" LDFLAGS="$sanitize" python setup.py -q build_ext --inplace >/dev/null 2>&1
ls traceanalyze/load/_scan*.so traceanalyze/_tree*.so >/dev/null || { echo "the sanitized extensions did not build"; exit 1; }
# Python itself is not built with ASan: its runtime must be loaded first.
export LD_PRELOAD="$(${CC:-gcc} -print-file-name=libasan.so) $(${CC:-gcc} -print-file-name=libubsan.so)"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export PYTHONPATH="$work" TRACEANALYZE_REQUIRE_SCANNER=1
export TRACEANALYZE_FUZZ_SECONDS="${TRACEANALYZE_FUZZ_SECONDS:-25}"
# --capture=sys: a sanitizer report is written to fd 2 just before the abort
python -m pytest -q -x -p no:cacheprovider --capture=sys tests/test_scan_tables.py tests/test_scan_fuzz.py \
    tests/test_load_properties.py tests/test_load_paths.py tests/test_load_parallel.py tests/test_load_reading.py tests/test_call_tree_reference.py \
    -k "not bench_trace"
