#!/usr/bin/env bash
# The long study's device preset (configs/study.py:gpu_long): the horizon comparison at
# BERT-small scale (L=4, D=256, rows of 128 tokens, batch 128, bfloat16), `standard` and
# `shared` with 2 seeds each at 1,000 / 2,000 / 4,000 steps, each run its own full schedule,
# one rate (no selection: the report says so). Aimed at under 10 minutes on one H100,
# compilation included; stops at 9.5. Needs jax with CUDA (pip install -e ".[cuda]").
#
#   bash bench/gpu_long.sh [CORPUS]       # CORPUS: a .txt file or folder; default: demo
#
# Writes OUT/gpu_long/ (OUT defaults to bench/): report.md, summary.json, horizon.png.
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
