"""The pretraining verdict's statistics against hand-computed cases: paired t tests, TOST
within +-delta, Holm's correction (sharedbert.metrics.stats)."""

import numpy as np
import pytest

from sharedbert.metrics import stats


def test_holm_adjusts_in_the_order_given():
  # Sorted: 0.01 * 3 = 0.03; 0.03 * 2 = 0.06; 0.04 * 1 = 0.04, raised to 0.06 (monotone).
  assert stats.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
  assert stats.holm([0.5]) == [0.5]
  assert stats.holm([0.4, 0.6]) == pytest.approx([0.8, 0.8])  # Capped by monotonicity.
  assert stats.holm([0.7, 0.9]) == pytest.approx([1.0, 1.0])  # Capped at 1.


def test_paired_tests_by_hand():
  # diffs 0.01, 0.02, 0.00: mean 0.01, sd 0.01, se 0.01/sqrt(3) = 0.0057735, df 2.
  t = stats.paired_tests([0.01, 0.02, 0.00], delta=0.05)
  assert t['mean'] == pytest.approx(0.01) and t['se'] == pytest.approx(0.0057735, rel=1e-4)
  # 'no difference': t = 1.7321, two-sided p with 2 df = 1 - 1.7321 / sqrt(1.7321^2 + 2)
  # (the t(2) distribution's closed form) = 0.2254.
  assert t['p_diff'] == pytest.approx(0.2254, abs=1e-4)
  # TOST: the upper test t = (0.01 - 0.05) / se = -6.928, p = (1 - 6.928/sqrt(6.928^2 + 2))/2
  # = 0.01010; the lower test t = 10.392, p = 0.00458; the larger is the TOST p.
  assert t['p_tost'] == pytest.approx(0.01010, abs=1e-4)


def test_a_small_consistent_difference_is_equivalent():
  v = stats.family_verdicts({'shared': [0.01, 0.02, 0.00]}, delta=0.05)['shared']
  assert v['verdict'] == 'equivalent' and v['seeds'] == 3
  # The 95% t interval: 0.01 +- 4.3027 * 0.0057735 = [-0.01484, 0.03484].
  assert (v['ci_low'], v['ci_high']) == pytest.approx((-0.01484, 0.03484), abs=1e-4)


def test_a_noisy_difference_is_undecided():
  # mean 0.01667, sd 0.0907: the 90% interval (+-0.153) leaves +-0.05, the 95% one
  # (+-0.225) holds 0.
  v = stats.family_verdicts({'symmetric': [0.1, -0.08, 0.03]}, delta=0.05)['symmetric']
  assert v['verdict'] == 'undecided'
  assert v['ci_low'] < 0 < v['ci_high']


def test_clear_differences_are_better_or_worse():
  v = stats.family_verdicts({'worse': [0.5, 0.55, 0.6], 'better': [-0.3, -0.32, -0.28]},
                            delta=0.05)
  assert v['worse']['verdict'] == 'worse' and v['better']['verdict'] == 'better'
  assert v['worse']['ci_low'] > 0 and v['better']['ci_high'] < 0


def test_holm_can_turn_a_lone_decision_into_undecided():
  """p_diff 0.0262 alone is 'worse' at 0.05; in a family of three comparisons the smallest
  p-value is multiplied by 3 (0.0786), so it is no longer decided."""
  lone = [0.06, 0.12, 0.02, 0.08, 0.03]
  alone = stats.family_verdicts({'a': lone}, delta=0.01)['a']
  assert alone['verdict'] == 'worse' and alone['p_diff'] == pytest.approx(0.0262, abs=1e-4)
  family = stats.family_verdicts({'a': lone, 'b': [0.1, -0.1, 0.05, -0.05, 0.0],
                                  'c': [0.2, -0.2, 0.1, -0.1, 0.0]}, delta=0.01)
  assert family['a']['p_diff_holm'] == pytest.approx(3 * alone['p_diff'])
  assert family['a']['verdict'] == 'undecided'


def test_fewer_than_two_seeds_is_an_error():
  with pytest.raises(ValueError, match='2 seeds'):
    stats.paired_tests([0.1], delta=0.05)


def test_hierarchical_bootstrap_resamples_pretraining_then_finetuning_seeds():
  """Models whose score does not depend on the examples drawn: what is left is the seed
  draws. Two pretraining seeds scoring 0 and 1 (one fine-tuning seed each) give means of
  0, 1/2, 1 with chances 1/4, 1/2, 1/4; one pretraining seed with fine-tuning seeds 0 and 1
  gives the same, from the inner level."""
  from sharedbert.metrics import stats
  mean_of_predictions = lambda p, l: float(np.mean(p))
  labels = np.zeros(7)
  for preds in ([[np.zeros(7)], [np.ones(7)]], [[np.zeros(7), np.ones(7)]]):
    draws = stats.bootstrap_hierarchical_mean(mean_of_predictions, preds, labels,
                                              num_resamples=4000, seed=5)
    values, counts = np.unique(draws, return_counts=True)
    np.testing.assert_array_equal(values, [0.0, 0.5, 1.0])
    np.testing.assert_allclose(counts / 4000, [0.25, 0.5, 0.25], atol=0.03)
  # Equal models: every draw is their score (and the example draws match the flat
  # bootstrap's for the same seed).
  rng = np.random.default_rng(0)
  labels = rng.integers(0, 2, 50)
  p = rng.integers(0, 2, 50)
  accuracy = lambda pr, lab: float(np.mean(pr == lab))
  flat = stats.bootstrap_seed_mean(accuracy, [p], labels, num_resamples=200, seed=9)
  nested = stats.bootstrap_hierarchical_mean(accuracy, [[p], [p]], labels, num_resamples=200,
                                             seed=9)
  np.testing.assert_allclose(nested, flat)
  with pytest.raises(ValueError, match='same, non-zero number'):
    stats.bootstrap_hierarchical_mean(accuracy, [[p], [p, p]], labels, num_resamples=10)
