"""Evaluators of fine-tuned models, chosen by name from a config.

An evaluator scores a fine-tuned classifier beyond its own dev set. It is made once per task
run, `from_config(name, run, **settings)`, and asked once per fine-tuning seed,
`evaluator.run(params) -> dict | None` (None: nothing to report for this task). `run` is the
task's `sharedbert.tasks.glue_task.TaskRun`: its `spec`, `features`, `model`, `predict(params,
features)`, `config` and `pretrained` (model_config, tokenizer). Evaluators of the encoder
alone (`linear_probe`, `sts`) read only `spec`, `features`, `config` and `pretrained`, so a
caller with an encoder but no classifier (the lab's probes) hands them an `EncoderRun`. GLUE fine-tuning runs the evaluators named in
`config.evaluators` (each entry: an evaluator's name, holding its settings) and
stores their results in each seed's metrics.json under `evaluators`; the study runs
`robustness` and `crossdomain` the same way.

A new evaluator is one class with `register`:

    @common.register('logit_norm')
    class LogitNorm:
      def __init__(self, run, split='dev'):
        self.run_, self.split = run, split
      def run(self, params):
        logits = self.run_.predict(params, self.run_.features[self.split])
        return {'mean_norm': float(np.linalg.norm(logits, axis=-1).mean())}
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from sharedbert.errors import UserError


class Evaluator(Protocol):
  """What an evaluator offers: made with (run, **settings), asked with the seed's params."""

  def run(self, params) -> dict | None:
    """The scores of the classifier with these parameters (None: nothing for this task)."""


EVALUATORS: dict[str, Any] = {}


@dataclasses.dataclass
class EncoderRun:
  """The part of a TaskRun that evaluators of a frozen encoder read, for callers with an
  encoder but no classifier to fine-tune.

  Attributes:
    pretrained: the encoder's `model_config` and `tokenizer`
      (sharedbert.tasks.pretrained.PretrainedRun).
    spec: the GLUE task (sharedbert.data.glue.TaskSpec), or None for task-free evaluators.
    features: split name -> glue_task.Features of that split.
    config: a fine-tuning config whose `data` section locates GLUE (None: settings only).
  """
  pretrained: Any
  spec: Any = None
  features: dict = dataclasses.field(default_factory=dict)
  config: Any = None


def register(name: str):
  """A class decorator that adds an evaluator to EVALUATORS under `name`.

  Args:
    name: the name a config gives it (config.evaluators.<name>).
  Returns:
    The decorator, which returns the class unchanged.
  """
  def wrap(cls):
    EVALUATORS[name] = cls
    return cls
  return wrap


def from_config(name: str, run, **settings) -> Evaluator:
  """The evaluator `name`, made for a task run with its settings.

  Args:
    name: a registered evaluator (EVALUATORS).
    run: what it evaluates: a GLUE TaskRun, or a common.EncoderRun.
    **settings: its settings (config.evaluators.<name>).
  Returns:
    The Evaluator; `run(params)` gives its record.
  Raises:
    UserError: an unknown name (naming the known ones), or a setting it does not take.
  """
  if name not in EVALUATORS:
    raise UserError(f'unknown evaluator {name!r} (config.evaluators); known: '
                    f'{", ".join(sorted(EVALUATORS))}')
  try:
    return EVALUATORS[name](run, **settings)
  except TypeError as e:
    raise UserError(f'config.evaluators.{name}: {e}') from None
