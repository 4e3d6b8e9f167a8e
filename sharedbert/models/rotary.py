"""Rotary position embeddings (RoPE; Su et al., RoFormer, arXiv 2104.09864).

`model.position_embeddings='rotary'` adds no table to the input. Instead each head's queries
and keys are rotated by their positions just before the scores are formed: the head width H
is split into H/2 pairs of adjacent columns (2p, 2p+1), and pair p of the vector at position
t turns by the angle t * w_p, with w_p = theta^(-2p/H) (`model.rope_theta`). Because
R(a)^T R(b) = R(b - a), the score q_i . k_j then depends on the positions only through
j - i: shifting every position by the same amount leaves the scores unchanged. This is
RoFormer's layout (adjacent pairs, theta = 10,000), so a `standard` rotary model is exactly
transformers' RoFormer (sharedbert.convert.hf).

`model.rope_query_phase` (phi, in positions) turns query i by (i + phi) * w_p and key j by
j * w_p. With phi = 0 a model whose queries equal its keys (Q = K: `symmetric`, `single`)
keeps a symmetric score matrix, q_i^T R(j-i) q_j = q_j^T R(i-j) q_i; phi != 0 breaks that
at zero parameters (docs/variants.md, "Positions").
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

POSITION_EMBEDDINGS = ('learned', 'rotary', 'none')


def frequencies(head_dim: int, theta: float) -> np.ndarray:
  """The rotation frequencies, w_p = theta^(-2p/H).

  Args:
    head_dim: H, even.
    theta: the base (RoFormer's 10,000).
  Returns:
    float64 [H/2].
  """
  return theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)


def angles(length: int, head_dim: int, theta: float, phase: float = 0.0) -> np.ndarray:
  """(t + phase) * w_p for t = 0..length-1, float32 [length, H/2].

  Computed in float64 by NumPy at trace time (the length is static), so the tables are
  constants of the compiled program and identical on every backend.

  Args:
    length: T, the sequence length.
    head_dim: H, even.
    theta: the frequencies' base.
    phase: phi, in positions (queries' phase; 0 for keys).
  Returns:
    float32 [T, H/2] angles in radians.
  """
  t = np.arange(length, dtype=np.float64) + phase
  return (t[:, None] * frequencies(head_dim, theta)[None, :]).astype(np.float32)


def rotate(x, angle):
  """x [B,T,N,H] with its column pairs (2p, 2p+1) turned by angle [T, H/2] (radians):
  (x_2p, x_2p+1) -> (x_2p cos - x_2p+1 sin, x_2p sin + x_2p+1 cos), in x's dtype.

  Elementwise on the last axis only: the heads axis, which the mesh's tensor axis splits,
  is untouched, so every pair stays on the device that holds its head.

  Args:
    x: [B, T, N, H] queries or keys.
    angle: [T, H/2] radians (`angles`).
  Returns:
    [B, T, N, H], x's dtype.
  """
  cos = jnp.asarray(np.cos(angle), x.dtype)[None, :, None, :]   # [1, T, 1, H/2]
  sin = jnp.asarray(np.sin(angle), x.dtype)[None, :, None, :]
  pairs = x.reshape(*x.shape[:-1], x.shape[-1] // 2, 2)
  even, odd = pairs[..., 0], pairs[..., 1]
  turned = jnp.stack([even * cos - odd * sin, even * sin + odd * cos], axis=-1)
  return turned.reshape(x.shape)


def apply(q, k, *, theta: float, query_phase: float = 0.0):
  """(q, k), each [B,T,N,H], rotated by their positions 0..T-1 (the queries by t + phase).

  Args:
    q: queries [B, T, N, H] (H even), as the variant forms its scores from them.
    k: keys [B, S, N, H]; S = T (self-attention).
    theta: the base of the frequencies (`model.rope_theta`).
    query_phase: phi, added to the queries' positions (`model.rope_query_phase`).
  Returns:
    The rotated (q, k), same shapes and dtypes.
  """
  head_dim = q.shape[-1]
  key_angle = angles(k.shape[1], head_dim, theta)
  query_angle = key_angle if query_phase == 0 and q.shape[1] == k.shape[1] else angles(
      q.shape[1], head_dim, theta, query_phase)
  return rotate(q, query_angle), rotate(k, key_angle)


def flops(tokens: int, width: int) -> int:
  """Forward FLOPs of rotating one [tokens, width] tensor: two products and a sum per
  element (x cos and the partner's x sin, added).

  Args:
    tokens: rows.
    width: columns.
  Returns:
    3 * tokens * width.
  """
  return 3 * tokens * width
