r"""The controlled study: every variant under one recipe, read from one report.

  python -m sharedbert.study --config=configs/study.py:cpu --workdir=W
  python -m sharedbert.study --config=configs/study.py:cpu --workdir=W --report_only

Stages, in order (configs/study.py describes every key):
  1. pretraining: each variant from configs/<variant>_base.py:<pretrain.arg> with the
     same overrides; the first variant learns the vocabulary and every other variant
     reuses that file, so all see the same token ids, rows, masks and batch order.
  2. GLUE: sharedbert.finetune (its TaskRun, one per variant and task, and its run_seed)
     with configs/glue.py plus `glue.override`, seeds 0..seeds-1, on `glue.tasks` (or, with
     'auto', every task of the glue_data folder with a train.tsv and its dev file(s)).
     Then each baseline of `baselines`: 'none' is the `standard` architecture (its
     config.json and the shared vocabulary) fine-tuned from random weights, the same way.
  3. robustness (sharedbert.robustness) and cross-domain transfer (sharedbert.crossdomain)
     on each fine-tuned model, right after it is trained (fine-tuned weights are not kept).
  4. SQuAD (sharedbert.squad), when squad.versions is set.
  5. W/report.md, W/summary.json and W/*.png (sharedbert.study_report), with the verdict
     of every variant against `standard` and what pretraining buys.

Workdir layout:
  config.json                                the study config
  pretrain/<variant>/                        a sharedbert.train workdir; study_done.json when finished
  glue/<variant>/<task>/seed_<s>/            sharedbert.finetune's per-seed files (metrics.json, dev predictions)
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

import copy
import functools
import json
import os
import shutil
import time

from absl import app
from absl import flags
from absl import logging
import ml_collections
import numpy as np

from sharedbert.errors import UserError, one_line_errors

FLAGS = flags.FLAGS

REPO_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            'configs')
DONE_FILE = 'study_done.json'


# ---------------------------------------------------------------------------------------
# Small helpers.

def write_json(path: str, obj) -> None:
  """Writes atomically: a reader (or a resume) never sees a half-written file."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  tmp = f'{path}.tmp{os.getpid()}'
  with open(tmp, 'w', encoding='utf-8') as f:
    json.dump(obj, f, indent=1, default=_json_default)
    f.write('\n')
  os.replace(tmp, path)


def read_json(path: str):
  with open(path, encoding='utf-8') as f:
    return json.load(f)


def _json_default(x):
  if isinstance(x, np.integer):
    return int(x)
  if isinstance(x, np.floating):
    return float(x)
  if isinstance(x, np.ndarray):
    return x.tolist()
  raise TypeError(f'not JSON serializable: {type(x)}')


def merge_overrides(config: ml_collections.ConfigDict, override, where: str) -> None:
  """Sets every leaf of `override` in `config`; a key `config` lacks is a user error."""
  for key, value in override.items():
    if key not in config:
      raise UserError(f'{where}.{key} is not a key of the config it overrides; known: '
                      f'{", ".join(sorted(config.keys()))}')
    if isinstance(value, (ml_collections.ConfigDict, dict)):
      merge_overrides(config[key], value, f'{where}.{key}')
    else:
      config[key] = copy.deepcopy(value)


def load_config_file(path: str, arg):
  from sharedbert import params as params_lib
  return params_lib.load_config_file(path, arg)


def variants_of(config) -> list[str]:
  from sharedbert.models import attention as attention_lib
  variants = list(config.variants)
  missing = [v for v in variants if v not in attention_lib.VARIANTS]
  if missing:
    raise UserError(f'config.variants lists {missing}, not implemented here; known: '
                    f'{", ".join(attention_lib.VARIANTS)}')
  if not variants:
    raise UserError('config.variants is empty')
  return variants


def pretrain_config(config, variant: str):
  path = os.path.join(REPO_CONFIGS, f'{variant}_base.py')
  cfg = load_config_file(path, config.pretrain.arg or None)
  merge_overrides(cfg, config.pretrain.override, 'config.pretrain.override')
  _rederive_recipe(cfg, config.pretrain.arg or None, config.pretrain.override)
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
  from sharedbert import config as sb_config
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
  from sharedbert.data import glue
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
  from sharedbert.data import glue
  if not os.path.isdir(glue_dir):
    raise UserError(f"glue.tasks='auto': glue.override.data.glue_dir={glue_dir} does not "
                    'exist; point it at the glue_data folder (CoLA/, SST-2/, ...)')
  tasks, skipped = [], []
  for name, spec in glue.TASKS.items():
    folder = os.path.join(glue_dir, spec.glue_dir_name)
    if not os.path.isdir(folder):
      continue
    files = ['train.tsv'] + [glue.split_filename(spec, s) for s in spec.dev_splits]
    missing = [f for f in files if not os.path.isfile(os.path.join(folder, f))]
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
  from sharedbert.data import glue
  glue_dir, _ = _glue_source(config)
  if transfer.target == 'imdb' or not glue_dir:
    return ''
  spec = glue.get_task(transfer.target)
  name = glue.split_filename(spec, transfer.target_split)
  if os.path.isfile(os.path.join(glue_dir, spec.glue_dir_name, name)):
    return ''
  return f'no {spec.glue_dir_name}/{name} in the GLUE data'


def crossdomain_plan(config, tasks) -> tuple[list, list[tuple[str, str]]]:
  """(transfers to run, [(pair, why it is skipped)]) for config.crossdomain.pairs."""
  from sharedbert import crossdomain
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


# ---------------------------------------------------------------------------------------
# Stage 1: pretraining.

def pretrain_dir(workdir: str, variant: str) -> str:
  return os.path.join(workdir, 'pretrain', variant)


def read_metrics_jsonl(path: str) -> list[dict]:
  if not os.path.isfile(path):
    return []
  out = []
  with open(path, encoding='utf-8') as f:
    for line in f:
      line = line.strip()
      if line:
        try:
          out.append(json.loads(line))
        except json.JSONDecodeError:
          pass  # A line cut by a kill.
  return out


def pretrain_summary(run_dir: str) -> dict:
  """Final held-out MLM figures and the mean step time from a run's metrics.jsonl."""
  lines = read_metrics_jsonl(os.path.join(run_dir, 'metrics.jsonl'))
  train = [l for l in lines if 'loss' in l and 'step_time' in l]
  evals = [l for l in lines if 'eval_loss' in l]
  step_times = [l['step_time'] for l in train]
  out = {'steps': max((l.get('step', 0) for l in lines), default=0),
         'step_time_mean': float(np.mean(step_times)) if step_times else None,
         'step_time_median': float(np.median(step_times)) if step_times else None}
  if evals:
    last = evals[-1]
    out.update(eval_loss=last['eval_loss'], eval_mlm_accuracy=last.get('eval_mlm_accuracy'),
               eval_majority_accuracy=last.get('eval_majority_accuracy'))
  if train:
    out['train_loss'] = train[-1]['loss']
  return out


def run_pretraining(config, workdir: str, variants: list[str]) -> dict:
  from sharedbert import train as train_lib
  from sharedbert.data import tokenizer as tokenizer_lib
  summaries = {}
  shared_vocab = os.path.join(pretrain_dir(workdir, variants[0]), tokenizer_lib.VOCAB_FILE)
  for variant in variants:
    run_dir = pretrain_dir(workdir, variant)
    done = os.path.join(run_dir, DONE_FILE)
    if os.path.isfile(done):
      summaries[variant] = read_json(done)
      logging.info('study: pretraining %s already finished (%s)', variant, run_dir)
      continue
    cfg = pretrain_config(config, variant)
    os.makedirs(run_dir, exist_ok=True)
    vocab = os.path.join(run_dir, tokenizer_lib.VOCAB_FILE)
    if variant != variants[0] and not os.path.isfile(vocab):
      # One vocabulary for all: the same token ids, hence the same rows and batches.
      shutil.copyfile(shared_vocab, vocab)
    logging.info('study: pretraining %s for %d steps in %s', variant, cfg.total_steps, run_dir)
    t0 = time.time()
    train_lib.train_and_evaluate(cfg, run_dir)
    summary = pretrain_summary(run_dir)
    summary.update(variant=variant, wall_s=round(time.time() - t0, 1),
                   total_steps=int(cfg.total_steps), batch_size=int(cfg.data.batch_size),
                   seq_len=int(cfg.data.seq_len), seed=int(cfg.seed))
    write_json(done, summary)
    summaries[variant] = summary
  return summaries


# ---------------------------------------------------------------------------------------
# Stages 2 and 3: GLUE fine-tuning, robustness and cross-domain per fine-tuned model.

def run_file(workdir: str, variant: str, task: str, seed: int) -> str:
  return os.path.join(workdir, 'runs', variant, task, f'seed_{seed}.json')


def traced_task_run(base_cls):
  """A finetune.TaskRun subclass that keeps the params of each seed's last dev evaluation."""
  class TracedTaskRun(base_cls):
    last_params = None

    def evaluate_dev(self, params):
      # Called after every epoch with the current params; the last call's are the final
      # weights (the study reports the last epoch). Nothing donates them after that.
      self.last_params = params
      return super().evaluate_dev(params)
  return TracedTaskRun


def _transfers_from(config, task: str):
  return [t for t in crossdomain_plan(config, [task])[0] if t.source == task]


def _glue_source(config):
  d = config.glue.override.get('data', {})
  return d.get('glue_dir', '') or None, d.get('tfds_data_dir', '') or None


def rows_of(config, variant: str) -> list[str]:
  """`variant`, then the baselines of its architecture (`none` after `standard`)."""
  return [variant] + [b for b in baselines_of(config, list(config.variants))
                      if BASELINES[b] == variant]


def run_glue_task(config, workdir: str, variant: str, task: str) -> None:
  """Fine-tunes `variant` on `task` for every seed whose result file is missing, then each
  baseline of its architecture from random weights, on the same TaskRun: the same
  training examples and batches, and the same compiled steps."""
  seeds = list(range(int(config.seeds)))
  rows = rows_of(config, variant)
  todo = {row: [s for s in seeds if not os.path.isfile(run_file(workdir, row, task, s))]
          for row in rows}
  if not any(todo.values()):
    logging.info('study: %s %s: all %d seeds finished', '/'.join(rows), task, len(seeds))
    return
  import flax.linen as nn
  import jax
  from sharedbert import finetune
  from sharedbert import sharding

  init_from = pretrain_dir(workdir, variant)
  cfg = glue_config(config, init_from, task)
  finetune.validate(cfg)
  mesh = sharding.make_mesh(cfg.mesh)
  axis_rules = sharding.rules(cfg)
  pretrained = finetune.open_pretrained(init_from)
  target = finetune.abstract_encoder(pretrained.model_config, mesh, axis_rules)
  encoder_params, step = finetune.restore_encoder_params(init_from, target)
  t0 = time.time()
  run = traced_task_run(finetune.TaskRun)(cfg, task, pretrained, mesh, axis_rules,
                                          encoder_params, step, _glue_dir(workdir, variant))
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
        result.update(variant=row, task=task, setup_s=round(setup_s, 2))
        write_json(run_file(workdir, row, task, seed), result)
        logging.info('study: %s %s seed %d: dev score %.4f%s', row, task, seed,
                     result['score'], ''.join(f'; {k} {v["score"]:.4f}'
                                              for k, v in result['crossdomain'].items()))


def _glue_dir(workdir: str, row: str) -> str:
  path = os.path.join(workdir, 'glue', row)
  os.makedirs(path, exist_ok=True)
  return path


def _evaluators(config, run, task: str) -> dict:
  """What each fine-tuned model of `run` is scored on besides GLUE: the noisy dev set
  (robustness.tasks) and the cross-domain targets whose source is `task`."""
  from sharedbert import crossdomain
  from sharedbert import finetune
  from sharedbert import robustness
  from sharedbert.metrics import glue as glue_metrics
  spec = run.spec
  out = {'robustness': None, 'transfers': []}
  rob = config.robustness
  if task in tuple(rob.tasks):
    dev = run.features[spec.dev_splits[0]]

    def task_score(logits, labels=dev.labels):
      preds = logits[:, 0] if spec.is_regression else np.argmax(logits, axis=-1)
      return glue_metrics.task_score(spec, glue_metrics.task_metrics(spec, preds, labels))

    out['robustness'] = dict(
        noisy_predict=robustness.make_noisy_predict(run.model),
        batches=robustness.make_batches(dev.input_ids, dev.segment_ids,
                                        int(rob.eval_batch_size)),
        task_score=task_score, levels=list(rob.levels),
        noise_seeds=list(range(int(rob.noise_seeds))))
  glue_dir, tfds_dir = _glue_source(config)
  seq_len = run.config.data.seq_len
  for t in _transfers_from(config, task):
    examples = crossdomain.load_target_examples(
        t, glue_dir=glue_dir, tfds_data_dir=config.crossdomain.tfds_data_dir or tfds_dir,
        max_examples=int(config.crossdomain.max_target_examples))
    # Tokenized as the source task's inputs; the labels are read from the examples.
    feats = finetune.featurize(examples, run.pretrained.tokenizer, seq_len, spec)
    feats = feats.crop(min(seq_len, -(-int(feats.lengths.max()) // 8) * 8))
    labels = np.asarray([ex.label for ex in examples], np.float64)
    out['transfers'].append((t, feats, labels))
  out['threshold'] = float(config.crossdomain.stsb_threshold)
  return out


def _run_seed(run, seed: int, seeds_left: int, evaluators: dict) -> dict:
  """Fine-tunes one seed and scores the final weights: the study's result record."""
  from sharedbert import crossdomain
  from sharedbert import finetune
  from sharedbert import robustness
  # A missing result file means this seed's weights are gone: fine-tune it again.
  seed_metrics = os.path.join(run.seed_dir(seed), finetune.SEED_METRICS)
  if os.path.isfile(seed_metrics):
    os.remove(seed_metrics)
  run.last_params = None
  t_seed = time.time()
  record = run.run_seed(seed, seeds_left=seeds_left, is_chief=True)
  finetune_s = time.time() - t_seed
  params, run.last_params = run.last_params, None
  if params is None:
    raise RuntimeError('finetune.TaskRun.run_seed did not evaluate the dev set')
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
  rob = evaluators['robustness']
  if rob:
    t_rob = time.time()
    result['robustness'] = robustness.evaluate(rob['noisy_predict'], params, rob['batches'],
                                               rob['task_score'], rob['levels'],
                                               rob['noise_seeds'])
    result['robustness']['wall_s'] = round(time.time() - t_rob, 2)
  result['crossdomain'] = {}
  threshold = evaluators['threshold']
  for t, feats, labels in evaluators['transfers']:
    entry = crossdomain.score(t, run.predict(params, feats), labels, threshold)
    entry['mapping'] = crossdomain.describe(t, threshold)
    result['crossdomain'][t.name] = entry
  return result


def run_glue(config, workdir: str, variants: list[str], tasks: list[str]) -> None:
  for task in tasks:
    for variant in variants:
      run_glue_task(config, workdir, variant, task)  # And the baselines of its architecture.


# ---------------------------------------------------------------------------------------
# Stage 4: SQuAD.

def run_squad(config, workdir: str, variants: list[str]) -> None:
  versions = tuple(config.squad.versions)
  if not versions:
    return
  from sharedbert import squad
  for version in versions:
    for variant in variants:
      for seed in range(int(config.seeds)):
        path = os.path.join(workdir, 'squad', variant, f'v{version}', f'seed_{seed}.json')
        if os.path.isfile(path):
          continue
        result = squad.finetune_and_evaluate(
            config.squad, version=version, init_from=pretrain_dir(workdir, variant), seed=seed,
            workdir=os.path.dirname(path))
        write_json(path, result)


# ---------------------------------------------------------------------------------------
# The whole study.

def write_study_config(config, workdir: str) -> None:
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, 'config.json')
  new = json.loads(config.to_json_best_effort())
  if os.path.isfile(path):
    old = read_json(path)
    changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k)
                     and k not in ('report_only',))
    if changed:
      logging.warning('study: the config differs from the one in %s in %s; finished runs '
                      'are kept as they are', path, ', '.join(changed))
  write_json(path, new)


def preflight(config, workdir: str, variants: list[str]) -> None:
  """What a user's mistake can fail, checked before the study writes anything: every
  value (sharedbert/validation.py), the workdir, the mesh and corpus of the pretraining
  runs, and the GLUE data of every task."""
  from sharedbert import finetune
  from sharedbert import train as train_lib
  from sharedbert import validation
  validation.study(config)
  validation.workdir(workdir)
  train_lib.preflight(pretrain_config(config, variants[0]))
  tasks, _ = resolve_glue_tasks(config)
  for task in tasks:
    cfg = glue_config(config, pretrain_dir(workdir, variants[0]), task)
    for name in finetune.resolve_tasks(cfg):
      finetune.check_task_data(cfg, name)


def run_study(config, workdir: str, *, report_only: bool = False) -> str:
  """Runs (or resumes) every stage, then writes W/report.md; returns its path."""
  from sharedbert import study_report
  workdir = os.path.abspath(os.fspath(workdir))
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
    run_glue(config, workdir, variants, tasks)
    run_squad(config, workdir, variants)
    logging.info('study: all runs done (%.0fs)', time.time() - t0)
  path = study_report.write_report(config, workdir, variants)
  logging.info('study: wrote %s', path)
  return path


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  import jax
  import tensorflow as tf
  tf.config.set_visible_devices([], 'GPU')  # TensorFlow only reads data.
  # A resumed study recompiles nothing it compiled before, and tasks of equal shapes share
  # their programs.
  if not jax.config.jax_compilation_cache_dir and '://' not in FLAGS.workdir:
    jax.config.update('jax_compilation_cache_dir', os.path.join(FLAGS.workdir, 'jax_cache'))
    jax.config.update('jax_persistent_cache_min_compile_time_secs', 1.0)
  with one_line_errors('sharedbert.study', FLAGS.verbose):
    run_study(FLAGS.config, FLAGS.workdir, report_only=FLAGS.report_only)


def _define_flags():
  from ml_collections import config_flags
  config_flags.DEFINE_config_file('config', None, 'The study config (configs/study.py:PRESET).',
                                  lock_config=True)
  flags.DEFINE_string('workdir', None, 'Where the study writes everything.')
  flags.DEFINE_bool('report_only', False, 'Only (re)write the report from finished runs.')
  flags.DEFINE_bool('verbose', False, 'Show tracebacks of user errors.')
  flags.mark_flags_as_required(['config', 'workdir'])


if __name__ == '__main__':
  _define_flags()
  from sharedbert import cli
  app.run(main, flags_parser=cli.flags_parser('sharedbert.study', 'sharedbert.study'))
