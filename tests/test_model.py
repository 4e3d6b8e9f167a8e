"""The BERT model: shapes, padding masks, shared attention against NumPy, and identities."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sharedbert.models import attention as attention_lib
from sharedbert.models.bert import (BertEncoder, BertForPretraining, BertForSequenceClassification,
                                    ModelConfig, gelu)

TINY = dict(vocab_size=97, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
            max_position_embeddings=16, dropout_rate=0.0, attention_dropout_rate=0.0)


def make_inputs(b=3, t=10, p=4, vocab=97, seed=0):
  rng = np.random.default_rng(seed)
  ids = rng.integers(5, vocab, (b, t)).astype(np.int32)
  mask = np.ones((b, t), np.int32)
  mask[1, 6:] = 0  # Padding in one row.
  ids[mask == 0] = 0
  segments = np.zeros((b, t), np.int32)
  segments[:, 5:] = 1
  positions = rng.integers(1, 6, (b, p)).astype(np.int32)
  return ids, segments, mask, positions


def init(model, inputs, seed=0):
  return nn.unbox(model.init(jax.random.key(seed), *inputs)['params'])


@pytest.mark.parametrize('attention', ['standard', 'shared'])
def test_shapes(attention):
  cfg = ModelConfig(attention=attention, **TINY)
  inputs = make_inputs()
  model = BertForPretraining(cfg)
  params = init(model, inputs)
  out = model.apply({'params': params}, *inputs, return_hidden_states=True)
  assert out['mlm_logits'].shape == (3, 4, 97)
  assert out['mlm_logits'].dtype == jnp.float32
  assert out['sequence_output'].shape == (3, 10, 32)
  assert out['pooled_output'].shape == (3, 32)
  assert len(out['hidden_states']) == 3
  cls = BertForSequenceClassification(cfg, num_labels=3)
  cparams = init(cls, inputs[:3])
  assert cls.apply({'params': cparams}, *inputs[:3]).shape == (3, 3)


@pytest.mark.parametrize('attention', ['standard', 'shared'])
def test_padding_does_not_leak(attention):
  """Changing padded tokens leaves the outputs at real positions unchanged."""
  cfg = ModelConfig(attention=attention, **TINY)
  ids, seg, mask, pos = make_inputs()
  model = BertForPretraining(cfg)
  params = init(model, (ids, seg, mask, pos))
  a = model.apply({'params': params}, ids, seg, mask, pos)['sequence_output']
  ids2 = ids.copy()
  ids2[1, 6:] = 42
  b = model.apply({'params': params}, ids2, seg, mask, pos)['sequence_output']
  np.testing.assert_allclose(a[1, :6], b[1, :6], atol=1e-6)
  assert not np.allclose(a[1, 6:], b[1, 6:])


def test_mean_pooling_reads_the_real_tokens():
  """pooling='mean': the classifier reads the last layer averaged over the real tokens
  (checked against the encoder's own outputs); padding does not change it, and the same
  parameters give other logits with BERT's [CLS] pooler."""
  cfg = ModelConfig(attention='shared', **TINY)
  ids, seg, mask, _ = make_inputs()
  model = BertForSequenceClassification(cfg, num_labels=3, pooling='mean')
  params = init(model, (ids, seg, mask))
  logits = np.asarray(model.apply({'params': params}, ids, seg, mask))
  seq = BertEncoder(cfg).apply({'params': params['bert']}, ids, seg, mask)['sequence_output']
  seq = np.asarray(seq, np.float64)
  mean = (seq * mask[:, :, None]).sum(1) / mask.sum(1, keepdims=True)
  head = params['classifier']
  np.testing.assert_allclose(logits, mean @ head['kernel'] + head['bias'], atol=1e-5)
  ids2 = ids.copy()
  ids2[1, 6:] = 42  # Padded tokens changed: row 1's logits must not move.
  np.testing.assert_allclose(np.asarray(model.apply({'params': params}, ids2, seg, mask))[1],
                             logits[1], atol=1e-6)
  cls = BertForSequenceClassification(cfg, num_labels=3)  # Same parameter tree.
  assert not np.allclose(np.asarray(cls.apply({'params': params}, ids, seg, mask)), logits)


def test_every_parameter_has_logical_axes():
  for attention in ('standard', 'shared'):
    model = BertForPretraining(ModelConfig(attention=attention, **TINY))
    boxed = jax.eval_shape(lambda: model.init(jax.random.key(0), *make_inputs()))['params']
    leaves = jax.tree.leaves(boxed, is_leaf=lambda x: isinstance(x, nn.Partitioned))
    assert leaves and all(isinstance(x, nn.Partitioned) for x in leaves)
    for x in leaves:
      assert len(x.names) == len(x.value.shape)


def numpy_shared_attention(x, mask, p):
  """Plain NumPy reference: S = xW_s+b_s; Q,K,V = S*d; softmax(QK^T/sqrt(H)) V W_o + b_o."""
  kernel, bias, diag = p['shared']['kernel'], p['shared']['bias'], p['diag']
  s = np.einsum('btd,dnh->btnh', x, kernel) + bias
  q, k, v = s * diag[0], s * diag[1], s * diag[2]
  h = q.shape[-1]
  scores = np.einsum('btnh,bsnh->bnts', q, k) / np.sqrt(h)
  scores = np.where(mask[:, None, None, :] > 0, scores, -1e30)
  scores -= scores.max(-1, keepdims=True)
  probs = np.exp(scores)
  probs /= probs.sum(-1, keepdims=True)
  out = np.einsum('bnts,bsnh->btnh', probs, v)
  return np.einsum('btnh,nhd->btd', out, p['out']['kernel']) + p['out']['bias']


def test_shared_attention_matches_numpy():
  cfg = ModelConfig(attention='shared', **TINY)
  rng = np.random.default_rng(1)
  x = rng.normal(size=(2, 7, 32)).astype(np.float32)
  mask = np.ones((2, 7), np.int32)
  mask[0, 5:] = 0
  attn = attention_lib.VARIANTS['shared'](cfg)
  params = nn.unbox(attn.init(jax.random.key(0), x, mask.astype(bool)[:, None, None, :],
                              deterministic=True)['params'])
  # Random diagonals, so that d_q, d_k, d_v really differ.
  params['diag'] = jnp.asarray(rng.normal(size=params['diag'].shape).astype(np.float32))
  got = attn.apply({'params': params}, x, mask.astype(bool)[:, None, None, :], deterministic=True)
  want = numpy_shared_attention(x.astype(np.float64), mask,
                                jax.tree.map(lambda a: np.asarray(a, np.float64), params))
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_shared_with_unit_diagonals_equals_standard_with_tied_weights():
  inputs = make_inputs()
  shared = BertForPretraining(ModelConfig(attention='shared', diag_init_scheme='constant',
                                          **TINY))
  standard = BertForPretraining(ModelConfig(attention='standard', **TINY))
  sp = init(shared, inputs, seed=3)
  tp = init(standard, inputs, seed=4)
  for i in range(TINY['num_layers']):
    a = sp['bert'][f'layer_{i}']['attention']
    np.testing.assert_array_equal(a['diag'], 1.0)  # diag_init = 1, scheme 'constant'.
    ta = tp['bert'][f'layer_{i}']['attention']
    for role in ('query', 'key', 'value'):
      ta[role] = a['shared']
    ta['out'] = a['out']
    for name in ('attention_norm', 'mlp', 'output_norm'):
      tp['bert'][f'layer_{i}'][name] = sp['bert'][f'layer_{i}'][name]
  for name in ('embeddings', 'pooler'):
    tp['bert'][name] = sp['bert'][name]
  tp['mlm_head'] = sp['mlm_head']
  a = shared.apply({'params': sp}, *inputs)
  b = standard.apply({'params': tp}, *inputs)
  np.testing.assert_allclose(a['mlm_logits'], b['mlm_logits'], rtol=1e-5, atol=1e-5)
  # And with non-unit diagonals the two differ.
  sp['bert']['layer_0']['attention']['diag'] = sp['bert']['layer_0']['attention']['diag'] * 1.5
  c = shared.apply({'params': sp}, *inputs)
  assert not np.allclose(a['mlm_logits'], c['mlm_logits'], atol=1e-4)


def test_shared_attention_scores_are_symmetric():
  """S diag(d_q*d_k) S^T is symmetric for any parameters (why `symmetric` is its peer)."""
  rng = np.random.default_rng(0)
  s = rng.normal(size=(5, 8))
  dq, dk = rng.normal(size=8), rng.normal(size=8)
  scores = (s * dq) @ (s * dk).T
  np.testing.assert_allclose(scores, scores.T, atol=1e-12)


def test_mlm_head_gathers_before_projection_and_ties_embeddings():
  cfg = ModelConfig(attention='standard', **TINY)
  inputs = make_inputs()
  model = BertForPretraining(cfg)
  params = init(model, inputs)
  assert 'kernel' not in params['mlm_head'].get('decoder', {})  # Tied: no decoder matrix.
  out = model.apply({'params': params}, *inputs)
  seq, positions = np.asarray(out['sequence_output']), inputs[3]
  gathered = np.take_along_axis(seq, positions[..., None], axis=1)
  h = gathered @ np.asarray(params['mlm_head']['transform']['kernel']) + np.asarray(
      params['mlm_head']['transform']['bias'])
  h = np.asarray(jax.nn.gelu(h, approximate=False))
  mu, var = h.mean(-1, keepdims=True), h.var(-1, keepdims=True)
  n = params['mlm_head']['transform_norm']
  h = (h - mu) / np.sqrt(var + cfg.layer_norm_eps) * np.asarray(n['scale']) + np.asarray(n['bias'])
  logits = h @ np.asarray(params['bert']['embeddings']['word_embeddings']['embedding']).T
  logits += np.asarray(params['mlm_head']['output_bias'])
  np.testing.assert_allclose(out['mlm_logits'], logits, rtol=1e-4, atol=1e-4)


def test_gelu_is_the_exact_gelu():
  # The erf form (BERT's code) against jax's erfc form, values and derivatives, over the range
  # where pre-activations live and beyond; and x * Phi(x) from the normal CDF in float64.
  x = np.linspace(-12.0, 12.0, 20001).astype(np.float32)
  np.testing.assert_allclose(gelu(x), jax.nn.gelu(x, approximate=False), atol=2e-6, rtol=0)
  grad = jax.vmap(jax.grad(gelu))(x)
  grad_ref = jax.vmap(jax.grad(lambda v: jax.nn.gelu(v, approximate=False)))(x)
  np.testing.assert_allclose(grad, grad_ref, atol=2e-6, rtol=0)
  from scipy.special import ndtr  # float64 reference.
  np.testing.assert_allclose(gelu(x), x * ndtr(x.astype(np.float64)), atol=2e-6, rtol=0)


def test_bfloat16_compute_keeps_float32_params():
  cfg = ModelConfig(attention='shared', dtype=jnp.bfloat16, **TINY)
  inputs = make_inputs()
  model = BertForPretraining(cfg)
  params = init(model, inputs)
  assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(params))
  out = model.apply({'params': params}, *inputs)
  assert out['sequence_output'].dtype == jnp.bfloat16
  assert out['mlm_logits'].dtype == jnp.float32
  assert np.isfinite(np.asarray(out['mlm_logits'])).all()


@pytest.mark.parametrize('remat', ['full', 'dots'])
def test_remat_gives_the_same_gradients(remat):
  inputs = make_inputs()
  plain = BertForPretraining(ModelConfig(attention='shared', **TINY))
  params = init(plain, inputs)
  rematted = BertForPretraining(ModelConfig(attention='shared', remat=remat, **TINY))

  def loss(model, p):
    return jnp.sum(model.apply({'params': p}, *inputs)['mlm_logits'] ** 2)
  g1 = jax.grad(lambda p: loss(plain, p))(params)
  g2 = jax.grad(lambda p: loss(rematted, p))(params)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5), g1, g2)


def test_unknown_variant_is_a_user_error():
  from sharedbert.errors import UserError
  with pytest.raises(UserError, match='unknown attention variant'):
    ModelConfig(attention='nope', **TINY).validate()


def test_embeddings_are_the_three_table_lookups():
  """Token + position + segment rows, then LayerNorm: outputs and gradients equal the
  literal lookups (the segment rows come from a one-hot weighted sum, the positions from a
  slice)."""
  from sharedbert.models.bert import Embeddings
  cfg = ModelConfig(**TINY)
  ids, segments, _, _ = make_inputs()
  module = Embeddings(cfg)
  params = nn.unbox(module.init(jax.random.key(0), ids, segments, deterministic=True)['params'])
  weights = np.random.default_rng(1).normal(size=(*ids.shape, cfg.hidden_size))

  def reference(p):
    x = (jnp.take(p['word_embeddings']['embedding'], ids, axis=0)
         + jnp.take(p['position_embeddings']['embedding'], np.arange(ids.shape[1]), axis=0)
         + jnp.take(p['token_type_embeddings']['embedding'], segments, axis=0))
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    y = (x - mean) / jnp.sqrt(var + cfg.layer_norm_eps)
    return jnp.sum((y * p['LayerNorm']['scale'] + p['LayerNorm']['bias']) * weights)

  def ours(p):
    return jnp.sum(module.apply({'params': p}, ids, segments, deterministic=True) * weights)

  np.testing.assert_allclose(ours(params), reference(params), rtol=1e-6)
  # Sums of ~1e2 terms: differences of float32 rounding, relative to each table's scale.
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5,
                                                       atol=1e-6 * np.abs(b).max()),
               jax.grad(ours)(params), jax.grad(reference)(params))


def test_sequences_longer_than_the_position_table_are_refused():
  """A slice past the table's end would silently give fewer rows (a gather gave NaN rows)."""
  from sharedbert.errors import UserError
  model = BertForPretraining(ModelConfig(**TINY))  # 16 positions.
  ids = np.zeros((1, 17), np.int32)
  with pytest.raises(UserError, match='17 tokens exceed model.max_position_embeddings=16'):
    model.init(jax.random.key(0), ids, ids, np.ones_like(ids), np.zeros((1, 2), np.int32))


def test_training_step_scatters_only_into_the_word_table():
  """The segment and position tables take no scatter-add in the backward pass (on a GPU the
  segment table's, every token into one of 2 rows, is a queue of atomic adds on the same
  addresses), and the word table's runs in float32 in a bfloat16 model."""
  import re
  from sharedbert.lab.bench import run as bench
  timer = bench.BenchStep(bench.SIZES['smoke_fused_bf16'], 'standard')
  # The program as the model wrote it, before the backend's passes: XLA's CPU compiler may
  # turn a scatter into a loop (its older fusion emitter, which the tests use, does).
  hlo = timer.lowered.as_text(dialect='hlo')
  written = re.findall(r'= (\w+)\[([\d,]+)\]\S* scatter\(', hlo)
  c = timer.model_cfg
  tables = {f'{n},{c.hidden_size}' for n in (c.vocab_size, c.max_position_embeddings,
                                             c.type_vocab_size)}
  # One: into the word table, [vocabulary 128, D 32] (smoke size), in float32.
  assert [w for w in written if w[1] in tables] == [('f32', '128,32')], written


def test_one_hot_embeddings_give_the_same_numbers_without_a_scatter():
  """model.one_hot_embeddings: the word table's gradient as one_hot(ids)^T g, equal to the
  scatter-add's in float32; the compiled step then has no embedding scatter at all."""
  import dataclasses
  import re
  from sharedbert.lab.bench import run as bench
  inputs = make_inputs()
  plain = BertForPretraining(ModelConfig(**TINY))
  one_hot = BertForPretraining(ModelConfig(one_hot_embeddings=True, **TINY))
  params = init(plain, inputs)

  def loss(model, p):
    return jnp.sum(model.apply({'params': p}, *inputs)['mlm_logits'] ** 2)
  np.testing.assert_allclose(loss(one_hot, params), loss(plain, params), rtol=1e-6)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5,
                                                       atol=1e-6 * np.abs(b).max()),
               jax.grad(lambda p: loss(one_hot, p))(params),
               jax.grad(lambda p: loss(plain, p))(params))
  size = dataclasses.replace(bench.SIZES['smoke_fused_bf16'], one_hot_embeddings=True)
  hlo = bench.BenchStep(size, 'standard').compiled.as_text()
  assert not [l for l in hlo.split('\n') if ' scatter(' in l and '/embeddings/' in l]
  # Its gradient product instead: [vocabulary 128, D 32], in float32.
  assert re.search(r'= f32\[128,32\]\S* dot\(.*bert/embeddings/NV,ND->VD', hlo)


def test_attention_impls_agree_and_cudnn_needs_half_precision():
  """'fused' and 'cudnn' (which runs as 'fused' off a GPU) give the einsum path's numbers;
  'cudnn' refuses float32, as cuDNN's kernel would, before anything is traced."""
  from sharedbert.errors import UserError
  inputs = make_inputs()
  outs = {}
  for impl in ('xla', 'fused', 'cudnn'):
    model = BertForPretraining(ModelConfig(attention='shared', dtype=jnp.bfloat16,
                                           attention_impl=impl, **TINY))
    params = init(model, inputs)
    outs[impl] = np.asarray(model.apply({'params': params}, *inputs)['mlm_logits'])
  np.testing.assert_allclose(outs['fused'], outs['xla'], atol=2e-2)
  np.testing.assert_array_equal(outs['cudnn'], outs['fused'])
  with pytest.raises(UserError, match="attention_impl='cudnn' needs model.dtype bfloat16"):
    ModelConfig(attention_impl='cudnn', **TINY).validate()
  with pytest.raises(UserError, match="'xla', 'fused' or 'cudnn', not 'flash'"):
    ModelConfig(attention_impl='flash', **TINY).validate()


def test_fused_attention_with_attention_dropout_trains_on_the_einsum_path():
  """jax.nn.dot_product_attention has no dropout: with attention dropout on, a training step
  of 'fused' is the einsum path's, mask for mask, and the config says so (train.py logs it)."""
  inputs = make_inputs()
  config = dict(TINY, attention_dropout_rate=0.3)
  outs = {}
  for impl in ('xla', 'fused'):
    model = BertForPretraining(ModelConfig(attention='standard', attention_impl=impl, **config))
    params = init(model, inputs)
    outs[impl] = np.asarray(model.apply({'params': params}, *inputs, deterministic=False,
                                        rngs={'dropout': jax.random.key(1)})['mlm_logits'])
  np.testing.assert_array_equal(outs['fused'], outs['xla'])
  note = ModelConfig(attention_impl='fused', **config).attention_impl_note()
  assert "applies to evaluation only" in note and 'attention_dropout_rate=0.3' in note
  assert ModelConfig(attention_impl='fused', **TINY).attention_impl_note() is None
  assert ModelConfig(attention_impl='xla', **config).attention_impl_note() is None


@pytest.mark.parametrize('attention', ['standard', 'shared'])
@pytest.mark.parametrize('impl', ['xla', 'fused'])
def test_causal_attention_never_looks_ahead(attention, impl):
  """model.causal: a token's output is unchanged by any later token, and changed by an
  earlier one; without it, a later token changes it."""
  ids, seg, mask, pos = make_inputs()
  mask = np.ones_like(mask)
  for causal in (True, False):
    cfg = ModelConfig(attention=attention, causal=causal, attention_impl=impl, **TINY)
    model = BertEncoder(cfg)
    params = init(model, (ids, seg, mask))
    run = lambda x: np.asarray(model.apply({'params': params}, x, seg, mask)['sequence_output'])
    base = run(ids)
    later = ids.copy()
    later[:, 7:] = (later[:, 7:] + 11) % 97
    moved = run(later)
    if causal:
      np.testing.assert_allclose(moved[:, :7], base[:, :7], atol=1e-6)
    else:
      assert np.abs(moved[:, :7] - base[:, :7]).max() > 1e-4
    assert np.abs(moved[:, 7:] - base[:, 7:]).max() > 1e-4


def test_without_position_embeddings_the_encoder_sees_a_set():
  """model.position_embeddings='none': no position table, and permuting the tokens permutes
  the outputs (with it, the outputs change)."""
  ids, seg, mask, _ = make_inputs()
  seg, mask = np.zeros_like(seg), np.ones_like(mask)
  perm = np.random.default_rng(3).permutation(ids.shape[1])
  for with_positions in (False, True):
    cfg = ModelConfig(position_embeddings='learned' if with_positions else 'none', **TINY)
    model = BertEncoder(cfg)
    params = init(model, (ids, seg, mask))
    assert ('position_embeddings' in params['embeddings']) == with_positions
    out = np.asarray(model.apply({'params': params}, ids, seg, mask)['sequence_output'])
    permuted = np.asarray(model.apply({'params': params}, ids[:, perm], seg,
                                      mask)['sequence_output'])
    gap = np.abs(permuted - out[:, perm]).max()
    assert (gap < 1e-5) if not with_positions else (gap > 1e-3)
