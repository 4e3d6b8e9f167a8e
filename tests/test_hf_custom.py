"""Every variant leaves JAX as custom code for transformers (issue 43), checked without torch:
the outputs real transformers gave on the exported folders (tests/fixtures/hf_custom, made by
tools/make_custom_golden.py) against sharedbert's on the same weights, the code those goldens
were made with, and export -> import -> export through the real commands."""

import ast
import json
import pathlib

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file

from sharedbert.convert import hf as convert_hf
from sharedbert.convert import hf_custom
from sharedbert.convert import shared as convert_shared
from sharedbert.models.bert import BertForPretraining, BertForSequenceClassification

REPO = pathlib.Path(__file__).resolve().parents[1]
GOLDEN = REPO / 'tests' / 'fixtures' / 'hf_custom'
MANIFEST = json.loads((GOLDEN / 'manifest.json').read_text())
HF_FIXTURE = REPO / 'tests' / 'fixtures' / 'hf_bert_tiny'


def test_the_goldens_were_made_with_the_code_that_is_exported():
  """Editing modeling_sharedbert.py (or the config file) without regenerating the goldens
  fails here: run tools/make_custom_golden.py."""
  assert MANIFEST['code_digest'] == hf_custom.code_digest()


def test_every_variant_has_a_golden():
  cases = MANIFEST['cases']
  assert {c['config']['attention_variant'] for c in cases.values()} == set(hf_custom.EXPORTABLE)
  assert any(c['config']['causal'] for c in cases.values())
  assert any(c['config']['position_embeddings'] == 'none' for c in cases.values())
  # Every variant with rotary positions, some with a query phase.
  rotary = [c['config'] for c in cases.values() if c['config']['position_embeddings'] == 'rotary']
  assert {c['attention_variant'] for c in rotary} == set(hf_custom.EXPORTABLE)
  assert any(c['rope_query_phase'] for c in rotary)
  assert {c['config']['pre_layer_norm'] for c in cases.values()} == {True, False}
  assert {c['config'].get('pooling') for c in cases.values()
          if 'num_labels' in c['config']} == {'cls', 'mean'}
  for name, c in cases.items():  # What transformers itself reported when they were made.
    assert c['max_abs_logit_difference'] <= 1e-4 and c['resaved_difference'] == 0, name
    assert c['max_abs_log_prob_difference'] <= 1e-4, name
    assert c['hidden_states'] == c['config']['num_hidden_layers'] + 1, name
    # output_attentions: one [B, N, T, S] probability tensor per layer, as BertModel's.
    assert c['attention_layers'] == c['config']['num_hidden_layers'], name
    assert c['max_abs_attention_difference'] <= 1e-4, name
    # What else transformers' BERT answers (issue 56): the input embeddings, a warning for a
    # padded batch without attention_mask, gradient checkpointing with the same gradients,
    # and resize_token_embeddings keeping every old logit.
    api = c['api']
    assert api['input_embeddings'] and api['warns_without_attention_mask'], name
    assert api['gradient_checkpointing_max_grad_difference'] <= 1e-4, name
    assert api['layer_forward_calls_with_checkpointing'] == 2, name  # Recomputed: on.
    assert api['resize_token_embeddings_max_difference'] <= 1e-4, name
    assert api['resized_rows'] == c['config']['vocab_size'] + 5, name
  assert len(cases['masa']['atom_tensors']) == len(cases['masa']['config']['masa_projections'])


@pytest.mark.parametrize('name', sorted(MANIFEST['cases']))
def test_transformers_computed_what_sharedbert_computes(name):
  """The logits and attention probabilities transformers gave on the exported folder (rows
  of 11, 6 and 9 real tokens, two segments) are sharedbert's on the same weights and config,
  to 1e-4 (float32)."""
  case = MANIFEST['cases'][name]
  data = dict(np.load(GOLDEN / f'{name}.npz'))
  cfg = hf_custom.model_config_from_json(case['config'])
  params = hf_custom.params_from_tensors(
      {k[2:]: v for k, v in data.items() if k.startswith('w:')})
  ids, mask, segments = data['input_ids'], data['attention_mask'], data['token_type_ids']
  if 'num_labels' in case['config']:
    model = BertForSequenceClassification(cfg, num_labels=case['config']['num_labels'],
                                          pooling=case['config']['pooling'])
    ours, state = model.apply({'params': params}, ids, segments, mask,
                              mutable=['attention_logits'])
  else:
    positions = np.tile(np.arange(ids.shape[1]), (len(ids), 1))
    out, state = BertForPretraining(cfg).apply({'params': params}, ids, segments, mask,
                                               positions, mutable=['attention_logits'])
    ours = out['mlm_logits']
  assert np.max(np.abs(np.asarray(ours) - data['logits'])) <= 1e-4
  for i in range(cfg.num_layers):
    logits = state['attention_logits']['bert'][f'layer_{i}']['attention']['logits'][0]
    probs = np.asarray(jax.nn.softmax(logits, axis=-1))
    assert np.max(np.abs(probs - data[f'attention_{i}'])) <= 1e-4, i


def test_the_modeling_code_imports_only_torch_and_transformers():
  allowed = {'math', 'torch', 'transformers'}
  for name in hf_custom.CODE_FILES:
    tree = ast.parse((pathlib.Path(hf_custom.CODE_DIR) / name).read_text())
    for node in ast.walk(tree):
      if isinstance(node, ast.Import):
        roots = {a.name.split('.')[0] for a in node.names}
      elif isinstance(node, ast.ImportFrom) and node.level == 0:
        roots = {node.module.split('.')[0]}
      else:
        continue
      assert roots <= allowed, (name, roots)


@pytest.fixture(scope='module')
def imported(tmp_path_factory):
  workdir = tmp_path_factory.mktemp('imported') / 'w'
  convert_hf.import_hf(str(HF_FIXTURE), str(workdir))
  return workdir


@pytest.mark.parametrize('variant', ['masa', 'shared'])
def test_export_import_export_writes_identical_tensors(imported, tmp_path, variant):
  source = tmp_path / variant
  convert_shared.convert_workdir(str(imported), str(source), variant)
  # A recipe of its own, unlike the default one an import writes.
  recipe = json.loads((source / 'config.json').read_text())
  recipe['total_steps'], recipe['data']['batch_size'], recipe['data']['seq_len'] = 30, 8, 16
  (source / 'config.json').write_text(json.dumps(recipe))
  first, back, second = tmp_path / 'first', tmp_path / 'back', tmp_path / 'second'
  convert_hf.export_hf(str(source), str(first))
  config = json.loads((first / 'config.json').read_text())
  assert config['model_type'] == 'sharedbert' and config['attention_variant'] == variant
  assert config['auto_map']['AutoModelForMaskedLM'] == 'modeling_sharedbert.SharedBertForMaskedLM'
  for name in hf_custom.CODE_FILES + ('README.md', 'tokenizer.json', 'vocab.txt'):
    assert (first / name).is_file(), name
  assert 'trust_remote_code=True' in (first / 'README.md').read_text()
  convert_hf.import_hf(str(first), str(back))
  convert_hf.export_hf(str(back), str(second))
  a, b = load_file(str(first / 'model.safetensors')), load_file(str(second / 'model.safetensors'))
  assert sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a)
  assert json.loads((second / 'config.json').read_text()) == config
  # The card still describes the run that trained the weights, not the import's default
  # recipe at step 0 (issue 56).
  assert config['sharedbert_trained']['recipe']['total_steps'] == json.loads(
      (source / 'config.json').read_text())['total_steps']
  card = (second / 'README.md').read_text()
  assert card == (first / 'README.md').read_text()
  assert '- trained: step 0 of 30, batch 8 x 16 tokens' in card


def test_standard_keeps_its_native_layout_unless_custom_code_is_asked(imported, tmp_path):
  convert_hf.export_hf(str(imported), str(tmp_path / 'native'))
  assert json.loads((tmp_path / 'native' / 'config.json').read_text())['model_type'] == 'bert'
  convert_hf.export_hf(str(imported), str(tmp_path / 'custom'), custom_code=True)
  config = json.loads((tmp_path / 'custom' / 'config.json').read_text())
  assert config['model_type'] == 'sharedbert' and config['attention_variant'] == 'standard'
