"""The building blocks every attention variant is made of: BERT's initializers with logical
axis names, the per-head input projection, the output projection W_o, and the FLOP unit
(one matrix product) the variants count in."""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax.numpy as jnp

Dtype = Any


def matmul(m: int, n: int, k: int) -> int:
  """Forward FLOPs of one [m, k] x [k, n] matrix product: the unit every variant's
  `qkv_flops` counts in (sharedbert.models.flops sums them per step).

  Args:
    m, n, k: the product's sizes.
  Returns:
    2 * m * n * k.
  """
  return 2 * m * n * k


def kernel_init(stddev: float, names: tuple[str | None, ...]):
  """BERT's truncated-normal initializer, annotated with logical axis names.

  Args:
    stddev: model.initializer_range.
    names: the kernel's logical axes.
  Returns:
    A flax initializer, partitioned.
  """
  return nn.with_logical_partitioning(nn.initializers.truncated_normal(stddev), names)


def zeros_init(names):
  """A zeros initializer annotated with logical axis `names`.

  Args:
    names: the parameter's logical axes.
  Returns:
    A flax initializer, partitioned.
  """
  return nn.with_logical_partitioning(nn.initializers.zeros_init(), names)


class HeadsProjection(nn.Module):
  """x [B,T,D] -> [B,T,N,H]: one D x (N*H) matrix product with bias, kept per head."""
  num_heads: int
  head_dim: int
  initializer_range: float
  dtype: Dtype
  param_dtype: Dtype

  @nn.compact
  def __call__(self, x, kernel=None):
    """kernel: [D,N,H] from a cross-layer dictionary (masa); by default this module's own."""
    if kernel is None:
      kernel = self.param('kernel', kernel_init(self.initializer_range, ('embed', 'heads', 'kv')),
                          (x.shape[-1], self.num_heads, self.head_dim), self.param_dtype)
    bias = self.param('bias', zeros_init(('heads', 'kv')), (self.num_heads, self.head_dim),
                      self.param_dtype)
    y = jnp.einsum('BTD,DNH->BTNH', x.astype(self.dtype), kernel.astype(self.dtype))
    return y + bias.astype(self.dtype)


class OutputProjection(nn.Module):
  """W_o: [B,T,N,H] -> [B,T,D], with bias."""
  hidden_size: int
  initializer_range: float
  dtype: Dtype
  param_dtype: Dtype

  @nn.compact
  def __call__(self, x, kernel=None, input_scale=None):
    """kernel: [N,H,D] from a cross-layer dictionary (masa); by default this module's own.
    input_scale: [N,H], x's columns scaled before W_o; folded into the kernel, a [N,H,D]
    product instead of a [B,T,N,H] one."""
    _, _, n, h = x.shape
    if kernel is None:
      kernel = self.param('kernel', kernel_init(self.initializer_range, ('heads', 'kv', 'embed')),
                          (n, h, self.hidden_size), self.param_dtype)
    bias = self.param('bias', zeros_init(('embed',)), (self.hidden_size,), self.param_dtype)
    kernel = kernel.astype(self.dtype)
    if input_scale is not None:
      kernel = kernel * input_scale[:, :, None].astype(self.dtype)
    y = jnp.einsum('BTNH,NHD->BTD', x.astype(self.dtype), kernel)
    return y + bias.astype(self.dtype)


def output_projection(module: nn.Module, out, hidden_size: int, kernel=None, input_scale=None):
  """W_o, created inside `module` under the name 'out' (its kernel given, for masa).

  Args:
    module: the attention layer that owns W_o.
    out: [B, T, N, H] the heads' outputs.
    hidden_size: D.
    kernel: W_o [N, H, D] from elsewhere (masa's dictionary), or None for a parameter.
    input_scale: [N, H] to fold into W_o (shared's d_v), or None.
  Returns:
    [B, T, D].
  """
  c = module.config
  return OutputProjection(hidden_size, c.initializer_range, c.dtype, c.param_dtype,
                          name='out')(out, kernel, input_scale)
