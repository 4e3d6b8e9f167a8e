"""W/report.md and its figures, from the result files of a study (sharedbert.study).

Conventions (also written into the report):
  * Scores are GLUE task scores (MRPC (F1+acc)/2, STS-B (Pearson+Spearman)/2, CoLA MCC,
    else accuracy), shown x100.
  * mean ± std: over fine-tuning seeds (sample std).
  * 95% CI of a mean: percentile bootstrap over dev examples of the seed mean (every seed
    scored on the same resample; sharedbert.metrics.stats.bootstrap_seed_mean). It measures
    how much the figure depends on which dev examples were drawn.
  * Paired difference against `standard`: the same dev resamples score both variants, so
    the difference's interval is much tighter than two separate intervals; a second
    interval, over seeds (seed s of a variant paired with seed s of standard: the same
    fine-tuning data order), is a t interval of the per-seed differences. A difference is
    called reliable only when both intervals exclude 0.
  * The average over tasks uses the tasks this study ran (GLUE's convention of nine tasks
    cannot be met on the local data) except WNLI, which GLUE's average leaves out (its dev
    set is adversarial; most systems score at or below the majority); its interval
    averages the tasks' bootstrap draws (each task's dev set resampled independently).
  * Verdict of a variant against `standard` (`verdict`), per task and on the average:
    "better" / "worse" when both intervals above lie above / below 0; else "equivalent
    within +-delta" (delta = config.equivalence_margin points) when a two one-sided test
    at level 1 - confidence on each side passes for both kinds of interval, i.e. both
    (2 * confidence - 1) intervals (90% for 95%) lie strictly inside (-delta, +delta);
    else "undecided".
  * What pretraining buys: `standard` against the majority class (scored on the same dev
    resamples; the same constant for every seed) and against the `none` baseline (the
    same architecture fine-tuned from random weights); "reliably better" means both
    intervals lie above 0.
  * Paths are never absolute (sharedbert.paths): relative to the repository, or W/... for
    the study's workdir.
"""

from __future__ import annotations

import io
import os
import zlib

import numpy as np
import tensorflow as tf

from sharedbert import jsonio
from sharedbert import study_plan
from sharedbert.data import glue
from sharedbert.metrics import glue as glue_metrics
from sharedbert.metrics import stats

_TITLES = {'cola': 'CoLA', 'sst2': 'SST-2', 'mrpc': 'MRPC', 'stsb': 'STS-B', 'qqp': 'QQP',
           'mnli': 'MNLI-m', 'qnli': 'QNLI', 'rte': 'RTE', 'wnli': 'WNLI'}


def _title(task: str) -> str:
  return _TITLES.get(task, task)


def _pct(x) -> str:
  return '–' if x is None or (isinstance(x, float) and np.isnan(x)) else f'{100 * x:.1f}'


_read = jsonio.read_json


def _save_figure(fig, path: str) -> None:
  """By way of memory, so that `path` may be remote (gs://)."""
  buf = io.BytesIO()
  fig.savefig(buf, dpi=90, format='png')
  jsonio.write_text(path, buf.getvalue())


t_interval = stats.t_interval  # Kept here too: the study's callers use this name.

# Run and shown, but left out of the average and of the headline's counts (the GLUE score of
# Courtois et al., DESIGN.md,
# as sharedbert.metrics.glue.glue_average).
AVERAGE_EXCLUDES = ('wnli',)


# ---------------------------------------------------------------------------------------
# Loading.

def load_runs(workdir: str, variants, tasks) -> dict:
  """{variant: {task: [result of seed 0, 1, ...]}} for the finished runs, by seed."""
  out = {}
  for v in variants:
    out[v] = {}
    for t in tasks:
      files = tf.io.gfile.glob(os.path.join(workdir, 'runs', v, t, 'seed_*.json'))
      runs = sorted((_read(f) for f in files), key=lambda r: r['seed'])
      if runs:
        out[v][t] = runs
  return out


def seed_mean_distribution(task: str, runs: list, resamples: int) -> np.ndarray:
  """Bootstrap draws of the seed-mean score; the same resamples for every variant."""
  spec = glue.get_task(task)
  labels = np.asarray(runs[0]['labels'], np.float32 if spec.is_regression else np.int64)
  preds = [np.asarray(r['predictions'], labels.dtype) for r in runs]
  return stats.bootstrap_seed_mean(glue_metrics.task_score_fn(spec), preds, labels,
                                   num_resamples=resamples, seed=zlib.crc32(task.encode()))


def glue_tables(runs: dict, variants, tasks, confidence: float, resamples: int,
                baselines=()) -> dict:
  """Per variant (and baseline) and task: mean, std, CI, per-seed scores and bootstrap
  draws; and averages over the tasks every variant finished."""
  table = {}
  for v in list(variants) + list(baselines):
    table[v] = {}
    for t in tasks:
      rs = runs[v].get(t)
      if not rs:
        continue
      scores = [r['score'] for r in rs]
      mean, std = stats.mean_std(scores)
      dist = seed_mean_distribution(t, rs, resamples)
      table[v][t] = {'mean': mean, 'std': std, 'per_seed': scores,
                     'seeds': [r['seed'] for r in rs], 'dist': dist,
                     'ci': stats.percentile_interval(dist, confidence),
                     'majority': rs[0]['majority_baseline'], 'n_dev': len(rs[0]['labels'])}
  # The average over the tasks every variant finished, with the same seeds; a baseline
  # has one when it finished those tasks too.
  common = [t for t in tasks if t not in AVERAGE_EXCLUDES
            and all(t in table[v] for v in variants)]
  for v in table:
    if not common or not all(t in table[v] for t in common):
      continue
    n = min(len(table[v][t]['per_seed']) for t in common)
    per_seed = [float(np.mean([table[v][t]['per_seed'][i] for t in common])) for i in range(n)]
    dist = np.mean([table[v][t]['dist'] for t in common], axis=0)
    mean, std = stats.mean_std(per_seed)
    table[v]['_average'] = {'mean': float(np.mean([table[v][t]['mean'] for t in common])),
                            'std': std, 'per_seed': per_seed, 'dist': dist,
                            'ci': stats.percentile_interval(dist, confidence),
                            'seeds': list(range(n)), 'tasks': common}
  return table


def majority_table(runs: list, task: str, resamples: int) -> dict | None:
  """The majority class as a row of glue_tables, from one variant's runs of `task`: its
  score for every seed, and its bootstrap draws on the same dev resamples as the models'.
  None for result files that predate `majority_prediction`."""
  if 'majority_prediction' not in runs[0]:
    return None
  spec = glue.get_task(task)
  labels = np.asarray(runs[0]['labels'], np.float32 if spec.is_regression else np.int64)
  preds = np.full(labels.shape, runs[0]['majority_prediction'], labels.dtype)
  dist = stats.bootstrap_seed_mean(glue_metrics.task_score_fn(spec), [preds], labels,
                                   num_resamples=resamples, seed=zlib.crc32(task.encode()))
  seeds = [r['seed'] for r in runs]
  score = float(runs[0]['majority_baseline'])
  return {'mean': score, 'std': 0.0, 'per_seed': [score] * len(seeds), 'seeds': seeds,
          'dist': dist}


def majority_average(majority: dict, tasks, seeds) -> dict | None:
  if not tasks or not all(majority.get(t) for t in tasks):
    return None
  mean = float(np.mean([majority[t]['mean'] for t in tasks]))
  return {'mean': mean, 'std': 0.0, 'per_seed': [mean] * len(seeds), 'seeds': list(seeds),
          'dist': np.mean([majority[t]['dist'] for t in tasks], axis=0)}


def tost_confidence(confidence: float) -> float:
  """The two-sided level whose interval inside (-delta, delta) is a two one-sided test with
  each side at 1 - confidence: 0.90 for 0.95."""
  return 2 * confidence - 1


def paired_difference(a: dict, b: dict, confidence: float) -> dict:
  """a - b: the point estimate, the paired bootstrap interval and the seed-paired t interval
  (at `confidence`, and at tost_confidence(confidence) for the equivalence test)."""
  diff = a['mean'] - b['mean']
  boot = stats.percentile_interval(a['dist'] - b['dist'], confidence)
  by_seed_a = dict(zip(a['seeds'], a['per_seed']))
  by_seed_b = dict(zip(b['seeds'], b['per_seed']))
  shared = sorted(set(by_seed_a) & set(by_seed_b))
  per_seed = [by_seed_a[s] - by_seed_b[s] for s in shared]
  t_low, t_high = t_interval(per_seed, confidence)
  reliable = (boot[0] > 0 or boot[1] < 0) and not np.isnan(t_low) and (t_low > 0 or t_high < 0)
  tost = tost_confidence(confidence)
  return {'diff': diff, 'boot_ci': boot, 't_ci': (t_low, t_high), 'per_seed': per_seed,
          'reliable': bool(reliable),
          'boot_ci_tost': stats.percentile_interval(a['dist'] - b['dist'], tost),
          't_ci_tost': t_interval(per_seed, tost)}


VERDICTS = ('better', 'worse', 'equivalent', 'undecided')


def verdict(d: dict, margin: float) -> str:
  """One of VERDICTS for a paired_difference `d` (fractions; `margin` too).

  better / worse: both intervals (boot_ci, t_ci) above / below 0. Else equivalent: both
  TOST intervals (boot_ci_tost, t_ci_tost) strictly inside (-margin, margin). Else (or
  without a t interval, under 2 seeds) undecided.
  """
  intervals = [d['boot_ci'], d['t_ci'], d['boot_ci_tost'], d['t_ci_tost']]
  if any(np.isnan(x) for ci in intervals for x in ci):
    return 'undecided'
  (b_lo, b_hi), (t_lo, t_hi) = d['boot_ci'], d['t_ci']
  if b_lo > 0 and t_lo > 0:
    return 'better'
  if b_hi < 0 and t_hi < 0:
    return 'worse'
  if all(-margin < lo and hi < margin for lo, hi in intervals[2:]):
    return 'equivalent'
  return 'undecided'


def verdict_text(v: str, margin: float) -> str:
  """'equivalent within ±1 point' etc.; `margin` in fractions."""
  if v != 'equivalent':
    return v
  pts = 100 * margin
  return f'equivalent within ±{pts:g} point{"" if pts == 1 else "s"}'


# ---------------------------------------------------------------------------------------
# Figures (matplotlib, Agg: no display needed).

def _plt():
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  return plt


def plot_pretraining(workdir: str, variants, out_path: str) -> bool:
  plt = _plt()
  fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
  any_line = False
  for v in variants:
    lines = jsonio.read_jsonl(
        os.path.join(study_plan.pretrain_dir(workdir, v), 'metrics.jsonl'))
    tr = [(l['step'], l['loss']) for l in lines if 'loss' in l and 'step' in l]
    ev = [(l['step'], l['eval_loss']) for l in lines if 'eval_loss' in l]
    if tr:
      axes[0].plot(*zip(*tr), label=v)
      any_line = True
    if ev:
      axes[1].plot(*zip(*ev), marker='o', label=v)
  axes[0].set(title='pretraining MLM loss (train)', xlabel='step', ylabel='loss')
  axes[1].set(title='held-out MLM loss', xlabel='step', ylabel='loss')
  for ax in axes:
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
  fig.tight_layout()
  _save_figure(fig, out_path)
  plt.close(fig)
  return any_line


def plot_glue(table: dict, variants, tasks, out_path: str) -> None:
  plt = _plt()
  cols = [t for t in tasks if any(t in table[v] for v in variants)] + (
      ['_average'] if any('_average' in table[v] for v in variants) else [])
  fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(cols) + 2), 3.8))
  width = 0.8 / len(variants)
  for i, v in enumerate(variants):
    xs, ys, lo, hi = [], [], [], []
    for j, t in enumerate(cols):
      e = table[v].get(t)
      if e is None:
        continue
      xs.append(j + (i - (len(variants) - 1) / 2) * width)
      ys.append(100 * e['mean'])
      lo.append(100 * (e['mean'] - e['ci'][0]))
      hi.append(100 * (e['ci'][1] - e['mean']))
    ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=v)
  ax.set_xticks(range(len(cols)))
  ax.set_xticklabels(['average' if t == '_average' else _title(t) for t in cols])
  ax.set_ylabel('dev score ×100 (95% CI)')
  ax.axhline(0, color='black', lw=0.6)
  ax.grid(axis='y', alpha=0.3)
  ax.legend(fontsize=8)
  ax.set_title('GLUE dev scores: mean over seeds, bootstrap 95% CI')
  fig.tight_layout()
  _save_figure(fig, out_path)
  plt.close(fig)


def robustness_table(runs: dict, variants, tasks) -> dict:
  """{task: {variant: {'levels', 'mean', 'std', 'per_seed'}}}: per fine-tuning seed the mean
  over noise seeds, then mean and std over fine-tuning seeds."""
  out = {}
  for t in tasks:
    for v in variants:
      rs = [r for r in runs[v].get(t, []) if 'robustness' in r]
      if not rs:
        continue
      levels = rs[0]['robustness']['levels']
      per_seed = np.asarray([r['robustness']['mean'] for r in rs])  # [seeds, levels]
      noise_std = np.asarray([[np.std(s, ddof=1) if len(s) > 1 else 0.0
                               for s in r['robustness']['scores']] for r in rs])
      out.setdefault(t, {})[v] = {
          'levels': levels, 'mean': per_seed.mean(axis=0),
          'std': per_seed.std(axis=0, ddof=1) if len(rs) > 1 else np.zeros(len(levels)),
          'noise_std': noise_std.mean(axis=0), 'n_seeds': len(rs),
          'noise_seeds': len(rs[0]['robustness']['noise_seeds'])}
  return out


def plot_robustness(rob: dict, variants, out_path: str) -> None:
  plt = _plt()
  tasks = list(rob)
  fig, axes = plt.subplots(1, len(tasks), figsize=(3.6 * len(tasks), 3.4), squeeze=False)
  for ax, t in zip(axes[0], tasks):
    for v in variants:
      e = rob[t].get(v)
      if e is None:
        continue
      ax.errorbar(100 * np.asarray(e['levels']), 100 * e['mean'], yerr=100 * e['std'],
                  marker='o', capsize=3, label=v)
    ax.set(title=_title(t), xlabel='noise std, % of embedding std', ylabel='dev score ×100')
    ax.grid(alpha=0.3)
  axes[0][0].legend(fontsize=8)
  fig.tight_layout()
  _save_figure(fig, out_path)
  plt.close(fig)


def plot_time(pretrain: dict, epoch_times: dict, variants, out_path: str) -> None:
  plt = _plt()
  fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
  vs = [v for v in variants if pretrain.get(v, {}).get('step_time_median')]
  axes[0].bar(vs, [1000 * pretrain[v]['step_time_median'] for v in vs])
  axes[0].set(title='pretraining: median time per step', ylabel='ms')
  tasks = sorted({t for v in variants for t in epoch_times.get(v, {})})
  width = 0.8 / max(1, len(variants))
  for i, v in enumerate(variants):
    xs = [j + (i - (len(variants) - 1) / 2) * width for j, t in enumerate(tasks)
          if t in epoch_times.get(v, {})]
    ys = [epoch_times[v][t] for t in tasks if t in epoch_times.get(v, {})]
    axes[1].bar(xs, ys, width, label=v)
  axes[1].set_xticks(range(len(tasks)))
  axes[1].set_xticklabels([_title(t) for t in tasks])
  axes[1].set(title='fine-tuning: seconds per epoch', ylabel='s')
  axes[1].legend(fontsize=8)
  for ax in axes:
    ax.grid(axis='y', alpha=0.3)
  fig.tight_layout()
  _save_figure(fig, out_path)
  plt.close(fig)


# ---------------------------------------------------------------------------------------
# The report.

def _param_counts(config, variants) -> dict:
  from sharedbert import params as params_lib
  from sharedbert.models.bert import ModelConfig
  out = {}
  for v in variants:
    cfg = ModelConfig.from_config(study_plan.pretrain_config(config, v).model)
    out[v] = params_lib.parameter_counts(cfg)
  return out


def _epoch_times(runs: dict, variants) -> dict:
  """Seconds per fine-tuning epoch, from epochs after the first (which includes compiling),
  averaged over seeds; the first epoch when there is only one."""
  out = {}
  for v in variants:
    for t, rs in runs[v].items():
      times = [x for r in rs for x in (r['epoch_time_s'][1:] or r['epoch_time_s'])]
      if times:
        out.setdefault(v, {})[t] = float(np.mean(times))
  return out


def _fmt_ci(ci) -> str:
  return '–' if np.isnan(ci[0]) else f'[{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]'


def _fmt_diff(d: dict) -> str:
  mark = ' **reliable**' if d['reliable'] else ''
  return f'{100 * d["diff"]:+.1f} {_fmt_ci(d["boot_ci"])} / {_fmt_ci(d["t_ci"])}{mark}'


def reliably_better(d: dict) -> bool:
  """Both intervals of a paired_difference lie above 0 (nan: no)."""
  return bool(d['boot_ci'][0] > 0 and d['t_ci'][0] > 0)


def pretraining_gains(runs: dict, table: dict, base: str, baselines, keys, confidence: float,
                      resamples: int) -> tuple[dict, dict]:
  """({task or '_average': {'majority' or baseline: base minus it}}, the majority rows)."""
  majority = {t: majority_table(runs[base][t], t, resamples) for t in keys
              if t != '_average' and t in runs.get(base, {})}
  avg = table.get(base, {}).get('_average')
  if avg and majority_average(majority, avg['tasks'], avg['seeds']):
    majority['_average'] = majority_average(majority, avg['tasks'], avg['seeds'])
  gains = {}
  for t in keys:
    if t not in table.get(base, {}):
      continue
    entry = {}
    if majority.get(t):
      entry['majority'] = paired_difference(table[base][t], majority[t], confidence)
    for b in baselines:
      if t in table[b]:
        entry[b] = paired_difference(table[base][t], table[b][t], confidence)
    gains[t] = entry
  return gains, majority


def headline(verdicts: dict, gains: dict, base: str, baselines, margin: float,
             avg_tasks) -> list[str]:
  """The report's first paragraph, in words, from the verdicts and the pretraining gains."""
  parts = []
  if verdicts and avg_tasks:
    calls = []
    for v, vv in verdicts.items():
      per = [x for t, x in vv.items() if t != '_average' and t not in AVERAGE_EXCLUDES]
      counts = ', '.join(f'{per.count(k)} {k}' for k in VERDICTS if per.count(k))
      calls.append(f'`{v}` is {verdict_text(vv["_average"], margin)} (per task: {counts})')
    parts.append(f'Against `{base}` on the average over '
                 f'{", ".join(_title(t) for t in avg_tasks)}: ' + '; '.join(calls) + '.')
  elif verdicts:
    parts.append(f'No verdict against `{base}` yet: no task has results for every variant.')
  if gains_sentence(gains, base, baselines):
    parts.append(gains_sentence(gains, base, baselines))
  if not parts:
    return []
  return ['**Verdict.** ' + ' '.join(parts), '']


def gains_sentence(gains: dict, base: str, baselines) -> str:
  """On how many tasks `base` is reliably better than every baseline, in words."""
  tasks = [t for t in gains if t != '_average' and t not in AVERAGE_EXCLUDES]
  left_out = [t for t in gains if t in AVERAGE_EXCLUDES]
  if not tasks:
    return ''
  kinds = ['majority'] + list(baselines)
  names = {'majority': 'the majority class'}
  names.update({b: f'the no-pretraining baseline `{b}`' for b in baselines})
  wins = {k: [t for t in tasks if k in gains[t] and reliably_better(gains[t][k])]
          for k in kinds}
  both = [t for t in tasks if all(t in wins[k] for k in kinds)]
  listed = f' ({", ".join(_title(t) for t in both)})' if both else ''
  text = (f'Pretrained `{base}` is reliably better than '
          f'{"both " if len(kinds) > 1 else ""}{" and ".join(names[k] for k in kinds)} on '
          f'{len(both)} of {len(tasks)} task{"s" if len(tasks) != 1 else ""}{listed}')
  if len(kinds) > 1:
    text += '; ' + ', '.join(f'than {names[k]} on {len(wins[k])}' for k in kinds)
  if left_out:
    text += f' ({", ".join(_title(t) for t in left_out)} not counted, as in the average)'
  return text + '.'


def _row_name(v: str, baselines) -> str:
  return f'{v} (no pretraining)' if v in baselines else v


def build_report(config, workdir: str, variants) -> tuple[str, dict]:
  """The report's markdown and a summary dict (also written as W/summary.json)."""
  conf = float(config.confidence)
  margin = float(config.equivalence_margin) / 100
  resamples = int(config.bootstrap_resamples)
  tasks, skipped = study_plan.resolve_glue_tasks(config)
  _, skipped_pairs = study_plan.crossdomain_plan(config, tasks)
  baselines = study_plan.baselines_of(config, variants)
  rows = list(variants) + baselines
  runs = load_runs(workdir, rows, tasks)
  table = glue_tables(runs, variants, tasks, conf, resamples, baselines)
  pretrain = {}
  for v in variants:
    path = os.path.join(study_plan.pretrain_dir(workdir, v), study_plan.DONE_FILE)
    if tf.io.gfile.exists(path):
      pretrain[v] = _read(path)
  base = 'standard' if 'standard' in variants else variants[0]
  cols = [t for t in tasks if any(t in table[v] for v in rows)]
  has_avg = any('_average' in table[v] for v in variants)
  keys = cols + (['_average'] if has_avg else [])
  avg_tasks = table[base]['_average']['tasks'] if '_average' in table[base] else []
  diffs = {v: {t: paired_difference(table[v][t], table[base][t], conf) for t in keys
               if t in table[v] and t in table[base]} for v in variants if v != base}
  verdicts = {v: {t: verdict(d, margin) for t, d in dd.items()} for v, dd in diffs.items()}
  gains, majority = pretraining_gains(runs, table, base, baselines, keys, conf, resamples)

  lines = [f'# Controlled study of attention variants (preset `{config.preset}`)', '']
  lines += headline(verdicts, gains, base, baselines, margin, avg_tasks)
  lines += _header(config, workdir, variants, baselines, tasks, skipped, skipped_pairs)

  # Parameters.
  counts = _param_counts(config, variants)
  lines += ['## Parameters', '',
            'Counted from the real parameter tree (sharedbert.params); "encoder" is what '
            'BERT counts (embeddings, layers, pooler), without the MLM head.', '',
            '| variant | attention QKV | encoder | encoder vs standard |', '|---|---|---|---|']
  for v in variants:
    c = counts[v]
    ref = counts.get(base, c)['encoder total']
    lines.append(f'| {v} | {c["attention QKV"]:,} | {c["encoder total"]:,} | '
                 f'{100 * (c["encoder total"] - ref) / ref:+.2f}% |')
  lines.append('')

  # Headline.
  lines += ['## Headline: GLUE dev scores', '',
            f'Score ×100: mean ± std over fine-tuning seeds, then the {conf:.0%} bootstrap '
            'interval of the seed mean over dev examples. Majority: always predicting the most '
            'frequent training label (STS-B: the mean).', '']
  head = ['variant'] + [_title(t) for t in cols] + (['average'] if has_avg else [])
  lines += ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
  for v in rows:
    cells = [_row_name(v, baselines)]
    for t in keys:
      e = table[v].get(t)
      cells.append('–' if e is None else
                   f'{_pct(e["mean"])} ± {_pct(e["std"])} [{_pct(e["ci"][0])}, {_pct(e["ci"][1])}]')
    lines.append('| ' + ' | '.join(cells) + ' |')
  if cols:
    maj = ['majority'] + [_pct(next(table[v][t]['majority'] for v in rows if t in table[v]))
                          for t in cols]
    if has_avg:
      maj.append(_pct(majority['_average']['mean']) if majority.get('_average') else '')
    lines.append('| ' + ' | '.join(maj) + ' |')
  if has_avg:
    lines += ['', f'Average: the unweighted mean of the task scores over '
              f'{", ".join(_title(t) for t in avg_tasks)} (not the nine-task GLUE score)'
              + ('; WNLI is left out, as GLUE\'s average leaves it out (its dev set is '
                 'adversarial: most systems score at or below the majority)'
                 if 'wnli' in cols else '') + '.']
  seeds_seen = sorted({len(rs) for v in rows for rs in runs[v].values()})
  lines += ['', f'Seeds per cell: {", ".join(map(str, seeds_seen)) or "none"}.', '']

  # Paired differences and verdicts.
  if len(variants) > 1:
    lines += [f'### Paired differences against `{base}`', '',
              f'×100, variant minus {base}: the point estimate, the {conf:.0%} paired '
              'bootstrap interval over dev examples / the t interval over seed-paired '
              'differences. **reliable**: both intervals exclude 0.', '']
    head = ['variant'] + [_title(t) for t in cols] + (['average'] if has_avg else [])
    lines += ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    for v, dd in diffs.items():
      cells = [v] + [_fmt_diff(dd[t]) if t in dd else '–' for t in keys]
      lines.append('| ' + ' | '.join(cells) + ' |')
    lines.append('')
    lines += _verdict_section(diffs, verdicts, base, keys, margin, conf)
  lines += _gains_section(gains, table, majority, base, baselines, keys, conf)

  # Pretraining.
  lines += ['## Pretraining', '',
            'Every variant: the same vocabulary, data order, masks, steps and seed. Held-out '
            'figures are on the held-out documents of the corpus at the last step.', '',
            '| variant | steps | final train loss | held-out MLM loss | held-out MLM accuracy '
            '| majority accuracy | median step time (ms) | vs standard |',
            '|---|---|---|---|---|---|---|---|']
  ref_t = pretrain.get(base, {}).get('step_time_median')
  for v in variants:
    p = pretrain.get(v)
    if not p:
      lines.append(f'| {v} | not finished | | | | | | |')
      continue
    st = p.get('step_time_median')
    rel = f'{100 * (st - ref_t) / ref_t:+.1f}%' if st and ref_t else '–'
    lines.append(f'| {v} | {p.get("steps")} | {p.get("train_loss", float("nan")):.3f} | '
                 f'{p.get("eval_loss", float("nan")):.3f} | '
                 f'{_pct(p.get("eval_mlm_accuracy"))} | {_pct(p.get("eval_majority_accuracy"))} | '
                 f'{1000 * st:.1f} | {rel} |' if st else f'| {v} | {p.get("steps")} | | | | | | |')
  weak = [v for v, p in pretrain.items()
          if p.get('eval_mlm_accuracy') is not None and p.get('eval_majority_accuracy') is not None
          and p['eval_mlm_accuracy'] <= p['eval_majority_accuracy'] + 0.005]
  if weak:
    lines += ['', f'**Caution:** the held-out MLM accuracy of {", ".join(weak)} does not beat '
              'always predicting the most frequent masked token: these encoders learned little '
              'beyond token frequencies, so the fine-tuning results below compare nearly '
              'untrained attention layers, not the variants\' pretrained quality. Pretrain '
              'longer (pretrain.override.total_steps) for a comparison of substance.']
  if plot_pretraining(workdir, variants, os.path.join(workdir, 'pretraining.png')):
    lines += ['', '![pretraining and held-out MLM loss](pretraining.png)']
  lines.append('')
  if cols:
    plot_glue(table, rows, tasks, os.path.join(workdir, 'glue.png'))
    lines += ['![GLUE dev scores with 95% intervals](glue.png)', '']

  # Robustness.
  rob = robustness_table(runs, rows, tasks)
  lines += ['## Robustness to embedding noise', '']
  if rob:
    r0 = next(iter(next(iter(rob.values())).values()))
    lines += [
        'Gaussian noise added to the input embeddings (the output of the embedding '
        'LayerNorm) of the fine-tuned models on the dev sets. Level = noise std as a fraction '
        'of the std of the embedding output over each sequence\'s non-pad tokens '
        '(sharedbert.robustness). '
        f'{r0["noise_seeds"]} noise seeds per level; per fine-tuning seed the mean over '
        'noise seeds, then mean ± std over fine-tuning seeds. Level 0 is the clean score. '
        'Drop: score at the highest level minus the clean score.', '']
    for t, per_v in rob.items():
      levels = next(iter(per_v.values()))['levels']
      head = ['variant'] + [f'{100 * l:g}%' for l in levels] + ['drop']
      lines += [f'**{_title(t)}**', '', '| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
      for v in rows:
        e = per_v.get(v)
        if e is None:
          continue
        cells = [v] + [f'{_pct(m)} ± {_pct(s)}' for m, s in zip(e['mean'], e['std'])]
        cells.append(f'{100 * (e["mean"][-1] - e["mean"][0]):+.1f}')
        lines.append('| ' + ' | '.join(cells) + ' |')
      lines.append('')
    plot_robustness(rob, rows, os.path.join(workdir, 'robustness.png'))
    lines += ['![robustness curves](robustness.png)', '']
  else:
    lines += ['No robustness results yet.', '']

  # Cross-domain.
  lines += ['## Cross-domain transfer', '']
  pairs = list(config.crossdomain.pairs)
  cross = {}
  for v in rows:
    for t, rs in runs[v].items():
      for r in rs:
        for name, e in r.get('crossdomain', {}).items():
          cross.setdefault(name, {}).setdefault(v, []).append(e)
  if cross:
    names = [p for p in pairs if p in cross] + [p for p in cross if p not in pairs]
    lines += ['A model fine-tuned on the source task, scored on the target\'s evaluation set '
              'after mapping labels as listed. Score ×100 (mean of the listed metrics), '
              'mean ± std over fine-tuning seeds.', '',
              '| variant | ' + ' | '.join(names) + ' |', '|---|' + '---|' * len(names)]
    for v in rows:
      cells = [v]
      for n in names:
        es = cross[n].get(v)
        if not es:
          cells.append('–')
          continue
        m, s = stats.mean_std([e['score'] for e in es])
        cells.append(f'{_pct(m)} ± {_pct(s)}')
      lines.append('| ' + ' | '.join(cells) + ' |')
    any_e = {n: next(iter(cross[n].values()))[0] for n in names}
    lines.append('| majority | ' + ' | '.join(_pct(any_e[n]['majority_score']) for n in names) + ' |')
    lines += ['', '| pair | label mapping | metrics | n | gold positive rate |',
              '|---|---|---|---|---|']
    for n in names:
      e = any_e[n]
      lines.append(f'| {n} | {e["mapping"]} | {", ".join(e["metrics"])} | {e["n"]} | '
                   f'{_pct(e["positive_rate"])}% |')
    lines.append('')
  else:
    lines += ['No cross-domain results.', '']

  # Time.
  epoch_times = _epoch_times(runs, rows)
  lines += ['## Training time', '',
            'Wall-clock measured in this study, on the same machine, one run at a time. '
            'Pretraining: median seconds per optimizer step over the logged intervals '
            '(compilation excluded). Fine-tuning: seconds per epoch including the dev '
            'evaluation, from epochs after the first (which includes compilation), mean over '
            'seeds. On a shared machine these carry noise from other load.', '']
  tasks_t = [t for t in tasks if any(t in epoch_times.get(v, {}) for v in rows)]
  head = ['variant', 'pretraining ms/step'] + [f'{_title(t)} s/epoch' for t in tasks_t]
  lines += ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
  for v in rows:
    st = pretrain.get(v, {}).get('step_time_median')
    cells = [v, f'{1000 * st:.1f}' if st else '–']
    cells += [f'{epoch_times[v][t]:.1f}' if t in epoch_times.get(v, {}) else '–' for t in tasks_t]
    lines.append('| ' + ' | '.join(cells) + ' |')
  lines.append('')
  if pretrain or epoch_times:
    plot_time(pretrain, epoch_times, rows, os.path.join(workdir, 'time.png'))
    lines += ['![training time](time.png)', '']

  # SQuAD.
  lines += ['## SQuAD', ''] + _squad_section(config, workdir, variants)

  # Missing runs.
  missing = []
  for v in rows:
    if v in variants and v not in pretrain:
      missing.append(f'pretraining of {v}')
    for t in tasks:
      got = len(runs[v].get(t, []))
      if got < int(config.seeds):
        missing.append(f'{v} {_title(t)}: {got} of {config.seeds} seeds')
  lines += ['## Completeness', '']
  lines += ([f'- missing: {m}' for m in missing] if missing else
            ['Every planned pretraining and fine-tuning run finished.'])
  lines.append('')

  diff_keys = ('diff', 'boot_ci', 't_ci', 'per_seed', 'reliable', 'boot_ci_tost', 't_ci_tost')
  summary = {
      'variants': variants, 'baselines': baselines, 'tasks': tasks,
      'skipped_tasks': {t: why for t, why in skipped},
      'skipped_crossdomain_pairs': {n: why for n, why in skipped_pairs},
      'data': _data_paths(config, workdir, variants),
      'glue': {v: {t: {k: e[k] for k in ('mean', 'std', 'ci', 'per_seed')}
                   for t, e in table[v].items()} for v in rows},
      'majority': {t: e['mean'] for t, e in majority.items() if e},
      'paired_differences': {v: {t: {k: d[k] for k in diff_keys} for t, d in dd.items()}
                             for v, dd in diffs.items()},
      'equivalence_margin_points': float(config.equivalence_margin),
      'tost_confidence': tost_confidence(conf),
      'verdicts': verdicts,
      'pretraining_gains': {t: {k: {**{x: d[x] for x in diff_keys},
                                    'reliably_better': reliably_better(d)}
                                for k, d in e.items()} for t, e in gains.items()},
      'headline': ' '.join(headline(verdicts, gains, base, baselines, margin, avg_tasks)).strip(),
      'pretraining': pretrain, 'parameters': counts, 'fine_tuning_epoch_s': epoch_times,
      'robustness': {t: {v: {k: np.asarray(x).tolist() for k, x in e.items()}
                         for v, e in per_v.items()} for t, per_v in rob.items()},
      'missing': missing,
  }
  return '\n'.join(lines), summary


def _verdict_section(diffs, verdicts, base, keys, margin, conf) -> list[str]:
  tost = tost_confidence(conf)
  pts = f'{100 * margin:g}'
  lines = [f'### Verdict against `{base}`', '',
           f'δ = {pts} point{"" if pts == "1" else "s"} (config.equivalence_margin). '
           f'**better**: the {conf:.0%} paired bootstrap interval and the {conf:.0%} seed t '
           f'interval of (variant − {base}) both lie above 0; **worse**: both below 0; '
           f'otherwise **equivalent within ±δ** when a two one-sided test at '
           f'{1 - conf:.0%} per side passes for both kinds of interval, that is when both '
           f'{tost:.0%} intervals (shown, bootstrap / t) lie strictly inside (−δ, +δ); '
           'otherwise **undecided** (the data cannot tell; more seeds or larger dev sets '
           'would).', '']
  head = ['variant'] + ['average' if t == '_average' else _title(t) for t in keys]
  lines += ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
  for v, dd in diffs.items():
    cells = [v]
    for t in keys:
      d = dd.get(t)
      cells.append('–' if d is None else
                   f'**{verdict_text(verdicts[v][t], margin)}** ({_fmt_ci(d["boot_ci_tost"])} '
                   f'/ {_fmt_ci(d["t_ci_tost"])})')
    lines.append('| ' + ' | '.join(cells) + ' |')
  return lines + ['']


def _gains_section(gains, table, majority, base, baselines, keys, conf) -> list[str]:
  if not gains:
    return []
  lines = [f'### What pretraining buys: `{base}` against the majority class'
           + ''.join(f' and `{b}`' for b in baselines), '',
           f'×100, `{base}` minus the baseline: the point estimate, the {conf:.0%} paired '
           'bootstrap interval over dev examples (the majority class is scored on the same '
           'resamples) and the t interval over seeds (seed-paired for a baseline; the '
           'majority class is one constant). **reliably better**: both intervals above 0.'
           + ''.join(f' `{b}`: the `{base}` architecture and vocabulary fine-tuned from random '
                     'weights with the same recipe, seeds and training examples.'
                     for b in baselines), '',
           f'| task | baseline | {base} | baseline score | difference | {conf:.0%} paired '
           f'bootstrap | {conf:.0%} seed t | reliably better |', '|---|---|---|---|---|---|---|---|']
  for t in keys:
    for k, d in gains.get(t, {}).items():
      other = majority[t] if k == 'majority' else table[k][t]
      lines.append(f'| {"average" if t == "_average" else _title(t)} | {k} | '
                   f'{_pct(table[base][t]["mean"])} | {_pct(other["mean"])} | '
                   f'{100 * d["diff"]:+.1f} | {_fmt_ci(d["boot_ci"])} | {_fmt_ci(d["t_ci"])} | '
                   f'{"yes" if reliably_better(d) else "no"} |')
  return lines + ['', gains_sentence(gains, base, baselines), '']


def _data_paths(config, workdir, variants) -> dict:
  """The corpus and GLUE data as the report shows them (sharedbert.paths: never absolute)."""
  from sharedbert import paths
  glue_dir, tfds_dir = study_plan._glue_source(config)
  return {'corpus': paths.display(study_plan.pretrain_config(config, variants[0]).data.corpus,
                                  workdir=workdir),
          'glue_dir': paths.display(glue_dir or '', workdir=workdir),
          'tfds_data_dir': paths.display(tfds_dir or '', workdir=workdir)}


def _header(config, workdir, variants, baselines, tasks, skipped, skipped_pairs) -> list[str]:
  from sharedbert import crossdomain
  p = study_plan.pretrain_config(config, variants[0])
  g = study_plan.glue_config(config, study_plan.pretrain_dir(workdir, variants[0]), 'all')
  m, o = p.model, p.optim
  data = _data_paths(config, workdir, variants)
  lines = [
      f'Variants: {", ".join(f"`{v}`" for v in variants)}'
      + ''.join(f'; baseline `{b}` (no pretraining)' for b in baselines)
      + f'. Written by `python -m sharedbert.study` (configs/study.py:{config.preset}). Paths '
      'are as given when relative, else relative to the repository root or, as W/..., to '
      'the study\'s workdir.', '',
      '**Recipe (identical for every variant).** '
      f'Pretraining (`{config.pretrain.arg}`): {m.num_layers} layers, width {m.hidden_size}, '
      f'{m.num_heads} heads, FFN {m.mlp_dim}, vocabulary {m.vocab_size} (one sentencepiece '
      f'vocabulary, learned once), {"pre" if m.pre_layer_norm else "post"}-LayerNorm, dropout '
      f'{m.dropout_rate:g}, init std {m.initializer_range:g}; corpus `{data["corpus"]}`; '
      f'{p.total_steps} steps of batch {p.data.batch_size} × {p.data.seq_len} tokens, MLM '
      f'{p.data.mask_rate:.0%}, AdamW lr {o.lr:g} (b2 {o.b2:g}) with {o.warmup_steps} warmup '
      f'steps then linear decay, seed {p.seed}. '
      f'Fine-tuning (sharedbert.finetune): {config.seeds} seeds per task, '
      f'{g.num_epochs} epochs, batch {g.batch_size}, lr {g.optim.lr:g}, warmup '
      f'{g.optim.warmup_fraction:.0%}, sequence length {g.data.seq_len}'
      + (f', at most {g.data.max_train_examples:,} training examples per task (a fixed random '
         'subset, the same for every variant, baseline and seed)'
         if g.data.max_train_examples else '')
      + f'; data {("`" + data["glue_dir"] + "`") if data["glue_dir"] else "tfds glue/*"}. '
      'Scores are on the dev sets, at the last epoch (no selection on dev).'
      + ''.join(f' Baseline `{b}`: the `{study_plan.BASELINES[b]}` model (its config and the '
                'shared vocabulary) fine-tuned from random weights, with the same recipe, seeds and '
                'training examples; it is also scored for robustness and cross-domain '
                'transfer.' for b in baselines), '']
  notes = []
  if not tuple(config.squad.versions):
    notes.append('SQuAD is not part of this preset (no SQuAD data here); its code and tests '
                 'are in sharedbert/squad.py, and the gpu and pod presets run it.')
  auto = study_plan.listed_glue_tasks(config) is None
  notes += [f'GLUE task skipped: {_title(t)}: {why}.' for t, why in skipped]
  skipped_names = {t for t, _ in skipped}
  absent = [t for t in glue.TASKS if t not in tasks and t not in skipped_names]
  if absent:
    why = ('not in the GLUE data' if auto else 'not listed in glue.tasks')
    notes.append(f'GLUE tasks not run: {", ".join(_title(t) for t in absent)} ({why})'
                 + ('; the average below is over the tasks that were run, not GLUE\'s nine.'
                    if any(t not in AVERAGE_EXCLUDES for t in absent) else '.'))
  listed = [crossdomain.get_transfer(n).name for n in config.crossdomain.pairs]
  notes += [f'Cross-domain pair not run: {n}: {why}.' for n, why in skipped_pairs]
  not_listed = [n for n in crossdomain.TRANSFERS if n not in listed]
  if not_listed:
    notes.append(f'Cross-domain pairs not in crossdomain.pairs: {", ".join(not_listed)}; '
                 'the gpu and pod presets run the full matrix from tfds.')
  if notes:
    lines += ['**What this preset covers.**', ''] + [f'- {n}' for n in notes] + ['']
  return lines


def _squad_section(config, workdir, variants) -> list[str]:
  versions = tuple(config.squad.versions)
  if not versions:
    return ['Not run in this preset.', '']
  lines = []
  for version in versions:
    rows = []
    for v in variants:
      files = tf.io.gfile.glob(os.path.join(workdir, 'squad', v, f'v{version}', 'seed_*.json'))
      rs = [_read(f) for f in sorted(files)]
      if not rs:
        rows.append(f'| {v} | – | – |' + (' – | – |' if version == '2.0' else ''))
        continue
      def ms(key):
        m, s = stats.mean_std([r['metrics'][key] for r in rs])
        return f'{m:.1f} ± {s:.1f}'
      row = f'| {v} | {ms("exact")} | {ms("f1")} |'
      if version == '2.0':
        row += f' {ms("HasAns_f1")} | {ms("NoAns_f1")} |'
      rows.append(row)
    head = '| variant | EM | F1 |' + (' HasAns F1 | NoAns F1 |' if version == '2.0' else '')
    lines += [f'**SQuAD v{version}** (dev; official exact match and F1, ×100, mean ± std over '
              'seeds' + ('; no-answer threshold tuned on dev' if version == '2.0' else '') + ')',
              '', head, '|' + '---|' * (head.count('|') - 1)] + rows + ['']
  return lines


def write_report(config, workdir: str, variants) -> str:
  text, summary = build_report(config, workdir, variants)
  path = os.path.join(workdir, 'report.md')
  jsonio.write_text(path, text)
  jsonio.write_json(os.path.join(workdir, 'summary.json'), summary)
  return path
