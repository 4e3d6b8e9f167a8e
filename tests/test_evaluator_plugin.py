"""Evaluators chosen by name from a config (sharedbert/evaluators/common.py, issue 55): one
added from this file alone runs beside a built-in one in GLUE fine-tuning, and its results
land in each seed's metrics.json."""

import json

import numpy as np
import pytest

from sharedbert.errors import UserError
from sharedbert.evaluators import common
from sharedbert.tasks import finetune

from test_finetune import tiny_finetune_config, untrained, write_sst2  # noqa: F401


class LogitNorm:
  """The mean L2 norm of the classifier's logits on a dev split, and how many rows."""

  def __init__(self, run, *, split=None):
    self.task_run, self.split = run, split or run.spec.dev_splits[0]

  def run(self, params):
    logits = self.task_run.predict(params, self.task_run.features[self.split])
    return {'mean_norm': float(np.linalg.norm(logits, axis=-1).mean()), 'rows': len(logits)}


@pytest.fixture
def logit_norm():
  common.register('logit_norm')(LogitNorm)
  yield LogitNorm
  del common.EVALUATORS['logit_norm']


def _config(untrained_dir, glue_dir, **evaluators):
  c = tiny_finetune_config('task=sst2,seeds=1', untrained_dir, glue_dir=str(glue_dir))
  c.from_scratch = True  # No checkpoint to read: the evaluators are what is tested.
  c.num_epochs = 1
  c.eval.predict_test = False
  for name, settings in evaluators.items():
    c.evaluators[name] = settings
  return c


def test_a_registered_evaluator_runs_in_fine_tuning_beside_a_built_in_one(
    logit_norm, untrained, tmp_path):  # pylint: disable=redefined-outer-name
  write_sst2(tmp_path / 'glue', {'train': 64, 'dev': 24}, seed=1)
  c = _config(untrained, tmp_path / 'glue', logit_norm={},
              robustness={'levels': (0.0, 0.3), 'noise_seeds': 2})
  finetune.finetune_and_evaluate(c, str(tmp_path / 'ft'))
  record = json.loads((tmp_path / 'ft' / 'sst2' / 'seed_0' / 'metrics.json').read_text())
  ev = record['evaluators']
  assert set(ev) == {'logit_norm', 'robustness'}
  assert ev['logit_norm']['rows'] == 24 and ev['logit_norm']['mean_norm'] > 0
  # Level 0 is the clean model: the seed's own dev score, exactly.
  assert ev['robustness']['levels'] == [0.0, 0.3] and ev['robustness']['noise_seeds'] == [0, 1]
  (dev,) = record['dev'].values()
  assert ev['robustness']['scores'][0] == [dev['score']] * 2
  # The evaluators are part of what a finished seed is: other settings run it again.
  assert record['fingerprint']['evaluators']['robustness']['levels'] == [0.0, 0.3]


def test_unknown_evaluators_and_settings_are_user_errors(logit_norm, untrained, tmp_path):  # pylint: disable=redefined-outer-name
  write_sst2(tmp_path / 'glue', {'train': 16, 'dev': 8}, seed=1)
  with pytest.raises(UserError, match="unknown evaluator 'nope'.*known: crossdomain, "
                                      'logit_norm, robustness'):
    finetune.finetune_and_evaluate(_config(untrained, tmp_path / 'glue', nope={}),
                                   str(tmp_path / 'a'))
  with pytest.raises(UserError, match="config.evaluators.logit_norm: .*unexpected keyword "
                                      "argument 'width'"):
    finetune.finetune_and_evaluate(_config(untrained, tmp_path / 'glue',
                                           logit_norm={'width': 3}), str(tmp_path / 'b'))
