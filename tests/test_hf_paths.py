"""The Hugging Face paths end to end, on the tiny fixture BERT and its WordPiece vocab.txt.

import -> restore (encode, fill_mask); import -> continued pretraining on sharedbert's
pipeline with the imported vocabulary; import -> GLUE fine-tuning -> restore(seed).predict
-> export as BertForSequenceClassification, whose logits a numpy BERT (checked against the
transformers-made golden outputs first) reproduces; import -> convert_shared -> fine-tune.
"""

import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest
from safetensors.numpy import load_file
from scipy.special import erf
from tokenizers import Tokenizer as HfTokenizer

import sharedbert
from sharedbert.convert import hf as convert_hf
from sharedbert.convert import shared as convert_shared
from sharedbert.tasks import finetune
from sharedbert import train
from sharedbert.data import tokenizer as tokenizer_lib
from sharedbert.errors import UserError
from test_finetune import glue_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, 'tests', 'fixtures', 'hf_bert_tiny')
WORDS = 'the a cat dog sat on mat ran house tree river city day night old new'.split()
CUE = 'queen'


@pytest.fixture(scope='module')
def imported(tmp_path_factory):
  workdir = tmp_path_factory.mktemp('hf') / 'imported'
  notes = convert_hf.import_hf(FIXTURE, str(workdir))
  assert any('vocab.txt (99 WordPiece tokens, lower-cased)' in n for n in notes)
  return workdir


@pytest.fixture(scope='module')
def sst2_dir(tmp_path_factory):
  rng = random.Random(1)
  task = tmp_path_factory.mktemp('glue') / 'SST-2'
  task.mkdir()
  for name, n in (('train', 160), ('dev', 40)):
    with open(task / f'{name}.tsv', 'w') as f:
      f.write('sentence\tlabel\n')
      for i in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 7))]
        if i % 2:
          words.insert(rng.randint(0, len(words)), CUE)
        f.write(f'{" ".join(words)}\t{i % 2}\n')
  return task.parent


def ft_config(init_from, glue_dir, **kw):
  c = glue_config('task=sst2,seeds=1')
  c.init_from = str(init_from)
  c.data.glue_dir = str(glue_dir)
  c.data.seq_len = 16
  c.num_epochs, c.batch_size, c.log_every_steps = 3, 16, 0
  c.optim.lr = 3e-3
  c.eval.bootstrap_resamples = 20
  c.eval.predict_test = False
  c.ckpt.max_to_keep = 2
  c.update(kw)
  return c


def test_restore_an_imported_workdir(imported):
  assert tokenizer_lib.vocab_kind(str(imported)) == 'wordpiece'
  run = sharedbert.restore(str(imported))
  assert run.tokenizer.kind == 'wordpiece' and run.tokenizer.mask_id == 6
  out = run.encode(['the cat sat on the mat.', 'paris'])
  assert out['sequence_output'].shape[::2] == (2, 32) and out['input_mask'][1].sum() == 3
  guesses = run.fill_mask('the [MASK] sat on the mat.')
  assert len(guesses) == 5
  assert all(g['token_id'] not in run.tokenizer.special_ids for g in guesses)
  assert guesses[0]['sequence'] == f'the {guesses[0]["token"]} sat on the mat.'.replace(' ##', '')


def test_continued_pretraining_uses_the_imported_vocabulary(imported, tmp_path):
  workdir = tmp_path / 'continued'
  workdir.mkdir()
  for name in os.listdir(imported):  # A copy, so that the module's import stays at step 0.
    src = os.path.join(imported, name)
    if os.path.isdir(src):
      import shutil
      shutil.copytree(src, workdir / name)
    else:
      (workdir / name).write_bytes(open(src, 'rb').read())
  rng = random.Random(0)
  (tmp_path / 'corpus.txt').write_text('\n\n'.join(
      ' '.join(rng.choice(WORDS + [CUE]) for _ in range(20)) + '.' for _ in range(60)))
  with open(workdir / 'config.json') as f:
    import ml_collections
    c = ml_collections.ConfigDict(json.load(f))
  c.data.corpus = str(tmp_path / 'corpus.txt')
  c.data.update(seq_len=16, batch_size=8, max_predictions=3, eval_fraction=0.1)
  c.update(total_steps=2, log_every_steps=1, eval_every_steps=2, eval_batches=1)
  c.ckpt.update(every_steps=2, async_save=False)
  c.optim.warmup_steps = 1
  last = train.train_and_evaluate(c, str(workdir))
  assert last['step'] == 2 and np.isfinite(last['loss'])
  assert not (workdir / 'vocab.model').exists()  # No sentencepiece vocabulary was learned.
  assert sharedbert.restore(str(workdir)).step == 2


def numpy_bert(t, hf_config, ids, segments, mask):
  """BertForSequenceClassification (or BertModel) in float64 numpy, from HF tensor names."""
  def ln(x, p):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + hf_config['layer_norm_eps']) * t[p + '.weight'] + t[p + '.bias']

  def dense(x, p):
    return x @ t[p + '.weight'].T + t[p + '.bias']

  t = {k: v.astype(np.float64) for k, v in t.items()}
  n, length = ids.shape
  heads = hf_config['num_attention_heads']
  e = 'bert.embeddings.'
  x = (t[e + 'word_embeddings.weight'][ids] + t[e + 'position_embeddings.weight'][:length]
       + t[e + 'token_type_embeddings.weight'][segments])
  x = ln(x, e + 'LayerNorm')
  hidden = [x]
  bias = (1.0 - mask[:, None, None, :]) * np.finfo(np.float32).min
  for i in range(hf_config['num_hidden_layers']):
    p = f'bert.encoder.layer.{i}.'
    split = lambda y: y.reshape(n, length, heads, -1).transpose(0, 2, 1, 3)
    q, k, v = (split(dense(x, p + f'attention.self.{r}')) for r in ('query', 'key', 'value'))
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1]) + bias
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(n, length, -1)
    x = ln(x + dense(ctx, p + 'attention.output.dense'), p + 'attention.output.LayerNorm')
    h = dense(x, p + 'intermediate.dense')
    h = 0.5 * h * (1.0 + erf(h / np.sqrt(2.0)))
    x = ln(x + dense(h, p + 'output.dense'), p + 'output.LayerNorm')
    hidden.append(x)
  out = {'hidden_states': np.stack(hidden)}
  if 'bert.pooler.dense.weight' in t:
    out['pooled'] = np.tanh(dense(x[:, 0], 'bert.pooler.dense'))
  if 'classifier.weight' in t:
    out['logits'] = dense(out['pooled'], 'classifier')
  return out


def test_the_numpy_bert_reproduces_hugging_face():
  """The reference below is itself checked against transformers' golden outputs."""
  golden = np.load(os.path.join(FIXTURE, 'golden.npz'))
  with open(os.path.join(FIXTURE, 'config.json')) as f:
    hf_config = json.load(f)
  tensors = dict(load_file(os.path.join(FIXTURE, 'model.safetensors')),
                 **{'bert.pooler.dense.weight': golden['pooler_weight'],
                    'bert.pooler.dense.bias': golden['pooler_bias']})
  out = numpy_bert(tensors, hf_config, golden['input_ids'], golden['token_type_ids'],
                   golden['attention_mask'])
  np.testing.assert_allclose(out['hidden_states'], golden['hidden_states'], atol=1e-5)
  np.testing.assert_allclose(out['pooled'], golden['pooled_output'], atol=1e-5)


def test_import_finetune_restore_predict_and_export(imported, sst2_dir, tmp_path):
  ft = tmp_path / 'ft'
  results = finetune.finetune_and_evaluate(ft_config(imported, sst2_dir), str(ft))
  seed_dir = ft / 'sst2' / 'seed_0'
  # max_to_keep=2 of 3 epochs: the last two; the vocabulary travels with the model.
  assert sorted(os.listdir(seed_dir / 'checkpoints')) == ['2', '3']
  assert (seed_dir / 'vocab.txt').exists() and (seed_dir / 'model.json').exists()

  clf = sharedbert.restore(str(seed_dir))
  assert clf.step == 3 and clf.labels == ['negative', 'positive']
  dev = [l.split('\t') for l in (sst2_dir / 'SST-2' / 'dev.tsv').read_text().splitlines()[1:]]
  predictions = [p['label_id'] for p in clf.predict([s for s, _ in dev])]
  written = [int(l.split('\t')[1]) for l in
             (seed_dir / 'dev_predictions.tsv').read_text().splitlines()[1:]]
  assert predictions == written  # The restored model is the one that was scored.
  accuracy = np.mean(np.array(predictions) == np.array([int(y) for _, y in dev]))
  assert accuracy == pytest.approx(results['tasks']['sst2']['dev']['validation']['score']['mean'])

  out = tmp_path / 'hf_clf'
  notes = convert_hf.export_hf(str(seed_dir), str(out))
  assert 'BertForSequenceClassification' in notes[0]
  hf_config = json.loads((out / 'config.json').read_text())
  assert hf_config['architectures'] == ['BertForSequenceClassification']
  assert hf_config['id2label'] == {'0': 'negative', '1': 'positive'}
  assert hf_config['problem_type'] == 'single_label_classification'
  hf_tok = HfTokenizer.from_file(str(out / 'tokenizer.json'))
  texts = [s for s, _ in dev[:8]]
  enc = hf_tok.encode_batch(texts)
  length = max(len(e.ids) for e in enc)
  ids = np.array([e.ids + [0] * (length - len(e.ids)) for e in enc])
  mask = np.array([[1] * len(e.ids) + [0] * (length - len(e.ids)) for e in enc])
  reference = numpy_bert(load_file(str(out / 'model.safetensors')), hf_config, ids,
                         np.zeros_like(ids), mask)['logits']
  np.testing.assert_allclose(clf.logits(texts), reference, atol=1e-5, rtol=0)


def test_convert_to_shared_then_finetune(imported, sst2_dir, tmp_path):
  shared = tmp_path / 'shared'
  convert_shared.convert_workdir(str(imported), str(shared), 'shared')
  assert (shared / 'vocab.txt').exists() and (shared / 'tokenizer_config.json').exists()
  ft = tmp_path / 'ft_shared'
  c = ft_config(shared, sst2_dir, num_epochs=2)
  c.ckpt.max_to_keep = 1
  c.eval.select_best_epoch = True
  finetune.finetune_and_evaluate(c, str(ft))
  seed_dir = ft / 'sst2' / 'seed_0'
  record = json.loads((seed_dir / 'metrics.json').read_text())
  kept = os.listdir(seed_dir / 'checkpoints')
  assert kept == [str(record['chosen_epoch'])]  # The best epoch, max_to_keep=1.
  clf = sharedbert.restore(str(seed_dir))
  assert clf.head['model']['attention'] == 'shared'
  assert len(clf.predict([('the cat', None), 'a queen'])) == 2
  result = subprocess.run(
      [sys.executable, '-m', 'sharedbert.convert.hf', 'export', f'--workdir={seed_dir}',
       f'--hf_dir={tmp_path}/out'], capture_output=True, text=True, cwd=ROOT,
      env=dict(os.environ, JAX_PLATFORMS='cpu'))
  # No transformers architecture holds shared attention: custom code (issue 43), the
  # classifier's head carried over as it was fine-tuned.
  assert result.returncode == 0, result.stderr[-3000:]
  config = json.loads((tmp_path / 'out' / 'config.json').read_text())
  assert config['architectures'] == ['SharedBertForSequenceClassification']
  assert config['attention_variant'] == 'shared' and config['num_labels'] == 2
  tensors = load_file(str(tmp_path / 'out' / 'model.safetensors'))
  np.testing.assert_array_equal(tensors['classifier.kernel'],
                                np.asarray(clf.params['classifier']['kernel']))


def test_export_refuses_what_does_not_fit(imported, tmp_path):
  cfg, params, _, _ = convert_hf.read_params(str(imported))
  head = {'num_labels': 3, 'labels': ['a', 'b', 'c'], 'is_regression': False}
  with pytest.raises(UserError, match='does not fit 3 labels'):
    convert_hf.write_hf_dir(str(tmp_path / 'x'), cfg, params, head=head,
                            head_params={'kernel': np.zeros((32, 2)), 'bias': np.zeros(2)})
  bare = tmp_path / 'bare'
  bare.mkdir()
  for name in ('config.json', 'checkpoints'):
    os.symlink(os.path.join(imported, name), bare / name)
  (tmp_path / 'hf_out').mkdir()
  (tmp_path / 'hf_out' / 'keep.txt').write_text('mine')
  with pytest.raises(UserError, match='holds no vocabulary'):
    convert_hf.export_hf(str(bare), str(tmp_path / 'hf_out'))
  assert os.listdir(tmp_path / 'hf_out') == ['keep.txt']
  assert not [n for n in os.listdir(tmp_path) if n.startswith('.hf_out')]


def test_conversion_experiment_on_the_fixture_bert(tmp_path):
  """sharedbert.lab.conversion end to end: import, every arm converted, STS-B
  zero-shot and layer errors, the summary's keys; a rerun resumes with nothing to do."""
  from sharedbert.lab import conversion
  words = 'the a cat dog sat on mat ran and was big small'.split()
  rng = np.random.default_rng(0)
  sent = lambda: ' '.join(rng.choice(words, 6))
  data = tmp_path / 'data'
  (data / 'corpus').mkdir(parents=True)
  (data / 'corpus' / 'text.txt').write_text('\n\n'.join(sent() for _ in range(200)))
  (data / 'glue' / 'STS-B').mkdir(parents=True)
  header = ('index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\t'
            'score\n')
  (data / 'glue' / 'STS-B' / 'dev.tsv').write_text(header + ''.join(
      f'{i}\tg\tf\ty\t{i}\ts\ts\t{sent()}\t{sent()}\t{rng.uniform(0, 5):.2f}\n'
      for i in range(40)))
  work = tmp_path / 'w'
  conversion.run(str(FIXTURE), str(data), str(work))
  summary = json.loads((work / 'summary.json').read_text())
  c = summary['conversion']
  assert set(c) == {'original', *conversion.ARMS}
  assert c['original']['layer_errors'] == [0.0] * len(c['original']['layer_errors'])
  for name, r in c.items():
    assert -1 <= r['stsb_spearman'] <= 1 and r['stsb_pairs'] == 40, name
  assert all(e > 0 for e in c['rank1']['layer_errors'])
  text = (work / 'report.md').read_text()
  assert '| `function_text` | shared | function + corpus weighting |' in text
  before = os.path.getmtime(work / 'results' / 'rank1.json')
  conversion.run(str(FIXTURE), str(data), str(work))
  assert os.path.getmtime(work / 'results' / 'rank1.json') == before


@pytest.mark.parametrize('key, value, message', [
    ('causal', True, 'model.causal=True'),
    ('position_embeddings', 'none', 'no position table')])
def test_export_refuses_a_model_that_hugging_face_would_compute_differently(
    imported, key, value, message):
  """transformers' own BERT layouts cannot hold a causal or position-free model (it exported
  silently as a bidirectional one): hf_config_from_model refuses them, and export_hf
  writes them as custom code instead (test_hf_custom: its causal and position-free goldens)."""
  import dataclasses
  from sharedbert.convert import hf_layout
  cfg, _, _, _ = convert_hf.read_params(str(imported))
  hf_layout.hf_config_from_model(cfg)  # The model as trained exports.
  with pytest.raises(UserError, match=message):
    hf_layout.hf_config_from_model(dataclasses.replace(cfg, **{key: value}))
