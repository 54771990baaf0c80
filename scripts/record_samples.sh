#!/usr/bin/env bash
# Record the sample traces kept in sample_traces/ (run on a GPU machine with torch and click).
#   scripts/record_samples.sh [OUT_DIR [PREFIX [CAPTURE_OPTION...]]]   defaults: sample_traces h200
# Writes OUT_DIR/PREFIX_default (the seed article's configuration, every variant) and
# OUT_DIR/PREFIX_backward_large (forward + backward at B4 H32 S2048 D128), shapes recorded (the
# capture default). scripts/record_all_gpu.sh runs this among its other steps. Exits 1 if any
# variant failed in either run; both runs happen regardless. Extra options go to both runs and
# win over the ones here (e.g. `--device cpu --seq 64` to try the script on a laptop).
set -uo pipefail
out="${1:-sample_traces}"
prefix="${2:-h200}"
extra=("${@:3}")
python="${PYTHON:-python3}"
root="$(cd "$(dirname "$0")/.." && pwd)"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"

status=0
"$python" -m capture --out "$out/${prefix}_default" "${extra[@]}" || status=1
"$python" -m capture --out "$out/${prefix}_backward_large" --backward \
    --batch 4 --heads 32 --seq 2048 --head-dim 128 "${extra[@]}" || status=1
exit "$status"
