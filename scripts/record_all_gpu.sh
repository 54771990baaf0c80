#!/usr/bin/env bash
# Everything the project records on the GPU box, in one run (about 7 minutes on one H200):
#
#   bash scripts/record_all_gpu.sh OUT
#
# Steps, in order of importance; each runs with the time left in BUDGET_S (default 470 s) and
# is skipped when too little is left, so the run ends in time and packs what it has:
#   1 samples      sample_traces/h200_default, h200_backward_large (scripts/record_samples.sh;
#                  shapes are recorded by default now)
#   2 cold         sample_traces/h200_cold: every variant from a cold start, --empty-caches
#   3 graphs       sample_traces/h200_graph_replay, h200_graph_capture (CUDA graphs)
#   1b memory      sample_traces/h200_memory_check: scripts/memory_check_gpu.py (the allocator's
#                  figures per step beside a profile_memory trace of the same steps)
#   1c stacks      sample_traces/h200_with_stack: the default capture with with_stack=True
#   4 roofline     gpu_run/roofline: scripts/roofline_check_gpu.py (hand TFLOP/s + a trace)
#   5 pytest       gpu_run/pytest: pytest -m gpu tests/gpu (needs pytest; no polars needed)
#   6 cold_more    sample_traces/h200_cold_as_found_caches (the caches the warm captures
#                  before it left: the state of a later run on one machine; warm_caches fills
#                  them when the samples step does not run) and h200_cold_new_shape (a longer
#                  sequence every 3 calls: re-planning)
# STEPS=name,name,... runs only the named steps (samples, cold, graph_replay, graph_capture,
# memory, stacks, roofline, pytest, warm_caches, cold_as_found, cold_new_shape).
#
# OUT ends up holding run.log (what ran, how long, exit status, facts of every trace) and one
# .tar per step group, paths relative to the repository root (sample_traces/..., gpu_run/...):
#   1_samples.tar 2_cold.tar 3_graphs_roofline.tar 4_pytest.tar 5_cold_more_logs.tar
# Each tar is written as soon as its steps end, so a run cut short still returns the earlier
# ones. Work happens in a scratch folder outside OUT (the device returns at most 8 files).
#
# CAPTURE_ARGS / ROOFLINE_ARGS add options to every capture / the roofline script, e.g. a dry
# run on a laptop: CAPTURE_ARGS="--device cpu --batch 1 --heads 2 --seq 64 --head-dim 16
# --dtype fp32 --repeats 2" ROOFLINE_ARGS="--device cpu --small --calls 2".
set -uo pipefail

out="${1:?usage: scripts/record_all_gpu.sh OUT}"
python="${PYTHON:-python3}"
budget="${BUDGET_S:-470}"
read -r -a capture_args <<<"${CAPTURE_ARGS:-}"
read -r -a roofline_args <<<"${ROOFLINE_ARGS:-}"
root="$(cd "$(dirname "$0")/.." && pwd)"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
export PYTHON="$python"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/record_all.XXXXXX")"
samples="$work/sample_traces"
run_dir="$work/gpu_run"
mkdir -p "$samples" "$run_dir/logs"
log="$out/run.log"
: >"$log"
start=$SECONDS
cd "$root" || exit 1

say() { echo "[$((SECONDS - start))s] $*" | tee -a "$log"; }

# step NAME NEED MOST CMD...: run CMD (output in gpu_run/logs/NAME.log) with at most MOST
# seconds and never past the budget; skip it when fewer than NEED seconds are left, or when
# STEPS (comma-separated step names) is set and does not name it.
step() {
    local name=$1 need=$2 most=$3
    shift 3
    if [[ -n "${STEPS:-}" && ",$STEPS," != *",$name,"* ]]; then
        return 0
    fi
    local left=$((budget - (SECONDS - start)))
    if ((left < need)); then
        say "SKIP $name: ${left}s left, it needs ${need}s"
        return 0
    fi
    local limit=$((left < most ? left : most)) began=$SECONDS
    say "START $name (limit ${limit}s): $*"
    timeout --kill-after=15 "$limit" "$@" >>"$run_dir/logs/$name.log" 2>&1
    local rc=$?
    say "END $name: exit $rc after $((SECONDS - began))s$( ((rc == 124)) && echo ' (timed out)')"
    tail -n 12 "$run_dir/logs/$name.log" | sed 's/^/    | /' >>"$log"
}

# pack NAME PATH...: OUT/NAME.tar of the PATHs (relative to the scratch folder) that exist.
pack() {
    local name=$1 present=()
    shift
    for path in "$@"; do [[ -e "$work/$path" ]] && present+=("$path"); done
    if ((${#present[@]} == 0)); then
        say "nothing to pack for $name"
        return 0
    fi
    tar -cf "$out/$name.tar" -C "$work" "${present[@]}"
    local size
    size=$(stat -c %s "$out/$name.tar")
    say "packed $name.tar: $((size / 1024)) KiB (${present[*]})"
    if ((size > 15 * 1024 * 1024)); then # the device returns files of at most 16 MB
        split -b 15m -d "$out/$name.tar" "$out/$name.tar.part" && rm "$out/$name.tar"
        say "split $name.tar into 15 MB parts (cat $name.tar.part* > $name.tar)"
    fi
}

# facts FOLDER...: one line of scripts/trace_facts.py per trace under the FOLDERs (relative to
# the scratch folder) into run.log and gpu_run/facts.jsonl.
facts() {
    local traces
    mapfile -t traces < <(cd "$work" && find "$@" -name '*.json.gz' 2>/dev/null | sort)
    ((${#traces[@]})) || return 0
    (cd "$work" && "$python" "$root/scripts/trace_facts.py" "${traces[@]}") |
        tee -a "$run_dir/facts.jsonl" >>"$log"
}

capture=("$python" -m capture) # CAPTURE_ARGS go last on each line, so they win

say "record_all_gpu.sh in $root, scratch $work, budget ${budget}s"
{
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv 2>&1
    "$python" -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), torch.cuda.is_available())" 2>&1
    df -h "${TMPDIR:-/tmp}" 2>&1 | tail -n 1
} | sed 's/^/    /' >>"$log"

# 1: the warm samples, as scripts/record_samples.sh always made them (now with shapes).
step samples 60 170 bash scripts/record_samples.sh "$samples" h200 "${capture_args[@]}"
facts sample_traces/h200_default sample_traces/h200_backward_large
pack 1_samples sample_traces/h200_default sample_traces/h200_backward_large gpu_run/logs/samples.log

# 1b: the allocator's own figures beside a memory trace of the same steps.
step memory 20 60 "$python" scripts/memory_check_gpu.py --out "$samples/h200_memory_check"
pack 1b_memory sample_traces/h200_memory_check gpu_run/logs/memory.log

# Python stacks (with_stack=True): what `stacks` attributes to the user's source lines.
step stacks 30 90 "${capture[@]}" --with-stack --out "$samples/h200_with_stack" "${capture_args[@]}"
pack 1c_stacks sample_traces/h200_with_stack gpu_run/logs/stacks.log

# 2: every variant from a cold start, each process with its own empty caches.
step cold 100 240 "${capture[@]}" --cold --empty-caches --process-timeout 90 \
    --out "$samples/h200_cold" "${capture_args[@]}"
facts sample_traces/h200_cold
pack 2_cold sample_traces/h200_cold gpu_run/logs/cold.log

# 3 and 4: CUDA graph traces (naive first: its capture precedes any profiler session in its
# process) and the roofline check.
step graph_replay 20 60 "${capture[@]}" --cuda-graph replay \
    --variants naive,sdpa_flash,sdpa_cudnn --out "$samples/h200_graph_replay" "${capture_args[@]}"
step graph_capture 20 60 "${capture[@]}" --cuda-graph capture \
    --variants naive,sdpa_flash,sdpa_cudnn --out "$samples/h200_graph_capture" "${capture_args[@]}"
step roofline 20 90 "$python" scripts/roofline_check_gpu.py --out "$run_dir/roofline" "${roofline_args[@]}"
facts sample_traces/h200_graph_replay sample_traces/h200_graph_capture gpu_run/roofline
pack 3_graphs_roofline sample_traces/h200_graph_replay sample_traces/h200_graph_capture \
    gpu_run/roofline gpu_run/logs/graph_replay.log gpu_run/logs/graph_capture.log gpu_run/logs/roofline.log

# 5: the GPU tests (they record their own small captures).
if "$python" -c "import pytest" 2>/dev/null; then
    mkdir -p "$run_dir/pytest"
    step pytest 60 200 "$python" -m pytest -m gpu tests/gpu -q -rA -p no:cacheprovider \
        --durations=15 --junitxml="$run_dir/pytest/junit.xml"
else
    say "SKIP pytest: not installed for $python"
fi
pack 4_pytest gpu_run/pytest gpu_run/logs/pytest.log

# 6: the second cache state (the caches the warm captures above left) and re-planning. When
# the warm samples did not run (STEPS), warm_caches fills the default caches the same way.
step warm_caches 30 90 "${capture[@]}" --out "$work/warm_caches" --repeats 2 \
    --variants sdpa_cudnn,sdpa_math,sdpa_flash,compiled_naive,flex_attention "${capture_args[@]}"
step cold_as_found 50 240 "${capture[@]}" --cold --process-timeout 90 \
    --variants sdpa_cudnn,sdpa_math,sdpa_flash,compiled_naive,flex_attention \
    --out "$samples/h200_cold_as_found_caches" "${capture_args[@]}"
step cold_new_shape 45 120 "${capture[@]}" --cold --empty-caches --process-timeout 90 \
    --new-shape-every 3 --cold-calls 9 --variants sdpa_cudnn,compiled_naive \
    --out "$samples/h200_cold_new_shape" "${capture_args[@]}"
facts sample_traces/h200_cold_as_found_caches sample_traces/h200_cold_new_shape

cp "$log" "$run_dir/run.log"
pack 5_cold_more_logs sample_traces/h200_cold_as_found_caches sample_traces/h200_cold_new_shape \
    gpu_run/logs gpu_run/facts.jsonl gpu_run/run.log
say "done in $((SECONDS - start))s; OUT holds: $(cd "$out" && ls | tr '\n' ' ')"
rm -rf "$work"
