"""Self-attention variants behind one interface.

Every variant is a Linen module called as `attn(x, mask, deterministic=...)` with
x: [B, T, D] and mask: [B, 1, 1, T] (True where a key may be attended to), and returns
[B, T, D]. A variant only decides how queries, keys and values (and optionally a per-head
transform of the queries) are computed; the scaled dot-product, softmax and the output
projection W_o are shared by all of them (`AttentionCore`, `output_projection`).

Variants (../shared/DESIGN.md defines each exactly):
  standard  Q = xW_q+b_q, K = xW_k+b_k, V = xW_v+b_v (BERT).
  shared    S = xW_s+b_s; Q, K, V = S*d_q, S*d_k, S*d_v (Kowsher et al., arXiv 2412.00359).
            One matrix product instead of three. The score matrix S diag(d_q*d_k) S^T is
            symmetric for any parameter values, which is why it is compared to `symmetric`.

Axis letters in the einsums: B batch, T/S query/key length, D model width, N heads,
H head width, C the three roles (q, k, v).
"""

from __future__ import annotations

from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

Dtype = Any

# Registry: variant name -> module class. Other modules add to it with `register`.
VARIANTS: dict[str, type[nn.Module]] = {}


def register(name: str):
  def wrap(cls):
    VARIANTS[name] = cls
    return cls
  return wrap


def kernel_init(stddev: float, names: tuple[str | None, ...]):
  """BERT's truncated-normal initializer, annotated with logical axis names."""
  return nn.with_logical_partitioning(nn.initializers.truncated_normal(stddev), names)


def zeros_init(names):
  return nn.with_logical_partitioning(nn.initializers.zeros_init(), names)


class HeadsProjection(nn.Module):
  """x [B,T,D] -> [B,T,N,H]: one D x (N*H) matrix product with bias, kept per head."""
  num_heads: int
  head_dim: int
  initializer_range: float
  dtype: Dtype
  param_dtype: Dtype

  @nn.compact
  def __call__(self, x):
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
  def __call__(self, x):
    _, _, n, h = x.shape
    kernel = self.param('kernel', kernel_init(self.initializer_range, ('heads', 'kv', 'embed')),
                        (n, h, self.hidden_size), self.param_dtype)
    bias = self.param('bias', zeros_init(('embed',)), (self.hidden_size,), self.param_dtype)
    y = jnp.einsum('BTNH,NHD->BTD', x.astype(self.dtype), kernel.astype(self.dtype))
    return y + bias.astype(self.dtype)


def output_projection(module: nn.Module, out, hidden_size: int):
  """W_o, created inside `module` under the name 'out'."""
  c = module.config
  return OutputProjection(hidden_size, c.initializer_range, c.dtype, c.param_dtype,
                          name='out')(out)


def attend(q, k, v, mask, *, dropout_rate: float, deterministic: bool, dtype: Dtype,
           impl: str, dropout_rng: Callable[[], jax.Array] | None = None):
  """Scaled dot-product attention over [B,T,N,H] inputs; softmax in float32."""
  head_dim = q.shape[-1]
  use_dropout = dropout_rate > 0.0 and not deterministic
  if impl == 'fused' and not use_dropout:
    # XLA or cuDNN flash attention; it has no attention-probability dropout.
    return jax.nn.dot_product_attention(q, k, v, mask=mask).astype(dtype)
  q = q / jnp.sqrt(head_dim).astype(q.dtype)
  scores = jnp.einsum('BTNH,BSNH->BNTS', q, k, preferred_element_type=jnp.float32)
  scores = jnp.where(mask, scores, jnp.finfo(jnp.float32).min)
  probs = jax.nn.softmax(scores, axis=-1)
  if use_dropout:
    keep = jax.random.bernoulli(dropout_rng(), 1.0 - dropout_rate, probs.shape)
    probs = jnp.where(keep, probs / (1.0 - dropout_rate), 0.0)
  return jnp.einsum('BNTS,BSNH->BTNH', probs.astype(dtype), v.astype(dtype))


class AttentionBase(nn.Module):
  """Common plumbing: subclasses implement `qkv(x) -> (q, k, v)`, each [B,T,N,H]."""
  config: Any  # sharedbert.models.bert.ModelConfig
  layer_index: int = 0

  @property
  def head_dim(self) -> int:
    return self.config.hidden_size // self.config.num_heads

  def projection(self, name: str):
    c = self.config
    return HeadsProjection(c.num_heads, self.head_dim, c.initializer_range, c.dtype,
                           c.param_dtype, name=name)

  def qkv(self, x, **kwargs):
    raise NotImplementedError

  @nn.compact
  def __call__(self, x, mask, *, deterministic: bool, **kwargs):
    c = self.config
    q, k, v = self.qkv(x, **kwargs)
    rng = (lambda: self.make_rng('dropout')) if not deterministic else None
    out = attend(q, k, v, mask, dropout_rate=c.attention_dropout_rate,
                 deterministic=deterministic, dtype=c.dtype, impl=c.attention_impl,
                 dropout_rng=rng)
    out = nn.with_logical_constraint(out, ('batch', 'length', 'heads', 'kv'))
    return output_projection(self, out, c.hidden_size)


@register('standard')
class StandardAttention(AttentionBase):
  """BERT: three independent projections."""

  def qkv(self, x, **kwargs):
    return self.projection('query')(x), self.projection('key')(x), self.projection('value')(x)


@register('shared')
class SharedAttention(AttentionBase):
  """One projection S = xW_s + b_s; the roles are S scaled by per-layer diagonals."""

  def qkv(self, x, **kwargs):
    c = self.config
    s = self.projection('shared')(x)  # [B,T,N,H]: the only matrix product.
    # d_q, d_k, d_v stacked as [3, N, H]; one einsum broadcasts them over S.
    diag = self.param('diag', nn.with_logical_partitioning(
        nn.initializers.constant(c.diag_init), ('qkv', 'heads', 'kv')),
        (3, c.num_heads, self.head_dim), c.param_dtype)
    qkv = jnp.einsum('BTNH,CNH->CBTNH', s, diag.astype(c.dtype))
    return qkv[0], qkv[1], qkv[2]
