"""From standard to shared / kv_shared / masa: fits, exact where exact is possible."""

import copy
import json

import flax.linen as nn
import jax
import numpy as np
import pytest

from sharedbert import config as sb_config
from sharedbert.convert import hf as convert_hf
from sharedbert.convert import shared as convert_shared
from sharedbert.errors import UserError
from sharedbert.models import fit
from sharedbert.models.bert import BertForPretraining, ModelConfig

TINY = dict(vocab_size=97, hidden_size=32, num_layers=3, num_heads=4, mlp_dim=64,
            max_position_embeddings=16, dropout_rate=0.0, attention_dropout_rate=0.0)
ROLES = ('query', 'key', 'value')


def config(attention, **kw):
  return ModelConfig(attention=attention, **{**TINY, **kw})


def inputs():
  rng = np.random.default_rng(0)
  ids = rng.integers(5, 97, (2, 9)).astype(np.int32)
  mask = np.ones((2, 9), np.int32)
  mask[1, 6:] = 0
  return ids, np.zeros_like(ids), mask, rng.integers(0, 9, (2, 3)).astype(np.int32)


def init(cfg, seed=0):
  params = BertForPretraining(cfg).init(jax.random.key(seed), *inputs())['params']
  rng = np.random.default_rng(seed + 1)
  # Perturbed: non-zero biases, so that the affine fit is exercised.
  return jax.tree.map(lambda x: np.asarray(x) + 0.05 * rng.standard_normal(x.shape).astype(
      np.float32), nn.unbox(params))


def outputs(cfg, params):
  out = BertForPretraining(cfg).apply({'params': params}, *inputs())
  return np.asarray(out['sequence_output']), np.asarray(out['mlm_logits'])


def in_shared_form(params, cfg, seed=0):
  """Standard params whose W_r, b_r are W_s diag(d_r), b_s * d_r: shared can hold them."""
  rng = np.random.default_rng(seed)
  params = copy.deepcopy(params)
  for i in range(cfg.num_layers):
    a = params['bert'][f'layer_{i}']['attention']
    w_s, b_s = a['query']['kernel'], a['query']['bias']
    for role in ROLES:
      d = rng.uniform(0.5, 1.5, b_s.shape) * rng.choice([-1, 1], b_s.shape)
      a[role] = {'kernel': (w_s * d).astype(np.float32), 'bias': (b_s * d).astype(np.float32)}
  return params


def layer_attention(params, i):
  return params['bert'][f'layer_{i}']['attention']


# ---------------------------------------------------------------------------------------
# shared.

def test_shared_fit_is_exact_where_it_can_be():
  cfg = config('standard')
  params = in_shared_form(init(cfg), cfg)
  fitted, errors = fit.fit_shared(layer_attention(params, 0))
  assert max(errors.values()) < 1e-6
  for c, role in enumerate(ROLES):
    np.testing.assert_allclose(fitted['shared']['kernel'] * fitted['diag'][c],
                               layer_attention(params, 0)[role]['kernel'], atol=1e-6)
  # The whole converted model computes what the standard one does.
  shared_cfg = config('shared')
  converted, rows, _ = convert_shared.convert_params(params, cfg, shared_cfg)
  assert len(rows) == cfg.num_layers
  for a, b in zip(outputs(cfg, params), outputs(shared_cfg, converted)):
    np.testing.assert_allclose(a, b, atol=2e-5, rtol=0)


def test_shared_fit_is_the_least_squares_optimum():
  cfg = config('standard')
  attention = layer_attention(init(cfg, seed=3), 1)
  fitted, errors = fit.fit_shared(attention)

  # Independently: per output unit, the best rank-one fit of the (D+1) x 3 matrix leaves the
  # two smaller eigenvalues of its 3 x 3 Gram matrix.
  m = np.stack([np.concatenate([attention[r]['kernel'].reshape(32, -1),
                                attention[r]['bias'].reshape(1, -1)]) for r in ROLES], -1)
  m = m.astype(np.float64).transpose(1, 0, 2)  # [N*H, D+1, 3]
  eig = np.linalg.eigvalsh(np.einsum('jdr,jds->jrs', m, m))  # ascending
  best = np.sqrt(eig[:, :2].sum() / eig.sum())
  assert errors['qkv'] == pytest.approx(best, rel=1e-4)
  assert 0.1 < errors['qkv'] < 1.0  # Random independent roles are far from shared form.

  # And no nearby point does better.
  def error_of(kernel, bias, diag):
    total, norm = 0.0, 0.0
    for c, role in enumerate(ROLES):
      total += np.sum((attention[role]['kernel'] - kernel * diag[c]) ** 2)
      total += np.sum((attention[role]['bias'] - bias * diag[c]) ** 2)
      norm += np.sum(attention[role]['kernel'] ** 2) + np.sum(attention[role]['bias'] ** 2)
    return np.sqrt(total / norm)
  kernel, bias, diag = (fitted['shared']['kernel'], fitted['shared']['bias'], fitted['diag'])
  assert error_of(kernel, bias, diag) == pytest.approx(errors['qkv'], rel=1e-4)
  rng = np.random.default_rng(0)
  for _ in range(5):
    assert error_of(kernel + 1e-3 * rng.standard_normal(kernel.shape), bias,
                    diag + 1e-2 * rng.standard_normal(diag.shape)) > errors['qkv']


# ---------------------------------------------------------------------------------------
# kv_shared: fitted to the score form and the value path.

def in_kv_shared_form(params, cfg):
  """Standard params with W_k = W_v (the biases stay different: the key bias does not
  change attention, and the value bias moves into the output bias)."""
  params = copy.deepcopy(params)
  for i in range(cfg.num_layers):
    a = params['bert'][f'layer_{i}']['attention']
    a['key']['kernel'] = a['value']['kernel'].copy()
  return params


def test_kv_shared_fit_is_exact_where_it_can_be():
  cfg, kv_cfg = config('standard'), config('kv_shared')
  params = in_kv_shared_form(init(cfg), cfg)
  _, errors = fit.fit_kv_shared(layer_attention(params, 0))
  assert max(errors.values()) < 1e-6, errors
  converted, rows, header = convert_shared.convert_params(params, cfg, kv_cfg)
  assert len(rows) == cfg.num_layers and header[0] == 'layer'
  assert jax.tree.structure(converted) == jax.tree.structure(init(kv_cfg))
  for a, b in zip(outputs(cfg, params), outputs(kv_cfg, converted)):
    np.testing.assert_allclose(a, b, atol=2e-5, rtol=0)


def _kv_errors(attention, u_of_head):
  """fit_kv_shared's two errors for a given orthonormal W_kv basis per head (the best
  W_q and W_o for it), computed here independently."""
  wq, bq = attention['query']['kernel'], attention['query']['bias']
  wk, wv, wo = attention['key']['kernel'], attention['value']['kernel'], attention['out']['kernel']
  sums = np.zeros((2, 2))
  for h in range(wq.shape[1]):
    m1 = np.concatenate([wq[:, h], bq[None, h]]).astype(np.float64) @ wk[:, h].T
    m2 = wv[:, h].astype(np.float64) @ wo[h]
    p = u_of_head(h) @ u_of_head(h).T
    sums[0] += np.sum((m1 - m1 @ p) ** 2), np.sum(m1 ** 2)
    sums[1] += np.sum((m2 - p @ m2) ** 2), np.sum(m2 ** 2)
  return np.sqrt(sums[:, 0] / sums[:, 1])


def test_kv_shared_fit_beats_the_obvious_choices_on_random_weights():
  """On a standard layer with unrelated W_k and W_v the fit is not exact, and its total
  error (the quantity it minimises) is below that of W_kv = W_k, of W_kv = W_v, and of
  random bases."""
  cfg = config('standard')
  attention = layer_attention(init(cfg), 1)
  _, errors = fit.fit_kv_shared(attention)
  total = errors['scores'] ** 2 + errors['values'] ** 2
  assert 0.01 < total
  basis = lambda w: lambda h: np.linalg.qr(w[:, h].astype(np.float64))[0]
  rng = np.random.default_rng(0)
  choices = {'W_k': basis(attention['key']['kernel']), 'W_v': basis(attention['value']['kernel']),
             'random': basis(rng.standard_normal(attention['key']['kernel'].shape))}
  for name, u in choices.items():
    other = _kv_errors(attention, u)
    assert total < np.sum(other ** 2), (name, errors, other)
  # The errors it reports are those of its own basis, computed independently.
  fitted, _ = fit.fit_kv_shared(attention)
  own = basis(fitted['key_value']['kernel'])
  np.testing.assert_allclose(_kv_errors(attention, own), [errors['scores'], errors['values']],
                             rtol=1e-4)


# ---------------------------------------------------------------------------------------
# masa.

def test_matrix_pca_is_exact_with_one_atom_per_layer_and_optimal_with_fewer():
  rng = np.random.default_rng(0)
  stack = rng.standard_normal((4, 6, 2, 3)).astype(np.float32)
  atoms, coefficients, errors = fit.fit_atoms(stack, 4)
  assert atoms.shape == (4, 6, 2, 3) and coefficients.shape == (4, 4)
  assert max(errors) < 1e-6
  np.testing.assert_allclose(np.einsum('ls,s...->l...', coefficients, atoms), stack, atol=1e-5)

  # Two atoms: the residual energy is the two smallest eigenvalues of the layers' Gram matrix
  # (Eckart-Young), and the coefficients are the projections onto the atoms.
  atoms, coefficients, errors = fit.fit_atoms(stack, 2)
  x = stack.reshape(4, -1).astype(np.float64)
  residual = x - coefficients.astype(np.float64) @ atoms.reshape(2, -1)
  eig = np.linalg.eigvalsh(x @ x.T)
  assert np.sum(residual ** 2) == pytest.approx(eig[:2].sum(), rel=1e-4)
  for l in range(4):
    assert errors[l] == pytest.approx(np.linalg.norm(residual[l]) / np.linalg.norm(x[l]), rel=1e-4)
  np.testing.assert_allclose(residual @ atoms.reshape(2, -1).T.astype(np.float64), 0, atol=1e-3)
  # Coefficients of order one (atoms at the layers' scale).
  assert 0.2 < np.sqrt(np.mean(np.sum(coefficients ** 2, axis=1))) <= 1.0 + 1e-6

  with pytest.raises(UserError, match='between 1 and the number of layers'):
    fit.fit_atoms(stack, 5)


@pytest.mark.parametrize('projections', ['qkvo', 'qv'])
def test_masa_conversion_with_s_equal_l_reproduces_the_model(projections):
  cfg = config('standard')
  params = init(cfg)
  masa_cfg = config('masa', masa_atoms=3, masa_projections=projections)
  converted, rows, header = convert_shared.convert_params(params, cfg, masa_cfg)
  assert header == ['layer'] + [{'q': 'query', 'k': 'key', 'v': 'value', 'o': 'out'}[t]
                                for t in projections]
  assert all(float(e) < 1e-6 for row in rows for e in row[1:])
  for a, b in zip(outputs(cfg, params), outputs(masa_cfg, converted)):
    np.testing.assert_allclose(a, b, atol=2e-5, rtol=0)


def test_masa_conversion_with_fewer_atoms_reports_its_error():
  cfg = config('standard')
  converted, rows, _ = convert_shared.convert_params(
      init(cfg), cfg, config('masa', masa_atoms=1, masa_projections='qkvo'))
  assert all(0.05 < float(e) < 1.0 for row in rows for e in row[1:])
  assert converted['bert']['shared_attention']['q']['atoms'].shape == (1, 32, 4, 8)


# ---------------------------------------------------------------------------------------
# Workdir to workdir.

@pytest.fixture(scope='module')
def standard_workdir(tmp_path_factory):
  """A standard checkpoint in shared form (so that both conversions can be exact)."""
  workdir = tmp_path_factory.mktemp('standard')
  recipe = sb_config.pretrain_config('standard', 'tiny')
  recipe.model.update({k: v for k, v in TINY.items()})
  cfg = ModelConfig.from_config(recipe.model)
  params = in_shared_form(init(cfg), cfg)
  convert_hf.write_checkpoint(str(workdir), recipe, params, source='test')
  (workdir / 'vocab.model').write_bytes(b'not a real vocabulary')
  return workdir, cfg, params


@pytest.mark.parametrize('attention,kw', [('shared', {}), ('masa', dict(masa_atoms=3)),
                                         ('kv_shared', {})])
def test_convert_workdir(standard_workdir, tmp_path, attention, kw):
  source, cfg, params = standard_workdir
  target = tmp_path / attention
  report = convert_shared.convert_workdir(str(source), str(target), attention, **kw)
  lines = report.splitlines()
  assert 'Relative reconstruction error' in lines[1]
  assert [line.split()[0] for line in lines[-3:]] == ['0', '1', '2']
  # The library prints what it did, not the lab's findings about it (docs/uptrain_cpu).
  assert 'STS-B' not in report and not any(l.startswith('Note:') for l in lines)
  new_cfg, new_params, meta, step = convert_hf.read_params(str(target))
  assert new_cfg.attention == attention and step == 0 and meta['data_position'] == 0
  assert json.loads((target / 'config.json').read_text())['model']['attention'] == attention
  assert (target / 'vocab.model').read_bytes() == b'not a real vocabulary'
  for a, b in zip(outputs(cfg, params), outputs(new_cfg, new_params)):
    np.testing.assert_allclose(a, b, atol=2e-5, rtol=0)


def test_convert_refuses_a_non_standard_source(tmp_path):
  cfg = config('symmetric')
  with pytest.raises(UserError, match='starts from a standard'):
    convert_shared.convert_params(init(cfg), cfg, config('shared'))


# ---------------------------------------------------------------------------------------
# shared and symmetric, fitted to what attention computes (--fit=function, the default).

def in_symmetric_form(params, cfg):
  """Standard params with W_k = W_q and b_k = b_q: symmetric can hold them."""
  params = copy.deepcopy(params)
  for i in range(cfg.num_layers):
    a = params['bert'][f'layer_{i}']['attention']
    a['key'] = copy.deepcopy(a['query'])
  return params


@pytest.mark.parametrize('seed', [0, 1])
def test_function_fits_recover_models_already_of_their_form(seed):
  cfg = config('standard')
  for attention, form, fit_fn in (('shared', in_shared_form, fit.fit_shared_function),
                                  ('symmetric', in_symmetric_form, fit.fit_symmetric_function)):
    params = form(init(cfg, seed=seed), cfg) if attention == 'symmetric' else form(
        init(cfg, seed=seed), cfg, seed=seed)
    _, errors = fit_fn(layer_attention(params, 0))
    assert max(errors.values()) < 1e-6, (attention, errors)
    target = config(attention)
    converted, rows, header = convert_shared.convert_params(params, cfg, target)
    assert header[1].startswith('scores') and len(rows) == cfg.num_layers
    for a, b in zip(outputs(cfg, params), outputs(target, converted)):
      np.testing.assert_allclose(a, b, atol=3e-5, rtol=0)


@pytest.mark.parametrize('seed', [0, 1, 2, 3])
def test_function_fit_never_worse_than_rank_one_in_what_it_optimises(seed):
  """On random standard weights: the score form and value path errors of the new fit
  against those of the weight-space (rank one) fit, scored the same way."""
  cfg = config('standard')
  params = init(cfg, seed=seed)
  for i in range(cfg.num_layers):
    a = layer_attention(params, i)
    new, new_errors = fit.fit_shared_function(a)
    old = fit.fit_shared(a)[0]
    old_errors = fit.shared_function_errors(a, old)
    assert new_errors == pytest.approx(fit.shared_function_errors(a, new))
    assert new_errors['scores'] <= old_errors['scores']
    assert new_errors['values'] <= old_errors['values']
  # And the converted model's outputs are closer to the original's.
  def distance(fit_name):
    converted, _, _ = convert_shared.convert_params(params, cfg, config('shared'), fit_name)
    a, b = outputs(cfg, params)[0], outputs(config('shared'), converted)[0]
    return np.linalg.norm(a - b)
  assert distance('function') < distance('rank1')


def test_symmetric_fit_is_the_best_positive_semi_definite_score_form():
  cfg = config('standard')
  a = layer_attention(init(cfg, seed=5), 0)
  new, errors = fit.fit_symmetric_function(a)
  mean, _ = fit.fit_symmetric_mean(a)
  def score_error(qk):
    total, norm = 0.0, 0.0
    for head in range(cfg.num_heads):
      _, target = fit.score_target(a['query']['kernel'], a['query']['bias'],
                                   a['key']['kernel'], a['key']['bias'], head)
      w = np.concatenate([qk['kernel'][:, head], qk['bias'][None, head]]).astype(np.float64)
      total += np.sum((target[:, :32] - w @ w[:32].T) ** 2)
      norm += np.sum(target[:, :32] ** 2)
    return np.sqrt(total / norm)
  assert score_error(new['query']) == pytest.approx(errors['scores'], rel=1e-4)
  assert errors['scores'] < score_error(mean['query'])
  np.testing.assert_array_equal(new['value']['kernel'], a['value']['kernel'])


def test_an_unknown_fit_is_refused():
  cfg = config('standard')
  with pytest.raises(UserError, match=r"--fit='pca': the SharedAttention conversion offers "
                                      r"function, rank1"):
    convert_shared.convert_params(init(cfg), cfg, config('shared'), 'pca')


def test_function_fits_weighted_by_inputs_stay_exact_on_models_of_their_form():
  """--fit_text: the fits weighted by the inputs' second moment (here of random, anisotropic
  inputs) recover a model already of the target's form, and the converted model computes
  the same outputs."""
  cfg = config('standard')
  rng = np.random.default_rng(0)
  x = rng.standard_normal((500, 32)) @ np.diag(np.linspace(0.1, 3, 32)) + 0.5
  moment = np.concatenate([x, np.ones((500, 1))], 1)
  moment = moment.T @ moment / 500
  for attention, params in (('shared', in_shared_form(init(cfg), cfg)),
                            ('symmetric', in_symmetric_form(init(cfg), cfg))):
    fit_fn = fit.fit_shared_function if attention == 'shared' else fit.fit_symmetric_function
    _, errors = fit_fn(layer_attention(params, 0), input_moment=moment)
    assert max(errors.values()) < 1e-5, (attention, errors)
    target = config(attention)
    converted, _ = convert_shared._convert(params, cfg, target, 'function',
                                           [moment] * cfg.num_layers)
    for a, b in zip(outputs(cfg, params), outputs(target, converted)):
      np.testing.assert_allclose(a, b, atol=5e-5, rtol=0)
  with pytest.raises(UserError, match='--fit_text weights only the fits shared --fit=function, '
                                      'symmetric --fit=function, not SharedAttention --fit=rank1'):
    convert_shared._convert(init(cfg), cfg, config('shared'), 'rank1', [moment] * 3)
  with pytest.raises(UserError, match='not KVSharedAttention --fit=function'):
    convert_shared._convert(init(cfg), cfg, config('kv_shared'), 'function', [moment] * 3)


def test_input_moments_are_second_moments_of_the_real_tokens():
  h = [np.arange(2 * 3 * 2, dtype=np.float64).reshape(2, 3, 2)] * 2
  lengths = np.array([3, 1])
  m = fit.input_moments(h, lengths)
  assert len(m) == 1
  rows = np.array([[0, 1, 1], [2, 3, 1], [4, 5, 1], [6, 7, 1]], np.float64)
  np.testing.assert_allclose(m[0], rows.T @ rows / 4)
