"""The direction probes' report sections: `cyclic` against its ceiling, and `mirror`'s
verdicts: does rotary give direction where the algebra says it does?

The task (sharedbert/lab/probe_tasks.py) runs once per position arm (learned, rotary, rotary
with a query phase). Under rotary positions a symmetric score matrix ties the two candidates
on every row, so it scores exactly 1/2 (`probe_tasks.symmetric_ceiling`). Issue 53's three
predictions, each marked confirmed or refuted from the seeds:

  - `shared` with rotary passes the symmetric ceiling (its diagonals turn differently);
  - `symmetric` with rotary does not (Q = K keeps the scores symmetric);
  - `symmetric` with rotary and a query phase does.

"Passes" means the seeds' mean is at least PASS_MARGIN above the ceiling and the 95%
Student-t interval of the mean excludes it; "does not pass" means the mean is within
CEILING_TOLERANCE of it (probe_report's tolerance) and no seed is above it by more.
"""

from __future__ import annotations

import numpy as np
from scipy import stats as sp_stats

from sharedbert.utils import reporting

_table = reporting.md_table


def _f(x, digits: int = 3) -> str:
  return '–' if x is None or (isinstance(x, float) and np.isnan(x)) else f'{x:.{digits}f}'

ARMS = {'learned': 'learned table', 'rotary': 'rotary', 'phase': 'rotary + phase'}
PASS_MARGIN = 0.05
CEILING_TOLERANCE = 0.05
# (variant, arm, expected to pass the ceiling)
PREDICTIONS = (('shared', 'rotary', True), ('symmetric', 'rotary', False),
               ('symmetric', 'phase', True))


def _passes(accuracy: list[float], ceiling: float) -> tuple[bool, float, float]:
  """(passes, interval low, interval high) of the mean accuracy over seeds."""
  a = np.asarray(accuracy, float)
  mean = float(a.mean())
  if len(a) < 2:
    return mean >= ceiling + PASS_MARGIN, float('nan'), float('nan')
  half = float(sp_stats.t.ppf(0.975, len(a) - 1) * a.std(ddof=1) / np.sqrt(len(a)))
  return (mean >= ceiling + PASS_MARGIN and mean - half > ceiling), mean - half, mean + half


def verdicts(tasks: dict) -> list[dict]:
  """Each prediction with the seeds' accuracies and 'confirmed', 'refuted' or 'not run'."""
  out = []
  for variant, arm, expected in PREDICTIONS:
    entry = tasks.get(f'mirror_{arm}', {})
    v = entry.get('by_variant', {}).get(variant)
    ceiling = entry.get('symmetric_ceiling', 0.5)
    row = {'variant': variant, 'positions': arm, 'expected_to_pass': expected,
           'ceiling': ceiling}
    if v is None:
      out.append({**row, 'verdict': 'not run'})
      continue
    passed, low, high = _passes(v['accuracy'], ceiling)
    held = (abs(v['mean'] - ceiling) <= CEILING_TOLERANCE
            and max(v['accuracy']) <= ceiling + CEILING_TOLERANCE)
    ok = passed if expected else held
    out.append({**row, 'accuracy': v['accuracy'], 'mean': v['mean'], 'ci': [low, high],
                'verdict': 'confirmed' if ok else 'refuted'})
  return out


def mirror_section(summary: dict, variants) -> list[str]:
  """The report's mirror section: accuracy by variant and arm, then the predictions."""
  tasks = summary['tasks']
  arms = [a for a in ARMS if f'mirror_{a}' in tasks]
  if not arms:
    return []
  lines = ['## Direction in positions: `mirror`', '',
           'Three copies of one symbol, at i - d, i and i + d; the pointer from i must pick '
           'the later copy. Seed mean ± std; (sym) marks a variant whose score matrix is '
           'symmetric under that arm\'s positions. Under rotary positions such a matrix ties '
           'the two copies on every row (a tie counts half), so its accuracy is exactly '
           '0.500 trained or not; with a learned table no ceiling applies (a key term that '
           'falls or rises with the absolute position answers through the bias).', '',
           '| variant | ' + ' | '.join(ARMS[a] for a in arms) + ' |',
           '|---' * (len(arms) + 1) + '|']
  for variant in variants:
    cells = []
    for arm in arms:
      v = tasks[f'mirror_{arm}']['by_variant'].get(variant)
      cells.append('–' if v is None else f'{v["mean"]:.3f} ± {v["std"]:.3f}'
                   + (' (sym)' if v.get('symmetric_scores') else ''))
    lines.append(f'| `{variant}` | ' + ' | '.join(cells) + ' |')
  lines += ['', 'The predictions (issue 53):', '']
  for p in summary.get('mirror_predictions', []):
    said = 'passes' if p['expected_to_pass'] else 'does not pass'
    if p['verdict'] == 'not run':
      lines.append(f'- `{p["variant"]}` with {ARMS[p["positions"]]} positions {said} the '
                   f'ceiling {p["ceiling"]:.3f}: not run.')
      continue
    seeds = ', '.join(f'{a:.3f}' for a in p['accuracy'])
    lines.append(f'- `{p["variant"]}` with {ARMS[p["positions"]]} positions {said} the '
                 f'ceiling {p["ceiling"]:.3f}: **{p["verdict"]}** (seeds {seeds}; mean '
                 f'{p["mean"]:.3f}, 95% interval [{p["ci"][0]:.3f}, {p["ci"][1]:.3f}]).')
  return lines + ['']


def ceiling_section(summary: dict, variants) -> list[str]:
  tasks = [t for t, e in summary['tasks'].items() if 'symmetric_ceiling' in e
           and not t.startswith('mirror_')]  # probe_mirror.section has mirror's.
  if not tasks:
    return []
  lines = []
  for t in tasks:
    entry = summary['tasks'][t]
    control = summary['tasks'].get(f'{t}_nearest')
    rows = []
    for v in variants:
      e = entry['by_variant'].get(v)
      if e is None:
        continue
      c = control['by_variant'].get(v) if control else None
      rows.append([f'`{v}`', 'yes' if e['symmetric_scores'] else 'no',
                   f'{_f(e["mean"])} ± {_f(e["std"])}',
                   '–' if c is None else f'{_f(c["mean"])} ± {_f(c["std"])}'])
    lines += [f'## Direction: `{t}` against its ceiling', '',
              f'A symmetric score ends at {_f(entry["symmetric_ceiling"])} when trained (the '
              f'loss\'s minimum; docs/probes.md derives it) and can never pass '
              f'{_f(entry["symmetric_bound"])}. The control asks for the nearer symbol, a '
              'symmetric relation.', '']
    lines += _table(['variant', 'symmetric scores', f'`{t}` (successor)',
                     f'`{t}_nearest` (control)'], rows) + ['']
  return lines
