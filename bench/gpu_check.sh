#!/usr/bin/env bash
# The GPU check of BENCHMARKS.md: BERT-base (12 layers, vocabulary 30522), sequence 128,
# batch 256, bfloat16, cuDNN's fused attention kernel, `standard` and `shared`, against the
# datasheet peak of the GPU and a measured 8192^3 bfloat16 matrix product. Needs jax with
# CUDA (pip install -e ".[cuda]"). Target: standard >= 50% MFU on one H200 (0.32 on
# 2026-12-04). Runs in about 2 minutes on an H200; stops at 8. The second form adds A/B
# sizes, each one change from gpu_base: XLA's attention instead of cuDNN's, the word table's
# gradient as a one-hot product, and the recipe's attention dropout (0.1, so the einsum
# softmax); about 1 minute more each:
#
#   bash bench/gpu_check.sh [extra sharedbert.lab.bench flags]
#   bash bench/gpu_check.sh --sizes=gpu_base,gpu_base_fused,gpu_base_one_hot,gpu_base_recipe
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-bench}"
# `python` where a virtual environment provides one, else python3 (bare CUDA images).
PYTHON="${PYTHON:-$(command -v python || command -v python3)}"
mkdir -p "$out"
"$PYTHON" - <<'PY'
import jax, sys
if jax.devices()[0].platform != 'gpu':
  sys.exit(f'bench/gpu_check.sh: no GPU visible to jax (devices: {jax.devices()})')
print('GPU:', jax.devices()[0].device_kind, flush=True)
PY
# One device: the check is about one chip's MFU.
export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}"
export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.9}"
timeout 480 "$PYTHON" -m sharedbert.lab.bench --preset=gpu --hf_python=none \
  --out_json="$out/gpu_results.json" --out_md="$out/GPU.md" "$@"
