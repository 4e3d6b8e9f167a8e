"""The parameter report: BERT-base figures from the real trees, and DESIGN.md's formulas."""

import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from sharedbert.models import params as params_lib
from sharedbert.models import attention as attention_lib
from sharedbert.models.bert import ModelConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = params_lib.BERT_BASE


def base(attention, **kw):
  return ModelConfig(attention=attention, **BASE, **kw)


def test_bert_base_figures_from_the_tree():
  standard = params_lib.parameter_counts(base('standard'))
  shared = params_lib.parameter_counts(base('shared'))
  assert standard['encoder total'] == 109_482_240
  assert shared['encoder total'] == 95_335_680
  assert standard['MLM head'] == shared['MLM head'] == 622_650
  qkv = params_lib.reduction(shared['attention QKV'], standard['attention QKV'])
  total = params_lib.reduction(shared['encoder total'], standard['encoder total'])
  assert f'{qkv:.2f}' == '66.54' and f'{total:.2f}' == '12.92'


def test_report_prints_the_figures_and_the_papers():
  text = params_lib.report(base('shared'))
  for figure in ('95,335,680', '109,482,240', '-66.54%', '-12.92%', '622,650',
                 'QKV -66.53%, total -12.94%, 95.3M', 'Kowsher et al.',
                 "agree with the variant's closed form"):
    assert figure in text, figure
  # A smaller model is not what the paper states figures for.
  assert 'Kowsher' not in params_lib.report(
      ModelConfig(attention='shared', num_layers=2, hidden_size=32, num_heads=4, mlp_dim=64,
                  vocab_size=100))


SMALL = dict(num_layers=3, hidden_size=32, num_heads=4, mlp_dim=48, vocab_size=101,
             max_position_embeddings=20, type_vocab_size=2)


def qkv_formula(cfg: ModelConfig) -> tuple[int, int]:
  """(attention QKV, attention output) of the whole stack, as DESIGN.md's table gives them."""
  d, n, layers = cfg.hidden_size, cfg.num_heads, cfg.num_layers
  h = d // n
  dense = d * d + d
  if cfg.attention == 'standard':
    return layers * 3 * dense, layers * dense
  if cfg.attention == 'shared':
    return layers * (dense + 3 * d), layers * dense
  if cfg.attention == 'shared_qk':  # S and V, plus d_q and d_k.
    return layers * (2 * dense + 2 * d), layers * dense
  if cfg.attention == 'symmetric':
    return layers * 2 * dense, layers * dense
  if cfg.attention == 'pairwise':
    return layers * (2 * dense + n * h * h), layers * dense
  if cfg.attention == 'partial_qk':
    r = int(cfg.qk_shared_fraction * h + 1e-9)
    return layers * (n * r * (d + 1) + 2 * n * (h - r) * (d + 1) + dense), layers * dense
  if cfg.attention in ('kv_shared', 'q_identity'):
    return layers * 2 * dense, layers * dense
  if cfg.attention == 'single':
    return layers * dense, layers * dense
  if cfg.attention == 'masa':
    s = cfg.masa_atoms
    per_type = s * d * d + layers * s + layers * d  # atoms, coefficients, biases
    qkv_types = len(set(cfg.masa_projections) & set('qkv'))
    o = per_type if 'o' in cfg.masa_projections else layers * dense
    return qkv_types * per_type + (3 - qkv_types) * layers * dense, o
  raise ValueError(cfg.attention)


@pytest.mark.parametrize('attention,kw', [
    ('standard', {}), ('shared', {}), ('symmetric', {}), ('pairwise', {}),
    ('partial_qk', dict(qk_shared_fraction=0.0)), ('partial_qk', dict(qk_shared_fraction=0.4)),
    ('partial_qk', dict(qk_shared_fraction=1.0)),
    ('masa', dict(masa_atoms=1, masa_projections='qkvo')),
    ('masa', dict(masa_atoms=2, masa_projections='kv')),
    ('kv_shared', {}), ('single', {}), ('q_identity', {}), ('shared_qk', {}),
])
def test_counts_follow_the_design_formulas(attention, kw):
  cfg = ModelConfig(attention=attention, **SMALL, **kw)
  counts = params_lib.parameter_counts(cfg)
  assert (counts['attention QKV'], counts['attention output']) == qkv_formula(cfg)
  # The variant's own closed form (what the report checks) is DESIGN.md's.
  assert attention_lib.VARIANTS[attention].param_formula(cfg) == qkv_formula(cfg)
  # Everything else is the same for all variants.
  d, f, layers = SMALL['hidden_size'], SMALL['mlp_dim'], SMALL['num_layers']
  assert counts['embeddings'] == (SMALL['vocab_size'] + SMALL['max_position_embeddings']
                                  + SMALL['type_vocab_size']) * d
  assert counts['FFN'] == layers * (d * f + f + f * d + d)
  assert counts['LayerNorms'] == (1 + 2 * layers) * 2 * d
  assert counts['pooler'] == d * d + d
  assert counts['MLM head'] == d * d + d + 2 * d + SMALL['vocab_size']
  # The components cover every parameter of the tree.
  leaves = jax.tree.leaves(params_lib.abstract_params(cfg))
  assert counts['total'] == sum(int(np.prod(x.shape)) for x in leaves)


def test_all_variants_table():
  cfgs = params_lib.variant_configs(None, 'tiny', {'model.num_layers': 6})
  assert [c.attention for c in cfgs] == ['standard', 'shared', 'shared_qk', 'symmetric',
                                         'pairwise', 'kv_shared', 'single', 'q_identity',
                                         'partial_qk', 'masa']
  assert all(c.num_layers == 6 and c.hidden_size == 128 for c in cfgs)
  text = params_lib.report_all(cfgs)
  lines = text.splitlines()
  for name in ('shared', 'symmetric', 'pairwise', 'partial_qk', 'masa', 'kv_shared', 'single',
               'q_identity'):
    assert any(line.startswith(name) for line in lines), name
  assert 'S=2, qkvo' in text  # masa: ceil(6 / 3) atoms, following the override.
  assert 'rho=0.5 (32/64 shared)' in text


def test_component_of_an_unknown_parameter_is_an_error():
  with pytest.raises(ValueError, match='no component'):
    params_lib.component(('bert', 'mystery', 'kernel'))


def run_command(*args):
  return subprocess.run([sys.executable, '-m', 'sharedbert.models.params', *args], cwd=ROOT,
                        capture_output=True, text=True, env=dict(os.environ, JAX_PLATFORMS='cpu'))


def test_command_all_at_bert_base():
  result = run_command('--all')
  assert result.returncode == 0, result.stderr
  rows = {line.split()[0]: line for line in result.stdout.splitlines() if line.strip()}
  assert '109,482,240' in rows['standard']
  shared = rows['shared']
  for figure in ('95,335,680', '-66.54%', '-12.92%', 'QKV -66.53%, total -12.94%, 95.3M'):
    assert figure in shared, figure
  # Issue 31's closed forms at BERT-base, from the trees.
  for name, total in (('kv_shared', '102,395,136'), ('single', '95,308,032'),
                      ('shared_qk', '102,413,568'),
                      ('q_identity', '102,395,136'), ('symmetric', '102,395,136')):
    assert total in rows[name], (name, rows[name])


def test_command_errors_are_one_line():
  result = run_command('--config=configs/masa_base.py:tiny', '--config.model.masa_projections=qx')
  assert result.returncode == 2
  assert result.stderr.strip().splitlines() == [
      'sharedbert params: error: model.masa_projections must be distinct letters of "qkvo" '
      '(e.g. "qkvo" or "qk"), got \'qx\'']


@pytest.mark.parametrize('args, message', [
    (['--config=configs/no_such_file.py'],
     "cannot load the config file of --config=configs/no_such_file.py ([Errno 2] No such file "
     "or directory: 'configs/no_such_file.py'); pass an existing file, e.g. "
     "--config=configs/shared_base.py:tiny"),
    (['--config=configs/shared_base.py:tiny', '--config.model.vocab_sise=100'],
     'unknown config key config.model.vocab_sise (in --config.model.vocab_sise=100); did you '
     'mean config.model.vocab_size?'),
    (['--config=configs/shared_base.py:tiny', '--config.model.vocab_size=0'],
     'model.vocab_size must be an integer >= 6 (the 5 special tokens and at least one piece), '
     'got 0'),
])
def test_command_config_mistakes_are_one_line(args, message):
  result = run_command(*args)
  assert result.returncode == 2, result.stderr[-2000:]
  assert result.stderr.strip().splitlines() == [f'sharedbert params: error: {message}']
