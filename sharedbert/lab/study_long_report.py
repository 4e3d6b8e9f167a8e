"""The long study's report: W/report.md, W/summary.json, W/horizon.png, W/curves.png, written
from the result files alone (sharedbert.lab.study_long.analyse).

It leads with the horizon figure and the factorial table; then equal FLOPs, what the
design can call equivalent, the selection sweeps and every verdict run.
"""

from __future__ import annotations

import math
import os

import numpy as np

from sharedbert.utils import jsonio
from sharedbert.lab import study_long

SUMMARY_FILE = 'summary.json'
REPORT_FILE = 'report.md'
HORIZON_PNG = 'horizon.png'
CURVES_PNG = 'curves.png'


def _num(x, digits: int = 3, sign: bool = False) -> str:
  if x is None or (isinstance(x, float) and math.isnan(x)):
    return 'n/a'
  return f'{x:+.{digits}f}' if sign else f'{x:.{digits}f}'


def _interval(d: dict) -> str:
  return (f'{_num(d.get("delta_nats"), sign=True)} [{_num(d.get("ci_low"), sign=True)}, '
          f'{_num(d.get("ci_high"), sign=True)}]')


def horizon_sentence(summary: dict) -> str:
  """Whether shared's gap to standard shrinks, holds or grows with the tokens seen."""
  h = summary['horizon']
  gaps, fit = h.get('gap', {}), h.get('trend')
  if not gaps:
    return 'No horizon has both variants finished yet.'
  parts = ', '.join(f'{_tokens(g["tokens"])} tokens {_interval(g)}' for _, g in
                    sorted(gaps.items(), key=lambda kv: int(kv[0])))
  text = f'`shared` minus `standard`, held-out MLM loss in nats: {parts}.'
  if fit is None:
    return text + ' Too few horizons for a trend.'
  slope = (f'{_num(fit["slope_per_doubling"], sign=True)} nats per doubling of the tokens '
           f'[{_num(fit["ci_low"], sign=True)}, {_num(fit["ci_high"], sign=True)}], '
           f'{fit["points"]} per-seed points')
  caveat = (' The points share seeds across horizons, so they are not independent and the '
            'interval is, if anything, too narrow; read the line beside the gap at each horizon.')
  if not fit.get('line_fits', True):
    lof = fit['lack_of_fit']
    steps = '; '.join(f'{_num(c["delta_nats"], sign=True)} [{_num(c["ci_low"], sign=True)}, '
                      f'{_num(c["ci_high"], sign=True)}] from {_tokens(c["tokens_from"])} to '
                      f'{_tokens(c["tokens_to"])} tokens ({len(c["seeds"])} seeds)'
                      for c in h.get('changes', {}).values())
    return (text + f' A straight line in log-tokens fails its lack-of-fit test against the '
            f'horizon means (F({lof["df_lack"]},{lof["df_pure"]}) = {lof["F"]:.1f}, '
            f'p = {lof["p"]:.3f}), so no trend is claimed. The gap changes, seed by seed: '
            f'{steps}.')
  if fit['direction'] == 'undecided':
    return (text + f' A line through the per-seed gaps against log2(tokens) has slope {slope}: '
            'the data cannot tell whether the gap shrinks or grows over this range (the '
            'interval holds 0).' + caveat)
  return text + f' The gap **{fit["direction"]}** with training: slope {slope}.' + caveat


def factorial_sentence(summary: dict) -> str:
  """What the factorial shows at its horizon, and what it cannot separate."""
  f = summary['factorial']
  effects = f.get('effects', {})
  shared = f.get('shared', {})
  if 'tie_qkv' not in effects or 'diagonals' not in effects or 'delta_nats' not in shared:
    return 'The factorial is not finished: no decomposition yet.'
  text = (f'At {f["steps"]:,} steps `shared` is {_interval(shared)} nats behind `standard`. '
          f'Tying Q, K and V costs {_interval(effects["tie_qkv"])} and `shared`\'s diagonals '
          f'win back {_interval(effects["diagonals"])}; that these two add up to `shared`\'s gap '
          'seed by seed holds by construction (single is the middle term), so it is '
          'bookkeeping, not a finding.')
  if 'tie_qk' in effects and 'tie_kv' in effects:
    text += (f' Q = K alone costs {_interval(effects["tie_qk"])}, K = V alone '
             f'{_interval(effects["tie_kv"])}.')
  if 'tie_kv_given_qk' in effects and 'tie_interaction' in effects:
    text += (f' The ties do not add: K = V on top of Q = K (single − symmetric) costs '
             f'{_interval(effects["tie_kv_given_qk"])}; their interaction is '
             f'{_interval(effects["tie_interaction"])}.')
  att = summary.get('attention') or {}
  if 'tie_qk' in effects and all('trained' in att.get(v, {}) for v in ('symmetric', 'shared')):
    text += (' Q = K changes two things at once, which this factorial cannot separate: the '
             'scores become symmetric in the two tokens, and Q·Qᵀ is positive semi-definite, '
             'so a token favours itself (weight on itself after training: '
             f'{att["symmetric"]["trained"]["self_share"]:.3f} in symmetric, '
             f'{att["shared"]["trained"]["self_share"]:.3f} in shared, whose scores are '
             'symmetric but indefinite). The rotary study\'s `shared_qk` cell separates them.')
  if 'asymmetry' in effects:
    text += (f' Restoring asymmetry on Q = K (pairwise − symmetric): '
             f'{_interval(effects["asymmetry"])}.')
  return text


def attention_section(summary: dict) -> str:
  """Where each scheme's attention starts and where training took it: attention_stats.attention_statistics
  of the factorial's verdict runs, means over seeds and layers."""
  att = summary.get('attention') or {}
  if not att:
    return 'Attention statistics: not computed yet (they need the chosen rates).'
  first = next(iter(att.values()))
  steps = summary['factorial']['steps']
  lines = [f'Attention of the factorial\'s verdict runs, at initialisation (the init key train.py '
           f'derives from each seed) and trained ({steps:,} steps, their final checkpoint), '
           f'on the first held-out batch: {first["rows"]} rows of about '
           f'{first["tokens_per_row"]:.0f} real tokens, so uniform attention gives each '
           f'token about {1 / first["tokens_per_row"]:.3f}. Means over seeds and layers '
           '(summary.json `attention` has each seed\'s layers).', '',
           '| variant | seeds | weight on itself: init → trained | largest weight | '
           'sd of the scores |', '|---|---|---|---|---|']

  def pair(e, key):
    cells = [f'{e[w][key]:.3f}' if w in e else '–' for w in ('init', 'trained')]
    return ' → '.join(cells)
  for v, e in att.items():
    seeds = len(e.get('trained', e.get('init', {})).get('seeds', []))
    lines.append(f'| {v} | {seeds} | {pair(e, "self_share")} | {pair(e, "top_weight")} | '
                 f'{pair(e, "logit_sd")} |')
  return '\n'.join(lines)


def equivalence_sentence(summary: dict) -> str:
  """Plainly: whether this design could call anything equivalent at its margin."""
  eq = summary.get('equivalence', {})
  if not eq:
    return 'No comparison has two seeds yet.'
  margin = summary['margin_nats']
  reachable = [n for n, e in eq.items() if e['smallest_margin'] is not None
               and e['smallest_margin'] < margin]
  worst = max(e['smallest_margin'] for e in eq.values() if e['smallest_margin'] is not None)
  if len(reachable) == len(eq):
    return (f'Every comparison could be called equivalent at ±{margin} nats were its true '
            'difference 0: the design can say "equivalent" as well as "worse".')
  return (f'At ±{margin} nats equivalence is **not reachable** for {len(eq) - len(reachable)} '
          f'of {len(eq)} comparisons with these seeds (the smallest passable margins reach '
          f'{worst:.3f} nats): for those the design can only say worse, better or undecided. '
          'The seeds at which the margin becomes passable are not enough to pass it: the '
          'power column says how often a TOST would pass there, were the true difference 0.')


def _tokens(n: int) -> str:
  return f'{n / 1e6:.1f}M' if n >= 1e6 else f'{n / 1e3:.0f}k'


def _finish(plt, fig, ax, path: str, xlabel: str, ylabel: str, title: str) -> str:
  """Log-scale tokens on x, labels, legend; saves and closes the figure; returns its path."""
  ax.set_xscale('log')
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  ax.set_title(title)
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


def write_figures(summary: dict, workdir: str) -> list[str]:
  """The horizon figure (gap against tokens, with the fitted line) and the held-out curves."""
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  written = []
  gaps = summary['horizon'].get('gap', {})
  if gaps:
    fig, ax = plt.subplots(figsize=(6, 4))
    items = sorted(gaps.values(), key=lambda g: g['tokens'])
    x = np.asarray([g['tokens'] for g in items], float)
    y = np.asarray([g['delta_nats'] for g in items])
    lo = np.asarray([g['ci_low'] for g in items])
    hi = np.asarray([g['ci_high'] for g in items])
    ax.errorbar(x, y, yerr=[y - lo, hi - y], fmt='o', capsize=4, label='shared - standard (95% t)')
    fit = summary['horizon'].get('trend')
    if fit:
      xs = np.geomspace(x.min(), x.max(), 50)
      ax.plot(xs, fit['intercept'] + fit['slope_per_doubling'] * np.log2(xs), '--',
              label=f'fit: {fit["slope_per_doubling"]:+.3f} nats / doubling')
    ax.axhline(0.0, color='gray', lw=0.8)
    written.append(_finish(plt, fig, ax, os.path.join(workdir, HORIZON_PNG),
                           'tokens seen (each run its own full schedule)',
                           'held-out MLM loss gap (nats)',
                           'shared vs standard against training length'))
  curves = summary.get('curves', {})
  if curves:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colours = {}
    for name, curve in sorted(curves.items()):
      variant = name.split('@')[0]
      if variant not in summary['horizon'] or not curve:
        continue
      label = None if variant in colours else variant
      colour = colours.setdefault(variant, f'C{len(colours)}')
      steps, loss = zip(*curve)
      ax.plot(np.asarray(steps) * summary['tokens_per_step'], loss, color=colour, lw=0.8,
              alpha=0.7, label=label)
    written.append(_finish(plt, fig, ax, os.path.join(workdir, CURVES_PNG), 'tokens seen',
                           'held-out MLM loss (nats)',
                           'held-out loss along every verdict run (horizon variants)'))
  return written


def render(config, summary: dict, figures: tuple[str, ...] = (HORIZON_PNG, CURVES_PNG)) -> str:
  L = config.long
  lines = [f'# The long study ({config.preset}): the gap past the first steps, and why', '']
  if summary['runs_left']:
    lines += [f'**In progress**: {summary["runs_finished"]} runs finished, about '
              f'{summary["runs_left"]} to go; the figures below are from the finished runs.', '']
  lines += ['Held-out MLM loss (nats, lower is better) of every run at its own last step; '
            f'differences are seed-paired (verdict seeds 0..{int(L.seeds) - 1}, '
            f'0..{int(L.longest_seeds) - 1} at {max(L.horizons):,} steps) with 95% t '
            f'intervals. Rates and `shared`\'s init were chosen on seed {L.selection_seed}, '
            'which no verdict uses.', '',
            '## Horizon', '', *([f'![horizon]({HORIZON_PNG})', ''] if HORIZON_PNG in figures
                                else []), horizon_sentence(summary), '']
  h = summary['horizon']
  lines += ['| steps | tokens | ' + ' | '.join(f'{v} loss (lr)' for v in L.horizon_variants)
            + ' | shared - standard [95%] |', '|' + '---|' * (len(L.horizon_variants) + 3)]
  for steps in L.horizons:
    cells = []
    for v in L.horizon_variants:
      e = h.get(v, {}).get(str(steps))
      cells.append(f'{_num(e["loss_mean"])} ({e["lr"]:g}, {len(e["seeds"])} seeds)' if e else '–')
    g = h.get('gap', {}).get(str(steps))
    lines.append(f'| {steps:,} | {_tokens(steps * summary["tokens_per_step"])} | '
                 + ' | '.join(cells) + f' | {_interval(g) if g else "–"} |')
  lines += ['', '## Factorial: which tie costs what', '', factorial_sentence(summary), '']
  f = summary['factorial']
  lines += [f'At {f["steps"]:,} steps, each variant at its own chosen rate; verdicts against '
            f'`standard`, Holm-adjusted over the variants, equivalence at ±{summary["margin_nats"]} nats.', '',
            '| variant | lr | seeds | loss | − standard [95%] | verdict |', '|---|---|---|---|---|---|']
  for v in L.factorial_variants:
    e = f.get(v)
    if not e:
      lines.append(f'| {v} | – | – | – | – | not finished |')
      continue
    lr = f'{e["lr"]:g}' + (f' ({e["init"]})' if 'init' in e else '')
    if v == study_long.BASE:
      difference, verdict = '(base)', ''
    elif 'delta_nats' in e:
      difference, verdict = _interval(e), e['verdict']
    else:  # Its rate is chosen, its verdict seeds are not all in.
      difference, verdict = '–', 'not finished'
    lines.append(f'| {v} | {lr} | {len(e["seeds"])} | {_num(e["loss_mean"])} | '
                 f'{difference} | {verdict} |')
  lines += ['', '| effect | difference | [95%] |', '|---|---|---|']
  for name, a, b, what in study_long.EFFECTS:
    e = f.get('effects', {}).get(name)
    lines.append(f'| {name}: {what} | {a} − {b} | {_interval(e) if e else "not finished"} |')
  lines += ['', attention_section(summary)]
  lines += ['', '## Equal training FLOPs', '']
  for v, e in summary['equal_flops'].items():
    lines.append(
        f'- `{v}` at {e["variant_steps"]:,} steps against `standard` trained for '
        f'{e["standard_steps"]:,} steps (its own full schedule, lr {e["standard_lr"]:g}: the '
        f'same training FLOPs; FLOP ratio {e["flops_ratio"]:.3f}): {_interval(e)} nats, '
        f'{len(e["seeds"])} seeds. No wall-clock figure is given here: the runs\' own step '
        'times (summary.json) were taken as they ran, at times with other work on the '
        'machine, so they compare nothing; RUN_NOTES.md has the idle side-by-side one.')
  if not summary['equal_flops']:
    lines.append('Not finished (or not in this preset).')
  lines += ['', '## What this design can call equivalent', '',
            f'The verdict calls a difference equivalent when a TOST at level {summary["alpha"]} '
            f'puts it inside ±{summary["margin_nats"]} nats, Holm-adjusted over the '
            'factorial\'s comparisons as the verdicts are: the first of m tests runs at '
            'α/m, so that is the level shown for them (each horizon\'s comparison stands '
            'alone, at α). With mean difference 0, the smallest margin that could pass is '
            't(1−level, n−1)·sd/√n of the per-seed differences.', '',
            '| comparison | seeds | sd of differences | level | smallest passable margin | '
            'seeds for ±margin to be passable | TOST power there | seeds for power 0.8 |',
            '|---|---|---|---|---|---|---|---|']
  for name, e in summary['equivalence'].items():
    lines.append(f'| {name} | {e["seeds"]} | {_num(e["sd_nats"])} | '
                 f'{e.get("level", summary["alpha"]):.3g} | {_num(e["smallest_margin"])} | '
                 f'{e["seeds_for_margin"] or "> 100"} | '
                 f'{_num(e.get("power_at_those_seeds"), 2)} | '
                 f'{e.get("seeds_for_power_0.8") or "> 100"} |')
  lines += ['', equivalence_sentence(summary)]
  lines += ['', '## Selection (seed ' f'{L.selection_seed})', '',
            'Each (variant, steps) sweeps its rates; `shared`\'s inits were swept with them only '
            f'up to {int(L.init_sweep_max_steps):,} steps, and longer horizons took the init '
            'chosen there. A best rate at an edge adds the next rate out. A choice is '
            '*bracketed* when it is not at an edge and the runs at both its neighbours left '
            f'the early plateau (final loss below {float(L.plateau_nats)} nats).', '',
            '| sweep | held-out loss by rate | chosen | bracketed |', '|---|---|---|---|']
  for name, e in summary['selection'].items():
    losses = ', '.join(f'{k}: {_num(x) if not isinstance(x, str) else x}'
                       for k, x in e['losses'].items())
    chosen = (f'{e["chosen"]["lr"]:g}' + (f' {e["chosen"]["init"]}' if 'init' in
              (e['chosen'] or {}) else '')) if e['chosen'] else 'pending'
    stayed = [f'{lr}: {_num(n["loss"])}' for lr, n in e.get('neighbours', {}).items()
              if not n['left_plateau']]
    why = ('yes' if e['bracketed'] else 'no, at an edge' if not e.get('interior', True)
           else f'no, a neighbour ended above {float(L.plateau_nats)} nats, on or past the '
           f'early plateau ({", ".join(stayed)})')
    lines.append(f'| {name} | {losses} | {chosen} | {why} |')
  lines += ['', '## Held-out curves', '',
            f'![curves]({CURVES_PNG})' if CURVES_PNG in figures else 'No verdict run yet.', '',
            f'Training time summed over finished runs: {summary["wall_s"] / 3600:.2f} core-hours '
            '(wall time of each run, two at a time).', '']
  return '\n'.join(lines)


def write_report(config, workdir: str) -> str:
  summary = study_long.analyse(config, workdir)
  jsonio.write_json(os.path.join(workdir, SUMMARY_FILE), summary)
  figures = tuple(os.path.basename(p) for p in write_figures(summary, workdir))
  path = os.path.join(workdir, REPORT_FILE)
  with open(path, 'w', encoding='utf-8') as f:
    f.write(render(config, summary, figures))
  return path
