"""Statistics of seed-paired pretraining losses (the long and rotary studies): per-seed
differences and their t intervals, a trend over horizons, the smallest margin an
equivalence test could pass, and the power of the paired tests."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as sp_stats

from sharedbert.metrics import stats


def paired(a: dict, b: dict) -> dict:
  """Per-seed differences {seed: a - b} over the seeds both have (dicts seed -> loss)."""
  return {s: a[s] - b[s] for s in sorted(a) if s in b}


def difference(diffs: dict, confidence: float = 0.95) -> dict:
  """The mean of per-seed differences {seed: a - b} with its t interval, the seeds and the
  differences themselves (in seed order)."""
  values = list(diffs.values())
  low, high = stats.t_interval(values, confidence)
  return {'delta_nats': float(np.mean(values)) if values else None, 'ci_low': low,
          'ci_high': high, 'seeds': sorted(diffs),
          'per_seed': [float(diffs[s]) for s in sorted(diffs)]}


def trend(points: list[tuple[float, float]], confidence: float = 0.95) -> dict | None:
  """A straight line of per-seed gaps against log2(tokens): the slope per doubling of the
  tokens seen, with its t interval (residual df = points - 2). Seeds recur across horizons,
  so the points are not independent: the interval is, if anything, too narrow. None below
  three horizons: through two, the line only joins their means, and its interval would
  come from the seeds' scatter alone."""
  if len({x for x, _ in points}) < 3:
    return None
  x = np.log2(np.asarray([p[0] for p in points], np.float64))
  y = np.asarray([p[1] for p in points], np.float64)
  slope, intercept = np.polyfit(x, y, 1)
  resid = y - (slope * x + intercept)
  dof = len(x) - 2
  se = math.sqrt(float(resid @ resid) / dof / float(((x - x.mean()) ** 2).sum())) if dof else math.nan
  half = float(sp_stats.t.ppf(0.5 + confidence / 2, dof)) * se if dof else math.nan
  low, high = float(slope) - half, float(slope) + half
  lof = lack_of_fit(points)
  line_fits = lof is None or lof['p'] >= 1 - confidence
  # A direction only for a line the data do not reject: otherwise the shape is told in
  # words, interval by interval (the report's horizon sentence).
  direction = ('no line' if not line_fits else 'shrinks' if high < 0 else 'grows' if low > 0
               else 'undecided')
  return {'slope_per_doubling': float(slope), 'ci_low': low, 'ci_high': high,
          'intercept': float(intercept), 'points': len(x), 'direction': direction,
          'lack_of_fit': lof, 'line_fits': line_fits}


def lack_of_fit(points: list[tuple[float, float]]) -> dict | None:
  """The F test of a straight line in log2(x) against the means at each x (pure error from
  the replicates at each x): F = (SS_lack / (groups - 2)) / (SS_pure / (n - groups)). None
  without replicates or with fewer than three x values."""
  groups: dict[float, list[float]] = {}
  for x, y in points:
    groups.setdefault(float(x), []).append(float(y))
  n, k = len(points), len(groups)
  if k < 3 or n - k < 1:
    return None
  x = np.log2(np.asarray([p[0] for p in points], np.float64))
  y = np.asarray([p[1] for p in points], np.float64)
  slope, intercept = np.polyfit(x, y, 1)
  ss_resid = float(np.sum((y - (slope * x + intercept)) ** 2))
  ss_pure = float(sum(np.sum((np.asarray(v) - np.mean(v)) ** 2) for v in groups.values()))
  df_lack, df_pure = k - 2, n - k
  if ss_pure == 0:
    return {'F': math.inf, 'df_lack': df_lack, 'df_pure': df_pure, 'p': 0.0}
  f = ((ss_resid - ss_pure) / df_lack) / (ss_pure / df_pure)
  return {'F': float(f), 'df_lack': df_lack, 'df_pure': df_pure,
          'p': float(sp_stats.f.sf(f, df_lack, df_pure))}


def smallest_margin(diffs: list[float], alpha: float) -> float | None:
  """The smallest margin a TOST at level alpha could call equivalent with these seeds'
  spread, were the mean difference 0: t_{1-alpha, n-1} * sd / sqrt(n)."""
  if len(diffs) < 2:
    return None
  sd = float(np.std(diffs, ddof=1))
  return float(sp_stats.t.ppf(1 - alpha, len(diffs) - 1) * sd / math.sqrt(len(diffs)))


def seeds_for_margin(sd: float, margin: float, alpha: float, limit: int = 100) -> int | None:
  """Seeds needed for a TOST at +-margin to pass with a true difference of 0 and this
  spread of per-seed differences (None: more than `limit`)."""
  for n in range(2, limit + 1):
    if sp_stats.t.ppf(1 - alpha, n - 1) * sd / math.sqrt(n) < margin:
      return n
  return None


def t_power(n: int, sd: float, effect: float, alpha: float) -> float | None:
  """Power of a two-sided one-sample t test at level alpha, n seeds, to find a mean
  difference `effect` when the per-seed differences have this sd."""
  if n < 2 or not sd:
    return None
  df, nc = n - 1, effect / (sd / math.sqrt(n))
  crit = sp_stats.t.ppf(1 - alpha / 2, df)
  power = float(sp_stats.nct.sf(crit, df, nc) + sp_stats.nct.cdf(-crit, df, nc))
  # Far in the tail scipy's noncentral t returns nan; there the power is 1 to many digits.
  return power if math.isfinite(power) else float(abs(nc) > crit)


def tost_power(n: int, sd: float, margin: float, alpha: float, draws: int = 200_000) -> float | None:
  """Power of a TOST at level alpha (each one-sided test) to call a true difference of 0
  equivalent within +-margin, n seeds and this sd: simulated (fixed seed), as the sample
  mean and sd vary together."""
  if n < 2:
    return None
  if not sd:  # Identical differences at the true mean 0: always inside the margin.
    return 1.0
  rng = np.random.default_rng(0)
  mean = rng.normal(0.0, sd / math.sqrt(n), draws)
  s = sd * np.sqrt(rng.chisquare(n - 1, draws) / (n - 1))
  crit = sp_stats.t.ppf(1 - alpha, n - 1)
  return float(np.mean(np.abs(mean) + crit * s / math.sqrt(n) < margin))


def seeds_for_tost_power(sd: float, margin: float, alpha: float, power: float = 0.8,
                         limit: int = 100) -> int | None:
  """Seeds for a TOST at +-margin to pass with probability `power` when the true difference
  is 0 (tost_power); None: more than `limit`."""
  start = seeds_for_margin(sd, margin, alpha, limit)
  if start is None:
    return None
  for n in range(start, limit + 1):
    if tost_power(n, sd, margin, alpha, draws=50_000) >= power:
      return n
  return None
