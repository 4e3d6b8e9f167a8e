"""Linear probes on frozen encoders: ridge regression on mean-pooled final hidden states.

Cheap (forward passes and one small solve) and sensitive where full fine-tuning of a
barely pretrained encoder is not: the encoder is not trained, so the score measures what
pretraining put into its features. Classification tasks regress the one-hot labels and
predict the largest output; regression tasks (STS-B) regress the score. The ridge penalty
is chosen on a fixed fifth of the training examples (the same for every encoder), then the
probe is refit on all of them. Features are standardised with the training set's mean and
std, so one penalty grid suits every width.

As an evaluator (`linear_probe` in config.evaluators) it probes the encoder of the
parameters it is given on the run's own train and first dev split: after fine-tuning,
how linearly the fine-tuned features carry the task; on a pretrained encoder (the study's
probes, through common.EncoderRun), what pretraining put there.
"""

from __future__ import annotations

import functools

import numpy as np
import jax
import jax.numpy as jnp

from sharedbert.errors import UserError
from sharedbert.evaluators import common
from sharedbert.metrics import glue as glue_metrics
from sharedbert.models.bert import BertEncoder

LAMBDAS = (1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0)


@functools.lru_cache(maxsize=None)
def _encode_fn(model_cfg):

  @jax.jit
  def encode(params, ids, segments, mask):
    out = BertEncoder(model_cfg).apply({'params': params}, ids, segments, mask)
    h = out['sequence_output'].astype(jnp.float32)
    m = mask[..., None].astype(jnp.float32)
    return (h * m).sum(1) / jnp.maximum(m.sum(1), 1.0)
  return encode


def mean_pooled(model_cfg, params, input_ids, segment_ids, lengths,
                batch_size: int = 256) -> np.ndarray:
  """[N, D] mean over each row's first `lengths` tokens (its real ones) of the final hidden
  states. Rows go in order of length, each batch cropped to its longest row (rounded up to
  8 columns) and padded to `batch_size` rows, so that a few programs serve them all.

  Args:
    model_cfg: the encoder's ModelConfig.
    params: its params.
    input_ids, segment_ids: [N, T] int32.
    lengths: [N] real tokens a row.
    batch_size: rows a batch.
  Returns:
    [N, D] float32.
  """
  encode = _encode_fn(model_cfg)
  lengths = np.asarray(lengths)
  mask = (np.arange(input_ids.shape[1])[None, :] < lengths[:, None]).astype(np.int32)
  order = np.argsort(lengths, kind='stable')
  n = len(input_ids)
  out = []
  for i in range(0, n, batch_size):
    rows = order[i:i + batch_size]
    width = min(input_ids.shape[1], -(-max(int(lengths[rows].max()), 1) // 8) * 8)
    ids, seg, m = (a[rows, :width] for a in (input_ids, segment_ids, mask))
    pad = batch_size - len(ids)
    if pad:
      ids, seg, m = (np.concatenate([a, np.zeros((pad, a.shape[1]), a.dtype)])
                     for a in (ids, seg, m))
    out.append(np.asarray(encode(params, ids, seg, m))[:batch_size - pad])
  if not out:
    return np.zeros((0, 0), np.float32)
  pooled = np.empty((n, out[0].shape[1]), out[0].dtype)
  pooled[order] = np.concatenate(out)
  return pooled


def _targets(spec, labels: np.ndarray) -> np.ndarray:
  if spec.is_regression:
    return labels.astype(np.float64)[:, None]
  return np.eye(spec.num_labels)[labels.astype(int)]


def _solve(x: np.ndarray, y: np.ndarray, lam: float):
  """Ridge with an unpenalised intercept: (w, b) minimising |x w + b - y|^2 + lam |w|^2."""
  mx, my = x.mean(0), y.mean(0)
  xc, yc = x - mx, y - my
  w = np.linalg.solve(xc.T @ xc + lam * np.eye(x.shape[1]), xc.T @ yc)
  return w, my - mx @ w


def _predict(spec, x, w, b) -> np.ndarray:
  out = x @ w + b
  return out[:, 0] if spec.is_regression else np.argmax(out, axis=-1)


def _score(spec, predictions, labels) -> float:
  return glue_metrics.task_score(spec, glue_metrics.task_metrics(spec, predictions, labels))


def probe(spec, train_x, train_y, dev_x, dev_y, lambdas=LAMBDAS) -> dict:
  """Fits the probe on (train_x, train_y) and scores it on the dev set: {'score',
  'metrics', 'lambda', 'selection'}.

  Args:
    spec: the GLUE TaskSpec.
    train_x, dev_x: [n, D] features.
    train_y, dev_y: [n] labels.
    lambdas: the ridge strengths tried (chosen on a split of the training rows).
  Returns:
    The record.
  """
  train_x, dev_x = np.asarray(train_x, np.float64), np.asarray(dev_x, np.float64)
  mean, std = train_x.mean(0), train_x.std(0) + 1e-6
  train_x, dev_x = (train_x - mean) / std, (dev_x - mean) / std
  n = len(train_x)
  order = np.random.default_rng(0).permutation(n)
  held, fit = order[:max(n // 5, 1)], order[max(n // 5, 1):]
  selection = {}
  for lam in lambdas:
    w, b = _solve(train_x[fit], _targets(spec, train_y[fit]), lam)
    selection[f'{lam:g}'] = _score(spec, _predict(spec, train_x[held], w, b), train_y[held])
  # The largest penalty among the best scores: the simplest probe that does as well.
  best = max(lambdas, key=lambda lam: (np.nan_to_num(selection[f'{lam:g}'], nan=-np.inf), lam))
  w, b = _solve(train_x, _targets(spec, train_y), best)
  predictions = _predict(spec, dev_x, w, b)
  metrics = glue_metrics.task_metrics(spec, predictions, dev_y)
  return {'score': glue_metrics.task_score(spec, metrics), 'metrics': metrics,
          'lambda': best, 'selection': selection}


@common.register('linear_probe')
class LinearProbe:
  """`probe` on the mean-pooled features of the encoder in `params['bert']`, fitted on the
  run's train split and scored on its first dev split.

  Args:
    run: a TaskRun or common.EncoderRun (spec, features['train'] and the dev split, and
      pretrained.model_config).
    lambdas: the ridge penalties tried on the held-out fifth of the training rows.
  """

  def __init__(self, run, *, lambdas=LAMBDAS):
    self.spec = run.spec
    self.model_config = run.pretrained.model_config
    self.train = run.features['train']
    self.dev = run.features[self.spec.dev_splits[0]]
    if self.train.labels is None or self.dev.labels is None:
      raise UserError('linear_probe needs labelled train and dev splits')
    self.lambdas = tuple(float(x) for x in lambdas)

  def run(self, params) -> dict:
    """{'score', 'metrics', 'lambda', 'selection', 'num_train', 'num_dev'}."""
    xs = [mean_pooled(self.model_config, params['bert'], f.input_ids, f.segment_ids, f.lengths)
          for f in (self.train, self.dev)]
    result = probe(self.spec, xs[0], self.train.labels, xs[1], self.dev.labels, self.lambdas)
    result.update(num_train=len(self.train), num_dev=len(self.dev))
    return result
