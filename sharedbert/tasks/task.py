"""The task seam: what a fine-tuning task is, apart from the flow that trains it.

A task says what it reads, how its examples become model inputs, its head and loss, and how
the head's outputs become predictions and metrics. `sharedbert.tasks.runner.fit_and_score`
trains and scores any task on the task engine (tasks/engine.py), so a task has no flow of
its own. GLUE's tasks (tasks/glue_task.py, `GlueTask`) and SQuAD (tasks/squad.py,
`SquadTask`) are two; a new task is one module with one class, registered by name:

    @task.register('my_task')
    class MyTask:
      name = 'my_task'
      bucket = True                     # predictions per row: columns may be cropped
      def __init__(self, data_dir): ...
      def examples(self): return train_examples, dev_examples
      def featurize(self, examples, tokenizer, *, training): return task.TaskData(...)
      def model(self, model_config): return SomeHead(model_config)
      def loss(self, outputs, batch): ...          # a scalar, mean over rows of weight 1
      def predictions(self, outputs, data, examples): ...
      def metrics(self, predictions, examples): return {'score': ..., ...}

GLUE fine-tuning (`sharedbert.main` with configs/glue.py) adds what a benchmark run needs on
top of the same GlueTask methods (tasks/glue_task.TaskRun: several seeds, epoch
checkpoints, the best epoch, seed reuse, test-set submissions, bootstrap intervals).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

import numpy as np

from sharedbert.errors import UserError


@dataclasses.dataclass
class TaskData:
  """A split as model inputs: `arrays` holds input_ids and segment_ids [N, T] (int32) and,
  for training, the targets the task's loss reads (each [N, ...]); `lengths` [N] the real
  tokens of each row; `extra` whatever the task needs to read its outputs back (SQuAD: its
  windows' maps to the context)."""
  arrays: dict[str, np.ndarray]
  lengths: np.ndarray
  extra: Any = None

  def __len__(self):
    return len(self.lengths)


class Task(Protocol):
  """What the runner asks of a task (see the module docstring)."""
  name: str
  bucket: bool

  def examples(self) -> tuple[list, list]:
    """(training examples, evaluation examples)."""

  def featurize(self, examples, tokenizer, *, training: bool) -> TaskData:
    """The examples as model inputs (with targets when `training`)."""

  def model(self, model_config):
    """The encoder with the task's head: a flax module taking input_ids, segment_ids,
    input_mask and deterministic, whose encoder is params['bert']."""

  def loss(self, outputs, batch):
    """The scalar loss of a batch (engine.make_batch's arrays, weights included)."""

  def predictions(self, outputs, data: TaskData, examples):
    """The model's outputs on every row of `data` (numpy) as the task's predictions."""

  def metrics(self, predictions, examples) -> dict:
    """The predictions scored against the examples: a dict with 'score'."""


TASKS: dict[str, Any] = {}


def register(name: str):
  """A class decorator that adds a task to TASKS under `name`.

  Args:
    name: the name `make` and configs know it by.
  Returns:
    The decorator, which returns the class unchanged.
  """
  def wrap(cls):
    TASKS[name] = cls
    return cls
  return wrap


def make(name: str, **settings) -> Task:
  """The task `name`, made with its settings.

  Args:
    name: a registered task (TASKS).
    **settings: its constructor's keyword arguments.
  Returns:
    The Task.
  Raises:
    UserError: an unknown name, naming the known tasks.
  """
  if name not in TASKS:
    raise UserError(f'unknown task {name!r}; known: {", ".join(sorted(TASKS))}')
  return TASKS[name](**settings)
