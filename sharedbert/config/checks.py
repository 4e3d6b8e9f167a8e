"""The checks of a whole config, before a command writes anything: one function per
kind, `pretrain` (sharedbert.main, mode 'pretrain') and `finetune` (mode 'finetune',
configs/glue.py; `glue` is its values without the pretrained run). The study's
(configs/study.py) is sharedbert.lab.study_plan.check_config, which runs these on every
config the study makes. Each key's range is in sharedbert/config/validation.py's tables;
here, how the keys fit together.
"""

from __future__ import annotations

import json

from sharedbert.config import validation
from sharedbert.data import glue as glue_data
from sharedbert.errors import UserError
from sharedbert.models.bert import ModelConfig


# The model config of each pretraining config checked in this process, by the config's
# content: the entry point checks before loading the run's modules and the run's preflight
# checks again; the model is built (and the variant's checks run) once.
_CHECKED: dict[str, ModelConfig] = {}


def pretrain(config) -> ModelConfig:
  """Every value of a pretraining config, and how they must fit together; returns the
  model's config, built once per config content (ranges of `model`, then the variant's own
  checks).

  Args:
    config: a pretraining config.
  Returns:
    The ModelConfig.
  Raises:
    UserError: the first value out of range or keys that do not fit together.
  """
  validation.check_table(config, validation.PRETRAIN)
  key = json.dumps(json.loads(config.to_json_best_effort()), sort_keys=True)
  model_cfg = _CHECKED.get(key)
  if model_cfg is None:
    model_cfg = ModelConfig.from_config(config.model)
  d, optim = config.data, config.optim
  if (model_cfg.position_embeddings == 'learned'  # Rotary and none have no table to outrun.
      and d.seq_len > model_cfg.max_position_embeddings):
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
  _CHECKED[key] = model_cfg
  return model_cfg


def _check_axis_rules(mesh_cfg):
  rules = mesh_cfg.get('logical_axis_rules') if hasattr(mesh_cfg, 'get') else None
  if rules is None:
    return
  if not isinstance(rules, (tuple, list)) or not all(
      isinstance(r, (tuple, list)) and len(r) == 2 and isinstance(r[0], str) for r in rules):
    raise UserError(f'mesh.logical_axis_rules must be (name, mesh axes) pairs, got {rules!r}')


def finetune(config) -> None:
  """A fine-tuning command's config: the pretrained run it starts from, and `glue`.

  Args:
    config: a fine-tuning config.
  Raises:
    UserError: as `glue`.
  Returns:
    None.
  """
  if not config.init_from:
    raise UserError('config.init_from is empty: set --config.init_from to the --workdir of a '
                    'pretraining run (it holds config.json, vocab.model and checkpoints/)')
  glue(config)


def glue(config) -> None:
  """Every value of a fine-tuning config (configs/glue.py); the files are the preflight's.

  Args:
    config: a fine-tuning config.
  Raises:
    UserError: the first value out of range.
  Returns:
    None.
  """
  validation.check_table(config, validation.GLUE)
  if config.task.strip().lower() != 'all':
    for name in config.task.split(','):
      if name.strip():
        glue_data.get_task(name.strip())  # A UserError naming the known tasks.
  _check_axis_rules(config.mesh)
