"""Noise robustness: score a fine-tuned classifier with Gaussian noise on its input embeddings.

The noise level is defined relative to the embeddings themselves. For a sequence with
embedding output x (the output of the embedding LayerNorm, the first encoder layer's
input; shape [T, D]), sigma is the standard deviation of x over all D features of the
sequence's non-pad tokens, and the model runs on

    x + level * sigma * z,   z ~ N(0, I) drawn independently per token and feature,

on non-pad tokens only (`add_embedding_noise`). The noise enters through the evaluator: a
flax method interceptor adds it to the output of the model's `Embeddings`, so the model
itself has no noise argument. level = 0.1 is noise
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

import time
from typing import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from sharedbert.evaluators import common
from sharedbert.metrics import glue as glue_metrics
from sharedbert.models import bert
from sharedbert.tasks import engine


ScoreFn = Callable[[np.ndarray], float]


def noise_for_batch(noise_seed: int, batch_index: int, shape) -> jax.Array:
  """The standard-normal z of one batch: a pure function of (noise seed, batch index).

  Args:
    noise_seed: the noise's seed.
    batch_index: the batch.
    shape: [B, T, D].
  Returns:
    float32 of `shape`.
  """
  key = jax.random.fold_in(jax.random.key(noise_seed), batch_index)
  return jax.random.normal(key, shape, jnp.float32)


def add_embedding_noise(x, noise, input_mask):
  """x + noise * sigma, where sigma is the std of x over the sequence's real tokens.

  x: the embedding output [B,T,D] (after LayerNorm); noise: [B,T,D], typically
  level * N(0, 1), so that `level` is the noise std as a fraction of the embeddings' std.
  sigma is per sequence (all D features of its non-pad tokens), so it does not depend on
  batching; padding gets no noise. A zero `noise` returns x unchanged, bit for bit.

  Args:
    x: as above.
    noise: as above.
    input_mask: [B, T].
  Returns:
    [B, T, D], x's dtype.
  """
  m = input_mask.astype(jnp.float32)[..., None]
  xf = x.astype(jnp.float32)
  count = jnp.maximum(m.sum(axis=(1, 2)) * x.shape[-1], 1.0)
  mean = (xf * m).sum(axis=(1, 2)) / count
  var = (jnp.square(xf - mean[:, None, None]) * m).sum(axis=(1, 2)) / count
  sigma = jnp.sqrt(var)[:, None, None]
  return (xf + noise.astype(jnp.float32) * sigma * m).astype(x.dtype)


def make_noisy_predict(model):
  """A jitted (params, batch, level, noise_seed, batch_index) -> logits of `model`.

  `model` is a BertForSequenceClassification (or any module that runs a
  sharedbert.models.bert.Embeddings on input_ids, segment_ids, input_mask).

  Args:
    model: as above.
  Returns:
    The jitted function.
  """
  @jax.jit
  def predict(params, input_ids, segment_ids, input_mask, level, noise_seed, batch_index):
    z = noise_for_batch(noise_seed, batch_index, input_ids.shape + (model.config.hidden_size,))

    def noisy_embeddings(next_fun, args, kwargs, context):
      out = next_fun(*args, **kwargs)
      if isinstance(context.module, bert.Embeddings) and context.method_name == '__call__':
        return add_embedding_noise(out, level * z, input_mask)
      return out

    with nn.intercept_methods(noisy_embeddings):
      return model.apply({'params': params}, input_ids, segment_ids, input_mask,
                         deterministic=True)

  return predict


def predict_with_noise(predict, params, batches: Sequence[dict], level: float,
                       noise_seed: int) -> np.ndarray:
  """Logits of every row of `batches` (dicts with input_ids, segment_ids, input_mask, and
  `rows`: how many leading rows are real) at one noise level and seed.

  Args:
    predict: make_noisy_predict's function.
    params: the classifier's params.
    batches: as above.
    level: the noise std, as a fraction of the embeddings'.
    noise_seed: the noise's seed.
  Returns:
    [rows, num_labels] float32.
  """
  out = []
  for i, b in enumerate(batches):
    logits = predict(params, b['input_ids'], b['segment_ids'], b['input_mask'],
                     jnp.float32(level), jnp.uint32(noise_seed), jnp.uint32(i))
    out.append(np.asarray(jax.device_get(logits))[:b['rows']])
  return np.concatenate(out).astype(np.float32)


def make_batches(input_ids: np.ndarray, segment_ids: np.ndarray, batch_size: int) -> list[dict]:
  """Fixed-size batches in row order, the last padded with rows of weight 0
  (engine.make_batch), so one shape is compiled; `rows`: how many are real.

  Args:
    input_ids, segment_ids: [N, T].
    batch_size: rows a batch.
  Returns:
    The batches.
  """
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

  Args:
    predict: make_noisy_predict's function.
    params: the classifier's params.
    batches: make_batches'.
    score_fn: as above.
    levels: the noise levels.
    noise_seeds: the noise seeds.
  Returns:
    The record.
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


@common.register('robustness')
class Robustness:
  """The first dev split's score at every noise level and noise seed (`evaluate`), for a
  task run; `tasks` (names), when given, limits it to those tasks (None for the others)."""

  def __init__(self, run, *, levels: Sequence[float] = (0.0, 0.1, 0.2, 0.3, 0.4),
               noise_seeds: int = 3, eval_batch_size: int = 128, tasks: Sequence[str] = ()):
    spec = run.spec
    self.applies = not tasks or spec.name in tuple(tasks)
    if not self.applies:
      return
    dev = run.features[spec.dev_splits[0]]

    def task_score(logits, labels=dev.labels):
      preds = logits[:, 0] if spec.is_regression else np.argmax(logits, axis=-1)
      return glue_metrics.task_score(spec, glue_metrics.task_metrics(spec, preds, labels))

    self.task_score = task_score
    self.predict = make_noisy_predict(run.model)
    self.batches = make_batches(dev.input_ids, dev.segment_ids, int(eval_batch_size))
    self.levels = list(levels)
    self.noise_seeds = list(range(int(noise_seeds)))

  def run(self, params) -> dict | None:
    """`evaluate` at the seed's `params`, with its wall time; None for another task."""
    if not self.applies:
      return None
    t0 = time.time()
    out = evaluate(self.predict, params, self.batches, self.task_score, self.levels,
                   self.noise_seeds)
    out['wall_s'] = round(time.time() - t0, 2)
    return out
