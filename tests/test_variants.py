"""The attention variants: the identities of DESIGN.md, NumPy references, gradients, training.

Each variant reduces to another at special parameter values (shared with d=1 and one W is
standard; partial_qk at rho=0 / rho=1 is standard / symmetric; pairwise with P=I is
symmetric; masa with S=L and one-hot coefficients is standard; shared with d=1 is single;
kv_shared is standard with W_k = W_v; q_identity is standard with W_q = I); the tests build
the one model's parameters from the other's and compare whole-model outputs.
"""

import copy
import dataclasses
import json
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sharedbert.errors import UserError
from sharedbert.models import attention as attention_lib
from sharedbert.models import masa as masa_lib
from sharedbert.lab import attention_stats
from sharedbert.models.bert import BertForPretraining, ModelConfig
from test_model import make_inputs

VARIANTS = ('standard', 'shared', 'shared_qk', 'symmetric', 'pairwise', 'partial_qk', 'masa',
            'kv_shared', 'single', 'q_identity')
TINY = dict(vocab_size=97, hidden_size=32, num_layers=3, num_heads=4, mlp_dim=64,
            max_position_embeddings=16, dropout_rate=0.0, attention_dropout_rate=0.0)
ATOL = 2e-5


def config(attention, **kw):
  """TINY as `attention`; of the variant settings in `kw`, those the variant declares (so
  one call can serve several variants, as one config file's model section does)."""
  return ModelConfig.from_config({**TINY, **kw, 'attention': attention})


INPUTS = make_inputs()


def init(cfg, seed=0):
  params = BertForPretraining(cfg).init(jax.random.key(seed), *INPUTS)['params']
  return jax.tree.map(np.asarray, nn.unbox(params))


def perturb(params, seed=1, scale=0.1):
  """Non-zero biases and non-unit LayerNorms, so that a misplaced tensor shows."""
  rng = np.random.default_rng(seed)
  return jax.tree.map(lambda x: (x + scale * rng.standard_normal(x.shape)).astype(x.dtype),
                      params)


def run(cfg, params):
  out = BertForPretraining(cfg).apply({'params': params}, *INPUTS, return_hidden_states=True)
  return np.asarray(out['sequence_output']), np.asarray(out['mlm_logits'])


def assert_same_outputs(cfg_a, params_a, cfg_b, params_b):
  seq_a, logits_a = run(cfg_a, params_a)
  seq_b, logits_b = run(cfg_b, params_b)
  np.testing.assert_allclose(seq_a, seq_b, atol=ATOL, rtol=0)
  np.testing.assert_allclose(logits_a, logits_b, atol=ATOL, rtol=0)


def layers(params, cfg):
  return [params['bert'][f'layer_{i}']['attention'] for i in range(cfg.num_layers)]


# ---------------------------------------------------------------------------------------
# Identities.

def test_shared_with_unit_diagonals_is_standard_with_one_matrix():
  shared_cfg, standard_cfg = config('shared'), config('standard')
  shared = perturb(init(shared_cfg))
  for a in layers(shared, shared_cfg):
    a['diag'] = np.ones_like(a['diag'])
  standard = copy.deepcopy(shared)
  for a in layers(standard, standard_cfg):
    s = a.pop('shared')
    del a['diag']
    for role in ('query', 'key', 'value'):
      a[role] = copy.deepcopy(s)
  assert_same_outputs(shared_cfg, shared, standard_cfg, standard)


def test_partial_qk_at_zero_is_standard():
  cfg = config('partial_qk', qk_shared_fraction=0.0)
  standard_cfg = config('standard')
  params = perturb(init(standard_cfg))
  # The same tree: at rho=0 no column is shared.
  assert jax.tree.structure(init(cfg)) == jax.tree.structure(params)
  assert_same_outputs(cfg, params, standard_cfg, params)


def test_partial_qk_at_one_is_symmetric():
  cfg = config('partial_qk', qk_shared_fraction=1.0)
  symmetric_cfg = config('symmetric')
  params = perturb(init(cfg))
  symmetric = copy.deepcopy(params)
  for a in layers(symmetric, symmetric_cfg):
    a['query'] = a.pop('query_key')
  assert jax.tree.structure(symmetric) == jax.tree.structure(init(symmetric_cfg))
  assert_same_outputs(cfg, params, symmetric_cfg, symmetric)


def test_pairwise_with_identity_is_symmetric():
  cfg, symmetric_cfg = config('pairwise'), config('symmetric')
  params = perturb(init(cfg))
  eye = np.broadcast_to(np.eye(8, dtype=np.float32), (4, 8, 8)).copy()
  for a in layers(params, cfg):
    a['pairwise'] = eye
  symmetric = copy.deepcopy(params)
  for a in layers(symmetric, symmetric_cfg):
    del a['pairwise']
  assert_same_outputs(cfg, params, symmetric_cfg, symmetric)


def test_pairwise_is_standard_with_queries_through_its_matrix():
  """Scores (x W P)(x W)^T: standard attention with W_q = W P, b_q = b P and W_k = W,
  b_k = b. P is a different random matrix per head, so a transposed P, or one applied to
  the keys or to another head, fails (an identity P could not tell)."""
  cfg, standard_cfg = config('pairwise'), config('standard')
  params = perturb(init(cfg))
  rng = np.random.default_rng(7)
  p = (np.eye(8) + 0.5 * rng.standard_normal((4, 8, 8))).astype(np.float32)
  for a in layers(params, cfg):
    a['pairwise'] = p

  def as_standard(matrix):
    standard = copy.deepcopy(params)
    for a in layers(standard, standard_cfg):
      del a['pairwise']
      q = a['query']
      a['key'] = copy.deepcopy(q)
      a['query'] = {'kernel': np.einsum('dnh,nhg->dng', q['kernel'], matrix),
                    'bias': np.einsum('nh,nhg->ng', q['bias'], matrix)}
    return standard
  standard = as_standard(p)
  assert jax.tree.structure(standard) == jax.tree.structure(init(standard_cfg))
  assert_same_outputs(cfg, params, standard_cfg, standard)
  # The comparison can fail: P transposed gives other outputs.
  with pytest.raises(AssertionError):
    assert_same_outputs(cfg, params, standard_cfg, as_standard(np.swapaxes(p, 1, 2)))


def test_shared_with_unit_value_diagonal_is_shared_qk_with_w_v_equal_to_w_s():
  """shared_qk is shared with V untied: with W_v = W_s, b_v = b_s and d_v = 1 the two
  compute the same."""
  shared_cfg, cell_cfg = config('shared'), config('shared_qk')
  shared = perturb(init(shared_cfg))
  cell = copy.deepcopy(shared)
  for a, b in zip(layers(shared, shared_cfg), layers(cell, cell_cfg)):
    a['diag'][2] = 1.0
    b['diag'] = a['diag'][:2].copy()
    b['value'] = copy.deepcopy(a['shared'])
  assert_same_outputs(shared_cfg, shared, cell_cfg, cell)


def test_shared_with_unit_diagonals_is_single():
  shared_cfg, single_cfg = config('shared'), config('single')
  shared = perturb(init(shared_cfg))
  single = copy.deepcopy(shared)
  for a in layers(shared, shared_cfg):
    a['diag'] = np.ones_like(a['diag'])
  for a in layers(single, single_cfg):
    del a['diag']
  assert jax.tree.structure(single) == jax.tree.structure(init(single_cfg))
  assert_same_outputs(shared_cfg, shared, single_cfg, single)


def test_kv_shared_is_standard_with_tied_keys_and_values():
  cfg, standard_cfg = config('kv_shared'), config('standard')
  params = perturb(init(cfg))
  standard = copy.deepcopy(params)
  for a in layers(standard, standard_cfg):
    kv = a.pop('key_value')
    a['key'], a['value'] = copy.deepcopy(kv), copy.deepcopy(kv)
  assert jax.tree.structure(standard) == jax.tree.structure(init(standard_cfg))
  assert_same_outputs(cfg, params, standard_cfg, standard)
  # Not symmetric: tying the queries to the keys too changes the outputs.
  for a in layers(standard, standard_cfg):
    a['query'] = copy.deepcopy(a['key'])
  with pytest.raises(AssertionError):
    assert_same_outputs(cfg, params, standard_cfg, standard)


def test_q_identity_is_standard_with_the_identity_query():
  cfg, standard_cfg = config('q_identity'), config('standard')
  params = perturb(init(cfg))
  standard = copy.deepcopy(params)
  eye = np.eye(32, dtype=np.float32).reshape(32, 4, 8)  # Column j of head n is unit n*8+j.
  for a in layers(standard, standard_cfg):
    a['query'] = {'kernel': eye, 'bias': np.zeros((4, 8), np.float32)}
  assert jax.tree.structure(standard) == jax.tree.structure(init(standard_cfg))
  assert_same_outputs(cfg, params, standard_cfg, standard)


@pytest.mark.parametrize('projections', ['qkvo', 'kv'])
def test_masa_with_one_atom_per_layer_is_standard(projections):
  cfg = config('masa', masa_atoms=TINY['num_layers'], masa_projections=projections)
  standard_cfg = config('standard')
  standard = perturb(init(standard_cfg))
  masa = copy.deepcopy(standard)
  masa['bert']['shared_attention'] = {}
  for t in projections:
    name = masa_lib.MASA_TYPES[t]
    atoms = np.stack([a[name]['kernel'] for a in layers(standard, standard_cfg)])
    masa['bert']['shared_attention'][t] = {
        'atoms': atoms, 'coefficients': np.eye(cfg.num_layers, dtype=np.float32)}
    for a in layers(masa, cfg):
      del a[name]['kernel']
  assert jax.tree.structure(masa) == jax.tree.structure(init(cfg))
  assert_same_outputs(cfg, masa, standard_cfg, standard)


def _loss_grads(cfg, params):
  def loss(p):
    out = BertForPretraining(cfg).apply({'params': p}, *INPUTS)
    return jnp.mean(jnp.square(out['mlm_logits']))
  return jax.tree.map(np.asarray, jax.grad(loss)(params))


def test_masa_atom_gradients_mix_every_layers_gradient_by_the_coefficients():
  """Why masa fails the induction probe in every seed (docs/probe_cpu/RUN_NOTES.md): not a
  wrong forward or gradient, but its start. Atom s's gradient is sum_l c[l, s] dL/dW_l, so
  with one-hot coefficients (S = L) training starts exactly as standard's, and with the
  default N(0, 1/S) coefficients every atom's update mixes every layer's gradient."""
  cfg = config('masa', masa_atoms=TINY['num_layers'], masa_projections='qkvo')
  standard_cfg = config('standard')
  standard = perturb(init(standard_cfg))
  g_std = _loss_grads(standard_cfg, standard)
  for coefficients in (np.eye(cfg.num_layers, dtype=np.float32),
                       np.random.default_rng(3).normal(
                           0, 1 / np.sqrt(cfg.num_layers),
                           (cfg.num_layers, cfg.num_layers)).astype(np.float32)):
    masa = copy.deepcopy(standard)
    masa['bert']['shared_attention'] = {}
    # Atoms chosen so that each layer's kernel equals standard's: A = C^-1 W.
    inverse = np.linalg.inv(coefficients)
    for t in 'qkvo':
      name = masa_lib.MASA_TYPES[t]
      kernels = np.stack([a[name]['kernel'] for a in layers(standard, standard_cfg)])
      masa['bert']['shared_attention'][t] = {
          'atoms': np.einsum('sl,l...->s...', inverse, kernels).astype(np.float32),
          'coefficients': coefficients}
      for a in layers(masa, cfg):
        del a[name]['kernel']
    assert_same_outputs(cfg, masa, standard_cfg, standard)
    g = _loss_grads(cfg, masa)
    for t in 'qkvo':
      name = masa_lib.MASA_TYPES[t]
      per_layer = np.stack([a[name]['kernel'] for a in layers(g_std, standard_cfg)])
      np.testing.assert_allclose(g['bert']['shared_attention'][t]['atoms'],
                                 np.einsum('ls,l...->s...', coefficients, per_layer),
                                 atol=1e-5, rtol=1e-4)


# ---------------------------------------------------------------------------------------
# Each variant's attention layer against plain NumPy.

def numpy_attention(q, k, v, mask, out):
  """softmax(q k^T / sqrt(H)) v W_o + b_o over [B,T,N,H] inputs."""
  scores = np.einsum('btnh,bsnh->bnts', q, k) / np.sqrt(q.shape[-1])
  scores = np.where(mask[:, None, None, :] > 0, scores, -1e30)
  probs = np.exp(scores - scores.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  heads = np.einsum('bnts,bsnh->btnh', probs, v)
  return np.einsum('btnh,nhd->btd', heads, out['kernel']) + out['bias']


def project(x, p):
  return np.einsum('btd,dnh->btnh', x, p['kernel']) + p['bias']


def numpy_qkv(name, p, x, cfg, dictionary=None, layer=0):
  if name == 'standard':
    return project(x, p['query']), project(x, p['key']), project(x, p['value'])
  if name == 'shared':
    s = project(x, p['shared'])
    return s * p['diag'][0], s * p['diag'][1], s * p['diag'][2]
  if name == 'shared_qk':
    s = project(x, p['shared'])
    return s * p['diag'][0], s * p['diag'][1], project(x, p['value'])
  if name == 'kv_shared':
    kv = project(x, p['key_value'])
    return project(x, p['query']), kv, kv
  if name == 'single':
    s = project(x, p['shared'])
    return s, s, s
  if name == 'q_identity':
    b, t, d = x.shape
    return x.reshape(b, t, cfg.num_heads, d // cfg.num_heads), project(x, p['key']), \
        project(x, p['value'])
  if name == 'symmetric':
    q = project(x, p['query'])
    return q, q, project(x, p['value'])
  if name == 'pairwise':
    q = project(x, p['query'])
    return np.einsum('btnh,nhg->btng', q, p['pairwise']), q, project(x, p['value'])
  if name == 'partial_qk':
    both = project(x, p['query_key'])
    q = np.concatenate([both, project(x, p['query'])], -1)
    k = np.concatenate([both, project(x, p['key'])], -1)
    return q, k, project(x, p['value'])
  if name == 'masa':
    def kernel(t):
      d = dictionary[t]
      return np.einsum('a,a...->...', d['coefficients'][layer], d['atoms'])
    return tuple(project(x, {'kernel': kernel(t), 'bias': p[n]['bias']})
                 for t, n in (('q', 'query'), ('k', 'key'), ('v', 'value')))
  raise ValueError(name)


@pytest.mark.parametrize('name', ['symmetric', 'pairwise', 'partial_qk', 'masa', 'kv_shared',
                                  'single', 'q_identity', 'shared_qk'])
def test_attention_layer_against_numpy(name):
  cfg = config(name, qk_shared_fraction=0.25, masa_atoms=2, masa_projections='qkvo')
  rng = np.random.default_rng(0)
  x = rng.standard_normal((2, 6, 32)).astype(np.float32)
  mask = np.ones((2, 6), np.int32)
  mask[0, 4:] = 0
  layer = 2
  module = attention_lib.VARIANTS[name](cfg, layer)
  kwargs, dictionary = {}, None
  if name == 'masa':
    dict_module = masa_lib.MasaDictionary(cfg)
    dictionary = perturb(jax.tree.map(np.asarray, nn.unbox(
        dict_module.init(jax.random.key(1))['params'])))
    kwargs['shared'] = dict_module.apply({'params': dictionary})
  boxed_mask = mask.astype(bool)[:, None, None, :]
  params = perturb(jax.tree.map(np.asarray, nn.unbox(module.init(
      jax.random.key(0), x, boxed_mask, deterministic=True, **kwargs)['params'])))
  got = module.apply({'params': params}, x, boxed_mask, deterministic=True, **kwargs)
  q, k, v = numpy_qkv(name, params, x, cfg, dictionary, layer)
  out = dict(params['out'])
  if name == 'masa':
    d = dictionary['o']
    out['kernel'] = np.einsum('a,a...->...', d['coefficients'][layer], d['atoms'])
  np.testing.assert_allclose(got, numpy_attention(q, k, v, mask, out), atol=1e-5, rtol=1e-5)
  if name == 'partial_qk':  # floor(0.25 * 8) = 2 shared columns per head.
    assert params['query_key']['kernel'].shape == (32, 4, 2)
    assert params['query']['kernel'].shape == (32, 4, 6)


@pytest.mark.parametrize('name', ['standard', 'shared', 'kv_shared', 'single', 'q_identity'])
def test_attention_loss_and_gradients_against_numpy(name):
  """A scalar loss of one attention layer, sum(out * w), and its gradient with respect to
  every parameter, against the literal formula in NumPy (float64), its gradient by central
  differences. The model runs in float64 too (its scores stay float32)."""
  with jax.enable_x64(True):
    cfg = config(name, dtype=jnp.float64, param_dtype=jnp.float64)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 32))
    mask = np.ones((2, 5), np.int32)
    mask[1, 3:] = 0
    weights = rng.standard_normal((2, 5, 32))
    module = attention_lib.VARIANTS[name](cfg, 0)
    boxed_mask = mask.astype(bool)[:, None, None, :]
    params = jax.tree.map(lambda a: np.asarray(a, np.float64), perturb(nn.unbox(
        module.init(jax.random.key(0), x, boxed_mask, deterministic=True)['params'])))

    def numpy_loss(p):
      q, k, v = numpy_qkv(name, p, x, cfg)
      return float(np.sum(numpy_attention(q, k, v, mask, p['out']) * weights))

    loss = jax.jit(lambda p: jnp.sum(module.apply({'params': p}, x, boxed_mask,
                                                  deterministic=True) * weights))
    np.testing.assert_allclose(float(loss(params)), numpy_loss(params), rtol=1e-6)
    grads = jax.grad(loss)(params)
    flat, tree = jax.tree_util.tree_flatten(params)
    h = 1e-5
    for i, (path, g) in enumerate(jax.tree_util.tree_leaves_with_path(grads)):
      numeric = np.zeros(flat[i].size)
      for j in range(flat[i].size):
        def moved(sign):
          leaves = [a.copy() for a in flat]
          leaves[i].reshape(-1)[j] += sign * h
          return numpy_loss(jax.tree_util.tree_unflatten(tree, leaves))
        numeric[j] = (moved(1) - moved(-1)) / (2 * h)
      np.testing.assert_allclose(np.asarray(g).reshape(-1), numeric, rtol=1e-5, atol=1e-6,
                                 err_msg=jax.tree_util.keystr(path))


# ---------------------------------------------------------------------------------------
# Structure, gradients, configuration.

@pytest.mark.parametrize('name', VARIANTS)
def test_every_parameter_has_logical_axes(name):
  model = BertForPretraining(config(name))
  boxed = jax.eval_shape(lambda: model.init(jax.random.key(0), *INPUTS))['params']
  leaves = jax.tree.leaves(boxed, is_leaf=lambda x: isinstance(x, nn.Partitioned))
  assert leaves and all(isinstance(x, nn.Partitioned) for x in leaves)
  for x in leaves:
    assert len(x.names) == len(x.value.shape)


def test_masa_dictionary_belongs_to_the_encoder():
  params = init(config('masa', masa_atoms=2, masa_projections='qkvo'))
  assert set(params['bert']['shared_attention']) == set('qkvo')
  assert params['bert']['shared_attention']['q']['atoms'].shape == (2, 32, 4, 8)
  assert params['bert']['shared_attention']['o']['atoms'].shape == (2, 4, 8, 32)
  assert params['bert']['shared_attention']['q']['coefficients'].shape == (3, 2)
  for i in range(3):  # Each layer keeps only its biases.
    a = params['bert'][f'layer_{i}']['attention']
    assert {n: set(a[n]) for n in a} == {n: {'bias'} for n in ('query', 'key', 'value', 'out')}


def test_masa_atoms_default_to_a_third_of_the_layers():
  cfg = config('masa', masa_atoms=0, num_layers=7)
  assert masa_lib.masa_num_atoms(cfg) == 3
  assert init(cfg)['bert']['shared_attention']['k']['coefficients'].shape == (7, 3)


def _loss_and_params(name):
  """A loss that reaches every parameter (MLM head and pooler), in float64 (the attention
  scores stay float32), and the perturbed parameters it is taken at."""
  cfg = config(name, masa_atoms=2, dtype=jnp.float64, param_dtype=jnp.float64)
  params = jax.tree.map(lambda x: x.astype(np.float64), perturb(init(config(name, masa_atoms=2))))
  ids, segments, mask, positions = INPUTS
  labels = np.random.default_rng(3).integers(0, 97, positions.shape)
  weights = np.random.default_rng(4).standard_normal((3, 32))

  @jax.jit
  def loss(p):
    out = BertForPretraining(cfg).apply({'params': p}, ids, segments, mask, positions)
    logp = jax.nn.log_softmax(out['mlm_logits'])
    ce = -jnp.take_along_axis(logp, labels[..., None], -1).mean()
    return ce + jnp.sum(out['pooled_output'] * weights)  # The pooler gets a gradient too.
  return loss, params


@pytest.mark.parametrize('name', VARIANTS)
def test_gradients_match_finite_differences(name):
  """Each parameter's gradient g, against (L(p + h g/|g|) - L(p - h g/|g|)) / 2h = |g|: a
  gradient of the wrong scale, or one missing a path (a stray stop_gradient), fails."""
  with jax.enable_x64(True):
    loss, params = _loss_and_params(name)
    grads = jax.grad(loss)(params)
    flat, tree = jax.tree_util.tree_flatten(params)
    checked = 0
    for i, (path, g) in enumerate(jax.tree_util.tree_leaves_with_path(grads)):
      path, g = jax.tree_util.keystr(path), np.asarray(g)
      assert np.all(np.isfinite(g)), path
      norm = np.linalg.norm(g)
      # A key bias adds q.b_k to every score of a query's row, which softmax ignores: its
      # gradient is zero in exact arithmetic, for every variant that has one.
      if "['key']['bias']" in path:
        assert norm < 1e-6, path
        continue
      assert norm > 1e-7, path
      if norm < 1e-2:  # Too small to difference against the float32 attention scores.
        continue
      h = 1e-3

      def moved(sign):
        leaves = list(flat)
        leaves[i] = flat[i] + sign * h * g / norm
        return float(loss(jax.tree_util.tree_unflatten(tree, leaves)))
      slope = (moved(1) - moved(-1)) / (2 * h)
      np.testing.assert_allclose(slope, norm, rtol=5e-3, err_msg=path)
      checked += 1
    assert checked >= 0.8 * len(flat)  # Nearly every parameter was differenced.


@pytest.mark.parametrize('name', VARIANTS)
def test_padding_does_not_leak(name):
  cfg = config(name, masa_atoms=2)
  params = perturb(init(cfg))
  ids, seg, mask, pos = INPUTS
  a = BertForPretraining(cfg).apply({'params': params}, ids, seg, mask, pos)['sequence_output']
  ids2 = ids.copy()
  ids2[1, 6:] = 42
  b = BertForPretraining(cfg).apply({'params': params}, ids2, seg, mask, pos)['sequence_output']
  np.testing.assert_allclose(a[1, :6], b[1, :6], atol=1e-5)


def test_masa_under_remat_matches():
  cfg = config('masa', masa_atoms=2)
  params = perturb(init(cfg))
  assert_same_outputs(cfg, params, dataclasses.replace(cfg, remat='full'), params)


@pytest.mark.parametrize('kw,match', [
    (dict(attention='partial_qk', qk_shared_fraction=1.5), 'qk_shared_fraction'),
    (dict(attention='partial_qk', qk_shared_fraction=-0.1), 'qk_shared_fraction'),
    (dict(attention='masa', masa_projections='qkx'), 'masa_projections'),
    (dict(attention='masa', masa_projections='qq'), 'masa_projections'),
    (dict(attention='masa', masa_projections=''), 'masa_projections'),
    (dict(attention='masa', masa_atoms=-1), 'masa_atoms'),
])
def test_bad_variant_settings_are_user_errors(kw, match):
  with pytest.raises(UserError, match=match):
    ModelConfig.from_config({**TINY, **kw})


# ---------------------------------------------------------------------------------------
# Training: every variant's :tiny preset, made tinier, learns.

WORDS = ('the cat sat on a mat while seven dogs ran past the old red barn and a small bird '
         'sang of rain wind and snow in the north field').split()


def load_preset(name):
  from sharedbert.models import params as params_lib
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  return params_lib.load_config_file(os.path.join(root, 'configs', f'{name}_base.py'), 'tiny')


@pytest.fixture(scope='module')
def corpus(tmp_path_factory):
  rng = np.random.default_rng(0)
  docs = [' '.join(rng.choice(WORDS, size=rng.integers(20, 60))) + '.' for _ in range(150)]
  path = tmp_path_factory.mktemp('corpus') / 'corpus.txt'
  path.write_text('\n\n'.join(docs), encoding='utf-8')
  return str(path)


@pytest.mark.parametrize('name', VARIANTS)
def test_tiny_preset_trains(name, corpus, tmp_path):
  from sharedbert import train
  cfg = load_preset(name)
  assert cfg.model.attention == name
  if name == 'masa':
    assert masa_lib.masa_num_atoms(ModelConfig.from_config(cfg.model)) == 1
  # Tinier still; no dropout, whose random bits cost more to compile than the model.
  cfg.model.update(hidden_size=32, num_heads=2, mlp_dim=64, vocab_size=300,
                   max_position_embeddings=32, dropout_rate=0.0, attention_dropout_rate=0.0)
  cfg.data.update(corpus=corpus, seq_len=32, batch_size=8, max_predictions=5,
                  vocab_train_sentences=1000)
  cfg.optim.update(lr=3e-3, warmup_steps=2)
  cfg.update(total_steps=24, log_every_steps=4, eval_every_steps=24, eval_batches=1)
  cfg.ckpt.update(every_steps=24, async_save=False)
  last = train.train_and_evaluate(cfg, str(tmp_path))
  with open(tmp_path / 'metrics.jsonl') as f:
    rows = [json.loads(line) for line in f]
  losses = [r['loss'] for r in rows if 'loss' in r]
  assert len(losses) == 6 and all(np.isfinite(losses))
  # It starts from near-uniform predictions over the vocabulary the corpus fills...
  vocab = json.loads((tmp_path / 'config.json').read_text())['model']['vocab_size']
  assert abs(losses[0] - np.log(vocab)) < 1.0, losses
  # ...and learns: the training and the held-out loss fall, and no step was skipped. (The
  # held-out accuracy is not compared with the majority guess: one batch scores about 35
  # tokens, where a few tokens either way decide it.)
  assert losses[-1] < losses[0] - 0.5, losses
  [ev] = [r for r in rows if 'eval_loss' in r]
  assert ev['step'] == 24 and last['step'] == 24
  assert ev['eval_loss'] < losses[0] - 0.5, (ev, losses)
  assert 0 < ev['eval_majority_accuracy'] < 1 and 0 <= ev['eval_mlm_accuracy'] <= 1, ev
  assert last['skipped_total'] == 0


# ---------------------------------------------------------------------------------------
# shared's diagonals at initialisation, and the attention a token puts on itself.

def test_diag_init_schemes():
  shape = (3, 4, 8)
  for scheme in ('constant', 'signs', 'normal'):
    d = np.asarray(attention_lib.diag_initializer(scheme, 1.0)(jax.random.key(0), shape))
    assert d.shape == shape and np.all(d[2] == 1.0)  # d_v = 1 in every scheme.
  signs = np.asarray(attention_lib.diag_initializer('signs', 1.0)(jax.random.key(0), shape))
  assert set(np.unique(signs[:2])) == {-1.0, 1.0}
  assert np.any(signs[0] * signs[1] < 0)  # Some d_q * d_k negative: indefinite scores.
  assert np.all(np.asarray(attention_lib.diag_initializer('constant', 0.5)(
      jax.random.key(0), shape)) == 0.5)
  params = init(config('shared', diag_init_scheme='normal'))
  diag = params['bert']['layer_0']['attention']['diag']
  assert not np.allclose(diag[0], 1.0) and np.all(diag[2] == 1.0)
  with pytest.raises(UserError, match='diag_init_scheme'):
    ModelConfig.from_config({**TINY, 'attention': 'shared', 'diag_init_scheme': 'ones'})


@pytest.mark.parametrize('name', ['standard', 'shared'])
def test_self_attention_share_is_the_softmax_diagonal(name):
  """The sown diagnostic equals the mean diagonal of softmax(q k^T / sqrt(H)) over heads
  and real tokens, from the NumPy reference's q and k."""
  cfg = config(name)
  rng = np.random.default_rng(0)
  x = rng.standard_normal((2, 6, 32)).astype(np.float32)
  mask = np.ones((2, 6), np.int32)
  mask[0, 4:] = 0
  module = attention_lib.VARIANTS[name](cfg, 0)
  boxed_mask = mask.astype(bool)[:, None, None, :]
  params = perturb(jax.tree.map(np.asarray, nn.unbox(module.init(
      jax.random.key(0), x, boxed_mask, deterministic=True)['params'])))
  _, state = module.apply({'params': params}, x, boxed_mask, deterministic=True,
                          mutable=['intermediates'])
  got = float(state['intermediates']['self_attention_share'][0])
  q, k, _ = numpy_qkv(name, params, x, cfg)
  scores = np.einsum('btnh,bsnh->bnts', q, k) / np.sqrt(8)
  scores = np.where(mask[:, None, None, :] > 0, scores, -1e30)
  probs = np.exp(scores - scores.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  diag = np.einsum('bntt->bnt', probs).mean(axis=1)  # [B, T]
  want = float((diag * mask).sum() / mask.sum())
  np.testing.assert_allclose(got, want, rtol=1e-5)


def test_positive_semi_definite_start_attends_to_itself_more():
  """At initialisation, on the same tokens: `single` and `shared` with constant diagonals
  (scores S S^T) put more attention on the token itself than standard does, and shared
  with random-sign diagonals less than with constant ones."""
  ids, segments, mask, _ = INPUTS
  share = lambda cfg: np.mean(attention_stats.self_attention_shares(cfg, init(cfg), ids, segments,
                                                             mask))
  standard = share(config('standard'))
  constant = share(config('shared', diag_init_scheme='constant'))
  assert share(config('single')) > standard and constant > standard
  assert share(config('shared', diag_init_scheme='signs')) < constant
  assert 0 < standard < 1


@pytest.mark.parametrize('scan_layers', [False, True])
def test_attention_statistics_agree_with_the_sown_share_and_see_pairwise_scale(scan_layers):
  """Per layer: the self share equals the sown diagnostic's; Q = K schemes attend to
  themselves more than standard at init; pairwise with P_h ~ N(0, 1) starts with scores
  several times standard's (head size 8: about sqrt(8) = 2.8)."""
  ids, segments, mask, _ = INPUTS
  stats = {}
  for name, kw in (('standard', {}), ('symmetric', {}), ('pairwise', {'pairwise_init_std': 1.0}),
                   ('pairwise_scaled', {'pairwise_init_std': 1 / np.sqrt(8)})):
    # initializer_range 0.1: at BERT's 0.02 and D=32 every scheme's scores are near 0.
    cfg = config(name.split('_')[0], scan_layers=scan_layers, initializer_range=0.1, **kw)
    params = init(cfg)
    stats[name] = attention_stats.attention_statistics(cfg, params, ids, segments, mask)
    assert len(stats[name]) == cfg.num_layers
    np.testing.assert_allclose(
        [layer['self_share'] for layer in stats[name]],
        attention_stats.self_attention_shares(cfg, params, ids, segments, mask), rtol=1e-4)
  mean = lambda name, key: np.mean([layer[key] for layer in stats[name]])
  tokens = np.asarray(mask).sum(-1).max()
  assert 0.5 / tokens < mean('standard', 'self_share') < 2.0 / tokens  # About uniform.
  assert mean('symmetric', 'self_share') > 1.5 * mean('standard', 'self_share')
  assert mean('pairwise', 'logit_sd') > 2 * mean('standard', 'logit_sd')
  assert mean('pairwise', 'top_weight') > mean('standard', 'top_weight')
  assert mean('pairwise_scaled', 'logit_sd') < 1.5 * mean('standard', 'logit_sd')
  # A causal model's hidden keys are out of the spread, as they are out of the softmax.
  causal = config('standard', scan_layers=scan_layers, initializer_range=0.1, causal=True)
  spread = [layer['logit_sd'] for layer in
            attention_stats.attention_statistics(causal, init(causal), ids, segments, mask)]
  assert max(spread) < 3 * mean('standard', 'logit_sd')


def test_pairwise_init_std_sets_the_scale_of_the_initial_scores():
  """P_h ~ N(0, s^2): with s = 1/sqrt(H) the initial scores Q_h P_h Q_h^T are on the scale
  of standard's Q_h K_h^T; with Courtois et al.'s s = 1 about sqrt(H) = 4 times larger."""
  h = 16
  cfg = config('pairwise', hidden_size=64, num_heads=4)
  rng = np.random.default_rng(0)
  q = rng.standard_normal((4000, h))
  ratios = {}
  for std in (1.0, 1 / np.sqrt(h)):
    p = np.asarray(init(dataclasses.replace(cfg, pairwise_init_std=float(std)))
                   ['bert']['layer_0']['attention']['pairwise'])
    assert p.std() == pytest.approx(std, rel=0.1)
    paired = q @ p[0]
    ratios[std] = np.std(np.sum(paired * q[::-1], -1)) / np.std(np.sum(q * q[::-1], -1))
  assert ratios[1.0] == pytest.approx(np.sqrt(h), rel=0.15)
  assert ratios[1 / np.sqrt(h)] == pytest.approx(1.0, rel=0.15)


@pytest.mark.parametrize('scheme', ['normal', 'one_hot', 'orthogonal'])
def test_masa_coefficient_starts(scheme):
  """model.masa_coefficient_init, masa's own setting: one-hot puts layer l on atom l mod S,
  orthogonal is perfectly conditioned; every start gives rows of norm about 1."""

  for layers, atoms in ((2, 2), (6, 2), (2, 4)):
    c = np.asarray(masa_lib.coefficient_initializer(scheme, layers, atoms)(
        jax.random.key(0), (layers, atoms), jnp.float32))
    assert c.shape == (layers, atoms)
    if scheme == 'one_hot':
      np.testing.assert_array_equal(c, np.eye(atoms)[np.arange(layers) % atoms])
    if scheme == 'orthogonal':
      gram = c.T @ c if layers >= atoms else c @ c.T
      scale = layers / atoms if layers >= atoms else 1.0
      np.testing.assert_allclose(gram, scale * np.eye(min(layers, atoms)), atol=1e-5)
      np.testing.assert_allclose(np.mean(np.sum(c ** 2, axis=1)), 1.0, atol=1e-5)
  cfg = ModelConfig.from_config({'attention': 'masa', 'masa_coefficient_init': scheme})
  assert cfg.masa_coefficient_init == scheme


def test_masa_coefficient_init_is_masas_alone():
  with pytest.raises(UserError, match='masa_coefficient_init must be one of'):
    ModelConfig.from_config({'attention': 'masa', 'masa_coefficient_init': 'eye'})
  with pytest.raises(UserError, match='unknown model config keys'):
    ModelConfig.from_config({'attention': 'standard', 'masa_coefficient_init': 'one_hot'})
  assert ModelConfig(attention='masa').masa_coefficient_init == 'normal'  # Its default.


def test_each_variant_owns_its_settings_and_old_flat_configs_still_read():
  """A variant's settings are its class's (defaults, ranges): ModelConfig takes them by
  name for that variant only, a config file or checkpoint written when every model carried
  them all still reads, and equal models compare equal however they were spelled."""
  shared = ModelConfig(attention='shared', diag_init_scheme='normal')
  assert shared.diag_init_scheme == 'normal' and shared.diag_init == 1.0
  assert dict(shared.variant_settings) == {'diag_init': 1.0, 'diag_init_scheme': 'normal'}
  assert ModelConfig(attention='shared') == ModelConfig(attention='shared', diag_init=1.0)
  with pytest.raises(TypeError, match="masa_atoms is not a field, nor a setting of the "
                                      "'shared' attention variant"):
    ModelConfig(attention='shared', masa_atoms=2)
  with pytest.raises(AttributeError):
    ModelConfig(attention='standard').diag_init_scheme
  # An old flat model section: every variant's settings; each variant keeps its own.
  old = {**TINY, 'diag_init': 1.0, 'diag_init_scheme': 'constant', 'pairwise_init_std': 0.5,
         'qk_shared_fraction': 0.25, 'masa_atoms': 2, 'masa_projections': 'qk'}
  assert ModelConfig.from_config({**old, 'attention': 'standard'}).variant_settings == ()
  masa = ModelConfig.from_config({**old, 'attention': 'masa'})
  assert (masa.masa_atoms, masa.masa_projections, masa.masa_coefficient_init) == (2, 'qk',
                                                                                  'normal')
  assert ModelConfig.from_config({**old, 'attention': 'pairwise'}).pairwise_init_std == 0.5
  # replace: a new variant starts from its own defaults; a setting of another is refused.
  assert masa.replace(attention='shared').variant_settings == ModelConfig(
      attention='shared').variant_settings
  assert masa.replace(masa_atoms=3).masa_atoms == 3
  with pytest.raises(TypeError, match='diag_init'):
    masa.replace(diag_init=2.0)
  # Ranges come from the class.
  for bad, key in ((dict(attention='shared', diag_init_scheme='ones'), 'diag_init_scheme'),
                   (dict(attention='pairwise', pairwise_init_std=0.0), 'pairwise_init_std'),
                   (dict(attention='masa', masa_atoms=-1), 'masa_atoms')):
    with pytest.raises(UserError, match=f'model.{key} must be'):
      ModelConfig.from_config({**TINY, **bad})
  # Each config file carries its variant's settings, and no other's.
  from sharedbert.models.params import load_config_file
  from sharedbert.utils.paths import REPO_ROOT
  for variant in ('standard', 'shared', 'shared_qk', 'pairwise', 'partial_qk', 'masa'):
    model = load_config_file(os.path.join(REPO_ROOT, 'configs', f'{variant}_base.py'),
                             'tiny').model
    declared = set(attention_lib.VARIANTS[variant].settings)
    assert declared <= set(model) and not (attention_lib.setting_names() - declared) & set(model)
