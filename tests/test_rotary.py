"""Rotary positions (model.position_embeddings='rotary'): the identities of
sharedbert/models/rotary.py and docs/variants.md ("Positions"), each variant against a NumPy
reference, and the paths a model can take (scan, remat, fused attention, bfloat16, causal,
a mesh).

The references rotate with complex numbers (pair p of a vector as x_2p + i x_2p+1, turned by
multiplying with e^{i t w_p}), a second way to write the rotation than the module's.
"""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sharedbert.errors import UserError
from sharedbert.models import attention as attention_lib
from sharedbert.models import flops as flops_lib
from sharedbert.models import masa as masa_lib
from sharedbert.models import rotary
from sharedbert.models.bert import BertForPretraining, ModelConfig
from test_variants import VARIANTS, numpy_attention, numpy_qkv, perturb

TINY = dict(vocab_size=97, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
            max_position_embeddings=16, dropout_rate=0.0, attention_dropout_rate=0.0,
            masa_atoms=2, qk_shared_fraction=0.25, position_embeddings='rotary')


def config(attention, **kw):
  return ModelConfig.from_config({**TINY, **kw, 'attention': attention})


def numpy_rotate(x, theta, phase=0.0):
  """x [B,T,N,H] turned by (t + phase) * theta^(-2p/H), through complex numbers (float64)."""
  b, t, n, h = x.shape
  z = x[..., 0::2].astype(np.float64) + 1j * x[..., 1::2].astype(np.float64)
  w = theta ** (-np.arange(0, h, 2) / h)
  z = z * np.exp(1j * (np.arange(t) + phase)[None, :, None, None] * w)
  out = np.empty((b, t, n, h))
  out[..., 0::2], out[..., 1::2] = z.real, z.imag
  return out


def layer_and_params(name, cfg, x, mask, seed=0):
  """An attention layer, its perturbed params, and the kwargs its call needs (masa's
  dictionary), with the dictionary's params."""
  module = attention_lib.VARIANTS[name](cfg, 1)
  kwargs, dictionary = {}, None
  if name == 'masa':
    dict_module = masa_lib.MasaDictionary(cfg)
    dictionary = perturb(jax.tree.map(np.asarray, nn.unbox(
        dict_module.init(jax.random.key(seed + 1))['params'])))
    kwargs['shared'] = dict_module.apply({'params': dictionary})
  params = perturb(jax.tree.map(np.asarray, nn.unbox(module.init(
      jax.random.key(seed), x, mask, deterministic=True, **kwargs)['params'])), seed + 2)
  return module, params, kwargs, dictionary


def layer_logits(module, params, x, mask, kwargs):
  """The scaled scores [B,N,T,S] the layer's softmax sees (its sown attention_logits)."""
  _, state = module.apply({'params': params}, x, mask, deterministic=True,
                          mutable=['attention_logits'], **kwargs)
  return np.asarray(jax.tree.leaves(state['attention_logits'])[0], np.float64)


def inputs(b=2, t=7, d=32, seed=0):
  x = np.random.default_rng(seed).standard_normal((b, t, d)).astype(np.float32)
  return x, np.ones((b, 1, 1, t), bool)


# ---------------------------------------------------------------------------------------
# The rotation itself.

def test_the_rotation_is_the_complex_product_and_turns_relative():
  x = np.random.default_rng(0).standard_normal((2, 9, 3, 8)).astype(np.float32)
  for phase in (0.0, 2.5):
    got = rotary.rotate(jnp.asarray(x), rotary.angles(9, 8, 100.0, phase))
    np.testing.assert_allclose(got, numpy_rotate(x, 100.0, phase), atol=1e-5)
  # R(a)^T R(b) = R(b - a): turning queries and keys by t + c for any c leaves their
  # products as they are.
  y = np.random.default_rng(1).standard_normal(x.shape).astype(np.float32)
  product = lambda c: np.einsum('btnh,bsnh->bnts', *[np.asarray(rotary.rotate(
      jnp.asarray(v), rotary.angles(9, 8, 100.0, c)), np.float64) for v in (x, y)])
  np.testing.assert_allclose(product(7.0), product(0.0), atol=1e-4)
  assert np.abs(product(0.0) - np.einsum('btnh,bsnh->bnts', x, y)).max() > 0.1


@pytest.mark.parametrize('name', VARIANTS)
def test_scores_are_invariant_to_a_shift_of_every_position_but_see_the_order(name):
  """A row of real tokens after left padding gives the outputs it gives after right
  padding (each position moved by the same amount), while reversing the tokens does not
  reverse the outputs: the rotation brings relative positions, and only those."""
  cfg = config(name)
  rng = np.random.default_rng(1)
  real = rng.integers(5, 97, (1, 6)).astype(np.int32)
  pad = np.zeros((1, 3), np.int32)
  right_ids, left_ids = np.concatenate([real, pad], 1), np.concatenate([pad, real], 1)
  right_mask = (right_ids > 0).astype(np.int32)
  left_mask = (left_ids > 0).astype(np.int32)
  segments = np.zeros_like(right_ids)
  positions = np.zeros((1, 1), np.int32)
  model = BertForPretraining(cfg)
  params = perturb(jax.tree.map(np.asarray, nn.unbox(model.init(
      jax.random.key(0), right_ids, segments, right_mask, positions)['params'])))
  run = lambda ids, mask: np.asarray(model.apply({'params': params}, ids, segments, mask,
                                                 positions)['sequence_output'])
  right, left = run(right_ids, right_mask)[0, :6], run(left_ids, left_mask)[0, 3:]
  np.testing.assert_allclose(left, right, atol=2e-5, rtol=2e-5)
  reversed_out = run(np.concatenate([real[:, ::-1], pad], 1), right_mask)[0, :6][::-1]
  assert np.abs(reversed_out - right).max() > 1e-3


# ---------------------------------------------------------------------------------------
# What the rotation does to the symmetric variants' score matrices.

@pytest.mark.parametrize('name', ['symmetric', 'single'])
def test_q_equals_k_stays_symmetric_and_a_query_phase_breaks_it(name):
  x, mask = inputs()
  module, params, kwargs, _ = layer_and_params(name, config(name), x, mask)
  scores = layer_logits(module, params, x, mask, kwargs)
  scale = np.abs(scores).max()
  # score(i, j) = q_i^T R(j - i) q_j = score(j, i), to float32 rounding.
  np.testing.assert_allclose(scores, scores.swapaxes(-1, -2), atol=1e-6 * scale)
  phased = config(name, rope_query_phase=0.5)
  module = attention_lib.VARIANTS[name](phased, 1)
  scores = layer_logits(module, params, x, mask, kwargs)
  assert np.abs(scores - scores.swapaxes(-1, -2)).max() > 1e-2 * scale
  # The learned-table model's layer has the same parameters and symmetric scores too, but
  # they are another matrix: the rotation is applied.
  plain = attention_lib.VARIANTS[name](config(name, position_embeddings='learned'), 1)
  unrotated = layer_logits(plain, params, x, mask, kwargs)
  assert np.abs(unrotated - layer_logits(module.clone(config=config(name)), params, x, mask,
                                         kwargs)).max() > 1e-2 * scale


def shared_antisymmetric_part(s, diag, theta):
  """The closed form: per rotated pair p, (1/2)(a_2 b_1 - a_1 b_2) sin(w_p (j - i))
  (x_1 y_2 + x_2 y_1) / sqrt(H), summed over pairs; s [B,T,N,H] the shared projection,
  (a, b) the pair's d_q and d_k entries, x and y the pair of s at positions i and j."""
  b, t, n, h = s.shape
  a1, a2 = diag[0][:, 0::2], diag[0][:, 1::2]                     # [N, H/2]
  b1, b2 = diag[1][:, 0::2], diag[1][:, 1::2]
  x1, x2 = s[..., 0::2], s[..., 1::2]                              # [B, T, N, H/2]
  w = theta ** (-np.arange(0, h, 2) / h)
  delta = np.arange(t)[None, :] - np.arange(t)[:, None]            # [i, j] = j - i
  sin = np.sin(delta[:, :, None] * w)                              # [T, S, H/2]
  cross = (np.einsum('binp,bjnp->bnijp', x1, x2) + np.einsum('binp,bjnp->bnijp', x2, x1))
  coefficient = 0.5 * (a2 * b1 - a1 * b2)                          # [N, H/2]
  return np.einsum('bnijp,ijp,np->bnij', cross, sin, coefficient) / np.sqrt(h)


def test_shared_gets_a_direction_from_its_diagonals_in_closed_form():
  x, mask = inputs()
  cfg = config('shared', rope_theta=50.0)
  module, params, kwargs, _ = layer_and_params('shared', cfg, x, mask)
  s = np.asarray(x, np.float64) @ params['shared']['kernel'].reshape(32, -1).astype(np.float64)
  s = s.reshape(2, 7, 4, 8) + params['shared']['bias']
  scores = layer_logits(module, params, x, mask, kwargs)
  antisymmetric = 0.5 * (scores - scores.swapaxes(-1, -2))
  expected = shared_antisymmetric_part(s, params['diag'].astype(np.float64), 50.0)
  assert np.abs(expected).max() > 0.05  # Random-sign diagonals differ inside pairs.
  np.testing.assert_allclose(antisymmetric, expected, atol=2e-5 * np.abs(scores).max())
  # d_q = d_k: none.
  params = dict(params, diag=params['diag'].copy())
  params['diag'][1] = params['diag'][0]
  scores = layer_logits(module, params, x, mask, kwargs)
  np.testing.assert_allclose(scores, scores.swapaxes(-1, -2), atol=1e-6 * np.abs(scores).max())


# ---------------------------------------------------------------------------------------
# Every variant against NumPy.

@pytest.mark.parametrize('name', VARIANTS)
def test_attention_layer_with_rotary_against_numpy(name):
  """The layer's output against softmax(rot(q) rot(k)^T / sqrt(H)) v W_o in NumPy, with q, k
  and v as the variant defines them (test_variants.numpy_qkv: shared's Q = S d_q and
  K = S d_k apart, pairwise's query Q_h P_h) and a query phase."""
  phase = 0.0 if name in ('standard', 'shared') else 1.5
  cfg = config(name, rope_theta=500.0, rope_query_phase=phase)
  x, mask = inputs(t=6)
  pad = np.ones((2, 6), np.int32)
  pad[0, 4:] = 0
  mask = pad.astype(bool)[:, None, None, :]
  module, params, kwargs, dictionary = layer_and_params(name, cfg, x, mask)
  got = module.apply({'params': params}, x, mask, deterministic=True, **kwargs)
  q, k, v = numpy_qkv(name, params, x, cfg, dictionary, 1)
  q, k = numpy_rotate(q, 500.0, phase), numpy_rotate(k, 500.0)
  out = dict(params['out'])
  if name == 'masa':
    d = dictionary['o']
    out['kernel'] = np.einsum('a,a...->...', d['coefficients'][1], d['atoms'])
  np.testing.assert_allclose(got, numpy_attention(q, k, v, pad, out), atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------------
# Settings and the paths a model can take.

def test_rotary_has_no_table_and_no_length_limit():
  cfg = config('shared', max_position_embeddings=8)
  ids = np.full((1, 20), 7, np.int32)
  args = (ids, np.zeros_like(ids), np.ones_like(ids), np.zeros((1, 1), np.int32))
  params = nn.unbox(BertForPretraining(cfg).init(jax.random.key(0), *args)['params'])
  assert 'position_embeddings' not in params['bert']['embeddings']
  out = BertForPretraining(cfg).apply({'params': params}, *args)
  assert out['sequence_output'].shape == (1, 20, 32)
  learned = dataclasses.replace(cfg, position_embeddings='learned')
  with pytest.raises(UserError, match='exceed model.max_position_embeddings=8'):
    BertForPretraining(learned).init(jax.random.key(0), *args)
  # A pretraining config's rows may outrun the (unused) table size too.
  from sharedbert import config as sb_config
  from sharedbert.config import checks
  run = sb_config.pretrain_config('shared', 'tiny')
  run.model.update(position_embeddings='rotary', max_position_embeddings=16)
  run.data.seq_len = 64
  assert checks.pretrain(run).position_embeddings == 'rotary'
  run.model.position_embeddings = 'learned'
  with pytest.raises(UserError, match='exceeds model.max_position_embeddings=16'):
    checks.pretrain(run)


@pytest.mark.parametrize('value,match', [
    ('sinusoidal', "one of 'learned', 'rotary', 'none'"),
    ('false', "no longer a boolean; use 'learned'"),
])
def test_bad_position_settings_are_one_line_errors(value, match):
  import ml_collections
  with pytest.raises(UserError, match=match):
    ModelConfig.from_config(ml_collections.ConfigDict(dict(position_embeddings=value)))
  with pytest.raises(UserError, match='head width must be even'):
    ModelConfig(hidden_size=36, num_heads=4, position_embeddings='rotary').validate()
  with pytest.raises(UserError, match='apply to rotary positions only'):
    ModelConfig(rope_query_phase=1.0).validate()


def test_old_boolean_configs_map_to_the_new_values():
  import ml_collections
  for old, new in ((True, 'learned'), (False, 'none')):
    cfg = ModelConfig.from_config(ml_collections.ConfigDict(dict(position_embeddings=old)))
    assert cfg.position_embeddings == new


def _outputs(cfg, params, inputs_):
  return np.asarray(BertForPretraining(cfg).apply({'params': params}, *inputs_)['mlm_logits'],
                    np.float32)


def _tiny_inputs():
  from test_model import make_inputs
  return make_inputs(t=10)


@pytest.mark.parametrize('setting', [dict(scan_layers=True), dict(remat='full'),
                                     dict(attention_impl='fused'), dict(causal=True)])
def test_every_path_rotates_as_the_plain_one(setting):
  """scan, remat and the fused attention call compute what the unrolled einsum path does; a
  causal model's rows see only what is behind them (its last token's output equals the
  bidirectional model's on the whole row, its first token's does not)."""
  from sharedbert.models.layout import stack_layers
  inputs_ = _tiny_inputs()
  cfg = config('shared', rope_query_phase=0.5)
  params = perturb(jax.tree.map(np.asarray, nn.unbox(
      BertForPretraining(cfg).init(jax.random.key(0), *inputs_)['params'])))
  other = dataclasses.replace(cfg, **setting)
  other_params = stack_layers(params) if setting.get('scan_layers') else params
  if setting.get('causal'):
    ids, segments, mask, _ = inputs_
    run = lambda c: np.asarray(BertForPretraining(c).apply(
        {'params': params}, ids, segments, mask, np.zeros((3, 1), np.int32))['sequence_output'])
    bidirectional, causal = run(cfg), run(other)
    assert np.abs(causal[0, 0] - bidirectional[0, 0]).max() > 1e-3
    return
  np.testing.assert_allclose(_outputs(other, other_params, inputs_),
                             _outputs(cfg, params, inputs_), atol=2e-5, rtol=2e-5)


def test_bfloat16_rotary_stays_close_to_float32():
  inputs_ = _tiny_inputs()
  cfg = config('standard')
  params = jax.tree.map(np.asarray, nn.unbox(
      BertForPretraining(cfg).init(jax.random.key(0), *inputs_)['params']))
  low = dataclasses.replace(cfg, dtype=jnp.bfloat16)
  got, want = _outputs(low, params, inputs_), _outputs(cfg, params, inputs_)
  assert np.abs(got - want).max() < 0.05 * np.abs(want).max()


def test_flops_count_the_rotation_and_parameters_do_not_change():
  learned, turned = config('shared', position_embeddings='learned'), config('shared')
  f_learned = flops_lib.forward_flops(learned, 4, 16, 8)
  f_rotary = flops_lib.forward_flops(turned, 4, 16, 8)
  assert 'rotary' not in f_learned
  # Q and K of every layer, [B*T, D] each, three FLOPs an element.
  assert f_rotary['rotary'] == 2 * 2 * 3 * 4 * 16 * 32
  assert flops_lib.train_step_flops(turned, 4, 16, 8) - flops_lib.train_step_flops(
      learned, 4, 16, 8) == 2 * f_rotary['rotary']
  inputs_ = _tiny_inputs()
  count = lambda c: {k: sum(np.size(x) for x in jax.tree.leaves(v)) for k, v in nn.unbox(
      BertForPretraining(c).init(jax.random.key(0), *inputs_)['params'])['bert'].items()}
  a, b = count(learned), count(turned)
  assert a['layer_0'] == b['layer_0']                    # Attention: no parameters added.
  assert a['embeddings'] - b['embeddings'] == 16 * 32    # The table is gone.


def test_a_checkpoint_resumes_only_under_the_same_positions():
  """A resume must match the positions: a learned-table checkpoint refuses a rotary config
  (and another theta or phase), and a workdir from before rotary (its boolean True) is the
  learned table."""
  from sharedbert import train
  learned, turned = config('shared', position_embeddings='learned'), config('shared')
  old = dict(learned.to_dict(), position_embeddings=True)
  train._check_compatible({'model': old}, learned, 'W')
  for saved, current in ((learned, turned), (turned, config('shared', rope_theta=500.0)),
                         (turned, config('shared', rope_query_phase=1.0))):
    with pytest.raises(UserError, match='is of another model'):
      train._check_compatible({'model': saved.to_dict()}, current, 'W')
