"""Statistics of seed-paired pretraining losses (the long and rotary studies): per-seed
differences and their t intervals, a trend over horizons with its lack-of-fit test, the
smallest margin an equivalence test could pass, the power of the paired tests, and the
tables the long study derives from them (equivalence, derived effects, bracketing)."""

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


def equivalence_table(family: dict, alone: dict, margin: float, alpha: float) -> dict:
  """What the design could call equivalent, per comparison ({name: per-seed differences}):
  those of `family` are Holm-adjusted together (the first test of m runs at alpha/m, the
  level that decides whether any passes), those `alone` at alpha. The smallest margin a
  TOST could pass were the mean 0; the seeds at which the configured margin becomes
  passable, and the TOST's power there (passable is not likely); the seeds for 80%."""
  out = {}
  for group, m in ((family, max(1, len(family))), (alone, 1)):
    level = alpha / m
    for name, values in group.items():
      if len(values) < 2:
        continue
      sd = float(np.std(values, ddof=1))
      passable = seeds_for_margin(sd, margin, level)
      out[name] = {'seeds': len(values), 'sd_nats': sd, 'holm_family': m, 'level': level,
                   'smallest_margin': smallest_margin(values, level),
                   'seeds_for_margin': passable,
                   'power_at_those_seeds': (tost_power(passable, sd, margin, level)
                                            if passable else None),
                   'seeds_for_power_0.8': seeds_for_tost_power(sd, margin, level)}
  return out


def derived_effects(effects: dict) -> dict:
  """Effects read off the others' per-seed differences: K = V on top of Q = K
  (single - symmetric = tie_qkv - tie_qk) and the two ties' interaction
  (tie_qkv - tie_qk - tie_kv: zero if their costs added)."""
  need = ('tie_qk', 'tie_kv', 'tie_qkv')
  if not all(k in effects for k in need):
    return {}
  by_seed = {k: dict(zip(effects[k]['seeds'], effects[k]['per_seed'])) for k in need}
  seeds = sorted(set.intersection(*(set(v) for v in by_seed.values())))
  if len(seeds) < 2:
    return {}
  qk, kv, qkv = (by_seed[k] for k in need)
  return {
      'tie_kv_given_qk': {**difference({s: qkv[s] - qk[s] for s in seeds}),
                          'what': 'tying K and V on top of Q = K', 'minuend': 'single',
                          'subtrahend': 'symmetric'},
      'tie_interaction': {**difference({s: qkv[s] - qk[s] - kv[s] for s in seeds}),
                          'what': '(single - symmetric) - (kv_shared - standard): zero if the '
                                  'ties\' costs added'}}


def bracket(losses: dict, chosen: float | None, plateau: float) -> dict:
  """Whether a sweep's chosen rate is bracketed: not at an edge of the rates run, and the
  runs at both its neighbours left the early plateau (final loss below `plateau`)."""
  rates = sorted(losses)
  if chosen is None or chosen not in losses:
    return {'bracketed': False, 'neighbours': {}}
  i = rates.index(chosen)
  neighbours = {f'{lr:g}': {'loss': losses[lr], 'left_plateau': losses[lr] < plateau}
                for lr in rates[max(0, i - 1):i] + rates[i + 1:i + 2]}
  interior = 0 < i < len(rates) - 1
  return {'bracketed': interior and all(n['left_plateau'] for n in neighbours.values()),
          'interior': interior, 'neighbours': neighbours}


def horizon_shape(gaps: dict) -> dict:
  """The gap's shape over the horizons, from its per-seed values ({steps: difference()
  with 'tokens'}): `trend`, a line in log-tokens with its lack-of-fit test, and `changes`,
  the seed-paired change of the gap from each horizon to the next."""
  points = [(g['tokens'], x) for g in gaps.values() for x in g['per_seed']]
  order = sorted(gaps, key=int)
  changes = {}
  for a, b in zip(order, order[1:]):
    before = dict(zip(gaps[a]['seeds'], gaps[a]['per_seed']))
    after = dict(zip(gaps[b]['seeds'], gaps[b]['per_seed']))
    d = {s: after[s] - before[s] for s in after if s in before}
    if len(d) >= 2:
      changes[f'{a}->{b}'] = {**difference(d), 'tokens_from': gaps[a]['tokens'],
                              'tokens_to': gaps[b]['tokens']}
  return {'trend': trend(points), 'changes': changes}
