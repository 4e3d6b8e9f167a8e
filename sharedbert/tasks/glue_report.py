"""The GLUE run's report: per task, each metric's mean, std and bootstrap interval over
seeds (`summarize_task`), the GLUE average, and W/results.json and W/results.md
(`write_reports`). The intervals are described in sharedbert/tasks/finetune.py's docstring."""

from __future__ import annotations

import os
import zlib
from typing import Optional

import numpy as np
import tensorflow as tf

from sharedbert.utils import jsonio
from sharedbert.utils import reporting
from sharedbert.data import glue
from sharedbert.metrics import glue as glue_metrics
from sharedbert.metrics import stats

RESULTS_JSON = 'results.json'
RESULTS_MD = 'results.md'


def bootstrap_seed(config, score_key: str) -> int:
  """Independent resamples per task; the same ones for every seed of a task.

  Args:
    config: the fine-tuning config (its seed).
    score_key: the task's score key.
  Returns:
    The bootstrap's seed.
  """
  return (int(config.eval.bootstrap_seed) * 1_000_003 + zlib.crc32(score_key.encode())) % 2**32


duration = reporting.duration  # Used by the task runs' progress lines too.


def summarize_task(run, records: list[dict], config) -> dict:
  """Per dev split: each metric and the task score as mean, std, interval and per-seed values.

  `ci` is the percentile bootstrap interval of the seed mean (module docstring);
  `bootstrap` keeps the resampled seed means of the score for the GLUE average.

  Args:
    run: the task's TaskRun.
    records: each seed's record.
    config: the fine-tuning config.
  Returns:
    The task's entry of results.json.
  """
  spec = run.spec
  c = config.eval
  out = {}
  for split in spec.dev_splits:
    labels = run.features[split].labels
    preds = [r['dev'][split]['predictions'] for r in records]
    key = glue_metrics.score_key(spec, split)
    seed = bootstrap_seed(config, key)
    entry = {'score_key': key, 'n': int(len(labels)), 'metrics': {}}

    def summary(values, fn):
      mean, std = stats.mean_std(values)
      dist = stats.bootstrap_seed_mean(fn, preds, labels, num_resamples=c.bootstrap_resamples,
                                       seed=seed)
      low, high = stats.percentile_interval(dist, c.confidence)
      return {'mean': mean, 'std': std, 'ci': [low, high], 'per_seed': list(values)}, dist

    for name in spec.metric_names:
      entry['metrics'][name], _ = summary(
          [r['dev'][split]['metrics'][name] for r in records], glue_metrics.metric_fn(name))
    entry['score'], dist = summary([r['dev'][split]['score'] for r in records],
                                   glue_metrics.task_score_fn(spec))
    entry['majority_baseline'] = run.majority_baseline(split)
    entry['bootstrap'] = dist
    out[split] = entry
  return out


def glue_average_summary(tasks: dict, config) -> Optional[dict]:
  """The GLUE average (sharedbert.metrics.glue.glue_average) over the finished tasks.

  Args:
    tasks: the tasks' entries.
    config: the fine-tuning config.
  Returns:
    {'mean', 'ci', 'covered', 'missing', ...}, or None when no task is covered.
  """
  means, per_seed, dists = {}, {}, {}
  for task in tasks.values():
    for entry in task['dev'].values():
      means[entry['score_key']] = entry['score']['mean']
      per_seed[entry['score_key']] = entry['score']['per_seed']
      dists[entry['score_key']] = entry['bootstrap']
  mean, covered, missing = glue_metrics.glue_average(means)
  if not covered:
    return None
  num_seeds = min(len(per_seed[k]) for k in covered)
  seed_averages = [glue_metrics.glue_average({k: per_seed[k][i] for k in covered})[0]
                   for i in range(num_seeds)]
  _, std = stats.mean_std(seed_averages)
  dist = np.mean([dists[k] for k in covered], axis=0)
  low, high = stats.percentile_interval(dist, config.eval.confidence)
  return {'mean': mean, 'std': std, 'ci': [low, high], 'per_seed': seed_averages,
          'covered': covered, 'missing': missing,
          'convention': 'mean of the 9 GLUE task scores (WNLI excluded), over the covered ones'}


_TASK_TITLES = {'mnli_m': 'MNLI-m', 'mnli_mm': 'MNLI-mm'}
_METRIC_TITLES = {'mcc': 'MCC', 'accuracy': 'accuracy', 'f1': 'F1', 'pearson': 'Pearson',
                  'spearman': 'Spearman'}


def score_title(score_key: str) -> str:
  """The heading of a score key in results.md: the task's GLUE folder name unless it has a
  title of its own.

  Args:
    score_key: a score key.
  Returns:
    The heading.
  """
  return _TASK_TITLES.get(score_key) or glue.get_task(score_key).glue_dir_name


_pct = reporting.pct


def render_markdown(results: dict) -> str:
  """results.md: the dev figures as a person reads them (×100).

  Args:
    results: the full results.
  Returns:
    The markdown.
  """
  r = results
  m = r['model']
  conf = round(100 * r['eval']['confidence'])
  lines = ['# GLUE dev results', '']
  init = ('randomly initialized (from_scratch: no pretrained weights)' if r['from_scratch']
          else f'pretrained {r["pretrained_step"]} steps')
  lines.append(f'Encoder: `{m["attention"]}` attention, {m["num_layers"]} layers, width '
               f'{m["hidden_size"]}, {m["num_heads"]} heads, vocabulary {m["vocab_size"]}; '
               f'{init} (`{r["init_from"]}`).')
  rec = r['recipe']
  lines.append(
      f'Fine-tuning: {len(r["seeds"])} seeds ({", ".join(map(str, r["seeds"]))}); AdamW lr '
      f'{rec["lr"]:g}, {rec["num_epochs"]} epochs, batch {rec["batch_size"]}, warmup '
      f'{100 * rec["warmup_fraction"]:g}% then linear decay, weight decay {rec["weight_decay"]:g}, '
      f'sequence length {rec["seq_len"]}. Reported epoch: '
      + ('the one with the best dev score, **selected on the dev set reported here '
         '(optimistic)**.' if rec['select_best_epoch'] else 'the last (no selection on dev).'))
  lines.append(f'Data: {r["source"]}.')
  subsets = [f'{glue.get_task(t).glue_dir_name} {v["num_train"]:,} of {v["num_train_total"]:,}'
             for t, v in r['tasks'].items() if v['num_train'] < v['num_train_total']]
  if subsets:
    lines.append(f'Training subsets (data.max_train_examples, a fixed random subset): '
                 f'{"; ".join(subsets)}.')
  lines += ['', f'Dev-set figures ×100. mean ± std: over seeds (sample std). {conf}% CI: '
            f'percentile bootstrap ({r["eval"]["bootstrap_resamples"]} resamples of the dev '
            'examples) of the seed mean, every seed scored on the same resample. Majority: '
            'the score of always predicting the most frequent training label (STS-B: the '
            'mean score).', '',
            f'| task | n dev | metric | mean ± std | {conf}% CI | per seed | majority |',
            '|---|---|---|---|---|---|---|']
  for task, v in r['tasks'].items():
    spec = glue.get_task(task)
    for split, e in v['dev'].items():
      title = score_title(e['score_key'])
      rows = [(_METRIC_TITLES[n], e['metrics'][n]) for n in spec.metric_names]
      if len(spec.metric_names) > 1:
        rows.append((f'score ({"+".join(_METRIC_TITLES[n] for n in spec.metric_names)})/2',
                     e['score']))
      for i, (name, s) in enumerate(rows):
        first = i == 0
        lines.append(
            f'| {title if first else ""} | {e["n"] if first else ""} | {name} | '
            f'{_pct(s["mean"])} ± {_pct(s["std"])} | [{_pct(s["ci"][0])}, {_pct(s["ci"][1])}] | '
            f'{", ".join(_pct(x) for x in s["per_seed"])} | '
            f'{_pct(e["majority_baseline"]) if i == len(rows) - 1 else ""} |')
  avg = r.get('glue_average')
  lines.append('')
  if avg:
    covered = ', '.join(score_title(k) for k in avg['covered'])
    missing = ', '.join(score_title(k) for k in avg['missing']) or 'none'
    lines.append(
        f'**GLUE average** over {len(avg["covered"])} of 9 task scores ({covered}; missing: '
        f'{missing}; WNLI is never averaged): **{_pct(avg["mean"])} ± {_pct(avg["std"])}** '
        f'(std over seeds of the per-seed average), {conf}% CI [{_pct(avg["ci"][0])}, '
        f'{_pct(avg["ci"][1])}] (every task\'s dev set resampled independently). Per seed: '
        f'{", ".join(_pct(x) for x in avg["per_seed"])}.')
  else:
    lines.append('No GLUE average: none of the averaged tasks (all but WNLI) was run.')
  times = ', '.join(f'{glue.get_task(t).glue_dir_name} {duration(v["train_time_s"])}'
                    for t, v in r['tasks'].items())
  lines += ['', f'Fine-tuning time (all seeds, including compilation): {times}.', '']
  return '\n'.join(lines)


def public(results: dict) -> dict:
  """results.json: everything but the bootstrap samples and the prediction arrays.

  Args:
    results: the full results.
  Returns:
    A copy without them.
  """
  out = dict(results)
  out['tasks'] = {}
  for task, v in results['tasks'].items():
    v = dict(v)
    v['dev'] = {s: {k: x for k, x in e.items() if k != 'bootstrap'} for s, e in v['dev'].items()}
    v['per_seed'] = [{k: x for k, x in rec.items() if k not in ('fingerprint',)}
                     | {'dev': {s: {k: x for k, x in d.items() if k != 'predictions'}
                                for s, d in rec['dev'].items()}} for rec in v['per_seed']]
    out['tasks'][task] = v
  return out


def write_reports(workdir: str, results: dict):
  """Writes results.json and results.md of `results` into `workdir`.

  Args:
    workdir: the fine-tuning workdir.
    results: the full results.
  Returns:
    None.
  """
  jsonio.write_json(os.path.join(workdir, RESULTS_JSON), public(results), indent=2)
  with tf.io.gfile.GFile(os.path.join(workdir, RESULTS_MD), 'w') as f:
    f.write(render_markdown(results))
