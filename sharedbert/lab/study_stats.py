"""The study's statistics, from its result files (sharedbert.lab.study): GLUE tables with
bootstrap draws, paired differences against `standard`, the verdicts, what pretraining
buys, the robustness table and the headline in words. The conventions are written out in
sharedbert/lab/study_report.py, which turns these into W/report.md."""

from __future__ import annotations

import dataclasses
import os
import zlib

import numpy as np
import tensorflow as tf

from sharedbert.utils import jsonio
from sharedbert.data import glue
from sharedbert.metrics import glue as glue_metrics
from sharedbert.metrics import stats
from sharedbert.lab import study_plan
from sharedbert.models import params as params_lib
from sharedbert.models.bert import ModelConfig

_TITLES = {'cola': 'CoLA', 'sst2': 'SST-2', 'mrpc': 'MRPC', 'stsb': 'STS-B', 'qqp': 'QQP',
           'mnli': 'MNLI-m', 'qnli': 'QNLI', 'rte': 'RTE', 'wnli': 'WNLI'}


def task_title(task: str) -> str:
  return _TITLES.get(task, task)


_read = jsonio.read_json

# Run and shown, but left out of the average and of the headline's counts (the GLUE score of
# Courtois et al., DESIGN.md,
# as sharedbert.metrics.glue.glue_average).
AVERAGE_EXCLUDES = ('wnli',)


t_interval = stats.t_interval


def load_runs(workdir: str, variants, tasks) -> dict:
  """{variant: {task: [results]}} for the finished runs, by (pretraining seed, seed). A row
  fine-tuned from several pretraining seeds (glue.pretrain_seeds) has only those runs; each
  result's 'pretrain_seed' says which (None: the reference run)."""
  out = {}
  for v in variants:
    out[v] = {}
    for t in tasks:
      folder = os.path.join(workdir, 'runs', v, t)
      runs = [dict(_read(f), pretrain_seed=None)
              for f in tf.io.gfile.glob(os.path.join(folder, 'seed_*.json'))]
      by_pretrain_seed = [
          dict(_read(f), pretrain_seed=int(f.split('pretrain_seed_')[-1].split('/')[0]))
          for f in tf.io.gfile.glob(os.path.join(folder, 'pretrain_seed_*', 'seed_*.json'))]
      runs = by_pretrain_seed or runs
      runs.sort(key=lambda r: (r['pretrain_seed'] or 0, r['seed']))
      if runs:
        out[v][t] = runs
  return out


def pretrain_groups(runs: list) -> dict | None:
  """{pretraining seed: its runs} when `runs` come from several pretraining seeds (each
  with the seeds every one of them has), else None."""
  if runs[0].get('pretrain_seed') is None:
    return None
  groups = {}
  for r in runs:
    groups.setdefault(r['pretrain_seed'], []).append(r)
  common = set.intersection(*({r['seed'] for r in g} for g in groups.values()))
  return {p: [r for r in g if r['seed'] in common] for p, g in sorted(groups.items())}


def seed_mean_distribution(task: str, runs: list, resamples: int) -> np.ndarray:
  """Bootstrap draws of the seed-mean score; the same example resamples for every variant.
  Runs from several pretraining seeds are resampled hierarchically (pretraining seed, then
  fine-tuning seed, then dev examples); otherwise the seeds are kept and only the examples
  resampled (the seed spread is reported as the std)."""
  spec = glue.get_task(task)
  labels = np.asarray(runs[0]['labels'], np.float32 if spec.is_regression else np.int64)
  predictions = lambda rs: [np.asarray(r['predictions'], labels.dtype) for r in rs]
  groups = pretrain_groups(runs)
  if groups is not None:
    return stats.bootstrap_hierarchical_mean(
        glue_metrics.task_score_fn(spec), [predictions(g) for g in groups.values()], labels,
        num_resamples=resamples, seed=zlib.crc32(task.encode()))
  return stats.bootstrap_seed_mean(glue_metrics.task_score_fn(spec), predictions(runs), labels,
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
      groups = pretrain_groups(rs)
      if groups is None:
        scores, seeds = [r['score'] for r in rs], [r['seed'] for r in rs]
      else:  # The unit is the pretraining seed: its mean over fine-tuning seeds.
        scores = [float(np.mean([r['score'] for r in g])) for g in groups.values()]
        seeds = list(groups)
      mean, std = stats.mean_std(scores)
      dist = seed_mean_distribution(t, rs, resamples)
      table[v][t] = {'mean': mean, 'std': std, 'per_seed': scores, 'seeds': seeds,
                     'dist': dist, 'pretrain_seeds': len(groups) if groups else 1,
                     'finetune_seeds': (len(next(iter(groups.values()))) if groups
                                        else len(rs)),
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
                 f'{", ".join(task_title(t) for t in avg_tasks)}: ' + '; '.join(calls) + '.')
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
  listed = f' ({", ".join(task_title(t) for t in both)})' if both else ''
  text = (f'Pretrained `{base}` is reliably better than '
          f'{"both " if len(kinds) > 1 else ""}{" and ".join(names[k] for k in kinds)} on '
          f'{len(both)} of {len(tasks)} task{"s" if len(tasks) != 1 else ""}{listed}')
  if len(kinds) > 1:
    text += '; ' + ', '.join(f'than {names[k]} on {len(wins[k])}' for k in kinds)
  if left_out:
    text += f' ({", ".join(task_title(t) for t in left_out)} not counted, as in the average)'
  return text + '.'


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


def epoch_times(runs: dict, variants) -> dict:
  """Seconds per fine-tuning epoch, from epochs after the first (which includes compiling),
  averaged over seeds; the first epoch when there is only one."""
  out = {}
  for v in variants:
    for t, rs in runs[v].items():
      times = [x for r in rs for x in (r['epoch_time_s'][1:] or r['epoch_time_s'])]
      if times:
        out.setdefault(v, {})[t] = float(np.mean(times))
  return out


def param_counts(config, variants) -> dict:
  out = {}
  for v in variants:
    cfg = ModelConfig.from_config(study_plan.pretrain_config(config, v).model)
    out[v] = params_lib.parameter_counts(cfg)
  return out


@dataclasses.dataclass
class Analysis:
  """Everything the report's sections read, computed once from the result files."""
  config: object                 # The study's config.
  workdir: str
  variants: list                 # Pretrained variants; `base` is the one compared against.
  baselines: list                # Rows without pretraining ('none').
  rows: list                     # variants + baselines.
  base: str
  tasks: list                    # GLUE tasks planned; `skipped`: (task, why) not run.
  skipped: list
  skipped_pairs: list            # Cross-domain pairs not run: (name, why).
  conf: float                    # Confidence level of the intervals.
  margin: float                  # The equivalence margin, as a fraction.
  resamples: int
  runs: dict                     # {row: {task: [seed results]}}.
  table: dict                    # glue_tables.
  cols: list                     # Tasks with a result; keys: cols (+ '_average').
  has_avg: bool
  keys: list
  avg_tasks: list
  diffs: dict                    # {variant: {task: paired_difference against base}}.
  verdicts: dict
  gains: dict                    # pretraining_gains and the majority rows.
  majority: dict
  pretrain: dict                 # {variant: study_done.json of its pretraining}.
  counts: dict                   # Parameter counts.
  rob: dict                      # robustness_table.
  epoch_s: dict                  # Seconds per fine-tuning epoch.
  missing: list                  # Runs not finished, in words.


def analyse(config, workdir: str, variants) -> Analysis:
  """Reads the study's result files and computes every table, difference and verdict."""
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
      pretrain[v] = jsonio.read_json(path)
  base = 'standard' if 'standard' in variants else variants[0]
  cols = [t for t in tasks if any(t in table[v] for v in rows)]
  has_avg = any('_average' in table[v] for v in variants)
  keys = cols + (['_average'] if has_avg else [])
  avg_tasks = table[base]['_average']['tasks'] if '_average' in table[base] else []
  diffs = {v: {t: paired_difference(table[v][t], table[base][t], conf) for t in keys
               if t in table[v] and t in table[base]} for v in variants if v != base}
  verdicts = {v: {t: verdict(d, margin) for t, d in dd.items()} for v, dd in diffs.items()}
  gains, majority = pretraining_gains(runs, table, base, baselines, keys, conf, resamples)

  counts = param_counts(config, variants)
  rob = robustness_table(runs, rows, tasks)
  epoch_s = epoch_times(runs, rows)
  missing = []
  for v in rows:
    if v in variants and v not in pretrain:
      missing.append(f'pretraining of {v}')
    for t in tasks:
      got = len(runs[v].get(t, []))
      want = int(config.seeds) * (study_plan.glue_pretrain_seeds(config)
                                  if v in variants else 1)
      if got < want:
        missing.append(f'{v} {task_title(t)}: {got} of {want} fine-tuning runs')
  return Analysis(
      config=config, workdir=workdir, variants=variants, baselines=baselines, rows=rows,
      base=base, tasks=tasks, skipped=skipped, skipped_pairs=skipped_pairs, conf=conf,
      margin=margin, resamples=resamples, runs=runs, table=table, cols=cols, has_avg=has_avg,
      keys=keys, avg_tasks=avg_tasks, diffs=diffs, verdicts=verdicts, gains=gains,
      majority=majority, pretrain=pretrain, counts=counts, rob=rob, epoch_s=epoch_s,
      missing=missing)
