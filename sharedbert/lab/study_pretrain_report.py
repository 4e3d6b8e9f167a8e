"""The study report's lead: the pretraining verdict, the sweep, the inits, equal compute and
scaling, in tables and sentences generated from study_pretrain.analyse's numbers."""

from __future__ import annotations

import math
import os

import numpy as np

from sharedbert.utils import reporting

_table = reporting.md_table


def _f(x, digits=3) -> str:
  return '–' if x is None or (isinstance(x, float) and math.isnan(x)) else f'{x:.{digits}f}'


def _signed(x, digits=3) -> str:
  return '–' if x is None or (isinstance(x, float) and math.isnan(x)) else f'{x:+.{digits}f}'


def _ci(low, high) -> str:
  return f'[{_signed(low)}, {_signed(high)}]'


def verdict_sentence(p: dict) -> str:
  """One sentence per compared variant, from the verdict entries."""
  verdict = p.get('verdict') or {}
  if not verdict:
    return ('No pretraining verdict yet: it needs at least 2 finished seeds of a variant and '
            'of `standard`.')
  m = p['margin_nats']
  parts = []
  for v, e in verdict.items():
    what = {'worse': 'worse than', 'better': 'better than',
            'equivalent': f'equivalent (within ±{m:g} nats) to',
            'undecided': 'undecided against'}[e['verdict']]
    parts.append(f'`{v}` is **{what}** `standard` ({_signed(e["delta_nats"])} nats of held-out '
                 f'MLM loss, 95% t interval {_ci(e["ci_low"], e["ci_high"])}, {e["seeds"]} '
                 'seed-paired pretraining runs)')
  return 'At equal steps, ' + '; '.join(parts) + '.'


def verdict_section(p: dict) -> list[str]:
  lines = ['## Pretraining verdict', '', '**' + 'Headline.** ' + verdict_sentence(p), '']
  losses = p.get('losses_by_seed', {})
  rows = []
  for v, by_seed in losses.items():
    vals = list(by_seed.values())
    mean = float(np.mean(vals)) if vals else None
    std = float(np.std(vals, ddof=1)) if len(vals) > 1 else None
    e = p.get('verdict', {}).get(v)
    ch = p.get('chosen', {}).get(v, {})
    rows.append([f'`{v}`', f'{ch.get("lr", float("nan")):g}', ch.get('init', '–'), len(vals),
                 f'{_f(mean)} ± {_f(std)}',
                 _signed(e['delta_nats']) if e else '(base)',
                 _ci(e['ci_low'], e['ci_high']) if e else '',
                 f'{e["p_diff_holm"]:.3g} / {e["p_tost_holm"]:.3g}' if e else '',
                 e['verdict'] if e else ''])
  lines += _table(['variant', 'peak lr', 'diag init', 'seeds', 'held-out loss (mean ± std)',
                   'Δ vs standard (nats)', '95% t interval', 'p diff / p TOST (Holm)',
                   'verdict'], rows)
  tokens = p.get('scored_tokens')
  scored = f' ({tokens:,} scored tokens per run)' if tokens else ''
  lines += ['', f'Held-out MLM cross-entropy on the whole held-out split of the corpus{scored}; '
            f'seed s is the same initialisation key, batches, masks and held-out masks for '
            f'every variant, so the differences pair by seed. Verdict: "equivalent" when the '
            f'two one-sided tests put the mean difference inside ±{p["margin_nats"]:g} nats '
            f'(fixed in the config before the run), else "better"/"worse" when the paired t '
            f'test rejects 0, else "undecided", each at level {p["alpha"]:g} after '
            f'{p["multiple_comparisons"]}. Each variant runs at its own best swept rate '
            '(below).', '']
  return lines


def sweep_section(p: dict) -> list[str]:
  sweep = p.get('lr_sweep', {})
  rates = sorted({float(r) for d in sweep.values() for r in d})
  if len(rates) < 2:
    return []
  rows = []
  for v, d in sweep.items():
    best = min(d, key=d.get) if d else None
    rows.append([f'`{v}`'] + [(f'**{_f(d[f"{r:g}"])}**' if f'{r:g}' == best else
                               _f(d.get(f'{r:g}'))) for r in rates])
  return ['### Learning-rate sweep (seed 0, reference width)', '',
          *_table(['variant'] + [f'lr {r:g}' for r in rates], rows),
          '', 'Final held-out MLM loss; bold: the rate each variant\'s seeds and widths use. '
          'A best rate at the edge of the sweep means the sweep should be widened.', '']


def init_section(p: dict) -> list[str]:
  init, shares = p.get('init', {}), p.get('self_attention_share_step0', {})
  lines = ['### The diagonals\' initialisation and attention on itself at step 0', '']
  if init:
    best = min((n for n in init if init[n]['final_loss'] is not None),
               key=lambda n: init[n]['final_loss'], default=None)
    lines += _table(['`shared` init', 'self-attention share at step 0', 'final held-out loss'],
                    [[n + (' (lowest loss)' if n == best else ''),
                      _f(e['self_attention_share_step0']), _f(e['final_loss'])]
                     for n, e in init.items()])
    lines += ['', 'constant: d_q = d_k = d_v = 1, so the initial scores S diag(d_q d_k) S^T '
              'are positive semi-definite; signs: d_q, d_k each ±1 at random; normal: d_q, d_k '
              '~ N(0, 1); d_v = 1 in all. Seed 0 at the recipe\'s rate.', '']
  if shares:
    lines += _table(['variant', 'self-attention share at step 0'],
                    [[f'`{v}`', _f(x)] for v, x in shares.items()])
    lines += ['', 'The mean attention of a token on itself (over heads, layers and real tokens '
              'of one held-out batch) of each variant\'s reference initialisation.', '']
  return lines


def equal_flops_section(p: dict) -> list[str]:
  eq = p.get('equal_flops', {})
  if not eq:
    return []
  rows = [[f'`{v}`', _f(e.get('flops_per_step_ratio')), f'{e["train_flops"]:.3g}',
           _signed(e['delta_nats']), _ci(e['ci_low'], e['ci_high']), e['seeds']]
          for v, e in eq.items()]
  return ['### Equal compute', '',
          *_table(['variant', 'FLOPs per step vs standard', 'budget (training FLOPs)',
                   'Δ vs standard (nats)', '95% t interval', 'seeds'], rows),
          '', 'Each pair compared at the smaller of its two budgets (sharedbert.models.flops): '
          'the cheaper run\'s final loss against the other\'s held-out loss when it had spent '
          'as many FLOPs (linear between evaluations). The other run is then mid-schedule, '
          'with its learning rate not yet decayed, which favours the cheaper variant.', '']


def scaling_sentence(s: dict) -> str:
  gaps, extra = s.get('gap_to_standard', {}), s.get('extrapolation', {})
  parts = []
  for v, g in gaps.items():
    ws = sorted(g, key=int)
    if len(ws) < 2:
      continue
    first, last = g[ws[0]], g[ws[-1]]
    trend = ('narrows' if abs(last['delta_nats']) < abs(first['delta_nats']) else 'does not narrow')
    text = (f'`{v}`\'s gap to `standard` {trend} from D={ws[0]} to D={ws[-1]} '
            f'({_signed(first["delta_nats"])} to {_signed(last["delta_nats"])} nats)')
    e = extra.get(v)
    if e:
      text += (f'; a line in log2(width) through the {e["points"]} widths gives '
               f'{_signed(e["value"], 2)} nats at D={e["target_width"]} (95% interval of the '
               f'line {_ci(e["ci_low"], e["ci_high"])}, {e["points"] - 2} residual degree'
               f'{"s" if e["points"] != 3 else ""} of freedom: an extrapolation far outside '
               'the measured widths, at this step count and corpus, not a prediction of '
               'BERT-base)')
    parts.append(text)
  return ('; '.join(parts) + '.') if parts else ''


def scaling_section(s: dict, png: str | None) -> list[str]:
  variants = [v for v in s if v not in ('gap_to_standard', 'extrapolation')]
  if not variants:
    return []
  ws = sorted({w for v in variants for w in s[v]}, key=int)
  rows = []
  for v in variants:
    rows.append([f'`{v}`'] + [f'{_f(s[v][w]["loss_mean"])} ({s[v][w]["seeds"]})' if w in s[v]
                              else '–' for w in ws])
  lines = ['### Scaling with width', '',
           *_table(['variant'] + [f'D={w}' for w in ws], rows),
           '', 'Mean final held-out loss (seeds); same depth, heads, FFN ratio and recipe at '
           'every width, the init scale 0.7/sqrt(D) (budget recipe), each variant at its '
           'reference-width best rate.', '']
  gap_rows = [[f'`{v}`'] + [f'{_signed(g[w]["delta_nats"])} {_ci(g[w]["ci_low"], g[w]["ci_high"])}'
                            if w in g else '–' for w in ws]
              for v, g in s.get('gap_to_standard', {}).items()]
  if gap_rows:
    lines += _table(['gap to standard (nats)'] + [f'D={w}' for w in ws], gap_rows)
    lines += ['', scaling_sentence(s), '']
  if png:
    lines += [f'![held-out loss against non-embedding parameters and training FLOPs]({png})',
              '']
  return lines


def plot_scaling(s: dict, out_path: str) -> bool:
  """Held-out loss against non-embedding parameters and against training FLOPs, per
  variant (mean line, one dot per seed)."""
  variants = [v for v in s if v not in ('gap_to_standard', 'extrapolation') and s[v]]
  if not variants:
    return False
  plt = reporting.pyplot()
  fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
  for v in variants:
    ws = sorted(s[v], key=int)
    for ax, key in zip(axes, ('non_embedding_params', 'train_flops')):
      x = [s[v][w][key] for w in ws]
      line, = ax.plot(x, [s[v][w]['loss_mean'] for w in ws], marker='o', label=v)
      for w in ws:
        ax.scatter([s[v][w][key]] * len(s[v][w]['losses']), s[v][w]['losses'], s=10,
                   color=line.get_color(), alpha=0.5)
  axes[0].set(xscale='log', xlabel='non-embedding parameters', ylabel='held-out MLM loss',
              title='loss against parameters')
  axes[1].set(xscale='log', xlabel='training FLOPs', title='loss against compute')
  for ax in axes:
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
  fig.tight_layout()
  reporting.save_figure(fig, out_path)
  return True


def sections(arms: dict, workdir: str) -> list[str]:
  """The report's lead, in order: verdict, sweep, inits, equal compute, scaling."""
  p, s = arms['pretraining'], arms['scaling']
  png = 'scaling.png' if plot_scaling(s, os.path.join(workdir, 'scaling.png')) else None
  return (verdict_section(p) + sweep_section(p) + init_section(p) + equal_flops_section(p)
          + scaling_section(s, png))
