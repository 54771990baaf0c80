#!/usr/bin/env bash
# The scanner's fuzzing job (CI runs it; by hand the same): builds fuzz/out/scan_fuzzer
# (libFuzzer + ASan + UBSan), seeds it with the sample, public and corpus traces cut into small
# documents, fuzzes for $FUZZ_SECONDS (90 by default) starting from the kept corpus
# (fuzz/corpus), then runs the differential check (fuzz/differential.py) over the kept corpus
# and what this run found. Any crash, leak, sanitizer report or difference fails it; the
# input that caused it is left in fuzz/out/ (add it to fuzz/corpus once fixed).
#   fuzz/run.sh                  # 90 s
#   FUZZ_SECONDS=1800 nice fuzz/run.sh
#   FUZZ_KEEP=1 fuzz/run.sh      # then merge what it found into fuzz/corpus (minimised)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python}
"$here/build.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/new" "$here/corpus"
"$python" "$here/seeds.py" "$work/seeds" --per-trace "${FUZZ_SEEDS_PER_TRACE:-8}"
status=0
"$here/out/scan_fuzzer" -max_total_time="${FUZZ_SECONDS:-90}" -timeout=10 -max_len=16384 \
    -print_final_stats=1 -artifact_prefix="$here/out/" \
    "$work/new" "$here/corpus" "$work/seeds" >"$here/out/fuzz.log" 2>&1 || status=$?
# the run's start, its last progress line, its statistics and any report
grep -E "INITED|DONE|^stat::|ERROR|SUMMARY|differ|==[0-9]+==" "$here/out/fuzz.log" | tail -40
if [ "$status" != 0 ]; then
    tail -60 "$here/out/fuzz.log"
    echo "fuzz/run.sh: the fuzzer failed ($status); its input is in $here/out/"
    exit 1
fi
"$python" "$here/differential.py" "$here/corpus" "$work/new"
if [ -n "${FUZZ_KEEP:-}" ]; then
    "$here/out/scan_fuzzer" -merge=1 -max_len=16384 "$here/corpus" "$work/new" 2>&1 | tail -2
fi
