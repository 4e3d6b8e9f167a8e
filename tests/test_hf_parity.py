"""Hugging Face BERT parity: the golden fixture, import, export, and what a checkpoint may hold.

tests/fixtures/hf_bert_tiny holds what `BertForMaskedLM.save_pretrained` wrote for a small
random BERT and the outputs transformers computed (tools/make_hf_golden.py, which needs
torch and transformers, regenerates it; these tests need neither).
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from safetensors.numpy import load_file

from sharedbert.convert import hf as convert_hf
from sharedbert.errors import UserError
from sharedbert.models.bert import BertForPretraining, ModelConfig

FIXTURE = os.path.join(os.path.dirname(__file__), 'fixtures', 'hf_bert_tiny')
TOLERANCE = 1e-5


@pytest.fixture(scope='module')
def golden():
  return dict(np.load(os.path.join(FIXTURE, 'golden.npz')))


@pytest.fixture(scope='module')
def hf():
  return convert_hf.read_hf_dir(FIXTURE)


def run_model(cfg: ModelConfig, params, golden):
  """Our model on the golden inputs: logits at every position, hidden states, pooled output."""
  ids, mask, segments = golden['input_ids'], golden['attention_mask'], golden['token_type_ids']
  every_position = np.tile(np.arange(ids.shape[1], dtype=np.int32), (ids.shape[0], 1))
  out = BertForPretraining(cfg).apply({'params': params}, ids, segments, mask, every_position,
                                      return_hidden_states=True)
  return (np.asarray(out['mlm_logits']), np.stack([np.asarray(h) for h in out['hidden_states']]),
          np.asarray(out['pooled_output']))


def test_fixture_is_small_and_its_padding_matters_to_the_model(hf, golden):
  total = sum(os.path.getsize(os.path.join(FIXTURE, f)) for f in os.listdir(FIXTURE))
  assert total < 300_000
  assert golden['hidden_states'].shape[0] == 3  # Embeddings + 2 layers.
  mask = golden['attention_mask']
  real = mask.astype(bool)
  padded = np.flatnonzero(~real.all(1))
  assert len(padded)  # Some rows are padded...
  hf_config, tensors = hf
  cfg = convert_hf.model_config_from_hf(hf_config)
  params, _ = convert_hf.params_from_hf(tensors, cfg)
  want = golden['hidden_states'][-1]
  # ...the real tokens' outputs do not depend on what the padded positions hold...
  other_pads = dict(golden, input_ids=np.where(real, golden['input_ids'],
                                               (golden['input_ids'] + 13) % cfg.vocab_size))
  _, hidden, _ = run_model(cfg, params, other_pads)
  np.testing.assert_allclose(hidden[-1][real], want[real], atol=TOLERANCE, rtol=0)
  # ...and they change when the model is not told which positions are padding, so the
  # fixture does exercise the mask.
  _, unmasked, _ = run_model(cfg, params, dict(golden, attention_mask=np.ones_like(mask)))
  in_padded_rows = real[padded]
  assert np.abs(unmasked[-1][padded][in_padded_rows] - want[padded][in_padded_rows]).max() > 1e-2


def test_import_reproduces_hugging_face_outputs(hf, golden):
  hf_config, tensors = hf
  cfg = convert_hf.model_config_from_hf(hf_config)
  assert (cfg.vocab_size, cfg.hidden_size, cfg.num_layers, cfg.num_heads, cfg.mlp_dim) == (
      99, 32, 2, 4, 37)
  params, notes = convert_hf.params_from_hf(tensors, cfg)
  assert 'pooler: not in the checkpoint, freshly initialised (seed 0)' in notes
  assert 'MLM head: from the checkpoint' in notes
  logits, hidden, _ = run_model(cfg, params, golden)
  assert logits.shape == golden['logits'].shape
  # Every position, padded ones included (HF computes them the same way).
  np.testing.assert_allclose(hidden, golden['hidden_states'], atol=TOLERANCE, rtol=0)
  np.testing.assert_allclose(logits, golden['logits'], atol=TOLERANCE, rtol=0)


def test_a_pooler_in_the_checkpoint_is_used(hf, golden):
  hf_config, tensors = hf
  tensors = dict(tensors, **{'bert.pooler.dense.weight': golden['pooler_weight'],
                             'bert.pooler.dense.bias': golden['pooler_bias']})
  cfg = convert_hf.model_config_from_hf(hf_config)
  params, notes = convert_hf.params_from_hf(tensors, cfg)
  assert 'pooler: from the checkpoint' in notes
  _, _, pooled = run_model(cfg, params, golden)
  np.testing.assert_allclose(pooled, golden['pooled_output'], atol=TOLERANCE, rtol=0)


def test_bert_model_layout_and_old_layer_norm_names(hf, golden):
  """A BertModel file (no 'bert.' prefix, no MLM head) with gamma/beta LayerNorm names."""
  hf_config, tensors = hf
  renamed = {}
  for key, value in tensors.items():
    if key.startswith('cls.'):
      continue
    key = key[len('bert.'):]
    key = key.replace('LayerNorm.weight', 'LayerNorm.gamma').replace('LayerNorm.bias',
                                                                     'LayerNorm.beta')
    renamed[key] = value
  renamed['embeddings.position_ids'] = np.arange(16)[None]  # An old buffer: ignored.
  cfg = convert_hf.model_config_from_hf(hf_config)
  params, notes = convert_hf.params_from_hf(renamed, cfg)
  assert 'MLM head: not in the checkpoint, freshly initialised (seed 0)' in notes
  assert any('ignored' in n and 'position_ids' in n for n in notes)
  _, hidden, _ = run_model(cfg, params, golden)
  np.testing.assert_allclose(hidden, golden['hidden_states'], atol=TOLERANCE, rtol=0)


def test_import_then_export_round_trips_the_files(tmp_path, hf, golden):
  hf_config, tensors = hf
  workdir, out = tmp_path / 'work', tmp_path / 'hf_out'
  notes = convert_hf.import_hf(FIXTURE, str(workdir))
  assert any('WordPiece' in n for n in notes)
  saved = json.loads((workdir / 'config.json').read_text())
  assert saved['hf_checkpoint'] == os.path.abspath(FIXTURE)
  assert saved['model']['attention'] == 'standard' and saved['model']['mlp_dim'] == 37

  cfg, params, meta, step = convert_hf.read_params(str(workdir))
  assert step == 0 and meta['data_position'] == 0 and meta['source'].startswith('huggingface:')
  logits, _, _ = run_model(cfg, params, golden)
  np.testing.assert_allclose(logits, golden['logits'], atol=TOLERANCE, rtol=0)

  convert_hf.export_hf(str(workdir), str(out))
  exported = load_file(str(out / 'model.safetensors'))
  assert set(exported) - set(tensors) == {'bert.pooler.dense.weight', 'bert.pooler.dense.bias'}
  for key, value in tensors.items():
    np.testing.assert_array_equal(exported[key], value, err_msg=key)
  written = json.loads((out / 'config.json').read_text())
  for key in ('vocab_size', 'hidden_size', 'num_hidden_layers', 'num_attention_heads',
              'intermediate_size', 'max_position_embeddings', 'type_vocab_size',
              'layer_norm_eps', 'hidden_act', 'initializer_range'):
    assert written[key] == hf_config[key], key
  # And what was written imports to the same model again.
  again, _ = convert_hf.params_from_hf(exported, convert_hf.model_config_from_hf(written))
  np.testing.assert_array_equal(again['bert']['pooler']['kernel'],
                                params['bert']['pooler']['kernel'])


@pytest.mark.parametrize('change,match', [
    (lambda c, t: c.update(hidden_act='relu'), 'hidden_act'),
    (lambda c, t: c.update(position_embedding_type='relative_key'), 'position_embedding_type'),
    (lambda c, t: t.pop('bert.encoder.layer.1.attention.self.key.weight'), 'lacks 1 encoder'),
    (lambda c, t: t.update({'bert.encoder.layer.0.attention.self.rel.weight': np.zeros(2)}),
     'cannot place'),
    (lambda c, t: t.update({'cls.predictions.decoder.weight':
                            t['bert.embeddings.word_embeddings.weight'] + 1}), 'untied'),
    (lambda c, t: c.update(num_attention_heads=3), 'not divisible'),
])
def test_unsupported_checkpoints_are_user_errors(hf, change, match):
  hf_config, tensors = dict(hf[0]), dict(hf[1])
  change(hf_config, tensors)
  with pytest.raises(UserError, match=match):
    convert_hf.params_from_hf(tensors, convert_hf.model_config_from_hf(hf_config))


def test_only_standard_exports():
  with pytest.raises(UserError, match='only standard models map'):
    convert_hf.hf_config_from_model(ModelConfig(attention='shared'))


def test_command_line_errors_are_one_line(tmp_path):
  result = subprocess.run(
      [sys.executable, '-m', 'sharedbert.convert.hf', 'import', f'--hf_dir={tmp_path}/none',
       f'--workdir={tmp_path}/work'], capture_output=True, text=True,
      env=dict(os.environ, JAX_PLATFORMS='cpu'), cwd=os.path.dirname(os.path.dirname(__file__)))
  assert result.returncode == 2
  assert result.stderr.strip().splitlines()[-1].startswith('sharedbert convert_hf: error: ')
  assert 'config.json does not exist' in result.stderr


def broken_hf_dir(tmp_path, config_text=None, weights=None):
  """A copy of the fixture with config.json and/or model.safetensors replaced."""
  hf_dir = tmp_path / 'hf'
  hf_dir.mkdir()
  with open(os.path.join(FIXTURE, 'config.json')) as f:
    (hf_dir / 'config.json').write_text(config_text if config_text is not None else f.read())
  with open(os.path.join(FIXTURE, 'model.safetensors'), 'rb') as f:
    data = f.read()
  (hf_dir / 'model.safetensors').write_bytes(weights(data) if weights else data)
  return hf_dir


def with_vocab_size_zero(tmp_path):
  hf_config = json.loads(open(os.path.join(FIXTURE, 'config.json')).read())
  return json.dumps(dict(hf_config, vocab_size=0))


@pytest.mark.parametrize('make, message', [
    (lambda t: broken_hf_dir(t, config_text='{"vocab_size": 99,'),
     '{hf}/config.json is not valid JSON (Expecting property name enclosed in double quotes: '
     'line 1 column 19 (char 18)); save or download it again'),
    (lambda t: broken_hf_dir(t, config_text='[1, 2]'),
     '{hf}/config.json holds a JSON list, not an object; is it a BERT config.json?'),
    (lambda t: broken_hf_dir(t, config_text=with_vocab_size_zero(t)),
     '{hf}/config.json: model.vocab_size must be an integer >= 6 (the 5 special tokens and at '
     'least one piece), got 0'),
    (lambda t: broken_hf_dir(t, weights=lambda d: d[:len(d) // 2]),
     '{hf}/model.safetensors is not a readable safetensors file ('),
    (lambda t: broken_hf_dir(t, weights=lambda d: b'\xff' * 64),
     '{hf}/model.safetensors is not a readable safetensors file ('),
])
def test_import_of_a_damaged_directory_writes_nothing(tmp_path, make, message):
  hf_dir = make(tmp_path)
  workdir = tmp_path / 'work'
  with pytest.raises(UserError) as e:
    convert_hf.import_hf(str(hf_dir), str(workdir))
  assert str(e.value).startswith(message.replace('{hf}', str(hf_dir)))
  assert '\n' not in str(e.value)
  assert not workdir.exists()


def test_import_of_a_corrupt_file_through_the_command_line(tmp_path):
  hf_dir = broken_hf_dir(tmp_path, weights=lambda d: d[:len(d) // 2])
  result = subprocess.run(
      [sys.executable, '-m', 'sharedbert.convert.hf', 'import', f'--hf_dir={hf_dir}',
       f'--workdir={tmp_path}/work'], capture_output=True, text=True,
      env=dict(os.environ, JAX_PLATFORMS='cpu'), cwd=os.path.dirname(os.path.dirname(__file__)))
  assert result.returncode == 2, result.stderr[-2000:]
  [line] = [l for l in result.stderr.splitlines() if 'error' in l.lower()]
  assert line.startswith(f'sharedbert convert_hf: error: {hf_dir}/model.safetensors is not a '
                         'readable safetensors file (')
  assert not (tmp_path / 'work').exists()


# ---------------------------------------------------------------------------------------
# Pre-LN: RobertaPreLayerNormForMaskedLM (tools/make_hf_golden.py --arch=roberta-prelayernorm).

PRE_LN_FIXTURE = os.path.join(os.path.dirname(__file__), 'fixtures', 'hf_prelayernorm_tiny')


@pytest.fixture(scope='module')
def pre_ln():
  return convert_hf.read_hf_dir(PRE_LN_FIXTURE), dict(
      np.load(os.path.join(PRE_LN_FIXTURE, 'golden.npz')))


def test_pre_ln_checkpoint_computes_what_transformers_computes(pre_ln):
  """At the real tokens (RoBERTa gives padding a position row of its own, which sharedbert
  does not have): logits and every hidden state to 1e-5."""
  (hf_config, tensors), golden = pre_ln
  cfg = convert_hf.model_config_from_hf(hf_config)
  assert cfg.pre_layer_norm and cfg.max_position_embeddings == 16  # 17 rows, one for padding.
  params, notes = convert_hf.params_from_hf(tensors, cfg)
  assert 'MLM head: from the checkpoint' in notes
  logits, hidden, _ = run_model(cfg, params, golden)
  real = golden['attention_mask'].astype(bool)
  np.testing.assert_allclose(logits[real], golden['logits'][real], atol=TOLERANCE, rtol=0)
  np.testing.assert_allclose(hidden[:, real], golden['hidden_states'][:, real],
                             atol=TOLERANCE, rtol=0)
  # The padding's own position row matters to transformers: the comparison can fail there.
  assert np.abs(logits[~real] - golden['logits'][~real]).max() > 1e-3


def test_pre_ln_import_then_export_gives_the_same_tensors(pre_ln, tmp_path):
  (hf_config, tensors), _ = pre_ln
  workdir, out = tmp_path / 'w', tmp_path / 'hf'
  convert_hf.import_hf(PRE_LN_FIXTURE, str(workdir))
  notes = convert_hf.export_hf(str(workdir), str(out))
  assert 'RobertaPreLayerNormForMaskedLM layout' in notes[0]
  written = json.loads((out / 'config.json').read_text())
  assert written['model_type'] == 'roberta-prelayernorm'
  assert written['architectures'] == ['RobertaPreLayerNormForMaskedLM']
  for key in ('max_position_embeddings', 'pad_token_id', 'num_hidden_layers', 'hidden_size'):
    assert written[key] == hf_config[key], key
  exported = load_file(str(out / 'model.safetensors'))
  pooler = {'roberta_prelayernorm.pooler.dense.weight', 'roberta_prelayernorm.pooler.dense.bias'}
  assert set(exported) - set(tensors) == pooler
  positions = 'roberta_prelayernorm.embeddings.position_embeddings.weight'
  for key, value in tensors.items():
    if key == positions:  # The padding row is not sharedbert's: written as zeros.
      np.testing.assert_array_equal(exported[key][1:], value[1:])
      assert not exported[key][0].any()
    else:
      np.testing.assert_array_equal(exported[key], value, err_msg=key)


def test_pre_ln_classifier_exports_as_roberta_classification_head(pre_ln):
  """RoBERTa's head is dense + tanh on the first token, then out_proj: sharedbert's pooler
  and classifier under those names, and no pooler in the encoder."""
  (hf_config, tensors), _ = pre_ln
  cfg = convert_hf.model_config_from_hf(hf_config)
  params, _ = convert_hf.params_from_hf(tensors, cfg)
  rng = np.random.default_rng(0)
  head = {'task': 'sst2', 'num_labels': 2, 'is_regression': False, 'labels': ['0', '1']}
  head_params = {'kernel': rng.standard_normal((32, 2)).astype(np.float32),
                 'bias': rng.standard_normal(2).astype(np.float32)}
  import tempfile
  with tempfile.TemporaryDirectory() as out:
    convert_hf.write_hf_dir(out, cfg, params, head=head, head_params=head_params)
    written = json.loads(open(os.path.join(out, 'config.json')).read())
    exported = load_file(os.path.join(out, 'model.safetensors'))
  assert written['architectures'] == ['RobertaPreLayerNormForSequenceClassification']
  assert not any('pooler' in k or k.startswith('lm_head') for k in exported)
  np.testing.assert_array_equal(exported['classifier.dense.weight'],
                                params['bert']['pooler']['kernel'].T)
  np.testing.assert_array_equal(exported['classifier.out_proj.weight'], head_params['kernel'].T)
  np.testing.assert_array_equal(exported['classifier.out_proj.bias'], head_params['bias'])


# ---------------------------------------------------------------------------------------
# Rotary positions: RoFormerForMaskedLM (tools/make_hf_golden.py --arch=roformer).

ROFORMER_FIXTURE = os.path.join(os.path.dirname(__file__), 'fixtures', 'hf_roformer_tiny')


@pytest.fixture(scope='module')
def roformer():
  return convert_hf.read_hf_dir(ROFORMER_FIXTURE), dict(
      np.load(os.path.join(ROFORMER_FIXTURE, 'golden.npz')))


def test_roformer_checkpoint_computes_what_transformers_computes(roformer):
  """A RoFormer is sharedbert's `standard` with rotary positions (post-LN, theta 10,000):
  logits and every hidden state to 1e-5, padding included (rotary has no padding row), and
  no position table."""
  (hf_config, tensors), golden = roformer
  cfg = convert_hf.model_config_from_hf(hf_config)
  assert cfg.position_embeddings == 'rotary' and not cfg.pre_layer_norm
  assert cfg.rope_theta == 10000.0 and cfg.rope_query_phase == 0.0
  params, notes = convert_hf.params_from_hf(tensors, cfg)
  assert 'position_embeddings' not in params['bert']['embeddings']
  assert any('roformer.encoder.embed_positions.weight' in n for n in notes)
  logits, hidden, _ = run_model(cfg, params, golden)
  np.testing.assert_allclose(logits, golden['logits'], atol=TOLERANCE, rtol=0)
  np.testing.assert_allclose(hidden, golden['hidden_states'], atol=TOLERANCE, rtol=0)
  # The rotation matters to the comparison: without it the logits differ.
  import dataclasses
  unrotated, _, _ = run_model(dataclasses.replace(cfg, position_embeddings='none'), params,
                              golden)
  assert np.abs(unrotated - golden['logits']).max() > 1e-3


def test_roformer_import_then_export_gives_the_same_tensors(roformer, tmp_path):
  (hf_config, tensors), _ = roformer
  workdir, out = tmp_path / 'w', tmp_path / 'hf'
  convert_hf.import_hf(ROFORMER_FIXTURE, str(workdir))
  saved = json.loads((workdir / 'config.json').read_text())
  assert saved['model']['position_embeddings'] == 'rotary'
  notes = convert_hf.export_hf(str(workdir), str(out))
  assert 'RoFormerForMaskedLM layout' in notes[0] and 'pooler' not in notes[0]
  written = json.loads((out / 'config.json').read_text())
  assert written['model_type'] == 'roformer' and written['architectures'] == [
      'RoFormerForMaskedLM']
  for key in ('max_position_embeddings', 'num_hidden_layers', 'hidden_size', 'embedding_size',
              'rotary_value'):
    assert written[key] == hf_config[key], key
  exported = load_file(str(out / 'model.safetensors'))
  # The sinusoid buffer is transformers' own (recomputed on load); everything else as read.
  assert set(tensors) - set(exported) == {'roformer.encoder.embed_positions.weight'}
  assert set(exported) <= set(tensors)
  for key, value in exported.items():
    np.testing.assert_array_equal(value, tensors[key], err_msg=key)


@pytest.mark.parametrize('change,custom', [
    (dict(), False), (dict(rope_theta=500.0), True), (dict(rope_query_phase=1.0), True),
    (dict(pre_layer_norm=True), True), (dict(attention='shared'), True)])
def test_only_what_roformer_computes_exports_as_roformer(change, custom):
  import dataclasses
  from sharedbert.convert import hf_custom, hf_layout
  cfg = dataclasses.replace(ModelConfig(position_embeddings='rotary'), **change)
  assert hf_custom.needs_custom_code(cfg) == custom
  # A classifier's head is RoFormer's own (dense, GELU, dense), not BERT's pooler.
  assert hf_custom.needs_custom_code(cfg, {'pooling': 'cls'})
  if custom and cfg.attention == 'standard':
    with pytest.raises(UserError, match='export it as custom code'):
      hf_layout.hf_config_from_model(cfg)


def test_sharedbert_s_own_pre_ln_export_with_a_sentencepiece_vocabulary_imports_back(tmp_path):
  """Issue 56: import refused sharedbert's own built-in export of a `standard` pre-LN run
  (RobertaPreLayerNorm with tokenizer.json and vocab.model: "has no vocab.txt"), though it
  reads the custom-code exports back. Export -> import -> export now gives the same tensors
  and the same sentencepiece vocabulary."""
  from sharedbert import config as sb_config
  from sharedbert.convert import hf_layout
  from sharedbert.data import tokenizer as tokenizer_lib
  config = sb_config.pretrain_config('standard', 'tiny')
  config.model.update(vocab_size=64, num_layers=1, hidden_size=32, num_heads=2, mlp_dim=48)
  assert config.model.pre_layer_norm  # The budget recipe's.
  cfg = ModelConfig.from_config(config.model)
  words = 'the cat sat on a mat and seven dogs ran past the old red barn'.split()
  docs = [' '.join(words[i:] + words[:i]) for i in range(len(words))] * 20
  vocab = tokenizer_lib.train(docs, 40, max_sentences=1000)
  source = tmp_path / 'source'
  convert_hf.write_checkpoint(str(source), config, hf_layout.init_params(cfg, 3),
                              source='test', vocab_size=vocab.vocab_size)
  tokenizer_lib.save(vocab, str(source / tokenizer_lib.VOCAB_FILE))
  first, back, second = tmp_path / 'first', tmp_path / 'back', tmp_path / 'second'
  convert_hf.export_hf(str(source), str(first))
  assert json.loads((first / 'config.json').read_text())['model_type'] == 'roberta-prelayernorm'
  assert (first / 'vocab.model').exists() and not (first / 'vocab.txt').exists()
  convert_hf.import_hf(str(first), str(back))
  assert (back / 'vocab.model').read_bytes() == (source / 'vocab.model').read_bytes()
  convert_hf.export_hf(str(back), str(second))
  a, b = load_file(str(first / 'model.safetensors')), load_file(str(second / 'model.safetensors'))
  assert sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a)
