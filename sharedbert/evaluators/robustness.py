"""Noise robustness: score a fine-tuned classifier with Gaussian noise on its input embeddings.

The noise level is defined relative to the embeddings themselves. For a sequence with
embedding output x (the output of the embedding LayerNorm, the first encoder layer's
input; shape [T, D]), sigma is the standard deviation of x over all D features of the
sequence's non-pad tokens, and the model runs on

    x + level * sigma * z,   z ~ N(0, I) drawn independently per token and feature,

on non-pad tokens only (sharedbert.models.bert.add_embedding_noise). level = 0.1 is noise
with 10% of the embeddings' std; levels run 0-0.4 (0-40%). z comes from
jax.random.key(noise_seed) folded with the batch index, so a (level, noise seed) pair is
reproducible, and the same z (scaled) is used at every level of one noise seed. Level 0
adds exact zeros: the embeddings are unchanged bit for bit and the class predictions are
those of the clean model. (A regression score, STS-B's correlation, can differ from the
one sharedbert.tasks.finetune reports in the last digits: a different compiled program may round
differently. The study's 0% column is computed by the same program as the noisy ones.)

The dev examples are scored with several noise seeds per level; the figures kept per
level are the score of each noise seed (their mean is the level's score for that
fine-tuning seed).
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from sharedbert.tasks import engine


ScoreFn = Callable[[np.ndarray], float]


def noise_for_batch(noise_seed: int, batch_index: int, shape) -> jax.Array:
  """The standard-normal z of one batch: a pure function of (noise seed, batch index)."""
  key = jax.random.fold_in(jax.random.key(noise_seed), batch_index)
  return jax.random.normal(key, shape, jnp.float32)


def make_noisy_predict(model):
  """A jitted (params, batch, level, noise_seed, batch_index) -> logits of `model`.

  `model` is a BertForSequenceClassification (or any module whose __call__ takes
  input_ids, segment_ids, input_mask, deterministic and embedding_noise).
  """
  @jax.jit
  def predict(params, input_ids, segment_ids, input_mask, level, noise_seed, batch_index):
    z = noise_for_batch(noise_seed, batch_index, input_ids.shape + (model.config.hidden_size,))
    return model.apply({'params': params}, input_ids, segment_ids, input_mask,
                       deterministic=True, embedding_noise=level * z)

  return predict


def predict_with_noise(predict, params, batches: Sequence[dict], level: float,
                       noise_seed: int) -> np.ndarray:
  """Logits of every row of `batches` (dicts with input_ids, segment_ids, input_mask, and
  `rows`: how many leading rows are real) at one noise level and seed."""
  out = []
  for i, b in enumerate(batches):
    logits = predict(params, b['input_ids'], b['segment_ids'], b['input_mask'],
                     jnp.float32(level), jnp.uint32(noise_seed), jnp.uint32(i))
    out.append(np.asarray(jax.device_get(logits))[:b['rows']])
  return np.concatenate(out).astype(np.float32)


def make_batches(input_ids: np.ndarray, segment_ids: np.ndarray, batch_size: int) -> list[dict]:
  """Fixed-size batches in row order, the last padded with rows of weight 0
  (engine.make_batch), so one shape is compiled; `rows`: how many are real."""
  arrays = {'input_ids': input_ids, 'segment_ids': segment_ids}
  batches = []
  for start in range(0, len(input_ids), batch_size):
    idx = np.arange(start, min(start + batch_size, len(input_ids)))
    batch = engine.make_batch(arrays, idx, batch_size)
    batches.append({k: batch[k] for k in ('input_ids', 'segment_ids', 'input_mask')}
                   | {'rows': len(idx)})
  return batches


def evaluate(predict, params, batches: Sequence[dict], score_fn: ScoreFn,
             levels: Sequence[float], noise_seeds: Sequence[int]) -> dict:
  """Scores at every (level, noise seed): {'levels', 'noise_seeds', 'scores': [[...]]}.

  `score_fn` maps logits [n, num_labels] to the task score. scores[i][j] is the score at
  levels[i] with noise_seeds[j]; 'mean' holds the per-level mean over noise seeds.
  """
  scores = []
  for level in levels:
    if level == 0:  # No noise: every noise seed gives the clean score; compute it once.
      clean = float(score_fn(predict_with_noise(predict, params, batches, 0.0, noise_seeds[0])))
      scores.append([clean] * len(noise_seeds))
      continue
    scores.append([float(score_fn(predict_with_noise(predict, params, batches, level, s)))
                   for s in noise_seeds])
  return {'levels': [float(l) for l in levels], 'noise_seeds': [int(s) for s in noise_seeds],
          'scores': scores, 'mean': [float(np.mean(row)) for row in scores]}
