"""GLUE metrics and bootstrap statistics: the classification metrics against their
definitions (a confusion matrix) and cases worked by hand, the correlations against scipy.

scikit-learn is not a test dependency: with it installed, every `import tensorflow` also
loads it (through Keras's scikit-learn wrappers), about 1.5 s more in each of the suite's
commands. The hand-worked values below agree with sklearn.metrics (checked once, 1.9.1).
"""

import math

import numpy as np
import pytest
import scipy.stats

from sharedbert.metrics import glue as gm
from sharedbert.metrics import stats

# Degenerate inputs must not warn (a warning in a training log reads as a bug).
pytestmark = pytest.mark.filterwarnings('error')

SEEDS = [0, 1, 2, 3, 4]


def _confusion(preds, labels) -> tuple[np.ndarray, int]:
  """Counts[true class, predicted class] over the classes either array holds, and n."""
  classes, codes = np.unique(np.concatenate([labels, preds]), return_inverse=True)
  true, pred = codes[:len(labels)], codes[len(labels):]
  counts = np.zeros((len(classes), len(classes)), np.int64)
  np.add.at(counts, (true, pred), 1)
  return counts, len(labels)


def ref_accuracy(preds, labels) -> float:
  counts, n = _confusion(np.asarray(preds), np.asarray(labels))
  return np.trace(counts) / n


def ref_mcc(preds, labels) -> float:
  """Gorodkin's K-class correlation from the confusion matrix (MCC when K = 2); 0 when a
  marginal is constant (the limit sklearn also returns)."""
  counts, n = _confusion(np.asarray(preds), np.asarray(labels))
  t, p, c = counts.sum(1), counts.sum(0), np.trace(counts)
  denominator = math.sqrt(float(n * n - p @ p) * float(n * n - t @ t))
  return 0.0 if denominator == 0 else float(c * n - p @ t) / denominator


def ref_f1(preds, labels) -> float:
  """F1 of class 1: 2 tp / (2 tp + fp + fn); 0 when there is no positive at all."""
  preds, labels = np.asarray(preds), np.asarray(labels)
  tp = np.sum((preds == 1) & (labels == 1))
  wrong = np.sum(preds != labels)
  return 0.0 if tp + wrong == 0 else 2 * tp / (2 * tp + wrong)


# (preds, labels) -> (accuracy, MCC, F1 or None): worked by hand from the counts.
HAND_WORKED = [
    # tp 3, fp 1, fn 1, tn 2: MCC (3*2 - 1*1) / sqrt(4*4*3*3) = 5/12, F1 6/8.
    ([1, 1, 0, 1, 0, 0, 1], [1, 0, 0, 1, 0, 1, 1], (5 / 7, 5 / 12, 3 / 4)),
    # 3 classes, 7 of 10 right; true counts (4, 4, 2), predicted (3, 4, 3):
    # (7*10 - 34) / sqrt((100 - 34)(100 - 36)) = 36 / sqrt(66 * 64).
    ([0, 1, 2, 2, 1, 0, 2, 1, 1, 0], [0, 1, 2, 1, 1, 0, 0, 2, 1, 0],
     (0.7, 36 / math.sqrt(66 * 64), None)),
    # true (2, 2, 1), predicted (1, 1, 3), 3 of 5 right: (15 - 7) / sqrt(14 * 16).
    ([2, 2, 2, 0, 1], [0, 1, 2, 0, 1], (0.6, 8 / math.sqrt(14 * 16), None)),
    ([1, 0, 1, 0], [0, 1, 0, 1], (0.0, -1.0, 0.0)),
]


@pytest.mark.parametrize('preds,labels,want', HAND_WORKED)
def test_classification_metrics_on_cases_worked_by_hand(preds, labels, want):
  # The references too: the random cases below compare the library against them.
  accuracy, mcc, f1 = want
  for fn in (gm.accuracy, ref_accuracy):
    assert fn(preds, labels) == pytest.approx(accuracy, abs=1e-12)
  for fn in (gm.matthews_corrcoef, ref_mcc):
    assert fn(preds, labels) == pytest.approx(mcc, abs=1e-12)
  for fn in (gm.f1_binary, ref_f1):
    assert f1 is None or fn(preds, labels) == pytest.approx(f1, abs=1e-12)


def _noisy_labels(seed, n, k, p_correct):
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, k, n)
  preds = np.where(rng.random(n) < p_correct, labels, rng.integers(0, k, n))
  return preds, labels


@pytest.mark.parametrize('seed', SEEDS)
@pytest.mark.parametrize('k', [2, 3])
def test_classification_metrics_match_their_definitions(seed, k):
  n = 50 + 37 * seed
  preds, labels = _noisy_labels(seed, n, k, 0.6)
  assert gm.accuracy(preds, labels) == pytest.approx(ref_accuracy(preds, labels))
  assert gm.matthews_corrcoef(preds, labels) == pytest.approx(ref_mcc(preds, labels), abs=1e-12)
  if k == 2:
    assert gm.f1_binary(preds, labels) == pytest.approx(ref_f1(preds, labels), abs=1e-12)


@pytest.mark.parametrize('preds,labels', [
    ([1, 1, 1, 1], [0, 1, 0, 1]),  # one class never predicted
    ([0, 0, 0, 0], [0, 1, 0, 1]),
    ([0, 1, 0, 1], [1, 1, 1, 1]),  # one class never in the labels
    ([1, 1, 1], [1, 1, 1]),  # everything constant
    ([0, 0, 0], [0, 0, 0]),  # no positives at all: F1 undefined
    ([0, 1, 0, 1], [0, 1, 0, 1]),
    ([1, 0, 1, 0], [0, 1, 0, 1]),
    ([0], [1]),
])
def test_degenerate_classification_matches_the_definitions_without_warnings(preds, labels):
  mcc = gm.matthews_corrcoef(preds, labels)
  assert mcc == pytest.approx(ref_mcc(preds, labels), abs=1e-12)
  assert gm.f1_binary(preds, labels) == pytest.approx(ref_f1(preds, labels))
  assert isinstance(mcc, float) and not math.isnan(mcc)


def test_mcc_accepts_string_and_negative_labels():
  preds, labels = _noisy_labels(7, 200, 3, 0.7)
  names = np.array(['x', 'y', 'z'])
  ref = ref_mcc(preds, labels)
  assert gm.matthews_corrcoef(names[preds], names[labels]) == pytest.approx(ref)
  assert gm.matthews_corrcoef(preds - 5, labels - 5) == pytest.approx(ref)


@pytest.mark.parametrize('seed', SEEDS)
def test_correlations_match_scipy(seed):
  rng = np.random.default_rng(seed)
  labels = rng.uniform(0, 5, 100 + 20 * seed)
  preds = labels + rng.normal(0, 1 + seed, labels.shape)
  if seed % 2:  # heavy ties exercise average ranking
    preds = np.round(preds)
  assert gm.pearson(preds, labels) == pytest.approx(
      scipy.stats.pearsonr(preds, labels)[0], abs=1e-12)
  assert gm.spearman(preds, labels) == pytest.approx(
      scipy.stats.spearmanr(preds, labels)[0], abs=1e-12)


@pytest.mark.parametrize('x,y', [
    ([2.0, 2.0, 2.0], [1.0, 2.0, 3.0]),
    ([1.0, 2.0, 3.0], [0.1, 0.1, 0.1]),  # mean of 0.1s is not exactly 0.1
    ([3.0], [4.0]),
])
def test_correlation_of_constant_is_zero(x, y):
  assert gm.pearson(x, y) == 0.0
  assert gm.spearman(x, y) == 0.0


def test_metrics_are_batched_over_leading_axes():
  rng = np.random.default_rng(0)
  preds, labels = _noisy_labels(0, 6 * 40, 2, 0.7)
  preds, labels = preds.reshape(6, 40), labels.reshape(6, 40)
  preds[0] = 1  # a degenerate row among normal ones
  x, y = rng.normal(size=(6, 40)), rng.normal(size=(6, 40))
  x[1] = 3.0
  for fn, a, b in [(gm.accuracy, preds, labels), (gm.f1_binary, preds, labels),
                   (gm.matthews_corrcoef, preds, labels), (gm.pearson, x, y),
                   (gm.spearman, x, y)]:
    got = fn(a, b)
    assert got.shape == (6,)
    np.testing.assert_allclose(got, [fn(a[i], b[i]) for i in range(6)], atol=1e-12)


def test_mismatched_shapes_raise():
  with pytest.raises(ValueError):
    gm.accuracy([0, 1], [0, 1, 1])
  with pytest.raises(ValueError):
    gm.accuracy([], [])


def test_task_metrics_and_scores():
  preds, labels = _noisy_labels(3, 300, 2, 0.8)
  m = gm.task_metrics('MRPC', preds, labels)
  assert set(m) == {'f1', 'accuracy'}
  assert gm.task_score('mrpc', m) == pytest.approx((m['f1'] + m['accuracy']) / 2)
  assert set(gm.task_metrics('cola', preds, labels)) == {'mcc'}
  for task in ['sst2', 'SST-2', 'qnli', 'rte', 'wnli', 'mnli']:
    assert set(gm.task_metrics(task, preds, labels)) == {'accuracy'}
  assert set(gm.task_metrics('qqp', preds, labels)) == {'f1', 'accuracy'}
  x = np.linspace(0, 5, 50)
  m = gm.task_metrics('STS-B', x[:, None], x ** 2)  # (n, 1) regression output
  assert m['spearman'] == pytest.approx(1.0)
  assert gm.task_score('stsb', m) == pytest.approx((m['pearson'] + 1.0) / 2)
  # Logits are argmaxed.
  logits = np.eye(3)[preds] + 0.1
  assert gm.task_metrics('mnli', logits, labels) == gm.task_metrics('mnli', preds, labels)
  with pytest.raises(KeyError):
    gm.task_score('mrpc', {'f1': 0.5})
  score = gm.task_score_fn('mrpc')
  assert score(preds, labels) == pytest.approx(gm.task_score('mrpc', gm.task_metrics(
      'mrpc', preds, labels)))


def test_glue_average_coverage():
  full = {'CoLA': 0.5, 'SST-2': 0.9, 'MRPC': 0.8, 'STS-B': 0.85, 'QQP': 0.7,
          'MNLI-m': 0.8, 'MNLI-mm': 0.81, 'QNLI': 0.88, 'RTE': 0.6, 'WNLI': 0.0}
  mean, covered, missing = gm.glue_average(full)
  assert len(covered) == 9 and not missing
  assert mean == pytest.approx((sum(full.values()) - full['WNLI']) / 9)  # WNLI left out
  mean, covered, missing = gm.glue_average({'sst2': 0.9, 'mnli_m': 0.7, 'wnli': 0.1})
  assert mean == pytest.approx(0.8)
  assert covered == ['sst2', 'mnli_m']
  assert set(missing) == {'cola', 'mrpc', 'stsb', 'qqp', 'mnli_mm', 'qnli', 'rte'}
  mean, covered, missing = gm.glue_average({})
  assert math.isnan(mean) and not covered and len(missing) == 9
  with pytest.raises(ValueError, match='mnli_m'):
    gm.glue_average({'mnli': 0.8})
  with pytest.raises(ValueError):
    gm.glue_average({'squad': 0.8})
  assert gm.score_key('mnli', 'validation_mismatched') == 'mnli_mm'
  assert gm.score_key('mnli', 'test_matched') == 'mnli_m'
  assert gm.score_key('SST-2', 'validation') == 'sst2'


def test_mean_std():
  assert stats.mean_std([3.0]) == (3.0, 0.0)
  mean, std = stats.mean_std([1.0, 2.0, 4.0])
  assert mean == pytest.approx(7 / 3)
  assert std == pytest.approx(np.std([1.0, 2.0, 4.0], ddof=1))
  with pytest.raises(ValueError):
    stats.mean_std([])


BATCHED = [gm.accuracy, gm.f1_binary, gm.matthews_corrcoef, gm.task_score_fn('mrpc')]


@pytest.mark.parametrize('fn', BATCHED, ids=lambda f: f.__name__)
def test_bootstrap_contains_estimate_narrows_and_is_deterministic(fn):
  small = _noisy_labels(0, 200, 2, 0.75)
  large = _noisy_labels(0, 5000, 2, 0.75)
  lo_s, hi_s = stats.bootstrap_ci(fn, *small, seed=1)
  lo_l, hi_l = stats.bootstrap_ci(fn, *large, seed=1)
  assert lo_s <= fn(*small) <= hi_s
  assert lo_l <= fn(*large) <= hi_l
  assert (hi_l - lo_l) < 0.5 * (hi_s - lo_s)  # ~sqrt(200/5000) = 0.2 expected
  assert stats.bootstrap_ci(fn, *small, seed=1) == (lo_s, hi_s)
  assert stats.bootstrap_ci(fn, *small, seed=2) != (lo_s, hi_s)


def test_bootstrap_correlations():
  rng = np.random.default_rng(0)
  y = rng.uniform(0, 5, 1500)
  x = y + rng.normal(0, 1, y.shape)
  for fn in [gm.pearson, gm.spearman]:
    lo, hi = stats.bootstrap_ci(fn, x, y)
    assert lo <= fn(x, y) <= hi and hi - lo < 0.1


def test_unbatched_metric_uses_the_same_resamples():
  preds, labels = _noisy_labels(5, 300, 2, 0.7)
  ref = ref_mcc  # Unbatched: scored one resample at a time.
  got = stats.bootstrap_ci(gm.matthews_corrcoef, preds, labels, num_resamples=200)
  want = stats.bootstrap_ci(ref, preds, labels, num_resamples=200)
  np.testing.assert_allclose(got, want, atol=1e-12)


def test_a_batched_metric_scores_the_resamples_in_a_few_calls():
  # What makes the bootstrap fast: a metric marked `batched` scores whole chunks of
  # resamples at once (sharedbert/metrics/glue.py's are), not one call per resample.
  preds, labels = _noisy_labels(0, 4000, 2, 0.8)
  calls = []

  def counted(p, l):
    calls.append(p.shape)
    return gm.accuracy(p, l)
  counted.batched = True
  got = stats.bootstrap_ci(counted, preds, labels, num_resamples=1000)
  assert got == stats.bootstrap_ci(gm.accuracy, preds, labels, num_resamples=1000)
  # Chunks of about 2**18 elements: 16 calls of up to 65 resamples of 4,000, not 1,000.
  assert len(calls) <= 20 and sum(shape[0] for shape in calls) == 1000
  assert gm.accuracy.batched and gm.matthews_corrcoef.batched and gm.f1_binary.batched


def test_paired_bootstrap_diff():
  preds, labels = _noisy_labels(0, 2000, 2, 0.7)
  better = np.where(np.random.default_rng(1).random(2000) < 0.5, labels, preds)
  diff, lo, hi = stats.paired_bootstrap_diff(gm.accuracy, better, preds, labels)
  assert diff == pytest.approx(gm.accuracy(better, labels) - gm.accuracy(preds, labels))
  assert 0 < lo <= diff <= hi
  assert stats.paired_bootstrap_diff(gm.accuracy, preds, preds, labels) == (0.0, 0.0, 0.0)
  # Pairing makes the difference interval tighter than the single-system one.
  lo1, hi1 = stats.bootstrap_ci(gm.accuracy, preds, labels)
  assert hi - lo < hi1 - lo1


def test_bootstrap_argument_checks():
  with pytest.raises(ValueError):
    stats.bootstrap_ci(gm.accuracy, [0, 1], [0, 1, 1])
  with pytest.raises(ValueError):
    stats.bootstrap_ci(gm.accuracy, [0, 1], [0, 1], confidence=1.0)
  with pytest.raises(ValueError):
    stats.bootstrap_ci(gm.accuracy, [0, 1], [0, 1], num_resamples=0)
