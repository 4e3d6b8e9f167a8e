"""The pretraining state and step: the train state placed on the mesh from the logical
axis names (created, or restored from a checkpoint in either layer layout), the masked-LM
loss, the jitted train step (gradient accumulation, non-finite steps skipped and counted,
the schedule's rate as applied) and the eval step, and the step compiled once with its
memory checked against the device's (compile_train_step). sharedbert.train runs the loop;
the benchmarks and the conversions build the same step from here."""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any

from absl import logging
import flax.linen as nn
from flax import struct
import jax
import jax.numpy as jnp
import optax

from sharedbert import optim as optim_lib
from sharedbert import sharding
from sharedbert.data import pretrain as pretrain_data
from sharedbert.errors import UserError
from sharedbert.models.bert import BertForPretraining, ModelConfig
from sharedbert.models.layout import to_layout


class TrainState(struct.PyTreeNode):
  """The pretraining state: step, params, optimizer state and the non-finite step counts."""
  step: jax.Array
  params: Any
  opt_state: Any
  skipped: jax.Array          # Consecutive non-finite steps (reset by a good one).
  skipped_total: jax.Array    # All non-finite steps of the run.


# ---------------------------------------------------------------------------------------
# Model, optimizer, state.

def dummy_inputs(batch: int, seq_len: int, max_predictions: int):
  """Zero inputs of the given shapes (ids, segments, mask, masked positions), for init and
  compilation.

  Args:
    batch: rows.
    seq_len: tokens a row.
    max_predictions: masked positions a row.
  Returns:
    (input_ids, segment_ids, input_mask, masked_positions), int32.
  """
  z = jnp.zeros((batch, seq_len), jnp.int32)
  return z, z, jnp.ones_like(z), jnp.zeros((batch, max_predictions), jnp.int32)


def init_params(model: nn.Module, rng, seq_len: int = 8, max_predictions: int = 2):
  """Boxed (logically annotated) parameters of a BertForPretraining.

  Args:
    model: the BertForPretraining.
    rng: the init key.
    seq_len, max_predictions: the dummy batch's length and masked slots (the parameters'
      shapes do not depend on them).
  Returns:
    The `params` collection, each leaf an nn.Partitioned with its logical axis names.
  """
  return model.init({'params': rng}, *dummy_inputs(1, seq_len, max_predictions))['params']


def _boxed_train_state(model, tx, rng, seq_len, max_predictions):
  params = init_params(model, rng, seq_len, max_predictions)
  zero = jnp.zeros((), jnp.int32)
  return TrainState(step=zero, params=params, opt_state=tx.init(params), skipped=zero,
                    skipped_total=zero)


def state_shardings(model, tx, mesh, axis_rules, seq_len, max_predictions):
  """Where each leaf of the train state goes on `mesh`, from the logical axis names.

  Args:
    model, tx: the BertForPretraining and its optax transformation.
    mesh: the device mesh (axes data, fsdp, tensor).
    axis_rules: logical axis name -> mesh axes (sharding.rules(config)).
    seq_len, max_predictions: the dummy batch's shape (see init_params).
  Returns:
    A TrainState of jax.sharding.NamedSharding, one per leaf.
  """
  with nn.logical_axis_rules(axis_rules):
    abstract = jax.eval_shape(
        lambda r: _boxed_train_state(model, tx, r, seq_len, max_predictions), jax.random.key(0))
    return sharding.logical_shardings(abstract, mesh, axis_rules)


def create_train_state(model, tx, rng, mesh, axis_rules, seq_len, max_predictions):
  """Initializes the train state directly in its sharded layout (no host copy).

  Args:
    model, tx, mesh, axis_rules, seq_len, max_predictions: as state_shardings.
    rng: the init key.
  Returns:
    (state, shardings): the TrainState (step 0, fresh optimizer) and its NamedShardings.
  """
  shardings = state_shardings(model, tx, mesh, axis_rules, seq_len, max_predictions)
  init = jax.jit(lambda r: nn.unbox(_boxed_train_state(model, tx, r, seq_len, max_predictions)),
                 out_shardings=shardings)
  return init(rng), shardings


def abstract_state(state_shardings, model, tx, seq_len, max_predictions):
  """The train state as ShapeDtypeStructs with shardings: the restore target of a checkpoint.

  Args:
    state_shardings: the state's NamedShardings (state_shardings()).
    model, tx, seq_len, max_predictions: as state_shardings.
  Returns:
    A TrainState of jax.ShapeDtypeStruct, each with its sharding.
  """
  def init(rng):
    params = nn.unbox(init_params(model, rng, seq_len, max_predictions))
    zero = jnp.zeros((), jnp.int32)
    return TrainState(step=zero, params=params, opt_state=tx.init(params), skipped=zero,
                      skipped_total=zero)
  shapes = jax.eval_shape(init, jax.random.key(0))
  return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                      shapes, state_shardings)


def restore_state(reader, model_cfg: ModelConfig, tx, mesh, axis_rules, shardings, seq_len: int,
                  max_preds: int):
  """The checkpoint's (state, meta, step), in the layout of `model_cfg.scan_layers`.

  A checkpoint saved with the other layout (layers unrolled, or scanned) is restored as it
  was saved, then its parameters and optimizer moments are converted (`to_layout`) onto
  `shardings`: a run may switch model.scan_layers when it resumes.

  Args:
    reader: the run's OpenRun.
    model_cfg: the model as configured now.
    tx: the optimizer.
    mesh, axis_rules: where the state goes.
    shardings: the state's shardings.
    seq_len, max_preds: the batch's shapes (for an abstract state).
  Returns:
    (state, meta, step).
  """
  latest = reader.latest_meta()
  saved_scan = bool(latest[1].get('model', {}).get('scan_layers', False)) if latest else None
  if saved_scan is None or saved_scan == model_cfg.scan_layers:
    model = BertForPretraining(model_cfg)
    return reader.restore(abstract_state(shardings, model, tx, seq_len, max_preds))
  saved_model = BertForPretraining(dataclasses.replace(model_cfg, scan_layers=saved_scan))
  saved_shardings = state_shardings(saved_model, tx, mesh, axis_rules, seq_len, max_preds)
  state, meta, step = reader.restore(
      abstract_state(saved_shardings, saved_model, tx, seq_len, max_preds))
  logging.info('checkpoint %d has the layers %s; converting to the %s layout', step,
               'scanned' if saved_scan else 'unrolled',
               'scanned' if model_cfg.scan_layers else 'unrolled')
  convert = jax.jit(lambda s: to_layout(s, model_cfg.scan_layers), out_shardings=shardings)
  return convert(state), meta, step


# ---------------------------------------------------------------------------------------
# The step.

def mlm_loss(model, params, batch, rng, deterministic):
  """The MLM loss of one batch, summed over its masked tokens.

  Args:
    model: the BertForPretraining.
    params: its parameters.
    batch: input_ids, segment_ids, input_mask [B, T] int32; masked_positions, masked_ids
      [B, P] int32; masked_weights [B, P] float32 (0 for unused slots).
    rng: the dropout key, or None.
    deterministic: no dropout.
  Returns:
    (loss_sum, (weight, correct)): scalars, the cross-entropy summed over the masked tokens,
    their number (sum of weights) and how many the argmax got right.
  """
  out = model.apply({'params': params}, batch['input_ids'], batch['segment_ids'],
                    batch['input_mask'], batch['masked_positions'],
                    deterministic=deterministic,
                    rngs={'dropout': rng} if rng is not None else None)
  logits = out['mlm_logits']  # [B, P, V] float32
  weights = batch['masked_weights']
  ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch['masked_ids'])
  correct = (jnp.argmax(logits, -1) == batch['masked_ids']) * weights
  return jnp.sum(ce * weights), (jnp.sum(weights), jnp.sum(correct))


def train_step(state: TrainState, batch, *, model, tx, schedule, base_rng, accum_steps: int):
  """One optimizer step over the global batch, optionally in `accum_steps` micro-batches.

  The loss is the mean over all masked tokens of the global batch, so k accumulated
  micro-batches give the same update as one batch k times larger. A step whose loss,
  gradient or update is not finite is skipped (parameters and optimizer state kept) and
  counted.

  Args:
    state: the TrainState.
    batch: the global batch, as mlm_loss takes it (B a multiple of accum_steps).
    model, tx: the BertForPretraining and its optax transformation.
    schedule: step -> learning rate (for the metrics).
    base_rng: the dropout key, folded with the step.
    accum_steps: micro-batches per step.
  Returns:
    (new_state, metrics): metrics holds scalars loss, mlm_accuracy, grad_norm,
    learning_rate and skipped (1.0 when this step was skipped).
  """
  rng = jax.random.fold_in(base_rng, state.step)

  def loss_and_grads(params, mb, rng):
    (loss_sum, (weight, correct)), grads = jax.value_and_grad(
        functools.partial(mlm_loss, model), has_aux=True)(params, mb, rng, False)
    return loss_sum, weight, correct, grads

  if accum_steps == 1:
    loss_sum, weight, correct, grads = loss_and_grads(state.params, batch, rng)
  else:
    # Micro-batch i takes rows i, i+k, i+2k, ...: each spans every data-parallel device.
    micro = jax.tree.map(
        lambda x: jnp.swapaxes(x.reshape(x.shape[0] // accum_steps, accum_steps,
                                         *x.shape[1:]), 0, 1), batch)

    def body(carry, inputs):
      mb, i = inputs
      out = loss_and_grads(state.params, mb, jax.random.fold_in(rng, i))
      return jax.tree.map(jnp.add, carry, out), None

    zeros = (jnp.zeros(()), jnp.zeros(()), jnp.zeros(()),
             jax.tree.map(jnp.zeros_like, state.params))
    (loss_sum, weight, correct, grads), _ = jax.lax.scan(
        body, zeros, (micro, jnp.arange(accum_steps)))

  denom = jnp.maximum(weight, 1.0)
  grads = jax.tree.map(lambda g: g / denom, grads)
  loss = loss_sum / denom
  grad_norm = optax.global_norm(grads)
  params, opt_state, finite = optim_lib.guarded_update(tx, grads, state.opt_state,
                                                       state.params, loss, grad_norm)
  new_state = TrainState(
      step=state.step + 1, params=params, opt_state=opt_state,
      skipped=jnp.where(finite, 0, state.skipped + 1),
      skipped_total=state.skipped_total + (~finite).astype(jnp.int32))
  metrics = {
      'loss': loss, 'mlm_accuracy': correct / denom, 'grad_norm': grad_norm,
      'learning_rate': schedule(state.step), 'skipped': (~finite).astype(jnp.float32),
  }
  return new_state, metrics


def eval_step(params, batch, *, model):
  """The MLM loss sum, weight and correct count of one batch, dropout off.

  Args:
    params: the model's parameters.
    batch: as mlm_loss takes it.
    model: the BertForPretraining.
  Returns:
    {'loss_sum', 'weight', 'correct'}: scalars (train.evaluate sums them over batches).
  """
  loss_sum, (weight, correct) = mlm_loss(model, params, batch, None, True)
  return {'loss_sum': loss_sum, 'weight': weight, 'correct': correct}


def jit_steps(model, tx, schedule, mesh, state_shardings, dropout_rng, accum_steps: int):
  """The train step (state donated) and the eval step, jitted with the state's shardings.

  Args:
    model, tx, schedule, accum_steps: as train_step.
    mesh: the device mesh; batches are sharded over its data and fsdp axes.
    state_shardings: the state's NamedShardings.
    dropout_rng: train_step's base_rng.
  Returns:
    (step_fn, eval_fn): step_fn(state, batch) -> (state, metrics); eval_fn(params, batch)
    -> eval_step's sums, replicated.
  """
  batch_spec = sharding.batch_sharding(mesh)
  step_fn = jax.jit(
      functools.partial(train_step, model=model, tx=tx, schedule=schedule,
                        base_rng=dropout_rng, accum_steps=accum_steps),
      in_shardings=(state_shardings, batch_spec),
      out_shardings=(state_shardings, sharding.replicated(mesh)),
      donate_argnums=(0,))
  eval_fn = jax.jit(functools.partial(eval_step, model=model),
                    in_shardings=(state_shardings.params, batch_spec),
                    out_shardings=sharding.replicated(mesh))
  return step_fn, eval_fn


# ---------------------------------------------------------------------------------------
# Compiled once, before anything is written: its memory against what the device has.

def compile_train_step(step_fn, model, tx, shardings, d, mesh, axis_rules):
  """`step_fn` (jit_steps') compiled once, for the state's and a global batch's shapes
  (`d`: the config's data section); logs what it took and its device memory, and refuses
  (UserError) a step that cannot fit. Returns the compiled step.

  Args:
    step_fn: the jitted train step.
    model: the model.
    tx: the optimizer.
    shardings: the state's shardings.
    d: config.data.
    mesh, axis_rules: where it runs.
  Returns:
    The compiled step.
  """
  logging.info('Compiling the train step')
  t0 = time.time()
  state = abstract_state(shardings, model, tx, d.seq_len, pretrain_data.max_predictions(d))
  batch_sharding = sharding.batch_sharding(mesh)
  shapes = pretrain_data.batch_shapes(d.batch_size, d.seq_len, pretrain_data.max_predictions(d))
  batch = {k: jax.ShapeDtypeStruct(shape, dtype, sharding=batch_sharding)
           for k, (shape, dtype) in shapes.items()}
  with jax.set_mesh(mesh), nn.logical_axis_rules(axis_rules):
    compiled = step_fn.lower(state, batch).compile()
  mem = compiled.memory_analysis()
  logging.info('Compiled the train step in %.1fs%s', time.time() - t0,
               f'; device memory: {memory_text(mem)}' if mem is not None else '')
  check_memory(mem, d.batch_size)
  return compiled


def check_memory(mem, batch_size: int) -> None:
  """Refuses a step whose compiled memory analysis needs more than a device has free: it
  would fail at its first step (RESOURCE_EXHAUSTED) or push the host into swap.

  Args:
    mem: the compiled step's memory_analysis().
    batch_size: the global batch (named in the refusal).
  Raises:
    UserError: the step needs more than is free.
  Returns:
    None.
  """
  if mem is None:
    return
  try:
    need = (mem.argument_size_in_bytes + mem.output_size_in_bytes - mem.alias_size_in_bytes
            + mem.temp_size_in_bytes)
  except AttributeError:
    return
  device = jax.local_devices()[0]
  free, where = memory_available(device)
  if free is None or need <= free:
    return
  gib = 1 << 30
  raise UserError(
      f'the train step needs about {need / gib:.1f} GiB per device (compiled memory analysis: '
      f'{memory_text(mem)}) but {where} has {free / gib:.1f} GiB free; lower '
      f'data.batch_size (now {batch_size}), or raise optim.grad_accum_steps to split it')


def memory_available(device) -> tuple[int | None, str]:
  """(bytes a device can still allocate, its name): an accelerator's allocator limit less
  what is in use; on CPU, the host's available memory shared by its CPU devices.

  Args:
    device: a jax device.
  Returns:
    (bytes, or None when unknown; the device's name).
  """
  if device.platform != 'cpu':
    stats = device.memory_stats() or {}
    if 'bytes_limit' not in stats:
      return None, str(device)
    return stats['bytes_limit'] - stats.get('bytes_in_use', 0), str(device)
  try:
    with open('/proc/meminfo') as f:
      fields = dict(line.split(':', 1) for line in f)
    available = int(fields['MemAvailable'].split()[0]) * 1024
  except (OSError, KeyError, ValueError):
    return None, 'the host'
  return available // max(1, jax.local_device_count()), 'each CPU device (host memory)'


def memory_text(mem) -> str:
  """A compiled memory analysis in GiB: arguments, outputs, temporaries.

  Args:
    mem: a memory_analysis().
  Returns:
    'arguments X GiB, outputs Y GiB, temporaries Z GiB'.
  """
  gib = 1 << 30
  try:
    return (f'arguments {mem.argument_size_in_bytes / gib:.2f} GiB, outputs '
            f'{mem.output_size_in_bytes / gib:.2f} GiB, temporaries '
            f'{mem.temp_size_in_bytes / gib:.2f} GiB')
  except AttributeError:
    return str(mem)
