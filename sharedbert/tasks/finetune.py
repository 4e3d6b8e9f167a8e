"""GLUE fine-tuning and evaluation: `finetune_and_evaluate(config, workdir)`.

The flow, per task: read the examples (a glue_data folder or tfds `glue/<task>`, one
reader in sharedbert/data/glue.py) -> tokenize pairs once with the pretraining run's
vocabulary -> for each seed: a classifier (`BertForSequenceClassification`) whose encoder
is the pretrained `params['bert']` and whose head is fresh -> AdamW with linear warmup and
decay (the pretraining optimizer, sharedbert.optim.make_optimizer) -> dev scores after
every epoch -> test predictions in the GLUE submission format -> bootstrap intervals ->
W/results.json and W/results.md, rewritten after every task.

WORKDIR layout:
  config.json                          the resolved fine-tuning config
  results.json, results.md             all tasks finished so far (see `summarize_task`)
  <task>/seed_<s>/metrics.json         per-epoch log, dev metrics, per-seed interval
  <task>/seed_<s>/dev_predictions.tsv  index, prediction, label (MNLI: dev_matched_..., ...)
  <task>/seed_<s>/<TASK>.tsv           test predictions for the GLUE server (MNLI-m.tsv, ...)
  <task>/seed_<s>/checkpoints/<epoch>/ the fine-tuned classifier (orbax: `params`, and `meta`
                                       with the task, labels, model and dev score), the last
                                       ckpt.max_to_keep epochs (select_best_epoch: the best)
  <task>/seed_<s>/model.json           what the classifier is (read by sharedbert.restore,
                                       sharedbert/runs.py, and sharedbert.convert.hf export)
  <task>/seed_<s>/vocab.model          the vocabulary (or vocab.txt + tokenizer_config.json)

A seed whose metrics.json exists and was made with the same settings is not run again,
so an interrupted `task=all` resumes where it stopped.

Intervals. Per seed: the 95% percentile bootstrap interval of that seed's dev score,
resampling dev examples. Per task (results.md): mean ± sample std over seeds, and the
95% percentile bootstrap interval of the seed mean: each resample draws dev examples with
replacement once and scores every seed on those same examples, then averages. It measures
how much the reported mean depends on which dev examples were drawn; the std measures the
seeds. The GLUE average's interval resamples every task's dev set independently.
"""

from __future__ import annotations

import os
import time

from absl import logging
import flax.linen as nn
import jax
import tensorflow as tf

from sharedbert.config import checks as config_checks
from sharedbert.tasks import glue_report
from sharedbert import sharding
from sharedbert.config import validation
from sharedbert.utils import workdir as workdir_lib
from sharedbert.data import glue
from sharedbert.errors import UserError
from sharedbert.tasks.glue_task import TaskRun
from sharedbert.tasks.pretrained import (PretrainedRun, abstract_encoder, open_pretrained,
                                         restore_encoder_params)


def validate(config):
  """The range of every key (sharedbert/config/validation.py); no file is read.

  Args:
    config: a fine-tuning config (configs/glue.py).
  Raises:
    UserError: the first key out of range.
  Returns:
    None.
  """
  config_checks.finetune(config)


# ---------------------------------------------------------------------------------------
# Tasks and the pretrained run.

def _tfds_has_task(spec, data_dir: str) -> bool:
  """Whether tfds `glue/<task>` can be opened (prepared, or mocked in tests)."""
  import tensorflow_datasets as tfds
  try:
    tfds.builder(spec.tfds_name, data_dir=data_dir or None).as_dataset(split=spec.dev_splits[0])
  except AssertionError:  # tfds' "not prepared".
    return False
  return True


def resolve_tasks(config) -> list[str]:
  """config.task ('cola', 'cola,mrpc' or 'all') as task names, in GLUE's order for 'all'.

  Args:
    config: a fine-tuning config.
  Returns:
    The task names ('all': those found in data.glue_dir, or prepared in tfds).
  """
  d = config.data
  if d.glue_dir and not os.path.isdir(d.glue_dir):
    raise UserError(f'data.glue_dir={d.glue_dir} does not exist; point it at the folder '
                    'holding CoLA/, SST-2/, ... (the glue_data layout)')
  if config.task.strip().lower() == 'all':
    if d.glue_dir:
      found = glue.available_tasks(d.glue_dir)
      where = f'data.glue_dir={d.glue_dir}'
    else:
      found = [n for n, spec in glue.TASKS.items() if _tfds_has_task(spec, d.tfds_data_dir)]
      where = f'tfds data dir {d.tfds_data_dir or "(default)"}'
    if not found:
      raise UserError(f'task=all found no GLUE task in {where}; expected task folders '
                      f'({", ".join(s.glue_dir_name for s in glue.TASKS.values())}) or '
                      'prepared tfds glue/<task> datasets')
    return found
  names = []
  for name in config.task.split(','):
    if name.strip():
      task = glue.get_task(name.strip()).name
      if task not in glue.TASKS:
        raise UserError(f'{name!r} is test-only (no training set); choose a trainable task')
      if task not in names:
        names.append(task)
  if not names:
    raise UserError('config.task is empty; name a GLUE task (cola, sst2, ...) or all')
  return names


# ---------------------------------------------------------------------------------------
# The entry point.

def check_task_data(config, task: str) -> None:
  """Fails on a task whose training or dev data is missing, empty or malformed.

  glue_data files are read whole (a few seconds for the largest) and dropped; a prepared
  tfds dataset is opened and one example read.

  Args:
    config: a fine-tuning config.
    task: a task name.
  Raises:
    UserError: naming the file or dataset and what is wrong.
  Returns:
    None.
  """
  spec = glue.get_task(task)
  d = config.data
  for split in ('train',) + tuple(spec.dev_splits):
    if d.glue_dir:
      examples = glue.read_glue_dir(d.glue_dir, spec, split, skip_malformed=d.skip_malformed)
    else:
      examples = glue.read_tfds(spec, f'{split}[:1]', d.tfds_data_dir or None)
    if not examples:
      raise UserError(f'{spec.name}: the {split} split is empty')
    if split != 'train' and any(ex.label is None for ex in examples):
      raise UserError(f'{spec.name}: the {split} split is unlabeled; the dev sets must carry '
                      'labels')


def preflight(config, workdir: str):
  """Every check a user's mistake can fail, before anything is written or restored:
  the config's values, the mesh, the pretraining workdir (its config, vocabulary and the
  encoder's shapes in its latest checkpoint) and each task's data. Returns (mesh,
  axis_rules, pretrained run, task names).

  Args:
    config: a fine-tuning config.
    workdir: where the run writes.
  Returns:
    (mesh, axis_rules, PretrainedRun, task names).
  """
  validate(config)
  validation.workdir(workdir)
  mesh = sharding.make_mesh(config.mesh)
  axis_rules = sharding.rules(config)
  tasks = resolve_tasks(config)
  pretrained = open_pretrained(config.init_from)
  check_fit(config, pretrained, tasks, mesh)
  for task in tasks:
    check_task_data(config, task)
  if not config.from_scratch:
    target = abstract_encoder(pretrained.model_config, mesh, axis_rules)
    restore_encoder_params(config.init_from, target, metadata_only=True)
  return mesh, axis_rules, pretrained, tasks


def check_fit(config, pretrained: PretrainedRun, tasks, mesh) -> None:
  """That the batch splits over `mesh` and the tasks' inputs fit the pretrained model
  (sequence length, segment ids); the GLUE run's preflight and the study's.

  Args:
    config: a fine-tuning config.
    pretrained: the pretrained run.
    tasks: the task names.
    mesh: the device mesh.
  Raises:
    UserError: what does not fit, and the key to change.
  Returns:
    None.
  """
  dp = sharding.data_parallel_size(mesh)
  if config.batch_size % dp:
    raise UserError(f'batch_size={config.batch_size} is not divisible by the data-parallel '
                    f'size {dp} (mesh.data * mesh.fsdp); choose a multiple of it')
  model_cfg = pretrained.model_config
  if model_cfg.causal and config.pooling == 'cls':
    # [CLS] at position 0 of a causal model attends to itself only: the classifier would see
    # the same vector for every input, so it would predict one class.
    raise UserError(f'config.init_from={config.init_from} is a causal model (each token sees '
                    'only those before it), so its [CLS] output is the same for every input; '
                    'set --config.pooling=mean to pool every token\'s output')
  learned = model_cfg.position_embeddings == 'learned'  # Rotary positions have no table.
  if learned and config.data.seq_len > model_cfg.max_position_embeddings:
    raise UserError(f'data.seq_len={config.data.seq_len} exceeds the pretrained model\'s '
                    f'max_position_embeddings={model_cfg.max_position_embeddings}; '
                    f'data.seq_len must be an integer from 3 to '
                    f'{model_cfg.max_position_embeddings}')
  pairs = [t for t in tasks if glue.get_task(t).is_pair]
  if pairs and model_cfg.type_vocab_size < 2:
    raise UserError(f'{", ".join(pairs)} pair two sentences (segment ids 0 and 1) but the '
                    f'pretrained model has type_vocab_size={model_cfg.type_vocab_size}')


def finetune_and_evaluate(config, workdir: str) -> dict:
  """Fine-tunes and scores every task of `config.task`, with `config.seeds` seeds each.

  Args:
    config: a fine-tuning config (configs/glue.py): init_from, task, seeds, data, optim...
    workdir: where each task's seeds, results.json and results.md go; a rerun reuses the
      seeds already finished with the same settings.
  Returns:
    The content of results.json: per task, every seed's record and the seed means with
    bootstrap intervals; the GLUE average over the tasks that ran.
  """
  workdir = os.fspath(workdir)
  is_chief = jax.process_index() == 0
  mesh, axis_rules, pretrained, tasks = preflight(config, workdir)
  seeds = [config.seed + i for i in range(config.seeds)]
  if is_chief:
    tf.io.gfile.makedirs(workdir)
    workdir_lib.write_config(config, workdir)
  logging.info('Fine-tuning %s attention from %s on %s with seeds %s',
               pretrained.model_config.attention, config.init_from, ', '.join(tasks), seeds)

  source = (f'glue_data folder `{config.data.glue_dir}`' if config.data.glue_dir else
            f'tfds glue/<task> in `{config.data.tfds_data_dir or "(default data dir)"}`')
  results = {
      'init_from': config.init_from, 'pretrained_step': None,
      'from_scratch': bool(config.from_scratch), 'model': pretrained.model_config.to_dict(),
      'seeds': seeds, 'source': source,
      'recipe': {'lr': config.optim.lr, 'num_epochs': config.num_epochs,
                 'batch_size': config.batch_size, 'warmup_fraction': config.optim.warmup_fraction,
                 'weight_decay': config.optim.weight_decay, 'seq_len': config.data.seq_len,
                 'max_train_examples': config.data.max_train_examples,
                 'select_best_epoch': bool(config.eval.select_best_epoch)},
      'eval': {'bootstrap_resamples': config.eval.bootstrap_resamples,
               'confidence': config.eval.confidence,
               'interval': 'percentile bootstrap over dev examples; per seed: that seed\'s '
                           'score; per task: the mean over seeds, all seeds scored on the '
                           'same resample'},
      'scale': 'fractions (results.md shows x100)',
      'tasks': {}, 'glue_average': None,
  }
  encoder_params = None
  if not config.from_scratch:
    # The same encoder for every task: read once, placed as the classifier places it.
    target = abstract_encoder(pretrained.model_config, mesh, axis_rules)
    encoder_params, step = restore_encoder_params(config.init_from, target)
    results['pretrained_step'] = step
    logging.info('Restored the pretrained encoder of step %d from %s', step, config.init_from)
  for task in tasks:
    t0 = time.time()
    run = TaskRun(config, task, pretrained, mesh, axis_rules, encoder_params,
                  results['pretrained_step'], workdir)
    records = []
    # Placement is decided above; the steps trace (and shard activations) under the mesh.
    with jax.set_mesh(mesh), nn.logical_axis_rules(axis_rules):
      for i, seed in enumerate(seeds):
        records.append(run.run_seed(seed, seeds_left=len(seeds) - i - 1, is_chief=is_chief))
    dev = glue_report.summarize_task(run, records, config)
    results['tasks'][task] = {
        'num_train': len(run.train), 'num_train_total': run.num_train_total,
        'padded_length': run.length, 'steps_per_seed': run.total_steps,
        'train_time_s': round(time.time() - t0, 2), 'dev': dev, 'per_seed': records}
    results['glue_average'] = glue_report.glue_average_summary(results['tasks'], config)
    for split, e in dev.items():
      s = e['score']
      logging.info('%s: score %.2f ± %.2f over %d seeds, %d%% CI [%.2f, %.2f] (majority %.2f)',
                   glue_report.score_title(e['score_key']), 100 * s['mean'], 100 * s['std'],
                   len(seeds), round(100 * config.eval.confidence), 100 * s['ci'][0],
                   100 * s['ci'][1],
                   100 * e['majority_baseline'])
    if is_chief:
      glue_report.write_reports(workdir, results)
  if results['glue_average']:
    avg = results['glue_average']
    logging.info('GLUE average over %s: %.2f ± %.2f', ', '.join(avg['covered']),
                 100 * avg['mean'], 100 * avg['std'])
  logging.info('Wrote %s and %s', os.path.join(workdir, glue_report.RESULTS_JSON),
               os.path.join(workdir, glue_report.RESULTS_MD))
  return glue_report.public(results)
