"""Evaluators chosen by name from a config (sharedbert/evaluators/common.py, issue 55): one
added from this file alone runs beside a built-in one in GLUE fine-tuning, and its results
land in each seed's metrics.json."""

import json
import random

import numpy as np
import pytest

from sharedbert.errors import UserError
from sharedbert.evaluators import common
from sharedbert.tasks import finetune

from test_finetune import WORDS, tiny_finetune_config, untrained, write_sst2  # noqa: F401


def write_stsb_dev(glue_dir, n: int, seed: int):
  """glue_dir/STS-B/dev.tsv: even rows pair a sentence with itself (score 5), odd rows two
  unrelated ones (score 0), so any encoder's cosine ranks the even rows first."""
  rng = random.Random(seed)
  sentence = lambda: ' '.join(rng.choice(WORDS) for _ in range(rng.randint(4, 9)))
  (glue_dir / 'STS-B').mkdir(parents=True)
  with open(glue_dir / 'STS-B' / 'dev.tsv', 'w') as f:
    f.write('index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\t'
            'sentence2\tscore\n')
    for i in range(n):
      a = sentence()
      b, score = (a, 5.0) if i % 2 == 0 else (sentence(), 0.0)
      f.write(f'{i}\tmain\tx\t2012\t{i:04d}\tnone\tnone\t{a}\t{b}\t{score:.3f}\n')


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
  write_stsb_dev(tmp_path / 'glue', 20, seed=2)
  c = _config(untrained, tmp_path / 'glue', logit_norm={},
              robustness={'levels': (0.0, 0.3), 'noise_seeds': 2},
              linear_probe={'lambdas': (1.0, 100.0)}, sts={'seq_len': 16})
  finetune.finetune_and_evaluate(c, str(tmp_path / 'ft'))
  record = json.loads((tmp_path / 'ft' / 'sst2' / 'seed_0' / 'metrics.json').read_text())
  ev = record['evaluators']
  assert set(ev) == {'logit_norm', 'robustness', 'linear_probe', 'sts'}
  # The built-in encoder probes: a ridge probe on the run's own splits, and STS-B dev (from
  # the run's glue_dir) where identical pairs score 5: their cosine is 1, the largest.
  probe = ev['linear_probe']
  assert (probe['num_train'], probe['num_dev']) == (64, 24)
  assert set(probe['selection']) == {'1', '100'} and 0.0 <= probe['score'] <= 1.0
  assert ev['sts']['pairs'] == 20 and ev['sts']['spearman'] > 0.8
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
                                      'linear_probe, logit_norm, robustness, sts'):
    finetune.finetune_and_evaluate(_config(untrained, tmp_path / 'glue', nope={}),
                                   str(tmp_path / 'a'))
  with pytest.raises(UserError, match="config.evaluators.logit_norm: .*unexpected keyword "
                                      "argument 'width'"):
    finetune.finetune_and_evaluate(_config(untrained, tmp_path / 'glue',
                                           logit_norm={'width': 3}), str(tmp_path / 'b'))
