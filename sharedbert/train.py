"""Masked-LM pretraining: `train_and_evaluate(config, workdir)`.

Importable from a notebook. The flow is: config -> preflight (every check, nothing
written) -> the jitted step compiled once on the mesh -> the state, restored from the
latest good checkpoint or new, placed by logical axis rules -> the data (vocabulary
learned or reused, input pipelines) -> the loop (metrics, held-out evaluations and
checkpoints in the workdir) -> summary.

WORKDIR layout: config.json, vocab.model, metrics.jsonl, tensorboard/, checkpoints/<step>/.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import time
from typing import Any

from absl import logging
import flax.linen as nn
import jax
import numpy as np
import tensorflow as tf

from sharedbert import checkpoint as checkpoint_lib
from sharedbert.utils import jsonio
from sharedbert import optim as optim_lib
from sharedbert import sharding
from sharedbert import interrupts
from sharedbert.config import checks as config_checks
from sharedbert.config import validation
from sharedbert.utils import workdir as workdir_lib
from sharedbert.utils import reporting
from sharedbert.utils import workdir_lock
from sharedbert.data import sources
from sharedbert.data import tokenizer as tokenizer_lib
from sharedbert.data.pretrain import PretrainData, majority_baseline, max_predictions, prefetch
from sharedbert import errors
from sharedbert.errors import UserError
from sharedbert.utils.metric_writer import MetricWriter
from sharedbert.models import attention as attention_lib
from sharedbert.models.bert import BertForPretraining, ModelConfig, position_embeddings_value
from sharedbert.optim import all_finite
from sharedbert.pretrain_step import (compile_train_step, create_train_state, jit_steps,
                                      restore_state, state_shardings)
from sharedbert.runs import Restored

_sync = workdir_lib.sync  # The hosts' meeting points (sharedbert/utils/workdir.py).

PREEMPTED_EXIT_CODE = interrupts.PREEMPTED_EXIT_CODE      # SIGTERM: a scheduler may restart.
INTERRUPTED_EXIT_CODE = interrupts.INTERRUPTED_EXIT_CODE  # Ctrl-C, saved like a preemption.
DIVERGED_EXIT_CODE = errors.DIVERGED_EXIT_CODE  # Non-finite steps: restarting will not help.


class Preempted(interrupts.Stopped):
  """Raised after the checkpoint at a preemption (SIGTERM) or a Ctrl-C (SIGINT) has been
  saved; `signum` says which."""


# ---------------------------------------------------------------------------------------
# The loop.

def _mean_metrics(history: list[dict]) -> dict:
  # float64, so that values restored from a checkpoint's JSON average exactly as on device.
  stacked = jax.device_get(history)
  keys = [k for k in stacked[-1] if all(k in h for h in stacked)]
  return {k: float(np.mean(np.asarray([h[k] for h in stacked], np.float64))) for k in keys}


def evaluate(eval_fn, params, batches, mesh) -> dict:
  """Held-out MLM loss and accuracy over `batches` (sums over every masked token, then
  divided).

  Args:
    eval_fn: the jitted eval step (pretrain_step.jit_steps): (params, batch) -> sums.
    params: the model's parameters.
    batches: this process's held-out batches (dicts of numpy arrays, as mask_rows makes).
    mesh: the device mesh they are assembled on.
  Returns:
    {'eval_loss', 'eval_mlm_accuracy', 'eval_majority_accuracy', 'eval_masked_tokens'}.
  """
  sums = {'loss_sum': 0.0, 'weight': 0.0, 'correct': 0.0}
  for b in batches:
    out = jax.device_get(eval_fn(params, sharding.global_batch(b, mesh)))
    for k in sums:
      sums[k] += float(out[k])
  w = max(sums['weight'], 1.0)
  return {'eval_loss': sums['loss_sum'] / w, 'eval_mlm_accuracy': sums['correct'] / w,
          'eval_majority_accuracy': majority_baseline(batches),
          'eval_masked_tokens': int(sums['weight'])}


def _check_compatible(meta: dict, model_cfg: ModelConfig, workdir: str):
  saved = dict(meta.get('model', {}))
  current = model_cfg.to_dict()
  # Settings that change the parameter tree (or its meaning) must match to resume; a
  # variant's own settings (its class's config_keys) only for that variant, as resolved
  # (masa: 0 atoms means ceil(L/3), so 0 and its value are the same model).
  keys = ['attention', 'vocab_size', 'hidden_size', 'num_layers', 'num_heads', 'mlp_dim',
          'max_position_embeddings', 'type_vocab_size', 'pre_layer_norm',
          'position_embeddings', 'rope_theta', 'rope_query_phase']
  if 'position_embeddings' in saved:  # A workdir from before rotary saved a boolean.
    saved['position_embeddings'] = position_embeddings_value(
        saved['position_embeddings'])
  variant = attention_lib.VARIANTS[model_cfg.attention]
  keys += list(dict.fromkeys(list(variant.config_keys) + list(variant.settings)))
  saved.update(variant.resolved_settings(saved))
  current.update(variant.resolved_settings(current))
  diffs = [f'{k}: checkpoint {saved.get(k)!r} vs config {current.get(k)!r}'
           for k in keys if k in saved and saved.get(k) != current.get(k)]
  if diffs:
    raise UserError(f'the checkpoint in {workdir} is of another model ({"; ".join(diffs)}); '
                    'use another --workdir, or pass --config.restart=True to set the old '
                    'run aside and start over')


def data_identity(config) -> dict:
  """What makes a run's data: the corpus (a local path resolved) and its held-out share.
  Saved with every checkpoint; a resume on other data is refused (_check_same_data).

  Args:
    config: the run's config.
  Returns:
    {'corpus', 'eval_fraction'}.
  """
  corpus = str(config.data.corpus)
  if corpus and corpus != 'demo' and not corpus.startswith('tfds:') and '://' not in corpus:
    corpus = os.path.realpath(os.path.expanduser(corpus))
  return {'corpus': corpus, 'eval_fraction': float(config.data.eval_fraction)}


def _check_same_data(meta: dict, config, workdir: str):
  saved = meta.get('data')
  if saved is None:  # Checkpoints from before the data was recorded, or imported ones.
    return
  now = data_identity(config)
  diffs = [f'{k}: checkpoint {saved.get(k)!r} vs config {now[k]!r}' for k in now
           if k in saved and saved[k] != now[k]]
  if diffs:
    raise UserError(f'the checkpoint in {workdir} was trained on other data ({"; ".join(diffs)}): '
                    'resuming would keep its vocabulary and change the held-out set mid-curve; '
                    'use another --workdir, or pass --config.restart=True to set the old run '
                    'aside and start over')


# What a run leaves in its workdir; config.restart moves these of the old run aside.
RUN_OUTPUTS = (checkpoint_lib.CHECKPOINT_DIR, 'metrics.jsonl', 'tensorboard',
               *tokenizer_lib.VOCAB_FILES, 'config.json', 'summary.json')


def _set_aside_old_run(workdir: str):
  dst = os.path.join(workdir, f'replaced-{time.strftime("%Y%m%d-%H%M%S")}')
  tf.io.gfile.makedirs(dst)
  for name in RUN_OUTPUTS:
    if tf.io.gfile.exists(os.path.join(workdir, name)):
      tf.io.gfile.rename(os.path.join(workdir, name), os.path.join(dst, name))
  logging.warning('config.restart: moved the incompatible old run to %s; starting over', dst)


def _check_corpus(d):
  """Fails on a corpus that is missing, empty or not text, or a tfds dataset that is not
  prepared. Local corpora are read here and again by the pipeline: small, by design."""
  if sources.is_tfds(d.corpus):
    sources.open_tfds_split(sources.tfds_builder(d.corpus, d.tfds_data_dir), 'train')
  elif d.corpus != 'demo':
    docs = sources.in_memory_documents(d.corpus)
    for split in ('train', 'eval'):
      sources.split_documents(docs, split, d.eval_fraction)


@dataclasses.dataclass(frozen=True)
class Plan:
  """What a checked pretraining run needs (preflight): the model's config, built once,
  the device mesh and its logical axis rules, and whether an incompatible old run in the
  workdir is to be set aside (config.restart)."""
  model_cfg: ModelConfig
  mesh: Any
  axis_rules: Any
  set_aside_old_run: bool = False


def preflight(config, workdir: str | None = None) -> Plan:
  """Every check of a pretraining run that a user's mistake can fail, before anything is
  written: the config's values (model, data, optimizer; config/checks.py), the mesh and
  the batch's split over it, the corpus, and with `workdir` its path and what it holds
  (check_workdir; only read).

  Args:
    config: the pretraining config.
    workdir: the run's --workdir, or None to check the config alone.
  Returns:
    The run's Plan: its ModelConfig, mesh and axis rules, and whether an old run is set
    aside.
  Raises:
    UserError: one line saying what to change.
  """
  model_cfg = config_checks.pretrain(config)
  mesh = sharding.make_mesh(config.mesh)
  if config.data.batch_size % sharding.data_parallel_size(mesh):
    raise UserError(f'data.batch_size={config.data.batch_size} is not divisible by the '
                    f'data-parallel size {sharding.data_parallel_size(mesh)} (mesh.data * '
                    'mesh.fsdp); choose a batch size that is a multiple of it')
  _check_corpus(config.data)
  set_aside = False
  if workdir is not None:
    validation.workdir(workdir)
    set_aside = check_workdir(config, workdir, model_cfg)
  return Plan(model_cfg, mesh, sharding.rules(config), set_aside)


def check_workdir(config, workdir: str, model_cfg: ModelConfig | None = None) -> bool:
  """Checks what the workdir holds against the config, before anything is written.

  Args:
    config: the pretraining config.
    workdir: the run's --workdir.
    model_cfg: the config's model (built from config.model when not given).
  Returns:
    True when the old run must be set aside: its checkpoint is of another model and
    config.restart is set (without config.restart that is a UserError).
  """
  if model_cfg is None:
    model_cfg = ModelConfig.from_config(config.model)
  if tf.io.gfile.exists(checkpoint_lib.checkpoint_dir(workdir)):
    reader = checkpoint_lib.Checkpointer(workdir, None, read_only=True)
    try:
      found = reader.latest_meta()
    finally:
      reader.close()
    if found is not None:
      try:
        _check_compatible(found[1], model_cfg, workdir)
        _check_same_data(found[1], config, workdir)
      except UserError:
        if not config.restart:
          raise
        return True
  vocab = tokenizer_lib.load_workdir(workdir) if tf.io.gfile.isdir(workdir) else None
  if vocab is not None:
    pieces = vocab.vocab_size
    if pieces > config.model.vocab_size:
      raise UserError(f'the vocabulary ({vocab.kind}) of {workdir} has {pieces} pieces but '
                      f'model.vocab_size is {config.model.vocab_size}; raise model.vocab_size '
                      'or use another --workdir')
  return False


def train_and_evaluate(config, workdir: str) -> dict:
  """Pretrains per `config`, writing everything under `workdir`; returns the last metrics.

  Every check that a user's mistake can fail runs first (preflight), so a bad input
  leaves the workdir as it was. Process 0 holds the workdir's lock while the run lives.

  Args:
    config: a pretraining config (configs/<variant>_base.py's `get_config`).
    workdir: where config.json, vocab.model, metrics.jsonl, tensorboard/ and checkpoints/
      go (local or gs://); a run there resumes.
  Returns:
    The last logged metrics (loss, accuracy, eval_* at the last evaluation), or
    {'step': s} when the checkpoint was already at total_steps.
  Raises:
    UserError: bad input (before anything is written). errors.Diverged: non-finite steps.
    interrupts.Stopped: a signal, after the checkpoint at the current step was saved.
  """
  workdir = os.fspath(workdir)
  plan = preflight(config, workdir)  # Only reads, so a refusal leaves no lock file.
  with workdir_lock.hold(workdir, enabled=jax.process_index() == 0):
    # Ctrl-C or SIGTERM before the first step (vocabulary, state, compilation) stops the
    # run cleanly where it is: nothing was trained, so nothing is saved.
    with interrupts.StepFlag(enabled=jax.process_count() == 1) as early:
      return _train(config, workdir, plan, early=early)


# ---------------------------------------------------------------------------------------
# A checked run, in the order it happens: the step compiled on the mesh -> the state
# (restored or new) -> the data (workdir, vocabulary, pipelines) -> the loop -> the end.

@dataclasses.dataclass(frozen=True)
class _Steps:
  """The model and its steps, compiled on the mesh (a run's first phase)."""
  model: BertForPretraining
  tx: Any
  shardings: Any
  compiled: Any   # The train step, compiled once.
  eval_fn: Any
  init_rng: Any


@dataclasses.dataclass(frozen=True)
class _Start:
  """Where the loop starts: the state and its step, the per-step metrics since the last log
  line (saved with the checkpoint), and the damaged steps skipped on the way to it."""
  state: Any
  step: int = 0
  pending_metrics: tuple = ()
  damaged_steps: tuple = ()


def _compile_steps(config, plan: Plan) -> _Steps:
  """Builds the model and optimizer and compiles the train step on the plan's mesh. Runs
  before anything is written, so that a step that cannot fit is refused first."""
  d = config.data
  model = BertForPretraining(plan.model_cfg)
  tx, schedule = optim_lib.make_optimizer(config.optim, config.total_steps)
  init_rng, dropout_rng = jax.random.split(jax.random.key(config.seed))
  shardings = state_shardings(model, tx, plan.mesh, plan.axis_rules, d.seq_len,
                              max_predictions(d))
  step_fn, eval_fn = jit_steps(model, tx, schedule, plan.mesh, shardings, dropout_rng,
                               config.optim.grad_accum_steps)
  compiled = compile_train_step(step_fn, model, tx, shardings, d, plan.mesh, plan.axis_rules)
  return _Steps(model, tx, shardings, compiled, eval_fn, init_rng)


def _initial_state(config, workdir: str, plan: Plan, steps: _Steps) -> _Start:
  """The latest good checkpoint of `workdir` restored onto the mesh (from either layer
  layout), or a new state. Only reads: the damaged steps it skips are moved aside by the
  caller once the data is open, and an old run that the plan sets aside is not read."""
  d = config.data
  directory = checkpoint_lib.checkpoint_dir(workdir)
  if not plan.set_aside_old_run and tf.io.gfile.exists(directory):
    reader = checkpoint_lib.Checkpointer(workdir, None, read_only=True)
    try:
      if reader.latest_step() is not None:
        state, meta, restored = restore_state(
            reader, plan.model_cfg, steps.tx, plan.mesh, plan.axis_rules, steps.shardings,
            d.seq_len, max_predictions(d))
        start_step = int(meta['data_position'])
        logging.info('Resuming from the checkpoint at step %d in %s', restored, directory)
        # Batches and dropout are functions of (seed, batch size, step): other values
        # resume the training, but not the original run's sequence.
        for key, now in (('seed', config.seed), ('batch_size', d.batch_size)):
          if meta.get(key, now) != now:
            logging.warning('the checkpoint was made with %s=%s and this run has %s=%s: '
                            'from step %d on, batches and dropout differ from the original '
                            'run', key, meta[key], key, now, start_step)
        return _Start(state, start_step, tuple(meta.get('pending_metrics', [])),
                      tuple(reader.damaged_steps))
    finally:
      reader.close()
  logging.info('Starting a new run in %s', workdir)
  state, _ = create_train_state(steps.model, steps.tx, steps.init_rng, plan.mesh,
                                plan.axis_rules, d.seq_len, max_predictions(d))
  return _Start(state)


def _open_data(config, workdir: str, plan: Plan, is_chief: bool) -> PretrainData:
  """The workdir made (an incompatible old run set aside when the plan says so), the
  vocabulary learned or reused, the pipelines opened, and config.json written. It comes
  before any checkpoint is touched, so a refusal here leaves the checkpoints as they were."""
  tf.io.gfile.makedirs(workdir)
  if plan.set_aside_old_run and is_chief:
    _set_aside_old_run(workdir)
  _sync('set_aside_old_run')
  # The block of every global batch whose rows this process's devices hold.
  block_index, block_count = sharding.process_batch_block(plan.mesh)
  data = PretrainData(
      config, os.path.join(workdir, 'vocab.model'), process_index=block_index,
      process_count=block_count, is_vocab_writer=is_chief,
      wait_for_vocab=lambda: _sync('vocab'))
  if is_chief:
    workdir_lib.write_config(config, workdir)
  return data


def _train(config, workdir: str, plan: Plan, *, early=None) -> dict:
  """The run of a checked config (`plan`, from preflight): mesh -> state -> data -> loop
  -> summary. Returns the last metrics."""
  is_chief = jax.process_index() == 0
  mesh, model_cfg = plan.mesh, plan.model_cfg
  for note in (model_cfg.attention_impl_note(),
               optim_lib.clamp_note(config.optim, config.total_steps)):
    if note:
      logging.warning(note)
  steps = _compile_steps(config, plan)
  start = _initial_state(config, workdir, plan, steps)
  if start.step >= config.total_steps:
    # A command that does nothing writes nothing: config.json (which model cards and
    # exports read) keeps describing the run that made the checkpoints.
    logging.info('Nothing to do: the checkpoint is at step %d and total_steps is %d; the '
                 'workdir is left as it is', start.step, config.total_steps)
    return {'step': start.step}
  data = _open_data(config, workdir, plan, is_chief)
  if is_chief:
    checkpoint_lib.set_aside_damaged(workdir, list(start.damaged_steps))
  _sync('restored')  # Every process opens the checkpoints once the damaged are aside.
  ckpt = checkpoint_lib.Checkpointer(workdir, config.ckpt)

  n_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(start.state.params))
  logging.info('Model: %s attention, %s parameters; mesh %s; %d devices, %d processes',
               model_cfg.attention, f'{n_params:,}', dict(mesh.shape), jax.device_count(),
               jax.process_count())
  writer = MetricWriter(workdir, enabled=is_chief, resume_step=start.step)
  if early is not None and early.raised:
    ckpt.close()
    what = 'interrupted' if early.signum == signal.SIGINT else 'preempted'
    raise Preempted(f'{what} before the first step: nothing to save; run the same command '
                    'to start', early.signum)

  run_start = time.time()
  state, last = _loop(config, plan, steps, start, data, ckpt, writer, early)
  ckpt.wait()
  ckpt.close()
  writer.close()
  last['step'] = config.total_steps
  if is_chief:
    examples = _fill_mask_examples(config, steps.model, state.params, data.tokenizer, mesh,
                                   plan.axis_rules) if jax.process_count() == 1 else []
    write_summary(workdir, last, examples, train_seconds=time.time() - run_start)
  return last


def _loop(config, plan: Plan, steps: _Steps, start: _Start, data: PretrainData, ckpt,
          writer, early) -> tuple[Any, dict]:
  """Trains from `start` to config.total_steps: logs, evaluates, saves on schedule and at
  a preemption; stops on a non-finite streak or a failed write. Returns (state, the last
  metrics).

  Longer than the house's ~80 lines on purpose: its helpers (save, check_streak, stop)
  are closures over the state, the non-finite streak, the checkpointer and the metric
  writer, which the loop updates step by step; as separate functions they would pass that
  state back and forth at every step.
  """
  mesh, d = plan.mesh, config.data
  compiled, eval_fn = steps.compiled, steps.eval_fn
  state, start_step = start.state, start.step
  batches = prefetch(data.train.batches(start_step))
  tokens_per_step = d.batch_size * d.seq_len
  meta = {'model': plan.model_cfg.to_dict(), 'vocab_size': data.tokenizer.vocab_size,
          'seed': config.seed, 'batch_size': d.batch_size, 'data': data_identity(config)}
  last = {}
  signals = (contextlib.nullcontext(early) if early is not None
             else interrupts.StepFlag(enabled=jax.process_count() == 1))
  with jax.set_mesh(mesh), nn.logical_axis_rules(plan.axis_rules), signals as sigterm:
    first = sharding.global_batch(next(batches), mesh)
    history = list(start.pending_metrics)
    interval_start, interval_steps = time.time(), 0
    batch = first
    # Consecutive non-finite (skipped) steps. Each step's flag is read once the next step
    # is queued, so that checking every step never leaves the device idle.
    streak = int(jax.device_get(state.skipped))
    unread_flag = None

    def stop(error: Exception):
      try:
        ckpt.wait()
        ckpt.close()
      except checkpoint_lib.WriteFailed as failed:  # Said as well; the error is `error`.
        logging.error('%s', failed)
      writer.close()
      raise error

    def record(step_done, values, **kwargs):
      """Writes metrics; one that cannot be written stops the run (after the save in
      flight, a good one, is finished)."""
      try:
        writer.write(step_done, values, **kwargs)
      except checkpoint_lib.WriteFailed as e:
        stop(e)

    def kept() -> str:
      ckpt.wait()
      good = ckpt.latest_step()
      return (f'the last good checkpoint (step {good}) is kept in {ckpt.directory}'
              if good is not None else 'no checkpoint was saved')

    def check_streak(step_done):
      nonlocal streak, unread_flag
      if unread_flag is None:
        return
      streak = streak + 1 if float(unread_flag) else 0
      unread_flag = None
      if streak >= config.optim.max_skipped_steps:
        stop(errors.Diverged(
            f'{streak} consecutive steps (up to step {step_done}) had a non-finite loss, '
            f'gradient or update, optim.max_skipped_steps={config.optim.max_skipped_steps}; '
            f'stopped, and {kept()}. Lower optim.lr (or check the data), then run again to '
            'resume'))

    def save(done) -> bool:
      """Saves the state of step `done`, unless it is inside a run of non-finite steps."""
      check_streak(done)  # This step's flag: the save waits for the step anyway.
      if streak:
        # Keep the last good checkpoint: none from inside a run of non-finite steps.
        logging.warning('not saving the checkpoint of step %d: the last %d step(s) were '
                        'non-finite', done, streak)
        return False
      if not bool(jax.device_get(all_finite((state.params, state.opt_state)))):
        # Skipped updates keep the state finite; this guards whatever slips past them.
        stop(errors.Diverged(
            f'the parameters or optimizer state at step {done} are not finite: not '
            f'saved, and {kept()}. Lower optim.lr (or check the data), then run '
            'again to resume'))
      # The metrics since the last log line go along, so that the first log line after a
      # resume averages the same steps as an uninterrupted run.
      pending = [{k: float(v) for k, v in m.items()} for m in jax.device_get(history)]
      ckpt.save(done, state, {**meta, 'data_position': done, 'pending_metrics': pending},
                force=True)
      return True

    for step in range(start_step, config.total_steps):
      # A failed asynchronous save stops the run here, before another step (WriteFailed).
      ckpt.poll()
      if step > start_step:
        batch = sharding.global_batch(next(batches), mesh)
      state, metrics = compiled(state, batch)
      check_streak(step)  # The previous step's.
      unread_flag = metrics['skipped']
      history.append(metrics)
      interval_steps += 1
      done = step + 1
      final = done == config.total_steps
      if final:
        check_streak(done)
      if done % config.log_every_steps == 0 or final:
        last = _mean_metrics(history)
        history = []
        elapsed = time.time() - interval_start
        step_time = elapsed / interval_steps
        last.update(tokens_per_sec=tokens_per_step / step_time, step_time=step_time,
                    skipped_total=int(jax.device_get(state.skipped_total)))
        eta = (config.total_steps - done) * step_time
        record(done, last, extra=f' eta={reporting.duration(eta)}')
        interval_start, interval_steps = time.time(), 0
      if done % config.eval_every_steps == 0 or final:
        ev = evaluate(eval_fn, state.params, data.eval_batches, mesh)
        record(done, ev, prefix='eval')
        last.update(ev)
      preempted = sigterm.raised or ckpt.reached_preemption(done)
      saved = False
      if ckpt.should_save(done) or final or preempted:
        saved = save(done)
      if preempted:
        what = {signal.SIGINT: 'interrupted', signal.SIGHUP: 'stopped by SIGHUP'}.get(
            sigterm.signum, 'preempted')
        stop(Preempted(f'{what} at step {done}; checkpoint saved in {ckpt.directory}; run '
                       'the same command to resume' if saved else f'{what} at step {done}, '
                       f'inside {streak} non-finite step(s): not saved, and {kept()}; run '
                       'again to resume from it', sigterm.signum or signal.SIGTERM))
      if final and not saved:
        # The run ends without a good state: that is not success.
        stop(errors.Diverged(f'the last {streak} step(s) (up to step {done}, the last) had a '
                      f'non-finite loss, gradient or update: the final state was not saved, '
                      f'and {kept()}. Lower optim.lr (or check the data), then run again to '
                      'resume'))
  return state, last


def _fill_mask_examples(config, model, params, tokenizer, mesh, axis_rules) -> list[dict]:
  """`fill_mask` on the config's fixed sentences (`fill_mask_examples`): a look at whether
  the model uses context. Returns [{'text', 'top': [(token, probability), ...]}]."""
  sentences = list(config.get('fill_mask_examples', ()) or ())
  if not sentences:
    return []
  run = Restored(model=model, params=params, tokenizer=tokenizer, config=config, mesh=mesh,
                 step=config.total_steps, axis_rules=axis_rules)
  examples = []
  for text in sentences:
    top = run.fill_mask(text, top_k=3)
    top = top if isinstance(top[0], dict) else top[0]  # The first [MASK] of several.
    examples.append({'text': text, 'top': [(t['token'], round(t['score'], 4)) for t in top]})
    logging.info('fill_mask %r -> %s', text,
                 ', '.join(f'{tok!r} {p:.2f}' for tok, p in examples[-1]['top']))
  return examples


def write_summary(workdir: str, last: dict, examples: list[dict], train_seconds: float):
  """WORKDIR/summary.json: the final held-out figures beside the floor to beat, printed too.

  Args:
    workdir: the run's --workdir.
    last: the last logged metrics (train_and_evaluate's).
    examples: fill_mask answers on fixed sentences.
    train_seconds: the wall time of the training loop.
  Returns:
    None: it writes the file and logs the accuracy beside the floor.
  """
  summary = {k: last[k] for k in ('step', 'eval_mlm_accuracy', 'eval_majority_accuracy',
                                  'eval_masked_tokens', 'eval_loss', 'loss') if k in last}
  summary['train_seconds'] = round(train_seconds, 1)
  summary['fill_mask'] = examples
  path = os.path.join(workdir, 'summary.json')
  jsonio.write_json(path, summary, indent=2)
  if 'eval_mlm_accuracy' in last:
    logging.info('Held-out MLM accuracy %.4f on %d masked tokens; always predicting the most '
                 'frequent token (the floor) scores %.4f. Written to %s',
                 last['eval_mlm_accuracy'], last.get('eval_masked_tokens', 0),
                 last['eval_majority_accuracy'], path)
