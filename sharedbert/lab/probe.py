r"""Attention probes: which abilities each attention variant keeps, on synthetic tasks.

  sharedbert probe --workdir=W [--config=configs/probe.py[:cpu|smoke|gpu]]

Every variant in config.variants is trained from scratch on every task of
sharedbert.lab.probe_tasks with seeds 0..seeds-1, through the project's encoder and
masked-LM head (sharedbert.models.bert.BertForPretraining: the prediction slots are its
masked positions; the pointer tasks read the first layer's attention logits instead) and
its optimizer (sharedbert.optim.make_optimizer). Seed s fixes the model's initialisation,
the training batches and the evaluation set, so variants see the same data and their
differences pair up seed by seed.

The learning rate is tuned per variant and task for the tasks in config.lr_sweep.tasks:
seed 0 at every rate of config.lr_sweep.lrs, then the other seeds at the rate whose seed-0
accuracy is highest (ties: the higher mean accuracy over the curve, then the rate nearest
config.optim.lr). MQAR's extra pair counts (config.mqar.more_pairs, task ids `mqar_p<N>`)
use the rate chosen for `mqar`. Other tasks run at config.optim.lr.

Runs go `config.workers` at a time, each worker a process on a core of its own.

Workdir layout:
  config.json                              the probe config
  timing.json                              wall time and load of the last invocation that trained
  runs/<variant>/<task>/lr<lr>_seed<s>.json  one training run: accuracy curve, final accuracy,
                                           timings (written atomically; its presence = done)
  summary.json, report.md, curves.png, final.png, pairs.png

A killed probe resumes with the same command: runs whose file exists (and was made under
the same config) are skipped. --report_only rewrites the report from finished runs.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import os
import sys
import time
import zlib
import functools

from absl import app
from absl import flags
from absl import logging
import numpy as np
import flax.linen as nn
import jax
import jax.numpy as jnp
from ml_collections import config_flags
import optax

from sharedbert import interrupts
from sharedbert.utils import jsonio
from sharedbert.utils import paths
from sharedbert.utils import workers as workers_lib
from sharedbert.errors import UserError, one_line_errors
from sharedbert import cli
from sharedbert import config as sb_config
from sharedbert import optim as optim_lib
from sharedbert.config import validation
from sharedbert.lab import probe_report
from sharedbert.lab import probe_tasks
from sharedbert.models import attention as attention_lib
from sharedbert.models import params as params_lib
from sharedbert.models.bert import BertForPretraining, ModelConfig
from sharedbert.tasks import engine

FLAGS = flags.FLAGS

REPO_ROOT = paths.REPO_ROOT
DEFAULT_CONFIG = os.path.join(REPO_ROOT, 'configs', 'probe.py')

# Keys that choose which runs exist, not what a run computes: changing them keeps results.
_RUN_SELECTION_KEYS = ('variants', 'tasks', 'seeds', 'confidence', 'preset', 'workers',
                       'min_difference', 'gate')


# ---------------------------------------------------------------------------------------
# Config.

def split_lists(config) -> None:
  """`--config.variants=standard,shared` arrives as ('standard,shared',): one name each."""
  for key in ('variants', 'tasks'):
    config[key] = tuple(x.strip() for item in config[key] for x in str(item).split(',')
                        if x.strip())


def validate(config) -> None:
  variants = list(config.variants)
  if not variants:
    raise UserError('config.variants is empty; list some of: '
                    f'{", ".join(attention_lib.VARIANTS)}')
  unknown = [v for v in variants if v not in attention_lib.VARIANTS]
  if unknown:
    raise UserError(f'config.variants: unknown {unknown}; choose among '
                    f'{", ".join(attention_lib.VARIANTS)}')
  if not list(config.tasks):
    raise UserError(f'config.tasks is empty; list some of: {", ".join(probe_tasks.TASKS)}')
  for key, low in (('seeds', 1), ('seq_len', 8), ('vocab_size', 4), ('total_steps', 1),
                   ('batch_size', 1), ('eval_every_steps', 1), ('eval_examples', 1)):
    if int(config[key]) < low:
      raise UserError(f'config.{key}={config[key]} is out of range: it must be >= {low}')
  if config.total_steps % config.eval_every_steps:
    raise UserError(f'config.eval_every_steps={config.eval_every_steps} must divide '
                    f'config.total_steps={config.total_steps}')
  if not 0.0 < config.confidence < 1.0:
    raise UserError(f'config.confidence={config.confidence} is out of range: 0 < confidence < 1')
  if not 0.0 <= config.get('min_difference', 0.0) < 1.0:
    raise UserError(f'config.min_difference={config.min_difference} is out of range: '
                    '0 <= min_difference < 1')
  for task in config.tasks:
    probe_tasks.check(task, config)
  sweep = config.get('lr_sweep')
  if sweep is not None:
    if not list(sweep.lrs) or any(not 0 < float(lr) < 1 for lr in sweep.lrs):
      raise UserError(f'config.lr_sweep.lrs={tuple(sweep.lrs)} must list learning rates in (0, 1)')
    unknown = [t for t in sweep.tasks if t not in probe_tasks.TASKS]
    if unknown:
      raise UserError(f'config.lr_sweep.tasks: unknown {unknown}; choose among '
                      f'{", ".join(probe_tasks.TASKS)}')
  if int(config.get('workers', 1)) < 1:
    raise UserError(f'config.workers={config.workers} is out of range: it must be >= 1')
  for variant in variants:
    for task in config.tasks:
      model_config(config, variant, task)


def task_model(config, task: str | None) -> dict:
  """A task's own model keys (config.<task>.model, e.g. cyclic's one layer), and those of
  its id's position arm (mirror_rotary's positions), or {}."""
  if task is None:
    return {}
  base = base_task(task)
  own = dict(config[base].model) if 'model' in config[base] else {}
  return {**own, **probe_tasks.position_keys(config, task)}


def model_config(config, variant: str, task: str | None = None):
  """The encoder's ModelConfig: configs' tiny model, then config.model, then the task's
  own model keys (config.<task>.model), sized to the data."""
  m = sb_config.model_config(variant, 'tiny')
  own = attention_lib.VARIANTS[variant].settings  # The variant's own settings (masa's atoms).
  for key, value in list(config.model.items()) + list(task_model(config, task).items()):
    if key not in m and key in own:
      m[key] = value
      continue
    if key not in m and key in attention_lib.setting_names():
      continue  # Another variant's setting: config.model serves every variant.
    if key not in m:
      raise UserError(f'config.model.{key} is not a model key; known: {", ".join(sorted(m))}')
    if key in ('attention', 'vocab_size', 'max_position_embeddings'):
      raise UserError(f'config.model.{key} is set by the probe (config.variants, '
                      'config.vocab_size, config.seq_len); remove it')
    m[key] = value
  symbols = probe_tasks.num_symbols(base_task(task), config) if task else int(config.vocab_size)
  m.vocab_size = probe_tasks.model_vocab_size(symbols)
  m.max_position_embeddings = int(config.seq_len)
  return ModelConfig.from_config(m)


task_ids = probe_tasks.task_ids
base_task = probe_tasks.base_task
task_config = probe_tasks.task_config
swept = probe_tasks.swept


def num_slots(config) -> int:
  """Prediction slots per row: the most any task needs, so all tasks share one shape."""
  return max(probe_tasks.num_predictions(base_task(t), task_config(config, t))
             for t in task_ids(config))


def learning_rates(config, task_id: str) -> tuple[float, ...]:
  """The rates a task is tried at (seed 0): the sweep's, or config.optim.lr."""
  if swept(config, task_id):
    return tuple(float(lr) for lr in config.lr_sweep.lrs)
  return (float(config.optim.lr),)


def config_hash(config) -> str:
  """What a run's result depends on: every key but those that select runs."""
  d = json.loads(config.to_json_best_effort())
  for key in _RUN_SELECTION_KEYS:
    d.pop(key, None)
  if 'mirror' not in config.tasks:  # Added later: probes without it keep their runs.
    d.pop('mirror', None)
  return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------
# Data: seed s of task t gives the same batches to every variant.

def _task_index(task_id: str) -> int:
  """A number per task id, fixed by its name (so adding a task changes no other's data)."""
  return zlib.crc32(task_id.encode()) & 0xFFFF


def train_chunk(config, task: str, seed: int, chunk: int) -> dict[str, np.ndarray]:
  """The training batches of evaluation interval `chunk`: arrays [K, B, ...]."""
  rng = np.random.default_rng([seed, _task_index(task), 1, chunk])
  k, b = int(config.eval_every_steps), int(config.batch_size)
  batch = probe_tasks.generate(base_task(task), task_config(config, task), rng, k * b,
                               num_slots(config)).as_dict()
  return {name: v.reshape(k, b, *v.shape[1:]) for name, v in batch.items()}


def eval_set(config, task: str, seed: int) -> dict[str, np.ndarray]:
  rng = np.random.default_rng([seed, _task_index(task), 0])
  return probe_tasks.generate(base_task(task), task_config(config, task), rng,
                              int(config.eval_examples), num_slots(config)).as_dict()


# ---------------------------------------------------------------------------------------
# The model and its jitted functions, built once per variant.

def first_layer_scores(model, params, batch):
  """The pointer readout: the first layer's attention logits, averaged over heads, from each
  prediction slot's position to every content token but itself: [B, P, T], non-candidates
  at -1e9. A mean of symmetric score matrices is symmetric, so the task's bound holds."""
  _, state = model.apply({'params': params}, batch['input_ids'], batch['segment_ids'],
                         batch['input_mask'], batch['positions'], deterministic=True,
                         mutable=['attention_logits'])
  sown = {jax.tree_util.keystr(path): leaf for path, leaf in
          jax.tree_util.tree_flatten_with_path(state['attention_logits'])[0]}
  first = [leaf for path, leaf in sown.items() if "'layer_0'" in path]
  if len(first) != 1:
    raise ValueError(f'no single first-layer attention logits among {sorted(sown)}')
  scores = first[0].mean(axis=1)                                         # [B, T, S]
  rows = jnp.take_along_axis(scores, batch['positions'][..., None], axis=1)  # [B, P, S]
  length = batch['input_ids'].shape[1]
  candidate = ((batch['input_ids'] >= probe_tasks.NUM_SPECIAL)[:, None, :]
               & (jnp.arange(length)[None, None, :] != batch['positions'][..., None]))
  return jnp.where(candidate, rows, -1e9)


class Trainer:
  """One variant's model, optimizer and compiled train/eval functions for one learning rate
  (shared by all tasks of the same model: `task` names the one whose own model keys and
  vocabulary it takes)."""

  def __init__(self, config, variant: str, task: str | None = None, lr: float | None = None):

    self.variant = variant
    self.model_cfg = model_config(config, variant, task)
    self.model = model = BertForPretraining(self.model_cfg)
    optim = copy.deepcopy(config.optim)
    if lr is not None:
      optim.lr = float(lr)
    self.tx, _ = optim_lib.make_optimizer(optim, int(config.total_steps))
    pointer = task is not None and base_task(task) in probe_tasks.POINTER_TASKS
    # mirror: a Q = K rotary score ties its two candidates exactly, and float rounding, not
    # the model, would pick one; a tie (within 1e-4 of the scores' size) counts half.
    ties_count_half = task is not None and base_task(task) == 'mirror'
    tx = self.tx
    dropout = self.model_cfg.dropout_rate > 0 or self.model_cfg.attention_dropout_rate > 0
    seq_len, slots = int(config.seq_len), num_slots(config)

    def init(key, dropout_rng):
      ids = jnp.zeros((1, seq_len), jnp.int32)
      params = nn.unbox(model.init({'params': key}, ids, ids,
                                   jnp.ones_like(ids), jnp.zeros((1, slots), jnp.int32))['params'])
      return engine.State(step=jnp.zeros((), jnp.int32), params=params,
                          opt_state=tx.init(params), dropout_rng=dropout_rng)

    def logits_of(params, batch, rng):
      if pointer:
        return first_layer_scores(model, params, batch)
      out = model.apply({'params': params}, batch['input_ids'], batch['segment_ids'],
                        batch['input_mask'], batch['positions'], deterministic=rng is None,
                        rngs=None if rng is None else {'dropout': rng})
      return out['mlm_logits']

    def apply_fn(params, batch, rng):  # Dropout only when the model has some.
      return logits_of(params, batch, rng if dropout else None)

    def loss_fn(logits, batch):
      ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch['labels'])
      w = batch['weights']
      return jnp.sum(ce * w) / jnp.maximum(jnp.sum(w), 1.0)

    # The task engine's step, scanned over a chunk of steps inside one call.
    run_chunk = functools.partial(engine.scanned_steps, apply_fn=apply_fn, tx=tx,
                                  loss_fn=loss_fn)

    def evaluate(params, batch):
      logits = logits_of(params, batch, None)
      correct = (jnp.argmax(logits, -1) == batch['labels']).astype(jnp.float32)
      if ties_count_half:
        label = jnp.take_along_axis(logits, batch['labels'][..., None], -1)[..., 0]
        others = jnp.where(jnp.arange(logits.shape[-1]) == batch['labels'][..., None],
                           -jnp.inf, logits).max(-1)
        tie = jnp.abs(label - others) <= 1e-4 * (1.0 + jnp.abs(label))
        correct = jnp.where(tie, 0.5, correct)
      correct = correct * batch['weights']
      by_kind = [jnp.sum(correct * (batch['kinds'] == k)) for k in range(2)]
      count = [jnp.sum(batch['weights'] * (batch['kinds'] == k)) for k in range(2)]
      return jnp.sum(correct), jnp.sum(batch['weights']), jnp.stack(by_kind), jnp.stack(count)

    self.init = jax.jit(init)
    self.run_chunk = jax.jit(run_chunk, donate_argnums=(0,))
    self.evaluate = jax.jit(evaluate)
    self._rng = jax.random.key

  def train(self, config, task: str, seed: int, eval_data, *, keep_params: bool = False) -> dict:
    """Trains from scratch; returns the accuracy curve and the final figures (and, with
    `keep_params`, the initial and final parameters under 'params')."""
    state = self.init(self._rng(seed), self._rng(10_000 + seed))
    initial = jax.device_get(state.params) if keep_params else None
    every = int(config.eval_every_steps)
    chunks = int(config.total_steps) // every
    curve = [self._eval_point(state.params, eval_data, 0, None)]
    train_s = 0.0
    for c in range(chunks):
      interrupts.check('finished probe runs are kept; the interrupted one starts over')
      data = train_chunk(config, task, seed, c)
      t0 = time.time()
      state, losses = self.run_chunk(state, data)
      losses = np.asarray(losses)
      train_s += time.time() - t0
      curve.append(self._eval_point(state.params, eval_data, (c + 1) * every,
                                    float(np.mean(losses))))
      if not np.all(np.isfinite(losses)):  # Those steps were skipped (the engine's guard).
        logging.warning('probe: %s %s seed %d: %d non-finite step(s) skipped by step %d',
                        self.variant, task, seed, int(np.sum(~np.isfinite(losses))),
                        (c + 1) * every)
    out = {'curve': curve, 'train_s': train_s}
    if keep_params:
      out['params'] = {'init': initial, 'trained': jax.device_get(state.params)}
    return out

  def _eval_point(self, params, eval_data, step: int, train_loss) -> dict:
    correct, total, by_kind, count = (np.asarray(x) for x in self.evaluate(params, eval_data))
    point = {'step': step, 'accuracy': float(correct / total), 'train_loss': train_loss}
    if count[1] > 0:
      point['by_direction'] = {name: float(by_kind[k] / count[k])
                               for k, name in enumerate(probe_tasks.DIRECTIONS)}
    return point


def parameter_counts(model_cfg) -> dict[str, int]:
  counts = params_lib.parameter_counts(model_cfg)
  return {'total': counts['total'], 'encoder': counts['encoder total'],
          'attention': counts['attention QKV'] + counts['attention output'],
          'attention_qkv': counts['attention QKV']}


# ---------------------------------------------------------------------------------------
# Runs, resumable.

@dataclasses.dataclass(frozen=True)
class Job:
  """One training run: a variant on a task id at a learning rate and seed."""
  variant: str
  task: str
  lr: float
  seed: int

  def describe(self) -> str:
    return f'{self.variant} {self.task} lr {self.lr:g} seed {self.seed}'


def run_file(workdir: str, job: Job) -> str:
  return os.path.join(workdir, 'runs', job.variant, job.task,
                      f'lr{job.lr:g}_seed{job.seed}.json')


write_json = jsonio.write_json
read_json = jsonio.read_json


def _load_done(path: str, fingerprint: str) -> dict | None:
  if not os.path.isfile(path):
    return None
  try:
    record = read_json(path)
  except (OSError, json.JSONDecodeError):
    return None
  return record if record.get('config_hash') == fingerprint else None


# Trainers of this process, by (variant, task model, learning rate): a worker compiles each
# once and reuses it for every seed and task of that model.
_TRAINERS: dict = {}


def train_job(config, workdir: str, job: Job, fingerprint: str) -> dict:
  """Trains one run from scratch and writes its file; in any process."""
  base = base_task(job.task)
  cfg = task_config(config, job.task)
  key = (job.variant, base in probe_tasks.POINTER_TASKS, base == 'mirror',
         json.dumps(task_model(config, job.task), sort_keys=True),
         probe_tasks.num_symbols(base, config), job.lr)
  if key not in _TRAINERS:
    _TRAINERS[key] = Trainer(config, job.variant, job.task, job.lr)
    _TRAINERS[key].counts = parameter_counts(_TRAINERS[key].model_cfg)
  trainer = _TRAINERS[key]
  t_run = time.time()
  result = trainer.train(cfg, job.task, job.seed, eval_set(cfg, job.task, job.seed))
  final = result['curve'][-1]
  record = {'variant': job.variant, 'task': job.task, 'lr': job.lr, 'seed': job.seed,
            'config_hash': fingerprint, 'accuracy': final['accuracy'],
            'by_direction': final.get('by_direction'), 'curve': result['curve'],
            'parameters': trainer.counts, 'steps': int(config.total_steps),
            'batch_size': int(config.batch_size), 'wall_s': round(time.time() - t_run, 2),
            'train_s': round(result['train_s'], 2)}
  write_json(run_file(workdir, job), record)
  return record


def choose_lr(config, records: dict, variant: str, task: str) -> float | None:
  """The rate of a swept (variant, task): the highest seed-0 final accuracy; ties go to the
  higher mean accuracy over the curve, then to the rate nearest config.optim.lr. None while
  a rate's seed-0 run is missing."""
  lrs = learning_rates(config, task)
  if len(lrs) == 1:
    return lrs[0]
  done = [records.get(Job(variant, task, lr, 0)) for lr in lrs]
  if any(r is None for r in done):
    return None
  ref = math.log(float(config.optim.lr))

  def rank(item):
    lr, r = item
    area = float(np.mean([p['accuracy'] for p in r['curve']]))
    return (round(r['accuracy'], 9), round(area, 9), -abs(math.log(lr) - ref))
  return max(zip(lrs, done), key=rank)[0]


def plan(config, records: dict) -> tuple[list[Job], dict]:
  """(every run the probe needs now, {(variant, task): chosen rate}). Until a swept task's
  seed-0 runs are all done, its other seeds and derived tasks (mqar_p<N>) wait."""
  jobs, chosen = [], {}
  seeds = range(int(config.seeds))
  for variant in config.variants:
    for task in config.tasks:
      lrs = learning_rates(config, task)
      if len(lrs) > 1:
        jobs += [Job(variant, task, lr, 0) for lr in lrs]
      lr = choose_lr(config, records, variant, task)
      if lr is None:
        continue
      chosen[variant, task] = lr
      jobs += [Job(variant, t, lr, s) for t in task_ids(config) if base_task(t) == task
               for s in seeds]
  return list(dict.fromkeys(jobs)), chosen


def load_records(config, workdir: str) -> dict:
  """{Job: record} of every finished run that the current plan includes."""
  fingerprint = config_hash(config)
  records = {}
  while True:  # The plan grows as the sweep's runs are found.
    jobs, _ = plan(config, records)
    new = {j: r for j in jobs if j not in records
           for r in [_load_done(run_file(workdir, j), fingerprint)] if r is not None}
    if not new:
      return records
    records.update(new)


def run_all(config, workdir: str) -> float:
  """Trains every missing run (the sweep first, then the seeds at the chosen rates);
  returns the wall seconds spent training."""
  fingerprint = config_hash(config)
  workers = int(config.get('workers', 1))
  t_all = time.time()
  progress = {'done': 0, 'seconds': 0.0}
  for phase in ('the learning-rate sweep', 'the seeds at the chosen rates'):
    records = load_records(config, workdir)
    jobs, _ = plan(config, records)
    todo = [j for j in jobs if j not in records]
    if not todo:
      continue
    total = len(todo)
    logging.info('probe: %s: %d runs to do (%d finished), %d at a time', phase, total,
                 len(records), min(workers, total))
    progress.update(done=0, seconds=0.0)
    t_phase = time.time()

    def finished(job, record):
      progress['done'] += 1
      elapsed = time.time() - t_phase
      eta = elapsed / progress['done'] * (total - progress['done'])
      logging.info('probe: %d/%d %s: accuracy %.4f (%.1fs); ETA of this phase %.1f min',
                   progress['done'], total, job.describe(), record['accuracy'],
                   record['wall_s'], eta / 60)

    workers_lib.run_all(todo, train_job, lambda j: (config, workdir, j, fingerprint),
                        workers=workers, on_done=finished,
                        describe=lambda j: f'probe: {j.describe()}')
  return time.time() - t_all


def load_runs(config, workdir: str) -> tuple[dict, dict, dict]:
  """({(variant, task, seed): record} at the chosen rates, {(variant, task): rate},
  {(variant, task): {rate: seed-0 accuracy}}) of the finished runs under this config."""
  records = load_records(config, workdir)
  _, chosen = plan(config, records)
  runs, sweeps = {}, {}
  for (variant, task), lr in chosen.items():
    if len(learning_rates(config, task)) > 1:
      sweeps[variant, task] = {lr_: records[Job(variant, task, lr_, 0)]['accuracy']
                               for lr_ in learning_rates(config, task)}
    for t in task_ids(config):
      if base_task(t) != task:
        continue
      for seed in range(int(config.seeds)):
        if Job(variant, t, lr, seed) in records:
          runs[variant, t, seed] = records[Job(variant, t, lr, seed)]
  return runs, chosen, sweeps


def write_config(config, workdir: str) -> None:
  os.makedirs(workdir, exist_ok=True)
  write_json(os.path.join(workdir, 'config.json'), json.loads(config.to_json_best_effort()))


def command_text(argv: list[str]) -> str:
  """The command line with the workdir as W and paths inside the repository made relative."""
  parts = ['sharedbert probe']
  for arg in argv[1:]:
    if arg.startswith('--workdir'):
      parts.append('--workdir=W')
      continue
    if arg.startswith('--config=') and os.path.isabs(arg[len('--config='):]):
      path = arg[len('--config='):]
      rel = os.path.relpath(path, REPO_ROOT)
      arg = '--config=' + (rel if not rel.startswith('..') else os.path.basename(path))
    parts.append(arg)
  return ' '.join(parts)


def run_probe(config, workdir: str, *, report_only: bool = False, command: str = '') -> str:
  """Runs (or resumes) every run, then writes the report; returns report.md's path."""
  split_lists(config)
  validate(config)
  validation.workdir(workdir)
  workdir = os.path.abspath(os.fspath(workdir))
  load_start = os.getloadavg()[0]
  t0 = time.time()
  timing_path = os.path.join(workdir, 'timing.json')
  if report_only:
    # The timing of the invocation that trained, kept so that a rewritten report keeps it.
    timing = read_json(timing_path) if os.path.isfile(timing_path) else {}
    timing['report_only'] = True
  else:
    write_config(config, workdir)
    train_wall = run_all(config, workdir)
    timing = {'command': command, 'wall_s': round(time.time() - t0, 1),
              'train_wall_s': round(train_wall, 1), 'load_start': round(load_start, 2),
              'load_end': round(os.getloadavg()[0], 2), 'cpu_count': os.cpu_count()}
    write_json(timing_path, timing)
  runs, chosen, sweeps = load_runs(config, workdir)
  # The probe's own model per variant (tasks with their own model keys differ).
  parameters = {v: parameter_counts(model_config(config, v)) for v in config.variants
                if any(r == v for r, _, _ in runs)}
  path = probe_report.write_report(config, workdir, runs, timing, chosen=chosen,
                                   sweeps=sweeps, parameters=parameters)
  logging.info('probe: wrote %s', path)
  return path


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  with one_line_errors('sharedbert probe', FLAGS.verbose, trains=True):
    validation.workdir(FLAGS.workdir)  # Before the compilation cache is put inside it.
  if not jax.config.jax_compilation_cache_dir:
    jax.config.update('jax_compilation_cache_dir', os.path.join(FLAGS.workdir, 'jax_cache'))
    jax.config.update('jax_persistent_cache_min_compile_time_secs', 1.0)
  with one_line_errors('sharedbert probe', FLAGS.verbose, trains=True):
    run_probe(FLAGS.config, FLAGS.workdir, report_only=FLAGS.report_only,
              command=command_text(sys.argv))


def _define_flags():
  config_flags.DEFINE_config_file('config', DEFAULT_CONFIG,
                                  'The probe config (configs/probe.py[:cpu|smoke|gpu]).',
                                  lock_config=True)
  flags.DEFINE_string('workdir', None, 'Where the probe writes everything.')
  flags.DEFINE_bool('report_only', False, 'Only (re)write the report from finished runs.')
  flags.DEFINE_bool('verbose', False, 'Show tracebacks of user errors.')
  flags.mark_flags_as_required(['workdir'])


def cli_main():
  _define_flags()
  app.run(main, flags_parser=cli.flags_parser('sharedbert probe', 'sharedbert.lab.probe'))


if __name__ == '__main__':
  cli_main()
