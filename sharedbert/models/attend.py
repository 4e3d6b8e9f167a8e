"""Scaled dot-product attention over heads, apart from the variants that make Q, K and V
(attention.py): the softmax path (einsum, or jax.nn.dot_product_attention's fused kernels),
and the scores and self-attention share that diagnostics and probes read."""

from __future__ import annotations

import math
from typing import Any, Callable

import jax
import jax.numpy as jnp

from sharedbert.models import dropout as dropout_lib

Dtype = Any


def attend(q, k, v, mask, *, dropout_rate: float, deterministic: bool, dtype: Dtype,
           impl: str, dropout_rng: Callable[[], jax.Array] | None = None,
           query_scaled: bool = False):
  """Scaled dot-product attention over [B,T,N,H] inputs; softmax in float32.

  Args:
    q: queries [B, T, N, H]; k, v: keys and values [B, S, N, H].
    mask: [B, 1, 1 or T, S], True where a query may see a key.
    dropout_rate, deterministic, dropout_rng: attention-probability dropout (training).
    dtype: the output's dtype. impl: 'xla' (einsum softmax), 'fused' or 'cudnn'
      (jax.nn.dot_product_attention; without dropout only).
    query_scaled: q already carries the 1/sqrt(H) factor (a variant that folds it into a
      parameter-sized product saves a pass over q).
  Returns:
    The attended values [B, T, N, H].
  """
  head_dim = q.shape[-1]
  scale = 1.0 if query_scaled else 1.0 / math.sqrt(head_dim)
  use_dropout = dropout_rate > 0.0 and not deterministic
  if impl in ('fused', 'cudnn') and not use_dropout:
    # jax.nn.dot_product_attention has no attention-probability dropout. Its default
    # implementation is XLA's (jax 0.10-0.11); 'cudnn' asks for cuDNN's fused kernel, which
    # exists on GPUs only (elsewhere: the default) and takes the mask as a [B, 1, T, S] bias.
    if impl == 'cudnn' and jax.default_backend() == 'gpu':
      mask = jnp.broadcast_to(mask, (q.shape[0], 1, q.shape[1], k.shape[1]))
      return jax.nn.dot_product_attention(q, k, v, mask=mask, scale=scale,
                                          implementation='cudnn').astype(dtype)
    return jax.nn.dot_product_attention(q, k, v, mask=mask, scale=scale).astype(dtype)
  if not query_scaled:
    q = q / jnp.sqrt(head_dim).astype(q.dtype)
  scores = jnp.einsum('BTNH,BSNH->BNTS', q, k, preferred_element_type=jnp.float32)
  scores = jnp.where(mask, scores, jnp.finfo(jnp.float32).min)
  probs = jax.nn.softmax(scores, axis=-1)
  if use_dropout:
    keep = dropout_lib.keep_mask(dropout_rng(), dropout_rate, probs.shape)
    probs = jnp.where(keep, probs / (1.0 - dropout_rate), 0.0)
  return jnp.einsum('BNTS,BSNH->BTNH', probs.astype(dtype), v.astype(dtype))


def attention_logits(q, k, mask, *, query_scaled: bool = False):
  """The scaled scores [B,N,T,S] in float32, masked keys at the float32 minimum (what the
  softmax of `attend` sees).

  Args:
    q, k: [B, T, N, H] queries and keys.
    mask: [B, T] (1: a real token) or a [B, 1, T, S] mask.
    query_scaled: the queries already carry 1/sqrt(H).
  Returns:
    [B, N, T, S] float32.
  """
  scale = 1.0 if query_scaled else 1.0 / math.sqrt(q.shape[-1])
  scores = jnp.einsum('BTNH,BSNH->BNTS', q, k, preferred_element_type=jnp.float32) * scale
  return jnp.where(mask, scores, jnp.finfo(jnp.float32).min)


def self_attention_share(q, k, mask, *, query_scaled: bool = False):
  """The attention a token puts on itself, averaged over heads and real tokens: the mean of
  the softmax's diagonal (a diagnostic, computed only when 'intermediates' are collected).

  Args:
    q, k, mask, query_scaled: as attention_logits'.
  Returns:
    A float32 scalar.
  """
  scores = attention_logits(q, k, mask, query_scaled=query_scaled)
  diag = jnp.diagonal(jax.nn.softmax(scores, axis=-1), axis1=-2, axis2=-1)  # [B, N, T]
  # The last query row sees every real key, under a padding mask [B,1,1,S] and a causal
  # one [B,1,T,S] alike.
  real = mask[:, 0, -1, :].astype(jnp.float32)                                # [B, T]
  return jnp.sum(diag.mean(axis=1) * real) / jnp.maximum(jnp.sum(real), 1.0)
