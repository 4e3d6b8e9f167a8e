"""The task engine: the one fit loop, predict loop and padding of every fine-tuned task
(GLUE, SQuAD, and through GLUE's TaskRun the study's cross-domain scores; robustness
batches its dev rows with make_batch).

Pretraining keeps its own step (sharedbert.pretrain_step: MLM batches streamed from
tf.data, gradient accumulation, preemption checkpoints); the probes train on this one's
`train_step`, many of them scanned in one jitted call (`scanned_steps`). All three share
the optimizer and its non-finite guard (sharedbert.optim.guarded_update).

A task module keeps what is its own (reading, features, head, metric) and hands the
engine its rows as a dict of numpy arrays: token arrays [n, T] ('input_ids',
'segment_ids'), per-row arrays [n, ...] (labels, positions) and the lengths [n].

  compile_steps  the state on the mesh and the jitted train and predict steps of a model
                 whose encoder may start from a pretrained one
  subset         a fixed random subset of examples, the same for every seed and run
  padded_width   the columns a split keeps: its longest row, rounded up to 8
  bucket_width   a predict batch's columns: the next power of two of its longest row
  make_batch     a global batch's rows for this process, padded with rows of weight 0
  epoch_order    the order of an epoch's rows
  fit_epoch      one epoch of a jitted step over a seeded permutation, on the mesh
  predict        a jitted forward over every row, batched in order of length, on the mesh
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, Callable, Mapping, Optional, Sequence

import flax.linen as nn
from flax import struct
import jax
import jax.numpy as jnp
import numpy as np

from sharedbert import interrupts
from sharedbert import optim as optim_lib
from sharedbert import sharding

PAD_ID = 0  # sharedbert.data.tokenizer.PAD_ID; input_mask is ids != PAD_ID.
TOKEN_KEYS = ('input_ids', 'segment_ids')


class State(struct.PyTreeNode):
  """A fine-tuning state: step, params, optimizer state and the dropout key."""
  step: jax.Array
  params: Any
  opt_state: Any
  dropout_rng: jax.Array


def task_apply(model):
  """apply_fn of a task model (input_ids, segment_ids, input_mask), dropout on.

  Args:
    model: a task model (its __call__ takes input_ids, segment_ids, input_mask and
      deterministic).
  Returns:
    (params, batch, dropout key) -> the model's outputs, in training mode.
  """
  def apply_fn(params, batch, rng):
    return model.apply({'params': params}, batch['input_ids'], batch['segment_ids'],
                       batch['input_mask'], deterministic=False, rngs={'dropout': rng})
  return apply_fn


def train_step(state: State, batch, *, apply_fn, tx, loss_fn):
  """One optimizer step on loss_fn(apply_fn(params, batch, rng), batch), the dropout rng
  keyed by the step. A step whose loss, gradient or update is not finite leaves the
  parameters and optimizer state as they were (optim.guarded_update, the same guard as
  pretraining's); its loss, returned as it is, shows it to the caller.

  Args:
    state: the engine's State (step, params, opt_state, dropout_rng).
    batch: make_batch's arrays: input_ids, segment_ids, input_mask [B, T], weights [B] and
      the task's targets.
    apply_fn: (params, batch, rng) -> the model's outputs (task_apply).
    tx: the optax transformation.
    loss_fn: (outputs, batch) -> the scalar loss (mean over rows of weight 1).
  Returns:
    (new_state, loss).
  """
  rng = jax.random.fold_in(state.dropout_rng, state.step)

  def objective(params):
    return loss_fn(apply_fn(params, batch, rng), batch)

  loss, grads = jax.value_and_grad(objective)(state.params)
  params, opt_state, _ = optim_lib.guarded_update(tx, grads, state.opt_state, state.params,
                                                  loss)
  return state.replace(step=state.step + 1, params=params, opt_state=opt_state), loss


def scanned_steps(state: State, batches, *, apply_fn, tx, loss_fn):
  """train_step over a stack of batches (leading axis: steps) in one lax.scan: many tiny
  steps in one call, where a call per step would spend its time in dispatch (the probes).

  Args:
    state: the train state.
    batches: a dict of arrays with a leading steps axis [S, B, ...].
    apply_fn, tx, loss_fn: as train_step's.
  Returns:
    (state after S steps, [S] losses).
  """
  return jax.lax.scan(functools.partial(train_step, apply_fn=apply_fn, tx=tx, loss_fn=loss_fn),
                      state, batches)


def predict_step(params, batch, *, model):
  """The model's outputs on one batch, dropout off.

  Args:
    params: the model's parameters.
    batch: input_ids, segment_ids, input_mask [B, T].
    model: the task module.
  Returns:
    Its outputs (a classifier: logits [B, num_labels]; SQuAD: start and end logits [B, T]).
  """
  return model.apply({'params': params}, batch['input_ids'], batch['segment_ids'],
                     batch['input_mask'], deterministic=True)


@dataclasses.dataclass
class Steps:
  """A model's compiled programs on a mesh (compile_steps)."""
  init_state: Callable      # (rng, encoder params or None) -> State, placed
  step_fn: Callable         # (state, global batch) -> (state, loss); donates the state
  predict_fn: Callable      # (params, global batch) -> outputs, replicated
  state_shardings: Any


def compile_steps(model, tx, loss_fn: Callable, mesh, axis_rules) -> Steps:
  """The state (params from the model's logical axes, placed on `mesh`) and the jitted
  steps of `model` (a module taking input_ids, segment_ids, input_mask, deterministic
  whose encoder is params['bert']). init_state(rng, encoder) starts the encoder from
  `encoder` (copied, so that donating a state never frees it), or at random (None).

  Args:
    model: the task module.
    tx: the optax transformation.
    loss_fn: (outputs, batch) -> the scalar loss.
    mesh: the device mesh; batches are sharded over its data and fsdp axes.
    axis_rules: logical axis name -> mesh axes.
  Returns:
    Steps: state_shardings, init_state(rng, encoder), step_fn(state, batch) -> (state,
    loss) with the state donated, and predict_fn(params, batch) -> outputs.
  """
  def init_boxed(rng):
    z = jnp.zeros((1, 8), jnp.int32)
    params = model.init({'params': rng}, z, z, jnp.ones_like(z))['params']
    return State(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params),
                 dropout_rng=rng)

  with nn.logical_axis_rules(axis_rules):
    abstract = jax.eval_shape(init_boxed, jax.random.key(0))
    shardings = sharding.logical_shardings(abstract, mesh, axis_rules)

  def init_state(rng, encoder):
    init_rng, dropout_rng = jax.random.split(rng)
    state = nn.unbox(init_boxed(init_rng))
    params = state.params
    if encoder is not None:
      params = {**params, 'bert': jax.tree.map(jnp.copy, encoder)}
    return State(step=state.step, params=params, opt_state=tx.init(params),
                 dropout_rng=dropout_rng)

  batch_spec = sharding.batch_sharding(mesh)
  step_fn = jax.jit(functools.partial(train_step, apply_fn=task_apply(model), tx=tx,
                                      loss_fn=loss_fn),
                    in_shardings=(shardings, batch_spec),
                    out_shardings=(shardings, sharding.replicated(mesh)), donate_argnums=(0,))
  predict_fn = jax.jit(functools.partial(predict_step, model=model),
                       in_shardings=(shardings.params, batch_spec),
                       out_shardings=sharding.replicated(mesh))
  return Steps(jax.jit(init_state, out_shardings=shardings), step_fn, predict_fn, shardings)


def subset(items: Sequence, max_items: int, rng: Optional[np.random.Generator] = None):
  """At most `max_items` of `items`, drawn at random once (rng: default_rng(0), the same
  for every seed and run) and kept in their order; all of them when 0 or enough.

  Args:
    items: the examples.
    max_items: how many to keep (0: all).
    rng: the draw's generator.
  Returns:
    A list of at most max_items items.
  """
  if not max_items or len(items) <= max_items:
    return items
  rng = np.random.default_rng(0) if rng is None else rng
  keep = np.sort(rng.permutation(len(items))[:max_items])
  return [items[i] for i in keep]


def padded_width(lengths: np.ndarray, seq_len: int, multiple: int = 8) -> int:
  """A split's columns: its longest row rounded up to `multiple`, at most seq_len.

  Padding is masked out, so the results are those at seq_len, several times faster on
  short-sentence tasks.

  Args:
    lengths: [N] real tokens a row.
    seq_len: the longest allowed.
    multiple: the rounding.
  Returns:
    The width.
  """
  longest = int(np.max(lengths, initial=1))
  return min(seq_len, -(-longest // multiple) * multiple)


def bucket_width(longest: int, width: int, floor: int = 16) -> int:
  """A predict batch's columns: the next power of two of its longest row (at least
  `floor`, at most `width`): a few compiled shapes, far less padding.

  Args:
    longest: the batch's longest row.
    width: the split's width (padded_width).
    floor: the smallest width.
  Returns:
    The batch's width.
  """
  return min(width, max(floor, 1 << (int(longest) - 1).bit_length()))


def make_batch(arrays: Mapping[str, np.ndarray], idx: np.ndarray, size: int,
               process: tuple[int, int] = (0, 1), width: Optional[int] = None) -> dict:
  """This process's rows of the global batch `idx`, padded to `size` rows of weight 0.

  Every array of `arrays` is indexed by row; the token arrays (TOKEN_KEYS) are cropped to
  `width` columns (all by default). Adds 'input_mask' (ids != PAD_ID) and 'weights'.

  Args:
    arrays: name -> an array over all rows (token arrays [N, T]).
    idx: the global batch's row indices (at most `size`).
    size: the global batch size.
    process: (this process's index, processes): the block of rows it feeds.
    width: the token arrays' columns, or None for all.
  Returns:
    name -> this process's rows [size / processes, ...], with input_mask and weights [rows]
    (1 for real rows, 0 for padding rows).
  """
  weights = np.zeros((size,), np.float32)
  weights[:len(idx)] = 1.0
  rows = np.zeros((size,), np.int64)
  rows[:len(idx)] = idx
  index, count = process
  local = slice(index * size // count, (index + 1) * size // count)
  rows, weights = rows[local], weights[local]
  batch = {k: (a[rows, :width] if k in TOKEN_KEYS else a[rows]) for k, a in arrays.items()}
  batch['input_mask'] = (batch['input_ids'] != PAD_ID).astype(np.int32)
  batch['weights'] = weights
  return batch


def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
  """The order of an epoch's n rows: default_rng([seed, epoch]), the same on every run.

  Args:
    n: rows.
    seed: the run's seed.
    epoch: the epoch (from 0).
  Returns:
    [n] int64, a permutation of range(n).
  """
  return np.random.default_rng([seed, epoch]).permutation(n)


# Training steps queued ahead of the one running: enough to keep the device busy while the
# host makes the next batch, few enough that a stop is seen within a step or two.
IN_FLIGHT = 2


def fit_epoch(step_fn: Callable, state, arrays: Mapping[str, np.ndarray], *, batch_size: int,
              seed: int, epoch: int, mesh, process: tuple[int, int] = (0, 1),
              on_step: Optional[Callable] = None):
  """One epoch: the rows in `epoch_order(n, seed, epoch)`, `batch_size` a step
  (the last step padded with rows of weight 0), `state, loss = step_fn(state, batch)`.

  Args:
    step_fn: (state, global batch) -> (state, loss), donating the state.
    state: the task's train state. arrays: the featurized rows, each [n, ...].
    batch_size: rows per step (global). seed, epoch: fix the row order.
    mesh: where batches go. process: (this process's block, block count) of each batch.
    on_step: `on_step(done, losses)` after each step (logging, timing the first).
  Returns:
    (state, losses as device arrays), so that nothing waits on a step's loss. A Ctrl-C or
    SIGTERM stops after the step (interrupts.check), with at most IN_FLIGHT steps queued.
  """
  n = len(next(iter(arrays.values())))
  order = epoch_order(n, seed, epoch)
  losses = []
  for i in range(-(-n // batch_size)):
    idx = order[i * batch_size:(i + 1) * batch_size]
    batch = sharding.global_batch(make_batch(arrays, idx, batch_size, process), mesh)
    state, loss = step_fn(state, batch)
    losses.append(loss)
    if i >= IN_FLIGHT:
      # At most IN_FLIGHT steps queued, so that a signal is seen within a step or two
      # (unbounded, a whole epoch is queued in seconds and read only at its end).
      losses[i - IN_FLIGHT].block_until_ready()
    if on_step is not None:
      on_step(i + 1, losses)
    interrupts.check('finished runs are kept; the interrupted one starts over')
  return state, losses


def predict(predict_fn: Callable, params, arrays: Mapping[str, np.ndarray],
            lengths: np.ndarray, *, batch_size: int, mesh, process: tuple[int, int] = (0, 1),
            bucket: bool = True):
  """predict_fn(params, batch) for every row, in row order.

  Rows go in order of length, each batch cropped to `bucket_width` of its longest row
  (bucket=False: every batch keeps all the columns, for outputs per token); the last
  batch is padded with empty rows, so that one batch size is compiled.

  Args:
    predict_fn: (params, global batch) -> outputs, replicated.
    params: the model's parameters. arrays: the featurized rows ([n, T] token arrays).
    lengths: [n] real tokens per row. batch_size: rows per call (global).
    mesh, process: as `fit_epoch`. bucket: crop columns to each batch's longest row.
  Returns:
    The outputs' tree with numpy leaves [n, ...]. A signal stops between batches.
  """
  inputs = {k: arrays[k] for k in TOKEN_KEYS}
  width = inputs['input_ids'].shape[1]
  n = len(lengths)
  order = np.argsort(lengths, kind='stable')
  out = None
  for start in range(0, n, batch_size):
    idx = order[start:start + batch_size]
    cols = bucket_width(int(lengths[idx].max()), width) if bucket else width
    batch = make_batch(inputs, idx, batch_size, process, cols)
    batch.pop('weights')
    y = jax.device_get(predict_fn(params, sharding.global_batch(batch, mesh)))
    interrupts.check('finished runs are kept; the interrupted one starts over')
    if out is None:
      out = jax.tree.map(lambda a: np.zeros((n,) + np.shape(a)[1:], np.asarray(a).dtype), y)
    jax.tree.map(lambda o, a: o.__setitem__(idx, np.asarray(a)[:len(idx)]), out, y)
  return out


class StepTimer:
  """The steady-state seconds per step: the first step (compilation) is not counted."""

  def __init__(self):
    self.compiled, self.step_time = False, 0.0
    self._t0, self._steps = 0.0, 0

  def start_epoch(self, steps: int):
    """Starts timing an epoch of `steps` steps."""
    self._t0, self._steps = time.time(), steps

  def after_step(self, loss):
    """Called after each step with its loss: the first (compiling) step is left out of the
    timing."""
    if not self.compiled:
      jax.block_until_ready(loss)
      self.compiled, self._t0, self._steps = True, time.time(), self._steps - 1

  def end_epoch(self):
    """Sets step_time from the epoch just timed."""
    if self._steps:
      self.step_time = (time.time() - self._t0) / self._steps
