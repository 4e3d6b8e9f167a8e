#!/usr/bin/env bash
# The rotary study's device preset (configs/study.py:gpu_long): cpu_rotary's twelve arms
# (five variants with learned and rotary positions, shared and symmetric with a query
# phase), its two selection seeds and its diagonal init, at BERT-small scale (L=4, D=256,
# rows of 128 tokens, batch 128, bfloat16), 1,000 steps a run: two rates an arm on two
# seeds, then 2 verdict seeds (3 for the headline's arms), 76 runs one at a time. Not yet
# timed on a GPU: each call stops at 9.5 minutes and the next call resumes, so run it
# until report.md no longer says Partial. Needs jax with CUDA (pip install -e ".[cuda]").
#
#   bash bench/gpu_long.sh [CORPUS]       # CORPUS: a .txt file or folder; default: demo
#
# Writes OUT/gpu_long/ (OUT defaults to bench/): report.md, summary.json, arms.png.
# Rerun the same command to resume a run that was cut short.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-bench}/gpu_long"
corpus="${1:-demo}"
PYTHON="${PYTHON:-$(command -v python || command -v python3)}"
"$PYTHON" - <<'PY'
import jax, sys
if jax.devices()[0].platform != 'gpu':
  sys.exit(f'bench/gpu_long.sh: no GPU visible to jax (devices: {jax.devices()})')
print('GPU:', jax.devices()[0].device_kind, flush=True)
PY
export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}"
start=$(date +%s)
timeout 570 "$PYTHON" -m sharedbert.lab.study \
  --config="configs/study.py:gpu_long,corpus=$corpus" --workdir="$out"
echo "bench/gpu_long.sh: $(( $(date +%s) - start )) s wall, compilation included"
