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
    cannot be met on the local data); its interval averages the tasks' bootstrap draws
    (each task's dev set resampled independently).
"""

from __future__ import annotations

import glob
import os
import zlib

import numpy as np

from sharedbert.data import glue
from sharedbert.metrics import glue as glue_metrics
from sharedbert.metrics import stats

_TITLES = {'cola': 'CoLA', 'sst2': 'SST-2', 'mrpc': 'MRPC', 'stsb': 'STS-B', 'qqp': 'QQP',
           'mnli': 'MNLI-m', 'qnli': 'QNLI', 'rte': 'RTE', 'wnli': 'WNLI'}


def _title(task: str) -> str:
  return _TITLES.get(task, task)


def _pct(x) -> str:
  return '–' if x is None or (isinstance(x, float) and np.isnan(x)) else f'{100 * x:.1f}'


def _read(path):
  from sharedbert.study import read_json
  return read_json(path)


t_interval = stats.t_interval  # Kept here too: the study's callers use this name.


# ---------------------------------------------------------------------------------------
# Loading.

def load_runs(workdir: str, variants, tasks) -> dict:
  """{variant: {task: [result of seed 0, 1, ...]}} for the finished runs, by seed."""
  out = {}
  for v in variants:
    out[v] = {}
    for t in tasks:
      files = glob.glob(os.path.join(workdir, 'runs', v, t, 'seed_*.json'))
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


def glue_tables(runs: dict, variants, tasks, confidence: float, resamples: int) -> dict:
  """Per variant and task: mean, std, CI, per-seed scores and bootstrap draws; and averages."""
  table = {}
  for v in variants:
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
  # The average over the tasks every variant finished, with the same seeds.
  common = [t for t in tasks if all(t in table[v] for v in variants)]
  for v in variants:
    if not common:
      break
    n = min(len(table[v][t]['per_seed']) for t in common)
    per_seed = [float(np.mean([table[v][t]['per_seed'][i] for t in common])) for i in range(n)]
    dist = np.mean([table[v][t]['dist'] for t in common], axis=0)
    mean, std = stats.mean_std(per_seed)
    table[v]['_average'] = {'mean': float(np.mean([table[v][t]['mean'] for t in common])),
                            'std': std, 'per_seed': per_seed, 'dist': dist,
                            'ci': stats.percentile_interval(dist, confidence),
                            'seeds': list(range(n)), 'tasks': common}
  return table


def paired_difference(a: dict, b: dict, confidence: float) -> dict:
  """a - b: the point estimate, the paired bootstrap interval and the seed-paired t interval."""
  diff = a['mean'] - b['mean']
  boot = stats.percentile_interval(a['dist'] - b['dist'], confidence)
  by_seed_a = dict(zip(a['seeds'], a['per_seed']))
  by_seed_b = dict(zip(b['seeds'], b['per_seed']))
  shared = sorted(set(by_seed_a) & set(by_seed_b))
  per_seed = [by_seed_a[s] - by_seed_b[s] for s in shared]
  t_low, t_high = t_interval(per_seed, confidence)
  reliable = (boot[0] > 0 or boot[1] < 0) and not np.isnan(t_low) and (t_low > 0 or t_high < 0)
  return {'diff': diff, 'boot_ci': boot, 't_ci': (t_low, t_high), 'per_seed': per_seed,
          'reliable': bool(reliable)}


# ---------------------------------------------------------------------------------------
# Figures (matplotlib, Agg: no display needed).

def _plt():
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  return plt


def plot_pretraining(workdir: str, variants, out_path: str) -> bool:
  from sharedbert.study import pretrain_dir, read_metrics_jsonl
  plt = _plt()
  fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
  any_line = False
  for v in variants:
    lines = read_metrics_jsonl(os.path.join(pretrain_dir(workdir, v), 'metrics.jsonl'))
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
  fig.savefig(out_path, dpi=90)
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
  fig.savefig(out_path, dpi=90)
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
  fig.savefig(out_path, dpi=90)
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
  fig.savefig(out_path, dpi=90)
  plt.close(fig)


# ---------------------------------------------------------------------------------------
# The report.

def _param_counts(config, variants) -> dict:
  from sharedbert import params as params_lib
  from sharedbert.models.bert import ModelConfig
  from sharedbert.study import pretrain_config
  out = {}
  for v in variants:
    cfg = ModelConfig.from_config(pretrain_config(config, v).model)
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


def _fmt_diff(d: dict) -> str:
  mark = ' **reliable**' if d['reliable'] else ''
  t = ('–' if np.isnan(d['t_ci'][0]) else f'[{100 * d["t_ci"][0]:+.1f}, {100 * d["t_ci"][1]:+.1f}]')
  return (f'{100 * d["diff"]:+.1f} [{100 * d["boot_ci"][0]:+.1f}, {100 * d["boot_ci"][1]:+.1f}] '
          f'/ {t}{mark}')


def build_report(config, workdir: str, variants) -> tuple[str, dict]:
  """The report's markdown and a summary dict (also written as W/summary.json)."""
  from sharedbert.study import DONE_FILE, pretrain_dir
  conf = float(config.confidence)
  resamples = int(config.bootstrap_resamples)
  tasks = list(config.glue.tasks)
  runs = load_runs(workdir, variants, tasks)
  table = glue_tables(runs, variants, tasks, conf, resamples)
  pretrain = {}
  for v in variants:
    path = os.path.join(pretrain_dir(workdir, v), DONE_FILE)
    if os.path.isfile(path):
      pretrain[v] = _read(path)
  base = 'standard' if 'standard' in variants else variants[0]
  lines = [f'# Controlled study of attention variants (preset `{config.preset}`)', '']
  lines += _header(config, workdir, variants, runs, tasks)

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
  cols = [t for t in tasks if any(t in table[v] for v in variants)]
  has_avg = any('_average' in table[v] for v in variants)
  head = ['variant'] + [_title(t) for t in cols] + (['average'] if has_avg else [])
  lines += ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
  for v in variants:
    cells = [v]
    for t in cols + (['_average'] if has_avg else []):
      e = table[v].get(t)
      cells.append('–' if e is None else
                   f'{_pct(e["mean"])} ± {_pct(e["std"])} [{_pct(e["ci"][0])}, {_pct(e["ci"][1])}]')
    lines.append('| ' + ' | '.join(cells) + ' |')
  if cols:
    maj = ['majority'] + [_pct(next(table[v][t]['majority'] for v in variants if t in table[v]))
                          for t in cols] + ([''] if has_avg else [])
    lines.append('| ' + ' | '.join(maj) + ' |')
  if has_avg:
    avg_tasks = next(table[v]['_average']['tasks'] for v in variants if '_average' in table[v])
    lines += ['', f'Average: the unweighted mean of the task scores over '
              f'{", ".join(_title(t) for t in avg_tasks)} (not the nine-task GLUE score).']
  seeds_seen = sorted({len(rs) for v in variants for rs in runs[v].values()})
  lines += ['', f'Seeds per cell: {", ".join(map(str, seeds_seen)) or "none"}.', '']

  # Paired differences.
  diffs = {}
  if base in table and len(variants) > 1:
    lines += [f'### Paired differences against `{base}`', '',
              f'×100, variant minus {base}: the point estimate, the {conf:.0%} paired '
              'bootstrap interval over dev examples / the t interval over seed-paired '
              'differences. **reliable**: both intervals exclude 0.', '']
    head = ['variant'] + [_title(t) for t in cols] + (['average'] if has_avg else [])
    lines += ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    for v in variants:
      if v == base:
        continue
      cells = [v]
      for t in cols + (['_average'] if has_avg else []):
        if t in table[v] and t in table[base]:
          d = paired_difference(table[v][t], table[base][t], conf)
          diffs.setdefault(v, {})[t] = d
          cells.append(_fmt_diff(d))
        else:
          cells.append('–')
      lines.append('| ' + ' | '.join(cells) + ' |')
    lines.append('')

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
    plot_glue(table, variants, tasks, os.path.join(workdir, 'glue.png'))
    lines += ['![GLUE dev scores with 95% intervals](glue.png)', '']

  # Robustness.
  rob = robustness_table(runs, variants, tasks)
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
      for v in variants:
        e = per_v.get(v)
        if e is None:
          continue
        cells = [v] + [f'{_pct(m)} ± {_pct(s)}' for m, s in zip(e['mean'], e['std'])]
        cells.append(f'{100 * (e["mean"][-1] - e["mean"][0]):+.1f}')
        lines.append('| ' + ' | '.join(cells) + ' |')
      lines.append('')
    plot_robustness(rob, variants, os.path.join(workdir, 'robustness.png'))
    lines += ['![robustness curves](robustness.png)', '']
  else:
    lines += ['No robustness results yet.', '']

  # Cross-domain.
  lines += ['## Cross-domain transfer', '']
  pairs = list(config.crossdomain.pairs)
  cross = {}
  for v in variants:
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
    for v in variants:
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
  epoch_times = _epoch_times(runs, variants)
  lines += ['## Training time', '',
            'Wall-clock measured in this study, on the same machine, one run at a time. '
            'Pretraining: median seconds per optimizer step over the logged intervals '
            '(compilation excluded). Fine-tuning: seconds per epoch including the dev '
            'evaluation, from epochs after the first (which includes compilation), mean over '
            'seeds. On a shared machine these carry noise from other load.', '']
  tasks_t = [t for t in tasks if any(t in epoch_times.get(v, {}) for v in variants)]
  head = ['variant', 'pretraining ms/step'] + [f'{_title(t)} s/epoch' for t in tasks_t]
  lines += ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
  for v in variants:
    st = pretrain.get(v, {}).get('step_time_median')
    cells = [v, f'{1000 * st:.1f}' if st else '–']
    cells += [f'{epoch_times[v][t]:.1f}' if t in epoch_times.get(v, {}) else '–' for t in tasks_t]
    lines.append('| ' + ' | '.join(cells) + ' |')
  lines.append('')
  if pretrain or epoch_times:
    plot_time(pretrain, epoch_times, variants, os.path.join(workdir, 'time.png'))
    lines += ['![training time](time.png)', '']

  # SQuAD.
  lines += ['## SQuAD', ''] + _squad_section(config, workdir, variants)

  # Missing runs.
  missing = []
  for v in variants:
    if v not in pretrain:
      missing.append(f'pretraining of {v}')
    for t in tasks:
      got = len(runs[v].get(t, []))
      if got < int(config.seeds):
        missing.append(f'{v} {_title(t)}: {got} of {config.seeds} seeds')
  lines += ['## Completeness', '']
  lines += ([f'- missing: {m}' for m in missing] if missing else
            ['Every planned pretraining and fine-tuning run finished.'])
  lines.append('')

  summary = {
      'variants': variants, 'tasks': tasks,
      'glue': {v: {t: {k: e[k] for k in ('mean', 'std', 'ci', 'per_seed')}
                   for t, e in table[v].items()} for v in variants},
      'paired_differences': {v: {t: {k: d[k] for k in ('diff', 'boot_ci', 't_ci', 'per_seed',
                                                       'reliable')}
                                 for t, d in dd.items()} for v, dd in diffs.items()},
      'pretraining': pretrain, 'parameters': counts, 'fine_tuning_epoch_s': epoch_times,
      'robustness': {t: {v: {k: np.asarray(x).tolist() for k, x in e.items()}
                         for v, e in per_v.items()} for t, per_v in rob.items()},
      'missing': missing,
  }
  return '\n'.join(lines), summary


def _header(config, workdir, variants, runs, tasks) -> list[str]:
  from sharedbert.study import glue_config, pretrain_config, pretrain_dir
  p = pretrain_config(config, variants[0])
  g = glue_config(config, pretrain_dir(workdir, variants[0]), 'all')
  m = p.model
  lines = [
      f'Variants: {", ".join(f"`{v}`" for v in variants)}. Written by `python -m '
      f'sharedbert.study` (configs/study.py:{config.preset}).', '',
      '**Recipe (identical for every variant).** '
      f'Pretraining: {m.num_layers} layers, width {m.hidden_size}, {m.num_heads} heads, FFN '
      f'{m.mlp_dim}, vocabulary {m.vocab_size} (one sentencepiece vocabulary, learned once); '
      f'corpus `{p.data.corpus}`; {p.total_steps} steps of batch {p.data.batch_size} × '
      f'{p.data.seq_len} tokens, MLM {p.data.mask_rate:.0%}, AdamW lr {p.optim.lr:g} with '
      f'{p.optim.warmup_steps} warmup steps then linear decay, seed {p.seed}. '
      f'Fine-tuning (sharedbert.finetune): {config.seeds} seeds per task, '
      f'{g.num_epochs} epochs, batch {g.batch_size}, lr {g.optim.lr:g}, warmup '
      f'{g.optim.warmup_fraction:.0%}, sequence length {g.data.seq_len}'
      + (f', at most {g.data.max_train_examples:,} training examples per task (a fixed random '
         'subset, the same for every variant and seed)' if g.data.max_train_examples else '')
      + f'; data {("`" + g.data.glue_dir + "`") if g.data.glue_dir else "tfds glue/*"}. '
      'Scores are on the dev sets, at the last epoch (no selection on dev).', '']
  notes = []
  if not tuple(config.squad.versions):
    notes.append('SQuAD is not part of this preset (no SQuAD data here); its code and tests '
                 'are in sharedbert/squad.py, and the gpu and pod presets run it.')
  absent = [t for t in ('mnli', 'qqp', 'qnli', 'rte') if t not in tasks]
  if absent:
    notes.append(f'GLUE tasks not run: {", ".join(_title(t) for t in absent)} (not in the '
                 'local data); the average below is over the tasks that were run, not GLUE\'s '
                 'nine.')
  pairs = tuple(config.crossdomain.pairs)
  from sharedbert.crossdomain import TRANSFERS
  not_run = [n for n in TRANSFERS if n not in pairs]
  if not_run:
    notes.append(f'Cross-domain pairs not run: {", ".join(not_run)} (their data is not here); '
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
      files = glob.glob(os.path.join(workdir, 'squad', v, f'v{version}', 'seed_*.json'))
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
  from sharedbert.study import write_json
  text, summary = build_report(config, workdir, variants)
  path = os.path.join(workdir, 'report.md')
  tmp = path + '.tmp'
  with open(tmp, 'w', encoding='utf-8') as f:
    f.write(text)
  os.replace(tmp, path)
  write_json(os.path.join(workdir, 'summary.json'), summary)
  return path
