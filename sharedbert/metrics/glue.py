"""GLUE metrics, task scores and the GLUE average, in numpy.

Every value here is a FRACTION (accuracy 0.85, not 85); multiply by 100 only when
printing a report, as GLUE tables do.

The metric functions take arrays of shape (..., n) and reduce the last axis, so
the bootstrap in `stats` can score 1000 resamples in one call; 1-D inputs give
a Python float. Degenerate inputs never warn or give NaN: MCC is 0.0 when a
confusion-matrix margin is empty (e.g. one class never predicted, as scikit-learn
does), F1 is 0.0 with no true or predicted positives, and Pearson/Spearman are
0.0 when either side is constant (the correlation is undefined there; 0.0 = "no
evidence of correlation" keeps averages finite).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import scipy.stats

from sharedbert.data.glue import get_task
from sharedbert.errors import UserError
from sharedbert.metrics.stats import batched


def _pair(predictions, labels):
  p, l = np.asarray(predictions), np.asarray(labels)
  if p.shape != l.shape or p.ndim == 0 or p.shape[-1] == 0:
    raise ValueError(f'predictions {p.shape} and labels {l.shape} must have the '
                     f'same non-empty shape')
  return p, l


def _out(x):
  """Python float for a scalar result, float64 array otherwise."""
  x = np.asarray(x, dtype=np.float64)
  return float(x) if x.ndim == 0 else x


@batched
def accuracy(predictions, labels):
  """Fraction of predictions equal to the labels.

  Args:
    predictions: [n] class ids (or [..., n] batched resamples).
    labels: [n] (or [..., n]).
  Returns:
    A fraction (an array for batched inputs).
  """
  p, l = _pair(predictions, labels)
  return _out(np.mean(p == l, axis=-1))


@batched
def f1_binary(predictions, labels, positive=1):
  """F1 of the `positive` class (MRPC/QQP: 1 = equivalent/duplicate).

  Args:
    predictions: [n] class ids (or [..., n] batched resamples).
    labels: [n] (or [..., n]).
    positive: the class F1 is of.
  Returns:
    F1, 0.0 when undefined.
  """
  p, l = _pair(predictions, labels)
  pp, lp = p == positive, l == positive
  tp = np.sum(pp & lp, axis=-1)
  denom = np.sum(pp, axis=-1) + np.sum(lp, axis=-1)  # 2tp + fp + fn
  return _out(np.where(denom > 0, 2.0 * tp / np.maximum(denom, 1), 0.0))


def _class_ids(p, l):
  """Maps predictions and labels to dense ids 0..K-1; returns (p, l, K)."""
  if (np.issubdtype(p.dtype, np.integer) and np.issubdtype(l.dtype, np.integer)
      and min(p.min(), l.min()) >= 0 and max(p.max(), l.max()) < 1024):
    return p, l, int(max(p.max(), l.max())) + 1
  classes, inv = np.unique(np.concatenate([p.ravel(), l.ravel()]),
                           return_inverse=True)
  return inv[:p.size].reshape(p.shape), inv[p.size:].reshape(l.shape), len(classes)


@batched
def matthews_corrcoef(predictions, labels):
  """Matthews correlation (multiclass form, = scikit-learn's); 0.0 if undefined.

  Args:
    predictions: [n] class ids (or [..., n] batched resamples).
    labels: [n] (or [..., n]).
  Returns:
    MCC in [-1, 1].
  """
  p, l = _pair(predictions, labels)
  p, l, k = _class_ids(p, l)
  batch, n = p.shape[:-1], p.shape[-1]
  rows = int(np.prod(batch))
  p, l = p.reshape(rows, n), l.reshape(rows, n)
  # MCC needs only the confusion-matrix margins and trace, not the whole matrix:
  # per-row class counts come from one bincount over (row, class) cells.
  offset = np.arange(rows)[:, None] * k
  t = np.bincount((offset + l).ravel(), minlength=rows * k).reshape(rows, k)
  q = np.bincount((offset + p).ravel(), minlength=rows * k).reshape(rows, k)
  t, q = t.astype(np.float64), q.astype(np.float64)  # true / predicted counts
  c = np.count_nonzero(p == l, axis=1).astype(np.float64)
  s = float(n)
  cov_ytyp = c * s - np.sum(t * q, axis=1)
  cov_ypyp = s * s - np.sum(q * q, axis=1)
  cov_ytyt = s * s - np.sum(t * t, axis=1)
  denom = cov_ypyp * cov_ytyt
  mcc = np.where(denom > 0, cov_ytyp / np.sqrt(np.maximum(denom, 1e-300)), 0.0)
  return _out(mcc.reshape(batch))


@batched
def pearson(predictions, labels):
  """Pearson correlation; 0.0 when either side is constant.

  Args:
    predictions, labels: [n] floats (or [..., n]).
  Returns:
    The correlation.
  """
  x, y = _pair(predictions, labels)
  x, y = x.astype(np.float64), y.astype(np.float64)
  xc = x - x.mean(axis=-1, keepdims=True)
  yc = y - y.mean(axis=-1, keepdims=True)
  num = np.sum(xc * yc, axis=-1)
  den = np.sqrt(np.sum(xc * xc, axis=-1) * np.sum(yc * yc, axis=-1))
  # Test constancy exactly: rounding in the mean can leave a tiny nonzero spread.
  constant = (np.ptp(x, axis=-1) == 0) | (np.ptp(y, axis=-1) == 0) | (den == 0)
  r = np.where(constant, 0.0, num / np.where(constant, 1.0, den))
  return _out(np.clip(r, -1.0, 1.0))


@batched
def spearman(predictions, labels):
  """Spearman rank correlation (average ranks for ties); 0.0 if either is constant.

  Args:
    predictions, labels: [n] floats (or [..., n]).
  Returns:
    The correlation.
  """
  x, y = _pair(predictions, labels)
  return pearson(scipy.stats.rankdata(x, axis=-1), scipy.stats.rankdata(y, axis=-1))


_METRICS = {'mcc': matthews_corrcoef, 'accuracy': accuracy, 'f1': f1_binary,
            'pearson': pearson, 'spearman': spearman}


def metric_fn(name: str):
  """The batched metric function called `name` ('mcc', 'accuracy', 'f1', ...).

  Args:
    name: a metric's name.
  Returns:
    (predictions, labels) -> value, batched over leading axes.
  """
  if name not in _METRICS:
    raise KeyError(f'unknown GLUE metric {name!r}; known: {", ".join(_METRICS)}')
  return _METRICS[name]


def _as_predictions(spec, predictions):
  """Accepts class ids, or logits (n, num_labels) which are argmaxed."""
  p = np.asarray(predictions)
  if spec.is_regression and p.ndim == 2 and p.shape[1] == 1:
    p = p[:, 0]
  elif not spec.is_regression and p.ndim == 2:
    p = np.argmax(p, axis=-1)
  if p.ndim != 1:
    raise ValueError(f'{spec.name}: predictions must be 1-D (or logits '
                     f'[n, num_labels]), got shape {p.shape}')
  return p


def task_metrics(task, predictions, labels) -> dict[str, float]:
  """The GLUE metrics of `task` as fractions, e.g. MRPC {'f1', 'accuracy'}.

  Args:
    task: a task name or TaskSpec.
    predictions, labels: [n].
  Returns:
    {metric: value}.
  """
  spec = get_task(task)
  p = _as_predictions(spec, predictions)
  l = np.asarray(labels)
  return {name: float(_METRICS[name](p, l)) for name in spec.metric_names}


def task_score(task, metrics: Mapping[str, float]) -> float:
  """The one number GLUE ranks by: the mean of the task's metrics.

  MRPC/QQP (F1 + accuracy) / 2, STS-B (Pearson + Spearman) / 2, CoLA MCC, else
  accuracy. Same scale as `metrics` (fractions).

  Args:
    task: a task name or TaskSpec.
    metrics: task_metrics' dict.
  Returns:
    The score.
  """
  names = get_task(task).metric_names
  missing = [n for n in names if n not in metrics]
  if missing:
    raise KeyError(f'task_score({task!r}) needs metrics {missing}, got {sorted(metrics)}')
  return float(sum(metrics[n] for n in names) / len(names))


def task_score_fn(task):
  """A batched (predictions, labels) -> score function, for bootstrap intervals.

  Args:
    task: a task name or TaskSpec.
  Returns:
    The function.
  """
  spec = get_task(task)
  fns = [_METRICS[n] for n in spec.metric_names]

  @batched
  def score(predictions, labels):
    return _out(sum(np.asarray(f(predictions, labels)) for f in fns) / len(fns))

  score.__name__ = f'{spec.name}_score'
  return score


# The nine numbers the GLUE leaderboard averages (WNLI is left out by
# convention: its dev set is adversarial and most systems predict the majority).
GLUE_AVERAGE_KEYS = ('cola', 'sst2', 'mrpc', 'stsb', 'qqp', 'mnli_m', 'mnli_mm',
                     'qnli', 'rte')
_IGNORED_KEYS = ('wnli', 'ax')


def score_key(task, split: str) -> str:
  """Key of a (task, split) score in `glue_average`: MNLI gets mnli_m / mnli_mm.

  Args:
    task: a task name or TaskSpec.
    split: its dev split.
  Returns:
    The key ('cola', 'mnli_m', ...).
  """
  spec = get_task(task)
  if spec.name == 'mnli':
    if split.endswith('_mismatched'):
      return 'mnli_mm'
    if split.endswith('_matched'):
      return 'mnli_m'
    raise ValueError(f'MNLI split {split!r} is neither matched nor mismatched')
  return spec.name


def _normalize_key(key: str) -> str:
  k = str(key).lower().replace('-', '_')
  k = {'mnli_matched': 'mnli_m', 'mnli_mismatched': 'mnli_mm'}.get(k, k)
  if k in GLUE_AVERAGE_KEYS or k in _IGNORED_KEYS:
    return k
  if k.replace('_', '') in ('mnli', 'mnlim', 'mnlimm'):
    raise ValueError(f'ambiguous GLUE score key {key!r}: use mnli_m and mnli_mm')
  try:
    return get_task(k).name
  except UserError:
    raise ValueError(f'unknown GLUE score key {key!r}; expected '
                     f'{", ".join(GLUE_AVERAGE_KEYS)} (wnli/ax are ignored)') from None


def glue_average(scores: Mapping[str, float]) -> tuple[float, list[str], list[str]]:
  """Mean of the 9 GLUE task scores (WNLI excluded): (mean, covered, missing).

  Keys are task names ('SST-2', 'sst2', ...) with MNLI as 'mnli_m'/'mnli_mm'
  (see `score_key`). When tasks are missing the mean is over the covered ones
  only, so report `covered`/`missing` alongside it; NaN when nothing is covered.

  Args:
    scores: {key: score}.
  Returns:
    (mean, covered keys, missing keys).
  """
  norm = {}
  for key, value in scores.items():
    k = _normalize_key(key)
    if k in GLUE_AVERAGE_KEYS:
      norm[k] = float(value)
  covered = [k for k in GLUE_AVERAGE_KEYS if k in norm]
  missing = [k for k in GLUE_AVERAGE_KEYS if k not in norm]
  mean = sum(norm[k] for k in covered) / len(covered) if covered else math.nan
  return mean, covered, missing
