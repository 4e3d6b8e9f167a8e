r"""The controlled study: every variant under one recipe, read from one report.

  python -m sharedbert.lab.study --config=configs/study.py:cpu --workdir=W
  python -m sharedbert.lab.study --config=configs/study.py:cpu --workdir=W --report_only
  python -m sharedbert.lab.study --config=configs/study.py:cpu_rotary,data=DATA --workdir=W \
      --archive=docs/study_cpu_rotary/runs

Stages, in order (configs/study.py describes every key):
  1. pretraining: each variant from configs/<variant>_base.py:<pretrain.arg> with the
     same overrides; the first variant learns the vocabulary and every other variant
     reuses that file, so all see the same token ids, rows, masks and batch order.
  2. GLUE: sharedbert.tasks.finetune (its TaskRun, one per variant and task, and its run_seed)
     with configs/glue.py plus `glue.override`, seeds 0..seeds-1, on `glue.tasks` (or, with
     'auto', every task of the glue_data folder with a train.tsv and its dev file(s)).
     Then each baseline of `baselines`: 'none' is the `standard` architecture (its
     config.json and the shared vocabulary) fine-tuned from random weights, the same way.
  3. robustness (sharedbert.evaluators.robustness) and cross-domain transfer
     (sharedbert.evaluators.crossdomain)
     on each fine-tuned model, right after it is trained (fine-tuned weights are not kept).
  4. SQuAD (sharedbert.tasks.squad), when squad.versions is set.
  5. W/report.md, W/summary.json and W/*.png (sharedbert.lab.study_report), with the verdict
     of every variant against `standard` and what pretraining buys.

Workdir layout:
  config.json                                the study config
  pretrain/<variant>/                        a sharedbert.train workdir; study_done.json when
                                             finished
  glue/<variant>/<task>/seed_<s>/            sharedbert.tasks.finetune's per-seed files
                                             (metrics.json, dev predictions)
  glue/none/, runs/none/                     the same for the `none` baseline (no pretrain/none)
  runs/<variant>/<task>/seed_<s>.json        one fine-tuned model: GLUE dev record, robustness,
                                             cross-domain, timings (its presence = finished)
  squad/<variant>/v<version>/seed_<s>.json   SQuAD results
  report.md, *.png

A killed study resumes with the same command: finished pretraining runs and every run
whose result file exists are skipped (result files are written to a temporary name and
renamed). Fine-tuning a seed is redone if its result file is missing, so robustness and
cross-domain always see the weights the GLUE figures came from.
"""

from __future__ import annotations

import json
import os
import time

from absl import app
from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf
import flax.linen as nn
import jax
from ml_collections import config_flags

from sharedbert.utils import jsonio
from sharedbert.utils import paths
from sharedbert.errors import UserError, one_line_errors
# The plan (configs, tasks, baselines, result paths) lives in study_plan, which the report
# reads too.
from sharedbert.lab.study_plan import (glue_config, pretrain_config, pretrain_dir,
                                       resolve_glue_tasks, rows_of, run_file, variants_of,
                                       _glue_source, _transfers_from)
from sharedbert import sharding
from sharedbert import train as train_lib
from sharedbert.config import checks as config_checks
from sharedbert.config import validation
from sharedbert.data import sources
from sharedbert.evaluators import common as evaluators_lib
from sharedbert.lab import study_linear
from sharedbert.lab import study_archive
from sharedbert.lab import study_long
from sharedbert.lab import study_long_report
from sharedbert.lab import study_rotary
from sharedbert.lab import study_rotary_report
from sharedbert.lab import study_plan
from sharedbert.lab import study_pretrain
from sharedbert.lab import study_report
from sharedbert.tasks import finetune
from sharedbert.tasks import glue_seeds
from sharedbert.tasks import glue_task
from sharedbert.tasks import pretrained as pretrained_lib
from sharedbert.tasks import squad

FLAGS = flags.FLAGS

write_json = jsonio.write_json
read_json = jsonio.read_json


# ---------------------------------------------------------------------------------------
# Stage 1: pretraining.

# How a study is given its corpus (configs/study.py), named in corpus errors' hints.
STUDY_CORPUS_KEY = 'corpus= after the preset (e.g. configs/study.py:cpu,corpus=PATH)'


def run_pretraining(config, workdir: str, variants: list[str]) -> dict:
  """Every pretraining arm (sharedbert.lab.study_pretrain): the reference run of each
  variant, the learning-rate sweep, the inits, the seeds and the widths; returns the
  reference runs' summaries."""
  results = study_pretrain.run_all(config, workdir, variants)
  return {v: results[study_pretrain.reference(config, v)] for v in variants}


# ---------------------------------------------------------------------------------------
# Stages 2 and 3: GLUE fine-tuning, robustness and cross-domain per fine-tuned model.

def traced_task_run(base_cls):
  """A glue_task.TaskRun subclass that keeps the params of each seed's last dev evaluation."""
  class TracedTaskRun(base_cls):
    last_params = None

    def evaluate_dev(self, params, label=None):
      # Called after every epoch with the current params; the last call's are the final
      # weights (the study reports the last epoch). Nothing donates them after that.
      self.last_params = params
      return super().evaluate_dev(params, label)
  return TracedTaskRun


def run_glue_task(config, workdir: str, variant: str, task: str, sources) -> None:
  """Fine-tunes `variant` on `task` from each of `sources` ([(pretraining seed or None,
  pretraining workdir)], study_pretrain.glue_sources) for every seed whose result file is
  missing; with the first source, each baseline of its architecture from random weights,
  on the same TaskRun: the same training examples and batches, the same compiled steps."""
  for i, (pretrain_seed, init_from) in enumerate(sources):
    rows = rows_of(config, variant) if i == 0 else [variant]
    _run_glue_source(config, workdir, variant, task, rows, init_from, pretrain_seed)


def _run_glue_source(config, workdir: str, variant: str, task: str, rows, init_from: str,
                     pretrain_seed) -> None:
  seeds = list(range(int(config.seeds)))
  # Baselines do not depend on the pretraining seed: one set of runs, at the plain path.
  file_of = lambda row, seed: run_file(workdir, row, task, seed,
                                       pretrain_seed if row == variant else None)
  todo = {row: [s for s in seeds if not tf.io.gfile.exists(file_of(row, s))] for row in rows}
  where = '' if pretrain_seed is None else f' (pretraining seed {pretrain_seed})'
  if not any(todo.values()):
    logging.info('study: %s %s%s: all %d seeds finished', '/'.join(rows), task, where,
                 len(seeds))
    return

  cfg = glue_config(config, init_from, task)
  finetune.validate(cfg)
  mesh = sharding.make_mesh(cfg.mesh)
  axis_rules = sharding.rules(cfg)
  pretrained = pretrained_lib.open_pretrained(init_from)
  finetune.check_fit(cfg, pretrained, [task], mesh)  # As the GLUE run's preflight.
  target = pretrained_lib.abstract_encoder(pretrained.model_config, mesh, axis_rules)
  encoder_params, step = pretrained_lib.restore_encoder_params(init_from, target)
  t0 = time.time()
  out = variant if pretrain_seed is None else os.path.join(variant,
                                                           f'pretrain_seed_{pretrain_seed}')
  run = traced_task_run(glue_task.TaskRun)(cfg, task, pretrained, mesh, axis_rules,
                                          encoder_params, step, _glue_dir(workdir, out))
  setup_s = time.time() - t0
  evaluators = _evaluators(config, run, task)
  with jax.set_mesh(mesh), nn.logical_axis_rules(axis_rules):
    for row in rows:
      if not todo[row]:
        continue
      row_run = run
      if row != variant:
        # A baseline: this architecture and vocabulary, random weights; nothing else changes.
        row_run = run.from_scratch(glue_config(config, init_from, task, from_scratch=True),
                                   _glue_dir(workdir, row))
      for i, seed in enumerate(todo[row]):
        result = _run_seed(row_run, seed, len(todo[row]) - i - 1, evaluators)
        result.update(variant=row, task=task, setup_s=round(setup_s, 2),
                      pretrain_seed=pretrain_seed if row == variant else None,
                      init_from=paths.display(init_from))
        write_json(file_of(row, seed), result)
        logging.info('study: %s %s%s seed %d: dev score %.4f%s', row, task,
                     where if row == variant else '', seed,
                     result['score'], ''.join(f'; {k} {v["score"]:.4f}'
                                              for k, v in result['crossdomain'].items()))


def _glue_dir(workdir: str, row: str) -> str:
  path = os.path.join(workdir, 'glue', row)
  tf.io.gfile.makedirs(path)
  return path


def _evaluators(config, run, task: str) -> dict:
  """What each fine-tuned model of `run` is scored on besides GLUE, by name
  (sharedbert/evaluators/common.py): the noisy dev set (robustness.tasks) and the
  cross-domain targets whose source is `task`."""
  rob, cross = config.robustness, config.crossdomain
  glue_dir, tfds_dir = _glue_source(config)
  return {
      'robustness': evaluators_lib.from_config(
          'robustness', run, levels=list(rob.levels), noise_seeds=int(rob.noise_seeds),
          eval_batch_size=int(rob.eval_batch_size), tasks=tuple(rob.tasks)),
      'crossdomain': evaluators_lib.from_config(
          'crossdomain', run, pairs=[t.name for t in _transfers_from(config, task)],
          glue_dir=glue_dir or '', tfds_data_dir=cross.tfds_data_dir or tfds_dir or '',
          max_target_examples=int(cross.max_target_examples),
          stsb_threshold=float(cross.stsb_threshold))}


def _run_seed(run, seed: int, seeds_left: int, evaluators: dict) -> dict:
  """Fine-tunes one seed and scores the final weights: the study's result record."""
  # A missing result file means this seed's weights are gone: fine-tune it again.
  seed_metrics = os.path.join(run.seed_dir(seed), glue_seeds.SEED_METRICS)
  if tf.io.gfile.exists(seed_metrics):
    tf.io.gfile.remove(seed_metrics)
  run.last_params = None
  t_seed = time.time()
  record = run.run_seed(seed, seeds_left=seeds_left, is_chief=True)
  finetune_s = time.time() - t_seed
  params, run.last_params = run.last_params, None
  if params is None:
    raise RuntimeError('glue_task.TaskRun.run_seed did not evaluate the dev set')
  dev_split = run.spec.dev_splits[0]
  dev = record['dev'][dev_split]
  result = {
      'seed': seed, 'dev_split': dev_split, 'score': dev['score'], 'metrics': dev['metrics'],
      'score_ci': dev['score_ci'], 'predictions': np.asarray(dev['predictions']).tolist(),
      'labels': np.asarray(run.features[dev_split].labels).tolist(),
      'majority_baseline': run.majority_baseline(dev_split),
      'majority_prediction': run.majority_prediction(),
      'from_scratch': bool(run.config.from_scratch),
      'num_train': len(run.train), 'num_train_total': run.num_train_total,
      'num_epochs': int(run.config.num_epochs), 'steps': record['steps'],
      'epoch_time_s': [e['time_s'] for e in record['epochs']],
      'finetune_wall_s': round(finetune_s, 2), 'pretrained_step': run.pretrained_step,
  }
  for name, evaluator in evaluators.items():
    out = evaluator.run(params)
    if out is not None:
      result[name] = out
  return result


def run_glue(config, workdir: str, variants: list[str], tasks: list[str]) -> None:
  sources = study_pretrain.glue_sources(config, workdir, variants)
  for task in tasks:
    for variant in variants:
      # And the baselines of its architecture.
      run_glue_task(config, workdir, variant, task, sources[variant])


# ---------------------------------------------------------------------------------------
# Stage 4: SQuAD.

def run_squad(config, workdir: str, variants: list[str]) -> None:
  versions = tuple(config.squad.versions)
  if not versions:
    return
  for version in versions:
    for variant in variants:
      for seed in range(int(config.seeds)):
        path = os.path.join(workdir, 'squad', variant, f'v{version}', f'seed_{seed}.json')
        if tf.io.gfile.exists(path):
          continue
        result = squad.finetune_and_evaluate(
            config.squad, version=version, init_from=pretrain_dir(workdir, variant), seed=seed,
            workdir=os.path.dirname(path))
        write_json(path, result)


# ---------------------------------------------------------------------------------------
# The whole study.

def write_study_config(config, workdir: str) -> None:
  tf.io.gfile.makedirs(workdir)
  path = os.path.join(workdir, 'config.json')
  new = json.loads(config.to_json_best_effort())
  if tf.io.gfile.exists(path):
    old = read_json(path)
    changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k)
                     and k not in ('report_only',))
    if changed:
      logging.warning('study: the config differs from the one in %s in %s; finished runs '
                      'are kept as they are', path, ', '.join(changed))
  write_json(path, new)


def _check_arms(config, variants: list[str]) -> None:
  """Every pretraining arm's run config (its rate, seed, width, init) checked like any
  pretraining run, and the arms' variant names."""
  known = study_pretrain.attention_variants()
  if config.pretrain.init_variant not in known:
    raise UserError(f'pretrain.init_variant={config.pretrain.init_variant!r} is not a '
                    f'variant; known: {", ".join(known)}')
  unknown = [v for v in config.pretrain.scaling_variants if v not in known]
  if unknown:
    raise UserError(f'pretrain.scaling_variants lists {unknown}, not variants')
  references = {v: study_pretrain.reference(config, v) for v in variants}
  for run in (study_pretrain.phase_a(config, variants)
              + study_pretrain.phase_b(config, variants, references)):
    config_checks.pretrain(study_pretrain.run_config(config, run))


def preflight(config, workdir: str, variants: list[str]) -> None:
  """What a user's mistake can fail, checked before the study writes anything: every
  value (sharedbert/config/validation.py), the workdir, the mesh and corpus of the pretraining
  runs, and the GLUE data of every task."""
  if not pretrain_config(config, variants[0]).data.corpus:
    raise UserError(f'the {config.preset} study has no data: give it the folder holding '
                    f'corpus/ and glue/, --config=configs/study.py:{config.preset},data=DIR '
                    '(or corpus=PATH for the pretraining text alone)')
  study_plan.check_config(config)
  _check_arms(config, variants)
  validation.workdir(workdir)
  try:
    train_lib.preflight(pretrain_config(config, variants[0]))
  except sources.CorpusError as e:  # The study takes its corpus after the preset's colon.
    raise UserError(str(e).replace(sources.CORPUS_KEY, STUDY_CORPUS_KEY)) from e
  tasks, _ = resolve_glue_tasks(config)
  for task in tasks:
    cfg = glue_config(config, pretrain_dir(workdir, variants[0]), task)
    for name in finetune.resolve_tasks(cfg):
      finetune.check_task_data(cfg, name)


def run_study(config, workdir: str, *, report_only: bool = False,
              archive: str | None = None) -> str:
  """Runs (or resumes) every stage, then writes W/report.md; returns its path. `archive`
  (the rotary study only; see study_archive.py) keeps finished runs beyond this machine."""
  workdir = os.fspath(workdir)
  if '://' not in workdir:
    workdir = os.path.abspath(workdir)
  if archive and config.get('design') != 'rotary':
    raise UserError('--archive keeps only the runs\' done files, and this study reopens '
                    'its runs\' checkpoints: it is for the rotary study '
                    '(configs/study.py:cpu_rotary)')
  if config.get('design') == 'long':
    return run_long_study(config, workdir, report_only=report_only)
  if config.get('design') == 'rotary':
    return run_rotary_study(config, workdir, report_only=report_only, archive=archive)
  variants = variants_of(config)
  if not report_only:
    preflight(config, workdir, variants)
    write_study_config(config, workdir)
    tasks, skipped = resolve_glue_tasks(config)
    for task, why in skipped:
      logging.warning('study: skipping GLUE task %s: %s', task, why)
    t0 = time.time()
    run_pretraining(config, workdir, variants)
    logging.info('study: pretraining done (%.0fs)', time.time() - t0)
    study_linear.run_all(config, workdir, variants, tasks)
    logging.info('study: linear probes done (%.0fs)', time.time() - t0)
    run_glue(config, workdir, variants, tasks)
    run_squad(config, workdir, variants)
    logging.info('study: all runs done (%.0fs)', time.time() - t0)
  path = study_report.write_report(config, workdir, variants)
  logging.info('study: wrote %s', path)
  return path


def long_preflight(config, workdir: str) -> None:
  """The long study's checks before it writes anything: every run config the plan can ask
  for, the selection seed apart from the verdict seeds, the workdir and the corpus."""
  L = config.long
  if not pretrain_config(config, study_long.BASE).data.corpus:
    raise UserError(f'the {config.preset} study has no data: give it the folder holding '
                    f'corpus/, --config=configs/study.py:{config.preset},data=DIR (or '
                    'corpus=PATH)')
  known = study_long.attention_variants()
  for key in ('horizon_variants', 'factorial_variants', 'equal_flops_variants'):
    unknown = [v for v in L[key] if v not in known]
    if unknown:
      raise UserError(f'long.{key} lists {unknown}, not variants; known: {", ".join(known)}')
  for key in ('horizon_variants', 'factorial_variants'):
    if study_long.BASE not in L[key]:
      raise UserError(f'long.{key} must include {study_long.BASE!r}: every verdict is '
                      'against it')
  if int(L.factorial_steps) <= 0 or not L.horizons or min(L.horizons) <= 0:
    raise UserError('long.horizons and long.factorial_steps must be positive step counts')
  if int(L.selection_seed) < max(int(L.seeds), int(L.longest_seeds)):
    raise UserError(f'long.selection_seed={L.selection_seed} is a verdict seed (they are '
                    f'0..{max(int(L.seeds), int(L.longest_seeds)) - 1}); choose a larger one')
  if min(int(L.seeds), int(L.longest_seeds)) < 2:
    raise UserError('long.seeds and long.longest_seeds must be at least 2 (a paired '
                    'interval needs two seeds)')
  if not L.lrs or min(L.lrs) <= 0:
    raise UserError('long.lrs must list positive learning rates')
  _check_runs_and_data(config, workdir, [study_long.run_config(config, run)
                                          for run in study_long.every_run(config)])


def _check_runs_and_data(config, workdir: str, run_configs) -> None:
  """What the long and rotary studies check alike: every run config the plan can ask for,
  the workdir, and the corpus (named by the study's own key when it is wrong)."""
  for cfg in run_configs:
    config_checks.pretrain(cfg)
  validation.workdir(workdir)
  try:
    train_lib.preflight(pretrain_config(config, study_long.BASE))
  except sources.CorpusError as e:
    raise UserError(str(e).replace(sources.CORPUS_KEY, STUDY_CORPUS_KEY)) from e


def run_long_study(config, workdir: str, *, report_only: bool = False) -> str:
  """The long study (configs/study.py:cpu_long): runs or resumes its plan, then writes
  W/report.md and W/summary.json; returns the report's path."""
  if not report_only:
    long_preflight(config, workdir)
    write_study_config(config, workdir)
    t0 = time.time()
    study_long.run_all(config, workdir)
    logging.info('study: pretraining done (%.0fs)', time.time() - t0)
  study_long.attention_statistics_of_runs(config, workdir)
  path = study_long_report.write_report(config, workdir)
  logging.info('study: wrote %s', path)
  return path


def rotary_preflight(config, workdir: str) -> None:
  """The rotary study's checks before it writes anything."""
  if not pretrain_config(config, study_long.BASE).data.corpus:
    raise UserError(f'the {config.preset} study has no data: give it the folder holding '
                    f'corpus/, --config=configs/study.py:{config.preset},data=DIR')
  study_rotary.check_design(config)
  study_rotary.reusable(config)  # A named summary that is missing or unreadable stops here.
  _check_runs_and_data(config, workdir, [study_rotary.run_config(config, run)
                                         for run in study_rotary.every_run(config)])


def run_rotary_study(config, workdir: str, *, report_only: bool = False,
                     archive: str | None = None) -> str:
  """The rotary study (configs/study.py:cpu_rotary): runs or resumes its plan, then writes
  W/report.md and W/summary.json; returns the report's path."""
  if not report_only:
    rotary_preflight(config, workdir)
    write_study_config(config, workdir)
    t0 = time.time()
    on_finished = archive and study_archive.attach(archive, config, workdir,
                                                   study_rotary.run_config)
    study_long.run_all(config, workdir, plan_fn=study_rotary.plan,
                       config_fn=study_rotary.run_config, on_finished=on_finished or None)
    logging.info('study: pretraining done (%.0fs)', time.time() - t0)
  path = study_rotary_report.write_report(config, workdir)
  logging.info('study: wrote %s', path)
  return path


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  import tensorflow as tf
  tf.config.set_visible_devices([], 'GPU')  # TensorFlow only reads data.
  # A resumed study recompiles nothing it compiled before, and tasks of equal shapes share
  # their programs.
  if not jax.config.jax_compilation_cache_dir and '://' not in FLAGS.workdir:
    jax.config.update('jax_compilation_cache_dir', os.path.join(FLAGS.workdir, 'jax_cache'))
    jax.config.update('jax_persistent_cache_min_compile_time_secs', 1.0)
  with one_line_errors('sharedbert study', FLAGS.verbose, trains=True):
    run_study(FLAGS.config, FLAGS.workdir, report_only=FLAGS.report_only,
              archive=FLAGS.archive and (FLAGS.archive if '://' in FLAGS.archive
                                             else os.path.abspath(FLAGS.archive)))


def _define_flags():
  config_flags.DEFINE_config_file('config', None, 'The study config (configs/study.py:PRESET).',
                                  lock_config=True)
  flags.DEFINE_string('workdir', None, 'Where the study writes everything.')
  flags.DEFINE_bool('report_only', False, 'Only (re)write the report from finished runs.')
  flags.DEFINE_string('archive', None, 'The rotary study only: a folder that keeps each '
                      'finished run\'s done file and config, small enough to commit; a study '
                      'on another machine given the same folder trains none of them again.')
  flags.DEFINE_bool('verbose', False, 'Show tracebacks of user errors.')
  flags.mark_flags_as_required(['config', 'workdir'])


if __name__ == '__main__':
  _define_flags()
  from sharedbert import cli
  app.run(main, flags_parser=cli.flags_parser('sharedbert study', 'sharedbert.lab.study'))
