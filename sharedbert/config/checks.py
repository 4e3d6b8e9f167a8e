"""The checks of a whole config, before a command writes anything: one function per
kind, `pretrain` (sharedbert.main, mode 'pretrain'), `glue` (mode 'finetune',
configs/glue.py) and `study` (sharedbert.experiments.study, configs/study.py). Each key's range is
in sharedbert/config/validation.py's tables; here, how the keys fit together.
"""

from __future__ import annotations

import os

from sharedbert.config import validation
from sharedbert.errors import UserError


def _full_model(model_cfg):
  from sharedbert.models.bert import ModelConfig
  return ModelConfig.from_config(model_cfg)  # Ranges (`model`), then the variant's checks.


def pretrain(config) -> None:
  """Every value of a pretraining config, and how they must fit together."""
  validation.check_table(config, validation.PRETRAIN)
  model_cfg = _full_model(config.model)
  d, optim = config.data, config.optim
  if d.seq_len > model_cfg.max_position_embeddings:
    raise UserError(f'data.seq_len={d.seq_len} exceeds model.max_position_embeddings='
                    f'{model_cfg.max_position_embeddings}; data.seq_len must be an integer '
                    f'from 2 to {model_cfg.max_position_embeddings}')
  if d.max_predictions > d.seq_len:
    raise UserError(f'data.max_predictions must be an integer from 0 to data.seq_len='
                    f'{d.seq_len} (0: ceil(mask_rate * seq_len)), got {d.max_predictions}')
  if d.batch_size % optim.grad_accum_steps:
    raise UserError(f'data.batch_size={d.batch_size} is not divisible by '
                    f'optim.grad_accum_steps={optim.grad_accum_steps}; optim.grad_accum_steps '
                    'must divide data.batch_size')
  schedule = optim.get('schedule_steps', 0)
  if schedule and schedule < config.total_steps:
    raise UserError(f'optim.schedule_steps={schedule} is shorter than total_steps='
                    f'{config.total_steps}; set it to 0 (the schedule ends at total_steps) '
                    'or to at least total_steps')
  _check_axis_rules(config.mesh)


def _check_axis_rules(mesh_cfg):
  rules = mesh_cfg.get('logical_axis_rules') if hasattr(mesh_cfg, 'get') else None
  if rules is None:
    return
  if not isinstance(rules, (tuple, list)) or not all(
      isinstance(r, (tuple, list)) and len(r) == 2 and isinstance(r[0], str) for r in rules):
    raise UserError(f'mesh.logical_axis_rules must be (name, mesh axes) pairs, got {rules!r}')


def glue(config) -> None:
  """Every value of a fine-tuning config (configs/glue.py); the files are the preflight's."""
  validation.check_table(config, validation.GLUE)
  from sharedbert.data import glue as glue_data
  if config.task.strip().lower() != 'all':
    for name in config.task.split(','):
      if name.strip():
        glue_data.get_task(name.strip())  # A UserError naming the known tasks.
  _check_axis_rules(config.mesh)


def study(config) -> None:
  """The study's own values, then each pretraining and fine-tuning config it will run."""
  validation.check_table(config, validation.STUDY)
  for i, level in enumerate(config.robustness.levels):
    validation.number(0).check(f'robustness.levels[{i}]', level)
  versions = tuple(config.squad.versions)
  for v in versions:
    if v not in validation.SQUAD_VERSIONS:
      known = ', '.join(map(repr, validation.SQUAD_VERSIONS))
      raise UserError(f'squad.versions must hold only {known}, '
                      f'got {versions!r}')
  from sharedbert.experiments import study_plan as study_lib
  variants = study_lib.variants_of(config)
  for variant in variants:
    pretrain(study_lib.pretrain_config(config, variant))
  study_lib.baselines_of(config, variants)
  # None: 'auto', the tasks of the glue_data folder (found by the study's preflight).
  tasks = study_lib.listed_glue_tasks(config) or ['all']
  for task in tasks:
    # init_from is the study's own pretraining workdir, made by stage 1.
    glue(study_lib.glue_config(config, os.path.join('pretrain', variants[0]), task))
