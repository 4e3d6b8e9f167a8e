"""Every attention variant computes the same loss and gradients on an accelerator as on the
CPU: the check that runs beside bench/gpu_check.sh on a GPU (or TPU) machine.

For each registered variant, one small model (2 layers, D=256, 4 heads, sequence 128) and one
masked batch; the MLM loss and its gradients are computed
  * on the CPU in float32 (the reference the unit tests pin down),
  * on the accelerator in float32 with 'highest' matmul precision (no TF32): should agree to
    float32 rounding,
  * on the accelerator in bfloat16 with attention_impl='xla', 'fused' (jax.nn.
    dot_product_attention, XLA's) and 'cudnn' (cuDNN's kernel, on a GPU): should agree with
    each other to bfloat16 rounding.
Prints one row per variant and exits 1 if a float32 loss or gradient differs by more than
the tolerance. Without an accelerator both sides run on the CPU (a harness check only).

  python tools/gpu_parity.py [--variants=standard,shared] [--tol=1e-4]
"""

from __future__ import annotations

import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from sharedbert import pretrain_step  # noqa: E402
from sharedbert.lab.bench.sizes import Size, synthetic_batch  # noqa: E402
from sharedbert.models import attention as attention_lib  # noqa: E402
from sharedbert.models.bert import BertForPretraining, ModelConfig  # noqa: E402

SIZE = Size(2, 256, 4, 1024, 8192, batch=4, seq_len=128)


def model_config(variant: str, dtype: str, impl: str) -> ModelConfig:
  return ModelConfig(attention=variant, vocab_size=SIZE.vocab_size, hidden_size=SIZE.hidden_size,
                     num_layers=SIZE.num_layers, num_heads=SIZE.num_heads, mlp_dim=SIZE.mlp_dim,
                     dtype=jnp.dtype(dtype), attention_impl=impl)


def loss_and_grads(cfg: ModelConfig, params, batch, device):
  """Mean masked-token cross-entropy and its gradients, computed on `device`."""
  model = BertForPretraining(cfg)

  def mean_loss(p):
    total, (count, _) = pretrain_step.mlm_loss(model, p, batch, None, deterministic=True)
    return total / count

  params, batch = jax.device_put((params, batch), device)
  loss, grads = jax.jit(jax.value_and_grad(mean_loss))(params)
  return jax.device_get((loss, grads))


def max_rel(a, b) -> tuple[float, str]:
  """The largest |a-b| of a leaf, relative to that leaf's largest |b|, and the leaf's path.

  A leaf whose gradient is zero in exact arithmetic (the key bias: it adds the same amount to
  every score of a row, which softmax ignores) holds only rounding noise (~1e-12), so each
  leaf's scale is at least 1e-3 of the largest |b| of any leaf.
  """
  floor = 1e-3 * max(float(np.max(np.abs(np.asarray(y, np.float32))))
                     for y in jax.tree.leaves(b))
  worst = (0.0, '')
  for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(a), jax.tree.leaves(b)):
    x, y = np.asarray(x, np.float32), np.asarray(y, np.float32)
    err = float(np.max(np.abs(x - y))) / max(float(np.max(np.abs(y))), floor, 1e-30)
    worst = max(worst, (err, jax.tree_util.keystr(path)))
  return worst


def short(path: str) -> str:
  """A leaf's path without the brackets: bert/layer_0/attention/key/kernel."""
  return '(' + '/'.join(re.findall(r"\['([^']+)'\]", path)) + ')'


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--variants', default=','.join(sorted(attention_lib.VARIANTS)))
  parser.add_argument('--tol', type=float, default=1e-4,
                      help='Largest relative float32 difference (accelerator vs CPU) allowed.')
  args = parser.parse_args()

  cpu = jax.devices('cpu')[0]
  accel = jax.devices()[0]
  print(f'reference: {cpu.device_kind}; accelerator: {accel.platform} {accel.device_kind}; '
        f'jax {jax.__version__}', flush=True)
  if accel.platform == 'cpu':
    print('no accelerator: both sides run on the CPU (checks the harness only)')

  batch = {k: np.asarray(v) for k, v in synthetic_batch(SIZE, seed=1).items()}
  impls = ('fused', 'cudnn')
  header = ['variant', 'loss (CPU f32)', 'f32 loss', 'f32 grads (worst leaf)', 'bf16 xla loss']
  for impl in impls:
    header += [f'bf16 {impl} vs xla loss', f'bf16 {impl} vs xla grads (worst leaf)']
  print(' | '.join(header))
  failed = []
  for variant in args.variants.split(','):
    ref_cfg = model_config(variant, 'float32', 'xla')
    params = jax.device_get(pretrain_step.init_params(BertForPretraining(ref_cfg),
                                                      jax.random.key(0)))
    ref_loss, ref_grads = loss_and_grads(ref_cfg, params, batch, cpu)
    with jax.default_matmul_precision('highest'):
      loss32, grads32 = loss_and_grads(ref_cfg, params, batch, accel)
    xla16, xla16_grads = loss_and_grads(model_config(variant, 'bfloat16', 'xla'), params,
                                        batch, accel)
    loss_err = abs(float(loss32) - float(ref_loss)) / abs(float(ref_loss))
    grad_err, grad_leaf = max_rel(grads32, ref_grads)
    row = [variant, f'{float(ref_loss):.6f}', f'{loss_err:.1e}',
           f'{grad_err:.1e} {short(grad_leaf)}', f'{float(xla16):.4f}']
    for impl in impls:
      loss16, grads16 = loss_and_grads(model_config(variant, 'bfloat16', impl), params, batch,
                                       accel)
      err, leaf = max_rel(grads16, xla16_grads)
      row += [f'{abs(float(loss16) - float(xla16)) / abs(float(xla16)):.1e}',
              f'{err:.1e} {short(leaf)}']
    print(' | '.join(row), flush=True)
    if not (loss_err <= args.tol and grad_err <= args.tol):
      failed.append(variant)
  if failed:
    print(f'FAILED: float32 on {accel.platform} differs from the CPU by more than '
          f'{args.tol:g} for: {", ".join(failed)}')
    sys.exit(1)
  print(f'OK: every variant\'s float32 loss and gradients agree with the CPU to {args.tol:g}')


if __name__ == '__main__':
  main()
