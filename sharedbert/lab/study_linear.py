"""The study's linear probes: every pretraining seed of every variant, frozen, probed on the
GLUE tasks (sharedbert.evaluators.linear_probe), beside `none`: the same architecture as
`standard` at the same seed, untrained.

Results: W/linear/<row>/<task>/seed_<s>.json (its presence = finished). The intervals are t
intervals over pretraining seeds (seed s of a variant paired with seed s of `standard`):
the probe itself is deterministic, so the pretraining seed is the level that varies.
"""

from __future__ import annotations

import dataclasses
import os

from absl import logging
import numpy as np
import flax.linen as nn
import jax

from sharedbert.metrics import stats
from sharedbert.utils import jsonio
from sharedbert.utils import reporting
from sharedbert import sharding
from sharedbert.data import glue
from sharedbert.evaluators import common as evaluators_lib
from sharedbert.lab import study_plan
from sharedbert.lab import study_pretrain
from sharedbert.lab.study_stats import AVERAGE_EXCLUDES, task_title
from sharedbert.models import bert as bert_lib
from sharedbert.tasks import engine
from sharedbert.tasks import glue_task
from sharedbert.tasks import pretrained as pretrained_lib

NONE = 'none'


def result_file(workdir: str, row: str, task: str, seed: int) -> str:
  return os.path.join(workdir, 'linear', row, task, f'seed_{seed}.json')


def tasks_of(config, glue_tasks) -> list[str]:
  value = config.linear_probe.tasks
  if value == 'auto':
    return list(glue_tasks)
  return [t.strip() for t in (value.split(',') if isinstance(value, str) else value) if t.strip()]


def _runs(config, workdir: str, variants) -> dict:
  """{(row, seed): (pretraining run dir or None for `none`, its Run)} for finished runs."""
  results = study_pretrain.load_results(config, workdir, variants)
  chosen = study_pretrain.choose(config, variants, results)
  out = {}
  for s in range(int(config.pretrain.seeds)):
    for v in variants:
      run = dataclasses.replace(chosen[v], seed=s)
      if run in results:
        out[(v, s)] = (study_pretrain.run_dir(config, workdir, run), run)
    if 'standard' in variants:
      out[(NONE, s)] = (None, dataclasses.replace(chosen['standard'], seed=s))
  return out


def run_all(config, workdir: str, variants, glue_tasks) -> None:
  """Probes every finished pretraining seed (and `none`) on every task not probed yet."""
  tasks = tasks_of(config, glue_tasks)
  if not tasks:
    return
  lp = config.linear_probe
  g = study_plan.glue_config(config, '', tasks[0]).data
  runs = _runs(config, workdir, variants)
  todo = {key: [t for t in tasks if not os.path.exists(result_file(workdir, key[0], t, key[1]))]
          for key in runs}
  todo = {k: ts for k, ts in todo.items() if ts}
  if not todo:
    return
  first = study_plan.pretrain_dir(workdir, variants[0])
  tokenizer = pretrained_lib.open_pretrained(first).tokenizer
  features = {}
  for task in sorted({t for ts in todo.values() for t in ts}):
    spec = glue.get_task(task)
    load = lambda split: glue.load_examples(spec, split, glue_dir=g.glue_dir or None,
                                            tfds_data_dir=g.tfds_data_dir or None)
    train = engine.subset(load('train'), int(lp.max_train_examples))
    dev = load(spec.dev_splits[0])
    features[task] = (glue_task.featurize(train, tokenizer, int(lp.seq_len), spec),
                      glue_task.featurize(dev, tokenizer, int(lp.seq_len), spec))
  for (row, seed), tasks_left in sorted(todo.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    folder, run = runs[(row, seed)]
    cfg = study_pretrain.run_config(config, run)
    model_cfg = bert_lib.ModelConfig.from_config(cfg.model)
    if folder is None:  # `none`: the encoder as initialised for this seed.
      z = np.zeros((1, 8), np.int32)
      params = nn.unbox(bert_lib.BertEncoder(model_cfg).init(
          jax.random.key(seed), z, z, np.ones_like(z))['params'])
    else:
      target = pretrained_lib.abstract_encoder(model_cfg, sharding.make_mesh(cfg.mesh),
                                         sharding.rules(cfg))
      params, _ = pretrained_lib.restore_encoder_params(folder, target)
    encoder = pretrained_lib.PretrainedRun(folder or '', model_cfg, tokenizer)
    for task in tasks_left:
      spec = glue.get_task(task)
      train, dev = features[task]
      view = evaluators_lib.EncoderRun(encoder, spec, {'train': train, spec.dev_splits[0]: dev})
      result = evaluators_lib.from_config('linear_probe', view).run({'bert': params})
      result.update(row=row, task=task, seed=seed, width=run.width, lr=run.lr, init=run.init)
      jsonio.write_json(result_file(workdir, row, task, seed), result)
      logging.info('study: linear probe %s seed %d %s: %.4f', row, seed, task, result['score'])


def analyse(config, workdir: str, variants, glue_tasks) -> dict:
  """{'tasks', 'rows': {row: {task or '_average': {'mean', 'std', 'per_seed'}}},
  'vs_standard': {row: {task: {'diff', 'ci', 'seeds'}}}}."""
  tasks = tasks_of(config, glue_tasks)
  rows = list(variants) + ([NONE] if 'standard' in variants else [])
  seeds = range(int(config.pretrain.seeds))
  scores = {r: {t: {s: jsonio.read_json(result_file(workdir, r, t, s))['score']
                    for s in seeds if os.path.exists(result_file(workdir, r, t, s))}
                for t in tasks} for r in rows}
  # The average over tasks, for the seeds that have every task; WNLI left out, as in the
  # fine-tuning average (study_stats.AVERAGE_EXCLUDES): one meaning of "average".
  averaged = [t for t in tasks if t not in AVERAGE_EXCLUDES]
  for r in rows:
    common = [s for s in seeds if averaged and all(s in scores[r][t] for t in averaged)]
    scores[r]['_average'] = {s: float(np.mean([scores[r][t][s] for t in averaged]))
                             for s in common}
  out = {'tasks': tasks, 'averaged_tasks': averaged, 'rows': {}, 'vs_standard': {}}
  for r in rows:
    out['rows'][r] = {}
    for t, by_seed in scores[r].items():
      if by_seed:
        mean, std = stats.mean_std(list(by_seed.values()))
        out['rows'][r][t] = {'mean': mean, 'std': std,
                             'per_seed': {str(s): x for s, x in by_seed.items()}}
  if 'standard' in rows:
    for r in rows:
      if r == 'standard':
        continue
      out['vs_standard'][r] = {}
      for t in list(tasks) + ['_average']:
        common = [s for s in seeds if s in scores[r][t] and s in scores['standard'][t]]
        if len(common) < 2:
          continue
        d = [scores[r][t][s] - scores['standard'][t][s] for s in common]
        low, high = stats.t_interval(d, 0.95)
        out['vs_standard'][r][t] = {'diff': float(np.mean(d)), 'ci': [low, high],
                                    'seeds': len(d)}
  return out


def section(a: dict) -> list[str]:
  """The report's linear-probe table and its sentence."""
  if not a['tasks'] or not any(a['rows'].values()):
    return []
  cols = list(a['tasks']) + ['_average']
  head = ['row'] + [task_title(t) if t != '_average' else 'average' for t in cols]
  rows = []
  for r, per in a['rows'].items():
    rows.append([f'`{r}`'] + [f'{100 * per[t]["mean"]:.1f} ± {100 * per[t]["std"]:.1f}'
                              if t in per else '–' for t in cols])
  for r, per in a['vs_standard'].items():
    rows.append([f'`{r}` − `standard`'] + [
        f'{100 * per[t]["diff"]:+.1f} [{100 * per[t]["ci"][0]:+.1f}, {100 * per[t]["ci"][1]:+.1f}]'
        if t in per else '–' for t in cols])
  lines = ['## GLUE by linear probes on frozen encoders', '', *reporting.md_table(head, rows), '']
  none = a['vs_standard'].get(NONE, {}).get('_average')
  text = ('Dev scores ×100 (mean ± std over pretraining seeds) of a ridge regression on each '
          'frozen encoder\'s mean-pooled final hidden states (sharedbert.evaluators.'
          'linear_probe); differences with their 95% t interval over pretraining seeds, '
          'seed-paired. `none` is the `standard` architecture as initialised, untrained. '
          f'Average: over {", ".join(task_title(t) for t in a.get("averaged_tasks", a["tasks"]))}'
          + (' (WNLI left out, as in the fine-tuning average).' if 'wnli' in a['tasks'] else '.'))
  if none:
    lo, hi = none['ci']
    if hi < 0:
      text += (' Pretrained `standard` is reliably above `none` on the average '
               f'({-100 * none["diff"]:+.1f} points): the probes see what pretraining learned.')
    else:
      text += (' Pretrained `standard` is not reliably above `none` on the average '
               f'(`none` − `standard` {100 * none["diff"]:+.1f} [{100 * lo:+.1f}, '
               f'{100 * hi:+.1f}]): at this compute the probes do not see pretraining either.')
  return lines + [text, '']
