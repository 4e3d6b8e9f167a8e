#!/bin/bash
# Every variant's tiny run, exported and checked in real transformers (issue 43):
#   tools/check_custom_exports.sh SCRATCH_DIR HF_PYTHON [STEPS]
# SCRATCH_DIR gets one pretraining workdir and one export per variant; HF_PYTHON is a Python
# with torch and transformers (tools/check_hf_export.py runs there). Prints each check's
# figures; exits 1 if any check fails.
set -euo pipefail
scratch=${1:?scratch dir}; hf_python=${2:?python with torch and transformers}; steps=${3:-40}
repo=$(cd "$(dirname "$0")/.." && pwd)
status=0
for variant in standard shared symmetric pairwise partial_qk kv_shared single q_identity masa; do
  work=$scratch/$variant
  echo "== $variant"
  JAX_PLATFORMS=cpu python -m sharedbert.main --config="$repo/configs/${variant}_base.py:tiny" \
    --config.total_steps="$steps" --config.eval_every_steps="$steps" \
    --config.log_every_steps="$steps" --workdir="$work/run" > "$work.log" 2>&1 \
    || { echo "pretraining failed: $work.log"; status=1; continue; }
  JAX_PLATFORMS=cpu python -m sharedbert.convert.hf export --workdir="$work/run" \
    --hf_dir="$work/hf" --custom_code --overwrite | head -1
  "$hf_python" "$repo/tools/check_hf_export.py" --hf_dir="$work/hf" --workdir="$work/run" \
    --sharedbert_python="$(command -v python)" | grep -v "^  '" || status=1
done
exit $status
