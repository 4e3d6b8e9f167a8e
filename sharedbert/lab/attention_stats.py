"""Diagnostics of a model's attention on a batch, for the lab's studies and probes: the
share a token gives itself, the largest weight and the spread of the scores, per layer,
read from what the layers sow (`self_attention_share`, and `attention_logits` when that
collection is mutable)."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np

from sharedbert.models.bert import BertForPretraining, ModelConfig


def self_attention_shares(model_cfg: ModelConfig, params, input_ids, segment_ids,
                          input_mask) -> list[float]:
  """Each layer's mean attention of a token on itself (over heads and real tokens), for
  the given batch: a diagnostic of an initialisation (e.g. shared's positive
  semi-definite start) or of a trained model."""
  positions = jnp.zeros((input_ids.shape[0], 1), jnp.int32)
  _, state = BertForPretraining(model_cfg).apply(
      {'params': params}, input_ids, segment_ids, input_mask, positions,
      mutable=['intermediates'])
  # Unrolled: one value per layer_<i>; scanned: one [L] array.
  return [float(x) for v in _sown_by_layer(state['intermediates'], 'self_attention_share')
          for x in v.reshape(-1)]


def _sown_by_layer(collection, name: str) -> list[np.ndarray]:
  """The values sown under `name` in layer order: one per layer_<i> (unrolled layers), or
  one with a leading [L] axis (scanned)."""
  found = [(jax.tree_util.keystr(path), np.asarray(v))
           for path, v in jax.tree_util.tree_leaves_with_path(collection)
           if name in jax.tree_util.keystr(path)]
  layer = lambda key: int(m.group(1)) if (m := re.search(r'layer_(\d+)', key)) else 0
  return [v for _, v in sorted(found, key=lambda kv: layer(kv[0]))]


def attention_statistics(model_cfg: ModelConfig, params, input_ids, segment_ids,
                         input_mask) -> list[dict[str, float]]:
  """Per layer, for the given batch, over heads and the real (query, key) pairs:
  'self_share', the attention a token puts on itself; 'top_weight', the largest weight a
  token gives any key (1/T is uniform); 'logit_sd', the spread of the scaled scores. A
  diagnostic of an initialisation (pairwise's P_h ~ N(0, 1) starts with scores about
  sqrt(head size) times standard's) or of a trained model."""
  positions = jnp.zeros((input_ids.shape[0], 1), jnp.int32)
  _, state = BertForPretraining(model_cfg).apply(
      {'params': params}, input_ids, segment_ids, input_mask, positions,
      mutable=['attention_logits'])
  real = np.asarray(input_mask, bool)                                        # [B, T]
  pairs = real[:, None, :, None] & real[:, None, None, :]                    # [B, 1, T, S]
  out = []
  for sown in _sown_by_layer(state['attention_logits'], 'logits'):
    for logits in (sown if sown.ndim == 5 else sown[None]):                 # [B, N, T, S]
      # Keys a query may not see (padding, or later tokens of a causal model) sit at the
      # float32 minimum: out of the spread as they are out of the softmax.
      seen = pairs & (logits > np.finfo(np.float32).min / 2)
      logits = logits.astype(np.float64)
      probs = np.exp(logits - logits.max(-1, keepdims=True))
      probs /= probs.sum(-1, keepdims=True)
      rows = np.broadcast_to(real[:, None, :], probs.shape[:3])             # [B, N, T]
      out.append({
          'self_share': float(np.diagonal(probs, axis1=-2, axis2=-1)[rows].mean()),
          'top_weight': float(probs.max(-1)[rows].mean()),
          'logit_sd': float(logits[seen].std())})
  return out
