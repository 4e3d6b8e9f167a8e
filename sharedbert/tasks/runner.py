"""One flow for any task (tasks/task.py): the pretrained encoder, the task's head, the
engine's epochs and predictions, the task's metrics. SQuAD runs through it, and so does a
task registered from outside the package. GLUE's seeds (glue_task.TaskRun) share its
epoch loop, `train_epochs`, and add what they keep of each epoch as hooks."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Iterable

import jax
import ml_collections
import numpy as np

from sharedbert import config as sb_config
from sharedbert import optim as optim_lib
from sharedbert import sharding
from sharedbert.errors import UserError
from sharedbert.tasks import engine
from sharedbert.tasks import pretrained as pretrained_lib
from sharedbert.tasks.task import Task


@dataclasses.dataclass
class Epoch:
  """What one epoch left: its number (from 1), the train state after it, the mean training
  loss, what `evaluate` made of it (None without one), and its seconds (evaluation
  included)."""
  number: int
  state: Any
  train_loss: float
  evaluation: Any
  seconds: float


class Hook:
  """Something kept of each epoch (a checkpoint, the best epoch, a log line)."""

  def after_epoch(self, epoch: Epoch) -> None:
    """What to keep of `epoch`, as it ends."""

  def close(self) -> None:
    """After the last epoch."""


def train_epochs(state, num_epochs: int, train_epoch: Callable, evaluate: Callable | None = None,
                 hooks: Iterable[Hook] = ()):
  """The epoch loop of every fine-tuning flow.

  Args:
    state: the engine's train state to start from.
    num_epochs: how many epochs.
    train_epoch: (state, number) -> (state, mean train loss); number counts from 1.
    evaluate: (state, number) -> what the hooks see as Epoch.evaluation (None: nothing).
    hooks: each sees every epoch in order, then `close`.
  Returns:
    The state after the last epoch.
  """
  hooks = list(hooks)
  for number in range(1, num_epochs + 1):
    t0 = time.time()
    state, train_loss = train_epoch(state, number)
    evaluation = evaluate(state, number) if evaluate is not None else None
    epoch = Epoch(number, state, train_loss, evaluation, time.time() - t0)
    for hook in hooks:
      hook.after_epoch(epoch)
  for hook in hooks:
    hook.close()
  return state


class EpochTimes(Hook):
  """Each epoch's seconds, rounded to 0.01."""

  def __init__(self):
    self.seconds = []

  def after_epoch(self, epoch: Epoch) -> None:
    """Keeps its seconds."""
    self.seconds.append(round(epoch.seconds, 2))


def fit_and_score(task: Task, *, init_from: str, optim, num_epochs: int, batch_size: int,
                  seed: int, mesh=None, where: str = 'batch_size') -> dict:
  """Fine-tunes the encoder of the pretraining run `init_from` on `task` with one seed and
  scores the evaluation examples.

  Args:
    task: a Task.
    init_from: the pretraining run's --workdir.
    optim: an optimizer config section (optim.make_optimizer).
    num_epochs, batch_size: the epochs over the training rows, and the global batch.
    seed: the head's init, the dropout and the row order.
    mesh: where the engine runs (default: every device on the data axis).
    where: how a refusal names the batch size (e.g. 'squad.batch_size').
  Returns:
    {'pretrained_step', 'metrics', 'predictions', 'num_train', 'num_train_features',
    'num_dev', 'epoch_time_s', 'wall_s'}: 'predictions' as the task made them.
  """
  pretrained = pretrained_lib.open_pretrained(init_from)
  train_ex, dev_ex = task.examples()
  train = task.featurize(train_ex, pretrained.tokenizer, training=True)
  dev = task.featurize(dev_ex, pretrained.tokenizer, training=False)

  if mesh is None:
    mesh = sharding.make_mesh(ml_collections.ConfigDict(dict(data=-1, fsdp=1, tensor=1)))
  dp = sharding.data_parallel_size(mesh)
  if batch_size % dp:
    raise UserError(f'{where}={batch_size} is not divisible by the data-parallel size {dp} '
                    '(mesh.data * mesh.fsdp)')
  process = sharding.process_batch_block(mesh)
  axis_rules = tuple(sb_config.DEFAULT_LOGICAL_AXIS_RULES)
  model = task.model(pretrained.model_config)
  tx, _ = optim_lib.make_optimizer(optim, -(-len(train) // batch_size) * num_epochs)
  steps = engine.compile_steps(model, tx, task.loss, mesh, axis_rules)
  target = pretrained_lib.abstract_encoder(pretrained.model_config, mesh, axis_rules)
  encoder, step = pretrained_lib.restore_encoder_params(init_from, target)
  state = steps.init_state(jax.random.key(seed), encoder)

  t0 = time.time()

  def train_epoch(state, number):
    state, losses = engine.fit_epoch(steps.step_fn, state, train.arrays, batch_size=batch_size,
                                     seed=seed, epoch=number - 1, mesh=mesh, process=process)
    return state, float(np.mean(jax.device_get(losses)))

  times = EpochTimes()
  state = train_epochs(state, num_epochs, train_epoch, hooks=[times])
  outputs = engine.predict(steps.predict_fn, state.params, dev.arrays, dev.lengths,
                           batch_size=batch_size, mesh=mesh, process=process,
                           bucket=task.bucket)
  predictions = task.predictions(outputs, dev, dev_ex)
  return {'pretrained_step': step, 'metrics': task.metrics(predictions, dev_ex),
          'predictions': predictions, 'num_train': len(train_ex),
          'num_train_features': len(train), 'num_dev': len(dev_ex),
          'epoch_time_s': times.seconds,
          'wall_s': round(time.time() - t0, 2)}


def lengths_of(input_ids: np.ndarray) -> np.ndarray:
  """[N] real tokens a row (ids other than the padding id).

  Args:
    input_ids: [N, T].
  Returns:
    [N] int.
  """
  return np.sum(input_ids != engine.PAD_ID, axis=1)
