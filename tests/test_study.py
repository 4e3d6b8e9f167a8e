"""The controlled study end to end at toy size (2 variants x 2 seeds), and its resume."""

import json
import os
import random

import numpy as np
import pytest

from sharedbert import study
from sharedbert import study_report
from sharedbert.errors import UserError

_WORDS = ('the cat dog man woman sat ran on a mat house big small red blue good bad film '
          'movie great awful happy sad saw walked into garden city river').split()


class _Killed(Exception):
  pass


def _sentence(rng, n=None):
  return ' '.join(rng.choice(_WORDS) for _ in range(n or rng.randint(3, 8))) + ' .'


def _write_fixture_data(root):
  """A tiny corpus and glue_data folder (MRPC, STS-B) written by the test."""
  rng = random.Random(0)
  corpus = root / 'corpus'
  corpus.mkdir()
  (corpus / 'text.txt').write_text('\n\n'.join(
      ' '.join(_sentence(rng) for _ in range(6)) for _ in range(80)))
  glue_dir = root / 'glue'
  for name in ('MRPC', 'STS-B'):
    (glue_dir / name).mkdir(parents=True)
  def pairs(n):
    out = []
    for i in range(n):
      a = _sentence(rng)
      same = rng.random() < 0.5
      out.append((i, a, a if same else _sentence(rng), same))
    return out
  mrpc_header = 'Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n'
  for split, n in (('train', 48), ('dev', 24)):
    (glue_dir / 'MRPC' / f'{split}.tsv').write_text(mrpc_header + ''.join(
        f'{int(s)}\t{i}\t{i + 1000}\t{a}\t{b}\n' for i, a, b, s in pairs(n)))
  sts_header = ('index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\t'
                'sentence2\tscore\n')
  for split, n in (('train', 48), ('dev', 24)):
    (glue_dir / 'STS-B' / f'{split}.tsv').write_text(sts_header + ''.join(
        f'{i}\tg\tf\ty\t{i}\tn\tn\t{a}\t{b}\t{(4.5 if s else rng.uniform(0, 3)):.3f}\n'
        for i, a, b, s in pairs(n)))
  return str(corpus), str(glue_dir)


def _toy_config(corpus, glue_dir):
  import ml_collections
  from sharedbert.params import load_config_file
  config = load_config_file(os.path.join(study.REPO_CONFIGS, 'study.py'), 'cpu')
  config.variants = ('standard', 'shared')
  config.seeds = 2
  config.bootstrap_resamples = 50
  p = config.pretrain.override
  p.data.corpus = corpus
  p.data.batch_size = 8
  p.data.seq_len = 32
  p.data.vocab_train_sentences = 10_000
  p.total_steps = 6
  p.log_every_steps = 2
  p.eval_every_steps = 3
  p.eval_batches = 1
  p.ckpt.every_steps = 6
  p.model = ml_collections.ConfigDict(dict(
      num_layers=1, hidden_size=32, num_heads=2, mlp_dim=64, vocab_size=256,
      max_position_embeddings=64, dropout_rate=0.0, attention_dropout_rate=0.0))
  p.data.max_predictions = 4
  g = config.glue.override
  g.data.glue_dir = glue_dir
  g.data.seq_len = 32
  g.data.max_train_examples = 40
  g.num_epochs = 2
  g.batch_size = 8
  g.eval.batch_size = 16
  g.eval.bootstrap_resamples = 20
  config.glue.tasks = ('mrpc', 'stsb')
  config.robustness.tasks = ('mrpc',)
  config.robustness.levels = (0.0, 0.3)
  config.robustness.noise_seeds = 2
  config.robustness.eval_batch_size = 16
  config.crossdomain.pairs = ('mrpc->stsb', 'stsb->mrpc')
  return config


def test_merge_overrides_refuses_unknown_keys():
  import ml_collections
  base = ml_collections.ConfigDict({'a': 1, 'b': {'c': 2}})
  study.merge_overrides(base, {'b': {'c': 3}}, 'x')
  assert base.b.c == 3
  with pytest.raises(UserError, match=r'x\.b\.nope is not a key'):
    study.merge_overrides(base, {'b': {'nope': 1}}, 'x')


def test_study_presets_resolve():
  from sharedbert.params import load_config_file
  for preset in ('cpu', 'gpu', 'pod'):
    config = load_config_file(os.path.join(study.REPO_CONFIGS, 'study.py'), preset)
    for v in config.variants:
      cfg = study.pretrain_config(config, v)
      assert cfg.model.attention == v
    g = study.glue_config(config, '/nowhere', 'cola')
    assert g.seeds == config.seeds and not g.eval.select_best_epoch


@pytest.mark.parametrize('change, message', [
    (lambda c: c.update(seeds=0), r'^seeds must be a positive integer, got 0$'),
    (lambda c: c.pretrain.override.data.update(batch_size=-4),
     r'^data\.batch_size must be a positive integer, got -4$'),
    (lambda c: c.glue.override.update(num_epochs=0),
     r'^num_epochs must be a positive integer, got 0$'),
    (lambda c: c.robustness.update(levels=(0.0, -0.1)),
     r'^robustness\.levels\[1\] must be a finite number >= 0, got -0\.1$'),
    (lambda c: c.glue.update(tasks=('mrpc', 'cola')),
     r'GLUE task directory missing: .*CoLA/train\.tsv not found'),
])
def test_study_inputs_are_checked_before_anything_is_written(tmp_path, change, message):
  corpus, glue_dir = _write_fixture_data(tmp_path)
  config = _toy_config(corpus, glue_dir)
  change(config)
  workdir = tmp_path / 'study'
  with pytest.raises(UserError, match=message):
    study.run_study(config, str(workdir))
  assert not workdir.exists()


def test_paired_difference_and_t_interval():
  a = {'mean': 0.6, 'per_seed': [0.6, 0.62, 0.58], 'seeds': [0, 1, 2],
       'dist': np.array([0.6, 0.61, 0.59, 0.6])}
  b = {'mean': 0.5, 'per_seed': [0.5, 0.51, 0.49], 'seeds': [0, 1, 2],
       'dist': np.array([0.5, 0.5, 0.5, 0.5])}
  d = study_report.paired_difference(a, b, 0.95)
  assert d['diff'] == pytest.approx(0.1)
  np.testing.assert_allclose(d['per_seed'], [0.1, 0.11, 0.09])
  # t interval of [0.1, 0.11, 0.09]: mean 0.1, std 0.01, t(0.975, 2) = 4.3027.
  half = 4.302652729911275 * 0.01 / np.sqrt(3)
  assert d['t_ci'] == pytest.approx((0.1 - half, 0.1 + half))
  assert d['reliable']


def test_toy_study_end_to_end_and_resume(tmp_path, monkeypatch):
  corpus, glue_dir = _write_fixture_data(tmp_path)
  config = _toy_config(corpus, glue_dir)
  workdir = str(tmp_path / 'study')

  # A study killed in the middle: the second (variant, task) fine-tuning dies.
  original = study.run_glue_task
  calls = []
  def dying(config, workdir, variant, task):
    calls.append((variant, task))
    if len(calls) == 2:
      raise _Killed('killed')
    return original(config, workdir, variant, task)
  monkeypatch.setattr(study, 'run_glue_task', dying)
  with pytest.raises(_Killed):
    study.run_study(config, workdir)
  monkeypatch.setattr(study, 'run_glue_task', original)
  finished = sorted(str(p) for p in (tmp_path / 'study' / 'runs').rglob('seed_*.json'))
  # standard on mrpc, 2 seeds.
  assert len(finished) == 2
  mtimes = {p: os.path.getmtime(p) for p in finished}
  pretrain_done = {v: os.path.getmtime(os.path.join(study.pretrain_dir(workdir, v),
                                                    study.DONE_FILE))
                   for v in config.variants}

  # Resume: finished runs are skipped, the rest are run, the report is written.
  report_path = study.run_study(config, workdir)
  for p, t in mtimes.items():
    assert os.path.getmtime(p) == t, f'{p} was run again'
  for v, t in pretrain_done.items():
    assert os.path.getmtime(os.path.join(study.pretrain_dir(workdir, v), study.DONE_FILE)) == t

  # Both variants pretrained with one vocabulary and the same batches.
  vocabs = [open(os.path.join(study.pretrain_dir(workdir, v), 'vocab.model'), 'rb').read()
            for v in config.variants]
  assert vocabs[0] == vocabs[1]

  runs = study_report.load_runs(workdir, config.variants, config.glue.tasks)
  for v in config.variants:
    for t in config.glue.tasks:
      assert [r['seed'] for r in runs[v][t]] == [0, 1]
  r = runs['shared']['mrpc'][1]
  # Robustness: level 0 with every noise seed is the clean dev score, exactly.
  assert r['robustness']['levels'] == [0.0, 0.3]
  assert r['robustness']['scores'][0] == [r['score'], r['score']]
  assert 'robustness' not in runs['shared']['stsb'][1]
  assert 'mrpc->stsb' in r['crossdomain']
  r = runs['shared']['stsb'][1]
  assert 'stsb->mrpc' in r['crossdomain']
  e = r['crossdomain']['stsb->mrpc']
  assert e['n'] == 24 and set(e['metrics']) == {'f1', 'accuracy'}

  summary = json.load(open(os.path.join(workdir, 'summary.json')))
  for v in config.variants:
    for t in config.glue.tasks:
      scores = [x['score'] for x in runs[v][t]]
      assert summary['glue'][v][t]['per_seed'] == pytest.approx(scores)
      assert summary['glue'][v][t]['mean'] == pytest.approx(np.mean(scores))
  assert summary['missing'] == []
  assert set(summary['paired_differences']['shared']) == {'mrpc', 'stsb', '_average'}

  text = open(report_path).read()
  for needle in ('## Headline: GLUE dev scores', 'Paired differences against `standard`',
                 '## Robustness to embedding noise', '## Cross-domain transfer',
                 '## Training time', '## Parameters', 'SQuAD is not part of this preset',
                 'STS-B predicted similarity >= 4'):
    assert needle in text, needle
  for png in ('pretraining.png', 'glue.png', 'robustness.png', 'time.png'):
    assert os.path.getsize(os.path.join(workdir, png)) > 1000

  # A third run has nothing to do but the report.
  before = {p: os.path.getmtime(p) for p in
            (str(p) for p in (tmp_path / 'study' / 'runs').rglob('seed_*.json'))}
  study.run_study(config, workdir)
  assert before == {p: os.path.getmtime(p) for p in before}
