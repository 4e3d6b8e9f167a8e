"""The matched GLUE comparison (issue 43): what tools/glue_matched.py writes is enough to
repeat its run step for step elsewhere. Checked without torch: the exported untrained
classifier, applied to the first recorded batch, gives the first recorded loss; the
recorded orders and rates are fit_epoch's and the schedule's; the reference's copy of
sharedbert's schedule (tools/hf_glue_reference.py --schedule=sharedbert) is ours."""

import importlib.util
import json
import os
import sys

import ml_collections
import numpy as np
import optax
import pytest
from safetensors.numpy import load_file

from sharedbert import optim as optim_lib
from sharedbert.convert import hf as convert_hf
from sharedbert.convert import hf_layout
from sharedbert.models.bert import BertForSequenceClassification, ModelConfig
from sharedbert.tasks import engine

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(REPO, 'tests', 'fixtures', 'hf_bert_tiny')


def _tool(name):
  spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, 'tools', f'{name}.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


@pytest.mark.parametrize('warmup,total', [(19, 189), (10, 96), (0, 7), (3, 4)])
def test_the_references_copy_of_our_schedule_is_ours(warmup, total):
  factor = _tool('hf_glue_reference').sharedbert_lr_factor
  optim = ml_collections.ConfigDict({'lr': 2.0, 'warmup_steps': warmup})
  ours = optim_lib.learning_rate_schedule(optim, total)
  for step in range(total):
    assert factor(step, warmup, total) * 2.0 == pytest.approx(float(ours(step)), abs=1e-6)


def test_the_recorded_run_starts_from_the_exported_classifier(tmp_path, monkeypatch):
  encoder = str(tmp_path / 'encoder')
  convert_hf.import_hf(FIXTURE, encoder)
  rng = np.random.default_rng(0)
  words = ['the', 'cat', 'sat', 'on', 'a', 'mat', 'good', 'bad', 'dog', 'ran', 'house']
  glue_dir = tmp_path / 'glue' / 'SST-2'
  glue_dir.mkdir(parents=True)
  for split, n in (('train', 20), ('dev', 12)):
    rows = ''.join(f'{" ".join(rng.choice(words, size=rng.integers(2, 9)))}\t{i % 2}\n'
                   for i in range(n))
    (glue_dir / f'{split}.tsv').write_text('sentence\tlabel\n' + rows)
  out = tmp_path / 'matched'
  monkeypatch.setattr(sys, 'argv', [
      'glue_matched.py', f'--encoder={encoder}', f'--glue_dir={tmp_path / "glue"}',
      '--task=sst2', f'--out={out}', '--seq_len=16', '--max_train_examples=0', '--epochs=2',
      '--batch_size=8', '--lr=1e-3', '--seed=3'])
  _tool('glue_matched').main()

  ref = np.load(out / 'sharedbert.npz')
  meta = json.loads((out / 'sharedbert.json').read_text())
  assert meta['total_steps'] == 6 and len(ref['losses']) == 6
  for epoch, order in enumerate(ref['orders'], 1):  # The orders fit_epoch trained in.
    np.testing.assert_array_equal(order, engine.epoch_order(20, 3, epoch))
  optim = ml_collections.ConfigDict({'lr': 1e-3, 'warmup_steps': meta['warmup_steps']})
  np.testing.assert_allclose(
      ref['lrs'], [float(optim_lib.learning_rate_schedule(optim, 6)(s)) for s in range(6)],
      atol=1e-9)

  # The exported init, applied (dropout off) to the first recorded batch: the first loss.
  hf_config = json.loads((out / 'init' / 'config.json').read_text())
  assert hf_config['architectures'] == ['BertForSequenceClassification']
  tensors = load_file(str(out / 'init' / 'model.safetensors'))
  cfg = ModelConfig(**{**hf_layout.model_config_from_hf(hf_config).__dict__,
                       'dropout_rate': 0.0, 'attention_dropout_rate': 0.0})
  bert, _ = hf_layout.params_from_hf(
      {k: v for k, v in tensors.items() if not k.startswith('classifier.')}, cfg)
  params = {'bert': bert['bert'],
            'classifier': {'kernel': tensors['classifier.weight'].T,
                           'bias': tensors['classifier.bias']}}
  rows = ref['orders'][0][:8]
  ids = ref['train_ids'][rows]
  logits = BertForSequenceClassification(cfg, 2).apply(
      {'params': params}, ids, ref['train_segments'][rows], (ids != 0).astype(np.int32))
  loss = optax.softmax_cross_entropy_with_integer_labels(
      logits, ref['train_labels'][rows]).mean()
  assert float(loss) == pytest.approx(float(ref['losses'][0]), abs=1e-5)
  assert not np.allclose(ref['losses'][0], ref['losses'][-1])  # It trained.


def test_a_regression_task_is_refused(monkeypatch):
  monkeypatch.setattr(sys, 'argv', ['glue_matched.py', '--encoder=E', '--glue_dir=G',
                                    '--task=stsb', '--out=O'])
  with pytest.raises(SystemExit, match='stsb is a regression task'):
    _tool('glue_matched').main()
