r"""Attention probes: which abilities each attention variant keeps, on synthetic tasks.

  python -m sharedbert.experiments.probe --workdir=W [--config=configs/probe.py[:cpu|gpu]]

Every variant in config.variants is trained from scratch on every task of
sharedbert.experiments.probe_tasks (MQAR, a directed relation, induction, a majority control) with
seeds 0..seeds-1, through the project's encoder and masked-LM head
(sharedbert.models.bert.BertForPretraining: the prediction slots are its masked positions)
and its optimizer (sharedbert.optim.make_optimizer). Seed s fixes the model's
initialisation, the training batches and the evaluation set, so variants see the same
data and their differences pair up seed by seed.

Workdir layout:
  config.json                          the probe config
  timing.json                          wall time and load of the last invocation that trained
  runs/<variant>/<task>/seed_<s>.json  one training run: accuracy curve, final accuracy,
                                       timings (written atomically; its presence = done)
  summary.json, report.md, curves.png, final.png

A killed probe resumes with the same command: runs whose file exists (and was made under
the same config) are skipped. --report_only rewrites the report from finished runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time

from absl import app
from absl import flags
from absl import logging
import numpy as np

from sharedbert.utils import jsonio
from sharedbert.utils import paths
from sharedbert.experiments import probe_tasks
from sharedbert.errors import UserError, one_line_errors

FLAGS = flags.FLAGS

REPO_ROOT = paths.REPO_ROOT
DEFAULT_CONFIG = os.path.join(REPO_ROOT, 'configs', 'probe.py')

# Keys that choose which runs exist, not what a run computes: changing them keeps results.
_RUN_SELECTION_KEYS = ('variants', 'tasks', 'seeds', 'confidence', 'preset')


# ---------------------------------------------------------------------------------------
# Config.

def validate(config) -> None:
  from sharedbert.models import attention as attention_lib
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
  for variant in variants:
    model_config(config, variant)


def task_model(config, task: str | None) -> dict:
  """A task's own model keys (config.<task>.model, e.g. cyclic's one layer), or {}."""
  if task is None or 'model' not in config[task]:
    return {}
  return dict(config[task].model)


def model_config(config, variant: str, task: str | None = None):
  """The encoder's ModelConfig: configs' tiny model, then config.model, then the task's
  own model keys (config.<task>.model), sized to the data."""
  from sharedbert import config as sb_config
  from sharedbert.models.bert import ModelConfig
  m = sb_config.model_config(variant, 'tiny')
  for key, value in list(config.model.items()) + list(task_model(config, task).items()):
    if key not in m:
      raise UserError(f'config.model.{key} is not a model key; known: {", ".join(sorted(m))}')
    if key in ('attention', 'vocab_size', 'max_position_embeddings'):
      raise UserError(f'config.model.{key} is set by the probe (config.variants, '
                      'config.vocab_size, config.seq_len); remove it')
    m[key] = value
  m.vocab_size = probe_tasks.model_vocab_size(config.vocab_size)
  m.max_position_embeddings = int(config.seq_len)
  return ModelConfig.from_config(m)


def num_slots(config) -> int:
  """Prediction slots per row: the most any task needs, so all tasks share one shape."""
  return max(probe_tasks.num_predictions(t, config) for t in config.tasks)


def config_hash(config) -> str:
  """What a run's result depends on: every key but those that select runs."""
  d = json.loads(config.to_json_best_effort())
  for key in _RUN_SELECTION_KEYS:
    d.pop(key, None)
  return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------
# Data: seed s of task t gives the same batches to every variant.

def _task_index(task: str) -> int:
  return probe_tasks.TASKS.index(task)


def train_chunk(config, task: str, seed: int, chunk: int) -> dict[str, np.ndarray]:
  """The training batches of evaluation interval `chunk`: arrays [K, B, ...]."""
  rng = np.random.default_rng([seed, _task_index(task), 1, chunk])
  k, b = int(config.eval_every_steps), int(config.batch_size)
  batch = probe_tasks.generate(task, config, rng, k * b, num_slots(config)).as_dict()
  return {name: v.reshape(k, b, *v.shape[1:]) for name, v in batch.items()}


def eval_set(config, task: str, seed: int) -> dict[str, np.ndarray]:
  rng = np.random.default_rng([seed, _task_index(task), 0])
  return probe_tasks.generate(task, config, rng, int(config.eval_examples),
                              num_slots(config)).as_dict()


# ---------------------------------------------------------------------------------------
# The model and its jitted functions, built once per variant.

class Trainer:
  """One variant's model, optimizer and compiled train/eval functions (shared by all tasks
  of the same model: `task` names the one whose own model keys it takes)."""

  def __init__(self, config, variant: str, task: str | None = None):
    import functools
    import jax
    import jax.numpy as jnp
    import optax
    import flax.linen as nn
    from sharedbert import optim as optim_lib
    from sharedbert.models.bert import BertForPretraining
    from sharedbert.tasks import engine

    self.variant = variant
    self.model_cfg = model_config(config, variant, task)
    self.model = model = BertForPretraining(self.model_cfg)
    self.tx, _ = optim_lib.make_optimizer(config.optim, int(config.total_steps))
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
      correct = (jnp.argmax(logits, -1) == batch['labels']) * batch['weights']
      by_kind = [jnp.sum(correct * (batch['kinds'] == k)) for k in range(2)]
      count = [jnp.sum(batch['weights'] * (batch['kinds'] == k)) for k in range(2)]
      return jnp.sum(correct), jnp.sum(batch['weights']), jnp.stack(by_kind), jnp.stack(count)

    self.init = jax.jit(init)
    self.run_chunk = jax.jit(run_chunk, donate_argnums=(0,))
    self.evaluate = jax.jit(evaluate)
    self._rng = jax.random.key

  def train(self, config, task: str, seed: int, eval_data) -> dict:
    """Trains from scratch; returns the accuracy curve and the final figures."""
    state = self.init(self._rng(seed), self._rng(10_000 + seed))
    every = int(config.eval_every_steps)
    chunks = int(config.total_steps) // every
    curve = [self._eval_point(state.params, eval_data, 0, None)]
    train_s = 0.0
    for c in range(chunks):
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
    return {'curve': curve, 'train_s': train_s}

  def _eval_point(self, params, eval_data, step: int, train_loss) -> dict:
    correct, total, by_kind, count = (np.asarray(x) for x in self.evaluate(params, eval_data))
    point = {'step': step, 'accuracy': float(correct / total), 'train_loss': train_loss}
    if count[1] > 0:
      point['by_direction'] = {name: float(by_kind[k] / count[k])
                               for k, name in enumerate(probe_tasks.DIRECTIONS)}
    return point


def parameter_counts(model_cfg) -> dict[str, int]:
  from sharedbert.models import params as params_lib
  counts = params_lib.parameter_counts(model_cfg)
  return {'total': counts['total'], 'encoder': counts['encoder total'],
          'attention': counts['attention QKV'] + counts['attention output'],
          'attention_qkv': counts['attention QKV']}


# ---------------------------------------------------------------------------------------
# Runs, resumable.

def run_file(workdir: str, variant: str, task: str, seed: int) -> str:
  return os.path.join(workdir, 'runs', variant, task, f'seed_{seed}.json')


write_json = jsonio.write_json
read_json = jsonio.read_json


def _done(path: str, fingerprint: str) -> bool:
  if not os.path.isfile(path):
    return False
  try:
    return read_json(path).get('config_hash') == fingerprint
  except (OSError, json.JSONDecodeError):
    return False


def run_all(config, workdir: str) -> float:
  """Trains every missing (variant, task, seed); returns the wall seconds spent training."""
  fingerprint = config_hash(config)
  seeds = range(int(config.seeds))
  eval_cache = {}
  t_all = time.time()
  for variant in config.variants:
    todo = [(t, s) for t in config.tasks for s in seeds
            if not _done(run_file(workdir, variant, t, s), fingerprint)]
    if not todo:
      logging.info('probe: %s: all runs finished', variant)
      continue
    t0 = time.time()
    trainers = {}  # One per distinct task model (most tasks share the probe's model).
    for task, seed in todo:
      key = json.dumps(task_model(config, task), sort_keys=True)
      if key not in trainers:
        trainers[key] = Trainer(config, variant, task)
        trainers[key].counts = parameter_counts(trainers[key].model_cfg)
      trainer = trainers[key]
      counts = trainer.counts
      if (task, seed) not in eval_cache:
        eval_cache[task, seed] = eval_set(config, task, seed)
      t_run = time.time()
      result = trainer.train(config, task, seed, eval_cache[task, seed])
      final = result['curve'][-1]
      record = {'variant': variant, 'task': task, 'seed': seed, 'config_hash': fingerprint,
                'accuracy': final['accuracy'], 'by_direction': final.get('by_direction'),
                'curve': result['curve'], 'parameters': counts,
                'steps': int(config.total_steps), 'batch_size': int(config.batch_size),
                'wall_s': round(time.time() - t_run, 2), 'train_s': round(result['train_s'], 2)}
      write_json(run_file(workdir, variant, task, seed), record)
      logging.info('probe: %s %s seed %d: accuracy %.4f (%.1fs)', variant, task, seed,
                   record['accuracy'], record['wall_s'])
    logging.info('probe: %s done in %.0fs', variant, time.time() - t0)
  return time.time() - t_all


def load_runs(config, workdir: str) -> dict:
  """{(variant, task, seed): record} of the finished runs under this config."""
  fingerprint = config_hash(config)
  runs = {}
  for variant in config.variants:
    for task in config.tasks:
      for seed in range(int(config.seeds)):
        path = run_file(workdir, variant, task, seed)
        if _done(path, fingerprint):
          runs[variant, task, seed] = read_json(path)
  return runs


def write_config(config, workdir: str) -> None:
  os.makedirs(workdir, exist_ok=True)
  write_json(os.path.join(workdir, 'config.json'), json.loads(config.to_json_best_effort()))


def command_text(argv: list[str]) -> str:
  """The command line with the workdir as W and paths inside the repository made relative."""
  parts = ['python -m sharedbert.experiments.probe']
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
  from sharedbert.experiments import probe_report
  from sharedbert.config import validation
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
  path = probe_report.write_report(config, workdir, load_runs(config, workdir), timing)
  logging.info('probe: wrote %s', path)
  return path


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  import jax
  from sharedbert.config import validation
  with one_line_errors('sharedbert probe', FLAGS.verbose):
    validation.workdir(FLAGS.workdir)  # Before the compilation cache is put inside it.
  if not jax.config.jax_compilation_cache_dir:
    jax.config.update('jax_compilation_cache_dir', os.path.join(FLAGS.workdir, 'jax_cache'))
    jax.config.update('jax_persistent_cache_min_compile_time_secs', 1.0)
  with one_line_errors('sharedbert probe', FLAGS.verbose):
    run_probe(FLAGS.config, FLAGS.workdir, report_only=FLAGS.report_only,
              command=command_text(sys.argv))


def _define_flags():
  from ml_collections import config_flags
  config_flags.DEFINE_config_file('config', DEFAULT_CONFIG,
                                  'The probe config (configs/probe.py[:cpu|gpu]).',
                                  lock_config=True)
  flags.DEFINE_string('workdir', None, 'Where the probe writes everything.')
  flags.DEFINE_bool('report_only', False, 'Only (re)write the report from finished runs.')
  flags.DEFINE_bool('verbose', False, 'Show tracebacks of user errors.')
  flags.mark_flags_as_required(['workdir'])


if __name__ == '__main__':
  _define_flags()
  from sharedbert import cli
  app.run(main, flags_parser=cli.flags_parser('sharedbert probe', 'sharedbert.experiments.probe'))
