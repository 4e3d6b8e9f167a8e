"""What the study runs: its configs, tasks, baselines and transfers, and where each
result lives, and `check_config`, the checks of a study config. Read by the study
(sharedbert.lab.study) and its report (sharedbert.lab.study_report); it runs nothing.
"""

from __future__ import annotations

import copy
import os

import ml_collections

from sharedbert.errors import UserError
from sharedbert.utils import paths
from sharedbert.utils.paths import gfile as _gfile  # data may be gs://.
from sharedbert import config as sb_config
from sharedbert.config import checks as config_checks
from sharedbert.config import validation
from sharedbert.data import glue
from sharedbert.evaluators import crossdomain
from sharedbert.models import attention as attention_lib
from sharedbert.models import params as params_lib

REPO_CONFIGS = os.path.join(paths.REPO_ROOT, 'configs')
DONE_FILE = 'study_done.json'


# ---------------------------------------------------------------------------------------
# Configs.

def merge_overrides(config: ml_collections.ConfigDict, override, where: str) -> None:
  """Sets every leaf of `override` in `config`; a key `config` lacks is a user error, but
  for a variant's own setting under `model` (one override serves every variant: each model
  takes the settings its variant declares, ModelConfig.from_config drops the others)."""
  for key, value in override.items():
    if (key not in config and where.endswith('.model')
        and key in attention_lib.setting_names()):
      config[key] = copy.deepcopy(value)
      continue
    if key not in config:
      raise UserError(f'{where}.{key} is not a key of the config it overrides; known: '
                      f'{", ".join(sorted(config.keys()))}')
    if isinstance(value, (ml_collections.ConfigDict, dict)):
      merge_overrides(config[key], value, f'{where}.{key}')
    else:
      config[key] = copy.deepcopy(value)


def load_config_file(path: str, arg):
  return params_lib.load_config_file(path, arg)


def variants_of(config) -> list[str]:
  variants = list(config.variants)
  missing = [v for v in variants if v not in attention_lib.VARIANTS]
  if missing:
    raise UserError(f'config.variants lists {missing}, not implemented here; known: '
                    f'{", ".join(attention_lib.VARIANTS)}')
  if not variants:
    raise UserError('config.variants is empty')
  return variants


def pretrain_config(config, variant: str, override=None):
  """configs/<variant>_base.py:<pretrain.arg> with `override` (pretrain.override when None;
  a pretraining arm passes its own copy with its rate, seed, width or init)."""
  override = config.pretrain.override if override is None else override
  path = os.path.join(REPO_CONFIGS, f'{variant}_base.py')
  cfg = load_config_file(path, config.pretrain.arg or None)
  merge_overrides(cfg, override, 'config.pretrain.override')
  _rederive_recipe(cfg, config.pretrain.arg or None, override)
  cfg.model.attention = variant
  return cfg


def _has_leaf(override, dotted: str) -> bool:
  node = override
  for name in dotted.split('.'):
    if not hasattr(node, 'keys') or name not in node:
      return False
    node = node[name]
  return True


def _rederive_recipe(cfg, arg, override) -> None:
  """The recipe's values that depend on the model (the budget recipe's init scale on the
  width) were computed for the preset's size; computed again for the overridden one,
  unless the override sets them itself."""
  args = sb_config.parse_arg(arg, {'size': 'base', 'corpus': '', 'recipe': ''})
  recipe = args['recipe'] or ('bert' if args['size'] == 'base' else 'budget')
  derived = {k: v(cfg) for k, v in sb_config.recipe_overrides(recipe).items()
             if callable(v) and not _has_leaf(override, k)}
  sb_config.apply_overrides(cfg, derived)


def glue_config(config, init_from: str, task: str, *, from_scratch: bool = False):
  cfg = load_config_file(os.path.join(REPO_CONFIGS, 'glue.py'), None)
  merge_overrides(cfg, config.glue.override, 'config.glue.override')
  if cfg.from_scratch:
    raise UserError('glue.override.from_scratch must stay False: the no-pretraining row is '
                    "config.baselines=('none',)")
  cfg.init_from = init_from
  cfg.from_scratch = from_scratch
  cfg.task = task
  cfg.seeds = int(config.seeds)
  cfg.seed = 0
  if cfg.eval.select_best_epoch:
    raise UserError('the study reports the last epoch; leave glue.override.eval.select_best_epoch '
                    'False (selecting on the dev set it reports is optimistic)')
  return cfg


# ---------------------------------------------------------------------------------------
# The plan: the tasks, baselines and transfers the study runs, and what it skips and why.

# `none`: the `standard` architecture (its config.json and the study's vocabulary) fine-tuned
# from a random initialization under the same GLUE recipe, seeds and data: what pretraining buys.
BASELINES = {'none': 'standard'}


def baselines_of(config, variants: list[str]) -> list[str]:
  names = list(config.get('baselines', ()))
  unknown = [b for b in names if b not in BASELINES]
  if unknown:
    raise UserError(f'config.baselines lists {unknown}; known: {", ".join(BASELINES)} '
                    '(or () for none)')
  for b in names:
    if BASELINES[b] not in variants:
      raise UserError(f"config.baselines={tuple(names)!r}: {b!r} fine-tunes the "
                      f"{BASELINES[b]!r} architecture from random weights and needs "
                      f"{BASELINES[b]!r} in config.variants; add it or set baselines=()")
  return names


def listed_glue_tasks(config):
  """config.glue.tasks as task names; None for 'auto' (found in the glue_data folder)."""
  value = config.glue.tasks
  items = ([x.strip() for x in value.split(',')] if isinstance(value, str)
           else [str(x).strip() for x in value])
  items = [x for x in items if x]
  if [x.lower() for x in items] == ['auto']:
    return None
  if not items:
    raise UserError("config.glue.tasks is empty; name tasks ('cola,sst2') or 'auto'")
  names = []
  for item in items:
    name = glue.get_task(item).name
    if name not in glue.TASKS:
      raise UserError(f'config.glue.tasks: {item!r} has no training set; choose from '
                      f'{", ".join(glue.TASKS)} or auto')
    if name not in names:
      names.append(name)
  return names


def discover_glue_tasks(glue_dir: str) -> tuple[list[str], list[tuple[str, str]]]:
  """The tasks of a glue_data folder with a train.tsv and every dev file (GLUE's order),
  and (task, reason) for each task folder that lacks one."""
  if not _gfile().isdir(glue_dir):
    raise UserError(f"glue.tasks='auto': glue.override.data.glue_dir={glue_dir} does not "
                    'exist; point it at the glue_data folder (CoLA/, SST-2/, ...)')
  tasks, skipped = [], []
  for name, spec in glue.TASKS.items():
    folder = os.path.join(glue_dir, spec.glue_dir_name)
    if not _gfile().isdir(folder):
      continue
    files = ['train.tsv'] + [glue.split_filename(spec, s) for s in spec.dev_splits]
    missing = [f for f in files if not _gfile().exists(os.path.join(folder, f))]
    if missing:
      skipped.append((name, 'no ' + ', no '.join(missing)))
    else:
      tasks.append(name)
  return tasks, skipped


def resolve_glue_tasks(config) -> tuple[list[str], list[tuple[str, str]]]:
  """(tasks to run, [(task, why it is skipped)]): the listed tasks, or with 'auto' every
  task of the glue_data folder that can be trained and scored."""
  listed = listed_glue_tasks(config)
  if listed is not None:
    return listed, []
  glue_dir, _ = _glue_source(config)
  if not glue_dir:
    raise UserError("glue.tasks='auto' finds the tasks in glue.override.data.glue_dir, "
                    "which is not set; set it, or list the tasks (glue.tasks='cola,sst2')")
  tasks, skipped = discover_glue_tasks(glue_dir)
  if not tasks:
    found = '; '.join(f'{t}: {why}' for t, why in skipped) or 'no task folder'
    raise UserError(f"glue.tasks='auto' found no task with a train.tsv and a dev.tsv in "
                    f'glue.override.data.glue_dir={glue_dir} ({found})')
  return tasks, skipped


def _target_missing(config, transfer) -> str:
  """Why a transfer's target data is not there ('' when it is, or when only tfds knows)."""
  glue_dir, _ = _glue_source(config)
  if transfer.target == 'imdb' or not glue_dir:
    return ''
  spec = glue.get_task(transfer.target)
  name = glue.split_filename(spec, transfer.target_split)
  if _gfile().exists(os.path.join(glue_dir, spec.glue_dir_name, name)):
    return ''
  return f'no {spec.glue_dir_name}/{name} in the GLUE data'


def crossdomain_plan(config, tasks) -> tuple[list, list[tuple[str, str]]]:
  """(transfers to run, [(pair, why it is skipped)]) for config.crossdomain.pairs."""
  run, skipped = [], []
  for pair in config.crossdomain.pairs:
    t = crossdomain.get_transfer(pair)
    why = (f'its source {t.source} is not fine-tuned in this study' if t.source not in tasks
           else _target_missing(config, t))
    if why:
      skipped.append((t.name, why))
    else:
      run.append(t)
  return run, skipped


def _transfers_from(config, task: str):
  return [t for t in crossdomain_plan(config, [task])[0] if t.source == task]


def _glue_source(config):
  d = config.glue.override.get('data', {})
  return d.get('glue_dir', '') or None, d.get('tfds_data_dir', '') or None


def rows_of(config, variant: str) -> list[str]:
  """`variant`, then the baselines of its architecture (`none` after `standard`)."""
  return [variant] + [b for b in baselines_of(config, list(config.variants))
                      if BASELINES[b] == variant]


# ---------------------------------------------------------------------------------------
# Where results live.

def pretrain_dir(workdir: str, variant: str) -> str:
  return os.path.join(workdir, 'pretrain', variant)


def glue_pretrain_seeds(config) -> int:
  """How many pretrained encoders of each variant GLUE fine-tunes (1: the reference run)."""
  return max(1, int(config.glue.get('pretrain_seeds', 0)))


def run_file(workdir: str, variant: str, task: str, seed: int,
             pretrain_seed: int | None = None) -> str:
  """A fine-tuning run's result: from the reference run (pretrain_seed None), or from
  pretraining seed `pretrain_seed` of phase B (glue.pretrain_seeds > 0)."""
  folder = os.path.join(workdir, 'runs', variant, task)
  if pretrain_seed is not None:
    folder = os.path.join(folder, f'pretrain_seed_{pretrain_seed}')
  return os.path.join(folder, f'seed_{seed}.json')


# ---------------------------------------------------------------------------------------
# Checks.

def check_config(config) -> None:
  """The study's own values, then each pretraining and fine-tuning config it will run."""
  validation.check_table(config, validation.STUDY)
  for i, level in enumerate(config.robustness.levels):
    validation.number(0).check(f'robustness.levels[{i}]', level)
  versions = tuple(config.squad.versions)
  for v in versions:
    if v not in validation.SQUAD_VERSIONS:
      known = ', '.join(map(repr, validation.SQUAD_VERSIONS))
      raise UserError(f'squad.versions must hold only {known}, got {versions!r}')
  variants = variants_of(config)
  for variant in variants:
    config_checks.pretrain(pretrain_config(config, variant))
  baselines_of(config, variants)
  # None: 'auto', the tasks of the glue_data folder (found by the study's preflight).
  tasks = listed_glue_tasks(config) or ['all']
  for task in tasks:
    # init_from is the study's own pretraining workdir, made by stage 1.
    config_checks.glue(glue_config(config, os.path.join('pretrain', variants[0]), task))
