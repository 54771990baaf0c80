#!/usr/bin/env bash
# The attention samples (issue 39), in one run on the GPU box (about 5 minutes on one H100):
#
#   bash scripts/record_attention_gpu.sh OUT
#
#   cases    sample_traces/<gpu>_attention_cases: every case with inputs of its own (masks,
#            GQA, decode, nested, flex sliding window and document masks, fp8 flex), forward,
#            with_stack (flex_document's create_block_mask shows as Python frames)
#   default  sample_traces/<gpu>_attention_default: the nine shared-input variants again, now
#            with each manifest entry's `attention` facts and PyTorch's own `dispatch` verdict
#   gpt2     sample_traces/<gpu>_gpt2: training steps of GPT-2 (transformers, random weights)
#            with eager (composed) attention and with SDPA (scripts/record_gpt2_gpu.py)
#
# <gpu> is h100 or h200, from nvidia-smi. OUT ends up holding run.log and one tar per step
# (paths relative to the repository root). A step that fails leaves its log in the tar; the
# variants a capture could not run are in its manifest. CAPTURE_ARGS add options to both
# captures, e.g. a dry run on a laptop: CAPTURE_ARGS="--device cpu --batch 1 --heads 2
# --seq 64 --head-dim 16 --dtype fp32 --repeats 2".
set -uo pipefail

out="${1:?usage: scripts/record_attention_gpu.sh OUT}"
python="${PYTHON:-python3}"
read -r -a capture_args <<<"${CAPTURE_ARGS:-}"
root="$(cd "$(dirname "$0")/.." && pwd)"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/record_attention.XXXXXX")"
log="$out/run.log"
: >"$log"
start=$SECONDS
cd "$root" || exit 1

say() { echo "[$((SECONDS - start))s] $*" | tee -a "$log"; }

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
case "$gpu" in
*H200*) prefix=h200 ;;
*H100*) prefix=h100 ;;
*) prefix=gpu ;;
esac
say "record_attention_gpu.sh on '${gpu:-no GPU}' (prefix $prefix), scratch $work"
"$python" -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), torch.cuda.is_available())" 2>&1 | sed 's/^/    /' >>"$log"

# capture NAME FOLDER OPTION...: one capture into sample_traces/FOLDER, its output in the log.
capture() {
    local name=$1 folder=$2
    shift 2
    mkdir -p "$work/sample_traces" "$work/logs"
    say "START $name"
    timeout --kill-after=10 "${STEP_S:-240}" \
        "$python" -m capture --out "$work/sample_traces/$folder" "$@" "${capture_args[@]}" \
        >"$work/logs/$name.log" 2>&1
    say "END $name: exit $?"
    tail -n 20 "$work/logs/$name.log" | sed 's/^/    | /' >>"$log"
    tar -cf "$out/$name.tar" -C "$work" "sample_traces/$folder" "logs/$name.log" 2>>"$log"
    say "packed $name.tar: $(($(stat -c %s "$out/$name.tar") / 1024)) KiB"
}

# In order of importance: a step cut short still leaves the tars of those before it.
capture cases "${prefix}_attention_cases" --with-stack --variants cases

say "START gpt2"
# shellcheck disable=SC2086  # GPT2_ARGS holds several options
timeout --kill-after=10 "${STEP_S:-240}" \
    "$python" scripts/record_gpt2_gpu.py --out "$work/sample_traces/${prefix}_gpt2" ${GPT2_ARGS:-} \
    >"$work/logs/gpt2.log" 2>&1
say "END gpt2: exit $?"
tail -n 20 "$work/logs/gpt2.log" | sed 's/^/    | /' >>"$log"
tar -cf "$out/gpt2.tar" -C "$work" "sample_traces/${prefix}_gpt2" "logs/gpt2.log" 2>>"$log"

capture default "${prefix}_attention_default"
say "done in $((SECONDS - start))s"
rm -rf "$work"
