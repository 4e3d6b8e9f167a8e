"""GLUE fine-tuning end to end: a tiny pretraining run, then fine-tuning that must learn."""

import dataclasses
import importlib.util
import json
import os
import random
import time

import jax
import numpy as np
import pytest
import tensorflow_datasets as tfds

from sharedbert import config as sb_config
from sharedbert.tasks import finetune
from sharedbert.tasks import glue_task
from sharedbert.tasks import pretrained as pretrained_lib
from sharedbert import sharding
from sharedbert import train
from sharedbert.utils import workdir as workdir_lib
from sharedbert.data import glue
from sharedbert.data import tokenizer as tokenizer_lib
from sharedbert.errors import UserError
from sharedbert.metrics import glue as glue_metrics
from sharedbert.metrics import stats

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = ('the a cat dog sat on mat ran fast slow red blue green house tree river sky sun '
         'moon star').split()
CUE = 'wonderful'  # A sentence is positive exactly when it contains this word.


def glue_config(arg):
  spec = importlib.util.spec_from_file_location('glue_config', os.path.join(ROOT, 'configs/glue.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg)


def tiny_finetune_config(arg, init_from, **data):
  c = glue_config(arg)
  c.init_from = str(init_from)
  c.data.update(data)
  c.num_epochs = 8             # Steps are cheap here; compiling is what takes the time.
  c.optim.lr = 2e-3            # A tiny, barely pretrained model needs a large step.
  c.log_every_steps = 0
  c.eval.bootstrap_resamples = 200
  return c


def tiny_pretrain_config(root):
  rng = random.Random(0)
  with open(root / 'corpus.txt', 'w') as f:
    for _ in range(120):
      f.write(' '.join(rng.choice(WORDS + [CUE]) for _ in range(30)) + '\n\n')
  c = sb_config.pretrain_config('shared', 'tiny')
  c.data.corpus = str(root / 'corpus.txt')
  c.model.update(num_layers=1, hidden_size=32, num_heads=2, mlp_dim=64, vocab_size=64)
  c.data.update(seq_len=32, batch_size=8, max_predictions=4, vocab_train_sentences=1000,
                eval_fraction=0.1)
  c.update(total_steps=2, log_every_steps=1, eval_every_steps=2, eval_batches=1)
  c.ckpt.update(every_steps=2, async_save=False)
  c.optim.warmup_steps = 1
  return c


@pytest.fixture
def pretrained(tmp_path):
  """A pretraining workdir from train_and_evaluate: 2 steps of a 1-layer model."""
  workdir = tmp_path / 'pretrain'
  workdir.mkdir()
  train.train_and_evaluate(tiny_pretrain_config(tmp_path), str(workdir))
  return workdir


@pytest.fixture
def untrained(tmp_path):
  """A workdir with a pretraining config and vocabulary but no checkpoint (no compile)."""
  workdir = tmp_path / 'untrained'
  workdir.mkdir()
  c = tiny_pretrain_config(tmp_path)
  workdir_lib.write_config(c, str(workdir))
  docs = (tmp_path / 'corpus.txt').read_text().split('\n\n')
  tokenizer_lib.save(tokenizer_lib.train(docs, 64, max_sentences=1000),
                     str(workdir / tokenizer_lib.VOCAB_FILE))
  return workdir


def _sentence(rng, positive):
  words = [rng.choice(WORDS) for _ in range(rng.randint(4, 9))]
  if positive:
    words.insert(rng.randint(0, len(words)), CUE)
  return ' '.join(words)


def write_sst2(glue_dir, rows: dict[str, int], seed: int):
  """glue_dir/SST-2/<split>.tsv with `rows[split]` labelled sentences each, the label being
  'contains the cue word'; returns the random source, to write more from."""
  rng = random.Random(seed)
  task = glue_dir / 'SST-2'
  task.mkdir(parents=True)
  for name, n in rows.items():
    with open(task / f'{name}.tsv', 'w') as f:
      f.write('sentence\tlabel\n')
      for i in range(n):
        f.write(f'{_sentence(rng, i % 2)}\t{i % 2}\n')
  return rng


@pytest.fixture
def sst2_dir(tmp_path):
  """A glue_data folder with an SST-2 whose label is 'contains the cue word'."""
  rng = write_sst2(tmp_path / 'glue', {'train': 320, 'dev': 80}, seed=1)
  task = tmp_path / 'glue' / 'SST-2'
  with open(task / 'test.tsv', 'w') as f:
    f.write('index\tsentence\n')
    for i in range(30):
      f.write(f'{i}\t{_sentence(rng, i % 3 == 0)}\n')
  return tmp_path / 'glue'


def test_pretrain_then_finetune_learns_writes_reports_and_resumes(pretrained, sst2_dir,
                                                                  tmp_path):
  # (One test, so that the costly pretraining run is made once, even under pytest -n.)
  # The encoder read back is exactly the checkpoint's `params['bert']`.
  import orbax.checkpoint as ocp
  run = pretrained_lib.open_pretrained(str(pretrained))
  mesh = sharding.make_mesh(glue_config('').mesh)
  rules = sb_config.DEFAULT_LOGICAL_AXIS_RULES
  params, step = pretrained_lib.restore_encoder_params(
      str(pretrained), pretrained_lib.abstract_encoder(run.model_config, mesh, rules))
  assert step == 2
  saved = ocp.PyTreeCheckpointer().restore(str(pretrained / 'checkpoints' / '2' / 'state'))
  assert jax.tree.structure(params) == jax.tree.structure(saved['params']['bert'])
  for got, want in zip(jax.tree.leaves(params), jax.tree.leaves(saved['params']['bert'])):
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
  # An encoder of another shape is refused, naming the differences.
  other = dataclasses.replace(run.model_config, hidden_size=16)
  with pytest.raises(UserError, match='does not match'):
    pretrained_lib.restore_encoder_params(str(pretrained),
                                    pretrained_lib.abstract_encoder(other, mesh, rules))

  workdir = tmp_path / 'ft'
  c = tiny_finetune_config('task=all,seeds=2', pretrained, glue_dir=str(sst2_dir))
  results = finetune.finetune_and_evaluate(c, str(workdir))

  # task=all found the one task in the folder; it learned the rule on every seed.
  assert list(results['tasks']) == ['sst2']
  assert results['pretrained_step'] == 2
  dev = results['tasks']['sst2']['dev']['validation']
  accuracies = dev['metrics']['accuracy']['per_seed']
  assert len(accuracies) == 2 and min(accuracies) >= 0.9, accuracies  # chance is 0.5
  assert dev['majority_baseline'] == pytest.approx(0.5)
  low, high = dev['score']['ci']
  assert low <= dev['score']['mean'] <= high
  assert results['glue_average']['covered'] == ['sst2']
  assert results['glue_average']['mean'] == pytest.approx(dev['score']['mean'])

  # results.json on disk is what was returned; results.md has the row and the average.
  with open(workdir / 'results.json') as f:
    on_disk = json.load(f)
  assert on_disk['tasks']['sst2']['dev']['validation']['score']['per_seed'] == accuracies
  md = (workdir / 'results.md').read_text()
  row = next(l for l in md.splitlines() if l.startswith('| SST-2 |'))
  assert f'{100 * dev["score"]["mean"]:.1f} ±' in row
  assert 'GLUE average** over 1 of 9' in md and 'the last (no selection on dev)' in md

  for seed in (0, 1):
    seed_dir = workdir / 'sst2' / f'seed_{seed}'
    record = json.loads((seed_dir / 'metrics.json').read_text())
    assert [e['epoch'] for e in record['epochs']] == list(range(1, 9))
    # The dev predictions file reproduces the reported metric.
    rows = [l.split('\t') for l in (seed_dir / 'dev_predictions.tsv').read_text().splitlines()[1:]]
    preds = np.array([int(r[1]) for r in rows])
    labels = np.array([int(r[2]) for r in rows])
    assert len(rows) == 80
    assert glue_metrics.accuracy(preds, labels) == pytest.approx(accuracies[seed])
    # The test predictions are a valid GLUE submission, one per test row.
    submission = glue.read_submission(str(seed_dir / 'SST-2.tsv'), 'sst2')
    assert sorted(submission) == list(range(30))
    assert set(submission.values()) <= {0, 1}

  # The same command again reuses the finished seeds instead of training them again.
  stamp = os.path.getmtime(workdir / 'sst2' / 'seed_0' / 'metrics.json')
  again = finetune.finetune_and_evaluate(c, str(workdir))
  assert os.path.getmtime(workdir / 'sst2' / 'seed_0' / 'metrics.json') == stamp
  assert again['tasks']['sst2']['dev'] == results['tasks']['sst2']['dev']
  # A seed finished when every model carried every variant's settings is still reused.
  path = workdir / 'sst2' / 'seed_1' / 'metrics.json'
  record = json.loads(path.read_text())
  record['fingerprint']['model'].update(diag_init=1.0, diag_init_scheme='signs',
                                        pairwise_init_std=1.0, qk_shared_fraction=0.5,
                                        masa_atoms=4, masa_projections='qkvo')
  path.write_text(json.dumps(record))
  stamp = os.path.getmtime(path)
  finetune.finetune_and_evaluate(c, str(workdir))
  assert os.path.getmtime(path) == stamp


def test_tfds_mock_mnli_from_scratch_with_best_epoch(untrained, tmp_path):
  """tfds glue/mnli through tfds.testing.mock_data: two dev sets, two submission files."""
  c = tiny_finetune_config('task=mnli,seeds=1', untrained, tfds_data_dir=str(tmp_path / 'tfds'))
  c.from_scratch = True  # Reads config.json and vocab.model only: no checkpoint needed.
  c.num_epochs = 2
  c.eval.select_best_epoch = True
  with tfds.testing.mock_data(num_examples=24):
    results = finetune.finetune_and_evaluate(c, str(tmp_path / 'ft'))
  assert results['pretrained_step'] is None
  task = results['tasks']['mnli']
  assert {s: e['score_key'] for s, e in task['dev'].items()} == {
      'validation_matched': 'mnli_m', 'validation_mismatched': 'mnli_mm'}
  assert all(e['n'] == 24 for e in task['dev'].values())
  record = task['per_seed'][0]
  assert record['selection'] == 'best dev epoch'
  best = max(record['epochs'], key=lambda e: e['dev']['validation_matched']['score'])
  assert record['chosen_epoch'] == best['epoch']
  assert record['dev']['validation_matched']['score'] == best['dev']['validation_matched']['score']
  assert results['glue_average']['covered'] == ['mnli_m', 'mnli_mm']
  seed_dir = tmp_path / 'ft' / 'mnli' / 'seed_0'
  for name in ('MNLI-m.tsv', 'MNLI-mm.tsv'):
    lines = (seed_dir / name).read_text().splitlines()
    assert len(lines) > 1
    assert {l.split('\t')[1] for l in lines[1:]} <= {'entailment', 'neutral', 'contradiction'}
  assert (seed_dir / 'dev_mismatched_predictions.tsv').exists()
  md = (tmp_path / 'ft' / 'results.md').read_text()
  assert '| MNLI-m |' in md and '| MNLI-mm |' in md and 'selected on the dev set' in md


def test_losses_ignore_padding_rows():
  batch = {'labels': np.array([1.0, 3.0, 9.0], np.float32),
           'weights': np.array([1.0, 1.0, 0.0], np.float32)}
  logits = np.array([[2.0], [2.0], [0.0]], np.float32)
  assert float(glue_task._loss(logits, batch, True)) == pytest.approx(1.0)  # MSE of real rows
  batch = {'labels': np.array([0, 1, 1]), 'weights': np.array([1.0, 1.0, 0.0], np.float32)}
  logits = np.log(np.array([[0.5, 0.5], [0.2, 0.8], [1.0, 1e-9]], np.float32))
  assert float(glue_task._loss(logits, batch, False)) == pytest.approx(
      -(np.log(0.5) + np.log(0.8)) / 2, rel=1e-5)
  spec = glue.get_task('stsb')
  np.testing.assert_array_equal(glue_task._predictions(spec, np.array([[1.5], [2.5]])), [1.5, 2.5])
  np.testing.assert_array_equal(
      glue_task._predictions(glue.get_task('mnli'), np.array([[0, 2, 1], [3, 1, 0]])), [1, 0])


def test_task_resolution(tmp_path):
  c = glue_config('cola')
  assert c.task == 'cola' and c.mode == 'finetune'
  # A list after the colon: the bare words after task= are its items, not new tasks.
  listed = glue_config('task=cola,sst2,stsb,seeds=3')
  assert (listed.task, listed.seeds) == ('cola,sst2,stsb', 3)
  assert glue_config('sst2,seeds=2').task == 'sst2'
  c.data.glue_dir = str(tmp_path)
  for name in ('MRPC', 'CoLA', 'notes'):
    (tmp_path / name).mkdir()
  c.task = 'all'
  assert finetune.resolve_tasks(c) == ['cola', 'mrpc']
  c.task = 'SST-2, sts-b,sst2'
  assert finetune.resolve_tasks(c) == ['sst2', 'stsb']
  for bad in ('ax', 'squad', ' '):
    c.task = bad
    with pytest.raises(UserError):
      finetune.resolve_tasks(c)
  c.task, c.data.glue_dir = 'cola', str(tmp_path / 'missing')
  with pytest.raises(UserError, match='does not exist'):
    finetune.resolve_tasks(c)
  c.task, c.data.glue_dir = 'all', ''
  c.data.tfds_data_dir = str(tmp_path / 'empty_tfds')
  with pytest.raises(UserError, match='found no GLUE task'):
    finetune.resolve_tasks(c)
  with tfds.testing.mock_data(num_examples=2):
    assert finetune.resolve_tasks(c) == list(glue.TASKS)


def test_user_errors(untrained, tmp_path):
  c = glue_config('task=sst2')
  with pytest.raises(UserError, match='init_from is empty'):
    finetune.finetune_and_evaluate(c, str(tmp_path / 'a'))
  c.init_from = str(tmp_path / 'nowhere')
  with pytest.raises(UserError, match='not a pretraining workdir'):
    finetune.finetune_and_evaluate(c, str(tmp_path / 'a'))
  assert not (tmp_path / 'a').exists()
  run = pretrained_lib.open_pretrained(str(untrained))
  mesh = sharding.make_mesh(c.mesh)
  target = pretrained_lib.abstract_encoder(run.model_config, mesh, sb_config.DEFAULT_LOGICAL_AXIS_RULES)
  with pytest.raises(UserError, match='no checkpoints'):
    pretrained_lib.restore_encoder_params(str(untrained), target)


def test_input_errors_are_found_before_anything_is_written_or_restored(untrained, tmp_path):
  glue_dir = tmp_path / 'glue'
  (glue_dir / 'SST-2').mkdir(parents=True)
  (glue_dir / 'SST-2' / 'dev.tsv').write_text('sentence\tlabel\ngood .\t1\n')
  workdir = tmp_path / 'ft'

  def refused(match, **changes):
    c = glue_config('task=sst2')
    c.init_from = str(untrained)
    c.data.glue_dir = str(glue_dir)
    for key, value in changes.items():
      *parents, leaf = key.split('.')
      node = c
      for name in parents:
        node = node[name]
      node[leaf] = value
    t0 = time.time()
    with pytest.raises(UserError, match=match) as e:
      finetune.finetune_and_evaluate(c, str(workdir))
    assert '\n' not in str(e.value)
    assert time.time() - t0 < 20  # No encoder restored, nothing compiled.
    assert not workdir.exists()

  refused(r"^unknown GLUE task 'sst3'", task='sst3')
  refused(r'GLUE split file missing: .*SST-2/train\.tsv not found')
  (glue_dir / 'SST-2' / 'train.tsv').write_text('sentence\tlabel\ngood .\t1\nbad .\tmaybe\n')
  refused(r"train\.tsv:3: label 'maybe' is not one of")
  (glue_dir / 'SST-2' / 'train.tsv').write_text('sentence\tlabel\ngood .\t1\nbad .\t0\n')
  refused(r'^no checkpoints in .*untrained/checkpoints; pretrain first')  # The encoder workdir.
  refused(r'^optim\.lr must be a finite number > 0, got -1\.0$', **{'optim.lr': -1.0})
  refused(r'^eval\.confidence must be a number in \(0, 1\), got 1\.0$',
          **{'eval.confidence': 1.0})
  refused(r'^data\.seq_len must be an integer >= 3 \(\[CLS\] a \[SEP\]\), got 2$',
          **{'data.seq_len': 2})


def test_bootstrap_seed_mean_scores_every_seed_on_the_same_resample():
  rng = np.random.default_rng(0)
  labels = rng.integers(0, 2, 60)
  preds = [np.where(rng.random(60) < p, labels, 1 - labels) for p in (0.6, 0.7, 0.9)]
  dist = stats.bootstrap_seed_mean(glue_metrics.accuracy, preds, labels, num_resamples=50,
                                   seed=3)
  # The same draws, one resample at a time: the same index rows as the batched version.
  idx = np.random.default_rng(3).integers(0, 60, size=(50, 60))
  expected = [np.mean([np.mean(p[i] == labels[i]) for p in preds]) for i in idx]
  np.testing.assert_allclose(dist, expected)
  low, high = stats.percentile_interval(dist, 0.9)
  assert low <= np.mean([glue_metrics.accuracy(p, labels) for p in preds]) <= high


def test_a_causal_encoder_is_refused_for_cls_pooling_and_allowed_for_mean(untrained,
                                                                          tmp_path):
  """Issue 56: [CLS] of a causal model sees only itself, so the classifier got one vector for
  every input and predicted one class, silently. Refused in one line before anything is
  written; mean pooling (every token, the last seeing the whole row) passes the check."""
  import json as json_lib
  config_path = untrained / 'config.json'
  saved = json_lib.loads(config_path.read_text())
  saved['model']['causal'] = True
  config_path.write_text(json_lib.dumps(saved))
  c = glue_config('task=sst2')
  c.init_from = str(untrained)
  run = pretrained_lib.open_pretrained(str(untrained))
  mesh = sharding.make_mesh(c.mesh)
  with pytest.raises(UserError, match=r'is a causal model .* set --config.pooling=mean'):
    finetune.check_fit(c, run, ['sst2'], mesh)
  with pytest.raises(UserError, match='is a causal model'):
    finetune.finetune_and_evaluate(c, str(tmp_path / 'ft'))
  assert not (tmp_path / 'ft').exists()
  c.pooling = 'mean'
  finetune.check_fit(c, run, ['sst2'], mesh)
