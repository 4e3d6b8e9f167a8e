"""W/report.md, W/summary.json and the figures of an attention probe (sharedbert.lab.probe).

Conventions (also written into the report):
  * accuracy: the fraction of prediction slots of the held-out set (config.eval_examples
    sequences per task and seed, the same for every variant) whose argmax is the label,
    after the last training step.
  * mean ± std: over seeds (sample std).
  * Δ vs standard: seed s of a variant against seed s of `standard` (the same data and
    evaluation set), its mean and the Student-t interval of the per-seed differences
    (sharedbert.metrics.stats.t_interval); "reliable" when that interval excludes 0.
"""

from __future__ import annotations

import os
import types

import numpy as np
from scipy import stats as sp_stats

from sharedbert.utils import jsonio
from sharedbert.utils import reporting
from sharedbert.metrics import stats
from sharedbert.lab import probe_direction, probe_tasks
from sharedbert.models import attention as attention_lib

REFERENCE = 'standard'


def _f(x, digits: int = 3) -> str:
  return '–' if x is None or (isinstance(x, float) and np.isnan(x)) else f'{x:.{digits}f}'


def _signed(x, digits: int = 3) -> str:
  return '–' if x is None or np.isnan(x) else f'{x:+.{digits}f}'


# ---------------------------------------------------------------------------------------
# The numbers.

def task_knobs(config, task: str) -> dict:
  cfg = probe_tasks.task_config(config, task)
  base = probe_tasks.base_task(task)
  if base not in cfg:
    return {}
  knobs = {k: (dict(v) if hasattr(v, 'items') else v) for k, v in cfg[base].items()}
  if base == 'mirror':  # The arm's positions, not the list of arms.
    knobs = {**knobs, 'model': {**knobs['model'], **probe_tasks.position_keys(config, task)}}
    knobs.pop('positions')
  return knobs


def symmetric_score_variants(config=None, task: str = '') -> set[str]:
  """The variants whose score matrices are symmetric on `task` (mirror's arms set the
  positions; under rotary only Q = K without a query phase stays symmetric)."""
  keys = probe_tasks.position_keys(config, task) if config is not None else {}
  return {n for n, cls in attention_lib.VARIANTS.items()
          if cls.symmetric_score_matrix(types.SimpleNamespace(**keys))}


# A symmetric-score variant "at the ceiling": its mean within this of the derived value.
CEILING_TOLERANCE = 0.05


def summarize(config, runs: dict, chosen: dict | None = None, sweeps: dict | None = None,
              parameters: dict | None = None) -> dict:
  """Per task id and variant: seeds, mean, std, curve, the learning rate; per variant: Δ vs
  standard; MQAR's gate and pairs; the cyclic task's ceiling. `parameters`: counts per
  variant (probe.parameter_counts), reported as given."""
  chosen, sweeps = chosen or {}, sweeps or {}
  seeds = list(range(int(config.seeds)))
  confidence = float(config.confidence)
  # Older workdirs' configs predate these keys: the defaults of configs/probe.py.
  min_difference = float(config.get('min_difference', 0.02))
  gate = float(config.get('gate', 0.90))
  out = {'tasks': {}, 'parameters': dict(parameters or {}), 'confidence': confidence,
         'min_difference': min_difference, 'ceiling': CEILING}
  for task in probe_tasks.task_ids(config):
    base = probe_tasks.base_task(task)
    entry = {'chance': probe_tasks.chance(base, probe_tasks.task_config(config, task)),
             'knobs': task_knobs(config, task), 'swept': probe_tasks.swept(config, task),
             'by_variant': {}}
    ceiling_task = task if base == 'mirror' else base
    if probe_tasks.symmetric_ceiling(ceiling_task, config) is not None:
      entry['symmetric_ceiling'] = probe_tasks.symmetric_ceiling(ceiling_task, config)
      entry['symmetric_bound'] = probe_tasks.symmetric_bound(ceiling_task, config)
    symmetric = symmetric_score_variants(config, task)
    for variant in config.variants:
      done = [runs[variant, task, s] for s in seeds if (variant, task, s) in runs]
      if not done:
        continue
      acc = [r['accuracy'] for r in done]
      mean, std = stats.mean_std(acc)
      v = {'seeds': [r['seed'] for r in done], 'accuracy': acc, 'mean': mean, 'std': std,
           'n': len(done), 'lr': chosen.get((variant, base), done[0].get('lr')),
           'steps': [p['step'] for p in done[0]['curve']],
           'curves': [[p['accuracy'] for p in r['curve']] for r in done],
           'train_s': [r['train_s'] for r in done], 'wall_s': [r['wall_s'] for r in done],
           'symmetric_scores': variant in symmetric}
      if (variant, base) in sweeps:
        v['sweep'] = {f'{lr:g}': a for lr, a in sweeps[variant, base].items()}
      if 'symmetric_ceiling' in entry and variant in symmetric:
        v['at_symmetric_ceiling'] = abs(mean - entry['symmetric_ceiling']) <= CEILING_TOLERANCE
      if done[0].get('by_direction'):
        v['by_direction'] = {
            d: stats.mean_std([r['by_direction'][d] for r in done])
            for d in probe_tasks.DIRECTIONS}
      entry['by_variant'][variant] = v
    out['tasks'][task] = entry
  if 'mqar' in out['tasks']:
    _mqar_gate(config, out['tasks'], gate)
  if any(t.startswith('mirror_') for t in out['tasks']):
    out['mirror_predictions'] = probe_direction.verdicts(out['tasks'])
  for task, entry in out['tasks'].items():
    ref = entry['by_variant'].get(REFERENCE)
    if ref is None or not entry.get('compared', True):
      continue
    for variant, v in entry['by_variant'].items():
      if variant != REFERENCE:
        v['vs_standard'] = paired_difference(v, ref, confidence, min_difference)
  return out


def _mqar_gate(config, tasks: dict, gate: float) -> None:
  """MQAR is compared only where `standard` reaches `gate` at config.mqar.num_pairs in every
  seed (and every seed ran); the gate covers the task's other pair counts too. Adds
  tasks.mqar.{gate, gate_passed, by_pairs}."""
  entry = tasks['mqar']
  ref = entry['by_variant'].get(REFERENCE)
  passed = (ref is not None and ref['n'] == int(config.seeds)
            and min(ref['accuracy']) >= gate)
  entry['gate'] = {'threshold': gate, 'num_pairs': int(config.mqar.num_pairs),
                   'standard_accuracy': None if ref is None else ref['accuracy']}
  entry['gate_passed'] = bool(passed)
  family = {int(config.mqar.num_pairs): 'mqar'}
  family.update({int(t[len('mqar_p'):]): t for t in tasks if t.startswith('mqar_p')})
  entry['by_pairs'] = {str(p): {v: e['mean'] for v, e in tasks[t]['by_variant'].items()}
                       for p, t in sorted(family.items())}
  for t in family.values():
    tasks[t]['compared'] = bool(passed)


# Both accuracies at least this: a ceiling, where a difference is a handful of answers.
CEILING = 0.99


def paired_difference(a: dict, b: dict, confidence: float, min_difference: float = 0.0) -> dict:
  """a - b over the seeds both have: mean, t interval, per-seed values, and `reliable`:
  the interval excludes 0, the difference is at least `min_difference`, and the two are not
  both at the ceiling (mean accuracy >= CEILING)."""
  by_b = dict(zip(b['seeds'], b['accuracy']))
  pairs = [(x, by_b[s]) for s, x in zip(a['seeds'], a['accuracy']) if s in by_b]
  per_seed = [x - y for x, y in pairs]
  low, high = stats.t_interval(per_seed, confidence)
  mean = float(np.mean(per_seed)) if per_seed else float('nan')
  ceiling = bool(pairs) and min(np.mean([x for x, _ in pairs]),
                                np.mean([y for _, y in pairs])) >= CEILING
  reliable = (not np.isnan(low) and (low > 0 or high < 0) and abs(mean) >= min_difference
              and not ceiling)
  return {'diff': mean, 'ci': [low, high], 'per_seed': per_seed, 'n': len(per_seed),
          'reliable': bool(reliable), 'ceiling': bool(ceiling)}


# ---------------------------------------------------------------------------------------
# Sentences from the numbers.

def _learned(entry: dict, v: dict) -> bool:
  """Clearly above chance: at least halfway from chance to perfect."""
  c = entry['chance']
  return v['mean'] >= c + 0.5 * (1.0 - c)


def task_sentence(task: str, entry: dict) -> str:
  variants = entry['by_variant']
  c = entry['chance']
  ref = variants.get(REFERENCE)
  if ref is None:
    return (f'**{task}**: `standard` was not run, so there is no reference; accuracies: ' +
            ', '.join(f'{n} {_f(v["mean"])}' for n, v in variants.items()) + '.')
  parts = [f'**{task}** (chance {_f(c)}): `standard` reaches {_f(ref["mean"])} ± '
           f'{_f(ref["std"])} over {ref["n"]} seeds']
  if 'gate_passed' in entry:
    g = entry['gate']
    parts[0] += (f' (the gate, `standard` ≥ {g["threshold"]:g} at {g["num_pairs"]} pairs in '
                 f'every seed, {"passed" if entry["gate_passed"] else "failed"})')
  if not entry.get('compared', True):
    parts.append('`standard` did not pass MQAR\'s gate, so no variant is compared on it')
    return '; '.join(parts) + '.'
  if not _learned(entry, ref):
    parts[0] += (', less than halfway from chance to perfect: the reference did not learn '
                 'the task in this setting, so a difference from it says little')
    past = [(n, v) for n, v in variants.items() if n != REFERENCE and _learned(entry, v)]
    if past:
      parts.append('past halfway: ' + ', '.join(
          f'`{n}` ({_f(v["mean"])} ± {_f(v["std"])})' for n, v in past))
  lower = [(n, v['vs_standard']) for n, v in variants.items()
           if 'vs_standard' in v and v['vs_standard']['reliable'] and v['vs_standard']['diff'] < 0]
  higher = [(n, v['vs_standard']) for n, v in variants.items()
            if 'vs_standard' in v and v['vs_standard']['reliable'] and v['vs_standard']['diff'] > 0]
  same = [n for n, v in variants.items() if 'vs_standard' in v and not v['vs_standard']['reliable']]

  def listed(items):
    return ', '.join(f'`{n}` ({_signed(d["diff"])}, interval [{_signed(d["ci"][0])}, '
                     f'{_signed(d["ci"][1])}])' for n, d in items)
  if lower:
    parts.append(f'reliably below `standard`: {listed(lower)}')
  if higher:
    parts.append(f'reliably above `standard`: {listed(higher)}')
  if same:
    parts.append('no reliable difference from `standard`: ' + ', '.join(f'`{n}`' for n in same))
  near_chance = [n for n, v in variants.items() if v['mean'] < c + 0.1 * (1.0 - c)]
  if near_chance:
    parts.append('within a tenth of the way from chance to perfect: ' +
                 ', '.join(f'`{n}`' for n in near_chance))
  if 'symmetric_ceiling' in entry:
    parts.append(ceiling_sentence(entry))
  return '; '.join(parts) + '.'


def ceiling_sentence(entry: dict) -> str:
  """Where the variants with symmetric scores end against the derived ceiling."""
  ceiling = entry['symmetric_ceiling']
  rows = [(n, v) for n, v in entry['by_variant'].items() if v.get('symmetric_scores')]
  if not rows:
    return 'no variant with symmetric scores was run'
  at = [n for n, v in rows if v.get('at_symmetric_ceiling')]
  off = [n for n, v in rows if not v.get('at_symmetric_ceiling')]
  text = ('the variants with symmetric scores end at ' + ', '.join(
      f'`{n}` {_f(v["mean"])} ± {_f(v["std"])}' for n, v in rows) +
      f' against the derived ceiling {_f(ceiling)} (the training loss\'s minimum for any '
      f'symmetric score; none can pass {_f(entry["symmetric_bound"])})')
  if at and not off:
    return text + f': all within {CEILING_TOLERANCE:g} of it'
  if at:
    return text + (f': within {CEILING_TOLERANCE:g} of it ' + ', '.join(f'`{n}`' for n in at) +
                   '; not ' + ', '.join(f'`{n}`' for n in off))
  return text + f': none within {CEILING_TOLERANCE:g} of it'


def direction_sentence(entry: dict) -> str:
  """For the directed task: where 'after' and 'before' accuracies differ by > 0.1."""
  rows = [(n, v['by_direction']) for n, v in entry['by_variant'].items() if 'by_direction' in v]
  if not rows:
    return ''
  uneven = [(n, d) for n, d in rows if abs(d['after'][0] - d['before'][0]) > 0.1]
  if not uneven:
    return ('By direction, every variant answers "after x" and "before x" within 0.1 of '
            'each other.')
  return ('By direction, these variants answer one direction better than the other by more '
          'than 0.1: ' + ', '.join(f'`{n}` (after {_f(d["after"][0])}, before '
                                   f'{_f(d["before"][0])})' for n, d in uneven) + '.')


# ---------------------------------------------------------------------------------------
# Figures (matplotlib, Agg: no display needed).

_pyplot = reporting.pyplot


def _colors(variants):
  plt = _pyplot()
  cmap = plt.get_cmap('tab10')
  return {v: cmap(i % 10) for i, v in enumerate(variants)}


def plot_curves(summary: dict, variants, out_path: str) -> None:
  """Accuracy vs training steps: the seed mean per variant, shaded from min to max."""
  plt = _pyplot()
  tasks = list(summary['tasks'])
  colors = _colors(variants)
  fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.6), squeeze=False)
  for ax, task in zip(axes[0], tasks):
    entry = summary['tasks'][task]
    for v in variants:
      if v not in entry['by_variant']:
        continue
      e = entry['by_variant'][v]
      curves = np.asarray(e['curves'])
      ax.plot(e['steps'], curves.mean(0), color=colors[v], label=v)
      ax.fill_between(e['steps'], curves.min(0), curves.max(0), color=colors[v], alpha=0.15)
    ax.axhline(entry['chance'], color='grey', linestyle=':', linewidth=1, label='chance')
    ax.set_title(task)
    ax.set_xlabel('training step')
    ax.set_ylim(-0.02, 1.02)
  axes[0][0].set_ylabel('held-out accuracy')
  axes[0][-1].legend(fontsize=7, loc='lower right')
  fig.suptitle('Accuracy during training (line: seed mean; band: min to max over seeds)',
               fontsize=10)
  fig.tight_layout()
  reporting.save_figure(fig, out_path)


def plot_final(summary: dict, variants, out_path: str) -> None:
  """Final accuracy per variant: one dot per seed, the mean ± std as a bar."""
  plt = _pyplot()
  tasks = list(summary['tasks'])
  colors = _colors(variants)
  fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.6), squeeze=False)
  for ax, task in zip(axes[0], tasks):
    entry = summary['tasks'][task]
    names = [v for v in variants if v in entry['by_variant']]
    for i, v in enumerate(names):
      e = entry['by_variant'][v]
      x = i + np.linspace(-0.12, 0.12, len(e['accuracy'])) if len(e['accuracy']) > 1 else [i]
      ax.scatter(x, e['accuracy'], color=colors[v], s=14, zorder=3)
      ax.errorbar([i], [e['mean']], yerr=[e['std']], color='black', capsize=4, marker='_',
                  markersize=14, zorder=2)
    ax.axhline(entry['chance'], color='grey', linestyle=':', linewidth=1)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=40, ha='right', fontsize=8)
    ax.set_title(task)
    ax.set_ylim(-0.02, 1.02)
  axes[0][0].set_ylabel('final held-out accuracy')
  fig.suptitle('Final accuracy (dots: seeds; bar: mean ± std; dotted: chance)', fontsize=10)
  fig.tight_layout()
  reporting.save_figure(fig, out_path)


def plot_pairs(summary: dict, variants, out_path: str) -> None:
  """MQAR accuracy against the number of key-value pairs: seed mean per variant."""
  plt = _pyplot()
  by_pairs = summary['tasks']['mqar'].get('by_pairs', {})
  pairs = sorted(int(p) for p in by_pairs)
  colors = _colors(variants)
  fig, ax = plt.subplots(figsize=(5.2, 3.8))
  for v in variants:
    xs = [p for p in pairs if v in by_pairs[str(p)]]
    if xs:
      ax.plot(xs, [by_pairs[str(p)][v] for p in xs], marker='o', color=colors[v], label=v)
  gate = summary['tasks']['mqar'].get('gate', {})
  if gate:
    ax.axhline(gate['threshold'], color='grey', linestyle=':', linewidth=1, label='gate')
  ax.set_xscale('log', base=2)
  ax.set_xticks(pairs)
  ax.set_xticklabels([str(p) for p in pairs])
  ax.set_xlabel('key-value pairs')
  ax.set_ylabel('held-out accuracy (seed mean)')
  ax.set_ylim(-0.02, 1.02)
  ax.legend(fontsize=7, loc='lower left')
  ax.set_title('MQAR against the number of pairs', fontsize=10)
  fig.tight_layout()
  reporting.save_figure(fig, out_path)


# ---------------------------------------------------------------------------------------
# The report.

_table = reporting.md_table


def _lr_text(config) -> str:
  sweep = config.get('lr_sweep')
  if sweep is None or not set(sweep.tasks) & set(config.tasks):  # No swept task runs.
    return f'lr {config.optim.lr:g} for every task'
  return (f'lr tuned per variant on {", ".join(f"`{t}`" for t in sweep.tasks)} (seed 0 at '
          f'{", ".join(f"{x:g}" for x in sweep.lrs)}; the other seeds at the best), '
          f'{config.optim.lr:g} elsewhere')


def _task_text(config, task: str) -> str:
  knobs = ', '.join(f'{k}={v}' for k, v in task_knobs(config, task).items())
  return f'`{task}` ({knobs})'


def render(config, summary: dict, timing: dict) -> str:
  """W/report.md of the probes: the header, the accuracy table with seed intervals,
  one measured sentence per task, parameter counts and the figures. One function on
  purpose: the page's sections read in the order they are written."""
  variants = [v for v in config.variants if v in summary['parameters']]
  tasks = list(summary['tasks'])
  conf = int(round(100 * summary['confidence']))
  m = config.model
  lines = ['# Attention probes', '',
           'Every attention variant trained from scratch on synthetic tasks '
           '(sharedbert/lab/probe_tasks.py) under one budget; see docs/probes.md.',
           '']
  lines += ['## Run', '']
  if timing.get('command'):
    lines += [f'- command: `{timing["command"]}`']
  total_train = sum(sum(e['train_s']) for t in summary['tasks'].values()
                    for e in t['by_variant'].values())
  total_wall = sum(sum(e['wall_s']) for t in summary['tasks'].values()
                   for e in t['by_variant'].values())
  if timing.get('wall_s') is not None:
    lines += [f'- wall time of the invocation that trained: {timing["wall_s"]:.0f} s '
              f'({timing["wall_s"] / 60:.1f} min) on {timing.get("cpu_count")} CPU cores '
              f'(load average {timing.get("load_start")} at the start, '
              f'{timing.get("load_end")} at the end)' +
              ('; this report was rewritten later with --report_only'
               if timing.get('report_only') else '')]
  else:
    lines += ['- this report was written with --report_only; no timing of the training was kept']
  lines += [f'- summed over runs: {total_wall:.0f} s per-run wall time, of which {total_train:.0f} s '
            'in the compiled training steps (the rest: compiling, data generation, evaluation)',
            f'- preset `{config.preset}`; seeds {int(config.seeds)}; {int(config.total_steps)} steps '
            f'of batch {int(config.batch_size)} per run, the same for every variant; AdamW, '
            f'{int(config.optim.warmup_steps)} warmup steps, then linear decay; ' +
            _lr_text(config),
            f'- model: L={m.num_layers}, D={m.hidden_size}, heads={m.num_heads}, FFN={m.mlp_dim}, '
            f'sequence length {int(config.seq_len)}, {int(config.vocab_size)} content symbols '
            f'+ {probe_tasks.NUM_SPECIAL} special tokens; evaluation on '
            f'{int(config.eval_examples)} held-out sequences per task and seed',
            '- tasks: ' + '; '.join(_task_text(config, t) for t in tasks), '']

  lines += ['## Parameters', '',
            'Counted from each variant\'s parameter tree (sharedbert.models.params); the encoder '
            'includes the embeddings, the total adds the prediction head.', '']
  std_p = summary['parameters'].get(REFERENCE)
  rows = []
  for v in variants:
    p = summary['parameters'][v]
    rel = (f'{100 * (p["attention"] - std_p["attention"]) / std_p["attention"]:+.1f}%'
           if std_p else '–')
    rows.append([f'`{v}`', f'{p["attention"]:,}', rel, f'{p["encoder"]:,}', f'{p["total"]:,}'])
  lines += _table(['variant', 'attention (QKV + out)', 'vs standard', 'encoder', 'total'], rows)
  lines += ['']

  lines += ['## Accuracy', '',
            f'Final held-out accuracy, mean ± std over seeds (n = seeds). Δ: the variant minus '
            f'`standard`, paired by seed, with its {conf}% Student-t interval over seeds; '
            f'**bold** (a reliable difference) where the interval excludes 0, |Δ| is at least '
            f'{summary.get("min_difference", 0.0):g}, and the two are not both at the ceiling '
            f'(mean accuracy ≥ {CEILING:g}, where a difference is a handful of answers).', '']
  header = ['variant'] + [f'{t} (chance {_f(summary["tasks"][t]["chance"], 2)})' for t in tasks]
  rows = []
  for v in variants:
    row = [f'`{v}`']
    for t in tasks:
      e = summary['tasks'][t]['by_variant'].get(v)
      row.append('–' if e is None else f'{_f(e["mean"])} ± {_f(e["std"])} (n={e["n"]})')
    rows.append(row)
  lines += _table(header, rows) + ['']
  rows = []
  for v in variants:
    if v == REFERENCE:
      continue
    row = [f'`{v}`']
    for t in tasks:
      d = summary['tasks'][t]['by_variant'].get(v, {}).get('vs_standard')
      if d is None:
        row.append('–')
        continue
      cell = f'{_signed(d["diff"])} [{_signed(d["ci"][0])}, {_signed(d["ci"][1])}]'
      row.append(f'**{cell}**' if d['reliable'] else cell)
    rows.append(row)
  if rows:
    lines += [f'Δ vs `standard` [{conf}% interval over seeds]:', '']
    lines += _table(['variant'] + tasks, rows) + ['']

  if 'directed' in summary['tasks']:
    entry = summary['tasks']['directed']
    rows = [[f'`{v}`', f'{_f(e["by_direction"]["after"][0])} ± '
             f'{_f(e["by_direction"]["after"][1])}',
             f'{_f(e["by_direction"]["before"][0])} ± {_f(e["by_direction"]["before"][1])}']
            for v, e in entry['by_variant'].items() if 'by_direction' in e]
    if rows:
      lines += ['The directed task by direction (mean ± std over seeds):', '']
      lines += _table(['variant', '"AFTER x" accuracy', '"BEFORE x" accuracy'], rows) + ['']

  lines += _sweep_section(summary, variants)
  lines += _pairs_section(summary, variants)
  lines += (probe_direction.ceiling_section(summary, variants)
            + probe_direction.mirror_section(summary, variants))
  lines += ['## What each task shows', '',
            'Written by sharedbert/lab/probe_report.py from the numbers above.', '']
  for t in tasks:
    sentence = task_sentence(t, summary['tasks'][t])
    if t == 'directed':
      extra = direction_sentence(summary['tasks'][t])
      sentence += (' ' + extra) if extra else ''
    lines += [f'- {sentence}']
  lines += ['']

  lines += ['## Figures', '', '![accuracy during training](curves.png)', '',
            '![final accuracy per seed](final.png)', '']
  if 'mqar' in summary['tasks']:
    lines += ['![MQAR against the number of pairs](pairs.png)', '']
  lines += ['## How to read this', '',
            '- Every variant sees the same training batches and the same held-out set for a '
            'given seed, and is initialised from the same random key; only the attention '
            'differs.',
            '- "Reliable" is about seeds: the interval of the per-seed differences excludes 0. '
            f'With {int(config.seeds)} seeds the interval is wide (t quantile '
            f'{_t_quantile(summary["confidence"], int(config.seeds)):.2f}); a difference it '
            'does not call reliable may still be real.',
            '- Where `standard` itself stays less than halfway from chance to perfect, the '
            'reference has not learned the task in this setting: a variant above it learned '
            'faster, which is not the same as being able to learn what `standard` cannot. '
            'MQAR is compared only when `standard` passes its gate.',
            '- A learning rate chosen on seed 0 is chosen on the evaluation set that seed 0 '
            'reports; seeds 1 and up are not, and carry the comparison\'s weight.', '']
  return '\n'.join(lines)


def _sweep_section(summary: dict, variants) -> list[str]:
  """The learning rate chosen per variant and swept task, with seed 0's accuracy at each."""
  tasks = [t for t, e in summary['tasks'].items() if e.get('swept') and
           not t.startswith('mqar_p') and any('sweep' in v for v in e['by_variant'].values())]
  if not tasks:
    return []
  rows = []
  for v in variants:
    row = [f'`{v}`']
    for t in tasks:
      e = summary['tasks'][t]['by_variant'].get(v)
      if e is None or 'sweep' not in e:
        row.append('–')
        continue
      row.append(', '.join((f'**{lr}: {_f(a)}**' if float(lr) == e['lr'] else f'{lr}: {_f(a)}')
                           for lr, a in e['sweep'].items()))
    rows.append(row)
  return (['## Learning rates', '',
           'Seed 0\'s final accuracy at each swept rate; **bold**: the rate the other seeds '
           '(and MQAR\'s other pair counts) ran at.', ''] +
          _table(['variant'] + tasks, rows) + [''])


def _pairs_section(summary: dict, variants) -> list[str]:
  entry = summary['tasks'].get('mqar')
  if not entry or 'by_pairs' not in entry:
    return []
  pairs = list(entry['by_pairs'])
  rows = [[f'`{v}`'] + [_f(entry['by_pairs'][p].get(v)) for p in pairs] for v in variants]
  g = entry['gate']
  verdict = ('passed' if entry['gate_passed'] else
             'failed: no variant is compared on MQAR at any pair count')
  return (['## MQAR by number of pairs', '',
           f'Seed-mean accuracy (chance 1/pairs). Gate: `standard` ≥ {g["threshold"]:g} at '
           f'{g["num_pairs"]} pairs in every seed ({", ".join(_f(a) for a in g["standard_accuracy"] or [])}): '
           f'{verdict}.', ''] +
          _table(['variant'] + [f'{p} pairs' for p in pairs], rows) + [''])


def _t_quantile(confidence: float, n: int) -> float:
  return float(sp_stats.t.ppf(0.5 + confidence / 2, max(n - 1, 1)))


def _json_ready(summary: dict, config, timing: dict) -> dict:
  sweep = config.get('lr_sweep')
  out = {'config': {'preset': config.preset, 'seeds': int(config.seeds),
                    'variants': list(config.variants), 'tasks': list(config.tasks),
                    'task_ids': probe_tasks.task_ids(config),
                    'total_steps': int(config.total_steps), 'batch_size': int(config.batch_size),
                    'seq_len': int(config.seq_len), 'vocab_size': int(config.vocab_size),
                    'lr': float(config.optim.lr),
                    'lr_sweep': None if sweep is None else {
                        'lrs': [float(x) for x in sweep.lrs], 'tasks': list(sweep.tasks)},
                    'model': dict(config.model)},
         'timing': timing, 'confidence': summary['confidence'],
         'min_difference': summary['min_difference'],
         'parameters': summary['parameters'], 'tasks': {},
         **{k: summary[k] for k in ('mirror_predictions',) if k in summary}}
  for task, entry in summary['tasks'].items():
    t = {k: entry[k] for k in ('chance', 'knobs', 'swept', 'symmetric_ceiling',
                               'symmetric_bound', 'gate', 'gate_passed', 'by_pairs',
                               'compared') if k in entry}
    t['by_variant'] = {}
    for v, e in entry['by_variant'].items():
      t['by_variant'][v] = {k: e[k] for k in (
          'mean', 'std', 'n', 'seeds', 'accuracy', 'lr', 'sweep', 'symmetric_scores',
          'at_symmetric_ceiling', 'by_direction', 'vs_standard', 'steps', 'curves') if k in e}
    out['tasks'][task] = t
  return out


def write_report(config, workdir: str, runs: dict, timing: dict, *, chosen: dict | None = None,
                 sweeps: dict | None = None, parameters: dict | None = None) -> str:
  """Writes report.md, summary.json, curves.png, final.png and (with MQAR) pairs.png;
  returns report.md's path."""
  summary = summarize(config, runs, chosen, sweeps, parameters)
  variants = [v for v in config.variants if v in summary['parameters']]
  jsonio.write_json(os.path.join(workdir, 'summary.json'), _json_ready(summary, config, timing))
  if variants:
    plot_curves(summary, variants, os.path.join(workdir, 'curves.png'))
    plot_final(summary, variants, os.path.join(workdir, 'final.png'))
    if 'mqar' in summary['tasks']:
      plot_pairs(summary, variants, os.path.join(workdir, 'pairs.png'))
  path = os.path.join(workdir, 'report.md')
  jsonio.write_text(path, render(config, summary, timing) + '\n')
  return path
