"""sharedbert.lab.uptrain on the fixture BERT: the arms, the calibrated plan, the
curve, the kept checkpoints, GLUE, the summary's keys and a resume with nothing to do; the
`fresh` control of sharedbert.convert.shared; jobs that wait for others."""

import json
import os

import jax
import numpy as np
import pytest
from flax import linen as nn

from sharedbert.convert import hf as convert_hf
from sharedbert.convert import shared as convert_shared
from sharedbert.errors import UserError
from sharedbert.lab import uptrain
from sharedbert.models.bert import BertForPretraining, ModelConfig
from sharedbert.models.layout import unstack_layers
from sharedbert.models.params import load_config_file
from sharedbert.utils import workers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, 'tests', 'fixtures', 'hf_bert_tiny')


def _data(root):
  """A corpus, STS-B dev and MRPC train/dev of the fixture's words, written here."""
  words = 'the a cat dog sat on mat ran and was big small'.split()
  rng = np.random.default_rng(0)
  sent = lambda: ' '.join(rng.choice(words, 6))
  (root / 'corpus').mkdir(parents=True)
  (root / 'corpus' / 'text.txt').write_text(
      '\n\n'.join(' '.join(sent() for _ in range(3)) for _ in range(300)))
  (root / 'glue' / 'STS-B').mkdir(parents=True)
  header = ('index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\t'
            'sentence2\tscore\n')
  (root / 'glue' / 'STS-B' / 'dev.tsv').write_text(header + ''.join(
      f'{i}\tg\tf\ty\t{i}\ts\ts\t{sent()}\t{sent()}\t{rng.uniform(0, 5):.2f}\n'
      for i in range(30)))
  (root / 'glue' / 'MRPC').mkdir()
  for split, n in (('train', 24), ('dev', 16)):
    rows = []
    for i in range(n):
      a, same = sent(), rng.random() < 0.5
      rows.append(f'{int(same)}\t{i}\t{i + 1000}\t{a}\t{a if same else sent()}\n')
    (root / 'glue' / 'MRPC' / f'{split}.tsv').write_text(
        'Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n' + ''.join(rows))
  return str(root)


def _config(**changes):
  config = load_config_file(os.path.join(ROOT, 'configs', 'uptrain.py'), 'smoke')
  for key, value in changes.items():
    node = config
    *parents, leaf = key.split('.')
    for name in parents:
      node = node[name]
    node[leaf] = value
  return config


def test_smoke_preset_end_to_end_and_resume(tmp_path):
  data = _data(tmp_path / 'data')
  work = tmp_path / 'w'
  config = _config(arms=('converted', 'original'), workers=1)
  uptrain.run(config, FIXTURE, data, str(work), str(tmp_path / 'docs_summary.json'))
  whole = json.loads((work / 'summary.json').read_text())
  summary = whole['uptrain']
  assert json.loads((tmp_path / 'docs_summary.json').read_text())['uptrain'] == summary
  # Step 0, the conversion experiment, in its own folder and merged into the summary.
  assert whole['conversion']['function_text']['stsb_pairs'] == 30
  assert (work / 'conversion' / 'report.md').is_file()
  for arm in ('converted', 'original'):
    plan = summary[arm]['plan']
    assert plan['steps'] == {'0': 0, '1': 10, '3': 30} and plan['schedule_steps'] == 30
    assert 'eval_loss' not in summary[arm]['0']  # The untrained MLM head is not scored.
    for minutes in ('1', '3'):
      point = summary[arm][minutes]
      assert point['eval_loss'] > 0 and point['eval_masked_tokens'] > 0
      assert -1 <= point['stsb_spearman'] <= 1
    for minutes in ('0', '3'):
      mrpc = summary[arm][minutes]['glue']['mrpc']
      assert mrpc['seeds'] == 2 and len(mrpc['per_seed']) == 2
      assert mrpc['ci_low'] <= mrpc['ci_high'] and 0 <= mrpc['mean'] <= 100
    # Each kept checkpoint is the training run's at that step, fine-tuned from.
    kept = work / 'arms' / arm / 'at_3' / 'checkpoints'
    assert sorted(os.listdir(kept)) == ['30']
  assert summary['kept']['0']['original'] == {'fraction': 1.0, 'ci_low': 1.0, 'ci_high': 1.0}
  assert 0 < summary['majority']['mrpc'] < 100
  assert set(summary['kept']['3']) == {'converted', 'original'}
  # The converted arm starts from the fit (shared attention), weighted by corpus text.
  assert convert_hf.read_params(str(work / 'init' / 'converted'))[0].attention == 'shared'
  assert 'weighted' in (work / 'init' / 'converted.txt').read_text()
  text = (work / 'report.md').read_text()
  assert '| `converted` |' in text and 'keeps' in text and os.path.isfile(work / 'recovery.png')
  before = {p: os.path.getmtime(work / p) for p in (
      'arms/converted/curve.json', 'glue/mrpc/original_3/results.json')}
  uptrain.run(config, FIXTURE, data, str(work))  # Finished: only the report is rewritten.
  assert {p: os.path.getmtime(work / p) for p in before} == before
  os.remove(work / 'report.md')
  uptrain.run(config, FIXTURE, data, str(work), report_only=True)
  rewritten = (work / 'report.md').read_text()
  assert rewritten.split('![recovery]')[0] == text.split('![recovery]')[0]
  assert 'Wall time of this invocation' in text and '(--report_only)' in rewritten
  with pytest.raises(UserError, match='holds no uptraining run'):
    uptrain.run(config, FIXTURE, data, str(tmp_path / 'empty'), report_only=True)


def test_an_arm_calibrates_its_speed_inside_the_warmup(tmp_path):
  data = _data(tmp_path / 'data')
  work = str(tmp_path / 'w')
  config = _config(arms=('original',), steps_per_minute=0.0, calibration_steps=3,
                   minutes=0.01, curve=(0, 0.01), glue_at=(0,))
  uptrain.validate(config)
  uptrain.prepare(config, FIXTURE, data, work)
  curve = uptrain.uptrain_arm(config, data, work, 'original')
  plan = json.loads(open(os.path.join(work, 'arms', 'original', 'plan.json')).read())
  assert plan['calibrated'] and plan['steps_per_minute'] > 0
  assert plan['steps']['0.01'] == int(round(0.01 * plan['steps_per_minute']))
  assert set(curve) == {'0', '0.01'}
  # The calibration's steps are in the run's metrics (3 steps of its warmup).
  lines = [json.loads(l) for l in open(os.path.join(work, 'arms', 'original', 'train',
                                                    'metrics.jsonl'))]
  assert any(l.get('step') == 3 for l in lines)


def test_bad_plans_are_refused():
  with pytest.raises(UserError, match='config.curve must rise'):
    uptrain.validate(_config(curve=(0, 3, 1)))
  with pytest.raises(UserError, match='not on config.curve'):
    uptrain.validate(_config(glue_at=(0, 2)))
  with pytest.raises(UserError, match='config.arms'):
    uptrain.validate(_config(arms=('converted', 'mystery')))
  with pytest.raises(UserError, match='calibration_steps=9 must be from 1 to'):
    uptrain.validate(_config(steps_per_minute=0.0, calibration_steps=9))


def test_fresh_control_replaces_attention_and_copies_the_rest(tmp_path):
  source = str(tmp_path / 'imported')
  convert_hf.import_hf(FIXTURE, source)
  target = str(tmp_path / 'fresh')
  text = convert_shared.convert_workdir(source, target, 'shared', fit='fresh', seed=3)
  assert 'freshly initialised (seed 3)' in text
  cfg, before, _, _ = convert_hf.read_params(source)
  new_cfg, after, _, _ = convert_hf.read_params(target)
  assert new_cfg.attention == 'shared'
  before, after = unstack_layers(before), unstack_layers(after)
  # What a new shared model of seed 3 starts from.
  ids = jax.numpy.zeros((1, 1), jax.numpy.int32)
  model = BertForPretraining(ModelConfig.from_config({**new_cfg.to_dict(),
                                                      'scan_layers': False}))
  init = nn.unbox(model.init(jax.random.key(3), ids, ids, jax.numpy.ones_like(ids), ids))
  init = init['params']
  for i in range(cfg.num_layers):
    name = f'layer_{i}'
    for leaf_a, leaf_b in zip(jax.tree.leaves(after['bert'][name]['attention']),
                              jax.tree.leaves(init['bert'][name]['attention'])):
      np.testing.assert_array_equal(leaf_a, leaf_b)
    rest = {k: v for k, v in after['bert'][name].items() if k != 'attention'}
    for leaf_a, leaf_b in zip(jax.tree.leaves(rest), jax.tree.leaves(
        {k: v for k, v in before['bert'][name].items() if k != 'attention'})):
      np.testing.assert_array_equal(leaf_a, leaf_b)
  np.testing.assert_array_equal(after['bert']['embeddings']['word_embeddings']['embedding'],
                                before['bert']['embeddings']['word_embeddings']['embedding'])
  with pytest.raises(UserError, match='fits nothing'):
    convert_shared.convert_workdir(source, str(tmp_path / 'x'), 'shared', fit='fresh',
                                   fit_text=str(tmp_path))


def test_jobs_wait_for_the_jobs_they_need():
  order, done = [], set()
  needs = {'b': 'a', 'c': None, 'a': None}
  workers.run_when_ready(['b', 'c', 'a'], lambda j: j, lambda j: (j,), workers=1,
                         on_done=lambda j, _: (order.append(j), done.add(j)),
                         ready=lambda j: needs[j] is None or needs[j] in done)
  assert order == ['c', 'a', 'b']
  with pytest.raises(RuntimeError, match='no job can start'):
    workers.run_when_ready(['b'], lambda j: j, lambda j: (j,), workers=1,
                           on_done=lambda j, _: None, ready=lambda j: False)
